/**
 * @module
 * Policy `none`: no hint is asked for and every pod is admitted; the providers allocate without
 * regard to NUMA nodes. Corresponds to upstream
 * `pkg/kubelet/cm/topologymanager/policy_none.go`.
 */

import { type MergeResult, type Policy, POLICY_NONE } from "./policy.ts";

/** The `none` policy (upstream nonePolicy). */
export class NonePolicy implements Policy {
  readonly name = POLICY_NONE;

  /** Admits, with a hint that says nothing. */
  merge(): MergeResult {
    return { hint: { numaNodeAffinity: undefined, preferred: false }, admit: true };
  }
}
