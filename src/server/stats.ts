/**
 * @module
 * The statistics endpoints of the kubelet API: `/stats/summary` (the Summary API, with
 * `only_cpu_and_memory=true` for CPU and memory alone), `/metrics/resource` (the resource
 * metrics metrics-server and the HPA read) and `/metrics/cadvisor` (cAdvisor's container
 * metrics). Built from `stats/provider.ts` and the cAdvisor equivalent, rendered by
 * `metrics/resource_metrics.ts` and `metrics/cadvisor_metrics.ts`. Corresponds to upstream
 * `pkg/kubelet/server/stats/handler.go` and the metrics handlers of
 * `pkg/kubelet/server/server.go` (InstallDefaultHandlers).
 */

import type { Logger } from "../klog/klog.ts";
import { type CadvisorEntry, renderCadvisorMetrics } from "../metrics/cadvisor_metrics.ts";
import { renderResourceMetrics } from "../metrics/resource_metrics.ts";
import { httpError, type Route, writeJson } from "./server.ts";
import type { Summary } from "../apis/stats_types.ts";

/** Prometheus text exposition format 0.0.4. */
const PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8";

/** What {@link statsRoutes} needs. */
export interface StatsRoutesOptions {
  /** The whole summary (stats provider). */
  readonly summary: (signal: AbortSignal) => Promise<Summary>;
  /** CPU and memory only (stats provider). */
  readonly cpuAndMemory: () => Summary;
  /** cAdvisor's view of every container, for /metrics/cadvisor. */
  readonly cadvisorEntries: () => readonly CadvisorEntry[];
  /** The machine for cAdvisor's machine_* metrics. */
  readonly machine: Parameters<typeof renderCadvisorMetrics>[1];
  /** Version info and metric sets for /metrics/cadvisor. @default none */
  readonly cadvisorOptions?: Parameters<typeof renderCadvisorMetrics>[2];
  readonly logger: Logger;
}

/** The routes; see the module documentation. */
export function statsRoutes(opts: StatsRoutesOptions): Route[] {
  return [
    {
      pattern: "/stats/summary",
      methods: ["GET"],
      handler: async (r, res) => {
        const only = r.url.searchParams.get("only_cpu_and_memory");
        if (only !== null && only !== "true" && only !== "false") {
          // Upstream parses it with strconv.ParseBool and answers 500 on failure.
          return httpError(
            res,
            500,
            `Internal Error: strconv.ParseBool: parsing ${JSON.stringify(only)}: invalid syntax`,
          );
        }
        try {
          const summary = only === "true" ? opts.cpuAndMemory() : await opts.summary(r.signal);
          writeJson(res, 200, summary);
        } catch (e) {
          if (r.signal.aborted) return;
          opts.logger.error(e, "Error getting summary stats");
          httpError(res, 500, `Internal Error: ${e instanceof Error ? e.message : String(e)}`);
        }
      },
    },
    {
      pattern: "/metrics/resource",
      methods: ["GET"],
      handler: (_r, res) => {
        let text: string;
        try {
          text = renderResourceMetrics(opts.cpuAndMemory());
        } catch (e) {
          opts.logger.error(e, "Error getting summary for resourceMetric prometheus endpoint");
          text = renderResourceMetrics(undefined);
        }
        res.writeHead(200, { "content-type": PROMETHEUS_TEXT });
        res.end(text);
      },
    },
    {
      pattern: "/metrics/cadvisor",
      methods: ["GET"],
      handler: (_r, res) => {
        res.writeHead(200, { "content-type": PROMETHEUS_TEXT });
        res.end(renderCadvisorMetrics(opts.cadvisorEntries(), opts.machine, opts.cadvisorOptions));
      },
    },
  ];
}
