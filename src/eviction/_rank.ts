/**
 * @module
 * The order in which pods are evicted for a starved resource: memory by whether usage exceeds
 * requests, then priority, then usage above requests; disk and inodes the same over the
 * filesystems the signal covers (writable layers, logs, local volumes); pids by priority then
 * process count. Pods without stats go first. Private to eviction_manager.ts. Corresponds to
 * upstream `pkg/kubelet/eviction/helpers.go` (rankMemoryPressure, rankPIDPressure,
 * rankDiskPressureFunc, buildSignalToRankFunc, podDiskUsage, localVolumeNames) and
 * `pkg/api/v1/resource` GetResourceRequestQuantity.
 */

import type { V1Pod, V1Volume } from "@kubernetes/client-node";
import {
  addDec,
  cmpDec,
  type Dec,
  isPodLevelResourcesSet,
  isSupportedPodLevelResource,
  isZeroDec,
  parseDec,
  podRequests,
  resourceList,
  subDec,
} from "../qos/resource_helpers.ts";
import type { Signal } from "./thresholds.ts";
import type { PodStats } from "../apis/stats_types.ts";
import type { StatsFunc } from "./_signals.ts";

/** The filesystem usage a disk signal counts (upstream fsStatsType). */
export type FsStatsType = "root" | "logs" | "localVolumeSource" | "images";

/** Sorts pods in place, first to evict first (upstream rankFunc). */
export type RankFunc = (pods: V1Pod[], stats: StatsFunc) => void;

type Cmp = (a: V1Pod, b: V1Pod) => number;

const ZERO: Dec = { n: 0n, s: 0 };

function dec(n: number): Dec {
  return { n: BigInt(Math.trunc(n)), s: 0 };
}

/** True before false. */
function cmpBool(a: boolean, b: boolean): number {
  return a === b ? 0 : a ? -1 : 1;
}

function orderedBy(...cmps: Cmp[]): (pods: V1Pod[]) => void {
  return (pods) =>
    pods.sort((a, b) => {
      for (const cmp of cmps) {
        const r = cmp(a, b);
        if (r !== 0) return r;
      }
      return 0;
    });
}

/**
 * The pod's request for a resource as eviction ranks it (upstream GetResourceRequestQuantity):
 * pod-level requests replace the containers' when set, and overhead counts only on a
 * non-zero request.
 */
export function podRequest(pod: V1Pod, resource: string): Dec {
  // With pod-level resources upstream skips the containers' requests altogether.
  let q = isPodLevelResourcesSet(pod)
    ? (isSupportedPodLevelResource(resource)
      ? resourceList(pod.spec?.resources?.requests).get(resource)
      : undefined) ?? ZERO
    : podRequests(pod, { excludeOverhead: true }).get(resource) ?? ZERO;
  const overhead = pod.spec?.overhead?.[resource];
  if (overhead !== undefined && !isZeroDec(q)) q = addDec(q, parseDec(overhead));
  return q;
}

/** Lower priority first. */
function priority(a: V1Pod, b: V1Pod): number {
  const pa = a.spec?.priority ?? 0;
  const pb = b.spec?.priority ?? 0;
  return pa === pb ? 0 : pa > pb ? 1 : -1;
}

function withStats(
  stats: StatsFunc,
  f: (a: PodStats, b: PodStats, pa: V1Pod, pb: V1Pod) => number,
) {
  return (pa: V1Pod, pb: V1Pod) => {
    const a = stats(pa);
    const b = stats(pb);
    if (!a || !b) return cmpBool(!a, !b);
    return f(a, b, pa, pb);
  };
}

function memoryUsage(s: PodStats): Dec {
  return dec(s.memory?.workingSetBytes ?? 0);
}

/** Upstream rankMemoryPressure. */
export const rankMemoryPressure: RankFunc = (pods, stats) => {
  const exceeds = withStats(stats, (a, b, pa, pb) =>
    cmpBool(
      cmpDec(memoryUsage(a), podRequest(pa, "memory")) > 0,
      cmpDec(memoryUsage(b), podRequest(pb, "memory")) > 0,
    ));
  const memory = withStats(stats, (a, b, pa, pb) =>
    cmpDec(
      subDec(memoryUsage(b), podRequest(pb, "memory")),
      subDec(memoryUsage(a), podRequest(pa, "memory")),
    ));
  orderedBy(exceeds, priority, memory)(pods);
};

