import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import { FakeClock } from "./util/clock.ts";
import { createLogger } from "./klog/klog.ts";
import { KubeletMetrics } from "./metrics/metrics.ts";
import { CONFIG_SOURCE_ANNOTATION } from "./config/pod_config.ts";
import {
  effectiveGracePeriod,
  PodWorkers,
  type PodWorkersOptions,
  type SyncPodType,
  type UpdatePodOptions,
} from "./pod_workers.ts";

interface Call {
  fn: "syncPod" | "syncTerminatingPod" | "syncTerminatedPod";
  uid: string;
  updateType?: SyncPodType;
  version?: string;
  gracePeriod?: number;
  signal: AbortSignal;
}

/** A fake podSyncer whose calls can be held open until the test releases them. */
class FakeSyncer {
  calls: Call[] = [];
  /** syncPod results: true means terminal. */
  terminal = false;
  /** Errors to throw from the next syncPod calls. */
  failures: Error[] = [];
  /** When set, every call waits for release() (or its signal) before returning. */
  hold = false;
  #gates: PromiseWithResolvers<void>[] = [];
  #waiters: { n: number; resolve: () => void }[] = [];

  async #enter(call: Call): Promise<void> {
    this.calls.push(call);
    for (const w of this.#waiters.filter((w) => this.calls.length >= w.n)) w.resolve();
    if (!this.hold) return;
    const gate = Promise.withResolvers<void>();
    this.#gates.push(gate);
    const onAbort = () => {
      this.#gates = this.#gates.filter((g) => g !== gate);
      gate.reject(call.signal.reason);
    };
    call.signal.addEventListener("abort", onAbort, { once: true });
    try {
      await gate.promise;
    } finally {
      call.signal.removeEventListener("abort", onAbort);
    }
  }

  /** Lets the oldest held call return. */
  release(): void {
    const gate = this.#gates.shift();
    assert.ok(gate, "no held call to release");
    gate.resolve();
  }

  /** Resolves once `n` calls have been made in all. */
  waitForCalls(n: number): Promise<void> {
    if (this.calls.length >= n) return Promise.resolve();
    const { promise, resolve } = Promise.withResolvers<void>();
    this.#waiters.push({ n, resolve });
    return promise;
  }

  options(): Pick<PodWorkersOptions, "syncPod" | "syncTerminatingPod" | "syncTerminatedPod"> {
    return {
      syncPod: async (signal, updateType, pod) => {
        await this.#enter({
          fn: "syncPod",
          uid: pod.metadata!.uid!,
          updateType,
          version: pod.metadata?.resourceVersion,
          signal,
        });
        const err = this.failures.shift();
        if (err) throw err;
        return this.terminal;
      },
      syncTerminatingPod: async (signal, pod, gracePeriod) => {
        await this.#enter({
          fn: "syncTerminatingPod",
          uid: pod.metadata!.uid!,
          version: pod.metadata?.resourceVersion,
          gracePeriod,
          signal,
        });
      },
      syncTerminatedPod: async (signal, pod) => {
        await this.#enter({
          fn: "syncTerminatedPod",
          uid: pod.metadata!.uid!,
          version: pod.metadata?.resourceVersion,
          signal,
        });
      },
    };
  }
}

function pod(uid: string, version = "1", extra: Partial<V1Pod> = {}): V1Pod {
  return {
    metadata: { uid, name: `pod-${uid}`, namespace: "ns", resourceVersion: version },
    spec: { containers: [{ name: "c", image: "busybox" }] },
    ...extra,
  };
}

function setup(opts: Partial<PodWorkersOptions> = {}) {
  const clock = new FakeClock();
  const syncer = new FakeSyncer();
  const lines: string[] = [];
  const logger = createLogger({ verbosity: 4, write: (l) => lines.push(l), pid: 1 });
  const workers = new PodWorkers({
    ...syncer.options(),
    clock,
    logger,
    random: () => 0,
    resyncIntervalMs: 60_000,
    ...opts,
  });
  const update = (
    p: V1Pod,
    updateType: SyncPodType = "update",
    rest: Partial<UpdatePodOptions> = {},
  ) => workers.updatePod({ pod: p, updateType, startTime: clock.now(), ...rest });
  return { clock, syncer, workers, lines, update };
}

