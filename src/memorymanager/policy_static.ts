/**
 * @module
 * The `Static` memory manager policy: a Guaranteed pod's containers get their memory and
 * hugepages from NUMA nodes the topology manager agreed on, and the kubelet pins them there
 * (cpuset.mems). The machine state keeps, per NUMA node and memory type, the total, the
 * reserved-for-the-system, the allocatable, the reserved-for-containers and the free amounts,
 * the number of blocks placed on the node, and its `cells`: the nodes it is grouped with. A
 * container fits on one node when it can, else on a group of nodes; a node used on its own is
 * never used in a group and a grouped node only in that same group, so that one container's
 * memory never spills onto a node another container counts on. Regular init containers'
 * memory is reused by the containers after them (they never run at the same time);
 * restartable ("sidecar") init containers' is not.
 *
 * Pods with pod-level resources are left alone (hints and allocation skipped), as upstream
 * does with the PodLevelResourceManagers gate off (its v1.36 default). Where upstream
 * dereferences a memory type a NUMA node does not have (a panic), it counts as 0 here.
 * Corresponds to upstream `pkg/kubelet/cm/memorymanager/policy_static.go`.
 */

import type { V1Container, V1Pod } from "@kubernetes/client-node";
import { kobj, type Logger } from "../klog/klog.ts";
import type { KubeletMetrics } from "../metrics/metrics.ts";
import { isRestartableInitContainer } from "../pod/podutil.ts";
import { getPodQOS } from "../qos/qos.ts";
import { isPodLevelResourcesSet, parseDec } from "../qos/resource_helpers.ts";
import { BitMask, iterateBitMasks } from "../topologymanager/bitmask.ts";
import type { ProviderHints, TopologyHint } from "../topologymanager/policy.ts";
import { hugePageResourceName } from "../nodestatus/node_status.ts";
import type { Block } from "./checkpoint.ts";
import { MemoryManagerError, type MemoryPolicy, POLICY_STATIC } from "./policy.ts";
import type { MachineState, MemoryState, MemoryTableState, NodeState } from "./state.ts";

/** One NUMA node's memory as the machine reports it (the fields of cAdvisor's `info.Node` used). */
export interface NumaNodeMemory {
  readonly id: number;
  /** MemTotal of the node, bytes. */
  readonly memoryBytes: number;
  /** Preallocated hugepages: page size in bytes to page count. */
  readonly hugePages: ReadonlyMap<number, number>;
}

/** The machine's NUMA nodes (readMachineTopology's `nodes` fit). */
export interface MachineMemory {
  readonly nodes: readonly NumaNodeMemory[];
}

/** NUMA node -> memory type -> bytes kept from containers (upstream systemReservedMemory). */
export type SystemReservedMemory = ReadonlyMap<number, ReadonlyMap<string, number>>;

/** The affinity the topology manager chose for a container (upstream topologymanager.Store). */
export type AffinityFunc = (podUID: string, containerName: string) => TopologyHint;

/** The metrics the policy counts in. */
export type MemoryPolicyMetrics = Pick<
  KubeletMetrics,
  "memoryManagerPinningRequests" | "memoryManagerPinningErrors"
>;

/** What {@link StaticPolicy} is built with. */
export interface StaticPolicyOptions {
  readonly machine: MachineMemory;
  readonly systemReserved: SystemReservedMemory;
  readonly affinity: AffinityFunc;
  readonly logger: Logger;
  /** @default none */
  readonly metrics?: MemoryPolicyMetrics;
}

function isMemoryResource(name: string): boolean {
  return name === "memory" || name.startsWith("hugepages-");
}

