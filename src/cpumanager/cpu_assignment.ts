/**
 * @module
 * Which CPUs an exclusive container gets: upstream's `cpumanager/cpu_assignment.go`, used by
 * the static policy. {@link takeByTopologyNUMAPacked} fills whole NUMA nodes and sockets first
 * (whichever is the larger unit on this machine), then whole uncore caches when asked, then
 * whole cores, then single threads from the fullest places; {@link takeByTopologyNUMADistributed}
 * (the `distribute-cpus-across-numa` policy option, KEP-2902) spreads a request evenly over the
 * fewest NUMA nodes that can hold it, in groups of `cpuGroupSize` CPUs. Both take the free CPUs
 * and a {@link CPUTopology} (see `topology.ts`) and return the chosen {@link CPUSet}; results
 * are the same as upstream's for the same input, which the ported test tables check.
 *
 * One difference: upstream's combination walk shares slices between iterations, so with 5 or
 * more NUMA nodes the combination it remembers as best can be overwritten by a later one; here
 * each combination is its own array. Where upstream would loop forever handing out remainder
 * groups no NUMA node can take any more, this gives up on that choice instead.
 */

import { CPUSet } from "./cpuset.ts";
import type { CPUDetails, CPUTopology } from "./topology.ts";

/**
 * How CPUs are ordered within a socket: "packed" fills a core's threads before the next core
 * (0, 6, 2, 8, ... on upstream's topoDualSocketHT); "spread" takes CPU ids in order across
 * cores (0, 2, 4, ...) and skips the whole-core step. "spread" is the
 * `distribute-cpus-across-cores` static policy option.
 */
export type CPUSortingStrategy = "packed" | "spread";

/** The request cannot be met; the message is upstream's. */
export class CPUAssignmentError extends Error {
  override name = "CPUAssignmentError";
}

/** Mean rounded to 3 decimals, as upstream rounds it. */
function mean(xs: readonly number[]): number {
  const m = xs.reduce((a, b) => a + b, 0) / xs.length;
  return Math.round(m * 1000) / 1000;
}

/** Population standard deviation rounded to 3 decimals, as upstream computes the balance score. */
function standardDeviation(xs: readonly number[]): number {
  const m = mean(xs);
  const s = Math.sqrt(xs.reduce((a, x) => a + (x - m) * (x - m), 0) / xs.length);
  return Math.round(s * 1000) / 1000;
}

/**
 * Calls `f` on every k-element combination of `n` in lexical order of positions ({0,1}, {0,2},
 * {1,2} for n = [0, 1, 2], k = 2) until it returns true.
 */
function iterateCombinations(n: readonly number[], k: number, f: (c: number[]) => boolean) {
  if (k < 1) return;
  const walk = (start: number, accum: number[]): boolean => {
    if (accum.length === k) return f([...accum]);
    for (let i = start; i <= n.length - (k - accum.length); i++) {
      if (walk(i + 1, [...accum, n[i]!])) return true;
    }
    return false;
  };
  walk(0, []);
}

/**
 * The state of one assignment (upstream's cpuAccumulator): the free CPUs left (`details`), what
 * is taken (`result`) and how many are still needed. Exported for its tests; the policy uses the
 * two take functions.
 */
export class CPUAccumulator {
  /** The whole machine; never changes. */
  readonly topo: CPUTopology;
  /** The free CPUs not yet taken. */
  details: CPUDetails;
  numCPUsNeeded: number;
  result: CPUSet = new CPUSet();
  /** NUMA nodes are the larger unit (they hold one socket or more): take them first. */
  readonly #numaFirst: boolean;
  readonly #strategy: CPUSortingStrategy;

  constructor(
    topo: CPUTopology,
    availableCPUs: CPUSet,
    numCPUs: number,
    strategy: CPUSortingStrategy,
  ) {
    this.topo = topo;
    this.details = topo.cpuDetails.keepOnly(availableCPUs);
    this.numCPUsNeeded = numCPUs;
    this.#numaFirst = topo.numSockets >= topo.numNUMANodes;
    this.#strategy = strategy;
  }

