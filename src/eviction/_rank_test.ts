import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import { makeSignalObservations } from "./_signals.ts";
import { createLogger } from "../klog/klog.ts";
import {
  container,
  Gi,
  Mi,
  podStatsOf,
  type PodUsage,
  summaryAt,
  testPod,
} from "../testing/eviction_fixtures.ts";
import {
  buildSignalToRankFunc,
  podRequest,
  rankDiskPressure,
  rankMemoryPressure,
  rankPIDPressure,
} from "./_rank.ts";

const T0 = Date.UTC(2026, 0, 1);

function ranked(
  rank: (pods: V1Pod[], stats: ReturnType<typeof makeSignalObservations>["statsFunc"]) => void,
  entries: readonly [V1Pod, PodUsage | undefined][],
): string[] {
  const stats = entries.flatMap(([p, u]) => u ? [podStatsOf(p, u, T0)] : []);
  const { statsFunc } = makeSignalObservations(
    summaryAt(T0, {}, stats),
    createLogger({ write: () => {} }),
  );
  const pods = entries.map(([p]) => p);
  rank(pods, statsFunc);
  return pods.map((p) => p.metadata?.name ?? "");
}

const mem = (memory: number): PodUsage => ({ containers: [{ name: "main", memory }] });

Deno.test("rankMemoryPressure evicts pods over their requests before pods within them", () => {
  const burstable = testPod("burstable", { containers: [container({ memory: "200Mi" })] });
  const bestEffort = testPod("best-effort");
  assert.deepEqual(
    ranked(rankMemoryPressure, [[burstable, mem(150 * Mi)], [bestEffort, mem(60 * Mi)]]),
    ["best-effort", "burstable"],
  );
});

Deno.test("rankMemoryPressure orders by priority, then by usage above the request", () => {
  const high = testPod("high", { priority: 1000 });
  const low = testPod("low", { priority: 10 });
  const lowBig = testPod("low-big", { priority: 10 });
  const requested = testPod("requested", {
    priority: 10,
    containers: [container({ memory: "400Mi" })],
  });
  assert.deepEqual(
    ranked(rankMemoryPressure, [
      [high, mem(900 * Mi)],
      [low, mem(100 * Mi)],
      [requested, mem(450 * Mi)],
      [lowBig, mem(300 * Mi)],
    ]),
    ["low-big", "low", "requested", "high"],
  );
});

Deno.test("rankMemoryPressure puts pods without stats first", () => {
  assert.deepEqual(
    ranked(rankMemoryPressure, [[testPod("measured"), mem(Gi)], [testPod("unknown"), undefined]]),
    ["unknown", "measured"],
  );
});

Deno.test("rankDiskPressure counts the measured filesystems against ephemeral requests", () => {
  const requested = testPod("requested", {
    containers: [container({ "ephemeral-storage": "2Gi" })],
  });
  const logs = testPod("logs");
  const volume = testPod("volume", {
    volumes: [{ name: "scratch", emptyDir: {} }, { name: "ram", emptyDir: { medium: "Memory" } }],
  });
  const usage = {
    requested: { containers: [{ name: "main", rootfs: Gi, logs: 0 }] },
    logs: { containers: [{ name: "main", rootfs: 0, logs: 100 * Mi }] },
    volume: {
      containers: [{ name: "main", rootfs: 0, logs: 0 }],
      volumes: { scratch: 300 * Mi, ram: 5 * Gi },
    },
  };
  const entries: [V1Pod, PodUsage][] = [
    [requested, usage.requested],
    [logs, usage.logs],
    [volume, usage.volume],
  ];
  // Everything on one filesystem: the 1Gi writable layer is within its 2Gi request.
  assert.deepEqual(
    ranked(
      rankDiskPressure(["images", "root", "logs", "localVolumeSource"], "ephemeral-storage"),
      entries,
    ),
    ["volume", "logs", "requested"],
  );
  // A dedicated imagefs: nodefs pressure counts logs and local volumes only.
  const layout = buildSignalToRankFunc(true, false);
  assert.deepEqual(ranked(layout.get("nodefs.available")!, entries), [
    "volume",
    "logs",
    "requested",
  ]);
  assert.deepEqual(ranked(layout.get("imagefs.available")!, entries.slice(0, 2)), [
    "logs",
    "requested",
  ]);
});

Deno.test("rankPIDPressure orders by priority, then by process count", () => {
  const many = testPod("many", { priority: 100 });
  const few = testPod("few");
  const more = testPod("more");
  const procs = (processes: number): PodUsage => ({ containers: [], processes });
  assert.deepEqual(
    ranked(rankPIDPressure, [[many, procs(500)], [few, procs(3)], [more, procs(40)]]),
    ["more", "few", "many"],
  );
});

Deno.test("podRequest sums containers, takes init maxima, and adds overhead when non-zero", () => {
  const pod = testPod("p", {
    containers: [container({ memory: "100Mi" }), container({ memory: "50Mi" }, {}, "side")],
  });
  pod.spec!.initContainers = [container({ memory: "300Mi" }, {}, "init")];
  pod.spec!.overhead = { memory: "10Mi", cpu: "100m" };
  assert.deepEqual(podRequest(pod, "memory"), { n: BigInt(310 * Mi), s: 0 });
  assert.deepEqual(podRequest(testPod("none"), "memory"), { n: 0n, s: 0 });
  const podLevel = testPod("pl", { containers: [container({ memory: "100Mi" })] });
  podLevel.spec!.resources = { requests: { memory: "1Gi" } };
  assert.deepEqual(podRequest(podLevel, "memory"), { n: BigInt(Gi), s: 0 });
});
