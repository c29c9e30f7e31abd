import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Container, V1Pod, V1PodSpec } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import { FakeClock } from "../util/clock.ts";
import { CriConnection } from "../cri/connection.ts";
import type { ObjectRef } from "../client/record.ts";
import { DnsConfigurer } from "../network/dns.ts";
import { type FakeRemoteRuntime, startFakeRuntime } from "../testing/fake_remote_runtime.ts";
import type { ContainerBehaviour } from "../testing/fake_runtime_service.ts";
import { ImageManager } from "../images/image_manager.ts";
import { createLogger } from "../klog/klog.ts";
import {
  computePodActions,
  getStableKey,
  KubeRuntimeManager,
  type KubeRuntimeManagerOptions,
  type KubeRuntimeService,
  type PodActions,
  type ProbeResults,
} from "./kuberuntime_manager.ts";
import { newContainerAnnotations, newContainerLabels } from "./labels.ts";
import type { PodStatus } from "../container/pod_cache.ts";
import { RemoteImageService } from "../cri/remote_image.ts";
import { RemoteRuntimeService } from "../cri/remote_runtime.ts";
import type { PodSyncResult } from "../container/sync_result.ts";
import { DraManager } from "../cm/dra_manager.ts";
import { newExclusiveCpus } from "../cm/exclusive_cpus.ts";
import { DraMetrics } from "../metrics/dra_metrics.ts";
import { KubeletMetrics, MetricsRegistry } from "../metrics/metrics.ts";
import {
  RuntimeClassNotFoundError,
  type RuntimeHandlerLookup,
} from "../runtimeclass/runtimeclass_manager.ts";
import { handlerSupportsUserNamespaces, UsernsManager } from "../userns/userns_manager.ts";

const IMAGE = "busybox:1.36";
const UID = "uid-web";

// ---- computePodActions, on statuses built by hand ----

function pod(spec: Partial<V1PodSpec> = {}, uid = UID): V1Pod {
  return {
    metadata: { name: "web", namespace: "default", uid },
    spec: {
      containers: [{ name: "main", image: IMAGE }],
      restartPolicy: "Always",
      dnsPolicy: "ClusterFirst",
      terminationGracePeriodSeconds: 30,
      ...spec,
    },
  };
}

type State = "created" | "running" | "exited" | "unknown";
const CRI_STATE: Record<State, api.ContainerState> = {
  created: api.ContainerState.CONTAINER_CREATED,
  running: api.ContainerState.CONTAINER_RUNNING,
  exited: api.ContainerState.CONTAINER_EXITED,
  unknown: api.ContainerState.CONTAINER_UNKNOWN,
};

/** A container status as the runtime reports it, for `c` of pod `p`. */
function cs(
  p: V1Pod,
  c: V1Container,
  state: State,
  exitCode = 0,
  opts: { id?: string; reason?: string } = {},
): api.ContainerStatus {
  return api.ContainerStatus.create({
    id: opts.id ?? `id-${c.name}`,
    state: CRI_STATE[state],
    exitCode,
    reason: opts.reason ?? "",
    labels: newContainerLabels(c, p),
    annotations: newContainerAnnotations(c, p, 0),
  });
}

function sandbox(state: "ready" | "notready" = "ready", attempt = 0): api.PodSandboxStatus {
  return api.PodSandboxStatus.create({
    id: `sandbox-${attempt}`,
    state: state === "ready"
      ? api.PodSandboxState.SANDBOX_READY
      : api.PodSandboxState.SANDBOX_NOTREADY,
    metadata: { name: "web", namespace: "default", uid: UID, attempt },
    network: { ip: "10.244.0.2" },
    linux: { namespaces: { options: { network: api.NamespaceMode.POD } } },
  });
}

function status(
  sandboxes: api.PodSandboxStatus[],
  containers: api.ContainerStatus[] = [],
): PodStatus {
  return {
    id: UID,
    name: "web",
    namespace: "default",
    ips: [],
    sandboxStatuses: sandboxes,
    containerStatuses: containers,
    timestamp: 0,
  };
}

/** The parts of PodActions a table row checks. */
function summary(a: PodActions) {
  return {
    killPod: a.killPod,
    createSandbox: a.createSandbox,
    attempt: a.attempt,
    init: a.initContainersToStart,
    start: a.containersToStart,
    kill: [...a.containersToKill.values()].map((k) => k.message),
  };
}

const NOTHING = { killPod: false, createSandbox: false, attempt: 0, init: [], start: [], kill: [] };

Deno.test("computePodActions starts a fresh pod in a new sandbox", () => {
  const p = pod({ containers: [{ name: "a", image: IMAGE }, { name: "b", image: IMAGE }] });
  const a = computePodActions(p, status([]));
  assert.deepEqual(summary(a), { ...NOTHING, killPod: true, createSandbox: true, start: [0, 1] });
  assert.equal(a.sandboxID, "");
});

Deno.test("computePodActions leaves a running pod alone", () => {
  const p = pod();
  const main = p.spec!.containers[0]!;
  const a = computePodActions(p, status([sandbox()], [cs(p, main, "running")]));
  assert.deepEqual(summary(a), NOTHING);
  assert.equal(a.sandboxID, "sandbox-0");
});

Deno.test("computePodActions resizes running containers in place, or restarts them when their resizePolicy says so", () => {
  const res = (cpu: string, memory: string) => ({
    requests: { cpu, memory },
    limits: { cpu, memory },
  });
  const restartOnMemory = [{ resourceName: "memory", restartPolicy: "RestartContainer" }];
  const before = pod({
    restartPolicy: "Never",
    containers: [
      { name: "a", image: IMAGE, resources: res("100m", "100Mi") },
      { name: "b", image: IMAGE, resources: res("100m", "100Mi"), resizePolicy: restartOnMemory },
    ],
  });
  const actuated = (_uid: string, name: string) =>
    before.spec!.containers.find((c) => c.name === name)?.resources;
  const after = pod({
    restartPolicy: "Never",
    containers: [
      { name: "a", image: IMAGE, resources: res("200m", "200Mi"), resizePolicy: restartOnMemory },
      { name: "b", image: IMAGE, resources: res("200m", "200Mi"), resizePolicy: restartOnMemory },
    ],
  });
  const running = status(
    [sandbox()],
    before.spec!.containers.map((c) => cs(before, c, "running")),
  );
  // Nothing changed: nothing to do.
  const same = computePodActions(before, running, { actuated });
  assert.deepEqual(summary(same), NOTHING);
  assert.equal(same.resize.containersToUpdate.cpu.length, 0);
  // a's memory policy is RestartContainer now too: both restart, even under restartPolicy Never.
  const both = computePodActions(after, running, { actuated });
  assert.deepEqual(summary(both), {
    ...NOTHING,
    start: [0, 1],
    kill: ["Container a resize requires restart", "Container b resize requires restart"],
  });
  assert.equal(both.resize.updatePodResources, true);
  // cpu alone changes in place; without the actuated record nothing is resized.
  const cpuOnly = pod({
    restartPolicy: "Never",
    containers: before.spec!.containers.map((c) => ({
      ...c,
      resources: { ...c.resources, requests: { ...c.resources!.requests, cpu: "50m" } },
    })),
  });
  const inPlace = computePodActions(cpuOnly, running, { actuated });
  assert.deepEqual(summary(inPlace), NOTHING);
  // Decreases are prepended (upstream), so the later container comes first.
  assert.deepEqual(inPlace.resize.containersToUpdate.cpu.map((c) => c.container.name), ["b", "a"]);
  assert.equal(computePodActions(cpuOnly, running).resize.containersToUpdate.cpu.length, 0);
});

Deno.test("computePodActions applies the restart policy to exited containers", () => {
  const rows: Array<[string, number, ReturnType<typeof summary>]> = [
    ["Always", 0, { ...NOTHING, start: [0] }],
    ["Always", 1, { ...NOTHING, start: [0] }],
    ["OnFailure", 0, { ...NOTHING, killPod: true }],
    ["OnFailure", 1, { ...NOTHING, start: [0] }],
    ["Never", 0, { ...NOTHING, killPod: true }],
    ["Never", 1, { ...NOTHING, killPod: true }],
  ];
  for (const [restartPolicy, exitCode, want] of rows) {
    const p = pod({ restartPolicy });
    const main = p.spec!.containers[0]!;
    const got = computePodActions(p, status([sandbox()], [cs(p, main, "exited", exitCode)]));
    assert.deepEqual(summary(got), want, `${restartPolicy} exit ${exitCode}`);
  }
});

