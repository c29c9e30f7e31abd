/**
 * @module
 * Builds the CSI components the persistent-storage end-to-end tests deploy (issue 42): the CSI
 * hostpath driver and the sidecars it runs with, from github.com/kubernetes-csi, each from its Go
 * module at one pinned release, into an OCI image under the name and tag upstream publishes it
 * as (registry.k8s.io/sig-storage/...), imported into a given containerd. Nothing is pulled.
 *
 * - hostpathplugin: csi-driver-host-path v1.17.0, image `hostpathplugin`;
 * - csi-node-driver-registrar: node-driver-registrar v2.15.0 (at a pseudo-version, see below);
 * - csi-provisioner: external-provisioner/v6 v6.4.0;
 * - csi-attacher: external-attacher/v4 v4.13.0;
 * - csi-resizer: external-resizer/v2 v2.3.0;
 * - livenessprobe: livenessprobe v2.17.0 (at a pseudo-version).
 * Each sidecar's image is `registry.k8s.io/sig-storage/<program>:<tag>`. e2e.test v1.36.3's
 * storage manifests name other tags (hostpathplugin v1.17.1, csi-provisioner v6.1.1,
 * csi-attacher v4.11.0, csi-resizer v2.1.0, registrar v2.16.0, livenessprobe v2.18.0), which the
 * module proxy refuses too (tried: v6.1.1, v4.11.0, v2.1.0).
 *
 * The programs are built by tests/control_plane_build.ts's ensureBinary into its cache
 * (`bin/<name>-<version>/<name>`, reused while it reports the pinned version), statically
 * (`CGO_ENABLED=0`), with the flags of kubernetes-csi's release-tools/build.make: `-X
 * main.version=<tag>`, which `--version` prints as `<argv0> <tag>`. The replace lines of each
 * upstream go.mod that name published modules are copied into the wrapper module, as for
 * containerd (tests/runtime_build.ts). node-driver-registrar and livenessprobe tag v2 releases on
 * module paths without `/v2`, which the go command refuses as module versions; they are required
 * at the pseudo-version of the tagged commit (`v1.3.1-0.<time>-<commit>` for the registrar, whose
 * newest valid v1 tag is v1.3.0). livenessprobe has no version flag (its main.go defines no
 * `version`): its build is recognized by the module version `go version -m` reads from it.
 *
 * The images are tests/images.ts images (busybox-static with its applet links, which upstream's
 * distroless sidecar images lack) with the program at upstream's entrypoint path (`/<name>`).
 * hostpathplugin runs tools at run time; busybox provides what it calls with the flags it uses:
 * `mount` and `umount` (k8s.io/mount-utils), `losetup -f FILE` and `-d` (block volumes through
 * volumepathhandler), `fallocate -l`, `dd`, `cp -a`, `tar czf`/`zxvf` (snapshots, clones),
 * `blockdev`, `du`. Missing: `findmnt` (util-linux, not in busybox; Debian has no static build):
 * without it NodeGetVolumeStats reports the volume condition abnormal ("findmnt not found"),
 * stats themselves still work. Upstream's alpine image also has socat, which the plugin itself
 * does not run.
 *
 * Served by the Go module proxy on 2026-12-06: external-provisioner/v6 (v6.3.0, v6.4.0),
 * external-attacher/v4 (v4.12.0, v4.13.0), external-resizer/v2 (v2.2.0, v2.3.0). The proxy
 * answers "403 Forbidden: This module version is not available" for every version, tag or
 * pseudo-version tried of csi-driver-host-path (v1.12.0 to v1.19.0), node-driver-registrar and
 * livenessprobe; {@link ensureCsiImages} builds what it can and then names each failure with go's
 * own message ({@link CsiBuildError}). Their versions here are the release tags as upstream's git
 * has them, not yet built.
 *
 * Build times measured here on 2026-12-06 (2 CPUs shared with a CI run and other builds, load
 * average about 7; `GOMAXPROCS=2 nice -n 10`; Go 1.26.8; the module cache already held most
 * k8s.io 0.36/0.37 modules from the control-plane builds), first build / from the cache:
 * csi-provisioner 3m26s / 0.1s, csi-attacher 4m17s / 0.1s, csi-resizer 3m44s / 0.1s (the three
 * 11m28s cold, 0.2s cached; the three refused modules add 0.4s each). The programs are static,
 * 66 to 69 MiB each. Each image (a 20 MiB tarball) took about 3 s to build and 1 s to import
 * into containerd; from the image cache, 1.0 s with the import. The e2e test, everything cached
 * (three images imported, three refusals, three `ctr run --version`): 5 s.
 *
 * tests/setup.ts does not call this yet: a cold build of the programs takes minutes.
 * Run it alone with `deno run -A tests/csi_build.ts`: it builds the programs and prints them.
 */

