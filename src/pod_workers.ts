/**
 * @module
 * PodWorkers: one serialized worker per pod UID that drives the pod through its lifecycle,
 * sync (set up and keep running) → terminating (stop every container) → terminated (release
 * what must be released before the pod is gone). The sync loop hands it every change with
 * {@link PodWorkers.updatePod}; while a sync runs, further changes wait as one pending update
 * that collapses to the newest, and a termination request, once made, is never undone for that
 * UID. Results go into a due-time map that the sync loop's resync tick reads with
 * {@link PodWorkers.getPodsToSync}: no timer per pod. Other loops ask the workers, not the pod
 * manager, whether a pod may still run containers (`couldHaveRunningContainers` and friends).
 *
 * Talks to the three functions of upstream's `podSyncer` (`syncPod`, `syncTerminatingPod`,
 * `syncTerminatedPod`), given as options. Corresponds to upstream
 * `pkg/kubelet/pod_workers.go` (podWorkers, podSyncStatus, podWorkerLoop) and the work queue
 * of `pkg/kubelet/util/queue`.
 */

import type { KubeletMetrics } from "./metrics/metrics.ts";
import type { V1Pod } from "@kubernetes/client-node";
import { isStaticPod } from "./config/pod_config.ts";
import { type Clock, realClock } from "./util/clock.ts";
import { createLogger, kobj, type Logger } from "./klog/klog.ts";

/** What an update asks of a pod worker (upstream kubetypes.SyncPodType). */
export type SyncPodType = "create" | "update" | "sync" | "kill";

/** Where a pod is in the worker's lifecycle (upstream PodWorkerState). */
export type PodWorkerState = "sync" | "terminating" | "terminated";

/** Options of a kill request (upstream KillPodOptions). */
export interface KillPodOptions {
  /** A grace period shorter than the pod's own; the shortest one requested wins. */
  podTerminationGracePeriodSecondsOverride?: number;
  /** The kubelet evicts the pod: its content may be removed more eagerly. */
  evict?: boolean;
  /**
   * Called once the containers are stopped (syncTerminatingPod succeeded), or at once when the
   * pod has already terminated or the request is not a termination (upstream CompletedCh).
   */
  onCompleted?: () => void;
}

/** One change for a pod worker (upstream UpdatePodOptions). */
export interface UpdatePodOptions {
  updateType: SyncPodType;
  /** The pod; `metadata.uid` is required. */
  pod: V1Pod;
  /**
   * The pod is known only from the runtime (upstream's RunningPod update without a Pod): `pod`
   * holds just its identity. @default false
   */
  runtimeOnly?: boolean;
  /** The mirror pod of a static pod. */
  mirrorPod?: V1Pod;
  /** When the change was first seen, milliseconds since the epoch; the oldest is kept on collapse. */
  startTime: number;
  /** Only meaningful for kills and for pods already terminating. */
  killPodOptions?: KillPodOptions;
}

/** How one known worker stands, as {@link PodWorkers.syncKnownPods} reports (upstream PodWorkerSync). */
export interface PodWorkerSync {
  state: PodWorkerState;
  /** The pod is no longer in the desired set. */
  orphan: boolean;
  /** The worker has the pod's spec (not a pod known only from the runtime). */
  hasConfig: boolean;
  /** The pod is a static pod (only meaningful with hasConfig). */
  static: boolean;
}

/**
 * Sets up and keeps the pod running; resolves true once the pod has reached a terminal phase
 * (Succeeded or Failed). Should give up with the signal's reason when the signal aborts.
 */
export type SyncPodFn<S> = (
  signal: AbortSignal,
  updateType: SyncPodType,
  pod: V1Pod,
  mirrorPod: V1Pod | undefined,
  podStatus: S | undefined,
) => Promise<boolean>;

/** Stops every container of the pod within the grace period; retried until it resolves. */
export type SyncTerminatingPodFn<S = never> = (
  signal: AbortSignal,
  pod: V1Pod,
  gracePeriodSeconds: number,
  podStatus: S | undefined,
) => Promise<void>;

