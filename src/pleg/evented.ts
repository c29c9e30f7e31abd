/**
 * @module
 * EventedPLEG: the pod lifecycle event generator driven by the runtime's container events (CRI
 * GetContainerEvents). Each event carries the pod's sandbox status and its containers' statuses,
 * so the {@link PodCache} is written and the sync loop told within the event's round trip,
 * instead of up to a relist period later. The {@link GenericPLEG} stays underneath as the safety
 * net: while the stream is up it relists every 5 minutes (health threshold 10 minutes), and when
 * the stream fails it goes back to relisting every second, relists at once (events may have been
 * missed) and the stream is opened again with backoff. A runtime without the RPC (UNIMPLEMENTED,
 * as containerd before 1.7) is said once and the PLEG stays on relisting.
 *
 * Unlike upstream, where the EventedPLEG feature gate is alpha and off, it is on by default here
 * (`featureGates: {EventedPLEG: false}` turns it off), and a stream that fails is retried for as
 * long as the agent runs rather than given up after five attempts. Corresponds to upstream
 * `pkg/kubelet/pleg/evented.go`.
 */

import * as api from "../../proto/runtime/v1/api.ts";
import { type Clock, realClock } from "../util/clock.ts";
import { GrpcCode, isCriCode } from "../cri/connection.ts";
import { formatDuration } from "../util/duration.ts";
import { createLogger, type Logger } from "../klog/klog.ts";
import type {
  GenericPLEG,
  InspectPodOptions,
  PlegHealth,
  PodLifecycleEvent,
  PodLifecycleEventGenerator,
} from "./generic.ts";
import type { PodCache, PodStatus } from "../container/pod_cache.ts";
import type { RuntimeService } from "../cri/remote_runtime.ts";
import type { KubeletMetrics } from "../metrics/metrics.ts";

/** Upstream's eventedPlegRelistPeriod: the safety-net relist while events flow. */
export const EVENTED_RELIST_PERIOD_MS = 300_000;
/** Upstream's eventedPlegRelistThreshold. */
export const EVENTED_RELIST_THRESHOLD_MS = 600_000;
/** Upstream's globalCacheUpdatePeriod: waiters on the cache are woken at least this often. */
export const GLOBAL_CACHE_UPDATE_PERIOD_MS = 2_000;
/** How long a new stream must stay open before the relist period is lengthened. */
export const STREAM_SETTLE_MS = 1_000;
/** Backoff between attempts to open the stream again, doubling up to the maximum. */
const RETRY_INITIAL_MS = 1_000;
const RETRY_MAX_MS = 30_000;
/** A stream that stayed open this long resets the backoff. */
const RETRY_RESET_MS = 60_000;

/** The CRI call the evented PLEG needs. */
export type EventedPlegRuntime = Pick<RuntimeService, "getContainerEvents">;

/** Options of {@link EventedPLEG}. */
export interface EventedPLEGOptions {
  readonly runtime: EventedPlegRuntime;
  readonly cache: PodCache;
  /** The relisting PLEG underneath; its period and threshold are the ones used without events. */
  readonly generic: GenericPLEG;
  /** @default realClock */
  readonly clock?: Clock;
  /** @default a text logger on stderr */
  readonly logger?: Logger;
  /**
   * kubelet_evented_pleg_connection_{success,error}_count (each stream opened, each that
   * failed) and _latency_seconds (each event's age on arrival). @default none
   */
  readonly metrics?: Pick<
    KubeletMetrics,
    "eventedPlegConn" | "eventedPlegConnErr" | "eventedPlegConnLatency"
  >;
}

/** The evented PLEG; see the module documentation. */
export class EventedPLEG implements PodLifecycleEventGenerator {
  readonly #runtime: EventedPlegRuntime;
  readonly #cache: PodCache;
  readonly #generic: GenericPLEG;
  readonly #clock: Clock;
  readonly #log: Logger;
  /** The generic PLEG's own period and threshold, restored whenever the stream is down. */
  readonly #relistPeriod: number;
  readonly #relistThreshold: number;
  #active = false;
  #unsupported = false;
  #events = 0;
  #streamFailures = 0;
  /** When the current stream opened (clock ms); events stamped before it are a backlog. */
  #streamOpened = 0;
  /** Backlog events skipped on the current stream. */
  #backlog = 0;
  readonly #metrics: EventedPLEGOptions["metrics"];

