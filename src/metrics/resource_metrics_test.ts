import assert from "node:assert/strict";
import { parseTime, renderResourceMetrics } from "./resource_metrics.ts";
import { compareGo, parseExposition } from "./prometheus.ts";
import type { Summary } from "../apis/stats_types.ts";

// Upstream's test instant, 2021-06-23 05:11:18.302091597 +0800.
const T = "2021-06-22T21:11:18.302091597Z";
const T0 = "2021-06-22T21:00:00Z";

const SUMMARY: Summary = {
  node: {
    nodeName: "n",
    startTime: T0,
    cpu: { time: T, usageCoreNanoSeconds: 10_000_000_000 },
    memory: { time: T, workingSetBytes: 1000, usageBytes: 2000 },
    swap: { time: "2021-06-22T21:11:28.302091597Z", swapUsageBytes: 500 },
  },
  pods: [
    {
      podRef: { name: "pod_b", namespace: "namespace_b", uid: "b" },
      startTime: T0,
      containers: [{
        name: "container_a",
        startTime: "2021-06-22T21:01:18.302091597Z",
        cpu: { time: T, usageCoreNanoSeconds: 10_000_000_000 },
        memory: { time: T, workingSetBytes: 1000 },
      }],
      cpu: { time: T, usageCoreNanoSeconds: 11_500_000_000 },
      memory: { time: T, workingSetBytes: 2000 },
      swap: { time: T, swapUsageBytes: 5000 },
    },
    {
      podRef: { name: 'pod_"q"', namespace: "ns\\1\n2", uid: "a" },
      startTime: T0,
      containers: [
        {
          name: "container_b",
          startTime: "2021-06-22T21:09:18+00:00",
          cpu: { time: T, usageCoreNanoSeconds: 123456789012345 },
          memory: { time: T, workingSetBytes: 1_500_000_000 },
          swap: { time: "2021-06-22T21:11:19Z", swapUsageBytes: 1000, swapAvailableBytes: 9000 },
        },
        {
          name: "container_a",
          startTime: "2021-06-23T05:10:48.302091597+08:00",
          cpu: { time: T, usageCoreNanoSeconds: 999 },
          memory: { time: T, workingSetBytes: 0 },
          swap: { time: T, swapAvailableBytes: 4096 },
        },
      ],
    },
  ],
};

// Written by upstream 1.36.3's collector in a KubeRegistry at v1.36.3 for SUMMARY.
const EXPECTED =
  `# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="container_a",namespace="namespace_b",pod="pod_b"} 10 1624396278302
container_cpu_usage_seconds_total{container="container_a",namespace="ns\\\\1\\n2",pod="pod_\\"q\\""} 9.99e-07 1624396278302
container_cpu_usage_seconds_total{container="container_b",namespace="ns\\\\1\\n2",pod="pod_\\"q\\""} 123456.789012345 1624396278302
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="container_a",namespace="namespace_b",pod="pod_b"} 1000 1624396278302
container_memory_working_set_bytes{container="container_a",namespace="ns\\\\1\\n2",pod="pod_\\"q\\""} 0 1624396278302
container_memory_working_set_bytes{container="container_b",namespace="ns\\\\1\\n2",pod="pod_\\"q\\""} 1.5e+09 1624396278302
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="container_a",namespace="namespace_b",pod="pod_b"} 1.6243956783020916e+09
container_start_time_seconds{container="container_a",namespace="ns\\\\1\\n2",pod="pod_\\"q\\""} 1.6243962483020916e+09
container_start_time_seconds{container="container_b",namespace="ns\\\\1\\n2",pod="pod_\\"q\\""} 1.624396158e+09
# HELP container_swap_limit_bytes [ALPHA] Current amount of the container swap limit in bytes. Reported only on non-windows systems
# TYPE container_swap_limit_bytes gauge
container_swap_limit_bytes{container="container_a",namespace="ns\\\\1\\n2",pod="pod_\\"q\\""} 4096 1624396278302
container_swap_limit_bytes{container="container_b",namespace="ns\\\\1\\n2",pod="pod_\\"q\\""} 10000 1624396279000
# HELP container_swap_usage_bytes [ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems
# TYPE container_swap_usage_bytes gauge
container_swap_usage_bytes{container="container_b",namespace="ns\\\\1\\n2",pod="pod_\\"q\\""} 1000 1624396279000
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 10 1624396278302
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 1000 1624396278302
# HELP node_swap_usage_bytes [ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems
# TYPE node_swap_usage_bytes gauge
node_swap_usage_bytes 500 1624396288302
# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace="namespace_b",pod="pod_b"} 11.5 1624396278302
# HELP pod_memory_working_set_bytes [STABLE] Current working set of the pod in bytes
# TYPE pod_memory_working_set_bytes gauge
pod_memory_working_set_bytes{namespace="namespace_b",pod="pod_b"} 2000 1624396278302
# HELP pod_swap_usage_bytes [ALPHA] Current amount of the pod swap usage in bytes. Reported only on non-windows systems
# TYPE pod_swap_usage_bytes gauge
pod_swap_usage_bytes{namespace="namespace_b",pod="pod_b"} 5000 1624396278302
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
`;

