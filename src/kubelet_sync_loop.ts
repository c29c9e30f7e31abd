/**
 * @module
 * The sync loop: the one loop that consumes every event source of the pod lifecycle and hands
 * the work to a {@link SyncHandler}: pod config updates (ADD, UPDATE, DELETE, REMOVE,
 * RECONCILE), PLEG events, probe result changes, changes of the health of pods' devices (the
 * container manager's updates), the sync tick (every second, pods whose resync time came) and the
 * housekeeping tick (every two seconds, cleanups once every source has been seen). While the
 * runtime reports errors it waits, backing off from 100 ms to 5 s. It records when it last
 * entered an iteration, for /healthz. Nothing here blocks on a pod: the handler dispatches to
 * per-pod workers. Unlike upstream's, the loop does not wait for housekeeping: the pods and
 * cgroups of deleted pods take a second or more to remove while containerd starts a burst (each
 * cgroup rmdir waits for the kernel's cgroup_mutex), and new pods would wait that long to be
 * admitted. One housekeeping runs at a time (a tick while one runs is skipped), and one that
 * runs longer than the health threshold makes the loop unhealthy, as a blocked loop would.
 * Corresponds to upstream `pkg/kubelet/kubelet.go` (syncLoop, syncLoopIteration,
 * SyncLoopHealthCheck).
 */

import type { V1Pod } from "@kubernetes/client-node";
import { type Clock, WAIT_ENDED } from "./util/clock.ts";
import { formatDuration } from "./util/duration.ts";
import type { Logger } from "./klog/klog.ts";
import type { PodLifecycleEvent, PodLifecycleEventGenerator } from "./pleg/generic.ts";
import type { PodUpdate } from "./config/pod_config.ts";
import { linkSignals } from "./util/linked_signal.ts";

/** What the loop dispatches to (upstream SyncHandler, plus the PLEG and tick steps). */
export interface SyncHandler {
  /** A promise when admission waits for something (device allocation): the loop waits too. */
  handlePodAdditions(pods: readonly V1Pod[]): void | Promise<void>;
  handlePodUpdates(pods: readonly V1Pod[]): void;
  handlePodRemoves(pods: readonly V1Pod[]): void;
  handlePodReconcile(pods: readonly V1Pod[]): void;
  handlePodSyncs(pods: readonly V1Pod[]): void;
  /**
   * PLEG events that came together (a relist's batch): syncs each pod they are about once, if
   * the kubelet still has it.
   */
  handlePlegEvents(events: readonly PodLifecycleEvent[]): void;
  /** A probe result changed for the pod (upstream's liveness/readiness/startup channels). */
  handleProbeUpdate(podUID: string): void;
  /**
   * The health of devices the pods hold changed (upstream's ContainerManager.Updates channel):
   * syncs those the kubelet still has, so that their status is made again.
   * @default each pod as a probe update (both sync the pod by UID)
   */
  handleResourceUpdate?(podUIDs: readonly string[]): void;
  /** The pods whose resync time has come (upstream getPodsToSync). */
  podsToSync(): V1Pod[];
  /** Housekeeping (upstream HandlePodCleanups); errors are logged by the loop. */
  handlePodCleanups(signal: AbortSignal): Promise<void>;
}

/** What {@link SyncLoop} needs. */
export interface SyncLoopOptions {
  readonly handler: SyncHandler;
  /** The PLEG's event stream. */
  readonly pleg: Pick<PodLifecycleEventGenerator, "next" | "takeQueued">;
  /** The runtime's current errors, undefined when it is healthy (upstream runtimeState.runtimeErrors). */
  readonly runtimeErrors: () => string | undefined;
  /** Every pod source has sent its first set (upstream sourcesReady.AllReady). */
  readonly sourcesReady: () => boolean;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Time between sync ticks. @default 1000 */
  readonly syncPeriodMs?: number;
  /** Time between housekeeping runs. @default 2000 */
  readonly housekeepingPeriodMs?: number;
  /** `syncFrequency`: the loop is unhealthy after twice this (at least 5 min) in one iteration. @default 60000 */
  readonly resyncIntervalMs?: number;
}

/** Upstream's housekeepingWarningDuration. */
const HOUSEKEEPING_WARNING_MS = 1_000;
const BACKOFF_MIN_MS = 100;
const BACKOFF_MAX_MS = 5_000;
/** PLEG events kept per pod while syncs are skipped (the latest). */
const HELD_PLEG_PER_POD = 16;

