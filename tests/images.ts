/**
 * @module
 * Container images for tests against a real containerd, built here because no public registry
 * is reachable: each is one gzip layer holding Debian's static busybox (`/bin/busybox` from
 * busybox-static) with a link in `/bin` for every applet, `/etc/passwd` and `/etc/group` with
 * root and nobody, `/tmp`, and whatever files the image adds. The result is an OCI image
 * layout (`oci-layout`, `index.json`, `blobs/sha256/...`) and the same layout as a tarball,
 * which `ctr images import` takes.
 *
 * Builds are deterministic (fixed owners, modes and times, entries in path order), so one
 * busybox binary and one {@link ImageSpec} always give the same digests. They are cached under
 * `.cache/images/` (git-ignored), keyed by the content that goes in.
 *
 * An image may also carry dynamically linked programs of this machine with the shared libraries
 * they load ({@link HostPrograms}, e.g. iptables for kube-proxy), found with `ldd`.
 *
 * It talks to `ctr` only (to import), to `ldd` for {@link HostPrograms}, and to apt when
 * {@link ensureImagePackages} must install busybox-static. Upstream's node e2e tests pull their images (busybox, pause, agnhost) from
 * registry.k8s.io instead; {@link BUSYBOX}, {@link PAUSE} and {@link HTTPD} stand in for them.
 */

import { createCipheriv, createHash } from "node:crypto";
import { gzipSync } from "node:zlib";
import { aptInstall, findProgram } from "./apt.ts";
import { SANDBOX_IMAGE } from "./containerd_harness.ts";

/** Reference of the general-purpose busybox image (`Cmd ["sh"]`). */
export const BUSYBOX_IMAGE = "docker.io/library/busybox:1.36";
/** Reference of the pod sandbox image: the name containerd's `sandbox_image` setting uses. */
export const PAUSE_IMAGE = SANDBOX_IMAGE;
/** Reference of the image that serves `/www` with busybox httpd on port 80. */
export const HTTPD_IMAGE = "kubelet-ts.local/httpd:1";
/** The port {@link HTTPD} listens on. */
export const HTTPD_PORT = 80;
/** The body of `/www/index.html` in {@link HTTPD}, which `GET /` answers with. */
export const HTTPD_INDEX = "kubelet-ts httpd test image\n";
/** Where the busybox binary comes from (package busybox-static). */
export const BUSYBOX_BINARY = "/bin/busybox";

/** What goes into one test image besides busybox and its applet links. */
export interface ImageSpec {
  /** Full reference it is imported under, e.g. `docker.io/library/busybox:1.36`. */
  name: string;
  /** The image config's `Entrypoint`. */
  entrypoint?: readonly string[];
  /** The image config's `Cmd`. */
  cmd?: readonly string[];
  /**
   * The image config's `Env`.
   * @default ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
   */
  env?: readonly string[];
  /** The image config's `WorkingDir`. */
  workingDir?: string;
  /** Ports for the image config's `ExposedPorts`, e.g. `80/tcp`. */
  exposedPorts?: readonly string[];
  /** The image config's `Labels`. */
  labels?: Readonly<Record<string, string>>;
  /** Extra regular files (mode 0644) by absolute path; their parent directories are created. */
  files?: Readonly<Record<string, string>>;
  /**
   * Programs copied from this machine (mode 0755), image path to host path, e.g.
   * `{"/csi-provisioner": "/cache/bin/csi-provisioner-v6.4.0/csi-provisioner"}`; the cache key
   * covers their content. They must be statically linked, as busybox is.
   */
  executables?: Readonly<Record<string, string>>;
  /** Dynamically linked programs of this machine, copied with the libraries they load. */
  hostPrograms?: HostPrograms;
  /**
   * Size of `/filler`, pseudo-random bytes seeded by the image name: they neither compress nor
   * dedupe with another image's, so the image takes about this much more room, twice over in
   * containerd (the layer in the content store, unpacked in a snapshot).
   * @default 0 (no such file)
   */
  fillerBytes?: number;
}

