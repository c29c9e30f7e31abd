import assert from "node:assert/strict";
import {
  cadvisorKind,
  compareScrapes,
  countFamilies,
  jsonKeyPaths,
  labelNames,
  parseLoose,
} from "./_metrics_parity.ts";

const UPSTREAM = `# HELP go_gc_duration_seconds A summary of the wall-time pause.
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0"} 1.2e-05
go_gc_duration_seconds_sum 0.01
go_gc_duration_seconds_count 7
# HELP kubelet_http_requests_total [ALPHA] Number of the http requests received since the server started
# TYPE kubelet_http_requests_total counter
kubelet_http_requests_total{long_running="false",method="GET",path="metrics",server_type="readwrite"} 3
# HELP kubelet_pleg_relist_duration_seconds [ALPHA] Duration in seconds for relisting pods in PLEG.
# TYPE kubelet_pleg_relist_duration_seconds histogram
kubelet_pleg_relist_duration_seconds_bucket{le="0.005"} 1
kubelet_pleg_relist_duration_seconds_bucket{le="+Inf"} 2
kubelet_pleg_relist_duration_seconds_sum 0.01
kubelet_pleg_relist_duration_seconds_count 2
# HELP kubelet_running_pods [ALPHA] Number of pods that have a running pod sandbox
# TYPE kubelet_running_pods gauge
kubelet_running_pods 2
# HELP empty_family [ALPHA] registered, no series
# TYPE empty_family gauge
`;

Deno.test("parseLoose reads summaries, histograms and drops families without samples", () => {
  const f = parseLoose(UPSTREAM);
  assert.deepEqual([...f.keys()], [
    "go_gc_duration_seconds",
    "kubelet_http_requests_total",
    "kubelet_pleg_relist_duration_seconds",
    "kubelet_running_pods",
  ]);
  assert.equal(f.get("go_gc_duration_seconds")?.type, "summary");
  assert.equal(f.get("go_gc_duration_seconds")?.samples.length, 3);
  assert.equal(f.get("kubelet_pleg_relist_duration_seconds")?.samples.length, 4);
  assert.deepEqual(
    [...labelNames(f.get("kubelet_http_requests_total")!)].sort(),
    ["long_running", "method", "path", "server_type"],
  );
  assert.deepEqual([...labelNames(f.get("go_gc_duration_seconds")!)], []);
  assert.throws(() => parseLoose("what is this\n"), /line 1: not a sample/);
});

Deno.test("compareScrapes names each missing family, type, HELP and label; skips and excuses", () => {
  const upstream = parseLoose(UPSTREAM);
  const ours = parseLoose(`# HELP kubelet_http_requests_total [ALPHA] Other help
# TYPE kubelet_http_requests_total counter
kubelet_http_requests_total{method="GET",path="metrics",server_type="readwrite"} 1
# HELP kubelet_running_pods [ALPHA] Number of pods that have a running pod sandbox
# TYPE kubelet_running_pods counter
kubelet_running_pods 2
`);
  const excuse = {
    family: "kubelet_running_pods",
    what: "type",
    reason: "a test of excuses",
  };
  const stale = { family: "kubelet_gone", what: "family", reason: "no longer needed" };
  const c = compareScrapes({
    endpoint: "/metrics",
    upstream,
    ours,
    skip: (n) => n.startsWith("go_") ? "Go runtime" : undefined,
    exceptions: [excuse, stale],
  });
  assert.deepEqual(c.problems, [
    '/metrics kubelet_http_requests_total: HELP "[ALPHA] Other help", upstream ' +
    '"[ALPHA] Number of the http requests received since the server started"',
    "/metrics kubelet_http_requests_total: no label long_running",
    "/metrics kubelet_pleg_relist_duration_seconds: missing (upstream: histogram, 4 samples)",
  ]);
  assert.deepEqual(c.used.map((u) => u.exception), [excuse]);
  assert.deepEqual(c.unused, [stale]);
  assert.deepEqual(
    countFamilies("/metrics", upstream, ours, (n) => n.startsWith("go_") ? "" : undefined),
    {
      endpoint: "/metrics",
      upstream: 3,
      ours: 2,
      shared: 2,
    },
  );
});

