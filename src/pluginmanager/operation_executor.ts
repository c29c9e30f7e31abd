/**
 * @module
 * Runs the plugin manager's register and unregister operations, at most one at a time per
 * socket path, and after a failure refuses a new one on that path until an exponential backoff
 * (0.5 s, doubling, at most 2m2s) has passed; a success forgets the backoff. Failures are logged
 * here, with when the next try is allowed. Corresponds to upstream's
 * `pkg/kubelet/pluginmanager/operationexecutor/operation_executor.go` with the
 * `pkg/util/goroutinemap` (exponentialBackOffOnError) it runs them in.
 */

import type { Logger } from "../klog/klog.ts";
import { formatDuration } from "../util/duration.ts";
import { errorText } from "../util/errors.ts";
import { goTimeString } from "../klog/encode.ts";

/** Upstream initialDurationBeforeRetry. */
export const INITIAL_DURATION_BEFORE_RETRY_MS = 500;
/** Upstream maxDurationBeforeRetry: 2m2s, recognisable in logs. */
export const MAX_DURATION_BEFORE_RETRY_MS = 122_000;

/**
 * What {@link OperationExecutor.run} did: started the operation, or refused it because one is
 * running on that path or the path is backing off (both expected, and not logged, upstream).
 */
export type RunResult = "started" | "pending" | "backoff";

interface Operation {
  pending: boolean;
  lastErrorMs: number;
  durationBeforeRetryMs: number;
  lastError: unknown;
}

/** Settings of an {@link OperationExecutor}. */
export interface OperationExecutorOptions {
  readonly logger: Logger;
  /** Milliseconds since the epoch. @default Date.now */
  readonly now?: () => number;
}

/** One operation at a time per name, with backoff after failures (upstream GoRoutineMap). */
export class OperationExecutor {
  readonly #ops = new Map<string, Operation>();
  readonly #running = new Set<Promise<void>>();
  readonly #logger: Logger;
  readonly #now: () => number;

  constructor(opts: OperationExecutorOptions) {
    this.#logger = opts.logger;
    this.#now = opts.now ?? Date.now;
  }

  /** Starts `op` under `name` unless one is running or `name` is backing off. */
  run(name: string, op: () => Promise<void>): RunResult {
    const existing = this.#ops.get(name);
    if (existing?.pending) return "pending";
    if (existing && this.#now() - existing.lastErrorMs <= existing.durationBeforeRetryMs) {
      return "backoff";
    }
    const state: Operation = existing ?? {
      pending: true,
      lastErrorMs: 0,
      durationBeforeRetryMs: 0,
      lastError: undefined,
    };
    state.pending = true;
    this.#ops.set(name, state);
    const task = (async () => {
      try {
        await op();
        this.#ops.delete(name);
      } catch (e) {
        this.#failed(name, state, e);
      }
    })();
    this.#running.add(task);
    task.finally(() => this.#running.delete(task));
    return "started";
  }

  /** True while an operation runs under `name`. */
  isOperationPending(name: string): boolean {
    return this.#ops.get(name)?.pending ?? false;
  }

  /** Resolves once no operation is running (upstream WaitForCompletion; for tests and shutdown). */
  async waitForCompletion(): Promise<void> {
    while (this.#running.size > 0) await Promise.allSettled([...this.#running]);
  }

  #failed(name: string, state: Operation, e: unknown): void {
    state.durationBeforeRetryMs = state.durationBeforeRetryMs === 0
      ? INITIAL_DURATION_BEFORE_RETRY_MS
      : Math.min(2 * state.durationBeforeRetryMs, MAX_DURATION_BEFORE_RETRY_MS);
    state.lastError = e;
    state.lastErrorMs = this.#now();
    state.pending = false;
    // klog.Errorf in upstream: the whole text is the message.
    this.#logger.error(
      undefined,
      `Operation for ${JSON.stringify(name)} failed. No retries permitted until ${
        goTimeString(new Date(state.lastErrorMs + state.durationBeforeRetryMs))
      } (durationBeforeRetry ${formatDuration(state.durationBeforeRetryMs)}). Error: ${
        errorText(e)
      }`,
    );
  }
}
