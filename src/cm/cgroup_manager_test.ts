import assert from "node:assert/strict";
import { posix } from "node:path";
import {
  CgroupManager,
  CgroupManagerError,
  cpuSharesToCPUWeight,
  formatCgroupName,
  newCgroupName,
} from "./cgroup_manager.ts";
import type { SystemdUnits } from "./cgroup_systemd.ts";
import { FakeClock } from "../util/clock.ts";
import { KubeletMetrics } from "../metrics/metrics.ts";
import {
  canUseRealCgroups,
  captureLogger,
  type CmHost,
  type CmHostOptions,
  drive,
  makeCmHost,
  realCgroupManager,
} from "../testing/cm_fixtures.ts";

const POD = ["kubepods", "burstable", "pod1234"];
const MiB = 1024n * 1024n;

async function withHost(
  mode: "v1" | "v2" | "hybrid",
  fn: (host: CmHost, cm: CgroupManager, lines: string[], clock: FakeClock) => Promise<void>,
  opts: CmHostOptions = {},
): Promise<void> {
  const host = await makeCmHost(mode, opts);
  const { logger, lines } = captureLogger();
  const clock = new FakeClock();
  try {
    const cm = new CgroupManager({
      layout: host.layout,
      logger,
      fs: host.fs,
      hugePagesDir: host.hugePagesDir,
      clock,
    });
    await fn(host, cm, lines, clock);
  } finally {
    await host.cleanup();
  }
}

Deno.test("CgroupManager name and runtimeName follow the driver", () => {
  const layout = { mode: "v1" as const, root: "/sys/fs/cgroup", v1: new Map() };
  const { logger } = captureLogger();
  const fs = new CgroupManager({ layout, logger });
  assert.equal(fs.name(POD), "/kubepods/burstable/pod1234");
  assert.equal(fs.runtimeName(POD), "/kubepods/burstable/pod1234");
  assert.equal(fs.name([]), "/");
  assert.deepEqual(fs.parse("/kubepods/burstable/pod1234"), POD);
  const sd = new CgroupManager({ layout, logger, driver: "systemd" });
  const name = ["kubepods", "burstable", "pod12-34"];
  const expanded = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice";
  assert.equal(sd.name(name), expanded);
  // Upstream hands the runtime the expanded path; a systemd runtime takes its last slice.
  assert.equal(sd.runtimeName(name), expanded);
  assert.deepEqual(sd.parse(expanded), name);
  assert.deepEqual(sd.parse("/"), []);
});

Deno.test("newCgroupName refuses '/' and '_' and formatCgroupName prints Go's %q", () => {
  assert.deepEqual(newCgroupName(["kubepods"], "burstable"), ["kubepods", "burstable"]);
  assert.throws(() => newCgroupName([], "a_b"), /invalid character in component "a_b"/);
  assert.throws(() => newCgroupName([], "a/b"), /invalid character/);
  assert.equal(formatCgroupName(["kubepods", "besteffort"]), '["kubepods" "besteffort"]');
});

Deno.test("cpuSharesToCPUWeight converts as upstream getCPUWeight", () => {
  assert.equal(cpuSharesToCPUWeight(2n), 1n);
  assert.equal(cpuSharesToCPUWeight(1024n), 39n);
  assert.equal(cpuSharesToCPUWeight(262_143n), 9_999n);
  assert.equal(cpuSharesToCPUWeight(262_144n), 10_000n);
  assert.equal(cpuSharesToCPUWeight(500_000n), 10_000n);
});

