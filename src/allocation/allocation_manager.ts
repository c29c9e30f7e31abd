/**
 * @module
 * Which resources the kubelet has accepted for each pod (its allocation), apart from what the pod
 * spec asks for: the spec changes the moment a user resizes a pod, the allocation only once the
 * resize fits beside the other pods. At admission the pod's resources are checkpointed
 * (`<root-dir>/allocated_pods_state`): each container's, and the pod-level `spec.resources`
 * (InPlacePodLevelResourcesVerticalScaling, beta and on); a later resize of either is admitted
 * again with the resize admit handler and the admission checks (node resources first among them)
 * against the other pods' allocations. One that fits becomes the new allocation
 * (PodResizeInProgress, a ResizeStarted event); one that does not is PodResizePending, Deferred
 * (retried when resources free up, when pods are added or removed, and every 3 minutes) or
 * Infeasible (never retried), with a ResizeDeferred or ResizeInfeasible event. A resize of a
 * Guaranteed pod's cpu under the static CPU manager policy, or of its memory under the Static
 * memory manager policy, is Infeasible: resizing pinned CPUs or NUMA memory
 * (InPlacePodVerticalScalingExclusiveCPUs and InPlacePodVerticalScalingExclusiveMemory, alpha) is
 * not built, and those gates are refused. The pod workers sync the pod as allocated, never its
 * spec. kubelet_pod_infeasible_resizes_total counts each time the resize admit handler finds a
 * resize infeasible, and kubelet_pod_deferred_accepted_resizes_total each Deferred resize accepted,
 * by what retried it. Corresponds to upstream `pkg/kubelet/allocation` (allocation_manager.go,
 * handlers.go, features_linux.go) and `pkg/kubelet/events/resize.go`.
 */

import type { V1Container, V1Pod, V1ResourceRequirements } from "@kubernetes/client-node";
import { type Clock, WAIT_ENDED } from "../util/clock.ts";
import type { KubeletMetrics } from "../metrics/metrics.ts";
import { type EventRecorder, podRef } from "../client/record.ts";
import { kobj, type Logger } from "../klog/klog.ts";
import { getPodQOS } from "../qos/qos.ts";
import { cmpDec, parseDec, podRequests } from "../qos/resource_helpers.ts";
import { type PodResizeConditions, REASON_INFEASIBLE } from "../status/resize_conditions.ts";
import { CPU_POLICY_STATIC } from "../cpumanager/policy.ts";
import { POLICY_STATIC as MEMORY_POLICY_STATIC } from "../memorymanager/policy.ts";
import { copyRequirements, type PodResourceInfo, type ResourceState } from "./state_checkpoint.ts";
import { linkSignals } from "../util/linked_signal.ts";

/** The first retry of deferred resizes after start, and the period after that (upstream). */
export const INITIAL_RETRY_DELAY_MS = 30_000;
export const RETRY_DELAY_MS = 180_000;

/** Why pending resizes are retried (upstream TriggerReason*, the metric's label). */
export type ResizeTrigger =
  | "pod_resized"
  | "pod_updated"
  | "pods_added"
  | "pods_removed"
  | "pod_terminated"
  | "periodic_retry";

/** The counters {@link AllocationManager} moves. */
export type AllocationMetrics = Pick<
  KubeletMetrics,
  "podInfeasibleResizes" | "podDeferredAcceptedResizes"
>;

/** What an admission (add or resize) answers. */
export interface AdmitAnswer {
  readonly admit: boolean;
  readonly reason?: string;
  readonly message?: string;
}

/** The admission checks of the kubelet (predicates, eviction, shutdown) for one operation. */
export type CanAdmit = (
  pod: V1Pod,
  otherPods: readonly V1Pod[],
  operation: "add" | "resize",
) => AdmitAnswer;

/** The configured CPU and memory manager policies (upstream NodeConfig's, read by handlers.go). */
export interface ResourcePolicies {
  /** Config cpuManagerPolicy: "none" or "static". */
  readonly cpuManagerPolicy: string;
  /** Config memoryManagerPolicy: "None" or "Static". */
  readonly memoryManagerPolicy: string;
}

