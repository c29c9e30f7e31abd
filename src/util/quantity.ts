/**
 * @module
 * Kubernetes resource quantities ("100Mi", "500m", "1.5Gi", "1e3"), as
 * `k8s.io/apimachinery/pkg/api/resource.ParseQuantity` accepts them. Values are numbers in
 * base units (bytes, cores); integers up to 2^53 are exact, which covers node resources.
 */

/** A string that is not a Kubernetes quantity. */
export class QuantitySyntaxError extends Error {
  override name = "QuantitySyntaxError";
  constructor(readonly input: string) {
    super(`'${input}' is not a quantity such as 100Mi, 1Gi, 500m or 2`);
  }
}

const SUFFIX: Record<string, number> = {
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60,
  n: 1e-9,
  u: 1e-6,
  m: 1e-3,
  "": 1,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
};

const QUANTITY =
  /^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$/;

/** Parses a quantity into base units; throws {@link QuantitySyntaxError}. */
export function parseQuantity(input: string): number {
  const m = QUANTITY.exec(input.trim());
  if (!m || input.trim() !== input) throw new QuantitySyntaxError(input);
  const num = Number(m[1]);
  if (m[2] !== undefined) return num * 10 ** Number(m[2].slice(1));
  return num * (SUFFIX[m[3] ?? ""] ?? NaN);
}

/** The quantity's value, undefined when `input` is absent, empty or not a quantity. */
export function quantityOrUndefined(input: string | undefined): number | undefined {
  if (input === undefined || input === "") return undefined;
  try {
    return parseQuantity(input);
  } catch {
    return undefined;
  }
}

/** True when the string parses as a quantity. */
export function isQuantity(input: string): boolean {
  try {
    parseQuantity(input);
    return true;
  } catch {
    return false;
  }
}

const BINARY_SUFFIXES = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

/**
 * An integer amount as apimachinery writes a BinarySI quantity (CanonicalizeBytes): below 1024
 * plain, else the largest power-of-1024 suffix that divides it exactly ("24683568Ki", "6556Mi").
 */
export function formatBinarySI(n: number): string {
  if (!Number.isSafeInteger(n)) throw new RangeError(`not an integer amount: ${n}`);
  if (Math.abs(n) < 1024) return String(n);
  let amount = n;
  let exp = 0;
  while (amount % 1024 === 0 && exp < BINARY_SUFFIXES.length - 1) {
    amount /= 1024;
    exp++;
  }
  return `${amount}${BINARY_SUFFIXES[exp]}`;
}
