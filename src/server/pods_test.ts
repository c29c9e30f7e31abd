import assert from "node:assert/strict";
import type { ServerResponse } from "node:http";
import { parseDuration } from "../util/duration.ts";
import type { KubeletConfiguration } from "../apis/config_types.ts";
import type { PodStatus } from "../container/pod_cache.ts";
import type { KubeletRequest, Route } from "./server.ts";
import { podRoutes } from "./pods.ts";
import { compilePattern } from "./server.ts";
import { nodeAuthorizerAttributesList } from "./auth.ts";
import { SLIMetrics } from "../metrics/slis.ts";
import * as api from "../../proto/runtime/v1/api.ts";

/** Records what a handler writes. */
class FakeResponse {
  status = 0;
  headers: Record<string, string> = {};
  body = "";
  headersSent = false;
  writeHead(status: number, headers: Record<string, string> = {}) {
    this.status = status;
    this.headers = headers;
    this.headersSent = true;
    return this;
  }
  end(chunk?: string) {
    this.body += chunk ?? "";
  }
  destroy() {}
}

async function call(routes: Route[], path: string, method = "GET"): Promise<FakeResponse> {
  const url = new URL(path, "https://kubelet");
  for (const route of routes) {
    const params = compilePattern(route.pattern)(url.pathname);
    if (!params || !route.handler) continue;
    if (route.methods && !route.methods.includes(method)) continue;
    const res = new FakeResponse();
    const r = {
      req: { method },
      url,
      params,
      signal: new AbortController().signal,
    } as unknown as KubeletRequest;
    await route.handler(r, res as unknown as ServerResponse);
    return res;
  }
  throw new Error(`no route for ${path}`);
}

function routes(
  checks: Record<string, () => string | undefined> = {},
  slis = new SLIMetrics({ process: { procSelf: "/nonexistent", procStat: "/nonexistent" } }),
): Route[] {
  const running: PodStatus = {
    id: "uid-1",
    name: "web",
    namespace: "default",
    ips: [],
    sandboxStatuses: [],
    containerStatuses: [
      api.ContainerStatus.create({
        metadata: { name: "app", attempt: 1 },
        image: { image: "b:2" },
      }),
      api.ContainerStatus.create({
        metadata: { name: "app", attempt: 0 },
        image: { image: "b:1" },
      }),
    ],
    timestamp: 0,
  };
  return podRoutes({
    getPods: () => [{ metadata: { name: "web", namespace: "default", uid: "uid-1" } }],
    getRunningPods: () => [running],
    config: {
      syncFrequency: parseDuration("1m"),
      authentication: { anonymous: { enabled: false } },
      clusterDNS: ["10.96.0.10"],
    } as unknown as KubeletConfiguration,
    checks,
    slis,
    probeMetrics: () => "# HELP prober_probe_total x\n",
  });
}

Deno.test("podRoutes /pods answers a v1 PodList of the kubelet's pods", async () => {
  const res = await call(routes(), "/pods");
  assert.equal(res.status, 200);
  assert.equal(res.headers["content-type"], "application/json");
  const list = JSON.parse(res.body);
  assert.equal(list.kind, "PodList");
  assert.equal(list.apiVersion, "v1");
  assert.deepEqual(list.items.map((p: { metadata: { name: string } }) => p.metadata.name), ["web"]);
});

Deno.test("podRoutes /runningpods/ shows runtime pods with their newest containers", async () => {
  const res = await call(routes(), "/runningpods/");
  const list = JSON.parse(res.body);
  assert.deepEqual(list.items, [{
    metadata: { name: "web", namespace: "default", uid: "uid-1" },
    spec: { containers: [{ name: "app", image: "b:2" }] },
  }]);
});

Deno.test("podRoutes /configz prints the configuration with Go durations", async () => {
  const res = await call(routes(), "/configz");
  const body = JSON.parse(res.body);
  assert.equal(body.kubeletconfig.syncFrequency, "1m0s");
  assert.deepEqual(body.kubeletconfig.clusterDNS, ["10.96.0.10"]);
  assert.deepEqual(body.kubeletconfig.authentication, { anonymous: { enabled: false } });
});

