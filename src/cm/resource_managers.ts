/**
 * @module
 * The container manager's resource managers, built and started together as upstream's
 * NewContainerManager and Start do: the topology manager, with the device manager, the CPU
 * manager and the memory manager as its hint providers, in upstream's order; the admission they
 * make together (hints, NUMA alignment, then each manager's allocation, before the predicates);
 * the container hooks that give containers their cpusets; and what the pod resources API reads
 * of them. `reservedSystemCPUs` replaces the CPU reservations of kubeReserved and
 * systemReserved, as upstream's `run` does. Corresponds to the resource-manager parts of
 * upstream `pkg/kubelet/cm/container_manager_linux.go` and `cmd/kubelet/app/server.go`.
 */

import type { V1Pod, V1PodStatus } from "@kubernetes/client-node";
import { ContainerState } from "../../proto/runtime/v1/api.ts";
import type * as api from "../../proto/runtime/v1/api.ts";
import type { RuntimeService } from "../cri/remote_runtime.ts";
import {
  KUBERNETES_CONTAINER_NAME_LABEL,
  KUBERNETES_POD_UID_LABEL,
} from "../kuberuntime/labels.ts";
import type { KubeletConfiguration } from "../apis/config_types.ts";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import type { KubeletMetrics } from "../metrics/metrics.ts";
import type { ContainerMemory } from "../../proto/podresources/v1/api.ts";
import { milliValueOf, parseDec } from "../qos/resource_helpers.ts";
import type { DeviceManager } from "../devicemanager/manager.ts";
import { CPUSet } from "../cpumanager/cpuset.ts";
import type { CPUTopology } from "../cpumanager/topology.ts";
import type { MachineTopology } from "../cpumanager/machine_topology.ts";
import { CPU_POLICY_NONE, CPU_POLICY_STATIC, type CPUPolicy } from "../cpumanager/policy.ts";
import { NonePolicy } from "../cpumanager/policy_none.ts";
import { StaticPolicy } from "../cpumanager/policy_static.ts";
import { CpuManager } from "../cpumanager/cpu_manager.ts";
import { TopologyManager } from "../topologymanager/topology_manager.ts";
import { POLICY_NONE } from "../topologymanager/policy.ts";
import type { HintProvider } from "../topologymanager/scope.ts";
import { InternalContainerLifecycle } from "./internal_container_lifecycle.ts";
import { MemoryManager } from "../memorymanager/memory_manager.ts";
import { POLICY_STATIC as MEMORY_POLICY_STATIC } from "../memorymanager/policy.ts";
import { nodeAllocatableReservation } from "../memorymanager/reserved_memory.ts";

/** A resource manager could not be built from the configuration; the message is upstream's. */
export class ResourceManagerConfigError extends Error {
  override name = "ResourceManagerConfigError";
}

/**
 * upstream run's --reserved-cpus override: with `reservedSystemCPUs` set (a subset of the
 * machine's CPUs, else an error naming both), kubeReserved loses its cpu and systemReserved's cpu
 * is the number of reserved CPUs. Returns the reserved set (empty when none is configured).
 */
export function applyReservedSystemCPUs(
  config: KubeletConfiguration,
  topology: CPUTopology,
  logger: Logger,
): CPUSet {
  const spec = config.reservedSystemCPUs ?? "";
  if (spec === "") return new CPUSet();
  const reserved = CPUSet.parse(spec);
  const all = topology.cpuDetails.cpus();
  if (!reserved.isSubsetOf(all)) {
    throw new ResourceManagerConfigError(
      `reserved-cpus: ${spec} is not a subset of online-cpus: ${all}`,
    );
  }
  if (reserved.size === 0) return reserved;
  logger.info(
    "Option --reserved-cpus is specified, it will overwrite the cpu setting in KubeReserved and SystemReserved",
    { kubeReserved: config.kubeReserved ?? {}, systemReserved: config.systemReserved ?? {} },
  );
  if (config.kubeReserved) {
    const { cpu: _, ...rest } = config.kubeReserved;
    config.kubeReserved = rest;
  }
  config.systemReserved = { ...config.systemReserved, cpu: String(reserved.size) };
  logger.info("After cpu setting is overwritten", {
    kubeReserved: config.kubeReserved ?? {},
    systemReserved: config.systemReserved,
  });
  return reserved;
}

