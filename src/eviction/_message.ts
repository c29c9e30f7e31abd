/**
 * @module
 * The texts an eviction leaves on a pod (status message, the Evicted event) and on a refused
 * admission, word for word as upstream writes them, quantities included. Private to
 * eviction_manager.ts. Corresponds to upstream `pkg/kubelet/eviction/helpers.go`
 * (the *MessageFmt constants, evictionMessage, getThresholdMetInfo).
 */

import type { V1Container, V1Pod } from "@kubernetes/client-node";
import {
  formatQuantity,
  intQuantity,
  parseQuantityFormatted,
  type Quantity,
  type QuantityFormat,
  zeroQuantity,
} from "../util/quantity_format.ts";
import { cmpDec, type Dec, isPodLevelResourcesSet } from "../qos/resource_helpers.ts";
import { SIGNAL_RESOURCE, type Threshold } from "./thresholds.ts";
import type { SignalObservations, StatsFunc } from "./_signals.ts";

/** The reason of an eviction's pod status, event and refused admission. */
export const REASON = "Evicted";

/** Go's %q for the names and quantities quoted here (printable ASCII: JSON's quoting). */
function quote(s: string): string {
  return JSON.stringify(s);
}

/** Refused admission: "The node had condition: [MemoryPressure]. " */
export function nodeConditionMessage(conditions: readonly string[]): string {
  return `The node had condition: [${conditions.join(" ")}]. `;
}

/** An emptyDir volume over its sizeLimit. */
export function emptyDirMessage(volume: string, sizeLimit: Quantity): string {
  return `Usage of EmptyDir volume ${quote(volume)} exceeds the limit ${
    quote(formatQuantity(sizeLimit))
  }. `;
}

/** The pod over the sum of its containers' ephemeral-storage limits. */
export function podEphemeralStorageMessage(limit: Quantity): string {
  return `Pod ephemeral local storage usage exceeds the total limit of containers ${
    formatQuantity(limit)
  }. `;
}

/** A container over its own ephemeral-storage limit. */
export function containerEphemeralStorageMessage(container: string, limit: Quantity): string {
  return `Container ${container} exceeded its local ephemeral storage limit ${
    quote(formatQuantity(limit))
  }. `;
}

/** How upstream prints an observation of the resource: bytes binary, counts decimal. */
function formatOf(resource: string): QuantityFormat {
  return resource === "memory" || resource === "ephemeral-storage" ? "BinarySI" : "DecimalSI";
}

/** A threshold's quantity as GetThresholdQuantity returns it, format included. */
export function thresholdQuantity(t: Threshold, capacity: number): Quantity {
  if (t.value.kind === "quantity") return parseQuantityFormatted(t.value.quantity);
  return intQuantity(Math.trunc(capacity * t.value.percentage), "BinarySI");
}

/**
 * Why a pod is evicted for a starved resource (upstream evictionMessage): the resource, the
 * first met threshold of that resource with what was available, and each container (and
 * the pod, with pod-level requests) using more than it requested.
 */
export function evictionMessage(
  resource: string,
  pod: V1Pod,
  stats: StatsFunc,
  thresholds: readonly Threshold[],
  observations: SignalObservations,
): string {
  let message = `The node was low on resource: ${resource}. `;
  for (const t of thresholds) {
    if (SIGNAL_RESOURCE[t.signal] !== resource) continue;
    const observed = observations.get(t.signal);
    if (!observed) continue;
    const quantity = formatQuantity(thresholdQuantity(t, observed.capacity));
    const available = formatQuantity(intQuantity(observed.available, formatOf(resource)));
    message += `Threshold quantity: ${quantity}, available: ${available}. `;
    break;
  }
  const podStats = stats(pod);
  if (!podStats) return message;

  const podRequest = pod.spec?.resources?.requests?.[resource];
  if (
    resource === "memory" && isPodLevelResourcesSet(pod) && podRequest !== undefined &&
    podStats.memory
  ) {
    const usage = intQuantity(podStats.memory.workingSetBytes ?? 0, "BinarySI");
    message += `Pod ${pod.metadata?.name ?? ""} was using ${formatQuantity(usage)}, request is ${
      formatQuantity(parseQuantityFormatted(podRequest))
    }, has larger consumption of ${resource}. `;
  }

  // Ephemeral containers cannot set resources, so only regular and init containers count.
  const containers: V1Container[] = [
    ...(pod.spec?.containers ?? []),
    ...(pod.spec?.initContainers ?? []),
  ];
  for (const cs of podStats.containers) {
    const container = containers.find((c) => c.name === cs.name);
    if (!container) continue;
    const raw = container.resources?.requests?.[resource];
    const request = raw === undefined ? zeroQuantity("DecimalSI") : parseQuantityFormatted(raw);
    let usage: Dec | undefined;
    if (resource === "ephemeral-storage") {
      const root = cs.rootfs?.usedBytes;
      const logs = cs.logs?.usedBytes;
      if (root !== undefined && logs !== undefined) usage = { n: BigInt(root + logs), s: 0 };
    } else if (resource === "memory") {
      const ws = cs.memory?.workingSetBytes;
      if (ws !== undefined) usage = { n: BigInt(ws), s: 0 };
    }
    if (usage !== undefined && cmpDec(usage, request.value) > 0) {
      message += `Container ${container.name} was using ${
        formatQuantity({ value: usage, format: "BinarySI" })
      }, request is ${formatQuantity(request)}, has larger consumption of ${resource}. `;
    }
  }
  return message;
}
