/**
 * @module
 * In-place resize of a running pod's containers and of its pod-level resources.
 * computeContainerResize compares a running container's allocated resources with what the
 * runtime was last told (the actuated record, `<root-dir>/actuated_pods_state`), its limits
 * bounded by the pod-level ones where it sets none (upstream GetLimits): equal, nothing to do;
 * a resource whose resizePolicy is RestartContainer, restart the container; otherwise update it
 * in place, decreases ordered before increases. computePodLevelResize compares the allocated
 * pod-level resources with the actuated ones (InPlacePodLevelResourcesVerticalScaling); when
 * they differ the pod cgroup is resized even if no container is, and each resource's actuated
 * pod-level record follows once its step is done. doPodResizeAction then updates memory, then
 * cpu: for each, the pod cgroup
 * first when its value grows and last when it shrinks (limits before requests on the way up,
 * requests before limits on the way down), so that a container never exceeds its pod; the
 * runtime is told of the pod's new size first (UpdatePodSandboxResources, best effort) and of
 * each container's with UpdateContainerResources; a memory limit below what is in use now is
 * refused before anything changes. Each doPodResizeAction is timed, in whole milliseconds, in
 * kubelet_pod_resize_duration_milliseconds{success}. Used by `kuberuntime_manager.ts` and, for
 * the status, `kubelet_pods.ts`. Corresponds to
 * upstream `computePodResizeAction`, `doPodResizeAction`, `validateMemoryResizeAction`,
 * `updatePodContainerResources`, `IsPodResizeInProgress` (kuberuntime_manager.go) and
 * `updateContainerResources`, `updatePodSandboxResources`, `toKubeContainerResources`
 * (kuberuntime_container*.go).
 */

import type { V1Container, V1Pod, V1ResourceRequirements } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import type { PodCgroups } from "../cm/container_manager.ts";
import type { ResourceConfig } from "../cm/cgroup_manager.ts";
import type { RuntimeService } from "../cri/remote_runtime.ts";
import type { ResourceState } from "../allocation/state_checkpoint.ts";
import { GrpcCode, isCriCode } from "../cri/connection.ts";
import { cmpDec, milliValueOf, parseDec, valueOf } from "../qos/resource_helpers.ts";

const ZERO = { n: 0n, s: 0 };
import { isRestartableInitContainer } from "../pod/podutil.ts";
import { generateLinuxContainerResources, type LinuxConfigOptions } from "./_container_linux.ts";
import { milliCPUToQuota, milliCPUToShares } from "../cm/helpers_linux.ts";
import type { KubeContainerStatus } from "./kuberuntime_container.ts";
import type { Logger } from "../klog/klog.ts";
import { kobj } from "../klog/klog.ts";
import type { KubeletMetrics } from "../metrics/metrics.ts";
import { type Clock, realClock } from "../util/clock.ts";

/** A container's cpu in millicores and memory in bytes (upstream resourceRequirements). */
export interface ResourceValues {
  memoryLimit: bigint;
  memoryRequest: bigint;
  cpuLimit: bigint;
  cpuRequest: bigint;
}

/** A running container to update in place (upstream containerToUpdateInfo). */
export interface ContainerToUpdate {
  readonly container: V1Container;
  readonly containerId: string;
  readonly desired: ResourceValues;
  /** What the runtime was last told; updated as each call succeeds. */
  readonly current: ResourceValues;
}

/** The resize part of a sync's actions. */
export interface ResizeActions {
  /** By resource, decreases first. */
  readonly containersToUpdate: { memory: ContainerToUpdate[]; cpu: ContainerToUpdate[] };
  /** A container restarts for its resize: the pod cgroup follows the allocation. */
  updatePodResources: boolean;
  /** The pod-level resources differ from the actuated ones: the pod cgroup follows them. */
  updatePodLevelResources: boolean;
}

/** No resize to do. */
export function emptyResizeActions(): ResizeActions {
  return {
    containersToUpdate: { memory: [], cpu: [] },
    updatePodResources: false,
    updatePodLevelResources: false,
  };
}

