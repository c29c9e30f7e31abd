/**
 * @module
 * Builds the Summary API document (`/stats/summary`) from what the agent measures: CPU, memory,
 * processes and network from the cAdvisor equivalent's newest samples (`cadvisor.ts`), the
 * containers' writable layers from the runtime (CRI ListContainerStats, ImageFsInfo), and
 * filesystem usage of the node, the image filesystem, pod volumes and container logs (statvfs or
 * `df`, and `du`, through `fs_stats.ts`, volumes and logs refreshed at most every volumeStatsAggPeriod).
 * Swap, IO and pressure (psi, cgroup v2 only, as cAdvisor reads it) come from the samples'
 * details. Only running containers are reported, and only pods that have one, as upstream's
 * removeTerminatedContainers leaves them. A pod's CPU, memory and swap are the sum of its
 * sandbox and containers until pods get their own cgroups (the kubepods hierarchy). Corresponds to upstream `pkg/kubelet/stats` (provider.go,
 * cri_stats_provider.go, helper.go) and `pkg/kubelet/server/stats/summary.go`.
 */

import { join } from "node:path";
import type { V1Pod, V1Volume } from "@kubernetes/client-node";
import type * as api from "../../proto/runtime/v1/api.ts";
import type { Cadvisor, Sample } from "./cadvisor.ts";
import type { Clock } from "../util/clock.ts";
import { diskUsage, type FsUsage, statFilesystems } from "./fs_stats.ts";
import type { Logger } from "../klog/klog.ts";
import type { PodStatus } from "../container/pod_cache.ts";
import {
  capacityOf,
  cpuStats,
  fsStats,
  ioStats,
  isLocalEphemeral,
  iso,
  memoryStats,
  networkStats,
  nsToMs,
  sumSamples,
  swapStats,
  u64,
} from "./_helper.ts";
import { readRlimit } from "./process_stats.ts";
import type {
  ContainerStats,
  FsStats,
  NodeStats,
  PodStats,
  Summary,
  SwapStats,
  VolumeStats,
} from "../apis/stats_types.ts";
import { MetricsNotSupportedError, podVolumeDir, type VolumeUsage } from "../volume/plugin.ts";
import { ephemeralClaimName } from "../volume/persistent_volume_claims.ts";
import { type EventRecorder, podRef } from "../client/record.ts";

/** A pod the summary covers: its API object and its runtime status. */
export interface StatsPod {
  readonly pod: V1Pod;
  readonly status: PodStatus;
}

/** What {@link StatsProvider} needs. */
export interface StatsProviderOptions {
  readonly nodeName: string;
  readonly cadvisor: Pick<Cadvisor, "node" | "latest">;
  /** The pods to report (the pod manager's, with the pod cache's status). */
  readonly pods: () => readonly StatsPod[];
  readonly runtime: {
    listContainerStats(filter?: api.ContainerStatsFilter, signal?: AbortSignal): Promise<
      api.ContainerStats[]
    >;
  };
  readonly imageService: { imageFsInfo(signal?: AbortSignal): Promise<api.ImageFsInfoResponse> };
  /** `--root-dir`: the node filesystem, and `<root>/pods` for volumes. */
  readonly rootDirectory: string;
  /** `podLogsDir`: `<dir>/<ns>_<name>_<uid>/<container>/`. */
  readonly podLogsDirectory: string;
  /** The node's memory capacity in bytes: the node's memory limit. */
  readonly memoryCapacityBytes: number;
  /** The machine's swap (SwapTotal) in bytes: the node's swap limit. @default 0 */
  readonly swapCapacityBytes?: number;
  readonly clock: Clock;
  readonly logger: Logger;
  /** How long volume and log usage stays fresh, in ms. @default 60000 (volumeStatsAggPeriod) */
  readonly volumeStatsAggPeriodMs?: number;
  /** Root under which /proc is read, for tests. @default "/" */
  readonly root?: string;
  /**
   * Raw cgroups reported as the node's system containers (upstream: "kubelet" is the agent's
   * own cgroup, "runtime" and "misc" when configured, "pods" the kubepods cgroup), each with
   * its id in the cAdvisor sampler. @default none
   */
  readonly systemContainers?: readonly SystemContainer[];
  /**
   * The sampler id of a pod's own cgroup; its sample, when it has one, is the pod's CPU,
   * memory and processes (upstream's pod cgroup). @default none: containers added up
   */
  readonly podCgroupId?: (uid: string) => string;
  /**
   * The set-up volumes of a pod whose plugin reports its own usage (CSI volumes: upstream's
   * metricsCsi), by pod volume name; asked at most every volumeStatsAggPeriod. @default none
   */
  readonly volumesWithMetrics?: (uid: string) => readonly MetricsVolume[];
  /** Where VolumeConditionAbnormal events go (the CSIVolumeHealth gate). @default none */
  readonly recorder?: Pick<EventRecorder, "event">;
}

