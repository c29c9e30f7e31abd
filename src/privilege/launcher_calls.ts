/**
 * @module
 * The two things the sandboxed agent (permission_set.ts) asks its launcher to do because Deno cannot
 * grant them by path: making a symbolic link (Deno.symlink wants unscoped read and write, since
 * a link's target is only resolved when followed) and stat-ing a path outside the permission set
 * (whether the image filesystem shares the root dir's device), reading another process's
 * cgroup and network counters (`/proc/<pid>`, whose `root` link would lead anywhere), and
 * counting the process's open files (`/proc/self/fd`, whose links lead to whatever is open), and
 * reading a filesystem's size (statvfs(3), which needs FFI and reveals no file). The
 * launcher makes a link only inside the directories the agent may write, after resolving the
 * link's parent directory, answers a stat with metadata only, and reads only the named /proc
 * files of a numeric pid. Outside the sandbox both are the plain Deno calls.
 *
 * This module is the transport and the launcher's own calls (symlink, stat, /proc reads). The
 * calls that belong to a manager (statvfs: stats/fs_stats.ts; subPath: kubelet_mounts.ts;
 * hostPath: volume/host_path.ts) are asked and served by that manager's module through
 * {@link askLauncher} and {@link HostCallHandlers}; the launcher hands their handlers to
 * {@link serveHostCall}. Has no upstream counterpart.
 */

import { dirname, posix } from "node:path";
import type { FsUsage } from "../stats/fs_stats.ts";

/** A call from the agent to its launcher. */
export type HostCall =
  | {
    readonly call: number;
    readonly op: "symlink";
    readonly target: string;
    readonly path: string;
  }
  | { readonly call: number; readonly op: "stat"; readonly path: string }
  | { readonly call: number; readonly op: "procFile"; readonly pid: number; readonly file: string }
  | { readonly call: number; readonly op: "openFds" }
  | { readonly call: number; readonly op: "statvfs"; readonly paths: readonly string[] }
  | {
    readonly call: number;
    readonly op: "subPath";
    readonly step: "exists" | "make" | "resolve";
    readonly path: string;
    readonly volumePath: string;
    readonly subPath: string;
  }
  | {
    readonly call: number;
    readonly op: "hostPath";
    readonly path: string;
    readonly type: string;
    readonly mkdirMode?: number;
  };

/** The files of another process the agent reads: its cgroups and its network counters. */
export const PROC_FILES: readonly string[] = ["cgroup", "net/dev"];

/** The launcher's answer to call `call`. */
export interface HostCallAnswer {
  readonly call: number;
  readonly error?: { readonly name: string; readonly message: string };
  readonly stat?: { readonly dev: number; readonly isDirectory: boolean; readonly isFile: boolean };
  readonly text?: string;
  /** statvfs: each path's usage, null where the call failed. */
  readonly fs?: readonly (FsUsage | null)[];
}

/** The agent's end of the channel: a Worker scope posting calls and receiving answers. */
interface Channel {
  post(call: HostCall): void;
}

let channel: Channel | undefined;
let next = 1;
const waiting = new Map<number, PromiseWithResolvers<HostCallAnswer>>();

/** True inside the sandbox (after {@link useLauncher}). */
export function inPermissionSandbox(): boolean {
  return channel !== undefined;
}

/** Inside the sandbox: route the calls to the launcher through `post` (undefined: stop; tests). */
export function useLauncher(post: ((call: HostCall) => void) | undefined): void {
  channel = post && { post };
}

/** Inside the sandbox: an answer from the launcher (the Worker's message handler passes it). */
export function answered(a: HostCallAnswer): void {
  waiting.get(a.call)?.resolve(a);
  waiting.delete(a.call);
}

/** A call without its number (Omit does not distribute over the union). */
type Unnumbered = HostCall extends infer C ? C extends HostCall ? Omit<C, "call"> : never : never;

/** The calls a manager's module serves in the launcher (see the module documentation). */
export type OwnedHostOp = "statvfs" | "subPath" | "hostPath";

/** The launcher's handlers of the {@link OwnedHostOp} calls, each from the module that owns it. */
export type HostCallHandlers = {
  readonly [K in OwnedHostOp]: (
    call: Extract<HostCall, { op: K }>,
  ) => Promise<Omit<HostCallAnswer, "call">>;
};

/**
 * Inside the sandbox: asks the launcher to make `call` and waits for its answer; an error the
 * launcher answered rejects as the Deno error class of that name where there is one.
 */
export async function askLauncher(call: Unnumbered): Promise<HostCallAnswer> {
  const id = next++;
  const p = Promise.withResolvers<HostCallAnswer>();
  waiting.set(id, p);
  channel!.post({ ...call, call: id } as HostCall);
  const a = await p.promise;
  if (a.error) {
    const Known = (Deno.errors as unknown as Record<string, ErrorConstructor>)[a.error.name];
    const err = new (Known ?? Error)(a.error.message);
    if (!Known) err.name = a.error.name;
    throw err;
  }
  return a;
}

/** Makes the symbolic link `path` pointing at `target`. */
export async function symlink(target: string, path: string): Promise<void> {
  if (!channel) return Deno.symlinkSync(target, path);
  await askLauncher({ op: "symlink", target, path });
}

