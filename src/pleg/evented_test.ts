import assert from "node:assert/strict";
import { join } from "node:path";
import * as api from "../../proto/runtime/v1/api.ts";
import { FakeClock } from "../util/clock.ts";
import { CriConnection, GrpcCode } from "../cri/connection.ts";
import {
  EVENTED_RELIST_PERIOD_MS,
  EventedPLEG,
  GLOBAL_CACHE_UPDATE_PERIOD_MS,
  STREAM_SETTLE_MS,
} from "./evented.ts";
import { type FakeRemoteRuntime, startFakeRuntime } from "../testing/fake_remote_runtime.ts";
import { createLogger } from "../klog/klog.ts";
import { GenericPLEG, type PodLifecycleEvent } from "./generic.ts";
import { PodCache } from "../container/pod_cache.ts";
import { RemoteRuntimeService } from "../cri/remote_runtime.ts";
import { KubeletMetrics } from "../metrics/metrics.ts";

const IMAGE = "docker.io/library/busybox:1.36";
const UID = "uid-web";
const podLabels = {
  "io.kubernetes.pod.name": "web",
  "io.kubernetes.pod.namespace": "default",
  "io.kubernetes.pod.uid": UID,
};

interface Harness extends AsyncDisposable {
  readonly fake: FakeRemoteRuntime;
  readonly runtime: RemoteRuntimeService;
  readonly cache: PodCache;
  readonly clock: FakeClock;
  readonly generic: GenericPLEG;
  readonly pleg: EventedPLEG;
  readonly logs: string[];
  readonly events: PodLifecycleEvent[];
}

/** A fake runtime on the fake clock, and an evented PLEG running against it. */
async function harness(): Promise<Harness> {
  const dir = await Deno.makeTempDir({ prefix: "evented-pleg-" });
  const clock = new FakeClock(Date.UTC(2026, 0, 1));
  const fake = await startFakeRuntime({
    preloadImages: [IMAGE],
    socket: join(dir, "cri.sock"),
    clock,
  });
  const connection = new CriConnection({ endpoint: fake.endpoint });
  const runtime = new RemoteRuntimeService({ connection, timeoutMs: 10_000 });
  const cache = new PodCache();
  const logs: string[] = [];
  const logger = createLogger({ write: (l) => logs.push(l), verbosity: 4 });
  const generic = new GenericPLEG({ runtime, cache, clock, logger });
  const pleg = new EventedPLEG({ runtime, cache, generic, clock, logger });
  const ctl = new AbortController();
  const running = pleg.run(ctl.signal);
  const events: PodLifecycleEvent[] = [];
  const consuming = (async () => {
    for await (const e of pleg.watch(ctl.signal)) events.push(e);
  })();
  return {
    fake,
    runtime,
    cache,
    clock,
    generic,
    pleg,
    logs,
    events,
    async [Symbol.asyncDispose]() {
      ctl.abort();
      await Promise.all([running, consuming]);
      connection.close();
      await fake.stop();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** Real-time wait for something the fake runtime's gRPC round trips deliver. */
async function until(what: string, cond: () => boolean): Promise<void> {
  const end = Date.now() + 5_000;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** Opens the stream and lets it settle: one relist, then the long period. */
async function settle(h: Harness): Promise<void> {
  await until("the event stream", () => h.fake.eventStreams === 1);
  await until("the settle wait", () => h.clock.waiters >= 3);
  h.clock.step(STREAM_SETTLE_MS);
  await until("events in use", () => h.pleg.inUse);
  // A relist the same clock step started may still be queued: let it end first.
  await h.pleg.relist();
}

async function runPod(h: Harness): Promise<{ sandbox: string; container: string }> {
  const config = api.PodSandboxConfig.create({
    metadata: { name: "web", namespace: "default", uid: UID, attempt: 0 },
    labels: podLabels,
  });
  const sandbox = await h.runtime.runPodSandbox(config, "");
  const container = await h.runtime.createContainer(
    sandbox,
    api.ContainerConfig.create({
      metadata: { name: "main", attempt: 0 },
      image: { image: IMAGE },
      command: ["sleep", "3600"],
      labels: { ...podLabels, "io.kubernetes.container.name": "main" },
    }),
    config,
  );
  await h.runtime.startContainer(container);
  return { sandbox, container };
}

const has = (events: PodLifecycleEvent[], type: string, data: string) =>
  events.some((e) => e.id === UID && e.type === type && e.data === data);

Deno.test("EventedPLEG: a container exit reaches the cache and the sync loop with no relist and no clock step", async () => {
  await using h = await harness();
  await settle(h);
  assert.equal(h.generic.relistPeriodMs, EVENTED_RELIST_PERIOD_MS);
  const { sandbox, container } = await runPod(h);
  await until("ContainerStarted", () => has(h.events, "ContainerStarted", container));
  assert.ok(has(h.events, "ContainerStarted", sandbox), "the sandbox start is an event too");
  const lists = h.fake.callCount("ListContainers");

  const before = h.clock.now();
  h.fake.service.exitContainer(container, 137, "OOMKilled");
  await until("ContainerDied", () => has(h.events, "ContainerDied", container));
  assert.equal(h.clock.now(), before, "no time had to pass");
  assert.equal(h.fake.callCount("ListContainers"), lists, "no relist was needed");
  const { status } = h.cache.get(UID);
  const c = status.containerStatuses.find((s) => s.id === container);
  assert.equal(c?.state, api.ContainerState.CONTAINER_EXITED);
  assert.equal(c?.exitCode, 137);
  assert.equal(c?.reason, "OOMKilled");
  assert.equal(status.name, "web");
  assert.equal(status.ips.length, 1, "the pod IP comes from the sandbox status in the event");
  assert.deepEqual(h.pleg.podIds(), [UID]);

  // A pod worker waiting on the cache is woken by the global tick at least every 2 s.
  const waiting = h.cache.getNewerThan("uid-quiet", h.clock.now());
  h.clock.step(GLOBAL_CACHE_UPDATE_PERIOD_MS);
  await waiting;
});

Deno.test("EventedPLEG.inspectPod reads the pod now and stamps it after the sync, events or not", async () => {
  await using h = await harness();
  await settle(h);
  const { container } = await runPod(h);
  await until("ContainerStarted", () => has(h.events, "ContainerStarted", container));
  // The sync that started it ends later than the event's stamp: a worker waiting for a status
  // newer than that end gets one from the inspection, not from the 2 s cache tick.
  const syncEnd = h.clock.now() + 5;
  const waiting = h.cache.getNewerThan(UID, syncEnd);
  assert.equal(await h.pleg.inspectPod(UID, { after: syncEnd }), true);
  // No clock step: only the inspection can satisfy the waiter.
  let timer: ReturnType<typeof setTimeout> | undefined;
  const entry = await Promise.race([
    waiting,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error("the waiter was not woken")), 2_000);
    }),
  ]).finally(() => clearTimeout(timer));
  assert.equal(entry.status.containerStatuses[0]?.id, container);
  // After a resize (no state changed) it asks for a sync anyway.
  const n = h.events.length;
  assert.equal(await h.pleg.inspectPod(UID, { sync: true }), true);
  await until("PodSync", () => h.events.slice(n).some((e) => e.type === "PodSync"));
});

