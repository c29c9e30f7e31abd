/**
 * @module
 * ImageGCManager: keeps a record of every image the runtime has (first seen, last used by a
 * container, size, pinned) and removes unused ones: all images unused for longer than
 * `imageMaximumGCAge`, and, when the image filesystem is at or over `imageGCHighThresholdPercent`,
 * the least recently used until it is back at `imageGCLowThresholdPercent`. Never removes an
 * image a container (of any state) uses or mounts as an image volume, one the runtime pins (CRI
 * `Image.pinned`, as containerd pins its sandbox image) or one first seen less than
 * `imageMinimumGCAge` ago. Talks to the CRI image service (ListImages, RemoveImage), the CRI
 * runtime service (ListContainers and ContainerStatus, for the images in use), the stats provider (image filesystem capacity) and
 * the event recorder. Corresponds to upstream `pkg/kubelet/images/image_gc_manager.go`, with the
 * loop of `Kubelet.StartGarbageCollection` (ImageGCFailed after repeated failures).
 */

import * as api from "../../proto/runtime/v1/api.ts";
import type { Clock } from "../util/clock.ts";
import type { EventRecorder, ObjectRef } from "../client/record.ts";
import { formatDuration } from "../util/duration.ts";
import { KObj, type Logger } from "../klog/klog.ts";
import {
  KUBERNETES_POD_NAME_LABEL,
  KUBERNETES_POD_NAMESPACE_LABEL,
} from "../kuberuntime/labels.ts";
import type { ImageManagerService } from "../cri/remote_image.ts";
import type { RuntimeService } from "../cri/remote_runtime.ts";
import { GrpcCode, isCriCode } from "../cri/connection.ts";

/** How often images are detected and collected (upstream ImageGCPeriod). */
export const IMAGE_GC_PERIOD_MS = 5 * 60_000;

/** The band garbage collection keeps the image filesystem in (upstream ImageGCPolicy). */
export interface ImageGCPolicy {
  /** Usage at or above this starts collection. @default 85 */
  readonly highThresholdPercent: number;
  /** Collection frees space down to this usage. @default 80 */
  readonly lowThresholdPercent: number;
  /** Images first seen more recently are never collected for space. @default 120000 (2m) */
  readonly minAgeMs: number;
  /** Images unused longer are collected whatever the usage; 0 turns this off. @default 0 */
  readonly maxAgeMs: number;
}

/** The image filesystem as the stats provider reports it. */
export interface ImageFsUsage {
  readonly capacityBytes: number;
  readonly availableBytes: number;
}

/** Options of {@link ImageGCManager}. */
export interface ImageGCManagerOptions {
  readonly imageService: Pick<ImageManagerService, "listImages" | "removeImage">;
  /**
   * Lists containers of every state: their images are in use, and so are the images their
   * image volumes mount (from each one's status).
   */
  readonly runtime: Pick<RuntimeService, "listContainers" | "containerStatus">;
  /** The image filesystem; undefined while the stats provider has none. */
  readonly imageFsStats: (signal?: AbortSignal) => Promise<ImageFsUsage | undefined>;
  /** @default {@link DEFAULT_IMAGE_GC_POLICY} */
  readonly policy?: Partial<ImageGCPolicy>;
  readonly recorder: EventRecorder;
  /** The node, which the events are about. */
  readonly nodeRef: ObjectRef;
  readonly clock: Clock;
  readonly logger: Logger;
}

/** Upstream's defaults (imageGCHighThresholdPercent, imageGCLowThresholdPercent, ...). */
export const DEFAULT_IMAGE_GC_POLICY: ImageGCPolicy = {
  highThresholdPercent: 85,
  lowThresholdPercent: 80,
  minAgeMs: 120_000,
  maxAgeMs: 0,
};

/** A policy upstream's NewImageGCManager refuses. */
export class ImageGCPolicyError extends Error {
  override name = "ImageGCPolicyError";
}

/** Garbage collection could not do all it had to. */
export class ImageGCError extends Error {
  override name = "ImageGCError";
}

