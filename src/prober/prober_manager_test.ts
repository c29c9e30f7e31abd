import assert from "node:assert/strict";
import type { V1Container, V1Pod, V1Probe } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import type { PodStatus } from "../container/pod_cache.ts";
import {
  type ProbeKind,
  type ProbeResult,
  ProberManager,
  probeTerminationGracePeriodSeconds,
} from "./prober_manager.ts";
import { goFloat } from "./_results.ts";
import { loopHeapGrowth } from "../testing/loop_heap.ts";

type Outcome = { result: "Success" | "Failure" | "Unknown"; output: string };
type Script = (kind: ProbeKind, container: string, id: string, signal: AbortSignal) =>
  | Outcome
  | Promise<Outcome>;

const S = 1000;

interface Call {
  kind: ProbeKind;
  container: string;
  id: string;
  at: number;
  ips: readonly string[];
}

function setup(
  opts: { concurrency?: number; startedInStatus?: (uid: string, name: string) => boolean } = {},
) {
  const clock = new FakeClock();
  const t0 = clock.now();
  const statuses = new Map<string, PodStatus>();
  const calls: Call[] = [];
  const updates: [ProbeKind, string, string, ProbeResult][] = [];
  const ctx = {
    script: ((): Outcome => ({ result: "Success", output: "" })) as Script,
  };
  const manager = new ProberManager({
    runner: {
      probe: (signal, kind, _pod, ips, c, id) => {
        calls.push({ kind, container: c.name, id, at: clock.now() - t0, ips });
        return Promise.resolve(ctx.script(kind, c.name, id, signal));
      },
    },
    getPodStatus: (uid) => statuses.get(uid),
    clock,
    logger: createLogger({ write: () => {} }),
    onUpdate: (kind, uid, id, r) => updates.push([kind, uid, id, r]),
    random: () => 0,
    concurrency: opts.concurrency,
    startedInStatus: opts.startedInStatus,
  });
  const ac = new AbortController();
  const done = manager.run(ac.signal);
  /** Lets the loop and the runner's promises settle (no time passes). */
  const settle = async () => {
    for (let i = 0; i < 10; i++) await new Promise((r) => setTimeout(r, 0));
  };
  const step = async (ms: number) => {
    clock.step(ms);
    await settle();
  };
  const stop = async () => {
    ac.abort();
    await done;
  };
  return { clock, t0, statuses, calls, updates, ctx, manager, settle, step, stop };
}

function pod(uid: string, containers: V1Container[], extra: Partial<V1Pod["spec"]> = {}): V1Pod {
  return {
    metadata: { name: `pod-${uid}`, namespace: "ns", uid },
    spec: { containers, ...extra },
  };
}

function container(name: string, probes: {
  liveness?: V1Probe;
  readiness?: V1Probe;
  startup?: V1Probe;
}): V1Container {
  return {
    name,
    livenessProbe: probes.liveness,
    readinessProbe: probes.readiness,
    startupProbe: probes.startup,
  };
}

function running(name: string, id: string, startedAtMs: number): api.ContainerStatus {
  return api.ContainerStatus.fromPartial({
    id,
    metadata: { name, attempt: 0 },
    state: api.ContainerState.CONTAINER_RUNNING,
    startedAt: BigInt(startedAtMs) * 1_000_000n,
  });
}

function exited(name: string, id: string): api.ContainerStatus {
  return api.ContainerStatus.fromPartial({
    id,
    metadata: { name, attempt: 0 },
    state: api.ContainerState.CONTAINER_EXITED,
    exitCode: 1,
  });
}

function status(uid: string, containers: api.ContainerStatus[]): PodStatus {
  return {
    id: uid,
    name: `pod-${uid}`,
    namespace: "ns",
    ips: ["10.0.0.5"],
    sandboxStatuses: [],
    containerStatuses: containers,
    timestamp: 0,
  };
}

