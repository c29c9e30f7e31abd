import assert from "node:assert/strict";
import { join } from "node:path";
import { buildCgroupFixture, type FixtureCgroup } from "../testing/cgroup_fixtures.ts";
import { Cadvisor, type CadvisorOptions, type SampleTarget, SPEC_REFRESH_MS } from "./cadvisor.ts";
import { detectCgroupLayout } from "../cm/cgroup_layout.ts";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import { setHostRoot } from "../privilege/host_root.ts";

const A = "/k8s.io/aaaa";
const B = "/k8s.io/bbbb";

/** Lets the loop's timers and file reads run. */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((r) => setTimeout(r, 0));
}

function cgroup(path: string, cpuNs: bigint, memUsage = 64 * 2 ** 20): FixtureCgroup {
  return { path, cpuNs, memUsage, inactiveFile: 16 * 2 ** 20, rss: 32 * 2 ** 20, pids: 3 };
}

async function world(
  mode: "v1" | "v2" | "hybrid" = "hybrid",
  extra: Partial<CadvisorOptions> = {},
) {
  const root = await Deno.makeTempDir({ prefix: "cadvisor_test_" });
  const fixture = await buildCgroupFixture(root, mode, [cgroup(A, 1_000_000_000n), cgroup(B, 0n)]);
  const layout = await detectCgroupLayout({ root });
  const clock = new FakeClock();
  const lines: string[] = [];
  const logger = createLogger({ write: (l) => void lines.push(l), pid: 1, verbosity: 4 });
  let targets: SampleTarget[] = [
    { id: "a", kind: "container", podUid: "p1" },
    { id: "b", kind: "container", podUid: "p1" },
  ];
  const pidCalls: string[] = [];
  const cadvisor = new Cadvisor({
    layout,
    root,
    clock,
    logger,
    targets: () => targets,
    pidOf: (t) => {
      pidCalls.push(t.id);
      if (t.id === "gone") return Promise.reject(new Error("container not found"));
      return Promise.resolve(fixture.pids.get(t.id === "a" ? A : B));
    },
    ...extra,
  });
  return {
    root,
    clock,
    lines,
    cadvisor,
    pidCalls,
    setTargets: (t: SampleTarget[]) => targets = t,
    rebuild: (cgroups: FixtureCgroup[]) => buildCgroupFixture(root, mode, cgroups),
    [Symbol.asyncDispose]: () => Deno.remove(root, { recursive: true }),
  };
}

for (const mode of ["hybrid", "v2"] as const) {
  Deno.test(`Cadvisor samples containers and computes usageNanoCores between passes (${mode})`, async () => {
    await using w = await world(mode);
    await w.cadvisor.housekeep();
    const first = w.cadvisor.latest("a");
    assert.equal(first?.cgroup.cpu?.usageCoreNanoSeconds, 1_000_000_000n);
    assert.equal(first?.usageNanoCores, undefined, "no rate from one sample");
    assert.equal(first?.cgroup.memory?.workingSetBytes, 48 * 2 ** 20);
    assert.equal(first?.cgroupPath, A);
    assert.ok(w.cadvisor.node()?.cgroup.memory !== undefined);

    // 10 s later container a used 5 more CPU-seconds: half a core.
    w.clock.step(10_000);
    await w.rebuild([cgroup(A, 6_000_000_000n), cgroup(B, 0n)]);
    await w.cadvisor.housekeep();
    assert.equal(w.cadvisor.latest("a")?.usageNanoCores, 500_000_000);
    assert.equal(w.cadvisor.latest("b")?.usageNanoCores, 0);
    // Each container's cgroup was looked up once.
    assert.deepEqual(w.pidCalls.sort(), ["a", "b"]);
  });
}

Deno.test("Cadvisor drops containers that stopped and tolerates a vanished cgroup", async () => {
  await using w = await world();
  await w.cadvisor.housekeep();
  assert.equal(w.cadvisor.trackedCount, 2);

  // b's cgroup disappears under us: no values, no throw, and the reason is logged once.
  for (const ctrl of ["cpu", "cpuacct", "memory", "pids"]) {
    await Deno.remove(join(w.root, "sys/fs/cgroup", ctrl, B), { recursive: true }).catch(() => {});
  }
  w.clock.step(10_000);
  await w.cadvisor.housekeep();
  w.clock.step(10_000);
  await w.cadvisor.housekeep();
  const b = w.cadvisor.latest("b");
  assert.equal(b?.cgroup.cpu, undefined);
  assert.equal(b?.cgroup.memory, undefined);
  const logged = w.lines.filter((l) =>
    l.includes("Statistics value omitted") && l.includes('id="b"')
  );
  assert.ok(logged.length > 0, "the reason is logged");
  assert.equal(new Set(logged).size, logged.length, "each reason once");

  // b is gone from the runtime: its sample is dropped.
  w.setTargets([{ id: "a", kind: "container", podUid: "p1" }]);
  await w.cadvisor.housekeep();
  assert.equal(w.cadvisor.trackedCount, 1);
  assert.equal(w.cadvisor.latest("b"), undefined);
});

