/**
 * @module
 * StatusManager: the kubelet's source of truth for the API status of its pods, and the loop that
 * writes it to the apiserver. The pod workers set statuses ({@link StatusManager.setPodStatus},
 * {@link StatusManager.terminatePod}); each real change bumps the pod's version and wakes the
 * sync loop, which patches the status subresource of every pod whose version the apiserver has
 * not seen yet, a few at a time and always the pod's newest status; while writes queue behind
 * the client's QPS limit (a burst of pod starts), statuses that leave Pending go before those
 * still Pending, so that a pod that started is reported first and a Pending status that waited
 * is often never sent (the pod is Running by its turn). Every `syncPeriodMs` it also reconciles
 * all pods, ranked with the Pending writes and without holding back the ones that come
 * meanwhile. The patch carries the pod's UID, so a pod recreated under the same name is never
 * written; a static pod's status goes to its mirror pod. Once a deleted pod is terminal on the
 * apiserver and its containers are gone, the manager deletes it with grace period 0 and a UID
 * precondition. Without a client (standalone mode) statuses are only kept.
 *
 * Talks to the apiserver through a {@link KubeClient}, to the pod manager through
 * `translatePodUID` (and optionally `getAPIPod`), and to the pod workers through
 * `podCouldHaveRunningContainers`. Corresponds to upstream
 * `pkg/kubelet/status/status_manager.go`.
 */

import type {
  V1ContainerStatus,
  V1Pod,
  V1PodCondition,
  V1PodStatus,
} from "@kubernetes/client-node";
import { type Clock, WAIT_ENDED } from "../util/clock.ts";
import { kobj, type Logger } from "../klog/klog.ts";
import { isStatus, type KubeClient } from "../client/kube_client.ts";
import { podIsTerminalPhase } from "../kubelet_pods.ts";
import { isMirrorPod, isStaticPod } from "../qos/qos.ts";
import { rfc3339 } from "../nodestatus/node_status.ts";
import {
  ALL_CONTAINERS_RESTARTING,
  CONTAINERS_READY,
  DISRUPTION_TARGET,
  generateContainersReadyConditionForTerminalPhase,
  generatePodReadyConditionForTerminalPhase,
  getPodCondition,
  POD_INITIALIZED,
  POD_READY,
  POD_READY_TO_START_CONTAINERS,
  POD_SCHEDULED,
  podConditionByKubelet,
  podConditionSharedByKubelet,
} from "./generate.ts";
import {
  allContainersCouldRestart,
  containerShouldRestart,
  isRestartableInitContainer,
} from "../pod/podutil.ts";
import type { PodStartupLatencyTracker } from "../pod_startup_latency_tracker.ts";
import { type Json, jsonEqual, podStatusPatch, toJson } from "./_pod_status_patch.ts";
import { deepCopy } from "../util/deep_copy.ts";
import type { KubeletMetrics } from "../metrics/metrics.ts";
import { linkSignals } from "../util/linked_signal.ts";

/** Upstream syncPeriod: how often every status is reconciled. */
const DEFAULT_SYNC_PERIOD_MS = 10_000;
/**
 * Pods whose statuses are written at the same time. During a burst of 250 pod starts on 2 CPUs,
 * 4 at a time left started pods' statuses waiting up to 12.1 s (p90 4.4 s) with the PATCHes at
 * 32-133 ms on average and no wait in the client's rate limiter, which still paces them; with 8
 * the next run had a max of 10.5 s (p90 6.9 s), so the wait is not only here.
 */
export const STATUS_SYNC_CONCURRENCY = 8;
/** kubecontainer.MaxPodTerminationMessageLogLength: termination message bytes per pod. */
const MAX_POD_TERMINATION_MESSAGE_LOG_LENGTH = 1024 * 12;
/** Terminated reason of containers whose status was lost (kubecontainer). */
const CONTAINER_STATUS_UNKNOWN = "ContainerStatusUnknown";
const TERMINATED_UNKNOWN_MESSAGE = "The container could not be located when the pod was terminated";

/** What {@link StatusManager} needs. */
export interface StatusManagerOptions {
  /** The apiserver client; undefined in standalone mode (statuses are kept, nothing is sent). */
  client?: KubeClient;
  clock: Clock;
  logger: Logger;
  /**
   * A static pod's UID → the UID of its mirror pod, undefined when it has none yet (pod manager);
   * other pods may map to themselves or to undefined.
   */
  translatePodUID(uid: string): string | undefined;
  /** Whether the pod may still have running containers (pod workers): gates terminal phase and deletion. */
  podCouldHaveRunningContainers(uid: string): boolean;
  /**
   * The pod as the apiserver last reported it (pod manager; for a static pod, its mirror pod).
   * Lets the periodic sync notice a status changed behind the kubelet's back (upstream
   * needsReconcile). @default none: no such reconciliation
   */
  getAPIPod?(uid: string): V1Pod | undefined;
  /** Period of the full reconciliation, in ms. @default 10000 */
  syncPeriodMs?: number;
  /**
   * Told of every status the apiserver accepted with a change, and of every pod whose status
   * is forgotten (upstream podStartupLatencyHelper). @default none
   */
  startupLatency?: Pick<
    PodStartupLatencyTracker,
    "recordStatusUpdated" | "deletePodStartupState"
  >;
  /**
   * kubelet_terminated_containers_total (each container's move to terminated, counted once)
   * and kubelet_pod_status_sync_duration_seconds (from a pod's first unsent status to the
   * apiserver having it). @default none
   */
  metrics?: Pick<KubeletMetrics, "terminatedContainersTotal" | "podStatusSyncDuration">;
}

