/**
 * @module
 * Builds the device components the device end-to-end tests run on our node (issue 43), from
 * k8s.io/kubernetes {@link KUBERNETES_VERSION} (the module e2e.test is built from), each into an
 * OCI image imported into a given containerd. Nothing is pulled.
 *
 * - `sampledeviceplugin` (test/images/sample-device-plugin): upstream's sample device plugin,
 *   under the image name upstream's e2e manifests give it,
 *   {@link SAMPLE_DEVICE_PLUGIN_IMAGE}; entrypoint `/sampledeviceplugin -alsologtostderr` as its
 *   Dockerfile has it (main() parses no flags, so the flag changes nothing). Both manifests in
 *   test/e2e/testing-manifests/sample-device-plugin/ name tag 1.7, while the image directory's
 *   VERSION says 1.8.0 (the next image, not yet referenced): the build checks both
 *   ({@link checkSampleDevicePluginSource}) and tags 1.7 so upstream's manifests run unchanged.
 * - `dra-test-driver` (test/e2e/dra/test-driver): the DRA test driver, whose `kubelet-plugin`
 *   subcommand is a DRA kubelet plugin. Upstream publishes no image of it (its README: "there
 *   are no container images that contain the test driver"; e2e.test runs the plugin in its own
 *   process behind a hostpathplugin proxy pod), so it gets a local name,
 *   {@link DRA_TEST_DRIVER_IMAGE}, with the program as the entrypoint and no arguments (as `go run
 *   ./test/e2e/dra/test-driver` in the README): a pod passes `kubelet-plugin --node-name=...`.
 *
 * The programs are built by tests/control_plane_build.ts's ensureBinary into its cache
 * (`bin/<name>-v1.36.3/<name>`) as upstream's test/images/image-util.sh builds test images:
 * `CGO_ENABLED=0`, `-ldflags -w` (symbols kept), with the staging modules replaced by their
 * published v0.36.3. Neither program prints a version, so a cached program is recognized by the
 * module version `go version -m` reads from it (k8s.io/kubernetes v1.36.3). The images are
 * tests/images.ts images (busybox-static with its applet links, for upstream's alpine base)
 * with the program at `/<name>`.
 *
 * What a pod of each needs (v1.36.3):
 * - the sample plugin reads `PLUGIN_SOCK_DIR` (default /var/lib/kubelet/device-plugins/, its
 *   socket `dp.<unix time>`), `CDI_ENABLED` (any value: writes {@link SAMPLE_CDI_SPEC_PATH} and
 *   answers Allocate with CDI device names) and `REGISTER_CONTROL_FILE` (registers only once
 *   that file is deleted); it always registers at /var/lib/kubelet/device-plugins/kubelet.sock
 *   and panics when that fails (10 s dial timeout), so the pod needs that hostPath (and
 *   /var/run/cdi with CDI_ENABLED);
 * - the driver's `kubelet-plugin` needs `--node-name`, a kubeconfig (`--kubeconfig`,
 *   `KUBECONFIG` or the in-cluster service account), its datadir
 *   /var/lib/kubelet/plugins/test-driver.cdi.k8s.io to exist already (it creates only the
 *   parent), /var/lib/kubelet/plugins_registry, and /var/run/cdi for the CDI specs it writes.
 *   It publishes its own ResourceSlice and installs its SIGTERM handler only once the
 *   apiserver answered (a SIGTERM before kills it, leaving its sockets).
 *
 * Build times measured here on 2026-12-06 (2 CPUs shared with other builds, load average 1 to
 * 3; `GOMAXPROCS=2 nice -n 10`; Go 1.26.8; every module already in the module cache, so nothing
 * was downloaded and no proxy was asked):
 * - with an empty Go build cache: sampledeviceplugin 54 s, then dra-test-driver 57 s (reusing
 *   the packages the first compiled), 1m51s for both;
 * - with the build cache of the e2e.test and kubelet builds (e2e.test links the driver's `app`
 *   package): 2.1 s and 3.2 s;
 * - from this module's cache: under 0.1 s.
 * The programs are static, 24 MiB and 57 MiB. Both images built and imported into containerd
 * in 5.2 s the first time, 1.3 s from the image cache. The e2e test in
 * tests/device_build_test.ts, everything cached: 18 s, 10 s of them the sample plugin's
 * registration timeout.
 *
 * Run it alone with `deno run -A tests/device_build.ts`: it builds the programs and prints them.
 */

