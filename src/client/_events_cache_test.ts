import assert from "node:assert/strict";
import { FakeClock } from "../util/clock.ts";
import {
  AGGREGATE_MESSAGE_PREFIX,
  type CorrelateResult,
  EventCorrelator,
  EventNamer,
  metaTime,
  type WireEvent,
} from "./_events_cache.ts";

const START = Date.UTC(2026, 0, 1, 12, 0, 0);

function setup() {
  const clock = new FakeClock(START);
  const namer = new EventNamer();
  const correlator = new EventCorrelator(clock, namer);
  const ev = (reason: string, message: string, object = "web"): WireEvent => {
    const t = metaTime(clock.now());
    return {
      metadata: { name: namer.name(object, clock.now()), namespace: "default" },
      involvedObject: { kind: "Pod", name: object, namespace: "default", uid: `uid-${object}` },
      reason,
      message,
      type: "Normal",
      count: 1,
      firstTimestamp: t,
      lastTimestamp: t,
      source: { component: "kubelet", host: "node-a" },
      reportingComponent: "kubelet",
      reportingInstance: "node-a",
    };
  };
  return { clock, correlator, ev };
}

function sent(r: CorrelateResult) {
  assert.equal(r.skip, false, "the event was skipped");
  if (r.skip) throw new Error("unreachable");
  return r;
}

Deno.test("metaTime writes metav1.Time in whole UTC seconds", () => {
  assert.equal(metaTime(Date.UTC(2026, 11, 2, 7, 36, 22, 987)), "2026-12-02T07:36:22Z");
});

Deno.test("EventNamer names events <object>.<UnixNano in hex>, never twice alike", () => {
  const namer = new EventNamer();
  const ms = Date.UTC(2026, 0, 1);
  const ns = BigInt(ms) * 1_000_000n;
  assert.equal(namer.name("web", ms), `web.${ns.toString(16)}`);
  assert.match(namer.name("web", ms), /^web\.[0-9a-f]{16}$/);
  assert.equal(namer.name("web", ms), `web.${(ns + 2n).toString(16)}`);
});

Deno.test("EventCorrelator turns a repeated event into a patch of the first one", () => {
  const { clock, correlator, ev } = setup();
  const first = sent(correlator.correlate(ev("Pulled", "Image pulled")));
  assert.equal(first.patch, undefined);
  assert.equal(first.event.count, 1);
  correlator.updateState({
    ...first.event,
    metadata: { ...first.event.metadata, resourceVersion: "7" },
  });
  clock.step(5_000);
  const again = sent(correlator.correlate(ev("Pulled", "Image pulled")));
  assert.deepEqual(again.patch, {
    count: 2,
    lastTimestamp: metaTime(START + 5_000),
    message: "Image pulled",
  });
  assert.equal(again.event.metadata.name, first.event.metadata.name);
  assert.equal(again.event.metadata.resourceVersion, "7");
  assert.equal(again.event.firstTimestamp, metaTime(START));
  const third = sent(correlator.correlate(ev("Pulled", "Image pulled")));
  assert.equal(third.patch?.count, 3, "counts even before the apiserver answered");
  const other = sent(correlator.correlate(ev("Pulled", "Image pulled", "db")));
  assert.equal(other.patch, undefined, "another object is another event");
});

Deno.test("EventCorrelator combines the 10th similar event within 10 minutes", () => {
  const { clock, correlator, ev } = setup();
  for (let i = 1; i <= 9; i++) {
    const r = sent(correlator.correlate(ev("BackOff", `message ${i}`)));
    assert.equal(r.event.message, `message ${i}`);
    clock.step(1_000);
  }
  const tenth = sent(correlator.correlate(ev("BackOff", "message 10")));
  assert.equal(tenth.event.message, `${AGGREGATE_MESSAGE_PREFIX}message 10`);
  assert.equal(tenth.event.count, 1);
  assert.equal(tenth.patch, undefined);
  assert.equal(tenth.event.reportingComponent, undefined, "upstream's aggregate copy has none");
  const eleventh = sent(correlator.correlate(ev("BackOff", "message 11")));
  assert.equal(eleventh.event.metadata.name, tenth.event.metadata.name);
  assert.deepEqual(eleventh.patch, {
    count: 2,
    lastTimestamp: metaTime(clock.now()),
    message: `${AGGREGATE_MESSAGE_PREFIX}message 11`,
  });
  // Another reason is another group.
  assert.equal(sent(correlator.correlate(ev("Failed", "message 12"))).event.message, "message 12");
  // A quiet spell longer than the interval starts the group afresh.
  clock.step(600_001);
  assert.equal(sent(correlator.correlate(ev("BackOff", "message 13"))).event.message, "message 13");
});

Deno.test("EventCorrelator lets a source burst 25 events about an object, then one per 5 minutes", () => {
  const { clock, correlator, ev } = setup();
  for (let i = 0; i < 25; i++) {
    assert.equal(correlator.correlate(ev(`Reason${i}`, "m")).skip, false, `event ${i}`);
  }
  assert.equal(correlator.correlate(ev("Reason25", "m")).skip, true);
  assert.equal(correlator.correlate(ev("Reason0", "m", "db")).skip, false, "another object");
  clock.step(299_000);
  assert.equal(correlator.correlate(ev("Reason26", "m")).skip, true);
  clock.step(1_000);
  assert.equal(correlator.correlate(ev("Reason27", "m")).skip, false);
  assert.equal(correlator.correlate(ev("Reason28", "m")).skip, true);
});
