/**
 * @module
 * Hands the heap memory the process has freed back to the kernel, every few seconds. Deno's
 * native side allocates with glibc's malloc, which keeps freed memory in its arenas (one per
 * thread that allocated: the launcher, the kubelet's Worker, the planner that has ended, V8's and
 * tokio's threads) instead of returning it: memory freed after a burst of pod starts stayed
 * resident. `malloc_trim(0)` gives back the free pages of every arena (idle and standalone on
 * the fake runtime, about 2 MiB of RSS). The Go kubelet has
 * this from its runtime (the background scavenger; `debug.FreeOSMemory` on demand).
 *
 * Needs the `ffi` permission, which the launcher has and the kubelet's sandbox does not: the
 * launcher runs it for the whole process. Where libc has no `malloc_trim` (not glibc) or ffi is
 * not granted, it says so once at V(2) and does nothing else.
 */

import type { Clock } from "./clock.ts";
import type { Logger } from "./klog.ts";

/** Between two trims. */
export const FREE_OS_MEMORY_INTERVAL_MS = 10_000;

/** The one libc function used. */
export interface MallocTrim {
  /** glibc `int malloc_trim(size_t pad)`: 1 when memory was released, 0 when none could be. */
  trim(): number;
  close(): void;
}

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
}

/** glibc's `malloc_trim` through Deno's FFI; throws when ffi is not granted or libc lacks it. */
export function openMallocTrim(): MallocTrim {
  const lib = Deno.dlopen("libc.so.6", {
    malloc_trim: { parameters: ["usize"], result: "i32" },
  });
  return { trim: () => lib.symbols.malloc_trim(0n), close: () => lib.close() };
}

/**
 * Trims once now and then every `intervalMs` until `signal` aborts. Resolves when the loop
 * ends; false when libc could not be opened (logged at V(2)).
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
  try {
    while (!signal.aborted) {
      libc.trim();
      await clock.sleep(opts.intervalMs ?? FREE_OS_MEMORY_INTERVAL_MS, signal).catch(() => {});
    }
  } finally {
    libc.close();
  }
  return true;
}
