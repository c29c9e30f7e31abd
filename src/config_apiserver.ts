/**
 * @module
 * The apiserver pod source: every pod whose `spec.nodeName` is this node, listed and watched
 * across namespaces, handed to PodConfig as a whole set (SET) after each change. Corresponds to
 * upstream `pkg/kubelet/config/apiserver.go` (NewSourceApiserver).
 */

import type { V1Pod } from "@kubernetes/client-node";
import type { Clock } from "./clock.ts";
import type { Logger } from "./klog.ts";
import type { KubeClient } from "./kube_client.ts";
import { Reflector } from "./reflector.ts";

/** What the source needs. */
export interface ApiserverSourceOptions {
  readonly client: KubeClient;
  readonly nodeName: string;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Receives the node's whole set of pods after each change. */
  readonly onUpdate: (pods: V1Pod[]) => void;
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
  });
}