Deno.test("computePodActions restarts a container whose definition changed", () => {
  const p = pod({ restartPolicy: "Never" });
  const old = pod({ containers: [{ name: "main", image: "busybox:1.35" }] });
  const running = cs(old, old.spec!.containers[0]!, "running", 0, { id: "c-old" });
  const a = computePodActions(p, status([sandbox()], [running]));
  assert.deepEqual(summary(a), {
    ...NOTHING,
    start: [0],
    kill: ["Container main definition changed, will be restarted"],
  });
  assert.equal(a.containersToKill.get("c-old")?.name, "main");
});

Deno.test("computePodActions kills containers that fail their liveness probe", () => {
  const p = pod();
  const main = p.spec!.containers[0]!;
  const probeResults: ProbeResults = {
    liveness: (id) => id === "id-main" ? "Failure" : undefined,
    startup: () => undefined,
  };
  const a = computePodActions(p, status([sandbox()], [cs(p, main, "running")]), { probeResults });
  assert.deepEqual(summary(a), {
    ...NOTHING,
    start: [0],
    kill: ["Container main failed liveness probe, will be restarted"],
  });
  assert.equal(a.containersToKill.get("id-main")?.reason, "LivenessProbe");
});

Deno.test("computePodActions kills a container in an unknown state before restarting it", () => {
  const p = pod();
  const main = p.spec!.containers[0]!;
  const a = computePodActions(p, status([sandbox()], [cs(p, main, "unknown")]));
  assert.deepEqual(summary(a), {
    ...NOTHING,
    start: [0],
    kill: [`Container is in "unknown" state, try killing it before restart`],
  });
});

Deno.test("computePodActions replaces a dead sandbox unless the pod is done", () => {
  const p = pod();
  const main = p.spec!.containers[0]!;
  const dead = [sandbox("notready", 0)];
  const a = computePodActions(p, status(dead, [cs(p, main, "exited", 137)]));
  assert.deepEqual(summary(a), {
    ...NOTHING,
    killPod: true,
    createSandbox: true,
    attempt: 1,
    start: [0],
  });
  assert.equal(a.sandboxID, "sandbox-0");

  const never = pod({ restartPolicy: "Never" });
  const done = computePodActions(never, status(dead, [cs(never, main, "exited", 0)]));
  assert.deepEqual(summary(done), { ...NOTHING, killPod: true, attempt: 1 });

  const onFailure = pod({ restartPolicy: "OnFailure" });
  const ok = computePodActions(onFailure, status(dead, [cs(onFailure, main, "exited", 0)]));
  assert.deepEqual(summary(ok), { ...NOTHING, killPod: true, attempt: 1 });

  const two = computePodActions(p, status([sandbox("ready", 1), sandbox("ready", 0)]));
  assert.equal(two.createSandbox, true, "two ready sandboxes are reconciled");
  assert.equal(two.attempt, 2);
});

Deno.test("computePodActions runs init containers one at a time, in order", () => {
  const init = [{ name: "i0", image: IMAGE }, { name: "i1", image: IMAGE }];
  const p = pod({ initContainers: init });
  const [i0, i1] = init;
  const main = p.spec!.containers[0]!;
  const fresh = computePodActions(p, status([]));
  assert.deepEqual(summary(fresh), { ...NOTHING, killPod: true, createSandbox: true, init: [0] });

  const rows: Array<[api.ContainerStatus[], ReturnType<typeof summary>]> = [
    [[], { ...NOTHING, init: [0] }],
    [[cs(p, i0!, "running")], NOTHING],
    [[cs(p, i0!, "exited", 0)], { ...NOTHING, init: [1] }],
    [[cs(p, i1!, "exited", 0), cs(p, i0!, "exited", 0)], { ...NOTHING, start: [0] }],
    [[cs(p, main, "running"), cs(p, i1!, "exited", 0)], NOTHING],
  ];
  for (const [containers, want] of rows) {
    assert.deepEqual(summary(computePodActions(p, status([sandbox()], containers))), want);
  }
});

Deno.test("computePodActions retries a failed init container unless restartPolicy is Never", () => {
  for (
    const [restartPolicy, want] of [
      ["Always", { ...NOTHING, init: [0] }],
      ["OnFailure", { ...NOTHING, init: [0] }],
      ["Never", { ...NOTHING, killPod: true }],
    ] as const
  ) {
    const init = { name: "setup", image: IMAGE };
    const p = pod({ restartPolicy, initContainers: [init] });
    const got = computePodActions(p, status([sandbox()], [cs(p, init, "exited", 1)]));
    assert.deepEqual(summary(got), want, restartPolicy);
  }
  const init = { name: "setup", image: IMAGE };
  const p = pod({ initContainers: [init] });
  const oom = cs(p, init, "exited", 0, { reason: "OOMKilled" });
  assert.deepEqual(summary(computePodActions(p, status([sandbox()], [oom]))).init, [0]);
});

Deno.test("computePodActions starts sidecars in order, keeps and restarts them", () => {
  const proxy = { name: "proxy", image: IMAGE, restartPolicy: "Always" };
  const setup = { name: "setup", image: IMAGE };
  const p = pod({ initContainers: [proxy, setup] });
  const main = p.spec!.containers[0]!;
  const rows: Array<[string, api.ContainerStatus[], ReturnType<typeof summary>]> = [
    ["nothing yet", [], { ...NOTHING, init: [0] }],
    ["sidecar created only", [cs(p, proxy, "created")], { ...NOTHING, init: [0] }],
    ["sidecar started: next init", [cs(p, proxy, "running")], { ...NOTHING, init: [1] }],
    ["init running", [cs(p, setup, "running"), cs(p, proxy, "running")], NOTHING],
    ["initialized: main starts", [cs(p, setup, "exited", 0), cs(p, proxy, "running")], {
      ...NOTHING,
      start: [0],
    }],
    [
      "all running",
      [cs(p, main, "running"), cs(p, setup, "exited"), cs(p, proxy, "running")],
      NOTHING,
    ],
    ["sidecar exited: restarted", [
      cs(p, main, "running"),
      cs(p, setup, "exited"),
      cs(p, proxy, "exited", 1),
    ], { ...NOTHING, init: [0] }],
    ["sidecar gone: restarted", [cs(p, main, "running")], { ...NOTHING, init: [0] }],
    ["main exited: restarted", [
      cs(p, main, "exited", 0),
      cs(p, setup, "exited", 0),
      cs(p, proxy, "running"),
    ], { ...NOTHING, start: [0] }],
    // Exited regular containers do not prove initialization (a node reboot leaves all exited).
    ["init gone, main exited: init again", [cs(p, main, "exited", 0), cs(p, proxy, "running")], {
      ...NOTHING,
      init: [1],
    }],
  ];
  for (const [what, containers, want] of rows) {
    assert.deepEqual(summary(computePodActions(p, status([sandbox()], containers))), want, what);
  }
  const never = pod({ restartPolicy: "Never", initContainers: [proxy] });
  const done = computePodActions(
    never,
    status([sandbox()], [cs(never, main, "exited", 0), cs(never, proxy, "running")]),
  );
  // The only init container is a running sidecar, so the pod counts as initialized.
  assert.deepEqual(
    summary(done),
    { ...NOTHING, killPod: true },
    "sidecars do not keep a pod alive",
  );
});

// ---- SyncPod and KillPod against the fake runtime ----

interface Recorded {
  readonly ref: ObjectRef;
  readonly type: string;
  readonly reason: string;
  readonly message: string;
}

interface Harness extends AsyncDisposable {
  readonly dir: string;
  readonly fake: FakeRemoteRuntime;
  readonly runtime: RemoteRuntimeService;
  readonly clock: FakeClock;
  readonly events: Recorded[];
  /** StopContainer calls: [container name, timeout seconds]. */
  readonly stops: Array<[string, number]>;
  readonly manager: KubeRuntimeManager;
  /** The pod's status as the PLEG would read it. */
  status(uid?: string): Promise<PodStatus>;
  /** One SyncPod on a fresh status. */
  sync(p: V1Pod): Promise<PodSyncResult>;
  /** Containers the fake created, oldest first: [name, attempt, state]. */
  created(): Array<[string, number, api.ContainerState]>;
}

