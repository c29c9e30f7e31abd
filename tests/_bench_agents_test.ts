import assert from "node:assert/strict";
import { settledWithin, sharedConfigLines } from "./_bench_agents.ts";

Deno.test("settledWithin waits for a promise, but not past its limit, and says what did not end", async () => {
  const said: string[] = [];
  const error = console.error;
  console.error = (...a: unknown[]) => void said.push(a.join(" "));
  try {
    await settledWithin(Promise.resolve(), 1_000, "quick");
    assert.deepEqual(said, []);
    const t0 = performance.now();
    await settledWithin(new Promise(() => {}), 20, "the pod watch of upstream");
    assert.ok(performance.now() - t0 < 1_000);
    assert.deepEqual(said, [
      "bench: the pod watch of upstream did not end within 0.02 s; going on",
    ]);
  } finally {
    console.error = error;
  }
});

Deno.test("sharedConfigLines sets maxPods only above upstream's default of 110, and a cluster DNS", () => {
  assert.ok(!sharedConfigLines("/d").some((l) => l.startsWith("maxPods")));
  assert.ok(!sharedConfigLines("/d", 110).some((l) => l.startsWith("maxPods")));
  assert.ok(sharedConfigLines("/d", 250).includes("maxPods: 250"));
  assert.ok(sharedConfigLines("/d").includes("podLogsDir: /d/pod-logs"));
  // Both kubelets get a cluster DNS, as on any kubeadm node (no MissingClusterDNS event storm).
  assert.ok(sharedConfigLines("/d").includes("clusterDNS: [10.96.0.10]"));
  assert.ok(sharedConfigLines("/d").includes("clusterDomain: cluster.local"));
});
