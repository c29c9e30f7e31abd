/**
 * @module
 * Test fixtures for the container manager's cgroup modules: a cgroup v1, v2 or hybrid host
 * built in a temporary directory (mountinfo, hierarchy roots, /sys/kernel/mm/hugepages), and a
 * {@link CgroupFs} over it that behaves like the kernel's cgroupfs where the managers depend on
 * it: mkdir fills a new cgroup with its controllers' files (v2: the parent's subtree_control
 * decides which; v1: cgroup.clone_children is inherited, and a cpuset child of a parent with it
 * set starts with the parent's cpus and mems), writes never create files, cpu.shares is
 * clamped, a memory limit below usage is EBUSY, subtree_control refuses controllers the cgroup
 * lacks, and rmdir of a cgroup with children or processes is EBUSY. Every write is logged in
 * order. Not used in production.
 */

import { posix } from "node:path";
import { type CgroupLayout, type CgroupMode, detectCgroupLayout } from "../cm/cgroup_layout.ts";
import { type CgroupFs, realCgroupFs } from "../cm/cgroupfs.ts";
import { CgroupManager } from "../cm/cgroup_manager.ts";
import { FakeClock } from "../util/clock.ts";
import { createLogger, type Logger } from "../klog/klog.ts";

/** What {@link makeCmHost} builds. */
export interface CmHostOptions {
  /** v1 mounts as their super options, e.g. "cpu,cpuacct"; default depends on the mode. */
  v1?: string[];
  /** The root cgroup2 controllers (v2 and hybrid). */
  v2Controllers?: string[];
  /** Hugepage sizes in kB listed under /sys/kernel/mm/hugepages. @default [2048] */
  hugePagesKB?: number[];
  /** Whether hugetlb has `.rsvd.` files (kernel 5.7+). @default true */
  rsvd?: boolean;
  /** The root cpuset. @default "0-1" */
  cpus?: string;
}

/** A fixture host. */
export interface CmHost {
  root: string;
  layout: CgroupLayout;
  fs: FixtureCgroupFs;
  hugePagesDir: string;
  /** The directory of cgroup `path` ("/kubepods") in the hierarchy of `controller` ("" = v2). */
  dir(controller: string, path: string): string;
  /** A control file's content, trimmed. */
  read(controller: string, path: string, file: string): Promise<string>;
  /** Sets a file as the kernel would (usage, processes); bypasses the write log. */
  poke(controller: string, path: string, file: string, value: string): Promise<void>;
  cleanup(): Promise<void>;
}