/** What {@link AllocationManager} needs. */
export interface AllocationManagerOptions {
  readonly state: ResourceState;
  readonly conditions: PodResizeConditions;
  readonly canAdmit: CanAdmit;
  /** Admitted pods that are not terminal, as the pod manager has them (specs, not allocations). */
  readonly getActivePods: () => readonly V1Pod[];
  readonly getPodByUID: (uid: string) => V1Pod | undefined;
  /** Asks the pod's worker to sync it (its status changed, or its allocation did). */
  readonly triggerPodSync: (pod: V1Pod) => void;
  /** Every pod source has sent its first set: until then no pending resize is decided. */
  readonly sourcesReady: () => boolean;
  readonly recorder: EventRecorder;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Infeasible and deferred-then-accepted resizes. @default none recorded */
  readonly metrics?: AllocationMetrics;
  /**
   * featureGates.InPlacePodLevelResourcesVerticalScaling: the pod-level resources are part of
   * the allocation (checkpointed, compared, resized). @default true
   */
  readonly inPlacePodLevelResourcesVerticalScaling?: boolean;
  /**
   * The CPU and memory manager policies: under a static one a Guaranteed pod's resize of that
   * resource is Infeasible. @default none: no such resize is refused
   */
  readonly resourcePolicies?: ResourcePolicies;
}

/** The pod's allocated resources and pending resizes; see the module documentation. */
export class AllocationManager {
  readonly #o: AllocationManagerOptions;
  readonly #podLevel: boolean;
  #pending: string[] = [];
  #nextRetryMs: number;
  #wake?: () => void;

  constructor(opts: AllocationManagerOptions) {
    this.#o = opts;
    this.#podLevel = opts.inPlacePodLevelResourcesVerticalScaling ?? true;
    this.#nextRetryMs = INITIAL_RETRY_DELAY_MS;
  }

  /**
   * The pod as allocated: each resizable container's resources, and the pod-level ones,
   * replaced by the checkpointed ones where they differ (a copy then; the pod itself
   * otherwise). `updated` says whether the allocation differs from the spec, that is, whether a
   * resize is not yet accepted.
   */
  updatePodFromAllocation(pod: V1Pod): { pod: V1Pod; updated: boolean } {
    const info = this.#o.state.get(pod.metadata?.uid ?? "");
    if (!info) return { pod, updated: false };
    return applyAllocation(pod, info, this.#podLevel);
  }

  /** The pod's allocated pod-level resources, if checkpointed (GetPodLevelResourceAllocation). */
  podLevelAllocation(uid: string): V1ResourceRequirements | undefined {
    return this.#o.state.get(uid)?.podLevelResources;
  }

  /** The container's allocated resources, if checkpointed. */
  containerAllocation(uid: string, name: string): V1ResourceRequirements | undefined {
    return this.#o.state.getContainer(uid, name);
  }

  /** Checkpoints the pod's resources as its allocation (upstream SetAllocatedResources). */
  setAllocatedResources(pod: V1Pod): Promise<void> {
    return this.#o.state.set(pod.metadata?.uid ?? "", allocationFromPod(pod, this.#podLevel));
  }

  /**
   * Admits a new pod against the allocations of `activePods` (upstream AddPod): a pod the
   * kubelet already allocated (it restarted) is admitted as allocated. On success the
   * allocation is checkpointed. Returns the answer and the pod as admitted.
   */
  addPod(
    activePods: readonly V1Pod[],
    pod: V1Pod,
  ): AdmitAnswer & { pod: V1Pod; pendingResize: boolean } {
    const { pod: allocated, updated } = this.updatePodFromAllocation(pod);
    const answer = this.#o.canAdmit(allocated, this.#allocatedOthers(activePods, pod), "add");
    if (!answer.admit) return { ...answer, pod: allocated, pendingResize: false };
    this.#checkpoint(allocated);
    return { admit: true, pod: allocated, pendingResize: updated };
  }

  /** Records the allocation now; a failed write is logged (upstream's SetPodAllocation). */
  #checkpoint(pod: V1Pod): void {
    this.setAllocatedResources(pod).catch((e) =>
      this.#o.logger.error(e, "SetPodAllocation failed", { pod: kobj(pod) })
    );
  }