/** What is known of one image (upstream imageRecord). */
export interface ImageRecord {
  /** When this manager first saw the image (ms). */
  readonly firstDetected: number;
  /** When a container last used it (ms); 0 when never seen in use. */
  readonly lastUsed: number;
  readonly size: number;
  readonly pinned: boolean;
  /** The runtime handler the image was pulled with ("" for the default). */
  readonly runtimeHandler: string;
}

interface MutableRecord {
  firstDetected: number;
  lastUsed: number;
  size: number;
  pinned: boolean;
  runtimeHandler: string;
}

interface Candidate {
  readonly id: string;
  readonly record: ImageRecord;
}

/** The policy with defaults for unset (undefined) fields, checked as upstream's NewImageGCManager. */
function resolvePolicy(given: Partial<ImageGCPolicy> = {}): ImageGCPolicy {
  const set = Object.entries(given).filter(([, v]) => v !== undefined);
  const policy: ImageGCPolicy = { ...DEFAULT_IMAGE_GC_POLICY, ...Object.fromEntries(set) };
  const { highThresholdPercent: high, lowThresholdPercent: low } = policy;
  if (!(high >= 0 && high <= 100)) {
    throw new ImageGCPolicyError(`invalid HighThresholdPercent ${high}, must be in range [0-100]`);
  }
  if (!(low >= 0 && low <= 100)) {
    throw new ImageGCPolicyError(`invalid LowThresholdPercent ${low}, must be in range [0-100]`);
  }
  if (low > high) {
    throw new ImageGCPolicyError(
      `LowThresholdPercent ${low} can not be higher than HighThresholdPercent ${high}`,
    );
  }
  return policy;
}

/** Tracks images and removes unused ones; see the module documentation. */
export class ImageGCManager {
  readonly #o: ImageGCManagerOptions;
  #policy: ImageGCPolicy;
  readonly #records = new Map<string, MutableRecord>();
  #beganGC: number;

  constructor(opts: ImageGCManagerOptions) {
    const policy = resolvePolicy(opts.policy);
    this.#o = opts;
    this.#policy = policy;
    this.#beganGC = opts.clock.now();
  }

  /**
   * Replaces the policy from the next pass on (a configuration reload); throws
   * {@link ImageGCPolicyError}, changing nothing, for one upstream's NewImageGCManager refuses.
   */
  setPolicy(policy: Partial<ImageGCPolicy>): void {
    this.#policy = resolvePolicy(policy);
  }

  /** The policy in force, defaults filled in. */
  get policy(): ImageGCPolicy {
    return this.#policy;
  }

  /** The record of an image by id, for tests and the node status. */
  record(id: string): ImageRecord | undefined {
    return this.#records.get(id);
  }

  /**
   * Collects every {@link IMAGE_GC_PERIOD_MS} until `signal` aborts, the first pass (and so the
   * first detection) at once. With a high threshold of 100 and no maximum age collection is off,
   * as upstream, and each pass only detects. One failure is logged; a second in a row also
   * records an ImageGCFailed event.
   */
  async run(signal: AbortSignal): Promise<void> {
    const { clock, logger } = this.#o;
    this.#beganGC = clock.now();
    const disabled = this.#policy.highThresholdPercent === 100 && this.#policy.maxAgeMs === 0;
    if (disabled) {
      logger.v(2).info(
        "ImageGCHighThresholdPercent is set 100 and ImageMaximumGCAge is 0, Disable image GC",
      );
    }
    let prevFailed = false;
    while (!signal.aborted) {
      try {
        if (disabled) {
          await this.detectImages(signal);
        } else {
          await this.garbageCollect(signal);
          logger.v(prevFailed ? 1 : 4).info("Image garbage collection succeeded");
        }
        prevFailed = false;
      } catch (e) {
        if (signal.aborted) return;
        if (disabled) {
          logger.info("Failed to monitor images", { err: e });
        } else if (prevFailed) {
          logger.error(e, "Image garbage collection failed multiple times in a row");
          this.#event("ImageGCFailed", messageOf(e));
        } else {
          logger.error(
            e,
            "Image garbage collection failed once. Stats initialization may not have completed yet",
          );
        }
        prevFailed = true;
      }
      try {
        await clock.sleep(IMAGE_GC_PERIOD_MS, signal);
      } catch {
        return;
      }
    }
  }

