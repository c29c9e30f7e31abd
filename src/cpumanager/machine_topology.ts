/**
 * @module
 * The machine's NUMA nodes, cores and caches as cAdvisor reads them from sysfs
 * (`sysinfo.GetNodesInfo` in `utils/sysinfo/sysinfo.go`, over `utils/sysfs/sysfs.go`), in the
 * shape of cAdvisor's `info.Node` and `info.Core` (`info/v1/machine.go`).
 *
 * {@link readMachineTopology} makes one entry per `/sys/devices/system/node/nodeN`, in the
 * lexical order Go's glob gives, holding the node's online CPUs (its `cpuN` links) grouped into
 * cores by `(core_id, physical_package_id)`, each core's uncore cache (the first
 * level-3-or-higher cache of its first thread whose `shared_cpu_map` spans fewer CPUs than the
 * node has), `meminfo` MemTotal, per-node hugepages and the `distance` row. Without any node
 * directory, one node per physical package, with no memory, hugepages or distances (cAdvisor's
 * `getCPUTopology`). The socket count is cAdvisor's `GetSockets`: distinct "physical id"s of
 * /proc/cpuinfo, else of the online CPUs' sysfs `physical_package_id`. Every path is under a
 * root so tests read the fixture trees of `testing/numa_fixtures.ts`. `topology.ts`'s
 * `discoverCPUTopology` (upstream `cpumanager/topology.Discover`) turns the result into the CPU
 * topology the managers use.
 */

import { join } from "node:path";
import { CPUSet } from "./cpuset.ts";
import { hostRoot } from "../privilege/host_root.ts";

/** One physical core as cAdvisor reports it (`info.Core`). */
export interface CoreInfo {
  /** sysfs `core_id` (unique only within its package). */
  readonly id: number;
  readonly socketID: number;
  /** Its online logical CPUs, in the order sysfs lists them. */
  readonly threads: readonly number[];
  /** Its first uncore (L3, not node-wide) cache's id, when it has one. */
  readonly uncoreCacheID?: number;
}

/** One NUMA node as cAdvisor reports it (`info.Node`). */
export interface NUMANodeInfo {
  readonly id: number;
  readonly cores: readonly CoreInfo[];
  /** The node's online CPUs. */
  readonly cpus: CPUSet;
  /** MemTotal of the node's `meminfo`, bytes; 0 when the file is absent. */
  readonly memoryBytes: number;
  /** Preallocated hugepages of the node: page size in bytes to page count. */
  readonly hugePages: ReadonlyMap<number, number>;
  /** The node's row of the distance table; undefined when `distance` is absent. */
  readonly distances?: readonly number[];
}

/** What cAdvisor's MachineInfo holds of the machine's topology. */
export interface MachineTopology {
  /** Logical CPUs (cAdvisor `NumCores`): the online CPUs of all nodes. */
  readonly numCPUs: number;
  /** cAdvisor `NumSockets`. */
  readonly numSockets: number;
  readonly nodes: readonly NUMANodeInfo[];
  /** Files cAdvisor skips with a log line (no core_id, no cache info, ...), one line each. */
  readonly warnings: readonly string[];
}

/** The topology files hold something that cannot be used; the message names the file. */
export class TopologyError extends Error {
  override name = "TopologyError";
}

/** Reads the file, trimmed; undefined when it does not exist. */
async function readFile(path: string): Promise<string | undefined> {
  try {
    return (await Deno.readTextFile(path)).trim();
  } catch (e) {
    if (e instanceof Deno.errors.NotFound || e instanceof Deno.errors.NotADirectory) {
      return undefined;
    }
    throw new TopologyError(`cannot read ${path}: ${(e as Error).message}`, { cause: e });
  }
}

/** The names in `dir` matching `re`, in Go's glob (byte-wise) order; undefined when absent. */
async function listDir(dir: string, re: RegExp): Promise<string[] | undefined> {
  const names: string[] = [];
  try {
    for await (const e of Deno.readDir(dir)) if (re.test(e.name)) names.push(e.name);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound || e instanceof Deno.errors.NotADirectory) {
      return undefined;
    }
    throw new TopologyError(`cannot list ${dir}: ${(e as Error).message}`, { cause: e });
  }
  return names.sort((a, b) => a < b ? -1 : a > b ? 1 : 0);
}

/** strconv.Atoi of a file's trimmed content. */
function intOf(path: string, text: string): number {
  if (!/^[+-]?\d+$/.test(text)) {
    throw new TopologyError(`${path}: expected an integer, found ${JSON.stringify(text)}`);
  }
  return Number(text);
}

/** fmt.Sscanf("%d"): the leading integer, undefined when there is none. */
function leadingInt(text: string): number | undefined {
  const m = /^\s*([+-]?\d+)/.exec(text);
  return m ? Number(m[1]) : undefined;
}

/** Bits set in a sysfs `shared_cpu_map` ("00000000,0000ffff"); undefined when garbage. */
function maskCount(text: string): number | undefined {
  let n = 0;
  for (const part of text.split(",")) {
    const hex = part.trim();
    if (!/^[0-9a-fA-F]{1,16}$/.test(hex)) return undefined;
    for (const ch of hex) {
      let v = parseInt(ch, 16);
      for (; v; v >>= 1) n += v & 1;
    }
  }
  return n;
}

