/**
 * @module
 * The in-place resize conditions of each pod, as the kubelet reports them: PodResizePending
 * (reason Deferred or Infeasible: the kubelet has not accepted the new resources) and
 * PodResizeInProgress (accepted, not yet actuated; reason Error with the runtime's message when
 * actuation failed). The allocation manager and the pod sync set and clear them; the status
 * generator appends them to the pod's conditions. Corresponds to upstream's podResizeConditions
 * in `pkg/kubelet/status/status_manager.go` (SetPodResizePendingCondition,
 * SetPodResizeInProgressCondition, Clear*, BackfillPodResizeConditions, IsPodResize*).
 */

import type { V1Pod, V1PodCondition } from "@kubernetes/client-node";
import type { Clock } from "../util/clock.ts";
import type { KubeletMetrics } from "../metrics/metrics.ts";
import { rfc3339 } from "../nodestatus/node_status.ts";

/** Condition types (v1.PodResizePending, v1.PodResizeInProgress). */
export const POD_RESIZE_PENDING = "PodResizePending";
export const POD_RESIZE_IN_PROGRESS = "PodResizeInProgress";
/** Reasons (v1.PodReasonDeferred, v1.PodReasonInfeasible, v1.PodReasonError). */
export const REASON_DEFERRED = "Deferred";
export const REASON_INFEASIBLE = "Infeasible";
export const REASON_ERROR = "Error";

interface Conditions {
  pending?: V1PodCondition;
  inProgress?: V1PodCondition;
}

/** The gauges {@link PodResizeConditions} keeps current. */
export type ResizeConditionMetrics = Pick<
  KubeletMetrics,
  "podPendingResizes" | "podInProgressResizes"
>;

/** The resize conditions of every pod; see the module documentation. */
export class PodResizeConditions {
  readonly #pods = new Map<string, Conditions>();
  readonly #clock: Clock;
  readonly #metrics: ResizeConditionMetrics | undefined;

  /** `metrics` get the pending (by reason) and in-progress counts after every change. */
  constructor(clock: Clock, metrics?: ResizeConditionMetrics) {
    this.#clock = clock;
    this.#metrics = metrics;
  }

  /** Upstream recordPendingResizeCount and recordInProgressResizeCount. */
  #record(): void {
    const m = this.#metrics;
    if (!m) return;
    m.podPendingResizes.reset();
    for (const [reason, n] of this.pendingCounts()) m.podPendingResizes.set(n, { reason });
    let inProgress = 0;
    for (const c of this.#pods.values()) if (c.inProgress) inProgress++;
    m.podInProgressResizes.set(inProgress);
  }

  /** The pod's conditions, pending first (upstream GetPodResizeConditions). */
  get(uid: string): V1PodCondition[] {
    const c = this.#pods.get(uid);
    if (!c) return [];
    return [c.pending, c.inProgress].filter((x) => x !== undefined).map((x) => ({ ...x }));
  }

  /**
   * Sets PodResizePending: Infeasible stays, any other reason is Deferred. Returns whether the
   * reason or observedGeneration changed (or the condition is new).
   */
  setPending(uid: string, reason: string, message: string, generation: number): boolean {
    const r = reason === REASON_INFEASIBLE ? REASON_INFEASIBLE : REASON_DEFERRED;
    const c = this.#entry(uid);
    const prev = c.pending;
    c.pending = this.#updated(POD_RESIZE_PENDING, prev, r, message, generation);
    this.#record();
    return prev === undefined || prev.reason !== r ||
      (prev.observedGeneration ?? 0) !== generation;
  }

