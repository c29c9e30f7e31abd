/**
 * @module
 * The static pod file source of PodConfig: reads `staticPodPath` (a directory of manifests, or
 * one manifest file), turns each manifest into a v1 Pod with upstream's defaults, and hands the
 * whole set to `onUpdate` whenever it changes, as upstream's `PodUpdate{Op: SET, Source: "file"}`.
 * It rescans every `fileCheckFrequency` on the injected clock and, between scans, on inotify
 * events from `Deno.watchFs`.
 *
 * Corresponds to upstream `pkg/kubelet/config/file.go` and `file_linux.go`, with the decoding and
 * validation of `common.go` (`tryDecodeSinglePod`) in `static_pod_decode.ts` and
 * `_static_pod_validation.ts`; the defaults live in `_static_pod_defaults.ts`.
 * Upstream behaviour kept on purpose:
 *
 * - In a directory, every entry whose name does not start with "." is a manifest; directories are
 *   not recursed into. Each file holds one Pod (`apiVersion: v1`, `kind: Pod`; a PodList is
 *   refused, as the file source only tries a single pod); YAML is read as YAML 1.1, a file
 *   starting with "{" as JSON; only the first YAML document counts; unknown fields are dropped
 *   (the decoder is not strict), and each dropped field is named in one warning.
 * - A manifest that cannot be read, decoded or validated is left out of the set with one error.
 *   A periodic scan drops its previous pod; an inotify-triggered scan keeps it (upstream applies
 *   watch events per file and ignores an event whose file no longer parses).
 * - When `staticPodPath` is one file that is bad, or the path cannot be read, the set is kept.
 *   A path that does not exist is an empty set.
 * - Of two manifests with the same namespace and name, the later file (in name order) wins;
 *   here the one it replaces is also reported as a problem.
 * - Validation is the part of `ValidatePodCreate` a kubelet relies on (names, containers, images,
 *   ports, volumes and their mounts, policies), then PreventStaticPodAPIReferences (beta, on by
 *   default since 1.34): no service account, secret, config map, claim or CSI volume.
 *
 * Differences: the UID hashes a JSON print of the pod rather than go-spew's (see
 * `_static_pod_defaults.ts`), so it is stable here but not equal to the Go kubelet's; problems are
 * logged once until they change, where upstream logs them at every scan; the set is handed on
 * only when it changes (upstream sends every scan and lets PodConfig drop repeats); the inotify
 * debounce waits on wall time. The `config.source` and `config.seen` annotations are added here,
 * as this codebase has no PodConfig merge yet (upstream's `podStorage.merge` adds them);
 * `config.seen` keeps the first time a UID was seen for as long as the UID stays in the set.
 */

import type { V1Pod } from "@kubernetes/client-node";
import type { Clock } from "../util/clock.ts";
import { kobj, type Logger } from "../klog/klog.ts";
import {
  CONFIG_FIRST_SEEN_ANNOTATION,
  CONFIG_SOURCE_ANNOTATION,
  FILE_SOURCE,
} from "./pod_config.ts";
import { canonicalJSON, fnv128a } from "./_static_pod_defaults.ts";
import {
  fileProblem,
  msg,
  staticPodFromManifest,
  StaticPodManifestError,
} from "./static_pod_decode.ts";

export {
  CONFIG_FIRST_SEEN_ANNOTATION as CONFIG_FIRST_SEEN_ANNOTATION_KEY,
  CONFIG_HASH_ANNOTATION as CONFIG_HASH_ANNOTATION_KEY,
  CONFIG_MIRROR_ANNOTATION as CONFIG_MIRROR_ANNOTATION_KEY,
  CONFIG_SOURCE_ANNOTATION as CONFIG_SOURCE_ANNOTATION_KEY,
  FILE_SOURCE,
} from "./pod_config.ts";
export {
  staticPodFromManifest,
  type StaticPodManifest,
  StaticPodManifestError,
} from "./static_pod_decode.ts";

/** Upstream's `maxConfigLength`: a manifest may hold at most 10 MiB. */
export const MAX_MANIFEST_BYTES = 10 * 1024 * 1024;

/** One entry of the problems that {@link StaticPodFileSource} reports with each set. */
export type StaticPodProblem = StaticPodManifestError;

