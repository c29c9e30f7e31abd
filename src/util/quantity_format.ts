/**
 * @module
 * Go's `resource.Quantity.String()`, for what quotes quantities exactly as upstream prints them:
 * the eviction manager's messages (thresholds, usage, requests and limits: "100Mi",
 * "47166528Ki", "1500M", "4k") and the pod status' pod-level resources (a sum prints in its first
 * addend's format). A quantity keeps the format it was parsed in (binary suffix, decimal suffix
 * or exponent) and prints in canonical form: the largest power of 1024 that divides a binary
 * amount exactly, else decimal with an exponent that is a multiple of 3. Corresponds to upstream
 * `k8s.io/apimachinery/pkg/api/resource` (`Quantity.CanonicalizeBytes`, `ParseQuantity`).
 */

import { type Dec, parseDec } from "../qos/resource_helpers.ts";

/** How a quantity prints (upstream `resource.Format`). */
export type QuantityFormat = "BinarySI" | "DecimalSI" | "DecimalExponent";

/** A quantity with the format it prints in. */
export interface Quantity {
  readonly value: Dec;
  readonly format: QuantityFormat;
}

const BINARY = /(Ki|Mi|Gi|Ti|Pi|Ei)$/;
const EXPONENT = /[eE][+-]?[0-9]+$/;
const NANO_SCALE = 9;

/** Parses a quantity as upstream ParseQuantity does: values finer than 1n round up. */
export function parseQuantityFormatted(input: string): Quantity {
  let value = parseDec(input);
  let format: QuantityFormat = BINARY.test(input)
    ? "BinarySI"
    : EXPONENT.test(input)
    ? "DecimalExponent"
    : "DecimalSI";
  if (value.s > NANO_SCALE) value = roundUpToScale(value, NANO_SCALE);
  const abs = value.n < 0n ? -value.n : value.n;
  if (format === "BinarySI" && abs !== 0n && abs < 10n ** BigInt(Math.max(value.s, 0))) {
    format = "DecimalSI"; // Below one: a binary suffix cannot show it without rounding.
  }
  return { value, format };
}

/** A whole amount (bytes, inodes, processes) in the given format. */
export function intQuantity(n: number | bigint, format: QuantityFormat): Quantity {
  return { value: { n: BigInt(n), s: 0 }, format };
}

/** The zero quantity of the given format; prints "0". */
export function zeroQuantity(format: QuantityFormat): Quantity {
  return intQuantity(0, format);
}

/** Go's Quantity.String(). */
export function formatQuantity(q: Quantity): string {
  const { value } = q;
  if (value.n === 0n) return "0";
  let format = q.format;
  let whole: bigint | undefined;
  if (format === "BinarySI") {
    const exact = exactInteger(value);
    const small = exact !== undefined && exact > -1024n && exact < 1024n;
    if (exact === undefined || small) format = "DecimalSI";
    else whole = exact;
  }
  if (format === "BinarySI" && whole !== undefined) {
    let amount = whole;
    let exp = 0;
    while (abs(amount) >= 1024n && amount % 1024n === 0n) {
      amount /= 1024n;
      exp++;
    }
    return `${amount}${["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][exp] ?? `*2^${exp * 10}`}`;
  }
  let mantissa = value.n;
  let exp = -value.s;
  while (abs(mantissa) >= 10n && mantissa % 10n === 0n) {
    mantissa /= 10n;
    exp++;
  }
  while (((exp % 3) + 3) % 3 !== 0) {
    mantissa *= 10n;
    exp--;
  }
  return `${mantissa}${suffix(exp, format)}`;
}

/** The canonical text of a quantity string as written in a spec ("0.5Gi" prints "512Mi"). */
export function canonicalQuantity(input: string): string {
  return formatQuantity(parseQuantityFormatted(input));
}

const DECIMAL_SUFFIX: Readonly<Record<number, string>> = {
  [-9]: "n",
  [-6]: "u",
  [-3]: "m",
  0: "",
  3: "k",
  6: "M",
  9: "G",
  12: "T",
  15: "P",
  18: "E",
};

function suffix(exp: number, format: QuantityFormat): string {
  if (exp === 0) return "";
  if (format === "DecimalSI") {
    const s = DECIMAL_SUFFIX[exp];
    if (s !== undefined) return s;
  }
  return `e${exp}`;
}

function abs(n: bigint): bigint {
  return n < 0n ? -n : n;
}

function exactInteger(d: Dec): bigint | undefined {
  if (d.s <= 0) return d.n * 10n ** BigInt(-d.s);
  const div = 10n ** BigInt(d.s);
  return d.n % div === 0n ? d.n / div : undefined;
}

// inf.RoundUp: away from zero.
function roundUpToScale(d: Dec, scale: number): Dec {
  const div = 10n ** BigInt(d.s - scale);
  const q = d.n / div;
  const rem = d.n % div;
  return { n: rem === 0n ? q : q + (d.n < 0n ? -1n : 1n), s: scale };
}
