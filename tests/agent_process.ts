/**
 * @module
 * Starts the agent (`main.ts`) as a subprocess for tests, the way an operator runs it: with a
 * command line, under either `--allow-all` or the agent's own permission set `-P=kubelet`.
 */

import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { AGENT_RUN_FLAGS, AGENT_RUNTIME_FLAGS } from "../deploy/compile.ts";
import { restoreKernelTunables, saveKernelTunables } from "./kernel_tunables.ts";

/**
 * A line the agent logs after it has written the kernel tunables (its Worker's first line,
 * "kubelet version"), after which the suite's values may go back.
 */
const TUNABLES_DONE = '"kubelet version"';

/** The repository root, where deno.json (and its permission set) lives. */
export const REPO_ROOT = fileURLToPath(new URL("../", import.meta.url));

/** How to run the agent. */
export interface AgentOptions {
  /** "all" runs with the compile task's flags (--allow-all); "kubelet" with the deno.json permission set. @default "all" */
  readonly permissions?: "all" | "kubelet";
  readonly env?: Record<string, string>;
  /** The deno binary the agent runs on. @default this process's (Deno.execPath()) */
  readonly executable?: string;
  /**
   * The program and its first arguments, run in place of `deno run <flags> main.ts`: the agent's
   * arguments follow. For the release file (`deno task release`), which carries its runtime and
   * flags, e.g. `["nsenter", "--net=/run/netns/x", "--", "dist/linux-amd64/kubelet"]`.
   * `permissions`, `executable` and the V8 and deno flags of the environment do not apply.
   */
  readonly command?: readonly string[];
  /**
   * Put before the whole command line: the program the agent runs under, e.g. tests/kubeadm_cluster.ts's
   * `["nsenter", "--net=/run/netns/x", "--mount=...", "--"]` for a node of its own. @default none
   */
  readonly prefix?: readonly string[];
}

/**
 * The error lines of an agent's stderr, but for the one this machine gives every kubelet at start:
 * without CAP_SYS_RESOURCE no process may raise its hard limit on open files to maxOpenFiles'
 * default, which upstream's kubelet logs as an error too ("Failed to set rlimit on max file
 * handles") and goes on.
 */
export function errorLines(stderr: string): string[] {
  return stderr.split("\n").filter((l) =>
    l.startsWith("E") && !l.includes('"Failed to set rlimit on max file handles"')
  );
}

/** The whitespace-separated words of environment variable `name` (none when unset). */
function envWords(name: string): string[] {
  return (Deno.env.get(name) ?? "").split(/\s+/).filter((a) => a !== "");
}

function command(args: readonly string[], opts: AgentOptions): Deno.Command {
  // "all" is how `deno task start` and the compiled binary run the agent.
  const perms = opts.permissions === "kubelet"
    ? ["-P=kubelet", "--no-prompt", ...AGENT_RUNTIME_FLAGS]
    : AGENT_RUN_FLAGS;
  // For profiling a run, e.g. KUBELET_TS_AGENT_V8_FLAGS=--prof,--logfile=/tmp/agent-%p.log:
  // added to the agent's own V8 flags (a second --v8-flags would replace them).
  const extra = Deno.env.get("KUBELET_TS_AGENT_V8_FLAGS");
  const flags = extra ? perms.map((f) => f.startsWith("--v8-flags=") ? `${f},${extra}` : f) : perms;
  // Agents run in their sandbox, as they ship; KUBELET_TS_LEAST_PRIVILEGE=0 runs every agent of
  // the suite without it (--least-privilege=false), to compare (least_privilege_test.ts fails then).
  const sandbox = Deno.env.get("KUBELET_TS_LEAST_PRIVILEGE") === "0"
    ? ["--least-privilege=false"]
    : [];
  // For an A/B run of one of the agent's own flags, e.g.
  // KUBELET_TS_AGENT_ARGS=--max-parallel-sandbox-starts=0: appended to every agent's arguments.
  const more = envWords("KUBELET_TS_AGENT_ARGS");
  // For a CPU profile of a run, e.g. KUBELET_TS_AGENT_DENO_FLAGS=--inspect=127.0.0.1:9229 with
  // KUBELET_TS_LEAST_PRIVILEGE=0 (the kubelet then runs in the inspected isolate): deno's own
  // flags, before main.ts.
  const deno = envWords("KUBELET_TS_AGENT_DENO_FLAGS");
  const [program, ...first] = [
    ...(opts.prefix ?? []),
    ...(opts.command ??
      [opts.executable ?? Deno.execPath(), "run", "--quiet", ...flags, ...deno, "main.ts"]),
  ];
  return new Deno.Command(program!, {
    args: [...first, ...args, ...sandbox, ...more],
    cwd: REPO_ROOT,
    env: { NO_COLOR: "1", ...opts.env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  });
}

/**
 * A copy of this process's deno binary at `<dir>/deno`, synced to disk, for an agent that must
 * run from a binary of its own as on a node: the launcher pages out the executable's start-up
 * pages (src/util/free_os_memory.ts), and pages another process maps too (this test process, on
 * the same binary) stay resident, so the agent's RSS would not be what it is on a node. Synced,
 * as an installed binary is: the kernel cannot page out pages still waiting to be written.
 */
export async function ownDenoBinary(dir: string): Promise<string> {
  const executable = join(dir, "deno");
  await Deno.copyFile(Deno.execPath(), executable);
  using copy = await Deno.open(executable);
  await copy.sync();
  return executable;
}

/** Runs the agent to completion and returns its exit code and output. */
export async function runAgent(
  args: readonly string[],
  opts: AgentOptions = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  saveKernelTunables(false);
  const out = await command(args, opts).output();
  restoreKernelTunables();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

/** A running agent whose stderr is collected as it comes. */
export interface RunningAgent {
  readonly process: Deno.ChildProcess;
  /** All stderr so far. */
  stderr(): string;
  /** Resolves when stderr contains `text`, rejects after `ms`. */
  waitFor(text: string | RegExp, ms?: number): Promise<void>;
}

/** Starts the agent and returns while it runs. */
export function spawnAgent(args: readonly string[], opts: AgentOptions = {}): RunningAgent {
  saveKernelTunables(false);
  const child = command(args, opts).spawn();
  // The kubelet writes the kernel tunables it wants at start (tests/kernel_tunables.ts): the
  // suite's values go back once it ends, and each time a wait for its start-up line succeeds.
  void child.status.then(() => restoreKernelTunables());
  let err = "";
  const dec = new TextDecoder();
  const pump = (async () => {
    for await (const chunk of child.stderr) err += dec.decode(chunk, { stream: true });
  })();
  void child.stdout.cancel();
  const matches = (t: string | RegExp) => (typeof t === "string" ? err.includes(t) : t.test(err));
  return {
    process: child,
    stderr: () => err,
    async waitFor(text, ms = 20_000) {
      const end = Date.now() + ms;
      while (!matches(text)) {
        if (Date.now() > end) {
          throw new Error(`agent did not log ${text} within ${ms} ms; stderr:\n${err}`);
        }
        const done = await Promise.race([
          pump.then(() => true),
          new Promise((r) => setTimeout(() => r(false), 25)),
        ]);
        if (done && !matches(text)) {
          throw new Error(`agent exited without logging ${text}; stderr:\n${err}`);
        }
      }
      if (err.includes(TUNABLES_DONE)) restoreKernelTunables();
    },
  };
}
