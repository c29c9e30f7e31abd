/**
 * @module
 * AtomicWriter: projects a payload of files (configMap, secret, downwardAPI and projected volumes)
 * into a volume directory so that a reader never sees a half-written or mixed update.
 *
 * The files live in a hidden timestamped directory `..YYYY_MM_DD_HH_MM_SS.<random>`; the symlink
 * `..data` points at it, and each top-level user-visible name is a symlink `<name> -> ..data/<name>`.
 * An update writes a complete new timestamped directory, points `..data_tmp` at it and renames
 * `..data_tmp` over `..data` (rename(2) is atomic), then prunes names dropped from the payload and
 * the previous timestamped directory. Names starting with `..` are reserved for the writer.
 *
 * Talks only to the local filesystem (Deno file APIs); callers serialise writes to one directory.
 * Corresponds to upstream `pkg/volume/util/atomic_writer.go` (`AtomicWriter.Write`).
 */

import { Buffer } from "node:buffer";
import { posix } from "node:path";
import { type Clock, realClock } from "../util/clock.ts";
import { createLogger, type Logger } from "../klog/klog.ts";
import { symlink } from "../privilege/launcher_calls.ts";

/** One file of a payload: its bytes and permission bits (upstream `FileProjection`). */
export interface FileProjection {
  data: Uint8Array;
  mode: number;
  /** The file's owner uid, set before the swap (upstream FsUser). @default the writer's */
  fsUser?: number;
}

/**
 * Applies ownership and permissions to the volume once the new timestamped directory (named
 * by the argument) is written and before it becomes visible (upstream's setPerms).
 */
export type SetPermsFunc = (tsDirName: string) => Promise<void>;

/** A payload that cannot be projected, or a filesystem step of the projection that failed. */
export class AtomicWriterError extends Error {
  override name = "AtomicWriterError";
}

/** Options of {@link AtomicWriter}. */
export interface AtomicWriterOptions {
  /** The volume directory the payload is projected into; it must exist. */
  targetDir: string;
  /** Prefix of log lines, such as the volume and pod being set up. */
  logContext: string;
  /** @default a text logger on stderr */
  logger?: Logger;
  /** Names the timestamped directories. @default the wall clock */
  clock?: Clock;
}

const MAX_FILE_NAME_LENGTH = 255;
const MAX_PATH_LENGTH = 4096;
const DATA_DIR_NAME = "..data";
const NEW_DATA_DIR_NAME = "..data_tmp";

/**
 * Checks one payload path: undefined when valid, else upstream's message. A path must not be
 * empty or absolute, contain a `..` element, start with `..`, have an element over 255 bytes, or
 * be over 4096 bytes.
 */
export function validatePath(path: string): string | undefined {
  if (path === "") return `invalid path: must not be empty: ""`;
  if (path.startsWith("/")) return `invalid path: must be relative path: ${path}`;
  // Go's len() counts bytes, not UTF-16 units.
  if (byteLength(path) > MAX_PATH_LENGTH) {
    return `invalid path: must be less than or equal to ${MAX_PATH_LENGTH} characters`;
  }
  const items = path.split("/");
  for (const item of items) {
    if (item === "..") return `invalid path: must not contain '..': ${path}`;
    if (byteLength(item) > MAX_FILE_NAME_LENGTH) {
      return `invalid path: filenames must be less than or equal to ${MAX_FILE_NAME_LENGTH} characters`;
    }
  }
  const first = items[0] ?? "";
  if (first.startsWith("..") && first.length > 2) {
    return `invalid path: must not start with '..': ${path}`;
  }
  return undefined;
}

/** Writes payloads atomically into one volume directory; not safe for concurrent writes. */
export class AtomicWriter {
  readonly #targetDir: string;
  readonly #logContext: string;
  readonly #log: Logger;
  readonly #clock: Clock;

