/**
 * @module
 * Small pieces the process harnesses (containerd, registry, control plane) share: a free
 * loopback port, signalling a child that may already be gone, the tail of a log file for
 * error messages, running a program to completion, and whether a path exists.
 */

import { lastLines } from "./apt.ts";

/** A port on 127.0.0.1 that was free a moment ago. */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

/** Sends `signal` to `child`, ignoring a child that has already exited. */
export function signalChild(child: Deno.ChildProcess, signal: Deno.Signal): void {
  try {
    child.kill(signal);
  } catch {
    // already exited
  }
}

/** The last `n` lines of a log file, or why it cannot be read. */
export async function logTail(file: string, n: number): Promise<string> {
  try {
    return lastLines(await Deno.readTextFile(file), n);
  } catch (err) {
    return `(cannot read ${file}: ${(err as Error).message})`;
  }
}

/** Whether something (a dangling symlink too) is at `path`. */
export async function exists(path: string): Promise<boolean> {
  try {
    await Deno.lstat(path);
    return true;
  } catch {
    return false;
  }
}

/** What {@link run} returns: the exit code and the decoded output. */
export interface RunResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs a program (`args[0]`) to completion; never throws on its exit code. */
export async function run(
  args: readonly string[],
  opts: { signal?: AbortSignal; env?: Record<string, string> } = {},
): Promise<RunResult> {
  const [program, ...rest] = args;
  const out = await new Deno.Command(program!, {
    args: rest,
    env: opts.env,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal: opts.signal,
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

/** {@link run} that must succeed: its stdout, else an error quoting the command and its output. */
export async function must(
  args: readonly string[],
  opts: { signal?: AbortSignal; env?: Record<string, string> } = {},
): Promise<string> {
  const r = await run(args, opts);
  if (r.code !== 0) {
    throw new Error(
      `'${args.join(" ")}' exited ${r.code}: ${lastLines(`${r.stderr}${r.stdout}`.trim(), 10)}`,
    );
  }
  return r.stdout;
}