import {
  type BinarySpec,
  ensureBinary,
  formatDuration,
  KUBERNETES_VERSION,
  stagingReplaces,
} from "./control_plane_build.ts";
import { type BuiltImage, type ImageSpec, importImages } from "./images.ts";
import { moduleVersionIn } from "./csi_build.ts";
import { findProgram, lastLines } from "./apt.ts";

/** The module both programs come from. */
export const KUBERNETES_MODULE = "k8s.io/kubernetes";

/** What test/e2e/testing-manifests/sample-device-plugin/*.yaml name (v1.36.3). */
export const SAMPLE_DEVICE_PLUGIN_IMAGE =
  "registry.k8s.io/e2e-test-images/sample-device-plugin:1.7";
/** What test/images/sample-device-plugin/VERSION says at v1.36.3. */
export const SAMPLE_DEVICE_PLUGIN_SOURCE_VERSION = "1.8.0";
/** The DRA test driver's image: a local name, as upstream publishes none. */
export const DRA_TEST_DRIVER_IMAGE = `kubelet-ts.local/dra-test-driver:${KUBERNETES_VERSION}`;

/** The extended resource the sample plugin advertises (sampledeviceplugin.go `resourceName`). */
export const SAMPLE_DEVICE_RESOURCE = "example.com/resource";
/** Its two devices, both healthy (sampledeviceplugin.go main). */
export const SAMPLE_DEVICE_IDS: readonly string[] = ["Dev-1", "Dev-2"];
/** The CDI spec it writes when `CDI_ENABLED` is set, removed again when it ends. */
export const SAMPLE_CDI_SPEC_PATH = "/var/run/cdi/example.com.json";
/** The DRA test driver's default `--drivername`. */
export const DRA_TEST_DRIVER_NAME = "test-driver.cdi.k8s.io";

/** One program of k8s.io/kubernetes and the image it goes into. */
export interface DeviceComponent {
  /** The program: its name in the build cache and its path in the image (`/<name>`). */
  name: string;
  /** The main package. */
  pkg: string;
  /** Full image reference. */
  image: string;
  /** The image config's Entrypoint. */
  entrypoint: readonly string[];
  /** Checks the downloaded module before a build (e.g. that the image name still matches). */
  verify?: (moduleDir: string) => Promise<void>;
}