/** What {@link StaticPodFileSource} needs. */
export interface StaticPodFileSourceOptions {
  /** `staticPodPath`: a directory of manifests, or a single manifest file. */
  readonly path: string;
  /** This node's name: it suffixes pod names and enters their UIDs. */
  readonly nodeName: string;
  /** `fileCheckFrequency` in milliseconds: how often the path is listed again. @default 20000 */
  readonly fileCheckFrequencyMs: number;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Receives the whole set (upstream's SET) on the first scan and whenever it changes. */
  readonly onUpdate: (pods: V1Pod[], problems: StaticPodProblem[]) => void;
  /**
   * Wall-clock milliseconds that gather a burst of inotify events into one rescan. File system
   * events happen in real time, so this wait does not come from `clock`. @default 100
   */
  readonly watchDebounceMs?: number;
  /** Starts an inotify watch of the path. @default Deno.watchFs, not recursive */
  readonly watchFs?: (path: string) => FsWatch;
}

/** The part of `Deno.FsWatcher` the source uses. */
export interface FsWatch extends AsyncIterable<Deno.FsEvent> {
  close(): void;
}

/** A scan's outcome: the current set and the manifests left out of it. */
export interface StaticPodScan {
  readonly pods: V1Pod[];
  readonly problems: StaticPodProblem[];
}

interface Known {
  readonly file: string;
  readonly key: string;
  readonly pod: V1Pod;
  readonly fingerprint: string;
}

type Read =
  | { readonly kind: "pod"; readonly known: Known; readonly ignored: readonly string[] }
  | { readonly kind: "problem"; readonly problem: StaticPodProblem }
  /** A sub-directory, which is not recursed into. */
  | { readonly kind: "dir" }
  /** Removed between listing and reading. */
  | { readonly kind: "gone" };

type Listing =
  | { readonly kind: "missing" }
  | { readonly kind: "unreadable"; readonly problem: StaticPodProblem }
  | { readonly kind: "file"; readonly read: Read }
  | { readonly kind: "dir"; readonly reads: ReadonlyMap<string, Read> };

const decoder = new TextDecoder("utf-8", { fatal: true });

/** Go's `path.Clean`, which `filepath.Join` applies to the file names that enter pod UIDs. */
function cleanPath(p: string): string {
  const rooted = p.startsWith("/");
  const out: string[] = [];
  for (const seg of p.split("/")) {
    if (seg === "" || seg === ".") continue;
    if (seg !== "..") out.push(seg);
    else if (out.length > 0 && out[out.length - 1] !== "..") out.pop();
    else if (!rooted) out.push("..");
  }
  return (rooted ? "/" : "") + out.join("/") || ".";
}

/** `kubetypes.Timestamp.GetString`: RFC 3339 with up to nanoseconds, in local time. */
function rfc3339Nano(ms: number): string {
  const d = new Date(ms);
  const p = (n: number, w = 2) => String(n).padStart(w, "0");
  let s = `${p(d.getFullYear(), 4)}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${
    p(d.getMinutes())
  }:${p(d.getSeconds())}`;
  if (d.getMilliseconds() > 0) s += "." + p(d.getMilliseconds(), 3).replace(/0+$/, "");
  const east = -d.getTimezoneOffset();
  if (east === 0) return s + "Z";
  return `${s}${east < 0 ? "-" : "+"}${p(Math.floor(Math.abs(east) / 60))}:${
    p(Math.abs(east) % 60)
  }`;
}

/**
 * Log lines of one scan, each under a subject with a text. Upstream logs every problem at every
 * scan; here a line is written when its subject is new or its text changed, so a bad manifest
 * gives one error until it is fixed or changes.
 */
class Notes {
  readonly #notes = new Map<string, { text: string; log: () => void }>();

  add(subject: string, text: string, log: () => void): void {
    this.#notes.set(subject, { text, log });
  }

  /** Logs what `before` does not hold; returns the texts to compare the next scan against. */
  logNew(before: ReadonlyMap<string, string>): Map<string, string> {
    const now = new Map<string, string>();
    for (const [subject, { text, log }] of this.#notes) {
      if (before.get(subject) !== text) log();
      now.set(subject, text);
    }
    return now;
  }
}

/** Upstream's `sourceFile`: static pods from `staticPodPath`. Call `run(signal)` to start it. */
export class StaticPodFileSource {
  readonly #path: string;
  readonly #nodeName: string;
  readonly #periodMs: number;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #onUpdate: StaticPodFileSourceOptions["onUpdate"];
  readonly #debounceMs: number;
  readonly #watchFs: (path: string) => FsWatch;

