/**
 * @module
 * The `workqueue_*` families: per named queue, its depth, adds, retries, how long items wait
 * before a worker takes them, how long the work takes, and (read at scrape time) the work in
 * progress. A component with a queue asks {@link WorkqueueMetrics.queue} for its
 * {@link QueueMetrics} once, when the queue is made, and tells it of each add, take and finish;
 * its series then show from the start, at zero, as upstream's do. Upstream's kubelet has five
 * queues; two have a counterpart here that reports under the same name:
 * `DynamicCABundle-client-ca-bundle` (the client CA file's reload, src/server/auth.ts: one item
 * per check) and `kubelet_log_rotate_manager` (src/logs/container_log_manager.ts). The other
 * three have no queue here: `DynamicServingCertificateController` (the TLS config's client CA,
 * which src/server/auth.ts checks per request instead),
 * `DynamicCABundle-kubelet-server-cert-files` (serving certificate files, read once here: not
 * reloaded) and `DynamicClientCertificate` (client-go's reload of the client certificate, which
 * KubeClient instead asks the certificate manager for at each request). Corresponds to
 * component-base `metrics/prometheus/workqueue` and client-go's `util/workqueue/metrics.go`
 * (defaultQueueMetrics).
 */

import {
  Counter,
  exponentialBuckets,
  Gauge,
  Histogram,
  type MetricOptions,
  type MetricsRegistry,
} from "./_registry.ts";
import type { Labels, PrometheusText } from "./prometheus.ts";

/** A monotonic millisecond clock; `performance` by default. */
export interface MillisecondClock {
  now(): number;
}

/** Upstream's queue histograms: ten decades from 10 ns to 10 s. */
export const WORKQUEUE_BUCKETS: readonly number[] = exponentialBuckets(10e-9, 10, 10);

const UNFINISHED_HELP =
  "How many seconds of work has done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.";
const LONGEST_HELP =
  "How many seconds has the longest running processor for workqueue been running.";

/** A histogram whose series can be made before its first observation (upstream WithLabelValues). */
class EagerHistogram extends Histogram {
  touch(labels: Labels): void {
    this.child(labels);
  }
}

/** A gauge whose values are brought up to date just before it is written. */
class RefreshedGauge extends Gauge {
  readonly #refresh: () => void;
  constructor(opts: MetricOptions, refresh: () => void) {
    super(opts);
    this.#refresh = refresh;
  }

  override write(out: PrometheusText): void {
    this.#refresh();
    super.write(out);
  }
}

/** What one queue reports (upstream queueMetrics); items are compared by their key. */
export class QueueMetrics {
  readonly #labels: Labels;
  readonly #m: WorkqueueMetrics;
  /** When each waiting item was first added (upstream addTimes). */
  readonly #added = new Map<string, number>();
  /** When each item in progress was taken (upstream processingStartTimes). */
  readonly #started = new Map<string, number>();
  #depth = 0;

