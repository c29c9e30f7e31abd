/**
 * @module
 * Every image `kubeadm init` {@link KUBERNETES_VERSION} runs (issue 44), built here from the
 * programs this repository builds offline and imported into a given containerd under the exact
 * names `kubeadm config images list --kubernetes-version v1.36.3` prints
 * ({@link KUBEADM_IMAGE_NAMES}), so kubeadm finds them present and pulls nothing. They are
 * tests/images.ts images: one layer on Debian's static busybox with its applet links, where
 * upstream's are distroless (no shell); everything else follows upstream's layout:
 *
 * - kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy: as
 *   k/k build/server-image/Dockerfile packs them, the program at `/usr/local/bin/<name>` and
 *   kube-log-runner at `/go-runner`, the `ENTRYPOINT`. kubeadm's static pod manifests
 *   (phases/controlplane/manifests.go) run `kube-apiserver` etc. by name through `PATH`, and its
 *   kube-proxy DaemonSet (phases/addons/proxy/manifests.go) runs `/usr/local/bin/kube-proxy`.
 *   Upstream gives kube-apiserver `cap_net_bind_service` as a file capability; ours has none.
 * - kube-proxy also gets iptables, iptables-save, iptables-restore and their ip6tables
 *   counterparts: what `/usr/sbin/iptables` resolves to on this machine (xtables-nft-multi
 *   here, so the nft backend) with its shared libraries and the xtables extension modules
 *   ({@link HostPrograms}). Upstream's image (distroless-iptables) ships both backends and
 *   iptables-wrapper, which picks one on first use by looking at the rules the host has; ours
 *   has only the host's backend. `nft` (for kube-proxy's nftables mode) is added when this
 *   machine has it.
 * - etcd: `/usr/local/bin/etcd` and `/go-runner`, as k/k cluster/images/etcd packs it on the
 *   go-runner base; etcdctl, etcdutl and the migrate tool are not built, and kubeadm's etcd
 *   manifest (phases/etcd/local.go) needs none of them (its probes are HTTP).
 * - CoreDNS: `/coredns`, `ENTRYPOINT ["/coredns"]`, ports 53/tcp and 53/udp, as coredns'
 *   Dockerfile has it, but run as root: upstream's runs as `nonroot` with
 *   `cap_net_bind_service` as a file capability on `/coredns`, which our layer cannot carry;
 *   kubeadm's Deployment drops all capabilities but NET_BIND_SERVICE either way.
 * - pause: tests/images.ts {@link PAUSE} under the 3.10.2 name: the busybox shell stand-in
 *   with the same `ENTRYPOINT`, not upstream's C pause program.
 *
 * The programs come from tests/control_plane_build.ts (kube-apiserver, etcd; kube-controller-
 * manager and kube-scheduler as the conformance tests build them), tests/kubeadm_build.ts
 * (kube-proxy, CoreDNS) and {@link KUBE_LOG_RUNNER_SPEC}; each is built unless its cache holds it.
 *
 * Run it alone with `deno run -A tests/kubeadm_images.ts`: it builds the programs and the images
 * (without importing them) and prints each image's name and layout tarball.
 */

import {
  type BinarySpec,
  ensureBinary,
  ensureControlPlaneBinaries,
  ensureKubeControllerManager,
  ensureKubeScheduler,
  ETCD_VERSION,
  formatDuration,
  KUBERNETES_VERSION,
  stagingVersion,
} from "./control_plane_build.ts";
import { COREDNS_SPEC, COREDNS_VERSION, KUBE_PROXY_SPEC } from "./kubeadm_build.ts";
import {
  buildImageLayout,
  type BuiltImage,
  type HostPrograms,
  type ImageSpec,
  importImages,
  PAUSE,
} from "./images.ts";
import { findProgram, lastLines } from "./apt.ts";
import { run } from "./child_process.ts";

/** The registry kubeadm names its images after (`imageRepository`'s default). */
export const KUBEADM_REGISTRY = "registry.k8s.io";
/** kubeadm 1.36's `PauseVersion` (cmd/kubeadm/app/constants). */
export const KUBEADM_PAUSE_VERSION = "3.10.2";
/** The sandbox image kubeadm expects the runtime to use. */
export const KUBEADM_PAUSE_IMAGE = `${KUBEADM_REGISTRY}/pause:${KUBEADM_PAUSE_VERSION}`;
/** kubeadm 1.36's `DefaultEtcdVersion`: the etcd release and the image revision. */
export const KUBEADM_ETCD_TAG = `${ETCD_VERSION.slice(1)}-0`;