Deno.test("ProberManager waits for initialDelaySeconds from the container start, then probes every periodSeconds", async () => {
  const t = setup();
  t.statuses.set("u1", status("u1", [running("c", "id1", t.t0)]));
  t.manager.addPod(
    pod("u1", [container("c", { readiness: { initialDelaySeconds: 15, periodSeconds: 10 } })]),
  );
  await t.settle();
  // Seen at once: readiness starts as Failure; not probed during the initial delay.
  assert.deepEqual(t.updates, [["readiness", "u1", "id1", "Failure"]]);
  assert.equal(t.manager.ready("id1"), false);
  await t.step(10 * S);
  assert.equal(t.calls.length, 0);
  await t.step(10 * S);
  assert.deepEqual(t.calls.map((c) => [c.kind, c.id, c.at, c.ips]), [
    ["readiness", "id1", 20 * S, ["10.0.0.5"]],
  ]);
  assert.equal(t.manager.ready("id1"), true);
  await t.step(9 * S);
  assert.equal(t.calls.length, 1);
  await t.step(1 * S);
  assert.equal(t.calls.length, 2);
  // onUpdate fires on changes only.
  assert.deepEqual(t.updates, [
    ["readiness", "u1", "id1", "Failure"],
    ["readiness", "u1", "id1", "Success"],
  ]);
  assert.equal(t.manager.ready("other"), undefined);
  await t.stop();
});

Deno.test("ProberManager applies successThreshold and failureThreshold to readiness", async () => {
  const t = setup();
  t.statuses.set("u1", status("u1", [running("c", "id1", t.t0)]));
  const results: Outcome["result"][] = ["Success", "Success", "Failure", "Success", "Failure"];
  t.ctx.script = () => ({ result: results.shift() ?? "Failure", output: "" });
  t.manager.addPod(pod("u1", [
    container("c", { readiness: { periodSeconds: 1, successThreshold: 2, failureThreshold: 2 } }),
  ]));
  await t.settle(); // 1st: Success (run 1 < 2)
  assert.equal(t.manager.ready("id1"), false);
  await t.step(S); // 2nd: Success (run 2)
  assert.equal(t.manager.ready("id1"), true);
  await t.step(S); // Failure (run 1)
  assert.equal(t.manager.ready("id1"), true);
  await t.step(S); // Success (run 1 < 2): unchanged
  await t.step(S); // Failure
  await t.step(S); // Failure (run 2)
  assert.equal(t.manager.ready("id1"), false);
  assert.equal(t.calls.length, 6);
  // Readiness keeps probing after a failure.
  await t.step(S);
  assert.equal(t.calls.length, 7);
  assert.deepEqual(t.updates.map((u) => u[3]), ["Failure", "Success", "Failure"]);
  await t.stop();
});

Deno.test("ProberManager gives a container that ran before the kubelet started no initial Failure", async () => {
  // Upstream's worker with ChangeContainerStatusOnKubeletRestart off: a kubelet restart leaves
  // a Ready container's readiness alone until it is probed.
  const t = setup();
  t.ctx.script = () => ({ result: "Success", output: "" });
  t.statuses.set("u1", status("u1", [running("old", "id1", t.t0 - 60_000)]));
  t.statuses.set("u2", status("u2", [running("new", "id2", t.t0 - 5_000)]));
  t.manager.addPod(pod("u1", [container("old", { readiness: { initialDelaySeconds: 120 } })]));
  t.manager.addPod(pod("u2", [container("new", { readiness: { initialDelaySeconds: 120 } })]));
  await t.settle();
  // Neither has been probed (initial delay): only the one started within the 10 s grace
  // before the kubelet's start gets the initial Failure.
  assert.equal(t.calls.length, 0);
  assert.equal(t.manager.ready("id1"), undefined);
  assert.equal(t.manager.ready("id2"), false);
  assert.ok(t.manager.startedBeforeKubelet(t.t0 - 10_001));
  assert.ok(!t.manager.startedBeforeKubelet(t.t0 - 10_000));
  assert.ok(!t.manager.startedBeforeKubelet(0));
  await t.stop();
});

Deno.test("ProberManager takes a container its pod's status says started as started: no startup probe, readiness runs", async () => {
  // Upstream's worker gates on the API status' started, which a kubelet restart carries over.
  const t = setup({ startedInStatus: (uid, name) => uid === "u1" && name === "c" });
  t.statuses.set("u1", status("u1", [running("c", "id1", t.t0 - 60_000)]));
  t.manager.addPod(pod("u1", [container("c", { startup: {}, readiness: {} })]));
  await t.settle();
  assert.deepEqual(t.calls.map((c) => c.kind), ["readiness"]);
  assert.equal(t.manager.ready("id1"), true);
  await t.stop();
});

