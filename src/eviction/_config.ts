/**
 * @module
 * The eviction manager's settings from the KubeletConfiguration, as upstream's kubelet.go
 * builds `eviction.Config`: thresholds parsed by thresholds.ts, the pressure
 * transition period, the soft-eviction grace period cap, local storage isolation. Private to
 * eviction_manager.ts, which re-exports it.
 */

import { parseThresholdConfig, type Threshold, type ThresholdConfig } from "./thresholds.ts";

/** An eviction setting this agent cannot honour. */
export class EvictionConfigError extends Error {
  override name = "EvictionConfigError";
}

/** The KubeletConfiguration fields eviction reads. */
export interface EvictionKubeletConfig extends ThresholdConfig {
  /** In ms, already defaulted to 5m. */
  readonly evictionPressureTransitionPeriod: number;
  /** In seconds. */
  readonly evictionMaxPodGracePeriod?: number;
  readonly localStorageCapacityIsolation: boolean;
  readonly kernelMemcgNotification?: boolean;
}

/** The manager's settings (upstream eviction.Config). */
export interface EvictionConfig {
  readonly thresholds: readonly Threshold[];
  /** evictionPressureTransitionPeriod in ms. @default 300000 */
  readonly pressureTransitionPeriodMs?: number;
  /** evictionMaxPodGracePeriod in seconds, the cap for soft evictions. @default 0 */
  readonly maxPodGracePeriodSeconds?: number;
  /** Enforce emptyDir sizeLimit and ephemeral-storage limits. @default true */
  readonly localStorageCapacityIsolation?: boolean;
}

/**
 * The settings from the kubelet's configuration and flags; throws ThresholdConfigError for
 * a bad threshold and {@link EvictionConfigError} for kernelMemcgNotification.
 */
export function evictionConfigFrom(
  cfg: EvictionKubeletConfig,
  flags: { readonly experimentalNodeAllocatableIgnoreEvictionThreshold?: boolean } = {},
): EvictionConfig {
  if (cfg.kernelMemcgNotification) {
    throw new EvictionConfigError(
      "Cannot start: 'kernelMemcgNotification' (memory threshold notifications from memcg) " +
        "is not supported yet: current value is true",
    );
  }
  // Upstream drops the allocatableMemory.available copy when eviction is not subtracted.
  const enforceNodeAllocatable = flags.experimentalNodeAllocatableIgnoreEvictionThreshold
    ? []
    : cfg.enforceNodeAllocatable;
  return {
    thresholds: parseThresholdConfig({ ...cfg, enforceNodeAllocatable }),
    pressureTransitionPeriodMs: cfg.evictionPressureTransitionPeriod,
    maxPodGracePeriodSeconds: cfg.evictionMaxPodGracePeriod ?? 0,
    localStorageCapacityIsolation: cfg.localStorageCapacityIsolation,
  };
}
