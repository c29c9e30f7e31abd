import assert from "node:assert/strict";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import { createLogger } from "../klog/klog.ts";
import { ResourceState } from "../allocation/state_checkpoint.ts";
import type { ResourceConfig } from "../cm/cgroup_manager.ts";
import { resourceConfigForPod } from "../cm/pod_container_manager.ts";
import { newExclusiveCpus } from "../cm/exclusive_cpus.ts";
import { CriError, GrpcCode } from "../cri/connection.ts";
import { generateLinuxContainerResources } from "./_container_linux.ts";
import {
  type ActuatedPodLevelLookup,
  computeContainerResize,
  computePodLevelResize,
  doPodResizeAction,
  emptyResizeActions,
  isPodResizeInProgress,
  type ResizeDeps,
  seedActuatedResources,
  setActuatedContainerResources,
  toRuntimeResources,
  updateActuatedPodLevelResources,
} from "./pod_resize.ts";
import type { KubeContainerStatus } from "./kuberuntime_container.ts";
import { KubeletMetrics } from "../metrics/metrics.ts";
import { FakeClock } from "../util/clock.ts";

function c(name: string, cpu: string, mem: string, policy?: V1Container["resizePolicy"]) {
  return {
    name,
    image: "img",
    resources: { requests: { cpu, memory: mem }, limits: { cpu, memory: mem } },
    ...(policy ? { resizePolicy: policy } : {}),
  } satisfies V1Container;
}

function pod(containers: V1Container[]): V1Pod {
  return { metadata: { uid: "u", name: "p", namespace: "ns" }, spec: { containers } };
}

function running(name: string): KubeContainerStatus {
  return {
    id: `id-${name}`,
    name,
    state: "running",
    exitCode: 0,
    reason: "",
    hash: 0,
    restartCount: 0,
    finishedAt: 0,
  };
}

function actuatedFrom(p: V1Pod) {
  const state = ResourceState.inMemory();
  for (const x of p.spec?.containers ?? []) void state.setContainer("u", x.name, x.resources!);
  return state;
}

Deno.test("computeContainerResize queues decreases before increases, per resource", () => {
  const before = pod([c("a", "100m", "100Mi"), c("b", "100m", "100Mi"), c("d", "100m", "100Mi")]);
  const state = actuatedFrom(before);
  const after = pod([c("a", "200m", "50Mi"), c("b", "50m", "200Mi"), c("d", "100m", "100Mi")]);
  const changes = emptyResizeActions();
  for (const x of after.spec!.containers) {
    const r = computeContainerResize(
      after,
      x,
      running(x.name),
      (u, n) => state.getContainer(u, n),
      changes,
    );
    assert.equal(r, "keep");
  }
  assert.deepEqual(changes.containersToUpdate.cpu.map((x) => x.container.name), ["b", "a"]);
  assert.deepEqual(changes.containersToUpdate.memory.map((x) => x.container.name), ["a", "b"]);
  assert.equal(changes.updatePodResources, false);
});

/** The container manager's pod cgroup settings these tests size pods with. */
const POD_OPTS = { enforceCPULimits: true, cpuPeriodUs: 100_000n, podPidsLimit: -1 };

interface Call {
  what: string;
  detail: string;
}