/** A bad {@link StatusManagerOptions} value, or a second concurrent run. */
export class StatusManagerError extends Error {
  override name = "StatusManagerError";
}

/** A pod's status with the version that keeps stale statuses from reaching the apiserver. */
interface VersionedPodStatus {
  /** Increases on every change of the pod's status. */
  readonly version: number;
  /** The pod the status is about, as last given. */
  readonly pod: V1Pod;
  /** When the first change not yet written was seen, ms since the epoch. */
  readonly at: number;
  /** Set by terminatePod: the pod is done on this node. */
  readonly podIsFinished: boolean;
  readonly status: V1PodStatus;
}

/** A status to write: the pod's UID, the UID its status goes to, and the status. */
interface StatusWrite {
  uid: string;
  statusUID: string;
  status: VersionedPodStatus;
}

/** The pod status manager; see the module documentation. */
export class StatusManager {
  readonly #opts: StatusManagerOptions;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #syncPeriodMs: number;
  /** By the pod's own UID (a static pod's, not its mirror's). */
  readonly #statuses = new Map<string, VersionedPodStatus>();
  /** The last version the apiserver accepted, by the UID of the API pod (mirror pod for static pods). */
  readonly #apiVersions = new Map<string, number>();
  /**
   * The status the apiserver answered our last patch of each pod with, by status UID: the base
   * of the next patch, so that it needs no GET first.
   */
  readonly #written = new Map<string, V1PodStatus>();
  /**
   * Pods to sync at the next write pass even if their version was written: to be deleted
   * (podTerminated, the periodic sync).
   */
  readonly #forced = new Set<string>();
  /**
   * Pods whose apiserver status differs from the cached one (the periodic sync), with the
   * version found so: read from the apiserver before their next write, which ranks with the
   * Pending ones while the version is the same (a newer one ranks as any change).
   */
  readonly #reconcile = new Map<string, number>();
  #pending = false;
  #wake: (() => void) | undefined;
  #running = false;

  constructor(opts: StatusManagerOptions) {
    const period = opts.syncPeriodMs ?? DEFAULT_SYNC_PERIOD_MS;
    if (!Number.isFinite(period) || period <= 0) {
      throw new StatusManagerError(
        `Cannot start the status manager: 'syncPeriodMs' must be a positive number of milliseconds: current value is '${period}'`,
      );
    }
    this.#opts = opts;
    this.#clock = opts.clock;
    this.#logger = opts.logger;
    this.#syncPeriodMs = period;
  }

  /**
   * The sync loop, until `signal` aborts: changed statuses are written as soon as they are set,
   * and every pod is reconciled every `syncPeriodMs`. Returns at once without a client.
   */
  async run(signal: AbortSignal): Promise<void> {
    if (this.#opts.client === undefined) {
      this.#logger.info("Kubernetes client is nil, not starting status manager");
      return;
    }
    if (this.#running) throw new StatusManagerError("the status manager is already running");
    this.#running = true;
    this.#logger.info("Starting to sync pod status with apiserver");
    try {
      let nextBatch = this.#clock.now() + this.#syncPeriodMs;
      while (!signal.aborted) {
        if (this.#pending) {
          this.#pending = false;
          this.#logger.v(4).info("Syncing updated statuses");
          await this.syncBatch(false, signal);
          continue;
        }
        const now = this.#clock.now();
        if (now >= nextBatch) {
          nextBatch = now + this.#syncPeriodMs;
          this.#logger.v(4).info("Syncing all statuses");
          await this.syncBatch(true, signal);
          continue;
        }
        await this.#waitForWork(nextBatch - now, signal);
      }
    } finally {
      this.#running = false;
    }
  }

  /** Sleeps until `ms` pass, a status changes or `signal` aborts. */
  async #waitForWork(ms: number, signal: AbortSignal): Promise<void> {
    const woken = new AbortController();
    this.#wake = () => woken.abort(WAIT_ENDED);
    try {
      using link = linkSignals(signal, woken.signal);
      await this.#clock.sleep(ms, link.signal);
    } catch {
      // Woken by a change, or stopped: the loop looks again.
    } finally {
      this.#wake = undefined;
    }
  }

