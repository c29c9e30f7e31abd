/**
 * @module
 * Builds the control-plane programs the end-to-end tests run next to our kubelet, from their Go
 * modules at one pinned release each: `kube-apiserver` and `kubectl` from `k8s.io/kubernetes`
 * {@link KUBERNETES_VERSION}, `crictl` from `sigs.k8s.io/cri-tools` {@link CRICTL_VERSION} and
 * `etcd` from `go.etcd.io/etcd/server/v3` {@link ETCD_VERSION}. No Kubernetes code or binary is
 * kept in this repository: only this recipe.
 *
 * Everything goes to a cache outside the repository, so every clone on a machine shares it
 * (`${KUBELET_TS_CACHE:-$HOME/.cache/kubelet-ts}`):
 * - `bin/<name>-<version>/<name>`: the program; reused while `<name> --version` still reports
 *   the pinned version. It is linked under a temporary name and renamed into place, so an
 *   interrupted or concurrent run never leaves a half-written program there.
 * - `src/<name>-<version>/`: the generated wrapper Go module it is built from (`go.mod`,
 *   `go.sum`, for etcd a `main.go`), and the `.lock` that serializes builds of that program
 *   across processes.
 *
 * It talks to `go` only: `go mod download -json` to read upstream's go.mod, `go build` to build.
 * Go's own caches (GOCACHE, GOMODCACHE, by default under $HOME) make a second build fast.
 *
 * Why etcd is built rather than taken from Debian: Debian's `etcd-server` 3.4.23 does start and
 * kube-apiserver 1.36 answers /readyz against it, but the apiserver then logs "RequestWatchProgress
 * feature is not supported" (it needs etcd 3.4.31+ or 3.5.13+, see `feature_support_checker.go`
 * in k8s.io/apiserver), so consistent reads from the watch cache are off, and kubeadm 1.36 sets
 * its minimum external etcd at 3.5.24. We build the etcd kubeadm 1.36 deploys (3.6.8), whose client
 * libraries are the ones compiled into the apiserver; it takes under a minute.
 *
 * The benchmark suite (bench/) also asks for the upstream `kubelet` of the same release
 * ({@link ensureUpstreamKubelet}); nothing else builds it.
 *
 * Run it alone with `deno run -A tests/control_plane_build.ts`: it prints the four paths
 * (`--kubelet`: five, building the upstream kubelet too).
 */

import { findProgram, lastLines } from "./apt.ts";

/** The Kubernetes release of kube-apiserver and kubectl; our kubelet reports this version. */
export const KUBERNETES_VERSION = "v1.36.3";
/** The cri-tools release `crictl` is built from: the one released for Kubernetes 1.36. */
export const CRICTL_VERSION = "v1.36.0";
/** The etcd release: what kubeadm 1.36 deploys (`DefaultEtcdVersion = "3.6.8-0"`). */
export const ETCD_VERSION = "v3.6.8";

/** Paths of the built control-plane programs. */
export interface ControlPlaneBinaries {
  kubeApiserver: string;
  kubectl: string;
  crictl: string;
  etcd: string;
}

/** Options for {@link ensureControlPlaneBinaries}. */
export interface ControlPlaneBuildOptions {
  /** Aborting it stops a running `go` command and the build with it. */
  signal?: AbortSignal;
  /**
   * Receives progress lines (what is reused, what is built, how long it took, go's own output).
   * @default console.error
   */
  log?: (line: string) => void;
}

/** A program could not be built, or the built program does not report the pinned version. */
export class ControlPlaneBuildError extends Error {
  override name = "ControlPlaneBuildError";
}

/** One `replace` line of a go.mod: `from => to toVersion`. */
export interface Replace {
  from: string;
  to: string;
  toVersion: string;
}

