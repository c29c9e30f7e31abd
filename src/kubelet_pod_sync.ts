/**
 * @module
 * The kubelet's pod handlers and pod syncer: what the sync loop calls for each kind of change
 * (HandlePodAdditions, HandlePodUpdates, HandlePodRemoves, HandlePodReconcile, HandlePodSyncs,
 * PLEG events, HandlePodCleanups) and what the pod workers call for each phase of a pod
 * (SyncPod, SyncTerminatingPod, SyncTerminatedPod). Admission happens here, before a pod's
 * worker ever starts; a rejected pod is marked Failed with the predicate's reason and the
 * others are untouched. Static pods get mirror pods. Volumes are set up before the runtime sync,
 * torn down once the pod is terminated, and housekeeping cleans the directories of pods no
 * longer known. Talks to the pod manager, the pod workers, the runtime manager, the status
 * manager, the volume manager and the PLEG's pod cache, each through the narrow functions it
 * needs. Corresponds to the pod parts of upstream `pkg/kubelet/kubelet.go` and
 * `kubelet_pods.go` (HandlePodCleanups, makePodDataDirs, getPullSecretsForPod).
 */

import { getPodAdmitResult } from "./topologymanager/admission_error.ts";
import type { KubeletMetrics } from "./metrics/metrics.ts";
import { hasPodStarted, type PodStartupLatencyTracker } from "./pod_startup_latency_tracker.ts";
import { join } from "node:path";
import type {
  V1Node,
  V1Pod,
  V1PodCondition,
  V1PodStatus,
  V1ResourceRequirements,
  V1Secret,
} from "@kubernetes/client-node";
import type { Clock } from "./util/clock.ts";
import { type EventRecorder, podRef } from "./client/record.ts";
import { kobj, type Logger } from "./klog/klog.ts";
import type { KubeClient } from "./client/kube_client.ts";
import {
  generateAPIPodStatus,
  type GenerateStatusOptions,
  podIsTerminalPhase,
  type PodProbeResults,
  readPodCgroupForStatus,
} from "./kubelet_pods.ts";
import { readTerminationMessage } from "./kuberuntime/kuberuntime_manager.ts";
import { admitPod } from "./lifecycle/predicate.ts";
import type { PodCgroups } from "./cm/container_manager.ts";
import type { DraManager } from "./cm/dra_manager.ts";
import { isMirrorPod, isMirrorPodOf, isStaticPod, type MirrorClient } from "./pod/mirror_client.ts";
import { CONFIG_FIRST_SEEN_ANNOTATION } from "./config/pod_config.ts";
import type { PodLifecycleEvent } from "./pleg/generic.ts";
import type { PodCache, PodStatus } from "./container/pod_cache.ts";
import type { PodManager } from "./pod/pod_manager.ts";
import { PodWorkers, type PodWorkerSync, type SyncPodType } from "./pod_workers.ts";
import type { ReasonCache } from "./reason_cache.ts";
import type { StatusManager } from "./status/status_manager.ts";
import type { PodSyncResult } from "./container/sync_result.ts";
import type { VolumeManager } from "./volume/volume_manager.ts";
import type { SyncHandler } from "./kubelet_sync_loop.ts";
import * as api from "../proto/runtime/v1/api.ts";
import type { PodSyncHandler, PodSyncLoopHandler } from "./lifecycle/interfaces.ts";
import type { AllocationManager } from "./allocation/allocation_manager.ts";
import { recordResizeOperations } from "./allocation/resize_operations.ts";
import { type PodResizeConditions, REASON_ERROR } from "./status/resize_conditions.ts";
import { ALL_CONTAINERS_RESTARTING } from "./status/generate.ts";
import { resizeMessage } from "./allocation/allocation_manager.ts";
import type { UsernsManager } from "./userns/userns_manager.ts";
import { MIN_DEAD_CONTAINER_IN_POD, PodContainerDeletor } from "./pod_container_deletor.ts";
import { podIsEvicted } from "./eviction/eviction_manager.ts";

/** The runtime operations the syncer needs (upstream kubecontainer.Runtime, trimmed). */
export interface PodRuntime {
  syncPod(
    signal: AbortSignal,
    pod: V1Pod,
    podStatus: PodStatus,
    pullSecrets: readonly V1Secret[],
    /** The pod's AllContainersRestarting condition is True: remove all its containers. */
    restartAllContainers?: boolean,
  ): Promise<PodSyncResult>;
  killPod(
    signal: AbortSignal,
    pod: V1Pod | undefined,
    podStatus: PodStatus,
    gracePeriodOverride?: number,
  ): Promise<PodSyncResult>;
  /** A running container's resources differ from the allocated pod's (in-place resize). */
  isPodResizeInProgress?(allocatedPod: V1Pod, podStatus: PodStatus): boolean;
  /** Forgets what was actuated for pods not in `keep`. */
  forgetActuated?(keep: ReadonlySet<string>): Promise<void>;
  /** A container's actuated resources, for the status. */
  actuatedResources?(uid: string, name: string): V1ResourceRequirements | undefined;
  /**
   * Removes a dead container, its logs first (upstream DeleteContainer). Without it, dead
   * containers wait for the garbage collector.
   */
  deleteContainer?(containerId: string, signal: AbortSignal): Promise<void>;
}

/** What the syncer asks of the prober manager (upstream prober.Manager), all optional. */
export interface PodProber extends PodProbeResults {
  addPod(pod: V1Pod): void;
  /** Stops the liveness and startup probes of a pod being terminated. */
  stopLivenessAndStartup(pod: V1Pod): void;
  removePod(pod: V1Pod): void;
  cleanupPods(desiredUIDs: ReadonlySet<string>): void;
}

/** What the syncer asks of the volume manager (upstream VolumeManager, trimmed). */
export type PodVolumes = Pick<
  VolumeManager,
  "mountPodVolumes" | "unmountPodVolumes" | "cleanupOrphanedPodDirs" | "podVolumesExist"
>;

