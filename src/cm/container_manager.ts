/**
 * @module
 * The container manager as the pod lifecycle uses it: with cgroupsPerQOS (upstream's default)
 * it checks the cgroup root and the cgroup driver (the runtime's, when it says), creates the
 * node allocatable cgroup `<cgroupRoot>/kubepods` sized to capacity minus kube and system
 * reserved, the QoS cgroups `burstable` and `besteffort` under it (their CPU shares kept in
 * line with the pods every minute and on admission), and each pod's cgroup before its sandbox
 * starts (the sandbox's cgroup parent), removing the cgroups of pods that are gone at
 * housekeeping. Without cgroupsPerQOS pods run in the runtime's default cgroups. Built from
 * `cgroup_manager.ts`, `node_container_manager.ts`, `qos_container_manager.ts` and
 * `pod_container_manager.ts`. Corresponds to upstream `pkg/kubelet/cm/container_manager_linux.go`
 * (NewContainerManager, Start, NewPodContainerManager, UpdateQOSCgroups).
 */

import type { V1Pod } from "@kubernetes/client-node";
import type * as api from "../../proto/runtime/v1/api.ts";
import { type CgroupDriver, CgroupManager, type ResourceConfig } from "./cgroup_manager.ts";
import type { CgroupLayout } from "./cgroup_layout.ts";
import type { CgroupFs } from "./cgroupfs.ts";
import type { Clock } from "../util/clock.ts";
import type { EventRecorder } from "../client/record.ts";
import type { Logger } from "../klog/klog.ts";
import type { KubeletConfiguration } from "../apis/config_types.ts";
import {
  checkCgroupDriver,
  NodeContainerManager,
  validateSystemRequirements,
} from "./node_container_manager.ts";
import { PodContainerManager } from "./pod_container_manager.ts";
import type { ExclusiveCpus } from "./exclusive_cpus.ts";
import { QOSContainerManager } from "./qos_container_manager.ts";
import type { KubeletMetrics } from "../metrics/metrics.ts";
import { errorText } from "../util/errors.ts";

/** How often the QoS cgroups follow the pods (upstream periodicQOSCgroupUpdateInterval). */
export const QOS_UPDATE_INTERVAL_MS = 60_000;

/** The longest an orphan scan is skipped while the kept pods stay the same. */
export const ORPHAN_RESCAN_MS = 60_000;

/** What the pod lifecycle needs of pod cgroups. */
export interface PodCgroups {
  /** The sandbox's cgroup parent as the runtime takes it; "" without pod cgroups. */
  cgroupParent(pod: V1Pod): string;
  /** Creates the pod's cgroup (and refreshes the QoS cgroups) when it does not exist. */
  ensureExists(pod: V1Pod): Promise<void>;
  /**
   * Upstream cleanupOrphanedPodCgroups: the cgroup of a pod not in `keep` is removed (its
   * processes killed first) in the background, as upstream's goroutine per pod, so housekeeping
   * does not wait for hundreds of removals; while the pod's volumes still exist its CPU is only
   * lowered to the minimum, so memory-backed volumes stay charged to it. Returns once the scan
   * is done; {@link PodCgroups.orphansRemoved} waits for the removals.
   */
  cleanupOrphans(keep: ReadonlySet<string>, opts?: CleanupOrphansOptions): Promise<void>;
  /** Resolves when every removal {@link PodCgroups.cleanupOrphans} started so far has ended. */
  orphansRemoved(): Promise<void>;
  /** The pod cgroup's current cpu or memory settings (upstream GetPodCgroupConfig). */
  getConfig(pod: V1Pod, resource: "cpu" | "memory"): Promise<ResourceConfig>;
  /** Writes these settings, and only these, to the pod's cgroup (SetPodCgroupConfig). */
  setConfig(pod: V1Pod, rc: ResourceConfig): Promise<void>;
  /** The settings the pod (as allocated) asks for (upstream ResourceConfigForPod). */
  specConfig(pod: V1Pod): ResourceConfig;
  /** The memory the pod's cgroup uses now, in bytes. */
  memoryUsage(pod: V1Pod): Promise<bigint>;
}

/** Options of {@link PodCgroups.cleanupOrphans}. */
export interface CleanupOrphansOptions {
  /** Whether the pod may still have volumes (upstream podVolumesExist). @default none have */
  volumesExist?: (uid: string) => boolean;
  /** Stops the scan and the removals it started. */
  signal?: AbortSignal;
}