  #notify(): void {
    this.#pending = true;
    this.#wake?.();
  }

  /**
   * The cached phase of a pod by its own UID, undefined when it has no status: no copy and no
   * search by mirror pod UID, for callers that look at every pod (admission, active pods).
   */
  getPodPhase(uid: string): string | undefined {
    return this.#statuses.get(uid)?.status.phase;
  }

  /** The cached status of a pod, by its UID or its mirror pod's; undefined when none. */
  getPodStatus(uid: string): V1PodStatus | undefined {
    let entry = this.#statuses.get(uid);
    if (entry === undefined) {
      for (const [podUID, e] of this.#statuses) {
        if (this.#opts.translatePodUID(podUID) === uid) {
          entry = e;
          break;
        }
      }
    }
    return entry === undefined ? undefined : deepCopy(entry.status);
  }

  /**
   * Caches the pod's new status and wakes the sync loop when it really changed: transition
   * times of unchanged conditions and the start time are kept, and a deleted pod's status is
   * always written (upstream SetPodStatus).
   */
  setPodStatus(pod: V1Pod, status: V1PodStatus): void {
    const s = deepCopy(status);
    // PodObservedGenerationTracking is GA: the status says which generation it reflects.
    if (pod.metadata?.generation) s.observedGeneration = pod.metadata.generation;
    this.#updateStatusInternal(pod, s, pod.metadata?.deletionTimestamp != null, false);
  }

  /**
   * Ends the pod's lifecycle on this node (upstream TerminatePod): every container without a
   * terminated state gets one (ContainerStatusUnknown, exit code 137), init containers only up to
   * the last one that was tried, regular ones once the pod has initialized; a non-static pod's
   * phase becomes Failed unless already terminal. Marks the pod finished, which allows its
   * deletion once its containers are gone.
   */
  terminatePod(pod: V1Pod): void {
    const uid = pod.metadata?.uid ?? "";
    const cached = this.#statuses.get(uid);
    const status = deepCopy(cached?.status ?? pod.status ?? {});

    if (hasPodInitialized(pod)) {
      for (const cs of status.containerStatuses ?? []) {
        if (cs.state?.terminated) continue;
        cs.state = unknownTermination();
      }
    }
    for (const cs of initializedContainers(status.initContainerStatuses ?? [])) {
      if (cs.state?.terminated) continue;
      cs.state = unknownTermination();
    }

    // TODO as upstream (#116484): static pods keep their phase.
    if (!isStaticPod(pod)) {
      switch (status.phase) {
        case "Succeeded":
        case "Failed":
          break;
        case "Pending":
        case "Running":
          if (status.phase === "Running" && cached !== undefined) {
            this.#logger.info(
              "Terminal running pod should have already been marked as failed, programmer error",
              { pod: kobj(pod), podUID: uid },
            );
          }
          this.#logger.v(3).info("Marking terminal pod as failed", {
            oldPhase: status.phase,
            pod: kobj(pod),
            podUID: uid,
          });
          status.phase = "Failed";
          break;
        default:
          this.#logger.error(
            new Error(`unknown phase: ${status.phase ?? ""}`),
            "Unknown phase, programmer error",
            { pod: kobj(pod), podUID: uid },
          );
          status.phase = "Failed";
      }
    }
    this.#logger.v(5).info("TerminatePod calling updateStatusInternal", {
      pod: kobj(pod),
      podUID: uid,
    });
    this.#updateStatusInternal(pod, status, true, true);
  }

  /** Forgets the statuses of pods not in `podUIDs` (upstream RemoveOrphanedStatuses). */
  removeOrphanedStatuses(podUIDs: ReadonlySet<string>): void {
    for (const uid of [...this.#statuses.keys()]) {
      if (podUIDs.has(uid)) continue;
      this.#logger.v(5).info("Removing pod from status map.", { podUID: uid });
      this.#statuses.delete(uid);
      this.#forced.delete(uid);
      this.#reconcile.delete(uid);
      this.#opts.startupLatency?.deletePodStartupState(uid);
    }
  }

  /** Wakes the syncer for a pod whose deletion may now be possible (the pod workers finished). */
  podTerminated(uid: string): void {
    if (!this.#statuses.has(uid)) return;
    this.#forced.add(uid);
    this.#notify();
  }

  #updateStatusInternal(
    pod: V1Pod,
    incoming: V1PodStatus,
    forceUpdate: boolean,
    podIsFinished: boolean,
  ): void {
    const uid = pod.metadata?.uid ?? "";
    const cached = this.#statuses.get(uid);
    const oldStatus: V1PodStatus = cached?.status ?? pod.status ?? {};
    if (cached?.podIsFinished && !podIsFinished && !isStaticPod(pod)) {
      this.#logger.info(
        "Got unexpected podIsFinished=false, while podIsFinished=true in status cache, programmer error.",
        { pod: kobj(pod) },
      );
      podIsFinished = true;
    }

    const transitionError = checkContainerStateTransition(oldStatus, incoming, pod);
    if (transitionError !== undefined) {
      this.#logger.error(transitionError, "Status update on pod aborted", { pod: kobj(pod) });
      return;
    }
    const status = incoming;
    if (podIsTerminalPhase(oldStatus) && !podIsTerminalPhase(status)) {
      this.#logger.error(undefined, "Pod attempted illegal phase transition", {
        pod: kobj(pod),
        originalStatusPhase: oldStatus.phase,
        apiStatusPhase: status.phase,
      });
      status.phase = oldStatus.phase;
      status.reason = oldStatus.reason;
      status.message = oldStatus.message;
    }

    const now = this.#clock.now();
    for (
      const type of [
        CONTAINERS_READY,
        POD_READY,
        POD_INITIALIZED,
        POD_READY_TO_START_CONTAINERS,
        POD_SCHEDULED,
        DISRUPTION_TARGET,
        ALL_CONTAINERS_RESTARTING,
      ]
    ) {
      updateLastTransitionTime(status, oldStatus, type, now);
    }
    // The start time never changes once set.
    if (oldStatus.startTime != null) status.startTime = oldStatus.startTime;
    else if (status.startTime == null) status.startTime = rfc3339(now) as unknown as Date;

    const normalized = normalizeStatus(pod, status);
    this.#recordTerminations(oldStatus, normalized);

    if (
      cached !== undefined && isPodStatusByKubeletEqual(cached.status, normalized) && !forceUpdate
    ) {
      this.#logger.v(3).info("Ignoring same status for pod", { pod: kobj(pod) });
      return;
    }
    this.#statuses.set(uid, {
      version: (cached?.version ?? 0) + 1,
      pod,
      at: cached === undefined || cached.at === 0 ? now : cached.at,
      podIsFinished,
      status: normalized,
    });
    this.#notify();
  }

  /**
   * Upstream checkAndRecordTerminations: a container terminated in the new status and not in the
   * old one (or new to it) counts once, by type, exit code and reason; done before the status is
   * compared with the cached one, as upstream does.
   */
  #recordTerminations(oldStatus: V1PodStatus, status: V1PodStatus): void {
    const counter = this.#opts.metrics?.terminatedContainersTotal;
    if (!counter) return;
    const kinds = [
      ["init_container", oldStatus.initContainerStatuses, status.initContainerStatuses],
      ["container", oldStatus.containerStatuses, status.containerStatuses],
      [
        "ephemeral_container",
        oldStatus.ephemeralContainerStatuses,
        status.ephemeralContainerStatuses,
      ],
    ] as const;
    for (const [type, before, after] of kinds) {
      for (const c of after ?? []) {
        const t = c.state?.terminated;
        if (!t) continue;
        if (before?.find((o) => o.name === c.name)?.state?.terminated) continue;
        counter.inc({
          container_type: type,
          exit_code: String(t.exitCode ?? 0),
          reason: t.reason ?? "",
        });
      }
    }
  }

  /** The UID of the API object a pod's status goes to; undefined for a static pod without mirror. */
  #statusUID(uid: string, pod: V1Pod): string | undefined {
    const translated = this.#opts.translatePodUID(uid);
    if (translated) return translated;
    return isStaticPod(pod) ? undefined : uid;
  }

  /** {@link #statusUID}, saying why a static pod without a mirror pod is skipped. */
  #writableStatusUID(uid: string, status: VersionedPodStatus): string | undefined {
    const statusUID = this.#statusUID(uid, status.pod);
    if (statusUID === undefined) {
      this.#logger.v(5).info("Static pod does not have a corresponding mirror pod; skipping", {
        podUID: uid,
        pod: kobj(status.pod),
      });
    }
    return statusUID;
  }

  /**
   * One pass of the sync loop (upstream syncBatch): the pods with unwritten versions, and those
   * forced or left to reconcile; with `all`, first marks the pods that differ from the
   * apiserver's or can be deleted ({@link #markPeriodic}). Returns how many pod syncs it started.
   * Resolves when done; never rejects.
   */
  async syncBatch(all: boolean, signal?: AbortSignal): Promise<number> {
    const client = this.#opts.client;
    if (client === undefined) return 0;
    if (all) this.#markPeriodic();
    return await this.#writeUnwritten(client, signal);
  }

  /**
   * The periodic sync's picks, left to {@link #writeUnwritten} with the rest: a pod that can be
   * deleted is forced; one whose apiserver status differs from the cached one is reconciled.
   * Upstream's periodic batch writes them in its own pass; here pods that start meanwhile are
   * not held behind it.
   */
  #markPeriodic(): void {
    const statusUIDs = new Set<string>();
    for (const [uid, status] of this.#statuses) {
      const statusUID = this.#writableStatusUID(uid, status);
      if (statusUID === undefined) continue;
      statusUIDs.add(statusUID);
      if (this.#needsUpdate(statusUID, status)) {
        // Unwritten versions are picked anyway; a written one is here to be deleted.
        if ((this.#apiVersions.get(statusUID) ?? 0) >= status.version) this.#forced.add(uid);
      } else if (!this.#forced.has(uid) && this.#needsReconcile(uid, status.status)) {
        this.#apiVersions.delete(statusUID);
        this.#reconcile.set(uid, status.version);
      }
    }
    for (const key of [...this.#apiVersions.keys()]) {
      if (!statusUIDs.has(key)) this.#apiVersions.delete(key);
    }
    for (const key of [...this.#written.keys()]) {
      if (!statusUIDs.has(key)) this.#written.delete(key);
    }
  }

  /**
   * Writes every status the apiserver has not seen, a few pods at a time, until none is left;
   * returns how many pod syncs it started. Each pick is the pod's newest status, and statuses that
   * leave Pending (or end the pod) go before those still Pending and the periodic sync's
   * reconciles, oldest change first.
   */
  async #writeUnwritten(client: KubeClient, signal?: AbortSignal): Promise<number> {
    const inFlight = new Set<string>();
    // Each version once per call: a write that failed waits for the next change or the
    // periodic sync, as in upstream's batches, instead of being retried at once.
    const tried = new Map<string, number>();
    let writes = 0;
    const worker = async () => {
      while (!signal?.aborted) {
        const u = this.#nextUnwritten(inFlight, tried);
        if (u === undefined) return;
        inFlight.add(u.uid);
        tried.set(u.uid, u.status.version);
        writes++;
        try {
          await this.#write(client, u.uid, u.statusUID, u.status, signal);
        } finally {
          inFlight.delete(u.uid);
        }
      }
    };
    await Promise.all(Array.from({ length: STATUS_SYNC_CONCURRENCY }, worker));
    return writes;
  }

  /**
   * The next status to write (see {@link #writeUnwritten}), not of a pod in `inFlight` nor a
   * version in `tried`.
   */
  #nextUnwritten(
    inFlight: ReadonlySet<string>,
    tried: ReadonlyMap<string, number>,
  ): StatusWrite | undefined {
    let best: StatusWrite | undefined;
    let bestRank = 0;
    for (const [uid, status] of this.#statuses) {
      if (inFlight.has(uid) || tried.get(uid) === status.version) continue;
      const statusUID = this.#writableStatusUID(uid, status);
      if (statusUID === undefined) continue;
      const written = this.#apiVersions.get(statusUID) ?? 0;
      if (written >= status.version && !this.#forced.has(uid)) continue;
      const pending = status.status.phase === "Pending" && !status.podIsFinished;
      const rank = pending || this.#reconcile.get(uid) === status.version ? 1 : 0;
      if (
        best === undefined || rank < bestRank || (rank === bestRank && status.at < best.status.at)
      ) {
        best = { uid, statusUID, status };
        bestRank = rank;
      }
    }
    return best;
  }

  /** One pod's sync of the loop: logs a failure instead of throwing, unless `signal` aborted. */
  async #write(
    client: KubeClient,
    uid: string,
    statusUID: string,
    status: VersionedPodStatus,
    signal?: AbortSignal,
  ): Promise<void> {
    this.#forced.delete(uid);
    // A reconcile reads the pod first (upstream reads it before every write); the mark goes
    // once the read succeeded.
    const fresh = this.#reconcile.has(uid);
    this.#logger.v(5).info("Sync pod status", { podUID: uid, statusUID, version: status.version });
    try {
      await this.#syncPod(client, uid, statusUID, status, fresh, signal);
    } catch (e) {
      if (signal?.aborted) return;
      this.#logger.error(e, "Failed to sync status for pod", { pod: kobj(status.pod) });
    }
  }

  /** Whether the apiserver lacks this version, or the pod can now be deleted. */
  #needsUpdate(statusUID: string, status: VersionedPodStatus): boolean {
    const latest = this.#apiVersions.get(statusUID);
    if (latest === undefined || latest < status.version) return true;
    return status.pod.metadata?.deletionTimestamp != null && !isMirrorPod(status.pod) &&
      podIsTerminalPhase(status.status) && status.podIsFinished;
  }

  /** Whether the apiserver's status (as the pod manager has it) differs from the cached one. */
  #needsReconcile(uid: string, status: V1PodStatus): boolean {
    const pod = this.#opts.getAPIPod?.(uid);
    if (pod === undefined) return false;
    const apiStatus = normalizeStatus(pod, deepCopy(pod.status ?? {}));
    if (isPodStatusByKubeletEqual(apiStatus, status)) return false;
    this.#logger.v(3).info(
      "Pod status is inconsistent with cached status for pod, a reconciliation should be triggered",
      { pod: kobj(pod) },
    );
    return true;
  }

  #forget(uid: string, statusUID: string): void {
    this.#statuses.delete(uid);
    this.#apiVersions.delete(statusUID);
    this.#written.delete(statusUID);
    this.#forced.delete(uid);
    this.#reconcile.delete(uid);
  }

  /**
   * The pod to patch without reading it from the apiserver: the watched copy (the pod manager's,
   * for its metadata and spec) with the status the apiserver answered our last patch with, or
   * the watched status before the first patch. Undefined when there is no watched copy of this
   * UID. Only the kubelet writes the fields it patches, so either base is what the apiserver
   * holds of them; other writers' conditions are not in the patch and stay as they are.
   */
  #knownPod(uid: string, statusUID: string): V1Pod | undefined {
    const watched = this.#opts.getAPIPod?.(uid);
    if (watched?.metadata?.uid !== statusUID) return undefined;
    const status = this.#written.get(statusUID) ?? watched.status ?? {};
    return { ...watched, status: deepCopy(status) };
  }

  /**
   * Writes one pod's status to the apiserver, and deletes the pod when it is done (upstream
   * syncPod). Upstream reads the pod first every time; this reads it only when `fresh` (a
   * reconcile), when there is no watched copy, or when the patch's UID precondition fails.
   */
  async #syncPod(
    client: KubeClient,
    uid: string,
    statusUID: string,
    status: VersionedPodStatus,
    fresh: boolean,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    const namespace = status.pod.metadata?.namespace ?? "";
    const name = status.pod.metadata?.name ?? "";
    const ref = `${namespace}/${name}`;
    const path = `/api/v1/namespaces/${encodeURIComponent(namespace)}/pods/${
      encodeURIComponent(name)
    }`;
    const known = fresh ? undefined : this.#knownPod(uid, statusUID);
    let pod: V1Pod;
    try {
      pod = known ?? await client.get<V1Pod>(path, signal);
      if (!known) this.#reconcile.delete(uid);
    } catch (e) {
      if (isStatus(e, 404)) {
        this.#logger.v(3).info("Pod does not exist on the server", { podUID: uid, pod: ref });
        this.#forget(uid, statusUID);
        return;
      }
      if (signal?.aborted) return;
      this.#logger.info("Failed to get status for pod", { podUID: uid, pod: ref, err: String(e) });
      return;
    }

    if (pod.metadata?.uid !== statusUID) {
      this.#logger.v(2).info("Pod was deleted and then recreated, skipping status update", {
        pod: kobj(pod),
        oldPodUID: statusUID,
        podUID: pod.metadata?.uid,
      });
      this.#forget(uid, statusUID);
      return;
    }

    if (!known) this.#written.set(statusUID, pod.status ?? {});
    const couldHaveRunningContainers = this.#opts.podCouldHaveRunningContainers(uid);
    const merged = mergePodStatus(
      pod,
      pod.status ?? {},
      status.status,
      couldHaveRunningContainers,
      this.#clock.now(),
    );
    const { patch, unchanged } = podStatusPatch(pod.status ?? {}, merged, statusUID);
    if (unchanged) {
      this.#logger.v(3).info("Status for pod is up-to-date", {
        pod: kobj(pod),
        statusVersion: status.version,
      });
    } else {
      this.#logger.v(3).info("Patch status for pod", {
        pod: kobj(pod),
        podUID: uid,
        patch: JSON.stringify(patch),
      });
      try {
        pod = await client.patch<V1Pod>(`${path}/status`, patch, "strategic", signal);
      } catch (e) {
        if (known && isStatus(e, 409)) {
          // The name now belongs to another pod (the UID precondition): read it, as upstream.
          this.#written.delete(statusUID);
          return await this.#syncPod(client, uid, statusUID, status, true, signal);
        }
        if (isStatus(e, 404)) {
          this.#logger.v(3).info("Pod does not exist on the server", { podUID: uid, pod: ref });
          this.#forget(uid, statusUID);
          return;
        }
        if (signal?.aborted) return;
        this.#logger.info("Failed to update status for pod", { pod: kobj(pod), err: String(e) });
        return;
      }
      this.#logger.v(3).info("Status for pod updated successfully", {
        pod: kobj(pod),
        statusVersion: status.version,
      });
      this.#opts.startupLatency?.recordStatusUpdated(pod);
      if (pod.status) this.#written.set(statusUID, pod.status);
    }
    // From the first status not yet sent (upstream's status.at, never reset), in whole ms.
    if (status.at > 0) {
      this.#opts.metrics?.podStatusSyncDuration.observe(
        Math.trunc(this.#clock.now() - status.at) / 1000,
      );
    }
    this.#apiVersions.set(statusUID, status.version);

    if (!this.#canBeDeleted(pod, status, uid)) return;
    try {
      await client.delete(path, {
        kind: "DeleteOptions",
        apiVersion: "v1",
        gracePeriodSeconds: 0,
        // The UID precondition keeps a new pod of the same name from being deleted.
        preconditions: { uid: statusUID },
      }, signal);
    } catch (e) {
      if (isStatus(e, 404)) {
        this.#forget(uid, statusUID);
        return;
      }
      if (signal?.aborted) return;
      this.#logger.info("Failed to delete status for pod", { pod: kobj(pod), err: String(e) });
      return;
    }
    this.#logger.v(3).info("Pod fully terminated and removed from etcd", { pod: kobj(pod) });
    this.#statuses.delete(uid);
    this.#forced.delete(uid);
    this.#reconcile.delete(uid);
    this.#opts.startupLatency?.deletePodStartupState(uid);
  }

  /**
   * A deleted, non-mirror pod whose phase is terminal on the apiserver, that terminatePod has
   * finished and whose containers are gone (upstream canBeDeleted).
   */
  #canBeDeleted(pod: V1Pod, status: VersionedPodStatus, uid: string): boolean {
    if (pod.metadata?.deletionTimestamp == null || isMirrorPod(pod)) return false;
    if (!podIsTerminalPhase(pod.status)) {
      this.#logger.v(3).info("Delaying pod deletion as the phase is non-terminal", {
        phase: pod.status?.phase,
        localPhase: status.status.phase,
        pod: kobj(pod),
        podUID: uid,
      });
      return false;
    }
    if (!status.podIsFinished) return false;
    if (this.#opts.podCouldHaveRunningContainers(uid)) {
      this.#logger.v(3).info("Delaying pod deletion as the pod could have running containers", {
        pod: kobj(pod),
        podUID: uid,
      });
      return false;
    }
    this.#logger.v(3).info(
      "The pod termination is finished as SyncTerminatedPod completes its execution",
      { phase: pod.status?.phase, localPhase: status.status.phase, pod: kobj(pod), podUID: uid },
    );
    return true;
  }
}

