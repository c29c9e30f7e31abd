import assert from "node:assert/strict";
import { opDelta, opsBetween, opsSection, opsTable, runtimeOpTotals } from "./_bench_cri_ops.ts";

const scrape = (run: number, create: number) =>
  [
    "# HELP kubelet_runtime_operations_duration_seconds [ALPHA] Duration in seconds of runtime operations. Broken down by operation type.",
    "# TYPE kubelet_runtime_operations_duration_seconds histogram",
    `kubelet_runtime_operations_duration_seconds_bucket{operation_type="run_podsandbox",le="0.005"} 0`,
    `kubelet_runtime_operations_duration_seconds_sum{operation_type="run_podsandbox"} ${
      run * 0.15
    }`,
    `kubelet_runtime_operations_duration_seconds_count{operation_type="run_podsandbox"} ${run}`,
    `kubelet_runtime_operations_duration_seconds_sum{operation_type="create_container"} ${
      create * 0.02
    }`,
    `kubelet_runtime_operations_duration_seconds_count{operation_type="create_container"} ${create}`,
    `kubelet_runtime_operations_total{operation_type="run_podsandbox"} ${run}`,
    "kubelet_runtime_operations_duration_seconds_count 7",
  ].join("\n");

Deno.test("runtimeOpTotals reads the histogram's sums and counts per operation type", () => {
  assert.deepEqual(
    Object.fromEntries(runtimeOpTotals(scrape(2, 3))),
    {
      run_podsandbox: { sum: 0.3, count: 2 },
      create_container: { sum: 0.06, count: 3 },
    },
  );
});

Deno.test("opDelta keeps what happened between two scrapes", () => {
  const d = opDelta(runtimeOpTotals(scrape(2, 3)), runtimeOpTotals(scrape(12, 3)));
  assert.deepEqual([...d.keys()], ["run_podsandbox"]);
  assert.equal(d.get("run_podsandbox")?.count, 10);
  assert.ok(Math.abs(d.get("run_podsandbox")!.sum - 1.5) < 1e-9);
});

Deno.test("opsTable shows calls per pod and the mean of each kubelet, most time first", () => {
  const lines = opsTable(10, [
    { label: "agent", ops: runtimeOpTotals(scrape(10, 10)) },
    { label: "upstream", ops: runtimeOpTotals(scrape(10, 0)) },
  ]).split("\n");
  assert.match(lines[0]!, /operation_type.*agent: calls per pod.*agent: mean.*upstream: mean/);
  assert.match(
    lines[2]!,
    /^\| run_podsandbox\s+\|\s+1\.0 \|\s+150\.0 ms \|\s+1\.0 \|\s+150\.0 ms \|$/,
  );
  assert.match(lines[3]!, /^\| create_container\s+\|\s+1\.0 \|\s+20\.0 ms \|\s+0 \|\s+n\/a \|$/);
});

Deno.test("opsBetween gives the delta, or the scrape's error", () => {
  const fail = new Error("502 from the node proxy");
  assert.equal(opsBetween(fail, runtimeOpTotals(scrape(1, 1))), fail);
  assert.equal(opsBetween(runtimeOpTotals(scrape(1, 1)), fail), fail);
  const d = opsBetween(runtimeOpTotals(scrape(1, 1)), runtimeOpTotals(scrape(4, 1)));
  assert.ok(!(d instanceof Error));
  assert.equal(d.get("run_podsandbox")?.count, 3);
});

Deno.test("opsSection names when, tables the kubelets read and says which were not", () => {
  const lines = opsSection("burst of 10", 10, [
    { label: "agent", ops: runtimeOpTotals(scrape(10, 10)) },
    { label: "upstream", ops: new Error("timed out") },
  ]);
  assert.match(lines[0]!, /^### CRI calls while each kubelet started its burst of 10 \(/);
  const text = lines.join("\n");
  assert.match(text, /\| run_podsandbox\s+\|\s+1\.0 \|\s+150\.0 ms \|/);
  assert.doesNotMatch(text, /upstream: calls per pod/);
  assert.match(text, /- upstream: \/metrics not read: timed out/);
});
