/**
 * @module
 * What the node's disk layout decides for eviction: whether images (and containers' writable
 * layers) have a filesystem of their own, hence which thresholds the containerfs signals
 * follow, how pods are ranked for each disk signal, and which node-level garbage collection
 * runs before any pod is evicted for one. Detected once, on the first eviction pass. Private
 * to eviction_manager.ts. Corresponds to upstream `pkg/kubelet/eviction/helpers.go`
 * (UpdateContainerFsThresholds, buildSignalToNodeReclaimFuncs) and the detection at the top
 * of `synchronize` in `eviction_manager.go`.
 */

import { isHardEvictionThreshold, type Signal, type Threshold } from "./thresholds.ts";
import type { Logger } from "../klog/klog.ts";
import { buildSignalToRankFunc, type RankFunc } from "./_rank.ts";

/** Deletes unused images (upstream ImageGC); resolves to the bytes freed. */
export interface ImageGC {
  deleteUnusedImages(signal?: AbortSignal): Promise<number>;
}

/** Deletes dead containers and sandboxes (upstream ContainerGC). */
export interface ContainerGC {
  deleteAllUnusedContainers(signal?: AbortSignal): Promise<void>;
}

/** How the node's disks are laid out (upstream DiskInfoProvider). */
export interface DiskInfoProvider {
  /** The image filesystem is on another device than the kubelet's root directory. */
  hasDedicatedImageFs(signal?: AbortSignal): Promise<boolean>;
  /** Containers' writable layers are on another filesystem than images. */
  hasDedicatedContainerFs(signal?: AbortSignal): Promise<boolean>;
}

/** One node-level reclaim step. */
export type NodeReclaimFunc = (signal?: AbortSignal) => Promise<unknown>;

/** The layout and what follows from it. */
export interface DiskLayout {
  readonly dedicatedImageFs: boolean;
  readonly splitContainerFs: boolean;
  /** The thresholds with containerfs ones derived from nodefs or imagefs. */
  readonly thresholds: readonly Threshold[];
  readonly rank: ReadonlyMap<Signal, RankFunc>;
  /** Node-level reclaim by signal, in order (upstream buildSignalToNodeReclaimFuncs). */
  readonly reclaim: ReadonlyMap<Signal, readonly NodeReclaimFunc[]>;
}

/** Detects the layout; throws when the image filesystem cannot be told apart. */
export async function detectDiskLayout(
  thresholds: readonly Threshold[],
  deps: {
    readonly diskInfo: DiskInfoProvider;
    readonly imageGC: ImageGC;
    readonly containerGC: ContainerGC;
    readonly logger: Logger;
  },
  signal?: AbortSignal,
): Promise<DiskLayout> {
  const { diskInfo, logger, imageGC, containerGC } = deps;
  let dedicatedImageFs: boolean;
  try {
    dedicatedImageFs = await diskInfo.hasDedicatedImageFs(signal);
  } catch (e) {
    signal?.throwIfAborted();
    logger.error(e, "Eviction manager: failed to get HasDedicatedImageFs");
    throw new Error(`eviction manager: failed to get HasDedicatedImageFs: ${e}`, { cause: e });
  }
  let split = false;
  try {
    split = await diskInfo.hasDedicatedContainerFs(signal);
  } catch (e) {
    signal?.throwIfAborted();
    logger.error(
      e,
      "eviction manager: failed to check if we have separate container filesystem. Ignoring.",
    );
  }
  const updated = updateContainerFsThresholds(thresholds, dedicatedImageFs, split);
  if (updated.overridden.length > 0) {
    logger.error(
      new Error(updated.overridden.join("\n")),
      "eviction manager: found conflicting containerfs eviction. Ignoring.",
    );
  }
  const containers: NodeReclaimFunc = (s) => containerGC.deleteAllUnusedContainers(s);
  const images: NodeReclaimFunc = (s) => imageGC.deleteUnusedImages(s);
  const reclaim = new Map<Signal, readonly NodeReclaimFunc[]>();
  const set = (funcs: readonly NodeReclaimFunc[], ...signals: Signal[]) => {
    for (const s of signals) reclaim.set(s, funcs);
  };
  const nodeFs: Signal[] = ["nodefs.available", "nodefs.inodesFree"];
  const imageFs: Signal[] = ["imagefs.available", "imagefs.inodesFree"];
  const containerFs: Signal[] = ["containerfs.available", "containerfs.inodesFree"];
  if (dedicatedImageFs && !split) {
    // The imagefs holds containers too: nodefs pressure has only logs to lose.
    set([], ...nodeFs);
    set([containers, images], ...imageFs, ...containerFs);
  } else if (dedicatedImageFs && split) {
    set([images], ...imageFs);
    set([containers], ...nodeFs, ...containerFs);
  } else {
    set([containers, images], ...nodeFs, ...imageFs, ...containerFs);
  }
  return {
    dedicatedImageFs,
    splitContainerFs: split,
    thresholds: updated.thresholds,
    rank: buildSignalToRankFunc(dedicatedImageFs, split),
    reclaim,
  };
}

/**
 * The containerfs thresholds follow nodefs (one filesystem, or images and containers split)
 * or imagefs (a dedicated image filesystem that also holds containers), replacing any set in
 * the configuration (upstream UpdateContainerFsThresholds). Returns the warnings upstream
 * joins into its error for containerfs entries that were overridden.
 */
export function updateContainerFsThresholds(
  thresholds: readonly Threshold[],
  dedicatedImageFs: boolean,
  splitContainerFs: boolean,
): { thresholds: Threshold[]; overridden: string[] } {
  const find = (signal: Signal, hard: boolean) =>
    thresholds.find((t) => t.signal === signal && isHardEvictionThreshold(t) === hard);
  const fromImageFs = dedicatedImageFs && !splitContainerFs;
  const bytes: Signal = fromImageFs ? "imagefs.available" : "nodefs.available";
  const inodes: Signal = fromImageFs ? "imagefs.inodesFree" : "nodefs.inodesFree";
  const overridden: string[] = [];
  const out: (Threshold | undefined)[] = [...thresholds];
  const derive = (signal: Signal, hard: boolean, source: Threshold | undefined) => {
    const idx = out.findIndex((t) =>
      t !== undefined && t.signal === signal && isHardEvictionThreshold(t) === hard
    );
    // Upstream puts a zero threshold where the source is missing; one never fires.
    const derived = source && { ...source, signal };
    if (idx >= 0) {
      overridden.push(`found ${signal} for ${hard ? "hard" : "soft"} eviction. ignoring`);
      out[idx] = derived;
    } else if (derived) out.push(derived);
  };
  derive("containerfs.available", true, find(bytes, true));
  derive("containerfs.available", false, find(bytes, false));
  derive("containerfs.inodesFree", true, find(inodes, true));
  derive("containerfs.inodesFree", false, find(inodes, false));
  return { thresholds: out.filter((t) => t !== undefined), overridden };
}