Deno.test("CgroupManager create on v1 makes every subsystem's directory and writes limits", async () => {
  await withHost("v1", async (host, cm) => {
    await cm.create(POD, {
      cpuShares: 512n,
      cpuQuota: 50_000n,
      cpuPeriod: 100_000n,
      memory: 256n * MiB,
      pidsLimit: 100n,
      hugePageLimit: new Map([[2 * 1024 * 1024, 4n * MiB]]),
    });
    const path = "/kubepods/burstable/pod1234";
    for (const c of ["cpu", "cpuacct", "cpuset", "memory", "pids", "hugetlb", "name=systemd"]) {
      assert.ok(await host.fs.exists(host.dir(c, path)), `${c} directory`);
    }
    assert.equal(await host.fs.exists(host.dir("devices", path)), false, "devices is skipped");
    assert.equal(await host.read("cpu", path, "cpu.shares"), "512");
    assert.equal(await host.read("cpu", path, "cpu.cfs_quota_us"), "50000");
    assert.equal(await host.read("cpu", path, "cpu.cfs_period_us"), "100000");
    assert.equal(await host.read("memory", path, "memory.limit_in_bytes"), String(256n * MiB));
    assert.equal(await host.read("pids", path, "pids.max"), "100");
    assert.equal(await host.read("hugetlb", path, "hugetlb.2MB.limit_in_bytes"), String(4n * MiB));
    assert.equal(
      await host.read("hugetlb", path, "hugetlb.2MB.rsvd.limit_in_bytes"),
      String(4n * MiB),
    );
    // A new cpuset cgroup is empty; every level copied its parent's cpus and mems.
    for (const p of ["/kubepods", "/kubepods/burstable", path]) {
      assert.equal(await host.read("cpuset", p, "cpuset.cpus"), "0-1");
      assert.equal(await host.read("cpuset", p, "cpuset.mems"), "0");
    }
    assert.equal(await cm.exists(POD), true);
    assert.equal(await cm.exists(["kubepods", "besteffort"]), false);
  });
});

Deno.test("CgroupManager create of a pod below existing cgroups makes one directory per hierarchy and stats none", async () => {
  await withHost("v1", async (host, cm) => {
    await cm.create(["kubepods", "burstable"]);
    const calls: string[] = [];
    const fs = host.fs;
    const counted = new CgroupManager({
      layout: host.layout,
      logger: captureLogger().logger,
      hugePagesDir: host.hugePagesDir,
      fs: {
        mkdir: (p) => (calls.push(`mkdir ${p.slice(host.root.length)}`), fs.mkdir(p)),
        rmdir: (p) => fs.rmdir(p),
        readFile: (p) => (calls.push(`read ${p.slice(host.root.length)}`), fs.readFile(p)),
        writeFile: (p, v) => fs.writeFile(p, v),
        readDirs: (p) => fs.readDirs(p),
        exists: (p) => (calls.push(`exists ${p.slice(host.root.length)}`), fs.exists(p)),
      },
    });
    await counted.create(POD, { cpuShares: 512n });
    // No parent is asked for (a mkdir would say ENOENT), and no existing cpuset level is made
    // again or read but the pod's parent, whose cpus and mems the pod copies.
    assert.deepEqual(calls.filter((c) => c.startsWith("exists")), []);
    const dirs = ["cpu", "cpuset", "memory", "pids", "hugetlb", "name=systemd"];
    assert.deepEqual(
      calls.filter((c) => c.startsWith("mkdir")).sort(),
      dirs.map((c) => `mkdir ${host.dir(c, "/kubepods/burstable/pod1234").slice(host.root.length)}`)
        .sort(),
    );
    const cpuset = (p: string, f: string) =>
      `read ${host.dir("cpuset", p).slice(host.root.length)}/${f}`;
    assert.deepEqual(calls.filter((c) => /^read .*\/cpuset\.(cpus|mems)$/.test(c)), [
      cpuset("/kubepods/burstable/pod1234", "cpuset.cpus"),
      cpuset("/kubepods/burstable", "cpuset.cpus"),
      cpuset("/kubepods/burstable/pod1234", "cpuset.mems"),
      cpuset("/kubepods/burstable", "cpuset.mems"),
    ]);
    assert.equal(await host.read("cpuset", "/kubepods/burstable/pod1234", "cpuset.cpus"), "0-1");
    assert.equal(await host.read("cpu", "/kubepods/burstable/pod1234", "cpu.shares"), "512");
  });
});

Deno.test("CgroupManager create below a cpuset parent left empty fills every level from the mount", async () => {
  await withHost("v1", async (host, cm) => {
    await cm.create(["kubepods", "burstable"]);
    // Someone emptied the parent's cpus: the pod could not copy them, so the levels are
    // walked from the mount as runc's cpusetEnsureParent does.
    await host.poke("cpuset", "/kubepods/burstable", "cpuset.cpus", "");
    await cm.create(POD);
    for (const p of ["/kubepods/burstable", "/kubepods/burstable/pod1234"]) {
      assert.equal(await host.read("cpuset", p, "cpuset.cpus"), "0-1", p);
      assert.equal(await host.read("cpuset", p, "cpuset.mems"), "0", p);
    }
  });
});