interface Reader {
  cpuRoot: string;
  online: CPUSet | undefined;
  warnings: string[];
}

/** Groups the online CPUs into cores (cAdvisor getCoresInfo). */
async function coresOf(r: Reader, cpus: readonly number[]): Promise<CoreInfo[]> {
  const cores: { id: number; socketID: number; threads: number[] }[] = [];
  for (const cpu of cpus) {
    if (r.online && !r.online.has(cpu)) continue;
    const dir = join(r.cpuRoot, `cpu${cpu}`, "topology");
    const coreFile = join(dir, "core_id");
    const rawCore = await readFile(coreFile);
    if (rawCore === undefined) {
      r.warnings.push(`cannot read core id for cpu${cpu}: ${coreFile} does not exist`);
      continue;
    }
    const pkgFile = join(dir, "physical_package_id");
    const rawPkg = await readFile(pkgFile);
    if (rawPkg === undefined) {
      r.warnings.push(`cannot read physical package id for cpu${cpu}: ${pkgFile} does not exist`);
      continue;
    }
    const id = intOf(coreFile, rawCore);
    const socketID = intOf(pkgFile, rawPkg);
    const core = cores.find((c) => c.id === id && c.socketID === socketID);
    if (core) core.threads.push(cpu);
    else cores.push({ id, socketID, threads: [cpu] });
  }
  return cores;
}

/**
 * Sets each core's uncore cache (cAdvisor addCacheInfo): a cache of level > 2 that does not span
 * the node's CPUs. As in cAdvisor, the first unreadable cache stops the reading for this and the
 * node's remaining cores, with a warning.
 */
async function withUncoreCaches(r: Reader, cores: CoreInfo[]): Promise<CoreInfo[]> {
  const out: CoreInfo[] = [];
  let failed = false;
  for (const core of cores) {
    if (failed) {
      out.push(core);
      continue;
    }
    const threadsPerNode = cores.length * core.threads.length;
    const cacheDir = join(r.cpuRoot, `cpu${core.threads[0]}`, "cache");
    let uncore: number | undefined;
    const problem = await (async () => {
      const names = await listDir(cacheDir, /^index/);
      if (names === undefined) return `${cacheDir} does not exist`;
      for (const name of names) {
        const dir = join(cacheDir, name);
        const fields: Record<string, string> = {};
        for (const f of ["id", "size", "level", "type", "shared_cpu_map"]) {
          const v = await readFile(join(dir, f));
          if (v === undefined) return `${join(dir, f)} does not exist`;
          fields[f] = v;
        }
        const id = leadingInt(fields.id!);
        const level = leadingInt(fields.level!);
        const cpus = maskCount(fields.shared_cpu_map!);
        if (id === undefined) return `${join(dir, "id")}: no integer in ${fields.id}`;
        if (level === undefined) return `${join(dir, "level")}: no integer in ${fields.level}`;
        if (cpus === undefined) {
          return `${join(dir, "shared_cpu_map")}: failed to parse cpu map ${fields.shared_cpu_map}`;
        }
        if (level > 2 && cpus !== threadsPerNode) uncore ??= id;
      }
      return undefined;
    })();
    if (problem !== undefined) {
      r.warnings.push(`no cache information for cpu${core.threads[0]}: ${problem}`);
      failed = true;
      out.push(core);
      continue;
    }
    out.push(uncore === undefined ? core : { ...core, uncoreCacheID: uncore });
  }
  return out;
}

/** Per-node hugepages (cAdvisor GetHugePagesInfo); none when the directory is absent. */
async function nodeHugePages(dir: string): Promise<Map<number, number>> {
  const out = new Map<number, number>();
  for (const name of (await listDir(dir, /^/)) ?? []) {
    const kb = name.split("-")[1]?.split("kB")[0] ?? "";
    if (!/^\d+$/.test(kb)) throw new TopologyError(`${join(dir, name)}: no page size in the name`);
    const file = join(dir, name, "nr_hugepages");
    const raw = await readFile(file);
    if (raw === undefined) throw new TopologyError(`cannot read ${file}: it does not exist`);
    const pages = leadingInt(raw);
    if (pages === undefined || pages < 0) {
      throw new TopologyError(`could not parse ${file}: contents ${JSON.stringify(raw)}`);
    }
    out.set(Number(kb) * 1024, pages);
  }
  return out;
}

async function nodeMemory(r: Reader, dir: string): Promise<number> {
  const file = join(dir, "meminfo");
  const raw = await readFile(file);
  if (raw === undefined) {
    r.warnings.push(`node without memory information: ${file} does not exist`);
    return 0;
  }
  const kb = /MemTotal:\s*([0-9]+) kB/.exec(raw)?.[1];
  if (kb === undefined) throw new TopologyError(`${file}: no "MemTotal: <n> kB" line`);
  return Number(kb) * 1024;
}

