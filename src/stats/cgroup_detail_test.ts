import assert from "node:assert/strict";
import { cpuWeightToShares, parseBlkio, parseIoStat, readCgroupDetail } from "./cgroup_detail.ts";

/** Writes `files` (name → content) under `dir`. */
async function write(dir: string, files: Record<string, string>): Promise<void> {
  await Deno.mkdir(dir, { recursive: true });
  for (const [name, text] of Object.entries(files)) {
    await Deno.writeTextFile(`${dir}/${name}`, text);
  }
}

async function withDir(fn: (root: string) => Promise<void> | void): Promise<void> {
  const root = await Deno.makeTempDir({ prefix: "cgroup-detail-" });
  try {
    await fn(root);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
}

const V1_MEMORY_STAT = [
  "cache 4096",
  "rss 8192",
  "total_cache 1048576",
  "total_rss 2097152",
  "total_mapped_file 65536",
  "total_swap 12288",
  "total_active_file 524288",
  "total_inactive_file 262144",
  "pgfault 10",
  "pgmajfault 1",
].join("\n");

Deno.test("readCgroupDetail reads a v1 cgroup as cAdvisor's fs handler", async () => {
  await withDir(async (root) => {
    const paths = {
      cpu: `${root}/cpu/c`,
      cpuacct: `${root}/cpuacct/c`,
      memory: `${root}/memory/c`,
      blkio: `${root}/blkio/c`,
    };
    await write(paths.cpu, {
      "cpu.stat": "nr_periods 40\nnr_throttled 3\nthrottled_time 5000000\n",
      "cpu.shares": "512\n",
      "cpu.cfs_period_us": "100000\n",
      "cpu.cfs_quota_us": "50000\n",
    });
    await write(paths.cpuacct, { "cpuacct.stat": "user 150\nsystem 25\n" });
    await write(paths.memory, {
      "memory.stat": V1_MEMORY_STAT,
      "memory.failcnt": "2\n",
      "memory.max_usage_in_bytes": "9999\n",
      "memory.kmem.usage_in_bytes": "4444\n",
      "memory.limit_in_bytes": "268435456\n",
      "memory.memsw.limit_in_bytes": "9223372036854771712\n",
      "memory.soft_limit_in_bytes": "9223372036854771712\n",
      "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
    });
    await write(paths.blkio, {
      "blkio.throttle.io_service_bytes_recursive":
        "8:0 Read 4096\n8:0 Write 8192\n8:0 Sync 0\n8:0 Total 12288\nTotal 12288\n",
      "blkio.throttle.io_serviced_recursive": "8:0 Read 1\n8:0 Write 2\n8:0 Total 3\nTotal 3\n",
    });
    const d = readCgroupDetail(paths, false);
    assert.deepEqual(d.cpu, {
      userNanoSeconds: 1_500_000_000,
      systemNanoSeconds: 250_000_000,
      cfs: { periods: 40, throttledPeriods: 3, throttledNanoSeconds: 5_000_000 },
    });
    assert.deepEqual(d.memory, {
      cacheBytes: 1048576,
      mappedFileBytes: 65536,
      swapBytes: 12288,
      activeFileBytes: 524288,
      inactiveFileBytes: 262144,
      failcnt: 2,
      maxUsageBytes: 9999,
      kernelUsageBytes: 4444,
    });
    assert.equal(d.oomKills, 3);
    assert.deepEqual(d.blkio, [{
      major: 8,
      minor: 0,
      readBytes: 4096,
      writeBytes: 8192,
      reads: 1,
      writes: 2,
    }]);
    assert.deepEqual(d.spec, {
      cpuShares: 512,
      cpuPeriod: 100000,
      cpuQuota: 50000,
      memoryLimit: 268435456,
      memorySwapLimit: 9223372036854771712,
      memoryReservation: 9223372036854771712,
    });
    assert.equal(d.psi, undefined, "v1 cgroups have no pressure files cAdvisor reads");
    assert.ok(d.creationTimeMs !== undefined && Math.abs(d.creationTimeMs - Date.now()) < 60_000);
  });
});

Deno.test("readCgroupDetail reads a v2 cgroup with pressure files", async () => {
  await withDir(async (root) => {
    const dir = `${root}/c`;
    const psi = (n: number) =>
      `some avg10=${n}.00 avg60=0.00 avg300=0.00 total=${n * 100}\n` +
      `full avg10=0.00 avg60=0.00 avg300=0.00 total=${n}\n`;
    await write(dir, {
      "cpu.stat": "usage_usec 900\nuser_usec 600\nsystem_usec 300\nnr_periods 5\n" +
        "nr_throttled 1\nthrottled_usec 7\n",
      "cpu.weight": "79\n",
      "cpu.max": "max 100000\n",
      "memory.stat": "anon 100\nfile 200\nfile_mapped 30\nactive_file 50\ninactive_file 150\n",
      "memory.swap.current": "4096\n",
      "memory.peak": "123456\n",
      "memory.events": "low 0\nhigh 0\nmax 6\noom 1\noom_kill 1\n",
      "memory.max": "max\n",
      "memory.swap.max": "max\n",
      "memory.min": "0\n",
      "io.stat": "259:0 rbytes=1024 wbytes=2048 rios=3 wios=4 dbytes=0 dios=0\n",
      "cpu.pressure": psi(1),
      "memory.pressure": psi(2),
      "io.pressure": psi(3),
    });
    const d = readCgroupDetail(
      { cpu: dir, cpuacct: dir, memory: dir, pids: dir, unified: dir },
      true,
    );
    assert.deepEqual(d.cpu, {
      userNanoSeconds: 600_000,
      systemNanoSeconds: 300_000,
      cfs: { periods: 5, throttledPeriods: 1, throttledNanoSeconds: 7000 },
    });
    assert.equal(d.memory.cacheBytes, 200);
    assert.equal(d.memory.swapBytes, 4096);
    assert.equal(d.memory.failcnt, 6);
    assert.equal(d.memory.maxUsageBytes, 123456);
    assert.equal(d.oomKills, 1);
    assert.deepEqual(d.blkio, [{
      major: 259,
      minor: 0,
      readBytes: 1024,
      writeBytes: 2048,
      reads: 3,
      writes: 4,
    }]);
    assert.equal(d.spec.cpuShares, 2 + Math.floor((78 * 262142) / 9999));
    assert.equal(d.spec.cpuQuota, 0);
    assert.equal(d.spec.cpuPeriod, 100000);
    assert.equal(d.spec.memoryLimit, 18446744073709551615);
    assert.deepEqual(d.psi?.cpu?.some, { avg10: 1, avg60: 0, avg300: 0, total: 100 });
    assert.equal(d.psi?.memory?.full.total, 2);
    assert.equal(d.psi?.io?.some.total, 300);
  });
});

Deno.test("readCgroupDetail leaves figures out when files are absent", async () => {
  await withDir((root) => {
    const d = readCgroupDetail({ cpu: `${root}/x`, memory: `${root}/x` }, false);
    assert.deepEqual(d.cpu, {});
    assert.deepEqual(d.memory, {});
    assert.equal(d.blkio, undefined);
    assert.equal(d.oomKills, undefined);
    assert.deepEqual(d.spec, {});
    assert.equal(d.creationTimeMs, undefined);
  });
});

Deno.test("parseBlkio and parseIoStat skip totals and garbage", () => {
  assert.deepEqual([...parseBlkio("Total 5\n8:0 Read 1\nbad\n8:16 Write 2\n")], [
    ["8:0", { read: 1, write: 0 }],
    ["8:16", { read: 0, write: 2 }],
  ]);
  assert.deepEqual(parseIoStat("garbage\n8:0 rbytes=1\n"), [
    { major: 8, minor: 0, readBytes: 1, writeBytes: 0, reads: 0, writes: 0 },
  ]);
  assert.equal(cpuWeightToShares(100), 2 + Math.floor((99 * 262142) / 9999));
  assert.equal(cpuWeightToShares(0), undefined);
});

Deno.test("readCgroupDetail asks for the CFQ blkio files no more once the kernel lacks them", async () => {
  await withDir(async (root) => {
    const throttled = {
      "blkio.throttle.io_service_bytes_recursive": "8:0 Read 4096\n8:0 Write 8192\nTotal 12288\n",
      "blkio.throttle.io_serviced_recursive": "8:0 Read 1\n8:0 Write 2\nTotal 3\n",
    };
    // A kernel with CFQ writes the files even for a cgroup without I/O ("Total 0").
    await write(`${root}/cfq/c`, { ...throttled, "blkio.io_service_bytes_recursive": "Total 0\n" });
    await write(`${root}/none/c`, throttled);
    const read = Deno.readTextFileSync;
    const asked: string[] = [];
    Deno.readTextFileSync = (path: string | URL) => {
      asked.push(String(path));
      return read(path);
    };
    try {
      for (const kernel of ["cfq", "none"]) {
        const absent = new Set<string>();
        for (let i = 0; i < 3; i++) {
          asked.length = 0;
          const d = readCgroupDetail({ blkio: `${root}/${kernel}/c` }, false, { absent });
          assert.deepEqual(d.blkio?.map((b) => [b.readBytes, b.writeBytes, b.reads]), [
            [4096, 8192, 1],
          ]);
          const cfqAsked = asked.some((p) => p.endsWith("/blkio.io_service_bytes_recursive"));
          assert.equal(cfqAsked, kernel === "cfq" || i === 0, `${kernel}, sample ${i}`);
        }
        assert.deepEqual([...absent], kernel === "cfq" ? [] : ["blkio.io_service_bytes_recursive"]);
      }
    } finally {
      Deno.readTextFileSync = read;
    }
  });
});
