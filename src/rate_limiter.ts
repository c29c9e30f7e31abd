/**
 * @module
 * A token bucket that paces requests to the apiserver: `qps` tokens a second, at most `burst`
 * held, callers served in arrival order, those that said they can wait (background) after the
 * others. Corresponds to client-go's
 * `flowcontrol.NewTokenBucketRateLimiter`, which the kubelet's clients use with kubeAPIQPS /
 * kubeAPIBurst and eventRecordQPS / eventBurst.
 */

import type { Clock } from "./clock.ts";

interface Waiter {
  readonly resolve: () => void;
  readonly reject: (reason: unknown) => void;
  readonly signal?: AbortSignal;
  readonly onAbort?: () => void;
}

/**
 * Paces callers; `qps <= 0` means no limit (client-go's QPS -1, as for heartbeats). Callers
 * waiting in the background get a token only when no other caller waits (client-go has one
 * queue: this is ours, for work that can wait behind the requests that start pods).
 */
export class TokenBucket {
  #tokens: number;
  #last: number;
  readonly #queues: { readonly foreground: Waiter[]; readonly background: Waiter[] } = {
    foreground: [],
    background: [],
  };
  #pumping = false;

  constructor(
    private readonly clock: Clock,
    private qps: number,
    private burst: number,
  ) {
    this.#tokens = Math.max(1, burst);
    this.#last = clock.now();
  }

  /** Changes the rate from now on; the tokens held are kept, up to the new burst. */
  setRate(qps: number, burst: number): void {
    this.#refill();
    this.qps = qps;
    this.burst = burst;
    this.#tokens = Math.min(this.#tokens, Math.max(1, burst));
  }

  /**
   * Resolves when a token is taken, in arrival order, `background` callers after every other;
   * rejects when `signal` aborts first.
   */
  wait(signal?: AbortSignal, opts: { background?: boolean } = {}): Promise<void> {
    if (this.qps <= 0) return Promise.resolve();
    if (signal?.aborted) return Promise.reject(signal.reason);
    const queue = opts.background ? this.#queues.background : this.#queues.foreground;
    return new Promise<void>((resolve, reject) => {
      const onAbort = () => {
        // A caller that gave up must not stall the ones behind it.
        const i = queue.indexOf(waiter);
        if (i >= 0) queue.splice(i, 1);
        reject(signal!.reason);
      };
      const waiter: Waiter = { resolve, reject, signal, onAbort: signal ? onAbort : undefined };
      signal?.addEventListener("abort", onAbort, { once: true });
      queue.push(waiter);
      void this.#pump();
    });
  }

  /** Hands out tokens while anyone waits, sleeping until the next one is due. */
  async #pump(): Promise<void> {
    if (this.#pumping) return;
    this.#pumping = true;
    try {
      for (;;) {
        const { foreground, background } = this.#queues;
        const queue = foreground.length > 0 ? foreground : background;
        if (queue.length === 0) return;
        this.#refill();
        if (this.#tokens < 1) {
          // Who is first is decided again after the sleep: a foreground caller may come.
          await this.clock.sleep(((1 - this.#tokens) / this.qps) * 1000);
          continue;
        }
        this.#tokens -= 1;
        const waiter = queue.shift()!;
        if (waiter.onAbort) waiter.signal?.removeEventListener("abort", waiter.onAbort);
        waiter.resolve();
      }
    } finally {
      this.#pumping = false;
    }
  }

  #refill(): void {
    const now = this.clock.now();
    this.#tokens = Math.min(
      Math.max(1, this.burst),
      this.#tokens + ((now - this.#last) / 1000) * this.qps,
    );
    this.#last = now;
  }
}
