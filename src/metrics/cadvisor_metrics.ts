/**
 * @module
 * The kubelet's /metrics/cadvisor text, rendered from per-cgroup samples the stats provider
 * already holds (no file reads here). Names, HELP texts, types, labels and timestamps follow
 * cAdvisor v0.56.2's `metrics/prometheus.go` and `metrics/prometheus_machine.go` as 1.36's
 * `pkg/kubelet/server/server.go` registers them: the metric sets cpu, memory, cpuLoad, diskIO,
 * disk, network, app, process, oom (+ pressure with KubeletPSI), no per-CPU usage, and the
 * kubelet's label function (container, id, image, name, namespace, pod on every container
 * sample). Families whose data an entry does not carry are left out. Two families are written
 * as the Go kubelet writes them, always 0: `container_cpu_load_average_10s`,
 * `container_cpu_load_d_average_10s` and `container_tasks_state` belong to cAdvisor's cpuLoad
 * set, which the kubelet registers on the endpoint but leaves out of the set its cAdvisor
 * manager collects, so upstream writes zeros for every cgroup ({@link CadvisorEntry.loadStats}).
 * `container_fs_*` (writable layers and devices) need cAdvisor's filesystem handlers, which the
 * containerd handler does not run (`hasFilesystem` false) and the root container reports from its
 * device list: written when an entry carries them. Pressure families are written only with
 * {@link CadvisorMetricsOptions.pressure} (upstream: only where /sys/fs/cgroup/cpu.pressure
 * exists, a cgroup v2 host).
 */

import { type Labels, type MetricType, PrometheusText } from "./prometheus.ts";

/** One cgroup's sample, as cAdvisor's ContainerInfo with its newest stats. */
export interface CadvisorEntry {
  /** cgroup path as cAdvisor names containers: "/" for the machine, "/kubepods/.../<id>" etc. */
  readonly id: string;
  /** cAdvisor's `name` label (the runtime's container name/id); "" for raw cgroups. */
  readonly name: string;
  readonly image: string;
  /** Kubernetes labels; "" when not a pod container (cAdvisor still emits them empty). */
  readonly container: string;
  readonly pod: string;
  readonly namespace: string;
  /** When the stats were taken; stamps every stats sample. */
  readonly timestampMs: number;
  /** CPU times in seconds (nanoseconds / 1e9). */
  readonly cpu?: {
    readonly usageSecondsTotal: number;
    readonly userSecondsTotal?: number;
    readonly systemSecondsTotal?: number;
    /** CFS throttling; written only when the spec has a quota, as cAdvisor's condition. */
    readonly cfs?: {
      readonly periods: number;
      readonly throttledPeriods: number;
      readonly throttledSecondsTotal: number;
      readonly burstPeriods?: number;
      readonly burstSecondsTotal?: number;
    };
  };
  /**
   * Write the cpuLoad set (load averages and tasks by state) as the kubelet's cAdvisor does:
   * all zero, as its manager does not collect them. @default false
   */
  readonly loadStats?: boolean;
  readonly memory?: {
    readonly usageBytes: number;
    readonly workingSetBytes: number;
    readonly rssBytes?: number;
    readonly cacheBytes?: number;
    readonly swapBytes?: number;
    readonly failcnt?: number;
    /** This cgroup's own faults (cAdvisor's ContainerData). */
    readonly pageFaults?: number;
    readonly majorPageFaults?: number;
    /** Faults including descendants (HierarchicalData); the own counts when omitted. */
    readonly hierarchicalPageFaults?: number;
    readonly hierarchicalMajorPageFaults?: number;
    /** The spec's memory limit; Infinity (or anything above 2^62) for none, written as 0. */
    readonly limitBytes?: number;
    readonly kernelUsageBytes?: number;
    readonly mappedFileBytes?: number;
    readonly maxUsageBytes?: number;
    readonly totalActiveFileBytes?: number;
    readonly totalInactiveFileBytes?: number;
  };
  /** The cgroup's spec (cAdvisor's ContainerSpec): CPU and memory settings. */
  readonly spec?: {
    /** cpu.shares (or v2 weight as shares); with the period, the spec "has CPU". */
    readonly cpuShares?: number;
    readonly cpuPeriod?: number;
    /** 0 or undefined: no quota (no spec_cpu_quota, no cfs families). */
    readonly cpuQuota?: number;
    /** With memoryLimit the spec "has memory"; above 2^62 is written as 0. */
    readonly memoryLimit?: number;
    readonly memorySwapLimit?: number;
    readonly memoryReservation?: number;
  };
  /** Block I/O per device (cAdvisor's DiskIo IoServiceBytes and IoServiced). */
  readonly blkio?: readonly {
    readonly device: string;
    readonly major: number;
    readonly minor: number;
    readonly readBytes: number;
    readonly writeBytes: number;
    readonly reads: number;
    readonly writes: number;
  }[];
  readonly oomEvents?: number;
  readonly threads?: number;
  /** pids.max; 0 for unlimited, as cAdvisor writes it. */
  readonly threadsMax?: number;
  readonly fileDescriptors?: number;
  readonly sockets?: number;
  /** Soft limits of the container's first process (cAdvisor reads max_open_files only). */
  readonly ulimits?: readonly { readonly name: string; readonly soft: number }[];
  /** Pressure stall totals in µs (written with {@link CadvisorMetricsOptions.pressure}). */
  readonly pressure?: {
    readonly cpu?: { readonly someUs: number; readonly fullUs: number };
    readonly memory?: { readonly someUs: number; readonly fullUs: number };
    readonly io?: { readonly someUs: number; readonly fullUs: number };
  };
  readonly network?: readonly {
    readonly name: string;
    readonly rxBytes: number;
    readonly rxErrors: number;
    readonly txBytes: number;
    readonly txErrors: number;
    readonly rxPackets?: number;
    readonly txPackets?: number;
    readonly rxDropped?: number;
    readonly txDropped?: number;
  }[];
  readonly fs?: readonly {
    readonly device: string;
    readonly usageBytes: number;
    readonly limitBytes?: number;
    readonly inodesFree?: number;
    readonly inodes?: number;
  }[];
  /** The cgroup's creation time in seconds since the epoch (floored, no timestamp). */
  readonly startTimeSeconds?: number;
  readonly processes?: number;
}