function unknownTermination(): V1ContainerStatus["state"] {
  return {
    terminated: {
      reason: CONTAINER_STATUS_UNKNOWN,
      message: TERMINATED_UNKNOWN_MESSAGE,
      exitCode: 137,
    },
  };
}

/**
 * Whether the pod has any evidence of starting a regular container, so that its waiting
 * containers must be reported as failed (upstream hasPodInitialized, on the API status).
 */
function hasPodInitialized(pod: V1Pod): boolean {
  const inits = pod.spec?.initContainers ?? [];
  if (inits.length === 0) return true;
  for (const s of pod.status?.containerStatuses ?? []) {
    if (s.lastState?.terminated || s.state?.waiting === undefined) return true;
  }
  const statuses = pod.status?.initContainerStatuses ?? [];
  const last = statuses.at(-1);
  if (last === undefined) return false;
  const container = inits[statuses.length - 1];
  if (container === undefined || container.name !== last.name) return false;
  if (isRestartableInitContainer(container)) {
    return last.state?.running !== undefined && last.started === true;
  }
  return last.lastState?.terminated?.exitCode === 0 || last.state?.terminated?.exitCode === 0;
}

/** The init container statuses up to the last one that was tried (at least the first). */
function initializedContainers(statuses: V1ContainerStatus[]): V1ContainerStatus[] {
  for (let i = statuses.length - 1; i >= 0; i--) {
    const s = statuses[i];
    if (s !== undefined && (s.state?.waiting === undefined || s.lastState?.terminated)) {
      return statuses.slice(0, i + 1);
    }
  }
  return statuses.slice(0, 1);
}

