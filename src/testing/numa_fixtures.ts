/**
 * @module
 * NUMA machines for the CPU, memory and topology managers' tests: upstream's test topologies
 * (`pkg/kubelet/cm/cpumanager/policy_test.go`: topoSingleSocketHT, topoDualSocketHT,
 * topoDualSocketMultiNumaPerSocketHT, topoUncore*, ...) as {@link CPUTopology} values with the
 * exact counts upstream's literals give (some leave NumNUMANodes or NumUncoreCache unset, and
 * the CPU assignment depends on that), and {@link writeNumaMachine}, which writes the sysfs tree
 * (`/sys/devices/system/{cpu,node}`, caches, per-node meminfo, hugepages and distances) and
 * /proc/cpuinfo of a machine so `cpumanager/machine_topology.ts` reads it as it reads a host. The
 * machines {@link MACHINE_SINGLE_SOCKET_HT}, {@link MACHINE_DUAL_SOCKET_HT},
 * {@link MACHINE_DUAL_SOCKET_NPS2} and {@link MACHINE_SINGLE_SOCKET_TWO_NUMA_UNCORE} are built
 * from those topologies. Not used in production.
 */

import { join } from "node:path";
import { CPUDetails, type CPUInfo, CPUTopology } from "../cpumanager/topology.ts";

/** Upstream's counts and a function giving CPU `i`'s [core, socket, numa, uncore]. */
interface TopologySpec {
  numCPUs: number;
  numCores: number;
  numSockets: number;
  numNUMANodes?: number;
  numUncoreCache?: number;
  cpu: (i: number) => readonly [number, number, number, number];
}

function build(spec: TopologySpec, cpuIDs?: Iterable<number>): CPUTopology {
  const details: [number, CPUInfo][] = [];
  for (const i of cpuIDs ?? Array.from({ length: spec.numCPUs }, (_, i) => i)) {
    const [coreID, socketID, numaNodeID, uncoreCacheID] = spec.cpu(i);
    details.push([i, { coreID, socketID, numaNodeID, uncoreCacheID }]);
  }
  return new CPUTopology({ ...spec, cpuDetails: new CPUDetails(details) });
}

/** 1 socket, 1 NUMA node, 4 cores with 2 threads: CPUs k and k+4 share core k. */
export const topoSingleSocketHT: CPUTopology = build({
  numCPUs: 8,
  numSockets: 1,
  numCores: 4,
  cpu: (i) => [i % 4, 0, 0, 0],
});

/** 2 sockets = 2 NUMA nodes, 6 cores with 2 threads; even CPUs on socket 0, core k = {k, k+6}. */
export const topoDualSocketHT: CPUTopology = build({
  numCPUs: 12,
  numSockets: 2,
  numCores: 6,
  numUncoreCache: 1,
  cpu: (i) => [i % 6, i % 2, i % 2, 0],
});

/** 2 sockets = 2 NUMA nodes, 8 cores without SMT; CPUs 0-3 on socket 0. */
export const topoDualSocketNoHT: CPUTopology = build({
  numCPUs: 8,
  numSockets: 2,
  numCores: 8,
  cpu: (i) => [i, i < 4 ? 0 : 1, i < 4 ? 0 : 1, 0],
});

/** upstream's fake 3 sockets: CPUs 0-5 socket 1, 6-11 socket 0, 12-17 socket 2; core k = {2k, 2k+1}. */
export const topoTripleSocketHT: CPUTopology = build({
  numCPUs: 18,
  numSockets: 3,
  numCores: 9,
  cpu: (i) => {
    const s = i < 6 ? 1 : i < 12 ? 0 : 2;
    return [Math.floor(i / 2), s, s, 0];
  },
});

/** 2 sockets in 1 NUMA node, 16 cores without SMT, an uncore cache per 4 cores. */
export const topoUncoreDualSocketNoSMT: CPUTopology = build({
  numCPUs: 16,
  numSockets: 2,
  numCores: 16,
  numUncoreCache: 4,
  cpu: (i) => [i, i < 8 ? 0 : 1, 0, Math.floor(i / 4)],
});

