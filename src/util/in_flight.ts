/**
 * @module
 * A count of operations in flight, and a wait for the moment none is. The kubelet counts the
 * CRI calls that start pods with one (RunPodSandbox, CreateContainer, StartContainer; see
 * `kuberuntime/instrumented_services.ts`), and its event writer waits on it before each event, a bounded
 * time, so that events do not take CPU from pods being started on a busy node
 * (`client/event_recorder.ts`). This agent's own; upstream has no such count.
 */

/** Whether operations are in flight, and a wait until none is. */
export interface Activity {
  /** True while at least one operation is in flight. */
  readonly busy: boolean;
  /** Resolves once no operation is in flight (at once when none is), or when `signal` aborts. */
  idle(signal?: AbortSignal): Promise<void>;
}

/** Operations in flight, counted; see the module documentation. */
export class InFlight implements Activity {
  #count = 0;
  readonly #waiters = new Set<() => void>();

  get busy(): boolean {
    return this.#count > 0;
  }

  /** Operations in flight now. */
  get count(): number {
    return this.#count;
  }

  /** Runs `op`, counted as in flight until it settles; its result or error is passed on. */
  async track<T>(op: () => Promise<T>): Promise<T> {
    this.#count++;
    try {
      return await op();
    } finally {
      if (--this.#count === 0) {
        for (const wake of [...this.#waiters]) wake();
      }
    }
  }

  idle(signal?: AbortSignal): Promise<void> {
    if (this.#count === 0 || signal?.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const wake = () => {
        this.#waiters.delete(wake);
        signal?.removeEventListener("abort", wake);
        resolve();
      };
      this.#waiters.add(wake);
      signal?.addEventListener("abort", wake, { once: true });
    });
  }
}