function harness(opts: {
  current: ResourceConfig;
  podMemoryUsage?: bigint;
  containerMemoryUsage?: bigint;
  sandboxUnimplemented?: boolean;
  failUpdate?: string;
  /** How long each UpdateContainerResources takes, on the fake clock. */
  updateMs?: number;
  actuated?: ResourceState;
}) {
  const calls: Call[] = [];
  const clock = new FakeClock();
  const metrics = new KubeletMetrics({ process: false });
  const deps: ResizeDeps = {
    runtime: {
      updateContainerResources: (id, linux) => {
        clock.step(opts.updateMs ?? 0);
        calls.push({
          what: "container",
          detail:
            `${id} shares=${linux?.cpuShares} quota=${linux?.cpuQuota} mem=${linux?.memoryLimitInBytes}`,
        });
        if (opts.failUpdate === id) return Promise.reject(new Error("runtime said no"));
        return Promise.resolve();
      },
      updatePodSandboxResources: () => {
        calls.push({ what: "sandbox", detail: "" });
        return opts.sandboxUnimplemented === false ? Promise.resolve() : Promise.reject(
          new CriError(
            "RuntimeService/UpdatePodSandboxResources",
            GrpcCode.UNIMPLEMENTED,
            "not implemented",
          ),
        );
      },
      containerStats: () =>
        Promise.resolve(api.ContainerStats.create({
          memory: api.MemoryUsage.create({
            usageBytes: api.UInt64Value.create({ value: opts.containerMemoryUsage ?? 1n }),
          }),
        })),
    },
    podCgroups: {
      getConfig: (_p, r) =>
        Promise.resolve(
          r === "memory" ? { memory: opts.current.memory } : {
            cpuShares: opts.current.cpuShares,
            cpuQuota: opts.current.cpuQuota,
            cpuPeriod: opts.current.cpuPeriod,
          },
        ),
      setConfig: (_p, rc) => {
        calls.push({
          what: "pod",
          detail: Object.entries(rc).map(([k, v]) => `${k}=${v}`).join(" "),
        });
        return Promise.resolve();
      },
      specConfig: (p) => resourceConfigForPod(p, POD_OPTS),
      memoryUsage: () => Promise.resolve(opts.podMemoryUsage ?? 1n),
    },
    actuated: opts.actuated ?? ResourceState.inMemory(),
    linux: { memoryCapacityBytes: 8 * 2 ** 30 },
    logger: createLogger({ write: () => {} }),
    metrics,
    clock,
  };
  return { calls, deps, metrics };
}

/** kubelet_pod_resize_duration_milliseconds by success: [count, sum] (absent: none). */
async function durations(metrics: KubeletMetrics): Promise<Record<string, [number, number]>> {
  const text = await metrics.render();
  const out: Record<string, [number, number]> = {};
  const re = /^kubelet_pod_resize_duration_milliseconds_(count|sum)\{success="(\w+)"\} (\S+)$/gm;
  for (const [, what, success, v] of text.matchAll(re)) {
    const entry = out[success!] ??= [0, 0];
    entry[what === "count" ? 0 : 1] = Number(v);
  }
  return out;
}

function plan(before: V1Pod, after: V1Pod) {
  const state = actuatedFrom(before);
  const changes = emptyResizeActions();
  for (const x of after.spec!.containers) {
    computeContainerResize(after, x, running(x.name), (u, n) => state.getContainer(u, n), changes);
  }
  return changes;
}

Deno.test("doPodResizeAction grows the pod cgroup before its containers, and shrinks it after", async () => {
  const before = pod([c("a", "100m", "100Mi"), c("b", "100m", "100Mi")]);
  const after = pod([c("a", "300m", "300Mi"), c("b", "50m", "50Mi")]);
  const current = resourceConfigForPod(before, POD_OPTS);
  const { calls, deps, metrics } = harness({ current, updateMs: 40.6 });
  const err = await doPodResizeAction(
    deps,
    new AbortController().signal,
    after,
    "sb",
    plan(before, after),
  );
  assert.equal(err, undefined);
  // Four container updates of 40.6 ms: one observation of 162 whole milliseconds.
  assert.deepEqual(await durations(metrics), { true: [1, 162] });
  const order = calls.filter((x) => x.what !== "sandbox").map((x) => `${x.what}: ${x.detail}`);
  assert.deepEqual(order, [
    // memory 200Mi -> 350Mi: the pod first, then b (decrease) before a (increase)
    `pod: memory=${350 * 2 ** 20}`,
    `container: id-b shares=102 quota=10000 mem=${50 * 2 ** 20}`,
    `container: id-a shares=102 quota=10000 mem=${300 * 2 ** 20}`,
    // cpu 200m -> 350m: quota, then shares, then the containers
    "pod: cpuQuota=35000 cpuPeriod=100000",
    "pod: cpuShares=358",
    `container: id-b shares=51 quota=5000 mem=${50 * 2 ** 20}`,
    `container: id-a shares=307 quota=30000 mem=${300 * 2 ** 20}`,
  ]);
  // What the runtime accepted is recorded as actuated.
  assert.deepEqual(deps.actuated.getContainer("u", "a")?.limits, {
    cpu: "300m",
    memory: `${300 * 2 ** 20}`,
  });
  // Each pod cgroup change was announced to the runtime first (best effort: unimplemented).
  assert.equal(calls.filter((x) => x.what === "sandbox").length, 3);

  // The way back: containers first, then the pod (requests before limits).
  const { calls: back, deps: deps2 } = harness({
    current: resourceConfigForPod(after, POD_OPTS),
  });
  const err2 = await doPodResizeAction(
    deps2,
    new AbortController().signal,
    before,
    "sb",
    plan(after, before),
  );
  assert.equal(err2, undefined);
  assert.deepEqual(back.filter((x) => x.what === "pod").map((x) => x.detail), [
    `memory=${200 * 2 ** 20}`,
    "cpuShares=204",
    "cpuQuota=20000 cpuPeriod=100000",
  ]);
  const whats = back.filter((x) => x.what !== "sandbox").map((x) => x.what);
  assert.deepEqual(whats, [
    "container",
    "container",
    "pod",
    "container",
    "container",
    "pod",
    "pod",
  ]);
});

