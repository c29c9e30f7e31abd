/**
 * @module
 * The kernel's state between the benchmark suite's phases (tests/bench_suite.ts). Every pod a
 * phase starts and removes leaves its memory cgroup dying until the page cache charged to it is
 * reclaimed. A day of runs left 9,185 memory cgroups for 318 of every other controller, and in
 * the run that started then everything was slower, the CRI floor included
 * (bench/results/2026-12-07-vm-containerd2-density-250-dying-cgroups.md; the runs after it,
 * with the cache dropped, were faster but still slower than the morning's, so the dying cgroups
 * were at most part of it). Each phase therefore starts from a dropped page cache, and the
 * report gives the count before and after. The phases' first pods find the
 * cache cold: start-up and first-pod timings are not comparable with runs before this.
 */

import { must } from "./child_process.ts";

/** The memory controller's cgroups in `/proc/cgroups` text (dying ones included). */
export function memoryCgroups(procCgroups: string): number | undefined {
  for (const line of procCgroups.split("\n")) {
    const [name, , count] = line.trim().split(/\s+/);
    if (name === "memory" && count !== undefined && /^\d+$/.test(count)) return Number(count);
  }
  return undefined;
}

/** Memory cgroups before and after the page cache was dropped. */
export interface PageCacheDrop {
  readonly before?: number;
  readonly after?: number;
}

async function readMemoryCgroups(): Promise<number | undefined> {
  return memoryCgroups(await Deno.readTextFile("/proc/cgroups").catch(() => ""));
}

/**
 * Writes dirty pages out (`sync`), drops the page cache, dentries and inodes
 * (`/proc/sys/vm/drop_caches`), and gives the kernel `settleMs` to free the cgroups that held
 * only cache. Needs root.
 */
export async function dropPageCache(settleMs = 3_000): Promise<PageCacheDrop> {
  const before = await readMemoryCgroups();
  await must(["sync"]);
  await Deno.writeTextFile("/proc/sys/vm/drop_caches", "3\n");
  await new Promise((r) => setTimeout(r, settleMs));
  return { before, after: await readMemoryCgroups() };
}

/** "9185 → 328 memory cgroups" for the report. */
export function dropText(d: PageCacheDrop): string {
  return `${d.before ?? "?"} → ${d.after ?? "?"} memory cgroups`;
}
