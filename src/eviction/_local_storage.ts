/**
 * @module
 * Local storage limits, checked on every eviction pass whatever the thresholds say: a pod
 * whose emptyDir volume outgrows its sizeLimit, whose total ephemeral storage outgrows the
 * sum of its containers' limits, or with a container over its own ephemeral-storage limit is
 * evicted at once. Private to eviction_manager.ts, which supplies the eviction. Corresponds
 * to upstream `pkg/kubelet/eviction/eviction_manager.go` (localStorageEviction,
 * emptyDirLimitEviction, podEphemeralStorageLimitEviction, containerEphemeralStorageLimitEviction).
 */

import type { V1Pod } from "@kubernetes/client-node";
import { parseQuantityFormatted, type Quantity } from "../util/quantity_format.ts";
import { cmpDec, type Dec, podLimits, valueOf } from "../qos/resource_helpers.ts";
import type { PodStats } from "../apis/stats_types.ts";
import type { StatsFunc } from "./_signals.ts";
import {
  containerEphemeralStorageMessage,
  emptyDirMessage,
  podEphemeralStorageMessage,
} from "./_message.ts";

/** Upstream's signal names of the three local storage limits, for kubelet_evictions. */
export type LocalStorageSignal =
  | "emptydirfs.limit"
  | "ephemeralpodfs.limit"
  | "ephemeralcontainerfs.limit";

/**
 * Evicts a pod with a message, naming the limit it broke; true when the eviction was
 * attempted (not a critical pod).
 */
export interface LocalStorageEvictor {
  evict(pod: V1Pod, message: string, signal: LocalStorageSignal): Promise<boolean>;
}

function bytes(n: number): Dec {
  return { n: BigInt(n), s: 0 };
}

/**
 * Evicts every pod over a local storage limit, the emptyDir check first, then the pod total,
 * then each container; resolves to the pods evicted.
 */
export async function localStorageViolation(
  pods: readonly V1Pod[],
  stats: StatsFunc,
  dedicatedImageFs: boolean,
  evictor: LocalStorageEvictor,
): Promise<V1Pod[]> {
  const evicted: V1Pod[] = [];
  for (const pod of pods) {
    const podStats = stats(pod);
    if (!podStats) continue;
    const checks: [LocalStorageSignal, () => string | undefined][] = [
      ["emptydirfs.limit", () => emptyDirViolation(podStats, pod)],
      ["ephemeralpodfs.limit", () => podViolation(podStats, pod)],
      ["ephemeralcontainerfs.limit", () => containerViolation(podStats, pod, dedicatedImageFs)],
    ];
    for (const [signal, check] of checks) {
      const message = check();
      if (message === undefined) continue;
      if (await evictor.evict(pod, message, signal)) evicted.push(pod);
      break;
    }
  }
  return evicted;
}

function emptyDirViolation(stats: PodStats, pod: V1Pod): string | undefined {
  const used = new Map<string, number>();
  for (const v of stats.volume ?? []) {
    if (v.name !== undefined && v.usedBytes !== undefined) used.set(v.name, v.usedBytes);
  }
  for (const v of pod.spec?.volumes ?? []) {
    const limit = v.emptyDir?.sizeLimit;
    const usage = used.get(v.name);
    if (limit === undefined || usage === undefined) continue;
    const size = parseQuantityFormatted(limit);
    if (size.value.n > 0n && cmpDec(bytes(usage), size.value) > 0) {
      return emptyDirMessage(v.name, size);
    }
  }
  return undefined;
}

function podViolation(stats: PodStats, pod: V1Pod): string | undefined {
  const limit = podLimits(pod).get("ephemeral-storage");
  if (limit === undefined) return undefined;
  const usage = stats["ephemeral-storage"]?.usedBytes ?? 0;
  if (cmpDec(bytes(usage), limit) <= 0) return undefined;
  return podEphemeralStorageMessage({ value: limit, format: limitFormat(pod) });
}

// Go's sum keeps the format of the first quantity added: containers come first.
function limitFormat(pod: V1Pod): Quantity["format"] {
  for (const c of [...(pod.spec?.containers ?? []), ...(pod.spec?.initContainers ?? [])]) {
    const q = c.resources?.limits?.["ephemeral-storage"];
    if (q !== undefined) return parseQuantityFormatted(q).format;
  }
  return "BinarySI";
}

function containerViolation(
  stats: PodStats,
  pod: V1Pod,
  dedicatedImageFs: boolean,
): string | undefined {
  const limits = new Map<string, Quantity>();
  for (const c of pod.spec?.containers ?? []) {
    const raw = c.resources?.limits?.["ephemeral-storage"];
    if (raw === undefined) continue;
    const q = parseQuantityFormatted(raw);
    if (valueOf(q.value) !== 0n) limits.set(c.name, q);
  }
  for (const cs of stats.containers) {
    let used = cs.logs?.usedBytes ?? 0;
    // With a dedicated imagefs the writable layer is not on the node filesystem.
    if (!dedicatedImageFs) used += cs.rootfs?.usedBytes ?? 0;
    const limit = limits.get(cs.name);
    if (limit && cmpDec(limit.value, bytes(used)) < 0) {
      return containerEphemeralStorageMessage(cs.name, limit);
    }
  }
  return undefined;
}
