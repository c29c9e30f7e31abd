/**
 * @module
 * Pressure stall information of a cgroup v2 group: its `cpu.pressure`, `memory.pressure` and
 * `io.pressure` files (`some` and `full` lines, each with avg10, avg60, avg300 in percent and
 * total stall time in µs), parsed as opencontainers/cgroups' fs2 `statPSI` does and carried as
 * cAdvisor's PSIStats and the Summary API's `psi`. Only cgroup v2 hosts have them for a
 * cgroup: on v1 and hybrid hosts cAdvisor reads cgroups through the v1 manager, which reads no
 * pressure files. Corresponds to `opencontainers/cgroups/fs2/psi.go`.
 */

import { readCgroupFile } from "./_cgroup_read.ts";

/** One line of a pressure file. */
export interface PsiData {
  avg10: number;
  avg60: number;
  avg300: number;
  /** Total stall time, µs, as the kernel writes it. */
  total: number;
}

/** A pressure file: the share of time some tasks stalled, and all of them. */
export interface PsiStats {
  some: PsiData;
  full: PsiData;
}

const ZERO: PsiData = { avg10: 0, avg60: 0, avg300: 0, total: 0 };

/**
 * Parses a pressure file; undefined when it has no well-formed `some` or `full` line. A file
 * with only `some` (cpu.pressure before Linux 5.13) has `full` all zero, as fs2 leaves it.
 */
export function parsePsi(text: string): PsiStats | undefined {
  const out: Partial<PsiStats> = {};
  for (const line of text.split("\n")) {
    const [kind, ...pairs] = line.trim().split(/\s+/);
    if (kind !== "some" && kind !== "full") continue;
    const data: Partial<Record<keyof PsiData, number>> = {};
    for (const pair of pairs) {
      const [k, v] = pair.split("=");
      if (v === undefined || !/^\d+(\.\d+)?$/.test(v)) return undefined;
      if (k === "avg10" || k === "avg60" || k === "avg300" || k === "total") data[k] = Number(v);
    }
    if (
      data.avg10 === undefined || data.avg60 === undefined || data.avg300 === undefined ||
      data.total === undefined
    ) return undefined;
    out[kind] = data as PsiData;
  }
  if (!out.some && !out.full) return undefined;
  return { some: out.some ?? { ...ZERO }, full: out.full ?? { ...ZERO } };
}

/** Reads `dir/file` as a pressure file; undefined when absent or malformed. */
export function readPsi(dir: string, file: string): PsiStats | undefined {
  const read = readCgroupFile(dir, file);
  return read.ok ? parsePsi(read.text) : undefined;
}
