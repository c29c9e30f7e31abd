import assert from "node:assert/strict";
import { FakeClock } from "../util/clock.ts";
import type { ObjectRef } from "./record.ts";
import {
  ApiserverEventRecorder,
  type ApiserverRecorderOptions,
  EventRecorderError,
} from "./event_recorder.ts";
import { InFlight } from "../util/in_flight.ts";
import { createLogger } from "../klog/klog.ts";
import { KubeClient } from "./kube_client.ts";
import { metaTime, type WireEvent } from "./_events_cache.ts";

const START = Date.UTC(2026, 11, 2, 12, 0, 0);

interface Seen {
  readonly method: string;
  readonly path: string;
  readonly contentType: string | null;
  readonly body: Record<string, unknown>;
}

/** A loopback apiserver for events; `fail` holds statuses to answer the next requests with. */
function eventServer() {
  const events = new Map<string, WireEvent>();
  const state = {
    seen: [] as Seen[],
    fail: [] as number[],
    /** When set, each request waits until the function it is given is called. */
    hold: undefined as ((release: () => void) => void) | undefined,
  };
  let rv = 0;
  const status = (code: number, reason: string, message: string) =>
    Response.json({ kind: "Status", code, reason, message }, { status: code });
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const url = new URL(req.url);
    const body = await req.json() as Record<string, unknown>;
    state.seen.push({
      method: req.method,
      path: url.pathname,
      contentType: req.headers.get("content-type"),
      body,
    });
    if (state.hold) {
      const released = Promise.withResolvers<void>();
      state.hold(released.resolve);
      await released.promise;
    }
    const code = state.fail.shift();
    if (code === 409) return status(409, "AlreadyExists", "events exists");
    if (code !== undefined) return status(code, code === 422 ? "Invalid" : "Unavailable", "no");
    const m = url.pathname.match(/^\/api\/v1\/namespaces\/([^/]+)\/events(?:\/([^/]+))?$/);
    if (!m) return status(404, "NotFound", "no such path");
    if (req.method === "POST") {
      const e = body as unknown as WireEvent;
      const key = `${m[1]}/${e.metadata.name}`;
      if (events.has(key)) return status(409, "AlreadyExists", "events exists");
      const saved = { ...e, metadata: { ...e.metadata, resourceVersion: String(++rv) } };
      events.set(key, saved);
      return Response.json(saved, { status: 201 });
    }
    const key = `${m[1]}/${m[2]}`;
    const existing = events.get(key);
    if (!existing) return status(404, "NotFound", `events "${m[2]}" not found`);
    const saved = {
      ...existing,
      ...body,
      metadata: { ...existing.metadata, resourceVersion: String(++rv) },
    } as WireEvent;
    events.set(key, saved);
    return Response.json(saved);
  });
  const addr = server.addr as Deno.NetAddr;
  return { server, events, state, url: `http://127.0.0.1:${addr.port}` };
}

/** Polls (in real time, with a bound) until `cond` holds. */
async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 2000; i++) {
    if (cond()) return;
    await new Promise((r) => setTimeout(r, 1));
  }
  assert.fail(`timed out waiting until ${what}`);
}

function setup(opts: Partial<ApiserverRecorderOptions> = {}, verbosity = 0) {
  const s = eventServer();
  const clock = new FakeClock(START);
  const lines: string[] = [];
  const client = new KubeClient({
    config: { server: s.url, insecureSkipTLSVerify: false, source: "test" },
    clock,
    qps: -1,
    userAgent: "test",
  });
  const recorder = new ApiserverEventRecorder({
    client,
    component: "kubelet",
    host: "node-a",
    qps: 0,
    burst: 100,
    clock,
    logger: createLogger({
      verbosity,
      write: (l) => lines.push(l),
      now: () => new Date(0),
      pid: 1,
    }),
    random: () => 0.5,
    ...opts,
  });
  const ctl = new AbortController();
  let running: Promise<void> | undefined;
  const start = () => {
    running = recorder.run(ctl.signal);
  };
  const close = async () => {
    ctl.abort();
    await running;
    client.close();
    await s.server.shutdown();
  };
  return { s, clock, lines, recorder, ctl, start, close, running: () => running };
}

