/**
 * @module
 * The kubelet's own share of pod start latency, for the benchmark suite (tests/bench_suite.ts):
 * at a percentile, a kubelet's latency minus the CRI floor's measured in the same run (the same
 * sandbox and container calls straight to containerd, all at once for a burst), ours next to
 * upstream's, and their ratio. Where the runtime alone takes most of a start, "half of
 * upstream's latency" cannot be reached; half of upstream's overhead above the floor can.
 */

import { ms, percentile, ratio, table } from "./_bench_measure.ts";

/** One case's latencies (ms, one per pod). */
export interface OverheadCase {
  readonly what: string;
  readonly floor: readonly number[];
  readonly agent: readonly number[];
  readonly upstream: readonly number[];
}

/** One case at one percentile. */
export interface Overhead {
  readonly floorMs: number;
  /** Each kubelet's latency minus the floor's, ms (below 0 when it beat the floor there). */
  readonly agentMs: number;
  readonly upstreamMs: number;
}

/** `c` at percentile `p`. */
export function overheadAt(c: OverheadCase, p: number): Overhead {
  const floorMs = percentile(c.floor, p);
  return {
    floorMs,
    agentMs: percentile(c.agent, p) - floorMs,
    upstreamMs: percentile(c.upstream, p) - floorMs,
  };
}

/**
 * Whether ours is at most `factor` of upstream's overhead; an upstream overhead at or below 0
 * (upstream at the floor) leaves ours the same bound of 0.
 */
export function overheadMet(o: Overhead, factor: number): boolean {
  return o.agentMs <= factor * Math.max(o.upstreamMs, 0);
}

/**
 * Which of our kubelets the overhead and the targets are worked out for: the checkout's `agent`,
 * else the release file's `agent-release` (a run of the release alone), else none.
 */
export function comparedAgent<T extends { readonly label: string }>(
  agents: readonly T[],
): T | undefined {
  return agents.find((a) => a.label === "agent") ??
    agents.find((a) => a.label === "agent-release");
}

/**
 * Rows per case and percentile: the floor, each kubelet's overhead, ours / upstream's; `label`
 * names ours in the header.
 */
export function overheadTable(cases: readonly OverheadCase[], label = "agent"): string {
  const rows = cases.flatMap((c) =>
    [50, 99].map((p) => {
      const o = overheadAt(c, p);
      return [
        `${c.what}, p${p}`,
        ms(o.floorMs),
        ms(o.agentMs),
        ms(o.upstreamMs),
        o.upstreamMs <= 0 ? "n/a" : o.agentMs < 0 ? "< 0" : ratio(o.agentMs, o.upstreamMs),
      ];
    })
  );
  return table(
    [
      "case",
      "CRI floor",
      `${label} − floor`,
      "upstream − floor",
      `${label} / upstream overhead`,
    ],
    rows,
  );
}
