/**
 * @module
 * The container half of the kuberuntime manager: builds a container's CRI config (command and
 * args with `$(VAR)` expansion, env, labels, annotations, log path, the volume and /etc/hosts
 * mounts from `kubelet_mounts.ts`, the termination-message mount, Linux resources and security
 * context), starts a container (image volumes through `image_volumes.ts`, image, create, start,
 * with upstream's events and SyncResult reasons), stops one (grace period rules, sidecar
 * termination order) and prunes old init containers; runs the postStart hook after a start (a
 * failure kills the container) and the preStop hook before a stop, within the grace period. Talks
 * to the CRI runtime and image services, the ImageManager and the lifecycle HandlerRunner; the
 * pod-level flow that calls all this is `kuberuntime_manager.ts`.
 * Corresponds to upstream `pkg/kubelet/kuberuntime/kuberuntime_container.go` (with the log paths
 * of `helpers.go` and `legacy.go`).
 */

import type { InternalContainerLifecycle } from "../cm/internal_container_lifecycle.ts";
import type { DeviceRunContainerOptions } from "../devicemanager/pod_devices.ts";
import type { PodStartupLatencyTracker } from "../pod_startup_latency_tracker.ts";
import type { V1Container, V1LifecycleHandler, V1Pod, V1Secret } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import type { Clock } from "../util/clock.ts";
import { CriError, criErrorText, GrpcCode, isCriCode } from "../cri/connection.ts";
import type { EventRecorder } from "../client/record.ts";
import { containerRef } from "../container/ref.ts";
import type { ImageManager } from "../images/image_manager.ts";
import { kobj, type Logger } from "../klog/klog.ts";
import { type HandlerMetrics, HandlerRunner } from "../lifecycle/handlers.ts";
import {
  getContainerInfoFromAnnotations,
  getContainerInfoFromLabels,
  newContainerAnnotations,
  newContainerLabels,
} from "./labels.ts";
import type { PodStatus } from "../container/pod_cache.ts";
import type { ImageManagerService } from "../cri/remote_image.ts";
import type { RuntimeService } from "../cri/remote_runtime.ts";
import { fail, type SyncErrorReason, type SyncResult } from "../container/sync_result.ts";
import { type EnvSource, makeEnvironmentVariables } from "../kubelet_env.ts";
import { CreateContainerConfigError, expandContainerCommandAndArgs } from "./expansion.ts";
import {
  determineEffectiveSecurityContext,
  effectiveSecurityContext,
  generateLinuxContainerResources,
  idMappedMounts,
  type ImageUser,
  type LinuxConfigOptions,
  selinuxRelabelAllowed,
  verifyRunAsNonRoot,
} from "./_container_linux.ts";
import { TerminationOrdering } from "./_termination_order.ts";
import { isRestartableInitContainer } from "../pod/podutil.ts";
import { buildPodLogsDirectory, generatePodHostNameAndDomain } from "./kuberuntime_sandbox.ts";
import { type ContainerMounter, MountsError } from "../kubelet_mounts.ts";
import type { ServiceSource } from "../envvars.ts";
import type { PodVolumesFunc } from "../volume/plugin.ts";
import {
  getImageVolumes,
  type ImageVolumeMetrics,
  type ImageVolumePulls,
  type ImageVolumes,
  incrementImageVolumeMetrics,
  mountedVolumeNames,
  toKubeContainerImageVolumes,
} from "./image_volumes.ts";
import { makeSymlink } from "../privilege/launcher_calls.ts";
import { removeIfExists } from "../util/remove.ts";

export { CreateContainerConfigError } from "./expansion.ts";
export type { LinuxConfigOptions } from "./_container_linux.ts";

/** A minimal shutdown window, to avoid needless SIGKILLs (upstream minimumGracePeriodInSeconds). */
export const MINIMUM_GRACE_PERIOD_SECONDS = 2;
/** The API default of `terminationMessagePath`. */
export const DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log";

/** The CRI calls the container functions make. */
export type ContainerRuntimeService = Pick<
  RuntimeService,
  "createContainer" | "startContainer" | "stopContainer" | "removeContainer" | "containerStatus"
>;

/** What the container functions need; the manager builds it once. */
export interface ContainerDeps {
  readonly runtime: ContainerRuntimeService;
  /** Records each container's image, creation and start in the pod's timeline. @default none */
  readonly startupTracker?: Pick<PodStartupLatencyTracker, "recordPhase">;
  /** For the image's default user (runAsNonRoot); without it that check fails loudly. */
  readonly imageService?: Pick<ImageManagerService, "imageStatus">;
  readonly imageManager: Pick<ImageManager, "ensureImageExists">;
  readonly recorder: EventRecorder;
  /** The lifecycle hooks' HTTPS-to-HTTP fallbacks and interrupted sleeps. @default none */
  readonly metrics?: HandlerMetrics;
  readonly logger: Logger;
  readonly clock: Clock;
  /** `<rootDirectory>/pods`: termination-message files live in `<uid>/containers/<name>/`. */
  readonly podsDirectory: string;
  /** config podLogsDir, the root of `<ns>_<name>_<uid>/<container>/<restartCount>.log`. */
  readonly podLogsDirectory: string;
  /** Where the legacy `<pod>_<ns>_<container>-<id>.log` symlinks go. @default "/var/log/containers" */
  readonly legacyContainerLogsDirectory?: string;
  readonly linux: LinuxConfigOptions;
  /**
   * Runs postStart and preStop hooks. @default a HandlerRunner over `runtime` when it has
   * ExecSync (exec hooks fail loudly otherwise)
   */
  readonly handlerRunner?: HandlerRunner;
  /**
   * ConfigMaps and Secrets for env and envFrom. @default none: a reference fails as upstream
   * does without a kube client (standalone)
   */
  readonly envSource?: EnvSource;
  /** The node's IPs, primary first, for status.hostIP(s). @default [] (those fail) */
  readonly hostIPs?: readonly string[];
  /**
   * The node's allocatable resources, the default of a missing limit in a resourceFieldRef.
   * @default none (a resourceFieldRef fails)
   */
  readonly nodeAllocatable?: () => Record<string, string> | undefined;
  /**
   * Volume mounts and the managed /etc/hosts (a KubeletMounts). @default none: a pod with
   * volumes fails as not supported yet, and containers keep the image's /etc/hosts
   */
  readonly kubeletMounts?: ContainerMounter;
  /** Cluster domain (config clusterDomain), for the pod's FQDN in /etc/hosts. @default "" */
  readonly clusterDomain?: string;
  /** The cluster's Services, for service link env. @default none: no service variables */
  readonly services?: ServiceSource;
  /** The pod's mounted volumes, for env `fileKeyRef`. @default none: such a ref fails */
  readonly podVolumes?: PodVolumesFunc;
  /** kubelet_image_volume_* counters. @default none: not counted */
  readonly imageVolumeMetrics?: ImageVolumeMetrics;
  /**
   * The container manager's hooks around a container's life (upstream
   * InternalContainerLifecycle: the CPU and memory managers' cpusets at creation, their
   * bookkeeping at start, the topology manager's at removal). @default none
   */
  readonly internalLifecycle?: InternalContainerLifecycle;
  /**
   * What the container's devices need (the device manager's run options: env, mounts, device
   * nodes, annotations, CDI devices); a rejection fails the container's config.
   * @default none: containers get no devices
   */
  readonly devices?: (
    pod: V1Pod,
    container: V1Container,
    signal?: AbortSignal,
  ) => Promise<DeviceRunContainerOptions | undefined>;
  /**
   * The CDI device names of the prepared ResourceClaims the container names (the DRA manager's
   * GetResources), added after the device plugins' ones; a throw fails the container's config.
   * @default none: no DRA devices
   */
  readonly draCdiDevices?: (pod: V1Pod, container: V1Container) => readonly string[];
}

