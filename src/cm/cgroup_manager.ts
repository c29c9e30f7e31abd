/**
 * @module
 * Creates, updates, finds and removes the kubelet's own cgroups (node allocatable, QoS classes,
 * pods) on cgroupfs: one directory per mounted controller on cgroup v1 and hybrid hosts (plus the
 * cgroup2 directory in hybrid mode, as runc joins it), one directory with its controllers enabled
 * down the tree on cgroup v2. Names are internal CgroupNames (`["kubepods", "burstable",
 * "pod<uid>"]`) that the driver turns into paths. Talks to the filesystem only, through
 * `cgroupfs.ts`; takes mount points from `cgroup_layout.ts`. Corresponds to upstream
 * `pkg/kubelet/cm/cgroup_manager_linux.go` (+ `_v1`, `_v2`) and the opencontainers/cgroups
 * `fs`/`fs2` managers it calls. With the systemd driver, each cgroup is a transient slice
 * systemd starts, updates and stops over D-Bus (`cgroup_systemd.ts`, as the opencontainers/cgroups
 * `systemd` managers do), and the files are then written on cgroupfs as with cgroupfs.
 */

import { posix } from "node:path";
import { cgroupfsName, type CgroupLayout, systemdName } from "./cgroup_layout.ts";
import { type CgroupFs, readTrimmed, realCgroupFs } from "./cgroupfs.ts";
import { collectPids, createUnifiedPath, createV1, removePath, v1Dirs } from "./_tree.ts";
import {
  hugePageSizesFromNames,
  needsDomainControllers,
  type Resources,
  setV1,
  setV2,
  toResources,
} from "./_writers.ts";
import { formatCgroupName, parseCgroupfsName, parseSystemdName } from "./_names.ts";
import { type Clock, realClock } from "../util/clock.ts";
import { resourceProperties, type SystemdUnits } from "./cgroup_systemd.ts";
import type { Logger } from "../klog/klog.ts";
import { hostPath } from "../privilege/host_root.ts";
import type { Histogram } from "../metrics/metrics.ts";

export { CgroupWriteError, cpuSharesToCPUWeight } from "./_writers.ts";
export { formatCgroupName, newCgroupName, parseCgroupfsName } from "./_names.ts";
export type { CgroupFs } from "./cgroupfs.ts";

/** Resource limits of one cgroup (upstream `ResourceConfig`); undefined leaves a value alone. */
export interface ResourceConfig {
  cpuShares?: bigint;
  /** CFS quota in µs; -1 is unlimited. */
  cpuQuota?: bigint;
  /** CFS period in µs. */
  cpuPeriod?: bigint;
  /** Memory limit in bytes; -1 is unlimited. */
  memory?: bigint;
  /** -1 is "max". */
  pidsLimit?: bigint;
  /** Page size in bytes to limit in bytes; sizes left out are limited to 0, as upstream. */
  hugePageLimit?: Map<number, bigint>;
}

/** The cgroup driver: how CgroupNames map to paths (and who creates them). */
export type CgroupDriver = "cgroupfs" | "systemd";

/** A cgroup operation failed; the message names the cgroup and the path or value. */
export class CgroupManagerError extends Error {
  override name = "CgroupManagerError";
}

/** Options of {@link CgroupManager}. */
export interface CgroupManagerOptions {
  layout: CgroupLayout;
  /** @default "cgroupfs" */
  driver?: CgroupDriver;
  logger: Logger;
  /** Where the kernel lists hugepage sizes. @default "/sys/kernel/mm/hugepages" */
  hugePagesDir?: string;
  /** The filesystem calls; tests pass a fixture that behaves like cgroupfs. @default cgroupfs */
  fs?: CgroupFs;
  /** Paces rmdir retries of busy cgroups. @default realClock */
  clock?: Clock;
  /** systemd over D-Bus, for the systemd driver. @default the system bus, on first use */
  systemd?: () => Promise<SystemdUnits>;
  /** kubelet_cgroup_manager_duration_seconds{operation_type}: create, update, destroy. @default none */
  durations?: Histogram;
}

