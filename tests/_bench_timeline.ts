/**
 * @module
 * Where our agent's start latency goes, for the benchmark suite (tests/bench_suite.ts): each
 * burst pod's start-up timeline from `/debug/pods/{ns}/{name}` (through the apiserver's node
 * proxy), bracketed by the bench's own wall-clock times (create request sent, watch showed the
 * pod running), split into steps, and each step's p50/p90/max over the pods. The upstream kubelet
 * has no such endpoint, so only our agent gets this table.
 */

import type { KubeClient } from "../src/client/kube_client.ts";
import { ms, percentile, table } from "./_bench_measure.ts";

/** One phase of `/debug/pods` JSON, as far as the breakdown reads it. */
export interface TimelinePhase {
  readonly phase: string;
  readonly container?: string;
  /** RFC 3339 with ms. */
  readonly time: string;
}

/** The steps, each from the named point to the next; the bench's own points bracket them. */
export const STEPS = [
  ["sent", "create request sent → kubelet saw the pod"],
  ["seen", "seen → admitted"],
  ["admitted", "admitted → volumes ready"],
  ["volumesReady", "volumes ready → sandbox created"],
  ["sandboxCreated", "sandbox created → image present"],
  ["imagePulled", "image present → container created"],
  ["containerCreated", "container created → started"],
  ["containerStarted", "container started → status Running"],
  ["running", "status Running → apiserver accepted it"],
  ["statusWritten", "apiserver accepted it → watch shows it"],
] as const;

/**
 * Durations of each step of one pod, in ms, keyed by the step's first point; steps whose ends
 * are missing are left out. `sentAt` and `watchedAt` are ms since the epoch. Per-container points
 * are taken at their last occurrence (the pod's last container decides).
 */
export function stepDurations(
  phases: readonly TimelinePhase[],
  sentAt: number,
  watchedAt: number,
): Map<string, number> {
  const at = new Map<string, number>([["sent", sentAt]]);
  for (const p of phases) {
    const t = Date.parse(p.time);
    if (Number.isFinite(t)) at.set(p.phase, t);
  }
  at.set("watched", watchedAt);
  const order = [...STEPS.map(([from]) => from as string), "watched"];
  const out = new Map<string, number>();
  for (let i = 0; i < order.length - 1; i++) {
    const from = at.get(order[i]!);
    const to = at.get(order[i + 1]!);
    if (from !== undefined && to !== undefined) out.set(order[i]!, to - from);
  }
  return out;
}

/** The breakdown table: per step, how many pods had it and p50/p90/max of its duration. */
export function breakdownTable(perPod: readonly Map<string, number>[]): string {
  const rows = STEPS.map(([from, what]) => {
    const v = perPod.flatMap((m) => m.has(from) ? [m.get(from)!] : []);
    return [
      what,
      String(v.length),
      ms(percentile(v, 50)),
      ms(percentile(v, 90)),
      ms(percentile(v, 100)),
    ];
  });
  return table(["step", "n", "p50", "p90", "max"], rows);
}

/** Fetches each pod's timeline through the node proxy; pods without one are left out. */
export async function fetchTimelines(
  client: KubeClient,
  nodeName: string,
  namespace: string,
  names: readonly string[],
): Promise<Map<string, TimelinePhase[]>> {
  const out = new Map<string, TimelinePhase[]>();
  for (const name of names) {
    const path = `/api/v1/nodes/${nodeName}/proxy/debug/pods/${namespace}/${name}`;
    const body = JSON.parse(await client.getText(path)) as { phases?: TimelinePhase[] };
    if (Array.isArray(body.phases)) out.set(name, body.phases);
  }
  return out;
}
