/**
 * @module
 * Writes resource limits into one cgroup's control files, in the order and with the error
 * handling of opencontainers/cgroups (the libcontainer code upstream's cgroup manager calls):
 * `fs` for cgroup v1 (memory, cpu, pids, hugetlb subsystems' `Set`) and `fs2` for cgroup v2
 * (`setPids`, `setMemory`, `setCPU`, `setHugeTlb`), plus hugepage size naming
 * (`HugePageSizes`, upstream `HugePageUnitSizeFromByteSize`). Private to cgroup_manager.ts.
 */

import { type CgroupFs, errnoOf, readTrimmed } from "./cgroupfs.ts";
import type { ResourceConfig } from "./cgroup_manager.ts";
import type { Logger } from "../klog/klog.ts";

/** libcontainer's `Resources` as the kubelet fills it: 0 means "leave as is". */
export interface Resources {
  memory: bigint;
  /** v1 only. */
  cpuShares: bigint;
  /** v2 only, converted from shares by the caller. */
  cpuWeight: bigint;
  cpuQuota: bigint;
  cpuPeriod: bigint;
  /** undefined leaves pids.max alone; negative is "max", 0 is "1" (as runc). */
  pidsLimit?: bigint;
  /** Page size as the kernel names it in hugetlb files ("2MB") and its limit in bytes. */
  hugetlb: { pageSize: string; limit: bigint }[];
}

/** A failed write of a control file; says what was written where. */
export class CgroupWriteError extends Error {
  override name = "CgroupWriteError";
}

async function write(fs: CgroupFs, dir: string, file: string, data: string): Promise<void> {
  try {
    await fs.writeFile(`${dir}/${file}`, data);
  } catch (e) {
    throw new CgroupWriteError(
      `failed to write ${JSON.stringify(data)} to ${dir}/${file}: ${(e as Error).message}`,
      { cause: e },
    );
  }
}

function causeErrno(e: unknown): string | undefined {
  return errnoOf(e instanceof CgroupWriteError ? e.cause : e);
}

/** Directories of one cgroup per v1 controller; undefined when the controller is not mounted. */
export interface V1Dirs {
  memory?: string;
  cpu?: string;
  pids?: string;
  hugetlb?: string;
}

function need(dir: string | undefined, controller: string): string {
  if (dir === undefined) {
    throw new CgroupWriteError(
      `cannot set ${controller} limit: container could not join or create cgroup`,
    );
  }
  return dir;
}

/** runc fs `Manager.Set` for the subsystems the kubelet uses, in runc's subsystem order. */
export async function setV1(fs: CgroupFs, dirs: V1Dirs, r: Resources): Promise<void> {
  if (r.memory !== 0n) await setV1Memory(fs, need(dirs.memory, "memory"), r.memory);
  if (r.cpuShares !== 0n || r.cpuPeriod !== 0n || r.cpuQuota !== 0n) {
    await setV1Cpu(fs, need(dirs.cpu, "cpu"), r);
  }
  if (r.pidsLimit !== undefined) {
    await write(fs, need(dirs.pids, "pids"), "pids.max", pidsMax(r.pidsLimit));
  }
  if (r.hugetlb.length > 0) {
    await setHugetlb(fs, need(dirs.hugetlb, "hugetlb"), r, ".limit_in_bytes");
  }
}

async function setV1Memory(fs: CgroupFs, dir: string, memory: bigint): Promise<void> {
  // Unlimited memory also lifts memory+swap, or the kernel refuses memory above it.
  if (memory === -1n && await fs.exists(`${dir}/memory.memsw.limit_in_bytes`)) {
    await write(fs, dir, "memory.memsw.limit_in_bytes", "-1");
  }
  try {
    await write(fs, dir, "memory.limit_in_bytes", String(memory));
  } catch (e) {
    if (causeErrno(e) !== "EBUSY") throw e;
    // EBUSY: the new limit is below what the cgroup already uses.
    const usage = await readTrimmed(fs, `${dir}/memory.usage_in_bytes`);
    const peak = await readTrimmed(fs, `${dir}/memory.max_usage_in_bytes`);
    throw new CgroupWriteError(
      `unable to set memory limit to ${memory} (current usage: ${usage}, peak usage: ${peak})`,
      { cause: e },
    );
  }
}

async function setV1Cpu(fs: CgroupFs, dir: string, r: Resources): Promise<void> {
  if (r.cpuShares !== 0n) {
    await write(fs, dir, "cpu.shares", String(r.cpuShares));
    // The kernel clamps shares to [2, 262144]; say so instead of keeping a silent clamp.
    const read = BigInt(await readTrimmed(fs, `${dir}/cpu.shares`));
    if (r.cpuShares > read) throw new CgroupWriteError(`the maximum allowed cpu-shares is ${read}`);
    if (r.cpuShares < read) throw new CgroupWriteError(`the minimum allowed cpu-shares is ${read}`);
  }
  let pendingPeriod: string | undefined;
  if (r.cpuPeriod !== 0n) {
    const period = String(r.cpuPeriod);
    try {
      await write(fs, dir, "cpu.cfs_period_us", period);
    } catch (e) {
      // A shorter period can exceed the parent's quota until the new quota is in: retry after.
      if (causeErrno(e) !== "EINVAL" || r.cpuQuota === 0n) throw e;
      pendingPeriod = period;
    }
  }
  if (r.cpuQuota !== 0n) {
    await write(fs, dir, "cpu.cfs_quota_us", String(r.cpuQuota));
    if (pendingPeriod !== undefined) await write(fs, dir, "cpu.cfs_period_us", pendingPeriod);
  }
}