/** v1 controllers whose directory must exist for a cgroup to exist (upstream Validate). */
const V1_REQUIRED = ["cpu", "cpuacct", "cpuset", "memory", "name=systemd", "pids", "hugetlb"];
/** v2 controllers the kubelet uses, when the root cgroup offers them. */
const V2_SUPPORTED = ["cpu", "cpuset", "memory", "hugetlb", "pids"];

/** The kubelet's cgroup manager (upstream `CgroupManager`, cgroupV1impl / cgroupV2impl). */
export class CgroupManager {
  readonly layout: CgroupLayout;
  readonly driver: CgroupDriver;
  readonly #log: Logger;
  readonly #fs: CgroupFs;
  readonly #clock: Clock;
  readonly #hugePagesDir: string;
  #hugePageSizes?: Promise<number[]>;
  #v2Controllers?: Promise<Set<string>>;
  readonly #connectSystemd: () => Promise<SystemdUnits>;
  #systemd?: Promise<SystemdUnits>;
  readonly #durations: Histogram | undefined;

  constructor(opts: CgroupManagerOptions) {
    this.#durations = opts.durations;
    this.layout = opts.layout;
    this.driver = opts.driver ?? "cgroupfs";
    this.#log = opts.logger;
    this.#fs = opts.fs ?? realCgroupFs;
    this.#clock = opts.clock ?? realClock;
    this.#hugePagesDir = opts.hugePagesDir ?? hostPath("/sys/kernel/mm/hugepages");
    this.#connectSystemd = opts.systemd ??
      (async () => (await import("./cgroup_systemd.ts")).connectSystemd());
    if (this.layout.mode === "v2" && this.layout.unified === undefined) {
      throw new CgroupManagerError("Cannot manage cgroups: the v2 layout has no cgroup2 mount");
    }
  }

