/**
 * @module
 * The `None` memory manager policy: memory management off. Nothing is allocated, no hints are
 * given, no memory is listed as allocatable. Corresponds to upstream
 * `pkg/kubelet/cm/memorymanager/policy_none.go`.
 */

import type { Logger } from "../klog/klog.ts";
import type { ProviderHints } from "../topologymanager/policy.ts";
import type { Block } from "./checkpoint.ts";
import { type MemoryPolicy, POLICY_NONE } from "./policy.ts";

/** The `None` policy (upstream none). */
export class NonePolicy implements MemoryPolicy {
  readonly name = POLICY_NONE;

  constructor(private readonly logger: Logger) {}

  start(): void {
    this.logger.info("Start");
  }

  allocate(): void {}

  removeContainer(): void {}

  getTopologyHints(): ProviderHints {
    return undefined;
  }

  getPodTopologyHints(): ProviderHints {
    return undefined;
  }

  getAllocatableMemory(): Block[] {
    return [];
  }
}
