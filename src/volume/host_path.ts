/**
 * @module
 * The hostPath volume plugin: exposes a file or directory of the node to the pod's containers.
 * Nothing is mounted or created under the pod's directory; set-up only checks (and for the
 * `...OrCreate` types creates) the host path, whose name is then what containers bind-mount.
 * Talks only to the host filesystem. Corresponds to upstream `pkg/volume/hostpath/host_path.go`
 * (hostPathMounter.SetUp, checkType, typeMatchedOrError, makeDir, makeFile), the file type
 * probe of `pkg/volume/util/hostutil/hostutil_linux.go` (GetFileType) and
 * `pkg/volume/validation` (ValidatePathNoBacksteps). A PersistentVolume with a hostPath source
 * (a claim bound to it) is set up the same way, read-only when the claim says so; its recycler,
 * deleter and provisioner are controller-side and not modelled.
 */

import type { V1PersistentVolume, V1Volume } from "@kubernetes/client-node";
import { createLogger, type Logger } from "../klog/klog.ts";
import type {
  MountedVolume,
  VolumePlugin,
  VolumeSetUpContext,
  VolumeTearDownContext,
} from "./plugin.ts";
import {
  askLauncher,
  type HostCallHandlers,
  inPermissionSandbox,
} from "../privilege/launcher_calls.ts";

/** The plugin's upstream name. */
export const HOST_PATH_PLUGIN_NAME = "kubernetes.io/host-path";

/** `hostPath.type` values (upstream `v1.HostPathType`); "" checks nothing. */
export type HostPathType =
  | ""
  | "DirectoryOrCreate"
  | "Directory"
  | "FileOrCreate"
  | "File"
  | "Socket"
  | "CharDevice"
  | "BlockDevice";

/** What a host path is (upstream `hostutil.FileType`). */
export type FileType = "Directory" | "File" | "Socket" | "CharDevice" | "BlockDevice";

/** A hostPath that is invalid or is not what its type demands; the message is upstream's. */
export class HostPathError extends Error {
  override name = "HostPathError";
}

/**
 * The type check run by the launcher, for the sandboxed kubelet: the path may be anywhere on
 * the host, and the `OrCreate` types make it, as upstream's kubelet does for any pod the
 * apiserver admitted. A failed check rejects with upstream's message as a {@link HostPathError}.
 */
async function checkHostPathInLauncher(
  path: string,
  type: string,
  opts: { mkdirMode?: number } = {},
): Promise<void> {
  try {
    await askLauncher({ op: "hostPath", path, type, ...opts });
  } catch (e) {
    if ((e as Error).name !== "HostPathError") throw e;
    throw new HostPathError((e as Error).message);
  }
}

/** The launcher's handler of hostPath calls: {@link checkHostPathType} with the host's rights. */
export const serveHostPathCall: HostCallHandlers["hostPath"] = async (call) => {
  await checkHostPathType(call.path, call.type, { mkdirMode: call.mkdirMode });
  return {};
};

/** Options of {@link HostPathPlugin}. */
export interface HostPathPluginOptions {
  /** @default a text logger on stderr */
  readonly logger?: Logger;
  /** Mode of directories made for DirectoryOrCreate, before the umask. @default 0o755 */
  readonly mkdirMode?: number;
  /** Checks (and makes) the path by its type. @default {@link checkHostPathType} */
  readonly checkType?: typeof checkHostPathType;
}

/** Options of {@link checkHostPathType}. */
export interface CheckHostPathTypeOptions {
  /** @default 0o755 */
  readonly mkdirMode?: number;
}

/** The hostPath plugin (upstream `hostPathPlugin` with its mounter and unmounter). */
export class HostPathPlugin implements VolumePlugin {
  readonly name = HOST_PATH_PLUGIN_NAME;
  readonly requiresRemount = false;
  readonly #log: Logger;
  readonly #mkdirMode: number;
  readonly #checkType: typeof checkHostPathType;