  constructor(name: string, m: WorkqueueMetrics) {
    this.#labels = { name };
    this.#m = m;
    m.depth.set(0, this.#labels);
    m.adds.inc(this.#labels, 0);
    m.retries.inc(this.#labels, 0);
    m.queueDuration.touch(this.#labels);
    m.workDuration.touch(this.#labels);
    m.unfinishedWork.set(0, this.#labels);
    m.longestRunningProcessor.set(0, this.#labels);
  }

  /** An item entered the queue; a queue that already holds it should not call this. */
  add(item: string): void {
    this.#m.adds.inc(this.#labels);
    this.#m.depth.set(++this.#depth, this.#labels);
    if (!this.#added.has(item)) this.#added.set(item, this.#m.clock.now());
  }

  /** A worker took the item. */
  get(item: string): void {
    const now = this.#m.clock.now();
    this.#depth = Math.max(0, this.#depth - 1);
    this.#m.depth.set(this.#depth, this.#labels);
    const added = this.#added.get(item);
    if (added !== undefined) {
      this.#m.queueDuration.observe(seconds(now - added), this.#labels);
      this.#added.delete(item);
    }
    this.#started.set(item, now);
  }

  /** The worker finished the item. */
  done(item: string): void {
    const started = this.#started.get(item);
    if (started === undefined) return;
    this.#m.workDuration.observe(seconds(this.#m.clock.now() - started), this.#labels);
    this.#started.delete(item);
  }

  /** The item was put back to be tried again later (upstream AddRateLimited). */
  retry(): void {
    this.#m.retries.inc(this.#labels);
  }

  /** Seconds of work in progress, and the longest single piece (upstream updateUnfinishedWork). */
  unfinished(): { total: number; longest: number } {
    const now = this.#m.clock.now();
    let total = 0;
    let longest = 0;
    for (const t of this.#started.values()) {
      const s = seconds(now - t);
      total += s;
      longest = Math.max(longest, s);
    }
    return { total, longest };
  }
}

function seconds(ms: number): number {
  return Math.max(0, ms) / 1000;
}

/** The workqueue families of one registry, and the queues reporting into them. */
export class WorkqueueMetrics {
  readonly clock: MillisecondClock;
  readonly depth: Gauge;
  readonly adds: Counter;
  readonly retries: Counter;
  readonly queueDuration: EagerHistogram;
  readonly workDuration: EagerHistogram;
  readonly unfinishedWork: Gauge;
  readonly longestRunningProcessor: Gauge;
  readonly #queues = new Map<string, QueueMetrics>();

  constructor(r: MetricsRegistry, opts: { clock?: MillisecondClock } = {}) {
    this.clock = opts.clock ?? performance;
    const labelNames = ["name"];
    this.depth = r.register(
      new Gauge({
        name: "workqueue_depth",
        help: "Current depth of workqueue",
        stabilityLevel: "BETA",
        labelNames,
      }),
    );
    this.adds = r.register(
      new Counter({
        name: "workqueue_adds_total",
        help: "Total number of adds handled by workqueue",
        stabilityLevel: "BETA",
        labelNames,
      }),
    );
    this.queueDuration = r.register(
      new EagerHistogram({
        name: "workqueue_queue_duration_seconds",
        help: "How long in seconds an item stays in workqueue before being requested.",
        stabilityLevel: "BETA",
        buckets: WORKQUEUE_BUCKETS,
        labelNames,
      }),
    );
    this.workDuration = r.register(
      new EagerHistogram({
        name: "workqueue_work_duration_seconds",
        help: "How long in seconds processing an item from workqueue takes.",
        stabilityLevel: "BETA",
        buckets: WORKQUEUE_BUCKETS,
        labelNames,
      }),
    );
    this.retries = r.register(
      new Counter({
        name: "workqueue_retries_total",
        help: "Total number of retries handled by workqueue",
        stabilityLevel: "BETA",
        labelNames,
      }),
    );
    // Read at scrape time, where upstream refreshes them every 500 ms.
    this.unfinishedWork = r.register(
      new RefreshedGauge({
        name: "workqueue_unfinished_work_seconds",
        help: UNFINISHED_HELP,
        stabilityLevel: "BETA",
        labelNames,
      }, () => this.#refresh()),
    );
    this.longestRunningProcessor = r.register(
      new RefreshedGauge({
        name: "workqueue_longest_running_processor_seconds",
        help: LONGEST_HELP,
        stabilityLevel: "BETA",
        labelNames,
      }, () => this.#refresh()),
    );
  }

  #refresh(): void {
    for (const [name, q] of this.#queues) {
      const { total, longest } = q.unfinished();
      this.unfinishedWork.set(total, { name });
      this.longestRunningProcessor.set(longest, { name });
    }
  }

  /** The metrics of the queue called `name`, made on first use. */
  queue(name: string): QueueMetrics {
    let q = this.#queues.get(name);
    if (!q) this.#queues.set(name, q = new QueueMetrics(name, this));
    return q;
  }
}
