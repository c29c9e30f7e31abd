/**
 * @module
 * Probe results of one kind (liveness, readiness or startup) by container id, and the
 * Prometheus series of the prober (`prober_probe_total`, `prober_probe_duration_seconds`).
 * Private to `prober_manager.ts`, which writes both from its workers. Corresponds to upstream
 * `pkg/kubelet/prober/results/results_manager.go` (the updates channel is a callback that
 * fires only when a result changes) and the metric definitions in `prober_manager.go`.
 */

/** A probe's cached result (upstream results.Result). */
export type ProbeResult = "Success" | "Failure" | "Unknown";

/** Results of one probe kind by container id (upstream results.Manager). */
export class ResultsManager {
  readonly #results = new Map<string, ProbeResult>();
  readonly #onChange: (containerId: string, podUID: string, result: ProbeResult) => void;

  constructor(onChange: (containerId: string, podUID: string, result: ProbeResult) => void) {
    this.#onChange = onChange;
  }

  /** The cached result; undefined when none is cached. */
  get(containerId: string): ProbeResult | undefined {
    return this.#results.get(containerId);
  }

  /** Caches a result; reports it only when it differs from the cached one. */
  set(containerId: string, result: ProbeResult, podUID: string): void {
    if (this.#results.get(containerId) === result) return;
    this.#results.set(containerId, result);
    this.#onChange(containerId, podUID, result);
  }

  /** Forgets a container's result, without reporting it (as upstream). */
  remove(containerId: string): void {
    this.#results.delete(containerId);
  }
}

/** prometheus.DefBuckets, which the duration histogram uses. */
export const DURATION_BUCKETS: readonly number[] = [
  0.005,
  0.01,
  0.025,
  0.05,
  0.1,
  0.25,
  0.5,
  1,
  2.5,
  5,
  10,
];

const TOTAL_NAME = "prober_probe_total";
const TOTAL_HELP =
  "[BETA] Cumulative number of a liveness, readiness or startup probe for a container by result.";
const DURATION_NAME = "prober_probe_duration_seconds";
const DURATION_HELP = "[ALPHA] Duration in seconds for a probe response.";

/** Label pairs in exposition order (sorted by name, as client_golang prints them). */
type Labels = readonly (readonly [string, string])[];

interface Counter {
  readonly labels: Labels;
  value: number;
}

interface Histogram {
  readonly labels: Labels;
  readonly buckets: number[];
  sum: number;
  count: number;
}

/** The labels shared by one worker's series. */
export interface WorkerLabels {
  /** Upstream probeType.String(): Liveness, Readiness or Startup. */
  readonly probeType: string;
  readonly container: string;
  readonly pod: string;
  readonly namespace: string;
  readonly podUID: string;
}

/** The `result` label of prober_probe_total. */
export type ResultLabel = "successful" | "failed" | "unknown";

/** The prober's two metric vectors. */
export class ProberMetrics {
  readonly #totals = new Map<string, Counter>();
  readonly #durations = new Map<string, Histogram>();

  /** Counts one probe outcome. */
  inc(w: WorkerLabels, result: ResultLabel): void {
    const labels = totalLabels(w, result);
    const key = keyOf(labels);
    const c = this.#totals.get(key) ?? { labels, value: 0 };
    c.value++;
    this.#totals.set(key, c);
  }

  /** Observes one probe duration. */
  observe(w: WorkerLabels, seconds: number): void {
    const labels = durationLabels(w);
    const key = keyOf(labels);
    let h = this.#durations.get(key);
    if (!h) {
      h = { labels, buckets: DURATION_BUCKETS.map(() => 0), sum: 0, count: 0 };
      this.#durations.set(key, h);
    }
    DURATION_BUCKETS.forEach((le, i) => {
      if (seconds <= le) h.buckets[i]!++;
    });
    h.sum += seconds;
    h.count++;
  }

  /** Deletes a stopped worker's series (upstream ProberResults.Delete / ProberDuration.Delete). */
  delete(w: WorkerLabels): void {
    for (const r of ["successful", "failed", "unknown"] as const) {
      this.#totals.delete(keyOf(totalLabels(w, r)));
    }
    this.#durations.delete(keyOf(durationLabels(w)));
  }

  /** The text exposition format 0.0.4, families by name, series by label values. */
  text(): string {
    const out: string[] = [];
    const durations = [...this.#durations.values()].sort((a, b) => compare(a.labels, b.labels));
    if (durations.length > 0) {
      out.push(`# HELP ${DURATION_NAME} ${escapeHelp(DURATION_HELP)}`);
      out.push(`# TYPE ${DURATION_NAME} histogram`);
      for (const h of durations) {
        DURATION_BUCKETS.forEach((le, i) => {
          const labels = [...h.labels, ["le", goFloat(le)] as const];
          out.push(`${DURATION_NAME}_bucket${render(labels)} ${goFloat(h.buckets[i]!)}`);
        });
        out.push(
          `${DURATION_NAME}_bucket${render([...h.labels, ["le", "+Inf"]])} ${goFloat(h.count)}`,
        );
        out.push(`${DURATION_NAME}_sum${render(h.labels)} ${goFloat(h.sum)}`);
        out.push(`${DURATION_NAME}_count${render(h.labels)} ${goFloat(h.count)}`);
      }
    }
    const totals = [...this.#totals.values()].sort((a, b) => compare(a.labels, b.labels));
    if (totals.length > 0) {
      out.push(`# HELP ${TOTAL_NAME} ${escapeHelp(TOTAL_HELP)}`);
      out.push(`# TYPE ${TOTAL_NAME} counter`);
      for (const c of totals) out.push(`${TOTAL_NAME}${render(c.labels)} ${goFloat(c.value)}`);
    }
    return out.length > 0 ? out.join("\n") + "\n" : "";
  }
}

function totalLabels(w: WorkerLabels, result: ResultLabel): Labels {
  return [
    ["container", w.container],
    ["namespace", w.namespace],
    ["pod", w.pod],
    ["pod_uid", w.podUID],
    ["probe_type", w.probeType],
    ["result", result],
  ];
}

function durationLabels(w: WorkerLabels): Labels {
  return [
    ["container", w.container],
    ["namespace", w.namespace],
    ["pod", w.pod],
    ["probe_type", w.probeType],
  ];
}

function keyOf(labels: Labels): string {
  return JSON.stringify(labels);
}

function compare(a: Labels, b: Labels): number {
  for (let i = 0; i < a.length; i++) {
    const x = a[i]![1];
    const y = b[i]?.[1] ?? "";
    if (x !== y) return x < y ? -1 : 1;
  }
  return 0;
}

function render(labels: Labels): string {
  return `{${labels.map(([k, v]) => `${k}="${escapeValue(v)}"`).join(",")}}`;
}

function escapeValue(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
}

function escapeHelp(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");
}

/** Go's strconv.FormatFloat(f, 'g', -1, 64), as expfmt prints sample values. */
export function goFloat(f: number): string {
  if (Number.isNaN(f)) return "NaN";
  if (f === Infinity) return "+Inf";
  if (f === -Infinity) return "-Inf";
  if (f === 0) return Object.is(f, -0) ? "-0" : "0";
  // Shortest round-trip digits and the decimal exponent.
  const [mant = "", expPart = "0"] = f.toExponential().split("e");
  const exp = Number(expPart);
  if (exp < -4 || exp >= 6) {
    const sign = exp < 0 ? "-" : "+";
    const abs = Math.abs(exp);
    return `${mant}e${sign}${abs < 10 ? "0" : ""}${abs}`;
  }
  return String(f);
}