import {
  type BinarySpec,
  ControlPlaneBuildError,
  ensureBinary,
  formatDuration,
} from "./control_plane_build.ts";
import { type BuiltImage, type ImageSpec, importImages } from "./images.ts";
import { publishedReplaces } from "./runtime_build.ts";
import { findProgram, lastLines } from "./apt.ts";

/** Where upstream publishes the CSI images. */
export const SIG_STORAGE_REGISTRY = "registry.k8s.io/sig-storage";

/** The CSI hostpath driver's release: registry.k8s.io/sig-storage/hostpathplugin:v1.17.0. */
export const HOSTPATHPLUGIN_VERSION = "v1.17.0";
/** node-driver-registrar: registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.15.0. */
export const NODE_DRIVER_REGISTRAR_VERSION = "v2.15.0";
/** external-provisioner: registry.k8s.io/sig-storage/csi-provisioner:v6.4.0. */
export const EXTERNAL_PROVISIONER_VERSION = "v6.4.0";
/** external-attacher: registry.k8s.io/sig-storage/csi-attacher:v4.13.0. */
export const EXTERNAL_ATTACHER_VERSION = "v4.13.0";
/** external-resizer: registry.k8s.io/sig-storage/csi-resizer:v2.3.0. */
export const EXTERNAL_RESIZER_VERSION = "v2.3.0";
/** livenessprobe: registry.k8s.io/sig-storage/livenessprobe:v2.17.0. */
export const LIVENESSPROBE_VERSION = "v2.17.0";

/** One CSI program: how it is built, and the image it goes into. */
export interface CsiComponent {
  /** The program, which is also the image's repository name except for the driver. */
  name: string;
  /** The release tag, which is the image tag and what `--version` prints. */
  version: string;
  /** The Go module. */
  module: string;
  /** The module version required, when the tag is none (see the module doc). @default version */
  moduleVersion?: string;
  /** The main package. */
  pkg: string;
  /** Full image reference, as upstream publishes it. */
  image: string;
  /** Whether `<name> --version` prints `<argv0> <version>`. */
  hasVersionFlag: boolean;
}

const CSI = "github.com/kubernetes-csi";

/** The six components, keyed by program name, in the order they are built. */
export const CSI_COMPONENTS: readonly CsiComponent[] = [
  {
    name: "csi-provisioner",
    version: EXTERNAL_PROVISIONER_VERSION,
    module: `${CSI}/external-provisioner/v6`,
    pkg: `${CSI}/external-provisioner/v6/cmd/csi-provisioner`,
    image: `${SIG_STORAGE_REGISTRY}/csi-provisioner:${EXTERNAL_PROVISIONER_VERSION}`,
    hasVersionFlag: true,
  },
  {
    name: "csi-attacher",
    version: EXTERNAL_ATTACHER_VERSION,
    module: `${CSI}/external-attacher/v4`,
    pkg: `${CSI}/external-attacher/v4/cmd/csi-attacher`,
    image: `${SIG_STORAGE_REGISTRY}/csi-attacher:${EXTERNAL_ATTACHER_VERSION}`,
    hasVersionFlag: true,
  },
  {
    name: "csi-resizer",
    version: EXTERNAL_RESIZER_VERSION,
    module: `${CSI}/external-resizer/v2`,
    pkg: `${CSI}/external-resizer/v2/cmd/csi-resizer`,
    image: `${SIG_STORAGE_REGISTRY}/csi-resizer:${EXTERNAL_RESIZER_VERSION}`,
    hasVersionFlag: true,
  },
  {
    name: "hostpathplugin",
    version: HOSTPATHPLUGIN_VERSION,
    module: `${CSI}/csi-driver-host-path`,
    pkg: `${CSI}/csi-driver-host-path/cmd/hostpathplugin`,
    image: `${SIG_STORAGE_REGISTRY}/hostpathplugin:${HOSTPATHPLUGIN_VERSION}`,
    hasVersionFlag: true,
  },
  {
    name: "csi-node-driver-registrar",
    version: NODE_DRIVER_REGISTRAR_VERSION,
    module: `${CSI}/node-driver-registrar`,
    // The commit tagged v2.15.0 (87d60a92e312, committed 2025-09-12T16:08:09Z).
    moduleVersion: "v1.3.1-0.20250912160809-87d60a92e312",
    pkg: `${CSI}/node-driver-registrar/cmd/csi-node-driver-registrar`,
    image: `${SIG_STORAGE_REGISTRY}/csi-node-driver-registrar:${NODE_DRIVER_REGISTRAR_VERSION}`,
    hasVersionFlag: true,
  },
  {
    name: "livenessprobe",
    version: LIVENESSPROBE_VERSION,
    module: `${CSI}/livenessprobe`,
    // The commit tagged v2.17.0 (064a1024b628, committed 2025-09-12T16:34:08Z); v1.1.0 is the
    // newest v1 tag.
    moduleVersion: "v1.1.1-0.20250912163408-064a1024b628",
    pkg: `${CSI}/livenessprobe/cmd/livenessprobe`,
    image: `${SIG_STORAGE_REGISTRY}/livenessprobe:${LIVENESSPROBE_VERSION}`,
    hasVersionFlag: false,
  },
];