  /** Forgets the pod's allocation (upstream RemovePod); housekeeping retries a failure. */
  removePod(uid: string): void {
    this.#o.state.remove(uid).catch((e) =>
      this.#o.logger.v(3).info("Failed to delete pod allocation", { podUID: uid, err: String(e) })
    );
  }

  /** Forgets the allocations of pods not in `keep` (upstream RemoveOrphanedPods). */
  removeOrphanedPods(keep: ReadonlySet<string>): Promise<void> {
    return this.#o.state.removeOrphans(keep);
  }

  /** Whether any resize waits. */
  hasPendingResizes(): boolean {
    return this.#pending.length > 0;
  }

  /** Queues the pod's resize to be decided, in priority order (upstream PushPendingResize). */
  pushPendingResize(uid: string): void {
    if (this.#pending.includes(uid)) return;
    this.#pending.push(uid);
    this.#sortPending();
  }

  /**
   * Decides every queued resize now (upstream RetryPendingResizes): those that fit are
   * allocated, Deferred ones stay queued, Infeasible ones leave the queue. Pods whose
   * allocation or conditions changed get a sync. Returns the pods allocated.
   */
  retryPendingResizes(trigger: ResizeTrigger): V1Pod[] {
    const { logger, conditions, sourcesReady } = this.#o;
    if (!sourcesReady()) {
      logger.v(4).info("Skipping evaluation of pending resizes; sources are not ready");
      this.#scheduleRetry(INITIAL_RETRY_DELAY_MS);
      return [];
    }
    this.#scheduleRetry(RETRY_DELAY_MS);
    const stillPending: string[] = [];
    const allocated: V1Pod[] = [];
    for (const uid of this.#pending) {
      const pod = this.#o.getPodByUID(uid);
      if (!pod) {
        logger.v(4).info("Pod not found; removing from pending resizes", { podUID: uid });
        continue;
      }
      const before = JSON.stringify(conditions.get(uid).map(withoutTimes));
      const wasDeferred = conditions.isDeferred(uid);
      let done = false;
      try {
        done = this.#handlePodResourcesResize(pod);
        if (conditions.isDeferred(uid)) {
          logger.v(4).info("Pod resize is deferred; will reevaluate later", { pod: kobj(pod) });
          stillPending.push(uid);
        } else if (conditions.isInfeasible(uid)) {
          logger.v(4).info("Pod resize is infeasible", { pod: kobj(pod) });
        } else {
          logger.v(4).info("Pod resize successfully allocated", { pod: kobj(pod), trigger });
          allocated.push(pod);
          if (wasDeferred) {
            this.#o.metrics?.podDeferredAcceptedResizes.inc({ retry_trigger: trigger });
          }
        }
      } catch (e) {
        logger.error(e, "Failed to handle pod resources resize", { pod: kobj(pod) });
        stillPending.push(uid);
      }
      const after = JSON.stringify(conditions.get(uid).map(withoutTimes));
      if (done || before !== after) this.#o.triggerPodSync(pod);
    }
    this.#pending = stillPending;
    return allocated;
  }

  /**
   * Retries the pending resizes every {@link RETRY_DELAY_MS} (30 s after start) until `signal`
   * aborts (upstream Run's ticker).
   */
  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      // A retry from elsewhere resets the timer, as upstream's ticker.Reset.
      const reset = new AbortController();
      this.#wake = () => reset.abort(WAIT_ENDED);
      try {
        using link = linkSignals(signal, reset.signal);
        await this.#o.clock.sleep(this.#nextRetryMs, link.signal);
      } catch {
        continue;
      }
      const done = this.retryPendingResizes("periodic_retry");
      for (const pod of done) {
        this.#o.logger.info("Successfully retried resize after timeout", { pod: kobj(pod) });
      }
    }
  }

  #scheduleRetry(ms: number): void {
    this.#nextRetryMs = ms;
    this.#wake?.();
  }

  /**
   * The other active pods as allocated, each container counted at the larger of its allocation
   * and what its status says it runs with (a shrink not yet actuated still holds the old size).
   */
  #allocatedOthers(activePods: readonly V1Pod[], pod: V1Pod): V1Pod[] {
    const uid = pod.metadata?.uid;
    return activePods
      .filter((p) => p.metadata?.uid !== uid)
      .map((p) => withStatusResources(this.updatePodFromAllocation(p).pod));
  }

  /**
   * Whether the pod's requests, counted with its status as admission counts them, shrank
   * between two versions (upstream HandlePodReconcile's pod_resized trigger).
   */
  requestsShrank(oldPod: V1Pod, pod: V1Pod): boolean {
    const before = podRequests(withStatusResources(this.updatePodFromAllocation(oldPod).pod));
    const after = podRequests(withStatusResources(this.updatePodFromAllocation(pod).pod));
    const less = (name: string) =>
      cmpDec(after.get(name) ?? { n: 0n, s: 0 }, before.get(name) ?? { n: 0n, s: 0 }) < 0;
    return less("memory") || less("cpu");
  }

  /** upstream handlePodResourcesResize: returns whether the resize was allocated. */
  #handlePodResourcesResize(pod: V1Pod): boolean {
    const { conditions, recorder, logger } = this.#o;
    const uid = pod.metadata?.uid ?? "";
    const generation = pod.metadata?.generation ?? 0;
    const { pod: allocatedPod, updated } = this.updatePodFromAllocation(pod);
    if (!updated) {
      conditions.clearPending(uid);
      return false;
    }
    let answer = resizeAdmit(pod, allocatedPod, {
      metrics: this.#o.metrics,
      podLevelGate: this.#podLevel,
      resourcePolicies: this.#o.resourcePolicies,
      logger,
    });
    if (answer.admit) {
      answer = this.#o.canAdmit(
        pod,
        this.#allocatedOthers(this.#o.getActivePods(), pod),
        "resize",
      );
    }
    if (answer.admit) {
      this.#checkpoint(pod);
      conditions.clearPending(uid);
      conditions.clearInProgress(uid);
      conditions.setInProgress(uid, "", "", generation);
      recorder.event(
        podRef(pod),
        "Normal",
        "ResizeStarted",
        resizeMessage(pod, generation, "", "Pod resize started"),
      );
      return true;
    }
    logger.info("Pod admission denied", {
      podUID: uid,
      pod: kobj(pod),
      reason: answer.reason,
      message: answer.message,
      operation: "resize",
    });
    const reason = answer.reason ?? "";
    if (reason !== "" && conditions.setPending(uid, reason, answer.message ?? "", generation)) {
      const infeasible = reason === REASON_INFEASIBLE;
      recorder.event(
        podRef(pod),
        "Warning",
        infeasible ? "ResizeInfeasible" : "ResizeDeferred",
        // The admission's own reason (OutOfcpu, ...), as upstream's PodResizePendingMsg.
        resizeMessage(pod, generation, answer.message ?? "", `Pod resize ${reason}`),
      );
    }
    return false;
  }

  /**
   * upstream sortPendingResizes: resizes that do not increase requests first, then higher
   * priority, then Guaranteed before Burstable, then the longest pending.
   */
  #sortPending(): void {
    const pods = this.#pending.flatMap((uid) => {
      const pod = this.#o.getPodByUID(uid);
      return pod ? [pod] : [];
    });
    const since = (pod: V1Pod): number | undefined => {
      const c = this.#o.conditions.get(pod.metadata?.uid ?? "").find((c) =>
        c.type === "PodResizePending"
      );
      const t = c?.lastTransitionTime;
      return t === undefined ? undefined : new Date(t as unknown as string).getTime();
    };
    const rank = (pod: V1Pod) => ({
      increasing: this.#isResizeIncreasingRequests(pod),
      priority: pod.spec?.priority ?? 0,
      guaranteed: getPodQOS(pod) === "Guaranteed",
      since: since(pod),
    });
    const ranked = pods.map((pod) => ({ pod, r: rank(pod) }));
    ranked.sort((a, b) => {
      if (!a.r.increasing) return -1;
      if (!b.r.increasing) return 1;
      if (a.r.priority !== b.r.priority) return b.r.priority - a.r.priority;
      if (a.r.guaranteed !== b.r.guaranteed) return a.r.guaranteed ? -1 : 1;
      if (a.r.since === undefined) return 1;
      if (b.r.since === undefined) return -1;
      return a.r.since < b.r.since ? -1 : 1;
    });
    this.#pending = ranked.map(({ pod }) => pod.metadata?.uid ?? "");
  }

  /** Whether the resize raises the pod's cpu or memory requests. */
  #isResizeIncreasingRequests(pod: V1Pod): boolean {
    const { pod: allocated, updated } = this.updatePodFromAllocation(pod);
    if (!updated) return false;
    const before = podRequests(allocated);
    const after = podRequests(pod);
    const more = (name: string) =>
      cmpDec(after.get(name) ?? { n: 0n, s: 0 }, before.get(name) ?? { n: 0n, s: 0 }) > 0;
    return more("memory") || more("cpu");
  }
}

