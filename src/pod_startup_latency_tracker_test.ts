import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import { FakeClock } from "./util/clock.ts";
import { createLogger } from "./klog/klog.ts";
import { KubeletMetrics } from "./metrics/metrics.ts";
import {
  imagePullingTimeMs,
  PodStartupLatencyTracker,
  timelineJson,
} from "./pod_startup_latency_tracker.ts";

const T0 = Date.UTC(2026, 0, 1);
const quiet = createLogger({ write: () => {} });

function apiPod(uid: string, status: V1Pod["status"] = {}, spec: V1Pod["spec"] = {
  containers: [{ name: "a" }],
}): V1Pod {
  return {
    metadata: { uid, name: uid, namespace: "ns", creationTimestamp: new Date(T0) },
    spec,
    status,
  };
}

const RUNNING: V1Pod["status"] = {
  phase: "Running",
  startTime: new Date(T0),
  containerStatuses: [{
    name: "a",
    image: "i",
    imageID: "",
    ready: true,
    restartCount: 0,
    state: { running: { startedAt: new Date(T0) } },
  }],
};

function world() {
  const clock = new FakeClock(T0);
  const metrics = new KubeletMetrics({ process: false });
  const tracker = new PodStartupLatencyTracker({ clock, logger: quiet, metrics });
  return { clock, metrics, tracker };
}

Deno.test("PodStartupLatencyTracker observes creation to watch-observed running, minus image pulls", () => {
  const { clock, metrics, tracker } = world();
  const uid = "p1";
  tracker.observedPodOnWatch(apiPod(uid), clock.now());
  clock.step(1_000);
  tracker.recordImageStartedPulling(uid);
  clock.step(4_000);
  tracker.recordImageFinishedPulling(uid);
  clock.step(500);
  tracker.recordStatusUpdated(apiPod(uid, RUNNING));
  clock.step(500);
  // Not yet observed on watch: nothing recorded.
  assert.equal(metrics.podStartSLIDuration.count({}), 0);
  tracker.observedPodOnWatch(apiPod(uid, RUNNING), clock.now());
  assert.equal(metrics.podStartSLIDuration.count({}), 1);
  assert.equal(metrics.podStartTotalDuration.count({}), 1);
  // 6 s end to end, 4 s of it pulling.
  const text = metrics.registry.render();
  return text.then((t) => {
    assert.match(t, /^kubelet_pod_start_sli_duration_seconds_sum 2$/m);
    assert.match(t, /^kubelet_pod_start_total_duration_seconds_sum 6$/m);
    // Seen again: recorded once only.
    tracker.observedPodOnWatch(apiPod(uid, RUNNING), clock.now());
    assert.equal(metrics.podStartSLIDuration.count({}), 1);
  });
});

Deno.test("PodStartupLatencyTracker leaves out stateful pods, unschedulable pods and pods first seen started", () => {
  const { clock, metrics, tracker } = world();
  const stateful = apiPod("s", {}, {
    containers: [{ name: "a" }],
    volumes: [{ name: "data", persistentVolumeClaim: { claimName: "c" } }],
  });
  const unschedulable = apiPod("u", {
    conditions: [{ type: "PodScheduled", status: "False" }],
  });
  const late = apiPod("l", { startTime: new Date(T0) });
  for (const p of [stateful, unschedulable, late]) tracker.observedPodOnWatch(p, clock.now());
  clock.step(1_000);
  for (const p of [stateful, unschedulable, late]) {
    const started = { ...p, status: RUNNING };
    tracker.recordStatusUpdated(started);
    tracker.observedPodOnWatch(started, clock.now());
  }
  assert.equal(metrics.podStartSLIDuration.count({}), 0);
  // The stateful pod still counts end to end.
  assert.equal(metrics.podStartTotalDuration.count({}), 1);
});

