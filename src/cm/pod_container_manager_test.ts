import assert from "node:assert/strict";
import { posix } from "node:path";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import { CgroupManager } from "./cgroup_manager.ts";
import { FakeClock } from "../util/clock.ts";
import {
  PodContainerManager,
  type PodContainerManagerOptions,
  resourceConfigForPod,
} from "./pod_container_manager.ts";
import { QOSContainerManager } from "./qos_container_manager.ts";
import { newExclusiveCpus } from "./exclusive_cpus.ts";
import {
  canUseRealCgroups,
  captureLogger,
  type CmHost,
  drive,
  makeCmHost,
  realCgroupManager,
} from "../testing/cm_fixtures.ts";

const MiB = 1024n * 1024n;
const NODE = { enforceCPULimits: true, cpuPeriodUs: 100_000n, podPidsLimit: -1 };

function pod(uid: string, containers: V1Container[], initContainers: V1Container[] = []): V1Pod {
  return { metadata: { uid, name: uid, namespace: "ns" }, spec: { containers, initContainers } };
}

function ctr(
  requests?: Record<string, string>,
  limits?: Record<string, string>,
  restartPolicy?: string,
): V1Container {
  return { name: crypto.randomUUID().slice(0, 6), resources: { requests, limits }, restartPolicy };
}

const GUARANTEED = pod("1111-g", [
  ctr({ cpu: "250m", memory: "128Mi" }, { cpu: "250m", memory: "128Mi" }),
  ctr({ cpu: "250m", memory: "128Mi" }, { cpu: "250m", memory: "128Mi" }),
]);
const BURSTABLE = pod("2222-b", [
  ctr({ cpu: "100m", memory: "64Mi" }, { cpu: "1", memory: "512Mi" }),
  ctr({ cpu: "200m" }, { cpu: "500m" }),
]);
const BEST_EFFORT = pod("3333-e", [ctr()]);

Deno.test("resourceConfigForPod gives each QoS class upstream's limits", () => {
  const opts = { ...NODE, podPidsLimit: 1024 };
  assert.deepEqual(resourceConfigForPod(GUARANTEED, opts), {
    cpuShares: 512n,
    cpuQuota: 50_000n,
    cpuPeriod: 100_000n,
    memory: 256n * MiB,
    hugePageLimit: new Map(),
    pidsLimit: 1024n,
  });
  // Every container limits cpu, one does not limit memory: quota but no memory limit.
  assert.deepEqual(resourceConfigForPod(BURSTABLE, NODE), {
    cpuShares: 307n,
    cpuQuota: 150_000n,
    cpuPeriod: 100_000n,
    hugePageLimit: new Map(),
  });
  assert.deepEqual(resourceConfigForPod(pod("x", [ctr({ memory: "1Gi" })]), NODE), {
    cpuShares: 2n,
    hugePageLimit: new Map(),
  });
  assert.deepEqual(resourceConfigForPod(BEST_EFFORT, NODE), {
    cpuShares: 2n,
    hugePageLimit: new Map(),
  });
});

Deno.test("resourceConfigForPod leaves the quota unlimited without cpuCFSQuota", () => {
  const rc = resourceConfigForPod(GUARANTEED, { ...NODE, enforceCPULimits: false });
  assert.equal(rc.cpuQuota, -1n);
  assert.equal(rc.cpuPeriod, 100_000n);
});

Deno.test("resourceConfigForPod counts init containers and sidecars as upstream", () => {
  // A plain init container's larger request wins over the regular containers' sum.
  const init = pod("i", [ctr({ cpu: "100m" }, { cpu: "200m" })], [ctr({ cpu: "1" }, { cpu: "1" })]);
  assert.equal(resourceConfigForPod(init, NODE).cpuShares, 1024n);
  assert.equal(resourceConfigForPod(init, NODE).cpuQuota, 100_000n);
  // An init container without a cpu limit leaves the pod without a quota...
  const unlimitedInit = pod("u", [ctr({ cpu: "100m" }, { cpu: "200m" })], [ctr({ cpu: "1" })]);
  assert.equal(resourceConfigForPod(unlimitedInit, NODE).cpuQuota, undefined);
  // ...unless a sidecar started before it sets one: it runs alongside.
  const withSidecar = pod("s", [ctr({ cpu: "100m" }, { cpu: "200m" })], [
    ctr({ cpu: "100m" }, { cpu: "300m" }, "Always"),
    ctr({ cpu: "1" }),
  ]);
  assert.equal(resourceConfigForPod(withSidecar, NODE).cpuQuota, 50_000n);
});

Deno.test("resourceConfigForPod sums hugepage requests by page size", () => {
  const huge = pod("h", [
    ctr({ cpu: "1", memory: "1Gi", "hugepages-2Mi": "4Mi" }, {
      cpu: "1",
      memory: "1Gi",
      "hugepages-2Mi": "4Mi",
    }),
    ctr({ cpu: "1", memory: "1Gi", "hugepages-2Mi": "2Mi", "hugepages-1Gi": "1Gi" }, {
      cpu: "1",
      memory: "1Gi",
      "hugepages-2Mi": "2Mi",
      "hugepages-1Gi": "1Gi",
    }),
  ]);
  assert.deepEqual(
    resourceConfigForPod(huge, NODE).hugePageLimit,
    new Map([[2 * 1024 * 1024, 6n * MiB], [1024 * 1024 * 1024, 1024n * MiB]]),
  );
});

