/**
 * @module
 * Pod quality-of-service class and the oom_score_adj each container gets from it. Pure functions
 * of the pod spec, used by the container runtime manager when it builds a container's Linux
 * resources and by the sandbox config. Corresponds to upstream
 * `pkg/apis/core/v1/helper/qos/qos.go` (GetPodQOS, ComputePodQOS), `pkg/kubelet/qos/policy.go`
 * and `helpers.go` (GetContainerOOMScoreAdjust), and the critical-pod predicates of
 * `pkg/kubelet/types/pod_update.go`. Feature gates are taken at their v1.36 defaults:
 * PodLevelResources on, KubeletOOMScoreAdjTieBreak and DRANodeAllocatableResources off.
 */

import type { V1Container, V1Pod, V1ResourceRequirements } from "@kubernetes/client-node";
import {
  aggregateContainerRequests,
  cmpDec,
  isPodLevelRequestsSet,
  isZeroDec,
  parseDec,
  resourceList,
  valueOf,
} from "./resource_helpers.ts";
import { isMirrorPod, isStaticPod } from "../config/pod_config.ts";

export { isMirrorPod, isStaticPod };

/** A pod's quality-of-service class (upstream `v1.PodQOSClass`). */
export type QOSClass = "Guaranteed" | "Burstable" | "BestEffort";

/** oom_score_adj of the kubelet process itself (upstream `KubeletOOMScoreAdj`). */
export const KUBELET_OOM_SCORE_ADJ = -999;
/** oom_score_adj of Guaranteed and node-critical containers. */
export const GUARANTEED_OOM_SCORE_ADJ = -997;
/** oom_score_adj of BestEffort containers. */
export const BEST_EFFORT_OOM_SCORE_ADJ = 1000;

/** Priority at and above which a pod is critical (upstream `scheduling.SystemCriticalPriority`). */
export const SYSTEM_CRITICAL_PRIORITY = 2_000_000_000;
/** The priority class of node-critical pods. */
export const SYSTEM_NODE_CRITICAL = "system-node-critical";

const QOS_RESOURCES = ["cpu", "memory"] as const;

/** The pod's QoS class: status.qosClass when the apiserver has set it, else computed. */
export function getPodQOS(pod: V1Pod): QOSClass {
  const recorded = pod.status?.qosClass;
  if (recorded === "Guaranteed" || recorded === "Burstable" || recorded === "BestEffort") {
    return recorded;
  }
  return computePodQOS(pod);
}

/**
 * Computes the QoS class from cpu and memory requests and limits: pod-level resources when the
 * pod sets them, else every init and regular container (upstream `ComputePodQOS`).
 */
export function computePodQOS(pod: V1Pod): QOSClass {
  if (pod.spec?.resources) return resourceQOS(pod.spec.resources);
  let podQOS: QOSClass | undefined;
  for (const c of [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])]) {
    const qos = resourceQOS(c.resources ?? {});
    if (qos === "Burstable") return qos;
    if (podQOS === undefined) podQOS = qos;
    else if (podQOS !== qos) return "Burstable";
  }
  return podQOS ?? "BestEffort";
}

function resourceQOS(resources: V1ResourceRequirements): QOSClass {
  const requests = resources.requests ?? {};
  const limits = resources.limits ?? {};
  if (Object.keys(requests).length === 0 && Object.keys(limits).length === 0) return "BestEffort";
  let qos: QOSClass | undefined;
  for (const name of QOS_RESOURCES) {
    const req = requests[name] === undefined ? undefined : parseDec(requests[name]);
    const lim = limits[name] === undefined ? undefined : parseDec(limits[name]);
    const zero = { n: 0n, s: 0 };
    if (cmpDec(req ?? zero, lim ?? zero) !== 0) return "Burstable";
    const bestEffort = isZeroDec(req) && isZeroDec(lim);
    if (qos === undefined) qos = bestEffort ? "BestEffort" : "Guaranteed";
    else if (bestEffort !== (qos === "BestEffort")) return "Burstable";
  }
  return qos ?? "BestEffort";
}

