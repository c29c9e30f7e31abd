/**
 * @module
 * Which cgroup hierarchy the host runs: unified (cgroup v2 mounted at /sys/fs/cgroup) or v1
 * (legacy or hybrid, as on these test machines). Corresponds to runc's
 * `cgroups.IsCgroup2UnifiedMode`, which upstream's validation uses for `failCgroupV1`. Read from
 * /proc/self/mountinfo because Deno has no statfs.
 */

import { hostPath } from "../privilege/host_root.ts";

/** True when the mount at `root` (default /sys/fs/cgroup) in `mountinfo` is cgroup2. */
export function isCgroup2UnifiedMode(mountinfo: string, root = "/sys/fs/cgroup"): boolean {
  let unified = false;
  for (const line of mountinfo.split("\n")) {
    const [left, right] = line.split(" - ");
    if (left === undefined || right === undefined) continue;
    // Later mounts at the same point shadow earlier ones, so the last match decides.
    if (left.split(" ")[4] === root) unified = right.split(" ")[0] === "cgroup2";
  }
  return unified;
}

/** Reads this host's mode; hosts without /proc/self/mountinfo count as not unified. */
export async function hostIsCgroup2UnifiedMode(): Promise<boolean> {
  try {
    return isCgroup2UnifiedMode(await Deno.readTextFile(hostPath("/proc/self/mountinfo")));
  } catch {
    return false;
  }
}