/** What `kubeadm config images list --kubernetes-version v1.36.3` prints, in its order. */
export const KUBEADM_IMAGE_NAMES: readonly string[] = [
  `${KUBEADM_REGISTRY}/kube-apiserver:${KUBERNETES_VERSION}`,
  `${KUBEADM_REGISTRY}/kube-controller-manager:${KUBERNETES_VERSION}`,
  `${KUBEADM_REGISTRY}/kube-scheduler:${KUBERNETES_VERSION}`,
  `${KUBEADM_REGISTRY}/kube-proxy:${KUBERNETES_VERSION}`,
  `${KUBEADM_REGISTRY}/coredns/coredns:${COREDNS_VERSION}`,
  KUBEADM_PAUSE_IMAGE,
  `${KUBEADM_REGISTRY}/etcd:${KUBEADM_ETCD_TAG}`,
];

/**
 * kube-log-runner (k8s.io/component-base/logs/kube-log-runner), which upstream's server images
 * carry as `/go-runner`. It prints no version, so a cached build is trusted.
 */
export const KUBE_LOG_RUNNER_SPEC: BinarySpec = {
  name: "kube-log-runner",
  version: stagingVersion(KUBERNETES_VERSION),
  module: "k8s.io/component-base",
  pkg: "k8s.io/component-base/logs/kube-log-runner",
  expectVersion: stagingVersion(KUBERNETES_VERSION),
  ldflags: [],
};

/** The programs kube-proxy runs by name in iptables mode (pkg/util/iptables). */
export const KUBE_PROXY_IPTABLES_COMMANDS: readonly string[] = [
  "iptables",
  "iptables-save",
  "iptables-restore",
  "ip6tables",
  "ip6tables-save",
  "ip6tables-restore",
];

/** Paths of the programs the images hold. */
export interface KubeadmImageBinaries {
  kubeApiserver: string;
  kubeControllerManager: string;
  kubeScheduler: string;
  kubeProxy: string;
  etcd: string;
  coredns: string;
  /** kube-log-runner, `/go-runner` in the images. */
  goRunner: string;
}

