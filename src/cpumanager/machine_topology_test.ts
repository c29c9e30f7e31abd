import assert from "node:assert/strict";
import { join } from "node:path";
import { CPUSet } from "./cpuset.ts";
import { readMachineTopology, TopologyError } from "./machine_topology.ts";
import { type CPUTopology, discoverCPUTopology } from "./topology.ts";
import {
  fakeTopoMultiSocketDualSocketPerNumaHT,
  MACHINE_DUAL_SOCKET_HT,
  MACHINE_DUAL_SOCKET_NPS2,
  MACHINE_SINGLE_SOCKET_HT,
  MACHINE_SINGLE_SOCKET_TWO_NUMA_UNCORE,
  type NumaMachine,
  topoDualSocketHT,
  topoDualSocketMultiNumaPerSocketHT,
  topoSingleSocketHT,
  topoUncoreSingleSocketMultiNuma,
  writeNumaMachine,
} from "../testing/numa_fixtures.ts";

const GiB = 2 ** 30;

async function withMachine<T>(m: NumaMachine, fn: (root: string) => Promise<T>): Promise<T> {
  const root = await writeMachine(m);
  try {
    return await fn(root);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
}

const writeMachine = (m: NumaMachine) => writeNumaMachine(m);

/** [core, socket, numa, uncore] per CPU, for comparing topologies. */
function rows(t: CPUTopology, uncore: "keep" | "socket" = "keep") {
  return [...t.cpuDetails.entries()].sort(([a], [b]) => a - b).map(([cpu, i]) => [
    cpu,
    i.coreID,
    i.socketID,
    i.numaNodeID,
    uncore === "keep" ? i.uncoreCacheID : i.socketID,
  ]);
}

Deno.test("readMachineTopology reads a dual socket HT machine as cAdvisor and Discover do", async () => {
  await withMachine(MACHINE_DUAL_SOCKET_HT, async (root) => {
    const m = await readMachineTopology(root);
    assert.equal(m.numCPUs, 12);
    assert.equal(m.numSockets, 2);
    assert.deepEqual(m.nodes.map((n) => n.id), [0, 1]);
    assert.equal(m.nodes[0]!.cpus.toString(), "0,2,4,6,8,10");
    assert.equal(m.nodes[1]!.cpus.toString(), "1,3,5,7,9,11");
    // sysfs core_id restarts per package: cores are told apart by (core_id, package), and
    // listed in the order of Go's glob (cpu1, cpu11, cpu3, ...).
    assert.deepEqual(m.nodes[1]!.cores.map((c) => [c.id, c.socketID, [...c.threads]]), [
      [0, 1, [1, 7]],
      [2, 1, [11, 5]],
      [1, 1, [3, 9]],
    ]);
    assert.equal(m.nodes[0]!.memoryBytes, 16 * GiB);
    assert.deepEqual([...m.nodes[0]!.hugePages], [[1024 * 1024 * 1024, 1], [2 * 1024 * 1024, 64]]);
    assert.deepEqual(m.nodes[0]!.distances, [10, 32]);
    assert.deepEqual(m.nodes[1]!.distances, [32, 10]);
    assert.deepEqual(m.warnings, []);

    const t = discoverCPUTopology(m);
    assert.equal(t.numCPUs, 12);
    assert.equal(t.numCores, 6);
    assert.equal(t.numSockets, 2);
    assert.equal(t.numNUMANodes, 2);
    // The L3 spans the whole node: cAdvisor files it as a node cache, Discover falls back to the socket.
    assert.equal(t.numUncoreCache, 2);
    assert.deepEqual(rows(t), rows(topoDualSocketHT, "socket"));
    assert.equal(t.cpusPerCore(), 2);
    assert.equal(t.cpusPerSocket(), 6);
    assert.equal(t.cpusPerUncore(), 6);
  });
});

Deno.test("readMachineTopology core ids are the lowest thread of each core", async () => {
  await withMachine(MACHINE_SINGLE_SOCKET_HT, async (root) => {
    const t = discoverCPUTopology(await readMachineTopology(root));
    assert.deepEqual(rows(t), rows(topoSingleSocketHT));
    assert.equal(t.numCores, 4);
    assert.equal(t.numNUMANodes, 1);
    assert.equal(t.cpuCoreID(6), 2);
  });
});

Deno.test("readMachineTopology reads 2 sockets of 2 NUMA nodes each", async () => {
  await withMachine(MACHINE_DUAL_SOCKET_NPS2, async (root) => {
    const m = await readMachineTopology(root);
    assert.equal(m.numCPUs, 80);
    assert.deepEqual(m.nodes.map((n) => n.cpus.toString()), [
      "0-9,40-49",
      "10-19,50-59",
      "20-29,60-69",
      "30-39,70-79",
    ]);
    assert.deepEqual(m.nodes[0]!.distances, [10, 12, 32, 32]);
    assert.deepEqual(m.nodes[3]!.distances, [32, 32, 12, 10]);
    const t = discoverCPUTopology(m);
    assert.deepEqual(
      [t.numCPUs, t.numCores, t.numSockets, t.numNUMANodes],
      [80, 40, 2, 4],
    );
    assert.deepEqual(rows(t), rows(topoDualSocketMultiNumaPerSocketHT, "socket"));
  });
});

Deno.test("readMachineTopology tells apart equal core_ids of two sockets in one node", async () => {
  await withMachine({ topology: fakeTopoMultiSocketDualSocketPerNumaHT }, async (root) => {
    const m = await readMachineTopology(root);
    assert.deepEqual(m.nodes.map((n) => n.cpus.toString()), ["0-19,40-59", "20-39,60-79"]);
    const t = discoverCPUTopology(m);
    assert.deepEqual([t.numCores, t.numSockets, t.numNUMANodes], [40, 4, 2]);
    assert.deepEqual(rows(t), rows(fakeTopoMultiSocketDualSocketPerNumaHT, "socket"));
  });
});

Deno.test("readMachineTopology finds uncore caches that are smaller than a node", async () => {
  await withMachine(MACHINE_SINGLE_SOCKET_TWO_NUMA_UNCORE, async (root) => {
    const m = await readMachineTopology(root);
    assert.deepEqual(m.nodes[0]!.cores.map((c) => c.uncoreCacheID), [0, 0, 0, 0, 1, 1, 1, 1]);
    const t = discoverCPUTopology(m);
    assert.equal(t.numUncoreCache, 4);
    assert.equal(t.numNUMANodes, 2);
    assert.deepEqual(rows(t), rows(topoUncoreSingleSocketMultiNuma));
    assert.equal(t.cpuDetails.cpusInUncoreCaches(2).toString(), "8-11");
  });
});

Deno.test("readMachineTopology without node directories makes a node per package", async () => {
  await withMachine({ ...MACHINE_DUAL_SOCKET_HT, noNodeDir: true, offline: [11] }, async (root) => {
    const m = await readMachineTopology(root);
    assert.deepEqual(m.nodes.map((n) => [n.id, n.cpus.toString()]), [
      [0, "0,2,4,6,8,10"],
      [1, "1,3,5,7,9"],
    ]);
    assert.equal(m.nodes[0]!.memoryBytes, 0);
    assert.equal(m.nodes[0]!.distances, undefined);
    assert.equal(m.nodes[0]!.hugePages.size, 0);
    // cAdvisor counts every CPU directory here, the offline one too.
    assert.equal(m.numCPUs, 12);
    assert.equal(discoverCPUTopology(m).numNUMANodes, 2);
  });
});

Deno.test("readMachineTopology leaves offline CPUs out", async () => {
  await withMachine({ ...MACHINE_DUAL_SOCKET_HT, offline: [5, 11, 4] }, async (root) => {
    const m = await readMachineTopology(root);
    assert.equal(m.numCPUs, 9);
    const t = discoverCPUTopology(m);
    assert.equal(t.numCores, 5);
    assert.equal(t.cpuDetails.cpus().toString(), "0-3,6-10");
    assert.equal(t.cpuCoreID(10), 10);
  });
});

Deno.test("readMachineTopology counts sockets from sysfs without /proc/cpuinfo", async () => {
  await withMachine({ ...MACHINE_DUAL_SOCKET_NPS2, noCpuinfo: true }, async (root) => {
    assert.equal((await readMachineTopology(root)).numSockets, 2);
  });
});

Deno.test("readMachineTopology reports absent per-node files as cAdvisor does", async () => {
  const m: NumaMachine = {
    ...MACHINE_DUAL_SOCKET_HT,
    nodes: { 1: { memTotalKb: null, distances: null, hugePages: {} } },
  };
  await withMachine(m, async (root) => {
    await Deno.remove(join(root, "sys/devices/system/cpu/cpu3/cache/index1/id"));
    const got = await readMachineTopology(root);
    const n1 = got.nodes[1]!;
    assert.equal(n1.memoryBytes, 0);
    assert.equal(n1.distances, undefined);
    assert.equal(n1.hugePages.size, 0);
    assert.equal(got.warnings.length, 3, got.warnings.join("\n"));
    assert.match(got.warnings.join("\n"), /node1\/meminfo does not exist/);
    assert.match(got.warnings.join("\n"), /node1\/distance does not exist/);
    assert.match(got.warnings.join("\n"), /cpu3\/cache\/index1\/id does not exist/);
  });
});

Deno.test("readMachineTopology keeps the uncore caches read before a broken cache", async () => {
  await withMachine(MACHINE_SINGLE_SOCKET_TWO_NUMA_UNCORE, async (root) => {
    await Deno.remove(join(root, "sys/devices/system/cpu/cpu2/cache/index3/shared_cpu_map"));
    const m = await readMachineTopology(root);
    // cAdvisor stops at the first unreadable cache: cores 2-7 of node 0 get no uncore cache.
    assert.deepEqual(m.nodes[0]!.cores.map((c) => c.uncoreCacheID), [
      0,
      0,
      undefined,
      undefined,
      undefined,
      undefined,
      undefined,
      undefined,
    ]);
    // Node 1's cores in glob order: cpu10 ... cpu15, cpu8, cpu9.
    assert.deepEqual(m.nodes[1]!.cores.map((c) => c.uncoreCacheID), [2, 2, 3, 3, 3, 3, 2, 2]);
    assert.equal(discoverCPUTopology(m).cpuDetails.get(5)!.uncoreCacheID, 0);
  });
});

Deno.test("readMachineTopology names the file holding a bad value", async () => {
  const cases: [string, string, RegExp][] = [
    [
      "sys/devices/system/cpu/cpu3/topology/core_id",
      "x",
      /cpu3\/topology\/core_id: expected an integer, found "x"/,
    ],
    [
      "sys/devices/system/cpu/cpu2/topology/physical_package_id",
      "",
      /physical_package_id: expected an integer/,
    ],
    [
      "sys/devices/system/node/node1/meminfo",
      "Node 1 MemFree: 5 kB",
      /node1\/meminfo: no "MemTotal/,
    ],
    [
      "sys/devices/system/node/node0/distance",
      "10 2x",
      /node0\/distance: cannot convert 2x to int/,
    ],
    ["sys/devices/system/cpu/online", "0-a", /cpu\/online: strconv.Atoi: parsing "a"/],
    [
      "sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages",
      "many",
      /could not parse .*hugepages-2048kB\/nr_hugepages: contents "many"/,
    ],
  ];
  const root = await writeMachine(MACHINE_DUAL_SOCKET_HT);
  try {
    for (const [file, content, want] of cases) {
      const path = join(root, file);
      const saved = await Deno.readTextFile(path);
      await Deno.writeTextFile(path, content);
      await assert.rejects(readMachineTopology(root), (e) => {
        assert.ok(e instanceof TopologyError, `${file}: ${e}`);
        assert.match(e.message, want);
        return true;
      });
      await Deno.writeTextFile(path, saved);
    }
    await readMachineTopology(root);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("readMachineTopology reads this host", async (t) => {
  const online = await Deno.readTextFile("/sys/devices/system/cpu/online").catch(() => undefined);
  const hasNodes = await Deno.stat("/sys/devices/system/node/node0").then(() => true, () => false);
  if (online === undefined || !hasNodes) {
    t.step({ name: "no sysfs NUMA nodes here", ignore: true, fn: () => {} });
    return;
  }
  const topo = discoverCPUTopology(await readMachineTopology("/"));
  assert.equal(topo.numCPUs, CPUSet.parse(online.trim()).size);
  assert.ok(topo.cpuDetails.cpus().equals(CPUSet.parse(online.trim())));
  assert.ok(topo.numNUMANodes >= 1);
});
