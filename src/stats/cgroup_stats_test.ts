import assert from "node:assert/strict";
import {
  type CgroupLayout,
  type CgroupMode,
  type CgroupPaths,
  cgroupPathsOf,
  containerCgroupPaths,
  detectCgroupLayout,
  parseProcCgroup,
} from "../cm/cgroup_layout.ts";
import { parseMaxOrNumber, readCgroupSample, readNodeSample } from "./cgroup_stats.ts";
import { FlatKeyed } from "./_cgroup_read.ts";
import {
  buildCgroupFixture,
  FIXTURE_NODE,
  type FixtureCgroup,
} from "../testing/cgroup_fixtures.ts";

const GiB = 2 ** 30;
const MiB = 2 ** 20;

const LIMITED: FixtureCgroup = {
  path: "/kubepods/burstable/pod1/c1",
  cpuNs: 123_456_789_000n,
  memUsage: 300 * MiB,
  inactiveFile: 100 * MiB,
  rss: 150 * MiB,
  limit: GiB,
  pids: 7,
  pgfault: 4242,
  pgmajfault: 12,
};
const UNLIMITED: FixtureCgroup = {
  path: "/kubepods/besteffort/pod2/c2",
  cpuNs: 5_000n,
  memUsage: 10 * MiB,
  inactiveFile: 20 * MiB,
  rss: 1 * MiB,
  limit: "max",
  pids: 1,
};

interface Fx {
  root: string;
  layout: CgroupLayout;
  paths(path: string): Promise<CgroupPaths>;
}

/** Builds a fixture, runs `fn`, removes it. */
async function withFixture(
  mode: CgroupMode,
  fn: (fx: Fx) => Promise<void> | void,
  cgroups: FixtureCgroup[] = [LIMITED, UNLIMITED],
): Promise<void> {
  const root = await Deno.makeTempDir({ prefix: "cgroup-stats-" });
  try {
    const built = await buildCgroupFixture(root, mode, cgroups);
    const layout = await detectCgroupLayout({ root });
    const paths = async (path: string) => {
      const text = await Deno.readTextFile(`${root}/proc/${built.pids.get(path)}/cgroup`);
      return containerCgroupPaths(layout, parseProcCgroup(text));
    };
    await fn({ root, layout, paths });
  } finally {
    await Deno.remove(root, { recursive: true });
  }
}

Deno.test("FlatKeyed reads key-value lines by key and skips garbage", () => {
  const m = new FlatKeyed(
    "usage_usec 18446744073709551615\nnr_periods 0\n\nbad line here\nnovalue\nneg -1\nx 1.5\n" +
      "nr_throttled  7 \nthrottled_usec 12",
  );
  const keys = ["usage_usec", "nr_periods", "nr_throttled", "throttled_usec"];
  assert.deepEqual(keys.map((k) => m.get(k)), [18446744073709551615n, 0n, 7n, 12n]);
  for (const k of ["bad", "novalue", "neg", "x", "usage", "periods", "", "usec"]) {
    assert.equal(m.get(k), undefined, k);
  }
  assert.equal(new FlatKeyed("\nuser 5\n").get("user"), 5n);
  assert.equal(new FlatKeyed("").get("user"), undefined);
});

Deno.test("parseMaxOrNumber reads numbers and max, and rejects the rest", () => {
  assert.equal(parseMaxOrNumber("9223372036854771712\n"), 9223372036854771712n);
  assert.equal(parseMaxOrNumber("max\n"), "max");
  assert.equal(parseMaxOrNumber("0"), 0n);
  assert.equal(parseMaxOrNumber(""), undefined);
  assert.equal(parseMaxOrNumber("-1"), undefined);
  assert.equal(parseMaxOrNumber("12abc"), undefined);
});