type Wake =
  | { readonly kind: "config" }
  | { readonly kind: "pleg"; readonly event: PodLifecycleEvent }
  | { readonly kind: "tick" };

/** The kubelet's sync loop; see the module documentation. */
export class SyncLoop {
  readonly #opts: SyncLoopOptions;
  readonly #syncMs: number;
  readonly #housekeepingMs: number;
  readonly #healthMs: number;
  readonly #updates: PodUpdate[] = [];
  /** The sources an update of which the loop has handled (upstream sourcesReady.AddSource). */
  readonly #handledSources = new Set<string>();
  /** Pods whose probe results changed, in order, each once. */
  readonly #probed = new Set<string>();
  /** Pods whose devices' health changed, in order, each once. */
  readonly #resourceUpdated = new Set<string>();
  /**
   * Ends the loop's current wait, if it waits. Each wait races only promises of its own (and the
   * tick's, which fires within a period): a promise kept across waits, raced at each, would keep
   * a reaction of every race until it settled (one a second or more while no PLEG event comes).
   */
  #wake: (() => void) | undefined;
  /** The PLEG's next event, once it came, until the loop takes it. */
  #plegEvent: PodLifecycleEvent | undefined;
  /** Whether a wait for the PLEG's next event is under way (it outlives the loop's waits). */
  #plegWaiting = false;
  /** PLEG events taken while syncs were skipped, by pod: {@link SyncLoop.#holdPleg}. */
  readonly #heldPleg = new Map<string, PodLifecycleEvent[]>();
  /**
   * The timer of the next sync or housekeeping tick, kept across wakes until it fires or the
   * due time changes: a burst wakes the loop hundreds of times a second, each of which made a
   * timer, an AbortController and a combined signal of its own.
   */
  #tick:
    | { readonly due: number; readonly wake: Promise<Wake>; readonly stop: AbortController }
    | undefined;
  /** When the loop last entered an iteration; 0 before the first. */
  #loopTime = 0;
  /** The housekeeping under way, and when it began. */
  #housekeepingRun: { readonly done: Promise<void>; readonly at: number } | undefined;
  #iterations = 0;

  constructor(opts: SyncLoopOptions) {
    this.#opts = opts;
    this.#syncMs = opts.syncPeriodMs ?? 1_000;
    this.#housekeepingMs = opts.housekeepingPeriodMs ?? 2_000;
    this.#healthMs = Math.max(2 * (opts.resyncIntervalMs ?? 60_000), 5 * 60_000);
  }

  /** Queues a probe result change of a pod (upstream's prober channels); never blocks. */
  pushProbeUpdate(podUID: string): void {
    this.#probed.add(podUID);
    this.#wake?.();
  }