const DEFAULT_V1: Record<"v1" | "hybrid", string[]> = {
  v1: ["cpu,cpuacct", "cpuset", "memory", "devices", "pids", "hugetlb", "name=systemd"],
  hybrid: ["cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "pids", "name=systemd"],
};
const V1_UNLIMITED = "9223372036854771712";

/** An error worded as Deno words a failed system call, with its errno in `code`. */
function errno(code: string, msg: string, op: string, path: string): Error {
  return Object.assign(new Error(`${msg}: ${op} '${path}'`), { code });
}

/** The kernel-like filesystem of a fixture host. */
export class FixtureCgroupFs implements CgroupFs {
  /** Each write as "<path relative to root>=<value>", in order. */
  readonly writes: string[] = [];
  /** Writes to paths ending in a key fail once with that errno ("EINVAL"). */
  readonly failOnce = new Map<string, string>();
  readonly #root: string;
  readonly #mounts: { dir: string; controllers: string[] | "v2" }[];
  readonly #hugeKB: number[];
  readonly #rsvd: boolean;

  constructor(
    root: string,
    mounts: { dir: string; controllers: string[] | "v2" }[],
    hugeKB: number[],
    rsvd: boolean,
  ) {
    this.#root = root;
    this.#mounts = [...mounts].sort((a, b) => b.dir.length - a.dir.length);
    this.#hugeKB = hugeKB;
    this.#rsvd = rsvd;
  }

  #mountOf(path: string) {
    const m = this.#mounts.find((m) => path === m.dir || path.startsWith(`${m.dir}/`));
    if (!m) throw new Error(`fixture: ${path} is in no cgroup mount`);
    return m;
  }

  /** Writes the files a new cgroup (or a hierarchy root) has. */
  async populate(dir: string, isRoot = false, cpus = "0-1"): Promise<void> {
    const m = this.#mountOf(dir);
    const files = new Map<string, string>([["cgroup.procs", isRoot ? "1\n" : ""]]);
    const huge = this.#hugeKB.map((kb) => kb >= 1 << 20 ? `${kb >> 20}GB` : `${kb >> 10}MB`);
    if (m.controllers === "v2") {
      const parent = isRoot
        ? undefined
        : await this.readFile(`${posix.dirname(dir)}/cgroup.subtree_control`);
      const own = isRoot ? await this.readFile(`${dir}/cgroup.controllers`) : parent!;
      files.set("cgroup.controllers", own);
      files.set("cgroup.subtree_control", "");
      if (!isRoot) files.set("cgroup.type", "domain\n");
      const has = new Set(own.split(/\s+/));
      if (has.has("cpu")) {
        files.set("cpu.weight", "100\n");
        files.set("cpu.max", "max 100000\n");
      }
      if (has.has("memory")) {
        files.set("memory.max", "max\n");
        files.set("memory.current", "0\n");
      }
      if (has.has("pids")) files.set("pids.max", "max\n");
      if (has.has("cpuset")) { for (const f of ["cpuset.cpus", "cpuset.mems"]) files.set(f, "\n"); }
      for (const s of has.has("hugetlb") ? huge : []) {
        files.set(`hugetlb.${s}.max`, "max\n");
        if (this.#rsvd) files.set(`hugetlb.${s}.rsvd.max`, "max\n");
      }
    } else {
      // The flag passes to new children; a cpuset child of a flagged parent starts with the
      // parent's cpus and mems (the kernel's cpuset_css_online).
      const clone = !isRoot &&
        (await this.readFile(`${posix.dirname(dir)}/cgroup.clone_children`)).trim() === "1";
      files.set("cgroup.clone_children", clone ? "1\n" : "0\n");
      for (const c of m.controllers) {
        if (c === "cpu") {
          files.set("cpu.shares", "1024\n");
          files.set("cpu.cfs_period_us", "100000\n");
          files.set("cpu.cfs_quota_us", "-1\n");
        } else if (c === "cpuset") {
          const parent = (f: string) => this.readFile(`${posix.dirname(dir)}/${f}`);
          files.set(
            "cpuset.cpus",
            isRoot ? `${cpus}\n` : clone ? await parent("cpuset.cpus") : "\n",
          );
          files.set("cpuset.mems", isRoot ? "0\n" : clone ? await parent("cpuset.mems") : "\n");
        } else if (c === "memory") {
          files.set("memory.limit_in_bytes", `${V1_UNLIMITED}\n`);
          files.set("memory.usage_in_bytes", "0\n");
          files.set("memory.max_usage_in_bytes", "0\n");
        } else if (c === "pids" && !isRoot) {
          files.set("pids.max", "max\n");
        } else if (c === "hugetlb") {
          for (const s of huge) {
            files.set(`hugetlb.${s}.limit_in_bytes`, `${V1_UNLIMITED}\n`);
            if (this.#rsvd) files.set(`hugetlb.${s}.rsvd.limit_in_bytes`, `${V1_UNLIMITED}\n`);
          }
        }
      }
    }
    for (const [f, v] of files) await Deno.writeTextFile(`${dir}/${f}`, v);
  }

  async mkdir(path: string): Promise<boolean> {
    const created = await realCgroupFs.mkdir(path);
    if (created) await this.populate(path);
    return created;
  }

  async rmdir(path: string): Promise<void> {
    if (!await this.exists(path)) throw new Deno.errors.NotFound(`rmdir ${path}`);
    if ((await this.readDirs(path)).length > 0) {
      throw errno("EBUSY", "Device or resource busy (os error 16)", "remove", path);
    }
    const procs = await this.readFile(`${path}/cgroup.procs`).catch(() => "");
    if (procs.trim() !== "") {
      throw errno("EBUSY", "Device or resource busy (os error 16)", "remove", path);
    }
    await Deno.remove(path, { recursive: true });
  }

  readFile(path: string): Promise<string> {
    return realCgroupFs.readFile(path);
  }

  readDirs(path: string): Promise<string[]> {
    return realCgroupFs.readDirs(path);
  }

  exists(path: string): Promise<boolean> {
    return realCgroupFs.exists(path);
  }

  async writeFile(path: string, value: string): Promise<void> {
    this.writes.push(`${path.slice(this.#root.length)}=${value}`);
    for (const [suffix, code] of this.failOnce) {
      if (!path.endsWith(suffix)) continue;
      this.failOnce.delete(suffix);
      throw errno(code, `fixture ${code} (injected)`, "writefile", path);
    }
    const base = posix.basename(path);
    const dir = posix.dirname(path);
    let stored = value;
    if (base === "cpu.shares") {
      const n = BigInt(value);
      stored = String(n < 2n ? 2n : n > 262_144n ? 262_144n : n);
    } else if (base === "memory.limit_in_bytes") {
      const usage = BigInt((await this.readFile(`${dir}/memory.usage_in_bytes`)).trim());
      if (value === "-1") stored = V1_UNLIMITED;
      else if (BigInt(value) < usage) {
        throw errno("EBUSY", "Device or resource busy (os error 16)", "writefile", path);
      }
    } else if (base === "cgroup.subtree_control") {
      const own = (await this.readFile(`${dir}/cgroup.controllers`)).split(/\s+/);
      const enabled = new Set((await this.readFile(path)).split(/\s+/).filter((c) => c !== ""));
      for (const tok of value.split(/\s+/).filter((t) => t !== "")) {
        const c = tok.slice(1);
        if (!own.includes(c)) {
          throw errno("ENOENT", "No such file or directory (os error 2)", "writefile", path);
        }
        if (tok.startsWith("+")) enabled.add(c);
        else enabled.delete(c);
      }
      stored = own.filter((c) => enabled.has(c)).join(" ");
    }
    await realCgroupFs.writeFile(path, stored);
  }
}

/** Builds a fixture host of `mode` in a new temporary directory. */
export async function makeCmHost(mode: CgroupMode, opts: CmHostOptions = {}): Promise<CmHost> {
  const root = await Deno.makeTempDir({ prefix: "cm-host-" });
  const v1 = mode === "v2" ? [] : opts.v1 ?? DEFAULT_V1[mode];
  const v2Controllers = opts.v2Controllers ??
    (mode === "hybrid" ? ["hugetlb"] : ["cpuset", "cpu", "io", "memory", "hugetlb", "pids"]);
  const lines = [
    "22 27 0:21 / /proc rw,relatime - proc proc rw",
    "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw",
  ];
  const mounts: { dir: string; controllers: string[] | "v2" }[] = [];
  if (mode === "v2") {
    lines.push("31 23 0:28 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate");
    mounts.push({ dir: `${root}/sys/fs/cgroup`, controllers: "v2" });
  } else {
    lines.push("31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755");
    v1.forEach((opt, i) => {
      const name = opt.startsWith("name=") ? opt.slice(5) : opt;
      lines.push(
        `${32 + i} 31 0:${29 + i} / /sys/fs/cgroup/${name} rw,relatime - cgroup cgroup rw,${opt}`,
      );
      mounts.push({ dir: `${root}/sys/fs/cgroup/${name}`, controllers: opt.split(",") });
    });
    if (mode === "hybrid") {
      lines.push("60 31 0:60 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw");
      mounts.push({ dir: `${root}/sys/fs/cgroup/unified`, controllers: "v2" });
    }
  }
  const hugeKB = opts.hugePagesKB ?? [2048];
  const fs = new FixtureCgroupFs(root, mounts, hugeKB, opts.rsvd ?? true);
  for (const m of mounts) {
    await Deno.mkdir(m.dir, { recursive: true });
    if (m.controllers === "v2") {
      await Deno.writeTextFile(`${m.dir}/cgroup.controllers`, `${v2Controllers.join(" ")}\n`);
    }
    await fs.populate(m.dir, true, opts.cpus ?? "0-1");
  }
  const hugePagesDir = `${root}/sys/kernel/mm/hugepages`;
  await Deno.mkdir(hugePagesDir, { recursive: true });
  for (const kb of hugeKB) await Deno.mkdir(`${hugePagesDir}/hugepages-${kb}kB`);
  const layout = await detectCgroupLayout({ root, mountinfo: lines.join("\n") + "\n" });
  const dir = (controller: string, path: string) => {
    const mount = controller === "" ? layout.unified : layout.v1.get(controller);
    if (mount === undefined) throw new Error(`fixture: ${controller} is not mounted`);
    return posix.join(mount, path);
  };
  return {
    root,
    layout,
    fs,
    hugePagesDir,
    dir,
    read: async (c, path, file) => (await Deno.readTextFile(`${dir(c, path)}/${file}`)).trim(),
    poke: (c, path, file, value) => Deno.writeTextFile(`${dir(c, path)}/${file}`, value),
    cleanup: () => Deno.remove(root, { recursive: true }),
  };
}

/** A verbose logger whose lines land in `lines`. */
export function captureLogger(): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  return { lines, logger: createLogger({ verbosity: 10, write: (l) => lines.push(l) }) };
}

/** Awaits `p`, stepping the fake clock by `stepMs` whenever it is waited on. */
export async function drive<T>(clock: FakeClock, p: Promise<T>, stepMs = 1000): Promise<T> {
  let done = false;
  const watched = p.finally(() => done = true);
  watched.catch(() => {});
  while (!done) {
    await new Promise((r) => setTimeout(r, 0));
    if (clock.waiters > 0) clock.step(stepMs);
  }
  return watched;
}

/** True when the test may create real cgroups; else skips loudly, or throws under CI=true. */
export function canUseRealCgroups(what: string): boolean {
  if (Deno.build.os === "linux" && Deno.uid() === 0) return true;
  const reason = `${what} needs root on Linux (uid is ${Deno.uid()}, os is ${Deno.build.os})`;
  if (Deno.env.get("CI") === "true") throw new Error(`CI=true but ${reason}`);
  console.warn(`SKIPPING ${reason}`);
  return false;
}

/**
 * A CgroupManager on the host's real cgroups (fake clock, captured log) and a fresh top-level
 * cgroup name for the test to create and destroy. Call after {@link canUseRealCgroups}.
 */
export async function realCgroupManager(): Promise<{
  layout: CgroupLayout;
  cm: CgroupManager;
  clock: FakeClock;
  logger: Logger;
  lines: string[];
  top: string;
}> {
  const layout = await detectCgroupLayout();
  const { logger, lines } = captureLogger();
  const clock = new FakeClock();
  const cm = new CgroupManager({ layout, logger, clock });
  return {
    layout,
    cm,
    clock,
    logger,
    lines,
    top: `kubelet-ts-test-${crypto.randomUUID().slice(0, 8)}`,
  };
}
