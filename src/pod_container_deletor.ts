/**
 * @module
 * Removes a pod's dead containers as they die, without waiting for the garbage collector's
 * minute: when the PLEG reports a container died, the exited instances of that container beyond
 * the newest `containersToKeep` go; once the pod's content may be removed (deleted and
 * terminated, or evicted) every exited container goes. Requests wait in a queue of at most
 * {@link CONTAINER_DELETOR_BUFFER_LIMIT}, one removal at a time; a request that finds it full is
 * dropped with a log line (the garbage collector removes that container later). Unlike upstream's
 * channel, the limit counts the removal under way (upstream holds 50 more besides it), and a
 * container already queued is not queued again. Corresponds to upstream
 * `pkg/kubelet/pod_container_deletor.go` and Kubelet.cleanUpContainersInPod.
 */

import * as api from "../proto/runtime/v1/api.ts";
import type { PodStatus } from "./container/pod_cache.ts";
import type { Logger } from "./klog/klog.ts";
import { errorText } from "./util/errors.ts";

/** Upstream containerDeletorBufferLimit: removal requests waiting at most. */
export const CONTAINER_DELETOR_BUFFER_LIMIT = 50;

/** Upstream minDeadContainerInPod: dead instances of a container kept at least. */
export const MIN_DEAD_CONTAINER_IN_POD = 1;

/** What {@link PodContainerDeletor} needs. */
export interface PodContainerDeletorOptions {
  /** Removes one container, its logs first (upstream Runtime.DeleteContainer). */
  readonly remove: (containerId: string, signal: AbortSignal) => Promise<void>;
  /**
   * Exited instances of a container kept (the garbage collector's maxPerPodContainer), at least
   * {@link MIN_DEAD_CONTAINER_IN_POD}.
   */
  readonly containersToKeep: number;
  readonly logger: Logger;
  /** Stops the removals. */
  readonly signal: AbortSignal;
}

/**
 * The exited containers to remove, newest first (upstream getContainersToDeleteInPod): those of
 * the name of `filterContainerId` (every name when it is ""), past the newest `containersToKeep`.
 * Undefined when `filterContainerId` is not one of the pod's containers (a sandbox).
 */
export function containersToDeleteInPod(
  filterContainerId: string,
  podStatus: PodStatus,
  containersToKeep: number,
): api.ContainerStatus[] | undefined {
  const matched = filterContainerId === ""
    ? undefined
    : podStatus.containerStatuses.find((c) => c.id === filterContainerId);
  if (filterContainerId !== "" && matched === undefined) return undefined;
  const name = matched?.metadata?.name;
  const candidates = podStatus.containerStatuses.filter((c) =>
    c.state === api.ContainerState.CONTAINER_EXITED &&
    (matched === undefined || c.metadata?.name === name)
  );
  if (candidates.length <= containersToKeep) return [];
  return candidates.sort((
    a,
    b,
  ) => (a.createdAt > b.createdAt ? -1 : a.createdAt < b.createdAt ? 1 : 0))
    .slice(containersToKeep);
}

/** Upstream podContainerDeletor: one worker removing what {@link deleteContainersInPod} queues. */
export class PodContainerDeletor {
  readonly #o: PodContainerDeletorOptions;
  readonly #keep: number;
  readonly #queue: string[] = [];
  #draining: Promise<void> | undefined;

  constructor(o: PodContainerDeletorOptions) {
    this.#o = o;
    this.#keep = Math.max(o.containersToKeep, MIN_DEAD_CONTAINER_IN_POD);
  }

  /**
   * Queues the removal of the pod's exited containers: those named as `filterContainerId`
   * beyond the kept ones, or, with `removeAll`, every one (upstream deleteContainersInPod).
   */
  deleteContainersInPod(filterContainerId: string, podStatus: PodStatus, removeAll: boolean): void {
    if (this.#o.signal.aborted) return;
    const filter = removeAll ? "" : filterContainerId;
    const doomed = containersToDeleteInPod(filter, podStatus, removeAll ? 0 : this.#keep);
    if (doomed === undefined) {
      this.#o.logger.info("Container not found in pod's containers", {
        containerID: filterContainerId,
      });
      return;
    }
    for (const c of doomed) {
      if (this.#queue.includes(c.id)) continue;
      if (this.#queue.length >= CONTAINER_DELETOR_BUFFER_LIMIT) {
        this.#o.logger.info("Failed to issue the request to remove container", {
          containerID: c.id,
        });
        continue;
      }
      this.#queue.push(c.id);
    }
    if (this.#queue.length > 0 && this.#draining === undefined) {
      const draining = this.#drain().finally(() => {
        if (this.#draining === draining) this.#draining = undefined;
      });
      this.#draining = draining;
    }
  }

  /** Resolves when the queue is empty and no removal is under way. */
  async idle(): Promise<void> {
    while (this.#draining) await this.#draining;
  }

  async #drain(): Promise<void> {
    const { signal, logger } = this.#o;
    while (this.#queue.length > 0 && !signal.aborted) {
      const id = this.#queue[0]!;
      try {
        await this.#o.remove(id, signal);
      } catch (e) {
        if (signal.aborted) return;
        logger.info("DeleteContainer returned error", { containerID: id, err: errorText(e) });
      } finally {
        this.#queue.shift();
      }
    }
  }
}