/**
 * An error when a container that may not restart leaves its terminated state, which would be a
 * kubelet bug (upstream checkContainerStateTransition, with container restart rules).
 */
function checkContainerStateTransition(
  oldStatus: V1PodStatus,
  newStatus: V1PodStatus,
  pod: V1Pod,
): Error | undefined {
  const spec = pod.spec;
  if (spec?.restartPolicy === "Always" || spec?.restartPolicy === undefined) return undefined;
  // A pod that may restart all its containers in place lets every container leave terminated.
  if (allContainersCouldRestart(spec)) return undefined;
  for (const old of oldStatus.containerStatuses ?? []) {
    const t = old.state?.terminated;
    if (t === undefined) continue;
    if (t.exitCode !== 0 && spec.restartPolicy === "OnFailure") continue;
    const container = spec.containers.find((c) => c.name === old.name);
    if (container !== undefined && containerShouldRestart(container, spec, t.exitCode)) continue;
    for (const s of newStatus.containerStatuses ?? []) {
      if (s.name === old.name && s.state?.terminated === undefined) {
        return new Error(
          `terminated container ${s.name} attempted illegal transition to non-terminated state`,
        );
      }
    }
  }
  const inits = spec.initContainers ?? [];
  for (const [i, old] of (oldStatus.initContainerStatuses ?? []).entries()) {
    const container = inits[i];
    if (container === undefined || container.name !== old.name) {
      return new Error(`found mismatch between pod spec and status, container: ${old.name}`);
    }
    if (isRestartableInitContainer(container)) continue;
    const t = old.state?.terminated;
    if (t === undefined) continue;
    if (t.exitCode !== 0 && spec.restartPolicy === "OnFailure") continue;
    if (containerShouldRestart(container, spec, t.exitCode)) continue;
    for (const s of newStatus.initContainerStatuses ?? []) {
      if (s.name === old.name && s.state?.terminated === undefined) {
        return new Error(
          `terminated init container ${s.name} attempted illegal transition to non-terminated state`,
        );
      }
    }
  }
  return undefined;
}