/** Options of {@link ResourceManagers}. */
export interface ResourceManagersOptions {
  /** The configuration, after {@link applyReservedSystemCPUs}. */
  readonly config: KubeletConfiguration;
  readonly machine: MachineTopology;
  /** The machine's CPU topology (discoverCPUTopology of `machine`). */
  readonly cpuTopology: CPUTopology;
  /** The reserved CPUs {@link applyReservedSystemCPUs} returned. */
  readonly reservedCPUs: CPUSet;
  readonly rootDirectory: string;
  /** The node's capacity (cpu, memory, hugepages), for what node allocatable reserves. */
  readonly capacity: Readonly<Record<string, string>>;
  readonly devices: DeviceManager;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly metrics?: KubeletMetrics;
  readonly activePods: () => readonly V1Pod[];
  readonly sourcesReady: () => boolean;
  readonly podStatus: (podUID: string) => V1PodStatus | undefined;
  readonly updateContainerResources: (
    containerId: string,
    linux: api.LinuxContainerResources,
    signal?: AbortSignal,
  ) => Promise<void>;
}

/** See the module documentation. */
export class ResourceManagers {
  readonly topology: TopologyManager;
  readonly cpu: CpuManager;
  readonly memory: MemoryManager;
  readonly devices: DeviceManager;
  readonly internalLifecycle: InternalContainerLifecycle;
  readonly #cpuTopology: CPUTopology;
  readonly #o: ResourceManagersOptions;

  /** Throws the managers' configuration errors (upstream's NewContainerManager errors). */
  constructor(o: ResourceManagersOptions) {
    this.#o = o;
    const { config, machine, logger } = o;
    const gates = config.featureGates ?? {};
    const distances = new Map<number, number[]>();
    for (const n of machine.nodes) if (n.distances) distances.set(n.id, [...n.distances]);
    this.topology = new TopologyManager({
      policy: config.topologyManagerPolicy,
      scope: config.topologyManagerScope,
      options: config.topologyManagerPolicyOptions,
      numa: { nodes: machine.nodes.map((n) => n.id), distances },
      logger,
      metrics: o.metrics,
      clock: o.clock,
      alphaOptions: gates.TopologyManagerPolicyAlphaOptions ?? false,
      betaOptions: gates.TopologyManagerPolicyBetaOptions ?? true,
    });
    this.#cpuTopology = o.cpuTopology;
    this.cpu = new CpuManager({
      policy: this.#cpuPolicy(),
      rootDirectory: o.rootDirectory,
      reconcilePeriodMs: config.cpuManagerReconcilePeriod,
      clock: o.clock,
      logger,
      activePods: o.activePods,
      sourcesReady: o.sourcesReady,
      podStatus: o.podStatus,
      updateContainerResources: o.updateContainerResources,
    });
    this.memory = new MemoryManager({
      policy: config.memoryManagerPolicy,
      machine: { nodes: machine.nodes },
      reservedMemory: (config.reservedMemory ?? []).map((r) => ({
        numaNode: r.numaNode ?? 0,
        limits: r.limits ?? {},
      })),
      nodeAllocatableReservation: nodeAllocatableReservation({
        capacity: o.capacity,
        systemReserved: config.systemReserved,
        kubeReserved: config.kubeReserved,
        evictionHard: config.evictionHard,
      }),
      stateDirectory: o.rootDirectory,
      logger,
      affinity: (uid, name) => this.topology.getAffinity(uid, name),
      metrics: o.metrics,
    });
    this.devices = o.devices;
    // Upstream's order: devices, CPUs, memory.
    this.topology.addHintProvider(devicesHints(o.devices));
    this.topology.addHintProvider(this.cpu);
    this.topology.addHintProvider(this.memory);
    const memory = this.memory;
    this.internalLifecycle = new InternalContainerLifecycle({
      cpuManager: this.cpu,
      memoryManager: {
        memoryNumaNodes: (pod, c) => memory.getMemoryNUMANodes(pod, c),
        addContainer: (pod, c, id) => memory.addContainer(pod, c, id),
      },
      topologyManager: this.topology,
    });
  }

