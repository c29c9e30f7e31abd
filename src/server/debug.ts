/**
 * @module
 * `/debug/pods/{namespace}/{name}` on the authenticated kubelet API: the pod's last start as
 * the kubelet recorded it (seen, admitted, volumes ready, sandbox created, each container's
 * image, creation and start, running, first ready), each step with its time (RFC 3339, ms)
 * and the time since the first step, as JSON; 404 for a pod the kubelet does not know. Like
 * every `/debug/` path it is authorized as the `proxy` subresource of the node, and with
 * enableDebuggingHandlers off it answers 405 as upstream's disabled debugging handlers do.
 * Loaded only when the server starts. No upstream counterpart: upstream exposes only the
 * resulting histograms.
 */

import { httpError, type Route, writeJson } from "./server.ts";
import { type PodTimeline, timelineJson } from "../pod_startup_latency_tracker.ts";

/** What {@link debugPodRoutes} needs. */
export interface DebugPodRoutesOptions {
  /** The pod's timeline, undefined when the kubelet has none for it. */
  readonly timeline: (namespace: string, name: string) => PodTimeline | undefined;
  /** KubeletConfiguration enableDebuggingHandlers. @default true */
  readonly enabled?: boolean;
}

/** The /debug/pods route. */
export function debugPodRoutes(opts: DebugPodRoutesOptions): Route[] {
  return [{
    pattern: "/debug/pods/:namespace/:name",
    methods: ["GET"],
    handler: ({ params }, res) => {
      if (opts.enabled === false) {
        return httpError(res, 405, "Debug endpoints are disabled.");
      }
      const namespace = params.namespace ?? "";
      const name = params.name ?? "";
      const t = opts.timeline(namespace, name);
      if (!t) {
        return httpError(res, 404, `pod ${namespace}/${name} is not known to this kubelet`);
      }
      writeJson(res, 200, timelineJson(t));
    },
  }];
}