Deno.test("CgroupManager limits page sizes the config leaves out to 0", async () => {
  await withHost("v1", async (host, cm) => {
    await cm.create(["kubepods"], { hugePageLimit: new Map([[2 * 1024 * 1024, 1n << 62n]]) });
    assert.equal(await host.read("hugetlb", "/kubepods", "hugetlb.1GB.limit_in_bytes"), "0");
    assert.equal(
      await host.read("hugetlb", "/kubepods", "hugetlb.2MB.limit_in_bytes"),
      String(1n << 62n),
    );
  }, { hugePagesKB: [2048, 1048576] });
});

Deno.test("CgroupManager writes the cfs period again after the quota when the kernel refused it", async () => {
  await withHost("v1", async (host, cm) => {
    await cm.create(POD);
    host.fs.writes.length = 0;
    host.fs.failOnce.set("cpu.cfs_period_us", "EINVAL");
    await cm.update(POD, { cpuShares: 1024n, cpuQuota: 20_000n, cpuPeriod: 50_000n });
    const cpu = host.fs.writes.map((w) => w.split("/").pop()!).filter((f) => f.startsWith("cpu."));
    assert.deepEqual(cpu, [
      "cpu.shares=1024",
      "cpu.cfs_period_us=50000",
      "cpu.cfs_quota_us=20000",
      "cpu.cfs_period_us=50000",
    ]);
    assert.equal(
      await host.read("cpu", "/kubepods/burstable/pod1234", "cpu.cfs_period_us"),
      "50000",
    );
  });
});

Deno.test("CgroupManager update says why a v1 memory limit below usage fails", async () => {
  await withHost("v1", async (host, cm) => {
    await cm.create(POD);
    await host.poke("memory", "/kubepods/burstable/pod1234", "memory.usage_in_bytes", "5000\n");
    await host.poke("memory", "/kubepods/burstable/pod1234", "memory.max_usage_in_bytes", "7000\n");
    await assert.rejects(
      cm.update(POD, { memory: 4096n }),
      (e: Error) =>
        e instanceof CgroupManagerError &&
        e.message.includes('["kubepods" "burstable" "pod1234"]') &&
        e.message.includes(
          "unable to set memory limit to 4096 (current usage: 5000, peak usage: 7000)",
        ),
    );
  });
});

Deno.test("CgroupManager update reports cpu shares the kernel clamped", async () => {
  await withHost("v1", async (_host, cm) => {
    await cm.create(POD);
    await assert.rejects(cm.update(POD, { cpuShares: 1n }), /the minimum allowed cpu-shares is 2/);
    await assert.rejects(
      cm.update(POD, { cpuShares: 300_000n }),
      /the maximum allowed cpu-shares is 262144/,
    );
  });
});

Deno.test("CgroupManager writes pids.max as runc does for -1 and 0", async () => {
  await withHost("v1", async (host, cm) => {
    await cm.create(POD, { pidsLimit: -1n });
    assert.equal(await host.read("pids", "/kubepods/burstable/pod1234", "pids.max"), "max");
    await cm.update(POD, { pidsLimit: 0n });
    assert.equal(await host.read("pids", "/kubepods/burstable/pod1234", "pids.max"), "1");
  });
});

Deno.test("CgroupManager validate names the paths missing on v1", async () => {
  await withHost("v1", async (host, cm) => {
    await cm.create(POD);
    await Deno.remove(host.dir("memory", "/kubepods/burstable/pod1234"), { recursive: true });
    assert.equal(await cm.exists(POD), false);
    await assert.rejects(
      cm.validate(POD),
      new RegExp(
        `cgroup \\["kubepods" "burstable" "pod1234"\\] has some missing paths: ` +
          `${host.dir("memory", "/kubepods/burstable/pod1234")}$`,
      ),
    );
  });
});

Deno.test("CgroupManager destroy removes leftover children and names a busy cgroup", async () => {
  await withHost("v1", async (host, cm, _lines, clock) => {
    await cm.create(POD);
    const child = "/kubepods/burstable/pod1234/ctr1";
    await host.fs.mkdir(host.dir("memory", child));
    await host.poke("memory", child, "cgroup.procs", "4242\n");
    assert.deepEqual(await cm.pids(POD), [4242]);
    await assert.rejects(
      drive(clock, cm.destroy(POD)),
      (e: Error) =>
        e instanceof CgroupManagerError &&
        e.message.startsWith(
          'unable to destroy cgroup paths for cgroup ["kubepods" "burstable" "pod1234"]',
        ) &&
        e.message.includes(
          `${host.dir("memory", "/kubepods/burstable/pod1234")}: Device or resource busy`,
        ) &&
        e.message.includes(host.dir("memory", child)),
    );
    // Every other hierarchy is gone already; the busy one stays.
    assert.equal(await host.fs.exists(host.dir("cpu", "/kubepods/burstable/pod1234")), false);
    assert.equal(await host.fs.exists(host.dir("memory", child)), true);
    await host.poke("memory", child, "cgroup.procs", "");
    await drive(clock, cm.destroy(POD));
    assert.equal(await host.fs.exists(host.dir("memory", "/kubepods/burstable/pod1234")), false);
    assert.equal(await host.fs.exists(host.dir("memory", "/kubepods/burstable")), true);
    // Destroying what is gone is fine.
    await drive(clock, cm.destroy(POD));
  });
});

