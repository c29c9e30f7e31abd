/**
 * @module
 * The agent Worker's bundle in the release tree: `deno bundle` (esbuild) of
 * `src/privilege/agent_worker.ts` into one ES module with its npm packages,
 * `src/privilege/agent_worker.js` beside the module, which the launcher runs when it is there
 * (src/privilege/launcher.ts); and `agent_worker.js.modules.json`, the bundle line each module
 * starts at (esbuild's `// path` comment before it), from which klog gives log headers and
 * `-vmodule` the module's file name (src/klog/_bundle_sites.ts). The bundle is ASCII only
 * ({@link asciiSource}).
 *
 * Why: the Worker holds the kubelet's whole graph, about 340 modules, and Deno keeps about
 * 25 KiB of resident memory per module loaded; from one module the same code holds about 9 MiB
 * less (kubelet_server.ts's graph imported and settled: 69.7 MiB against 78.3 MiB with the
 * agent's run flags). Not minified: that would save 6 MiB more but rename every function, so
 * profiles and stack traces would read as noise. No source map: Deno reads a linked one at load
 * and holds it (86.8 MiB). The modules stay in the tree too, for the launcher and the plan
 * Worker and for a kubelet run in the launcher's own process (least privilege off).
 *
 * Runs `deno bundle` in the repository.
 */

import { join } from "node:path";
import { moduleUrls, ReleaseGraphError } from "./release_graph.ts";

/** The Worker's module, relative to the repository and to the tree. */
export const AGENT_WORKER = "src/privilege/agent_worker.ts";
/** Its bundle, relative to the tree. */
export const AGENT_WORKER_BUNDLE = "src/privilege/agent_worker.js";

/** `[line, path]` for each `// path` comment of an unminified esbuild bundle, in order. */
export function moduleStarts(bundle: string): [number, string][] {
  const out: [number, string][] = [];
  const lines = bundle.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const m = /^\/\/ (\S+\.[cm]?[jt]s)$/.exec(lines[i]!);
    if (m) out.push([i + 1, m[1]!]);
  }
  return out;
}

/**
 * `text` with every character outside ASCII written as a `\\u` escape (a pair of them above
 * U+FFFF). V8 holds a script's source for as long as the script lives, one byte a character when
 * every character fits in one byte and two bytes a character otherwise: esbuild keeps doc
 * comments and regular expressions as written, and one `→` in either made the Worker's 3.7 MB
 * bundle a 7.4 MB string. In string, template and regular expression literals (with or without
 * the `u` flag) the escape means the same character; in a comment it is only text. Raw text sees
 * the escape instead (`String.raw`, a regular expression's `source`, a function's `toString()`),
 * as does an identifier above U+FFFF (escaped as surrogates, it no longer parses); the kubelet's
 * code has none of these. Throws where the escape would change what the code says: a character
 * right after a backslash (`"\\é"` would become a backslash and the text `u00e9`), and U+2028
 * and U+2029, which JavaScript reads as line breaks.
 */
export function asciiSource(text: string): string {
  // Code units, so a character above U+FFFF becomes its two surrogates' escapes.
  return text.replace(/[\u0080-\uffff]/g, (unit, at: number) => {
    if (unit === "\u2028" || unit === "\u2029" || text[at - 1] === "\\") {
      const line = text.slice(0, at).split("\n").length;
      throw new ReleaseGraphError(
        `line ${line} of the bundle has ${text[at - 1] === "\\" ? "a backslash before " : ""}U+${
          unit.charCodeAt(0).toString(16).padStart(4, "0")
        }: it cannot be escaped`,
      );
    }
    return `\\u${unit.charCodeAt(0).toString(16).padStart(4, "0")}`;
  });
}

/** What {@link bundleModule} needs. */
export interface BundleOptions {
  /** The repository: `deno bundle` runs there, and the table's paths are relative to it. */
  readonly repo: string;
  /** The entry module, relative to `repo` or absolute. */
  readonly entry: string;
  /** The bundle to write; its table goes to `<out>.modules.json`. */
  readonly out: string;
  /** Modules (table paths) the bundle must hold. @default none */
  readonly modules?: readonly string[];
}

/**
 * Bundles `entry` into `out` with its module table. Throws when the bundle loads a module by
 * URL (a Worker would be looked for beside the bundle) or lacks one of `modules` (a minified
 * bundle names none).
 */
export async function bundleModule(opts: BundleOptions): Promise<void> {
  const r = await new Deno.Command(Deno.execPath(), {
    args: ["bundle", "--quiet", "--platform", "deno", "--output", opts.out, opts.entry],
    cwd: opts.repo,
    env: { DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (r.code !== 0) {
    throw new ReleaseGraphError(
      `deno bundle ${opts.entry} failed (exit ${r.code}):\n${
        new TextDecoder().decode(r.stderr).trim()
      }`,
    );
  }
  const text = asciiSource(await Deno.readTextFile(opts.out));
  await Deno.writeTextFile(opts.out, text);
  const urls = moduleUrls(text, new URL(`file://${opts.out}`).href);
  if (urls.length > 0) {
    throw new ReleaseGraphError(
      `the bundle of ${opts.entry} loads modules by URL (${urls.join(", ")}): they would be ` +
        `looked for beside the bundle`,
    );
  }
  const starts = moduleStarts(text);
  for (const needed of opts.modules ?? []) {
    if (!starts.some(([, path]) => path === needed)) {
      throw new ReleaseGraphError(`the bundle of ${opts.entry} names no module ${needed}`);
    }
  }
  await Deno.writeTextFile(`${opts.out}.modules.json`, JSON.stringify(starts) + "\n");
}

/** Bundles the kubelet's Worker into `tree`, the staged runtime tree. */
export function bundleAgentWorker(repo: string, tree: string): Promise<void> {
  return bundleModule({
    repo,
    entry: AGENT_WORKER,
    out: join(tree, AGENT_WORKER_BUNDLE),
    modules: [AGENT_WORKER, "src/klog/klog.ts"],
  });
}
