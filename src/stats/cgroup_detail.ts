/**
 * @module
 * The figures of a cgroup beyond CPU time, memory usage and pids (those are `cgroup_stats.ts`'s):
 * CPU user and system time and CFS throttling, the memory breakdown cAdvisor exports (cache,
 * mapped files, swap, failcnt, peak, kernel memory, active and inactive file pages), the OOM
 * kill count, block I/O per device, pressure stall information, the cgroup's creation time and
 * its spec (CPU shares, period and quota; memory limit, reservation and swap limit). A bounded
 * set of small synchronous reads per cgroup (see `_cgroup_read.ts`); a file that is absent or
 * odd leaves its figure undefined and never throws, silently: these files come and go with
 * kernel options (swap accounting, PSI, CFS bandwidth), and the sample's `missing` list is for
 * the figures the Summary API needs. Corresponds to cAdvisor's libcontainer handler
 * (`setCPUStats`, `setMemoryStats`, `setDiskIoStats`, `setPSIStats`) over opencontainers/cgroups'
 * fs and fs2 `GetStats`, and to `container/common/helpers.go` `getSpecInternal` (spec and
 * creation time).
 */

import { SampleReads } from "./_cgroup_read.ts";
import { type PsiStats, readPsi } from "./psi_stats.ts";

/** Directories of one cgroup, as `cgroup_stats.ts` reads them, plus the blkio controller's. */
export interface DetailPaths {
  cpu?: string;
  cpuacct?: string;
  memory?: string;
  pids?: string;
  unified?: string;
  /** The v1 blkio directory; unused in v2 (io.stat lives in the unified directory). */
  blkio?: string;
}

/** CFS bandwidth accounting (cpu.stat). */
export interface CfsStats {
  periods: number;
  throttledPeriods: number;
  /** Throttled time, ns. */
  throttledNanoSeconds: number;
  /** Periods in which the group used its burst, and the burst time, ns (Linux 5.14+). */
  bursts?: number;
  burstNanoSeconds?: number;
}

/** CPU figures beyond the total. */
export interface CpuDetail {
  /** Time in user and kernel mode, ns (v1 cpuacct.stat ticks × 10 ms, v2 µs × 1000). */
  userNanoSeconds?: number;
  systemNanoSeconds?: number;
  cfs?: CfsStats;
}

/** Memory figures beyond usage and working set (cAdvisor's MemoryStats). */
export interface MemoryDetail {
  cacheBytes?: number;
  mappedFileBytes?: number;
  swapBytes?: number;
  failcnt?: number;
  maxUsageBytes?: number;
  kernelUsageBytes?: number;
  activeFileBytes?: number;
  inactiveFileBytes?: number;
}

/** One device's block I/O counters (v1 blkio recursive files, v2 io.stat). */
export interface BlkioDevice {
  major: number;
  minor: number;
  readBytes: number;
  writeBytes: number;
  reads: number;
  writes: number;
}

/**
 * The spec cAdvisor reads beside the stats. Memory values are the kernel's numbers, where the
 * unlimited value is above 2^62 (v2's "max" is Number.MAX_SAFE_INTEGER's neighbour, 2^64-1).
 */
export interface CgroupSpec {
  /** v1 cpu.shares; v2 cpu.weight converted back to shares as cAdvisor does. */
  cpuShares?: number;
  /** CFS period, µs. */
  cpuPeriod?: number;
  /** CFS quota, µs; 0 for none. */
  cpuQuota?: number;
  memoryLimit?: number;
  memorySwapLimit?: number;
  memoryReservation?: number;
}

/** Everything this module reads of one cgroup. */
export interface CgroupDetail {
  cpu: CpuDetail;
  memory: MemoryDetail;
  /** OOM kills the kernel counted in this cgroup (v1 memory.oom_control, v2 memory.events). */
  oomKills?: number;
  /** Block I/O by device; undefined when the controller's files are not readable. */
  blkio?: BlkioDevice[];
  /** Pressure stall information: cgroup v2 only, as cAdvisor reads it (fs2). */
  psi?: { cpu?: PsiStats; memory?: PsiStats; io?: PsiStats };
  spec: CgroupSpec;
  /** The cgroup's creation time, ms: the oldest mtime of its directories (cAdvisor's rule). */
  creationTimeMs?: number;
}

/** USER_HZ: cpuacct.stat counts in 1/100 s. */
const NS_PER_TICK = 10_000_000;
/** v2's "max" as cAdvisor's readUInt64 returns it (math.MaxUint64). */
const MAX_UINT64 = 18446744073709551615;

function readText(reads: SampleReads, dir: string | undefined, file: string): string | undefined {
  if (dir === undefined) return undefined;
  const r = reads.file(dir, file);
  return r.ok ? r.text.trim() : undefined;
}

