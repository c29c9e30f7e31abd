/**
 * @module
 * What a kubelet does at steady state, for the benchmark suite (tests/bench_suite.ts), measured
 * the same way for both kubelets around each CPU and memory window:
 * - the requests it sends the apiserver per second: pod status writes, event writes, Node and
 *   Lease writes, all requests, from the apiserver's own `apiserver_request_total` (scraped
 *   before and after the window; nothing else writes to this apiserver then: no controller
 *   manager or scheduler runs, and the bench's pod watch is one long request);
 * - its PLEG's relists in the window and their mean duration, from its own
 *   `kubelet_pleg_relist_duration_seconds` (the same histogram in both kubelets);
 * - the events the apiserver holds about the window's pods from this kubelet, by reason (each
 *   event's `count`, so repeats count): a kubelet that drops events when its queue overflows
 *   shows fewer per pod;
 * - how late its readiness probes run: each bench pod serves HTTP with busybox's httpd, which
 *   logs one line per request (`-v`), and the runtime stamps every log line with the time it
 *   read it, so the gaps between a pod's probe requests are the kubelet's probe schedule as the
 *   pod saw it. A gap of `period + x` is a probe `x` late; "more than one period late" is a gap
 *   over two periods. Upstream's prober has no lateness metric, so the pods' side is the only
 *   one both kubelets share.
 */

import { join } from "node:path";
import type { KubeClient } from "../src/client/kube_client.ts";
import { ms, percentile, table } from "./_bench_measure.ts";

/** Counts of `apiserver_request_total` by `verb resource/subresource`. */
export type RequestTotals = Map<string, number>;

const REQUEST_TOTAL = /^apiserver_request_total\{([^}]*)\} ([0-9.eE+]+)$/;
const LABEL = /(\w+)="((?:[^"\\]|\\.)*)"/g;

/**
 * The apiserver's request counts from its Prometheus text, summed over codes and the other
 * labels; lines of other metrics are ignored.
 */
export function requestTotals(text: string): RequestTotals {
  const out: RequestTotals = new Map();
  for (const line of text.split("\n")) {
    const m = REQUEST_TOTAL.exec(line.trim());
    if (!m) continue;
    const labels = new Map([...m[1]!.matchAll(LABEL)].map((l) => [l[1]!, l[2]!]));
    const key = `${labels.get("verb") ?? ""} ${labels.get("resource") ?? ""}/${
      labels.get("subresource") ?? ""
    }`;
    out.set(key, (out.get(key) ?? 0) + Number(m[2]));
  }
  return out;
}

const READS = new Set(["GET", "LIST", "WATCH", "CONNECT"]);

/** Requests per second in each class, between two scrapes `seconds` apart. */
export interface RequestRates {
  /** Writes to pods/status. */
  readonly podStatus: number;
  /** Writes to events (core and events.k8s.io). */
  readonly events: number;
  /**
   * Writes to nodes, nodes/status and leases: the node status and heartbeat, and the apiserver's
   * own identity lease (about 0.1/s; the metric has no namespace to tell them apart).
   */
  readonly node: number;
  /** Every resource request but the bench's own scrapes through the node proxy. */
  readonly all: number;
}

/** What changed between `before` and `after`, as rates over `seconds`. */
export function requestRates(
  before: RequestTotals,
  after: RequestTotals,
  seconds: number,
): RequestRates {
  let podStatus = 0;
  let events = 0;
  let node = 0;
  let all = 0;
  for (const [key, n] of after) {
    const d = n - (before.get(key) ?? 0);
    if (d <= 0) continue;
    const [verb = "", path = ""] = key.split(" ");
    const [resource = "", subresource = ""] = path.split("/");
    // Non-resource requests (/metrics, /healthz) and the bench's scrapes of the kubelet.
    if (resource === "" || (resource === "nodes" && subresource === "proxy")) continue;
    all += d;
    if (READS.has(verb)) continue;
    if (resource === "pods" && subresource === "status") podStatus += d;
    else if (resource === "events") events += d;
    else if (resource === "nodes" || resource === "leases") node += d;
  }
  const per = (v: number) => v / seconds;
  return { podStatus: per(podStatus), events: per(events), node: per(node), all: per(all) };
}