Deno.test("EventedPLEG: when the stream is cut, relisting every second takes over and still reports the exit; events come back", async () => {
  await using h = await harness();
  await settle(h);
  const { container } = await runPod(h);
  await until("ContainerStarted", () => has(h.events, "ContainerStarted", container));

  // The stream breaks and cannot be opened again for a while.
  h.fake.injectError("GetContainerEvents", GrpcCode.UNAVAILABLE, "connection refused", 100);
  assert.equal(h.fake.cutEventStreams(), 1);
  await until("the fall-back", () => !h.pleg.inUse && h.generic.relistPeriodMs === 1_000);
  assert.ok(h.logs.some((l) => l.includes("Failed to get container events")));
  // The relist the fall-back asked for ends before the exit, so only a later one can see it.
  await h.pleg.relist();

  h.fake.service.exitContainer(container, 1);
  await new Promise((r) => setTimeout(r, 20));
  assert.ok(!has(h.events, "ContainerDied", container), "no event stream: nothing yet");
  const lists = h.fake.callCount("ListContainers");
  await until("the relist wait", () => h.clock.waiters >= 3);
  h.clock.step(1_000);
  await until("ContainerDied by relist", () => has(h.events, "ContainerDied", container));
  assert.ok(h.fake.callCount("ListContainers") > lists);
  assert.equal(h.cache.get(UID).status.containerStatuses[0]?.exitCode, 1);

  // The runtime serves events again: after the retry backoff the stream reopens and settles.
  h.fake.clearErrors();
  for (let i = 0; i < 40 && !h.pleg.inUse; i++) {
    h.clock.step(1_000);
    await new Promise((r) => setTimeout(r, 5));
  }
  assert.ok(h.pleg.inUse, "events are in use again");
  assert.equal(h.generic.relistPeriodMs, EVENTED_RELIST_PERIOD_MS);
});

