/**
 * @module
 * The node log query (`/logs/?query=...`, NodeLogQuery, GA in 1.36): decodes the query's
 * parameters (`query`, `sinceTime`, `untilTime`, `tailLines`, `pattern`, `boot`), validates
 * them with upstream's rules and words, and builds the journalctl command line of a query of
 * services. Streaming the answer is journal_copy.ts; the route is logs.ts. Corresponds to
 * upstream `pkg/kubelet/kubelet_server_journal.go` (newNodeLogQuery, validate, validateServices,
 * safeServiceName) and `kubelet_server_journal_linux.go` (getLoggingCmd).
 */

import { goRegexpSyntaxError } from "./_go_regexp_syntax.ts";
import { resolveInRoot, RootPathError } from "./_open_in_root.ts";
import { goQuote } from "../klog/encode.ts";

/** The directory file queries and the service file heuristics read (upstream nodeLogDir). */
export const NODE_LOG_DIR = "/var/log";
/** Most lines `tailLines` may ask for. */
export const MAX_TAIL_LINES = 100000;
/** Most services one query may name. */
export const MAX_SERVICES = 4;
const MAX_SERVICE_LENGTH = 256;
/** Characters a service name may not hold: it becomes a journalctl argument. */
const UNSAFE_SERVICE_CHARACTERS = /[^a-zA-Z\-_.:0-9@]+/;

/** An RFC 3339 time as Go's time.Parse read it: its wall clock, zone and instant. */
export interface QueryTime {
  /** Year, month, day, hour, minute, second of the wall clock in the given zone. */
  readonly wall: readonly [number, number, number, number, number, number];
  /** Fraction of the second, in nanoseconds. */
  readonly nanos: number;
  /** The zone's offset east of UTC, in minutes. */
  readonly offsetMinutes: number;
  /** Nanoseconds since the Unix epoch. */
  readonly instant: bigint;
}

/** The options of a query (upstream `options`). */
export interface NodeLogQueryOptions {
  sinceTime?: QueryTime;
  untilTime?: QueryTime;
  /** Lines from the end; services only. */
  tailLines?: number;
  /** A boot offset, 0 or less. */
  boot?: number;
  /** A regular expression entries must match (journalctl --grep, read as PCRE2). */
  pattern?: string;
}

/** A decoded node log query (upstream nodeLogQuery). */
export interface NodeLogQuery extends NodeLogQueryOptions {
  /** Services (journald units, or files by the heuristics). */
  services: string[];
  /** Files under the node log directory (a query holding `/` or `\`). */
  files: string[];
}

/** One field error, in apimachinery's `<field>: <type>: <value>: <detail>` form. */
function fieldError(field: string, type: string, value: string | undefined, detail?: string) {
  return [field, type, value, detail].filter((p) => p !== undefined && p !== "").join(": ");
}

/** apimachinery's aggregate error text: one error as is, several deduplicated in brackets. */
export function aggregateError(errors: readonly string[]): string {
  const unique = [...new Set(errors)];
  return unique.length === 1 ? unique[0]! : `[${unique.join(", ")}]`;
}

