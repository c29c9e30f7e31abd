import assert from "node:assert/strict";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import type { ObjectRef } from "../client/record.ts";
import {
  AllocationManager,
  type AllocationManagerOptions,
  type CanAdmit,
  INFEASIBLE_CPU_MANAGER_STATIC,
  INFEASIBLE_MEMORY_MANAGER_STATIC,
  INFEASIBLE_PLR_FEATURE_GATE_OFF,
  INITIAL_RETRY_DELAY_MS,
  resizeAdmit,
  resizeMessage,
  RETRY_DELAY_MS,
  withStatusResources,
} from "./allocation_manager.ts";
import { milliValueOf, podRequests } from "../qos/resource_helpers.ts";
import { ResourceState } from "./state_checkpoint.ts";
import { PodResizeConditions } from "../status/resize_conditions.ts";
import { KubeletMetrics } from "../metrics/metrics.ts";

function container(name: string, cpu: string, memory = "64Mi"): V1Container {
  return {
    name,
    image: "img",
    resources: { requests: { cpu, memory }, limits: { cpu, memory } },
  };
}

function pod(uid: string, cpu: string, generation = 1): V1Pod {
  return {
    metadata: { uid, name: uid, namespace: "ns", generation },
    spec: { containers: [container("c", cpu)] },
  };
}

/** A node with `capacity` millicores; pods fit while their requests sum within it. */
function cpuFit(capacity: number): CanAdmit {
  return (p, others) => {
    // Pod-level requests, when set, are what the pod asks for (upstream PodRequests).
    const milli = (x: V1Pod) => Number(milliValueOf(podRequests(x).get("cpu")));
    const used = others.reduce((n, o) => n + milli(o), 0);
    return used + milli(p) <= capacity ? { admit: true } : {
      admit: false,
      reason: "OutOfcpu",
      message: `Node didn't have enough resource: cpu, requested: ${milli(p)}, used: ${used}, ` +
        `capacity: ${capacity}`,
    };
  };
}

async function advance(clock: FakeClock, ms: number): Promise<void> {
  for (let i = 0; i < 3; i++) await new Promise((r) => setTimeout(r, 0));
  clock.step(ms);
  for (let i = 0; i < 3; i++) await new Promise((r) => setTimeout(r, 0));
}

function setup(
  capacity = 1000,
  podLevelGate = true,
  resourcePolicies?: AllocationManagerOptions["resourcePolicies"],
) {
  const clock = new FakeClock();
  const conditions = new PodResizeConditions(clock);
  const metrics = new KubeletMetrics({ process: false });
  const pods = new Map<string, V1Pod>();
  const synced: string[] = [];
  const events: Array<{ ref: ObjectRef; type: string; reason: string; message: string }> = [];
  const m = new AllocationManager({
    state: ResourceState.inMemory(),
    conditions,
    canAdmit: cpuFit(capacity),
    getActivePods: () => [...pods.values()],
    getPodByUID: (uid) => pods.get(uid),
    triggerPodSync: (p) => synced.push(p.metadata?.uid ?? ""),
    sourcesReady: () => true,
    recorder: {
      event: (ref, type, reason, message) => events.push({ ref, type, reason, message }),
    },
    clock,
    logger: createLogger({ write: () => {} }),
    metrics,
    inPlacePodLevelResourcesVerticalScaling: podLevelGate,
    resourcePolicies,
  });
  const add = (p: V1Pod) => {
    const r = m.addPod([...pods.values()], p);
    if (r.admit) pods.set(p.metadata!.uid!, p);
    return r;
  };
  return { m, clock, conditions, pods, synced, events, add, metrics };
}

/** Every non-zero series of the two resize counters, as `name{label}=n`, sorted. */
async function resizeCounts(metrics: KubeletMetrics): Promise<string[]> {
  const text = await metrics.render();
  const re = /^kubelet_pod_(infeasible|deferred_accepted)_resizes_total\{\w+="(\w+)"\} (\d+)$/gm;
  return [...text.matchAll(re)].map(([, name, label, n]) => `${name}{${label}}=${n}`).sort();
}

