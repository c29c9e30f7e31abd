/**
 * @module
 * The kubelet's /metrics/resource text: node, pod and container CPU, working set and swap,
 * container start times and the scrape-error gauge, rendered from a CPU-and-memory Summary.
 * Names, HELP texts (with the stability prefix component-base adds), types, labels, nil checks
 * and timestamps follow upstream 1.36's `pkg/kubelet/metrics/collectors/resource_metrics.go`
 * as registered in a 1.36 KubeRegistry: `scrape_error` (ALPHA, deprecated in 1.29.0) is
 * hidden there, so only `resource_scrape_error` is written. Talks to nothing but
 * {@link PrometheusText}; the caller gets the Summary from the stats provider.
 */

import { type Labels, PrometheusText } from "./prometheus.ts";
import type {
  ContainerStats,
  CPUStats,
  MemoryStats,
  PodStats,
  Summary,
  SwapStats,
} from "../apis/stats_types.ts";

/** Options of {@link renderResourceMetrics}. */
export interface ResourceMetricsOptions {
  /**
   * The summary could not be read: only `resource_scrape_error 1` is written, as upstream
   * returns before collecting anything else.
   * @default false (true when the summary is undefined)
   */
  readonly scrapeError?: boolean;
}

type Family = readonly [name: string, help: string, type: "counter" | "gauge"];

const STABLE = "[STABLE] ";
const ALPHA = "[ALPHA] ";
const NON_WINDOWS = ". Reported only on non-windows systems";

const NODE_CPU: Family = [
  "node_cpu_usage_seconds_total",
  `${STABLE}Cumulative cpu time consumed by the node in core-seconds`,
  "counter",
];
const NODE_MEMORY: Family = [
  "node_memory_working_set_bytes",
  `${STABLE}Current working set of the node in bytes`,
  "gauge",
];
const NODE_SWAP: Family = [
  "node_swap_usage_bytes",
  `${ALPHA}Current swap usage of the node in bytes${NON_WINDOWS}`,
  "gauge",
];
const CONTAINER_CPU: Family = [
  "container_cpu_usage_seconds_total",
  `${STABLE}Cumulative cpu time consumed by the container in core-seconds`,
  "counter",
];
const CONTAINER_MEMORY: Family = [
  "container_memory_working_set_bytes",
  `${STABLE}Current working set of the container in bytes`,
  "gauge",
];
const CONTAINER_SWAP: Family = [
  "container_swap_usage_bytes",
  `${ALPHA}Current amount of the container swap usage in bytes${NON_WINDOWS}`,
  "gauge",
];
const CONTAINER_SWAP_LIMIT: Family = [
  "container_swap_limit_bytes",
  `${ALPHA}Current amount of the container swap limit in bytes${NON_WINDOWS}`,
  "gauge",
];
const CONTAINER_START: Family = [
  "container_start_time_seconds",
  `${STABLE}Start time of the container since unix epoch in seconds`,
  "gauge",
];
const POD_CPU: Family = [
  "pod_cpu_usage_seconds_total",
  `${STABLE}Cumulative cpu time consumed by the pod in core-seconds`,
  "counter",
];
const POD_MEMORY: Family = [
  "pod_memory_working_set_bytes",
  `${STABLE}Current working set of the pod in bytes`,
  "gauge",
];
const POD_SWAP: Family = [
  "pod_swap_usage_bytes",
  `${ALPHA}Current amount of the pod swap usage in bytes${NON_WINDOWS}`,
  "gauge",
];
const SCRAPE_ERROR: Family = [
  "resource_scrape_error",
  `${STABLE}1 if there was an error while getting container metrics, 0 otherwise`,
  "gauge",
];

const ALL = [
  NODE_CPU,
  NODE_MEMORY,
  NODE_SWAP,
  CONTAINER_CPU,
  CONTAINER_MEMORY,
  CONTAINER_SWAP,
  CONTAINER_SWAP_LIMIT,
  CONTAINER_START,
  POD_CPU,
  POD_MEMORY,
  POD_SWAP,
  SCRAPE_ERROR,
];

