/**
 * @module
 * The emptyDir volume plugin: a directory that lives as long as the pod, on the node's disk
 * (medium "") or in a tmpfs mount (medium "Memory"), shared by the pod's containers. It owns the
 * volume directory `<pods>/<uid>/volumes/kubernetes.io~empty-dir/<name>`, mounts and unmounts
 * tmpfs through {@link Mounter}, and applies the pod's fsGroup to the volume (exported as
 * {@link setVolumeOwnership} for the other plugins that honour fsGroup).
 *
 * A `sizeLimit` on disk media is not enforced here: upstream enforces it by eviction (the
 * eviction manager measures the directory and evicts the pod that overflows it), so it only
 * sizes tmpfs mounts in this module. Not modelled: project quotas (the
 * LocalStorageCapacityIsolationFSQuotaMonitoring gate), the plugin's "ready" marker directory,
 * the stickyBit field (absent from the client types). HugePages media mount hugetlbfs with the
 * page size of the medium or of the pod's hugepage requests.
 *
 * Corresponds to upstream `pkg/volume/emptydir/empty_dir.go` (emptyDir SetUpAt, TearDownAt,
 * calculateEmptyDirMemorySize, generateTmpfsMountOptions) and `pkg/volume/volume_linux.go`
 * (SetVolumeOwnership / VolumeOwnership.ChangePermissions).
 */

import { lchown } from "node:fs/promises";
import { join } from "node:path";
import type { V1Pod, V1Volume } from "@kubernetes/client-node";
import {
  addDec,
  cmpDec,
  type Dec,
  isPodLevelResourcesSet,
  isZeroDec,
  parseDec,
  podLimits,
  resourceList,
  valueOf,
} from "../qos/resource_helpers.ts";
import { isRestartableInitContainer } from "../pod/podutil.ts";
import { createLogger, type Logger } from "../klog/klog.ts";
import type { Mounter } from "../util/mount.ts";
import { formatBinarySI, isQuantity, parseQuantity } from "../util/quantity.ts";
import { getPodQOS } from "../qos/qos.ts";
import type {
  MountedVolume,
  VolumePlugin,
  VolumeSetUpContext,
  VolumeTearDownContext,
} from "./plugin.ts";

/** The plugin's upstream name. */
export const EMPTY_DIR_PLUGIN_NAME = "kubernetes.io/empty-dir";

/** Mode of the volume directory (upstream `defaultPerm`; see https://issue.k8s.io/2630). */
const DEFAULT_PERM = 0o777;
/** The tmpfs option that keeps pages out of swap (upstream `swap.TmpfsNoswapOption`). */
const TMPFS_NOSWAP_OPTION = "noswap";
// Permission bits SetVolumeOwnership adds (upstream rwMask, roMask, execMask).
const RW_MASK = 0o660;
const RO_MASK = 0o440;
const EXEC_MASK = 0o110;
const SETGID = 0o2000;
/** More stacked mounts than this at one volume dir means something else keeps mounting there. */
const MAX_UNMOUNTS = 8;

/** An emptyDir volume that cannot be set up or torn down; the message is the FailedMount text. */
export class EmptyDirError extends Error {
  override name = "EmptyDirError";
}

/** Options of {@link EmptyDirPlugin}. */
export interface EmptyDirPluginOptions {
  /** Mounts and unmounts tmpfs for medium "Memory". */
  readonly mounter: Mounter;
  /**
   * The node's allocatable memory in bytes, the upper bound of a tmpfs volume (upstream
   * `VolumeHost.GetNodeAllocatable`). Undefined while unknown: then only the pod's memory limit
   * and the volume's sizeLimit bound the mount. @default () => undefined
   */
  readonly nodeAllocatableMemory?: () => number | undefined;
  /**
   * Add the `noswap` option to tmpfs mounts. Upstream probes for it (kernel 6.4 or later, or a
   * trial mount, and never inside a user namespace); an older kernel rejects the whole mount
   * ("bad option"), so it stays off until the integrator has probed the host and turns it on.
   * @default false
   */
  readonly tmpfsNoswap?: boolean;
  /** @default a text logger on stderr */
  readonly logger?: Logger;
}

