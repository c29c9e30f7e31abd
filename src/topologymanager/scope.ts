/**
 * @module
 * Where the topology manager aligns: per container (`container` scope: each container's hints
 * merged on their own, init containers first) or per pod (`pod` scope: the providers' pod-wide
 * hints merged once, the result stored for every container), plus the `none` scope that the
 * `none` policy gets (no hints, just allocation). A scope asks its hint providers, lets the
 * policy merge, keeps the chosen affinity per pod and container for the providers to read
 * ({@link Scope.getAffinity}) and then asks every provider to allocate; the first failure
 * decides the verdict. Corresponds to upstream `pkg/kubelet/cm/topologymanager/scope.go`,
 * `scope_container.go`, `scope_pod.go` and `scope_none.go`.
 */

import type { V1Container, V1Pod } from "@kubernetes/client-node";
import { kobj, type Logger } from "../klog/klog.ts";
import type { KubeletMetrics } from "../metrics/metrics.ts";
import {
  getPodAdmitResult,
  type PodAdmitResult,
  TopologyAffinityError,
} from "./admission_error.ts";
import {
  formatHint,
  formatProviderHints,
  type MergeResult,
  type Policy,
  type ProviderHints,
  type TopologyHint,
} from "./policy.ts";
import { NonePolicy } from "./policy_none.ts";

/** Scope `container`: one alignment per container. */
export const CONTAINER_TOPOLOGY_SCOPE = "container";
/** Scope `pod`: one alignment for the whole pod. */
export const POD_TOPOLOGY_SCOPE = "pod";
/** The scope of the `none` policy, whatever `topologyManagerScope` says. */
export const NONE_TOPOLOGY_SCOPE = "none";

/** A scope's name. */
export type ScopeName =
  | typeof CONTAINER_TOPOLOGY_SCOPE
  | typeof POD_TOPOLOGY_SCOPE
  | typeof NONE_TOPOLOGY_SCOPE;

/**
 * A manager that places resources on NUMA nodes: the CPU manager, the memory manager, the
 * device manager (upstream HintProvider, without the alpha PodLevelResourceManagers'
 * AllocatePod).
 */
export interface HintProvider {
  /** The container's possible placements, by resource name. */
  getTopologyHints(pod: V1Pod, container: V1Container): ProviderHints;
  /** The whole pod's possible placements, by resource name (pod scope). */
  getPodTopologyHints(pod: V1Pod): ProviderHints;
  /**
   * Allocates the container's resources, reading the chosen affinity with getAffinity. An
   * {@link AdmissionError} keeps its reason; any other error is UnexpectedAdmissionError.
   */
  allocate(pod: V1Pod, container: V1Container): Promise<void>;
}

/** The metric a scope counts refusals and allocation failures in. */
export type ScopeMetrics = Pick<KubeletMetrics, "topologyAdmissionErrors">;

/** What every scope is built with. */
export interface ScopeOptions {
  readonly logger: Logger;
  /** @default none */
  readonly metrics?: ScopeMetrics;
}

/** The pod's containers in admission order: init containers (sidecars too), then the rest. */
export function admissionOrder(pod: V1Pod): V1Container[] {
  return [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])];
}

const NO_HINT: TopologyHint = { numaNodeAffinity: undefined, preferred: false };

/** What the scopes share: the stored affinities, the providers, the policy (upstream scope). */
export abstract class Scope {
  /** Affinities by pod UID, then container name. */
  readonly #hints = new Map<string, Map<string, TopologyHint>>();
  /** Container ID to pod UID and container name (upstream podMap, a ContainerMap). */
  readonly #containers = new Map<string, { podUID: string; containerName: string }>();
  readonly #providers: HintProvider[] = [];
  protected readonly logger: Logger;
  protected readonly metrics: ScopeMetrics | undefined;

  constructor(readonly name: ScopeName, readonly policy: Policy, o: ScopeOptions) {
    this.logger = o.logger;
    this.metrics = o.metrics;
  }

  /** Checks the pod's alignment and allocates its resources; see the module documentation. */
  abstract admit(pod: V1Pod): Promise<PodAdmitResult>;

  /** The providers, in the order they were added. */
  get hintProviders(): readonly HintProvider[] {
    return this.#providers;
  }

  /** Adds a provider to ask for hints and to allocate. */
  addHintProvider(h: HintProvider): void {
    this.#providers.push(h);
  }

  /** The affinity stored for the container; "no hint" when none is. */
  getAffinity(podUID: string, containerName: string): TopologyHint {
    return this.#hints.get(podUID)?.get(containerName) ?? NO_HINT;
  }

