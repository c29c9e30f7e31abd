/**
 * @module
 * The value encoders behind klog.ts, kept apart so the logger reads as its API: Go's `%q`
 * quoting (strconv.Quote), klog's text key/value serialization (k8s.io/klog/v2
 * `internal/serialize/keyvalues.go`), Go `encoding/json` for nested values, zap's own escaping
 * and number formatting for top-level JSON fields (component-base `logs/json`), and the Go time
 * formats those use. Private to klog.ts: nothing here reads the clock or writes output.
 */

import { goJsonString } from "../util/go_json.ts";

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

/** Key/value pairs in the order they are printed. */
export type Pairs = readonly (readonly [string, unknown])[];

// ---- Text values (klog internal/serialize) ---------------------------------------------------

/** Formats pairs as FormatKVs does: a repeated key keeps its last value, in that value's place. */
export function textPairs(lists: readonly Pairs[]): string {
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
export function goTimeString(d: Date): string {
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
export function goQuote(s: string): string {
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
      return goJsonString(v, escapeHTML);
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
    if (o instanceof Date) return goJsonString(goRFC3339(o), escapeHTML);
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
      .map(([k, x]) => `${goJsonString(k, escapeHTML)}:${goJSON(x, escapeHTML, seen)}`);
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

/** zap's own string escaping (msg, keys, string fields): only \n \r \t have short forms. */
export function zapString(s: string): string {
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
export function goFloatF(n: number): string {
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
export function jsonPairs(pairs: Pairs): string {
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
