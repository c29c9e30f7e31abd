/**
 * @module
 * The kubelet's /metrics/cadvisor text, rendered from per-cgroup samples the stats provider
 * already holds (no file reads here). Names, HELP texts, types, labels and timestamps follow
 * cAdvisor v0.56.2's `metrics/prometheus.go` and `metrics/prometheus_machine.go` as 1.36's
 * `pkg/kubelet/server/server.go` registers them: the metric sets cpu, memory, cpuLoad, diskIO,
 * disk, network, app, process, oom (+ pressure with KubeletPSI), no per-CPU usage, and the
 * kubelet's label function (container, id, image, name, namespace, pod on every container
 * sample). Families whose data an entry does not carry are left out; see the report of issue 9.
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
  };
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
  machine_memory_bytes: ["Amount of memory installed on the machine.", G],
  machine_swap_bytes: ["Amount of swap memory available on the machine.", G],
};

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
  if (!opts.scrapeError) { for (const e of entries) collectEntry(out, e, nowMs); }
  out.sample("container_scrape_error", {}, opts.scrapeError ? 1 : 0);
  if (machine) collectMachine(out, machine);
  out.sample("machine_scrape_error", {}, machine ? 0 : 1);
  return out.render();
}

function collectEntry(out: PrometheusText, e: CadvisorEntry, nowMs: number): void {
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
  const limit = e.memory?.limitBytes;
  if (limit !== undefined) {
    out.sample("container_spec_memory_limit_bytes", base, limit > MAX_MEMORY ? 0 : limit);
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
  }
  const m = e.memory;
  if (m) {
    at("container_memory_cache", m.cacheBytes);
    at("container_memory_rss", m.rssBytes);
    at("container_memory_swap", m.swapBytes);
    at("container_memory_failcnt", m.failcnt);
    at("container_memory_usage_bytes", m.usageBytes);
    at("container_memory_working_set_bytes", m.workingSetBytes);
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
  at("container_processes", e.processes);
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
  put("machine_memory_bytes", m.memoryBytes);
  put("machine_swap_bytes", m.swapBytes);
}
