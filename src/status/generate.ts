/**
 * @module
 * The pod conditions the kubelet owns, computed from the API container statuses and the phase:
 * PodReadyToStartContainers (is there a ready sandbox with networking), Initialized (have the init
 * containers completed, or the sidecars started), ContainersReady and Ready (are all containers
 * ready, and the readiness gates true), with upstream's reasons and messages. Also the few pod
 * helpers they share with the status generator and the status manager (restartable init
 * containers, condition lookup, observed generation). AllContainersRestarting (a container exited
 * with a RestartAllContainers rule, and the pod's containers are being removed to run again in the
 * same sandbox) comes with the two questions it asks of the runtime's containers. Pure functions:
 * no I/O, no clock (the status manager stamps the transition times).
 *
 * Corresponds to upstream `pkg/kubelet/status/generate.go`, plus `PodConditionByKubelet` from
 * `pkg/kubelet/types/pod_status.go`, `ShouldAllContainersRestart` and
 * `AllContainersRestartCleanedUp` from `pkg/kubelet/container/helpers.go` and a few
 * `pkg/api/v1/pod` helpers, with RestartAllContainersOnContainerExits on (beta in v1.36).
 */

import type {
  V1Container,
  V1ContainerStatus,
  V1Pod,
  V1PodCondition,
  V1PodSpec,
  V1PodStatus,
} from "@kubernetes/client-node";
import type { PodStatus } from "../container/pod_cache.ts";
import {
  findMatchingContainerRestartRule,
  getContainerStatus,
  isRestartableInitContainer,
} from "../pod/podutil.ts";
import { podSandboxChanged } from "../kuberuntime/sandbox_changed.ts";
import { POD_RESIZE_IN_PROGRESS, POD_RESIZE_PENDING } from "./resize_conditions.ts";

/** Reason: every container status is unknown. */
export const UNKNOWN_CONTAINER_STATUSES = "UnknownContainerStatuses";
/** Reason: every related container has succeeded. */
export const POD_COMPLETED = "PodCompleted";
/** Reason: the pod has failed, so its containers have. */
export const POD_FAILED = "PodFailed";
/** Reason: one or more containers are not ready. */
export const CONTAINERS_NOT_READY = "ContainersNotReady";
/** Reason: one or more init containers have not succeeded. */
export const CONTAINERS_NOT_INITIALIZED = "ContainersNotInitialized";
/** Reason: one or more readiness gates are not true. */
export const READINESS_GATES_NOT_READY = "ReadinessGatesNotReady";
/** Reason: a container exited and triggered the RestartAllContainers action. */
export const RESTART_ALL_CONTAINERS_STARTED = "RestartAllContainersStarted";

/** Condition types (v1.PodConditionType). */
export const POD_SCHEDULED = "PodScheduled";
export const POD_READY = "Ready";
export const POD_INITIALIZED = "Initialized";
export const CONTAINERS_READY = "ContainersReady";
export const POD_READY_TO_START_CONTAINERS = "PodReadyToStartContainers";
export const DISRUPTION_TARGET = "DisruptionTarget";
export const ALL_CONTAINERS_RESTARTING = "AllContainersRestarting";

const KUBELET_CONDITIONS: ReadonlySet<string> = new Set([
  POD_SCHEDULED,
  POD_READY,
  POD_INITIALIZED,
  CONTAINERS_READY,
  POD_RESIZE_IN_PROGRESS,
  POD_RESIZE_PENDING,
  // Behind PodReadyToStartContainersCondition, on by default.
  POD_READY_TO_START_CONTAINERS,
  // Behind RestartAllContainersOnContainerExits, on by default since v1.36.
  ALL_CONTAINERS_RESTARTING,
]);

/** Whether the kubelet owns conditions of this type (upstream PodConditionByKubelet). */
export function podConditionByKubelet(type: string): boolean {
  return KUBELET_CONDITIONS.has(type);
}

/** Whether the kubelet shares conditions of this type with others (DisruptionTarget). */
export function podConditionSharedByKubelet(type: string): boolean {
  return type === DISRUPTION_TARGET;
}

/** The condition of this type in the list (upstream GetPodConditionFromList). */
export function getPodCondition(
  conditions: readonly V1PodCondition[] | undefined,
  type: string,
): V1PodCondition | undefined {
  return conditions?.find((c) => c.type === type);
}

/**
 * The observedGeneration of a kubelet condition: the pod's generation (PodObservedGenerationTracking
 * is GA and locked on). Undefined when the pod has none, as Go's omitempty drops a zero.
 */
export function conditionGeneration(pod: V1Pod): number | undefined {
  const g = pod.metadata?.generation;
  return g ? g : undefined;
}

/** Go's `%s` of a []string: `[a b c]`. */
function goList(names: readonly string[]): string {
  return `[${names.join(" ")}]`;
}

/** A condition with the pod's observed generation, and no empty reason or message. */
function condition(
  pod: V1Pod,
  type: string,
  status: "True" | "False" | "Unknown" | string,
  reason?: string,
  message?: string,
): V1PodCondition {
  const c: V1PodCondition = { type, status };
  const g = conditionGeneration(pod);
  if (g !== undefined) c.observedGeneration = g;
  if (reason) c.reason = reason;
  if (message) c.message = message;
  return c;
}

