/**
 * @module
 * GenericPLEG, the pod lifecycle event generator: it relists the runtime's sandboxes and
 * containers every second, compares each one's state with the previous relist, refreshes the
 * {@link PodCache} for pods that changed and then emits {@link PodLifecycleEvent}s for the sync
 * loop. Events go into a bounded queue; when it is full an event is dropped, counted in
 * {@link GenericPLEG.droppedEvents} and logged, never silently. `healthy()` backs /healthz.
 * Talks to the CRI RuntimeService only. Corresponds to upstream `pkg/kubelet/pleg/generic.go`
 * and `pleg.go`.
 */

import type { KubeletMetrics } from "../metrics/metrics.ts";
import * as api from "../../proto/runtime/v1/api.ts";
import { type Clock, realClock, WAIT_ENDED } from "../util/clock.ts";
import { GrpcCode, isCriCode } from "../cri/connection.ts";
import { formatDuration } from "../util/duration.ts";
import { createLogger, type Logger } from "../klog/klog.ts";
import {
  getContainerInfoFromLabels,
  getPodSandboxInfoFromLabels,
  KUBERNETES_POD_UID_LABEL,
} from "../kuberuntime/labels.ts";
import type { PodCache, PodStatus } from "../container/pod_cache.ts";
import type { RuntimeService } from "../cri/remote_runtime.ts";
import { Semaphore } from "../util/semaphore.ts";
import { linkSignals } from "../util/linked_signal.ts";

/** What happened to a pod (upstream `PodLifeCycleEventType`). */
export type PodLifecycleEventType =
  | "ContainerStarted"
  | "ContainerDied"
  | "ContainerRemoved"
  | "PodSync"
  | "ContainerChanged";

/** One change of one pod; `data` is the container (or sandbox) id. */
export interface PodLifecycleEvent {
  /** The pod UID. */
  id: string;
  type: PodLifecycleEventType;
  data: string;
}

/** The result of {@link GenericPLEG.healthy}; `message` says why when not ok. */
export interface PlegHealth {
  ok: boolean;
  message: string;
}

/**
 * What the sync loop, the health checks and housekeeping need from a PLEG (upstream
 * `PodLifecycleEventGenerator`); {@link GenericPLEG} and the evented PLEG both are one.
 */
export interface PodLifecycleEventGenerator {
  /** Runs until `signal` aborts. */
  run(signal: AbortSignal): Promise<void>;
  /** One relist of every pod now. */
  relist(signal?: AbortSignal): Promise<void>;
  /** The kubelet changed containers and wants the change seen soon. */
  poke(): void;
  /**
   * The kubelet has just started containers of pod `uid`: that pod's status is read into the
   * cache now and its events sent, rather than waiting for a relist of every pod. Resolves with
   * whether it was (false: the relist will see the change, as before).
   */
  inspectPod(uid: string, opts?: InspectPodOptions): Promise<boolean>;
  healthy(): PlegHealth;
  /** UIDs of the pods the runtime has. */
  podIds(): string[];
  /** The next event; rejects with the signal's reason when it aborts first. */
  next(signal?: AbortSignal): Promise<PodLifecycleEvent>;
  /**
   * The events queued now, in order, taken without waiting: after {@link next} gave the first
   * event of a relist's batch, the rest of it.
   */
  takeQueued(): PodLifecycleEvent[];
  /** Every event, in order, until `signal` aborts. */
  watch(signal?: AbortSignal): AsyncGenerator<PodLifecycleEvent>;
}

/** Options of {@link PodLifecycleEventGenerator.inspectPod}. */
export interface InspectPodOptions {
  /**
   * A time the read follows (the end of the sync that started the containers): the status is
   * stamped later than it even within the same millisecond, so the pod's next sync takes it.
   */
  readonly after?: number;
  readonly signal?: AbortSignal;
  /**
   * Send a PodSync event when no container changed state (upstream's reinspection, after an
   * in-place resize: the runtime's new resources reach the status at once). @default false
   */
  readonly sync?: boolean;
}