  /** Throws {@link AtomicWriterError} when `targetDir` does not exist (upstream `NewAtomicWriter`). */
  constructor(opts: AtomicWriterOptions) {
    try {
      Deno.statSync(opts.targetDir);
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) {
        throw new AtomicWriterError(
          `Cannot create atomic writer: 'targetDir' must be an existing directory: current value is '${opts.targetDir}'`,
          { cause: err },
        );
      }
      // Other stat errors are not fatal upstream either; Write reports them.
    }
    this.#targetDir = opts.targetDir;
    this.#logContext = opts.logContext;
    this.#log = opts.logger ?? createLogger();
    this.#clock = opts.clock ?? realClock;
  }

  /**
   * Projects `payload` (relative path → file) into the target directory, replacing whatever an
   * earlier write put there. Does nothing on disk when the content is unchanged and no path was
   * dropped, except to recreate missing user-visible links. Throws {@link AtomicWriterError}
   * without touching the directory when a path is invalid.
   */
  async write(
    payload: ReadonlyMap<string, FileProjection>,
    signal?: AbortSignal,
    setPerms?: SetPermsFunc,
  ): Promise<void> {
    signal?.throwIfAborted();
    const ctx = this.#logContext;

    // (1) Validate every path before touching the disk.
    const clean = new Map<string, FileProjection>();
    for (const [path, file] of payload) {
      const invalid = validatePath(path);
      if (invalid !== undefined) {
        const err = new AtomicWriterError(invalid);
        this.#log.error(err, `${ctx}: invalid payload`);
        throw err;
      }
      clean.set(cleanPath(path), file);
    }

    // (2) The current timestamped directory, if any.
    const dataDirPath = posix.join(this.#targetDir, DATA_DIR_NAME);
    let oldTsDir = "";
    try {
      oldTsDir = await Deno.readLink(dataDirPath);
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) {
        throw this.#fail(err, "error reading link for data directory");
      }
    }
    const oldTsPath = posix.join(this.#targetDir, oldTsDir);

    let pathsToRemove = new Set<string>();
    let shouldWrite = true;
    if (oldTsDir !== "") {
      // (3) Paths of the old version that the new payload no longer has.
      try {
        pathsToRemove = await pathsToRemoveFrom(clean, oldTsPath);
      } catch (err) {
        throw this.#fail(err, "error determining user-visible files to remove");
      }
      // (4) Skip the write when nothing changed.
      let changed: boolean;
      try {
        changed = await payloadDiffers(clean, oldTsPath);
      } catch (err) {
        throw this.#fail(err, "error determining whether payload should be written to disk");
      }
      if (!changed && pathsToRemove.size === 0) {
        this.#log.v(4).info(`${ctx}: write not required for data directory ${oldTsDir}`);
        // The links may still be missing (upstream issue 121472); keep the data directory.
        shouldWrite = false;
        oldTsDir = "";
      } else {
        this.#log.v(4).info(`${ctx}: write required for target directory ${this.#targetDir}`);
      }
    }

    if (shouldWrite) {
      signal?.throwIfAborted();
      // (5) A fresh timestamped directory.
      const tsDir = await this.#newTimestampDir();
      const tsDirName = posix.basename(tsDir);

      // (6) The whole payload, written before anyone can see it.
      try {
        await this.#writePayloadToDir(clean, tsDir, signal);
      } catch (err) {
        await removeQuietly(tsDir);
        if (signal?.aborted) throw signal.reason;
        throw this.#fail(err, `error writing payload to ts data directory ${tsDir}`);
      }
      this.#log.v(4).info(`${ctx}: performed write of new data to ts data directory: ${tsDir}`);
      if (signal?.aborted) {
        await removeQuietly(tsDir);
        throw signal.reason;
      }

      // Ownership first, so no reader sees the new files with the wrong owner or mode.
      if (setPerms !== undefined) {
        try {
          await setPerms(tsDirName);
        } catch (err) {
          await removeQuietly(tsDir);
          // Upstream returns the ownership error itself: it is the FailedMount text.
          this.#log.error(err, `${this.#logContext}: error applying ownership settings`);
          throw err;
        }
      }

      // (7) ..data_tmp -> new directory, (8) renamed over ..data in one step.
      const newDataDirPath = posix.join(this.#targetDir, NEW_DATA_DIR_NAME);
      try {
        await symlink(tsDirName, newDataDirPath);
      } catch (err) {
        await removeQuietly(tsDir);
        throw this.#fail(err, "error creating symbolic link for atomic update");
      }
      try {
        await Deno.rename(newDataDirPath, dataDirPath);
      } catch (err) {
        await removeQuietly(newDataDirPath);
        await removeQuietly(tsDir);
        throw this.#fail(err, `error renaming symbolic link for data directory ${newDataDirPath}`);
      }
    }

    // (9) Top-level user-visible links into ..data.
    try {
      await this.#createUserVisibleFiles(clean);
    } catch (err) {
      throw this.#fail(err, `error creating visible symlinks in ${this.#targetDir}`);
    }

    // (10) Top-level names dropped from the payload.
    const pruneErr = await this.#removeUserVisiblePaths(pathsToRemove);
    if (pruneErr !== undefined) throw this.#fail(pruneErr, "error removing old visible symlinks");

    // (11) The previous timestamped directory.
    if (oldTsDir !== "") {
      try {
        await Deno.remove(oldTsPath, { recursive: true });
      } catch (err) {
        if (!(err instanceof Deno.errors.NotFound)) {
          throw this.#fail(err, `error removing old data directory ${oldTsDir}`);
        }
      }
    }
  }

  /** Logs a failed step as upstream does and returns the error to throw. */
  #fail(err: unknown, what: string): AtomicWriterError {
    this.#log.error(err, `${this.#logContext}: ${what}`);
    const detail = err instanceof Error ? err.message : String(err);
    return new AtomicWriterError(`${what}: ${detail}`, { cause: err });
  }

  /** Creates `..<UTC time>.<random>` with mode 0755 whatever the umask (Go `os.MkdirTemp`). */
  async #newTimestampDir(): Promise<string> {
    const prefix = ".." + formatTimestamp(this.#clock.now()) + ".";
    for (let attempt = 0; attempt < 10000; attempt++) {
      const suffix = crypto.getRandomValues(new Uint32Array(1))[0] ?? attempt;
      const dir = posix.join(this.#targetDir, prefix + String(suffix));
      try {
        await Deno.mkdir(dir, { mode: 0o700 });
      } catch (err) {
        if (err instanceof Deno.errors.AlreadyExists) continue;
        throw this.#fail(err, "unable to create new temp directory");
      }
      try {
        // Group and other must be able to traverse the tree.
        await Deno.chmod(dir, 0o755);
      } catch (err) {
        throw this.#fail(err, "unable to set mode on new temp directory");
      }
      return dir;
    }
    throw new AtomicWriterError(
      `unable to create new temp directory: no free name for pattern ${prefix}* in ${this.#targetDir}`,
    );
  }

  async #writePayloadToDir(
    payload: ReadonlyMap<string, FileProjection>,
    dir: string,
    signal?: AbortSignal,
  ): Promise<void> {
    for (const [path, file] of payload) {
      signal?.throwIfAborted();
      const fullPath = posix.join(dir, path);
      await Deno.mkdir(posix.dirname(fullPath), { recursive: true, mode: 0o777 });
      await Deno.writeFile(fullPath, file.data, { mode: file.mode });
      try {
        // writeFile's mode is filtered by the umask; the payload's mode must win.
        await Deno.chmod(fullPath, file.mode);
      } catch (err) {
        // Upstream logs and carries on here.
        this.#log.error(
          err,
          `${this.#logContext}: unable to write file ${fullPath} with mode ${
            formatMode(file.mode)
          }`,
        );
      }
      if (file.fsUser !== undefined) {
        try {
          await Deno.chown(fullPath, file.fsUser, null);
        } catch (err) {
          this.#log.error(
            err,
            `${this.#logContext}: unable to change file ${fullPath} with owner ${file.fsUser}`,
          );
        }
      }
    }
  }

  async #createUserVisibleFiles(payload: ReadonlyMap<string, FileProjection>): Promise<void> {
    const names = new Set<string>();
    for (const path of payload.keys()) names.add(path.split("/")[0] ?? path);
    for (const name of names) {
      const visible = posix.join(this.#targetDir, name);
      try {
        await Deno.readLink(visible);
      } catch (err) {
        // Only a missing link is created; anything else at that name is left alone, as upstream.
        if (!(err instanceof Deno.errors.NotFound)) continue;
        await symlink(posix.join(DATA_DIR_NAME, name), visible);
      }
    }
  }

  /** Removes the top-level names in `paths`; returns the last error, after trying them all. */
  async #removeUserVisiblePaths(paths: ReadonlySet<string>): Promise<unknown> {
    let lastErr: unknown = undefined;
    for (const path of paths) {
      // Nested paths disappeared with the old data directory.
      if (path.includes("/")) continue;
      try {
        await Deno.remove(posix.join(this.#targetDir, path));
      } catch (err) {
        this.#log.error(err, `${this.#logContext}: error pruning old user-visible path ${path}`);
        lastErr = err;
      }
    }
    return lastErr;
  }
}

