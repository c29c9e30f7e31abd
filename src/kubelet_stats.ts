/**
 * @module
 * Wires the statistics half of the kubelet: detects the cgroup layout, builds the cAdvisor
 * equivalent over the pods' running containers and sandboxes (their pids from the runtime's
 * verbose status), the Summary provider, the entries of `/metrics/cadvisor`, and the routes
 * the API server mounts. Corresponds to the stats parts of upstream NewMainKubelet
 * (`cadvisor.New`, `stats.NewCRIStatsProvider`) and `pkg/kubelet/server/server.go`.
 */

import { join } from "node:path";
import * as api from "../proto/runtime/v1/api.ts";
import { Cadvisor, type Sample, type SampleTarget } from "./stats/cadvisor.ts";
import {
  cgroupfsName,
  type CgroupLayout,
  detectCgroupLayout,
  systemdName,
} from "./cm/cgroup_layout.ts";
import type { Clock } from "./util/clock.ts";
import type { Logger } from "./klog/klog.ts";
import type { MachineInfo } from "./stats/machine_info.ts";
import type { CadvisorEntry } from "./metrics/cadvisor_metrics.ts";
import type { PodStatus } from "./container/pod_cache.ts";
import type { ImageManagerService } from "./cri/remote_image.ts";
import type { RuntimeService } from "./cri/remote_runtime.ts";
import { httpError, type Route } from "./server/server.ts";
import { statsRoutes } from "./server/stats.ts";
import { type StatsPod, StatsProvider, type StatsProviderOptions } from "./stats/provider.ts";
import {
  SYSTEM_CONTAINER_KUBELET,
  SYSTEM_CONTAINER_MISC,
  SYSTEM_CONTAINER_PODS,
} from "./apis/stats_types.ts";
import { getPodQOS } from "./qos/qos.ts";
import type { V1Pod } from "@kubernetes/client-node";

/** The sampler id of the kubepods cgroup (the "pods" system container). */
const POD_CGROUPS_ID = "system:pods";

/** The QoS-class cgroups under kubepods (Guaranteed pods sit in kubepods itself). */
const QOS_CLASSES = ["burstable", "besteffort"] as const;

function qosCgroupId(qos: string): string {
  return `qos:${qos}`;
}

/** The sampler id of a pod's cgroup. */
function podCgroupId(uid: string): string {
  return `pod:${uid}`;
}

/** The labels the runtime puts on pod containers (upstream kubelet's container labels). */
const CONTAINER_NAME_LABEL = "io.kubernetes.container.name";

/** What {@link newKubeletStats} needs. */
export interface KubeletStatsOptions {
  readonly nodeName: string;
  readonly runtime: Pick<
    RuntimeService,
    "containerStatus" | "podSandboxStatus" | "listContainerStats"
  >;
  readonly imageService: Pick<ImageManagerService, "imageFsInfo">;
  /** The pods the kubelet runs, with their runtime status. */
  readonly pods: () => readonly StatsPod[];
  /** Every runtime pod's status (running ones are sampled). */
  readonly runtimePods: () => readonly PodStatus[];
  readonly rootDirectory: string;
  readonly podLogsDirectory: string;
  readonly machine:
    & Pick<
      MachineInfo,
      "numCores" | "memoryCapacity" | "machineID" | "systemUUID" | "bootID" | "swapCapacity"
    >
    & Partial<
      Pick<
        MachineInfo,
        | "kernelVersion"
        | "osImage"
        | "numPhysicalCores"
        | "numSockets"
        | "numBooks"
        | "numDrawers"
      >
    >;
  readonly volumeStatsAggPeriodMs?: number;
  /** The pod volumes that report their own usage (the volume manager's CSI volumes). */
  readonly volumesWithMetrics?: StatsProviderOptions["volumesWithMetrics"];
  /** Where VolumeConditionAbnormal events go. @default none */
  readonly recorder?: StatsProviderOptions["recorder"];
  readonly clock: Clock;
  readonly logger: Logger;
  /** The layout, for tests. @default detected from /proc/self/mountinfo */
  readonly layout?: CgroupLayout;
  /** Root of /proc and /sys, for tests. @default "/" */
  readonly root?: string;
  /** Config kubeletCgroups: the "kubelet" system container. @default the agent's own cgroup */
  readonly kubeletCgroups?: string;
  /** Config systemCgroups: the "misc" system container. @default none */
  readonly systemCgroups?: string;
  /** `--housekeeping-interval` in ms. @default 10000 */
  readonly housekeepingIntervalMs?: number;
  /** Config cgroupDriver: how pod cgroup names are spelled. @default "cgroupfs" */
  readonly cgroupDriver?: string;
  /** Config cgroupRoot: where the kubepods hierarchy lives. @default "/" */
  readonly cgroupRoot?: string;
}

