/**
 * @module
 * List-then-watch of one kind of object with a field selector, kept in a store keyed by UID:
 * list, watch from the list's resourceVersion, apply each event, list again when the watch ends
 * or reports an error such as 410 Gone (after client-go's backoff, 800 ms doubling to 30 s with
 * jitter, reset after 2 min without one, so an apiserver that keeps expiring watches does not
 * get a list in a tight loop), back off while the apiserver fails (logging once per change of
 * state). Every change hands the whole set to `onChange`, which is what upstream's
 * UndeltaStore gives the apiserver pod source, unless `onEvent` takes the watch's changes one
 * by one (then only lists go to `onChange`). Corresponds to client-go's Reflector.
 */

import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
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
  /** Called with every object after each list, and after each watch event without `onEvent`. */
  readonly onChange: (items: T[]) => void;
  /**
   * Called with each watch event's object instead of handing the whole set to `onChange`,
   * for consumers that merge changes one at a time. @default none
   */
  readonly onEvent?: (type: "ADDED" | "MODIFIED" | "DELETED", object: T) => void;
  /** Jitter source, in [0, 1). @default Math.random */
  readonly random?: () => number;
}

/** client-go's reflector backoff after a failed watch (NewExponentialBackoffManager's values). */
export const WATCH_BACKOFF_INITIAL_MS = 800;
/** The cap of that backoff. */
export const WATCH_BACKOFF_MAX_MS = 30_000;
/** A backoff this long after the previous one starts again from the initial delay. */
export const WATCH_BACKOFF_RESET_MS = 120_000;

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
    let watchDelay = 0;
    let lastWatchBackoff = -Infinity;
    while (!signal.aborted) {
      let watchError: unknown;
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
          else { // ERROR, e.g. 410 Gone: list again, after the backoff
            watchError = ev.object;
            break;
          }
          if (this.#o.onEvent) this.#o.onEvent(ev.type, ev.object);
          else this.#o.onChange(this.items());
        }
      } catch (e) {
        if (signal.aborted) break;
        if (!failing) logger.error(e, "Cannot list or watch; retrying", { what });
        failing = true;
        await clock.sleep(delay, signal).catch(() => {});
        delay = Math.min(delay * 2, 5_000);
        continue;
      }
      if (watchError !== undefined && !signal.aborted) {
        logger.v(4).info("Watch closed", { what, err: statusMessage(watchError) });
        const now = clock.now();
        watchDelay = now - lastWatchBackoff > WATCH_BACKOFF_RESET_MS
          ? WATCH_BACKOFF_INITIAL_MS
          : Math.min(watchDelay * 2, WATCH_BACKOFF_MAX_MS);
        lastWatchBackoff = now;
        const jitter = 1 + (this.#o.random ?? Math.random)();
        await clock.sleep(Math.round(watchDelay * jitter), signal).catch(() => {});
      }
    }
  }
}

/** The message of a watch ERROR event's Status, or the object as JSON. */
function statusMessage(o: unknown): string {
  const m = (o as { message?: unknown } | null)?.message;
  return typeof m === "string" ? m : JSON.stringify(o);
}
