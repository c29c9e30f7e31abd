/**
 * @module
 * What the projecting volume plugins (configMap, secret, downwardAPI, projected) share: the
 * volume directory's setup and teardown, the optional tmpfs under it, the atomic write of the
 * payload, fsGroup ownership, and the key-to-path mapping of configMap and secret sources.
 * Talks to the filesystem, to `atomic_writer.ts` and, for tmpfs, to `util/mount.ts`.
 * Corresponds to upstream's wrapped emptyDir of those plugins (`pkg/volume/emptydir`
 * setupDir, setupTmpfs, TearDownAt), the shared tail of their `SetUpAt`
 * (`pkg/volume/configmap`, `secret`), `pkg/volume/volume_linux.go` (SetVolumeOwnership) and
 * `MakePayload` of `pkg/volume/configmap` and `pkg/volume/secret`.
 */

import type { V1KeyToPath } from "@kubernetes/client-node";
import { AtomicWriter, type FileProjection, validatePath } from "./atomic_writer.ts";
import type { Clock } from "../util/clock.ts";
import { createLogger, type Logger } from "../klog/klog.ts";
import type { Mounter } from "../util/mount.ts";
import { emptyDirMemorySize, setVolumeOwnership as changeOwnership } from "./empty_dir.ts";
import {
  type VolumeSetUpContext,
  VolumeSourceError,
  type VolumeTearDownContext,
} from "./plugin.ts";

/** The defaultMode of configMap, secret, downwardAPI and projected sources (upstream 0644). */
export const DEFAULT_VOLUME_MODE = 0o644;

/** Upstream emptyDir's `defaultPerm`, which the wrapped volume directory gets. */
const VOLUME_DIR_MODE = 0o777;

/** More stacked mounts than this on one volume dir means something keeps mounting there. */
const MAX_UNMOUNTS = 8;

/**
 * `mkdir -p` of a volume directory, then a chmod when the umask trimmed its mode (upstream
 * emptyDir setupDir). `mode` defaults to 0777, upstream emptyDir's `defaultPerm`.
 */
export async function setUpVolumeDir(dir: string, mode: number = VOLUME_DIR_MODE): Promise<void> {
  await Deno.mkdir(dir, { recursive: true, mode });
  const info = await Deno.lstat(dir);
  if (((info.mode ?? 0) & 0o777) !== (mode & 0o777)) await Deno.chmod(dir, mode);
}

/** What {@link projectVolumePayload} writes, and where. */
export interface ProjectVolumeOptions {
  readonly ctx: VolumeSetUpContext;
  readonly payload: ReadonlyMap<string, FileProjection>;
  readonly logger: Logger;
  /** Names the atomic writer's timestamped directories. @default the wall clock */
  readonly clock?: Clock;
  /** Mounts a tmpfs on the directory first (secret volumes). @default no tmpfs */
  readonly tmpfs?: Mounter;
  /** The node's allocatable memory in bytes, an upper bound of the tmpfs. @default unknown */
  readonly nodeAllocatableMemory?: number;
}

/**
 * Sets the volume directory up (on a tmpfs when `tmpfs` is given), writes the payload
 * atomically and applies the pod's fsGroup. When the write fails on a directory this call
 * created or mounted, the directory is torn down again before the error is rethrown.
 */
export async function projectVolumePayload(opts: ProjectVolumeOptions): Promise<void> {
  const { ctx, payload, logger } = opts;
  ctx.signal?.throwIfAborted();
  const existed = await pathExists(ctx.dir);
  await setUpVolumeDir(ctx.dir);
  let mounted = false;
  if (opts.tmpfs !== undefined) {
    const real = await Deno.realPath(ctx.dir);
    const current = await opts.tmpfs.mountAt(real);
    if (current?.fsType !== "tmpfs") {
      // Sized like upstream's wrapped medium Memory emptyDir: the pod's memory limit, else
      // the node's allocatable memory.
      const size = emptyDirMemorySize(
        ctx.pod,
        { name: ctx.volume.name, emptyDir: { medium: "Memory" } },
        opts.nodeAllocatableMemory,
      );
      logger.v(3).info(
        `pod ${ctx.pod.metadata?.uid}: mounting tmpfs for volume ${ctx.volume.name}`,
      );
      const options = size === undefined ? [] : [`size=${size}`];
      await opts.tmpfs.mount("tmpfs", real, "tmpfs", options, ctx.signal);
      mounted = true;
    }
  }
  try {
    const writer = new AtomicWriter({
      targetDir: ctx.dir,
      logContext:
        `pod ${ctx.pod.metadata?.namespace}/${ctx.pod.metadata?.name} volume ${ctx.volume.name}`,
      logger,
      clock: opts.clock,
    });
    // As upstream, the whole volume dir's ownership (the first write also makes the links
    // outside the timestamped dir), before the new data becomes visible.
    const fsGroup = ctx.pod.spec?.securityContext?.fsGroup ?? undefined;
    await writer.write(
      payload,
      ctx.signal,
      fsGroup === undefined ? undefined : () => setVolumeOwnership(ctx.dir, fsGroup, logger),
    );
  } catch (err) {
    if (!existed || mounted) {
      logger.error(err, "Error writing payload to dir", { dir: ctx.dir });
      try {
        await removeVolumeDir(
          { podUid: ctx.pod.metadata?.uid ?? "", volumeName: ctx.volume.name, dir: ctx.dir },
          opts.tmpfs,
        );
      } catch (tearDownErr) {
        logger.error(tearDownErr, `Error tearing down volume ${ctx.volume.name}`);
      }
    }
    throw err;
  }
}