/**
 * Programs of this machine for {@link ImageSpec.hostPrograms}. Each path is put into the image
 * at the same path; a path that is a symlink here (or lies under one, as `/lib` does on a
 * merged-/usr system) becomes a symlink to its real path, where the file itself goes, with its
 * mode. So `/usr/sbin/iptables`, which resolves through `/etc/alternatives` to
 * `xtables-nft-multi`, becomes a link straight to `/usr/sbin/xtables-nft-multi`: a multi-call
 * binary picks its applet from the name it is run by, which the link keeps. Every shared library
 * `ldd` lists for the programs and modules is added the same way, including the program
 * interpreter (`/lib64/ld-linux-x86-64.so.2`). There is no `/etc/ld.so.cache` in the image:
 * the dynamic linker finds the libraries in its default directories, where `ldd` found them on
 * a Debian-like system. The cache key covers every path, link target and file content.
 */
export interface HostPrograms {
  /** Absolute paths of programs, e.g. `/usr/sbin/iptables`. */
  programs: readonly string[];
  /**
   * Directories of modules the programs load with dlopen, which `ldd` cannot see, copied whole
   * (e.g. iptables' extensions in `/usr/lib/x86_64-linux-gnu/xtables`).
   * @default none
   */
  moduleDirs?: readonly string[];
}

/** The general-purpose image: a shell and the usual tools. */
export const BUSYBOX: ImageSpec = { name: BUSYBOX_IMAGE, cmd: ["sh"] };

/**
 * The sandbox image. Like the real pause it blocks until stopped and exits on SIGTERM or
 * SIGINT (a trapped signal interrupts `wait`); as PID 1 of a pod's shared PID namespace the
 * shell also reaps orphans, as pause does.
 */
export const PAUSE: ImageSpec = {
  name: PAUSE_IMAGE,
  entrypoint: ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait; done"],
};

/** A web server: busybox httpd in the foreground on {@link HTTPD_PORT}, serving `/www`. */
export const HTTPD: ImageSpec = {
  name: HTTPD_IMAGE,
  cmd: ["httpd", "-f", "-v", "-p", String(HTTPD_PORT), "-h", "/www"],
  exposedPorts: [`${HTTPD_PORT}/tcp`],
  files: { "/www/index.html": HTTPD_INDEX },
};

/** Every image tests need: {@link BUSYBOX}, {@link PAUSE} and {@link HTTPD}. */
export const TEST_IMAGES: readonly ImageSpec[] = [BUSYBOX, PAUSE, HTTPD];

/** Options for {@link buildImage}. */
export interface BuildImageOptions {
  image: ImageSpec;
  /**
   * Directory that holds one sub-directory per built image.
   * @default `.cache/images` in the repository
   */
  cacheDir?: string;
  /**
   * The statically linked busybox to put in the image.
   * @default "/bin/busybox"
   */
  busybox?: string;
}

/** One built image: its OCI layout directory, the layout as a tarball, and its digests. */
export interface BuiltImage {
  name: string;
  /** Directory with `oci-layout`, `index.json` and `blobs/sha256/`. */
  layoutDir: string;
  /** The layout as an (uncompressed) tar, as `ctr images import` takes it. */
  tarball: string;
  /** `sha256:...` of the image manifest: the digest a registry reports for the image. */
  manifestDigest: string;
  /** `sha256:...` of the image config: the image id CRI reports. */
  configDigest: string;
  /** `sha256:...` of the gzip layer. */
  layerDigest: string;
}

