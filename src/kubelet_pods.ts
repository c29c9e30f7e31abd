/**
 * @module
 * The API pod status the kubelet reports: {@link generateAPIPodStatus} turns the runtime's view of
 * a pod (a {@link PodStatus} from the pod cache), the last reported API status, the last sync
 * errors (the {@link ReasonCache}) and the probe results into a `V1PodStatus`: phase, conditions,
 * container and init container statuses with their waiting / running / terminated states, last
 * termination state and restart count, pod and host IPs, QoS class, and the pod-level resources
 * (InPlacePodLevelResourcesVerticalScaling: `status.resources` as the pod cgroup runs while the
 * pod runs, else as allocated, and `status.allocatedResources`, the pod's requests). Pure: it
 * talks to nothing (the pod cgroup's settings are read before, by
 * {@link readPodCgroupForStatus}); the pod workers call it and hand the result to the status
 * manager.
 *
 * Corresponds to upstream `pkg/kubelet/kubelet_pods.go` (generateAPIPodStatus, getPhase,
 * convertStatusToAPIStatus, convertToAPIContainerStatuses, sortPodIPs), the runtime container
 * status conversion of `pkg/kubelet/kuberuntime/kuberuntime_container.go` (toKubeContainerStatus)
 * and the helpers it uses from `pkg/kubelet/container/helpers.go` and `pkg/api/v1/pod/util.go`,
 * convertToAPIPodLevelResourcesStatus and getEffectiveAllocatedResources (kubelet_pods.go) and
 * the cgroup readers of `pkg/kubelet/cm/helpers_linux.go` (CPURequestsFromConfig, ...).
 * Feature gates are taken at their v1.36 defaults: ContainerRestartRules on, RecursiveReadOnlyMounts
 * on, PodObservedGenerationTracking on, RestartAllContainersOnContainerExits on (a container that
 * exits with a RestartAllContainers rule has every container removed and run again in the same
 * sandbox: the AllContainersRestarting condition, and RestartingAllContainers in the statuses).
 * The health of each container's devices (`allocatedResourcesStatus`, the ResourceHealthStatus
 * feature) comes from the device and DRA managers through
 * {@link GenerateStatusOptions.allocatedResourcesStatus}, which reads the gate.
 */

import { runtimeContainerId } from "./container/container_id.ts";
import type {
  V1Container,
  V1ContainerState,
  V1ContainerStateTerminated,
  V1ContainerStatus,
  V1ContainerUser,
  V1Pod,
  V1PodCondition,
  V1PodStatus,
  V1ResourceRequirements,
  V1ResourceStatus,
  V1VolumeMountStatus,
} from "@kubernetes/client-node";
import { type RuntimeResources, toRuntimeResources } from "./kuberuntime/pod_resize.ts";
import { formatBinarySI } from "./util/quantity.ts";
import { formatQuantity, intQuantity, parseQuantityFormatted } from "./util/quantity_format.ts";
import {
  type Dec,
  milliValueOf,
  parseDec,
  podLimits,
  podRequests,
  type ResourceList,
  valueOf,
} from "./qos/resource_helpers.ts";
import type { ResourceConfig } from "./cm/cgroup_manager.ts";
import * as api from "../proto/runtime/v1/api.ts";
import { kobj, type Logger } from "./klog/klog.ts";
import {
  CONTAINER_RESTART_COUNT_LABEL,
  getContainerInfoFromAnnotations,
  getContainerInfoFromLabels,
} from "./kuberuntime/labels.ts";
import { rfc3339 } from "./nodestatus/node_status.ts";
import type { PodStatus } from "./container/pod_cache.ts";
import { getPodQOS, isStaticPod } from "./qos/qos.ts";
import type { ReasonCache } from "./reason_cache.ts";
import {
  DISRUPTION_TARGET,
  generateAllContainersRestartingCondition,
  generateContainersReadyCondition,
  generatePodInitializedCondition,
  generatePodReadyCondition,
  generatePodReadyToStartContainersCondition,
  getPodCondition,
  POD_SCHEDULED,
  podConditionByKubelet,
  shouldAllContainersRestart,
} from "./status/generate.ts";
import {
  allContainersCouldRestart,
  containerShouldRestart,
  getContainerStatus,
  isRestartableInitContainer,
} from "./pod/podutil.ts";
import { parseIP } from "./_pod_ips.ts";
import { deepCopy } from "./util/deep_copy.ts";
import type { PodSyncHandler } from "./lifecycle/interfaces.ts";
import { resolveRecursiveReadOnly } from "./kubelet_mounts.ts";

/** Waiting reason of containers while the pod's init containers run. */
export const POD_INITIALIZING = "PodInitializing";
/** Waiting reason of containers not created yet. */
export const CONTAINER_CREATING = "ContainerCreating";
/** Terminated reason of a container whose status the runtime lost (kubecontainer). */
export const CONTAINER_STATUS_UNKNOWN = "ContainerStatusUnknown";
/** Waiting and last terminated reason of containers removed to restart all of them in place. */
export const RESTARTING_ALL_CONTAINERS = "RestartingAllContainers";
const RESTARTING_ALL_CONTAINERS_MESSAGE =
  "The container is removed because RestartAllContainers in place";

