/**
 * @module
 * Builds containerd 2.x and the runc it drives, from their Go modules at one pinned release each,
 * so the end-to-end tests can run on containerd 2.x as well as on Debian's containerd 1.6:
 * `containerd`, `containerd-shim-runc-v2` and `ctr` from `github.com/containerd/containerd/v2`
 * {@link CONTAINERD2_VERSION}, `runc` from `github.com/opencontainers/runc` {@link RUNC_VERSION}.
 * It also writes the containerd 2.x config (schema version 3) that matches the containerd 1.6
 * config of tests/containerd_harness.ts ({@link containerd2Config}).
 *
 * The programs are built by tests/control_plane_build.ts's ensureBinary into its cache
 * (`bin/<name>-<version>/<name>`): a wrapper Go module requires the upstream module at the
 * pinned version, `go build` links under a temporary name, and the program is renamed into place
 * only when its version output reports exactly the pinned version; one already there that
 * reports it is reused. The flags follow upstream's Makefiles:
 * - containerd and ctr: cgo on (the Makefile leaves Go's default, which is on wherever gcc is),
 *   `-buildmode=pie`, tag `urfave_cli_no_docs`, `-X .../version.{Version,Package}` (Makefile,
 *   Makefile.linux).
 * - containerd-shim-runc-v2: `CGO_ENABLED=0` (static, as upstream's SHIM_CGO_ENABLED), tags
 *   `urfave_cli_no_docs no_grpc`.
 * - runc: `CGO_ENABLED=1` (libcontainer/nsenter is C), `-buildmode=pie`, tags `seccomp
 *   urfave_cli_no_docs`. Upstream adds `libpathrs`, a Rust library Debian 12 does not package;
 *   without the tag runc uses its Go fallback (pathrs-lite). runc's version comes from its
 *   embedded VERSION file, not from `-X`. seccomp needs Debian's `libseccomp-dev`, installed
 *   with apt-get when its header is missing.
 *
 * The revision (`version.Revision`, runc's `gitCommit`) stays empty: a module zip carries no
 * commit and the proxy's .info names none.
 *
 * How containerd finds this shim: not by PATH, where Debian's 1.6 shim (/usr/bin) would win, but
 * by `runtime_path` in each CRI runtime handler of {@link containerd2Config} (containerd keeps it
 * in the bundle's `shim-binary-path`, so it holds across restarts too). Tasks made outside CRI
 * (`ctr run`) resolve `io.containerd.runc.v2` by containerd's PATH, so a harness should also put
 * `dirname(shimRuncV2)` first on the PATH it starts containerd with. runc is named by the runtime
 * option `BinaryName`.
 *
 * Run it alone with `deno run -A tests/runtime_build.ts`: it prints the four paths.
 */

import { aptInstall, aptInstallMissing } from "./apt.ts";
import {
  CNI_BIN_DIR,
  confTemplate,
  SANDBOX_IMAGE,
  serverSections,
  toml,
} from "./containerd_harness.ts";
import {
  type BinarySpec,
  ControlPlaneBuildError,
  ensureBinary,
  formatDuration,
  parseReplaces,
  type Replace,
} from "./control_plane_build.ts";

/** The containerd 2.x release: the newest the Go module proxy serves. */
export const CONTAINERD2_VERSION = "v2.4.2";
/**
 * The runc release: the newest 1.5.x (a security fix over v1.5.2, which containerd v2.4.2's
 * script/setup/runc-version names as tested).
 */
export const RUNC_VERSION = "v1.5.3";

const CONTAINERD_MODULE = "github.com/containerd/containerd/v2";
const RUNC_MODULE = "github.com/opencontainers/runc";

/** Paths of the built programs, and the containerd version they are. */
export interface Containerd2Binaries {
  containerd: string;
  shimRuncV2: string;
  ctr: string;
  runc: string;
  /** {@link CONTAINERD2_VERSION}. */
  version: string;
}

/** Options for {@link ensureContainerd2}. */
export interface RuntimeBuildOptions {
  /** Aborting it stops a running `go` command and the build with it. */
  signal?: AbortSignal;
  /**
   * Receives progress lines (what is reused, what is built, how long it took, go's own output).
   * @default console.error
   */
  log?: (line: string) => void;
}

const CONTAINERD_LDFLAGS = [
  `-X ${CONTAINERD_MODULE}/version.Version=${CONTAINERD2_VERSION}`,
  `-X ${CONTAINERD_MODULE}/version.Package=${CONTAINERD_MODULE}`,
];

/** Exactly the pinned version ({@link reportedVersion}): v2.4.20 is not v2.4.2. */
const reports = (version: string) => (output: string) => reportedVersion(output) === version;

