import assert from "node:assert/strict";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import { CgroupManager } from "./cgroup_manager.ts";
import {
  parseQOSReserved,
  QOSContainerManager,
  type QOSContainerManagerOptions,
} from "./qos_container_manager.ts";
import { milliCPUToShares } from "./helpers_linux.ts";
import { captureLogger, type CmHost, makeCmHost } from "../testing/cm_fixtures.ts";

const GiB = 1024n ** 3n;

function pod(uid: string, containers: V1Container[], initContainers: V1Container[] = []): V1Pod {
  return { metadata: { uid, name: uid, namespace: "ns" }, spec: { containers, initContainers } };
}

function ctr(requests?: Record<string, string>, limits?: Record<string, string>): V1Container {
  return { name: crypto.randomUUID().slice(0, 6), resources: { requests, limits } };
}

const GUARANTEED = pod("g", [ctr({ cpu: "1", memory: "2Gi" }, { cpu: "1", memory: "2Gi" })]);
const BURSTABLE_A = pod("a", [ctr({ cpu: "250m", memory: "1Gi" })]);
// An init container's request counts when larger than the regular containers' sum.
const BURSTABLE_B = pod("b", [ctr({ cpu: "100m" })], [ctr({ cpu: "500m" })]);
const BEST_EFFORT = pod("e", [ctr()]);

async function withQos(
  mode: "v1" | "v2",
  opts: Partial<QOSContainerManagerOptions>,
  fn: (host: CmHost, qos: QOSContainerManager, cm: CgroupManager, lines: string[]) => Promise<void>,
): Promise<void> {
  const host = await makeCmHost(mode);
  const { logger, lines } = captureLogger();
  try {
    const cm = new CgroupManager({
      layout: host.layout,
      logger,
      fs: host.fs,
      hugePagesDir: host.hugePagesDir,
    });
    await cm.create(["kubepods"]);
    const qos = new QOSContainerManager({
      cgroupManager: cm,
      rootName: ["kubepods"],
      logger,
      ...opts,
    });
    await fn(host, qos, cm, lines);
  } finally {
    await host.cleanup();
  }
}

Deno.test("parseQOSReserved accepts memory percentages only", () => {
  assert.deepEqual(parseQOSReserved({ memory: "50%" }), new Map([["memory", 50n]]));
  assert.throws(() => parseQOSReserved({ cpu: "10%" }), /cannot reserve "cpu" resource/);
  assert.throws(() => parseQOSReserved({ memory: "50" }), /percentage expected, got '50'/);
  assert.throws(() => parseQOSReserved({ memory: "x%" }), /invalid number in percentage 'x%'/);
  assert.throws(
    () => parseQOSReserved({ memory: "101%" }),
    /failed to parse percentage "101%" for "memory" resource: percentage must be between 0 and 100/,
  );
});

Deno.test("QOSContainerManager start creates burstable and besteffort under kubepods", async () => {
  await withQos("v1", {}, async (host, qos) => {
    await qos.start();
    assert.deepEqual(qos.containersInfo(), {
      guaranteed: ["kubepods"],
      burstable: ["kubepods", "burstable"],
      bestEffort: ["kubepods", "besteffort"],
    });
    assert.equal(await host.read("cpu", "/kubepods/besteffort", "cpu.shares"), "2");
    assert.equal(await host.read("cpu", "/kubepods/burstable", "cpu.shares"), "1024");
    for (const c of ["burstable", "besteffort"]) {
      assert.equal(
        await host.read("hugetlb", `/kubepods/${c}`, "hugetlb.2MB.limit_in_bytes"),
        String(1n << 62n),
      );
    }
    // A second start refreshes what exists.
    await host.poke("cpu", "/kubepods/besteffort", "cpu.shares", "1024");
    await qos.start();
    assert.equal(await host.read("cpu", "/kubepods/besteffort", "cpu.shares"), "2");
  });
});