/** An image could not be built, or kubeadm names other images than these. */
export class KubeadmImagesError extends Error {
  override name = "KubeadmImagesError";
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

/** One image of k8s.io/kubernetes's server images: the program in /usr/local/bin, /go-runner. */
function serverImage(name: string, binary: string, goRunner: string): ImageSpec {
  return {
    name: `${KUBEADM_REGISTRY}/${name}:${KUBERNETES_VERSION}`,
    entrypoint: ["/go-runner"],
    executables: { [`/usr/local/bin/${name}`]: binary, "/go-runner": goRunner },
    labels: {
      "org.opencontainers.image.version": KUBERNETES_VERSION,
      "kubelet-ts.source": `k8s.io/kubernetes/cmd/${name}@${KUBERNETES_VERSION}`,
    },
  };
}

/**
 * The image specs in {@link KUBEADM_IMAGE_NAMES} order, for the programs at `binaries` and
 * kube-proxy's `iptables` (see {@link findHostIptables}).
 */
export function kubeadmImageSpecs(
  binaries: KubeadmImageBinaries,
  iptables: HostPrograms,
): ImageSpec[] {
  const proxy = serverImage("kube-proxy", binaries.kubeProxy, binaries.goRunner);
  return [
    serverImage("kube-apiserver", binaries.kubeApiserver, binaries.goRunner),
    serverImage("kube-controller-manager", binaries.kubeControllerManager, binaries.goRunner),
    serverImage("kube-scheduler", binaries.kubeScheduler, binaries.goRunner),
    { ...proxy, hostPrograms: iptables },
    {
      name: `${KUBEADM_REGISTRY}/coredns/coredns:${COREDNS_VERSION}`,
      entrypoint: ["/coredns"],
      exposedPorts: ["53/tcp", "53/udp"],
      executables: { "/coredns": binaries.coredns },
      labels: {
        "org.opencontainers.image.version": COREDNS_VERSION,
        "kubelet-ts.source": `github.com/coredns/coredns@${COREDNS_VERSION}`,
      },
    },
    { ...PAUSE, name: KUBEADM_PAUSE_IMAGE },
    {
      name: `${KUBEADM_REGISTRY}/etcd:${KUBEADM_ETCD_TAG}`,
      entrypoint: ["/go-runner"],
      exposedPorts: ["2379/tcp", "2380/tcp", "4001/tcp", "7001/tcp"],
      executables: { "/usr/local/bin/etcd": binaries.etcd, "/go-runner": binaries.goRunner },
      labels: {
        "org.opencontainers.image.version": KUBEADM_ETCD_TAG,
        "kubelet-ts.source": `go.etcd.io/etcd/server/v3@${ETCD_VERSION}`,
      },
    },
  ];
}

/** Debian's multiarch triplet of this machine, where its libraries and xtables modules lie. */
function multiarch(): string {
  switch (Deno.build.arch) {
    case "x86_64":
      return "x86_64-linux-gnu";
    case "aarch64":
      return "aarch64-linux-gnu";
    default:
      throw new KubeadmImagesError(`Cannot find iptables' modules for '${Deno.build.arch}'`);
  }
}

/**
 * This machine's iptables for the kube-proxy image: each of
 * {@link KUBE_PROXY_IPTABLES_COMMANDS} as found on `PATH`, `nft` when present, and the xtables
 * extension modules (`/usr/lib/<multiarch>/xtables`, Debian's `XTABLES_LIBDIR`).
 */
export async function findHostIptables(): Promise<HostPrograms> {
  const programs: string[] = [];
  for (const name of KUBE_PROXY_IPTABLES_COMMANDS) {
    const path = await findProgram(name);
    if (!path) {
      throw new KubeadmImagesError(
        `Cannot build the kube-proxy image: '${name}' is not installed (package iptables)`,
      );
    }
    programs.push(path);
  }
  const nft = await findProgram("nft");
  if (nft) programs.push(nft);
  const moduleDir = `/usr/lib/${multiarch()}/xtables`;
  try {
    await Deno.stat(moduleDir);
  } catch (err) {
    throw new KubeadmImagesError(
      `Cannot build the kube-proxy image: iptables' modules are not in ${moduleDir} ` +
        `(${(err as Error).message})`,
      { cause: err },
    );
  }
  return { programs, moduleDirs: [moduleDir] };
}

/** Runs `kubeadm config images list --kubernetes-version` {@link KUBERNETES_VERSION}. */
export async function kubeadmImageList(kubeadm: string, signal?: AbortSignal): Promise<string[]> {
  const timeout = AbortSignal.timeout(30_000);
  const out = await run(
    [kubeadm, "config", "images", "list", "--kubernetes-version", KUBERNETES_VERSION],
    { signal: signal ? AbortSignal.any([signal, timeout]) : timeout },
  );
  if (out.code !== 0) {
    throw new KubeadmImagesError(
      `'${kubeadm} config images list' failed with code ${out.code}: ` +
        lastLines(out.stderr, 5),
    );
  }
  return out.stdout.split("\n").map((l) => l.trim()).filter(Boolean);
}

/** Options for {@link ensureKubeadmImageBinaries}. */
export interface KubeadmImagesBuildOptions {
  /** Aborting it stops a running `go` command and the build with it. */
  signal?: AbortSignal;
  /**
   * Receives progress lines.
   * @default console.error
   */
  log?: (line: string) => void;
}

/** Builds every program the images hold unless cached, one after another. */
export async function ensureKubeadmImageBinaries(
  opts: KubeadmImagesBuildOptions = {},
): Promise<KubeadmImageBinaries> {
  const build = { signal: opts.signal, log: opts.log ?? ((line: string) => console.error(line)) };
  const controlPlane = await ensureControlPlaneBinaries(build);
  return {
    kubeApiserver: controlPlane.kubeApiserver,
    etcd: controlPlane.etcd,
    kubeControllerManager: await ensureKubeControllerManager(build),
    kubeScheduler: await ensureKubeScheduler(build),
    kubeProxy: await ensureBinary(KUBE_PROXY_SPEC, build),
    coredns: await ensureBinary(COREDNS_SPEC, build),
    goRunner: await ensureBinary(KUBE_LOG_RUNNER_SPEC, build),
  };
}

/** Options for {@link ensureKubeadmImages}. */
export interface KubeadmImagesOptions extends KubeadmImagesBuildOptions {
  /** containerd's gRPC socket (a path, not `unix://`). */
  containerdSocket: string;
  /**
   * containerd namespace to import into; CRI, and so kubeadm's `crictl` checks, use `k8s.io`.
   * @default "k8s.io"
   */
  namespace?: string;
  /** Where built images are cached (tests/images.ts). */
  cacheDir?: string;
}

/** Paths and images of {@link ensureKubeadmImages}. */
export interface KubeadmImages {
  binaries: KubeadmImageBinaries;
  /** The images imported, in {@link KUBEADM_IMAGE_NAMES} order. */
  images: BuiltImage[];
}

/**
 * Builds the programs and the images unless cached, and imports the images into containerd
 * (tests/images.ts importImages, which checks `ctr images ls` lists each name).
 */
export async function ensureKubeadmImages(opts: KubeadmImagesOptions): Promise<KubeadmImages> {
  const log = opts.log ?? ((line: string) => console.error(line));
  const binaries = await ensureKubeadmImageBinaries({ ...opts, log });
  const started = performance.now();
  const images = await importImages({
    containerdSocket: opts.containerdSocket,
    images: kubeadmImageSpecs(binaries, await findHostIptables()),
    namespace: opts.namespace,
    cacheDir: opts.cacheDir,
    signal: opts.signal,
  });
  log(
    `kubeadm-images: ${images.length} images built and imported in ` +
      formatDuration(performance.now() - started),
  );
  return { binaries, images };
}

if (import.meta.main) {
  const binaries = await ensureKubeadmImageBinaries();
  const started = performance.now();
  for (const image of kubeadmImageSpecs(binaries, await findHostIptables())) {
    console.log(`${image.name}\t${(await buildImageLayout({ image })).tarball}`);
  }
  console.error(`kubeadm-images: built in ${formatDuration(performance.now() - started)}`);
}
