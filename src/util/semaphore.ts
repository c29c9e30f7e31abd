/**
 * @module
 * A counting semaphore: at most `limit` holders at once, the rest served in arrival order. The
 * kubelet bounds image pulls with one (upstream's `serializeImagePulls` /
 * `maxParallelImagePulls`, `pkg/kubelet/images/puller.go` uses a channel of that size), the
 * PLEG its status reads of changed pods, and, as this agent's own addition, RunPodSandbox calls
 * (`--max-parallel-sandbox-starts`).
 */

/** Admits at most `limit` holders at once, in arrival order. */
export class Semaphore {
  #free: number;
  readonly #waiting: Array<() => void> = [];

  constructor(readonly limit: number) {
    if (!Number.isInteger(limit) || limit < 1) {
      throw new RangeError(`a semaphore's limit must be an integer of at least 1: got ${limit}`);
    }
    this.#free = limit;
  }

  /** Holders waiting for a slot. */
  get waiting(): number {
    return this.#waiting.length;
  }

  /**
   * Runs `fn` once a slot is free and frees it when `fn` settles. A signal that aborts while
   * waiting rejects with its reason and gives up the place in the queue.
   */
  async run<T>(fn: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    signal?.throwIfAborted();
    if (this.#free > 0) this.#free--;
    else await this.#wait(signal);
    try {
      return await fn();
    } finally {
      const next = this.#waiting.shift();
      if (next) next();
      else this.#free++;
    }
  }

  #wait(signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        const i = this.#waiting.indexOf(wake);
        if (i >= 0) this.#waiting.splice(i, 1);
        reject(signal?.reason);
      };
      const wake = () => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#waiting.push(wake);
    });
  }
}