/** The image could not be built or imported. */
export class ImageBuildError extends Error {
  override name = "ImageBuildError";
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

const DEFAULT_CACHE_DIR = new URL("../.cache/images", import.meta.url).pathname;
const DEFAULT_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"];
// Bump when the layout of what is built changes, so cached builds are not reused.
const BUILDER_VERSION = "1";
// Every file in every image is dated 2024-01-01T00:00:00Z, so digests do not depend on when.
const EPOCH_SECONDS = 1_704_067_200;
const CREATED = new Date(EPOCH_SECONDS * 1000).toISOString().replace(".000Z", "Z");

const MEDIA_INDEX = "application/vnd.oci.image.index.v1+json";
/** Media type of the image manifest. */
export const MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json";
const MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json";
const MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip";

/** Builds (or finds in the cache) the image and returns the path of its OCI layout tarball. */
export async function buildImage(opts: BuildImageOptions): Promise<string> {
  return (await buildImageLayout(opts)).tarball;
}

/** Builds (or finds in the cache) the image: its layout directory, tarball and digests. */
export async function buildImageLayout(opts: BuildImageOptions): Promise<BuiltImage> {
  const spec = opts.image;
  const busyboxPath = opts.busybox ?? BUSYBOX_BINARY;
  const cacheDir = opts.cacheDir ?? DEFAULT_CACHE_DIR;
  parseReference(spec.name); // a bad name fails before anything is built

  let busybox: Uint8Array;
  try {
    busybox = await Deno.readFile(busyboxPath);
  } catch (err) {
    throw new ImageBuildError(
      `Cannot build ${spec.name}: cannot read ${busyboxPath} (${(err as Error).message}); ` +
        `install busybox-static or call ensureImagePackages()`,
      { cause: err },
    );
  }
  if (hasInterpreter(busybox)) {
    throw new ImageBuildError(
      `Cannot build ${spec.name}: ${busyboxPath} is dynamically linked and would not run in ` +
        `an image without a libc; install busybox-static instead of busybox`,
    );
  }
  const executables = await readExecutables(spec);
  const hostFiles = spec.hostPrograms ? await collectHostFiles(spec.name, spec.hostPrograms) : [];
  const arch = ociArch(Deno.build.arch);
  const key = sha256Hex(
    JSON.stringify([
      BUILDER_VERSION,
      arch,
      sha256Hex(busybox),
      canonicalSpec(spec),
      ...(executables.length > 0 ? [executables.map((e) => [e.path, sha256Hex(e.data)])] : []),
      ...(hostFiles.length > 0 ? [hostFiles.map(hostFileKey)] : []),
    ]),
  ).slice(0, 16);
  const dir = `${cacheDir}/${slug(spec.name)}-${key}`;

  const cached = await readBuilt(dir, spec.name);
  if (cached) return cached;

  const applets = await busyboxApplets(busyboxPath);
  await Deno.mkdir(cacheDir, { recursive: true });
  const tmp = await Deno.makeTempDir({ dir: cacheDir, prefix: ".build-" });
  try {
    await writeImage({ dir: tmp, spec, busybox, applets, arch, executables, hostFiles });
    await Deno.chmod(tmp, 0o755); // made 0700 by makeTempDir
    try {
      await Deno.rename(tmp, dir);
    } catch (err) {
      // Another build of the same content (a test running in parallel) got there first.
      if (!(await readBuilt(dir, spec.name))) throw err;
    }
  } finally {
    await Deno.remove(tmp, { recursive: true }).catch(() => {});
  }
  const built = await readBuilt(dir, spec.name);
  if (!built) throw new ImageBuildError(`Built ${spec.name} into ${dir} but cannot read it back`);
  return built;
}

/** Options for {@link importImages}. */
export interface ImportImagesOptions {
  /** containerd's gRPC socket (a path, not `unix://`). */
  containerdSocket: string;
  /**
   * The images to build and import.
   * @default TEST_IMAGES
   */
  images?: readonly ImageSpec[];
  /**
   * containerd namespace to import into; CRI uses `k8s.io`.
   * @default "k8s.io"
   */
  namespace?: string;
  /** Where built images are cached (see {@link BuildImageOptions.cacheDir}). */
  cacheDir?: string;
  signal?: AbortSignal;
}

/**
 * Builds the images and imports them into containerd with `ctr images import`, then checks
 * that `ctr images ls` lists every name. Returns what was imported.
 */
export async function importImages(opts: ImportImagesOptions): Promise<BuiltImage[]> {
  const namespace = opts.namespace ?? "k8s.io";
  const images = opts.images ?? TEST_IMAGES;
  const built: BuiltImage[] = [];
  for (const image of images) {
    opts.signal?.throwIfAborted();
    built.push(await buildImageLayout({ image, cacheDir: opts.cacheDir }));
  }
  for (const image of built) {
    await ctrOrThrow(opts.containerdSocket, namespace, ["images", "import", image.tarball], {
      what: `import ${image.name}`,
      signal: opts.signal,
    });
  }
  const listed = new Set(
    lines(
      await ctrOrThrow(opts.containerdSocket, namespace, ["images", "ls", "-q"], {
        what: "list images",
        signal: opts.signal,
      }),
    ),
  );
  const missing = built.filter((b) => !listed.has(b.name)).map((b) => b.name);
  if (missing.length > 0) {
    throw new ImageBuildError(
      `ctr images import succeeded but 'ctr -n ${namespace} images ls' lacks ` +
        `${missing.join(", ")}; it lists: ${[...listed].join(", ") || "(nothing)"}`,
    );
  }
  return built;
}

/** Runs `ctr --address <socket> -n <namespace> <args>` and returns stdout, or throws. */
export async function ctrOrThrow(
  socket: string,
  namespace: string,
  args: readonly string[],
  opts: { what: string; signal?: AbortSignal; timeoutMs?: number },
): Promise<string> {
  const timeoutMs = opts.timeoutMs ?? 120_000;
  const signal = opts.signal
    ? AbortSignal.any([AbortSignal.timeout(timeoutMs), opts.signal])
    : AbortSignal.timeout(timeoutMs);
  const ctr = await findProgram("ctr");
  if (!ctr) throw new ImageBuildError(`Cannot ${opts.what}: 'ctr' is not installed`);
  const out = await new Deno.Command(ctr, {
    args: ["--address", socket, "--namespace", namespace, ...args],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal,
  }).output();
  const stdout = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    const stderr = new TextDecoder().decode(out.stderr);
    throw new ImageBuildError(
      `Cannot ${opts.what}: 'ctr ${args.join(" ")}' failed with code ${out.code}` +
        `${out.signal ? ` (${out.signal})` : ""}:\n${(stdout + stderr).trim()}`,
    );
  }
  return stdout;
}

