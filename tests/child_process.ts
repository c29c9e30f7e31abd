/**
 * @module
 * Small pieces the process harnesses (containerd, registry, control plane) share: a free
 * loopback port, signalling a child that may already be gone, and the tail of a log file for
 * error messages.
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