  /** The pods of the current set, by manifest file. */
  #known = new Map<string, Known>();
  /** First-seen time by pod UID, for the UIDs in the current set. */
  #seen = new Map<string, string>();
  #emitted: string | undefined;
  /** What was last logged per subject, so a lasting problem is logged once. */
  #logged: ReadonlyMap<string, string> = new Map();
  #queue: Promise<unknown> = Promise.resolve();

  #listDue = false;
  #watchDue = false;
  #wake: (() => void) | undefined;
  #debounce: ReturnType<typeof setTimeout> | undefined;
  #watch: FsWatch | undefined;
  readonly #watchTasks = new Set<Promise<void>>();
  #watchFailed = false;
  #watchedIno: number | null | undefined;
  #pathIno: number | null | undefined;

  constructor(opts: StaticPodFileSourceOptions) {
    if (!(opts.fileCheckFrequencyMs > 0)) {
      throw new RangeError(
        `Cannot start the static pod file source: 'fileCheckFrequency' must be more than 0: ` +
          `current value is '${opts.fileCheckFrequencyMs}ms'`,
      );
    }
    // Upstream trims trailing separators for inotify.
    this.#path = opts.path.replace(/\/+$/, "") || opts.path;
    this.#nodeName = opts.nodeName;
    this.#periodMs = opts.fileCheckFrequencyMs;
    this.#clock = opts.clock;
    this.#logger = opts.logger;
    this.#onUpdate = opts.onUpdate;
    this.#debounceMs = opts.watchDebounceMs ?? 100;
    this.#watchFs = opts.watchFs ?? ((p) => Deno.watchFs(p, { recursive: false }));
  }

  /** Lists the path now, as the periodic check does; calls onUpdate if the set changed. */
  scan(signal?: AbortSignal): Promise<StaticPodScan> {
    return this.#exclusive(() => this.#sync("list", signal));
  }

  /** Lists at once, then every fileCheckFrequency and on inotify events, until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    this.#logger.v(1).info("Watching path", { path: this.#path });
    const ticker = this.#tick(signal);
    this.#listDue = true;
    try {
      while (!signal.aborted) {
        if (!this.#listDue && !this.#watchDue) await this.#sleepUntilWoken(signal);
        if (signal.aborted) break;
        const mode = this.#listDue ? "list" : "watch";
        this.#listDue = this.#watchDue = false;
        try {
          await this.#exclusive(() => this.#sync(mode, signal));
        } catch (err) {
          if (signal.aborted) break;
          this.#logger.error(err, "Unable to read config path", { path: this.#path });
        }
        this.#keepWatching(signal);
      }
    } finally {
      clearTimeout(this.#debounce);
      this.#debounce = undefined;
      this.#stopWatch();
      await Promise.allSettled([ticker, ...this.#watchTasks]);
    }
  }

  #exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.#queue.then(fn, fn);
    this.#queue = next.catch(() => {});
    return next;
  }

  async #tick(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        await this.#clock.sleep(this.#periodMs, signal);
      } catch {
        return;
      }
      this.#listDue = true;
      this.#wake?.();
    }
  }

  #sleepUntilWoken(signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        signal.removeEventListener("abort", done);
        this.#wake = undefined;
        resolve();
      };
      this.#wake = done;
      signal.addEventListener("abort", done, { once: true });
    });
  }

  // ---- inotify ----

  /** Starts the watch when there is none, or restarts it when the path was replaced. */
  #keepWatching(signal: AbortSignal): void {
    if (this.#watch && this.#watchedIno !== this.#pathIno) this.#stopWatch();
    if (this.#watch || signal.aborted || this.#pathIno === undefined) return;
    let watch: FsWatch;
    try {
      watch = this.#watchFs(this.#path);
    } catch (err) {
      if (!this.#watchFailed) {
        this.#watchFailed = true;
        this.#logger.error(err, "Unable to watch config path, relying on the periodic check", {
          path: this.#path,
          fileCheckFrequency: `${this.#periodMs}ms`,
        });
      }
      return;
    }
    if (this.#watchFailed) this.#logger.info("Watching config path again", { path: this.#path });
    this.#watchFailed = false;
    this.#watch = watch;
    this.#watchedIno = this.#pathIno;
    const task = (async () => {
      try {
        for await (const event of watch) {
          if (signal.aborted) break;
          if (this.#relevant(event)) this.#onFsEvent();
        }
      } catch (err) {
        if (!signal.aborted) this.#logger.error(err, "Unable to process watch event");
      } finally {
        if (this.#watch === watch) this.#stopWatch();
      }
    })();
    this.#watchTasks.add(task);
    task.finally(() => this.#watchTasks.delete(task));
  }

  /** Upstream's produceWatchEvent: creates, writes, chmods, removes and renames of non-dotfiles. */
  #relevant(event: Deno.FsEvent): boolean {
    if (event.kind === "access" || event.kind === "other") return false;
    return event.paths.length === 0 ||
      event.paths.some((p) => !p.slice(p.lastIndexOf("/") + 1).startsWith("."));
  }

  #onFsEvent(): void {
    if (this.#debounce !== undefined) return;
    this.#debounce = setTimeout(() => {
      this.#debounce = undefined;
      this.#watchDue = true;
      this.#wake?.();
    }, this.#debounceMs);
  }

  #stopWatch(): void {
    const watch = this.#watch;
    this.#watch = undefined;
    this.#watchedIno = undefined;
    try {
      watch?.close();
    } catch { /* already closed */ }
  }