/** Go Quantity.AsInt64 of an API quantity; undefined when it is not a whole number in range. */
function asInt64(q: string): number | undefined {
  let d;
  try {
    d = parseDec(q);
  } catch {
    return undefined;
  }
  let n: bigint;
  if (d.s <= 0) n = d.n * 10n ** BigInt(-d.s);
  else {
    const div = 10n ** BigInt(d.s);
    if (d.n % div !== 0n) return undefined;
    n = d.n / div;
  }
  return n <= BigInt(Number.MAX_SAFE_INTEGER) && n >= BigInt(Number.MIN_SAFE_INTEGER)
    ? Number(n)
    : undefined;
}

/** The container's memory and hugepages requests in bytes (upstream getContainerRequestedResources). */
export function getContainerRequestedResources(container: V1Container): Map<string, number> {
  const out = new Map<string, number>();
  for (const [name, q] of Object.entries(container.resources?.requests ?? {})) {
    if (!isMemoryResource(name)) continue;
    const size = asInt64(String(q));
    if (size === undefined) {
      throw new MemoryManagerError("[memorymanager] failed to represent quantity as int64");
    }
    out.set(name, size);
  }
  return out;
}

/**
 * The pod's memory and hugepages needs (upstream getPodRequestedResources): per type, the
 * larger of the long-running containers' sum (regular containers and restartable init
 * containers) and the most any init container needs with the sidecars started before it.
 */
export function getPodRequestedResources(pod: V1Pod): Map<string, number> {
  const byInit = new Map<string, number>();
  const byRestartable = new Map<string, number>();
  for (const c of pod.spec?.initContainers ?? []) {
    for (const [name, qty] of getContainerRequestedResources(c)) {
      if (!byInit.has(name)) byInit.set(name, 0);
      const sidecars = byRestartable.get(name) ?? 0;
      if (isRestartableInitContainer(c)) byRestartable.set(name, sidecars + qty);
      else if (sidecars + qty > byInit.get(name)!) byInit.set(name, sidecars + qty);
    }
  }
  const byApps = new Map<string, number>();
  for (const c of pod.spec?.containers ?? []) {
    for (const [name, qty] of getContainerRequestedResources(c)) {
      byApps.set(name, (byApps.get(name) ?? 0) + qty);
    }
  }
  const out = new Map<string, number>();
  for (const [name, apps] of byApps) {
    out.set(name, Math.max(apps + (byRestartable.get(name) ?? 0), byInit.get(name) ?? 0));
  }
  return out;
}

const EMPTY_TABLE: Readonly<MemoryTableState> = {
  totalMemSize: 0,
  systemReserved: 0,
  allocatable: 0,
  reserved: 0,
  free: 0,
};

function table(m: MachineState, node: number, resource: string): Readonly<MemoryTableState> {
  return m.get(node)?.memoryMap.get(resource) ?? EMPTY_TABLE;
}

function sortedEqual(a: readonly number[], b: readonly number[]): boolean {
  const x = [...a].sort((p, q) => p - q);
  const y = [...b].sort((p, q) => p - q);
  return x.length === y.length && x.every((v, i) => v === y[i]);
}

/** Whether every node of `hint` is in `group` (upstream isHintInGroup). */
function isHintInGroup(hint: readonly number[], group: readonly number[]): boolean {
  return hint.every((n) => group.includes(n));
}

/** The preferred hint with the fewest, then lowest, nodes (upstream findBestHint). */
function findBestHint(hints: readonly TopologyHint[]): TopologyHint {
  let best: TopologyHint = { numaNodeAffinity: undefined, preferred: false };
  for (const h of hints) {
    if (best.numaNodeAffinity === undefined) best = h;
    else if (h.preferred && !best.preferred) best = h;
    else if (
      h.preferred === best.preferred && h.numaNodeAffinity!.isNarrowerThan(best.numaNodeAffinity)
    ) {
      best = h;
    }
  }
  return best;
}

/** Whether the nodes of `mask` have enough free memory of every type (upstream isAffinitySatisfyRequest). */
function isAffinitySatisfyRequest(
  m: MachineState,
  mask: BitMask,
  requested: ReadonlyMap<string, number>,
): boolean {
  for (const [resource, size] of requested) {
    let free = 0;
    for (const node of mask.getBits()) free += table(m, node, resource).free;
    if (free < size) return false;
  }
  return true;
}