/** Options of {@link setVolumeOwnership}. */
export interface VolumeOwnershipOptions {
  /** Grant group read (0440) instead of read-write (0660), for read-only volumes. @default false */
  readonly readOnly?: boolean;
  /**
   * The pod's fsGroupChangePolicy: "OnRootMismatch" changes nothing when the volume's root
   * already has the group and its permission bits (upstream requiresPermissionChange).
   * @default "Always"
   */
  readonly changePolicy?: string;
  /** @default a text logger on stderr */
  readonly logger?: Logger;
  readonly signal?: AbortSignal;
}

/** The emptyDir plugin (upstream `emptyDirPlugin` with its emptyDir mounter and unmounter). */
export class EmptyDirPlugin implements VolumePlugin {
  readonly name = EMPTY_DIR_PLUGIN_NAME;
  readonly requiresRemount = false;
  readonly #mounter: Mounter;
  readonly #nodeAllocatableMemory: () => number | undefined;
  readonly #noswap: boolean;
  readonly #log: Logger;

  constructor(opts: EmptyDirPluginOptions) {
    this.#mounter = opts.mounter;
    this.#nodeAllocatableMemory = opts.nodeAllocatableMemory ?? (() => undefined);
    this.#noswap = opts.tmpfsNoswap ?? false;
    this.#log = opts.logger ?? createLogger();
  }

  /** Handles volumes with an `emptyDir` source. */
  canSupport(volume: V1Volume): boolean {
    return volume.emptyDir !== undefined && volume.emptyDir !== null;
  }