function withoutTimes(c: { lastProbeTime?: unknown; lastTransitionTime?: unknown }) {
  const { lastProbeTime: _p, lastTransitionTime: _t, ...rest } = c;
  return rest;
}

/**
 * Whether a container's resources are the kubelet's to resize (upstream IsResizableContainer
 * with InPlacePodVerticalScalingInitContainers on, as in v1.36): every regular and init
 * container (ephemeral containers have no resources).
 */
export function isResizableContainer(
  _container: V1Container,
  type: "init" | "regular" | "ephemeral",
): boolean {
  return type !== "ephemeral";
}

/**
 * The pod's resizable containers' resources, and with `podLevel` (the
 * InPlacePodLevelResourcesVerticalScaling gate) its pod-level ones, to checkpoint (upstream
 * allocationFromPod).
 */
export function allocationFromPod(pod: V1Pod, podLevel = true): PodResourceInfo {
  const containers = new Map<string, V1ResourceRequirements>();
  for (const c of pod.spec?.initContainers ?? []) {
    if (isResizableContainer(c, "init")) {
      containers.set(c.name, copyRequirements(c.resources ?? {}));
    }
  }
  for (const c of pod.spec?.containers ?? []) {
    containers.set(c.name, copyRequirements(c.resources ?? {}));
  }
  const pl = podLevel ? pod.spec?.resources : undefined;
  return {
    containerResources: containers,
    ...(pl ? { podLevelResources: copyRequirements(pl) } : {}),
  };
}