/** Keeps a condition's transition time while its status is unchanged; stamps `now` otherwise. */
function updateLastTransitionTime(
  status: V1PodStatus,
  oldStatus: V1PodStatus,
  type: string,
  now: number,
): void {
  const c = getPodCondition(status.conditions, type);
  if (c === undefined) return;
  const old = getPodCondition(oldStatus.conditions, type);
  c.lastTransitionTime = old !== undefined && old.status === c.status && old.lastTransitionTime
    ? old.lastTransitionTime
    : rfc3339(now) as unknown as Date;
}

/** Cuts a string to at most `bytes` UTF-8 bytes, as Go slices a string. */
function truncateBytes(s: string, bytes: number): string {
  const encoded = new TextEncoder().encode(s);
  if (encoded.length <= bytes) return s;
  return new TextDecoder().decode(encoded.slice(0, bytes));
}

/**
 * The status as the apiserver would return it (upstream normalizeStatus): times at seconds
 * precision, termination messages cut to the pod's share of 12 KiB, container statuses sorted by
 * name and init container statuses by the spec.
 */
function normalizeStatus(pod: V1Pod, status: V1PodStatus): V1PodStatus {
  const s = (toJson(status) ?? {}) as unknown as V1PodStatus;
  const containers = (pod.spec?.containers ?? []).length +
    (pod.spec?.initContainers ?? []).length + (pod.spec?.ephemeralContainers ?? []).length;
  const bytesPerStatus = containers > 0
    ? Math.floor(MAX_POD_TERMINATION_MESSAGE_LOG_LENGTH / containers)
    : MAX_POD_TERMINATION_MESSAGE_LOG_LENGTH;
  const cut = (list: V1ContainerStatus[] | undefined) => {
    for (const cs of list ?? []) {
      for (const state of [cs.state, cs.lastState]) {
        const t = state?.terminated;
        if (t?.message !== undefined) t.message = truncateBytes(t.message, bytesPerStatus);
      }
    }
  };
  cut(s.containerStatuses);
  cut(s.initContainerStatuses);
  cut(s.ephemeralContainerStatuses);
  const byName = (a: V1ContainerStatus, b: V1ContainerStatus) =>
    a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
  s.containerStatuses?.sort(byName);
  s.ephemeralContainerStatuses?.sort(byName);
  if (s.initContainerStatuses !== undefined) {
    const order = new Map((pod.spec?.initContainers ?? []).map((c, i) => [c.name, i]));
    const rank = (cs: V1ContainerStatus) => order.get(cs.name) ?? Number.MAX_SAFE_INTEGER;
    s.initContainerStatuses.sort((a, b) => rank(a) - rank(b));
  }
  return s;
}