/** A client of an apiserver nobody listens on: for recorders that never get to write. */
function unreachableClient(clock: FakeClock): KubeClient {
  return new KubeClient({
    config: { server: "http://127.0.0.1:1", insecureSkipTLSVerify: false, source: "test" },
    clock,
    qps: -1,
    userAgent: "test",
  });
}

const pod: ObjectRef = { kind: "Pod", name: "web", namespace: "default", uid: "uid-web" };
const container: ObjectRef = { ...pod, fieldPath: "spec.containers{app}" };
const node: ObjectRef = { kind: "Node", name: "node-a", uid: "node-a" };

/** {@link setup} with a recorder that yields to one pod start call in flight until `endCall`. */
function setupYielding(opts: Partial<ApiserverRecorderOptions> = {}) {
  const starts = new InFlight();
  const call = Promise.withResolvers<void>();
  const running = starts.track(() => call.promise);
  const endCall = async () => {
    call.resolve();
    await running;
  };
  return { ...setup({ yieldTo: starts, ...opts }), endCall };
}

Deno.test("ApiserverEventRecorder posts a new event, then patches its count when it repeats", async () => {
  const t = setup();
  t.start();
  try {
    t.recorder.event(container, "Normal", "Pulled", "Successfully pulled image");
    await until(() => t.s.state.seen.length === 1, "the event is posted");
    const post = t.s.state.seen[0]!;
    assert.equal(post.method, "POST");
    assert.equal(post.path, "/api/v1/namespaces/default/events");
    const name = `web.${(BigInt(START) * 1_000_000n).toString(16)}`;
    assert.deepEqual(post.body, {
      apiVersion: "v1",
      kind: "Event",
      metadata: { name, namespace: "default" },
      involvedObject: {
        kind: "Pod",
        name: "web",
        namespace: "default",
        uid: "uid-web",
        apiVersion: "v1",
        fieldPath: "spec.containers{app}",
      },
      reason: "Pulled",
      message: "Successfully pulled image",
      firstTimestamp: metaTime(START),
      lastTimestamp: metaTime(START),
      count: 1,
      type: "Normal",
      source: { component: "kubelet", host: "node-a" },
      reportingComponent: "kubelet",
      reportingInstance: "node-a",
    });
    t.clock.step(3_000);
    t.recorder.event(container, "Normal", "Pulled", "Successfully pulled image");
    await until(() => t.s.state.seen.length === 2, "the repeat is sent");
    const patch = t.s.state.seen[1]!;
    assert.equal(patch.method, "PATCH");
    assert.equal(patch.path, `/api/v1/namespaces/default/events/${name}`);
    assert.equal(patch.contentType, "application/strategic-merge-patch+json");
    assert.deepEqual(patch.body, {
      count: 2,
      lastTimestamp: metaTime(START + 3_000),
      message: "Successfully pulled image",
    });
    assert.equal(t.s.events.size, 1);
  } finally {
    await t.close();
  }
});

Deno.test("ApiserverEventRecorder files events about cluster-scoped objects in default", async () => {
  const t = setup();
  t.start();
  try {
    t.recorder.event(node, "Normal", "NodeReady", "Node node-a status is now: NodeReady");
    await until(() => t.s.state.seen.length === 1, "the event is posted");
    const post = t.s.state.seen[0]!;
    assert.equal(post.path, "/api/v1/namespaces/default/events");
    assert.deepEqual(post.body.involvedObject, {
      kind: "Node",
      name: "node-a",
      uid: "node-a",
      apiVersion: "v1",
    });
  } finally {
    await t.close();
  }
});

