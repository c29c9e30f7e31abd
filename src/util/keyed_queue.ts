/**
 * @module
 * Calls run one at a time per key, in arrival order, different keys concurrently; a failed call
 * does not stop the ones after it. The volume manager serializes the calls of one pod with one,
 * and the CSI plugin the operations of one volume (upstream's nestedpendingoperations, which
 * refuses a second operation on a volume while one runs, where this queues it).
 */

/** See the module documentation. */
export class KeyedQueue {
  /** The tail of each key's queue, while calls are queued or running. */
  readonly #tails = new Map<string, Promise<void>>();

  /** Runs `fn` after every earlier call for `key` has settled; its result or failure. */
  run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const result = (this.#tails.get(key) ?? Promise.resolve()).then(fn);
    const tail = result.then(() => {}, () => {});
    this.#tails.set(key, tail);
    void tail.then(() => {
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
    });
    return result;
  }

  /** How many keys have calls queued or running. */
  get size(): number {
    return this.#tails.size;
  }
}
