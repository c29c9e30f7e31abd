/**
 * @module
 * What a memory manager policy does (upstream Policy): start over the restored state, allocate a
 * container's memory and hugepages, free them, give the topology manager its hints, and list
 * each NUMA node's allocatable memory. The policies are `None` (policy_none.ts) and `Static`
 * (policy_static.ts); upstream's `BestEffort` exists only on Windows. Corresponds to upstream
 * `pkg/kubelet/cm/memorymanager/policy.go`.
 */

import type { V1Container, V1Pod } from "@kubernetes/client-node";
import type { ProviderHints } from "../topologymanager/policy.ts";
import type { Block } from "./checkpoint.ts";
import type { MemoryState } from "./state.ts";

/** Policy `None`: no pinning (upstream policyTypeNone). */
export const POLICY_NONE = "None";
/** Policy `Static`: Guaranteed pods' memory pinned to NUMA nodes (upstream PolicyTypeStatic). */
export const POLICY_STATIC = "Static";
/** Policy `BestEffort`: upstream's Windows-only policy, refused here as on Linux. */
export const POLICY_BEST_EFFORT = "BestEffort";

/** A memory manager policy name this kubelet runs. */
export type MemoryManagerPolicyName = typeof POLICY_NONE | typeof POLICY_STATIC;

/** An error of the memory manager or its policies; the message is upstream's. */
export class MemoryManagerError extends Error {
  override name = "MemoryManagerError";
}

/** A memory manager policy (upstream Policy, without the pod-level AllocatePod). */
export interface MemoryPolicy {
  readonly name: MemoryManagerPolicyName;
  /** Checks the restored state (or fills an empty one); throws {@link MemoryManagerError}. */
  start(s: MemoryState): void;
  /** Allocates the container's memory; idempotent. Throws {@link MemoryManagerError}. */
  allocate(s: MemoryState, pod: V1Pod, container: V1Container): void;
  /** Frees the container's memory; idempotent. */
  removeContainer(s: MemoryState, podUID: string, containerName: string): void;
  /** The container's hints by resource name. */
  getTopologyHints(s: MemoryState, pod: V1Pod, container: V1Container): ProviderHints;
  /** The pod's hints by resource name. */
  getPodTopologyHints(s: MemoryState, pod: V1Pod): ProviderHints;
  /** Each NUMA node's allocatable amount of each memory type (zero ones left out). */
  getAllocatableMemory(s: MemoryState): Block[];
}
