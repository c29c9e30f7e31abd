import assert from "node:assert/strict";
import {
  compareGo,
  escapeHelp,
  escapeLabelValue,
  ExpositionError,
  formatValue,
  parseExposition,
  PrometheusText,
} from "./prometheus.ts";

Deno.test("formatValue writes what Go's strconv.FormatFloat(v, 'g', -1, 64) writes", () => {
  // Right-hand sides printed by Go 1.26 for the same float64 values.
  const cases: [number, string][] = [
    [2, "2"],
    [0.5, "0.5"],
    [100000, "100000"],
    [999999, "999999"],
    [1000000, "1e+06"],
    [1234567, "1.234567e+06"],
    [1e-4, "0.0001"],
    [1.5e-5, "1.5e-05"],
    [0.00012345, "0.00012345"],
    [1e21, "1e+21"],
    [1.7976931348623157e308, "1.7976931348623157e+308"],
    [5e-324, "5e-324"],
    [2 ** 53, "9.007199254740992e+15"],
    [2 ** 64, "1.8446744073709552e+19"],
    [1624396248.3020916, "1.6243962483020916e+09"],
    [0.1 + 0.2, "0.30000000000000004"],
    [-123.456, "-123.456"],
    [-1e-10, "-1e-10"],
    [12345.678, "12345.678"],
    [1e100, "1e+100"],
    [1.23e-18, "1.23e-18"],
    [25769803776, "2.5769803776e+10"],
  ];
  for (const [v, want] of cases) assert.equal(formatValue(v), want, `${v}`);
});

Deno.test("formatValue spells out expfmt's special values", () => {
  assert.equal(formatValue(1), "1");
  assert.equal(formatValue(0), "0");
  assert.equal(formatValue(-0), "0");
  assert.equal(formatValue(-1), "-1");
  assert.equal(formatValue(NaN), "NaN");
  assert.equal(formatValue(Infinity), "+Inf");
  assert.equal(formatValue(-Infinity), "-Inf");
});

Deno.test("escapeLabelValue and escapeHelp escape as expfmt does", () => {
  assert.equal(escapeLabelValue('a\\b"c\nd'), 'a\\\\b\\"c\\nd');
  assert.equal(escapeLabelValue("plain"), "plain");
  assert.equal(escapeHelp('a\\b"c\nd'), 'a\\\\b"c\\nd');
});

Deno.test("compareGo orders strings by UTF-8 bytes, not UTF-16 units", () => {
  // U+FFFD is one UTF-16 unit above the surrogates, but U+1F600 is the larger code point.
  assert.ok(compareGo("\uFFFD", "\u{1F600}") < 0);
  assert.ok("\uFFFD" > "\u{1F600}", "JavaScript's own order differs");
  assert.ok(compareGo("a", "ab") < 0);
  assert.ok(compareGo("b", "a") > 0);
  assert.equal(compareGo("x", "x"), 0);
  assert.ok(compareGo("Z", "a") < 0);
});

Deno.test("PrometheusText sorts families, label pairs and samples as Gather does", () => {
  const out = new PrometheusText()
    .family("zeta_total", "Last family.", "counter")
    .family("alpha", "First family.", "gauge")
    .family("empty", "Never sampled.", "gauge");
  out.sample("zeta_total", {}, 1e6);
  out.sample("alpha", { pod: "b", namespace: "x" }, 2, 1624396278302.9);
  out.sample("alpha", { pod: "a", namespace: "y" }, 0.25);
  out.sample("alpha", { namespace: "x", pod: "a" }, 3, 5);
  assert.equal(
    out.render(),
    `# HELP alpha First family.
# TYPE alpha gauge
alpha{namespace="x",pod="a"} 3 5
alpha{namespace="x",pod="b"} 2 1624396278302
alpha{namespace="y",pod="a"} 0.25
# HELP zeta_total Last family.
# TYPE zeta_total counter
zeta_total 1e+06
`,
  );
});

Deno.test("PrometheusText keeps the first of two samples with the same labels", () => {
  const out = new PrometheusText().family("g", "Help with \\ and\nnewline.", "gauge");
  out.sample("g", { a: "1", b: 'q"' }, 1);
  out.sample("g", { b: 'q"', a: "1" }, 2);
  out.sample("g", { a: "2", b: 'q"' }, 3);
  assert.deepEqual(out.duplicates, ['g{a="1",b="q\\""}']);
  assert.equal(
    out.render(),
    `# HELP g Help with \\\\ and\\nnewline.
# TYPE g gauge
g{a="1",b="q\\""} 1
g{a="2",b="q\\""} 3
`,
  );
});

Deno.test("PrometheusText rejects programming errors", () => {
  const out = new PrometheusText().family("ok", "h", "gauge");
  assert.throws(() => out.sample("missing", {}, 1), /not declared/);
  assert.throws(() => out.family("ok", "other help", "gauge"), /declared twice/);
  assert.doesNotThrow(() => out.family("ok", "h", "gauge"));
  assert.throws(() => out.family("bad-name", "h", "gauge"), /invalid metric name/);
  assert.throws(() => out.sample("ok", { "bad-label": "v" }, 1), /invalid label name/);
  assert.throws(() => out.sample("ok", { __reserved: "v" }, 1), /invalid label name/);
  assert.equal(new PrometheusText().family("x", "h", "gauge").render(), "");
});

