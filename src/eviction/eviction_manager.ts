/**
 * @module
 * The eviction manager: every monitoring period it reads the Summary, compares each eviction
 * signal with the configured hard and soft thresholds, reports MemoryPressure, DiskPressure
 * and PIDPressure (held for the pressure transition period), reclaims disk at node level
 * first (unused containers, then unused images) and otherwise evicts one pod, the first in
 * upstream's ranking for the starved resource. It also evicts pods over their emptyDir
 * sizeLimit or ephemeral-storage limits, and refuses admission under pressure. It talks to
 * the stats provider (`summary`), the pod workers (`killPod`, `podCleanedUp`), the image and
 * container garbage collectors, and the event recorder. Corresponds to upstream
 * `pkg/kubelet/eviction/eviction_manager.go` (managerImpl, Admit, synchronize, evictPod,
 * localStorageEviction, reclaimNodeLevelResources) and `types.go`.
 */

import type { KubeletMetrics } from "../metrics/metrics.ts";
import type { V1Pod, V1PodCondition, V1PodStatus } from "@kubernetes/client-node";
import type { Clock } from "../util/clock.ts";
import { type EventRecorder, type ObjectRef, podRef } from "../client/record.ts";
import {
  isHardEvictionThreshold,
  parseThresholdConfig,
  type Signal,
  type Threshold,
  type ThresholdConfig,
} from "./thresholds.ts";
import { kobj, type Logger } from "../klog/klog.ts";
import type { AdmitResult } from "../lifecycle/predicate.ts";
import { isCriticalPod } from "../qos/qos.ts";
import type { Summary } from "../apis/stats_types.ts";
import type { SummaryOptions } from "../stats/provider.ts";
import { podLimits } from "../qos/resource_helpers.ts";
import { admitUnderPressure } from "./_admit.ts";
import { type EvictionConfig, evictionConfigFrom } from "./_config.ts";
import {
  type ContainerGC,
  detectDiskLayout,
  type DiskInfoProvider,
  type DiskLayout,
  type ImageGC,
} from "./_layout.ts";
import { localStorageViolation } from "./_local_storage.ts";
import { evictionMessage, REASON } from "./_message.ts";
import {
  byEvictionPriority,
  logPodsContainerMissing,
  makeSignalObservations,
  type NodeConditionType,
  resourceOf,
  thresholdsMet,
} from "./_signals.ts";
import { PressureTracker } from "./_tracker.ts";

/** Whether the kubelet evicted the pod (upstream PodIsEvicted): Failed with reason Evicted. */
export function podIsEvicted(status: V1PodStatus | undefined): boolean {
  return status?.phase === "Failed" && status.reason === REASON;
}

export { EvictionConfigError, type EvictionKubeletConfig } from "./_config.ts";
export { evictionConfigFrom, parseThresholdConfig };
export type {
  ContainerGC,
  DiskInfoProvider,
  EvictionConfig,
  ImageGC,
  NodeConditionType,
  Threshold,
  ThresholdConfig,
};

/** Grace period of hard and local storage evictions (upstream immediateEvictionGracePeriodSeconds). */
export const IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS = 1;
/** How long to wait for an evicted pod to be cleaned up (upstream podCleanupTimeout). */
export const POD_CLEANUP_TIMEOUT_MS = 30_000;
/** How often to check (upstream podCleanupPollFreq). */
export const POD_CLEANUP_POLL_MS = 1_000;

/** The status an evicted pod gets (what upstream's status function sets). */
export interface EvictionStatus {
  readonly phase: "Failed";
  readonly reason: "Evicted";
  readonly message: string;
  /** The DisruptionTarget condition (TerminationByKubelet), for pressure evictions. */
  readonly conditions?: readonly V1PodCondition[];
}

/**
 * Kills a pod as an eviction and resolves once it is killed (upstream KillPodFunc, the pod
 * workers' killPodNow): `status` is the pod's new status, `gracePeriodOverride` in seconds.
 */
export type KillPodFunc = (
  pod: V1Pod,
  status: EvictionStatus,
  gracePeriodOverride: number,
) => Promise<void>;

/** The resources of the signals whose ranking reads the containers' writable layers. */
const DISK_RESOURCES: ReadonlySet<string> = new Set(["ephemeral-storage", "inodes"]);

/** Whether a local storage limit of the pod reads its containers' writable layers. */
function hasEphemeralStorageLimit(pod: V1Pod): boolean {
  return podLimits(pod).has("ephemeral-storage");
}