const defaultRunners = new WeakMap<ContainerDeps, HandlerRunner>();

/** The deps' HandlerRunner, or one built once from the runtime. */
function handlerRunnerOf(deps: ContainerDeps): HandlerRunner {
  if (deps.handlerRunner) return deps.handlerRunner;
  let runner = defaultRunners.get(deps);
  if (!runner) {
    const runtime = deps.runtime as Partial<Pick<RuntimeService, "execSync">>;
    const execSync: RuntimeService["execSync"] = typeof runtime.execSync === "function"
      ? runtime.execSync.bind(runtime)
      : () =>
        Promise.reject(
          new Error("exec lifecycle hooks need ExecSync on the runtime: not supported yet"),
        );
    runner = new HandlerRunner({
      runtime: { execSync },
      logger: deps.logger,
      clock: deps.clock,
      recorder: deps.recorder,
      metrics: deps.metrics,
    });
    defaultRunners.set(deps, runner);
  }
  return runner;
}

/** A container as the runtime reports it, in upstream `kubecontainer.Status` terms. */
export interface KubeContainerStatus {
  readonly id: string;
  /** From the container-name label. */
  readonly name: string;
  readonly state: "created" | "running" | "exited" | "unknown";
  readonly exitCode: number;
  readonly reason: string;
  /** The hash annotation the container was created with. */
  readonly hash: number;
  readonly restartCount: number;
  /** Milliseconds since the epoch; 0 unless exited. */
  readonly finishedAt: number;
}

const STATES: Record<number, KubeContainerStatus["state"]> = {
  [api.ContainerState.CONTAINER_CREATED]: "created",
  [api.ContainerState.CONTAINER_RUNNING]: "running",
  [api.ContainerState.CONTAINER_EXITED]: "exited",
};

/** One CRI container status in kubecontainer terms (upstream toKubeContainerStatus). */
export function toKubeContainerStatus(s: api.ContainerStatus): KubeContainerStatus {
  const { info } = getContainerInfoFromAnnotations(s.annotations);
  const exited = s.state === api.ContainerState.CONTAINER_EXITED;
  return {
    id: s.id,
    name: getContainerInfoFromLabels(s.labels).containerName || (s.metadata?.name ?? ""),
    state: STATES[s.state] ?? "unknown",
    exitCode: exited ? s.exitCode : 0,
    reason: exited ? s.reason : "",
    hash: info.hash,
    restartCount: info.restartCount,
    finishedAt: exited ? Number(s.finishedAt / 1_000_000n) : 0,
  };
}

/** The pod's containers in kubecontainer terms, newest first as the PodStatus holds them. */
export function toKubeContainerStatuses(podStatus: PodStatus): KubeContainerStatus[] {
  return podStatus.containerStatuses.map(toKubeContainerStatus);
}

/** upstream FindContainerStatusByName: the newest container of that name. */
export function findContainerStatus(
  statuses: readonly KubeContainerStatus[],
  name: string,
): KubeContainerStatus | undefined {
  return statuses.find((s) => s.name === name);
}

/** upstream format.Pod: `<name>_<namespace>(<uid>)`. */
export function formatPod(pod: V1Pod): string {
  return `${pod.metadata?.name ?? ""}_${pod.metadata?.namespace ?? ""}(${pod.metadata?.uid ?? ""})`;
}

/** `<podLogsDir>/<ns>_<name>_<uid>/<containerName>` (upstream BuildContainerLogsDirectory). */
export function buildContainerLogsDirectory(
  podLogsDir: string,
  namespace: string,
  podName: string,
  podUID: string,
  containerName: string,
): string {
  return `${buildPodLogsDirectory(podLogsDir, namespace, podName, podUID)}/${containerName}`;
}

/** `<containerName>/<restartCount>.log`, relative to the sandbox's log directory. */
export function buildContainerLogsPath(containerName: string, restartCount: number): string {
  return `${containerName}/${restartCount}.log`;
}

/** The description of a CRI error as gRPC's status message (upstream `s.Message()`). */
export function statusMessage(e: unknown): string {
  if (e instanceof CriError) return e.details;
  return e instanceof Error ? e.message : String(e);
}