Deno.test("CgroupManager create on v2 enables controllers down the tree and converts shares", async () => {
  await withHost("v2", async (host, cm) => {
    await cm.create(POD, {
      cpuShares: 1024n,
      cpuQuota: 50_000n,
      cpuPeriod: 100_000n,
      memory: 128n * MiB,
      pidsLimit: 64n,
    });
    const all = "cpuset cpu io memory hugetlb pids";
    assert.equal(await host.read("", "/", "cgroup.subtree_control"), all);
    assert.equal(await host.read("", "/kubepods", "cgroup.subtree_control"), all);
    assert.equal(await host.read("", "/kubepods/burstable", "cgroup.subtree_control"), all);
    const pod = "/kubepods/burstable/pod1234";
    assert.equal(await host.read("", pod, "cgroup.subtree_control"), "");
    assert.equal(await host.read("", pod, "cpu.weight"), "39");
    assert.equal(await host.read("", pod, "cpu.max"), "50000 100000");
    assert.equal(await host.read("", pod, "memory.max"), String(128n * MiB));
    assert.equal(await host.read("", pod, "pids.max"), "64");
    assert.equal(await host.read("", pod, "hugetlb.2MB.max"), "0");
    assert.equal(await cm.exists(POD), true);
    await cm.update(POD, { cpuQuota: -1n, cpuPeriod: 100_000n, memory: -1n });
    assert.equal(await host.read("", pod, "cpu.max"), "max 100000");
    assert.equal(await host.read("", pod, "memory.max"), "max");
    assert.deepEqual(await cm.pids(POD), []);
    await cm.destroy(POD);
    assert.equal(await host.fs.exists(host.dir("", pod)), false);
  });
});

Deno.test("CgroupManager validate names the controllers missing on v2", async () => {
  await withHost("v2", async (host, cm) => {
    // Made without enabling controllers in the parent: the cgroup has none.
    await host.fs.mkdir(host.dir("", "/kubepods"));
    await assert.rejects(
      cm.validate(["kubepods"]),
      /cgroup \["kubepods"\] has some missing controllers: cpu, cpuset, hugetlb, memory, pids/,
    );
    await assert.rejects(cm.validate(["nope"]), /could not read controllers for cgroup \["nope"\]/);
  });
});

Deno.test("CgroupManager on hybrid joins the cgroup2 tree and skips hugetlb it lacks", async () => {
  await withHost("hybrid", async (host, cm, lines) => {
    await cm.create(POD, { cpuShares: 100n, hugePageLimit: new Map([[2 * 1024 * 1024, 0n]]) });
    const pod = "/kubepods/burstable/pod1234";
    assert.equal(await host.fs.exists(host.dir("", pod)), true);
    assert.equal(await host.read("cpu", pod, "cpu.shares"), "100");
    assert.ok(lines.some((l) => l.includes("Optional subsystem not supported: hugetlb")));
    assert.equal(await cm.exists(POD), true);
    await cm.destroy(POD);
    assert.equal(await host.fs.exists(host.dir("", pod)), false);
    assert.equal(await host.fs.exists(host.dir("cpuacct", pod)), false);
  });
});

Deno.test("CgroupManager create logs limits it cannot apply, as upstream", async () => {
  await withHost("v1", async (host, cm, lines) => {
    await cm.create(POD, { pidsLimit: 10n });
    assert.equal(await host.fs.exists(host.dir("memory", "/kubepods/burstable/pod1234")), true);
    assert.ok(lines.some((l) => l.includes("cannot set pids limit")), lines.join("\n"));
    await assert.rejects(cm.update(POD, { pidsLimit: 10n }), /cannot set pids limit/);
  }, { v1: ["cpu,cpuacct", "cpuset", "memory"] });
});