/** Sum (seconds) and count of a kubelet's PLEG relist histogram. */
export interface RelistTotals {
  readonly sum: number;
  readonly count: number;
}

const RELIST = /^kubelet_pleg_relist_duration_seconds_(sum|count)(?:\{[^}]*\})? ([0-9.eE+]+)$/;

/** The relist histogram's sum and count from a kubelet's Prometheus text (0 when absent). */
export function relistTotals(text: string): RelistTotals {
  let sum = 0;
  let count = 0;
  for (const line of text.split("\n")) {
    const m = RELIST.exec(line.trim());
    if (!m) continue;
    if (m[1] === "sum") sum += Number(m[2]);
    else count += Number(m[2]);
  }
  return { sum, count };
}

/** One scrape of the apiserver's and the kubelet's metrics. */
export interface SteadyScrape {
  /** performance.now() between the two reads. */
  readonly at: number;
  readonly requests: RequestTotals | Error;
  readonly relists: RelistTotals | Error;
}

/** Scrapes the apiserver's /metrics and the kubelet's (through the node proxy). */
export async function scrapeSteady(client: KubeClient, nodeName: string): Promise<SteadyScrape> {
  const relists = await client.getText(`/api/v1/nodes/${nodeName}/proxy/metrics`)
    .then(relistTotals, (e) => e as Error);
  const at = performance.now();
  const requests = await client.getText("/metrics").then(requestTotals, (e) => e as Error);
  return { at, requests, relists };
}

/** How late the probes of some pods ran in a window ({@link probeLateness}). */
export interface ProbeLateness {
  /** Pods looked at, and how many of them logged no probe in the window. */
  readonly pods: number;
  readonly unprobed: number;
  /** Probe requests in the window. */
  readonly probes: number;
  /** Lateness of each probe after a pod's first in the window (gap minus period), ms. */
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  /** Probes more than one period late: gaps over two periods, the window's edges included. */
  readonly late: number;
}

/** What a kubelet did in one window: {@link steadyFigures}. */
export interface SteadyFigures {
  readonly requests: RequestRates | Error;
  /** Relists in the window, per second, and their mean duration in ms. */
  readonly relistsPerSecond: number;
  readonly relistMeanMs: number;
  readonly relistError?: Error;
  /** With probed pods. */
  readonly probes?: ProbeLateness;
  /** With pods: the events stored about them from this kubelet ({@link countEvents}). */
  readonly events?: EventCounts;
}

/** Events about some pods from one kubelet, by reason. */
export interface EventCounts {
  readonly pods: number;
  readonly byReason: ReadonlyMap<string, number>;
}

interface ListedEvent {
  readonly reason?: string;
  readonly count?: number;
  readonly source?: { readonly host?: string };
  readonly involvedObject?: { readonly kind?: string; readonly name?: string };
}

/** The events in `namespace` from node `host` about the pods `names`, by reason. */
export async function countEvents(
  client: KubeClient,
  namespace: string,
  host: string,
  names: readonly string[],
): Promise<EventCounts> {
  const list = await client.get<{ items: ListedEvent[] }>(
    `/api/v1/namespaces/${namespace}/events`,
  );
  return tallyEvents(list.items, host, names);
}

/** {@link countEvents} over listed events. */
export function tallyEvents(
  items: readonly ListedEvent[],
  host: string,
  names: readonly string[],
): EventCounts {
  const pods = new Set(names);
  const byReason = new Map<string, number>();
  for (const e of items) {
    if (e.source?.host !== host || e.involvedObject?.kind !== "Pod") continue;
    if (!pods.has(e.involvedObject.name ?? "")) continue;
    const reason = e.reason ?? "";
    byReason.set(reason, (byReason.get(reason) ?? 0) + (e.count ?? 1));
  }
  return { pods: names.length, byReason };
}

