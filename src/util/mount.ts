/**
 * @module
 * Mounter: mounts and unmounts filesystems with the host's `mount` and `umount` commands and
 * lists the mount table from `/proc/self/mountinfo`. Volume plugins use it for tmpfs volumes
 * (emptyDir with medium Memory, secrets, projected tokens). Commands run through an injectable
 * {@link CommandRunner} so plugin tests can record them instead of mounting.
 * Corresponds to upstream `k8s.io/mount-utils` (`Mounter.Mount`, `Unmount`, `List`,
 * `ParseMountInfo`).
 */

import { hostPath } from "../privilege/host_root.ts";

/** Runs one command; resolves with its output or rejects with {@link MountError}. */
export type CommandRunner = (
  cmd: string,
  args: readonly string[],
  signal?: AbortSignal,
) => Promise<string>;

/** A mount or unmount command failed; the message names the command and its output. */
export class MountError extends Error {
  override name = "MountError";
}

/** One line of `/proc/self/mountinfo`. */
export interface MountInfo {
  mountId: number;
  parentId: number;
  /** Path relative to the filesystem root that is mounted. */
  root: string;
  mountPoint: string;
  options: string[];
  fsType: string;
  source: string;
  superOptions: string[];
}

/** Runs a command with Deno.Command; a non-zero exit is a {@link MountError} with its output. */
export const runCommand: CommandRunner = async (cmd, args, signal) => {
  let out: Deno.CommandOutput;
  try {
    out = await new Deno.Command(cmd, { args: [...args], stdin: "null", signal }).output();
  } catch (err) {
    throw new MountError(`${cmd} ${args.join(" ")}: ${(err as Error).message}`, { cause: err });
  }
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  if (!out.success) {
    throw new MountError(
      `mount failed: exit status ${out.code}\nMounting command: ${cmd}\nMounting arguments: ${
        args.join(" ")
      }\nOutput: ${text.trim()}`,
    );
  }
  return text;
};

/** Options of {@link Mounter}. */
export interface MounterOptions {
  /** @default {@link runCommand} */
  run?: CommandRunner;
  /** Reads the mount table. @default reads /proc/self/mountinfo */
  readMountInfo?: () => Promise<string>;
}

/** Mounts, unmounts and lists mounts (upstream `mount.Interface`). */
export class Mounter {
  readonly #run: CommandRunner;
  readonly #readMountInfo: () => Promise<string>;

  constructor(opts: MounterOptions = {}) {
    this.#run = opts.run ?? runCommand;
    this.#readMountInfo = opts.readMountInfo ??
      (() => Deno.readTextFile(hostPath("/proc/self/mountinfo")));
  }

  /** `mount -t <fsType> -o <options> <source> <target>`; options may be empty. */
  async mount(
    source: string,
    target: string,
    fsType: string,
    options: readonly string[],
    signal?: AbortSignal,
  ): Promise<void> {
    const args: string[] = [];
    if (fsType !== "") args.push("-t", fsType);
    if (options.length > 0) args.push("-o", options.join(","));
    args.push(source, target);
    await this.#run("mount", args, signal);
  }

  /** `umount <target>`. */
  async unmount(target: string, signal?: AbortSignal): Promise<void> {
    await this.#run("umount", [target], signal);
  }

  /** Every mount of this process's mount namespace. */
  async list(): Promise<MountInfo[]> {
    return parseMountInfo(await this.#readMountInfo());
  }

  /** The topmost mount whose mount point is exactly `path`, if any. */
  async mountAt(path: string): Promise<MountInfo | undefined> {
    const all = await this.list();
    let found: MountInfo | undefined;
    for (const m of all) if (m.mountPoint === path) found = m;
    return found;
  }
}

/** Undoes the octal escapes (`\040` for a space) the kernel writes into mountinfo fields. */
function unescapeOctal(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, oct: string) => String.fromCharCode(parseInt(oct, 8)));
}

/**
 * Parses `/proc/<pid>/mountinfo` (proc(5)): `id parent major:minor root mountpoint options
 * [optional fields...] - fstype source superoptions`. Malformed lines are skipped.
 */
export function parseMountInfo(text: string): MountInfo[] {
  const out: MountInfo[] = [];
  for (const line of text.split("\n")) {
    if (line.trim() === "") continue;
    const fields = line.split(" ");
    const sep = fields.indexOf("-", 6);
    if (fields.length < 10 || sep < 0 || fields.length < sep + 3) continue;
    out.push({
      mountId: Number(fields[0]),
      parentId: Number(fields[1]),
      root: unescapeOctal(fields[3] ?? ""),
      mountPoint: unescapeOctal(fields[4] ?? ""),
      options: (fields[5] ?? "").split(","),
      fsType: fields[sep + 1] ?? "",
      source: unescapeOctal(fields[sep + 2] ?? ""),
      superOptions: (fields[sep + 3] ?? "").split(","),
    });
  }
  return out;
}
