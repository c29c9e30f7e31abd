/**
 * @module
 * Go `time.Duration` text, as Kubernetes configuration writes it ("1m30s", "100ms", "2h").
 * Parsing follows Go's `time.ParseDuration`; formatting follows `Duration.String()` so that
 * defaults print the way the upstream kubelet prints them ("1m0s", "10s", "4h0m0s").
 * Values are held as milliseconds (fractions allowed), which covers every kubelet duration.
 */

/** A duration string that is not Go duration syntax. */
export class DurationSyntaxError extends Error {
  override name = "DurationSyntaxError";
  constructor(readonly input: string) {
    super(`'${input}' is not a duration such as 10s, 1m30s or 100ms`);
  }
}

const UNIT_MS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  "µs": 1e-3,
  "μs": 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

const PART = /^([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)/;

/** Parses Go duration syntax into milliseconds; throws {@link DurationSyntaxError}. */
export function parseDuration(input: string): number {
  let rest = input;
  let sign = 1;
  if (rest.startsWith("-") || rest.startsWith("+")) {
    if (rest[0] === "-") sign = -1;
    rest = rest.slice(1);
  }
  if (rest === "0") return 0;
  if (rest === "") throw new DurationSyntaxError(input);
  let total = 0;
  while (rest !== "") {
    const m = PART.exec(rest);
    const digits = m?.[1];
    const unit = m?.[2];
    if (!m || digits === undefined || unit === undefined || digits === "" || digits === ".") {
      throw new DurationSyntaxError(input);
    }
    total += Number(digits) * (UNIT_MS[unit] ?? NaN);
    rest = rest.slice(m[0].length);
  }
  if (!Number.isFinite(total)) throw new DurationSyntaxError(input);
  return sign * total;
}

/** Formats milliseconds the way Go's `time.Duration.String()` does. */
export function formatDuration(ms: number): string {
  if (ms === 0) return "0s";
  const neg = ms < 0;
  let ns = Math.round(Math.abs(ms) * 1e6);
  let out: string;
  if (ns < 1e9) {
    // Sub-second values use the largest unit that keeps the integer part non-zero.
    if (ns < 1e3) out = `${ns}ns`;
    else if (ns < 1e6) out = `${trim(ns / 1e3)}µs`;
    else out = `${trim(ns / 1e6)}ms`;
  } else {
    const h = Math.floor(ns / 3.6e12);
    ns -= h * 3.6e12;
    const m = Math.floor(ns / 6e10);
    ns -= m * 6e10;
    const s = trim(ns / 1e9);
    out = h > 0 ? `${h}h${m}m${s}s` : m > 0 ? `${m}m${s}s` : `${s}s`;
  }
  return neg ? `-${out}` : out;
}

function trim(n: number): string {
  return String(Number(n.toFixed(9)));
}
