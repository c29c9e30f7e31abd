/**
 * @module
 * A path resolved inside a directory as Go's `os.Root` resolves it (os.OpenInRoot, Root.Stat):
 * component by component, following symbolic links, and refusing with "path escapes from
 * parent" a name that starts with `/`, a `..` that climbs above the directory, or a link whose
 * target is absolute or climbs above it. Errors carry Go's text (`statat x.log: no such file or
 * directory`), which the node log query shows. Private to server/ (journal.ts, journal_copy.ts).
 *
 * Corresponds to Go 1.26's `os/root.go` and `root_openat.go` (doInRoot, splitPathInRoot).
 */

import { join } from "node:path";

/** Go's limit on the links one resolution follows (rootMaxSymlinks). */
const MAX_SYMLINKS = 8;

/** A refused or failed resolution; `message` is Go's `<op> <name>: <reason>`. */
export class RootPathError extends Error {
  override name = "RootPathError";
  constructor(
    readonly op: "statat" | "openat",
    readonly path: string,
    /** Go's text of the cause ("no such file or directory", "path escapes from parent"). */
    readonly reason: string,
    /** The name is missing (Go's errors.Is(err, fs.ErrNotExist)). */
    readonly notExist: boolean,
  ) {
    super(`${op} ${path}: ${reason}`);
  }
}

const ESCAPES = "path escapes from parent";

function reasonOf(e: unknown): { reason: string; notExist: boolean } {
  if (e instanceof Deno.errors.NotFound) {
    return { reason: "no such file or directory", notExist: true };
  }
  if (e instanceof Deno.errors.NotADirectory) {
    return { reason: "not a directory", notExist: false };
  }
  if (e instanceof Deno.errors.PermissionDenied) {
    return { reason: "permission denied", notExist: false };
  }
  if (e instanceof Deno.errors.FilesystemLoop) {
    return { reason: "too many levels of symbolic links", notExist: false };
  }
  return { reason: e instanceof Error ? e.message : String(e), notExist: false };
}

function split(name: string): string[] {
  return name.split("/").filter((p) => p !== "");
}

/**
 * The real path of `name` inside `root` and its stat (links followed), as `os.Root` resolves
 * it; a {@link RootPathError} with `op` in its message when it cannot be.
 */
export async function resolveInRoot(
  root: string,
  name: string,
  op: "statat" | "openat",
): Promise<{ path: string; info: Deno.FileInfo }> {
  const fail = (reason: string, notExist = false) => new RootPathError(op, name, reason, notExist);
  if (name === "") throw fail("empty path");
  if (name.startsWith("/")) throw fail(ESCAPES);
  const endsInSlash = name.endsWith("/");
  const todo = split(name);
  const done: string[] = [];
  let links = 0;
  while (todo.length > 0) {
    const part = todo.shift()!;
    if (part === ".") continue;
    if (part === "..") {
      if (done.length === 0) throw fail(ESCAPES);
      done.pop();
      continue;
    }
    const here = join(root, ...done, part);
    let info: Deno.FileInfo;
    try {
      info = await Deno.lstat(here);
    } catch (e) {
      const r = reasonOf(e);
      throw fail(r.reason, r.notExist);
    }
    if (info.isSymlink) {
      if (++links > MAX_SYMLINKS) throw fail("too many levels of symbolic links");
      let target: string;
      try {
        target = await Deno.readLink(here);
      } catch (e) {
        const r = reasonOf(e);
        throw fail(r.reason, r.notExist);
      }
      if (target.startsWith("/")) throw fail(ESCAPES);
      todo.unshift(...split(target));
      continue;
    }
    const last = todo.every((p) => p === ".");
    if (!info.isDirectory && (!last || endsInSlash)) throw fail("not a directory");
    done.push(part);
  }
  const path = join(root, ...done);
  try {
    return { path, info: await Deno.stat(path) };
  } catch (e) {
    const r = reasonOf(e);
    throw fail(r.reason, r.notExist);
  }
}
