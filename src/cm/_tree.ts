/**
 * @module
 * Directory work on cgroupfs for cgroup_manager.ts, as opencontainers/cgroups does it: creating
 * a cgroup's directory in one hierarchy (v1 cpuset's copy of cpus and mems from the parent,
 * `cpusetEnsureParent`; v2's `CreateCgroupPath` enabling the root's controllers down the tree),
 * removing it with its leftover children (`RemovePath`, retrying EBUSY), and listing the pids in
 * a cgroup subtree (upstream cgroupCommon `Pids`). Private to cgroup_manager.ts.
 */

import { posix } from "node:path";
import { type CgroupFs, errnoOf } from "./cgroupfs.ts";
import type { CgroupLayout } from "./cgroup_layout.ts";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";

/** runc's v1 subsystems in its order; devices is skipped on create (SkipDevices) but removed. */
const V1_SUBSYSTEMS = [
  "cpuset",
  "devices",
  "memory",
  "cpu",
  "cpuacct",
  "pids",
  "blkio",
  "hugetlb",
  "net_cls",
  "net_prio",
  "perf_event",
  "freezer",
  "rdma",
  "name=systemd",
  "misc",
];
/** Named hierarchies runc joins without failing when it cannot. */
const V1_JOIN_ONLY = new Set(["name=systemd", "misc"]);

/** A cgroup's directory per v1 subsystem runc manages, in its order (+ cgroup2 in hybrid). */
export function v1Dirs(layout: CgroupLayout, path: string): { subsystem: string; dir: string }[] {
  const out: { subsystem: string; dir: string }[] = [];
  for (const s of V1_SUBSYSTEMS) {
    const mount = layout.v1.get(s);
    if (mount !== undefined) out.push({ subsystem: s, dir: posix.join(mount, path) });
  }
  if (layout.mode === "hybrid" && layout.unified !== undefined) {
    out.push({ subsystem: "", dir: posix.join(layout.unified, path) });
  }
  return out;
}

/**
 * runc fs `Manager.Apply(-1)`: makes the cgroup's directory in every mounted subsystem (not
 * devices); named hierarchies and the hybrid cgroup2 tree are joined on a best-effort basis.
 * The hierarchies are independent, so their directories are made at once; the first failure
 * in runc's subsystem order is the one reported.
 */
export async function createV1(fs: CgroupFs, layout: CgroupLayout, path: string): Promise<void> {
  const done = new Set<string>();
  const work: { subsystem: string; made: Promise<void> }[] = [];
  for (const { subsystem, dir } of v1Dirs(layout, path)) {
    if (subsystem === "devices" || done.has(dir)) continue;
    done.add(dir);
    const made = subsystem === "cpuset"
      ? createCpuset(fs, layout.v1.get("cpuset")!, dir)
      : mkdirAll(fs, dir);
    work.push({ subsystem, made });
  }
  const results = await Promise.allSettled(work.map((w) => w.made));
  for (const [i, r] of results.entries()) {
    const { subsystem } = work[i]!;
    if (r.status === "fulfilled" || subsystem === "" || V1_JOIN_ONLY.has(subsystem)) continue;
    const e = r.reason;
    throw new Error(`${subsystem}: ${(e as Error).message}`, { cause: e });
  }
}

/** mkdir -p: the directory first, its missing parents only when the kernel says ENOENT. */
export async function mkdirAll(fs: CgroupFs, dir: string): Promise<void> {
  try {
    await fs.mkdir(dir);
  } catch (e) {
    const parent = posix.dirname(dir);
    if (errnoOf(e) !== "ENOENT" || parent === dir) throw e;
    await mkdirAll(fs, parent);
    await fs.mkdir(dir);
  }
}

function levelsBelow(mount: string, dir: string): string[] {
  const rel = posix.relative(mount, dir);
  return rel === "" ? [] : rel.split("/");
}

const CPUSET_FILES = ["cpuset.cpus", "cpuset.mems"] as const;

/**
 * Makes a v1 cpuset cgroup: a new cpuset cgroup has empty cpus and mems (no task can join it),
 * so it copies its parent's when empty (runc `cpusetEnsureParent` and `cpusetCopyIfNeeded`).
 * The usual case, a new pod below existing QoS cgroups, costs one mkdir and the copy; a missing
 * parent, or a parent whose own cpus or mems are empty, makes it walk every level from the
 * mount as runc does, copying down where empty.
 */
export async function createCpuset(fs: CgroupFs, mount: string, dir: string): Promise<void> {
  if (dir === mount) return;
  const parent = posix.dirname(dir);
  try {
    await fs.mkdir(dir);
  } catch (e) {
    if (errnoOf(e) !== "ENOENT") throw e;
    await createCpusetLevels(fs, mount, dir);
    return;
  }
  for (const f of CPUSET_FILES) {
    if ((await fs.readFile(`${dir}/${f}`)).trim() !== "") continue;
    const value = await fs.readFile(`${parent}/${f}`);
    if (value.trim() === "") {
      await createCpusetLevels(fs, mount, dir);
      return;
    }
    await fs.writeFile(`${dir}/${f}`, value);
  }
}