Deno.test("PodStartupLatencyTracker subtracts init container run time", async () => {
  const { clock, metrics, tracker } = world();
  tracker.observedPodOnWatch(apiPod("i"), clock.now());
  tracker.recordInitContainerStarted("i", clock.now() + 1_000);
  tracker.recordInitContainerFinished("i", clock.now() + 3_000);
  // A second finish without a start changes nothing.
  tracker.recordInitContainerFinished("i", clock.now() + 9_000);
  clock.step(5_000);
  tracker.recordStatusUpdated(apiPod("i", RUNNING));
  tracker.observedPodOnWatch(apiPod("i", RUNNING), clock.now());
  assert.match(await metrics.render(), /^kubelet_pod_start_sli_duration_seconds_sum 3$/m);
});

Deno.test("imagePullingTimeMs counts overlapping pulls once", () => {
  assert.equal(imagePullingTimeMs([]), 0);
  assert.equal(imagePullingTimeMs([{ start: 0, end: 10 }, { start: 5, end: 15 }]), 15);
  assert.equal(imagePullingTimeMs([{ start: 0, end: 10 }, { start: 2, end: 8 }]), 10);
  assert.equal(imagePullingTimeMs([{ start: 0, end: 10 }, { start: 20, end: 25 }]), 15);
});

Deno.test("PodStartupLatencyTracker timeline keeps each phase once, in order, and restarts at a new sandbox", () => {
  const { clock, tracker } = world();
  const pod = apiPod("t");
  pod.metadata!.annotations = { "kubernetes.io/config.seen": new Date(T0).toISOString() };
  tracker.recordPhase(pod, "admitted"); // before seen: ignored
  clock.step(10);
  tracker.recordPhase(pod, "seen");
  for (
    const [phase, c] of [
      ["admitted"],
      ["volumesReady"],
      ["volumesReady"],
      ["sandboxCreated"],
      ["imagePulled", "a"],
      ["containerCreated", "a"],
      ["containerStarted", "a"],
      ["containerStarted", "a"],
      ["running"],
      ["ready"],
    ] as const
  ) {
    clock.step(5);
    tracker.recordPhase(pod, phase, c);
  }
  const t = tracker.timeline("ns", "t");
  assert.ok(t);
  assert.deepEqual(t.entries.map((e) => e.phase), [
    "seen",
    "admitted",
    "volumesReady",
    "sandboxCreated",
    "imagePulled",
    "containerCreated",
    "containerStarted",
    "running",
    "ready",
  ]);
  // seen is the first-seen annotation's time.
  assert.equal(t.entries[0]?.at, T0);
  const json = timelineJson(t) as { phases: { sinceFirstMs: number; time: string }[] };
  assert.equal(json.phases[0]?.time, "2026-01-01T00:00:00.000Z");
  assert.equal(json.phases[1]?.sinceFirstMs, 15);
  clock.step(1_000);
  tracker.recordPhase(pod, "sandboxCreated");
  assert.deepEqual(tracker.timeline("ns", "t")?.entries.map((e) => e.phase), [
    "seen",
    "admitted",
    "volumesReady",
    "sandboxCreated",
  ]);
  assert.equal(tracker.timeline("ns", "other"), undefined);
});

Deno.test("PodStartupLatencyTracker's timeline has the first accepted write of a started pod", () => {
  const { clock, tracker } = world();
  const pod = apiPod("w");
  tracker.recordPhase(pod, "seen");
  tracker.observedPodOnWatch(pod, clock.now());
  clock.step(100);
  tracker.recordPhase(pod, "running");
  clock.step(50);
  tracker.recordStatusUpdated(apiPod("w", { phase: "Pending" }));
  assert.deepEqual(
    tracker.timeline("ns", "w")?.entries.map((e) => e.phase),
    ["seen", "running"],
    "a write without every container running is not the step",
  );
  clock.step(250);
  tracker.recordStatusUpdated(apiPod("w", RUNNING));
  clock.step(1_000);
  tracker.recordStatusUpdated(apiPod("w", RUNNING)); // a later write (Ready): not the step
  const entries = tracker.timeline("ns", "w")?.entries ?? [];
  assert.deepEqual(entries.map((e) => e.phase), ["seen", "running", "statusWritten"]);
  assert.equal((entries[2]?.at ?? 0) - (entries[1]?.at ?? 0), 300);
});

