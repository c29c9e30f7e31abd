import assert from "node:assert/strict";
import { MetricsRegistry } from "./_registry.ts";
import { VolumeStatsMetrics } from "./volume_stats_metrics.ts";

const claim = (name: string, used: number, abnormal?: boolean) => ({
  pvcRef: { name, namespace: "shop" },
  stats: {
    capacityBytes: 1000,
    availableBytes: 1000 - used,
    usedBytes: used,
    inodes: 100,
    inodesFree: 90,
    inodesUsed: 10,
    ...(abnormal === undefined ? {} : { volumeHealthStats: { abnormal } }),
  },
});

Deno.test("VolumeStatsMetrics shows upstream's kubelet_volume_stats_* families per claim", async () => {
  const r = new MetricsRegistry();
  const m = new VolumeStatsMetrics(r);
  // Before the stats provider runs, and without claims, the families are absent.
  assert.equal(await r.render(), "");
  m.setSource(() => Promise.resolve([]));
  assert.equal(await r.render(), "");

  m.setSource(() => Promise.resolve([claim("db", 100), claim("logs", 5, true)]));
  const text = await r.render();
  assert.match(
    text,
    /# HELP kubelet_volume_stats_capacity_bytes \[ALPHA\] Capacity in bytes of the volume\n# TYPE kubelet_volume_stats_capacity_bytes gauge\nkubelet_volume_stats_capacity_bytes\{namespace="shop",persistentvolumeclaim="db"\} 1000\n/,
  );
  for (
    const line of [
      'kubelet_volume_stats_available_bytes{namespace="shop",persistentvolumeclaim="db"} 900',
      'kubelet_volume_stats_used_bytes{namespace="shop",persistentvolumeclaim="logs"} 5',
      'kubelet_volume_stats_inodes{namespace="shop",persistentvolumeclaim="db"} 100',
      'kubelet_volume_stats_inodes_free{namespace="shop",persistentvolumeclaim="db"} 90',
      'kubelet_volume_stats_inodes_used{namespace="shop",persistentvolumeclaim="db"} 10',
      // Health only for a claim whose driver reported it (the CSIVolumeHealth gate).
      'kubelet_volume_stats_health_status_abnormal{namespace="shop",persistentvolumeclaim="logs"} 1',
    ]
  ) assert.ok(text.includes(`${line}\n`), line);
  assert.ok(!text.includes('health_status_abnormal{namespace="shop",persistentvolumeclaim="db"}'));

  // A failing source leaves the families out of that scrape.
  m.setSource(() => Promise.reject(new Error("no stats")));
  assert.equal(await r.render(), "");
});