/**
 * The pod with each container's cpu and memory requests, and its pod-level ones, raised to
 * what its status reports (`resources.requests`, `allocatedResources`) where that is more:
 * upstream PodRequests with UseStatusResources and
 * InPlacePodLevelResourcesVerticalScalingEnabled, as the admission's NodeInfo counts the
 * other pods.
 */
export function withStatusResources(pod: V1Pod): V1Pod {
  const statuses = [
    ...(pod.status?.containerStatuses ?? []),
    ...(pod.status?.initContainerStatuses ?? []),
  ];
  let changed = false;
  const raise = (containers: readonly V1Container[] | undefined) =>
    containers?.map((c) => {
      const s = statuses.find((x) => x.name === c.name);
      if (!s) return c;
      const requests = raiseRequests(c.resources?.requests ?? {}, ["cpu", "memory"], [
        s.resources?.requests,
        s.allocatedResources,
      ]);
      if (!requests) return c;
      changed = true;
      return { ...c, resources: { ...c.resources, requests } };
    });
  const containers = raise(pod.spec?.containers);
  const inits = raise(pod.spec?.initContainers);
  const podLevel = raisePodLevelRequests(pod);
  if (!changed && !podLevel) return pod;
  const spec = { ...pod.spec!, containers: containers ?? [] };
  if (inits) spec.initContainers = inits;
  if (podLevel) spec.resources = { ...spec.resources, requests: podLevel };
  return { ...pod, spec };
}

/** Raises a requests list to the larger quantities of `sources`; undefined when nothing is. */
function raiseRequests(
  requests: Readonly<Record<string, string>>,
  names: readonly string[],
  sources: readonly (Readonly<Record<string, string>> | undefined)[],
): Record<string, string> | undefined {
  const out = { ...requests };
  let raised = false;
  for (const name of names) {
    for (const q of sources.map((s) => s?.[name])) {
      if (q === undefined) continue;
      const have = out[name];
      if (have === undefined || cmpDec(parseDec(String(q)), parseDec(String(have))) > 0) {
        out[name] = String(q);
        raised = true;
      }
    }
  }
  return raised ? out : undefined;
}

/**
 * The pod-level requests raised to the pod's status (`status.resources.requests`,
 * `status.allocatedResources`) where that is more, for each of cpu and memory they name;
 * undefined when none is.
 */
function raisePodLevelRequests(pod: V1Pod): Record<string, string> | undefined {
  const requests = pod.spec?.resources?.requests;
  if (!requests) return undefined;
  const names = Object.keys(requests).filter((n) => n === "cpu" || n === "memory");
  return raiseRequests(requests, names, [
    pod.status?.resources?.requests,
    pod.status?.allocatedResources,
  ]);
}

