/**
 * @module
 * The eviction manager's arithmetic over one Summary: what each signal observes (available
 * and capacity), which thresholds that meets (with minimum reclaim while one is in effect),
 * when thresholds and node conditions were first and last seen, and which grace and
 * transition periods have passed.
 * Pure functions of their arguments and the clock reading the caller passes in. Private to
 * eviction_manager.ts. Corresponds to upstream `pkg/kubelet/eviction/helpers.go`
 * (makeSignalObservations, thresholdsMet, thresholdsFirstObservedAt, nodeConditions*,
 * thresholdsUpdatedStats, byEvictionPriority) and `helpers_others.go`.
 */

import type { V1Pod } from "@kubernetes/client-node";
import {
  getThresholdQuantity,
  type Signal,
  SIGNAL_CONDITION,
  SIGNAL_RESOURCE,
  type Threshold,
  type ThresholdValue,
} from "./thresholds.ts";
import type { Logger } from "../klog/klog.ts";
import { formatDuration } from "../util/duration.ts";
import { type PodStats, type Summary, SYSTEM_CONTAINER_PODS } from "../apis/stats_types.ts";

/** What one signal observed: amounts in base units, and the sample time (RFC 3339). */
export interface SignalObservation {
  readonly available: number;
  readonly capacity: number;
  readonly time?: string;
}

/** Observations by signal. */
export type SignalObservations = ReadonlyMap<Signal, SignalObservation>;

/** The pod's stats in the Summary the observations came from (upstream statsFunc). */
export type StatsFunc = (pod: V1Pod) => PodStats | undefined;

/** A node condition the eviction manager reports. */
export type NodeConditionType = "MemoryPressure" | "DiskPressure" | "PIDPressure";

/**
 * Upstream makeSignalObservations. `podsMemoryLimit` stands in for the pods cgroup's memory
 * limit when its sample has no availableBytes (the cgroup has no limit of its own).
 */
export function makeSignalObservations(
  summary: Summary,
  logger: Logger,
  podsMemoryLimit?: number,
  /**
   * Told when the "pods" system container is missing (true) or present (false), so the
   * caller can log the missing signal once per change. @default logs an error every time
   */
  podsContainerMissing?: (missing: boolean) => void,
): { observations: Map<Signal, SignalObservation>; statsFunc: StatsFunc } {
  const byUid = new Map<string, PodStats>();
  for (const p of summary.pods) byUid.set(p.podRef.uid, p);
  const statsFunc: StatsFunc = (pod) => byUid.get(pod.metadata?.uid ?? "");
  const out = new Map<Signal, SignalObservation>();
  const node = summary.node;

  const mem = node.memory;
  if (mem?.availableBytes !== undefined && mem.workingSetBytes !== undefined) {
    // No swap here: upstream adds accessible swap to both only under NodeSwap LimitedSwap.
    out.set("memory.available", {
      available: mem.availableBytes,
      capacity: mem.availableBytes + mem.workingSetBytes,
      time: mem.time,
    });
  }

  const pods = node.systemContainers?.find((c) => c.name === SYSTEM_CONTAINER_PODS);
  podsContainerMissing?.(!pods);
  if (!pods) {
    if (!podsContainerMissing) logPodsContainerMissing(logger);
  } else if (pods.memory?.workingSetBytes !== undefined) {
    const ws = pods.memory.workingSetBytes;
    const available = pods.memory.availableBytes ??
      (podsMemoryLimit === undefined ? undefined : Math.max(0, podsMemoryLimit - ws));
    if (available !== undefined) {
      out.set("allocatableMemory.available", {
        available,
        capacity: available + ws,
        time: pods.memory.time,
      });
    }
  }

  const fs = (bytes: Signal, inodes: Signal, f: typeof node.fs) => {
    if (!f) return;
    if (f.availableBytes !== undefined && f.capacityBytes !== undefined) {
      out.set(bytes, { available: f.availableBytes, capacity: f.capacityBytes, time: f.time });
    }
    if (f.inodesFree !== undefined && f.inodes !== undefined) {
      out.set(inodes, { available: f.inodesFree, capacity: f.inodes, time: f.time });
    }
  };
  fs("nodefs.available", "nodefs.inodesFree", node.fs);
  fs("imagefs.available", "imagefs.inodesFree", node.runtime?.imageFs);
  fs("containerfs.available", "containerfs.inodesFree", node.runtime?.containerFs);

  const rlimit = node.rlimit;
  if (rlimit?.maxpid !== undefined && rlimit.curproc !== undefined) {
    out.set("pid.available", {
      available: rlimit.maxpid - rlimit.curproc,
      capacity: rlimit.maxpid,
      time: rlimit.time,
    });
  }
  return { observations: out, statsFunc };
}

/** The amount a threshold stands for against a capacity (upstream GetThresholdQuantity). */
export function thresholdAmount(value: ThresholdValue, capacity: number): number {
  return getThresholdQuantity(value, capacity);
}

/**
 * The thresholds whose signal is below them, ignoring grace periods (upstream thresholdsMet);
 * with `enforceMinReclaim`, the minimum reclaim is added to each threshold.
 */
