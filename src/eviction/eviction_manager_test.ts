import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import { FakeClock } from "../util/clock.ts";
import type { ObjectRef } from "../client/record.ts";
import {
  EvictionConfigError,
  evictionConfigFrom,
  EvictionManager,
  type EvictionManagerOptions,
  type EvictionStatus,
  parseThresholdConfig,
  type ThresholdConfig,
} from "./eviction_manager.ts";
import { ThresholdConfigError } from "./thresholds.ts";
import { createLogger } from "../klog/klog.ts";
import {
  container,
  Gi,
  Mi,
  type NodeSample,
  podStatsOf,
  type PodUsage,
  summaryAt,
  testPod,
} from "../testing/eviction_fixtures.ts";

const NODE: ObjectRef = { kind: "Node", name: "node-a", uid: "node-a", namespace: "" };

interface Kill {
  readonly pod: string;
  readonly status: EvictionStatus;
  readonly grace: number;
}

interface Event {
  readonly ref: ObjectRef;
  readonly type: string;
  readonly reason: string;
  readonly message: string;
}

/** A manager over a mutable node sample and pod set, with every effect recorded. */
function harness(thresholds: ThresholdConfig, opts: Partial<EvictionManagerOptions> = {}) {
  const clock = new FakeClock();
  const state = {
    node: {} as NodeSample,
    pods: [] as [V1Pod, PodUsage | undefined][],
    dedicatedImageFs: false,
    cleanedUp: new Set<string>(),
    onImageGC: () => {},
  };
  const kills: Kill[] = [];
  const events: Event[] = [];
  const gc: string[] = [];
  const lines: string[] = [];
  /** Each summary taken: whether it had the containers' writable layers. */
  const summaries: boolean[] = [];
  const manager = new EvictionManager({
    thresholds: parseThresholdConfig(thresholds),
    summary: (_signal, o) => {
      const layers = o?.writableLayers ?? true;
      summaries.push(layers);
      const usage = (u: PodUsage): PodUsage =>
        layers ? u : {
          ...u,
          containers: u.containers.map(({ rootfs: _r, rootfsInodes: _i, ...c }) => c),
        };
      return Promise.resolve(
        summaryAt(
          clock.now(),
          state.node,
          state.pods.flatMap(([p, u]) => u ? [podStatsOf(p, usage(u), clock.now())] : []),
        ),
      );
    },
    activePods: () => state.pods.map(([p]) => p),
    killPod: (pod, status, grace) => {
      kills.push({ pod: pod.metadata?.name ?? "", status, grace });
      state.pods = state.pods.filter(([p]) => p !== pod);
      return Promise.resolve();
    },
    podCleanedUp: (pod) => state.cleanedUp.has(pod.metadata?.name ?? ""),
    imageGC: {
      deleteUnusedImages: () => {
        gc.push("images");
        state.onImageGC();
        return Promise.resolve(0);
      },
    },
    containerGC: {
      deleteAllUnusedContainers: () => {
        gc.push("containers");
        return Promise.resolve();
      },
    },
    diskInfo: {
      hasDedicatedImageFs: () => Promise.resolve(state.dedicatedImageFs),
      hasDedicatedContainerFs: () => Promise.resolve(false),
    },
    nodeAllocatableMemory: () => undefined,
    nodeRef: NODE,
    recorder: {
      event: (ref, type, reason, message) => events.push({ ref, type, reason, message }),
    },
    clock,
    logger: createLogger({ write: (l) => lines.push(l), verbosity: 4 }),
    ...opts,
  });
  /** Synchronizes after moving the clock on by `ms` (a new sample each time). */
  const sync = async (ms = 10_000) => {
    clock.step(ms);
    return (await manager.synchronize()).map((p) => p.metadata?.name);
  };
  return { clock, state, kills, events, gc, lines, summaries, manager, sync };
}

const memory = (bytes: number): PodUsage => ({ containers: [{ name: "main", memory: bytes }] });
const underMemory = { memory: { available: 50 * Mi, workingSet: 7 * Gi } };
const plentyMemory = { memory: { available: 4 * Gi, workingSet: 3 * Gi } };

