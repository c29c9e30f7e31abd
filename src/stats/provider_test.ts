import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Pod } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import type { Sample } from "./cadvisor.ts";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import type { PodStatus } from "../container/pod_cache.ts";
import { StatsProvider, type StatsProviderOptions } from "./provider.ts";
import { decodeSummary } from "../apis/stats_types.ts";
import { MetricsNotSupportedError, type VolumeUsage } from "../volume/plugin.ts";

const T0 = Date.UTC(2026, 11, 3, 8, 0, 0);
const UID = "uid-1";

function sample(cpuNs: bigint, rate: number | undefined, ws: number, extra: Partial<Sample> = {}) {
  return {
    time: T0,
    usageNanoCores: rate,
    cgroup: {
      cpu: { usageCoreNanoSeconds: cpuNs },
      memory: { usageBytes: ws + 100, workingSetBytes: ws, rssBytes: ws / 2, pageFaults: 7 },
      pids: { current: 2 },
      missing: [],
    },
    ...extra,
  } satisfies Sample;
}

async function world() {
  const root = await Deno.makeTempDir({ prefix: "stats_provider_test_" });
  const logs = join(root, "logs");
  const pod: V1Pod = {
    metadata: { name: "web", namespace: "shop", uid: UID },
    spec: {
      containers: [{ name: "main" }, { name: "side" }],
      volumes: [
        { name: "cache", emptyDir: {} },
        { name: "host", hostPath: { path: "/srv" } },
      ],
    },
  };
  // 3 files of 4 KiB in the emptyDir; 1 log file.
  const cache = join(root, "pods", UID, "volumes", "kubernetes.io~empty-dir", "cache");
  await Deno.mkdir(cache, { recursive: true });
  for (const f of ["a", "b", "c"]) await Deno.writeFile(join(cache, f), new Uint8Array(4096));
  const logDir = join(logs, `shop_web_${UID}`, "main");
  await Deno.mkdir(logDir, { recursive: true });
  await Deno.writeFile(join(logDir, "0.log"), new Uint8Array(8192));

  const status: PodStatus = {
    id: UID,
    name: "web",
    namespace: "shop",
    ips: ["10.0.0.5"],
    timestamp: T0,
    sandboxStatuses: [api.PodSandboxStatus.create({
      id: "sb",
      state: api.PodSandboxState.SANDBOX_READY,
      createdAt: BigInt(T0 - 60_000) * 1_000_000n,
    })],
    containerStatuses: [
      api.ContainerStatus.create({
        id: "c-main",
        metadata: { name: "main", attempt: 1 },
        state: api.ContainerState.CONTAINER_RUNNING,
        startedAt: BigInt(T0 - 30_000) * 1_000_000n,
      }),
      api.ContainerStatus.create({
        id: "c-side",
        metadata: { name: "side", attempt: 0 },
        state: api.ContainerState.CONTAINER_RUNNING,
        startedAt: BigInt(T0 - 50_000) * 1_000_000n,
      }),
      // An older, exited instance of main: not reported.
      api.ContainerStatus.create({
        id: "c-main-old",
        metadata: { name: "main", attempt: 0 },
        state: api.ContainerState.CONTAINER_EXITED,
      }),
    ],
  };
  const samples = new Map<string, Sample>([
    [
      "sb",
      sample(10n, 1, 1000, {
        network: [
          { name: "eth0", rxBytes: 500, rxErrors: 0, txBytes: 300, txErrors: 1 },
          { name: "net1", rxBytes: 5, rxErrors: 0, txBytes: 3, txErrors: 0 },
        ],
      }),
    ],
    ["c-main", sample(2_000_000_000n, 250_000_000, 50_000_000)],
    ["c-side", sample(1_000_000_000n, 100_000_000, 20_000_000)],
  ]);
  const node = sample(9_000_000_000n, 1_500_000_000, 2 * 2 ** 30);
  const options: StatsProviderOptions = {
    nodeName: "node-1",
    cadvisor: { node: () => node, latest: (id) => samples.get(id) },
    pods: () => [{ pod, status }],
    runtime: {
      listContainerStats: () =>
        Promise.resolve([api.ContainerStats.create({
          attributes: { id: "c-main", labels: {}, annotations: {} },
          writableLayer: {
            timestamp: BigInt(T0) * 1_000_000n,
            usedBytes: { value: 12_288n },
            inodesUsed: { value: 3n },
          },
        })]),
    },
    imageService: {
      imageFsInfo: () =>
        Promise.resolve(api.ImageFsInfoResponse.create({
          imageFilesystems: [{
            timestamp: BigInt(T0) * 1_000_000n,
            fsId: { mountpoint: root },
            usedBytes: { value: 1_000_000n },
            inodesUsed: { value: 42n },
          }],
        })),
    },
    rootDirectory: root,
    podLogsDirectory: logs,
    memoryCapacityBytes: 8 * 2 ** 30,
    clock: new FakeClock(T0),
    logger: createLogger({ write: () => {} }),
    systemContainers: [
      { name: "kubelet", id: "c-side", startTime: T0 - 3_600_000 },
      { name: "misc", id: "not-sampled", startTime: T0 },
    ],
  };
  const provider = new StatsProvider(options);
  return {
    root,
    provider,
    options,
    pod,
    status,
    samples,
    node,
    [Symbol.asyncDispose]: () => Deno.remove(root, { recursive: true }),
  };
}