/** What {@link newContainerManager} needs. */
export interface ContainerManagerOptions {
  /** The configuration fields it reads; unset ones take upstream's defaults. */
  readonly config: Partial<
    Pick<
      KubeletConfiguration,
      | "cgroupsPerQOS"
      | "cgroupDriver"
      | "cgroupRoot"
      | "enforceNodeAllocatable"
      | "systemReserved"
      | "kubeReserved"
      | "systemReservedCgroup"
      | "kubeReservedCgroup"
      | "cpuCFSQuota"
      | "cpuCFSQuotaPeriod"
      | "podPidsLimit"
      | "qosReserved"
    >
  >;
  readonly layout: CgroupLayout;
  readonly runtime: { runtimeConfig(signal?: AbortSignal): Promise<api.RuntimeConfigResponse> };
  /** Node capacity as quantities: cpu, memory, hugepages-*, and "pid". */
  readonly capacity: Readonly<Record<string, string>>;
  /** The pods the kubelet runs and that are not terminal. */
  readonly activePods: () => readonly V1Pod[];
  readonly nodeName: string;
  readonly recorder: EventRecorder;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly signal?: AbortSignal;
  /** The cgroup filesystem, for tests. @default the host's */
  readonly cgroupFs?: CgroupFs;
  /** Where hugepage sizes are listed, for tests. @default /sys/kernel/mm/hugepages */
  readonly hugePagesDir?: string;
  /** Cgroup operation durations and the runtime's RuntimeConfig support. @default none */
  readonly metrics?: Pick<KubeletMetrics, "cgroupManagerDuration" | "criLosingSupport">;
  /**
   * Pods on exclusive CPUs, whose pod cgroup gets no CFS quota (newExclusiveCpus, which honours
   * DisableCPUQuotaWithExclusiveCPUs). @default none: every pod's CPU limit is enforced
   */
  readonly exclusiveCpus?: Pick<ExclusiveCpus, "pod">;
}

/** The built container manager. */
export interface ContainerManager {
  /** Pod cgroups; undefined without cgroupsPerQOS. */
  readonly podCgroups?: PodCgroups;
  /** Keeps the QoS cgroups in line with the pods every minute until `signal` aborts. */
  run(signal: AbortSignal): Promise<void>;
}

