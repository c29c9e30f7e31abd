/**
 * @module
 * The node's process limit and process count for the Summary API's `rlimit`: the system-wide
 * task limit (the smaller of `kernel.pid_max` and `kernel.threads-max`) and the number of
 * tasks that exist now (the total of `/proc/loadavg`'s "running/total" field; sysinfo(2)'s
 * count truncates above 65535 and Deno does not expose it). Three small reads, never a throw:
 * an unreadable or odd value is left undefined with a reason in `missing`. Corresponds to
 * upstream `pkg/kubelet/stats/pidlimit` (`pidlimit_linux.go`: `Stats`, `runningTaskCount`).
 */

import { join } from "node:path";
import { hostRoot } from "../privilege/host_root.ts";

/** The node's task limit and count (upstream `statsapi.RlimitStats`). */
export interface RlimitStats {
  /** The system-wide task limit: min(pid_max, threads-max) of those readable. */
  maxPid?: number;
  /** Tasks (processes and threads) that exist now. */
  curProc?: number;
  /** When it was read. */
  time: Date;
  /** Human reasons for values left undefined, for the caller to log once. */
  missing: string[];
}

/** Options of {@link readRlimit}. */
export interface ReadRlimitOptions {
  /** Root under which /proc is read, for tests. @default "/" */
  root?: string;
  /** The time stamped on the result. @default () => new Date() */
  now?: () => Date;
}

const LIMIT_FILES = ["proc/sys/kernel/pid_max", "proc/sys/kernel/threads-max"] as const;

function reason(err: unknown): string {
  return err instanceof Deno.errors.NotFound ? "no such file" : (err as Error).message;
}

/** Reads one integer sysctl; a reason instead when it is missing or not a non-negative integer. */
async function readLimit(root: string, file: string): Promise<number | string> {
  let text: string;
  try {
    text = (await Deno.readTextFile(join(root, file))).trim();
  } catch (err) {
    return `/${file}: ${reason(err)}`;
  }
  return /^\d+$/.test(text) ? Number(text) : `/${file}: not an integer: ${JSON.stringify(text)}`;
}

/** The total in `/proc/loadavg` ("0.04 0.06 0.42 1/100 19202": 100), or a reason. */
export function parseLoadavgTasks(text: string): number | string {
  const fields = text.trim().split(/\s+/);
  if (fields.length < 5) return "not enough fields in /proc/loadavg";
  const parts = fields[3]!.split("/");
  if (parts.length !== 2 || !/^\d+$/.test(parts[1]!)) {
    return `error parsing fourth field of /proc/loadavg: ${JSON.stringify(fields[3])}`;
  }
  return Number(parts[1]);
}

/** Reads the node's task limit and count under `root`. */
export async function readRlimit(opts: ReadRlimitOptions = {}): Promise<RlimitStats> {
  const root = opts.root ?? hostRoot();
  const missing: string[] = [];
  const [limits, loadavg] = await Promise.all([
    Promise.all(LIMIT_FILES.map((f) => readLimit(root, f))),
    Deno.readTextFile(join(root, "proc/loadavg")).then(
      parseLoadavgTasks,
      (err) => `/proc/loadavg: ${reason(err)}`,
    ),
  ]);
  let maxPid: number | undefined;
  for (const limit of limits) {
    if (typeof limit === "string") missing.push(limit);
    else if (maxPid === undefined || limit < maxPid) maxPid = limit;
  }
  let curProc: number | undefined;
  if (typeof loadavg === "string") missing.push(loadavg);
  else curProc = loadavg;
  return { maxPid, curProc, time: (opts.now ?? (() => new Date()))(), missing };
}
