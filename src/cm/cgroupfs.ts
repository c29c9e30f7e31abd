/**
 * @module
 * The file operations the cgroup manager makes on cgroupfs, behind one small interface so that
 * tests run them on a temporary tree that behaves like the kernel's (`testing/cm_fixtures.ts`). Writes
 * never create a file, as opencontainers/cgroups' `WriteFile` (O_WRONLY|O_TRUNC) never does.
 * Private to cgroup_manager.ts and the managers built on it.
 */

/** What the cgroup manager does to cgroupfs. Errors keep their errno in `code` ("EBUSY"). */
export interface CgroupFs {
  /** mkdir; resolves false when the directory already existed. */
  mkdir(path: string): Promise<boolean>;
  /** rmdir of one (empty) cgroup directory. */
  rmdir(path: string): Promise<void>;
  readFile(path: string): Promise<string>;
  /** Writes an existing control file; never creates one. */
  writeFile(path: string, value: string): Promise<void>;
  /** The names of the subdirectories (child cgroups) of `path`. */
  readDirs(path: string): Promise<string[]>;
  exists(path: string): Promise<boolean>;
}

/** A synchronous call's result as a settled promise, so a throw becomes a rejection. */
function settled<T>(fn: () => T): Promise<T> {
  try {
    return Promise.resolve(fn());
  } catch (e) {
    return Promise.reject(e);
  }
}

/**
 * cgroupfs through Deno's file APIs. Reads, listings and stats are synchronous: the kernel
 * answers them from memory without the cgroup_mutex, in microseconds, while an asynchronous
 * call costs a hop to a blocking thread and back (≈0.1-0.2 ms each on a small VM, and a pod's
 * cgroup takes dozens). mkdir, rmdir and writes stay asynchronous: they take the cgroup_mutex,
 * which runc holds while it creates containers, and a lower memory limit reclaims first.
 */
export const realCgroupFs: CgroupFs = {
  async mkdir(path) {
    try {
      await Deno.mkdir(path, { mode: 0o755 });
      return true;
    } catch (e) {
      if (e instanceof Deno.errors.AlreadyExists) return false;
      throw e;
    }
  },
  rmdir: (path) => Deno.remove(path),
  readFile: (path) => settled(() => Deno.readTextFileSync(path)),
  writeFile: (path, value) => Deno.writeTextFile(path, value, { create: false }),
  readDirs: (path) =>
    settled(() => [...Deno.readDirSync(path)].filter((e) => e.isDirectory).map((e) => e.name)),
  exists(path) {
    try {
      Deno.statSync(path);
      return Promise.resolve(true);
    } catch {
      return Promise.resolve(false);
    }
  },
};

/** The errno name of a file error ("ENOENT", "EBUSY", "EINVAL"), when it has one. */
export function errnoOf(e: unknown): string | undefined {
  if (e instanceof Deno.errors.NotFound) return "ENOENT";
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

/** A cgroup file's content without its trailing newline. */
export async function readTrimmed(fs: CgroupFs, path: string): Promise<string> {
  return (await fs.readFile(path)).trim();
}