/** The machine facts cAdvisor's machine collector writes. */
export interface CadvisorMachine {
  readonly numCores: number;
  readonly memoryBytes: number;
  readonly numPhysicalCores?: number;
  readonly numSockets?: number;
  /** s390x only; 0 elsewhere, as cAdvisor reads them. */
  readonly numBooks?: number;
  readonly numDrawers?: number;
  /** Intel NVM (ipmctl): cAdvisor's build in the kubelet has no NVM support, so 0s. */
  readonly nvm?: {
    readonly memoryModeCapacity: number;
    readonly appDirectModeCapacity: number;
    readonly avgPowerBudget: number;
  };
  readonly swapBytes?: number;
  /** @default "" */
  readonly machineID?: string;
  /** @default "" */
  readonly systemUUID?: string;
  /** @default "" */
  readonly bootID?: string;
  /** MachineInfo.Timestamp (when it was read); samples are unstamped without it. */
  readonly timestampMs?: number;
}

/** cAdvisor's VersionInfo, for `cadvisor_version_info`. */
export interface CadvisorVersionInfo {
  readonly kernelVersion: string;
  readonly osVersion: string;
  readonly dockerVersion: string;
  readonly cadvisorVersion: string;
  readonly cadvisorRevision: string;
}

/** Options of {@link renderCadvisorMetrics}. */
export interface CadvisorMetricsOptions {
  /** The scrape time: `container_last_seen`'s value (seconds) and timestamp. @default Date.now() */
  readonly nowMs?: number;
  /** Listing the containers failed: `container_scrape_error 1`. @default false */
  readonly scrapeError?: boolean;
  /** Written as `cadvisor_version_info` when given. */
  readonly versionInfo?: CadvisorVersionInfo;
  /** Register and write the container_pressure_* families (cgroup v2 hosts). @default false */
  readonly pressure?: boolean;
}