  // ---- Scanning ----

  async #sync(mode: "list" | "watch", signal?: AbortSignal): Promise<StaticPodScan> {
    signal?.throwIfAborted();
    const listing = await this.#list(signal);
    signal?.throwIfAborted();
    const problems: StaticPodProblem[] = [];
    const notes = new Notes();
    // undefined keeps the current set, as upstream does when it returns an error.
    let next: Map<string, Known> | undefined = new Map();
    const take = (file: string, read: Read) => {
      switch (read.kind) {
        case "pod":
          next?.set(file, read.known);
          if (read.ignored.length > 0) {
            notes.add(
              `ignored:${file}`,
              read.ignored.join(","),
              () =>
                this.#logger.warning("Ignoring parts of a static pod manifest", {
                  path: file,
                  ignored: read.ignored,
                }),
            );
          }
          break;
        case "problem":
          problems.push(read.problem);
          break;
        case "dir":
          notes.add(`dir:${file}`, "", () =>
            this.#logger.error(
              null,
              "Provided manifest path is a directory, not recursing into manifest path",
              { path: file },
            ));
          break;
      }
    };

    switch (listing.kind) {
      case "missing":
        notes.add("missing", "", () =>
          this.#logger.error(
            new Error("path does not exist, ignoring"),
            "Unable to read config path",
            { path: this.#path },
          ));
        break;
      case "unreadable":
        problems.push(listing.problem);
        next = undefined;
        break;
      case "file":
        take(this.#path, listing.read);
        if (listing.read.kind === "problem") next = undefined;
        break;
      case "dir":
        for (const [file, read] of listing.reads) {
          take(file, read);
          // A watch event applies to one file upstream, and a file that no longer parses
          // leaves its pod in place until the next periodic list.
          const old = this.#known.get(file);
          if (read.kind === "problem" && mode === "watch" && old) next.set(file, old);
        }
        this.#dropDuplicates(next, problems);
        break;
    }
    const what = listing.kind === "dir"
      ? "Could not process manifest file"
      : "Unable to read config path";
    for (const p of problems) {
      notes.add(
        `problem:${p.file}`,
        p.message,
        () => this.#logger.error(p, what, { path: p.file }),
      );
    }
    this.#logged = notes.logNew(this.#logged);

    if (next) this.#known = next;
    const pods = this.#annotate();
    const state = [...this.#known.values()].map((k) => `${k.key}=${k.fingerprint}`).join("\n");
    if (next && state !== this.#emitted) {
      this.#emitted = state;
      this.#logger.v(4).info("Setting pods for source", { source: FILE_SOURCE, pods: pods.length });
      try {
        this.#onUpdate(pods.map((p) => structuredClone(p)), [...problems]);
      } catch (err) {
        this.#logger.error(err, "Static pod update was not taken", { source: FILE_SOURCE });
      }
    }
    return { pods, problems };
  }

  /** Two manifests with the same namespace/name: the later file wins, as in upstream's store. */
  #dropDuplicates(next: Map<string, Known>, problems: StaticPodProblem[]): void {
    const winner = new Map<string, string>();
    for (const [file, k] of next) winner.set(k.key, file);
    for (const [file, k] of next) {
      const kept = winner.get(k.key)!;
      if (kept === file) continue;
      next.delete(file);
      problems.push(
        new StaticPodManifestError(
          file,
          undefined,
          "metadata.name",
          k.pod.metadata?.name,
          `is taken by ${kept}, which defines the same pod '${k.key}' and replaces this one`,
        ),
      );
    }
  }

  /** The current set with the annotations PodConfig adds: the source and the first-seen time. */
  #annotate(): V1Pod[] {
    const seen = new Map<string, string>();
    const now = rfc3339Nano(this.#clock.now());
    const pods = [...this.#known.values()].map(({ pod }) => {
      const uid = pod.metadata!.uid!;
      let first = this.#seen.get(uid) ?? seen.get(uid);
      if (first === undefined) {
        first = now;
        this.#logger.v(4).info("Receiving a new pod", { pod: kobj(pod) });
      }
      seen.set(uid, first);
      const copy = structuredClone(pod);
      const annotations = copy.metadata!.annotations ??= {};
      annotations[CONFIG_SOURCE_ANNOTATION] = FILE_SOURCE;
      annotations[CONFIG_FIRST_SEEN_ANNOTATION] = first;
      return copy;
    });
    this.#seen = seen;
    return pods;
  }

  async #list(signal?: AbortSignal): Promise<Listing> {
    let info: Deno.FileInfo;
    try {
      info = await Deno.stat(this.#path);
    } catch (err) {
      this.#pathIno = undefined;
      if (err instanceof Deno.errors.NotFound) return { kind: "missing" };
      return { kind: "unreadable", problem: this.#unreadable(this.#path, err) };
    }
    this.#pathIno = info.ino;
    if (info.isFile) return { kind: "file", read: await this.#read(this.#path, info, signal) };
    if (!info.isDirectory) {
      return {
        kind: "unreadable",
        problem: fileProblem(this.#path, "is not a directory or a regular file"),
      };
    }
    const names: string[] = [];
    try {
      for await (const entry of Deno.readDir(this.#path)) {
        if (!entry.name.startsWith(".")) names.push(entry.name);
      }
    } catch (err) {
      return { kind: "unreadable", problem: this.#unreadable(this.#path, err) };
    }
    names.sort();
    const reads = new Map<string, Read>();
    for (const name of names) {
      signal?.throwIfAborted();
      const file = cleanPath(`${this.#path}/${name}`);
      let entry: Deno.FileInfo;
      try {
        entry = await Deno.stat(file);
      } catch (err) {
        reads.set(file, { kind: "problem", problem: this.#unreadable(file, err) });
        continue;
      }
      if (entry.isDirectory) reads.set(file, { kind: "dir" });
      else if (entry.isFile) reads.set(file, await this.#read(file, entry, signal));
      else {
        reads.set(file, {
          kind: "problem",
          problem: fileProblem(file, "is not a directory or a regular file"),
        });
      }
    }
    return { kind: "dir", reads };
  }

  #unreadable(file: string, err: unknown): StaticPodProblem {
    return fileProblem(file, `cannot be read: ${msg(err)}`);
  }

  /** upstream extractFromFile. */
  async #read(file: string, info: Deno.FileInfo, signal?: AbortSignal): Promise<Read> {
    this.#logger.v(3).info("Reading config file", { path: file });
    if (info.size > MAX_MANIFEST_BYTES) {
      return {
        kind: "problem",
        problem: fileProblem(
          file,
          `is larger than ${MAX_MANIFEST_BYTES} bytes, the most a manifest may hold`,
        ),
      };
    }
    let bytes: Uint8Array;
    try {
      bytes = await Deno.readFile(file, { signal });
    } catch (err) {
      signal?.throwIfAborted();
      if (err instanceof Deno.errors.NotFound) return { kind: "gone" };
      return { kind: "problem", problem: this.#unreadable(file, err) };
    }
    let text: string;
    try {
      text = decoder.decode(bytes);
    } catch {
      return { kind: "problem", problem: fileProblem(file, "is not valid UTF-8") };
    }
    try {
      const { pod, ignored } = staticPodFromManifest(text, file, this.#nodeName);
      const meta = pod.metadata!;
      this.#logger.v(5).info("Generated UID", { pod: kobj(pod), podUID: meta.uid, source: file });
      const known: Known = {
        file,
        key: `${meta.namespace}/${meta.name}`,
        pod,
        fingerprint: fnv128a(canonicalJSON(pod)),
      };
      return { kind: "pod", known, ignored };
    } catch (err) {
      if (err instanceof StaticPodManifestError) return { kind: "problem", problem: err };
      throw err;
    }
  }
}