Deno.test("StatsProvider.summary has upstream's shape and the sampled values", async () => {
  await using w = await world();
  const s = decodeSummary(JSON.parse(JSON.stringify(await w.provider.summary())));
  const { node } = s;
  assert.equal(node.nodeName, "node-1");
  assert.equal(node.cpu?.usageNanoCores, 1_500_000_000);
  assert.equal(node.memory?.workingSetBytes, 2 * 2 ** 30);
  assert.equal(node.memory?.availableBytes, 6 * 2 ** 30, "capacity minus working set");
  assert.ok((node.fs?.capacityBytes ?? 0) > 0, "the root dir's filesystem");
  assert.equal(node.runtime?.imageFs?.usedBytes, 1_000_000);
  assert.equal(node.runtime?.imageFs?.inodesUsed, 42);
  assert.ok((node.rlimit?.maxpid ?? 0) > 0);
  // System containers with a sample only.
  assert.deepEqual(node.systemContainers?.map((c) => [c.name, c.startTime]), [
    ["kubelet", "2026-12-03T07:00:00Z"],
  ]);
  assert.equal(node.systemContainers?.[0]?.memory?.workingSetBytes, 20_000_000);

  const [pod] = s.pods;
  assert.deepEqual(pod?.podRef, { name: "web", namespace: "shop", uid: UID });
  assert.equal(pod?.startTime, "2026-12-03T07:59:00Z");
  assert.deepEqual(pod?.containers.map((c) => c.name), ["main", "side"]);
  const main = pod!.containers[0]!;
  assert.equal(main.startTime, "2026-12-03T07:59:30Z");
  assert.equal(main.cpu?.usageCoreNanoSeconds, 2_000_000_000);
  assert.equal(main.cpu?.usageNanoCores, 250_000_000);
  assert.equal(main.memory?.workingSetBytes, 50_000_000);
  assert.equal(main.memory?.availableBytes, undefined, "no limit, no availableBytes");
  assert.equal(main.rootfs?.usedBytes, 12_288);
  assert.equal(main.rootfs?.inodesUsed, 3);
  assert.ok((main.rootfs?.capacityBytes ?? 0) > 0, "the image filesystem's size");
  assert.ok((main.logs?.usedBytes ?? 0) >= 8192);
  assert.equal(main.logs?.inodesUsed, 2, "the container's log dir and its file");

  // The pod: sandbox and containers added up, its network from the sandbox, eth0 inline.
  assert.equal(pod?.cpu?.usageCoreNanoSeconds, 3_000_000_010);
  assert.equal(pod?.cpu?.usageNanoCores, 350_000_001);
  assert.equal(pod?.memory?.workingSetBytes, 70_001_000);
  assert.equal(pod?.process_stats?.process_count, 6);
  assert.equal(pod?.network?.name, "eth0");
  assert.equal(pod?.network?.rxBytes, 500);
  assert.deepEqual(pod?.network?.interfaces?.map((i) => i.name), ["eth0", "net1"]);
  // The emptyDir is measured, the hostPath is not.
  assert.deepEqual(pod?.volume?.map((v) => v.name), ["cache"]);
  const cache = pod!.volume![0]!;
  assert.ok((cache.usedBytes ?? 0) >= 3 * 4096);
  assert.equal(cache.inodesUsed, 4);
  // Ephemeral storage: writable layers, logs and local ephemeral volumes.
  assert.equal(
    pod?.["ephemeral-storage"]?.usedBytes,
    12_288 + (main.logs?.usedBytes ?? 0) + (cache.usedBytes ?? 0),
  );
});

Deno.test("StatsProvider.summary without writable layers does not ask the runtime for them", async () => {
  await using w = await world();
  let asked = 0;
  const provider = new StatsProvider({
    ...w.options,
    runtime: {
      listContainerStats: (...args) => {
        asked++;
        return w.options.runtime.listContainerStats(...args);
      },
    },
  });
  const s = decodeSummary(
    JSON.parse(JSON.stringify(await provider.summary(undefined, { writableLayers: false }))),
  );
  assert.equal(asked, 0);
  const main = s.pods[0]!.containers[0]!;
  assert.equal(main.rootfs, undefined);
  assert.ok((main.logs?.usedBytes ?? 0) >= 8192, "logs still measured");
  assert.equal(s.node.runtime?.imageFs?.usedBytes, 1_000_000, "the node's figures as always");
  await provider.summary();
  assert.equal(asked, 1, "the default asks");
});

