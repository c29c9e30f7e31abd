/**
 * @module
 * Hands memory the process no longer uses back to the kernel. Two kinds:
 *
 * - Freed heap, every few seconds. Deno's native side allocates with glibc's malloc, which keeps
 *   freed memory in its arenas (one per thread that allocated: the launcher, the kubelet's
 *   Worker, the planner that has ended, V8's and tokio's threads) instead of returning it:
 *   memory freed after a burst of pod starts stayed resident. `malloc_trim(0)` gives back the
 *   free pages of every arena (idle and standalone on the fake runtime, about 2 MiB of RSS). The
 *   Go kubelet has this from its runtime (the background scavenger; `debug.FreeOSMemory`).
 * - The executable's pages that only start-up used, at the times {@link PAGE_OUT_AFTER_MS}
 *   gives: 10 s after the loop starts, when most start-ups are over (registered, pods synced),
 *   and once more a minute in, for a start-up that took longer (an apiserver not yet up, TLS
 *   bootstrap) and the periodic loops' first passes. The binary (Deno's runtime with V8, its
 *   TypeScript and Node layers, and for a compiled kubelet the program) is mapped from its
 *   file; start-up touches ~48-55 MiB of it, of which the running kubelet uses ~26-30 MiB.
 *   `madvise(MADV_PAGEOUT)` over the executable's mappings drops the resident pages no other
 *   process maps; those the kubelet still uses come back on their next use as page faults
 *   (from the page cache or the disk), those it does not stay out. The kernel would do the
 *   same under memory pressure; this does it before there is any, so the node's memory is not
 *   held by code that ran once.
 *
 * Needs the `ffi` permission, which the launcher has and the kubelet's sandbox does not: the
 * launcher runs it for the whole process. Where libc has no `malloc_trim` (not glibc) or ffi is
 * not granted, it says so once at V(2) and does nothing else; where the kernel refuses
 * MADV_PAGEOUT (before Linux 5.4), each pass says so at V(2) and the trimming goes on.
 */

import type { Clock } from "./clock.ts";
import type { Logger } from "../klog/klog.ts";

/** Between two trims. */
export const FREE_OS_MEMORY_INTERVAL_MS = 10_000;

/** After the loop starts, when the executable's pages are paged out. */
export const PAGE_OUT_AFTER_MS: readonly number[] = [10_000, 60_000];

/** `MADV_PAGEOUT` of Linux's `<asm-generic/mman-common.h>`. */
const MADV_PAGEOUT = 21;

/** The libc functions used. */
export interface MallocTrim {
  /** glibc `int malloc_trim(size_t pad)`: 1 when memory was released, 0 when none could be. */
  trim(): number;
  /** `madvise(start, length, MADV_PAGEOUT)`: 0, or -1 when the kernel refused. */
  pageOut(start: bigint, length: bigint): number;
  close(): void;
}

/** A mapped address range. */
export interface MappedRange {
  readonly start: bigint;
  readonly length: bigint;
}

/**
 * The ranges of `/proc/self/maps` text that map the file `exe` (also when it has been replaced
 * on disk since, which the kernel shows as ` (deleted)`).
 */
export function mappingsOf(maps: string, exe: string): MappedRange[] {
  const out: MappedRange[] = [];
  for (const line of maps.split("\n")) {
    const m = /^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \d+\s+(.*)$/.exec(line);
    if (!m || (m[3] !== exe && m[3] !== `${exe} (deleted)`)) continue;
    const start = BigInt(`0x${m[1]}`);
    const end = BigInt(`0x${m[2]}`);
    if (end > start) out.push({ start, length: end - start });
  }
  return out;
}

/** The process's files the page-out reads, replaceable in tests. */
export interface ProcSelf {
  /** `/proc/self/maps`. */
  maps(): string;
  /** The executable's path as /proc/self/maps names it. */
  exe(): string;
  /** VmRSS in bytes. */
  rss(): number;
}