function summary(calls: Call[]): string[] {
  return calls.map((c) =>
    `${c.fn}:${c.uid}:${c.version}` + (c.updateType ? `:${c.updateType}` : "") +
    (c.gracePeriod !== undefined ? `:${c.gracePeriod}` : "")
  );
}

Deno.test("PodWorkers serializes syncs and collapses pending updates to the newest", async () => {
  const { syncer, workers, update, lines } = setup();
  syncer.hold = true;
  update(pod("a", "1"), "create");
  await syncer.waitForCalls(1);
  update(pod("a", "2"));
  update(pod("a", "3"));
  // Nothing else starts while the first sync is held open.
  await Promise.resolve();
  assert.equal(syncer.calls.length, 1);
  syncer.release();
  await syncer.waitForCalls(2);
  syncer.release();
  await workers.drain();
  assert.deepEqual(summary(syncer.calls), ["syncPod:a:1:create", "syncPod:a:3:update"]);
  assert.ok(lines.some((l) => l.includes("Pending pod update replaced by a newer one")));
});

Deno.test("PodWorkers runs different pods concurrently", async () => {
  const { syncer, workers, update } = setup();
  syncer.hold = true;
  update(pod("a"), "create");
  update(pod("b"), "create");
  await syncer.waitForCalls(2);
  syncer.release();
  syncer.release();
  await workers.drain();
  assert.deepEqual(summary(syncer.calls), ["syncPod:a:1:create", "syncPod:b:1:create"]);
});

Deno.test("PodWorkers keeps a pending kill when a later update arrives", async () => {
  const { syncer, workers, update } = setup();
  syncer.hold = true;
  update(pod("a", "1"), "create");
  await syncer.waitForCalls(1);
  const first = syncer.calls[0]!;
  update(pod("a", "2"), "kill", {
    killPodOptions: { podTerminationGracePeriodSecondsOverride: 5 },
  });
  assert.ok(first.signal.aborted, "the kill cancels the running syncPod");
  update(pod("a", "3"), "update");
  await syncer.waitForCalls(2);
  assert.deepEqual(summary(syncer.calls.slice(1)), ["syncTerminatingPod:a:3:5"]);
  syncer.release();
  await syncer.waitForCalls(3);
  syncer.release();
  await workers.drain();
  assert.deepEqual(summary(syncer.calls.slice(2)), ["syncTerminatedPod:a:3"]);
  assert.equal(workers.shouldPodBeFinished("a"), true);
});

Deno.test("PodWorkers keeps the shortest grace period of several kills", async () => {
  const { syncer, workers, update } = setup();
  syncer.hold = true;
  update(pod("a"), "create");
  await syncer.waitForCalls(1);
  update(pod("a"), "kill", { killPodOptions: { podTerminationGracePeriodSecondsOverride: 5 } });
  update(pod("a"), "kill", { killPodOptions: { podTerminationGracePeriodSecondsOverride: 20 } });
  await syncer.waitForCalls(2);
  assert.deepEqual(summary(syncer.calls.slice(1)), ["syncTerminatingPod:a:1:5"]);
  // A shorter one while terminating cancels the running syncTerminatingPod and reruns it.
  const terminating = syncer.calls[1]!;
  update(pod("a"), "kill", { killPodOptions: { podTerminationGracePeriodSecondsOverride: 2 } });
  assert.ok(terminating.signal.aborted);
  await syncer.waitForCalls(3);
  assert.deepEqual(summary(syncer.calls.slice(2)), ["syncTerminatingPod:a:1:2"]);
  syncer.hold = false;
  syncer.release();
  await workers.drain();
  assert.equal(workers.podWorkerState("a"), "terminated");
});

