/**
 * @module
 * The image manager's families of the kubelet's /metrics: every ensure-image request with its
 * pull policy and whether the image was present and had to be pulled, every credential check of
 * a present image (KEP-2535) with its result, and the size of the pull records: intents and
 * pulled records on disk, and how full their in-memory caches are. The image manager and its
 * pull records store record them; the record gauges are set after each write or removal of a
 * record, as upstream's metering accessors do, so they read 0 until the first one.
 * Corresponds to upstream `pkg/kubelet/images/metrics.go` and
 * `pkg/kubelet/images/pullmanager/metrics.go`.
 */

import { Counter, Gauge, type MetricsRegistry } from "./_registry.ts";

/** The results of a credential check (upstream mustAttemptImagePullResult). */
export type MustPullCheckResult =
  | "credentialPolicyAllowed"
  | "credentialRecordFound"
  | "mustAuthenticate"
  | "error";

/** The image manager's families; see the module documentation. */
export class ImageMetrics {
  /** kubelet_image_manager_ensure_image_requests_total{pull_policy,present_locally,...}. */
  readonly ensureImageRequests: Counter;
  /** kubelet_imagemanager_image_mustpull_checks_total{result}. */
  readonly mustPullChecks: Counter;
  /** kubelet_imagemanager_ondisk_pullintents: intent files. */
  readonly onDiskPullIntents: Gauge;
  /** kubelet_imagemanager_ondisk_pulledrecords: pulled record files. */
  readonly onDiskPulledRecords: Gauge;
  /** kubelet_imagemanager_inmemory_pullintents_usage_percent: whole percent of the cache. */
  readonly inMemoryPullIntentsUsage: Gauge;
  /** kubelet_imagemanager_inmemory_pulledrecords_usage_percent: whole percent of the cache. */
  readonly inMemoryPulledRecordsUsage: Gauge;

  constructor(registry: MetricsRegistry) {
    this.ensureImageRequests = registry.register(
      new Counter({
        name: "kubelet_image_manager_ensure_image_requests_total",
        help: "Number of ensure-image requests processed by the kubelet.",
        labelNames: ["pull_policy", "present_locally", "pull_required"],
      }),
    );
    this.onDiskPullIntents = registry.register(
      new Gauge({
        name: "kubelet_imagemanager_ondisk_pullintents",
        help: "Number of ImagePullIntents stored on disk.",
      }),
    );
    this.onDiskPulledRecords = registry.register(
      new Gauge({
        name: "kubelet_imagemanager_ondisk_pulledrecords",
        help: "Number of ImagePulledRecords stored on disk.",
      }),
    );
    this.inMemoryPullIntentsUsage = registry.register(
      new Gauge({
        name: "kubelet_imagemanager_inmemory_pullintents_usage_percent",
        help: "The ImagePullIntents in-memory cache usage in percent.",
      }),
    );
    this.inMemoryPulledRecordsUsage = registry.register(
      new Gauge({
        name: "kubelet_imagemanager_inmemory_pulledrecords_usage_percent",
        help: "The ImagePulledRecords in-memory cache usage in percent.",
      }),
    );
    this.mustPullChecks = registry.register(
      new Counter({
        name: "kubelet_imagemanager_image_mustpull_checks_total",
        help:
          "Counter for how many times kubelet checked whether credentials need to be re-verified to access an image",
        labelNames: ["result"],
      }),
    );
  }

  /**
   * Upstream recordEnsureImageRequest: `policy` as the pod spells it (Always, IfNotPresent,
   * Never), lower-cased; an outcome not known when the request ended is "unknown".
   */
  recordEnsureImageRequest(
    policy: string,
    presentLocally: boolean | undefined,
    pullRequired: boolean | undefined,
  ): void {
    this.ensureImageRequests.inc({
      pull_policy: policy.toLowerCase(),
      present_locally: presentLocally === undefined ? "unknown" : String(presentLocally),
      pull_required: pullRequired === undefined ? "unknown" : String(pullRequired),
    });
  }

  /** Upstream recordMustAttemptImagePullResult. */
  recordMustPullCheck(result: MustPullCheckResult): void {
    this.mustPullChecks.inc({ result });
  }
}