function containerdSpec(name: string, cgo: boolean, tags: string[]): BinarySpec {
  return {
    name,
    module: CONTAINERD_MODULE,
    version: CONTAINERD2_VERSION,
    pkg: `${CONTAINERD_MODULE}/cmd/${name}`,
    cgo,
    // Makefile.linux: PIE unless STATIC; the static shim is built without it.
    pie: cgo,
    tags,
    ldflags: CONTAINERD_LDFLAGS,
    versionArgs: ["--version"],
    expectVersion: CONTAINERD2_VERSION,
    versionMatches: reports(CONTAINERD2_VERSION),
    replaces: publishedReplaces,
    prepare: cgo ? () => ensureCgoPackages(tags) : undefined,
  };
}

const RUNC_TAGS = ["seccomp", "urfave_cli_no_docs"];

const SPECS = {
  containerd: containerdSpec("containerd", true, ["urfave_cli_no_docs"]),
  shimRuncV2: containerdSpec("containerd-shim-runc-v2", false, ["urfave_cli_no_docs", "no_grpc"]),
  ctr: containerdSpec("ctr", true, ["urfave_cli_no_docs"]),
  runc: {
    name: "runc",
    module: RUNC_MODULE,
    version: RUNC_VERSION,
    pkg: RUNC_MODULE,
    cgo: true,
    pie: true,
    tags: RUNC_TAGS,
    ldflags: [],
    versionArgs: ["--version"],
    expectVersion: RUNC_VERSION,
    versionMatches: reports(RUNC_VERSION),
    replaces: publishedReplaces,
    prepare: () => ensureCgoPackages(RUNC_TAGS),
  },
} satisfies Record<Exclude<keyof Containerd2Binaries, "version">, BinarySpec>;

/**
 * The version a containerd, ctr, containerd-shim-runc-v2 or runc prints, `v`-prefixed
 * ("v2.4.2", "v1.6.20~ds1"), or undefined when the output is none of theirs.
 */
export function reportedVersion(output: string): string | undefined {
  const m = /^(?:containerd|ctr) \S+ (\S+)/m.exec(output) ?? // containerd, ctr
    /^containerd-shim[^\n]*:\n\s+Version:\s+(\S+)/m.exec(output) ?? // the shims
    /^runc version (\S+)/m.exec(output);
  const version = m?.[1];
  if (version === undefined) return undefined;
  return version.startsWith("v") ? version : `v${version}`;
}

/**
 * The config schema a containerd release reads natively: 2 for 1.x (what the harness writes),
 * 3 for 2.x ({@link containerd2Config}; 2.3+ migrate it to their own 4 on start).
 */
export function configVersionFor(containerdVersion: string): 2 | 3 {
  const m = /^v?(\d+)\./.exec(containerdVersion);
  if (!m) {
    throw new ControlPlaneBuildError(
      `containerd version must look like v2.4.2: current value is '${containerdVersion}'`,
    );
  }
  return Number(m[1]) >= 2 ? 3 : 2;
}

/**
 * The replace lines of upstream's go.mod that point at published modules (`a => b vX`), which a
 * wrapper module must copy to build what upstream tested; local paths (`=> ./x`) are dropped.
 */
export function publishedReplaces(upstreamGoMod: string): Replace[] {
  return parseReplaces(upstreamGoMod).flatMap(({ from, to }) => {
    const [module, version, ...rest] = to.split(/\s+/);
    if (!module || !version || rest.length > 0 || module.startsWith(".")) return [];
    return [{ from, to: module, toVersion: version }];
  });
}

/** Inputs of {@link containerd2Config}: the harness's containerdConfig inputs and the binaries. */
export interface Containerd2ConfigArgs {
  /** Holds `state/` and `opt/`. */
  dir: string;
  root: string;
  socket: string;
  cniConfDir: string;
  /** More CRI runtime handlers, each runc as the default one ("test-handler"). @default [] */
  runtimeHandlers?: readonly string[];
  /** The runc every handler runs (runtime option `BinaryName`). */
  runc: string;
  /** The containerd-shim-runc-v2 every handler starts (`runtime_path`). */
  shimRuncV2: string;
  /**
   * The images plugin's registry `config_path` (a directory of `<host>/hosts.toml`), as
   * tests/containerd_harness.ts writes it for `registryMirrors`. @default unset: 2.x then reads
   * the host's /etc/containerd/certs.d and /etc/docker/certs.d
   */
  registryConfigPath?: string;
  /** CNI `conf_template` (tests/containerd_harness.ts cniConfTemplate). @default none */
  cniConfTemplate?: string;
  /** The pinned sandbox image. @default SANDBOX_IMAGE */
  sandboxImage?: string;
}