/** Reads a layout written by {@link writeImage}; undefined when absent or incomplete. */
async function readBuilt(dir: string, name: string): Promise<BuiltImage | undefined> {
  try {
    await Deno.stat(`${dir}/image.tar`); // written last
    const index = JSON.parse(await Deno.readTextFile(`${dir}/layout/index.json`));
    const manifestDigest: string = index.manifests[0].digest;
    const manifest = JSON.parse(
      await Deno.readTextFile(`${dir}/layout/${blobPath(manifestDigest)}`),
    );
    return {
      name,
      layoutDir: `${dir}/layout`,
      tarball: `${dir}/image.tar`,
      manifestDigest,
      configDigest: manifest.config.digest,
      layerDigest: manifest.layers[0].digest,
    };
  } catch {
    return undefined;
  }
}

/** The {@link ImageSpec.executables}, read and checked, in image path order. */
async function readExecutables(spec: ImageSpec): Promise<{ path: string; data: Uint8Array }[]> {
  const out: { path: string; data: Uint8Array }[] = [];
  for (const [path, hostPath] of Object.entries(spec.executables ?? {}).sort()) {
    let data: Uint8Array;
    try {
      data = await Deno.readFile(hostPath);
    } catch (err) {
      const why = (err as Error).message;
      throw new ImageBuildError(
        `Cannot build ${spec.name}: cannot read ${hostPath} for ${path} (${why})`,
        { cause: err },
      );
    }
    if (hasInterpreter(data)) {
      throw new ImageBuildError(
        `Cannot build ${spec.name}: ${hostPath} is dynamically linked and would not run in ` +
          `an image without a libc`,
      );
    }
    out.push({ path, data });
  }
  return out;
}

/** One file or symlink of {@link HostPrograms}, at its absolute path in the image. */
type HostFile =
  | { path: string; type: "file"; mode: number; data: Uint8Array }
  | { path: string; type: "symlink"; linkname: string };

function hostFileKey(f: HostFile): unknown[] {
  return f.type === "file" ? [f.path, f.mode, sha256Hex(f.data)] : [f.path, "->", f.linkname];
}

/**
 * The files {@link HostPrograms} puts into an image, in path order: the programs, the module
 * directories' files, and every library `ldd` lists for them, each as its real file plus a
 * symlink where the path asked for is not the real path.
 */