/**
 * Whether `mask` would use a node alone that is grouped, or in another group than its own
 * (upstream isAffinityViolatingNUMAAllocations).
 */
export function isAffinityViolatingNUMAAllocations(m: MachineState, mask: BitMask): boolean {
  const bits = mask.getBits();
  if (bits.length === 1) return false;
  for (const node of bits) {
    const s = m.get(node);
    if (s === undefined || s.numberOfAssignments === 0) continue;
    if (s.cells.length === 1) return true;
    if (!sortedEqual(s.cells, bits)) return true;
  }
  return false;
}

/** Pod UID -> NUMA mask (its string) -> memory type -> bytes an app container may reuse. */
type ReusableMemory = Map<string, Map<string, Map<string, number>>>;

function isRegularInitContainer(pod: V1Pod, container: V1Container): boolean {
  const c = pod.spec?.initContainers?.find((i) => i.name === container.name);
  return c !== undefined && !isRestartableInitContainer(c);
}

/** The `Static` policy (upstream staticPolicy). */
export class StaticPolicy implements MemoryPolicy {
  readonly name = POLICY_STATIC;
  readonly #machine: MachineMemory;
  readonly #systemReserved: SystemReservedMemory;
  readonly #affinity: AffinityFunc;
  readonly #logger: Logger;
  readonly #metrics: MemoryPolicyMetrics | undefined;
  /** Regular init containers' memory that later containers of the same pod may reuse. */
  readonly initContainersReusableMemory: ReusableMemory = new Map();

  /** Throws {@link MemoryManagerError} when no NUMA node reserves any `memory` for the system. */
  constructor(o: StaticPolicyOptions) {
    let total = 0;
    for (const node of o.systemReserved.values()) total += node.get("memory") ?? 0;
    if (total <= 0) {
      throw new MemoryManagerError("[memorymanager] you should specify the system reserved memory");
    }
    this.#machine = o.machine;
    this.#systemReserved = o.systemReserved;
    this.#affinity = o.affinity;
    this.#logger = o.logger;
    this.#metrics = o.metrics;
  }

  start(s: MemoryState): void {
    try {
      this.#validateState(s);
    } catch (e) {
      this.#logger.error(e, "Invalid state, please drain node and remove policy state file");
      throw e;
    }
  }

  allocate(s: MemoryState, pod: V1Pod, container: V1Container): void {
    const logger = this.#logger.with({ pod: kobj(pod), containerName: container.name });
    const podUID = pod.metadata?.uid ?? "";
    const qos = getPodQOS(pod);
    if (qos !== "Guaranteed") {
      logger.v(5).info("Exclusive memory allocation skipped, pod QoS is not guaranteed", { qos });
      return;
    }
    if (isPodLevelResourcesSet(pod)) {
      logger.v(2).info(
        "Allocation skipped, pod is using pod-level resources which are not supported by the static Memory manager policy",
        { podUID },
      );
      return;
    }
    logger.info("Allocate");
    this.#metrics?.memoryManagerPinningRequests.inc();
    try {
      this.#allocate(s, pod, container, logger);
    } catch (e) {
      this.#metrics?.memoryManagerPinningErrors.inc();
      throw e;
    }
  }

