/**
 * @module
 * What a CPU manager policy does ({@link CPUPolicy}): `none` (policy_none.ts) leaves every
 * container on all CPUs; `static` (policy_static.ts) gives Guaranteed containers with an integer
 * CPU request CPUs of their own. A policy works on the manager's state (`state.ts`), which
 * `start` checks and binds, and answers the topology manager as a hint provider does (hints per container
 * or per pod, then an allocation per container), with `allocate` synchronous: the caller wraps
 * it. Corresponds
 * to upstream `pkg/kubelet/cm/cpumanager/policy.go`.
 */

import type { V1Container, V1Pod } from "@kubernetes/client-node";
import type { ProviderHints } from "../topologymanager/policy.ts";
import type { CPUSet } from "./cpuset.ts";
import type { CPUManagerState } from "./state.ts";

/** The `cpuManagerPolicy` value of the policy that pins nothing. */
export const CPU_POLICY_NONE = "none";
/** The `cpuManagerPolicy` value of the policy that pins Guaranteed integer-CPU containers. */
export const CPU_POLICY_STATIC = "static";

/** A CPU manager policy (upstream cpumanager.Policy, without the alpha AllocatePod). */
export interface CPUPolicy {
  /** The name the checkpoint records. */
  readonly name: string;
  /**
   * Checks `state` against this policy and the machine, initialises it when empty, and works on
   * it from then on; the other methods need a started policy.
   */
  start(state: CPUManagerState): void;
  /** Gives the container its CPUs, if it gets any of its own; idempotent. */
  allocate(pod: V1Pod, container: V1Container): void;
  /** Releases the container's CPUs; idempotent. */
  removeContainer(podUID: string, containerName: string): void;
  /** The container's possible NUMA placements of `cpu`; undefined for "no preference". */
  getTopologyHints(pod: V1Pod, container: V1Container): ProviderHints;
  /** The whole pod's possible NUMA placements of `cpu`; undefined for "no preference". */
  getPodTopologyHints(pod: V1Pod): ProviderHints;
  /** The CPUs that can be given to containers exclusively. */
  getAllocatableCPUs(): CPUSet;
}
