/**
 * @module
 * One sample of a cgroup's CPU, memory and pids accounting, read straight from its files: a
 * bounded set of small reads per cgroup, each file once, synchronous (see `_cgroup_read.ts`). Kernel oddities never
 * throw: a group whose files are gone (the cgroup vanished) or unreadable is omitted, an odd
 * value is left undefined, and each omission has a human reason in `missing` for the caller to
 * log once. The node ("/", cAdvisor's root container) falls back to /proc where the cgroup2 root
 * lacks files. The rest of what cAdvisor exports (CPU user/system and throttling, the memory
 * breakdown, swap, block I/O, OOM kills, PSI, spec) comes with each sample from
 * `cgroup_detail.ts`. Takes directories from `cm/cgroup_layout.ts`. Corresponds to cAdvisor's libcontainer
 * handler (`newContainerStats`, `setCPUStats`, `setMemoryStats`, `setThreadsStats`) over
 * opencontainers/cgroups' fs and fs2 stats, and to the kubelet's use of them in
 * `pkg/kubelet/stats` (unlimited memory is above 2^62, `isMemoryUnlimited`).
 */

import { type CgroupLayout, type CgroupPaths, cgroupPathsOf } from "../cm/cgroup_layout.ts";
import {
  type FlatKeyed,
  readNodeCpuFromProc,
  readNodeMemoryFromProc,
  SampleReads,
} from "./_cgroup_read.ts";
import {
  type CgroupDetail,
  type DetailPaths,
  isCgroup2Only,
  readCgroupDetail,
} from "./cgroup_detail.ts";
import { hostRoot } from "../privilege/host_root.ts";

/** CPU accounting of a cgroup. */
export interface CgroupCpu {
  /** Total CPU time, ns. */
  usageCoreNanoSeconds: bigint;
}

/** Memory accounting of a cgroup (cAdvisor's `MemoryStats`). */
export interface CgroupMemory {
  usageBytes: number;
  /** Usage minus inactive file pages, floored at 0. */
  workingSetBytes: number;
  rssBytes?: number;
  pageFaults?: number;
  majorPageFaults?: number;
  /** The memory limit; undefined when unlimited. */
  limitBytes?: number;
}

/** Process accounting of a cgroup. */
export interface CgroupPids {
  current: number;
  /** undefined when unlimited. */
  limit?: number;
}

/** One sample; a group is undefined when it could not be read, with the reasons in `missing`. */
export interface CgroupSample {
  cpu?: CgroupCpu;
  memory?: CgroupMemory;
  pids?: CgroupPids;
  /** The figures cAdvisor exports beyond these (`cgroup_detail.ts`); read unless turned off. */
  detail?: CgroupDetail;
  /** Human reasons for omitted values, e.g. "memory.max: no such file". */
  missing: string[];
}

/** Options of {@link readCgroupSample}. */
export interface ReadCgroupSampleOptions {
  /** Read the details too (`cgroup_detail.ts`). @default true */
  detail?: boolean;
  /** Read the details' spec and creation time too (see {@link ReadCgroupDetailOptions}). */
  spec?: boolean;
  /** Files this kernel does not make, kept across samples (see {@link ReadCgroupDetailOptions}). */
  absent?: Set<string>;
  /** The reads of this sample, for a spec read after it to share (a new one by default). */
  reads?: SampleReads;
  /** Boot time, ms, for the creation time's floor. */
  bootMs?: number;
}

/** Options of {@link readNodeSample}. */
export interface ReadNodeSampleOptions {
  /** Root under which /proc is read (the layout's directories are already rooted). @default "/" */
  root?: string;
  /** Read the details too (`cgroup_detail.ts`). @default true */
  detail?: boolean;
  /** Boot time, ms, for the creation time's floor. */
  bootMs?: number;
  /** Files this kernel does not make, kept across samples (see {@link ReadCgroupDetailOptions}). */
  absent?: Set<string>;
}

/** Above this a memory limit means unlimited (the kernel rounds max int64 down to a page). */
const MEMORY_UNLIMITED_ABOVE = 1n << 62n;

/** The outcome of reading one group: a value or nothing, and why values were left out. */
interface Part<T> {
  value?: T;
  missing: string[];
}

/** Parses a single-value cgroup file: a non-negative integer, "max", or undefined for anything
 * else. */
export function parseMaxOrNumber(text: string): bigint | "max" | undefined {
  const v = text.trim();
  if (v === "max") return "max";
  return /^\d+$/.test(v) ? BigInt(v) : undefined;
}

/** Quotes file content for a reason, shortened. */
function shown(text: string): string {
  const t = text.trim();
  return JSON.stringify(t.length > 40 ? `${t.slice(0, 40)}...` : t);
}