Deno.test("ProberManager holds a liveness failure until the container restarts", async () => {
  const t = setup();
  t.statuses.set("u1", status("u1", [running("c", "id1", t.t0)]));
  t.ctx.script = () => ({ result: "Failure", output: "" });
  t.manager.addPod(pod("u1", [container("c", { liveness: { periodSeconds: 10 } })]));
  await t.settle();
  assert.equal(t.manager.liveness("id1"), "Success"); // liveness starts as Success
  await t.step(10 * S);
  assert.equal(t.manager.liveness("id1"), "Success"); // 2 failures < 3 (default threshold)
  await t.step(10 * S);
  assert.equal(t.manager.liveness("id1"), "Failure");
  assert.equal(t.calls.length, 3);
  // Sticky: no more probes of this container.
  await t.step(10 * S);
  await t.step(10 * S);
  assert.equal(t.calls.length, 3);
  assert.equal(t.manager.liveness("id1"), "Failure");
  // The container restarts: a fresh Success and probing resumes on the new id.
  t.ctx.script = () => ({ result: "Success", output: "" });
  t.statuses.set("u1", status("u1", [running("c", "id2", t.clock.now()), exited("c", "id1")]));
  await t.step(10 * S);
  assert.equal(t.manager.liveness("id1"), undefined);
  assert.equal(t.manager.liveness("id2"), "Success");
  assert.deepEqual(t.calls.map((c) => c.id), ["id1", "id1", "id1", "id2"]);
  assert.deepEqual(t.updates, [
    ["liveness", "u1", "id1", "Success"],
    ["liveness", "u1", "id1", "Failure"],
    ["liveness", "u1", "id2", "Success"],
  ]);
  await t.stop();
});

Deno.test("ProberManager waits for a created container to start instead of failing it", async () => {
  const t = setup();
  const created = api.ContainerStatus.fromPartial({
    id: "id1",
    metadata: { name: "c", attempt: 0 },
    state: api.ContainerState.CONTAINER_CREATED,
  });
  t.statuses.set("u1", status("u1", [created]));
  t.manager.addPod(pod("u1", [container("c", { liveness: { periodSeconds: 10 } })]));
  await t.settle();
  // Not "Failure": the sync that created it is starting it, and a Failure now would kill it.
  assert.equal(t.manager.liveness("id1"), "Success");
  await t.step(10 * S);
  assert.equal(t.manager.liveness("id1"), "Success");
  assert.equal(t.calls.length, 0);
  t.statuses.set("u1", status("u1", [running("c", "id1", t.clock.now())]));
  await t.step(10 * S);
  assert.equal(t.calls.length, 1);
  assert.equal(t.manager.liveness("id1"), "Success");
  await t.stop();
});

Deno.test("ProberManager gates liveness and readiness on the startup probe", async () => {
  const t = setup();
  t.statuses.set("u1", status("u1", [running("c", "id1", t.t0)]));
  const startup: Outcome["result"][] = ["Failure", "Success"];
  t.ctx.script = (kind) => ({
    result: kind === "startup" ? startup.shift() ?? "Failure" : "Success",
    output: "",
  });
  t.manager.addPod(pod("u1", [container("c", {
    startup: { periodSeconds: 1, failureThreshold: 5 },
    readiness: { periodSeconds: 1 },
    liveness: { periodSeconds: 1 },
  })]));
  await t.settle();
  assert.equal(t.manager.started("id1"), false); // startup starts as Unknown
  assert.equal(t.manager.startup("id1"), "Unknown");
  assert.equal(t.manager.ready("id1"), false);
  assert.deepEqual(t.calls.map((c) => c.kind), ["startup"]);
  await t.step(S);
  assert.equal(t.manager.started("id1"), true);
  await t.step(S);
  // Started: startup no longer runs; the others do.
  assert.deepEqual(t.calls.map((c) => c.kind).sort(), [
    "liveness",
    "readiness",
    "startup",
    "startup",
  ]);
  assert.equal(t.manager.ready("id1"), true);
  await t.step(S);
  assert.equal(t.calls.filter((c) => c.kind === "startup").length, 2);
  await t.stop();
});

Deno.test("ProberManager holds a startup failure at failureThreshold", async () => {
  const t = setup();
  t.statuses.set("u1", status("u1", [running("c", "id1", t.t0)]));
  t.ctx.script = () => ({ result: "Failure", output: "" });
  t.manager.addPod(pod("u1", [container("c", {
    startup: { periodSeconds: 1, failureThreshold: 2 },
    liveness: { periodSeconds: 1 },
  })]));
  await t.settle();
  await t.step(S);
  assert.equal(t.manager.startup("id1"), "Failure");
  assert.equal(t.manager.started("id1"), false);
  await t.step(S);
  await t.step(S);
  assert.deepEqual(t.calls.map((c) => c.kind), ["startup", "startup"]);
  await t.stop();
});