/**
 * Unmounts the tmpfs on the volume directory, if any, then removes the directory; a missing
 * directory is fine. Another filesystem mounted there is refused rather than emptied.
 */
export async function removeVolumeDir(
  ctx: VolumeTearDownContext,
  mounter?: Mounter,
): Promise<void> {
  ctx.signal?.throwIfAborted();
  let real: string;
  try {
    real = await Deno.realPath(ctx.dir);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return;
    throw err;
  }
  // Stacked tmpfs mounts (two setUps racing) come off one by one.
  for (let i = 0; mounter !== undefined; i++) {
    const current = await mounter.mountAt(real);
    if (current === undefined) break;
    if (current.fsType !== "tmpfs") {
      throw new Error(
        `volume ${ctx.volumeName} of pod ${ctx.podUid}: ${ctx.dir} is a ${current.fsType} mount point; tearing down a mount other than tmpfs is not supported yet`,
      );
    }
    if (i === MAX_UNMOUNTS) {
      throw new Error(
        `volume ${ctx.volumeName} of pod ${ctx.podUid}: ${ctx.dir} is still mounted after ${MAX_UNMOUNTS} unmounts`,
      );
    }
    await mounter.unmount(real, ctx.signal);
  }
  try {
    await Deno.remove(ctx.dir, { recursive: true });
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
}

/**
 * Gives group `fsGroup` every file under `dir` with group read, and directories group x and
 * setgid (upstream SetVolumeOwnership with the ReadOnly attribute every projecting plugin
 * has); nothing when `fsGroup` is undefined. Per-file failures are logged and skipped.
 */
export async function setVolumeOwnership(
  dir: string,
  fsGroup: number | undefined,
  logger: Logger = createLogger(),
): Promise<void> {
  if (fsGroup === undefined || fsGroup === null) return;
  await changeOwnership(dir, fsGroup, { readOnly: true, logger });
}

/** What {@link keyToPathPayload} maps. */
export interface KeyToPathOptions {
  /** The source's items; empty or undefined projects every key at its own name. */
  readonly items: readonly V1KeyToPath[] | undefined;
  /** The object's data by key, already decoded. */
  readonly data: ReadonlyMap<string, Uint8Array>;
  readonly defaultMode: number;
  /** Missing keys are skipped rather than refused. */
  readonly optional: boolean;
  readonly kind: "configmap" | "secret";
  /** The object's name and namespace, for error messages. */
  readonly name: string;
  readonly namespace: string;
}

/**
 * The payload of a configMap or secret source (upstream MakePayload). Throws
 * {@link VolumeSourceError} for a missing key of a required source and for a key or path the
 * atomic writer would refuse.
 */
export function keyToPathPayload(opts: KeyToPathOptions): Map<string, FileProjection> {
  const payload = new Map<string, FileProjection>();
  const add = (key: string, path: string, mode: number, data: Uint8Array) => {
    const invalid = validatePath(path);
    if (invalid !== undefined) {
      throw new VolumeSourceError(
        `${opts.kind} "${opts.namespace}/${opts.name}": key ${key}: ${invalid}`,
      );
    }
    payload.set(path, { data, mode });
  };
  if (opts.items === undefined || opts.items.length === 0) {
    for (const [key, data] of opts.data) add(key, key, opts.defaultMode, data);
    return payload;
  }
  for (const item of opts.items) {
    const data = opts.data.get(item.key);
    if (data === undefined) {
      if (opts.optional) continue;
      throw new VolumeSourceError(
        opts.kind === "configmap"
          ? `configmap references non-existent config key: ${item.key}`
          : `references non-existent secret key: ${item.key}`,
      );
    }
    add(item.key, item.path, item.mode ?? opts.defaultMode, data);
  }
  return payload;
}

async function pathExists(path: string): Promise<boolean> {
  try {
    await Deno.lstat(path);
    return true;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return false;
    throw err;
  }
}
