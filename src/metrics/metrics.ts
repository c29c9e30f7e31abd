/**
 * @module
 * The kubelet's own metrics, as upstream's /metrics shows them: the pod start-up histograms
 * (including the SLI), pod worker and PLEG timings, running pods and containers, CRI operation
 * counts and timings, evictions, started pods, the node name and the process collector, plus
 * the non-kubelet families of component_metrics.ts, rest_client_metrics.ts,
 * workqueue_metrics.ts, apiserver_metrics.ts and runtime_metrics.ts. Each component records
 * through the narrow slice of {@link KubeletMetrics} it is given (the PLEG its relist figures,
 * the CRI wrapper the operation counters, ...); nothing is timed per pod in the background.
 * Names, HELP, labels, buckets and stability levels are upstream's. Corresponds to upstream
 * `pkg/kubelet/metrics/metrics.go` and legacyregistry's process collector.
 */

import { DevicePluginMetrics, PodResourcesEndpointMetrics } from "./device_metrics.ts";
import {
  Counter,
  DEF_BUCKETS,
  exponentialBuckets,
  Gauge,
  Histogram,
  MAX_SERIES,
  type MetricsRegistry,
  type OverflowReporter,
} from "./_registry.ts";
import type { Logger } from "../klog/klog.ts";

/**
 * The metric kinds, for components that are handed one metric rather than KubeletMetrics, and
 * the registry, for tests that build one family module on a registry of their own.
 */
