/**
 * @module
 * `deno task conformance-compare --ours FILE... --upstream FILE...`: compares the results files
 * of `deno task conformance` for this kubelet with the Go kubelet's on the same specs and prints
 * the comparison (tests/conformance_report.ts's renderComparison). Several files per side are a
 * run and its reruns, later rows replacing earlier ones. Exits 1 when a spec passed with the Go
 * kubelet and not with this one.
 */

import { parseArgs } from "node:util";
import { compareRuns, readResultRows, renderComparison } from "./conformance_report.ts";

const USAGE = "Usage: deno task conformance-compare --ours FILE [--ours FILE...] " +
  "--upstream FILE [--upstream FILE...]";

async function rows(files: readonly string[], option: string) {
  if (files.length === 0) throw new Error(`${USAGE}\n${option} names no results file`);
  const texts = await Promise.all(files.map((f) => Deno.readTextFile(f)));
  const read = readResultRows(...texts);
  if (read.size === 0) {
    throw new Error(`${option}: no spec rows in ${files.join(", ")} (not a results file?)`);
  }
  return read;
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      ours: { type: "string", multiple: true, default: [] },
      upstream: { type: "string", multiple: true, default: [] },
    },
  });
  try {
    const comparison = compareRuns(
      await rows(values.ours, "--ours"),
      await rows(values.upstream, "--upstream"),
    );
    console.log(
      renderComparison(comparison, { candidate: "kubelet-ts", reference: "the Go kubelet" }),
    );
    Deno.exit(comparison.regressions.length === 0 ? 0 : 1);
  } catch (err) {
    console.error(err instanceof Error ? err.message : String(err));
    Deno.exit(2);
  }
}
