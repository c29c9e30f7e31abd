/**
 * @module
 * A small Prometheus text exposition (format 0.0.4) writer, shared by /metrics/resource,
 * /metrics/cadvisor and the kubelet's own /metrics. It reproduces what client_golang's
 * `Registry.Gather` followed by prometheus/common's `expfmt.MetricFamilyToText` write, byte
 * for byte: families sorted by name (empty ones dropped), label pairs sorted by name, samples
 * sorted by their label values, a duplicate series kept once (the first added), HELP and label
 * values escaped, and values formatted as Go's `strconv.FormatFloat(v, 'g', -1, 64)` with
 * expfmt's special cases. It talks to nothing; callers feed it samples and serve the string.
 */

/** The content type of the text exposition (format 0.0.4), as promhttp answers it. */
export const EXPOSITION_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

/** The metric types the kubelet's text endpoints use. */
export type MetricType = "counter" | "gauge" | "histogram";

/** One histogram series: upper bounds (without +Inf) and cumulative counts per bound. */
export interface HistogramValue {
  /** Upper bounds, ascending; +Inf is implied. */
  readonly buckets: readonly number[];
  /** Cumulative count of observations at or below each bound, same length as `buckets`. */
  readonly cumulative: readonly number[];
  readonly sum: number;
  readonly count: number;
}

/** Label name → value; the writer sorts the pairs by name, as client_golang does. */
export type Labels = Readonly<Record<string, string>>;

const NAME_RE = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_RE = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

interface Series {
  readonly values: readonly string[];
  readonly text: string;
  readonly timestampMs: number | undefined;
}

interface Family {
  readonly help: string;
  readonly type: MetricType;
  readonly series: Series[];
  readonly seen: Set<string>;
}

/** Collects metric families and renders them as Prometheus text. */
export class PrometheusText {
  readonly #families = new Map<string, Family>();
  readonly #checkedLabels = new Set<string>();
  readonly #duplicates: string[] = [];

  /** Declares a family; declaring it again with the same help and type is a no-op. */
  family(name: string, help: string, type: MetricType): this {
    const known = this.#families.get(name);
    if (known) {
      if (known.help !== help || known.type !== type) {
        throw new Error(`metric family ${name} declared twice with different help or type`);
      }
      return this;
    }
    if (!NAME_RE.test(name)) throw new Error(`invalid metric name ${JSON.stringify(name)}`);
    this.#families.set(name, { help, type, series: [], seen: new Set() });
    return this;
  }

  /**
   * Adds a sample to a declared family. `timestampMs` (integer milliseconds since the epoch)
   * is written after the value when given. A second sample with the same label values is
   * dropped, as Gather drops it, and listed in {@link duplicates}.
   */
  sample(name: string, labels: Labels, value: number, timestampMs?: number): this {
    const family = this.#family(name, false);
    const { values, pairs, identity } = this.#labels(labels);
    const text = pairs.length === 0 ? name : `${name}{${pairs.join(",")}}`;
    if (!this.#admit(family, identity, text)) return this;
    const ts = timestampMs === undefined ? undefined : Math.floor(timestampMs);
    family.series.push({ values, text: `${text} ${formatValue(value)}`, timestampMs: ts });
    return this;
  }

  /**
   * Adds a histogram series to a declared histogram family: one `_bucket` line per bound with
   * `le` last (as expfmt writes it), the `+Inf` bucket, then `_sum` and `_count`.
   */
  histogram(name: string, labels: Labels, h: HistogramValue): this {
    const family = this.#family(name, true);
    if (h.buckets.length !== h.cumulative.length) {
      throw new Error(
        `histogram ${name}: ${h.buckets.length} bounds but ${h.cumulative.length} counts`,
      );
    }
    const { values, pairs, identity } = this.#labels(labels);
    const braced = (extra?: string) => {
      const all = extra === undefined ? pairs : [...pairs, extra];
      return all.length === 0 ? "" : `{${all.join(",")}}`;
    };
    if (!this.#admit(family, identity, `${name}${braced()}`)) return this;
    const lines: string[] = [];
    h.buckets.forEach((bound, i) => {
      const le = `le="${formatValue(bound)}"`;
      lines.push(`${name}_bucket${braced(le)} ${formatValue(h.cumulative[i] ?? 0)}`);
    });
    lines.push(`${name}_bucket${braced('le="+Inf"')} ${formatValue(h.count)}`);
    lines.push(`${name}_sum${braced()} ${formatValue(h.sum)}`);
    lines.push(`${name}_count${braced()} ${formatValue(h.count)}`);
    family.series.push({ values, text: lines.join("\n"), timestampMs: undefined });
    return this;
  }

  #family(name: string, histogram: boolean): Family {
    const family = this.#families.get(name);
    if (!family) throw new Error(`metric family ${name} was not declared`);
    if ((family.type === "histogram") !== histogram) {
      throw new Error(`metric family ${name} is a ${family.type}`);
    }
    return family;
  }

  #labels(labels: Labels): { values: string[]; pairs: string[]; identity: string } {
    const keys = Object.keys(labels).sort(compareGo);
    const values: string[] = [];
    const pairs: string[] = [];
    for (const key of keys) {
      this.#checkLabel(key);
      const v = labels[key] ?? "";
      values.push(v);
      pairs.push(`${key}="${escapeLabelValue(v)}"`);
    }
    const identity = keys.length === 0 ? "" : `${keys.join("\0")}\u0001${values.join("\0")}`;
    return { values, pairs, identity };
  }

