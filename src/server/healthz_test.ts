import assert from "node:assert/strict";
import { createLogger } from "../klog/klog.ts";
import { SLIMetrics } from "../metrics/slis.ts";
import { serveHealthz } from "./healthz.ts";

/** A port nothing listens on now. */
function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

Deno.test("serveHealthz answers as upstream's healthz port and records each /healthz run for the SLIs", async () => {
  const ctrl = new AbortController();
  const slis = new SLIMetrics({ process: { procSelf: "/nonexistent", procStat: "/nonexistent" } });
  let why: string | undefined = undefined;
  const port = freePort();
  const { finished } = await serveHealthz({
    hostname: "127.0.0.1",
    port,
    logger: createLogger({ write: () => {} }),
    signal: ctrl.signal,
    checks: { syncloop: () => why },
    slis,
  });
  const get = async (path: string) => {
    const res = await fetch(`http://127.0.0.1:${port}${path}`);
    return [res.status, await res.text()];
  };
  try {
    assert.deepEqual(await get("/healthz"), [200, "ok"]);
    assert.deepEqual(await get("/healthz/ping"), [200, "ok"]);
    assert.deepEqual(await get("/healthz/nope"), [404, "404 page not found\n"]);
    why = "sync Loop took longer than expected";
    assert.deepEqual(await get("/healthz"), [
      500,
      "[+]ping ok\n[-]syncloop failed: reason withheld\nhealthz check failed\n",
    ]);
    assert.deepEqual(await get("/healthz/syncloop"), [
      500,
      "internal server error: sync Loop took longer than expected\n",
    ]);
    const series = (await slis.render()).split("\n").filter((l) => l.startsWith("kubernetes_"));
    assert.deepEqual(series, [
      'kubernetes_healthcheck{name="ping",type="healthz"} 1',
      'kubernetes_healthcheck{name="syncloop",type="healthz"} 0',
      'kubernetes_healthchecks_total{name="ping",status="success",type="healthz"} 2',
      'kubernetes_healthchecks_total{name="syncloop",status="error",type="healthz"} 1',
      'kubernetes_healthchecks_total{name="syncloop",status="success",type="healthz"} 1',
    ]);
  } finally {
    ctrl.abort();
    await finished;
  }
});