export { Counter, Gauge, Histogram };
export { type MetricDeclaration, MetricsRegistry } from "./_registry.ts";
import { processCollector, type ProcessCollectorOptions } from "./_process.ts";
import { VolumeMetrics } from "./volume_metrics.ts";
import { ImageMetrics } from "./image_metrics.ts";
import { DraMetrics } from "./dra_metrics.ts";
import { PluginManagerMetrics } from "./plugin_manager_metrics.ts";
import { VolumeStatsMetrics } from "./volume_stats_metrics.ts";
import { ComponentMetrics, CountingRegistry } from "./component_metrics.ts";
import { RestClientMetrics } from "./rest_client_metrics.ts";
import { WorkqueueMetrics } from "./workqueue_metrics.ts";
import { ApiserverMetrics } from "./apiserver_metrics.ts";
import { RuntimeMetrics } from "./runtime_metrics.ts";

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
  /** rest_client_*: the apiserver clients' requests. */
  readonly restClient: RestClientMetrics;
  /** workqueue_*: the queues of the CA reload and the log rotation. */
  readonly workqueue: WorkqueueMetrics;
  /** apiserver_* and authentication_token_cache_*: the kubelet API's authn/authz. */
  readonly apiserver: ApiserverMetrics;
  /** kubernetes_build_info and kubernetes_feature_enabled. */
  readonly component: ComponentMetrics;
  /** deno_*: heap, GC and event-loop delay (`run` starts the last two). */
  readonly runtime: RuntimeMetrics;
  /** kubelet_graceful_shutdown_{start,end}_time_seconds: the last node shutdown. */
  readonly gracefulShutdownStartTime: Gauge;
  readonly gracefulShutdownEndTime: Gauge;
  /** Volume operations and the volume manager's volumes (volume_metrics.ts). */
  readonly volume: VolumeMetrics;
  /** The image manager's requests and pull records (image_metrics.ts). */
  readonly image: ImageMetrics;
  /** Resource claim preparation (dra_metrics.ts). */
  readonly dra: DraMetrics;
  /** plugin_manager_total_plugins: the plugin manager's caches (plugin_manager_metrics.ts). */
  readonly pluginManager: PluginManagerMetrics;
  /** Device plugin registrations and allocations. */
  readonly devicePlugins: DevicePluginMetrics;
  /** Requests to the pod resources API. */
  readonly podResources: PodResourcesEndpointMetrics;
  /** kubelet_volume_stats_*, read from the stats provider once it runs. */
  readonly volumeStats: VolumeStatsMetrics;
  /** kubelet_credential_provider_plugin_{duration,errors_total}{plugin_name}: each plugin run. */
  readonly credentialProviderPluginDuration: Histogram;
  readonly credentialProviderPluginErrors: Counter;
  /** kubelet_credential_provider_config_info{hash}: 1 for the configuration in use, when any. */
  readonly credentialProviderConfigInfo: Gauge;
  /** kubelet_http_{requests_total,requests_duration_seconds,inflight_requests}: the 10250 and read-only servers. */
  readonly httpRequests: Counter;
  readonly httpRequestsDuration: Histogram;
  readonly httpInflightRequests: Gauge;
  /** kubelet_node_startup_*_seconds: boot → start → first registration attempt → registered → Ready. */
  readonly nodeStartupPreKubelet: Gauge;
  readonly nodeStartupPreRegistration: Gauge;
  readonly nodeStartupRegistration: Gauge;
  readonly nodeStartupPostRegistration: Gauge;
  readonly nodeStartup: Gauge;
  /** kubelet_cgroup_manager_duration_seconds{operation_type}: create, update, destroy. */
  readonly cgroupManagerDuration: Histogram;
  /** kubelet_cgroup_version: 1 or 2. */
  readonly cgroupVersion: Gauge;
  /** kubelet_metrics_provider{provider}: "cadvisor" (this agent's own cgroup reader). */
  readonly metricsProvider: Gauge;
  /** kubelet_cri_losing_support{version}: registered once the runtime lacks RuntimeConfig. */
  readonly criLosingSupport: Gauge;
  /** kubelet_pod_worker_start_duration_seconds: first seen → its worker starts. */
  readonly podWorkerStartDuration: Histogram;
  /** kubelet_pod_status_sync_duration_seconds: a status change → the API has it. */
  readonly podStatusSyncDuration: Histogram;
  /** kubelet_containers_per_pod_count: observed as each pod's first sync starts. */
  readonly containersPerPodCount: Histogram;
  /** kubelet_pleg_pod_relist_duration_seconds: one pod's inspection in a relist. */
  readonly plegPodRelistDuration: Histogram;
  /** kubelet_evented_pleg_connection_*: the CRI event stream's connections. */
  readonly eventedPlegConnErr: Counter;
  readonly eventedPlegConn: Counter;
  readonly eventedPlegConnLatency: Histogram;
  /** kubelet_first_network_pod_start_sli_duration_seconds: the first pod not on the host network. */
  readonly firstNetworkPodStartSLIDuration: Gauge;
  /** kubelet_started_containers_total{container_type} and its errors {container_type,code}. */
  readonly startedContainersTotal: Counter;
  readonly startedContainersErrorsTotal: Counter;
  /** kubelet_terminated_containers_total{container_type,exit_code,reason}: as the status manager sees them. */
  readonly terminatedContainersTotal: Counter;
  /** kubelet_started_user_namespaced_pods_total and its errors. */
  readonly startedUserNamespacedPodsTotal: Counter;
  readonly startedUserNamespacedPodsErrorsTotal: Counter;
  /** kubelet_{desired,active}_pods{static}, kubelet_mirror_pods: set at each housekeeping. */
  readonly desiredPods: Gauge;
  readonly activePods: Gauge;
  readonly mirrorPods: Gauge;
  /** kubelet_working_pods{lifecycle,config,static}: the pod workers' pods, set at each housekeeping. */
  readonly workingPods: Gauge;
  readonly restartedPodsTotal: Counter;
  readonly orphanedRuntimePodsTotal: Counter;
  /** kubelet_managed_ephemeral_containers: ephemeral containers of the pods the kubelet manages. */
  readonly managedEphemeralContainers: Gauge;
  /** kubelet_pod_watch_events_dropped_total: of the kubelet pods API (apis/pods), which this agent does not serve: 0. */
  readonly podWatchEventsDropped: Counter;
  readonly lifecycleHandlerHttpFallbacks: Counter;
  readonly sleepActionTerminatedEarly: Counter;
  /** In-place resize: requested changes, actuation time, pending/in-progress/infeasible/deferred. */
  readonly containerRequestedResizes: Counter;
  readonly podResizeDuration: Histogram;
  readonly podPendingResizes: Gauge;
  readonly podInProgressResizes: Gauge;
  readonly podInfeasibleResizes: Counter;
  readonly podDeferredAcceptedResizes: Counter;
  /**
   * CPU, memory and topology managers (policy none, the only one this agent has): pinning
   * counters stay 0, the shared pool is upstream's 0 under the none policy, and every admitted
   * pod counts as a topology admission request, as upstream's none policy counts it.
   */
  readonly cpuManagerPinningRequests: Counter;
  readonly cpuManagerPinningErrors: Counter;
  readonly cpuManagerSharedPoolSize: Gauge;
  readonly cpuManagerExclusiveCpus: Gauge;
  readonly memoryManagerPinningRequests: Counter;
  readonly memoryManagerPinningErrors: Counter;
  readonly topologyAdmissionRequests: Counter;
  readonly topologyAdmissionErrors: Counter;
  readonly topologyAdmissionDuration: Histogram;

  constructor(opts: KubeletMetricsOptions = {}) {
    const r = new CountingRegistry({ onOverflow: opts.onOverflow });
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
    this.gracefulShutdownStartTime = r.register(
      new Gauge({
        name: "kubelet_graceful_shutdown_start_time_seconds",
        help: "Last graceful shutdown start time since unix epoch in seconds",
      }),
    );
    this.gracefulShutdownEndTime = r.register(
      new Gauge({
        name: "kubelet_graceful_shutdown_end_time_seconds",
        help: "Last graceful shutdown end time since unix epoch in seconds",
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
    this.restClient = new RestClientMetrics(r);
    this.workqueue = new WorkqueueMetrics(r);
    this.apiserver = new ApiserverMetrics(r);
    this.component = new ComponentMetrics(r);
    this.runtime = new RuntimeMetrics(r);
    const gauge = (name: string, help: string, labelNames?: string[]) =>
      r.register(new Gauge({ name, help, ...(labelNames ? { labelNames } : {}) }));
    const counter = (name: string, help: string, labelNames?: string[]) =>
      r.register(new Counter({ name, help, ...(labelNames ? { labelNames } : {}) }));
    const histogram = (
      name: string,
      help: string,
      buckets: readonly number[],
      labelNames?: string[],
    ) => r.register(new Histogram({ name, help, buckets, ...(labelNames ? { labelNames } : {}) }));
    this.volume = new VolumeMetrics(r);
    this.image = new ImageMetrics(r);
    this.dra = new DraMetrics(r);
    this.pluginManager = new PluginManagerMetrics(r);
    this.devicePlugins = new DevicePluginMetrics(r);
    this.podResources = new PodResourcesEndpointMetrics(r);
    this.volumeStats = new VolumeStatsMetrics(r);
    this.credentialProviderPluginDuration = histogram(
      "kubelet_credential_provider_plugin_duration",
      "Duration of execution in seconds for credential provider plugin",
      DEF_BUCKETS,
      ["plugin_name"],
    );
    this.credentialProviderPluginErrors = counter(
      "kubelet_credential_provider_plugin_errors_total",
      "Number of errors from credential provider plugin",
      ["plugin_name"],
    );
    this.credentialProviderConfigInfo = gauge(
      "kubelet_credential_provider_config_info",
      "Information about the last applied credential provider configuration with hash as label",
      ["hash"],
    );
    const httpLabels = ["method", "path", "server_type", "long_running"];
    this.httpRequests = counter(
      "kubelet_http_requests_total",
      "Number of the http requests received since the server started",
      httpLabels,
    );
    this.httpRequestsDuration = histogram(
      "kubelet_http_requests_duration_seconds",
      "Duration in seconds to serve http requests",
      DEF_BUCKETS,
      httpLabels,
    );
    this.httpInflightRequests = gauge(
      "kubelet_http_inflight_requests",
      "Number of the inflight http requests",
      httpLabels,
    );
    this.nodeStartupPreKubelet = gauge(
      "kubelet_node_startup_pre_kubelet_duration_seconds",
      "Duration in seconds of node startup before kubelet starts.",
    );
    this.nodeStartupPreRegistration = gauge(
      "kubelet_node_startup_pre_registration_duration_seconds",
      "Duration in seconds of node startup before registration.",
    );
    this.nodeStartupRegistration = gauge(
      "kubelet_node_startup_registration_duration_seconds",
      "Duration in seconds of node startup during registration.",
    );
    this.nodeStartupPostRegistration = gauge(
      "kubelet_node_startup_post_registration_duration_seconds",
      "Duration in seconds of node startup after registration.",
    );
    this.nodeStartup = gauge(
      "kubelet_node_startup_duration_seconds",
      "Duration in seconds of node startup in total.",
    );
    this.cgroupManagerDuration = histogram(
      "kubelet_cgroup_manager_duration_seconds",
      "Duration in seconds for cgroup manager operations. Broken down by method.",
      DEF_BUCKETS,
      ["operation_type"],
    );
    this.cgroupVersion = gauge("kubelet_cgroup_version", "cgroup version on the hosts.");
    this.metricsProvider = gauge(
      "kubelet_metrics_provider",
      "Metrics provider used by kubelet to collect container stats. Values can be 'cadvisor' and 'cri'",
      ["provider"],
    );
    this.metricsProvider.set(1, { provider: "cadvisor" });
    this.criLosingSupport = gauge(
      "kubelet_cri_losing_support",
      "the Kubernetes version that the currently running CRI implementation will lose support on if not upgraded.",
      ["version"],
    );
    this.podWorkerStartDuration = histogram(
      "kubelet_pod_worker_start_duration_seconds",
      "Duration in seconds from kubelet seeing a pod to starting a worker.",
      DEF_BUCKETS,
    );
    this.podStatusSyncDuration = histogram(
      "kubelet_pod_status_sync_duration_seconds",
      "Duration in seconds to sync a pod status update. Measures time from detection of a change to pod status until the API is successfully updated for that pod, even if multiple intevening changes to pod status occur.",
      [0.01, 0.05, 0.1, 0.5, 1, 5, 10, 20, 30, 45, 60],
    );
    this.containersPerPodCount = histogram(
      "kubelet_containers_per_pod_count",
      "The number of containers per pod.",
      exponentialBuckets(1, 2, 5),
    );
    this.plegPodRelistDuration = histogram(
      "kubelet_pleg_pod_relist_duration_seconds",
      "Duration in seconds for relisting a single pod in PLEG.",
      DEF_BUCKETS,
    );
    this.eventedPlegConnErr = counter(
      "kubelet_evented_pleg_connection_error_count",
      "The number of errors encountered during the establishment of streaming connection with the CRI runtime.",
    );
    this.eventedPlegConn = counter(
      "kubelet_evented_pleg_connection_success_count",
      "The number of times a streaming client was obtained to receive CRI Events.",
    );
    this.eventedPlegConnLatency = histogram(
      "kubelet_evented_pleg_connection_latency_seconds",
      "The latency of streaming connection with the CRI runtime, measured in seconds.",
      DEF_BUCKETS,
    );
    this.firstNetworkPodStartSLIDuration = r.register(
      new Gauge({
        name: "kubelet_first_network_pod_start_sli_duration_seconds",
        help:
          "Duration in seconds to start the first network pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
        stabilityLevel: "INTERNAL",
      }),
    );
    this.startedContainersTotal = counter(
      "kubelet_started_containers_total",
      "Cumulative number of containers started",
      ["container_type"],
    );
    this.startedContainersErrorsTotal = counter(
      "kubelet_started_containers_errors_total",
      "Cumulative number of errors when starting containers",
      ["container_type", "code"],
    );
    this.terminatedContainersTotal = counter(
      "kubelet_terminated_containers_total",
      "Cumulative number of container terminations.",
      ["container_type", "exit_code", "reason"],
    );
    this.startedUserNamespacedPodsTotal = counter(
      "kubelet_started_user_namespaced_pods_total",
      "Cumulative number of pods with user namespaces started. This metric will only be collected on Linux.",
    );
    this.startedUserNamespacedPodsErrorsTotal = counter(
      "kubelet_started_user_namespaced_pods_errors_total",
      "Cumulative number of errors when starting pods with user namespaces. This metric will only be collected on Linux.",
    );
    this.desiredPods = gauge(
      "kubelet_desired_pods",
      "The number of pods the kubelet is being instructed to run. static is true if the pod is not from the apiserver.",
      ["static"],
    );
    this.activePods = gauge(
      "kubelet_active_pods",
      "The number of pods the kubelet considers active and which are being considered when admitting new pods. static is true if the pod is not from the apiserver.",
      ["static"],
    );
    this.mirrorPods = gauge(
      "kubelet_mirror_pods",
      "The number of mirror pods the kubelet will try to create (one per admitted static pod)",
    );
    this.workingPods = gauge(
      "kubelet_working_pods",
      "Number of pods the kubelet is actually running, broken down by lifecycle phase, whether the pod is desired, orphaned, or runtime only (also orphaned), and whether the pod is static. An orphaned pod has been removed from local configuration or force deleted in the API and consumes resources that are not otherwise visible.",
      ["lifecycle", "config", "static"],
    );
    this.restartedPodsTotal = counter(
      "kubelet_restarted_pods_total",
      "Number of pods that have been restarted because they were deleted and recreated with the same UID while the kubelet was watching them (common for static pods, extremely uncommon for API pods)",
      ["static"],
    );
    for (const s of ["", "true"]) this.restartedPodsTotal.inc({ static: s }, 0);
    this.orphanedRuntimePodsTotal = counter(
      "kubelet_orphaned_runtime_pods_total",
      "Number of pods that have been detected in the container runtime without being already known to the pod worker. This typically indicates the kubelet was restarted while a pod was force deleted in the API or in the local configuration, which is unusual.",
    );
    this.managedEphemeralContainers = gauge(
      "kubelet_managed_ephemeral_containers",
      "Current number of ephemeral containers in pods managed by this kubelet.",
    );
    this.podWatchEventsDropped = counter(
      "kubelet_pod_watch_events_dropped_total",
      "Cumulative number of pod watch events dropped.",
    );
    this.lifecycleHandlerHttpFallbacks = counter(
      "kubelet_lifecycle_handler_http_fallbacks_total",
      "The number of times lifecycle handlers successfully fell back to http from https.",
    );
    this.sleepActionTerminatedEarly = counter(
      "kubelet_sleep_action_terminated_early_total",
      "The number of times lifecycle sleep handler got terminated before it finishes",
    );
    this.containerRequestedResizes = counter(
      "kubelet_container_requested_resizes_total",
      "Number of requested resizes, counted at the container level. Different resources on the same container are counted separately. The 'requirement' label refers to 'memory' or 'limits'; the 'operation' label can be one of 'add', 'remove', 'increase' or 'decrease'.",
      ["resource", "requirement", "operation"],
    );
    this.podResizeDuration = histogram(
      "kubelet_pod_resize_duration_milliseconds",
      "Duration in milliseconds to actuate a pod resize",
      [10, 50, 100, 500, 1000, 2000, 5000, 10000, 20000, 30000, 60000, 120000, 300000, 600000],
      ["success"],
    );
    this.podPendingResizes = gauge(
      "kubelet_pod_pending_resizes",
      "Number of pending resizes for pods.",
      ["reason"],
    );
    this.podInProgressResizes = gauge(
      "kubelet_pod_in_progress_resizes",
      "Number of in-progress resizes for pods.",
    );
    this.podInfeasibleResizes = counter(
      "kubelet_pod_infeasible_resizes_total",
      "Number of infeasible resizes for pods.",
      ["reason_detail"],
    );
    this.podDeferredAcceptedResizes = counter(
      "kubelet_pod_deferred_accepted_resizes_total",
      "Cumulative number of resizes that were accepted after being deferred.",
      ["retry_trigger"],
    );
    this.cpuManagerPinningRequests = counter(
      "kubelet_cpu_manager_pinning_requests_total",
      "The number of cpu core allocations which required pinning.",
    );
    this.cpuManagerPinningErrors = counter(
      "kubelet_cpu_manager_pinning_errors_total",
      "The number of cpu core allocations which required pinning failed.",
    );
    this.cpuManagerSharedPoolSize = gauge(
      "kubelet_cpu_manager_shared_pool_size_millicores",
      "The size of the shared CPU pool for non-guaranteed QoS pods, in millicores.",
    );
    this.cpuManagerExclusiveCpus = gauge(
      "kubelet_cpu_manager_exclusive_cpu_allocation_count",
      "The total number of CPUs exclusively allocated to containers running on this node",
    );
    this.memoryManagerPinningRequests = counter(
      "kubelet_memory_manager_pinning_requests_total",
      "The number of memory pages allocations which required pinning.",
    );
    this.memoryManagerPinningErrors = counter(
      "kubelet_memory_manager_pinning_errors_total",
      "The number of memory pages allocations which required pinning that failed.",
    );
    this.topologyAdmissionRequests = counter(
      "kubelet_topology_manager_admission_requests_total",
      "The number of admission requests where resources have to be aligned.",
    );
    this.topologyAdmissionErrors = counter(
      "kubelet_topology_manager_admission_errors_total",
      "The number of admission request failures where resources could not be aligned.",
    );
    this.topologyAdmissionDuration = histogram(
      "kubelet_topology_manager_admission_duration_ms",
      "Duration in milliseconds to serve a pod admission request.",
      exponentialBuckets(0.05, 2, 15),
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