  constructor(opts: EventedPLEGOptions) {
    this.#metrics = opts.metrics;
    this.#runtime = opts.runtime;
    this.#cache = opts.cache;
    this.#generic = opts.generic;
    this.#clock = opts.clock ?? realClock;
    this.#log = opts.logger ?? createLogger();
    this.#relistPeriod = opts.generic.relistPeriodMs;
    this.#relistThreshold = opts.generic.relistThresholdMs;
  }

  /** Whether events are in use now (the stream is open and has settled). */
  get inUse(): boolean {
    return this.#active;
  }

  /** Whether the runtime said it does not serve GetContainerEvents. */
  get unsupported(): boolean {
    return this.#unsupported;
  }

  /** Container events received so far. */
  get eventsReceived(): number {
    return this.#events;
  }

  /** Times the stream failed, or could not be opened, so far. */
  get streamFailures(): number {
    return this.#streamFailures;
  }

  /** Runs the relisting PLEG, the event stream and the cache's global tick until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    await Promise.all([this.#generic.run(signal), this.#watch(signal), this.#tick(signal)]);
  }

  relist(signal?: AbortSignal): Promise<void> {
    return this.#generic.relist(signal);
  }

  /** While events flow they report what the kubelet changed; otherwise the relist comes now. */
  poke(): void {
    if (!this.#active) this.#generic.poke();
  }

  /**
   * Reads the pod now through the relisting PLEG, events or not: the runtime stamps a
   * container's STARTED event before the sync that started it ends, and the pod's worker waits
   * for a status newer than that end, so the event alone would leave the pod Pending until the
   * cache's 2 s tick (bench/results/2026-12-06-vm-containerd2-evented-pleg.md: 1.7 s more per
   * pod start). A resize, which the runtime sends no event for, is read the same way.
   */
  inspectPod(uid: string, opts?: InspectPodOptions): Promise<boolean> {
    return this.#generic.inspectPod(uid, opts);
  }

  /** Unhealthy when the event queue is full, else as the relisting PLEG with its current threshold. */
  healthy(): PlegHealth {
    const pending = this.#generic.pending;
    if (pending >= this.#generic.capacity) {
      return {
        ok: false,
        message: `EventedPLEG: pleg event channel capacity is full with ${pending} events`,
      };
    }
    return this.#generic.healthy();
  }

  /** While events flow, the pods the cache holds a non-empty status for; else the last relist's. */
  podIds(): string[] {
    if (!this.#active) return this.#generic.podIds();
    return this.#cache.uids().filter((uid) => {
      const { status } = this.#cache.get(uid);
      return status.sandboxStatuses.length > 0 || status.containerStatuses.length > 0;
    });
  }

  next(signal?: AbortSignal): Promise<PodLifecycleEvent> {
    return this.#generic.next(signal);
  }

  takeQueued(): PodLifecycleEvent[] {
    return this.#generic.takeQueued();
  }

  watch(signal?: AbortSignal): AsyncGenerator<PodLifecycleEvent> {
    return this.#generic.watch(signal);
  }

