/**
 * @module
 * The memory manager: a topology hint provider that, under the `Static` policy, gives each
 * container of a Guaranteed pod its memory and hugepages on NUMA nodes aligned with the other
 * providers (the CPU and device managers), records the blocks in the `memory_manager_state`
 * checkpoint, and tells the container runtime manager which nodes the container's cpuset.mems
 * must hold ({@link MemoryManager.getMemoryNUMANodes}); the pod resources API reads
 * {@link MemoryManager.getMemory} and {@link MemoryManager.getAllocatableMemory}. Under `None`
 * it does nothing but keep the checkpoint's policy name. The topology manager's chosen affinity
 * comes in as a function; the active pods as a function given to {@link MemoryManager.start}.
 * State of pods no longer active is dropped before every admission, once the pod sources are
 * ready. Corresponds to upstream `pkg/kubelet/cm/memorymanager/memory_manager.go` (without the
 * PodLevelResourceManagers gate's AllocatePod).
 */

import type { V1Container, V1Pod } from "@kubernetes/client-node";
import type { ContainerMemory } from "../../proto/podresources/v1/api.ts";
import { kobj, type Logger } from "../klog/klog.ts";
import { isRestartableInitContainer } from "../pod/podutil.ts";
import type { HintProvider } from "../topologymanager/scope.ts";
import type { ProviderHints } from "../topologymanager/policy.ts";
import type { Block } from "./checkpoint.ts";
import {
  MemoryManagerError,
  type MemoryManagerPolicyName,
  type MemoryPolicy,
  POLICY_BEST_EFFORT,
  POLICY_NONE,
  POLICY_STATIC,
} from "./policy.ts";
import { NonePolicy } from "./policy_none.ts";
import {
  type AffinityFunc,
  type MachineMemory,
  type MemoryPolicyMetrics,
  StaticPolicy,
} from "./policy_static.ts";
import { getSystemReservedMemory, type MemoryReservation } from "./reserved_memory.ts";
import { CheckpointedMemoryState } from "./state.ts";

/** A running container, as the runtime lists them at start (upstream containermap entries). */
export interface ContainerRef {
  readonly podUID: string;
  readonly containerName: string;
  readonly containerID: string;
}

/** What {@link MemoryManager} is built with (upstream NewManager's arguments). */
export interface MemoryManagerOptions {
  /** `memoryManagerPolicy`: "None" or "Static". @default "None" */
  readonly policy?: string;
  /** The machine's NUMA nodes with their memory and hugepages (readMachineTopology). */
  readonly machine: MachineMemory;
  /** `reservedMemory`; the `Static` policy requires some `memory` in it. @default [] */
  readonly reservedMemory?: readonly MemoryReservation[];
  /**
   * What node allocatable keeps back, by resource (reserved_memory.ts
   * nodeAllocatableReservation); `reservedMemory` must add up to its memory and hugepages.
   * @default {}
   */
  readonly nodeAllocatableReservation?: Readonly<Record<string, string>>;
  /** The kubelet's root directory (`rootDirectory`), where the checkpoint is kept. */
  readonly stateDirectory: string;
  readonly logger: Logger;
  /** The topology manager's chosen affinity of a container (TopologyManager.getAffinity). */
  readonly affinity: AffinityFunc;
  /** @default none */
  readonly metrics?: MemoryPolicyMetrics;
}

/** Lists the pods the kubelet considers active. */
export type ActivePodsFunc = () => readonly V1Pod[];

function toContainerMemory(blocks: readonly Block[]): ContainerMemory[] {
  return blocks.map((b) => ({
    memoryType: b.type,
    size: BigInt(b.size),
    topology: { nodes: b.numaAffinity.map((n) => ({ ID: BigInt(n) })) },
  }));
}

