/**
 * @module
 * Graceful node shutdown, as upstream's `pkg/kubelet/nodeshutdown`: with shutdownGracePeriod
 * (or shutdownGracePeriodByPodPriority) set, the kubelet holds a systemd-logind "delay"
 * inhibitor lock; when logind announces PrepareForShutdown(true) (or the kubelet gets SIGUSR1),
 * the node turns NotReady ("node is shutting down"), new pods are rejected (NodeShutdown), and
 * the running pods are killed group by group, lowest priority first, each group within its
 * period, with phase Failed, reason Terminated and upstream's message; then the lock is
 * released so the shutdown goes on. PrepareForShutdown(false) (a cancelled shutdown) takes the
 * lock again and the node turns Ready. Start and end times go to
 * `<root dir>/graceful_node_shutdown_state` as upstream writes them.
 *
 * The D-Bus side is behind {@link Logind} (`logind.ts` talks to the real one).
 * Where there is no system bus or no logind, starting fails with one error line and the
 * kubelet goes on without it, as upstream's does.
 */

import type { V1Pod, V1PodCondition } from "@kubernetes/client-node";
import { type Clock, realClock } from "../util/clock.ts";
import type { EventRecorder, ObjectRef } from "../client/record.ts";
import type { Logger } from "../klog/klog.ts";
import type { PodAdmitHandler, PodStatusOverride } from "../kubelet_pod_sync.ts";

/** Status reason of a pod killed for a node shutdown. */
export const NODE_SHUTDOWN_REASON = "Terminated";
/** Status message of a pod killed for a node shutdown. */
export const NODE_SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown.";
/** Admission reason while the node shuts down. */
export const NODE_SHUTDOWN_NOT_ADMITTED_REASON = "NodeShutdown";
/** Admission message while the node shuts down. */
export const NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE = "Pod was rejected as the node is shutting down.";
/** The file in the root directory with the last shutdown's start and end. */
export const LOCAL_STORAGE_STATE_FILE = "graceful_node_shutdown_state";
/** What {@link NodeShutdownManager.shutdownStatus} says while the node shuts down. */
export const NODE_SHUTTING_DOWN = "node is shutting down";
/** scheduling.DefaultPriorityWhenNoDefaultClassExists and SystemCriticalPriority. */
export const DEFAULT_PRIORITY = 0;
export const SYSTEM_CRITICAL_PRIORITY = 2_000_000_000;
/** Time between attempts to watch logind again after the bus went away. */
export const DBUS_RECONNECT_PERIOD_MS = 1_000;

/** One shutdownGracePeriodByPodPriority entry. */
export interface ShutdownGroup {
  readonly priority: number;
  readonly shutdownGracePeriodSeconds: number;
}

/**
 * The groups from shutdownGracePeriod and shutdownGracePeriodCriticalPods (upstream
 * migrateConfig): regular pods get the difference, critical pods the critical period.
 * Empty when shutdownGracePeriod is 0 or shorter than the critical period.
 */
export function migrateConfig(gracePeriodMs: number, criticalPodsMs: number): ShutdownGroup[] {
  if (gracePeriodMs === 0) return [];
  const regular = gracePeriodMs - criticalPodsMs;
  if (regular < 0) return [];
  return [
    { priority: DEFAULT_PRIORITY, shutdownGracePeriodSeconds: Math.floor(regular / 1000) },
    {
      priority: SYSTEM_CRITICAL_PRIORITY,
      shutdownGracePeriodSeconds: Math.floor(criticalPodsMs / 1000),
    },
  ];
}

/**
 * The groups to use (shutdownGracePeriodByPodPriority when given, else the migrated pair),
 * sorted from low to high priority; empty means the feature is off.
 */
export function shutdownGroups(config: {
  readonly shutdownGracePeriod?: number;
  readonly shutdownGracePeriodCriticalPods?: number;
  readonly shutdownGracePeriodByPodPriority?: readonly {
    readonly priority?: number;
    readonly shutdownGracePeriodSeconds?: number;
  }[];
}): ShutdownGroup[] {
  const byPriority = config.shutdownGracePeriodByPodPriority ?? [];
  const groups = byPriority.length > 0
    ? byPriority.map((g) => ({
      priority: g.priority ?? 0,
      shutdownGracePeriodSeconds: g.shutdownGracePeriodSeconds ?? 0,
    }))
    : migrateConfig(config.shutdownGracePeriod ?? 0, config.shutdownGracePeriodCriticalPods ?? 0);
  return groups.sort((a, b) => a.priority - b.priority);
}

