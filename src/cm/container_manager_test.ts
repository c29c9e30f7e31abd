import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import type * as api from "../../proto/runtime/v1/api.ts";
import { FakeClock } from "../util/clock.ts";
import { CriError } from "../cri/connection.ts";
import { newContainerManager, ORPHAN_RESCAN_MS } from "./container_manager.ts";
import { captureLogger, type CmHost, makeCmHost } from "../testing/cm_fixtures.ts";
import type { Logger } from "../klog/klog.ts";
import type { CgroupFs } from "./cgroupfs.ts";

// containerd 1.6 does not serve RuntimeConfig: the configured driver stays.
const UNIMPLEMENTED = new CriError("RuntimeService/RuntimeConfig", 12, "unknown method");

function pod(uid: string, resources?: V1Pod["spec"]): V1Pod {
  return {
    metadata: { uid, name: uid, namespace: "ns" },
    spec: resources ?? { containers: [{ name: "c" }] },
  };
}

/** A Guaranteed pod of 250m and 64Mi. */
function guaranteedPod(uid: string): V1Pod {
  return pod(uid, {
    containers: [{
      name: "c",
      resources: {
        requests: { cpu: "250m", memory: "64Mi" },
        limits: { cpu: "250m", memory: "64Mi" },
      },
    }],
  });
}

/** The container manager on the fixture host: pod cgroups, the cgroupfs driver, 2 CPUs, 4 GiB. */
function cgroupfsManager(
  host: CmHost,
  o: { logger: Logger; activePods?: () => V1Pod[]; clock?: FakeClock; fs?: CgroupFs },
) {
  return newContainerManager({
    config: { cgroupsPerQOS: true, cgroupDriver: "cgroupfs", cgroupRoot: "/" },
    layout: host.layout,
    runtime: {
      runtimeConfig: () => Promise.reject(UNIMPLEMENTED) as Promise<api.RuntimeConfigResponse>,
    },
    capacity: { cpu: "2", memory: String(4 * 2 ** 30), pid: "4096" },
    activePods: o.activePods ?? (() => []),
    nodeName: "node-1",
    recorder: { event: () => {} },
    clock: o.clock ?? new FakeClock(),
    logger: o.logger,
    cgroupFs: o.fs ?? host.fs,
    hugePagesDir: host.hugePagesDir,
  });
}

Deno.test("newContainerManager builds kubepods, QoS and pod cgroups and removes orphans", async () => {
  const host = await makeCmHost("hybrid");
  try {
    const { logger } = captureLogger();
    const guaranteed = guaranteedPod("g-1");
    const bestEffort = pod("b-1");
    const active = [guaranteed, bestEffort];
    const clock = new FakeClock();
    const cm = await cgroupfsManager(host, { activePods: () => active, clock, logger });
    const pods = cm.podCgroups!;
    assert.equal(pods.cgroupParent(guaranteed), "/kubepods/podg-1");
    assert.equal(pods.cgroupParent(bestEffort), "/kubepods/besteffort/podb-1");
    await pods.ensureExists(guaranteed);
    await pods.ensureExists(bestEffort);
    // Values read back as the kernel holds them.
    assert.equal(await host.read("cpu", "/kubepods/podg-1", "cpu.shares"), "256");
    assert.equal(await host.read("cpu", "/kubepods/podg-1", "cpu.cfs_quota_us"), "25000");
    assert.equal(
      await host.read("memory", "/kubepods/podg-1", "memory.limit_in_bytes"),
      String(64 * 2 ** 20),
    );
    assert.equal(await host.read("cpu", "/kubepods/besteffort/podb-1", "cpu.shares"), "2");
    assert.equal(await host.read("cpu", "/kubepods/besteffort", "cpu.shares"), "2");
    // kubepods is sized to the node: capacity with nothing reserved.
    assert.equal(
      await host.read("memory", "/kubepods", "memory.limit_in_bytes"),
      String(4 * 2 ** 30),
    );

    // The best-effort pod is gone: its cgroup goes at housekeeping, the other stays.
    await pods.cleanupOrphans(new Set(["g-1"]));
    await pods.orphansRemoved();
    await assert.rejects(Deno.stat(host.dir("cpu", "/kubepods/besteffort/podb-1")));
    assert.ok((await Deno.stat(host.dir("cpu", "/kubepods/podg-1"))).isDirectory);

    // The next scan finds no orphan: while the kept pods are the same, the next housekeepings
    // do not list the tree again, so a pod cgroup made by someone else stays until
    // ORPHAN_RESCAN_MS has passed, or until the kept set changes.
    await pods.cleanupOrphans(new Set(["g-1"]));
    const stray = host.dir("cpu", "/kubepods/besteffort/podx-1");
    await Deno.mkdir(stray);
    clock.step(ORPHAN_RESCAN_MS - 1);
    await pods.cleanupOrphans(new Set(["g-1"]));
    await pods.orphansRemoved();
    assert.ok((await Deno.stat(stray)).isDirectory, "scan skipped");
    clock.step(1);
    await pods.cleanupOrphans(new Set(["g-1"]));
    await pods.orphansRemoved();
    await assert.rejects(Deno.stat(stray), Deno.errors.NotFound);
    await Deno.mkdir(stray);
    await pods.cleanupOrphans(new Set(["g-1", "n-1"]));
    await pods.orphansRemoved();
    await assert.rejects(Deno.stat(stray), Deno.errors.NotFound);
  } finally {
    await host.cleanup();
  }
});

