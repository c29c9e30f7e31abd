/**
 * @module
 * `deno task conformance-compare --ours FILE... --upstream FILE...`: compares the results files
 * of `deno task conformance` for this kubelet with the Go kubelet's on the same specs and prints
 * the comparison (tests/conformance_report.ts's renderComparison). Several files per side are a
 * run and its reruns, later rows replacing earlier ones. Exits 1 when a spec passed with the Go
 * kubelet and not with this one, 2 on a bad command line or file.
 */

import { parseArgs } from "node:util";
import { compareRuns, readResultRows, renderComparison } from "./conformance_report.ts";

const USAGE = "Usage: deno task conformance-compare --ours FILE [--ours FILE...] " +
  "--upstream FILE [--upstream FILE...]";

/** A bad command line or results file; the message says which. */
export class CompareUsageError extends Error {
  override name = "CompareUsageError";
}

async function rows(files: readonly string[], option: string) {
  if (files.length === 0) throw new CompareUsageError(`${USAGE}\n${option} names no results file`);
  const texts = await Promise.all(files.map((f) => Deno.readTextFile(f)));
  const read = readResultRows(...texts);
  if (read.size === 0) {
    throw new CompareUsageError(
      `${option}: no spec rows in ${files.join(", ")} (not a results file?)`,
    );
  }
  return read;
}

/** Runs the command line `args`; resolves to the exit code. */
export async function main(args: readonly string[]): Promise<number> {
  try {
    const { values } = parseArgs({
      args: [...args],
      options: {
        ours: { type: "string", multiple: true, default: [] },
        upstream: { type: "string", multiple: true, default: [] },
      },
    });
    const comparison = compareRuns(
      await rows(values.ours, "--ours"),
      await rows(values.upstream, "--upstream"),
    );
    console.log(
      renderComparison(comparison, { candidate: "kubelet-ts", reference: "the Go kubelet" }),
    );
    return comparison.regressions.length === 0 ? 0 : 1;
  } catch (err) {
    console.error(err instanceof Error ? err.message : String(err));
    return 2;
  }
}

if (import.meta.main) Deno.exit(await main(Deno.args));