/** The built statistics graph. */
export interface KubeletStats {
  readonly cadvisor: Cadvisor;
  readonly provider: StatsProvider;
  readonly routes: Route[];
  /** Runs the housekeeping loop until `signal` aborts. */
  run(signal: AbortSignal): Promise<void>;
}

/** Builds the statistics graph; rejects when the cgroup layout cannot be read. */
export async function newKubeletStats(o: KubeletStatsOptions): Promise<KubeletStats> {
  const layout = o.layout ?? await detectCgroupLayout({ root: o.root });
  const machineReadAt = o.clock.now();
  // System containers (upstream NodeConfig): the kubelet's cgroup is its own process's unless
  // configured; "misc" only when systemCgroups is set.
  const system: (SampleTarget & { name: string; startTime: number })[] = [{
    id: "system:kubelet",
    kind: "container",
    podUid: "",
    cgroupPath: o.kubeletCgroups || undefined,
    name: SYSTEM_CONTAINER_KUBELET,
    startTime: o.clock.now() - performance.now(),
  }];
  // Pod cgroups (kubepods/<qos>/pod<uid>) are sampled once the hierarchy exists; until then
  // a pod's figures are its sandbox and containers added up (stats/provider.ts).
  const rootParts = (o.cgroupRoot ?? "/").split("/").filter((p) => p !== "");
  const nameOf = (parts: string[]) =>
    o.cgroupDriver === "systemd" ? systemdName([...rootParts, ...parts]) : cgroupfsName([
      ...rootParts,
      ...parts,
    ]);
  const kubepods = nameOf(["kubepods"]);
  const hierarchyDir = layout.v1.get("cpu") ?? layout.v1.get("memory") ?? layout.unified;
  const kubepodsExists = () => {
    if (hierarchyDir === undefined) return false;
    try {
      return Deno.statSync(join(hierarchyDir, kubepods)).isDirectory;
    } catch {
      return false;
    }
  };
  if (o.systemCgroups) {
    system.push({
      id: "system:misc",
      kind: "container",
      podUid: "",
      cgroupPath: o.systemCgroups,
      name: SYSTEM_CONTAINER_MISC,
      startTime: machineReadAt,
    });
  }
  const targets = new Map<string, { pod: PodStatus; container?: api.ContainerStatus }>();
  /** Sandbox id to its image (the runtime's verbose status), for cAdvisor's image label. */
  const sandboxImages = new Map<string, string>();
  // A pod's cgroup target is made once: its QoS class, hence its cgroup, is fixed for its life
  // (the list is asked for at every housekeeping wake, once a second); dropped with the pod.
  const podTargets = new Map<string, SampleTarget>();
  const podTarget = (pod: V1Pod): SampleTarget => {
    const uid = pod.metadata?.uid ?? "";
    let target = podTargets.get(uid);
    if (target === undefined) {
      const qos = getPodQOS(pod);
      const parts = qos === "Guaranteed"
        ? ["kubepods", `pod${uid}`]
        : ["kubepods", qos.toLowerCase(), `pod${uid}`];
      target = { id: podCgroupId(uid), kind: "container", podUid: uid, cgroupPath: nameOf(parts) };
      podTargets.set(uid, target);
    }
    return target;
  };
  const cadvisor = new Cadvisor({
    layout,
    root: o.root,
    clock: o.clock,
    logger: o.logger,
    intervalMs: o.housekeepingIntervalMs,
    targets: () => {
      targets.clear();
      const out: SampleTarget[] = [...system];
      if (kubepodsExists()) {
        out.push({ id: POD_CGROUPS_ID, kind: "container", podUid: "", cgroupPath: kubepods });
        for (const qos of QOS_CLASSES) {
          out.push({
            id: qosCgroupId(qos),
            kind: "container",
            podUid: "",
            cgroupPath: nameOf(["kubepods", qos]),
          });
        }
        const seen = new Set<string>();
        for (const { pod } of o.pods()) {
          const target = podTarget(pod);
          seen.add(target.podUid);
          out.push(target);
        }
        for (const uid of podTargets.keys()) if (!seen.has(uid)) podTargets.delete(uid);
      }
      for (const pod of o.runtimePods()) {
        for (const s of pod.sandboxStatuses) {
          if (s.state !== api.PodSandboxState.SANDBOX_READY) continue;
          out.push({ id: s.id, kind: "sandbox", podUid: pod.id });
          targets.set(s.id, { pod });
        }
        for (const c of pod.containerStatuses) {
          if (c.state !== api.ContainerState.CONTAINER_RUNNING) continue;
          out.push({ id: c.id, kind: "container", podUid: pod.id });
          targets.set(c.id, { pod, container: c });
        }
      }
      return out;
    },
    pidOf: async (t, signal) => {
      if (t.id === "system:kubelet") return Deno.pid;
      const res = t.kind === "sandbox"
        ? await o.runtime.podSandboxStatus(t.id, true, signal)
        : await o.runtime.containerStatus(t.id, true, signal);
      // containerd's info JSON holds the OCI spec too: parsed once for both fields.
      const { pid, image } = parseVerboseInfo(res.info);
      if (t.kind === "sandbox" && image !== undefined) sandboxImages.set(t.id, image);
      return pid;
    },
  });
  const provider = new StatsProvider({
    nodeName: o.nodeName,
    cadvisor,
    pods: o.pods,
    runtime: o.runtime,
    imageService: o.imageService,
    rootDirectory: o.rootDirectory,
    podLogsDirectory: o.podLogsDirectory,
    memoryCapacityBytes: o.machine.memoryCapacity,
    swapCapacityBytes: o.machine.swapCapacity,
    volumeStatsAggPeriodMs: o.volumeStatsAggPeriodMs,
    ...(o.volumesWithMetrics ? { volumesWithMetrics: o.volumesWithMetrics } : {}),
    ...(o.recorder ? { recorder: o.recorder } : {}),
    clock: o.clock,
    logger: o.logger,
    root: o.root,
    systemContainers: [
      ...system.map(({ name, id, startTime }) => ({ name, id, startTime })),
      { name: SYSTEM_CONTAINER_PODS, id: POD_CGROUPS_ID, startTime: machineReadAt },
    ],
    podCgroupId,
  });
  // cAdvisor's series: the root, the kubepods and QoS cgroups and every pod cgroup (raw
  // cgroups: no name or image; a pod cgroup carries its pod's name and namespace, as the
  // kubelet's label function finds the pod by cgroup), and every container and sandbox (the
  // containerd handler: name is the id, image the runtime's, container "" for a sandbox).
  const cadvisorEntries = (): CadvisorEntry[] => {
    const entries: CadvisorEntry[] = [];
    const node = cadvisor.node();
    if (node) entries.push(toEntry("/", "", "", "", "", "", node));
    for (const id of [POD_CGROUPS_ID, ...QOS_CLASSES.map(qosCgroupId)]) {
      const s = cadvisor.latest(id);
      if (s?.cgroup.cpu || s?.cgroup.memory) {
        entries.push(toEntry(s.cgroupPath ?? "", "", "", "", "", "", s));
      }
    }
    for (const { pod } of o.pods()) {
      const s = cadvisor.latest(podCgroupId(pod.metadata?.uid ?? ""));
      if (!s || (!s.cgroup.cpu && !s.cgroup.memory)) continue;
      const m = pod.metadata ?? {};
      entries.push(toEntry(s.cgroupPath ?? "", "", "", "", m.name ?? "", m.namespace ?? "", s));
    }
    for (const id of sandboxImages.keys()) if (!targets.has(id)) sandboxImages.delete(id);
    for (const [id, { pod, container }] of targets) {
      const sample = cadvisor.latest(id);
      if (!sample) continue;
      const name = container ? container.labels[CONTAINER_NAME_LABEL] ?? "" : "";
      const image = container ? container.image?.image ?? "" : sandboxImages.get(id) ?? "";
      entries.push(
        toEntry(sample.cgroupPath ?? "", id, image, name, pod.name, pod.namespace, sample),
      );
    }
    return entries;
  };
  return {
    cadvisor,
    provider,
    routes: statsRoutes({
      summary: (signal) => provider.summary(signal),
      cpuAndMemory: () => provider.cpuAndMemory(),
      cadvisorEntries,
      // The kubelet's cached MachineInfo carries no timestamp: samples are unstamped.
      machine: {
        numCores: o.machine.numCores,
        numPhysicalCores: o.machine.numPhysicalCores,
        numSockets: o.machine.numSockets,
        numBooks: o.machine.numBooks ?? 0,
        numDrawers: o.machine.numDrawers ?? 0,
        memoryBytes: o.machine.memoryCapacity,
        swapBytes: o.machine.swapCapacity,
        machineID: o.machine.machineID,
        systemUUID: o.machine.systemUUID,
        bootID: o.machine.bootID,
        // No NVM support in the kubelet's cAdvisor build (no ipmctl): zeros, as upstream's.
        nvm: { memoryModeCapacity: 0, appDirectModeCapacity: 0, avgPowerBudget: 0 },
      },
      cadvisorOptions: {
        versionInfo: {
          kernelVersion: o.machine.kernelVersion ?? "",
          osVersion: o.machine.osImage ?? "",
          dockerVersion: "",
          cadvisorVersion: "",
          cadvisorRevision: "",
        },
        pressure: layout.mode === "v2" && psiAvailable(layout.unified),
      },
      logger: o.logger,
    }),
    run: (signal) => cadvisor.run(signal),
  };
}