/** Every level below the mount, made when missing and given its parent's cpus and mems when empty. */
async function createCpusetLevels(fs: CgroupFs, mount: string, dir: string): Promise<void> {
  let current = mount;
  for (const part of levelsBelow(mount, dir)) {
    const parent = current;
    current = `${current}/${part}`;
    await fs.mkdir(current);
    for (const f of CPUSET_FILES) {
      if ((await fs.readFile(`${current}/${f}`)).trim() !== "") continue;
      await fs.writeFile(`${current}/${f}`, await fs.readFile(`${parent}/${f}`));
    }
  }
}

/**
 * runc fs2 CreateCgroupPath: makes every level below the cgroup2 mount, writes all the root's
 * controllers into each ancestor's cgroup.subtree_control (one at a time when together fails)
 * and refuses threaded subtrees when domain controllers are needed. Levels it made are removed
 * again when it fails.
 */
export async function createUnifiedPath(
  fs: CgroupFs,
  mount: string,
  dir: string,
  domainControllers: boolean,
): Promise<void> {
  const controllers = (await fs.readFile(`${mount}/cgroup.controllers`)).split(/\s+/)
    .filter((c) => c !== "").map((c) => `+${c}`);
  const levels = levelsBelow(mount, dir);
  const created: string[] = [];
  try {
    let current = mount;
    for (let i = 0; i <= levels.length; i++) {
      if (i > 0) {
        current = `${current}/${levels[i - 1]}`;
        if (await fs.mkdir(current)) created.push(current);
        await checkCgroupType(fs, current, domainControllers);
      }
      if (i === levels.length || controllers.length === 0) continue;
      const file = `${current}/cgroup.subtree_control`;
      try {
        await fs.writeFile(file, controllers.join(" "));
      } catch {
        for (const c of controllers) await fs.writeFile(file, c).catch(() => {});
      }
    }
  } catch (e) {
    for (const d of created.reverse()) await fs.rmdir(d).catch(() => {});
    throw e;
  }
}

async function checkCgroupType(fs: CgroupFs, dir: string, domain: boolean): Promise<void> {
  const type = (await fs.readFile(`${dir}/cgroup.type`).catch(() => "")).trim();
  if (type === "domain invalid") {
    if (domain) {
      throw new Error(
        `cannot enter cgroupv2 "${dir}" with domain controllers -- it is in an invalid state`,
      );
    }
    await fs.writeFile(`${dir}/cgroup.type`, "threaded").catch(() => {});
  } else if ((type === "threaded" || type === "domain threaded") && domain) {
    throw new Error(
      `cannot enter cgroupv2 "${dir}" with domain controllers -- it is in ${type} mode`,
    );
  }
}

/**
 * runc RemovePath: rmdir; else remove the child cgroups first and retry, backing off from 1 ms
 * (doubling, 10 times) while the kernel says busy (processes still leaving). Gone is success.
 */
export async function removePath(
  fs: CgroupFs,
  clock: Clock,
  dir: string,
  signal?: AbortSignal,
): Promise<void> {
  try {
    await fs.rmdir(dir);
    return;
  } catch (e) {
    if (errnoOf(e) === "ENOENT") return;
  }
  let children: string[];
  try {
    children = await fs.readDirs(dir);
  } catch (e) {
    if (errnoOf(e) === "ENOENT") return;
    throw e;
  }
  for (const child of children) await removePath(fs, clock, `${dir}/${child}`, signal);
  let delay = 1;
  for (let tries = 10;; tries--) {
    try {
      await fs.rmdir(dir);
      return;
    } catch (e) {
      const errno = errnoOf(e);
      if (errno === "ENOENT") return;
      if (errno !== "EBUSY" || tries === 0) throw e;
    }
    await clock.sleep(delay, signal);
    delay *= 2;
  }
}

/** Adds the pids of `dir`'s cgroup.procs and of every cgroup below it to `out`. */
export async function collectPids(
  fs: CgroupFs,
  log: Logger,
  dir: string,
  out: Set<number>,
): Promise<void> {
  let text: string;
  try {
    text = await fs.readFile(`${dir}/cgroup.procs`);
  } catch (e) {
    if (errnoOf(e) !== "ENOENT") {
      log.v(4).info("Cgroup manager encountered error getting procs for cgroup path", {
        path: dir,
        err: (e as Error).message,
      });
    }
    return;
  }
  for (const line of text.split("\n")) if (line.trim() !== "") out.add(Number(line));
  let children: string[] = [];
  try {
    children = await fs.readDirs(dir);
  } catch { /* the cgroup went away meanwhile */ }
  for (const child of children) await collectPids(fs, log, `${dir}/${child}`, out);
}