/** What {@link generateContainerConfig} builds a config from. */
export interface ContainerConfigRequest {
  readonly pod: V1Pod;
  readonly container: V1Container;
  readonly restartCount: number;
  /** The image as the runtime knows it, from the ImageManager. */
  readonly imageRef: string;
  /**
   * The image's status as the ImageManager just read it, for its default user; without it
   * ImageStatus is asked again (as upstream always does). @default none
   */
  readonly image?: api.Image;
  /** The pod's IPs, for status.podIP(s) in the env. @default [] */
  readonly podIPs?: readonly string[];
  /**
   * An ephemeral container's target: the id of the container whose process namespace it joins
   * (upstream getTargetID; the PID namespace mode TARGET). @default none
   */
  readonly targetId?: string;
  /**
   * The image specs of the image volumes the container mounts, by volume name (from
   * {@link getImageVolumes}); a mount of an image volume not in it fails. @default none
   */
  readonly imageVolumes?: ImageVolumes;
}

/**
 * An ephemeral container with a target shares that container's PID namespace (upstream
 * applyPlatformSpecificContainerConfig: NamespaceMode_TARGET and TargetId).
 */
function targetPidNamespace(
  sc: api.LinuxContainerSecurityContext,
  targetId: string | undefined,
): api.LinuxContainerSecurityContext {
  if (targetId === undefined) return sc;
  sc.namespaceOptions = api.NamespaceOption.create({
    ...sc.namespaceOptions,
    pid: api.NamespaceMode.TARGET,
    targetId,
  });
  return sc;
}

/**
 * The CRI config of one container (upstream generateContainerConfig). Throws
 * {@link CreateContainerConfigError} for what the container asks and cannot be given.
 */
export async function generateContainerConfig(
  deps: ContainerDeps,
  req: ContainerConfigRequest,
  signal?: AbortSignal,
): Promise<api.ContainerConfig> {
  const { pod, restartCount } = req;
  const container = withApiDefaults(req.container);
  checkSupported(deps, pod, container);
  const user = await getImageUser(deps, pod, container, req.image, signal);
  const nonRoot = verifyRunAsNonRoot(pod, container, user, formatPod(pod));
  if (nonRoot !== undefined) throw new CreateContainerConfigError(nonRoot);
  // Upstream GenerateRunContainerOptions asks the container manager for the devices first:
  // their env comes before the container's own, their mounts and devices before the volumes'.
  let devices: DeviceRunContainerOptions | undefined;
  let cdiDevices: string[];
  try {
    devices = await deps.devices?.(pod, container, signal);
    // Upstream GetResources appends the DRA claims' CDI devices to the device plugins'.
    cdiDevices = [
      ...new Set([...(devices?.cdiDevices ?? []), ...(deps.draCdiDevices?.(pod, container) ?? [])]),
    ];
  } catch (e) {
    throw new CreateContainerConfigError(criErrorText(e), { cause: e });
  }
  const containerEnvs = await makeEnvironmentVariables({
    pod,
    container,
    podIPs: req.podIPs ?? [],
    hostIPs: deps.hostIPs ?? [],
    nodeAllocatable: deps.nodeAllocatable?.(),
    source: deps.envSource,
    recorder: deps.recorder,
    services: deps.services,
    podVolumes: deps.podVolumes,
    logger: deps.logger,
    signal,
  });
  const envs = [...(devices?.envs ?? []), ...containerEnvs];
  const { command, args } = expandContainerCommandAndArgs(container, envs);
  const volumeMounts = await makeKubeletMounts(
    deps,
    pod,
    container,
    req.podIPs ?? [],
    envs,
    req.imageVolumes,
    signal,
  );
  const linux = api.LinuxContainerConfig.create({
    resources: generateLinuxContainerResources(pod, container, deps.linux),
    securityContext: targetPidNamespace(
      determineEffectiveSecurityContext(pod, container, user, deps.linux),
      req.targetId,
    ),
  });

  const meta = pod.metadata ?? {};
  const logDir = buildContainerLogsDirectory(
    deps.podLogsDirectory,
    meta.namespace ?? "",
    meta.name ?? "",
    meta.uid ?? "",
    container.name,
  );
  try {
    Deno.mkdirSync(logDir, { recursive: true, mode: 0o755 });
  } catch (e) {
    throw new CreateContainerConfigError(
      `create container log directory for container ${container.name} failed: ${criErrorText(e)}`,
      { cause: e },
    );
  }
  const encoder = new TextEncoder();
  return api.ContainerConfig.create({
    metadata: { name: container.name, attempt: restartCount },
    image: api.ImageSpec.create({ image: req.imageRef, userSpecifiedImage: container.image ?? "" }),
    command,
    args,
    workingDir: container.workingDir ?? "",
    envs: envs.map((e) => ({ key: e.name, value: encoder.encode(e.value) })),
    // Volume mounts and /etc/hosts first, then the termination log, as upstream appends it.
    mounts: idMappedMounts(
      makeMounts(deps, pod, container, [...deviceMounts(devices), ...volumeMounts]),
      linux.securityContext?.namespaceOptions?.usernsOptions,
    ),
    devices: [...(devices?.devices ?? []), ...makeBlockVolumes(deps, pod, container)],
    labels: newContainerLabels(container, pod),
    annotations: newContainerAnnotations(container, pod, restartCount, {
      annotations: devices?.annotations,
    }),
    CDIDevices: cdiDevices.map((name) => ({ name })),
    logPath: buildContainerLogsPath(container.name, restartCount),
    stdin: container.stdin ?? false,
    stdinOnce: container.stdinOnce ?? false,
    tty: container.tty ?? false,
    linux,
  });
}

/** The devices' mounts as CRI mounts: private, never relabelled (upstream makeMounts). */
function deviceMounts(devices: DeviceRunContainerOptions | undefined): api.Mount[] {
  return (devices?.mounts ?? []).map((m) =>
    api.Mount.create({
      containerPath: m.containerPath,
      hostPath: m.hostPath,
      readonly: m.readOnly,
      propagation: api.MountPropagation.PROPAGATION_PRIVATE,
    })
  );
}