const G: MetricType = "gauge";
const C: MetricType = "counter";

/** container_network_<suffix>: what its HELP counts, and the interface field it reads. */
const NETWORK = [
  ["receive_bytes_total", "bytes received", "rxBytes"],
  ["receive_packets_total", "packets received", "rxPackets"],
  ["receive_packets_dropped_total", "packets dropped while receiving", "rxDropped"],
  ["receive_errors_total", "errors encountered while receiving", "rxErrors"],
  ["transmit_bytes_total", "bytes transmitted", "txBytes"],
  ["transmit_packets_total", "packets transmitted", "txPackets"],
  ["transmit_packets_dropped_total", "packets dropped while transmitting", "txDropped"],
  ["transmit_errors_total", "errors encountered while transmitting", "txErrors"],
] as const;

/** name → [help, type] of every family written here but the network ones. */
const FAMILIES: Readonly<Record<string, readonly [string, MetricType]>> = {
  cadvisor_version_info: [
    "A metric with a constant '1' value labeled by kernel version, OS version, docker version, cadvisor version & cadvisor revision.",
    G,
  ],
  container_last_seen: ["Last time a container was seen by the exporter", G],
  container_health_state: ["The result of the container's health check", G],
  container_cpu_user_seconds_total: ["Cumulative user cpu time consumed in seconds.", C],
  container_cpu_system_seconds_total: ["Cumulative system cpu time consumed in seconds.", C],
  container_cpu_usage_seconds_total: ["Cumulative cpu time consumed in seconds.", C],
  container_cpu_cfs_periods_total: ["Number of elapsed enforcement period intervals.", C],
  container_cpu_cfs_throttled_periods_total: ["Number of throttled period intervals.", C],
  container_cpu_cfs_throttled_seconds_total: [
    "Total time duration the container has been throttled.",
    C,
  ],
  container_cpu_cfs_burst_periods_total: ["Number of periods when burst occurs.", C],
  container_cpu_cfs_burst_seconds_total: [
    "Total time duration the container has been bursted.",
    C,
  ],
  container_cpu_load_average_10s: [
    "Value of container cpu load average over the last 10 seconds.",
    G,
  ],
  container_cpu_load_d_average_10s: [
    "Value of container cpu load.d average over the last 10 seconds.",
    G,
  ],
  container_tasks_state: ["Number of tasks in given state", G],
  container_memory_kernel_usage: ["Size of kernel memory allocated in bytes.", G],
  container_memory_mapped_file: ["Size of memory mapped files in bytes.", G],
  container_memory_max_usage_bytes: ["Maximum memory usage recorded in bytes", G],
  container_memory_total_active_file_bytes: ["Current total active file in bytes.", G],
  container_memory_total_inactive_file_bytes: ["Current total inactive file in bytes.", G],
  container_fs_reads_bytes_total: ["Cumulative count of bytes read", C],
  container_fs_reads_total: ["Cumulative count of reads completed", C],
  container_fs_writes_bytes_total: ["Cumulative count of bytes written", C],
  container_fs_writes_total: ["Cumulative count of writes completed", C],
  container_blkio_device_usage_total: ["Blkio Device bytes usage", C],
  container_oom_events_total: ["Count of out of memory events observed for the container", C],
  container_file_descriptors: ["Number of open file descriptors for the container.", G],
  container_sockets: ["Number of open sockets for the container.", G],
  container_threads_max: [
    "Maximum number of threads allowed inside the container, infinity if value is zero",
    G,
  ],
  container_threads: ["Number of threads running inside the container", G],
  container_ulimits_soft: [
    "Soft ulimit values for the container root process. Unlimited if -1, except priority and nice",
    G,
  ],
  container_spec_cpu_period: ["CPU period of the container.", G],
  container_spec_cpu_quota: ["CPU quota of the container.", G],
  container_spec_cpu_shares: ["CPU share of the container.", G],
  container_spec_memory_swap_limit_bytes: ["Memory swap limit for the container.", G],
  container_spec_memory_reservation_limit_bytes: [
    "Memory reservation limit for the container.",
    G,
  ],
  container_memory_cache: ["Number of bytes of page cache memory.", G],
  container_memory_rss: ["Size of RSS in bytes.", G],
  container_memory_swap: ["Container swap usage in bytes.", G],
  container_memory_failcnt: ["Number of memory usage hits limits", C],
  container_memory_usage_bytes: [
    "Current memory usage in bytes, including all memory regardless of when it was accessed",
    G,
  ],
  container_memory_working_set_bytes: ["Current working set in bytes.", G],
  container_memory_failures_total: ["Cumulative count of memory allocation failures.", C],
  container_fs_inodes_free: ["Number of available Inodes", G],
  container_fs_inodes_total: ["Number of Inodes", G],
  container_fs_limit_bytes: [
    "Number of bytes that can be consumed by the container on this filesystem.",
    G,
  ],
  container_fs_usage_bytes: [
    "Number of bytes that are consumed by the container on this filesystem.",
    G,
  ],
  container_processes: ["Number of processes running inside the container.", G],
  container_start_time_seconds: ["Start time of the container since unix epoch in seconds.", G],
  container_spec_memory_limit_bytes: ["Memory limit for the container.", G],
  container_scrape_error: [
    "1 if there was an error while getting container metrics, 0 otherwise",
    G,
  ],
  machine_scrape_error: ["1 if there was an error while getting machine metrics, 0 otherwise.", G],
  machine_cpu_physical_cores: ["Number of physical CPU cores.", G],
  machine_cpu_cores: ["Number of logical CPU cores.", G],
  machine_cpu_sockets: ["Number of CPU sockets.", G],
  machine_cpu_books: ["Number of CPU books.", G],
  machine_cpu_drawers: ["Number of CPU drawers.", G],
  machine_nvm_capacity: [
    "NVM capacity value labeled by NVM mode (memory mode or app direct mode).",
    G,
  ],
  machine_nvm_avg_power_budget_watts: ["NVM power budget.", G],
  machine_memory_bytes: ["Amount of memory installed on the machine.", G],
  machine_swap_bytes: ["Amount of swap memory available on the machine.", G],
};

