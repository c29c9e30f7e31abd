/**
 * @module
 * Filesystem usage for the Summary API: the size, use and inodes of the filesystems holding
 * some paths (the node's root dir, the image filesystem, volumes), and the bytes and inodes a
 * directory tree takes (emptyDir volumes, container log dirs). Deno has no statfs(2): the first
 * is libc's statvfs(3) through Deno's FFI (in the sandbox the launcher, which has `ffi`, makes
 * the call), and one `df` process (GNU coreutils, in the agent's `run` permission) for the
 * paths statvfs failed on, which names the reason, or for all paths where FFI is not granted or
 * libc lacks statvfs; the second walks the tree with lstat, counting allocated blocks as `du`
 * does.
 * Bad data never throws: each path gets its usage or an Error saying why not. Corresponds to
 * upstream `pkg/volume/util/fs` (`Info` over statfs, `DiskUsage`) and cAdvisor's `fs/fs.go`
 * (`getVfsStats`, `GetDirUsage`).
 */

import { join } from "node:path";
import { abortable } from "../util/clock.ts";
import type { CommandRunner } from "../util/mount.ts";
import {
  askLauncher,
  type HostCallHandlers,
  inPermissionSandbox,
} from "../privilege/launcher_calls.ts";

/** Size and inode counts of the filesystem holding a path (upstream's `FsInfo`). */
export interface FsUsage {
  /** f_blocks × f_frsize. */
  capacityBytes: number;
  /** (f_blocks − f_bfree) × f_frsize. */
  usedBytes: number;
  /** f_bavail × f_frsize: what unprivileged writers can still use. */
  availableBytes: number;
  /** f_files; undefined when the filesystem has no inode limit (reports 0, as tmpfs/btrfs may). */
  inodes?: number;
  inodesFree?: number;
  inodesUsed?: number;
}

/** Options of {@link statFilesystems}. */
export interface StatFilesystemsOptions {
  /**
   * Runs `df`; must resolve with stdout then stderr even when df exits 1, which it does when
   * any path fails while still printing the others. @default runs df with LC_ALL=C
   */
  run?: CommandRunner;
  /**
   * Reads statvfs(3) for the paths first; df runs only for those it answers undefined for.
   * null: df for all. @default in the sandbox the launcher's, else libc's through FFI when
   * `ffi` is granted and libc has it, else null
   */
  statvfs?: StatvfsReader | null;
  signal?: AbortSignal;
  /** A statvfs or df that hangs (a dead network mount) is stopped after this. @default 60000 */
  timeoutMs?: number;
}

/**
 * statvfs(3) of each path, in order: its usage, or undefined when the call failed (errno is
 * not readable after a call on another thread: df then names the reason).
 */
export type StatvfsReader = (
  paths: readonly string[],
  signal?: AbortSignal,
) => Promise<(FsUsage | undefined)[]>;

/** Bytes and inodes a directory tree takes (cAdvisor's `UsageInfo`). */
export interface DiskUsage {
  bytes: number;
  inodes: number;
}

/** The filesystem calls of {@link diskUsage}, replaceable in tests. */
export interface WalkFs {
  stat(path: string): Promise<Deno.FileInfo>;
  lstat(path: string): Promise<Deno.FileInfo>;
  readDir(path: string): AsyncIterable<Deno.DirEntry>;
}

/** Options of {@link diskUsage}. */
export interface DiskUsageOptions {
  signal?: AbortSignal;
  /** The walk gives up with an Error past this many entries. @default 1000000 */
  maxEntries?: number;
  /** @default Deno's stat, lstat and readDir */
  fs?: WalkFs;
}

/** df could not report a path, or a walk could not finish. */
export class FsStatsError extends Error {
  override name = "FsStatsError";
}

/**
 * `file` echoes each argument (so rows map back to paths); `target`, the mount point, would
 * not. `file` is last so a path with spaces is the rest of the line.
 */
const DF_ARGS = ["-B1", "--output=size,used,avail,itotal,iused,iavail,file"] as const;
const DF_TIMEOUT_MS = 60_000;
const MAX_ENTRIES = 1_000_000;
/** st_blocks counts 512-byte units whatever the filesystem's block size. */
const STAT_BLOCK_SIZE = 512;
/** lstat calls in flight at once within one directory. */
const LSTAT_BATCH = 64;
// deno-lint-ignore no-control-regex
const CONTROL_CHARS = /[\x00-\x1f\x7f]/;
const ROW = /^\s*(\d+|-)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+) (.*)$/;