Deno.test("QOSContainerManager start has new cpuset cgroups below kubepods inherit cpus and mems", async () => {
  await withQos("v1", {}, async (host, qos, cm) => {
    // burstable exists already (an earlier kubelet's), made without the flag.
    await cm.create(["kubepods", "burstable"]);
    assert.equal(await host.read("cpuset", "/kubepods/burstable", "cgroup.clone_children"), "0");
    await qos.start();
    for (const path of ["/kubepods", "/kubepods/burstable", "/kubepods/besteffort"]) {
      assert.equal(await host.read("cpuset", path, "cgroup.clone_children"), "1", path);
    }
    // A pod's cgroup is made with its parent's cpus and mems: no cpuset write, and the flag
    // passes on to what the runtime makes below it.
    host.fs.writes.length = 0;
    await cm.create(["kubepods", "besteffort", "pod1"], { cpuShares: 2n });
    assert.deepEqual(host.fs.writes.filter((w) => w.includes("cpuset")), []);
    assert.equal(await host.read("cpuset", "/kubepods/besteffort/pod1", "cpuset.cpus"), "0-1");
    assert.equal(await host.read("cpuset", "/kubepods/besteffort/pod1", "cpuset.mems"), "0");
    assert.equal(
      await host.read("cpuset", "/kubepods/besteffort/pod1", "cgroup.clone_children"),
      "1",
    );
    // A second start writes nothing more for the flag.
    host.fs.writes.length = 0;
    await qos.start();
    assert.deepEqual(host.fs.writes.filter((w) => w.includes("clone_children")), []);
  });
});

Deno.test("QOSContainerManager start logs a flag it cannot set and goes on", async () => {
  await withQos("v1", {}, async (host, qos, cm, lines) => {
    host.fs.failOnce.set("kubepods/cgroup.clone_children", "EACCES");
    await qos.start();
    assert.ok(
      lines.some((l) =>
        l.includes("Failed to let new cpuset cgroups inherit") &&
        l.includes("kubepods/cgroup.clone_children") && l.includes("EACCES")
      ),
      lines.join("\n"),
    );
    assert.equal(await host.read("cpuset", "/kubepods", "cgroup.clone_children"), "0");
    // Without the flag a pod's cgroup still gets its cpus and mems, by copying them.
    await cm.create(["kubepods", "pod2"]);
    assert.equal(await host.read("cpuset", "/kubepods/pod2", "cpuset.cpus"), "0-1");
  });
});

Deno.test("QOSContainerManager start leaves cgroup.clone_children alone on v2", async () => {
  await withQos("v2", {}, async (host, qos) => {
    await qos.start();
    assert.deepEqual(host.fs.writes.filter((w) => w.includes("clone_children")), []);
  });
});

Deno.test("QOSContainerManager start fails when the node allocatable cgroup is missing", async () => {
  await withQos("v1", { rootName: ["nope"] }, async (_host, qos) => {
    await assert.rejects(
      qos.start(),
      /error validating root container \["nope"\] : cgroup \["nope"\] has some missing paths/,
    );
  });
});

Deno.test("QOSContainerManager updateCgroups sizes burstable shares to its pods' CPU requests", async () => {
  await withQos("v1", {}, async (host, qos) => {
    await qos.start();
    await host.poke("cpu", "/kubepods", "cpu.shares", "2048");
    await qos.updateCgroups(() => [GUARANTEED, BURSTABLE_A, BURSTABLE_B, BEST_EFFORT]);
    // 250m + max(100m, 500m) = 750m.
    assert.equal(await host.read("cpu", "/kubepods/burstable", "cpu.shares"), "768");
    assert.equal(await host.read("cpu", "/kubepods/besteffort", "cpu.shares"), "2");
    assert.equal(await host.read("cpu", "/kubepods", "cpu.shares"), "2048", "kubepods untouched");
    assert.equal(
      await host.read("memory", "/kubepods/besteffort", "memory.limit_in_bytes"),
      "9223372036854771712",
    );
    await qos.updateCgroups(() => [BEST_EFFORT]);
    assert.equal(await host.read("cpu", "/kubepods/burstable", "cpu.shares"), "2");
  });
});

Deno.test("QOSContainerManager updateCgroups writes cpu.weight on v2", async () => {
  await withQos("v2", {}, async (host, qos) => {
    await qos.start();
    await qos.updateCgroups(() => [pod("x", [ctr({ cpu: "1" })])]);
    assert.equal(await host.read("", "/kubepods/burstable", "cpu.weight"), "39");
    assert.equal(await host.read("", "/kubepods/besteffort", "cpu.weight"), "1");
  });
});

