/**
 * @module
 * The plugin watcher: finds the plugin sockets under `<root-dir>/plugins_registry` (and its
 * sub-directories) and keeps the desired state of the world in step with them. At start it
 * creates the directory when missing (0755, as upstream's watcher; the kubelet's setupDataDirs
 * has made it 0750 before), starts an inotify watch (`Deno.watchFs`, recursive), then walks the
 * tree; a socket created is added (or, when its path is known, given a new timestamp and UUID,
 * so that a restarted driver is registered again), a path removed is dropped. Files whose name
 * starts with "." and anything that is not a unix socket (after following symlinks) are ignored.
 * Corresponds to upstream's `pkg/kubelet/pluginmanager/pluginwatcher/plugin_watcher.go`.
 *
 * Added here, because Deno's recursive watch (the notify crate on inotify) cannot be trusted
 * alone: on Deno 2.9 it has been seen to drop the removal of a file when its directory is
 * removed, and to report a file created in a new sub-directory as removed. So a removal or
 * rename event counts only when the path is really gone (what is there is taken as created),
 * and the tree is walked again every `rescanPeriodMs` and whenever Deno flags an event queue
 * overflow (inotify's IN_Q_OVERFLOW, `flag: "rescan"`), adding sockets the watch did not report
 * (or re-created under the same path with a new inode) and dropping those gone. The walk also
 * restarts the watch when the directory was replaced (deleted and made again, or mounted over:
 * the watch stays on the old inode and reports nothing more; seen by the removal event of the
 * directory itself or by its inode) or the watch ended on an error; upstream's fsnotify watch
 * stays blind in those cases until the kubelet restarts. Renames (which upstream ignores for
 * the old name) count as a removal of the old path and a creation of the new one.
 *
 * Difference: upstream skips dot-files by name, but walks into a dot-directory present at start
 * (and not one created later); here every path with a component starting with "." is skipped.
 */

import { join, relative } from "node:path";
import type { Logger } from "../klog/klog.ts";
import { type Clock, realClock } from "../util/clock.ts";
import { errorText } from "../util/errors.ts";
import type { DesiredStateOfWorld } from "./cache.ts";
import { linkSignals } from "../util/linked_signal.ts";

/** The name of the registration directory under the root directory (upstream DefaultKubeletPluginsRegistrationDirName). */
export const PLUGINS_REGISTRATION_DIR_NAME = "plugins_registry";

/** How often the tree is walked again, as a safety net under the watch. */
export const DEFAULT_RESCAN_PERIOD_MS = 10_000;

/** The part of `Deno.FsWatcher` the watcher uses. */
export interface FsWatch extends AsyncIterable<Deno.FsEvent> {
  close(): void;
}

/** Settings of a {@link PluginWatcher}. */
export interface PluginWatcherOptions {
  /** The directory to watch: `<root-dir>/plugins_registry`. */
  readonly path: string;
  readonly desiredStateOfWorld: DesiredStateOfWorld;
  readonly logger: Logger;
  /** Drives the periodic walk. @default realClock */
  readonly clock?: Clock;
  /** @default DEFAULT_RESCAN_PERIOD_MS */
  readonly rescanPeriodMs?: number;
  /** Starts a recursive watch. @default Deno.watchFs */
  readonly watchFs?: (path: string) => FsWatch;
  /** Creates the directory and its parents. @default Deno.mkdir, recursive */
  readonly mkdirAll?: (path: string, mode: number) => Promise<void>;
}

/** An event as fsnotify prints one in upstream's log lines (`Op` padded, then the quoted name). */
class EventText {
  constructor(readonly op: "CREATE" | "REMOVE", readonly name: string) {}
  toString(): string {
    return `${this.op.padEnd(13)} ${JSON.stringify(this.name)}`;
  }
}

/** Watches the registration directory; see the module documentation. */
export class PluginWatcher {
  readonly #path: string;
  readonly #dsw: DesiredStateOfWorld;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #rescanPeriodMs: number;
  readonly #watchFs: (path: string) => FsWatch;
  readonly #mkdirAll: (path: string, mode: number) => Promise<void>;
  /** The sockets added to the desired state, with their inode (for the rescan). */
  readonly #seen = new Map<string, number | null>();
  #watch: FsWatch | undefined;
  readonly #watchTasks = new Set<Promise<void>>();
  #watchedIno: number | null = null;
  /** Set when the watched directory itself was removed. */
  #watchDead = false;
  /** Event handling and walks, one after the other. */
  #serial: Promise<void> = Promise.resolve();
  #wake: (() => void) | undefined;
  #rescanDue = false;

  constructor(opts: PluginWatcherOptions) {
    this.#path = opts.path;
    this.#dsw = opts.desiredStateOfWorld;
    this.#logger = opts.logger;
    this.#clock = opts.clock ?? realClock;
    this.#rescanPeriodMs = opts.rescanPeriodMs ?? DEFAULT_RESCAN_PERIOD_MS;
    this.#watchFs = opts.watchFs ?? ((p) => Deno.watchFs(p, { recursive: true }));
    this.#mkdirAll = opts.mkdirAll ?? ((p, mode) => Deno.mkdir(p, { recursive: true, mode }));
  }