/** `struct statvfs` on LP64 Linux (glibc): eleven 64-bit fields, then six ints of padding. */
const STATVFS_WORDS = 14;
const F_BSIZE = 0;
const F_FRSIZE = 1;
const F_BLOCKS = 2;
const F_BFREE = 3;
const F_BAVAIL = 4;
const F_FILES = 5;
const F_FFREE = 6;

/**
 * A filesystem's usage from a `struct statvfs` as 64-bit words, as upstream's `Info` derives it
 * from statfs(2) and df prints it: sizes in fragment-size units, inodes free from f_ffree.
 */
export function usageOfStatvfs(f: BigUint64Array): FsUsage {
  const unit = Number(f[F_FRSIZE] || f[F_BSIZE]);
  const blocks = Number(f[F_BLOCKS]);
  const usage: FsUsage = {
    capacityBytes: blocks * unit,
    usedBytes: (blocks - Number(f[F_BFREE])) * unit,
    availableBytes: Number(f[F_BAVAIL]) * unit,
  };
  const inodes = Number(f[F_FILES]);
  if (inodes > 0) {
    usage.inodes = inodes;
    usage.inodesFree = Number(f[F_FFREE]);
    usage.inodesUsed = inodes - usage.inodesFree;
  }
  return usage;
}

/** libc's statvfs(3) opened through Deno's FFI. */
export interface LibcStatvfs {
  readonly read: StatvfsReader;
  close(): void;
}

/**
 * Opens libc's `statvfs`; throws when `ffi` is not granted, libc is not glibc's `libc.so.6`, or
 * the architecture's `struct statvfs` is not the LP64 one. Each call runs on a blocking thread
 * (a statvfs of a dead network mount hangs), so a hang holds a thread, never the event loop.
 */
export function openStatvfs(): LibcStatvfs {
  if (Deno.build.os !== "linux" || !["x86_64", "aarch64"].includes(Deno.build.arch)) {
    throw new FsStatsError(`statvfs through FFI is not supported on ${Deno.build.target}`);
  }
  const lib = Deno.dlopen("libc.so.6", {
    statvfs: { parameters: ["buffer", "buffer"], result: "i32", nonblocking: true },
  });
  const encoder = new TextEncoder();
  const one = async (path: string): Promise<FsUsage | undefined> => {
    const buf = new BigUint64Array(STATVFS_WORDS);
    const rc = await lib.symbols.statvfs(encoder.encode(`${path}\0`), buf);
    return rc === 0 ? usageOfStatvfs(buf) : undefined;
  };
  const read: StatvfsReader = (paths, signal) => abortable(Promise.all(paths.map(one)), signal);
  return { read, close: () => lib.close() };
}

/**
 * statvfs(3) of each path, made by the launcher ({@link statFilesystems} in the sandbox):
 * undefined where it failed. Rejects with NotSupported when the launcher cannot open libc's
 * statvfs, and when `signal` aborts (a hung call is left to the launcher's thread).
 */
async function statvfsInLauncher(
  paths: readonly string[],
  signal?: AbortSignal,
): Promise<(FsUsage | undefined)[]> {
  signal?.throwIfAborted();
  const a = await abortable(askLauncher({ op: "statvfs", paths }), signal);
  return (a.fs ?? []).map((u) => u ?? undefined);
}

let launcherLibc: LibcStatvfs | Error | undefined;

/**
 * The launcher's handler of statvfs calls: libc's statvfs, opened on first use; NotSupported
 * for good when it cannot be opened.
 */
export const serveStatvfsCall: HostCallHandlers["statvfs"] = async (call) => {
  launcherLibc ??= (() => {
    try {
      return openStatvfs();
    } catch (e) {
      return new Deno.errors.NotSupported(
        `statvfs through FFI: ${e instanceof Error ? e.message : String(e)}`,
      );
    }
  })();
  if (launcherLibc instanceof Error) throw launcherLibc;
  return { fs: (await launcherLibc.read(call.paths)).map((u) => u ?? null) };
};

let defaultReader: StatvfsReader | null | undefined;

/** Forgets the default reader ({@link statFilesystems}), for tests. */
export function resetDefaultStatvfs(): void {
  defaultReader = undefined;
}

/** The launcher's statvfs in the sandbox, libc's here when `ffi` is granted, else null. */
function statvfsReader(): StatvfsReader | null {
  if (defaultReader !== undefined) return defaultReader;
  if (inPermissionSandbox()) {
    defaultReader = async (paths, signal) => {
      try {
        return await statvfsInLauncher(paths, signal);
      } catch (e) {
        signal?.throwIfAborted();
        // The launcher could not open libc's statvfs: df from now on.
        if ((e as Error).name === "NotSupported") defaultReader = null;
        return paths.map(() => undefined);
      }
    };
  } else if (Deno.permissions.querySync({ name: "ffi" }).state === "granted") {
    try {
      defaultReader = openStatvfs().read;
    } catch {
      defaultReader = null;
    }
  } else {
    defaultReader = null;
  }
  return defaultReader;
}