Deno.test("doPodResizeAction keeps a container on exclusive CPUs without CFS quota when its memory is resized", async () => {
  // A Guaranteed pod's memory resize is feasible without the Static memory manager policy.
  const before = pod([c("a", "2", "100Mi"), c("b", "500m", "100Mi")]);
  const after = pod([c("a", "2", "200Mi"), c("b", "500m", "200Mi")]);
  const { calls, deps } = harness({ current: resourceConfigForPod(before, POD_OPTS) });
  const exclusiveCpus = newExclusiveCpus({ exclusiveCpus: (_u, n) => n === "a" ? [2, 3] : [] });
  const err = await doPodResizeAction(
    { ...deps, linux: { ...deps.linux, exclusiveCpus } },
    new AbortController().signal,
    after,
    "sb",
    plan(before, after),
  );
  assert.equal(err, undefined);
  assert.deepEqual(calls.filter((x) => x.what === "container").map((x) => x.detail), [
    `id-a shares=2048 quota=-1 mem=${200 * 2 ** 20}`,
    `id-b shares=512 quota=50000 mem=${200 * 2 ** 20}`,
  ]);
});

Deno.test("doPodResizeAction refuses a memory limit below what the container uses", async () => {
  const before = pod([c("a", "100m", "100Mi")]);
  const after = pod([c("a", "100m", "50Mi")]);
  const current = resourceConfigForPod(before, POD_OPTS);
  const { calls, deps, metrics } = harness({ current, containerMemoryUsage: 60n * 2n ** 20n });
  const err = await doPodResizeAction(
    deps,
    new AbortController().signal,
    after,
    "sb",
    plan(before, after),
  );
  // A refused resize is timed too, as failed (upstream's deferred observation).
  assert.deepEqual(await durations(metrics), { false: [1, 0] });
  assert.match(
    err?.message ?? "",
    /^cannot decrease memory limits: attempting to set container "a" memory limit \(52428800\) below current usage \(62914560\)$/,
  );
  assert.deepEqual(calls, [], "nothing changed");
});

Deno.test("doPodResizeAction stops at a runtime error, leaving the rest to the next sync", async () => {
  const before = pod([c("a", "100m", "100Mi"), c("b", "100m", "100Mi")]);
  const after = pod([c("a", "200m", "100Mi"), c("b", "200m", "100Mi")]);
  const current = resourceConfigForPod(before, POD_OPTS);
  const { deps, metrics } = harness({
    current,
    failUpdate: "id-a",
    sandboxUnimplemented: false,
    updateMs: 7,
  });
  const err = await doPodResizeAction(
    deps,
    new AbortController().signal,
    after,
    "sb",
    plan(before, after),
  );
  assert.equal(err?.message, "runtime said no");
  // a's update fails (7 ms): b is not tried; timed as not successful.
  assert.deepEqual(await durations(metrics), { false: [1, 7] });
  assert.equal(deps.actuated.getContainer("u", "a"), undefined);
});

Deno.test("isPodResizeInProgress while a running container's actuated resources differ", () => {
  const before = pod([c("a", "100m", "100Mi")]);
  const state = actuatedFrom(before);
  const look = (u: string, n: string) => state.getContainer(u, n);
  assert.equal(isPodResizeInProgress(before, [running("a")], look), false);
  const after = pod([c("a", "0.2", "100Mi")]);
  assert.equal(isPodResizeInProgress(after, [running("a")], look), true);
  assert.equal(isPodResizeInProgress(after, [{ ...running("a"), state: "exited" }], look), false);
  // Equal amounts written differently are equal.
  assert.equal(isPodResizeInProgress(pod([c("a", "0.1", "100Mi")]), [running("a")], look), false);
});

