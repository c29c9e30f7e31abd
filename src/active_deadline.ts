/**
 * @module
 * `spec.activeDeadlineSeconds`: a pod that has been active on the node (since its status's
 * startTime) for that long fails with reason DeadlineExceeded and its containers are killed.
 * The handler is a sync loop handler (a pod past its deadline is synced at the next tick, also
 * when the deadline was shortened on a running pod) and a sync handler (the status generated
 * for it is Failed, with a DeadlineExceeded event). Corresponds to upstream
 * `pkg/kubelet/active_deadline.go`.
 */

import type { V1Pod, V1PodStatus } from "@kubernetes/client-node";
import { type EventRecorder, podRef } from "./client/record.ts";
import type {
  PodSyncHandler,
  PodSyncLoopHandler,
  ShouldEvictResponse,
} from "./lifecycle/interfaces.ts";
import type { Clock } from "./util/clock.ts";

/** The status reason and event reason of a pod past its deadline. */
export const DEADLINE_EXCEEDED_REASON = "DeadlineExceeded";
/** The status message and event message of a pod past its deadline. */
export const DEADLINE_EXCEEDED_MESSAGE =
  "Pod was active on the node longer than the specified deadline";

/** What {@link ActiveDeadlineHandler} needs. */
export interface ActiveDeadlineHandlerOptions {
  readonly clock: Clock;
  readonly recorder: EventRecorder;
  /** The status manager's latest status of the pod (upstream PodStatusProvider). */
  readonly podStatus: (uid: string) => V1PodStatus | undefined;
}

/** Upstream activeDeadlineHandler. */
export class ActiveDeadlineHandler implements PodSyncLoopHandler, PodSyncHandler {
  readonly #o: ActiveDeadlineHandlerOptions;

  constructor(opts: ActiveDeadlineHandlerOptions) {
    this.#o = opts;
  }

  /** A pod past its deadline is synced at the next tick. */
  shouldSync(pod: V1Pod): boolean {
    return this.#pastActiveDeadline(pod);
  }

  /** A pod past its deadline fails, with an event each time this is asked (as upstream). */
  shouldEvict(pod: V1Pod): ShouldEvictResponse {
    if (!this.#pastActiveDeadline(pod)) return { evict: false };
    this.#o.recorder.event(
      podRef(pod),
      "Normal",
      DEADLINE_EXCEEDED_REASON,
      DEADLINE_EXCEEDED_MESSAGE,
    );
    return { evict: true, reason: DEADLINE_EXCEEDED_REASON, message: DEADLINE_EXCEEDED_MESSAGE };
  }

  #pastActiveDeadline(pod: V1Pod): boolean {
    const deadline = pod.spec?.activeDeadlineSeconds;
    if (deadline === undefined || deadline === null) return false;
    // The latest status says whether (and when) the pod started; the API's when there is none.
    const status = this.#o.podStatus(pod.metadata?.uid ?? "") ?? pod.status;
    const started = status?.startTime;
    if (started === undefined || started === null) return false;
    const start = new Date(started as unknown as string).getTime();
    if (Number.isNaN(start)) return false;
    return this.#o.clock.now() - start >= deadline * 1000;
  }
}