async function withPods(
  fn: (
    host: CmHost,
    pcm: PodContainerManager,
    killed: number[],
    lines: string[],
    clock: FakeClock,
  ) => Promise<void>,
  opts: Partial<PodContainerManagerOptions> = {},
): Promise<void> {
  const host = await makeCmHost("v1");
  const { logger, lines } = captureLogger();
  const killed: number[] = [];
  const clock = new FakeClock();
  try {
    const cm = new CgroupManager({
      layout: host.layout,
      logger,
      fs: host.fs,
      hugePagesDir: host.hugePagesDir,
      clock,
    });
    await cm.create(["kubepods"]);
    const qos = new QOSContainerManager({ cgroupManager: cm, rootName: ["kubepods"], logger });
    await qos.start();
    const pcm = new PodContainerManager({
      ...NODE,
      cgroupManager: cm,
      qosContainers: qos.containersInfo(),
      kill: (pid) => killed.push(pid),
      logger,
      ...opts,
    });
    await fn(host, pcm, killed, lines, clock);
  } finally {
    await host.cleanup();
  }
}

Deno.test("PodContainerManager names pod cgroups under their QoS class for each driver", async () => {
  await withPods((_host, pcm) => {
    assert.deepEqual(pcm.cgroupName(GUARANTEED), ["kubepods", "pod1111-g"]);
    assert.equal(pcm.cgroupParent(GUARANTEED), "/kubepods/pod1111-g");
    assert.equal(pcm.cgroupParent(BURSTABLE), "/kubepods/burstable/pod2222-b");
    assert.equal(pcm.cgroupParent(BEST_EFFORT), "/kubepods/besteffort/pod3333-e");
    return Promise.resolve();
  });
  const { logger } = captureLogger();
  const layout = { mode: "v1" as const, root: "/x", v1: new Map() };
  const sd = new PodContainerManager({
    ...NODE,
    cgroupManager: new CgroupManager({ layout, logger, driver: "systemd" }),
    qosContainers: {
      guaranteed: ["kubepods"],
      burstable: ["kubepods", "burstable"],
      bestEffort: ["kubepods", "besteffort"],
    },
    logger,
  });
  assert.equal(
    sd.cgroupParent(BURSTABLE),
    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod2222_b.slice",
  );
  assert.equal(sd.cgroupParent(GUARANTEED), "/kubepods.slice/kubepods-pod1111_g.slice");
  assert.throws(() => sd.cgroupName(pod("", [ctr()])), /the pod has no metadata.uid/);
});

Deno.test("PodContainerManager ensureExists creates the pod cgroup once with its limits", async () => {
  await withPods(async (host, pcm) => {
    assert.equal(await pcm.exists(GUARANTEED), false);
    await pcm.ensureExists(GUARANTEED);
    assert.equal(await pcm.exists(GUARANTEED), true);
    const dir = "/kubepods/pod1111-g";
    assert.equal(await host.read("cpu", dir, "cpu.shares"), "512");
    assert.equal(await host.read("cpu", dir, "cpu.cfs_quota_us"), "50000");
    assert.equal(await host.read("memory", dir, "memory.limit_in_bytes"), String(256n * MiB));
    assert.equal(await host.read("hugetlb", dir, "hugetlb.2MB.limit_in_bytes"), "0");
    // An existing cgroup is left alone, as upstream; update applies the spec again.
    await host.poke("cpu", dir, "cpu.shares", "1000\n");
    await pcm.ensureExists(GUARANTEED);
    assert.equal(await host.read("cpu", dir, "cpu.shares"), "1000");
    await pcm.update(GUARANTEED);
    assert.equal(await host.read("cpu", dir, "cpu.shares"), "512");
  });
});

Deno.test("PodContainerManager creates the cgroup of a pod on exclusive CPUs without CFS quota, and resizes it so", async () => {
  const pinned = newExclusiveCpus({
    exclusiveCpus: (uid) => uid === GUARANTEED.metadata?.uid ? [2, 3] : [],
  });
  await withPods(async (host, pcm) => {
    await pcm.ensureExists(GUARANTEED);
    assert.equal(await host.read("cpu", "/kubepods/pod1111-g", "cpu.cfs_quota_us"), "-1");
    assert.equal(await host.read("cpu", "/kubepods/pod1111-g", "cpu.shares"), "512");
    // The settings an in-place resize writes (upstream doPodResizeAction) lift it too.
    assert.equal(pcm.specConfig(GUARANTEED).cpuQuota, -1n);
    // A pod on the shared pool keeps its quota.
    await pcm.ensureExists(BURSTABLE);
    assert.equal(
      await host.read("cpu", "/kubepods/burstable/pod2222-b", "cpu.cfs_quota_us"),
      "150000",
    );
  }, { exclusiveCpus: pinned });
  // With DisableCPUQuotaWithExclusiveCPUs off the quota is enforced, as before the gate.
  const off = newExclusiveCpus({
    exclusiveCpus: () => [2, 3],
    featureGates: { DisableCPUQuotaWithExclusiveCPUs: false },
  });
  await withPods(async (host, pcm) => {
    await pcm.ensureExists(GUARANTEED);
    assert.equal(await host.read("cpu", "/kubepods/pod1111-g", "cpu.cfs_quota_us"), "50000");
    assert.equal(pcm.specConfig(GUARANTEED).cpuQuota, 50_000n);
  }, { exclusiveCpus: off });
});

