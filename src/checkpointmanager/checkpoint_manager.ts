/**
 * @module
 * Checkpoint files in one directory, written so that a crash or a power loss leaves the old file
 * or the new one, never half of either: the bytes go to a temporary file in the same directory
 * (a `.` name, mode 0600 as Go's os.CreateTemp makes it), are synced, and the file is renamed
 * over the old one. The directory is made (0755) on first use. Keys are upstream's: letters,
 * digits, `-`, `_`, `.`, starting and ending with a letter or digit, at most 250 characters.
 * Writes are serialized, as upstream's manager holds a mutex. Corresponds to upstream
 * `pkg/kubelet/checkpointmanager` (checkpoint_manager.go) and `pkg/kubelet/util/store`
 * (filestore.go).
 */

import { join } from "node:path";

const KEY = /^(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;

/** How a checkpoint is written and read back (upstream's Checkpoint interface). */
export interface CheckpointCodec<T> {
  /** The file's content for `value` (MarshalCheckpoint). */
  encode(value: T): string;
  /** The value in `text`, checksum verified; throws naming `file` (Unmarshal + Verify). */
  decode(text: string, file: string): T;
}

/** Where the checkpoints live. */
export interface CheckpointManagerOptions {
  /** The directory: the kubelet's root dir, or `<root>/device-plugins` for the device manager. */
  readonly directory: string;
}

/** Checkpoint files in one directory, each written atomically. */
export class CheckpointManager {
  readonly directory: string;
  #queue: Promise<unknown> = Promise.resolve();

  constructor(opts: CheckpointManagerOptions) {
    this.directory = opts.directory;
  }

  /** The file a key is kept in. */
  path(key: string): string {
    validateKey(key);
    return join(this.directory, key);
  }

  /** Writes `value` under `key` (upstream CreateCheckpoint). */
  createCheckpoint<T>(key: string, codec: CheckpointCodec<T>, value: T): Promise<void> {
    const path = this.path(key);
    const text = codec.encode(value);
    return this.#serialize(() => writeFileAtomic(path, text));
  }

  /** The value under `key`, or undefined when there is no such file (upstream GetCheckpoint). */
  getCheckpoint<T>(key: string, codec: CheckpointCodec<T>): Promise<T | undefined> {
    const path = this.path(key);
    return this.#serialize(async () => {
      let text: string;
      try {
        text = await Deno.readTextFile(path);
      } catch (e) {
        if (e instanceof Deno.errors.NotFound) return undefined;
        throw e;
      }
      return codec.decode(text, path);
    });
  }

  /** Removes `key`'s file; a missing one is no error (upstream RemoveCheckpoint). */
  removeCheckpoint(key: string): Promise<void> {
    const path = this.path(key);
    return this.#serialize(async () => {
      await Deno.remove(path).catch((e) => {
        if (!(e instanceof Deno.errors.NotFound)) throw e;
      });
    });
  }

  /** The keys present, without temporary files (upstream ListCheckpoints). */
  listCheckpoints(): Promise<string[]> {
    return this.#serialize(async () => {
      const keys: string[] = [];
      for await (const e of Deno.readDir(this.directory)) {
        if (!e.name.startsWith(".")) keys.push(e.name);
      }
      return keys.sort();
    });
  }

  #serialize<R>(op: () => Promise<R>): Promise<R> {
    const next = this.#queue.then(op);
    this.#queue = next.catch(() => {});
    return next;
  }
}

/** Throws unless `key` is a valid checkpoint key (upstream store.ValidateKey). */
export function validateKey(key: string): void {
  if (key.length > 250 || !KEY.test(key)) {
    throw new TypeError(
      `invalid checkpoint key ${JSON.stringify(key)}: want letters, digits, '-', '_', '.', ` +
        "starting and ending with a letter or digit, at most 250 characters",
    );
  }
}

/**
 * Writes `text` to `path` in one step: a synced temporary file beside it, renamed over it. A
 * failure removes the temporary file, leaves `path` as it was and throws an error naming `path`
 * (the cause is the system's error).
 */
export async function writeFileAtomic(path: string, text: string): Promise<void> {
  const dir = join(path, "..");
  const tmp = join(dir, `.${crypto.randomUUID().slice(0, 13)}`);
  try {
    await Deno.mkdir(dir, { recursive: true, mode: 0o755 });
    const file = await Deno.open(tmp, { write: true, createNew: true, mode: 0o600 });
    try {
      const bytes = new TextEncoder().encode(text);
      let written = 0;
      while (written < bytes.length) written += await file.write(bytes.subarray(written));
      await file.sync();
    } finally {
      file.close();
    }
    await Deno.rename(tmp, path);
  } catch (e) {
    await Deno.remove(tmp).catch(() => {});
    throw new Error(`could not write checkpoint ${path}: ${(e as Error).message}`, { cause: e });
  }
}