/** Inputs of {@link generateAPIPodStatus}. */
export interface GenerateStatusOptions {
  /** The pod; its `status` is the last API status, the basis for lastState and restartCount. */
  pod: V1Pod;
  /** The runtime's view of the pod, from the pod cache. */
  podStatus: PodStatus;
  /** The pod worker has decided the pod is terminal. */
  podIsTerminal: boolean;
  /** The last start failure of each container (the reason cache). */
  reasons: Pick<ReasonCache, "get">;
  /** Termination messages read from the containers' message files, by container id. */
  terminationMessages?: ReadonlyMap<string, string>;
  /** The node's IPs, primary first; empty in standalone mode (no hostIP is reported). */
  hostIPs: readonly string[];
  /**
   * Probe results: readiness and startup by container id, undefined when the probe has not run.
   * Absent: no probes at all (started = running, ready = running and the pod not terminal).
   */
  probes?: PodProbeResults;
  /** Stamps the lastTransitionTime of conditions that changed. */
  now: Date;
  /** The prefix of container IDs, `<runtimeName>://<id>`. @default "containerd" */
  runtimeName?: string;
  /** For upstream's verbose lines and the illegal phase transition error. @default none */
  logger?: Logger;
  /**
   * The pod sync handlers (the active deadline's): the first that evicts makes the pod Failed
   * with its reason and message. @default none
   */
  syncHandlers?: readonly PodSyncHandler[];
  /** The pod's PodResizePending and PodResizeInProgress conditions. @default none */
  resizeConditions?: readonly V1PodCondition[];
  /**
   * What the runtime was last told of each container's resources, for what the runtime does
   * not report (memory requests, and everything on a runtime that reports nothing). @default none
   */
  actuated?: (uid: string, name: string) => V1ResourceRequirements | undefined;
  /**
   * The pod's runtime handler supports recursive read-only mounts (upstream
   * runtimeClassSupportsRecursiveReadOnlyMounts): a read-only volume mount's status says
   * Enabled when its mode resolves to one. @default false
   */
  supportsRecursiveReadOnly?: boolean;
  /**
   * The pod cgroup's settings as read for this status ({@link readPodCgroupForStatus}); a
   * resource whose read failed, or every one without pod cgroups, keeps the last status's value.
   * @default none
   */
  podCgroup?: PodCgroupConfig;
  /**
   * The health of the devices a regular container holds (upstream containerManager
   * UpdateAllocatedResourcesStatus: device plugin resources, then DRA claims); an empty list
   * leaves the field out. @default none
   */
  allocatedResourcesStatus?: (pod: V1Pod, containerName: string) => V1ResourceStatus[];
}

/** The pod cgroup's cpu and memory settings (upstream GetPodCgroupConfig), each if read. */
export interface PodCgroupConfig {
  readonly cpu?: ResourceConfig;
  readonly memory?: ResourceConfig;
}

/**
 * Reads the pod cgroup's settings for the status of a pod whose status says Running (upstream
 * convertToAPIPodLevelResourcesStatus reads them only then); a failed read is logged and left
 * out. Undefined for any other pod, or without pod cgroups.
 */
export async function readPodCgroupForStatus(
  pod: V1Pod,
  podCgroups:
    | { getConfig(pod: V1Pod, resource: "cpu" | "memory"): Promise<ResourceConfig> }
    | undefined,
  logger?: Logger,
): Promise<PodCgroupConfig | undefined> {
  if (!podCgroups || pod.status?.phase !== "Running") return undefined;
  const read = async (resource: "cpu" | "memory", what: string) => {
    try {
      return await podCgroups.getConfig(pod, resource);
    } catch (e) {
      logger?.error(e, what, { podName: pod.metadata?.name });
      return undefined;
    }
  };
  const memory = await read("memory", "failed to read memory cgroup config for the pod");
  // Upstream's message for the cpu read, as it is.
  const cpu = await read("cpu", "failed to read memory cgroup limits for the pod");
  return { ...(memory ? { memory } : {}), ...(cpu ? { cpu } : {}) };
}

/** Whether the phase is Succeeded or Failed (upstream podutil.IsPodPhaseTerminal). */
export function podIsTerminalPhase(status: V1PodStatus | undefined): boolean {
  return status?.phase === "Succeeded" || status?.phase === "Failed";
}

/**
 * The pod phase from its container statuses (upstream getPhase). `podHasInitialized` says a
 * regular container of the current sandbox has started, so that restarting sidecars do not send
 * the pod back to Pending; by default it is read from the API statuses.
 */
export function getPhase(
  pod: V1Pod,
  containerStatuses: V1ContainerStatus[],
  initStatuses: V1ContainerStatus[],
  podIsTerminal: boolean,
  podHasInitialized: boolean = hasAnyRegularContainerRun(pod, containerStatuses),
): string {
  const spec = pod.spec;
  const info = [...containerStatuses, ...initStatuses];
  let pendingRestartableInit = 0;
  let pendingRegularInit = 0;
  let failedInitNotRestartable = 0;

  // A container removed to restart all containers in place restarts whatever its policy says.
  const restartable = (c: V1Container, t: V1ContainerStateTerminated) =>
    containerShouldRestart(c, spec, t.exitCode) || t.reason === RESTARTING_ALL_CONTAINERS;

  for (const c of spec?.initContainers ?? []) {
    if (isRestartableInitContainer(c)) continue;
    const s = getContainerStatus(info, c.name);
    if (s === undefined || s.state?.running) {
      pendingRegularInit++;
    } else if (s.state?.terminated) {
      const t = s.state.terminated;
      if (t.exitCode !== 0 && !restartable(c, t)) failedInitNotRestartable++;
    } else if (s.state?.waiting) {
      const last = s.lastState?.terminated;
      if (last === undefined) pendingRegularInit++;
      else if (last.exitCode !== 0 && !restartable(c, last)) failedInitNotRestartable++;
    } else {
      pendingRegularInit++;
    }
  }

  let unknown = 0;
  let running = 0;
  let waiting = 0;
  let stopped = 0;
  let stoppedNotRestartable = 0;
  let succeeded = 0;

  for (const c of spec?.initContainers ?? []) {
    if (!isRestartableInitContainer(c)) continue;
    const s = getContainerStatus(info, c.name);
    if (s === undefined) {
      unknown++;
    } else if (s.state?.running) {
      if (s.started !== true) pendingRestartableInit++;
      running++;
    } else if (s.state?.terminated) {
      // A stopped sidecar does not count towards the phase.
    } else if (s.state?.waiting) {
      if (s.lastState?.terminated === undefined) {
        pendingRestartableInit++;
        waiting++;
      }
    } else {
      pendingRestartableInit++;
      unknown++;
    }
  }

  for (const c of spec?.containers ?? []) {
    const s = getContainerStatus(info, c.name);
    if (s === undefined) {
      unknown++;
    } else if (s.state?.running) {
      running++;
    } else if (s.state?.terminated) {
      stopped++;
      if (!restartable(c, s.state.terminated)) stoppedNotRestartable++;
      if (s.state.terminated.exitCode === 0) succeeded++;
    } else if (s.state?.waiting) {
      const last = s.lastState?.terminated;
      if (last !== undefined) {
        stopped++;
        if (!restartable(c, last)) stoppedNotRestartable++;
      } else {
        waiting++;
      }
    } else {
      unknown++;
    }
  }

  if (failedInitNotRestartable > 0) return "Failed";
  if (pendingRegularInit > 0 || (pendingRestartableInit > 0 && !podHasInitialized)) {
    return "Pending";
  }
  if (waiting > 0) return "Pending";
  if (running > 0 && unknown === 0) return "Running";
  if (running === 0 && stopped > 0 && unknown === 0) {
    // A terminal pod's containers will not restart whatever the policy says.
    if (podIsTerminal && !isStaticPod(pod)) return stopped === succeeded ? "Succeeded" : "Failed";
    if (stopped !== stoppedNotRestartable) return "Running";
    return stopped === succeeded ? "Succeeded" : "Failed";
  }
  return "Pending";
}