export function thresholdsMet(
  thresholds: readonly Threshold[],
  observations: SignalObservations,
  enforceMinReclaim: boolean,
  logger: Logger,
): Threshold[] {
  const out: Threshold[] = [];
  for (const t of thresholds) {
    const observed = observations.get(t.signal);
    if (!observed) {
      logger.info("Eviction manager: no observation found for eviction signal", {
        signal: t.signal,
      });
      continue;
    }
    let quantity = thresholdAmount(t.value, observed.capacity);
    if (enforceMinReclaim && t.minReclaim) {
      quantity += thresholdAmount(t.minReclaim, observed.capacity);
    }
    if (t.operator === "LessThan" && quantity > observed.available) out.push(t);
  }
  return out;
}

/** `a` plus the thresholds of `b` not already in it (upstream mergeThresholds). */
export function mergeThresholds(a: readonly Threshold[], b: readonly Threshold[]): Threshold[] {
  const out = [...a];
  for (const t of b) if (!out.some((o) => sameThreshold(o, t))) out.push(t);
  return out;
}

function sameThreshold(a: Threshold, b: Threshold): boolean {
  if (a.gracePeriod !== b.gracePeriod || a.operator !== b.operator || a.signal !== b.signal) {
    return false;
  }
  if (a.value.kind === "quantity") {
    return b.value.kind === "quantity" && a.value.amount === b.value.amount;
  }
  return b.value.kind === "percentage" && a.value.percentage === b.value.percentage;
}

/** When each threshold was first met: kept from `last`, else `now`. */
export function thresholdsFirstObservedAt(
  thresholds: readonly Threshold[],
  last: ReadonlyMap<Threshold, number>,
  now: number,
): Map<Threshold, number> {
  const out = new Map<Threshold, number>();
  for (const t of thresholds) out.set(t, last.get(t) ?? now);
  return out;
}

/** The thresholds met for at least their grace period (upstream thresholdsMetGracePeriod). */
export function thresholdsMetGracePeriod(
  observedAt: ReadonlyMap<Threshold, number>,
  now: number,
  logger: Logger,
): Threshold[] {
  const out: Threshold[] = [];
  for (const [t, at] of observedAt) {
    const duration = now - at;
    if (duration < t.gracePeriod) {
      logger.v(2).info("Eviction manager: eviction criteria not yet met", {
        threshold: formatThreshold(t),
        duration: formatDuration(duration),
      });
      continue;
    }
    out.push(t);
  }
  return out;
}

/** The node conditions the thresholds stand for, each once, in threshold order. */
export function nodeConditions(thresholds: readonly Threshold[]): NodeConditionType[] {
  const out: NodeConditionType[] = [];
  for (const t of thresholds) {
    const c = SIGNAL_CONDITION[t.signal] as NodeConditionType;
    if (!out.includes(c)) out.push(c);
  }
  return out;
}

/** When each condition was last seen: `now` for the current ones, else the previous time. */
export function nodeConditionsLastObservedAt(
  conditions: readonly NodeConditionType[],
  last: ReadonlyMap<NodeConditionType, number>,
  now: number,
): Map<NodeConditionType, number> {
  const out = new Map<NodeConditionType, number>();
  for (const c of conditions) out.set(c, now);
  for (const [c, at] of last) if (!out.has(c)) out.set(c, at);
  return out;
}

/** The conditions seen within the last `periodMs` (the pressure transition period). */
export function nodeConditionsObservedSince(
  observedAt: ReadonlyMap<NodeConditionType, number>,
  periodMs: number,
  now: number,
): NodeConditionType[] {
  const out: NodeConditionType[] = [];
  for (const [c, at] of observedAt) if (now - at < periodMs) out.push(c);
  return out;
}

/** The thresholds whose signal has a newer sample than the last synchronize saw. */
export function thresholdsUpdatedStats(
  thresholds: readonly Threshold[],
  observations: SignalObservations,
  last: SignalObservations,
  logger: Logger,
): Threshold[] {
  const out: Threshold[] = [];
  for (const t of thresholds) {
    const observed = observations.get(t.signal);
    if (!observed) {
      logger.info("Eviction manager: no observation found for eviction signal", {
        signal: t.signal,
      });
      continue;
    }
    const previous = last.get(t.signal);
    if (!previous || !observed.time || timeOf(observed.time) > timeOf(previous.time)) out.push(t);
  }
  return out;
}

function timeOf(t: string | undefined): number {
  return t === undefined ? 0 : Date.parse(t);
}

/**
 * Memory thresholds first, then the others in their order (upstream byEvictionPriority; its
 * sort is not stable, this one is).
 */
export function byEvictionPriority(thresholds: readonly Threshold[]): Threshold[] {
  const rank = (t: Threshold) =>
    t.signal === "memory.available" || t.signal === "allocatableMemory.available" ? 0 : 1;
  return [...thresholds].sort((a, b) => rank(a) - rank(b));
}

/** upstream formatThreshold, for logs. */
export function formatThreshold(t: Threshold): string {
  const value = t.value.kind === "quantity"
    ? t.value.quantity
    : `${Math.round(t.value.percentage * 1e6) / 1e4}%`;
  return `threshold(signal=${t.signal}, operator=${t.operator}, value=${value}, ` +
    `gracePeriod=${formatDuration(t.gracePeriod)})`;
}

/** The resource a signal's pressure reclaims. */
export function resourceOf(signal: Signal): string {
  return SIGNAL_RESOURCE[signal];
}

/** Upstream's error for a summary without the "pods" system container. */
export function logPodsContainerMissing(logger: Logger): void {
  logger.error(
    new Error(`system container "${SYSTEM_CONTAINER_PODS}" not found in metrics`),
    "Eviction manager: failed to construct signal",
    { signal: "allocatableMemory.available" },
  );
}