/** Quantities equal as numbers, a missing list equal to an empty one (apiequality.Semantic). */
function listEqual(
  a: Readonly<Record<string, string>> | undefined,
  b: Readonly<Record<string, string>> | undefined,
): boolean {
  const ka = Object.keys(a ?? {});
  const kb = Object.keys(b ?? {});
  if (ka.length !== kb.length) return false;
  for (const k of ka) {
    const y = b?.[k];
    if (y === undefined) return false;
    if (cmpDec(parseDec(String(a![k])), parseDec(String(y))) !== 0) return false;
  }
  return true;
}

/** Whether two requirements are semantically equal (limits and requests). */
export function requirementsEqual(
  a: V1ResourceRequirements | undefined,
  b: V1ResourceRequirements | undefined,
): boolean {
  return listEqual(a?.limits, b?.limits) && listEqual(a?.requests, b?.requests);
}

/**
 * upstream updatePodFromAllocation over one pod's checkpointed info; the pod-level resources
 * only with `podLevel` (the InPlacePodLevelResourcesVerticalScaling gate).
 */
export function applyAllocation(
  pod: V1Pod,
  info: PodResourceInfo,
  podLevel = true,
): { pod: V1Pod; updated: boolean } {
  let updated = false;
  const apply = (containers: readonly V1Container[] | undefined) =>
    containers?.map((c) => {
      const alloc = info.containerResources.get(c.name);
      if (alloc === undefined || requirementsEqual(c.resources, alloc)) return c;
      updated = true;
      return { ...c, resources: copyRequirements(alloc) };
    });
  const containers = apply(pod.spec?.containers);
  const inits = apply(pod.spec?.initContainers);
  const allocated = info.podLevelResources;
  const podLevelChanged = podLevel && !requirementsEqual(pod.spec?.resources, allocated);
  if (!updated && !podLevelChanged) return { pod, updated };
  const spec = { ...pod.spec!, containers: containers ?? [] };
  if (inits) spec.initContainers = inits;
  if (podLevelChanged) {
    if (allocated) spec.resources = copyRequirements(allocated);
    else delete spec.resources;
  }
  return { pod: { ...pod, spec }, updated: true };
}

/** kubelet_pod_infeasible_resizes_total's reason_detail for a pod-level resize, gate off. */
export const INFEASIBLE_PLR_FEATURE_GATE_OFF = "plr_feature_gate_off";

/**
 * upstream IsInPlacePodLevelResourcesVerticalScalingAllowed (features_linux.go): allowed with
 * the gate on, else the message and the metric's reason_detail.
 */
export function isInPlacePodLevelResourcesVerticalScalingAllowed(
  gate: boolean,
): { allowed: true } | { allowed: false; message: string; reason: string } {
  if (!gate) {
    return {
      allowed: false,
      message: "InPlacePodLevelResourcesVerticalScaling is disabled",
      reason: INFEASIBLE_PLR_FEATURE_GATE_OFF,
    };
  }
  return { allowed: true };
}

/** kubelet_pod_infeasible_resizes_total's reason_detail for a Guaranteed pod's pinned cpu. */
export const INFEASIBLE_CPU_MANAGER_STATIC = "guaranteed_pod_cpu_manager_static_policy";
/** kubelet_pod_infeasible_resizes_total's reason_detail for a Guaranteed pod's pinned memory. */
export const INFEASIBLE_MEMORY_MANAGER_STATIC = "guaranteed_pod_memory_manager_static_policy";

/** What {@link resizeAdmit} reads besides the pod. */
export interface ResizeAdmitOptions {
  /** Where infeasible resizes are counted. @default none */
  readonly metrics?: Pick<AllocationMetrics, "podInfeasibleResizes">;
  /** featureGates.InPlacePodLevelResourcesVerticalScaling. @default true */
  readonly podLevelGate?: boolean;
  /** The CPU and memory manager policies. @default none: neither is static */
  readonly resourcePolicies?: ResourcePolicies;
  /** For the V(3) line of a Guaranteed pod's refused resize. @default none */
  readonly logger?: Logger;
}

/**
 * The resize admit handler (upstream podResizesAdmitHandler on Linux): a resize of the pod-level
 * resources is infeasible when the InPlacePodLevelResourcesVerticalScaling gate is off
 * (`podLevelGate`); a Guaranteed pod's resize that changes a container's cpu requests under the
 * static CPU manager policy, or its memory requests under the Static memory manager policy, is
 * infeasible (the gates that would let the managers resize, alpha
 * InPlacePodVerticalScalingExclusiveCPUs and ...ExclusiveMemory, are refused at start). Each is
 * counted each time it is found, as upstream. InPlacePodVerticalScaling is locked on; a container
 * memory resize with swap (swap_limitation) is not checked by this handler yet.
 */