  /** False (and the series listed as a duplicate) when the family has these labels already. */
  #admit(family: Family, identity: string, text: string): boolean {
    if (family.seen.has(identity)) {
      this.#duplicates.push(text);
      return false;
    }
    family.seen.add(identity);
    return true;
  }

  /** Series dropped because the same name and label values were added before. */
  get duplicates(): readonly string[] {
    return this.#duplicates;
  }

  /** Renders every family that has samples, sorted by name. */
  render(): string {
    const names = [...this.#families.keys()].sort(compareGo);
    let out = "";
    for (const name of names) {
      const family = this.#families.get(name);
      if (!family || family.series.length === 0) continue;
      out += `# HELP ${name} ${escapeHelp(family.help)}\n# TYPE ${name} ${family.type}\n`;
      const series = [...family.series].sort(compareSeries);
      for (const s of series) {
        out += s.timestampMs === undefined ? `${s.text}\n` : `${s.text} ${s.timestampMs}\n`;
      }
    }
    return out;
  }

  #checkLabel(key: string): void {
    if (this.#checkedLabels.has(key)) return;
    if (!LABEL_RE.test(key) || key.startsWith("__") || key === "le") {
      throw new Error(`invalid label name ${JSON.stringify(key)}`);
    }
    this.#checkedLabels.add(key);
  }
}

/** client_golang's MetricSorter: label values in order, then timestamp, none last. */
function compareSeries(a: Series, b: Series): number {
  if (a.values.length !== b.values.length) return a.values.length - b.values.length;
  for (let i = 0; i < a.values.length; i++) {
    const c = compareGo(a.values[i] ?? "", b.values[i] ?? "");
    if (c !== 0) return c;
  }
  if (a.timestampMs === undefined) return b.timestampMs === undefined ? 0 : 1;
  if (b.timestampMs === undefined) return -1;
  return a.timestampMs - b.timestampMs;
}

/** Go's string `<`: byte order of UTF-8, which is code point order (not UTF-16 order). */
export function compareGo(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    return codePointRank(x) - codePointRank(y);
  }
  return a.length - b.length;
}

// A high surrogate starts a code point above U+FFFF, so it sorts after every BMP unit.
function codePointRank(unit: number): number {
  return unit >= 0xd800 && unit <= 0xdbff ? unit + 0x10000 : unit;
}

/** Escapes a label value as expfmt does: backslash, double quote and newline. */
export function escapeLabelValue(v: string): string {
  return /[\\"\n]/.test(v) ? v.replace(/[\\"\n]/g, (c) => ESCAPES[c] ?? c) : v;
}

/** Escapes HELP text as expfmt does: backslash and newline. */
export function escapeHelp(v: string): string {
  return /[\\\n]/.test(v) ? v.replace(/[\\\n]/g, (c) => ESCAPES[c] ?? c) : v;
}

