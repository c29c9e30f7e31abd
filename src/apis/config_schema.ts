/**
 * @module
 * A small typed schema for versioned configuration files, standing in for what the upstream
 * kubelet gets from Go struct tags and `scheme.Default`: each field declares its Go type, its
 * upstream default, the command-line flag that may also set it, and one line of documentation.
 * The schema decodes a YAML/JSON node strictly (unknown fields, duplicate keys, wrong types and
 * bad syntax are errors that carry the field path and the line) or, as upstream's lenient
 * decoder, collecting unknown fields and duplicate keys instead (they are dropped, and the last of
 * duplicate keys wins), applies defaults as upstream's SetDefaults does, and infers the TypeScript type of the decoded object, so the field table is written once.
 */

import { isMap, isScalar, isSeq, type LineCounter, type Node, type Pair } from "yaml";
import { DurationSyntaxError, formatDuration, parseDuration } from "../util/duration.ts";
import { isQuantity } from "../util/quantity.ts";

/** How a flag's text becomes a field value, where it is not the field type's plain form. */
export type FlagFormat =
  /** `k1=v1,k2=v2` into map[string]string (or map[string]bool with ParseBool values). */
  | "map"
  /** `k1<v1,k2<v2` into map[string]string (upstream's LangleSeparatedMapStringString). */
  | "langle-map"
  /** `k:v1,k:v2` into map[string][]string (upstream's ColonSeparatedMultimapStringString). */
  | "map-slice"
  /** One `k=v` pair per use, values may hold commas (upstream's MapStringStringNoSplit). */
  | "map-nosplit"
  /** `0:memory=1Gi,hugepages-1M=2Gi` per use, into []MemoryReservation (ReservedMemoryVar). */
  | "reserved-memory"
  /** `key=value:Effect,...` into []Taint (upstream's RegisterWithTaintsVar). */
  | "taints"
  /** A comma-separated list (upstream's StringSliceVar). */
  | "list"
  /** An IP address (upstream's IPVar). */
  | "ip";

/** The shape of a field's value. */
export type Spec =
  | { readonly type: "string"; readonly enum?: readonly string[] }
  | { readonly type: "bool" }
  | { readonly type: "int"; readonly min: number; readonly max: number }
  | { readonly type: "float" }
  | { readonly type: "duration" }
  | { readonly type: "quantity" }
  | { readonly type: "list"; readonly of: AnyField }
  | { readonly type: "map"; readonly of: AnyField }
  | { readonly type: "object"; readonly fields: Readonly<Record<string, AnyField>> }
  | { readonly type: "raw" };

/** What every field declares besides its shape. */
export interface FieldOptions<D> {
  /** The Go type as upstream declares it, e.g. `*int32`, `metav1.Duration`, `[]string`. */
  readonly go: string;
  /** One line of documentation, from upstream's comment. */
  readonly doc: string;
  /** Upstream's default. Durations are given in Go syntax ("1m0s"). */
  readonly default?: D;
  /** The upstream command-line flag that sets this field, if any. */
  readonly flag?: string;
  /** How the flag's text is read, where it is not the plain form of the type. */
  readonly flagFormat?: FlagFormat;
}

/** A field of type `T`; `D` is whether it always has a value after defaulting. */
export class Field<T, D extends boolean> {
  declare readonly __type?: T;
  declare readonly __hasDefault?: D;
  constructor(
    readonly spec: Spec,
    readonly options: FieldOptions<unknown>,
    /** The default as a decoded value (durations in milliseconds), or undefined. */
    readonly defaultValue: unknown,
  ) {}

  /** True when upstream applies the default to a zero value too (non-pointer Go fields). */
  get zeroIsUnset(): boolean {
    const go = this.options.go;
    return !go.startsWith("*") && !go.startsWith("[]") && !go.startsWith("map[");
  }
}

// deno-lint-ignore no-explicit-any
export type AnyField = Field<any, boolean>;

/** The value type a field decodes to. */
export type Infer<F> = F extends Field<infer T, boolean> ? T : never;