/** 1 socket with 2 NUMA nodes (CPUs 0-7, 8-15), no SMT, an uncore cache per 4 cores. */
export const topoUncoreSingleSocketMultiNuma: CPUTopology = build({
  numCPUs: 16,
  numSockets: 1,
  numCores: 16,
  numUncoreCache: 4,
  cpu: (i) => [i, 0, i < 8 ? 0 : 1, Math.floor(i / 4)],
});

/** 1 socket, 1 NUMA node, 8 cores with 2 threads (k, k+8), uncore 0 = cores 0-3, 1 = cores 4-7. */
export const topoUncoreSingleSocketSMT: CPUTopology = build({
  numCPUs: 16,
  numSockets: 1,
  numCores: 8,
  numUncoreCache: 2,
  cpu: (i) => [i % 8, 0, 0, Math.floor((i % 8) / 4)],
});

/** 1 socket, 1 NUMA node, 16 cores without SMT, an uncore cache per 4 cores. */
export const topoUncoreSingleSocketNoSMT: CPUTopology = build({
  numCPUs: 16,
  numSockets: 1,
  numCores: 16,
  numUncoreCache: 4,
  cpu: (i) => [i, 0, 0, Math.floor(i / 4)],
});

/**
 * Dual Xeon Gold 6230 (SNC on): 2 sockets, 4 NUMA nodes, 40 cores with 2 threads (k, k+40);
 * node n holds 10n..10n+9 and their siblings, nodes 0-1 on socket 0.
 */
export const topoDualSocketMultiNumaPerSocketHT: CPUTopology = build({
  numCPUs: 80,
  numSockets: 2,
  numCores: 40,
  numNUMANodes: 4,
  cpu: (i) => {
    const core = i % 40;
    return [core, core < 20 ? 0 : 1, Math.floor(core / 10), 0];
  },
});

/** upstream's fake inverse of the above: 4 sockets of 10 cores, 2 NUMA nodes of 2 sockets each. */
export const fakeTopoMultiSocketDualSocketPerNumaHT: CPUTopology = build({
  numCPUs: 80,
  numSockets: 4,
  numCores: 40,
  numNUMANodes: 2,
  cpu: (i) => {
    const core = i % 40;
    return [core, Math.floor(core / 10), core < 20 ? 0 : 1, 0];
  },
});

/** Dual AMD EPYC 7742 (NPS=4): 2 sockets, 8 NUMA nodes of 16 cores, threads k and k+128. */
export const topoDualSocketMultiNumaPerSocketHTLarge: CPUTopology = build({
  numCPUs: 256,
  numSockets: 2,
  numCores: 128,
  numNUMANodes: 8,
  cpu: (i) => {
    const core = i % 128;
    return [core, core < 64 ? 0 : 1, Math.floor(core / 16), 0];
  },
});