/**
 * Whether two statuses are equal for the kubelet: the same own and shared conditions, by status,
 * reason and message, everything else exactly (upstream isPodStatusByKubeletEqual).
 */
function isPodStatusByKubeletEqual(oldStatus: V1PodStatus, status: V1PodStatus): boolean {
  // A condition the kubelet dropped (a resize done) is a change too.
  const owned = (x: V1PodStatus) =>
    (x.conditions ?? []).filter((c) =>
      podConditionByKubelet(c.type) || podConditionSharedByKubelet(c.type)
    ).length;
  if (owned(oldStatus) !== owned(status)) return false;
  for (const c of status.conditions ?? []) {
    if (!podConditionByKubelet(c.type) && !podConditionSharedByKubelet(c.type)) continue;
    const oc = getPodCondition(oldStatus.conditions, c.type);
    if (
      oc === undefined || oc.status !== c.status || (oc.message ?? "") !== (c.message ?? "") ||
      (oc.reason ?? "") !== (c.reason ?? "")
    ) {
      return false;
    }
  }
  const a = toJson({ ...oldStatus, conditions: status.conditions });
  const b = toJson(status);
  return jsonEqual(a as Json | undefined, b as Json | undefined);
}

/**
 * The status to write over the apiserver's (upstream mergePodStatus): conditions others own are
 * kept, DisruptionTarget only goes out with the terminal phase, the terminal phase only once no
 * container can run, and a terminal pod is never reported ready.
 */