/** Whether there is anything for {@link doPodResizeAction} to do (upstream SyncPod step 8). */
export function hasResizeActions(r: ResizeActions): boolean {
  return r.containersToUpdate.memory.length > 0 || r.containersToUpdate.cpu.length > 0 ||
    r.updatePodResources || r.updatePodLevelResources;
}

/** The actuated record of a container, by pod UID and container name. */
export type ActuatedLookup = (uid: string, name: string) => V1ResourceRequirements | undefined;

/**
 * The actuated pod-level resources by pod UID: `found` false when the pod has no record at all
 * (upstream GetPodLevelResources).
 */
export type ActuatedPodLevelLookup = (
  uid: string,
) => { found: boolean; resources?: V1ResourceRequirements };

/**
 * upstream kubeutil.GetLimits: the container's limits, with the pod-level cpu or memory limit
 * where the container's is zero or missing and the pod's is not.
 */
export function effectiveLimits(
  podResources: V1ResourceRequirements | undefined,
  container: V1ResourceRequirements | undefined,
): Record<string, string> {
  const limits: Record<string, string> = { ...(container?.limits ?? {}) };
  const podLimits = podResources?.limits;
  if (!podLimits || Object.keys(podLimits).length === 0) return limits;
  for (const name of ["cpu", "memory"]) {
    const own = quantity(limits, name);
    const pod = quantity(podLimits, name);
    if ((own === undefined || own.n === 0n) && pod !== undefined && pod.n !== 0n) {
      limits[name] = String(podLimits[name]);
    }
  }
  return limits;
}

function quantity(list: Readonly<Record<string, string>> | undefined, name: string) {
  const q = list?.[name];
  return q === undefined ? undefined : parseDec(String(q));
}

/**
 * upstream containerResourcesFromRequirements: with `podLevel` (the pod's pod-level resources,
 * InPlacePodLevelResourcesVerticalScaling), the limits as {@link effectiveLimits} gives them;
 * without, upstream podResourcesFromRequirements.
 */
export function resourceValues(
  r: V1ResourceRequirements | undefined,
  podLevel?: { readonly resources: V1ResourceRequirements | undefined },
): ResourceValues {
  if (podLevel) r = { ...r, limits: effectiveLimits(podLevel.resources, r) };
  return {
    memoryLimit: valueOf(quantity(r?.limits, "memory")),
    memoryRequest: valueOf(quantity(r?.requests, "memory")),
    cpuLimit: milliValueOf(quantity(r?.limits, "cpu")),
    cpuRequest: milliValueOf(quantity(r?.requests, "cpu")),
  };
}

function sameValues(a: ResourceValues, b: ResourceValues): boolean {
  return a.memoryLimit === b.memoryLimit && a.memoryRequest === b.memoryRequest &&
    a.cpuLimit === b.cpuLimit && a.cpuRequest === b.cpuRequest;
}

/**
 * upstream computePodResizeAction for one running container: "keep" (nothing, or an in-place
 * update queued in `changes`) or "restart" (a resizePolicy asks for it; the caller kills and
 * starts the container, and `changes.updatePodResources` is set).
 */
