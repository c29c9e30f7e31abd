import assert from "node:assert/strict";
import { FakeClock } from "../util/clock.ts";
import { MetricsRegistry } from "./_registry.ts";
import { parseExposition } from "./prometheus.ts";
import { WORKQUEUE_BUCKETS, WorkqueueMetrics } from "./workqueue_metrics.ts";

async function scrape(r: MetricsRegistry) {
  return new Map(parseExposition(await r.render()).map((f) => [f.name, f]));
}

Deno.test("WorkqueueMetrics shows a queue's seven families at zero once it is made", async () => {
  const r = new MetricsRegistry();
  const m = new WorkqueueMetrics(r, { clock: new FakeClock(0) });
  assert.equal((await scrape(r)).size, 0, "no queue, no series");
  m.queue("kubelet_log_rotate_manager");
  const families = await scrape(r);
  const want: [string, string][] = [
    ["workqueue_adds_total", "counter"],
    ["workqueue_depth", "gauge"],
    ["workqueue_longest_running_processor_seconds", "gauge"],
    ["workqueue_queue_duration_seconds", "histogram"],
    ["workqueue_retries_total", "counter"],
    ["workqueue_unfinished_work_seconds", "gauge"],
    ["workqueue_work_duration_seconds", "histogram"],
  ];
  assert.deepEqual([...families.keys()].sort(), want.map(([n]) => n));
  for (const [name, type] of want) {
    const f = families.get(name)!;
    assert.equal(f.type, type, name);
    assert.match(f.help, /^\[BETA\] /, name);
    for (const s of f.samples) {
      assert.equal(s.labels.name, "kubelet_log_rotate_manager", name);
      if (s.suffix !== "_bucket") assert.equal(s.value, 0, name);
    }
  }
  // Upstream's ExponentialBuckets(10e-9, 10, 10), as the Go kubelet's scrape prints them.
  const bounds = families.get("workqueue_work_duration_seconds")!.samples
    .filter((s) => s.suffix === "_bucket").map((s) => s.labels.le);
  assert.deepEqual(bounds, [
    "1e-08",
    "1e-07",
    "1e-06",
    "9.999999999999999e-06",
    "9.999999999999999e-05",
    "0.001",
    "0.01",
    "0.1",
    "1",
    "10",
    "+Inf",
  ]);
  assert.equal(WORKQUEUE_BUCKETS.length, 10);
});

Deno.test("QueueMetrics times waiting and work, and reports work in progress", async () => {
  const clock = new FakeClock(0);
  const r = new MetricsRegistry();
  const m = new WorkqueueMetrics(r, { clock });
  const q = m.queue("q");
  assert.equal(m.queue("q"), q, "one QueueMetrics per name");
  const name = { name: "q" };
  q.add("a");
  q.add("b");
  assert.equal(m.depth.get(name), 2);
  clock.step(2000);
  q.get("a");
  assert.equal(m.depth.get(name), 1);
  clock.step(500);
  q.get("b");
  clock.step(1500);
  // a has run 2 s, b 1.5 s.
  assert.deepEqual(q.unfinished(), { total: 3.5, longest: 2 });
  let families = await scrape(r);
  assert.equal(families.get("workqueue_unfinished_work_seconds")?.samples[0]?.value, 3.5);
  assert.equal(families.get("workqueue_longest_running_processor_seconds")?.samples[0]?.value, 2);
  q.done("a");
  q.done("b");
  q.retry();
  families = await scrape(r);
  const sum = (f: string) => families.get(f)?.samples.find((s) => s.suffix === "_sum")?.value;
  assert.equal(sum("workqueue_queue_duration_seconds"), 2 + 2.5);
  assert.equal(sum("workqueue_work_duration_seconds"), 2 + 1.5);
  assert.equal(m.adds.get(name), 2);
  assert.equal(m.retries.get(name), 1);
  assert.equal(m.depth.get(name), 0);
  assert.equal(families.get("workqueue_unfinished_work_seconds")?.samples[0]?.value, 0);
});
