/**
 * @module
 * The volume families of the kubelet's /metrics: how long each volume operation took
 * (`storage_operation_duration_seconds`, per plugin, operation and outcome), the end-to-end mount
 * latency from the volume entering the desired state (`volume_operation_total_seconds`), the
 * volume manager's desired and actual volumes counted at scrape time
 * (`volume_manager_total_volumes`), the start-up reconstruction counters, and the outcome of the
 * last orphaned pod directories sweep. The volume manager records them and is the source of the
 * volume counts.
 *
 * `reconstruct_volume_operations_*` and `force_cleaned_failed_volume_operation*` stay 0 here:
 * our volume manager reconstructs no volume into its actual state. After a restart that state
 * starts empty; the start-up look at the disk only finds the attachable volumes still mounted,
 * for node.status.volumesInUse; volumes found on disk are torn down straight from their
 * directories (a CSI volume's `vol_data.json` says how) when their pod is gone, and volumes of
 * pods still wanted are set up again (every plugin's SetUp is idempotent, a CSI volume is staged
 * and published again), so no volume is ever reconstructed or force-cleaned after a failed
 * reconstruction.
 *
 * Corresponds to upstream `pkg/volume/util/metrics.go`
 * (StorageOperationMetric, storageOperationEndToEndLatencyMetric),
 * `pkg/kubelet/volumemanager/metrics/metrics.go` and the orphan gauges of
 * `pkg/kubelet/metrics/metrics.go`.
 */

import { Counter, Gauge, Histogram, type MetricsRegistry } from "./_registry.ts";
import type { PrometheusText } from "./prometheus.ts";

/** Upstream's buckets of both storage operation histograms. */
export const STORAGE_OPERATION_BUCKETS: readonly number[] = [
  0.1,
  0.25,
  0.5,
  1,
  2.5,
  5,
  10,
  15,
  25,
  50,
  120,
  300,
  600,
];

/** The volume manager's states as volume_manager_total_volumes labels them. */
export type VolumeState = "desired_state_of_world" | "actual_state_of_world";

/** Volumes per state and plugin name, read at every scrape. */
export type VolumeCounts = ReadonlyMap<VolumeState, ReadonlyMap<string, number>>;

/** Where volume_manager_total_volumes reads its counts (the volume manager). */
export type VolumeCountsSource = () => VolumeCounts;

const TOTAL_VOLUMES = "volume_manager_total_volumes";
const TOTAL_VOLUMES_HELP = "[ALPHA] Number of volumes in Volume Manager";

/** The volume families; see the module documentation. */
export class VolumeMetrics {
  /** storage_operation_duration_seconds{volume_plugin,operation_name,status,migrated}. */
  readonly storageOperationDuration: Histogram;
  /** volume_operation_total_seconds{plugin_name,operation_name}: e.g. overall_volume_mount. */
  readonly volumeOperationTotal: Histogram;
  /** reconstruct_volume_operations_total: always 0 here (no reconstruction step). */
  readonly reconstructVolumeOperations: Counter;
  /** reconstruct_volume_operations_errors_total: always 0 here. */
  readonly reconstructVolumeOperationsErrors: Counter;
  /** force_cleaned_failed_volume_operations_total: always 0 here. */
  readonly forceCleanedFailedVolumeOperations: Counter;
  /** force_cleaned_failed_volume_operation_errors_total (upstream's singular): always 0 here. */
  readonly forceCleanedFailedVolumeOperationErrors: Counter;
  /** kubelet_orphan_pod_cleaned_volumes: orphaned pods the last sweep found. */
  readonly orphanPodCleanedVolumes: Gauge;
  /** kubelet_orphan_pod_cleaned_volumes_errors: those whose clean-up failed in that sweep. */
  readonly orphanPodCleanedVolumesErrors: Gauge;
  #source: VolumeCountsSource | undefined;