  #allocate(s: MemoryState, pod: V1Pod, container: V1Container, logger: Logger): void {
    const podUID = pod.metadata?.uid ?? "";
    const existing = s.getMemoryBlocks(podUID, container.name);
    if (existing !== undefined) {
      this.#updatePodReusableMemory(pod, container, existing);
      logger.info("Container already present in state, skipping");
      return;
    }
    const hint = this.#affinity(podUID, container.name);
    logger.info("Got topology affinity", { hint });
    const requested = getContainerRequestedResources(container);
    const machineState = s.getMachineState();
    let best = hint;
    // No affinity from the topology manager: compute it as the hints would.
    if (best.numaNodeAffinity === undefined) {
      const def = this.#defaultHint(machineState, pod, requested);
      if (!def.preferred && best.preferred) {
        throw new MemoryManagerError("[memorymanager] failed to find the default preferred hint");
      }
      best = def;
    }
    // The merged affinity can be narrower than what the request needs: widen it again.
    if (!isAffinitySatisfyRequest(machineState, best.numaNodeAffinity!, requested)) {
      const extended = this.#extendHint(machineState, pod, requested, best.numaNodeAffinity!);
      if (!extended.preferred && best.preferred) {
        throw new MemoryManagerError("[memorymanager] failed to find the extended preferred hint");
      }
      best = extended;
    }
    const mask = best.numaNodeAffinity!;
    if (isAffinityViolatingNUMAAllocations(machineState, mask)) {
      throw new MemoryManagerError("[memorymanager] preferred hint violates NUMA node allocation");
    }
    const bits = mask.getBits();
    const blocks: Block[] = [];
    for (const [resource, size] of requested) {
      blocks.push({ numaAffinity: bits, type: resource, size });
      const reusable = this.#getPodReusableMemory(pod, mask, resource);
      this.#updateMachineState(
        machineState,
        bits,
        resource,
        reusable >= size ? 0 : size - reusable,
      );
    }
    this.#updatePodReusableMemory(pod, container, blocks);
    s.setMachineState(machineState);
    s.setMemoryBlocks(podUID, container.name, blocks);
    // So that the pod's blocks add up to what it holds, the init containers' blocks shrink by
    // what this container reused of them.
    this.#updateInitContainersMemoryBlocks(s, pod, container, blocks);
    logger.v(4).info("Allocated exclusive memory");
  }

  #updateMachineState(m: MachineState, bits: readonly number[], resource: string, size: number) {
    let left = size;
    for (const node of bits) {
      const s = m.get(node);
      if (s === undefined) continue;
      s.numberOfAssignments++;
      s.cells = [...bits];
      if (left === 0) continue;
      const t = s.memoryMap.get(resource);
      if (t === undefined || t.free <= 0) continue;
      if (t.free >= left) {
        t.reserved += left;
        t.free -= left;
        left = 0;
        continue;
      }
      left -= t.free;
      t.reserved += t.free;
      t.free = 0;
    }
  }

  #getPodReusableMemory(pod: V1Pod, mask: BitMask, resource: string): number {
    return this.initContainersReusableMemory.get(pod.metadata?.uid ?? "")?.get(mask.toString())
      ?.get(resource) ?? 0;
  }

  removeContainer(s: MemoryState, podUID: string, containerName: string): void {
    const logger = this.#logger.with({ podUID, containerName });
    logger.info("RemoveContainer", { podUID, containerName });
    const blocks = s.getMemoryBlocks(podUID, containerName);
    if (blocks === undefined) return;
    s.delete(podUID, containerName);
    this.#releaseMemory(s, blocks);
    logger.info("Released container-level memory");
  }

  #releaseMemory(s: MemoryState, blocks: readonly Block[]): void {
    const m = s.getMachineState();
    for (const b of blocks) {
      let left = b.size;
      for (const node of b.numaAffinity) {
        const ns = m.get(node);
        if (ns === undefined) continue;
        ns.numberOfAssignments--;
        if (ns.numberOfAssignments === 0) ns.cells = [node];
        if (left === 0) continue;
        const t = ns.memoryMap.get(b.type);
        if (t === undefined || t.reserved === 0) continue;
        if (t.reserved < left) {
          left -= t.reserved;
          t.free += t.reserved;
          t.reserved = 0;
          continue;
        }
        t.free += left;
        t.reserved -= left;
        left = 0;
      }
    }
    s.setMachineState(m);
  }

  getPodTopologyHints(s: MemoryState, pod: V1Pod): ProviderHints {
    if (getPodQOS(pod) !== "Guaranteed") return undefined;
    let requested: Map<string, number>;
    try {
      requested = getPodRequestedResources(pod);
    } catch (e) {
      this.#logger.error(e, "Failed to get pod requested resources", {
        pod: kobj(pod),
        podUID: pod.metadata?.uid,
      });
      return undefined;
    }
    if (isPodLevelResourcesSet(pod)) {
      this.#logger.v(3).info(
        "Memory Manager pod hint generation skipped, pod is using pod-level resources but the PodLevelResourceManagers feature gate is not enabled",
        { pod: kobj(pod), podUID: pod.metadata?.uid },
      );
      return undefined;
    }
    if (requested.size === 0) return undefined;
    const podUID = pod.metadata?.uid ?? "";
    for (const c of [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])]) {
      const blocks = s.getMemoryBlocks(podUID, c.name);
      // Already allocated (a kubelet restart): give the same answer again.
      if (blocks !== undefined) return this.#regenerateHints(pod, c, blocks, requested);
    }
    // The pod's hints are computed once for all its containers: no reusable memory applies.
    return this.#calculateHints(s.getMachineState(), pod, requested);
  }

  getTopologyHints(s: MemoryState, pod: V1Pod, container: V1Container): ProviderHints {
    if (getPodQOS(pod) !== "Guaranteed") return undefined;
    let requested: Map<string, number>;
    try {
      requested = getContainerRequestedResources(container);
    } catch (e) {
      this.#logger.error(e, "Failed to get container requested resources", {
        pod: kobj(pod),
        podUID: pod.metadata?.uid,
        containerName: container.name,
      });
      return undefined;
    }
    if (isPodLevelResourcesSet(pod)) {
      this.#logger.v(3).info(
        "Memory Manager pod hint generation skipped, pod is using pod-level resources but the PodLevelResourceManagers feature gate is not enabled",
        { pod: kobj(pod), podUID: pod.metadata?.uid },
      );
      return undefined;
    }
    const blocks = s.getMemoryBlocks(pod.metadata?.uid ?? "", container.name);
    if (blocks !== undefined) return this.#regenerateHints(pod, container, blocks, requested);
    return this.#calculateHints(s.getMachineState(), pod, requested);
  }

  #regenerateHints(
    pod: V1Pod,
    container: V1Container,
    blocks: readonly Block[],
    requested: ReadonlyMap<string, number>,
  ): ProviderHints {
    const logger = this.#logger.with({ pod: kobj(pod) });
    const hints = new Map<string, TopologyHint[]>();
    for (const name of requested.keys()) hints.set(name, []);
    if (blocks.length !== requested.size) {
      logger.info(
        "The number of requested resources by the container differs from the number of memory blocks",
        { containerName: container.name },
      );
      return undefined;
    }
    for (const b of blocks) {
      const want = requested.get(b.type);
      if (want === undefined) {
        logger.info("Container requested resources but none available of this type", {
          containerName: container.name,
          type: b.type,
        });
        return undefined;
      }
      if (b.size !== want) {
        logger.info("Memory already allocated with different numbers than requested", {
          containerName: container.name,
          type: b.type,
          requestedResource: want,
          allocatedSize: b.size,
        });
        return undefined;
      }
      let affinity: BitMask;
      try {
        affinity = BitMask.of(...b.numaAffinity);
      } catch (e) {
        logger.error(e, "Failed to generate NUMA bitmask", {
          containerName: container.name,
          type: b.type,
        });
        return undefined;
      }
      logger.info("Regenerating TopologyHints, resource was already allocated to pod", {
        resourceName: b.type,
        podUID: pod.metadata?.uid,
        containerName: container.name,
      });
      hints.get(b.type)!.push({ numaNodeAffinity: affinity, preferred: true });
    }
    return hints;
  }

  /**
   * Every NUMA node set that can hold the request, preferred when it has the fewest nodes any
   * set with enough allocatable memory has (upstream calculateHints). Empty when none can.
   */
  #calculateHints(
    m: MachineState,
    pod: V1Pod,
    requested: ReadonlyMap<string, number>,
  ): Map<string, TopologyHint[]> {
    const nodes = [...m.keys()].sort((a, b) => a - b);
    let minAffinitySize = nodes.length;
    const masks: BitMask[] = [];
    iterateBitMasks(nodes, (mask) => {
      const bits = mask.getBits();
      const single = bits.length === 1;
      const free = new Map<string, number>();
      for (const [resource, size] of requested) {
        let allocatable = 0, f = 0;
        for (const node of bits) {
          allocatable += table(m, node, resource).allocatable;
          f += table(m, node, resource).free;
        }
        free.set(resource, f);
        if (allocatable < size) return;
      }
      if (mask.count() < minAffinitySize) minAffinitySize = mask.count();
      // A node grouped with others cannot hold a single-node allocation.
      if (single && m.get(bits[0]!)!.cells.length > 1) return;
      if (!single) {
        for (const node of bits) {
          const s = m.get(node)!;
          if (s.numberOfAssignments === 0) continue;
          // Used on its own, or in another group: not usable in this one.
          if (s.cells.length === 1 || !sortedEqual(s.cells, bits)) return;
        }
      }
      for (const [resource, size] of requested) {
        if (free.get(resource)! + this.#getPodReusableMemory(pod, mask, resource) < size) return;
      }
      masks.push(mask);
    });
    const hints = new Map<string, TopologyHint[]>();
    if (masks.length === 0) return hints;
    for (const resource of requested.keys()) {
      hints.set(
        resource,
        masks.map((mask) => ({
          numaNodeAffinity: mask,
          preferred: mask.count() === minAffinitySize,
        })),
      );
    }
    return hints;
  }

  #defaultHint(
    m: MachineState,
    pod: V1Pod,
    requested: ReadonlyMap<string, number>,
  ): TopologyHint {
    const hints = this.#calculateHints(m, pod, requested);
    // All types get the same hints; upstream reads the `memory` ones.
    const best = findBestHint(hints.get("memory") ?? []);
    if (hints.size < 1 || best.numaNodeAffinity === undefined) {
      throw new MemoryManagerError(
        "[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available",
      );
    }
    return best;
  }

  #extendHint(
    m: MachineState,
    pod: V1Pod,
    requested: ReadonlyMap<string, number>,
    mask: BitMask,
  ): TopologyHint {
    const hints = this.#calculateHints(m, pod, requested);
    const bits = mask.getBits();
    const filtered = (hints.get("memory") ?? []).filter((h) =>
      isHintInGroup(bits, h.numaNodeAffinity!.getBits())
    );
    if (filtered.length < 1) {
      throw new MemoryManagerError(
        "[memorymanager] failed to find NUMA nodes to extend the current topology hint",
      );
    }
    return findBestHint(filtered);
  }

  getAllocatableMemory(s: MemoryState): Block[] {
    const out: Block[] = [];
    const m = s.getMachineState();
    for (const node of [...m.keys()].sort((a, b) => a - b)) {
      for (const [resource, t] of m.get(node)!.memoryMap) {
        if (t.allocatable === 0) continue;
        out.push({ numaAffinity: [node], type: resource, size: t.allocatable });
      }
    }
    return out;
  }

  #updatePodReusableMemory(pod: V1Pod, container: V1Container, blocks: readonly Block[]): void {
    const podUID = pod.metadata?.uid ?? "";
    // Only the pod being admitted keeps reusable memory.
    for (const uid of [...this.initContainersReusableMemory.keys()]) {
      if (uid !== podUID) this.initContainersReusableMemory.delete(uid);
    }
    if (isRegularInitContainer(pod, container)) {
      let byMask = this.initContainersReusableMemory.get(podUID);
      if (byMask === undefined) this.initContainersReusableMemory.set(podUID, byMask = new Map());
      for (const b of blocks) {
        const key = BitMask.of(...b.numaAffinity).toString();
        let byType = byMask.get(key);
        if (byType === undefined) byMask.set(key, byType = new Map());
        if (b.size > (byType.get(b.type) ?? 0)) byType.set(b.type, b.size);
      }
      return;
    }
    // An app container used it up, or part of it.
    for (const b of blocks) {
      const mask = BitMask.of(...b.numaAffinity);
      const reusable = this.#getPodReusableMemory(pod, mask, b.type);
      if (reusable === 0) continue;
      const byType = this.initContainersReusableMemory.get(podUID)!.get(mask.toString())!;
      byType.set(b.type, b.size >= reusable ? 0 : reusable - b.size);
    }
  }

  #updateInitContainersMemoryBlocks(
    s: MemoryState,
    pod: V1Pod,
    container: V1Container,
    containerBlocks: readonly Block[],
  ): void {
    const podUID = pod.metadata?.uid ?? "";
    for (const cb of containerBlocks) {
      let size = cb.size;
      for (const init of pod.spec?.initContainers ?? []) {
        if (init.name === container.name || size === 0) break;
        // A sidecar runs beside this container: its memory is not reused.
        if (isRestartableInitContainer(init)) continue;
        const initBlocks = s.getMemoryBlocks(podUID, init.name);
        if (initBlocks === undefined || initBlocks.length === 0) continue;
        const updated = initBlocks.map((ib) => {
          if (
            ib.size === 0 || ib.type !== cb.type ||
            !BitMask.of(...ib.numaAffinity).isEqual(BitMask.of(...cb.numaAffinity))
          ) {
            return ib;
          }
          if (ib.size > size) {
            const next = { ...ib, size: ib.size - size };
            size = 0;
            return next;
          }
          size -= ib.size;
          return { ...ib, size: 0 };
        });
        s.setMemoryBlocks(podUID, init.name, updated);
      }
    }
  }

  #validateState(s: MemoryState): void {
    const machineState = s.getMachineState();
    const assignments = s.getMemoryAssignments();
    if (machineState.size === 0) {
      if (assignments.size !== 0) {
        throw new MemoryManagerError(
          "[memorymanager] machine state can not be empty when it has memory assignments",
        );
      }
      s.setMachineState(this.defaultMachineState());
      return;
    }
    // What the machine state must be, given the machine, the reservations and the assignments.
    const expected = this.defaultMachineState();
    for (const [pod, containers] of assignments) {
      for (const [container, blocks] of containers) {
        updateExpectedMachineState(expected, blocks, pod, container);
      }
    }
    // A memory bank added or removed, or a changed reservation, shows here.
    if (!areMachineStatesEqual(this.#logger, machineState, expected)) {
      throw new MemoryManagerError(
        "[memorymanager] the expected machine state is different from the real one",
      );
    }
  }

  /** The machine state without any assignment (upstream getDefaultMachineState). */
  defaultMachineState(): MachineState {
    const out: MachineState = new Map();
    for (const node of this.#machine.nodes) {
      const state: NodeState = { numberOfAssignments: 0, memoryMap: new Map(), cells: [node.id] };
      out.set(node.id, state);
      let hugepages = 0;
      for (const [pageBytes, count] of node.hugePages) {
        const resource = hugePageResourceName(pageBytes);
        const systemReserved = this.#reserved(node.id, resource);
        const total = count * pageBytes;
        const allocatable = total - systemReserved;
        state.memoryMap.set(resource, {
          totalMemSize: total,
          systemReserved,
          allocatable,
          reserved: 0,
          free: allocatable,
        });
        hugepages += total;
      }
      const systemReserved = this.#reserved(node.id, "memory");
      // Hugepages are carved out of the node's memory.
      const allocatable = node.memoryBytes - systemReserved - hugepages;
      state.memoryMap.set("memory", {
        totalMemSize: node.memoryBytes,
        systemReserved,
        allocatable,
        reserved: 0,
        free: allocatable,
      });
    }
    return out;
  }

  #reserved(node: number, resource: string): number {
    return this.#systemReserved.get(node)?.get(resource) ?? 0;
  }
}

