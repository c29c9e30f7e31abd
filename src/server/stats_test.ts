import assert from "node:assert/strict";
import type { ServerResponse } from "node:http";
import { createLogger } from "../klog/klog.ts";
import { parseExposition } from "../metrics/prometheus.ts";
import { compilePattern, type KubeletRequest, type Route } from "./server.ts";
import { statsRoutes } from "./stats.ts";
import { statsUnavailableRoutes } from "../kubelet_stats.ts";
import type { Summary } from "../apis/stats_types.ts";

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

async function call(routes: Route[], target: string): Promise<FakeResponse> {
  const url = new URL(target, "https://kubelet");
  for (const route of routes) {
    const params = compilePattern(route.pattern)(url.pathname);
    if (!params || !route.handler) continue;
    const res = new FakeResponse();
    const r = { url, params, signal: new AbortController().signal } as unknown as KubeletRequest;
    await route.handler(r, res as unknown as ServerResponse);
    return res;
  }
  throw new Error(`no route for ${target}`);
}

const T = "2026-12-03T08:00:00Z";
const FULL: Summary = {
  node: { nodeName: "n", startTime: T, fs: { time: T, capacityBytes: 10 } },
  pods: [],
};
const CPU_MEM: Summary = {
  node: { nodeName: "n", startTime: T, cpu: { time: T, usageCoreNanoSeconds: 2_500_000_000 } },
  pods: [{
    podRef: { name: "web", namespace: "default", uid: "u" },
    startTime: T,
    containers: [{
      name: "main",
      startTime: T,
      memory: { time: T, workingSetBytes: 1024 },
    }],
    memory: { time: T, workingSetBytes: 2048 },
  }],
};

function routes(opts: { summaryError?: Error; cpuMemError?: Error } = {}) {
  const calls: string[] = [];
  return {
    calls,
    routes: statsRoutes({
      summary: () => {
        calls.push("summary");
        return opts.summaryError ? Promise.reject(opts.summaryError) : Promise.resolve(FULL);
      },
      cpuAndMemory: () => {
        calls.push("cpuAndMemory");
        if (opts.cpuMemError) throw opts.cpuMemError;
        return CPU_MEM;
      },
      cadvisorEntries: () => [{
        id: "/k8s.io/abc",
        name: "abc",
        image: "busybox",
        container: "main",
        pod: "web",
        namespace: "default",
        timestampMs: Date.parse(T),
        memory: { usageBytes: 4096, workingSetBytes: 1024, limitBytes: Infinity },
      }],
      machine: { numCores: 4, memoryBytes: 8 * 2 ** 30 },
      logger: createLogger({ write: () => {} }),
    }),
  };
}

Deno.test("statsRoutes serves the summary, and CPU and memory alone on request", async () => {
  const r = routes();
  const full = await call(r.routes, "/stats/summary");
  assert.equal(full.status, 200);
  assert.equal(full.headers["content-type"], "application/json");
  assert.deepEqual(JSON.parse(full.body), FULL);
  const only = await call(r.routes, "/stats/summary?only_cpu_and_memory=true");
  assert.deepEqual(JSON.parse(only.body), CPU_MEM);
  const notOnly = await call(r.routes, "/stats/summary?only_cpu_and_memory=false");
  assert.deepEqual(JSON.parse(notOnly.body), FULL);
  assert.deepEqual(r.calls, ["summary", "cpuAndMemory", "summary"]);
  // strconv.ParseBool's failure, as upstream answers it.
  const bad = await call(r.routes, "/stats/summary?only_cpu_and_memory=yes");
  assert.equal(bad.status, 500);
  assert.match(bad.body, /strconv\.ParseBool: parsing "yes": invalid syntax/);
});

Deno.test("statsRoutes answers 500 naming the error when the summary fails", async () => {
  const r = routes({ summaryError: new Error("runtime is down") });
  const res = await call(r.routes, "/stats/summary");
  assert.equal(res.status, 500);
  assert.equal(res.body, "Internal Error: runtime is down\n");
});

Deno.test("statsRoutes renders /metrics/resource and /metrics/cadvisor as Prometheus text", async () => {
  const r = routes();
  const resource = await call(r.routes, "/metrics/resource");
  assert.equal(resource.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
  const families = new Map(parseExposition(resource.body).map((f) => [f.name, f]));
  assert.equal(families.get("node_cpu_usage_seconds_total")?.samples[0]?.value, 2.5);
  assert.deepEqual(
    families.get("container_memory_working_set_bytes")?.samples.map((s) => s.labels),
    [{ container: "main", namespace: "default", pod: "web" }],
  );
  assert.equal(families.get("resource_scrape_error")?.samples[0]?.value, 0);

  const cadvisor = await call(r.routes, "/metrics/cadvisor");
  assert.match(cadvisor.body, /^container_memory_working_set_bytes\{.*pod="web".*\} 1024 /m);
  assert.match(cadvisor.body, /^machine_cpu_cores\{boot_id="",machine_id="",system_uuid=""\} 4$/m);

  // A failing summary is resource_scrape_error 1, not a failed request.
  const failing = routes({ cpuMemError: new Error("boom") });
  const failed = await call(failing.routes, "/metrics/resource");
  assert.equal(failed.status, 200);
  assert.match(failed.body, /^resource_scrape_error 1$/m);
});

Deno.test("statsUnavailableRoutes answers 500 with the reason statistics could not start", async () => {
  const res = await call(
    statsUnavailableRoutes("no cgroup mounts in /proc/self/mountinfo"),
    "/stats/summary",
  );
  assert.equal(res.status, 500);
  assert.equal(
    res.body,
    "Internal Error: statistics are unavailable: no cgroup mounts in /proc/self/mountinfo\n",
  );
});
