/**
 * @module
 * The kubelet's event recorder when it has an apiserver: each event becomes a core/v1 Event
 * posted to the involved object's namespace ("default" for cluster-scoped objects such as the
 * Node), with source `{component: "kubelet", host: <node name>}`. {@link
 * ApiserverEventRecorder.event} only queues (a bounded queue; overflow is counted and logged);
 * the writer, started with {@link ApiserverEventRecorder.run}, correlates each event (spam
 * filter, aggregation, repeat counting in `_events_cache.ts`), paces requests with a
 * {@link TokenBucket} at eventRecordQPS/eventBurst, creates new events, patches the count of
 * repeated ones and retries transport failures. Each event is also logged at V(3), as the
 * kubelet's broadcaster does.
 *
 * Upstream writes one event at a time, so the queue drains no faster than one request's round
 * trip allows: on a node starting 250 pods at once, with the apiserver slowed by the same burst,
 * that was about ten events a second against thirty recorded, and the queue overflowed. This
 * writer has up to {@link ApiserverRecorderOptions.writers} requests in flight, still within
 * eventRecordQPS; the events of one involved object are written one after another in the order
 * they were recorded (correlation, repeat counting and the spam filter are per object).
 *
 * This agent's own addition: given {@link ApiserverRecorderOptions.yieldTo} (the CRI calls that
 * start pods), the writer holds each event while such calls are in flight, at most
 * {@link ApiserverRecorderOptions.maxYieldMs} from when the event was recorded. A node starting
 * many pods at once has every CPU busy, and the events' requests (the kubelet's, the
 * apiserver's and etcd's work) would otherwise come out of the pods' start time.
 *
 * Corresponds to client-go `tools/record/event.go` (recorderImpl.makeEvent, recordToSink,
 * recordEvent) and `events_cache.go`, as cmd/kubelet/app/server.go `makeEventRecorder` sets
 * them up.
 */

import { type Clock, WAIT_ENDED } from "../util/clock.ts";
import type { EventRecorder, ObjectRef } from "./record.ts";
import type { Activity } from "../util/in_flight.ts";
import { KObj, type Logger } from "../klog/klog.ts";
import { isStatus, KubeApiError, type KubeClient } from "./kube_client.ts";
import { TokenBucket } from "./rate_limiter.ts";
import {
  EventCorrelator,
  EventNamer,
  type EventPatch,
  metaTime,
  type WireEvent,
} from "./_events_cache.ts";
import { linkSignals } from "../util/linked_signal.ts";

/** Upstream maxTriesPerEvent. */
export const MAX_TRIES_PER_EVENT = 12;
/** Upstream defaultSleepDuration between attempts, in ms. */
export const RETRY_SLEEP_MS = 10_000;
/** Upstream maxQueuedEvents. */
export const MAX_QUEUED_EVENTS = 1000;
/** How long an event waits at most for pod start calls to end, in ms (this agent's own). */
export const MAX_YIELD_MS = 5_000;

/** Options of {@link ApiserverEventRecorder}. */
export interface ApiserverRecorderOptions {
  /**
   * The client events are written with. The recorder paces requests itself, so give it a
   * client without a limit of its own (`client.with({ qps: -1 })`).
   */
  readonly client: KubeClient;
  /** Event source component. @default "kubelet" (upstream componentKubelet) */
  readonly component: string;
  /** Event source host: the node name. */
  readonly host: string;
  /** Event writes per second (eventRecordQPS); 0 means no limit. @default 50 */
  readonly qps: number;
  /** Event writes allowed in a burst (eventBurst). @default 100 */
  readonly burst: number;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Events held while the writer is busy; more are dropped and logged. @default 1000 */
  readonly queueSize?: number;
  /** Pause between attempts to write one event, in ms. @default 10000 */
  readonly retrySleepMs?: number;
  /** Jitter of the first retry, in [0, 1). @default Math.random */
  readonly random?: () => number;
  /** Work events wait for (the CRI calls that start pods); none: events are written at once. */
  readonly yieldTo?: Activity;
  /** The longest an event waits for {@link yieldTo}, from when it was recorded. @default 5000 */
  readonly maxYieldMs?: number;
  /**
   * Event writes in flight at once, each for a different involved object. @default
   * {@link DEFAULT_EVENT_WRITERS}
   */
  readonly writers?: number;
}

