/**
 * @module
 * The event correlator behind {@link ApiserverEventRecorder}: before an event goes to the
 * apiserver it is aggregated with similar events (same source, object, type and reason, another
 * message), counted against an identical earlier event (which turns a create into a patch of
 * `count`), and passed through a per source+object spam filter. All three keep LRU caches of
 * 4096 entries and read time from the {@link Clock} they are given. Private to
 * `event_recorder.ts`; corresponds to client-go `tools/record/events_cache.go`
 * (EventCorrelator, EventAggregator, eventLogger, EventSourceObjectSpamFilter).
 */

import type { CoreV1Event } from "@kubernetes/client-node";
import type { Clock } from "../util/clock.ts";

/**
 * A core/v1 Event as it travels on the wire: client-node's type, with the timestamps as the
 * RFC 3339 strings metav1.Time marshals to rather than the Date objects client-node decodes.
 */
export type WireEvent = Omit<CoreV1Event, "firstTimestamp" | "lastTimestamp" | "eventTime"> & {
  firstTimestamp?: string;
  lastTimestamp?: string;
  eventTime?: string | null;
};

/** Upstream maxLruCacheEntries. */
export const MAX_LRU_CACHE_ENTRIES = 4096;
/** Similar events (same reason, other message) seen in the interval before they are combined. */
export const AGGREGATE_MAX_EVENTS = 10;
/** Upstream defaultAggregateIntervalInSeconds, in ms. */
export const AGGREGATE_INTERVAL_MS = 600_000;
/** Events a source may burst about one object (upstream defaultSpamBurst). */
export const SPAM_BURST = 25;
/** Refill of the spam filter: one event every 5 minutes (upstream defaultSpamQPS). */
export const SPAM_QPS = 1 / 300;
/** Prefix of an aggregated event's message (upstream EventAggregatorByReasonMessageFunc). */
export const AGGREGATE_MESSAGE_PREFIX = "(combined from similar events): ";