Deno.test("evictionConfigFrom parses the thresholds and carries the periods", () => {
  const cfg = evictionConfigFrom({
    evictionHard: { "memory.available": "100Mi", "nodefs.available": "0%" },
    evictionSoft: { "memory.available": "300Mi" },
    evictionSoftGracePeriod: { "memory.available": "1m30s" },
    evictionPressureTransitionPeriod: 300_000,
    evictionMaxPodGracePeriod: 60,
    localStorageCapacityIsolation: true,
    enforceNodeAllocatable: ["pods"],
  });
  assert.deepEqual(cfg.thresholds.map((t) => [t.signal, t.gracePeriod]), [
    ["memory.available", 0],
    ["memory.available", 90_000],
    ["allocatableMemory.available", 0],
  ]);
  assert.equal(cfg.pressureTransitionPeriodMs, 300_000);
  assert.equal(cfg.maxPodGracePeriodSeconds, 60);
  const ignoring = evictionConfigFrom(
    {
      evictionHard: { "memory.available": "100Mi" },
      evictionPressureTransitionPeriod: 300_000,
      localStorageCapacityIsolation: true,
      enforceNodeAllocatable: ["pods"],
    },
    { experimentalNodeAllocatableIgnoreEvictionThreshold: true },
  );
  assert.deepEqual(ignoring.thresholds.map((t) => t.signal), ["memory.available"]);
});

Deno.test("evictionConfigFrom rejects bad thresholds and memcg notifications", () => {
  const base = { evictionPressureTransitionPeriod: 300_000, localStorageCapacityIsolation: true };
  assert.throws(
    () => evictionConfigFrom({ ...base, evictionSoft: { "memory.available": "300Mi" } }),
    (e: unknown) =>
      e instanceof ThresholdConfigError && e.field === "evictionSoft" &&
      e.value === "300Mi" &&
      e.message ===
        "grace period must be specified for the soft eviction threshold memory.available",
  );
  assert.throws(
    () => evictionConfigFrom({ ...base, evictionHard: { "memory.free": "1Gi" } }),
    /unsupported eviction signal memory.free/,
  );
  assert.throws(
    () => evictionConfigFrom({ ...base, kernelMemcgNotification: true }),
    (e: unknown) => e instanceof EvictionConfigError && /is not supported yet/.test(e.message),
  );
});

Deno.test("EvictionManager evicts the BestEffort pod using memory before a Burstable one within requests", async () => {
  const h = harness({ evictionHard: { "memory.available": "100Mi" } });
  const burstable = testPod("burstable", { containers: [container({ memory: "200Mi" })] });
  const bestEffort = testPod("best-effort");
  h.state.node = underMemory;
  h.state.pods = [[burstable, memory(150 * Mi)], [bestEffort, memory(60 * Mi)]];

  assert.deepEqual(await h.sync(), ["best-effort"]);
  const message = "The node was low on resource: memory. " +
    "Threshold quantity: 100Mi, available: 50Mi. " +
    "Container main was using 60Mi, request is 0, has larger consumption of memory. ";
  assert.deepEqual(h.kills, [{
    pod: "best-effort",
    grace: 1,
    status: {
      phase: "Failed",
      reason: "Evicted",
      message,
      conditions: [{
        type: "DisruptionTarget",
        status: "True",
        reason: "TerminationByKubelet",
        message,
      }],
    },
  }]);
  assert.deepEqual(h.events.map((e) => [e.ref.kind, e.ref.name, e.type, e.reason, e.message]), [
    ["Node", "node-a", "Warning", "EvictionThresholdMet", "Attempting to reclaim memory"],
    ["Pod", "best-effort", "Warning", "Evicted", message],
  ]);
  // client-go's GetReference names the API version too (this manager's own podRef did not).
  assert.equal(h.events[1]?.ref.apiVersion, "v1");
  assert.ok(h.manager.isUnderMemoryPressure());
  assert.ok(!h.manager.isUnderDiskPressure() && !h.manager.isUnderPIDPressure());
  assert.deepEqual(h.gc, [], "memory pressure has no node-level reclaim");
});

