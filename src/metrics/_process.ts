/**
 * @module
 * The process collector of the kubelet's /metrics: the agent's own CPU time, memory, start
 * time, file descriptors and network bytes, read from `/proc/self` at each scrape, with the
 * names and HELP of client_golang's process collector (which component-base registers raw:
 * no stability prefix). A value whose file cannot be read or parsed is left out, as upstream
 * does with ReportErrors off. Corresponds to client_golang
 * `prometheus/process_collector_procfsenabled.go` over prometheus/procfs.
 */

import type { PrometheusText } from "./prometheus.ts";
import { hostPath } from "../privilege/host_root.ts";
import { countOpenFds } from "../privilege/launcher_calls.ts";

/** procfs's userHZ: the kernel's USER_HZ, 100 on every Linux architecture Go supports. */
const USER_HZ = 100;

/** Where the collector reads; a fixture directory in tests. */
export interface ProcessCollectorOptions {
  /** The process directory. @default "/proc/self" */
  readonly procSelf?: string;
  /** /proc/stat, for the boot time. @default "/proc/stat" */
  readonly procStat?: string;
}

/** Values read from one scrape; each undefined when its source failed. */
export interface ProcessSample {
  cpuSeconds?: number;
  virtualMemoryBytes?: number;
  residentMemoryBytes?: number;
  startTimeSeconds?: number;
  openFds?: number;
  maxFds?: number;
  maxVirtualMemoryBytes?: number;
  networkReceiveBytes?: number;
  networkTransmitBytes?: number;
}

async function readText(path: string): Promise<string | undefined> {
  try {
    return await Deno.readTextFile(path);
  } catch {
    return undefined;
  }
}

/** A limit of /proc/<pid>/limits: the soft value; "unlimited" is Go's ^uint64(0). */
function softLimit(text: string, name: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(name));
  const soft = line?.slice(name.length).trim().split(/\s+/)[0];
  if (soft === "unlimited") return 2 ** 64;
  return soft !== undefined && /^\d+$/.test(soft) ? Number(soft) : undefined;
}

/** IpExt InOctets/OutOctets of /proc/<pid>/net/netstat (header line, then values). */
function ipExtOctets(text: string): { in: number; out: number } | undefined {
  const lines = text.split("\n").filter((l) => l.startsWith("IpExt:"));
  const names = lines[0]?.split(/\s+/);
  const values = lines[1]?.split(/\s+/);
  if (!names || !values) return undefined;
  const get = (n: string) => {
    const v = values[names.indexOf(n)];
    return v !== undefined && /^\d+$/.test(v) ? Number(v) : 0;
  };
  return { in: get("InOctets"), out: get("OutOctets") };
}

/** Reads the process's figures; never throws. */
export async function readProcessSample(
  opts: ProcessCollectorOptions = {},
): Promise<ProcessSample> {
  const dir = opts.procSelf ?? hostPath("/proc/self");
  const [stat, status, limits, netstat, procStat] = await Promise.all([
    readText(`${dir}/stat`),
    readText(`${dir}/status`),
    readText(`${dir}/limits`),
    readText(`${dir}/net/netstat`),
    readText(opts.procStat ?? hostPath("/proc/stat")),
  ]);
  const out: ProcessSample = {};
  // The command name may hold spaces and parentheses: fields start after the last ')'.
  const fields = stat?.slice(stat.lastIndexOf(")") + 2).trim().split(" ");
  const field = (n: number) => {
    const v = fields?.[n - 3];
    return v !== undefined && /^\d+$/.test(v) ? Number(v) : undefined;
  };
  const utime = field(14);
  const stime = field(15);
  if (utime !== undefined && stime !== undefined) out.cpuSeconds = (utime + stime) / USER_HZ;
  const vsize = field(23);
  if (vsize !== undefined) out.virtualMemoryBytes = vsize;
  // VmRSS is stat's rss pages times the page size, which Deno does not expose.
  const rss = /^VmRSS:\s+(\d+) kB$/m.exec(status ?? "");
  if (rss) out.residentMemoryBytes = Number(rss[1]) * 1024;
  const btime = /^btime (\d+)$/m.exec(procStat ?? "");
  const start = field(22);
  if (btime && start !== undefined) out.startTimeSeconds = Number(btime[1]) + start / USER_HZ;
  try {
    out.openFds = await countOpenFds(dir);
  } catch {
    // left out
  }
  const maxFds = limits === undefined ? undefined : softLimit(limits, "Max open files");
  if (maxFds !== undefined) out.maxFds = maxFds;
  const maxVsize = limits === undefined ? undefined : softLimit(limits, "Max address space");
  if (maxVsize !== undefined) out.maxVirtualMemoryBytes = maxVsize;
  const net = netstat === undefined ? undefined : ipExtOctets(netstat);
  if (net) {
    out.networkReceiveBytes = net.in;
    out.networkTransmitBytes = net.out;
  }
  return out;
}

const FAMILIES: readonly [keyof ProcessSample, string, "counter" | "gauge", string][] = [
  [
    "cpuSeconds",
    "process_cpu_seconds_total",
    "counter",
    "Total user and system CPU time spent in seconds.",
  ],
  ["openFds", "process_open_fds", "gauge", "Number of open file descriptors."],
  ["maxFds", "process_max_fds", "gauge", "Maximum number of open file descriptors."],
  ["virtualMemoryBytes", "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes."],
  [
    "maxVirtualMemoryBytes",
    "process_virtual_memory_max_bytes",
    "gauge",
    "Maximum amount of virtual memory available in bytes.",
  ],
  [
    "residentMemoryBytes",
    "process_resident_memory_bytes",
    "gauge",
    "Resident memory size in bytes.",
  ],
  [
    "startTimeSeconds",
    "process_start_time_seconds",
    "gauge",
    "Start time of the process since unix epoch in seconds.",
  ],
  [
    "networkReceiveBytes",
    "process_network_receive_bytes_total",
    "counter",
    "Number of bytes received by the process over the network.",
  ],
  [
    "networkTransmitBytes",
    "process_network_transmit_bytes_total",
    "counter",
    "Number of bytes sent by the process over the network.",
  ],
];

/** A registry collector writing the process families from a fresh read. */
export function processCollector(
  opts: ProcessCollectorOptions = {},
): (out: PrometheusText) => Promise<void> {
  return async (out) => {
    const sample = await readProcessSample(opts);
    for (const [key, name, type, help] of FAMILIES) {
      const v = sample[key];
      if (v === undefined) continue;
      out.family(name, help, type).sample(name, {}, v);
    }
  };
}
