import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import type { PodStatusOverride } from "../kubelet_pod_sync.ts";
import {
  groupByPriority,
  type InhibitLock,
  type Logind,
  migrateConfig,
  NODE_SHUTDOWN_MESSAGE,
  NodeShutdownManager,
  shutdownGroups,
  SYSTEM_CRITICAL_PRIORITY,
} from "./nodeshutdown_manager.ts";

function pod(name: string, priority?: number, grace?: number): V1Pod {
  return {
    metadata: { name, namespace: "default", uid: `uid-${name}` },
    spec: { containers: [], priority, terminationGracePeriodSeconds: grace },
  };
}

Deno.test("migrateConfig splits shutdownGracePeriod into regular and critical groups", () => {
  assert.deepEqual(migrateConfig(30_000, 10_000), [
    { priority: 0, shutdownGracePeriodSeconds: 20 },
    { priority: SYSTEM_CRITICAL_PRIORITY, shutdownGracePeriodSeconds: 10 },
  ]);
  assert.deepEqual(migrateConfig(0, 0), []);
  assert.deepEqual(migrateConfig(10_000, 20_000), []);
});

Deno.test("shutdownGroups prefers shutdownGracePeriodByPodPriority, sorted by priority", () => {
  assert.deepEqual(
    shutdownGroups({
      shutdownGracePeriod: 30_000,
      shutdownGracePeriodByPodPriority: [
        { priority: 100000, shutdownGracePeriodSeconds: 5 },
        { priority: 0, shutdownGracePeriodSeconds: 20 },
      ],
    }),
    [
      { priority: 0, shutdownGracePeriodSeconds: 20 },
      { priority: 100000, shutdownGracePeriodSeconds: 5 },
    ],
  );
  assert.deepEqual(shutdownGroups({}), []);
});

Deno.test("groupByPriority puts a pod in the highest group at or below its priority", () => {
  const groups = [
    { priority: 10, shutdownGracePeriodSeconds: 1 },
    { priority: 100, shutdownGracePeriodSeconds: 2 },
    { priority: 1000, shutdownGracePeriodSeconds: 3 },
  ];
  const out = groupByPriority(groups, [
    pod("below", 1),
    pod("none"),
    pod("at-100", 100),
    pod("between", 500),
    pod("above", 5000),
  ]);
  assert.deepEqual(out.map((g) => g.pods.map((p) => p.metadata!.name)), [
    ["below", "none"],
    ["at-100", "between"],
    ["above"],
  ]);
});

class FakeLogind implements Logind {
  delayMs = 0;
  /** What the delay becomes after a reload, when an override was written. */
  delayAfterReload: number | undefined;
  overrides: number[] = [];
  locks: { released: boolean }[] = [];
  onEvent: ((down: boolean) => void) | undefined;
  end = Promise.withResolvers<void>();
  currentInhibitDelayMs() {
    return Promise.resolve(this.delayMs);
  }
  overrideInhibitDelay(ms: number) {
    this.overrides.push(ms);
    return Promise.resolve();
  }
  reloadLogindConf() {
    if (this.delayAfterReload !== undefined) this.delayMs = this.delayAfterReload;
    return Promise.resolve();
  }
  inhibitShutdown(): Promise<InhibitLock> {
    const lock = { released: false };
    this.locks.push(lock);
    return Promise.resolve({
      release: () => {
        lock.released = true;
        return Promise.resolve();
      },
    });
  }
  monitorShutdown(onEvent: (down: boolean) => void) {
    this.onEvent = onEvent;
    return Promise.resolve({ ended: this.end.promise });
  }
  closed = 0;
  close() {
    this.closed++;
    this.end.resolve();
  }
}