Deno.test("ProberManager throws away Unknown results and runner errors", async () => {
  const t = setup();
  t.statuses.set("u1", status("u1", [running("c", "id1", t.t0)]));
  let n = 0;
  t.ctx.script = () => {
    n++;
    if (n === 1) return { result: "Unknown", output: "boom" };
    if (n === 2) throw new Error("runner broke");
    return { result: "Failure", output: "" };
  };
  t.manager.addPod(pod("u1", [
    container("c", { liveness: { periodSeconds: 1, failureThreshold: 1 } }),
  ]));
  await t.settle();
  await t.step(S);
  assert.equal(t.manager.liveness("id1"), "Success");
  assert.equal(t.manager.metricsText().includes("unknown"), false);
  await t.step(S);
  assert.equal(t.manager.liveness("id1"), "Failure");
  await t.stop();
});

Deno.test("ProberManager fails a probe that outlives its timeout and aborts its signal", async () => {
  const t = setup();
  t.statuses.set("u1", status("u1", [running("c", "id1", t.t0)]));
  const signals: AbortSignal[] = [];
  t.ctx.script = (_k, _c, _id, signal) => {
    signals.push(signal);
    return new Promise<Outcome>(() => {}); // hangs, ignoring the signal
  };
  t.manager.addPod(pod("u1", [
    container("c", { liveness: { periodSeconds: 10, timeoutSeconds: 1, failureThreshold: 1 } }),
  ]));
  await t.settle();
  await t.step(2 * S);
  assert.equal(t.manager.liveness("id1"), "Success");
  assert.equal(signals[0]?.aborted, false);
  // The prober's 3 tries of timeoutSeconds each.
  await t.step(1 * S);
  assert.equal(signals[0]?.aborted, true);
  assert.equal(t.manager.liveness("id1"), "Failure");
  assert.match(t.manager.metricsText(), /result="failed"\} 1\n/);
  await t.stop();
});

Deno.test("ProberManager does not let a hanging probe delay others beyond its timeout", async () => {
  const t = setup({ concurrency: 1 });
  t.statuses.set("a", status("a", [running("c", "ida", t.t0)]));
  t.statuses.set("b", status("b", [running("c", "idb", t.t0)]));
  t.ctx.script = (_k, _c, id) =>
    id === "ida" ? new Promise<Outcome>(() => {}) : { result: "Success", output: "" };
  t.manager.addPod(pod("a", [container("c", { readiness: { periodSeconds: 10 } })]));
  t.manager.addPod(pod("b", [container("c", { readiness: { periodSeconds: 10 } })]));
  await t.settle();
  assert.deepEqual(t.calls.map((c) => c.id), ["ida"]);
  await t.step(3 * S);
  assert.deepEqual(t.calls.map((c) => [c.id, c.at]), [["ida", 0], ["idb", 3 * S]]);
  assert.equal(t.manager.ready("idb"), true);
  await t.stop();

  // With free slots the other probe does not wait at all.
  const u = setup({ concurrency: 2 });
  u.statuses.set("a", status("a", [running("c", "ida", u.t0)]));
  u.statuses.set("b", status("b", [running("c", "idb", u.t0)]));
  u.ctx.script = t.ctx.script;
  u.manager.addPod(pod("a", [container("c", { readiness: { periodSeconds: 10 } })]));
  u.manager.addPod(pod("b", [container("c", { readiness: { periodSeconds: 10 } })]));
  await u.settle();
  assert.deepEqual(u.calls.map((c) => [c.id, c.at]), [["ida", 0], ["idb", 0]]);
  assert.equal(u.manager.ready("idb"), true);
  await u.stop();
});

