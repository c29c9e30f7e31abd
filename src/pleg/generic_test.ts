import assert from "node:assert/strict";
import { join } from "node:path";
import * as api from "../../proto/runtime/v1/api.ts";
import { FakeClock } from "../util/clock.ts";
import { CriConnection, GrpcCode } from "../cri/connection.ts";
import { type FakeRemoteRuntime, startFakeRuntime } from "../testing/fake_remote_runtime.ts";
import { createLogger } from "../klog/klog.ts";
import { GenericPLEG, type GenericPLEGOptions, type PodLifecycleEvent } from "./generic.ts";
import { KubeletMetrics } from "../metrics/metrics.ts";
import { PodCache } from "../container/pod_cache.ts";
import { RemoteRuntimeService } from "../cri/remote_runtime.ts";

const IMAGE = "docker.io/library/busybox:1.36";
const UID = "uid-web";

interface Harness extends AsyncDisposable {
  readonly fake: FakeRemoteRuntime;
  readonly runtime: RemoteRuntimeService;
  readonly cache: PodCache;
  readonly clock: FakeClock;
  readonly pleg: GenericPLEG;
  readonly logs: string[];
}

async function harness(opts: Partial<GenericPLEGOptions> = {}): Promise<Harness> {
  const dir = await Deno.makeTempDir({ prefix: "pleg-" });
  const fake = await startFakeRuntime({ preloadImages: [IMAGE], socket: join(dir, "cri.sock") });
  const connection = new CriConnection({ endpoint: fake.endpoint });
  const runtime = new RemoteRuntimeService({ connection, timeoutMs: 10_000 });
  const cache = new PodCache();
  const clock = new FakeClock();
  const logs: string[] = [];
  const logger = createLogger({ write: (l) => logs.push(l) });
  const pleg = new GenericPLEG({ runtime, cache, clock, logger, ...opts });
  return {
    fake,
    runtime,
    cache,
    clock,
    pleg,
    logs,
    async [Symbol.asyncDispose]() {
      connection.close();
      await fake.stop();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

const podLabels = {
  "io.kubernetes.pod.name": "web",
  "io.kubernetes.pod.namespace": "default",
  "io.kubernetes.pod.uid": UID,
};

function sandboxConfig(uid: string) {
  const labels = { ...podLabels, "io.kubernetes.pod.uid": uid };
  return api.PodSandboxConfig.create({
    metadata: { name: "web", namespace: "default", uid, attempt: 0 },
    labels,
  });
}

/** Creates and starts container `name` in the sandbox of pod `uid`; resolves to its id. */
async function startContainer(h: Harness, sandbox: string, name: string, uid = UID) {
  const config = sandboxConfig(uid);
  const id = await h.runtime.createContainer(
    sandbox,
    api.ContainerConfig.create({
      metadata: { name, attempt: 0 },
      image: { image: IMAGE },
      command: ["sleep", "3600"],
      labels: { ...config.labels, "io.kubernetes.container.name": name },
    }),
    config,
  );
  await h.runtime.startContainer(id);
  return id;
}

/** Runs a sandbox with kubelet labels and one started container per name. */
async function runPod(h: Harness, containers: string[] = ["main"], uid = UID) {
  const sandbox = await h.runtime.runPodSandbox(sandboxConfig(uid), "");
  const ids: string[] = [];
  for (const name of containers) ids.push(await startContainer(h, sandbox, name, uid));
  return { sandbox, ids };
}

function drain(pleg: GenericPLEG): Promise<PodLifecycleEvent[]> {
  const n = pleg.pending;
  return Promise.all(Array.from({ length: n }, () => pleg.next()));
}

Deno.test("GenericPLEG relist emits ContainerStarted and fills the cache", async () => {
  await using h = await harness();
  const { sandbox, ids } = await runPod(h);
  const waiting = h.cache.getNewerThan(UID, h.clock.now());
  h.clock.step(10);
  await h.pleg.relist();
  const events = await drain(h.pleg);
  assert.deepEqual(
    events.sort((a, b) => a.data.localeCompare(b.data)),
    [
      { id: UID, type: "ContainerStarted", data: ids[0] },
      { id: UID, type: "ContainerStarted", data: sandbox },
    ].sort((a, b) => a.data!.localeCompare(b.data!)),
  );
  const { status, error } = await waiting;
  assert.equal(error, undefined);
  assert.equal(status.name, "web");
  assert.equal(status.namespace, "default");
  assert.equal(status.sandboxStatuses[0]?.id, sandbox);
  assert.equal(status.containerStatuses[0]?.id, ids[0]);
  assert.equal(status.containerStatuses[0]?.state, api.ContainerState.CONTAINER_RUNNING);
  assert.equal(status.ips.length, 1);
  assert.equal(h.cache.timestamp, h.clock.now());
  // Nothing changed: no events and no status RPCs.
  const calls = h.fake.callCount("ContainerStatus");
  await h.pleg.relist();
  assert.equal(h.pleg.pending, 0);
  assert.equal(h.fake.callCount("ContainerStatus"), calls);
});

Deno.test("GenericPLEG relist emits ContainerDied then ContainerRemoved", async () => {
  await using h = await harness();
  const { sandbox, ids } = await runPod(h);
  const cid = ids[0]!;
  await h.pleg.relist();
  await drain(h.pleg);

  h.fake.service.exitContainer(cid, 3);
  h.clock.step(1000);
  await h.pleg.relist();
  assert.deepEqual(await drain(h.pleg), [{ id: UID, type: "ContainerDied", data: cid }]);
  const died = h.cache.get(UID).status.containerStatuses[0];
  assert.equal(died?.state, api.ContainerState.CONTAINER_EXITED);
  assert.equal(died?.exitCode, 3);

  await h.runtime.removeContainer(cid);
  await h.pleg.relist();
  assert.deepEqual(await drain(h.pleg), [{ id: UID, type: "ContainerRemoved", data: cid }]);
  assert.deepEqual(h.cache.get(UID).status.containerStatuses, []);

  // The whole pod goes: the sandbox was never seen exiting, so it dies and is removed.
  await h.runtime.stopPodSandbox(sandbox);
  await h.runtime.removePodSandbox(sandbox);
  await h.pleg.relist();
  assert.deepEqual(await drain(h.pleg), [
    { id: UID, type: "ContainerDied", data: sandbox },
    { id: UID, type: "ContainerRemoved", data: sandbox },
  ]);
  assert.equal(h.cache.get(UID).status.name, "", "the cache forgets a pod that is gone");
});

Deno.test("GenericPLEG relist retries a pod whose status could not be read", async () => {
  await using h = await harness();
  const { ids } = await runPod(h);
  h.fake.injectError("ContainerStatus", GrpcCode.UNAVAILABLE, "runtime busy");
  await h.pleg.relist();
  assert.equal(h.pleg.pending, 0, "no events before the cache holds the status");
  assert.match(String(h.cache.get(UID).error), /runtime busy/);
  await h.pleg.relist();
  assert.equal(h.pleg.pending, 2);
  assert.equal(h.cache.get(UID).error, undefined);
  assert.equal(h.cache.get(UID).status.containerStatuses[0]?.id, ids[0]);
});

Deno.test("GenericPLEG healthy turns false after the relist threshold", async () => {
  await using h = await harness();
  assert.deepEqual(h.pleg.healthy(), { ok: false, message: "pleg has yet to be successful" });
  await h.pleg.relist();
  assert.deepEqual(h.pleg.healthy(), { ok: true, message: "" });
  h.clock.step(180_000);
  assert.equal(h.pleg.healthy().ok, true);
  h.clock.step(1);
  assert.deepEqual(h.pleg.healthy(), {
    ok: false,
    message: "pleg was last seen active 3m0.001s ago; threshold is 3m0s",
  });
  // A failed relist does not count as activity.
  h.fake.injectError("ListPodSandbox", GrpcCode.UNAVAILABLE, "down");
  await h.pleg.relist();
  assert.equal(h.pleg.healthy().ok, false);
  assert.ok(h.logs.some((l) => l.includes("GenericPLEG: Unable to retrieve pods")));
});

Deno.test("GenericPLEG drops and counts events of pods not queued when the queue is full, with a log line", async () => {
  await using h = await harness({ capacity: 1 });
  await runPod(h, ["a"], "pod-1");
  await runPod(h, ["a"], "pod-2");
  await runPod(h, ["a"], "pod-3");
  await h.pleg.relist();
  assert.equal(h.pleg.pending, 1);
  // Each pod has two events (sandbox and container started): the first pod's second one folds,
  // and there is nothing to fold for the other pods.
  assert.equal(h.pleg.foldedEvents, 1);
  assert.equal(h.pleg.droppedEvents, 4);
  const lines = h.logs.filter((l) =>
    l.includes("Event channel is full, discard this relist() cycle event")
  );
  assert.equal(lines.length, 4);
  assert.match(lines[3]!, /droppedEvents=4/);
});

Deno.test("GenericPLEG folds events of a pod already queued when full, so a burst loses no pod", async () => {
  // Two events per pod, capacity for one per pod: without folding half the pods would be lost
  // until their resync.
  await using h = await harness({ capacity: 3 });
  for (const uid of ["p1", "p2", "p3"]) await runPod(h, ["a"], uid);
  await h.pleg.relist();
  assert.equal(h.pleg.droppedEvents, 0);
  assert.equal(h.pleg.foldedEvents, 3);
  assert.equal(h.pleg.pending, 3);
  const events = await drain(h.pleg);
  assert.deepEqual(new Set(events.map((e) => e.id)), new Set(["p1", "p2", "p3"]));
  // Dequeued pods no longer fold: the next change of p1 is queued, not folded.
  await h.runtime.stopPodSandbox(
    (await h.runtime.listPodSandbox()).find((s) => s.metadata?.uid === "p1")!.id,
  );
  await h.pleg.relist();
  assert.ok(h.pleg.pending > 0);
  assert.equal(h.pleg.droppedEvents, 0);
});

Deno.test("GenericPLEG.takeQueued takes the queue in order, after which pods fold afresh", async () => {
  await using h = await harness({ capacity: 3 });
  for (const uid of ["p1", "p2", "p3"]) await runPod(h, ["a"], uid);
  await h.pleg.relist();
  const taken = h.pleg.takeQueued();
  assert.deepEqual(new Set(taken.map((e) => e.id)), new Set(["p1", "p2", "p3"]));
  assert.equal(h.pleg.pending, 0);
  assert.deepEqual(h.pleg.takeQueued(), []);
  // Taken pods no longer count as queued: with the queue full, p1's next event takes the place
  // of one of x1's two rather than being folded into an event no longer there.
  h.pleg.send({ id: "x1", type: "ContainerStarted", data: "s" });
  h.pleg.send({ id: "x1", type: "ContainerStarted", data: "c" });
  h.pleg.send({ id: "x2", type: "ContainerStarted", data: "s" });
  h.pleg.send({ id: "p1", type: "ContainerDied", data: "a" });
  assert.deepEqual(h.pleg.takeQueued().map((e) => e.id), ["x1", "x2", "p1"]);
});

Deno.test("GenericPLEG watch yields events as relists produce them", async () => {
  await using h = await harness();
  const ac = new AbortController();
  const seen: PodLifecycleEvent[] = [];
  const consumer = (async () => {
    for await (const e of h.pleg.watch(ac.signal)) seen.push(e);
  })();
  const { ids } = await runPod(h);
  await h.pleg.relist();
  h.fake.service.exitContainer(ids[0]!, 0);
  await h.pleg.relist();
  await Promise.resolve();
  ac.abort();
  await consumer;
  assert.deepEqual(seen.map((e) => e.type), [
    "ContainerStarted",
    "ContainerStarted",
    "ContainerDied",
  ]);
});

Deno.test("GenericPLEG run relists every period and stops on abort", async () => {
  await using h = await harness({ relistPeriodMs: 1000 });
  const ac = new AbortController();
  const running = h.pleg.run(ac.signal);
  const untilSleeping = async () => {
    for (let i = 0; i < 500 && h.clock.waiters === 0; i++) {
      await new Promise((r) => setTimeout(r, 2));
    }
    assert.equal(h.clock.waiters, 1);
  };
  await untilSleeping();
  assert.equal(h.fake.callCount("ListPodSandbox"), 1);
  h.clock.step(1000);
  await untilSleeping();
  assert.equal(h.fake.callCount("ListPodSandbox"), 2);
  ac.abort();
  await running;
  assert.equal(h.clock.waiters, 0);
  assert.equal(h.fake.callCount("ListPodSandbox"), 2);
});

Deno.test("GenericPLEG.poke relists at once instead of after the period", async () => {
  await using h = await harness();
  const ctrl = new AbortController();
  let relists = 0;
  const orig = h.runtime.listPodSandbox.bind(h.runtime);
  h.runtime.listPodSandbox = (filter, signal) => {
    relists++;
    return orig(filter, signal);
  };
  const running = h.pleg.run(ctrl.signal);
  const settle = async () => {
    for (let i = 0; i < 20; i++) await new Promise((r) => setTimeout(r, 1));
  };
  await settle();
  assert.equal(relists, 1);
  h.pleg.poke();
  await settle();
  assert.equal(relists, 2, "poke ended the wait");
  // A poke while a relist runs is kept for when it ends.
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  h.runtime.listPodSandbox = async (filter, signal) => {
    relists++;
    await gate;
    return orig(filter, signal);
  };
  h.pleg.poke();
  await settle();
  assert.equal(relists, 3);
  h.pleg.poke();
  release();
  await settle();
  assert.equal(relists, 4, "the poke during the relist was not lost");
  await settle();
  assert.equal(relists, 4, "and no more relists until the period or a poke");
  ctrl.abort();
  await running;
});

Deno.test("GenericPLEG.podIds lists the pods the last relist saw", async () => {
  await using h = await harness();
  assert.deepEqual(h.pleg.podIds(), []);
  await runPod(h);
  await h.pleg.relist();
  assert.deepEqual(h.pleg.podIds(), [UID]);
});

Deno.test("GenericPLEG relist records its duration and interval and the running pods and containers", async () => {
  const metrics = new KubeletMetrics({ process: false });
  await using h = await harness({ metrics });
  const { ids } = await runPod(h, ["a", "b"]);
  await h.pleg.relist();
  assert.equal(metrics.plegRelistDuration.count(), 1);
  assert.equal(metrics.plegRelistInterval.count(), 0);
  assert.equal(metrics.runningPods.get(), 1);
  assert.equal(metrics.runningContainers.get({ container_state: "running" }), 2);
  await h.runtime.stopContainer(ids[0]!, 0);
  h.clock.step(1_500);
  await h.pleg.relist();
  assert.equal(metrics.plegRelistInterval.count(), 1);
  assert.match(
    await metrics.render(),
    /^kubelet_pleg_relist_interval_seconds_sum 1\.5$/m,
  );
  assert.equal(metrics.runningContainers.get({ container_state: "running" }), 1);
  assert.equal(metrics.runningContainers.get({ container_state: "exited" }), 1);
  h.pleg.healthy();
  assert.equal(metrics.plegLastSeen.get(), Math.floor(h.clock.now() / 1000));
});

Deno.test("GenericPLEG.inspectPod reads one pod into the cache and sends its events", async () => {
  await using h = await harness();
  const { sandbox, ids } = await runPod(h);
  await runPod(h, ["other"], "uid-other");
  h.clock.step(10);
  const lists = h.fake.callCount("ListContainers");
  assert.equal(await h.pleg.inspectPod(UID, { after: h.clock.now() }), true);
  assert.equal(h.fake.callCount("ListContainers"), lists + 1, "one filtered list, no relist");
  assert.deepEqual(
    (await drain(h.pleg)).map((e) => [e.id, e.type, e.data]).sort(),
    [
      [UID, "ContainerStarted", ids[0]],
      [UID, "ContainerStarted", sandbox],
    ].sort(),
  );
  // Stamped after `after` although fake time stood still: the pod's next sync takes it.
  const { status } = await h.cache.getNewerThan(UID, h.clock.now());
  assert.equal(status.containerStatuses[0]?.id, ids[0]);
  assert.equal(status.containerStatuses[0]?.state, api.ContainerState.CONTAINER_RUNNING);
  assert.equal(status.ips.length, 1);
  assert.deepEqual(h.cache.uids(), [UID], "the other pod is left to the relist");
});

Deno.test("GenericPLEG.inspectPod sends what changed since the last relist, which then does not repeat it", async () => {
  await using h = await harness();
  const { sandbox } = await runPod(h, []);
  await h.pleg.relist();
  assert.deepEqual(await drain(h.pleg), [{ id: UID, type: "ContainerStarted", data: sandbox }]);
  const main = await startContainer(h, sandbox, "main");
  await runPod(h, ["other"], "uid-other");
  h.clock.step(10);
  assert.equal(await h.pleg.inspectPod(UID, { after: h.clock.now() }), true);
  assert.deepEqual(await drain(h.pleg), [
    { id: UID, type: "ContainerStarted", data: main },
  ], "the sandbox the relist reported is not reported again");
  const statuses = h.fake.callCount("ContainerStatus") + h.fake.callCount("PodSandboxStatus");
  await h.pleg.relist();
  const events = await drain(h.pleg);
  assert.deepEqual(events.filter((e) => e.id === UID), [], "the inspection reported the pod");
  assert.ok(events.some((e) => e.id === "uid-other"), "the other pod is new to the relist");
  assert.equal(
    h.fake.callCount("ContainerStatus") + h.fake.callCount("PodSandboxStatus"),
    statuses + 2,
    "only the other pod's sandbox and container are read",
  );
});

/** Calls a {@link heldPleg} can hold. */
type HeldCall = "relist lists" | "inspection lists" | "sandbox status";

/**
 * A PLEG over `h`'s runtime that holds the answer of the first call of kind `at` made after
 * `hold()`: the call is made at once, its answer given once `release()` is called.
 */
function heldPleg(h: Harness, at: HeldCall) {
  let held:
    | { reached: PromiseWithResolvers<void>; release: PromiseWithResolvers<void> }
    | undefined;
  const answer = async <T>(kind: HeldCall, call: Promise<T>): Promise<T> => {
    const result = await call;
    const mine = kind === at ? held : undefined;
    if (mine) {
      held = undefined;
      mine.reached.resolve();
      await mine.release.promise;
    }
    return result;
  };
  const list = (filter: unknown): HeldCall =>
    filter === undefined ? "relist lists" : "inspection lists";
  const runtime = h.runtime;
  const pleg = new GenericPLEG({
    runtime: {
      listPodSandbox: (f, s) => answer(list(f), runtime.listPodSandbox(f, s)),
      listContainers: (f, s) => answer(list(f), runtime.listContainers(f, s)),
      containerStatus: (...a) => runtime.containerStatus(...a),
      podSandboxStatus: (...a) => answer("sandbox status", runtime.podSandboxStatus(...a)),
    },
    cache: h.cache,
    clock: h.clock,
  });
  return {
    pleg,
    /** Holds the next call; `reached` resolves once it is answered and held. */
    hold(): { reached: Promise<void>; release: () => void } {
      const mine = held = {
        reached: Promise.withResolvers<void>(),
        release: Promise.withResolvers<void>(),
      };
      return { reached: mine.reached.promise, release: () => mine.release.resolve() };
    },
  };
}

Deno.test("GenericPLEG relist whose list predates an inspection reports nothing for the inspected pod", async () => {
  await using h = await harness();
  const { pleg, hold } = heldPleg(h, "relist lists");
  const lists = hold();
  const relist = pleg.relist();
  await lists.reached;
  // Started after the relist listed: against the inspection, its list shows the pod removed.
  const { sandbox, ids } = await runPod(h);
  assert.equal(await pleg.inspectPod(UID), true);
  assert.deepEqual(
    (await drain(pleg)).map((e) => [e.type, e.data]).sort(),
    [
      ["ContainerStarted", ids[0]],
      ["ContainerStarted", sandbox],
    ].sort(),
  );
  lists.release();
  await relist;
  assert.deepEqual(await drain(pleg), [], "no ContainerDied or ContainerRemoved");
  await pleg.relist();
  assert.deepEqual(await drain(pleg), []);
  assert.deepEqual(pleg.podIds(), [UID]);
});

Deno.test("GenericPLEG relist keeps the record of an inspection that listed after it", async () => {
  await using h = await harness();
  const { pleg, hold } = heldPleg(h, "sandbox status");
  const [main] = (await runPod(h)).ids as [string];
  // The relist lists the container running, then waits on the pod's status.
  const status = hold();
  const relist = pleg.relist();
  await status.reached;
  await h.runtime.stopContainer(main, 0);
  h.clock.step(10);
  assert.equal(await pleg.inspectPod(UID), true);
  assert.ok((await drain(pleg)).some((e) => e.type === "ContainerDied" && e.data === main));
  status.release();
  await relist;
  await drain(pleg);
  // The record is the inspection's (exited), not the relist's (running): no second death.
  await pleg.relist();
  assert.deepEqual(await drain(pleg), []);
});

Deno.test("GenericPLEG.inspectPod whose list predates a relist's leaves the record to it", async () => {
  await using h = await harness();
  const { pleg, hold } = heldPleg(h, "inspection lists");
  const { ids } = await runPod(h);
  const lists = hold();
  const inspection = pleg.inspectPod(UID);
  await lists.reached;
  await pleg.relist();
  assert.equal((await drain(pleg)).length, 2, "the relist reports sandbox and container");
  lists.release();
  assert.equal(await inspection, true);
  assert.deepEqual(await drain(pleg), [{ id: UID, type: "ContainerStarted", data: ids[0] }]);
  await pleg.relist();
  assert.deepEqual(await drain(pleg), []);
});

Deno.test("GenericPLEG.inspectPod of a pod the runtime does not have changes nothing", async () => {
  await using h = await harness();
  assert.equal(await h.pleg.inspectPod("uid-none"), false);
  assert.equal(h.pleg.pending, 0);
  assert.deepEqual(h.cache.uids(), []);
});

Deno.test("GenericPLEG relist keeps a status an inspection read after the relist began", async () => {
  await using h = await harness();
  const { pleg, hold } = heldPleg(h, "sandbox status");
  await runPod(h);
  h.clock.step(10);
  const status = hold();
  const relist = pleg.relist();
  await status.reached;
  h.clock.step(10);
  assert.equal(await pleg.inspectPod(UID), true);
  const inspectedAt = h.clock.now();
  status.release();
  await relist;
  const newer = await Promise.race([
    h.cache.getNewerThan(UID, inspectedAt - 1).then(() => "inspected status kept"),
    new Promise((r) => setTimeout(() => r("overwritten by the relist's older read"), 50)),
  ]);
  assert.equal(newer, "inspected status kept");
});

Deno.test("GenericPLEG.inspectPod observes kubelet_pleg_pod_relist_duration_seconds, failed or not", async () => {
  const clock = new FakeClock();
  const metrics = new KubeletMetrics({ process: false });
  let fail = false;
  const runtime = {
    // The listing takes 250 ms of fake time, or fails.
    listPodSandbox: async () => {
      await clock.sleep(250);
      if (fail) throw new Error("rpc error: code = Unavailable desc = connection refused");
      return [];
    },
    listContainers: () => Promise.resolve([]),
    podSandboxStatus: () => Promise.reject(new Error("unused")),
    containerStatus: () => Promise.reject(new Error("unused")),
  };
  const logger = createLogger({ write: () => {} });
  const pleg = new GenericPLEG({ runtime, cache: new PodCache(), clock, logger, metrics });
  const inspect = async () => {
    const done = pleg.inspectPod(UID);
    while (clock.waiters === 0) await new Promise((r) => setTimeout(r, 0));
    clock.step(250);
    return await done;
  };
  const d = metrics.plegPodRelistDuration;
  assert.equal(await inspect(), false);
  assert.equal(d.count(), 1);
  fail = true;
  assert.equal(await inspect(), false);
  assert.equal(d.count(), 2, "a failed inspection is timed too");
  assert.match(await metrics.render(), /^kubelet_pleg_pod_relist_duration_seconds_sum 0\.5$/m);
  assert.match(
    await metrics.render(),
    /^kubelet_pleg_pod_relist_duration_seconds_bucket\{le="0\.25"\} 2$/m,
  );
});
