import assert from "node:assert/strict";
import { gunzipSync } from "node:zlib";
import * as api from "../../proto/runtime/v1/api.ts";
import { FakeClock } from "../util/clock.ts";
import {
  ContainerLogManager,
  ContainerLogPolicyError,
  filterUnusedLogs,
  getAllLogs,
  timestampSuffix,
} from "./container_log_manager.ts";
import { createLogger } from "../klog/klog.ts";
import { MetricsRegistry } from "../metrics/metrics.ts";
import { WorkqueueMetrics } from "../metrics/workqueue_metrics.ts";

/** A runtime with containers whose logs live in `dir`; reopen creates the file as containerd. */
function fakeRuntime(dir: string, containers: Record<string, api.ContainerState>) {
  const reopened: string[] = [];
  const statusAsked: string[] = [];
  let failReopen = false;
  const runtime = {
    listContainers: () =>
      Promise.resolve(
        Object.entries(containers).map(([id, state]) => api.Container.fromPartial({ id, state })),
      ),
    containerStatus: (id: string) => {
      statusAsked.push(id);
      return Promise.resolve(
        api.ContainerStatusResponse.fromPartial({ status: { id, logPath: `${dir}/${id}/0.log` } }),
      );
    },
    async reopenContainerLog(id: string) {
      if (failReopen) throw new Error("rpc error: code = Unknown desc = reopen failed");
      reopened.push(id);
      await Deno.writeFile(`${dir}/${id}/0.log`, new Uint8Array(), { append: true });
    },
  };
  return { runtime, reopened, statusAsked, failReopen: () => (failReopen = true) };
}

function manager(
  runtime: ReturnType<typeof fakeRuntime>["runtime"],
  clock: FakeClock,
  lines: string[] = [],
  o: { maxSize?: string; maxFiles?: number } = {},
) {
  return new ContainerLogManager({
    runtime,
    maxSize: o.maxSize ?? "100",
    maxFiles: o.maxFiles ?? 3,
    maxWorkers: 2,
    monitorIntervalMs: 10_000,
    clock,
    logger: createLogger({ write: (l) => lines.push(l), verbosity: 4 }),
  });
}

async function names(dir: string): Promise<string[]> {
  const out: string[] = [];
  for await (const e of Deno.readDir(dir)) out.push(e.name);
  return out.sort();
}

Deno.test("ContainerLogManager refuses MaxFiles below 2 and a bad size as upstream", () => {
  const { runtime } = fakeRuntime("/nonexistent", {});
  const clock = new FakeClock();
  assert.throws(
    () => manager(runtime, clock, [], { maxFiles: 1 }),
    (e) => e instanceof ContainerLogPolicyError && e.message === "invalid MaxFiles 1, must be > 1",
  );
  assert.throws(
    () => manager(runtime, clock, [], { maxSize: "ten" }),
    /failed to parse container log max size "ten"/,
  );
  assert.equal(manager(runtime, clock, [], { maxSize: "10Mi" }).maxSize, 10 * 1024 * 1024);
});