export function resizeAdmit(
  pod: V1Pod,
  allocatedPod: V1Pod,
  opts: ResizeAdmitOptions = {},
): AdmitAnswer {
  const { metrics, resourcePolicies } = opts;
  if (!requirementsEqual(pod.spec?.resources, allocatedPod.spec?.resources)) {
    const allowed = isInPlacePodLevelResourcesVerticalScalingAllowed(opts.podLevelGate ?? true);
    if (!allowed.allowed) {
      // A pending pod-level resize that is not allowed keeps the allocated resources.
      metrics?.podInfeasibleResizes.inc({ reason_detail: allowed.reason });
      return { admit: false, reason: REASON_INFEASIBLE, message: allowed.message };
    }
  }
  if (resourcePolicies && getPodQOS(pod) === "Guaranteed") {
    const pinned = [
      {
        resource: "cpu",
        on: resourcePolicies.cpuManagerPolicy === CPU_POLICY_STATIC,
        manager: `CPU Manager policy "${CPU_POLICY_STATIC}"`,
        reason: INFEASIBLE_CPU_MANAGER_STATIC,
      },
      {
        resource: "memory",
        on: resourcePolicies.memoryManagerPolicy === MEMORY_POLICY_STATIC,
        manager: `Memory Manager policy "${MEMORY_POLICY_STATIC}"`,
        reason: INFEASIBLE_MEMORY_MANAGER_STATIC,
      },
    ];
    for (const p of pinned) {
      if (!p.on || !guaranteedPodResourceResizeRequired(pod, allocatedPod, p.resource)) continue;
      const message = `Resize is infeasible for Guaranteed Pods alongside ${p.manager}`;
      opts.logger?.v(3).info(message, { pod: kobj(pod) });
      metrics?.podInfeasibleResizes.inc({ reason_detail: p.reason });
      return { admit: false, reason: REASON_INFEASIBLE, message };
    }
  }
  return { admit: true };
}

/**
 * upstream guaranteedPodResourceResizeRequired: whether a resizable container's request of
 * `resource` differs from its allocation (a Guaranteed pod's limits equal its requests).
 */
function guaranteedPodResourceResizeRequired(
  pod: V1Pod,
  allocatedPod: V1Pod,
  resource: string,
): boolean {
  const allocated = new Map<string, V1Container>();
  for (const c of allocatedPod.spec?.initContainers ?? []) allocated.set(c.name, c);
  for (const c of allocatedPod.spec?.containers ?? []) allocated.set(c.name, c);
  const request = (c: V1Container | undefined) =>
    parseDec(String(c?.resources?.requests?.[resource] ?? "0"));
  const changed = (c: V1Container) => cmpDec(request(c), request(allocated.get(c.name))) !== 0;
  return (pod.spec?.initContainers ?? []).some((c) =>
    isResizableContainer(c, "init") && changed(c)
  ) ||
    (pod.spec?.containers ?? []).some((c) => isResizableContainer(c, "regular") && changed(c));
}

/**
 * upstream podResizeMessage: the prefix, then the desired resources as JSON (containers by
 * name, the pod's generation, the error if any).
 */
export function resizeMessage(
  pod: V1Pod,
  generation: number,
  error: string,
  prefix: string,
): string {
  const entry = (c: V1Container) => {
    const r = c.resources ?? {};
    const res: Record<string, unknown> = {};
    if (r.limits && Object.keys(r.limits).length > 0) res.limits = sortKeys(r.limits);
    if (r.requests && Object.keys(r.requests).length > 0) res.requests = sortKeys(r.requests);
    return { name: c.name, resources: res };
  };
  const summary: Record<string, unknown> = {};
  const inits = pod.spec?.initContainers ?? [];
  if (inits.length > 0) summary.initContainers = inits.map(entry);
  const containers = pod.spec?.containers ?? [];
  if (containers.length > 0) summary.containers = containers.map(entry);
  summary.generation = generation;
  if (error) summary.error = error;
  return `${prefix}: ${JSON.stringify(summary)}`;
}

function sortKeys(m: Readonly<Record<string, string>>): Record<string, string> {
  return Object.fromEntries(Object.keys(m).sort().map((k) => [k, m[k]!]));
}
