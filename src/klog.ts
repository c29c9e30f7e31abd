/**
 * @module
 * Structured logging that prints exactly what the Go kubelet prints, so that operators' parsers,
 * greps and dashboards keep working. Two formats, chosen by `logging.format`:
 *
 * - `text`: klog's text logger (k8s.io/klog/v2 `textlogger`, which component-base installs for
 *   `--logging-format=text`). The header is built as in `internal/buffer/buffer.go`
 *   `FormatHeader`, key/value pairs as in `internal/serialize/keyvalues.go`:
 *
 *       I1202 07:36:22.123456   12345 pod_workers.ts:123] "Pod started" pod="ns/name" n=3
 *
 *   The time is local time, as Go's `time.Now()` gives it: set `TZ` (Deno honours it) or
 *   `/etc/localtime` to choose the zone.
 * - `json`: component-base `logs/json/json.go` (zap behind zapr): one object per line with
 *   `ts` (milliseconds since the epoch, fractional), `caller` (`dir/file.ts:line`), `msg`,
 *   values from {@link Logger.with}, `v` (info lines only), the call's pairs, then `err`.
 *
 * Verbosity follows klog's `-v` and `-vmodule` (vmodule is text-only, as upstream). Nothing is
 * buffered: each line goes out in one synchronous write, so nothing is lost at exit.
 */

/** Output format, as `--logging-format`. */
export type LogFormat = "text" | "json";

/** One `-vmodule` entry: files whose base name (without extension) matches log up to `verbosity`. */
export interface VModuleEntry {
  /** A literal name or a Go `filepath.Match` glob, such as `pod_workers` or `pleg*`. */
  filePattern: string;
  verbosity: number;
}

/** Settings for {@link createLogger}. */
export interface LoggerOptions {
  /** @default "text" */
  format?: LogFormat;
  /** `-v`: the highest V level that is printed. @default 0 */
  verbosity?: number;
  /** `-vmodule`: per-file verbosity, checked in order, first match wins. @default [] */
  vmodule?: readonly VModuleEntry[];
  /** Receives each record without its final newline. @default synchronous write to stderr */
  write?: (line: string) => void;
  /** The clock, for tests. @default wall-clock time with microseconds */
  now?: () => Date;
  /** The number printed where klog prints its thread id. @default Deno.pid */
  pid?: number;
}

/** What `klog.V(n)` returns: whether level n is on at this call site, and its InfoS. */
export interface Verbose {
  readonly enabled: boolean;
  info(msg: string, kv?: Record<string, unknown>): void;
}

/** A klog logger; `kv` values print as klog prints them (strings quoted, objects as JSON). */
export interface Logger {
  /** `klog.InfoS`. */
  info(msg: string, kv?: Record<string, unknown>): void;
  /** An info line with severity W (in JSON, an info line at v=0, as klog.Warning gives). */
  warning(msg: string, kv?: Record<string, unknown>): void;
  /** `klog.ErrorS`; a null or undefined `err` prints no `err` key. */
  error(err: unknown, msg: string, kv?: Record<string, unknown>): void;
  /** `klog.V(level)`; the returned `info` does nothing when the level is off. */
  v(level: number): Verbose;
  /** `logger.WithValues`: a logger that adds these pairs to every line. */
  with(kv: Record<string, unknown>): Logger;
}

/** A bad {@link LoggerOptions} field. */
export class LoggerOptionsError extends Error {
  override name = "LoggerOptionsError";
}

/** `klog.ObjectRef`: prints as `"ns/name"` in text and `{"name","namespace"}` in JSON. */
export class KObj {
  constructor(readonly name: string, readonly namespace: string) {}
  toString(): string {
    return this.namespace === "" ? this.name : `${this.namespace}/${this.name}`;
  }
  toJSON(): { name: string; namespace?: string } {
    return this.namespace === ""
      ? { name: this.name }
      : { name: this.name, namespace: this.namespace };
  }
}

/** `klog.KObj`: a reference to a Kubernetes object for a log value. */
export function kobj(o: { metadata?: { name?: string; namespace?: string } }): KObj {
  return new KObj(o.metadata?.name ?? "", o.metadata?.namespace ?? "");
}