/** A set-up volume that reports its own usage (see {@link StatsProviderOptions}). */
export interface MetricsVolume {
  /** The pod's volume name. */
  readonly name: string;
  getMetrics(signal?: AbortSignal): Promise<VolumeUsage>;
}

/** A claim's volume stats, as kubelet_volume_stats_* shows them. */
export interface ClaimVolumeStats {
  readonly pvcRef: { readonly name: string; readonly namespace: string };
  readonly stats: VolumeStats;
}

/** A system container: its Summary name, its sampler id, and when it started (ms). */
export interface SystemContainer {
  readonly name: string;
  readonly id: string;
  readonly startTime: number;
}

/** Volume types whose directory the kubelet measures (plugins with du metrics). */
const MEASURED_VOLUMES: ReadonlyMap<keyof V1Volume, string> = new Map([
  ["emptyDir", "kubernetes.io/empty-dir"],
  ["configMap", "kubernetes.io/configmap"],
  ["secret", "kubernetes.io/secret"],
  ["downwardAPI", "kubernetes.io/downward-api"],
  ["projected", "kubernetes.io/projected"],
]);

interface DirUsage {
  readonly at: number;
  readonly bytes: number;
  readonly inodes: number;
  readonly fs?: FsUsage;
}

/** CRI's CONTAINER_RUNNING. */
const CONTAINER_RUNNING = 1;

/** Upstream lists a pod only through its running containers. */
function hasRunningContainer(p: StatsPod): boolean {
  return p.status.containerStatuses.some((c) => c.state === CONTAINER_RUNNING);
}

/** Containers' swap added up, the last one's time (upstream addSwapStats without a pod cgroup). */
function sumSwap(swaps: readonly SwapStats[]): SwapStats | undefined {
  const last = swaps.at(-1);
  if (!last) return undefined;
  let usage = 0;
  let available = 0;
  for (const s of swaps) {
    usage += s.swapUsageBytes ?? 0;
    available += s.swapAvailableBytes ?? 0;
  }
  return { time: last.time, swapAvailableBytes: available, swapUsageBytes: usage };
}

/** How {@link StatsProvider.summary} is taken. */
export interface SummaryOptions {
  /**
   * The containers' writable layers (`rootfs`, from the runtime's ListContainerStats); false
   * leaves them out, and the pods' ephemeral storage counts logs and volumes only.
   * @default true
   */
  readonly writableLayers?: boolean;
}

/** Builds `/stats/summary`; see the module documentation. */
export class StatsProvider {
  readonly #o: StatsProviderOptions;
  /** du results by directory, refreshed after volumeStatsAggPeriod; pruned to live pods. */
  readonly #dirs = new Map<string, DirUsage>();
  /** Usage of the volumes that report their own, by `<uid>/<volume>`, with when it was asked. */
  readonly #volumeMetrics = new Map<string, { at: number; usage?: VolumeUsage }>();
  #boot: number | undefined;

  constructor(opts: StatsProviderOptions) {
    this.#o = opts;
  }

  /** The whole summary (upstream Get with updateStats=true). */
  async summary(signal?: AbortSignal, opts: SummaryOptions = {}): Promise<Summary> {
    const pods = this.#o.pods();
    const [node, layers] = await Promise.all([
      this.#nodeStats(signal),
      opts.writableLayers === false ? new Map() : this.#writableLayers(signal),
    ]);
    await this.#refreshDirs(pods, signal);
    await this.#refreshVolumeMetrics(pods, signal);
    return {
      node: node.stats,
      pods: pods.filter(hasRunningContainer).map((p) =>
        this.#podStats(p, layers, node.imageFs, node.stats.fs, true)
      ),
    };
  }

