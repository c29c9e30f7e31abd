/**
 * @module
 * The cAdvisor equivalent: one housekeeping loop (every 10 s, as the kubelet runs cAdvisor)
 * samples the node's root cgroup and network, and the cgroup of every running container and
 * pod sandbox, straight from /sys/fs/cgroup and /proc; it keeps the newest sample of each and
 * the CPU rate between the last two (usageNanoCores). A container's cgroup is found once, from
 * its process (`/proc/<pid>/cgroup`, the pid from the runtime's verbose status), and then costs
 * a few small file reads per pass. Samples of containers that are gone are dropped, so memory
 * is bounded by what runs. Odd kernel data never throws out of a pass: the value is omitted and
 * the reason logged once per container. Reads cgroups through `cgroup_stats.ts`, networks
 * through `net_stats.ts`. Corresponds to cAdvisor's manager and containerData housekeeping
 * (`manager/manager.go`, `manager/container.go`) as the kubelet embeds it
 * (`pkg/kubelet/cadvisor`).
 */

import type { Clock } from "./clock.ts";
import type { Logger } from "./klog.ts";
import {
  type CgroupLayout,
  type CgroupPaths,
  cgroupPathsOf,
  containerCgroupPaths,
  parseProcCgroup,
} from "./cgroup_layout.ts";
import { type CgroupSample, readCgroupSample, readNodeSample } from "./cgroup_stats.ts";
import { type InterfaceStats, readNetworkStats, readNodeNetworkStats } from "./net_stats.ts";
import { hostRoot } from "./host_root.ts";
import { readProcFile } from "./sandbox_calls.ts";

/** cAdvisor's housekeeping interval as the kubelet sets it (`--housekeeping-interval`). */
export const HOUSEKEEPING_INTERVAL_MS = 10_000;

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
  /** Targets sampled at once. @default 16 */
  readonly concurrency?: number;
}

interface Tracked {
  paths?: CgroupPaths;
  cgroupPath?: string;
  pid?: number;
  last?: Sample;
  /** Reasons already logged for this target. */
  readonly logged: Set<string>;
}

/** Samples node and container cgroups; see the module documentation. */
export class Cadvisor {
  readonly #o: CadvisorOptions;
  readonly #tracked = new Map<string, Tracked>();
  #node: Sample | undefined;
  readonly #nodeLogged = new Set<string>();
  #pass: Promise<void> | undefined;

  constructor(opts: CadvisorOptions) {
    this.#o = opts;
  }

  /** Samples every housekeeping interval until `signal` aborts; the first pass at once. */
  async run(signal: AbortSignal): Promise<void> {
    const interval = this.#o.intervalMs ?? HOUSEKEEPING_INTERVAL_MS;
    while (!signal.aborted) {
      try {
        await this.housekeep(signal);
      } catch (e) {
        if (signal.aborted) return;
        this.#o.logger.error(e, "Failed to sample container statistics");
      }
      try {
        await this.#o.clock.sleep(interval, signal);
      } catch {
        return;
      }
    }
  }

  /** One pass over the node and every target; concurrent callers share the running pass. */
  housekeep(signal?: AbortSignal): Promise<void> {
    this.#pass ??= this.#housekeep(signal).finally(() => this.#pass = undefined);
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

  async #housekeep(signal?: AbortSignal): Promise<void> {
    const { layout, root } = this.#o;
    const targets = this.#o.targets();
    const live = new Set(targets.map((t) => t.id));
    for (const id of this.#tracked.keys()) if (!live.has(id)) this.#tracked.delete(id);

    const nodeTime = this.#o.clock.now();
    const nodeCgroup = readNodeSample(layout, { root });
    const nodeNet = await readNodeNetworkStats({ root });
    this.#logMissing(this.#nodeLogged, "/", nodeCgroup.missing);
    this.#node = withRate(this.#node, {
      time: nodeTime,
      cgroup: nodeCgroup,
      network: nodeNet,
      cgroupPath: "/",
    });

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
      if (!found) return;
      Object.assign(tracked, found);
    }
    const time = this.#o.clock.now();
    const cgroup = readCgroupSample(tracked.paths!);
    const network = target.kind === "sandbox" && tracked.pid !== undefined
      ? await readNetworkStats(tracked.pid, { root: this.#o.root ?? hostRoot() })
      : undefined;
    this.#logMissing(tracked.logged, target.id, cgroup.missing);
    // The cgroup went away (the container stopped, or was restarted under a new one): look
    // it up again next pass rather than read a dead path forever.
    if (cgroup.cpu === undefined && cgroup.memory === undefined) tracked.paths = undefined;
    tracked.last = withRate(tracked.last, {
      time,
      cgroup,
      network,
      cgroupPath: tracked.cgroupPath,
    });
  }

  async #findCgroup(
    target: SampleTarget,
    signal?: AbortSignal,
  ): Promise<{ paths: CgroupPaths; cgroupPath: string; pid?: number } | undefined> {
    const tracked = this.#tracked.get(target.id)!;
    if (target.cgroupPath !== undefined) {
      return {
        paths: cgroupPathsOf(this.#o.layout, target.cgroupPath),
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
    const paths = containerCgroupPaths(this.#o.layout, proc);
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

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
