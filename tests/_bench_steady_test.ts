import assert from "node:assert/strict";
import { join } from "node:path";
import {
  probeLateness,
  probeTimes,
  readProbeTimes,
  relistTotals,
  requestRates,
  requestTotals,
  steadyFigures,
  steadyTable,
  tallyEvents,
} from "./_bench_steady.ts";

const API = (n: { status: number; events: number; lease: number; gets: number; proxy: number }) =>
  [
    "# HELP apiserver_request_total [STABLE] Counter of apiserver requests",
    `apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} ${n.status}`,
    `apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} ${n.events}`,
    `apiserver_request_total{code="200",component="apiserver",dry_run="",group="events.k8s.io",resource="events",scope="resource",subresource="",verb="PATCH",version="v1"} 1`,
    `apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} ${n.lease}`,
    `apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} ${n.gets}`,
    `apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="proxy",verb="CONNECT",version="v1"} ${n.proxy}`,
    `apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} ${n.proxy}`,
    `apiserver_request_duration_seconds_count{resource="pods",subresource="status",verb="PATCH"} 99`,
  ].join("\n");

Deno.test("requestRates counts the kubelet's writes by class, not the bench's scrapes", () => {
  const before = requestTotals(API({ status: 10, events: 5, lease: 3, gets: 7, proxy: 2 }));
  assert.equal(before.get("PATCH pods/status"), 10);
  assert.equal(before.get("PATCH events/"), 1);
  const after = requestTotals(API({ status: 30, events: 15, lease: 5, gets: 17, proxy: 9 }));
  const r = requestRates(before, after, 10);
  assert.deepEqual(r, { podStatus: 2, events: 1, node: 0.2, all: 2 + 1 + 0.2 + 1 });
});

Deno.test("relistTotals and steadyFigures give relists per second and the mean duration", () => {
  const text = (sum: number, count: number) =>
    [
      "# TYPE kubelet_pleg_relist_duration_seconds histogram",
      `kubelet_pleg_relist_duration_seconds_bucket{le="0.005"} ${count}`,
      `kubelet_pleg_relist_duration_seconds_sum ${sum}`,
      `kubelet_pleg_relist_duration_seconds_count ${count}`,
      "kubelet_pleg_relist_interval_seconds_sum 1234",
    ].join("\n");
  assert.deepEqual(relistTotals(text(0.5, 100)), { sum: 0.5, count: 100 });
  const s = steadyFigures(
    { at: 1000, requests: new Map(), relists: relistTotals(text(0.5, 100)) },
    {
      at: 21_000,
      requests: new Map([["PATCH pods/status", 4]]),
      relists: relistTotals(text(0.7, 120)),
    },
  );
  assert.equal(s.relistsPerSecond, 1);
  assert.ok(Math.abs(s.relistMeanMs - 10) < 1e-9);
  assert.deepEqual(s.requests, { podStatus: 0.2, events: 0, node: 0, all: 0.2 });
  const failed = steadyFigures(
    { at: 0, requests: new Error("forbidden"), relists: new Error("no proxy") },
    { at: 1, requests: new Map(), relists: { sum: 0, count: 0 } },
  );
  assert.equal((failed.requests as Error).message, "forbidden");
  assert.equal(failed.relistError?.message, "no proxy");
  assert.ok(Number.isNaN(failed.relistsPerSecond));
});

Deno.test("probeTimes reads busybox httpd's request lines from a CRI log", () => {
  const log = [
    "2026-12-07T04:10:00.123456789Z stderr F 10.88.0.1:33730: response:200",
    "2026-12-07T04:10:10.5+00:00 stderr F 10.88.0.1:33740: response:200",
    "2026-12-07T04:10:11Z stdout F hello",
    "2026-12-07T04:10:20Z stderr P 10.88.0.1:33750: response:200",
    "not a CRI line 10.88.0.1:1: response:200",
    "",
  ].join("\n");
  const t0 = Date.parse("2026-12-07T04:10:00Z");
  assert.deepEqual(probeTimes(log).map((t) => Math.round(t - t0)), [123, 10_500, 20_000]);
});