/** What {@link EvictionManager} needs. */
export interface EvictionManagerOptions extends EvictionConfig {
  /**
   * The Summary, freshly measured (upstream SummaryProvider.Get with updateStats); without the
   * containers' writable layers (`rootfs`) when `writableLayers` is false.
   */
  readonly summary: (signal?: AbortSignal, opts?: SummaryOptions) => Promise<Summary>;
  /** Pods admitted and not terminal (upstream ActivePodsFunc). */
  readonly activePods: () => readonly V1Pod[];
  readonly killPod: KillPodFunc;
  /** True once the pod's resources are reclaimed (upstream PodCleanedUpFunc). */
  readonly podCleanedUp: (pod: V1Pod) => boolean;
  readonly imageGC: ImageGC;
  readonly containerGC: ContainerGC;
  readonly diskInfo: DiskInfoProvider;
  /**
   * The pods cgroup's memory limit (capacity minus kube and system reserved, as node
   * allocatable enforcement sets it), used for allocatableMemory.available when the "pods"
   * system container reports no availableBytes; undefined to leave the signal unobserved.
   */
  readonly nodeAllocatableMemory: () => number | undefined;
  /** The node, for EvictionThresholdMet events. */
  readonly nodeRef: ObjectRef;
  /** kubelet_evictions, by the signal each eviction was for. @default none */
  readonly metrics?: Pick<KubeletMetrics, "evictions">;
  readonly recorder: EventRecorder;
  readonly clock: Clock;
  readonly logger: Logger;
  /** @default 10000 (upstream evictionMonitoringPeriod) */
  readonly monitoringPeriodMs?: number;
}

/** Upstream's eviction managerImpl; see the module documentation. */
export class EvictionManager {
  readonly #o: EvictionManagerOptions;
  #thresholds: readonly Threshold[];
  #layout: DiskLayout | undefined;
  /** Counts reconfigurations, so a layout detected across one is not kept. */
  #generation = 0;
  #maxPodGracePeriodSeconds: number;
  readonly #tracker: PressureTracker;
  /** The "pods" system container was missing at the last pass (and that was logged). */
  #podsMissingLogged = false;

  constructor(opts: EvictionManagerOptions) {
    this.#o = opts;
    this.#thresholds = opts.thresholds;
    this.#maxPodGracePeriodSeconds = opts.maxPodGracePeriodSeconds ?? 0;
    this.#tracker = new PressureTracker(opts.pressureTransitionPeriodMs ?? 300_000, opts.logger);
  }