  constructor(opts: HostPathPluginOptions = {}) {
    this.#log = opts.logger ?? createLogger();
    this.#mkdirMode = opts.mkdirMode ?? 0o755;
    // In the sandbox the launcher checks (and makes) the path: hostPath may name any host path.
    this.#checkType = opts.checkType ??
      ((path, type, o) =>
        inPermissionSandbox()
          ? checkHostPathInLauncher(path, type, o)
          : checkHostPathType(path, type, o));
  }

  /** Handles volumes with a `hostPath` source. */
  canSupport(volume: V1Volume): boolean {
    return volume.hostPath !== undefined && volume.hostPath !== null;
  }

  /** Handles PersistentVolumes with a `hostPath` source. */
  canSupportPersistentVolume(pv: V1PersistentVolume): boolean {
    return pv.spec?.hostPath !== undefined && pv.spec.hostPath !== null;
  }

  /**
   * Validates the path (absolute, no `..` element) and checks its type; the path itself is the
   * volume's host path. Creates nothing under `ctx.dir`.
   */
  async setUp(ctx: VolumeSetUpContext): Promise<MountedVolume> {
    ctx.signal?.throwIfAborted();
    const pv = ctx.spec?.persistentVolume;
    const source = pv ? pv.spec?.hostPath : ctx.volume.hostPath;
    if (source === undefined || source === null) {
      throw new HostPathError(
        `volume "${ctx.spec?.name ?? ctx.volume.name}" has no hostPath source`,
      );
    }
    const path = source.path;
    if (path.split("/").includes("..")) {
      throw new HostPathError(`invalid HostPath \`${path}\`: must not contain '..'`);
    }
    // Upstream leaves a relative path to the runtime, which resolves it against its own cwd.
    if (!path.startsWith("/")) {
      throw new HostPathError(`invalid HostPath \`${path}\`: must be an absolute path`);
    }
    const type = source.type ?? "";
    this.#log.v(4).info("Checking hostPath type", { path, type });
    try {
      await this.#checkType(path, type, { mkdirMode: this.#mkdirMode });
    } catch (err) {
      // The agent runs under Deno's permissions (-P=kubelet): a path outside them cannot be
      // checked or made. Say which permission to grant rather than Deno's bare message.
      if (!(err instanceof Deno.errors.NotCapable)) throw err;
      const write = type.endsWith("OrCreate");
      const grant = write ? `--allow-read=${path} --allow-write=${path}` : `--allow-read=${path}`;
      throw new HostPathError(
        `hostPath ${path} of type ${type} cannot be checked: the permission set does not allow ` +
          `${write ? "read and write" : "read"} access to it (${err.message}): add it to ` +
          `"permissions.kubelet.read"${write ? ' and "permissions.kubelet.write"' : ""} in ` +
          `deno.json and rebuild, or run with ${grant} in place of -P=kubelet`,
        { cause: err },
      );
    }
    return {
      hostPath: path,
      readOnly: pv !== undefined && ctx.spec?.readOnly === true,
      selinuxRelabel: false,
    };
  }

  /**
   * Leaves the host path alone, as upstream's TearDown does. Only removes `ctx.dir` when it is an
   * empty directory (something other than this plugin made it; upstream never creates it).
   */
  async tearDown(ctx: VolumeTearDownContext): Promise<void> {
    ctx.signal?.throwIfAborted();
    let info: Deno.FileInfo;
    try {
      info = await Deno.lstat(ctx.dir);
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return;
      throw err;
    }
    if (!info.isDirectory) {
      this.#log.warning("Leaving hostPath volume dir that is not a directory", { path: ctx.dir });
      return;
    }
    for await (const _ of Deno.readDir(ctx.dir)) {
      this.#log.warning("Leaving hostPath volume dir that is not empty", { path: ctx.dir });
      return;
    }
    await Deno.remove(ctx.dir);
  }
}

/**
 * Checks that `path` is of `type` (upstream `checkType`): DirectoryOrCreate makes missing
 * directories (`mkdir -p`), FileOrCreate an empty file of mode 0644 in an existing directory.
 * Throws {@link HostPathError} with upstream's message, such as
 * `hostPath type check failed: /x is not a directory, it's a File`.
 */