  constructor(registry: MetricsRegistry) {
    this.storageOperationDuration = registry.register(
      new Histogram({
        name: "storage_operation_duration_seconds",
        help: "Storage operation duration",
        buckets: STORAGE_OPERATION_BUCKETS,
        labelNames: ["volume_plugin", "operation_name", "status", "migrated"],
      }),
    );
    this.volumeOperationTotal = registry.register(
      new Histogram({
        name: "volume_operation_total_seconds",
        help: "Storage operation end to end duration in seconds",
        buckets: STORAGE_OPERATION_BUCKETS,
        labelNames: ["plugin_name", "operation_name"],
      }),
    );
    this.reconstructVolumeOperations = registry.register(
      new Counter({
        name: "reconstruct_volume_operations_total",
        help:
          "The number of volumes that were attempted to be reconstructed from the operating system during kubelet startup. This includes both successful and failed reconstruction.",
      }),
    );
    this.reconstructVolumeOperationsErrors = registry.register(
      new Counter({
        name: "reconstruct_volume_operations_errors_total",
        help:
          "The number of volumes that failed reconstruction from the operating system during kubelet startup.",
      }),
    );
    this.forceCleanedFailedVolumeOperations = registry.register(
      new Counter({
        name: "force_cleaned_failed_volume_operations_total",
        help:
          "The number of volumes that were force cleaned after their reconstruction failed during kubelet startup. This includes both successful and failed cleanups.",
      }),
    );
    this.forceCleanedFailedVolumeOperationErrors = registry.register(
      new Counter({
        name: "force_cleaned_failed_volume_operation_errors_total",
        help:
          "The number of volumes that failed force cleanup after their reconstruction failed during kubelet startup.",
      }),
    );
    this.orphanPodCleanedVolumes = registry.register(
      new Gauge({
        name: "kubelet_orphan_pod_cleaned_volumes",
        help:
          "The total number of orphaned Pods whose volumes were cleaned in the last periodic sweep.",
      }),
    );
    this.orphanPodCleanedVolumesErrors = registry.register(
      new Gauge({
        name: "kubelet_orphan_pod_cleaned_volumes_errors",
        help:
          "The number of orphaned Pods whose volumes failed to be cleaned in the last periodic sweep.",
      }),
    );
    registry.addCollector((out) => this.#collect(out));
  }

  /** Makes `source` the one volume_manager_total_volumes reads (the last one set wins). */
  setVolumeCountsSource(source: VolumeCountsSource): void {
    this.#source = source;
  }

  /**
   * Upstream OperationCompleteHook: one observation of `operation` (volume_mount,
   * volume_unmount, verify_controller_attached_volume, ...) by `plugin`, `success` or
   * `fail-unknown`. No volume here is migrated from an in-tree plugin to CSI.
   */
  observeOperation(plugin: string, operation: string, seconds: number, failed: boolean): void {
    this.storageOperationDuration.observe(seconds, {
      volume_plugin: plugin,
      operation_name: operation,
      status: failed ? "fail-unknown" : "success",
      migrated: "false",
    });
  }

  /** Upstream RecordOperationLatencyMetric (overall_volume_mount, ...). */
  observeEndToEnd(plugin: string, operation: string, seconds: number): void {
    this.volumeOperationTotal.observe(seconds, { plugin_name: plugin, operation_name: operation });
  }

  /** The outcome of one orphaned pod directories sweep (upstream cleanupOrphanedPodDirs). */
  setOrphanSweep(orphanedPods: number, failedPods: number): void {
    this.orphanPodCleanedVolumes.set(orphanedPods);
    this.orphanPodCleanedVolumesErrors.set(failedPods);
  }

  #collect(out: PrometheusText): void {
    const counts = this.#source?.();
    if (!counts) return;
    out.family(TOTAL_VOLUMES, TOTAL_VOLUMES_HELP, "gauge");
    for (const [state, byPlugin] of counts) {
      for (const [plugin, n] of byPlugin) {
        out.sample(TOTAL_VOLUMES, { plugin_name: plugin, state }, n);
      }
    }
  }
}
