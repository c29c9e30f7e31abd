/**
 * @module
 * Reloading the configuration on SIGHUP (upstream has no counterpart: it removed dynamic kubelet
 * configuration in v1.24; its kubelet reads the file once). The file and drop-ins are read and
 * validated again exactly as at start, with the same flags on top. Then:
 * - an invalid file changes nothing: one error names the file, line, field and value;
 * - a changed field that is safe to change live ({@link LIVE_FIELDS}) is applied: each
 *   component that reads it has registered an applier, and the value in the running
 *   configuration (what /configz and the node status read) is replaced;
 * - a changed field that is not is refused, one error line each, naming the field, its running
 *   and its new value: it keeps its running value until a restart. The live fields of the same
 *   file still apply.
 */

import { ConfigError } from "../apis/config_schema.ts";
import type { Logger } from "../klog/klog.ts";
import type { KubeletConfiguration } from "../apis/config_types.ts";

/**
 * The fields that take effect without a restart, with the component that applies each. A field
 * of `logging` is named by its path (`logging.verbosity`); the other `logging` fields are not live.
 */
export const LIVE_FIELDS = [
  // The eviction manager's thresholds and timings (node allocatable follows evictionHard).
  "evictionHard",
  "evictionSoft",
  "evictionSoftGracePeriod",
  "evictionMinimumReclaim",
  "evictionPressureTransitionPeriod",
  "evictionMaxPodGracePeriod",
  // The image garbage collector's policy.
  "imageGCHighThresholdPercent",
  "imageGCLowThresholdPercent",
  "imageMinimumGCAge",
  "imageMaximumGCAge",
  // The logger.
  "logging.verbosity",
  "logging.vmodule",
  // The event recorder's rate limit.
  "eventRecordQPS",
  "eventBurst",
  // The image puller.
  "serializeImagePulls",
  "maxParallelImagePulls",
] as const;

/** A field {@link ConfigReloader} can apply live. */
export type LiveField = (typeof LIVE_FIELDS)[number];

/** Applies new values to a running component; throws to refuse them (logged, nothing kept). */
export type ConfigApplier = (next: KubeletConfiguration) => void;

/** Options of {@link ConfigReloader}. */
export interface ConfigReloaderOptions {
  /** Reads and validates the configuration as at start (file, drop-ins, then flags). */
  readonly load: () => Promise<KubeletConfiguration>;
  /** The running configuration; live fields are replaced in it. */
  readonly current: KubeletConfiguration;
  readonly logger: Logger;
}

/** What one reload did. */
export interface ReloadResult {
  /** Live fields that changed and were applied. */
  readonly applied: readonly string[];
  /** Fields that changed and were refused (they keep their running value). */
  readonly refused: readonly string[];
  /** Why nothing changed, when the configuration could not be read or applied. */
  readonly error?: string;
}

/** Reloads the configuration on request; see the module documentation. */
export class ConfigReloader {
  readonly #o: ConfigReloaderOptions;
  readonly #appliers: { fields: readonly LiveField[]; apply: ConfigApplier }[] = [];
  /** Reloads run one after another. */
  #chain: Promise<unknown> = Promise.resolve();

  constructor(opts: ConfigReloaderOptions) {
    this.#o = opts;
  }

  /** Registers a component's applier for the live fields it reads. */
  onChange(fields: readonly LiveField[], apply: ConfigApplier): void {
    this.#appliers.push({ fields, apply });
  }

  /** Reloads once; a request while one runs waits for it, then reads the files again. */
  reload(): Promise<ReloadResult> {
    const run = this.#chain.then(() => this.#reload());
    this.#chain = run.catch(() => {});
    return run;
  }

  async #reload(): Promise<ReloadResult> {
    const { logger, current } = this.#o;
    logger.info("Reloading the kubelet configuration (SIGHUP)");
    let next: KubeletConfiguration;
    try {
      next = await this.#o.load();
    } catch (e) {
      const error = e instanceof Error ? e.message : String(e);
      logger.error(
        e instanceof ConfigError ? error : e,
        "Failed to reload kubelet configuration; nothing changed",
      );
      return { applied: [], refused: [], error };
    }
    const changed = changedFields(current, next);
    const live = new Set<string>(LIVE_FIELDS);
    const refused = changed.filter((f) => !live.has(f));
    const applied = changed.filter((f) => live.has(f));
    for (const field of refused) {
      logger.error(
        null,
        "Refusing to change a kubelet configuration field without a restart; it keeps its running value",
        { field, running: valueAt(current, field), new: valueAt(next, field) },
      );
    }
    if (applied.length === 0) {
      logger.info("Kubelet configuration reloaded", { applied: "none", refused: refused.length });
      return { applied, refused };
    }
    // The running configuration with only the live changes, as the appliers must see it.
    const staged = structuredClone(current);
    for (const field of applied) setValueAt(staged, field, valueAt(next, field));
    const touched = this.#appliers.filter((a) => a.fields.some((f) => applied.includes(f)));
    try {
      for (const a of touched) a.apply(staged);
    } catch (e) {
      // Validation passed, so this is a component refusing a combination: undo the ones done.
      for (const a of touched) {
        try {
          a.apply(current);
        } catch { /* it had these values before */ }
      }
      const error = e instanceof Error ? e.message : String(e);
      logger.error(e, "Failed to apply the reloaded kubelet configuration; nothing changed");
      return { applied: [], refused, error };
    }
    for (const field of applied) setValueAt(current, field, valueAt(staged, field));
    logger.info("Kubelet configuration reloaded", {
      applied: applied.join(","),
      refused: refused.length,
    });
    return { applied, refused };
  }
}

/**
 * Top-level fields whose values differ, deep; `logging` is compared field by field and named
 * `logging.<field>`.
 */
export function changedFields(a: KubeletConfiguration, b: KubeletConfiguration): string[] {
  const out: string[] = [];
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  for (const key of [...keys].sort()) {
    const x = (a as unknown as Record<string, unknown>)[key];
    const y = (b as unknown as Record<string, unknown>)[key];
    if (key === "logging" && isObject(x) && isObject(y)) {
      for (const sub of [...new Set([...Object.keys(x), ...Object.keys(y)])].sort()) {
        if (!deepEqual(x[sub], y[sub])) out.push(`logging.${sub}`);
      }
      continue;
    }
    if (!deepEqual(x, y)) out.push(key);
  }
  return out;
}

function valueAt(cfg: KubeletConfiguration, path: string): unknown {
  let v: unknown = cfg;
  for (const k of path.split(".")) v = isObject(v) ? v[k] : undefined;
  return v;
}

function setValueAt(cfg: KubeletConfiguration, path: string, value: unknown): void {
  const keys = path.split(".");
  let o = cfg as unknown as Record<string, unknown>;
  for (const k of keys.slice(0, -1)) o = o[k] as Record<string, unknown>;
  const last = keys.at(-1)!;
  if (value === undefined) delete o[last];
  else o[last] = structuredClone(value);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a) && Array.isArray(b)) {
    return a.length === b.length && a.every((x, i) => deepEqual(x, b[i]));
  }
  if (isObject(a) && isObject(b)) {
    const ka = Object.keys(a).filter((k) => a[k] !== undefined);
    const kb = Object.keys(b).filter((k) => b[k] !== undefined);
    return ka.length === kb.length && ka.every((k) => deepEqual(a[k], b[k]));
  }
  return false;
}