/**
 * upstream makeBlockVolumes: each of the container's volumeDevices as a CRI device, the host
 * path being the block volume's link in the pod's `volumeDevices` directory (the runtime
 * follows it to the device), "mrw", or "r" for a read-only claim.
 */
function makeBlockVolumes(deps: ContainerDeps, pod: V1Pod, container: V1Container): api.Device[] {
  const devices: api.Device[] = [];
  const volumes = deps.podVolumes?.(pod.metadata?.uid ?? "");
  for (const d of container.volumeDevices ?? []) {
    if (!d.devicePath.startsWith("/")) {
      throw new CreateContainerConfigError(
        `error DevicePath \`${d.devicePath}\` must be an absolute path`,
      );
    }
    const v = volumes?.get(d.name);
    if (!v) {
      throw new CreateContainerConfigError(
        `cannot find volume "${d.name}" to pass into container "${container.name}"`,
      );
    }
    devices.push({
      containerPath: d.devicePath,
      hostPath: v.hostPath,
      permissions: v.readOnly ? "r" : "mrw",
    });
  }
  return devices;
}

/** The defaults the apiserver (or the static pod source) fills in, for pods that lack them. */
function withApiDefaults(c: V1Container): V1Container {
  return {
    ...c,
    terminationMessagePath: c.terminationMessagePath || DEFAULT_TERMINATION_MESSAGE_PATH,
    terminationMessagePolicy: c.terminationMessagePolicy || "File",
  };
}

/** Fails loudly for what this container asks and the agent was built without. */
function checkSupported(deps: ContainerDeps, pod: V1Pod, container: V1Container): void {
  if (
    !deps.kubeletMounts &&
    ((pod.spec?.volumes?.length ?? 0) > 0 || (container.volumeMounts?.length ?? 0) > 0)
  ) {
    throw new CreateContainerConfigError("volumes are not supported yet");
  }
}

/** upstream getImageUser: the image's uid, or its user name, or root when it names neither. */
async function getImageUser(
  deps: ContainerDeps,
  pod: V1Pod,
  container: V1Container,
  known: api.Image | undefined,
  signal?: AbortSignal,
): Promise<ImageUser> {
  if (known) return userOf(known);
  if (!deps.imageService) {
    const sc = effectiveSecurityContext(pod, container);
    if (sc.runAsNonRoot && sc.runAsUser == null) {
      throw new CreateContainerConfigError(
        "runAsNonRoot without runAsUser needs the image's user, and no image service is " +
          "configured: not supported yet",
      );
    }
    return { username: "" };
  }
  const res = await deps.imageService.imageStatus(
    api.ImageSpec.create({ image: container.image ?? "" }),
    false,
    signal,
  );
  return userOf(res.image);
}

/** The image's uid, or its user name, or root when it names neither. */
function userOf(image: api.Image | undefined): ImageUser {
  if (image?.uid) return { uid: image.uid.value, username: "" };
  if (image && image.username !== "") return { username: image.username };
  return { uid: 0n, username: "" };
}

/**
 * The container's volume mounts and managed /etc/hosts from `deps.kubeletMounts` (upstream
 * GenerateRunContainerOptions: hostname and domain as the sandbox's, then makeMounts); none
 * without it. Their failures are CreateContainerConfigErrors with upstream's message.
 */
async function makeKubeletMounts(
  deps: ContainerDeps,
  pod: V1Pod,
  container: V1Container,
  podIPs: readonly string[],
  envs: readonly { name: string; value: string }[],
  imageVolumes: ImageVolumes | undefined,
  signal?: AbortSignal,
): Promise<api.Mount[]> {
  if (!deps.kubeletMounts) return [];
  let hostname: string;
  let domain: string;
  try {
    ({ hostname, domain } = generatePodHostNameAndDomain(
      pod,
      deps.clusterDomain ?? "",
      deps.logger,
    ));
  } catch (e) {
    throw new CreateContainerConfigError(criErrorText(e), { cause: e });
  }
  try {
    return await deps.kubeletMounts.makeMounts({
      pod,
      container,
      podIPs,
      hostname,
      domain,
      envs,
      imageVolumes,
      signal,
    });
  } catch (e) {
    if (e instanceof MountsError) throw new CreateContainerConfigError(e.message, { cause: e });
    throw e;
  }
}

/**
 * upstream makeMounts: the kubelet's mounts, each relabelled only when SELinux is enabled on the
 * host, then the termination-message mount: an empty file, world-writable as upstream makes it,
 * under `<podsDirectory>/<uid>/containers/<name>/`, named at random per container instance.
 * Failing to create it is logged and the container runs without it, as upstream.
 */
function makeMounts(
  deps: ContainerDeps,
  pod: V1Pod,
  container: V1Container,
  kubeletMounts: readonly api.Mount[],
): api.Mount[] {
  const selinux = selinuxRelabelAllowed(deps.linux);
  const mounts = kubeletMounts.map((m) => ({ ...m, selinuxRelabel: m.selinuxRelabel && selinux }));
  const path = container.terminationMessagePath;
  if (!path) return mounts;
  const dir = `${deps.podsDirectory}/${pod.metadata?.uid ?? ""}/containers/${container.name}`;
  const file = `${dir}/${randomUid()}`;
  try {
    Deno.mkdirSync(dir, { recursive: true, mode: 0o750 });
    Deno.writeFileSync(file, new Uint8Array(), { createNew: true });
    Deno.chmodSync(file, 0o666);
  } catch (e) {
    deps.logger.error(e, "Error on creating termination-log file", { path: file });
    return mounts;
  }
  mounts.push(api.Mount.create({ hostPath: file, containerPath: path, selinuxRelabel: selinux }));
  return mounts;
}

/** upstream makeUID: 8 random hex digits. */
function randomUid(): string {
  const [n = 0] = crypto.getRandomValues(new Uint32Array(1));
  return n.toString(16).padStart(8, "0");
}