/** One or more CSI programs could not be built or imported; `failures` says which and why. */
export class CsiBuildError extends Error {
  override name = "CsiBuildError";
  constructor(
    message: string,
    readonly failures: ReadonlyMap<string, Error> = new Map(),
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** Options for {@link ensureCsiBinaries}. */
export interface CsiBuildOptions {
  /**
   * Which components to build, by program name.
   * @default all of {@link CSI_COMPONENTS}
   */
  components?: readonly string[];
  /** Aborting it stops a running `go` command and the build with it. */
  signal?: AbortSignal;
  /**
   * Receives progress lines (what is reused, what is built, how long it took).
   * @default console.error
   */
  log?: (line: string) => void;
}

/** Options for {@link ensureCsiImages}: those of {@link ensureCsiBinaries} and the import's. */
export interface CsiImagesOptions extends CsiBuildOptions {
  /** containerd's gRPC socket (a path, not `unix://`). */
  containerdSocket: string;
  /** @default "k8s.io" */
  namespace?: string;
  /** Where built images are cached. @default tests/images.ts's `.cache/images` */
  cacheDir?: string;
}

/** The components named, in {@link CSI_COMPONENTS} order; an unknown name is an error. */
export function selectComponents(names?: readonly string[]): CsiComponent[] {
  if (names === undefined) return [...CSI_COMPONENTS];
  const known = new Set(CSI_COMPONENTS.map((c) => c.name));
  const unknown = names.filter((n) => !known.has(n));
  if (unknown.length > 0) {
    throw new CsiBuildError(
      `components must name CSI programs (${[...known].join(", ")}): current value has ` +
        `'${unknown.join("', '")}'`,
    );
  }
  return CSI_COMPONENTS.filter((c) => names.includes(c.name));
}

/**
 * Whether a `--version` output is `<argv0> <version>` for exactly this version (v6.4.0 is not
 * v6.4.0-rc.1 nor v6.4.01).
 */
export function reportsCsiVersion(output: string, version: string): boolean {
  return output.split("\n").some((line) => line.trim().split(/\s+/).at(-1) === version);
}

/**
 * The version of `module` that `go version -m <binary>` reports built in, as the main module
 * (`mod`) or a dependency (`dep`, which is what a wrapper module's build shows); undefined when
 * absent. A `=>` replacement line is not the module's own version.
 */
export function moduleVersionIn(goVersionM: string, module: string): string | undefined {
  for (const line of goVersionM.split("\n")) {
    const [kind, path, version] = line.trim().split(/\s+/);
    if ((kind === "dep" || kind === "mod") && path === module) return version;
  }
  return undefined;
}

/**
 * The `"Error"` of `go mod download -json` quoted in a build failure (what the module proxy
 * answered, e.g. "...: 403 Forbidden\n\tserver response: This module version is not
 * available."), else the message's last lines.
 */
export function briefGoError(message: string): string {
  const quoted = /"Error":\s*("(?:[^"\\]|\\.)*")/.exec(message)?.[1];
  if (quoted !== undefined) {
    try {
      return JSON.parse(quoted);
    } catch {
      // not JSON after all: fall through
    }
  }
  return lastLines(message, 4);
}

/** How ensureBinary builds a component's program. */
export function binarySpec(c: CsiComponent): BinarySpec {
  return {
    name: c.name,
    version: c.version,
    module: c.module,
    moduleVersion: c.moduleVersion,
    pkg: c.pkg,
    // release-tools/build.make: IMPORTPATH_LDFLAGS = -X main.version=$(REV).
    ldflags: [`-X main.version=${c.version}`],
    cgo: false,
    replaces: publishedReplaces,
    ...(c.hasVersionFlag
      ? {
        versionArgs: ["--version"],
        expectVersion: c.version,
        versionMatches: (output: string) => reportsCsiVersion(output, c.version),
      }
      : { expectVersion: c.version }),
  };
}

/** The image a component's program goes into: the program at `/<name>` as the entrypoint. */
export function imageSpec(c: CsiComponent, binary: string): ImageSpec {
  return {
    name: c.image,
    entrypoint: [`/${c.name}`],
    executables: { [`/${c.name}`]: binary },
    labels: { "org.opencontainers.image.version": c.version, "kubelet-ts.source": c.module },
  };
}

/**
 * What `go version -m` reads from a built program: the version of the component's module in it
 * (the check for livenessprobe, which has no version flag).
 */
export async function builtModuleVersion(
  binary: string,
  c: CsiComponent,
  signal?: AbortSignal,
): Promise<string | undefined> {
  const go = await findProgram("go");
  if (!go) throw new CsiBuildError(`Cannot read ${binary}'s build info: 'go' is not on PATH`);
  const out = await new Deno.Command(go, {
    args: ["version", "-m", binary],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal,
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    throw new CsiBuildError(
      `'go version -m ${binary}' failed with code ${out.code}: ` +
        lastLines(new TextDecoder().decode(out.stderr), 5),
    );
  }
  return moduleVersionIn(text, c.module);
}

/**
 * Builds the programs unless the cache holds them, one after another (each `go build` already
 * uses every core), and returns their paths by name. A component that fails does not stop the
 * others; afterwards one {@link CsiBuildError} names every failure.
 */
export async function ensureCsiBinaries(
  opts: CsiBuildOptions = {},
): Promise<Map<string, string>> {
  const { built, failure } = await buildEach(opts);
  if (failure) throw failure;
  return built;
}

async function buildEach(
  opts: CsiBuildOptions,
): Promise<{ built: Map<string, string>; failure?: CsiBuildError }> {
  const log = opts.log ?? ((line: string) => console.error(line));
  const started = performance.now();
  const built = new Map<string, string>();
  const failures = new Map<string, Error>();
  for (const c of selectComponents(opts.components)) {
    opts.signal?.throwIfAborted();
    try {
      const path = await ensureBinary(binarySpec(c), { signal: opts.signal, log });
      if (!c.hasVersionFlag) {
        const want = c.moduleVersion ?? c.version;
        const got = await builtModuleVersion(path, c, opts.signal);
        if (got !== want) {
          throw new CsiBuildError(
            `${path} holds ${c.module} ${got ?? "(not at all)"}, not ${want}`,
          );
        }
      }
      built.set(c.name, path);
    } catch (err) {
      opts.signal?.throwIfAborted();
      if (!(err instanceof ControlPlaneBuildError || err instanceof CsiBuildError)) throw err;
      log(`csi-build: ${c.name} ${c.version} failed: ${briefGoError(err.message)}`);
      failures.set(c.name, err);
    }
  }
  log(`csi-build: ${built.size} programs ready in ${formatDuration(performance.now() - started)}`);
  if (failures.size === 0) return { built };
  const lines = [...failures].map(([name, err]) => `- ${name}: ${briefGoError(err.message)}`);
  const failure = new CsiBuildError(
    `Cannot build ${failures.size} CSI program(s) (${built.size} built):\n${lines.join("\n")}`,
    failures,
  );
  return { built, failure };
}

/** Paths and images of {@link ensureCsiImages}. */
export interface CsiImages {
  /** Program paths in the build cache, by name. */
  binaries: Map<string, string>;
  /** The images imported, in {@link CSI_COMPONENTS} order. */
  images: BuiltImage[];
}

/**
 * Builds the programs and their images unless cached, and imports the images into containerd
 * (tests/images.ts importImages, which checks `ctr images ls` lists each name). When some
 * programs cannot be built, the others are still imported, then a {@link CsiBuildError} names
 * the failures.
 */
export async function ensureCsiImages(opts: CsiImagesOptions): Promise<CsiImages> {
  const log = opts.log ?? ((line: string) => console.error(line));
  const { built: binaries, failure } = await buildEach({ ...opts, log });
  const started = performance.now();
  const specs = selectComponents(opts.components)
    .filter((c) => binaries.has(c.name))
    .map((c) => imageSpec(c, binaries.get(c.name)!));
  const images = specs.length === 0 ? [] : await importImages({
    containerdSocket: opts.containerdSocket,
    images: specs,
    namespace: opts.namespace,
    cacheDir: opts.cacheDir,
    signal: opts.signal,
  });
  log(
    `csi-build: ${images.length} images built and imported in ` +
      formatDuration(performance.now() - started),
  );
  if (failure) throw failure;
  return { binaries, images };
}

if (import.meta.main) {
  const built = await ensureCsiBinaries();
  for (const [name, path] of built) console.log(`${name}\t${path}`);
}
