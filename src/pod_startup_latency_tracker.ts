/**
 * @module
 * Pod start-up latency: the SLI of upstream's PodStartupLatencyTracker and, beyond upstream,
 * a per-pod timeline of the last start for `/debug/pods/{ns}/{name}`.
 *
 * The SLI (kubelet_pod_start_sli_duration_seconds) runs from the pod's creation timestamp to
 * the moment the apiserver watch shows every container running, minus the time spent pulling
 * images (overlapping pulls counted once) and running init containers; stateful pods (volumes
 * other than secret, configMap, downwardAPI, emptyDir, projected) are left out of it, and pods
 * that were unschedulable are never tracked. kubelet_pod_start_total_duration_seconds is the
 * same span without the subtractions. State is kept only for API pods first observed before
 * they started, and dropped once the pod's status is forgotten.
 *
 * The timeline records when the kubelet first saw the pod, admitted it, had its volumes ready,
 * created its sandbox, had each container's image, created and started each container, saw
 * it running, had the apiserver accept the first status with every container running, and
 * saw it first ready. A new sandbox starts a new timeline from the sandbox on. Only
 * pods the kubelet knows are kept: housekeeping drops the rest ({@link retain}).
 *
 * Corresponds to upstream `pkg/kubelet/util/pod_startup_latency_tracker.go`; the timeline has
 * no upstream counterpart.
 */

import type { V1Pod } from "@kubernetes/client-node";
import type { Clock } from "./util/clock.ts";
import { formatDuration } from "./util/duration.ts";
import { kobj, type Logger } from "./klog/klog.ts";
import type { KubeletMetrics } from "./metrics/metrics.ts";
import { CONFIG_FIRST_SEEN_ANNOTATION } from "./config/pod_config.ts";

/** The steps of a pod's start, in the order they normally happen. */
export type StartupPhase =
  | "seen"
  | "admitted"
  | "volumesReady"
  | "sandboxCreated"
  | "imagePulled"
  | "containerCreated"
  | "containerStarted"
  | "running"
  | "statusWritten"
  | "ready";

/** Phases recorded once per container rather than once per pod. */
const PER_CONTAINER: ReadonlySet<StartupPhase> = new Set([
  "imagePulled",
  "containerCreated",
  "containerStarted",
]);

/** Phases kept when a new sandbox restarts the timeline. */
const BEFORE_SANDBOX: ReadonlySet<StartupPhase> = new Set(["seen", "admitted", "volumesReady"]);

/** One recorded step; `at` is ms since the epoch. */
export interface TimelineEntry {
  readonly phase: StartupPhase;
  readonly container?: string;
  readonly at: number;
}

/** A pod's last start as the kubelet recorded it. */
export interface PodTimeline {
  readonly namespace: string;
  readonly name: string;
  readonly uid: string;
  readonly entries: readonly TimelineEntry[];
}

/** What {@link PodStartupLatencyTracker} needs. */
export interface PodStartupLatencyTrackerOptions {
  readonly clock: Pick<Clock, "now">;
  readonly logger: Logger;
  /** Where the SLI is observed. @default none: only the timeline is kept */
  readonly metrics?: Pick<
    KubeletMetrics,
    "podStartSLIDuration" | "podStartTotalDuration" | "firstNetworkPodStartSLIDuration"
  >;
}

interface SliState {
  /** Pull sessions, in the order they ended. */
  readonly pulls: { start: number; end: number }[];
  /** Starts of pulls in flight, oldest first. */
  readonly pullStarts: number[];
  initRuntimeMs: number;
  currentInitStart: number | undefined;
  /** When a status update first showed every container running. */
  observedRunning: number | undefined;
  recorded: boolean;
  /**
   * The newest version the watch delivered, and when first, while no status update showed
   * the pod started: the watch may deliver the kubelet's own write before its answer is read.
   */
  watched: { readonly pod: V1Pod; readonly when: number } | undefined;
}

interface Timeline {
  namespace: string;
  name: string;
  entries: TimelineEntry[];
}

function uidOf(pod: V1Pod): string {
  return pod.metadata?.uid ?? "";
}

function timeOf(t: Date | string | undefined): number | undefined {
  if (t === undefined) return undefined;
  const ms = t instanceof Date ? t.getTime() : Date.parse(t);
  return Number.isNaN(ms) ? undefined : ms;
}

/** Upstream hasPodStartedSLO: every container running with a start time. */
export function hasPodStarted(pod: V1Pod): boolean {
  return (pod.status?.containerStatuses ?? []).every((cs) =>
    cs.state?.running?.startedAt !== undefined
  );
}

/** Upstream isStatefulPod: a volume other than secret, configMap, downwardAPI, emptyDir, projected. */
export function isStatefulPod(pod: V1Pod): boolean {
  return (pod.spec?.volumes ?? []).some((v) =>
    !v.secret && !v.configMap && !v.downwardAPI && !v.emptyDir && !v.projected
  );
}