for (const mode of ["v1", "hybrid", "v2"] as const) {
  Deno.test(`readCgroupSample reads a ${mode} container`, async () => {
    await withFixture(mode, async ({ paths }) => {
      const s = readCgroupSample(await paths(LIMITED.path), { detail: false });
      assert.deepEqual(s, {
        cpu: { usageCoreNanoSeconds: 123_456_789_000n },
        memory: {
          usageBytes: 300 * MiB,
          workingSetBytes: 200 * MiB,
          rssBytes: 150 * MiB,
          pageFaults: 4242,
          majorPageFaults: 12,
          limitBytes: GiB,
        },
        pids: { current: 7 },
        missing: [],
      });
    });
  });

  Deno.test(`readCgroupSample ${mode} reads each file once, with its details, spec or not`, async () => {
    await withFixture(mode, async ({ paths }) => {
      const p = await paths(LIMITED.path);
      const read = Deno.readTextFileSync;
      const counts = new Map<string, number>();
      Deno.readTextFileSync = (path: string | URL) => {
        const name = String(path).split("/").at(-1)!;
        counts.set(name, (counts.get(name) ?? 0) + 1);
        return read(path);
      };
      try {
        for (const spec of [true, false]) {
          counts.clear();
          const s = readCgroupSample(p, { spec });
          assert.equal(s.detail?.memory.inactiveFileBytes, 100 * MiB);
          assert.equal(s.detail?.spec.memoryLimit !== undefined, spec);
          // memory.stat feeds the working set and the breakdown; the limit the sample and
          // the spec; v2's cpu.stat the usage and user/system, memory.events failcnt and OOMs.
          const twice = [...counts].filter(([, n]) => n > 1);
          assert.deepEqual(twice, [], `read more than once: ${JSON.stringify(twice)}`);
          assert.ok(counts.has("memory.stat"));
        }
      } finally {
        Deno.readTextFileSync = read;
      }
    });
  });

  Deno.test(`readCgroupSample ${mode} reads no limit and floors the working set`, async () => {
    await withFixture(mode, async ({ paths }) => {
      const s = readCgroupSample(await paths(UNLIMITED.path));
      assert.equal(s.memory?.limitBytes, undefined);
      assert.equal(s.memory?.usageBytes, 10 * MiB);
      assert.equal(s.memory?.workingSetBytes, 0);
      assert.equal(s.pids?.limit, undefined);
      assert.deepEqual(s.missing, []);
    });
  });

  Deno.test(`readCgroupSample ${mode} omits a vanished cgroup without throwing`, async () => {
    await withFixture(mode, async ({ root, paths }) => {
      const p = await paths(LIMITED.path);
      for (const dir of new Set(Object.values(p))) await Deno.remove(dir, { recursive: true });
      const s = readCgroupSample(p);
      assert.equal(s.cpu, undefined);
      assert.equal(s.memory, undefined);
      assert.equal(s.pids, undefined);
      const usage = mode === "v2" ? "memory.current" : "memory.usage_in_bytes";
      assert.ok(s.missing.includes(`${usage}: no such file`), s.missing.join(", "));
      assert.ok(s.missing.every((r) => r.endsWith(": no such file")), s.missing.join(", "));
      assert.ok(s.missing.every((r) => !r.includes(root)), "reasons name files, not paths");
    });
  });
}

Deno.test("readCgroupSample keeps other groups when one controller's cgroup vanished", async () => {
  await withFixture("hybrid", async ({ paths }) => {
    const p = await paths(LIMITED.path);
    await Deno.remove(p.memory!, { recursive: true });
    const s = readCgroupSample(p);
    assert.equal(s.memory, undefined);
    assert.equal(s.cpu?.usageCoreNanoSeconds, 123_456_789_000n);
    assert.equal(s.pids?.current, 7);
    assert.deepEqual(s.missing, [
      "memory.usage_in_bytes: no such file",
      "memory.stat: no such file",
      "memory.limit_in_bytes: no such file",
    ]);
  });
});

Deno.test("readCgroupSample reports controllers that are not mounted", async () => {
  await withFixture("v1", async ({ root, layout }) => {
    // The same host without a pids mount.
    const v1 = new Map(layout.v1);
    v1.delete("pids");
    const noPids: CgroupLayout = { ...layout, v1 };
    const text = await Deno.readTextFile(`${root}/proc/4000/cgroup`);
    const p = containerCgroupPaths(noPids, parseProcCgroup(text));
    assert.equal(p.pids, undefined);
    const s = readCgroupSample(p);
    assert.equal(s.pids, undefined);
    assert.ok(s.memory !== undefined && s.cpu !== undefined);
    assert.deepEqual(s.missing, ["pids: no cgroup path (controller not mounted)"]);
  });
  const s = readCgroupSample({});
  assert.deepEqual(s, {
    missing: [
      "cpu: no cgroup path (controller not mounted)",
      "memory: no cgroup path (controller not mounted)",
      "pids: no cgroup path (controller not mounted)",
    ],
  });
});