type Simplify<T> = { -readonly [K in keyof T]: T[K] } & unknown;

/** The decoded type of an object whose fields are `F`. */
export type ObjectOf<F extends Readonly<Record<string, AnyField>>> = Simplify<
  & { -readonly [K in keyof F as F[K] extends Field<unknown, true> ? K : never]: Infer<F[K]> }
  & { -readonly [K in keyof F as F[K] extends Field<unknown, true> ? never : K]?: Infer<F[K]> }
>;

type HasDefault<O> = O extends { default: unknown } ? true : false;

function field<T, O extends FieldOptions<unknown>>(spec: Spec, o: O, dflt?: unknown) {
  return new Field<T, HasDefault<O>>(spec, o, dflt !== undefined ? dflt : o.default);
}

/** Field builders, one per Go type family. */
export const f = {
  string<O extends FieldOptions<string> & { enum?: readonly string[] }>(o: O) {
    return field<string, O>({ type: "string", enum: o.enum }, o);
  },
  bool<O extends FieldOptions<boolean>>(o: O) {
    return field<boolean, O>({ type: "bool" }, o);
  },
  int32<O extends FieldOptions<number>>(o: O) {
    return field<number, O>({ type: "int", min: -(2 ** 31), max: 2 ** 31 - 1 }, o);
  },
  uint32<O extends FieldOptions<number>>(o: O) {
    return field<number, O>({ type: "int", min: 0, max: 2 ** 32 - 1 }, o);
  },
  int64<O extends FieldOptions<number>>(o: O) {
    return field<number, O>({
      type: "int",
      min: Number.MIN_SAFE_INTEGER,
      max: Number.MAX_SAFE_INTEGER,
    }, o);
  },
  float<O extends FieldOptions<number>>(o: O) {
    return field<number, O>({ type: "float" }, o);
  },
  /** A `metav1.Duration`; decoded to milliseconds. */
  duration<O extends FieldOptions<string>>(o: O) {
    const d = o.default === undefined ? undefined : parseDuration(o.default);
    return field<number, O>({ type: "duration" }, o, d);
  },
  /** A `resource.Quantity`; kept as its text, checked for syntax. */
  quantity<O extends FieldOptions<string>>(o: O) {
    return field<string, O>({ type: "quantity" }, o);
  },
  list<E extends AnyField, O extends FieldOptions<readonly Infer<E>[]>>(of: E, o: O) {
    return field<Infer<E>[], O>({ type: "list", of }, o);
  },
  map<E extends AnyField, O extends FieldOptions<Readonly<Record<string, Infer<E>>>>>(of: E, o: O) {
    return field<Record<string, Infer<E>>, O>({ type: "map", of }, o);
  },
  /** A nested struct: always present after defaulting, like a Go value-type struct. */
  object<F extends Readonly<Record<string, AnyField>>>(fields: F, o: FieldOptions<never>) {
    return new Field<ObjectOf<F>, true>({ type: "object", fields }, o, undefined);
  },
  /** A struct behind a pointer: absent unless given. */
  optionalObject<F extends Readonly<Record<string, AnyField>>>(fields: F, o: FieldOptions<never>) {
    return new Field<ObjectOf<F>, false>({ type: "object", fields }, o, undefined);
  },
  /** Passed through as decoded YAML, for fields whose shape upstream leaves open. */
  raw<O extends FieldOptions<unknown>>(o: O) {
    return field<unknown, O>({ type: "raw" }, o);
  },
};

/** Where a value came from, for error messages. */
export interface Source {
  readonly file: string;
  readonly lines?: LineCounter;
  /**
   * Where strict-only problems go (unknown fields, keys given twice): with it, decoding records
   * them and goes on as upstream's lenient decoder (the unknown field is dropped, the last of
   * duplicate keys wins); without it they are thrown.
   */
  readonly strictErrors?: StrictDecodingError[];
}