/** The memory manager (upstream manager). */
export class MemoryManager implements HintProvider {
  readonly policy: MemoryPolicy;
  readonly #logger: Logger;
  readonly #stateDirectory: string;
  #state: CheckpointedMemoryState | undefined;
  #activePods: ActivePodsFunc = () => [];
  #sourcesReady: () => boolean = () => true;
  /** Container ID -> pod and container (upstream containerMap). */
  readonly #containers = new Map<string, { podUID: string; containerName: string }>();
  #allocatable: Block[] = [];

  /**
   * Picks and builds the policy; throws {@link MemoryManagerError} with upstream's message for
   * an unknown policy, `BestEffort` (Windows only), or `reservedMemory` that does not match node
   * allocatable or reserves no memory under `Static`.
   */
  constructor(o: MemoryManagerOptions) {
    this.#logger = o.logger;
    this.#stateDirectory = o.stateDirectory;
    const name = o.policy ?? POLICY_NONE;
    switch (name) {
      case POLICY_NONE:
        this.policy = new NonePolicy(o.logger);
        break;
      case POLICY_STATIC: {
        const systemReserved = getSystemReservedMemory(
          o.machine.nodes.map((n) => n.id),
          o.nodeAllocatableReservation ?? {},
          o.reservedMemory ?? [],
        );
        this.policy = new StaticPolicy({
          machine: o.machine,
          systemReserved,
          affinity: o.affinity,
          logger: o.logger,
          metrics: o.metrics,
        });
        break;
      }
      case POLICY_BEST_EFFORT:
        throw new MemoryManagerError(
          `policy ${JSON.stringify(POLICY_BEST_EFFORT)} is not available for platform "linux"`,
        );
      default:
        throw new MemoryManagerError(`unknown policy: ${JSON.stringify(name)}`);
    }
  }

  /** The policy's name. */
  get policyName(): MemoryManagerPolicyName {
    return this.policy.name;
  }

