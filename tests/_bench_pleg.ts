/**
 * @module
 * The PLEG side of the benchmark suite (tests/bench_suite.ts). Our agent runs in two variants:
 * `agent`, as it ships, with its evented PLEG (the runtime's container events through CRI
 * GetContainerEvents, a relist every 5 minutes as the safety net: src/pleg/evented.ts), and
 * `agent-relist`, with the EventedPLEG feature gate off, relisting every second as upstream's
 * default generic PLEG does; the Go kubelet relists (its EventedPLEG gate is alpha and off). This
 * module names the variants, counts each kubelet's relists from its own
 * `kubelet_pleg_relist_duration_seconds` histogram (scraped through the apiserver's node proxy;
 * the same metric in both kubelets), says from a kubelet's log which PLEG ran, and prints the
 * figures side by side. Upstream's counterpart is the EventedPLEG KEP's evaluation
 * (KEP-3386).
 */

import type { KubeClient } from "../src/client/kube_client.ts";
import { millicores, ms, percentile, table } from "./_bench_measure.ts";

/**
 * The kubelets the suite can run; `agent-release` is `agent` started from the release file
 * (`deno task release`) instead of `deno run main.ts`, for its memory and start-up.
 */
export const AGENT_KINDS = ["agent", "agent-relist", "agent-release", "upstream"] as const;

/** One of {@link AGENT_KINDS}. */
export type AgentKind = typeof AGENT_KINDS[number];

/** What `agent-relist` adds to the agent's KubeletConfiguration. */
export const RELIST_CONFIG_LINES: readonly string[] = ["featureGates:", "  EventedPLEG: false"];

/** Whether `label` is a variant of this agent (not the Go kubelet). */
export function isOurs(label: string): boolean {
  return label !== "upstream";
}

const RELISTS = /^kubelet_pleg_relist_duration_seconds_count(?:\{[^}]*\})? ([0-9.eE+]+)$/m;

/** The relists a kubelet has counted, from its Prometheus text; NaN when the metric is absent. */
export function relistCount(text: string): number {
  const m = RELISTS.exec(text);
  return m ? Number(m[1]) : NaN;
}

/** Scrapes the kubelet's /metrics through the node proxy for its relist count. */
export async function scrapeRelists(client: KubeClient, nodeName: string): Promise<number> {
  return relistCount(await client.getText(`/api/v1/nodes/${nodeName}/proxy/metrics`));
}

/** Which PLEG a kubelet ran, from its label and (ours) its log. */
export function plegMode(label: string, stderr: string): string {
  if (!isOurs(label)) return "generic: relists every 1 s";
  if (label === "agent-relist") return "generic (EventedPLEG=false): relists every 1 s";
  if (stderr.includes("does not serve CRI GetContainerEvents")) {
    return "evented, but the runtime sends no container events: relists every 1 s";
  }
  const failures =
    stderr.split("\n").filter((l) => l.includes("Evented PLEG: Failed to get container events"))
      .length;
  return `evented: container events, relist every 5 min${
    failures > 0 ? `; the stream failed ${failures} times` : ""
  }`;
}

/** One kubelet's figures for {@link plegTable}. */
export interface PlegFigures {
  readonly label: string;
  /** {@link plegMode}'s text. */
  readonly pleg: string;
  /** Relists per minute over the two windows at 0 pods; NaN when /metrics was not read. */
  readonly relistsPerMinute: number;
  /** Cores over the first and the steady window at 0 pods. */
  readonly startupCores: number;
  readonly idleCores: number;
  /** Pod start latencies (create sent → watch shows every container running), ms. */
  readonly sequential: readonly number[];
  readonly bursts: readonly {
    readonly size: number;
    readonly latency: readonly number[];
    /** Cores over the window with the burst's pods running. */
    readonly cores: number;
  }[];
}

/** The measures as rows, one column per kubelet, in the order given. */
export function plegTable(kubelets: readonly PlegFigures[]): string {
  const p = (v: readonly number[]) => `${ms(percentile(v, 50))} / ${ms(percentile(v, 99))}`;
  const row = (what: string, f: (k: PlegFigures) => string) => [what, ...kubelets.map(f)];
  const sizes = kubelets[0]?.bursts.map((b) => b.size) ?? [];
  return table(["", ...kubelets.map((k) => k.label)], [
    row("PLEG", (k) => k.pleg),
    row(
      "PLEG relists per minute at 0 pods",
      (k) => Number.isFinite(k.relistsPerMinute) ? k.relistsPerMinute.toFixed(1) : "n/a",
    ),
    row("CPU at 0 pods, first window after Ready", (k) => millicores(k.startupCores)),
    row("CPU at 0 pods, steady", (k) => millicores(k.idleCores)),
    row(
      `pod start p50 / p99, 1 pod × ${kubelets[0]?.sequential.length ?? 0} sequential`,
      (k) => p(k.sequential),
    ),
    ...sizes.flatMap((size, i) => [
      row(`pod start p50 / p99, burst of ${size}`, (k) => p(k.bursts[i]?.latency ?? [])),
      row(`CPU with the burst of ${size} running`, (k) => millicores(k.bursts[i]?.cores ?? NaN)),
    ]),
  ]);
}