/** What {@link PodSyncer} needs. */
export interface PodSyncerOptions {
  readonly nodeName: string;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly recorder: EventRecorder;
  readonly podManager: PodManager;
  readonly podCache: PodCache;
  readonly runtime: PodRuntime;
  readonly statusManager: StatusManager;
  readonly reasonCache: ReasonCache;
  /** Undefined in standalone mode: no mirror pods. */
  readonly mirrorClient?: MirrorClient;
  /** Undefined in standalone mode: no pull secrets. */
  readonly kubeClient?: KubeClient;
  /** This node as admission sees it; undefined until it is known. */
  readonly getNode: () => V1Node | undefined;
  readonly nodeIPs: readonly string[];
  /**
   * Whether the pod's runtime handler supports recursive read-only mounts, for its volume mount
   * statuses. @default never
   */
  readonly supportsRecursiveReadOnly?: (pod: V1Pod) => boolean;
  /** The network's current errors, undefined when ready (upstream runtimeState.networkErrors). */
  readonly networkErrors: () => string | undefined;
  /** `<rootDirectory>/pods`. */
  readonly podsDirectory: string;
  /** The PLEG's view of the runtime's pods, for orphans: UIDs it has seen. */
  readonly runtimePodIds: () => Iterable<string>;
  /** A fresh relist, so a terminated pod's final status is read from the runtime. */
  readonly relist: (signal: AbortSignal) => Promise<void>;
  /**
   * Called after a sync changed containers or sandboxes, so the PLEG sees the change now and
   * the pod's new status goes out without waiting for the next relist (PLEG poke).
   */
  readonly runtimeChanged?: () => void;
  /**
   * Called once a sync that started containers of the pod has ended (at `syncEnd`): the PLEG
   * reads that pod's status and sends it an event (PLEG inspectPod), so it turns Running
   * without waiting for a relist of every pod. False when it could not: `runtimeChanged` is
   * called then.
   */
  readonly containersStarted?: (
    uid: string,
    syncEnd: number,
    signal: AbortSignal | undefined,
    /** Send a PodSync even when no container changed (after a resize). */
    sync?: boolean,
  ) => Promise<boolean>;
  /** `syncFrequency` in ms. @default 60000 */
  readonly resyncIntervalMs?: number;
  /** Probes; without one, containers are ready once running (no probes run). */
  readonly prober?: PodProber;
  /** Pod cgroups (the container manager's). @default none: the runtime's default cgroups */
  readonly podCgroups?: PodCgroups;
  /** Admission checks after the resource and node checks (the eviction manager's). @default [] */
  readonly admitHandlers?: readonly PodAdmitHandler[];
  /** Asked at each sync tick which pods need a sync (the active deadline's). @default [] */
  readonly syncLoopHandlers?: readonly PodSyncLoopHandler[];
  /** Asked at each status generation whether a pod must fail (the active deadline's). @default [] */
  readonly syncHandlers?: readonly PodSyncHandler[];
  /** Pod volumes; without one, no volume is set up and no pod directory is cleaned up. */
  readonly volumes?: PodVolumes;
  /**
   * Allocates what admitted pods need from the node's devices (the device manager, as
   * upstream's topology manager admit handler asks it); a failure rejects the pod with
   * UnexpectedAdmissionError. @default none
   */
  readonly resourceAllocator?: {
    /** False for a pod none of the managers has anything to give (admitted synchronously). */
    needsAllocation(pod: V1Pod): boolean;
    /** The topology manager's admission: hints, alignment, then each manager's allocation. */
    admit(pod: V1Pod): Promise<{ admit: boolean; reason?: string; message?: string }>;
  };
  /**
   * The health of a container's devices and claims (ResourceHealthStatus): the device and DRA
   * managers'. @default none
   */
  readonly allocatedResourcesStatus?: GenerateStatusOptions["allocatedResourcesStatus"];
  /** Unprepares a stopped pod's ResourceClaims. @default none */
  readonly dra?: Pick<DraManager, "unprepareResources">;
  /** Stops the pod workers. */
  readonly signal?: AbortSignal;
  /**
   * Dead instances of each container kept when one dies (the garbage collector's
   * maxPerPodContainer; at least 1). @default 1
   */
  readonly containersToKeep?: number;
  /** The pods' start-up timelines: seen, admitted, volumes, running, ready. @default none */
  readonly startupTracker?: Pick<PodStartupLatencyTracker, "recordPhase" | "retain">;
  /** kubelet_pod_start_duration_seconds and the pod workers' durations. @default none */
  readonly metrics?: Pick<
    KubeletMetrics,
    | "podStartDuration"
    | "podWorkerDuration"
    | "containersPerPodCount"
    | "podWorkerStartDuration"
    | "desiredPods"
    | "activePods"
    | "mirrorPods"
    | "workingPods"
    | "restartedPodsTotal"
    | "orphanedRuntimePodsTotal"
    | "managedEphemeralContainers"
    | "containerRequestedResizes"
    | "topologyAdmissionRequests"
    | "topologyAdmissionDuration"
  >;
  /**
   * The pods' allocated resources and pending resizes. @default none: pods are admitted as
   * their specs say and resizes are not taken (the containers keep their resources)
   */
  readonly allocation?: AllocationManager;
  /** The in-place resize conditions, shared with the allocation manager. @default none */
  readonly resizeConditions?: PodResizeConditions;
  /** The user namespaces of `hostUsers: false` pods, released with them. @default none */
  readonly userNamespaces?: Pick<
    UsernsManager,
    "release" | "cleanupOrphanedPodUsernsAllocations"
  >;
}

/** Upstream's minimal grace period when killing pods the kubelet no longer knows (orphans). */
const ORPHAN_GRACE_SECONDS = 1;

/**
 * The `config` and `static` label values of kubelet_working_pods upstream sets each
 * housekeeping (zero included), for each `lifecycle`.
 */
const WORKING_POD_KINDS: readonly (readonly [string, readonly string[]])[] = [
  ["desired", ["", "true"]],
  ["orphan", ["", "true"]],
  ["runtime_only", ["unknown"]],
];

function uidOf(pod: V1Pod): string {
  return pod.metadata?.uid ?? "";
}

function creationTime(pod: V1Pod): number {
  const t = pod.metadata?.creationTimestamp;
  return t === undefined ? 0 : new Date(t).getTime();
}

function hasRunning(status: PodStatus): boolean {
  return status.containerStatuses.some((c) => c.state === api.ContainerState.CONTAINER_RUNNING) ||
    status.sandboxStatuses.some((s) => s.state === api.PodSandboxState.SANDBOX_READY);
}

/** What a killer sets on the pod's status (upstream's PodStatusFunc for an eviction). */
export interface PodStatusOverride {
  readonly phase: "Failed";
  readonly reason: string;
  readonly message: string;
  /** Replace conditions of the same type (upstream UpdatePodCondition). */
  readonly conditions?: readonly V1PodCondition[];
}

/** An extra admission check (upstream PodAdmitHandler). */
export type PodAdmitHandler = (
  pod: V1Pod,
) => { readonly admit: boolean; readonly reason?: string; readonly message?: string };

/** The kubelet's pod handlers and syncer; see the module documentation. */
export class PodSyncer implements SyncHandler {
  readonly #o: PodSyncerOptions;
  readonly workers: PodWorkers<PodStatus>;
  /** UIDs of runtime pods with no API object, being killed as orphans. */
  readonly #orphans = new Set<string>();
  /**
   * The kept sets of the housekeeping under way: it runs beside the sync loop, so a pod
   * dispatched meanwhile joins them before the cleanup of directories and cgroups reaches it.
   */
  readonly #housekeepingKeeps = new Set<Set<string>>();
  /** Status set by whoever killed the pod (eviction), applied to every status generated. */
  readonly #statusOverrides = new Map<string, PodStatusOverride>();
  /** Termination messages by pod UID and container id, read once per exited container. */
  readonly #messages = new Map<string, Map<string, string>>();
  /** Pods whose sync in flight started containers, for containersStarted once it ends. */
  readonly #started = new Set<string>();
  /** Pods whose sync in flight resized containers: their next read sends a PodSync. */
  readonly #reinspect = new Set<string>();
  /** Removes containers as they die; undefined when the runtime cannot remove one. */
  readonly containerDeletor: PodContainerDeletor | undefined;