/** Upstream rankPIDPressure. */
export const rankPIDPressure: RankFunc = (pods, stats) => {
  const processes = withStats(
    stats,
    (a, b) => (b.process_stats?.process_count ?? 0) - (a.process_stats?.process_count ?? 0),
  );
  orderedBy(priority, processes)(pods);
};

/** Upstream IsLocalEphemeralVolume, and host paths: the volumes counted as local disk. */
function isLocalVolume(v: V1Volume): boolean {
  return v.hostPath != null || v.gitRepo != null || v.configMap != null ||
    v.downwardAPI != null || (v.emptyDir != null && v.emptyDir.medium !== "Memory");
}

/** Bytes and inodes the pod uses on the measured filesystems (upstream podDiskUsage). */
export function podDiskUsage(
  stats: PodStats,
  pod: V1Pod,
  measure: readonly FsStatsType[],
): { "ephemeral-storage": number; inodes: number } {
  let bytes = 0;
  let inodes = 0;
  for (const c of stats.containers) {
    if (measure.includes("root")) {
      bytes += c.rootfs?.usedBytes ?? 0;
      inodes += c.rootfs?.inodesUsed ?? 0;
    }
    if (measure.includes("logs")) {
      bytes += c.logs?.usedBytes ?? 0;
      inodes += c.logs?.inodesUsed ?? 0;
    }
  }
  if (measure.includes("localVolumeSource")) {
    for (const v of pod.spec?.volumes ?? []) {
      if (!isLocalVolume(v)) continue;
      const vs = stats.volume?.find((s) => s.name === v.name);
      bytes += vs?.usedBytes ?? 0;
      inodes += vs?.inodesUsed ?? 0;
    }
  }
  return { "ephemeral-storage": bytes, inodes };
}

/** Upstream rankDiskPressureFunc for the filesystems and resource a signal measures. */
export function rankDiskPressure(
  measure: readonly FsStatsType[],
  resource: "ephemeral-storage" | "inodes",
): RankFunc {
  return (pods, stats) => {
    const usage = (s: PodStats, p: V1Pod) => dec(podDiskUsage(s, p, measure)[resource]);
    const exceeds = withStats(stats, (a, b, pa, pb) =>
      cmpBool(
        cmpDec(usage(a, pa), podRequest(pa, resource)) > 0,
        cmpDec(usage(b, pb), podRequest(pb, resource)) > 0,
      ));
    // Upstream subtracts the ephemeral-storage request for inodes too.
    const disk = withStats(stats, (a, b, pa, pb) =>
      cmpDec(
        subDec(usage(b, pb), podRequest(pb, "ephemeral-storage")),
        subDec(usage(a, pa), podRequest(pa, "ephemeral-storage")),
      ));
    orderedBy(exceeds, priority, disk)(pods);
  };
}

/** The ranking of each signal given the filesystem layout (upstream buildSignalToRankFunc). */
export function buildSignalToRankFunc(
  dedicatedImageFs: boolean,
  splitContainerFs: boolean,
): Map<Signal, RankFunc> {
  const m = new Map<Signal, RankFunc>([
    ["memory.available", rankMemoryPressure],
    ["allocatableMemory.available", rankMemoryPressure],
    ["pid.available", rankPIDPressure],
  ]);
  const both = (
    bytes: Signal,
    inodes: Signal,
    measure: readonly FsStatsType[],
  ) => {
    m.set(bytes, rankDiskPressure(measure, "ephemeral-storage"));
    m.set(inodes, rankDiskPressure(measure, "inodes"));
  };
  if (dedicatedImageFs && !splitContainerFs) {
    both("nodefs.available", "nodefs.inodesFree", ["logs", "localVolumeSource"]);
    both("imagefs.available", "imagefs.inodesFree", ["root", "images"]);
    both("containerfs.available", "containerfs.inodesFree", ["root", "images"]);
  } else if (dedicatedImageFs && splitContainerFs) {
    const nodeFs: FsStatsType[] = ["logs", "localVolumeSource", "root"];
    both("nodefs.available", "nodefs.inodesFree", nodeFs);
    both("containerfs.available", "containerfs.inodesFree", nodeFs);
    m.set("imagefs.available", rankDiskPressure(["images"], "ephemeral-storage"));
    m.set("imagefs.inodesFree", rankDiskPressure(["images"], "inodes"));
  } else {
    const all: FsStatsType[] = ["images", "root", "logs", "localVolumeSource"];
    both("nodefs.available", "nodefs.inodesFree", all);
    both("imagefs.available", "imagefs.inodesFree", all);
    both("containerfs.available", "containerfs.inodesFree", all);
  }
  return m;
}
