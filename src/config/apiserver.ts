/**
 * @module
 * The apiserver pod source: every pod whose `spec.nodeName` is this node, listed and watched
 * across namespaces, handed to PodConfig as a whole set (SET) after each list and as single
 * changes after each watch event (upstream hands the whole set after every event, which costs
 * O(pods) per event). Corresponds to upstream `pkg/kubelet/config/apiserver.go`
 * (NewSourceApiserver).
 */

import type { V1Pod } from "@kubernetes/client-node";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import type { KubeClient } from "../client/kube_client.ts";
import { Reflector } from "../client/reflector.ts";

/** What the source needs. */
export interface ApiserverSourceOptions {
  readonly client: KubeClient;
  readonly nodeName: string;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Receives the node's whole set of pods after each list. */
  readonly onUpdate: (pods: V1Pod[]) => void;
  /** Receives each watched change of one pod. */
  readonly onEvent: (type: "ADDED" | "MODIFIED" | "DELETED", pod: V1Pod) => void;
}

/** Builds the source; call `run(signal)` to start it. */
export function newSourceApiserver(opts: ApiserverSourceOptions): Reflector<V1Pod> {
  return new Reflector<V1Pod>({
    client: opts.client,
    path: "/api/v1/pods",
    fieldSelector: `spec.nodeName=${opts.nodeName}`,
    clock: opts.clock,
    logger: opts.logger,
    what: `pods bound to ${opts.nodeName}`,
    onChange: opts.onUpdate,
    onEvent: opts.onEvent,
  });
}