/** upstream calcRestartCountByLogDir: one more than the highest `<n>.log` already there. */
export function calcRestartCountByLogDir(path: string): number {
  let restartCount = 0;
  try {
    for (const entry of Deno.readDirSync(path)) {
      if (entry.isDirectory) continue;
      const m = /^(\d+)\.log(\..*)?/.exec(entry.name);
      if (!m) continue;
      const count = Number(m[1]) + 1;
      if (Number.isSafeInteger(count) && count > restartCount) restartCount = count;
    }
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return 0;
    throw e;
  }
  return restartCount;
}

/** {@link calcRestartCountByLogDir}, 0 (logged) when the directory cannot be read. */
function restartCountFromLogs(deps: ContainerDeps, logDir: string): number {
  try {
    return calcRestartCountByLogDir(logDir);
  } catch (e) {
    deps.logger.info("Cannot calculate restartCount from the log directory", {
      err: criErrorText(e),
    });
    return 0;
  }
}

/** What {@link startContainer} starts. */
export interface StartContainerRequest {
  readonly sandboxId: string;
  readonly sandboxConfig: api.PodSandboxConfig;
  readonly pod: V1Pod;
  readonly container: V1Container;
  readonly podStatus: PodStatus;
  readonly pullSecrets: readonly V1Secret[];
  /** The pod's IPs (of a sandbox just created, say). @default podStatus.ips */
  readonly podIPs?: readonly string[];
  /** An ephemeral container's target container id (see ContainerConfigRequest). @default none */
  readonly targetId?: string;
  /**
   * The pulls of the pod's image volumes, made once for the sync (upstream SyncPod's
   * getImageVolumes). @default none: the image volumes this container mounts are pulled here
   */
  readonly imageVolumePulls?: ImageVolumePulls;
}

/** Why a start failed: the SyncResult error and upstream's message. */
export interface StartContainerFailure {
  readonly reason: SyncErrorReason;
  readonly message: string;
}

/**
 * upstream startContainer: ensures the images of the image volumes the container mounts
 * (upstream toKubeContainerImageVolumes; a failed pull fails the start with its reason) and the
 * container's image, creates and starts the container, recording Created / Started / Failed
 * events on it, then runs its postStart hook (on failure: a FailedPostStartHook event, the
 * container killed, PostStartHookError). Resolves with the failure, or undefined on success;
 * throws only when `signal` aborts.
 */
export async function startContainer(
  deps: ContainerDeps,
  signal: AbortSignal,
  req: StartContainerRequest,
): Promise<StartContainerFailure | undefined> {
  const { pod, container } = req;
  const pulls = req.imageVolumePulls ?? await getImageVolumes(deps, signal, {
    pod,
    sandboxConfig: req.sandboxConfig,
    pullSecrets: req.pullSecrets,
    volumeNames: mountedVolumeNames(container),
  });
  // Failing here, after the pulls, gives the container the pull's reason (ErrImagePull...).
  const volumes = toKubeContainerImageVolumes(deps, pulls, pod, container);
  if ("failure" in volumes) return volumes.failure;
  const failure = await startWithImageVolumes(deps, signal, req, volumes.imageVolumes);
  if (deps.imageVolumeMetrics) {
    incrementImageVolumeMetrics(deps.imageVolumeMetrics, failure, container, volumes.imageVolumes);
  }
  return failure;
}

/** {@link startContainer} once the container's image volumes are pulled. */
async function startWithImageVolumes(
  deps: ContainerDeps,
  signal: AbortSignal,
  req: StartContainerRequest,
  imageVolumes: ImageVolumes,
): Promise<StartContainerFailure | undefined> {
  const { pod, container } = req;
  const event = (
    type: "Normal" | "Warning",
    reason: string,
    message: string,
    containerId = "",
  ) => {
    // Runtime errors often name the container id, which would defeat event de-duplication.
    const text = containerId === "" ? message : message.replaceAll(containerId, container.name);
    deps.recorder.event(containerRef(pod, container.name), type, reason, text);
  };

  const image = await deps.imageManager.ensureImageExists(signal, {
    pod,
    container,
    pullSecrets: req.pullSecrets,
    sandboxConfig: req.sandboxConfig,
  });
  if ("error" in image) {
    event("Warning", "Failed", `Error: ${image.error.reason}`);
    return { reason: image.error.reason, message: image.error.message };
  }
  deps.startupTracker?.recordPhase(pod, "imagePulled", container.name);

  let config: api.ContainerConfig;
  try {
    const previous = findContainerStatus(toKubeContainerStatuses(req.podStatus), container.name);
    const meta = pod.metadata ?? {};
    const restartCount = previous ? previous.restartCount + 1 : restartCountFromLogs(
      deps,
      buildContainerLogsDirectory(
        deps.podLogsDirectory,
        meta.namespace ?? "",
        meta.name ?? "",
        meta.uid ?? "",
        container.name,
      ),
    );
    config = await generateContainerConfig(
      deps,
      {
        pod,
        container,
        restartCount,
        imageRef: image.imageRef,
        image: image.image,
        podIPs: req.podIPs ?? req.podStatus.ips,
        targetId: req.targetId,
        imageVolumes,
      },
      signal,
    );
  } catch (e) {
    signal.throwIfAborted();
    const message = statusMessage(e);
    event("Warning", "Failed", `Error: ${message}`);
    return { reason: "CreateContainerConfigError", message };
  }

  try {
    deps.internalLifecycle?.preCreateContainer(pod, container, config);
  } catch (e) {
    const message = statusMessage(e);
    event("Warning", "Failed", `Internal PreCreateContainer hook failed: ${message}`);
    return { reason: "PreCreateHookError", message };
  }

  let containerId: string;
  try {
    containerId = await deps.runtime.createContainer(
      req.sandboxId,
      config,
      req.sandboxConfig,
      signal,
    );
  } catch (e) {
    signal.throwIfAborted();
    const message = statusMessage(e);
    event("Warning", "Failed", `Error: ${message}`);
    return { reason: "CreateContainerError", message };
  }
  try {
    deps.internalLifecycle?.preStartContainer(pod, container, containerId);
  } catch (e) {
    const message = statusMessage(e);
    event("Warning", "Failed", `Internal PreStartContainer hook failed: ${message}`, containerId);
    return { reason: "PreStartHookError", message };
  }
  event("Normal", "Created", "Container created", containerId);
  deps.startupTracker?.recordPhase(pod, "containerCreated", container.name);

  try {
    await deps.runtime.startContainer(containerId, signal);
  } catch (e) {
    signal.throwIfAborted();
    const message = statusMessage(e);
    event("Warning", "Failed", `Error: ${message}`, containerId);
    return { reason: "RunContainerError", message };
  }
  event("Normal", "Started", "Container started", containerId);
  deps.startupTracker?.recordPhase(pod, "containerStarted", container.name);
  await linkLegacyLog(deps, req, config, containerId);

  const postStart = container.lifecycle?.postStart;
  if (postStart) {
    const msg = await handlerRunnerOf(deps).run(
      signal,
      containerId,
      pod,
      req.podStatus.ips,
      container,
      postStart,
    );
    if (msg !== undefined) {
      signal.throwIfAborted();
      deps.logger.error(new Error(msg), "Failed to execute PostStartHook", {
        pod: kobj(pod),
        podUID: pod.metadata?.uid ?? "",
        containerName: container.name,
        containerID: containerId,
      });
      // The hook's message stays out of the event so that secrets do not leak.
      event("Warning", "FailedPostStartHook", "PostStartHook failed", containerId);
      try {
        await killContainer(deps, signal, {
          pod,
          containerId,
          containerName: container.name,
          message: "FailedPostStartHook",
          reason: "FailedPostStartHook",
          podIPs: req.podStatus.ips,
        });
      } catch (e) {
        signal.throwIfAborted();
        deps.logger.error(e, "Failed to kill container", {
          pod: kobj(pod),
          podUID: pod.metadata?.uid ?? "",
          containerName: container.name,
          containerID: containerId,
        });
      }
      return { reason: "PostStartHookError", message: msg };
    }
  }
  return undefined;
}