Deno.test("ProberManager keeps at most one sleep pending on the clock", async () => {
  const t = setup();
  for (const [i, period] of [3, 5, 7, 11].entries()) {
    const uid = `u${i}`;
    t.statuses.set(uid, status(uid, [running("c", `id${i}`, t.t0)]));
    t.manager.addPod(pod(uid, [container("c", {
      readiness: { periodSeconds: period },
      liveness: { periodSeconds: period + 1 },
    })]));
  }
  await t.settle();
  assert.equal(t.manager.workerCount, 8);
  for (let i = 0; i < 30; i++) {
    assert.ok(t.clock.waiters <= 1, `waiters at step ${i}: ${t.clock.waiters}`);
    await t.step(S);
  }
  assert.equal(t.clock.waiters, 1);
  // Each worker ran on its own period: readiness of u0 (3s) at 0, 3, ..., 30.
  assert.equal(t.calls.filter((c) => c.id === "id0" && c.kind === "readiness").length, 11);
  await t.stop();
  assert.equal(t.clock.waiters, 0);
});

Deno.test("ProberManager removePod and cleanupPods stop workers and forget results", async () => {
  const t = setup();
  t.statuses.set("u1", status("u1", [running("c", "id1", t.t0)]));
  t.statuses.set("u2", status("u2", [running("c", "id2", t.t0)]));
  const p1 = pod("u1", [container("c", { readiness: { periodSeconds: 1 } })]);
  const p2 = pod("u2", [container("c", { liveness: { periodSeconds: 1 } })]);
  t.manager.addPod(p1);
  t.manager.addPod(p2);
  await t.settle();
  assert.equal(t.manager.ready("id1"), true);
  assert.equal(t.calls.length, 2);
  t.manager.removePod(p1);
  assert.equal(t.manager.ready("id1"), undefined);
  assert.equal(t.manager.workerCount, 1);
  await t.step(S);
  assert.deepEqual(t.calls.slice(2).map((c) => c.id), ["id2"]);
  t.manager.cleanupPods(new Set(["u2"]));
  assert.equal(t.manager.workerCount, 1);
  t.manager.cleanupPods(new Set());
  assert.equal(t.manager.workerCount, 0);
  assert.equal(t.manager.liveness("id2"), undefined);
  assert.equal(t.manager.metricsText(), "");
  await t.step(S);
  assert.equal(t.calls.length, 3);
  assert.equal(t.clock.waiters, 0);
  await t.stop();
});

Deno.test("ProberManager stops a worker when the container exits and will not restart", async () => {
  const t = setup();
  t.statuses.set("u1", status("u1", [running("c", "id1", t.t0)]));
  t.manager.addPod(
    pod("u1", [container("c", { readiness: { periodSeconds: 1 } })], { restartPolicy: "Never" }),
  );
  await t.settle();
  assert.equal(t.manager.ready("id1"), true);
  t.statuses.set("u1", status("u1", [exited("c", "id1")]));
  await t.step(S);
  assert.equal(t.manager.workerCount, 0);
  assert.equal(t.manager.ready("id1"), undefined);
  assert.deepEqual(t.updates.map((u) => u[3]), ["Failure", "Success", "Failure"]);
  await t.stop();
});

Deno.test("ProberManager keeps probing an exited container its restart rules restart", async () => {
  const t = setup();
  t.statuses.set("u1", status("u1", [running("c", "id1", t.t0)]));
  const c: V1Container = {
    ...container("c", { readiness: { periodSeconds: 1 } }),
    restartPolicy: "Never",
    restartPolicyRules: [{ action: "Restart", exitCodes: { operator: "In", values: [1] } }],
  };
  t.manager.addPod(pod("u1", [c], { restartPolicy: "Never" }));
  await t.settle();
  t.statuses.set("u1", status("u1", [exited("c", "id1")]));
  await t.step(S);
  assert.equal(t.manager.workerCount, 1, "exit 1 matches its Restart rule");
  await t.stop();
});

Deno.test("ProberManager sets liveness Success and stops when the pod is being deleted", async () => {
  const t = setup();
  t.statuses.set("u1", status("u1", [running("c", "id1", t.t0)]));
  const p = pod("u1", [container("c", { liveness: { periodSeconds: 1 } })]);
  p.metadata!.deletionTimestamp = new Date(t.t0);
  t.manager.addPod(p);
  await t.settle();
  assert.equal(t.calls.length, 0);
  assert.equal(t.manager.workerCount, 0);
  await t.stop();
});

Deno.test("ProberManager probes sidecars and not plain init containers", async () => {
  const t = setup();
  t.manager.addPod(pod("u1", [container("c", { readiness: {} })], {
    initContainers: [
      { name: "side", restartPolicy: "Always", readinessProbe: {} },
      { name: "init", readinessProbe: {} },
    ],
  }));
  assert.equal(t.manager.workerCount, 2);
  await t.stop();
});