/** A configuration value that cannot be used; names the file, line, field path and value. */
export class ConfigError extends Error {
  override name = "ConfigError";
  constructor(
    readonly file: string,
    readonly line: number | undefined,
    readonly path: string,
    readonly problem: string,
  ) {
    const where = line === undefined ? file : `${file}:${line}`;
    super(path === "" ? `${where}: ${problem}` : `${where}: field '${path}' ${problem}`);
  }
}

/** A problem only strict decoding has: an unknown field, or a key given twice. */
export class StrictDecodingError extends ConfigError {
  override name = "StrictDecodingError";
  constructor(
    file: string,
    line: number | undefined,
    path: string,
    /** Which of the two it is. */
    readonly kind: "unknown field" | "duplicate key",
  ) {
    super(
      file,
      line,
      path,
      kind === "unknown field"
        ? "is not a known field (strict decoding: unknown field)"
        : "is given more than once (strict decoding: key already set in map)",
    );
  }
}

function lineOf(node: Node | Pair | null | undefined, src: Source): number | undefined {
  const range = (node as { range?: [number, number, number] } | null | undefined)?.range;
  if (!range || !src.lines) return undefined;
  return src.lines.linePos(range[0]).line;
}

function show(value: unknown): string {
  if (typeof value === "string") return `'${value}'`;
  return JSON.stringify(value) ?? String(value);
}

function join(path: string, key: string | number): string {
  if (typeof key === "number") return `${path}[${key}]`;
  return path === "" ? key : `${path}.${key}`;
}

/** Records a strict-only problem in `src.strictErrors`, or throws it when there is none. */
function strictProblem(src: Source, error: StrictDecodingError): void {
  if (!src.strictErrors) throw error;
  src.strictErrors.push(error);
}

/** Checks that a key is not given twice in one mapping (sigs.k8s.io/yaml's YAMLToJSONStrict). */
function checkDuplicate(
  seen: Set<string>,
  key: string,
  keyNode: unknown,
  path: string,
  src: Source,
): void {
  if (!seen.has(key)) return void seen.add(key);
  strictProblem(
    src,
    new StrictDecodingError(
      src.file,
      lineOf(keyNode as Node, src),
      join(path, key),
      "duplicate key",
    ),
  );
}

/**
 * Decodes a parsed YAML node against a field, without defaults: wrong types are errors; unknown
 * keys and keys given twice are errors too, unless `src.strictErrors` collects them (lenient
 * decoding). `null` counts as absent and returns undefined.
 */
export function decode(fld: AnyField, node: unknown, path: string, src: Source): unknown {
  if (node === null || node === undefined) return undefined;
  const spec = fld.spec;
  const where = node as Node;
  const fail = (problem: string): never => {
    throw new ConfigError(src.file, lineOf(where, src), path, problem);
  };
  if (isScalar(node) && node.value === null) return undefined;
  switch (spec.type) {
    case "object": {
      if (!isMap(node)) {
        return fail(`must be an object (${fld.options.go}): current value is ${describe(node)}`);
      }
      const out: Record<string, unknown> = {};
      const seen = new Set<string>();
      for (const pair of node.items) {
        const key = isScalar(pair.key) ? pair.key.value : pair.key;
        if (typeof key !== "string") {
          throw new ConfigError(
            src.file,
            lineOf(pair.key as Node, src),
            path,
            `has a key that is not a string: ${show(String(key))}`,
          );
        }
        checkDuplicate(seen, key, pair.key, path, src);
        const child = Object.hasOwn(spec.fields, key) ? spec.fields[key] : undefined;
        if (!child) {
          strictProblem(
            src,
            new StrictDecodingError(
              src.file,
              lineOf(pair.key as Node, src),
              join(path, key),
              "unknown field",
            ),
          );
          continue;
        }
        // The last of keys given twice wins whole, as in the JSON the lenient decoder reads.
        delete out[key];
        const v = decode(child, pair.value, join(path, key), src);
        if (v !== undefined) out[key] = v;
      }
      return out;
    }
    case "map": {
      if (!isMap(node)) {
        return fail(`must be a map (${fld.options.go}): current value is ${describe(node)}`);
      }
      const out: Record<string, unknown> = {};
      const seen = new Set<string>();
      for (const pair of node.items) {
        const key = isScalar(pair.key) ? pair.key.value : pair.key;
        if (typeof key !== "string" && typeof key !== "number") {
          throw new ConfigError(
            src.file,
            lineOf(pair.key as Node, src),
            path,
            "has a key that is not a string",
          );
        }
        checkDuplicate(seen, String(key), pair.key, path, src);
        const v = decode(spec.of, pair.value, join(path, String(key)), src);
        out[String(key)] = v ?? zeroOf(spec.of);
      }
      return out;
    }
    case "list": {
      if (!isSeq(node)) {
        return fail(`must be a list (${fld.options.go}): current value is ${describe(node)}`);
      }
      return node.items.map((item, i) =>
        decode(spec.of, item, join(path, i), src) ?? zeroOf(spec.of)
      );
    }
    case "raw":
      return (node as { toJSON?: () => unknown }).toJSON?.() ??
        (isScalar(node) ? node.value : node);
  }
  if (!isScalar(node)) return fail(`must be ${expected(fld)}: current value is ${describe(node)}`);
  try {
    return decodeScalar(fld, node.value);
  } catch (e) {
    if (e instanceof ValueError) return fail(e.message);
    throw e;
  }
}

