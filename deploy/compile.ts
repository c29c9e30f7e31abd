/**
 * @module
 * `deno task compile`: builds the single `kubelet` executable with `deno compile`, with the
 * agent's run flags ({@link AGENT_RUN_FLAGS}) baked in, then proves the result is the agent by
 * running `<output> --version` and prints its size.
 *
 * `deno compile` needs Deno's `denort` runtime for the target: it downloads it from
 * dl.deno.land unless `DENORT_BIN` names a local copy. Both ways of failing are common on
 * nodes and build hosts without the internet, so each ends in one message saying what happened
 * and what to do ({@link explainCompileFailure}), and an executable that is not the agent (the
 * plain `deno` binary given as `DENORT_BIN` gives one that only starts the REPL) is removed
 * rather than left behind.
 *
 * Nothing is read at run time from the repository (the CRI types are generated TypeScript,
 * lazy imports are static specifiers `deno compile` follows); the Worker modules, which are
 * loaded by URL and which `deno compile` does not follow, are embedded with `--include`
 * (their list comes from release_graph.ts). `deno task release` compiles the same way from the
 * agent's runtime tree, which leaves out the npm packages the agent only takes types from.
 *
 * Run as `deno task compile [--output kubelet] [--target x86_64-unknown-linux-gnu]`.
 */

import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { runtimeGraph } from "./release_graph.ts";

/**
 * The flags the agent runs with: `deno task start`, the demo, the e2e harness
 * (tests/agent_process.ts) and the compiled binary all take them from here. `--allow-all`
 * because Deno 2.9 refuses every `/proc` and `/sys` read to a narrower set
 * (docs/least_privilege.md, "Known problem: /proc and /sys under -P=kubelet"). V8's young
 * generation is capped at 4 MiB per semi-space (left alone V8 grows it to 16 MiB and more during
 * a burst of pod starts and keeps it: about 50 MiB of resident memory at 110 fake-CRI pods) and
 * V8 optimizes for size (about 30 MiB less at 110 real pods and 60 MiB less at the peak, for
 * about 25% more CPU, still below upstream's; the same start times within the noise). Measured
 * in docs/status.md, "Process flags and memory".
 */
export const AGENT_V8_FLAGS = "--max-semi-space-size=4,--optimize-for-size";

/**
 * The agent's runtime flags, whatever its permissions: {@link AGENT_V8_FLAGS}, and no V8 code
 * cache. With the cache the agent holds 3.5-4 MiB more resident memory at 0 pods (2 MiB of it
 * the cache database Deno keeps mapped for as long as it runs), for no start-up CPU saved
 * (0.55-0.59 s over the first 40 s either way, standalone on the fake runtime). Measured in
 * bench/results/2026-12-05-vm-flags-ab.md.
 */
export const AGENT_RUNTIME_FLAGS: readonly string[] = [
  "--no-code-cache",
  `--v8-flags=${AGENT_V8_FLAGS}`,
];

/**
 * The agent's run flags: {@link AGENT_RUNTIME_FLAGS} and its permissions; deno.json's start
 * task spells them out. `--allow-all` is the launcher's (src/privilege/launcher.ts), which hands
 * the kubelet's Worker its own narrower set (src/privilege/permission_set.ts); `--unstable-worker-options` lets
 * it do so.
 */
export const AGENT_RUN_FLAGS: readonly string[] = [
  "--allow-all",
  "--unstable-worker-options",
  ...AGENT_RUNTIME_FLAGS,
];

/** Where Deno fetches `denort` from when `DENORT_BIN` is unset. */
export const DENORT_HOST = "dl.deno.land";

/** What {@link compileArgs} builds a command line from. */
export interface CompileOptions {
  /** The executable to write. @default "kubelet" */
  readonly output: string;
  /** A Rust target triple, as `deno compile --target`; the host's when unset. */
  readonly target?: string;
  /** More entry points to embed (`--include`): modules loaded by URL, as Workers are. */
  readonly include?: readonly string[];
  /** Skip type checking (a tree without its type-only packages cannot be checked). */
  readonly noCheck?: boolean;
}

/** The `deno` arguments that compile the agent. */
export function compileArgs(opts: CompileOptions): string[] {
  return [
    "compile",
    ...AGENT_RUN_FLAGS,
    ...(opts.target ? ["--target", opts.target] : []),
    ...(opts.noCheck ? ["--no-check"] : []),
    ...(opts.include ?? []).flatMap((path) => ["--include", path]),
    "--output",
    opts.output,
    "main.ts",
  ];
}

