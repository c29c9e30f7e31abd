/**
 * @module
 * The images upstream's e2e conformance suite (`e2e.test` of k8s.io/kubernetes
 * {@link KUBERNETES_VERSION}) pulls by exact name, built here and imported into containerd's
 * `k8s.io` namespace under those names, because no registry is reachable. Given the list
 * `e2e.test --list-images` prints, {@link planConformanceImage} picks a recipe per name and
 * {@link ensureConformanceImages} builds, imports and reports every name as one of:
 * - "built": the upstream program built from its Go module (agnhost, nonewprivs,
 *   regression-issue-74839, and kitten and nautilus, which are agnhost plus upstream's files);
 *   `reason` then says how the rest of the image differs from upstream's;
 * - "stand-in": a substitute (busybox, pause, nginx, httpd), `reason` saying how it differs;
 * - "missing": not built, `reason` saying why.
 * The report is what the conformance harness writes into its results, so stand-ins are named.
 * With {@link ConformanceImagesOptions.mirror}, the images of one registry host are also pushed
 * to a local registry that serves that host for containerd, for the specs that pull them
 * (pullPolicy Always: the ImageVolume spec pulls kitten).
 *
 * Go programs come from `test/images/` of the k8s.io/kubernetes module with CGO off, in a
 * wrapper module made as tests/control_plane_build.ts makes kube-apiserver's (its
 * {@link wrapperGoMod} and {@link stagingReplaces}), and are cached beside its programs
 * (`bin/<name>-<version>/<name>` under {@link controlPlaneCacheDir}). Their images are the
 * busybox userland tests/images.ts builds (read back from the layer it writes) plus the program
 * and the files upstream's Dockerfile adds, written by deploy/oci_layout.ts; upstream builds them
 * with test/images/image-util.sh and docker buildx on alpine or debian-base instead. Stand-ins
 * are tests/images.ts images. Built images are cached under `<cache>/images/`.
 *
 * It talks to `go` (module download, build), `ctr` (import, list), the mirror registry (push,
 * tests/registry_harness.ts) and the file system.
 */

import { gunzipSync } from "node:zlib";
import {
  blobPath,
  buildOciImage,
  type ImageRuntimeConfig,
  parseReference,
  sha256Hex,
  type TarEntry,
} from "../deploy/oci_layout.ts";
import {
  controlPlaneCacheDir,
  downloadGoModule,
  ensureBinary,
  formatDuration,
  KUBERNETES_VERSION,
  stagingReplaces,
} from "./control_plane_build.ts";
import {
  buildImage,
  buildImageLayout,
  ctrOrThrow,
  type HostPrograms,
  type ImageSpec,
  PAUSE,
} from "./images.ts";
import { aptInstallMissing, type AptPackage } from "./apt.ts";
import { BUSYBOX_VERSION, ensureBusybox } from "./busybox_build.ts";
import { pushImage } from "./registry_harness.ts";
import { exists } from "./child_process.ts";

/** How one requested image ends up. */
export type ImageStatus = "built" | "stand-in" | "missing";

/** The outcome for one requested name. */
export interface ImageOutcome {
  /** The name as requested (and imported). */
  name: string;
  status: ImageStatus;
  /** What it was built from; absent when missing. */
  source?: string;
  /**
   * One line. Stand-in: how it differs from upstream's image; missing: why it is absent;
   * built: how the image around the program differs from upstream's, if it does.
   */
  reason?: string;
  /** The reference it was pushed as into the mirror registry, if it was. */
  pushed?: string;
}

/** What {@link ensureConformanceImages} did, one entry per distinct requested name, in order. */
export interface ImageReport {
  images: ImageOutcome[];
}

/** A Go program under `test/images/` of the k8s.io/kubernetes module. */
export interface GoProgram {
  /** Name of the binary and of its cache folder. */
  name: string;
  /** Its main package. */
  pkg: string;
  /** Its image's folder in the module; the `VERSION` file there must hold {@link version}. */
  imageDir: string;
  /** The image version this recipe was written for. */
  version: string;
  /** Linker flags besides `-w` (upstream's image-util.sh passes `-w ${LD_FLAGS}`). */
  ldflags: readonly string[];
  /** Arguments that make it print {@link version}; without them, a cached binary is trusted. */
  versionArgs?: readonly string[];
}

/**
 * An image of Go programs from the module (none for some stand-ins) and of this machine's
 * programs on the busybox userland of tests/images.ts.
 */
