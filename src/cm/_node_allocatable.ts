/**
 * @module
 * Node allocatable arithmetic for node_container_manager.ts: capacity minus system and kube
 * reservations, floored at 0 (upstream `getNodeAllocatableAbsoluteImpl`; the hard eviction
 * threshold is not taken off, so pods can use memory up to it and eviction gets to act first),
 * and the cgroup limits of a resource list (`getCgroupConfigInternal`). Private.
 */

import type { ResourceConfig } from "./cgroup_manager.ts";
import { milliCPUToShares } from "./helpers_linux.ts";
import { hugePageLimits } from "./_pod_resources.ts";
import {
  milliValueOf,
  type ResourceList,
  resourceList,
  subDec,
  valueOf,
} from "../qos/resource_helpers.ts";

/** Capacity minus `systemReserved` and `kubeReserved`, per resource, never below 0. */
export function allocatableAbsolute(
  capacity: Readonly<Record<string, string>>,
  systemReserved: Readonly<Record<string, string>> | undefined,
  kubeReserved: Readonly<Record<string, string>> | undefined,
): ResourceList {
  const sys = resourceList(systemReserved);
  const kube = resourceList(kubeReserved);
  const out: ResourceList = new Map();
  for (const [name, q] of resourceList(capacity)) {
    let v = q;
    const s = sys.get(name);
    if (s !== undefined) v = subDec(v, s);
    const k = kube.get(name);
    if (k !== undefined) v = subDec(v, k);
    out.set(name, v.n < 0n ? { n: 0n, s: 0 } : v);
  }
  return out;
}

/**
 * The cgroup limits of a resource list: cpu as shares, memory, "pid" as the pids limit and
 * hugepages; only cpu when `compressibleOnly`. Undefined without a list.
 */
export function cgroupConfigOf(
  rl: ResourceList | undefined,
  compressibleOnly: boolean,
): ResourceConfig | undefined {
  if (rl === undefined) return undefined;
  const rc: ResourceConfig = {};
  const cpu = rl.get("cpu");
  if (cpu !== undefined) rc.cpuShares = milliCPUToShares(milliValueOf(cpu));
  if (compressibleOnly) return rc;
  const memory = rl.get("memory");
  if (memory !== undefined) rc.memory = valueOf(memory);
  const pid = rl.get("pid");
  if (pid !== undefined) rc.pidsLimit = valueOf(pid);
  rc.hugePageLimit = hugePageLimits(rl);
  return rc;
}
