/**
 * @module
 * ImageCache: the node's image list as the node status reports it, listed from the runtime
 * every {@link IMAGE_CACHE_REFRESH_MS} rather than on every status update. Corresponds to
 * upstream's imageCache in `pkg/kubelet/images/image_gc_manager.go`, which
 * realImageGCManager.Start refreshes every 30 s with ListImages and GetImageList serves to the
 * node status setter. One difference: until the first list succeeds, {@link ImageCache.list}
 * waits for a list from the runtime, so the first node status names the node's images instead
 * of none (upstream's first status races its first refresh).
 */

import type * as api from "../../proto/runtime/v1/api.ts";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";

/** How often the image list is read from the runtime (upstream's 30 s image cache refresh). */
export const IMAGE_CACHE_REFRESH_MS = 30_000;

/** Options of {@link ImageCache}. */
export interface ImageCacheOptions {
  /** CRI ListImages. */
  readonly listImages: (signal?: AbortSignal) => Promise<api.Image[]>;
  readonly clock: Clock;
  readonly logger: Logger;
  /** @default {@link IMAGE_CACHE_REFRESH_MS} */
  readonly refreshMs?: number;
}

/** The runtime's images, read every refresh period; see the module documentation. */
export class ImageCache {
  readonly #o: ImageCacheOptions;
  #images: readonly api.Image[] | undefined;
  #loading: Promise<readonly api.Image[]> | undefined;

  constructor(opts: ImageCacheOptions) {
    this.#o = opts;
  }

  /**
   * Lists the images at once and then every refresh period until `signal` aborts. A failed
   * list is one info line ("Failed to update image list", as upstream) and the last list
   * stays.
   */
  async run(signal: AbortSignal): Promise<void> {
    const { clock, logger } = this.#o;
    while (!signal.aborted) {
      try {
        await this.#load(signal);
      } catch (e) {
        if (signal.aborted) return;
        logger.info("Failed to update image list", { err: e });
      }
      try {
        await clock.sleep(this.#o.refreshMs ?? IMAGE_CACHE_REFRESH_MS, signal);
      } catch {
        return;
      }
    }
  }

  /**
   * The images of the last successful list. Before the first one this waits for a list from
   * the runtime (the one in flight, else a new one) and answers none when it fails.
   */
  async list(signal?: AbortSignal): Promise<readonly api.Image[]> {
    if (this.#images) return this.#images;
    try {
      return await (this.#loading ?? this.#load(signal));
    } catch {
      return [];
    }
  }

  #load(signal?: AbortSignal): Promise<readonly api.Image[]> {
    const loading = this.#o.listImages(signal).then((images) => {
      this.#images = images;
      return images;
    }).finally(() => {
      if (this.#loading === loading) this.#loading = undefined;
    });
    this.#loading = loading;
    return loading;
  }
}