  /**
   * Handles one container event as upstream's processCRIEvents: the pod's status from the event
   * goes into the cache (unless the cache already holds a later one), then the lifecycle event.
   * Exposed for tests; the stream calls it.
   */
  process(event: api.ContainerEventResponse): void {
    this.#events++;
    // A second's margin: a runtime whose clock is behind the kubelet's must not lose events.
    if (
      event.createdAt > 0n && eventTime(event, this.#clock) < this.#streamOpened - STREAM_SETTLE_MS
    ) {
      // A backlog the runtime queued before this stream opened (containerd keeps up to 1000
      // events for the next subscriber), about containers long changed or gone: the relist that
      // settles the stream reads their pods as they are now. Sent on, 1000 of them would fill
      // the event queue before the sync loop reads it.
      this.#backlog++;
      return;
    }
    const sandbox = event.podSandboxStatus;
    const meta = sandbox?.metadata;
    if (!sandbox || !meta || meta.uid === "") {
      // A race with the sandbox's removal; its own event, or a relist, covers the pod.
      this.#log.error(
        undefined,
        "Evented PLEG: received ContainerEventResponse with nil PodSandboxStatus or PodSandboxStatus.Metadata",
        { containerID: event.containerId, eventType: eventTypeName(event.containerEventType) },
      );
      return;
    }
    const uid = meta.uid;
    const deleted = event.containerEventType === api.ContainerEventType.CONTAINER_DELETED_EVENT;
    if (!deleted && !describes(event)) {
      // A runtime that sends events without the statuses: the event still says something
      // changed, so a relist reads it.
      this.#log.v(4).info("Evented PLEG: event without the container's status, relisting", {
        podUID: uid,
        containerID: event.containerId,
      });
      this.#generic.poke();
      return;
    }
    const status = this.#statusOf(uid, event);
    let send = deleted;
    if (deleted) {
      if (event.containerId === sandbox.id) this.#cache.delete(uid);
    } else {
      send = this.#cache.setIfNewer(uid, status, undefined, eventTime(event, this.#clock));
    }
    this.#log.v(4).info("Evented PLEG: Generated pod status from the received event", {
      podUID: uid,
      eventType: eventTypeName(event.containerEventType),
    });
    if (!send) return;
    const ev = (type: PodLifecycleEvent["type"]) => ({ id: uid, type, data: event.containerId });
    switch (event.containerEventType) {
      case api.ContainerEventType.CONTAINER_STOPPED_EVENT:
        this.#generic.send(ev("ContainerDied"));
        break;
      case api.ContainerEventType.CONTAINER_STARTED_EVENT:
        this.#generic.send(ev("ContainerStarted"));
        break;
      case api.ContainerEventType.CONTAINER_DELETED_EVENT:
        this.#generic.send(ev("ContainerDied"));
        this.#generic.send(ev("ContainerRemoved"));
        break;
      default:
        // CREATED only updates the cache: the relisting PLEG ignores creations too.
        break;
    }
  }

  /** Upstream's GeneratePodStatus, with its getPodIPs rule for a pod whose network is gone. */
  #statusOf(uid: string, event: api.ContainerEventResponse): PodStatus {
    const sandbox = event.podSandboxStatus!;
    const ready = sandbox.state === api.PodSandboxState.SANDBOX_READY;
    let ips = ready && sandbox.network
      ? [sandbox.network.ip, ...sandbox.network.additionalIps.map((p) => p.ip)].filter((ip) => ip)
      : [];
    if (ips.length === 0 && !ready) {
      const old = this.#cache.get(uid);
      if (!old.error) ips = old.status.ips;
    }
    return {
      id: uid,
      name: sandbox.metadata!.name,
      namespace: sandbox.metadata!.namespace,
      ips,
      sandboxStatuses: [sandbox],
      containerStatuses: [...event.containersStatuses].sort((a, b) =>
        a.createdAt > b.createdAt ? -1 : a.createdAt < b.createdAt ? 1 : 0
      ),
      timestamp: eventTime(event, this.#clock),
    };
  }

  /** Keeps the stream open: settles it, and on failure falls back to relisting and retries. */
  async #watch(signal: AbortSignal): Promise<void> {
    let delay = RETRY_INITIAL_MS;
    while (!signal.aborted) {
      const stream = new AbortController();
      const streamSignal = AbortSignal.any([signal, stream.signal]);
      const opened = this.#clock.now();
      this.#streamOpened = opened;
      this.#backlog = 0;
      const settling = this.#settle(streamSignal);
      let err: unknown;
      try {
        const events = this.#runtime.getContainerEvents(streamSignal);
        this.#metrics?.eventedPlegConn.inc();
        for await (const event of events) {
          this.#metrics?.eventedPlegConnLatency.observe(
            (this.#clock.now() - eventTime(event, this.#clock)) / 1000,
          );
          this.process(event);
        }
        err = new Error("the container runtime ended the container events stream");
      } catch (e) {
        err = e;
      } finally {
        stream.abort();
        await settling;
      }
      if (signal.aborted) return;
      this.#metrics?.eventedPlegConnErr.inc();
      this.#streamFailures++;
      this.#fallBack();
      if (isCriCode(err, GrpcCode.UNIMPLEMENTED)) {
        this.#unsupported = true;
        this.#log.info(
          "The container runtime does not serve CRI GetContainerEvents; the PLEG relists every " +
            formatDuration(this.#relistPeriod),
          { err: err instanceof Error ? err.message : String(err) },
        );
        return;
      }
      if (this.#clock.now() - opened >= RETRY_RESET_MS) delay = RETRY_INITIAL_MS;
      const message =
        "Evented PLEG: Failed to get container events, relisting until the stream is back";
      const kv = { retryIn: formatDuration(delay) };
      // Said at the first failure and after each recovery; a failing streak only at -v=4.
      if (this.#streamFailures === 1 || delay === RETRY_INITIAL_MS) {
        this.#log.error(err, message, kv);
      } else this.#log.v(4).info(message, { ...kv, err: String(err) });
      try {
        await this.#clock.sleep(delay, signal);
      } catch {
        return;
      }
      delay = Math.min(delay * 2, RETRY_MAX_MS);
    }
  }

  /**
   * Once a new stream has stayed open for {@link STREAM_SETTLE_MS}, relists once (what changed
   * before the runtime registered the stream) and only then lengthens the relist period.
   */
  async #settle(signal: AbortSignal): Promise<void> {
    try {
      await this.#clock.sleep(STREAM_SETTLE_MS, signal);
    } catch {
      return;
    }
    await this.#generic.relist(signal);
    if (signal.aborted) return;
    if (this.#backlog > 0) {
      this.#log.info(
        "Evented PLEG: skipped events the runtime sent from before the stream opened",
        {
          count: this.#backlog,
        },
      );
    }
    this.#active = true;
    this.#generic.setRelistPeriod(EVENTED_RELIST_PERIOD_MS, EVENTED_RELIST_THRESHOLD_MS);
    this.#log.v(2).info("Evented PLEG: container events in use", {
      relistPeriod: formatDuration(EVENTED_RELIST_PERIOD_MS),
    });
  }

  /** The stream is down: back to the generic PLEG's period, and relist now. */
  #fallBack(): void {
    this.#active = false;
    this.#generic.setRelistPeriod(this.#relistPeriod, this.#relistThreshold);
    this.#generic.poke();
  }

  /** Upstream's updateGlobalCache: while events flow, a pod worker never waits long on the cache. */
  async #tick(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        await this.#clock.sleep(GLOBAL_CACHE_UPDATE_PERIOD_MS, signal);
      } catch {
        return;
      }
      if (this.#active) this.#cache.updateTime(this.#clock.now());
    }
  }
}

/** Whether the event holds the status of the container (or sandbox) it is about. */
function describes(event: api.ContainerEventResponse): boolean {
  return event.containerId === event.podSandboxStatus?.id ||
    event.containersStatuses.some((c) => c.id === event.containerId);
}

/**
 * The event's time in milliseconds since the epoch, keeping the fraction: a pod worker waits for
 * a status newer than its last sync's start, and an event in the same millisecond is newer.
 * Now when the runtime left it out.
 */
function eventTime(event: api.ContainerEventResponse, clock: Clock): number {
  // Whole microseconds first: a double holds them exactly, nanoseconds since 1970 it does not.
  return event.createdAt > 0n ? Number(event.createdAt / 1_000n) / 1_000 : clock.now();
}

function eventTypeName(t: api.ContainerEventType): string {
  return api.ContainerEventType[t] ?? String(t);
}
