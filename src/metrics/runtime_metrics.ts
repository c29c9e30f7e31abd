/**
 * @module
 * Runtime metrics of the Deno process, standing in for the `go_*` families a Go kubelet shows:
 * the V8 heap (size, use, limit, per space), memory outside it, bytes allocated, garbage
 * collections by V8 collector with their pause time, and how late the event loop runs a timer.
 * They carry the prefix `deno_` (as Go's carry `go_`), are written without a stability level
 * (client_golang's Go collector is registered raw upstream) and are read as follows:
 *
 * - heap and allocation figures: `node:v8` getHeapStatistics / getHeapSpaceStatistics at each
 *   scrape;
 * - collections: `node:v8` GCProfiler, drained at each scrape and every
 *   {@link GC_DRAIN_INTERVAL_MS} while {@link RuntimeMetrics.run} runs (its records grow until
 *   drained). Deno 2.9 reports a collection's cost in nanoseconds (Node documents
 *   microseconds; the sum of the costs against wall time settles it);
 * - event-loop delay: how much later than asked a {@link EVENT_LOOP_SAMPLE_MS} timer of the
 *   agent's own fires, once per period. `node:perf_hooks` monitorEventLoopDelay is not used:
 *   Deno's runs on another thread and does not see JavaScript blocking the loop (a 500 ms busy
 *   loop left its maximum at 1 ms), and its 20 ms timer cost ~4 millicores idle.
 *
 * The collection and event-loop families appear once {@link RuntimeMetrics.run} has started.
 * Corresponds to client_golang's Go collector (`prometheus/go_collector.go`), which
 * component-base's legacyregistry registers.
 */

import v8 from "node:v8";
import type { MetricsRegistry } from "./_registry.ts";
import type { Labels, PrometheusText } from "./prometheus.ts";
import { type Clock, realClock } from "../util/clock.ts";

/** How often GC records are taken from V8's profiler while running. */
export const GC_DRAIN_INTERVAL_MS = 10_000;
/** The event-loop probe's period: one timer a second costs next to nothing idle. */
export const EVENT_LOOP_SAMPLE_MS = 1000;

/** Pause buckets of deno_gc_duration_seconds: 50 µs to 1 s. */
export const GC_DURATION_BUCKETS: readonly number[] = [
  0.00005,
  0.0001,
  0.00025,
  0.0005,
  0.001,
  0.0025,
  0.005,
  0.01,
  0.025,
  0.05,
  0.1,
  0.25,
  0.5,
  1,
];

