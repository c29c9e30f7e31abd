import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import { FakeClock } from "./util/clock.ts";
import { createLogger } from "./klog/klog.ts";
import { type SyncHandler, SyncLoop, type SyncLoopOptions } from "./kubelet_sync_loop.ts";
import type { PodLifecycleEvent } from "./pleg/generic.ts";
import { loopHeapGrowth } from "./testing/loop_heap.ts";

const logger = createLogger({ write: () => {}, pid: 1 });

function pod(name: string): V1Pod {
  return { metadata: { name, namespace: "default", uid: `uid-${name}` } };
}

/** A handler that records what it is called with, as "<step>:<pod names>". */
class RecordingHandler implements SyncHandler {
  calls: string[] = [];
  /** The PLEG batches, each as its events joined. */
  batches: string[] = [];
  due: V1Pod[] = [];
  cleanupError: Error | undefined;
  #rec(step: string, pods: readonly V1Pod[]) {
    this.calls.push(`${step}:${pods.map((p) => p.metadata?.name).join(",")}`);
  }
  handlePodAdditions(pods: readonly V1Pod[]): void | Promise<void> {
    this.#rec("add", pods);
  }
  handlePodUpdates(pods: readonly V1Pod[]) {
    this.#rec("update", pods);
  }
  handlePodRemoves(pods: readonly V1Pod[]) {
    this.#rec("remove", pods);
  }
  handlePodReconcile(pods: readonly V1Pod[]) {
    this.#rec("reconcile", pods);
  }
  handlePodSyncs(pods: readonly V1Pod[]) {
    this.#rec("sync", pods);
  }
  handlePlegEvents(events: readonly PodLifecycleEvent[]) {
    for (const e of events) this.calls.push(`pleg:${e.id}:${e.type}`);
    this.batches.push(events.map((e) => `${e.id}:${e.type}`).join(","));
  }
  handleProbeUpdate(uid: string) {
    this.calls.push(`probe:${uid}`);
  }
  podsToSync(): V1Pod[] {
    const d = this.due;
    this.due = [];
    return d;
  }
  handlePodCleanups(): Promise<void> {
    this.calls.push("cleanup");
    return this.cleanupError ? Promise.reject(this.cleanupError) : Promise.resolve();
  }
}

/** A PLEG stand-in whose events the test sends. */
class FakePleg {
  #queue: PodLifecycleEvent[] = [];
  #waiter: ((e: PodLifecycleEvent) => void) | undefined;
  send(e: PodLifecycleEvent) {
    if (this.#waiter) {
      const w = this.#waiter;
      this.#waiter = undefined;
      w(e);
    } else this.#queue.push(e);
  }
  next(signal?: AbortSignal): Promise<PodLifecycleEvent> {
    const e = this.#queue.shift();
    if (e) return Promise.resolve(e);
    return new Promise((resolve, reject) => {
      this.#waiter = resolve;
      signal?.addEventListener("abort", () => reject(signal.reason), { once: true });
    });
  }
  takeQueued(): PodLifecycleEvent[] {
    return this.#queue.splice(0);
  }
}

async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((r) => setTimeout(r, 0));
}

function setup(opts: Partial<SyncLoopOptions> = {}, initialRuntimeErrors?: string) {
  const clock = new FakeClock();
  const handler = new RecordingHandler();
  const pleg = new FakePleg();
  let runtimeErrors: string | undefined = initialRuntimeErrors;
  let sourcesReady = true;
  const loop = new SyncLoop({
    handler,
    pleg,
    clock,
    logger,
    runtimeErrors: () => runtimeErrors,
    sourcesReady: () => sourcesReady,
    ...opts,
  });
  const ctrl = new AbortController();
  const done = loop.run(ctrl.signal);
  return {
    clock,
    handler,
    pleg,
    loop,
    setRuntimeErrors: (e: string | undefined) => (runtimeErrors = e),
    setSourcesReady: (r: boolean) => (sourcesReady = r),
    stop: async () => {
      ctrl.abort();
      await done;
    },
  };
}

Deno.test("SyncLoop dispatches config updates in order, by operation", async () => {
  const t = setup();
  t.loop.push({ op: "ADD", pods: [pod("a"), pod("b")], source: "api" });
  t.loop.push({ op: "UPDATE", pods: [pod("a")], source: "api" });
  t.loop.push({ op: "DELETE", pods: [pod("b")], source: "api" });
  t.loop.push({ op: "REMOVE", pods: [pod("a")], source: "api" });
  t.loop.push({ op: "RECONCILE", pods: [pod("c")], source: "api" });
  await settle();
  assert.deepEqual(t.handler.calls, [
    "add:a,b",
    "update:a",
    "update:b",
    "remove:a",
    "reconcile:c",
  ]);
  await t.stop();
});

