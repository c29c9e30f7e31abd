/**
 * @module
 * Policy `restricted`: merges as `best-effort` does, but admits the pod only when the best
 * merged hint is preferred, i.e. every resource fits on the narrowest node set its request
 * allows, and all on the same set. Corresponds to upstream
 * `pkg/kubelet/cm/topologymanager/policy_restricted.go`.
 */

import type { Logger } from "../klog/klog.ts";
import type { NumaInfo } from "./numa_info.ts";
import {
  filterProvidersHints,
  HintMerger,
  type MergeResult,
  type Policy,
  POLICY_RESTRICTED,
  type ProviderHints,
} from "./policy.ts";
import { DEFAULT_POLICY_OPTIONS, type PolicyOptions } from "./policy_options.ts";

/** The `restricted` policy (upstream restrictedPolicy). */
export class RestrictedPolicy implements Policy {
  readonly name = POLICY_RESTRICTED;

  constructor(
    readonly numaInfo: NumaInfo,
    readonly opts: PolicyOptions = DEFAULT_POLICY_OPTIONS,
  ) {}

  /** The best merged hint; admits only a preferred one. */
  merge(providersHints: readonly ProviderHints[], logger: Logger): MergeResult {
    const filtered = filterProvidersHints(providersHints, logger);
    const hint = new HintMerger(this.numaInfo, filtered, this.name, this.opts).merge();
    return { hint, admit: hint.preferred };
  }
}
