/**
 * @module
 * Conversions of the stats provider (`provider.ts`): samples of the cAdvisor equivalent
 * and filesystem usage into the Summary API's CPU, memory, network and filesystem stats, and a
 * pod's samples added up. Corresponds to upstream `pkg/kubelet/stats/helper.go`.
 */

import type { V1Volume } from "@kubernetes/client-node";
import type { Sample } from "./cadvisor.ts";
import type { FsUsage } from "./fs_stats.ts";
import { defaultInterface, type InterfaceStats as NetInterface } from "./net_stats.ts";
import type { PsiStats } from "./psi_stats.ts";
import type {
  CPUStats,
  FsStats,
  InterfaceStats,
  IOStats,
  MemoryStats,
  NetworkStats,
  PSIStats,
  SwapStats,
} from "../apis/stats_types.ts";

/** Above this a memory or swap limit means unlimited (upstream isMemoryUnlimited). */
const MEMORY_UNLIMITED_ABOVE = 2 ** 62;

/** No pressure data: cAdvisor's zero PSIStats, on a kernel or cgroup v1 that reports none. */
const NO_PSI = { total: 0, avg10: 0, avg60: 0, avg300: 0 };

/**
 * cAdvisor's PSIStats as the Summary API's (upstream cadvisorPSIToStatsPSI, given cAdvisor's
 * always-present struct): zeros where the kernel reports no pressure (cgroup v1), as upstream
 * writes them.
 */
export function psiStats(p: PsiStats | undefined): PSIStats {
  return { full: { ...(p?.full ?? NO_PSI) }, some: { ...(p?.some ?? NO_PSI) } };
}

export function cpuStats(s: Sample): CPUStats | undefined {
  const cpu = s.cgroup.cpu;
  if (!cpu) return undefined;
  const out: CPUStats = {
    time: iso(s.time),
    usageNanoCores: s.usageNanoCores,
    usageCoreNanoSeconds: Number(cpu.usageCoreNanoSeconds),
    psi: psiStats(s.cgroup.detail?.psi?.cpu),
  };
  return out;
}

/**
 * Swap (upstream cadvisorInfoToSwapStats): usage from the memory stats, available the swap
 * limit (for the node, `rootSwapLimit`: the machine's SwapTotal) minus usage unless the limit
 * is unlimited; undefined without memory stats or a swap figure (a v1 host without swap
 * accounting).
 */
export function swapStats(s: Sample, rootSwapLimit?: number): SwapStats | undefined {
  const swap = s.cgroup.detail?.memory.swapBytes;
  if (!s.cgroup.memory || swap === undefined) return undefined;
  const out: SwapStats = { time: iso(s.time), swapUsageBytes: swap };
  // The machine's own swap limit is its swap capacity (cAdvisor's root container spec).
  const limit = rootSwapLimit ?? s.cgroup.detail?.spec.memorySwapLimit;
  if (limit !== undefined && limit <= MEMORY_UNLIMITED_ABOVE) {
    out.swapAvailableBytes = Math.max(0, limit - swap);
  }
  return out;
}

/** IO (upstream cadvisorInfoToIOStats): present when the block I/O controller was read. */
export function ioStats(s: Sample): IOStats | undefined {
  const d = s.cgroup.detail;
  if (!d || (d.blkio === undefined && d.psi?.io === undefined)) return undefined;
  return { time: iso(s.time), psi: psiStats(d.psi?.io) };
}

/** Memory; availableBytes is the limit (or `capacity` for the node) minus the working set. */
export function memoryStats(s: Sample, capacity: number | undefined): MemoryStats | undefined {
  const m = s.cgroup.memory;
  if (!m) return undefined;
  const limit = m.limitBytes ?? capacity;
  const out: MemoryStats = {
    time: iso(s.time),
    availableBytes: limit === undefined ? undefined : Math.max(0, limit - m.workingSetBytes),
    usageBytes: m.usageBytes,
    workingSetBytes: m.workingSetBytes,
    rssBytes: m.rssBytes,
    pageFaults: m.pageFaults,
    majorPageFaults: m.majorPageFaults,
    psi: psiStats(s.cgroup.detail?.psi?.memory),
  };
  return out;
}