Deno.test("parseExposition reads back what PrometheusText writes", () => {
  const out = new PrometheusText().family("m_total", 'Odd \\ help\n"x"', "counter");
  out.sample("m_total", { l: 'v\\"\n,}' }, NaN, 7);
  out.sample("m_total", { l: "w" }, -Infinity);
  const [family, ...rest] = parseExposition(out.render());
  assert.equal(rest.length, 0);
  assert.equal(family?.name, "m_total");
  assert.equal(family?.help, 'Odd \\ help\n"x"');
  assert.equal(family?.type, "counter");
  assert.deepEqual(family?.samples[0]?.labels, { l: 'v\\"\n,}' });
  assert.ok(Number.isNaN(family?.samples[0]?.value));
  assert.equal(family?.samples[0]?.timestampMs, 7);
  assert.deepEqual(family?.samples[1], { labels: { l: "w" }, value: -Infinity });
});

Deno.test("parseExposition rejects families without HELP and TYPE first", () => {
  const bad = [
    "m 1\n",
    "# HELP m h\nm 1\n",
    "# HELP m h\n# TYPE n gauge\nm 1\n",
    "# HELP m h\n# TYPE m gauge\nn 1\n",
    "# HELP m h\n# TYPE m gauge\nm 1\n# HELP m h\n# TYPE m gauge\nm 2\n",
    "# HELP m h\n# TYPE m gauge\n",
    '# HELP m h\n# TYPE m gauge\nm{a="1"b="2"} 1\n',
    '# HELP m h\n# TYPE m gauge\nm{a="1",a="2"} 1\n',
    "# HELP m h\n# TYPE m gauge\nm one\n",
    "# HELP m h\n# TYPE m gauge\nm 1",
  ];
  for (const text of bad) {
    assert.throws(() => parseExposition(text), ExpositionError, JSON.stringify(text));
  }
  assert.deepEqual(parseExposition(""), []);
});

Deno.test("PrometheusText writes histograms as expfmt does, le last", () => {
  const out = new PrometheusText().family("h_seconds", "Help.", "histogram");
  out.histogram("h_seconds", { z: "1", a: "x" }, {
    buckets: [0.005, 2.5],
    cumulative: [1, 3],
    sum: 4.25,
    count: 4,
  });
  out.histogram("h_seconds", {}, { buckets: [0.005, 2.5], cumulative: [0, 0], sum: 0, count: 0 });
  assert.equal(
    out.render(),
    [
      "# HELP h_seconds Help.",
      "# TYPE h_seconds histogram",
      'h_seconds_bucket{le="0.005"} 0',
      'h_seconds_bucket{le="2.5"} 0',
      'h_seconds_bucket{le="+Inf"} 0',
      "h_seconds_sum 0",
      "h_seconds_count 0",
      'h_seconds_bucket{a="x",z="1",le="0.005"} 1',
      'h_seconds_bucket{a="x",z="1",le="2.5"} 3',
      'h_seconds_bucket{a="x",z="1",le="+Inf"} 4',
      'h_seconds_sum{a="x",z="1"} 4.25',
      'h_seconds_count{a="x",z="1"} 4',
      "",
    ].join("\n"),
  );
  const [family] = parseExposition(out.render());
  assert.equal(family?.type, "histogram");
  assert.deepEqual(family?.samples[9], { labels: { a: "x", z: "1" }, value: 4, suffix: "_count" });
  assert.throws(() => out.sample("h_seconds", {}, 1), /is a histogram/);
  assert.throws(
    () =>
      new PrometheusText().family("c", "h", "counter").histogram("c", {}, {
        buckets: [],
        cumulative: [],
        sum: 0,
        count: 0,
      }),
    /is a counter/,
  );
});

Deno.test("parseExposition rejects histograms whose buckets, sum and count disagree", () => {
  const head = "# HELP h h\n# TYPE h histogram\n";
  const good = 'h_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\nh_sum 3\nh_count 2\n';
  assert.equal(parseExposition(head + good)[0]?.samples.length, 4);
  const bad = [
    'h_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\nh_sum 3\nh_count 3\n', // count != +Inf
    'h_bucket{le="1"} 3\nh_bucket{le="+Inf"} 2\nh_sum 3\nh_count 2\n', // decreasing
    'h_bucket{le="2"} 1\nh_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\nh_sum 3\nh_count 2\n',
    'h_bucket{le="1"} 1\nh_sum 3\nh_count 1\n', // no +Inf
    'h_bucket{le="+Inf"} 2\nh_count 2\n', // no sum
    'h_bucket{le="+Inf"} 2\nh_sum 3\n', // no count
    "h_bucket 1\nh_sum 3\nh_count 1\n", // bucket without le
    'h_bucket{le="+Inf"} 1\nh_sum{le="1"} 3\nh_count 1\n',
    'h_bucket{a="1",le="+Inf"} 1\nh_bucket{a="2",le="+Inf"} 1\nh_sum{a="1"} 1\nh_count{a="1"} 1\n',
    "h 1\n",
  ];
  for (const text of bad) {
    assert.throws(() => parseExposition(head + text), ExpositionError, JSON.stringify(text));
  }
});