async function harness(
  behaviour: (name: string) => ContainerBehaviour | undefined = () => undefined,
  opts:
    | Partial<KubeRuntimeManagerOptions>
    | ((spy: KubeRuntimeService) => Partial<KubeRuntimeManagerOptions>) = {},
): Promise<Harness> {
  const dir = await Deno.makeTempDir({ prefix: "kuberuntime-manager-" });
  const clock = new FakeClock();
  const fake = await startFakeRuntime({
    preloadImages: [IMAGE],
    socket: join(dir, "cri.sock"),
    clock,
    onCreate: (config) => behaviour(config.metadata?.name ?? ""),
  });
  const connection = new CriConnection({ endpoint: fake.endpoint });
  const runtime = new RemoteRuntimeService({ connection, timeoutMs: 10_000 });
  const images = new RemoteImageService({ connection, timeoutMs: 10_000 });
  const events: Recorded[] = [];
  const recorder = {
    event: (ref: ObjectRef, type: string, reason: string, message: string) =>
      events.push({ ref, type, reason, message }),
  };
  const logger = createLogger({ write: () => {} });
  const stops: Array<[string, number]> = [];
  const spy: KubeRuntimeService = {
    runPodSandbox: (...a) => runtime.runPodSandbox(...a),
    podSandboxStatus: (...a) => runtime.podSandboxStatus(...a),
    stopPodSandbox: (...a) => runtime.stopPodSandbox(...a),
    removePodSandbox: (...a) => runtime.removePodSandbox(...a),
    createContainer: (...a) => runtime.createContainer(...a),
    startContainer: (...a) => runtime.startContainer(...a),
    removeContainer: (...a) => runtime.removeContainer(...a),
    containerStatus: (...a) => runtime.containerStatus(...a),
    updateContainerResources: (...a) => runtime.updateContainerResources(...a),
    updatePodSandboxResources: (...a) => runtime.updatePodSandboxResources(...a),
    containerStats: (...a) => runtime.containerStats(...a),
    updateRuntimeConfig: (...a) => runtime.updateRuntimeConfig(...a),
    stopContainer: (id, timeout, signal) => {
      stops.push([fake.service.containers.get(id)?.config.metadata?.name ?? id, timeout]);
      return runtime.stopContainer(id, timeout, signal);
    },
  };
  const manager = new KubeRuntimeManager({
    runtime: spy,
    imageService: images,
    imageManager: new ImageManager({ imageService: images, recorder, clock }),
    recorder,
    clock,
    logger,
    sandbox: {
      dns: new DnsConfigurer({
        clusterDNS: ["10.96.0.10"],
        clusterDomain: "cluster.local",
        resolvConf: "",
        logger,
      }),
      podLogsDirectory: join(dir, "logs"),
      nodeHostname: "node-1",
      clusterDomain: "cluster.local",
      logger,
    },
    podsDirectory: join(dir, "pods"),
    memoryCapacityBytes: 8 * 2 ** 30,
    legacyContainerLogsDirectory: join(dir, "containers"),
    ...(typeof opts === "function" ? opts(spy) : opts),
  });
  const h: Harness = {
    dir,
    fake,
    runtime,
    clock,
    events,
    stops,
    manager,
    async status(uid = UID) {
      const selector = { "io.kubernetes.pod.uid": uid };
      const byNewest = (a: { createdAt: bigint }, b: { createdAt: bigint }) =>
        a.createdAt > b.createdAt ? -1 : a.createdAt < b.createdAt ? 1 : 0;
      const sandboxes = await runtime.listPodSandbox(
        api.PodSandboxFilter.create({ labelSelector: selector }),
      );
      const sandboxStatuses = (await Promise.all(
        sandboxes.map(async (s) => (await runtime.podSandboxStatus(s.id)).status!),
      )).sort(byNewest);
      const containers = await runtime.listContainers(
        api.ContainerFilter.create({ labelSelector: selector }),
      );
      const containerStatuses = (await Promise.all(
        containers.map(async (c) => (await runtime.containerStatus(c.id)).status!),
      )).sort(byNewest);
      const latest = sandboxStatuses[0];
      const ready = latest?.state === api.PodSandboxState.SANDBOX_READY;
      return {
        id: uid,
        name: "web",
        namespace: "default",
        ips: ready && latest.network?.ip ? [latest.network.ip] : [],
        sandboxStatuses,
        containerStatuses,
        timestamp: clock.now(),
      };
    },
    async sync(p) {
      return await manager.syncPod(AbortSignal.timeout(10_000), p, await h.status(), []);
    },
    created() {
      return [...fake.service.containers.values()]
        .sort((a, b) => Number(a.createdAt - b.createdAt))
        .map((c) => [c.config.metadata?.name ?? "", c.config.metadata?.attempt ?? -1, c.state]);
    },
    async [Symbol.asyncDispose]() {
      connection.close();
      await fake.stop();
      await Deno.remove(dir, { recursive: true });
    },
  };
  return h;
}

function steps(r: PodSyncResult): string[] {
  return r.results.map((s) =>
    `${s.action} ${s.target}${s.error ? ` ${s.error}: ${s.message}` : ""}`
  );
}

const RUNNING = api.ContainerState.CONTAINER_RUNNING;
const EXITED = api.ContainerState.CONTAINER_EXITED;

Deno.test("KubeRuntimeManager.updatePodCIDR gives the runtime the pod CIDR with UpdateRuntimeConfig", async () => {
  await using h = await harness();
  await h.manager.updatePodCIDR("10.244.1.0/24,fd00:1::/64");
  assert.equal(h.fake.callCount("UpdateRuntimeConfig"), 1);
  assert.equal(h.fake.service.podCidr, "10.244.1.0/24,fd00:1::/64");
});

Deno.test("KubeRuntimeManager.syncPod creates the sandbox and the containers as upstream", async () => {
  await using h = await harness();
  const app: V1Container = {
    name: "app",
    image: IMAGE,
    command: ["/bin/app"],
    args: ["--listen=$(PORT)", "--name=$(POD)"],
    env: [{ name: "PORT", value: "8080" }, { name: "ADDR", value: ":$(PORT)" }],
  };
  const p = pod({ containers: [app, { name: "side", image: IMAGE }] });
  const result = await h.sync(p);
  assert.equal(result.error(), undefined);
  assert.deepEqual(steps(result), [
    "KillPodSandbox uid-web",
    "CreatePodSandbox web_default(uid-web)",
    `ConfigPodSandbox ${[...h.fake.service.sandboxes.keys()][0]}`,
    "StartContainer app",
    "StartContainer side",
  ]);
  const [sb] = [...h.fake.service.sandboxes.values()];
  assert.equal(sb?.config.logDirectory, join(h.dir, "logs", `default_web_${UID}`));
  assert.deepEqual(sb?.config.labels, {
    "io.kubernetes.pod.name": "web",
    "io.kubernetes.pod.namespace": "default",
    "io.kubernetes.pod.uid": UID,
  });
  assert.deepEqual(sb?.config.dnsConfig?.servers, ["10.96.0.10"]);

  const containers = [...h.fake.service.containers.values()];
  assert.deepEqual(containers.map((c) => c.state), [RUNNING, RUNNING]);
  const c = containers.find((c) => c.config.metadata?.name === "app")!;
  assert.deepEqual(c.config.command, ["/bin/app"]);
  assert.deepEqual(c.config.args, ["--listen=8080", "--name=$(POD)"]);
  assert.deepEqual(
    c.config.envs.map((e) => [e.key, new TextDecoder().decode(e.value)]),
    [["PORT", "8080"], ["ADDR", ":8080"]],
  );
  assert.deepEqual(c.config.labels, newContainerLabels(app, p));
  assert.equal(c.config.annotations["io.kubernetes.container.restartCount"], "0");
  assert.equal(c.config.annotations["io.kubernetes.pod.terminationGracePeriod"], "30");
  assert.equal(c.logPath, join(h.dir, "logs", `default_web_${UID}`, "app", "0.log"));

  const again = await h.sync(p);
  assert.deepEqual(steps(again), [`ConfigPodSandbox ${sb?.id}`], "a running pod is left alone");
});

Deno.test("KubeRuntimeManager.syncPod backs off crash loops 10s, 20s, 40s... up to 5m", async () => {
  await using h = await harness((name) =>
    name === "crash" ? { exitAfterStart: true, exitCode: 1 } : undefined
  );
  const p = pod({ containers: [{ name: "crash", image: IMAGE }] });
  const message = (d: string) =>
    `back-off ${d} restarting failed container=crash pod=web_default(${UID})`;
  const started = (r: PodSyncResult) =>
    r.results.some((s) => s.action === "StartContainer" && !s.error);

  assert.ok(started(await h.sync(p)), "first start");
  assert.ok(started(await h.sync(p)), "the first restart is immediate");
  const delays: Array<[number, string]> = [
    [10_000, "10s"],
    [20_000, "20s"],
    [40_000, "40s"],
    [80_000, "1m20s"],
    [160_000, "2m40s"],
    [300_000, "5m0s"],
    [300_000, "5m0s"],
  ];
  for (const [ms, text] of delays) {
    const waiting = await h.sync(p);
    const step = waiting.results.find((s) => s.action === "StartContainer");
    assert.equal(step?.error, "CrashLoopBackOff", text);
    assert.equal(step?.message, message(text));
    h.clock.step(ms - 1);
    assert.equal((await h.sync(p)).results.at(-1)?.message, message(text), `still ${text}`);
    h.clock.step(1);
    assert.ok(started(await h.sync(p)), `restarted after ${text}`);
  }
  const backOff = h.events.filter((e) => e.reason === "BackOff");
  assert.equal(backOff.length, 14);
  assert.deepEqual(backOff[0], {
    ref: {
      kind: "Pod",
      apiVersion: "v1",
      name: "web",
      namespace: "default",
      uid: UID,
      resourceVersion: undefined,
      fieldPath: "spec.containers{crash}",
    },
    type: "Warning",
    reason: "BackOff",
    message: `Back-off restarting failed container crash in pod web_default(${UID})`,
  });
  assert.equal(h.created().at(-1)?.[1], 8, "attempt = restart count");
});

