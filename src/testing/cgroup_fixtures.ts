/**
 * @module
 * Test and benchmark fixtures for cgroup reading: builds, under a temporary root, the
 * `/proc/self/mountinfo` of a v1, v2 or hybrid host, the node's root cgroup files, /proc/meminfo
 * and /proc/stat, and for each given cgroup its accounting files (in the full format the kernel
 * writes, so parsing costs what it costs on a host) and a `/proc/<pid>/cgroup` naming it. Used by
 * `cm/cgroup_layout_test.ts`, `stats/cgroup_stats_test.ts`, `cgroup_stats_bench.ts` and other modules'
 * tests. Not used in production.
 */

import type { CgroupMode } from "../cm/cgroup_layout.ts";

/** One cgroup to create; `path` is relative to the hierarchy ("/kubepods/pod1/abc"). */
export interface FixtureCgroup {
  path: string;
  /** Total CPU time, ns. */
  cpuNs: number | bigint;
  memUsage: number;
  inactiveFile: number;
  rss: number;
  /** Memory limit; undefined or "max" writes the kernel's unlimited value. */
  limit?: number | "max";
  pids: number;
  /** @default 0 */
  pgfault?: number;
  /** @default 0 */
  pgmajfault?: number;
}

/** What {@link buildCgroupFixture} wrote. */
export interface CgroupFixture {
  root: string;
  mode: CgroupMode;
  mountinfo: string;
  /** Each cgroup's path to the pid whose `<root>/proc/<pid>/cgroup` names it. */
  pids: Map<string, number>;
}

/** The node values every fixture writes (root cgroup files, /proc/meminfo, /proc/stat). */
export const FIXTURE_NODE = {
  /** v1 root cpuacct.usage, ns. */
  cpuNs: 7_000_000_000_000n,
  /** v1 root memory.usage_in_bytes. */
  memUsage: 3 * 2 ** 30,
  /** v1 total_inactive_file and v2 inactive_file of the root memory.stat. */
  inactiveFile: 2 ** 30,
  /** v2 root memory.stat anon and file (usage is their sum). */
  anon: 2 ** 30,
  file: 1.5 * 2 ** 30,
  /** v2 root cpu.stat usage_usec. */
  usageUsec: 6_000_000_000n,
  /** /proc/meminfo, bytes. */
  memTotal: 8 * 2 ** 30,
  memFree: 5 * 2 ** 30,
  inactiveFileMeminfo: 512 * 2 ** 20,
  /** /proc/stat cpu line: user nice system idle iowait irq softirq steal guest guest_nice. */
  procStatCpu: [1000, 10, 500, 90000, 300, 20, 30, 5, 0, 0],
} as const;

/** The page-rounded max int64 that v1 shows for "no limit". */
const V1_UNLIMITED = "9223372036854771712";
/** The first pid given to a fixture cgroup. */
const FIRST_PID = 4000;

const HEAD = [
  "22 27 0:21 / /proc rw,relatime - proc proc rw",
  "23 27 0:22 / /sys rw,relatime - sysfs sysfs rw",
  "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard",
];
const TMPFS = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755";

/** v1 controllers per mode: mount directory name to the controllers mounted there. */
const V1_MOUNTS: Record<"v1" | "hybrid", [string, string][]> = {
  // A systemd host: cpu and cpuacct co-mounted.
  v1: [
    ["cpu,cpuacct", "cpu,cpuacct"],
    ["cpuset", "cpuset"],
    ["memory", "memory"],
    ["devices", "devices"],
    ["blkio", "blkio"],
    ["pids", "pids"],
    ["systemd", "name=systemd"],
  ],
  // This workplace's machines: every controller on its own.
  hybrid: [
    ["cpu", "cpu"],
    ["cpuacct", "cpuacct"],
    ["cpuset", "cpuset"],
    ["memory", "memory"],
    ["devices", "devices"],
    ["freezer", "freezer"],
    ["blkio", "blkio"],
    ["pids", "pids"],
    ["systemd", "name=systemd"],
  ],
};

