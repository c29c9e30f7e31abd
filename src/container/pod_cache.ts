/**
 * @module
 * PodCache: the latest status of every pod as the container runtime reported it, with the time
 * it was observed. The PLEG writes it after each relist; pod workers read it, and wait with
 * {@link PodCache.getNewerThan} until it holds a status newer than the one they last acted on.
 * Waiting needs no timer: waiters are kept per pod and resolved by `set` and `updateTime`.
 * Corresponds to upstream `pkg/kubelet/container/cache.go`.
 */

import type * as api from "../../proto/runtime/v1/api.ts";

/** A pod's status as the runtime reports it (upstream `kubecontainer.PodStatus`). */
export interface PodStatus {
  /** The pod UID. */
  id: string;
  name: string;
  namespace: string;
  /** Pod IPs; the first is the primary one. */
  ips: string[];
  /** The pod's sandboxes, newest first. */
  sandboxStatuses: api.PodSandboxStatus[];
  /** The pod's containers as the runtime reports them, newest first. */
  containerStatuses: api.ContainerStatus[];
  /** When the status was read, in milliseconds since the epoch; 0 for a default status. */
  timestamp: number;
}

/** What the cache holds for a pod: its status and the error met while reading it, if any. */
export interface PodCacheEntry {
  readonly status: PodStatus;
  readonly error: Error | undefined;
}

interface Data extends PodCacheEntry {
  /** When the status was observed, in milliseconds since the epoch. */
  readonly modified: number;
}

interface Waiter {
  readonly minTime: number;
  readonly resolve: (entry: PodCacheEntry) => void;
}

/** An empty status for a pod the cache knows nothing about, as upstream's makeDefaultData. */
export function defaultPodStatus(id: string): PodStatus {
  return {
    id,
    name: "",
    namespace: "",
    ips: [],
    sandboxStatuses: [],
    containerStatuses: [],
    timestamp: 0,
  };
}

/** The pod status cache; see the module documentation. */
export class PodCache {
  readonly #pods = new Map<string, Data>();
  readonly #waiters = new Map<string, Set<Waiter>>();
  /** Every entry is at least this new; undefined until the first {@link updateTime}. */
  #timestamp: number | undefined;

  /** The pod's latest entry, or a default status with no error when there is none. */
  get(uid: string): PodCacheEntry {
    const d = this.#pods.get(uid);
    return d
      ? { status: d.status, error: d.error }
      : { status: defaultPodStatus(uid), error: undefined };
  }

  /**
   * Resolves with the pod's entry once it is newer than `minTime` (milliseconds since the epoch):
   * when the pod's own status is, or when the global timestamp says everything is. Rejects with
   * the signal's reason when it aborts first.
   */
  getNewerThan(uid: string, minTime: number, signal?: AbortSignal): Promise<PodCacheEntry> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    const ready = this.#getIfNewerThan(uid, minTime);
    if (ready) return Promise.resolve(ready);
    return new Promise((resolve, reject) => {
      let set = this.#waiters.get(uid);
      if (!set) this.#waiters.set(uid, set = new Set());
      const onAbort = () => {
        this.#removeWaiter(uid, waiter);
        reject(signal?.reason);
      };
      const waiter: Waiter = {
        minTime,
        resolve: (entry) => {
          signal?.removeEventListener("abort", onAbort);
          resolve(entry);
        },
      };
      set.add(waiter);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** Stores the pod's status (and the error met reading it) as observed at `time`. */
  set(uid: string, status: PodStatus, error: Error | undefined, time: number): void {
    this.#pods.set(uid, { status, error, modified: time });
    this.#notify(uid, time);
  }

  /**
   * Stores the entry unless the cache already holds one observed after `time`, as upstream's
   * Set does for the evented PLEG (an event can arrive after a relist that saw later state).
   * Returns whether it stored it.
   */
  setIfNewer(uid: string, status: PodStatus, error: Error | undefined, time: number): boolean {
    const d = this.#pods.get(uid);
    if (d !== undefined && d.modified > time) return false;
    this.set(uid, status, error, time);
    return true;
  }

  /** UIDs of the pods the cache holds an entry for. */
  uids(): string[] {
    return [...this.#pods.keys()];
  }

  /** Forgets the pod; waiters keep waiting, as upstream, until a later set or updateTime. */
  delete(uid: string): void {
    this.#pods.delete(uid);
  }

  /** Declares every entry at least as new as `time`, and wakes the waiters this satisfies. */
  updateTime(time: number): void {
    this.#timestamp = time;
    for (const uid of [...this.#waiters.keys()]) this.#notify(uid, time);
  }

  /** The global timestamp, or undefined before the first {@link updateTime}. */
  get timestamp(): number | undefined {
    return this.#timestamp;
  }

  /** How many getNewerThan calls are pending, over all pods. */
  get waiters(): number {
    let n = 0;
    for (const set of this.#waiters.values()) n += set.size;
    return n;
  }

  #getIfNewerThan(uid: string, minTime: number): PodCacheEntry | undefined {
    const globalNewer = this.#timestamp !== undefined && this.#timestamp > minTime;
    const d = this.#pods.get(uid);
    if (globalNewer || (d !== undefined && d.modified > minTime)) return this.get(uid);
    return undefined;
  }

  /** Upstream's notify: wakes waiters whose minTime is not after `time`. */
  #notify(uid: string, time: number): void {
    const set = this.#waiters.get(uid);
    if (!set) return;
    const entry = this.get(uid);
    for (const w of set) {
      if (time < w.minTime) continue;
      set.delete(w);
      w.resolve(entry);
    }
    if (set.size === 0) this.#waiters.delete(uid);
  }

  #removeWaiter(uid: string, waiter: Waiter): void {
    const set = this.#waiters.get(uid);
    if (!set) return;
    set.delete(waiter);
    if (set.size === 0) this.#waiters.delete(uid);
  }
}