/** metav1.Time on the wire: RFC 3339 in UTC, whole seconds. */
export function metaTime(ms: number): string {
  return new Date(Math.floor(ms / 1000) * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");
}

/**
 * Event names: `<object name>.<UnixNano in hex>` as upstream. The clock has millisecond
 * resolution, so nanoseconds are made strictly increasing to keep two events of one object
 * in the same millisecond from sharing a name.
 */
export class EventNamer {
  #last = 0n;

  name(objectName: string, ms: number): string {
    let ns = BigInt(Math.floor(ms)) * 1_000_000n;
    if (ns <= this.#last) ns = this.#last + 1n;
    this.#last = ns;
    return `${objectName}.${ns.toString(16)}`;
  }
}

/** A map that forgets its least recently used entry beyond `size` (groupcache lru). */
class Lru<V> {
  readonly #map = new Map<string, V>();
  constructor(private readonly size: number) {}

  get(key: string): V | undefined {
    const v = this.#map.get(key);
    if (v !== undefined) {
      this.#map.delete(key);
      this.#map.set(key, v);
    }
    return v;
  }

  set(key: string, v: V): void {
    this.#map.delete(key);
    this.#map.set(key, v);
    if (this.#map.size > this.size) {
      const oldest = this.#map.keys().next();
      if (!oldest.done) this.#map.delete(oldest.value);
    }
  }
}

/** A non-blocking token bucket, full at start (x/time/rate as flowcontrol.TryAccept uses it). */
class TryBucket {
  #tokens: number;
  #last: number;
  constructor(
    private readonly clock: Clock,
    private readonly qps: number,
    private readonly burst: number,
  ) {
    this.#tokens = burst;
    this.#last = clock.now();
  }

  tryAccept(): boolean {
    const now = this.clock.now();
    this.#tokens = Math.min(this.burst, this.#tokens + ((now - this.#last) / 1000) * this.qps);
    this.#last = now;
    if (this.#tokens < 1) return false;
    this.#tokens -= 1;
    return true;
  }
}

const obj = (e: WireEvent) => e.involvedObject;

/** Upstream getEventKey: source, object (with field path), type, reason and message. */
export function eventKey(e: WireEvent): string {
  const o = obj(e);
  return [
    e.source?.component,
    e.source?.host,
    o.kind,
    o.namespace,
    o.name,
    o.fieldPath,
    o.uid,
    o.apiVersion,
    e.type,
    e.reason,
    e.message,
  ].map((s) => s ?? "").join("");
}

/** Upstream getSpamKey: source and object. */
export function spamKey(e: WireEvent): string {
  const o = obj(e);
  return [e.source?.component, e.source?.host, o.kind, o.namespace, o.name, o.uid, o.apiVersion]
    .map((s) => s ?? "").join("");
}

/** Upstream EventAggregatorByReasonFunc: the group key, and the message as the local key. */
function aggregateKeys(e: WireEvent): [string, string] {
  const o = obj(e);
  const group = [
    e.source?.component,
    e.source?.host,
    o.kind,
    o.namespace,
    o.name,
    o.uid,
    o.apiVersion,
    e.type,
    e.reason,
    e.reportingComponent,
    e.reportingInstance,
  ].map((s) => s ?? "").join("");
  return [group, e.message ?? ""];
}

interface AggregateRecord {
  readonly localKeys: Set<string>;
  lastTimestamp: number;
}

interface EventLog {
  readonly count: number;
  readonly firstTimestamp: string | undefined;
  readonly name: string;
  readonly resourceVersion: string | undefined;
}

/** The strategic merge patch that bumps a repeated event. */
export interface EventPatch {
  count: number;
  lastTimestamp?: string;
  message?: string;
}

/** What {@link EventCorrelator.correlate} decided. */
export type CorrelateResult =
  | { readonly skip: true }
  | {
    readonly skip: false;
    /** The event to create, or the patched event's new state. */
    readonly event: WireEvent;
    /** A strategic merge patch of the existing event, when this repeats one. */
    readonly patch?: EventPatch;
  };

/** Filters, aggregates and counts events (upstream EventCorrelator with default options). */
export class EventCorrelator {
  readonly #aggregates = new Lru<AggregateRecord>(MAX_LRU_CACHE_ENTRIES);
  readonly #logs = new Lru<EventLog>(MAX_LRU_CACHE_ENTRIES);
  readonly #spam = new Lru<TryBucket>(MAX_LRU_CACHE_ENTRIES);

  constructor(private readonly clock: Clock, private readonly namer: EventNamer) {}

  /** Upstream EventCorrelate: aggregate, observe, then the spam filter. */
  correlate(e: WireEvent): CorrelateResult {
    const [aggregated, key] = this.#aggregate(e);
    const [observed, patch] = this.#observe(aggregated, key);
    if (this.#filtered(observed)) return { skip: true };
    return { skip: false, event: observed, patch };
  }

  /** Records what the apiserver answered, so the next repeat patches the right event. */
  updateState(e: WireEvent): void {
    this.#logs.set(eventKey(e), {
      count: e.count ?? 0,
      firstTimestamp: e.firstTimestamp,
      name: e.metadata.name ?? "",
      resourceVersion: e.metadata.resourceVersion,
    });
  }

  #aggregate(e: WireEvent): [WireEvent, string] {
    const now = this.clock.now();
    const fullKey = eventKey(e);
    const [group, local] = aggregateKeys(e);
    let record = this.#aggregates.get(group);
    if (!record || now - record.lastTimestamp > AGGREGATE_INTERVAL_MS) {
      record = { localKeys: new Set(), lastTimestamp: 0 };
    }
    record.localKeys.add(local);
    record.lastTimestamp = now;
    this.#aggregates.set(group, record);
    if (record.localKeys.size < AGGREGATE_MAX_EVENTS) return [e, fullKey];
    // Keep the set from growing past the threshold; upstream pops an arbitrary member.
    const first = record.localKeys.values().next();
    if (!first.done) record.localKeys.delete(first.value);
    const t = metaTime(now);
    const combined: WireEvent = {
      metadata: {
        name: this.namer.name(e.involvedObject.name ?? "", now),
        namespace: e.metadata.namespace,
      },
      involvedObject: e.involvedObject,
      count: 1,
      firstTimestamp: t,
      lastTimestamp: t,
      message: AGGREGATE_MESSAGE_PREFIX + (e.message ?? ""),
      type: e.type,
      reason: e.reason,
      source: e.source,
    };
    return [combined, group];
  }

  #observe(e: WireEvent, key: string): [WireEvent, EventPatch | undefined] {
    const event: WireEvent = { ...e, metadata: { ...e.metadata } };
    const last = this.#logs.get(key);
    let patch: EventPatch | undefined;
    if (last && last.count > 0) {
      event.metadata.name = last.name;
      event.metadata.resourceVersion = last.resourceVersion;
      event.firstTimestamp = last.firstTimestamp;
      event.count = last.count + 1;
      // Upstream's two-way merge patch against a copy with count, lastTimestamp and message
      // zeroed: exactly those three fields, empty ones left out.
      patch = { count: event.count };
      if (event.lastTimestamp !== undefined) patch.lastTimestamp = event.lastTimestamp;
      if (event.message) patch.message = event.message;
    }
    this.#logs.set(key, {
      count: event.count ?? 0,
      firstTimestamp: event.firstTimestamp,
      name: event.metadata.name ?? "",
      resourceVersion: event.metadata.resourceVersion,
    });
    return [event, patch];
  }

  #filtered(e: WireEvent): boolean {
    const key = spamKey(e);
    let bucket = this.#spam.get(key);
    if (!bucket) bucket = new TryBucket(this.clock, SPAM_QPS, SPAM_BURST);
    const filtered = !bucket.tryAccept();
    this.#spam.set(key, bucket);
    return filtered;
  }
}