Deno.test("PodStartupLatencyTracker keeps only the pods it is told to retain", () => {
  const { clock, tracker } = world();
  for (const uid of ["a", "b", "c"]) {
    tracker.recordPhase(apiPod(uid), "seen");
    tracker.observedPodOnWatch(apiPod(uid), clock.now());
  }
  assert.equal(tracker.size, 3);
  tracker.retain(new Set(["b"]));
  assert.equal(tracker.size, 1);
  assert.ok(tracker.timeline("ns", "b"));
  tracker.deletePodStartupState("b");
  tracker.retain(new Set());
  assert.equal(tracker.size, 0);
});

Deno.test("PodStartupLatencyTracker counts a start the watch showed before the status write's answer", () => {
  const { clock, metrics, tracker } = world();
  tracker.observedPodOnWatch(apiPod("r"), clock.now());
  // A version with no container statuses yet: "every container running" holds vacuously.
  const empty = apiPod("r", { phase: "Pending" });
  empty.metadata!.resourceVersion = "1";
  tracker.observedPodOnWatch(empty, clock.now());
  clock.step(2_000);
  const written = apiPod("r", RUNNING);
  written.metadata!.resourceVersion = "42";
  // The watch delivers the kubelet's write first...
  tracker.observedPodOnWatch(written, clock.now());
  assert.equal(metrics.podStartSLIDuration.count({}), 0);
  clock.step(30);
  // Other pods' changes deliver the set again: the version's first sight is what counts.
  tracker.observedPodOnWatch(written, clock.now());
  clock.step(20);
  // ...then the write's answer is read: the start was observed at the watch's time.
  tracker.recordStatusUpdated(written);
  assert.equal(metrics.podStartSLIDuration.count({}), 1);
  tracker.observedPodOnWatch(written, clock.now());
  assert.equal(metrics.podStartSLIDuration.count({}), 1);
  return metrics.render().then((t) => {
    assert.match(t, /^kubelet_pod_start_sli_duration_seconds_sum 2$/m);
  });
});

Deno.test("PodStartupLatencyTracker does not count a start shown by another write than its own", () => {
  const { clock, metrics, tracker } = world();
  tracker.observedPodOnWatch(apiPod("o"), clock.now());
  const watched = apiPod("o", RUNNING);
  watched.metadata!.resourceVersion = "7";
  tracker.observedPodOnWatch(watched, clock.now());
  const written = apiPod("o", RUNNING);
  written.metadata!.resourceVersion = "8";
  tracker.recordStatusUpdated(written);
  assert.equal(metrics.podStartSLIDuration.count({}), 0);
  // The watch's copy of the write is what records it.
  clock.step(100);
  tracker.observedPodOnWatch(written, clock.now());
  assert.equal(metrics.podStartSLIDuration.count({}), 1);
});

Deno.test("PodStartupLatencyTracker sets the first network pod's SLI duration from the first pod off the host network only", () => {
  const { clock, metrics, tracker } = world();
  /** Sees pod `uid` created now, then running `ms` later. */
  const start = (uid: string, ms: number, spec: Partial<NonNullable<V1Pod["spec"]>> = {}) => {
    const created = clock.now();
    const pod = (status: V1Pod["status"]) => {
      const p = apiPod(uid, status, { containers: [{ name: "a" }], ...spec });
      p.metadata!.creationTimestamp = new Date(created);
      return p;
    };
    tracker.observedPodOnWatch(pod({}), clock.now());
    clock.step(ms);
    tracker.recordStatusUpdated(pod(RUNNING));
    tracker.observedPodOnWatch(pod(RUNNING), clock.now());
  };
  const first = () => metrics.firstNetworkPodStartSLIDuration.get();
  start("host", 1_000, { hostNetwork: true });
  start("stateful", 2_000, {
    volumes: [{ name: "data", persistentVolumeClaim: { claimName: "c" } }],
  });
  assert.equal(metrics.podStartTotalDuration.count({}), 2);
  assert.equal(first(), 0, "neither a host-network pod nor a stateful one");
  start("net", 3_000);
  assert.equal(first(), 3);
  start("net-2", 4_000);
  assert.equal(metrics.podStartSLIDuration.count({}), 3);
  assert.equal(first(), 3, "only the first one");
});