/** Every interface, and the default one ("eth0") inline (upstream cadvisorInfoToNetworkStats). */
export function networkStats(time: number, list: readonly NetInterface[]): NetworkStats {
  const interfaces: InterfaceStats[] = list.map((i) => ({
    name: i.name,
    rxBytes: i.rxBytes,
    rxErrors: i.rxErrors,
    txBytes: i.txBytes,
    txErrors: i.txErrors,
  }));
  const def = defaultInterface(list);
  return {
    time: iso(time),
    ...(def
      ? {
        name: def.name,
        rxBytes: def.rxBytes,
        rxErrors: def.rxErrors,
        txBytes: def.txBytes,
        txErrors: def.txErrors,
      }
      : { name: "" }),
    interfaces,
  };
}

export function fsStats(time: string, u: FsUsage | Error | undefined): FsStats {
  if (u === undefined || u instanceof Error) return { time };
  return {
    time,
    availableBytes: u.availableBytes,
    capacityBytes: u.capacityBytes,
    usedBytes: u.usedBytes,
    inodesFree: u.inodesFree,
    inodes: u.inodes,
    inodesUsed: u.inodesUsed,
  };
}

/** The device's size fields of `fs`, for a usage that is only part of it. */
export function capacityOf(fs: FsStats | undefined): Partial<FsStats> {
  if (!fs) return {};
  return {
    availableBytes: fs.availableBytes,
    capacityBytes: fs.capacityBytes,
    inodesFree: fs.inodesFree,
    inodes: fs.inodes,
  };
}

/** The pod's samples added up: CPU time and rate, memory, processes. */
export function sumSamples(samples: readonly Sample[]): Sample | undefined {
  const first = samples[0];
  if (!first) return undefined;
  let cpu = 0n;
  let hasCpu = false;
  let rate = 0;
  let hasRate = true;
  let usage = 0;
  let ws = 0;
  let rss = 0;
  let pf = 0;
  let mpf = 0;
  let hasMem = false;
  let pids = 0;
  let hasPids = false;
  let time = first.time;
  for (const s of samples) {
    time = Math.max(time, s.time);
    const c = s.cgroup.cpu;
    if (c) {
      cpu += c.usageCoreNanoSeconds;
      hasCpu = true;
    }
    if (s.usageNanoCores === undefined) hasRate = false;
    else rate += s.usageNanoCores;
    const m = s.cgroup.memory;
    if (m) {
      hasMem = true;
      usage += m.usageBytes;
      ws += m.workingSetBytes;
      rss += m.rssBytes ?? 0;
      pf += m.pageFaults ?? 0;
      mpf += m.majorPageFaults ?? 0;
    }
    if (s.cgroup.pids) {
      hasPids = true;
      pids += s.cgroup.pids.current;
    }
  }
  return {
    time,
    usageNanoCores: hasCpu && hasRate ? rate : undefined,
    cgroup: {
      cpu: hasCpu ? { usageCoreNanoSeconds: cpu } : undefined,
      memory: hasMem
        ? {
          usageBytes: usage,
          workingSetBytes: ws,
          rssBytes: rss,
          pageFaults: pf,
          majorPageFaults: mpf,
        }
        : undefined,
      pids: hasPids ? { current: pids } : undefined,
      missing: [],
    },
  };
}

/** Upstream IsLocalEphemeralVolume: counted in the pod's ephemeral storage. */
export function isLocalEphemeral(v: V1Volume): boolean {
  return (v.emptyDir != null && (v.emptyDir.medium ?? "") === "") || v.configMap != null ||
    v.downwardAPI != null;
}

export function nsToMs(ns: bigint): number {
  return Number(ns / 1_000_000n);
}

/** metav1.Time: RFC 3339 with seconds, UTC. */
export function iso(ms: number): string {
  return new Date(Math.floor(ms / 1000) * 1000).toISOString().replace(".000Z", "Z");
}

export function u64(v: bigint | undefined): number | undefined {
  return v === undefined ? undefined : Number(v);
}
