/**
 * @module
 * The kubelet's own OOM score adjustment: `oomScoreAdj` (default -999) written to
 * `/proc/self/oom_score_adj` at start, so that the kernel's OOM killer picks the kubelet last.
 * A write that fails is tried once more after 100 ms; a missing file is NotFound at once. The
 * caller logs a failure and goes on, as upstream's RunKubelet does ("Failed to ApplyOOMScoreAdj").
 * Corresponds to upstream `pkg/util/oom/oom_linux.go` (ApplyOOMScoreAdj for pid 0).
 */

import { type Clock, realClock } from "./clock.ts";

/** Options of {@link applyOOMScoreAdj}. */
export interface OOMScoreAdjOptions {
  /** @default "/proc/self/oom_score_adj" */
  readonly path?: string;
  /** Paces the retry. @default realClock */
  readonly clock?: Clock;
}

/** The path the kubelet writes its own score to. */
const OWN_OOM_SCORE_ADJ = "/proc/self/oom_score_adj";

/** Writes `value` to the process's oom_score_adj; rejects with the last error. */
export async function applyOOMScoreAdj(
  value: number,
  opts: OOMScoreAdjOptions = {},
): Promise<void> {
  const path = opts.path ?? OWN_OOM_SCORE_ADJ;
  const clock = opts.clock ?? realClock;
  let last: unknown;
  for (let i = 0; i < 2; i++) {
    try {
      await Deno.writeTextFile(path, String(Math.trunc(value)));
      return;
    } catch (e) {
      if (e instanceof Deno.errors.NotFound) throw e;
      last = e;
      await clock.sleep(100);
    }
  }
  throw last;
}