/**
 * ContainersReady: True when every container (and every sidecar) has a ready status. A
 * Succeeded pod says PodCompleted; a Failed one says PodFailed, as its containers may still be
 * stopping. `statuses` undefined stands for upstream's nil list (nothing known).
 */
export function generateContainersReadyCondition(
  pod: V1Pod,
  statuses: readonly V1ContainerStatus[] | undefined,
  phase: string | undefined,
): V1PodCondition {
  if (statuses === undefined) {
    return condition(pod, CONTAINERS_READY, "False", UNKNOWN_CONTAINER_STATUSES);
  }
  const unknown: string[] = [];
  const unready: string[] = [];
  const check = (c: V1Container) => {
    const s = getContainerStatus(statuses, c.name);
    if (s === undefined) unknown.push(c.name);
    else if (!s.ready) unready.push(c.name);
  };
  for (const c of pod.spec?.initContainers ?? []) {
    if (isRestartableInitContainer(c)) check(c);
  }
  for (const c of pod.spec?.containers ?? []) check(c);

  if (phase === "Succeeded" && unknown.length === 0) {
    return generateContainersReadyConditionForTerminalPhase(pod, phase);
  }
  if (phase === "Failed") return generateContainersReadyConditionForTerminalPhase(pod, phase);

  const messages: string[] = [];
  if (unknown.length > 0) messages.push(`containers with unknown status: ${goList(unknown)}`);
  if (unready.length > 0) messages.push(`containers with unready status: ${goList(unready)}`);
  if (messages.length > 0) {
    return condition(pod, CONTAINERS_READY, "False", CONTAINERS_NOT_READY, messages.join(", "));
  }
  return condition(pod, CONTAINERS_READY, "True");
}

/**
 * Ready: ContainersReady, and then every readiness gate's condition (looked up in `conditions`)
 * must be True.
 */
export function generatePodReadyCondition(
  pod: V1Pod,
  conditions: readonly V1PodCondition[] | undefined,
  statuses: readonly V1ContainerStatus[] | undefined,
  phase: string | undefined,
): V1PodCondition {
  const containersReady = generateContainersReadyCondition(pod, statuses, phase);
  if (containersReady.status !== "True") {
    return condition(
      pod,
      POD_READY,
      containersReady.status,
      containersReady.reason,
      containersReady.message,
    );
  }
  const messages: string[] = [];
  for (const gate of pod.spec?.readinessGates ?? []) {
    const c = getPodCondition(conditions, gate.conditionType);
    if (c === undefined) {
      messages.push(
        `corresponding condition of pod readiness gate ${
          JSON.stringify(gate.conditionType)
        } does not exist.`,
      );
    } else if (c.status !== "True") {
      messages.push(
        `the status of pod readiness gate ${
          JSON.stringify(gate.conditionType)
        } is not "True", but ${c.status}`,
      );
    }
  }
  if (messages.length > 0) {
    return condition(pod, POD_READY, "False", READINESS_GATES_NOT_READY, messages.join(", "));
  }
  return condition(pod, POD_READY, "True");
}

/** A regular init container counts once ready (exited 0); a sidecar once started. */
function isInitContainerInitialized(container: V1Container, status: V1ContainerStatus): boolean {
  return isRestartableInitContainer(container) ? status.started === true : status.ready;
}

/** Whether a regular container has ever run (upstream HasAnyRegularContainerStarted). */
export function hasAnyRegularContainerStarted(
  spec: V1PodSpec | undefined,
  statuses: readonly V1ContainerStatus[] | undefined,
): boolean {
  const names = new Set((spec?.containers ?? []).map((c) => c.name));
  return (statuses ?? []).some((s) =>
    names.has(s.name) && (s.state?.running !== undefined || s.state?.terminated !== undefined)
  );
}

/**
 * Initialized: True once every init container completed (sidecars: started), or once any
 * regular container has run, so that restarting sidecars do not un-initialize the pod.
 */
export function generatePodInitializedCondition(
  pod: V1Pod,
  statuses: readonly V1ContainerStatus[] | undefined,
  phase: string | undefined,
  oldStatus?: Pick<V1PodStatus, "conditions">,
): V1PodCondition {
  const inits = pod.spec?.initContainers ?? [];
  if (statuses === undefined && inits.length > 0) {
    return condition(pod, POD_INITIALIZED, "False", UNKNOWN_CONTAINER_STATUSES);
  }
  const unknown: string[] = [];
  const incomplete: string[] = [];
  for (const c of inits) {
    const s = getContainerStatus(statuses, c.name);
    if (s === undefined) unknown.push(c.name);
    else if (!isInitContainerInitialized(c, s)) incomplete.push(c.name);
  }
  if (phase === "Succeeded" && unknown.length === 0) {
    return condition(pod, POD_INITIALIZED, "True", POD_COMPLETED);
  }
  if (hasAnyRegularContainerStarted(pod.spec, statuses)) {
    return condition(pod, POD_INITIALIZED, "True");
  }
  const messages: string[] = [];
  if (unknown.length > 0) messages.push(`containers with unknown status: ${goList(unknown)}`);
  if (incomplete.length > 0) {
    messages.push(`containers with incomplete status: ${goList(incomplete)}`);
  }
  if (messages.length > 0) {
    // Restarting all containers in place sends completed init containers back to waiting; a
    // pod once initialized stays so.
    if (getPodCondition(oldStatus?.conditions, POD_INITIALIZED)?.status === "True") {
      return condition(pod, POD_INITIALIZED, "True");
    }
    return condition(
      pod,
      POD_INITIALIZED,
      "False",
      CONTAINERS_NOT_INITIALIZED,
      messages.join(", "),
    );
  }
  return condition(pod, POD_INITIALIZED, "True");
}

