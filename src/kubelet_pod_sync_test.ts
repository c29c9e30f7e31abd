import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Pod, V1PodStatus, V1Volume } from "@kubernetes/client-node";
import * as api from "../proto/runtime/v1/api.ts";
import { FakeClock } from "./util/clock.ts";
import { CriConnection } from "./cri/connection.ts";
import type { EventRecorder } from "./client/record.ts";
import type { ContainerBehaviour } from "./testing/fake_runtime_service.ts";
import { type FakeRemoteRuntime, startFakeRuntime } from "./testing/fake_remote_runtime.ts";
import { createLogger } from "./klog/klog.ts";
import { RemoteImageService } from "./cri/remote_image.ts";
import { RemoteRuntimeService } from "./cri/remote_runtime.ts";
import { initialNode } from "./nodestatus/node_status.ts";
import {
  newPodLifecycle,
  type PodLifecycle,
  type PodLifecycleOptions,
} from "./kubelet_pod_lifecycle.ts";
import type { PodAdmitHandler, PodSyncer } from "./kubelet_pod_sync.ts";
import type { PodCgroups } from "./cm/container_manager.ts";
import type { SyncLoop } from "./kubelet_sync_loop.ts";
import { KubeletMetrics } from "./metrics/metrics.ts";
import {
  CONFIG_FIRST_SEEN_ANNOTATION,
  CONFIG_MIRROR_ANNOTATION,
  CONFIG_SOURCE_ANNOTATION,
} from "./config/pod_config.ts";
import { EventedPLEG } from "./pleg/evented.ts";
import type { PodLifecycleEventGenerator } from "./pleg/generic.ts";
import type { StatusManager } from "./status/status_manager.ts";
import { VolumeManager } from "./volume/volume_manager.ts";
import type {
  MountedVolume,
  VolumePlugin,
  VolumeSetUpContext,
  VolumeTearDownContext,
} from "./volume/plugin.ts";

const IMAGE = "docker.io/library/busybox:1.36";
const NODE = "node-1";

interface Harness extends AsyncDisposable {
  /** `<root>/pods`. */
  readonly podsDirectory: string;
  readonly fake: FakeRemoteRuntime;
  readonly runtime: RemoteRuntimeService;
  readonly clock: FakeClock;
  readonly loop: SyncLoop;
  readonly syncer: PodSyncer;
  readonly prober: PodLifecycle["prober"];
  readonly statuses: StatusManager;
  /** The lifecycle's PLEG; relisted by {@link step}, not running unless a test runs it. */
  readonly pleg: PodLifecycleEventGenerator;
  /** The lifecycle's volume manager, recording the syncer's calls. */
  readonly volumes: RecordingVolumes;
  readonly events: { reason: string; message: string; name: string }[];
  /** How often the syncer asked for a relist after changing containers. */
  readonly pokes: { count: number };
  /** Pods whose started containers the syncer had the PLEG read at once, in order. */
  readonly inspected: string[];
  /** Container behaviour by pod name. */
  readonly behaviours: Map<string, ContainerBehaviour>;
  /** Steps fake time by `ms`, relists, and lets the loop and workers run. */
  step(ms: number): Promise<void>;
  /** Steps `stepMs` (100) at a time until `pred` holds or `maxMs` of fake time have passed. */
  until(what: string, pred: () => boolean, maxMs?: number, stepMs?: number): Promise<void>;
  add(...pods: V1Pod[]): void;
  status(name: string): V1PodStatus | undefined;
}

async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise((r) => setTimeout(r, 0));
}

interface HarnessOptions {
  /** @default "4" */
  readonly allocatableCpu?: string;
  /** The volume plugins. @default none: a pod with volumes fails FailedMount */
  readonly volumePlugins?: readonly VolumePlugin[];
  readonly admitHandlers?: readonly PodAdmitHandler[];
  readonly podCgroups?: PodCgroups;
  /** Where the lifecycle records. @default none */
  readonly metrics?: KubeletMetrics;
  /** The device manager. @default none */
  readonly devices?: PodLifecycleOptions["devices"];
  /** Admission by the resource managers. @default none */
  readonly resourceAllocator?: PodLifecycleOptions["resourceAllocator"];
}

/** Pod cgroup calls of in-place resize, which these tests never make. */
const NO_RESIZE_CGROUPS: Pick<
  PodCgroups,
  "getConfig" | "setConfig" | "specConfig" | "memoryUsage" | "orphansRemoved"
> = {
  getConfig: () => Promise.reject(new Error("getConfig: not used by these tests")),
  setConfig: () => Promise.reject(new Error("setConfig: not used by these tests")),
  specConfig: () => {
    throw new Error("specConfig: not used by these tests");
  },
  memoryUsage: () => Promise.reject(new Error("memoryUsage: not used by these tests")),
  orphansRemoved: () => Promise.resolve(),
};