Deno.test("podRoutes /healthz words its answer as apiserver's healthz, the reason withheld", async () => {
  let why: string | undefined = undefined;
  const r = routes({ syncloop: () => why });
  assert.equal((await call(r, "/healthz")).body, "ok");
  assert.equal(
    (await call(r, "/healthz?verbose")).body,
    "[+]ping ok\n[+]log ok\n[+]syncloop ok\nhealthz check passed\n",
  );
  assert.equal((await call(r, "/healthz/ping")).body, "ok");
  why = "sync Loop took longer than expected";
  const res = await call(r, "/healthz");
  assert.equal(res.status, 500);
  assert.equal(
    res.body,
    "[+]ping ok\n[+]log ok\n[-]syncloop failed: reason withheld\nhealthz check failed\n",
  );
  // The check's own path gives the reason.
  const one = await call(r, "/healthz/syncloop");
  assert.deepEqual(
    [one.status, one.body],
    [500, "internal server error: sync Loop took longer than expected\n"],
  );
  assert.equal((await call(r, "/healthz/ping")).status, 200);
  // An excluded check does not run; a name that matches none is reported.
  const excluded = await call(r, "/healthz?exclude=syncloop&exclude=nope");
  assert.deepEqual([excluded.status, excluded.body], [200, "ok"]);
  assert.equal(
    (await call(r, "/healthz?exclude=syncloop&exclude=nope&verbose")).body,
    "[+]ping ok\n[+]log ok\n[+]syncloop excluded: ok\n" +
      'warn: some health checks cannot be excluded: no matches for "nope"\n' +
      "healthz check passed\n",
  );
});

Deno.test("podRoutes /metrics/slis serves the SLIs of every /healthz run; DELETE resets them", async () => {
  let why: string | undefined = undefined;
  const slis = new SLIMetrics({ process: { procSelf: "/nonexistent", procStat: "/nonexistent" } });
  const r = routes({ syncloop: () => why }, slis);
  const series = async () =>
    (await call(r, "/metrics/slis")).body.split("\n").filter((l) => l.startsWith("kubernetes_"));
  // Nothing recorded before /healthz runs; the per-check paths record nothing either.
  await call(r, "/healthz/syncloop");
  assert.deepEqual(await series(), []);
  await call(r, "/healthz");
  why = "stuck";
  await call(r, "/healthz");
  await call(r, "/healthz?exclude=log");
  const res = await call(r, "/metrics/slis");
  assert.equal(res.status, 200);
  assert.match(res.headers["content-type"]!, /^text\/plain; version=0\.0\.4/);
  assert.deepEqual(await series(), [
    'kubernetes_healthcheck{name="log",type="healthz"} 1',
    'kubernetes_healthcheck{name="ping",type="healthz"} 1',
    'kubernetes_healthcheck{name="syncloop",type="healthz"} 0',
    'kubernetes_healthchecks_total{name="log",status="success",type="healthz"} 2',
    'kubernetes_healthchecks_total{name="ping",status="success",type="healthz"} 3',
    'kubernetes_healthchecks_total{name="syncloop",status="error",type="healthz"} 2',
    'kubernetes_healthchecks_total{name="syncloop",status="success",type="healthz"} 1',
  ]);
  const reset = await call(r, "/metrics/slis", "DELETE");
  assert.deepEqual([reset.status, reset.body], [200, "metrics reset\n"]);
  assert.deepEqual(await series(), []);
});

Deno.test("podRoutes /metrics/slis is authorized as upstream: nodes/metrics, verb from the method", () => {
  const user = { name: "u", groups: [] };
  for (const [method, verb] of [["GET", "get"], ["DELETE", "delete"]] as const) {
    const attrs = nodeAuthorizerAttributesList("node-a", user, method, "/metrics/slis");
    assert.deepEqual(
      attrs.map((a) => [a.resource, a.subresource, a.verb, a.name]),
      [["nodes", "metrics", verb, "node-a"]],
    );
  }
});

Deno.test("podRoutes serves /metrics/probes with the start time, and 501 for /metrics without metrics", async () => {
  const probes = await call(routes(), "/metrics/probes");
  assert.equal(probes.status, 200);
  // The prober's text, then the process start time upstream's probes registry carries too.
  assert.match(
    probes.body,
    /^# HELP prober_probe_total x\n# HELP process_start_time_seconds \[ALPHA\] Start time of the process since unix epoch in seconds\.\n# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds \d\.\d+e\+09\n$/,
  );
  const res = await call(routes(), "/metrics");
  assert.equal(res.status, 501);
  assert.match(res.body, /is not supported yet by this kubelet/);
  // Upstream v1.36 serves no /spec: no route answers it (the server's 404).
  assert.equal(routes().some((r) => compilePattern(r.pattern)("/spec/") !== undefined), false);
});
