/**
 * @module
 * The kubelet API's own endpoints: `/healthz` (with `/healthz/ping`, `/healthz/log`,
 * `/healthz/syncloop`; `?exclude=` and `?verbose` as apiserver's healthz, failure reasons
 * withheld, each check run recorded for the SLIs), `/pods` (the pods the kubelet runs, as a v1
 * PodList), `/runningpods/` (what the runtime runs, as minimal pods), `/configz` (the
 * configuration in effect), `/metrics` (the kubelet's own metrics), `/metrics/probes`,
 * `/metrics/slis` (the health checks' SLI metrics; DELETE resets them), and `/metrics` answering
 * 501 when no metrics are given (tests). `/spec/` is not served, as upstream's v1.36 serves it
 * no more (404). Corresponds
 * to the handlers of upstream `pkg/kubelet/server/server.go` (InstallAuthNotRequiredHandlers,
 * InstallDebuggingHandlers' configz), apiserver's `pkg/server/healthz` and component-base's
 * `metrics/prometheus/slis` routes.
 */

import type { V1Pod } from "@kubernetes/client-node";
import { encodeObject } from "../apis/config_schema.ts";
import type { KubeletConfiguration } from "../apis/config_types.ts";
import { kubeletConfigurationFields } from "../apis/config_types.ts";
import type { PodStatus } from "../container/pod_cache.ts";
import { httpError, type Route, writeJson } from "./server.ts";
import { type HealthCheck, PING, runHealthChecks } from "./healthz.ts";
import { EXPOSITION_CONTENT_TYPE } from "../metrics/prometheus.ts";
import { processStartTimeText, sharedSLIMetrics, type SLIMetrics } from "../metrics/slis.ts";

/** What {@link podRoutes} needs. */
export interface PodRoutesOptions {
  /** The pods the kubelet runs (pod manager), mirror pods excluded. */
  readonly getPods: () => V1Pod[];
  /** The runtime's pods as the PLEG last saw them. */
  readonly getRunningPods: () => PodStatus[];
  readonly config: KubeletConfiguration;
  /**
   * Named health checks after `ping` and `log`: undefined when healthy, else why not
   * (syncloop, ...).
   */
  readonly checks: Readonly<Record<string, () => string | undefined>>;
  /** Where /healthz records its checks and /metrics/slis reads. @default sharedSLIMetrics() */
  readonly slis?: SLIMetrics;
  /** The prober's metrics in Prometheus text, for /metrics/probes. */
  readonly probeMetrics?: () => string;
  /** The kubelet's metrics in Prometheus text, for /metrics. */
  readonly metrics?: () => Promise<string>;
}

/** The not-yet-built endpoints, and the issue area that builds them. */
const NOT_YET: readonly { pattern: string; what: string }[] = [
  { pattern: "/metrics", what: "metrics (/metrics)" },
];

function podList(items: V1Pod[]): unknown {
  return { kind: "PodList", apiVersion: "v1", metadata: {}, items };
}

/** A runtime pod as upstream's /runningpods/ shows it: name, namespace, UID, containers. */
function runningPod(s: PodStatus): V1Pod {
  const names = new Map<string, string>();
  for (const c of s.containerStatuses) {
    const name = c.metadata?.name ?? "";
    if (!names.has(name)) names.set(name, c.image?.image ?? "");
  }
  return {
    metadata: { name: s.name, namespace: s.namespace, uid: s.id },
    spec: { containers: [...names].map(([name, image]) => ({ name, image })) },
  };
}

/** The routes; see the module documentation. */
export function podRoutes(opts: PodRoutesOptions): Route[] {
  const slis = opts.slis ?? sharedSLIMetrics();
  // ping always passes; log too: the logger writes synchronously, so a check that runs at all
  // shows it is not blocked (upstream's log check looks for a klog flush stuck for 2 minutes).
  const checks: HealthCheck[] = [PING, ["log", () => undefined], ...Object.entries(opts.checks)];
  const routes: Route[] = [
    {
      pattern: "/healthz",
      methods: ["GET", "HEAD"],
      handler: (r, res) => {
        const report = runHealthChecks(checks, r.url.searchParams, slis);
        if (!report.healthy) return httpError(res, 500, report.body);
        res.writeHead(200, {
          "content-type": "text/plain; charset=utf-8",
          "x-content-type-options": "nosniff",
        });
        res.end(report.body);
      },
    },
    ...checks.map(([n, check]): Route => ({
      pattern: `/healthz/${n}`,
      methods: ["GET", "HEAD"],
      handler: (_r, res) => {
        const why = check();
        if (why !== undefined) return httpError(res, 500, `internal server error: ${why}`);
        res.writeHead(200, { "content-type": "text/plain; charset=utf-8" });
        res.end("ok");
      },
    })),
    {
      pattern: "/pods",
      methods: ["GET"],
      handler: (_r, res) => writeJson(res, 200, podList(opts.getPods())),
    },
    {
      pattern: "/runningpods",
      methods: ["GET"],
      handler: (_r, res) => writeJson(res, 200, podList(opts.getRunningPods().map(runningPod))),
    },
    {
      pattern: "/configz",
      methods: ["GET"],
      handler: (_r, res) =>
        writeJson(res, 200, {
          kubeletconfig: encodeObject(
            kubeletConfigurationFields,
            opts.config as unknown as Record<string, unknown>,
          ),
        }),
    },
  ];
  const metrics = opts.metrics;
  if (metrics) {
    routes.push({
      pattern: "/metrics",
      methods: ["GET"],
      handler: async (_r, res) => {
        const text = await metrics();
        res.writeHead(200, { "content-type": EXPOSITION_CONTENT_TYPE });
        res.end(text);
      },
    });
  }
  routes.push({
    pattern: "/metrics/slis",
    handler: async (r, res) => {
      if (r.req.method === "DELETE") {
        await slis.reset();
        res.writeHead(200, { "content-type": "text/plain; charset=utf-8" });
        res.end("metrics reset\n");
        return;
      }
      const text = await slis.render();
      res.writeHead(200, { "content-type": EXPOSITION_CONTENT_TYPE });
      res.end(text);
    },
  });
  const probeMetrics = opts.probeMetrics;
  if (probeMetrics) {
    routes.push({
      pattern: "/metrics/probes",
      methods: ["GET"],
      handler: async (_r, res) => {
        // The prober's families, then the start time its registry carries upstream.
        const text = probeMetrics() + await processStartTimeText();
        res.writeHead(200, { "content-type": EXPOSITION_CONTENT_TYPE });
        res.end(text);
      },
    });
  }
  for (const { pattern, what } of NOT_YET) {
    if (pattern === "/metrics" && metrics) continue;
    routes.push({
      pattern,
      handler: (_r, res) => httpError(res, 501, `${what} is not supported yet by this kubelet`),
    });
  }
  return routes;
}