/** The compile failed or produced something that is not the agent; the message says why. */
export class CompileError extends Error {
  override name = "CompileError";
}

/**
 * Turns `deno compile`'s stderr into what an operator needs to read: a denort download that
 * could not reach {@link DENORT_HOST}, or a `DENORT_BIN` that does not exist. Undefined when the
 * failure is something else (then deno's own message is the one to show).
 */
export function explainCompileFailure(
  stderr: string,
  env: { readonly denortBin?: string; readonly denoVersion: string },
): string | undefined {
  const missing = /Could not find denort at '([^']*)'/.exec(stderr);
  if (missing) {
    return `DENORT_BIN=${missing[1]} does not exist: point DENORT_BIN at a denort binary of ` +
      `Deno ${env.denoVersion} for the target (denort-<target>.zip from Deno's release page), ` +
      `or unset it to download one from ${DENORT_HOST}`;
  }
  const download = /error sending request for url \((https:\/\/[^)\s]*denort[^)\s]*)\)([^\n]*)/
    .exec(stderr);
  if (download) {
    const why = download[2]!.replace(/^:\s*/, "").trim();
    return `deno compile could not download the denort runtime from ${DENORT_HOST} ` +
      `(${download[1]}${why ? `: ${why}` : ""}): this host cannot reach Deno's download host. ` +
      `Fetch that zip on a machine that can, unpack it here and run ` +
      `DENORT_BIN=/path/to/denort deno task compile (the plain deno binary is not a denort)`;
  }
  return undefined;
}

/** The first line `<output> --version` must print for the output to count as the agent. */
export const VERSION_PREFIX = "Kubernetes v";

async function checkBinary(output: string, denortBin: string | undefined): Promise<string> {
  const run = await new Deno.Command(output, {
    args: ["--version"],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(30_000),
  }).output();
  const out = new TextDecoder().decode(run.stdout).trim();
  if (run.code === 0 && out.startsWith(VERSION_PREFIX)) return out;
  throw new CompileError(
    `${output} is not the agent: '${output} --version' printed ${
      JSON.stringify(out.slice(0, 120))
    } ` +
      `(exit ${run.code})` +
      (denortBin
        ? `; DENORT_BIN=${denortBin} is probably not a denort binary (the plain deno binary ` +
          `gives an executable that only starts the REPL)`
        : ""),
  );
}

/**
 * Compiles the agent and checks the result (unless `check` is false: another platform's
 * executable does not run here); returns what `--version` printed and the size.
 */
export async function compileKubelet(
  opts: CompileOptions & {
    readonly cwd?: string;
    readonly signal?: AbortSignal;
    /** Run `<output> --version` to prove it is the agent. @default true */
    readonly check?: boolean;
  },
): Promise<{ version?: string; bytes: number }> {
  const denortBin = Deno.env.get("DENORT_BIN") || undefined;
  const out = await new Deno.Command(Deno.execPath(), {
    args: compileArgs(opts),
    cwd: opts.cwd,
    stdin: "null",
    stdout: "inherit",
    stderr: "piped",
    signal: opts.signal,
  }).output();
  const stderr = new TextDecoder().decode(out.stderr);
  if (out.code !== 0) {
    const why = explainCompileFailure(stderr, { denortBin, denoVersion: Deno.version.deno });
    throw new CompileError(why ?? `deno compile failed (exit ${out.code}):\n${stderr.trim()}`);
  }
  const path = opts.cwd && !opts.output.startsWith("/")
    ? `${opts.cwd}/${opts.output}`
    : opts.output;
  try {
    const version = opts.check === false ? undefined : await checkBinary(path, denortBin);
    return { ...(version ? { version } : {}), bytes: (await Deno.stat(path)).size };
  } catch (e) {
    await Deno.remove(path).catch(() => {});
    throw e;
  }
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: { output: { type: "string", default: "kubelet" }, target: { type: "string" } },
  });
  try {
    const graph = await runtimeGraph(fileURLToPath(new URL("..", import.meta.url)));
    const r = await compileKubelet({
      output: values.output!,
      target: values.target,
      include: graph.roots.slice(1),
    });
    const mib = (r.bytes / (1 << 20)).toFixed(1);
    console.log(`${values.output}: ${r.version}, ${mib} MiB (${r.bytes} bytes)`);
  } catch (e) {
    console.error(`error: ${e instanceof CompileError ? e.message : String(e)}`);
    Deno.exit(1);
  }
}
