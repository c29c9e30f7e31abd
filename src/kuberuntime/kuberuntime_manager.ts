/**
 * @module
 * KubeRuntimeManager: carries out one SyncPod against the CRI runtime (kill what must go, make
 * the sandbox, start init containers, sidecars and regular containers with crash-loop back-off)
 * and KillPod (stop every container in termination order, then the sandboxes). Owns the
 * crash-loop back-off. Talks to the CRI runtime service, the ImageManager (through
 * `kuberuntime_container.ts`), `kuberuntime_sandbox.ts` for sandbox configs, the RuntimeClass
 * manager for the sandbox's runtime handler and the event recorder; called by the pod workers
 * through the pod syncer, and by kubelet_network.ts to give the runtime the pod CIDR
 * (UpdatePodCIDR). Corresponds to upstream `pkg/kubelet/kuberuntime/kuberuntime_manager.go`
 * (SyncPod, KillPod, killPodWithSyncResult, doBackOff, createPodSandbox of
 * kuberuntime_sandbox.go), with in-place resize in `_pod_resize.ts` (computePodResizeAction,
 * doPodResizeAction, IsPodResizeInProgress).
 */

import type { PodStartupLatencyTracker } from "../pod_startup_latency_tracker.ts";
import type { KubeletMetrics } from "../metrics/metrics.ts";
import type { V1Container, V1Pod, V1Secret } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import type { Clock } from "../util/clock.ts";
import { criErrorText, GrpcCode, isCriCode } from "../cri/connection.ts";
import type { EventRecorder } from "../client/record.ts";
import { formatDuration } from "../util/duration.ts";
import type { ImageManager } from "../images/image_manager.ts";
import type { DraManager } from "../cm/dra_manager.ts";
import type { EnvSource } from "../kubelet_env.ts";
import { kobj, type Logger } from "../klog/klog.ts";
import {
  type ContainerDeps,
  containerGone,
  findContainerStatus,
  formatPod,
  killContainer,
  killContainersWithSyncResult,
  type KubeContainerStatus,
  type LinuxConfigOptions,
  pruneInitContainersBeforeStart,
  purgeInitContainers,
  removeContainer,
  startContainer,
  toKubeContainerStatuses,
} from "./kuberuntime_container.ts";
import { isRestartableInitContainer } from "../pod/podutil.ts";
import { containerRef } from "../container/ref.ts";
import { podRef } from "../client/record.ts";
import { generatePodSandboxConfig, type SandboxConfigOptions } from "./kuberuntime_sandbox.ts";
import { hashContainer } from "./labels.ts";
import type { PodStatus } from "../container/pod_cache.ts";
import type { ImageManagerService } from "../cri/remote_image.ts";
import type { RuntimeService } from "../cri/remote_runtime.ts";
import { fail, PodSyncResult } from "../container/sync_result.ts";
import { EventBackOff } from "./_backoff.ts";
import { computePodActions, type ContainerToRemove, type ProbeResults } from "./pod_actions.ts";
import type { ServiceSource } from "../envvars.ts";
import type { ContainerMounter } from "../kubelet_mounts.ts";
import type { PodVolumesFunc } from "../volume/plugin.ts";
import { Semaphore } from "../util/semaphore.ts";
import { getImageVolumes } from "./image_volumes.ts";
import { ResourceState } from "../allocation/state_checkpoint.ts";
import type { PodCgroups } from "../cm/container_manager.ts";
import type { ExclusiveCpus } from "../cm/exclusive_cpus.ts";
import type { RuntimeHandlerLookup } from "../runtimeclass/runtimeclass_manager.ts";
import type { UsernsManager } from "../userns/userns_manager.ts";
import {
  type ActuatedPodLevelLookup,
  doPodResizeAction,
  hasResizeActions,
  isPodResizeInProgress,
  type ResizeDeps,
  seedActuatedResources,
  setActuatedContainerResources,
  updateActuatedPodLevelResources,
} from "./pod_resize.ts";

export {
  computePodActions,
  type ComputePodActionsOptions,
  type ContainerToKill,
  type ContainerToRemove,
  type PodActions,
  type ProbeResult,
  type ProbeResults,
} from "./pod_actions.ts";
export { readTerminationMessage } from "./_termination_message.ts";

/** The CRI calls the manager and its container functions make. */
export type KubeRuntimeService = Pick<
  RuntimeService,
  | "runPodSandbox"
  | "podSandboxStatus"
  | "stopPodSandbox"
  | "removePodSandbox"
  | "createContainer"
  | "startContainer"
  | "stopContainer"
  | "removeContainer"
  | "containerStatus"
  | "updateContainerResources"
  | "updatePodSandboxResources"
  | "containerStats"
  | "updateRuntimeConfig"
>;