/** Whether an API status shows a regular container that has run (the default of getPhase). */
function hasAnyRegularContainerRun(pod: V1Pod, statuses: readonly V1ContainerStatus[]): boolean {
  const names = new Set((pod.spec?.containers ?? []).map((c) => c.name));
  return statuses.some((s) =>
    names.has(s.name) && (s.state?.running !== undefined || s.state?.terminated !== undefined)
  );
}

/**
 * The API status of the pod (upstream generateAPIPodStatus); see the module documentation. The
 * status manager adds startTime and observedGeneration and stamps the transition times.
 */
export function generateAPIPodStatus(opts: GenerateStatusOptions): V1PodStatus {
  const { pod, podStatus, podIsTerminal, logger } = opts;
  logger?.v(3).info("Generating pod status", { podIsTerminal, pod: kobj(pod) });
  const oldPodStatus: V1PodStatus = pod.status ?? {};
  const runtime = runtimeContainers(podStatus, opts);
  const s = convertStatusToAPIStatus(opts, runtime, oldPodStatus);

  s.phase = getPhase(
    pod,
    s.containerStatuses ?? [],
    s.initContainerStatuses ?? [],
    podIsTerminal,
    hasAnyActiveRegularContainerStarted(pod, podStatus, runtime),
  );
  logger?.v(4).info("Got phase for pod", {
    pod: kobj(pod),
    oldPhase: oldPodStatus.phase,
    phase: s.phase,
  });

  // The status manager's and the apiserver's terminal phase win over a non-terminal one.
  if (!podIsTerminalPhase(s) && podIsTerminalPhase(oldPodStatus)) s.phase = oldPodStatus.phase;
  if (s.phase === oldPodStatus.phase) {
    if (oldPodStatus.reason) s.reason = oldPodStatus.reason;
    if (oldPodStatus.message) s.message = oldPodStatus.message;
  }
  // A module that requires the pod to fail overrides the phase, reason and message.
  for (const handler of opts.syncHandlers ?? []) {
    const r = handler.shouldEvict(pod);
    if (!r.evict) continue;
    s.phase = "Failed";
    s.reason = r.reason;
    s.message = r.message;
    break;
  }
  if (podIsTerminalPhase(pod.status) && s.phase !== pod.status?.phase) {
    logger?.error(undefined, "Pod attempted illegal phase transition", {
      pod: kobj(pod),
      originalStatusPhase: pod.status?.phase,
      apiStatusPhase: s.phase,
    });
    s.phase = pod.status?.phase;
  }

  applyProbeResults(opts, s);
  if (opts.allocatedResourcesStatus) {
    for (const c of s.containerStatuses ?? []) {
      const statuses = opts.allocatedResourcesStatus(pod, c.name);
      if (statuses.length > 0) c.allocatedResourcesStatus = statuses;
    }
  }

  const conditions: V1PodCondition[] = (pod.status?.conditions ?? [])
    .filter((c) => !podConditionByKubelet(c.type))
    .map((c) => ({ ...c }));
  // In-place resize conditions, unless the pod is terminal (upstream determinePodResizeStatus).
  if (!podIsTerminal) { for (const c of opts.resizeConditions ?? []) conditions.push({ ...c }); }
  const disruption = getPodCondition(oldPodStatus.conditions, DISRUPTION_TARGET);
  if (disruption !== undefined) {
    const i = conditions.findIndex((c) => c.type === DISRUPTION_TARGET);
    if (i >= 0) conditions[i] = { ...disruption };
    else conditions.push({ ...disruption });
  }
  const all = [...(s.initContainerStatuses ?? []), ...(s.containerStatuses ?? [])];
  conditions.push(generatePodReadyToStartContainersCondition(pod, podStatus));
  conditions.push(generatePodInitializedCondition(pod, all, s.phase, oldPodStatus));
  conditions.push(generatePodReadyCondition(pod, conditions, all, s.phase));
  conditions.push(generateContainersReadyCondition(pod, all, s.phase));
  const scheduled: V1PodCondition = { type: POD_SCHEDULED, status: "True" };
  if (pod.metadata?.generation) scheduled.observedGeneration = pod.metadata.generation;
  conditions.push(scheduled);
  if (allContainersCouldRestart(pod.spec)) {
    conditions.push(generateAllContainersRestartingCondition(pod, runtime, oldPodStatus, s.phase));
  }
  s.conditions = conditions.map((c) => stampTransition(c, oldPodStatus, opts.now));

  setHostIPs(s, pod, opts.hostIPs);
  return s;
}

/** Keeps the old transition time of a kubelet condition whose status did not change. */
function stampTransition(c: V1PodCondition, old: V1PodStatus, now: Date): V1PodCondition {
  if (!podConditionByKubelet(c.type) || c.lastTransitionTime !== undefined) return c;
  const prev = getPodCondition(old.conditions, c.type);
  const t = prev !== undefined && prev.status === c.status && prev.lastTransitionTime !== undefined
    ? prev.lastTransitionTime
    : rfc3339(now.getTime()) as unknown as Date;
  return { ...c, lastTransitionTime: t };
}