Deno.test("EvictionManager names a request and evicts one pod per pass", async () => {
  const h = harness({ evictionHard: { "memory.available": "100Mi" } });
  const a = testPod("a", { containers: [container({ memory: "64Mi" })] });
  const b = testPod("b", { containers: [container({ memory: "0.5Gi" })] });
  h.state.node = underMemory;
  h.state.pods = [[a, memory(100 * Mi)], [b, memory(600 * Mi)]];
  assert.deepEqual(await h.sync(), ["b"]);
  assert.match(
    h.kills[0]?.status.message ?? "",
    /Container main was using 600Mi, request is 512Mi, has larger consumption of memory\. $/,
  );
  assert.deepEqual(await h.sync(), ["a"]);
  assert.equal(h.kills.length, 2);
});

Deno.test("EvictionManager soft threshold evicts only after its grace period, with a capped grace", async () => {
  const h = harness({
    evictionSoft: { "memory.available": "1Gi" },
    evictionSoftGracePeriod: { "memory.available": "1m30s" },
  }, { maxPodGracePeriodSeconds: 30 });
  h.state.node = { memory: { available: 500 * Mi, workingSet: 7 * Gi } };
  h.state.pods = [
    [testPod("quick", { terminationGracePeriodSeconds: 10 }), memory(200 * Mi)],
    [testPod("slow", { terminationGracePeriodSeconds: 120 }), memory(100 * Mi)],
  ];
  assert.deepEqual(await h.sync(), []);
  assert.ok(h.manager.isUnderMemoryPressure(), "the condition does not wait for the grace period");
  assert.deepEqual(await h.sync(60_000), []);
  assert.deepEqual(await h.sync(30_000), ["quick"]);
  assert.equal(h.kills[0]?.grace, 10, "min(evictionMaxPodGracePeriod, the pod's own)");
  assert.deepEqual(await h.sync(), ["slow"]);
  assert.equal(h.kills[1]?.grace, 30);
});

Deno.test("EvictionManager keeps MemoryPressure for the transition period, then clears it", async () => {
  const h = harness({ evictionHard: { "memory.available": "100Mi" } }, {
    pressureTransitionPeriodMs: 300_000,
  });
  h.state.node = underMemory;
  await h.sync();
  assert.ok(h.manager.isUnderMemoryPressure());
  assert.ok(h.lines.some((l) => l.includes("no pods are active to evict")));
  h.state.node = plentyMemory;
  await h.sync(10_000);
  assert.ok(h.manager.isUnderMemoryPressure(), "still within the transition period");
  await h.sync(289_999);
  assert.ok(h.manager.isUnderMemoryPressure(), "1 ms before the period ends");
  await h.sync(1);
  assert.ok(!h.manager.isUnderMemoryPressure());
  assert.deepEqual(h.manager.nodeConditions, []);
});

Deno.test("EvictionManager keeps a met threshold until its minimum reclaim is satisfied", async () => {
  const h = harness({
    evictionHard: { "memory.available": "100Mi" },
    evictionMinimumReclaim: { "memory.available": "500Mi" },
  });
  h.state.pods = ["a", "b", "c"].map((n) => [testPod(n), memory(10 * Mi)]);
  h.state.node = underMemory;
  assert.equal((await h.sync()).length, 1);
  h.state.node = { memory: { available: 300 * Mi, workingSet: 7 * Gi } };
  assert.equal((await h.sync()).length, 1, "above 100Mi but below 100Mi + 500Mi");
  h.state.node = { memory: { available: 700 * Mi, workingSet: 7 * Gi } };
  assert.deepEqual(await h.sync(), [], "reclaimed past the minimum");
  assert.equal(h.kills.length, 2);
  h.state.node = { memory: { available: 300 * Mi, workingSet: 7 * Gi } };
  assert.deepEqual(await h.sync(), [], "no longer in effect: 300Mi is above the threshold");
});

Deno.test("EvictionManager does not evict twice on the same sample", async () => {
  const h = harness({ evictionHard: { "memory.available": "100Mi" } });
  h.state.node = underMemory;
  h.state.pods = [[testPod("a"), memory(Mi)], [testPod("b"), memory(Mi)]];
  assert.equal((await h.sync()).length, 1);
  assert.deepEqual(await h.sync(0), [], "the summary's time did not move");
  assert.ok(h.manager.isUnderMemoryPressure());
});