Deno.test("toRuntimeResources reads the runtime's cgroup values back as upstream", () => {
  const r = api.ContainerResources.create({
    linux: api.LinuxContainerResources.create({
      cpuShares: 25n,
      cpuQuota: 3500n,
      cpuPeriod: 100_000n,
      memoryLimitInBytes: 50n * 2n ** 20n,
    }),
  });
  assert.deepEqual(toRuntimeResources(r), {
    cpuRequest: 25n,
    cpuLimit: 35n,
    memoryLimit: 50n * 2n ** 20n,
  });
  const unlimited = api.ContainerResources.create({
    linux: api.LinuxContainerResources.create({
      cpuShares: 2n,
      cpuQuota: -1n,
      cpuPeriod: 100_000n,
    }),
  });
  assert.deepEqual(toRuntimeResources(unlimited), { cpuRequest: 2n });
  assert.equal(toRuntimeResources(undefined), undefined);
});

Deno.test("a cpu request of 0 is the kernel's minimum shares; a missing one takes the limit (v1.36)", () => {
  const opts = { memoryCapacityBytes: 8 * 2 ** 30 };
  const withRequest = (requests: Record<string, string>) =>
    generateLinuxContainerResources(pod([]), {
      name: "c",
      resources: { requests, limits: { cpu: "500m" } },
    }, opts).cpuShares;
  assert.equal(withRequest({ cpu: "0" }), 2n);
  assert.equal(withRequest({}), 512n);
});

Deno.test("seedActuatedResources records what a running container runs with, at the kernel's granularity", () => {
  const p = pod([c("a", "1m", "64Mi"), c("b", "100m", "64Mi")]);
  const state = ResourceState.inMemory();
  const linux = (shares: bigint, quota: bigint, mem: bigint) =>
    api.ContainerResources.create({
      linux: api.LinuxContainerResources.create({
        cpuShares: shares,
        cpuQuota: quota,
        cpuPeriod: 100_000n,
        memoryLimitInBytes: mem,
      }),
    });
  const statuses = [
    api.ContainerStatus.create({ id: "id-a", resources: linux(2n, 1000n, 64n * 2n ** 20n) }),
    api.ContainerStatus.create({ id: "id-b", resources: linux(51n, 5000n, 32n * 2n ** 20n) }),
  ];
  seedActuatedResources(state, p, { containerStatuses: statuses }, [running("a"), running("b")]);
  // a runs as allocated (1m is 2 shares and a 1000 µs quota, the kernel's floors).
  assert.deepEqual(state.getContainer("u", "a"), p.spec!.containers[0]!.resources);
  // b runs smaller than allocated: the record says so, and a resize follows.
  assert.deepEqual(state.getContainer("u", "b"), {
    requests: { cpu: "50m", memory: "64Mi" },
    limits: { cpu: "50m", memory: `${32 * 2 ** 20}` },
  });
  const changes = emptyResizeActions();
  const b = p.spec!.containers[1]!;
  computeContainerResize(p, b, running("b"), (u, n) => state.getContainer(u, n), changes);
  assert.deepEqual(changes.containersToUpdate.cpu.map((x) => x.container.name), ["b"]);
  // A record, once there, is not overwritten.
  seedActuatedResources(state, p, { containerStatuses: [] }, [running("b")]);
  assert.equal(state.getContainer("u", "b")?.requests?.cpu, "50m");
});

Deno.test("doPodResizeAction times an aborted resize as failed", async () => {
  const before = pod([c("a", "100m", "100Mi")]);
  const after = pod([c("a", "200m", "100Mi")]);
  const { deps, metrics } = harness({ current: resourceConfigForPod(before, POD_OPTS) });
  const ctrl = new AbortController();
  deps.runtime.updateContainerResources = () => {
    ctrl.abort(new Error("shutting down"));
    return Promise.reject(new Error("canceled"));
  };
  await assert.rejects(
    doPodResizeAction(deps, ctrl.signal, after, "sb", plan(before, after)),
    /shutting down/,
  );
  assert.deepEqual(await durations(metrics), { false: [1, 0] });
});