/** upstream's topoQuadSocketFourWayHT (Xeon Phi KNL SNC4): "coreID:socket:threads" per core. */
const QUAD = `
  0:0:0,109,169,229 1:0:50,110,170,230 2:1:51,111,171,231 3:1:52,112,172,232
  4:2:53,113,173,233 5:2:54,114,174,234 6:3:55,115,175,235 7:3:56,116,176,236
  8:0:57,117,177,237 9:0:58,118,178,238 10:1:59,119,179,239 11:1:60,120,180,240
  12:2:61,121,181,241 13:2:62,122,182,242 14:3:63,123,183,243 15:3:64,124,184,244
  18:1:65,125,185,245 19:1:66,126,186,246 20:2:67,127,187,247 21:2:68,128,188,248
  22:3:69,129,189,249 23:3:70,130,190,250 24:0:71,131,191,251 25:0:72,132,192,252
  26:1:73,133,193,253 27:1:74,134,194,254 28:2:75,135,195,255 29:2:76,136,196,256
  30:3:77,137,197,257 31:3:78,138,198,258 32:0:79,139,199,259 33:0:80,140,200,260
  34:1:81,141,201,261 35:1:82,142,202,262 36:2:83,143,203,263 37:2:84,144,204,264
  38:3:85,145,205,265 39:3:86,146,206,266 40:0:87,147,207,267 41:0:88,148,208,268
  42:1:89,149,209,269 43:1:90,150,210,270 44:2:91,151,211,271 45:2:92,152,212,272
  46:3:93,153,213,273 47:3:94,154,214,274 48:0:95,155,215,275 49:0:96,156,216,276
  50:1:97,157,217,277 51:1:98,158,218,278 52:2:99,159,219,279 53:2:100,160,220,280
  54:3:101,161,221,281 55:3:102,162,222,282 56:0:103,163,223,283 57:0:104,164,224,284
  60:2:105,165,225,285 61:2:106,166,226,286 62:3:107,167,227,287 63:3:37,108,168,228
  64:0:1,13,25,38 65:0:2,14,26,39 66:1:3,15,27,40 67:1:4,16,28,41 68:2:5,17,29,42
  69:2:6,18,30,43 70:3:7,19,31,44 71:3:8,20,32,45 72:0:9,21,33,46 73:0:10,22,34,47
  74:1:11,23,35,48 75:1:12,24,36,49
`;

/** 4 sockets = 4 NUMA nodes, 72 cores of 4 threads, with upstream's irregular numbering. */
export const topoQuadSocketFourWayHT: CPUTopology = (() => {
  const byCPU = new Map<number, readonly [number, number, number, number]>();
  for (const entry of QUAD.trim().split(/\s+/)) {
    const [core, socket, threads] = entry.split(":");
    for (const t of threads!.split(",")) {
      byCPU.set(Number(t), [Number(core), Number(socket), Number(socket), 0]);
    }
  }
  return build(
    { numCPUs: 288, numSockets: 4, numCores: 72, cpu: (i) => byCPU.get(i)! },
    byCPU.keys(),
  );
})();

/** One NUMA node's extra files; the defaults are documented on {@link writeNumaMachine}. */
export interface FixtureNode {
  /** meminfo MemTotal in kB; null leaves `meminfo` out. */
  memTotalKb?: number | null;
  /** Page size in kB to nr_hugepages. */
  hugePages?: Readonly<Record<number, number>>;
  /** The `distance` row; null leaves the file out. */
  distances?: readonly number[] | null;
}

/** A machine to write as a sysfs tree. */
export interface NumaMachine {
  /** Each CPU's NUMA node, socket and core (the core id becomes a per-socket sysfs core_id). */
  topology: CPUTopology;
  /**
   * Where each CPU's L3 is: "uncore" gives CPUs of one `uncoreCacheID` one L3 (id = that id);
   * "socket" gives each socket one L3 (id = socket id), as on most Intel parts.
   * @default "socket"
   */
  l3?: "uncore" | "socket";
  /** Per NUMA node id. */
  nodes?: Readonly<Record<number, FixtureNode>>;
  /** CPUs written as present but offline (left out of cpu/online). */
  offline?: readonly number[];
  /** Leave out /sys/devices/system/node (a kernel without NUMA). @default false */
  noNodeDir?: boolean;
  /** Leave out /proc/cpuinfo, as on arm64 whose cpuinfo has no "physical id". @default false */
  noCpuinfo?: boolean;
}

/** MemTotal every node gets by default: 16 GiB. */
export const FIXTURE_NODE_MEM_KB = 16 * 1024 * 1024;
/** nr_hugepages every node gets by default: 2 MiB pages: 64, 1 GiB pages: 1. */
export const FIXTURE_NODE_HUGEPAGES: Readonly<Record<number, number>> = { 2048: 64, 1048576: 1 };