  /**
   * Refreshes the records from the runtime (upstream detectImages): new images are first seen
   * now, images in use by any container were last used now, vanished images are forgotten.
   * Returns the ids of the images in use.
   */
  detectImages(signal?: AbortSignal): Promise<Set<string>> {
    return this.#detect(this.#o.clock.now(), signal);
  }

  /**
   * One collection (upstream GarbageCollect): removes images unused beyond the maximum age,
   * then frees space when usage is at or over the high threshold. Throws when the image
   * filesystem is unknown or has no capacity (InvalidDiskCapacity), when removals fail, or
   * when too little was eligible (FreeDiskSpaceFailed, with upstream's v1.35+ message).
   */
  async garbageCollect(signal?: AbortSignal): Promise<void> {
    const { logger } = this.#o;
    const freeTime = this.#o.clock.now();
    let images = await this.#inEvictionOrder(freeTime, signal);
    images = await this.#freeOldImages(images, freeTime, signal);

    const fs = await this.#o.imageFsStats(signal);
    if (!fs) throw new ImageGCError("imageFs information is unavailable");
    const capacity = BigInt(Math.trunc(fs.capacityBytes));
    let available = BigInt(Math.trunc(fs.availableBytes));
    if (available > capacity) {
      logger.info("Availability is larger than capacity", {
        available: Number(available),
        capacity: Number(capacity),
      });
      available = capacity;
    }
    if (capacity === 0n) {
      const message = "invalid capacity 0 on image filesystem";
      this.#event("InvalidDiskCapacity", message);
      throw new ImageGCError(message);
    }

    const { highThresholdPercent: high, lowThresholdPercent: low } = this.#policy;
    // Integer arithmetic as upstream's int64, so the thresholds trip at the same byte.
    const usagePercent = 100 - Number(available * 100n / capacity);
    if (usagePercent < high) return;
    const amountToFree = Number(capacity * BigInt(100 - low) / 100n - available);
    logger.info(
      "Disk usage on image filesystem is over the high threshold, trying to free bytes down to the low threshold",
      { usage: usagePercent, highThreshold: high, amountToFree, lowThreshold: low },
    );
    const freed = await this.#freeSpace(amountToFree, freeTime, images, signal);
    if (freed < amountToFree) {
      // Usually the disk holds more than images (logs, volumes), or the images in use are
      // large: the message says so rather than suggest that collection itself is broken.
      const message =
        `Insufficient free disk space on the node's image filesystem (${usagePercent}% of ${
          formatSize(Number(capacity))
        } used). Failed to free sufficient space by deleting unused images (freed ${freed} bytes). Investigate disk usage, as it could be used by active images, logs, volumes, or other data.`;
      this.#event("FreeDiskSpaceFailed", message);
      throw new ImageGCError(message);
    }
  }

  /**
   * Removes every unused image old enough (upstream DeleteUnusedImages), whatever the usage:
   * what the eviction manager calls to reclaim the image filesystem. Resolves to the bytes
   * freed.
   */
  async deleteUnusedImages(signal?: AbortSignal): Promise<number> {
    this.#o.logger.info("Attempting to delete unused images");
    const freeTime = this.#o.clock.now();
    const images = await this.#inEvictionOrder(freeTime, signal);
    return await this.#freeSpace(Number.MAX_SAFE_INTEGER, freeTime, images, signal);
  }

  async #detect(detectTime: number, signal?: AbortSignal): Promise<Set<string>> {
    const { logger } = this.#o;
    const images = await this.#o.imageService.listImages(undefined, signal);
    const containers = await this.#o.runtime.listContainers(undefined, signal);
    const inUse = new Set<string>();
    const v5 = logger.v(5);
    const imageIds = new Set(images.map((i) => i.id));
    for (const c of containers) {
      // As upstream GetPods and toKubeContainer, which skip what they cannot convert.
      if (c.id === "" || !c.metadata || !c.image) continue;
      await this.#addImageVolumes(inUse, c, imageIds, signal);
      // CRI Container.image_id came with v1.30; older runtimes give the id as image_ref.
      const imageID = c.imageId || c.imageRef;
      if (v5.enabled) {
        v5.info("Container uses image", {
          pod: new KObj(
            c.labels[KUBERNETES_POD_NAME_LABEL] ?? "",
            c.labels[KUBERNETES_POD_NAMESPACE_LABEL] ?? "",
          ),
          containerName: c.metadata.name,
          containerImage: c.image.image,
          imageID,
        });
      }
      inUse.add(imageID);
    }