Deno.test("ContainerLogManager rotates a full log, gzips the older one and keeps MaxFiles", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.mkdir(`${dir}/c1`);
    await Deno.mkdir(`${dir}/small`);
    await Deno.mkdir(`${dir}/gone`);
    const { runtime, reopened } = fakeRuntime(dir, {
      c1: api.ContainerState.CONTAINER_RUNNING,
      small: api.ContainerState.CONTAINER_RUNNING,
      gone: api.ContainerState.CONTAINER_EXITED,
    });
    const clock = new FakeClock(new Date(2026, 0, 2, 3, 4, 5).getTime());
    const m = manager(runtime, clock);
    await Deno.writeTextFile(`${dir}/small/0.log`, "short\n");
    await Deno.writeTextFile(`${dir}/gone/0.log`, "x".repeat(500));
    const rounds: string[] = [];
    for (let round = 0; round < 4; round++) {
      await Deno.writeTextFile(`${dir}/c1/0.log`, `round ${round} `.repeat(20), { append: true });
      await m.rotateLogs();
      await m.idle();
      rounds.push(timestampSuffix(new Date(clock.now())));
      clock.step(11_000);
    }
    // Live log, newest rotated plain, one compressed: MaxFiles 3.
    const [r0, r1, r2, r3] = rounds;
    assert.equal(r0, "20260102-030405");
    assert.deepEqual(await names(`${dir}/c1`), [
      "0.log",
      `0.log.${r2}.gz`,
      `0.log.${r3}`,
    ]);
    assert.ok(r1 && !(await names(`${dir}/c1`)).some((n) => n.includes(r1)), "oldest went");
    assert.equal(await Deno.readTextFile(`${dir}/c1/0.log`), "");
    assert.equal(
      new TextDecoder().decode(gunzipSync(await Deno.readFile(`${dir}/c1/0.log.${r2}.gz`))),
      "round 2 ".repeat(20),
    );
    assert.equal(await Deno.readTextFile(`${dir}/c1/0.log.${r3}`), "round 3 ".repeat(20));
    assert.deepEqual(reopened, ["c1", "c1", "c1", "c1"], "only the full, running log rotates");
    assert.deepEqual(await names(`${dir}/gone`), ["0.log"]);
    assert.deepEqual(await getAllLogs(`${dir}/c1/0.log`), [
      `${dir}/c1/0.log.${r2}.gz`,
      `${dir}/c1/0.log.${r3}`,
      `${dir}/c1/0.log`,
    ]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ContainerLogManager removes leftovers of an interrupted rotation", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.mkdir(`${dir}/c1`);
    const base = `${dir}/c1/0.log`;
    await Deno.writeTextFile(`${base}.20260101-000000`, "compressed already");
    await Deno.writeTextFile(`${base}.20260101-000000.gz`, "gz");
    await Deno.writeTextFile(`${base}.20260101-000010.tmp`, "half");
    await Deno.writeTextFile(base, "y".repeat(200));
    const { runtime } = fakeRuntime(dir, { c1: api.ContainerState.CONTAINER_RUNNING });
    const clock = new FakeClock(new Date(2026, 0, 1, 0, 1, 0).getTime());
    const m = manager(runtime, clock, [], { maxFiles: 4 });
    await m.rotateLogs();
    await m.idle();
    assert.deepEqual(await names(`${dir}/c1`), [
      "0.log",
      "0.log.20260101-000000.gz",
      "0.log.20260101-000100",
    ]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ContainerLogManager renames the log back when reopening fails, and reopens a lost log", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.mkdir(`${dir}/c1`);
    await Deno.mkdir(`${dir}/lost`);
    const { runtime, reopened, failReopen } = fakeRuntime(dir, {
      c1: api.ContainerState.CONTAINER_RUNNING,
    });
    const lines: string[] = [];
    const m = manager(runtime, new FakeClock(), lines);
    await Deno.writeTextFile(`${dir}/c1/0.log`, "z".repeat(300));
    failReopen();
    await m.rotateLogs();
    await m.idle();
    assert.deepEqual(await names(`${dir}/c1`), ["0.log"]);
    assert.equal((await Deno.stat(`${dir}/c1/0.log`)).size, 300);
    assert.ok(
      lines.some((l) =>
        l.includes("Failed to rotate log for container") && l.includes("reopen failed")
      ),
      lines.join("\n"),
    );

    const lost = fakeRuntime(dir, { lost: api.ContainerState.CONTAINER_RUNNING });
    const m2 = manager(lost.runtime, new FakeClock());
    await m2.rotateLogs();
    await m2.idle();
    assert.deepEqual(lost.reopened, ["lost"]);
    assert.deepEqual(await names(`${dir}/lost`), ["0.log"]);
    assert.deepEqual(reopened, []);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ContainerLogManager runs a round every monitor interval and stops on abort", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.mkdir(`${dir}/c1`);
    const { runtime, reopened } = fakeRuntime(dir, { c1: api.ContainerState.CONTAINER_RUNNING });
    const clock = new FakeClock();
    const m = manager(runtime, clock);
    const ac = new AbortController();
    await Deno.writeTextFile(`${dir}/c1/0.log`, "a".repeat(150));
    const running = m.run(ac.signal);
    const settle = async () => {
      while (clock.waiters === 0) await new Promise((r) => setTimeout(r, 0));
      await m.idle();
    };
    await settle();
    assert.equal(reopened.length, 1);
    await Deno.writeTextFile(`${dir}/c1/0.log`, "b".repeat(150), { append: true });
    clock.step(9_999);
    await m.idle();
    assert.equal(reopened.length, 1, "not before the interval");
    clock.step(1);
    await new Promise((r) => setTimeout(r, 0));
    await settle();
    assert.equal(reopened.length, 2);
    ac.abort();
    await running;
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ContainerLogManager asks a container's log path once while it runs", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const containers: Record<string, api.ContainerState> = {
      c1: api.ContainerState.CONTAINER_RUNNING,
      c2: api.ContainerState.CONTAINER_RUNNING,
    };
    for (const id of Object.keys(containers)) await Deno.mkdir(`${dir}/${id}`);
    const { runtime, reopened, statusAsked } = fakeRuntime(dir, containers);
    const m = manager(runtime, new FakeClock());
    const round = async () => {
      await m.rotateLogs();
      await m.idle();
    };
    await Deno.writeTextFile(`${dir}/c1/0.log`, "a".repeat(150));
    await Deno.writeTextFile(`${dir}/c2/0.log`, "small");
    await round();
    assert.deepEqual(statusAsked.sort(), ["c1", "c2"]);
    assert.deepEqual(reopened, ["c1"]);
    // Later rounds rotate with the path already known.
    await Deno.writeTextFile(`${dir}/c1/0.log`, "b".repeat(150), { append: true });
    await round();
    await round();
    assert.deepEqual(statusAsked, ["c1", "c2"]);
    assert.deepEqual(reopened, ["c1", "c1"]);
    // A container no longer running is forgotten: asked again if it is listed running again.
    containers.c2 = api.ContainerState.CONTAINER_EXITED;
    await round();
    containers.c2 = api.ContainerState.CONTAINER_RUNNING;
    await round();
    assert.deepEqual(statusAsked, ["c1", "c2", "c2"]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("filterUnusedLogs keeps compressed and plain rotated files, drops tmp and compressed copies", () => {
  assert.deepEqual(
    filterUnusedLogs(["a.log.1", "a.log.1.gz", "a.log.2", "a.log.3.tmp"]),
    { inuse: ["a.log.1.gz", "a.log.2"], unused: ["a.log.1", "a.log.3.tmp"] },
  );
});

Deno.test("ContainerLogManager reports its queue as upstream's kubelet_log_rotate_manager", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const containers = { c1: api.ContainerState.CONTAINER_RUNNING };
    await Deno.mkdir(`${dir}/c1`);
    await Deno.writeTextFile(`${dir}/c1/0.log`, "small");
    const { runtime } = fakeRuntime(dir, containers);
    const clock = new FakeClock();
    const workqueue = new WorkqueueMetrics(new MetricsRegistry(), { clock });
    const m = new ContainerLogManager({
      runtime,
      maxSize: "100",
      maxFiles: 3,
      maxWorkers: 1,
      monitorIntervalMs: 10_000,
      clock,
      logger: createLogger({ write: () => {} }),
      workqueue,
    });
    const name = { name: "kubelet_log_rotate_manager" };
    assert.equal(workqueue.depth.get(name), 0);
    await m.rotateLogs();
    await m.idle();
    await m.rotateLogs();
    await m.idle();
    assert.equal(workqueue.adds.get(name), 2);
    assert.equal(workqueue.depth.get(name), 0);
    assert.equal(workqueue.queueDuration.count(name), 2);
    assert.equal(workqueue.workDuration.count(name), 2);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