Deno.test("ApiserverEventRecorder creates the event anew when the patch finds it gone", async () => {
  const t = setup();
  t.start();
  try {
    t.recorder.event(pod, "Warning", "BackOff", "Back-off restarting failed container");
    await until(() => t.s.events.size === 1, "the event exists");
    t.s.events.clear();
    t.recorder.event(pod, "Warning", "BackOff", "Back-off restarting failed container");
    await until(() => t.s.events.size === 1, "the event exists again");
    assert.deepEqual(t.s.state.seen.map((r) => r.method), ["POST", "PATCH", "POST"]);
    const again = t.s.state.seen[2]!.body as unknown as WireEvent;
    assert.equal(again.count, 2);
    assert.equal(again.metadata.resourceVersion, undefined);
    assert.equal(
      again.metadata.name,
      (t.s.state.seen[0]!.body as unknown as WireEvent).metadata.name,
    );
  } finally {
    await t.close();
  }
});

Deno.test("ApiserverEventRecorder retries an unavailable apiserver with a 10 s backoff", async () => {
  const t = setup();
  t.s.state.fail = [503, 503];
  t.start();
  try {
    t.recorder.event(pod, "Normal", "Started", "Started container app");
    await until(() => t.clock.waiters === 1, "the first retry waits");
    t.clock.step(4_999);
    await new Promise((r) => setTimeout(r, 5));
    assert.equal(t.s.state.seen.length, 1, "the first pause is jittered: 0.5 × 10 s");
    t.clock.step(1);
    await until(() => t.s.state.seen.length === 2 && t.clock.waiters === 1, "the second try");
    t.clock.step(10_000);
    await until(() => t.s.events.size === 1, "the event is written");
    assert.equal(t.s.state.seen.length, 3);
    const errors = t.lines.filter((l) => l.startsWith("E"));
    assert.equal(errors.length, 2, t.lines.join("\n"));
    assert.match(errors[0] ?? "", /"Unable to write event \(may retry after sleeping\)"/);
  } finally {
    await t.close();
  }
});

Deno.test("ApiserverEventRecorder gives an event up after 12 tries and goes on", async () => {
  const t = setup();
  t.s.state.fail = Array(12).fill(503);
  t.start();
  try {
    // Two events about one pod: the second waits for the first to be written or given up.
    t.recorder.event(pod, "Normal", "Started", "Started container app");
    t.recorder.event(pod, "Normal", "Killing", "Stopping container app");
    for (let i = 1; i < 12; i++) {
      await until(() => t.s.state.seen.length === i && t.clock.waiters === 1, `try ${i}`);
      t.clock.step(10_000);
    }
    await until(() => t.s.events.size === 1, "the next event is written");
    assert.equal(t.s.state.seen.length, 13);
    assert.equal([...t.s.events.values()][0]?.reason, "Killing");
    assert.equal(t.lines.filter((l) => l.includes("retry limit exceeded!")).length, 1);
  } finally {
    await t.close();
  }
});

Deno.test("ApiserverEventRecorder writes several objects' events at once, one object's in order", async () => {
  const t = setup({ writers: 2 });
  // Every request waits until released: the writes in flight show.
  const held: (() => void)[] = [];
  t.s.state.hold = (release) => held.push(release);
  t.start();
  try {
    const a = { ...pod, name: "a", uid: "uid-a" };
    const b = { ...pod, name: "b", uid: "uid-b" };
    const c = { ...pod, name: "c", uid: "uid-c" };
    t.recorder.event(a, "Normal", "Created", "a1");
    t.recorder.event(a, "Normal", "Started", "a2");
    t.recorder.event(b, "Normal", "Started", "b1");
    t.recorder.event(c, "Normal", "Started", "c1");
    // a1 and b1 go out together; a2 waits for a1 (same pod), c1 for a free writer.
    await until(() => held.length === 2, "two writes in flight");
    await new Promise((r) => setTimeout(r, 5));
    assert.deepEqual(t.s.state.seen.map((r) => r.body.message), ["a1", "b1"]);
    held.shift()!();
    await until(() => held.length === 2, "a2 follows a1");
    assert.deepEqual(t.s.state.seen.map((r) => r.body.message), ["a1", "b1", "a2"]);
    held.shift()!();
    await until(() => held.length === 2, "c1 gets b1's writer");
    assert.deepEqual(t.s.state.seen.map((r) => r.body.message), ["a1", "b1", "a2", "c1"]);
    while (held.length > 0) held.shift()!();
    await until(() => t.s.events.size === 4, "all four are written");
  } finally {
    t.s.state.hold = undefined;
    while (held.length > 0) held.shift()!();
    await t.close();
  }
});

