import { InternalContainerLifecycle } from "../cm/internal_container_lifecycle.ts";
import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import { FakeClock } from "../util/clock.ts";
import { CriConnection, GrpcCode } from "../cri/connection.ts";
import type { ObjectRef } from "../client/record.ts";
import { DnsConfigurer } from "../network/dns.ts";
import { type FakeRemoteRuntime, startFakeRuntime } from "../testing/fake_remote_runtime.ts";
import { ImageManager } from "../images/image_manager.ts";
import { createLogger } from "../klog/klog.ts";
import { HandlerRunner } from "../lifecycle/handlers.ts";
import {
  calcRestartCountByLogDir,
  type ContainerDeps,
  type ContainerRuntimeService,
  CreateContainerConfigError,
  generateContainerConfig,
  killContainer,
  killContainersWithSyncResult,
  removeContainer,
  startContainer,
} from "./kuberuntime_container.ts";
import { readTerminationMessage } from "./kuberuntime_manager.ts";
import { generatePodSandboxConfig, type SandboxConfigOptions } from "./kuberuntime_sandbox.ts";
import {
  type ContainerMounter,
  KubeletMounts,
  type MakeMountsRequest,
  MountsError,
} from "../kubelet_mounts.ts";
import { IMAGE_VOLUME } from "../volume/image.ts";
import type { MountedVolume } from "../volume/plugin.ts";
import { newContainerAnnotations, newContainerLabels } from "./labels.ts";
import { defaultPodStatus, type PodStatus } from "../container/pod_cache.ts";
import { getContainerOOMScoreAdjust } from "../qos/qos.ts";
import { RemoteImageService } from "../cri/remote_image.ts";
import { RemoteRuntimeService } from "../cri/remote_runtime.ts";
import { expand, mappingFuncFor } from "./expansion.ts";
import { verifyRunAsNonRoot } from "./_container_linux.ts";
import type { HostLinux } from "./_host_linux.ts";

const IMAGE = "busybox:1.36";
const UID = "uid-web";

/** upstream's default masked paths on a host whose CPUs have no thermal_throttle. */
const MASKED_PATHS = [
  "/proc/asound",
  "/proc/acpi",
  "/proc/interrupts",
  "/proc/kcore",
  "/proc/keys",
  "/proc/latency_stats",
  "/proc/timer_list",
  "/proc/timer_stats",
  "/proc/sched_debug",
  "/proc/scsi",
  "/sys/firmware",
  "/sys/devices/virtual/powercap",
];

/** A host as _host_linux.ts would read it: 2 MiB and 1 GiB pages, swap accounting, no SELinux. */
function fakeHost(over: Partial<Record<keyof HostLinux, unknown>> = {}): HostLinux {
  const host: HostLinux = {
    hugePageSizes: () => ["2MB", "1GB"],
    swapControllerAvailable: () => true,
    selinuxEnabled: () => false,
    defaultMaskedPaths: () => MASKED_PATHS,
    swapCapacityBytes: () => 4 * 2 ** 30,
  };
  const out = { ...host };
  for (const [k, v] of Object.entries(over)) {
    (out as Record<string, unknown>)[k] = () => v;
  }
  return out;
}

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
  readonly deps: ContainerDeps;
  readonly sandboxOpts: SandboxConfigOptions;
  /** Runs a sandbox for `p` and returns its id and config. */
  sandbox(p: V1Pod): Promise<{ id: string; config: api.PodSandboxConfig }>;
}