const EXT4_MAX_FILE_NAME_LEN = 255;

/**
 * upstream legacyLogSymlink: `<dir>/<pod>_<namespace>_<container>-<id>.log`, the name cut to what
 * ext4 allows.
 */
export function legacyLogSymlink(
  dir: string | undefined,
  containerId: string,
  containerName: string,
  podName: string,
  podNamespace: string,
): string {
  const name = `${podName}_${podNamespace}_${containerName}-${containerId}`
    .slice(0, EXT4_MAX_FILE_NAME_LEN - ".log".length);
  return `${(dir ?? "/var/log/containers").replace(/(.)\/+$/, "$1")}/${name}.log`;
}

/**
 * The `/var/log/containers/<pod>_<ns>_<container>-<id>.log` symlink logging agents read
 * (upstream legacyLogSymlink); made only when the log file exists, failures logged.
 */
async function linkLegacyLog(
  deps: ContainerDeps,
  req: StartContainerRequest,
  config: api.ContainerConfig,
  containerId: string,
): Promise<void> {
  const logDirectory = req.sandboxConfig.logDirectory;
  if (logDirectory === "" || config.logPath === "") return;
  const target = `${logDirectory.replace(/\/+$/, "")}/${config.logPath}`;
  const sandbox = req.sandboxConfig.metadata;
  const link = legacyLogSymlink(
    deps.legacyContainerLogsDirectory,
    containerId,
    config.metadata?.name ?? "",
    sandbox?.name ?? "",
    sandbox?.namespace ?? "",
  );
  try {
    Deno.lstatSync(target);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return;
  }
  try {
    await makeSymlink(target, link);
  } catch (e) {
    deps.logger.error(e, "Failed to create legacy symbolic link", {
      path: link,
      containerID: containerId,
      containerLogPath: target,
    });
  }
}

/** Why a container is killed (upstream containerKillReason); "" when not said. */
export type ContainerKillReason =
  | ""
  | "StartupProbe"
  | "LivenessProbe"
  | "FailedPostStartHook"
  | "RestartAllContainers"
  | "Unknown";

/** What {@link killContainer} stops. */
export interface KillContainerRequest {
  /** Undefined for an orphan: the grace period then comes from the container's annotations. */
  readonly pod: V1Pod | undefined;
  readonly containerId: string;
  readonly containerName: string;
  /** The Killing event's message; "" gives "Stopping container <name>". */
  readonly message: string;
  readonly reason: ContainerKillReason;
  /** Seconds that replace the pod's grace period. */
  readonly gracePeriodOverride?: number;
  readonly ordering?: TerminationOrdering;
  /** The pod's IPs, for an httpGet preStop hook without a host. @default [] */
  readonly podIPs?: readonly string[];
}

/**
 * upstream killContainer: records a Killing event, runs the preStop hook (its time counted
 * against the grace period) and stops the container with its grace period
 * (deletionGracePeriodSeconds, else the probe's or the pod's terminationGracePeriodSeconds,
 * replaced by the override, never under 2 s). Throws the runtime's error; NotFound counts as
 * stopped.
 */