/** The window between two scrapes. */
export function steadyFigures(
  before: SteadyScrape,
  after: SteadyScrape,
  probes?: ProbeLateness,
  events?: EventCounts,
): SteadyFigures {
  const seconds = (after.at - before.at) / 1000;
  const requests = before.requests instanceof Error
    ? before.requests
    : after.requests instanceof Error
    ? after.requests
    : requestRates(before.requests, after.requests, seconds);
  const relistError = before.relists instanceof Error
    ? before.relists
    : after.relists instanceof Error
    ? after.relists
    : undefined;
  let relistsPerSecond = NaN;
  let relistMeanMs = NaN;
  if (!(before.relists instanceof Error) && !(after.relists instanceof Error)) {
    const count = after.relists.count - before.relists.count;
    relistsPerSecond = count / seconds;
    relistMeanMs = count > 0 ? (after.relists.sum - before.relists.sum) / count * 1000 : NaN;
  }
  return {
    requests,
    relistsPerSecond,
    relistMeanMs,
    ...(relistError ? { relistError } : {}),
    ...(probes ? { probes } : {}),
    ...(events ? { events } : {}),
  };
}

// A CRI log line: RFC 3339 time with up to 9 fractional digits, stream, tag, message.
const CRI_LINE =
  /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d) (?:stdout|stderr) [FP] (.*)$/;
// busybox httpd -v: "<client ip>:<port>: response:<code>", one line per request.
const HTTPD_REQUEST = /^\S+:\d+: response:\d+$/;

/** The wall-clock times (ms since the epoch) of the HTTP requests busybox's httpd logged. */
export function probeTimes(log: string): number[] {
  const out: number[] = [];
  for (const line of log.split("\n")) {
    const m = CRI_LINE.exec(line);
    if (!m || !HTTPD_REQUEST.test(m[4]!)) continue;
    const whole = Date.parse(`${m[1]}${m[3]}`);
    const fraction = m[2] ? Number(`0.${m[2]}`) * 1000 : 0;
    out.push(whole + fraction);
  }
  return out;
}

/**
 * How late probes ran in the window `[from, to]` (wall ms), from each pod's request times: each
 * gap between two requests minus `periodMs`. A window edge counts as a probe more than one period
 * late when the pod's first request came more than two periods after `from`, or its last more
 * than two periods before `to`.
 */
export function probeLateness(
  timesByPod: readonly (readonly number[])[],
  periodMs: number,
  from: number,
  to: number,
): ProbeLateness {
  const lateness: number[] = [];
  let probes = 0;
  let unprobed = 0;
  let late = 0;
  for (const all of timesByPod) {
    const times = all.filter((t) => t >= from && t <= to).sort((a, b) => a - b);
    probes += times.length;
    if (times.length === 0) {
      unprobed++;
      if (to - from > 2 * periodMs) late++;
      continue;
    }
    if (times[0]! - from > 2 * periodMs) late++;
    if (to - times.at(-1)! > 2 * periodMs) late++;
    for (let i = 1; i < times.length; i++) {
      const gap = times[i]! - times[i - 1]!;
      lateness.push(gap - periodMs);
      if (gap > 2 * periodMs) late++;
    }
  }
  return {
    pods: timesByPod.length,
    unprobed,
    probes,
    p50Ms: percentile(lateness, 50),
    p99Ms: percentile(lateness, 99),
    maxMs: lateness.length ? Math.max(...lateness) : NaN,
    late,
  };
}

/**
 * The request times each pod's container `container` logged, read from `podLogsDir`
 * (`<namespace>_<name>_<uid>/<container>/<n>.log`, the layout both kubelets write; rotated
 * files included). A pod without a log directory has no times.
 */
