/**
 * @module
 * Topology hints and their merging. A hint provider (the CPU, memory and device managers)
 * answers, per resource, the NUMA node sets it could allocate from, each marked preferred when
 * that set is as narrow as the request allows. A policy takes one hint from every resource, in
 * every combination, ANDs their node sets, and keeps the best result ({@link HintMerger}): a
 * preferred one over a non-preferred one, then the narrower (or, with
 * `prefer-closest-numa-nodes`, the closer) set; among non-preferred results the one whose width
 * is nearest to, without going above, the widest of the resources' narrowest hints. Whether the
 * best result admits the pod is each policy's own rule (policy_*.ts). Corresponds to upstream
 * `pkg/kubelet/cm/topologymanager/policy.go` and the TopologyHint of `topology_manager.go`.
 */

import type { Logger } from "../klog/klog.ts";
import type { BitMask } from "./bitmask.ts";
import type { NumaInfo } from "./numa_info.ts";
import type { PolicyOptions } from "./policy_options.ts";

/** Policy `none`: no alignment; providers allocate as they like. */
export const POLICY_NONE = "none";
/** Policy `best-effort`: the best hint is stored, and the pod admitted whatever it is. */
export const POLICY_BEST_EFFORT = "best-effort";
/** Policy `restricted`: the pod is refused unless the best hint is preferred. */
export const POLICY_RESTRICTED = "restricted";
/** Policy `single-numa-node`: the pod is refused unless everything fits on one NUMA node. */
export const POLICY_SINGLE_NUMA_NODE = "single-numa-node";

/** The `topologyManagerPolicy` values. */
export type PolicyName =
  | typeof POLICY_NONE
  | typeof POLICY_BEST_EFFORT
  | typeof POLICY_RESTRICTED
  | typeof POLICY_SINGLE_NUMA_NODE;

/** One possible placement of a resource (upstream TopologyHint). */
export interface TopologyHint {
  /** The NUMA nodes; undefined when the provider does not care where the resource goes. */
  readonly numaNodeAffinity: BitMask | undefined;
  /** Whether the placement is as narrow as the request allows. */
  readonly preferred: boolean;
}

/**
 * A provider's hints by resource name. An undefined or empty map, or an undefined list, means
 * "no preference"; an empty list means "cannot be placed at all".
 */
export type ProviderHints = ReadonlyMap<string, readonly TopologyHint[] | undefined> | undefined;

/** What a merge decides: the best hint and whether the policy admits it. */
export interface MergeResult {
  readonly hint: TopologyHint;
  readonly admit: boolean;
}

/** A topology manager policy (upstream Policy). */
export interface Policy {
  readonly name: PolicyName;
  /** Merges the hints of every provider into one, and says whether the pod may be admitted. */
  merge(providersHints: readonly ProviderHints[], logger: Logger): MergeResult;
}

/** Whether a policy refuses what it cannot align to one NUMA node (upstream IsAlignmentGuaranteed). */
export function isAlignmentGuaranteed(p: Policy): boolean {
  return p.name === POLICY_SINGLE_NUMA_NODE;
}

/** Whether two hints are the same (upstream TopologyHint.IsEqual). */
export function hintIsEqual(a: TopologyHint, b: TopologyHint): boolean {
  if (a.preferred !== b.preferred) return false;
  if (a.numaNodeAffinity === undefined || b.numaNodeAffinity === undefined) {
    return a.numaNodeAffinity === b.numaNodeAffinity;
  }
  return a.numaNodeAffinity.isEqual(b.numaNodeAffinity);
}

/**
 * Whether `a` ranks before `b`: preferred first, then the narrower mask (upstream
 * TopologyHint.LessThan). Both masks must be set when both hints are equally preferred.
 */
export function hintLessThan(a: TopologyHint, b: TopologyHint): boolean {
  if (a.preferred !== b.preferred) return a.preferred;
  return a.numaNodeAffinity!.isNarrowerThan(b.numaNodeAffinity!);
}

/** A hint as upstream's logs print it: `{NUMANodeAffinity:01 Preferred:true}`. */
export function formatHint(h: TopologyHint): string {
  return `{NUMANodeAffinity:${h.numaNodeAffinity?.toString() ?? "<nil>"} Preferred:${h.preferred}}`;
}

/** A provider's hints as upstream's logs print them: `map[cpu:[{...} {...}]]`. */
export function formatProviderHints(hints: ProviderHints): string {
  if (hints === undefined) return "map[]";
  // Go prints map keys sorted.
  const entries = [...hints].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `map[${
    entries.map(([r, hs]) => `${r}:[${(hs ?? []).map(formatHint).join(" ")}]`).join(" ")
  }]`;
}

/**
 * One hint list per resource, across providers (upstream filterProvidersHints): a provider
 * without hints, or a resource with an undefined list, counts as one preferred "any node" hint;
 * a resource with an empty list as one non-preferred "any node" hint.
 */
export function filterProvidersHints(
  providersHints: readonly ProviderHints[],
  logger: Logger,
): TopologyHint[][] {
  const all: TopologyHint[][] = [];
  for (const hints of providersHints) {
    if (hints === undefined || hints.size === 0) {
      logger.info("Hint Provider has no preference for NUMA affinity with any resource");
      all.push([{ numaNodeAffinity: undefined, preferred: true }]);
      continue;
    }
    for (const [resource, list] of hints) {
      if (list === undefined) {
        logger.info("Hint Provider has no preference for NUMA affinity with resource", {
          resource,
        });
        all.push([{ numaNodeAffinity: undefined, preferred: true }]);
      } else if (list.length === 0) {
        logger.info("Hint Provider has no possible NUMA affinities for resource", { resource });
        all.push([{ numaNodeAffinity: undefined, preferred: false }]);
      } else {
        all.push([...list]);
      }
    }
  }
  return all;
}