/** A pod sized by its pod-level resources: "a" sets nothing, "b" its own limits. */
function podLevelPod(cpu: string, mem: string): V1Pod {
  return {
    metadata: { uid: "u", name: "p", namespace: "ns" },
    spec: {
      containers: [{ name: "a", image: "img" }, c("b", "100m", "32Mi")],
      resources: { requests: { cpu, memory: mem }, limits: { cpu, memory: mem } },
    },
  };
}

/** The actuated record of `p` as the kubelet writes it when the pod starts. */
async function startedAs(p: V1Pod): Promise<ResourceState> {
  const state = ResourceState.inMemory();
  await updateActuatedPodLevelResources(state, p);
  for (const x of p.spec!.containers) await setActuatedContainerResources(state, p, x);
  return state;
}

function podLevelLookup(state: ResourceState): ActuatedPodLevelLookup {
  return (uid) => ({ found: state.get(uid) !== undefined, resources: state.getPodLevel(uid) });
}

/** computePodActions' resize part with InPlacePodLevelResourcesVerticalScaling on. */
function planPodLevel(state: ResourceState, after: V1Pod) {
  const changes = emptyResizeActions();
  for (const x of after.spec!.containers) {
    computeContainerResize(
      after,
      x,
      running(x.name),
      (u, n) => state.getContainer(u, n),
      changes,
      podLevelLookup(state),
    );
  }
  changes.updatePodLevelResources = computePodLevelResize(after, podLevelLookup(state));
  return changes;
}

Deno.test("doPodResizeAction grows pod-level limits: the pod cgroup before the containers bounded by it", async () => {
  const before = podLevelPod("200m", "64Mi");
  const after = podLevelPod("400m", "128Mi");
  const state = await startedAs(before);
  // a runs bounded by the pod's limits; b by its own.
  assert.deepEqual(state.getContainer("u", "a"), { limits: { cpu: "200m", memory: "64Mi" } });
  const changes = planPodLevel(state, after);
  assert.equal(changes.updatePodLevelResources, true);
  assert.deepEqual(changes.containersToUpdate.memory.map((x) => x.container.name), ["a"]);
  assert.deepEqual(changes.containersToUpdate.cpu.map((x) => x.container.name), ["a"]);
  const { calls, deps } = harness({
    current: resourceConfigForPod(before, POD_OPTS),
    actuated: state,
  });
  const err = await doPodResizeAction(deps, new AbortController().signal, after, "sb", changes);
  assert.equal(err, undefined);
  const order = calls.filter((x) => x.what !== "sandbox").map((x) => `${x.what}: ${x.detail}`);
  assert.deepEqual(order, [
    // memory 64Mi -> 128Mi: the pod first, then a, which has no limit of its own
    `pod: memory=${128 * 2 ** 20}`,
    `container: id-a shares=2 quota=20000 mem=${128 * 2 ** 20}`,
    // cpu 200m -> 400m: quota, then shares, then a (upstream sends a's request as 0: 2 shares)
    "pod: cpuQuota=40000 cpuPeriod=100000",
    "pod: cpuShares=409",
    `container: id-a shares=2 quota=40000 mem=${128 * 2 ** 20}`,
  ]);
  // The pod-level resources are actuated, and so is a at the pod's new limits.
  assert.deepEqual(state.getPodLevel("u"), after.spec!.resources);
  assert.deepEqual(state.getContainer("u", "a")?.limits, {
    cpu: "400m",
    memory: `${128 * 2 ** 20}`,
  });
  assert.equal(
    isPodResizeInProgress(
      after,
      [running("a"), running("b")],
      (u, n) => state.getContainer(u, n),
      podLevelLookup(state),
    ),
    false,
  );
  assert.equal(planPodLevel(state, after).updatePodLevelResources, false);
});

Deno.test("doPodResizeAction shrinks pod-level limits after the containers, and records each resource", async () => {
  const before = podLevelPod("400m", "128Mi");
  const after = podLevelPod("200m", "64Mi");
  const state = await startedAs(before);
  const { calls, deps } = harness({
    current: resourceConfigForPod(before, POD_OPTS),
    actuated: state,
  });
  const err = await doPodResizeAction(
    deps,
    new AbortController().signal,
    after,
    "sb",
    planPodLevel(state, after),
  );
  assert.equal(err, undefined);
  assert.deepEqual(calls.filter((x) => x.what !== "sandbox").map((x) => x.what), [
    "container",
    "pod",
    "container",
    "pod",
    "pod",
  ]);
  assert.deepEqual(calls.filter((x) => x.what === "pod").map((x) => x.detail), [
    `memory=${64 * 2 ** 20}`,
    "cpuShares=204",
    "cpuQuota=20000 cpuPeriod=100000",
  ]);
  assert.deepEqual(state.getPodLevel("u"), after.spec!.resources);
});