Deno.test("PodWorkers kill aborts the running sync and terminates with the right grace period", async (t) => {
  const cases: { name: string; pod: V1Pod; override?: number; want: number }[] = [
    {
      name: "deletionGracePeriodSeconds",
      pod: pod("a", "1", {
        metadata: {
          uid: "a",
          name: "a",
          deletionGracePeriodSeconds: 7,
          deletionTimestamp: new Date(0),
        },
        spec: { containers: [], terminationGracePeriodSeconds: 40 },
      }),
      want: 7,
    },
    {
      name: "terminationGracePeriodSeconds",
      pod: pod("a", "1", { spec: { containers: [], terminationGracePeriodSeconds: 40 } }),
      want: 40,
    },
    {
      name: "override",
      pod: pod("a", "1", { spec: { containers: [], terminationGracePeriodSeconds: 40 } }),
      override: 3,
      want: 3,
    },
    { name: "default 30", pod: pod("a", "1", { spec: { containers: [] } }), want: 30 },
  ];
  for (const c of cases) {
    await t.step(c.name, async () => {
      const { syncer, workers, update } = setup();
      syncer.hold = true;
      update(pod("a"), "create");
      await syncer.waitForCalls(1);
      update(c.pod, "kill", {
        killPodOptions: c.override === undefined
          ? {}
          : { podTerminationGracePeriodSecondsOverride: c.override },
      });
      assert.ok(syncer.calls[0]!.signal.aborted);
      assert.equal(workers.isPodTerminationRequested("a"), true);
      await syncer.waitForCalls(2);
      assert.equal(syncer.calls[1]!.fn, "syncTerminatingPod");
      assert.equal(syncer.calls[1]!.gracePeriod, c.want);
      syncer.hold = false;
      syncer.release();
      await workers.drain();
    });
  }
});

Deno.test("effectiveGracePeriod forces at least one second and never lengthens", () => {
  const p = pod("a", "1", { metadata: { uid: "a", deletionGracePeriodSeconds: 0 } });
  assert.deepEqual(effectiveGracePeriod(0, p), { gracePeriod: 1, shortened: false });
  assert.deepEqual(effectiveGracePeriod(5, pod("a"), 10), { gracePeriod: 5, shortened: false });
  assert.deepEqual(effectiveGracePeriod(5, pod("a"), 2), { gracePeriod: 2, shortened: true });
});

Deno.test("PodWorkers moves a terminal pod to terminating and terminated without a kill", async () => {
  const { syncer, workers, update, clock } = setup();
  syncer.terminal = true;
  let completed = 0;
  update(pod("a"), "create");
  await workers.drain();
  assert.deepEqual(summary(syncer.calls), [
    "syncPod:a:1:create",
    "syncTerminatingPod:a:1:30",
    "syncTerminatedPod:a:1",
  ]);
  assert.equal(workers.podWorkerState("a"), "terminated");
  assert.equal(workers.shouldPodBeFinished("a"), true);
  assert.equal(workers.couldHaveRunningContainers("a"), false);
  assert.equal(workers.shouldPodContainersBeTerminating("a"), true);
  // A kill of a finished pod completes at once.
  update(pod("a"), "kill", { killPodOptions: { onCompleted: () => completed++ } });
  assert.equal(completed, 1);
  // The phase transition asked for an immediate sync.
  assert.deepEqual(workers.getPodsToSync(clock.now()), ["a"]);
});

Deno.test("PodWorkers never starts a terminated UID again", async () => {
  const { syncer, workers, update, lines } = setup();
  update(pod("a"), "create");
  await workers.drain();
  update(pod("a"), "kill");
  await workers.drain();
  const n = syncer.calls.length;
  assert.deepEqual(summary(syncer.calls).slice(-2), [
    "syncTerminatingPod:a:1:30",
    "syncTerminatedPod:a:1",
  ]);
  update(pod("a", "2"), "update");
  update(pod("a", "3"), "sync");
  await workers.drain();
  assert.equal(syncer.calls.length, n);
  assert.ok(lines.some((l) => l.includes("Pod is finished processing, no further updates")));
  // A finished worker of a pod that is still desired is kept, so the UID stays blocked.
  assert.equal(workers.syncKnownPods([pod("a")]).get("a")?.state, "terminated");
});

Deno.test("PodWorkers calls onCompleted once the containers are stopped", async () => {
  const { syncer, workers, update } = setup();
  let completed = 0;
  update(pod("a"), "create");
  await workers.drain();
  syncer.hold = true;
  update(pod("a"), "kill", { killPodOptions: { onCompleted: () => completed++ } });
  await syncer.waitForCalls(2);
  assert.equal(completed, 0);
  syncer.release();
  await syncer.waitForCalls(3);
  assert.equal(completed, 1);
  syncer.release();
  await workers.drain();
});

Deno.test("PodWorkers getPodsToSync returns a failed pod only after the 10 s backoff", async () => {
  const { syncer, workers, update, clock } = setup();
  syncer.failures.push(new Error("runtime down"));
  const start = clock.now();
  update(pod("a"), "create");
  await workers.drain();
  assert.deepEqual(workers.getPodsToSync(start + 9_999), []);
  assert.deepEqual(workers.getPodsToSync(start + 10_000), ["a"]);
  assert.deepEqual(workers.getPodsToSync(start + 20_000), [], "taken off the queue");
});