Deno.test("ProberManager metricsText prints upstream's families and labels", async () => {
  const t = setup();
  t.statuses.set("u1", status("u1", [running("c", "id1", t.t0)]));
  const liveness: Outcome["result"][] = ["Success", "Failure"];
  const pending: (() => void)[] = [];
  t.ctx.script = (kind) => {
    if (kind === "readiness") {
      // Readiness answers when the test says so: 0.3 s later on the clock.
      return new Promise<Outcome>((resolve) =>
        pending.push(() => resolve({ result: "Success", output: "" }))
      );
    }
    return { result: liveness.shift() ?? "Failure", output: "" };
  };
  t.manager.addPod(pod("u1", [container("c", {
    readiness: { periodSeconds: 10 },
    liveness: { periodSeconds: 10 },
  })]));
  await t.settle();
  await t.step(300);
  pending.shift()?.();
  await t.settle();
  await t.step(10 * S - 300);
  await t.step(300);
  pending.shift()?.();
  await t.settle();
  const l = 'container="c",namespace="ns",pod="pod-u1"';
  const buckets = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
  const bucketLines = (type: string, counts: number[]) =>
    buckets.map((le, i) =>
      `prober_probe_duration_seconds_bucket{${l},probe_type="${type}",le="${le}"} ${counts[i]}`
    );
  assert.equal(
    t.manager.metricsText(),
    [
      "# HELP prober_probe_duration_seconds [ALPHA] Duration in seconds for a probe response.",
      "# TYPE prober_probe_duration_seconds histogram",
      ...bucketLines("Liveness", [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]),
      `prober_probe_duration_seconds_bucket{${l},probe_type="Liveness",le="+Inf"} 1`,
      `prober_probe_duration_seconds_sum{${l},probe_type="Liveness"} 0`,
      `prober_probe_duration_seconds_count{${l},probe_type="Liveness"} 1`,
      ...bucketLines("Readiness", [0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2]),
      `prober_probe_duration_seconds_bucket{${l},probe_type="Readiness",le="+Inf"} 2`,
      `prober_probe_duration_seconds_sum{${l},probe_type="Readiness"} 0.6`,
      `prober_probe_duration_seconds_count{${l},probe_type="Readiness"} 2`,
      "# HELP prober_probe_total [BETA] Cumulative number of a liveness, readiness or startup probe for a container by result.",
      "# TYPE prober_probe_total counter",
      `prober_probe_total{${l},pod_uid="u1",probe_type="Liveness",result="failed"} 1`,
      `prober_probe_total{${l},pod_uid="u1",probe_type="Liveness",result="successful"} 1`,
      `prober_probe_total{${l},pod_uid="u1",probe_type="Readiness",result="successful"} 2`,
      "",
    ].join("\n"),
  );
  await t.stop();
});

Deno.test("ProberManager run refuses to run twice", async () => {
  const t = setup();
  await assert.rejects(t.manager.run(new AbortController().signal), /already running/);
  await t.stop();
});

Deno.test("probeTerminationGracePeriodSeconds takes the probe's own grace period", () => {
  const c = container("c", { liveness: { terminationGracePeriodSeconds: 5 }, startup: {} });
  assert.equal(probeTerminationGracePeriodSeconds(c, "liveness"), 5);
  assert.equal(probeTerminationGracePeriodSeconds(c, "startup"), undefined);
});

Deno.test("goFloat prints sample values as Go's FormatFloat 'g'", () => {
  assert.deepEqual(
    [0, 1, 0.6, 2.5, 123456, 1e6, 1234567, 0.0001, 0.00001, Infinity].map(goFloat),
    ["0", "1", "0.6", "2.5", "123456", "1e+06", "1.234567e+06", "0.0001", "1e-05", "+Inf"],
  );
});

Deno.test("ProberManager's loop keeps nothing per wake: the heap stays flat over 20,000 probe rounds", async () => {
  // The loop once raced a promise that lived until
  // the stop at each wake: 18.7 MB for 20,000 wakes (with 250 probed pods, tens a second).
  const growth = await loopHeapGrowth("prober", 20_000);
  assert.ok(growth < 2 * 2 ** 20, `the heap grew by ${growth} bytes over 20,000 wakes`);
});
