/**
 * @module
 * The kubelet's view of its own Node: list, then watch `metadata.name=<node>` from the list's
 * resourceVersion, list again when the watch ends or the version is too old (410 Gone), with
 * backoff while the apiserver fails. Corresponds to the node informer upstream's kubelet builds
 * with a field selector on its own name (NewMainKubelet's nodeLister).
 */

import type { V1Node, V1NodeList } from "@kubernetes/client-node";
import type { Clock } from "./clock.ts";
import type { Logger } from "./klog.ts";
import type { KubeClient } from "./kube_client.ts";

/** What the informer needs. */
export interface NodeInformerOptions {
  readonly client: KubeClient;
  readonly nodeName: string;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Called with the Node after each change, or undefined when it was deleted. */
  readonly onChange?: (node: V1Node | undefined) => void;
}

/** Keeps the latest copy of this node's Node object. */
export class NodeInformer {
  readonly #o: NodeInformerOptions;
  #node: V1Node | undefined;
  #synced = false;

  constructor(opts: NodeInformerOptions) {
    this.#o = opts;
  }

  /** The Node as last seen; undefined before the first list or after a deletion. */
  get node(): V1Node | undefined {
    return this.#node;
  }

  /** True once the first list has completed. */
  get hasSynced(): boolean {
    return this.#synced;
  }

  #set(node: V1Node | undefined): void {
    this.#node = node;
    this.#o.onChange?.(node);
  }

  /** Lists and watches until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    const { client, nodeName, clock, logger } = this.#o;
    const fieldSelector = `metadata.name=${nodeName}`;
    let delay = 200;
    let failing = false;
    while (!signal.aborted) {
      try {
        const list = await client.request<V1NodeList>("GET", "/api/v1/nodes", {
          query: { fieldSelector },
          signal,
        });
        this.#set(list.items[0]);
        this.#synced = true;
        if (failing) logger.info("Node informer synced again", { node: nodeName });
        failing = false;
        delay = 200;
        for await (
          const ev of client.watch<V1Node>("/api/v1/nodes", {
            resourceVersion: list.metadata?.resourceVersion,
            fieldSelector,
            timeoutSeconds: 300 + Math.floor(Math.random() * 300),
            signal,
          })
        ) {
          if (ev.type === "ADDED" || ev.type === "MODIFIED") this.#set(ev.object);
          else if (ev.type === "DELETED") this.#set(undefined);
          else if (ev.type === "ERROR") break; // e.g. 410 Gone: list again
        }
      } catch (e) {
        if (signal.aborted) break;
        if (!failing) {
          logger.error(e, "Node informer cannot list or watch its Node; retrying", {
            node: nodeName,
          });
        }
        failing = true;
        await clock.sleep(delay, signal).catch(() => {});
        delay = Math.min(delay * 2, 5_000);
      }
    }
  }
}