/** A single number; "max" is 2^64-1 (cAdvisor's readUInt64); anything else undefined. */
function readNumber(reads: SampleReads, dir: string | undefined, file: string): number | undefined {
  const t = readText(reads, dir, file);
  if (t === "max") return MAX_UINT64;
  return t !== undefined && /^\d+$/.test(t) ? Number(t) : undefined;
}

/** A flat-keyed file as numbers (values above 2^53 lose precision, as float64). */
function readFlat(
  reads: SampleReads,
  dir: string | undefined,
  file: string,
): { get(key: string): number | undefined } | undefined {
  const keyed = reads.keyed(dir, file);
  if (keyed === undefined) return undefined;
  return {
    get: (key) => {
      const v = keyed.get(key);
      return v === undefined ? undefined : Number(v);
    },
  };
}

function readCpu(paths: DetailPaths, v2: boolean, reads: SampleReads): CpuDetail {
  const out: CpuDetail = {};
  const stat = readFlat(reads, paths.cpu, "cpu.stat");
  if (v2) {
    const user = stat?.get("user_usec");
    const system = stat?.get("system_usec");
    if (user !== undefined) out.userNanoSeconds = user * 1000;
    if (system !== undefined) out.systemNanoSeconds = system * 1000;
  } else {
    const ticks = readFlat(reads, paths.cpuacct, "cpuacct.stat");
    const user = ticks?.get("user");
    const system = ticks?.get("system");
    if (user !== undefined) out.userNanoSeconds = user * NS_PER_TICK;
    if (system !== undefined) out.systemNanoSeconds = system * NS_PER_TICK;
  }
  const periods = stat?.get("nr_periods");
  const throttled = stat?.get("nr_throttled");
  const time = v2 ? stat?.get("throttled_usec") : stat?.get("throttled_time");
  if (periods !== undefined && throttled !== undefined && time !== undefined) {
    out.cfs = {
      periods,
      throttledPeriods: throttled,
      throttledNanoSeconds: v2 ? time * 1000 : time,
    };
    const bursts = stat?.get("nr_bursts");
    const burst = v2 ? stat?.get("burst_usec") : stat?.get("burst_time");
    if (bursts !== undefined && burst !== undefined) {
      out.cfs.bursts = bursts;
      out.cfs.burstNanoSeconds = v2 ? burst * 1000 : burst;
    }
  }
  return out;
}

function readMemory(paths: DetailPaths, v2: boolean, reads: SampleReads): MemoryDetail {
  const dir = paths.memory;
  const stat = readFlat(reads, dir, "memory.stat");
  const out: MemoryDetail = {};
  const pick = (field: keyof MemoryDetail, key: string) => {
    const v = stat?.get(key);
    if (v !== undefined) out[field] = v;
  };
  if (v2) {
    pick("cacheBytes", "file");
    pick("mappedFileBytes", "file_mapped");
    pick("activeFileBytes", "active_file");
    pick("inactiveFileBytes", "inactive_file");
    const swap = readNumber(reads, dir, "memory.swap.current");
    if (swap !== undefined) out.swapBytes = swap;
    const peak = readNumber(reads, dir, "memory.peak");
    if (peak !== undefined) out.maxUsageBytes = peak;
    const events = readFlat(reads, dir, "memory.events");
    const max = events?.get("max");
    if (max !== undefined) out.failcnt = max;
  } else {
    // The kubelet's cgroups have use_hierarchy=1: cAdvisor reads the total_ keys.
    pick("cacheBytes", "total_cache");
    pick("mappedFileBytes", "total_mapped_file");
    pick("swapBytes", "total_swap");
    pick("activeFileBytes", "total_active_file");
    pick("inactiveFileBytes", "total_inactive_file");
    const failcnt = readNumber(reads, dir, "memory.failcnt");
    if (failcnt !== undefined) out.failcnt = failcnt;
    const max = readNumber(reads, dir, "memory.max_usage_in_bytes");
    if (max !== undefined) out.maxUsageBytes = max;
    const kernel = readNumber(reads, dir, "memory.kmem.usage_in_bytes");
    if (kernel !== undefined) out.kernelUsageBytes = kernel;
  }
  return out;
}

function readOomKills(paths: DetailPaths, v2: boolean, reads: SampleReads): number | undefined {
  const map = v2
    ? readFlat(reads, paths.memory, "memory.events")
    : readFlat(reads, paths.memory, "memory.oom_control");
  return map?.get("oom_kill");
}