  /** Runs one operation, its duration observed whether it fails or not, as upstream's. */
  async #timed(op: "create" | "update" | "destroy", fn: () => Promise<void>): Promise<void> {
    const start = performance.now();
    try {
      await fn();
    } finally {
      this.#durations?.observe((performance.now() - start) / 1000, { operation_type: op });
    }
  }

  /** 1 on v1 and hybrid hosts, 2 on v2 (upstream `Version`). */
  get version(): 1 | 2 {
    return this.layout.mode === "v2" ? 2 : 1;
  }

  /** The cgroupfs path of a CgroupName under the driver (upstream `Name`). */
  name(parts: readonly string[]): string {
    return this.driver === "systemd" ? systemdName(parts) : cgroupfsName(parts);
  }

  /**
   * What the CRI gets as a sandbox's cgroup_parent: the same path as {@link name}, for both
   * drivers (upstream GetPodCgroupParent hands over `Name`; a systemd runtime takes its base).
   */
  runtimeName(parts: readonly string[]): string {
    return this.name(parts);
  }

  /** The CgroupName of a literal driver path (upstream `CgroupName`). */
  parse(literal: string): string[] {
    return this.driver === "systemd" ? parseSystemdName(literal) : parseCgroupfsName(literal);
  }

  /** Every distinct hierarchy mount this manager looks in (upstream `MountPoints`). */
  mountPoints(): string[] {
    if (this.layout.mode === "v2") return [this.layout.unified!];
    return [...new Set(this.layout.v1.values())];
  }

  /** Throws when the cgroup is missing in a required controller (upstream `Validate`). */
  async validate(parts: readonly string[]): Promise<void> {
    const path = this.name(parts);
    if (this.layout.mode === "v2") {
      const dir = posix.join(this.layout.unified!, path);
      let have: Set<string>;
      try {
        have = new Set((await this.#fs.readFile(`${dir}/cgroup.controllers`)).split(/\s+/));
      } catch (e) {
        throw new CgroupManagerError(
          `could not read controllers for cgroup ${formatCgroupName(parts)}: ${
            (e as Error).message
          }`,
          { cause: e },
        );
      }
      const missing = [...await this.#supportedV2()].filter((c) => !have.has(c)).sort();
      if (missing.length > 0) {
        throw new CgroupManagerError(
          `cgroup ${formatCgroupName(parts)} has some missing controllers: ${missing.join(", ")}`,
        );
      }
      return;
    }
    const missing: string[] = [];
    for (const c of V1_REQUIRED) {
      const mount = this.layout.v1.get(c);
      if (mount === undefined) continue;
      const dir = posix.join(mount, path);
      if (!await this.#fs.exists(dir)) missing.push(dir);
    }
    if (missing.length > 0) {
      throw new CgroupManagerError(
        `cgroup ${formatCgroupName(parts)} has some missing paths: ${missing.join(", ")}`,
      );
    }
  }

  /** Whether the cgroup exists in every required controller (upstream `Exists`). */
  async exists(parts: readonly string[]): Promise<boolean> {
    try {
      await this.validate(parts);
      return true;
    } catch {
      return false;
    }
  }

  /**
   * Creates the cgroup (and its parents) and applies `rc`. As upstream, a failure to apply the
   * limits after creating the directories is logged, not thrown.
   */
  create(parts: readonly string[], rc: ResourceConfig = {}): Promise<void> {
    return this.#timed("create", () => this.#create(parts, rc));
  }

  async #create(parts: readonly string[], rc: ResourceConfig): Promise<void> {
    const res = await this.#resources(rc);
    const unit = this.#unit(parts);
    if (unit) {
      try {
        await (await this.#units()).startSlice(unit.name, unit.parent, this.#properties(rc));
      } catch (e) {
        throw new CgroupManagerError(
          `Cannot create cgroup ${formatCgroupName(parts)}: ${(e as Error).message}`,
          { cause: e },
        );
      }
    }
    if (this.layout.mode === "v2") {
      const dir = posix.join(this.layout.unified!, this.name(parts));
      try {
        await createUnifiedPath(this.#fs, this.layout.unified!, dir, needsDomainControllers(res));
      } catch (e) {
        throw new CgroupManagerError(
          `Cannot create cgroup ${formatCgroupName(parts)}: ${(e as Error).message}`,
          { cause: e },
        );
      }
    } else await this.#createV1(parts);
    try {
      await this.#set(parts, res);
    } catch (e) {
      this.#log.error(e, "cgroup manager.Set failed", { cgroupName: parts });
    }
  }

  /** Applies `rc` to an existing cgroup (upstream `Update`). */
  update(parts: readonly string[], rc: ResourceConfig): Promise<void> {
    return this.#timed("update", () => this.#update(parts, rc));
  }

  async #update(parts: readonly string[], rc: ResourceConfig): Promise<void> {
    const unit = this.#unit(parts);
    // systemd keeps the values too, so a daemon-reload does not undo the files written below.
    if (unit) await (await this.#units()).setProperties(unit.name, this.#properties(rc));
    await this.#set(parts, await this.#resources(rc));
  }

  /**
   * cgroup v1: sets cgroup.clone_children on the cgroup's cpuset directory, so that cpuset
   * cgroups made below it (pods, and the runtime's containers below those) start with its cpus
   * and mems. The flag passes down to every cgroup made after it. Without it a new cpuset cgroup
   * is empty and its maker writes cpuset.cpus and cpuset.mems, which on a small VM takes 1.4-4 ms
   * under the kernel's cpuset lock per cgroup, three per pod (the pod's, the sandbox's and each
   * container's). The values are the same either way. Not in upstream, which leaves the flag at
   * 0. A no-op on cgroup v2 or without a v1 cpuset hierarchy.
   */
  async inheritCpusets(parts: readonly string[]): Promise<void> {
    const mount = this.layout.mode === "v2" ? undefined : this.layout.v1.get("cpuset");
    if (mount === undefined) return;
    const file = posix.join(mount, this.name(parts), "cgroup.clone_children");
    try {
      if ((await this.#fs.readFile(file)).trim() === "1") return;
      await this.#fs.writeFile(file, "1");
    } catch (e) {
      throw new CgroupManagerError(
        `Cannot set ${file} of cgroup ${formatCgroupName(parts)}: ${(e as Error).message}`,
        { cause: e },
      );
    }
  }

  /** Lowers cpu shares to the minimum, for pods being torn down (upstream `ReduceCPULimits`). */
  reduceCPULimits(parts: readonly string[]): Promise<void> {
    return this.update(parts, { cpuShares: 2n });
  }

  /**
   * Removes the cgroup, its leftover child cgroups first, in every hierarchy; a cgroup that
   * still holds processes stays busy and the error names its path (upstream `Destroy`).
   */
  destroy(parts: readonly string[], signal?: AbortSignal): Promise<void> {
    return this.#timed("destroy", () => this.#destroy(parts, signal));
  }

  async #destroy(parts: readonly string[], signal?: AbortSignal): Promise<void> {
    const unit = this.#unit(parts);
    if (unit) {
      try {
        await (await this.#units()).stopUnit(unit.name, signal);
      } catch (e) {
        signal?.throwIfAborted();
        throw new CgroupManagerError(
          `unable to destroy cgroup paths for cgroup ${formatCgroupName(parts)} : ${
            (e as Error).message
          }`,
          { cause: e },
        );
      }
    }
    const failed: string[] = [];
    let first: unknown;
    for (const dir of this.#allDirs(parts)) {
      try {
        await removePath(this.#fs, this.#clock, dir, signal);
      } catch (e) {
        signal?.throwIfAborted();
        failed.push(`${dir}: ${(e as Error).message}`);
        first ??= e;
      }
    }
    if (failed.length > 0) {
      throw new CgroupManagerError(
        `unable to destroy cgroup paths for cgroup ${formatCgroupName(parts)} : ` +
          `Failed to remove paths: ${failed.join("; ")}`,
        { cause: first },
      );
    }
  }

  /** Every pid in the cgroup or its descendants, in any hierarchy, sorted (upstream `Pids`). */
  async pids(parts: readonly string[]): Promise<number[]> {
    const out = new Set<number>();
    for (const mount of this.mountPoints()) {
      await collectPids(this.#fs, this.#log, posix.join(mount, this.name(parts)), out);
    }
    return [...out].sort((a, b) => a - b);
  }

  /** memory.usage_in_bytes (v1) or memory.current (v2) (upstream `MemoryUsage`). */
  async memoryUsage(parts: readonly string[]): Promise<bigint> {
    const v2 = this.layout.mode === "v2";
    const mount = v2 ? this.layout.unified : this.layout.v1.get("memory");
    if (mount === undefined) {
      throw new CgroupManagerError("no cgroup v1 mountpoint for memory controller found");
    }
    const file = v2 ? "memory.current" : "memory.usage_in_bytes";
    return BigInt(await readTrimmed(this.#fs, posix.join(mount, this.name(parts), file)));
  }

  /**
   * The cgroup's current cpu (shares, quota, period) or memory (limit) settings, read from its
   * files (upstream `GetCgroupConfig`): on v2 the shares come from cpu.weight, an unlimited
   * quota ("max") is -1, and so is an unlimited memory.max.
   */
  async config(parts: readonly string[], resource: "cpu" | "memory"): Promise<ResourceConfig> {
    const v2 = this.layout.mode === "v2";
    const mount = v2 ? this.layout.unified : this.layout.v1.get(resource);
    if (mount === undefined) {
      throw new CgroupManagerError(
        `failed to build ${resource} cgroup fs path for cgroup ${formatCgroupName(parts)}`,
      );
    }
    const dir = posix.join(mount, this.name(parts));
    const read = async (file: string) => {
      try {
        return await readTrimmed(this.#fs, posix.join(dir, file));
      } catch (e) {
        throw new CgroupManagerError(
          `failed to read ${file} for cgroup ${dir}: ${(e as Error).message}`,
          { cause: e },
        );
      }
    };
    const int = (file: string, text: string) => {
      if (text === "max") return -1n;
      if (!/^-?[0-9]+$/.test(text)) {
        throw new CgroupManagerError(`failed to parse ${file} (${JSON.stringify(text)}) of ${dir}`);
      }
      const n = BigInt(text);
      // An unsigned value past int64 (v1's unlimited) reads as unlimited.
      return n > 2n ** 63n - 1n ? -1n : n;
    };
    if (resource === "memory") {
      const file = v2 ? "memory.max" : "memory.limit_in_bytes";
      return { memory: int(file, await read(file)) };
    }
    if (v2) {
      const max = await read("cpu.max");
      const [quota, period] = max.split(/\s+/);
      if (quota === undefined || period === undefined) {
        throw new CgroupManagerError(
          `failed to correctly parse content of cpu.max file ('${max}') for cgroup ${dir}`,
        );
      }
      const weight = int("cpu.weight", await read("cpu.weight"));
      return {
        cpuShares: ((weight - 1n) * 262142n) / 9999n + 2n,
        cpuQuota: int("cpu.max", quota),
        cpuPeriod: int("cpu.max", period),
      };
    }
    return {
      cpuShares: int("cpu.shares", await read("cpu.shares")),
      cpuQuota: int("cpu.cfs_quota_us", await read("cpu.cfs_quota_us")),
      cpuPeriod: int("cpu.cfs_period_us", await read("cpu.cfs_period_us")),
    };
  }

  /** The host's hugepage sizes in bytes, read once (runc `HugePageSizes`). */
  hugePageSizes(): Promise<number[]> {
    this.#hugePageSizes ??= (async () => {
      try {
        const names: string[] = [];
        for await (const e of Deno.readDir(this.#hugePagesDir)) names.push(e.name);
        return hugePageSizesFromNames(names);
      } catch {
        return [];
      }
    })();
    return this.#hugePageSizes;
  }

  /** The slice of a CgroupName and its parent slice, with the systemd driver. */
  #unit(parts: readonly string[]): { name: string; parent: string } | undefined {
    if (this.driver !== "systemd") return undefined;
    const path = this.name(parts).split("/").filter(Boolean);
    const name = path.at(-1);
    if (name === undefined) return undefined;
    return { name, parent: path.at(-2) ?? "-.slice" };
  }

  #units(): Promise<SystemdUnits> {
    this.#systemd ??= this.#connectSystemd().catch((e) => {
      this.#systemd = undefined;
      throw e;
    });
    return this.#systemd;
  }

  #properties(rc: ResourceConfig): ReturnType<typeof resourceProperties> {
    return resourceProperties(rc, this.layout.mode === "v2");
  }

  #supportedV2(): Promise<Set<string>> {
    this.#v2Controllers ??= (async () => {
      const text = await this.#fs.readFile(`${this.layout.unified}/cgroup.controllers`);
      const root = new Set(text.split(/\s+/));
      return new Set(V2_SUPPORTED.filter((c) => root.has(c)));
    })();
    return this.#v2Controllers;
  }

  async #resources(rc: ResourceConfig): Promise<Resources> {
    const v2 = this.layout.mode === "v2";
    const hugetlb = v2 ? (await this.#supportedV2()).has("hugetlb") : this.layout.v1.has("hugetlb");
    if (!hugetlb) this.#log.v(6).info("Optional subsystem not supported: hugetlb");
    const sizes = hugetlb ? await this.hugePageSizes() : undefined;
    return toResources(rc, { v2, hugePageSizes: sizes, logger: this.#log });
  }

  #allDirs(parts: readonly string[]): string[] {
    if (this.layout.mode === "v2") return [posix.join(this.layout.unified!, this.name(parts))];
    return [...new Set(v1Dirs(this.layout, this.name(parts)).map((d) => d.dir))];
  }

  async #createV1(parts: readonly string[]): Promise<void> {
    try {
      await createV1(this.#fs, this.layout, this.name(parts));
    } catch (e) {
      throw new CgroupManagerError(
        `Cannot create cgroup ${formatCgroupName(parts)}: ${(e as Error).message}`,
        { cause: e },
      );
    }
  }

  async #set(parts: readonly string[], res: Resources): Promise<void> {
    try {
      if (this.layout.mode === "v2") {
        await setV2(this.#fs, posix.join(this.layout.unified!, this.name(parts)), res);
        return;
      }
      const path = this.name(parts);
      const at = (c: string) => {
        const mount = this.layout.v1.get(c);
        return mount === undefined ? undefined : posix.join(mount, path);
      };
      await setV1(this.#fs, {
        memory: at("memory"),
        cpu: at("cpu"),
        pids: at("pids"),
        hugetlb: at("hugetlb"),
      }, res);
    } catch (e) {
      throw new CgroupManagerError(
        `Cannot update cgroup ${formatCgroupName(parts)}: ${(e as Error).message}`,
        { cause: e },
      );
    }
  }
}