Deno.test("doPodResizeAction refuses a pod-level memory limit below the pod's usage, changing nothing", async () => {
  const before = podLevelPod("200m", "128Mi");
  const after = podLevelPod("200m", "64Mi");
  const state = await startedAs(before);
  const { calls, deps, metrics } = harness({
    current: resourceConfigForPod(before, POD_OPTS),
    podMemoryUsage: 100n * 2n ** 20n,
    actuated: state,
  });
  const err = await doPodResizeAction(
    deps,
    new AbortController().signal,
    after,
    "sb",
    planPodLevel(state, after),
  );
  assert.equal(
    err?.message,
    "cannot decrease memory limits: attempting to set pod memory limit (67108864) below " +
      "current usage (104857600)",
  );
  assert.deepEqual(calls, [], "nothing changed");
  assert.deepEqual(await durations(metrics), { false: [1, 0] });
  // Not actuated: the next sync tries again.
  assert.deepEqual(state.getPodLevel("u"), before.spec!.resources);
  assert.equal(planPodLevel(state, after).updatePodLevelResources, true);
});

Deno.test("doPodResizeAction resizes the pod cgroup alone when no container follows the pod's limits", async () => {
  const mk = (cpu: string, mem: string): V1Pod => ({
    metadata: { uid: "u", name: "p", namespace: "ns" },
    spec: {
      containers: [c("b", "100m", "32Mi")],
      resources: { limits: { cpu, memory: mem } },
    },
  });
  const before = mk("1", "256Mi");
  const after = mk("2", "512Mi");
  const state = await startedAs(before);
  const changes = planPodLevel(state, after);
  assert.deepEqual(changes.containersToUpdate, { memory: [], cpu: [] });
  assert.equal(changes.updatePodLevelResources, true);
  const { calls, deps } = harness({
    current: resourceConfigForPod(before, POD_OPTS),
    actuated: state,
  });
  assert.equal(
    await doPodResizeAction(deps, new AbortController().signal, after, "sb", changes),
    undefined,
  );
  assert.deepEqual(calls.filter((x) => x.what === "pod").map((x) => x.detail), [
    `memory=${512 * 2 ** 20}`,
    "cpuQuota=200000 cpuPeriod=100000",
  ]);
  assert.equal(calls.filter((x) => x.what === "container").length, 0);
  // Only the lists the allocation has are recorded (upstream updateActuatedPodLevelResources).
  assert.deepEqual(state.getPodLevel("u"), { limits: { cpu: "2", memory: "512Mi" } });
});

Deno.test("isPodResizeInProgress while the actuated pod-level resources differ from the allocation", async () => {
  const before = podLevelPod("200m", "64Mi");
  const state = await startedAs(before);
  const look = (u: string, n: string) => state.getContainer(u, n);
  const statuses = [running("a"), running("b")];
  assert.equal(isPodResizeInProgress(before, statuses, look, podLevelLookup(state)), false);
  // Requests alone differ: a's limits are unchanged, the pod's requests are not actuated.
  const after = podLevelPod("200m", "64Mi");
  after.spec!.resources!.requests = { cpu: "100m", memory: "64Mi" };
  assert.equal(isPodResizeInProgress(after, statuses, look, podLevelLookup(state)), true);
});

Deno.test("computePodLevelResize compares with zeros when the pod has no actuated record", () => {
  const empty = ResourceState.inMemory();
  const lines: string[] = [];
  const logger = createLogger({ write: (l) => void lines.push(l) });
  assert.equal(computePodLevelResize(podLevelPod("1", "1Gi"), podLevelLookup(empty), logger), true);
  assert.match(lines.join(""), /Missing actuated pod level resource record/);
  // A pod without pod-level resources has nothing to resize at that level.
  assert.equal(computePodLevelResize(pod([c("a", "1", "1Gi")]), podLevelLookup(empty)), false);
});