  /**
   * Restores the checkpoint (or writes a new one) and starts the policy over it. Throws
   * MemoryStateRestoreError ("could not restore state from checkpoint: ..., please drain this
   * node and delete the memory manager checkpoint file ... before restarting Kubelet") or the
   * policy's {@link MemoryManagerError}; either must stop the kubelet.
   */
  async start(
    activePods: ActivePodsFunc,
    runningContainers: readonly ContainerRef[] = [],
    sourcesReady: () => boolean = () => true,
  ): Promise<void> {
    this.#logger.info("Starting memorymanager", { policy: this.policy.name });
    this.#activePods = activePods;
    this.#sourcesReady = sourcesReady;
    for (const c of runningContainers) {
      this.#containers.set(c.containerID, { podUID: c.podUID, containerName: c.containerName });
    }
    let state: CheckpointedMemoryState;
    try {
      state = await CheckpointedMemoryState.restore({
        directory: this.#stateDirectory,
        policyName: this.policy.name,
        logger: this.#logger.with({ logger: "Memory Manager state checkpoint" }),
      });
    } catch (e) {
      this.#logger.error(
        e,
        "Could not initialize checkpoint manager, please drain node and remove policy state file",
      );
      throw e;
    }
    try {
      this.policy.start(state);
    } catch (e) {
      this.#logger.error(e, "Policy start error");
      throw e;
    }
    await state.flush();
    this.#state = state;
    this.#allocatable = this.policy.getAllocatableMemory(state);
    this.#logger.v(4).info("memorymanager started", { policy: this.policy.name });
  }

  #started(): CheckpointedMemoryState {
    if (this.#state === undefined) throw new MemoryManagerError("memory manager not started");
    return this.#state;
  }

  /**
   * Records the container's ID and frees the memory of the regular init containers before it
   * (they have run to completion), as upstream AddContainer does.
   */
  addContainer(pod: V1Pod, container: V1Container, containerID: string): void {
    const podUID = pod.metadata?.uid ?? "";
    this.#containers.set(containerID, { podUID, containerName: container.name });
    for (const init of pod.spec?.initContainers ?? []) {
      if (init.name === container.name) break;
      // A sidecar runs for the pod's whole life: its memory stays.
      if (isRestartableInitContainer(init)) continue;
      this.#removeByRef(podUID, init.name);
    }
  }

  /** Allocates the container's memory, once stale state is gone; see the module documentation. */
  async allocate(pod: V1Pod, container: V1Container): Promise<void> {
    const state = this.#started();
    this.removeStaleState();
    try {
      this.policy.allocate(state, pod, container);
    } catch (e) {
      this.#logger.error(e, "Allocate error", { pod: kobj(pod), containerName: container.name });
      throw e;
    } finally {
      await state.flush();
    }
  }

  /** The container's hints by resource name, once stale state is gone. */
  getTopologyHints(pod: V1Pod, container: V1Container): ProviderHints {
    const state = this.#started();
    this.removeStaleState();
    return this.policy.getTopologyHints(state, pod, container);
  }

  /** The pod's hints by resource name, once stale state is gone. */
  getPodTopologyHints(pod: V1Pod): ProviderHints {
    const state = this.#started();
    this.removeStaleState();
    return this.policy.getPodTopologyHints(state, pod);
  }

  /**
   * The NUMA nodes the container's memory was placed on, ascending: its cpuset.mems. Undefined
   * when none was placed (not Guaranteed, or the `None` policy).
   */
  getMemoryNUMANodes(pod: V1Pod, container: V1Container): number[] | undefined {
    const blocks = this.#started().getMemoryBlocks(pod.metadata?.uid ?? "", container.name);
    const nodes = [...new Set((blocks ?? []).flatMap((b) => b.numaAffinity))].sort((a, b) => a - b);
    const logger = this.#logger.with({ pod: kobj(pod), containerName: container.name });
    if (nodes.length === 0) {
      logger.v(5).info("NUMA nodes not available for allocation");
      return undefined;
    }
    logger.info("Memory affinity", { numaNodes: nodes });
    return nodes;
  }

  /** Frees the container's memory and forgets its IDs. */
  async removeContainer(podUID: string, containerName: string): Promise<void> {
    const state = this.#started();
    this.#removeByRef(podUID, containerName);
    await state.flush();
  }

  /**
   * Frees the memory of every container that is not in an active pod (the pods `start` was
   * given a function for, or `activePods`); does nothing until the pod sources are ready.
   */
  removeStaleState(activePods?: readonly V1Pod[]): void {
    if (activePods === undefined && !this.#sourcesReady()) return;
    const state = this.#started();
    const active = new Map<string, Set<string>>();
    for (const pod of activePods ?? this.#activePods()) {
      active.set(
        pod.metadata?.uid ?? "",
        new Set(
          [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])].map((c) => c.name),
        ),
      );
    }
    for (const [podUID, containers] of state.getMemoryAssignments()) {
      for (const containerName of containers.keys()) {
        if (active.get(podUID)?.has(containerName)) continue;
        this.#logger.v(2).info("RemoveStaleState removing state", { podUID, containerName });
        this.#removeByRef(podUID, containerName);
      }
    }
    for (const { podUID, containerName } of [...this.#containers.values()]) {
      if (active.get(podUID)?.has(containerName)) continue;
      this.#logger.v(2).info("RemoveStaleState removing state", { podUID, containerName });
      this.#removeByRef(podUID, containerName);
    }
  }

  #removeByRef(podUID: string, containerName: string): void {
    this.policy.removeContainer(this.#started(), podUID, containerName);
    for (const [id, ref] of this.#containers) {
      if (ref.podUID === podUID && ref.containerName === containerName) this.#containers.delete(id);
    }
  }

  /** The container's memory blocks, as the pod resources API lists them. */
  getMemory(podUID: string, containerName: string): ContainerMemory[] {
    return toContainerMemory(this.#started().getMemoryBlocks(podUID, containerName) ?? []);
  }

  /** Each NUMA node's allocatable memory by type, as at start, for the pod resources API. */
  getAllocatableMemory(): ContainerMemory[] {
    return toContainerMemory(this.#allocatable);
  }

  /** Resolves once every state change so far is in the checkpoint. */
  async flush(): Promise<void> {
    await this.#state?.flush();
  }
}