  /**
   * Takes new thresholds, transition period and soft-eviction grace cap from the next pass on (a
   * configuration reload). The disk layout is detected again, as it rewrites the filesystem
   * thresholds; a soft threshold already met starts its grace period again.
   */
  reconfigure(cfg: Omit<EvictionConfig, "localStorageCapacityIsolation">): void {
    this.#thresholds = cfg.thresholds;
    this.#layout = undefined;
    this.#generation++;
    this.#maxPodGracePeriodSeconds = cfg.maxPodGracePeriodSeconds ?? 0;
    this.#tracker.transitionPeriodMs = cfg.pressureTransitionPeriodMs ?? 300_000;
    this.#tracker.forgetThresholds();
    this.#o.logger.info("Eviction manager: thresholds reconfigured", {
      thresholds: this.#thresholds.length,
    });
  }

  /** The node conditions currently reported, in the order they were seen. */
  get nodeConditions(): readonly NodeConditionType[] {
    return this.#tracker.conditions;
  }

  /** The node is under memory pressure. */
  isUnderMemoryPressure(): boolean {
    return this.#tracker.conditions.includes("MemoryPressure");
  }

  /** The node is under disk pressure. */
  isUnderDiskPressure(): boolean {
    return this.#tracker.conditions.includes("DiskPressure");
  }

  /** The node is under PID pressure. */
  isUnderPIDPressure(): boolean {
    return this.#tracker.conditions.includes("PIDPressure");
  }

  /**
   * Whether a pod may be admitted (upstream Admit): under any pressure critical pods are;
   * under memory pressure alone, pods other than BestEffort, and BestEffort pods that tolerate
   * the memory-pressure NoSchedule taint; nothing else.
   */
  admit(pod: V1Pod): AdmitResult {
    return admitUnderPressure(pod, this.#tracker.conditions);
  }

  /** Synchronizes every monitoring period until `signal` aborts (upstream Start). */
  async run(signal: AbortSignal): Promise<void> {
    const { clock, logger } = this.#o;
    logger.info("Eviction manager: starting control loop");
    while (!signal.aborted) {
      let evicted: V1Pod[] = [];
      try {
        evicted = await this.synchronize(signal);
      } catch (e) {
        if (signal.aborted) break;
        logger.error(e, "Eviction manager: failed to synchronize");
      }
      if (evicted.length > 0) {
        logger.info("Eviction manager: pods evicted, waiting for pod to be cleaned up", {
          pods: evicted.map(kobj),
        });
        await this.#waitForPodsCleanup(evicted, signal);
      } else {
        await clock.sleep(this.#o.monitoringPeriodMs ?? 10_000, signal).catch(() => {});
      }
    }
  }

  /**
   * One pass of the control loop (upstream synchronize); resolves to the pods it evicted:
   * any over their local storage limits, else at most one for a met threshold.
   */
  async synchronize(signal?: AbortSignal): Promise<V1Pod[]> {
    const o = this.#o;
    const { logger } = o;
    const isolation = o.localStorageCapacityIsolation ?? true;
    if (this.#thresholds.length === 0 && !isolation) return [];
    logger.v(3).info("Eviction manager: synchronize housekeeping");
    const layout = this.#layout ?? await this.#detectLayout(signal);

    const activePods = [...o.activePods()];
    // The containers' writable layers (the runtime's ListContainerStats: containerd 2.4 asks
    // every container's shim, about 0.6-0.9 s of its CPU with 250 containers) count only toward
    // ephemeral-storage limits and the ranking for a disk signal, which takes them itself.
    // Upstream's pass always takes them.
    const writableLayers = isolation && activePods.some(hasEphemeralStorageLimit);
    let summary: Summary;
    try {
      summary = await o.summary(signal, { writableLayers });
    } catch (e) {
      signal?.throwIfAborted();
      logger.error(e, "Eviction manager: failed to get summary stats");
      return [];
    }
    const made = makeSignalObservations(
      summary,
      logger,
      o.nodeAllocatableMemory(),
      // Until pods have their own cgroups this is missing every pass: say so once.
      (missing) => {
        if (missing && !this.#podsMissingLogged) logPodsContainerMissing(logger);
        this.#podsMissingLogged = missing;
      },
    );
    const { observations } = made;
    let { statsFunc } = made;

    let thresholds = this.#tracker.observe(this.#thresholds, observations, o.clock.now());

    if (isolation) {
      const evicted = await localStorageViolation(activePods, statsFunc, layout.dedicatedImageFs, {
        evict: async (pod, message, limit) => {
          const tried = await this.#evictPod(pod, IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS, message);
          if (tried) o.metrics?.evictions.inc({ eviction_signal: limit });
          return tried;
        },
      });
      if (evicted.length > 0) return evicted;
    }

    if (thresholds.length === 0) {
      logger.v(3).info("Eviction manager: no resources are starved");
      return [];
    }
    thresholds = byEvictionPriority(thresholds);
    const toReclaim = thresholds[0]!;
    const resource = resourceOf(toReclaim.signal);
    logger.info("Eviction manager: attempting to reclaim", { resourceName: resource });
    o.recorder.event(
      o.nodeRef,
      "Warning",
      "EvictionThresholdMet",
      `Attempting to reclaim ${resource}`,
    );

    if (await this.#reclaimNodeLevelResources(layout, toReclaim.signal, resource, signal)) {
      logger.info("Eviction manager: able to reduce resource pressure without evicting pods.", {
        resourceName: resource,
      });
      return [];
    }
    logger.info("Eviction manager: must evict pod(s) to reclaim", { resourceName: resource });
    const rank = layout.rank.get(toReclaim.signal);
    if (!rank) {
      logger.error(null, "Eviction manager: no ranking function for signal", {
        threshold: toReclaim.signal,
      });
      return [];
    }
    if (activePods.length === 0) {
      logger.error(
        null,
        "Eviction manager: eviction thresholds have been met, but no pods are active to evict",
      );
      return [];
    }
    if (!writableLayers && DISK_RESOURCES.has(resource)) {
      try {
        ({ statsFunc } = makeSignalObservations(
          await o.summary(signal),
          logger,
          o.nodeAllocatableMemory(),
        ));
      } catch (e) {
        signal?.throwIfAborted();
        logger.error(e, "Eviction manager: failed to get summary stats");
        return [];
      }
    }
    rank(activePods, statsFunc);
    logger.info("Eviction manager: pods ranked for eviction", { pods: activePods.map(kobj) });

    const maxGrace = this.#maxPodGracePeriodSeconds;
    for (const pod of activePods) {
      let grace = IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS;
      if (!isHardEvictionThreshold(toReclaim)) {
        const own = pod.spec?.terminationGracePeriodSeconds;
        grace = own === undefined ? maxGrace : Math.min(maxGrace, own);
      }
      const message = evictionMessage(resource, pod, statsFunc, thresholds, observations);
      const condition: V1PodCondition = {
        type: "DisruptionTarget",
        status: "True",
        reason: "TerminationByKubelet",
        message,
        ...(pod.metadata?.generation !== undefined
          ? { observedGeneration: pod.metadata.generation }
          : {}),
      };
      if (await this.#evictPod(pod, grace, message, condition)) {
        o.metrics?.evictions.inc({ eviction_signal: toReclaim.signal });
        return [pod];
      }
    }
    logger.info("Eviction manager: unable to evict any pods from the node");
    return [];
  }

  async #detectLayout(signal?: AbortSignal): Promise<DiskLayout> {
    let layout: DiskLayout;
    for (;;) {
      const generation = this.#generation;
      layout = await detectDiskLayout(this.#thresholds, this.#o, signal);
      // Reconfigured while detecting: these thresholds are the old ones; derive from the new.
      if (generation === this.#generation) break;
    }
    this.#thresholds = layout.thresholds;
    this.#layout = layout;
    this.#o.logger.v(3).info("FileSystem detection", {
      DedicatedImageFs: layout.dedicatedImageFs,
      SplitImageFs: layout.splitContainerFs,
    });
    return layout;
  }

  /** True when node-level reclaim brought every threshold past its minimum reclaim. */
  async #reclaimNodeLevelResources(
    layout: DiskLayout,
    toReclaim: Signal,
    resource: string,
    signal?: AbortSignal,
  ): Promise<boolean> {
    const { logger } = this.#o;
    const funcs = layout.reclaim.get(toReclaim) ?? [];
    for (const reclaim of funcs) {
      try {
        await reclaim(signal);
      } catch (e) {
        signal?.throwIfAborted();
        logger.info(
          "Eviction manager: unexpected error when attempting to reduce resource pressure",
          {
            resourceName: resource,
            err: e,
          },
        );
      }
    }
    if (funcs.length === 0) return false;
    let summary: Summary;
    try {
      // Only the node's figures are read: no writable layers.
      summary = await this.#o.summary(signal, { writableLayers: false });
    } catch (e) {
      signal?.throwIfAborted();
      logger.error(e, "Eviction manager: failed to get summary stats after resource reclaim");
      return false;
    }
    const { observations } = makeSignalObservations(
      summary,
      logger,
      this.#o.nodeAllocatableMemory(),
    );
    return thresholdsMet(this.#thresholds, observations, true, logger).length === 0;
  }

  /** Evicts one pod unless it is critical; true when it tried (upstream evictPod). */
  async #evictPod(
    pod: V1Pod,
    gracePeriodOverride: number,
    message: string,
    condition?: V1PodCondition,
  ): Promise<boolean> {
    const { logger, recorder } = this.#o;
    if (isCriticalPod(pod)) {
      logger.error(null, "Eviction manager: cannot evict a critical pod", { pod: kobj(pod) });
      return false;
    }
    recorder.event(podRef(pod), "Warning", REASON, message);
    logger.v(3).info("Evicting pod", {
      pod: kobj(pod),
      podUID: pod.metadata?.uid ?? "",
      message,
    });
    try {
      await this.#o.killPod(pod, {
        phase: "Failed",
        reason: REASON,
        message,
        ...(condition ? { conditions: [condition] } : {}),
      }, gracePeriodOverride);
      logger.info("Eviction manager: pod is evicted successfully", { pod: kobj(pod) });
    } catch (e) {
      logger.error(e, "Eviction manager: pod failed to evict", { pod: kobj(pod) });
    }
    return true;
  }

  async #waitForPodsCleanup(pods: readonly V1Pod[], signal: AbortSignal): Promise<void> {
    const { clock, logger, podCleanedUp } = this.#o;
    const deadline = clock.now() + POD_CLEANUP_TIMEOUT_MS;
    while (!signal.aborted) {
      await clock.sleep(POD_CLEANUP_POLL_MS, signal).catch(() => {});
      if (signal.aborted) return;
      if (pods.every((p) => podCleanedUp(p))) {
        logger.info("Eviction manager: pods successfully cleaned up", { pods: pods.map(kobj) });
        return;
      }
      if (clock.now() >= deadline) {
        logger.info("Eviction manager: timed out waiting for pods to be cleaned up", {
          pods: pods.map(kobj),
        });
        return;
      }
    }
  }
}