export function computeContainerResize(
  pod: V1Pod,
  container: V1Container,
  status: KubeContainerStatus,
  actuated: ActuatedLookup,
  changes: ResizeActions,
  actuatedPodLevel?: ActuatedPodLevelLookup,
): "keep" | "restart" {
  if (status.state !== "running") return "keep";
  const uid = pod.metadata?.uid ?? "";
  const desired = resourceValues(
    container.resources,
    actuatedPodLevel && { resources: pod.spec?.resources },
  );
  const current = resourceValues(
    actuated(uid, container.name),
    actuatedPodLevel && { resources: actuatedPodLevel(uid).resources },
  );
  if (sameValues(desired, current)) return "keep";
  const decide = (name: "cpu" | "memory", want: bigint, have: bigint) => {
    if (want === have) return { resize: false, restart: false };
    const policy = container.resizePolicy?.find((p) => p.resourceName === name);
    return { resize: true, restart: policy?.restartPolicy === "RestartContainer" };
  };
  const memLim = decide("memory", desired.memoryLimit, current.memoryLimit);
  const memReq = decide("memory", desired.memoryRequest, current.memoryRequest);
  const cpuLim = decide("cpu", desired.cpuLimit, current.cpuLimit);
  const cpuReq = decide("cpu", desired.cpuRequest, current.cpuRequest);
  if (memLim.restart || memReq.restart || cpuLim.restart || cpuReq.restart) {
    changes.updatePodResources = true;
    return "restart";
  }
  const info: ContainerToUpdate = { container, containerId: status.id, desired, current };
  const mark = (name: "cpu" | "memory", want: bigint, have: bigint) => {
    const list = changes.containersToUpdate[name];
    // Decreases first, so that the pod's total never passes its cgroup.
    if (want > have) list.push(info);
    else if (want < have) list.unshift(info);
  };
  if (memLim.resize) mark("memory", desired.memoryLimit, current.memoryLimit);
  else if (memReq.resize) mark("memory", desired.memoryRequest, current.memoryRequest);
  if (cpuLim.resize) mark("cpu", desired.cpuLimit, current.cpuLimit);
  else if (cpuReq.resize) mark("cpu", desired.cpuRequest, current.cpuRequest);
  return "keep";
}

/**
 * upstream computePodLevelResourcesResizeAction: whether the allocated pod-level cpu or memory
 * differs from the actuated one (a pod without a record compares with zeros).
 */
export function computePodLevelResize(
  pod: V1Pod,
  actuatedPodLevel: ActuatedPodLevelLookup,
  logger?: Logger,
): boolean {
  const { found, resources } = actuatedPodLevel(pod.metadata?.uid ?? "");
  if (!found) {
    logger?.error(undefined, "Missing actuated pod level resource record", { pod: kobj(pod) });
  }
  return !sameValues(resourceValues(pod.spec?.resources), resourceValues(resources));
}

/** Requests and limits of cpu and memory equal, a missing quantity as zero. */
function cpuMemoryEqual(
  a: V1ResourceRequirements | undefined,
  b: V1ResourceRequirements | undefined,
): boolean {
  const eq = (x: Readonly<Record<string, string>> | undefined, y: typeof x, n: string) =>
    cmpDec(quantity(x, n) ?? ZERO, quantity(y, n) ?? ZERO) === 0;
  return eq(a?.requests, b?.requests, "cpu") && eq(a?.limits, b?.limits, "cpu") &&
    eq(a?.requests, b?.requests, "memory") && eq(a?.limits, b?.limits, "memory");
}

/**
 * upstream IsPodResizeInProgress: a running resizable container (regular, or a sidecar) whose
 * actuated cpu or memory differs from its allocation (its limits bounded by the pod's, with
 * `actuatedPodLevel`), or, with `actuatedPodLevel` (InPlacePodLevelResourcesVerticalScaling),
 * a pod whose recorded pod-level resources differ from its allocated ones.
 */
export function isPodResizeInProgress(
  allocatedPod: V1Pod,
  statuses: readonly KubeContainerStatus[],
  actuated: ActuatedLookup,
  actuatedPodLevel?: ActuatedPodLevelLookup,
): boolean {
  const uid = allocatedPod.metadata?.uid ?? "";
  const containers = [
    ...(allocatedPod.spec?.initContainers ?? []).filter(isRestartableInitContainer),
    ...(allocatedPod.spec?.containers ?? []),
  ];
  const containerInProgress = containers.some((c) => {
    const s = statuses.find((x) => x.name === c.name);
    if (!s || s.state !== "running") return false;
    const allocated = actuatedPodLevel
      ? { ...c.resources, limits: effectiveLimits(allocatedPod.spec?.resources, c.resources) }
      : c.resources;
    return !cpuMemoryEqual(allocated, actuated(uid, c.name));
  });
  if (containerInProgress) return true;
  // upstream isPodLevelResourcesResizeInProgress.
  if (!actuatedPodLevel || !allocatedPod.spec?.resources) return false;
  const { found, resources } = actuatedPodLevel(uid);
  if (!found || !resources) return false;
  return !cpuMemoryEqual(resources, allocatedPod.spec.resources);
}