Deno.test("EvictionManager ranks by priority among pods over their requests", async () => {
  const h = harness({ evictionHard: { "memory.available": "100Mi" } });
  h.state.node = underMemory;
  h.state.pods = [
    [testPod("important", { priority: 1000 }), memory(2 * Gi)],
    [testPod("batch", { priority: 0 }), memory(10 * Mi)],
  ];
  assert.deepEqual(await h.sync(), ["batch"]);
});

Deno.test("EvictionManager never evicts a critical pod", async () => {
  const h = harness({ evictionHard: { "memory.available": "100Mi" } });
  h.state.node = underMemory;
  const staticPod = testPod("static", { annotations: { "kubernetes.io/config.source": "file" } });
  h.state.pods = [
    [staticPod, memory(3 * Gi)],
    [testPod("system", { priority: 2_000_000_000 }), memory(2 * Gi)],
    [testPod("user"), memory(10 * Mi)],
  ];
  assert.deepEqual(await h.sync(), ["user"]);
  assert.deepEqual(await h.sync(), []);
  assert.equal(
    h.lines.filter((l) => l.includes("Eviction manager: cannot evict a critical pod")).length,
    3,
    "the static pod ranks first on both passes; the system-critical one, last by priority, on the second",
  );
  assert.ok(h.lines.some((l) => l.includes("Eviction manager: unable to evict any pods")));
});

const diskPressure = { nodeFs: { available: 5 * Gi, capacity: 100 * Gi } };

Deno.test("EvictionManager reclaims disk with container and image GC before evicting", async () => {
  const h = harness({ evictionHard: { "nodefs.available": "10%" } });
  h.state.node = diskPressure;
  h.state.pods = [[testPod("writer"), { containers: [{ name: "main", rootfs: 3 * Gi, logs: 0 }] }]];
  h.state.onImageGC = () => {
    h.state.node = { nodeFs: { available: 30 * Gi, capacity: 100 * Gi } };
  };
  assert.deepEqual(await h.sync(), []);
  assert.deepEqual(h.gc, ["containers", "images"]);
  assert.deepEqual(h.kills, []);
  assert.ok(h.manager.isUnderDiskPressure());
  assert.deepEqual(h.events.map((e) => e.message), ["Attempting to reclaim ephemeral-storage"]);
  assert.ok(h.lines.some((l) => l.includes("able to reduce resource pressure without evicting")));
});

Deno.test("EvictionManager evicts the largest disk user when garbage collection is not enough", async () => {
  const h = harness({ evictionHard: { "nodefs.available": "10%" } });
  h.state.node = diskPressure;
  h.state.pods = [
    [testPod("small"), { containers: [{ name: "main", rootfs: 100 * Mi, logs: 0 }] }],
    [testPod("writer"), { containers: [{ name: "main", rootfs: 3 * Gi, logs: Gi }] }],
  ];
  assert.deepEqual(await h.sync(), ["writer"]);
  assert.deepEqual(h.gc, ["containers", "images"]);
  assert.equal(
    h.kills[0]?.status.message,
    "The node was low on resource: ephemeral-storage. " +
      "Threshold quantity: 10737418400, available: 5Gi. " +
      "Container main was using 4Gi, request is 0, has larger consumption of ephemeral-storage. ",
  );
  assert.equal(h.kills[0]?.grace, 1);
});

