/**
 * @module
 * The cAdvisor equivalent: one housekeeping loop samples the node's root cgroup and network
 * every 10 s, and the cgroup of every running container and pod sandbox, straight from
 * /sys/fs/cgroup and /proc; it keeps the newest sample of each and the CPU rate between the
 * last two (usageNanoCores). Each container is sampled on its own schedule, as cAdvisor's
 * dynamic housekeeping does for the kubelet: every 10 s while its figures change, every 15 s
 * once two samples in a row are equal, each interval stretched by a random 0-100 % (cAdvisor's
 * jitter), so an idle node's containers are read about every 22 s instead of every 10 s. The
 * loop wakes when the next sample is due, at most once a second, and samples everything due
 * then; containers it has not seen yet are sampled at the next wake (10 s at most). A
 * container's cgroup is found once, from its process (`/proc/<pid>/cgroup`, the pid from the
 * runtime's verbose status), and then costs a few small file reads per pass, each file read
 * once per sample; its creation time is read once and its spec (shares, quota, limits) again
 * after a minute or at once when its memory limit moves (cAdvisor reads the spec when asked, at
 * most every 5 s: a CPU-only resize shows in `container_spec_*` up to a minute later here).
 * Other processes' `/proc/<pid>/fd` and `limits` are not asked for where they cannot be read
 * (the sandbox's host view has none; a refusal of the permission sandbox is kept). Samples of
 * containers that are gone are dropped, so memory is bounded by what runs. Odd kernel data never
 * throws out of a pass: the value is omitted and the reason logged once per container. Reads
 * cgroups through `cgroup_stats.ts` (with `cgroup_detail.ts`), processes, open files and
 * sockets through `process_counts.ts`, networks through `net_stats.ts`. Corresponds to cAdvisor's
 * manager and containerData housekeeping (`manager/manager.go`, `manager/container.go`) as the
 * kubelet embeds it (`pkg/kubelet/cadvisor`).
 */

import { isDeepStrictEqual } from "node:util";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import {
  type CgroupLayout,
  cgroupPathsOf,
  containerCgroupPaths,
  parseProcCgroup,
} from "../cm/cgroup_layout.ts";
import { type CgroupSample, readCgroupSample, readNodeSample } from "./cgroup_stats.ts";
import { SampleReads } from "./_cgroup_read.ts";
import {
  type CgroupDetail,
  type DetailPaths,
  isCgroup2Only,
  readCgroupSpec,
} from "./cgroup_detail.ts";
import { type ProcAccess, type ProcessCounts, readProcessCounts } from "./process_counts.ts";
import { type InterfaceStats, readNetworkStats, readNodeNetworkStats } from "./net_stats.ts";
import { hostRoot } from "../privilege/host_root.ts";
import { readProcFile } from "../privilege/launcher_calls.ts";
import { errorText } from "../util/errors.ts";

/** cAdvisor's housekeeping interval as the kubelet sets it (`--housekeeping-interval`). */
export const HOUSEKEEPING_INTERVAL_MS = 10_000;

/** The longest a container's interval grows to while it is idle (kubelet's cAdvisor setting). */
export const MAX_HOUSEKEEPING_INTERVAL_MS = 15_000;

/** The loop wakes at most this often; samples due within it are taken together. */
export const HOUSEKEEPING_TICK_MS = 1_000;

/**
 * A container's spec (CPU shares, period and quota; memory limit, reservation and swap limit)
 * is read again after this long, or at once when its memory limit changed; its creation time
 * is read once per cgroup.
 */
export const SPEC_REFRESH_MS = 60_000;

/** A container or sandbox to sample, as the pod cache knows it. */
export interface SampleTarget {
  /** The runtime's container or sandbox id. */
  readonly id: string;
  readonly kind: "container" | "sandbox";
  readonly podUid: string;
  /**
   * A known cgroup path, relative to the hierarchy (system containers such as the kubelet's
   * own): used instead of looking the cgroup up from a pid.
   */
  readonly cgroupPath?: string;
}

/** One sampling of a cgroup, with the CPU rate over the previous one. */
export interface Sample {
  /** When it was read, ms since the epoch. */
  readonly time: number;
  readonly cgroup: CgroupSample;
  /** CPU core-nanoseconds per second since the previous sample; undefined on the first. */
  readonly usageNanoCores?: number;
  /** The cgroup's interfaces (sandboxes: the pod's network namespace; the node: the host's). */
  readonly network?: readonly InterfaceStats[];
  /** cAdvisor's `id`: the cgroup path relative to the hierarchy ("/" for the node). */
  readonly cgroupPath?: string;
  /** Processes, open files and sockets of the cgroup (`process_counts.ts`). */
  readonly processes?: ProcessCounts;
}