/** hostIP(s) from the node IPs; a hostNetwork pod also gets them as its pod IPs. */
function setHostIPs(s: V1PodStatus, pod: V1Pod, hostIPs: readonly string[]): void {
  const primary = hostIPs[0];
  if (primary === undefined) return;
  s.hostIP = primary;
  s.hostIPs = hostIPs.slice(0, 2).map((ip) => ({ ip }));
  if (pod.spec?.hostNetwork !== true) return;
  if (!s.podIP) {
    s.podIP = primary;
    s.podIPs = [{ ip: primary }];
  }
  const secondary = hostIPs[1];
  const first = s.podIPs?.[0]?.ip;
  if (secondary !== undefined && s.podIPs?.length === 1 && first !== undefined) {
    if (parseIP(first)?.family !== parseIP(secondary)?.family) s.podIPs.push({ ip: secondary });
  }
}

/**
 * The first pod IP of the node's family, then the first of the other family, canonical
 * (upstream sortPodIPs); the node's family is IPv4 when it has no IP.
 */
export function sortPodIPs(podIPs: readonly string[], nodeIPs: readonly string[]): string[] {
  const nodeFamily = nodeIPs[0] === undefined ? 4 : parseIP(nodeIPs[0])?.family ?? 4;
  const parsed = podIPs.map(parseIP);
  const out: string[] = [];
  const primary = parsed.find((p) => p?.family === nodeFamily);
  if (primary) out.push(primary.text);
  const secondary = parsed.find((p) => p !== undefined && p.family !== nodeFamily);
  if (secondary) out.push(secondary.text);
  return out;
}

// --- runtime container statuses (upstream kubecontainer.Status) ---

type RuntimeState = "created" | "running" | "exited" | "unknown";

/** One container as the runtime reports it, converted as upstream toKubeContainerStatus does. */
interface RuntimeContainer {
  /** `<runtime>://<id>`. */
  readonly id: string;
  readonly name: string;
  readonly state: RuntimeState;
  /** Nanoseconds since the epoch. */
  readonly createdAt: bigint;
  readonly startedAt?: Date;
  readonly finishedAt?: Date;
  readonly exitCode: number;
  readonly reason: string;
  readonly message: string;
  readonly image: string;
  readonly imageRef: string;
  readonly restartCount: number;
  readonly user?: V1ContainerUser;
  /** cpu in millicores, memory in bytes, as the runtime reports them (and the actuated record). */
  readonly resources?: RuntimeResources & { readonly memoryRequest?: bigint };
}

/** The pod's containers, newest first. */
function runtimeContainers(podStatus: PodStatus, opts: GenerateStatusOptions): RuntimeContainer[] {
  const runtimeName = opts.runtimeName ?? "containerd";
  return podStatus.containerStatuses
    .map((c) => toRuntimeContainer(c, runtimeName, opts.terminationMessages, opts))
    .sort((a, b) => (a.createdAt === b.createdAt ? 0 : a.createdAt > b.createdAt ? -1 : 1));
}

/** metav1.Time of CRI nanoseconds, seconds precision; undefined for "not yet" (0). */
function criTime(ns: bigint): Date | undefined {
  if (ns <= 0n) return undefined;
  return rfc3339(Number(ns / 1_000_000n)) as unknown as Date;
}

function toRuntimeState(state: api.ContainerState): RuntimeState {
  switch (state) {
    case api.ContainerState.CONTAINER_CREATED:
      return "created";
    case api.ContainerState.CONTAINER_RUNNING:
      return "running";
    case api.ContainerState.CONTAINER_EXITED:
      return "exited";
    default:
      return "unknown";
  }
}

function toRuntimeContainer(
  c: api.ContainerStatus,
  runtimeName: string,
  terminationMessages: ReadonlyMap<string, string> | undefined,
  opts?: Pick<GenerateStatusOptions, "actuated" | "pod">,
): RuntimeContainer {
  const state = toRuntimeState(c.state);
  const restartCount = Object.hasOwn(c.annotations, CONTAINER_RESTART_COUNT_LABEL)
    ? getContainerInfoFromAnnotations(c.annotations).info.restartCount
    : c.metadata?.attempt ?? 0;
  const id = `${runtimeName}://${c.id}`;
  const exited = state === "exited";
  const tMessage = terminationMessages?.get(c.id) ?? terminationMessages?.get(id) ?? "";
  const linuxUser = c.user?.linux;
  const name = getContainerInfoFromLabels(c.labels).containerName || (c.metadata?.name ?? "");
  return {
    id,
    name,
    resources: runtimeResources(c, name, opts),
    state,
    createdAt: c.createdAt,
    startedAt: state === "created" ? undefined : criTime(c.startedAt),
    finishedAt: exited ? criTime(c.finishedAt) : undefined,
    exitCode: exited ? c.exitCode : 0,
    // Runtimes set Completed, Error or OOMKilled; one that sets nothing gets containerd's.
    reason: exited ? c.reason || (c.exitCode === 0 ? "Completed" : "Error") : "",
    message: exited ? (tMessage !== "" ? tMessage : c.message) : "",
    image: c.image?.image ?? "",
    imageRef: c.imageRef,
    restartCount,
    user: linuxUser === undefined ? undefined : {
      linux: {
        uid: Number(linuxUser.uid),
        gid: Number(linuxUser.gid),
        ...(linuxUser.supplementalGroups.length > 0
          ? { supplementalGroups: linuxUser.supplementalGroups.map(Number) }
          : {}),
      },
    },
  };
}

/**
 * upstream toKubeContainerStatus's resources: the runtime's, with what it does not report
 * (always the memory request; everything, on a runtime that reports nothing) from the actuated
 * record.
 */
