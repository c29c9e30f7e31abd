/**
 * @module
 * Writes a single-layer OCI image without a container engine: the layer as a POSIX ustar
 * archive (owned by root, every entry dated {@link EPOCH_SECONDS}, entries in path order) and
 * gzipped, the image config (`rootfs.diff_ids` is the sha256 of the uncompressed layer), the
 * manifest, `index.json` naming the image, `oci-layout`, and the whole layout as one tar, which
 * `ctr images import` (containerd 1.6 and later) and `skopeo copy oci-archive:` take.
 *
 * Output is a function of the input only: one set of files and one config always give the same
 * bytes and so the same digests. Nothing here touches the file system; callers write
 * {@link OciImage.layoutFiles} or {@link OciImage.archive} where they want them. It follows the
 * OCI image-spec (image-layout, manifest, config, descriptor); upstream Kubernetes builds its
 * images with BuildKit instead.
 */

import { concatBytes } from "../src/util/bytes.ts";
import { createHash } from "node:crypto";
import { gzipSync } from "node:zlib";

/** Every file in an image is dated 2024-01-01T00:00:00Z, so digests do not depend on when. */
export const EPOCH_SECONDS = 1_704_067_200;

/** Media type of `index.json`. */
export const MEDIA_INDEX = "application/vnd.oci.image.index.v1+json";
/** Media type of the image manifest. */
export const MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json";
/** Media type of the image config. */
export const MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json";
/** Media type of a gzip-compressed layer. */
export const MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip";

/** One entry of a tar archive. Modes are the permission bits only (no file type bits). */
export type TarEntry =
  | { path: string; type: "dir"; mode: number }
  | { path: string; type: "file"; mode: number; data: Uint8Array }
  | { path: string; type: "symlink"; linkname: string };