/** The CRI calls the PLEG needs. */
export type PlegRuntime = Pick<
  RuntimeService,
  "listPodSandbox" | "listContainers" | "podSandboxStatus" | "containerStatus"
>;

/** Options of {@link GenericPLEG}. */
export interface GenericPLEGOptions {
  readonly runtime: PlegRuntime;
  readonly cache: PodCache;
  /** @default realClock */
  readonly clock?: Clock;
  /** @default a text logger on stderr */
  readonly logger?: Logger;
  /** Time between the end of one relist and the start of the next. @default 1000 */
  readonly relistPeriodMs?: number;
  /** healthy() fails when the last successful relist is older than this. @default 180000 */
  readonly relistThresholdMs?: number;
  /** Events held for the consumer before new ones are dropped. @default 1000 */
  readonly capacity?: number;
  /** Status RPCs in flight at once while refreshing the cache. @default 8 */
  readonly concurrency?: number;
  /** Relist timings, dropped events, and the running pods and containers. @default none */
  readonly metrics?: PlegMetrics;
}

/** The metrics the PLEG records. */
export type PlegMetrics = Pick<
  KubeletMetrics,
  | "plegRelistDuration"
  | "plegRelistInterval"
  | "plegDiscardEvents"
  | "plegLastSeen"
  | "plegPodRelistDuration"
  | "runningPods"
  | "runningContainers"
>;

/** kubecontainer's container states, the values of kubelet_running_containers' label. */
const KUBE_STATES: Readonly<Record<number, string>> = {
  [api.ContainerState.CONTAINER_CREATED]: "created",
  [api.ContainerState.CONTAINER_RUNNING]: "running",
  [api.ContainerState.CONTAINER_EXITED]: "exited",
};

/**
 * Upstream updateRunningPodAndContainerMetrics: pods with a ready sandbox, and containers by
 * state. A state seen before and absent now reads 0 (upstream leaves its last count).
 */
function updateRunningMetrics(
  m: PlegMetrics,
  pods: Iterable<RelistedPod>,
  states: Set<string>,
): void {
  let running = 0;
  const counts = new Map<string, number>();
  for (const p of pods) {
    for (const c of p.containers.values()) {
      const state = KUBE_STATES[c.state] ?? "unknown";
      counts.set(state, (counts.get(state) ?? 0) + 1);
    }
    for (const sb of p.sandboxes.values()) {
      if (sb.state === api.PodSandboxState.SANDBOX_READY) {
        running++;
        break;
      }
    }
  }
  for (const state of counts.keys()) states.add(state);
  for (const state of states) {
    m.runningContainers.set(counts.get(state) ?? 0, { container_state: state });
  }
  m.runningPods.set(running);
}

/** Upstream's plegContainerState. */
type PlegState = "running" | "exited" | "unknown" | "non-existent";

/** A pod as one relist saw it: its sandboxes and containers by id. */
interface RelistedPod {
  readonly id: string;
  name: string;
  namespace: string;
  readonly sandboxes: Map<string, api.PodSandbox>;
  readonly containers: Map<string, api.Container>;
}

interface PodRecord {
  /** The pod as last reported: events were sent for every change up to it. */
  old: RelistedPod | undefined;
  /** The pod as the relist under way saw it. */
  current: RelistedPod | undefined;
  /** The list `old` came from (a relist's or an inspection's), numbered in the order issued. */
  oldList: number;
}

/** Upstream's convertState: "created" is not used by the kubelet yet, so it reads as unknown. */
function containerState(s: api.ContainerState): PlegState {
  switch (s) {
    case api.ContainerState.CONTAINER_RUNNING:
      return "running";
    case api.ContainerState.CONTAINER_EXITED:
      return "exited";
    default:
      return "unknown";
  }
}

