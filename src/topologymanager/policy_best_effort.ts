/**
 * @module
 * Policy `best-effort`: the best merged hint is stored for the providers to allocate by, and
 * the pod is admitted whatever that hint is. Corresponds to upstream
 * `pkg/kubelet/cm/topologymanager/policy_best_effort.go`.
 */

import type { Logger } from "../klog/klog.ts";
import type { NumaInfo } from "./numa_info.ts";
import {
  filterProvidersHints,
  HintMerger,
  type MergeResult,
  type Policy,
  POLICY_BEST_EFFORT,
  type ProviderHints,
} from "./policy.ts";
import { DEFAULT_POLICY_OPTIONS, type PolicyOptions } from "./policy_options.ts";

/** The `best-effort` policy (upstream bestEffortPolicy). */
export class BestEffortPolicy implements Policy {
  readonly name = POLICY_BEST_EFFORT;

  constructor(
    readonly numaInfo: NumaInfo,
    readonly opts: PolicyOptions = DEFAULT_POLICY_OPTIONS,
  ) {}

  /** The best merged hint; always admits. */
  merge(providersHints: readonly ProviderHints[], logger: Logger): MergeResult {
    const filtered = filterProvidersHints(providersHints, logger);
    const hint = new HintMerger(this.numaInfo, filtered, this.name, this.opts).merge();
    return { hint, admit: true };
  }
}