/** Renders /metrics/resource for `summary`; an undefined summary means the scrape failed. */
export function renderResourceMetrics(
  summary: Summary | undefined,
  opts: ResourceMetricsOptions = {},
): string {
  const out = new PrometheusText();
  for (const [name, help, type] of ALL) out.family(name, help, type);
  const failed = opts.scrapeError ?? summary === undefined;
  if (!failed && summary) {
    const node = summary.node;
    cpu(out, NODE_CPU, node.cpu, {});
    memory(out, NODE_MEMORY, node.memory, {});
    swapUsage(out, NODE_SWAP, node.swap, {});
    for (const pod of summary.pods) collectPod(out, pod);
  }
  out.sample(SCRAPE_ERROR[0], {}, failed ? 1 : 0);
  return out.render();
}

function collectPod(out: PrometheusText, pod: PodStats): void {
  const { name, namespace } = pod.podRef;
  for (const c of pod.containers) {
    collectContainer(out, c, { container: c.name, pod: name, namespace });
  }
  const labels = { pod: name, namespace };
  cpu(out, POD_CPU, pod.cpu, labels);
  memory(out, POD_MEMORY, pod.memory, labels);
  swapUsage(out, POD_SWAP, pod.swap, labels);
}

function collectContainer(out: PrometheusText, c: ContainerStats, labels: Labels): void {
  // Upstream writes the start time without a timestamp and skips times at or before the epoch.
  const start = parseTime(c.startTime);
  if (start && start.seconds > 0) {
    out.sample(CONTAINER_START[0], labels, Number(start.nanos) / 1e9);
  }
  cpu(out, CONTAINER_CPU, c.cpu, labels);
  memory(out, CONTAINER_MEMORY, c.memory, labels);
  const swap = c.swap;
  if (!swap) return;
  swapUsage(out, CONTAINER_SWAP, swap, labels);
  // The limit is available + usage, with a missing usage counted as 0 (upstream 1.36).
  if (swap.swapAvailableBytes !== undefined) {
    timed(
      out,
      CONTAINER_SWAP_LIMIT,
      labels,
      swap.swapAvailableBytes + (swap.swapUsageBytes ?? 0),
      swap.time,
    );
  }
}

function cpu(out: PrometheusText, family: Family, s: CPUStats | undefined, labels: Labels) {
  if (s?.usageCoreNanoSeconds === undefined) return;
  timed(out, family, labels, s.usageCoreNanoSeconds / 1e9, s.time);
}

function memory(out: PrometheusText, family: Family, s: MemoryStats | undefined, labels: Labels) {
  if (s?.workingSetBytes === undefined) return;
  timed(out, family, labels, s.workingSetBytes, s.time);
}

function swapUsage(out: PrometheusText, family: Family, s: SwapStats | undefined, labels: Labels) {
  if (s?.swapUsageBytes === undefined) return;
  timed(out, family, labels, s.swapUsageBytes, s.time);
}

// A sample stamped with its stats' time, as NewLazyMetricWithTimestamp does. A time that does
// not parse cannot be stamped, so the sample is left out rather than sent unstamped.
function timed(out: PrometheusText, family: Family, labels: Labels, value: number, time: string) {
  const t = parseTime(time);
  if (!t) return;
  out.sample(family[0], labels, value, t.seconds * 1000 + Math.floor(t.fraction / 1e6));
}

interface ParsedTime {
  /** Whole seconds since the epoch (floor). */
  readonly seconds: number;
  /** Nanoseconds within the second, 0..999999999. */
  readonly fraction: number;
  /** Nanoseconds since the epoch, exact. */
  readonly nanos: bigint;
}

const RFC3339 =
  /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:[Zz]|([+-])(\d{2}):(\d{2}))$/;

/** Parses an RFC 3339 time to nanosecond precision, as metav1.Time unmarshals it. */
export function parseTime(text: string): ParsedTime | undefined {
  const m = RFC3339.exec(text);
  if (!m) return undefined;
  const [, y, mo, d, h, mi, s, frac = "", sign, oh = "0", om = "0"] = m;
  const offset = (Number(oh) * 60 + Number(om)) * 60 * (sign === "-" ? -1 : 1);
  // setUTCFullYear, unlike Date.UTC, keeps years 0-99 as written.
  const date = new Date(0);
  date.setUTCFullYear(Number(y), Number(mo) - 1, Number(d));
  const ms = date.setUTCHours(Number(h), Number(mi), Number(s), 0);
  if (!Number.isFinite(ms)) return undefined;
  const seconds = ms / 1000 - offset;
  const fraction = Number(frac.padEnd(9, "0"));
  return { seconds, fraction, nanos: BigInt(seconds) * 1_000_000_000n + BigInt(fraction) };
}