Deno.test("KubeRuntimeManager.syncPod forgets the back-off after 2x max of stable running", async () => {
  let crash = true;
  await using h = await harness((name) =>
    name === "app" && crash ? { exitAfterStart: true, exitCode: 1 } : undefined
  );
  const p = pod({ containers: [{ name: "app", image: IMAGE }] });
  await h.sync(p);
  await h.sync(p); // immediate restart: back-off now 10s
  h.clock.step(10_000);
  crash = false;
  await h.sync(p); // restarted, back-off now 20s; this one keeps running
  assert.equal(h.created().at(-1)?.[2], RUNNING);
  h.clock.step(600_001);
  const running = [...h.fake.service.containers.values()].find((c) => c.state === RUNNING)!;
  h.fake.service.exitContainer(running.id, 1);
  const r = await h.sync(p);
  assert.equal(r.error(), undefined, "no back-off after 10m of running");
  assert.equal(h.created().at(-1)?.[2], RUNNING);
  assert.equal(getStableKey(p, p.spec!.containers[0]!).startsWith(`web_default_${UID}_app_`), true);
});

Deno.test("KubeRuntimeManager.syncPod runs init containers in order before the containers", async () => {
  await using h = await harness((name) =>
    name.startsWith("init") ? { exitAfterStart: true, exitCode: 0 } : undefined
  );
  const p = pod({
    initContainers: [{ name: "init-a", image: IMAGE }, { name: "init-b", image: IMAGE }],
  });
  await h.sync(p);
  assert.deepEqual(h.created().map(([n]) => n), ["init-a"]);
  await h.sync(p);
  assert.deepEqual(h.created().map(([n]) => n), ["init-a", "init-b"]);
  await h.sync(p);
  assert.deepEqual(h.created(), [["init-a", 0, EXITED], ["init-b", 0, EXITED], [
    "main",
    0,
    RUNNING,
  ]]);
});

Deno.test("KubeRuntimeManager.syncPod kills a pod whose init container failed under Never", async () => {
  await using h = await harness((name) =>
    name === "setup" ? { exitAfterStart: true, exitCode: 3 } : undefined
  );
  const p = pod({ restartPolicy: "Never", initContainers: [{ name: "setup", image: IMAGE }] });
  await h.sync(p);
  const r = await h.sync(p);
  assert.deepEqual(steps(r).slice(0, 1), ["KillPodSandbox uid-web"]);
  const [sb] = [...h.fake.service.sandboxes.values()];
  assert.equal(sb?.state, api.PodSandboxState.SANDBOX_NOTREADY);
  assert.deepEqual(h.created().map(([n]) => n), ["setup"], "main never starts");
});

Deno.test("KubeRuntimeManager.syncPod starts sidecars first and restarts them", async () => {
  let proxyCrashes = false;
  await using h = await harness((name) =>
    name === "setup"
      ? { exitAfterStart: true, exitCode: 0 }
      : name === "proxy" && proxyCrashes
      ? { exitAfterStart: true, exitCode: 1 }
      : undefined
  );
  const p = pod({
    initContainers: [
      { name: "proxy", image: IMAGE, restartPolicy: "Always" },
      { name: "setup", image: IMAGE },
    ],
  });
  await h.sync(p);
  assert.deepEqual(h.created().map(([n]) => n), ["proxy"]);
  await h.sync(p);
  assert.deepEqual(h.created().map(([n]) => n), ["proxy", "setup"]);
  await h.sync(p);
  assert.deepEqual(h.created(), [["proxy", 0, RUNNING], ["setup", 0, EXITED], [
    "main",
    0,
    RUNNING,
  ]]);

  const proxy = [...h.fake.service.containers.values()].find((c) =>
    c.config.metadata?.name === "proxy"
  )!;
  h.fake.service.exitContainer(proxy.id, 1);
  proxyCrashes = true;
  const r = await h.sync(p);
  assert.deepEqual(steps(r).slice(1), ["StartContainer proxy"]);
  assert.deepEqual(h.created().at(-1), ["proxy", 1, EXITED]);
  const waiting = await h.sync(p);
  assert.equal(waiting.results.at(-1)?.error, "CrashLoopBackOff", "sidecars back off too");
  assert.equal(h.created().filter(([n]) => n === "main").length, 1, "main keeps running");
});

Deno.test("KubeRuntimeManager.syncPod replaces a dead sandbox with attempt+1", async () => {
  await using h = await harness();
  const p = pod();
  await h.sync(p);
  const [old] = [...h.fake.service.sandboxes.values()];
  await h.runtime.stopPodSandbox(old!.id);
  const r = await h.sync(p);
  assert.equal(r.error(), undefined);
  assert.ok(h.events.some((e) => e.reason === "SandboxChanged"));
  const attempts = [...h.fake.service.sandboxes.values()].map((s) => s.config.metadata?.attempt);
  assert.deepEqual(attempts, [0, 1]);
  assert.deepEqual(h.created().map(([n, a, s]) => [n, a, s]), [["main", 0, EXITED], [
    "main",
    1,
    RUNNING,
  ]]);
});

Deno.test("KubeRuntimeManager.syncPod reports failures in the result, never throws", async () => {
  await using h = await harness();
  const vol = pod({
    containers: [{ name: "main", image: IMAGE, volumeMounts: [{ name: "v", mountPath: "/v" }] }],
    volumes: [{ name: "v", emptyDir: {} }],
  });
  const r2 = await h.sync(vol);
  assert.match(
    r2.error()?.message ?? "",
    /CreateContainerConfigError: "volumes are not supported yet"/,
  );
});

/** A RuntimeClass cache holding `classes` (name → handler), changed by the test. */
function runtimeClasses(classes: Map<string, string>): RuntimeHandlerLookup {
  return {
    lookupRuntimeHandler(name) {
      if (!name) return "";
      const handler = classes.get(name);
      if (handler === undefined) throw new RuntimeClassNotFoundError(name);
      return handler;
    },
  };
}

Deno.test("KubeRuntimeManager.syncPod runs the sandbox with the RuntimeClass's handler", async () => {
  // The fake runtime's one handler besides the default.
  const classes = new Map([["second", "runc"]]);
  await using h = await harness(undefined, { runtimeClasses: runtimeClasses(classes) });
  const r = await h.sync(pod({ runtimeClassName: "second" }));
  assert.equal(r.error(), undefined);
  const [sb] = [...h.fake.service.sandboxes.values()];
  assert.equal(sb?.runtimeHandler, "runc");
  assert.deepEqual(h.created().map(([n, , s]) => [n, s]), [["main", RUNNING]]);

  // A pod naming no class gets the default handler.
  const plain = await h.manager.syncPod(
    AbortSignal.timeout(10_000),
    pod({}, "uid-plain"),
    await h.status("uid-plain"),
    [],
  );
  assert.equal(plain.error(), undefined);
  const handlers = [...h.fake.service.sandboxes.values()].map((s) => s.runtimeHandler);
  assert.deepEqual(handlers, ["runc", ""]);
});

Deno.test("KubeRuntimeManager.syncPod fails a pod whose RuntimeClass is missing as upstream, and runs it once the class exists", async () => {
  const classes = new Map<string, string>();
  await using h = await harness(undefined, { runtimeClasses: runtimeClasses(classes) });
  const p = pod({ runtimeClassName: "second" });
  const r = await h.sync(p);
  assert.deepEqual(steps(r), [
    "KillPodSandbox uid-web",
    `CreatePodSandbox web_default(uid-web) CreatePodSandboxError: Failed to create sandbox for pod "web_default(uid-web)": runtimeclass.node.k8s.io "second" not found`,
  ]);
  assert.deepEqual(h.events.map((e) => [e.type, e.reason, e.message]), [[
    "Warning",
    "FailedCreatePodSandBox",
    `Failed to create pod sandbox: runtimeclass.node.k8s.io "second" not found`,
  ]]);
  assert.equal(h.fake.calls.get("RunPodSandbox") ?? 0, 0, "the runtime is not asked");

  classes.set("second", "runc");
  const again = await h.sync(p);
  assert.equal(again.error(), undefined);
  assert.deepEqual([...h.fake.service.sandboxes.values()].map((s) => s.runtimeHandler), ["runc"]);
});