/** container_pressure_<name>: HELP, and the resource and line it reads. */
const PRESSURE = [
  [
    "cpu_stalled_seconds_total",
    "no tasks in the container could make progress due to CPU",
    "cpu",
    "fullUs",
  ],
  ["cpu_waiting_seconds_total", "tasks in the container have waited due to CPU", "cpu", "someUs"],
  [
    "memory_stalled_seconds_total",
    "no tasks in the container could make progress due to memory",
    "memory",
    "fullUs",
  ],
  [
    "memory_waiting_seconds_total",
    "tasks in the container have waited due to memory",
    "memory",
    "someUs",
  ],
  [
    "io_stalled_seconds_total",
    "no tasks in the container could make progress due to IO",
    "io",
    "fullUs",
  ],
  ["io_waiting_seconds_total", "tasks in the container have waited due to IO", "io", "someUs"],
] as const;

/** The states container_tasks_state is written for, in cAdvisor's order. */
const TASK_STATES = ["sleeping", "running", "stopped", "uninterruptible", "iowaiting"] as const;

// Above this cAdvisor treats a memory limit as unlimited and writes 0 (kernel rounding).
const MAX_MEMORY = 2 ** 62;

/**
 * Renders /metrics/cadvisor for `entries` and `machine` (undefined when machine info could
 * not be read: `machine_scrape_error 1` and no machine samples).
 */
