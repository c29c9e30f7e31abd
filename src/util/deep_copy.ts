/**
 * @module
 * Deep copies of API objects (upstream's generated DeepCopy methods). Objects that came from
 * JSON are plain objects, arrays and primitives: those are copied field by field, several times
 * quicker than `structuredClone`, which serializes and deserializes (src/testing/deep_copy_bench.ts).
 * Anything else inside (a Date, a Map, a class instance) goes through `structuredClone`, so the
 * copy is the one `structuredClone` would make.
 */

/** A deep copy of `value`, equal to `structuredClone(value)` for JSON-shaped data. */
export function deepCopy<T>(value: T): T {
  return copy(value) as T;
}

function copy(value: unknown): unknown {
  if (typeof value !== "object" || value === null) return value;
  if (Array.isArray(value)) {
    const out = new Array(value.length);
    for (let i = 0; i < value.length; i++) out[i] = copy(value[i]);
    return out;
  }
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return structuredClone(value);
  const out: Record<string, unknown> = {};
  for (const key in value) {
    if (Object.hasOwn(value, key)) out[key] = copy((value as Record<string, unknown>)[key]);
  }
  return out;
}
