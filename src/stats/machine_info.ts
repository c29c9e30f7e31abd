/**
 * @module
 * The machine facts node status and the stats endpoints report: CPUs (count, model, clock),
 * memory, swap, hugepages, the root filesystem's size, machine ID, system UUID, boot ID, kernel
 * and OS image. Read from /proc, /sys and /etc as cAdvisor's `MachineInfo` does (`machine/`:
 * `GetClockSpeed`, `GetMachineSwapCapacity`); the filesystem size through `fs_stats.ts`. Every
 * source is a path under a root so tests read fixture trees.
 */

import { join } from "node:path";
import { statFilesystems } from "./fs_stats.ts";
import { hostRoot } from "../privilege/host_root.ts";

/** What node status needs of cAdvisor's MachineInfo and VersionInfo. */
export interface MachineInfo {
  readonly numCores: number;
  readonly memoryCapacity: number;
  /** Hugepages by page size in bytes: count of pages. */
  readonly hugePages: ReadonlyMap<number, number>;
  readonly machineID: string;
  readonly systemUUID: string;
  readonly bootID: string;
  readonly kernelVersion: string;
  readonly osImage: string;
  /** /proc/cpuinfo's first "model name", when the architecture prints one. */
  readonly cpuModel?: string;
  /** SwapTotal in bytes (0 without swap). Always set by {@link readMachineInfo}. */
  readonly swapCapacity?: number;
  /** cpu0's cpufreq `cpuinfo_max_freq`, else /proc/cpuinfo's "cpu MHz" × 1000, in kHz. */
  readonly cpuFrequencyKhz?: number;
  /**
   * Distinct (package, core) pairs, packages, books and drawers of the online CPUs'
   * `topology/` files, as cAdvisor's sysinfo counts them (0 where the files are absent).
   */
  readonly numPhysicalCores?: number;
  readonly numSockets?: number;
  readonly numBooks?: number;
  readonly numDrawers?: number;
}

/** Counts distinct topology ids of the CPUs in `online` (see {@link MachineInfo}). */
async function topology(root: string, online: string | undefined) {
  const cores = new Set<string>();
  const sockets = new Set<string>();
  const books = new Set<string>();
  const drawers = new Set<string>();
  for (const part of (online ?? "").split(",")) {
    const [a, b] = part.trim().split("-").map(Number);
    if (a === undefined || Number.isNaN(a)) continue;
    for (let cpu = a; cpu <= (b ?? a); cpu++) {
      const dir = `sys/devices/system/cpu/cpu${cpu}/topology`;
      const pkg = await read(root, `${dir}/physical_package_id`);
      const core = await read(root, `${dir}/core_id`);
      if (pkg !== undefined) sockets.add(pkg);
      if (pkg !== undefined && core !== undefined) cores.add(`${pkg}/${core}`);
      const book = await read(root, `${dir}/book_id`);
      if (book !== undefined) books.add(book);
      const drawer = await read(root, `${dir}/drawer_id`);
      if (drawer !== undefined) drawers.add(drawer);
    }
  }
  return {
    numPhysicalCores: cores.size,
    numSockets: sockets.size,
    numBooks: books.size,
    numDrawers: drawers.size,
  };
}

/** The machine's facts cannot be read at all (Deno's permissions deny /proc and /sys). */
export class MachineInfoError extends Error {
  override name = "MachineInfoError";
}

async function read(root: string, path: string): Promise<string | undefined> {
  try {
    return (await Deno.readTextFile(join(root, path))).trim();
  } catch (e) {
    // Deno 2.9 wants all permissions for any read under /proc and /sys: a node with no
    // memory or CPUs would be worse than not starting.
    if (e instanceof Deno.errors.NotCapable) {
      throw new MachineInfoError(
        `cannot read ${join(root, path)}: Deno requires --allow-all for /proc and /sys ` +
          `(${e.message}); run the agent with --allow-all in place of -P=kubelet`,
        { cause: e },
      );
    }
    return undefined;
  }
}

/** Counts the CPUs in a cpulist such as "0-3,6". */
export function countCpuList(list: string): number {
  let n = 0;
  for (const part of list.split(",")) {
    const [a, b] = part.trim().split("-");
    if (a === undefined || a === "") continue;
    n += b === undefined ? 1 : Number(b) - Number(a) + 1;
  }
  return n;
}