/** A cgroup2 directory is read with v2 file names. */
function isUnified(paths: CgroupPaths, dir: string): boolean {
  return paths.unified !== undefined && dir === paths.unified;
}

function readCpu(paths: CgroupPaths, reads: SampleReads): Part<CgroupCpu> {
  const v2 = paths.cpu !== undefined && isUnified(paths, paths.cpu);
  const dir = v2 ? paths.cpu : paths.cpuacct;
  if (dir === undefined) return { missing: ["cpu: no cgroup path (controller not mounted)"] };
  const file = v2 ? "cpu.stat" : "cpuacct.usage";
  const read = reads.file(dir, file);
  if (!read.ok) return { missing: [read.reason] };
  if (v2) {
    const usec = reads.keyed(dir, file)!.get("usage_usec");
    if (usec === undefined) return { missing: ["cpu.stat: no usage_usec"] };
    return { value: { usageCoreNanoSeconds: usec * 1000n }, missing: [] };
  }
  const ns = parseMaxOrNumber(read.text);
  if (typeof ns !== "bigint") {
    return { missing: [`cpuacct.usage: unexpected content ${shown(read.text)}`] };
  }
  return { value: { usageCoreNanoSeconds: ns }, missing: [] };
}

/**
 * Memory as cAdvisor's setMemoryStats fills it from memory.stat. v1 keys are the hierarchical
 * totals (the kubelet's cgroups always have use_hierarchy=1); page faults are `pgfault` and
 * `pgmajfault` in both versions, as cAdvisor reports them.
 */
function memoryFromStat(
  usage: bigint,
  stat: FlatKeyed,
  v2: boolean,
  missing: string[],
): CgroupMemory {
  const inactiveKey = v2 ? "inactive_file" : "total_inactive_file";
  const rssKey = v2 ? "anon" : "total_rss";
  const inactive = stat.get(inactiveKey);
  if (inactive === undefined) missing.push(`memory.stat: no ${inactiveKey}`);
  const workingSet = inactive === undefined ? usage : usage > inactive ? usage - inactive : 0n;
  const memory: CgroupMemory = { usageBytes: Number(usage), workingSetBytes: Number(workingSet) };
  for (
    const [key, field] of [
      [rssKey, "rssBytes"],
      ["pgfault", "pageFaults"],
      ["pgmajfault", "majorPageFaults"],
    ] as const
  ) {
    const v = stat.get(key);
    if (v === undefined) missing.push(`memory.stat: no ${key}`);
    else memory[field] = Number(v);
  }
  return memory;
}

function readMemory(paths: CgroupPaths, reads: SampleReads): Part<CgroupMemory> {
  const dir = paths.memory;
  if (dir === undefined) return { missing: ["memory: no cgroup path (controller not mounted)"] };
  const v2 = isUnified(paths, dir);
  const usageFile = v2 ? "memory.current" : "memory.usage_in_bytes";
  const limitFile = v2 ? "memory.max" : "memory.limit_in_bytes";
  const usageRead = reads.file(dir, usageFile);
  const statRead = reads.file(dir, "memory.stat");
  const limitRead = reads.file(dir, limitFile);
  if (!usageRead.ok || !statRead.ok || !limitRead.ok) {
    return { missing: [usageRead, statRead, limitRead].flatMap((r) => r.ok ? [] : [r.reason]) };
  }

  const usage = parseMaxOrNumber(usageRead.text);
  if (typeof usage !== "bigint") {
    return { missing: [`${usageFile}: unexpected content ${shown(usageRead.text)}`] };
  }
  const missing: string[] = [];
  const memory = memoryFromStat(usage, reads.keyed(dir, "memory.stat")!, v2, missing);
  const limit = parseMaxOrNumber(limitRead.text);
  if (limit === undefined) {
    missing.push(`${limitFile}: unexpected content ${shown(limitRead.text)}`);
  } else if (limit !== "max" && limit <= MEMORY_UNLIMITED_ABOVE) {
    memory.limitBytes = Number(limit);
  }
  return { value: memory, missing };
}

