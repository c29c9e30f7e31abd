/**
 * @module
 * Checkpoint files as Go's encoding/json writes and reads them. {@link goJsonMarshal} writes a
 * {@link GoValue} as json.Marshal does: struct fields in declaration order under their tags,
 * `omitempty` honoured, map keys sorted by their string form (so NUMA node `10` comes before
 * `2`), `[]byte` as padded base64, nil as `null`, `<`, `>`, `&` escaped. {@link GoJsonReader}
 * reads a file's JSON with json.Unmarshal's rules, so a file the Go kubelet accepts is accepted
 * here and the value hashed is the one Go would hash: field names match case-insensitively,
 * unknown fields are ignored, `null` leaves a string, number or struct as it was and makes a
 * map, slice or pointer nil, integers must be integer literals in range (kept exact, past
 * 2^53). A file that is not such JSON is a {@link MalformedCheckpointError} naming the file and
 * the field. Corresponds to the `MarshalCheckpoint`/`UnmarshalCheckpoint` pairs of upstream's
 * checkpoints, which are `json.Marshal`/`json.Unmarshal` of the checkpoint struct.
 */

import { goJsonString } from "../util/go_json.ts";
import { compareUtf8 } from "./checksum.ts";
import { MalformedCheckpointError } from "./errors.ts";
import type { GoInt, GoValue } from "./go_value.ts";

/** The bytes json.Marshal writes for `value`. */
export function goJsonMarshal(value: GoValue): string {
  switch (value.kind) {
    case "string":
      return goJsonString(value.value);
    case "int":
      return value.value.toString();
    case "bool":
      return value.value ? "true" : "false";
    case "pointer":
      return value.target === null ? "null" : goJsonMarshal(value.target);
    case "slice": {
      if (value.items === null) return "null";
      if (value.type === "[]uint8") {
        let bin = "";
        for (const b of value.items) bin += String.fromCharCode(Number((b as GoInt).value));
        return goJsonString(btoa(bin));
      }
      return `[${value.items.map(goJsonMarshal).join(",")}]`;
    }
    case "map": {
      if (value.entries === null) return "null";
      const pairs = value.entries.map(([k, v]) => {
        if (k.kind !== "string" && k.kind !== "int") {
          throw new TypeError(`json: unsupported map key of kind ${k.kind}`);
        }
        return [k.kind === "string" ? k.value : k.value.toString(), v] as const;
      });
      pairs.sort(([a], [b]) => compareUtf8(a, b));
      return `{${pairs.map(([k, v]) => `${goJsonString(k)}:${goJsonMarshal(v)}`).join(",")}}`;
    }
    case "struct": {
      const parts: string[] = [];
      for (const f of value.fields) {
        if (!/^\p{Lu}/u.test(f.name)) continue; // unexported
        const [tagName, ...opts] = (f.json ?? "").split(",");
        if (tagName === "-" && opts.length === 0) continue;
        if (opts.includes("omitempty") && isEmpty(f.value)) continue;
        parts.push(`${goJsonString(tagName || f.name)}:${goJsonMarshal(f.value)}`);
      }
      return `{${parts.join(",")}}`;
    }
  }
}

function isEmpty(v: GoValue): boolean {
  switch (v.kind) {
    case "string":
      return v.value === "";
    case "int":
      return v.value === 0n;
    case "bool":
      return !v.value;
    case "pointer":
      return v.target === null;
    case "slice":
      return (v.items?.length ?? 0) === 0;
    case "map":
      return (v.entries?.length ?? 0) === 0;
    case "struct":
      return false;
  }
}

/** A JSON number, as its source text, so that 64-bit integers stay exact. */
export class JsonNumber {
  constructor(readonly source: string) {}
}

/** Parsed JSON: objects are Maps (key order kept, a repeated key's last value wins). */
export type JsonValue =
  | null
  | boolean
  | string
  | JsonNumber
  | readonly JsonValue[]
  | ReadonlyMap<string, JsonValue>;

/** The range of an integer type: `int`/`int64` by default. */
export interface IntType {
  /** @default 64 */
  readonly bits?: number;
  /** @default false */
  readonly unsigned?: boolean;
}

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** Reads one checkpoint file's JSON as json.Unmarshal would; every error names the file. */
export class GoJsonReader {
  constructor(readonly file: string) {}

  /** The file's JSON; a syntax error is a {@link MalformedCheckpointError}. */
  parse(text: string): JsonValue {
    try {
      return JSON.parse(text, (_key, value: unknown, ctx?: { source?: string }) => {
        if (typeof value === "number") return new JsonNumber(ctx?.source ?? String(value));
        if (
          typeof value === "object" && value !== null && !Array.isArray(value) &&
          !(value instanceof JsonNumber) && !(value instanceof Map)
        ) {
          return new Map(Object.entries(value));
        }
        return value;
      }) as JsonValue;
    } catch (e) {
      throw this.error("", `not JSON: ${(e as Error).message}`);
    }
  }