type Pairs = readonly (readonly [string, unknown])[];

interface ModulePattern {
  matches(file: string): boolean;
  level: number;
}

interface Core {
  json: boolean;
  verbosity: number;
  vmodule: readonly ModulePattern[];
  vmoduleCache: Map<string, number>;
  write: (line: string) => void;
  clock: () => number;
  pid: number;
}

/** Builds a logger; throws {@link LoggerOptionsError} for a bad option, as upstream validation does. */
export function createLogger(opts: LoggerOptions = {}): Logger {
  const format = opts.format ?? "text";
  if (format !== "text" && format !== "json") {
    throw bad("format", "'text' or 'json'", format);
  }
  const verbosity = opts.verbosity ?? 0;
  checkLevel("verbosity", verbosity);
  const vmodule = (opts.vmodule ?? []).flatMap((e, i) => {
    const field = `vmodule[${i}]`;
    if (e.filePattern === "" || /[=,]/.test(e.filePattern)) {
      throw bad(`${field}.filePattern`, "a file pattern without '=' or ','", e.filePattern);
    }
    checkLevel(`${field}.verbosity`, e.verbosity);
    // klog drops level 0 entries, so they never shadow a later pattern.
    return e.verbosity === 0 ? [] : [compilePattern(e.filePattern, e.verbosity)];
  });
  if (format === "json" && vmodule.length > 0) {
    throw new LoggerOptionsError(
      "Cannot create logger: 'vmodule' is only supported for text log format",
    );
  }
  const now = opts.now;
  const core: Core = {
    json: format === "json",
    verbosity,
    vmodule,
    vmoduleCache: new Map(),
    write: opts.write ?? writeStderr,
    clock: now ? () => now().getTime() : wallClock,
    pid: opts.pid ?? Deno.pid,
  };
  return makeLogger(core, []);
}

function bad(field: string, expected: string, value: unknown): LoggerOptionsError {
  return new LoggerOptionsError(
    `Cannot create logger: '${field}' must be ${expected}: current value is '${String(value)}'`,
  );
}

function checkLevel(field: string, level: number): void {
  if (!Number.isInteger(level) || level < 0 || level > 0x7fffffff) {
    throw bad(field, "a whole number from 0 to 2147483647", level);
  }
}

function makeLogger(core: Core, values: Pairs): Logger {
  const off: Verbose = { enabled: false, info: () => {} };
  return {
    info: (msg, kv) => emit(core, "I", 0, values, undefined, msg, kv),
    warning: (msg, kv) => emit(core, "W", 0, values, undefined, msg, kv),
    error: (err, msg, kv) => emit(core, "E", null, values, err ?? undefined, msg, kv),
    v: (level) => {
      if (level > core.verbosity && !(core.vmodule.length > 0 && vmoduleLevel(core) >= level)) {
        return off;
      }
      return {
        enabled: true,
        info: (msg, kv) => emit(core, "I", level, values, undefined, msg, kv),
      };
    },
    with: (kv) => makeLogger(core, [...values, ...Object.entries(kv)]),
  };
}

/** The vmodule level of the code calling into this module, cached per file as klog caches per PC. */
function vmoduleLevel(core: Core): number {
  const { path } = caller();
  let level = core.vmoduleCache.get(path);
  if (level === undefined) {
    const file = basename(path).replace(/\.[^.]*$/, "");
    level = core.vmodule.find((p) => p.matches(file))?.level ?? 0;
    core.vmoduleCache.set(path, level);
  }
  return level;
}

/** `level` is the V level for JSON's "v"; error lines have none. */
function emit(
  core: Core,
  severity: "I" | "W" | "E",
  level: number | null,
  values: Pairs,
  err: unknown,
  msg: string,
  kv: Record<string, unknown> | undefined,
): void {
  const t = core.clock();
  const { path, line } = caller();
  const pairs = kv ? Object.entries(kv) : [];
  let out: string;
  if (core.json) {
    out = `{"ts":${goFloatF(t)},"caller":${zapString(`${trimmedPath(path)}:${line}`)},"msg":${
      zapString(msg)
    }`;
    out += jsonPairs(values);
    if (level !== null) out += `,"v":${level}`;
    out += jsonPairs(pairs);
    if (err !== undefined) out += jsonPairs([["err", err]]);
    out += "}";
  } else {
    out = header(severity, t, core.pid, basename(path), line) + goQuote(msg) +
      textPairs(err === undefined ? [values, pairs] : [[["err", err]], values, pairs]);
  }
  core.write(out);
}

