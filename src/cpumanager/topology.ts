/**
 * @module
 * The machine's CPU and NUMA topology as the CPU, memory and topology managers see it.
 *
 * {@link discoverCPUTopology} turns what `machine_topology.ts` read from sysfs (cAdvisor's
 * machine info) into a {@link CPUTopology}, as the kubelet's `cpumanager/topology.Discover`
 * does: a core's id is the lowest CPU id among its threads (platform-unique, unlike sysfs
 * `core_id`), its uncore cache id falls back to the socket id.
 *
 * {@link CPUDetails} carries upstream's queries (CPUsInNUMANodes, CoresInSockets, ...), and
 * {@link isAlignedAtUncoreCache} is upstream's `topology/alignment.go`.
 * Corresponds to upstream `pkg/kubelet/cm/cpumanager/topology/topology.go` and `alignment.go`.
 */

import { CPUSet } from "./cpuset.ts";
import { type MachineTopology, TopologyError } from "./machine_topology.ts";

/** The NUMA node, socket, core and uncore cache of one logical CPU (upstream `CPUInfo`). */
export interface CPUInfo {
  readonly numaNodeID: number;
  readonly socketID: number;
  /** The lowest CPU id among the core's threads (see {@link discoverCPUTopology}). */
  readonly coreID: number;
  /** The L3 ("uncore") cache id; the socket id when the L3 is node-wide or unknown. */
  readonly uncoreCacheID: number;
}

/** Logical CPU id to its {@link CPUInfo}, with upstream `CPUDetails`' queries. */
export class CPUDetails {
  readonly #m: ReadonlyMap<number, CPUInfo>;

  constructor(entries: Iterable<readonly [number, CPUInfo]> = []) {
    this.#m = new Map(entries);
  }

  /** Number of CPUs held. */
  get size(): number {
    return this.#m.size;
  }

  /** The info of `cpu`, undefined when not held. */
  get(cpu: number): CPUInfo | undefined {
    return this.#m.get(cpu);
  }

  /** (cpu, info) pairs. */
  entries(): IterableIterator<[number, CPUInfo]> {
    return this.#m.entries();
  }

