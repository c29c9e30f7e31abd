/**
 * @module
 * The image half of the fake CRI runtime: images by id and by every reference (repo tag, repo
 * digest), names normalised as containerd does ("nginx" is "docker.io/library/nginx:latest"),
 * one method per ImageService RPC, scripted pull failures, registries that demand credentials,
 * and a record of the pulls seen. Private to the `fake_*` modules (`fake_runtime_service.ts`
 * re-exports its types); upstream's counterpart is `cri-api/pkg/apis/testing/fake_image_service.go`.
 */

import { createHash } from "node:crypto";
import * as api from "../../proto/runtime/v1/api.ts";
import type { GrpcCode } from "../cri/connection.ts";
import { FakeRuntimeError, invalid, unknown } from "./_fake_errors.ts";

/** Where containerd keeps image layers and containers' writable layers. */
export const MOUNTPOINT = "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs";

/** One image the fake has. */
export interface FakeImage {
  /** "sha256:<64 hex>", the SHA-256 of the normalised name. */
  readonly id: string;
  readonly repoTags: readonly string[];
  readonly repoDigests: readonly string[];
  readonly size: bigint;
  /** Kept by image garbage collection (containerd pins the sandbox image). */
  pinned: boolean;
}

/** A pull as the fake saw it, for tests that check pull secrets. */
export interface PullRecord {
  readonly image: string;
  readonly auth: api.AuthConfig | undefined;
  readonly sandboxConfig: api.PodSandboxConfig | undefined;
}

/** Credentials a registry demands. */
export interface Credentials {
  readonly username: string;
  readonly password: string;
}

interface ScriptedFailure {
  readonly code: GrpcCode;
  readonly details: string;
  remaining: number;
}

/** How many pulls {@link FakeImageService.pulls} keeps. */
const MAX_PULL_RECORDS = 1000;

const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");

/**
 * The reference as containerd stores it: docker.io and library/ added to short names, ":latest"
 * to untagged ones. Image ids ("sha256:...") are returned unchanged.
 */
export function normalizeImageRef(ref: string): string {
  if (ref.startsWith("sha256:")) return ref;
  let name = ref;
  let suffix = ":latest";
  const at = name.indexOf("@");
  const colon = name.lastIndexOf(":");
  if (at >= 0) {
    suffix = name.slice(at);
    name = name.slice(0, at);
  } else if (colon > name.lastIndexOf("/")) {
    suffix = name.slice(colon);
    name = name.slice(0, colon);
  }
  const slash = name.indexOf("/");
  const domain = slash < 0 ? "" : name.slice(0, slash);
  if (slash < 0 || !(domain.includes(".") || domain.includes(":") || domain === "localhost")) {
    name = `docker.io/${name}`;
  }
  if (name.startsWith("docker.io/") && !name.slice("docker.io/".length).includes("/")) {
    name = `docker.io/library/${name.slice("docker.io/".length)}`;
  }
  return name + suffix;
}

/** Options of {@link FakeImageService}. */
export interface FakeImageOptions {
  readonly preloadImages?: readonly string[];
  /** Pinned when present, as containerd pins its sandbox image. */
  readonly sandboxImage?: string;
  /** Nanoseconds since the epoch. */
  readonly now: () => bigint;
}

/** Images by id and reference; every operation is O(1) except listing. */
export class FakeImageService {
  readonly #byId = new Map<string, FakeImage>();
  readonly #byRef = new Map<string, FakeImage>();
  readonly #failures = new Map<string, ScriptedFailure>();
  readonly #auth = new Map<string, Credentials>();
  readonly #sandboxImage: string | undefined;
  readonly #now: () => bigint;
  #usedBytes = 0n;
  /** The most recent pulls, oldest first (at most 1000). */
  readonly pulls: PullRecord[] = [];

  constructor(opts: FakeImageOptions) {
    this.#sandboxImage = opts.sandboxImage && normalizeImageRef(opts.sandboxImage);
    this.#now = opts.now;
    for (const ref of opts.preloadImages ?? []) this.add(ref);
  }