/** What {@link doPodResizeAction} needs. */
export interface ResizeDeps {
  readonly runtime: Pick<
    RuntimeService,
    "updateContainerResources" | "updatePodSandboxResources" | "containerStats"
  >;
  /** Without pod cgroups (cgroupsPerQOS off) only the containers are resized. */
  readonly podCgroups?: Pick<PodCgroups, "getConfig" | "setConfig" | "specConfig" | "memoryUsage">;
  readonly actuated: ResourceState;
  readonly linux: LinuxConfigOptions;
  readonly logger: Logger;
  /** kubelet_pod_resize_duration_milliseconds. @default none recorded */
  readonly metrics?: Pick<KubeletMetrics, "podResizeDuration">;
  /** Times each resize for the metric. @default the real clock */
  readonly clock?: Clock;
  /**
   * featureGates.InPlacePodLevelResourcesVerticalScaling: container limits are bounded by the
   * pod-level ones in the actuated record, and pod-level resizes are actuated. @default true
   */
  readonly podLevelResources?: boolean;
}

/** The outcome of a resize: undefined when done, else the error to report (ResizePodInPlace). */
export type ResizeError = { readonly message: string } | undefined;

/**
 * Records the container's resources as actuated (upstream setActuatedContainerResources): with
 * `podLevel` (InPlacePodLevelResourcesVerticalScaling), its limits bounded by the pod's.
 */
export function setActuatedContainerResources(
  actuated: ResourceState,
  pod: V1Pod,
  container: V1Container,
  podLevel = true,
): Promise<void> {
  const r = container.resources ?? {};
  const recorded = podLevel ? { ...r, limits: effectiveLimits(pod.spec?.resources, r) } : r;
  return actuated.setContainer(pod.metadata?.uid ?? "", container.name, recorded);
}

/**
 * upstream updateActuatedPodLevelResources: the allocated pod-level value of one resource
 * becomes the actuated one, in the lists the allocation has (a missing quantity as "0", as
 * Go's zero Quantity).
 */
function setActuatedPodLevelResource(
  actuated: ResourceState,
  pod: V1Pod,
  resource: "cpu" | "memory",
  logger: Logger,
): Promise<void> {
  const allocated = pod.spec?.resources;
  if (!allocated) return Promise.resolve();
  const uid = pod.metadata?.uid ?? "";
  let current = actuated.getPodLevel(uid);
  if (!current) {
    logger.error(undefined, "Missing actuated resource record", { pod: kobj(pod) });
    current = {};
  }
  const next: V1ResourceRequirements = {
    ...(current.limits ? { limits: { ...current.limits } } : {}),
    ...(current.requests ? { requests: { ...current.requests } } : {}),
  };
  for (const list of ["requests", "limits"] as const) {
    const from = allocated[list];
    if (!from) continue;
    next[list] = { ...next[list], [resource]: String(from[resource] ?? "0") };
  }
  return actuated.setPodLevel(uid, next);
}

/**
 * upstream UpdateActuatedPodLevelResources, when the pod cgroup is made: records the pod's
 * pod-level resources as actuated when it sets requests or limits. Here it is called for a
 * pod with no pod-level record yet, before its first sync's actions are computed.
 */
export function updateActuatedPodLevelResources(
  actuated: ResourceState,
  pod: V1Pod,
): Promise<void> {
  const r = pod.spec?.resources;
  if (!r || (r.requests === undefined && r.limits === undefined)) return Promise.resolve();
  return actuated.setPodLevel(pod.metadata?.uid ?? "", r);
}

function milliQuantity(m: bigint): string {
  return m % 1000n === 0n ? `${m / 1000n}` : `${m}m`;
}

/** The container with cpu from one source and memory from another (updatePodContainerResources). */
function mixed(c: ContainerToUpdate, resource: "cpu" | "memory"): V1Container {
  const cpu = resource === "cpu" ? c.desired : c.current;
  const mem = resource === "memory" ? c.desired : c.current;
  return {
    ...c.container,
    resources: {
      limits: { cpu: milliQuantity(cpu.cpuLimit), memory: `${mem.memoryLimit}` },
      requests: { cpu: milliQuantity(cpu.cpuRequest), memory: `${mem.memoryRequest}` },
    },
  };
}