function pidsMax(limit: bigint): string {
  if (limit > 0n) return String(limit);
  // systemd cannot set 0, so runc writes 1 for both drivers to behave alike.
  return limit === 0n ? "1" : "max";
}

async function setHugetlb(fs: CgroupFs, dir: string, r: Resources, suffix: string) {
  let skipRsvd = false;
  for (const { pageSize, limit } of r.hugetlb) {
    const prefix = `hugetlb.${pageSize}`;
    await write(fs, dir, `${prefix}${suffix}`, String(limit));
    if (skipRsvd) continue;
    try {
      await write(fs, dir, `${prefix}.rsvd${suffix}`, String(limit));
    } catch (e) {
      // Kernels before 5.7 have no reservation files.
      if (causeErrno(e) !== "ENOENT") throw e;
      skipRsvd = true;
    }
  }
}

function numToStr(v: bigint): string {
  return v === -1n ? "max" : String(v);
}

/** runc fs2 `Manager.Set` for what the kubelet sets, in runc's order. */
export async function setV2(fs: CgroupFs, dir: string, r: Resources): Promise<void> {
  // Fails when the cgroup does not exist, before any write.
  await fs.readFile(`${dir}/cgroup.controllers`);
  if (r.pidsLimit !== undefined) await write(fs, dir, "pids.max", pidsMax(r.pidsLimit));
  if (r.memory !== 0n) {
    if (r.memory === -1n) {
      // Unlimited memory with swap unset means unlimited swap too; no swap file is fine.
      try {
        await write(fs, dir, "memory.swap.max", "max");
      } catch (e) {
        if (causeErrno(e) !== "ENOENT") throw e;
      }
    }
    await write(fs, dir, "memory.max", numToStr(r.memory));
  }
  if (r.cpuWeight !== 0n) await write(fs, dir, "cpu.weight", String(r.cpuWeight));
  if (r.cpuQuota !== 0n || r.cpuPeriod !== 0n) {
    const quota = r.cpuQuota > 0n ? String(r.cpuQuota) : "max";
    const period = r.cpuPeriod !== 0n ? r.cpuPeriod : 100_000n;
    await write(fs, dir, "cpu.max", `${quota} ${period}`);
  }
  if (r.hugetlb.length > 0) await setHugetlb(fs, dir, r, ".max");
}

/** Whether a v2 write needs the domain controllers (memory, cpu, hugetlb) of runc's check. */
export function needsDomainControllers(r: Resources): boolean {
  return r.memory !== 0n || r.cpuWeight !== 0n || r.cpuQuota !== 0n || r.cpuPeriod !== 0n ||
    r.hugetlb.length > 0;
}

/** Upstream getCPUWeight: cgroup v1 shares [2, 262144] to v2 weight [1, 10000]. */
export function cpuSharesToCPUWeight(shares: bigint): bigint {
  if (shares >= 262_144n) return 10_000n;
  return 1n + ((shares - 2n) * 9_999n) / 262_142n;
}

/** How {@link toResources} sees the host. */
export interface ToResourcesOptions {
  v2: boolean;
  /** The host's page sizes in bytes; undefined when hugetlb is not available. */
  hugePageSizes: readonly number[] | undefined;
  logger: Logger;
}

/**
 * Upstream cgroupCommon `toResources` + `maybeSetHugetlb`: shares become cpu.weight on v2, and
 * with hugetlb available every page size the config leaves out is limited to 0.
 */
export function toResources(rc: ResourceConfig, o: ToResourcesOptions): Resources {
  const shares = rc.cpuShares;
  const res: Resources = {
    memory: rc.memory ?? 0n,
    cpuShares: !o.v2 && shares !== undefined ? shares : 0n,
    cpuWeight: o.v2 && shares !== undefined ? cpuSharesToCPUWeight(shares) : 0n,
    cpuQuota: rc.cpuQuota ?? 0n,
    cpuPeriod: rc.cpuPeriod ?? 0n,
    hugetlb: [],
  };
  if (rc.pidsLimit !== undefined) res.pidsLimit = rc.pidsLimit;
  if (o.hugePageSizes === undefined) return res;
  const named = new Set<string>();
  for (const [size, limit] of rc.hugePageLimit ?? []) {
    try {
      const pageSize = hugePageUnitSize(size);
      res.hugetlb.push({ pageSize, limit });
      named.add(pageSize);
    } catch (e) {
      o.logger.info("Invalid pageSize", { err: (e as Error).message });
    }
  }
  for (const size of o.hugePageSizes) {
    const pageSize = hugePageUnitSize(size);
    if (!named.has(pageSize)) res.hugetlb.push({ pageSize, limit: 0n });
  }
  return res;
}

const UNITS = ["B", "KB", "MB", "GB", "TB", "PB"];

/** The kernel's name of a page size in bytes ("2MB"), upstream `HugePageUnitSizeFromByteSize`. */
export function hugePageUnitSize(bytes: number): string {
  let size = bytes;
  let i = 0;
  while (size % 1024 === 0 && i < UNITS.length - 1) {
    size /= 1024;
    i++;
  }
  if (size > 1024 && i < UNITS.length - 1) {
    throw new RangeError(
      `size: ${size}${UNITS[i]} must be guaranteed to divisible into the largest units`,
    );
  }
  return `${size}${UNITS[i]}`;
}

/** Page sizes in bytes from the names in /sys/kernel/mm/hugepages ("hugepages-2048kB"). */
export function hugePageSizesFromNames(names: readonly string[]): number[] {
  const out: number[] = [];
  for (const name of names) {
    const m = /^hugepages-(\d+)kB$/.exec(name);
    if (m) out.push(Number(m[1]) * 1024);
  }
  return out.sort((a, b) => a - b);
}
