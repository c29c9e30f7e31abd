/**
 * @module
 * Health checks as apiserver's healthz package serves them, and the localhost healthz endpoint
 * (`healthzBindAddress:healthzPort`, default 127.0.0.1:10248). {@link runHealthChecks} is
 * handleRootHealth: every check not excluded (`?exclude=name`) runs and is recorded for the
 * SLIs (`/metrics/slis`), a failure lists every check with its reason withheld, `?verbose`
 * lists them on success too; the kubelet API's `/healthz` (pods.ts) and this endpoint both use
 * it. {@link serveHealthz} answers `GET /healthz` and `/healthz/<check>` with `ping` and the
 * given checks, as upstream's `healthz.InstallHandler` on a bare mux does (upstream's has
 * `ping` alone). Closed when the signal aborts. Corresponds to upstream
 * `k8s.io/apiserver/pkg/server/healthz` (healthz.go) and cmd/kubelet/app/server.go's healthz
 * server.
 */

import type { Logger } from "../klog/klog.ts";
import { type HealthcheckStatus, sharedSLIMetrics, type SLIMetrics } from "../metrics/slis.ts";

/** A named check: undefined when healthy, else why not. */
export type HealthCheck = readonly [name: string, check: () => string | undefined];

/** What {@link runHealthChecks} found. */
export interface HealthReport {
  readonly healthy: boolean;
  /** The body, without the trailing newline Go's http.Error adds on failure. */
  readonly body: string;
  /** `[-]name failed: reason` for each failed check, for the log. */
  readonly failures: readonly string[];
}

/**
 * Runs `checks` for the root endpoint `type` (the path's first segment, "healthz"), records each
 * run in `slis`, and words the answer as upstream's handleRootHealth.
 */
export function runHealthChecks(
  checks: readonly HealthCheck[],
  query: URLSearchParams,
  slis: Pick<SLIMetrics, "observeHealthcheck">,
  type = "healthz",
): HealthReport {
  const excluded = new Set(query.getAll("exclude"));
  const unmatched = new Set(excluded);
  let out = "";
  const failures: string[] = [];
  for (const [name, check] of checks) {
    if (excluded.has(name)) {
      unmatched.delete(name);
      out += `[+]${name} excluded: ok\n`;
      continue;
    }
    const why = check();
    const status: HealthcheckStatus = why === undefined ? "success" : "error";
    slis.observeHealthcheck(name, type, status);
    if (why === undefined) {
      out += `[+]${name} ok\n`;
    } else {
      // The endpoint may be public: the reason is for /<type>/<name> and the log.
      out += `[-]${name} failed: reason withheld\n`;
      failures.push(`[-]${name} failed: ${why}`);
    }
  }
  if (unmatched.size > 0) {
    const names = [...unmatched].sort().map((n) => JSON.stringify(n)).join(",");
    out += `warn: some health checks cannot be excluded: no matches for ${names}\n`;
  }
  if (failures.length > 0) return { healthy: false, body: `${out}${type} check failed`, failures };
  const body = query.has("verbose") ? `${out}${type} check passed\n` : "ok";
  return { healthy: true, body, failures };
}

/** The check every healthz endpoint has (upstream PingHealthz). */
export const PING: HealthCheck = ["ping", () => undefined];

/** What {@link serveHealthz} needs. */
export interface HealthzOptions {
  readonly hostname: string;
  readonly port: number;
  readonly logger: Logger;
  readonly signal: AbortSignal;
  /** Checks after `ping`; each returns undefined when healthy or a reason when not. */
  readonly checks?: Readonly<Record<string, () => string | undefined>>;
  /** Where each run of /healthz is recorded. @default sharedSLIMetrics() */
  readonly slis?: SLIMetrics;
}

const TEXT = { "content-type": "text/plain; charset=utf-8", "x-content-type-options": "nosniff" };

/** Starts the server; resolves once it listens, with a promise that settles when it closes. */
export async function serveHealthz(opts: HealthzOptions): Promise<{ finished: Promise<void> }> {
  const slis = opts.slis ?? sharedSLIMetrics();
  const checks: HealthCheck[] = [PING, ...Object.entries(opts.checks ?? {})];
  const listening = Promise.withResolvers<void>();
  const server = Deno.serve({
    hostname: opts.hostname,
    port: opts.port,
    signal: opts.signal,
    onListen: () => listening.resolve(),
    onError: (e) => {
      opts.logger.error(e, "Healthz handler failed");
      return new Response("internal error", { status: 500 });
    },
  }, (req) => {
    const url = new URL(req.url);
    if (url.pathname === "/healthz") {
      const report = runHealthChecks(checks, url.searchParams, slis);
      if (report.healthy) return new Response(report.body, { headers: TEXT });
      opts.logger.v(2).info("Healthz check failed", { failures: report.failures.join("\n") });
      return new Response(`${report.body}\n`, { status: 500, headers: TEXT });
    }
    const one = checks.find(([name]) => url.pathname === `/healthz/${name}`);
    if (!one) return new Response("404 page not found\n", { status: 404, headers: TEXT });
    const why = one[1]();
    if (why === undefined) return new Response("ok", { headers: TEXT });
    return new Response(`internal server error: ${why}\n`, { status: 500, headers: TEXT });
  });
  await Promise.race([listening.promise, server.finished]);
  return { finished: server.finished };
}
