/**
 * @module
 * The kubelet's cache of RuntimeClasses (`node.k8s.io/v1`, cluster-scoped; the node authorizer
 * lets a node list and watch them): a {@link Reflector} over
 * `/apis/node.k8s.io/v1/runtimeclasses`, and the lookup of a pod's `spec.runtimeClassName` to
 * the CRI runtime handler its sandbox runs with. No class name is the default handler ""; a name
 * the cache does not hold fails with the lister's NotFound text (`runtimeclass.node.k8s.io
 * "<name>" not found`), before the first list too, as upstream does not wait for its informer:
 * the pod's next sync tries again. Read by `kuberuntime/kuberuntime_manager.ts` before
 * RunPodSandbox; built and run by `kubelet_pod_lifecycle.ts` when there is an apiserver.
 * Corresponds to upstream `pkg/kubelet/runtimeclass/runtimeclass_manager.go` (Manager,
 * LookupRuntimeHandler) and client-go's RuntimeClass lister.
 */

import type { V1RuntimeClass } from "@kubernetes/client-node";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import type { KubeClient } from "../client/kube_client.ts";
import { Reflector } from "../client/reflector.ts";

/** The collection the manager lists and watches. */
export const RUNTIME_CLASSES_PATH = "/apis/node.k8s.io/v1/runtimeclasses";

/** The calls of {@link KubeClient} a RuntimeClassManager makes. */
export type RuntimeClassClient = Pick<KubeClient, "request" | "watch">;

/** What a {@link RuntimeClassManager} needs. */
export interface RuntimeClassManagerOptions {
  readonly client: RuntimeClassClient;
  /** For the reflector's back-off. */
  readonly clock: Clock;
  readonly logger: Logger;
}

/** The lookup the runtime manager makes (upstream runtimeutil's runtimeHandlerResolver). */
export type RuntimeHandlerLookup = Pick<RuntimeClassManager, "lookupRuntimeHandler">;

/**
 * A RuntimeClass the cache does not hold; the message is the apiserver's NotFound
 * (`runtimeclass.node.k8s.io "<name>" not found`), as upstream's lister returns it.
 */
export class RuntimeClassNotFoundError extends Error {
  override name = "RuntimeClassNotFoundError";
  /** The class the pod names. */
  readonly runtimeClassName: string;
  constructor(runtimeClassName: string) {
    super(`runtimeclass.node.k8s.io ${JSON.stringify(runtimeClassName)} not found`);
    this.runtimeClassName = runtimeClassName;
  }
}

/** Keeps every RuntimeClass and resolves class names to runtime handlers. */
export class RuntimeClassManager {
  readonly #reflector: Reflector<V1RuntimeClass>;
  #handlers: ReadonlyMap<string, string> = new Map();

  constructor(opts: RuntimeClassManagerOptions) {
    this.#reflector = new Reflector<V1RuntimeClass>({
      client: opts.client,
      path: RUNTIME_CLASSES_PATH,
      clock: opts.clock,
      logger: opts.logger,
      what: "runtimeclasses",
      onChange: (items) => {
        // Only the handler is read; the classes are a handful of small objects.
        this.#handlers = new Map(items.map((rc) => [rc.metadata?.name ?? "", rc.handler]));
      },
    });
  }

  /** Lists and watches until `signal` aborts (upstream Start). */
  run(signal: AbortSignal): Promise<void> {
    return this.#reflector.run(signal);
  }

  /** True once the first list has completed. */
  hasSynced(): boolean {
    return this.#reflector.hasSynced;
  }

  /**
   * The runtime handler of the named RuntimeClass, "" for no name (the default class).
   * Throws {@link RuntimeClassNotFoundError} for a class the cache does not hold.
   */
  lookupRuntimeHandler(runtimeClassName: string | null | undefined): string {
    if (runtimeClassName === undefined || runtimeClassName === null || runtimeClassName === "") {
      return "";
    }
    const handler = this.#handlers.get(runtimeClassName);
    if (handler === undefined) throw new RuntimeClassNotFoundError(runtimeClassName);
    return handler;
  }
}