Deno.test("compareScrapes: a family ours declares alike but has not observed is not missing", () => {
  const upstream = parseLoose(`# HELP kubelet_run_podsandbox_errors_total [ALPHA] Errors.
# TYPE kubelet_run_podsandbox_errors_total counter
kubelet_run_podsandbox_errors_total{runtime_handler=""} 1
# HELP kubelet_other_errors_total [ALPHA] Other.
# TYPE kubelet_other_errors_total counter
kubelet_other_errors_total{operation_type="x"} 1
# HELP kubelet_absent_total [ALPHA] Absent.
# TYPE kubelet_absent_total counter
kubelet_absent_total 1
`);
  const declared = new Map([
    ["kubelet_run_podsandbox_errors_total", {
      name: "kubelet_run_podsandbox_errors_total",
      type: "counter" as const,
      help: "[ALPHA] Errors.",
      labelNames: ["runtime_handler"],
    }],
    ["kubelet_other_errors_total", {
      name: "kubelet_other_errors_total",
      type: "counter" as const,
      help: "[ALPHA] Other.",
      labelNames: ["handler"],
    }],
  ]);
  const c = compareScrapes({ endpoint: "/metrics", upstream, ours: new Map(), declared });
  assert.deepEqual(c.unobserved, ["/metrics kubelet_run_podsandbox_errors_total"]);
  assert.deepEqual(c.problems, [
    "/metrics kubelet_absent_total: missing (upstream: counter, 1 samples)",
    "/metrics kubelet_other_errors_total: no samples, and declared unlike upstream's (counter " +
    '"[ALPHA] Other." [handler]; upstream counter "[ALPHA] Other." [operation_type])',
  ]);
});

Deno.test("compareScrapes: a kind of series upstream has and we lack is a problem", () => {
  const line = (id: string, container = "", image = "", pod = "") =>
    `container_cpu_usage_seconds_total{container="${container}",id="${id}",image="${image}",name="",namespace="",pod="${pod}"} 1`;
  const head = "# TYPE container_cpu_usage_seconds_total counter\n";
  const upstream = parseLoose(
    head + [
      line("/"),
      line("/kubepods"),
      line("/kubepods/burstable"),
      line("/kubepods/burstable/pod1234"),
      line("/kubepods/burstable/pod1234/abc", "", "registry.k8s.io/pause:3.10", "p"),
      line("/kubepods/burstable/pod1234/def", "main", "busybox", "p"),
    ].join("\n") + "\n",
  );
  const ours = parseLoose(
    head + [
      line("/"),
      line("/kubelet-ts-e2e/x/kubepods/burstable/pod99/def", "main", "busybox", "p"),
    ].join("\n") + "\n",
  );
  const c = compareScrapes({ endpoint: "/metrics/cadvisor", upstream, ours, kind: cadvisorKind });
  assert.deepEqual(c.problems, [
    "/metrics/cadvisor container_cpu_usage_seconds_total: no qos /kubepods series",
    "/metrics/cadvisor container_cpu_usage_seconds_total: no qos /kubepods/burstable series",
    "/metrics/cadvisor container_cpu_usage_seconds_total: no pod series",
  ]);
});

Deno.test("jsonKeyPaths lists every key, arrays collapsed", () => {
  const paths = jsonKeyPaths({
    node: { cpu: { usageNanoCores: 1 }, swap: null },
    pods: [{ containers: [{ name: "a", cpu: {} }] }, { containers: [{ logs: { usedBytes: 2 } }] }],
  });
  assert.deepEqual([...paths].sort(), [
    "node",
    "node.cpu",
    "node.cpu.usageNanoCores",
    "node.swap",
    "pods",
    "pods[].containers",
    "pods[].containers[].cpu",
    "pods[].containers[].logs",
    "pods[].containers[].logs.usedBytes",
    "pods[].containers[].name",
  ]);
});