/** Releases what must go before the pod is finished on this node (volumes, status). */
export type SyncTerminatedPodFn = (signal: AbortSignal, pod: V1Pod) => Promise<void>;

/** What {@link PodWorkers} needs. */
export interface PodWorkersOptions<S = never> {
  syncPod: SyncPodFn<S>;
  syncTerminatingPod: SyncTerminatingPodFn<S>;
  syncTerminatedPod: SyncTerminatedPodFn;
  /**
   * The runtime status handed to syncPod and syncTerminatingPod: one observed after `minTime`,
   * the end of the worker's previous sync (upstream podCache.GetNewerThan with lastSyncTime); a
   * throw fails the sync.
   */
  getPodStatus?: (uid: string, minTime: number, signal: AbortSignal) => Promise<S | undefined>;
  /** Aborting it stops every worker: running syncs see their signal abort, nothing new starts. */
  signal?: AbortSignal;
  /** Time between successful syncs of a pod, in ms, before jitter (`syncFrequency`). @default 60000 */
  resyncIntervalMs?: number;
  /** Wait after a failed sync, in ms, before jitter (upstream workerBackOffPeriod). @default 10000 */
  backOffPeriodMs?: number;
  /** @default realClock */
  clock?: Clock;
  /** @default createLogger() */
  logger?: Logger;
  /** Source of jitter in [0, 1). @default Math.random */
  random?: () => number;
  /** kubelet_pod_worker_duration_seconds, from each update's start time. @default none */
  metrics?: Pick<KubeletMetrics, "podWorkerDuration" | "containersPerPodCount">;
  /**
   * Called after each SyncPod that did not throw, once the worker took `at` as the sync's end:
   * a runtime status observed after `at` satisfies the pod's next sync. @default none
   */
  synced?: (uid: string, at: number) => void;
}

/** Upstream workerResyncIntervalJitterFactor and workerBackOffPeriodJitterFactor. */
const JITTER_FACTOR = 0.5;
/** The API server's default for `spec.terminationGracePeriodSeconds`. */
const DEFAULT_GRACE_PERIOD_SECONDS = 30;

/** Per-UID state (upstream podSyncStatus). Times are ms since the epoch; undefined is "not yet". */
interface PodSyncStatus {
  /** Aborted to cancel the sync in flight; replaced once aborted. */
  controller?: AbortController;
  /** The controller's signal combined with the workers' root signal, made with it. */
  signal?: AbortSignal;
  /** The running worker loop, if any: at most one per UID. */
  loop?: Promise<void>;
  /** An update is pending or being worked on. */
  working: boolean;
  /** The newest update the worker has not yet taken. */
  pending?: UpdatePodOptions;
  /** The most recent update taken, with mirror pod and kill options accumulated. */
  active?: UpdatePodOptions;
  startedAt?: number;
  terminatingAt?: number;
  terminatedAt?: number;
  /** Seconds, once termination is requested; 0 until computed. Can only decrease. */
  gracePeriod: number;
  notifyPostTerminating: (() => void)[];
  /** The worker has left syncPod for good: no container will be started again. */
  startedTerminating: boolean;
  deleted: boolean;
  evicted: boolean;
  /** syncTerminatedPod succeeded; updates are ignored until syncKnownPods forgets the UID. */
  finished: boolean;
  /** A create arrived for the UID while it was terminating (static pods reuse UIDs). */
  restartRequested: boolean;
  /** When the worker's previous sync ended; 0 before the first. */
  lastSyncTime: number;
  /** Set during a sync by {@link PodWorkers.requeueAfter}: resync sooner than syncFrequency. */
  retryAfterMs?: number;
}

function workType(s: PodSyncStatus): PodWorkerState {
  if (s.terminatedAt !== undefined) return "terminated";
  if (s.terminatingAt !== undefined) return "terminating";
  return "sync";
}

/** Upstream wait.Jitter: `d` plus up to `factor * d`. */
function jitter(d: number, factor: number, random: () => number): number {
  return d + random() * factor * d;
}

/**
 * The grace period for a terminating pod: the apiserver's deletionGracePeriodSeconds, a shorter
 * override, else the pod's terminationGracePeriodSeconds (30 when unset); never below 1 and never
 * above what was already requested. Returns it and whether it shortened an earlier one
 * (upstream calculateEffectiveGracePeriod).
 */