  constructor(opts: PodSyncerOptions) {
    this.#o = opts;
    const remove = opts.runtime.deleteContainer?.bind(opts.runtime);
    this.containerDeletor = remove && new PodContainerDeletor({
      remove,
      containersToKeep: opts.containersToKeep ?? MIN_DEAD_CONTAINER_IN_POD,
      logger: opts.logger,
      signal: opts.signal ?? new AbortController().signal,
    });
    this.workers = new PodWorkers<PodStatus>({
      syncPod: (signal, type, pod, mirror, status) =>
        this.syncPod(signal, type, pod, mirror, status),
      syncTerminatingPod: (signal, pod, grace, status) =>
        this.syncTerminatingPod(signal, pod, grace, status),
      syncTerminatedPod: (signal, pod) => this.syncTerminatedPod(signal, pod),
      getPodStatus: async (uid, minTime, signal) => {
        const entry = await opts.podCache.getNewerThan(uid, minTime, signal);
        if (entry.error) throw entry.error;
        return entry.status;
      },
      signal: opts.signal,
      resyncIntervalMs: opts.resyncIntervalMs,
      clock: opts.clock,
      logger: opts.logger,
      metrics: opts.metrics,
      synced: (uid, at) => this.#synced(uid, at),
    });
  }

  /** After a sync: a pod whose containers it started has the PLEG read it now. */
  #synced(uid: string, at: number): void {
    const { containersStarted, runtimeChanged, signal } = this.#o;
    const sync = this.#reinspect.delete(uid);
    if (!this.#started.delete(uid) || !containersStarted) return;
    void containersStarted(uid, at, signal, sync).then((ok) => ok || runtimeChanged?.());
  }

  // ---- The sync loop's handlers -------------------------------------------------------------

  /**
   * Admits and dispatches new pods, oldest first. Synchronous unless a pod needs devices: their
   * allocation asks the device plugins, and the pods after it wait for it (the sync loop waits
   * for the returned promise, as upstream's admission blocks its loop).
   */
  handlePodAdditions(pods: readonly V1Pod[]): void | Promise<void> {
    const sorted = [...pods].sort((a, b) => creationTime(a) - creationTime(b));
    return this.#addPods(sorted, 0, this.#o.clock.now(), []);
  }

