import assert from "node:assert/strict";
import { join } from "node:path";
import { parseExposition } from "./prometheus.ts";
import { readProcessSample } from "./_process.ts";
import { KubeletMetrics, newKubeletMetrics } from "./metrics.ts";
import { Counter, Gauge, Histogram } from "./_registry.ts";
import { createLogger } from "../klog/klog.ts";

Deno.test("KubeletMetrics exposes upstream's names, types, stability levels and labels", async () => {
  const m = new KubeletMetrics({ process: false });
  m.setNodeName("node-a");
  m.podWorkerDuration.observe(0.2, { operation_type: "create" });
  m.podStartSLIDuration.observe(3, {});
  m.runningContainers.set(2, { container_state: "running" });
  m.runtimeOperations.inc({ operation_type: "version" });
  m.runtimeOperationsDuration.observe(0.001, { operation_type: "version" });
  m.runtimeOperationsErrors.inc({ operation_type: "version" });
  m.evictions.inc({ eviction_signal: "memory.available" });
  m.restClient.requests.inc({ code: "200", method: "GET", host: "10.0.0.1:6443" });
  const families = new Map(parseExposition(await m.render()).map((f) => [f.name, f]));
  const want: [string, string, string[]][] = [
    ["kubelet_node_name", "gauge", ["node"]],
    ["kubelet_pod_worker_duration_seconds", "histogram", ["operation_type"]],
    ["kubelet_pod_start_duration_seconds", "histogram", []],
    ["kubelet_pod_start_sli_duration_seconds", "histogram", []],
    ["kubelet_pleg_relist_duration_seconds", "histogram", []],
    ["kubelet_pleg_relist_interval_seconds", "histogram", []],
    ["kubelet_running_pods", "gauge", []],
    ["kubelet_running_containers", "gauge", ["container_state"]],
    ["kubelet_runtime_operations_total", "counter", ["operation_type"]],
    ["kubelet_runtime_operations_duration_seconds", "histogram", ["operation_type"]],
    ["kubelet_runtime_operations_errors_total", "counter", ["operation_type"]],
    ["kubelet_evictions", "counter", ["eviction_signal"]],
    ["kubelet_started_pods_total", "counter", []],
    ["rest_client_requests_total", "counter", ["code", "host", "method"]],
    ["kubelet_image_volume_requested_total", "counter", []],
    ["kubelet_image_volume_mounted_succeed_total", "counter", []],
    ["kubelet_image_volume_mounted_errors_total", "counter", []],
  ];
  for (const [name, type, labels] of want) {
    const f = families.get(name);
    assert.ok(f, name);
    assert.equal(f.type, type, name);
    assert.match(
      f.help,
      name.startsWith("kubelet_image_volume_") ? /^\[BETA\] / : /^\[ALPHA\] /,
      name,
    );
    for (const s of f.samples) {
      const own = Object.keys(s.labels).filter((k) => k !== "le").sort();
      assert.deepEqual(own, labels, name);
    }
  }
  // Upstream's podStartupDurationBuckets.
  const bounds = families.get("kubelet_pod_start_sli_duration_seconds")!.samples
    .filter((s) => s.suffix === "_bucket").map((s) => s.labels.le);
  assert.deepEqual(bounds, [
    ..."0.5 1 2 3 4 5 6 8 10 20 30 45 60 120 180 240 300 360 480 600 900 1200 1800 2700 3600"
      .split(" "),
    "+Inf",
  ]);
  // Lazy vectors with nothing recorded are left out, as component-base does.
  assert.equal(families.has("kubelet_pod_start_total_duration_seconds"), false);
  assert.equal(families.has("kubelet_run_podsandbox_errors_total"), false);
});