  /**
   * Sets PodResizeInProgress. An existing condition keeps its observedGeneration, and its
   * reason and message unless new ones are given (clear it first to change them). Returns the
   * condition's generation and whether anything but its times changed.
   */
  setInProgress(
    uid: string,
    reason: string,
    message: string,
    generation: number,
  ): { generation: number; updated: boolean } {
    const c = this.#entry(uid);
    const prev = c.inProgress;
    if (prev) {
      if (reason === "" && message === "") {
        reason = prev.reason ?? "";
        message = prev.message ?? "";
      }
      generation = prev.observedGeneration ?? 0;
    }
    c.inProgress = this.#updated(POD_RESIZE_IN_PROGRESS, prev, reason, message, generation);
    this.#record();
    const updated = prev === undefined || (prev.reason ?? "") !== reason ||
      (prev.message ?? "") !== message;
    return { generation, updated };
  }

  /** Clears PodResizePending. */
  clearPending(uid: string): void {
    const c = this.#pods.get(uid);
    if (!c) return;
    c.pending = undefined;
    if (!c.inProgress) this.#pods.delete(uid);
    this.#record();
  }

  /** Clears PodResizeInProgress; returns the generation it had, when there was one. */
  clearInProgress(uid: string): { generation: number } | undefined {
    const c = this.#pods.get(uid);
    if (!c?.inProgress) return undefined;
    const generation = c.inProgress.observedGeneration ?? 0;
    c.inProgress = undefined;
    if (!c.pending) this.#pods.delete(uid);
    this.#record();
    return { generation };
  }

  /** Takes the conditions the API objects carry, after a restart (upstream Backfill...). */
  backfill(pods: readonly V1Pod[]): void {
    for (const pod of pods) {
      const uid = pod.metadata?.uid ?? "";
      for (const cond of pod.status?.conditions ?? []) {
        if (cond.type !== POD_RESIZE_PENDING && cond.type !== POD_RESIZE_IN_PROGRESS) continue;
        const c = this.#entry(uid);
        const next = this.#updated(
          cond.type,
          undefined,
          cond.reason ?? "",
          cond.message ?? "",
          cond.observedGeneration ?? 0,
        );
        if (cond.type === POD_RESIZE_PENDING) c.pending = next;
        else c.inProgress = next;
      }
    }
    this.#record();
  }

  /** Whether the pod's resize waits for resources (PodResizePending Deferred). */
  isDeferred(uid: string): boolean {
    return this.#pods.get(uid)?.pending?.reason === REASON_DEFERRED;
  }

  /** Whether the pod's resize cannot be done on this node (PodResizePending Infeasible). */
  isInfeasible(uid: string): boolean {
    return this.#pods.get(uid)?.pending?.reason === REASON_INFEASIBLE;
  }

  /** How many pods have a pending resize, by lower-case reason (kubelet_pod_pending_resizes). */
  pendingCounts(): Map<string, number> {
    const out = new Map<string, number>();
    for (const c of this.#pods.values()) {
      const r = c.pending?.reason?.toLowerCase();
      if (r) out.set(r, (out.get(r) ?? 0) + 1);
    }
    return out;
  }

  /** Forgets pods not in `keep`. */
  retain(keep: ReadonlySet<string>): void {
    for (const uid of [...this.#pods.keys()]) if (!keep.has(uid)) this.#pods.delete(uid);
    this.#record();
  }

  #entry(uid: string): Conditions {
    let c = this.#pods.get(uid);
    if (!c) this.#pods.set(uid, c = {});
    return c;
  }

  /** upstream updatedPodResizeCondition: the transition time moves when the reason does. */
  #updated(
    type: string,
    old: V1PodCondition | undefined,
    reason: string,
    message: string,
    generation: number,
  ): V1PodCondition {
    const now = rfc3339(this.#clock.now()) as unknown as Date;
    const c: V1PodCondition = {
      type,
      status: "True",
      lastProbeTime: now,
      lastTransitionTime: old === undefined || (old.reason ?? "") !== reason
        ? now
        : old.lastTransitionTime,
    };
    if (generation) c.observedGeneration = generation;
    if (reason) c.reason = reason;
    if (message) c.message = message;
    return c;
  }
}
