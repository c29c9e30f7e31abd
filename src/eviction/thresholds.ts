/**
 * @module
 * Eviction signals and thresholds: turns the configuration maps `evictionHard`, `evictionSoft`,
 * `evictionSoftGracePeriod` and `evictionMinimumReclaim` into typed thresholds, with upstream's
 * rules and messages. Configuration validation uses it to reject a bad file before anything
 * starts; the eviction manager uses the parsed thresholds when it observes node pressure.
 * Corresponds to upstream `pkg/kubelet/eviction/api/types.go` and `ParseThresholdConfig` in
 * `pkg/kubelet/eviction/helpers.go`.
 */

import { parseDuration } from "../util/duration.ts";
import { parseQuantity } from "../util/quantity.ts";

/** Every signal the kubelet can evict on, spelled as in the configuration maps. */
export const SIGNALS = [
  "memory.available",
  "allocatableMemory.available",
  "nodefs.available",
  "nodefs.inodesFree",
  "imagefs.available",
  "imagefs.inodesFree",
  "containerfs.available",
  "containerfs.inodesFree",
  "pid.available",
] as const;

/** An eviction signal. */
export type Signal = (typeof SIGNALS)[number];

/** True when `s` names a signal the kubelet supports. */
export function isSignal(s: string): s is Signal {
  return (SIGNALS as readonly string[]).includes(s);
}

/** How an observed value is compared with a threshold; upstream defines only one. */
export type ThresholdOperator = "LessThan";

/** The operator of each signal: every signal fires when the observed value is below it. */
export const OPERATOR_FOR_SIGNAL: Readonly<Record<Signal, ThresholdOperator>> = Object.freeze(
  Object.fromEntries(SIGNALS.map((s) => [s, "LessThan"])) as Record<Signal, ThresholdOperator>,
);

/** The resource each signal measures; the eviction manager reclaims this resource. */
export const SIGNAL_RESOURCE: Readonly<Record<Signal, string>> = Object.freeze({
  "memory.available": "memory",
  "allocatableMemory.available": "memory",
  "nodefs.available": "ephemeral-storage",
  "nodefs.inodesFree": "inodes",
  "imagefs.available": "ephemeral-storage",
  "imagefs.inodesFree": "inodes",
  "containerfs.available": "ephemeral-storage",
  "containerfs.inodesFree": "inodes",
  "pid.available": "pids",
});

/** The node condition reported while a threshold of the signal is met. */
export const SIGNAL_CONDITION: Readonly<Record<Signal, string>> = Object.freeze({
  "memory.available": "MemoryPressure",
  "allocatableMemory.available": "MemoryPressure",
  "nodefs.available": "DiskPressure",
  "nodefs.inodesFree": "DiskPressure",
  "imagefs.available": "DiskPressure",
  "imagefs.inodesFree": "DiskPressure",
  "containerfs.available": "DiskPressure",
  "containerfs.inodesFree": "DiskPressure",
  "pid.available": "PIDPressure",
});

/** A threshold's value: an absolute quantity, or a fraction (0..1) of the resource's capacity. */
export type ThresholdValue =
  | {
    readonly kind: "quantity";
    /** The quantity as written, e.g. "100Mi". */
    readonly quantity: string;
    /** The quantity in base units (bytes, inodes or process ids). */
    readonly amount: number;
  }
  | {
    readonly kind: "percentage";
    /** A fraction of capacity, rounded to float32 as upstream stores it ("10%" is ~0.1). */
    readonly percentage: number;
  };

/** One parsed eviction threshold. */
export interface Threshold {
  readonly signal: Signal;
  readonly operator: ThresholdOperator;
  readonly value: ThresholdValue;
  /** How long a soft threshold must be met before eviction, in milliseconds; 0 for hard ones. */
  readonly gracePeriod: number;
  /** The minimum amount to reclaim beyond the threshold once eviction starts. */
  readonly minReclaim?: ThresholdValue;
}

/** The configuration field a threshold error came from. */
export type ThresholdField =
  | "evictionHard"
  | "evictionSoft"
  | "evictionSoftGracePeriod"
  | "evictionMinimumReclaim";

