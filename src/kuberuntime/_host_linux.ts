/**
 * @module
 * What a container's Linux config reads from the host, each once, through the host view
 * (privilege/host_root.ts): the hugepage sizes (cm/hugepages.ts), whether the kernel accounts
 * swap per cgroup and how much swap there is, whether SELinux is enabled, and the default masked
 * paths with the CPUs' thermal_throttle directories. Private to
 * `_container_linux.ts` and `kuberuntime_container.ts`. Corresponds to upstream
 * `checkSwapControllerAvailability` (`kuberuntime_container_linux.go`), `selinux.GetEnabled`
 * (github.com/opencontainers/selinux `go-selinux/selinux_linux.go`) and `defaultMaskedPaths` /
 * `possibleCPUs` (`pkg/securitycontext/util.go`, `util_linux.go`).
 */

import { join } from "node:path";
import { hostRoot } from "../privilege/host_root.ts";
import { parseMountInfo } from "../util/mount.ts";
import { readHugePageSizes } from "../cm/hugepages.ts";

function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}

function readText(path: string): string | undefined {
  try {
    return Deno.readTextFileSync(path);
  } catch {
    return undefined;
  }
}

/** The unified hierarchy's path in a /proc/<pid>/cgroup file (its "0::<path>" line), or "". */
export function unifiedCgroupPath(procCgroup: string): string {
  for (const line of procCgroup.split("\n")) {
    const [id, controllers, ...path] = line.split(":");
    if (id === "0" && controllers === "") return path.join(":");
  }
  return "";
}

/**
 * upstream checkSwapControllerAvailability: on v1 the memory hierarchy has
 * memory.memsw.limit_in_bytes; on v2 this process's own cgroup has memory.swap.max (the root
 * cgroup never has it). `root` stands for "/".
 */
export function swapControllerAvailable(cgroupV2: boolean, root: string): boolean {
  if (!cgroupV2) return exists(join(root, "sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"));
  const self = readText(join(root, "proc/self/cgroup"));
  if (self === undefined) return false;
  return exists(join(root, "sys/fs/cgroup", unifiedCgroupPath(self), "memory.swap.max"));
}

/**
 * selinux.GetEnabled: a writable selinuxfs is mounted and this process's label is not
 * "kernel" (no policy loaded). A label that cannot be read counts as enabled, as there.
 */
export function selinuxEnabled(root: string): boolean {
  const mountinfo = readText(join(root, "proc/self/mountinfo"));
  if (mountinfo === undefined) return false;
  const selinuxfs = parseMountInfo(mountinfo).some((m) =>
    m.fsType === "selinuxfs" && !m.options.includes("ro")
  );
  if (!selinuxfs) return false;
  const label = readText(join(root, "proc/thread-self/attr/current")) ??
    readText(join(root, "proc/self/attr/current"));
  return label?.replace(/[\0\n]+$/, "") !== "kernel";
}

// These must stay in sync with moby's defaults, as upstream's do.
const MASKED_PATHS = [
  "/proc/asound",
  "/proc/acpi",
  "/proc/interrupts",
  "/proc/kcore",
  "/proc/keys",
  "/proc/latency_stats",
  "/proc/timer_list",
  "/proc/timer_stats",
  "/proc/sched_debug",
  "/proc/scsi",
  "/sys/firmware",
  "/sys/devices/virtual/powercap",
];

/** The CPUs of /sys/devices/system/cpu/possible ("0-3,8"); undefined when it does not parse. */
export function parsePossibleCPUs(text: string): number[] | undefined {
  const cpus: number[] = [];
  for (const range of text.trim().split(",")) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(range);
    if (!m) return undefined;
    const start = Number(m[1]);
    const end = m[2] === undefined ? start : Number(m[2]);
    for (let i = start; i <= end; i++) cpus.push(i);
  }
  return cpus;
}

/**
 * upstream defaultMaskedPaths: moby's list, then each possible CPU's thermal_throttle directory
 * that exists on the host (the CPUs from /sys/devices/system/cpu/possible, else as many as
 * this process may run on).
 */
export function defaultMaskedPaths(root: string): string[] {
  const possible = readText(join(root, "sys/devices/system/cpu/possible"));
  const cpus = (possible === undefined ? undefined : parsePossibleCPUs(possible)) ??
    Array.from({ length: navigator.hardwareConcurrency }, (_, i) => i);
  const out = [...MASKED_PATHS];
  for (const cpu of cpus) {
    const path = `/sys/devices/system/cpu/cpu${cpu}/thermal_throttle`;
    if (exists(join(root, path))) out.push(path);
  }
  return out;
}

/** What the host says, read on first use and kept for the process's life, as upstream does. */
export interface HostLinux {
  /** The page sizes of /sys/kernel/mm/hugepages as cgroups name them, in the kernel's order. */
  hugePageSizes(): readonly string[];
  swapControllerAvailable(cgroupV2: boolean): boolean;
  selinuxEnabled(): boolean;
  defaultMaskedPaths(): readonly string[];
  /** SwapTotal of /proc/meminfo, in bytes (cadvisor's MachineInfo.SwapCapacity). */
  swapCapacityBytes(): number;
}

/** A {@link HostLinux} over `root` ("/" or the host view's root). */
export function hostLinuxAt(root: string): HostLinux {
  const swap = new Map<boolean, boolean>();
  let selinux: boolean | undefined;
  let masked: readonly string[] | undefined;
  let swapCapacity: number | undefined;
  let hugePageSizes: readonly string[] | undefined;
  return {
    hugePageSizes: () => hugePageSizes ??= readHugePageSizes(join(root, "sys/kernel/mm/hugepages")),
    swapControllerAvailable(v2) {
      let v = swap.get(v2);
      if (v === undefined) swap.set(v2, v = swapControllerAvailable(v2, root));
      return v;
    },
    selinuxEnabled: () => selinux ??= selinuxEnabled(root),
    defaultMaskedPaths: () => masked ??= defaultMaskedPaths(root),
    swapCapacityBytes: () =>
      swapCapacity ??= Number(
        /^SwapTotal:\s+(\d+) kB/m.exec(readText(join(root, "proc/meminfo")) ?? "")?.[1] ?? 0,
      ) * 1024,
  };
}

let host: HostLinux | undefined;

/** The host's {@link HostLinux}, made on first use (after the sandbox set the host root). */
export function hostLinux(): HostLinux {
  host ??= hostLinuxAt(hostRoot());
  return host;
}