    const now = this.#o.clock.now();
    const current = new Set<string>();
    for (const image of images) {
      current.add(image.id);
      let record = this.#records.get(image.id);
      if (!record) {
        const runtimeHandler = image.spec?.runtimeHandler ?? "";
        v5.info("Image ID is new", { imageID: image.id, runtimeHandler });
        record = { firstDetected: detectTime, lastUsed: 0, size: 0, pinned: false, runtimeHandler };
        this.#records.set(image.id, record);
      }
      if (inUse.has(image.id)) record.lastUsed = now;
      record.size = Number(image.size);
      record.pinned = image.pinned;
    }
    for (const id of this.#records.keys()) {
      if (current.has(id)) continue;
      v5.info("Image ID is no longer present; removing from imageRecords", { imageID: id });
      this.#records.delete(id);
    }
    return inUse;
  }

  /**
   * upstream handleImageVolumes: the images the container mounts as image volumes (its CRI
   * status mounts with `image` set) are in use. A container gone since the listing has none;
   * any other failure fails the detection, as upstream's.
   */
  async #addImageVolumes(
    inUse: Set<string>,
    c: api.Container,
    imageIds: ReadonlySet<string>,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    let status: api.ContainerStatus | undefined;
    try {
      status = (await this.#o.runtime.containerStatus(c.id, false, signal)).status;
    } catch (e) {
      if (isCriCode(e, GrpcCode.NOT_FOUND)) return;
      throw new ImageGCError(`get container status: ${messageOf(e)}`, { cause: e });
    }
    for (const m of status?.mounts ?? []) {
      const id = m.image?.image;
      if (id === undefined || !imageIds.has(id)) continue;
      this.#o.logger.v(5).info("Container uses image as mount", {
        pod: new KObj(
          c.labels[KUBERNETES_POD_NAME_LABEL] ?? "",
          c.labels[KUBERNETES_POD_NAMESPACE_LABEL] ?? "",
        ),
        containerName: c.metadata?.name ?? "",
        imageID: id,
      });
      inUse.add(id);
    }
  }

  /** Unused, unpinned images, least recently used first, ties by first detection. */
  async #inEvictionOrder(freeTime: number, signal?: AbortSignal): Promise<Candidate[]> {
    const inUse = await this.#detect(freeTime, signal);
    const v5 = this.#o.logger.v(5);
    const out: Candidate[] = [];
    for (const [id, record] of this.#records) {
      if (inUse.has(id)) {
        v5.info("Image ID is being used", { imageID: id });
      } else if (record.pinned) {
        v5.info("Image is pinned, skipping garbage collection", { imageID: id });
      } else {
        out.push({ id, record: { ...record } });
      }
    }
    return out.sort((a, b) =>
      a.record.lastUsed === b.record.lastUsed
        ? a.record.firstDetected - b.record.firstDetected
        : a.record.lastUsed - b.record.lastUsed
    );
  }

  /** Removes images unused longer than maxAge, once maxAge has passed since collection began. */
  async #freeOldImages(
    images: Candidate[],
    freeTime: number,
    signal?: AbortSignal,
  ): Promise<Candidate[]> {
    const { maxAgeMs } = this.#policy;
    // Before maxAge has passed since the start, every image would look too old.
    if (maxAgeMs === 0 || freeTime - this.#beganGC <= maxAgeMs) return images;
    const errors: unknown[] = [];
    const remaining: Candidate[] = [];
    for (const image of images) {
      this.#o.logger.v(5).info(
        "Evaluating image ID for possible garbage collection based on image age",
        { imageID: image.id },
      );
      if (freeTime - image.record.lastUsed <= maxAgeMs) {
        remaining.push(image);
        continue;
      }
      try {
        await this.#freeImage(image, signal);
      } catch (e) {
        signal?.throwIfAborted();
        errors.push(e);
        remaining.push(image);
      }
    }
    if (errors.length > 0) {
      throw new ImageGCError(
        `wanted to free images older than ${
          formatDuration(maxAgeMs)
        }, encountered errors in image deletion: ${aggregate(errors)}`,
      );
    }
    return remaining;
  }

  /** Removes candidates in order until `bytesToFree` is freed; returns the bytes freed. */
  async #freeSpace(
    bytesToFree: number,
    freeTime: number,
    images: readonly Candidate[],
    signal?: AbortSignal,
  ): Promise<number> {
    const v5 = this.#o.logger.v(5);
    const errors: unknown[] = [];
    let spaceFreed = 0;
    for (const image of images) {
      const { record } = image;
      v5.info("Evaluating image ID for possible garbage collection based on disk usage", {
        imageID: image.id,
        runtimeHandler: record.runtimeHandler,
      });
      if (record.lastUsed >= freeTime) {
        v5.info("Image ID was used too recently, not eligible for garbage collection", {
          imageID: image.id,
          lastUsed: new Date(record.lastUsed).toISOString(),
          freeTime: new Date(freeTime).toISOString(),
        });
        continue;
      }
      // The image may just have been pulled for a container about to start.
      const age = freeTime - record.firstDetected;
      if (age < this.#policy.minAgeMs) {
        v5.info(
          "Image ID's age is less than the policy's minAge, not eligible for garbage collection",
          {
            imageID: image.id,
            age: formatDuration(age),
            minAge: formatDuration(this.#policy.minAgeMs),
          },
        );
        continue;
      }
      try {
        await this.#freeImage(image, signal);
      } catch (e) {
        signal?.throwIfAborted();
        errors.push(e);
        continue;
      }
      spaceFreed += record.size;
      if (spaceFreed >= bytesToFree) break;
    }
    if (errors.length > 0) {
      throw new ImageGCError(
        `wanted to free ${bytesToFree} bytes, but freed ${spaceFreed} bytes space with errors in image deletion: ${
          aggregate(errors)
        }`,
      );
    }
    return spaceFreed;
  }

  async #freeImage(image: Candidate, signal?: AbortSignal): Promise<void> {
    const { runtimeHandler, size } = image.record;
    this.#o.logger.info("Removing image to free bytes", {
      imageID: image.id,
      size,
      runtimeHandler,
    });
    await this.#o.imageService.removeImage(
      api.ImageSpec.create({ image: image.id, runtimeHandler }),
      signal,
    );
    this.#records.delete(image.id);
  }

  #event(reason: string, message: string): void {
    this.#o.recorder.event(this.#o.nodeRef, "Warning", reason, message);
  }
}