async function collectHostFiles(image: string, host: HostPrograms): Promise<HostFile[]> {
  const fail = (why: string, cause?: unknown) =>
    new ImageBuildError(`Cannot build ${image}: ${why}`, cause ? { cause } : undefined);
  const wanted = new Set<string>();
  for (const program of host.programs) {
    if (!program.startsWith("/")) {
      throw fail(`hostPrograms.programs must be absolute paths: current value is '${program}'`);
    }
    wanted.add(program);
  }
  for (const dir of host.moduleDirs ?? []) {
    if (!dir.startsWith("/")) {
      throw fail(`hostPrograms.moduleDirs must be absolute paths: current value is '${dir}'`);
    }
    try {
      for (const path of await listFiles(dir)) wanted.add(path);
    } catch (err) {
      throw fail(`cannot list ${dir} (${(err as Error).message})`, err);
    }
  }
  const realPaths = new Map<string, string>();
  const realPath = async (path: string) => {
    let real = realPaths.get(path);
    if (real === undefined) {
      try {
        real = await Deno.realPath(path);
      } catch (err) {
        throw fail(`cannot resolve ${path} (${(err as Error).message})`, err);
      }
      realPaths.set(path, real);
    }
    return real;
  };
  const targets = [...new Set(await Promise.all([...wanted].map(realPath)))].sort();
  const libraries = await lddLibraries(targets, fail);
  for (const lib of libraries) wanted.add(lib);

  const out = new Map<string, HostFile>();
  for (const path of [...wanted].sort()) {
    const real = await realPath(path);
    if (real !== path) out.set(path, { path, type: "symlink", linkname: real });
    if (out.has(real) && out.get(real)!.type === "file") continue;
    let data: Uint8Array;
    let mode: number;
    try {
      data = await Deno.readFile(real);
      mode = ((await Deno.stat(real)).mode ?? 0o755) & 0o777;
    } catch (err) {
      throw fail(`cannot read ${real} for ${path} (${(err as Error).message})`, err);
    }
    out.set(real, { path: real, type: "file", mode, data });
  }
  for (const f of out.values()) {
    if (f.path.split("/").includes("..")) throw fail(`odd host path '${f.path}'`);
  }
  return [...out.values()].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

/** Regular files and symlinks under `dir`, recursively. */
async function listFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for await (const e of Deno.readDir(dir)) {
    const path = `${dir.replace(/\/+$/, "")}/${e.name}`;
    if (e.isDirectory) out.push(...await listFiles(path));
    else if (e.isFile || e.isSymlink) out.push(path);
  }
  return out;
}

/** Every library `ldd` lists for `files`; fails when one is not found. */
async function lddLibraries(
  files: readonly string[],
  fail: (why: string, cause?: unknown) => ImageBuildError,
): Promise<string[]> {
  if (files.length === 0) return [];
  const ldd = await findProgram("ldd");
  if (!ldd) throw fail("'ldd' is not installed (it comes with libc-bin)");
  // With one file ldd prints no "file:" header; the same file twice makes it print them.
  const args = files.length === 1 ? [files[0]!, files[0]!] : [...files];
  const out = await new Deno.Command(ldd, {
    args,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(60_000),
  }).output();
  // ldd exits non-zero when one file is not dynamically linked; the output says which.
  const parsed = parseLdd(new TextDecoder().decode(out.stdout));
  const missing = [...parsed].flatMap(([file, l]) => l.missing.map((m) => `${m} (for ${file})`));
  if (missing.length > 0) throw fail(`ldd finds no ${missing.join(", ")}`);
  return [...new Set([...parsed.values()].flatMap((l) => l.libraries))].sort();
}

/**
 * Parses what `ldd file1 file2...` prints: for each `file:` header, the absolute paths of the
 * libraries it loads (`libc.so.6 => /lib/.../libc.so.6`, the interpreter's own line) and the
 * names it finds nowhere (`=> not found`). The vDSO (no path) and files that are not dynamic
 * executables have none.
 */
export function parseLdd(
  output: string,
): Map<string, { libraries: string[]; missing: string[] }> {
  const result = new Map<string, { libraries: string[]; missing: string[] }>();
  let current: { libraries: string[]; missing: string[] } | undefined;
  for (const line of output.split("\n")) {
    if (line.trim() === "") continue;
    if (!/^\s/.test(line) && line.endsWith(":")) {
      current = { libraries: [], missing: [] };
      result.set(line.slice(0, -1), current);
      continue;
    }
    if (!current) continue;
    const text = line.trim();
    const arrow = /^(\S+) => (.*?)(?: \(0x[0-9a-f]+\))?$/.exec(text);
    if (arrow) {
      if (arrow[2] === "not found") current.missing.push(arrow[1]!);
      else if (arrow[2]!.startsWith("/")) current.libraries.push(arrow[2]!);
      continue;
    }
    const direct = /^(\/\S+) \(0x[0-9a-f]+\)$/.exec(text);
    if (direct) current.libraries.push(direct[1]!);
  }
  return result;
}