function runtimeResources(
  c: api.ContainerStatus,
  name: string,
  opts: Pick<GenerateStatusOptions, "actuated" | "pod"> | undefined,
): RuntimeContainer["resources"] {
  const reported = toRuntimeResources(c.resources);
  const actuated = opts?.actuated?.(opts.pod.metadata?.uid ?? "", name);
  if (!actuated) return reported;
  const q = (list: Readonly<Record<string, string>> | undefined, r: string) => {
    const v = list?.[r];
    return v === undefined ? undefined : parseDec(String(v));
  };
  const memoryRequest = q(actuated.requests, "memory");
  if (reported === undefined) {
    return {
      cpuRequest: milliValueOf(q(actuated.requests, "cpu")),
      cpuLimit: milliValueOf(q(actuated.limits, "cpu")),
      memoryRequest: valueOf(memoryRequest),
      memoryLimit: valueOf(q(actuated.limits, "memory")),
    };
  }
  const mem = valueOf(memoryRequest);
  return mem === 0n ? reported : { ...reported, memoryRequest: mem };
}

/** Upstream HasAnyActiveRegularContainerStarted: a regular container of the newest sandbox. */
function hasAnyActiveRegularContainerStarted(
  pod: V1Pod,
  podStatus: PodStatus,
  runtime: readonly RuntimeContainer[],
): boolean {
  const sandbox = podStatus.sandboxStatuses[0];
  if (sandbox === undefined) return false;
  // The CRI status does not name the sandbox: the newest sandbox's containers are the ones
  // created after it.
  const names = new Set((pod.spec?.containers ?? []).map((c) => c.name));
  return runtime.some((c) => names.has(c.name) && c.createdAt >= sandbox.createdAt);
}

/** Upstream hasAnyRegularContainerCreated: a regular container exists in the runtime. */
function hasAnyRegularContainerCreated(pod: V1Pod, runtime: readonly RuntimeContainer[]): boolean {
  return (pod.spec?.containers ?? []).some((c) => {
    const s = runtime.find((r) => r.name === c.name);
    return s !== undefined && s.state !== "unknown";
  });
}

/** Upstream ShouldContainerBeRestarted, with container-level restart policies. */
function shouldContainerBeRestarted(
  container: V1Container,
  pod: V1Pod,
  runtime: readonly RuntimeContainer[],
): boolean {
  if (pod.metadata?.deletionTimestamp) return false;
  const s = runtime.find((r) => r.name === container.name);
  if (s === undefined) return true;
  if (s.state === "running") return false;
  if (s.state === "unknown" || s.state === "created") return true;
  return containerShouldRestart(container, pod.spec, s.exitCode);
}

// --- API status conversion ---

function convertStatusToAPIStatus(
  opts: GenerateStatusOptions,
  runtime: readonly RuntimeContainer[],
  old: V1PodStatus,
): V1PodStatus {
  const { pod } = opts;
  const s: V1PodStatus = {};
  const ips = sortPodIPs(opts.podStatus.ips, opts.hostIPs);
  if (ips.length > 0) {
    s.podIPs = ips.map((ip) => ({ ip }));
    s.podIP = ips[0];
  }
  s.qosClass = getPodQOS(pod);
  const hasInit = (pod.spec?.initContainers ?? []).length > 0;
  const podRestarting = shouldAllContainersRestart(pod, runtime, old);
  s.containerStatuses = convertContainerStatuses(
    opts,
    runtime,
    old.containerStatuses,
    pod.spec?.containers ?? [],
    { hasInitContainers: hasInit, isInitContainer: false, podRestarting },
  );
  s.initContainerStatuses = convertContainerStatuses(
    opts,
    runtime,
    old.initContainerStatuses,
    pod.spec?.initContainers ?? [],
    { hasInitContainers: hasInit, isInitContainer: true, podRestarting },
  );
  const ephemeral = (pod.spec?.ephemeralContainers ?? []) as V1Container[];
  if (ephemeral.length > 0 || (old.ephemeralContainerStatuses ?? []).length > 0) {
    s.ephemeralContainerStatuses = convertContainerStatuses(
      opts,
      runtime,
      old.ephemeralContainerStatuses,
      ephemeral,
      { hasInitContainers: hasInit, isInitContainer: false, podRestarting },
    );
  }
  // InPlacePodLevelResourcesVerticalScaling: the pod-level resources, for every pod.
  s.resources = podLevelResourcesStatus(pod, old, opts.podCgroup);
  const allocated = formatResourceList(podRequests(pod), pod, "requests");
  if (Object.keys(allocated).length > 0) s.allocatedResources = allocated;
  return s;
}

/**
 * upstream convertToAPIPodLevelResourcesStatus: for a pod whose status says Running, its
 * pod-level resources with what its cgroup runs with (cpu requests from the shares, cpu limits
 * from the quota, the memory limit; cpu at or below what the kernel takes keeps the allocated
 * value; a value not read keeps the last status's), the memory request from the pod's requests;
 * for any other pod, its requests and limits as allocated (getEffectiveAllocatedResources).
 */