/** Checks and builds the cgroup tree; rejects with a start-up error naming what is wrong. */
export async function newContainerManager(o: ContainerManagerOptions): Promise<ContainerManager> {
  const { config, logger } = o;
  const perQOS = config.cgroupsPerQOS ?? true;
  if (!perQOS) return { run: () => Promise.resolve() };
  validateSystemRequirements(o.layout, { cgroupsPerQOS: perQOS });
  const driver = await checkCgroupDriver(
    (config.cgroupDriver || "cgroupfs") as CgroupDriver,
    o.runtime,
    { logger, clock: o.clock, signal: o.signal, criLosingSupport: o.metrics?.criLosingSupport },
  );
  const cgroupManager = new CgroupManager({
    layout: o.layout,
    driver,
    logger,
    clock: o.clock,
    fs: o.cgroupFs,
    hugePagesDir: o.hugePagesDir,
    durations: o.metrics?.cgroupManagerDuration,
  });
  const node = new NodeContainerManager({
    cgroupManager,
    cgroupRoot: config.cgroupRoot ?? "/",
    cgroupsPerQOS: perQOS,
    enforceNodeAllocatable: config.enforceNodeAllocatable,
    systemReserved: config.systemReserved,
    kubeReserved: config.kubeReserved,
    systemReservedCgroup: config.systemReservedCgroup,
    kubeReservedCgroup: config.kubeReservedCgroup,
    capacity: o.capacity,
    nodeName: o.nodeName,
    recorder: o.recorder,
    clock: o.clock,
    logger,
  });
  await node.validateCgroupRoot();
  await node.createNodeAllocatableCgroup();
  const qos = new QOSContainerManager({
    cgroupManager,
    rootName: node.rootName,
    qosReserved: config.qosReserved,
    allocatableMemory: () => node.allocatableMemory(),
    logger,
  });
  await qos.start();
  await qos.updateCgroups(o.activePods);
  await node.enforceNodeAllocatable(o.signal);
  const pods = new PodContainerManager({
    cgroupManager,
    qosContainers: qos.containersInfo(),
    enforceCPULimits: config.cpuCFSQuota ?? true,
    cpuPeriodUs: BigInt(config.cpuCFSQuotaPeriod ?? 100) * 1000n,
    podPidsLimit: config.podPidsLimit ?? -1,
    exclusiveCpus: o.exclusiveCpus,
    logger,
  });
  /** The pods whose cgroup removal is under way. */
  const removing = new Map<string, Promise<void>>();
  /** The kept set and time of the last orphan scan that found no orphan. */
  let clean: { readonly keep: ReadonlySet<string>; readonly at: number } | undefined;
  const podCgroups: PodCgroups = {
    cgroupParent: (pod) => pods.cgroupParent(pod),
    getConfig: (pod, resource) => pods.getConfig(pod, resource),
    setConfig: (pod, rc) => pods.setConfig(pod, rc),
    specConfig: (pod) => pods.specConfig(pod),
    memoryUsage: (pod) => pods.memoryUsage(pod),
    async ensureExists(pod) {
      if (await pods.exists(pod)) return;
      // A new pod changes the QoS class's shares first, as upstream's SyncPod does; the pod's
      // cgroup was just seen missing, so it is created without asking again.
      await qos.updateCgroups(o.activePods);
      await pods.create(pod);
    },
    async cleanupOrphans(keep, cleanup = {}) {
      const { signal, volumesExist } = cleanup;
      // Only the kubelet makes pod cgroups, for pods it keeps: after a scan that found none
      // left, the tree changes when the kept set does. The scan (three QoS directories in
      // every mounted hierarchy, every housekeeping) is skipped until then, or for at most
      // ORPHAN_RESCAN_MS, which bounds how long a cgroup made by someone else stays.
      const now = o.clock.now();
      if (clean && now - clean.at < ORPHAN_RESCAN_MS && sameMembers(clean.keep, keep)) return;
      let found = false;
      for (const uid of pods.podsFromCgroups().keys()) {
        if (keep.has(uid)) continue;
        found = true;
        if (removing.has(uid)) continue;
        if (volumesMayExist(volumesExist, uid, logger)) {
          logger.v(3).info(
            "Orphaned pod found, but volumes not yet removed.  Reducing cpu to minimum",
            { podUID: uid },
          );
          await pods.reduceCPULimits(uid).catch((e) =>
            logger.info("Failed to reduce cpu time for pod pending volume cleanup", {
              podUID: uid,
              err: errorText(e),
            })
          );
          continue;
        }
        logger.v(3).info("Orphaned pod found, removing pod cgroups", { podUID: uid });
        // Failures are logged and tolerated: the next housekeeping finds the cgroup again.
        const removal = pods.destroy(uid, signal).catch((e) => {
          if (!signal?.aborted) {
            logger.info("Failed to destroy orphaned pod cgroup", {
              podUID: uid,
              err: errorText(e),
            });
          }
        }).finally(() => removing.delete(uid));
        removing.set(uid, removal);
      }
      clean = found ? undefined : { keep: new Set(keep), at: now };
    },
    async orphansRemoved() {
      while (removing.size > 0) await Promise.all(removing.values());
    },
  };
  return {
    podCgroups,
    async run(signal) {
      while (!signal.aborted) {
        try {
          await o.clock.sleep(QOS_UPDATE_INTERVAL_MS, signal);
        } catch {
          return;
        }
        try {
          await qos.updateCgroups(o.activePods);
        } catch (e) {
          logger.error(e, "Failed to update QoS cgroup configuration");
        }
      }
    },
  };
}

function sameMembers(a: ReadonlySet<string>, b: ReadonlySet<string>): boolean {
  if (a.size !== b.size) return false;
  for (const x of a) if (!b.has(x)) return false;
  return true;
}

/** Whether the pod's volumes may exist; a check that fails says they may, as upstream. */
function volumesMayExist(
  check: ((uid: string) => boolean) | undefined,
  uid: string,
  logger: Logger,
): boolean {
  try {
    return check?.(uid) ?? false;
  } catch (e) {
    logger.error(e, "Pod found, but error occurred during checking mounted volumes from disk", {
      podUID: uid,
    });
    return true;
  }
}
