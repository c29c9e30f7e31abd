/**
 * @module
 * The CRI calls each kubelet made while the benchmark suite (tests/bench_suite.ts) started its
 * sequential pods and each burst, as the kubelet itself timed them: the difference of its
 * `kubelet_runtime_operations_duration_seconds` histogram (sum and count per `operation_type`,
 * the same metric in both kubelets) between two scrapes of `/metrics` through the apiserver's
 * node proxy. It separates time spent inside the runtime from the kubelet's own.
 */

import type { KubeClient } from "../src/client/kube_client.ts";
import { table } from "./_bench_measure.ts";

/** Sum (seconds) and count of one operation type. */
export interface OpTotals {
  sum: number;
  count: number;
}

const SAMPLE =
  /^kubelet_runtime_operations_duration_seconds_(sum|count)\{([^}]*)\} ([0-9.eE+-]+|NaN|[+-]Inf)$/;

/**
 * Totals per operation type from Prometheus text; lines of other metrics are ignored (a lenient
 * scan, as the upstream kubelet's whole exposition is not ours to validate).
 */
export function runtimeOpTotals(text: string): Map<string, OpTotals> {
  const out = new Map<string, OpTotals>();
  for (const line of text.split("\n")) {
    const m = SAMPLE.exec(line.trim());
    if (!m) continue;
    const op = /(?:^|,)operation_type="([^"]*)"/.exec(m[2]!)?.[1];
    if (op === undefined) continue;
    const t = out.get(op) ?? { sum: 0, count: 0 };
    if (m[1] === "sum") t.sum += Number(m[3]);
    else t.count += Number(m[3]);
    out.set(op, t);
  }
  return out;
}

/** What happened between two scrapes: `after` minus `before`, operation types with calls only. */
export function opDelta(
  before: ReadonlyMap<string, OpTotals>,
  after: ReadonlyMap<string, OpTotals>,
): Map<string, OpTotals> {
  const out = new Map<string, OpTotals>();
  for (const [op, a] of after) {
    const b = before.get(op) ?? { sum: 0, count: 0 };
    const d = { sum: a.sum - b.sum, count: a.count - b.count };
    if (d.count > 0) out.set(op, d);
  }
  return out;
}

/** {@link opDelta} of two scrapes, or the first scrape's error. */
export function opsBetween(
  before: ReadonlyMap<string, OpTotals> | Error,
  after: ReadonlyMap<string, OpTotals> | Error,
): Map<string, OpTotals> | Error {
  if (before instanceof Error) return before;
  if (after instanceof Error) return after;
  return opDelta(before, after);
}

/** Scrapes the kubelet's /metrics through the node proxy. */
export async function scrapeRuntimeOps(
  client: KubeClient,
  nodeName: string,
): Promise<Map<string, OpTotals>> {
  return runtimeOpTotals(await client.getText(`/api/v1/nodes/${nodeName}/proxy/metrics`));
}

/**
 * One row per operation type either kubelet called, most time first: calls and mean ms of
 * each kubelet, per pod started (`pods`).
 */
export function opsTable(
  pods: number,
  byKubelet: readonly { label: string; ops: ReadonlyMap<string, OpTotals> }[],
): string {
  const types = new Set(byKubelet.flatMap((k) => [...k.ops.keys()]));
  const total = (op: string) => byKubelet.reduce((s, k) => s + (k.ops.get(op)?.sum ?? 0), 0);
  const rows = [...types].sort((a, b) => total(b) - total(a) || (a < b ? -1 : 1)).map((op) => [
    op,
    ...byKubelet.flatMap((k) => {
      const t = k.ops.get(op);
      if (!t || t.count === 0) return ["0", "n/a"];
      return [(t.count / pods).toFixed(1), `${((t.sum / t.count) * 1000).toFixed(1)} ms`];
    }),
  ]);
  return table([
    "operation_type",
    ...byKubelet.flatMap((k) => [`${k.label}: calls per pod`, `${k.label}: mean`]),
  ], rows);
}

/**
 * The report's section for the calls made while `pods` pods started (`what` names when): a
 * heading, {@link opsTable} of the kubelets whose /metrics were read, a line for each not read.
 */
export function opsSection(
  what: string,
  pods: number,
  byKubelet: readonly { label: string; ops: ReadonlyMap<string, OpTotals> | Error }[],
): string[] {
  const out = [
    `### CRI calls while each kubelet started its ${what} (its own kubelet_runtime_operations_duration_seconds, difference of two scrapes)`,
    "",
  ];
  const read = byKubelet.flatMap((k) =>
    k.ops instanceof Error ? [] : [{ label: k.label, ops: k.ops }]
  );
  if (read.length > 0) out.push(opsTable(pods, read), "");
  for (const k of byKubelet) {
    if (k.ops instanceof Error) out.push(`- ${k.label}: /metrics not read: ${k.ops.message}`);
  }
  out.push("");
  return out;
}