/**
 * Pods by group (upstream groupByPriority): a pod goes to the highest group whose priority is
 * at most its own; pods below the lowest group go to it, above the highest to that one.
 */
export function groupByPriority(
  groups: readonly ShutdownGroup[],
  pods: readonly V1Pod[],
): { group: ShutdownGroup; pods: V1Pod[] }[] {
  const out = groups.map((group) => ({ group, pods: [] as V1Pod[] }));
  if (out.length === 0) return out;
  for (const pod of pods) {
    const priority = pod.spec?.priority ?? 0;
    let index = out.findIndex((g) => g.group.priority >= priority);
    if (index === -1) index = out.length - 1;
    else if (index > 0 && out[index]!.group.priority > priority) index--;
    out[index]!.pods.push(pod);
  }
  return out;
}

/** A held logind inhibitor lock. */
export interface InhibitLock {
  /** Lets the shutdown go on. Idempotent. */
  release(): Promise<void>;
}

/** What the manager needs from systemd-logind (upstream dbusInhibiter). */
export interface Logind {
  /** InhibitDelayMaxUSec, in ms. */
  currentInhibitDelayMs(signal?: AbortSignal): Promise<number>;
  /** Writes the logind.conf drop-in that raises InhibitDelayMaxSec to `ms`. */
  overrideInhibitDelay(ms: number): Promise<void>;
  /** Makes logind re-read its configuration. */
  reloadLogindConf(signal?: AbortSignal): Promise<void>;
  /** Takes a delay lock on shutdown. */
  inhibitShutdown(signal?: AbortSignal): Promise<InhibitLock>;
  /**
   * Calls `onEvent` with each PrepareForShutdown value; resolves once it watches, and the
   * returned promise `ended` resolves when the watch ends (the bus went away).
   */
  monitorShutdown(
    onEvent: (shuttingDown: boolean) => void,
    signal?: AbortSignal,
  ): Promise<{ ended: Promise<void> }>;
  close(): void;
}

/** Options of {@link NodeShutdownManager}. */
export interface NodeShutdownManagerOptions {
  readonly groups: readonly ShutdownGroup[];
  /** Connects to logind (fails where there is no system bus or no logind). */
  readonly connect: (signal?: AbortSignal) => Promise<Logind>;
  readonly activePods: () => V1Pod[];
  /** Kills a pod with a grace period and the status it ends with; resolves once it stopped. */
  readonly killPod: (
    pod: V1Pod,
    gracePeriodSeconds: number,
    status: PodStatusOverride,
  ) => Promise<void>;
  /** Makes the node status update now (the Ready condition changed). */
  readonly syncNodeStatus: () => void;
  /** `<root dir>/graceful_node_shutdown_state`. */
  readonly stateFile: string;
  readonly recorder: EventRecorder;
  readonly nodeRef: ObjectRef;
  readonly logger: Logger;
  /** @default realClock */
  readonly clock?: Clock;
  /** kubelet_graceful_shutdown_start/end_time_seconds. @default none */
  readonly metrics?: {
    readonly start: { set(v: number): void };
    readonly end: { set(v: number): void };
  };
}

/** Upstream's node shutdown managerImpl. */
export class NodeShutdownManager {
  readonly #o: NodeShutdownManagerOptions;
  readonly #clock: Clock;
  #shuttingDown = false;
  #logind: Logind | undefined;
  #lock: InhibitLock | undefined;
  #processing: Promise<void> = Promise.resolve();

  constructor(opts: NodeShutdownManagerOptions) {
    this.#o = opts;
    this.#clock = opts.clock ?? realClock;
  }

  /** The sum of the groups' periods: how long logind must let the kubelet delay a shutdown. */
  periodRequestedMs(): number {
    return this.#o.groups.reduce((s, g) => s + g.shutdownGracePeriodSeconds, 0) * 1000;
  }

  /** Undefined, or "node is shutting down" while it does (a node Ready error). */
  shutdownStatus(): string | undefined {
    return this.#shuttingDown ? NODE_SHUTTING_DOWN : undefined;
  }

  /** Refuses every pod while the node shuts down. */
  readonly admit: PodAdmitHandler = () =>
    this.#shuttingDown
      ? {
        admit: false,
        reason: NODE_SHUTDOWN_NOT_ADMITTED_REASON,
        message: NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE,
      }
      : { admit: true };