async function nodeDistances(r: Reader, dir: string): Promise<number[] | undefined> {
  const file = join(dir, "distance");
  const raw = await readFile(file);
  if (raw === undefined) {
    r.warnings.push(`node without distance information: ${file} does not exist`);
    return undefined;
  }
  return raw.split(" ").map((d) => {
    if (!/^\d+$/.test(d)) throw new TopologyError(`${file}: cannot convert ${d} to int`);
    return Number(d);
  });
}

/** cAdvisor GetSockets: /proc/cpuinfo's distinct "physical id"s, else sysfs packages. */
async function countSockets(root: string, r: Reader, cpuDirs: string[]): Promise<number> {
  const cpuinfo = (await readFile(join(root, "proc/cpuinfo"))) ?? "";
  const ids = new Set([...cpuinfo.matchAll(/^physical id\s*:\s*([0-9]+)$/gm)].map((m) => m[1]));
  if (ids.size > 0) return ids.size;
  const pkgs = new Set<string>();
  for (const name of cpuDirs) {
    if (r.online && !r.online.has(Number(name.slice(3)))) continue;
    pkgs.add(
      (await readFile(join(r.cpuRoot, name, "topology/physical_package_id"))) ?? "0",
    );
  }
  return pkgs.size;
}

/** Reads the machine's NUMA nodes, cores and caches under `root` (default the host's "/"). */
export async function readMachineTopology(root = hostRoot()): Promise<MachineTopology> {
  const cpuRoot = join(root, "sys/devices/system/cpu");
  const onlineFile = join(cpuRoot, "online");
  const rawOnline = await readFile(onlineFile);
  let online: CPUSet | undefined;
  if (rawOnline !== undefined) {
    try {
      online = CPUSet.parse(rawOnline);
    } catch (e) {
      throw new TopologyError(`${onlineFile}: ${(e as Error).message}`, { cause: e });
    }
    if (online.isEmpty()) throw new TopologyError(`${onlineFile} is empty`);
  }
  const r: Reader = { cpuRoot, online, warnings: [] };
  const cpuDirs = (await listDir(cpuRoot, /^cpu\d+$/)) ?? [];
  const numSockets = await countSockets(root, r, cpuDirs);
  const nodeRoot = join(root, "sys/devices/system/node");
  const nodeDirs = (await listDir(nodeRoot, /^node\d+$/)) ?? [];
  const nodes: NUMANodeInfo[] = [];
  if (nodeDirs.length === 0) {
    return { ...(await perPackage(r, cpuDirs)), numSockets, warnings: r.warnings };
  }
  let numCPUs = 0;
  for (const name of nodeDirs) {
    const dir = join(nodeRoot, name);
    let cpus = ((await listDir(dir, /^cpu\d+$/)) ?? []).map((n) => Number(n.slice(3)));
    if (cpus.length === 0) {
      // A memory-only node has neither links nor a cpulist; a tree with only the list is read too.
      const list = join(dir, "cpulist");
      const raw = await readFile(list);
      try {
        cpus = raw ? CPUSet.parse(raw).list() : [];
      } catch (e) {
        throw new TopologyError(`${list}: ${(e as Error).message}`, { cause: e });
      }
    }
    if (cpus.length === 0) r.warnings.push(`found node without any CPU: ${dir}`);
    const cores = await withUncoreCaches(r, await coresOf(r, cpus));
    const threads = cores.flatMap((c) => c.threads);
    numCPUs += threads.length;
    const distances = await nodeDistances(r, dir);
    nodes.push({
      id: Number(name.slice(4)),
      cores,
      cpus: new CPUSet(threads),
      memoryBytes: await nodeMemory(r, dir),
      hugePages: await nodeHugePages(join(dir, "hugepages")),
      ...(distances ? { distances } : {}),
    });
  }
  return { numCPUs, numSockets, nodes, warnings: r.warnings };
}

/**
 * cAdvisor's getCPUTopology for a machine without node directories: one node per physical
 * package (ordered by id here; Go's map order is random), and a CPU count of all CPU
 * directories, offline ones included, as cAdvisor counts them.
 */
async function perPackage(r: Reader, cpuDirs: string[]) {
  if (cpuDirs.length === 0) throw new TopologyError(`no CPU is available under ${r.cpuRoot}`);
  const byPackage = new Map<number, number[]>();
  for (const name of cpuDirs) {
    const file = join(r.cpuRoot, name, "topology/physical_package_id");
    const raw = await readFile(file);
    if (raw === undefined) {
      r.warnings.push(`cannot read physical package id for ${name}: ${file} does not exist`);
      continue;
    }
    const pkg = intOf(file, raw);
    byPackage.set(pkg, [...(byPackage.get(pkg) ?? []), Number(name.slice(3))]);
  }
  const nodes: NUMANodeInfo[] = [];
  for (const [id, cpus] of [...byPackage].sort(([a], [b]) => a - b)) {
    const cores = await withUncoreCaches(r, await coresOf(r, cpus));
    nodes.push({
      id,
      cores,
      cpus: new CPUSet(cores.flatMap((c) => c.threads)),
      memoryBytes: 0,
      hugePages: new Map(),
    });
  }
  return { numCPUs: cpuDirs.length, nodes };
}