/** The CPU clock in kHz as cAdvisor's GetClockSpeed finds it; undefined when unknown. */
function clockSpeedKhz(maxFreq: string | undefined, cpuinfo: string): number | undefined {
  if (maxFreq !== undefined) return /^\d+$/.test(maxFreq) ? Number(maxFreq) : undefined;
  // x86 and POWER print the current clock per CPU; cAdvisor takes the first.
  const mhz = /(?:cpu MHz|CPU MHz|clock)[ \t]*:[ \t]*(\d+\.\d+)/.exec(cpuinfo)?.[1];
  return mhz === undefined ? undefined : Math.floor(Number(mhz) * 1000);
}

/**
 * The system UUID as cAdvisor's `sysfs.GetSystemUUID` reads it, unchanged (no case folding):
 * the DMI product UUID, else POWER's device-tree system-id or vm,uuid (NULs trimmed), else
 * s390x's /etc/machine-id, which is also what a machine without DMI (a VM such as gVisor's)
 * reports; "" when none is readable.
 */
async function systemUUID(root: string): Promise<string> {
  const nul = (s: string | undefined) => s?.replace(/\0+$/, "").trim();
  return (await read(root, "sys/class/dmi/id/product_uuid")) ??
    nul(await read(root, "proc/device-tree/system-id")) ??
    nul(await read(root, "proc/device-tree/vm,uuid")) ??
    (await read(root, "etc/machine-id")) ?? "";
}

/** Reads machine info under `root` (default "/"). */
export async function readMachineInfo(root = hostRoot()): Promise<MachineInfo> {
  const online = await read(root, "sys/devices/system/cpu/online");
  const cpuinfo = await read(root, "proc/cpuinfo");
  const numCores = online
    ? countCpuList(online)
    : (cpuinfo?.match(/^processor\s*:/gm)?.length ?? 0);
  const meminfo = (await read(root, "proc/meminfo")) ?? "";
  const memKb = Number(/^MemTotal:\s+(\d+) kB/m.exec(meminfo)?.[1] ?? 0);
  const swapKb = Number(/^SwapTotal:\s+(\d+) kB/m.exec(meminfo)?.[1] ?? 0);
  const maxFreq = await read(root, "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  const hugePages = new Map<number, number>();
  try {
    for await (const e of Deno.readDir(join(root, "sys/kernel/mm/hugepages"))) {
      const kb = /^hugepages-(\d+)kB$/.exec(e.name)?.[1];
      if (!kb) continue;
      const count = Number(await read(root, `sys/kernel/mm/hugepages/${e.name}/nr_hugepages`) ?? 0);
      hugePages.set(Number(kb) * 1024, count);
    }
  } catch {
    // no hugepage support
  }
  const osRelease = (await read(root, "etc/os-release")) ??
    (await read(root, "usr/lib/os-release")) ?? "";
  const pretty = /^PRETTY_NAME=(.*)$/m.exec(osRelease)?.[1]?.replace(/^"(.*)"$/, "$1");
  return {
    numCores,
    memoryCapacity: memKb * 1024,
    hugePages,
    machineID: (await read(root, "etc/machine-id")) ??
      (await read(root, "var/lib/dbus/machine-id")) ?? "",
    systemUUID: await systemUUID(root),
    bootID: (await read(root, "proc/sys/kernel/random/boot_id")) ?? "",
    kernelVersion: (await read(root, "proc/sys/kernel/osrelease")) ?? "",
    osImage: pretty ?? "Linux",
    cpuModel: /^model name[ \t]*:[ \t]*(\S.*)$/m.exec(cpuinfo ?? "")?.[1]?.trim(),
    swapCapacity: swapKb * 1024,
    cpuFrequencyKhz: clockSpeedKhz(maxFreq, cpuinfo ?? ""),
    ...(await topology(root, online)),
  };
}

/** Size in bytes of the filesystem holding `path` (statvfs or `df`, see `fs_stats.ts`); undefined on error. */
export async function filesystemCapacity(path: string): Promise<number | undefined> {
  const usage = (await statFilesystems([path])).get(path);
  return usage === undefined || usage instanceof Error ? undefined : usage.capacityBytes;
}
