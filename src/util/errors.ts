/**
 * @module
 * The text of a caught value, as Go's `err.Error()` gives it: an Error's message, anything else
 * as a string. Upstream has no counterpart: Go's errors are values with their text.
 */

/** `e.message` of an Error, else `String(e)`. */
export function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