  /** upstream cpumanager.NewManager's policy choice. */
  #cpuPolicy(): CPUPolicy {
    const { config, logger } = this.#o;
    const gates = config.featureGates ?? {};
    switch (config.cpuManagerPolicy) {
      case CPU_POLICY_NONE:
        return new NonePolicy({ cpuPolicyOptions: config.cpuManagerPolicyOptions, logger });
      case CPU_POLICY_STATIC: {
        logger.info("Detected CPU topology", { topology: String(this.#cpuTopology.numCPUs) });
        const milli = ["kubeReserved", "systemReserved"].reduce((sum, key) => {
          const q = (config[key as "kubeReserved"] ?? {}).cpu;
          return sum + (q === undefined ? 0 : Number(milliValueOf(parseDec(q))));
        }, 0);
        if (milli === 0) {
          throw new ResourceManagerConfigError(
            "[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero",
          );
        }
        try {
          return new StaticPolicy({
            topology: this.#cpuTopology,
            numReservedCPUs: Math.ceil(milli / 1000),
            reservedCPUs: this.#o.reservedCPUs,
            affinity: (uid, name) => this.topology.getAffinity(uid, name),
            topologyManagerPolicy: config.topologyManagerPolicy,
            cpuPolicyOptions: config.cpuManagerPolicyOptions,
            gates: {
              alphaOptions: gates.CPUManagerPolicyAlphaOptions ?? false,
              betaOptions: gates.CPUManagerPolicyBetaOptions ?? true,
            },
            logger,
            metrics: this.#o.metrics,
          });
        } catch (err) {
          throw new ResourceManagerConfigError(
            `new static policy error: ${(err as Error).message}`,
            {
              cause: err,
            },
          );
        }
      }
      default:
        throw new ResourceManagerConfigError(`unknown policy: "${config.cpuManagerPolicy}"`);
    }
  }

  /**
   * Starts the CPU manager (restoring its checkpoint: a bad one throws, stopping the kubelet as
   * upstream's) and returns its reconcile loop, which runs until `signal` aborts.
   */
  async start(
    signal: AbortSignal,
    initialContainers: ReadonlyMap<string, { podUID: string; name: string }>,
  ): Promise<{ reconciling: Promise<void> }> {
    const started = await this.cpu.start(signal, initialContainers);
    await this.memory.start(
      this.#o.activePods,
      [...initialContainers].map(([containerID, r]) => ({
        podUID: r.podUID,
        containerName: r.name,
        containerID,
      })),
      this.#o.sourcesReady,
    );
    return started;
  }

  /**
   * Whether admitting `pod` needs the topology manager: a policy that aligns, a device plugin
   * resource, or a container the static CPU policy would pin. Other pods are admitted
   * synchronously (every provider would have nothing to give them).
   */
  needsAllocation(pod: V1Pod): boolean {
    if (this.topology.policy.name !== POLICY_NONE) return true;
    if (this.devices.needsDevices(pod)) return true;
    if (this.memory.policyName === MEMORY_POLICY_STATIC) return true;
    return this.cpu.wantsExclusiveCpus(pod);
  }

  /** The topology manager's admission of the pod (hints, alignment, allocation). */
  admit(pod: V1Pod): Promise<{ admit: boolean; reason?: string; message?: string }> {
    return this.topology.admit(pod);
  }

  /** What the pod resources API reads of the memory manager. */
  get memoryForPodResources(): {
    getMemory(podUID: string, container: string): readonly ContainerMemory[];
    getAllocatableMemory(): readonly ContainerMemory[];
  } {
    return {
      getMemory: (uid, name) => this.memory.getMemory(uid, name),
      getAllocatableMemory: () => this.memory.getAllocatableMemory(),
    };
  }

  /** What the pod resources API reads of the CPU manager. */
  get cpusForPodResources(): {
    getCpus(podUID: string, container: string): readonly number[];
    getAllocatableCpus(): readonly number[];
  } {
    return {
      getCpus: (uid, name) => this.cpu.exclusiveCpus(uid, name),
      getAllocatableCpus: () => this.cpu.allocatableCpus(),
    };
  }
}

/** The runtime's containers at start (upstream buildContainerMapAndRunningSetFromRuntime). */
export interface RuntimeContainers {
  /** Container ID -> its pod's UID and its name, whatever its state. */
  readonly containers: Map<string, { podUID: string; name: string }>;
  /** `<pod UID>/<container name>` of the running ones (the device manager's view). */
  readonly running: string[];
}

/** Lists the runtime's containers for the managers' start. */
export async function runtimeContainers(
  runtime: Pick<RuntimeService, "listContainers">,
  signal?: AbortSignal,
): Promise<RuntimeContainers> {
  const out: RuntimeContainers = { containers: new Map(), running: [] };
  for (const c of await runtime.listContainers(undefined, signal)) {
    const podUID = c.labels[KUBERNETES_POD_UID_LABEL] ?? "";
    const name = c.labels[KUBERNETES_CONTAINER_NAME_LABEL] ?? "";
    out.containers.set(c.id, { podUID, name });
    if (c.state === ContainerState.CONTAINER_RUNNING) out.running.push(`${podUID}/${name}`);
  }
  return out;
}

/** The device manager as a topology hint provider. */
function devicesHints(devices: DeviceManager): HintProvider {
  return {
    getTopologyHints: (pod, c) => devices.getTopologyHints(pod, c),
    getPodTopologyHints: (pod) => devices.getPodTopologyHints(pod),
    allocate: (pod, c) => devices.allocate(pod, c),
  };
}
