/**
 * @module
 * Network interface counters of a network namespace, read from `/proc/<pid>/net/dev`: a pod's
 * (through its sandbox's process) and the node's (through pid 1, the host's init). One small
 * read per namespace per sample. Loopback and the host ends of container links are dropped as
 * cAdvisor drops them, and the pod's default interface ("eth0") is picked for the top-level
 * fields of the Summary API. Corresponds to cAdvisor's `container/libcontainer/handler.go`
 * (`networkStatsFromProc`, `scanInterfaceStats`, `isIgnoredDevice`; the raw root container
 * reads pid 1) and the kubelet's `pkg/kubelet/stats/helper.go` (`cadvisorInfoToNetworkStats`,
 * `defaultNetworkInterfaceName`).
 */

import { join } from "node:path";
import { hostRoot } from "../privilege/host_root.ts";
import { readProcFile } from "../privilege/launcher_calls.ts";

/** Counters of one interface, named as the kubelet stats API names them. */
export interface InterfaceStats {
  name: string;
  rxBytes: number;
  rxErrors: number;
  txBytes: number;
  txErrors: number;
  /** Packets and drops (for /metrics/cadvisor; the Summary API has bytes and errors only). */
  rxPackets?: number;
  rxDropped?: number;
  txPackets?: number;
  txDropped?: number;
}

/** Options of {@link readNetworkStats} and {@link readNodeNetworkStats}. */
export interface ReadNetworkStatsOptions {
  /** Root under which /proc is read, for tests. @default "/" */
  root?: string;
}

/** The interface whose counters are the pod's top-level network stats (upstream's const). */
export const DEFAULT_INTERFACE_NAME = "eth0";

/** Name prefixes cAdvisor leaves out of container network stats (case-insensitive). */
const IGNORED_DEVICE_PREFIXES = ["lo", "veth", "docker", "nerdctl"] as const;

/** Fields after the name in a /proc/net/dev line: 8 receive and 8 transmit counters. */
const NET_DEV_FIELDS = 16;

/** True for interfaces cAdvisor does not report: loopback and host-side container links. */
export function isIgnoredDevice(name: string): boolean {
  const lower = name.toLowerCase();
  return IGNORED_DEVICE_PREFIXES.some((p) => lower.startsWith(p));
}

/**
 * Parses `/proc/<pid>/net/dev` (two header lines, then `name: 16 counters`; a wide counter may
 * follow the colon with no space). Ignored devices and malformed lines are left out.
 */
export function parseNetDev(text: string): InterfaceStats[] {
  const out: InterfaceStats[] = [];
  const lines = text.split("\n");
  for (let i = 2; i < lines.length; i++) {
    const line = lines[i]!;
    // Interface names cannot hold a colon, so the first one ends the name.
    const colon = line.indexOf(":");
    if (colon < 0) continue;
    const name = line.slice(0, colon).trim();
    if (name === "" || isIgnoredDevice(name)) continue;
    const fields = line.slice(colon + 1).trim().split(/\s+/);
    if (fields.length !== NET_DEV_FIELDS || !fields.every((f) => /^\d+$/.test(f))) continue;
    const n = fields.map(Number);
    out.push({
      name,
      rxBytes: n[0]!,
      rxPackets: n[1]!,
      rxErrors: n[2]!,
      rxDropped: n[3]!,
      txBytes: n[8]!,
      txPackets: n[9]!,
      txErrors: n[10]!,
      txDropped: n[11]!,
    });
  }
  return out;
}

async function readNetDev(
  read: string | (() => Promise<string>),
): Promise<InterfaceStats[] | undefined> {
  let text: string;
  try {
    text = await (typeof read === "string" ? Deno.readTextFile(read) : read());
  } catch {
    // The process exited (NotFound) or its namespace is going away: nothing to report.
    return undefined;
  }
  return parseNetDev(text);
}

/** The interfaces of the network namespace of `pid`; undefined when the process is gone. */
export async function readNetworkStats(
  pid: number,
  opts: ReadNetworkStatsOptions = {},
): Promise<InterfaceStats[] | undefined> {
  if (!Number.isSafeInteger(pid) || pid <= 0) {
    throw new RangeError(`Cannot read network stats: 'pid' must be a positive integer: ${pid}`);
  }
  return await readNetDev(() => readProcFile(opts.root ?? hostRoot(), pid, "net/dev"));
}

/**
 * The host's interfaces: pid 1's namespace as cAdvisor's root container reads it, else this
 * process's own (`/proc/net/dev`) where pid 1 is not readable.
 */
export async function readNodeNetworkStats(
  opts: ReadNetworkStatsOptions = {},
): Promise<InterfaceStats[] | undefined> {
  const root = opts.root ?? hostRoot();
  return (await readNetDev(join(root, "proc/1/net/dev"))) ??
    (await readNetDev(join(root, "proc/net/dev")));
}

/** The interface named `name` (upstream's default, "eth0"), if the list has it. */
export function defaultInterface<T extends { readonly name: string }>(
  list: readonly T[],
  name: string = DEFAULT_INTERFACE_NAME,
): T | undefined {
  return list.find((i) => i.name === name);
}