Deno.test("EventedPLEG: a runtime without GetContainerEvents is said once and the PLEG keeps relisting", async () => {
  await using h = await harness();
  h.fake.injectError("GetContainerEvents", GrpcCode.UNIMPLEMENTED, "unknown method", 100);
  await until("the fall-back", () => h.pleg.unsupported);
  for (let i = 0; i < 5; i++) {
    h.clock.step(30_000);
    await new Promise((r) => setTimeout(r, 5));
  }
  assert.equal(h.fake.callCount("GetContainerEvents"), 1, "never asked again");
  assert.equal(h.generic.relistPeriodMs, 1_000);
  assert.equal(
    h.logs.filter((l) => l.includes("does not serve CRI GetContainerEvents")).length,
    1,
  );
  const { container } = await runPod(h);
  h.clock.step(1_000);
  await until("ContainerStarted by relist", () => has(h.events, "ContainerStarted", container));
});

/** A runtime with no pods for the relisting PLEG, for tests that drive events by hand. */
const EMPTY_RUNTIME = {
  listPodSandbox: () => Promise.resolve([]),
  listContainers: () => Promise.resolve([]),
  podSandboxStatus: () => Promise.reject(new Error("unused")),
  containerStatus: () => Promise.reject(new Error("unused")),
};

function event(
  type: api.ContainerEventType,
  containerId: string,
  createdAtMs: number,
  opts: { withStatus?: boolean; sandboxId?: string } = {},
): api.ContainerEventResponse {
  const sandboxId = opts.sandboxId ?? "sb1";
  return api.ContainerEventResponse.create({
    containerId,
    containerEventType: type,
    createdAt: BigInt(createdAtMs) * 1_000_000n,
    podSandboxStatus: {
      id: sandboxId,
      metadata: { name: "web", namespace: "default", uid: UID, attempt: 0 },
      state: api.PodSandboxState.SANDBOX_READY,
      network: { ip: "10.88.0.9", additionalIps: [] },
    },
    containersStatuses: opts.withStatus === false ? [] : [
      api.ContainerStatus.create({
        id: containerId === sandboxId ? "c1" : containerId,
        state: api.ContainerState.CONTAINER_RUNNING,
      }),
    ],
  });
}

Deno.test("EventedPLEG.process: older events do not overwrite the cache, a deleted sandbox drops the pod, odd events are handled", async () => {
  const clock = new FakeClock(10_000);
  const cache = new PodCache();
  const logs: string[] = [];
  const logger = createLogger({ write: (l) => logs.push(l), verbosity: 4 });
  const generic = new GenericPLEG({ runtime: EMPTY_RUNTIME, cache, clock, logger });
  const pleg = new EventedPLEG({
    runtime: { getContainerEvents: () => (async function* () {})() },
    cache,
    generic,
    clock,
    logger,
  });
  const T = api.ContainerEventType;

  pleg.process(event(T.CONTAINER_STARTED_EVENT, "c1", 5_000));
  assert.deepEqual(await generic.next(), { id: UID, type: "ContainerStarted", data: "c1" });
  assert.equal(cache.get(UID).status.ips[0], "10.88.0.9");

  // An event older than what the cache holds changes nothing and is not sent.
  pleg.process(event(T.CONTAINER_STOPPED_EVENT, "c1", 4_000));
  assert.equal(generic.pending, 0);
  assert.equal(cache.get(UID).status.timestamp, 5_000);

  // CREATED only updates the cache.
  pleg.process(event(T.CONTAINER_CREATED_EVENT, "c1", 6_000));
  assert.equal(generic.pending, 0);
  assert.equal(cache.get(UID).status.timestamp, 6_000);

  // An event without the container's status: a relist is asked for instead.
  pleg.process(event(T.CONTAINER_STOPPED_EVENT, "c2", 7_000, { withStatus: false }));
  assert.equal(generic.pending, 0);
  assert.ok(logs.some((l) => l.includes("event without the container's status")));

  // No sandbox status: logged, ignored.
  pleg.process(api.ContainerEventResponse.create({ containerId: "c3" }));
  assert.ok(logs.some((l) => l.includes("nil PodSandboxStatus")));

  // The sandbox deleted: the pod leaves the cache; Died and Removed are sent.
  pleg.process(event(T.CONTAINER_DELETED_EVENT, "sb1", 8_000));
  assert.deepEqual(await generic.next(), { id: UID, type: "ContainerDied", data: "sb1" });
  assert.deepEqual(await generic.next(), { id: UID, type: "ContainerRemoved", data: "sb1" });
  assert.deepEqual(cache.uids(), []);
  assert.equal(pleg.eventsReceived, 6);
});

