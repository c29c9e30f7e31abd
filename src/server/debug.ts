/**
 * @module
 * `/debug/pods/{namespace}/{name}` on the authenticated kubelet API: the pod's last start as
 * the kubelet recorded it (seen, admitted, volumes ready, sandbox created, each container's
 * image, creation and start, running, the first status write accepted with every container
 * running, first ready), each step with its time (RFC 3339, ms) and the time since the first
 * step, as JSON; 404 for a pod the kubelet does not know. Like every `/debug/` path it is
 * authorized as the `proxy` subresource of the node, and with enableDebuggingHandlers off it
 * answers 405 as upstream's disabled debugging handlers do.
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

/** What {@link debugFlagsRoutes} needs. */
export interface DebugFlagsRoutesOptions {
  /** KubeletConfiguration enableDebuggingHandlers. @default true */
  readonly enabled?: boolean;
  /** KubeletConfiguration enableDebugFlagsHandler. @default true */
  readonly flagsEnabled?: boolean;
  /** Sets the log verbosity (`-v`), leaving `-vmodule` as it is. */
  readonly setVerbosity: (v: number) => void;
}

const UINT32_MAX = 2 ** 32 - 1;
const INT32_MAX = 2 ** 31 - 1;

/** A plain-text answer as apiserver's writePlainText writes it (the text, then a newline). */
function plain(res: Parameters<Route["handler"] & object>[1], status: number, text: string) {
  res.writeHead(status, { "content-type": "text/plain", "x-content-type-options": "nosniff" });
  res.end(`${text}\n`);
}

/**
 * `PUT /debug/flags/v` with the new verbosity as its body (upstream InstallDebugFlagsHandler and
 * component-base's GlogSetter): "successfully set klog.logging.verbosity to <v>"; 400 with Go's
 * parse error for a body that is not a whole number, 406 for another method, 405 when
 * enableDebugFlagsHandler (or enableDebuggingHandlers) is off.
 */
export function debugFlagsRoutes(opts: DebugFlagsRoutesOptions): Route[] {
  return [{
    pattern: "/debug/flags/v",
    handler: async ({ req }, res) => {
      if (opts.enabled === false) return httpError(res, 405, "Debug endpoints are disabled.");
      if (opts.flagsEnabled === false) return httpError(res, 405, "flags endpoint is disabled.");
      if (req.method !== "PUT") return plain(res, 406, "unsupported http method");
      let body = "";
      const decoder = new TextDecoder();
      for await (const chunk of req) body += decoder.decode(chunk as Uint8Array, { stream: true });
      body += decoder.decode();
      if (!/^\d+$/.test(body)) {
        return plain(
          res,
          400,
          `strconv.ParseUint: parsing ${JSON.stringify(body)}: invalid syntax`,
        );
      }
      const v = Number(body);
      if (v > UINT32_MAX) {
        return plain(
          res,
          400,
          `strconv.ParseUint: parsing ${JSON.stringify(body)}: value out of range`,
        );
      }
      if (v > INT32_MAX) {
        // klog's Level.Set parses an int32.
        return plain(
          res,
          400,
          `failed set klog.logging.verbosity ${body}: strconv.ParseInt: parsing ${
            JSON.stringify(body)
          }: value out of range`,
        );
      }
      opts.setVerbosity(v);
      plain(res, 200, `successfully set klog.logging.verbosity to ${body}`);
    },
  }];
}