Deno.test("PodWorkers getPodsToSync bounds the backoff jitter at 15 s", async () => {
  const { syncer, workers, update, clock } = setup({ random: () => 0.999 });
  syncer.failures.push(new Error("runtime down"));
  const start = clock.now();
  update(pod("a"), "create");
  await workers.drain();
  assert.deepEqual(workers.getPodsToSync(start + 14_900), []);
  assert.deepEqual(workers.getPodsToSync(start + 15_000), ["a"]);
});

Deno.test("PodWorkers getPodsToSync returns a synced pod after syncFrequency with jitter", async (t) => {
  for (const [random, earliest] of [[0, 60_000], [0.999, 89_970]] as const) {
    await t.step(`random ${random}`, async () => {
      const { workers, update, clock } = setup({ random: () => random });
      const start = clock.now();
      update(pod("a"), "create");
      await workers.drain();
      assert.deepEqual(workers.getPodsToSync(start + earliest - 1), []);
      assert.deepEqual(workers.getPodsToSync(start + earliest), ["a"]);
      assert.ok(earliest <= 90_000);
    });
  }
});

Deno.test("PodWorkers syncKnownPods forgets terminated workers no longer desired", async () => {
  const { syncer, workers, update } = setup();
  update(pod("a"), "create");
  update(pod("b"), "create");
  await workers.drain();
  update(pod("a"), "kill");
  await workers.drain();
  assert.equal(workers.podWorkerState("a"), "terminated");
  const known = workers.syncKnownPods([pod("b")]);
  assert.deepEqual([...known.keys()], ["b"]);
  assert.equal(workers.podWorkerState("a"), undefined);
  // Unknown pods now count as gone.
  assert.equal(workers.couldHaveRunningContainers("a"), false);
  assert.equal(workers.shouldPodBeFinished("a"), true);
  // A forgotten UID may be started again.
  update(pod("a", "9"), "create");
  await workers.drain();
  assert.deepEqual(summary(syncer.calls).at(-1), "syncPod:a:9:create");
});

Deno.test("PodWorkers syncKnownPods terminates a running orphan", async () => {
  const { syncer, workers, update } = setup();
  update(pod("a", "1", { spec: { containers: [], terminationGracePeriodSeconds: 12 } }), "create");
  await workers.drain();
  const known = workers.syncKnownPods([]);
  assert.deepEqual(known.get("a"), {
    state: "terminating",
    orphan: true,
    hasConfig: true,
    static: false,
  });
  await workers.drain();
  assert.deepEqual(summary(syncer.calls).slice(1), [
    "syncTerminatingPod:a:1:12",
    "syncTerminatedPod:a:1",
  ]);
  assert.equal(workers.shouldPodContentBeRemoved("a"), true);
  assert.equal(workers.syncKnownPods([]).size, 0);
});

Deno.test("PodWorkers syncKnownPods lets a UID restart after a create during termination", async () => {
  const { syncer, workers, update } = setup();
  update(pod("a"), "create");
  await workers.drain();
  syncer.hold = true;
  update(pod("a"), "kill");
  await syncer.waitForCalls(2);
  update(pod("a", "2"), "create");
  syncer.hold = false;
  syncer.release();
  await workers.drain();
  assert.equal(workers.syncKnownPods([pod("a", "2")]).has("a"), false);
  update(pod("a", "2"), "create");
  await workers.drain();
  assert.deepEqual(summary(syncer.calls).at(-1), "syncPod:a:2:create");
});

Deno.test("PodWorkers stops every worker when the root signal aborts", async () => {
  const root = new AbortController();
  const { syncer, workers, update, lines } = setup({ signal: root.signal });
  syncer.hold = true;
  update(pod("a"), "create");
  update(pod("b"), "create");
  await syncer.waitForCalls(2);
  update(pod("a", "2"));
  root.abort();
  assert.ok(syncer.calls.every((c) => c.signal.aborted));
  await workers.drain();
  update(pod("c"), "create");
  await workers.drain();
  assert.equal(syncer.calls.length, 2);
  assert.ok(lines.some((l) => l.includes("Pod worker stopped with an update pending")));
  assert.ok(lines.some((l) => l.includes("Pod update rejected: pod workers are stopping")));
});

