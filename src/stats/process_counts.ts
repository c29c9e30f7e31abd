/**
 * @module
 * The process figures cAdvisor keeps per cgroup: how many processes the cgroup holds (its
 * `cgroup.procs`, not its children's), the file descriptors and sockets they have open (each
 * process's `/proc/<pid>/fd` listed, each link read), and the soft open-files limit of the
 * cgroup's first process (`/proc/<pid>/limits`). One small read per cgroup plus one directory
 * per process; a process that exits meanwhile, or a /proc the agent may not list (the
 * permission sandbox grants no /proc/<pid>/fd), leaves the counts undefined rather than wrong.
 * Corresponds to cAdvisor's `container/libcontainer/handler.go` (`processStatsFromProcs`,
 * `processRootProcUlimits`, `processLimitsFile`).
 */

import { join } from "node:path";
import { readCgroupFile } from "./_cgroup_read.ts";

/** A cgroup's process figures (cAdvisor's ProcessStats). */
export interface ProcessCounts {
  /** Lines of the cgroup's cgroup.procs. */
  processes: number;
  /** Open descriptors of those processes; undefined when /proc could not be listed. */
  fileDescriptors?: number;
  /** Descriptors that are sockets. */
  sockets?: number;
  /** Soft limits of the root process by cAdvisor's name ("max_open_files"); -1 unlimited. */
  ulimits?: { name: string; soft: number }[];
}

/** Parses `/proc/<pid>/limits` for the soft open-files limit, as cAdvisor's processLimitsFile. */
export function parseLimits(text: string): { name: string; soft: number }[] {
  const out: { name: string; soft: number }[] = [];
  for (const line of text.split("\n")) {
    if (!line.startsWith("Max open files")) continue;
    const fields = line.slice("Max open files".length).trim().split(/\s+/);
    if (fields.length !== 3) continue;
    const soft = fields[0] === "unlimited"
      ? -1
      : /^-?\d+$/.test(fields[0]!)
      ? Number(fields[0])
      : NaN;
    const hardOk = fields[1] === "unlimited" || /^-?\d+$/.test(fields[1]!);
    if (!Number.isNaN(soft) && hardOk) out.push({ name: "max_open_files", soft });
  }
  return out;
}

/**
 * What the permission sandbox refused: a Deno permission is not granted later, so a refused
 * listing of `/proc/<pid>/fd` (or read of `/proc/<pid>/limits`) is not tried again for any
 * process; the kernel's own refusals (another user's process) are per process and not kept.
 */
export interface ProcAccess {
  fdRefused?: boolean;
  limitsRefused?: boolean;
}

/** Options of {@link readProcessCounts}. */
export interface ReadProcessCountsOptions {
  /** Root under which /proc is read. @default "/" */
  root?: string;
  /** The cgroup's first process, for ulimits (cAdvisor: only when the pid is known). */
  rootPid?: number;
  /** Kept across calls by the caller: refusals of the sandbox, not asked again. */
  access?: ProcAccess;
}

/**
 * Reads the process figures of the cgroup whose cpu directory is `cpuDir`; undefined when its
 * cgroup.procs cannot be read (the cgroup is gone).
 */
export function readProcessCounts(
  cpuDir: string,
  opts: ReadProcessCountsOptions = {},
): ProcessCounts | undefined {
  const read = readCgroupFile(cpuDir, "cgroup.procs");
  if (!read.ok) return undefined;
  const pids = read.text.split("\n").filter((l) => /^\d+$/.test(l.trim()));
  const proc = join(opts.root ?? "/", "proc");
  const out: ProcessCounts = { processes: pids.length };
  const access = opts.access ?? {};
  let fds = 0;
  let sockets = 0;
  let listed = pids.length === 0;
  for (const pid of access.fdRefused ? [] : pids) {
    const dir = join(proc, pid.trim(), "fd");
    let names: string[];
    try {
      // Synchronous, as the cgroup reads: kernel-made entries, no disk wait, and a tenth of
      // the cost of a promise per link on a host root with ~1500 descriptors.
      names = [];
      for (const e of Deno.readDirSync(dir)) names.push(e.name);
    } catch (e) {
      if (e instanceof Deno.errors.NotCapable) {
        access.fdRefused = true; // the sandbox's: every process's is refused
        break;
      }
      continue; // exited, or not ours to list
    }
    listed = true;
    fds += names.length;
    for (const name of names) {
      try {
        if (Deno.readLinkSync(join(dir, name)).startsWith("socket")) sockets++;
      } catch {
        // closed meanwhile
      }
    }
  }
  if (listed) {
    out.fileDescriptors = fds;
    out.sockets = sockets;
  }
  if (opts.rootPid !== undefined && opts.rootPid > 0 && !access.limitsRefused) {
    try {
      out.ulimits = parseLimits(Deno.readTextFileSync(join(proc, String(opts.rootPid), "limits")));
    } catch (e) {
      // not readable here: left out
      if (e instanceof Deno.errors.NotCapable) access.limitsRefused = true;
    }
  }
  return out;
}