export interface GoImageRecipe {
  kind: "go";
  /** Programs and where they go in the image (absolute path, permission bits). */
  programs: readonly { program: GoProgram; path: string; mode: number }[];
  /** Files copied from the module: path in the module → absolute path in the image. */
  moduleFiles?: Readonly<Record<string, string>>;
  /** Text files by absolute path, as {@link ImageSpec.files} (they replace the defaults). */
  files?: Readonly<Record<string, string>>;
  /** Executable text files (mode 0755) by absolute path, e.g. shell stand-ins for tools. */
  scripts?: Readonly<Record<string, string>>;
  /** Empty directories to create (absolute paths). */
  dirs?: readonly string[];
  /** Symbolic links: absolute path → target. */
  symlinks?: Readonly<Record<string, string>>;
  /**
   * Dynamically linked programs of this machine with their libraries (tests/images.ts's
   * {@link HostPrograms}), from the Debian `packages` named, installed first when missing.
   */
  host?: { packages: readonly AptPackage[]; programs: HostPrograms };
  config: ImageRuntimeConfig;
}

/** An image tests/images.ts builds from an {@link ImageSpec} alone (its name is the request's). */
export interface BusyboxRecipe {
  kind: "busybox";
  /**
   * The image's busybox is {@link BUSYBOX_VERSION} built from source (tests/busybox_build.ts)
   * rather than Debian's busybox-static.
   */
  fromSource?: boolean;
  spec: Omit<ImageSpec, "name">;
}

/** What {@link planConformanceImage} decided for one name. */
export type ImagePlan =
  | {
    name: string;
    status: "built" | "stand-in";
    source: string;
    reason?: string;
    recipe: GoImageRecipe | BusyboxRecipe;
  }
  | { name: string; status: "missing"; reason: string };

/** Options for {@link ensureConformanceImages}. */
export interface ConformanceImagesOptions {
  /** The image names, as `e2e.test --list-images` prints them (see {@link parseImageList}). */
  names: readonly string[];
  /** The containerd to import into: `address` is its socket path (not `unix://`). */
  ctr: { address: string };
  /**
   * Where built image tarballs go (tests/images.ts's base images included).
   * @default `${controlPlaneCacheDir()}/images`
   */
  cacheDir?: string;
  /** Aborting it stops a running `go` and the whole call (which then throws). */
  signal?: AbortSignal;
  /** Receives progress lines. @default console.error */
  log?: (line: string) => void;
  /**
   * A local registry that serves registry host `host` in its place (tests/containerd_harness.ts's
   * registryMirrors): each image made whose name is on `host` is pushed there too, under the same
   * repository path and tag (`registry.k8s.io/e2e-test-images/kitten:1.8` as
   * `127.0.0.1:PORT/e2e-test-images/kitten:1.8`). `registry` is its `host:port`.
   * @default none: images are only imported
   */
  mirror?: { host: string; registry: string };
}