/**
 * upstream doPodResizeAction: applies `changes` to the running pod in the order the module
 * documentation describes. Stops at the first failure (a later sync retries the rest). Every
 * call is observed in the duration histogram, success "false" for an error or an abort.
 */
export async function doPodResizeAction(
  deps: ResizeDeps,
  signal: AbortSignal,
  pod: V1Pod,
  sandboxId: string,
  changes: ResizeActions,
): Promise<ResizeError> {
  const clock = deps.clock ?? realClock;
  const start = clock.now();
  let success = false;
  try {
    const failed = await actuatePodResize(deps, signal, pod, sandboxId, changes);
    success = failed === undefined;
    return failed;
  } finally {
    // Whole milliseconds, as Go's Duration.Milliseconds (truncated).
    const ms = Math.max(0, Math.trunc(clock.now() - start));
    deps.metrics?.podResizeDuration.observe(ms, { success: String(success) });
  }
}

async function actuatePodResize(
  deps: ResizeDeps,
  signal: AbortSignal,
  pod: V1Pod,
  sandboxId: string,
  changes: ResizeActions,
): Promise<ResizeError> {
  const { podCgroups, runtime, logger } = deps;
  const name = `${pod.metadata?.name ?? ""}_${pod.metadata?.namespace ?? ""}(${
    pod.metadata?.uid ?? ""
  })`;
  const desiredPod: ResourceConfig = podCgroups ? podCgroups.specConfig(pod) : {};
  let currentPod: ResourceConfig = {};
  if (podCgroups) {
    try {
      currentPod = { ...await podCgroups.getConfig(pod, "memory") };
    } catch (e) {
      logger.error(e, "Unable to get pod cgroup memory config", { pod: kobj(pod) });
      return { message: `unable to get pod cgroup memory config for pod "${name}"` };
    }
    try {
      currentPod = { ...currentPod, ...await podCgroups.getConfig(pod, "cpu") };
    } catch (e) {
      logger.error(e, "Unable to get pod cgroup cpu config", { pod: kobj(pod) });
      return { message: `unable to get pod cgroup cpu config for pod "${name}"` };
    }
  }
  const memoryError = await validateMemoryResize(
    deps,
    signal,
    pod,
    currentPod,
    desiredPod,
    changes,
  );
  if (memoryError) {
    logger.error(new Error(memoryError), "Allocated pod resize is not currently feasible", {
      pod: kobj(pod),
    });
    return { message: memoryError };
  }

  const setPodCgroup = async (resource: "cpu" | "memory", limit: boolean): Promise<void> => {
    if (!podCgroups) return;
    const resized: ResourceConfig = {};
    if (resource === "cpu") {
      if (limit) {
        Object.assign(resized, { cpuQuota: desiredPod.cpuQuota, cpuPeriod: desiredPod.cpuPeriod });
      } else resized.cpuShares = desiredPod.cpuShares;
    } else {
      // Memory requests are not written to cgroups.
      if (!limit) return;
      resized.memory = desiredPod.memory;
    }
    const merged = { ...currentPod, ...withoutUndefined(resized) };
    try {
      await updatePodSandboxResources(deps, signal, sandboxId, merged);
    } catch (e) {
      throw new Error(
        `failed to notify runtime for UpdatePodSandboxResources (resource=${resource}); resize rejected: ${
          (e as Error).message
        }`,
        { cause: e },
      );
    }
    try {
      await podCgroups.setConfig(pod, withoutUndefined(resized));
    } catch (e) {
      logger.error(e, "Failed to set cgroup config", { resource, pod: kobj(pod) });
      try {
        await updatePodSandboxResources(deps, signal, sandboxId, currentPod);
      } catch (rollback) {
        logger.error(rollback, "Failed to notify runtime to rollback UpdatePodSandboxResources", {
          resource,
          pod: kobj(pod),
        });
      }
      throw e;
    }
    currentPod = merged;
  };

  const updateContainers = async (resource: "cpu" | "memory") => {
    for (const c of changes.containersToUpdate[resource]) {
      const container = mixed(c, resource);
      const linux = generateLinuxContainerResources(pod, container, deps.linux);
      try {
        await runtime.updateContainerResources(c.containerId, linux, signal);
        await setActuatedContainerResources(
          deps.actuated,
          pod,
          container,
          deps.podLevelResources ?? true,
        );
      } catch (e) {
        signal.throwIfAborted();
        logger.error(e, "updateContainerResources failed", {
          container: c.container.name,
          cID: c.containerId,
          pod: kobj(pod),
          resourceName: resource,
        });
        throw e;
      }
      // What the runtime accepted is now current, whatever its status says yet.
      if (resource === "memory") {
        c.current.memoryLimit = c.desired.memoryLimit;
        c.current.memoryRequest = c.desired.memoryRequest;
      } else {
        c.current.cpuLimit = c.desired.cpuLimit;
        c.current.cpuRequest = c.desired.cpuRequest;
      }
    }
  };

  const resize = async (
    resource: "cpu" | "memory",
    curLimit: bigint,
    newLimit: bigint,
    curRequest: bigint,
    newRequest: bigint,
  ) => {
    // Up: limits before requests; down: requests before limits (requests <= limits throughout).
    if (newLimit > curLimit) await setPodCgroup(resource, true);
    if (newRequest > curRequest) await setPodCgroup(resource, false);
    if (changes.containersToUpdate[resource].length > 0) await updateContainers(resource);
    if (newRequest < curRequest) await setPodCgroup(resource, false);
    if (newLimit < curLimit) await setPodCgroup(resource, true);
    if (changes.updatePodLevelResources) {
      try {
        await setActuatedPodLevelResource(deps.actuated, pod, resource, logger);
      } catch (e) {
        logger.error(e, "Failed to update pod-level actuated resources", {
          resource,
          pod: kobj(pod),
        });
        throw e;
      }
    }
  };

  const podLevel = changes.updatePodLevelResources;
  try {
    if (
      changes.containersToUpdate.memory.length > 0 || changes.updatePodResources || podLevel
    ) {
      // A pod without a memory limit keeps the cgroup's (removing limits is not supported).
      const cur = currentPod.memory ?? -1n;
      desiredPod.memory ??= cur;
      await resize("memory", unlimitedLast(cur), unlimitedLast(desiredPod.memory), 0n, 0n);
    }
    if (changes.containersToUpdate.cpu.length > 0 || changes.updatePodResources || podLevel) {
      const cur = currentPod.cpuQuota ?? -1n;
      desiredPod.cpuQuota ??= cur;
      desiredPod.cpuPeriod ??= currentPod.cpuPeriod;
      await resize(
        "cpu",
        cur,
        desiredPod.cpuQuota,
        currentPod.cpuShares ?? 0n,
        desiredPod.cpuShares ?? 0n,
      );
    }
  } catch (e) {
    signal.throwIfAborted();
    return { message: (e as Error).message };
  }
  return undefined;
}