export function effectiveGracePeriod(
  current: number,
  pod: V1Pod,
  override?: number,
): { gracePeriod: number; shortened: boolean } {
  let gracePeriod = current;
  let overridden = false;
  const deletion = pod.metadata?.deletionGracePeriodSeconds;
  if (
    deletion !== undefined && deletion !== null && (gracePeriod === 0 || deletion < gracePeriod)
  ) {
    gracePeriod = deletion;
    overridden = true;
  }
  if (override !== undefined && (gracePeriod === 0 || override < gracePeriod)) {
    gracePeriod = override;
    overridden = true;
  }
  if (!overridden && gracePeriod === 0) {
    gracePeriod = pod.spec?.terminationGracePeriodSeconds ?? DEFAULT_GRACE_PERIOD_SECONDS;
  }
  if (gracePeriod < 1) gracePeriod = 1;
  return { gracePeriod, shortened: current !== 0 && current !== gracePeriod };
}

function isTerminalPhase(pod: V1Pod): boolean {
  const phase = pod.status?.phase;
  return phase === "Succeeded" || phase === "Failed";
}

/** Serialized per-pod workers (upstream podWorkers). */
export class PodWorkers<S = never> {
  readonly #opts: PodWorkersOptions<S>;
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #random: () => number;
  readonly #root: AbortSignal;
  readonly #resyncMs: number;
  readonly #backOffMs: number;
  readonly #statuses = new Map<string, PodSyncStatus>();
  /** UID → when the sync loop should next sync it (upstream workQueue). */
  readonly #due = new Map<string, number>();
  /** syncKnownPods has run once: every pod has been handed over through updatePod. */
  #podsSynced = false;

  constructor(opts: PodWorkersOptions<S>) {
    this.#opts = opts;
    this.#clock = opts.clock ?? realClock;
    this.#log = opts.logger ?? createLogger();
    this.#random = opts.random ?? Math.random;
    this.#root = opts.signal ?? new AbortController().signal;
    this.#resyncMs = opts.resyncIntervalMs ?? 60_000;
    this.#backOffMs = opts.backOffPeriodMs ?? 10_000;
    if (!(this.#resyncMs > 0)) {
      throw new RangeError(
        `Cannot create PodWorkers: 'resyncIntervalMs' must be a positive number of milliseconds: current value is '${this.#resyncMs}'`,
      );
    }
    if (!(this.#backOffMs > 0)) {
      throw new RangeError(
        `Cannot create PodWorkers: 'backOffPeriodMs' must be a positive number of milliseconds: current value is '${this.#backOffMs}'`,
      );
    }
    this.#root.addEventListener("abort", () => {
      this.#log.info("Pod workers stopping", { workers: this.#statuses.size });
    }, { once: true });
  }