/**
 * One hint per resource merged into one (upstream mergePermutation): the AND of their masks
 * (undefined ones ignored) within `defaultAffinity`, preferred only when every hint is
 * preferred and every set mask is the same.
 */
export function mergePermutation(
  defaultAffinity: BitMask,
  permutation: readonly TopologyHint[],
): TopologyHint {
  let preferred = true;
  const masks: BitMask[] = [];
  for (const hint of permutation) {
    if (hint.numaNodeAffinity !== undefined) {
      masks.push(hint.numaNodeAffinity);
      if (!hint.numaNodeAffinity.isEqual(masks[0]!)) preferred = false;
    }
    if (!hint.preferred) preferred = false;
  }
  return { numaNodeAffinity: defaultAffinity.and(...masks), preferred };
}

/** The narrowest hint with a mask; the first of equals. */
function narrowestHint(hints: readonly TopologyHint[]): TopologyHint | undefined {
  let best: TopologyHint | undefined;
  for (const h of hints) {
    if (h.numaNodeAffinity === undefined) continue;
    if (best === undefined || h.numaNodeAffinity.isNarrowerThan(best.numaNodeAffinity!)) best = h;
  }
  return best;
}

/** The widest of the resources' narrowest masks: the width a non-preferred result aims at. */
export function maxOfMinAffinityCounts(
  filteredHints: readonly (readonly TopologyHint[])[],
): number {
  let max = 0;
  for (const hints of filteredHints) {
    const n = narrowestHint(hints)?.numaNodeAffinity?.count() ?? 0;
    if (n > max) max = n;
  }
  return max;
}

/**
 * Calls `callback` with every combination of one hint per resource, the first resource's
 * hints outermost (upstream iterateAllProviderTopologyHints). A resource with no hint yields no
 * combination at all.
 */
export function iterateAllProviderTopologyHints(
  allProviderHints: readonly (readonly TopologyHint[])[],
  callback: (permutation: readonly TopologyHint[]) => void,
): void {
  const accum: TopologyHint[] = [];
  const iterate = (i: number): void => {
    if (i === allProviderHints.length) {
      callback(accum);
      return;
    }
    for (const h of allProviderHints[i]!) {
      accum.push(h);
      iterate(i + 1);
      accum.pop();
    }
  };
  iterate(0);
}

/** Ranks merged hints and keeps the best (upstream HintMerger). */
export class HintMerger {
  /**
   * The width a non-preferred result should reach and not exceed: that of the resource whose
   * narrowest placement needs the most nodes. Tests set it directly.
   */
  bestNonPreferredAffinityCount: number;
  readonly #useClosest: boolean;

  constructor(
    readonly numaInfo: NumaInfo,
    readonly hints: readonly (readonly TopologyHint[])[],
    policyName: PolicyName,
    opts: PolicyOptions,
  ) {
    this.bestNonPreferredAffinityCount = maxOfMinAffinityCounts(hints);
    // single-numa-node only ever ranks one-node masks, between which distance says nothing.
    this.#useClosest = policyName !== POLICY_SINGLE_NUMA_NODE && opts.preferClosestNuma;
  }

  /** The fitter of two equally preferred hints' masks; `current` when they are equal. */
  compareNumaAffinityMasks(current: TopologyHint, candidate: TopologyHint): TopologyHint {
    const cur = current.numaNodeAffinity!;
    const cand = candidate.numaNodeAffinity!;
    if (cand.isEqual(cur)) return current;
    const best = this.#useClosest
      ? this.numaInfo.closest(cur, cand)
      : this.numaInfo.narrowest(cur, cand);
    return best.isEqual(cur) ? current : candidate;
  }

  /** `current` or `candidate`, whichever ranks first (upstream HintMerger.compare). */
  compare(current: TopologyHint | undefined, candidate: TopologyHint): TopologyHint | undefined {
    const candCount = candidate.numaNodeAffinity?.count() ?? 0;
    // A merge whose nodes do not intersect places nothing: never a candidate.
    if (candCount === 0) return current;
    if (current === undefined) return candidate;
    if (!current.preferred && candidate.preferred) return candidate;
    if (current.preferred && !candidate.preferred) return current;
    if (current.preferred && candidate.preferred) {
      return this.compareNumaAffinityMasks(current, candidate);
    }
    // Both non-preferred: come as close as possible to bestNonPreferredAffinityCount from
    // below; above it, only a fitter mask replaces the current one.
    const best = this.bestNonPreferredAffinityCount;
    const curCount = current.numaNodeAffinity!.count();
    if (curCount > best) return this.compareNumaAffinityMasks(current, candidate);
    if (curCount === best) {
      return candCount === best ? this.compareNumaAffinityMasks(current, candidate) : current;
    }
    if (candCount > best) return current;
    if (candCount === best) return candidate;
    if (candCount > curCount) return candidate;
    if (candCount < curCount) return current;
    return this.compareNumaAffinityMasks(current, candidate);
  }

  /** The best merged hint; the default affinity, not preferred, when no merge places anything. */
  merge(): TopologyHint {
    const defaultAffinity = this.numaInfo.defaultAffinityMask();
    let best: TopologyHint | undefined;
    iterateAllProviderTopologyHints(this.hints, (permutation) => {
      best = this.compare(best, mergePermutation(defaultAffinity, permutation));
    });
    return best ?? { numaNodeAffinity: defaultAffinity, preferred: false };
  }
}
