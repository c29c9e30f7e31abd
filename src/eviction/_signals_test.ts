import assert from "node:assert/strict";
import { parseThresholdConfig } from "./thresholds.ts";
import { createLogger } from "../klog/klog.ts";
import { Gi, iso, Mi, podStatsOf, summaryAt, testPod } from "../testing/eviction_fixtures.ts";
import {
  byEvictionPriority,
  makeSignalObservations,
  nodeConditions,
  thresholdsMet,
  thresholdsUpdatedStats,
} from "./_signals.ts";

const T0 = Date.UTC(2026, 0, 1);

function quiet() {
  const lines: string[] = [];
  return { lines, logger: createLogger({ write: (l) => lines.push(l) }) };
}

Deno.test("makeSignalObservations observes memory against available plus working set", () => {
  const { logger } = quiet();
  const s = summaryAt(T0, { memory: { available: 3 * Gi, workingSet: 1 * Gi } });
  const { observations } = makeSignalObservations(s, logger);
  assert.deepEqual(observations.get("memory.available"), {
    available: 3 * Gi,
    capacity: 4 * Gi,
    time: iso(T0),
  });
});

Deno.test("makeSignalObservations observes allocatable memory from the pods container", () => {
  const { logger, lines } = quiet();
  const limited = summaryAt(T0, { pods: { available: 500 * Mi, workingSet: 1500 * Mi } });
  assert.deepEqual(
    makeSignalObservations(limited, logger, 8 * Gi).observations.get(
      "allocatableMemory.available",
    ),
    { available: 500 * Mi, capacity: 2000 * Mi, time: iso(T0) },
    "the pods cgroup's own limit wins",
  );
  const unlimited = summaryAt(T0, { pods: { workingSet: 1500 * Mi } });
  assert.deepEqual(
    makeSignalObservations(unlimited, logger, 2 * Gi).observations.get(
      "allocatableMemory.available",
    ),
    { available: 548 * Mi, capacity: 2 * Gi, time: iso(T0) },
    "without one, node allocatable stands in",
  );
  assert.equal(
    makeSignalObservations(unlimited, logger).observations.has("allocatableMemory.available"),
    false,
  );
  const none = makeSignalObservations(summaryAt(T0, {}), logger).observations;
  assert.equal(none.has("allocatableMemory.available"), false);
  assert.ok(lines.some((l) => l.includes('system container \\"pods\\" not found in metrics')));
});

Deno.test("makeSignalObservations observes the filesystems and process ids", () => {
  const { logger } = quiet();
  const s = summaryAt(T0, {
    nodeFs: { available: 10 * Gi, capacity: 100 * Gi, inodesFree: 5000, inodes: 100_000 },
    imageFs: { available: 20 * Gi, capacity: 200 * Gi, inodesFree: 7000, inodes: 200_000 },
    pids: { max: 32_768, current: 300 },
  });
  const { observations } = makeSignalObservations(s, logger);
  const pick = (signal: Parameters<typeof observations.get>[0]) => {
    const o = observations.get(signal);
    return o && [o.available, o.capacity];
  };
  assert.deepEqual(pick("nodefs.available"), [10 * Gi, 100 * Gi]);
  assert.deepEqual(pick("nodefs.inodesFree"), [5000, 100_000]);
  assert.deepEqual(pick("imagefs.available"), [20 * Gi, 200 * Gi]);
  assert.deepEqual(pick("imagefs.inodesFree"), [7000, 200_000]);
  // The stats provider reports containerFs as the imageFs when they are not split.
  assert.deepEqual(pick("containerfs.available"), [20 * Gi, 200 * Gi]);
  assert.deepEqual(pick("containerfs.inodesFree"), [7000, 200_000]);
  assert.deepEqual(pick("pid.available"), [32_468, 32_768]);
  assert.equal(observations.has("memory.available"), false);
});

Deno.test("makeSignalObservations finds pod stats by uid", () => {
  const { logger } = quiet();
  const pod = testPod("web");
  const s = summaryAt(T0, {}, [podStatsOf(pod, { containers: [{ name: "main", memory: 5 }] }, T0)]);
  const { statsFunc } = makeSignalObservations(s, logger);
  assert.equal(statsFunc(pod)?.memory?.workingSetBytes, 5);
  assert.equal(statsFunc(testPod("other")), undefined);
});

Deno.test("thresholdsMet compares percentages against capacity and adds minimum reclaim", () => {
  const { logger } = quiet();
  const [nodefs] = parseThresholdConfig({
    evictionHard: { "nodefs.available": "10%" },
    evictionMinimumReclaim: { "nodefs.available": "5%" },
  });
  assert.ok(nodefs);
  const at = (available: number) =>
    makeSignalObservations(
      summaryAt(T0, { nodeFs: { available, capacity: 100 * Gi } }),
      logger,
    ).observations;
  assert.equal(thresholdsMet([nodefs], at(9 * Gi), false, logger).length, 1);
  assert.equal(thresholdsMet([nodefs], at(11 * Gi), false, logger).length, 0);
  assert.equal(thresholdsMet([nodefs], at(11 * Gi), true, logger).length, 1, "below 15%");
  assert.equal(thresholdsMet([nodefs], at(16 * Gi), true, logger).length, 0);
});

Deno.test("thresholdsMet skips a signal without an observation and says so", () => {
  const { logger, lines } = quiet();
  const thresholds = parseThresholdConfig({ evictionHard: { "memory.available": "100Mi" } });
  const { observations } = makeSignalObservations(summaryAt(T0, {}), logger);
  assert.deepEqual(thresholdsMet(thresholds, observations, false, logger), []);
  assert.ok(
    lines.some((l) =>
      l.includes("Eviction manager: no observation found for eviction signal") &&
      l.includes('signal="memory.available"')
    ),
    lines.join("\n"),
  );
});

Deno.test("thresholdsUpdatedStats drops thresholds whose sample did not change", () => {
  const { logger } = quiet();
  const thresholds = parseThresholdConfig({ evictionHard: { "memory.available": "100Mi" } });
  const obs = (ms: number) =>
    makeSignalObservations(
      summaryAt(ms, { memory: { available: 10 * Mi, workingSet: Gi } }),
      logger,
    ).observations;
  assert.equal(thresholdsUpdatedStats(thresholds, obs(T0), new Map(), logger).length, 1);
  assert.equal(thresholdsUpdatedStats(thresholds, obs(T0), obs(T0), logger).length, 0);
  assert.equal(thresholdsUpdatedStats(thresholds, obs(T0 + 10_000), obs(T0), logger).length, 1);
});

Deno.test("byEvictionPriority puts memory first and nodeConditions names each once", () => {
  const thresholds = parseThresholdConfig({
    evictionHard: {
      "nodefs.available": "10%",
      "pid.available": "100",
      "imagefs.available": "15%",
      "memory.available": "100Mi",
    },
  });
  assert.deepEqual(byEvictionPriority(thresholds).map((t) => t.signal), [
    "memory.available",
    "nodefs.available",
    "pid.available",
    "imagefs.available",
  ]);
  assert.deepEqual(nodeConditions(thresholds), ["DiskPressure", "PIDPressure", "MemoryPressure"]);
});