/** Writes `dir/layout/` (the OCI image layout) and then `dir/image.tar` (the same as a tar). */
async function writeImage(args: {
  dir: string;
  spec: ImageSpec;
  busybox: Uint8Array;
  applets: readonly string[];
  arch: string;
  executables: readonly { path: string; data: Uint8Array }[];
  hostFiles: readonly HostFile[];
}): Promise<void> {
  const { dir, spec, arch } = args;
  const layerTar = tar(layerEntries(args));
  const layer = gzipSync(layerTar, { level: 9 });

  const config = utf8(JSON.stringify({
    created: CREATED,
    architecture: arch,
    os: "linux",
    config: {
      Env: [...(spec.env ?? DEFAULT_ENV)],
      ...(spec.entrypoint ? { Entrypoint: [...spec.entrypoint] } : {}),
      ...(spec.cmd ? { Cmd: [...spec.cmd] } : {}),
      WorkingDir: spec.workingDir ?? "/",
      ...(spec.exposedPorts
        ? { ExposedPorts: Object.fromEntries(spec.exposedPorts.map((p) => [p, {}])) }
        : {}),
      ...(spec.labels ? { Labels: { ...spec.labels } } : {}),
    },
    rootfs: { type: "layers", diff_ids: [`sha256:${sha256Hex(layerTar)}`] },
    history: [{ created: CREATED, created_by: "kubelet-ts tests/images.ts" }],
  }));
  const manifest = utf8(JSON.stringify({
    schemaVersion: 2,
    mediaType: MEDIA_MANIFEST,
    config: descriptor(MEDIA_CONFIG, config),
    layers: [descriptor(MEDIA_LAYER, layer)],
  }));
  const { tag } = parseReference(spec.name);
  const index = utf8(JSON.stringify({
    schemaVersion: 2,
    mediaType: MEDIA_INDEX,
    manifests: [{
      ...descriptor(MEDIA_MANIFEST, manifest),
      platform: { architecture: arch, os: "linux" },
      annotations: {
        // containerd (ctr import, nerdctl load) names the image after this one...
        "io.containerd.image.name": spec.name,
        // ...and the OCI spec's own annotation holds the tag, as BuildKit writes it.
        "org.opencontainers.image.ref.name": tag,
      },
    }],
  }));
  const ociLayout = utf8(JSON.stringify({ imageLayoutVersion: "1.0.0" }));

  const blobs = [config, manifest, layer]
    .map((data) => ({ path: blobPath(`sha256:${sha256Hex(data)}`), data }));
  const files = [
    { path: "oci-layout", data: ociLayout },
    { path: "index.json", data: index },
    ...blobs,
  ];
  await Deno.mkdir(`${dir}/layout/blobs/sha256`, { recursive: true });
  for (const f of files) await Deno.writeFile(`${dir}/layout/${f.path}`, f.data);
  await Deno.writeFile(
    `${dir}/image.tar`,
    tar([
      { path: "blobs/", type: "dir", mode: 0o755 },
      { path: "blobs/sha256/", type: "dir", mode: 0o755 },
      ...files.map((f) => ({ path: f.path, type: "file" as const, mode: 0o644, data: f.data })),
    ]),
  );
}

