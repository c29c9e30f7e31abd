/**
 * @module
 * The CPU manager: binds `cpuManagerPolicy` to its state in `<root-dir>/cpu_manager_state`
 * (upstream's file, so the Go kubelet and this one read each other's), answers the topology
 * manager (hints, then allocation at admission), gives each container its CPUs at creation (its
 * exclusive ones, else the shared pool) and, every `cpuManagerReconcilePeriod`, brings running
 * containers' cpusets in line with the state through the runtime's UpdateContainerResources (the
 * shared pool shrinks and grows as exclusive CPUs are taken and given back). Assignments of
 * containers no longer active are released first, once every pod source has been seen.
 * Corresponds to upstream `pkg/kubelet/cm/cpumanager/cpu_manager.go`.
 */

import type { V1Container, V1Pod, V1PodStatus } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import { kobj } from "../klog/klog.ts";
import type { ProviderHints } from "../topologymanager/policy.ts";
import { CPU_POLICY_NONE, type CPUPolicy } from "./policy.ts";
import { StaticPolicy } from "./policy_static.ts";
import { runtimeContainerId } from "../container/container_id.ts";
import { CPUSet } from "./cpuset.ts";
import { CheckpointState, type CPUManagerState, MemoryState } from "./state.ts";

/** Options of {@link CpuManager}. */
export interface CpuManagerOptions {
  readonly policy: CPUPolicy;
  /** The kubelet's root directory, where `cpu_manager_state` lives. */
  readonly rootDirectory: string;
  /** `cpuManagerReconcilePeriod` in ms. */
  readonly reconcilePeriodMs: number;
  readonly clock: Clock;
  readonly logger: Logger;
  /** The pods admitted and not terminated (upstream activePods). */
  readonly activePods: () => readonly V1Pod[];
  /** Whether every pod source has been seen (upstream sourcesReady.AllReady). */
  readonly sourcesReady: () => boolean;
  /** A pod's API status, with its containers' IDs and states (the status manager's). */
  readonly podStatus: (podUID: string) => V1PodStatus | undefined;
  /** The runtime's UpdateContainerResources. */
  readonly updateContainerResources: (
    containerId: string,
    linux: api.LinuxContainerResources,
    signal?: AbortSignal,
  ) => Promise<void>;
}

/** What a reconcile pass did (upstream reconciledContainer lists). */
export interface ReconcileResult {
  readonly success: string[];
  readonly failure: string[];
}

/** The CPU manager; see the module documentation. */
export class CpuManager {
  readonly #o: CpuManagerOptions;
  #state: CPUManagerState = new MemoryState();
  /** What each container was last given (upstream lastUpdateState). */
  readonly #lastUpdate: CPUManagerState = new MemoryState();
  /** Container ID -> pod UID and container name (upstream containerMap). */
  readonly #containers = new Map<string, { podUID: string; name: string }>();
  #allocatable = new CPUSet();

  constructor(opts: CpuManagerOptions) {
    this.#o = opts;
  }

  get policyName(): string {
    return this.#o.policy.name;
  }