Deno.test("readCgroupSample omits garbage values with a reason", async () => {
  await withFixture("v1", async ({ paths }) => {
    const p = await paths(LIMITED.path);
    await Deno.writeTextFile(`${p.cpuacct}/cpuacct.usage`, "garbage\n");
    await Deno.writeTextFile(`${p.memory}/memory.limit_in_bytes`, "-1\n");
    await Deno.writeTextFile(`${p.pids}/pids.max`, "lots\n");
    const s = readCgroupSample(p);
    assert.equal(s.cpu, undefined);
    assert.equal(s.memory?.usageBytes, 300 * MiB);
    assert.equal(s.memory?.limitBytes, undefined);
    assert.deepEqual(s.pids, { current: 7 });
    assert.deepEqual(s.missing, [
      'cpuacct.usage: unexpected content "garbage"',
      'memory.limit_in_bytes: unexpected content "-1"',
      'pids.max: unexpected content "lots"',
    ]);

    await Deno.writeTextFile(`${p.memory}/memory.usage_in_bytes`, "");
    await Deno.writeTextFile(`${p.memory}/memory.stat`, "nonsense\n");
    await Deno.writeTextFile(`${p.pids}/pids.current`, "x\n");
    const t = readCgroupSample(p);
    assert.equal(t.memory, undefined);
    assert.equal(t.pids, undefined);
    assert.ok(t.missing.includes('memory.usage_in_bytes: unexpected content ""'));
    assert.ok(t.missing.includes('pids.current: unexpected content "x"'));
  });
});

Deno.test("readCgroupSample takes v1 totals for memory and local page faults", async () => {
  await withFixture("v1", async ({ paths }) => {
    const p = await paths(LIMITED.path);
    // A parent cgroup: local counters differ from the hierarchical totals.
    await Deno.writeTextFile(
      `${p.memory}/memory.stat`,
      "rss 1\ninactive_file 2\npgfault 3\npgmajfault 4\n" +
        "total_rss 10\ntotal_inactive_file 20\ntotal_pgfault 30\ntotal_pgmajfault 40\n",
    );
    const s = readCgroupSample(p);
    assert.equal(s.memory?.rssBytes, 10);
    assert.equal(s.memory?.workingSetBytes, 300 * MiB - 20);
    // cAdvisor fills the kubelet's page faults from `pgfault`/`pgmajfault`.
    assert.equal(s.memory?.pageFaults, 3);
    assert.equal(s.memory?.majorPageFaults, 4);
  });
});

Deno.test("readCgroupSample keeps usage when memory.stat lacks keys", async () => {
  await withFixture("v2", async ({ paths }) => {
    const p = await paths(LIMITED.path);
    await Deno.writeTextFile(`${p.memory}/memory.stat`, "file 5\n");
    const s = readCgroupSample(p);
    // cAdvisor: without inactive_file the working set is the usage.
    assert.deepEqual(s.memory, {
      usageBytes: 300 * MiB,
      workingSetBytes: 300 * MiB,
      limitBytes: GiB,
    });
    assert.deepEqual(s.missing, [
      "memory.stat: no inactive_file",
      "memory.stat: no anon",
      "memory.stat: no pgfault",
      "memory.stat: no pgmajfault",
    ]);
  });
});

Deno.test("readCgroupSample reads numeric v1 and v2 limits and the v1 unlimited value", async () => {
  await withFixture("v2", async ({ paths }) => {
    const p = await paths(UNLIMITED.path);
    await Deno.writeTextFile(`${p.pids}/pids.max`, "100\n");
    assert.equal(readCgroupSample(p).pids?.limit, 100);
  });
  await withFixture("v1", async ({ paths }) => {
    const p = await paths(LIMITED.path);
    // Just above 2^62 counts as unlimited, as the kubelet's isMemoryUnlimited.
    await Deno.writeTextFile(`${p.memory}/memory.limit_in_bytes`, `${2n ** 62n + 1n}\n`);
    assert.equal(readCgroupSample(p).memory?.limitBytes, undefined);
    await Deno.writeTextFile(`${p.memory}/memory.limit_in_bytes`, `${2n ** 62n}\n`);
    assert.equal(readCgroupSample(p).memory?.limitBytes, 2 ** 62);
  });
});

