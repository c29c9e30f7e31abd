/**
 * @module
 * The release file in the benchmark suite (tests/bench_suite.ts): `agent-release` is our agent
 * started from the self-extracting file of `deno task release` (deploy/release.ts) instead of
 * `deno run main.ts`, as `deno task start` runs it (`agent`). This module builds the file for a
 * run, measures what it extracted (the tree, the runtime in it, and Deno's transpile cache the
 * agent wrote there) and prints the file's sizes with the two agents' start-up, memory and CPU
 * side by side.
 */

import { join } from "node:path";
import { buildRelease, hostPlatform } from "../deploy/release.ts";
import { mib, millicores, ms, ratio, table } from "./_bench_measure.ts";

/** The release file and what it extracted. */
export interface ReleaseFigures {
  readonly path: string;
  /** The file's size. */
  readonly bytes: number;
  /** The extracted tree's files (runtime and agent), Deno's cache aside. */
  readonly treeBytes: number;
  /** The Deno runtime in the tree. */
  readonly runtimeBytes: number;
  /** Deno's transpile cache the agent wrote into the tree; NaN before it ran. */
  readonly cacheBytes: number;
}

/** Builds the host platform's self-extracting file under `outdir`. */
export async function buildBenchRelease(
  outdir: string,
  log: (line: string) => void,
): Promise<ReleaseFigures> {
  const [file] = await buildRelease({
    outdir,
    platforms: [hostPlatform()],
    kind: "self-extracting",
    log,
  });
  if (!file) throw new Error(`deno task release built nothing in ${outdir}`);
  return {
    path: file.path,
    bytes: file.bytes,
    treeBytes: file.treeBytes ?? NaN,
    runtimeBytes: NaN,
    cacheBytes: NaN,
  };
}

/** The bytes of the regular files under `dir` (links not followed). */
export async function filesBytes(dir: string): Promise<number> {
  let n = 0;
  for await (const e of Deno.readDir(dir)) {
    const p = join(dir, e.name);
    if (e.isDirectory) n += await filesBytes(p);
    else if (e.isFile) n += (await Deno.lstat(p)).size;
  }
  return n;
}

/** `figures` with the sizes of the one tree extracted under `extractDir`, as found on disk. */
export async function withExtracted(
  figures: ReleaseFigures,
  extractDir: string,
): Promise<ReleaseFigures> {
  const trees = [];
  for await (const e of Deno.readDir(extractDir)) if (e.isDirectory) trees.push(e.name);
  if (trees.length !== 1) {
    throw new Error(`one extracted tree expected in ${extractDir}: found ${trees.join(", ")}`);
  }
  const tree = join(extractDir, trees[0]!);
  const cacheBytes = await filesBytes(join(tree, "cache")).catch(() => 0);
  return {
    ...figures,
    treeBytes: await filesBytes(tree) - cacheBytes,
    runtimeBytes: (await Deno.stat(join(tree, "deno"))).size,
    cacheBytes,
  };
}

/** One of our agents' figures, for {@link releaseSection}. */
export interface AgentFigures {
  readonly label: string;
  /** Spawned → its sync loop started, ms. */
  readonly startMs: number;
  /** The release file's first start (extraction, Deno's transpile cache empty). */
  readonly firstStart?: { readonly ms: number; readonly peakMiB: number };
  /** Mean RSS (MiB) and cores of each window, in the report's order. */
  readonly windows: readonly { readonly what: string; rssMiB: number; cores: number }[];
  /** VmHWM at the end, MiB. */
  readonly peakMiB: number;
}

/** MiB of a byte count, as the report prints it. */
const mibOf = (bytes: number) => mib(bytes / 2 ** 20);

/**
 * The report's section: the file's sizes, then start-up, RSS and CPU of `agent` (from `deno
 * run main.ts`) beside `release` (from the file), with the ratio; without `agent`, the
 * release's column only.
 */
export function releaseSection(
  figures: ReleaseFigures,
  agent: AgentFigures | undefined,
  release: AgentFigures,
): string[] {
  const agentPart = figures.treeBytes - figures.runtimeBytes;
  const row = (
    what: string,
    show: (a: AgentFigures) => string,
    value: (a: AgentFigures) => number,
  ): string[] => [
    what,
    ...(agent ? [show(agent)] : []),
    show(release),
    ...(agent ? [ratio(value(release), value(agent))] : []),
  ];
  const rows = [row("spawned → sync loop started", (a) => ms(a.startMs), (a) => a.startMs)];
  for (const [i, w] of release.windows.entries()) {
    const at = (a: AgentFigures) => a.windows[i] ?? { rssMiB: NaN, cores: NaN };
    rows.push(row(`RSS, ${w.what}`, (a) => mib(at(a).rssMiB), (a) => at(a).rssMiB));
  }
  rows.push(row("RSS peak (VmHWM, whole run)", (a) => mib(a.peakMiB), (a) => a.peakMiB));
  for (const [i, w] of release.windows.entries()) {
    const at = (a: AgentFigures) => a.windows[i] ?? { rssMiB: NaN, cores: NaN };
    rows.push(row(`CPU, ${w.what}`, (a) => millicores(at(a).cores), (a) => at(a).cores));
  }
  return [
    `### The release file: ${release.label} (kubelet-ts started from \`deno task release\`'s file)${
      agent ? ` beside ${agent.label} (\`deno run main.ts\`, as \`deno task start\` runs it)` : ""
    }`,
    "",
    `- file \`${figures.path.split("/").slice(-2).join("/")}\`: ${mibOf(figures.bytes)} ` +
    `(${figures.bytes} bytes)`,
    `- extracted tree: ${mibOf(figures.treeBytes)} (runtime ${mibOf(figures.runtimeBytes)}, ` +
    `agent ${mibOf(agentPart)}), plus ${
      mibOf(figures.cacheBytes)
    } of Deno's transpile cache written by the run`,
    release.firstStart
      ? `- ${release.label}'s first start (it extracted the file; Deno's transpile cache was empty): ` +
        `spawned → sync loop started ${ms(release.firstStart.ms)}, peak RSS ${
          mib(release.firstStart.peakMiB)
        }; the process measured below is its second start, as after any restart`
      : `- ${release.label}: the process measured is its first start (it extracted the file)`,
    "",
    table(
      [
        "",
        ...(agent ? [agent.label] : []),
        release.label,
        ...(agent ? [`${release.label}/${agent.label}`] : []),
      ],
      rows,
    ),
  ];
}