const runDf: CommandRunner = async (cmd, args, signal) => {
  const out = await new Deno.Command(cmd, {
    args: [...args],
    env: { LC_ALL: "C" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal,
  }).output();
  if (out.signal !== null) throw new FsStatsError(`${cmd} was stopped by ${out.signal}`);
  const text = new TextDecoder();
  return text.decode(out.stdout) + text.decode(out.stderr);
};

function count(s: string | undefined): number | undefined {
  return s !== undefined && /^\d+$/.test(s) ? Number(s) : undefined;
}

/** Why df skipped `path`, from its stderr line (`/x: reason`, or quoted `'/a b': reason`). */
function failure(path: string, errors: readonly string[]): Error {
  for (const e of errors) {
    for (const prefix of [`${path}: `, `'${path}': `]) {
      if (!e.startsWith(prefix)) continue;
      const why = e.slice(prefix.length);
      return why === "No such file or directory"
        ? new Deno.errors.NotFound(`statfs ${path}: ${why}`)
        : new FsStatsError(`statfs ${path}: ${why}`);
    }
  }
  const detail = errors.length > 0 ? `: ${errors.slice(0, 3).join("; ")}` : "";
  return new FsStatsError(`statfs ${path}: df printed no row for it${detail}`);
}

/**
 * Maps `df -B1 --output=size,used,avail,itotal,iused,iavail,file` output (stdout then stderr)
 * to the paths it was given. df prints rows in argument order and skips a path it cannot stat,
 * so each row is matched to the next path whose name (control characters shown as `?`) it
 * echoes; paths passed over get the reason from df's stderr.
 */
export function parseDfOutput(
  text: string,
  paths: readonly string[],
): Map<string, FsUsage | Error> {
  const out = new Map<string, FsUsage | Error>();
  const errors: string[] = [];
  const rows: string[][] = [];
  for (const line of text.split("\n")) {
    // df names itself as it was invoked: "df: …" or "/usr/bin/df: …".
    const e = /^\S*df: (.*)$/.exec(line);
    if (e) errors.push(e[1]!);
    const m = ROW.exec(line);
    if (m) rows.push(m.slice(1));
  }
  const shown = paths.map((p) => p.replace(new RegExp(CONTROL_CHARS, "g"), "?"));
  let next = 0;
  for (const [size, used, avail, itotal, iused, iavail, file] of rows) {
    const at = shown.indexOf(file!, next);
    if (at < 0) continue;
    for (; next < at; next++) out.set(paths[next]!, failure(paths[next]!, errors));
    next = at + 1;
    const path = paths[at]!;
    const capacityBytes = count(size);
    const usedBytes = count(used);
    const availableBytes = count(avail);
    if (capacityBytes === undefined || usedBytes === undefined || availableBytes === undefined) {
      out.set(
        path,
        new FsStatsError(`statfs ${path}: odd sizes from df: ${size} ${used} ${avail}`),
      );
      continue;
    }
    const usage: FsUsage = { capacityBytes, usedBytes, availableBytes };
    const inodes = count(itotal);
    if (inodes !== undefined && inodes > 0) {
      usage.inodes = inodes;
      usage.inodesUsed = count(iused);
      usage.inodesFree = count(iavail);
    }
    out.set(path, usage);
  }
  for (; next < paths.length; next++) out.set(paths[next]!, failure(paths[next]!, errors));
  return out;
}

/**
 * Usage of the filesystem holding each path, from statvfs(3) and, for the paths it fails on or
 * where it is not available, one `df` run; a path neither can stat maps to an Error
 * (Deno.errors.NotFound when it does not exist). Rejects only when `signal` aborts.
 */
export async function statFilesystems(
  paths: readonly string[],
  opts: StatFilesystemsOptions = {},
): Promise<Map<string, FsUsage | Error>> {
  opts.signal?.throwIfAborted();
  const result = new Map<string, FsUsage | Error>();
  const asked: string[] = [];
  for (const p of new Set(paths)) {
    // df shows control characters as '?', which could make two paths' rows alike; kubelet
    // paths never hold them.
    if (p === "" || CONTROL_CHARS.test(p)) {
      result.set(p, new FsStatsError(`statfs ${JSON.stringify(p)}: not a path df can report`));
    } else {
      asked.push(p);
    }
  }
  if (asked.length === 0) return result;
  const timeout = AbortSignal.timeout(opts.timeoutMs ?? DF_TIMEOUT_MS);
  const signal = opts.signal ? AbortSignal.any([timeout, opts.signal]) : timeout;
  const statvfs = opts.statvfs === undefined ? statvfsReader() : opts.statvfs;
  if (statvfs) {
    let got: (FsUsage | undefined)[];
    try {
      got = await statvfs(asked, signal);
    } catch (err) {
      opts.signal?.throwIfAborted();
      const why = timeout.aborted
        ? "statvfs timed out"
        : `statvfs failed: ${(err as Error).message}`;
      for (const p of asked) result.set(p, new FsStatsError(`statfs ${p}: ${why}`, { cause: err }));
      return result;
    }
    const failed = asked.filter((p, i) => {
      const u = got[i];
      if (u) result.set(p, u);
      return !u;
    });
    if (failed.length === 0) return result;
    asked.splice(0, asked.length, ...failed);
  }
  let text: string;
  try {
    text = await (opts.run ?? runDf)("df", [...DF_ARGS, "--", ...asked], signal);
  } catch (err) {
    opts.signal?.throwIfAborted();
    const why = timeout.aborted ? `df timed out` : `df failed: ${(err as Error).message}`;
    for (const p of asked) result.set(p, new FsStatsError(`statfs ${p}: ${why}`, { cause: err }));
    return result;
  }
  for (const [p, u] of parseDfOutput(text, asked)) result.set(p, u);
  return result;
}

const denoFs: WalkFs = { stat: Deno.stat, lstat: Deno.lstat, readDir: Deno.readDir };

function gone(err: unknown): boolean {
  return err instanceof Deno.errors.NotFound || err instanceof Deno.errors.NotADirectory;
}

function asError(err: unknown, path: string): Error {
  return err instanceof Error ? err : new FsStatsError(`${path}: ${String(err)}`);
}

/**
 * Allocated bytes (st_blocks × 512) and inodes under `dir`, `du`-style: entries are lstat'ed
 * (symlinks are counted, never followed), hard links counted once, other filesystems not
 * entered, entries vanishing mid-walk skipped. An Error when `dir` cannot be read, an entry
 * cannot be stat'ed for another reason, or the tree has more than `maxEntries` entries.
 * Rejects only when `signal` aborts.
 */
export async function diskUsage(
  dir: string,
  opts: DiskUsageOptions = {},
): Promise<DiskUsage | Error> {
  const { signal } = opts;
  const fs = opts.fs ?? denoFs;
  const max = opts.maxEntries ?? MAX_ENTRIES;
  signal?.throwIfAborted();
  let top: Deno.FileInfo;
  try {
    top = await fs.stat(dir);
  } catch (err) {
    return asError(err, dir);
  }
  const linked = new Set<number>();
  const usage: DiskUsage = { bytes: 0, inodes: 0 };
  const add = (info: Deno.FileInfo) => {
    if ((info.nlink ?? 1) > 1 && info.ino !== null) {
      if (linked.has(info.ino)) return;
      linked.add(info.ino);
    }
    usage.inodes++;
    usage.bytes += info.blocks !== null ? info.blocks * STAT_BLOCK_SIZE : info.size;
  };
  add(top);
  let entries = 1;
  const tooMany = () => new FsStatsError(`du ${dir}: more than ${max} entries`);
  const dirs = top.isDirectory ? [dir] : [];
  while (dirs.length > 0) {
    signal?.throwIfAborted();
    const current = dirs.pop()!;
    const names: string[] = [];
    try {
      for await (const e of fs.readDir(current)) {
        if (entries + names.length >= max) return tooMany();
        names.push(e.name);
      }
    } catch (err) {
      if (gone(err)) continue;
      return asError(err, current);
    }
    for (let i = 0; i < names.length; i += LSTAT_BATCH) {
      const batch = names.slice(i, i + LSTAT_BATCH).map((n) => join(current, n));
      const stats = await Promise.all(
        batch.map((p) => fs.lstat(p).then((info) => ({ info }), (err: unknown) => ({ err }))),
      );
      for (const [k, s] of stats.entries()) {
        if ("err" in s) {
          if (gone(s.err)) continue;
          return asError(s.err, batch[k]!);
        }
        const { info } = s;
        if (++entries > max) return tooMany();
        // A mount inside the tree (a subPath, a nested volume) is another filesystem's usage.
        if (info.dev !== top.dev) continue;
        add(info);
        if (info.isDirectory) dirs.push(batch[k]!);
      }
    }
  }
  return usage;
}