/**
 * A byte count with one decimal in the largest binary unit below it ("64.0 MiB", "512 B"), as
 * upstream's formatSize prints it with Go's `%.1f` (ties to even).
 */
export function formatSize(bytes: number): string {
  const units = ["KiB", "MiB", "GiB", "TiB"] as const;
  if (bytes < 1024) return `${Math.trunc(bytes)} B`;
  let i = 0;
  while (i < units.length - 1 && bytes >= 1024 ** (i + 2)) i++;
  const x = bytes / 1024 ** (i + 1);
  // An exact tie (x * 10 ends in .5) rounds to the even digit, as Go's formatting does;
  // toFixed would round it up.
  const twenty = x * 20;
  const fixed = Number.isInteger(twenty) && twenty % 2 === 1
    ? (Math.floor(twenty / 2) % 2 === 0 ? Math.floor(twenty / 2) : Math.floor(twenty / 2) + 1) /
      10
    : x;
  return `${fixed.toFixed(1)} ${units[i]}`;
}

function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** utilerrors.NewAggregate's text: one message alone, several in brackets. */
function aggregate(errors: readonly unknown[]): string {
  const messages = errors.map(messageOf);
  return messages.length === 1 ? messages[0] ?? "" : `[${messages.join(", ")}]`;
}