Deno.test("EvictionManager takes the writable layers only for a pod's storage limit or a disk ranking", async () => {
  const h = harness({ evictionHard: { "memory.available": "100Mi", "nodefs.available": "10%" } });
  h.state.node = { ...plentyMemory, nodeFs: { available: 50 * Gi, capacity: 100 * Gi } };
  h.state.pods = [[testPod("plain"), memory(Gi)]];
  assert.deepEqual(await h.sync(), []);
  assert.deepEqual(h.summaries, [false], "no pod has an ephemeral-storage limit");
  const limited = testPod("limited", {
    containers: [container({}, { "ephemeral-storage": "1Gi" })],
  });
  h.state.pods.push([limited, { containers: [{ name: "main", rootfs: 100 * Mi, logs: 0 }] }]);
  await h.sync();
  assert.deepEqual(h.summaries, [false, true], "a pod's limit reads its writable layer");
  // Under disk pressure without such a pod: the ranking takes them before it ranks.
  h.summaries.length = 0;
  h.state.node = { ...plentyMemory, ...diskPressure };
  h.state.pods = [
    [testPod("small"), { containers: [{ name: "main", rootfs: 100 * Mi, logs: 0 }] }],
    [testPod("writer"), { containers: [{ name: "main", rootfs: 3 * Gi, logs: 0 }] }],
  ];
  assert.deepEqual(await h.sync(), ["writer"], "ranked by its writable layer");
  assert.deepEqual(h.summaries, [false, false, true], "the pass, after GC, before the ranking");
});

Deno.test("EvictionManager reports PIDPressure and evicts the pod with most processes", async () => {
  const h = harness({ evictionHard: { "pid.available": "1000" } });
  h.state.node = { pids: { max: 32_768, current: 32_000 } };
  h.state.pods = [
    [testPod("few"), { containers: [], processes: 10 }],
    [testPod("forky"), { containers: [], processes: 30_000 }],
  ];
  assert.deepEqual(await h.sync(), ["forky"]);
  assert.ok(h.manager.isUnderPIDPressure());
  assert.equal(
    h.kills[0]?.status.message,
    "The node was low on resource: pids. Threshold quantity: 1k, available: 768. ",
  );
});

Deno.test("EvictionManager evicts a pod whose emptyDir outgrows its sizeLimit", async () => {
  const h = harness({});
  const pod = testPod("cache", {
    volumes: [{ name: "scratch", emptyDir: { sizeLimit: "100Mi" } }, { name: "ok", emptyDir: {} }],
  });
  h.state.pods = [
    [pod, { containers: [], volumes: { scratch: 150 * Mi, ok: 5 * Gi } }],
    [testPod("fine"), { containers: [], volumes: {} }],
  ];
  assert.deepEqual(await h.sync(), ["cache"]);
  assert.deepEqual(h.kills, [{
    pod: "cache",
    grace: 1,
    status: {
      phase: "Failed",
      reason: "Evicted",
      message: 'Usage of EmptyDir volume "scratch" exceeds the limit "100Mi". ',
    },
  }]);
  assert.deepEqual(h.events.map((e) => [e.reason, e.message]), [
    ["Evicted", 'Usage of EmptyDir volume "scratch" exceeds the limit "100Mi". '],
  ]);
});

Deno.test("EvictionManager leaves local storage alone without capacity isolation", async () => {
  const h = harness({}, { localStorageCapacityIsolation: false });
  const pod = testPod("cache", { volumes: [{ name: "v", emptyDir: { sizeLimit: "1Mi" } }] });
  h.state.pods = [[pod, { containers: [], volumes: { v: Gi } }]];
  assert.deepEqual(await h.sync(), []);
  assert.deepEqual(h.kills, []);
});

Deno.test("EvictionManager evicts pods over their ephemeral-storage limits", async () => {
  const h = harness({});
  const greedy = testPod("greedy", {
    containers: [container({}, { "ephemeral-storage": "1Gi" })],
  });
  const total = testPod("total", {
    containers: [
      container({}, { "ephemeral-storage": "512Mi" }, "a"),
      container({}, { "ephemeral-storage": "512Mi" }, "b"),
    ],
  });
  h.state.pods = [
    [greedy, { containers: [{ name: "main", rootfs: 800 * Mi, logs: 300 * Mi }] }],
    [total, {
      containers: [{ name: "a", rootfs: 100 * Mi, logs: 0 }, { name: "b", rootfs: 0, logs: 0 }],
      ephemeral: 2 * Gi,
    }],
  ];
  assert.deepEqual(await h.sync(), ["greedy", "total"]);
  assert.deepEqual(h.kills.map((k) => [k.status.message, k.grace]), [
    ['Container main exceeded its local ephemeral storage limit "1Gi". ', 1],
    ["Pod ephemeral local storage usage exceeds the total limit of containers 1Gi. ", 1],
  ]);
});