  /** Adds `ref` as if pulled; returns the image (the existing one when already present). */
  add(ref: string): FakeImage {
    const existing = this.get(ref);
    if (existing) return existing;
    const name = normalizeImageRef(ref);
    const hash = sha256(name);
    const at = name.indexOf("@");
    const repo = at >= 0 ? name.slice(0, at) : name.slice(0, name.lastIndexOf(":"));
    const image: FakeImage = {
      id: `sha256:${hash}`,
      repoTags: at >= 0 ? [] : [name],
      repoDigests: [at >= 0 ? name : `${repo}@sha256:${sha256(`${name}#manifest`)}`],
      // Deterministic, 5-70 MB: enough spread for image GC tests to order by size.
      size: 5_000_000n + BigInt(parseInt(hash.slice(0, 4), 16)) * 1000n,
      pinned: name === this.#sandboxImage,
    };
    this.#byId.set(image.id, image);
    for (const r of [image.id, ...image.repoTags, ...image.repoDigests]) this.#byRef.set(r, image);
    this.#usedBytes += image.size;
    return image;
  }

  /** The image `ref` names: an id (with or without "sha256:"), a tag or a digest. */
  get(ref: string): FakeImage | undefined {
    return this.#byRef.get(ref) ?? this.#byRef.get(normalizeImageRef(ref)) ??
      this.#byId.get(`sha256:${ref}`);
  }

  /** Makes the next `times` pulls of `image` fail with `code` (by default NotFound's wording). */
  failPull(image: string, code: GrpcCode, details?: string, times = Infinity): void {
    const name = normalizeImageRef(image);
    details ??= `failed to pull and unpack image "${name}": failed to resolve reference ` +
      `"${name}": ${name}: not found`;
    this.#failures.set(name, { code, details, remaining: times });
  }

  /** Makes pulls of `image` fail with 401 Unauthorized unless they carry `credentials`. */
  requireAuth(image: string, credentials: Credentials): void {
    this.#auth.set(normalizeImageRef(image), credentials);
  }

  listImages(req: api.ListImagesRequest): api.ListImagesResponse {
    const ref = req.filter?.image?.image;
    const found = ref ? [this.get(ref)] : this.#byId.values();
    const images: api.Image[] = [];
    for (const i of found) if (i) images.push(toImage(i));
    return { images };
  }

  /** `image` is undefined when absent, as the CRI requires. */
  imageStatus(req: api.ImageStatusRequest): api.ImageStatusResponse {
    const image = this.get(req.image?.image ?? "");
    return { image: image && toImage(image), info: {} };
  }

  pullImage(req: api.PullImageRequest): api.PullImageResponse {
    const ref = req.image?.image ?? "";
    if (ref === "") throw invalid(`failed to parse image reference "": invalid reference format`);
    this.pulls.push({ image: ref, auth: req.auth, sandboxConfig: req.sandboxConfig });
    if (this.pulls.length > MAX_PULL_RECORDS) this.pulls.shift();
    const name = normalizeImageRef(ref);
    const scripted = this.#failures.get(name);
    if (scripted && scripted.remaining > 0) {
      if (--scripted.remaining === 0) this.#failures.delete(name);
      throw new FakeRuntimeError(scripted.code, scripted.details);
    }
    const wanted = this.#auth.get(name);
    if (wanted && !authMatches(req.auth, wanted)) {
      throw unknown(
        `failed to pull and unpack image "${name}": failed to resolve reference "${name}": ` +
          `unexpected status from HEAD request: 401 Unauthorized`,
      );
    }
    return { imageRef: this.add(ref).id };
  }

  /** Removes the image with all its references; a missing image is not an error. */
  removeImage(req: api.RemoveImageRequest): api.RemoveImageResponse {
    const image = this.get(req.image?.image ?? "");
    if (!image) return {};
    this.#byId.delete(image.id);
    for (const r of [image.id, ...image.repoTags, ...image.repoDigests]) this.#byRef.delete(r);
    this.#usedBytes -= image.size;
    return {};
  }

  /** Usage of the image filesystem: the images' sizes, and 64 inodes each. */
  imageFsInfo(_: api.ImageFsInfoRequest): api.ImageFsInfoResponse {
    const usage: api.FilesystemUsage = {
      timestamp: this.#now(),
      fsId: { mountpoint: MOUNTPOINT },
      usedBytes: { value: this.#usedBytes },
      inodesUsed: { value: BigInt(this.#byId.size * 64) },
    };
    return { imageFilesystems: [usage], containerFilesystems: [] };
  }
}

function toImage(image: FakeImage): api.Image {
  return api.Image.create({
    id: image.id,
    repoTags: [...image.repoTags],
    repoDigests: [...image.repoDigests],
    size: image.size,
    pinned: image.pinned,
  });
}

function authMatches(auth: api.AuthConfig | undefined, want: Credentials): boolean {
  if (!auth) return false;
  if (auth.username === want.username && auth.password === want.password) return true;
  return auth.auth !== "" && auth.auth === btoa(`${want.username}:${want.password}`);
}