/** Go's `filepath.Clean` for a relative, validated path. */
function cleanPath(path: string): string {
  let out = posix.normalize(path);
  while (out.length > 1 && out.endsWith("/")) out = out.slice(0, -1);
  return out;
}

/** Whether any file of the payload is missing from, or differs in, the old data directory. */
async function payloadDiffers(
  payload: ReadonlyMap<string, FileProjection>,
  oldTsPath: string,
): Promise<boolean> {
  for (const [path, file] of payload) {
    const onDisk = posix.join(oldTsPath, path);
    try {
      await Deno.lstat(onDisk);
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return true;
      throw err;
    }
    if (!bytesEqual(await Deno.readFile(onDisk), file.data)) return true;
  }
  return false;
}

/** Every path under the old data directory that is neither a payload path nor one's parent. */
async function pathsToRemoveFrom(
  payload: ReadonlyMap<string, FileProjection>,
  oldTsPath: string,
): Promise<Set<string>> {
  const current = new Set<string>();
  const walk = async (rel: string): Promise<void> => {
    for await (const entry of Deno.readDir(posix.join(oldTsPath, rel))) {
      const child = rel === "" ? entry.name : `${rel}/${entry.name}`;
      current.add(child);
      if (entry.isDirectory) await walk(child);
    }
  };
  try {
    await walk("");
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return new Set();
    throw err;
  }
  const kept = new Set<string>();
  for (const path of payload.keys()) {
    // Parents are kept too, so a directory that still holds files is never pruned.
    for (let p = path; p !== "" && p !== "."; p = posix.dirname(p)) kept.add(p);
  }
  return new Set([...current].filter((p) => !kept.has(p)));
}

function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && Buffer.compare(a, b) === 0;
}

function byteLength(s: string): number {
  return new TextEncoder().encode(s).length;
}

/** Go layout `2006_01_02_15_04_05` in UTC. */
function formatTimestamp(ms: number): string {
  const d = new Date(ms);
  const p = (n: number, w = 2) => String(n).padStart(w, "0");
  return `${p(d.getUTCFullYear(), 4)}_${p(d.getUTCMonth() + 1)}_${p(d.getUTCDate())}_` +
    `${p(d.getUTCHours())}_${p(d.getUTCMinutes())}_${p(d.getUTCSeconds())}`;
}

/** Go's `os.FileMode` String for permission bits, such as `-rw-r--r--`. */
function formatMode(mode: number): string {
  const rwx = "rwxrwxrwx";
  let out = "-";
  for (let i = 0; i < 9; i++) out += mode & (1 << (8 - i)) ? rwx[i] : "-";
  return out;
}

async function removeQuietly(path: string): Promise<void> {
  try {
    await Deno.remove(path, { recursive: true });
  } catch {
    // Best-effort cleanup of a failed write; the error that matters is already being reported.
  }
}