function isPodUnschedulable(pod: V1Pod): boolean {
  return (pod.status?.conditions ?? []).some((c) =>
    c.type === "PodScheduled" && c.status === "False"
  );
}

/** Upstream calculateImagePullingTime: sessions in order, overlaps counted once. */
export function imagePullingTimeMs(sessions: readonly { start: number; end: number }[]): number {
  let total = 0;
  let currentEnd = 0;
  sessions.forEach((s, i) => {
    if (i === 0 || s.start > currentEnd) {
      total += s.end - s.start;
      currentEnd = s.end;
    } else if (s.end > currentEnd) {
      total += s.end - currentEnd;
      currentEnd = s.end;
    }
  });
  return total;
}

/** See the module documentation. */
export class PodStartupLatencyTracker {
  readonly #o: PodStartupLatencyTrackerOptions;
  readonly #sli = new Map<string, SliState>();
  /** Pods excluded for having been unschedulable; never tracked again. */
  readonly #excluded = new Set<string>();
  readonly #timelines = new Map<string, Timeline>();
  /** A pod off the host network has had its start observed (upstream firstNetworkPodSeen). */
  #firstNetworkPodSeen = false;

  constructor(opts: PodStartupLatencyTrackerOptions) {
    this.#o = opts;
  }

  // ---- The SLI (upstream's interface) -------------------------------------------------------