Deno.test("probeLateness: gaps minus the period, and probes more than one period late", () => {
  const from = 0;
  const to = 60_000;
  const onTime = [5_000, 15_000, 25_000, 35_000, 45_000, 55_000];
  const late = [5_000, 15_000, 40_000, 50_000]; // one gap of 25 s, and 10 s to the end.
  const r = probeLateness([onTime, late, [], [-5_000, 70_000]], 10_000, from, to);
  assert.equal(r.pods, 4);
  assert.equal(r.unprobed, 2);
  assert.equal(r.probes, 10);
  assert.equal(r.maxMs, 15_000);
  assert.equal(r.p50Ms, 0);
  // The 25 s gap, and the two pods without a probe in a 60 s window.
  assert.equal(r.late, 3);
  // A first probe more than two periods into the window is late too.
  assert.equal(probeLateness([[25_000, 35_000, 45_000, 55_000]], 10_000, 0, 60_000).late, 1);
  assert.ok(Number.isNaN(probeLateness([], 10_000, 0, 1).p99Ms));
});

Deno.test("readProbeTimes finds each pod's log under the kubelets' layout", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const pod = join(dir, "default_bench-a_0123", "main");
    await Deno.mkdir(pod, { recursive: true });
    await Deno.writeTextFile(
      join(pod, "0.log"),
      "2026-12-07T04:10:00Z stderr F 10.88.0.5:1: response:200\n",
    );
    await Deno.writeTextFile(
      join(pod, "0.log.20261207-041000"),
      "2026-12-07T04:09:50Z stderr F 10.88.0.5:1: response:200\n",
    );
    await Deno.mkdir(join(dir, "other_bench-a_4567", "main"), { recursive: true });
    const [a, b] = await readProbeTimes(dir, "default", ["bench-a", "bench-b"], "main");
    assert.equal(a!.length, 2);
    assert.deepEqual(b, []);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("steadyTable puts each kubelet's windows side by side", () => {
  const s = steadyFigures(
    { at: 0, requests: new Map(), relists: { sum: 0, count: 0 } },
    { at: 10_000, requests: new Map([["POST events/", 5]]), relists: { sum: 0.1, count: 10 } },
    { pods: 2, unprobed: 0, probes: 12, p50Ms: 3, p99Ms: 40, maxMs: 41, late: 0 },
    { pods: 2, byReason: new Map([["Started", 2], ["Unhealthy", 3]]) },
  );
  const text = steadyTable([0, 250], [
    { label: "agent", windows: [undefined, s] },
    { label: "upstream", windows: [s, undefined] },
  ]);
  assert.match(text, /\| 250 pods: event writes\/s +\| +0\.50 \| +n\/a \|/);
  assert.match(text, /\| 250 pods: PLEG relists\/s, mean relist +\| +1\.00, 10\.0 ms \|/);
  assert.match(
    text,
    /\| 250 pods: probe lateness p50 \/ p99 \/ max +\| +3 ms \/ 40 ms \/ 41 ms \|/,
  );
  assert.match(text, /\| 250 pods: probes, > 1 period late, pods unprobed +\| +12, 0, 0 \|/);
  assert.match(text, /\| 250 pods: events stored per pod +\| +2\.50 \| +n\/a \|/);
  assert.match(
    text,
    /^- 250 pods, agent, events per pod by reason: Unhealthy 1\.50, Started 1\.00$/m,
  );
});

Deno.test("tallyEvents counts one kubelet's events about the given pods, repeats included", () => {
  const ev = (host: string, name: string, reason: string, count?: number) => ({
    reason,
    count,
    source: { host },
    involvedObject: { kind: "Pod", name },
  });
  const t = tallyEvents(
    [
      ev("node-a", "p1", "Started"),
      ev("node-a", "p1", "Unhealthy", 3),
      ev("node-a", "p2", "Started", 1),
      ev("node-b", "p1", "Started"),
      ev("node-a", "other", "Started"),
      {
        reason: "Starting",
        source: { host: "node-a" },
        involvedObject: { kind: "Node", name: "p1" },
      },
    ],
    "node-a",
    ["p1", "p2"],
  );
  assert.equal(t.pods, 2);
  assert.deepEqual([...t.byReason], [["Started", 2], ["Unhealthy", 3]]);
});