  /**
   * upstream Start: restores the state (a checkpoint of another policy or a corrupt one
   * throws: the kubelet stops, as upstream's), lets the policy check it, and runs the reconcile
   * loop until `signal` aborts (not for the none policy), returned as `reconciling`. `initialContainers` maps the runtime's
   * container IDs to their pod and name.
   */
  async start(
    signal: AbortSignal,
    initialContainers: ReadonlyMap<string, { podUID: string; name: string }> = new Map(),
  ): Promise<{ reconciling: Promise<void> }> {
    const { logger, policy } = this.#o;
    logger.info("Starting", { policy: policy.name });
    logger.info("Reconciling", { reconcilePeriod: `${this.#o.reconcilePeriodMs}ms` });
    for (const [id, ref] of initialContainers) this.#containers.set(id, ref);
    try {
      this.#state = await CheckpointState.open({
        directory: this.#o.rootDirectory,
        policyName: policy.name,
        containerRef: (id) => {
          const ref = initialContainers.get(id);
          return ref && { podUID: ref.podUID, containerName: ref.name };
        },
        logger,
      });
    } catch (err) {
      logger.error(
        err,
        "Could not initialize checkpoint manager, please drain node and remove policy state file",
      );
      throw err;
    }
    try {
      policy.start(this.#state);
    } catch (err) {
      logger.error(err, "Policy start error");
      throw err;
    }
    logger.v(4).info("CPU manager started", { policy: policy.name });
    this.#allocatable = policy.getAllocatableCPUs();
    // An object, so that awaiting start does not await the loop.
    if (policy.name === CPU_POLICY_NONE) return { reconciling: Promise.resolve() };
    return { reconciling: this.#loop(signal) };
  }

  async #loop(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      await this.reconcileState(signal);
      await this.#o.clock.sleep(this.#o.reconcilePeriodMs, signal).catch(() => {});
    }
  }

  /**
   * upstream Allocate (the topology manager's hint provider); resolves once the assignment is
   * in the checkpoint, as upstream writes it before admitting the pod.
   */
  async allocate(pod: V1Pod, container: V1Container): Promise<void> {
    this.#removeStaleState();
    try {
      this.#o.policy.allocate(pod, container);
    } catch (err) {
      this.#o.logger.error(err, "policy error");
      throw err;
    }
    await this.flush();
  }

  /** Resolves once every change of the state so far is in the checkpoint. */
  flush(): Promise<void> {
    const state = this.#state;
    return state instanceof CheckpointState ? state.flush() : Promise.resolve();
  }

  getTopologyHints(pod: V1Pod, container: V1Container): ProviderHints {
    this.#removeStaleState();
    return this.#o.policy.getTopologyHints(pod, container);
  }

  getPodTopologyHints(pod: V1Pod): ProviderHints {
    this.#removeStaleState();
    return this.#o.policy.getPodTopologyHints(pod);
  }

  /** upstream AddContainer: the container's ID, and what it was created with. */
  addContainer(pod: V1Pod, container: V1Container, containerId: string): void {
    const uid = pod.metadata?.uid ?? "";
    const cpus = this.#state.getCPUSet(uid, container.name);
    if (cpus !== undefined) this.#lastUpdate.setCPUSet(uid, container.name, cpus);
    this.#containers.set(containerId, { podUID: uid, name: container.name });
    this.#o.logger.v(4).info("Added Container", {
      pod: kobj(pod),
      podUID: uid,
      containerName: container.name,
      containerID: containerId,
    });
  }

  /**
   * Whether the policy would give a container of the pod CPUs of its own (the static policy's
   * Guaranteed containers with an integer CPU request).
   */
  wantsExclusiveCpus(pod: V1Pod): boolean {
    const policy = this.#o.policy;
    if (!(policy instanceof StaticPolicy)) return false;
    return [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])].some((c) =>
      policy.guaranteedCPUs(pod, c) > 0
    );
  }

  /** upstream GetCPUAffinity, as a cpuset string: the container's CPUs, else the shared pool. */
  cpuAffinity(podUID: string, container: string): string {
    return this.#state.getCPUSetOrDefault(podUID, container).toString();
  }

  /** upstream GetExclusiveCPUs (the pod resources API's cpu_ids). */
  exclusiveCpus(podUID: string, container: string): number[] {
    return this.#state.getCPUSet(podUID, container)?.list() ?? [];
  }

  /** upstream GetAllocatableCPUs. */
  allocatableCpus(): number[] {
    return this.#allocatable.list();
  }

  /** upstream removeStaleState: releases what containers no longer active hold. */
  #removeStaleState(): void {
    if (!this.#o.sourcesReady()) return;
    const active = new Map<string, Set<string>>();
    for (const pod of this.#o.activePods()) {
      const names = new Set<string>();
      for (const c of [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])]) {
        names.add(c.name);
      }
      active.set(pod.metadata?.uid ?? "", names);
    }
    const stale: { podUID: string; name: string }[] = [];
    for (const [podUID, containers] of this.#state.getCPUAssignments()) {
      for (const name of containers.keys()) {
        if (!active.get(podUID)?.has(name)) stale.push({ podUID, name });
      }
    }
    for (const ref of this.#containers.values()) {
      if (!active.get(ref.podUID)?.has(ref.name)) stale.push(ref);
    }
    for (const { podUID, name } of stale) {
      this.#o.logger.v(2).info("removing container", { podUID, containerName: name });
      try {
        this.#o.policy.removeContainer(podUID, name);
        this.#lastUpdate.delete(podUID, name);
        for (const [id, ref] of this.#containers) {
          if (ref.podUID === podUID && ref.name === name) this.#containers.delete(id);
        }
      } catch (err) {
        this.#o.logger.error(err, "failed to remove container", { podUID, containerName: name });
      }
    }
  }

  /** upstream reconcileState: one pass over the active pods' running containers. */
  async reconcileState(signal?: AbortSignal): Promise<ReconcileResult> {
    const out: ReconcileResult = { success: [], failure: [] };
    this.#removeStaleState();
    for (const pod of this.#o.activePods()) {
      const uid = pod.metadata?.uid ?? "";
      const status = this.#o.podStatus(uid);
      const name = pod.metadata?.name ?? "";
      if (!status) {
        out.failure.push(name);
        continue;
      }
      const statuses = [
        ...(status.initContainerStatuses ?? []),
        ...(status.containerStatuses ?? []),
      ];
      for (const c of [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])]) {
        const cs = statuses.find((s) => s.name === c.name);
        const id = runtimeContainerId(cs?.containerID ?? "");
        if (!cs || id === "" || cs.state?.waiting || !(cs.state?.running || cs.state?.terminated)) {
          out.failure.push(`${name}/${c.name}`);
          continue;
        }
        if (cs.state?.terminated) continue;
        this.#containers.set(id, { podUID: uid, name: c.name });
        const cpus = this.#state.getCPUSetOrDefault(uid, c.name);
        if (cpus.isEmpty()) {
          this.#o.logger.v(2).info("ReconcileState: skipping container; empty cpuset assigned", {
            pod: kobj(pod),
            containerName: c.name,
          });
          out.failure.push(`${name}/${c.name}`);
          continue;
        }
        if (!cpus.equals(this.#lastUpdate.getCPUSetOrDefault(uid, c.name))) {
          this.#o.logger.v(5).info("updating container", {
            pod: kobj(pod),
            containerName: c.name,
            containerID: id,
            cpuSet: cpus.toString(),
          });
          try {
            await this.#o.updateContainerResources(
              id,
              api.LinuxContainerResources.create({ cpusetCpus: cpus.toString() }),
              signal,
            );
          } catch (err) {
            this.#o.logger.error(err, "failed to update container", {
              pod: kobj(pod),
              containerName: c.name,
              containerID: id,
              cpuSet: cpus.toString(),
            });
            out.failure.push(`${name}/${c.name}`);
            continue;
          }
          this.#lastUpdate.setCPUSet(uid, c.name, cpus);
        }
        out.success.push(`${name}/${c.name}`);
      }
    }
    return out;
  }
}