Deno.test("PodWorkers rejects a pod without a UID with a log line", () => {
  const { workers, lines } = setup();
  workers.updatePod({ pod: { metadata: { name: "x" } }, updateType: "create", startTime: 0 });
  assert.ok(lines.some((l) => l.includes("the pod has no metadata.uid")));
});

Deno.test("PodWorkers rejects a bad backoff period", () => {
  assert.throws(
    () => setup({ backOffPeriodMs: 0 }),
    /'backOffPeriodMs' must be a positive number/,
  );
});

Deno.test("PodWorkers calls synced after each SyncPod that did not throw, with the sync's end", async () => {
  const synced: [string, number][] = [];
  const { clock, syncer, workers, update } = setup({
    synced: (uid, at) => synced.push([uid, at]),
  });
  syncer.hold = true;
  update(pod("a"), "create");
  await syncer.waitForCalls(1);
  clock.step(250);
  syncer.release();
  await workers.drain();
  assert.deepEqual(synced, [["a", clock.now()]], "once the sync ended, not when it began");
  syncer.hold = false;
  syncer.failures.push(new Error("sync failed"));
  update(pod("a", "2"));
  await workers.drain();
  assert.equal(synced.length, 1, "not after a sync that threw");
  syncer.terminal = true;
  update(pod("a", "3"));
  await workers.drain();
  assert.deepEqual(synced.map(([uid]) => uid), ["a", "a"], "the terminal SyncPod, not the kill");
  assert.ok(syncer.calls.some((c) => c.fn === "syncTerminatingPod"));
});

Deno.test("PodWorkers observes kubelet_containers_per_pod_count once per pod, as its worker first starts", async () => {
  const metrics = new KubeletMetrics({ process: false });
  const { workers, update } = setup({ metrics });
  const perPod = metrics.containersPerPodCount;
  const two = { spec: { containers: [{ name: "a" }, { name: "b" }] } };
  update(pod("a", "1", two), "create");
  await workers.drain();
  assert.equal(perPod.count(), 1);
  // Later updates and syncs of the same pod are not new pods.
  update(pod("a", "2", two));
  await workers.drain();
  assert.equal(perPod.count(), 1);
  // A pod known only from the runtime is killed, never started: not counted.
  update(pod("orphan"), "kill", { runtimeOnly: true });
  await workers.drain();
  assert.equal(perPod.count(), 1);
  update(pod("b", "1", { spec: { containers: [{ name: "c" }, { name: "d" }, { name: "e" }] } }));
  await workers.drain();
  const text = await metrics.render();
  assert.match(text, /^kubelet_containers_per_pod_count_count 2$/m);
  assert.match(text, /^kubelet_containers_per_pod_count_sum 5$/m);
  assert.match(text, /^kubelet_containers_per_pod_count_bucket\{le="2"\} 1$/m);
  assert.match(text, /^kubelet_containers_per_pod_count_bucket\{le="4"\} 2$/m);
});

Deno.test("PodWorkers syncKnownPods says which workers have the pod's config and which are static", async () => {
  const { syncer, workers, update } = setup();
  const fromFile = { metadata: { annotations: { [CONFIG_SOURCE_ANNOTATION]: "file" } } };
  const fromApi = { metadata: { annotations: { [CONFIG_SOURCE_ANNOTATION]: "api" } } };
  const staticPod = pod("s");
  staticPod.metadata = { ...staticPod.metadata, ...fromFile.metadata };
  const apiPod = pod("a");
  apiPod.metadata = { ...apiPod.metadata, ...fromApi.metadata };
  update(staticPod, "create");
  update(apiPod, "create");
  update(pod("r"), "kill", { runtimeOnly: true });
  // Held open: the runtime-only kill is still terminating when the workers are listed.
  syncer.hold = true;
  await syncer.waitForCalls(3);
  const known = workers.syncKnownPods([staticPod, apiPod]);
  assert.deepEqual(known.get("s"), { state: "sync", orphan: false, hasConfig: true, static: true });
  assert.deepEqual(known.get("a"), {
    state: "sync",
    orphan: false,
    hasConfig: true,
    static: false,
  });
  assert.deepEqual(known.get("r"), {
    state: "terminating",
    orphan: true,
    hasConfig: false,
    static: false,
  });
  syncer.hold = false;
  for (let i = 0; i < 3; i++) syncer.release();
  await workers.drain();
});
