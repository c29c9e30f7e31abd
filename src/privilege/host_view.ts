/**
 * @module
 * The host view: the parts of /proc, /sys and /etc the agent reads, bind-mounted under one
 * directory so that the agent's Deno permission set can name them. Deno 2.9 refuses any read
 * under /proc or /sys to a process without --allow-all, whatever --allow-read says, but it
 * checks the path as given: the same files reached through a bind mount elsewhere are
 * ordinary paths to it. The view mirrors the host's layout (`<view>/proc/meminfo`,
 * `<view>/sys/fs/cgroup/...`), so modules that read "under a root" take the view as their root.
 *
 * Named /proc files, a few /sys directories and /etc files (machine ids, os-release, and
 * passwd, subuid and subgid for the user namespace range) are mounted read-only;
 * /sys/fs/cgroup recursively and writable (the agent manages the kubepods tree); each as a
 * slave, so nothing done under the view propagates back to the host. The view lives outside every
 * directory the agent may write or remove, and {@link openHostView} first clears what an
 * earlier run killed with SIGKILL left.
 *
 * Has no upstream counterpart: the Go kubelet reads the host's files with all of root's rights.
 */

import { join } from "node:path";
import { type CommandRunner, parseMountInfo, runCommand } from "../util/mount.ts";

/** What the view holds: host path, and whether the agent may write under it. */
export interface HostViewEntry {
  /** Where the entry appears in the view, as a host path. */
  readonly path: string;
  /** What is mounted there. @default path */
  readonly source?: string;
  readonly kind: "dir" | "file";
  readonly writable: boolean;
  /** Mounted with its submounts (cgroup v1 mounts one hierarchy per controller). */
  readonly recursive: boolean;
}

/** A read-only file or directory of the view. */
function ro(path: string, kind: "dir" | "file" = "file", source?: string): HostViewEntry {
  return { path, kind, writable: false, recursive: false, ...(source ? { source } : {}) };
}

/**
 * The host paths the agent reads (and the cgroup tree it writes), in mount order. Only named
 * files of /proc: a bind of all of it would hand the agent `/proc/<pid>/root`, the whole
 * filesystem as that process sees it. The agent's own `/proc/self` files are bound one by one
 * (the Worker is the same process), but not `fd/`, whose links lead to whatever the process
 * holds open; another process's files come through the launcher (launcher_calls.ts
 * `readProcFile`).
 */
export function hostViewEntries(pid = Deno.pid): HostViewEntry[] {
  // `self` (and `net`, a link to `self/net`) would be resolved by the mount command: name
  // this process's directory instead.
  const own = (f: string) =>
    f.replace(/^(self|net)\b/, (m) => m === "net" ? `${pid}/net` : `${pid}`);
  return [
    ...[
      "meminfo",
      "stat",
      "loadavg",
      "cpuinfo",
      "swaps",
      "sys/kernel/random/boot_id",
      "sys/kernel/osrelease",
      "sys/kernel/pid_max",
      "sys/kernel/threads-max",
      "net/route",
      "net/dev",
      "1/net/dev",
      "self/mountinfo",
      "self/stat",
      "self/status",
      "self/limits",
      "self/cgroup",
      "self/net/netstat",
    ].map((f) => ro(`/proc/${f}`, "file", `/proc/${own(f)}`)),
    { path: "/sys/fs/cgroup", kind: "dir", writable: true, recursive: true },
    ro("/sys/kernel/mm/hugepages", "dir"),
    ro("/sys/devices/system/cpu", "dir"),
    ro("/sys/class/dmi/id", "dir"),
    ro("/etc/machine-id"),
    ro("/var/lib/dbus/machine-id"),
    ro("/etc/os-release"),
    ro("/usr/lib/os-release"),
    // The kubelet user and its subordinate IDs, the range of pods' user namespaces.
    ro("/etc/passwd"),
    ro("/etc/subuid"),
    ro("/etc/subgid"),
  ];
}

/** Options of {@link openHostView}. */
export interface HostViewOptions {
  /** The view's directory; made if missing. Must not be under any directory the agent writes. */
  readonly dir: string;
  /** @default the entries the agent reads, {@link hostViewEntries} */
  readonly entries?: readonly HostViewEntry[];
  /** @default {@link runCommand} */
  readonly run?: CommandRunner;
  /** Reads the mount table. @default reads /proc/self/mountinfo */
  readonly readMountInfo?: () => Promise<string>;
  readonly signal?: AbortSignal;
}

