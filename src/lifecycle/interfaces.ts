/**
 * @module
 * The hooks through which a kubelet module takes part in every pod's sync: a sync loop handler
 * asks for a pod to be synced at the next tick, a sync handler may require a running pod to
 * fail. Corresponds to upstream `pkg/kubelet/lifecycle/interfaces.go` (PodSyncLoopHandler,
 * PodSyncHandler, ShouldEvictResponse); the active deadline handler (`active_deadline.ts`) is
 * the one upstream registers as both.
 */

import type { V1Pod } from "@kubernetes/client-node";

/** Whether a sync handler requires the pod to fail, and the status reason and message. */
export interface ShouldEvictResponse {
  readonly evict: boolean;
  readonly reason?: string;
  readonly message?: string;
}

/** Asked at each sync tick: true puts the pod among the pods to sync. */
export interface PodSyncLoopHandler {
  shouldSync(pod: V1Pod): boolean;
}

/** Asked each time a pod's API status is generated: an eviction makes the pod Failed. */
export interface PodSyncHandler {
  shouldEvict(pod: V1Pod): ShouldEvictResponse;
}