/** Go's encoding/json text of a string (HTML characters and U+2028/9 escaped). */
function goJSONString(s: string): string {
  return JSON.stringify(s).replace(
    /[<>&\u2028\u2029]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

function goJSONStrings(list: readonly string[]): string {
  return `[${list.map(goJSONString).join(",")}]`;
}

/** Go's `fmt.Sprint` of a []string: `[a b]`. */
export function goList(list: readonly string[]): string {
  return `[${list.join(" ")}]`;
}

const RFC3339 =
  /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?(?:Z|([+-])(\d{2}):(\d{2}))$/;

/** Go's `time.Parse(time.RFC3339, s)`, or undefined where it fails. */
export function parseRFC3339(s: string): QueryTime | undefined {
  const m = RFC3339.exec(s);
  if (!m) return undefined;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  if (month < 1 || month > 12 || hour > 23 || minute > 59 || second > 59) return undefined;
  const lastDay = new Date(0);
  lastDay.setUTCFullYear(year, month, 0);
  const daysInMonth = lastDay.getUTCDate();
  if (day < 1 || day > daysInMonth) return undefined;
  let offsetMinutes = 0;
  if (m[8] !== undefined) {
    const oh = Number(m[9]);
    const om = Number(m[10]);
    if (oh > 23 || om > 59) return undefined;
    offsetMinutes = (m[8] === "-" ? -1 : 1) * (oh * 60 + om);
  }
  const nanos = m[7] === undefined ? 0 : Number(m[7].slice(0, 9).padEnd(9, "0"));
  const utc = new Date(0);
  utc.setUTCFullYear(year, month - 1, day);
  utc.setUTCHours(hour, minute, second, 0);
  const instant = BigInt(utc.getTime() - offsetMinutes * 60_000) * 1_000_000n + BigInt(nanos);
  return { wall: [year, month, day, hour, minute, second], nanos, offsetMinutes, instant };
}

const pad = (n: number, width: number) => String(n).padStart(width, "0");

/** Go's json.Marshal of a time.Time: RFC 3339 with the fraction's trailing zeros dropped. */
function timeJSON(t: QueryTime): string {
  const [y, mo, d, h, mi, s] = t.wall;
  const fraction = t.nanos === 0 ? "" : `.${pad(t.nanos, 9).replace(/0+$/, "")}`;
  const o = Math.abs(t.offsetMinutes);
  const zone = t.offsetMinutes === 0
    ? "Z"
    : `${t.offsetMinutes < 0 ? "-" : "+"}${pad(Math.floor(o / 60), 2)}:${pad(o % 60, 2)}`;
  return `"${pad(y, 4)}-${pad(mo, 2)}-${pad(d, 2)}T${pad(h, 2)}:${pad(mi, 2)}:${
    pad(s, 2)
  }${fraction}${zone}"`;
}

/**
 * Upstream's dateLayout "2006-1-2 15:4:5" of the time's own wall clock: the zone is dropped,
 * though journalctl runs with --utc (upstream passes a non-UTC time's clock as UTC too).
 */
export function journalDate(t: QueryTime): string {
  const [y, mo, d, h, mi, s] = t.wall;
  return `${pad(y, 4)}-${mo}-${d} ${pad(h, 2)}:${mi}:${s}`;
}

const INT = /^[+-]?\d+$/;

/** Go's strconv.Atoi on a 64-bit platform: the value, or its error text. */
export function goAtoi(s: string): number | string {
  const prefix = `strconv.Atoi: parsing ${goQuote(s)}: `;
  if (!INT.test(s)) return `${prefix}invalid syntax`;
  const n = BigInt(s);
  if (n > (1n << 63n) - 1n || n < -(1n << 63n)) return `${prefix}value out of range`;
  return Number(n);
}

/** Go's url.ParseQuery as URL.Query uses it: pairs with `;` or a bad escape are skipped. */
export function goParseQuery(rawQuery: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  const unescape = (s: string): string | undefined => {
    const bytes: number[] = [];
    for (let i = 0; i < s.length; i++) {
      const c = s[i]!;
      if (c === "%") {
        const hex = s.slice(i + 1, i + 3);
        if (!/^[0-9A-Fa-f]{2}$/.test(hex)) return undefined;
        bytes.push(parseInt(hex, 16));
        i += 2;
      } else if (c === "+") {
        bytes.push(0x20);
      } else {
        bytes.push(...new TextEncoder().encode(c));
      }
    }
    return new TextDecoder().decode(new Uint8Array(bytes));
  };
  for (const pair of rawQuery.split("&")) {
    if (pair === "" || pair.includes(";")) continue;
    const eq = pair.indexOf("=");
    const key = unescape(eq < 0 ? pair : pair.slice(0, eq));
    const value = unescape(eq < 0 ? "" : pair.slice(eq + 1));
    if (key === undefined || value === undefined) continue;
    out.set(key, [...(out.get(key) ?? []), value]);
  }
  return out;
}

/**
 * Decodes a query (upstream newNodeLogQuery): the query, undefined when it asks for nothing
 * (so `/logs/` serves files), or the errors (answered with 400).
 */
export function parseNodeLogQuery(
  values: Map<string, string[]>,
): NodeLogQuery | undefined | { errors: string[] } {
  const errors: string[] = [];
  const q: NodeLogQuery = { services: [], files: [] };
  const queries = values.get("query");
  for (const v of queries ?? []) {
    if (/[/\\]/.test(v)) q.files.push(v);
    else if (v.trim() !== "") q.services.push(v);
  }
  if (queries !== undefined && q.files.length === 0 && q.services.length === 0) {
    errors.push(fieldError("query", "Invalid value", goJSONStrings(queries), "may not be empty"));
  }
  const get = (key: string) => values.get(key)?.[0] ?? "";
  for (const key of ["sinceTime", "untilTime"] as const) {
    const raw = get(key);
    if (raw === "") continue;
    const t = parseRFC3339(raw);
    if (t === undefined) {
      errors.push(fieldError(key, "Invalid value", goQuote(raw), "invalid time format"));
    } else q[key] = t;
  }
  for (const key of ["boot", "tailLines"] as const) {
    const raw = get(key);
    if (raw === "") continue;
    const n = goAtoi(raw);
    if (typeof n === "string") errors.push(fieldError(key, "Invalid value", goQuote(raw), n));
    else q[key] = n;
  }
  const pattern = get("pattern");
  if (pattern !== "") q.pattern = pattern;
  if (errors.length > 0) return { errors };
  if (q.services.length === 0 && q.files.length === 0 && !hasOptions(q)) return undefined;
  return q;
}

/** Whether any option is set (upstream `n.options != (options{})`). */
export function hasOptions(q: NodeLogQueryOptions): boolean {
  return q.sinceTime !== undefined || q.untilTime !== undefined || q.tailLines !== undefined ||
    q.boot !== undefined || (q.pattern ?? "") !== "";
}

/** Upstream validateServices: safe names, and at most {@link MAX_SERVICES}. */
export function validateServices(services: readonly string[]): string[] {
  const errors: string[] = [];
  for (const s of services) {
    let why: string | undefined;
    if (new TextEncoder().encode(s).length > MAX_SERVICE_LENGTH) {
      why = `length must be less than ${MAX_SERVICE_LENGTH}`;
    } else if (UNSAFE_SERVICE_CHARACTERS.test(s)) {
      why = "input contains unsupported characters";
    }
    if (why) errors.push(fieldError("query", "Invalid value", goQuote(s), why));
  }
  if (services.length > MAX_SERVICES) {
    errors.push(
      fieldError(
        "query",
        "Too many",
        String(services.length),
        `must have at most ${MAX_SERVICES} items`,
      ),
    );
  }
  return errors;
}

/**
 * Validates a decoded query (upstream nodeLogQuery.validate); the errors are answered with 406.
 * A single file must exist under `logDir` as `os.Root` resolves it (no leading `/`, no way out).
 */
export async function validateNodeLogQuery(
  q: NodeLogQuery,
  logDir: string = NODE_LOG_DIR,
): Promise<string[]> {
  const errors = validateServices(q.services);
  const files = goJSONStrings(q.files);
  if (q.files.length === 0 && q.services.length === 0) {
    errors.push(fieldError("query", "Required value", undefined, "cannot be empty with options"));
  } else if (q.files.length > 0 && q.services.length > 0) {
    errors.push(fieldError(
      "query",
      "Invalid value",
      goQuote(`${goList(q.files)}, ${goList(q.services)}`),
      "cannot specify a file and service",
    ));
  } else if (q.files.length > 1) {
    errors.push(fieldError("query", "Invalid value", files, "cannot specify more than one file"));
  } else if (q.files.length === 1 && hasOptions(q)) {
    errors.push(fieldError("query", "Invalid value", files, "cannot specify file with options"));
  } else if (q.files.length === 1) {
    try {
      await resolveInRoot(logDir, q.files[0]!, "statat");
    } catch (e) {
      if (!(e instanceof RootPathError)) throw e;
      errors.push(fieldError("query", "Invalid value", files, e.message));
    }
  }
  if (q.sinceTime && q.untilTime && q.sinceTime.instant > q.untilTime.instant) {
    errors.push(
      fieldError("untilTime", "Invalid value", timeJSON(q.untilTime), "must be after `sinceTime`"),
    );
  }
  if (q.boot !== undefined && q.boot > 0) {
    errors.push(fieldError("boot", "Invalid value", String(q.boot), "must be less than 1"));
  }
  if (q.tailLines !== undefined && (q.tailLines < 0 || q.tailLines > MAX_TAIL_LINES)) {
    errors.push(fieldError(
      "tailLines",
      "Invalid value",
      String(q.tailLines),
      `must be between 0 and ${MAX_TAIL_LINES}, inclusive`,
    ));
  }
  const bad = goRegexpSyntaxError(q.pattern ?? "");
  if (bad !== undefined) {
    errors.push(fieldError("pattern", "Invalid value", goQuote(q.pattern ?? ""), bad));
  }
  return errors;
}

/** journalctl's arguments for a query of `services` (upstream getLoggingCmd, Linux). */
export function journalctlArgs(q: NodeLogQueryOptions, services: readonly string[]): string[] {
  const args = ["--utc", "--no-pager", "--output=short-precise"];
  if (q.sinceTime) args.push(`--since=${journalDate(q.sinceTime)}`);
  if (q.untilTime) args.push(`--until=${journalDate(q.untilTime)}`);
  if (q.tailLines !== undefined) args.push("--pager-end", `--lines=${q.tailLines}`);
  for (const s of services) if (s !== "") args.push(`--unit=${s}`);
  if ((q.pattern ?? "") !== "") args.push(`--grep=${q.pattern}`);
  if (q.boot !== undefined) args.push("--boot", String(q.boot));
  return args;
}