Deno.test("AllocationManager admits a pod and checkpoints its resources as allocated", () => {
  const { m, add } = setup();
  assert.equal(add(pod("a", "600m")).admit, true);
  const r = add(pod("b", "600m"));
  assert.equal(r.admit, false);
  assert.equal(r.reason, "OutOfcpu");
  assert.deepEqual(m.containerAllocation("a", "c")?.requests, { cpu: "600m", memory: "64Mi" });
  assert.equal(m.containerAllocation("b", "c"), undefined);
});

Deno.test("a resize that fits is allocated, InProgress, with a ResizeStarted event and a sync", () => {
  const { m, add, pods, conditions, synced, events } = setup();
  add(pod("a", "200m"));
  const resized = pod("a", "300m", 2);
  pods.set("a", resized);
  // Until the resize is decided, the pod runs as allocated.
  assert.equal(m.updatePodFromAllocation(resized).updated, true);
  assert.equal(
    m.updatePodFromAllocation(resized).pod.spec?.containers[0]?.resources?.requests?.cpu,
    "200m",
  );
  m.pushPendingResize("a");
  const done = m.retryPendingResizes("pod_updated");
  assert.deepEqual(done.map((p) => p.metadata?.uid), ["a"]);
  assert.equal(m.updatePodFromAllocation(resized).updated, false);
  assert.deepEqual(m.containerAllocation("a", "c")?.requests, { cpu: "300m", memory: "64Mi" });
  assert.deepEqual(synced, ["a"]);
  const [c] = conditions.get("a");
  assert.equal(c?.type, "PodResizeInProgress");
  assert.equal(c?.observedGeneration, 2);
  assert.equal(events[0]?.reason, "ResizeStarted");
  assert.equal(
    events[0]?.message,
    `Pod resize started: {"containers":[{"name":"c","resources":{"limits":{"cpu":"300m",` +
      `"memory":"64Mi"},"requests":{"cpu":"300m","memory":"64Mi"}}}],"generation":2}`,
  );
  assert.equal(m.hasPendingResizes(), false);
});