/** Static, mirror, or priority at least system-critical (upstream `IsCriticalPod`). */
export function isCriticalPod(pod: V1Pod): boolean {
  if (isStaticPod(pod) || isMirrorPod(pod)) return true;
  const priority = pod.spec?.priority;
  return priority !== undefined && priority >= SYSTEM_CRITICAL_PRIORITY;
}

/** A critical pod of priority class system-node-critical (upstream `IsNodeCriticalPod`). */
export function isNodeCriticalPod(pod: V1Pod): boolean {
  return isCriticalPod(pod) && pod.spec?.priorityClassName === SYSTEM_NODE_CRITICAL;
}

function memoryRequest(c: V1Container): bigint {
  const q = c.resources?.requests?.["memory"];
  return q === undefined ? 0n : valueOf(parseDec(q));
}

function isSidecarContainer(pod: V1Pod, c: V1Container): boolean {
  return c.restartPolicy === "Always" &&
    (pod.spec?.initContainers ?? []).some((i) => i.name === c.name);
}

// The smallest memory request among the regular containers (upstream minRegularContainerMemory).
function minRegularContainerMemory(pod: V1Pod): bigint {
  const containers = pod.spec?.containers ?? [];
  let min: bigint | undefined;
  for (const c of containers) {
    const req = memoryRequest(c);
    if (min === undefined || req < min) min = req;
  }
  return min ?? 0n;
}

// The pod-level memory request not claimed by any container, shared out per container.
function remainingPodMemReqPerContainer(pod: V1Pod): bigint {
  const podReq = resourceList(pod.spec?.resources?.requests).get("memory");
  if (isZeroDec(podReq)) return 0n;
  const count = (pod.spec?.containers?.length ?? 0) + (pod.spec?.initContainers?.length ?? 0);
  if (count === 0) return 0n;
  const claimed = valueOf(aggregateContainerRequests(pod).get("memory"));
  return (valueOf(podReq) - claimed) / BigInt(count);
}

/**
 * The oom_score_adj for one container: -997 for node-critical and Guaranteed pods, 1000 for
 * BestEffort, and for Burstable `1000 - 1000 * request / capacity` clamped to [3, 999], with
 * sidecars never above the lowest-request regular container (upstream policy.go).
 */
export function getContainerOOMScoreAdjust(
  pod: V1Pod,
  container: V1Container,
  memoryCapacityBytes: number,
): number {
  if (isNodeCriticalPod(pod)) return GUARANTEED_OOM_SCORE_ADJ;
  switch (getPodQOS(pod)) {
    case "Guaranteed":
      return GUARANTEED_OOM_SCORE_ADJ;
    case "BestEffort":
      return BEST_EFFORT_OOM_SCORE_ADJ;
  }
  if (!Number.isSafeInteger(memoryCapacityBytes) || memoryCapacityBytes <= 0) {
    throw new RangeError(
      `Cannot compute oom_score_adj: 'memoryCapacityBytes' must be a positive integer: current value is ${memoryCapacityBytes}`,
    );
  }
  const capacity = BigInt(memoryCapacityBytes);
  const podLevel = isPodLevelRequestsSet(pod);
  const remaining = podLevel ? remainingPodMemReqPerContainer(pod) : 0n;
  let adj = 1000n - (1000n * (memoryRequest(container) + remaining)) / capacity;

  if (isSidecarContainer(pod, container)) {
    const minReq = minRegularContainerMemory(pod) + remaining;
    const minAdj = 1000n - (1000n * minReq) / capacity;
    if (adj > minAdj) adj = minAdj;
  }

  // A Guaranteed container using all memory scores about 10; keep Burstable above that, and
  // below BestEffort.
  const floor = BigInt(1000 + GUARANTEED_OOM_SCORE_ADJ);
  if (adj < floor) return Number(floor);
  if (adj === BigInt(BEST_EFFORT_OOM_SCORE_ADJ)) return Number(adj - 1n);
  return Number(adj);
}