export function renderCadvisorMetrics(
  entries: readonly CadvisorEntry[],
  machine: CadvisorMachine | undefined,
  opts: CadvisorMetricsOptions = {},
): string {
  const out = new PrometheusText();
  for (const [name, [help, type]] of Object.entries(FAMILIES)) out.family(name, help, type);
  for (const [suffix, what] of NETWORK) {
    out.family(`container_network_${suffix}`, `Cumulative count of ${what}`, C);
  }
  if (opts.pressure) {
    for (const [suffix, what] of PRESSURE) {
      out.family(`container_pressure_${suffix}`, `Total time duration ${what} congestion.`, C);
    }
  }
  const nowMs = opts.nowMs ?? Date.now();
  const v = opts.versionInfo;
  if (v) {
    out.sample("cadvisor_version_info", {
      kernelVersion: v.kernelVersion,
      osVersion: v.osVersion,
      dockerVersion: v.dockerVersion,
      cadvisorVersion: v.cadvisorVersion,
      cadvisorRevision: v.cadvisorRevision,
    }, 1);
  }
  if (!opts.scrapeError) {
    for (const e of entries) collectEntry(out, e, nowMs, opts.pressure ?? false);
  }
  out.sample("container_scrape_error", {}, opts.scrapeError ? 1 : 0);
  if (machine) collectMachine(out, machine);
  out.sample("machine_scrape_error", {}, machine ? 0 : 1);
  return out.render();
}