async function harness(
  pods: V1Pod[],
  opts: { logind?: FakeLogind; state?: string } = {},
) {
  const dir = await Deno.makeTempDir({ prefix: "nodeshutdown-" });
  if (opts.state) await Deno.writeTextFile(`${dir}/graceful_node_shutdown_state`, opts.state);
  const gauges = { start: -1, end: -1 };
  const clock = new FakeClock();
  const logind = opts.logind ?? new FakeLogind();
  logind.delayMs ||= 60_000;
  const kills: { pod: string; grace: number; status: PodStatusOverride; at: number }[] = [];
  const pending = new Map<string, () => void>();
  const events: string[] = [];
  let syncs = 0;
  const lines: string[] = [];
  const manager = new NodeShutdownManager({
    groups: migrateConfig(30_000, 10_000),
    connect: () => Promise.resolve(logind),
    activePods: () => pods,
    killPod: (p, grace, status) => {
      kills.push({ pod: p.metadata!.name!, grace, status, at: clock.now() });
      return new Promise<void>((r) => pending.set(p.metadata!.name!, r));
    },
    syncNodeStatus: () => syncs++,
    stateFile: `${dir}/graceful_node_shutdown_state`,
    recorder: { event: (_o, type, reason, msg) => events.push(`${type} ${reason} ${msg}`) },
    nodeRef: { kind: "Node", name: "n1", uid: "n1" },
    clock,
    logger: createLogger({ write: (l) => lines.push(l), verbosity: 1 }),
    metrics: {
      start: { set: (v) => void (gauges.start = v) },
      end: { set: (v) => void (gauges.end = v) },
    },
  });
  const ac = new AbortController();
  return {
    dir,
    clock,
    logind,
    kills,
    pending,
    events,
    syncs: () => syncs,
    lines,
    manager,
    ac,
    gauges,
    async [Symbol.asyncDispose]() {
      ac.abort();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** Lets promise callbacks and file writes run. */
const settle = () => new Promise((r) => setTimeout(r, 0));

/** Settles until `f` holds (file writes take a few turns), failing after 500 turns. */
async function until(f: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !f(); i++) await settle();
  assert.ok(f(), "condition never held");
}

Deno.test("NodeShutdownManager kills regular pods, then critical ones, each group in its period", async () => {
  await using h = await harness([
    pod("web", undefined, 60),
    pod("short", 0, 3),
    pod("dns", SYSTEM_CRITICAL_PRIORITY),
  ]);
  await h.manager.start(h.ac.signal);
  assert.equal(h.logind.locks.length, 1);
  assert.equal(h.manager.admit(pod("new")).admit, true);

  h.logind.onEvent!(true);
  assert.equal(h.manager.shutdownStatus(), "node is shutting down");
  assert.deepEqual(h.manager.admit(pod("new")), {
    admit: false,
    reason: "NodeShutdown",
    message: "Pod was rejected as the node is shutting down.",
  });
  assert.deepEqual(h.events, ["Normal NodeShutdown Shutdown manager detected shutdown event"]);
  await until(() => h.kills.length === 2);
  assert.equal(h.syncs(), 1);
  // The regular group: the pod's own shorter grace period wins, the longer one is cut to 20 s.
  assert.deepEqual(h.kills.map((k) => [k.pod, k.grace]), [["web", 20], ["short", 3]]);
  const status = h.kills[0]!.status;
  assert.equal(status.phase, "Failed");
  assert.equal(status.reason, "Terminated");
  assert.equal(status.message, NODE_SHUTDOWN_MESSAGE);
  assert.deepEqual(
    status.conditions?.map((c) => [c.type, c.status, c.reason, c.message]),
    [["DisruptionTarget", "True", "TerminationByKubelet", NODE_SHUTDOWN_MESSAGE]],
  );
  // Critical pods wait for the regular group: both regular pods stop at once.
  h.pending.get("web")!();
  h.pending.get("short")!();
  await until(() => h.kills.length === 3);
  assert.deepEqual(h.kills.map((k) => k.pod), ["web", "short", "dns"]);
  assert.equal(h.kills[2]!.grace, 10);
  assert.equal(h.logind.locks[0]!.released, false);
  // The critical pod never stops: its group's 10 s run out, then the lock goes.
  await until(() => h.clock.waiters === 1);
  h.clock.step(10_000);
  await h.manager.idle();
  assert.equal(h.logind.locks[0]!.released, true);
  assert.ok(h.lines.some((l) => l.includes("Shutdown manager pod killing time out")));
  const state = JSON.parse(await Deno.readTextFile(`${h.dir}/graceful_node_shutdown_state`));
  assert.equal(state.startTime, new Date(Date.UTC(2026, 0, 1)).toISOString());
  assert.equal(state.endTime, new Date(Date.UTC(2026, 0, 1) + 10_000).toISOString());
});

Deno.test("NodeShutdownManager moves on after a group's period when its pods do not stop", async () => {
  await using h = await harness([pod("stuck"), pod("dns", SYSTEM_CRITICAL_PRIORITY)]);
  await h.manager.start(h.ac.signal);
  h.logind.onEvent!(true);
  await until(() => h.kills.length === 1 && h.clock.waiters === 1);
  assert.deepEqual(h.kills.map((k) => k.pod), ["stuck"]);
  h.clock.step(19_999);
  await settle();
  assert.deepEqual(h.kills.map((k) => k.pod), ["stuck"]);
  h.clock.step(1);
  await until(() => h.kills.length === 2);
  assert.deepEqual(h.kills.map((k) => [k.pod, k.at - h.kills[0]!.at]), [["stuck", 0], [
    "dns",
    20_000,
  ]]);
});

Deno.test("NodeShutdownManager takes the lock again when the shutdown is cancelled", async () => {
  await using h = await harness([]);
  await h.manager.start(h.ac.signal);
  h.logind.onEvent!(true);
  await h.manager.idle();
  assert.equal(h.logind.locks[0]!.released, true);
  h.logind.onEvent!(false);
  await h.manager.idle();
  assert.equal(h.manager.shutdownStatus(), undefined);
  assert.equal(h.manager.admit(pod("new")).admit, true);
  assert.equal(h.logind.locks.length, 2);
  assert.equal(h.logind.locks[1]!.released, false);
  assert.equal(h.syncs(), 2);
  assert.deepEqual(
    h.events.at(-1),
    "Normal NodeShutdown Shutdown manager detected shutdown cancellation",
  );
});

Deno.test("NodeShutdownManager raises logind's InhibitDelayMaxSec, and fails when it stays short", async () => {
  const raised = new FakeLogind();
  raised.delayMs = 5_000;
  raised.delayAfterReload = 30_000;
  {
    await using h = await harness([], { logind: raised });
    await h.manager.start(h.ac.signal);
    assert.deepEqual(raised.overrides, [30_000]);
    assert.equal(raised.locks.length, 1);
  }
  const stuck = new FakeLogind();
  stuck.delayMs = 5_000;
  await using h = await harness([], { logind: stuck });
  await assert.rejects(
    h.manager.start(h.ac.signal),
    new Error(
      "node shutdown manager was unable to update logind InhibitDelayMaxSec to 30s " +
        "(ShutdownGracePeriod), current value of InhibitDelayMaxSec (5s) is less than requested " +
        "ShutdownGracePeriod",
    ),
  );
  assert.equal(stuck.locks.length, 0);
});

Deno.test("NodeShutdownManager watches again a second after the bus goes away", async () => {
  await using h = await harness([]);
  await h.manager.start(h.ac.signal);
  const first = h.logind.end;
  h.logind.end = Promise.withResolvers<void>();
  first.resolve();
  await until(() => h.clock.waiters === 1);
  assert.equal(h.logind.locks.length, 1);
  h.clock.step(1_000);
  await until(() => h.logind.locks.length === 2);
  assert.equal(h.logind.locks.length, 2);
  assert.equal(h.logind.locks[0]!.released, true);
});

Deno.test("NodeShutdownManager start's watch ends when the kubelet stops", async () => {
  await using h = await harness([]);
  const { done } = await h.manager.start(h.ac.signal);
  h.ac.abort();
  await done;
  assert.ok(h.logind.closed >= 1);
});

Deno.test("NodeShutdownManager sets the shutdown time gauges from the state file and each shutdown", async () => {
  const t0 = Date.UTC(2026, 0, 1) / 1000;
  {
    await using h = await harness([], {
      state: '{"startTime":"2025-12-31T23:00:00Z","endTime":"2025-12-31T23:00:20Z"}',
    });
    await h.manager.start(h.ac.signal);
    assert.deepEqual(h.gauges, { start: t0 - 3600, end: t0 - 3580 });
  }
  await using h = await harness([], { state: '{"startTime":"0001-01-01T00:00:00Z"}' });
  await h.manager.start(h.ac.signal);
  assert.deepEqual(h.gauges, { start: -1, end: -1 });
  h.logind.onEvent!(true);
  await until(() => h.gauges.start === t0);
  await h.manager.idle();
  assert.deepEqual(h.gauges, { start: t0, end: t0 });
});
