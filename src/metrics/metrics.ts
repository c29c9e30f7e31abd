/**
 * @module
 * The kubelet's own metrics, as upstream's /metrics shows them: the pod start-up histograms
 * (including the SLI), pod worker and PLEG timings, running pods and containers, CRI operation
 * counts and timings, evictions, started pods, the node name, client-go's request counter and
 * the process collector. Each component records through the narrow slice of
 * {@link KubeletMetrics} it is given (the PLEG its relist figures, the CRI wrapper the
 * operation counters, ...); nothing is timed per pod in the background. Names, HELP, labels,
 * buckets and stability levels are upstream's. Corresponds to upstream
 * `pkg/kubelet/metrics/metrics.go`, client-go's `rest_client_requests_total`
 * (component-base/metrics/prometheus/restclient) and legacyregistry's process collector.
 */

import {
  Counter,
  DEF_BUCKETS,
  exponentialBuckets,
  Gauge,
  Histogram,
  MAX_SERIES,
  MetricsRegistry,
  type OverflowReporter,
} from "./_registry.ts";
import type { Logger } from "../klog/klog.ts";
import { processCollector, type ProcessCollectorOptions } from "./_process.ts";

/** Upstream podStartupDurationBuckets: round numbers from half a second to an hour. */
export const POD_STARTUP_DURATION_BUCKETS: readonly number[] = [
  0.5,
  1,
  2,
  3,
  4,
  5,
  6,
  8,
  10,
  20,
  30,
  45,
  60,
  120,
  180,
  240,
  300,
  360,
  480,
  600,
  900,
  1200,
  1800,
  2700,
  3600,
];

/** Options of {@link KubeletMetrics}. */
export interface KubeletMetricsOptions {
  /** Told once per metric whose label sets overflow. @default none */
  readonly onOverflow?: OverflowReporter;
  /** Where the process collector reads. @default /proc/self; `false` leaves it out */
  readonly process?: ProcessCollectorOptions | false;
}

/** Every metric the kubelet records, registered for /metrics. */
export class KubeletMetrics {
  readonly registry: MetricsRegistry;

  /** kubelet_node_name{node}: always 1. */
  readonly nodeName: Gauge;
  /** kubelet_pod_worker_duration_seconds{operation_type}: one pod sync, create/update/sync/kill/terminated. */
  readonly podWorkerDuration: Histogram;
  /** kubelet_pod_start_duration_seconds: first seen to Running. */
  readonly podStartDuration: Histogram;
  /** kubelet_pod_start_sli_duration_seconds: creation to running observed on watch, minus pulls and init containers. */
  readonly podStartSLIDuration: Histogram;
  /** kubelet_pod_start_total_duration_seconds: creation to running observed on watch. */
  readonly podStartTotalDuration: Histogram;
  readonly plegRelistDuration: Histogram;
  readonly plegRelistInterval: Histogram;
  readonly plegDiscardEvents: Counter;
  readonly plegLastSeen: Gauge;
  /** kubelet_running_pods: pods with a ready sandbox, set at each relist. */
  readonly runningPods: Gauge;
  /** kubelet_running_containers{container_state}: containers by state, set at each relist. */
  readonly runningContainers: Gauge;
  readonly runtimeOperations: Counter;
  readonly runtimeOperationsDuration: Histogram;
  readonly runtimeOperationsErrors: Counter;
  readonly runPodSandboxDuration: Histogram;
  readonly runPodSandboxErrors: Counter;
  /** kubelet_evictions{eviction_signal}. */
  readonly evictions: Counter;
  /** kubelet_started_pods_total: sandboxes the kubelet set out to create. */
  readonly startedPodsTotal: Counter;
  readonly startedPodsErrorsTotal: Counter;
  /** kubelet_image_volume_requested_total: image volumes of containers set out to start. */
  readonly imageVolumeRequestedTotal: Counter;
  /** kubelet_image_volume_mounted_{succeed,errors}_total: per mount of an image volume. */
  readonly imageVolumeMountedSucceedTotal: Counter;
  readonly imageVolumeMountedErrorsTotal: Counter;
  /** rest_client_requests_total{code,method,host}: every apiserver answer (or `<error>`). */
  readonly restClientRequests: Counter;
  /** kubelet_graceful_shutdown_{start,end}_time_seconds: the last node shutdown. */
  readonly gracefulShutdownStartTime: Gauge;
  readonly gracefulShutdownEndTime: Gauge;