async function harness(opts: HarnessOptions = {}): Promise<Harness> {
  const allocatableCpu = opts.allocatableCpu ?? "4";
  const dir = await Deno.makeTempDir({ prefix: "pod-sync-" });
  const clock = new FakeClock();
  const behaviours = new Map<string, ContainerBehaviour>();
  const fake = await startFakeRuntime({
    preloadImages: [IMAGE],
    socket: join(dir, "cri.sock"),
    clock,
    onCreate: (_config, sandbox) => behaviours.get(sandbox.metadata?.name ?? ""),
  });
  const connection = new CriConnection({ endpoint: fake.endpoint });
  const runtime = new RemoteRuntimeService({ connection, timeoutMs: 10_000 });
  const images = new RemoteImageService({ connection, timeoutMs: 10_000 });
  const logger = createLogger({ write: () => {}, pid: 1 });
  const events: { reason: string; message: string; name: string }[] = [];
  const recorder: EventRecorder = {
    event: (ref, _type, reason, message) => events.push({ reason, message, name: ref.name }),
  };
  const node = initialNode({
    nodeName: NODE,
    hostname: NODE,
    nodeLabels: {},
    registerWithTaints: [],
    registerSchedulable: true,
    enableControllerAttachDetach: true,
  });
  node.status = { allocatable: { cpu: allocatableCpu, memory: "8Gi", pods: "110" } };
  const ctrl = new AbortController();
  const lifecycle = newPodLifecycle({
    config: {
      serializeImagePulls: true,
      registryPullQPS: 5,
      registryBurst: 10,
      clusterDNS: [],
      clusterDomain: "",
      resolvConf: "",
      podLogsDir: join(dir, "logs"),
      cpuCFSQuota: true,
      cpuCFSQuotaPeriod: 100,
      syncFrequency: 60_000,
    },
    runtime,
    imageService: images,
    clock,
    logger,
    recorder,
    nodeName: NODE,
    hostname: NODE,
    nodeIPs: ["192.0.2.10"],
    rootDirectory: dir,
    memoryCapacityBytes: 8 * 2 ** 30,
    cgroupV2: false,
    getNode: () => node,
    runtimeErrors: () => undefined,
    networkErrors: () => undefined,
    sourcesReady: () => true,
    legacyContainerLogsDirectory: join(dir, "containers"),
    signal: ctrl.signal,
    volumePlugins: opts.volumePlugins ?? [],
    admitHandlers: opts.admitHandlers,
    podCgroups: opts.podCgroups,
    newVolumeManager: (v) => new RecordingVolumes(v),
    metrics: opts.metrics,
    devices: opts.devices,
    resourceAllocator: opts.resourceAllocator,
  });
  const { pleg, statusManager: statuses, podManager, loop, syncer } = lifecycle;
  const podsDirectory = join(dir, "pods");
  // The PLEG is relisted by hand here, on fake time; count the syncer's requests instead.
  const pokes = { count: 0 };
  pleg.poke = () => void pokes.count++;
  const inspected: string[] = [];
  const inspectPod = pleg.inspectPod.bind(pleg);
  pleg.inspectPod = (uid, o) => {
    inspected.push(uid);
    return inspectPod(uid, o);
  };
  const running = loop.run(ctrl.signal);
  const step = async (ms: number) => {
    clock.step(ms);
    await pleg.relist();
    await settle();
  };
  return {
    podsDirectory,
    fake,
    runtime,
    clock,
    loop,
    syncer,
    prober: lifecycle.prober,
    statuses,
    pleg,
    volumes: lifecycle.volumeManager as RecordingVolumes,
    events,
    pokes,
    inspected,
    behaviours,
    step,
    async until(what, pred, maxMs = 30_000, stepMs = 100) {
      const end = clock.now() + maxMs;
      while (!pred()) {
        if (clock.now() > end) throw new Error(`fake time ran out waiting for ${what}`);
        await step(stepMs);
      }
    },
    add: (...pods) => loop.push({ op: "ADD", pods, source: "api" }),
    status: (name) => {
      const pod = podManager.getPods().find((p) => p.metadata?.name === name);
      return pod ? statuses.getPodStatus(pod.metadata!.uid!) : undefined;
    },
    async [Symbol.asyncDispose]() {
      ctrl.abort();
      await running;
      await syncer.workers.drain();
      connection.close();
      await fake.stop();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

let uidSeq = 0;

function pod(
  name: string,
  restartPolicy: "Always" | "OnFailure" | "Never" = "Always",
  extra: Partial<NonNullable<V1Pod["spec"]>> = {},
): V1Pod {
  return {
    metadata: {
      name,
      namespace: "default",
      uid: `uid-${name}-${++uidSeq}`,
      creationTimestamp: new Date(0),
    },
    spec: {
      nodeName: NODE,
      restartPolicy,
      terminationGracePeriodSeconds: 1,
      containers: [{ name: "main", image: IMAGE, imagePullPolicy: "IfNotPresent" }],
      ...extra,
    },
    status: { phase: "Pending" },
  };
}

function main(s: V1PodStatus | undefined) {
  return s?.containerStatuses?.find((c) => c.name === "main");
}

Deno.test("PodSyncer runs a pod and reports it Running with its IP", async () => {
  await using h = await harness();
  h.add(pod("web"));
  await h.until("Running", () => h.status("web")?.phase === "Running");
  const s = h.status("web")!;
  assert.ok(s.podIP, "pod IP");
  assert.equal(main(s)?.ready, true);
  assert.equal(main(s)?.restartCount, 0);
  assert.equal(h.fake.service.sandboxes.size, 1);
  // Starting the pod had the PLEG read that pod at once (no relist of all pods asked for);
  // later syncs that change nothing do neither.
  const uid = h.fake.service.sandboxes.values().next().value?.config.metadata?.uid;
  assert.deepEqual([h.pokes.count, h.inspected], [0, [uid]]);
  await h.step(61_000);
  assert.deepEqual([h.pokes.count, h.inspected], [0, [uid]]);
  // No clusterDNS here: upstream warns on each sandbox config and falls back to Default.
  assert.ok(h.events.some((e) => e.reason === "MissingClusterDNS"));
  assert.deepEqual(
    h.events.filter((e) => e.name === "web" && e.reason !== "MissingClusterDNS").map((e) =>
      e.reason
    ),
    ["Pulled", "Created", "Started"],
  );
});

Deno.test("PodSyncer reports a started pod Running from the PLEG's read of it, before any relist", async () => {
  await using h = await harness();
  const p = pod("web");
  h.add(p);
  // One relist lets the first sync begin; none after it, so only the syncer's own inspection
  // can show the start.
  await h.step(0);
  for (let i = 0; i < 200 && h.status("web")?.phase !== "Running"; i++) await settle();
  assert.equal(h.status("web")?.phase, "Running");
  assert.equal(main(h.status("web"))?.state?.running !== undefined, true);
  assert.deepEqual(h.inspected, [p.metadata!.uid]);
  assert.equal(h.pokes.count, 0);
});

Deno.test("PodSyncer syncs each pod of a PLEG batch once: not for a removal alone or a pod it lacks", async () => {
  await using h = await harness();
  const web = pod("web"), db = pod("db");
  h.add(web, db);
  await h.until("Running", () => h.status("web")?.phase === "Running");
  const synced: string[][] = [];
  const handle = h.syncer.handlePodSyncs.bind(h.syncer);
  h.syncer.handlePodSyncs = (pods) => {
    synced.push(pods.map((p) => p.metadata!.name!));
    handle(pods);
  };
  h.syncer.handlePlegEvents([
    { id: web.metadata!.uid!, type: "ContainerStarted", data: "sandbox" },
    { id: db.metadata!.uid!, type: "ContainerRemoved", data: "old" },
    { id: web.metadata!.uid!, type: "ContainerStarted", data: "main" },
    { id: "uid-gone", type: "ContainerDied", data: "c" },
  ]);
  assert.deepEqual(synced, [["web"]]);
});

Deno.test("PodSyncer asks for a relist when the PLEG could not read the started pod", async () => {
  await using h = await harness();
  h.pleg.inspectPod = () => Promise.resolve(false);
  h.add(pod("web"));
  await h.until("Running", () => h.status("web")?.phase === "Running");
  assert.equal(h.pokes.count, 1);
});

Deno.test("PodSyncer gives exit 0 and exit 1 the upstream phase under each restart policy", async () => {
  await using h = await harness();
  const cases = [
    { name: "never-0", policy: "Never", code: 0, phase: "Succeeded", reason: "Completed" },
    { name: "never-1", policy: "Never", code: 1, phase: "Failed", reason: "Error" },
    { name: "onfailure-0", policy: "OnFailure", code: 0, phase: "Succeeded", reason: "Completed" },
  ] as const;
  for (const c of cases) {
    h.behaviours.set(c.name, { exitAfterStart: true, exitCode: c.code });
    h.add(pod(c.name, c.policy));
  }
  for (const c of cases) {
    await h.until(c.phase, () => h.status(c.name)?.phase === c.phase);
    const t = main(h.status(c.name))?.state?.terminated;
    assert.equal(t?.reason, c.reason, c.name);
    assert.equal(t?.exitCode, c.code, c.name);
  }
  // Restarted by policy, Running meanwhile.
  for (
    const [name, policy, code] of [["onfailure-1", "OnFailure", 1], [
      "always-0",
      "Always",
      0,
    ]] as const
  ) {
    h.behaviours.set(name, { exitAfterStart: true, exitCode: code });
    h.add(pod(name, policy));
    await h.until(`${name} restarted`, () => (main(h.status(name))?.restartCount ?? 0) >= 1);
    const s = h.status(name)!;
    assert.equal(s.phase, "Running", name);
    assert.equal(main(s)?.lastState?.terminated?.exitCode, code, name);
  }
  // A terminal pod's sandbox is stopped.
  await h.until(
    "sandboxes of finished pods stopped",
    () =>
      [...h.fake.service.sandboxes.values()].filter((s) =>
        s.state === api.PodSandboxState.SANDBOX_READY
      ).length === 2,
  );
});

Deno.test("PodSyncer restarts a crashing container after 10 s, 20 s, 40 s of back-off", async () => {
  await using h = await harness();
  h.behaviours.set("crash", { exitAfterStart: true, exitCode: 1 });
  h.add(pod("crash"));
  // Each instance's start, noted while it exists: the container deletor removes dead instances
  // past the newest one as the next one dies.
  const seen = new Map<string, number>();
  const starts = () => {
    for (const c of h.fake.service.containers.values()) {
      if (c.startedAt > 0n) seen.set(c.id, Number(c.startedAt / 1_000_000n));
    }
    return [...seen.values()].sort((a, b) => a - b);
  };
  await h.until("five starts", () => starts().length >= 5, 120_000, 250);
  const s = starts();
  const gaps = s.slice(1).map((t, i) => t - s[i]!);
  // The first restart is immediate, then each waits for its back-off (plus at most the 1 s
  // sync tick and the 250 ms steps of this test).
  const expected = [0, 10_000, 20_000, 40_000];
  gaps.slice(0, 4).forEach((g, i) => {
    assert.ok(g >= expected[i]!, `restart ${i + 1} after ${g} ms, back-off ${expected[i]} ms`);
    assert.ok(
      g <= expected[i]! + 1_500,
      `restart ${i + 1} after ${g} ms, back-off ${expected[i]} ms`,
    );
  });
  // Right after a start the status may show the container running (the PLEG read the pod at
  // once); its exit reaches the status with the next relist.
  await h.until(
    "CrashLoopBackOff",
    () => main(h.status("crash"))?.state?.waiting?.reason === "CrashLoopBackOff",
    5_000,
    250,
  );
  const waiting = main(h.status("crash"))?.state?.waiting;
  assert.equal(waiting?.reason, "CrashLoopBackOff");
  assert.match(
    waiting?.message ?? "",
    /^back-off (\d+m)?\d+s restarting failed container=main pod=crash_default\(uid-crash-\d+\)$/,
  );
  assert.ok(h.events.some((e) => e.reason === "BackOff"));
});

Deno.test("PodSyncer allocates devices before admitting a pod, gives them to its container, and rejects a pod they cannot be allocated to", async () => {
  const allocated: string[] = [];
  const gpuLimit = (p: V1Pod) =>
    p.spec!.containers.some((c) => c.resources?.limits?.["example.com/gpu"] !== undefined);
  const resourceAllocator: NonNullable<PodLifecycleOptions["resourceAllocator"]> = {
    needsAllocation: gpuLimit,
    admit: async (p) => {
      await new Promise((r) => setTimeout(r, 5));
      if (allocated.length > 0) {
        throw new Error("requested number of devices unavailable for example.com/gpu");
      }
      allocated.push(p.metadata!.name!);
      return { admit: true };
    },
  };
  const devices: NonNullable<PodLifecycleOptions["devices"]> = {
    // As the device manager: devices for a container that asked for them, none for the rest
    // (the plain pod's container, which could otherwise be the one the lookup below finds).
    runContainerOptions: (p) =>
      Promise.resolve(
        gpuLimit(p)
          ? {
            envs: [{ name: "GPU", value: `gpu-of-${p.metadata!.name}` }],
            mounts: [],
            devices: [{ hostPath: "/dev/null", containerPath: "/dev/gpu0", permissions: "rw" }],
            annotations: [],
            cdiDevices: ["example.com/gpu=0"],
          }
          : { envs: [], mounts: [], devices: [], annotations: [], cdiDevices: [] },
      ),
    // The node has no example.com/gpu yet: admission sees what is allocated.
    sanitizeAllocatable: (a) => ({ ...a, "example.com/gpu": String(allocated.length) }),
    allocatedResourcesStatus: (p) =>
      allocated.includes(p.metadata!.name!)
        ? [{ name: "example.com/gpu", resources: [{ resourceID: "gpu0", health: "Healthy" }] }]
        : [],
  };
  await using h = await harness({ devices, resourceAllocator });
  const gpu = () => {
    const p = pod(`gpu${uidSeq + 1}`);
    p.spec!.containers[0]!.resources = { limits: { "example.com/gpu": "1" } };
    return p;
  };
  const [first, second] = [gpu(), gpu()];
  h.add(first, second, pod("plain"));
  await h.until("first Running", () => h.status(first.metadata!.name!)?.phase === "Running");
  await h.until("plain Running", () => h.status("plain")?.phase === "Running");
  const s = h.status(second.metadata!.name!)!;
  assert.equal(s.phase, "Failed");
  assert.equal(s.reason, "UnexpectedAdmissionError");
  assert.equal(
    s.message,
    "Pod was rejected: Allocate failed due to requested number of devices unavailable for " +
      "example.com/gpu, which is unexpected",
  );
  assert.deepEqual(allocated, [first.metadata!.name]);
  const config = [...h.fake.service.containers.values()].find((c) =>
    c.config.envs.some((e) => e.key === "GPU")
  )?.config;
  assert.ok(config, "the device's env reached the runtime");
  assert.equal(
    new TextDecoder().decode(config.envs.find((e) => e.key === "GPU")!.value),
    `gpu-of-${first.metadata!.name}`,
  );
  assert.deepEqual(config.devices.map((d) => d.containerPath), ["/dev/gpu0"]);
  assert.deepEqual(config.CDIDevices, [{ name: "example.com/gpu=0" }]);
  // The device's health is in the container's status (ResourceHealthStatus).
  await h.until(
    "the device health in the status",
    () => main(h.status(first.metadata!.name!))?.allocatedResourcesStatus !== undefined,
  );
  assert.deepEqual(main(h.status(first.metadata!.name!))?.allocatedResourcesStatus, [
    { name: "example.com/gpu", resources: [{ resourceID: "gpu0", health: "Healthy" }] },
  ]);
});

Deno.test("PodSyncer's runonce admission asks the resource managers first and rejects with their reason", async () => {
  const resourceAllocator: NonNullable<PodLifecycleOptions["resourceAllocator"]> = {
    needsAllocation: (p) => p.metadata!.name === "numa",
    admit: () =>
      Promise.resolve({
        admit: false,
        reason: "TopologyAffinityError",
        message: "Resources cannot be allocated with Topology locality",
      }),
  };
  await using h = await harness({ resourceAllocator });
  const numa = pod("numa");
  assert.equal(await h.syncer.admitWithResourcesAndReject(numa, []), false);
  assert.equal(h.statuses.getPodStatus(numa.metadata!.uid!)?.reason, "TopologyAffinityError");
  assert.ok(h.events.some((e) => e.name === "numa" && e.reason === "TopologyAffinityError"));
  // A pod the managers have nothing for is admitted as before.
  assert.equal(await h.syncer.admitWithResourcesAndReject(pod("plain"), []), true);
});

Deno.test("PodSyncer rejects a pod that asks for more CPU than allocatable, and only that one", async () => {
  await using h = await harness({ allocatableCpu: "2" });
  const big = pod("big");
  big.spec!.containers[0]!.resources = { requests: { cpu: "3" } };
  h.add(big, pod("small"));
  await h.until("small Running", () => h.status("small")?.phase === "Running");
  const s = h.status("big")!;
  assert.equal(s.phase, "Failed");
  assert.equal(s.reason, "OutOfcpu");
  assert.match(s.message ?? "", /^Pod was rejected: Node didn't have enough resource: cpu/);
  assert.ok(h.events.some((e) => e.name === "big" && e.reason === "OutOfcpu"));
  // Nothing of it reached the runtime.
  assert.equal(h.fake.service.sandboxes.size, 1);
});

Deno.test("PodSyncer stops a removed pod with its grace period and forgets it", async () => {
  await using h = await harness();
  const p = pod("gone");
  h.add(p);
  await h.until("Running", () => h.status("gone")?.phase === "Running");
  h.loop.push({ op: "REMOVE", pods: [p], source: "api" });
  await h.until(
    "containers stopped",
    () =>
      [...h.fake.service.containers.values()].every((c) =>
        c.state === api.ContainerState.CONTAINER_EXITED
      ),
    10_000,
  );
  await h.until(
    "sandbox stopped",
    () =>
      [...h.fake.service.sandboxes.values()].every((s) =>
        s.state === api.PodSandboxState.SANDBOX_NOTREADY
      ),
    10_000,
  );
  assert.ok(h.events.some((e) => e.reason === "Killing"));
  await h.until("worker finished", () => h.syncer.workers.isPodKnownTerminated(p.metadata!.uid!));
});

Deno.test("PodSyncer removes dead containers as they die: older instances at once, every one once the pod is gone", async () => {
  await using h = await harness();
  const p = pod("deaths");
  h.add(p);
  await h.until("Running", () => h.status("deaths")?.phase === "Running");
  const all = () => [...h.fake.service.containers.values()];
  const running = () => all().find((c) => c.state === api.ContainerState.CONTAINER_RUNNING);
  const first = running()!.id;
  h.fake.service.exitContainer(first, 1, "Error");
  await h.until("a second instance", () => (running()?.id ?? first) !== first, 60_000);
  const second = running()!.id;
  h.fake.service.exitContainer(second, 1, "Error");
  // The second death removes the first dead instance; the newest dead one stays (the kept one).
  await h.until("the first instance removed", () => !h.fake.service.containers.has(first));
  assert.ok(h.fake.service.containers.has(second));

  // Deleted through the API (graceful deletion): once the pod is terminated every dead container
  // goes (here from syncTerminatedPod: the relist after the kill saw the sandbox die before the
  // worker marked the pod terminated).
  const deleted = structuredClone(p);
  deleted.metadata!.deletionTimestamp = new Date(h.clock.now());
  deleted.metadata!.deletionGracePeriodSeconds = 30;
  h.loop.push({ op: "DELETE", pods: [deleted], source: "api" });
  await h.until("every container removed", () => all().length === 0, 60_000);
  assert.ok(h.syncer.workers.shouldPodContentBeRemoved(p.metadata!.uid!));
});

Deno.test("PodSyncer removes an evicted pod's dead containers at its next sync", async () => {
  await using h = await harness();
  const p = pod("evicted");
  h.add(p);
  await h.until("Running", () => h.status("evicted")?.phase === "Running");
  // The API's copy says the kubelet evicted it (upstream PodIsEvicted): the pod stops.
  const evicted = structuredClone(p);
  evicted.status = { phase: "Failed", reason: "Evicted" };
  h.loop.push({ op: "UPDATE", pods: [evicted], source: "api" });
  await h.until("terminated", () => h.syncer.workers.isPodKnownTerminated(p.metadata!.uid!));
  // Not deleted, so the worker keeps the newest dead instance; the syncs its PLEG events bring
  // see the eviction and remove it.
  await h.until("the dead container removed", () => h.fake.service.containers.size === 0);
});

Deno.test("PodSyncer kills runtime pods it has no pod for (orphans) at housekeeping", async () => {
  await using h = await harness();
  // A pod started by an earlier life of the agent and deleted meanwhile.
  const labels = {
    "io.kubernetes.pod.name": "orphan",
    "io.kubernetes.pod.namespace": "default",
    "io.kubernetes.pod.uid": "uid-orphan",
  };
  const sandboxConfig = api.PodSandboxConfig.create({
    metadata: { name: "orphan", namespace: "default", uid: "uid-orphan", attempt: 0 },
    labels,
  });
  const sandbox = await h.runtime.runPodSandbox(sandboxConfig, "");
  const id = await h.runtime.createContainer(
    sandbox,
    api.ContainerConfig.create({
      metadata: { name: "main", attempt: 0 },
      image: { image: IMAGE },
      labels: { ...labels, "io.kubernetes.container.name": "main" },
    }),
    sandboxConfig,
  );
  await h.runtime.startContainer(id);
  await h.until(
    "the orphan stopped",
    () =>
      h.fake.service.containers.get(id)?.state === api.ContainerState.CONTAINER_EXITED &&
      h.fake.service.sandboxes.get(sandbox)?.state === api.PodSandboxState.SANDBOX_NOTREADY,
    10_000,
  );
});

Deno.test("PodSyncer.killPodNow stops the pod, or reports ExceededGracePeriod past 1.5x grace", async () => {
  await using h = await harness();
  const p = pod("evictee");
  h.add(p);
  await h.until("Running", () => h.status("evictee")?.phase === "Running");
  let done = false;
  const kill = h.syncer.killPodNow(p, { evict: true, gracePeriodOverride: 0 }).then(() =>
    done = true
  );
  await h.until("killPodNow resolved", () => done, 5_000);
  await kill;
  assert.ok(
    [...h.fake.service.containers.values()].every((c) =>
      c.state === api.ContainerState.CONTAINER_EXITED
    ),
  );

  // A runtime that never answers StopContainer: the wait ends after max(1.5 × 20 s, 10 s).
  const stuck = pod("stuck");
  stuck.spec!.terminationGracePeriodSeconds = 20;
  h.add(stuck);
  await h.until("stuck Running", () => h.status("stuck")?.phase === "Running");
  h.fake.setLatency("StopContainer", 3_600_000);
  let error: unknown;
  const waiting = h.syncer.killPodNow(stuck).catch((e) => (error = e));
  await h.step(29_000);
  assert.equal(error, undefined);
  await h.step(1_000);
  await waiting;
  assert.match(String(error), /timeout waiting to kill pod/);
  assert.ok(
    h.events.some((e) =>
      e.name === "stuck" && e.reason === "ExceededGracePeriod" &&
      e.message === "Container runtime did not kill the pod within specified grace period."
    ),
  );
  h.fake.setLatency("StopContainer", 0);
});

/** A configMap-like plugin: fails while its configMap is in `missing`, else makes the dir. */
class FakeConfigMapPlugin implements VolumePlugin {
  readonly name = "kubernetes.io/configmap";
  readonly requiresRemount = true;
  readonly missing = new Set<string>();
  readonly tornDown: string[] = [];
  /** While set, every tearDown throws it. */
  failTearDown?: Error;

  canSupport(volume: V1Volume): boolean {
    return volume.configMap !== undefined;
  }

  async setUp(ctx: VolumeSetUpContext): Promise<MountedVolume> {
    const cm = ctx.volume.configMap?.name ?? "";
    if (this.missing.has(cm)) throw new Error(`configmap "${cm}" not found`);
    await Deno.mkdir(ctx.dir, { recursive: true });
    return { hostPath: ctx.dir, readOnly: true, selinuxRelabel: false };
  }

  async tearDown(ctx: VolumeTearDownContext): Promise<void> {
    if (this.failTearDown) throw this.failTearDown;
    this.tornDown.push(`${ctx.podUid}/${ctx.volumeName}`);
    await Deno.remove(ctx.dir, { recursive: true }).catch(() => {});
  }
}

/** The harness's volume manager: a real one that records what the syncer asks of it. */
class RecordingVolumes extends VolumeManager {
  readonly mounts: string[] = [];
  readonly unmounts: string[] = [];
  /** The keep set of each cleanupOrphanedPodDirs, sorted. */
  readonly keeps: string[][] = [];
  /** While set, unmountPodVolumes waits for it. */
  unmountGate?: Promise<void>;

  override mountPodVolumes(signal: AbortSignal, pod: V1Pod): Promise<void> {
    this.mounts.push(pod.metadata?.uid ?? "");
    return super.mountPodVolumes(signal, pod);
  }

  override async unmountPodVolumes(signal: AbortSignal, uid: string): Promise<void> {
    this.unmounts.push(uid);
    await this.unmountGate;
    await super.unmountPodVolumes(signal, uid);
  }

  override cleanupOrphanedPodDirs(signal: AbortSignal, keep: ReadonlySet<string>): Promise<void> {
    this.keeps.push([...keep].sort());
    return super.cleanupOrphanedPodDirs(signal, keep);
  }
}

async function volumesHarness() {
  const plugin = new FakeConfigMapPlugin();
  const h = await harness({ volumePlugins: [plugin] });
  return { h, plugin, volumes: h.volumes };
}

/** A pod whose container mounts configMap `cm` as volume "cfg". */
function podWithConfig(name: string, cm: string): V1Pod {
  const p = pod(name);
  const spec = p.spec!;
  spec.volumes = [{ name: "cfg", configMap: { name: cm } }];
  spec.containers[0]!.volumeMounts = [{ name: "cfg", mountPath: "/etc/cfg" }];
  return p;
}

Deno.test("PodSyncer reports FailedMount and keeps the pod ContainerCreating until its volumes mount", async () => {
  const { h, plugin, volumes } = await volumesHarness();
  await using _ = h;
  plugin.missing.add("settings");
  const p = podWithConfig("web", "settings");
  h.add(p);
  const unable = "Unable to attach or mount volumes: unmounted volumes=[cfg], unattached " +
    'volumes=[], failed to process volumes=[]: configmap "settings" not found';
  await h.until("FailedMount", () => h.events.some((e) => e.message === unable));
  assert.ok(h.events.some((e) =>
    e.name === "web" && e.reason === "FailedMount" &&
    e.message === 'MountVolume.SetUp failed for volume "cfg" : configmap "settings" not found'
  ));
  assert.equal(h.events.filter((e) => e.message === unable)[0]?.reason, "FailedMount");
  // Nothing reached the runtime, and the pod waits in ContainerCreating.
  assert.equal(h.fake.service.sandboxes.size, 0);
  assert.equal(h.status("web")?.phase, "Pending");
  assert.equal(main(h.status("web"))?.state?.waiting?.reason, "ContainerCreating");

  // The worker retries with its back-off; once the configMap exists the pod starts.
  const tries = volumes.mounts.length;
  plugin.missing.clear();
  await h.until("Running", () => h.status("web")?.phase === "Running");
  assert.ok(volumes.mounts.length > tries);
  const hostPath = join(
    h.podsDirectory,
    p.metadata!.uid!,
    "volumes",
    "kubernetes.io~configmap",
    "cfg",
  );
  assert.equal(volumes.podVolumes(p.metadata!.uid!).get("cfg")?.hostPath, hostPath);
  // The container got the volume, read-only as the plugin says, and the managed hosts file.
  const [container] = [...h.fake.service.containers.values()];
  assert.deepEqual(
    container?.config.mounts.map((m) => [m.containerPath, m.hostPath, m.readonly]),
    [
      ["/etc/cfg", hostPath, true],
      ["/etc/hosts", join(h.podsDirectory, p.metadata!.uid!, "etc-hosts"), false],
      ["/dev/termination-log", container?.config.mounts[2]?.hostPath, false],
    ],
  );
});

Deno.test("PodSyncer keeps a terminated pod unfinished until its volumes are torn down", async () => {
  const { h, plugin, volumes } = await volumesHarness();
  await using _ = h;
  const p = podWithConfig("web", "settings");
  const uid = p.metadata!.uid!;
  h.add(p);
  await h.until("Running", () => h.status("web")?.phase === "Running");
  plugin.failTearDown = new Error("device or resource busy");
  h.loop.push({ op: "REMOVE", pods: [p], source: "api" });
  await h.until("a failed teardown", () => volumes.unmounts.length >= 1);
  await h.step(1000);
  // Not finished: the API object would stay, and the worker tries again after its back-off.
  assert.equal(h.syncer.workers.shouldPodBeFinished(uid), false);
  assert.equal(await volumes.podVolumesExist(uid), true);
  await h.until("a retry", () => volumes.unmounts.length >= 2);
  plugin.failTearDown = undefined;
  await h.until("worker finished", () => h.syncer.workers.shouldPodBeFinished(uid), 60_000);
  assert.equal(await volumes.podVolumesExist(uid), false);
});

Deno.test("PodSyncer mounts nothing for a terminating pod and unmounts a removed pod's volumes", async () => {
  const { h, plugin, volumes } = await volumesHarness();
  await using _ = h;
  const p = podWithConfig("web", "settings");
  const uid = p.metadata!.uid!;
  h.add(p);
  await h.until("Running", () => h.status("web")?.phase === "Running");
  assert.equal(await volumes.podVolumesExist(uid), true);
  assert.deepEqual(plugin.tornDown, []);

  // Stopping takes a while (less than the grace period): meanwhile a sync mounts nothing.
  h.fake.setLatency("StopContainer", 500);
  h.loop.push({ op: "REMOVE", pods: [p], source: "api" });
  await h.until("termination requested", () => h.syncer.workers.isPodTerminationRequested(uid));
  const mounts = volumes.mounts.length;
  assert.equal(
    await h.syncer.syncPod(new AbortController().signal, "sync", p, undefined, undefined),
    false,
  );
  assert.equal(volumes.mounts.length, mounts);

  await h.until("worker finished", () => h.syncer.workers.shouldPodBeFinished(uid), 20_000);
  h.fake.setLatency("StopContainer", 0);
  assert.deepEqual(volumes.unmounts, [uid]);
  assert.deepEqual(plugin.tornDown, [`${uid}/cfg`]);
  assert.equal(await volumes.podVolumesExist(uid), false);
  assert.equal(volumes.podVolumes(uid).size, 0);
});

Deno.test("PodSyncer cleans up orphaned pod dirs at housekeeping, keeping desired, working and running pods", async () => {
  const { h, plugin, volumes } = await volumesHarness();
  await using _ = h;
  const kept = podWithConfig("kept", "settings");
  h.add(kept);
  await h.until("kept Running", () => h.status("kept")?.phase === "Running");

  // A runtime pod without an API object, already stopped: no worker, only the runtime has it.
  const sandboxConfig = api.PodSandboxConfig.create({
    metadata: { name: "runtime-only", namespace: "default", uid: "uid-runtime-only", attempt: 0 },
    labels: {
      "io.kubernetes.pod.name": "runtime-only",
      "io.kubernetes.pod.namespace": "default",
      "io.kubernetes.pod.uid": "uid-runtime-only",
    },
  });
  await h.runtime.stopPodSandbox(await h.runtime.runPodSandbox(sandboxConfig, ""));

  // A pod that never mounted, removed, whose worker is held in its volume teardown: known only
  // to the pod workers.
  plugin.missing.add("absent");
  const stuck = podWithConfig("stuck", "absent");
  const stuckUid = stuck.metadata!.uid!;
  h.add(stuck);
  await h.until("stuck FailedMount", () => h.events.some((e) => e.name === "stuck"));
  const gate = Promise.withResolvers<void>();
  volumes.unmountGate = gate.promise;
  // Released whatever happens, or the harness would wait for the held worker forever.
  await using _release = { [Symbol.asyncDispose]: () => Promise.resolve(gate.resolve()) };
  h.loop.push({ op: "REMOVE", pods: [stuck], source: "api" });
  await h.until("stuck unmounting", () => volumes.unmounts.includes(stuckUid));

  // A pod dir left from an earlier life, with a volume on disk.
  const gone = join(h.podsDirectory, "uid-gone");
  await Deno.mkdir(join(gone, "volumes", "kubernetes.io~configmap", "cfg"), { recursive: true });
  await Deno.mkdir(join(gone, "plugins"));
  const stoppedDir = join(h.podsDirectory, "uid-runtime-only");
  await Deno.mkdir(join(stoppedDir, "volumes"), { recursive: true });
  const seen = volumes.keeps.length;
  await h.until("a housekeeping after that", () => volumes.keeps.length > seen + 1);
  // The stopped runtime-only pod is not kept: only running runtime pods are (upstream).
  const expected = [kept.metadata!.uid!, stuckUid].sort();
  assert.deepEqual(volumes.keeps.at(-1), expected);
  await assert.rejects(Deno.lstat(gone), Deno.errors.NotFound);
  await assert.rejects(Deno.lstat(stoppedDir), Deno.errors.NotFound);
  assert.ok(plugin.tornDown.includes("uid-gone/cfg"));
  // The kept pod's volume is untouched.
  assert.equal(volumes.podVolumes(kept.metadata!.uid!).size, 1);
  assert.ok(!plugin.tornDown.some((t) => t.startsWith(kept.metadata!.uid!)));
  gate.resolve();
  await h.until("stuck finished", () => h.syncer.workers.shouldPodBeFinished(stuckUid));
});

Deno.test("PodSyncer rejects a pod an admit handler refuses, with its reason and message", async () => {
  let pressure = true;
  await using h = await harness({
    admitHandlers: [
      (p) =>
        pressure && p.metadata?.name === "besteffort"
          ? {
            admit: false,
            reason: "Evicted",
            message: "The node had condition: [MemoryPressure]. ",
          }
          : { admit: true },
    ],
  });
  h.add(pod("besteffort"));
  await h.until("rejected", () => h.status("besteffort")?.phase === "Failed");
  assert.equal(h.status("besteffort")?.reason, "Evicted");
  assert.equal(
    h.status("besteffort")?.message,
    "Pod was rejected: The node had condition: [MemoryPressure]. ",
  );
  assert.ok(h.events.some((e) => e.name === "besteffort" && e.reason === "Evicted"));
  assert.equal(h.fake.service.sandboxes.size, 0);
  pressure = false;
  h.add(pod("later"));
  await h.until("later Running", () => h.status("later")?.phase === "Running");
});

Deno.test("PodSyncer.killPodNow with a status gives the evicted pod that status", async () => {
  await using h = await harness();
  const p = pod("victim");
  h.add(p);
  await h.until("Running", () => h.status("victim")?.phase === "Running");
  const message = "The node was low on resource: memory. ";
  const killed = h.syncer.killPodNow(p, {
    evict: true,
    gracePeriodOverride: 1,
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
  });
  await h.until("killed", () => h.syncer.workers.shouldPodBeFinished(p.metadata!.uid!), 20_000);
  await killed;
  const status = h.status("victim");
  assert.equal(status?.phase, "Failed");
  assert.equal(status?.reason, "Evicted");
  assert.equal(status?.message, message);
  assert.equal(
    status?.conditions?.find((c) => c.type === "DisruptionTarget")?.reason,
    "TerminationByKubelet",
  );
  assert.equal(status?.conditions?.find((c) => c.type === "Ready")?.status, "False");
});

Deno.test("PodSyncer creates the pod cgroup before the sandbox, whose parent it is, and removes orphans", async () => {
  const ensured: string[] = [];
  const kept: string[][] = [];
  let fail: Error | undefined = new Error(
    "mkdir /sys/fs/cgroup/cpu/kubepods/pod-x: permission denied",
  );
  const podCgroups: PodCgroups = {
    ...NO_RESIZE_CGROUPS,
    cgroupParent: (p) => `/kubepods/besteffort/pod${p.metadata?.uid}`,
    ensureExists: (p) => {
      ensured.push(p.metadata?.name ?? "");
      return fail ? Promise.reject(fail) : Promise.resolve();
    },
    cleanupOrphans: (keep, opts) => {
      kept.push([...keep].sort());
      volumesExist = opts?.volumesExist;
      return Promise.resolve();
    },
  };
  let volumesExist: ((uid: string) => boolean) | undefined;
  await using h = await harness({ podCgroups });
  const p = pod("web");
  h.add(p);
  await h.until(
    "FailedToCreatePodContainer",
    () => h.events.some((e) => e.reason === "FailedToCreatePodContainer"),
  );
  assert.equal(
    h.events.find((e) => e.reason === "FailedToCreatePodContainer")?.message,
    `unable to ensure pod container exists: ${fail.message}`,
  );
  assert.equal(h.fake.service.sandboxes.size, 0, "no sandbox without its cgroup");
  fail = undefined;
  await h.until("Running", () => h.status("web")?.phase === "Running", 60_000);
  const [sandbox] = [...h.fake.service.sandboxes.values()];
  assert.equal(sandbox?.config.linux?.cgroupParent, `/kubepods/besteffort/pod${p.metadata!.uid}`);
  assert.ok(ensured.length >= 2);
  await h.until("a housekeeping", () => kept.some((k) => k.includes(p.metadata!.uid!)));
  // The removal asks the volume manager whether an orphan's volumes are still there.
  assert.equal(volumesExist?.("uid-orphan"), false);
  await Deno.mkdir(join(h.podsDirectory, "uid-orphan", "volumes", "kubernetes.io~empty-dir", "d"), {
    recursive: true,
  });
  assert.equal(volumesExist?.("uid-orphan"), true);
});

Deno.test("PodSyncer keeps the cgroup of a pod added while a housekeeping removes orphans", async () => {
  const keeps: ReadonlySet<string>[] = [];
  const ensured: string[] = [];
  let open!: () => void;
  const gate = new Promise<void>((r) => (open = r));
  const podCgroups: PodCgroups = {
    ...NO_RESIZE_CGROUPS,
    cgroupParent: (p) => `/kubepods/besteffort/pod${p.metadata?.uid}`,
    ensureExists: (p) => {
      ensured.push(p.metadata?.name ?? "");
      return Promise.resolve();
    },
    cleanupOrphans: (keep) => {
      keeps.push(keep);
      // The first cleanup is still on its way to the cgroups when the pod comes.
      return keeps.length === 1 ? gate : Promise.resolve();
    },
  };
  await using h = await harness({ podCgroups });
  const late = pod("late");
  try {
    await h.until("a housekeeping", () => keeps.length === 1);
    h.add(late);
    await h.until("the pod's cgroup", () => ensured.includes("late"));
    assert.ok(keeps[0]!.has(late.metadata!.uid!), "the running cleanup keeps the new pod");
  } finally {
    open();
  }
  await h.until("Running", () => h.status("late")?.phase === "Running", 60_000);
});

/** Real-time wait, for what gRPC round trips deliver while fake time stands still. */
async function realUntil(what: string, cond: () => boolean): Promise<void> {
  const end = Date.now() + 5_000;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

Deno.test("the evented PLEG (the default) brings a container exit to the pod status with no relist and no relist period passing", async () => {
  await using h = await harness();
  assert.ok(h.pleg instanceof EventedPLEG, "newPodLifecycle builds the evented PLEG by default");
  h.add(pod("evented"));
  const state = () => h.status("evented")?.containerStatuses?.[0]?.state;
  await h.until("the container to run", () => state()?.running !== undefined);

  const ctl = new AbortController();
  const running = h.pleg.run(ctl.signal);
  try {
    await realUntil("the event stream", () => h.fake.eventStreams === 1);
    await realUntil("the settle wait", () => h.clock.waiters > 0);
    h.clock.step(1_000);
    await realUntil("events in use", () => (h.pleg as EventedPLEG).inUse);
    // A relist the same clock step started may still be queued: let it end first.
    await h.pleg.relist();
    const lists = h.fake.callCount("ListContainers");
    // The worker's last sync started at this fake millisecond; the exit comes in the next one.
    h.clock.step(1);
    const before = h.clock.now();
    const id = h.status("evented")!.containerStatuses![0]!.containerID!.replace(/^\w+:\/\//, "");
    h.fake.service.exitContainer(id, 3, "Error");
    // The exit shows as the state, or, once the container was restarted, as its last state.
    const exited = () =>
      state()?.terminated ?? h.status("evented")?.containerStatuses?.[0]?.lastState?.terminated;
    await realUntil("the exit in the pod status", () => exited()?.exitCode === 3);
    assert.equal(exited()?.reason, "Error");
    assert.equal(h.clock.now(), before, "no fake time passed");
    assert.equal(h.fake.callCount("ListContainers"), lists, "no relist");
  } finally {
    ctl.abort();
    await running;
  }
});

Deno.test("PodSyncer fails a running pod whose activeDeadlineSeconds was shortened past its age", async () => {
  await using h = await harness();
  const p = pod("deadline");
  h.add(p);
  await h.until("Running", () => h.status("deadline")?.phase === "Running");
  await h.step(10_000);
  assert.equal(h.status("deadline")?.phase, "Running");
  // The API allows the deadline to be set or shortened on a running pod (e2e: "should allow
  // activeDeadlineSeconds to be updated").
  const updated = structuredClone(p);
  updated.spec!.activeDeadlineSeconds = 5;
  h.loop.push({ op: "UPDATE", pods: [updated], source: "api" });
  await h.until("Failed", () => h.status("deadline")?.phase === "Failed", 5_000);
  const s = h.status("deadline")!;
  assert.equal(s.reason, "DeadlineExceeded");
  assert.equal(s.message, "Pod was active on the node longer than the specified deadline");
  assert.ok(h.events.some((e) => e.name === "deadline" && e.reason === "DeadlineExceeded"));
  await h.until(
    "containers stopped",
    () =>
      [...h.fake.service.containers.values()].every((c) =>
        c.state === api.ContainerState.CONTAINER_EXITED
      ),
  );
});

Deno.test("PodSyncer fails a pod at its activeDeadlineSeconds without waiting for the resync", async () => {
  await using h = await harness();
  h.add(pod("short-lived", "Always", { activeDeadlineSeconds: 3 }));
  await h.until("Running", () => h.status("short-lived")?.phase === "Running");
  // The resync is a minute away (syncFrequency); the deadline handler asks for the pod at the
  // first sync tick past its deadline.
  await h.until("Failed", () => h.status("short-lived")?.phase === "Failed", 5_000);
  assert.equal(h.status("short-lived")?.reason, "DeadlineExceeded");
});

Deno.test("PodSyncer resizes a running pod in place and reports it done, as upstream", async () => {
  await using h = await harness();
  const res = (cpu: string, limit: string) => ({ requests: { cpu }, limits: { cpu: limit } });
  const p = pod("web", "Always", {
    containers: [{ name: "main", image: IMAGE, resources: res("2m", "10m") }],
  });
  p.metadata!.generation = 1;
  h.add(p);
  await h.until("Running", () => h.status("web")?.phase === "Running");
  const id = [...h.fake.service.containers.keys()][0]!;
  const resized: V1Pod = structuredClone(p);
  resized.metadata!.generation = 2;
  resized.spec!.containers[0]!.resources = res("1m", "5m");
  h.loop.push({ op: "UPDATE", pods: [resized], source: "api" });
  await h.until(
    "the resize done",
    () => {
      const s = h.status("web");
      return s?.observedGeneration === 2 &&
        !s.conditions?.some((c) => c.type.startsWith("PodResize")) &&
        main(s)?.resources?.limits?.cpu === "5m";
    },
    10_000,
  );
  const s = h.status("web")!;
  assert.deepEqual(main(s)?.resources, res("1m", "5m"));
  assert.deepEqual(main(s)?.allocatedResources, { cpu: "1m" });
  assert.equal(main(s)?.restartCount, 0);
  // The runtime got the new size: shares at the kernel's floor, quota at its.
  const linux = h.fake.service.containers.get(id)?.resources;
  assert.equal(linux?.cpuShares, 2n);
  assert.equal(linux?.cpuQuota, 1000n);
  assert.deepEqual(
    h.events.filter((e) => e.reason.startsWith("Resize")).map((e) => e.reason),
    ["ResizeStarted", "ResizeCompleted"],
  );
});

Deno.test("PodSyncer stops a terminating pod's liveness and startup probes, not its readiness", async () => {
  await using h = await harness();
  const exec = { exec: { command: ["true"] }, periodSeconds: 10 };
  const p = pod("probed", "Always", {
    terminationGracePeriodSeconds: 30,
    containers: [{ name: "main", image: IMAGE, livenessProbe: exec, readinessProbe: exec }],
  });
  h.add(p);
  await h.until("Running", () => h.status("probed")?.phase === "Running");
  assert.equal(h.prober.workerCount, 2);
  // What is left when the termination stops the probes, and whether the container still runs.
  const seen: Array<{ workers: number; running: boolean }> = [];
  const stop = h.prober.stopLivenessAndStartup.bind(h.prober);
  h.prober.stopLivenessAndStartup = (x) => {
    stop(x);
    seen.push({
      workers: h.prober.workerCount,
      running: [...h.fake.service.containers.values()].some((c) =>
        c.state === api.ContainerState.CONTAINER_RUNNING
      ),
    });
  };
  h.loop.push({ op: "REMOVE", pods: [p], source: "api" });
  await h.until("terminated", () => h.syncer.workers.isPodKnownTerminated(p.metadata!.uid!));
  // Before the container was stopped, only readiness was left.
  assert.deepEqual(seen[0], { workers: 1, running: true });
  // Then the readiness worker goes too, once it has seen its stop (it ends on its own loop).
  await h.until("no probe workers", () => h.prober.workerCount === 0);
});

/** A runtime pod no pod stands for (started by an earlier life of the agent), running. */
async function startOrphan(h: Harness, name: string): Promise<void> {
  const labels = {
    "io.kubernetes.pod.name": name,
    "io.kubernetes.pod.namespace": "default",
    "io.kubernetes.pod.uid": `uid-${name}`,
  };
  const sandboxConfig = api.PodSandboxConfig.create({
    metadata: { name, namespace: "default", uid: `uid-${name}`, attempt: 0 },
    labels,
  });
  const sandbox = await h.runtime.runPodSandbox(sandboxConfig, "");
  const id = await h.runtime.createContainer(
    sandbox,
    api.ContainerConfig.create({
      metadata: { name: "main", attempt: 0 },
      image: { image: IMAGE },
      labels: { ...labels, "io.kubernetes.container.name": "main" },
    }),
    sandboxConfig,
  );
  await h.runtime.startContainer(id);
}

/** kubelet_working_pods as rendered: `lifecycle/config/static value`, in upstream's order. */
async function workingPods(m: KubeletMetrics): Promise<string[]> {
  return (await m.render()).split("\n").flatMap((l) => {
    const r = /^kubelet_working_pods\{config="(.*)",lifecycle="(.*)",static="(.*)"\} (\d+)$/
      .exec(l);
    return r ? [`${r[2]}/${r[1]}/${r[3]} ${r[4]}`] : [];
  });
}

Deno.test("PodSyncer.handlePodCleanups sets upstream's pod counts and every kubelet_working_pods series", async () => {
  const metrics = new KubeletMetrics({ process: false });
  await using h = await harness({ metrics });
  const web = pod("web", "Always", {
    ephemeralContainers: [{ name: "debug", image: IMAGE }, { name: "debug2", image: IMAGE }],
  });
  const fromFile = pod("static-web");
  fromFile.metadata!.annotations = { [CONFIG_SOURCE_ANNOTATION]: "file" };
  const mirror = pod("static-web");
  mirror.metadata!.annotations = {
    [CONFIG_SOURCE_ANNOTATION]: "api",
    [CONFIG_MIRROR_ANNOTATION]: "hash",
  };
  h.add(web, mirror);
  h.loop.push({ op: "ADD", pods: [fromFile], source: "file" });
  await h.until(
    "both pods running",
    () => !!main(h.status("web"))?.state?.running && !!main(h.status("static-web"))?.state?.running,
  );
  const signal = new AbortController().signal;
  await h.syncer.handlePodCleanups(signal);
  for (const g of [metrics.desiredPods, metrics.activePods]) {
    assert.deepEqual([g.get({ static: "" }), g.get({ static: "true" })], [1, 1], g.name);
  }
  assert.equal(metrics.mirrorPods.get(), 1);
  assert.equal(metrics.managedEphemeralContainers.get(), 2);
  // All 15 combinations upstream sets, zero included.
  const all = (nonZero: Record<string, number>) =>
    ["sync", "terminating", "terminated"].flatMap((l) =>
      ["desired/", "desired/true", "orphan/", "orphan/true", "runtime_only/unknown"].map((k) =>
        `${l}/${k} ${nonZero[`${l}/${k}`] ?? 0}`
      )
    ).sort();
  assert.deepEqual(
    (await workingPods(metrics)).sort(),
    all({ "sync/desired/": 1, "sync/desired/true": 1 }),
  );
  assert.equal(metrics.orphanedRuntimePodsTotal.get(), 0);

  // A runtime pod the workers never knew: killed, counted once, runtime only.
  await startOrphan(h, "orphan");
  await h.pleg.relist();
  await h.syncer.handlePodCleanups(signal);
  assert.equal(metrics.orphanedRuntimePodsTotal.get(), 1);
  assert.deepEqual(
    (await workingPods(metrics)).sort(),
    all({ "sync/desired/": 1, "sync/desired/true": 1, "terminating/runtime_only/unknown": 1 }),
  );
  // Known to the workers from now on (as a pod without config): not counted again.
  await h.syncer.handlePodCleanups(signal);
  assert.equal(metrics.orphanedRuntimePodsTotal.get(), 1);
  const runtimeOnly = (await workingPods(metrics)).filter((l) => /runtime_only\S* 1$/.test(l));
  assert.equal(runtimeOnly.length, 1, runtimeOnly.join());
});

Deno.test("PodSyncer.handlePodCleanups restarts a static pod whose UID was reused and counts it", async () => {
  const metrics = new KubeletMetrics({ process: false });
  await using h = await harness({ metrics });
  const fromFile = pod("static-web");
  fromFile.metadata!.annotations = { [CONFIG_SOURCE_ANNOTATION]: "file" };
  h.loop.push({ op: "ADD", pods: [fromFile], source: "file" });
  await h.until("the pod running", () => !!main(h.status("static-web"))?.state?.running);
  const uid = fromFile.metadata!.uid!;
  // Deleted and created again with the same UID while it terminates (a static pod's edit).
  h.syncer.workers.updatePod({ updateType: "kill", pod: fromFile, startTime: h.clock.now() });
  h.syncer.workers.updatePod({ updateType: "create", pod: fromFile, startTime: h.clock.now() });
  await h.until(
    "the old pod terminated",
    () => h.syncer.workers.podWorkerState(uid) === "terminated",
  );
  // Housekeeping restarts it once its worker has finished terminating (syncTerminatedPod done),
  // which may take a step more than the terminated state.
  for (let i = 0; i < 100 && metrics.restartedPodsTotal.get({ static: "true" }) === 0; i++) {
    await h.syncer.handlePodCleanups(new AbortController().signal);
    if (metrics.restartedPodsTotal.get({ static: "true" }) === 0) await h.step(100);
  }
  assert.equal(metrics.restartedPodsTotal.get({ static: "true" }), 1);
  assert.equal(metrics.restartedPodsTotal.get({ static: "" }), 0);
  assert.equal(h.syncer.workers.podWorkerState(uid), "sync");
  assert.ok((await workingPods(metrics)).includes("sync/desired/true 1"));
  await h.syncer.handlePodCleanups(new AbortController().signal);
  assert.equal(metrics.restartedPodsTotal.get({ static: "true" }), 1, "restarted once");
});

Deno.test("PodSyncer observes kubelet_pod_worker_start_duration_seconds from the pod's first-seen time, on create only", async () => {
  const metrics = new KubeletMetrics({ process: false });
  await using h = await harness({ metrics });
  const seen = pod("seen");
  seen.metadata!.annotations = {
    [CONFIG_FIRST_SEEN_ANNOTATION]: new Date(h.clock.now() - 1_500).toISOString(),
  };
  h.add(pod("unseen"), seen);
  // The workers wait for the pod cache's first read of the pods: a relist, at the same time.
  await settle();
  await h.pleg.relist();
  await settle();
  assert.equal(metrics.podWorkerStartDuration.count(), 1, "only the pod with a first-seen time");
  assert.match(await metrics.render(), /^kubelet_pod_worker_start_duration_seconds_sum 1\.5$/m);
  await h.until("the pod running", () => !!main(h.status("seen"))?.state?.running);
  await h.step(70_000); // a resync
  assert.equal(metrics.podWorkerStartDuration.count(), 1, "later syncs are not starts");
});

Deno.test("PodSyncer counts a topology manager admission request for each pod added, none for a resize", async () => {
  const metrics = new KubeletMetrics({ process: false });
  await using h = await harness({ metrics });
  h.add(pod("a"), pod("b"));
  await h.until("both admitted", () => !!h.status("a") && !!h.status("b"));
  assert.equal(metrics.topologyAdmissionRequests.get(), 2);
  assert.equal(metrics.topologyAdmissionDuration.count(), 2);
  assert.equal(h.syncer.canAdmit(pod("c"), [], "resize"), undefined);
  assert.equal(metrics.topologyAdmissionRequests.get(), 2);
  assert.equal(h.syncer.canAdmit(pod("d"), []), undefined);
  assert.equal(metrics.topologyAdmissionRequests.get(), 3);
  assert.equal(metrics.topologyAdmissionErrors.get(), 0);
});

Deno.test("the pod lifecycle gives containers upstream's seccomp profile root, <root-dir>/seccomp", async () => {
  await using h = await harness();
  const p = pod("seccomp", "Always", {
    containers: [{
      name: "main",
      image: IMAGE,
      securityContext: { seccompProfile: { type: "Localhost", localhostProfile: "audit.json" } },
    }],
  });
  h.add(p);
  await h.until("Running", () => h.status("seccomp")?.phase === "Running");
  const created = [...h.fake.service.containers.values()].find((c) =>
    c.config.metadata?.name === "main"
  );
  const root = join(h.podsDirectory, "..");
  assert.equal(
    created?.config.linux?.securityContext?.seccomp?.localhostRef,
    join(root, "seccomp", "audit.json"),
  );
});