export async function readProbeTimes(
  podLogsDir: string,
  namespace: string,
  names: readonly string[],
  container: string,
): Promise<number[][]> {
  const dirs = new Map<string, string>();
  for await (const e of Deno.readDir(podLogsDir)) {
    const [ns, name] = e.name.split("_");
    if (ns === namespace && name !== undefined) dirs.set(name, join(podLogsDir, e.name));
  }
  return await Promise.all(names.map(async (name) => {
    const dir = dirs.get(name);
    if (dir === undefined) return [];
    const times: number[] = [];
    try {
      for await (const f of Deno.readDir(join(dir, container))) {
        if (!/^\d+\.log/.test(f.name)) continue;
        times.push(...probeTimes(await Deno.readTextFile(join(dir, container, f.name))));
      }
    } catch (e) {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    }
    return times;
  }));
}

const rate = (v: number) => Number.isFinite(v) ? v.toFixed(2) : "n/a";

/** One kubelet's windows for {@link steadyTable}. */
export interface SteadyColumn {
  readonly label: string;
  /** One per row of {@link steadyTable}'s `counts`; undefined where not measured. */
  readonly windows: readonly (SteadyFigures | undefined)[];
}

/**
 * Rows per pod count, a column per kubelet: apiserver requests per second (pod status, events,
 * node and lease writes, all), PLEG relists and their mean duration, probe lateness.
 */
export function steadyTable(counts: readonly number[], kubelets: readonly SteadyColumn[]): string {
  const rows: string[][] = [];
  const row = (what: string, f: (s: SteadyFigures | undefined) => string) =>
    counts.map((n, i) => [`${n} pods: ${what}`, ...kubelets.map((k) => f(k.windows[i]))]);
  const req = (pick: (r: RequestRates) => number) => (s: SteadyFigures | undefined) =>
    !s ? "n/a" : s.requests instanceof Error ? "not read" : rate(pick(s.requests));
  const groups = [
    row("pod status writes/s", req((r) => r.podStatus)),
    row("event writes/s", req((r) => r.events)),
    row("node and lease writes/s", req((r) => r.node)),
    row("all API requests/s", req((r) => r.all)),
    row(
      "PLEG relists/s, mean relist",
      (s) =>
        !s
          ? "n/a"
          : s.relistError
          ? "not read"
          : `${rate(s.relistsPerSecond)}, ${
            Number.isFinite(s.relistMeanMs) ? `${s.relistMeanMs.toFixed(1)} ms` : "n/a"
          }`,
    ),
    row(
      "probe lateness p50 / p99 / max",
      (s) =>
        s?.probes ? `${ms(s.probes.p50Ms)} / ${ms(s.probes.p99Ms)} / ${ms(s.probes.maxMs)}` : "n/a",
    ),
    row(
      "probes, > 1 period late, pods unprobed",
      (s) => s?.probes ? `${s.probes.probes}, ${s.probes.late}, ${s.probes.unprobed}` : "n/a",
    ),
    row("events stored per pod", (s) => {
      if (!s?.events || s.events.pods === 0) return "n/a";
      const total = [...s.events.byReason.values()].reduce((a, b) => a + b, 0);
      return (total / s.events.pods).toFixed(2);
    }),
  ];
  for (const g of groups) rows.push(...g);
  const reasons = counts.flatMap((n, i) =>
    kubelets.flatMap((k) => {
      const e = k.windows[i]?.events;
      if (!e || e.pods === 0) return [];
      const parts = [...e.byReason].sort((a, b) => b[1] - a[1])
        .map(([r, c]) => `${r} ${(c / e.pods).toFixed(2)}`);
      return [`- ${n} pods, ${k.label}, events per pod by reason: ${parts.join(", ") || "none"}`];
    })
  );
  return [
    table(["window", ...kubelets.map((k) => k.label)], rows),
    ...(reasons.length ? ["", ...reasons] : []),
  ].join("\n");
}