/** The statistics endpoints when statistics could not start: 500 with the reason. */
export function statsUnavailableRoutes(reason: string): Route[] {
  return ["/stats/summary", "/metrics/resource", "/metrics/cadvisor"].map((pattern) => ({
    pattern,
    handler: (_r, res) =>
      httpError(res, 500, `Internal Error: statistics are unavailable: ${reason}`),
  }));
}

/** cAdvisor registers the pressure families only where the cgroup2 root has cpu.pressure. */
function psiAvailable(unified: string | undefined): boolean {
  if (unified === undefined) return false;
  try {
    return Deno.statSync(join(unified, "cpu.pressure")).isFile;
  } catch {
    return false;
  }
}

/**
 * The pid and image in a CRI verbose status: containerd's `info` JSON has `"pid"` and, for a
 * sandbox, `"image"`; each undefined when absent or malformed.
 */
export function parseVerboseInfo(
  info: Readonly<Record<string, string>>,
): { pid?: number; image?: string } {
  const raw = info["info"];
  if (raw === undefined) return {};
  let parsed: { pid?: unknown; image?: unknown };
  try {
    parsed = JSON.parse(raw) ?? {};
  } catch {
    return {};
  }
  const { pid, image } = parsed;
  return {
    ...(typeof pid === "number" && Number.isInteger(pid) && pid > 0 ? { pid } : {}),
    ...(typeof image === "string" && image !== "" ? { image } : {}),
  };
}