/** How one program is built and recognized. */
export interface BinarySpec {
  name: string;
  version: string;
  /** The module the program comes from, at `version`; the wrapper module requires it. */
  module: string;
  /**
   * The version of `module` to require when the release tag is no module version (a v2+ tag
   * on a module path without `/v2`: then the pseudo-version of the tagged commit); the cache
   * keeps the program under `version`. @default version
   */
  moduleVersion?: string;
  /** The main package to build. */
  pkg: string;
  /**
   * Arguments that make the program print its version, and what that output must contain; a
   * program that cannot say (`versionArgs` undefined) is trusted once it is in the cache.
   */
  versionArgs?: string[];
  expectVersion: string;
  /** Linker flags besides `-w` (and `-s` unless {@link keepSymbols}). */
  ldflags: string[];
  /** Link without `-s` (upstream's test image builds pass `-w` only). @default false */
  keepSymbols?: boolean;
  /** Checks the downloaded module before a build, e.g. that a VERSION file matches. */
  verify?: (moduleDir: string) => Promise<void>;
  /** Whether a version output is this program's pinned version. @default contains expectVersion */
  versionMatches?: (output: string) => boolean;
  /** Build with cgo (runc, containerd). @default false */
  cgo?: boolean;
  /** `-buildmode=pie`. @default false */
  pie?: boolean;
  /** Build tags. @default none */
  tags?: string[];
  /** Installs what the build needs besides Go (e.g. headers for cgo); run before a build. */
  prepare?: () => Promise<void>;
  /** A main.go for the wrapper module, when upstream's main package is not in `module`. */
  mainGo?: string;
  /** The replace lines the wrapper needs, derived from upstream's go.mod. */
  replaces?: (upstreamGoMod: string) => Replace[];
  /** `pkg` is a test package, compiled with `go test -c` (e2e.test). @default false */
  test?: boolean;
}

/** The staging modules (`k8s.io/api`, ...) are published as v0.X.Y for Kubernetes v1.X.Y. */
export function stagingVersion(kubernetesVersion: string): string {
  const m = /^v1\.(\d+\.\d+.*)$/.exec(kubernetesVersion);
  if (!m) {
    throw new ControlPlaneBuildError(
      `Kubernetes version must look like v1.36.3: current value is '${kubernetesVersion}'`,
    );
  }
  return `v0.${m[1]}`;
}