/** Parses v1 blkio `MAJ:MIN Op value` lines into per-device counts of Read and Write. */
export function parseBlkio(text: string): Map<string, { read: number; write: number }> {
  const out = new Map<string, { read: number; write: number }>();
  for (const line of text.split("\n")) {
    const [dev, op, value] = line.trim().split(/\s+/);
    if (!dev || !/^\d+:\d+$/.test(dev) || !value || !/^\d+$/.test(value)) continue;
    const entry = out.get(dev) ?? { read: 0, write: 0 };
    if (op === "Read") entry.read = Number(value);
    else if (op === "Write") entry.write = Number(value);
    else continue;
    out.set(dev, entry);
  }
  return out;
}

/** Parses v2 io.stat (`MAJ:MIN rbytes=.. wbytes=.. rios=.. wios=.. ...`). */
export function parseIoStat(text: string): BlkioDevice[] {
  const out: BlkioDevice[] = [];
  for (const line of text.split("\n")) {
    const [dev, ...pairs] = line.trim().split(/\s+/);
    const m = dev ? /^(\d+):(\d+)$/.exec(dev) : null;
    if (!m) continue;
    const kv = new Map<string, number>();
    for (const p of pairs) {
      const [k, v] = p.split("=");
      if (k && v && /^\d+$/.test(v)) kv.set(k, Number(v));
    }
    out.push({
      major: Number(m[1]),
      minor: Number(m[2]),
      readBytes: kv.get("rbytes") ?? 0,
      writeBytes: kv.get("wbytes") ?? 0,
      reads: kv.get("rios") ?? 0,
      writes: kv.get("wios") ?? 0,
    });
  }
  return out;
}

/**
 * v1: the CFQ/BFQ recursive files when the scheduler writes them, else the throttle ones, as
 * opencontainers/cgroups' fs blkio does; v2: io.stat.
 */
function readBlkio(
  paths: DetailPaths,
  v2: boolean,
  reads: SampleReads,
  absent: Set<string> | undefined,
): BlkioDevice[] | undefined {
  if (v2) {
    const t = readText(reads, paths.unified, "io.stat");
    return t === undefined ? undefined : parseIoStat(t);
  }
  const dir = paths.blkio;
  const cfq = !absent?.has(CFQ_BYTES);
  let bytes = cfq ? readText(reads, dir, CFQ_BYTES) : undefined;
  let ops = cfq ? readText(reads, dir, "blkio.io_serviced_recursive") : undefined;
  if (!bytes || !/\d+:\d+/.test(bytes)) {
    bytes = readText(reads, dir, "blkio.throttle.io_service_bytes_recursive");
    ops = readText(reads, dir, "blkio.throttle.io_serviced_recursive");
    // Missing beside a throttle file that is there: the kernel has no CFQ or BFQ scheduler,
    // for every cgroup; a failed read costs an error object, so it is not tried again.
    if (cfq && absent && bytes !== undefined && dir !== undefined) {
      const read = reads.file(dir, CFQ_BYTES);
      if (!read.ok && read.notFound) absent.add(CFQ_BYTES);
    }
  }
  if (bytes === undefined || ops === undefined) return undefined;
  const b = parseBlkio(bytes);
  const o = parseBlkio(ops);
  const devices = new Set([...b.keys(), ...o.keys()]);
  return [...devices].map((dev) => {
    const [major, minor] = dev.split(":").map(Number);
    return {
      major: major!,
      minor: minor!,
      readBytes: b.get(dev)?.read ?? 0,
      writeBytes: b.get(dev)?.write ?? 0,
      reads: o.get(dev)?.read ?? 0,
      writes: o.get(dev)?.write ?? 0,
    };
  });
}

/** cAdvisor's convertCPUWeightToCPULimit: the inverse of runc's shares-to-weight mapping. */
export function cpuWeightToShares(weight: number): number | undefined {
  if (weight < 1 || weight > 10000) return undefined;
  return 2 + Math.floor(((weight - 1) * 262142) / 9999);
}

