/**
 * @module
 * Private helpers of `cgroup_stats.ts` and `cgroup_detail.ts`: reading one cgroup or /proc file
 * without throwing (a failure becomes a reason naming the file), a sample's reads that read each
 * file once ({@link SampleReads}), flat-keyed files read by key ({@link FlatKeyed}), and the
 * node's /proc fallbacks for a cgroup2 root that lacks memory.stat or cpu.stat (/proc/meminfo,
 * the /proc/stat cpu line).
 *
 * The reads are synchronous. These files are made by the kernel from its counters when read:
 * a read never waits for a disk and takes microseconds, while Deno's async read adds a hop
 * through its blocking thread pool and a promise. Measured on these machines, 600 reads of
 * real cgroup v1 memory files through a bind mount under a scoped read permission (as the
 * sandboxed agent reads them): 16-18 ms of CPU async (16 at once), 6 ms sync.
 */

import type { CgroupCpu, CgroupMemory } from "./cgroup_stats.ts";

/** A file's text, or why it could not be read ("memory.max: no such file"). */
export type FileRead =
  | { ok: true; text: string }
  | { ok: false; notFound: boolean; reason: string };

/** Jiffies per second in /proc/stat (USER_HZ, 100 on every Linux architecture in use). */
const USER_HZ = 100n;

/** Reads `dir/file`; an error becomes a reason (`file: why`). */
export function readCgroupFile(dir: string, file: string): FileRead {
  try {
    return { ok: true, text: Deno.readTextFileSync(`${dir}/${file}`) };
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) {
      return { ok: false, notFound: true, reason: `${file}: no such file` };
    }
    return { ok: false, notFound: false, reason: `${file}: ${(e as Error).message}` };
  }
}

/**
 * A flat-keyed cgroup file (`key value` per line: memory.stat, cpu.stat, cpuacct.stat,
 * memory.events, memory.oom_control), read by key: a key's line is found when asked and only
 * its value parsed (a v1 memory.stat has some 70 lines, of which a sample takes about ten). A
 * key whose value is not a non-negative integer reads as absent.
 */
export class FlatKeyed {
  readonly #text: string;

  constructor(text: string) {
    this.#text = text;
  }

  /** The value of `key`, or undefined. */
  get(key: string): bigint | undefined {
    const t = this.#text;
    let at = t.startsWith(`${key} `) ? 0 : t.indexOf(`\n${key} `);
    if (at < 0) return undefined;
    if (at > 0 || t[0] === "\n") at++;
    const start = at + key.length + 1;
    const end = t.indexOf("\n", start);
    const value = t.slice(start, end < 0 ? t.length : end).trim();
    return /^\d+$/.test(value) ? BigInt(value) : undefined;
  }
}

/**
 * The reads of one sample: each file is read, and each flat-keyed file parsed, once however
 * many figures take from it (memory.stat feeds the working set and the memory breakdown, v2
 * cpu.stat the usage and the user/system split, memory.events the failcnt and the OOM kills).
 */
export class SampleReads {
  readonly #texts = new Map<string, FileRead>();
  readonly #keyed = new Map<string, FlatKeyed | undefined>();

  /** `dir/file`, as {@link readCgroupFile}; read at the first ask. */
  file(dir: string, file: string): FileRead {
    const key = `${dir}/${file}`;
    let read = this.#texts.get(key);
    if (read === undefined) {
      read = readCgroupFile(dir, file);
      this.#texts.set(key, read);
    }
    return read;
  }

  /** `dir/file` parsed as flat-keyed; undefined when it cannot be read. */
  keyed(dir: string | undefined, file: string): FlatKeyed | undefined {
    if (dir === undefined) return undefined;
    const key = `${dir}/${file}`;
    if (this.#keyed.has(key)) return this.#keyed.get(key);
    const read = this.file(dir, file);
    const parsed = read.ok ? new FlatKeyed(read.text) : undefined;
    this.#keyed.set(key, parsed);
    return parsed;
  }
}

/** Node CPU time from the /proc/stat cpu line: user+nice+system+irq+softirq+steal jiffies. */
export function readNodeCpuFromProc(
  root: string,
  cgroupReason: string,
): { value?: CgroupCpu; missing: string[] } {
  const read = readCgroupFile(procDir(root), "stat");
  if (!read.ok) return { missing: [cgroupReason, `/proc/${read.reason}`] };
  const line = read.text.split("\n").find((l) => l.startsWith("cpu "));
  const fields = line?.trim().split(/\s+/).slice(1) ?? [];
  // Busy time excludes idle (3) and iowait (4); guest time is already inside user and nice.
  const busy = [0, 1, 2, 5, 6, 7].map((i) => fields[i]);
  if (!busy.every((f) => f !== undefined && /^\d+$/.test(f))) {
    return { missing: [cgroupReason, "/proc/stat: no parsable cpu line"] };
  }
  const jiffies = busy.reduce((sum, f) => sum + BigInt(f!), 0n);
  return { value: { usageCoreNanoSeconds: (jiffies * 1_000_000_000n) / USER_HZ }, missing: [] };
}

/** Node memory from /proc/meminfo: usage MemTotal - MemFree, working set minus Inactive(file). */
export function readNodeMemoryFromProc(
  root: string,
  cgroupReason: string,
): { value?: CgroupMemory; missing: string[] } {
  const read = readCgroupFile(procDir(root), "meminfo");
  if (!read.ok) return { missing: [cgroupReason, `/proc/${read.reason}`] };
  const kb = new Map<string, bigint>();
  for (const line of read.text.split("\n")) {
    const m = /^([^:]+):\s+(\d+)(?: kB)?\s*$/.exec(line);
    if (m) kb.set(m[1]!, BigInt(m[2]!) * 1024n);
  }
  const total = kb.get("MemTotal");
  const free = kb.get("MemFree");
  if (total === undefined || free === undefined || free > total) {
    return { missing: [cgroupReason, "/proc/meminfo: no MemTotal or MemFree"] };
  }
  const usage = total - free;
  const inactive = kb.get("Inactive(file)") ?? 0n;
  return {
    value: {
      usageBytes: Number(usage),
      workingSetBytes: Number(usage > inactive ? usage - inactive : 0n),
    },
    missing: [`${cgroupReason}: memory from /proc/meminfo, without rss and page faults`],
  };
}

function procDir(root: string): string {
  return root === "/" || root === "" ? "/proc" : `${root.replace(/\/+$/, "")}/proc`;
}