/** -1 (unlimited) compares above every limit. */
function unlimitedLast(v: bigint): bigint {
  return v < 0n ? 2n ** 63n : v;
}

function withoutUndefined(rc: ResourceConfig): ResourceConfig {
  return Object.fromEntries(
    Object.entries(rc).filter(([, v]) => v !== undefined),
  ) as ResourceConfig;
}

/**
 * upstream updatePodSandboxResources: best effort; a runtime that does not implement it (as
 * containerd 1.6 and 2.x, which answer Unimplemented or Unknown "not implemented") is skipped.
 */
async function updatePodSandboxResources(
  deps: ResizeDeps,
  signal: AbortSignal,
  sandboxId: string,
  rc: ResourceConfig,
): Promise<void> {
  const resources = api.LinuxContainerResources.create({
    cpuShares: rc.cpuShares ?? 0n,
    cpuQuota: rc.cpuQuota ?? 0n,
    cpuPeriod: rc.cpuPeriod ?? 0n,
    memoryLimitInBytes: rc.memory !== undefined && rc.memory > 0n ? rc.memory : 0n,
  });
  try {
    await deps.runtime.updatePodSandboxResources(
      api.UpdatePodSandboxResourcesRequest.create({ podSandboxId: sandboxId, resources }),
      signal,
    );
  } catch (e) {
    signal.throwIfAborted();
    const text = (e as Error).message ?? "";
    if (
      isCriCode(e, GrpcCode.UNIMPLEMENTED) ||
      (isCriCode(e, GrpcCode.UNKNOWN) && text.includes("not implemented"))
    ) {
      deps.logger.v(3).info(
        "updatePodSandboxResources failed: unimplemented; this call is best-effort: proceeding with resize",
        { sandboxID: sandboxId },
      );
      return;
    }
    throw new Error(`updatePodSandboxResources failed for sanboxID "${sandboxId}": ${text}`, {
      cause: e,
    });
  }
}

