/**
 * @module
 * `deno task release`: one `kubelet` executable per platform that runs on a node with no route
 * to any registry or to Deno's download host, in `dist/<platform>/` with a `SHA256SUMS` beside
 * it. Both kinds run the same tree, the agent's runtime graph (release_graph.ts: its modules
 * as they are in the repository and a flat `node_modules` of the npm packages it loads;
 * `@kubernetes/client-node`, types only, is not among them; and the kubelet Worker's bundle,
 * release_bundle.ts, which only the self-extracting kind runs: `deno compile` embeds the
 * modules), with the agent's run flags
 * ({@link AGENT_RUN_FLAGS}):
 *
 * - `self-extracting` (self_extracting.ts): a shell stub followed by an archive of that tree and
 *   the pinned Deno runtime from the npm registry's platform package (deno_runtime.ts, read
 *   from the npm cache and checked against its pinned integrity; nothing is downloaded). It
 *   extracts into a directory per release, checks it on every start, and execs the runtime.
 * - `compile`: `deno compile` of the same tree (deploy/compile.ts), for where a `denort` is at
 *   hand: Deno's download host, or `DENORT_BIN`.
 *
 * `--kind auto` (the default) compiles when `DENORT_BIN` is set, else builds self-extracting.
 * The host platform's executable is then run once (`--version`, extracting into a temporary
 * directory) to prove it is the agent; the sizes printed come from that run.
 *
 * Run as `deno task release [--outdir dist] [--platform linux-amd64]... [--kind auto]
 * [--deno-package file.tgz] [--npm-cache dir]`. Talks to the file system and runs `deno`
 * (info, install, compile) and the result.
 */

import { parseArgs } from "node:util";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { AGENT_VERSION } from "../src/util/version.ts";
import { AGENT_RUN_FLAGS, CompileError, compileKubelet, VERSION_PREFIX } from "./compile.ts";
import {
  DENO_RUNTIMES,
  DENO_VERSION,
  DenoRuntimeError,
  loadDenoRuntime,
  runtimePin,
} from "./deno_runtime.ts";
import { ReleaseGraphError, runtimeGraph, stageRuntimeTree, treeFiles } from "./release_graph.ts";
import { bundleAgentWorker } from "./release_bundle.ts";
import { selfExtracting, SelfExtractingError } from "./self_extracting.ts";
import { sha256Hex } from "./oci_layout.ts";

/** The repository this module belongs to. */
export const REPO_ROOT = fileURLToPath(new URL("..", import.meta.url));

/**
 * The runtime's arguments in a release: the agent's run flags, and no module or package from
 * anywhere but the tree (a missing one is an error, not a download).
 */
export const RELEASE_RUN_FLAGS: readonly string[] = ["run", ...AGENT_RUN_FLAGS, "--cached-only"];

/** How a release executable is built. */
export type ReleaseKind = "self-extracting" | "compile";

/** What {@link buildRelease} needs. */
export interface ReleaseOptions {
  /** Where `<platform>/kubelet` and `<platform>/SHA256SUMS` go. @default "dist" */
  readonly outdir: string;
  /** The platforms; when unset, every pinned one whose runtime is at hand. */
  readonly platforms?: readonly string[];
  /** @default "self-extracting", or "compile" when DENORT_BIN is set */
  readonly kind?: ReleaseKind;
  /** The runtime package tarball of the one platform asked for. */
  readonly denoPackage?: string;
  /** npm's cache directory. @default deno_runtime.ts defaultNpmCache */
  readonly npmCache?: string;
  /** Lines about progress. @default stderr */
  readonly log?: (line: string) => void;
}

/** One platform's executable. */
export interface ReleaseFile {
  readonly platform: string;
  readonly kind: ReleaseKind;
  readonly path: string;
  readonly bytes: number;
  readonly sha256: string;
  /** The extracted tree's size (self-extracting only). */
  readonly treeBytes?: number;
  /** What `--version` printed, for the host's platform. */
  readonly version?: string;
}