  /** A MalformedCheckpointError about `path` in this file. */
  error(path: string, what: string): MalformedCheckpointError {
    return new MalformedCheckpointError(`${this.file}: ${path ? `${path}: ` : ""}${what}`);
  }

  /**
   * A struct's fields by Go name (exact JSON key first, then case-insensitive, the last key
   * for a field winning); undefined for null, which leaves a struct as it was.
   */
  struct(
    v: JsonValue,
    path: string,
    fields: readonly (readonly [goName: string, jsonName: string])[],
  ): Map<string, JsonValue> | undefined {
    if (v === null) return undefined;
    const obj = this.#object(v, path, "an object");
    const out = new Map<string, JsonValue>();
    for (const [key, value] of obj) {
      const field = fields.find(([, j]) => j === key) ??
        fields.find(([, j]) => j.toLowerCase() === key.toLowerCase());
      if (field) out.set(field[0], value);
    }
    return out;
  }

  /** A map's entries; null for JSON null (the nil map). */
  map(v: JsonValue, path: string): ReadonlyMap<string, JsonValue> | null {
    if (v === null) return null;
    return this.#object(v, path, "an object");
  }

  /** A slice's items; null for JSON null (the nil slice). */
  array(v: JsonValue, path: string): readonly JsonValue[] | null {
    if (v === null) return null;
    if (!Array.isArray(v)) throw this.error(path, `want an array, got ${describe(v)}`);
    return v as readonly JsonValue[];
  }

  /** A string; undefined for null (which leaves the field as it was). */
  string(v: JsonValue, path: string): string | undefined {
    if (v === null) return undefined;
    if (typeof v !== "string") throw this.error(path, `want a string, got ${describe(v)}`);
    return v;
  }

  /** An integer in range of `type`; undefined for null. */
  int(v: JsonValue, path: string, type: IntType = {}): bigint | undefined {
    if (v === null) return undefined;
    if (!(v instanceof JsonNumber)) throw this.error(path, `want a number, got ${describe(v)}`);
    const syntax = type.unsigned ? /^\d+$/ : /^-?\d+$/;
    if (!syntax.test(v.source)) {
      throw this.error(path, `want an integer, got ${v.source}`);
    }
    return this.#inRange(BigInt(v.source), v.source, path, type);
  }

  /** A map key of integer type (strconv.ParseInt's syntax: an optional sign, digits). */
  intKey(key: string, path: string, type: IntType = {}): bigint {
    const syntax = type.unsigned ? /^\d+$/ : /^[+-]?\d+$/;
    if (!syntax.test(key)) throw this.error(path, `want an integer key, got '${key}'`);
    return this.#inRange(BigInt(key), key, path, type);
  }

  /** A `[]byte` (padded standard base64, newlines ignored as Go does); null for JSON null. */
  bytes(v: JsonValue, path: string): Uint8Array | null {
    if (v === null) return null;
    if (typeof v !== "string") throw this.error(path, `want base64 bytes, got ${describe(v)}`);
    const s = v.replace(/[\r\n]/g, "");
    if (!BASE64.test(s)) throw this.error(path, "want standard base64 with padding");
    return Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
  }

  #object(v: JsonValue, path: string, want: string): ReadonlyMap<string, JsonValue> {
    if (!(v instanceof Map)) throw this.error(path, `want ${want}, got ${describe(v)}`);
    return v;
  }

  #inRange(n: bigint, source: string, path: string, type: IntType): bigint {
    const bits = BigInt(type.bits ?? 64);
    const min = type.unsigned ? 0n : -(2n ** (bits - 1n));
    const max = type.unsigned ? 2n ** bits - 1n : 2n ** (bits - 1n) - 1n;
    if (n < min || n > max) {
      throw this.error(path, `${source} overflows a ${type.unsigned ? "u" : ""}int${bits}`);
    }
    return n;
  }
}

/** The value as a safe JS number, or an error saying it is too large to hold exactly. */
export function safeNumber(reader: GoJsonReader, n: bigint, path: string): number {
  if (n > BigInt(Number.MAX_SAFE_INTEGER) || n < BigInt(Number.MIN_SAFE_INTEGER)) {
    throw reader.error(path, `${n} is beyond 2^53 and cannot be held exactly here`);
  }
  return Number(n);
}

/** A JSON path segment for a key: `.name` or `["odd key"]`. */
export function keyPath(path: string, key: string): string {
  return /^[A-Za-z_][\w-]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}

function describe(v: JsonValue): string {
  if (v === null) return "null";
  if (v instanceof JsonNumber) return `number ${v.source}`;
  if (Array.isArray(v)) return "an array";
  if (v instanceof Map) return "an object";
  return typeof v === "string" ? `string ${JSON.stringify(v)}` : String(v);
}