  /** An API pod as the watch delivered it at `whenMs` (upstream ObservedPodOnWatch). */
  observedPodOnWatch(pod: V1Pod, whenMs: number): void {
    const uid = uidOf(pod);
    const phase = pod.status?.phase;
    if (phase === "Failed" || phase === "Succeeded") {
      this.#sli.delete(uid);
      return;
    }
    const state = this.#sli.get(uid);
    if (!state) {
      if (this.#excluded.has(uid) || pod.status?.startTime !== undefined) return;
      if (isPodUnschedulable(pod)) {
        this.#excluded.add(uid);
        return;
      }
      this.#sli.set(uid, {
        pulls: [],
        pullStarts: [],
        initRuntimeMs: 0,
        currentInitStart: undefined,
        observedRunning: undefined,
        recorded: false,
        watched: undefined,
      });
      return;
    }
    if (isPodUnschedulable(pod)) {
      this.#sli.delete(uid);
      this.#excluded.add(uid);
      return;
    }
    if (state.recorded) return;
    if (state.observedRunning === undefined) {
      // Each set re-delivers every pod: a version is first seen once.
      const rv = pod.metadata?.resourceVersion;
      if (state.watched?.pod.metadata?.resourceVersion !== rv) {
        state.watched = { pod, when: whenMs };
      }
      return;
    }
    if (hasPodStarted(pod)) this.#record(state, pod, whenMs);
  }

  #record(state: SliState, pod: V1Pod, whenMs: number): void {
    const created = timeOf(pod.metadata?.creationTimestamp) ?? whenMs;
    const e2eMs = whenMs - created;
    let sloMs = e2eMs;
    const pullMs = imagePullingTimeMs(state.pulls);
    if (pullMs > 0) sloMs -= pullMs;
    if (state.initRuntimeMs > 0) sloMs -= state.initRuntimeMs;
    const stateful = isStatefulPod(pod);
    this.#o.logger.info("Observed pod startup duration", {
      pod: kobj(pod),
      podStartSLOduration: sloMs / 1000,
      podStartE2EDuration: formatDuration(e2eMs),
      totalImagesPullingTime: formatDuration(pullMs),
      totalInitContainerRuntime: formatDuration(state.initRuntimeMs),
      isStatefulPod: stateful,
      podCreationTimestamp: new Date(created).toISOString(),
      imagePullSessionsCount: state.pulls.length,
      imagePullSessionsStartsCount: state.pullStarts.length,
      observedRunningTime: new Date(state.observedRunning ?? whenMs).toISOString(),
      watchObservedRunningTime: new Date(whenMs).toISOString(),
    });
    const m = this.#o.metrics;
    m?.podStartTotalDuration.observe(e2eMs / 1000, {});
    if (!stateful) {
      m?.podStartSLIDuration.observe(sloMs / 1000, {});
      // The first pod on the pod network: a slow CNI plugin shows here.
      if (!pod.spec?.hostNetwork && !this.#firstNetworkPodSeen) {
        m?.firstNetworkPodStartSLIDuration.set(sloMs / 1000);
        this.#firstNetworkPodSeen = true;
      }
    }
    state.recorded = true;
  }

  /** An image pull for the pod began (upstream RecordImageStartedPulling). */
  recordImageStartedPulling(uid: string): void {
    this.#sli.get(uid)?.pullStarts.push(this.#o.clock.now());
  }

  /** The oldest pull in flight for the pod ended, or none was needed (upstream RecordImageFinishedPulling). */
  recordImageFinishedPulling(uid: string): void {
    const state = this.#sli.get(uid);
    const start = state?.pullStarts.shift();
    if (state && start !== undefined) state.pulls.push({ start, end: this.#o.clock.now() });
  }

  /** A (non-sidecar) init container was started at `atMs`. */
  recordInitContainerStarted(uid: string, atMs: number): void {
    const state = this.#sli.get(uid);
    if (state) state.currentInitStart = atMs;
  }

  /** The init container started last finished at `atMs`. */
  recordInitContainerFinished(uid: string, atMs: number): void {
    const state = this.#sli.get(uid);
    if (!state || state.currentInitStart === undefined) return;
    const took = atMs - state.currentInitStart;
    if (took > 0) state.initRuntimeMs += took;
    state.currentInitStart = undefined;
  }

  /** The apiserver accepted a changed status: the pod as it answered (upstream RecordStatusUpdated). */
  recordStatusUpdated(pod: V1Pod): void {
    const state = this.#sli.get(uidOf(pod));
    const started = hasPodStarted(pod);
    // The timeline's step: the first write the apiserver accepted with every container running
    // (some, unlike the SLI's test, which a status without containers passes).
    if (started && (pod.status?.containerStatuses?.length ?? 0) > 0) {
      this.recordPhase(pod, "statusWritten");
    }
    if (!state || state.recorded || state.observedRunning !== undefined) return;
    if (started) {
      this.#o.logger.v(3).info("Mark when the pod was running for the first time", {
        pod: kobj(pod),
        rv: pod.metadata?.resourceVersion,
      });
      state.observedRunning = this.#o.clock.now();
      // The watch showed this very write already: it was observed then.
      const watched = state.watched;
      const rv = pod.metadata?.resourceVersion;
      if (watched && rv !== undefined && watched.pod.metadata?.resourceVersion === rv) {
        this.#record(state, watched.pod, watched.when);
      }
    }
  }

  /** Forgets the pod's SLI state (upstream DeletePodStartupState). */
  deletePodStartupState(uid: string): void {
    this.#sli.delete(uid);
    this.#excluded.delete(uid);
  }

  // ---- The timeline -------------------------------------------------------------------------

  /**
   * Records a step of the pod's start. `seen` opens the timeline (at the pod's first-seen
   * annotation when it has one); other steps of a pod without one are ignored, and each step
   * (per container for images and containers) is kept at its first time in this start.
   */
  recordPhase(pod: V1Pod, phase: StartupPhase, container?: string): void {
    const uid = uidOf(pod);
    const now = this.#o.clock.now();
    let t = this.#timelines.get(uid);
    if (phase === "seen") {
      if (t) return;
      const seen = timeOf(pod.metadata?.annotations?.[CONFIG_FIRST_SEEN_ANNOTATION]);
      this.#timelines.set(uid, {
        namespace: pod.metadata?.namespace ?? "",
        name: pod.metadata?.name ?? "",
        entries: [{ phase, at: Math.min(seen ?? now, now) }],
      });
      return;
    }
    if (!t) return;
    const c = PER_CONTAINER.has(phase) ? container : undefined;
    const known = t.entries.some((e) => e.phase === phase && e.container === c);
    if (known) {
      if (phase !== "sandboxCreated") return;
      // A new sandbox is a new start: what followed the previous one no longer describes it.
      t = { ...t, entries: t.entries.filter((e) => BEFORE_SANDBOX.has(e.phase)) };
      this.#timelines.set(uid, t);
    }
    t.entries.push(c === undefined ? { phase, at: now } : { phase, container: c, at: now });
  }

  /** The pod's timeline by namespace and name, entries in time order. */
  timeline(namespace: string, name: string): PodTimeline | undefined {
    for (const [uid, t] of this.#timelines) {
      if (t.namespace !== namespace || t.name !== name) continue;
      const entries = t.entries.map((e, i) => ({ e, i }))
        .sort((a, b) => a.e.at - b.e.at || a.i - b.i)
        .map(({ e }) => e);
      return { namespace, name, uid, entries };
    }
    return undefined;
  }

  /** Drops the state of every pod not in `uids` (housekeeping). */
  retain(uids: ReadonlySet<string>): void {
    for (const uid of [...this.#timelines.keys()]) if (!uids.has(uid)) this.#timelines.delete(uid);
    for (const uid of [...this.#sli.keys()]) if (!uids.has(uid)) this.#sli.delete(uid);
  }

  /** Pods with a timeline or SLI state, for tests of the bound. */
  get size(): number {
    return new Set([...this.#timelines.keys(), ...this.#sli.keys()]).size;
  }
}

/** The /debug/pods answer: each phase with its time (RFC 3339, ms) and the time since the first. */
export function timelineJson(t: PodTimeline): unknown {
  const first = t.entries[0]?.at ?? 0;
  return {
    namespace: t.namespace,
    name: t.name,
    uid: t.uid,
    phases: t.entries.map((e) => ({
      phase: e.phase,
      ...(e.container === undefined ? {} : { container: e.container }),
      time: new Date(e.at).toISOString(),
      sinceFirst: formatDuration(e.at - first),
      sinceFirstMs: e.at - first,
    })),
  };
}