function podLevelResourcesStatus(
  pod: V1Pod,
  old: V1PodStatus,
  cgroup: PodCgroupConfig | undefined,
): V1ResourceRequirements {
  if (pod.status?.phase !== "Running") {
    const out = deepCopy(pod.spec?.resources ?? {});
    const requests = formatResourceList(podRequests(pod), pod, "requests");
    const limits = formatResourceList(podLimits(pod), pod, "limits");
    delete out.requests;
    delete out.limits;
    if (Object.keys(limits).length > 0) out.limits = limits;
    if (Object.keys(requests).length > 0) out.requests = requests;
    return out;
  }
  const resources = deepCopy(pod.spec?.resources ?? {});
  const requests: Record<string, string> = { ...resources.requests };
  const limits: Record<string, string> = { ...resources.limits };
  const oldResources = old.resources ?? {};
  const preserve = (
    name: string,
    from: Readonly<Record<string, string>> | undefined,
    to: Record<string, string>,
  ) => {
    const v = from?.[name];
    if (old.phase === "Running" && old.resources !== undefined && v !== undefined) to[name] = v;
  };
  const allocatedMilli = (list: Readonly<Record<string, string>>) =>
    list.cpu === undefined ? 0n : milliValueOf(parseDec(String(list.cpu)));

  // cm.CPURequestsFromConfig: shares as millicores (SharesToMilliCPU).
  const shares = cgroup?.cpu?.cpuShares;
  const cpuRequest = shares !== undefined && shares >= MIN_SHARES
    ? (shares * 1000n + 1023n) / 1024n
    : 0n;
  if (cpuRequest > 0n) {
    if (cpuRequest > MIN_SHARES || allocatedMilli(requests) > MIN_SHARES) {
      requests.cpu = milliCPU(cpuRequest);
    }
  } else preserve("cpu", oldResources.requests, requests);

  if (requests.memory === undefined) {
    const aggregated = podRequests(pod).get("memory");
    if (aggregated !== undefined) {
      requests.memory = formatLike(aggregated, quantitiesOf(pod, "memory", "requests")[0]);
    }
  }
  // Upstream keeps the last status's memory request: it is not written to the cgroup.
  preserve("memory", oldResources.requests, requests);

  // cm.CPULimitsFromConfig: the quota as millicores (QuotaToMilliCPU).
  const period = cgroup?.cpu?.cpuPeriod;
  const quota = cgroup?.cpu?.cpuQuota;
  const cpuLimit = period !== undefined && period > 0n && quota !== undefined && quota !== -1n
    ? (quota * 1000n) / period
    : 0n;
  if (cpuLimit > 0n) {
    if (cpuLimit > MIN_MILLI_CPU_LIMIT || allocatedMilli(limits) > MIN_MILLI_CPU_LIMIT) {
      limits.cpu = milliCPU(cpuLimit);
    }
  } else preserve("cpu", oldResources.limits, limits);

  // cm.MemoryLimitsFromConfig: a positive limit (cgroup v1's "unlimited" is one, as upstream).
  const memory = cgroup?.memory?.memory;
  if (memory !== undefined && memory > 0n) {
    limits.memory = formatQuantity(intQuantity(memory, "BinarySI"));
  } else preserve("memory", oldResources.limits, limits);

  delete resources.requests;
  delete resources.limits;
  if (Object.keys(limits).length > 0) resources.limits = limits;
  if (Object.keys(requests).length > 0) resources.requests = requests;
  return resources;
}

/**
 * The quantity strings a pod's requests or limits of `name` are summed from, in the order
 * upstream's PodRequests and PodLimits take them: the first one's format is the sum's (Go's
 * Quantity.Add).
 */
function quantitiesOf(pod: V1Pod, name: string, list: "requests" | "limits"): string[] {
  const out: string[] = [];
  const podLevel = pod.spec?.resources?.[list]?.[name];
  if (podLevel !== undefined) out.push(String(podLevel));
  for (const c of [...(pod.spec?.containers ?? []), ...(pod.spec?.initContainers ?? [])]) {
    const q = c.resources?.[list]?.[name];
    if (q !== undefined) out.push(String(q));
  }
  const overhead = pod.spec?.overhead?.[name];
  if (overhead !== undefined) out.push(String(overhead));
  return out;
}

/** A resource list as the API writes it: each amount in the format of what it was summed from. */
function formatResourceList(
  list: ResourceList,
  pod: V1Pod,
  kind: "requests" | "limits",
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of list) {
    out[name] = formatLike(value, quantitiesOf(pod, name, kind)[0]);
  }
  return out;
}

/** Go's Quantity.String() for a sum whose format is that of `like` (its first addend's). */
function formatLike(value: Dec, like: string | undefined): string {
  const format = like === undefined ? "DecimalSI" : parseQuantityFormatted(like).format;
  return formatQuantity({ value, format });
}

/**
 * The volume mounts of a container as its status shows them (RecursiveReadOnlyMounts): a
 * read-only one is Enabled when its mode resolves to recursive read-only on the pod's handler.
 */
function volumeMountStatuses(
  container: V1Container,
  opts: GenerateStatusOptions,
): V1VolumeMountStatus[] | undefined {
  const mounts = container.volumeMounts ?? [];
  if (mounts.length === 0) return undefined;
  return mounts.map((m) => {
    const v: V1VolumeMountStatus = { name: m.name, mountPath: m.mountPath };
    if (m.readOnly) {
      v.readOnly = true;
      let enabled = false;
      try {
        enabled = resolveRecursiveReadOnly(m, opts.supportsRecursiveReadOnly ?? false);
      } catch (e) {
        opts.logger?.error(e, "failed to resolve recursive read-only mode", {
          mode: m.recursiveReadOnly,
        });
      }
      v.recursiveReadOnly = enabled ? "Enabled" : "Disabled";
    }
    return v;
  });
}

/** What {@link convertContainerStatuses} converts: which list, in what pod. */
interface ContainerListKind {
  readonly hasInitContainers: boolean;
  readonly isInitContainer: boolean;
  /** The pod restarts all its containers in place (upstream ShouldAllContainersRestart). */
  readonly podRestarting: boolean;
}

