/**
 * `promtool check metrics` for the tests: the linter promtool runs for that command (client_golang's
 * `prometheus/testutil/promlint`, which parses the text exposition strictly and reports naming,
 * unit, counter-suffix and HELP problems), built from its Go module into the test binary cache as
 * a five-line program that does what promtool's checkMetrics does: lint stdin, print each problem
 * as `metric: text`. The whole of promtool would pull Prometheus's server and its service
 * discovery SDKs for the same few lines. Test support only.
 */

import { ensureBinary } from "./control_plane_build.ts";

/** The client_golang release the kubelet v1.36.3 builds with (its go.mod). */
export const CLIENT_GOLANG_VERSION = "v1.23.2";

const MAIN_GO = `package main

import (
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

func main() {
	problems, err := promlint.New(os.Stdin).Lint()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error while linting:", err)
		os.Exit(1)
	}
	for _, p := range problems {
		fmt.Printf("%s: %s\\n", p.Metric, p.Text)
	}
}
`;

/** Builds (or reuses) the linter; returns its path. */
export async function ensurePromlint(log?: (line: string) => void): Promise<string> {
  return await ensureBinary({
    name: "promlint",
    version: CLIENT_GOLANG_VERSION,
    module: "github.com/prometheus/client_golang",
    pkg: ".",
    expectVersion: "",
    ldflags: [],
    mainGo: MAIN_GO,
  }, { log });
}

/**
 * Lints one scrape as `promtool check metrics` does: the problems, one `metric: text` each;
 * throws with the linter's message when the text does not parse.
 */
export async function lintMetrics(binary: string, text: string): Promise<string[]> {
  const child = new Deno.Command(binary, { stdin: "piped", stdout: "piped", stderr: "piped" })
    .spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(text));
  await writer.close();
  const out = await child.output();
  const stderr = new TextDecoder().decode(out.stderr).trim();
  if (!out.success) throw new Error(`promlint: ${stderr || `exit ${out.code}`}`);
  return new TextDecoder().decode(out.stdout).split("\n").filter((l) => l !== "");
}