const ESCAPES: Readonly<Record<string, string>> = { "\\": "\\\\", '"': '\\"', "\n": "\\n" };

/**
 * Formats a sample value as expfmt's writeFloat: 1, 0, -1, NaN, +Inf and -Inf spelt out,
 * anything else as Go's `strconv.FormatFloat(v, 'g', -1, 64)` (shortest digits, exponent
 * form when the decimal exponent is below -4 or at least 6, e.g. 1.23e+06 and 1e-05).
 */
export function formatValue(v: number): string {
  if (v === 1) return "1";
  if (v === 0) return "0";
  if (v === -1) return "-1";
  if (Number.isNaN(v)) return "NaN";
  if (v === Infinity) return "+Inf";
  if (v === -Infinity) return "-Inf";
  // toExponential() without digits gives the shortest round-trip digits, as Go's shortest mode.
  const [mantissa = "", expText = "0"] = v.toExponential().split("e");
  const negative = mantissa.startsWith("-");
  const digits = mantissa.replace("-", "").replace(".", "");
  const exp = Number(expText);
  const sign = negative ? "-" : "";
  if (exp < -4 || exp >= 6) {
    const frac = digits.length > 1 ? `.${digits.slice(1)}` : "";
    const abs = Math.abs(exp);
    return `${sign}${digits[0]}${frac}e${exp < 0 ? "-" : "+"}${abs < 10 ? "0" : ""}${abs}`;
  }
  if (exp < 0) return `${sign}0.${"0".repeat(-exp - 1)}${digits}`;
  const whole = digits.slice(0, exp + 1).padEnd(exp + 1, "0");
  const frac = digits.slice(exp + 1);
  return frac.length > 0 ? `${sign}${whole}.${frac}` : `${sign}${whole}`;
}

/** A family read back by {@link parseExposition}. */
export interface ParsedFamily {
  readonly name: string;
  readonly help: string;
  readonly type: MetricType;
  readonly samples: readonly ParsedSample[];
}

/** A sample read back by {@link parseExposition}. */
export interface ParsedSample {
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
  readonly timestampMs?: number;
  /** In a histogram family: which line of a series it is (`le` stays in `labels`). */
  readonly suffix?: "_bucket" | "_sum" | "_count";
}

/** Text that is not what {@link PrometheusText} writes; the message names the line. */
export class ExpositionError extends Error {
  override name = "ExpositionError";
}

const SAMPLE_RE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)(?: (-?\d+))?$/;

/**
 * Reads text back strictly, as written here: every family opens with `# HELP` then `# TYPE`
 * before its samples, appears once, and holds only samples of its own name (for a histogram,
 * its `_bucket`, `_sum` and `_count` lines, each series whole: bounds ascending to `+Inf`,
 * counts never decreasing, the `+Inf` bucket equal to `_count`). For tests and scrape
 * checks; throws {@link ExpositionError} at the first violation.
 */
export function parseExposition(text: string): ParsedFamily[] {
  if (text !== "" && !text.endsWith("\n")) throw new ExpositionError("missing final newline");
  const lines = text === "" ? [] : text.slice(0, -1).split("\n");
  const out: ParsedFamily[] = [];
  const seen = new Set<string>();
  let current: { name: string; help: string; type: MetricType; samples: ParsedSample[] } | null =
    null;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] ?? "";
    const fail = (what: string): never => {
      throw new ExpositionError(`line ${i + 1}: ${what}: ${JSON.stringify(line)}`);
    };
    if (line.startsWith("# HELP ")) {
      const [name = "", ...rest] = line.slice(7).split(" ");
      const type = /^# TYPE (\S+) (counter|gauge|histogram)$/.exec(lines[i + 1] ?? "");
      if (!type || type[1] !== name) fail("HELP not followed by a TYPE of the same family");
      if (seen.has(name)) fail("family written twice");
      seen.add(name);
      current = {
        name,
        help: unescape(rest.join(" ")),
        type: type?.[2] as MetricType,
        samples: [],
      };
      out.push(current);
      i++;
      continue;
    }
    const m = SAMPLE_RE.exec(line);
    if (!m) fail("not a HELP, TYPE or sample line");
    const sampleName = m?.[1] ?? "";
    let suffix: ParsedSample["suffix"];
    if (current?.type === "histogram") {
      suffix = HISTOGRAM_SUFFIXES.find((x) => sampleName === `${current?.name}${x}`);
      if (!suffix) fail("sample outside its family's HELP and TYPE");
    } else if (!current || sampleName !== current.name) {
      fail("sample outside its family's HELP and TYPE");
    }
    const value = parseValue(m?.[3] ?? "");
    if (value === undefined) fail("bad value");
    const labels = parseLabels(m?.[2] ?? "");
    if (!labels) fail("bad labels");
    const ts = m?.[4];
    current?.samples.push({
      labels: labels ?? {},
      value: value ?? 0,
      ...(ts === undefined ? {} : { timestampMs: Number(ts) }),
      ...(suffix === undefined ? {} : { suffix }),
    });
  }
  for (const f of out) {
    if (f.samples.length === 0) throw new ExpositionError(`family ${f.name} has no samples`);
    if (f.type === "histogram") checkHistogram(f);
  }
  return out;
}