/** The `replace` directives of a go.mod, in block and single-line form, without comments. */
export function parseReplaces(goMod: string): { from: string; to: string }[] {
  const out: { from: string; to: string }[] = [];
  let inBlock = false;
  for (const raw of goMod.split("\n")) {
    const line = raw.replace(/\/\/.*$/, "").trim();
    if (inBlock) {
      if (line === ")") inBlock = false;
      else if (line) out.push(splitReplace(line));
    } else if (/^replace\s*\($/.test(line)) {
      inBlock = true;
    } else if (/^replace\s/.test(line)) {
      out.push(splitReplace(line.slice("replace".length).trim()));
    }
  }
  return out;
}

function splitReplace(line: string): { from: string; to: string } {
  const parts = line.split("=>");
  if (parts.length !== 2) {
    throw new ControlPlaneBuildError(`go.mod replace line must be 'a => b': got '${line}'`);
  }
  return { from: parts[0]!.trim(), to: parts[1]!.trim() };
}

/**
 * Upstream maps every staging module to its directory under `./staging/src/`; a consumer of
 * `k8s.io/kubernetes` maps each to the published module at the matching v0 version instead.
 */
export function stagingReplaces(upstreamGoMod: string, kubernetesVersion: string): Replace[] {
  const toVersion = stagingVersion(kubernetesVersion);
  const replaces = parseReplaces(upstreamGoMod)
    .filter((r) => r.to.startsWith("./staging/src/"))
    .map((r) => ({ from: r.from, to: r.from, toVersion }));
  if (replaces.length === 0) {
    throw new ControlPlaneBuildError(
      `k8s.io/kubernetes ${kubernetesVersion} go.mod has no './staging/src/' replace lines`,
    );
  }
  return replaces;
}

/** The `go` and `godebug` directives of a go.mod, which the wrapper module copies. */
export function goDirectives(goMod: string): string[] {
  return goMod.split("\n").map((l) => l.trim()).filter((l) => /^(go|godebug)\s/.test(l));
}

/** The go.mod of a wrapper module that requires `module@version`. */
export function wrapperGoMod(
  name: string,
  upstreamGoMod: string,
  module: string,
  version: string,
  replaces: readonly Replace[],
): string {
  const lines = [
    "// Generated by kubelet-ts tests/control_plane_build.ts; rewritten before every build.",
    `module kubelet-ts.local/build/${name}`,
    "",
    ...goDirectives(upstreamGoMod),
    "",
    `require ${module} ${version}`,
  ];
  if (replaces.length > 0) {
    lines.push("", "replace (");
    for (const r of replaces) lines.push(`\t${r.from} => ${r.to} ${r.toVersion}`);
    lines.push(")");
  }
  return lines.join("\n") + "\n";
}

function kubernetesLdflags(version: string, buildDate: string): string[] {
  const m = /^v(\d+)\.(\d+)\./.exec(version);
  const vars: Record<string, string> = {
    gitVersion: version,
    gitMajor: m?.[1] ?? "",
    gitMinor: m?.[2] ?? "",
    gitTreeState: "clean",
    buildDate,
  };
  // What upstream's hack/lib/version.sh sets; gitCommit is unknown from a module zip.
  return ["k8s.io/client-go/pkg/version", "k8s.io/component-base/version"].flatMap((pkg) =>
    Object.entries(vars).map(([k, v]) => `-X ${pkg}.${k}=${v}`)
  );
}

// Release date of v1.36.3 (`Time` in the module proxy's .info), so builds are reproducible.
const KUBERNETES_BUILD_DATE = "2026-07-22T18:07:38Z";

const SPECS = {
  kubeApiserver: {
    name: "kube-apiserver",
    version: KUBERNETES_VERSION,
    module: "k8s.io/kubernetes",
    pkg: "k8s.io/kubernetes/cmd/kube-apiserver",
    versionArgs: ["--version"],
    expectVersion: `Kubernetes ${KUBERNETES_VERSION}`,
    ldflags: kubernetesLdflags(KUBERNETES_VERSION, KUBERNETES_BUILD_DATE),
    replaces: (goMod: string) => stagingReplaces(goMod, KUBERNETES_VERSION),
  },
  kubectl: {
    name: "kubectl",
    version: KUBERNETES_VERSION,
    module: "k8s.io/kubernetes",
    pkg: "k8s.io/kubernetes/cmd/kubectl",
    versionArgs: ["version", "--client"],
    expectVersion: `Client Version: ${KUBERNETES_VERSION}`,
    ldflags: kubernetesLdflags(KUBERNETES_VERSION, KUBERNETES_BUILD_DATE),
    replaces: (goMod: string) => stagingReplaces(goMod, KUBERNETES_VERSION),
  },
  crictl: {
    name: "crictl",
    version: CRICTL_VERSION,
    module: "sigs.k8s.io/cri-tools",
    pkg: "sigs.k8s.io/cri-tools/cmd/crictl",
    versionArgs: ["--version"],
    expectVersion: `crictl version ${CRICTL_VERSION}`,
    // As cri-tools' Makefile sets it.
    ldflags: [`-X sigs.k8s.io/cri-tools/pkg/version.Version=${CRICTL_VERSION}`],
  },
  etcd: {
    name: "etcd",
    version: ETCD_VERSION,
    module: "go.etcd.io/etcd/server/v3",
    pkg: ".",
    versionArgs: ["--version"],
    expectVersion: `etcd Version: ${ETCD_VERSION.slice(1)}`,
    ldflags: [],
    // etcd's main package is in the go.etcd.io/etcd/v3 module, which the proxy does not carry
    // for every release; its main.go is exactly this call.
    mainGo: [
      "// Generated by kubelet-ts tests/control_plane_build.ts: etcd's own main.go.",
      "package main",
      "",
      'import (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)',
      "",
      "func main() { etcdmain.Main(os.Args) }",
      "",
    ].join("\n"),
  },
} satisfies Record<keyof ControlPlaneBinaries, BinarySpec>;

/**
 * The upstream kubelet of the same release, which only the benchmark suite runs (bench/), next
 * to ours; built on request only, since a cold build takes minutes.
 */
const KUBELET_SPEC: BinarySpec = {
  name: "kubelet",
  version: KUBERNETES_VERSION,
  module: "k8s.io/kubernetes",
  pkg: "k8s.io/kubernetes/cmd/kubelet",
  versionArgs: ["--version"],
  expectVersion: `Kubernetes ${KUBERNETES_VERSION}`,
  ldflags: kubernetesLdflags(KUBERNETES_VERSION, KUBERNETES_BUILD_DATE),
  replaces: (goMod: string) => stagingReplaces(goMod, KUBERNETES_VERSION),
};

/** Paths of what upstream's conformance tests need beyond the control plane (`deno task conformance`). */
export interface ConformanceBinaries {
  /** `go test -c k8s.io/kubernetes/test/e2e`: upstream's e2e suite. */
  e2eTest: string;
  kubeControllerManager: string;
  kubeScheduler: string;
  /** The ginkgo CLI of the version e2e.test is built with: it runs e2e.test in parallel. */
  ginkgo: string;
}

/** How a program of k8s.io/kubernetes {@link KUBERNETES_VERSION} is built: as upstream's release does. */
export function kubernetesSpec(name: string, pkg: string, expectVersion: string): BinarySpec {
  return {
    name,
    version: KUBERNETES_VERSION,
    module: "k8s.io/kubernetes",
    pkg,
    versionArgs: ["--version"],
    expectVersion,
    ldflags: kubernetesLdflags(KUBERNETES_VERSION, KUBERNETES_BUILD_DATE),
    replaces: (goMod: string) => stagingReplaces(goMod, KUBERNETES_VERSION),
  };
}

const CONFORMANCE_SPECS = {
  // e2e.test prints version.Get(), the bare git version.
  e2eTest: {
    ...kubernetesSpec("e2e.test", "k8s.io/kubernetes/test/e2e", KUBERNETES_VERSION),
    test: true,
  },
  kubeControllerManager: kubernetesSpec(
    "kube-controller-manager",
    "k8s.io/kubernetes/cmd/kube-controller-manager",
    `Kubernetes ${KUBERNETES_VERSION}`,
  ),
  kubeScheduler: kubernetesSpec(
    "kube-scheduler",
    "k8s.io/kubernetes/cmd/kube-scheduler",
    `Kubernetes ${KUBERNETES_VERSION}`,
  ),
} satisfies Record<Exclude<keyof ConformanceBinaries, "ginkgo">, BinarySpec>;

/** The version of a module that a go.mod requires, or undefined. */
export function requiredVersion(goMod: string, module: string): string | undefined {
  const escaped = module.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
  return new RegExp(`^\\s*(?:require\\s+)?${escaped}\\s+(v\\S+)`, "m").exec(goMod)?.[1];
}

/**
 * Builds e2e.test, kube-controller-manager and kube-scheduler of {@link KUBERNETES_VERSION}, and
 * the ginkgo CLI at the version k8s.io/kubernetes requires, unless the cache holds them.
 */
export async function ensureConformanceBinaries(
  opts: ControlPlaneBuildOptions = {},
): Promise<ConformanceBinaries> {
  const log = opts.log ?? ((line: string) => console.error(line));
  const ctx: BuildContext = {
    cacheDir: controlPlaneCacheDir(),
    go: await findProgram("go"),
    log,
    signal: opts.signal,
  };
  const out: Partial<ConformanceBinaries> = {};
  for (const key of ["kubeScheduler", "kubeControllerManager", "e2eTest"] as const) {
    out[key] = await ensureBinaryIn(CONFORMANCE_SPECS[key], ctx);
  }
  if (!ctx.go) throw new ControlPlaneBuildError("Cannot build ginkgo: 'go' is not on PATH");
  const dir = `${ctx.cacheDir}/src/ginkgo-version`;
  await Deno.mkdir(dir, { recursive: true });
  const { goMod: k8sGoMod } = await downloadModule(
    ctx.go,
    "k8s.io/kubernetes",
    KUBERNETES_VERSION,
    dir,
    ctx,
  );
  const version = requiredVersion(k8sGoMod, "github.com/onsi/ginkgo/v2");
  if (!version) {
    throw new ControlPlaneBuildError(
      `k8s.io/kubernetes ${KUBERNETES_VERSION} go.mod does not require github.com/onsi/ginkgo/v2`,
    );
  }
  out.ginkgo = await ensureBinaryIn({
    name: "ginkgo",
    version,
    module: "github.com/onsi/ginkgo/v2",
    pkg: "github.com/onsi/ginkgo/v2/ginkgo",
    versionArgs: ["version"],
    expectVersion: `Ginkgo Version ${version.slice(1)}`,
    ldflags: [],
  }, ctx);
  return out as ConformanceBinaries;
}

/**
 * Builds kube-controller-manager of {@link KUBERNETES_VERSION} (as {@link ensureConformanceBinaries}
 * does) unless the cache holds it, and returns its path.
 */
export async function ensureKubeControllerManager(
  opts: ControlPlaneBuildOptions = {},
): Promise<string> {
  return await ensureBinary(CONFORMANCE_SPECS.kubeControllerManager, opts);
}

/**
 * Builds kube-scheduler of {@link KUBERNETES_VERSION} (as {@link ensureConformanceBinaries} does)
 * unless the cache holds it, and returns its path.
 */
export async function ensureKubeScheduler(opts: ControlPlaneBuildOptions = {}): Promise<string> {
  return await ensureBinary(CONFORMANCE_SPECS.kubeScheduler, opts);
}

/** The cache root: `$KUBELET_TS_CACHE`, else `$HOME/.cache/kubelet-ts`. */
export function controlPlaneCacheDir(): string {
  const explicit = Deno.env.get("KUBELET_TS_CACHE");
  if (explicit) return explicit;
  const home = Deno.env.get("HOME");
  if (!home) {
    throw new ControlPlaneBuildError(
      "Cannot find the build cache: neither KUBELET_TS_CACHE nor HOME is set",
    );
  }
  return `${home}/.cache/kubelet-ts`;
}

/** Where {@link ensureControlPlaneBinaries} puts (or finds) `name` at `version`. */
export function binaryPath(name: string, version: string, cacheDir = controlPlaneCacheDir()) {
  return `${cacheDir}/bin/${name}-${version}/${name}`;
}

/**
 * Builds kube-apiserver, kubectl, crictl and etcd at their pinned versions unless the cache
 * already holds them, and returns their paths. Safe to run from several processes at once.
 */
export async function ensureControlPlaneBinaries(
  opts: ControlPlaneBuildOptions = {},
): Promise<ControlPlaneBinaries> {
  const log = opts.log ?? ((line: string) => console.error(line));
  const cacheDir = controlPlaneCacheDir();
  const go = await findProgram("go");
  const started = performance.now();
  const out: Partial<ControlPlaneBinaries> = {};
  // One after another: each `go build` already uses every core.
  for (const key of ["etcd", "crictl", "kubectl", "kubeApiserver"] as const) {
    out[key] = await ensureBinaryIn(SPECS[key], { cacheDir, go, log, signal: opts.signal });
  }
  log(`control-plane: all binaries ready in ${formatDuration(performance.now() - started)}`);
  return out as ControlPlaneBinaries;
}

/**
 * Builds the upstream kubelet ({@link KUBERNETES_VERSION}, from `k8s.io/kubernetes/cmd/kubelet`)
 * unless the cache holds it, and returns its path. Only the benchmark suite asks for it.
 */
export async function ensureUpstreamKubelet(opts: ControlPlaneBuildOptions = {}): Promise<string> {
  const log = opts.log ?? ((line: string) => console.error(line));
  return await ensureBinaryIn(KUBELET_SPEC, {
    cacheDir: controlPlaneCacheDir(),
    go: await findProgram("go"),
    log,
    signal: opts.signal,
  });
}

interface BuildContext {
  cacheDir: string;
  go: string | undefined;
  log: (line: string) => void;
  signal?: AbortSignal;
}

/**
 * Builds one program of {@link BinarySpec} into the cache unless it holds it already (reporting
 * its version), under a lock shared by every process, and returns its path.
 */
export async function ensureBinary(
  spec: BinarySpec,
  opts: ControlPlaneBuildOptions = {},
): Promise<string> {
  return await ensureBinaryIn(spec, {
    cacheDir: controlPlaneCacheDir(),
    go: await findProgram("go"),
    log: opts.log ?? ((line: string) => console.error(line)),
    signal: opts.signal,
  });
}

async function ensureBinaryIn(spec: BinarySpec, ctx: BuildContext): Promise<string> {
  const label = `${spec.name} ${spec.version}`;
  const target = binaryPath(spec.name, spec.version, ctx.cacheDir);
  if (await reportsVersion(target, spec, ctx.signal)) {
    ctx.log(`control-plane: reusing ${label} at ${target}`);
    return target;
  }
  const srcDir = `${ctx.cacheDir}/src/${spec.name}-${spec.version}`;
  await Deno.mkdir(srcDir, { recursive: true });
  await Deno.mkdir(dirname(target), { recursive: true });
  using lock = await Deno.open(`${srcDir}/.lock`, { create: true, write: true });
  ctx.signal?.throwIfAborted();
  await lock.lock(true);
  ctx.signal?.throwIfAborted();
  // Another process may have built it while this one waited for the lock.
  if (await reportsVersion(target, spec, ctx.signal)) {
    ctx.log(`control-plane: reusing ${label} at ${target} (built by another run)`);
    return target;
  }
  if (!ctx.go) {
    throw new ControlPlaneBuildError(
      `Cannot build ${label}: 'go' is not on PATH (Go 1.26+ and the Go module proxy are needed)`,
    );
  }
  await removeStaleTemps(dirname(target), spec.name);
  const started = performance.now();
  ctx.log(`control-plane: building ${label} from ${spec.module} into ${target}`);
  const moduleVersion = spec.moduleVersion ?? spec.version;
  const { goMod: upstream, dir: moduleDir } = await downloadModule(
    ctx.go,
    spec.module,
    moduleVersion,
    srcDir,
    ctx,
  );
  await spec.verify?.(moduleDir);
  await spec.prepare?.();
  const goMod = wrapperGoMod(
    spec.name,
    upstream,
    spec.module,
    moduleVersion,
    spec.replaces?.(upstream) ?? [],
  );
  await Deno.writeTextFile(`${srcDir}/go.mod`, goMod);
  if (spec.mainGo) await Deno.writeTextFile(`${srcDir}/main.go`, spec.mainGo);
  else await Deno.remove(`${srcDir}/main.go`).catch(() => {});

  const temp = `${target}.tmp-${Deno.pid}-${crypto.randomUUID().slice(0, 8)}`;
  try {
    await runGo(
      ctx.go,
      [
        ...(spec.test ? ["test", "-c"] : ["build"]),
        "-mod=mod",
        "-trimpath",
        "-buildvcs=false",
        ...(spec.pie ? ["-buildmode=pie"] : []),
        ...(spec.tags?.length ? ["-tags", spec.tags.join(",")] : []),
        "-ldflags",
        [...(spec.keepSymbols ? [] : ["-s"]), "-w", ...spec.ldflags].join(" "),
        "-o",
        temp,
        spec.pkg,
      ],
      srcDir,
      `build ${label}`,
      ctx,
      { CGO_ENABLED: spec.cgo ? "1" : "0" },
    );
    if (!(await reportsVersion(temp, spec, ctx.signal))) {
      const got = await versionOutput(temp, spec, ctx.signal);
      throw new ControlPlaneBuildError(
        `Built ${label}, but '${spec.name} ${
          spec.versionArgs?.join(" ")
        }' does not say '${spec.expectVersion}': ${got}`,
      );
    }
    await Deno.rename(temp, target);
  } finally {
    await Deno.remove(temp).catch(() => {});
  }
  ctx.log(`control-plane: built ${label} in ${formatDuration(performance.now() - started)}`);
  return target;
}

/** Reads upstream's go.mod through the module cache (downloading the module when needed). */
/** Where `module@version` lies in the module cache, and its go.mod; downloads it when needed. */
export async function downloadGoModule(
  module: string,
  version: string,
  opts: ControlPlaneBuildOptions = {},
): Promise<{ dir: string; goMod: string }> {
  const go = await findProgram("go");
  if (!go) {
    throw new ControlPlaneBuildError(
      `Cannot download ${module}@${version}: 'go' is not on PATH (Go 1.26+ is needed)`,
    );
  }
  const cacheDir = controlPlaneCacheDir();
  const cwd = `${cacheDir}/src/download`;
  await Deno.mkdir(cwd, { recursive: true });
  return await downloadModule(go, module, version, cwd, {
    cacheDir,
    go,
    log: opts.log ?? (() => {}),
    signal: opts.signal,
  });
}

async function downloadModule(
  go: string,
  module: string,
  version: string,
  cwd: string,
  ctx: BuildContext,
): Promise<{ dir: string; goMod: string }> {
  const stdout = await runGo(
    go,
    ["mod", "download", "-json", `${module}@${version}`],
    // Outside any module, so the wrapper's own (possibly stale) go.mod plays no part.
    dirname(cwd),
    `download ${module}@${version}`,
    ctx,
  );
  let info: { Dir?: string; GoMod?: string; Error?: string };
  try {
    info = JSON.parse(stdout);
  } catch (cause) {
    throw new ControlPlaneBuildError(
      `'go mod download -json ${module}@${version}' printed no JSON: ${lastLines(stdout, 5)}`,
      { cause },
    );
  }
  if (info.Error || !info.GoMod || !info.Dir) {
    throw new ControlPlaneBuildError(
      `Cannot download ${module}@${version}: ${info.Error ?? "no Dir or GoMod in the answer"}`,
    );
  }
  return { dir: info.Dir, goMod: await Deno.readTextFile(info.GoMod) };
}

/**
 * Runs `go` with CGO off, passing its stderr lines to the log (counting "downloading" lines
 * instead) and a heartbeat line every minute (a cold kube-apiserver build is silent for
 * minutes). Returns stdout.
 */
async function runGo(
  go: string,
  args: string[],
  cwd: string,
  what: string,
  ctx: BuildContext,
  env: Record<string, string> = {},
): Promise<string> {
  ctx.signal?.throwIfAborted();
  const started = performance.now();
  // In a process group of its own (setsid), so an abort can interrupt go together with the
  // compilers and linker it runs, as Ctrl-C does; go stops on SIGINT but does not pass it on.
  const setsid = await findProgram("setsid");
  const child = new Deno.Command(setsid ?? go, {
    args: setsid ? [go, ...args] : args,
    cwd,
    env: { CGO_ENABLED: "0", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let killTimer: ReturnType<typeof setTimeout> | undefined;
  const onAbort = () => {
    signalChild(child.pid, setsid !== undefined, "SIGINT");
    killTimer = setTimeout(() => signalChild(child.pid, setsid !== undefined, "SIGKILL"), 10_000);
  };
  ctx.signal?.addEventListener("abort", onAbort, { once: true });
  const heartbeat = setInterval(() => {
    ctx.log(
      `control-plane: still running go ${what} (${formatDuration(performance.now() - started)})`,
    );
  }, 60_000);
  try {
    const stderrLines: string[] = [];
    let downloads = 0;
    const [stdout] = await Promise.all([
      new Response(child.stdout).text(),
      (async () => {
        const decoder = child.stderr.pipeThrough(new TextDecoderStream());
        let pending = "";
        for await (const chunk of decoder) {
          pending += chunk;
          const lines = pending.split("\n");
          pending = lines.pop() ?? "";
          for (const line of lines) {
            stderrLines.push(line);
            // A cold kube-apiserver build downloads some 200 modules: count them instead.
            if (line.startsWith("go: downloading ")) downloads++;
            else ctx.log(`  ${line}`);
          }
        }
        if (pending) stderrLines.push(pending);
      })(),
    ]);
    const status = await child.status;
    if (downloads > 0) ctx.log(`control-plane: go downloaded ${downloads} modules for ${what}`);
    ctx.signal?.throwIfAborted();
    if (!status.success) {
      throw new ControlPlaneBuildError(
        `'go ${args.join(" ")}' in ${cwd} (${what}) failed with code ${status.code}:\n${
          lastLines(stderrLines.join("\n") || stdout, 30)
        }`,
      );
    }
    return stdout;
  } finally {
    clearInterval(heartbeat);
    clearTimeout(killTimer);
    ctx.signal?.removeEventListener("abort", onAbort);
  }
}

function signalChild(pid: number, group: boolean, signal: Deno.Signal): void {
  try {
    Deno.kill(group ? -pid : pid, signal);
  } catch {
    // already exited
  }
}

/** True when `path` exists and its version output contains the pinned version. */
async function reportsVersion(
  path: string,
  spec: BinarySpec,
  signal?: AbortSignal,
): Promise<boolean> {
  try {
    await Deno.stat(path);
  } catch {
    return false;
  }
  if (!spec.versionArgs) return true;
  const output = await versionOutput(path, spec, signal);
  return spec.versionMatches ? spec.versionMatches(output) : output.includes(spec.expectVersion);
}

async function versionOutput(path: string, spec: BinarySpec, signal?: AbortSignal) {
  try {
    const out = await new Deno.Command(path, {
      args: spec.versionArgs ?? [],
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      signal: signal
        ? AbortSignal.any([signal, AbortSignal.timeout(30_000)])
        : AbortSignal.timeout(30_000),
    }).output();
    const dec = new TextDecoder();
    return (dec.decode(out.stdout) + dec.decode(out.stderr)).trim();
  } catch (e) {
    signal?.throwIfAborted();
    return `(cannot run: ${e instanceof Error ? e.message : String(e)})`;
  }
}

/** Removes temp files of builds that were interrupted; call only while holding the lock. */
async function removeStaleTemps(dir: string, name: string): Promise<void> {
  for await (const entry of Deno.readDir(dir)) {
    if (entry.name.startsWith(`${name}.tmp-`)) {
      await Deno.remove(`${dir}/${entry.name}`).catch(() => {});
    }
  }
}

function dirname(path: string): string {
  return path.slice(0, path.lastIndexOf("/")) || "/";
}

/** "4m48s" or "12.3s". */
export function formatDuration(ms: number): string {
  if (ms < 59_950) return `${(ms / 1000).toFixed(1)}s`;
  const s = Math.round(ms / 1000);
  return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
}

if (import.meta.main) {
  const paths = await ensureControlPlaneBinaries();
  for (const [key, path] of Object.entries(paths)) console.log(`${key}\t${path}`);
  if (Deno.args.includes("--kubelet")) console.log(`kubelet\t${await ensureUpstreamKubelet()}`);
}
