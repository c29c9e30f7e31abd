/**
 * @module
 * The memory the `Static` policy keeps from containers on each NUMA node, from the kubelet's
 * `reservedMemory` setting, and its check against node allocatable: per memory type, the
 * reservations of all NUMA nodes must add up to exactly what node allocatable keeps back
 * (`systemReserved` + `kubeReserved` + the hard eviction threshold of `memory.available`,
 * computed by {@link nodeAllocatableReservation} as upstream's container manager does). Error
 * messages are upstream's, quantities printed as Go prints them. Corresponds to
 * `getTotalMemoryTypeReserved`, `validateReservedMemory`, `convertReserved` and
 * `getSystemReservedMemory` of upstream `pkg/kubelet/cm/memorymanager/memory_manager.go`, and
 * `GetNodeAllocatableReservation` / `hardEvictionReservation` of `pkg/kubelet/cm`.
 */

import { parseThresholdConfig } from "../eviction/thresholds.ts";
import { addDec, cmpDec, type Dec, parseDec, valueOf } from "../qos/resource_helpers.ts";
import {
  formatQuantity,
  intQuantity,
  parseQuantityFormatted,
  type Quantity,
  zeroQuantity,
} from "../util/quantity_format.ts";
import { MemoryManagerError } from "./policy.ts";
import type { SystemReservedMemory } from "./policy_static.ts";

/** One `reservedMemory` entry: memory types and amounts kept on one NUMA node. */
export interface MemoryReservation {
  readonly numaNode: number;
  /** Memory type (`memory`, `hugepages-2Mi`, ...) to a quantity such as "1Gi". */
  readonly limits: Readonly<Record<string, string>>;
}

/** Go's Quantity.Add: the sum takes the addend's format when the running value is zero. */
function addQuantity(a: Quantity, b: Quantity): Quantity {
  return { value: addDec(a.value, b.value), format: a.value.n === 0n ? b.format : a.format };
}

function isZero(d: Dec): boolean {
  return d.n === 0n;
}

/**
 * The amount of each memory type all reservations add up to (upstream
 * getTotalMemoryTypeReserved); throws {@link MemoryManagerError} for a NUMA node not in
 * `numaNodes`.
 */
export function getTotalMemoryTypeReserved(
  numaNodes: readonly number[],
  reservedMemory: readonly MemoryReservation[],
): Map<string, Quantity> {
  const total = new Map<string, Quantity>();
  for (const r of reservedMemory) {
    if (!numaNodes.includes(r.numaNode)) {
      throw new MemoryManagerError(
        `the reserved memory configuration references a NUMA node ${r.numaNode} that does not exist on this machine`,
      );
    }
    for (const [name, raw] of Object.entries(r.limits)) {
      const q = parseQuantityFormatted(String(raw));
      const sum = total.get(name);
      // Upstream adds the running total to the new entry, so the new entry's format wins.
      total.set(name, sum === undefined ? q : addQuantity(q, sum));
    }
  }
  return total;
}

/**
 * Checks that, for `memory` and every hugepages size named on either side, the reservations
 * add up to node allocatable's (upstream validateReservedMemory); throws
 * {@link MemoryManagerError} "the total amount "1Gi" of type "memory" is not equal to the value
 * "0" determined by Node Allocatable feature".
 */
export function validateReservedMemory(
  numaNodes: readonly number[],
  nodeAllocatableReservation: Readonly<Record<string, string>>,
  reservedMemory: readonly MemoryReservation[],
): void {
  const total = getTotalMemoryTypeReserved(numaNodes, reservedMemory);
  const types = new Set(total.keys());
  for (const name of Object.keys(nodeAllocatableReservation)) {
    if (name === "memory" || name.startsWith("hugepages-")) types.add(name);
  }
  for (const name of types) {
    const raw = nodeAllocatableReservation[name];
    let allocatable = zeroQuantity("DecimalSI");
    if (raw !== undefined) allocatable = addQuantity(allocatable, parseQuantityFormatted(raw));
    let reserved = zeroQuantity("DecimalSI");
    const sum = total.get(name);
    if (sum !== undefined) reserved = addQuantity(reserved, sum);
    if (cmpDec(allocatable.value, reserved.value) !== 0) {
      throw new MemoryManagerError(
        `the total amount ${JSON.stringify(formatQuantity(reserved))} of type ${
          JSON.stringify(name)
        } is not equal to the value ${
          JSON.stringify(formatQuantity(allocatable))
        } determined by Node Allocatable feature`,
      );
    }
  }
}

