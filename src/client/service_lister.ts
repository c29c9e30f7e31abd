/**
 * @module
 * The kubelet's cache of cluster Services, read when a container's environment gets its service
 * link variables: a {@link Reflector} over `/api/v1/services` in every namespace with the field
 * selector `spec.clusterIP!=None`, as upstream leaves headless services out of this informer
 * (issues.k8s.io/122394). Each Service is cut down to what the variables need (name, namespace,
 * uid, spec.clusterIP, each port's name, port and protocol) before the reflector stores it, so a
 * cluster's worth of Services costs a few hundred bytes each. Talks to the apiserver through
 * `kube_client.ts`; read by `kubelet_env.ts`. Corresponds to the serviceLister and
 * serviceHasSynced that upstream's NewMainKubelet builds (`pkg/kubelet/kubelet.go`).
 */

import type { V1Service, V1ServicePort } from "@kubernetes/client-node";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import type { KubeClient, RequestOptions, WatchEvent } from "./kube_client.ts";
import { Reflector } from "./reflector.ts";

/** The calls of {@link KubeClient} a ServiceLister makes. */
export type ServiceListerClient = Pick<KubeClient, "request" | "watch">;

/** What a {@link ServiceLister} needs. */
export interface ServiceListerOptions {
  readonly client: ServiceListerClient;
  /** For the reflector's back-off. */
  readonly clock: Clock;
  readonly logger: Logger;
}

/** The field selector upstream's kubelet puts on its Service informer. */
export const SERVICE_FIELD_SELECTOR = "spec.clusterIP!=None";

/** Keeps the Services of every namespace that have a cluster IP, cut down to what env needs. */
export class ServiceLister {
  readonly #reflector: Reflector<V1Service>;
  #items: readonly V1Service[] = [];
  #byNamespace: Map<string, V1Service[]> | undefined;

  constructor(opts: ServiceListerOptions) {
    this.#reflector = new Reflector<V1Service>({
      client: trimmingClient(opts.client),
      path: "/api/v1/services",
      fieldSelector: SERVICE_FIELD_SELECTOR,
      clock: opts.clock,
      logger: opts.logger,
      what: "services",
      onChange: (items) => {
        this.#items = items;
        this.#byNamespace = undefined;
      },
    });
  }

  /** Lists and watches until `signal` aborts. */
  run(signal: AbortSignal): Promise<void> {
    return this.#reflector.run(signal);
  }

  /** True once the first list has completed (upstream's serviceHasSynced). */
  hasSynced(): boolean {
    return this.#reflector.hasSynced;
  }

  /** The Services of `namespace`, or of every namespace; frozen, trimmed copies. */
  list(namespace?: string): V1Service[] {
    if (namespace === undefined) return [...this.#items];
    if (this.#byNamespace === undefined) {
      // Rebuilt on the first read after a change: a burst of watch events costs one pass.
      const index = new Map<string, V1Service[]>();
      for (const s of this.#items) {
        const ns = s.metadata?.namespace ?? "";
        const list = index.get(ns);
        if (list) list.push(s);
        else index.set(ns, [s]);
      }
      this.#byNamespace = index;
    }
    return [...this.#byNamespace.get(namespace) ?? []];
  }
}

/** The Service with only the fields service link variables read, frozen. */
export function trimService(s: V1Service): V1Service {
  const m = s.metadata ?? {};
  const ports = (s.spec?.ports ?? []).map((p): V1ServicePort =>
    Object.freeze({ name: p.name, port: p.port, protocol: p.protocol })
  );
  return Object.freeze({
    metadata: Object.freeze({ name: m.name, namespace: m.namespace, uid: m.uid }),
    spec: Object.freeze({
      clusterIP: s.spec?.clusterIP,
      ports: Object.freeze(ports) as V1ServicePort[],
    }),
  });
}

interface ServiceList {
  metadata?: { resourceVersion?: string };
  items?: V1Service[];
}

/** A client whose lists and watch events carry trimmed Services, so the store never holds more. */
function trimmingClient(client: ServiceListerClient): ServiceListerClient {
  async function* watch<T>(
    path: string,
    opts?: Parameters<KubeClient["watch"]>[1],
  ): AsyncGenerator<WatchEvent<T>> {
    for await (const ev of client.watch<V1Service>(path, opts)) {
      // ERROR carries a Status and BOOKMARK only a resourceVersion: passed on as they are.
      const keep = ev.type === "ERROR" || ev.type === "BOOKMARK";
      yield { type: ev.type, object: (keep ? ev.object : trimService(ev.object)) as T };
    }
  }
  return {
    async request<T>(method: string, path: string, opts?: RequestOptions): Promise<T> {
      const list = await client.request<ServiceList>(method, path, opts);
      return {
        metadata: { resourceVersion: list.metadata?.resourceVersion },
        items: (list.items ?? []).map(trimService),
      } as T;
    },
    watch,
  };
}
