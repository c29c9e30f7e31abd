/**
 * @module
 * The kubelet's view of its own Node: a {@link Reflector} over `metadata.name=<node>`.
 * Corresponds to the node informer upstream's kubelet builds with a field selector on its own
 * name (NewMainKubelet's nodeLister).
 */

import type { V1Node } from "@kubernetes/client-node";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import type { KubeClient } from "./kube_client.ts";
import { Reflector } from "./reflector.ts";

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
  readonly #reflector: Reflector<V1Node>;
  #node: V1Node | undefined;

  constructor(opts: NodeInformerOptions) {
    this.#reflector = new Reflector<V1Node>({
      client: opts.client,
      path: "/api/v1/nodes",
      fieldSelector: `metadata.name=${opts.nodeName}`,
      clock: opts.clock,
      logger: opts.logger,
      what: `node ${opts.nodeName}`,
      onChange: (items) => {
        this.#node = items[0];
        opts.onChange?.(this.#node);
      },
    });
  }

  /** The Node as last seen; undefined before the first list or after a deletion. */
  get node(): V1Node | undefined {
    return this.#node;
  }

  /** True once the first list has completed. */
  get hasSynced(): boolean {
    return this.#reflector.hasSynced;
  }

  /** Lists and watches until `signal` aborts. */
  run(signal: AbortSignal): Promise<void> {
    return this.#reflector.run(signal);
  }
}