/**
 * A symbolic link at `link` to `target`, however the agent runs: through the launcher in its
 * sandbox, else Deno.symlink, and under a permission set without unscoped read and write (which
 * Deno.symlink needs: `-P=kubelet`) with `ln -s`, which that set lets the agent run.
 */
export async function makeSymlink(target: string, link: string): Promise<void> {
  try {
    await symlink(target, link);
    return;
  } catch (e) {
    if (!(e instanceof Deno.errors.NotCapable)) throw e;
  }
  const out = await new Deno.Command("ln", {
    args: ["-s", "--", target, link],
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).output();
  if (!out.success) {
    throw new Error(`ln -s ${target} ${link}: ${new TextDecoder().decode(out.stderr).trim()}`);
  }
}

/** The device of `path` and what it is, following links. */
export async function statPath(
  path: string,
): Promise<{ dev: number; isDirectory: boolean; isFile: boolean }> {
  if (!channel) {
    const s = await Deno.stat(path);
    return { dev: s.dev, isDirectory: s.isDirectory, isFile: s.isFile };
  }
  return (await askLauncher({ op: "stat", path })).stat!;
}

/**
 * `/proc/<pid>/<file>` under `root` ("/" or the host view); in the sandbox the launcher reads
 * it, for the files in {@link PROC_FILES} only. Read synchronously, as the launcher does: the
 * kernel makes the text when read, with no disk to wait for.
 */
export async function readProcFile(root: string, pid: number, file: string): Promise<string> {
  if (!channel) return Deno.readTextFileSync(posix.join(root, "proc", String(pid), file));
  return (await askLauncher({ op: "procFile", pid, file })).text!;
}

/**
 * How many files the process has open: the entries of `<procSelf>/fd`; in the sandbox the
 * launcher counts its own, which are the same process's.
 */
export async function countOpenFds(procSelf: string): Promise<number> {
  if (!channel) return await countDir(`${procSelf}/fd`);
  return Number((await askLauncher({ op: "openFds" })).text);
}

async function countDir(dir: string): Promise<number> {
  let n = 0;
  for await (const _ of Deno.readDir(dir)) n++;
  return n;
}

/** True when `path` is `dir` or below it (by path components). */
function within(path: string, dir: string): boolean {
  return path === dir || path.startsWith(dir.endsWith("/") ? dir : `${dir}/`);
}

/**
 * The launcher's end: answers `call` for an agent that may write under `writable`; the
 * {@link OwnedHostOp} calls go to `handlers` (a call without one is answered with an error).
 */
export async function serveHostCall(
  call: HostCall,
  writable: readonly string[],
  handlers: Partial<HostCallHandlers> = {},
): Promise<HostCallAnswer> {
  try {
    if (call.op === "stat") {
      const s = await Deno.stat(call.path);
      return {
        call: call.call,
        stat: { dev: s.dev, isDirectory: s.isDirectory, isFile: s.isFile },
      };
    }
    if (call.op === "procFile") {
      if (!Number.isSafeInteger(call.pid) || call.pid <= 0 || !PROC_FILES.includes(call.file)) {
        throw new Deno.errors.NotCapable(
          `/proc/${call.pid}/${call.file}: only ${PROC_FILES.join(", ")} of a process may be read`,
        );
      }
      return { call: call.call, text: Deno.readTextFileSync(`/proc/${call.pid}/${call.file}`) };
    }
    if (call.op === "openFds") {
      return { call: call.call, text: String(await countDir("/proc/self/fd")) };
    }
    if (call.op === "statvfs" || call.op === "subPath" || call.op === "hostPath") {
      const handler = handlers[call.op] as
        | ((c: HostCall) => Promise<Omit<HostCallAnswer, "call">>)
        | undefined;
      if (!handler) throw new Error(`the launcher serves no ${call.op} calls`);
      return { ...(await handler(call)), call: call.call };
    }
    if (call.op === "symlink") {
      const path = posix.normalize(call.path);
      if (!path.startsWith("/")) {
        throw new Deno.errors.NotCapable(`symlink ${call.path}: not an absolute path`);
      }
      // The parent as it really is: a link in the way must not carry the new link elsewhere.
      // Synchronous: local directory lookups of microseconds, on a pod's start path, where
      // each asynchronous call waited its turn for a blocking thread (2-3 ms per link).
      const parent = Deno.realPathSync(dirname(path));
      const roots = writable.map((w) => {
        try {
          return Deno.realPathSync(w);
        } catch {
          return w;
        }
      });
      if (!roots.some((r) => within(parent, r))) {
        throw new Deno.errors.NotCapable(
          `symlink ${call.path}: outside the directories the kubelet may write`,
        );
      }
      Deno.symlinkSync(call.target, posix.join(parent, posix.basename(path)));
      return { call: call.call };
    }
    throw new Error(`unknown host call ${(call as { op: string }).op}`);
  } catch (e) {
    const err = e instanceof Error ? e : new Error(String(e));
    return { call: call.call, error: { name: err.name, message: err.message } };
  }
}