Deno.test("KubeRuntimeManager.syncPod passes a handler the runtime lacks, which fails RunPodSandbox with the runtime's error", async () => {
  const classes = new Map([["kata", "kata-fc"]]);
  await using h = await harness(undefined, { runtimeClasses: runtimeClasses(classes) });
  const r = await h.sync(pod({ runtimeClassName: "kata" }));
  assert.equal(h.fake.calls.get("RunPodSandbox") ?? 0, 1, "no check before the runtime's");
  const message =
    'rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for "kata-fc" is configured';
  assert.equal(
    steps(r).at(-1),
    `CreatePodSandbox web_default(uid-web) CreatePodSandboxError: Failed to create sandbox for pod "web_default(uid-web)": ${message}`,
  );
  assert.equal(h.events.at(-1)?.message, `Failed to create pod sandbox: ${message}`);
});

Deno.test("KubeRuntimeManager.syncPod without a RuntimeClass cache runs every sandbox with the default handler, as upstream standalone", async () => {
  await using h = await harness();
  const r = await h.sync(pod({ runtimeClassName: "second" }));
  assert.equal(r.error(), undefined);
  assert.deepEqual([...h.fake.service.sandboxes.values()].map((s) => s.runtimeHandler), [""]);
});

Deno.test("KubeRuntimeManager.killPod stops containers with the grace period, then the sandbox", async () => {
  await using h = await harness();
  const p = pod({
    terminationGracePeriodSeconds: 20,
    containers: [{ name: "a", image: IMAGE }, { name: "b", image: IMAGE }],
  });
  await h.sync(p);
  const signal = AbortSignal.timeout(10_000);
  const r = await h.manager.killPod(signal, p, await h.status());
  assert.equal(r.error(), undefined);
  assert.deepEqual(steps(r).sort(), [
    "KillContainer a",
    "KillContainer b",
    "KillPodSandbox uid-web",
  ]);
  assert.deepEqual(h.stops.sort(), [["a", 20], ["b", 20]]);
  assert.deepEqual(h.created().map(([, , s]) => s), [EXITED, EXITED]);
  assert.equal(
    [...h.fake.service.sandboxes.values()][0]?.state,
    api.PodSandboxState.SANDBOX_NOTREADY,
  );

  await h.sync(pod({ containers: [{ name: "c", image: IMAGE }] }, "uid-2"));
  h.stops.length = 0;
  await h.manager.killPod(signal, undefined, await h.status("uid-2"), 1);
  assert.deepEqual(h.stops, [["c", 2]], "an orphan with an override of 1 s gets the 2 s minimum");

  await h.manager.removePod(signal, await h.status());
  assert.equal((await h.status()).containerStatuses.length, 0);
  assert.equal((await h.status()).sandboxStatuses.length, 0);
});

Deno.test("KubeRuntimeManager.syncPod keeps only the newest exited instance of an init container", async () => {
  await using h = await harness((name) =>
    name === "setup" ? { exitAfterStart: true, exitCode: 1 } : undefined
  );
  const p = pod({ initContainers: [{ name: "setup", image: IMAGE }] });
  await h.sync(p);
  await h.sync(p); // the first restart is immediate
  assert.deepEqual(h.created().map(([n, a]) => [n, a]), [["setup", 0], ["setup", 1]]);
  const r = await h.sync(p);
  assert.equal(r.results.at(-1)?.error, "CrashLoopBackOff");
  assert.deepEqual(h.created().map(([n, a]) => [n, a]), [["setup", 1]], "attempt 0 pruned");
});

Deno.test("KubeRuntimeManager.syncPod resolves env from its options and the new sandbox's IP", async () => {
  await using h = await harness(undefined, {
    hostIPs: ["192.0.2.7"],
    nodeAllocatable: () => ({ cpu: "2", memory: "4Gi" }),
    envSource: {
      getConfigMap: (_ns, name) =>
        Promise.resolve(name === "cfg" ? { data: { MODE: "fast" } } : undefined),
      getSecret: () => Promise.resolve(undefined),
    },
  });
  const app: V1Container = {
    name: "app",
    image: IMAGE,
    envFrom: [{ configMapRef: { name: "cfg" } }],
    env: [
      { name: "IP", valueFrom: { fieldRef: { fieldPath: "status.podIP" } } },
      { name: "HOST", valueFrom: { fieldRef: { fieldPath: "status.hostIP" } } },
      { name: "CPU", valueFrom: { resourceFieldRef: { resource: "limits.cpu", divisor: "1m" } } },
    ],
  };
  const bad: V1Container = {
    name: "bad",
    image: IMAGE,
    env: [{ name: "S", valueFrom: { secretKeyRef: { name: "creds", key: "k" } } }],
  };
  const result = await h.sync(pod({ containers: [app, bad] }));
  assert.deepEqual(steps(result).slice(-2), [
    "StartContainer app",
    'StartContainer bad CreateContainerConfigError: secret "creds" not found',
  ]);
  const [sb] = [...h.fake.service.sandboxes.values()];
  const [c] = [...h.fake.service.containers.values()];
  const decoder = new TextDecoder();
  assert.deepEqual(c?.config.envs.map((e) => [e.key, decoder.decode(e.value)]), [
    ["MODE", "fast"],
    ["IP", sb?.ip ?? "?"],
    ["HOST", "192.0.2.7"],
    ["CPU", "2000"],
  ]);
  assert.notEqual(sb?.ip, undefined);
});

Deno.test("computePodActions kills an older container of one name that runs beside the newest", () => {
  const p = pod();
  const main = p.spec!.containers[0]!;
  // Newest first, as the PLEG sorts them: a StartContainer in flight when the kubelet died
  // started attempt 0 after the restarted kubelet had started attempt 1.
  const a = computePodActions(
    p,
    status([sandbox()], [
      cs(p, main, "running", 0, { id: "c-new0000000000" }),
      cs(p, main, "running", 0, { id: "c-old" }),
    ]),
  );
  assert.deepEqual(summary(a), {
    ...NOTHING,
    kill: [
      "Container main has a newer instance (c-new0000000); the older one is killed so that " +
      "two never run at once",
    ],
  });
  assert.ok(a.containersToKill.has("c-old"));
  // The newest exited and restarts: the old one still must not run beside the next.
  const b = computePodActions(
    p,
    status([sandbox()], [
      cs(p, main, "exited", 1, { id: "c-new" }),
      cs(p, main, "running", 0, { id: "c-old" }),
    ]),
  );
  assert.deepEqual(summary(b).start, [0]);
  assert.deepEqual([...b.containersToKill.keys()], ["c-old"]);
});

/** Sandbox starts of `pods` pods synced at once, each held until the test lets it go. */
async function sandboxStartsInFlight(maxParallelSandboxStarts: number | undefined, pods: number) {
  const held: Array<() => void> = [];
  let inFlight = 0;
  let most = 0;
  await using h = await harness(undefined, (spy) => ({
    ...(maxParallelSandboxStarts === undefined ? {} : { maxParallelSandboxStarts }),
    runtime: {
      ...spy,
      runPodSandbox: async (...a) => {
        inFlight++;
        most = Math.max(most, inFlight);
        await new Promise<void>((resolve) => held.push(resolve));
        inFlight--;
        return await spy.runPodSandbox(...a);
      },
    },
  }));
  const uids = Array.from({ length: pods }, (_, i) => `uid-${i}`);
  const synced = Promise.all(uids.map(async (uid) => {
    const p = pod({}, uid);
    return await h.manager.syncPod(AbortSignal.timeout(10_000), p, await h.status(uid), []);
  }));
  let released = 0;
  while (released < pods) {
    // Let every sync that can reach RunPodSandbox get there before the next one is let go.
    for (let i = 0; i < 50 && held.length === 0; i++) await new Promise((r) => setTimeout(r, 0));
    for (let i = 0; i < 50; i++) await new Promise((r) => setTimeout(r, 0));
    const next = held.shift();
    assert.ok(next, `${released} of ${pods} sandbox starts released, none waiting`);
    next();
    released++;
  }
  const results = await synced;
  for (const r of results) assert.equal(r.error(), undefined);
  return { most, sandboxes: h.fake.service.sandboxes.size };
}