Deno.test("QOSContainerManager reserves memory for higher classes with QOSReserved", async () => {
  const opts = {
    qosReserved: { memory: "50%" },
    qosReservedGate: true,
    allocatableMemory: () => 8n * GiB,
  };
  await withQos("v1", opts, async (host, qos) => {
    await qos.start();
    await qos.updateCgroups(() => [GUARANTEED, BURSTABLE_A, BEST_EFFORT]);
    // Burstable: 8Gi - 50% of 2Gi; BestEffort: that - 50% of 1Gi.
    const burstable = 7n * GiB;
    const bestEffort = burstable - GiB / 2n;
    assert.equal(
      await host.read("memory", "/kubepods/burstable", "memory.limit_in_bytes"),
      String(burstable),
    );
    assert.equal(
      await host.read("memory", "/kubepods/besteffort", "memory.limit_in_bytes"),
      String(bestEffort),
    );
  });
});

Deno.test("QOSContainerManager caps a class at its usage when it is above the new limit", async () => {
  const opts = {
    qosReserved: { memory: "100%" },
    qosReservedGate: true,
    allocatableMemory: () => 4n * GiB,
  };
  await withQos("v1", opts, async (host, qos) => {
    await qos.start();
    const usage = String(3n * GiB);
    await host.poke("memory", "/kubepods/besteffort", "memory.usage_in_bytes", `${usage}\n`);
    // BestEffort would get 4Gi - 2Gi - 1Gi = 1Gi, below its usage of 3Gi.
    await qos.updateCgroups(() => [GUARANTEED, BURSTABLE_A]);
    assert.equal(await host.read("memory", "/kubepods/besteffort", "memory.limit_in_bytes"), usage);
    assert.equal(
      await host.read("memory", "/kubepods/burstable", "memory.limit_in_bytes"),
      String(2n * GiB),
    );
  });
});

Deno.test("QOSContainerManager ignores qosReserved without the QOSReserved gate", async () => {
  const opts = { qosReserved: { memory: "50%" }, allocatableMemory: () => 8n * GiB };
  await withQos("v1", opts, async (host, qos) => {
    await qos.start();
    await qos.updateCgroups(() => [GUARANTEED]);
    assert.equal(
      await host.read("memory", "/kubepods/burstable", "memory.limit_in_bytes"),
      "9223372036854771712",
    );
  });
});

Deno.test("QOSContainerManager updateCgroups throws the failed update and logs it", async () => {
  await withQos("v1", {}, async (host, qos, _cm, lines) => {
    await qos.start();
    await Deno.remove(host.dir("cpu", "/kubepods/besteffort"), { recursive: true });
    await assert.rejects(
      qos.updateCgroups(() => []),
      /Cannot update cgroup \["kubepods" "besteffort"\]/,
    );
    assert.ok(lines.some((l) => l.includes("Failed to update QoS cgroup configuration")));
    // The queue keeps working after a failure.
    await host.fs.mkdir(host.dir("cpu", "/kubepods/besteffort"));
    await qos.updateCgroups(() => []);
  });
});

Deno.test("QOSContainerManager updateCgroups joins callers to the update waiting to run", async () => {
  await withQos("v1", {}, async (host, qos) => {
    await qos.start();
    let reads = 0;
    const firstRead = Promise.withResolvers<void>();
    const pods: V1Pod[] = [];
    const active = () => {
      if (++reads === 1) firstRead.resolve();
      return [...pods];
    };
    // The first update runs; the next nine arrive while it does and share one more update,
    // which sees every pod added before it started.
    const calls = [qos.updateCgroups(active)];
    await firstRead.promise;
    for (const cpu of ["100m", "200m", "300m", "400m", "500m", "600m", "700m", "800m", "900m"]) {
      pods.push(pod(cpu, [ctr({ cpu })]));
      calls.push(qos.updateCgroups(active));
    }
    await Promise.all(calls);
    assert.equal(reads, 2);
    // 100m + ... + 900m = 4500m.
    assert.equal(
      await host.read("cpu", "/kubepods/burstable", "cpu.shares"),
      String(milliCPUToShares(4500n)),
    );
    // After the queue drains, a call runs an update of its own.
    await qos.updateCgroups(active);
    assert.equal(reads, 3);
  });
});
