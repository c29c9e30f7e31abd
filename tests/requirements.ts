/**
 * @module
 * What a process-level test needs from the machine (root, Linux, programs), and the rule for
 * when it is missing: skip loudly with the reason, except under CI=true, where the test runs
 * and fails with that reason, so CI never passes by skipping.
 */

import { findProgram } from "./apt.ts";

/** Why tests needing root and `programs` cannot run here, or undefined when they can. */
export async function whyNotRunnable(programs: readonly string[]): Promise<string | undefined> {
  if (Deno.build.os !== "linux") return `these tests need Linux, not ${Deno.build.os}`;
  if (Deno.uid() !== 0) return `these tests need root (uid is ${Deno.uid()})`;
  for (const program of programs) {
    if (!(await findProgram(program))) return `'${program}' is not installed`;
  }
  return undefined;
}

/** The gate of one test file: `ignore` for Deno.test, and `check()` to call first in each test. */
export interface Gate {
  readonly ignore: boolean;
  check(): void;
}

/** Builds the gate for a test file whose tests need root and `programs`. */
export async function requireRoot(what: string, programs: readonly string[]): Promise<Gate> {
  const reason = await whyNotRunnable(programs);
  const inCI = Deno.env.get("CI") === "true";
  if (reason && !inCI) console.warn(`SKIPPING ${what}: ${reason}`);
  return {
    ignore: reason !== undefined && !inCI,
    check() {
      if (reason) throw new Error(`CI=true but ${what} cannot run: ${reason}`);
    },
  };
}