  /**
   * Queues pods whose devices' health changed (upstream's container manager channel); never
   * blocks. A pod queued twice before the loop takes them is synced once.
   */
  pushResourceHealthUpdate(podUIDs: Iterable<string>): void {
    for (const uid of podUIDs) this.#resourceUpdated.add(uid);
    if (this.#resourceUpdated.size > 0) this.#wake?.();
  }

  /** Queues a pod config update for the loop (upstream's config channel); never blocks. */
  push(update: PodUpdate): void {
    this.#updates.push(update);
    this.#wake?.();
  }

  /** Iterations entered so far. */
  get iterations(): number {
    return this.#iterations;
  }

  /** Undefined while healthy, else why not (upstream SyncLoopHealthCheck). */
  healthCheck(): string | undefined {
    const now = this.#opts.clock.now();
    const run = this.#housekeepingRun;
    if (this.#loopTime !== 0 && now > this.#loopTime + this.#healthMs) {
      return "sync Loop took longer than expected";
    }
    if (run !== undefined && now > run.at + this.#healthMs) {
      return "sync Loop housekeeping took longer than expected";
    }
    return undefined;
  }

  /** Runs until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    const { clock, logger } = this.#opts;
    logger.info("Starting kubelet main sync loop");
    let backoff = BACKOFF_MIN_MS;
    let nextSync = clock.now() + this.#syncMs;
    let nextHousekeeping = clock.now() + this.#housekeepingMs;
    while (!signal.aborted) {
      const errors = this.#opts.runtimeErrors();
      if (errors !== undefined) {
        logger.error(null, "Skipping pod synchronization", { err: errors });
        // The PLEG's events wait here meanwhile, not in its queue: a full queue makes the PLEG
        // unhealthy, which keeps the loop skipping, and nothing would drain it (upstream's
        // evented PLEG can stay unhealthy so). They go to the handler once the runtime is back.
        this.#holdPleg(this.#opts.pleg.takeQueued());
        await clock.sleep(backoff, signal).catch(() => {});
        backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
        continue;
      }
      backoff = BACKOFF_MIN_MS;
      this.#loopTime = clock.now();
      this.#iterations++;
      const due = Math.min(nextSync, nextHousekeeping);
      const wake = await this.#next(due, signal);
      if (wake === undefined) break;
      try {
        const held = this.#takeHeldPleg();
        if (wake.kind === "pleg" || held.length > 0) {
          // The rest of the batch comes along: a pod it names twice is synced once.
          this.#opts.handler.handlePlegEvents([
            ...held,
            ...(wake.kind === "pleg" ? [wake.event] : []),
            ...this.#opts.pleg.takeQueued(),
          ]);
        }
        const drained = this.#drainConfig();
        if (drained) await drained;
        for (const uid of this.#probed) {
          this.#probed.delete(uid);
          this.#opts.handler.handleProbeUpdate(uid);
        }
        if (this.#resourceUpdated.size > 0) this.#handleResourceUpdates();
        const now = clock.now();
        if (now >= nextSync) {
          nextSync = now + this.#syncMs;
          const pods = this.#opts.handler.podsToSync();
          if (pods.length > 0) {
            logger.v(4).info("SyncLoop (SYNC) pods", { pods: pods.length });
            this.#opts.handler.handlePodSyncs(pods);
          }
        }
        if (now >= nextHousekeeping) {
          nextHousekeeping = now + this.#housekeepingMs;
          this.#startHousekeeping(signal);
        }
      } catch (e) {
        // A handler bug must not stop the loop that every pod depends on.
        if (!signal.aborted) logger.error(e, "Sync loop iteration failed");
      }
    }
    this.#loopTime = 0;
    this.#tick?.stop.abort(WAIT_ENDED);
    this.#tick = undefined;
    await this.#housekeepingRun?.done;
  }

  #handleResourceUpdates(): void {
    const { handler, logger } = this.#opts;
    const uids = [...this.#resourceUpdated];
    this.#resourceUpdated.clear();
    logger.v(3).info("SyncLoop (containermanager): event for pods", { podUIDs: uids });
    if (handler.handleResourceUpdate) handler.handleResourceUpdate(uids);
    else for (const uid of uids) handler.handleProbeUpdate(uid);
  }

  /** Starts a housekeeping beside the loop, unless one still runs. */
  #startHousekeeping(signal: AbortSignal): void {
    if (this.#housekeepingRun !== undefined) {
      this.#opts.logger.v(4).info("SyncLoop (housekeeping, skipped): the last one still runs");
      return;
    }
    const done = this.#housekeeping(signal).finally(() => (this.#housekeepingRun = undefined));
    this.#housekeepingRun = { done, at: this.#opts.clock.now() };
  }

  /**
   * Whether the loop has handled an update of every one of `sources`: upstream's
   * sourcesReady.AllReady as the device manager reads it, false while the first pods of a
   * source are being admitted (a restarted kubelet's running containers keep their devices
   * then, before their plugins are back).
   */
  handledAllSources(sources: readonly string[]): boolean {
    return sources.every((s) => this.#handledSources.has(s));
  }

  /** Dispatches the queued config updates; a promise while an admission is waited for. */
  #drainConfig(): void | Promise<void> {
    const { handler, logger } = this.#opts;
    for (let u = this.#updates.shift(); u !== undefined; u = this.#updates.shift()) {
      const pods = u.pods.map((p) => `${p.metadata?.namespace}/${p.metadata?.name}`);
      logger.v(2).info(`SyncLoop ${u.op}`, { source: u.source, pods });
      switch (u.op) {
        case "ADD": {
          const admitting = handler.handlePodAdditions(u.pods);
          if (admitting) {
            const source = u.source;
            return admitting.then(() => {
              this.#handledSources.add(source);
              return this.#drainConfig();
            });
          }
          break;
        }
        case "UPDATE":
          handler.handlePodUpdates(u.pods);
          break;
        case "REMOVE":
          handler.handlePodRemoves(u.pods);
          break;
        case "RECONCILE":
          handler.handlePodReconcile(u.pods);
          break;
        case "DELETE":
          // Graceful deletion is an update as far as the workers are concerned (upstream).
          handler.handlePodUpdates(u.pods);
          break;
        case "SET":
          logger.error(null, "Kubelet does not support snapshot update");
          break;
      }
      this.#handledSources.add(u.source);
    }
  }