/** The program, or its image, could not be built, or is not what was pinned. */
export class DeviceBuildError extends Error {
  override name = "DeviceBuildError";
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

const SAMPLE_DIR = "test/images/sample-device-plugin";
const SAMPLE_MANIFESTS = [
  "test/e2e/testing-manifests/sample-device-plugin/sample-device-plugin.yaml",
  "test/e2e/testing-manifests/sample-device-plugin/sample-device-plugin-control-registration.yaml",
];

/**
 * Checks a k8s.io/kubernetes module tree against what {@link SAMPLE_DEVICE_PLUGIN_IMAGE} assumes:
 * the image directory's VERSION and Dockerfile entrypoint, and the image both e2e manifests name.
 */
export async function checkSampleDevicePluginSource(moduleDir: string): Promise<void> {
  const version = (await Deno.readTextFile(`${moduleDir}/${SAMPLE_DIR}/VERSION`)).trim();
  if (version !== SAMPLE_DEVICE_PLUGIN_SOURCE_VERSION) {
    throw new DeviceBuildError(
      `Cannot build the sample device plugin: ${SAMPLE_DIR}/VERSION in the module says ` +
        `'${version}'; the recipe was written for '${SAMPLE_DEVICE_PLUGIN_SOURCE_VERSION}'`,
    );
  }
  const dockerfile = await Deno.readTextFile(`${moduleDir}/${SAMPLE_DIR}/Dockerfile`);
  const entrypoint = /^ENTRYPOINT\s+(\[.*\])\s*$/m.exec(dockerfile)?.[1];
  const ours = SAMPLE_DEVICE_PLUGIN.entrypoint;
  if (!entrypoint || JSON.stringify(JSON.parse(entrypoint)) !== JSON.stringify(ours)) {
    throw new DeviceBuildError(
      `Cannot build the sample device plugin: its Dockerfile's ENTRYPOINT is ` +
        `${entrypoint ?? "(none)"}, not ${JSON.stringify(ours)}`,
    );
  }
  for (const manifest of SAMPLE_MANIFESTS) {
    const text = await Deno.readTextFile(`${moduleDir}/${manifest}`);
    const images = [...text.matchAll(/^\s*-?\s*image:\s*(\S+)\s*$/gm)].map((m) => m[1]);
    if (images.length !== 1 || images[0] !== SAMPLE_DEVICE_PLUGIN_IMAGE) {
      throw new DeviceBuildError(
        `Cannot build the sample device plugin: ${manifest} names ` +
          `${images.join(", ") || "no image"}, not ${SAMPLE_DEVICE_PLUGIN_IMAGE}`,
      );
    }
  }
}

/** The sample device plugin: test/images/sample-device-plugin as its Dockerfile packs it. */
export const SAMPLE_DEVICE_PLUGIN: DeviceComponent = {
  name: "sampledeviceplugin",
  pkg: `${KUBERNETES_MODULE}/${SAMPLE_DIR}`,
  image: SAMPLE_DEVICE_PLUGIN_IMAGE,
  entrypoint: ["/sampledeviceplugin", "-alsologtostderr"],
  verify: checkSampleDevicePluginSource,
};

/** The DRA test driver (controller and kubelet plugin in one cobra command). */
export const DRA_TEST_DRIVER: DeviceComponent = {
  name: "dra-test-driver",
  pkg: `${KUBERNETES_MODULE}/test/e2e/dra/test-driver`,
  image: DRA_TEST_DRIVER_IMAGE,
  entrypoint: ["/dra-test-driver"],
};

/** Both components, in the order they are built. */
export const DEVICE_COMPONENTS: readonly DeviceComponent[] = [
  SAMPLE_DEVICE_PLUGIN,
  DRA_TEST_DRIVER,
];

/** How ensureBinary builds a component: as image-util.sh builds test images. */
export function binarySpec(c: DeviceComponent): BinarySpec {
  return {
    name: c.name,
    version: KUBERNETES_VERSION,
    module: KUBERNETES_MODULE,
    pkg: c.pkg,
    // Neither program has a version flag: builtKubernetesVersion checks the build instead.
    expectVersion: KUBERNETES_VERSION,
    ldflags: [],
    keepSymbols: true,
    cgo: false,
    replaces: (goMod) => stagingReplaces(goMod, KUBERNETES_VERSION),
    verify: c.verify,
  };
}

/** The image a component's program goes into: the program at `/<name>`. */
export function imageSpec(c: DeviceComponent, binary: string): ImageSpec {
  return {
    name: c.image,
    entrypoint: c.entrypoint,
    executables: { [`/${c.name}`]: binary },
    labels: {
      "org.opencontainers.image.version": KUBERNETES_VERSION,
      "kubelet-ts.source": `${c.pkg}@${KUBERNETES_VERSION}`,
    },
  };
}

/** The version of k8s.io/kubernetes `go version -m` reads from a built program. */
export async function builtKubernetesVersion(
  binary: string,
  signal?: AbortSignal,
): Promise<string | undefined> {
  const go = await findProgram("go");
  if (!go) throw new DeviceBuildError(`Cannot read ${binary}'s build info: 'go' is not on PATH`);
  const out = await new Deno.Command(go, {
    args: ["version", "-m", binary],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal,
  }).output();
  if (!out.success) {
    throw new DeviceBuildError(
      `'go version -m ${binary}' failed with code ${out.code}: ` +
        lastLines(new TextDecoder().decode(out.stderr), 5),
    );
  }
  return moduleVersionIn(new TextDecoder().decode(out.stdout), KUBERNETES_MODULE);
}

/** The components named, in {@link DEVICE_COMPONENTS} order; an unknown name is an error. */
export function selectComponents(names?: readonly string[]): DeviceComponent[] {
  if (!names) return [...DEVICE_COMPONENTS];
  for (const name of names) {
    if (!DEVICE_COMPONENTS.some((c) => c.name === name)) {
      throw new DeviceBuildError(
        `Unknown device component '${name}': expected one of ` +
          DEVICE_COMPONENTS.map((c) => c.name).join(", "),
      );
    }
  }
  return DEVICE_COMPONENTS.filter((c) => names.includes(c.name));
}

/** Options for {@link ensureDeviceBinaries}. */
export interface DeviceBuildOptions {
  /**
   * Which components to build, by program name.
   * @default all of {@link DEVICE_COMPONENTS}
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

/**
 * Builds the programs unless the cache holds them, one after another (each `go build` already
 * uses every core), checks each holds k8s.io/kubernetes {@link KUBERNETES_VERSION}, and returns
 * their paths by name. A failed build throws ensureBinary's ControlPlaneBuildError, which quotes
 * go's own message.
 */
export async function ensureDeviceBinaries(
  opts: DeviceBuildOptions = {},
): Promise<Map<string, string>> {
  const log = opts.log ?? ((line: string) => console.error(line));
  const started = performance.now();
  const built = new Map<string, string>();
  for (const c of selectComponents(opts.components)) {
    opts.signal?.throwIfAborted();
    const path = await ensureBinary(binarySpec(c), { signal: opts.signal, log });
    const got = await builtKubernetesVersion(path, opts.signal);
    if (got !== KUBERNETES_VERSION) {
      throw new DeviceBuildError(
        `${path} holds ${KUBERNETES_MODULE} ${got ?? "(not at all)"}, not ${KUBERNETES_VERSION}`,
      );
    }
    built.set(c.name, path);
  }
  log(
    `device-build: ${built.size} programs ready in ${formatDuration(performance.now() - started)}`,
  );
  return built;
}

/** Options for {@link ensureDeviceImages}: those of {@link ensureDeviceBinaries} and the import's. */
export interface DeviceImagesOptions extends DeviceBuildOptions {
  /** containerd's gRPC socket (a path, not `unix://`). */
  containerdSocket: string;
  /**
   * containerd namespace to import into; CRI uses `k8s.io`.
   * @default "k8s.io"
   */
  namespace?: string;
  /** Where built images are cached (tests/images.ts). */
  cacheDir?: string;
}

/** Paths and images of {@link ensureDeviceImages}. */
export interface DeviceImages {
  /** Program paths in the build cache, by name. */
  binaries: Map<string, string>;
  /** The images imported, in {@link DEVICE_COMPONENTS} order. */
  images: BuiltImage[];
}

/**
 * Builds the programs and their images unless cached, and imports the images into containerd
 * (tests/images.ts importImages, which checks `ctr images ls` lists each name).
 */
export async function ensureDeviceImages(opts: DeviceImagesOptions): Promise<DeviceImages> {
  const log = opts.log ?? ((line: string) => console.error(line));
  const binaries = await ensureDeviceBinaries({ ...opts, log });
  const started = performance.now();
  const images = await importImages({
    containerdSocket: opts.containerdSocket,
    images: selectComponents(opts.components).map((c) => imageSpec(c, binaries.get(c.name)!)),
    namespace: opts.namespace,
    cacheDir: opts.cacheDir,
    signal: opts.signal,
  });
  log(
    `device-build: ${images.length} images built and imported in ` +
      formatDuration(performance.now() - started),
  );
  return { binaries, images };
}

if (import.meta.main) {
  const built = await ensureDeviceBinaries();
  for (const [name, path] of built) console.log(`${name}\t${path}`);
}
