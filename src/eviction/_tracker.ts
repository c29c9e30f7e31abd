/**
 * @module
 * The eviction manager's memory between passes: when each threshold was first met, when each
 * node condition was last seen, the thresholds still in effect (kept until their minimum
 * reclaim is satisfied) and the previous observations. One {@link PressureTracker.observe}
 * per pass turns fresh observations into the node conditions to report and the thresholds to
 * act on. Private to eviction_manager.ts. Corresponds to the state handling in upstream
 * `synchronize` (`pkg/kubelet/eviction/eviction_manager.go`).
 */

import type { Threshold } from "./thresholds.ts";
import type { Logger } from "../klog/klog.ts";
import {
  mergeThresholds,
  nodeConditions,
  nodeConditionsLastObservedAt,
  nodeConditionsObservedSince,
  type NodeConditionType,
  type SignalObservations,
  thresholdsFirstObservedAt,
  thresholdsMet,
  thresholdsMetGracePeriod,
  thresholdsUpdatedStats,
} from "./_signals.ts";

/** Threshold and condition history across eviction passes. */
export class PressureTracker {
  #conditions: NodeConditionType[] = [];
  #conditionsLastObservedAt = new Map<NodeConditionType, number>();
  #thresholdsFirstObservedAt = new Map<Threshold, number>();
  #thresholdsMet: Threshold[] = [];
  #lastObservations: SignalObservations = new Map();

  constructor(
    public transitionPeriodMs: number,
    private readonly logger: Logger,
  ) {}

  /** The node conditions to report, in the order they were first seen. */
  get conditions(): readonly NodeConditionType[] {
    return this.#conditions;
  }

  /**
   * Forgets the thresholds met so far (new thresholds were configured: the old ones no longer
   * apply, not even until their minimum reclaim). The conditions keep their last observation, so
   * a pressure still clears only after the transition period.
   */
  forgetThresholds(): void {
    this.#thresholdsMet = [];
    this.#thresholdsFirstObservedAt = new Map();
  }

  /**
   * Records one pass at `now` and returns the thresholds to act on: met for their grace
   * period, with a sample newer than the previous pass had.
   */
  observe(
    configured: readonly Threshold[],
    observations: SignalObservations,
    now: number,
  ): Threshold[] {
    const { logger } = this;
    let thresholds = thresholdsMet(configured, observations, false, logger);
    if (this.#thresholdsMet.length > 0) {
      // Thresholds in effect stay until their minimum reclaim is satisfied too.
      const unresolved = thresholdsMet(this.#thresholdsMet, observations, true, logger);
      thresholds = mergeThresholds(thresholds, unresolved);
    }
    const firstObservedAt = thresholdsFirstObservedAt(
      thresholds,
      this.#thresholdsFirstObservedAt,
      now,
    );
    const observed = nodeConditions(thresholds);
    if (observed.length > 0) {
      logger.v(3).info("Eviction manager: node conditions - observed", {
        nodeCondition: observed,
      });
    }
    const lastObservedAt = nodeConditionsLastObservedAt(
      observed,
      this.#conditionsLastObservedAt,
      now,
    );
    const conditions = nodeConditionsObservedSince(lastObservedAt, this.transitionPeriodMs, now);
    if (conditions.length > 0) {
      logger.v(3).info("Eviction manager: node conditions - transition period not met", {
        nodeCondition: conditions,
      });
    }
    thresholds = thresholdsMetGracePeriod(firstObservedAt, now, logger);

    this.#conditions = conditions;
    this.#thresholdsFirstObservedAt = firstObservedAt;
    this.#conditionsLastObservedAt = lastObservedAt;
    this.#thresholdsMet = thresholds;
    const updated = thresholdsUpdatedStats(
      thresholds,
      observations,
      this.#lastObservations,
      logger,
    );
    this.#lastObservations = observations;
    return updated;
  }
}
