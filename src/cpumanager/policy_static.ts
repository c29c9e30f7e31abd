/**
 * @module
 * The `static` CPU manager policy: a container of a Guaranteed pod whose CPU request is a whole
 * number gets that many CPUs of its own, taken out of the shared pool (the state's default CPU
 * set) that every other container runs on. The reserved CPUs (`reservedSystemCPUs`, else the
 * first `numReservedCPUs` taken by topology) stay in the shared pool and are never given away;
 * with `strict-cpu-reservation` they leave the shared pool too. CPUs come from the NUMA nodes
 * the topology manager chose ({@link StaticPolicyOptions.affinity}) first, then from anywhere,
 * packed by `cpu_assignment.ts` (or spread with `distribute-cpus-across-numa` /
 * `distribute-cpus-across-cores`). An init container's CPUs go back to its pod's next
 * containers, a sidecar's (restartable init container's) do not. Hints list every NUMA node
 * combination that can hold the request, the narrowest ones preferred.
 *
 * Corresponds to upstream `pkg/kubelet/cm/cpumanager/policy_static.go` with the
 * PodLevelResourceManagers gate off, as v1.36 has it by default: a pod that sets pod-level
 * resources gets no hints and no CPUs of its own, and AllocatePod is not modelled. The metrics
 * kept are the four the kubelet's registry holds; the shared pool and exclusive CPU gauges are
 * set from the state after each change (upstream adds and subtracts the allocation's size, which
 * counts CPUs reused from init containers twice).
 */

import type { V1Container, V1Pod } from "@kubernetes/client-node";
import { kobj, type Logger } from "../klog/klog.ts";
import type { KubeletMetrics } from "../metrics/metrics.ts";
import { isRestartableInitContainer } from "../pod/podutil.ts";
import { getPodQOS } from "../qos/qos.ts";
import {
  isPodLevelResourcesSet,
  milliValueOf,
  parseDec,
  valueOf,
} from "../qos/resource_helpers.ts";
import type { AdmissionError } from "../topologymanager/admission_error.ts";
import { type BitMask, iterateBitMasks } from "../topologymanager/bitmask.ts";
import {
  formatHint,
  POLICY_NONE,
  type ProviderHints,
  type TopologyHint,
} from "../topologymanager/policy.ts";
import { takeByTopologyNUMADistributed, takeByTopologyNUMAPacked } from "./cpu_assignment.ts";
import { CPUSet } from "./cpuset.ts";
import { CPU_POLICY_STATIC, type CPUPolicy } from "./policy.ts";
import {
  type CPUPolicyOptionGates,
  newStaticPolicyOptions,
  type StaticPolicyOptions,
  validateStaticPolicyOptions,
} from "./policy_options.ts";
import type { CPUManagerState } from "./state.ts";
import type { Allocation, CPUTopology } from "./topology.ts";

/** The admission reason of a {@link SMTAlignmentError} (upstream ErrorSMTAlignment). */
export const SMT_ALIGNMENT_ERROR = "SMTAlignmentError";

/** The fields of a {@link SMTAlignmentError}. */
export interface SMTAlignmentErrorInit {
  readonly requestedCPUs: number;
  readonly cpusPerCore: number;
  /** @default 0 */
  readonly availablePhysicalCPUs?: number;
  /** Whether too few free whole cores, not an odd request, is the cause. @default false */
  readonly causedByPhysicalCPUs?: boolean;
}

/**
 * `full-pcpus-only` refused a request: not a multiple of the threads per core, or more than
 * the free whole cores hold. The pod is rejected with reason "SMTAlignmentError".
 */
export class SMTAlignmentError extends Error implements AdmissionError {
  override name = "SMTAlignmentError";
  readonly admissionReason = SMT_ALIGNMENT_ERROR;
  readonly requestedCPUs: number;
  readonly cpusPerCore: number;
  readonly availablePhysicalCPUs: number;
  readonly causedByPhysicalCPUs: boolean;

