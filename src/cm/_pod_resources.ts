/**
 * @module
 * The limits of a pod's cgroup computed from its spec: upstream `ResourceConfigForPod` and
 * `HugePageLimits` of `pkg/kubelet/cm/helpers_linux.go`, plus the pids limit EnsureExists adds.
 * Private to pod_container_manager.ts, which re-exports it.
 */

import type { V1Pod } from "@kubernetes/client-node";
import type { ResourceConfig } from "./cgroup_manager.ts";
import { getPodQOS } from "../qos/qos.ts";
import { milliCPUToQuota, milliCPUToShares, MIN_SHARES } from "./helpers_linux.ts";
import {
  addDec,
  isPodLevelResourcesSet,
  isZeroDec,
  milliValueOf,
  parseDec,
  podLimits,
  podRequests,
  type ResourceList,
  resourceList,
  valueOf,
} from "../qos/resource_helpers.ts";
import { isRestartableInitContainer } from "../pod/podutil.ts";

/** Node settings {@link resourceConfigForPod} needs. */
export interface PodResourceOptions {
  /** Config `cpuCFSQuota`: false leaves the quota unlimited (-1). */
  enforceCPULimits: boolean;
  /** Config `cpuCFSQuotaPeriod` in µs. */
  cpuPeriodUs: bigint;
  /** Config `podPidsLimit`; only a positive value is applied. */
  podPidsLimit: number;
}

function add(into: ResourceList, from: ResourceList): void {
  for (const [k, q] of from) {
    const have = into.get(k);
    into.set(k, have === undefined ? q : addDec(have, q));
  }
}

/** Whether every container (as upstream's PodLimits ContainerFn sees them) limits cpu/memory. */
function limitsDeclared(pod: V1Pod): { cpu: boolean; memory: boolean } {
  const out = { cpu: true, memory: true };
  const check = (l: ResourceList) => {
    if (isZeroDec(l.get("cpu"))) out.cpu = false;
    if (isZeroDec(l.get("memory"))) out.memory = false;
  };
  for (const c of pod.spec?.containers ?? []) check(resourceList(c.resources?.limits));
  // Init containers are seen with the sidecars started before them.
  const sidecars: ResourceList = new Map();
  for (const c of pod.spec?.initContainers ?? []) {
    const own = resourceList(c.resources?.limits);
    if (isRestartableInitContainer(c)) {
      add(sidecars, own);
      check(sidecars);
    } else {
      const withSidecars: ResourceList = new Map(own);
      add(withSidecars, sidecars);
      check(withSidecars);
    }
  }
  const podLimitsSet = pod.spec?.resources?.limits;
  if (isPodLevelResourcesSet(pod)) {
    if (!isZeroDec(resourceList(podLimitsSet).get("cpu"))) out.cpu = true;
    if (!isZeroDec(resourceList(podLimitsSet).get("memory"))) out.memory = true;
  }
  return out;
}

/** Hugepage requests by page size in bytes (upstream HugePageLimits). */
export function hugePageLimits(reqs: ResourceList): Map<number, bigint> {
  const out = new Map<number, bigint>();
  for (const [name, q] of reqs) {
    if (!name.startsWith("hugepages-")) continue;
    const size = Number(valueOf(parseDec(name.slice("hugepages-".length))));
    out.set(size, (out.get(size) ?? 0n) + valueOf(q));
  }
  return out;
}

/**
 * The pod cgroup's limits (upstream ResourceConfigForPod + EnsureExists' pids limit): shares
 * from the requests (init containers and pod-level resources as PodRequests counts them);
 * Guaranteed also gets quota and memory; Burstable gets quota only when every container limits
 * cpu and memory only when every container limits memory; BestEffort gets 2 shares.
 */
export function resourceConfigForPod(pod: V1Pod, opts: PodResourceOptions): ResourceConfig {
  const reqs = podRequests(pod);
  const limits = podLimits(pod);
  const declared = limitsDeclared(pod);
  const cpuShares = milliCPUToShares(milliValueOf(reqs.get("cpu")));
  let cpuQuota = milliCPUToQuota(milliValueOf(limits.get("cpu")), opts.cpuPeriodUs);
  if (!opts.enforceCPULimits) cpuQuota = -1n;
  const memory = valueOf(limits.get("memory"));
  const rc: ResourceConfig = {};
  switch (getPodQOS(pod)) {
    case "Guaranteed":
      Object.assign(rc, { cpuShares, cpuQuota, cpuPeriod: opts.cpuPeriodUs, memory });
      break;
    case "Burstable":
      rc.cpuShares = cpuShares;
      if (declared.cpu) Object.assign(rc, { cpuQuota, cpuPeriod: opts.cpuPeriodUs });
      if (declared.memory) rc.memory = memory;
      break;
    case "BestEffort":
      rc.cpuShares = MIN_SHARES;
  }
  rc.hugePageLimit = hugePageLimits(reqs);
  if (opts.podPidsLimit > 0) rc.pidsLimit = BigInt(opts.podPidsLimit);
  return rc;
}