/** A program or image could not be built. */
export class ConformanceImageError extends Error {
  override name = "ConformanceImageError";
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

/** The module the Go programs come from. */
export const KUBERNETES_MODULE = "k8s.io/kubernetes";
/** Upstream's registry for its e2e test images (`PromoterE2eRegistry` in manifest.go). */
export const E2E_REGISTRY = "registry.k8s.io/e2e-test-images";
/** The agnhost version k8s.io/kubernetes {@link KUBERNETES_VERSION} ships and names. */
export const AGNHOST_VERSION = "2.63.0";
/** What nginx's default `index.html` says, and so what the nginx stand-in serves. */
export const NGINX_WELCOME = "Welcome to nginx!";
/**
 * `/etc/os-release` of the images upstream builds on agnhost (kitten, nautilus): the fields of
 * alpine 3.21's, which agnhost's base gives them upstream, over this harness's busybox userland.
 * The ImageVolume conformance spec reads "Alpine Linux" from kitten's.
 */
export const ALPINE_OS_RELEASE =
  `# kubelet-ts stand-in (tests/conformance_images.ts): alpine 3.21's fields; the userland
# is Debian's busybox-static.
NAME="Alpine Linux"
ID=alpine
PRETTY_NAME="Alpine Linux v3.21"
HOME_URL="https://alpinelinux.org/"
`;

/** agnhost (`test/images/agnhost`), versioned the way its Makefile does it. */
export const AGNHOST: GoProgram = {
  name: "agnhost",
  pkg: `${KUBERNETES_MODULE}/test/images/agnhost`,
  imageDir: "test/images/agnhost",
  version: AGNHOST_VERSION,
  ldflags: [`-X main.Version=${AGNHOST_VERSION}`],
  versionArgs: ["--version"],
};

/** nonewprivs' `nnp`, which prints its effective uid (it is installed setuid root). */
const NNP: GoProgram = {
  name: "nnp",
  pkg: `${KUBERNETES_MODULE}/test/images/nonewprivs`,
  imageDir: "test/images/nonewprivs",
  version: "1.4",
  ldflags: [],
};

const REGRESSION_74839: GoProgram = {
  name: "regression-issue-74839",
  pkg: `${KUBERNETES_MODULE}/test/images/regression-issue-74839`,
  imageDir: "test/images/regression-issue-74839",
  version: "1.4",
  ldflags: [],
};

// What `adduser -u 1000 -D user-defined-in-image`, `addgroup -g 50000 group-defined-in-image`
// and `addgroup user-defined-in-image group-defined-in-image` add in agnhost's Dockerfile.
const AGNHOST_PASSWD = [
  "root:x:0:0:root:/root:/bin/sh",
  "nobody:x:65534:65534:nobody:/nonexistent:/bin/false",
  "user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh",
  "",
].join("\n");
const AGNHOST_GROUP = [
  "root:x:0:",
  "nobody:x:65534:",
  "user-defined-in-image:x:1000:",
  "group-defined-in-image:x:50000:user-defined-in-image",
  "",
].join("\n");

/**
 * `curl` as e2e tests call it (`curl http://<ip>:<port>/path`, with -s/-S/-f/-L and -o FILE),
 * over busybox's wget: many tests (lifecycle hooks among them) curl from agnhost pods, and
 * upstream's agnhost image has curl from alpine.
 */
const CURL_STAND_IN = `#!/bin/sh
# kubelet-ts stand-in for curl (tests/conformance_images.ts): GETs one URL with busybox wget.
out=-
url=
while [ $# -gt 0 ]; do
  case "$1" in
    -o|--output) out="$2"; shift 2 ;;
    -m|--max-time|--connect-timeout|-H|--header|-X|--request) shift 2 ;;
    -*) shift ;;
    *) url="$1"; shift ;;
  esac
done
[ -n "$url" ] || { echo "curl: no URL specified" >&2; exit 2; }
exec wget -q -O "$out" "$url"
`;

/**
 * Tools of agnhost's Dockerfile (alpine's bind-tools, netcat-openbsd, bash) as this machine's
 * Debian bookworm has them, with their glibc libraries: `dig` (the DNS probers loop on
 * `dig +noall +answer +search`), `nc` (the Services specs run `nc -v -t -w 2 <name> 80`, which
 * busybox's nc refuses), glibc's `getent` (the /etc/hosts probers) and bash, which is `/bin/sh`
 * too: Debian's busybox-static runs its own applets before PATH (nc among them), alpine's
 * busybox does not. The glibc programs resolve names, which busybox-static cannot.
 */
const AGNHOST_TOOLS: NonNullable<GoImageRecipe["host"]> = {
  packages: [
    { pkg: "bind9-dnsutils", provides: ["/usr/bin/dig"] },
    { pkg: "netcat-openbsd", provides: ["/usr/bin/nc.openbsd"] },
    { pkg: "libc-bin", provides: ["/usr/bin/getent"] },
    { pkg: "bash", provides: ["/usr/bin/bash"] },
  ],
  programs: {
    programs: ["/usr/bin/dig", "/usr/bin/nc.openbsd", "/usr/bin/getent", "/usr/bin/bash"],
  },
};

/** Hosts from /etc/hosts before DNS, as musl (alpine) and Debian's default nsswitch.conf do. */
const NSSWITCH = "hosts: files dns\n";

/** agnhost's image as its Dockerfile makes it, minus what alpine's packages bring. */
const AGNHOST_IMAGE: GoImageRecipe = {
  kind: "go",
  programs: [{ program: AGNHOST, path: "/agnhost", mode: 0o755 }],
  moduleFiles: {
    "test/images/agnhost/porter/localhost.crt": "/localhost.crt",
    "test/images/agnhost/porter/localhost.key": "/localhost.key",
  },
  files: {
    "/etc/passwd": AGNHOST_PASSWD,
    "/etc/group": AGNHOST_GROUP,
    "/etc/nsswitch.conf": NSSWITCH,
  },
  scripts: { "/usr/bin/curl": CURL_STAND_IN },
  dirs: ["/uploads"],
  symlinks: {
    "/agnhost-2": "agnhost",
    "/usr/bin/nc": "nc.openbsd",
    "/bin/bash": "/usr/bin/bash",
    "/bin/sh": "/usr/bin/bash",
  },
  host: AGNHOST_TOOLS,
  config: { Entrypoint: ["/agnhost"], Cmd: ["pause"] },
};

const AGNHOST_DIFFERS = "on Debian's busybox-static, not alpine 3.21: curl is a shell " +
  "stand-in over busybox wget (one URL, GET); dig, nc (netcat-openbsd), getent and bash " +
  "(also /bin/sh) are this machine's Debian's with glibc, not alpine's; no iperf, ss or " +
  "util-linux (busybox has wget, nslookup, ip); no /coredns, no fake registry in " +
  "/var/registry; no ExposedPorts in its config (deploy/oci_layout.ts cannot write them)";

const NGINX_INDEX = `<!DOCTYPE html>
<html>
<head>
<title>${NGINX_WELCOME}</title>
<style>
html { color-scheme: light dark; }
body { width: 35em; margin: 0 auto;
font-family: Tahoma, Verdana, Arial, sans-serif; }
</style>
</head>
<body>
<h1>${NGINX_WELCOME}</h1>
<p>If you see this page, the nginx web server is successfully installed and
working. Further configuration is required.</p>

<p>For online documentation and support please refer to
<a href="http://nginx.org/">nginx.org</a>.<br/>
Commercial support is available at
<a href="http://nginx.com/">nginx.com</a>.</p>

<p><em>Thank you for using nginx.</em></p>
</body>
</html>
`;

/** Serves `root` with busybox httpd in the foreground on port 80, as the upstream servers do. */
function httpdStandIn(root: string, index: string): BusyboxRecipe {
  return {
    kind: "busybox",
    spec: {
      cmd: ["httpd", "-f", "-p", "80", "-h", root],
      exposedPorts: ["80/tcp"],
      files: { [`${root}/index.html`]: index },
    },
  };
}

/** An {@link ImagePlan} without its name, for each kind of plan. */
type PlanBody =
  | Omit<Extract<ImagePlan, { status: "missing" }>, "name">
  | Omit<Exclude<ImagePlan, { status: "missing" }>, "name">;

type Recipe = (tag: string) => PlanBody;

const missing = (reason: string): Recipe => () => ({ status: "missing", reason });

/** An agnhost-based image of upstream's `test/images/<dir>` (kitten, nautilus). */
function agnhostWithFiles(dir: string, picture: string): Recipe {
  return () => ({
    status: "built",
    source: `agnhost ${AGNHOST_VERSION} and test/images/${dir}/html (VERSION 1.9 in the tree) ` +
      `of ${KUBERNETES_MODULE} ${KUBERNETES_VERSION}`,
    reason: `${AGNHOST_DIFFERS}; /etc/os-release is a stand-in with alpine 3.21's NAME, ID and ` +
      `PRETTY_NAME ('Alpine Linux', which the ImageVolume conformance spec reads from kitten)`,
    recipe: {
      ...AGNHOST_IMAGE,
      files: { ...AGNHOST_IMAGE.files, "/etc/os-release": ALPINE_OS_RELEASE },
      moduleFiles: {
        ...AGNHOST_IMAGE.moduleFiles,
        [`test/images/${dir}/html/${picture}`]: `/${picture}`,
        [`test/images/${dir}/html/data.json`]: "/data.json",
      },
      config: { ...AGNHOST_IMAGE.config, Cmd: ["test-webserver"] },
    },
  });
}

/** Recipes by repository (the name without its tag). */
const RECIPES: ReadonlyMap<string, Recipe> = new Map<string, Recipe>([
  [`${E2E_REGISTRY}/agnhost`, (tag) => {
    const source = `${AGNHOST.pkg} of ${KUBERNETES_MODULE} ${KUBERNETES_VERSION}`;
    if (tag === AGNHOST_VERSION) {
      return { status: "built", source, reason: AGNHOST_DIFFERS, recipe: AGNHOST_IMAGE };
    }
    return {
      status: "stand-in",
      source,
      reason: `agnhost ${AGNHOST_VERSION} under the ${tag} tag: subcommands and flags changed ` +
        `since ${tag} behave as in ${AGNHOST_VERSION}; same base as agnhost:${AGNHOST_VERSION}`,
      recipe: AGNHOST_IMAGE,
    };
  }],
  [`${E2E_REGISTRY}/busybox`, () => ({
    status: "stand-in",
    source: `busybox ${BUSYBOX_VERSION} built from its release source (tests/busybox_build.ts)`,
    reason: `busybox ${BUSYBOX_VERSION} with busybox's defconfig, statically linked with ` +
      "glibc and without tc, not Docker Hub's busybox:1.37.0 image",
    recipe: { kind: "busybox", fromSource: true, spec: { cmd: ["sh"] } },
  })],
  ["registry.k8s.io/pause", () => ({
    status: "stand-in",
    source: "the sandbox image of tests/images.ts (PAUSE)",
    reason: "a busybox sh loop, not upstream's pause.c: like pause it blocks until SIGTERM or " +
      "SIGINT and reaps orphans",
    recipe: { kind: "busybox", spec: { entrypoint: PAUSE.entrypoint } },
  })],
  [`${E2E_REGISTRY}/nginx`, () => ({
    status: "stand-in",
    source: "busybox httpd (tests/images.ts)",
    reason: `busybox httpd, not nginx: serves nginx's default index.html ('${NGINX_WELCOME}') ` +
      "from /usr/share/nginx/html on port 80; no nginx binary or config",
    recipe: httpdStandIn("/usr/share/nginx/html", NGINX_INDEX),
  })],
  [`${E2E_REGISTRY}/httpd`, () => ({
    status: "stand-in",
    source: "busybox httpd (tests/images.ts)",
    reason: "busybox httpd, not Apache httpd: serves Apache's 'It works!' page from " +
      "/usr/local/apache2/htdocs on port 80; no httpd binary or config",
    recipe: httpdStandIn(
      "/usr/local/apache2/htdocs",
      "<html><body><h1>It works!</h1></body></html>\n",
    ),
  })],
  [`${E2E_REGISTRY}/kitten`, agnhostWithFiles("kitten", "kitten.jpg")],
  [`${E2E_REGISTRY}/nautilus`, agnhostWithFiles("nautilus", "nautilus.jpg")],
  [`${E2E_REGISTRY}/nonewprivs`, () => ({
    status: "built",
    source: `${NNP.pkg} of ${KUBERNETES_MODULE} ${KUBERNETES_VERSION}`,
    reason: "on Debian's busybox-static, not alpine 3.22",
    recipe: {
      kind: "go",
      programs: [{ program: NNP, path: "/usr/local/bin/nnp", mode: 0o4755 }],
      config: { Cmd: ["nnp"] },
    },
  })],
  [`${E2E_REGISTRY}/regression-issue-74839`, () => ({
    status: "built",
    source: `${REGRESSION_74839.pkg} of ${KUBERNETES_MODULE} ${KUBERNETES_VERSION}`,
    reason: "on Debian's busybox-static, not debian-base bookworm",
    recipe: {
      kind: "go",
      programs: [{ program: REGRESSION_74839, path: "/regression-issue-74839", mode: 0o755 }],
      config: { Entrypoint: ["/regression-issue-74839"] },
    },
  })],
  [
    "gcr.io/k8s-authenticated-test/agnhost",
    missing(
      "deliberately not built: tests pull it from a private gcr.io registry with credentials, " +
        "which is unreachable here; a local copy would fake that pull",
    ),
  ],
  [
    "invalid.registry.k8s.io/invalid/alpine",
    missing(
      "deliberately not built: tests expect pulling it to fail",
    ),
  ],
  [
    `${E2E_REGISTRY}/nonroot`,
    missing(
      "needs 'User: 1234' in the image config, which neither tests/images.ts nor " +
        "deploy/oci_layout.ts can write",
    ),
  ],
  [
    `${E2E_REGISTRY}/sample-apiserver`,
    missing(
      "built from k8s.io/sample-apiserver v0.29, a module graph of its own; only the aggregator " +
        "spec uses it",
    ),
  ],
  [
    "registry.k8s.io/etcd",
    missing(
      "only the aggregator spec uses it, next to sample-apiserver, which is missing",
    ),
  ],
  [
    `${E2E_REGISTRY}/apparmor-loader`,
    missing(
      "needs AppArmor's userland (apparmor_parser) from alpine, which busybox lacks",
    ),
  ],
  [
    "registry.k8s.io/build-image/distroless-iptables",
    missing(
      "iptables and nftables userland on distroless, not a Go program of test/images",
    ),
  ],
  [
    `${E2E_REGISTRY}/ipc-utils`,
    missing(
      "needs util-linux's ipcmk (alpine 3.22 with util-linux); busybox has no ipcmk",
    ),
  ],
  [`${E2E_REGISTRY}/glibc-dns-testing`, () => ({
    status: "stand-in",
    source: "this machine's Debian dig (bind9-dnsutils), getent and dash (/bin/sh) " +
      "with their glibc libraries, on Debian's busybox-static",
    reason: "not debian:bookworm-slim: the userland besides dig, getent and sh is busybox " +
      "(awk, hostname, seq); no /coredns (1.5.0 upstream), which no spec runs from it",
    recipe: {
      kind: "go",
      programs: [],
      files: { "/etc/nsswitch.conf": NSSWITCH },
      symlinks: { "/bin/sh": "/usr/bin/dash" },
      host: {
        packages: [
          { pkg: "bind9-dnsutils", provides: ["/usr/bin/dig"] },
          { pkg: "libc-bin", provides: ["/usr/bin/getent"] },
          { pkg: "dash", provides: ["/usr/bin/dash"] },
        ],
        programs: { programs: ["/usr/bin/dig", "/usr/bin/getent", "/usr/bin/dash"] },
      },
      config: { Cmd: ["sh"] },
    },
  })],
  [
    "registry.k8s.io/sig-storage/nfs-provisioner",
    missing(
      "an NFS server (nfs-ganesha) for storage tests; not buildable from a Go module alone",
    ),
  ],
  [`${E2E_REGISTRY}/perl`, missing("needs a perl interpreter (Docker Hub's perl image)")],
  [
    `${E2E_REGISTRY}/resource-consumer`,
    missing(
      "needs Debian's stress beside consumer and consume-cpu (debian-base); autoscaling tests only",
    ),
  ],
  [
    `${E2E_REGISTRY}/volume/nfs`,
    missing(
      "an NFS server on CentOS Stream 9 (nfs-utils); not a Go program",
    ),
  ],
  [
    `${E2E_REGISTRY}/volume/iscsi`,
    missing(
      "an iSCSI target on Fedora (targetcli); not a Go program",
    ),
  ],
]);

/** Recipes for whole families of repositories, by prefix, when no exact one matches. */
const PREFIX_RECIPES: readonly [string, Recipe][] = [
  [
    `${E2E_REGISTRY}/node-perf/`,
    missing(
      "a benchmark workload (NAS Parallel Benchmarks or PyTorch) for node-perf tests; not built",
    ),
  ],
  [
    "registry.k8s.io/sig-storage/",
    missing(
      "a CSI driver or sidecar from github.com/kubernetes-csi for test/e2e/storage's CSI " +
        "deployments; not built",
    ),
  ],
  ["registry.k8s.io/cloud-provider-gcp/", missing("a GCE CSI driver; needs GCE; not built")],
];

/** Decides how `name` is made: which recipe, and what the report will say. Pure. */
export function planConformanceImage(name: string): ImagePlan {
  let ref: { name: string; tag: string };
  try {
    ref = parseReference(name);
  } catch {
    return { name, status: "missing", reason: "not an image reference of the form repo:tag" };
  }
  const recipe = RECIPES.get(ref.name) ??
    PREFIX_RECIPES.find(([prefix]) => ref.name.startsWith(prefix))?.[1] ??
    missing(
      `no recipe: not an image ${KUBERNETES_MODULE} ${KUBERNETES_VERSION}'s e2e suite names`,
    );
  return { name, ...recipe(ref.tag) };
}

/** `e2e-test-images/kitten:1.8` of `registry.k8s.io/e2e-test-images/kitten:1.8` on that host. */
export function mirroredPath(name: string, host: string): string | undefined {
  return name.startsWith(`${host}/`) ? name.slice(host.length + 1) : undefined;
}

/** The distinct image names in the output of `e2e.test --list-images`, in order. */
export function parseImageList(stdout: string): string[] {
  return [...new Set(stdout.split("\n").map((l) => l.trim()).filter(Boolean))];
}

/** The report as text: a summary line, then one line per image. */
export function formatImageReport(report: ImageReport): string {
  const count = (s: ImageStatus) => report.images.filter((i) => i.status === s).length;
  const lines = [
    `conformance images: ${count("built")} built, ${count("stand-in")} stand-in, ` +
    `${count("missing")} missing`,
  ];
  for (const i of report.images) {
    const from = i.source ? ` (from ${i.source})` : "";
    lines.push(`${i.status.padEnd(8)} ${i.name}${from}${i.reason ? `: ${i.reason}` : ""}`);
  }
  return lines.join("\n") + "\n";
}

const NAMESPACE = "k8s.io";
// Bump when what buildGoImage writes changes, so cached tarballs are not reused.
const RECIPE_VERSION = "1";

interface Context {
  imagesDir: string;
  signal?: AbortSignal;
  log: (line: string) => void;
  /** k8s.io/kubernetes in the module cache (downloaded on first use). */
  module: () => Promise<{ dir: string; goMod: string }>;
}

/**
 * Builds and imports every image of `names` it has a recipe for into containerd's `k8s.io`
 * namespace, then checks that `ctr images ls` lists them. A build or import that fails makes
 * that name "missing" with the error as reason (and a log line); aborting throws.
 */
export async function ensureConformanceImages(
  opts: ConformanceImagesOptions,
): Promise<ImageReport> {
  const log = opts.log ?? ((line: string) => console.error(line));
  const socket = opts.ctr.address;
  const ctx: Context = {
    imagesDir: opts.cacheDir ?? `${controlPlaneCacheDir()}/images`,
    signal: opts.signal,
    log,
    module: once(() =>
      downloadGoModule(KUBERNETES_MODULE, KUBERNETES_VERSION, { signal: opts.signal })
    ),
  };
  const outcomes: ImageOutcome[] = [];
  for (const plan of parseImageList(opts.names.join("\n")).map(planConformanceImage)) {
    opts.signal?.throwIfAborted();
    if (plan.status === "missing") {
      outcomes.push({ name: plan.name, status: "missing", reason: plan.reason });
      continue;
    }
    const { name, status, source, reason } = plan;
    try {
      const started = performance.now();
      const tarball = plan.recipe.kind === "busybox"
        ? await buildImage({
          image: { ...plan.recipe.spec, name },
          cacheDir: ctx.imagesDir,
          busybox: plan.recipe.fromSource
            ? await ensureBusybox({ signal: opts.signal, log })
            : undefined,
        })
        : await buildGoImage(name, plan.recipe, ctx);
      await ctrOrThrow(socket, NAMESPACE, ["images", "import", tarball], {
        what: `import ${name}`,
        signal: opts.signal,
      });
      // The registry serves the same manifest as the import, so a pull finds it unpacked.
      const path = opts.mirror ? mirroredPath(name, opts.mirror.host) : undefined;
      let pushed: string | undefined;
      if (opts.mirror && path !== undefined) {
        const to = { registry: opts.mirror.registry, image: { tarball }, ref: path };
        pushed = (await pushImage({ ...to, signal: opts.signal })).ref;
      }
      log(
        `conformance-images: ${status} ${name}${pushed ? `, pushed as ${pushed},` : ""} in ` +
          formatDuration(performance.now() - started),
      );
      outcomes.push({
        name,
        status,
        source,
        ...(reason ? { reason } : {}),
        ...(pushed ? { pushed } : {}),
      });
    } catch (err) {
      if (opts.signal?.aborted) throw err;
      const why = err instanceof Error ? err.message : String(err);
      log(`conformance-images: cannot make ${name}: ${why}`);
      outcomes.push({
        name,
        status: "missing",
        reason: `build, import or push failed: ${oneLine(why)}`,
      });
    }
  }
  if (outcomes.some((o) => o.status !== "missing")) {
    const listed = new Set(
      (await ctrOrThrow(socket, NAMESPACE, ["images", "ls", "-q"], {
        what: "list images",
        signal: opts.signal,
      })).split("\n").map((l) => l.trim()),
    );
    for (const [i, o] of outcomes.entries()) {
      if (o.status !== "missing" && !listed.has(o.name)) {
        outcomes[i] = {
          name: o.name,
          status: "missing",
          reason: `imported, but 'ctr -n ${NAMESPACE} images ls' does not list it`,
        };
      }
    }
  }
  return { images: outcomes };
}

/** Builds (or finds in the cache) the image of a {@link GoImageRecipe}; returns its tarball. */
async function buildGoImage(name: string, recipe: GoImageRecipe, ctx: Context): Promise<string> {
  if (recipe.host) await aptInstallMissing(recipe.host.packages);
  const added: TarEntry[] = [];
  for (const p of recipe.programs) {
    const data = await Deno.readFile(await ensureGoProgram(p.program, ctx));
    added.push({ path: relative(p.path), type: "file", mode: p.mode, data });
  }
  for (const [from, to] of Object.entries(recipe.moduleFiles ?? {})) {
    const data = await Deno.readFile(`${(await ctx.module()).dir}/${from}`);
    added.push({ path: relative(to), type: "file", mode: 0o644, data });
  }
  for (const [path, text] of Object.entries(recipe.scripts ?? {})) {
    const data = new TextEncoder().encode(text);
    added.push({ path: relative(path), type: "file", mode: 0o755, data });
  }
  for (const dir of recipe.dirs ?? []) {
    added.push({ path: `${relative(dir)}/`, type: "dir", mode: 0o755 });
  }
  for (const [path, linkname] of Object.entries(recipe.symlinks ?? {})) {
    added.push({ path: relative(path), type: "symlink", linkname });
  }

  // The userland: what tests/images.ts puts into every image, with the recipe's text files.
  const base = await buildImageLayout({
    image: { name, files: recipe.files, hostPrograms: recipe.host?.programs },
    cacheDir: ctx.imagesDir,
  });
  const key = sha256Hex(JSON.stringify([
    RECIPE_VERSION,
    name,
    base.manifestDigest,
    recipe.config,
    added.map((e) => e.type === "file" ? { ...e, data: sha256Hex(e.data) } : e),
  ])).slice(0, 16);
  const dir = `${ctx.imagesDir}/conformance`;
  const tarball = `${dir}/${name.replace(/[^A-Za-z0-9.-]+/g, "_")}-${key}.tar`;
  if (await exists(tarball)) return tarball;

  const layer = readTar(
    gunzipSync(await Deno.readFile(`${base.layoutDir}/${blobPath(base.layerDigest)}`)),
  );
  const config = JSON.parse(
    await Deno.readTextFile(`${base.layoutDir}/${blobPath(base.configDigest)}`),
  );
  const paths = new Set(layer.map((e) => e.path.replace(/\/$/, "")));
  for (const e of added) {
    for (const parent of parents(e.path)) {
      if (!paths.has(parent)) {
        layer.push({ path: `${parent}/`, type: "dir", mode: 0o755 });
        paths.add(parent);
      }
    }
    const bare = e.path.replace(/\/$/, "");
    if (paths.has(bare)) {
      // A recipe's link may take the place of a busybox applet's (/bin/sh), nothing else.
      const at = layer.findIndex((b) => b.path.replace(/\/$/, "") === bare);
      const old = layer[at];
      if (e.type !== "symlink" || old?.type !== "symlink" || old.linkname !== "busybox") {
        throw new ConformanceImageError(`Cannot build ${name}: '/${bare}' is already in the base`);
      }
      layer.splice(at, 1);
    }
    layer.push(e);
    paths.add(bare);
  }
  const image = buildOciImage({
    name,
    layer,
    config: recipe.config,
    architecture: config.architecture,
    createdBy: "kubelet-ts tests/conformance_images.ts",
  });
  await Deno.mkdir(dir, { recursive: true });
  const temp = `${tarball}.tmp-${Deno.pid}-${crypto.randomUUID().slice(0, 8)}`;
  try {
    await Deno.writeFile(temp, image.archive);
    await Deno.rename(temp, tarball);
  } finally {
    await Deno.remove(temp).catch(() => {});
  }
  return tarball;
}

/**
 * Builds `program` from k8s.io/kubernetes {@link KUBERNETES_VERSION} (CGO off, `-w` as
 * upstream's image-util.sh links) unless the cache holds it, and returns its path: through
 * tests/control_plane_build.ts's ensureBinary, with the program's VERSION file checked first.
 */
async function ensureGoProgram(program: GoProgram, ctx: Context): Promise<string> {
  return await ensureBinary({
    name: program.name,
    version: KUBERNETES_VERSION,
    module: KUBERNETES_MODULE,
    pkg: program.pkg,
    versionArgs: program.versionArgs ? [...program.versionArgs] : undefined,
    expectVersion: program.version,
    ldflags: [...program.ldflags],
    keepSymbols: true,
    replaces: (goMod) => stagingReplaces(goMod, KUBERNETES_VERSION),
    verify: async (moduleDir) => {
      const version = (await Deno.readTextFile(`${moduleDir}/${program.imageDir}/VERSION`)).trim();
      if (version !== program.version) {
        throw new ConformanceImageError(
          `Cannot build ${program.name}: ${program.imageDir}/VERSION in the module says ` +
            `'${version}'; the recipe was written for '${program.version}'`,
        );
      }
    },
  }, { signal: ctx.signal, log: ctx.log });
}

/** Reads a POSIX ustar archive (as deploy/oci_layout.ts and tests/images.ts write them). */
export function readTar(archive: Uint8Array): TarEntry[] {
  const dec = new TextDecoder();
  const field = (h: Uint8Array, at: number, len: number) =>
    dec.decode(h.subarray(at, at + len)).replace(/\0.*$/s, "");
  const octal = (h: Uint8Array, at: number, len: number) =>
    parseInt(field(h, at, len).trim() || "0", 8);
  const entries: TarEntry[] = [];
  for (let at = 0; at + 512 <= archive.length;) {
    const h = archive.subarray(at, at + 512);
    if (h.every((b) => b === 0)) break; // the end-of-archive blocks
    const prefix = field(h, 345, 155);
    const path = prefix ? `${prefix}/${field(h, 0, 100)}` : field(h, 0, 100);
    const size = octal(h, 124, 12);
    const type = String.fromCharCode(h[156] ?? 0);
    const data = archive.slice(at + 512, at + 512 + size);
    if (data.length !== size) {
      throw new ConformanceImageError(`tar entry '${path}' is cut short`);
    }
    const mode = octal(h, 100, 8) & 0o7777;
    if (type === "0" || type === "\0") entries.push({ path, type: "file", mode, data });
    else if (type === "5") entries.push({ path, type: "dir", mode });
    else if (type === "2") entries.push({ path, type: "symlink", linkname: field(h, 157, 100) });
    else throw new ConformanceImageError(`tar entry '${path}' has unsupported type '${type}'`);
    at += 512 + Math.ceil(size / 512) * 512;
  }
  return entries;
}

/** `a/b/` and `a/` of `a/b/c` (without the trailing slash), outermost first. */
function parents(path: string): string[] {
  const parts = path.replace(/\/$/, "").split("/").slice(0, -1);
  return parts.map((_, i) => parts.slice(0, i + 1).join("/"));
}

function relative(path: string): string {
  if (!path.startsWith("/") || path.endsWith("/") || path.split("/").includes("..")) {
    throw new ConformanceImageError(
      `Image paths in recipes must be absolute file paths without '..': current value is ` +
        `'${path}'`,
    );
  }
  return path.slice(1);
}

function once<T>(f: () => Promise<T>): () => Promise<T> {
  let p: Promise<T> | undefined;
  return () => (p ??= f());
}

function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, " | ");
}

if (import.meta.main) {
  // deno run -A tests/conformance_images.ts <containerd socket> < <(e2e.test --list-images)
  const socket = Deno.args[0];
  if (!socket) {
    console.error(
      "Usage: e2e.test --list-images | deno run -A tests/conformance_images.ts <socket>",
    );
    Deno.exit(2);
  }
  const names = parseImageList(await new Response(Deno.stdin.readable).text());
  const report = await ensureConformanceImages({ names, ctr: { address: socket } });
  console.log(formatImageReport(report));
}