/** Lateness buckets of deno_eventloop_delay_seconds: 1 ms to 10 s. */
export const EVENT_LOOP_DELAY_BUCKETS: readonly number[] = [
  0.001,
  0.0025,
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

/** One collection as V8's GCProfiler reports it. */
export interface GcRecord {
  /** V8's collector: Scavenge, MinorMarkSweep, MarkSweepCompact, IncrementalMarking, ... */
  readonly gcType: string;
  /** Nanoseconds (Deno 2.9). */
  readonly cost: number;
}

/** Where the heap and GC figures come from; V8's unless a test gives others. */
export interface RuntimeSources {
  heapStatistics(): v8.HeapInfo;
  heapSpaceStatistics(): v8.HeapSpaceInfo[];
  /** A new GC profiler; `stop` returns what it saw since `start`. */
  gcProfiler(): { start(): void; stop(): { statistics: readonly GcRecord[] } | undefined };
}

const realSources: RuntimeSources = {
  heapStatistics: () => v8.getHeapStatistics(),
  heapSpaceStatistics: () => v8.getHeapSpaceStatistics(),
  gcProfiler: () => new v8.GCProfiler(),
};

/** Options of {@link RuntimeMetrics}. */
export interface RuntimeMetricsOptions {
  /** @default V8 */
  readonly sources?: RuntimeSources;
  /** Paces the probe and the drain, and times the probe. @default realClock, performance.now */
  readonly clock?: Pick<Clock, "sleep" | "now">;
}

const HEAP_FAMILIES: readonly [keyof v8.HeapInfo, string, string][] = [
  ["total_heap_size", "deno_heap_size_total_bytes", "V8 heap size reserved, in bytes."],
  [
    "used_heap_size",
    "deno_heap_size_used_bytes",
    "V8 heap in use by live and not yet collected objects, in bytes.",
  ],
  [
    "heap_size_limit",
    "deno_heap_size_limit_bytes",
    "Largest size the V8 heap may reach, in bytes.",
  ],
  [
    "total_physical_size",
    "deno_heap_physical_bytes",
    "V8 heap backed by physical memory, in bytes.",
  ],
  [
    "external_memory",
    "deno_external_memory_bytes",
    "Memory held outside the V8 heap by objects it references (array buffers), in bytes.",
  ],
  [
    "malloced_memory",
    "deno_malloced_memory_bytes",
    "Memory V8 allocated with malloc for itself, in bytes.",
  ],
];

const SPACE_FAMILIES: readonly [keyof v8.HeapSpaceInfo, string, string][] = [
  ["space_size", "deno_heap_space_size_total_bytes", "Size of each V8 heap space, in bytes."],
  ["space_used_size", "deno_heap_space_size_used_bytes", "Bytes in use in each V8 heap space."],
  [
    "space_available_size",
    "deno_heap_space_size_available_bytes",
    "Bytes still available in each V8 heap space.",
  ],
];

/** Histogram series written without a stability level, as client_golang's raw collectors are. */
class RawHistogram {
  readonly #series = new Map<string, { counts: number[]; sum: number; count: number }>();

  constructor(
    readonly name: string,
    readonly help: string,
    readonly buckets: readonly number[],
    readonly labelName?: string,
  ) {}

  observe(value: number, label = ""): void {
    let s = this.#series.get(label);
    if (!s) this.#series.set(label, s = { counts: this.buckets.map(() => 0), sum: 0, count: 0 });
    const i = this.buckets.findIndex((b) => value <= b);
    if (i >= 0) s.counts[i]!++;
    s.sum += value;
    s.count++;
  }

  /** Count and sum per label value. */
  totals(): Map<string, { count: number; sum: number }> {
    return new Map([...this.#series].map(([k, v]) => [k, { count: v.count, sum: v.sum }]));
  }

  write(out: PrometheusText): void {
    if (this.#series.size === 0) return;
    out.family(this.name, this.help, "histogram");
    for (const [label, s] of this.#series) {
      let running = 0;
      const labels: Labels = this.labelName ? { [this.labelName]: label } : {};
      out.histogram(this.name, labels, {
        buckets: this.buckets,
        cumulative: s.counts.map((c) => (running += c)),
        sum: s.sum,
        count: s.count,
      });
    }
  }
}

/** The Deno runtime's figures on one registry. */
export class RuntimeMetrics {
  readonly #sources: RuntimeSources;
  readonly #clock: Pick<Clock, "sleep" | "now">;
  #profiler: ReturnType<RuntimeSources["gcProfiler"]> | undefined;
  #running = false;
  readonly #gc = new RawHistogram(
    "deno_gc_duration_seconds",
    "Pause of each V8 garbage collection by V8 collector (type), in seconds.",
    GC_DURATION_BUCKETS,
    "type",
  );
  readonly #delay = new RawHistogram(
    "deno_eventloop_delay_seconds",
    `How much later than asked a ${EVENT_LOOP_SAMPLE_MS} ms timer ran, sampled once a period, in seconds.`,
    EVENT_LOOP_DELAY_BUCKETS,
  );

  constructor(r: MetricsRegistry, opts: RuntimeMetricsOptions = {}) {
    this.#sources = opts.sources ?? realSources;
    this.#clock = opts.clock ??
      { sleep: (ms, signal) => realClock.sleep(ms, signal), now: () => performance.now() };
    r.addCollector((out) => this.#write(out));
  }

  /** Collections seen so far by V8 collector: count and summed pause in seconds. */
  collections(): Map<string, { count: number; sum: number }> {
    if (this.#running) this.#drain(true);
    return this.#gc.totals();
  }

  /** Event-loop probe samples so far: count and summed delay in seconds. */
  eventLoopDelay(): { count: number; sum: number } {
    return this.#delay.totals().get("") ?? { count: 0, sum: 0 };
  }

  #write(out: PrometheusText): void {
    const heap = this.#sources.heapStatistics();
    for (const [key, name, help] of HEAP_FAMILIES) {
      out.family(name, help, "gauge").sample(name, {}, Number(heap[key]));
    }
    const allocated = "deno_heap_allocated_bytes_total";
    const total = (heap as unknown as Record<string, unknown>).total_allocated_bytes;
    if (typeof total === "number") {
      out.family(allocated, "Bytes allocated in the V8 heap since the process started.", "counter")
        .sample(allocated, {}, total);
    }
    const spaces = this.#sources.heapSpaceStatistics();
    for (const [key, name, help] of SPACE_FAMILIES) {
      out.family(name, help, "gauge");
      for (const s of spaces) out.sample(name, { space: s.space_name }, Number(s[key]));
    }
    if (this.#running) this.#drain(true);
    this.#gc.write(out);
    this.#delay.write(out);
  }

  /** Takes the GC records gathered so far; with `restart`, profiles the next ones. */
  #drain(restart: boolean): void {
    const p = this.#profiler;
    if (!p) return;
    const seen = p.stop();
    this.#profiler = undefined;
    if (restart) {
      this.#profiler = this.#sources.gcProfiler();
      this.#profiler.start();
    }
    for (const s of seen?.statistics ?? []) this.#gc.observe(Math.max(0, s.cost) / 1e9, s.gcType);
  }

  /**
   * Profiles collections and probes the event loop until `signal` aborts: a timer every
   * {@link EVENT_LOOP_SAMPLE_MS} whose lateness is observed, and a profiler drain every
   * {@link GC_DRAIN_INTERVAL_MS}. One run at a time.
   */
  async run(signal: AbortSignal): Promise<void> {
    if (this.#running || signal.aborted) return;
    const clock = this.#clock;
    this.#running = true;
    this.#profiler = this.#sources.gcProfiler();
    this.#profiler.start();
    let sinceDrain = 0;
    try {
      while (!signal.aborted) {
        const asked = clock.now() + EVENT_LOOP_SAMPLE_MS;
        await clock.sleep(EVENT_LOOP_SAMPLE_MS, signal);
        this.#delay.observe(Math.max(0, clock.now() - asked) / 1000);
        sinceDrain += EVENT_LOOP_SAMPLE_MS;
        if (sinceDrain >= GC_DRAIN_INTERVAL_MS) {
          sinceDrain = 0;
          this.#drain(true);
        }
      }
    } catch (e) {
      if (!signal.aborted) throw e;
    } finally {
      this.#drain(false);
      this.#running = false;
    }
  }
}