/** Event writes in flight at once by default (this agent's own; upstream's writer has one). */
export const DEFAULT_EVENT_WRITERS = 8;

/** A queued event and when it was recorded (ms since the epoch, by the clock). */
interface Queued {
  readonly event: WireEvent;
  readonly at: number;
}

/** A misuse of the recorder, such as running two writers. */
export class EventRecorderError extends Error {
  override name = "EventRecorderError";
}

/** Records events to the apiserver (upstream record.EventBroadcaster + EventRecorder). */
export class ApiserverEventRecorder implements EventRecorder {
  readonly #o: ApiserverRecorderOptions;
  readonly #queueSize: number;
  readonly #writers: number;
  readonly #queue: Queued[] = [];
  readonly #namer = new EventNamer();
  readonly #correlator: EventCorrelator;
  readonly #bucket: TokenBucket;
  #dropped = 0;
  #running = false;
  #wake: (() => void) | undefined;

  constructor(opts: ApiserverRecorderOptions) {
    this.#o = opts;
    this.#queueSize = opts.queueSize ?? MAX_QUEUED_EVENTS;
    if (!Number.isInteger(this.#queueSize) || this.#queueSize < 1) {
      throw new EventRecorderError(
        `Cannot create event recorder: 'queueSize' must be a positive integer: current value is '${this.#queueSize}'`,
      );
    }
    this.#writers = opts.writers ?? DEFAULT_EVENT_WRITERS;
    if (!Number.isInteger(this.#writers) || this.#writers < 1) {
      throw new EventRecorderError(
        `Cannot create event recorder: 'writers' must be a positive integer: current value is '${this.#writers}'`,
      );
    }
    this.#correlator = new EventCorrelator(opts.clock, this.#namer);
    this.#bucket = new TokenBucket(opts.clock, opts.qps, opts.burst);
  }
  /** Changes eventRecordQPS / eventBurst from now on (a configuration reload). */
  setRateLimit(qps: number, burst: number): void {
    this.#bucket.setRate(qps, burst);
  }

  /** Events dropped because the queue was full (each drop also logged). */
  get dropped(): number {
    return this.#dropped;
  }

  /** Events queued and not yet taken by the writer. */
  get pending(): number {
    return this.#queue.length;
  }

  /** Queues an event; never blocks, never throws. */
  event(ref: ObjectRef, type: "Normal" | "Warning", reason: string, message: string): void {
    const { logger } = this.#o;
    let e: WireEvent;
    try {
      if (type !== "Normal" && type !== "Warning") {
        quietly(() => logger.error(null, "Unsupported event type", { eventType: type }));
        return;
      }
      e = this.#makeEvent(ref, type, reason, message);
    } catch (err) {
      quietly(() => logger.error(err, "Unable to record event (will not retry!)"));
      return;
    }
    quietly(() =>
      logger.v(3).info("Event occurred", {
        object: new KObj(ref.name, ref.namespace ?? ""),
        fieldPath: ref.fieldPath ?? "",
        kind: ref.kind,
        apiVersion: e.involvedObject.apiVersion,
        type,
        reason,
        message,
      })
    );
    if (this.#queue.length >= this.#queueSize) {
      this.#dropped++;
      quietly(() =>
        logger.error(null, "Unable to record event: too many queued events, dropped event", {
          event: e,
        })
      );
      return;
    }
    this.#queue.push({ event: e, at: this.#o.clock.now() });
    this.#wake?.();
  }

  /**
   * Writes queued events until `signal` aborts; events still queued then stay unsent, and the
   * writes in flight end (aborted) before it returns.
   */
  async run(signal: AbortSignal): Promise<void> {
    if (this.#running) {
      throw new EventRecorderError("Cannot run the event recorder: it is already running");
    }
    this.#running = true;
    const inFlight = new Set<Promise<void>>();
    // Involved objects with a write in flight: their next event waits for it.
    const busy = new Set<string>();
    try {
      while (!signal.aborted) {
        if (this.#queue.length === 0) {
          await this.#idle(signal);
          continue;
        }
        await this.#yield(this.#queue[0]!.at, signal);
        if (signal.aborted) break;
        // The oldest event whose object has no write in flight; none, or every writer busy:
        // wait for a write to end (the queue waits, as upstream's single writer makes it).
        const i = inFlight.size >= this.#writers
          ? -1
          : this.#queue.findIndex((q) => !busy.has(objectKey(q.event)));
        if (i < 0) {
          await this.#oneEnds(inFlight, signal);
          continue;
        }
        const [next] = this.#queue.splice(i, 1);
        const key = objectKey(next!.event);
        busy.add(key);
        const write: Promise<void> = this.#write(next!.event, signal).then(() => {
          busy.delete(key);
          inFlight.delete(write);
        });
        inFlight.add(write);
      }
    } finally {
      await Promise.all(inFlight);
      this.#running = false;
      const count = this.#queue.length;
      if (count > 0) {
        quietly(() => this.#o.logger.info("Event recorder stopped with events unsent", { count }));
      }
    }
  }

  /**
   * Resolves once one of `writes` ends, an event is recorded or `signal` aborts. No promise that
   * outlives the wait is
   * raced: each race would leave a reaction on it until it settled.
   */
  #oneEnds(writes: ReadonlySet<Promise<void>>, signal: AbortSignal): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        signal.removeEventListener("abort", done);
        if (this.#wake === done) this.#wake = undefined;
        resolve();
      };
      signal.addEventListener("abort", done, { once: true });
      // A new event may be about an object no write is busy with: it wakes the writer too.
      this.#wake = done;
      for (const w of writes) void w.then(done);
    });
  }

  /** Writes one event; a failure is logged, never thrown: one event must not stop the writer. */
  async #write(event: WireEvent, signal: AbortSignal): Promise<void> {
    try {
      await this.#recordToSink(event, signal);
    } catch (err) {
      if (!signal.aborted) {
        quietly(() => this.#o.logger.error(err, "Unable to write event", { event }));
      }
    }
  }

  #makeEvent(ref: ObjectRef, type: string, reason: string, message: string): WireEvent {
    const now = this.#o.clock.now();
    const t = metaTime(now);
    const involved: WireEvent["involvedObject"] = {
      kind: ref.kind,
      name: ref.name,
      apiVersion: ref.apiVersion ?? "v1",
    };
    if (ref.namespace) involved.namespace = ref.namespace;
    if (ref.uid) involved.uid = ref.uid;
    if (ref.resourceVersion) involved.resourceVersion = ref.resourceVersion;
    if (ref.fieldPath) involved.fieldPath = ref.fieldPath;
    return {
      metadata: {
        name: this.#namer.name(ref.name, now),
        // Upstream: events about cluster-scoped objects live in metav1.NamespaceDefault.
        namespace: ref.namespace || "default",
      },
      involvedObject: involved,
      reason,
      message,
      firstTimestamp: t,
      lastTimestamp: t,
      count: 1,
      type,
      source: { component: this.#o.component, host: this.#o.host },
      reportingComponent: this.#o.component,
      reportingInstance: this.#o.host,
    };
  }

  /** Waits while {@link ApiserverRecorderOptions.yieldTo} is busy, until `at` + maxYieldMs. */
  async #yield(at: number, signal: AbortSignal): Promise<void> {
    const { yieldTo, clock } = this.#o;
    if (!yieldTo?.busy) return;
    const left = at + (this.#o.maxYieldMs ?? MAX_YIELD_MS) - clock.now();
    if (left <= 0) return;
    const done = new AbortController();
    using link = linkSignals(signal, done.signal);
    const stop = link.signal;
    await Promise.race([yieldTo.idle(stop), clock.sleep(left, stop).catch(() => {})]);
    done.abort(WAIT_ENDED);
  }

  #idle(signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        signal.removeEventListener("abort", done);
        this.#wake = undefined;
        resolve();
      };
      this.#wake = done;
      signal.addEventListener("abort", done, { once: true });
    });
  }

  /** Upstream recordToSink: correlate, then write with up to 12 tries. */
  async #recordToSink(queued: WireEvent, signal: AbortSignal): Promise<void> {
    const { logger, clock } = this.#o;
    const result = this.#correlator.correlate(queued);
    if (result.skip) return;
    const sleepMs = this.#o.retrySleepMs ?? RETRY_SLEEP_MS;
    const random = this.#o.random ?? Math.random;
    for (let tries = 0;;) {
      try {
        if (await this.#recordEvent(result.event, result.patch, signal)) return;
      } catch (err) {
        if (!signal.aborted) throw err;
        logger.error(null, "Unable to write event (broadcaster is shut down)", { event: queued });
        return;
      }
      tries++;
      if (tries >= MAX_TRIES_PER_EVENT) {
        logger.error(null, "Unable to write event (retry limit exceeded!)", { event: queued });
        return;
      }
      // The first pause is randomised so that kubelets do not retry in step after an outage.
      const delay = tries === 1 ? sleepMs * random() : sleepMs;
      try {
        await clock.sleep(delay, signal);
      } catch {
        logger.error(null, "Unable to write event (broadcaster is shut down)", { event: queued });
        return;
      }
    }
  }

  /**
   * Upstream recordEvent: patches a repeated event (creating it anew if it is gone) or creates
   * a new one. True when the event was written or abandoned, false to try again. Throws only
   * when `signal` aborts.
   */
  async #recordEvent(
    event: WireEvent,
    patch: EventPatch | undefined,
    signal: AbortSignal,
  ): Promise<boolean> {
    const { client, logger } = this.#o;
    const ns = event.metadata.namespace ?? "default";
    const base = `/api/v1/namespaces/${encodeURIComponent(ns)}/events`;
    const update = (event.count ?? 1) > 1 && patch !== undefined;
    let saved: WireEvent | undefined;
    let err: unknown;
    if (update) {
      try {
        await this.#bucket.wait(signal);
        saved = await client.patch<WireEvent>(
          `${base}/${encodeURIComponent(event.metadata.name ?? "")}`,
          patch,
          "strategic",
          signal,
        );
      } catch (e) {
        if (signal.aborted) throw e;
        err = e;
      }
    }
    // A patch fails with 404 when the event has expired or was deleted: create it again.
    if (!update || isStatus(err, 404)) {
      err = undefined;
      const body: WireEvent = {
        apiVersion: "v1",
        kind: "Event",
        ...event,
        metadata: { ...event.metadata, resourceVersion: undefined },
      };
      try {
        await this.#bucket.wait(signal);
        saved = await client.create<WireEvent>(base, body, signal);
      } catch (e) {
        if (signal.aborted) throw e;
        err = e;
      }
    }
    if (err === undefined && saved !== undefined) {
      this.#correlator.updateState(saved);
      return true;
    }
    if (err instanceof KubeApiError && err.code !== 0 && !retryable(err.code)) {
      // The apiserver looked at the event and refused it: sending it again would not help.
      if (
        (err.code === 409 && err.reason === "AlreadyExists") || namespaceTerminating(err)
      ) {
        logger.v(5).info("Server rejected event (will not retry!)", {
          event,
          err: err.message,
        });
      } else {
        logger.error(err, "Server rejected event (will not retry!)", { event });
      }
      return true;
    }
    logger.error(err, "Unable to write event (may retry after sleeping)", { event });
    return false;
  }
}

/** The involved object an event is about, for ordering its writes. */
function objectKey(e: WireEvent): string {
  const o = e.involvedObject;
  return o.uid ?? `${o.kind}/${o.namespace ?? ""}/${o.name}`;
}

/** Runs a log call; a logger that throws must not reach the caller of event(). */
function quietly(log: () => void): void {
  try {
    log();
  } catch {
    // Nowhere left to report it.
  }
}

/**
 * Answers worth another try: transport failures, and the throttling and unavailability
 * answers that client-go's REST client retries by itself before recordEvent sees them.
 */
function retryable(code: number): boolean {
  return code === 0 || code === 429 || code >= 500;
}

/** Upstream checks the status cause NamespaceTerminating; this client keeps only the message. */
function namespaceTerminating(err: KubeApiError): boolean {
  return err.code === 403 && /because it is being terminated/.test(err.message);
}