/**
 * The reservations as bytes by NUMA node and memory type, every node of the machine present
 * (upstream convertReserved); a later entry for the same node and type replaces an earlier one.
 */
export function convertReserved(
  numaNodes: readonly number[],
  reservedMemory: readonly MemoryReservation[],
): Map<number, Map<string, number>> {
  const out = new Map<number, Map<string, number>>(numaNodes.map((n) => [n, new Map()]));
  for (const r of reservedMemory) {
    for (const [name, raw] of Object.entries(r.limits)) {
      const d = parseQuantityFormatted(String(raw)).value;
      const whole = d.s <= 0 ? d.n * 10n ** BigInt(-d.s) : undefined;
      const exact = whole ??
        (d.n % 10n ** BigInt(d.s) === 0n ? d.n / 10n ** BigInt(d.s) : undefined);
      if (exact === undefined || exact > BigInt(Number.MAX_SAFE_INTEGER) || exact < 0n) {
        throw new MemoryManagerError("could not covert a variable of type Quantity to int64");
      }
      let node = out.get(r.numaNode);
      if (node === undefined) out.set(r.numaNode, node = new Map());
      node.set(name, Number(exact));
    }
  }
  return out;
}

/** Validates and converts the reservations (upstream getSystemReservedMemory). */
export function getSystemReservedMemory(
  numaNodes: readonly number[],
  nodeAllocatableReservation: Readonly<Record<string, string>>,
  reservedMemory: readonly MemoryReservation[],
): SystemReservedMemory {
  validateReservedMemory(numaNodes, nodeAllocatableReservation, reservedMemory);
  return convertReserved(numaNodes, reservedMemory);
}

/** What node allocatable keeps back is computed from. */
export interface NodeAllocatableReservationInput {
  /** The node's capacity: only resources named here are reserved. */
  readonly capacity: Readonly<Record<string, string>>;
  /** `systemReserved`. @default {} */
  readonly systemReserved?: Readonly<Record<string, string>>;
  /** `kubeReserved`. @default {} */
  readonly kubeReserved?: Readonly<Record<string, string>>;
  /** `evictionHard`; its `memory.available` and `nodefs.available` thresholds count. @default {} */
  readonly evictionHard?: Readonly<Record<string, string>>;
}

/**
 * Per capacity resource, `systemReserved` + `kubeReserved` + the hard eviction threshold, zero
 * sums left out, each printed as Go prints the sum (upstream GetNodeAllocatableReservation).
 * A percentage threshold is that share (a float32, as upstream parses it) of the capacity.
 */
export function nodeAllocatableReservation(
  o: NodeAllocatableReservationInput,
): Record<string, string> {
  const eviction = new Map<string, Quantity>();
  const signals: Record<string, string> = {
    "memory.available": "memory",
    "nodefs.available": "ephemeral-storage",
  };
  for (const t of parseThresholdConfig({ evictionHard: { ...o.evictionHard } })) {
    const resource = signals[t.signal];
    if (resource === undefined || t.operator !== "LessThan") continue;
    if (t.value.kind === "quantity") {
      eviction.set(resource, parseQuantityFormatted(t.value.quantity));
    } else {
      const capacity = o.capacity[resource];
      const whole = capacity === undefined ? 0 : Number(valueOf(parseDec(capacity)));
      eviction.set(resource, intQuantity(Math.trunc(whole * t.value.percentage), "BinarySI"));
    }
  }
  const out: Record<string, string> = {};
  for (const name of Object.keys(o.capacity)) {
    let sum = zeroQuantity("DecimalSI");
    for (const raw of [o.systemReserved?.[name], o.kubeReserved?.[name]]) {
      if (raw !== undefined) sum = addQuantity(sum, parseQuantityFormatted(raw));
    }
    const e = eviction.get(name);
    if (e !== undefined) sum = addQuantity(sum, e);
    if (!isZero(sum.value)) out[name] = formatQuantity(sum);
  }
  return out;
}