  /**
   * Creates the volume directory with mode 0777 (medium ""), mounts a tmpfs on it (medium
   * "Memory") or hugetlbfs (media "HugePages", "HugePages-<size>"), then applies the pod's
   * fsGroup. Idempotent: an existing tmpfs or hugetlbfs mount is kept.
   */
  async setUp(ctx: VolumeSetUpContext): Promise<MountedVolume> {
    ctx.signal?.throwIfAborted();
    const { pod, volume, dir } = ctx;
    const medium = volume.emptyDir?.medium ?? "";
    if (isHugePageMedium(medium)) {
      await this.#setupHugepages(pod, medium, dir, ctx.signal);
    } else if (medium === "") {
      await this.#setupDir(dir);
    } else if (medium === "Memory") {
      const size = emptyDirMemorySize(pod, volume, this.#nodeAllocatableMemory());
      await this.#setupTmpfs(pod, volume.name, dir, size, ctx.signal);
    } else {
      throw new EmptyDirError(`unknown storage medium "${medium}"`);
    }

    const fsGroup = pod.spec?.securityContext?.fsGroup;
    if (fsGroup !== undefined && fsGroup !== null) {
      // Upstream ignores the outcome of the ownership change; say so in the log at least.
      try {
        await setVolumeOwnership(dir, fsGroup, { logger: this.#log, signal: ctx.signal });
      } catch (err) {
        if (ctx.signal?.aborted) throw err;
        this.#log.error(err, "Failed to set volume ownership", { path: dir, fsGroup });
      }
    }
    return { hostPath: dir, readOnly: false, selinuxRelabel: true };
  }

  /** Unmounts whatever is mounted on the volume directory, then removes it recursively. */
  async tearDown(ctx: VolumeTearDownContext): Promise<void> {
    ctx.signal?.throwIfAborted();
    const { dir } = ctx;
    if (!(await pathExists(dir))) {
      this.#log.warning(`Warning: Unmount skipped because path does not exist: ${dir}`);
      return;
    }
    const real = await Deno.realPath(dir);
    for (let i = 0; await this.#mounter.mountAt(real) !== undefined; i++) {
      if (i === MAX_UNMOUNTS) {
        throw new EmptyDirError(
          `cannot tear down emptyDir ${dir}: still mounted after ${MAX_UNMOUNTS} unmounts`,
        );
      }
      await this.#mounter.unmount(real, ctx.signal);
    }
    await Deno.remove(dir, { recursive: true });
  }

  async #setupDir(dir: string): Promise<void> {
    await Deno.mkdir(dir, { recursive: true, mode: DEFAULT_PERM });
    let mode = (await Deno.lstat(dir)).mode ?? 0;
    if ((mode & 0o777) === DEFAULT_PERM) return;
    // The process umask cut bits off mkdir's mode; chmod is not subject to it.
    await Deno.chmod(dir, DEFAULT_PERM);
    mode = (await Deno.lstat(dir)).mode ?? 0;
    if ((mode & 0o777) !== DEFAULT_PERM) {
      this.#log.error(
        null,
        `Expected directory "${dir}" permissions to be: ${goPerm(DEFAULT_PERM)}; got: ${
          goPerm(mode)
        }`,
      );
    }
  }

  /**
   * Mounts hugetlbfs with the page size of the medium, or of the pod's one hugepage request for
   * medium "HugePages" (upstream setupHugepages). Idempotent: a hugetlbfs mount already there
   * is kept when its page size is the medium's.
   */
  async #setupHugepages(pod: V1Pod, medium: string, dir: string, signal?: AbortSignal) {
    await this.#setupDir(dir);
    const real = await Deno.realPath(dir);
    const existing = await this.#mounter.mountAt(real);
    if (existing?.fsType === "hugetlbfs") {
      if (medium === "HugePages") return;
      const option = [...existing.superOptions, ...existing.options].find((o) =>
        o.startsWith("pagesize=")
      );
      if (option === undefined) {
        throw new EmptyDirError(
          `pod ${pod.metadata?.uid ?? ""}: mounted dir ${dir} pagesize is not determined`,
        );
      }
      // The kernel writes "2M": with the binary suffix it compares with the medium's size.
      let mounted = option.slice("pagesize=".length).trim();
      if (!mounted.endsWith("i")) mounted += "i";
      const wanted = hugePageSizeFromMedium(medium);
      if (parseQuantity(mounted) !== wanted) {
        throw new EmptyDirError(
          `pod ${pod.metadata?.uid ?? ""}: mounted dir ${dir} pagesize '${
            formatBinarySI(parseQuantity(mounted))
          }' and requested medium size '${formatBinarySI(wanted)}' differ`,
        );
      }
      return;
    }
    const option = pageSizeMountOption(medium, pod);
    this.#log.v(3).info("Mounting hugepages for volume", {
      podUID: pod.metadata?.uid ?? "",
      dir,
    });
    await this.#mounter.mount("nodev", real, "hugetlbfs", [option], signal);
  }

  async #setupTmpfs(
    pod: V1Pod,
    volumeName: string,
    dir: string,
    size: number | undefined,
    signal?: AbortSignal,
  ): Promise<void> {
    await this.#setupDir(dir);
    const real = await Deno.realPath(dir);
    const existing = await this.#mounter.mountAt(real);
    if (existing?.fsType === "tmpfs") return;
    // Without a size the kernel's default applies: half of the node's RAM.
    const options: string[] = [];
    if (size !== undefined) options.push(`size=${size}`);
    if (this.#noswap) options.push(TMPFS_NOSWAP_OPTION);
    this.#log.v(3).info("Mounting tmpfs for volume", {
      podUID: pod.metadata?.uid ?? "",
      volumeName,
      options: options.join(","),
    });
    await this.#mounter.mount("tmpfs", real, "tmpfs", options, signal);
  }
}

/**
 * Bytes of a medium "Memory" emptyDir's tmpfs (upstream `calculateEmptyDirMemorySize`): node
 * allocatable memory, lowered to the pod's memory limit and then to the volume's sizeLimit when
 * each is positive and no larger. Undefined when nothing bounds it (no `size=` option).
 * Deviation: upstream always knows allocatable memory; here undefined means no node bound.
 */