export async function killContainer(
  deps: ContainerDeps,
  signal: AbortSignal,
  req: KillContainerRequest,
): Promise<void> {
  let pod: V1Pod;
  let spec: V1Container;
  if (req.pod) {
    pod = req.pod;
    const found = [...(pod.spec?.containers ?? []), ...(pod.spec?.initContainers ?? [])]
      .find((c) => c.name === req.containerName);
    if (!found) {
      throw new Error(
        `failed to get containerSpec ${JSON.stringify(req.containerName)} (id=${
          JSON.stringify(req.containerId)
        }) in pod ${JSON.stringify(formatPod(pod))} when killing container for reason ${
          JSON.stringify(req.message)
        }`,
      );
    }
    spec = found;
  } else {
    ({ pod, container: spec } = await restoreSpecsFromContainerLabels(
      deps,
      req.containerId,
      signal,
    ));
  }

  let gracePeriod = terminationGracePeriod(pod, spec, req.reason);
  const message = req.message || `Stopping container ${spec.name}`;
  deps.recorder.event(
    containerRef(pod, spec.name),
    "Normal",
    "Killing",
    message.replaceAll(req.containerId, spec.name),
  );
  if (req.gracePeriodOverride !== undefined) gracePeriod = req.gracePeriodOverride;
  const log = deps.logger.with({
    pod: `${pod.metadata?.namespace ?? ""}/${pod.metadata?.name ?? ""}`,
    podUID: pod.metadata?.uid ?? "",
    containerName: req.containerName,
    containerID: req.containerId,
  });
  const preStop = spec.lifecycle?.preStop;
  if (preStop && gracePeriod > 0) {
    gracePeriod -= await executePreStopHook(deps, signal, {
      pod,
      spec,
      containerId: req.containerId,
      podIPs: req.podIPs ?? [],
      gracePeriod,
      handler: preStop,
      log,
    });
  }
  if (req.ordering && gracePeriod > 0) {
    gracePeriod -= Math.trunc(await req.ordering.waitForTurn(spec.name, gracePeriod, signal));
  }
  gracePeriod = Math.max(gracePeriod, MINIMUM_GRACE_PERIOD_SECONDS);
  log.v(2).info("Killing container with a grace period", { gracePeriod });
  try {
    await deps.runtime.stopContainer(req.containerId, gracePeriod, signal);
  } catch (e) {
    if (!isCriCode(e, GrpcCode.NOT_FOUND)) {
      signal.throwIfAborted();
      log.error(e, "Container termination failed with gracePeriod", { gracePeriod });
      throw e;
    }
  }
  log.v(3).info("Container exited normally");
  req.ordering?.containerTerminated(spec.name);
}

/**
 * upstream executePreStopHook: runs the hook for at most `gracePeriod` seconds (then gives up
 * on it, aborting it) and returns the whole seconds it took. A failure is a FailedPreStopHook
 * event without the hook's message.
 */
async function executePreStopHook(
  deps: ContainerDeps,
  signal: AbortSignal,
  args: {
    pod: V1Pod;
    spec: V1Container;
    containerId: string;
    podIPs: readonly string[];
    gracePeriod: number;
    handler: V1LifecycleHandler;
    log: Logger;
  },
): Promise<number> {
  const { pod, spec, containerId, log } = args;
  log.v(3).info("Running preStop hook");
  const start = deps.clock.now();
  const stop = new AbortController();
  const hookSignal = AbortSignal.any([signal, stop.signal]);
  const hook = handlerRunnerOf(deps)
    .run(hookSignal, containerId, pod, args.podIPs, spec, args.handler)
    .then((msg) => {
      if (msg === undefined || stop.signal.aborted || signal.aborted) return;
      log.error(new Error(msg), "PreStop hook failed");
      deps.recorder.event(
        containerRef(pod, spec.name),
        "Warning",
        "FailedPreStopHook",
        "PreStopHook failed",
      );
    }, (e) => {
      if (!signal.aborted && !stop.signal.aborted) log.error(e, "PreStop hook failed");
    })
    .then(() => "done" as const);
  const timer = deps.clock.sleep(args.gracePeriod * 1000, stop.signal).then(
    () => "timeout" as const,
    () => "stopped" as const,
  );
  const first = await Promise.race([hook, timer]);
  stop.abort();
  signal.throwIfAborted();
  if (first === "timeout") {
    log.v(2).info("PreStop hook not completed in grace period", {
      gracePeriod: args.gracePeriod,
    });
  } else {
    log.v(3).info("PreStop hook completed");
  }
  return Math.trunc((deps.clock.now() - start) / 1000);
}

/** upstream setTerminationGracePeriod. */
function terminationGracePeriod(
  pod: V1Pod,
  spec: V1Container,
  reason: ContainerKillReason,
): number {
  const deletion = pod.metadata?.deletionGracePeriodSeconds;
  if (deletion != null) return deletion;
  const termination = pod.spec?.terminationGracePeriodSeconds;
  if (termination == null) return MINIMUM_GRACE_PERIOD_SECONDS;
  const probe = reason === "StartupProbe"
    ? spec.startupProbe
    : reason === "LivenessProbe"
    ? spec.livenessProbe
    : undefined;
  return probe?.terminationGracePeriodSeconds ?? termination;
}

/**
 * upstream restoreSpecsFromContainerLabels: the little of the pod and container that killing
 * needs, read back from the container's labels and annotations.
 */
async function restoreSpecsFromContainerLabels(
  deps: ContainerDeps,
  containerId: string,
  signal: AbortSignal,
): Promise<{ pod: V1Pod; container: V1Container }> {
  const res = await deps.runtime.containerStatus(containerId, false, signal);
  const s = res.status;
  if (!s) throw new Error("container status is nil");
  const l = getContainerInfoFromLabels(s.labels);
  const { info: a } = getContainerInfoFromAnnotations(s.annotations);
  const pod: V1Pod = {
    metadata: {
      uid: l.podUid,
      name: l.podName,
      namespace: l.podNamespace,
      deletionGracePeriodSeconds: a.podDeletionGracePeriod,
    },
    spec: { containers: [], terminationGracePeriodSeconds: a.podTerminationGracePeriod },
  };
  const container: V1Container = {
    name: l.containerName,
    ports: a.containerPorts,
    terminationMessagePath: a.terminationMessagePath,
  };
  if (a.preStopHandler) container.lifecycle = { preStop: a.preStopHandler };
  return { pod, container };
}

/** A running container to stop. */
export interface RunningContainer {
  readonly id: string;
  readonly name: string;
}

/**
 * upstream killContainersWithSyncResult: stops every container at once, sidecars after the
 * regular containers and in reverse order; one KillContainer result per container.
 */
export async function killContainersWithSyncResult(
  deps: ContainerDeps,
  signal: AbortSignal,
  pod: V1Pod | undefined,
  running: readonly RunningContainer[],
  gracePeriodOverride?: number,
  podIPs: readonly string[] = [],
): Promise<SyncResult[]> {
  const ordering = pod?.spec?.initContainers?.some(isRestartableInitContainer)
    ? new TerminationOrdering(deps.clock, pod, running.map((c) => c.name))
    : undefined;
  return await Promise.all(running.map(async (c) => {
    const result: SyncResult = { action: "KillContainer", target: c.name };
    try {
      await killContainer(deps, signal, {
        pod,
        containerId: c.id,
        containerName: c.name,
        message: "",
        reason: "Unknown",
        gracePeriodOverride,
        ordering,
        podIPs,
      });
    } catch (e) {
      signal.throwIfAborted();
      fail(result, "KillContainerError", criErrorText(e));
      deps.logger.error(e, "Kill container failed", { containerName: c.name, containerID: c.id });
    }
    return result;
  }));
}