  /**
   * Starts watching (upstream Start): throws when the first start fails, which the kubelet
   * logs once and goes on without; after that, re-watches every second while the bus is gone,
   * until `signal` aborts.
   */
  async start(signal: AbortSignal): Promise<{ done: Promise<void> }> {
    let { ended } = await this.#start(signal);
    await this.#loadMetrics();
    // Stopping the kubelet ends the watch (and with it the wait for the bus to go away).
    signal.addEventListener("abort", () => this.#logind?.close(), { once: true });
    const done = (async () => {
      while (!signal.aborted) {
        await ended;
        if (signal.aborted) break;
        try {
          await this.#clock.sleep(DBUS_RECONNECT_PERIOD_MS, signal);
        } catch {
          break;
        }
        this.#o.logger.v(1).info("Restarting watch for node shutdown events");
        try {
          ({ ended } = await this.#start(signal));
        } catch (e) {
          this.#o.logger.error(e, "Unable to watch the node for shutdown events");
          ended = Promise.resolve();
        }
      }
      await this.#processing;
      this.#logind?.close();
    })();
    return { done };
  }

  async #start(signal: AbortSignal): Promise<{ ended: Promise<void> }> {
    this.#logind?.close();
    const logind = await this.#o.connect(signal);
    this.#logind = logind;
    try {
      const current = await logind.currentInhibitDelayMs(signal);
      const requested = this.periodRequestedMs();
      if (requested > current) {
        try {
          await logind.overrideInhibitDelay(requested);
        } catch (e) {
          throw new Error(
            `unable to override inhibit delay by shutdown manager: ${(e as Error).message}`,
            { cause: e },
          );
        }
        await logind.reloadLogindConf(signal);
        const updated = await logind.currentInhibitDelayMs(signal);
        if (requested > updated) {
          throw new Error(
            `node shutdown manager was unable to update logind InhibitDelayMaxSec to ` +
              `${goSeconds(requested)} (ShutdownGracePeriod), current value of ` +
              `InhibitDelayMaxSec (${
                goSeconds(updated)
              }) is less than requested ShutdownGracePeriod`,
          );
        }
      }
      await this.#acquireLock(signal);
      return await logind.monitorShutdown((down) => this.onShutdownEvent(down), signal);
    } catch (e) {
      await this.#lock?.release();
      this.#lock = undefined;
      logind.close();
      throw e;
    }
  }

  async #acquireLock(signal?: AbortSignal): Promise<void> {
    const lock = await this.#logind!.inhibitShutdown(signal);
    const old = this.#lock;
    this.#lock = lock;
    await old?.release();
  }