Deno.test("readCgroupSample counts cgroup.procs when v2 pids is not enabled", async () => {
  await withFixture("v2", async ({ paths }) => {
    const p = await paths(LIMITED.path);
    await Deno.remove(`${p.pids}/pids.current`);
    await Deno.remove(`${p.pids}/pids.max`);
    await Deno.writeTextFile(`${p.pids}/cgroup.procs`, "10\n11\n12\n");
    const s = readCgroupSample(p);
    assert.deepEqual(s.pids, { current: 3 });
    assert.deepEqual(s.missing, []);
  });
});

for (const mode of ["v1", "hybrid"] as const) {
  Deno.test(`readNodeSample reads the ${mode} root cgroup`, async () => {
    await withFixture(mode, ({ root, layout }) => {
      const s = readNodeSample(layout, { root, detail: false });
      assert.deepEqual(s, {
        cpu: { usageCoreNanoSeconds: FIXTURE_NODE.cpuNs },
        memory: {
          usageBytes: FIXTURE_NODE.memUsage,
          workingSetBytes: FIXTURE_NODE.memUsage - FIXTURE_NODE.inactiveFile,
          rssBytes: 0,
          pageFaults: 0,
          majorPageFaults: 0,
        },
        missing: [],
      });
    });
  });
}

Deno.test("readNodeSample reads the v2 root's memory.stat and cpu.stat", async () => {
  await withFixture("v2", ({ root, layout }) => {
    const s = readNodeSample(layout, { root, detail: false });
    const usage = FIXTURE_NODE.anon + FIXTURE_NODE.file;
    assert.deepEqual(s, {
      cpu: { usageCoreNanoSeconds: FIXTURE_NODE.usageUsec * 1000n },
      memory: {
        usageBytes: usage,
        workingSetBytes: usage - FIXTURE_NODE.inactiveFile,
        rssBytes: FIXTURE_NODE.anon,
        pageFaults: 0,
        majorPageFaults: 0,
      },
      missing: [],
    });
  });
});

Deno.test("readNodeSample falls back to /proc on a v2 root without stat files", async () => {
  await withFixture("v2", async ({ root, layout }) => {
    await Deno.remove(`${layout.unified}/memory.stat`);
    await Deno.remove(`${layout.unified}/cpu.stat`);
    const s = readNodeSample(layout, { root, detail: false });
    const usage = FIXTURE_NODE.memTotal - FIXTURE_NODE.memFree;
    const jiffies = 1000 + 10 + 500 + 20 + 30 + 5;
    assert.deepEqual(s, {
      cpu: { usageCoreNanoSeconds: BigInt(jiffies) * 10_000_000n },
      memory: {
        usageBytes: usage,
        workingSetBytes: usage - FIXTURE_NODE.inactiveFileMeminfo,
      },
      missing: [
        "memory.stat: no such file: memory from /proc/meminfo, without rss and page faults",
      ],
    });

    await Deno.remove(`${root}/proc/meminfo`);
    await Deno.writeTextFile(`${root}/proc/stat`, "intr 1 2 3\n");
    const t = readNodeSample(layout, { root, detail: false });
    assert.equal(t.cpu, undefined);
    assert.equal(t.memory, undefined);
    assert.deepEqual(t.missing, [
      "cpu.stat: no such file",
      "/proc/stat: no parsable cpu line",
      "memory.stat: no such file",
      "/proc/meminfo: no such file",
    ]);
  });
});

Deno.test("readNodeSample reads this machine's node", async () => {
  const layout = await detectCgroupLayout();
  const s = readNodeSample(layout);
  assert.ok((s.memory?.usageBytes ?? 0) > 0, s.missing.join(", "));
  assert.ok((s.cpu?.usageCoreNanoSeconds ?? 0n) > 0n, s.missing.join(", "));
  assert.ok(s.memory!.workingSetBytes <= s.memory!.usageBytes);
});

Deno.test("readCgroupSample reads this machine's root cgroup paths", async () => {
  const layout = await detectCgroupLayout();
  const s = readCgroupSample(cgroupPathsOf(layout, "/"));
  // Whatever the kernel offers, sampling returns: values or reasons, never a throw.
  for (const group of ["cpu", "memory", "pids"] as const) {
    if (s[group] === undefined) assert.ok(s.missing.length > 0);
  }
});