  async #housekeeping(signal: AbortSignal): Promise<void> {
    const { clock, logger, handler } = this.#opts;
    if (!this.#opts.sourcesReady()) {
      logger.v(4).info("SyncLoop (housekeeping, skipped): sources aren't ready yet");
      return;
    }
    const start = clock.now();
    logger.v(4).info("SyncLoop (housekeeping)");
    try {
      await handler.handlePodCleanups(signal);
    } catch (e) {
      if (!signal.aborted) logger.error(e, "Failed cleaning pods");
    }
    const took = clock.now() - start;
    if (took > HOUSEKEEPING_WARNING_MS) {
      logger.error(null, "Housekeeping took longer than expected", {
        expected: formatDuration(HOUSEKEEPING_WARNING_MS),
        actual: formatDuration(took),
      });
    }
  }

  /**
   * Keeps PLEG events taken while syncs are skipped, at most {@link HELD_PLEG_PER_POD} (the
   * latest) per pod: the handler syncs each pod once per batch, so the count bounds memory only.
   */
  #holdPleg(events: readonly PodLifecycleEvent[]): void {
    // The event the loop's own wait took came first.
    const first = this.#takePlegEvent();
    for (const e of first?.kind === "pleg" ? [first.event, ...events] : events) {
      const list = this.#heldPleg.get(e.id) ?? [];
      list.push(e);
      if (list.length > HELD_PLEG_PER_POD) list.shift();
      this.#heldPleg.set(e.id, list);
    }
  }

  #takeHeldPleg(): PodLifecycleEvent[] {
    if (this.#heldPleg.size === 0) return [];
    const out = [...this.#heldPleg.values()].flat();
    this.#heldPleg.clear();
    return out;
  }

  /** Waits for a config update, a PLEG event or `due`; undefined once `signal` aborts. */
  async #next(due: number, signal: AbortSignal): Promise<Wake | undefined> {
    if (signal.aborted) return undefined;
    if (this.#pending() || this.#heldPleg.size > 0) {
      return this.#takePlegEvent() ?? { kind: "config" };
    }
    this.#watchPleg(signal);
    let wake: Wake | undefined = this.#takePlegEvent();
    if (wake) return wake;
    const woken = new Promise<Wake>((resolve) => {
      this.#wake = () => resolve({ kind: "config" });
    });
    const onAbort = () => this.#wake?.();
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      wake = await Promise.race([woken, this.#tickAt(due, signal)]);
    } catch {
      return undefined;
    } finally {
      signal.removeEventListener("abort", onAbort);
      this.#wake = undefined;
    }
    if (signal.aborted) return undefined;
    if (wake.kind === "tick") this.#tick = undefined;
    return this.#takePlegEvent() ?? wake;
  }

  /**
   * Waits for the PLEG's next event unless a wait is under way: the event is kept for the loop
   * and wakes it. The wait is not aborted with the loop's: that could lose an event in flight.
   */
  #watchPleg(signal: AbortSignal): void {
    if (this.#plegWaiting || this.#plegEvent) return;
    this.#plegWaiting = true;
    this.#opts.pleg.next(signal).then((event) => {
      this.#plegWaiting = false;
      this.#plegEvent = event;
      this.#wake?.();
    }, () => {
      this.#plegWaiting = false;
    });
  }

  #takePlegEvent(): Wake | undefined {
    const event = this.#plegEvent;
    if (!event) return undefined;
    this.#plegEvent = undefined;
    return { kind: "pleg", event };
  }

  /** Whether config updates, probe or resource updates wait. */
  #pending(): boolean {
    return this.#updates.length > 0 || this.#probed.size > 0 || this.#resourceUpdated.size > 0;
  }

  /** The tick at `due`: the pending one when it is for that time, else a new timer. */
  #tickAt(due: number, signal: AbortSignal): Promise<Wake> {
    if (this.#tick?.due === due) return this.#tick.wake;
    this.#tick?.stop.abort(WAIT_ENDED);
    const stop = new AbortController();
    // Linked, not AbortSignal.any: one of those per tick stays reachable from the loop's signal.
    const link = linkSignals(signal, stop.signal);
    const wake = this.#opts.clock.sleep(Math.max(0, due - this.#opts.clock.now()), link.signal)
      .finally(() => link[Symbol.dispose]())
      .then((): Wake => ({ kind: "tick" }));
    wake.catch(() => {});
    this.#tick = { due, wake, stop };
    return wake;
  }
}