  /**
   * Creates the directory, starts the watch and walks the tree once; rejects when the
   * directory cannot be created or watched. Returns the watch's work, which ends after
   * `signal` aborts.
   */
  async start(signal: AbortSignal): Promise<{ done: Promise<void> }> {
    this.#logger.v(2).info("Plugin Watcher Start", { path: this.#path });
    this.#logger.v(4).info("Ensuring Plugin directory", { path: this.#path });
    try {
      await this.#mkdirAll(this.#path, 0o755);
    } catch (e) {
      throw new Error(`error (re-)creating root ${this.#path}: ${errorText(e)}`, { cause: e });
    }
    try {
      await this.#startWatch(signal);
    } catch (e) {
      throw new Error(`failed to start plugin fsWatcher, err: ${errorText(e)}`, { cause: e });
    }
    await this.#run(async () => {
      try {
        await this.#traverse(this.#path);
      } catch (e) {
        this.#logger.error(e, "Failed to traverse plugin socket path", { path: this.#path });
      }
    });
    return { done: this.#loop(signal) };
  }

  /** The periodic walk, until `signal` aborts; then the watch is closed. */
  async #loop(signal: AbortSignal): Promise<void> {
    try {
      while (!signal.aborted) {
        await this.#sleep(signal);
        if (signal.aborted) break;
        this.#rescanDue = false;
        await this.#run(() => this.#rescan(signal));
      }
    } finally {
      this.#stopWatch();
      await Promise.all([...this.#watchTasks]);
      await this.#serial;
    }
  }

  /** Waits a rescan period, or less when a rescan is asked for or `signal` aborts. */
  #sleep(signal: AbortSignal): Promise<void> {
    if (this.#rescanDue) return Promise.resolve();
    const ctl = new AbortController();
    return new Promise<void>((resolve) => {
      this.#wake = () => ctl.abort();
      const link = linkSignals(ctl.signal, signal);
      this.#clock.sleep(this.#rescanPeriodMs, link.signal)
        .catch(() => {})
        .finally(() => {
          link[Symbol.dispose]();
          this.#wake = undefined;
          resolve();
        });
    });
  }

  #run(fn: () => Promise<void>): Promise<void> {
    const next = this.#serial.then(fn, fn);
    this.#serial = next.catch(() => {});
    return next;
  }

  async #startWatch(signal: AbortSignal): Promise<void> {
    const ino = (await Deno.stat(this.#path)).ino;
    const watch = this.#watchFs(this.#path);
    this.#watch = watch;
    this.#watchedIno = ino;
    this.#watchDead = false;
    const task = (async () => {
      try {
        for await (const event of watch) {
          if (signal.aborted) break;
          await this.#run(() => this.#handleEvent(event));
        }
      } catch (e) {
        if (!signal.aborted) this.#logger.error(e, "FsWatcher received error");
      } finally {
        if (this.#watch === watch) this.#stopWatch();
      }
    })();
    this.#watchTasks.add(task);
    task.finally(() => this.#watchTasks.delete(task));
  }

  #stopWatch(): void {
    const watch = this.#watch;
    this.#watch = undefined;
    try {
      watch?.close();
    } catch { /* already closed */ }
  }

  async #handleEvent(event: Deno.FsEvent): Promise<void> {
    if (event.flag === "rescan") return this.#askRescan();
    if (event.kind !== "create" && event.kind !== "remove" && event.kind !== "rename") return;
    for (const path of event.paths) {
      if (path === this.#path) {
        // The directory itself went: its watch reports nothing more (and a directory made
        // again may get the same inode). The walk renews the watch once it is back.
        if (event.kind !== "create") {
          this.#watchDead = true;
          this.#askRescan();
        }
        continue;
      }
      if (event.kind === "create") {
        await this.#create(path, "event");
      } else if (await exists(path)) {
        // Deno's recursive watch has been seen to report a file created in a new directory
        // as removed; what is there counts.
        await this.#create(path, "changed");
      } else {
        this.#handleDeleteEvent(path);
      }
    }
  }

  #askRescan(): void {
    this.#rescanDue = true;
    this.#wake?.();
  }

  /** A create event, logged as upstream logs a failure of its handleCreateEvent. */
  async #create(path: string, mode: "event" | "walk" | "changed"): Promise<void> {
    try {
      await this.#handleCreateEvent(path, mode);
    } catch (e) {
      const event = new EventText("CREATE", path);
      const msg = mode === "walk"
        ? "Error when handling create"
        : "Error when handling create event";
      this.#logger.error(e, msg, { event });
    }
  }

  async #handleCreateEvent(path: string, mode: "event" | "walk" | "changed"): Promise<void> {
    this.#logger.v(6).info("Handling create event", { event: new EventText("CREATE", path) });
    let info: Deno.FileInfo;
    try {
      info = await Deno.stat(path);
    } catch (e) {
      throw new Error(`stat file ${path} failed: ${errorText(e)}`, { cause: e });
    }
    const name = path.slice(path.lastIndexOf("/") + 1);
    if (this.#hidden(path)) {
      this.#logger.v(5).info("Ignoring file (starts with '.')", { path: name });
      return;
    }
    if (info.isDirectory) return await this.#traverse(path);
    if (!info.isSocket) {
      this.#logger.v(5).info("Ignoring non socket file", { path: name });
      return;
    }
    // A rename or a walk that finds a known socket with the same inode is no new socket.
    if (mode !== "event" && this.#seen.has(path) && this.#seen.get(path) === info.ino) return;
    this.#seen.set(path, info.ino);
    this.#logger.v(2).info("Adding socket path or updating timestamp to desired state cache", {
      path,
    });
    try {
      this.#dsw.addOrUpdatePlugin(path);
    } catch (e) {
      throw new Error(
        `error adding socket path ${path} or updating timestamp to desired state cache: ${
          errorText(e)
        }`,
      );
    }
  }

  #handleDeleteEvent(path: string): void {
    this.#logger.v(6).info("Handling delete event", { event: new EventText("REMOVE", path) });
    this.#logger.v(2).info("Removing socket path from desired state cache", { path });
    this.#dsw.removePlugin(path);
    this.#seen.delete(path);
    // A directory removed takes the sockets under it along.
    for (const known of [...this.#seen.keys()]) {
      if (known.startsWith(path + "/")) {
        this.#dsw.removePlugin(known);
        this.#seen.delete(known);
      }
    }
  }

  /** True for a path with a component (below the watched directory) starting with ".". */
  #hidden(path: string): boolean {
    return relative(this.#path, path).split("/").some((c) => c.startsWith("."));
  }

  /**
   * Walks `dir` for sockets (upstream traversePluginDir): an unreadable `dir` rejects, an entry
   * that cannot be read is logged and skipped.
   */
  async #traverse(dir: string, found?: Set<string>): Promise<void> {
    let entries: Deno.DirEntry[];
    try {
      entries = await Array.fromAsync(Deno.readDir(dir));
    } catch (e) {
      if (dir === this.#path) {
        throw new Error(`error accessing path: ${dir} error: ${errorText(e)}`, { cause: e });
      }
      this.#logger.error(e, "Error accessing path", { path: dir });
      return;
    }
    for (const entry of entries) {
      const path = join(dir, entry.name);
      if (this.#hidden(path)) continue;
      if (entry.isDirectory) {
        await this.#traverse(path, found);
        continue;
      }
      let info: Deno.FileInfo;
      try {
        info = await Deno.stat(path);
      } catch (e) {
        this.#logger.error(e, "Error accessing path", { path });
        continue;
      }
      if (info.isSocket) {
        found?.add(path);
        await this.#create(path, found ? "changed" : "walk");
      } else {
        this.#logger.v(5).info("Ignoring file", { path, mode: modeText(info) });
      }
    }
  }

  /** The safety-net walk: sockets missed are added, sockets gone dropped, the watch renewed. */
  async #rescan(signal: AbortSignal): Promise<void> {
    let ino: number | null;
    try {
      ino = (await Deno.stat(this.#path)).ino;
    } catch (e) {
      this.#logger.error(e, "Error accessing path", { path: this.#path });
      // No directory, no sockets.
      if (e instanceof Deno.errors.NotFound) {
        for (const path of [...this.#seen.keys()]) this.#handleDeleteEvent(path);
      }
      return;
    }
    if (this.#watch === undefined || this.#watchDead || ino !== this.#watchedIno) {
      // The old watch's task ends on its own (it may be waiting behind this walk).
      this.#stopWatch();
      try {
        await this.#startWatch(signal);
        this.#logger.info("Watching the plugin registration directory again", {
          path: this.#path,
        });
      } catch (e) {
        this.#logger.error(e, "Failed to watch the plugin registration directory", {
          path: this.#path,
        });
      }
    }
    const found = new Set<string>();
    try {
      await this.#traverse(this.#path, found);
    } catch (e) {
      this.#logger.error(e, "Failed to traverse plugin socket path", { path: this.#path });
      return;
    }
    for (const path of [...this.#seen.keys()]) {
      if (!found.has(path)) this.#handleDeleteEvent(path);
    }
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.lstat(path);
    return true;
  } catch {
    return false;
  }
}

/** The file's type and permission bits, as Go's FileMode prints them ("-rw-r--r--"). */
function modeText(info: Deno.FileInfo): string {
  const type = info.isFile
    ? "-"
    : info.isDirectory
    ? "d"
    : info.isFifo
    ? "p"
    : info.isCharDevice
    ? "Dc"
    : info.isBlockDevice
    ? "D"
    : "?";
  const bits = info.mode ?? 0;
  let out = type;
  for (let i = 8; i >= 0; i--) out += bits & (1 << i) ? "rwx"[(8 - i) % 3] : "-";
  return out;
}