Deno.test("PodContainerManager podsFromCgroups finds pod cgroups under every class", async () => {
  await withPods(async (host, pcm, _killed, lines) => {
    for (const p of [GUARANTEED, BURSTABLE, BEST_EFFORT]) await pcm.ensureExists(p);
    await host.fs.mkdir(host.dir("memory", "/kubepods/burstable/notacgroup"));
    await host.fs.mkdir(host.dir("memory", "/kubepods/burstable/podapodb"));
    const found = pcm.podsFromCgroups();
    assert.deepEqual(
      new Map([...found].sort()),
      new Map([
        ["1111-g", ["kubepods", "pod1111-g"]],
        ["2222-b", ["kubepods", "burstable", "pod2222-b"]],
        ["3333-e", ["kubepods", "besteffort", "pod3333-e"]],
      ]),
    );
    assert.ok(lines.some((l) => l.includes("ignored unexpected cgroup because it is not a pod")));
  });
});

Deno.test("PodContainerManager destroy kills leftover processes and removes the cgroup", async () => {
  await withPods(async (host, pcm, killed, _lines, clock) => {
    await pcm.ensureExists(BURSTABLE);
    const dir = "/kubepods/burstable/pod2222-b";
    await host.poke("memory", dir, "cgroup.procs", "777\n");
    await assert.rejects(drive(clock, pcm.destroy("2222-b")), /failed to delete cgroup paths/);
    assert.deepEqual(killed, [777]);
    // The process is gone now.
    await host.poke("memory", dir, "cgroup.procs", "");
    await pcm.destroy("2222-b");
    assert.equal(await host.fs.exists(host.dir("memory", dir)), false);
    assert.equal(await host.fs.exists(host.dir("cpu", dir)), false);
    assert.equal(pcm.podsFromCgroups().has("2222-b"), false);
    await pcm.destroy("2222-b");
  });
});

Deno.test("PodContainerManager destroy reports processes it cannot kill", async () => {
  await withPods(async (host, pcm) => {
    await pcm.ensureExists(BEST_EFFORT);
    await host.poke("pids", "/kubepods/besteffort/pod3333-e", "cgroup.procs", "1\n");
    await assert.rejects(
      pcm.destroy("3333-e"),
      /failed to kill all the processes attached to the \["kubepods" "besteffort" "pod3333-e"\] cgroups : not yours/,
    );
    assert.equal(await pcm.exists(BEST_EFFORT), true);
  }, {
    kill: () => {
      throw new Deno.errors.PermissionDenied("not yours");
    },
  });
});

Deno.test("PodContainerManager reduceCPULimits lowers a leftover pod's shares", async () => {
  await withPods(async (host, pcm) => {
    await pcm.ensureExists(GUARANTEED);
    await pcm.reduceCPULimits("1111-g");
    assert.equal(await host.read("cpu", "/kubepods/pod1111-g", "cpu.shares"), "2");
  });
});

Deno.test("PodContainerManager kills a real process and removes its real cgroup", async () => {
  if (!canUseRealCgroups("creating cgroups")) return;
  const { layout, cm, clock, logger, top } = await realCgroupManager();
  let child: Deno.ChildProcess | undefined;
  try {
    await cm.create([top]);
    const qos = new QOSContainerManager({ cgroupManager: cm, rootName: [top], logger });
    await qos.start();
    const pcm = new PodContainerManager({
      ...NODE,
      cgroupManager: cm,
      qosContainers: qos.containersInfo(),
      logger,
    });
    await pcm.ensureExists(BURSTABLE);
    const name = pcm.cgroupName(BURSTABLE);
    child = new Deno.Command("sleep", { args: ["60"] }).spawn();
    const memDir = layout.mode === "v2" ? layout.unified! : layout.v1.get("memory")!;
    await Deno.writeTextFile(posix.join(memDir, cm.name(name), "cgroup.procs"), String(child.pid));
    assert.deepEqual([...pcm.podsFromCgroups().keys()], ["2222-b"]);
    const status = child.status;
    await drive(clock, pcm.destroy("2222-b"));
    assert.equal((await status).signal, "SIGKILL");
    child = undefined;
    assert.equal(await cm.exists(name), false);
  } finally {
    if (child) {
      child.kill("SIGKILL");
      await child.status;
    }
    await drive(clock, cm.destroy([top]));
  }
});