/** A path, field or reference that cannot go into an image; the message names it. */
export class OciLayoutError extends Error {
  override name = "OciLayoutError";
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

/** The runtime settings of an image (the config's `config` object, OCI names). */
export interface ImageRuntimeConfig {
  Entrypoint?: readonly string[];
  Cmd?: readonly string[];
  /** @default ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"] */
  Env?: readonly string[];
  /** @default "/" */
  WorkingDir?: string;
  Labels?: Readonly<Record<string, string>>;
}

/** What {@link buildOciImage} needs. */
export interface OciImageOptions {
  /** Full reference, e.g. `kubelet-ts.local/kubelet-installer:0.1.0`; names the image on import. */
  name: string;
  /** The root file system; parent directories must be listed (they are not made up). */
  layer: readonly TarEntry[];
  config: ImageRuntimeConfig;
  /** OCI architecture: `amd64` or `arm64`. */
  architecture: string;
  /** Text of the history entry's `created_by`. */
  createdBy: string;
}

/** A built image: its layout as files, the layout as one tar, and its digests. */
export interface OciImage {
  name: string;
  /** Relative path in the layout → content: `oci-layout`, `index.json`, `blobs/sha256/...`. */
  layoutFiles: ReadonlyMap<string, Uint8Array>;
  /** The layout as an uncompressed tar (an "oci-archive"). */
  archive: Uint8Array;
  /** `sha256:...` of the manifest: the digest a registry reports. */
  manifestDigest: string;
  /** `sha256:...` of the config: the image id CRI reports. */
  configDigest: string;
  /** `sha256:...` of the gzip layer. */
  layerDigest: string;
  /** `sha256:...` of the uncompressed layer, as `rootfs.diff_ids` holds it. */
  diffId: string;
}

const DEFAULT_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"];
const CREATED = new Date(EPOCH_SECONDS * 1000).toISOString().replace(".000Z", "Z");

/** Builds the image in memory. Throws {@link OciLayoutError} for a bad name or path. */
export function buildOciImage(opts: OciImageOptions): OciImage {
  const { tag } = parseReference(opts.name);
  if (opts.architecture !== "amd64" && opts.architecture !== "arm64") {
    throw new OciLayoutError(
      `Image architecture must be amd64 or arm64: current value is '${opts.architecture}'`,
    );
  }
  const layerTar = tar(sortEntries(opts.layer));
  // Level 9 and node:zlib's fixed header (mtime 0) keep the compressed bytes reproducible.
  const layer = new Uint8Array(gzipSync(layerTar, { level: 9 }));
  const diffId = `sha256:${sha256Hex(layerTar)}`;
  const c = opts.config;
  const config = json({
    created: CREATED,
    architecture: opts.architecture,
    os: "linux",
    config: {
      Env: [...(c.Env ?? DEFAULT_ENV)],
      ...(c.Entrypoint ? { Entrypoint: [...c.Entrypoint] } : {}),
      ...(c.Cmd ? { Cmd: [...c.Cmd] } : {}),
      WorkingDir: c.WorkingDir ?? "/",
      ...(c.Labels ? { Labels: sortedObject(c.Labels) } : {}),
    },
    rootfs: { type: "layers", diff_ids: [diffId] },
    history: [{ created: CREATED, created_by: opts.createdBy }],
  });
  const manifest = json({
    schemaVersion: 2,
    mediaType: MEDIA_MANIFEST,
    config: descriptor(MEDIA_CONFIG, config),
    layers: [descriptor(MEDIA_LAYER, layer)],
  });
  const index = json({
    schemaVersion: 2,
    mediaType: MEDIA_INDEX,
    manifests: [{
      ...descriptor(MEDIA_MANIFEST, manifest),
      platform: { architecture: opts.architecture, os: "linux" },
      annotations: {
        // containerd (ctr images import, nerdctl load) names the image after this one; the
        // OCI annotation holds the tag, as BuildKit writes it and skopeo reads it.
        "io.containerd.image.name": opts.name,
        "org.opencontainers.image.ref.name": tag,
      },
    }],
  });
  const layoutFiles = new Map<string, Uint8Array>([
    ["oci-layout", json({ imageLayoutVersion: "1.0.0" })],
    ["index.json", index],
  ]);
  for (const blob of [config, manifest, layer]) {
    layoutFiles.set(blobPath(`sha256:${sha256Hex(blob)}`), blob);
  }
  const archive = tar([
    { path: "blobs/", type: "dir", mode: 0o755 },
    { path: "blobs/sha256/", type: "dir", mode: 0o755 },
    ...[...layoutFiles].map(([path, data]) => ({
      path,
      type: "file" as const,
      mode: 0o644,
      data,
    })),
  ]);
  return {
    name: opts.name,
    layoutFiles,
    archive,
    manifestDigest: `sha256:${sha256Hex(manifest)}`,
    configDigest: `sha256:${sha256Hex(config)}`,
    layerDigest: `sha256:${sha256Hex(layer)}`,
    diffId,
  };
}

/** `blobs/sha256/<hex>` for `sha256:<hex>`. */
export function blobPath(digest: string): string {
  const m = /^sha256:([0-9a-f]{64})$/.exec(digest);
  if (!m) throw new OciLayoutError(`Digest must be sha256:<64 hex>: current value is '${digest}'`);
  return `blobs/sha256/${m[1]}`;
}

/** Splits `host/path/name:tag` (no digest references); the tag defaults to `latest`. */
export function parseReference(ref: string): { name: string; tag: string } {
  // The last ':' starts a tag only when no '/' follows it (a registry host may carry a port).
  const colon = ref.lastIndexOf(":");
  const hasTag = colon > ref.lastIndexOf("/");
  const name = hasTag ? ref.slice(0, colon) : ref;
  const tag = hasTag ? ref.slice(colon + 1) : "latest";
  const host = String.raw`[a-zA-Z0-9.-]+(?::\d+)?`;
  const component = String.raw`[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*`;
  const nameOk = new RegExp(`^(?:${host}/)?${component}(?:/${component})*$`).test(name);
  if (!nameOk || !/^\w[\w.-]{0,127}$/.test(tag)) {
    throw new OciLayoutError(
      `Image reference must look like 'registry/repository:tag': current value is '${ref}'`,
    );
  }
  return { name, tag };
}

/** Entries in byte order of their paths, so a directory precedes what it holds. */
function sortEntries(entries: readonly TarEntry[]): TarEntry[] {
  const seen = new Set<string>();
  for (const e of entries) {
    const bare = e.path.replace(/\/$/, "");
    if (bare === "" || bare.startsWith("/") || bare.split("/").some((p) => p === ".." || !p)) {
      throw new OciLayoutError(
        `Layer paths must be relative and clean, without '..': current value is '${e.path}'`,
      );
    }
    if (seen.has(bare)) throw new OciLayoutError(`Layer path '${bare}' is listed twice`);
    seen.add(bare);
  }
  return [...entries].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

function descriptor(mediaType: string, data: Uint8Array) {
  return { mediaType, digest: `sha256:${sha256Hex(data)}`, size: data.length };
}

function sortedObject(o: Readonly<Record<string, string>>): Record<string, string> {
  return Object.fromEntries(Object.entries(o).sort(([a], [b]) => (a < b ? -1 : 1)));
}

function json(value: unknown): Uint8Array {
  return utf8(JSON.stringify(value));
}

/** Hex sha256 of `data`. */
export function sha256Hex(data: Uint8Array | string): string {
  return createHash("sha256").update(data).digest("hex");
}

function utf8(s: string): Uint8Array {
  return new TextEncoder().encode(s);
}

// ---- ustar ----

/** A POSIX ustar archive of `entries` in the given order, owned by root, dated {@link EPOCH_SECONDS}. */
export function tar(entries: readonly TarEntry[]): Uint8Array {
  const chunks: Uint8Array[] = [];
  for (const e of entries) {
    const data = e.type === "file" ? e.data : new Uint8Array(0);
    chunks.push(tarHeader(e, data.length), data);
    const pad = (512 - (data.length % 512)) % 512;
    if (pad > 0) chunks.push(new Uint8Array(pad));
  }
  chunks.push(new Uint8Array(1024)); // two zero blocks end the archive
  return concatBytes(chunks);
}

function tarHeader(e: TarEntry, size: number): Uint8Array {
  const h = new Uint8Array(512);
  const put = (offset: number, length: number, value: string, field: string) => {
    const bytes = utf8(value);
    if (bytes.length > length) {
      throw new OciLayoutError(
        `tar ${field} of '${e.path}' must be at most ${length} bytes: current value is '${value}'`,
      );
    }
    h.set(bytes, offset);
  };
  const octal = (offset: number, length: number, n: number, field: string) =>
    put(offset, length, n.toString(8).padStart(length - 1, "0") + "\0", field);
  // ustar splits a long path at a '/' into prefix (155 bytes) and name (100 bytes).
  let name = e.path;
  let prefix = "";
  if (utf8(name).length > 100) {
    const cut = name.lastIndexOf("/", name.length - 2);
    if (cut > 0) {
      prefix = name.slice(0, cut);
      name = name.slice(cut + 1);
    }
  }
  put(0, 100, name, "name");
  octal(100, 8, e.type === "symlink" ? 0o777 : e.mode & 0o7777, "mode");
  octal(108, 8, 0, "uid");
  octal(116, 8, 0, "gid");
  octal(124, 12, size, "size");
  octal(136, 12, EPOCH_SECONDS, "mtime");
  h.fill(0x20, 148, 156); // the checksum counts as spaces while summing
  put(156, 1, e.type === "file" ? "0" : e.type === "dir" ? "5" : "2", "type");
  if (e.type === "symlink") put(157, 100, e.linkname, "linkname");
  put(257, 6, "ustar\0", "magic");
  put(263, 2, "00", "version");
  put(265, 32, "root", "uname");
  put(297, 32, "root", "gname");
  put(345, 155, prefix, "path prefix");
  let sum = 0;
  for (const b of h) sum += b;
  put(148, 8, sum.toString(8).padStart(6, "0") + "\0 ", "checksum");
  return h;
}
