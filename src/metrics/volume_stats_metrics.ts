/**
 * @module
 * The claims' volume families of the kubelet's /metrics, `kubelet_volume_stats_*`: capacity,
 * available and used bytes, inodes, free and used inodes of each PersistentVolumeClaim mounted
 * on the node (once per claim), and with the CSIVolumeHealth gate whether the driver reports its
 * volume abnormal; labelled `namespace` and `persistentvolumeclaim`. Read at scrape time from the
 * stats provider (`stats/provider.ts` claimVolumeStats, which asks a volume's driver at most every
 * volumeStatsAggPeriod). Corresponds to upstream's
 * `pkg/kubelet/metrics/collectors/volume_stats.go`.
 */

import type { MetricsRegistry } from "./_registry.ts";
import type { PrometheusText } from "./prometheus.ts";

/** One claim's volume stats (the Summary API's VolumeStats with its pvcRef). */
export interface ClaimVolumeSample {
  readonly pvcRef: { readonly name: string; readonly namespace: string };
  readonly stats: {
    readonly capacityBytes?: number;
    readonly availableBytes?: number;
    readonly usedBytes?: number;
    readonly inodes?: number;
    readonly inodesFree?: number;
    readonly inodesUsed?: number;
    readonly volumeHealthStats?: { readonly abnormal: boolean };
  };
}

/** The families, their HELP and the field each reads, in upstream's order. */
const FAMILIES: readonly [string, string, keyof ClaimVolumeSample["stats"]][] = [
  ["kubelet_volume_stats_capacity_bytes", "Capacity in bytes of the volume", "capacityBytes"],
  [
    "kubelet_volume_stats_available_bytes",
    "Number of available bytes in the volume",
    "availableBytes",
  ],
  ["kubelet_volume_stats_used_bytes", "Number of used bytes in the volume", "usedBytes"],
  ["kubelet_volume_stats_inodes", "Maximum number of inodes in the volume", "inodes"],
  ["kubelet_volume_stats_inodes_free", "Number of free inodes in the volume", "inodesFree"],
  ["kubelet_volume_stats_inodes_used", "Number of used inodes in the volume", "inodesUsed"],
];

const HEALTH = "kubelet_volume_stats_health_status_abnormal";
const HEALTH_HELP =
  "Abnormal volume health status. The count is either 1 or 0. 1 indicates the volume is unhealthy, 0 indicates volume is healthy";

/** kubelet_volume_stats_*; see the module documentation. */
export class VolumeStatsMetrics {
  #source: ((signal?: AbortSignal) => Promise<readonly ClaimVolumeSample[]>) | undefined;

  constructor(registry: MetricsRegistry) {
    registry.addCollector((out) => this.#collect(out));
  }

  /** Makes `source` the one the families read (the stats provider's claims). */
  setSource(source: (signal?: AbortSignal) => Promise<readonly ClaimVolumeSample[]>): void {
    this.#source = source;
  }

  async #collect(out: PrometheusText): Promise<void> {
    let claims: readonly ClaimVolumeSample[];
    try {
      claims = (await this.#source?.()) ?? [];
    } catch {
      // upstream: a failed ListPodStats leaves the families out of this scrape.
      return;
    }
    if (claims.length === 0) return;
    const labels = (c: ClaimVolumeSample) => ({
      namespace: c.pvcRef.namespace,
      persistentvolumeclaim: c.pvcRef.name,
    });
    for (const [name, help, field] of FAMILIES) {
      out.family(name, `[ALPHA] ${help}`, "gauge");
      for (const c of claims) out.sample(name, labels(c), Number(c.stats[field] ?? 0));
    }
    const health = claims.filter((c) => c.stats.volumeHealthStats !== undefined);
    if (health.length === 0) return;
    out.family(HEALTH, `[ALPHA] ${HEALTH_HELP}`, "gauge");
    for (const c of health) {
      out.sample(HEALTH, labels(c), c.stats.volumeHealthStats?.abnormal ? 1 : 0);
    }
  }
}
