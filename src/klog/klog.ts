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

import { fileURLToPath } from "node:url";
import { goFloatF, goQuote, jsonPairs, KObj, type Pairs, textPairs, zapString } from "./encode.ts";
import { loadModuleStarts, moduleAt, type ModuleStarts } from "./_bundle_sites.ts";

// KObj lives with the encoders, which print it specially; it is part of this module's API.
export { KObj };

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

/** `klog.KObj`: a reference to a Kubernetes object for a log value. */
export function kobj(o: { metadata?: { name?: string; namespace?: string } }): KObj {
  return new KObj(o.metadata?.name ?? "", o.metadata?.namespace ?? "");
}

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
  const logger = makeLogger(core, []);
  cores.set(logger, core);
  return logger;
}

/** The settings behind each logger createLogger made (shared by the loggers `with` derives). */
const cores = new WeakMap<Logger, Core>();

/**
 * Changes `-v` and `-vmodule` of a logger createLogger made, and of every logger derived from
 * it, from the next line on (a configuration reload); throws {@link LoggerOptionsError},
 * changing nothing, for a bad value.
 */
export function setLogVerbosity(
  logger: Logger,
  verbosity: number,
  vmodule: readonly VModuleEntry[] = [],
): void {
  const core = cores.get(logger);
  if (!core) throw new LoggerOptionsError("Cannot change the verbosity of this logger");
  const next = createLogger({ format: core.json ? "json" : "text", verbosity, vmodule });
  const nextCore = cores.get(next)!;
  core.verbosity = nextCore.verbosity;
  core.vmodule = nextCore.vmodule;
  core.vmoduleCache.clear();
}

/**
 * Changes only `-v` of a logger createLogger made and of its derived loggers, keeping its
 * `-vmodule` (upstream's GlogSetter behind `/debug/flags/v`).
 */
export function setLogV(logger: Logger, verbosity: number): void {
  const core = cores.get(logger);
  if (!core) throw new LoggerOptionsError("Cannot change the verbosity of this logger");
  checkLevel("verbosity", verbosity);
  core.verbosity = verbosity;
  core.vmoduleCache.clear();
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
  // Each method hands itself to emit: the call site is the frame that called it.
  const info: Logger["info"] = (msg, kv) => emit(core, "I", 0, values, undefined, msg, kv, info);
  const warning: Logger["warning"] = (msg, kv) =>
    emit(core, "W", 0, values, undefined, msg, kv, warning);
  const error: Logger["error"] = (err, msg, kv) =>
    emit(core, "E", null, values, err ?? undefined, msg, kv, error);
  const v: Logger["v"] = (level) => {
    if (level > core.verbosity && !(core.vmodule.length > 0 && vmoduleLevel(core, v) >= level)) {
      return off;
    }
    const verbose: Verbose["info"] = (msg, kv) =>
      emit(core, "I", level, values, undefined, msg, kv, verbose);
    return { enabled: true, info: verbose };
  };
  return {
    info,
    warning,
    error,
    v,
    with: (kv) => makeLogger(core, [...values, ...Object.entries(kv)]),
  };
}

/** The vmodule level of the code calling into this module, cached per file as klog caches per PC. */
function vmoduleLevel(core: Core, entry: Entry): number {
  const { path } = caller(entry);
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
  entry: Entry,
): void {
  const t = core.clock();
  const { path, line } = caller(entry);
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

/** The logger method a line was logged with: the line belongs to the frame that called it. */
// deno-lint-ignore no-explicit-any
type Entry = (...args: any[]) => unknown;

/**
 * The frame that called `entry`, or else the first stack frame outside this module, as klog's
 * runtime.Caller(depth). It runs before any value is encoded, so no encode.ts frame can
 * sit between it and the call site; a value whose toString or toJSON logs is itself the call
 * site of that nested line.
 */
function caller(entry: Entry): { path: string; line: number } {
  const limit = Error.stackTraceLimit;
  try {
    // The frame that called the logger method `entry`, alone: V8 skips the frames above it and
    // resolves one frame instead of sixteen (9-17 µs against 36-45 µs a line under 30 awaits,
    // measured here with a throwaway loop).
    Error.stackTraceLimit = 1;
    const one: { stack?: string } = {};
    Error.captureStackTrace(one, entry);
    const site = callSite(one.stack?.split("\n")[1]);
    if (site) return site;
    // A method called from inside this module, or not on the stack: the first outside frame.
    Error.stackTraceLimit = 16;
    for (const frame of (new Error().stack ?? "").split("\n").slice(1)) {
      const outside = callSite(frame);
      if (outside) return outside;
    }
    return { path: "???", line: 1 };
  } finally {
    Error.stackTraceLimit = limit;
  }
}

/**
 * When this module is bundled (the release's Worker, deploy/release_bundle.ts), where each
 * bundled module starts; undefined until a frame of the bundle is seen, null when none is found.
 */
let bundleStarts: ModuleStarts | null | undefined;
/** This module's path as the bundle's table names it. */
const SELF = "src/klog/klog.ts";

/** A stack frame's file and line; undefined for none, or for a frame of this module. */
function callSite(frame: string | undefined): { path: string; line: number } | undefined {
  const m = frame === undefined ? null : FRAME.exec(frame);
  if (m === null) return undefined;
  if (m[1] === import.meta.url) {
    // A module of this file: this one, or another module of the same bundle.
    if (!import.meta.url.endsWith(".js")) return undefined;
    if (bundleStarts === undefined) bundleStarts = loadModuleStarts(import.meta.url) ?? null;
    const site = bundleStarts && moduleAt(bundleStarts, Number(m[2]));
    if (!site) return { path: fileURLToPath(import.meta.url), line: Number(m[2]) };
    return site.path === SELF ? undefined : site;
  }
  let path = (m[1] ?? "").replace(/^file:\/\//, "");
  if (path.includes("%")) {
    try {
      path = decodeURIComponent(path);
    } catch { /* keep the encoded form */ }
  }
  return { path, line: Number(m[2]) };
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
