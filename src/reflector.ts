/**
 * @module
 * List-then-watch of one kind of object with a field selector, kept in a store keyed by UID:
 * list, watch from the list's resourceVersion, apply each event, list again when the watch ends
 * or reports an error such as 410 Gone, back off while the apiserver fails (logging once per
 * change of state). Every change hands the whole set to `onChange`, which is what upstream's
 * UndeltaStore gives the apiserver pod source. Corresponds to client-go's Reflector.
 */

import type { Clock } from "./clock.ts";
import type { Logger } from "./klog.ts";
import type { KubeClient } from "./kube_client.ts";

interface Meta {
  metadata?: { uid?: string; name?: string; namespace?: string; resourceVersion?: string };
}

/** What a reflector needs. */
export interface ReflectorOptions<T extends Meta> {
  /** The reflector lists with `request` and watches with `watch`. */
  readonly client: Pick<KubeClient, "request" | "watch">;
  /** Collection path, e.g. "/api/v1/pods". */
  readonly path: string;
  readonly fieldSelector?: string;
  readonly clock: Clock;
  readonly logger: Logger;
  /** For log lines, e.g. "pods bound to node-a". */
  readonly what: string;
  /** Called with every object after each change. */
  readonly onChange: (items: T[]) => void;
}

/** Keeps a store of the selected objects in step with the apiserver. */
export class Reflector<T extends Meta> {
  readonly #o: ReflectorOptions<T>;
  readonly #store = new Map<string, T>();
  #synced = false;

  constructor(opts: ReflectorOptions<T>) {
    this.#o = opts;
  }

  /** True once the first list has completed. */
  get hasSynced(): boolean {
    return this.#synced;
  }

  /** The objects as last seen. */
  items(): T[] {
    return [...this.#store.values()];
  }

  #key(o: T): string {
    return o.metadata?.uid ?? `${o.metadata?.namespace}/${o.metadata?.name}`;
  }

  /** Lists and watches until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    const { client, path, fieldSelector, clock, logger, what } = this.#o;
    let delay = 200;
    let failing = false;
    while (!signal.aborted) {
      try {
        const list = await client.request<{ metadata?: { resourceVersion?: string }; items: T[] }>(
          "GET",
          path,
          {
            query: { fieldSelector },
            signal,
          },
        );
        this.#store.clear();
        for (const o of list.items) this.#store.set(this.#key(o), o);
        this.#synced = true;
        this.#o.onChange(this.items());
        if (failing) logger.info("Listing and watching again", { what });
        failing = false;
        delay = 200;
        for await (
          const ev of client.watch<T>(path, {
            resourceVersion: list.metadata?.resourceVersion,
            fieldSelector,
            timeoutSeconds: 300 + Math.floor(Math.random() * 300),
            signal,
          })
        ) {
          if (ev.type === "ADDED" || ev.type === "MODIFIED") {
            this.#store.set(this.#key(ev.object), ev.object);
          } else if (ev.type === "DELETED") this.#store.delete(this.#key(ev.object));
          else if (ev.type === "BOOKMARK") continue;
          else break; // ERROR, e.g. 410 Gone: list again
          this.#o.onChange(this.items());
        }
      } catch (e) {
        if (signal.aborted) break;
        if (!failing) logger.error(e, "Cannot list or watch; retrying", { what });
        failing = true;
        await clock.sleep(delay, signal).catch(() => {});
        delay = Math.min(delay * 2, 5_000);
      }
    }
  }
}