Deno.test("KubeRuntimeManager keeps at most maxParallelSandboxStarts RunPodSandbox calls in flight", async () => {
  assert.deepEqual(await sandboxStartsInFlight(2, 5), { most: 2, sandboxes: 5 });
  assert.deepEqual(await sandboxStartsInFlight(1, 3), { most: 1, sandboxes: 3 });
});

Deno.test("KubeRuntimeManager starts every sandbox at once without a limit (0 or unset), as upstream", async () => {
  assert.deepEqual(await sandboxStartsInFlight(0, 5), { most: 5, sandboxes: 5 });
  assert.deepEqual(await sandboxStartsInFlight(undefined, 4), { most: 4, sandboxes: 4 });
});

Deno.test("KubeRuntimeManager.syncPod asks ImageStatus once per container whose image is present", async () => {
  await using h = await harness();
  const p = pod({ containers: [{ name: "a", image: IMAGE }, { name: "b", image: IMAGE }] });
  const before = h.fake.callCount("ImageStatus");
  const result = await h.sync(p);
  assert.equal(result.error(), undefined);
  // The ImageManager's read also gives the image's default user (upstream asks twice).
  assert.equal(h.fake.callCount("ImageStatus") - before, 2);
});

Deno.test("computePodActions starts an ephemeral container once, never again, and not with a new sandbox", () => {
  const p = pod({
    ephemeralContainers: [{ name: "debug", image: IMAGE, targetContainerName: "main" }],
  });
  const main = p.spec!.containers[0]!;
  const debug = p.spec!.ephemeralContainers![0]! as V1Container;
  const fresh = computePodActions(p, status([sandbox()], [cs(p, main, "running")]));
  assert.deepEqual(fresh.ephemeralContainersToStart, [0]);
  assert.deepEqual(summary(fresh), NOTHING, "nothing else changes");
  // Ephemeral containers are never restarted: any status of that name stops it.
  for (const state of ["running", "exited"] as const) {
    const a = computePodActions(
      p,
      status([sandbox()], [cs(p, main, "running"), cs(p, debug, state)]),
    );
    assert.deepEqual(a.ephemeralContainersToStart, [], state);
  }
  // A pod whose sandbox must be re-created starts its regular containers only.
  const dead = computePodActions(p, status([sandbox("notready")], [cs(p, main, "exited", 1)]));
  assert.deepEqual(dead.ephemeralContainersToStart, []);
});

Deno.test("KubeRuntimeManager.syncPod starts an ephemeral container in the target's PID namespace", async () => {
  await using h = await harness();
  const p = pod();
  await h.sync(p);
  const target = [...h.fake.service.containers.values()].find((c) =>
    c.config.metadata?.name === "main"
  )!;
  const debugging = pod({
    ephemeralContainers: [{
      name: "debugger",
      image: IMAGE,
      command: ["sh"],
      stdin: true,
      tty: true,
      targetContainerName: "main",
    }],
  });
  const result = await h.sync(debugging);
  assert.equal(result.error(), undefined, steps(result).join("\n"));
  assert.ok(steps(result).includes("StartContainer debugger"), steps(result).join("\n"));
  const debug = [...h.fake.service.containers.values()].find((c) =>
    c.config.metadata?.name === "debugger"
  );
  assert.equal(debug?.state, RUNNING);
  const ns = debug?.config.linux?.securityContext?.namespaceOptions;
  assert.equal(ns?.pid, api.NamespaceMode.TARGET);
  assert.equal(ns?.targetId, target.id);
  assert.equal(debug?.config.tty, true);
  // Started once: the next sync leaves it alone, and it is not restarted once it exits.
  assert.deepEqual(steps(await h.sync(debugging)).filter((s) => s.includes("debugger")), []);
});

Deno.test("KubeRuntimeManager.syncPod fails an ephemeral container whose target does not exist", async () => {
  const metrics = new KubeletMetrics({ process: false });
  await using h = await harness(undefined, { metrics });
  await h.sync(pod());
  const result = await h.sync(pod({
    ephemeralContainers: [{ name: "debugger", image: IMAGE, targetContainerName: "nope" }],
  }));
  assert.ok(
    steps(result).includes(
      "StartContainer debugger CreateContainerConfigError: unable to find target container nope",
    ),
    steps(result).join("\n"),
  );
  // Counted as upstream's startContainer counts it: a start, and its error.
  const labels = { container_type: "ephemeral_container" };
  assert.equal(metrics.startedContainersTotal.get(labels), 1);
  assert.equal(
    metrics.startedContainersErrorsTotal.get({ ...labels, code: "CreateContainerConfigError" }),
    1,
  );
});

Deno.test("KubeRuntimeManager.syncPod gives containers the sandbox's namespaces, user namespace included", async () => {
  // containerd 2.x refuses a container whose user namespace config differs from its sandbox's
  // ("user namespace config for sandbox is different from container").
  await using h = await harness();
  await h.sync(pod({ hostIPC: true, shareProcessNamespace: true }));
  const [sb] = [...h.fake.service.sandboxes.values()];
  const [c] = [...h.fake.service.containers.values()];
  const sandboxNs = sb?.config.linux?.securityContext?.namespaceOptions;
  const containerNs = c?.config.linux?.securityContext?.namespaceOptions;
  assert.deepEqual(containerNs?.usernsOptions, {
    mode: api.NamespaceMode.NODE,
    uids: [],
    gids: [],
  });
  assert.deepEqual(containerNs, sandboxNs);
});

Deno.test("KubeRuntimeManager.syncPod lifts the CFS quota of a pod on exclusive CPUs from its sandbox and pinned container", async () => {
  const cpu = { cpu: "2", memory: "64Mi" };
  const half = { cpu: "500m", memory: "64Mi" };
  const p = pod({
    containers: [
      { name: "pinned", image: IMAGE, resources: { requests: cpu, limits: cpu } },
      { name: "shared", image: IMAGE, resources: { requests: half, limits: half } },
    ],
  });
  const exclusiveCpus = newExclusiveCpus({
    exclusiveCpus: (_uid, name) => name === "pinned" ? [2, 3] : [],
  });
  await using h = await harness(undefined, { exclusiveCpus });
  assert.equal((await h.sync(p)).error(), undefined);
  const [sb] = [...h.fake.service.sandboxes.values()];
  assert.equal(sb?.config.linux?.resources?.cpuQuota, -1n);
  const quota = (name: string) =>
    [...h.fake.service.containers.values()].find((c) => c.config.metadata?.name === name)
      ?.config.linux?.resources?.cpuQuota;
  assert.equal(quota("pinned"), -1n);
  assert.equal(quota("shared"), 50_000n);
});

Deno.test("KubeRuntimeManager.syncPod prepares ResourceClaims before the sandbox and stops when it cannot", async () => {
  const metrics = new DraMetrics(new MetricsRegistry());
  const logger = createLogger({ write: () => {} });
  await using h = await harness(undefined, {
    dra: new DraManager({ clock: new FakeClock(), logger, metrics }),
  });
  const count = (isError: boolean) =>
    metrics.operationsDuration.count({
      operation_name: "PrepareResources",
      is_error: `${isError}`,
    });
  const claimed = pod({
    containers: [{ name: "app", image: IMAGE }],
    resourceClaims: [{ name: "gpu", resourceClaimName: "gpu-claim" }],
  });
  await h.sync(claimed);
  assert.equal(
    h.fake.service.sandboxes.size,
    0,
    "no sandbox for a pod whose claims are not prepared",
  );
  assert.deepEqual(h.events.map((e) => [e.type, e.reason]), [
    ["Warning", "FailedPrepareDynamicResources"],
  ]);
  assert.match(
    h.events[0]!.message,
    /^Failed to prepare dynamic resources: prepare dynamic resources: ResourceClaim gpu-claim: /,
  );
  assert.equal(count(true), 1);
  // A pod without claims is timed too, and starts.
  await h.sync(pod({ containers: [{ name: "app", image: IMAGE }] }, "uid-2"));
  assert.equal(count(false), 1);
  assert.equal(h.fake.service.sandboxes.size, 1);
});