Deno.test("newContainerManager without cgroupsPerQOS leaves pods to the runtime's cgroups", async () => {
  const { logger } = captureLogger();
  const cm = await newContainerManager({
    config: { cgroupsPerQOS: false },
    layout: { mode: "v2", root: "/nonexistent", v1: new Map() },
    runtime: { runtimeConfig: () => Promise.reject(new Error("not called")) },
    capacity: {},
    activePods: () => [],
    nodeName: "node-1",
    recorder: { event: () => {} },
    clock: new FakeClock(),
    logger,
  });
  assert.equal(cm.podCgroups, undefined);
});

Deno.test("cleanupOrphans removes orphans in the background, once each, and only lowers the CPU of one whose volumes remain", async () => {
  const host = await makeCmHost("hybrid");
  try {
    const { logger } = captureLogger();
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    const rmdirs: string[] = [];
    // Removals wait at the gate, as rmdir of a v1 cgroup can take long on a busy kernel.
    const fs: CgroupFs = {
      mkdir: (p) => host.fs.mkdir(p),
      rmdir: async (p) => {
        rmdirs.push(p);
        await gate;
        return host.fs.rmdir(p);
      },
      readFile: (p) => host.fs.readFile(p),
      writeFile: (p, v) => host.fs.writeFile(p, v),
      readDirs: (p) => host.fs.readDirs(p),
      exists: (p) => host.fs.exists(p),
    };
    const guaranteed = guaranteedPod("g-1");
    const bestEffort = pod("b-1");
    const cm = await cgroupfsManager(host, { fs, logger });
    const pods = cm.podCgroups!;
    await pods.ensureExists(guaranteed);
    await pods.ensureExists(bestEffort);
    assert.equal(await host.read("cpu", "/kubepods/podg-1", "cpu.shares"), "256");

    const volumesExist = (uid: string) => uid === "g-1";
    await pods.cleanupOrphans(new Set(), { volumesExist });
    // The scan returned while the removal waits; the pod with volumes keeps its cgroup, its
    // CPU at the minimum (upstream ReduceCPULimits).
    for (let i = 0; i < 1000 && rmdirs.length === 0; i++) {
      await new Promise((r) => setTimeout(r, 1));
    }
    assert.ok(rmdirs.length > 0 && rmdirs.every((p) => p.includes("podb-1")), rmdirs.join());
    assert.ok((await Deno.stat(host.dir("cpu", "/kubepods/besteffort/podb-1"))).isDirectory);
    assert.equal(await host.read("cpu", "/kubepods/podg-1", "cpu.shares"), "2");
    // A scan while the removal waits starts no second one.
    await pods.cleanupOrphans(new Set(), { volumesExist });

    open();
    await pods.orphansRemoved();
    await assert.rejects(Deno.stat(host.dir("cpu", "/kubepods/besteffort/podb-1")));
    assert.equal(rmdirs.length, new Set(rmdirs).size, `each path removed once: ${rmdirs.join()}`);
    assert.ok((await Deno.stat(host.dir("cpu", "/kubepods/podg-1"))).isDirectory);
    // A check that fails counts as volumes present, as upstream.
    await pods.cleanupOrphans(new Set(), {
      volumesExist: () => {
        throw new Error("readdir: permission denied");
      },
    });
    await pods.orphansRemoved();
    assert.ok((await Deno.stat(host.dir("cpu", "/kubepods/podg-1"))).isDirectory);
    // The volumes are gone: the next housekeeping removes it.
    await pods.cleanupOrphans(new Set(), { volumesExist: () => false });
    await pods.orphansRemoved();
    await assert.rejects(Deno.stat(host.dir("cpu", "/kubepods/podg-1")));
  } finally {
    await host.cleanup();
  }
});