  /** Sorts `ids` by their free CPU count, then id, ascending. */
  #sort(ids: number[], cpusOf: (...ids: number[]) => CPUSet): number[] {
    const size = new Map(ids.map((id) => [id, cpusOf(id).size]));
    return ids.sort((a, b) => size.get(a)! - size.get(b)! || a - b);
  }

  /** NUMA nodes with a free CPU, emptiest first, grouped by socket when sockets are larger. */
  sortAvailableNUMANodes(): number[] {
    const d = this.details;
    if (this.#numaFirst) return this.#sort(d.numaNodes().list(), d.cpusInNUMANodes.bind(d));
    return this.sortAvailableSockets().flatMap((s) =>
      this.#sort(d.numaNodesInSockets(s).list(), d.cpusInNUMANodes.bind(d))
    );
  }

  /** Sockets with a free CPU, emptiest first, grouped by NUMA node when nodes are larger. */
  sortAvailableSockets(): number[] {
    const d = this.details;
    if (!this.#numaFirst) return this.#sort(d.sockets().list(), d.cpusInSockets.bind(d));
    return this.sortAvailableNUMANodes().flatMap((n) =>
      this.#sort(d.socketsInNUMANodes(n).list(), d.cpusInSockets.bind(d))
    );
  }

  /** Cores with a free CPU, emptiest first, within the order of their socket or NUMA node. */
  sortAvailableCores(): number[] {
    const d = this.details;
    if (this.#numaFirst) {
      return this.sortAvailableSockets().flatMap((s) =>
        this.#sort(d.coresInSockets(s).list(), d.cpusInCores.bind(d))
      );
    }
    return this.sortAvailableNUMANodes().flatMap((n) =>
      this.#sort(d.coresInNUMANodes(n).list(), d.cpusInCores.bind(d))
    );
  }

  /** Uncore caches with a free CPU, emptiest first, within the order of their NUMA node. */
  sortAvailableUncoreCaches(): number[] {
    const d = this.details;
    return this.sortAvailableNUMANodes().flatMap((n) =>
      this.#sort(d.uncoreInNUMANodes(n).list(), d.cpusInUncoreCaches.bind(d))
    );
  }

  /** Free CPUs in the order single threads are taken (per the sorting strategy). */
  freeCPUs(): number[] {
    const d = this.details;
    if (this.#strategy === "packed") {
      return this.sortAvailableCores().flatMap((c) => d.cpusInCores(c).list());
    }
    return this.sortAvailableSockets().flatMap((s) => d.cpusInSockets(s).list());
  }

  /** NUMA nodes all of whose CPUs are free. */
  freeNUMANodes(): number[] {
    const all = this.topo.cpuDetails;
    return this.sortAvailableNUMANodes().filter((n) =>
      this.details.cpusInNUMANodes(n).size === all.cpusInNUMANodes(n).size
    );
  }

  /** Sockets all of whose CPUs are free. */
  freeSockets(): number[] {
    return this.sortAvailableSockets().filter((s) =>
      this.details.cpusInSockets(s).size === this.topo.cpusPerSocket()
    );
  }

  /** Uncore caches all of whose CPUs are free. */
  freeUncoreCaches(): number[] {
    const all = this.topo.cpuDetails;
    return this.sortAvailableUncoreCaches().filter((u) =>
      this.details.cpusInUncoreCaches(u).size === all.cpusInUncoreCaches(u).size
    );
  }

  /** Cores all of whose threads are free. */
  freeCores(): number[] {
    return this.sortAvailableCores().filter((c) =>
      this.details.cpusInCores(c).size === this.topo.cpusPerCore()
    );
  }

  /** Moves `cpus` from the free CPUs to the result. */
  take(cpus: CPUSet): void {
    this.result = this.result.union(cpus);
    this.details = this.details.keepOnly(this.details.cpus().difference(this.result));
    this.numCPUsNeeded -= cpus.size;
  }

  /** True when at least `n` more CPUs are needed. */
  needsAtLeast(n: number): boolean {
    return this.numCPUsNeeded >= n;
  }

  /** True when nothing more is needed. */
  isSatisfied(): boolean {
    return this.numCPUsNeeded < 1;
  }

  /** True when fewer CPUs are free than still needed. */
  isFailed(): boolean {
    return this.numCPUsNeeded > this.details.size;
  }

  #takeWhole(ids: number[], cpusOf: (id: number) => CPUSet): void {
    for (const id of ids) {
      const cpus = cpusOf(id);
      if (this.needsAtLeast(cpus.size)) this.take(cpus);
    }
  }

  takeFullNUMANodes(): void {
    this.#takeWhole(this.freeNUMANodes(), (n) => this.topo.cpuDetails.cpusInNUMANodes(n));
  }

  takeFullSockets(): void {
    this.#takeWhole(this.freeSockets(), (s) => this.topo.cpuDetails.cpusInSockets(s));
  }

  takeFullUncore(): void {
    this.#takeWhole(this.freeUncoreCaches(), (u) => this.topo.cpuDetails.cpusInUncoreCaches(u));
  }

  takeFullCores(): void {
    this.#takeWhole(this.freeCores(), (c) => this.topo.cpuDetails.cpusInCores(c));
  }

  /** Whole sockets or NUMA nodes, whichever is larger, then the other. */
  takeFullFirstLevel(): void {
    if (this.#numaFirst) this.takeFullNUMANodes();
    else this.takeFullSockets();
  }

  takeFullSecondLevel(): void {
    if (this.#numaFirst) this.takeFullSockets();
    else this.takeFullNUMANodes();
  }

  /** Takes the rest from the lowest free cores of `uncoreID` when they can hold all of it. */
  takePartialUncore(uncoreID: number): void {
    const perCore = this.topo.cpusPerCore();
    const numCoresNeeded = Math.trunc((this.numCPUsNeeded + perCore - 1) / perCore);
    const freeCores = this.details.coresNeededInUncoreCache(numCoresNeeded, uncoreID);
    let freeCPUs = this.details.cpusInCores(...freeCores.list());
    // An odd request on SMT leaves the last core's second thread out.
    if (this.numCPUsNeeded % 2 !== 0 && perCore > 1) {
      const sorted = freeCPUs.list();
      if (sorted.length > this.numCPUsNeeded) freeCPUs = new CPUSet(sorted.slice(0, -1));
    }
    if (this.numCPUsNeeded === freeCPUs.size) this.take(freeCPUs);
  }

  /** Whole uncore caches while the request is at least one, then the first that fits the rest. */
  takeUncoreCache(): void {
    const perUncore = this.topo.cpusPerUncore();
    for (const uncore of this.sortAvailableUncoreCaches()) {
      if (this.needsAtLeast(perUncore)) this.takeFullUncore();
      if (this.isSatisfied()) return;
      this.takePartialUncore(uncore);
      if (this.isSatisfied()) return;
    }
  }

  /** Single threads in {@link freeCPUs} order until satisfied. */
  takeRemainingCPUs(): void {
    for (const cpu of this.freeCPUs()) {
      this.take(CPUSet.of(cpu));
      if (this.isSatisfied()) return;
    }
  }

  /** Fewest and most NUMA nodes a distributed request in groups of `groupSize` can use. */
  rangeNUMANodesNeededToSatisfy(groupSize: number): [number, number] {
    const div = (a: number, b: number) => Math.trunc(a / b);
    const numNUMANodes = this.topo.cpuDetails.numaNodes().size;
    const numNUMANodesAvailable = this.details.numaNodes().size;
    const numCPUs = this.topo.cpuDetails.size;
    const numCPUGroups = div(numCPUs - 1, groupSize) + 1;
    const groupsPerNUMANode = div(numCPUGroups - 1, numNUMANodes) + 1;
    const groupsNeeded = div(this.numCPUsNeeded - 1, groupSize) + 1;
    const min = div(groupsNeeded - 1, groupsPerNUMANode) + 1;
    return [min, Math.min(groupsNeeded, numNUMANodesAvailable)];
  }
}

function notEnough(numCPUs: number, available: CPUSet): CPUAssignmentError {
  return new CPUAssignmentError(
    `not enough cpus available to satisfy request: requested=${numCPUs}, available=${available.size}`,
  );
}

/**
 * `numCPUs` CPUs of `availableCPUs`, packed onto as few NUMA nodes, sockets, uncore caches (when
 * `preferAlignByUncoreCache`, the `prefer-align-cpus-by-uncorecache` option) and cores as
 * possible; the empty set for 0. Throws {@link CPUAssignmentError} "not enough cpus available
 * to satisfy request: requested=N, available=M".
 */
export function takeByTopologyNUMAPacked(
  topo: CPUTopology,
  availableCPUs: CPUSet,
  numCPUs: number,
  strategy: CPUSortingStrategy = "packed",
  preferAlignByUncoreCache = false,
): CPUSet {
  const acc = new CPUAccumulator(topo, availableCPUs, numCPUs, strategy);
  if (acc.isSatisfied()) return acc.result;
  if (acc.isFailed()) throw notEnough(numCPUs, availableCPUs);
  acc.takeFullFirstLevel();
  if (acc.isSatisfied()) return acc.result;
  acc.takeFullSecondLevel();
  if (acc.isSatisfied()) return acc.result;
  if (preferAlignByUncoreCache) {
    acc.takeUncoreCache();
    if (acc.isSatisfied()) return acc.result;
  }
  if (strategy !== "spread") {
    acc.takeFullCores();
    if (acc.isSatisfied()) return acc.result;
  }
  acc.takeRemainingCPUs();
  if (acc.isSatisfied()) return acc.result;
  throw new CPUAssignmentError("failed to allocate cpus");
}

/**
 * Hands `remainder` CPUs out in groups of `groupSize`, one group per node of `subset` per pass,
 * from the counts in `available` (changed in place); false when no node can take a group.
 */
function spreadRemainder(
  available: Map<number, number>,
  subset: readonly number[],
  remainder: number,
  groupSize: number,
): boolean {
  while (remainder > 0) {
    let progressed = false;
    for (const numa of subset) {
      if (remainder === 0) break;
      if (available.get(numa)! < groupSize) continue;
      available.set(numa, available.get(numa)! - groupSize);
      remainder -= groupSize;
      progressed = true;
    }
    if (!progressed) return false;
  }
  return true;
}

/**
 * `numCPUs` CPUs of `availableCPUs` spread evenly, in groups of `cpuGroupSize` (the CPUs of a
 * core, to keep cores whole), over the fewest NUMA nodes that can hold them, choosing among
 * equally many nodes the ones that leave the free CPUs most balanced. Falls back to
 * {@link takeByTopologyNUMAPacked} when `numCPUs` is not a multiple of `cpuGroupSize` or no
 * even spread exists. Throws {@link CPUAssignmentError} as that does.
 */
export function takeByTopologyNUMADistributed(
  topo: CPUTopology,
  availableCPUs: CPUSet,
  numCPUs: number,
  cpuGroupSize: number,
  strategy: CPUSortingStrategy = "packed",
): CPUSet {
  if (numCPUs % cpuGroupSize !== 0) {
    return takeByTopologyNUMAPacked(topo, availableCPUs, numCPUs, strategy, false);
  }
  const acc = new CPUAccumulator(topo, availableCPUs, numCPUs, strategy);
  if (acc.isSatisfied()) return acc.result;
  if (acc.isFailed()) throw notEnough(numCPUs, availableCPUs);

  const numas = acc.sortAvailableNUMANodes();
  const free = (numa: number) => acc.details.cpusInNUMANodes(numa).size;
  const [minNUMAs, maxNUMAs] = acc.rangeNUMANodesNeededToSatisfy(cpuGroupSize);
  const evenShare = (k: number) =>
    Math.trunc(Math.trunc(numCPUs / k) / cpuGroupSize) * cpuGroupSize;

  for (let k = minNUMAs; k <= maxNUMAs; k++) {
    let bestBalance = Infinity;
    let bestRemainder: number[] = [];
    let bestCombo: number[] | undefined;
    iterateCombinations(numas, k, (combo) => {
      if (bestBalance === 0) return true;
      if (acc.details.cpusInNUMANodes(...combo).size < numCPUs) return false;
      const groups = combo.reduce((n, numa) => n + Math.trunc(free(numa) / cpuGroupSize), 0);
      if (groups * cpuGroupSize < numCPUs) return false;
      const distribution = evenShare(combo.length);
      if (combo.some((numa) => free(numa) < distribution)) return false;

      // Free CPUs per NUMA node once each node of the combo gave its even share.
      const after = new Map(numas.map((n) => [n, free(n)]));
      for (const numa of combo) after.set(numa, after.get(numa)! - distribution);
      const remainder = numCPUs - distribution * combo.length;
      const remainderCombo = combo.filter((numa) => after.get(numa)! >= cpuGroupSize);

      let bestLocalBalance = Infinity;
      let bestLocalRemainder: number[] = [];
      if (remainder === 0) bestLocalBalance = standardDeviation([...after.values()]);
      // Spread the remainder over as many nodes as possible: largest subsets first.
      for (let j = remainderCombo.length; remainder > 0 && j >= 1; j--) {
        iterateCombinations(remainderCombo, j, (subset) => {
          const avail = new Map(after);
          const total = subset.reduce((n, numa) => n + avail.get(numa)!, 0);
          if (total < remainder) return false;
          if (!spreadRemainder(avail, subset, remainder, cpuGroupSize)) return false;
          const balance = standardDeviation([...avail.values()]);
          if (balance < bestLocalBalance) {
            bestLocalBalance = balance;
            bestLocalRemainder = subset;
          }
          return false;
        });
      }
      if (bestLocalBalance < bestBalance) {
        bestBalance = bestLocalBalance;
        bestRemainder = bestLocalRemainder;
        bestCombo = combo;
      }
      return false;
    });
    if (bestCombo === undefined) continue;

    // Upstream ignores the packing errors here and takes nothing, which the checks below report.
    const packed = (numa: number, n: number) => {
      try {
        return takeByTopologyNUMAPacked(topo, acc.details.cpusInNUMANodes(numa), n, strategy);
      } catch {
        return new CPUSet();
      }
    };
    const distribution = evenShare(bestCombo.length);
    for (const numa of bestCombo) acc.take(packed(numa, distribution));
    let remainder = numCPUs - distribution * bestCombo.length;
    while (remainder > 0) {
      const before = remainder;
      for (const numa of bestRemainder) {
        if (remainder === 0) break;
        if (free(numa) < cpuGroupSize) continue;
        acc.take(packed(numa, cpuGroupSize));
        remainder -= cpuGroupSize;
      }
      if (remainder === before) break;
    }
    if (acc.numCPUsNeeded > 0) {
      throw new CPUAssignmentError(
        `accounting error, not enough CPUs allocated, remaining: ${acc.numCPUsNeeded}`,
      );
    }
    if (acc.numCPUsNeeded < 0) {
      throw new CPUAssignmentError(
        `accounting error, too many CPUs allocated, remaining: ${acc.numCPUsNeeded}`,
      );
    }
    return acc.result;
  }
  return takeByTopologyNUMAPacked(topo, availableCPUs, numCPUs, strategy, false);
}