function updateExpectedMachineState(
  expected: MachineState,
  blocks: readonly Block[],
  podUID: string,
  containerName: string,
): void {
  for (const b of blocks) {
    let left = b.size;
    for (const node of b.numaAffinity) {
      const ns = expected.get(node);
      if (ns === undefined) {
        throw new MemoryManagerError(
          `[memorymanager] (pod: ${podUID}, container: ${containerName}) the memory assignment uses the NUMA that does not exist`,
        );
      }
      ns.numberOfAssignments++;
      ns.cells = [...b.numaAffinity];
      const t = ns.memoryMap.get(b.type);
      if (t === undefined) {
        throw new MemoryManagerError(
          `[memorymanager] (pod: ${podUID}, container: ${containerName}) the memory assignment uses memory resource that does not exist`,
        );
      }
      if (left === 0 || t.free <= 0) continue;
      if (t.free >= left) {
        t.reserved += left;
        t.free -= left;
        left = 0;
        continue;
      }
      left -= t.free;
      t.reserved += t.free;
      t.free = 0;
    }
  }
}

/** Whether two machine states agree, logging the first difference (upstream areMachineStatesEqual). */
export function areMachineStatesEqual(logger: Logger, a: MachineState, b: MachineState): boolean {
  if (a.size !== b.size) {
    logger.info("Node states were different", { lengthNode1: a.size, lengthNode2: b.size });
    return false;
  }
  for (const [nodeID, s1] of a) {
    const s2 = b.get(nodeID);
    if (s2 === undefined) {
      logger.info("Node state didn't have node ID", { nodeID });
      return false;
    }
    if (s1.numberOfAssignments !== s2.numberOfAssignments) {
      logger.info("Node state had a different number of memory assignments.", {
        assignment1: s1.numberOfAssignments,
        assignment2: s2.numberOfAssignments,
      });
      return false;
    }
    if (!sortedEqual(s1.cells, s2.cells)) {
      logger.info("Node states had different groups", {
        stateNode1: s1.cells,
        stateNode2: s2.cells,
      });
      return false;
    }
    if (s1.memoryMap.size !== s2.memoryMap.size) {
      logger.info("Node state had memory maps of different lengths", {
        lengthNode1: s1.memoryMap.size,
        lengthNode2: s2.memoryMap.size,
      });
      return false;
    }
    for (const [resource, t1] of s1.memoryMap) {
      const t2 = s2.memoryMap.get(resource);
      if (t2 === undefined) {
        logger.info("Memory state didn't have resource", { resource });
        return false;
      }
      for (const field of ["totalMemSize", "systemReserved", "allocatable"] as const) {
        if (t1[field] !== t2[field]) {
          logger.info("Memory states for the NUMA node and resource are different", {
            node: nodeID,
            resource,
            field,
            [`${field}1`]: t1[field],
            [`${field}2`]: t2[field],
          });
          return false;
        }
      }
      // Within a group, only the group's totals must agree: the split between nodes may not.
      let free1 = 0, free2 = 0, reserved1 = 0, reserved2 = 0;
      for (const node of s1.cells) {
        free1 += table(a, node, resource).free;
        reserved1 += table(a, node, resource).reserved;
        free2 += table(b, node, resource).free;
        reserved2 += table(b, node, resource).reserved;
      }
      if (free1 !== free2 || reserved1 !== reserved2) {
        const field = free1 !== free2 ? "free" : "reserved";
        logger.info("NUMA node and resource had different memory states", {
          node: nodeID,
          resource,
          field,
          [`${field}1`]: field === "free" ? free1 : reserved1,
          [`${field}2`]: field === "free" ? free2 : reserved2,
        });
        return false;
      }
    }
  }
  return true;
}