/** Sandboxes count as containers: ready is running, anything else exited (kuberuntime). */
function sandboxState(s: api.PodSandboxState): PlegState {
  return s === api.PodSandboxState.SANDBOX_READY ? "running" : "exited";
}

function stateIn(pod: RelistedPod | undefined, cid: string): PlegState {
  if (!pod) return "non-existent";
  const c = pod.containers.get(cid);
  if (c) return containerState(c.state);
  const s = pod.sandboxes.get(cid);
  if (s) return sandboxState(s.state);
  return "non-existent";
}

/** Upstream's generateEvents: the events for one container's state transition. */
export function generateEvents(
  podId: string,
  cid: string,
  oldState: PlegState,
  newState: PlegState,
): PodLifecycleEvent[] {
  if (oldState === newState) return [];
  const ev = (type: PodLifecycleEventType): PodLifecycleEvent => ({ id: podId, type, data: cid });
  switch (newState) {
    case "running":
      return [ev("ContainerStarted")];
    case "exited":
      return [ev("ContainerDied")];
    case "unknown":
      return [ev("ContainerChanged")];
    case "non-existent":
      // After "exited" the death was already reported.
      return oldState === "exited"
        ? [ev("ContainerRemoved")]
        : [ev("ContainerDied"), ev("ContainerRemoved")];
  }
}

/** The events of every container and sandbox of pod `podId` whose state changed from `old`. */
function podEvents(
  podId: string,
  old: RelistedPod | undefined,
  current: RelistedPod | undefined,
): PodLifecycleEvent[] {
  const cids = new Set<string>();
  for (const p of [old, current]) {
    if (!p) continue;
    for (const cid of p.containers.keys()) cids.add(cid);
    for (const cid of p.sandboxes.keys()) cids.add(cid);
  }
  return [...cids].flatMap((cid) =>
    generateEvents(podId, cid, stateIn(old, cid), stateIn(current, cid))
  );
}

/** The relisting PLEG; see the module documentation. */
export class GenericPLEG implements PodLifecycleEventGenerator {
  readonly #runtime: PlegRuntime;
  readonly #cache: PodCache;
  readonly #clock: Clock;
  readonly #log: Logger;
  #period: number;
  #threshold: number;
  readonly #capacity: number;
  readonly #concurrency: number;
  readonly #records = new Map<string, PodRecord>();
  /** Lists issued, relists' and inspections' alike; numbers them. */
  #lists = 0;
  /** Pods whose cache refresh failed; retried on the next relist, as upstream. */
  #toReinspect = new Map<string, RelistedPod | undefined>();
  #relistTime: number | undefined;
  #relisting: Promise<void> = Promise.resolve();
  readonly #queue: PodLifecycleEvent[] = [];
  readonly #consumers: ((e: PodLifecycleEvent) => void)[] = [];
  #dropped = 0;
  #folded = 0;
  /** Queued events that make the consumer sync their pod (all but ContainerRemoved), by pod. */
  readonly #queuedSyncs = new Map<string, number>();
  readonly #metrics: PlegMetrics | undefined;
  /** Container states the running-containers gauge has shown. */
  readonly #states = new Set<string>();
  /** Aborted by poke() to end the wait between relists. */
  #wake: AbortController | undefined;
  /** A poke came while relisting: the next wait is skipped. */
  #poked = false;

  constructor(opts: GenericPLEGOptions) {
    this.#runtime = opts.runtime;
    this.#cache = opts.cache;
    this.#clock = opts.clock ?? realClock;
    this.#log = opts.logger ?? createLogger();
    this.#period = positive("relistPeriodMs", opts.relistPeriodMs ?? 1000);
    this.#threshold = positive("relistThresholdMs", opts.relistThresholdMs ?? 180_000);
    this.#capacity = positive("capacity", opts.capacity ?? 1000);
    this.#concurrency = positive("concurrency", opts.concurrency ?? 8);
    this.#metrics = opts.metrics;
  }

