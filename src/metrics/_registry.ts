/**
 * @module
 * The metric kinds behind the kubelet's /metrics: counters, gauges and histograms, each either
 * plain (one series, always exposed, as component-base's NewCounter) or a vector over fixed
 * label names whose series appear once first used (NewCounterVec: lazily instantiated). HELP
 * carries the stability level as component-base prints it (`[ALPHA] ...`). Every vector is
 * bounded: past {@link MAX_SERIES} label sets new ones are dropped and reported once. A
 * {@link MetricsRegistry} renders its metrics, plus collectors that read their values at scrape
 * time (the process collector), through {@link PrometheusText}. Corresponds to
 * k8s.io/component-base/metrics (counter.go, gauge.go, histogram.go, registry.go, opts.go).
 */

import { type Labels, PrometheusText } from "./prometheus.ts";

/** Stability levels of component-base (opts.go); empty means ALPHA there. */
export type StabilityLevel = "INTERNAL" | "ALPHA" | "BETA" | "STABLE";

/** Most series one vector keeps; later label sets are dropped and reported. */
export const MAX_SERIES = 1000;

/** prometheus.DefBuckets. */
export const DEF_BUCKETS: readonly number[] = [
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

/** prometheus.ExponentialBuckets: `count` bounds from `start`, each `factor` times the last. */
export function exponentialBuckets(start: number, factor: number, count: number): number[] {
  if (count < 1 || start <= 0 || factor <= 1) {
    throw new Error(
      `exponentialBuckets needs count >= 1, start > 0 and factor > 1: got ${count}, ${start}, ${factor}`,
    );
  }
  const out: number[] = [];
  // Repeated multiplication, as Go does, so the bounds print the same digits.
  for (let b = start; out.length < count; b *= factor) out.push(b);
  return out;
}

/** What every metric is declared with (component-base KubeOpts, trimmed). */
export interface MetricOptions {
  /** The full name, e.g. kubelet_running_pods. */
  readonly name: string;
  /** HELP text without the stability prefix. */
  readonly help: string;
  /** @default "ALPHA" */
  readonly stabilityLevel?: StabilityLevel;
  /**
   * Label names of a vector; unset for a plain metric. A vector with no label names is still
   * lazy: it appears once first observed (as upstream's `NewHistogramVec(..., []string{})`).
   */
  readonly labelNames?: readonly string[];
}

/** A registered metric as {@link MetricsRegistry.declared} lists it. */
export interface MetricDeclaration {
  readonly name: string;
  readonly type: "counter" | "gauge" | "histogram";
  readonly help: string;
  readonly labelNames: readonly string[];
}

/** Called once per metric when a vector drops a label set for being full. */
export type OverflowReporter = (metric: string, labels: Labels) => void;

/** The labels of a metric without any. */
const NO_LABELS: Labels = Object.freeze({});

/** Shared by the three kinds: series by label values, and the checks on labels. */
abstract class Metric<V> {
  readonly name: string;
  readonly help: string;
  readonly labelNames: readonly string[];
  readonly vector: boolean;
  /** By label values joined with NUL. */
  protected readonly series = new Map<string, { labels: Labels; value: V }>();
  #overflowed = false;
  onOverflow: OverflowReporter | undefined;

  constructor(opts: MetricOptions) {
    this.name = opts.name;
    this.help = `[${opts.stabilityLevel ?? "ALPHA"}] ${opts.help}`;
    this.labelNames = opts.labelNames ?? [];
    this.vector = opts.labelNames !== undefined;
  }

  protected abstract initial(): V;

  /** The series of `labels`, made on first use; undefined when the vector is full. */
  protected child(labels: Labels | undefined): { labels: Labels; value: V } | undefined {
    const given = labels ?? NO_LABELS;
    // Checked and keyed without allocating but the key: observed at every sync and CRI call.
    let key = "";
    let givenCount = 0;
    for (const _ in given) givenCount++;
    let fits = givenCount === this.labelNames.length;
    for (let i = 0; fits && i < this.labelNames.length; i++) {
      const name = this.labelNames[i]!;
      if (!(name in given)) fits = false;
      else key = i === 0 ? String(given[name]) : `${key}\0${given[name]}`;
    }
    if (!fits) {
      throw new Error(
        `metric ${this.name} takes labels [${this.labelNames.join(", ")}]: got [${
          Object.keys(given).join(", ")
        }]`,
      );
    }
    const known = this.series.get(key);
    if (known) return known;
    if (this.series.size >= MAX_SERIES) {
      if (!this.#overflowed) this.onOverflow?.(this.name, given);
      this.#overflowed = true;
      return undefined;
    }
    const made = { labels: { ...given }, value: this.initial() };
    this.series.set(key, made);
    return made;
  }

  /** Every series to write; a plain metric always has its one, zero until used. */
  protected all(): Iterable<{ labels: Labels; value: V }> {
    if (!this.vector && this.series.size === 0) this.child(undefined);
    return this.series.values();
  }

  /** Writes the family and its series. */
  abstract write(out: PrometheusText): void;

  /** Forgets every series (a plain metric goes back to zero). */
  reset(): void {
    this.series.clear();
  }
}

/** A monotonically increasing count. */
export class Counter extends Metric<number> {
  protected initial(): number {
    return 0;
  }

  /** Adds `by` (never negative) to the series of `labels`. */
  inc(labels?: Labels, by = 1): void {
    if (!(by >= 0)) throw new Error(`counter ${this.name} cannot add ${by}`);
    const c = this.child(labels);
    if (c) c.value += by;
  }

  /** The value of one series; 0 when it does not exist. */
  get(labels?: Labels): number {
    return this.series.get(this.labelNames.map((n) => labels?.[n]).join("\0"))?.value ?? 0;
  }

  write(out: PrometheusText): void {
    out.family(this.name, this.help, "counter");
    for (const s of this.all()) out.sample(this.name, s.labels, s.value);
  }
}

/** A value that goes up and down. */
export class Gauge extends Metric<number> {
  protected initial(): number {
    return 0;
  }

  set(value: number, labels?: Labels): void {
    const c = this.child(labels);
    if (c) c.value = value;
  }

  get(labels?: Labels): number {
    return this.series.get(this.labelNames.map((n) => labels?.[n]).join("\0"))?.value ?? 0;
  }

  write(out: PrometheusText): void {
    out.family(this.name, this.help, "gauge");
    for (const s of this.all()) out.sample(this.name, s.labels, s.value);
  }
}

interface HistogramState {
  /** Observations per bucket (not cumulative); one more slot than bounds, for +Inf. */
  readonly counts: number[];
  sum: number;
  count: number;
}

/** Options of a {@link Histogram}. */
export interface HistogramOptions extends MetricOptions {
  /** Upper bounds, strictly ascending; +Inf is implied. */
  readonly buckets: readonly number[];
}

/** Observations counted into fixed buckets, with their sum. */
export class Histogram extends Metric<HistogramState> {
  readonly buckets: readonly number[];

  constructor(opts: HistogramOptions) {
    const b = opts.buckets;
    if (b.length === 0 || b.some((x, i) => i > 0 && !(x > b[i - 1]!)) || b.includes(Infinity)) {
      throw new Error(`histogram ${opts.name}: buckets must be finite and strictly ascending`);
    }
    super(opts);
    this.buckets = b;
  }

  protected initial(): HistogramState {
    return { counts: new Array(this.buckets.length + 1).fill(0), sum: 0, count: 0 };
  }

  /** Counts `value` (seconds, bytes, ...) into the series of `labels`. */
  observe(value: number, labels?: Labels): void {
    const c = this.child(labels);
    if (!c) return;
    const s = c.value;
    // A value on a bound belongs to that bound's bucket (le = less or equal).
    let i = 0;
    while (i < this.buckets.length && value > this.buckets[i]!) i++;
    s.counts[i]!++;
    s.sum += value;
    s.count++;
  }

  /** Observations of one series so far; 0 when it does not exist. */
  count(labels?: Labels): number {
    return this.series.get(this.labelNames.map((n) => labels?.[n]).join("\0"))?.value.count ?? 0;
  }

  write(out: PrometheusText): void {
    out.family(this.name, this.help, "histogram");
    for (const { labels, value } of this.all()) {
      let running = 0;
      const cumulative = this.buckets.map((_, i) => (running += value.counts[i]!));
      out.histogram(this.name, labels, {
        buckets: this.buckets,
        cumulative,
        sum: value.sum,
        count: value.count,
      });
    }
  }
}

/** Writes metrics read at scrape time (upstream's custom and raw collectors). */
export type Collector = (out: PrometheusText) => void | Promise<void>;

/** The metrics and collectors one /metrics endpoint shows (upstream KubeRegistry). */
export class MetricsRegistry {
  readonly #metrics = new Map<string, Counter | Gauge | Histogram>();
  readonly #collectors: Collector[] = [];
  readonly #onOverflow: OverflowReporter | undefined;

  constructor(opts: { onOverflow?: OverflowReporter } = {}) {
    this.#onOverflow = opts.onOverflow;
  }

  /** Adds metrics; a second metric of the same name is a programming error. */
  register<T extends Counter | Gauge | Histogram>(metric: T): T {
    if (this.#metrics.has(metric.name)) {
      throw new Error(`metric ${metric.name} is registered twice`);
    }
    metric.onOverflow ??= this.#onOverflow;
    this.#metrics.set(metric.name, metric);
    return metric;
  }

  /**
   * Every registered metric as declared, empty vectors included (what component-base's
   * Describe gives): its name, type, HELP with the stability prefix, and label names.
   * Collectors' families are not listed.
   */
  declared(): MetricDeclaration[] {
    return [...this.#metrics.values()].map((m) => ({
      name: m.name,
      type: m instanceof Counter ? "counter" : m instanceof Gauge ? "gauge" : "histogram",
      help: m.help,
      labelNames: m.labelNames,
    }));
  }

  /** Adds a collector run at every scrape. */
  addCollector(c: Collector): void {
    this.#collectors.push(c);
  }

  /** The exposition text: families sorted by name, empty vectors left out. */
  async render(): Promise<string> {
    const out = new PrometheusText();
    for (const m of this.#metrics.values()) m.write(out);
    for (const c of this.#collectors) await c(out);
    return out.render();
  }
}