/**
 * upstream validateMemoryResizeAction: a memory limit that decreases (or is added) must stay
 * above what the pod, or the container, uses now. Returns the error, if any.
 */
async function validateMemoryResize(
  deps: ResizeDeps,
  signal: AbortSignal,
  pod: V1Pod,
  currentPod: ResourceConfig,
  desiredPod: ResourceConfig,
  changes: ResizeActions,
): Promise<string | undefined> {
  if (changes.containersToUpdate.memory.length === 0 && !changes.updatePodResources) {
    return undefined;
  }
  const podLimitDecreasing = desiredPod.memory !== undefined && desiredPod.memory > 0n &&
    (currentPod.memory === undefined || currentPod.memory < 0n ||
      desiredPod.memory < currentPod.memory);
  const decreasing = changes.containersToUpdate.memory.filter((c) =>
    c.desired.memoryLimit !== 0n &&
    (c.current.memoryLimit === 0n || c.desired.memoryLimit < c.current.memoryLimit)
  );
  if (!podLimitDecreasing && decreasing.length === 0) return undefined;
  const errors: string[] = [];
  if (podLimitDecreasing && deps.podCgroups) {
    let usage: bigint | undefined;
    try {
      usage = await deps.podCgroups.memoryUsage(pod);
    } catch {
      usage = undefined;
    }
    if (usage === undefined) errors.push("missing pod memory usage");
    else if (usage >= desiredPod.memory!) {
      errors.push(
        `attempting to set pod memory limit (${desiredPod.memory}) below current usage (${usage})`,
      );
    }
  }
  for (const c of decreasing) {
    let stats: api.ContainerStats | undefined;
    try {
      stats = await deps.runtime.containerStats(c.containerId, signal);
    } catch {
      signal.throwIfAborted();
      // No statistics for it: not checked, as upstream skips a container absent from them.
      continue;
    }
    const usage = stats?.memory?.usageBytes?.value;
    if (usage === undefined) errors.push(`missing container "${c.container.name}" memory usage`);
    else if (usage >= c.desired.memoryLimit) {
      errors.push(
        `attempting to set container "${c.container.name}" memory limit (${c.desired.memoryLimit}) below current usage (${usage})`,
      );
    }
  }
  if (errors.length === 0) return undefined;
  return `cannot decrease memory limits: ${
    errors.length === 1 ? errors[0] : `[${errors.join(", ")}]`
  }`;
}

/** The container's resources as the runtime reports them (upstream toKubeContainerResources). */
export interface RuntimeResources {
  /** Millicores. */
  readonly cpuRequest?: bigint;
  /** Millicores. */
  readonly cpuLimit?: bigint;
  /** Bytes. */
  readonly memoryLimit?: bigint;
}