Deno.test("KubeRuntimeManager.syncPod counts each container start attempt by type, and its failure by reason", async () => {
  const metrics = new KubeletMetrics({ process: false });
  await using h = await harness(
    (name) => name === "init" ? { exitAfterStart: true, exitCode: 0 } : undefined,
    { metrics },
  );
  const started = () =>
    ["container", "init_container", "ephemeral_container"].map((t) =>
      metrics.startedContainersTotal.get({ container_type: t })
    );
  const spec = {
    initContainers: [{ name: "init", image: IMAGE }],
    containers: [{ name: "main", image: IMAGE }],
  };
  await h.sync(pod(spec));
  assert.deepEqual(started(), [0, 1, 0]);
  await h.sync(pod(spec));
  assert.deepEqual(started(), [1, 1, 0]);
  await h.sync(pod({
    ...spec,
    ephemeralContainers: [{ name: "debugger", image: IMAGE, targetContainerName: "main" }],
  }));
  assert.deepEqual(started(), [1, 1, 1]);
  // An image that may not be pulled: the attempt counts, and its failure under its reason.
  const r = await h.sync(pod({
    containers: [{ name: "app", image: "registry.example/absent:1", imagePullPolicy: "Never" }],
  }, "uid-2"));
  assert.match(steps(r).join("\n"), /StartContainer app ErrImageNeverPull/);
  assert.deepEqual(started(), [2, 1, 1]);
  const errors = (await metrics.render()).split("\n").filter((l) =>
    l.startsWith("kubelet_started_containers_errors_total{")
  );
  assert.deepEqual(errors, [
    'kubelet_started_containers_errors_total{code="ErrImageNeverPull",container_type="container"} 1',
  ]);
});

Deno.test("KubeRuntimeManager.syncPod does not count a container start held back by its crash-loop back-off", async () => {
  const metrics = new KubeletMetrics({ process: false });
  await using h = await harness(
    (name) => name === "crash" ? { exitAfterStart: true, exitCode: 1 } : undefined,
    { metrics },
  );
  const p = pod({ containers: [{ name: "crash", image: IMAGE }] });
  const count = () => metrics.startedContainersTotal.get({ container_type: "container" });
  await h.sync(p);
  await h.sync(p); // the first restart is immediate
  assert.equal(count(), 2);
  const waiting = await h.sync(p);
  assert.equal(
    waiting.results.find((s) => s.action === "StartContainer")?.error,
    "CrashLoopBackOff",
  );
  assert.equal(count(), 2);
  assert.equal(
    metrics.startedContainersErrorsTotal.get({
      container_type: "container",
      code: "CrashLoopBackOff",
    }),
    0,
  );
  h.clock.step(10_000);
  await h.sync(p);
  assert.equal(count(), 3);
});

Deno.test("KubeRuntimeManager.syncPod runs a hostUsers: false pod in its own user namespace, sandbox, containers and mounts alike", async () => {
  const metrics = new KubeletMetrics({ process: false });
  const handlers: api.RuntimeHandler[] = [
    { name: "", features: { recursiveReadOnlyMounts: true, userNamespaces: true } },
    { name: "runc", features: { recursiveReadOnlyMounts: true, userNamespaces: false } },
  ];
  const podsDir = await Deno.makeTempDir({ prefix: "kuberuntime-userns-" });
  try {
    const userNamespaces = await UsernsManager.open({
      podsDirectory: podsDir,
      maxPods: 110,
      handlerSupportsUserNamespaces: (h) => handlerSupportsUserNamespaces(handlers, h),
      kubeletMappings: (ids) => Promise.resolve({ firstID: ids, length: ids * 200 }),
      random: () => 0.5,
      logger: createLogger({ write: () => {} }),
    });
    const classes = new Map([["second", "runc"]]);
    await using h = await harness(undefined, {
      metrics,
      userNamespaces,
      runtimeClasses: runtimeClasses(classes),
    });
    const r = await h.sync(pod({ hostUsers: false }));
    assert.equal(r.error(), undefined);
    const mapping = { hostId: 101 * 65536, containerId: 0, length: 65536 };
    const userns = { mode: api.NamespaceMode.POD, uids: [mapping], gids: [mapping] };
    const [sb] = [...h.fake.service.sandboxes.values()];
    assert.deepEqual(sb?.config.linux?.securityContext?.namespaceOptions?.usernsOptions, userns);
    const [c] = [...h.fake.service.containers.values()];
    // containerd 2.x requires the container's user namespace to be the sandbox's.
    assert.deepEqual(c?.config.linux?.securityContext?.namespaceOptions?.usernsOptions, userns);
    // Every mount (here the termination log) is idmapped with the pod's mappings.
    assert.ok((c?.config.mounts.length ?? 0) > 0);
    for (const m of c!.config.mounts) {
      assert.deepEqual([m.uidMappings, m.gidMappings], [[mapping], [mapping]], m.containerPath);
    }
    assert.equal(metrics.startedUserNamespacedPodsTotal.get(), 1);
    assert.equal(metrics.startedUserNamespacedPodsErrorsTotal.get(), 0);

    // A pod keeping the host's users: the node's namespace, plain mounts, not counted.
    const plain = await h.manager.syncPod(
      AbortSignal.timeout(10_000),
      pod({}, "uid-plain"),
      await h.status("uid-plain"),
      [],
    );
    assert.equal(plain.error(), undefined);
    const other = [...h.fake.service.containers.values()].find((x) => x.id !== c!.id)!;
    assert.equal(
      other.config.linux?.securityContext?.namespaceOptions?.usernsOptions?.mode,
      api.NamespaceMode.NODE,
    );
    assert.ok(other.config.mounts.every((m) => m.uidMappings.length === 0));
    assert.equal(metrics.startedUserNamespacedPodsTotal.get(), 1);

    // A RuntimeClass whose handler lacks user namespaces: upstream's message, counted as an error.
    const bad = await h.manager.syncPod(
      AbortSignal.timeout(10_000),
      pod({ hostUsers: false, runtimeClassName: "second" }, "uid-bad"),
      await h.status("uid-bad"),
      [],
    );
    const msg =
      'can\'t set `spec.hostUsers: false`, RuntimeClass handler "runc" does not support user namespaces';
    assert.equal(
      steps(bad).at(-1),
      `CreatePodSandbox web_default(uid-bad) CreatePodSandboxError: Failed to generate sandbox config for pod "web_default(uid-bad)": ${msg}`,
    );
    assert.equal(h.events.at(-1)?.message, `Failed to create pod sandbox: ${msg}`);
    assert.equal(metrics.startedUserNamespacedPodsTotal.get(), 2);
    assert.equal(metrics.startedUserNamespacedPodsErrorsTotal.get(), 1);
  } finally {
    await Deno.remove(podsDir, { recursive: true });
  }
});

// ---- container restart rules (ContainerRestartRules, RestartAllContainersOnContainerExits) ----

/** The three running containers of upstream's makeBasePodAndStatus, with `mutate` applied. */
function basePod(mutate: (cs: V1Container[]) => void, restartPolicy: string): V1Pod {
  const containers: V1Container[] = ["foo1", "foo2", "foo3"].map((name) => ({
    name,
    image: IMAGE,
  }));
  mutate(containers);
  return pod({ containers, restartPolicy });
}

// Upstream TestComputePodActionsWithContainerRestartRules, re-expressed.
Deno.test("computePodActions applies container-level restart policies as upstream's table", () => {
  type Row = [
    string,
    (cs: V1Container[]) => void,
    string,
    (p: V1Pod) => { sandboxes: api.PodSandboxStatus[]; containers: api.ContainerStatus[] },
    ReturnType<typeof summary>,
  ];
  const set = (policy: string, ...idx: number[]) => (cs: V1Container[]) => {
    for (const i of idx) cs[i]!.restartPolicy = policy;
  };
  const states = (p: V1Pod, ...s: Array<[State, number?]>) =>
    p.spec!.containers.map((c, i) => cs(p, c, s[i]?.[0] ?? "running", s[i]?.[1] ?? 0));
  const rows: Row[] = [
    [
      "restart exited containers if RestartPolicy == Always",
      set("Always", 0, 1),
      "Never",
      (p) => ({ sandboxes: [sandbox()], containers: states(p, ["exited", 0], ["exited", 111]) }),
      { ...NOTHING, start: [0, 1] },
    ],
    [
      "restart failed containers if RestartPolicy == OnFailure",
      set("OnFailure", 0, 1),
      "Never",
      (p) => ({ sandboxes: [sandbox()], containers: states(p, ["exited", 0], ["exited", 111]) }),
      { ...NOTHING, start: [1] },
    ],
    [
      "restart created but not started containers if RestartPolicy == OnFailure",
      set("OnFailure", 0, 1),
      "Never",
      (p) => ({ sandboxes: [sandbox()], containers: states(p, ["exited", 0], ["created"]) }),
      { ...NOTHING, start: [1] },
    ],
    [
      "don't restart containers if RestartPolicy == Never",
      set("Never", 0, 1),
      "Always",
      (p) => ({ sandboxes: [sandbox()], containers: states(p, ["exited", 0], ["exited", 111]) }),
      NOTHING,
    ],
    [
      "kill pod and recreate all containers (except for the succeeded one) if the sandbox is dead",
      set("OnFailure", 1),
      "Always",
      (p) => ({
        sandboxes: [sandbox("notready")],
        containers: states(p, ["running"], ["exited", 0]),
      }),
      { ...NOTHING, killPod: true, createSandbox: true, attempt: 1, start: [0, 2] },
    ],
  ];
  for (const [name, mutate, restartPolicy, runtime, want] of rows) {
    const p = basePod(mutate, restartPolicy);
    const { sandboxes, containers } = runtime(p);
    assert.deepEqual(summary(computePodActions(p, status(sandboxes, containers))), want, name);
  }
});

