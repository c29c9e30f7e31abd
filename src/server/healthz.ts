/**
 * @module
 * The localhost healthz endpoint (`healthzBindAddress:healthzPort`, default 127.0.0.1:10248):
 * answers `GET /healthz` with `ok` while the agent runs, as upstream's `healthz.InstallHandler`
 * on a bare mux does. Closed when the signal aborts.
 */

import type { Logger } from "../klog/klog.ts";

/** What {@link serveHealthz} needs. */
export interface HealthzOptions {
  readonly hostname: string;
  readonly port: number;
  readonly logger: Logger;
  readonly signal: AbortSignal;
  /** Extra named checks; each returns undefined when healthy or a reason when not. */
  readonly checks?: Readonly<Record<string, () => string | undefined>>;
}

/** Starts the server; resolves once it listens, with a promise that settles when it closes. */
export async function serveHealthz(opts: HealthzOptions): Promise<{ finished: Promise<void> }> {
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
    if (url.pathname !== "/healthz" && !url.pathname.startsWith("/healthz/")) {
      return new Response("404 page not found\n", { status: 404 });
    }
    const failed = Object.entries(opts.checks ?? {}).flatMap(([name, check]) => {
      const reason = check();
      return reason === undefined ? [] : [`[-]${name} failed: ${reason}`];
    });
    if (failed.length > 0) {
      return new Response(`${failed.join("\n")}\nhealthz check failed\n`, { status: 500 });
    }
    return new Response("ok", { headers: { "content-type": "text/plain; charset=utf-8" } });
  });
  await Promise.race([listening.promise, server.finished]);
  return { finished: server.finished };
}