Deno.test("SyncLoop waits for an admission that waits (device allocation), and counts a source handled only after its update", async () => {
  const t = setup();
  let release!: () => void;
  const seenDuring: boolean[] = [];
  const add = t.handler.handlePodAdditions.bind(t.handler);
  t.handler.handlePodAdditions = (pods: readonly V1Pod[]) => {
    add(pods);
    if (pods[0]?.metadata?.name !== "gpu") return;
    seenDuring.push(t.loop.handledAllSources(["api"]));
    return new Promise<void>((r) => (release = r));
  };
  assert.equal(t.loop.handledAllSources(["api"]), false);
  t.loop.push({ op: "ADD", pods: [pod("gpu")], source: "api" });
  t.loop.push({ op: "ADD", pods: [pod("after")], source: "file" });
  await settle();
  // The next update waits for the admission under way.
  assert.deepEqual(t.handler.calls, ["add:gpu"]);
  assert.deepEqual(seenDuring, [false]);
  release();
  await settle();
  assert.deepEqual(t.handler.calls, ["add:gpu", "add:after"]);
  assert.equal(t.loop.handledAllSources(["api", "file"]), true);
  assert.equal(t.loop.handledAllSources(["api", "http"]), false);
  await t.stop();
});

Deno.test("SyncLoop hands PLEG events to the handler without losing one", async () => {
  const t = setup();
  t.pleg.send({ id: "u1", type: "ContainerStarted", data: "c1" });
  t.pleg.send({ id: "u1", type: "ContainerDied", data: "c1" });
  await settle();
  t.loop.push({ op: "ADD", pods: [pod("a")], source: "api" });
  t.pleg.send({ id: "u2", type: "ContainerStarted", data: "c2" });
  await settle();
  assert.deepEqual(t.handler.calls.filter((c) => c.startsWith("pleg")), [
    "pleg:u1:ContainerStarted",
    "pleg:u1:ContainerDied",
    "pleg:u2:ContainerStarted",
  ]);
  assert.ok(t.handler.calls.includes("add:a"));
  await t.stop();
});

Deno.test("SyncLoop hands the handler a batch of PLEG events sent together as one", async () => {
  const t = setup();
  await settle();
  // The first goes to the waiting loop, the others queue behind it.
  t.pleg.send({ id: "u1", type: "ContainerStarted", data: "s1" });
  t.pleg.send({ id: "u1", type: "ContainerStarted", data: "c1" });
  t.pleg.send({ id: "u2", type: "ContainerDied", data: "c2" });
  await settle();
  assert.deepEqual(t.handler.batches, [
    "u1:ContainerStarted,u1:ContainerStarted,u2:ContainerDied",
  ]);
  await t.stop();
});

Deno.test("SyncLoop syncs due pods every second and cleans up every two", async () => {
  const t = setup();
  await settle();
  t.handler.due = [pod("a")];
  t.clock.step(1_000);
  await settle();
  assert.deepEqual(t.handler.calls, ["sync:a"]);
  t.clock.step(1_000);
  await settle();
  assert.deepEqual(t.handler.calls, ["sync:a", "cleanup"]);
  t.clock.step(2_000);
  await settle();
  assert.deepEqual(t.handler.calls, ["sync:a", "cleanup", "cleanup"]);
  await t.stop();
});

Deno.test("SyncLoop skips housekeeping until the sources are ready", async () => {
  const t = setup();
  t.setSourcesReady(false);
  await settle();
  t.clock.step(2_000);
  await settle();
  assert.deepEqual(t.handler.calls, []);
  t.setSourcesReady(true);
  t.clock.step(2_000);
  await settle();
  assert.deepEqual(t.handler.calls, ["cleanup"]);
  await t.stop();
});

Deno.test("SyncLoop keeps running after a failed cleanup", async () => {
  const t = setup();
  t.handler.cleanupError = new Error("boom");
  await settle();
  t.clock.step(2_000);
  await settle();
  t.loop.push({ op: "ADD", pods: [pod("a")], source: "api" });
  await settle();
  assert.deepEqual(t.handler.calls, ["cleanup", "add:a"]);
  await t.stop();
});

Deno.test("SyncLoop backs off from 100 ms to 5 s while the runtime reports errors", async () => {
  const t = setup({}, "container runtime is down");
  await settle();
  t.loop.push({ op: "ADD", pods: [pod("a")], source: "api" });
  // 100, 200, 400, ... 3200, then 5000 each time: nothing is dispatched meanwhile.
  const waits = [100, 200, 400, 800, 1600, 3200, 5000, 5000];
  for (const w of waits) {
    const before = t.loop.iterations;
    t.clock.step(w - 1);
    await settle();
    assert.equal(t.clock.waiters, 1, `one backoff sleep pending before ${w} ms`);
    t.clock.step(1);
    await settle();
    assert.equal(t.loop.iterations, before);
  }
  assert.equal(t.handler.calls.length, 0);
  t.setRuntimeErrors(undefined);
  t.clock.step(5_000);
  await settle();
  assert.ok(t.handler.calls.includes("add:a"));
  await t.stop();
});