/**
 * RunPodSandbox calls in flight per CPU unless `--max-parallel-sandbox-starts` says otherwise.
 * containerd creates a burst of sandboxes sooner in total when a few at a time contend for the
 * CPUs than when all do: `deno task bench` measures the CRI floor both ways (the "at most N
 * sandbox starts at once" rows).
 */
export const DEFAULT_SANDBOX_STARTS_PER_CPU = 4;

/** Options of {@link KubeRuntimeManager}. */
export interface KubeRuntimeManagerOptions
  extends Pick<LinuxConfigOptions, "seccompDefault" | "seccompProfileRoot" | "swapBehavior"> {
  readonly runtime: KubeRuntimeService;
  readonly imageManager: Pick<ImageManager, "ensureImageExists">;
  /** For the image's default user (runAsUser, runAsNonRoot); optional, see ContainerDeps. */
  readonly imageService?: Pick<ImageManagerService, "imageStatus">;
  readonly recorder: EventRecorder;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly sandbox: SandboxConfigOptions;
  /** `<rootDirectory>/pods`, where termination-log files live: `<uid>/containers/<name>/<random>`. */
  readonly podsDirectory: string;
  /** The node's memory capacity, for oom_score_adj. */
  readonly memoryCapacityBytes: number;
  /** First crash-loop delay in ms; doubles per restart. @default 10000 */
  readonly backOffInitialMs?: number;
  /** Longest crash-loop delay in ms (upstream MaxContainerBackOff). @default 300000 */
  readonly backOffMaxMs?: number;
  /** Where the legacy per-container log symlinks go. @default "/var/log/containers" */
  readonly legacyContainerLogsDirectory?: string;
  /** Liveness and startup results; without a prober none has run. @default none */
  readonly probeResults?: ProbeResults;
  /**
   * ConfigMaps and Secrets for container env/envFrom (envSourceOf over the object managers).
   * @default none: such references fail as upstream's "no kubeClient defined" (standalone)
   */
  readonly envSource?: EnvSource;
  /** The node's IPs, primary first, for the status.hostIP(s) downward API. @default [] */
  readonly hostIPs?: readonly string[];
  /**
   * The node's current allocatable resources (node status), the default of a missing limit
   * in a resourceFieldRef. @default none (a resourceFieldRef fails)
   */
  readonly nodeAllocatable?: () => Record<string, string> | undefined;
  /**
   * Volume mounts and the managed /etc/hosts of containers (a KubeletMounts).
   * @default none: a pod with volumes fails as not supported yet
   */
  readonly kubeletMounts?: ContainerMounter;
  /** The cluster's Services, for service link env. @default none: no service variables */
  readonly services?: ServiceSource;
  /** The pod's mounted volumes, for env `fileKeyRef`. @default none: such a ref fails */
  readonly podVolumes?: PodVolumesFunc;
  /** The containers' devices (the device manager's run options). @default none */
  readonly devices?: ContainerDeps["devices"];
  /** The container manager's hooks (CPU and memory cpusets). @default none */
  readonly internalLifecycle?: ContainerDeps["internalLifecycle"];
  /** The pod's start-up timeline and init container times (the SLI). @default none */
  readonly startupTracker?: Pick<
    PodStartupLatencyTracker,
    "recordPhase" | "recordInitContainerStarted" | "recordInitContainerFinished"
  >;
  /** kubelet_started_pods_total and its errors. @default none */
  readonly metrics?: Pick<
    KubeletMetrics,
    | "startedPodsTotal"
    | "startedPodsErrorsTotal"
    | "startedUserNamespacedPodsTotal"
    | "startedUserNamespacedPodsErrorsTotal"
    | "startedContainersTotal"
    | "startedContainersErrorsTotal"
    | "lifecycleHandlerHttpFallbacks"
    | "sleepActionTerminatedEarly"
    | "imageVolumeRequestedTotal"
    | "imageVolumeMountedSucceedTotal"
    | "imageVolumeMountedErrorsTotal"
    | "podResizeDuration"
  >;
  /**
   * RunPodSandbox calls in flight at once (`--max-parallel-sandbox-starts`); the other pods
   * wait in arrival order. 0 = no limit, as upstream. @default 0
   */
  readonly maxParallelSandboxStarts?: number;
  /**
   * What the runtime was last told of each container's resources (`actuated_pods_state`).
   * @default in memory: after a restart every running container is updated once more
   */
  readonly actuatedState?: ResourceState;
  /** Pod cgroups, resized with their containers. @default none: only containers are resized */
  readonly podCgroups?: Pick<PodCgroups, "getConfig" | "setConfig" | "specConfig" | "memoryUsage">;
  /**
   * featureGates.InPlacePodLevelResourcesVerticalScaling: pod-level resources are resized in
   * place. @default true
   */
  readonly inPlacePodLevelResourcesVerticalScaling?: boolean;
  /** Prepares the pod's ResourceClaims before its sandbox is made. @default none: not prepared */
  readonly dra?: Pick<DraManager, "prepareResources" | "cdiDevices">;
  /**
   * Resolves `spec.runtimeClassName` to the runtime handler RunPodSandbox gets (the
   * RuntimeClass manager). @default none: every sandbox gets the default handler "", as
   * upstream's kubelet without an API client leaves the class unread
   */
  readonly runtimeClasses?: RuntimeHandlerLookup;
  /**
   * The user namespaces of `hostUsers: false` pods, for their sandboxes and containers.
   * @default none: such pods fail as not supported
   */
  readonly userNamespaces?: Pick<
    UsernsManager,
    "getOrCreateUserNamespaceMappings" | "podUserNamespace"
  >;
  /**
   * Pods and containers on exclusive CPUs, whose sandbox and container configs get no CFS quota,
   * at creation and on resize (cm/exclusive_cpus.ts's newExclusiveCpus, which honours
   * DisableCPUQuotaWithExclusiveCPUs). @default none: every CPU limit is enforced
   */
  readonly exclusiveCpus?: ExclusiveCpus;
}