  /** Only the CPUs in `cpus`. */
  keepOnly(cpus: CPUSet): CPUDetails {
    return new CPUDetails([...this.#m].filter(([cpu]) => cpus.has(cpu)));
  }

  #collect(pick: (cpu: number, info: CPUInfo) => number | undefined): CPUSet {
    const out: number[] = [];
    for (const [cpu, info] of this.#m) {
      const v = pick(cpu, info);
      if (v !== undefined) out.push(v);
    }
    return new CPUSet(out);
  }

  /** All logical CPU ids. */
  cpus(): CPUSet {
    return new CPUSet(this.#m.keys());
  }

  /** All NUMA node ids. */
  numaNodes(): CPUSet {
    return this.#collect((_, i) => i.numaNodeID);
  }

  /** All socket ids. */
  sockets(): CPUSet {
    return this.#collect((_, i) => i.socketID);
  }

  /** All core ids. */
  cores(): CPUSet {
    return this.#collect((_, i) => i.coreID);
  }

  /** All uncore cache ids. */
  uncoreCaches(): CPUSet {
    return this.#collect((_, i) => i.uncoreCacheID);
  }

  /** NUMA node ids of the given sockets. */
  numaNodesInSockets(...ids: number[]): CPUSet {
    return this.#collect((_, i) => ids.includes(i.socketID) ? i.numaNodeID : undefined);
  }

  /** Socket ids of the given NUMA nodes. */
  socketsInNUMANodes(...ids: number[]): CPUSet {
    return this.#collect((_, i) => ids.includes(i.numaNodeID) ? i.socketID : undefined);
  }

  /** Core ids of the given NUMA nodes. */
  coresInNUMANodes(...ids: number[]): CPUSet {
    return this.#collect((_, i) => ids.includes(i.numaNodeID) ? i.coreID : undefined);
  }

  /** Core ids of the given sockets. */
  coresInSockets(...ids: number[]): CPUSet {
    return this.#collect((_, i) => ids.includes(i.socketID) ? i.coreID : undefined);
  }

  /** Uncore cache ids of the given NUMA nodes (upstream UncoreInNUMANodes). */
  uncoreInNUMANodes(...ids: number[]): CPUSet {
    return this.#collect((_, i) => ids.includes(i.numaNodeID) ? i.uncoreCacheID : undefined);
  }

  /** Logical CPU ids of the given NUMA nodes. */
  cpusInNUMANodes(...ids: number[]): CPUSet {
    return this.#collect((c, i) => ids.includes(i.numaNodeID) ? c : undefined);
  }

  /** Logical CPU ids of the given sockets. */
  cpusInSockets(...ids: number[]): CPUSet {
    return this.#collect((c, i) => ids.includes(i.socketID) ? c : undefined);
  }

  /** Logical CPU ids of the given cores. */
  cpusInCores(...ids: number[]): CPUSet {
    return this.#collect((c, i) => ids.includes(i.coreID) ? c : undefined);
  }

  /** Logical CPU ids of the given uncore caches. */
  cpusInUncoreCaches(...ids: number[]): CPUSet {
    return this.#collect((c, i) => ids.includes(i.uncoreCacheID) ? c : undefined);
  }

  /** The cores of the given uncore caches, or the `n` lowest of them when there are more. */
  coresNeededInUncoreCache(n: number, ...ids: number[]): CPUSet {
    const cores = this.#collect((_, i) => ids.includes(i.uncoreCacheID) ? i.coreID : undefined);
    return cores.size <= n ? cores : new CPUSet(cores.list().slice(0, n));
  }
}

/** The fields of a {@link CPUTopology}, as upstream's struct literal sets them. */
export interface CPUTopologyInit {
  numCPUs: number;
  numCores: number;
  numSockets: number;
  /** @default 0 (upstream's test topologies leave it unset) */
  numNUMANodes?: number;
  /** @default 0 */
  numUncoreCache?: number;
  cpuDetails: CPUDetails;
}

/** Alignment of a CPU set (upstream `topology.Alignment`). */
export interface Alignment {
  /** All CPUs share one uncore cache (an empty or single-CPU set always does). */
  readonly uncoreCache: boolean;
}

/** A CPU set with its alignment (upstream `topology.Allocation`). */
export interface Allocation {
  readonly cpus: CPUSet;
  readonly aligned: Alignment;
}

/** The machine's logical CPUs, cores, sockets, NUMA nodes and uncore caches (upstream `CPUTopology`). */
export class CPUTopology {
  readonly numCPUs: number;
  readonly numCores: number;
  readonly numSockets: number;
  readonly numNUMANodes: number;
  readonly numUncoreCache: number;
  readonly cpuDetails: CPUDetails;

  constructor(init: CPUTopologyInit) {
    this.numCPUs = init.numCPUs;
    this.numCores = init.numCores;
    this.numSockets = init.numSockets;
    this.numNUMANodes = init.numNUMANodes ?? 0;
    this.numUncoreCache = init.numUncoreCache ?? 0;
    this.cpuDetails = init.cpuDetails;
  }

  /** Logical CPUs per core (0 without cores). */
  cpusPerCore(): number {
    return this.numCores === 0 ? 0 : Math.trunc(this.numCPUs / this.numCores);
  }

  /** Logical CPUs per socket (0 without sockets). */
  cpusPerSocket(): number {
    return this.numSockets === 0 ? 0 : Math.trunc(this.numCPUs / this.numSockets);
  }

  /** Logical CPUs per uncore cache (0 without uncore caches). */
  cpusPerUncore(): number {
    return this.numUncoreCache === 0 ? 0 : Math.trunc(this.numCPUs / this.numUncoreCache);
  }

  #info(cpu: number): CPUInfo {
    const info = this.cpuDetails.get(cpu);
    if (info === undefined) throw new RangeError(`unknown CPU ID: ${cpu}`);
    return info;
  }

  /** The core id of `cpu`; throws RangeError "unknown CPU ID: n". */
  cpuCoreID(cpu: number): number {
    return this.#info(cpu).coreID;
  }

  /** The socket id of `cpu`; throws RangeError "unknown CPU ID: n". */
  cpuSocketID(cpu: number): number {
    return this.#info(cpu).socketID;
  }

  /** The NUMA node id of `cpu`; throws RangeError "unknown CPU ID: n". */
  cpuNUMANodeID(cpu: number): number {
    return this.#info(cpu).numaNodeID;
  }

  /** The alignment of `cpus` on this machine. */
  checkAlignment(cpus: CPUSet): Alignment {
    return { uncoreCache: isAlignedAtUncoreCache(this, cpus) };
  }
}

/** True when all of `cpus` share one uncore cache; false when one is unknown to `topo`. */
export function isAlignedAtUncoreCache(topo: CPUTopology, cpus: CPUSet): boolean {
  const list = cpus.unsortedList();
  if (list.length <= 1) return true;
  const ref = topo.cpuDetails.get(list[0]!);
  if (ref === undefined) return false;
  return list.every((c) => topo.cpuDetails.get(c)?.uncoreCacheID === ref.uncoreCacheID);
}

/** The empty allocation, aligned every way (upstream `EmptyAllocation`). */
export function emptyAllocation(): Allocation {
  return { cpus: new CPUSet(), aligned: { uncoreCache: true } };
}

/**
 * The CPU topology of `machine` (upstream `topology.Discover`); throws TopologyError "could not
 * detect number of cpus" when it has none.
 */
export function discoverCPUTopology(machine: MachineTopology): CPUTopology {
  if (machine.numCPUs === 0) throw new TopologyError("could not detect number of cpus");
  const details: [number, CPUInfo][] = [];
  let numCores = 0;
  for (const node of machine.nodes) {
    numCores += node.cores.length;
    for (const core of node.cores) {
      if (core.threads.length === 0) throw new TopologyError("no cpus provided");
      if (new Set(core.threads).size !== core.threads.length) {
        throw new TopologyError("cpus provided are not unique");
      }
      const info: CPUInfo = {
        coreID: Math.min(...core.threads),
        socketID: core.socketID,
        numaNodeID: node.id,
        uncoreCacheID: core.uncoreCacheID ?? core.socketID,
      };
      for (const cpu of core.threads) details.push([cpu, info]);
    }
  }
  const cpuDetails = new CPUDetails(details);
  return new CPUTopology({
    numCPUs: machine.numCPUs,
    numSockets: machine.numSockets,
    numCores,
    numNUMANodes: cpuDetails.numaNodes().size,
    numUncoreCache: cpuDetails.uncoreCaches().size,
    cpuDetails,
  });
}
