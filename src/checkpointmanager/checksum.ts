/**
 * @module
 * The checksum upstream stores in its checkpoints: FNV-1a 32 over `dump.ForHash(obj)`, which is
 * go-spew's `%#v` with k8s.io/utils/dump's fixed configuration (SortKeys, SpewKeys,
 * DisableMethods, DisablePointerAddresses, DisableCapacities). {@link dumpForHash} prints a
 * {@link GoValue} the way that formatter does, quirks included: values inside slices and maps
 * lose their type prefix, a non-nil pointer there prints `<*>`, strings are printed raw, and a
 * nil pointer inside a map or slice leaves spew's "ignore the next type" flag set, so the struct
 * field printed next loses its type as well. Corresponds to upstream
 * `pkg/kubelet/checkpointmanager/checksum`, `pkg/util/hash` (DeepHashObject), `k8s.io/utils/dump`
 * and `github.com/davecgh/go-spew/spew/format.go`.
 */

import { fnv1a32 } from "../util/fnv.ts";
import { CorruptCheckpointError } from "./errors.ts";
import type { GoValue } from "./go_value.ts";

const utf8 = new TextEncoder();

/** What `dump.ForHash(value)` returns for the Go value `value`. */
export function dumpForHash(value: GoValue): string {
  const out: string[] = [];
  new Formatter(out).format(value);
  return out.join("");
}

/** upstream checksum.New: FNV-1a 32 of {@link dumpForHash}. */
export function goHashChecksum(value: GoValue): number {
  return fnv1a32(utf8.encode(dumpForHash(value)));
}

/**
 * upstream Checksum.Verify: throws {@link CorruptCheckpointError} unless `expected` (the file's)
 * is the checksum of `value`.
 */
export function verifyChecksum(expected: bigint | number, value: GoValue, file?: string): void {
  const actual = goHashChecksum(value);
  if (BigInt(expected) !== BigInt(actual)) {
    throw new CorruptCheckpointError({ expected: BigInt(expected), actual: BigInt(actual), file });
  }
}

/** go-spew's formatState for `%#v`, without pointer addresses, methods or cycles. */
class Formatter {
  #ignoreNextType = false;

  constructor(private readonly out: string[]) {}

  format(v: GoValue): void {
    if (v.kind === "pointer") return this.#pointer(v);
    if (!this.#ignoreNextType) this.out.push(`(${v.type})`);
    this.#ignoreNextType = false;
    switch (v.kind) {
      case "string":
        this.out.push(v.value);
        return;
      case "int":
        this.out.push(v.value.toString());
        return;
      case "bool":
        this.out.push(v.value ? "true" : "false");
        return;
      case "slice":
        if (v.items === null) {
          this.out.push("<nil>");
          return;
        }
        this.out.push("[");
        v.items.forEach((item, i) => {
          if (i > 0) this.out.push(" ");
          this.#ignoreNextType = true;
          this.format(item);
        });
        this.out.push("]");
        return;
      case "map": {
        if (v.entries === null) {
          this.out.push("<nil>");
          return;
        }
        this.out.push("map[");
        sortedEntries(v.entries).forEach(([key, value], i) => {
          if (i > 0) this.out.push(" ");
          this.#ignoreNextType = true;
          this.format(key);
          this.out.push(":");
          this.#ignoreNextType = true;
          this.format(value);
        });
        this.out.push("]");
        return;
      }
      case "struct":
        this.out.push("{");
        v.fields.forEach((f, i) => {
          if (i > 0) this.out.push(" ");
          this.out.push(`${f.name}:`);
          this.format(f.value);
        });
        this.out.push("}");
        return;
    }
  }

  /** spew's formatPtr. */
  #pointer(v: GoValue & { kind: "pointer" }): void {
    if (v.target === null && this.#ignoreNextType) {
      // Returns without clearing the flag, as spew does.
      this.out.push("<nil>");
      return;
    }
    let indirects = 0;
    let ve: GoValue = v;
    let nil = false;
    while (ve.kind === "pointer") {
      if (ve.target === null) {
        nil = true;
        break;
      }
      indirects++;
      ve = ve.target;
    }
    if (!this.#ignoreNextType) this.out.push(`(${"*".repeat(indirects)}${ve.type})`);
    else {
      // spew counts the stars of a nil pointer's own type here.
      if (nil) indirects += [...ve.type].filter((c) => c === "*").length;
      this.out.push(`<${"*".repeat(indirects)}>`);
    }
    if (nil) {
      this.out.push("<nil>");
      return;
    }
    this.#ignoreNextType = true;
    this.format(ve);
  }
}

/** Map entries in spew's SortKeys order: numbers by value, strings by their bytes. */
function sortedEntries(
  entries: readonly (readonly [GoValue, GoValue])[],
): (readonly [GoValue, GoValue])[] {
  const first = entries[0]?.[0];
  if (first === undefined) return [];
  switch (first.kind) {
    case "int":
      return [...entries].sort(([a], [b]) => {
        const x = (a as typeof first).value, y = (b as typeof first).value;
        return x < y ? -1 : x > y ? 1 : 0;
      });
    case "bool":
      return [...entries].sort(([a], [b]) =>
        Number((a as typeof first).value) - Number((b as typeof first).value)
      );
    case "string":
      return [...entries].sort(([a], [b]) =>
        compareUtf8((a as typeof first).value, (b as typeof first).value)
      );
    default:
      throw new TypeError(`map keys of kind ${first.kind} are not modelled (spew sorts by %#v)`);
  }
}

/** Go's string order: bytewise over UTF-8, which is code point order, not UTF-16's. */
export function compareUtf8(a: string, b: string): number {
  const x = utf8.encode(a), y = utf8.encode(b);
  const n = Math.min(x.length, y.length);
  for (let i = 0; i < n; i++) if (x[i] !== y[i]) return x[i]! - y[i]!;
  return x.length - y.length;
}