// ---- Call site -------------------------------------------------------------------------------

const FRAME = /([^\s(]+):(\d+):\d+\)?$/;

/** The first stack frame outside this module, as klog's runtime.Caller(depth). */
function caller(): { path: string; line: number } {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 16;
  const stack = new Error().stack ?? "";
  Error.stackTraceLimit = limit;
  for (const frame of stack.split("\n").slice(1)) {
    const m = FRAME.exec(frame);
    if (m === null || m[1] === import.meta.url) continue;
    let path = (m[1] ?? "").replace(/^file:\/\//, "");
    if (path.includes("%")) {
      try {
        path = decodeURIComponent(path);
      } catch { /* keep the encoded form */ }
    }
    return { path, line: Number(m[2]) };
  }
  return { path: "???", line: 1 };
}

function basename(path: string): string {
  return path.slice(path.lastIndexOf("/") + 1);
}

/** zap's EntryCaller.TrimmedPath: the file and its directory, or the whole path if shorter. */
function trimmedPath(path: string): string {
  const last = path.lastIndexOf("/");
  const prev = last > 0 ? path.lastIndexOf("/", last - 1) : -1;
  return prev < 0 ? path : path.slice(prev + 1);
}

/** A `filepath.Match` pattern; a malformed one matches nothing, as in klog. */
function compilePattern(pattern: string, level: number): ModulePattern {
  if (!/[\\*?[\]]/.test(pattern)) return { level, matches: (file) => file === pattern };
  const re = globToRegExp(pattern);
  return { level, matches: (file) => re?.test(file) ?? false };
}

function globToRegExp(pattern: string): RegExp | null {
  const cps = [...pattern];
  const lit = (c: string) => `\\u{${c.codePointAt(0)!.toString(16)}}`;
  let i = 0;
  // One class member: Go's getEsc rejects a bare '-' or ']' and a dangling '\'.
  const member = (): string | null => {
    let c = cps[i];
    if (c === undefined || c === "-" || c === "]") return null;
    if (c === "\\" && (c = cps[++i]) === undefined) return null;
    i++;
    return c;
  };
  let re = "^";
  while (i < cps.length) {
    const c = cps[i++]!;
    if (c === "*") re += "[^/]*";
    else if (c === "?") re += "[^/]";
    else if (c === "\\") {
      if (i >= cps.length) return null;
      re += lit(cps[i++]!);
    } else if (c === "[") {
      const negated = cps[i] === "^";
      if (negated) i++;
      let ranges = "";
      for (let n = 0;; n++) {
        if (cps[i] === "]" && n > 0) break;
        const lo = member();
        if (lo === null) return null;
        let hi = lo;
        if (cps[i] === "-") {
          i++;
          const h = member();
          if (h === null) return null;
          hi = h;
        }
        if (lo.codePointAt(0)! <= hi.codePointAt(0)!) ranges += `${lit(lo)}-${lit(hi)}`;
      }
      i++;
      if (ranges === "") re += negated ? "[\\s\\S]" : "(?!)";
      else re += `[${negated ? "^" : ""}${ranges}]`;
    } else re += lit(c);
  }
  return new RegExp(`${re}$`, "u");
}

// ---- Time and output -------------------------------------------------------------------------

let clockAnchor = performance.timeOrigin;

/**
 * Epoch milliseconds with microseconds, as klog prints them. Date.now() has whole milliseconds
 * only, so the monotonic clock supplies the fraction. When the two drift more than a millisecond
 * apart (NTP steps, suspend) the monotonic clock is re-anchored to the wall clock, so the time
 * printed is always within 2 ms of Date.now().
 */
function wallClock(): number {
  const wall = Date.now();
  const mono = performance.now();
  let t = clockAnchor + mono;
  if (t < wall - 1 || t >= wall + 2) {
    clockAnchor = wall + 0.5 - mono;
    t = clockAnchor + mono;
  }
  return Math.round(t * 1000) / 1000;
}

const encoder = new TextEncoder();

function writeStderr(line: string): void {
  const bytes = encoder.encode(line + "\n");
  try {
    for (let off = 0; off < bytes.length;) off += Deno.stderr.writeSync(bytes.subarray(off));
  } catch {
    // klog ignores write errors too: a closed stderr must not take the kubelet down.
  }
}

const two = (n: number) => (n < 10 ? "0" : "") + n;

/** `Lmmdd hh:mm:ss.uuuuuu threadid file:line] `, byte for byte as buffer.FormatHeader. */
function header(severity: string, t: number, pid: number, file: string, line: number): string {
  const ms = Math.floor(t);
  const d = new Date(ms);
  const micros = d.getMilliseconds() * 1000 + Math.min(999, Math.round((t - ms) * 1000));
  // nDigits(7, pid, ' '): the low 7 digits, space-padded; 0 prints as blanks.
  const id = pid <= 0 ? "" : String(pid).slice(-7);
  return `${severity}${two(d.getMonth() + 1)}${two(d.getDate())} ${two(d.getHours())}:${
    two(d.getMinutes())
  }:${two(d.getSeconds())}.${String(micros).padStart(6, "0")} ${id.padStart(7)} ${file}:${
    Math.max(0, line)
  }] `;
}

// ---- Text values (klog internal/serialize) ---------------------------------------------------

/** Formats pairs as FormatKVs does: a repeated key keeps its last value, in that value's place. */
function textPairs(lists: readonly Pairs[]): string {
  const entries: { text: string; live: boolean }[] = [];
  const byKey = new Map<string, number>();
  for (const list of lists) {
    for (const [key, value] of list) {
      const text = ` ${key}${textValue(value)}`;
      const i = byKey.get(key);
      if (i !== undefined) {
        // An identical repeat is dropped so WithValues pairs keep their leading position.
        if (entries[i]!.text === text) continue;
        entries[i]!.live = false;
      }
      byKey.set(key, entries.length);
      entries.push({ text, live: true });
    }
  }
  let out = "";
  for (const e of entries) if (e.live) out += e.text;
  return out;
}

/** One value with its leading '=', in KVFormat's order of type checks. */
function textValue(v: unknown): string {
  if (v instanceof KObj) return `="${v}"`; // WriteText: quoted but not escaped, as upstream.
  if (typeof v === "string") return stringValue(v);
  if (v instanceof Error) return stringValue(errorText(v));
  if (v instanceof Date) return stringValue(goTimeString(v));
  if (isStringer(v)) return stringValue(stringerText(v));
  try {
    return "=" + goJSON(v, true);
  } catch (e) {
    return `="<internal error: ${e instanceof Error ? e.message : String(e)}>"`;
  }
}

/** writeStringValue: `%q` on one line, or an indented `=<` block when there are line breaks. */
function stringValue(s: string): string {
  if (!s.includes("\n")) return "=" + goQuote(s);
  const body = s.endsWith("\n") ? s.slice(0, -1) : s;
  return `=<\n\t${body.replaceAll("\n", "\n\t")}\n >`;
}

/** A Go error's Error(): the message, then each `cause` the way `%w` wrapping would print it. */
function errorText(e: Error): string {
  let text = e.message;
  let cause: unknown = e.cause;
  for (let depth = 0; cause !== undefined && cause !== null && depth < 10; depth++) {
    const m = cause instanceof Error ? cause.message : String(cause);
    if (!text.endsWith(m)) text += `: ${m}`;
    cause = cause instanceof Error ? cause.cause : undefined;
  }
  return text;
}

/** Objects whose class defines its own toString act as Go's fmt.Stringer (URL, RegExp, ...). */
function isStringer(v: unknown): v is { toString(): string } {
  if (typeof v !== "object" || v === null || Array.isArray(v) || ArrayBuffer.isView(v)) {
    return false;
  }
  const f = (v as { toString?: unknown }).toString;
  return typeof f === "function" && f !== Object.prototype.toString;
}

/** StringerToString: a throwing toString prints as klog prints a panicking String(). */
function stringerText(v: { toString(): string }): string {
  try {
    return String(v.toString());
  } catch (e) {
    return `<panic: ${e instanceof Error ? e.message : String(e)}>`;
  }
}

/** Go's Time.String() in UTC: "2024-12-02 07:36:22.123 +0000 UTC". */
function goTimeString(d: Date): string {
  if (Number.isNaN(d.getTime())) return "Invalid Date";
  const iso = d.toISOString().replace(/\.?0*Z$/, "");
  return `${iso.replace("T", " ")} +0000 UTC`;
}

const PRINT = /[\p{L}\p{M}\p{N}\p{P}\p{S}]/u;
const PLAIN = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;
const SHORT_ESCAPES: Record<string, string> = {
  "\x07": "\\a",
  "\b": "\\b",
  "\f": "\\f",
  "\n": "\\n",
  "\r": "\\r",
  "\t": "\\t",
  "\v": "\\v",
};

/** strconv.Quote: Go escapes for control and non-printable runes, printable Unicode as is. */
function goQuote(s: string): string {
  if (PLAIN.test(s)) return `"${s}"`;
  let out = '"';
  for (const ch of s) {
    const r = ch.codePointAt(0)!;
    if (ch === '"' || ch === "\\") out += "\\" + ch;
    else if (r >= 0x20 && r < 0x7f) out += ch;
    else if (r >= 0xd800 && r < 0xe000) out += "\ufffd"; // a lone surrogate: UTF-8 has U+FFFD
    else if (r <= 0xff ? r >= 0xa1 && r !== 0xad : PRINT.test(ch)) out += ch;
    else if (SHORT_ESCAPES[ch] !== undefined) out += SHORT_ESCAPES[ch];
    else if (r < 0x20 || r === 0x7f) out += "\\x" + r.toString(16).padStart(2, "0");
    else if (r < 0x10000) out += "\\u" + r.toString(16).padStart(4, "0");
    else out += "\\U" + r.toString(16).padStart(8, "0");
  }
  return out + '"';
}

// ---- JSON (Go encoding/json for nested values, zap for top-level fields) ----------------------

/** encoding/json.Marshal; throws with Go's message for NaN, Infinity, cycles and functions. */
function goJSON(v: unknown, escapeHTML: boolean, seen: object[] = []): string {
  switch (typeof v) {
    case "string":
      return jsonString(v, escapeHTML);
    case "number":
      if (!Number.isFinite(v)) {
        throw new Error(
          `json: unsupported value: ${Number.isNaN(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf"}`,
        );
      }
      return Object.is(v, -0) ? "-0" : String(v); // JS and Go switch to exponents at 1e21 and 1e-6
    case "bigint":
      return v.toString();
    case "boolean":
      return String(v);
    case "undefined":
      return "null";
    case "function":
    case "symbol":
      throw new Error(`json: unsupported type: ${typeof v}`);
  }
  if (v === null) return "null";
  const o = v as object;
  if (seen.includes(o)) {
    throw new Error(
      `json: unsupported value: encountered a cycle via ${o.constructor?.name ?? "Object"}`,
    );
  }
  seen.push(o);
  try {
    if (o instanceof Date) return jsonString(goRFC3339(o), escapeHTML);
    if (o instanceof Uint8Array) return `"${btoa(String.fromCharCode(...o))}"`; // []byte
    if (ArrayBuffer.isView(o) && !(o instanceof DataView)) {
      return goJSON(Array.from(o as unknown as ArrayLike<number>), escapeHTML, seen);
    }
    if (typeof (o as { toJSON?: unknown }).toJSON === "function") {
      return goJSON((o as { toJSON(): unknown }).toJSON(), escapeHTML, seen);
    }
    if (Array.isArray(o) || o instanceof Set) {
      return `[${[...o].map((x) => goJSON(x, escapeHTML, seen)).join(",")}]`;
    }
    const entries = o instanceof Map
      ? [...o].map(([k, x]) => [String(k), x] as const).sort(([a], [b]) =>
        a < b ? -1 : a > b ? 1 : 0
      )
      : Object.entries(o);
    const fields = entries
      .filter(([, x]) => x !== undefined && typeof x !== "function" && typeof x !== "symbol")
      .map(([k, x]) => `${jsonString(k, escapeHTML)}:${goJSON(x, escapeHTML, seen)}`);
    return `{${fields.join(",")}}`;
  } finally {
    seen.pop();
  }
}

function goRFC3339(d: Date): string {
  if (Number.isNaN(d.getTime())) {
    throw new Error("json: error calling MarshalJSON for type time.Time");
  }
  return d.toISOString().replace(/\.?0*Z$/, "Z");
}

// Printable ASCII without '"', '\\' and (for escapeHTML) '<', '>', '&': nothing to escape.
const JSON_PLAIN = /^[ !#-%'-;=?-[\]-~]*$/;

/** encoding/json string escaping (Go 1.22+: \b and \f short forms). */
function jsonString(s: string, escapeHTML: boolean): string {
  if (JSON_PLAIN.test(s)) return `"${s}"`;
  let out = '"';
  for (const ch of s) {
    const r = ch.codePointAt(0)!;
    if (ch === '"' || ch === "\\") out += "\\" + ch;
    else if (ch === "\b" || ch === "\f" || ch === "\n" || ch === "\r" || ch === "\t") {
      out += SHORT_ESCAPES[ch];
    } else if (r < 0x20 || r === 0x2028 || r === 0x2029 || (escapeHTML && "<>&".includes(ch))) {
      out += "\\u" + r.toString(16).padStart(4, "0");
    } else if (r >= 0xd800 && r < 0xe000) out += "\\ufffd";
    else out += ch;
  }
  return out + '"';
}

/** zap's own string escaping (msg, keys, string fields): only \n \r \t have short forms. */
function zapString(s: string): string {
  if (PLAIN.test(s)) return `"${s}"`;
  let out = '"';
  for (const ch of s) {
    const r = ch.codePointAt(0)!;
    if (ch === '"' || ch === "\\") out += "\\" + ch;
    else if (ch === "\n" || ch === "\r" || ch === "\t") out += SHORT_ESCAPES[ch];
    else if (r < 0x20) out += "\\u00" + r.toString(16).padStart(2, "0");
    else if (r >= 0xd800 && r < 0xe000) out += "\\ufffd";
    else out += ch;
  }
  return out + '"';
}

/** strconv.FormatFloat(f, 'f', -1, 64): shortest digits, never an exponent. */
function goFloatF(n: number): string {
  const s = Object.is(n, -0) ? "-0" : String(n);
  const m = /^(-?)(\d)(?:\.(\d+))?e([+-]\d+)$/.exec(s);
  if (m === null) return s;
  const [, sign, lead, frac = "", exp] = m;
  const digits = lead! + frac;
  const point = 1 + Number(exp);
  if (point <= 0) return `${sign}0.${"0".repeat(-point)}${digits}`;
  return sign + digits.padEnd(point, "0");
}

/** Pairs as zapr hands them to zap.Any; each starts with ','. */
function jsonPairs(pairs: Pairs): string {
  let out = "";
  for (const [key, v] of pairs) {
    const k = zapString(key);
    if (typeof v === "string") out += `,${k}:${zapString(v)}`;
    else if (typeof v === "number") {
      // zap writes NaN and the infinities as strings; integers and floats alike with 'f'.
      const text = Number.isNaN(v)
        ? '"NaN"'
        : !Number.isFinite(v)
        ? (v > 0 ? '"+Inf"' : '"-Inf"')
        : goFloatF(v);
      out += `,${k}:${text}`;
    } else if (v instanceof KObj) out += `,${k}:${goJSON(v, false)}`; // logr.Marshaler
    else if (v instanceof Error) out += `,${k}:${zapString(errorText(v))}`;
    else if (v instanceof Date) out += `,${k}:${goFloatF(v.getTime())}`; // the json.go time encoder
    else if (isStringer(v)) out += `,${k}:${zapString(stringerText(v))}`;
    else {
      try {
        out += `,${k}:${goJSON(v, false)}`;
      } catch (e) {
        // zap reports a value it cannot encode under "<key>Error".
        out += `,${zapString(key + "Error")}:${
          zapString(e instanceof Error ? e.message : String(e))
        }`;
      }
    }
  }
  return out;
}
