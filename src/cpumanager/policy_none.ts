/**
 * @module
 * The `none` CPU manager policy: every container runs on every CPU the cgroup allows, nothing
 * is pinned, no hints are given and no CPU is allocatable exclusively. It takes no options.
 * Corresponds to upstream `pkg/kubelet/cm/cpumanager/policy_none.go`.
 */

import type { Logger } from "../klog/klog.ts";
import type { ProviderHints } from "../topologymanager/policy.ts";
import { CPUSet } from "./cpuset.ts";
import { CPU_POLICY_NONE, type CPUPolicy } from "./policy.ts";
import { CPUPolicyOptionsError } from "./policy_options.ts";
import type { CPUManagerState } from "./state.ts";

/** Options of {@link NonePolicy}. */
export interface NonePolicyOptions {
  /** `cpuManagerPolicyOptions`: must be empty. */
  readonly cpuPolicyOptions?: Readonly<Record<string, string>>;
  readonly logger: Logger;
}

/** The policy that pins nothing (upstream nonePolicy). */
export class NonePolicy implements CPUPolicy {
  readonly name = CPU_POLICY_NONE;
  readonly #logger: Logger;

  /**
   * Throws {@link CPUPolicyOptionsError} "None policy: received unsupported options=map[...]"
   * when any option is set (upstream NewNonePolicy).
   */
  constructor(o: NonePolicyOptions) {
    const entries = Object.entries(o.cpuPolicyOptions ?? {});
    if (entries.length > 0) {
      // Go's %v of a map: sorted keys, "map[k:v k2:v2]".
      const text = entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
        .map(([k, v]) => `${k}:${v}`).join(" ");
      throw new CPUPolicyOptionsError(`None policy: received unsupported options=map[${text}]`);
    }
    this.#logger = o.logger;
  }

  start(_state: CPUManagerState): void {
    this.#logger.info("Start");
  }

  allocate(): void {}

  removeContainer(): void {}

  getTopologyHints(): ProviderHints {
    return undefined;
  }

  getPodTopologyHints(): ProviderHints {
    return undefined;
  }

  /** Empty: no CPU is given to a container exclusively under this policy. */
  getAllocatableCPUs(): CPUSet {
    return new CPUSet();
  }
}
