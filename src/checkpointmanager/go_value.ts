/**
 * @module
 * A small model of Go values — strings, integers, booleans, slices, maps, structs and pointers,
 * each with its Go type as `reflect.Type.String()` prints it (`checkpoint.DevicesPerNUMA`,
 * `[]uint8`, `map[v1.ResourceName]*state.MemoryTable`) — so that a checkpoint can be hashed as
 * upstream's spew does ({@link ./checksum.ts}) and written as its encoding/json does
 * ({@link ./checkpoint_json.ts}) from one description. Nil and empty are different values here,
 * as they are in Go: spew prints `<nil>` for one and `[]` for the other, JSON `null` and `[]`.
 * Interfaces, floats, arrays and channels are not modelled: no checkpoint holds one.
 */

/** A Go string (or a named string type such as `v1.ResourceName`). */
export interface GoString {
  readonly kind: "string";
  readonly type: string;
  readonly value: string;
}

/** A Go integer of any width and sign, exact. */
export interface GoInt {
  readonly kind: "int";
  readonly type: string;
  readonly value: bigint;
}

/** A Go bool. */
export interface GoBool {
  readonly kind: "bool";
  readonly type: string;
  readonly value: boolean;
}

/** A Go slice; `items` null is the nil slice. */
export interface GoSlice {
  readonly kind: "slice";
  readonly type: string;
  readonly items: readonly GoValue[] | null;
}

/** A Go map; `entries` null is the nil map. Order does not matter: spew and JSON sort keys. */
export interface GoMap {
  readonly kind: "map";
  readonly type: string;
  readonly entries: readonly (readonly [GoValue, GoValue])[] | null;
}

/** One struct field: its Go name, its value, and its encoding/json tag if it has one. */
export interface GoField {
  readonly name: string;
  readonly value: GoValue;
  /** The `json:"..."` tag, such as `policyName` or `entries,omitempty`. */
  readonly json?: string;
}

/** A Go struct, fields in declaration order (unexported ones included, as spew prints them). */
export interface GoStruct {
  readonly kind: "struct";
  readonly type: string;
  readonly fields: readonly GoField[];
}

/** A Go pointer; `target` null is the nil pointer. `type` is the pointer's, `*T`. */
export interface GoPointer {
  readonly kind: "pointer";
  readonly type: string;
  readonly target: GoValue | null;
}

/** Any Go value the checkpoints hold. */
export type GoValue = GoString | GoInt | GoBool | GoSlice | GoMap | GoStruct | GoPointer;

const INTEGER = /^[+-]?\d+$/;

/** Constructors for {@link GoValue}s; every `type` is the full Go type string of the value. */
export const go = {
  /** A string; `type` defaults to `string`. */
  string(value: string, type = "string"): GoString {
    return { kind: "string", type, value };
  },
  /** An integer; `type` defaults to `int`. A string must be decimal digits (JSON's source). */
  int(value: number | bigint | string, type = "int"): GoInt {
    if (typeof value === "number" && !Number.isSafeInteger(value)) {
      throw new RangeError(`go.int: ${value} is not an exact integer`);
    }
    if (typeof value === "string" && !INTEGER.test(value)) {
      throw new RangeError(`go.int: '${value}' is not a decimal integer`);
    }
    return { kind: "int", type, value: BigInt(value) };
  },
  /** An int64. */
  int64(value: number | bigint | string): GoInt {
    return go.int(value, "int64");
  },
  /** A uint64. */
  uint64(value: number | bigint | string): GoInt {
    return go.int(value, "uint64");
  },
  /** A bool; `type` defaults to `bool`. */
  bool(value: boolean, type = "bool"): GoBool {
    return { kind: "bool", type, value };
  },
  /** A `[]byte` (spew and reflect call it `[]uint8`); null is the nil slice. */
  bytes(value: Uint8Array | null): GoSlice {
    return {
      kind: "slice",
      type: "[]uint8",
      items: value === null ? null : [...value].map((b) => go.int(b, "uint8")),
    };
  },
  /** A slice of type `type` (`[]string`, or a named one); null is the nil slice. */
  slice(type: string, items: readonly GoValue[] | null): GoSlice {
    return { kind: "slice", type, items };
  },
  /** A `[]string`; null is the nil slice. */
  strings(items: readonly string[] | null, type = "[]string"): GoSlice {
    return go.slice(type, items === null ? null : items.map((s) => go.string(s)));
  },
  /** A map of type `type` (`map[string]string`, or a named one); null is the nil map. */
  map(type: string, entries: Iterable<readonly [GoValue, GoValue]> | null): GoMap {
    return { kind: "map", type, entries: entries === null ? null : [...entries] };
  },
  /** A struct of type `type` (`state.Block`, package name and type name). */
  struct(type: string, fields: readonly GoField[]): GoStruct {
    return { kind: "struct", type, fields };
  },
  /** A pointer to a value of type `elemType`; null is the nil pointer. */
  pointer(elemType: string, target: GoValue | null): GoPointer {
    return { kind: "pointer", type: `*${elemType}`, target };
  },
};