export async function checkHostPathType(
  path: string,
  type: string,
  opts: CheckHostPathTypeOptions = {},
): Promise<void> {
  switch (type) {
    case "":
      return;
    case "DirectoryOrCreate":
      if (!(await exists(path))) await makeDir(path, opts.mkdirMode ?? 0o755);
      return await typeMatchedOrError(path, "Directory", "directory");
    case "Directory":
      return await typeMatchedOrError(path, "Directory", "directory");
    case "FileOrCreate":
      if (!(await exists(path))) await makeFile(path);
      return await typeMatchedOrError(path, "File", "file");
    case "File":
      return await typeMatchedOrError(path, "File", "file");
    case "Socket":
      return await typeMatchedOrError(path, "Socket", "socket file");
    case "CharDevice":
      return await typeMatchedOrError(path, "CharDevice", "character device");
    case "BlockDevice":
      return await typeMatchedOrError(path, "BlockDevice", "block device");
    default:
      throw new HostPathError(`${type} is an invalid volume type`);
  }
}

/** What `path` is, following symlinks (upstream `hostutil.GetFileType`). */
export async function getFileType(path: string): Promise<FileType> {
  let info: Deno.FileInfo;
  try {
    info = await Deno.stat(path);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      throw new HostPathError(`path "${path}" does not exist`, { cause: err });
    }
    throw err;
  }
  if (info.isDirectory) return "Directory";
  if (info.isFile) return "File";
  if (info.isSocket) return "Socket";
  if (info.isCharDevice) return "CharDevice";
  if (info.isBlockDevice) return "BlockDevice";
  throw new HostPathError(
    "only recognise file, directory, socket, block device and character device",
  );
}

async function typeMatchedOrError(
  path: string,
  expected: FileType,
  description: string,
): Promise<void> {
  if (!(await exists(path))) throw new HostPathError(`hostPath ${path} doesn't exist`);
  let actual: FileType;
  try {
    actual = await getFileType(path);
  } catch (err) {
    throw new HostPathError(
      `hostPath type check failed, ${path} is not a ${description}, unable to determine its type: ${
        (err as Error).message
      }`,
      { cause: err },
    );
  }
  if (actual !== expected) {
    throw new HostPathError(
      `hostPath type check failed: ${path} is not a ${description}, it's a ${actual}`,
    );
  }
}

/** Upstream `PathExists`: stat (following symlinks) succeeds. */
async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch (err) {
    // Only a missing path is "no"; a refusal (Deno's permissions) is said as such by the caller.
    if (err instanceof Deno.errors.NotCapable) throw err;
    return false;
  }
}

async function makeDir(path: string, mode: number): Promise<void> {
  try {
    await Deno.mkdir(path, { recursive: true, mode });
  } catch (err) {
    if (err instanceof Deno.errors.AlreadyExists) return;
    throw new HostPathError(`mkdir ${path}: ${goErrorText(err)}`, { cause: err });
  }
}

// Upstream opens with O_CREATE and no O_EXCL or O_TRUNC: a file that appeared meanwhile is kept.
async function makeFile(path: string): Promise<void> {
  try {
    const f = await Deno.open(path, { create: true, write: true, mode: 0o644 });
    f.close();
  } catch (err) {
    if (err instanceof Deno.errors.AlreadyExists) return;
    throw new HostPathError(`open ${path}: ${goErrorText(err)}`, { cause: err });
  }
}

/** The errno text Go's os errors print, for the messages upstream users grep for. */
function goErrorText(err: unknown): string {
  if (err instanceof Deno.errors.NotFound) return "no such file or directory";
  if (err instanceof Deno.errors.NotADirectory) return "not a directory";
  if (err instanceof Deno.errors.PermissionDenied) return "permission denied";
  if (err instanceof Deno.errors.IsADirectory) return "is a directory";
  return err instanceof Error ? err.message : String(err);
}