Deno.test("Cadvisor keeps a container's spec for a minute unless its memory limit moves, and its creation time for good", async () => {
  await using w = await world();
  const shares = join(w.root, "sys/fs/cgroup/cpu", A, "cpu.shares");
  const dir = join(w.root, "sys/fs/cgroup/cpu", A);
  await w.cadvisor.housekeep();
  const first = w.cadvisor.latest("a")!.cgroup.detail!;
  assert.equal(first.spec.cpuShares, 1024);
  assert.ok(first.creationTimeMs !== undefined);

  // A resize of CPU alone shows within SPEC_REFRESH_MS; the creation time is not read again.
  await Deno.writeTextFile(shares, "2048\n");
  await Deno.utime(dir, 1_000, 1_000);
  w.clock.step(10_000);
  await w.cadvisor.housekeep();
  assert.equal(w.cadvisor.latest("a")!.cgroup.detail!.spec.cpuShares, 1024, "kept");
  w.clock.step(SPEC_REFRESH_MS);
  await w.cadvisor.housekeep();
  const later = w.cadvisor.latest("a")!.cgroup.detail!;
  assert.equal(later.spec.cpuShares, 2048, "read again after a minute");
  assert.equal(later.creationTimeMs, first.creationTimeMs);

  // A memory limit that moved takes the whole spec again at once, the limit read once.
  await w.rebuild([{ ...cgroup(A, 1_000_000_000n), limit: 2 ** 30 }, cgroup(B, 0n)]);
  await Deno.writeTextFile(shares, "4096\n");
  w.clock.step(10_000);
  const limitReads = await countReads("memory.limit_in_bytes", () => w.cadvisor.housekeep());
  const moved = w.cadvisor.latest("a")!.cgroup;
  assert.equal(moved.memory?.limitBytes, 2 ** 30);
  assert.equal(moved.detail!.spec.memoryLimit, 2 ** 30);
  assert.equal(moved.detail!.spec.cpuShares, 4096);
  assert.equal(moved.detail!.creationTimeMs, first.creationTimeMs, "the same cgroup");
  // The node's root, a and b: the spec read after the sample reads none of its files again.
  assert.equal(limitReads, 3);

  // CPU time that went back: the cgroup was made again at the path; its creation time too.
  await w.rebuild([cgroup(A, 1_000n), cgroup(B, 0n)]);
  await Deno.utime(dir, 5_000, 5_000);
  w.clock.step(10_000);
  await w.cadvisor.housekeep();
  assert.equal(w.cadvisor.latest("a")!.cgroup.detail!.creationTimeMs, 5_000_000);
});

/** How many times `fn` reads files named `name`. */
async function countReads(name: string, fn: () => Promise<void>): Promise<number> {
  const read = Deno.readTextFileSync;
  let n = 0;
  Deno.readTextFileSync = (path: string | URL) => {
    if (String(path).endsWith(`/${name}`)) n++;
    return read(path);
  };
  try {
    await fn();
  } finally {
    Deno.readTextFileSync = read;
  }
  return n;
}

Deno.test("Cadvisor under the sandbox's host view lists no process's descriptors", async () => {
  // hostRoot() is the view's directory there, which has named /proc files only.
  await using w = await world("hybrid", { root: undefined });
  const list = Deno.readDirSync;
  const listed: string[] = [];
  Deno.readDirSync = (path: string | URL) => {
    listed.push(String(path));
    return list(path);
  };
  // The container's cgroup holds a process whose descriptors a real /proc would list.
  await Deno.writeTextFile(join(w.root, "sys/fs/cgroup/cpu", A, "cgroup.procs"), "4242\n");
  setHostRoot(w.root);
  try {
    await w.cadvisor.housekeep();
    w.clock.step(10_000);
    await w.cadvisor.housekeep();
  } finally {
    setHostRoot("/");
    Deno.readDirSync = list;
  }
  assert.ok(w.cadvisor.latest("a")?.cgroup.cpu, "sampled through the view");
  assert.equal(w.cadvisor.latest("a")?.processes?.processes, 1);
  assert.equal(w.cadvisor.latest("a")?.processes?.fileDescriptors, undefined);
  assert.deepEqual(listed.filter((p) => p.endsWith("/fd")), []);
});