/** What {@link removeContainer} needs: the manager's deps, or the garbage collector's few. */
export interface ContainerRemovalDeps {
  readonly runtime: Pick<RuntimeService, "containerStatus" | "removeContainer">;
  readonly logger: Logger;
  readonly internalLifecycle?: Pick<InternalContainerLifecycle, "postStopContainer">;
  /** @default "/var/log/containers" */
  readonly legacyContainerLogsDirectory?: string;
}

/**
 * upstream removeContainer, the one removal of a container (pod sync, the container deletor, the
 * garbage collector): the internal post-stop hook, then the container's log files (rotated ones
 * too) and legacy symlink unless `keepLogs` (as RestartAllContainers: the logs stay until the
 * pod goes, and the next instance's restart count is read from them), then the container; a log
 * that cannot be removed keeps the container for a later attempt.
 */
export async function removeContainer(
  deps: ContainerRemovalDeps,
  containerId: string,
  signal?: AbortSignal,
  keepLogs = false,
): Promise<void> {
  deps.logger.v(4).info("Removing container", { containerID: containerId });
  deps.internalLifecycle?.postStopContainer(containerId);
  if (!keepLogs) await removeContainerLog(deps, containerId, signal);
  await deps.runtime.removeContainer(containerId, signal);
}

/**
 * Whether {@link removeContainer} failed because the container is gone already: NOT_FOUND from
 * its RemoveContainer, or from the ContainerStatus before its logs go.
 */
export function containerGone(e: unknown): boolean {
  return isCriCode(e, GrpcCode.NOT_FOUND) ||
    (e instanceof Error && isCriCode(e.cause, GrpcCode.NOT_FOUND));
}

/** upstream removeContainerLog: `<logPath>*` (the log manager's Clean), then the symlink. */
async function removeContainerLog(
  deps: ContainerRemovalDeps,
  id: string,
  signal?: AbortSignal,
): Promise<void> {
  const q = JSON.stringify(id);
  let res: api.ContainerStatusResponse;
  try {
    res = await deps.runtime.containerStatus(id, false, signal);
  } catch (e) {
    signal?.throwIfAborted();
    throw new Error(`failed to get container status ${q}: ${criErrorText(e)}`, { cause: e });
  }
  const s = res.status;
  if (!s) throw new Error(`container status is nil for ${q}`);
  if (s.logPath !== "") {
    for (const path of await logFiles(s.logPath)) {
      await removeIfExists(path).catch((e) => {
        throw new Error(
          `failed to remove container ${q} log ${JSON.stringify(path)}: ${criErrorText(e)}`,
        );
      });
    }
  }
  const l = getContainerInfoFromLabels(s.labels);
  const symlink = legacyLogSymlink(
    deps.legacyContainerLogsDirectory,
    id,
    l.containerName,
    l.podName,
    l.podNamespace,
  );
  await removeIfExists(symlink).catch((e) => {
    throw new Error(
      `failed to remove container ${q} log legacy symbolic link ${JSON.stringify(symlink)}: ${
        criErrorText(e)
      }`,
    );
  });
}

/** The files `<path>*` names: a log and its rotated siblings. */
async function logFiles(path: string): Promise<string[]> {
  const slash = path.lastIndexOf("/");
  const dir = slash < 0 ? "." : path.slice(0, slash) || "/";
  const base = path.slice(slash + 1);
  const names: string[] = [];
  try {
    for await (const e of Deno.readDir(dir)) if (e.name.startsWith(base)) names.push(e.name);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return [];
    throw new Error(
      `failed to list all log files with pattern ${JSON.stringify(`${path}*`)}: ${e}`,
    );
  }
  return names.sort().map((n) => `${dir}/${n}`);
}

/**
 * upstream pruneInitContainersBeforeStart: keeps only the newest exited (or unknown) instance of
 * each init container, to spare the garbage collector.
 */
export async function pruneInitContainersBeforeStart(
  deps: ContainerDeps,
  signal: AbortSignal,
  pod: V1Pod,
  podStatus: PodStatus,
): Promise<void> {
  const statuses = toKubeContainerStatuses(podStatus);
  for (const name of new Set((pod.spec?.initContainers ?? []).map((c) => c.name))) {
    const old = statuses.filter((s) =>
      s.name === name && (s.state === "exited" || s.state === "unknown")
    ).slice(1);
    await removeAll(deps, signal, pod, old);
  }
}

/** upstream purgeInitContainers: removes every instance of every init container. */
export async function purgeInitContainers(
  deps: ContainerDeps,
  signal: AbortSignal,
  pod: V1Pod,
  podStatus: PodStatus,
): Promise<void> {
  const names = new Set((pod.spec?.initContainers ?? []).map((c) => c.name));
  const all = toKubeContainerStatuses(podStatus).filter((s) => names.has(s.name));
  await removeAll(deps, signal, pod, all);
}

async function removeAll(
  deps: ContainerDeps,
  signal: AbortSignal,
  pod: V1Pod,
  statuses: readonly KubeContainerStatus[],
): Promise<void> {
  for (const s of statuses) {
    deps.logger.v(4).info("Removing init container", { containerName: s.name, containerID: s.id });
    try {
      await removeContainer(deps, s.id, signal);
    } catch (e) {
      signal.throwIfAborted();
      deps.logger.error(
        new Error(
          `failed to remove pod init container ${JSON.stringify(s.name)}: ${criErrorText(e)}; ` +
            `Skipping pod ${JSON.stringify(formatPod(pod))}`,
        ),
        "Unhandled Error",
      );
    }
  }
}
