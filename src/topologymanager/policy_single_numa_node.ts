/**
 * @module
 * Policy `single-numa-node`: only preferred hints on exactly one NUMA node (and "don't care"
 * hints) take part in the merge, and the pod is admitted only when the best merged hint is
 * preferred; a result spanning every node (nothing to align) is stored as "don't care".
 * `prefer-closest-numa-nodes` has no effect here: one-node sets have no distance to compare.
 * Corresponds to upstream `pkg/kubelet/cm/topologymanager/policy_single_numa_node.go`.
 */

import type { Logger } from "../klog/klog.ts";
import type { NumaInfo } from "./numa_info.ts";
import {
  filterProvidersHints,
  HintMerger,
  type MergeResult,
  type Policy,
  POLICY_SINGLE_NUMA_NODE,
  type ProviderHints,
  type TopologyHint,
} from "./policy.ts";
import { DEFAULT_POLICY_OPTIONS, type PolicyOptions } from "./policy_options.ts";

/**
 * Each resource's hints reduced to the preferred ones that are on one node or say "don't care"
 * (upstream filterSingleNumaHints); a resource may be left with none.
 */
export function filterSingleNumaHints(
  allResourcesHints: readonly (readonly TopologyHint[])[],
): TopologyHint[][] {
  return allResourcesHints.map((hints) =>
    hints.filter((h) =>
      h.preferred && (h.numaNodeAffinity === undefined || h.numaNodeAffinity.count() === 1)
    )
  );
}

/** The `single-numa-node` policy (upstream singleNumaNodePolicy). */
export class SingleNumaNodePolicy implements Policy {
  readonly name = POLICY_SINGLE_NUMA_NODE;

  constructor(
    readonly numaInfo: NumaInfo,
    readonly opts: PolicyOptions = DEFAULT_POLICY_OPTIONS,
  ) {}

  /** The best one-node hint, or "don't care"; admits only a preferred one. */
  merge(providersHints: readonly ProviderHints[], logger: Logger): MergeResult {
    const filtered = filterSingleNumaHints(filterProvidersHints(providersHints, logger));
    let hint = new HintMerger(this.numaInfo, filtered, this.name, this.opts).merge();
    if (hint.numaNodeAffinity?.isEqual(this.numaInfo.defaultAffinityMask())) {
      hint = { numaNodeAffinity: undefined, preferred: hint.preferred };
    }
    return { hint, admit: hint.preferred };
  }
}