Deno.test("ApiserverEventRecorder abandons an event the apiserver refuses", async () => {
  const t = setup({}, 5);
  t.s.state.fail = [422, 409];
  t.start();
  try {
    t.recorder.event(pod, "Normal", "A", "refused as invalid");
    t.recorder.event(pod, "Normal", "B", "refused as existing");
    t.recorder.event(pod, "Normal", "C", "accepted");
    await until(() => t.s.events.size === 1, "the third event is written");
    assert.equal(t.s.state.seen.length, 3, "no retries");
    const rejected = t.lines.filter((l) => l.includes("Server rejected event (will not retry!)"));
    assert.deepEqual(rejected.map((l) => l[0]), ["E", "I"], "AlreadyExists is only a V(5) line");
  } finally {
    await t.close();
  }
});

Deno.test("ApiserverEventRecorder paces its writes at qps and burst", async () => {
  const t = setup({ qps: 1, burst: 1 });
  t.start();
  try {
    for (const name of ["a", "b", "c"]) {
      t.recorder.event({ ...pod, name }, "Normal", "Scheduled", "ok");
    }
    await until(() => t.s.state.seen.length === 1 && t.clock.waiters === 1, "the first write");
    await new Promise((r) => setTimeout(r, 5));
    assert.equal(t.s.state.seen.length, 1, "the second write waits for a token");
    t.clock.step(1_000);
    await until(() => t.s.state.seen.length === 2 && t.clock.waiters === 1, "the second write");
    t.clock.step(1_000);
    await until(() => t.s.state.seen.length === 3, "the third write");
  } finally {
    await t.close();
  }
});

Deno.test("ApiserverEventRecorder holds events while pod start calls are in flight", async () => {
  const t = setupYielding();
  t.start();
  try {
    t.recorder.event(container, "Normal", "Created", "Container created");
    t.recorder.event(container, "Normal", "Started", "Container started");
    await until(() => t.clock.waiters === 1, "the writer waits");
    await new Promise((r) => setTimeout(r, 5));
    assert.equal(t.s.state.seen.length, 0, "nothing written while a start call is in flight");
    assert.equal(t.recorder.pending, 2, "a held event still counts as queued");
    await t.endCall();
    await until(() => t.s.state.seen.length === 2, "both events are written");
    assert.deepEqual(t.s.state.seen.map((x) => x.body.reason), ["Created", "Started"]);
  } finally {
    await t.close();
  }
});

Deno.test("ApiserverEventRecorder holds an event at most maxYieldMs from when it was recorded", async () => {
  const t = setupYielding({ maxYieldMs: 5_000 });
  t.start();
  try {
    t.recorder.event({ ...pod, name: "a" }, "Normal", "Scheduled", "ok");
    await until(() => t.clock.waiters === 1, "the first event waits");
    t.clock.step(3_000);
    t.recorder.event({ ...pod, name: "b" }, "Normal", "Scheduled", "ok");
    t.clock.step(1_999);
    await new Promise((r) => setTimeout(r, 5));
    assert.equal(t.s.state.seen.length, 0, "4.999 s after the first event");
    t.clock.step(1);
    await until(() => t.s.state.seen.length === 1 && t.clock.waiters === 1, "the first event");
    t.clock.step(2_999);
    await new Promise((r) => setTimeout(r, 5));
    assert.equal(t.s.state.seen.length, 1, "the second waits 5 s from its own recording");
    t.clock.step(1);
    await until(() => t.s.state.seen.length === 2, "the second event");
  } finally {
    await t.endCall();
    await t.close();
  }
});