/** Upstream convertToAPIContainerStatuses for one list of containers. */
function convertContainerStatuses(
  opts: GenerateStatusOptions,
  runtime: readonly RuntimeContainer[],
  previous: readonly V1ContainerStatus[] | undefined,
  containers: readonly V1Container[],
  { hasInitContainers, isInitContainer, podRestarting }: ContainerListKind,
): V1ContainerStatus[] {
  const { pod } = opts;
  const uid = pod.metadata?.uid ?? "";
  const oldStatuses = new Map<string, V1ContainerStatus>();
  for (const s of previous ?? []) oldStatuses.set(s.name, s);
  const defaultReason = hasInitContainers ? POD_INITIALIZING : CONTAINER_CREATING;
  const specByName = new Map(containers.map((c) => [c.name, c]));

  // Every container starts out waiting, with the old restart count and last state.
  const statuses = new Map<string, V1ContainerStatus>();
  for (const c of containers) {
    let status: V1ContainerStatus = {
      name: c.name,
      image: c.image ?? "",
      imageID: "",
      ready: false,
      restartCount: 0,
      state: { waiting: { reason: defaultReason } },
      lastState: {},
    };
    const mounts = volumeMountStatuses(c, opts);
    if (mounts !== undefined) status.volumeMounts = mounts;
    const old = oldStatuses.get(c.name);
    if (old !== undefined) {
      if (old.state?.terminated) {
        status = deepCopy(old);
      } else {
        status.restartCount = old.restartCount;
        status.lastState = deepCopy(old.lastState ?? {});
      }
    }
    statuses.set(c.name, status);
  }

  // A container that was running and that the runtime no longer knows has terminated.
  for (const c of containers) {
    if (runtime.some((r) => r.name === c.name)) continue;
    const old = oldStatuses.get(c.name);
    if (old === undefined) continue;
    if (podRestarting && old.state?.waiting === undefined) {
      // Removed to restart all containers in place: it waits to run again.
      const status = statuses.get(c.name);
      if (status === undefined) continue;
      status.state = {
        waiting: { reason: RESTARTING_ALL_CONTAINERS, message: RESTARTING_ALL_CONTAINERS_MESSAGE },
      };
      status.lastState = {
        ...status.lastState,
        terminated: {
          reason: RESTARTING_ALL_CONTAINERS,
          message: RESTARTING_ALL_CONTAINERS_MESSAGE,
          exitCode: 137,
        },
      };
      status.restartCount = old.restartCount + 1;
      continue;
    }
    if (old.state?.terminated || !old.state?.running) continue;
    const status = statuses.get(c.name);
    if (status === undefined || status.state?.waiting?.reason !== defaultReason) continue;
    if (status.lastState?.terminated) continue;
    status.lastState = {
      terminated: {
        reason: CONTAINER_STATUS_UNKNOWN,
        message:
          "The container could not be located when the pod was deleted.  The container used to be Running",
        exitCode: 137,
      },
    };
    if (!pod.metadata?.deletionTimestamp) status.restartCount += 1;
  }

  // The newest instance of each container gives its state, the one before its last state.
  const seen = new Map<string, number>();
  for (const r of runtime) {
    if (!statuses.has(r.name)) continue;
    const count = seen.get(r.name) ?? 0;
    if (count >= 2) continue;
    const status = convertContainerStatus(
      r,
      oldStatuses.get(r.name),
      specByName.get(r.name),
      podRestarting,
    );
    if (count === 0) statuses.set(r.name, status);
    else {
      const newest = statuses.get(r.name);
      if (newest !== undefined) newest.lastState = status.state ?? {};
    }
    seen.set(r.name, count + 1);
  }

  // Containers that will be (re)started wait, with the reason of their last start failure.
  for (const c of containers) {
    const status = statuses.get(c.name);
    if (status === undefined) continue;
    if (isInitContainer) {
      const s = runtime.find((r) => r.name === c.name);
      if (s !== undefined && s.state === "exited" && s.exitCode === 0) continue;
      // An init container the runtime lost, in a pod whose regular containers exist, has
      // completed (only a sidecar would need to run again).
      if (
        s === undefined && hasAnyRegularContainerCreated(pod, runtime) &&
        !isRestartableInitContainer(c) && status.state?.waiting
      ) {
        status.state = {
          terminated: {
            reason: "Completed",
            message:
              "Unable to get init container status from container runtime and pod has been initialized, treat it as exited normally",
            exitCode: 0,
          },
        };
        continue;
      }
    }
    if (!shouldContainerBeRestarted(c, pod, runtime)) continue;
    const failure = opts.reasons.get(uid, c.name);
    if (failure === undefined) continue;
    if (status.state?.terminated) status.lastState = status.state;
    const waiting: V1ContainerState["waiting"] = { reason: failure.reason };
    if (failure.message) waiting.message = failure.message;
    status.state = { waiting };
  }

  if (isInitContainer) {
    return containers.flatMap((c) => {
      const s = statuses.get(c.name);
      return s === undefined ? [] : [s];
    });
  }
  return [...statuses.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** Upstream convertContainerStatus: one runtime container as an API container status. */
function convertContainerStatus(
  r: RuntimeContainer,
  old: V1ContainerStatus | undefined,
  spec: V1Container | undefined,
  podRestarting: boolean,
): V1ContainerStatus {
  const status: V1ContainerStatus = {
    name: r.name,
    restartCount: r.restartCount,
    image: r.image !== "" ? r.image : spec?.image ?? "",
    imageID: r.imageRef,
    containerID: r.id,
    ready: false,
    state: {},
    lastState: {},
  };
  if (old !== undefined) {
    if (old.volumeMounts !== undefined) status.volumeMounts = deepCopy(old.volumeMounts);
    // Restarting all containers removes the old instances, which would otherwise give the
    // restart count and the last termination: carry them over from the last status.
    if (old.restartCount > status.restartCount) status.restartCount = old.restartCount;
    if (old.containerID !== status.containerID && old.state?.terminated) {
      status.lastState = { terminated: deepCopy(old.state.terminated) };
    } else if (old.lastState?.terminated) {
      status.lastState = { terminated: deepCopy(old.lastState.terminated) };
    }
  }
  switch (r.state) {
    case "running":
      status.state = { running: withDefined({ startedAt: r.startedAt }) };
      if (old?.state?.terminated && old.restartCount >= r.restartCount) {
        status.restartCount = old.restartCount + 1;
      }
      break;
    case "created":
      status.state = { waiting: {} };
      break;
    case "exited":
      status.state = {
        terminated: withDefined({
          exitCode: r.exitCode,
          reason: r.reason || undefined,
          message: r.message || undefined,
          startedAt: r.startedAt,
          finishedAt: r.finishedAt,
          containerID: r.id,
        }),
      };
      break;
    default:
      if (old?.state?.running) {
        // It ran and is gone: it did not "never run", which would make it wait.
        status.state = {
          terminated: {
            reason: podRestarting ? RESTARTING_ALL_CONTAINERS : CONTAINER_STATUS_UNKNOWN,
            message: "The container could not be located when the pod was terminated",
            exitCode: 137,
          },
        };
        status.restartCount = old.restartCount + 1;
      } else {
        status.state = { waiting: {} };
      }
  }
  if (spec !== undefined) {
    // InPlacePodVerticalScaling: what runs, next to what is allocated.
    status.resources = containerStatusResources(spec, status, r, old);
    if (spec.resources?.requests !== undefined) {
      status.allocatedResources = deepCopy(spec.resources.requests);
    }
  }
  if (r.user !== undefined) status.user = r.user;
  return status;
}

/** upstream cm.MinMilliCPULimit and cm.MinShares. */
const MIN_MILLI_CPU_LIMIT = 10n;
const MIN_SHARES = 2n;

function milliCPU(m: bigint): string {
  return m % 1000n === 0n ? `${m / 1000n}` : `${m}m`;
}

/**
 * upstream convertContainerStatusResources: the allocated resources, with the values the
 * runtime reports for a running container (cpu at or below the smallest value the kernel takes
 * keeps the allocated one); a value the runtime does not report keeps the last status's while
 * the same container runs.
 */
function containerStatusResources(
  allocated: V1Container,
  status: V1ContainerStatus,
  r: RuntimeContainer,
  old: V1ContainerStatus | undefined,
): V1ResourceRequirements {
  const resources = deepCopy(allocated.resources ?? {});
  if (r.state !== "running") return resources;
  const oldResources = old?.resources ?? {};
  const sameRun = old?.state?.running !== undefined && status.containerID === old.containerID;
  const preserve = (
    name: string,
    from: Readonly<Record<string, string>> | undefined,
    to: Record<string, string>,
  ) => {
    const v = from?.[name];
    if (sameRun && v !== undefined) to[name] = v;
  };
  const run = r.resources;
  const allocatedMilli = (list: Readonly<Record<string, string>> | undefined) => {
    const v = list?.cpu;
    return v === undefined ? 0n : milliValueOf(parseDec(String(v)));
  };
  if (resources.limits) {
    if (run?.cpuLimit !== undefined) {
      if (
        run.cpuLimit > MIN_MILLI_CPU_LIMIT || allocatedMilli(resources.limits) > MIN_MILLI_CPU_LIMIT
      ) {
        resources.limits.cpu = milliCPU(run.cpuLimit);
      }
    } else preserve("cpu", oldResources.limits, resources.limits);
    if (run?.memoryLimit !== undefined) {
      resources.limits.memory = formatBinarySI(Number(run.memoryLimit));
    } else preserve("memory", oldResources.limits, resources.limits);
  }
  if (resources.requests) {
    if (run?.cpuRequest !== undefined) {
      if (run.cpuRequest > MIN_SHARES || allocatedMilli(resources.requests) > MIN_SHARES) {
        resources.requests.cpu = milliCPU(run.cpuRequest);
      }
    } else preserve("cpu", oldResources.requests, resources.requests);
    if (run?.memoryRequest !== undefined) {
      resources.requests.memory = formatBinarySI(Number(run.memoryRequest));
    } else preserve("memory", oldResources.requests, resources.requests);
  }
  return resources;
}

/** The object without its undefined properties. */
function withDefined<T extends object>(o: T): T {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;
}

/** The prober's results as the status reads them (upstream's readiness and startup managers). */
export interface PodProbeResults {
  /** Readiness by container id; undefined when the probe has no result yet. */
  ready(containerId: string): boolean | undefined;
  /** Startup by container id; undefined when the probe has no result yet. */
  started(containerId: string): boolean | undefined;
  /** Whether a container started then (ms since the epoch) ran before this kubelet. */
  startedBeforeKubelet(startedAtMs: number): boolean;
}

/** Upstream prober UpdatePodStatus: started and ready of every container. */
function applyProbeResults(opts: GenerateStatusOptions, s: V1PodStatus): void {
  const { pod, probes, podIsTerminal } = opts;
  const specs = new Map<string, V1Container>();
  for (const c of pod.spec?.containers ?? []) specs.set(c.name, c);
  for (const c of pod.spec?.initContainers ?? []) specs.set(c.name, c);

  // Upstream convertToAPIContainerStatuses (ChangeContainerStatusOnKubeletRestart off): a running
  // container keeps the `started` its pod last reported, so a kubelet restart does not hold it
  // back behind a startup probe it already passed.
  const oldStarted = new Set(
    [...(pod.status?.containerStatuses ?? []), ...(pod.status?.initContainerStatuses ?? [])]
      .filter((c) => c.started === true).map((c) => c.name),
  );
  const started = (cs: V1ContainerStatus, spec: V1Container | undefined): boolean => {
    if (!cs.state?.running) return false;
    if (probes === undefined) return true;
    const r = cs.containerID ? probes.started(runtimeContainerId(cs.containerID)) : undefined;
    if (r !== undefined) return r;
    if (oldStarted.has(cs.name)) return true;
    // A startup probe that has not succeeded yet holds the container back.
    return spec?.startupProbe === undefined;
  };
  const podWasReady = (pod.status?.conditions ?? []).some((c) =>
    c.type === "Ready" && c.status === "True"
  );
  const ready = (cs: V1ContainerStatus, spec: V1Container | undefined): boolean => {
    if (!cs.state?.running || podIsTerminal) return false;
    if (probes === undefined) return true;
    const r = cs.containerID ? probes.ready(runtimeContainerId(cs.containerID)) : undefined;
    if (r === true) return true;
    let ready = spec?.readinessProbe === undefined;
    // Upstream setReadyStateOnKubeletRestart (ChangeContainerStatusOnKubeletRestart off): a
    // container that ran before this kubelet keeps the readiness its pod last reported until
    // its probe has a result.
    const at: unknown = cs.state.running.startedAt;
    const startedAt = at instanceof Date ? at.getTime() : Date.parse(String(at ?? ""));
    if (probes.startedBeforeKubelet(Number.isNaN(startedAt) ? 0 : startedAt)) {
      if (!ready && r === undefined) ready = true;
      if (spec?.readinessProbe !== undefined && !podWasReady) ready = false;
    }
    return ready;
  };

  for (const cs of s.containerStatuses ?? []) {
    const spec = specs.get(cs.name);
    cs.started = started(cs, spec);
    cs.ready = cs.started && ready(cs, spec);
  }
  for (const cs of s.initContainerStatuses ?? []) {
    const spec = specs.get(cs.name);
    cs.started = started(cs, spec);
    if (spec === undefined || !isRestartableInitContainer(spec)) {
      cs.ready = cs.state?.terminated?.exitCode === 0;
      continue;
    }
    cs.ready = cs.started && ready(cs, spec);
  }
}
