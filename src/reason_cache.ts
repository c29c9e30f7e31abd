/**
 * @module
 * ReasonCache: why the last attempt to start each container failed (CrashLoopBackOff,
 * ErrImagePull, CreateContainerConfigError, ...), keyed by pod UID and container name, so that the
 * status generator can show it as the container's waiting reason. The pod workers feed it the
 * {@link PodSyncResult} of every sync; `generateAPIPodStatus` (kubelet_pods.ts) reads it. Best effort, as
 * upstream: bounded (least recently used entries go first) and not persisted. Corresponds to
 * upstream `pkg/kubelet/reason_cache.go`.
 */

import type { PodSyncResult } from "./container/sync_result.ts";

/** The failure cached for one container. */
export interface ContainerFailure {
  /** Upstream's error value, such as "CrashLoopBackOff". */
  readonly reason: string;
  readonly message: string;
}

/** Upstream maxReasonCacheEntries: enough for 100 pods of a few containers each. */
const DEFAULT_CAPACITY = 1000;

/** A bad {@link ReasonCache} argument. */
export class ReasonCacheError extends Error {
  override name = "ReasonCacheError";
}

/** The last start failure per pod and container; see the module documentation. */
export class ReasonCache {
  readonly #capacity: number;
  /** Insertion order is recency order: the first key is the least recently used. */
  readonly #entries = new Map<string, ContainerFailure>();

  /** @param capacity how many containers are remembered at most. @default 1000 */
  constructor(capacity = DEFAULT_CAPACITY) {
    if (!Number.isInteger(capacity) || capacity < 1) {
      throw new ReasonCacheError(
        `ReasonCache: 'capacity' must be a positive integer: current value is '${capacity}'`,
      );
    }
    this.#capacity = capacity;
  }

  /**
   * Records the failed container starts of a sync and forgets the containers that started. Only
   * StartContainer and InitContainer steps count, as upstream's Update looks at StartContainer.
   */
  update(uid: string, result: PodSyncResult): void {
    for (const r of result.results) {
      if (r.action !== "StartContainer" && r.action !== "InitContainer") continue;
      const key = composeKey(uid, r.target);
      if (r.error === undefined) {
        this.#entries.delete(key);
        continue;
      }
      this.#entries.delete(key);
      this.#entries.set(key, { reason: r.error, message: r.message ?? "" });
      if (this.#entries.size > this.#capacity) {
        const oldest = this.#entries.keys().next();
        if (!oldest.done) this.#entries.delete(oldest.value);
      }
    }
  }

  /** The cached failure of the container, which counts as a use of it; undefined when none. */
  get(uid: string, containerName: string): ContainerFailure | undefined {
    const key = composeKey(uid, containerName);
    const entry = this.#entries.get(key);
    if (entry === undefined) return undefined;
    this.#entries.delete(key);
    this.#entries.set(key, entry);
    return { ...entry };
  }

  /** Forgets the container's failure. */
  remove(uid: string, containerName: string): void {
    this.#entries.delete(composeKey(uid, containerName));
  }

  /** How many containers have a cached failure. */
  get size(): number {
    return this.#entries.size;
  }
}

/** Upstream's `<pod UID>_<container name>` key. */
function composeKey(uid: string, containerName: string): string {
  return `${uid}_${containerName}`;
}
