import assert from "node:assert/strict";
import { MetricsRegistry } from "./_registry.ts";
import { parseExposition } from "./prometheus.ts";
import { VolumeMetrics } from "./volume_metrics.ts";

async function families(r: MetricsRegistry) {
  return new Map(parseExposition(await r.render()).map((f) => [f.name, f]));
}

Deno.test("VolumeMetrics registers upstream's names, types, labels and buckets", async () => {
  const r = new MetricsRegistry();
  const m = new VolumeMetrics(r);
  m.observeOperation("kubernetes.io/empty-dir", "volume_mount", 0.3, false);
  m.observeOperation("kubernetes.io/secret", "volume_unmount", 0.01, true);
  m.observeEndToEnd("kubernetes.io/empty-dir", "overall_volume_mount", 0.4);
  m.setVolumeCountsSource(() =>
    new Map([["desired_state_of_world", new Map([["kubernetes.io/projected", 2]])]])
  );
  m.setOrphanSweep(3, 1);
  const got = await families(r);
  const want: [string, string, string[]][] = [
    ["storage_operation_duration_seconds", "histogram", [
      "migrated",
      "operation_name",
      "status",
      "volume_plugin",
    ]],
    ["volume_operation_total_seconds", "histogram", ["operation_name", "plugin_name"]],
    ["volume_manager_total_volumes", "gauge", ["plugin_name", "state"]],
    ["reconstruct_volume_operations_total", "counter", []],
    ["reconstruct_volume_operations_errors_total", "counter", []],
    ["force_cleaned_failed_volume_operations_total", "counter", []],
    ["force_cleaned_failed_volume_operation_errors_total", "counter", []],
    ["kubelet_orphan_pod_cleaned_volumes", "gauge", []],
    ["kubelet_orphan_pod_cleaned_volumes_errors", "gauge", []],
  ];
  assert.deepEqual([...got.keys()].sort(), want.map(([n]) => n).sort());
  for (const [name, type, labels] of want) {
    const f = got.get(name)!;
    assert.equal(f.type, type, name);
    assert.match(f.help, /^\[ALPHA\] /, name);
    for (const s of f.samples) {
      assert.deepEqual(Object.keys(s.labels).filter((k) => k !== "le").sort(), labels, name);
    }
  }
  const storage = got.get("storage_operation_duration_seconds")!.samples;
  const bounds = storage.filter((s) =>
    s.suffix === "_bucket" && s.labels.operation_name === "volume_mount"
  ).map((s) => s.labels.le);
  assert.deepEqual(bounds, "0.1 0.25 0.5 1 2.5 5 10 15 25 50 120 300 600 +Inf".split(" "));
  const failed = storage.find((s) => s.suffix === "_count" && s.labels.status === "fail-unknown");
  assert.deepEqual(failed?.labels, {
    migrated: "false",
    operation_name: "volume_unmount",
    status: "fail-unknown",
    volume_plugin: "kubernetes.io/secret",
  });
  assert.equal(
    got.get("volume_manager_total_volumes")!.samples[0]?.value,
    2,
  );
  assert.equal(got.get("kubelet_orphan_pod_cleaned_volumes")!.samples[0]?.value, 3);
  assert.equal(got.get("kubelet_orphan_pod_cleaned_volumes_errors")!.samples[0]?.value, 1);
  // No reconstruction here: the counters are shown at 0, as upstream shows them before any.
  assert.equal(got.get("reconstruct_volume_operations_total")!.samples[0]?.value, 0);
});

Deno.test("VolumeMetrics leaves volume_manager_total_volumes out until a volume manager is its source", async () => {
  const r = new MetricsRegistry();
  new VolumeMetrics(r);
  assert.equal((await families(r)).has("volume_manager_total_volumes"), false);
});