/** The mountinfo text of a host in `mode`. */
export function fixtureMountinfo(mode: CgroupMode): string {
  const lines = [...HEAD];
  if (mode === "v2") {
    lines.push("31 23 0:28 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate");
  } else {
    lines.push(TMPFS);
    V1_MOUNTS[mode].forEach(([dir, opts], i) => {
      lines.push(
        `${32 + i} 31 0:${29 + i} / /sys/fs/cgroup/${dir} rw,relatime - cgroup cgroup rw,${opts}`,
      );
    });
    if (mode === "hybrid") {
      lines.push("45 31 0:45 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw");
    }
  }
  return lines.join("\n") + "\n";
}

const V1_STAT_KEYS = [
  "cache",
  "rss",
  "rss_huge",
  "shmem",
  "mapped_file",
  "dirty",
  "writeback",
  "swap",
  "pgpgin",
  "pgpgout",
  "pgfault",
  "pgmajfault",
  "inactive_anon",
  "active_anon",
  "inactive_file",
  "active_file",
  "unevictable",
  "hierarchical_memory_limit",
];

const V2_STAT_KEYS = (
  "anon file kernel kernel_stack pagetables sec_pagetables percpu sock vmalloc shmem zswap " +
  "zswapped file_mapped file_dirty file_writeback swapcached anon_thp file_thp shmem_thp " +
  "inactive_anon active_anon inactive_file active_file unevictable slab_reclaimable " +
  "slab_unreclaimable slab workingset_refault_anon workingset_refault_file " +
  "workingset_activate_anon workingset_activate_file workingset_restore_anon " +
  "workingset_restore_file workingset_nodereclaim pgscan pgsteal pgscan_kswapd pgscan_direct " +
  "pgfault pgmajfault pgrefill pgactivate pgdeactivate pglazyfree pglazyfreed thp_fault_alloc"
).split(" ");

/** A v1 memory.stat: local keys then their `total_` twins, as the kernel writes it. */
function v1MemoryStat(values: Record<string, number>): string {
  const local = V1_STAT_KEYS.map((k) => `${k} ${values[k] ?? 0}`);
  const totals = V1_STAT_KEYS.filter((k) => k !== "hierarchical_memory_limit")
    .map((k) => `total_${k} ${values[k] ?? 0}`);
  return [...local, ...totals].join("\n") + "\n";
}

function v2MemoryStat(values: Record<string, number>): string {
  return V2_STAT_KEYS.map((k) => `${k} ${values[k] ?? 0}`).join("\n") + "\n";
}

function v2CpuStat(usageUsec: bigint): string {
  return `usage_usec ${usageUsec}\nuser_usec ${(usageUsec * 7n) / 10n}\n` +
    `system_usec ${usageUsec - (usageUsec * 7n) / 10n}\nnr_periods 0\nnr_throttled 0\n` +
    `throttled_usec 0\nnr_bursts 0\nburst_usec 0\n`;
}

/** Writes every file of `files` (path relative to `root` to content), making directories. */
async function writeAll(root: string, files: Map<string, string>): Promise<void> {
  const dirs = new Set([...files.keys()].map((p) => p.slice(0, p.lastIndexOf("/"))));
  for (const dir of dirs) await Deno.mkdir(`${root}${dir}`, { recursive: true });
  await Promise.all([...files].map(([p, text]) => Deno.writeTextFile(`${root}${p}`, text)));
}

function cgroupDir(base: string, path: string): string {
  return path === "/" ? base : `${base}${path}`;
}

/** The v1 mount directories of a mode: controller to "/sys/fs/cgroup/<dir>". */
function v1Dirs(mode: "v1" | "hybrid"): Map<string, string> {
  const out = new Map<string, string>();
  for (const [dir, opts] of V1_MOUNTS[mode]) {
    for (const c of opts.split(",")) out.set(c, `/sys/fs/cgroup/${dir}`);
  }
  return out;
}

function procCgroupText(mode: CgroupMode, path: string): string {
  if (mode === "v2") return `0::${path}\n`;
  const lines = V1_MOUNTS[mode].map(([, opts], i, all) => `${all.length - i}:${opts}:${path}`);
  if (mode === "hybrid") lines.push(`0::${path}`);
  return lines.join("\n") + "\n";
}

/**
 * Writes a host of `mode` under `root` (an existing temporary directory) with the given
 * cgroups, the node's root cgroup files ({@link FIXTURE_NODE}), /proc/meminfo, /proc/stat,
 * /proc/self/mountinfo and a `/proc/<pid>/cgroup` for each cgroup.
 */
