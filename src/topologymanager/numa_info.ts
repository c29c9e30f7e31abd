/**
 * @module
 * The machine's NUMA nodes as the hint merger sees them: their ids (whose full set is the
 * default affinity, "any node") and, with `prefer-closest-numa-nodes`, their distances, by
 * which two equally wide node sets are ranked. The nodes and distances come from the machine
 * topology reader (sysfs `node<N>/distance`); a distance row is indexed by node id, as upstream
 * indexes cadvisor's. Corresponds to upstream `pkg/kubelet/cm/topologymanager/numa_info.go`.
 */

import { BitMask } from "./bitmask.ts";
import type { PolicyOptions } from "./policy_options.ts";

/** Each node's distances to every node, indexed by node id (upstream NUMADistances). */
export type NumaDistances = ReadonlyMap<number, readonly number[]>;

/** What the topology manager is told about the machine. */
export interface NumaTopology {
  /** The NUMA node ids. */
  readonly nodes: readonly number[];
  /** Each node's distance row; may be absent unless `prefer-closest-numa-nodes` is set. */
  readonly distances: NumaDistances;
}

/** A node without a distance row while `prefer-closest-numa-nodes` is set. */
export class NumaInfoError extends Error {
  override name = "NumaInfoError";
}

/**
 * Mean distance over every ordered pair of the mask's nodes, self-pairs included (upstream
 * CalculateAverageFor); 0 for an empty mask. A missing distance counts as 0 (upstream would
 * index out of range).
 */
export function calculateAverageFor(distances: NumaDistances, mask: BitMask): number {
  if (mask.count() === 0) return 0;
  const bits = mask.getBits();
  let sum = 0;
  let count = 0;
  for (const n1 of bits) {
    const row = distances.get(n1);
    for (const n2 of bits) {
      sum += row?.[n2] ?? 0;
      count++;
    }
  }
  return sum / count;
}

/** The NUMA nodes and how to rank sets of them (upstream NUMAInfo). */
export class NumaInfo {
  constructor(
    readonly nodes: readonly number[],
    readonly distances: NumaDistances,
  ) {}

  /** The narrower mask (fewer nodes, then lower ones); `m2` when neither is narrower. */
  narrowest(m1: BitMask, m2: BitMask): BitMask {
    return m1.isNarrowerThan(m2) ? m1 : m2;
  }

  /**
   * The narrower mask; between equally wide ones, the one with the shorter average distance,
   * then the lower one (`m2` when both tie).
   */
  closest(m1: BitMask, m2: BitMask): BitMask {
    if (m1.count() !== m2.count()) return this.narrowest(m1, m2);
    const d1 = calculateAverageFor(this.distances, m1);
    const d2 = calculateAverageFor(this.distances, m2);
    if (d1 === d2) return m1.isLessThan(m2) ? m1 : m2;
    return d1 < d2 ? m1 : m2;
  }

  /** Every node: the affinity of a hint that does not care. */
  defaultAffinityMask(): BitMask {
    return BitMask.of(...this.nodes);
  }
}

/**
 * The NUMA info of `topology` (upstream NewNUMAInfo): distances are kept only with
 * `prefer-closest-numa-nodes`, and then every node must have a row. Throws
 * {@link NumaInfoError}, or BitMaskRangeError for a node id above 63.
 */
export function newNumaInfo(topology: NumaTopology, opts: PolicyOptions): NumaInfo {
  const distances = new Map<number, readonly number[]>();
  for (const node of topology.nodes) {
    if (!opts.preferClosestNuma) continue;
    const row = topology.distances.get(node);
    // Upstream's message names cadvisor, its topology source; kept for those who grep logs.
    if (row === undefined) throw new NumaInfoError("error getting NUMA distances from cadvisor");
    distances.set(node, row);
  }
  // A node id above 63 fails here rather than in every merge (upstream ignores the error).
  BitMask.of(...topology.nodes);
  return new NumaInfo([...topology.nodes], distances);
}