/** Runs SyncPod and KillPod against the CRI runtime; see the module documentation. */
export class KubeRuntimeManager {
  readonly #runtime: KubeRuntimeService;
  readonly #deps: ContainerDeps;
  readonly #sandbox: SandboxConfigOptions;
  readonly #recorder: EventRecorder;
  readonly #log: Logger;
  readonly #backOff: EventBackOff;
  readonly #sandboxStarts: Semaphore | undefined;
  readonly #probes: ProbeResults | undefined;
  readonly #clock: Clock;
  readonly #tracker: KubeRuntimeManagerOptions["startupTracker"];
  readonly #metrics: KubeRuntimeManagerOptions["metrics"];
  readonly #resize: ResizeDeps;
  readonly #dra: KubeRuntimeManagerOptions["dra"];
  readonly #runtimeClasses: RuntimeHandlerLookup | undefined;

  constructor(opts: KubeRuntimeManagerOptions) {
    this.#runtime = opts.runtime;
    this.#clock = opts.clock;
    this.#tracker = opts.startupTracker;
    this.#metrics = opts.metrics;
    this.#dra = opts.dra;
    this.#runtimeClasses = opts.runtimeClasses;
    // The sandbox resolves a user-namespaced pod's RuntimeClass for its handler's support.
    const sandbox = opts.userNamespaces
      ? {
        ...opts.sandbox,
        userNamespaces: opts.userNamespaces,
        runtimeClasses: opts.runtimeClasses,
      }
      : opts.sandbox;
    this.#sandbox = opts.exclusiveCpus
      ? { ...sandbox, exclusiveCpus: opts.exclusiveCpus }
      : sandbox;
    this.#recorder = opts.recorder;
    this.#log = opts.logger;
    this.#probes = opts.probeResults;
    const maxSandboxStarts = opts.maxParallelSandboxStarts ?? 0;
    this.#sandboxStarts = maxSandboxStarts > 0 ? new Semaphore(maxSandboxStarts) : undefined;
    this.#backOff = new EventBackOff(
      opts.clock,
      opts.backOffInitialMs ?? 10_000,
      opts.backOffMaxMs ?? 300_000,
    );
    this.#deps = {
      runtime: opts.runtime,
      metrics: opts.metrics,
      startupTracker: opts.startupTracker,
      imageService: opts.imageService,
      imageManager: opts.imageManager,
      recorder: opts.recorder,
      logger: opts.logger,
      clock: opts.clock,
      podsDirectory: opts.podsDirectory,
      podLogsDirectory: opts.sandbox.podLogsDirectory,
      legacyContainerLogsDirectory: opts.legacyContainerLogsDirectory,
      envSource: opts.envSource,
      hostIPs: opts.hostIPs,
      nodeAllocatable: opts.nodeAllocatable,
      kubeletMounts: opts.kubeletMounts,
      clusterDomain: opts.sandbox.clusterDomain,
      services: opts.services,
      podVolumes: opts.podVolumes,
      imageVolumeMetrics: opts.metrics,
      devices: opts.devices,
      draCdiDevices: opts.dra && ((pod, container) => opts.dra!.cdiDevices(pod, container)),
      internalLifecycle: opts.internalLifecycle,
      linux: {
        memoryCapacityBytes: opts.memoryCapacityBytes,
        // One source for the cgroup settings the sandbox and its containers share.
        cpuCFSQuota: opts.sandbox.cpuCFSQuota,
        cgroupV2: opts.sandbox.cgroupV2,
        singleProcessOOMKill: opts.sandbox.singleProcessOOMKill,
        seccompDefault: opts.seccompDefault,
        seccompProfileRoot: opts.seccompProfileRoot,
        swapBehavior: opts.swapBehavior,
        userNamespaces: opts.userNamespaces,
        exclusiveCpus: opts.exclusiveCpus,
      },
    };
    this.#resize = {
      runtime: opts.runtime,
      podCgroups: opts.podCgroups,
      actuated: opts.actuatedState ?? ResourceState.inMemory(),
      linux: this.#deps.linux,
      logger: opts.logger,
      metrics: opts.metrics,
      clock: opts.clock,
      podLevelResources: opts.inPlacePodLevelResourcesVerticalScaling ?? true,
    };
  }

  /** The actuated pod-level resources, when InPlacePodLevelResourcesVerticalScaling is on. */
  #actuatedPodLevel(): ActuatedPodLevelLookup | undefined {
    if (!this.#resize.podLevelResources) return undefined;
    const state = this.#resize.actuated;
    return (uid) => ({ found: state.get(uid) !== undefined, resources: state.getPodLevel(uid) });
  }

  /** The container's actuated resources, if recorded. */
  actuatedResources(uid: string, name: string) {
    return this.#resize.actuated.getContainer(uid, name);
  }

  /**
   * Whether a running container's actuated resources differ from the allocated pod's (upstream
   * IsPodResizeInProgress), for the PodResizeInProgress condition.
   */
  isPodResizeInProgress(allocatedPod: V1Pod, podStatus: PodStatus): boolean {
    return isPodResizeInProgress(
      allocatedPod,
      toKubeContainerStatuses(podStatus),
      (uid, name) => this.#resize.actuated.getContainer(uid, name),
      this.#actuatedPodLevel(),
    );
  }

  /** Forgets the actuated resources of pods not in `keep` (upstream GarbageCollect's part). */
  forgetActuated(keep: ReadonlySet<string>): Promise<void> {
    return this.#resize.actuated.removeOrphans(keep);
  }

  /**
   * One SyncPod attempt (upstream SyncPod): computes the actions and carries them out. A failure
   * about this pod is reported in the result, never thrown; only an aborted `signal` throws.
   * `restartAllContainers` (the pod's AllContainersRestarting condition is True) removes every
   * container of the pod, keeping the sandbox; a later sync starts them again.
   */
  async syncPod(
    signal: AbortSignal,
    pod: V1Pod,
    podStatus: PodStatus,
    pullSecrets: readonly V1Secret[],
    restartAllContainers = false,
  ): Promise<PodSyncResult> {
    const result = await this.#syncPod(signal, pod, podStatus, pullSecrets, restartAllContainers);
    // As upstream: a user-namespaced pod counts when its sandbox is created, and as an error
    // when any step of that sync failed.
    if (
      pod.spec?.hostUsers === false && result.results.some((r) => r.action === "CreatePodSandbox")
    ) {
      this.#metrics?.startedUserNamespacedPodsTotal.inc();
      if (result.error()) this.#metrics?.startedUserNamespacedPodsErrorsTotal.inc();
    }
    return result;
  }

  async #syncPod(
    signal: AbortSignal,
    pod: V1Pod,
    podStatus: PodStatus,
    pullSecrets: readonly V1Secret[],
    restartAllContainers: boolean,
  ): Promise<PodSyncResult> {
    const result = new PodSyncResult();
    const log = this.#log.with({ pod: kobj(pod) });
    // Running containers the actuated record does not know (a kubelet without it ran them).
    seedActuatedResources(
      this.#resize.actuated,
      pod,
      podStatus,
      toKubeContainerStatuses(podStatus),
      undefined,
      this.#resize.podLevelResources,
    );
    const changes = computePodActions(pod, podStatus, {
      probeResults: this.#probes,
      actuated: (uid, name) => this.#resize.actuated.getContainer(uid, name),
      actuatedPodLevel: this.#actuatedPodLevel(),
      logger: log,
      restartAllContainers,
    });
    if (restartAllContainers) log.v(3).info("Pod marked for RestartAllContainers");
    // A new pod's cgroup was just made from the pod as allocated: its pod-level resources are
    // actuated (upstream records them where SyncPod creates the pod cgroup).
    if (
      changes.createSandbox && this.#resize.podLevelResources &&
      this.#resize.actuated.getPodLevel(pod.metadata?.uid ?? "") === undefined
    ) {
      await updateActuatedPodLevelResources(this.#resize.actuated, pod).catch((e) =>
        log.error(e, "Failed to update the state of pod-level resources for the pod")
      );
    }
    log.v(3).info("computePodActions got for pod", {
      podActions: {
        killPod: changes.killPod,
        createSandbox: changes.createSandbox,
        attempt: changes.attempt,
        initContainersToStart: changes.initContainersToStart,
        containersToStart: changes.containersToStart,
        ephemeralContainersToStart: changes.ephemeralContainersToStart,
        containersToKill: [...changes.containersToKill.keys()],
        containersToReset: changes.containersToReset.map((c) => c.containerId),
        containersToUpdate: {
          memory: changes.resize.containersToUpdate.memory.map((c) => c.container.name),
          cpu: changes.resize.containersToUpdate.cpu.map((c) => c.container.name),
        },
        updatePodResources: changes.resize.updatePodResources,
        updatePodLevelResources: changes.resize.updatePodLevelResources,
      },
    });
    if (changes.createSandbox && changes.sandboxID !== "") {
      this.#recorder.event(
        podRef(pod),
        "Normal",
        "SandboxChanged",
        "Pod sandbox changed, it will be killed and re-created.",
      );
    }

    if (changes.killPod) {
      const killed = await this.#killPodWithSyncResult(signal, pod, podStatus, undefined);
      result.addPodSyncResult(killed);
      if (killed.error()) {
        log.error(killed.error(), "killPodWithSyncResult failed");
        return result;
      }
      if (changes.createSandbox) await purgeInitContainers(this.#deps, signal, pod, podStatus);
    } else {
      for (const [containerId, info] of changes.containersToKill) {
        log.v(3).info("Killing unwanted container for pod", {
          containerName: info.name,
          containerID: containerId,
        });
        const r = result.add("KillContainer", info.name);
        try {
          await killContainer(this.#deps, signal, {
            pod,
            containerId,
            containerName: info.name,
            message: info.message,
            reason: info.reason,
            podIPs: podStatus.ips,
          });
        } catch (e) {
          signal.throwIfAborted();
          fail(r, "KillContainerError", criErrorText(e));
          log.error(e, "killContainer for pod failed", { containerName: info.name });
          return result;
        }
      }
      if (!(await this.#resetContainers(signal, pod, changes.containersToReset, result))) {
        return result;
      }
    }

    await pruneInitContainersBeforeStart(this.#deps, signal, pod, podStatus);

    let sandboxId = changes.sandboxID;
    let sandboxConfig: api.PodSandboxConfig | undefined;
    let podIPs: readonly string[] = podStatus.ips;
    if (changes.createSandbox) {
      const r = result.add("CreatePodSandbox", formatPod(pod));
      this.#metrics?.startedPodsTotal.inc();
      try {
        await this.#dra?.prepareResources(pod, signal);
      } catch (e) {
        // As upstream: an event and a log line; the next sync tries again.
        this.#recorder.event(
          podRef(pod),
          "Warning",
          "FailedPrepareDynamicResources",
          `Failed to prepare dynamic resources: ${criErrorText(e)}`,
        );
        log.error(e, "Failed to prepare dynamic resources");
        return result;
      }
      const created = await this.#createPodSandbox(signal, pod, changes.attempt);
      if ("message" in created) {
        this.#metrics?.startedPodsErrorsTotal.inc();
        fail(r, "CreatePodSandboxError", created.message);
        log.error(created.error, "CreatePodSandbox for pod failed");
        this.#recorder.event(
          podRef(pod),
          "Warning",
          "FailedCreatePodSandBox",
          `Failed to create pod sandbox: ${criErrorText(created.error)}`,
        );
        return result;
      }
      ({ id: sandboxId, config: sandboxConfig } = created);
      this.#tracker?.recordPhase(pod, "sandboxCreated");
      try {
        const res = await this.#runtime.podSandboxStatus(sandboxId, false, signal);
        if (!res.status) throw new Error("pod sandbox status is nil");
        // As upstream SyncPod: the new sandbox's IPs, for the containers' env.
        if (!pod.spec?.hostNetwork) podIPs = sandboxIPs(res.status);
      } catch (e) {
        signal.throwIfAborted();
        this.#recorder.event(
          podRef(pod),
          "Warning",
          "FailedPodSandBoxStatus",
          `Unable to get pod sandbox status: ${criErrorText(e)}`,
        );
        log.error(e, "Failed to get pod sandbox status; Skipping pod");
        result.syncError = e instanceof Error ? e : new Error(String(e));
        return result;
      }
    }

    const configResult = result.add("ConfigPodSandbox", sandboxId);
    if (!sandboxConfig) {
      try {
        sandboxConfig = await generatePodSandboxConfig(pod, changes.attempt, this.#sandbox, signal);
      } catch (e) {
        signal.throwIfAborted();
        const message = `GeneratePodSandboxConfig for pod ${
          JSON.stringify(formatPod(pod))
        } failed: ${criErrorText(e)}`;
        fail(configResult, "ConfigPodSandboxError", message);
        log.error(e, "GeneratePodSandboxConfig for pod failed");
        return result;
      }
    }

    const statuses = toKubeContainerStatuses(podStatus);
    const config = sandboxConfig;
    // The pod's image volumes, pulled once for the containers this sync starts (upstream pulls
    // them at every sync; a sync that starts nothing does not pull here).
    const starts = changes.containersToStart.length + changes.initContainersToStart.length +
      changes.ephemeralContainersToStart.length;
    const imageVolumePulls = starts > 0
      ? await getImageVolumes(this.#deps, signal, { pod, sandboxConfig: config, pullSecrets })
      : undefined;
    const start = async (
      container: V1Container,
      typeName: string,
      target?: string,
    ): Promise<boolean> => {
      const r = result.add("StartContainer", container.name);
      const backOff = this.#doBackOff(pod, container, statuses);
      if (backOff !== undefined) {
        fail(r, "CrashLoopBackOff", backOff.message);
        r.retryAfterMs = backOff.retryAfterMs;
        log.v(4).info("Backing Off restarting container in pod", {
          containerType: typeName,
          container: container.name,
        });
        return false;
      }
      // Upstream's metric label: container, init_container or ephemeral_container.
      const metricLabel = typeName.replace(" ", "_");
      this.#metrics?.startedContainersTotal.inc({ container_type: metricLabel });
      let targetId: string | undefined;
      if (target) {
        // upstream getTargetID (in its startContainer, so after the back-off and counted): the
        // target's newest container, whatever its state.
        targetId = findContainerStatus(statuses, target)?.id;
        if (targetId === undefined) {
          this.#metrics?.startedContainersErrorsTotal.inc({
            container_type: metricLabel,
            code: "CreateContainerConfigError",
          });
          fail(r, "CreateContainerConfigError", `unable to find target container ${target}`);
          log.error(
            new Error(`unable to find target container ${target}`),
            "Unhandled Error",
          );
          return false;
        }
      }
      log.v(4).info("Creating container in pod", {
        containerType: typeName,
        container: container.name,
      });
      const failure = await startContainer(this.#deps, signal, {
        sandboxId,
        sandboxConfig: config,
        pod,
        container,
        podStatus,
        pullSecrets,
        podIPs,
        targetId,
        imageVolumePulls,
      });
      if (failure) {
        this.#metrics?.startedContainersErrorsTotal.inc({
          container_type: metricLabel,
          code: failure.reason,
        });
        fail(r, failure.reason, failure.message);
        const line = `${typeName} ${container.name} start failed in pod ${
          formatPod(pod)
        }: ${failure.reason}: ${failure.message}`;
        if (failure.reason === "ImagePullBackOff") log.v(3).info(line);
        else log.error(new Error(line), "Unhandled Error");
        return false;
      }
      // What the runtime was told of its resources (upstream marks them at creation).
      if (typeName !== "ephemeral container") {
        try {
          await setActuatedContainerResources(
            this.#resize.actuated,
            pod,
            container,
            this.#resize.podLevelResources,
          );
        } catch (e) {
          log.error(e, "Failed to record the container's actuated resources", {
            containerName: container.name,
          });
        }
      }
      // Init containers' run time is left out of the start-up SLI; sidecars keep running.
      if (typeName === "init container" && !isRestartableInitContainer(container)) {
        this.#tracker?.recordInitContainerStarted(pod.metadata?.uid ?? "", this.#clock.now());
      }
      return true;
    };

    // Ephemeral containers start before init containers, so that one can debug a pod whose
    // initialization fails (upstream SyncPod step 5). They are never restarted.
    const ephemeral = pod.spec?.ephemeralContainers ?? [];
    for (const idx of changes.ephemeralContainersToStart) {
      const ec = ephemeral[idx];
      if (ec) await start(ec as V1Container, "ephemeral container", ec.targetContainerName);
    }

    const inits = pod.spec?.initContainers ?? [];
    for (const idx of changes.initContainersToStart) {
      const container = inits[idx];
      if (!container) continue;
      if (await start(container, "init container")) continue;
      // A sidecar that failed to start is retried next sync; a plain init container blocks.
      if (isRestartableInitContainer(container)) continue;
      return result;
    }
    if (this.#tracker) {
      const plainInits = new Set(
        inits.filter((c) => !isRestartableInitContainer(c)).map((c) => c.name),
      );
      for (const cs of statuses) {
        if (plainInits.has(cs.name) && cs.state === "exited" && cs.finishedAt > 0) {
          this.#tracker.recordInitContainerFinished(pod.metadata?.uid ?? "", cs.finishedAt);
        }
      }
    }
    // Running containers resized in place, before new ones start (upstream SyncPod step 8).
    const resize = changes.resize;
    if (hasResizeActions(resize)) {
      const r = result.add("ResizePodInPlace", formatPod(pod));
      const failed = await doPodResizeAction(this.#resize, signal, pod, sandboxId, resize);
      if (failed) fail(r, "ResizePodInPlaceError", failed.message);
    }
    const containers = pod.spec?.containers ?? [];
    for (const idx of changes.containersToStart) {
      const container = containers[idx];
      if (container) await start(container, "container");
    }
    return result;
  }

  /** Removes a dead container, its log files first (upstream DeleteContainer). */
  deleteContainer(containerId: string, signal: AbortSignal): Promise<void> {
    return removeContainer(this.#deps, containerId, signal);
  }

  /**
   * Stops every running container (gracePeriodOverride seconds, else each container's grace
   * period as upstream killContainer computes it, never under 2 s), sidecars last, then stops
   * every sandbox (upstream KillPod). `pod` is undefined for an orphan: the grace periods then
   * come from the containers' annotations.
   */
  killPod(
    signal: AbortSignal,
    pod: V1Pod | undefined,
    podStatus: PodStatus,
    gracePeriodOverride?: number,
  ): Promise<PodSyncResult> {
    return this.#killPodWithSyncResult(signal, pod, podStatus, gracePeriodOverride);
  }

  /**
   * Removes the pod's exited containers (with their logs) and its sandboxes, for a pod that is
   * gone for good. Throws, removing nothing, while a container or sandbox still runs.
   */
  async removePod(signal: AbortSignal, podStatus: PodStatus): Promise<void> {
    const statuses = toKubeContainerStatuses(podStatus);
    const READY = api.PodSandboxState.SANDBOX_READY;
    if (
      statuses.some((s) => s.state === "running") ||
      podStatus.sandboxStatuses.some((s) => s.state === READY)
    ) {
      throw new Error(
        `Cannot remove pod ${podStatus.namespace}/${podStatus.name}: it still runs: kill it first`,
      );
    }
    const errors: string[] = [];
    for (const s of statuses) {
      try {
        await removeContainer(this.#deps, s.id, signal);
      } catch (e) {
        signal.throwIfAborted();
        if (!containerGone(e)) errors.push(criErrorText(e));
      }
    }
    for (const s of podStatus.sandboxStatuses) {
      try {
        await this.#runtime.removePodSandbox(s.id, signal);
      } catch (e) {
        signal.throwIfAborted();
        errors.push(criErrorText(e));
      }
    }
    if (errors.length > 0) {
      throw new Error(
        errors.length === 1 ? errors[0] : `[${errors.join(", ")}]`,
      );
    }
  }

  /**
   * Gives the runtime the node's pod CIDR(s), comma-separated, with UpdateRuntimeConfig
   * (upstream UpdatePodCIDR, a passthrough): containerd's CRI renders its `cni.conf_template`
   * with it when no CNI network is loaded yet.
   */
  async updatePodCIDR(podCIDR: string, signal?: AbortSignal): Promise<void> {
    this.#log.info("Updating runtime config through cri with podcidr", { CIDR: podCIDR });
    await this.#runtime.updateRuntimeConfig({ networkConfig: { podCidr: podCIDR } }, signal);
  }

  /** Forgets crash-loop back-offs idle for 2×max (upstream's backOff.GC in housekeeping). */
  gcBackOff(): void {
    this.#backOff.gc();
  }

  /**
   * Removes the containers of a pod restarting all its containers in place, stopping those not
   * exited with no grace period (upstream SyncPod's ContainersToReset). Their logs stay. False
   * after a failure, recorded in `result`.
   */
  async #resetContainers(
    signal: AbortSignal,
    pod: V1Pod,
    containers: readonly ContainerToRemove[],
    result: PodSyncResult,
  ): Promise<boolean> {
    for (const { containerId, container, kill } of containers) {
      const log = this.#log.with({
        pod: kobj(pod),
        containerName: container.name,
        containerID: containerId,
      });
      log.v(3).info("Removing container before pod restarts");
      const r = result.add("RemoveContainer", container.name);
      if (kill) {
        log.v(3).info("Killing container before removal");
        try {
          await killContainer(this.#deps, signal, {
            pod,
            containerId,
            containerName: container.name,
            message: "killing",
            reason: "RestartAllContainers",
            gracePeriodOverride: 0,
          });
        } catch (e) {
          signal.throwIfAborted();
          fail(r, "KillContainerError", criErrorText(e));
          log.error(e, "killContainer for pod failed");
          return false;
        }
      }
      try {
        await removeContainer(this.#deps, containerId, signal, true);
      } catch (e) {
        signal.throwIfAborted();
        fail(r, "RemoveContainerError", criErrorText(e));
        log.error(e, "removeContainer for pod failed");
        return false;
      }
    }
    return true;
  }

  async #killPodWithSyncResult(
    signal: AbortSignal,
    pod: V1Pod | undefined,
    podStatus: PodStatus,
    gracePeriodOverride: number | undefined,
  ): Promise<PodSyncResult> {
    const result = new PodSyncResult();
    const running = toKubeContainerStatuses(podStatus).filter((s) => s.state === "running");
    result.results.push(
      ...await killContainersWithSyncResult(
        this.#deps,
        signal,
        pod,
        running,
        gracePeriodOverride,
        podStatus.ips,
      ),
    );
    const r = result.add("KillPodSandbox", podStatus.id);
    for (const s of podStatus.sandboxStatuses) {
      try {
        await this.#runtime.stopPodSandbox(s.id, signal);
      } catch (e) {
        if (isCriCode(e, GrpcCode.NOT_FOUND)) continue;
        signal.throwIfAborted();
        fail(r, "KillPodSandboxError", criErrorText(e));
        this.#log.error(undefined, "Failed to stop sandbox", { podSandboxID: s.id });
      }
    }
    return result;
  }

  /**
   * upstream createPodSandbox: config, log directory, the RuntimeClass's handler, RunPodSandbox.
   * A handler the runtime lacks fails RunPodSandbox with the runtime's error, as upstream, which
   * checks nothing beforehand.
   */
  async #createPodSandbox(
    signal: AbortSignal,
    pod: V1Pod,
    attempt: number,
  ): Promise<{ id: string; config: api.PodSandboxConfig } | { message: string; error: unknown }> {
    const name = JSON.stringify(formatPod(pod));
    let config: api.PodSandboxConfig;
    try {
      config = await generatePodSandboxConfig(pod, attempt, this.#sandbox, signal);
    } catch (e) {
      signal.throwIfAborted();
      return {
        error: e,
        message: `Failed to generate sandbox config for pod ${name}: ${criErrorText(e)}`,
      };
    }
    if (config.logDirectory !== "") {
      try {
        await Deno.mkdir(config.logDirectory, { recursive: true, mode: 0o755 });
      } catch (e) {
        return {
          error: e,
          message: `Failed to create log directory for pod ${name}: ${criErrorText(e)}`,
        };
      }
    }
    let runtimeHandler = "";
    if (this.#runtimeClasses) {
      try {
        runtimeHandler = this.#runtimeClasses.lookupRuntimeHandler(pod.spec?.runtimeClassName);
      } catch (e) {
        // A class not (yet) in the cache: the next sync of the pod tries again.
        return {
          error: e,
          message: `Failed to create sandbox for pod ${name}: ${criErrorText(e)}`,
        };
      }
      if (runtimeHandler !== "") {
        this.#log.v(2).info("Running pod with runtime handler", { pod: kobj(pod), runtimeHandler });
      }
    }
    try {
      const run = () => this.#runtime.runPodSandbox(config, runtimeHandler, signal);
      const id = this.#sandboxStarts ? await this.#sandboxStarts.run(run, signal) : await run();
      return { id, config };
    } catch (e) {
      signal.throwIfAborted();
      return { error: e, message: `Failed to create sandbox for pod ${name}: ${criErrorText(e)}` };
    }
  }

  /**
   * upstream doBackOff: while the last exit of the container is within its back-off, a
   * CrashLoopBackOff message (and a BackOff event); otherwise records this restart.
   */
  #doBackOff(
    pod: V1Pod,
    container: V1Container,
    statuses: readonly KubeContainerStatus[],
  ): { message: string; retryAfterMs: number } | undefined {
    const exited = statuses.find((s) => s.name === container.name && s.state === "exited");
    if (!exited) return undefined;
    const key = getStableKey(pod, container);
    if (this.#backOff.isInBackOffSince(key, exited.finishedAt)) {
      this.#recorder.event(
        containerRef(pod, container.name),
        "Warning",
        "BackOff",
        `Back-off restarting failed container ${container.name} in pod ${formatPod(pod)}`,
      );
      const delay = this.#backOff.get(key);
      return {
        message: `back-off ${
          formatDuration(delay)
        } restarting failed container=${container.name} pod=${formatPod(pod)}`,
        retryAfterMs: Math.max(0, exited.finishedAt + delay - this.#backOff.clock.now()),
      };
    }
    this.#backOff.next(key, exited.finishedAt);
    return undefined;
  }
}

/** upstream GetStableKey: the back-off key of a container, `<pod>_<ns>_<uid>_<name>_<hash>`. */
export function getStableKey(pod: V1Pod, container: V1Container): string {
  const m = pod.metadata ?? {};
  return `${m.name ?? ""}_${m.namespace ?? ""}_${m.uid ?? ""}_${container.name}_${
    hashContainer(container).toString(16)
  }`;
}

/** upstream determinePodSandboxIPs: the sandbox's primary and additional IPs. */
export function sandboxIPs(status: api.PodSandboxStatus): string[] {
  const net = status.network;
  if (!net) return [];
  return [net.ip, ...net.additionalIps.map((a) => a.ip)].filter((ip) => ip !== "");
}