Deno.test("Cadvisor logs a container whose pid the runtime cannot give once, and goes on", async () => {
  await using w = await world();
  w.setTargets([
    { id: "gone", kind: "container", podUid: "p1" },
    { id: "a", kind: "container", podUid: "p1" },
  ]);
  await w.cadvisor.housekeep();
  await w.cadvisor.housekeep();
  assert.equal(w.cadvisor.latest("gone"), undefined);
  assert.ok(w.cadvisor.latest("a")?.cgroup.cpu);
  const logged = w.lines.filter((l) => l.includes("container not found"));
  assert.equal(logged.length, 1);
});

Deno.test("Cadvisor.run samples every housekeeping interval until aborted", async () => {
  await using w = await world();
  const ctrl = new AbortController();
  const running = new Cadvisor({
    layout: await detectCgroupLayout({ root: w.root }),
    root: w.root,
    clock: w.clock,
    logger: createLogger({ write: () => {} }),
    targets: () => [],
    pidOf: () => Promise.resolve(undefined),
    intervalMs: 10_000,
  });
  const done = running.run(ctrl.signal);
  await settle();
  const t1 = running.node()?.time;
  assert.equal(t1, w.clock.now());
  w.clock.step(10_000);
  await settle();
  assert.equal(running.node()?.time, t1! + 10_000);
  ctrl.abort();
  await done;
});

Deno.test("Cadvisor samples a target with a known cgroup path without asking for a pid", async () => {
  await using w = await world();
  w.setTargets([{ id: "system:misc", kind: "container", podUid: "", cgroupPath: A }]);
  await w.cadvisor.housekeep();
  assert.deepEqual(w.pidCalls, []);
  assert.equal(w.cadvisor.latest("system:misc")?.cgroup.cpu?.usageCoreNanoSeconds, 1_000_000_000n);
  assert.equal(w.cadvisor.latest("system:misc")?.cgroupPath, A);
});

Deno.test("Cadvisor.run samples an idle container every 15 s and a changing one every 10 s, plus jitter", async () => {
  const random = { value: 0 };
  await using w = await world("hybrid", { random: () => random.value });
  const ctrl = new AbortController();
  const done = w.cadvisor.run(ctrl.signal);
  const t0 = w.clock.now();
  /** Moves the clock a second at a time (the loop's tick) to t0 + `s` seconds. */
  const at = async (s: number) => {
    while (w.clock.now() < t0 + s * 1000) {
      w.clock.step(1000);
      await settle();
    }
  };
  const sampledAt = (id: string) => (w.cadvisor.latest(id)!.time - t0) / 1000;
  try {
    await settle();
    assert.equal(sampledAt("a"), 0, "new containers at once");
    await at(9);
    assert.equal(sampledAt("a"), 0);
    await at(10);
    assert.equal(sampledAt("a"), 10, "the second sample after the base interval");
    assert.equal(sampledAt("b"), 10);
    // Both samples were equal: the interval grows to the 15 s maximum.
    await at(24);
    assert.equal(sampledAt("a"), 10);
    await at(25);
    assert.equal(sampledAt("a"), 25);
    // a's CPU moves; b stays idle. From here each wait gets half its interval on top.
    await w.rebuild([cgroup(A, 6_000_000_000n), cgroup(B, 0n)]);
    random.value = 0.5;
    await at(40);
    assert.equal(sampledAt("a"), 40);
    assert.equal(sampledAt("b"), 40);
    // a changed: back to 10 s, + 5 s of jitter.
    await at(54);
    assert.equal(sampledAt("a"), 40);
    await at(55);
    assert.equal(sampledAt("a"), 55);
    // b is still idle: 15 s + 7.5 s, sampled at the first tick after.
    await at(62);
    assert.equal(sampledAt("b"), 40);
    await at(63);
    assert.equal(sampledAt("b"), 63);
    // The node keeps its 10 s.
    assert.equal((w.cadvisor.node()!.time - t0) / 1000, 60);
  } finally {
    ctrl.abort();
    await done;
  }
});

Deno.test("Cadvisor.run asks again for a container's pid after the base interval, not at every wake", async () => {
  await using w = await world();
  w.setTargets([{ id: "gone", kind: "container", podUid: "p1" }]);
  const ctrl = new AbortController();
  const done = w.cadvisor.run(ctrl.signal);
  try {
    await settle();
    assert.deepEqual(w.pidCalls, ["gone"]);
    for (let s = 1; s < 10; s++) {
      w.clock.step(1000);
      await settle();
    }
    assert.deepEqual(w.pidCalls, ["gone"]);
    w.clock.step(1000);
    await settle();
    assert.deepEqual(w.pidCalls, ["gone", "gone"]);
  } finally {
    ctrl.abort();
    await done;
  }
});