/** upstream toKubeContainerResources from a CRI ContainerResources. */
export function toRuntimeResources(
  r: api.ContainerResources | undefined,
): RuntimeResources | undefined {
  const l = r?.linux;
  if (!l) return undefined;
  const out: { cpuRequest?: bigint; cpuLimit?: bigint; memoryLimit?: bigint } = {};
  if (l.cpuPeriod > 0n && l.cpuQuota !== -1n) {
    const m = (l.cpuQuota * 1000n) / l.cpuPeriod;
    if (m > 0n) out.cpuLimit = m;
  }
  if (l.cpuShares >= 2n) {
    // math.Ceil(shares*1000/1024)
    const m = (l.cpuShares * 1000n + 1023n) / 1024n;
    if (m > 0n) out.cpuRequest = m;
  }
  if (l.memoryLimitInBytes > 0n) out.memoryLimit = l.memoryLimitInBytes;
  return Object.keys(out).length === 0 ? undefined : out;
}

/**
 * Records what a running container was started with when there is no actuated record for it
 * (the kubelet ran without the file before, or a record was lost): from what the runtime
 * reports, each value kept as allocated where the runtime's agrees with it at the kernel's
 * granularity; as allocated when the runtime reports nothing. Upstream takes a missing record as
 * zeros, which would update every running container once and restart those whose resizePolicy
 * asks for it, on the first start after an upgrade.
 */
export function seedActuatedResources(
  actuated: ResourceState,
  allocatedPod: V1Pod,
  podStatus: { readonly containerStatuses: readonly api.ContainerStatus[] },
  statuses: readonly KubeContainerStatus[],
  quotaPeriod: bigint = 100_000n,
  podLevel = true,
): void {
  const uid = allocatedPod.metadata?.uid ?? "";
  const containers = [
    ...(allocatedPod.spec?.initContainers ?? []),
    ...(allocatedPod.spec?.containers ?? []),
  ];
  for (const container of containers) {
    if (actuated.getContainer(uid, container.name)) continue;
    const s = statuses.find((x) => x.name === container.name);
    if (!s || s.state !== "running") continue;
    const linux = podStatus.containerStatuses.find((c) => c.id === s.id)?.resources?.linux;
    const own = container.resources ?? {};
    // As setActuatedContainerResources records them: limits bounded by the pod's.
    const allocated = podLevel
      ? { ...own, limits: effectiveLimits(allocatedPod.spec?.resources, own) }
      : own;
    const seed = seedFrom(allocated, linux, quotaPeriod);
    void actuated.setContainer(uid, container.name, seed).catch(() => {});
  }
}

function seedFrom(
  allocated: V1ResourceRequirements,
  linux: api.LinuxContainerResources | undefined,
  period: bigint,
): V1ResourceRequirements {
  const seed: V1ResourceRequirements = {
    ...(allocated.limits ? { limits: { ...allocated.limits } } : {}),
    ...(allocated.requests ? { requests: { ...allocated.requests } } : {}),
  };
  if (!linux) return seed;
  const v = resourceValues(allocated);
  const set = (list: "limits" | "requests", name: string, value: string | undefined) => {
    const l = seed[list] ?? {};
    if (value === undefined) delete l[name];
    else l[name] = value;
    seed[list] = l;
  };
  // Shares: the request (or, without one, the limit) as the kernel got it.
  const wantShares = milliCPUToShares(
    "cpu" in (allocated.requests ?? {}) ? v.cpuRequest : v.cpuLimit,
  );
  if (linux.cpuShares !== 0n && linux.cpuShares !== wantShares) {
    set("requests", "cpu", milliQuantity((linux.cpuShares * 1000n + 1023n) / 1024n));
  }
  if (linux.cpuPeriod > 0n) {
    const have = linux.cpuQuota > 0n ? linux.cpuQuota : 0n;
    const want = v.cpuLimit > 0n ? milliCPUToQuota(v.cpuLimit, period) : 0n;
    if (have !== want) {
      set("limits", "cpu", have > 0n ? milliQuantity((have * 1000n) / linux.cpuPeriod) : undefined);
    }
  }
  if (linux.memoryLimitInBytes !== v.memoryLimit) {
    set(
      "limits",
      "memory",
      linux.memoryLimitInBytes > 0n ? `${linux.memoryLimitInBytes}` : undefined,
    );
  }
  return seed;
}