function readPids(paths: CgroupPaths, reads: SampleReads): Part<CgroupPids> {
  const dir = paths.pids;
  if (dir === undefined) return { missing: ["pids: no cgroup path (controller not mounted)"] };
  const currentRead = reads.file(dir, "pids.current");
  const maxRead = reads.file(dir, "pids.max");
  if (!currentRead.ok && currentRead.notFound && isUnified(paths, dir)) {
    // The pids controller is not enabled here: count the processes, as runc's fs2 does.
    const procs = reads.file(dir, "cgroup.procs");
    if (!procs.ok) return { missing: [procs.reason] };
    const current = procs.text.split("\n").filter((l) => l.trim() !== "").length;
    return { value: { current }, missing: [] };
  }
  if (!currentRead.ok || !maxRead.ok) {
    return { missing: [currentRead, maxRead].flatMap((r) => r.ok ? [] : [r.reason]) };
  }
  const current = parseMaxOrNumber(currentRead.text);
  if (typeof current !== "bigint") {
    return { missing: [`pids.current: unexpected content ${shown(currentRead.text)}`] };
  }
  const pids: CgroupPids = { current: Number(current) };
  const max = parseMaxOrNumber(maxRead.text);
  if (max === undefined) {
    return { value: pids, missing: [`pids.max: unexpected content ${shown(maxRead.text)}`] };
  }
  if (max !== "max") pids.limit = Number(max);
  return { value: pids, missing: [] };
}

/** Assembles a sample from its parts, reasons in a fixed order. */
function sampleOf(
  cpu: Part<CgroupCpu>,
  memory: Part<CgroupMemory>,
  pids?: Part<CgroupPids>,
): CgroupSample {
  const sample: CgroupSample = {
    missing: [...cpu.missing, ...memory.missing, ...(pids?.missing ?? [])],
  };
  if (cpu.value) sample.cpu = cpu.value;
  if (memory.value) sample.memory = memory.value;
  if (pids?.value) sample.pids = pids.value;
  return sample;
}

/**
 * Samples one cgroup: CPU (v1 cpuacct.usage, v2 cpu.stat usage_usec), memory (usage, working
 * set, rss, page faults, limit) and pids. Six small reads (a seventh, cgroup.procs, when v2 pids
 * is not enabled); never throws for kernel data (see the module documentation).
 */
export function readCgroupSample(
  paths: DetailPaths,
  opts: ReadCgroupSampleOptions = {},
): CgroupSample {
  const reads = opts.reads ?? new SampleReads();
  const sample = sampleOf(readCpu(paths, reads), readMemory(paths, reads), readPids(paths, reads));
  if (opts.detail !== false && (sample.cpu || sample.memory)) {
    sample.detail = readCgroupDetail(paths, isCgroup2Only(paths), {
      bootMs: opts.bootMs,
      spec: opts.spec,
      reads,
      absent: opts.absent,
    });
  }
  return sample;
}

/**
 * Samples the node, cAdvisor's root container "/". v1 and hybrid read the root cgroup's
 * cpuacct.usage and memory files. The cgroup2 root has no memory.current or memory.max, so, as
 * opencontainers/cgroups does for cAdvisor, usage is memory.stat `anon` + `file` (no limit) and
 * CPU is the root cpu.stat; where those are missing (older kernels) it falls back to
 * /proc/meminfo (MemTotal - MemFree, minus Inactive(file)) and the /proc/stat cpu line. Pids are
 * not sampled: the root has no pids files.
 */
export function readNodeSample(
  layout: CgroupLayout,
  opts: ReadNodeSampleOptions = {},
): CgroupSample {
  const root = opts.root ?? hostRoot();
  const paths: DetailPaths = { ...cgroupPathsOf(layout, "/"), blkio: layout.v1.get("blkio") };
  const reads = new SampleReads();
  let sample: CgroupSample;
  if (layout.mode !== "v2" || paths.unified === undefined) {
    sample = sampleOf(readCpu(paths, reads), readMemory(paths, reads));
  } else {
    const fromCgroup = readCpu(paths, reads);
    const cpu = fromCgroup.value
      ? fromCgroup
      : readNodeCpuFromProc(root, fromCgroup.missing.join("; "));
    sample = sampleOf(cpu, readNodeMemoryV2(paths.unified, root, reads));
  }
  if (opts.detail !== false) {
    sample.detail = readCgroupDetail(paths, layout.mode === "v2", {
      bootMs: opts.bootMs,
      reads,
      absent: opts.absent,
    });
  }
  return sample;
}

/** The cgroup2 root's memory from its memory.stat, else from /proc/meminfo. */
function readNodeMemoryV2(dir: string, root: string, reads: SampleReads): Part<CgroupMemory> {
  const stat = reads.file(dir, "memory.stat");
  if (!stat.ok) return readNodeMemoryFromProc(root, stat.reason);
  const keys = reads.keyed(dir, "memory.stat")!;
  const anon = keys.get("anon");
  const file = keys.get("file");
  if (anon === undefined || file === undefined) {
    return readNodeMemoryFromProc(root, "memory.stat: no anon or file");
  }
  const missing: string[] = [];
  return { value: memoryFromStat(anon + file, keys, true, missing), missing };
}