/**
 * The containerd 2.x config (schema version 3) for one private instance: the settings of the
 * containerd 1.6 config tests/containerd_harness.ts writes, in 2.x's plugin layout (CRI split
 * into `io.containerd.cri.v1.runtime`, `io.containerd.cri.v1.images` and
 * `io.containerd.grpc.v1.cri`, see containerd's docs/cri/config.md), plus the binary paths.
 * Where 2.x changed a default (unprivileged ports and ICMP on), 2.x's default stays.
 */
export function containerd2Config(args: Containerd2ConfigArgs): string {
  const { dir, root, socket, cniConfDir } = args;
  const runtime = `plugins."io.containerd.cri.v1.runtime"`;
  const images = `plugins."io.containerd.cri.v1.images"`;
  const handlers = ["runc", ...(args.runtimeHandlers ?? [])].map((name) => `
    [${runtime}.containerd.runtimes.${toml(name)}]
      runtime_type = "io.containerd.runc.v2"
      # Not containerd's PATH, where Debian's containerd 1.6 shim may come first.
      runtime_path = ${toml(args.shimRuncV2)}

      [${runtime}.containerd.runtimes.${toml(name)}.options]
        BinaryName = ${toml(args.runc)}
        # The kubelet demo and tests use cgroupDriver: cgroupfs.
        SystemdCgroup = false
`).join("");
  const registry = args.registryConfigPath === undefined ? "" : `
  [${images}.registry]
    # Per-host registry settings (hosts.toml), for the hosts another registry serves.
    config_path = ${toml(args.registryConfigPath)}
`;
  return `# Generated by tests/runtime_build.ts; rewritten on every start.
version = 3
root = ${toml(root)}
state = ${toml(`${dir}/state`)}
# Storage drivers this machine has no use for; keeps the log free of their start-up errors.
disabled_plugins = [
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

${serverSections(dir, socket)}
# NRI is on in 2.x (1.6 had none); its socket is per host unless moved into this instance.
[plugins."io.containerd.nri.v1.nri"]
  socket_path = ${toml(`${dir}/nri.sock`)}

[${images}]
  snapshotter = "overlayfs"

  [${images}.pinned_images]
    sandbox = ${toml(args.sandboxImage ?? SANDBOX_IMAGE)}
${registry}
[${runtime}]
  # CAP_SYS_RESOURCE is missing here: a negative oom_score_adj fails and so would every sandbox.
  restrict_oom_score_adj = true
  enable_selinux = false
  disable_apparmor = true

  [${runtime}.containerd]
    default_runtime_name = "runc"
${handlers}
  [${runtime}.cni]
    bin_dirs = [${toml(CNI_BIN_DIR)}]
    conf_dir = ${toml(cniConfDir)}
    max_conf_num = 1
${confTemplate(args.cniConfTemplate)}
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`;
}

/**
 * Builds containerd, containerd-shim-runc-v2 and ctr of {@link CONTAINERD2_VERSION} and runc of
 * {@link RUNC_VERSION} unless the cache holds them, and returns their paths. Safe to run from
 * several processes at once.
 */
export async function ensureContainerd2(
  opts: RuntimeBuildOptions = {},
): Promise<Containerd2Binaries> {
  const log = opts.log ?? ((line: string) => console.error(line));
  const started = performance.now();
  const out: Partial<Containerd2Binaries> = { version: CONTAINERD2_VERSION };
  // One after another: each `go build` already uses every core.
  for (const key of ["shimRuncV2", "ctr", "containerd", "runc"] as const) {
    out[key] = await ensureBinary(SPECS[key], { signal: opts.signal, log });
  }
  log(`runtime-build: all binaries ready in ${formatDuration(performance.now() - started)}`);
  return out as Containerd2Binaries;
}

// Where Debian's libseccomp-dev puts the header runc's seccomp support compiles against.
const SECCOMP_HEADER = "/usr/include/seccomp.h";

/** gcc and pkg-config for cgo, and for runc's `seccomp` tag libseccomp-dev, via apt-get. */
async function ensureCgoPackages(tags: readonly string[]): Promise<void> {
  await aptInstallMissing([
    { pkg: "gcc", provides: ["gcc"] },
    { pkg: "pkg-config", provides: ["pkg-config"] },
  ]);
  if (!tags.includes("seccomp")) return;
  try {
    await Deno.stat(SECCOMP_HEADER);
  } catch {
    await aptInstall(["libseccomp-dev"]);
    await Deno.stat(SECCOMP_HEADER).catch((cause) => {
      throw new ControlPlaneBuildError(
        `apt-get installed libseccomp-dev, but ${SECCOMP_HEADER} is still missing`,
        { cause },
      );
    });
  }
}

if (import.meta.main) {
  const bins = await ensureContainerd2();
  for (const [key, value] of Object.entries(bins)) console.log(`${key}\t${value}`);
}