export async function buildCgroupFixture(
  root: string,
  mode: CgroupMode,
  cgroups: readonly FixtureCgroup[],
): Promise<CgroupFixture> {
  const files = new Map<string, string>();
  const mountinfo = fixtureMountinfo(mode);
  files.set("/proc/self/mountinfo", mountinfo);
  const n = FIXTURE_NODE;
  files.set(
    "/proc/meminfo",
    `MemTotal: ${n.memTotal / 1024} kB\nMemFree: ${n.memFree / 1024} kB\n` +
      `MemAvailable: ${n.memFree / 1024} kB\nInactive(file): ${n.inactiveFileMeminfo / 1024} kB\n`,
  );
  files.set("/proc/stat", `cpu  ${n.procStatCpu.join(" ")}\ncpu0 ${n.procStatCpu.join(" ")}\n`);

  const dirs = mode === "v2" ? undefined : v1Dirs(mode);
  if (dirs === undefined) {
    const base = "/sys/fs/cgroup";
    files.set(`${base}/cpu.stat`, v2CpuStat(n.usageUsec));
    files.set(
      `${base}/memory.stat`,
      v2MemoryStat({ anon: n.anon, file: n.file, inactive_file: n.inactiveFile }),
    );
    files.set(`${base}/cgroup.procs`, "1\n");
  } else {
    files.set(`${dirs.get("cpuacct")}/cpuacct.usage`, `${n.cpuNs}\n`);
    const mem = dirs.get("memory")!;
    files.set(`${mem}/memory.usage_in_bytes`, `${n.memUsage}\n`);
    files.set(`${mem}/memory.limit_in_bytes`, `${V1_UNLIMITED}\n`);
    files.set(`${mem}/memory.stat`, v1MemoryStat({ inactive_file: n.inactiveFile }));
  }

  const pids = new Map<string, number>();
  cgroups.forEach((c, i) => {
    const pid = FIRST_PID + i;
    pids.set(c.path, pid);
    files.set(`/proc/${pid}/cgroup`, procCgroupText(mode, c.path));
    const stat = {
      rss: c.rss,
      anon: c.rss,
      cache: c.memUsage - c.rss,
      file: c.memUsage - c.rss,
      inactive_file: c.inactiveFile,
      active_file: Math.max(0, c.memUsage - c.rss - c.inactiveFile),
      pgfault: c.pgfault ?? 0,
      pgmajfault: c.pgmajfault ?? 0,
    };
    if (dirs === undefined) {
      const dir = cgroupDir("/sys/fs/cgroup", c.path);
      files.set(`${dir}/cpu.stat`, v2CpuStat(BigInt(c.cpuNs) / 1000n));
      files.set(`${dir}/memory.current`, `${c.memUsage}\n`);
      files.set(`${dir}/memory.stat`, v2MemoryStat(stat));
      files.set(`${dir}/memory.max`, `${c.limit ?? "max"}\n`);
      files.set(`${dir}/pids.current`, `${c.pids}\n`);
      files.set(`${dir}/pids.max`, "max\n");
      files.set(`${dir}/cgroup.procs`, `${pid}\n`);
      return;
    }
    const at = (ctrl: string) => cgroupDir(dirs.get(ctrl)!, c.path);
    files.set(`${at("cpu")}/cpu.shares`, "1024\n");
    files.set(`${at("cpuacct")}/cpuacct.usage`, `${BigInt(c.cpuNs)}\n`);
    files.set(`${at("memory")}/memory.usage_in_bytes`, `${c.memUsage}\n`);
    files.set(`${at("memory")}/memory.stat`, v1MemoryStat(stat));
    const limit = c.limit === undefined || c.limit === "max" ? V1_UNLIMITED : `${c.limit}`;
    files.set(`${at("memory")}/memory.limit_in_bytes`, `${limit}\n`);
    files.set(`${at("pids")}/pids.current`, `${c.pids}\n`);
    files.set(`${at("pids")}/pids.max`, "max\n");
    if (mode === "hybrid") {
      files.set(`${cgroupDir("/sys/fs/cgroup/unified", c.path)}/cgroup.procs`, `${pid}\n`);
    }
  });
  await writeAll(root, files);
  return { root, mode, mountinfo, pids };
}