/** What {@link Cadvisor} needs. */
export interface CadvisorOptions {
  /** The cgroup layout (detectCgroupLayout). */
  readonly layout: CgroupLayout;
  /** What runs now: called at the start of each pass. */
  readonly targets: () => readonly SampleTarget[];
  /** The pid of a container or sandbox (CRI verbose status), undefined when it has none. */
  readonly pidOf: (target: SampleTarget, signal?: AbortSignal) => Promise<number | undefined>;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Root under which /proc is read, for tests. @default "/" */
  readonly root?: string;
  /** @default {@link HOUSEKEEPING_INTERVAL_MS} */
  readonly intervalMs?: number;
  /**
   * A container whose last two samples were equal has its interval doubled up to this.
   * @default {@link MAX_HOUSEKEEPING_INTERVAL_MS}
   */
  readonly maxIntervalMs?: number;
  /** @default {@link HOUSEKEEPING_TICK_MS} */
  readonly tickMs?: number;
  /** A number in [0, 1) for the jitter. @default Math.random */
  readonly random?: () => number;
  /** Targets sampled at once. @default 16 */
  readonly concurrency?: number;
}

interface Tracked {
  paths?: DetailPaths;
  cgroupPath?: string;
  pid?: number;
  last?: Sample;
  /** The current housekeeping interval (dynamic: base, or grown while idle). */
  interval?: number;
  /** When the next sample is due; undefined: at the next look. */
  due?: number;
  /** Reasons already logged for this target. */
  readonly logged: Set<string>;
  /** The spec and creation time of the cgroup at `paths`, and when the spec was read. */
  spec?: Pick<CgroupDetail, "spec" | "creationTimeMs"> & { readonly readAt: number };
}

/** Samples node and container cgroups; see the module documentation. */
export class Cadvisor {
  readonly #o: CadvisorOptions;
  readonly #tracked = new Map<string, Tracked>();
  #node: Sample | undefined;
  #nodeDue = -Infinity;
  readonly #nodeLogged = new Set<string>();
  #pass: Promise<void> | undefined;
  /** What /proc refused for good (the permission sandbox): not asked again. */
  readonly #procAccess: ProcAccess = {};
  /** cgroup files this kernel does not make (v1 blkio without CFQ): not asked for again. */
  readonly #absent = new Set<string>();

  /** The base housekeeping interval. */
  readonly #interval: number;

  constructor(opts: CadvisorOptions) {
    this.#o = opts;
    this.#interval = opts.intervalMs ?? HOUSEKEEPING_INTERVAL_MS;
  }

  /**
   * Samples until `signal` aborts: the node and every container at once, then whatever is due,
   * waking when the next sample is due but no more often than once a tick (see the module
   * documentation).
   */
  async run(signal: AbortSignal): Promise<void> {
    const tick = this.#o.tickMs ?? HOUSEKEEPING_TICK_MS;
    while (!signal.aborted) {
      try {
        await this.#share(false, signal);
      } catch (e) {
        if (signal.aborted) return;
        this.#o.logger.error(e, "Failed to sample container statistics");
      }
      try {
        const wait = Math.max(tick, this.#nextDue() - this.#o.clock.now());
        await this.#o.clock.sleep(wait, signal);
      } catch {
        return;
      }
    }
  }

  /**
   * One pass over the node and every target, due or not; concurrent callers share the
   * running pass.
   */
  housekeep(signal?: AbortSignal): Promise<void> {
    return this.#share(true, signal);
  }

  /** The earliest time a sample is due: the node's or a container's. */
  #nextDue(): number {
    let next = this.#nodeDue;
    for (const t of this.#tracked.values()) next = Math.min(next, t.due ?? -Infinity);
    return next;
  }

  #share(all: boolean, signal?: AbortSignal): Promise<void> {
    this.#pass ??= this.#housekeep(all, signal).finally(() => this.#pass = undefined);
    return this.#pass;
  }

  /** The newest node sample. */
  node(): Sample | undefined {
    return this.#node;
  }

  /** The newest sample of a container or sandbox, by runtime id. */
  latest(id: string): Sample | undefined {
    return this.#tracked.get(id)?.last;
  }

  /** The number of containers and sandboxes tracked (for tests and metrics). */
  get trackedCount(): number {
    return this.#tracked.size;
  }