  #addPods(
    pods: readonly V1Pod[],
    from: number,
    start: number,
    pendingResizes: string[],
  ): void | Promise<void> {
    const { podManager } = this.#o;
    for (let i = from; i < pods.length; i++) {
      const pod = pods[i]!;
      podManager.addPod(pod);
      if (isMirrorPod(pod)) {
        this.#handleMirrorPod(pod, start);
        continue;
      }
      const uid = uidOf(pod);
      this.#o.startupTracker?.recordPhase(pod, "seen");
      if (!this.workers.isPodTerminationRequested(uid) && !podIsTerminalPhase(pod.status)) {
        // Devices first, as upstream's allocating admit handler runs before the predicates
        // (which then see allocatable as the device manager sanitizes it).
        const allocator = this.#o.resourceAllocator;
        if (allocator?.needsAllocation(pod)) {
          return allocator.admit(pod).then(
            (r) =>
              r.admit
                ? this.#admitAndDispatch(pod, start, pendingResizes, false)
                : this.#rejectPod(pod, r.reason ?? "", r.message ?? ""),
            (e) => {
              const r = getPodAdmitResult(e);
              if (!r.admit) this.#rejectPod(pod, r.reason, r.message);
            },
          ).then(() => this.#addPods(pods, i + 1, start, pendingResizes));
        }
        this.#admitAndDispatch(pod, start, pendingResizes);
        continue;
      }
      this.#dispatchAdded(pod, start);
    }
    this.#afterAdditions(pods, pendingResizes);
  }

  /**
   * Admits a new pod and hands it to its worker, or rejects it. `countTopology` is false when
   * the topology manager admitted the pod already (it counts its own admissions).
   */
  #admitAndDispatch(
    pod: V1Pod,
    start: number,
    pendingResizes: string[],
    countTopology = true,
  ): void {
    this.#countTopology = countTopology;
    const rejected = this.#admit(pod);
    this.#countTopology = true;
    if (rejected) {
      this.#rejectPod(pod, rejected.reason, rejected.message);
      return;
    }
    if (this.#pendingAfterAdmit) pendingResizes.push(uidOf(pod));
    this.#o.startupTracker?.recordPhase(pod, "admitted");
    this.#dispatchAdded(pod, start);
  }

  /** Hands a new pod to its worker. */
  #dispatchAdded(pod: V1Pod, start: number): void {
    const { mirrorPod } = this.#o.podManager.getPodAndMirrorPod(pod);
    this.#dispatch(pod, "create", mirrorPod, start);
  }

  #afterAdditions(pods: readonly V1Pod[], pendingResizes: readonly string[]): void {
    const allocation = this.#o.allocation;
    if (allocation) {
      this.#o.resizeConditions?.backfill(pods);
      for (const uid of pendingResizes) allocation.pushPendingResize(uid);
      if (pendingResizes.length > 0) allocation.retryPendingResizes("pods_added");
    }
  }

  handlePodUpdates(pods: readonly V1Pod[]): void {
    const { podManager, clock } = this.#o;
    const start = clock.now();
    for (const pod of pods) {
      const oldPod = podManager.getPodByUID(uidOf(pod));
      podManager.updatePod(pod);
      if (isMirrorPod(pod)) {
        this.#handleMirrorPod(pod, start);
        continue;
      }
      const allocation = this.#o.allocation;
      const { metrics } = this.#o;
      if (allocation && (oldPod === undefined || recordResizeOperations(oldPod, pod, metrics))) {
        if (allocation.updatePodFromAllocation(pod).updated) {
          allocation.pushPendingResize(uidOf(pod));
          allocation.retryPendingResizes("pod_updated");
        } else {
          // A pending resize that was reverted.
          this.#o.resizeConditions?.clearPending(uidOf(pod));
        }
      }
      const { mirrorPod } = podManager.getPodAndMirrorPod(pod);
      this.#dispatch(pod, "update", mirrorPod, start);
    }
  }

  handlePodRemoves(pods: readonly V1Pod[]): void {
    const { podManager, clock } = this.#o;
    const start = clock.now();
    for (const pod of pods) {
      podManager.removePod(pod);
      if (isMirrorPod(pod)) {
        this.#handleMirrorPod(pod, start);
        continue;
      }
      // Removed from the kubelet's desired set: kill it (upstream deletePod).
      this.workers.updatePod({ updateType: "kill", pod, startTime: start });
      this.#o.allocation?.removePod(uidOf(pod));
    }
    // Resources freed: deferred resizes may fit now.
    const allocation = this.#o.allocation;
    if (allocation?.hasPendingResizes()) allocation.retryPendingResizes("pods_removed");
  }

  handlePodReconcile(pods: readonly V1Pod[]): void {
    // The API object's status changed under the kubelet: the status manager writes its own back
    // at its next reconcile, nothing has to run for it.
    const allocation = this.#o.allocation;
    let retry: "pod_terminated" | "pod_resized" | undefined;
    for (const pod of pods) {
      const old = this.#o.podManager.getPodByUID(uidOf(pod));
      this.#o.podManager.updatePod(pod);
      if (!allocation?.hasPendingResizes() || !old || retry) continue;
      // A pod that turned terminal, or whose running size shrank, frees resources for
      // deferred resizes.
      if (podIsTerminalPhase(pod.status) && !podIsTerminalPhase(old.status)) {
        retry = "pod_terminated";
      } else if (allocation.requestsShrank(old, pod)) retry = "pod_resized";
    }
    if (retry) allocation!.retryPendingResizes(retry);
  }

  handlePodSyncs(pods: readonly V1Pod[]): void {
    const start = this.#o.clock.now();
    for (const p of pods) {
      const { pod, mirrorPod, wasMirror } = this.#o.podManager.getPodAndMirrorPod(p);
      if (!pod) {
        if (wasMirror) {
          this.#o.logger.v(2).info("Unable to find pod for mirror pod, skipping", {
            mirrorPod: kobj(p),
            mirrorPodUID: uidOf(p),
          });
        }
        continue;
      }
      this.#dispatch(pod, "sync", mirrorPod, start);
      // After an evicted pod is synced, all its dead containers can go (upstream).
      if (podIsEvicted(pod.status)) this.#deleteDeadContainers(uidOf(pod), "", true);
    }
  }

  handlePlegEvents(events: readonly PodLifecycleEvent[]): void {
    const pods = new Map<string, V1Pod>();
    for (const e of events) {
      // Removal of a container is not worth a sync (upstream isSyncPodWorthy).
      if (e.type === "ContainerRemoved" || pods.has(e.id)) continue;
      const pod = this.#o.podManager.getPodByUID(e.id);
      if (pod) pods.set(e.id, pod);
      else {
        this.#o.logger.v(4).info("SyncLoop (PLEG): pod does not exist, ignore irrelevant event", {
          event: e,
        });
      }
    }
    if (pods.size > 0) this.handlePodSyncs([...pods.values()]);
    for (const e of events) {
      if (e.type === "ContainerDied") this.#cleanUpContainersInPod(e.id, e.data);
    }
  }

  /**
   * Upstream cleanUpContainersInPod: the dead instances of that container beyond the kept ones
   * go, or every dead container once the pod's content may be removed; pods the kubelet no
   * longer knows included.
   */
  #cleanUpContainersInPod(uid: string, exitedContainerId: string): void {
    this.#deleteDeadContainers(
      uid,
      exitedContainerId,
      this.workers.shouldPodContentBeRemoved(uid),
    );
  }

  /** The deletor's request for the pod's cached status; none while reading it failed. */
  #deleteDeadContainers(uid: string, containerId: string, removeAll: boolean): void {
    const { status, error } = this.#o.podCache.get(uid);
    if (error === undefined) {
      this.containerDeletor?.deleteContainersInPod(containerId, status, removeAll);
    }
  }

  handleProbeUpdate(podUID: string): void {
    const pod = this.#o.podManager.getPodByUID(podUID);
    if (pod) this.handlePodSyncs([pod]);
  }

  /** Upstream getPodsToSync: pods whose resync is due, and those a sync loop handler asks for. */
  podsToSync(): V1Pod[] {
    const out: V1Pod[] = [];
    const due = new Set(this.workers.getPodsToSync(this.#o.clock.now()));
    const handlers = this.#o.syncLoopHandlers ?? [];
    for (const pod of this.#o.podManager.getPods()) {
      if (due.has(uidOf(pod)) || handlers.some((h) => h.shouldSync(pod))) out.push(pod);
    }
    return out;
  }

  /**
   * Upstream HandlePodCleanups: orphaned workers, statuses, runtime pods and mirror pods. The
   * sync loop does not wait for it; pods dispatched meanwhile are kept.
   */
  async handlePodCleanups(signal: AbortSignal): Promise<void> {
    const { pods: allPods, mirrorPods, orphanedMirrorPodFullnames } = this.#o.podManager
      .getPodsAndMirrorPods();
    const working = this.workers.syncKnownPods(allPods);

    const keep = new Set<string>();
    for (const pod of allPods) keep.add(uidOf(pod));
    for (const [uid] of working) keep.add(uid);
    this.#housekeepingKeeps.add(keep);
    try {
      await this.#cleanup(signal, allPods, orphanedMirrorPodFullnames, working, keep);
      this.#recordPodCounts(allPods, mirrorPods.length, working);
    } finally {
      this.#housekeepingKeeps.clear();
    }
  }

  async #cleanup(
    signal: AbortSignal,
    allPods: readonly V1Pod[],
    orphanedMirrorPodFullnames: readonly string[],
    working: Map<string, PodWorkerSync>,
    keep: ReadonlySet<string>,
  ): Promise<void> {
    const { podManager, statusManager, podCache, logger, clock } = this.#o;
    statusManager.removeOrphanedStatuses(keep);
    this.#o.resizeConditions?.retain(keep);
    try {
      await this.#o.allocation?.removeOrphanedPods(keep);
      await this.#o.runtime.forgetActuated?.(keep);
    } catch (e) {
      logger.error(e, "Failed to forget the resources of pods that are gone");
    }
    this.#o.startupTracker?.retain(keep);
    this.#o.prober?.cleanupPods(keep);
    for (const uid of [...this.#messages.keys()]) if (!keep.has(uid)) this.#messages.delete(uid);
    for (const uid of [...this.#statusOverrides.keys()]) {
      if (!keep.has(uid)) this.#statusOverrides.delete(uid);
    }

    // Runtime pods the kubelet has no worker for (such as pods deleted while it was down).
    const start = clock.now();
    let orphans = 0;
    for (const uid of this.#o.runtimePodIds()) {
      if (this.workers.podWorkerState(uid) !== undefined) continue;
      const status = podCache.get(uid).status;
      if (!hasRunning(status)) continue;
      logger.v(3).info("Clean up orphaned pod containers", { podUID: uid });
      this.#orphans.add(uid);
      const pod: V1Pod = {
        metadata: { uid, name: status.name, namespace: status.namespace },
      };
      this.workers.updatePod({
        updateType: "kill",
        pod,
        runtimeOnly: true,
        startTime: start,
        killPodOptions: { podTerminationGracePeriodSecondsOverride: ORPHAN_GRACE_SECONDS },
      });
      working.set(uid, { state: "terminating", orphan: true, hasConfig: false, static: false });
      orphans++;
    }
    this.#o.metrics?.orphanedRuntimePodsTotal.inc(undefined, orphans);

    // User namespaces of pods neither known nor running (upstream
    // CleanupOrphanedPodUsernsAllocations, with the pods it knows and the runtime's running ones).
    if (this.#o.userNamespaces) {
      const known = new Set(allPods.map(uidOf));
      for (const uid of this.#o.runtimePodIds()) {
        if (hasRunning(podCache.get(uid).status)) known.add(uid);
      }
      logger.v(3).info("Clean up orphaned pod user namespace allocations");
      try {
        await this.#o.userNamespaces.cleanupOrphanedPodUsernsAllocations(known);
      } catch (e) {
        logger.error(e, "Failed cleaning up orphaned pod user namespaces allocations");
      }
    }

    // Directories of pods neither desired, nor working, nor running: their volumes are
    // torn down, then the directories go (upstream cleanupOrphanedPodDirs).
    const volumes = this.#o.volumes;
    if (volumes) {
      // Runtime pods count while something of them runs (upstream's runningPods): exited
      // containers and stopped sandboxes wait for the garbage collector, not in pod dirs.
      const keepDirs = new Set(keep);
      this.#housekeepingKeeps.add(keepDirs);
      for (const uid of this.#o.runtimePodIds()) {
        if (hasRunning(podCache.get(uid).status)) keepDirs.add(uid);
      }
      logger.v(3).info("Clean up orphaned pod directories");
      try {
        await volumes.cleanupOrphanedPodDirs(signal, keepDirs);
      } catch (e) {
        if (signal.aborted) throw e;
        logger.error(e, "Failed cleaning up orphaned pod directories");
      }
    }

    // Cgroups of pods neither desired nor working (upstream cleanupOrphanedPodCgroups).
    if (this.#o.podCgroups) {
      try {
        await this.#o.podCgroups.cleanupOrphans(keep, {
          signal,
          ...(volumes ? { volumesExist: (uid: string) => volumes.podVolumesExist(uid) } : {}),
        });
      } catch (e) {
        if (signal.aborted) throw e;
        logger.error(e, "Failed cleaning up orphaned pod cgroups");
      }
    }

    // Mirror pods whose static pod is gone.
    const mirror = this.#o.mirrorClient;
    if (mirror) {
      for (const fullName of orphanedMirrorPodFullnames) {
        const staticPod = podManager.getPodByFullName(fullName);
        if (staticPod && this.workers.couldHaveRunningContainers(uidOf(staticPod))) continue;
        try {
          await mirror.deleteMirrorPod(fullName, undefined, signal);
        } catch (e) {
          logger.error(e, "Encountered error when deleting mirror pod", { podName: fullName });
        }
      }
    }

    // Desired pods without a worker (a UID reused after termination): start them again, unless
    // removed while the cleanups above ran.
    const restarts = { "": 0, "true": 0 };
    for (const pod of allPods) {
      const uid = uidOf(pod);
      if (working.has(uid) || this.#isAdmittedPodTerminal(pod)) continue;
      if (podManager.getPodByUID(uid) === undefined) continue;
      if (this.workers.podWorkerState(uid) !== undefined) continue;
      const { mirrorPod } = podManager.getPodAndMirrorPod(pod);
      logger.v(3).info("Pod will be restarted because it is in the desired set", {
        pod: kobj(pod),
        podUID: uid,
      });
      this.#dispatch(pod, "create", mirrorPod, start);
      const isStatic = isStaticPod(pod);
      working.set(uid, { state: "sync", orphan: false, hasConfig: true, static: isStatic });
      restarts[isStatic ? "true" : ""]++;
    }
    for (const [label, n] of Object.entries(restarts)) {
      this.#o.metrics?.restartedPodsTotal.inc({ static: label }, n);
    }
  }

  /**
   * The pod counts upstream's HandlePodCleanups sets after its cleanups: desired and active pods
   * (regular, static), mirror pods, ephemeral containers, and the pod workers' pods by phase and
   * whether their pod is desired, orphaned or known only from the runtime.
   */
  #recordPodCounts(
    allPods: readonly V1Pod[],
    mirrorPods: number,
    working: ReadonlyMap<string, PodWorkerSync>,
  ): void {
    const m = this.#o.metrics;
    if (!m) return;
    const active = this.activePods();
    for (const [label, isStatic] of [["", false], ["true", true]] as const) {
      m.desiredPods.set(allPods.filter((p) => isStaticPod(p) === isStatic).length, {
        static: label,
      });
      m.activePods.set(active.filter((p) => isStaticPod(p) === isStatic).length, {
        static: label,
      });
    }
    m.mirrorPods.set(mirrorPods);
    m.managedEphemeralContainers.set(
      allPods.reduce((n, p) => n + (p.spec?.ephemeralContainers?.length ?? 0), 0),
    );
    const counts = new Map<string, number>();
    for (const w of working.values()) {
      const config = !w.hasConfig ? "runtime_only" : w.orphan ? "orphan" : "desired";
      const key = `${w.state}|${config}|${!w.hasConfig ? "unknown" : w.static ? "true" : ""}`;
      counts.set(key, (counts.get(key) ?? 0) + 1);
    }
    for (const state of ["sync", "terminating", "terminated"] as const) {
      for (const [config, statics] of WORKING_POD_KINDS) {
        for (const st of statics) {
          m.workingPods.set(counts.get(`${state}|${config}|${st}`) ?? 0, {
            lifecycle: state,
            config,
            static: st,
          });
        }
      }
    }
  }

  /**
   * Upstream killPodNow (the eviction and preemption KillPodFunc): asks the pod's worker to stop
   * it with `gracePeriodOverride` (else the pod's own) and waits for its containers to be gone,
   * at most 1.5 times the grace period and at least 10 s; past that, an ExceededGracePeriod
   * event and an error.
   */
  async killPodNow(
    pod: V1Pod,
    opts: {
      evict?: boolean;
      gracePeriodOverride?: number;
      signal?: AbortSignal;
      /** The status the pod gets while and after it is killed (an eviction's). */
      status?: PodStatusOverride;
    } = {},
  ): Promise<void> {
    if (opts.status) this.#statusOverrides.set(uidOf(pod), opts.status);
    const grace = opts.gracePeriodOverride ?? pod.spec?.terminationGracePeriodSeconds ?? 30;
    const timeoutMs = Math.max(Math.floor(grace * 1.5), 10) * 1000;
    const done = Promise.withResolvers<void>();
    this.workers.updatePod({
      updateType: "kill",
      pod,
      startTime: this.#o.clock.now(),
      killPodOptions: {
        evict: opts.evict,
        podTerminationGracePeriodSecondsOverride: opts.gracePeriodOverride,
        onCompleted: () => done.resolve(),
      },
    });
    const timer = new AbortController();
    const signal = opts.signal ? AbortSignal.any([opts.signal, timer.signal]) : timer.signal;
    const timedOut = this.#o.clock.sleep(timeoutMs, signal).then(() => true, () => false);
    try {
      if (await Promise.race([done.promise.then(() => false), timedOut])) {
        this.#o.recorder.event(
          podRef(pod),
          "Warning",
          "ExceededGracePeriod",
          "Container runtime did not kill the pod within specified grace period.",
        );
        throw new Error("timeout waiting to kill pod");
      }
    } finally {
      timer.abort();
    }
  }

  // ---- The pod workers' phases --------------------------------------------------------------

  /** Upstream SyncPod: makes the pod run as specified; true once it reached a terminal phase. */
  async syncPod(
    signal: AbortSignal,
    updateType: SyncPodType,
    pod: V1Pod,
    mirrorPod: V1Pod | undefined,
    podStatus: PodStatus | undefined,
  ): Promise<boolean> {
    const { logger, statusManager, runtime, reasonCache } = this.#o;
    const uid = uidOf(pod);
    const status = podStatus ?? this.#o.podCache.get(uid).status;
    logger.v(4).info("SyncPod enter", { pod: kobj(pod), podUID: uid, updateType });
    if (updateType === "create") {
      const seen = Date.parse(pod.metadata?.annotations?.[CONFIG_FIRST_SEEN_ANNOTATION] ?? "");
      if (!Number.isNaN(seen)) {
        this.#o.metrics?.podWorkerStartDuration.observe((this.#o.clock.now() - seen) / 1000);
      }
    }
    this.#updateResizeInProgress(pod, status);
    const apiStatus = await this.#generateStatus(pod, status, false, signal);
    this.#recordStart(pod, statusManager.getPodStatus(uid), apiStatus);
    statusManager.setPodStatus(pod, apiStatus);
    if (podIsTerminalPhase(apiStatus)) {
      logger.v(4).info("Pod is terminal, skipping sync", { pod: kobj(pod), podUID: uid });
      return true;
    }

    const networkErrors = this.#o.networkErrors();
    if (networkErrors !== undefined && !pod.spec?.hostNetwork) {
      this.#o.recorder.event(
        podRef(pod),
        "Warning",
        "NetworkNotReady",
        `network is not ready: ${networkErrors}`,
      );
      throw new Error(`network is not ready: ${networkErrors}`);
    }

    // The pod's cgroup, unless the pod is being terminated (upstream SyncPod's pcm.EnsureExists).
    const podCgroups = this.#o.podCgroups;
    if (podCgroups && !this.workers.isPodTerminationRequested(uid)) {
      try {
        await podCgroups.ensureExists(pod);
      } catch (e) {
        const err = e instanceof Error ? e.message : String(e);
        this.#o.recorder.event(
          podRef(pod),
          "Warning",
          "FailedToCreatePodContainer",
          `unable to ensure pod container exists: ${err}`,
        );
        throw new Error(
          `failed to ensure that the pod: ${uid} cgroups exist and are correctly applied: ${err}`,
          { cause: e },
        );
      }
    }

    if (isStaticPod(pod)) await this.#syncMirrorPod(pod, mirrorPod, signal);
    // Ensure the pod is being probed (upstream probeManager.AddPod).
    this.#o.prober?.addPod(pod);

    this.#makePodDataDirs(uid);
    // Volumes are not mounted for a pod being terminated (upstream IsPodTerminationRequested).
    if (this.#o.volumes && !this.workers.isPodTerminationRequested(uid)) {
      try {
        await this.#o.volumes.mountPodVolumes(signal, pod);
      } catch (e) {
        if (!signal.aborted) {
          this.#o.recorder.event(
            podRef(pod),
            "Warning",
            "FailedMount",
            `Unable to attach or mount volumes: ${e instanceof Error ? e.message : String(e)}`,
          );
          logger.error(e, "Unable to attach or mount volumes for pod; skipping pod", {
            pod: kobj(pod),
          });
        }
        // The worker retries with its back-off; the pod stays ContainerCreating meanwhile.
        throw e;
      }
    }
    if (!this.workers.isPodTerminationRequested(uid)) {
      this.#o.startupTracker?.recordPhase(pod, "volumesReady");
    }
    const pullSecrets = await this.#pullSecrets(pod, signal);
    const restartingAll =
      apiStatus.conditions?.some((c) =>
        c.type === ALL_CONTAINERS_RESTARTING && c.status === "True"
      ) ?? false;
    const result = await runtime.syncPod(signal, pod, status, pullSecrets, restartingAll);
    // The containers of a pod restarting all of them are removed: the next sync, which starts
    // them again and clears AllContainersRestarting, runs now rather than at the next event.
    if (
      restartingAll && result.error() === undefined &&
      result.results.some((r) => r.action === "RemoveContainer" && r.error === undefined)
    ) {
      this.workers.requeueAfter(uid, 0);
    }
    const intoBackOff = result.results.some((r) =>
      (r.error === "CrashLoopBackOff" || r.error === "ImagePullBackOff") &&
      reasonCache.get(uid, r.target)?.reason !== r.error
    );
    reasonCache.update(uid, result);
    for (const r of result.results) {
      if (r.action !== "ResizePodInPlace" || r.error === undefined) continue;
      const generation = pod.metadata?.generation ?? 0;
      const set = this.#o.resizeConditions?.setInProgress(
        uid,
        REASON_ERROR,
        r.message ?? "",
        generation,
      );
      if (set?.updated) {
        this.#o.recorder.event(
          podRef(pod),
          "Warning",
          "ResizeError",
          resizeMessage(pod, set.generation, r.message ?? "", "Pod resize error"),
        );
      }
    }
    // A container that went into back-off in this sync shows it as its waiting reason in the
    // status the next sync generates: that sync runs now rather than when the back-off ends.
    if (intoBackOff) this.workers.requeueAfter(uid, 0);
    // Building the sandbox config changes nothing; every other step that succeeded did.
    const done = result.results.filter((r) => r.error === undefined);
    // After a resize, even a failed one, the pod is read again: the runtime sends no event for
    // it (upstream RequestPodReinspect).
    const resize = result.results.find((r) => r.action === "ResizePodInPlace");
    if (resize?.error !== undefined) {
      // This sync fails and backs off: the pod is read now, for what did change.
      void this.#o.containersStarted?.(uid, this.#o.clock.now(), this.#o.signal, true);
    } else if (resize) this.#reinspect.add(uid);
    if (
      this.#o.containersStarted &&
      (this.#reinspect.has(uid) || done.some((r) => r.action === "StartContainer"))
    ) {
      this.#started.add(uid);
    } else if (done.some((r) => r.action !== "ConfigPodSandbox")) {
      this.#o.runtimeChanged?.();
    }
    const retryAfter = result.retryAfterMs();
    if (retryAfter !== undefined) this.workers.requeueAfter(uid, retryAfter);
    const err = result.error();
    if (err) {
      // Containers in back-off are not a failed sync (upstream).
      const other = result.results.some((r) =>
        r.error !== undefined && r.error !== "CrashLoopBackOff" && r.error !== "ImagePullBackOff"
      );
      if (other) throw err;
    }
    return false;
  }

  /** Upstream SyncTerminatingPod: stops every container within the grace period. */
  async syncTerminatingPod(
    signal: AbortSignal,
    pod: V1Pod,
    gracePeriod: number,
    podStatus: PodStatus | undefined,
  ): Promise<void> {
    const { logger, statusManager, runtime, podCache } = this.#o;
    const uid = uidOf(pod);
    const orphan = this.#orphans.has(uid);
    logger.v(4).info("SyncTerminatingPod enter", { pod: kobj(pod), podUID: uid, gracePeriod });
    const status = podStatus ?? podCache.get(uid).status;
    // No liveness or startup probe runs against containers being stopped (upstream
    // SyncTerminatingPod's StopLivenessAndStartup); readiness keeps running.
    if (!orphan) this.#o.prober?.stopLivenessAndStartup(pod);
    if (!orphan) {
      statusManager.setPodStatus(pod, await this.#generateStatus(pod, status, false, signal));
    }
    const result = await runtime.killPod(signal, orphan ? undefined : pod, status, gracePeriod);
    const err = result.error();
    if (err) {
      if (!orphan) {
        this.#o.recorder.event(
          podRef(pod),
          "Warning",
          "FailedKillPod",
          `error killing pod: ${err}`,
        );
      }
      throw new Error(`error killing pod: ${err.message}`, { cause: err });
    }
    await this.#o.relist(signal);
    const after = podCache.get(uid).status;
    if (hasRunningContainers(after)) {
      throw new Error("detected running containers after a successful KillPod");
    }
    // After every container stopped and before the status changes (upstream's order).
    if (!orphan) await this.#o.dra?.unprepareResources(pod, signal);
    if (!orphan) {
      statusManager.setPodStatus(pod, await this.#generateStatus(pod, after, true, signal));
    }
    logger.v(4).info("Pod termination stopped all running containers", {
      pod: kobj(pod),
      podUID: uid,
    });
  }

  /** Upstream SyncTerminatedPod: the final status, and what stays behind is released. */
  async syncTerminatedPod(signal: AbortSignal, pod: V1Pod): Promise<void> {
    const { statusManager, podCache, logger } = this.#o;
    const uid = uidOf(pod);
    // A deleted or evicted pod's dead containers go now. Upstream waits for the pod's next PLEG
    // event, its sandbox's death, which a relist right after the kill can show before the worker
    // marks the pod terminated: then nothing removes them until the garbage collector.
    if (this.workers.shouldPodContentBeRemoved(uid)) this.#deleteDeadContainers(uid, "", true);
    if (this.#orphans.delete(uid)) {
      await this.#unmountVolumes(signal, pod);
      return;
    }
    const status = podCache.get(uid).status;
    statusManager.setPodStatus(pod, await this.#generateStatus(pod, status, true, signal));
    // Volumes go once no container can use them (the worker got here past termination). Until
    // they are gone the pod is not finished: the worker retries, and the API object stays.
    await this.#unmountVolumes(signal, pod, true);
    await this.#o.userNamespaces?.release(uid);
    statusManager.terminatePod(pod);
    statusManager.podTerminated?.(uid);
    this.#o.prober?.removePod(pod);
    logger.v(4).info("Pod is terminated and will need no more status updates", {
      pod: kobj(pod),
      podUID: uid,
    });
  }

  // ---- Helpers ------------------------------------------------------------------------------

  /**
   * Start-up bookkeeping of one sync: kubelet_pod_start_duration_seconds at the pod's first
   * status and when it turns from Pending to Running, as upstream SyncPod observes it (from
   * the first-seen annotation), and the timeline's running and ready steps.
   */
  #recordStart(pod: V1Pod, existing: V1PodStatus | undefined, next: V1PodStatus): void {
    const seen = Date.parse(pod.metadata?.annotations?.[CONFIG_FIRST_SEEN_ANNOTATION] ?? "");
    const { metrics, startupTracker, clock } = this.#o;
    if (
      !Number.isNaN(seen) &&
      (existing === undefined || (existing.phase === "Pending" && next.phase === "Running"))
    ) {
      metrics?.podStartDuration.observe((clock.now() - seen) / 1000);
    }
    if (!startupTracker) return;
    const started = { status: next };
    if (next.phase === "Running" && hasPodStarted(started)) {
      startupTracker.recordPhase(pod, "running");
    }
    if (next.conditions?.some((c) => c.type === "Ready" && c.status === "True")) {
      startupTracker.recordPhase(pod, "ready");
    }
  }

  /**
   * Tears down the pod's volumes. A failure is logged, then thrown when `required` (upstream
   * WaitForUnmount failing syncTerminatedPod); else housekeeping tries again later.
   */
  async #unmountVolumes(signal: AbortSignal, pod: V1Pod, required = false): Promise<void> {
    const volumes = this.#o.volumes;
    if (!volumes) return;
    const uid = uidOf(pod);
    try {
      await volumes.unmountPodVolumes(signal, uid);
      this.#o.logger.v(4).info("Pod termination unmounted volumes", {
        pod: kobj(pod),
        podUID: uid,
      });
    } catch (e) {
      if (signal.aborted) throw e;
      this.#o.logger.error(e, "Unable to unmount volumes of terminated pod", {
        pod: kobj(pod),
        podUID: uid,
      });
      if (required) throw e;
    }
  }

  #dispatch(pod: V1Pod, updateType: SyncPodType, mirrorPod: V1Pod | undefined, start: number) {
    for (const keep of this.#housekeepingKeeps) keep.add(uidOf(pod));
    // The workers run the pod as allocated, never a resize not accepted yet.
    if (this.#o.allocation) pod = this.#o.allocation.updatePodFromAllocation(pod).pod;
    this.workers.updatePod({ updateType, pod, mirrorPod, startTime: start });
  }

  #handleMirrorPod(mirror: V1Pod, start: number): void {
    const pod = this.#o.podManager.getPodByMirrorPod(mirror);
    if (pod) this.#dispatch(pod, "update", mirror, start);
  }

  /**
   * Admits `pod` against `admitted` (upstream runOnce's canAdmitPod); a rejected pod is marked
   * Failed with an event. Returns whether it was admitted.
   */
  admitAndReject(pod: V1Pod, admitted: readonly V1Pod[]): boolean {
    const rejected = this.#admit(pod, admitted);
    if (rejected) this.#rejectPod(pod, rejected.reason, rejected.message);
    return rejected === undefined;
  }

  /** False while a pod the topology manager admitted (and counted) goes through the checks. */
  #countTopology = true;

  /**
   * {@link admitAndReject} after the resource managers' admission (runonce's canAdmitPod runs
   * upstream's allocating admit handler too): a pod they refuse is rejected.
   */
  async admitWithResourcesAndReject(pod: V1Pod, admitted: readonly V1Pod[]): Promise<boolean> {
    const allocator = this.#o.resourceAllocator;
    if (!allocator?.needsAllocation(pod)) return this.admitAndReject(pod, admitted);
    const r = await allocator.admit(pod).catch((e) => getPodAdmitResult(e));
    if (!r.admit) {
      this.#rejectPod(pod, r.reason ?? "", r.message ?? "");
      return false;
    }
    this.#countTopology = false;
    try {
      return this.admitAndReject(pod, admitted);
    } finally {
      this.#countTopology = true;
    }
  }

  /** Set by {@link #admit}: the pod admitted has a resize its allocation does not have yet. */
  #pendingAfterAdmit = false;

  /** Upstream GetActivePods: admitted pods, not terminal, except `uid`. */
  activePods(except = ""): V1Pod[] {
    return this.#o.podManager.getPods().filter((p) =>
      uidOf(p) !== except && !this.#isAdmittedPodTerminal(p) &&
      !this.workers.isPodKnownTerminated(uidOf(p))
    );
  }

  /**
   * Upstream AddPod / canAdmitPod over the pods that are still active (or `others`): with an
   * allocation manager the pod is admitted as allocated and its allocation checkpointed.
   */
  #admit(pod: V1Pod, others?: readonly V1Pod[]): { reason: string; message: string } | undefined {
    this.#pendingAfterAdmit = false;
    const allocation = this.#o.allocation;
    if (allocation && !others) {
      const r = allocation.addPod(this.activePods(uidOf(pod)), pod);
      if (!r.admit) return { reason: r.reason ?? "", message: r.message ?? "" };
      this.#pendingAfterAdmit = r.pendingResize;
      return undefined;
    }
    return this.canAdmit(pod, others ?? this.activePods(uidOf(pod)));
  }

  /** The admission checks (predicates, then the admit handlers) against `others`. */
  canAdmit(
    pod: V1Pod,
    others: readonly V1Pod[],
    operation: "add" | "resize" = "add",
  ): { reason: string; message: string } | undefined {
    const node = this.#o.getNode();
    if (!node) return undefined;
    const r = admitPod({ pod, otherPods: [...others], node });
    if (!r.admit) return { reason: r.reason, message: r.message };
    // Further admit handlers (the eviction manager's), in order, as upstream's admitHandlers.
    for (const handler of this.#o.admitHandlers ?? []) {
      const h = handler(pod);
      if (!h.admit) return { reason: h.reason ?? "", message: h.message ?? "" };
    }
    // Upstream's topology manager is asked about every pod added; a pod none of the resource
    // managers has anything for is admitted here, its admission counted in 0 whole ms.
    if (operation !== "add" || !this.#countTopology) return undefined;
    this.#o.metrics?.topologyAdmissionRequests.inc();
    this.#o.metrics?.topologyAdmissionDuration.observe(0);
    return undefined;
  }

  /** Upstream rejectPod: an event, and the pod's status set to Failed. */
  #rejectPod(pod: V1Pod, reason: string, message: string): void {
    this.#o.recorder.event(podRef(pod), "Warning", reason, message);
    const status: V1PodStatus = {
      ...(pod.status ?? {}),
      phase: "Failed",
      reason,
      message: `Pod was rejected: ${message}`,
    };
    this.#o.statusManager.setPodStatus(pod, status);
  }

  /** The pod's admitted phase is terminal, by the status manager or the API object. */
  #isAdmittedPodTerminal(pod: V1Pod): boolean {
    // Admission asks this of every other pod: the phase alone, not a copy of the status.
    const phase = this.#o.statusManager.getPodPhase(uidOf(pod));
    return podIsTerminalPhase({ phase }) || podIsTerminalPhase(pod.status);
  }

  async #syncMirrorPod(
    pod: V1Pod,
    mirrorPod: V1Pod | undefined,
    signal: AbortSignal,
  ): Promise<void> {
    const mirror = this.#o.mirrorClient;
    if (!mirror) return;
    const { logger } = this.#o;
    const fullName = `${pod.metadata?.name}_${pod.metadata?.namespace}`;
    if (mirrorPod) {
      if (mirrorPod.metadata?.deletionTimestamp || !isMirrorPodOf(mirrorPod, pod)) {
        logger.info("Trying to delete pod", { pod: kobj(pod), podUID: uidOf(mirrorPod) });
        try {
          await mirror.deleteMirrorPod(fullName, uidOf(mirrorPod), signal);
        } catch (e) {
          logger.error(e, "Failed deleting mirror pod", { pod: kobj(mirrorPod) });
        }
        mirrorPod = undefined;
      }
    }
    if (!mirrorPod && !pod.metadata?.deletionTimestamp && this.#o.getNode()) {
      logger.v(4).info("Creating a mirror pod for static pod", { pod: kobj(pod) });
      try {
        await mirror.createMirrorPod(pod, signal);
      } catch (e) {
        logger.error(e, "Failed creating a mirror pod", { pod: kobj(pod) });
      }
    }
  }

  /** Upstream makePodDataDirs: pods/<uid>, its volumes and plugins directories. */
  #makePodDataDirs(uid: string): void {
    const dir = join(this.#o.podsDirectory, uid);
    for (const d of [dir, join(dir, "volumes"), join(dir, "plugins")]) {
      Deno.mkdirSync(d, { recursive: true, mode: 0o750 });
    }
  }

  /** Upstream getPullSecretsForPod: a missing secret is a warning, not a failure. */
  async #pullSecrets(pod: V1Pod, signal: AbortSignal): Promise<V1Secret[]> {
    const refs = pod.spec?.imagePullSecrets ?? [];
    const client = this.#o.kubeClient;
    if (refs.length === 0 || !client) return [];
    const ns = pod.metadata?.namespace ?? "default";
    const out: V1Secret[] = [];
    for (const ref of refs) {
      if (!ref.name) continue;
      try {
        out.push(
          await client.get<V1Secret>(
            `/api/v1/namespaces/${encodeURIComponent(ns)}/secrets/${encodeURIComponent(ref.name)}`,
            signal,
          ),
        );
      } catch (e) {
        this.#o.logger.info(
          "Unable to retrieve pull secret, the image pull may not succeed.",
          { pod: kobj(pod), secret: `${ns}/${ref.name}`, err: String(e) },
        );
      }
    }
    return out;
  }

  /**
   * upstream SyncPod's resize check: PodResizeInProgress while a running container's actuated
   * resources differ from the allocation; once they match it is cleared with ResizeCompleted.
   */
  #updateResizeInProgress(pod: V1Pod, status: PodStatus): void {
    const conditions = this.#o.resizeConditions;
    const runtime = this.#o.runtime;
    if (!conditions || !runtime.isPodResizeInProgress) return;
    const uid = uidOf(pod);
    if (runtime.isPodResizeInProgress(pod, status)) {
      conditions.setInProgress(uid, "", "", pod.metadata?.generation ?? 0);
      return;
    }
    // A sync of an older generation than the resize's (one in flight when the resize was
    // accepted) says nothing about it.
    const current = conditions.get(uid).find((c) => c.type === "PodResizeInProgress");
    if ((current?.observedGeneration ?? 0) > (pod.metadata?.generation ?? 0)) return;
    const cleared = conditions.clearInProgress(uid);
    if (cleared) {
      this.#o.recorder.event(
        podRef(pod),
        "Normal",
        "ResizeCompleted",
        resizeMessage(pod, cleared.generation, "", "Pod resize completed"),
      );
    }
  }

  /** upstream determinePodResizeStatus: a terminal pod's resize conditions are cleared. */
  #resizeConditionsFor(uid: string, podIsTerminal: boolean): V1PodCondition[] {
    const conditions = this.#o.resizeConditions;
    if (!conditions) return [];
    if (podIsTerminal) {
      conditions.clearInProgress(uid);
      conditions.clearPending(uid);
      return [];
    }
    return conditions.get(uid);
  }

  async #generateStatus(
    pod: V1Pod,
    status: PodStatus,
    podIsTerminal: boolean,
    signal: AbortSignal,
  ): Promise<V1PodStatus> {
    const uid = uidOf(pod);
    let read = this.#messages.get(uid);
    if (!read) this.#messages.set(uid, read = new Map());
    const messages = new Map<string, string>();
    for (const c of status.containerStatuses) {
      if (c.state !== api.ContainerState.CONTAINER_EXITED) continue;
      let m = read.get(c.id);
      if (m === undefined) {
        m = (await readTerminationMessage(c, signal).catch(() => undefined)) ?? "";
        read.set(c.id, m);
      }
      if (m) messages.set(c.id, m);
    }
    // Containers removed from the runtime are forgotten.
    const ids = new Set(status.containerStatuses.map((c) => c.id));
    for (const id of [...read.keys()]) if (!ids.has(id)) read.delete(id);
    const base = this.#o.statusManager.getPodStatus(uidOf(pod));
    const withBase = base ? { ...pod, status: base } : pod;
    const generated = generateAPIPodStatus({
      pod: withBase,
      podCgroup: await readPodCgroupForStatus(withBase, this.#o.podCgroups, this.#o.logger),
      podStatus: status,
      podIsTerminal,
      reasons: this.#o.reasonCache,
      terminationMessages: messages,
      probes: this.#o.prober,
      hostIPs: this.#o.nodeIPs,
      now: new Date(this.#o.clock.now()),
      syncHandlers: this.#o.syncHandlers,
      resizeConditions: this.#resizeConditionsFor(uid, podIsTerminal),
      actuated: this.#o.runtime.actuatedResources
        ? (u, n) => this.#o.runtime.actuatedResources!(u, n)
        : undefined,
      supportsRecursiveReadOnly: this.#o.supportsRecursiveReadOnly?.(pod) ?? false,
      allocatedResourcesStatus: this.#o.allocatedResourcesStatus,
      logger: this.#o.logger,
    });
    const override = this.#statusOverrides.get(uid);
    if (!override) return generated;
    // The killer's status wins (upstream applies the kill's PodStatusFunc after generating).
    const conditions = [...(generated.conditions ?? [])];
    for (const c of override.conditions ?? []) {
      const i = conditions.findIndex((x) => x.type === c.type);
      if (i >= 0) conditions[i] = c;
      else conditions.push(c);
    }
    return {
      ...generated,
      phase: override.phase,
      reason: override.reason,
      message: override.message,
      conditions,
    };
  }
}

function hasRunningContainers(status: PodStatus): boolean {
  return status.containerStatuses.some((c) => c.state === api.ContainerState.CONTAINER_RUNNING);
}
