import assert from "node:assert/strict";
import type { ServerResponse } from "node:http";
import { parseDuration } from "../util/duration.ts";
import type { KubeletConfiguration } from "../apis/config_types.ts";
import type { PodStatus } from "../container/pod_cache.ts";
import type { KubeletRequest, Route } from "./server.ts";
import { podRoutes } from "./pods.ts";
import { compilePattern } from "./server.ts";
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
  for (const route of routes) {
    const params = compilePattern(route.pattern)(path);
    if (!params || !route.handler) continue;
    if (route.methods && !route.methods.includes(method)) continue;
    const res = new FakeResponse();
    const r = {
      url: new URL(path, "https://kubelet"),
      params,
      signal: new AbortController().signal,
    } as unknown as KubeletRequest;
    await route.handler(r, res as unknown as ServerResponse);
    return res;
  }
  throw new Error(`no route for ${path}`);
}

function routes(checks: Record<string, () => string | undefined> = {}): Route[] {
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

Deno.test("podRoutes /healthz fails naming the failed check, and each check has its path", async () => {
  let why: string | undefined = undefined;
  const r = routes({ syncloop: () => why });
  assert.equal((await call(r, "/healthz")).body, "ok");
  assert.equal((await call(r, "/healthz/ping")).body, "ok");
  why = "sync Loop took longer than expected";
  const res = await call(r, "/healthz");
  assert.equal(res.status, 500);
  assert.equal(
    res.body,
    "[-]syncloop failed: sync Loop took longer than expected\nhealthz check failed\n",
  );
  assert.equal((await call(r, "/healthz/syncloop")).status, 500);
  assert.equal((await call(r, "/healthz/ping")).status, 200);
});

Deno.test("podRoutes answers 501 for endpoints that are not built yet", async () => {
  const probes = await call(routes(), "/metrics/probes");
  assert.equal(probes.status, 200);
  assert.equal(probes.body, "# HELP prober_probe_total x\n");
  for (const path of ["/metrics", "/metrics/slis", "/spec/", "/checkpoint/x/y/z"]) {
    const res = await call(routes(), path);
    assert.equal(res.status, 501, path);
    assert.match(res.body, /is not supported yet by this kubelet/);
  }
});