export function emptyDirMemorySize(
  pod: V1Pod,
  volume: V1Volume,
  nodeAllocatableMemory: number | undefined,
): number | undefined {
  let size: Dec | undefined = nodeAllocatableMemory === undefined
    ? undefined
    : { n: BigInt(Math.max(0, Math.ceil(nodeAllocatableMemory))), s: 0 };
  const fits = (q: Dec) => q.n > 0n && (size === undefined || cmpDec(q, size) <= 0);

  const podLimit = podMemoryLimit(pod);
  if (podLimit !== undefined && fits(podLimit)) size = podLimit;

  const raw = volume.emptyDir?.sizeLimit;
  if (raw !== undefined && raw !== null) {
    const volumeLimit = parseDec(String(raw));
    if (fits(volumeLimit)) size = volumeLimit;
  }

  if (size === undefined) return undefined;
  const bytes = valueOf(size);
  return bytes > 0n ? Number(bytes) : undefined;
}

/**
 * The memory limit of the pod's cgroup, as upstream `cm.ResourceConfigForPod` sets it:
 * Guaranteed pods get the sum of limits, Burstable pods only when every container declares one
 * (or the pod sets a pod-level limit), BestEffort pods none.
 */
function podMemoryLimit(pod: V1Pod): Dec | undefined {
  const qos = getPodQOS(pod);
  if (qos === "BestEffort") return undefined;
  const limit: Dec = { n: valueOf(podLimits(pod).get("memory")), s: 0 };
  if (qos === "Guaranteed") return limit;
  return memoryLimitsDeclared(pod) ? limit : undefined;
}

function memoryLimitsDeclared(pod: V1Pod): boolean {
  const memoryOf = (limits: Readonly<Record<string, string>> | undefined): Dec =>
    resourceList(limits).get("memory") ?? { n: 0n, s: 0 };
  let declared = true;
  for (const c of pod.spec?.containers ?? []) {
    if (isZeroDec(memoryOf(c.resources?.limits))) declared = false;
  }
  // Upstream's PodLimits callback sees each init container's limit plus the sidecars before it.
  let sidecars: Dec = { n: 0n, s: 0 };
  for (const c of pod.spec?.initContainers ?? []) {
    const own = memoryOf(c.resources?.limits);
    let seen: Dec;
    if (isRestartableInitContainer(c)) {
      sidecars = addDec(sidecars, own);
      seen = sidecars;
    } else {
      seen = addDec(own, sidecars);
    }
    if (isZeroDec(seen)) declared = false;
  }
  if (isPodLevelResourcesSet(pod) && !isZeroDec(memoryOf(pod.spec?.resources?.limits))) {
    declared = true;
  }
  return declared;
}

/** Upstream `HugePageSizeFromMedium`: the bytes of "HugePages-<size>". */
function hugePageSizeFromMedium(medium: string): number {
  if (medium === "HugePages") {
    throw new EmptyDirError(`medium: ${medium} doesn't have size information`);
  }
  const size = medium.slice("HugePages-".length);
  if (!isQuantity(size)) {
    throw new EmptyDirError(
      `medium: ${medium}: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'`,
    );
  }
  return parseQuantity(size);
}

/**
 * The `pagesize=` option of a hugetlbfs emptyDir (upstream getPageSizeMountOption): the
 * medium's size, which some container (or the pod, with pod-level resources) must request; for
 * medium "HugePages", the one hugepage size the pod's containers request.
 */