/** The kernel's cpumask format: 32-bit hex words, most significant first, comma-separated. */
function cpumask(cpus: Iterable<number>, nrCPUs: number): string {
  const words = new Array<number>(Math.max(1, Math.ceil(nrCPUs / 32))).fill(0);
  for (const c of cpus) {
    const w = Math.floor(c / 32);
    words[w] = (words[w]! | (1 << (c % 32))) >>> 0;
  }
  const last = words.length - 1;
  const width = nrCPUs % 32 === 0 ? 8 : Math.ceil((nrCPUs % 32) / 4);
  return words.reverse()
    .map((w, i) => w.toString(16).padStart(i === 0 && last >= 0 ? width : 8, "0"))
    .join(",");
}

/** A cpu list in the kernel's format ("0-3,8"). */
function cpulist(cpus: Iterable<number>): string {
  const sorted = [...new Set(cpus)].sort((a, b) => a - b);
  const parts: string[] = [];
  for (let i = 0; i < sorted.length; i++) {
    const start = sorted[i]!;
    while (sorted[i + 1] === sorted[i]! + 1) i++;
    parts.push(start === sorted[i] ? `${start}` : `${start}-${sorted[i]}`);
  }
  return parts.join(",");
}

async function put(root: string, path: string, content: string): Promise<void> {
  const full = join(root, path);
  await Deno.mkdir(join(full, ".."), { recursive: true });
  await Deno.writeTextFile(full, content + "\n");
}

/**
 * Writes `m` under `root` (a new temporary directory when omitted) and returns the root:
 * for each CPU `cpu/cpuN/topology/{core_id,physical_package_id,thread_siblings_list}` (core_id
 * numbered per socket, as the kernel does), `cpu/cpuN/cache/index0-3` (L1d, L1i and L2 per core,
 * L3 per {@link NumaMachine.l3}, each with id, level, type, size and shared_cpu_map/list),
 * `cpu/online`, `cpu/present`; for each NUMA node `node/nodeN/{cpuN -> ../../cpu/cpuN, cpulist,
 * meminfo, distance, hugepages/hugepages-<kB>kB/nr_hugepages}` with MemTotal
 * {@link FIXTURE_NODE_MEM_KB}, hugepages {@link FIXTURE_NODE_HUGEPAGES} and distances 10 to
 * itself, 12 within a socket, 32 across sockets unless {@link NumaMachine.nodes} says otherwise;
 * and /proc/cpuinfo with a "physical id" and "core id" per online CPU.
 */