Deno.test("a resize that does not fit is Deferred, and allocated once another pod leaves", () => {
  const { m, add, pods, conditions, events, clock } = setup();
  add(pod("a", "500m"));
  add(pod("b", "400m"));
  pods.set("a", pod("a", "700m", 2));
  m.pushPendingResize("a");
  assert.deepEqual(m.retryPendingResizes("pod_updated"), []);
  assert.equal(conditions.isDeferred("a"), true);
  const [c] = conditions.get("a");
  assert.equal(c?.reason, "Deferred");
  assert.match(c?.message ?? "", /Node didn't have enough resource: cpu, requested: 700/);
  assert.equal(events.at(-1)?.reason, "ResizeDeferred");
  assert.equal(events.at(-1)?.type, "Warning");
  // The event names the admission's reason; the condition says Deferred (upstream).
  assert.match(events.at(-1)?.message ?? "", /^Pod resize OutOfcpu: \{"containers":/);
  assert.equal(m.hasPendingResizes(), true);
  // Nothing changed: a second try sends no second event.
  m.retryPendingResizes("periodic_retry");
  assert.equal(events.filter((e) => e.reason === "ResizeDeferred").length, 1);
  clock.step(1);
  pods.delete("b");
  assert.deepEqual(m.retryPendingResizes("pods_removed").map((p) => p.metadata?.uid), ["a"]);
  assert.equal(conditions.isDeferred("a"), false);
  assert.deepEqual(conditions.get("a").map((x) => x.type), ["PodResizeInProgress"]);
});

/** A pod whose one container sets nothing: the pod-level resources size it. */
function podLevelPod(uid: string, cpu: string, memory: string, generation = 1): V1Pod {
  return {
    metadata: { uid, name: uid, namespace: "ns", generation },
    spec: {
      containers: [{ name: "c", image: "img" }],
      resources: { requests: { cpu, memory }, limits: { cpu, memory } },
    },
  };
}

Deno.test("AllocationManager allocates a pod-level resize that fits: InProgress, ResizeStarted", () => {
  const { m, add, pods, conditions, events, synced } = setup();
  add(podLevelPod("a", "200m", "64Mi"));
  assert.deepEqual(m.podLevelAllocation("a")?.limits, { cpu: "200m", memory: "64Mi" });
  const resized = podLevelPod("a", "400m", "128Mi", 2);
  pods.set("a", resized);
  // Until the resize is decided, the pod runs with its allocated pod-level resources.
  const before = m.updatePodFromAllocation(resized);
  assert.equal(before.updated, true);
  assert.deepEqual(before.pod.spec?.resources?.limits, { cpu: "200m", memory: "64Mi" });
  m.pushPendingResize("a");
  assert.deepEqual(m.retryPendingResizes("pod_updated").map((p) => p.metadata?.uid), ["a"]);
  assert.deepEqual(m.podLevelAllocation("a")?.limits, { cpu: "400m", memory: "128Mi" });
  assert.equal(m.updatePodFromAllocation(resized).updated, false);
  assert.deepEqual(conditions.get("a").map((c) => [c.type, c.observedGeneration]), [
    ["PodResizeInProgress", 2],
  ]);
  assert.equal(events.at(-1)?.reason, "ResizeStarted");
  assert.deepEqual(synced, ["a"]);
  assert.equal(m.hasPendingResizes(), false);
});

Deno.test("AllocationManager defers a pod-level resize that does not fit beside the others", () => {
  const { m, add, pods, conditions, events } = setup();
  add(podLevelPod("a", "500m", "64Mi"));
  add(pod("b", "400m"));
  pods.set("a", podLevelPod("a", "700m", "64Mi", 2));
  m.pushPendingResize("a");
  assert.deepEqual(m.retryPendingResizes("pod_updated"), []);
  assert.equal(conditions.isDeferred("a"), true);
  assert.match(conditions.get("a")[0]?.message ?? "", /requested: 700, used: 400/);
  assert.equal(events.at(-1)?.reason, "ResizeDeferred");
  assert.deepEqual(m.podLevelAllocation("a")?.requests, { cpu: "500m", memory: "64Mi" });
  pods.delete("b");
  assert.equal(m.retryPendingResizes("pods_removed").length, 1);
  assert.deepEqual(m.podLevelAllocation("a")?.requests, { cpu: "700m", memory: "64Mi" });
});

Deno.test("resizeAdmit refuses a pod-level resize as Infeasible with the gate off, as upstream", async () => {
  const metrics = new KubeletMetrics({ process: false });
  const allocated = podLevelPod("a", "200m", "64Mi");
  const wanted = podLevelPod("a", "400m", "64Mi", 2);
  assert.deepEqual(resizeAdmit(wanted, allocated, { metrics, podLevelGate: true }), {
    admit: true,
  });
  assert.deepEqual(await resizeCounts(metrics), []);
  assert.deepEqual(resizeAdmit(wanted, allocated, { metrics, podLevelGate: false }), {
    admit: false,
    reason: "Infeasible",
    message: "InPlacePodLevelResourcesVerticalScaling is disabled",
  });
  // Counted each time the handler finds it (upstream Admit counts every call).
  resizeAdmit(wanted, allocated, { metrics, podLevelGate: false });
  assert.deepEqual(await resizeCounts(metrics), [
    `infeasible{${INFEASIBLE_PLR_FEATURE_GATE_OFF}}=2`,
  ]);
  // A container resize of a pod whose pod-level resources did not change is not refused.
  assert.deepEqual(
    resizeAdmit(pod("a", "300m"), pod("a", "200m"), { metrics, podLevelGate: false }),
    {
      admit: true,
    },
  );
});

Deno.test("AllocationManager with the gate off leaves pod-level resources out, as upstream", () => {
  const { m, add, pods, conditions, events } = setup(1000, false);
  add(podLevelPod("a", "200m", "64Mi"));
  assert.equal(m.podLevelAllocation("a"), undefined);
  // Upstream's UpdatePodFromAllocation does not look at them: no resize to decide.
  const resized = podLevelPod("a", "400m", "64Mi", 2);
  pods.set("a", resized);
  assert.equal(m.updatePodFromAllocation(resized).updated, false);
  m.pushPendingResize("a");
  m.retryPendingResizes("pod_updated");
  assert.deepEqual(conditions.get("a"), []);
  assert.deepEqual(events.filter((e) => e.reason.startsWith("Resize")), []);
});

Deno.test("withStatusResources counts pod-level requests at what the pod still runs with", () => {
  const p = podLevelPod("a", "200m", "64Mi", 2);
  assert.equal(withStatusResources(p), p);
  // Shrunk from 600m, not actuated yet: the status says 600m.
  p.status = {
    resources: { requests: { cpu: "600m", memory: "64Mi" } },
    allocatedResources: { cpu: "200m", memory: "32Mi" },
  };
  const counted = withStatusResources(p);
  assert.deepEqual(counted.spec?.resources?.requests, { cpu: "600m", memory: "64Mi" });
  assert.deepEqual(counted.spec?.resources?.limits, { cpu: "200m", memory: "64Mi" });
  assert.deepEqual(p.spec?.resources?.requests, { cpu: "200m", memory: "64Mi" }, "not changed");
});

Deno.test("pending resizes that do not raise requests go first, then higher priority", () => {
  const { m, add, pods } = setup(10_000);
  for (const uid of ["up-low", "up-high", "down"]) add(pod(uid, "500m"));
  const upLow = pod("up-low", "600m");
  const upHigh = pod("up-high", "600m");
  upHigh.spec!.priority = 100;
  const down = pod("down", "400m");
  for (const p of [upLow, upHigh, down]) {
    pods.set(p.metadata!.uid!, p);
    m.pushPendingResize(p.metadata!.uid!);
  }
  const order = m.retryPendingResizes("pod_updated").map((p) => p.metadata?.uid);
  assert.deepEqual(order, ["down", "up-high", "up-low"]);
});

Deno.test("AllocationManager.run retries deferred resizes 30 s after start, then every 3 min", async () => {
  const { m, add, pods, clock, conditions, metrics } = setup();
  add(pod("a", "500m"));
  add(pod("b", "500m"));
  pods.set("a", pod("a", "600m", 2));
  m.pushPendingResize("a");
  const ctrl = new AbortController();
  const running = m.run(ctrl.signal);
  try {
    await advance(clock, INITIAL_RETRY_DELAY_MS);
    assert.equal(conditions.isDeferred("a"), true);
    pods.delete("b");
    await advance(clock, RETRY_DELAY_MS - 1);
    assert.equal(conditions.isDeferred("a"), true, "not before 3 minutes");
    await advance(clock, 1);
    assert.equal(m.hasPendingResizes(), false);
    assert.equal(m.updatePodFromAllocation(pods.get("a")!).updated, false);
    assert.deepEqual(await resizeCounts(metrics), ["deferred_accepted{periodic_retry}=1"]);
  } finally {
    ctrl.abort();
    await running;
  }
});

Deno.test("resizeMessage has upstream's shape", () => {
  const p = pod("a", "1");
  p.spec!.initContainers = [container("init", "100m")];
  assert.equal(
    resizeMessage(p, 3, "boom", "Pod resize error"),
    `Pod resize error: {"initContainers":[{"name":"init","resources":{"limits":{"cpu":"100m",` +
      `"memory":"64Mi"},"requests":{"cpu":"100m","memory":"64Mi"}}}],"containers":[{"name":"c",` +
      `"resources":{"limits":{"cpu":"1","memory":"64Mi"},"requests":{"cpu":"1","memory":"64Mi"}}}],` +
      `"generation":3,"error":"boom"}`,
  );
});

Deno.test("admission counts another pod at the size it still runs with, not only its allocation", () => {
  const { m, add, pods, conditions } = setup();
  add(pod("a", "600m"));
  // a was shrunk to 200m, but its container still runs with 600m (status.resources).
  const shrunk = pod("a", "200m", 2);
  pods.set("a", shrunk);
  m.pushPendingResize("a");
  m.retryPendingResizes("pod_updated");
  shrunk.status = {
    containerStatuses: [{
      name: "c",
      image: "img",
      imageID: "",
      ready: true,
      restartCount: 0,
      resources: { requests: { cpu: "600m", memory: "64Mi" } },
    }],
  };
  // b fits beside a's allocation (200m + 700m) but not beside what a runs with (600m + 700m).
  const r = add(pod("b", "700m"));
  assert.equal(r.admit, false);
  assert.equal(r.reason, "OutOfcpu");
  // Once a's status shows the new size, b fits.
  shrunk.status.containerStatuses![0]!.resources = { requests: { cpu: "200m", memory: "64Mi" } };
  assert.equal(add(pod("b", "700m")).admit, true);
  assert.equal(conditions.isDeferred("a"), false);
});

Deno.test("AllocationManager counts no infeasible or deferred resize for one accepted at once", async () => {
  const { m, add, pods, metrics } = setup();
  add(pod("a", "200m"));
  pods.set("a", pod("a", "300m", 2));
  m.pushPendingResize("a");
  assert.equal(m.retryPendingResizes("pod_updated").length, 1);
  assert.deepEqual(await resizeCounts(metrics), []);
});

Deno.test("AllocationManager counts a Deferred resize once, when accepted, by what retried it", async () => {
  const { m, add, pods, conditions, metrics } = setup();
  add(pod("a", "500m"));
  add(pod("b", "400m"));
  pods.set("a", pod("a", "700m", 2));
  m.pushPendingResize("a");
  m.retryPendingResizes("pod_updated");
  m.retryPendingResizes("periodic_retry");
  assert.equal(conditions.isDeferred("a"), true);
  // Deferred is not infeasible, and not accepted yet.
  assert.deepEqual(await resizeCounts(metrics), []);
  pods.delete("b");
  assert.equal(m.retryPendingResizes("pods_removed").length, 1);
  assert.deepEqual(await resizeCounts(metrics), ["deferred_accepted{pods_removed}=1"]);
  // Accepted: a later retry has nothing left to count.
  m.retryPendingResizes("pod_terminated");
  assert.deepEqual(await resizeCounts(metrics), ["deferred_accepted{pods_removed}=1"]);
});

const STATIC = { cpuManagerPolicy: "static", memoryManagerPolicy: "Static" };

Deno.test("resizeAdmit refuses a Guaranteed pod's cpu or memory resize under a static policy as Infeasible, as upstream", async () => {
  const metrics = new KubeletMetrics({ process: false });
  const allocated = pod("a", "1", 1);
  const cpu = pod("a", "2", 2);
  assert.deepEqual(resizeAdmit(cpu, allocated, { metrics, resourcePolicies: STATIC }), {
    admit: false,
    reason: "Infeasible",
    message: 'Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"',
  });
  const memory: V1Pod = {
    ...allocated,
    spec: { containers: [container("c", "1", "128Mi")] },
  };
  const memoryOnly = { cpuManagerPolicy: "none", memoryManagerPolicy: "Static" };
  assert.deepEqual(resizeAdmit(memory, allocated, { metrics, resourcePolicies: memoryOnly }), {
    admit: false,
    reason: "Infeasible",
    message: 'Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "Static"',
  });
  // The static CPU policy does not refuse a memory-only resize, nor the default policies any.
  const cpuOnly = { cpuManagerPolicy: "static", memoryManagerPolicy: "None" };
  assert.deepEqual(resizeAdmit(memory, allocated, { metrics, resourcePolicies: cpuOnly }), {
    admit: true,
  });
  const none = { cpuManagerPolicy: "none", memoryManagerPolicy: "None" };
  assert.deepEqual(resizeAdmit(cpu, allocated, { metrics, resourcePolicies: none }), {
    admit: true,
  });
  // A Burstable pod is not refused: only Guaranteed pods are pinned.
  const burstable = (cpu: string): V1Pod => ({
    metadata: { uid: "b" },
    spec: { containers: [{ name: "c", resources: { requests: { cpu } } }] },
  });
  assert.deepEqual(
    resizeAdmit(burstable("2"), burstable("1"), { metrics, resourcePolicies: STATIC }),
    { admit: true },
  );
  assert.deepEqual(await resizeCounts(metrics), [
    `infeasible{${INFEASIBLE_CPU_MANAGER_STATIC}}=1`,
    `infeasible{${INFEASIBLE_MEMORY_MANAGER_STATIC}}=1`,
  ]);
});

Deno.test("AllocationManager keeps a Guaranteed pod's allocation under the static CPU policy: Infeasible, with a ResizeInfeasible event", () => {
  const { m, add, pods, conditions, events } = setup(4000, true, STATIC);
  add(pod("a", "1"));
  const resized = pod("a", "2", 2);
  pods.set("a", resized);
  m.pushPendingResize("a");
  assert.deepEqual(m.retryPendingResizes("pod_updated"), []);
  assert.equal(conditions.isInfeasible("a"), true);
  assert.equal(
    conditions.get("a")[0]?.message,
    'Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"',
  );
  assert.equal(events.at(-1)?.reason, "ResizeInfeasible");
  assert.deepEqual(m.containerAllocation("a", "c")?.requests, { cpu: "1", memory: "64Mi" });
  assert.equal(m.hasPendingResizes(), false);
});