Deno.test("EventedPLEG counts each stream opened and each that failed, and each event's age on arrival", async () => {
  const clock = new FakeClock(10_000);
  const cache = new PodCache();
  const logger = createLogger({ write: () => {} });
  const generic = new GenericPLEG({ runtime: EMPTY_RUNTIME, cache, clock, logger });
  const metrics = new KubeletMetrics({ process: false });
  const cut = Promise.withResolvers<void>();
  const T = api.ContainerEventType;
  // The first stream brings two events, 0.3 s and 1.2 s old, then breaks; later ones stay open.
  const streams = [async function* () {
    yield event(T.CONTAINER_STARTED_EVENT, "c1", 9_700);
    yield event(T.CONTAINER_STARTED_EVENT, "c2", 8_800);
    await cut.promise;
    throw new Error("transport is closing");
  }];
  const pleg = new EventedPLEG({
    runtime: {
      getContainerEvents: (signal) =>
        (streams.shift() ?? async function* () {
          await new Promise((r) => signal?.addEventListener("abort", r, { once: true }));
          yield* [];
        })(),
    },
    cache,
    generic,
    clock,
    logger,
    metrics,
  });
  const ctl = new AbortController();
  const running = pleg.run(ctl.signal);
  const counts = () => [
    metrics.eventedPlegConn.get(),
    metrics.eventedPlegConnErr.get(),
    metrics.eventedPlegConnLatency.count(),
  ];
  await until("two events", () => metrics.eventedPlegConnLatency.count() === 2);
  assert.deepEqual(counts(), [1, 0, 2]);
  assert.match(
    await metrics.render(),
    /^kubelet_evented_pleg_connection_latency_seconds_sum 1\.5$/m,
  );
  cut.resolve();
  await until("the failure", () => metrics.eventedPlegConnErr.get() === 1);
  // The stream is opened again after the retry backoff (1 s).
  for (let i = 0; i < 40 && metrics.eventedPlegConn.get() < 2; i++) {
    clock.step(1_000);
    await new Promise((r) => setTimeout(r, 5));
  }
  assert.equal(metrics.eventedPlegConn.get(), 2, "the second stream");
  ctl.abort();
  await running;
  assert.deepEqual(counts(), [2, 1, 2], "a stream closed by the kubelet itself is no error");
});

Deno.test("EventedPLEG skips the backlog a runtime sends from before the stream opened", async () => {
  const clock = new FakeClock(10_000);
  const cache = new PodCache();
  const logs: string[] = [];
  const logger = createLogger({ write: (l) => logs.push(l), verbosity: 0 });
  const generic = new GenericPLEG({ runtime: EMPTY_RUNTIME, cache, clock, logger });
  const T = api.ContainerEventType;
  // containerd keeps up to 1000 events for the next subscriber: here 1500 from 5 s before the
  // stream opened (at 10 s; a second's margin is allowed for the runtime's clock).
  const pleg = new EventedPLEG({
    runtime: {
      getContainerEvents: (signal) =>
        (async function* () {
          for (let i = 0; i < 1500; i++) {
            yield event(T.CONTAINER_STARTED_EVENT, `old-${i}`, 5_000 + i);
          }
          yield event(T.CONTAINER_STARTED_EVENT, "new", 10_001);
          await new Promise((r) => signal?.addEventListener("abort", r, { once: true }));
        })(),
    },
    cache,
    generic,
    clock,
    logger,
  });
  const ctl = new AbortController();
  const running = pleg.run(ctl.signal);
  try {
    await until("every event", () => pleg.eventsReceived === 1501);
    assert.equal(generic.pending, 1, "only the event from after the stream opened is sent");
    assert.deepEqual(await generic.next(), { id: UID, type: "ContainerStarted", data: "new" });
    assert.equal(pleg.healthy().ok, true);
    await until("the settle wait", () => clock.waiters >= 3);
    clock.step(STREAM_SETTLE_MS);
    await until("events in use", () => pleg.inUse);
    assert.ok(
      logs.some((l) =>
        l.includes(
          '"Evented PLEG: skipped events the runtime sent from before the stream opened"',
        ) &&
        l.includes("count=1500")
      ),
      logs.join("\n"),
    );
  } finally {
    ctl.abort();
    await running;
  }
});