Deno.test("EvictionManager.admit refuses BestEffort pods under memory pressure", async () => {
  const h = harness({ evictionHard: { "memory.available": "100Mi" } });
  assert.deepEqual(h.manager.admit(testPod("early")), { admit: true });
  h.state.node = underMemory;
  await h.sync();
  assert.deepEqual(h.manager.admit(testPod("best-effort")), {
    admit: false,
    reason: "Evicted",
    message: "The node had condition: [MemoryPressure]. ",
  });
  assert.deepEqual(
    h.manager.admit(testPod("burstable", { containers: [container({ memory: "1Mi" })] })),
    { admit: true },
  );
  const tolerant = testPod("tolerant", {
    tolerations: [{ key: "node.kubernetes.io/memory-pressure", operator: "Exists" }],
  });
  assert.deepEqual(h.manager.admit(tolerant), { admit: true });
  const wrongEffect = testPod("wrong-effect", {
    tolerations: [{ key: "node.kubernetes.io/memory-pressure", effect: "NoExecute" }],
  });
  assert.equal(h.manager.admit(wrongEffect).admit, false);
  const critical = testPod("critical", { priority: 2_000_000_000 });
  assert.deepEqual(h.manager.admit(critical), { admit: true });
});

Deno.test("EvictionManager.admit refuses every non-critical pod under disk pressure", async () => {
  const h = harness({
    evictionHard: { "memory.available": "100Mi", "nodefs.available": "10%" },
  });
  h.state.node = { ...underMemory, ...diskPressure };
  await h.sync();
  const burstable = testPod("burstable", { containers: [container({ memory: "1Mi" })] });
  assert.deepEqual(h.manager.admit(burstable), {
    admit: false,
    reason: "Evicted",
    message: "The node had condition: [MemoryPressure DiskPressure]. ",
  });
  const tolerant = testPod("tolerant", { tolerations: [{ operator: "Exists" }] });
  assert.equal(h.manager.admit(tolerant).admit, false);
  const staticPod = testPod("static", { annotations: { "kubernetes.io/config.source": "file" } });
  assert.deepEqual(h.manager.admit(staticPod), { admit: true });
});

Deno.test("EvictionManager.run synchronizes on the clock and waits for evicted pods to go", async () => {
  const h = harness({ evictionHard: { "memory.available": "100Mi" } }, {
    monitoringPeriodMs: 10_000,
  });
  h.state.node = underMemory;
  h.state.pods = [[testPod("a"), memory(Mi)], [testPod("b"), memory(2 * Mi)]];
  const ctl = new AbortController();
  const running = h.manager.run(ctl.signal);
  const settle = async () => {
    for (let i = 0; i < 10; i++) await new Promise((r) => setTimeout(r, 0));
  };
  try {
    await settle();
    assert.deepEqual(h.kills.map((k) => k.pod), ["b"], "the first pass runs at once");
    // Waiting for cleanup: polled every second, no new pass while "b" lingers.
    h.clock.step(1_000);
    await settle();
    h.clock.step(1_000);
    await settle();
    assert.equal(h.kills.length, 1);
    h.state.cleanedUp.add("b");
    h.clock.step(1_000);
    await settle();
    assert.ok(h.lines.some((l) => l.includes("Eviction manager: pods successfully cleaned up")));
    assert.deepEqual(h.kills.map((k) => k.pod), ["b", "a"], "the next pass follows cleanup");
    // "a" is never cleaned up: the wait gives up after 30 s.
    for (let i = 0; i < 30; i++) {
      h.clock.step(1_000);
      await settle();
    }
    assert.ok(h.lines.some((l) => l.includes("timed out waiting for pods to be cleaned up")));
    h.state.node = plentyMemory;
    h.clock.step(10_000);
    await settle();
    assert.equal(h.kills.length, 2);
  } finally {
    ctl.abort();
    await running;
  }
});

Deno.test("EvictionManager names the pod-level request when the pod sets one", async () => {
  const h = harness({ evictionHard: { "memory.available": "100Mi" } });
  const pod = testPod("pl");
  pod.spec!.resources = { requests: { memory: "100Mi" } };
  h.state.node = underMemory;
  h.state.pods = [[pod, memory(300 * Mi)]];
  assert.deepEqual(await h.sync(), ["pl"]);
  assert.equal(
    h.kills[0]?.status.message,
    "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " +
      "Pod pl was using 300Mi, request is 100Mi, has larger consumption of memory. " +
      "Container main was using 300Mi, request is 0, has larger consumption of memory. ",
  );
});