const SCRAPE_ERROR_ONLY = (v: number) =>
  `# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error ${v}
`;

Deno.test("renderResourceMetrics writes exactly what upstream 1.36 writes", () => {
  assert.equal(renderResourceMetrics(SUMMARY), EXPECTED);
});

Deno.test("renderResourceMetrics reads back with HELP and TYPE before every family's samples", () => {
  const families = parseExposition(renderResourceMetrics(SUMMARY));
  const names = families.map((f) => f.name);
  assert.deepEqual(names, [...names].sort(compareGo));
  assert.equal(names.length, 12);
  assert.ok(!names.includes("scrape_error"), "scrape_error is hidden in 1.36");
  const byName = new Map(families.map((f) => [f.name, f]));
  assert.equal(byName.get("node_cpu_usage_seconds_total")?.type, "counter");
  assert.equal(byName.get("container_memory_working_set_bytes")?.type, "gauge");
  const cpu = byName.get("container_cpu_usage_seconds_total")?.samples ?? [];
  assert.deepEqual(cpu[1], {
    labels: { container: "container_a", namespace: "ns\\1\n2", pod: 'pod_"q"' },
    value: 999e-9,
    timestampMs: 1624396278302,
  });
  const start = byName.get("container_start_time_seconds")?.samples ?? [];
  assert.ok(start.every((s) => s.timestampMs === undefined), "start times carry no timestamp");
});

Deno.test("renderResourceMetrics omits samples whose values are missing", () => {
  const t = "2021-06-22T21:11:18Z";
  const summary: Summary = {
    node: {
      nodeName: "n",
      startTime: T0,
      cpu: { time: t, usageNanoCores: 5 },
      memory: { time: t, usageBytes: 7 },
      swap: { time: t, swapAvailableBytes: 7 },
    },
    pods: [{
      podRef: { name: "p", namespace: "n", uid: "u" },
      startTime: T0,
      containers: [{
        name: "c",
        startTime: "1970-01-01T00:00:00Z",
        cpu: { time: t },
        memory: { time: t, rssBytes: 1 },
        swap: { time: t },
      }],
      cpu: { time: t },
      memory: { time: t },
      swap: { time: t },
    }],
  };
  assert.equal(renderResourceMetrics(summary), SCRAPE_ERROR_ONLY(0));
});

Deno.test("renderResourceMetrics omits a sample whose time does not parse", () => {
  const summary: Summary = {
    node: { nodeName: "n", startTime: T0, cpu: { time: "yesterday", usageCoreNanoSeconds: 1 } },
    pods: [{
      podRef: { name: "p", namespace: "n", uid: "u" },
      startTime: T0,
      containers: [{ name: "c", startTime: "not a time" }],
    }],
  };
  assert.equal(renderResourceMetrics(summary), SCRAPE_ERROR_ONLY(0));
});

Deno.test("renderResourceMetrics writes only resource_scrape_error 1 when the scrape failed", () => {
  assert.equal(renderResourceMetrics(undefined), SCRAPE_ERROR_ONLY(1));
  assert.equal(renderResourceMetrics(SUMMARY, { scrapeError: true }), SCRAPE_ERROR_ONLY(1));
});

Deno.test("parseTime reads RFC 3339 to the nanosecond with offsets", () => {
  assert.deepEqual(parseTime("2021-06-23T05:11:18.302091597+08:00"), {
    seconds: 1624396278,
    fraction: 302091597,
    nanos: 1624396278302091597n,
  });
  assert.equal(parseTime("2021-06-22T21:11:18.5Z")?.fraction, 500_000_000);
  // 23:41:18 at -00:30 is 00:11:18Z the next day, three hours after 21:11:18Z.
  assert.equal(parseTime("2021-06-22T23:41:18-00:30")?.seconds, 1624396278 + 3 * 3600);
  assert.equal(parseTime("0001-01-01T00:00:00Z")?.seconds, -62135596800);
  assert.equal(parseTime("2021-06-22 21:11:18Z"), undefined);
  assert.equal(parseTime("2021-06-22T21:11:18"), undefined);
});