Deno.test("StatsProvider.cpuAndMemory has CPU and memory only", async () => {
  await using w = await world();
  const s = decodeSummary(JSON.parse(JSON.stringify(w.provider.cpuAndMemory())));
  assert.equal(s.node.fs, undefined);
  assert.equal(s.node.cpu?.usageCoreNanoSeconds, 9_000_000_000);
  const pod = s.pods[0]!;
  assert.equal(pod.volume, undefined);
  assert.equal(pod["ephemeral-storage"], undefined);
  assert.equal(pod.containers[0]?.rootfs, undefined);
  assert.equal(pod.memory?.workingSetBytes, 70_001_000);
});

Deno.test("StatsProvider keeps reporting when the runtime's stats calls fail", async () => {
  await using w = await world();
  const failing = new StatsProvider({
    nodeName: "node-1",
    cadvisor: { node: () => undefined, latest: () => undefined },
    pods: () => [],
    runtime: { listContainerStats: () => Promise.reject(new Error("unavailable")) },
    imageService: { imageFsInfo: () => Promise.reject(new Error("unavailable")) },
    rootDirectory: w.root,
    podLogsDirectory: w.root,
    memoryCapacityBytes: 1,
    clock: new FakeClock(T0),
    logger: createLogger({ write: () => {} }),
  });
  const s = decodeSummary(JSON.parse(JSON.stringify(await failing.summary())));
  assert.equal(s.node.runtime, undefined);
  assert.equal(s.node.cpu, undefined);
  assert.ok((s.node.fs?.capacityBytes ?? 0) > 0);
});

Deno.test("StatsProvider.imageFsCapacity is the image filesystem's size and free space", async () => {
  await using w = await world();
  const fs = await w.provider.imageFsCapacity();
  assert.ok(fs !== undefined && fs.capacityBytes > 0 && fs.availableBytes <= fs.capacityBytes);
});

Deno.test("StatsProvider reports running containers only, and pods that have one", async () => {
  await using w = await world();
  const T = BigInt(T0) * 1_000_000n;
  const exited = (id: string, name: string) =>
    api.ContainerStatus.create({
      id,
      metadata: { name, attempt: 0 },
      state: api.ContainerState.CONTAINER_EXITED,
      createdAt: T,
      startedAt: T,
    });
  const completed: PodStatus = {
    id: "uid-done",
    name: "done",
    namespace: "shop",
    ips: [],
    timestamp: T0,
    sandboxStatuses: [],
    containerStatuses: [exited("c-done", "main")],
  };
  // The world's pod with an init container that has exited, and a pod whose only one has.
  const provider = new StatsProvider({
    ...w.options,
    pods: () => [
      {
        pod: w.pod,
        status: {
          ...w.status,
          containerStatuses: [...w.status.containerStatuses, exited("c-init", "init")],
        },
      },
      {
        pod: { metadata: { name: "done", namespace: "shop", uid: "uid-done" } },
        status: completed,
      },
    ],
  });
  for (const s of [await provider.summary(), provider.cpuAndMemory()]) {
    assert.deepEqual(s.pods.map((p) => p.podRef.name), ["web"]);
    assert.deepEqual(s.pods[0]?.containers.map((c) => c.name), ["main", "side"]);
  }
});