export function pageSizeMountOption(medium: string, pod: V1Pod): string {
  const mediumSize = medium === "HugePages" ? undefined : hugePageSizeFromMedium(medium);
  const lists: (Readonly<Record<string, unknown>> | undefined)[] = [];
  if (isPodLevelResourcesSet(pod)) lists.push(pod.spec?.resources?.requests);
  for (const c of [...(pod.spec?.containers ?? []), ...(pod.spec?.initContainers ?? [])]) {
    lists.push(c.resources?.requests);
  }
  let found: number | undefined;
  for (const list of lists) {
    for (const name of Object.keys(list ?? {})) {
      if (!name.startsWith("hugepages-")) continue;
      const size = parseQuantity(name.slice("hugepages-".length));
      if (mediumSize === undefined) {
        if (found !== undefined && found !== size) {
          throw new EmptyDirError(
            `medium: ${medium} can't be used if container requests multiple huge page sizes`,
          );
        }
        found = size;
      } else if (size === mediumSize) found = size;
    }
  }
  if (found === undefined) {
    throw new EmptyDirError(
      `medium ${medium}: hugePages storage requested, but there is no resource request for huge pages`,
    );
  }
  return `pagesize=${formatBinarySI(found)}`;
}

/** Upstream `IsHugePageMedium`: "HugePages" or "HugePages-<size>". */
function isHugePageMedium(medium: string): boolean {
  return medium === "HugePages" || medium.startsWith("HugePages-");
}

/**
 * Gives group `fsGroup` access to everything under `dir` (upstream `SetVolumeOwnership` with the
 * "Always" change policy): each entry is lchown'ed to the group, and all but symlinks get group
 * rw (r when read-only) added to their mode, directories also group x and setgid so new files
 * inherit the group. Per-entry failures are logged and skipped, as upstream; a directory that
 * cannot be listed throws.
 */
export async function setVolumeOwnership(
  dir: string,
  fsGroup: number,
  opts: VolumeOwnershipOptions = {},
): Promise<void> {
  const log = opts.logger ?? createLogger();
  const mask = opts.readOnly ? RO_MASK : RW_MASK;
  const root = await Deno.lstat(dir);
  if (opts.changePolicy === "OnRootMismatch" && !requiresPermissionChange(root, fsGroup, mask)) {
    log.v(3).info(
      "Skipping permission and ownership change for volume",
      { path: dir },
    );
    return;
  }
  log.v(4).info("Perform recursive ownership change for directory", { path: dir });
  await walkDeep(dir, root, async (path, info) => {
    opts.signal?.throwIfAborted();
    try {
      await lchown(path, -1, fsGroup);
    } catch (err) {
      log.error(err, "Lchown failed", { path });
    }
    // chmod follows symlinks, and would overwrite the target's mode with the link's 0777.
    if (info.isSymlink) return;
    const bits = info.isDirectory ? mask | SETGID | EXEC_MASK : mask;
    try {
      await Deno.chmod(path, ((info.mode ?? 0) & 0o7777) | bits);
    } catch (err) {
      log.error(err, "chmod failed", { path });
    }
  });
}

/** upstream requiresPermissionChange: the root lacks the group, its bits or setgid. */
function requiresPermissionChange(root: Deno.FileInfo, fsGroup: number, mask: number): boolean {
  if (root.gid !== fsGroup || !root.isDirectory) return true;
  const perm = root.mode ?? 0;
  const want = mask | EXEC_MASK;
  return (perm & want) !== want || (perm & SETGID) === 0;
}

/** Visits children before their directory, without following symlinks (upstream `walkDeep`). */
async function walkDeep(
  path: string,
  info: Deno.FileInfo,
  visit: (path: string, info: Deno.FileInfo) => Promise<void>,
): Promise<void> {
  if (info.isDirectory) {
    for await (const entry of Deno.readDir(path)) {
      const child = join(path, entry.name);
      await walkDeep(child, await Deno.lstat(child), visit);
    }
  }
  await visit(path, info);
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

/** Go's `FileMode.Perm().String()`, such as `-rwxr-xr-x`, for log lines upstream prints. */
function goPerm(mode: number): string {
  const rwx = "rwxrwxrwx";
  let out = "-";
  for (let i = 0; i < 9; i++) out += mode & (1 << (8 - i)) ? rwx[i] : "-";
  return out;
}
