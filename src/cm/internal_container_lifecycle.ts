/**
 * @module
 * The container manager's hooks around each container's life, called by the runtime manager:
 * before creation the container gets the CPUs and NUMA memory nodes the CPU and memory managers
 * gave it (`cpuset.cpus`, `cpuset.mems` of its CRI resources); once created, the managers note its
 * ID; when removed, the topology manager forgets it. Corresponds to upstream
 * `pkg/kubelet/cm/internal_container_lifecycle.go` and `internal_container_lifecycle_linux.go`.
 */

import type { V1Container, V1Pod } from "@kubernetes/client-node";
import type * as api from "../../proto/runtime/v1/api.ts";

/** What the hooks ask of the CPU manager. */
export interface CpuAffinityProvider {
  /** The container's CPUs (its exclusive ones or the shared pool); empty for none. */
  cpuAffinity(podUID: string, container: string): string;
  addContainer(pod: V1Pod, container: V1Container, containerId: string): void;
}

/** What the hooks ask of the memory manager. */
export interface MemoryAffinityProvider {
  /** The NUMA nodes of the container's memory; undefined or empty for no restriction. */
  memoryNumaNodes(pod: V1Pod, container: V1Container): readonly number[] | undefined;
  addContainer(pod: V1Pod, container: V1Container, containerId: string): void;
}

/** What the hooks ask of the topology manager. */
export interface ContainerAffinityStore {
  addContainer(pod: V1Pod, container: V1Container, containerId: string): void;
  removeContainer(containerId: string): void;
}

/** Options of {@link InternalContainerLifecycle}. */
export interface InternalContainerLifecycleOptions {
  readonly cpuManager?: CpuAffinityProvider;
  readonly memoryManager?: MemoryAffinityProvider;
  readonly topologyManager?: ContainerAffinityStore;
}

/** upstream internalContainerLifecycleImpl; see the module documentation. */
export class InternalContainerLifecycle {
  readonly #o: InternalContainerLifecycleOptions;

  constructor(opts: InternalContainerLifecycleOptions) {
    this.#o = opts;
  }

  /** upstream PreCreateContainer: the container's cpusets into its CRI resources. */
  preCreateContainer(pod: V1Pod, container: V1Container, config: api.ContainerConfig): void {
    const resources = config.linux?.resources;
    if (!resources) return;
    const uid = pod.metadata?.uid ?? "";
    const cpus = this.#o.cpuManager?.cpuAffinity(uid, container.name) ?? "";
    if (cpus !== "") resources.cpusetCpus = cpus;
    const nodes = this.#o.memoryManager?.memoryNumaNodes(pod, container) ?? [];
    if (nodes.length > 0) resources.cpusetMems = [...nodes].sort((a, b) => a - b).join(",");
  }

  /** upstream PreStartContainer: the managers note the container's ID. */
  preStartContainer(pod: V1Pod, container: V1Container, containerId: string): void {
    this.#o.cpuManager?.addContainer(pod, container, containerId);
    this.#o.memoryManager?.addContainer(pod, container, containerId);
    this.#o.topologyManager?.addContainer(pod, container, containerId);
  }

  /** upstream PostStopContainer: the topology manager forgets the container. */
  postStopContainer(containerId: string): void {
    this.#o.topologyManager?.removeContainer(containerId);
  }
}