Deno.test("CgroupManager with the systemd driver starts, updates and stops slices, then writes the files", async () => {
  for (const mode of ["v1", "v2"] as const) {
    const host = await makeCmHost(mode);
    const { logger } = captureLogger();
    const calls: string[] = [];
    const units: SystemdUnits = {
      startSlice(name, parent, props) {
        calls.push(
          `start ${name} wants ${parent}: ${props.map(([k, v]) => `${k}=${v.value}`).join(" ")}`,
        );
        return Promise.resolve();
      },
      setProperties(name, props) {
        calls.push(`set ${name}: ${props.map(([k, v]) => `${k}=${v.value}`).join(" ")}`);
        return Promise.resolve();
      },
      stopUnit(name) {
        calls.push(`stop ${name}`);
        return Promise.resolve();
      },
      close() {},
    };
    try {
      const cm = new CgroupManager({
        layout: host.layout,
        logger,
        fs: host.fs,
        hugePagesDir: host.hugePagesDir,
        clock: new FakeClock(),
        driver: "systemd",
        systemd: () => Promise.resolve(units),
      });
      const slice = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice";
      await cm.create(POD, {
        cpuShares: 102n,
        memory: 64n << 20n,
        cpuQuota: 25_000n,
        cpuPeriod: 100_000n,
      });
      const shares = mode === "v2" ? "CPUWeight=4" : "CPUShares=102";
      const memory = mode === "v2" ? "MemoryMax=67108864" : "MemoryLimit=67108864";
      assert.deepEqual(calls, [
        `start kubepods-burstable-pod1234.slice wants kubepods-burstable.slice: ${shares} ` +
        `CPUQuotaPerSecUSec=250000 ${memory}`,
      ]);
      if (mode === "v1") {
        assert.equal(await host.read("cpu", slice, "cpu.shares"), "102");
        assert.equal(await host.read("memory", slice, "memory.limit_in_bytes"), "67108864");
      } else {
        assert.equal(await host.read("", slice, "cpu.weight"), "4");
        assert.equal(await host.read("", slice, "memory.max"), "67108864");
      }
      await cm.update(POD, { pidsLimit: -1n });
      assert.equal(calls[1], "set kubepods-burstable-pod1234.slice: TasksMax=18446744073709551615");
      await cm.destroy(POD);
      assert.equal(calls[2], "stop kubepods-burstable-pod1234.slice");
      assert.equal(await cm.exists(POD), false);
      // The top slice's parent is the root slice.
      await cm.create(["kubepods"]);
      assert.match(calls[3]!, /^start kubepods\.slice wants -\.slice/);
    } finally {
      await host.cleanup();
    }
  }
});

Deno.test("CgroupManager with the systemd driver names the cgroup when systemd refuses", async () => {
  const host = await makeCmHost("v1");
  const { logger } = captureLogger();
  try {
    const cm = new CgroupManager({
      layout: host.layout,
      logger,
      fs: host.fs,
      driver: "systemd",
      systemd: () =>
        Promise.reject(
          new Error("cannot connect to the bus at /run/dbus/system_bus_socket: No such file"),
        ),
    });
    await assert.rejects(
      cm.create(POD),
      /Cannot create cgroup \["kubepods" "burstable" "pod1234"\]: cannot connect to the bus/,
    );
  } finally {
    await host.cleanup();
  }
});