  async #housekeep(all: boolean, signal?: AbortSignal): Promise<void> {
    const { layout, root, clock } = this.#o;
    const now = clock.now();
    const everything = this.#o.targets();
    const live = new Set(everything.map((t) => t.id));
    for (const id of this.#tracked.keys()) if (!live.has(id)) this.#tracked.delete(id);
    const targets = all ? everything : everything.filter((t) => {
      const due = this.#tracked.get(t.id)?.due;
      return due === undefined || due <= now;
    });

    if (all || this.#nodeDue <= now) {
      this.#nodeDue = now + this.#interval;
      const nodeCgroup = readNodeSample(layout, { root, absent: this.#absent });
      const nodeNet = await readNodeNetworkStats({ root });
      const rootCpu = layout.v1.get("cpu") ?? layout.unified;
      const processes = rootCpu === undefined ? undefined : readProcessCounts(rootCpu, {
        root: root ?? hostRoot(),
        rootPid: 1,
        access: this.#access(),
      });
      this.#logMissing(this.#nodeLogged, "/", nodeCgroup.missing);
      this.#node = withRate(this.#node, {
        time: now,
        cgroup: nodeCgroup,
        network: nodeNet,
        cgroupPath: "/",
        processes,
      });
    }

    const limit = Math.max(1, this.#o.concurrency ?? 16);
    let next = 0;
    const worker = async () => {
      while (next < targets.length) {
        signal?.throwIfAborted();
        const target = targets[next++]!;
        await this.#sampleTarget(target, signal);
      }
    };
    await Promise.all(Array.from({ length: Math.min(limit, targets.length) }, worker));
  }

  async #sampleTarget(target: SampleTarget, signal?: AbortSignal): Promise<void> {
    let tracked = this.#tracked.get(target.id);
    if (!tracked) {
      tracked = { logged: new Set() };
      this.#tracked.set(target.id, tracked);
    }
    if (!tracked.paths) {
      const found = await this.#findCgroup(target, signal);
      if (!found) {
        // Asked again after the base interval, not at every look.
        tracked.due = this.#o.clock.now() + this.#interval;
        return;
      }
      Object.assign(tracked, found);
    }
    const time = this.#o.clock.now();
    const paths = tracked.paths!;
    const reads = new SampleReads();
    const cgroup = readCgroupSample(paths, { spec: false, absent: this.#absent, reads });
    // CPU time that went back is a new cgroup at the same path (a pod's cgroup made again):
    // its spec and creation time are read afresh.
    const before = tracked.last?.cgroup.cpu?.usageCoreNanoSeconds;
    const now = cgroup.cpu?.usageCoreNanoSeconds;
    if (before !== undefined && now !== undefined && now < before) tracked.spec = undefined;
    this.#withSpec(tracked, cgroup, time, reads);
    const network = target.kind === "sandbox" && tracked.pid !== undefined
      ? await readNetworkStats(tracked.pid, { root: this.#o.root ?? hostRoot() })
      : undefined;
    const processes = paths.cpu === undefined ? undefined : readProcessCounts(
      paths.cpu,
      { root: this.#o.root ?? hostRoot(), rootPid: tracked.pid, access: this.#access() },
    );
    this.#logMissing(tracked.logged, target.id, cgroup.missing);
    // The cgroup went away (the container stopped, or was restarted under a new one): look
    // it up again next pass rather than read a dead path forever.
    if (cgroup.cpu === undefined && cgroup.memory === undefined) {
      tracked.paths = undefined;
      tracked.spec = undefined;
    }
    const prev = tracked.last;
    tracked.last = withRate(prev, {
      time,
      cgroup,
      network,
      cgroupPath: tracked.cgroupPath,
      processes,
    });
    this.#schedule(tracked, prev, tracked.last);
  }

  /**
   * What /proc gives: under the host view the sandboxed agent reads /proc through
   * (host_view.ts: named files only, the root set when the agent starts), no other process's
   * fd/ or limits is there, and none is asked for.
   */
  #access(): ProcAccess {
    if (this.#o.root === undefined && hostRoot() !== "/") {
      this.#procAccess.fdRefused = this.#procAccess.limitsRefused = true;
    }
    return this.#procAccess;
  }

  /**
   * Completes a sample's details with the cgroup's spec and creation time: kept from an earlier
   * sample of the same cgroup unless {@link SPEC_REFRESH_MS} passed or the memory limit moved.
   */
  #withSpec(tracked: Tracked, cgroup: CgroupSample, time: number, reads: SampleReads): void {
    if (cgroup.detail === undefined) return;
    const limitMoved = tracked.last !== undefined &&
      tracked.last.cgroup.memory?.limitBytes !== cgroup.memory?.limitBytes;
    if (
      tracked.spec === undefined || limitMoved || time - tracked.spec.readAt >= SPEC_REFRESH_MS
    ) {
      const paths = tracked.paths!;
      // The creation time is the cgroup's for good (read until known); a cgroup found again
      // starts over.
      const known = tracked.spec?.creationTimeMs;
      const fresh = readCgroupSpec(paths, isCgroup2Only(paths), {
        creationTime: known === undefined,
        reads,
      });
      tracked.spec = {
        spec: fresh.spec,
        creationTimeMs: known ?? fresh.creationTimeMs,
        readAt: time,
      };
    }
    cgroup.detail.spec = tracked.spec.spec;
    cgroup.detail.creationTimeMs = tracked.spec.creationTimeMs;
  }

  /**
   * The next sample's time, as cAdvisor's nextHousekeepingInterval: the interval doubles (up
   * to the maximum) after two equal samples and goes back to the base after a change; the
   * wait is the interval plus a random share of it of up to 100 %.
   */
  #schedule(tracked: Tracked, prev: Sample | undefined, last: Sample): void {
    const base = this.#interval;
    const max = this.#o.maxIntervalMs ?? MAX_HOUSEKEEPING_INTERVAL_MS;
    let interval = tracked.interval ?? base;
    if (prev !== undefined) interval = sameFigures(prev, last) ? Math.min(interval * 2, max) : base;
    tracked.interval = interval;
    tracked.due = last.time + interval + (this.#o.random ?? Math.random)() * interval;
  }

  async #findCgroup(
    target: SampleTarget,
    signal?: AbortSignal,
  ): Promise<{ paths: DetailPaths; cgroupPath: string; pid?: number } | undefined> {
    const tracked = this.#tracked.get(target.id)!;
    const { layout } = this.#o;
    if (target.cgroupPath !== undefined) {
      return {
        paths: {
          ...cgroupPathsOf(layout, target.cgroupPath),
          blkio: blkioDir(layout, target.cgroupPath),
        },
        cgroupPath: target.cgroupPath,
      };
    }
    let pid: number | undefined;
    try {
      pid = await this.#o.pidOf(target, signal);
    } catch (e) {
      signal?.throwIfAborted();
      this.#logMissing(tracked.logged, target.id, [`no pid from the runtime: ${errorText(e)}`]);
      return undefined;
    }
    if (pid === undefined || pid <= 0) {
      this.#logMissing(tracked.logged, target.id, ["the runtime reports no pid"]);
      return undefined;
    }
    let text: string;
    try {
      text = await readProcFile(this.#o.root ?? hostRoot(), pid, "cgroup");
    } catch (e) {
      this.#logMissing(tracked.logged, target.id, [`/proc/${pid}/cgroup: ${errorText(e)}`]);
      return undefined;
    }
    const proc = parseProcCgroup(text);
    const paths: DetailPaths = {
      ...containerCgroupPaths(layout, proc),
      blkio: blkioDir(layout, proc.get("blkio")),
    };
    const cgroupPath = proc.get("cpu") ?? proc.get("memory") ?? proc.get("") ?? "";
    return { paths, cgroupPath, pid };
  }

  #logMissing(logged: Set<string>, id: string, reasons: readonly string[]) {
    for (const reason of reasons) {
      if (logged.has(reason)) continue;
      logged.add(reason);
      this.#o.logger.v(2).info("Statistics value omitted", { id, reason });
    }
  }
}

/** The v1 blkio directory of a cgroup path (relative to its hierarchy), when blkio is mounted. */
function blkioDir(layout: CgroupLayout, path: string | undefined): string | undefined {
  const mount = layout.v1.get("blkio");
  if (mount === undefined || path === undefined) return undefined;
  const root = layout.mountRoots?.get("blkio");
  const rel = root && root !== "/" && path.startsWith(root) ? path.slice(root.length) : path;
  return rel === "" || rel === "/" ? mount : `${mount}/${rel.replace(/^\/+/, "")}`;
}

/** `sample` with usageNanoCores computed against `prev` (upstream's two-sample rate). */
function withRate(prev: Sample | undefined, sample: Sample): Sample {
  const before = prev?.cgroup.cpu?.usageCoreNanoSeconds;
  const now = sample.cgroup.cpu?.usageCoreNanoSeconds;
  if (prev === undefined || before === undefined || now === undefined) return sample;
  const elapsedNs = BigInt(Math.round((sample.time - prev.time) * 1e6));
  // A counter that went backwards belongs to a new cgroup: no rate until the next sample.
  if (elapsedNs <= 0n || now < before) return sample;
  return { ...sample, usageNanoCores: Number(((now - before) * 1_000_000_000n) / elapsedNs) };
}

/** Whether two samples hold the same figures (cAdvisor's StatsEq: CPU, memory, pids, network). */
function sameFigures(a: Sample, b: Sample): boolean {
  return isDeepStrictEqual(a.cgroup.cpu, b.cgroup.cpu) &&
    isDeepStrictEqual(a.cgroup.memory, b.cgroup.memory) &&
    isDeepStrictEqual(a.cgroup.pids, b.cgroup.pids) && isDeepStrictEqual(a.network, b.network);
}