function mergePodStatus(
  pod: V1Pod,
  oldPodStatus: V1PodStatus,
  newStatus: V1PodStatus,
  couldHaveRunningContainers: boolean,
  now: number,
): V1PodStatus {
  const merged = deepCopy(newStatus);
  const conditions: V1PodCondition[] = (oldPodStatus.conditions ?? []).filter((c) =>
    !podConditionByKubelet(c.type)
  );
  const transitioningToTerminal = !podIsTerminalPhase(oldPodStatus) &&
    podIsTerminalPhase(newStatus);
  for (const c of merged.conditions ?? []) {
    if (podConditionByKubelet(c.type)) {
      conditions.push(c);
    } else if (podConditionSharedByKubelet(c.type) && c.type === DISRUPTION_TARGET) {
      // Sent only with the terminal phase, once every container has stopped.
      if (transitioningToTerminal && !couldHaveRunningContainers) {
        updateLastTransitionTime(merged, oldPodStatus, c.type, now);
        const i = conditions.findIndex((x) => x.type === c.type);
        if (i >= 0) conditions[i] = c;
        else conditions.push(c);
      }
    }
  }
  merged.conditions = conditions;
  // Resource claim statuses belong to the scheduler and the resource claim controller.
  for (
    const key of [
      "resourceClaimStatuses",
      "extendedResourceClaimStatus",
      "nodeAllocatableResourceClaimStatuses",
    ] as const
  ) {
    if (oldPodStatus[key] !== undefined) {
      (merged as Record<string, unknown>)[key] = oldPodStatus[key];
    } else delete merged[key];
  }

  if (transitioningToTerminal && couldHaveRunningContainers) {
    merged.phase = oldPodStatus.phase;
    merged.reason = oldPodStatus.reason;
    merged.message = oldPodStatus.message;
  }
  if (podIsTerminalPhase(merged) && merged.phase !== undefined) {
    const ready = getPodCondition(merged.conditions, POD_READY)?.status === "True";
    const containersReady = getPodCondition(merged.conditions, CONTAINERS_READY)?.status === "True";
    if (ready || containersReady) {
      replaceCondition(
        merged,
        generateContainersReadyConditionForTerminalPhase(pod, merged.phase),
        now,
      );
      replaceCondition(merged, generatePodReadyConditionForTerminalPhase(pod, merged.phase), now);
    }
  }
  return merged;
}

/** Upstream podutil.UpdatePodCondition: replaces the condition, stamping a changed status. */
function replaceCondition(status: V1PodStatus, c: V1PodCondition, now: number): void {
  const conditions = status.conditions ?? (status.conditions = []);
  const i = conditions.findIndex((x) => x.type === c.type);
  const old = conditions[i];
  const stamped: V1PodCondition = {
    ...c,
    lastTransitionTime: old !== undefined && old.status === c.status && old.lastTransitionTime
      ? old.lastTransitionTime
      : rfc3339(now) as unknown as Date,
  };
  if (old === undefined) conditions.push(stamped);
  else conditions[i] = stamped;
}
