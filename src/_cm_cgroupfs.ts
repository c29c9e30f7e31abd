/**
 * @module
 * The file operations the cgroup manager makes on cgroupfs, behind one small interface so that
 * tests run them on a temporary tree that behaves like the kernel's (`_cm_fixtures.ts`). Writes
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

/**
 * cgroupfs through Deno's file APIs. Directory operations and reads are synchronous: the kernel
 * answers them from memory, and Deno's async calls cost a thread-pool hop each (see
 * `_cgroup_read.ts`; a pod's cgroup is a few dozen of them in every hierarchy). Writes and
 * removals stay asynchronous: lowering a memory limit makes the kernel reclaim before it
 * answers, and an rmdir may wait for the cgroup's last task.
 */
export const realCgroupFs: CgroupFs = {
  mkdir(path) {
    try {
      Deno.mkdirSync(path, { mode: 0o755 });
      return Promise.resolve(true);
    } catch (e) {
      if (e instanceof Deno.errors.AlreadyExists) return Promise.resolve(false);
      return Promise.reject(e);
    }
  },
  rmdir: (path) => Deno.remove(path),
  readFile(path) {
    try {
      return Promise.resolve(Deno.readTextFileSync(path));
    } catch (e) {
      return Promise.reject(e);
    }
  },
  writeFile: (path, value) => Deno.writeTextFile(path, value, { create: false }),
  readDirs(path) {
    try {
      const out: string[] = [];
      for (const e of Deno.readDirSync(path)) if (e.isDirectory) out.push(e.name);
      return Promise.resolve(out);
    } catch (e) {
      return Promise.reject(e);
    }
  },
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
