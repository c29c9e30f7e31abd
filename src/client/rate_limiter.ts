/**
 * @module
 * A token bucket that paces requests to the apiserver: `qps` tokens a second, at most `burst`
 * held, callers served in arrival order. Corresponds to client-go's
 * `flowcontrol.NewTokenBucketRateLimiter`, which the kubelet's clients use with kubeAPIQPS /
 * kubeAPIBurst and eventRecordQPS / eventBurst.
 */

import type { Clock } from "../util/clock.ts";

/** Paces callers; `qps <= 0` means no limit (client-go's QPS -1, as for heartbeats). */
export class TokenBucket {
  #tokens: number;
  #last: number;
  #queue: Promise<void> = Promise.resolve();

  constructor(
    private readonly clock: Clock,
    private qps: number,
    private burst: number,
  ) {
    this.#tokens = Math.max(1, burst);
    this.#last = clock.now();
  }

  /** Whether callers can be made to wait (client-go has a rate limiter only then). */
  get limited(): boolean {
    return this.qps > 0;
  }

  /** Changes the rate from now on; the tokens held are kept, up to the new burst. */
  setRate(qps: number, burst: number): void {
    this.#refill();
    this.qps = qps;
    this.burst = burst;
    this.#tokens = Math.min(this.#tokens, Math.max(1, burst));
  }

  /** Resolves when a token is taken; rejects when `signal` aborts first. */
  wait(signal?: AbortSignal): Promise<void> {
    if (this.qps <= 0) return Promise.resolve();
    const turn = this.#queue.then(() => this.#take(signal));
    // A caller that gave up must not stall the ones behind it.
    this.#queue = turn.catch(() => {});
    return turn;
  }

  /**
   * Takes a token if one is there now, never waiting (golang.org/x/time/rate Limiter.Allow, as
   * the kubelet's gRPC rate limiters use it); always true without a limit.
   */
  tryTake(): boolean {
    if (this.qps <= 0) return true;
    this.#refill();
    if (this.#tokens < 1) return false;
    this.#tokens -= 1;
    return true;
  }

  async #take(signal?: AbortSignal): Promise<void> {
    signal?.throwIfAborted();
    this.#refill();
    if (this.#tokens < 1) {
      await this.clock.sleep(((1 - this.#tokens) / this.qps) * 1000, signal);
      this.#refill();
    }
    this.#tokens -= 1;
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