Deno.test("CgroupManager creates, updates and destroys a real cgroup", async () => {
  if (!canUseRealCgroups("creating cgroups")) return;
  const { layout, cm, clock, lines, top } = await realCgroupManager();
  const name = [top, "burstable", "pod1"];
  let child: Deno.ChildProcess | undefined;
  try {
    await cm.create(name, {
      cpuShares: 256n,
      cpuQuota: 20_000n,
      cpuPeriod: 100_000n,
      memory: 64n * MiB,
      pidsLimit: 50n,
    });
    assert.ok(!lines.some((l) => l.includes("Set failed")), lines.join("\n"));
    assert.equal(await cm.exists(name), true);
    const at = (c: string, f: string) =>
      Deno.readTextFile(
        posix.join(c === "" ? layout.unified! : layout.v1.get(c)!, cm.name(name), f),
      )
        .then((t) => t.trim());
    if (layout.mode === "v2") {
      assert.equal(await at("", "cpu.max"), "20000 100000");
      assert.equal(await at("", "memory.max"), String(64n * MiB));
    } else {
      assert.equal(await at("cpu", "cpu.shares"), "256");
      assert.equal(await at("cpu", "cpu.cfs_quota_us"), "20000");
      assert.equal(await at("memory", "memory.limit_in_bytes"), String(64n * MiB));
      assert.equal(await at("pids", "pids.max"), "50");
      assert.notEqual(await at("cpuset", "cpuset.cpus"), "");
      if (layout.mode === "hybrid") assert.ok(await at("", "cgroup.procs") !== undefined);
    }
    await cm.update(name, { memory: 32n * MiB, cpuQuota: -1n });
    const memDir = layout.mode === "v2" ? layout.unified! : layout.v1.get("memory")!;
    child = new Deno.Command("sleep", { args: ["60"] }).spawn();
    await Deno.writeTextFile(posix.join(memDir, cm.name(name), "cgroup.procs"), String(child.pid));
    assert.deepEqual(await cm.pids(name), [child.pid]);
    await assert.rejects(drive(clock, cm.destroy(name)), /Device or resource busy/);
    child.kill("SIGKILL");
    await child.status;
    child = undefined;
    await drive(clock, cm.destroy(name));
    assert.equal(await cm.exists(name), false);
  } finally {
    if (child) {
      child.kill("SIGKILL");
      await child.status;
    }
    await drive(clock, cm.destroy([top]));
  }
  for (const mount of cm.mountPoints()) {
    assert.equal(await Deno.stat(posix.join(mount, top)).then(() => true, () => false), false);
  }
});

Deno.test("CgroupManager inheritCpusets makes a real v1 cpuset child start with its parent's cpus and mems", async () => {
  if (!canUseRealCgroups("creating cgroups")) return;
  const { layout, cm, clock, top } = await realCgroupManager();
  try {
    await cm.create([top]);
    await cm.inheritCpusets([top]);
    const mount = layout.mode === "v2" ? undefined : layout.v1.get("cpuset");
    if (mount === undefined) return; // nothing to inherit: a no-op, which it did not throw
    const read = (path: string, f: string) =>
      Deno.readTextFile(posix.join(mount, path, f)).then((t) => t.trim());
    assert.equal(await read(top, "cgroup.clone_children"), "1");
    // The kernel fills a child at mkdir, and its own children too: nothing left to copy.
    await Deno.mkdir(posix.join(mount, top, "c", "g"), { recursive: true });
    assert.equal(await read(`${top}/c/g`, "cpuset.cpus"), await read(top, "cpuset.cpus"));
    assert.equal(await read(`${top}/c/g`, "cpuset.mems"), await read(top, "cpuset.mems"));
    assert.notEqual(await read(`${top}/c/g`, "cpuset.cpus"), "");
  } finally {
    await drive(clock, cm.destroy([top]));
  }
});

Deno.test("CgroupManager observes kubelet_cgroup_manager_duration_seconds per operation, failed ones too", async () => {
  const host = await makeCmHost("v1");
  const { logger } = captureLogger();
  const clock = new FakeClock();
  const { cgroupManagerDuration: durations } = new KubeletMetrics({ process: false });
  const count = () =>
    ["create", "update", "destroy"].map((op) => durations.count({ operation_type: op }));
  try {
    const cm = new CgroupManager({
      layout: host.layout,
      logger,
      fs: host.fs,
      hugePagesDir: host.hugePagesDir,
      clock,
      durations,
    });
    await cm.create(POD);
    assert.deepEqual(count(), [1, 0, 0]);
    await cm.update(POD, { cpuShares: 512n });
    await assert.rejects(cm.update(POD, { cpuShares: 1n }), /minimum allowed cpu-shares/);
    assert.deepEqual(count(), [1, 2, 0]);
    const child = "/kubepods/burstable/pod1234/ctr1";
    await host.fs.mkdir(host.dir("memory", child));
    await host.poke("memory", child, "cgroup.procs", "4242\n");
    await assert.rejects(drive(clock, cm.destroy(POD)), /Device or resource busy/);
    assert.deepEqual(count(), [1, 2, 1]);
    await host.poke("memory", child, "cgroup.procs", "");
    await drive(clock, cm.destroy(POD));
    assert.deepEqual(count(), [1, 2, 2]);
    // A create that fails (systemd unreachable) is timed as well.
    const sd = new CgroupManager({
      layout: host.layout,
      logger,
      fs: host.fs,
      driver: "systemd",
      systemd: () => Promise.reject(new Error("cannot connect to the bus")),
      durations,
    });
    await assert.rejects(sd.create(POD), /cannot connect to the bus/);
    assert.deepEqual(count(), [2, 2, 2]);
  } finally {
    await host.cleanup();
  }
});