function toEntry(
  id: string,
  name: string,
  image: string,
  container: string,
  pod: string,
  namespace: string,
  s: Sample,
): CadvisorEntry {
  const m = s.cgroup.memory;
  const d = s.cgroup.detail;
  const cfs = d?.cpu.cfs;
  const p = s.processes;
  const pids = s.cgroup.pids;
  const ns = (v: number | undefined) => v === undefined ? undefined : v / 1e9;
  const psi = (x: { some: { total: number }; full: { total: number } } | undefined) =>
    x && { someUs: x.some.total, fullUs: x.full.total };
  return {
    id,
    name,
    image,
    container,
    pod,
    namespace,
    timestampMs: s.time,
    cpu: s.cgroup.cpu && {
      usageSecondsTotal: Number(s.cgroup.cpu.usageCoreNanoSeconds) / 1e9,
      userSecondsTotal: ns(d?.cpu.userNanoSeconds),
      systemSecondsTotal: ns(d?.cpu.systemNanoSeconds),
      cfs: cfs && {
        periods: cfs.periods,
        throttledPeriods: cfs.throttledPeriods,
        throttledSecondsTotal: cfs.throttledNanoSeconds / 1e9,
        burstPeriods: cfs.bursts,
        burstSecondsTotal: ns(cfs.burstNanoSeconds),
      },
    },
    loadStats: s.cgroup.cpu !== undefined,
    memory: m && {
      usageBytes: m.usageBytes,
      workingSetBytes: m.workingSetBytes,
      rssBytes: m.rssBytes,
      pageFaults: m.pageFaults,
      majorPageFaults: m.majorPageFaults,
      limitBytes: m.limitBytes ?? Infinity,
      cacheBytes: d?.memory.cacheBytes,
      swapBytes: d?.memory.swapBytes,
      failcnt: d?.memory.failcnt,
      kernelUsageBytes: d?.memory.kernelUsageBytes,
      mappedFileBytes: d?.memory.mappedFileBytes,
      maxUsageBytes: d?.memory.maxUsageBytes,
      totalActiveFileBytes: d?.memory.activeFileBytes,
      totalInactiveFileBytes: d?.memory.inactiveFileBytes,
    },
    spec: d?.spec,
    blkio: d?.blkio?.map((b) => ({ ...b, device: blockDeviceName(b.major, b.minor) })),
    oomEvents: d?.oomKills,
    network: s.network?.map((n) => ({ ...n })),
    startTimeSeconds: d?.creationTimeMs === undefined ? undefined : d.creationTimeMs / 1000,
    processes: p?.processes,
    fileDescriptors: p?.fileDescriptors,
    sockets: p?.sockets,
    ulimits: p?.ulimits,
    threads: pids?.current,
    threadsMax: pids === undefined ? undefined : pids.limit ?? 0,
    pressure: d?.psi &&
      { cpu: psi(d.psi.cpu), memory: psi(d.psi.memory), io: psi(d.psi.io) },
  };
}

const deviceNames = new Map<string, string>();

/** "/dev/<name>" of a block device by number (sysfs), as cAdvisor's disk map names it. */
function blockDeviceName(major: number, minor: number): string {
  const key = `${major}:${minor}`;
  let name = deviceNames.get(key);
  if (name === undefined) {
    try {
      name = `/dev/${Deno.readLinkSync(`/sys/dev/block/${key}`).split("/").at(-1)}`;
    } catch {
      name = key;
    }
    deviceNames.set(key, name);
  }
  return name;
}