  /** Records the container's ID, so that removeContainer finds its affinity. */
  addContainer(pod: V1Pod, container: V1Container, containerID: string): void {
    this.#containers.set(containerID, {
      podUID: pod.metadata?.uid ?? "",
      containerName: container.name,
    });
  }

  /**
   * Forgets the container; its affinity goes too unless another container ID (a restart of
   * it) is still recorded for the same pod and name.
   */
  removeContainer(containerID: string): void {
    const ref = this.#containers.get(containerID);
    if (ref === undefined) return;
    this.logger.info("RemoveContainer", { containerID });
    this.#containers.delete(containerID);
    for (const other of this.#containers.values()) {
      if (other.podUID === ref.podUID && other.containerName === ref.containerName) return;
    }
    const pod = this.#hints.get(ref.podUID);
    pod?.delete(ref.containerName);
    if (pod?.size === 0) this.#hints.delete(ref.podUID);
  }

  /**
   * Forgets every affinity and container ID of the pod: for a pod refused or deleted before
   * its containers were created, whose affinities upstream keeps forever.
   */
  removePod(podUID: string): void {
    this.#hints.delete(podUID);
    for (const [id, ref] of this.#containers) {
      if (ref.podUID === podUID) this.#containers.delete(id);
    }
  }

  protected setTopologyHints(podUID: string, containerName: string, hint: TopologyHint): void {
    let pod = this.#hints.get(podUID);
    if (pod === undefined) this.#hints.set(podUID, pod = new Map());
    pod.set(containerName, hint);
  }

  /** Every provider allocates the container; the first failure is thrown. */
  protected async allocateAlignedResources(pod: V1Pod, container: V1Container): Promise<void> {
    for (const p of this.#providers) await p.allocate(pod, container);
  }

  /** The `none` policy's admission: allocate each container, in order, without hints. */
  protected async admitPolicyNone(pod: V1Pod): Promise<PodAdmitResult> {
    for (const c of admissionOrder(pod)) {
      try {
        await this.allocateAlignedResources(pod, c);
      } catch (e) {
        return getPodAdmitResult(e);
      }
    }
    return getPodAdmitResult();
  }
}

/** The scope of the `none` policy (upstream noneScope). */
export class NoneScope extends Scope {
  constructor(o: ScopeOptions) {
    super(NONE_TOPOLOGY_SCOPE, new NonePolicy(), o);
  }

  admit(pod: V1Pod): Promise<PodAdmitResult> {
    return this.admitPolicyNone(pod);
  }
}

/** One alignment per container (upstream containerScope). */
export class ContainerScope extends Scope {
  constructor(policy: Policy, o: ScopeOptions) {
    super(CONTAINER_TOPOLOGY_SCOPE, policy, o);
  }

  async admit(pod: V1Pod): Promise<PodAdmitResult> {
    const podUID = pod.metadata?.uid ?? "";
    for (const container of admissionOrder(pod)) {
      const kv = { pod: kobj(pod), containerName: container.name };
      const { hint, admit } = this.calculateAffinity(pod, container);
      this.logger.info("Best TopologyHint", { bestHint: formatHint(hint), ...kv });
      if (!admit) {
        // Earlier containers keep their affinity and allocations, as upstream: the pod's
        // removal releases them.
        this.metrics?.topologyAdmissionErrors.inc();
        return getPodAdmitResult(new TopologyAffinityError());
      }
      this.logger.info("Topology Affinity", { bestHint: formatHint(hint), ...kv });
      this.setTopologyHints(podUID, container.name, hint);
      try {
        await this.allocateAlignedResources(pod, container);
      } catch (e) {
        this.metrics?.topologyAdmissionErrors.inc();
        return getPodAdmitResult(e);
      }
    }
    return getPodAdmitResult();
  }

  /** Every provider's hints for the container, in provider order. */
  accumulateProvidersHints(pod: V1Pod, container: V1Container): ProviderHints[] {
    return this.hintProviders.map((p) => {
      const hints = p.getTopologyHints(pod, container);
      this.logger.info("TopologyHints", {
        hints: formatProviderHints(hints),
        pod: kobj(pod),
        containerName: container.name,
      });
      return hints;
    });
  }

  /** The policy's merge of the container's hints. */
  calculateAffinity(pod: V1Pod, container: V1Container): MergeResult {
    const r = this.policy.merge(this.accumulateProvidersHints(pod, container), this.logger);
    this.logger.info("ContainerTopologyHint", {
      bestHint: formatHint(r.hint),
      pod: kobj(pod),
      containerName: container.name,
    });
    return r;
  }
}

/** One alignment for the whole pod (upstream podScope, without pod-level resources). */
export class PodScope extends Scope {
  constructor(policy: Policy, o: ScopeOptions) {
    super(POD_TOPOLOGY_SCOPE, policy, o);
  }

  async admit(pod: V1Pod): Promise<PodAdmitResult> {
    const podUID = pod.metadata?.uid ?? "";
    const { hint, admit } = this.calculateAffinity(pod);
    this.logger.info("Best TopologyHint", { bestHint: formatHint(hint), pod: kobj(pod) });
    if (!admit) {
      this.metrics?.topologyAdmissionErrors.inc();
      return getPodAdmitResult(new TopologyAffinityError());
    }
    for (const container of admissionOrder(pod)) {
      this.logger.info("Topology Affinity", {
        bestHint: formatHint(hint),
        pod: kobj(pod),
        containerName: container.name,
      });
      this.setTopologyHints(podUID, container.name, hint);
      try {
        await this.allocateAlignedResources(pod, container);
      } catch (e) {
        this.metrics?.topologyAdmissionErrors.inc();
        return getPodAdmitResult(e);
      }
    }
    return getPodAdmitResult();
  }

  /** Every provider's hints for the pod, in provider order. */
  accumulateProvidersHints(pod: V1Pod): ProviderHints[] {
    return this.hintProviders.map((p) => {
      const hints = p.getPodTopologyHints(pod);
      this.logger.info("TopologyHints", { hints: formatProviderHints(hints), pod: kobj(pod) });
      return hints;
    });
  }

  /** The policy's merge of the pod's hints. */
  calculateAffinity(pod: V1Pod): MergeResult {
    const r = this.policy.merge(this.accumulateProvidersHints(pod), this.logger);
    this.logger.info("PodTopologyHint", { bestHint: formatHint(r.hint), pod: kobj(pod) });
    return r;
  }
}