const procSelf: ProcSelf = {
  maps: () => Deno.readTextFileSync("/proc/self/maps"),
  exe: () => Deno.realPathSync(Deno.execPath()),
  rss: () =>
    Number(/^VmRSS:\s+(\d+) kB/m.exec(Deno.readTextFileSync("/proc/self/status"))?.[1] ?? 0) *
    1024,
};

/** Options of {@link startFreeOSMemory}. */
export interface FreeOSMemoryOptions {
  readonly clock: Clock;
  readonly logger: Logger;
  /** Stops the loop and closes the library. */
  readonly signal: AbortSignal;
  /** @default FREE_OS_MEMORY_INTERVAL_MS */
  readonly intervalMs?: number;
  /** Opens libc. @default {@link openMallocTrim} */
  readonly open?: () => MallocTrim;
  /** When the executable is paged out, after the start. @default PAGE_OUT_AFTER_MS */
  readonly pageOutAfterMs?: readonly number[];
  /** @default this process's /proc/self files */
  readonly proc?: ProcSelf;
}

/**
 * glibc's `malloc_trim` and `madvise` through Deno's FFI; throws when ffi is not granted or
 * libc lacks them.
 */
export function openMallocTrim(): MallocTrim {
  const lib = Deno.dlopen("libc.so.6", {
    malloc_trim: { parameters: ["usize"], result: "i32" },
    madvise: { parameters: ["pointer", "usize", "i32"], result: "i32" },
  });
  return {
    trim: () => lib.symbols.malloc_trim(0n),
    pageOut: (start, length) =>
      lib.symbols.madvise(Deno.UnsafePointer.create(start), length, MADV_PAGEOUT),
    close: () => lib.close(),
  };
}

/**
 * Pages out the executable's mappings; logs at V(2) what that gave back, or why it could not.
 */
function pageOutExecutable(libc: MallocTrim, proc: ProcSelf, logger: Logger): void {
  try {
    const exe = proc.exe();
    const ranges = mappingsOf(proc.maps(), exe);
    if (ranges.length === 0) throw new Error(`no mapping of ${exe} in /proc/self/maps`);
    const before = proc.rss();
    const refused = ranges.filter((r) => libc.pageOut(r.start, r.length) !== 0).length;
    if (refused === ranges.length) throw new Error("madvise(MADV_PAGEOUT) was refused");
    const after = proc.rss();
    logger.v(2).info("Paged out the executable's start-up pages", {
      executable: exe,
      mappings: ranges.length,
      refused,
      rssBeforeBytes: before,
      rssAfterBytes: after,
    });
  } catch (e) {
    logger.v(2).info("Not paging out the executable's start-up pages", {
      err: e instanceof Error ? e.message : String(e),
    });
  }
}

/**
 * Trims once now and then every `intervalMs` until `signal` aborts, and pages out the
 * executable at the first wake-up at or past each of `pageOutAfterMs` (after the start; one
 * pass for the times one sleep went past). Resolves when the loop ends; false when libc could
 * not be opened (logged at V(2)).
 */
export async function startFreeOSMemory(opts: FreeOSMemoryOptions): Promise<boolean> {
  const { clock, logger, signal } = opts;
  let libc: MallocTrim;
  try {
    libc = (opts.open ?? openMallocTrim)();
  } catch (e) {
    logger.v(2).info("Not returning freed heap memory to the kernel: malloc_trim unavailable", {
      err: e instanceof Error ? e.message : String(e),
    });
    return false;
  }
  const started = clock.now();
  const pageOutAt = [...(opts.pageOutAfterMs ?? PAGE_OUT_AFTER_MS)].sort((a, b) => a - b)
    .map((ms) => started + ms);
  try {
    while (!signal.aborted) {
      libc.trim();
      if (pageOutAt.length > 0 && clock.now() >= pageOutAt[0]!) {
        while (pageOutAt.length > 0 && clock.now() >= pageOutAt[0]!) pageOutAt.shift();
        pageOutExecutable(libc, opts.proc ?? procSelf, logger);
      }
      await clock.sleep(opts.intervalMs ?? FREE_OS_MEMORY_INTERVAL_MS, signal).catch(() => {});
    }
  } finally {
    libc.close();
  }
  return true;
}