async function harness(): Promise<Harness> {
  const dir = await Deno.makeTempDir({ prefix: "kuberuntime-container-" });
  const clock = new FakeClock();
  const fake = await startFakeRuntime({
    preloadImages: [IMAGE],
    socket: join(dir, "cri.sock"),
    clock,
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
  const spy: ContainerRuntimeService = {
    createContainer: (...a) => runtime.createContainer(...a),
    startContainer: (...a) => runtime.startContainer(...a),
    removeContainer: (...a) => runtime.removeContainer(...a),
    containerStatus: (...a) => runtime.containerStatus(...a),
    stopContainer: (id, timeout, signal) => {
      stops.push([fake.service.containers.get(id)?.config.metadata?.name ?? id, timeout]);
      return runtime.stopContainer(id, timeout, signal);
    },
  };
  const podLogsDirectory = join(dir, "logs");
  const sandboxOpts: SandboxConfigOptions = {
    dns: new DnsConfigurer({
      clusterDNS: [],
      clusterDomain: "cluster.local",
      resolvConf: "",
      logger,
    }),
    podLogsDirectory,
    nodeHostname: "node-1",
    clusterDomain: "cluster.local",
    logger,
  };
  const deps: ContainerDeps = {
    runtime: spy,
    imageService: images,
    imageManager: new ImageManager({ imageService: images, recorder, clock }),
    recorder,
    logger,
    clock,
    podsDirectory: join(dir, "pods"),
    podLogsDirectory,
    legacyContainerLogsDirectory: join(dir, "containers"),
    linux: { memoryCapacityBytes: 8 * 2 ** 30, host: fakeHost() },
  };
  return {
    dir,
    fake,
    runtime,
    clock,
    events,
    stops,
    deps,
    sandboxOpts,
    async sandbox(p) {
      const config = await generatePodSandboxConfig(p, 0, sandboxOpts);
      return { id: await runtime.runPodSandbox(config, ""), config };
    },
    async [Symbol.asyncDispose]() {
      connection.close();
      await fake.stop();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

function pod(containers: V1Container[], extra: Partial<V1Pod["spec"]> = {}): V1Pod {
  return {
    metadata: { name: "web", namespace: "default", uid: UID },
    spec: {
      containers,
      restartPolicy: "Always",
      dnsPolicy: "ClusterFirst",
      terminationGracePeriodSeconds: 30,
      ...extra,
    },
  };
}

function emptyStatus(): PodStatus {
  return { ...defaultPodStatus(UID), name: "web", namespace: "default" };
}

const signal = () => AbortSignal.timeout(10_000);

Deno.test("expand follows upstream's $(VAR) syntax", () => {
  const mapping = mappingFuncFor(new Map([["A", "a"], ["EMPTY", ""]]));
  const cases: Array<[string, string]> = [
    ["$(A)-$(B)", "a-$(B)"],
    ["$$(A)", "$(A)"],
    ["$(A", "$(A"],
    ["$A", "$A"],
    ["x$", "x$"],
    ["$(A)$(A)", "aa"],
    ["[$(EMPTY)]", "[]"],
    ["$$$(A)", "$a"],
    ["no refs", "no refs"],
  ];
  for (const [input, want] of cases) assert.equal(expand(input, mapping), want, input);
});

Deno.test("verifyRunAsNonRoot rejects root users with upstream's messages", () => {
  const c: V1Container = { name: "app", securityContext: { runAsNonRoot: true } };
  const p = pod([c]);
  const where = `(pod: "web_default(${UID})", container: app)`;
  assert.equal(
    verifyRunAsNonRoot(p, c, { uid: 0n, username: "" }, `web_default(${UID})`),
    `container has runAsNonRoot and image will run as root ${where}`,
  );
  assert.equal(
    verifyRunAsNonRoot(p, c, { username: "nginx" }, `web_default(${UID})`),
    `container has runAsNonRoot and image has non-numeric user (nginx), cannot verify user is non-root ${where}`,
  );
  assert.equal(verifyRunAsNonRoot(p, c, { uid: 1000n, username: "" }, "x"), undefined);
  const root: V1Container = { name: "app", securityContext: { runAsNonRoot: true, runAsUser: 0 } };
  assert.equal(
    verifyRunAsNonRoot(pod([root]), root, { uid: 1000n, username: "" }, `web_default(${UID})`),
    `container's runAsUser breaks non-root policy ${where}`,
  );
});

Deno.test("generateContainerConfig builds the CRI config as upstream", async () => {
  await using h = await harness();
  const container: V1Container = {
    name: "main",
    image: IMAGE,
    command: ["/bin/sh", "-c"],
    args: ["echo $(GREETING) $(MISSING) $$(ESCAPED)"],
    env: [{ name: "WHO", value: "world" }, { name: "GREETING", value: "hello-$(WHO)" }],
    workingDir: "/srv",
    tty: true,
    resources: {
      requests: { cpu: "250m", memory: "64Mi" },
      limits: { cpu: "500m", memory: "128Mi" },
    },
    securityContext: {
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { add: ["NET_ADMIN"], drop: ["ALL"] },
    },
  };
  const p = pod([container]);
  const config = await generateContainerConfig(h.deps, {
    pod: p,
    container,
    restartCount: 2,
    imageRef: "sha256:abc",
  });
  assert.deepEqual(config.metadata, { name: "main", attempt: 2 });
  assert.equal(config.image?.image, "sha256:abc");
  assert.equal(config.image?.userSpecifiedImage, IMAGE);
  assert.deepEqual(config.command, ["/bin/sh", "-c"]);
  assert.deepEqual(config.args, ["echo hello-world $(MISSING) $(ESCAPED)"]);
  const decoder = new TextDecoder();
  assert.deepEqual(config.envs.map((e) => [e.key, decoder.decode(e.value)]), [
    ["WHO", "world"],
    ["GREETING", "hello-world"],
  ]);
  assert.equal(config.workingDir, "/srv");
  assert.equal(config.tty, true);
  assert.equal(config.logPath, "main/2.log");
  assert.ok((await Deno.stat(join(h.dir, "logs", `default_web_${UID}`, "main"))).isDirectory);
  assert.deepEqual(config.labels, newContainerLabels(container, p));
  const defaulted = {
    ...container,
    terminationMessagePath: "/dev/termination-log",
    terminationMessagePolicy: "File",
  };
  assert.deepEqual(config.annotations, newContainerAnnotations(defaulted, p, 2));

  assert.equal(config.mounts.length, 1);
  const mount = config.mounts[0]!;
  assert.equal(mount.containerPath, "/dev/termination-log");
  assert.match(mount.hostPath, new RegExp(`/pods/${UID}/containers/main/[0-9a-f]{8}$`));
  assert.equal((await Deno.stat(mount.hostPath)).mode! & 0o777, 0o666);

  const r = config.linux?.resources;
  assert.equal(r?.cpuShares, 256n);
  assert.equal(r?.cpuQuota, 50000n);
  assert.equal(r?.cpuPeriod, 100000n);
  assert.equal(r?.memoryLimitInBytes, 128n * 1024n * 1024n);
  assert.equal(r?.oomScoreAdj, BigInt(getContainerOOMScoreAdjust(p, container, 8 * 2 ** 30)));

  const sc = config.linux?.securityContext;
  assert.equal(sc?.runAsUser?.value, 0n, "an image without a user runs as root");
  assert.equal(sc?.noNewPrivs, true);
  assert.equal(sc?.readonlyRootfs, true);
  assert.equal(sc?.privileged, false);
  assert.deepEqual(sc?.capabilities?.addCapabilities, ["NET_ADMIN"]);
  assert.deepEqual(sc?.capabilities?.dropCapabilities, ["ALL"]);
  assert.deepEqual(sc?.maskedPaths, MASKED_PATHS, "the host's, /proc/interrupts included");
  assert.deepEqual(sc?.readonlyPaths, [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
  ]);
  assert.equal(sc?.seccomp?.profileType, api.SecurityProfile_ProfileType.Unconfined);
  assert.deepEqual(
    [sc?.namespaceOptions?.network, sc?.namespaceOptions?.ipc, sc?.namespaceOptions?.pid],
    [api.NamespaceMode.POD, api.NamespaceMode.POD, api.NamespaceMode.CONTAINER],
  );
});

Deno.test("generateContainerConfig takes the pod's security context and seccomp", async () => {
  await using h = await harness();
  const container: V1Container = {
    name: "main",
    image: IMAGE,
    securityContext: { runAsUser: 1001, procMount: "Unmasked" },
  };
  const p = pod([container], {
    hostNetwork: true,
    securityContext: {
      runAsUser: 1000,
      runAsGroup: 3000,
      fsGroup: 2000,
      supplementalGroups: [4000],
      seccompProfile: { type: "Localhost", localhostProfile: "audit.json" },
    },
  });
  const h2 = {
    ...h.deps,
    linux: { ...h.deps.linux, seccompProfileRoot: "/var/lib/kubelet/seccomp" },
  };
  const sc =
    (await generateContainerConfig(h2, { pod: p, container, restartCount: 0, imageRef: "x" }))
      .linux?.securityContext;
  assert.equal(sc?.runAsUser?.value, 1001n, "the container's user wins");
  assert.equal(sc?.runAsGroup?.value, 3000n);
  assert.deepEqual(sc?.supplementalGroups, [2000n, 4000n]);
  assert.deepEqual(sc?.maskedPaths, []);
  assert.equal(sc?.namespaceOptions?.network, api.NamespaceMode.NODE);
  assert.deepEqual(sc?.seccomp, {
    profileType: api.SecurityProfile_ProfileType.Localhost,
    localhostRef: "/var/lib/kubelet/seccomp/audit.json",
  });
});

Deno.test("generateContainerConfig fails loudly for what it cannot give the container", async () => {
  await using h = await harness();
  const cases: Array<[V1Pod, V1Container, RegExp]> = [];
  const mounted: V1Container = {
    name: "main",
    image: IMAGE,
    volumeMounts: [{ name: "data", mountPath: "/data" }],
  };
  cases.push([pod([mounted]), mounted, /^volumes are not supported yet$/]);
  const nonRoot: V1Container = {
    name: "main",
    image: IMAGE,
    securityContext: { runAsNonRoot: true },
  };
  cases.push([pod([nonRoot]), nonRoot, /container has runAsNonRoot and image will run as root/]);
  // A block volume that is not mapped (or a relative device path) is refused.
  const block: V1Container = {
    name: "main",
    image: IMAGE,
    volumeDevices: [{ name: "disk", devicePath: "/dev/xvda" }],
  };
  cases.push([pod([block]), block, /^cannot find volume "disk" to pass into container "main"$/]);
  const relative: V1Container = {
    name: "main",
    image: IMAGE,
    volumeDevices: [{ name: "disk", devicePath: "dev/xvda" }],
  };
  cases.push([
    pod([relative]),
    relative,
    /^error DevicePath `dev\/xvda` must be an absolute path$/,
  ]);
  for (const [p, container, message] of cases) {
    await assert.rejects(
      generateContainerConfig(h.deps, { pod: p, container, restartCount: 0, imageRef: "x" }),
      (e) => e instanceof CreateContainerConfigError && message.test(e.message),
    );
  }
});

/** A ContainerMounter that records its requests and answers with `mounts` (or throws `error`). */
function fakeMounter(
  mounts: api.Mount[],
  error?: Error,
): ContainerMounter & { requests: MakeMountsRequest[] } {
  const requests: MakeMountsRequest[] = [];
  return {
    requests,
    makeMounts(req) {
      requests.push(req);
      return error ? Promise.reject(error) : Promise.resolve(mounts);
    },
  };
}

Deno.test("generateContainerConfig puts the kubelet's mounts before the termination log", async () => {
  await using h = await harness();
  const container: V1Container = {
    name: "main",
    image: IMAGE,
    env: [{ name: "DIR", value: "logs" }],
    volumeMounts: [{ name: "data", mountPath: "/data", subPathExpr: "$(DIR)" }],
  };
  const p = pod([container], {
    hostname: "db-0",
    subdomain: "db",
    volumes: [{ name: "data", emptyDir: {} }],
  });
  const volume = api.Mount.create({ containerPath: "/data", hostPath: "/vol/data/logs" });
  const hosts = api.Mount.create({ containerPath: "/etc/hosts", hostPath: "/pods/etc-hosts" });
  const mounter = fakeMounter([volume, hosts]);
  const deps = { ...h.deps, kubeletMounts: mounter, clusterDomain: "cluster.local" };
  const config = await generateContainerConfig(deps, {
    pod: p,
    container,
    restartCount: 0,
    imageRef: "x",
    podIPs: ["10.0.0.5", "fd00::5"],
  });
  assert.deepEqual(config.mounts.map((m) => m.containerPath), [
    "/data",
    "/etc/hosts",
    "/dev/termination-log",
  ]);
  assert.equal(mounter.requests.length, 1);
  const req = mounter.requests[0]!;
  assert.equal(req.pod, p);
  assert.equal(req.container.name, "main");
  assert.deepEqual(req.podIPs, ["10.0.0.5", "fd00::5"]);
  assert.equal(req.hostname, "db-0", "the short hostname, as the sandbox's");
  assert.equal(req.domain, "db.default.svc.cluster.local");
  assert.deepEqual(req.envs, [{ name: "DIR", value: "logs" }]);
});

Deno.test("generateContainerConfig builds env with the deps' Services and pod volumes", async () => {
  await using h = await harness();
  const dir = await Deno.makeTempDir({ prefix: "container_env_" });
  try {
    await Deno.writeFile(join(dir, "app.env"), new TextEncoder().encode("MODE='fast'\n"));
    const services = {
      hasSynced: () => true,
      list: () => [{
        metadata: { name: "kubernetes", namespace: "default" },
        spec: { clusterIP: "10.96.0.1", ports: [{ name: "https", port: 443, protocol: "TCP" }] },
      }],
    };
    const podVolumes = () =>
      new Map([["envs", { hostPath: dir, readOnly: false, selinuxRelabel: false }]]);
    const container: V1Container = {
      name: "main",
      image: IMAGE,
      env: [{
        name: "MODE",
        valueFrom: { fileKeyRef: { volumeName: "envs", path: "app.env", key: "MODE" } },
      }],
    };
    const config = await generateContainerConfig(
      { ...h.deps, services, podVolumes },
      { pod: pod([container]), container, restartCount: 0, imageRef: "x" },
    );
    const env = Object.fromEntries(
      config.envs.map((e) => [e.key, new TextDecoder().decode(e.value)]),
    );
    assert.equal(env.MODE, "fast");
    assert.equal(env.KUBERNETES_SERVICE_HOST, "10.96.0.1");
    assert.equal(env.KUBERNETES_SERVICE_PORT, "443");
    // Before the first list of Services a (non-static) pod's env cannot be built.
    await assert.rejects(
      generateContainerConfig(
        { ...h.deps, services: { ...services, hasSynced: () => false }, podVolumes },
        { pod: pod([container]), container, restartCount: 0, imageRef: "x" },
      ),
      { message: "services have not yet been read at least once, cannot construct envvars" },
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("generateContainerConfig reports mount failures as CreateContainerConfigError", async () => {
  await using h = await harness();
  const container: V1Container = {
    name: "main",
    image: IMAGE,
    volumeMounts: [{ name: "cache", mountPath: "/cache" }],
  };
  const message = 'cannot find volume "cache" to mount into container "main"';
  const deps = { ...h.deps, kubeletMounts: fakeMounter([], new MountsError(message)) };
  await assert.rejects(
    generateContainerConfig(deps, {
      pod: pod([container]),
      container,
      restartCount: 0,
      imageRef: "x",
    }),
    (e) => e instanceof CreateContainerConfigError && e.message === message,
  );
  // An invalid hostname fails before any mount is made, with the sandbox's message.
  const unused = fakeMounter([]);
  await assert.rejects(
    generateContainerConfig({ ...h.deps, kubeletMounts: unused }, {
      pod: pod([container], { hostname: "Bad_Host" }),
      container,
      restartCount: 0,
      imageRef: "x",
    }),
    (e) =>
      e instanceof CreateContainerConfigError &&
      /^pod Hostname "Bad_Host" is not a valid DNS label: /.test(e.message),
  );
  assert.equal(unused.requests.length, 0);

  // Through startContainer, the failure is the container's CreateContainerConfigError.
  const p = pod([container]);
  const sb = await h.sandbox(p);
  const failure = await startContainer(deps, signal(), {
    sandboxId: sb.id,
    sandboxConfig: sb.config,
    pod: p,
    container,
    podStatus: emptyStatus(),
    pullSecrets: [],
  });
  assert.deepEqual(failure, { reason: "CreateContainerConfigError", message });
  assert.equal(h.events.at(-1)?.message, `Error: ${message}`);
});

Deno.test("startContainer creates and starts the container with upstream's events", async () => {
  await using h = await harness();
  const container: V1Container = { name: "main", image: IMAGE };
  const p = pod([container]);
  const sb = await h.sandbox(p);
  const failure = await startContainer(h.deps, signal(), {
    sandboxId: sb.id,
    sandboxConfig: sb.config,
    pod: p,
    container,
    podStatus: emptyStatus(),
    pullSecrets: [],
  });
  assert.equal(failure, undefined);
  const [c] = [...h.fake.service.containers.values()];
  assert.equal(c?.state, api.ContainerState.CONTAINER_RUNNING);
  assert.equal(c?.logPath, join(h.dir, "logs", `default_web_${UID}`, "main", "0.log"));
  assert.deepEqual(h.events.map((e) => [e.type, e.reason, e.message]), [
    ["Normal", "Pulled", 'Container image "busybox:1.36" already present on machine'],
    ["Normal", "Created", "Container created"],
    ["Normal", "Started", "Container started"],
  ]);
  assert.equal(h.events[1]?.ref.fieldPath, "spec.containers{main}");
});

Deno.test("startContainer gives the container its cpusets through the container manager's hooks, and fails with PreCreateHookError", async () => {
  await using h = await harness();
  const calls: string[] = [];
  let fail = false;
  const internalLifecycle = new InternalContainerLifecycle({
    cpuManager: {
      cpuAffinity: (uid, name) => {
        if (fail) throw new Error("no cpus");
        calls.push(`affinity ${uid}/${name}`);
        return "2-3";
      },
      addContainer: (_p, c, id) => void calls.push(`cpu add ${c.name} ${id !== ""}`),
    },
    memoryManager: {
      memoryNumaNodes: () => [1, 0],
      addContainer: (_p, c) => void calls.push(`memory add ${c.name}`),
    },
    topologyManager: {
      addContainer: (_p, c) => void calls.push(`topology add ${c.name}`),
      removeContainer: (id) => void calls.push(`topology remove ${id}`),
    },
  });
  const deps = { ...h.deps, internalLifecycle };
  const container: V1Container = { name: "main", image: IMAGE };
  const p = pod([container]);
  const sb = await h.sandbox(p);
  const start = () =>
    startContainer(deps, signal(), {
      sandboxId: sb.id,
      sandboxConfig: sb.config,
      pod: p,
      container,
      podStatus: emptyStatus(),
      pullSecrets: [],
    });
  assert.equal(await start(), undefined);
  const [c] = [...h.fake.service.containers.values()];
  assert.equal(c?.config.linux?.resources?.cpusetCpus, "2-3");
  assert.equal(c?.config.linux?.resources?.cpusetMems, "0,1");
  assert.deepEqual(calls, [
    `affinity ${UID}/main`,
    "cpu add main true",
    "memory add main",
    "topology add main",
  ]);
  await removeContainer(deps, c!.id);
  assert.equal(calls.at(-1), `topology remove ${c!.id}`);
  fail = true;
  assert.deepEqual(await start(), { reason: "PreCreateHookError", message: "no cpus" });
  assert.ok(
    h.events.some((e) =>
      e.reason === "Failed" && e.message === "Internal PreCreateContainer hook failed: no cpus"
    ),
  );
});

Deno.test("startContainer resolves env into the CRI config and fails a missing key with CreateContainerConfigError", async () => {
  await using h = await harness();
  const cm = { metadata: { name: "app", namespace: "default" }, data: { MODE: "fast" } };
  const deps: ContainerDeps = {
    ...h.deps,
    hostIPs: ["192.0.2.10"],
    envSource: {
      getConfigMap: (_ns, name) => Promise.resolve(name === "app" ? cm : undefined),
      getSecret: () => Promise.resolve(undefined),
    },
  };
  const good: V1Container = {
    name: "main",
    image: IMAGE,
    command: ["run", "$(MODE)"],
    envFrom: [{ configMapRef: { name: "app" }, prefix: "APP_" }],
    env: [
      { name: "MODE", valueFrom: { configMapKeyRef: { name: "app", key: "MODE" } } },
      { name: "POD", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
      { name: "IP", valueFrom: { fieldRef: { fieldPath: "status.podIP" } } },
      { name: "HOST", valueFrom: { fieldRef: { fieldPath: "status.hostIP" } } },
    ],
  };
  const bad: V1Container = {
    name: "bad",
    image: IMAGE,
    env: [{ name: "X", valueFrom: { configMapKeyRef: { name: "app", key: "missing" } } }],
  };
  const p = pod([good, bad]);
  const sb = await h.sandbox(p);
  const status = { ...emptyStatus(), ips: ["10.1.0.7"] };
  const start = (container: V1Container) =>
    startContainer(deps, signal(), {
      sandboxId: sb.id,
      sandboxConfig: sb.config,
      pod: p,
      container,
      podStatus: status,
      pullSecrets: [],
    });

  assert.equal(await start(good), undefined);
  const [c] = [...h.fake.service.containers.values()];
  const decoder = new TextDecoder();
  assert.deepEqual(c?.config.envs.map((e) => [e.key, decoder.decode(e.value)]), [
    ["APP_MODE", "fast"],
    ["MODE", "fast"],
    ["POD", "web"],
    ["IP", "10.1.0.7"],
    ["HOST", "192.0.2.10"],
  ]);
  assert.deepEqual(c?.config.command, ["run", "fast"]);

  assert.deepEqual(await start(bad), {
    reason: "CreateContainerConfigError",
    message: "couldn't find key missing in ConfigMap default/app",
  });
  assert.equal(h.fake.service.containers.size, 1);
  assert.deepEqual(
    [h.events.at(-1)?.reason, h.events.at(-1)?.message, h.events.at(-1)?.ref.fieldPath],
    ["Failed", "Error: couldn't find key missing in ConfigMap default/app", "spec.containers{bad}"],
  );
});

Deno.test("startContainer reports image, create and start failures with their reasons", async () => {
  await using h = await harness();
  const never: V1Container = { name: "never", image: "nginx:1", imagePullPolicy: "Never" };
  const crash: V1Container = { name: "crash", image: IMAGE };
  const main: V1Container = { name: "main", image: IMAGE };
  const p = pod([never, crash, main]);
  const sb = await h.sandbox(p);
  const start = (container: V1Container) =>
    startContainer(h.deps, signal(), {
      sandboxId: sb.id,
      sandboxConfig: sb.config,
      pod: p,
      container,
      podStatus: emptyStatus(),
      pullSecrets: [],
    });

  assert.deepEqual(await start(never), {
    reason: "ErrImageNeverPull",
    message: 'Container image "nginx:1" is not present with pull policy of Never',
  });
  assert.deepEqual(h.events.at(-1)?.message, "Error: ErrImageNeverPull");

  h.fake.injectError("CreateContainer", GrpcCode.UNKNOWN, "no space left on device");
  assert.deepEqual(await start(main), {
    reason: "CreateContainerError",
    message: "no space left on device",
  });
  assert.equal(h.events.at(-1)?.message, "Error: no space left on device");

  h.fake.service.onCreate = (config) =>
    config.metadata?.name === "crash" ? { startError: "exec: not found" } : undefined;
  assert.deepEqual(await start(crash), {
    reason: "RunContainerError",
    message: "failed to create containerd task: exec: not found",
  });
  assert.deepEqual(h.events.slice(-2).map((e) => [e.reason, e.message]), [
    ["Created", "Container created"],
    ["Failed", "Error: failed to create containerd task: exec: not found"],
  ]);
});

/** Starts every container of `p` in a new sandbox; returns the container ids by name. */
async function runAll(h: Harness, p: V1Pod): Promise<Map<string, string>> {
  const sb = await h.sandbox(p);
  for (const c of [...(p.spec?.initContainers ?? []), ...(p.spec?.containers ?? [])]) {
    const failure = await startContainer(h.deps, signal(), {
      sandboxId: sb.id,
      sandboxConfig: sb.config,
      pod: p,
      container: c,
      podStatus: emptyStatus(),
      pullSecrets: [],
    });
    assert.equal(failure, undefined);
  }
  return new Map(
    [...h.fake.service.containers.values()].map((c) => [c.config.metadata?.name ?? "", c.id]),
  );
}

Deno.test("killContainer gives the override, the deletion grace period and at least 2 s", async () => {
  await using h = await harness();
  const p = pod([{ name: "a", image: IMAGE }, { name: "b", image: IMAGE }, {
    name: "c",
    image: IMAGE,
  }]);
  const ids = await runAll(h, p);
  const kill = (pd: V1Pod, name: string, gracePeriodOverride?: number) =>
    killContainer(h.deps, signal(), {
      pod: pd,
      containerId: ids.get(name)!,
      containerName: name,
      message: "",
      reason: "",
      gracePeriodOverride,
    });
  await kill(p, "a");
  await kill(p, "b", 0);
  await kill({ ...p, metadata: { ...p.metadata, deletionGracePeriodSeconds: 5 } }, "c");
  assert.deepEqual(h.stops, [["a", 30], ["b", 2], ["c", 5]]);
  const killing = h.events.filter((e) => e.reason === "Killing");
  assert.deepEqual(killing.map((e) => [e.message, e.ref.fieldPath]), [
    ["Stopping container a", "spec.containers{a}"],
    ["Stopping container b", "spec.containers{b}"],
    ["Stopping container c", "spec.containers{c}"],
  ]);
  await assert.rejects(kill(p, "missing"), /failed to get containerSpec "missing"/);
});

Deno.test("killContainer reads an orphan's grace period from its annotations", async () => {
  await using h = await harness();
  const p = pod([{ name: "a", image: IMAGE }], { terminationGracePeriodSeconds: 45 });
  const ids = await runAll(h, p);
  await killContainer(h.deps, signal(), {
    pod: undefined,
    containerId: ids.get("a")!,
    containerName: "a",
    message: "",
    reason: "Unknown",
  });
  assert.deepEqual(h.stops, [["a", 45]]);
  assert.equal(h.events.at(-1)?.ref.name, "web");
});

Deno.test("killContainersWithSyncResult stops sidecars last, the last sidecar first", async () => {
  await using h = await harness();
  const p = pod([{ name: "main", image: IMAGE }, { name: "other", image: IMAGE }], {
    initContainers: [
      { name: "proxy", image: IMAGE, restartPolicy: "Always" },
      { name: "logger", image: IMAGE, restartPolicy: "Always" },
    ],
  });
  const ids = await runAll(h, p);
  const running = ["proxy", "logger", "main", "other"].map((name) => ({
    id: ids.get(name)!,
    name,
  }));
  const results = await killContainersWithSyncResult(h.deps, signal(), p, running);
  assert.deepEqual(results.map((r) => [r.action, r.target, r.error]), [
    ["KillContainer", "proxy", undefined],
    ["KillContainer", "logger", undefined],
    ["KillContainer", "main", undefined],
    ["KillContainer", "other", undefined],
  ]);
  const order = h.stops.map(([name]) => name);
  assert.deepEqual(order.slice(2), ["logger", "proxy"]);
  assert.deepEqual(new Set(order.slice(0, 2)), new Set(["main", "other"]));
  assert.equal(h.clock.waiters, 0, "no grace-period timer is left behind");
});

Deno.test("calcRestartCountByLogDir continues after the highest log", async () => {
  const dir = await Deno.makeTempDir();
  try {
    assert.equal(calcRestartCountByLogDir(join(dir, "absent")), 0);
    for (const f of ["0.log", "3.log.20260101-000000", "2.log", "notes.txt"]) {
      await Deno.writeTextFile(join(dir, f), "");
    }
    assert.equal(calcRestartCountByLogDir(dir), 4);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("readTerminationMessage reads the file the container wrote", async () => {
  await using h = await harness();
  const p = pod([{ name: "job", image: IMAGE }]);
  const ids = await runAll(h, p);
  const id = ids.get("job")!;
  const mount = h.fake.service.containers.get(id)!.config.mounts[0]!;
  await Deno.writeTextFile(mount.hostPath, "all done");
  const running = (await h.runtime.containerStatus(id)).status!;
  assert.equal(await readTerminationMessage(running), undefined, "only exited containers");
  h.fake.service.exitContainer(id, 0);
  assert.equal(
    await readTerminationMessage((await h.runtime.containerStatus(id)).status!),
    "all done",
  );
});

/** An exited container's status, as the runtime reports one. */
function exitedStatus(
  opts: { dir: string; policy: string; exitCode: number; reason?: string },
): api.ContainerStatus {
  return api.ContainerStatus.create({
    id: "c1",
    state: api.ContainerState.CONTAINER_EXITED,
    exitCode: opts.exitCode,
    reason: opts.reason ?? (opts.exitCode === 0 ? "Completed" : "Error"),
    annotations: {
      "io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
      "io.kubernetes.container.terminationMessagePolicy": opts.policy,
    },
    mounts: [{ containerPath: "/dev/termination-log", hostPath: join(opts.dir, "msg") }],
    logPath: join(opts.dir, "0.log"),
  });
}

function criLog(lines: string[]): string {
  return lines.map((l) => `2026-01-01T00:00:00.000000001Z stderr ${l}\n`).join("");
}

Deno.test("readTerminationMessage falls back to the log tail only on error with an empty file", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(join(dir, "msg"), "");
    await Deno.writeTextFile(join(dir, "0.log"), criLog(["F panic: boom", "P part", "F ial"]));
    const failed = exitedStatus({ dir, policy: "FallbackToLogsOnError", exitCode: 2 });
    assert.equal(await readTerminationMessage(failed), "panic: boom\npartial\n");
    const ok = exitedStatus({ dir, policy: "FallbackToLogsOnError", exitCode: 0 });
    assert.equal(await readTerminationMessage(ok), undefined);
    const file = exitedStatus({ dir, policy: "File", exitCode: 2 });
    assert.equal(await readTerminationMessage(file), undefined);
    const cannotRun = exitedStatus({
      dir,
      policy: "FallbackToLogsOnError",
      exitCode: 128,
      reason: "ContainerCannotRun",
    });
    assert.equal(await readTerminationMessage(cannotRun), undefined);
    await Deno.writeTextFile(join(dir, "msg"), "from file");
    assert.equal(await readTerminationMessage(failed), "from file");
    await Deno.remove(join(dir, "0.log"));
    await Deno.writeTextFile(join(dir, "msg"), "");
    assert.match(
      (await readTerminationMessage(failed)) ?? "",
      /^Error on reading termination message from logs: failed to open log file /,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("readTerminationMessage keeps 4096 bytes of the file and 80 lines / 2048 bytes of logs", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(join(dir, "msg"), "x".repeat(5000) + "END");
    const file = exitedStatus({ dir, policy: "File", exitCode: 1 });
    const fromFile = (await readTerminationMessage(file)) ?? "";
    assert.equal(fromFile.length, 4096);
    assert.ok(fromFile.endsWith("END"));

    await Deno.writeTextFile(join(dir, "msg"), "");
    const lines = Array.from({ length: 100 }, (_, i) => `F line ${i}`);
    await Deno.writeTextFile(join(dir, "0.log"), criLog(lines));
    const short = (await readTerminationMessage(
      exitedStatus({ dir, policy: "FallbackToLogsOnError", exitCode: 1 }),
    )) ?? "";
    assert.ok(short.startsWith("line 20\n"), "the last 80 lines");
    assert.ok(short.endsWith("line 99\n"));

    const long = Array.from(
      { length: 100 },
      (_, i) => `F ${String(i).padStart(3, "0")}${"y".repeat(60)}`,
    );
    await Deno.writeTextFile(join(dir, "0.log"), criLog(long));
    const tail = (await readTerminationMessage(
      exitedStatus({ dir, policy: "FallbackToLogsOnError", exitCode: 1 }),
    )) ?? "";
    assert.equal(tail.length, 2048);
    assert.ok(tail.endsWith(`099${"y".repeat(60)}\n`));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** The deps with a HandlerRunner that execs through the fake runtime. */
function withHooks(h: Harness): ContainerDeps {
  const handlerRunner = new HandlerRunner({
    runtime: h.runtime,
    logger: h.deps.logger,
    clock: h.clock,
  });
  return { ...h.deps, handlerRunner };
}

/** Polls (real time, bounded) until `cond` holds. */
async function until(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !cond(); i++) await new Promise((r) => setTimeout(r, 2));
  assert.ok(cond(), "condition not reached");
}

Deno.test("startContainer runs postStart after StartContainer", async () => {
  await using h = await harness();
  const calls: Array<[string, number]> = [];
  h.fake.service.execHandler = (id, cmd) => {
    calls.push([cmd.join(" "), h.fake.service.containers.get(id)?.state ?? -1]);
    return { stdout: "ok" };
  };
  const container: V1Container = {
    name: "main",
    image: IMAGE,
    lifecycle: { postStart: { exec: { command: ["sh", "-c", "touch /ready"] } } },
  };
  const p = pod([container]);
  const sb = await h.sandbox(p);
  const failure = await startContainer(withHooks(h), signal(), {
    sandboxId: sb.id,
    sandboxConfig: sb.config,
    pod: p,
    container,
    podStatus: emptyStatus(),
    pullSecrets: [],
  });
  assert.equal(failure, undefined);
  assert.deepEqual(calls, [["sh -c touch /ready", api.ContainerState.CONTAINER_RUNNING]]);
  assert.deepEqual(h.stops, []);
});

Deno.test("startContainer kills the container when postStart fails, with PostStartHookError", async () => {
  await using h = await harness();
  h.fake.service.execHandler = () => ({ stdout: "out", stderr: "boom", exitCode: 3 });
  const container: V1Container = {
    name: "main",
    image: IMAGE,
    lifecycle: { postStart: { exec: { command: ["sh", "-c", "exit 3"] } } },
  };
  const p = pod([container]);
  const sb = await h.sandbox(p);
  const failure = await startContainer(withHooks(h), signal(), {
    sandboxId: sb.id,
    sandboxConfig: sb.config,
    pod: p,
    container,
    podStatus: emptyStatus(),
    pullSecrets: [],
  });
  assert.deepEqual(failure, {
    reason: "PostStartHookError",
    message:
      `Exec lifecycle hook ([sh -c exit 3]) for Container "main" in Pod "web_default(${UID})" ` +
      `failed - error: command 'sh -c exit 3' exited with 3: boom, message: "outboom"`,
  });
  assert.deepEqual(h.events.slice(-3).map((e) => [e.type, e.reason, e.message]), [
    ["Normal", "Started", "Container started"],
    ["Warning", "FailedPostStartHook", "PostStartHook failed"],
    ["Normal", "Killing", "FailedPostStartHook"],
  ]);
  assert.deepEqual(h.stops, [["main", 30]]);
  const [c] = [...h.fake.service.containers.values()];
  assert.equal(c?.state, api.ContainerState.CONTAINER_EXITED);
});

Deno.test("startContainer fails postStart exec loudly without ExecSync on the runtime", async () => {
  await using h = await harness();
  const container: V1Container = {
    name: "main",
    image: IMAGE,
    lifecycle: { postStart: { exec: { command: ["true"] } } },
  };
  const p = pod([container]);
  const sb = await h.sandbox(p);
  const failure = await startContainer(h.deps, signal(), {
    sandboxId: sb.id,
    sandboxConfig: sb.config,
    pod: p,
    container,
    podStatus: emptyStatus(),
    pullSecrets: [],
  });
  assert.equal(failure?.reason, "PostStartHookError");
  assert.match(failure?.message ?? "", /not supported yet/);
});

Deno.test("killContainer runs preStop before StopContainer and subtracts its time", async () => {
  await using h = await harness();
  const p = pod([{
    name: "a",
    image: IMAGE,
    lifecycle: { preStop: { exec: { command: ["drain"] } } },
  }]);
  const ids = await runAll(h, p);
  let release = () => {};
  const stopsAtExec: number[] = [];
  h.fake.service.execHandler = () => {
    stopsAtExec.push(h.stops.length);
    return new Promise((r) => release = () => r({ stdout: "" }));
  };
  const kill = killContainer(withHooks(h), signal(), {
    pod: p,
    containerId: ids.get("a")!,
    containerName: "a",
    message: "",
    reason: "",
  });
  await until(() => stopsAtExec.length === 1);
  h.clock.step(7_500);
  release();
  await kill;
  assert.deepEqual(stopsAtExec, [0]);
  assert.deepEqual(h.stops, [["a", 23]]);
  assert.equal(h.events.some((e) => e.reason === "FailedPreStopHook"), false);
});

Deno.test("killContainer waits for a sleep preStop and keeps at least 2 s after it", async () => {
  await using h = await harness();
  const p = pod([
    { name: "a", image: IMAGE, lifecycle: { preStop: { sleep: { seconds: 5 } } } },
    { name: "b", image: IMAGE, lifecycle: { preStop: { sleep: { seconds: 100 } } } },
  ], { terminationGracePeriodSeconds: 10 });
  const ids = await runAll(h, p);
  const kill = (name: string) =>
    killContainer(withHooks(h), signal(), {
      pod: p,
      containerId: ids.get(name)!,
      containerName: name,
      message: "",
      reason: "",
    });
  const a = kill("a");
  await until(() => h.clock.waiters === 2);
  assert.deepEqual(h.stops, []);
  h.clock.step(5_000);
  await a;
  assert.deepEqual(h.stops, [["a", 5]]);

  // A hook longer than the grace period is given up at its end; the stop still gets 2 s.
  const b = kill("b");
  await until(() => h.clock.waiters === 2);
  h.clock.step(10_000);
  await b;
  assert.deepEqual(h.stops, [["a", 5], ["b", 2]]);
  assert.equal(h.clock.waiters, 0);
});

Deno.test("killContainer records FailedPreStopHook and still stops the container", async () => {
  await using h = await harness();
  h.fake.service.execHandler = () => ({ stderr: "nope", exitCode: 1 });
  const p = pod([{
    name: "a",
    image: IMAGE,
    lifecycle: { preStop: { exec: { command: ["x"] } } },
  }]);
  const ids = await runAll(h, p);
  await killContainer(withHooks(h), signal(), {
    pod: p,
    containerId: ids.get("a")!,
    containerName: "a",
    message: "",
    reason: "",
  });
  assert.deepEqual(h.events.slice(-2).map((e) => [e.type, e.reason, e.message]), [
    ["Normal", "Killing", "Stopping container a"],
    ["Warning", "FailedPreStopHook", "PreStopHook failed"],
  ]);
  assert.deepEqual(h.stops, [["a", 30]]);
});

Deno.test("killContainer runs an orphan's preStop from its annotations", async () => {
  await using h = await harness();
  const cmds: string[] = [];
  h.fake.service.execHandler = (_, cmd) => {
    cmds.push(cmd.join(" "));
    return {};
  };
  const p = pod([{
    name: "a",
    image: IMAGE,
    lifecycle: { preStop: { exec: { command: ["nginx", "-s", "quit"] } } },
  }]);
  const ids = await runAll(h, p);
  await killContainer(withHooks(h), signal(), {
    pod: undefined,
    containerId: ids.get("a")!,
    containerName: "a",
    message: "",
    reason: "Unknown",
  });
  assert.deepEqual(cmds, ["nginx -s quit"]);
  assert.deepEqual(h.stops, [["a", 30]]);
});

// ---- Image volumes ---------------------------------------------------------------------------

/** Deps whose mounts come from a real KubeletMounts over `volumes`; counters for the metrics. */
function imageVolumeDeps(h: Harness, volumes: Map<string, MountedVolume>) {
  const counts = { requested: 0, succeeded: 0, failed: 0 };
  const deps: ContainerDeps = {
    ...h.deps,
    kubeletMounts: new KubeletMounts({
      podsDirectory: join(h.dir, "pods"),
      podVolumes: () => volumes,
      logger: createLogger({ write: () => {} }),
    }),
    imageVolumeMetrics: {
      imageVolumeRequestedTotal: { inc: (_l, by = 1) => void (counts.requested += by) },
      imageVolumeMountedSucceedTotal: { inc: () => void counts.succeeded++ },
      imageVolumeMountedErrorsTotal: { inc: () => void counts.failed++ },
    },
  };
  return { deps, counts };
}

const DATA_IMAGE = "registry.local/data:1";

function imageVolumePod(container: V1Container, pullPolicy = "Always"): V1Pod {
  return pod([container], {
    volumes: [
      { name: "data", image: { reference: DATA_IMAGE, pullPolicy } },
      { name: "scratch", emptyDir: {} },
    ],
  });
}

Deno.test("startContainer pulls the image volumes it mounts and passes them to the runtime as image mounts", async () => {
  await using h = await harness();
  h.fake.service.images.add(DATA_IMAGE);
  const { deps, counts } = imageVolumeDeps(h, new Map([["data", IMAGE_VOLUME]]));
  const container: V1Container = {
    name: "main",
    image: IMAGE,
    volumeMounts: [
      { name: "data", mountPath: "/volume" },
      { name: "data", mountPath: "/etc-only", subPath: "etc" },
    ],
  };
  const p = imageVolumePod(container);
  const sb = await h.sandbox(p);
  const failure = await startContainer(deps, signal(), {
    sandboxId: sb.id,
    sandboxConfig: sb.config,
    pod: p,
    container,
    podStatus: emptyStatus(),
    pullSecrets: [],
  });
  assert.equal(failure, undefined);
  // pullPolicy Always pulls although the image is on the node; the container image is not pulled.
  assert.deepEqual(h.fake.service.images.pulls.map((x) => x.image), [DATA_IMAGE]);
  const imageId = h.fake.service.images.get(DATA_IMAGE)!.id;
  const [c] = [...h.fake.service.containers.values()];
  const mounts = c!.config.mounts.filter((m) => m.image !== undefined);
  assert.deepEqual(
    mounts.map((m) => [m.containerPath, m.hostPath, m.readonly, m.image?.image, m.imageSubPath]),
    [["/volume", "", true, imageId, ""], ["/etc-only", "", true, imageId, "etc"]],
  );
  assert.equal(mounts[0]?.image?.userSpecifiedImage, DATA_IMAGE);
  // The volume's events are about the pod, the container's about the container.
  assert.deepEqual(h.events.map((e) => [e.reason, e.ref.fieldPath ?? ""]), [
    ["Pulling", ""],
    ["Pulled", ""],
    ["Pulled", "spec.containers{main}"],
    ["Created", "spec.containers{main}"],
    ["Started", "spec.containers{main}"],
  ]);
  assert.deepEqual(counts, { requested: 1, succeeded: 2, failed: 0 });

  // Pulls made once for the sync are used as given: nothing is pulled again.
  const second: V1Container = { ...container, name: "second" };
  const p2 = pod([container, second], p.spec);
  await startContainer(deps, signal(), {
    sandboxId: sb.id,
    sandboxConfig: sb.config,
    pod: p2,
    container: second,
    podStatus: emptyStatus(),
    pullSecrets: [],
    imageVolumePulls: new Map([["data", {
      spec: api.ImageSpec.create({ image: imageId, userSpecifiedImage: DATA_IMAGE }),
    }]]),
  });
  assert.equal(h.fake.service.images.pulls.length, 1);
});

Deno.test("startContainer fails with the image volume's pull error before the container's image", async () => {
  await using h = await harness();
  h.fake.service.images.failPull(DATA_IMAGE, GrpcCode.NOT_FOUND, "no such image");
  const { deps, counts } = imageVolumeDeps(h, new Map([["data", IMAGE_VOLUME]]));
  const container: V1Container = {
    name: "main",
    image: "nginx:1",
    imagePullPolicy: "Always",
    volumeMounts: [{ name: "data", mountPath: "/volume" }],
  };
  const p = imageVolumePod(container);
  const sb = await h.sandbox(p);
  const failure = await startContainer(deps, signal(), {
    sandboxId: sb.id,
    sandboxConfig: sb.config,
    pod: p,
    container,
    podStatus: emptyStatus(),
    pullSecrets: [],
  });
  assert.deepEqual(failure, {
    reason: "ErrImagePull",
    message: "rpc error: code = NotFound desc = no such image",
  });
  assert.deepEqual(h.fake.service.images.pulls.map((x) => x.image), [DATA_IMAGE]);
  assert.equal(h.fake.service.containers.size, 0);
  assert.deepEqual(h.events.map((e) => [e.reason, e.ref.fieldPath ?? "", e.message]), [
    ["Pulling", "", `Pulling image "${DATA_IMAGE}"`],
    [
      "Failed",
      "",
      `Failed to pull image "${DATA_IMAGE}": rpc error: code = NotFound desc = no such image`,
    ],
    ["Failed", "spec.containers{main}", "Error: ErrImagePull"],
  ]);
  assert.deepEqual(counts, { requested: 0, succeeded: 0, failed: 0 }, "not started");
});

Deno.test("startContainer reports a runtime that cannot mount images with the runtime's own error", async () => {
  await using h = await harness();
  h.fake.service.images.add(DATA_IMAGE);
  const { deps, counts } = imageVolumeDeps(h, new Map([["data", IMAGE_VOLUME]]));
  const container: V1Container = {
    name: "main",
    image: IMAGE,
    volumeMounts: [{ name: "data", mountPath: "/volume" }],
  };
  const p = imageVolumePod(container, "IfNotPresent");
  const sb = await h.sandbox(p);
  const start = () =>
    startContainer(deps, signal(), {
      sandboxId: sb.id,
      sandboxConfig: sb.config,
      pod: p,
      container,
      podStatus: emptyStatus(),
      pullSecrets: [],
    });
  // containerd 1.6 drops Mount.image and fails on the empty host path: CreateContainerError.
  const old =
    'failed to generate container "0123" spec: failed to generate spec: failed to mkdir ' +
    '"": mkdir : no such file or directory';
  h.fake.injectError("CreateContainer", GrpcCode.UNKNOWN, old);
  assert.deepEqual(await start(), { reason: "CreateContainerError", message: old });
  assert.equal(h.events.at(-1)?.message, `Error: ${old}`);
  assert.deepEqual(counts, { requested: 1, succeeded: 1, failed: 0 });
  // A runtime that knows image volumes but cannot mount this one says ImageVolumeMountFailed.
  const failed = "ImageVolumeMountFailed: failed to mount image: snapshot not found";
  h.fake.injectError("CreateContainer", GrpcCode.UNKNOWN, failed);
  assert.deepEqual(await start(), { reason: "CreateContainerError", message: failed });
  assert.deepEqual(counts, { requested: 2, succeeded: 1, failed: 1 });
});

/** The container's Linux resources under `linux` options over the harness's. */
async function resourcesOf(
  h: Harness,
  p: V1Pod,
  linux: Partial<ContainerDeps["linux"]>,
): Promise<api.LinuxContainerResources | undefined> {
  const deps = { ...h.deps, linux: { ...h.deps.linux, ...linux } };
  const container = p.spec!.containers[0]!;
  const config = await generateContainerConfig(deps, {
    pod: p,
    container,
    restartCount: 0,
    imageRef: "x",
  });
  return config.linux?.resources;
}

Deno.test("generateContainerConfig limits every hugepage size of the node", async () => {
  await using h = await harness();
  const none: V1Container = { name: "main", image: IMAGE };
  assert.deepEqual((await resourcesOf(h, pod([none]), {}))?.hugepageLimits, [
    { pageSize: "2MB", limit: 0n },
    { pageSize: "1GB", limit: 0n },
  ]);
  const huge: V1Container = {
    name: "main",
    image: IMAGE,
    resources: {
      requests: { "hugepages-2Mi": "4Mi", memory: "8Mi" },
      limits: { "hugepages-2Mi": "4Mi", memory: "8Mi" },
    },
  };
  assert.deepEqual((await resourcesOf(h, pod([huge]), {}))?.hugepageLimits, [
    { pageSize: "2MB", limit: 4n * 2n ** 20n },
    { pageSize: "1GB", limit: 0n },
  ]);
  // A size the node does not have is not limited, as upstream.
  const host = fakeHost({ hugePageSizes: ["1GB"] });
  assert.deepEqual((await resourcesOf(h, pod([huge]), { host }))?.hugepageLimits, [
    { pageSize: "1GB", limit: 0n },
  ]);
  assert.deepEqual(
    (await resourcesOf(h, pod([none]), { host: fakeHost({ hugePageSizes: [] }) }))
      ?.hugepageLimits,
    [],
  );
});

Deno.test("generateContainerConfig sets no swap as upstream on cgroup v1", async () => {
  await using h = await harness();
  const limited: V1Container = {
    name: "main",
    image: IMAGE,
    resources: { requests: { memory: "32Mi" }, limits: { memory: "64Mi" } },
  };
  // memory+swap equal to the memory limit: nothing above the limit may be swapped.
  const r = await resourcesOf(h, pod([limited]), { swapBehavior: "LimitedSwap" });
  assert.equal(r?.memorySwapLimitInBytes, 64n * 2n ** 20n);
  assert.deepEqual(r?.unified, {}, "v1 has no memory.swap.max");
  const none: V1Container = { name: "main", image: IMAGE };
  assert.equal((await resourcesOf(h, pod([none]), {}))?.memorySwapLimitInBytes, 0n);
  // Without swap accounting (no memory.memsw.* files) upstream sets nothing.
  const host = fakeHost({ swapControllerAvailable: false });
  assert.equal((await resourcesOf(h, pod([limited]), { host }))?.memorySwapLimitInBytes, 0n);
});

Deno.test("generateContainerConfig sets memory.swap.max as upstream on cgroup v2", async () => {
  await using h = await harness();
  const v2 = { cgroupV2: true, singleProcessOOMKill: false };
  const burstable: V1Container = {
    name: "main",
    image: IMAGE,
    resources: { requests: { memory: "1Gi" }, limits: { memory: "2Gi" } },
  };
  const noSwap = await resourcesOf(h, pod([burstable]), v2);
  assert.deepEqual(noSwap?.unified, { "memory.oom.group": "1", "memory.swap.max": "0" });
  assert.equal(noSwap?.memorySwapLimitInBytes, 0n);

  // LimitedSwap: request / node memory × node swap = 1 GiB / 8 GiB × 4 GiB.
  const limited = { ...v2, swapBehavior: "LimitedSwap" };
  assert.deepEqual((await resourcesOf(h, pod([burstable]), limited))?.unified, {
    "memory.oom.group": "1",
    "memory.swap.max": String(512 * 2 ** 20),
  });
  const cases: Array<[string, V1Pod]> = [
    ["BestEffort", pod([{ name: "main", image: IMAGE }])],
    [
      "Guaranteed",
      pod([{
        name: "main",
        image: IMAGE,
        resources: {
          requests: { cpu: "1", memory: "1Gi" },
          limits: { cpu: "1", memory: "1Gi" },
        },
      }]),
    ],
    [
      "request equal to limit",
      pod([{
        name: "main",
        image: IMAGE,
        resources: { requests: { memory: "1Gi" }, limits: { memory: "1Gi", cpu: "1" } },
      }]),
    ],
    [
      "no memory request",
      pod([{ name: "main", image: IMAGE, resources: { requests: { cpu: "1" } } }]),
    ],
    ["critical", pod([burstable], { priority: 2_000_000_000 })],
  ];
  for (const [what, p] of cases) {
    assert.equal(
      (await resourcesOf(h, p, limited))?.unified["memory.swap.max"],
      "0",
      `${what} gets no swap`,
    );
  }
  // A request above the node's memory cannot be given a share: no swap.
  const big: V1Container = {
    name: "main",
    image: IMAGE,
    resources: { requests: { memory: "16Gi" }, limits: { memory: "32Gi" } },
  };
  assert.equal((await resourcesOf(h, pod([big]), limited))?.unified["memory.swap.max"], "0");
  // Without swap accounting upstream leaves swap alone.
  const host = fakeHost({ swapControllerAvailable: false });
  assert.deepEqual((await resourcesOf(h, pod([burstable]), { ...limited, host }))?.unified, {
    "memory.oom.group": "1",
  });
});

Deno.test("generateContainerConfig relabels mounts only where SELinux is enabled", async () => {
  await using h = await harness();
  const container: V1Container = { name: "main", image: IMAGE };
  const mounts = [
    api.Mount.create({ containerPath: "/data", hostPath: "/vol/data", selinuxRelabel: true }),
    api.Mount.create({ containerPath: "/host", hostPath: "/srv", selinuxRelabel: false }),
    api.Mount.create({ containerPath: "/etc/hosts", hostPath: "/p/hosts", selinuxRelabel: true }),
  ];
  const relabels = async (selinux: boolean) => {
    const deps = {
      ...h.deps,
      kubeletMounts: fakeMounter(mounts),
      linux: { ...h.deps.linux, host: fakeHost({ selinuxEnabled: selinux }) },
    };
    const config = await generateContainerConfig(deps, {
      pod: pod([container]),
      container,
      restartCount: 0,
      imageRef: "x",
    });
    return config.mounts.map((m) => [m.containerPath, m.selinuxRelabel]);
  };
  assert.deepEqual(await relabels(false), [
    ["/data", false],
    ["/host", false],
    ["/etc/hosts", false],
    ["/dev/termination-log", false],
  ]);
  assert.deepEqual(await relabels(true), [
    ["/data", true],
    ["/host", false],
    ["/etc/hosts", true],
    ["/dev/termination-log", true],
  ]);
});

Deno.test("generateContainerConfig bounds a container without its own limits by the pod-level ones", async () => {
  await using h = await harness();
  const podLevel = {
    resources: {
      requests: { cpu: "250m", memory: "32Mi", "hugepages-2Mi": "2Mi" },
      limits: { cpu: "500m", memory: "64Mi", "hugepages-2Mi": "2Mi" },
    },
  };
  const bare: V1Container = { name: "main", image: IMAGE };
  const r = await resourcesOf(h, pod([bare], podLevel), {});
  assert.equal(r?.cpuQuota, 50_000n, "upstream getCPULimit: the pod's 500m");
  assert.equal(r?.memoryLimitInBytes, 64n * 2n ** 20n, "upstream getMemoryLimit: the pod's");
  assert.deepEqual(r?.hugepageLimits, [
    { pageSize: "2MB", limit: 2n * 2n ** 20n },
    { pageSize: "1GB", limit: 0n },
  ]);
  // The container's own limits take precedence.
  const own: V1Container = {
    name: "main",
    image: IMAGE,
    resources: {
      requests: { cpu: "100m", memory: "16Mi" },
      limits: { cpu: "200m", memory: "16Mi", "hugepages-2Mi": "4Mi" },
    },
  };
  const o = await resourcesOf(h, pod([own], podLevel), {});
  assert.equal(o?.cpuQuota, 20_000n);
  assert.equal(o?.memoryLimitInBytes, 16n * 2n ** 20n);
  assert.equal(o?.hugepageLimits?.[0]?.limit, 4n * 2n ** 20n);
});

Deno.test("generateContainerConfig passes a mapped block volume as a device, read-only for a read-only claim", async () => {
  await using h = await harness();
  const container: V1Container = {
    name: "main",
    image: IMAGE,
    volumeDevices: [
      { name: "disk", devicePath: "/dev/xvda" },
      { name: "ro", devicePath: "/dev/xvdb" },
    ],
  };
  const link = (n: string) => `/var/lib/kubelet/pods/uid/volumeDevices/kubernetes.io~csi/${n}`;
  const podVolumes = () =>
    new Map([
      ["disk", { hostPath: link("pv-1"), readOnly: false, selinuxRelabel: false }],
      ["ro", { hostPath: link("pv-2"), readOnly: true, selinuxRelabel: false }],
    ]);
  const config = await generateContainerConfig(
    { ...h.deps, podVolumes },
    { pod: pod([container]), container, restartCount: 0, imageRef: "x" },
  );
  assert.deepEqual(config.devices, [
    { containerPath: "/dev/xvda", hostPath: link("pv-1"), permissions: "mrw" },
    { containerPath: "/dev/xvdb", hostPath: link("pv-2"), permissions: "r" },
  ]);
});

Deno.test("generateContainerConfig appends the DRA claims' CDI devices to the device plugins', once each", async () => {
  await using h = await harness();
  const container: V1Container = {
    name: "main",
    image: IMAGE,
    resources: { claims: [{ name: "gpu" }] },
  };
  const seen: string[] = [];
  const config = await generateContainerConfig(
    {
      ...h.deps,
      devices: () =>
        Promise.resolve({
          envs: [],
          mounts: [],
          devices: [],
          annotations: [],
          cdiDevices: ["vendor.com/gpu=0"],
        }),
      draCdiDevices: (_pod, c) => {
        seen.push(c.name);
        return ["test-driver.cdi.k8s.io/test=claim-1-gpu", "vendor.com/gpu=0"];
      },
    },
    { pod: pod([container]), container, restartCount: 0, imageRef: "x" },
  );
  assert.deepEqual(seen, ["main"]);
  assert.deepEqual(config.CDIDevices, [
    { name: "vendor.com/gpu=0" },
    { name: "test-driver.cdi.k8s.io/test=claim-1-gpu" },
  ]);
  // A claim that is not prepared fails the container's config.
  await assert.rejects(
    generateContainerConfig(
      {
        ...h.deps,
        draCdiDevices: () => {
          throw new Error("unable to get claim info for ResourceClaim gpu-claim");
        },
      },
      { pod: pod([container]), container, restartCount: 0, imageRef: "x" },
    ),
    (e: unknown) =>
      e instanceof CreateContainerConfigError && /gpu-claim/.test((e as Error).message),
  );
});