  /** Events dropped because the queue was full. */
  get droppedEvents(): number {
    return this.#dropped;
  }

  /**
   * Events not queued because the queue was full but already held one for the same pod: the
   * consumer syncs a pod from the cache, whatever the event, so the earlier one stands for both.
   */
  get foldedEvents(): number {
    return this.#folded;
  }

  /** Events the queue holds before new ones are dropped. */
  get capacity(): number {
    return this.#capacity;
  }

  /** Events waiting for the consumer. */
  get pending(): number {
    return this.#queue.length;
  }

  /** The time between relists, and the age of the last relist healthy() accepts. */
  get relistPeriodMs(): number {
    return this.#period;
  }

  get relistThresholdMs(): number {
    return this.#threshold;
  }

  /**
   * Changes the relist period and the health threshold (upstream's Update), as the evented PLEG
   * does when the runtime's event stream comes and goes. A shorter period ends the wait under
   * way and relists at once; a longer one applies from the next wait.
   */
  setRelistPeriod(periodMs: number, thresholdMs: number): void {
    const shorter = periodMs < this.#period;
    this.#period = positive("relistPeriodMs", periodMs);
    this.#threshold = positive("relistThresholdMs", thresholdMs);
    if (shorter) this.poke();
  }

  /** Relists now, then every relistPeriodMs after the previous relist ends, until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      await this.relist(signal);
      if (this.#poked) {
        this.#poked = false;
        continue;
      }
      const wake = new AbortController();
      this.#wake = wake;
      try {
        using link = linkSignals(signal, wake.signal);
        await this.#clock.sleep(this.#period, link.signal);
      } catch {
        if (signal.aborted) return;
      } finally {
        this.#wake = undefined;
      }
    }
  }

  /**
   * Ends the wait before the next relist of {@link run}: the kubelet has just changed containers
   * and wants their new state seen now rather than up to a relist period later. A poke during
   * a relist is kept for the moment it ends, so a change is never left for the full period.
   */
  poke(): void {
    if (this.#wake) this.#wake.abort(WAIT_ENDED);
    else this.#poked = true;
  }

  /**
   * Reads pod `uid` alone (its sandboxes and containers by their pod UID label, then their
   * statuses) into the cache and sends the events of what changed since the pod was last
   * reported, as a relist of that one pod would. In a burst of pod starts a relist of every pod
   * takes seconds while the runtime is busy creating sandboxes, and each started pod waited for
   * one before its status turned Running. The pod's relist record moves on to what the
   * inspection saw, so the next relist neither reads the pod again nor sends the same events
   * (each would sync the pod once more). When a relist listed the pod after this inspection
   * did, that relist's record stands and reports the changes; the inspection then only sends a
   * ContainerStarted for the pod's newest running container, so the pod syncs with the status
   * it read.
   */
  async inspectPod(uid: string, opts: InspectPodOptions = {}): Promise<boolean> {
    // kubelet_pleg_pod_relist_duration_seconds: upstream's relistPod, failed or not.
    const start = this.#clock.now();
    try {
      return await this.#inspectPod(uid, opts);
    } finally {
      this.#metrics?.plegPodRelistDuration.observe((this.#clock.now() - start) / 1000);
    }
  }

  async #inspectPod(uid: string, opts: InspectPodOptions): Promise<boolean> {
    const { signal } = opts;
    const selector = { labelSelector: { [KUBERNETES_POD_UID_LABEL]: uid } };
    const list = ++this.#lists;
    let pod: RelistedPod | undefined;
    try {
      const [sandboxes, containers] = await Promise.all([
        this.#runtime.listPodSandbox(api.PodSandboxFilter.create(selector), signal),
        this.#runtime.listContainers(api.ContainerFilter.create(selector), signal),
      ]);
      pod = this.#group(sandboxes, containers).get(uid);
    } catch (e) {
      if (!signal?.aborted) {
        this.#log.v(4).info("PLEG: pod inspection failed", { podUID: uid, err: String(e) });
      }
      return false;
    }
    const stamp = Math.max(this.#clock.now(), (opts.after ?? -Infinity) + 1);
    if (!pod || !await this.#updateCache(pod, uid, (fn) => fn(), signal, stamp)) return false;
    const record = this.#records.get(uid);
    if (record && record.oldList > list) {
      const running = [...pod.containers.values()]
        .filter((c) => c.state === api.ContainerState.CONTAINER_RUNNING)
        .sort(newestFirst)[0];
      this.send({ id: uid, type: "ContainerStarted", data: running?.id ?? "" });
      return true;
    }
    const events = podEvents(uid, record?.old, pod);
    if (record) {
      record.old = pod;
      record.oldList = list;
    } else this.#records.set(uid, { old: pod, current: undefined, oldList: list });
    if (events.length === 0 && opts.sync) events.push({ id: uid, type: "PodSync", data: "" });
    this.#sendAll(events);
    return true;
  }

  /** Upstream's Healthy: false until a relist succeeds, and when the last one is too old. */
  healthy(): PlegHealth {
    if (this.#relistTime === undefined) {
      return { ok: false, message: "pleg has yet to be successful" };
    }
    this.#metrics?.plegLastSeen.set(Math.floor(this.#relistTime / 1000));
    const elapsed = this.#clock.now() - this.#relistTime;
    if (elapsed > this.#threshold) {
      return {
        ok: false,
        message: `pleg was last seen active ${formatDuration(elapsed)} ago; threshold is ${
          formatDuration(this.#threshold)
        }`,
      };
    }
    return { ok: true, message: "" };
  }

  /** UIDs of the pods the last relist saw in the runtime (for orphan cleanup). */
  podIds(): string[] {
    return [...this.#records.entries()].filter(([, r]) => r.current ?? r.old).map(([id]) => id);
  }

  /** The next event; rejects with the signal's reason when it aborts first. */
  next(signal?: AbortSignal): Promise<PodLifecycleEvent> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    const e = this.#queue.shift();
    if (e) {
      this.#unqueued(e);
      return Promise.resolve(e);
    }
    return new Promise((resolve, reject) => {
      const consumer = (ev: PodLifecycleEvent) => {
        signal?.removeEventListener("abort", onAbort);
        resolve(ev);
      };
      const onAbort = () => {
        const i = this.#consumers.indexOf(consumer);
        if (i >= 0) this.#consumers.splice(i, 1);
        reject(signal?.reason);
      };
      this.#consumers.push(consumer);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** The queued events, taken at once; none of their pods counts as queued any more. */
  takeQueued(): PodLifecycleEvent[] {
    this.#queuedSyncs.clear();
    return this.#queue.splice(0);
  }

  /** Every event, in order, until `signal` aborts. */
  async *watch(signal?: AbortSignal): AsyncGenerator<PodLifecycleEvent> {
    while (!signal?.aborted) {
      let e: PodLifecycleEvent;
      try {
        e = await this.next(signal);
      } catch (err) {
        if (signal?.aborted) return;
        throw err;
      }
      yield e;
    }
  }

  /** One relist; concurrent calls run one after another. Errors are logged, never thrown. */
  relist(signal?: AbortSignal): Promise<void> {
    const run = this.#relisting.then(() => this.#relist(signal));
    this.#relisting = run;
    return run;
  }

  async #relist(signal: AbortSignal | undefined): Promise<void> {
    this.#log.v(5).info("GenericPLEG: Relisting");
    const m = this.#metrics;
    const timestamp = this.#clock.now();
    if (m && this.#relistTime !== undefined) {
      m.plegRelistInterval.observe((timestamp - this.#relistTime) / 1000);
    }
    try {
      await this.#relistFrom(timestamp, signal);
    } finally {
      m?.plegRelistDuration.observe((this.#clock.now() - timestamp) / 1000);
    }
  }

  async #relistFrom(timestamp: number, signal: AbortSignal | undefined): Promise<void> {
    const list = ++this.#lists;
    let pods: Map<string, RelistedPod>;
    try {
      pods = await this.#getPods(signal);
    } catch (err) {
      if (!signal?.aborted) this.#log.error(err, "GenericPLEG: Unable to retrieve pods");
      return;
    }
    this.#relistTime = timestamp;
    if (this.#metrics) updateRunningMetrics(this.#metrics, pods.values(), this.#states);

    for (const r of this.#records.values()) r.current = undefined;
    for (const [id, pod] of pods) {
      const r = this.#records.get(id);
      if (r) r.current = pod;
      else this.#records.set(id, { old: undefined, current: pod, oldList: 0 });
    }

    const eventsByPod = new Map<string, PodLifecycleEvent[]>();
    for (const [id, r] of this.#records) {
      // An inspection listed the pod after this relist did: compared with it, this list is
      // behind (a pod started since would look removed). The next relist compares.
      if (r.oldList > list) continue;
      const events = podEvents(id, r.old, r.current);
      if (events.length > 0) eventsByPod.set(id, events);
    }

    // Refresh the cache of changed pods (and of pods that failed last time) before any event
    // goes out, so a worker woken by an event finds the new status.
    const slots = new Semaphore(this.#concurrency);
    const limit = <T>(fn: () => Promise<T>) => slots.run(fn);
    const reinspect = [...this.#toReinspect].filter(([id]) => !eventsByPod.has(id));
    const [changed, retried] = await Promise.all([
      Promise.all(
        [...eventsByPod.keys()].map((id) =>
          this.#updateCache(this.#records.get(id)?.current, id, limit, signal)
        ),
      ),
      Promise.all(reinspect.map(([id, pod]) => this.#updateCache(pod, id, limit, signal))),
    ]);
    const needsReinspection = new Map<string, RelistedPod | undefined>();
    reinspect.forEach(([id, pod], i) => {
      if (retried[i]) return;
      this.#log.v(5).info("PLEG: pod failed reinspection", { podUID: id });
      needsReinspection.set(id, pod);
    });

    [...eventsByPod].forEach(([id, events], i) => {
      const r = this.#records.get(id);
      if (!changed[i]) {
        // Keep the record as it was so the same change is seen again on the next relist.
        this.#log.v(4).info("PLEG: Ignoring events for pod", { podUID: id });
        needsReinspection.set(id, r?.current);
        return;
      }
      // An inspection meanwhile moved the record past this list; it stands.
      if (r && r.oldList <= list) {
        if (r.current) {
          r.old = r.current;
          r.oldList = list;
          r.current = undefined;
        } else this.#records.delete(id);
      }
      this.#sendAll(events);
    });

    this.#cache.updateTime(timestamp);
    this.#toReinspect = needsReinspection;
  }

  /** Sends a pod's events, but ContainerChanged, and logs container exits. */
  #sendAll(events: readonly PodLifecycleEvent[]): void {
    for (const e of events) {
      // Not reliable, and nothing consumes it yet.
      if (e.type === "ContainerChanged") continue;
      this.send(e);
      if (e.type === "ContainerDied") this.#logExit(e);
    }
  }

  /** Lists sandboxes and containers and groups them by the pod UID in their labels. */
  async #getPods(signal: AbortSignal | undefined): Promise<Map<string, RelistedPod>> {
    const [sandboxes, containers] = await Promise.all([
      this.#runtime.listPodSandbox(undefined, signal),
      this.#runtime.listContainers(undefined, signal),
    ]);
    return this.#group(sandboxes, containers);
  }

  /** Groups listed sandboxes and containers by the pod UID in their labels. */
  #group(
    sandboxes: readonly api.PodSandbox[],
    containers: readonly api.Container[],
  ): Map<string, RelistedPod> {
    const pods = new Map<string, RelistedPod>();
    const podOf = (uid: string, name: string, namespace: string): RelistedPod => {
      let p = pods.get(uid);
      if (!p) {
        p = { id: uid, name, namespace, sandboxes: new Map(), containers: new Map() };
        pods.set(uid, p);
      }
      if (p.name === "") p.name = name;
      if (p.namespace === "") p.namespace = namespace;
      return p;
    };
    for (const s of sandboxes) {
      const info = getPodSandboxInfoFromLabels(s.labels);
      const uid = info.podUid || s.metadata?.uid || "";
      // Without a pod UID it is not the kubelet's: nothing could sync it.
      if (uid === "") continue;
      podOf(uid, info.podName, info.podNamespace).sandboxes.set(s.id, s);
    }
    for (const c of containers) {
      const info = getContainerInfoFromLabels(c.labels);
      if (info.podUid === "") continue;
      podOf(info.podUid, info.podName, info.podNamespace).containers.set(c.id, c);
    }
    return pods;
  }

  /** Upstream's updateCache; resolves false when the status could not be read. */
  async #updateCache(
    pod: RelistedPod | undefined,
    uid: string,
    limit: <T>(fn: () => Promise<T>) => Promise<T>,
    signal: AbortSignal | undefined,
    timestamp = this.#clock.now(),
  ): Promise<boolean> {
    if (!pod) {
      this.#log.v(4).info("PLEG: Delete status for pod", { podUID: uid });
      this.#cache.delete(uid);
      return true;
    }
    try {
      const status = await this.#getPodStatus(pod, limit, signal);
      status.ips = this.#podIps(uid, status);
      // An inspection of the pod or a runtime event may have written a status read after this
      // one began: that one stands (upstream's rule with the evented PLEG).
      if (!this.#cache.setIfNewer(uid, status, undefined, timestamp)) {
        this.#log.v(4).info("PLEG: a newer status is cached, keeping it", { podUID: uid });
        return true;
      }
      this.#log.v(4).info("PLEG: Write status", { pod: `${pod.namespace}/${pod.name}` });
      return true;
    } catch (e) {
      const err = e instanceof Error ? e : new Error(String(e));
      this.#cache.setIfNewer(uid, { ...this.#cache.get(uid).status, timestamp }, err, timestamp);
      this.#log.v(4).info("PLEG: Write status", {
        pod: `${pod.namespace}/${pod.name}`,
        err: err.message,
      });
      return false;
    }
  }

  /** The pod's sandbox and container statuses; an id gone since the list is skipped (NotFound). */
  async #getPodStatus(
    pod: RelistedPod,
    limit: <T>(fn: () => Promise<T>) => Promise<T>,
    signal: AbortSignal | undefined,
  ): Promise<PodStatus> {
    const skipNotFound = <T>(p: Promise<T>): Promise<T | undefined> =>
      p.catch((e) => {
        if (isCriCode(e, GrpcCode.NOT_FOUND)) return undefined;
        throw e;
      });
    const sandboxIds = [...pod.sandboxes.values()].sort(newestFirst).map((s) => s.id);
    const containerIds = [...pod.containers.keys()];
    const [sandboxes, containers] = await Promise.all([
      Promise.all(
        sandboxIds.map((id) =>
          limit(() => skipNotFound(this.#runtime.podSandboxStatus(id, false, signal)))
        ),
      ),
      Promise.all(
        containerIds.map((id) =>
          limit(() => skipNotFound(this.#runtime.containerStatus(id, false, signal)))
        ),
      ),
    ]);
    const sandboxStatuses = sandboxes.flatMap((r) => r?.status ? [r.status] : []);
    const containerStatuses = containers.flatMap((r) => r?.status ? [r.status] : [])
      .sort(newestFirst);
    // Only the newest sandbox gives the pod IPs, and only while it is ready (kuberuntime).
    const latest = sandboxStatuses[0];
    const ips = latest?.state === api.PodSandboxState.SANDBOX_READY && latest.network
      ? [latest.network.ip, ...latest.network.additionalIps.map((p) => p.ip)].filter((ip) => ip)
      : [];
    return {
      id: pod.id,
      name: pod.name,
      namespace: pod.namespace,
      ips,
      sandboxStatuses,
      containerStatuses,
      timestamp: this.#clock.now(),
    };
  }

  /** Upstream's getPodIPs: a torn-down pod keeps the IPs it had, as the API expects. */
  #podIps(uid: string, status: PodStatus): string[] {
    if (status.ips.length > 0) return status.ips;
    const old = this.#cache.get(uid);
    if (old.error || old.status.ips.length === 0) return [];
    if (status.sandboxStatuses.some((s) => s.state === api.PodSandboxState.SANDBOX_READY)) {
      return status.ips;
    }
    return old.status.ips;
  }

  /**
   * Hands an event to the consumer, or queues it. When the queue is full, room is made by folding
   * a queued event the consumer does not need (a ContainerRemoved, which it ignores, or a second
   * one of a pod it will sync anyway: it syncs a pod from the cache, whatever the event), and an
   * event of a pod that already has one queued is folded itself; only when nothing folds is the
   * event dropped (counted and logged), as upstream's full channel does. Folding is what keeps a
   * burst of 1000 new pods (two events each) from losing pods until their next resync. The
   * evented PLEG sends through here, so the sync loop reads one stream.
   */
  send(e: PodLifecycleEvent): void {
    const consumer = this.#consumers.shift();
    if (consumer) return consumer(e);
    if (this.#queue.length >= this.#capacity) {
      if (e.type === "ContainerRemoved" || this.#queuedSyncs.has(e.id)) {
        this.#folded++;
        return;
      }
      if (this.#foldOne()) this.#folded++;
    }
    if (this.#queue.length < this.#capacity) {
      this.#queue.push(e);
      if (e.type !== "ContainerRemoved") {
        this.#queuedSyncs.set(e.id, (this.#queuedSyncs.get(e.id) ?? 0) + 1);
      }
      return;
    }
    this.#dropped++;
    this.#metrics?.plegDiscardEvents.inc();
    this.#log.error(undefined, "Event channel is full, discard this relist() cycle event", {
      podUID: e.id,
      event: e.type,
      containerID: e.data,
      droppedEvents: this.#dropped,
    });
  }

  /** Removes the newest queued event the consumer does not need; false when there is none. */
  #foldOne(): boolean {
    for (let i = this.#queue.length - 1; i >= 0; i--) {
      const q = this.#queue[i]!;
      if (q.type === "ContainerRemoved" || (this.#queuedSyncs.get(q.id) ?? 0) > 1) {
        this.#queue.splice(i, 1);
        this.#unqueued(q);
        return true;
      }
    }
    return false;
  }

  #unqueued(e: PodLifecycleEvent): void {
    if (e.type === "ContainerRemoved") return;
    const n = this.#queuedSyncs.get(e.id) ?? 0;
    if (n <= 1) this.#queuedSyncs.delete(e.id);
    else this.#queuedSyncs.set(e.id, n - 1);
  }

  #logExit(e: PodLifecycleEvent): void {
    const log = this.#log.v(2);
    if (!log.enabled) return;
    const c = this.#cache.get(e.id).status.containerStatuses.find((s) => s.id === e.data);
    if (c) {
      log.info("Generic (PLEG): container finished", {
        podID: e.id,
        containerID: e.data,
        exitCode: c.exitCode,
      });
    }
  }
}

function newestFirst(a: { createdAt: bigint }, b: { createdAt: bigint }): number {
  return a.createdAt > b.createdAt ? -1 : a.createdAt < b.createdAt ? 1 : 0;
}

function positive(field: string, value: number): number {
  if (!Number.isFinite(value) || value <= 0) {
    throw new RangeError(
      `Cannot create GenericPLEG: '${field}' must be a positive number: current value is '${value}'`,
    );
  }
  return value;
}