  /**
   * Hands a change to the pod's worker. Queued, collapsed into the pending update (logged at
   * v4) or ignored with a log line saying why; never dropped silently.
   */
  updatePod(options: UpdatePodOptions): void {
    const pod = options.pod;
    const uid = pod.metadata?.uid;
    const ref = kobj(pod);
    if (!uid) {
      this.#log.error(null, "Pod update rejected: the pod has no metadata.uid", {
        pod: ref,
        updateType: options.updateType,
      });
      options.killPodOptions?.onCompleted?.();
      return;
    }
    if (this.#root.aborted) {
      this.#log.info("Pod update rejected: pod workers are stopping", {
        pod: ref,
        podUID: uid,
        updateType: options.updateType,
      });
      return;
    }
    const now = this.#clock.now();
    let status = this.#statuses.get(uid);
    const firstTime = status === undefined;
    if (status === undefined) {
      this.#log.v(4).info("Pod is being synced for the first time", {
        pod: ref,
        podUID: uid,
        updateType: options.updateType,
      });
      status = {
        working: false,
        gracePeriod: 0,
        notifyPostTerminating: [],
        startedTerminating: false,
        deleted: false,
        evicted: false,
        finished: false,
        restartRequested: false,
        lastSyncTime: 0,
      };
      this.#statuses.set(uid, status);
    }

    // A create for a terminating UID means a new pod reused it: start it once this one is gone.
    if (!firstTime && status.terminatingAt !== undefined && options.updateType === "create") {
      status.restartRequested = true;
      this.#log.v(4).info(
        "Pod is terminating but has been requested to restart with same UID, will be reconciled later",
        { pod: ref, podUID: uid, updateType: options.updateType },
      );
      return;
    }
    if (status.finished) {
      this.#log.v(4).info("Pod is finished processing, no further updates", {
        pod: ref,
        podUID: uid,
        updateType: options.updateType,
      });
      options.killPodOptions?.onCompleted?.();
      return;
    }

    let becameTerminating = false;
    if (status.terminatingAt === undefined) {
      let reason: string | undefined;
      if (pod.metadata?.deletionTimestamp) {
        reason = "Pod is marked for graceful deletion, begin teardown";
        status.deleted = true;
      } else if (isTerminalPhase(pod)) {
        reason = "Pod is in a terminal phase (success/failed), begin teardown";
      } else if (options.updateType === "kill") {
        if (options.killPodOptions?.evict) {
          reason = "Pod is being evicted by the kubelet, begin teardown";
          status.evicted = true;
        } else {
          reason = "Pod is being removed by the kubelet, begin teardown";
        }
      }
      if (reason !== undefined) {
        this.#log.v(4).info(reason, { pod: ref, podUID: uid, updateType: options.updateType });
        status.terminatingAt = now;
        becameTerminating = true;
      }
    }

    // Once a pod is terminating every update is a kill, and the grace period only decreases.
    let shortened = false;
    let update: UpdatePodOptions = options;
    const kill = options.killPodOptions;
    if (status.terminatedAt !== undefined) {
      kill?.onCompleted?.();
      update = { ...options, killPodOptions: undefined };
    } else if (status.terminatingAt !== undefined) {
      if (kill?.onCompleted) status.notifyPostTerminating.push(kill.onCompleted);
      if (kill?.evict) status.evicted = true;
      const g = effectiveGracePeriod(
        status.gracePeriod,
        pod,
        kill?.podTerminationGracePeriodSecondsOverride,
      );
      shortened = g.shortened;
      status.gracePeriod = g.gracePeriod;
      update = {
        ...options,
        updateType: "kill",
        killPodOptions: {
          podTerminationGracePeriodSecondsOverride: g.gracePeriod,
          evict: status.evicted,
        },
      };
    } else if (kill !== undefined) {
      // Kill options mean nothing to a pod that is not terminating.
      kill.onCompleted?.();
      update = { ...options, killPodOptions: undefined };
    }

    const previous = status.pending;
    if (previous !== undefined) {
      if (previous.startTime < update.startTime) {
        update = { ...update, startTime: previous.startTime };
      }
      this.#log.v(4).info("Pending pod update replaced by a newer one", {
        pod: ref,
        podUID: uid,
        replacedUpdateType: previous.updateType,
        requestedUpdateType: options.updateType,
        updateType: update.updateType,
      });
    }
    status.pending = update;
    status.working = true;
    this.#log.v(4).info("Notifying pod of pending update", {
      pod: ref,
      podUID: uid,
      workType: workType(status),
    });
    this.#ensureWorker(uid, status);

    if (
      (becameTerminating || shortened) && status.controller && !status.controller.signal.aborted
    ) {
      this.#log.v(3).info("Cancelling current pod sync", {
        pod: ref,
        podUID: uid,
        workType: workType(status),
      });
      status.controller.abort(new DOMException("Pod termination requested", "AbortError"));
    }
  }

  /**
   * UIDs whose resync or retry is due, removed from the queue (upstream workQueue.GetWork).
   * The sync loop's resync tick calls it and sends each pod a "sync" update.
   */
  getPodsToSync(now: number = this.#clock.now()): string[] {
    const ready: string[] = [];
    for (const [uid, at] of this.#due) {
      if (at <= now) {
        ready.push(uid);
        this.#due.delete(uid);
      }
    }
    return ready;
  }

  /** Termination was requested and the UID is still known (upstream IsPodTerminationRequested). */
  /**
   * Asks for the pod's next resync after `delayMs` instead of syncFrequency, once the sync in
   * progress ends: a container in back-off is restarted when its back-off expires.
   */
  requeueAfter(uid: string, delayMs: number): void {
    const status = this.#statuses.get(uid);
    if (!status) return;
    status.retryAfterMs = Math.min(status.retryAfterMs ?? Infinity, Math.max(0, delayMs));
  }

  isPodTerminationRequested(uid: string): boolean {
    return this.#statuses.get(uid)?.terminatingAt !== undefined;
  }

  /** syncTerminatingPod has succeeded for the UID (upstream IsPodKnownTerminated). */
  isPodKnownTerminated(uid: string): boolean {
    return this.#statuses.get(uid)?.terminatedAt !== undefined;
  }

  /** Containers may be running: true until terminated, or for unknown pods before the first syncKnownPods. */
  couldHaveRunningContainers(uid: string): boolean {
    const s = this.#statuses.get(uid);
    return s ? s.terminatedAt === undefined : !this.#podsSynced;
  }

  /** syncTerminatedPod has succeeded; unknown pods count as finished after the first syncKnownPods. */
  shouldPodBeFinished(uid: string): boolean {
    const s = this.#statuses.get(uid);
    return s ? s.finished : this.#podsSynced;
  }

  /** The worker has stopped starting containers for the pod (upstream ShouldPodContainersBeTerminating). */
  shouldPodContainersBeTerminating(uid: string): boolean {
    const s = this.#statuses.get(uid);
    return s ? s.startedTerminating : this.#podsSynced;
  }

  /** Runtime resources other than containers may be torn down (upstream ShouldPodRuntimeBeRemoved). */
  shouldPodRuntimeBeRemoved(uid: string): boolean {
    const s = this.#statuses.get(uid);
    return s ? s.terminatedAt !== undefined : this.#podsSynced;
  }

  /** All content of the pod may go: evicted, or deleted and terminated (upstream ShouldPodContentBeRemoved). */
  shouldPodContentBeRemoved(uid: string): boolean {
    const s = this.#statuses.get(uid);
    return s ? s.evicted || (s.deleted && s.terminatedAt !== undefined) : this.#podsSynced;
  }

  /** The worker's state for the UID, or undefined when it has none. */
  podWorkerState(uid: string): PodWorkerState | undefined {
    const s = this.#statuses.get(uid);
    return s && workType(s);
  }

  /**
   * Forgets finished workers of pods not in `desired` (or awaiting a restart under the same UID),
   * and starts terminating orphans that are still running; the caller re-sends a create for any
   * desired pod missing from the result (upstream SyncKnownPods).
   */
  syncKnownPods(desired: readonly V1Pod[]): Map<string, PodWorkerSync> {
    const known = new Set(desired.map((p) => p.metadata?.uid).filter((u) => u !== undefined));
    const workers = new Map<string, PodWorkerSync>();
    this.#podsSynced = true;
    for (const [uid, status] of this.#statuses) {
      const orphan = !known.has(uid);
      if (
        (status.restartRequested || orphan) && this.#removeTerminatedWorker(uid, status, orphan)
      ) {
        continue;
      }
      const update = status.active ?? status.pending;
      const hasConfig = update !== undefined && !update.runtimeOnly;
      workers.set(uid, {
        state: workType(status),
        orphan,
        hasConfig,
        static: hasConfig && isStaticPod(update.pod),
      });
    }
    return workers;
  }

  /** Resolves once no worker is running a sync; after the root signal aborts, once all have stopped. */
  async drain(): Promise<void> {
    for (;;) {
      const loops = [...this.#statuses.values()].flatMap((s) => (s.loop ? [s.loop] : []));
      if (loops.length === 0) return;
      await Promise.all(loops);
    }
  }

  #removeTerminatedWorker(uid: string, status: PodSyncStatus, orphan: boolean): boolean {
    if (!status.finished) {
      if (!orphan) {
        this.#log.v(4).info(
          "Pod worker has been requested for removal but is still not fully terminated",
          { podUID: uid },
        );
        return false;
      }
      status.deleted = true;
      if (status.startedAt === undefined) {
        this.#log.v(4).info("Pod is orphaned and has not been started", { podUID: uid });
      } else if (status.terminatingAt === undefined) {
        status.terminatingAt = this.#clock.now();
        status.gracePeriod = status.active
          ? effectiveGracePeriod(status.gracePeriod, status.active.pod).gracePeriod
          : 1;
        this.#requeueLastUpdate(uid, status);
        this.#log.v(4).info("Pod is orphaned and still running, began terminating", {
          podUID: uid,
        });
        return false;
      } else {
        this.#requeueLastUpdate(uid, status);
        this.#log.v(4).info("Pod is orphaned and still terminating, notified the pod worker", {
          podUID: uid,
        });
        return false;
      }
    }
    if (status.restartRequested) {
      this.#log.v(4).info(
        "Pod has been terminated but another pod with the same UID was created, remove history to allow restart",
        { podUID: uid },
      );
    } else {
      this.#log.v(4).info(
        "Pod has been terminated and is no longer known to the kubelet, remove all history",
        { podUID: uid },
      );
    }
    if (status.pending !== undefined) {
      this.#log.v(4).info("Pending pod update discarded with the forgotten worker", {
        podUID: uid,
        updateType: status.pending.updateType,
      });
    }
    this.#statuses.delete(uid);
    this.#due.delete(uid);
    return true;
  }

  /** Replays the last update so the worker moves on to its next phase without outside help. */
  #requeueLastUpdate(uid: string, status: PodSyncStatus): void {
    if (status.pending !== undefined || status.active === undefined) return;
    status.pending = { ...status.active };
    status.working = true;
    this.#ensureWorker(uid, status);
  }

  #ensureWorker(uid: string, status: PodSyncStatus): void {
    if (status.loop) return;
    status.loop = this.#workerLoop(uid, status).finally(() => {
      status.loop = undefined;
    });
  }

  #enqueue(uid: string, delayMs: number): void {
    this.#due.set(uid, this.#clock.now() + delayMs);
  }

  /** Takes pending updates one at a time until none is left (upstream podWorkerLoop). */
  async #workerLoop(uid: string, status: PodSyncStatus): Promise<void> {
    // Let updatePod return first, as the goroutine handoff does upstream.
    await Promise.resolve();
    for (;;) {
      if (this.#statuses.get(uid) !== status) return; // forgotten by syncKnownPods
      const update = status.pending;
      if (update === undefined) {
        status.working = false;
        return;
      }
      if (status.finished) {
        status.pending = undefined;
        status.working = false;
        this.#log.v(4).info("Pod is finished processing, pending update ignored", {
          podUID: uid,
          updateType: update.updateType,
        });
        return;
      }
      if (this.#root.aborted) {
        status.working = false;
        this.#log.info("Pod worker stopped with an update pending", {
          pod: kobj(update.pod),
          podUID: uid,
          updateType: update.updateType,
        });
        return;
      }
      status.pending = undefined;
      if (!status.controller || status.controller.signal.aborted) {
        status.controller = new AbortController();
        // One combined signal per controller, not per sync: each AbortSignal.any stays
        // reachable from the root signal for the kubelet's life (src/util/linked_signal.ts).
        status.signal = AbortSignal.any([this.#root, status.controller.signal]);
      }
      const signal = status.signal!;
      if (status.startedAt === undefined) {
        status.startedAt = this.#clock.now();
        // Upstream records the count of a new pod's containers as the pod is let start.
        if (!update.runtimeOnly) {
          this.#opts.metrics?.containersPerPodCount.observe(
            update.pod.spec?.containers?.length ?? 0,
          );
        }
      }
      this.#mergeLastUpdate(status, update);
      if (!(await this.#syncOnce(uid, status, update, signal))) return;
    }
  }

  #mergeLastUpdate(status: PodSyncStatus, update: UpdatePodOptions): void {
    const active = status.active;
    status.active = {
      ...update,
      mirrorPod: update.mirrorPod ?? active?.mirrorPod,
      killPodOptions: update.killPodOptions ?? active?.killPodOptions,
    };
  }

  /** Upstream's PodWorkerDuration observation: from when the update was first seen. */
  #observeDuration(operation: string, startTime: number): void {
    if (startTime <= 0) return;
    this.#opts.metrics?.podWorkerDuration.observe((this.#clock.now() - startTime) / 1000, {
      operation_type: operation,
    });
  }

  /** Runs one sync of the pod's current phase; false when the worker is done for good. */
  async #syncOnce(
    uid: string,
    status: PodSyncStatus,
    update: UpdatePodOptions,
    signal: AbortSignal,
  ): Promise<boolean> {
    const ref = kobj(update.pod);
    const work = workType(status);
    this.#log.v(4).info("Processing pod event", { pod: ref, podUID: uid, updateType: work });
    let isTerminal = false;
    let failed = false;
    try {
      const podStatus = work === "terminated"
        ? undefined
        : await this.#opts.getPodStatus?.(uid, status.lastSyncTime, signal);
      if (work === "terminated") {
        await this.#opts.syncTerminatedPod(signal, update.pod);
      } else if (work === "terminating") {
        if (!status.startedTerminating) {
          this.#log.v(4).info("Pod worker has observed request to terminate", { podUID: uid });
          status.startedTerminating = true;
        }
        if (status.gracePeriod === 0) {
          status.gracePeriod = effectiveGracePeriod(0, update.pod).gracePeriod;
        }
        await this.#opts.syncTerminatingPod(signal, update.pod, status.gracePeriod, podStatus);
      } else {
        isTerminal = await this.#opts.syncPod(
          signal,
          update.updateType,
          update.pod,
          update.mirrorPod,
          podStatus,
        );
      }
    } catch (err) {
      failed = true;
      if (signal.aborted) {
        this.#log.v(2).info("Sync exited with cancellation", {
          pod: ref,
          podUID: uid,
          updateType: work,
          reason: String(signal.reason),
        });
      } else {
        this.#log.error(err, "Error syncing pod, skipping", { pod: ref, podUID: uid });
      }
    }

    status.lastSyncTime = this.#clock.now();
    if (!failed && work === "sync") this.#opts.synced?.(uid, status.lastSyncTime);
    let phaseTransition = false;
    if (!failed) {
      if (work === "terminated") {
        this.#log.v(4).info("Pod is complete and the worker can now stop", { podUID: uid });
        this.#observeDuration("terminated", update.startTime);
        status.finished = true;
        status.working = false;
        this.#log.v(4).info("Processing pod event done", {
          pod: ref,
          podUID: uid,
          updateType: work,
        });
        return false;
      } else if (work === "terminating") {
        this.#log.v(4).info("Pod terminated all containers successfully", { podUID: uid });
        status.terminatedAt = this.#clock.now();
        const notify = status.notifyPostTerminating;
        status.notifyPostTerminating = [];
        for (const fn of notify) fn();
        this.#requeueLastUpdate(uid, status);
        phaseTransition = true;
      } else if (isTerminal) {
        this.#log.v(4).info(
          "Pod indicated lifecycle completed naturally and should now terminate",
          {
            podUID: uid,
          },
        );
        status.terminatingAt ??= this.#clock.now();
        status.startedTerminating = true;
        this.#requeueLastUpdate(uid, status);
        phaseTransition = true;
      }
    }

    this.#observeDuration(update.updateType, update.startTime);
    const retryAfter = status.retryAfterMs;
    status.retryAfterMs = undefined;
    if (phaseTransition) this.#enqueue(uid, 0);
    else if (!failed && retryAfter !== undefined && retryAfter < this.#resyncMs) {
      this.#enqueue(uid, retryAfter);
    } else if (!failed) this.#enqueue(uid, jitter(this.#resyncMs, JITTER_FACTOR, this.#random));
    else this.#enqueue(uid, jitter(this.#backOffMs, JITTER_FACTOR, this.#random));
    this.#log.v(4).info("Processing pod event done", { pod: ref, podUID: uid, updateType: work });
    return true;
  }
}