/** A mounted host view; {@link HostView.close} unmounts it. */
export interface HostView extends AsyncDisposable {
  /** The root that stands for "/" when reading the viewed paths. */
  readonly root: string;
  /** The entries mounted (a host path that does not exist is skipped). */
  readonly mounted: readonly HostViewEntry[];
  /** Unmounts everything under the view (lazily, so a busy file does not keep it). */
  close(): Promise<void>;
  /**
   * Unmounts, then removes the view's directory, refusing (and removing nothing) while
   * anything is still mounted under it: a recursive remove would reach into the host's files.
   */
  remove(): Promise<void>;
}

/** The mount points under `dir` now, deepest first. */
export async function mountsUnder(
  dir: string,
  read: () => Promise<string> = () => Deno.readTextFile("/proc/self/mountinfo"),
): Promise<string[]> {
  const prefix = dir.endsWith("/") ? dir : `${dir}/`;
  return parseMountInfo(await read())
    .map((m) => m.mountPoint)
    .filter((p) => p.startsWith(prefix))
    .sort((a, b) => b.length - a.length);
}

/**
 * Lazily unmounts every mount under `dir`, deepest first, so a busy file does not keep one; a
 * failed unmount is left for the caller to find with {@link mountsUnder}.
 */
export async function unmountUnder(
  dir: string,
  opts: { readonly run?: CommandRunner; readonly readMountInfo?: () => Promise<string> } = {},
): Promise<void> {
  const run = opts.run ?? runCommand;
  for (const point of await mountsUnder(dir, opts.readMountInfo)) {
    await run("umount", ["-l", point]).catch(() => {});
  }
}

/** What `path` is, or undefined when it is missing or this process may not see it. */
async function exists(path: string): Promise<Deno.FileInfo | undefined> {
  try {
    return await Deno.stat(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound || e instanceof Deno.errors.PermissionDenied) {
      return undefined;
    }
    throw e;
  }
}

/**
 * Mounts the host view at `opts.dir` (clearing an earlier run's first) and resolves with it.
 * A failed mount unmounts what was done and rejects naming the command and its output.
 */
export async function openHostView(opts: HostViewOptions): Promise<HostView> {
  const run = opts.run ?? runCommand;
  const read = opts.readMountInfo ?? (() => Deno.readTextFile("/proc/self/mountinfo"));
  const dir = opts.dir;
  const unmountAll = () => unmountUnder(dir, { run, readMountInfo: read });
  await unmountAll();
  await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
  const mounted: HostViewEntry[] = [];
  try {
    for (const e of opts.entries ?? hostViewEntries()) {
      opts.signal?.throwIfAborted();
      const source = e.source ?? e.path;
      const info = await exists(source);
      if (!info || (e.kind === "dir") !== info.isDirectory) continue;
      const target = join(dir, e.path);
      if (e.kind === "dir") {
        await Deno.mkdir(target, { recursive: true });
      } else {
        await Deno.mkdir(join(target, ".."), { recursive: true });
        await Deno.writeTextFile(target, "", { append: true });
      }
      await run("mount", [e.recursive ? "--rbind" : "--bind", source, target], opts.signal);
      // Nothing done under the view (an unmount above all) may propagate to the host.
      await run("mount", [e.recursive ? "--make-rslave" : "--make-slave", target], opts.signal);
      if (!e.writable) await run("mount", ["-o", "remount,bind,ro", target], opts.signal);
      mounted.push(e);
    }
  } catch (err) {
    await unmountAll();
    throw err;
  }
  const remove = async () => {
    await unmountAll();
    const left = await mountsUnder(dir, read);
    if (left.length > 0) {
      throw new Error(`host view ${dir}: still mounted after unmounting: ${left.join(", ")}`);
    }
    await Deno.remove(dir, { recursive: true }).catch((e) => {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    });
  };
  return {
    root: dir,
    mounted,
    close: unmountAll,
    remove,
    [Symbol.asyncDispose]: unmountAll,
  };
}