export async function writeNumaMachine(m: NumaMachine, root?: string): Promise<string> {
  root ??= await Deno.makeTempDir({ prefix: "numa-fixture-" });
  const d = m.topology.cpuDetails;
  const all = d.cpus().list();
  const nrCPUs = (all.at(-1) ?? -1) + 1;
  const offline = new Set(m.offline ?? []);
  const cpuDir = "sys/devices/system/cpu";
  await put(root, `${cpuDir}/online`, cpulist(all.filter((c) => !offline.has(c))));
  await put(root, `${cpuDir}/present`, cpulist(all));

  // sysfs core_id restarts in each package: number a socket's cores by their lowest thread.
  const sysCoreID = new Map<number, number>();
  for (const s of d.sockets().list()) {
    const cores = d.coresInSockets(s).list().sort((a, b) =>
      d.cpusInCores(a).list()[0]! - d.cpusInCores(b).list()[0]!
    );
    cores.forEach((core, i) => sysCoreID.set(core, i));
  }
  const coreIndex = new Map(d.cores().list().map((c, i) => [c, i]));
  const l3Of = (info: CPUInfo) => (m.l3 === "uncore" ? info.uncoreCacheID : info.socketID);
  let cpuinfo = "";
  for (const cpu of all) {
    const info = d.get(cpu)!;
    const siblings = d.cpusInCores(info.coreID).intersection(d.cpusInSockets(info.socketID));
    const l3 = d.cpus().filter((c) => l3Of(d.get(c)!) === l3Of(info));
    const base = `${cpuDir}/cpu${cpu}`;
    await put(root, `${base}/topology/core_id`, `${sysCoreID.get(info.coreID)}`);
    await put(root, `${base}/topology/physical_package_id`, `${info.socketID}`);
    await put(root, `${base}/topology/thread_siblings_list`, cpulist(siblings));
    const caches: [number, string, string, number, Iterable<number>][] = [
      [1, "Data", "48K", coreIndex.get(info.coreID)!, siblings],
      [1, "Instruction", "32K", coreIndex.get(info.coreID)!, siblings],
      [2, "Unified", "2048K", coreIndex.get(info.coreID)!, siblings],
      [3, "Unified", "32768K", l3Of(info), l3],
    ];
    for (const [i, [level, type, size, id, shared]] of caches.entries()) {
      const dir = `${base}/cache/index${i}`;
      await put(root, `${dir}/level`, `${level}`);
      await put(root, `${dir}/type`, type);
      await put(root, `${dir}/size`, size);
      await put(root, `${dir}/id`, `${id}`);
      await put(root, `${dir}/shared_cpu_map`, cpumask(shared, nrCPUs));
      await put(root, `${dir}/shared_cpu_list`, cpulist(shared));
    }
    if (!offline.has(cpu)) {
      cpuinfo += `processor\t: ${cpu}\nphysical id\t: ${info.socketID}\n` +
        `core id\t\t: ${sysCoreID.get(info.coreID)}\n\n`;
    }
  }
  if (!m.noCpuinfo) await put(root, "proc/cpuinfo", cpuinfo.trimEnd());
  if (m.noNodeDir) return root;

  const numas = d.numaNodes().list();
  const socketOf = (n: number) => d.get(d.cpusInNUMANodes(n).list()[0]!)!.socketID;
  for (const n of numas) {
    const spec = m.nodes?.[n] ?? {};
    const dir = join(root, `sys/devices/system/node/node${n}`);
    await Deno.mkdir(dir, { recursive: true });
    const cpus = d.cpusInNUMANodes(n).list();
    for (const c of cpus) await Deno.symlink(`../../cpu/cpu${c}`, join(dir, `cpu${c}`));
    await put(dir, "cpulist", cpulist(cpus));
    if (spec.memTotalKb !== null) {
      const kb = spec.memTotalKb ?? FIXTURE_NODE_MEM_KB;
      await put(
        dir,
        "meminfo",
        `Node ${n} MemTotal:       ${kb} kB\nNode ${n} MemFree:        ${Math.floor(kb / 2)} kB`,
      );
    }
    if (spec.distances !== null) {
      const row = spec.distances ??
        numas.map((o) => o === n ? 10 : socketOf(o) === socketOf(n) ? 12 : 32);
      await put(dir, "distance", row.join(" "));
    }
    for (const [kb, count] of Object.entries(spec.hugePages ?? FIXTURE_NODE_HUGEPAGES)) {
      await put(dir, `hugepages/hugepages-${kb}kB/nr_hugepages`, `${count}`);
    }
  }
  return root;
}

/** 1 socket, 1 NUMA node, 4 cores with HT (8 CPUs); {@link topoSingleSocketHT}. */
export const MACHINE_SINGLE_SOCKET_HT: NumaMachine = { topology: topoSingleSocketHT };

/** 2 sockets, 2 NUMA nodes, 12 CPUs with HT, an L3 per socket; {@link topoDualSocketHT}. */
export const MACHINE_DUAL_SOCKET_HT: NumaMachine = { topology: topoDualSocketHT };

/** 2 sockets with 2 NUMA nodes each (as AMD's NPS2), 80 CPUs; {@link topoDualSocketMultiNumaPerSocketHT}. */
export const MACHINE_DUAL_SOCKET_NPS2: NumaMachine = {
  topology: topoDualSocketMultiNumaPerSocketHT,
};

/** 1 socket, 2 NUMA nodes, 2 L3 ("uncore") caches per node; {@link topoUncoreSingleSocketMultiNuma}. */
export const MACHINE_SINGLE_SOCKET_TWO_NUMA_UNCORE: NumaMachine = {
  topology: topoUncoreSingleSocketMultiNuma,
  l3: "uncore",
};