function collectEntry(
  out: PrometheusText,
  e: CadvisorEntry,
  nowMs: number,
  pressure: boolean,
): void {
  const base: Labels = {
    container: e.container,
    id: e.id,
    image: e.image,
    name: e.name,
    namespace: e.namespace,
    pod: e.pod,
  };
  const ts = e.timestampMs;
  const at = (name: string, value: number | undefined, extra?: Labels) => {
    if (value !== undefined) out.sample(name, extra ? { ...base, ...extra } : base, value, ts);
  };
  // Spec samples carry no timestamp.
  if (e.startTimeSeconds !== undefined) {
    out.sample("container_start_time_seconds", base, Math.floor(e.startTimeSeconds));
  }
  const spec = e.spec;
  const memValue = (v: number) => v > MAX_MEMORY ? 0 : v;
  if (spec?.cpuShares !== undefined || spec?.cpuPeriod !== undefined) {
    out.sample("container_spec_cpu_period", base, spec.cpuPeriod ?? 0);
    if (spec.cpuQuota) out.sample("container_spec_cpu_quota", base, spec.cpuQuota);
    out.sample("container_spec_cpu_shares", base, spec.cpuShares ?? 0);
  }
  const limit = spec?.memoryLimit ?? e.memory?.limitBytes;
  if (limit !== undefined) out.sample("container_spec_memory_limit_bytes", base, memValue(limit));
  if (spec?.memoryLimit !== undefined) {
    const swap = memValue(spec.memorySwapLimit ?? 0);
    out.sample("container_spec_memory_swap_limit_bytes", base, swap);
    const reservation = memValue(spec.memoryReservation ?? 0);
    out.sample("container_spec_memory_reservation_limit_bytes", base, reservation);
  }
  out.sample("container_last_seen", base, Math.floor(nowMs / 1000), nowMs);
  // No runtime behind the CRI reports a health check: cAdvisor writes -1 for "none".
  at("container_health_state", -1);
  const cpu = e.cpu;
  if (cpu) {
    at("container_cpu_user_seconds_total", cpu.userSecondsTotal);
    at("container_cpu_system_seconds_total", cpu.systemSecondsTotal);
    // Without per-CPU usage cAdvisor writes only cpu="total", and only when it is positive.
    if (cpu.usageSecondsTotal > 0) {
      at("container_cpu_usage_seconds_total", cpu.usageSecondsTotal, { cpu: "total" });
    }
    if (cpu.cfs && spec?.cpuQuota) {
      at("container_cpu_cfs_periods_total", cpu.cfs.periods);
      at("container_cpu_cfs_throttled_periods_total", cpu.cfs.throttledPeriods);
      at("container_cpu_cfs_throttled_seconds_total", cpu.cfs.throttledSecondsTotal);
      at("container_cpu_cfs_burst_periods_total", cpu.cfs.burstPeriods);
      at("container_cpu_cfs_burst_seconds_total", cpu.cfs.burstSecondsTotal);
    }
  }
  if (e.loadStats) {
    at("container_cpu_load_average_10s", 0);
    at("container_cpu_load_d_average_10s", 0);
    for (const state of TASK_STATES) at("container_tasks_state", 0, { state });
  }
  const m = e.memory;
  if (m) {
    at("container_memory_cache", m.cacheBytes);
    at("container_memory_rss", m.rssBytes);
    at("container_memory_swap", m.swapBytes);
    at("container_memory_failcnt", m.failcnt);
    at("container_memory_usage_bytes", m.usageBytes);
    at("container_memory_working_set_bytes", m.workingSetBytes);
    at("container_memory_kernel_usage", m.kernelUsageBytes);
    at("container_memory_mapped_file", m.mappedFileBytes);
    at("container_memory_max_usage_bytes", m.maxUsageBytes);
    at("container_memory_total_active_file_bytes", m.totalActiveFileBytes);
    at("container_memory_total_inactive_file_bytes", m.totalInactiveFileBytes);
    const failures = "container_memory_failures_total";
    at(failures, m.pageFaults, { failure_type: "pgfault", scope: "container" });
    at(failures, m.majorPageFaults, { failure_type: "pgmajfault", scope: "container" });
    const hpf = m.hierarchicalPageFaults ?? m.pageFaults;
    const hmpf = m.hierarchicalMajorPageFaults ?? m.majorPageFaults;
    at(failures, hpf, { failure_type: "pgfault", scope: "hierarchy" });
    at(failures, hmpf, { failure_type: "pgmajfault", scope: "hierarchy" });
  }
  for (const fs of e.fs ?? []) {
    const device = { device: fs.device };
    at("container_fs_inodes_free", fs.inodesFree, device);
    at("container_fs_inodes_total", fs.inodes, device);
    at("container_fs_limit_bytes", fs.limitBytes, device);
    at("container_fs_usage_bytes", fs.usageBytes, device);
  }
  for (const n of e.network ?? []) {
    for (const [suffix, , field] of NETWORK) {
      at(`container_network_${suffix}`, n[field], { interface: n.name });
    }
  }
  for (const b of e.blkio ?? []) {
    const device = { device: b.device };
    at("container_fs_reads_bytes_total", b.readBytes, device);
    at("container_fs_reads_total", b.reads, device);
    at("container_fs_writes_bytes_total", b.writeBytes, device);
    at("container_fs_writes_total", b.writes, device);
    const id = { device: b.device, major: String(b.major), minor: String(b.minor) };
    at("container_blkio_device_usage_total", b.readBytes, { ...id, operation: "Read" });
    at("container_blkio_device_usage_total", b.writeBytes, { ...id, operation: "Write" });
  }
  at("container_processes", e.processes);
  at("container_file_descriptors", e.fileDescriptors);
  at("container_sockets", e.sockets);
  at("container_threads_max", e.threadsMax);
  at("container_threads", e.threads);
  for (const u of e.ulimits ?? []) at("container_ulimits_soft", u.soft, { ulimit: u.name });
  at("container_oom_events_total", e.oomEvents);
  if (pressure) {
    for (const [suffix, , resource, line] of PRESSURE) {
      const p = e.pressure?.[resource];
      if (p) at(`container_pressure_${suffix}`, p[line] / 1e6);
    }
  }
}

function collectMachine(out: PrometheusText, m: CadvisorMachine): void {
  const labels: Labels = {
    machine_id: m.machineID ?? "",
    system_uuid: m.systemUUID ?? "",
    boot_id: m.bootID ?? "",
  };
  const put = (name: string, value: number | undefined) => {
    if (value !== undefined) out.sample(name, labels, value, m.timestampMs);
  };
  put("machine_cpu_physical_cores", m.numPhysicalCores);
  put("machine_cpu_cores", m.numCores);
  put("machine_cpu_sockets", m.numSockets);
  put("machine_cpu_books", m.numBooks);
  put("machine_cpu_drawers", m.numDrawers);
  if (m.nvm) {
    const nvm = (mode: string, v: number) =>
      out.sample("machine_nvm_capacity", { ...labels, mode }, v, m.timestampMs);
    nvm("memory_mode", m.nvm.memoryModeCapacity);
    nvm("app_direct_mode", m.nvm.appDirectModeCapacity);
    put("machine_nvm_avg_power_budget_watts", m.nvm.avgPowerBudget);
  }
  put("machine_memory_bytes", m.memoryBytes);
  put("machine_swap_bytes", m.swapBytes);
}
