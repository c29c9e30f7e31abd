/**
 * @module
 * apimachinery's `wait.ExponentialBackoff`: a condition tried up to `steps` times, sleeping
 * `durationMs` (grown by `factor`, each sleep stretched by up to `jitter` of itself) between
 * tries, over an injected clock. Corresponds to upstream `k8s.io/apimachinery/pkg/util/wait`
 * (Backoff, ExponentialBackoff, ErrWaitTimeout).
 */

import type { Clock } from "./clock.ts";

/** upstream wait.Backoff (without Cap). */
export interface Backoff {
  readonly steps: number;
  readonly durationMs: number;
  readonly factor: number;
  readonly jitter: number;
}

/** The condition never held within the steps (upstream ErrWaitTimeout). */
export class WaitTimeoutError extends Error {
  override name = "WaitTimeoutError";
  constructor() {
    super("timed out waiting for the condition");
  }
}

/** Options of {@link exponentialBackoff}. */
export interface ExponentialBackoffOptions {
  readonly clock: Clock;
  readonly signal?: AbortSignal;
  /** A number in [0, 1) for each sleep's jitter. @default Math.random */
  readonly random?: () => number;
}

/**
 * Tries `condition` until it returns true; rejects with {@link WaitTimeoutError} after
 * `backoff.steps` tries, or with what the condition throws (which stops the retries, as an error
 * returned from upstream's condition does).
 */
export async function exponentialBackoff(
  backoff: Backoff,
  condition: () => Promise<boolean>,
  opts: ExponentialBackoffOptions,
): Promise<void> {
  const random = opts.random ?? Math.random;
  let duration = backoff.durationMs;
  for (let step = 1;; step++) {
    opts.signal?.throwIfAborted();
    if (await condition()) return;
    if (step >= backoff.steps) throw new WaitTimeoutError();
    const sleep = backoff.jitter > 0 ? duration + random() * backoff.jitter * duration : duration;
    await opts.clock.sleep(sleep, opts.signal);
    duration *= backoff.factor;
  }
}