  /** A PrepareForShutdown value (or SIGUSR1 as `true`). */
  onShutdownEvent(shuttingDown: boolean): void {
    const kind = shuttingDown ? "shutdown" : "cancelled";
    this.#o.logger.v(1).info("Shutdown manager detected new shutdown event", { event: kind });
    this.#o.recorder.event(
      this.#o.nodeRef,
      "Normal",
      "NodeShutdown",
      shuttingDown
        ? "Shutdown manager detected shutdown event"
        : "Shutdown manager detected shutdown cancellation",
    );
    this.#shuttingDown = shuttingDown;
    this.#processing = this.#processing.then(async () => {
      if (shuttingDown) {
        this.#o.syncNodeStatus();
        await this.processShutdownEvent();
      } else {
        this.#o.syncNodeStatus();
        await this.#acquireLock().catch((e) =>
          this.#o.logger.error(
            e,
            "Failed to take the inhibitor lock again after a cancelled shutdown",
          )
        );
      }
    });
  }

  /** Waits for shutdown processing under way (for tests and the kubelet's own shutdown). */
  idle(): Promise<void> {
    return this.#processing;
  }

  /** Kills the pods group by group, then releases the lock (upstream processShutdownEvent). */
  async processShutdownEvent(): Promise<void> {
    const { logger } = this.#o;
    logger.v(1).info("Shutdown manager processing shutdown event");
    const startTime = new Date(this.#clock.now());
    await this.#store(startTime, undefined);
    this.#o.metrics?.start.set(Math.floor(startTime.getTime() / 1000));
    this.#o.metrics?.end.set(0);
    try {
      for (const { group, pods } of groupByPriority(this.#o.groups, this.#o.activePods())) {
        if (pods.length === 0) continue;
        await this.#killGroup(group, pods);
      }
    } finally {
      const endTime = new Date(this.#clock.now());
      await this.#store(startTime, endTime);
      // Upstream sets the start gauge here (a slip); the end gauge is the one meant.
      this.#o.metrics?.end.set(Math.floor(endTime.getTime() / 1000));
      await this.#lock?.release();
      this.#lock = undefined;
      logger.v(1).info(
        "Shutdown manager completed processing shutdown event, node will shutdown shortly",
      );
    }
  }

  async #killGroup(group: ShutdownGroup, pods: V1Pod[]): Promise<void> {
    const { logger } = this.#o;
    const condition: V1PodCondition = {
      type: "DisruptionTarget",
      status: "True",
      reason: "TerminationByKubelet",
      message: NODE_SHUTDOWN_MESSAGE,
      lastTransitionTime: new Date(this.#clock.now()),
    };
    const status: PodStatusOverride = {
      phase: "Failed",
      reason: NODE_SHUTDOWN_REASON,
      message: NODE_SHUTDOWN_MESSAGE,
      conditions: [condition],
    };
    const kills = Promise.all(pods.map(async (pod) => {
      const own = pod.spec?.terminationGracePeriodSeconds;
      const grace = own !== undefined && own <= group.shutdownGracePeriodSeconds
        ? own
        : group.shutdownGracePeriodSeconds;
      const ref = `${pod.metadata?.namespace}/${pod.metadata?.name}`;
      logger.v(1).info("Shutdown manager killing pod with gracePeriod", {
        pod: ref,
        gracePeriod: grace,
      });
      try {
        await this.#o.killPod(pod, grace, status);
        logger.v(1).info("Shutdown manager finished killing pod", { pod: ref });
      } catch (e) {
        logger.v(1).info("Shutdown manager failed killing pod", { pod: ref, err: String(e) });
      }
    }));
    const timer = new AbortController();
    const timedOut = this.#clock.sleep(group.shutdownGracePeriodSeconds * 1000, timer.signal).then(
      () => true,
      () => false,
    );
    const late = await Promise.race([kills.then(() => false), timedOut]);
    timer.abort();
    const kv = { gracePeriod: group.shutdownGracePeriodSeconds, priority: group.priority };
    if (late) logger.v(1).info("Shutdown manager pod killing time out", kv);
    else logger.v(1).info("Done waiting for all pods in group to terminate", kv);
  }

  /** The last shutdown's times from the state file into the gauges (upstream setMetrics). */
  async #loadMetrics(): Promise<void> {
    const m = this.#o.metrics;
    if (!m) return;
    let text: string;
    try {
      text = await Deno.readTextFile(this.#o.stateFile);
    } catch (e) {
      if (e instanceof Deno.errors.NotFound) return;
      this.#o.logger.error(e, "Failed to load graceful shutdown state", {
        path: this.#o.stateFile,
      });
      return;
    }
    const seconds = (v: unknown) => {
      const t = typeof v === "string" ? Date.parse(v) : NaN;
      // Go's zero time (year 1) counts as unset.
      return Number.isFinite(t) && t > 0 ? Math.floor(t / 1000) : 0;
    };
    try {
      const state = JSON.parse(text) as { startTime?: unknown; endTime?: unknown };
      if (seconds(state.startTime)) m.start.set(seconds(state.startTime));
      if (seconds(state.endTime)) m.end.set(seconds(state.endTime));
    } catch (e) {
      this.#o.logger.error(e, "Failed to load graceful shutdown state", {
        path: this.#o.stateFile,
      });
    }
  }

  async #store(start: Date, end: Date | undefined): Promise<void> {
    // Go's zero time for an unset end, as upstream's JSON has it.
    const state = {
      startTime: start.toISOString(),
      endTime: end ? end.toISOString() : "0001-01-01T00:00:00Z",
    };
    const tmp = `${this.#o.stateFile}.tmp`;
    try {
      await Deno.writeTextFile(tmp, JSON.stringify(state), { mode: 0o644 });
      await Deno.rename(tmp, this.#o.stateFile);
    } catch (e) {
      this.#o.logger.error(e, "Failed to store graceful shutdown state", {
        path: this.#o.stateFile,
      });
    }
  }
}

/** A duration as Go prints it for whole seconds and minutes ("30s", "2m0s", "1h0m0s"). */
function goSeconds(ms: number): string {
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${s % 60}s`;
  return `${Math.floor(s / 3600)}h${Math.floor((s % 3600) / 60)}m${s % 60}s`;
}
