/**
 * @module
 * RemoteImageService: the CRI ImageService over a {@link CriConnection}, with upstream's names
 * and deadlines (runtimeRequestTimeout, except PullImage, which runs until done or aborted).
 * Corresponds to upstream `pkg/kubelet/cri/remote/remote_image.go`.
 */

import * as api from "../../proto/runtime/v1/api.ts";
import { type CriConnection, type CriMethod, criMethods } from "./connection.ts";

/** The kubelet's view of a CRI image service; tests substitute their own. */
export type ImageManagerService = Pick<RemoteImageService, keyof RemoteImageService>;

/** Options of {@link RemoteImageService}. */
export interface RemoteImageOptions {
  readonly connection: CriConnection;
  /** runtimeRequestTimeout in milliseconds. @default 120000 */
  readonly timeoutMs?: number;
}

const S = criMethods(api.ImageServiceDefinition);

/** The CRI ImageService of one endpoint. */
export class RemoteImageService {
  readonly #conn: CriConnection;
  readonly #timeout: number;

  constructor(opts: RemoteImageOptions) {
    this.#conn = opts.connection;
    this.#timeout = opts.timeoutMs ?? 120_000;
  }

  async listImages(filter?: api.ImageFilter, signal?: AbortSignal): Promise<api.Image[]> {
    return (await this.#unary(S.listImages, api.ListImagesRequest.create({ filter }), signal))
      .images;
  }

  /** The image's status; `image` is undefined when the runtime does not have it. */
  imageStatus(
    image: api.ImageSpec,
    verbose = false,
    signal?: AbortSignal,
  ): Promise<api.ImageStatusResponse> {
    return this.#unary(S.imageStatus, api.ImageStatusRequest.create({ image, verbose }), signal);
  }

  /** Pulls an image; returns the runtime's image reference. No deadline: abort to stop. */
  async pullImage(
    image: api.ImageSpec,
    auth: api.AuthConfig | undefined,
    sandboxConfig: api.PodSandboxConfig | undefined,
    signal?: AbortSignal,
  ): Promise<string> {
    const res = await this.#conn.unary(
      S.pullImage,
      api.PullImageRequest.create({ image, auth, sandboxConfig }),
      { signal },
    );
    if (res.imageRef === "") {
      throw new Error(`imageRef of image ${JSON.stringify(image.image)} is not set`);
    }
    return res.imageRef;
  }

  async removeImage(image: api.ImageSpec, signal?: AbortSignal): Promise<void> {
    await this.#unary(S.removeImage, api.RemoveImageRequest.create({ image }), signal);
  }

  imageFsInfo(signal?: AbortSignal): Promise<api.ImageFsInfoResponse> {
    return this.#unary(S.imageFsInfo, api.ImageFsInfoRequest.create({}), signal);
  }

  #unary<Req, Res>(method: CriMethod<Req, Res>, req: Req, signal?: AbortSignal): Promise<Res> {
    return this.#conn.unary(method, req, { signal, timeoutMs: this.#timeout });
  }
}