  /** Size and free space of the image filesystem (for image GC), undefined when unknown. */
  async imageFsCapacity(
    signal?: AbortSignal,
  ): Promise<{ capacityBytes: number; availableBytes: number } | undefined> {
    const info = (await this.#o.imageService.imageFsInfo(signal)).imageFilesystems[0];
    const mount = info?.fsId?.mountpoint;
    if (!mount) return undefined;
    const fs = (await statFilesystems([mount], { signal })).get(mount);
    if (fs === undefined || fs instanceof Error) return undefined;
    return { capacityBytes: fs.capacityBytes, availableBytes: fs.availableBytes };
  }

  /** CPU and memory only, no filesystems (upstream GetCPUAndMemoryStats, for /metrics/resource). */
  cpuAndMemory(): Summary {
    const node = this.#o.cadvisor.node();
    const nodeStats: NodeStats = {
      nodeName: this.#o.nodeName,
      systemContainers: this.#systemContainers(false),
      startTime: iso(this.#bootTime()),
      cpu: node && cpuStats(node),
      memory: node && memoryStats(node, this.#o.memoryCapacityBytes),
      swap: node && swapStats(node, this.#o.swapCapacityBytes ?? 0),
    };
    return {
      node: nodeStats,
      pods: this.#o.pods().filter(hasRunningContainer).map((p) => {
        const s = this.#podStats(p, new Map(), undefined, undefined, false);
        return {
          podRef: s.podRef,
          startTime: s.startTime,
          containers: s.containers.map(({ name, startTime, cpu, memory, swap }) => ({
            name,
            startTime,
            cpu,
            memory,
            swap,
          })),
          cpu: s.cpu,
          memory: s.memory,
          swap: s.swap,
        };
      }),
    };
  }

  async #nodeStats(
    signal?: AbortSignal,
  ): Promise<{ stats: NodeStats; imageFs?: FsStats }> {
    const { clock, rootDirectory } = this.#o;
    const node = this.#o.cadvisor.node();
    let imageInfo: api.FilesystemUsage | undefined;
    try {
      imageInfo = (await this.#o.imageService.imageFsInfo(signal)).imageFilesystems[0];
    } catch (e) {
      signal?.throwIfAborted();
      this.#o.logger.error(e, "Failed to get the image filesystem info");
    }
    const imageMount = imageInfo?.fsId?.mountpoint;
    const paths = imageMount ? [rootDirectory, imageMount] : [rootDirectory];
    const fsInfo = await statFilesystems(paths, { signal });
    const now = iso(clock.now());
    const nodeFs = fsStats(now, fsInfo.get(rootDirectory));
    let imageFs: FsStats | undefined;
    if (imageInfo) {
      const device = imageMount ? fsInfo.get(imageMount) : undefined;
      imageFs = {
        ...fsStats(now, device),
        usedBytes: u64(imageInfo.usedBytes?.value),
        inodesUsed: u64(imageInfo.inodesUsed?.value),
      };
    }
    const rlimit = await readRlimit({ root: this.#o.root });
    return {
      imageFs,
      stats: {
        nodeName: this.#o.nodeName,
        systemContainers: this.#systemContainers(true),
        startTime: iso(this.#bootTime()),
        cpu: node && cpuStats(node),
        memory: node && memoryStats(node, this.#o.memoryCapacityBytes),
        io: node && ioStats(node),
        network: node?.network && networkStats(node.time, node.network),
        fs: nodeFs,
        runtime: imageFs && { imageFs, containerFs: imageFs },
        rlimit: {
          time: iso(rlimit.time.getTime()),
          maxpid: rlimit.maxPid,
          curproc: rlimit.curProc,
        },
        swap: node && swapStats(node, this.#o.swapCapacityBytes ?? 0),
      },
    };
  }

  /**
   * The system containers with a sample: CPU, memory and swap, and IO in the full summary
   * (upstream's cgroup stats, GetCgroupStats and GetCgroupCPUAndMemoryStats).
   */
  #systemContainers(full: boolean): ContainerStats[] | undefined {
    const out: ContainerStats[] = [];
    for (const c of this.#o.systemContainers ?? []) {
      const s = this.#o.cadvisor.latest(c.id);
      if (!s || (!s.cgroup.cpu && !s.cgroup.memory)) continue;
      out.push({
        name: c.name,
        startTime: iso(c.startTime),
        cpu: cpuStats(s),
        memory: memoryStats(s, undefined),
        io: full ? ioStats(s) : undefined,
        swap: swapStats(s),
      });
    }
    return out.length > 0 ? out : undefined;
  }

  /** The writable layer of each container by id (CRI ListContainerStats). */
  async #writableLayers(signal?: AbortSignal): Promise<Map<string, api.FilesystemUsage>> {
    const out = new Map<string, api.FilesystemUsage>();
    try {
      for (const s of await this.#o.runtime.listContainerStats(undefined, signal)) {
        if (s.attributes?.id && s.writableLayer) out.set(s.attributes.id, s.writableLayer);
      }
    } catch (e) {
      signal?.throwIfAborted();
      this.#o.logger.error(e, "Failed to list container stats from the runtime");
    }
    return out;
  }

  #podStats(
    p: StatsPod,
    layers: ReadonlyMap<string, api.FilesystemUsage>,
    imageFs: FsStats | undefined,
    nodeFs: FsStats | undefined,
    full: boolean,
  ): PodStats {
    const { pod, status } = p;
    const meta = pod.metadata ?? {};
    const sandbox = status.sandboxStatuses[0];
    const sandboxSample = sandbox ? this.#o.cadvisor.latest(sandbox.id) : undefined;
    const startMs = sandbox ? nsToMs(sandbox.createdAt) : this.#o.clock.now();

    // Running containers only, as upstream's removeTerminatedContainers keeps them: an exited
    // one has no usage, and a start time without usage is an incomplete metric to
    // metrics-server. Statuses are newest first; one entry per name.
    const seen = new Set<string>();
    const containers: ContainerStats[] = [];
    const samples: Sample[] = sandboxSample ? [sandboxSample] : [];
    const swaps: SwapStats[] = [];
    let anyIo: string | undefined;
    let ephemeralUsed = 0;
    let ephemeralInodes = 0;
    for (const c of status.containerStatuses) {
      const name = c.metadata?.name ?? "";
      if (c.state !== CONTAINER_RUNNING || seen.has(name)) continue;
      seen.add(name);
      const sample = this.#o.cadvisor.latest(c.id);
      if (sample) samples.push(sample);
      const stats: ContainerStats = {
        name,
        startTime: iso(nsToMs(c.startedAt || c.createdAt)),
      };
      if (sample) {
        stats.cpu = cpuStats(sample);
        stats.memory = memoryStats(sample, undefined);
        if (full) stats.io = ioStats(sample);
        stats.swap = swapStats(sample);
        if (stats.swap) swaps.push(stats.swap);
        anyIo ??= stats.io?.time;
      }
      const layer = layers.get(c.id);
      if (layer) {
        stats.rootfs = {
          ...fsStats(iso(nsToMs(layer.timestamp)), undefined),
          ...capacityOf(imageFs),
          usedBytes: u64(layer.usedBytes?.value),
          inodesUsed: u64(layer.inodesUsed?.value),
        };
        ephemeralUsed += stats.rootfs.usedBytes ?? 0;
        ephemeralInodes += stats.rootfs.inodesUsed ?? 0;
      }
      const logs = this.#dirs.get(this.#logDir(pod, name));
      if (logs) {
        stats.logs = {
          time: iso(logs.at),
          ...capacityOf(nodeFs),
          usedBytes: logs.bytes,
          inodesUsed: logs.inodes,
        };
        ephemeralUsed += logs.bytes;
        ephemeralInodes += logs.inodes;
      }
      containers.push(stats);
    }

    const volumes: VolumeStats[] = [];
    for (const v of pod.spec?.volumes ?? []) {
      const dir = this.#volumeDir(pod, v);
      const usage = dir ? this.#dirs.get(dir) : undefined;
      if (!usage) continue;
      volumes.push({
        time: iso(usage.at),
        ...capacityOf(usage.fs && fsStats("", usage.fs)),
        usedBytes: usage.bytes,
        inodesUsed: usage.inodes,
        name: v.name,
      });
      if (isLocalEphemeral(v)) {
        ephemeralUsed += usage.bytes;
        ephemeralInodes += usage.inodes;
      }
    }

    // Then the volumes that report their own usage (upstream's persistent volume stats).
    volumes.push(...this.#reportedVolumeStats(pod));

    const stats: PodStats = {
      podRef: { name: meta.name ?? "", namespace: meta.namespace ?? "", uid: meta.uid ?? "" },
      startTime: iso(startMs),
      containers,
    };
    const own = this.#o.podCgroupId && this.#o.cadvisor.latest(this.#o.podCgroupId(meta.uid ?? ""));
    const hasOwn = own !== undefined && (own.cgroup.cpu !== undefined || own.cgroup.memory);
    const summed = hasOwn ? own : sumSamples(samples);
    if (summed) {
      stats.cpu = cpuStats(summed);
      stats.memory = memoryStats(summed, undefined);
      const procs = summed.cgroup.pids?.current;
      if (procs !== undefined) stats.process_stats = { process_count: procs };
    }
    // The pod cgroup's swap and IO, else the containers' added up (upstream addSwapStats,
    // addIOStats: pod-level pressure cannot be added up, so a summed IO has only its time).
    if (hasOwn) {
      stats.swap = swapStats(own);
      if (full) stats.io = ioStats(own);
    } else {
      stats.swap = sumSwap(swaps);
      if (full && anyIo !== undefined) stats.io = { time: anyIo };
    }
    if (sandboxSample?.network) {
      stats.network = networkStats(sandboxSample.time, sandboxSample.network);
    }
    if (volumes.length > 0) stats.volume = volumes;
    stats["ephemeral-storage"] = {
      time: iso(this.#o.clock.now()),
      ...capacityOf(nodeFs),
      usedBytes: ephemeralUsed,
      inodesUsed: ephemeralInodes,
    };
    return stats;
  }

  /**
   * The stats of every claim's volume on the node, one per claim, of pods with a running
   * container (upstream volumeStatsCollector over ListPodStats), refreshed when stale.
   */
  async claimVolumeStats(signal?: AbortSignal): Promise<ClaimVolumeStats[]> {
    const pods = this.#o.pods().filter(hasRunningContainer);
    await this.#refreshVolumeMetrics(pods, signal);
    const out: ClaimVolumeStats[] = [];
    const seen = new Set<string>();
    for (const { pod } of pods) {
      for (const stats of this.#reportedVolumeStats(pod)) {
        const ref = stats.pvcRef;
        if (!ref) continue;
        const key = `${ref.namespace}/${ref.name}`;
        if (seen.has(key)) continue;
        seen.add(key);
        out.push({ pvcRef: ref, stats });
      }
    }
    return out;
  }

  /** The pod's volumes that report their own usage, in spec order, with their claim. */
  #reportedVolumeStats(pod: V1Pod): VolumeStats[] {
    const out: VolumeStats[] = [];
    const uid = pod.metadata?.uid ?? "";
    const ns = pod.metadata?.namespace ?? "";
    for (const v of pod.spec?.volumes ?? []) {
      const u = this.#volumeMetrics.get(`${uid}/${v.name}`)?.usage;
      if (!u) continue;
      const claim = v.persistentVolumeClaim?.claimName ??
        (v.ephemeral ? ephemeralClaimName(pod, v) : undefined);
      out.push({
        time: iso(u.time),
        availableBytes: u.availableBytes,
        capacityBytes: u.capacityBytes,
        usedBytes: u.usedBytes,
        inodesFree: u.inodesFree,
        inodes: u.inodes,
        inodesUsed: u.inodesUsed,
        name: v.name,
        ...(claim !== undefined ? { pvcRef: { name: claim, namespace: ns } } : {}),
        ...(u.abnormal !== undefined ? { volumeHealthStats: { abnormal: u.abnormal } } : {}),
      });
    }
    return out;
  }

  /** Asks each volume that reports its own usage, when its last answer is stale. */
  async #refreshVolumeMetrics(pods: readonly StatsPod[], signal?: AbortSignal): Promise<void> {
    const source = this.#o.volumesWithMetrics;
    if (!source) return;
    const period = this.#o.volumeStatsAggPeriodMs ?? 60_000;
    const now = this.#o.clock.now();
    const wanted = new Set<string>();
    for (const { pod } of pods) {
      const uid = pod.metadata?.uid ?? "";
      for (const v of source(uid)) {
        const key = `${uid}/${v.name}`;
        wanted.add(key);
        const last = this.#volumeMetrics.get(key);
        if (last && now - last.at < period) continue;
        try {
          const usage = await v.getMetrics(signal);
          this.#volumeMetrics.set(key, { at: now, usage });
          if (usage.abnormal && usage.message !== undefined) {
            this.#o.recorder?.event(
              podRef(pod),
              "Warning",
              "VolumeConditionAbnormal",
              `Volume ${v.name}: ${usage.message}`,
            );
          }
        } catch (e) {
          signal?.throwIfAborted();
          // Not asked again before the period ends, as upstream's calculator.
          this.#volumeMetrics.set(key, { at: now });
          if (!(e instanceof MetricsNotSupportedError)) {
            this.#o.logger.v(4).info("Failed to calculate volume metrics", {
              pod: `${pod.metadata?.namespace}/${pod.metadata?.name}`,
              podUID: uid,
              volumeName: v.name,
              err: e instanceof Error ? e.message : String(e),
            });
          }
        }
      }
    }
    for (const key of this.#volumeMetrics.keys()) {
      if (!wanted.has(key)) this.#volumeMetrics.delete(key);
    }
  }

  /** du of every pod's measured volumes and container log dirs that are stale. */
  async #refreshDirs(pods: readonly StatsPod[], signal?: AbortSignal): Promise<void> {
    const period = this.#o.volumeStatsAggPeriodMs ?? 60_000;
    const now = this.#o.clock.now();
    const wanted = new Set<string>();
    const volumeDirs = new Set<string>();
    for (const { pod, status } of pods) {
      for (const v of pod.spec?.volumes ?? []) {
        const dir = this.#volumeDir(pod, v);
        if (dir) {
          wanted.add(dir);
          volumeDirs.add(dir);
        }
      }
      for (const c of status.containerStatuses) {
        wanted.add(this.#logDir(pod, c.metadata?.name ?? ""));
      }
    }
    for (const dir of this.#dirs.keys()) if (!wanted.has(dir)) this.#dirs.delete(dir);
    const stale = [...wanted].filter((d) => {
      const u = this.#dirs.get(d);
      return u === undefined || now - u.at >= period;
    });
    if (stale.length === 0) return;
    const staleVolumes = stale.filter((d) => volumeDirs.has(d));
    const fs = staleVolumes.length > 0
      ? await statFilesystems(staleVolumes, { signal })
      : new Map<string, FsUsage | Error>();
    let next = 0;
    const worker = async () => {
      while (next < stale.length) {
        signal?.throwIfAborted();
        const dir = stale[next++]!;
        const usage = await diskUsage(dir, { signal });
        if (usage instanceof Error) {
          // A volume not set up yet, or a log dir not made yet, is simply not reported.
          this.#dirs.delete(dir);
          continue;
        }
        const info = fs.get(dir);
        this.#dirs.set(dir, {
          at: now,
          bytes: usage.bytes,
          inodes: usage.inodes,
          fs: info instanceof Error ? undefined : info,
        });
      }
    };
    await Promise.all(Array.from({ length: Math.min(8, stale.length) }, worker));
  }

  #volumeDir(pod: V1Pod, v: V1Volume): string | undefined {
    for (const [field, plugin] of MEASURED_VOLUMES) {
      if (v[field] !== undefined && v[field] !== null) {
        return podVolumeDir(
          join(this.#o.rootDirectory, "pods"),
          pod.metadata?.uid ?? "",
          plugin,
          v.name,
        );
      }
    }
    return undefined;
  }

  #logDir(pod: V1Pod, container: string): string {
    const m = pod.metadata ?? {};
    return join(this.#o.podLogsDirectory, `${m.namespace}_${m.name}_${m.uid}`, container);
  }

  /** The node's collection start: its boot (cAdvisor's root container creation time). */
  #bootTime(): number {
    this.#boot ??= this.#o.clock.now() - Deno.osUptime() * 1000;
    return this.#boot;
  }
}