  constructor(opts: KubeletMetricsOptions = {}) {
    const r = new MetricsRegistry({ onOverflow: opts.onOverflow });
    this.registry = r;
    this.nodeName = r.register(
      new Gauge({
        name: "kubelet_node_name",
        help: "The node's name. The count is always 1.",
        labelNames: ["node"],
      }),
    );
    this.podWorkerDuration = r.register(
      new Histogram({
        name: "kubelet_pod_worker_duration_seconds",
        help:
          "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
        buckets: DEF_BUCKETS,
        labelNames: ["operation_type"],
      }),
    );
    this.podStartDuration = r.register(
      new Histogram({
        name: "kubelet_pod_start_duration_seconds",
        help:
          "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
        buckets: POD_STARTUP_DURATION_BUCKETS,
      }),
    );
    this.podStartSLIDuration = r.register(
      new Histogram({
        name: "kubelet_pod_start_sli_duration_seconds",
        help:
          "Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
        buckets: POD_STARTUP_DURATION_BUCKETS,
        labelNames: [],
      }),
    );
    this.podStartTotalDuration = r.register(
      new Histogram({
        name: "kubelet_pod_start_total_duration_seconds",
        help:
          "Duration in seconds to start a pod since creation, including time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
        buckets: POD_STARTUP_DURATION_BUCKETS,
        labelNames: [],
      }),
    );
    this.plegRelistDuration = r.register(
      new Histogram({
        name: "kubelet_pleg_relist_duration_seconds",
        help: "Duration in seconds for relisting pods in PLEG.",
        buckets: DEF_BUCKETS,
      }),
    );
    this.plegRelistInterval = r.register(
      new Histogram({
        name: "kubelet_pleg_relist_interval_seconds",
        help: "Interval in seconds between relisting in PLEG.",
        buckets: DEF_BUCKETS,
      }),
    );
    this.plegDiscardEvents = r.register(
      new Counter({
        name: "kubelet_pleg_discard_events",
        help: "The number of discard events in PLEG.",
      }),
    );
    this.plegLastSeen = r.register(
      new Gauge({
        name: "kubelet_pleg_last_seen_seconds",
        help: "Timestamp in seconds when PLEG was last seen active.",
      }),
    );
    // Upstream gives both the start's help text.
    this.gracefulShutdownStartTime = r.register(
      new Gauge({
        name: "kubelet_graceful_shutdown_start_time_seconds",
        help: "Last graceful shutdown start time since unix epoch in seconds",
      }),
    );
    this.gracefulShutdownEndTime = r.register(
      new Gauge({
        name: "kubelet_graceful_shutdown_end_time_seconds",
        help: "Last graceful shutdown start time since unix epoch in seconds",
      }),
    );
    this.runningPods = r.register(
      new Gauge({
        name: "kubelet_running_pods",
        help: "Number of pods that have a running pod sandbox",
      }),
    );
    this.runningContainers = r.register(
      new Gauge({
        name: "kubelet_running_containers",
        help: "Number of containers currently running",
        labelNames: ["container_state"],
      }),
    );
    this.runtimeOperations = r.register(
      new Counter({
        name: "kubelet_runtime_operations_total",
        help: "Cumulative number of runtime operations by operation type.",
        labelNames: ["operation_type"],
      }),
    );
    this.runtimeOperationsDuration = r.register(
      new Histogram({
        name: "kubelet_runtime_operations_duration_seconds",
        help: "Duration in seconds of runtime operations. Broken down by operation type.",
        buckets: exponentialBuckets(0.005, 2.5, 14),
        labelNames: ["operation_type"],
      }),
    );
    this.runtimeOperationsErrors = r.register(
      new Counter({
        name: "kubelet_runtime_operations_errors_total",
        help: "Cumulative number of runtime operation errors by operation type.",
        labelNames: ["operation_type"],
      }),
    );
    this.runPodSandboxDuration = r.register(
      new Histogram({
        name: "kubelet_run_podsandbox_duration_seconds",
        help:
          "Duration in seconds of the run_podsandbox operations. Broken down by RuntimeClass.Handler.",
        buckets: DEF_BUCKETS,
        labelNames: ["runtime_handler"],
      }),
    );
    this.runPodSandboxErrors = r.register(
      new Counter({
        name: "kubelet_run_podsandbox_errors_total",
        help: "Cumulative number of the run_podsandbox operation errors by RuntimeClass.Handler.",
        labelNames: ["runtime_handler"],
      }),
    );
    this.evictions = r.register(
      new Counter({
        name: "kubelet_evictions",
        help: "Cumulative number of pod evictions by eviction signal",
        labelNames: ["eviction_signal"],
      }),
    );
    this.startedPodsTotal = r.register(
      new Counter({
        name: "kubelet_started_pods_total",
        help: "Cumulative number of pods started",
      }),
    );
    this.startedPodsErrorsTotal = r.register(
      new Counter({
        name: "kubelet_started_pods_errors_total",
        help: "Cumulative number of errors when starting pods",
      }),
    );
    this.imageVolumeRequestedTotal = r.register(
      new Counter({
        name: "kubelet_image_volume_requested_total",
        help: "Number of requested image volumes.",
        stabilityLevel: "BETA",
      }),
    );
    this.imageVolumeMountedSucceedTotal = r.register(
      new Counter({
        name: "kubelet_image_volume_mounted_succeed_total",
        help: "Number of successful image volume mounts.",
        stabilityLevel: "BETA",
      }),
    );
    this.imageVolumeMountedErrorsTotal = r.register(
      new Counter({
        name: "kubelet_image_volume_mounted_errors_total",
        help: "Number of failed image volume mounts.",
        stabilityLevel: "BETA",
      }),
    );
    this.restClientRequests = r.register(
      new Counter({
        name: "rest_client_requests_total",
        help: "Number of HTTP requests, partitioned by status code, method, and host.",
        labelNames: ["code", "method", "host"],
      }),
    );
    if (opts.process !== false) r.addCollector(processCollector(opts.process ?? {}));
  }

  /** Upstream SetNodeName. */
  setNodeName(name: string): void {
    this.nodeName.set(1, { node: name });
  }

  /** The /metrics text. */
  render(): Promise<string> {
    return this.registry.render();
  }
}

/** The kubelet's metrics, logging a vector that runs out of label sets once. */
export function newKubeletMetrics(logger: Logger): KubeletMetrics {
  return new KubeletMetrics({
    onOverflow: (metric, labels) =>
      logger.error(null, "Metric has too many label sets; new ones are dropped", {
        metric,
        labels,
        limit: MAX_SERIES,
      }),
  });
}
