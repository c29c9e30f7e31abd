import assert from "node:assert/strict";
import { parseExposition } from "./prometheus.ts";
import {
  Counter,
  DEF_BUCKETS,
  exponentialBuckets,
  Gauge,
  Histogram,
  MAX_SERIES,
  MetricsRegistry,
} from "./_registry.ts";

Deno.test("MetricsRegistry shows plain metrics at zero and vectors only once used", async () => {
  const r = new MetricsRegistry();
  const plain = r.register(new Counter({ name: "p_total", help: "Plain." }));
  const vec = r.register(new Counter({ name: "v_total", help: "Vec.", labelNames: ["k"] }));
  const lazy = r.register(
    new Histogram({ name: "h_seconds", help: "Lazy.", buckets: [1], labelNames: [] }),
  );
  let text = await r.render();
  assert.equal(
    text,
    "# HELP p_total [ALPHA] Plain.\n# TYPE p_total counter\np_total 0\n",
  );
  plain.inc();
  vec.inc({ k: 'a"b' }, 2);
  lazy.observe(0.5, {});
  text = await r.render();
  assert.equal(
    text,
    [
      "# HELP h_seconds [ALPHA] Lazy.",
      "# TYPE h_seconds histogram",
      'h_seconds_bucket{le="1"} 1',
      'h_seconds_bucket{le="+Inf"} 1',
      "h_seconds_sum 0.5",
      "h_seconds_count 1",
      "# HELP p_total [ALPHA] Plain.",
      "# TYPE p_total counter",
      "p_total 1",
      "# HELP v_total [ALPHA] Vec.",
      "# TYPE v_total counter",
      'v_total{k="a\\"b"} 2',
      "",
    ].join("\n"),
  );
  assert.equal(parseExposition(text).length, 3);
});

Deno.test("Histogram counts a value on a bound into that bound's bucket", () => {
  const h = new Histogram({ name: "x", help: "h", buckets: [0.5, 1, 2] });
  for (const v of [0.5, 0.7, 1, 2.0000001, 100]) h.observe(v);
  const r = new MetricsRegistry();
  r.register(h);
  return r.render().then((text) => {
    const buckets = parseExposition(text)[0]!.samples
      .filter((s) => s.suffix === "_bucket")
      .map((s) => [s.labels.le, s.value]);
    assert.deepEqual(buckets, [["0.5", 1], ["1", 3], ["2", 3], ["+Inf", 5]]);
    assert.equal(h.count(), 5);
  });
});

Deno.test("Metric refuses labels other than its label names and negative counter steps", () => {
  const c = new Counter({ name: "c", help: "h", labelNames: ["a", "b"] });
  assert.throws(() => c.inc({ a: "1" }), /takes labels \[a, b\]: got \[a\]/);
  assert.throws(() => c.inc({ a: "1", c: "2" }), /takes labels/);
  assert.throws(() => c.inc({ a: "1", b: "2" }, -1), /cannot add -1/);
  // Also once the series exists (the lookup that finds it checks the names too).
  c.inc({ a: "1", b: "2" });
  assert.throws(() => c.inc({ a: "1", b: "2", c: "3" }), /takes labels \[a, b\]: got \[a, b, c\]/);
  assert.throws(() => c.inc({ a: "1", c: "2" }), /takes labels/);
  const g = new Gauge({ name: "g", help: "h" });
  assert.throws(() => g.set(1, { a: "1" }), /takes labels \[\]/);
  assert.throws(
    () => new Histogram({ name: "h", help: "h", buckets: [1, 1] }),
    /strictly ascending/,
  );
});

Deno.test("Metric vectors stop at MAX_SERIES label sets and report it once", () => {
  const reports: string[] = [];
  const r = new MetricsRegistry({ onOverflow: (m, l) => reports.push(`${m} ${l.k}`) });
  const c = r.register(new Counter({ name: "c", help: "h", labelNames: ["k"] }));
  for (let i = 0; i < MAX_SERIES + 5; i++) c.inc({ k: String(i) });
  assert.equal(c.get({ k: String(MAX_SERIES - 1) }), 1);
  assert.equal(c.get({ k: String(MAX_SERIES) }), 0);
  assert.deepEqual(reports, [`c ${MAX_SERIES}`]);
  // Known label sets still count.
  c.inc({ k: "0" });
  assert.equal(c.get({ k: "0" }), 2);
});

Deno.test("exponentialBuckets multiplies as Go does and checks its arguments", () => {
  assert.deepEqual(exponentialBuckets(1, 2, 5), [1, 2, 4, 8, 16]);
  const b = exponentialBuckets(0.005, 2.5, 14);
  assert.equal(b.length, 14);
  assert.equal(b[13], 745.0580596923828);
  assert.throws(() => exponentialBuckets(0, 2, 3), /start > 0/);
  assert.equal(DEF_BUCKETS.length, 11);
});

Deno.test("MetricsRegistry refuses a second metric of the same name", () => {
  const r = new MetricsRegistry();
  r.register(new Gauge({ name: "g", help: "h" }));
  assert.throws(() => r.register(new Gauge({ name: "g", help: "h" })), /registered twice/);
});

Deno.test("MetricsRegistry.declared lists every metric, unobserved vectors included", async () => {
  const r = new MetricsRegistry();
  r.register(new Counter({ name: "e_total", help: "Errors.", labelNames: ["handler"] }));
  r.register(new Gauge({ name: "g", help: "G.", stabilityLevel: "STABLE" }));
  r.register(new Histogram({ name: "h_seconds", help: "H.", buckets: [1], labelNames: [] }));
  assert.equal((await r.render()).includes("e_total"), false);
  assert.deepEqual(r.declared(), [
    { name: "e_total", type: "counter", help: "[ALPHA] Errors.", labelNames: ["handler"] },
    { name: "g", type: "gauge", help: "[STABLE] G.", labelNames: [] },
    { name: "h_seconds", type: "histogram", help: "[ALPHA] H.", labelNames: [] },
  ]);
});