  constructor(o: SMTAlignmentErrorInit) {
    const available = o.availablePhysicalCPUs ?? 0;
    super(
      o.causedByPhysicalCPUs
        ? `SMT Alignment Error: not enough free physical CPUs: available physical CPUs = ${available}, requested CPUs = ${o.requestedCPUs}, CPUs per core = ${o.cpusPerCore}`
        : `SMT Alignment Error: requested ${o.requestedCPUs} cpus not multiple cpus per core = ${o.cpusPerCore}`,
    );
    this.requestedCPUs = o.requestedCPUs;
    this.cpusPerCore = o.cpusPerCore;
    this.availablePhysicalCPUs = available;
    this.causedByPhysicalCPUs = o.causedByPhysicalCPUs ?? false;
  }
}

/** The reserved CPUs or the policy options do not fit the machine; the message is upstream's. */
export class StaticPolicyError extends Error {
  override name = "StaticPolicyError";
}

/** The state does not match the policy and the machine; the message is upstream's. */
export class InvalidCPUStateError extends Error {
  override name = "InvalidCPUStateError";
}

/** The CPU manager metrics the static policy keeps. */
export type StaticPolicyMetrics = Pick<
  KubeletMetrics,
  | "cpuManagerPinningRequests"
  | "cpuManagerPinningErrors"
  | "cpuManagerSharedPoolSize"
  | "cpuManagerExclusiveCpus"
>;

/** What {@link StaticPolicy} is built from. */
export interface StaticPolicyInit {
  readonly topology: CPUTopology;
  /**
   * How many CPUs are reserved: ceil(kubeReserved.cpu + systemReserved.cpu), or the size of
   * `reservedSystemCPUs` when that is set.
   */
  readonly numReservedCPUs: number;
  /** `reservedSystemCPUs`; when empty, `numReservedCPUs` CPUs are taken by topology. @default empty */
  readonly reservedCPUs?: CPUSet;
  /** The NUMA affinity the topology manager chose for a container (upstream Store.GetAffinity). */
  readonly affinity: (podUID: string, containerName: string) => TopologyHint;
  /** `topologyManagerPolicy`, for the align-by-socket check. @default "none" */
  readonly topologyManagerPolicy?: string;
  /** `cpuManagerPolicyOptions`. @default {} */
  readonly cpuPolicyOptions?: Readonly<Record<string, string>>;
  /** The CPUManagerPolicyAlphaOptions / BetaOptions gates. @default alpha off, beta on */
  readonly gates?: CPUPolicyOptionGates;
  readonly logger: Logger;
  /** @default none */
  readonly metrics?: StaticPolicyMetrics;
}

/** Go's `resource.Quantity` of `q` is a whole number: Value()*1000 == MilliValue(). */
function integralCPUs(q: string | undefined): number {
  if (q === undefined) return 0;
  let d;
  try {
    d = parseDec(String(q));
  } catch {
    return 0;
  }
  const value = valueOf(d);
  return value * 1000n === milliValueOf(d) ? Number(value) : 0;
}

/** The static CPU manager policy (upstream staticPolicy); see the module documentation. */
export class StaticPolicy implements CPUPolicy {
  readonly name = CPU_POLICY_STATIC;
  readonly topology: CPUTopology;
  readonly options: StaticPolicyOptions;
  /** CPUs never given to a container exclusively. */
  readonly reservedCPUs: CPUSet;
  /** The reserved CPUs and their core siblings. */
  readonly reservedPhysicalCPUs: CPUSet;
  readonly #affinity: StaticPolicyInit["affinity"];
  readonly #logger: Logger;
  readonly #metrics: StaticPolicyMetrics | undefined;
  readonly #cpuGroupSize: number;
  /** CPUs of a pod's finished init containers, which its next containers may take. */
  readonly #cpusToReuse = new Map<string, CPUSet>();
  #state: CPUManagerState | undefined;