Deno.test("SyncLoop drains the PLEG's queue while the runtime reports errors and hands the events over after", async () => {
  const t = setup({}, "PLEG is not healthy: EventedPLEG: pleg event channel capacity is full");
  await settle();
  // The loop has skipped from the start, so every event goes to the PLEG's queue.
  for (let i = 0; i < 20; i++) t.pleg.send({ id: "u1", type: "ContainerStarted", data: `c${i}` });
  t.pleg.send({ id: "u2", type: "ContainerDied", data: "d" });
  t.clock.step(100);
  await settle();
  assert.deepEqual(t.pleg.takeQueued(), [], "the PLEG's queue is drained while syncs are skipped");
  assert.equal(t.handler.calls.length, 0, "nothing is handled meanwhile");
  t.setRuntimeErrors(undefined);
  t.clock.step(200);
  await settle();
  const pleg = t.handler.calls.filter((c) => c.startsWith("pleg"));
  // The latest 16 of u1's held events, and u2's: none of the pods is left out.
  assert.ok(pleg.includes("pleg:u2:ContainerDied"), pleg.join("\n"));
  assert.equal(pleg.filter((c) => c.startsWith("pleg:u1")).length, 16);
  await t.stop();
});

Deno.test("SyncLoop admits pods while a housekeeping runs, starts no second one, and is unhealthy after 5 minutes of it", async () => {
  const t = setup();
  await settle();
  assert.equal(t.loop.healthCheck(), undefined);
  let release!: () => void;
  let cleanups = 0;
  t.handler.handlePodCleanups = () => {
    cleanups++;
    return new Promise<void>((r) => (release = r));
  };
  t.clock.step(2_000);
  await settle();
  assert.equal(cleanups, 1);
  // Upstream's loop would wait here: ours hands the new pod on at once.
  t.loop.push({ op: "ADD", pods: [pod("a")], source: "api" });
  await settle();
  assert.deepEqual(t.handler.calls, ["add:a"]);
  t.clock.step(2_000);
  await settle();
  assert.equal(cleanups, 1, "no second housekeeping while the first runs");
  assert.equal(t.loop.healthCheck(), undefined);
  t.clock.step(5 * 60_000);
  assert.equal(t.loop.healthCheck(), "sync Loop housekeeping took longer than expected");
  release();
  await settle();
  assert.equal(t.loop.healthCheck(), undefined);
  t.clock.step(2_000);
  await settle();
  assert.equal(cleanups, 2, "the next tick starts a housekeeping again");
  release();
  await t.stop();
});

Deno.test("SyncLoop hands probe updates to the handler, once per pod per iteration", async () => {
  const t = setup();
  await settle();
  t.loop.pushProbeUpdate("u1");
  t.loop.pushProbeUpdate("u2");
  t.loop.pushProbeUpdate("u1");
  await settle();
  assert.deepEqual(t.handler.calls, ["probe:u1", "probe:u2"]);
  await t.stop();
});

Deno.test("SyncLoop hands the pods whose devices' health changed to the handler, each once", async () => {
  const t = setup();
  const resourceUpdates: string[][] = [];
  await settle();
  // Without handleResourceUpdate each pod is synced as on a probe update.
  t.loop.pushResourceHealthUpdate(["u1", "u2"]);
  t.loop.pushResourceHealthUpdate(["u1"]);
  await settle();
  assert.deepEqual(t.handler.calls, ["probe:u1", "probe:u2"]);
  t.handler.calls = [];
  (t.handler as SyncHandler).handleResourceUpdate = (uids) => resourceUpdates.push([...uids]);
  t.loop.pushResourceHealthUpdate(["u3", "u1"]);
  t.loop.pushResourceHealthUpdate(["u3"]);
  t.loop.pushResourceHealthUpdate([]);
  await settle();
  assert.deepEqual(resourceUpdates, [["u3", "u1"]]);
  assert.deepEqual(t.handler.calls, []);
  await t.stop();
});

Deno.test("SyncLoop keeps one tick timer while config updates wake it, and still ticks", async () => {
  const clock = new FakeClock();
  let sleeps = 0;
  const sleep = clock.sleep.bind(clock);
  clock.sleep = (ms, signal) => {
    sleeps++;
    return sleep(ms, signal);
  };
  const t = setup({ clock });
  await settle();
  const before = sleeps;
  for (let i = 0; i < 20; i++) {
    t.loop.push({ op: "UPDATE", pods: [pod(`p${i}`)], source: "api" });
    await settle();
  }
  assert.equal(t.handler.calls.length, 20);
  assert.equal(sleeps, before, "a wake by a config update made a timer");
  assert.equal(clock.waiters, 1);
  t.handler.due = [pod("due")];
  clock.step(1000);
  await settle();
  assert.ok(t.handler.calls.includes("sync:due"), t.handler.calls.slice(-3).join(" "));
  await t.stop();
  assert.equal(clock.waiters, 0);
});

Deno.test("SyncLoop keeps nothing per wake: the heap stays flat over 20,000 ticks and probe updates", async () => {
  // The loop once raced promises that outlived its
  // waits and made an AbortSignal.any per tick: 41 MB for 20,000 rounds with no PLEG event.
  const growth = await loopHeapGrowth("sync", 20_000);
  assert.ok(growth < 2 * 2 ** 20, `the heap grew by ${growth} bytes over 20,000 rounds`);
});