Deno.test("computePodActions restarts a container on an exit code its rules name, whatever the pod's policy", () => {
  const p = pod({
    restartPolicy: "Never",
    containers: [{
      name: "main",
      image: IMAGE,
      restartPolicy: "Never",
      restartPolicyRules: [{ action: "Restart", exitCodes: { operator: "In", values: [42] } }],
    }],
  });
  const main = p.spec!.containers[0]!;
  const after = (code: number) =>
    summary(computePodActions(p, status([sandbox()], [cs(p, main, "exited", code)])));
  assert.deepEqual(after(42), { ...NOTHING, start: [0] });
  assert.deepEqual(after(1), { ...NOTHING, killPod: true });

  // A running container has no exit code: a liveness failure follows its restartPolicy alone.
  const failing = computePodActions(p, status([sandbox()], [cs(p, main, "running")]), {
    probeResults: { liveness: () => "Failure", startup: () => undefined },
  });
  assert.deepEqual(summary(failing), {
    ...NOTHING,
    killPod: true,
    kill: ["Container main failed liveness probe"],
  }, "nothing left to run: the pod is killed");
  const always = pod({
    containers: [{ ...main, restartPolicy: "Always" }],
    restartPolicy: "Never",
  });
  const restarted = computePodActions(
    always,
    status([sandbox()], [cs(always, always.spec!.containers[0]!, "running")]),
    { probeResults: { liveness: () => "Failure", startup: () => undefined } },
  );
  assert.deepEqual(summary(restarted), {
    ...NOTHING,
    start: [0],
    kill: ["Container main failed liveness probe, will be restarted"],
  });
});

Deno.test("computePodActions retries a failed init container whose rules or policy say so in a Never pod", () => {
  const p = pod({
    restartPolicy: "Never",
    initContainers: [{
      name: "setup",
      image: IMAGE,
      restartPolicy: "OnFailure",
    }],
  });
  const setup = p.spec!.initContainers![0]!;
  const a = computePodActions(p, status([sandbox()], [cs(p, setup, "exited", 3)]));
  assert.deepEqual(summary(a), { ...NOTHING, init: [0] });
  const never = pod({
    restartPolicy: "Always",
    initContainers: [{ ...setup, restartPolicy: "Never" }],
  });
  const b = computePodActions(never, status([sandbox()], [cs(never, setup, "exited", 3)]));
  assert.deepEqual(summary(b), { ...NOTHING, killPod: true });
});

const RESTART_ALL_ON_1 = [{
  action: "RestartAllContainers",
  exitCodes: { operator: "In", values: [1] },
}];

/** The reset list as [name, id, kill]. */
function resets(a: PodActions): Array<[string, string, boolean]> {
  return a.containersToReset.map((r) => [r.container.name, r.containerId, r.kill]);
}

// Upstream TestComputePodActionsForRestartAllContainers, re-expressed.
Deno.test("computePodActions removes every container, the triggering ones last, when the pod restarts all its containers", () => {
  const base = basePod(() => {}, "Always");
  const running = (p: V1Pod) =>
    p.spec!.containers.map((c, i) => cs(p, c, "running", 0, { id: `id${i + 1}` }));
  const notMarked = computePodActions(base, status([sandbox()], running(base)));
  assert.deepEqual(resets(notMarked), []);
  const marked = computePodActions(base, status([sandbox()], running(base)), {
    restartAllContainers: true,
  });
  assert.deepEqual(resets(marked), [
    ["foo1", "id1", true],
    ["foo2", "id2", true],
    ["foo3", "id3", true],
  ]);
  assert.deepEqual(summary(marked), NOTHING, "nothing else: the sandbox stays");

  // A regular container's exit triggers it: sidecars and running containers are killed first.
  const p = pod({
    initContainers: ["restartable-init-1", "restartable-init-2"].map((name) => ({
      name,
      image: IMAGE,
      restartPolicy: "Always",
    })),
    containers: [
      { name: "foo1", image: IMAGE },
      { name: "foo2", image: IMAGE },
      { name: "foo3", image: IMAGE, restartPolicy: "Never", restartPolicyRules: RESTART_ALL_ON_1 },
    ],
    restartPolicy: "Never",
  });
  const [i1, i2] = p.spec!.initContainers!;
  const [f1, f2, f3] = p.spec!.containers;
  const regular = computePodActions(
    p,
    status([sandbox()], [
      cs(p, f1!, "running", 0, { id: "id1" }),
      cs(p, f2!, "running", 0, { id: "id2" }),
      cs(p, f3!, "exited", 1, { id: "id3" }),
      cs(p, i1!, "running", 0, { id: "initid1" }),
      cs(p, i2!, "running", 0, { id: "initid2" }),
    ]),
    { restartAllContainers: true },
  );
  assert.deepEqual(resets(regular), [
    ["foo1", "id1", true],
    ["foo2", "id2", true],
    ["restartable-init-1", "initid1", true],
    ["restartable-init-2", "initid2", true],
    ["foo3", "id3", false],
  ]);

  // Every instance goes, past terminated ones included.
  const past = computePodActions(
    p,
    status([sandbox()], [
      cs(p, f3!, "exited", 1, { id: "id3" }),
      cs(p, f1!, "exited", 99, { id: "id1-past" }),
      cs(p, f3!, "exited", 1, { id: "id3-past" }),
    ]),
    { restartAllContainers: true },
  );
  assert.deepEqual(resets(past), [
    ["foo1", "id1-past", false],
    ["foo3", "id3", false],
    ["foo3", "id3-past", false],
  ]);
});

Deno.test("KubeRuntimeManager.syncPod restarts all containers in place: kills, removes keeping logs, then starts them again", async () => {
  await using h = await harness((name) =>
    name === "app" ? { exitAfterStart: true, exitCode: 1 } : undefined
  );
  const p = pod({
    restartPolicy: "Never",
    containers: [
      { name: "app", image: IMAGE, restartPolicy: "Never", restartPolicyRules: RESTART_ALL_ON_1 },
      { name: "side", image: IMAGE },
    ],
  });
  await h.sync(p);
  assert.deepEqual(h.created().map(([n, a, s]) => [n, a, s]), [
    ["app", 0, EXITED],
    ["side", 0, RUNNING],
  ]);
  const sandboxId = [...h.fake.service.sandboxes.keys()][0]!;
  // containerd writes each instance's log; they must survive the removal.
  const logDir = join(h.dir, "logs", `default_web_${UID}`);
  for (const name of ["app", "side"]) {
    await Deno.mkdir(join(logDir, name), { recursive: true });
    await Deno.writeTextFile(join(logDir, name, "0.log"), "");
  }

  const reset = await h.manager.syncPod(AbortSignal.timeout(10_000), p, await h.status(), [], true);
  assert.equal(reset.error(), undefined);
  assert.deepEqual(steps(reset), [
    `RemoveContainer side`,
    `RemoveContainer app`,
    `ConfigPodSandbox ${sandboxId}`,
  ]);
  assert.deepEqual(h.stops, [["side", 2]], "the running one is stopped with no grace period");
  const killing = h.events.find((e) => e.reason === "Killing");
  assert.equal(killing?.message, "killing");
  assert.deepEqual(h.created(), [], "every container is removed");
  assert.deepEqual([...h.fake.service.sandboxes.keys()], [sandboxId], "the sandbox stays");
  for (const name of ["app", "side"]) {
    assert.equal((await Deno.stat(join(logDir, name, "0.log"))).isFile, true, `${name} log kept`);
  }

  // The next sync starts them again in the same sandbox, counted from their logs.
  const again = await h.sync(p);
  assert.equal(again.error(), undefined);
  assert.deepEqual(steps(again), [
    `ConfigPodSandbox ${sandboxId}`,
    "StartContainer app",
    "StartContainer side",
  ]);
  assert.deepEqual(h.created().map(([n, a]) => [n, a]), [["app", 1], ["side", 1]]);
});