class ValueError extends Error {}

/** Checks one scalar (from a file, or a flag already turned into its JSON type). */
export function decodeScalar(fld: AnyField, value: unknown): unknown {
  const spec = fld.spec;
  const bad = (): never => {
    throw new ValueError(`must be ${expected(fld)}: current value is ${show(value)}`);
  };
  switch (spec.type) {
    case "string":
      if (typeof value !== "string") return bad();
      if (spec.enum && value !== "" && !spec.enum.includes(value)) {
        throw new ValueError(
          `must be one of ${spec.enum.map((v) => `'${v}'`).join(", ")}: current value is ${
            show(value)
          }`,
        );
      }
      return value;
    case "bool":
      return typeof value === "boolean" ? value : bad();
    case "int":
      if (typeof value !== "number" || !Number.isInteger(value)) return bad();
      if (value < spec.min || value > spec.max) {
        throw new ValueError(
          `must be ${expected(fld)} between ${spec.min} and ${spec.max}: current value is ${value}`,
        );
      }
      return value;
    case "float":
      return typeof value === "number" && Number.isFinite(value) ? value : bad();
    case "duration":
      // component-base's TimeOrMetaDuration also reads an integer count of nanoseconds, and
      // writes one when the value was defaulted: kubeadm's config.yaml has `flushFrequency: 0`.
      if (fld.options.go === "TimeOrMetaDuration" && Number.isSafeInteger(value)) {
        return (value as number) / 1e6;
      }
      if (typeof value !== "string") return bad();
      try {
        return parseDuration(value);
      } catch (e) {
        if (e instanceof DurationSyntaxError) return bad();
        throw e;
      }
    case "quantity":
      if (typeof value === "number") return String(value);
      return typeof value === "string" && isQuantity(value) ? value : bad();
    default:
      return bad();
  }
}

function expected(fld: AnyField): string {
  switch (fld.spec.type) {
    case "string":
      return "a string";
    case "bool":
      return "true or false";
    case "int":
      return `an integer (${fld.options.go.replace("*", "")})`;
    case "float":
      return "a number";
    case "duration":
      return "a duration such as 10s";
    case "quantity":
      return "a quantity such as 100Mi";
    default:
      return fld.options.go;
  }
}

function describe(node: unknown): string {
  if (isMap(node)) return "an object";
  if (isSeq(node)) return "a list";
  if (isScalar(node)) return show(node.value);
  return show(node);
}

function zeroOf(fld: AnyField): unknown {
  switch (fld.spec.type) {
    case "string":
    case "quantity":
      return "";
    case "bool":
      return false;
    case "int":
    case "float":
    case "duration":
      return 0;
    case "list":
      return [];
    case "map":
    case "object":
      return {};
    default:
      return null;
  }
}