function readSpec(paths: DetailPaths, v2: boolean, reads: SampleReads): CgroupSpec {
  const spec: CgroupSpec = {};
  const set = (field: keyof CgroupSpec, v: number | undefined) => {
    if (v !== undefined) spec[field] = v;
  };
  if (v2) {
    const weight = readNumber(reads, paths.cpu, "cpu.weight");
    if (weight !== undefined && weight > 0) set("cpuShares", cpuWeightToShares(weight));
    const max = readText(reads, paths.cpu, "cpu.max")?.split(" ");
    if (max?.length === 2) {
      set("cpuQuota", max[0] === "max" ? 0 : /^\d+$/.test(max[0]!) ? Number(max[0]) : undefined);
      set("cpuPeriod", /^\d+$/.test(max[1]!) ? Number(max[1]) : undefined);
    }
    if (readText(reads, paths.memory, "memory.max") !== undefined) {
      set("memoryLimit", readNumber(reads, paths.memory, "memory.max"));
      set("memorySwapLimit", readNumber(reads, paths.memory, "memory.swap.max") ?? 0);
      set("memoryReservation", readNumber(reads, paths.memory, "memory.min") ?? 0);
    }
  } else {
    set("cpuShares", readNumber(reads, paths.cpu, "cpu.shares"));
    set("cpuPeriod", readNumber(reads, paths.cpu, "cpu.cfs_period_us"));
    const quota = readText(reads, paths.cpu, "cpu.cfs_quota_us");
    if (quota !== undefined) spec.cpuQuota = /^\d+$/.test(quota) ? Number(quota) : 0;
    if (readText(reads, paths.memory, "memory.limit_in_bytes") !== undefined) {
      set("memoryLimit", readNumber(reads, paths.memory, "memory.limit_in_bytes"));
      // Without swap accounting the file is absent: cAdvisor reads 0.
      set("memorySwapLimit", readNumber(reads, paths.memory, "memory.memsw.limit_in_bytes") ?? 0);
      set("memoryReservation", readNumber(reads, paths.memory, "memory.soft_limit_in_bytes") ?? 0);
    }
  }
  return spec;
}

/**
 * The oldest modification time of the cgroup's directories and their cgroup.clone_children
 * (v2: cgroup.events), floored at boot, as cAdvisor's creation time.
 */
function creationTime(paths: DetailPaths, v2: boolean, bootMs: number | undefined) {
  let lowest = Infinity;
  const dirs = new Set(
    [paths.cpu, paths.cpuacct, paths.memory, paths.pids, paths.blkio].filter((d) =>
      d !== undefined
    ),
  );
  for (const dir of dirs) {
    for (const p of [dir!, `${dir}/${v2 ? "cgroup.events" : "cgroup.clone_children"}`]) {
      try {
        const m = Deno.statSync(p).mtime?.getTime();
        if (m !== undefined && m < lowest) lowest = m;
      } catch {
        // gone or not readable: does not count
      }
    }
  }
  if (!Number.isFinite(lowest)) return undefined;
  return bootMs !== undefined && lowest < bootMs ? bootMs : lowest;
}

/** The CFQ scheduler's v1 blkio bytes file, which kernels without CFQ or BFQ do not make. */
const CFQ_BYTES = "blkio.io_service_bytes_recursive";

/** Options of {@link readCgroupDetail}. */
export interface ReadCgroupDetailOptions {
  /** The host boots at this time, ms: creation times before it are raised to it. */
  bootMs?: number;
  /** Read the spec and creation time too (they change rarely). @default true */
  spec?: boolean;
  /** The sample's reads so far: a file the sample already read is not read again. */
  reads?: SampleReads;
  /**
   * Names of files this kernel does not make for any cgroup, kept by the caller across
   * samples: found once, then not asked for.
   */
  absent?: Set<string>;
}

/** Every controller in one cgroup2 directory: a cgroup2-only host. */
export function isCgroup2Only(paths: DetailPaths): boolean {
  return paths.unified !== undefined && paths.cpu === paths.unified;
}

/** Reads one cgroup's details; `v2` for a cgroup2-only host (see the module documentation). */
export function readCgroupDetail(
  paths: DetailPaths,
  v2: boolean,
  opts: ReadCgroupDetailOptions = {},
): CgroupDetail {
  const reads = opts.reads ?? new SampleReads();
  const detail: CgroupDetail = {
    cpu: readCpu(paths, v2, reads),
    memory: readMemory(paths, v2, reads),
    oomKills: readOomKills(paths, v2, reads),
    blkio: readBlkio(paths, v2, reads, opts.absent),
    spec: {},
  };
  if (v2 && paths.unified !== undefined) {
    detail.psi = {
      cpu: readPsi(paths.unified, "cpu.pressure"),
      memory: readPsi(paths.unified, "memory.pressure"),
      io: readPsi(paths.unified, "io.pressure"),
    };
  }
  if (opts.spec !== false) {
    Object.assign(detail, readCgroupSpec(paths, v2, { bootMs: opts.bootMs, reads }));
  }
  return detail;
}

/**
 * A cgroup's spec and creation time: the part of its details that changes only when its
 * limits are updated (the spec) or never (the creation time), which a sampler may keep.
 */
export function readCgroupSpec(
  paths: DetailPaths,
  v2: boolean,
  opts: { bootMs?: number; reads?: SampleReads; creationTime?: boolean } = {},
): Pick<CgroupDetail, "spec" | "creationTimeMs"> {
  const spec = readSpec(paths, v2, opts.reads ?? new SampleReads());
  if (opts.creationTime === false) return { spec };
  return { spec, creationTimeMs: creationTime(paths, v2, opts.bootMs) };
}
