/**
 * @module
 * CgroupName helpers of upstream `pkg/kubelet/cm/cgroup_manager_linux.go`: composing a name
 * (`NewCgroupName`), printing it as Go's `%q` does, and turning a literal cgroupfs or systemd
 * path back into a name (`ParseCgroupfsToCgroupName`, `ParseSystemdToCgroupName`). The forward
 * direction lives in cgroup_layout.ts (`cgroupfsName`, `systemdName`). Private to
 * cgroup_manager.ts, which re-exports what others need.
 */

import { posix } from "node:path";

/** Go's `%q` of a CgroupName: `["kubepods" "burstable"]`. */
export function formatCgroupName(parts: readonly string[]): string {
  return `[${parts.map((p) => JSON.stringify(p)).join(" ")}]`;
}

/** Composes a CgroupName; "/" and "_" are refused so systemd names map back (NewCgroupName). */
export function newCgroupName(base: readonly string[], ...components: string[]): string[] {
  for (const c of components) {
    if (c.includes("/") || c.includes("_")) {
      throw new RangeError(`invalid character in component ${JSON.stringify(c)} of CgroupName`);
    }
  }
  return [...base, ...components];
}

/** The CgroupName of a cgroupfs path: "/kubepods/burstable" is ["kubepods", "burstable"]. */
export function parseCgroupfsName(literal: string): string[] {
  const trimmed = literal.replace(/^\/+/, "");
  return trimmed === "" ? [] : trimmed.split("/");
}

/**
 * The CgroupName of a systemd path, from its last slice: ".../kubepods-burstable-pod12_34.slice"
 * is ["kubepods", "burstable", "pod12-34"].
 */
export function parseSystemdName(literal: string): string[] {
  const base = posix.basename(literal);
  if (base === "" || base === "/") return [];
  return base.replace(/\.slice$/, "").split("-").map((p) => p.replaceAll("_", "-"));
}