/** PodReadyToStartContainers: True while the pod has a usable sandbox (no new one needed). */
export function generatePodReadyToStartContainersCondition(
  pod: V1Pod,
  podStatus: PodStatus,
): V1PodCondition {
  return condition(
    pod,
    POD_READY_TO_START_CONTAINERS,
    podSandboxChanged(pod, podStatus).changed ? "False" : "True",
  );
}

/** ContainersReady False for a terminal phase, reason PodFailed or PodCompleted. */
export function generateContainersReadyConditionForTerminalPhase(
  pod: V1Pod,
  phase: string,
): V1PodCondition {
  return condition(pod, CONTAINERS_READY, "False", terminalReason(phase));
}

/** Ready False for a terminal phase, reason PodFailed or PodCompleted. */
export function generatePodReadyConditionForTerminalPhase(
  pod: V1Pod,
  phase: string,
): V1PodCondition {
  return condition(pod, POD_READY, "False", terminalReason(phase));
}

function terminalReason(phase: string): string | undefined {
  if (phase === "Failed") return POD_FAILED;
  if (phase === "Succeeded") return POD_COMPLETED;
  return undefined;
}

/** What {@link shouldAllContainersRestart} reads of a runtime container. */
export interface RuntimeContainerState {
  readonly name: string;
  readonly state: "created" | "running" | "exited" | "unknown";
  readonly exitCode: number;
}

/**
 * Whether the pod is restarting all its containers in place (upstream
 * kubecontainer.ShouldAllContainersRestart): the API status says AllContainersRestarting, or
 * an init or regular container (its newest instance in `runtime`, newest first, or its API
 * status) has exited with a code whose first matching rule is RestartAllContainers.
 */
export function shouldAllContainersRestart(
  pod: V1Pod,
  runtime: readonly RuntimeContainerState[] | undefined,
  apiStatus: V1PodStatus | undefined,
): boolean {
  const cond = getPodCondition(apiStatus?.conditions, ALL_CONTAINERS_RESTARTING);
  if (cond?.status === "True") return true;
  const api = [
    ...(apiStatus?.initContainerStatuses ?? []),
    ...(apiStatus?.containerStatuses ?? []),
  ];
  const triggers = (c: V1Container, exitCode: number) =>
    findMatchingContainerRestartRule(c, exitCode)?.action === "RestartAllContainers";
  for (const c of [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])]) {
    const r = runtime?.find((s) => s.name === c.name);
    if (r?.state === "exited" && triggers(c, r.exitCode)) return true;
    const t = apiStatus === undefined
      ? undefined
      : getContainerStatus(api, c.name)?.state?.terminated;
    if (t !== undefined && triggers(c, t.exitCode)) return true;
  }
  return false;
}

/**
 * Whether the runtime holds no instance of any init or regular container of the pod any more
 * (upstream kubecontainer.AllContainersRestartCleanedUp).
 */
export function allContainersRestartCleanedUp(
  pod: V1Pod,
  runtime: readonly Pick<RuntimeContainerState, "name">[],
): boolean {
  const names = new Set(
    [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])].map((c) => c.name),
  );
  return !runtime.some((r) => names.has(r.name));
}

/**
 * AllContainersRestarting (upstream GenerateAllContainersRestartingCondition): True, reason
 * RestartAllContainersStarted, from the exit that triggered the action until the runtime holds
 * none of the pod's containers; False otherwise (reason PodCompleted or PodFailed in a terminal
 * phase). Only pods with a RestartAllContainers rule carry it. It has no observedGeneration.
 */
export function generateAllContainersRestartingCondition(
  pod: V1Pod,
  runtime: readonly RuntimeContainerState[],
  oldStatus: V1PodStatus | undefined,
  phase: string | undefined,
): V1PodCondition {
  if (phase === "Succeeded" || phase === "Failed") {
    return { type: ALL_CONTAINERS_RESTARTING, status: "False", reason: terminalReason(phase) };
  }
  if (
    !shouldAllContainersRestart(pod, runtime, oldStatus) ||
    allContainersRestartCleanedUp(pod, runtime)
  ) {
    return { type: ALL_CONTAINERS_RESTARTING, status: "False" };
  }
  return {
    type: ALL_CONTAINERS_RESTARTING,
    status: "True",
    reason: RESTART_ALL_CONTAINERS_STARTED,
    message: "container exited with restart policy rule",
  };
}
