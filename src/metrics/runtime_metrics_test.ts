import assert from "node:assert/strict";
import type v8 from "node:v8";
import { FakeClock } from "../util/clock.ts";
import { MetricsRegistry } from "./_registry.ts";
import { parseExposition } from "./prometheus.ts";
import {
  EVENT_LOOP_SAMPLE_MS,
  GC_DRAIN_INTERVAL_MS,
  type GcRecord,
  RuntimeMetrics,
  type RuntimeSources,
} from "./runtime_metrics.ts";

/** V8 stand-ins whose figures the test sets. */
function fakeSources() {
  const gcs: GcRecord[] = [];
  const state = { running: 0 };
  const sources: RuntimeSources = {
    heapStatistics: () =>
      ({
        total_heap_size: 4000,
        used_heap_size: 3000,
        heap_size_limit: 9000,
        total_physical_size: 3500,
        external_memory: 100,
        malloced_memory: 50,
        total_allocated_bytes: 123456,
      }) as unknown as v8.HeapInfo,
    heapSpaceStatistics: () => [
      {
        space_name: "new_space",
        space_size: 10,
        space_used_size: 6,
        space_available_size: 4,
        physical_space_size: 10,
      },
    ],
    gcProfiler: () => {
      let on = false;
      return {
        start() {
          on = true;
          state.running++;
        },
        stop() {
          if (!on) return undefined;
          on = false;
          state.running--;
          return { statistics: gcs.splice(0) };
        },
      };
    },
  };
  return { sources, gcs, state };
}

async function scrape(r: MetricsRegistry) {
  return new Map(parseExposition(await r.render()).map((f) => [f.name, f]));
}

/** Lets the run loop take its turn after a step of the fake clock. */
const turn = () => new Promise((r) => setTimeout(r, 0));

Deno.test("RuntimeMetrics writes the V8 heap figures under deno_, without a stability level", async () => {
  const { sources } = fakeSources();
  const r = new MetricsRegistry();
  new RuntimeMetrics(r, { sources });
  const f = await scrape(r);
  const value = (name: string) => f.get(name)?.samples[0]?.value;
  assert.equal(value("deno_heap_size_total_bytes"), 4000);
  assert.equal(value("deno_heap_size_used_bytes"), 3000);
  assert.equal(value("deno_heap_size_limit_bytes"), 9000);
  assert.equal(value("deno_external_memory_bytes"), 100);
  assert.equal(value("deno_heap_allocated_bytes_total"), 123456);
  assert.equal(f.get("deno_heap_allocated_bytes_total")?.type, "counter");
  assert.deepEqual(f.get("deno_heap_space_size_used_bytes")?.samples[0]?.labels, {
    space: "new_space",
  });
  for (const family of f.values()) assert.doesNotMatch(family.help, /^\[/, family.name);
  // Collections and event-loop delay need run().
  assert.equal(f.has("deno_gc_duration_seconds"), false);
  assert.equal(f.has("deno_eventloop_delay_seconds"), false);
});

Deno.test("RuntimeMetrics.run observes the probe timer's lateness and drains GC records", async () => {
  const { sources, gcs, state } = fakeSources();
  const clock = new FakeClock(0);
  const r = new MetricsRegistry();
  const m = new RuntimeMetrics(r, { sources, clock });
  const ctl = new AbortController();
  const running = m.run(ctl.signal);
  assert.equal(state.running, 1);
  // On time, then 300 ms late (the loop was busy), then on time again.
  clock.step(EVENT_LOOP_SAMPLE_MS);
  await turn();
  clock.step(EVENT_LOOP_SAMPLE_MS + 300);
  await turn();
  assert.deepEqual(m.eventLoopDelay(), { count: 2, sum: 0.3 });
  gcs.push({ gcType: "Scavenge", cost: 800_000 }, { gcType: "Scavenge", cost: 1_200_000 });
  for (let t = 2; t < GC_DRAIN_INTERVAL_MS / EVENT_LOOP_SAMPLE_MS; t++) {
    assert.equal(gcs.length, 2, "not drained before its interval");
    clock.step(EVENT_LOOP_SAMPLE_MS);
    await turn();
  }
  assert.equal(gcs.length, 0, "drained every GC_DRAIN_INTERVAL_MS");
  assert.equal(state.running, 1, "a new profiler follows each drain");
  gcs.push({ gcType: "MarkSweepCompact", cost: 30_000_000 });
  const f = await scrape(r);
  const gc = f.get("deno_gc_duration_seconds")!;
  assert.equal(gc.type, "histogram");
  const total = (type: string, suffix: string) =>
    gc.samples.find((s) => s.suffix === suffix && s.labels.type === type)?.value;
  assert.equal(total("Scavenge", "_count"), 2);
  assert.equal(total("Scavenge", "_sum"), 0.002);
  assert.equal(total("MarkSweepCompact", "_count"), 1, "a scrape drains too");
  const delay = f.get("deno_eventloop_delay_seconds")!;
  assert.equal(delay.samples.find((s) => s.labels.le === "0.25")?.value, 9);
  assert.equal(delay.samples.find((s) => s.labels.le === "0.5")?.value, 10);
  ctl.abort();
  await running;
  assert.equal(state.running, 0, "no profiler left running");
  assert.ok((await scrape(r)).has("deno_gc_duration_seconds"), "kept after the run");
});

Deno.test("RuntimeMetrics reads the real V8 heap and collections of this process", async () => {
  const r = new MetricsRegistry();
  const m = new RuntimeMetrics(r, { clock: new FakeClock(0) });
  const ctl = new AbortController();
  const running = m.run(ctl.signal);
  let garbage: unknown[] = [];
  for (let i = 0; i < 200_000; i++) garbage.push({ i });
  garbage = [];
  const f = await scrape(r);
  ctl.abort();
  await running;
  const used = f.get("deno_heap_size_used_bytes")?.samples[0]?.value ?? 0;
  const limit = f.get("deno_heap_size_limit_bytes")?.samples[0]?.value ?? 0;
  assert.ok(used > 1_000_000 && used < limit, `used ${used}, limit ${limit}`);
  const gcCount = f.get("deno_gc_duration_seconds")?.samples
    .filter((s) => s.suffix === "_count").reduce((a, s) => a + s.value, 0) ?? 0;
  assert.ok(gcCount > 0 && garbage.length === 0, "allocating 200k objects collects");
});

Deno.test("RuntimeMetrics.run sees JavaScript blocking the event loop, on the real clock", async () => {
  const m = new RuntimeMetrics(new MetricsRegistry());
  const ctl = new AbortController();
  const running = m.run(ctl.signal);
  // Busy for longer than a probe period: the probe's timer fires at least 200 ms late.
  const start = performance.now();
  while (performance.now() - start < EVENT_LOOP_SAMPLE_MS + 200) {
    // blocking on purpose
  }
  for (let i = 0; i < 100 && m.eventLoopDelay().count === 0; i++) {
    await new Promise((r) => setTimeout(r, 10));
  }
  ctl.abort();
  await running;
  const { count, sum } = m.eventLoopDelay();
  assert.equal(count, 1);
  assert.ok(sum >= 0.2, `delay ${sum}`);
});