function isZero(v: unknown): boolean {
  return v === undefined || v === "" || v === 0 || v === false;
}

/**
 * Applies defaults to a decoded object, as upstream's SetDefaults does: pointer, slice and map
 * fields get their default when absent; value fields also when they hold the zero value; value
 * structs are always present. Returns a new object; `decoded` is not changed.
 */
export function applyDefaults<F extends Readonly<Record<string, AnyField>>>(
  fields: F,
  decoded: Readonly<Record<string, unknown>> | undefined,
): ObjectOf<F> {
  const out: Record<string, unknown> = {};
  for (const [name, fld] of Object.entries(fields)) {
    const v = decoded?.[name];
    if (fld.spec.type === "object") {
      if (v !== undefined || fld.__hasDefault !== false && !fld.options.go.startsWith("*")) {
        out[name] = applyDefaults(fld.spec.fields, v as Record<string, unknown> | undefined);
      }
      continue;
    }
    if (fld.spec.type === "list" && fld.spec.of.spec.type === "object" && Array.isArray(v)) {
      const of = fld.spec.of.spec.fields;
      out[name] = v.map((item) => applyDefaults(of, item as Record<string, unknown>));
      continue;
    }
    const unset = v === undefined || (fld.zeroIsUnset && isZero(v));
    if (unset && fld.defaultValue !== undefined) out[name] = structuredClone(fld.defaultValue);
    else if (v !== undefined) out[name] = v;
  }
  return out as ObjectOf<F>;
}

/** Formats a field's default for documentation, the way upstream's docs write it. */
export function formatDefault(fld: AnyField): string {
  const d = fld.defaultValue;
  if (d === undefined) return "";
  if (fld.spec.type === "duration") return `"${formatDuration(d as number)}"`;
  return JSON.stringify(d);
}

/** One documented field, flattened with its dotted path. */
export interface FieldDoc {
  readonly path: string;
  readonly field: AnyField;
}

/** Lists every field of an object schema depth-first, for generated documentation. */
export function listFields(fields: Readonly<Record<string, AnyField>>, prefix = ""): FieldDoc[] {
  const out: FieldDoc[] = [];
  for (const [name, fld] of Object.entries(fields)) {
    const path = prefix === "" ? name : `${prefix}.${name}`;
    out.push({ path, field: fld });
    const spec = fld.spec;
    if (spec.type === "object") out.push(...listFields(spec.fields, path));
    if ((spec.type === "list" || spec.type === "map") && spec.of.spec.type === "object") {
      out.push(...listFields(spec.of.spec.fields, `${path}[]`));
    }
  }
  return out;
}

/**
 * The JSON form of a decoded value, as Go would print the versioned struct: durations back to
 * Go's text ("1m0s"), nested structs and lists of structs recursively, the rest unchanged;
 * absent fields are left out (omitempty).
 */
export function encodeValue(fld: AnyField, value: unknown): unknown {
  if (value === undefined || value === null) return undefined;
  const spec = fld.spec;
  switch (spec.type) {
    case "duration":
      return typeof value === "number" ? formatDuration(value) : value;
    case "object":
      return encodeObject(spec.fields, value as Record<string, unknown>);
    case "list":
      return (value as unknown[]).map((v) => encodeValue(spec.of, v));
    case "map":
      return Object.fromEntries(
        Object.entries(value as Record<string, unknown>).map((
          [k, v],
        ) => [k, encodeValue(spec.of, v)]),
      );
    default:
      return value;
  }
}

/** {@link encodeValue} over every field of an object. */
export function encodeObject(
  fields: Readonly<Record<string, AnyField>>,
  value: Readonly<Record<string, unknown>>,
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [name, fld] of Object.entries(fields)) {
    const v = encodeValue(fld, value[name]);
    if (v !== undefined) out[name] = v;
  }
  return out;
}