Deno.test("EvictionManager logs a missing pods system container once per change", async () => {
  const h = harness({ evictionHard: { "memory.available": "100Mi" } });
  h.state.node = plentyMemory;
  const missing = () => h.lines.filter((l) => l.includes("failed to construct signal")).length;
  await h.sync();
  await h.sync();
  await h.sync();
  assert.equal(missing(), 1, "not once every 10 s");
  h.state.node = { ...plentyMemory, pods: { workingSet: Gi } };
  await h.sync();
  h.state.node = plentyMemory;
  await h.sync();
  assert.equal(missing(), 2, "again after it came back and went");
});

Deno.test("EvictionManager.reconfigure: a raised threshold and a shorter transition period apply from the next pass", async () => {
  const h = harness({ evictionHard: { "memory.available": "10Mi" } });
  h.state.node = underMemory;
  await h.sync();
  assert.ok(!h.manager.isUnderMemoryPressure(), "50Mi available is above 10Mi");
  h.manager.reconfigure({
    ...evictionConfigFrom({
      evictionHard: { "memory.available": "100Mi" },
      evictionPressureTransitionPeriod: 20_000,
      enforceNodeAllocatable: [],
      localStorageCapacityIsolation: true,
    }),
  });
  await h.sync();
  assert.ok(h.manager.isUnderMemoryPressure(), "50Mi available is below the new 100Mi");
  h.state.node = plentyMemory;
  await h.sync(10_000);
  assert.ok(h.manager.isUnderMemoryPressure());
  await h.sync(10_000);
  assert.ok(!h.manager.isUnderMemoryPressure(), "the new 20 s transition period applies");
});

Deno.test("EvictionManager.reconfigure during the first pass's disk layout detection is not undone by it", async () => {
  // The first pass detects the disk layout (a CRI call) and then keeps the thresholds it
  // derived; a reload landing meanwhile (SIGHUP right at start-up, under load) must win.
  const imageFs = Promise.withResolvers<boolean>();
  const h = harness({ evictionHard: { "memory.available": "10Mi" } }, {
    diskInfo: {
      hasDedicatedImageFs: () => imageFs.promise,
      hasDedicatedContainerFs: () => Promise.resolve(false),
    },
  });
  h.state.node = underMemory;
  h.clock.step(10_000);
  const first = h.manager.synchronize();
  await Promise.resolve();
  h.manager.reconfigure(evictionConfigFrom({
    evictionHard: { "memory.available": "100Mi" },
    evictionPressureTransitionPeriod: 300_000,
    enforceNodeAllocatable: [],
    localStorageCapacityIsolation: true,
  }));
  imageFs.resolve(false);
  await first;
  assert.ok(h.manager.isUnderMemoryPressure(), "50Mi available is below the reloaded 100Mi");
  await h.sync();
  assert.ok(h.manager.isUnderMemoryPressure(), "and stays the threshold in the next pass");
});

Deno.test("EvictionManager.reconfigure: a lowered threshold no longer holds the pressure until the old minimum reclaim", async () => {
  const h = harness({ evictionHard: { "memory.available": "1000Gi" } }, {
    pressureTransitionPeriodMs: 10_000,
  });
  h.state.node = plentyMemory;
  await h.sync();
  assert.ok(h.manager.isUnderMemoryPressure(), "no node has 1000Gi available");
  h.manager.reconfigure(evictionConfigFrom({
    evictionHard: { "memory.available": "100Mi" },
    evictionPressureTransitionPeriod: 10_000,
    enforceNodeAllocatable: [],
    localStorageCapacityIsolation: true,
  }));
  await h.sync(5_000);
  assert.ok(h.manager.isUnderMemoryPressure(), "within the transition period");
  await h.sync(10_000);
  assert.ok(!h.manager.isUnderMemoryPressure(), "the 1000Gi threshold is gone");
});