/** The root file system of one image, as tar entries. */
function layerEntries(args: {
  spec: ImageSpec;
  busybox: Uint8Array;
  applets: readonly string[];
  executables: readonly { path: string; data: Uint8Array }[];
  hostFiles: readonly HostFile[];
}): TarEntry[] {
  const entries = new Map<string, TarEntry>();
  const dir = (path: string, mode = 0o755) => entries.set(path, { path, type: "dir", mode });
  const addParents = (path: string) => {
    const parts = path.split("/").slice(0, -1);
    for (let i = 1; i <= parts.length; i++) {
      const p = `${parts.slice(0, i).join("/")}/`;
      if (!entries.has(p)) dir(p);
    }
  };
  const file = (path: string, data: Uint8Array, mode = 0o644) => {
    addParents(path);
    entries.set(path, { path, type: "file", mode, data });
  };

  dir("bin/");
  dir("etc/");
  dir("root/", 0o700);
  dir("tmp/", 0o1777);
  dir("usr/");
  dir("usr/bin/");
  dir("var/");
  dir("var/tmp/", 0o1777);
  file("bin/busybox", args.busybox, 0o755);
  for (const applet of args.applets) {
    if (applet === "busybox") continue;
    entries.set(`bin/${applet}`, { path: `bin/${applet}`, type: "symlink", linkname: "busybox" });
  }
  // Scripts with `#!/usr/bin/env sh` expect env here.
  entries.set("usr/bin/env", { path: "usr/bin/env", type: "symlink", linkname: "/bin/busybox" });
  file(
    "etc/passwd",
    utf8("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"),
  );
  file("etc/group", utf8("root:x:0:\nnobody:x:65534:\n"));
  for (const [path, content] of Object.entries(args.spec.files ?? {})) {
    if (!path.startsWith("/") || path.endsWith("/") || path.split("/").includes("..")) {
      throw new ImageBuildError(
        `Cannot build ${args.spec.name}: files keys must be absolute file paths without '..': ` +
          `current value is '${path}'`,
      );
    }
    file(path.slice(1), utf8(content));
  }
  for (const { path, data } of args.executables) {
    if (!path.startsWith("/") || path.endsWith("/") || path.split("/").includes("..")) {
      throw new ImageBuildError(
        `Cannot build ${args.spec.name}: executables keys must be absolute file paths without ` +
          `'..': current value is '${path}'`,
      );
    }
    file(path.slice(1), data, 0o755);
  }
  for (const f of args.hostFiles) {
    const path = f.path.slice(1);
    if (f.type === "file") {
      file(path, f.data, f.mode);
    } else {
      addParents(path);
      entries.set(path, { path, type: "symlink", linkname: f.linkname });
    }
  }
  const fillerBytes = args.spec.fillerBytes ?? 0;
  if (!Number.isSafeInteger(fillerBytes) || fillerBytes < 0) {
    throw new ImageBuildError(
      `Cannot build ${args.spec.name}: fillerBytes must be a whole number of bytes: ` +
        `current value is '${fillerBytes}'`,
    );
  }
  if (fillerBytes > 0) file("filler", filler(args.spec.name, fillerBytes));
  return [...entries.values()].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

/** `size` bytes of AES-256-CTR keystream keyed by the name: random-looking, yet the same each build. */
function filler(name: string, size: number): Uint8Array {
  const key = createHash("sha256").update(`kubelet-ts filler ${name}`).digest();
  const cipher = createCipheriv("aes-256-ctr", key, new Uint8Array(16));
  const out = cipher.update(new Uint8Array(size));
  return new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
}

/** The applet names busybox was built with (`busybox --list`). */
async function busyboxApplets(busybox: string): Promise<string[]> {
  const out = await new Deno.Command(busybox, {
    args: ["--list"],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const applets = lines(new TextDecoder().decode(out.stdout));
  if (!out.success || applets.length === 0) {
    throw new ImageBuildError(
      `'${busybox} --list' failed with code ${out.code}: ` +
        new TextDecoder().decode(out.stderr).trim(),
    );
  }
  for (const a of applets) {
    if (a.includes("/") || a === "." || a === "..") {
      throw new ImageBuildError(`'${busybox} --list' named an odd applet: '${a}'`);
    }
  }
  return applets;
}

/** Whether an ELF executable asks for a program interpreter (is dynamically linked). */
function hasInterpreter(elf: Uint8Array): boolean {
  const isElf = elf[0] === 0x7f && elf[1] === 0x45 && elf[2] === 0x4c && elf[3] === 0x46;
  if (!isElf || elf.length < 64) return false; // not ELF: let the container runtime say so
  const is64 = elf[4] === 2;
  const little = elf[5] === 1;
  const view = new DataView(elf.buffer, elf.byteOffset, elf.byteLength);
  const phoff = is64 ? Number(view.getBigUint64(32, little)) : view.getUint32(28, little);
  const phentsize = view.getUint16(is64 ? 54 : 42, little);
  const phnum = view.getUint16(is64 ? 56 : 44, little);
  for (let i = 0; i < phnum; i++) {
    const at = phoff + i * phentsize;
    if (at + 4 > elf.length) break;
    if (view.getUint32(at, little) === 3) return true; // PT_INTERP
  }
  return false;
}

/** Docker/OCI architecture name of Deno's build architecture. */
function ociArch(arch: typeof Deno.build.arch): string {
  switch (arch) {
    case "x86_64":
      return "amd64";
    case "aarch64":
      return "arm64";
    default:
      throw new ImageBuildError(`Cannot build images for architecture '${arch}'`);
  }
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
    throw new ImageBuildError(
      `Image reference must look like 'registry/repository:tag': current value is '${ref}'`,
    );
  }
  return { name, tag };
}

function canonicalSpec(spec: ImageSpec): unknown {
  return {
    ...spec,
    files: Object.entries(spec.files ?? {}).sort(([a], [b]) => (a < b ? -1 : 1)),
    labels: Object.entries(spec.labels ?? {}).sort(([a], [b]) => (a < b ? -1 : 1)),
  };
}

function descriptor(mediaType: string, data: Uint8Array) {
  return { mediaType, digest: `sha256:${sha256Hex(data)}`, size: data.length };
}

/** `blobs/sha256/<hex>` for `sha256:<hex>`. */
export function blobPath(digest: string): string {
  const [alg, hex] = digest.split(":");
  return `blobs/${alg}/${hex}`;
}

function slug(name: string): string {
  return name.replace(/[^A-Za-z0-9.-]+/g, "_");
}

function sha256Hex(data: Uint8Array | string): string {
  return createHash("sha256").update(data).digest("hex");
}

function utf8(s: string): Uint8Array {
  return new TextEncoder().encode(s);
}

function lines(text: string): string[] {
  return text.split("\n").map((l) => l.trim()).filter(Boolean);
}

// ---- a ustar writer: just what a layer and a layout need ----

type TarEntry =
  | { path: string; type: "dir"; mode: number }
  | { path: string; type: "file"; mode: number; data: Uint8Array }
  | { path: string; type: "symlink"; linkname: string };

/** A POSIX ustar archive of `entries`, owned by root, dated {@link EPOCH_SECONDS}. */
function tar(entries: readonly TarEntry[]): Uint8Array {
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (const e of entries) {
    const data = e.type === "file" ? e.data : new Uint8Array(0);
    const header = tarHeader(e, data.length);
    chunks.push(header, data);
    total += header.length + data.length;
    const pad = (512 - (data.length % 512)) % 512;
    if (pad > 0) {
      chunks.push(new Uint8Array(pad));
      total += pad;
    }
  }
  chunks.push(new Uint8Array(1024)); // two zero blocks end the archive
  total += 1024;
  const out = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

function tarHeader(e: TarEntry, size: number): Uint8Array {
  const h = new Uint8Array(512);
  const put = (offset: number, length: number, value: string) => {
    const bytes = utf8(value);
    if (bytes.length > length) {
      throw new ImageBuildError(`tar field too long for '${e.path}': '${value}'`);
    }
    h.set(bytes, offset);
  };
  const octal = (offset: number, length: number, n: number) =>
    put(offset, length, n.toString(8).padStart(length - 1, "0") + "\0");
  put(0, 100, e.path);
  octal(100, 8, e.type === "symlink" ? 0o777 : e.mode);
  octal(108, 8, 0); // uid
  octal(116, 8, 0); // gid
  octal(124, 12, size);
  octal(136, 12, EPOCH_SECONDS);
  h.fill(0x20, 148, 156); // checksum counts as spaces while summing
  put(156, 1, e.type === "file" ? "0" : e.type === "dir" ? "5" : "2");
  if (e.type === "symlink") put(157, 100, e.linkname);
  put(257, 6, "ustar\0");
  put(263, 2, "00");
  put(265, 32, "root");
  put(297, 32, "root");
  let sum = 0;
  for (const b of h) sum += b;
  put(148, 8, sum.toString(8).padStart(6, "0") + "\0 ");
  return h;
}

// ---- packages ----

/**
 * Installs busybox-static when {@link BUSYBOX_BINARY} is missing, or is the dynamically linked
 * one from Debian's `busybox` package (busybox-static replaces it).
 */
export async function ensureImagePackages(): Promise<void> {
  const present = await findProgram(BUSYBOX_BINARY);
  if (!present || hasInterpreter(await Deno.readFile(present))) {
    await aptInstall(["busybox-static"]);
  }
}