Deno.test("StatsProvider reports swap and IO from the samples' details", async () => {
  await using w = await world();
  const withDetail = (s: Sample, swap: number): Sample => ({
    ...s,
    cgroup: {
      ...s.cgroup,
      detail: {
        cpu: {},
        memory: { swapBytes: swap },
        blkio: [],
        spec: { memorySwapLimit: 1000 },
        psi: {
          io: {
            some: { avg10: 1, avg60: 2, avg300: 3, total: 4 },
            full: { avg10: 0, avg60: 0, avg300: 0, total: 0 },
          },
        },
      },
    },
  });
  const provider = new StatsProvider({
    ...w.options,
    swapCapacityBytes: 2000,
    cadvisor: {
      node: () => withDetail(w.node, 5),
      latest: (id) => {
        const s = w.samples.get(id);
        return s && withDetail(s, id === "c-main" ? 100 : 1);
      },
    },
  });
  const s = decodeSummary(JSON.parse(JSON.stringify(await provider.summary())));
  assert.equal(s.node.swap?.swapUsageBytes, 5);
  // The node's swap limit is the machine's swap (cAdvisor's root spec), not a cgroup file's.
  assert.equal(s.node.swap?.swapAvailableBytes, 1995);
  assert.deepEqual(s.node.io?.psi?.some, { avg10: 1, avg60: 2, avg300: 3, total: 4 });
  // No CPU or memory pressure files (cgroup v1): upstream writes cAdvisor's zeros.
  const zero = { total: 0, avg10: 0, avg60: 0, avg300: 0 };
  assert.deepEqual(s.node.cpu?.psi, { full: zero, some: zero });
  assert.deepEqual(s.pods[0]?.memory?.psi, { full: zero, some: zero });
  const main = s.pods[0]!.containers[0]!;
  assert.deepEqual(main.swap, {
    time: main.swap?.time,
    swapUsageBytes: 100,
    swapAvailableBytes: 900,
  });
  assert.equal(main.io?.psi?.full.total, 0);
  // No pod cgroup: the containers' swap added up, IO with its time only.
  assert.equal(s.pods[0]?.swap?.swapUsageBytes, 101);
  assert.equal(s.pods[0]?.swap?.swapAvailableBytes, 1899);
  assert.equal(s.pods[0]?.io?.psi, undefined);
  const cm = provider.cpuAndMemory();
  assert.equal(cm.node.swap?.swapUsageBytes, 5);
  assert.equal(cm.pods[0]?.containers[0]?.swap?.swapUsageBytes, 100);
  assert.equal(cm.pods[0]?.containers[0]?.io, undefined, "IO is not part of CPU and memory");
});

Deno.test("StatsProvider reports the volumes that measure themselves with their claim, at most once a period", async () => {
  await using w = await world();
  const pod: V1Pod = {
    ...w.pod,
    spec: {
      ...w.pod.spec!,
      volumes: [
        { name: "cache", emptyDir: {} },
        { name: "data", persistentVolumeClaim: { claimName: "db" } },
        { name: "scratch", ephemeral: { volumeClaimTemplate: { spec: {} } } },
        { name: "inline", csi: { driver: "d.example.com" } },
        { name: "quiet", csi: { driver: "other.example.com" } },
      ],
    },
  };
  const asked: string[] = [];
  const clock = new FakeClock(T0);
  const usage = (used: number) => ({
    time: clock.now(),
    capacityBytes: 1000,
    availableBytes: 1000 - used,
    usedBytes: used,
    inodes: 100,
    inodesFree: 90,
    inodesUsed: 10,
  });
  const events: string[] = [];
  const provider = new StatsProvider({
    ...w.options,
    clock,
    volumeStatsAggPeriodMs: 60_000,
    pods: () => [{ pod, status: w.status }],
    recorder: {
      event: (_ref, type, reason, message) => events.push(`${type} ${reason} ${message}`),
    },
    volumesWithMetrics: (uid) => {
      assert.equal(uid, UID);
      const v = (name: string, get: () => Promise<VolumeUsage>) => ({
        name,
        getMetrics: () => {
          asked.push(name);
          return get();
        },
      });
      return [
        v("data", () => Promise.resolve(usage(asked.length * 100))),
        v(
          "scratch",
          () => Promise.resolve({ ...usage(5), abnormal: true, message: "disk failing" }),
        ),
        v("inline", () => Promise.resolve(usage(7))),
        v("quiet", () => Promise.reject(new MetricsNotSupportedError("metrics are not supported"))),
      ];
    },
  });
  const volumes = (await provider.summary()).pods[0]?.volume ?? [];
  // The du-measured emptyDir first, then the others in spec order; a volume that cannot tell
  // is left out.
  assert.deepEqual(volumes.map((v) => [v.name, v.pvcRef?.name]), [
    ["cache", undefined],
    ["data", "db"],
    ["scratch", "web-scratch"],
    ["inline", undefined],
  ]);
  assert.deepEqual(volumes.slice(1).map((v) => v.usedBytes), [100, 5, 7]);

  assert.deepEqual(volumes[1], {
    time: "2026-12-03T08:00:00Z",
    availableBytes: 900,
    capacityBytes: 1000,
    usedBytes: 100,
    inodesFree: 90,
    inodes: 100,
    inodesUsed: 10,
    name: "data",
    pvcRef: { name: "db", namespace: "shop" },
  });
  assert.deepEqual(volumes[2]?.volumeHealthStats, { abnormal: true });
  assert.deepEqual(events, ["Warning VolumeConditionAbnormal Volume scratch: disk failing"]);
  // Within the period nothing is asked again; the claims are those of /metrics.
  const claims = await provider.claimVolumeStats();
  assert.deepEqual(asked, ["data", "scratch", "inline", "quiet"]);
  assert.deepEqual(claims.map((c) => [c.pvcRef.name, c.stats.usedBytes]), [["db", 100], [
    "web-scratch",
    5,
  ]]);
  clock.step(60_000);
  await provider.claimVolumeStats();
  assert.deepEqual(asked.slice(4), ["data", "scratch", "inline", "quiet"]);
});
