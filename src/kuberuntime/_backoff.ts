/**
 * @module
 * The crash-loop back-off of the kuberuntime manager: per container key, a delay that starts at
 * `initialMs`, doubles at each restart up to `maxMs`, and is measured from the time the last
 * instance of the container finished. An entry is forgotten once an event comes more than 2×max
 * after its last update (the container ran stably that long). Private to
 * `kuberuntime_manager.ts`; corresponds to upstream `client-go/util/flowcontrol/backoff.go`
 * (`Next`, `IsInBackOffSince`, `Get`, `GC`) without jitter, as the kubelet builds it.
 *
 * The image manager's `BackOff` measures from the last update instead of from an event time,
 * which is right for pulls but not for restarts, hence this second flavour.
 */

import type { Clock } from "../util/clock.ts";

interface Entry {
  backoffMs: number;
  lastUpdate: number;
}

/** Per-key exponential back-off measured from an event time; see the module documentation. */
export class EventBackOff {
  readonly #entries = new Map<string, Entry>();

  constructor(readonly clock: Clock, readonly initialMs: number, readonly maxMs: number) {}

  /** Records a restart after the event at `eventTime` (ms since the epoch). */
  next(id: string, eventTime: number): void {
    const e = this.#entries.get(id);
    if (!e || this.#expired(eventTime, e.lastUpdate)) {
      this.#entries.set(id, { backoffMs: this.initialMs, lastUpdate: this.clock.now() });
      return;
    }
    e.backoffMs = Math.min(e.backoffMs * 2, this.maxMs);
    e.lastUpdate = this.clock.now();
  }

  /** Whether less than the current delay has passed since `eventTime`. */
  isInBackOffSince(id: string, eventTime: number): boolean {
    const e = this.#entries.get(id);
    if (!e || this.#expired(eventTime, e.lastUpdate)) return false;
    return this.clock.now() - eventTime < e.backoffMs;
  }

  /** The current delay of `id` in ms; 0 when it has none. */
  get(id: string): number {
    return this.#entries.get(id)?.backoffMs ?? 0;
  }

  /** Drops the entries not updated for 2×max. */
  gc(): void {
    const now = this.clock.now();
    for (const [id, e] of this.#entries) {
      if (now - e.lastUpdate > 2 * this.maxMs) this.#entries.delete(id);
    }
  }

  /** How many keys are tracked. */
  get size(): number {
    return this.#entries.size;
  }

  #expired(eventTime: number, lastUpdate: number): boolean {
    return eventTime - lastUpdate > 2 * this.maxMs;
  }
}