Deno.test("ApiserverEventRecorder stops on abort while holding an event, leaving it queued", async () => {
  const t = setupYielding();
  t.start();
  t.recorder.event(pod, "Normal", "Started", "Started container app");
  await until(() => t.clock.waiters === 1, "the writer waits");
  t.ctl.abort();
  await t.running();
  assert.equal(t.recorder.pending, 1);
  assert.equal(t.s.state.seen.length, 0);
  assert.equal(
    t.lines.filter((l) => l.includes("Event recorder stopped with events unsent")).length,
    1,
  );
  await t.endCall();
  await t.close();
});

Deno.test("ApiserverEventRecorder drops events beyond its queue and says so", async () => {
  const t = setup({ queueSize: 2 });
  try {
    for (const name of ["a", "b", "c"]) {
      t.recorder.event({ ...pod, name }, "Normal", "Scheduled", "ok");
    }
    assert.equal(t.recorder.dropped, 1);
    assert.equal(t.recorder.pending, 2);
    const errors = t.lines.filter((l) => l.startsWith("E"));
    assert.equal(errors.length, 1);
    assert.match(
      errors[0] ?? "",
      /"Unable to record event: too many queued events, dropped event"/,
    );
    t.start();
    await until(() => t.s.events.size === 2, "the queued events are written");
    assert.deepEqual([...t.s.events.values()].map((e) => e.involvedObject.name), ["a", "b"]);
  } finally {
    await t.close();
  }
});

Deno.test("ApiserverEventRecorder stops on abort, even between retries", async () => {
  const t = setup();
  t.s.state.fail = [503];
  t.start();
  t.recorder.event(pod, "Normal", "Started", "Started container app");
  await until(() => t.clock.waiters === 1, "the retry waits");
  t.ctl.abort();
  await t.running();
  assert.equal(t.lines.filter((l) => l.includes("broadcaster is shut down")).length, 1);
  await t.close();
});

Deno.test("ApiserverEventRecorder refuses a writer count that is not a positive integer", () => {
  const clock = new FakeClock(START);
  const client = unreachableClient(clock);
  const opts = {
    client,
    component: "kubelet",
    host: "node-a",
    qps: 0,
    burst: 100,
    clock,
    logger: createLogger({ verbosity: 0, write: () => {} }),
  };
  for (const writers of [0, 1.5]) {
    assert.throws(
      () => new ApiserverEventRecorder({ ...opts, writers }),
      new RegExp(
        `Cannot create event recorder: 'writers' must be a positive integer: current value is '${writers}'`,
      ),
    );
  }
  client.close();
});

Deno.test("ApiserverEventRecorder event never throws and run refuses a second writer", async () => {
  const clock = new FakeClock(START);
  const client = unreachableClient(clock);
  const lines: string[] = [];
  const recorder = new ApiserverEventRecorder({
    client,
    component: "kubelet",
    host: "node-a",
    qps: 0,
    burst: 100,
    clock,
    logger: createLogger({
      verbosity: 3,
      write: (l) => {
        lines.push(l);
        throw new Error("disk full");
      },
    }),
  });
  assert.doesNotThrow(() => recorder.event(pod, "Bogus" as "Normal", "X", "y"));
  assert.equal(recorder.pending, 0, "an unknown type is not sent");
  assert.match(lines[0] ?? "", /"Unsupported event type" eventType="Bogus"/);
  recorder.event(pod, "Normal", "X", "y");
  assert.equal(recorder.pending, 1, "a throwing logger does not lose the event");
  const ctl = new AbortController();
  const first = recorder.run(ctl.signal);
  await assert.rejects(recorder.run(ctl.signal), EventRecorderError);
  ctl.abort();
  await first;
  client.close();
});