  /**
   * Parses and checks the options and picks the reserved CPUs (upstream NewStaticPolicy).
   * Throws CPUPolicyOptionsError for bad options and {@link StaticPolicyError} "[cpumanager]
   * unable to reserve the required amount of CPUs (size of <set> did not equal <n>)".
   */
  constructor(o: StaticPolicyInit) {
    const opts = newStaticPolicyOptions(o.cpuPolicyOptions, o.gates);
    validateStaticPolicyOptions(opts, o.topology, o.topologyManagerPolicy ?? POLICY_NONE);
    this.topology = o.topology;
    this.options = opts;
    this.#affinity = o.affinity;
    this.#logger = o.logger;
    this.#metrics = o.metrics;
    this.#cpuGroupSize = o.topology.cpusPerCore();
    this.#logger.info("created with configuration", {
      options: opts,
      cpuGroupSize: this.#cpuGroupSize,
    });

    let reserved = o.reservedCPUs ?? new CPUSet();
    if (reserved.isEmpty()) {
      // Low-numbered cores first: on 8 CPUs with 2 threads per core, 2 reserved are {0,4}.
      try {
        reserved = this.#takeByTopology(o.topology.cpuDetails.cpus(), o.numReservedCPUs);
      } catch {
        reserved = new CPUSet();
      }
    }
    if (reserved.size !== o.numReservedCPUs) {
      throw new StaticPolicyError(
        `[cpumanager] unable to reserve the required amount of CPUs (size of ${reserved} did not equal ${o.numReservedCPUs})`,
      );
    }
    let physical = new CPUSet();
    for (const cpu of reserved.unsortedList()) {
      let core: number;
      try {
        core = o.topology.cpuCoreID(cpu);
      } catch (e) {
        throw new StaticPolicyError(
          `[cpumanager] unable to build the reserved physical CPUs from the reserved set: ${
            (e as Error).message
          }`,
          { cause: e },
        );
      }
      physical = physical.union(o.topology.cpuDetails.cpusInCores(core));
    }
    this.reservedCPUs = reserved;
    this.reservedPhysicalCPUs = physical;
    this.#logger.info("Reserved CPUs not available for exclusive assignment", {
      reservedSize: reserved.size,
      reserved: reserved.toString(),
      reservedPhysicalCPUs: physical.toString(),
    });
  }

  get #s(): CPUManagerState {
    if (this.#state === undefined) throw new Error("the static CPU policy was not started");
    return this.#state;
  }

  /**
   * Checks `state` (upstream Start and validateState) and works on it from then on: an empty
   * state gets every CPU (minus the reserved ones with strict-cpu-reservation) as its shared
   * pool. Throws {@link InvalidCPUStateError} with upstream's message when the state does not
   * fit; the policy then stays unstarted.
   */
  start(state: CPUManagerState): void {
    try {
      this.#validateState(state);
    } catch (e) {
      this.#logger.error(e, "invalid state, please drain node and remove policy state file");
      throw e;
    }
    this.#state = state;
    this.#updateGauges();
  }

  #validateState(s: CPUManagerState): void {
    const assignments = s.getCPUAssignments();
    const defaultSet = s.getDefaultCPUSet();
    let allCPUs = this.topology.cpuDetails.cpus();
    if (this.options.strictCPUReservation) allCPUs = allCPUs.difference(this.reservedCPUs);

    if (defaultSet.isEmpty()) {
      if (assignments.size !== 0) throw new InvalidCPUStateError("default cpuset cannot be empty");
      s.setDefaultCPUSet(allCPUs);
      this.#logger.info("Static policy initialized", { defaultCPUSet: allCPUs.toString() });
      return;
    }
    // The reserved CPUs changed (kube/system reserved grew) or the file was edited.
    const reservedInDefault = this.reservedCPUs.intersection(defaultSet);
    if (this.options.strictCPUReservation) {
      if (!reservedInDefault.isEmpty()) {
        throw new InvalidCPUStateError(
          `some of strictly reserved cpus: "${reservedInDefault}" are present in defaultCpuSet: "${defaultSet}"`,
        );
      }
    } else if (!reservedInDefault.equals(this.reservedCPUs)) {
      throw new InvalidCPUStateError(
        `not all reserved cpus: "${this.reservedCPUs}" are present in defaultCpuSet: "${defaultSet}"`,
      );
    }
    const assigned: CPUSet[] = [];
    for (const [pod, containers] of assignments) {
      for (const [container, cset] of containers) {
        if (!defaultSet.intersection(cset).isEmpty()) {
          throw new InvalidCPUStateError(
            `pod: ${pod}, container: ${container} cpuset: "${cset}" overlaps with default cpuset "${defaultSet}"`,
          );
        }
        assigned.push(cset);
      }
    }
    // CPUs may have gone offline while the kubelet was down; the state must match the machine.
    const known = defaultSet.union(...assigned);
    if (!known.equals(allCPUs)) {
      throw new InvalidCPUStateError(
        `current set of available CPUs "${allCPUs}" doesn't match with CPUs in state "${known}"`,
      );
    }
  }

  /** Every CPU but the reserved ones (upstream GetAllocatableCPUs). */
  getAllocatableCPUs(): CPUSet {
    return this.topology.cpuDetails.cpus().difference(this.reservedCPUs);
  }

  /** The shared pool minus the reserved CPUs (upstream GetAvailableCPUs). */
  getAvailableCPUs(): CPUSet {
    return this.#s.getDefaultCPUSet().difference(this.reservedCPUs);
  }

  /** The shared pool minus the reserved CPUs' whole cores (upstream GetAvailablePhysicalCPUs). */
  getAvailablePhysicalCPUs(): CPUSet {
    return this.#s.getDefaultCPUSet().difference(this.reservedPhysicalCPUs);
  }

  #updateCPUsToReuse(pod: V1Pod, container: V1Container, cset: CPUSet): void {
    const uid = pod.metadata?.uid ?? "";
    for (const other of this.#cpusToReuse.keys()) {
      if (other !== uid) this.#cpusToReuse.delete(other);
    }
    const reusable = this.#cpusToReuse.get(uid) ?? new CPUSet();
    const init = (pod.spec?.initContainers ?? []).find((c) => c.name === container.name);
    // A sidecar runs beside the app containers, so its CPUs are not handed on.
    if (init !== undefined && !isRestartableInitContainer(init)) {
      this.#cpusToReuse.set(uid, reusable.union(cset));
    } else {
      this.#cpusToReuse.set(uid, reusable.difference(cset));
    }
  }

  #enforceSMTAlignment(numCPUs: number): void {
    if (!this.options.fullPhysicalCPUsOnly) return;
    if (numCPUs % this.#cpuGroupSize !== 0) {
      throw new SMTAlignmentError({ requestedCPUs: numCPUs, cpusPerCore: this.#cpuGroupSize });
    }
    // Reserved CPUs need not be whole cores; their siblings count as taken, or the allocator
    // could descend to single threads.
    const available = this.getAvailablePhysicalCPUs().size;
    if (numCPUs > available) {
      throw new SMTAlignmentError({
        requestedCPUs: numCPUs,
        cpusPerCore: this.#cpuGroupSize,
        availablePhysicalCPUs: available,
        causedByPhysicalCPUs: true,
      });
    }
  }

  /**
   * Gives the container its CPUs when it is a Guaranteed container with an integer CPU request
   * (upstream Allocate); a container already in the state keeps its CPUs. Throws
   * {@link SMTAlignmentError} under full-pcpus-only, and CPUAssignmentError "not enough cpus
   * available to satisfy request: requested=N, available=M".
   */
  allocate(pod: V1Pod, container: V1Container): void {
    const uid = pod.metadata?.uid ?? "";
    const kv = { pod: kobj(pod), podUID: uid, containerName: container.name };
    this.#logger.info("Allocate start", kv);
    try {
      const numCPUs = this.guaranteedCPUs(pod, container);
      if (numCPUs === 0) return;
      if (isPodLevelResourcesSet(pod)) {
        this.#logger.v(2).info(
          "CPU Manager allocation skipped, pod is using pod-level resources but the PodLevelResourceManagers feature gate is not enabled",
          kv,
        );
        return;
      }
      this.#metrics?.cpuManagerPinningRequests.inc();
      try {
        this.#enforceSMTAlignment(numCPUs);
        const existing = this.#s.getCPUSet(uid, container.name);
        if (existing !== undefined) {
          this.#updateCPUsToReuse(pod, container, existing);
          this.#logger.info("Static policy: container already present in state, skipping", kv);
          return;
        }
        const hint = this.#affinity(uid, container.name);
        this.#logger.info("Topology Affinity", { ...kv, affinity: formatHint(hint) });
        let alloc: Allocation;
        try {
          alloc = this.allocateCPUs(numCPUs, hint.numaNodeAffinity, this.#cpusToReuse.get(uid));
        } catch (e) {
          this.#logger.error(e, "Unable to allocate CPUs", { ...kv, numCPUs });
          throw e;
        }
        this.#s.setCPUSet(uid, container.name, alloc.cpus);
        this.#updateCPUsToReuse(pod, container, alloc.cpus);
        this.#updateGauges();
        this.#logger.v(4).info("Allocated exclusive CPUs", {
          ...kv,
          cpuset: alloc.cpus.toString(),
        });
      } catch (e) {
        this.#metrics?.cpuManagerPinningErrors.inc();
        throw e;
      }
    } finally {
      this.#logger.v(2).info("Allocate end", kv);
    }
  }

  /**
   * Releases the container's CPUs to the shared pool, except those another container of the
   * pod still holds (a reused init container's) (upstream RemoveContainer).
   */
  removeContainer(podUID: string, containerName: string): void {
    const kv = { podUID, containerName };
    this.#logger.info("RemoveContainer start", kv);
    const s = this.#s;
    const released = s.getCPUSet(podUID, containerName);
    if (released === undefined) return;
    s.delete(podUID, containerName);
    const inUse = new CPUSet().union(...(s.getCPUAssignments().get(podUID)?.values() ?? []));
    const updated = s.getDefaultCPUSet().union(released.difference(inUse));
    s.setDefaultCPUSet(updated);
    this.#updateGauges();
    this.#logger.info(" RemoveContainer end", { ...kv, defaultCPUSet: updated.toString() });
  }

  /**
   * Takes `numCPUs` from the shared pool (minus the reserved CPUs) and `reusableCPUs`: first
   * from the NUMA nodes of `numaAffinity` (their sockets with align-by-socket), the rest from
   * anywhere; removes them from the shared pool (upstream allocateCPUs).
   */
  allocateCPUs(
    numCPUs: number,
    numaAffinity: BitMask | undefined,
    reusableCPUs: CPUSet = new CPUSet(),
  ): Allocation {
    this.#logger.info("AllocateCPUs", { numCPUs, socket: numaAffinity?.toString() ?? "<nil>" });
    const allocatable = this.getAvailableCPUs().union(reusableCPUs);
    let result = new CPUSet();
    if (numaAffinity !== undefined) {
      const aligned = this.#alignedCPUs(numaAffinity, allocatable);
      result = this.#takeByTopology(aligned, Math.min(numCPUs, aligned.size));
    }
    result = result.union(
      this.#takeByTopology(allocatable.difference(result), numCPUs - result.size),
    );
    const s = this.#s;
    s.setDefaultCPUSet(s.getDefaultCPUSet().difference(result));
    const alloc = { cpus: result, aligned: this.topology.checkAlignment(result) };
    this.#logger.info("AllocateCPUs", {
      result: `${result}; uncoreCache=${alloc.aligned.uncoreCache}`,
    });
    return alloc;
  }

  #takeByTopology(available: CPUSet, numCPUs: number): CPUSet {
    const strategy = this.options.distributeCPUsAcrossCores ? "spread" : "packed";
    if (this.options.distributeCPUsAcrossNUMA) {
      const groupSize = this.options.fullPhysicalCPUsOnly ? this.#cpuGroupSize : 1;
      return takeByTopologyNUMADistributed(this.topology, available, numCPUs, groupSize, strategy);
    }
    return takeByTopologyNUMAPacked(
      this.topology,
      available,
      numCPUs,
      strategy,
      this.options.preferAlignByUncoreCache,
    );
  }

  /** The CPUs of `allocatable` on the mask's NUMA nodes, or their sockets with align-by-socket. */
  #alignedCPUs(mask: BitMask, allocatable: CPUSet): CPUSet {
    const details = this.topology.cpuDetails;
    const numas = mask.getBits();
    if (this.options.alignBySocket) {
      const sockets = details.socketsInNUMANodes(...numas).list();
      return allocatable.intersection(details.cpusInSockets(...sockets));
    }
    return allocatable.intersection(details.cpusInNUMANodes(...numas));
  }

  /**
   * The CPUs the container gets exclusively: its CPU request when the pod is Guaranteed and the
   * request a whole number, else 0 (upstream guaranteedCPUs).
   */
  guaranteedCPUs(pod: V1Pod, container: V1Container): number {
    if (getPodQOS(pod) !== "Guaranteed") return 0;
    return integralCPUs(container.resources?.requests?.cpu);
  }

  /**
   * The CPUs the pod needs at its peak (upstream podGuaranteedCPUs): the larger of what its
   * long-running containers (app containers and sidecars) hold together and what any init
   * container needs beside the sidecars started before it.
   */
  podGuaranteedCPUs(pod: V1Pod): number {
    let byInit = 0;
    let bySidecars = 0;
    for (const c of pod.spec?.initContainers ?? []) {
      if (c.resources?.requests?.cpu === undefined) continue;
      const n = this.guaranteedCPUs(pod, c);
      if (isRestartableInitContainer(c)) bySidecars += n;
      else byInit = Math.max(byInit, bySidecars + n);
    }
    let byApps = 0;
    for (const c of pod.spec?.containers ?? []) {
      if (c.resources?.requests?.cpu === undefined) continue;
      byApps += this.guaranteedCPUs(pod, c);
    }
    return Math.max(byInit, byApps + bySidecars);
  }

  /**
   * The container's hints for `cpu` (upstream GetTopologyHints): undefined when it gets no CPUs
   * of its own; for a container already holding CPUs, the hints of those CPUs, or an empty list
   * (cannot be satisfied) when their number differs from the request.
   */
  getTopologyHints(pod: V1Pod, container: V1Container): ProviderHints {
    const uid = pod.metadata?.uid ?? "";
    const kv = { pod: kobj(pod), podUID: uid, containerName: container.name };
    const requested = this.guaranteedCPUs(pod, container);
    if (requested === 0) return undefined;
    if (isPodLevelResourcesSet(pod)) {
      this.#logger.v(3).info(
        "CPU Manager hint generation skipped, pod is using pod-level resources but the PodLevelResourceManagers feature gate is not enabled",
        kv,
      );
      return undefined;
    }
    // Already allocated, after a kubelet restart for example: the same hints again.
    const allocated = this.#s.getCPUSet(uid, container.name);
    if (allocated !== undefined) {
      if (allocated.size !== requested) {
        this.#logger.info(
          "CPUs already allocated to container with different number than request",
          {
            ...kv,
            requestedSize: requested,
            allocatedSize: allocated.size,
          },
        );
        return new Map([["cpu", []]]);
      }
      this.#logger.info("Regenerating TopologyHints for CPUs already allocated", kv);
      return new Map([["cpu", this.generateCPUTopologyHints(allocated, new CPUSet(), requested)]]);
    }
    const hints = this.generateCPUTopologyHints(
      this.getAvailableCPUs(),
      this.#cpusToReuse.get(uid) ?? new CPUSet(),
      requested,
    );
    this.#logger.info("TopologyHints generated", { ...kv, cpuHints: hints.map(formatHint) });
    return new Map([["cpu", hints]]);
  }

  /** The pod's hints for `cpu`, for the pod scope (upstream GetPodTopologyHints). */
  getPodTopologyHints(pod: V1Pod): ProviderHints {
    const uid = pod.metadata?.uid ?? "";
    const kv = { pod: kobj(pod), podUID: uid };
    const requested = this.podGuaranteedCPUs(pod);
    if (requested === 0) return undefined;
    if (isPodLevelResourcesSet(pod)) {
      this.#logger.v(3).info(
        "CPU Manager pod hint generation skipped, pod is using pod-level resources but the PodLevelResourceManagers feature gate is not enabled",
        kv,
      );
      return undefined;
    }
    let assigned = new CPUSet();
    for (const c of [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])]) {
      const byContainer = this.guaranteedCPUs(pod, c);
      const allocated = this.#s.getCPUSet(uid, c.name);
      if (allocated === undefined) continue;
      if (allocated.size !== byContainer) {
        this.#logger.info(
          "CPUs already allocated to container with different number than request",
          {
            ...kv,
            containerName: c.name,
            requestedByContainer: byContainer,
            allocatedSize: allocated.size,
          },
        );
        return new Map([["cpu", []]]);
      }
      assigned = assigned.union(allocated);
    }
    if (assigned.size === requested) {
      this.#logger.info("Regenerating TopologyHints for CPUs already allocated", kv);
      return new Map([["cpu", this.generateCPUTopologyHints(assigned, new CPUSet(), requested)]]);
    }
    const reusable = (this.#cpusToReuse.get(uid) ?? new CPUSet()).union(assigned);
    const hints = this.generateCPUTopologyHints(this.getAvailableCPUs(), reusable, requested);
    this.#logger.info("TopologyHints generated", { ...kv, cpuHints: hints.map(formatHint) });
    return new Map([["cpu", hints]]);
  }

  /**
   * One hint per NUMA node combination whose `available` CPUs, with all of `reusable` inside
   * it, number at least `request`; preferred when the combination is as narrow as the machine
   * allows for the request (or, with align-by-socket, spans as few sockets as it needs)
   * (upstream generateCPUTopologyHints).
   */
  generateCPUTopologyHints(available: CPUSet, reusable: CPUSet, request: number): TopologyHint[] {
    const details = this.topology.cpuDetails;
    // Upstream reads an unknown CPU's zero-valued info: NUMA node 0.
    const numaOf = (cpu: number) => details.get(cpu)?.numaNodeID ?? 0;
    let minAffinitySize = details.numaNodes().size;
    const masks: BitMask[] = [];
    iterateBitMasks(details.numaNodes().list(), (mask) => {
      const inMask = details.cpusInNUMANodes(...mask.getBits()).size;
      if (inMask >= request && mask.count() < minAffinitySize) minAffinitySize = mask.count();
      // Every reusable CPU must be inside the mask.
      const reusableList = reusable.list();
      if (!reusableList.every((c) => mask.isSet(numaOf(c)))) return;
      const matching = reusableList.length +
        available.list().filter((c) => mask.isSet(numaOf(c))).length;
      if (matching >= request) masks.push(mask);
    });
    return masks.map((mask) => ({
      numaNodeAffinity: mask,
      preferred: (this.options.alignBySocket && this.#isHintSocketAligned(mask, minAffinitySize)) ||
        mask.count() === minAffinitySize,
    }));
  }

  /** The mask spans exactly as many sockets as `minAffinitySize` NUMA nodes need. */
  #isHintSocketAligned(mask: BitMask, minAffinitySize: number): boolean {
    const perSocket = Math.trunc(this.topology.numNUMANodes / this.topology.numSockets);
    if (perSocket === 0) return false;
    const minSockets = Math.trunc((minAffinitySize + perSocket - 1) / perSocket);
    return this.topology.cpuDetails.socketsInNUMANodes(...mask.getBits()).size === minSockets;
  }

  /** Sets the shared pool and exclusive CPU gauges from the state. */
  #updateGauges(): void {
    const m = this.#metrics;
    if (m === undefined) return;
    m.cpuManagerSharedPoolSize.set(this.getAvailableCPUs().size * 1000);
    let exclusive = new CPUSet();
    for (const containers of this.#s.getCPUAssignments().values()) {
      exclusive = exclusive.union(...containers.values());
    }
    m.cpuManagerExclusiveCpus.set(exclusive.size);
  }
}