/** An eviction setting that cannot be used; carries the field, the signal and the value. */
export class ThresholdConfigError extends Error {
  override name = "ThresholdConfigError";
  constructor(
    readonly field: ThresholdField,
    readonly signal: string,
    readonly value: string,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** The eviction maps of a KubeletConfiguration, as `parseThresholdConfig` reads them. */
export interface ThresholdConfig {
  /** `enforceNodeAllocatable`; "pods" adds an allocatableMemory.available hard threshold. */
  readonly enforceNodeAllocatable?: readonly string[];
  readonly evictionHard?: Readonly<Record<string, string>>;
  readonly evictionSoft?: Readonly<Record<string, string>>;
  /** Go durations ("1m30s") by signal. */
  readonly evictionSoftGracePeriod?: Readonly<Record<string, string>>;
  readonly evictionMinimumReclaim?: Readonly<Record<string, string>>;
}

/**
 * Parses the eviction settings into thresholds, as upstream's ParseThresholdConfig does: hard
 * thresholds first, then soft ones (each needs a grace period), minimum reclaims attached by
 * signal, and a copy of a hard memory.available threshold as allocatableMemory.available when
 * "pods" is enforced. "0%" and "100%" disable a threshold. Throws {@link ThresholdConfigError}
 * at the first bad entry.
 */
export function parseThresholdConfig(config: ThresholdConfig): Threshold[] {
  const hard = parseStatements("evictionHard", config.evictionHard);
  const soft = parseStatements("evictionSoft", config.evictionSoft);
  const gracePeriods = parseGracePeriods(config.evictionSoftGracePeriod);
  const minReclaims = parseMinimumReclaims(config.evictionMinimumReclaim);
  const softWithGrace = soft.map((t) => {
    const gracePeriod = gracePeriods.get(t.signal);
    if (gracePeriod === undefined) {
      const raw = config.evictionSoft?.[t.signal] ?? "";
      throw new ThresholdConfigError(
        "evictionSoft",
        t.signal,
        raw,
        `grace period must be specified for the soft eviction threshold ${t.signal}`,
      );
    }
    return { ...t, gracePeriod };
  });
  let results: Threshold[] = [...hard, ...softWithGrace].map((t) => {
    const minReclaim = minReclaims.get(t.signal);
    return minReclaim === undefined ? t : { ...t, minReclaim };
  });
  if (config.enforceNodeAllocatable?.includes("pods")) results = addAllocatableThresholds(results);
  return results;
}

/** True for a hard threshold (no grace period). */
export function isHardEvictionThreshold(t: Threshold): boolean {
  return t.gracePeriod === 0;
}

/** The threshold's amount in base units for a resource of the given capacity. */
export function getThresholdQuantity(value: ThresholdValue, capacity: number): number {
  if (value.kind === "quantity") return value.amount;
  return Math.trunc(capacity * value.percentage);
}

function addAllocatableThresholds(thresholds: readonly Threshold[]): Threshold[] {
  const extra: Threshold[] = [];
  for (const t of thresholds) {
    if (t.signal === "memory.available" && isHardEvictionThreshold(t)) {
      extra.push({
        signal: "allocatableMemory.available",
        operator: t.operator,
        value: t.value,
        gracePeriod: 0,
        ...(t.minReclaim ? { minReclaim: t.minReclaim } : {}),
      });
    }
  }
  return [...thresholds, ...extra];
}

function checkSignal(field: ThresholdField, signal: string, value: string): Signal {
  if (!isSignal(signal)) {
    throw new ThresholdConfigError(field, signal, value, `unsupported eviction signal ${signal}`);
  }
  return signal;
}

function parseStatements(
  field: ThresholdField,
  statements: Readonly<Record<string, string>> | undefined,
): Threshold[] {
  const out: Threshold[] = [];
  for (const [name, val] of Object.entries(statements ?? {})) {
    const signal = checkSignal(field, name, val);
    const operator = OPERATOR_FOR_SIGNAL[signal];
    if (val.endsWith("%")) {
      // Upstream treats exactly "0%" and "100%" as "no threshold".
      if (val === "0%" || val === "100%") continue;
      const percentage = parsePercentage(field, signal, val);
      if (percentage < 0) {
        throw new ThresholdConfigError(
          field,
          signal,
          val,
          `eviction percentage threshold ${signal} must be >= 0%: ${val}`,
        );
      }
      if (percentage > 1) {
        throw new ThresholdConfigError(
          field,
          signal,
          val,
          `eviction percentage threshold ${signal} must be <= 100%: ${val}`,
        );
      }
      out.push({ signal, operator, value: { kind: "percentage", percentage }, gracePeriod: 0 });
      continue;
    }
    const amount = quantityOf(field, signal, val);
    if (amount <= 0) {
      throw new ThresholdConfigError(
        field,
        signal,
        val,
        `eviction threshold ${signal} must be positive: ${val}`,
      );
    }
    out.push({
      signal,
      operator,
      value: { kind: "quantity", quantity: val, amount },
      gracePeriod: 0,
    });
  }
  return out;
}

function parseGracePeriods(statements: Readonly<Record<string, string>> | undefined) {
  const out = new Map<Signal, number>();
  for (const [name, val] of Object.entries(statements ?? {})) {
    const signal = checkSignal("evictionSoftGracePeriod", name, val);
    let ms: number;
    try {
      ms = parseDuration(val);
    } catch (e) {
      throw new ThresholdConfigError(
        "evictionSoftGracePeriod",
        signal,
        val,
        `time: invalid duration "${val}"`,
        { cause: e },
      );
    }
    if (ms < 0) {
      throw new ThresholdConfigError(
        "evictionSoftGracePeriod",
        signal,
        val,
        `invalid eviction grace period specified: ${val}, must be a positive value`,
      );
    }
    out.set(signal, ms);
  }
  return out;
}

function parseMinimumReclaims(statements: Readonly<Record<string, string>> | undefined) {
  const field = "evictionMinimumReclaim";
  const out = new Map<Signal, ThresholdValue>();
  for (const [name, val] of Object.entries(statements ?? {})) {
    const signal = checkSignal(field, name, val);
    if (val.endsWith("%")) {
      const percentage = parsePercentage(field, signal, val);
      if (percentage <= 0) {
        throw new ThresholdConfigError(
          field,
          signal,
          val,
          `eviction percentage minimum reclaim ${signal} must be positive: ${val}`,
        );
      }
      out.set(signal, { kind: "percentage", percentage });
      continue;
    }
    const amount = quantityOf(field, signal, val);
    if (amount < 0) {
      throw new ThresholdConfigError(
        field,
        signal,
        val,
        `negative eviction minimum reclaim specified for ${signal}`,
      );
    }
    out.set(signal, { kind: "quantity", quantity: val, amount });
  }
  return out;
}

function quantityOf(field: ThresholdField, signal: Signal, val: string): number {
  try {
    return parseQuantity(val);
  } catch (e) {
    throw new ThresholdConfigError(
      field,
      signal,
      val,
      "quantities must match the regular expression " +
        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
      { cause: e },
    );
  }
}

// Go's strconv.ParseFloat decimal syntax, plus its spellings of infinity and NaN.
const FLOAT = /^[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)$/i;

/** Reads "12.5%" as 0.125, rounding through float32 as upstream's parsePercentage does. */
function parsePercentage(field: ThresholdField, signal: Signal, val: string): number {
  // strings.TrimRight removes every trailing '%', not just one.
  const text = val.replace(/%+$/, "");
  if (!FLOAT.test(text)) {
    throw new ThresholdConfigError(
      field,
      signal,
      val,
      `strconv.ParseFloat: parsing "${text}": invalid syntax`,
    );
  }
  const lower = text.toLowerCase().replace(/^[+-]/, "");
  const negative = text.startsWith("-");
  const n = lower === "nan"
    ? NaN
    : lower.startsWith("inf")
    ? (negative ? -Infinity : Infinity)
    : Number(text);
  const f32 = Math.fround(n);
  if (Number.isFinite(n) && !Number.isFinite(f32)) {
    throw new ThresholdConfigError(
      field,
      signal,
      val,
      `strconv.ParseFloat: parsing "${text}": value out of range`,
    );
  }
  return Math.fround(f32 / 100);
}