Deno.test("readProcessSample reads /proc/self as client_golang's process collector does", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const self = join(dir, "self");
    await Deno.mkdir(join(self, "fd"), { recursive: true });
    await Deno.mkdir(join(self, "net"), { recursive: true });
    for (const fd of ["0", "1", "2"]) await Deno.writeTextFile(join(self, "fd", fd), "");
    // comm with a space and a parenthesis; utime 250, stime 50, starttime 1000, vsize, rss.
    const fields = ["S", ...Array(10).fill("0"), "250", "50", ...Array(6).fill("0"), "1000"];
    await Deno.writeTextFile(
      join(self, "stat"),
      `42 (deno (x) y) ${fields.join(" ")} 123456789 9999 0 0\n`,
    );
    await Deno.writeTextFile(join(self, "status"), "Name:\tdeno\nVmRSS:\t   2048 kB\n");
    await Deno.writeTextFile(
      join(self, "limits"),
      "Limit                     Soft Limit           Hard Limit           Units\n" +
        "Max open files            1024                 4096                 files\n" +
        "Max address space         unlimited            unlimited            bytes\n",
    );
    await Deno.writeTextFile(
      join(self, "net", "netstat"),
      "IpExt: InNoRoutes InOctets OutOctets\nIpExt: 0 1000 2000\n",
    );
    const stat = join(dir, "stat");
    await Deno.writeTextFile(stat, "cpu 1 2 3\nbtime 1700000000\n");
    const s = await readProcessSample({ procSelf: self, procStat: stat });
    assert.deepEqual(s, {
      cpuSeconds: 3,
      virtualMemoryBytes: 123456789,
      residentMemoryBytes: 2048 * 1024,
      startTimeSeconds: 1700000010,
      openFds: 3,
      maxFds: 1024,
      maxVirtualMemoryBytes: 2 ** 64,
      networkReceiveBytes: 1000,
      networkTransmitBytes: 2000,
    });
    // Nothing readable: nothing reported, nothing thrown.
    assert.deepEqual(await readProcessSample({ procSelf: join(dir, "none"), procStat: stat }), {});
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("KubeletMetrics writes the process families without a stability level", async () => {
  const m = newKubeletMetrics(createLogger({ write: () => {} }));
  const families = new Map(parseExposition(await m.render()).map((f) => [f.name, f]));
  assert.equal(
    families.get("process_resident_memory_bytes")?.help,
    "Resident memory size in bytes.",
  );
  assert.equal(
    families.get("process_cpu_seconds_total")?.help,
    "Total user and system CPU time spent in seconds.",
  );
  assert.ok((families.get("process_resident_memory_bytes")?.samples[0]?.value ?? 0) > 0);
});

/**
 * The `# HELP` and `# TYPE` lines of every kubelet_* family in a scrape of the Go kubelet
 * v1.36.3's /metrics on this node (containerd 1.6, the same pods), copied as data.
 */
const UPSTREAM_KUBELET_FAMILIES = `
# HELP kubelet_active_pods [ALPHA] The number of pods the kubelet considers active and which are being considered when admitting new pods. static is true if the pod is not from the apiserver.
# TYPE kubelet_active_pods gauge
# HELP kubelet_cgroup_manager_duration_seconds [ALPHA] Duration in seconds for cgroup manager operations. Broken down by method.
# TYPE kubelet_cgroup_manager_duration_seconds histogram
# HELP kubelet_cgroup_version [ALPHA] cgroup version on the hosts.
# TYPE kubelet_cgroup_version gauge
# HELP kubelet_containers_per_pod_count [ALPHA] The number of containers per pod.
# TYPE kubelet_containers_per_pod_count histogram
# HELP kubelet_cpu_manager_exclusive_cpu_allocation_count [ALPHA] The total number of CPUs exclusively allocated to containers running on this node
# TYPE kubelet_cpu_manager_exclusive_cpu_allocation_count gauge
# HELP kubelet_cpu_manager_pinning_errors_total [ALPHA] The number of cpu core allocations which required pinning failed.
# TYPE kubelet_cpu_manager_pinning_errors_total counter
# HELP kubelet_cpu_manager_pinning_requests_total [ALPHA] The number of cpu core allocations which required pinning.
# TYPE kubelet_cpu_manager_pinning_requests_total counter
# HELP kubelet_cpu_manager_shared_pool_size_millicores [ALPHA] The size of the shared CPU pool for non-guaranteed QoS pods, in millicores.
# TYPE kubelet_cpu_manager_shared_pool_size_millicores gauge
# HELP kubelet_cri_losing_support [ALPHA] the Kubernetes version that the currently running CRI implementation will lose support on if not upgraded.
# TYPE kubelet_cri_losing_support gauge
# HELP kubelet_desired_pods [ALPHA] The number of pods the kubelet is being instructed to run. static is true if the pod is not from the apiserver.
# TYPE kubelet_desired_pods gauge
# HELP kubelet_evented_pleg_connection_error_count [ALPHA] The number of errors encountered during the establishment of streaming connection with the CRI runtime.
# TYPE kubelet_evented_pleg_connection_error_count counter
# HELP kubelet_evented_pleg_connection_latency_seconds [ALPHA] The latency of streaming connection with the CRI runtime, measured in seconds.
# TYPE kubelet_evented_pleg_connection_latency_seconds histogram
# HELP kubelet_evented_pleg_connection_success_count [ALPHA] The number of times a streaming client was obtained to receive CRI Events.
# TYPE kubelet_evented_pleg_connection_success_count counter
# HELP kubelet_first_network_pod_start_sli_duration_seconds [INTERNAL] Duration in seconds to start the first network pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch
# TYPE kubelet_first_network_pod_start_sli_duration_seconds gauge
# HELP kubelet_graceful_shutdown_end_time_seconds [ALPHA] Last graceful shutdown end time since unix epoch in seconds
# TYPE kubelet_graceful_shutdown_end_time_seconds gauge
# HELP kubelet_graceful_shutdown_start_time_seconds [ALPHA] Last graceful shutdown start time since unix epoch in seconds
# TYPE kubelet_graceful_shutdown_start_time_seconds gauge
# HELP kubelet_http_inflight_requests [ALPHA] Number of the inflight http requests
# TYPE kubelet_http_inflight_requests gauge
# HELP kubelet_http_requests_total [ALPHA] Number of the http requests received since the server started
# TYPE kubelet_http_requests_total counter
# HELP kubelet_image_manager_ensure_image_requests_total [ALPHA] Number of ensure-image requests processed by the kubelet.
# TYPE kubelet_image_manager_ensure_image_requests_total counter
# HELP kubelet_image_volume_mounted_errors_total [BETA] Number of failed image volume mounts.
# TYPE kubelet_image_volume_mounted_errors_total counter
# HELP kubelet_image_volume_mounted_succeed_total [BETA] Number of successful image volume mounts.
# TYPE kubelet_image_volume_mounted_succeed_total counter
# HELP kubelet_image_volume_requested_total [BETA] Number of requested image volumes.
# TYPE kubelet_image_volume_requested_total counter
# HELP kubelet_imagemanager_image_mustpull_checks_total [ALPHA] Counter for how many times kubelet checked whether credentials need to be re-verified to access an image
# TYPE kubelet_imagemanager_image_mustpull_checks_total counter
# HELP kubelet_imagemanager_inmemory_pulledrecords_usage_percent [ALPHA] The ImagePulledRecords in-memory cache usage in percent.
# TYPE kubelet_imagemanager_inmemory_pulledrecords_usage_percent gauge
# HELP kubelet_imagemanager_inmemory_pullintents_usage_percent [ALPHA] The ImagePullIntents in-memory cache usage in percent.
# TYPE kubelet_imagemanager_inmemory_pullintents_usage_percent gauge
# HELP kubelet_imagemanager_ondisk_pulledrecords [ALPHA] Number of ImagePulledRecords stored on disk.
# TYPE kubelet_imagemanager_ondisk_pulledrecords gauge
# HELP kubelet_imagemanager_ondisk_pullintents [ALPHA] Number of ImagePullIntents stored on disk.
# TYPE kubelet_imagemanager_ondisk_pullintents gauge
# HELP kubelet_lifecycle_handler_http_fallbacks_total [ALPHA] The number of times lifecycle handlers successfully fell back to http from https.
# TYPE kubelet_lifecycle_handler_http_fallbacks_total counter
# HELP kubelet_managed_ephemeral_containers [ALPHA] Current number of ephemeral containers in pods managed by this kubelet.
# TYPE kubelet_managed_ephemeral_containers gauge
# HELP kubelet_memory_manager_pinning_errors_total [ALPHA] The number of memory pages allocations which required pinning that failed.
# TYPE kubelet_memory_manager_pinning_errors_total counter
# HELP kubelet_memory_manager_pinning_requests_total [ALPHA] The number of memory pages allocations which required pinning.
# TYPE kubelet_memory_manager_pinning_requests_total counter
# HELP kubelet_metrics_provider [ALPHA] Metrics provider used by kubelet to collect container stats. Values can be 'cadvisor' and 'cri'
# TYPE kubelet_metrics_provider gauge
# HELP kubelet_mirror_pods [ALPHA] The number of mirror pods the kubelet will try to create (one per admitted static pod)
# TYPE kubelet_mirror_pods gauge
# HELP kubelet_node_name [ALPHA] The node's name. The count is always 1.
# TYPE kubelet_node_name gauge
# HELP kubelet_node_startup_duration_seconds [ALPHA] Duration in seconds of node startup in total.
# TYPE kubelet_node_startup_duration_seconds gauge
# HELP kubelet_node_startup_post_registration_duration_seconds [ALPHA] Duration in seconds of node startup after registration.
# TYPE kubelet_node_startup_post_registration_duration_seconds gauge
# HELP kubelet_node_startup_pre_kubelet_duration_seconds [ALPHA] Duration in seconds of node startup before kubelet starts.
# TYPE kubelet_node_startup_pre_kubelet_duration_seconds gauge
# HELP kubelet_node_startup_pre_registration_duration_seconds [ALPHA] Duration in seconds of node startup before registration.
# TYPE kubelet_node_startup_pre_registration_duration_seconds gauge
# HELP kubelet_node_startup_registration_duration_seconds [ALPHA] Duration in seconds of node startup during registration.
# TYPE kubelet_node_startup_registration_duration_seconds gauge
# HELP kubelet_orphan_pod_cleaned_volumes [ALPHA] The total number of orphaned Pods whose volumes were cleaned in the last periodic sweep.
# TYPE kubelet_orphan_pod_cleaned_volumes gauge
# HELP kubelet_orphan_pod_cleaned_volumes_errors [ALPHA] The number of orphaned Pods whose volumes failed to be cleaned in the last periodic sweep.
# TYPE kubelet_orphan_pod_cleaned_volumes_errors gauge
# HELP kubelet_orphaned_runtime_pods_total [ALPHA] Number of pods that have been detected in the container runtime without being already known to the pod worker. This typically indicates the kubelet was restarted while a pod was force deleted in the API or in the local configuration, which is unusual.
# TYPE kubelet_orphaned_runtime_pods_total counter
# HELP kubelet_pleg_discard_events [ALPHA] The number of discard events in PLEG.
# TYPE kubelet_pleg_discard_events counter
# HELP kubelet_pleg_last_seen_seconds [ALPHA] Timestamp in seconds when PLEG was last seen active.
# TYPE kubelet_pleg_last_seen_seconds gauge
# HELP kubelet_pleg_pod_relist_duration_seconds [ALPHA] Duration in seconds for relisting a single pod in PLEG.
# TYPE kubelet_pleg_pod_relist_duration_seconds histogram
# HELP kubelet_pleg_relist_duration_seconds [ALPHA] Duration in seconds for relisting pods in PLEG.
# TYPE kubelet_pleg_relist_duration_seconds histogram
# HELP kubelet_pleg_relist_interval_seconds [ALPHA] Interval in seconds between relisting in PLEG.
# TYPE kubelet_pleg_relist_interval_seconds histogram
# HELP kubelet_pod_in_progress_resizes [ALPHA] Number of in-progress resizes for pods.
# TYPE kubelet_pod_in_progress_resizes gauge
# HELP kubelet_pod_start_duration_seconds [ALPHA] Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run
# TYPE kubelet_pod_start_duration_seconds histogram
# HELP kubelet_pod_start_sli_duration_seconds [ALPHA] Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch
# TYPE kubelet_pod_start_sli_duration_seconds histogram
# HELP kubelet_pod_start_total_duration_seconds [ALPHA] Duration in seconds to start a pod since creation, including time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch
# TYPE kubelet_pod_start_total_duration_seconds histogram
# HELP kubelet_pod_status_sync_duration_seconds [ALPHA] Duration in seconds to sync a pod status update. Measures time from detection of a change to pod status until the API is successfully updated for that pod, even if multiple intevening changes to pod status occur.
# TYPE kubelet_pod_status_sync_duration_seconds histogram
# HELP kubelet_pod_watch_events_dropped_total [ALPHA] Cumulative number of pod watch events dropped.
# TYPE kubelet_pod_watch_events_dropped_total counter
# HELP kubelet_pod_worker_duration_seconds [ALPHA] Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync
# TYPE kubelet_pod_worker_duration_seconds histogram
# HELP kubelet_pod_worker_start_duration_seconds [ALPHA] Duration in seconds from kubelet seeing a pod to starting a worker.
# TYPE kubelet_pod_worker_start_duration_seconds histogram
# HELP kubelet_restarted_pods_total [ALPHA] Number of pods that have been restarted because they were deleted and recreated with the same UID while the kubelet was watching them (common for static pods, extremely uncommon for API pods)
# TYPE kubelet_restarted_pods_total counter
# HELP kubelet_run_podsandbox_duration_seconds [ALPHA] Duration in seconds of the run_podsandbox operations. Broken down by RuntimeClass.Handler.
# TYPE kubelet_run_podsandbox_duration_seconds histogram
# HELP kubelet_running_containers [ALPHA] Number of containers currently running
# TYPE kubelet_running_containers gauge
# HELP kubelet_running_pods [ALPHA] Number of pods that have a running pod sandbox
# TYPE kubelet_running_pods gauge
# HELP kubelet_runtime_operations_duration_seconds [ALPHA] Duration in seconds of runtime operations. Broken down by operation type.
# TYPE kubelet_runtime_operations_duration_seconds histogram
# HELP kubelet_runtime_operations_total [ALPHA] Cumulative number of runtime operations by operation type.
# TYPE kubelet_runtime_operations_total counter
# HELP kubelet_sleep_action_terminated_early_total [ALPHA] The number of times lifecycle sleep handler got terminated before it finishes
# TYPE kubelet_sleep_action_terminated_early_total counter
# HELP kubelet_started_containers_total [ALPHA] Cumulative number of containers started
# TYPE kubelet_started_containers_total counter
# HELP kubelet_started_pods_errors_total [ALPHA] Cumulative number of errors when starting pods
# TYPE kubelet_started_pods_errors_total counter
# HELP kubelet_started_pods_total [ALPHA] Cumulative number of pods started
# TYPE kubelet_started_pods_total counter
# HELP kubelet_started_user_namespaced_pods_errors_total [ALPHA] Cumulative number of errors when starting pods with user namespaces. This metric will only be collected on Linux.
# TYPE kubelet_started_user_namespaced_pods_errors_total counter
# HELP kubelet_started_user_namespaced_pods_total [ALPHA] Cumulative number of pods with user namespaces started. This metric will only be collected on Linux.
# TYPE kubelet_started_user_namespaced_pods_total counter
# HELP kubelet_terminated_containers_total [ALPHA] Cumulative number of container terminations.
# TYPE kubelet_terminated_containers_total counter
# HELP kubelet_topology_manager_admission_duration_ms [ALPHA] Duration in milliseconds to serve a pod admission request.
# TYPE kubelet_topology_manager_admission_duration_ms histogram
# HELP kubelet_topology_manager_admission_errors_total [ALPHA] The number of admission request failures where resources could not be aligned.
# TYPE kubelet_topology_manager_admission_errors_total counter
# HELP kubelet_topology_manager_admission_requests_total [ALPHA] The number of admission requests where resources have to be aligned.
# TYPE kubelet_topology_manager_admission_requests_total counter
# HELP kubelet_working_pods [ALPHA] Number of pods the kubelet is actually running, broken down by lifecycle phase, whether the pod is desired, orphaned, or runtime only (also orphaned), and whether the pod is static. An orphaned pod has been removed from local configuration or force deleted in the API and consumes resources that are not otherwise visible.
# TYPE kubelet_working_pods gauge
`;

/**
 * The kubelet_* families upstream registers that its scrape above has no series of (vectors
 * nothing was recorded in, or families registered only with a credential provider
 * configuration), with the HELP of pkg/kubelet/metrics, pkg/kubelet/server/metrics and
 * pkg/credentialprovider/plugin/metrics.go.
 */
const UPSTREAM_UNSCRAPED_FAMILIES =
  `# HELP kubelet_credential_provider_config_info [ALPHA] Information about the last applied credential provider configuration with hash as label
# TYPE kubelet_credential_provider_config_info gauge
# HELP kubelet_credential_provider_plugin_duration [ALPHA] Duration of execution in seconds for credential provider plugin
# TYPE kubelet_credential_provider_plugin_duration histogram
# HELP kubelet_device_plugin_alloc_duration_seconds [ALPHA] Duration in seconds to serve a device plugin Allocation request. Broken down by resource name.
# TYPE kubelet_device_plugin_alloc_duration_seconds histogram
# HELP kubelet_device_plugin_registration_total [ALPHA] Cumulative number of device plugin registrations. Broken down by resource name.
# TYPE kubelet_device_plugin_registration_total counter
# HELP kubelet_pod_resources_endpoint_errors_get [ALPHA] Number of requests to the PodResource Get endpoint which returned error. Broken down by server api version.
# TYPE kubelet_pod_resources_endpoint_errors_get counter
# HELP kubelet_pod_resources_endpoint_errors_get_allocatable [ALPHA] Number of requests to the PodResource GetAllocatableResources endpoint which returned error. Broken down by server api version.
# TYPE kubelet_pod_resources_endpoint_errors_get_allocatable counter
# HELP kubelet_pod_resources_endpoint_errors_list [ALPHA] Number of requests to the PodResource List endpoint which returned error. Broken down by server api version.
# TYPE kubelet_pod_resources_endpoint_errors_list counter
# HELP kubelet_pod_resources_endpoint_requests_get [ALPHA] Number of requests to the PodResource Get endpoint. Broken down by server api version.
# TYPE kubelet_pod_resources_endpoint_requests_get counter
# HELP kubelet_pod_resources_endpoint_requests_get_allocatable [ALPHA] Number of requests to the PodResource GetAllocatableResources endpoint. Broken down by server api version.
# TYPE kubelet_pod_resources_endpoint_requests_get_allocatable counter
# HELP kubelet_pod_resources_endpoint_requests_list [ALPHA] Number of requests to the PodResource List endpoint. Broken down by server api version.
# TYPE kubelet_pod_resources_endpoint_requests_list counter
# HELP kubelet_pod_resources_endpoint_requests_total [ALPHA] Cumulative number of requests to the PodResource endpoint. Broken down by server api version.
# TYPE kubelet_pod_resources_endpoint_requests_total counter
# HELP kubelet_credential_provider_plugin_errors_total [ALPHA] Number of errors from credential provider plugin
# TYPE kubelet_credential_provider_plugin_errors_total counter
# HELP kubelet_container_requested_resizes_total [ALPHA] Number of requested resizes, counted at the container level. Different resources on the same container are counted separately. The 'requirement' label refers to 'memory' or 'limits'; the 'operation' label can be one of 'add', 'remove', 'increase' or 'decrease'.
# TYPE kubelet_container_requested_resizes_total counter
# HELP kubelet_evictions [ALPHA] Cumulative number of pod evictions by eviction signal
# TYPE kubelet_evictions counter
# HELP kubelet_http_requests_duration_seconds [ALPHA] Duration in seconds to serve http requests
# TYPE kubelet_http_requests_duration_seconds histogram
# HELP kubelet_pod_deferred_accepted_resizes_total [ALPHA] Cumulative number of resizes that were accepted after being deferred.
# TYPE kubelet_pod_deferred_accepted_resizes_total counter
# HELP kubelet_pod_infeasible_resizes_total [ALPHA] Number of infeasible resizes for pods.
# TYPE kubelet_pod_infeasible_resizes_total counter
# HELP kubelet_pod_pending_resizes [ALPHA] Number of pending resizes for pods.
# TYPE kubelet_pod_pending_resizes gauge
# HELP kubelet_pod_resize_duration_milliseconds [ALPHA] Duration in milliseconds to actuate a pod resize
# TYPE kubelet_pod_resize_duration_milliseconds histogram
# HELP kubelet_run_podsandbox_errors_total [ALPHA] Cumulative number of the run_podsandbox operation errors by RuntimeClass.Handler.
# TYPE kubelet_run_podsandbox_errors_total counter
# HELP kubelet_runtime_operations_errors_total [ALPHA] Cumulative number of runtime operation errors by operation type.
# TYPE kubelet_runtime_operations_errors_total counter
# HELP kubelet_started_containers_errors_total [ALPHA] Cumulative number of errors when starting containers
# TYPE kubelet_started_containers_errors_total counter
`;

const HTTP_LABELS = ["long_running", "method", "path", "server_type"];

/** Upstream's label names (sorted) of every kubelet_* vector, from the scrape or the Go source. */
const UPSTREAM_LABELS: Readonly<Record<string, readonly string[]>> = {
  kubelet_active_pods: ["static"],
  kubelet_cgroup_manager_duration_seconds: ["operation_type"],
  kubelet_container_requested_resizes_total: ["operation", "requirement", "resource"],
  kubelet_credential_provider_config_info: ["hash"],
  kubelet_credential_provider_plugin_duration: ["plugin_name"],
  kubelet_credential_provider_plugin_errors_total: ["plugin_name"],
  kubelet_cri_losing_support: ["version"],
  kubelet_desired_pods: ["static"],
  kubelet_device_plugin_alloc_duration_seconds: ["resource_name"],
  kubelet_device_plugin_registration_total: ["resource_name"],
  kubelet_evictions: ["eviction_signal"],
  kubelet_http_inflight_requests: HTTP_LABELS,
  kubelet_http_requests_duration_seconds: HTTP_LABELS,
  kubelet_http_requests_total: HTTP_LABELS,
  kubelet_image_manager_ensure_image_requests_total: [
    "present_locally",
    "pull_policy",
    "pull_required",
  ],
  kubelet_imagemanager_image_mustpull_checks_total: ["result"],
  kubelet_metrics_provider: ["provider"],
  kubelet_node_name: ["node"],
  kubelet_pod_deferred_accepted_resizes_total: ["retry_trigger"],
  kubelet_pod_infeasible_resizes_total: ["reason_detail"],
  kubelet_pod_pending_resizes: ["reason"],
  kubelet_pod_resize_duration_milliseconds: ["success"],
  kubelet_pod_resources_endpoint_errors_get: ["server_api_version"],
  kubelet_pod_resources_endpoint_errors_get_allocatable: ["server_api_version"],
  kubelet_pod_resources_endpoint_errors_list: ["server_api_version"],
  kubelet_pod_resources_endpoint_requests_get: ["server_api_version"],
  kubelet_pod_resources_endpoint_requests_get_allocatable: ["server_api_version"],
  kubelet_pod_resources_endpoint_requests_list: ["server_api_version"],
  kubelet_pod_resources_endpoint_requests_total: ["server_api_version"],
  kubelet_pod_worker_duration_seconds: ["operation_type"],
  kubelet_restarted_pods_total: ["static"],
  kubelet_run_podsandbox_duration_seconds: ["runtime_handler"],
  kubelet_run_podsandbox_errors_total: ["runtime_handler"],
  kubelet_running_containers: ["container_state"],
  kubelet_runtime_operations_duration_seconds: ["operation_type"],
  kubelet_runtime_operations_errors_total: ["operation_type"],
  kubelet_runtime_operations_total: ["operation_type"],
  kubelet_started_containers_errors_total: ["code", "container_type"],
  kubelet_started_containers_total: ["container_type"],
  kubelet_terminated_containers_total: ["container_type", "exit_code", "reason"],
  kubelet_working_pods: ["config", "lifecycle", "static"],
};

const DEF = "0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10";
const POD_START = "0.5 1 2 3 4 5 6 8 10 20 30 45 60 120 180 240 300 360 480 600 900 1200 1800 " +
  "2700 3600";

/** Upstream's bucket bounds of every kubelet_* histogram, as its scrape or the Go source has them. */
const UPSTREAM_BUCKETS: Readonly<Record<string, string>> = {
  kubelet_cgroup_manager_duration_seconds: DEF,
  kubelet_containers_per_pod_count: "1 2 4 8 16",
  kubelet_credential_provider_plugin_duration: DEF,
  kubelet_device_plugin_alloc_duration_seconds: DEF,
  kubelet_evented_pleg_connection_latency_seconds: DEF,
  kubelet_http_requests_duration_seconds: DEF,
  kubelet_pleg_pod_relist_duration_seconds: DEF,
  kubelet_pleg_relist_duration_seconds: DEF,
  kubelet_pleg_relist_interval_seconds: DEF,
  kubelet_pod_resize_duration_milliseconds:
    "10 50 100 500 1000 2000 5000 10000 20000 30000 60000 120000 300000 600000",
  kubelet_pod_start_duration_seconds: POD_START,
  kubelet_pod_start_sli_duration_seconds: POD_START,
  kubelet_pod_start_total_duration_seconds: POD_START,
  kubelet_pod_status_sync_duration_seconds: "0.01 0.05 0.1 0.5 1 5 10 20 30 45 60",
  kubelet_pod_worker_duration_seconds: DEF,
  kubelet_pod_worker_start_duration_seconds: DEF,
  kubelet_run_podsandbox_duration_seconds: DEF,
  kubelet_runtime_operations_duration_seconds: "0.005 0.0125 0.03125 0.078125 0.1953125 " +
    "0.48828125 1.220703125 3.0517578125 7.62939453125 19.073486328125 47.6837158203125 " +
    "119.20928955078125 298.0232238769531 745.0580596923828",
  kubelet_topology_manager_admission_duration_ms:
    "0.05 0.1 0.2 0.4 0.8 1.6 3.2 6.4 12.8 25.6 51.2 102.4 204.8 409.6 819.2",
};

/** `# HELP` line and `# TYPE` line of each family in `text`, by family name. */
function familyLines(text: string): Map<string, string> {
  const out = new Map<string, string>();
  const lines = text.split("\n");
  lines.forEach((line, i) => {
    const m = /^# HELP (\S+) /.exec(line);
    if (m) out.set(m[1]!, `${line}\n${lines[i + 1]}`);
  });
  return out;
}

/** KubeletMetrics' metrics, its own and those of the family groups it holds (image, volume, ...). */
function kubeletMetricsOf(m: KubeletMetrics): (Counter | Gauge | Histogram)[] {
  const isMetric = (v: unknown): v is Counter | Gauge | Histogram =>
    v instanceof Counter || v instanceof Gauge || v instanceof Histogram;
  return Object.values(m).flatMap((v) =>
    isMetric(v) ? [v] : typeof v === "object" && v !== null ? Object.values(v).filter(isMetric) : []
  );
}

Deno.test("KubeletMetrics renders each plain kubelet_* family of upstream's scrape before anything is recorded", async () => {
  const m = new KubeletMetrics({ process: false });
  const upstream = familyLines(UPSTREAM_KUBELET_FAMILIES);
  const vectors = new Set(kubeletMetricsOf(m).filter((x) => x.vector).map((x) => x.name));
  const rendered = familyLines(await m.render());
  const plain = [...upstream.keys()].filter((n) => !vectors.has(n));
  // Every vector of upstream's is one of ours too (upstream's scrape names its labels).
  for (const name of Object.keys(UPSTREAM_LABELS)) assert.ok(vectors.has(name), name);
  assert.ok(plain.length >= 40, `${plain.length} plain families`);
  const differ = plain.filter((name) => rendered.get(name) !== upstream.get(name));
  assert.deepEqual(differ.map((n) => rendered.get(n) ?? `${n} missing`), []);
});

Deno.test("KubeletMetrics renders every kubelet_* family with upstream's HELP, type, labels and buckets", async () => {
  const m = new KubeletMetrics({ process: false });
  // Vectors render once they hold a series: one for each, over its own label names.
  for (const metric of kubeletMetricsOf(m)) {
    if (!metric.vector) continue;
    const labels = Object.fromEntries(metric.labelNames.map((n) => [n, "x"]));
    if (metric instanceof Counter) metric.inc(labels);
    else if (metric instanceof Gauge) metric.set(1, labels);
    else metric.observe(0, labels);
  }
  const text = await m.render();
  const rendered = familyLines(text);
  const upstream = familyLines(UPSTREAM_KUBELET_FAMILIES + UPSTREAM_UNSCRAPED_FAMILIES);
  assert.equal(upstream.size, 72 + 22);
  const differ = [...upstream].filter(([name, lines]) => rendered.get(name) !== lines);
  assert.deepEqual(differ.map(([n]) => rendered.get(n) ?? `${n} missing`), []);
  // No kubelet_* family upstream lacks.
  for (const name of rendered.keys()) {
    if (name.startsWith("kubelet_")) assert.ok(upstream.has(name), `${name} is not upstream's`);
  }
  for (const f of parseExposition(text)) {
    if (!f.name.startsWith("kubelet_")) continue;
    const want = UPSTREAM_LABELS[f.name] ?? [];
    for (const s of f.samples) {
      assert.deepEqual(Object.keys(s.labels).filter((k) => k !== "le").sort(), want, f.name);
    }
    if (f.type !== "histogram") continue;
    // The bounds of the first series, up to its +Inf.
    const bounds = f.samples.filter((s) => s.suffix === "_bucket").map((s) => s.labels.le);
    assert.equal(
      bounds.slice(0, bounds.indexOf("+Inf")).join(" "),
      UPSTREAM_BUCKETS[f.name],
      f.name,
    );
  }
});

Deno.test("KubeletMetrics registers the component, client, apiserver and runtime families", async () => {
  const m = new KubeletMetrics({ process: false });
  m.workqueue.queue("kubelet_log_rotate_manager");
  const families = new Map(parseExposition(await m.render()).map((f) => [f.name, f]));
  for (
    const name of [
      "kubernetes_build_info",
      "kubernetes_feature_enabled",
      "registered_metrics_total",
      "disabled_metrics_total",
      "hidden_metrics_total",
      "rest_client_exec_plugin_ttl_seconds",
      "rest_client_transport_cache_entries",
      "apiserver_client_certificate_expiration_seconds",
      "apiserver_webhooks_x509_missing_san_total",
      "aggregator_discovery_aggregation_count_total",
      "workqueue_adds_total",
      "deno_heap_size_used_bytes",
    ]
  ) assert.ok(families.has(name), name);
  // Every family registered so far is counted, these meta metrics included.
  const registered = families.get("registered_metrics_total")!.samples
    .reduce((n, s) => n + s.value, 0);
  assert.ok(registered > 100, `${registered}`);
});

Deno.test("KubeletMetrics serves plugin_manager_total_plugins from the plugin manager's caches once it runs", async () => {
  const m = new KubeletMetrics({ process: false });
  const names = async () => parseExposition(await m.render()).map((f) => f.name);
  assert.equal((await names()).includes("plugin_manager_total_plugins"), false);
  m.pluginManager.setSource(() => ({ actual: [], desired: [] }));
  assert.equal((await names()).includes("plugin_manager_total_plugins"), false, "no series");
  m.pluginManager.setSource(() => ({
    actual: ["/var/lib/kubelet/plugins_registry/a.sock"],
    desired: ["/var/lib/kubelet/plugins_registry/a.sock", "/var/lib/kubelet/plugins_registry/b"],
  }));
  const text = await m.render();
  assert.ok(
    text.includes(
      "# HELP plugin_manager_total_plugins [ALPHA] Number of plugins in Plugin Manager\n" +
        "# TYPE plugin_manager_total_plugins gauge\n" +
        'plugin_manager_total_plugins{socket_path="/var/lib/kubelet/plugins_registry/a.sock",state="actual_state_of_world"} 1\n' +
        'plugin_manager_total_plugins{socket_path="/var/lib/kubelet/plugins_registry/a.sock",state="desired_state_of_world"} 1\n' +
        'plugin_manager_total_plugins{socket_path="/var/lib/kubelet/plugins_registry/b",state="desired_state_of_world"} 1\n',
    ),
    text,
  );
});