const HISTOGRAM_SUFFIXES = ["_bucket", "_sum", "_count"] as const;

/** Each series of a histogram family: buckets ascending to +Inf, then _sum, then _count. */
function checkHistogram(f: ParsedFamily): void {
  const fail = (what: string, s: ParsedSample): never => {
    throw new ExpositionError(
      `histogram ${f.name}${s.suffix ?? ""} ${JSON.stringify(s.labels)}: ${what}`,
    );
  };
  const identity = (s: ParsedSample) => {
    const { le: _le, ...rest } = s.labels;
    return JSON.stringify(Object.entries(rest).sort(([a], [b]) => compareGo(a, b)));
  };
  const done = new Set<string>();
  let series: { id: string; le: number; count: number; sum?: number; inf?: number } | undefined;
  for (const s of f.samples) {
    const id = identity(s);
    if (!series || series.id !== id) {
      if (series) fail("series ends before its _count", s);
      if (done.has(id)) fail("series written twice", s);
      if (s.suffix !== "_bucket") fail("series does not start with a bucket", s);
      series = { id, le: -Infinity, count: 0 };
    }
    if (s.suffix === "_bucket") {
      if (series.inf !== undefined) fail("bucket after +Inf", s);
      const le = s.labels.le === undefined ? undefined : parseValue(s.labels.le);
      if (le === undefined || Number.isNaN(le)) fail("bucket without a numeric le", s);
      if ((le ?? 0) <= series.le) fail("bucket bounds not ascending", s);
      if (s.value < series.count) fail("cumulative count decreases", s);
      series.le = le ?? 0;
      series.count = s.value;
      if (le === Infinity) series.inf = s.value;
    } else if ("le" in s.labels) {
      fail("le outside a bucket", s);
    } else if (s.suffix === "_sum") {
      if (series.inf === undefined || series.sum !== undefined) fail("_sum out of place", s);
      series.sum = s.value;
    } else {
      if (series.sum === undefined) fail("_count before _sum", s);
      if (s.value !== series.inf) fail(`_count ${s.value} differs from the +Inf bucket`, s);
      done.add(id);
      series = undefined;
    }
  }
  if (series) throw new ExpositionError(`histogram ${f.name}: last series has no _count`);
}

function parseValue(text: string): number | undefined {
  if (text === "+Inf") return Infinity;
  if (text === "-Inf") return -Infinity;
  if (text === "NaN") return NaN;
  const v = Number(text);
  return Number.isNaN(v) || text.trim() !== text ? undefined : v;
}

function parseLabels(text: string): Record<string, string> | undefined {
  const labels: Record<string, string> = {};
  if (text === "") return labels;
  const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|\})/y;
  re.lastIndex = 1;
  while (re.lastIndex < text.length) {
    const m = re.exec(text);
    if (!m || m[1] === undefined || m[1] in labels) return undefined;
    labels[m[1]] = unescape(m[2] ?? "");
    if (m[3] === "}") return re.lastIndex === text.length ? labels : undefined;
  }
  return undefined;
}

function unescape(v: string): string {
  return v.replace(/\\([\\"n])/g, (_, c: string) => (c === "n" ? "\n" : c));
}