/** The release cannot be built as asked; the message says why. */
export class ReleaseError extends Error {
  override name = "ReleaseError";
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

/** The platform name of this host, as the pins name platforms. */
export function hostPlatform(): string {
  return `linux-${
    Deno.build.arch === "x86_64"
      ? "amd64"
      : Deno.build.arch === "aarch64"
      ? "arm64"
      : Deno.build.arch
  }`;
}

/** Builds the release files; returns one entry per platform built. */
export async function buildRelease(opts: ReleaseOptions): Promise<ReleaseFile[]> {
  const log = opts.log ?? ((l: string) => console.error(l));
  const kind = opts.kind ?? (Deno.env.get("DENORT_BIN") ? "compile" : "self-extracting");
  if (Deno.version.deno !== DENO_VERSION) {
    throw new ReleaseError(
      `releases are built with Deno ${DENO_VERSION}, the version the agent is tested on and the ` +
        `runtime pinned in deploy/deno_runtime.ts; this is Deno ${Deno.version.deno}`,
    );
  }
  if (opts.denoPackage && opts.platforms?.length !== 1) {
    throw new ReleaseError(
      "--deno-package is the runtime of one platform: name it with --platform",
    );
  }
  const platforms = opts.platforms ?? DENO_RUNTIMES.map((p) => p.platform);
  for (const p of platforms) runtimePin(p);
  const staging = await Deno.makeTempDir({ prefix: "kubelet-release-" });
  try {
    const graph = await runtimeGraph(REPO_ROOT);
    const app = join(staging, "app");
    await stageRuntimeTree(graph, REPO_ROOT, app);
    await bundleAgentWorker(REPO_ROOT, app);
    const staged = await treeFiles(app);
    log(
      `release: the agent's tree: ${graph.files.length} modules, npm ${
        graph.packages.join(", ")
      } ` +
        `(${staged.length} files)`,
    );
    const out: ReleaseFile[] = [];
    for (const platform of platforms) {
      const dir = join(opts.outdir, platform);
      const path = join(dir, "kubelet");
      await Deno.mkdir(dir, { recursive: true });
      const host = platform === hostPlatform();
      let treeBytes: number | undefined;
      let version: string | undefined;
      if (kind === "compile") {
        ({ version } = await compileKubelet({
          output: resolve(path),
          target: runtimePin(platform).target,
          include: graph.roots.slice(1),
          noCheck: true,
          cwd: app,
          check: host,
        }));
      } else {
        let runtime;
        try {
          runtime = await loadDenoRuntime(runtimePin(platform), {
            ...(opts.denoPackage ? { packageFile: opts.denoPackage } : {}),
            ...(opts.npmCache ? { npmCache: opts.npmCache } : {}),
          });
        } catch (e) {
          // Every pinned platform is tried when none is named: skip those not at hand.
          if (opts.platforms || !(e instanceof DenoRuntimeError) || platform === hostPlatform()) {
            throw e;
          }
          log(`release: ${platform} skipped: ${e.message}`);
          continue;
        }
        const built = selfExtracting({
          version: AGENT_VERSION,
          platform,
          runtimeName: `npm ${runtime.pin.npmPackage}@${DENO_VERSION}`,
          runtime: runtime.executable,
          app: await Promise.all(staged.map(async (f) => ({
            path: f.path,
            data: await Deno.readFile(join(app, f.path)),
            executable: (f.mode & 0o111) !== 0,
          }))),
          runFlags: RELEASE_RUN_FLAGS,
        });
        await Deno.writeFile(path, built.bytes, { mode: 0o755 });
        await Deno.chmod(path, 0o755);
        treeBytes = built.treeBytes;
        if (host) version = await checkRelease(path);
      }
      const data = await Deno.readFile(path);
      const sha256 = sha256Hex(data);
      await Deno.writeTextFile(join(dir, "SHA256SUMS"), `${sha256}  kubelet\n`);
      out.push({
        platform,
        kind,
        path,
        bytes: data.length,
        sha256,
        ...(treeBytes !== undefined ? { treeBytes } : {}),
        ...(version ? { version } : {}),
      });
    }
    return out;
  } finally {
    await Deno.remove(staging, { recursive: true });
  }
}

/** Runs `path --version`, extracting into a temporary directory; returns what it printed. */
async function checkRelease(path: string): Promise<string> {
  const extract = await Deno.makeTempDir({ prefix: "kubelet-release-check-" });
  try {
    const run = await new Deno.Command(path, {
      args: ["--version"],
      env: { KUBELET_TS_EXTRACT_DIR: extract },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(120_000),
    }).output();
    const dec = new TextDecoder();
    const out = dec.decode(run.stdout).trim();
    if (run.code !== 0 || !out.startsWith(VERSION_PREFIX)) {
      throw new ReleaseError(
        `${path} is not the agent: '--version' printed ${JSON.stringify(out.slice(0, 200))} ` +
          `(exit ${run.code}): ${dec.decode(run.stderr).trim().slice(0, 2000)}`,
      );
    }
    return out;
  } finally {
    await Deno.remove(extract, { recursive: true });
  }
}

function mib(bytes: number): string {
  return `${(bytes / (1 << 20)).toFixed(1)} MiB`;
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      outdir: { type: "string", default: "dist" },
      platform: { type: "string", multiple: true },
      kind: { type: "string", default: "auto" },
      "deno-package": { type: "string" },
      "npm-cache": { type: "string" },
    },
  });
  try {
    const kind = values.kind;
    if (kind !== "auto" && kind !== "self-extracting" && kind !== "compile") {
      throw new ReleaseError(
        `--kind must be auto, self-extracting or compile: current value is '${kind}'`,
      );
    }
    const files = await buildRelease({
      outdir: values.outdir!,
      ...(values.platform ? { platforms: values.platform } : {}),
      ...(kind !== "auto" ? { kind } : {}),
      ...(values["deno-package"] ? { denoPackage: values["deno-package"] } : {}),
      ...(values["npm-cache"] ? { npmCache: values["npm-cache"] } : {}),
    });
    for (const f of files) {
      console.log(
        `${f.path}: ${f.kind}, ${mib(f.bytes)} (${f.bytes} bytes)` +
          (f.treeBytes !== undefined ? `, extracts to ${mib(f.treeBytes)}` : "") +
          (f.version ? `, ${f.version}` : "") +
          `\n  sha256 ${f.sha256} (${dirname(f.path)}/SHA256SUMS)`,
      );
    }
  } catch (e) {
    const known = e instanceof ReleaseError || e instanceof ReleaseGraphError ||
      e instanceof DenoRuntimeError || e instanceof SelfExtractingError ||
      e instanceof CompileError;
    console.error(`error: ${known ? e.message : String(e)}`);
    Deno.exit(1);
  }
}
