/**
 * @module
 * CPU conversions every cgroup writer shares: millicores to cpu.shares and to a CFS quota, with
 * the kernel's bounds. One definition for the QoS, pod and node allocatable cgroups
 * (`qos_container_manager.ts`, `_pod_resources.ts`, `_node_allocatable.ts`), the pod sandbox's
 * Linux resources (`kuberuntime/kuberuntime_sandbox.ts`) and each container's
 * (`kuberuntime/_container_linux.ts`). Exact integers (bigint), as upstream's int64 arithmetic:
 * a float loses units past 2^53 millicores. Corresponds to upstream `pkg/kubelet/cm/helpers_linux.go`.
 */

/** Kernel minimum cpu.shares (sched.h). */
export const MIN_SHARES = 2n;
/** Kernel maximum cpu.shares. */
export const MAX_SHARES = 262_144n;
/** cpu.shares of one CPU. */
export const SHARES_PER_CPU = 1024n;
/** Millicores in one CPU. */
export const MILLI_CPU_TO_CPU = 1000n;
/** The default CFS period, µs (100 ms). */
export const QUOTA_PERIOD = 100_000n;
/** The smallest CFS quota the kernel takes, µs (1 ms). */
export const MIN_QUOTA_PERIOD = 1000n;

/** Millicores to cpu.shares, clamped to [2, 262144]; 0 is 2 (upstream MilliCPUToShares). */
export function milliCPUToShares(milliCPU: bigint): bigint {
  if (milliCPU === 0n) return MIN_SHARES;
  const shares = (milliCPU * SHARES_PER_CPU) / MILLI_CPU_TO_CPU;
  if (shares < MIN_SHARES) return MIN_SHARES;
  return shares > MAX_SHARES ? MAX_SHARES : shares;
}

/**
 * Millicores to a CFS quota over `period` µs, at least 1 ms; 0 for no limit (upstream
 * MilliCPUToQuota). Upstream uses 100 ms unless CustomCPUCFSQuotaPeriod is on; config
 * validation only lets another period through with that gate, so the period is taken as given.
 */
export function milliCPUToQuota(milliCPU: bigint, period: bigint): bigint {
  if (milliCPU === 0n) return 0n;
  const quota = (milliCPU * period) / MILLI_CPU_TO_CPU;
  return quota < MIN_QUOTA_PERIOD ? MIN_QUOTA_PERIOD : quota;
}
