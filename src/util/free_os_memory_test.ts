import assert from "node:assert/strict";
import { FakeClock } from "./clock.ts";
import {
  type MallocTrim,
  mappingsOf,
  openMallocTrim,
  PAGE_OUT_AFTER_MS,
  type ProcSelf,
  startFreeOSMemory,
} from "./free_os_memory.ts";
import { createLogger } from "../klog/klog.ts";

const flush = async () => {
  for (let i = 0; i < 5; i++) await Promise.resolve();
};

Deno.test("startFreeOSMemory trims now, then every interval, and closes libc when stopped", async () => {
  const clock = new FakeClock();
  const stop = new AbortController();
  let trims = 0;
  let closed = false;
  const loop = startFreeOSMemory({
    clock,
    logger: createLogger({ write: () => {} }),
    signal: stop.signal,
    intervalMs: 10_000,
    pageOutAfterMs: [],
    open: () => ({ trim: () => ++trims && 1, pageOut: () => 0, close: () => closed = true }),
  });
  await flush();
  assert.equal(trims, 1, "one trim at start");
  clock.step(9_999);
  await flush();
  assert.equal(trims, 1);
  clock.step(1);
  await flush();
  assert.equal(trims, 2);
  clock.step(20_000);
  await flush();
  assert.equal(trims, 3, "one trim per wake-up");
  stop.abort();
  assert.equal(await loop, true);
  assert.equal(closed, true);
  assert.equal(clock.waiters, 0);
});

Deno.test("startFreeOSMemory says once at V(2) that it cannot trim, and stops", async () => {
  const lines: string[] = [];
  const ok = await startFreeOSMemory({
    clock: new FakeClock(),
    logger: createLogger({ verbosity: 2, write: (l) => lines.push(l) }),
    signal: new AbortController().signal,
    open: () => {
      throw new Error("Requires ffi access");
    },
  });
  assert.equal(ok, false);
  assert.equal(lines.length, 1);
  assert.match(lines[0]!, /malloc_trim unavailable" err="Requires ffi access"/);
});

Deno.test("openMallocTrim calls this process's glibc malloc_trim", () => {
  const libc = openMallocTrim();
  try {
    const released = libc.trim();
    assert.ok(released === 0 || released === 1, `malloc_trim answered ${released}`);
  } finally {
    libc.close();
  }
});

const MAPS = [
  "55d0c0000000-55d0c2000000 r--p 00000000 fd:01 1234  /opt/kubelet",
  "55d0c2000000-55d0c6000000 r-xp 02000000 fd:01 1234  /opt/kubelet",
  "55d0c6000000-55d0c6400000 rw-p 06000000 fd:01 1234  /opt/kubelet (deleted)",
  "55d0c6400000-55d0c6500000 rw-p 00000000 00:00 0 ",
  "7f0000000000-7f0000200000 r-xp 00000000 fd:01 99   /usr/lib/x86_64-linux-gnu/libc.so.6",
  "7f0000200000-7f0000300000 r--p 00000000 fd:01 77   /opt/kubelet-other",
  "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0    [stack]",
].join("\n");

Deno.test("mappingsOf finds the executable's mappings, also once replaced on disk, and nothing else", () => {
  assert.deepEqual(mappingsOf(MAPS, "/opt/kubelet"), [
    { start: 0x55d0c0000000n, length: 0x2000000n },
    { start: 0x55d0c2000000n, length: 0x4000000n },
    { start: 0x55d0c6000000n, length: 0x400000n },
  ]);
  assert.deepEqual(mappingsOf(MAPS, "/opt/none"), []);
});

/** A libc and /proc/self whose page-outs are recorded. */
function recording(answer = 0) {
  const pagedOut: [bigint, bigint][] = [];
  let rss = 100 * 2 ** 20;
  const libc: MallocTrim = {
    trim: () => 0,
    pageOut: (start, length) => {
      pagedOut.push([start, length]);
      rss -= answer === 0 ? 2 ** 20 : 0;
      return answer;
    },
    close: () => {},
  };
  const proc: ProcSelf = { maps: () => MAPS, exe: () => "/opt/kubelet", rss: () => rss };
  return { libc, proc, pagedOut };
}

Deno.test("startFreeOSMemory pages out the executable at the first wake-up past each of PAGE_OUT_AFTER_MS", async () => {
  assert.deepEqual(PAGE_OUT_AFTER_MS, [10_000, 60_000]);
  const clock = new FakeClock();
  const stop = new AbortController();
  const lines: string[] = [];
  const { libc, proc, pagedOut } = recording();
  const loop = startFreeOSMemory({
    clock,
    logger: createLogger({ verbosity: 2, write: (l) => lines.push(l) }),
    signal: stop.signal,
    intervalMs: 10_000,
    open: () => libc,
    proc,
  });
  const passesAt: number[] = [];
  for (let t = 0; t <= 120_000; t += 10_000) {
    if (t > 0) clock.step(10_000);
    const before = pagedOut.length;
    await flush();
    if (pagedOut.length > before) passesAt.push(t);
  }
  assert.deepEqual(passesAt, [10_000, 60_000]);
  assert.deepEqual(pagedOut.slice(0, 3).map(([s]) => s), [
    0x55d0c0000000n,
    0x55d0c2000000n,
    0x55d0c6000000n,
  ]);
  stop.abort();
  await loop;
  assert.equal(lines.length, 2);
  assert.match(
    lines[0]!,
    /"Paged out the executable's start-up pages" executable="\/opt\/kubelet" mappings=3 refused=0 rssBeforeBytes=104857600 rssAfterBytes=101711872/,
  );
});

Deno.test("startFreeOSMemory pages out once for the times one long sleep passed", async () => {
  const clock = new FakeClock();
  const stop = new AbortController();
  const { libc, proc, pagedOut } = recording();
  const loop = startFreeOSMemory({
    clock,
    logger: createLogger({ write: () => {} }),
    signal: stop.signal,
    intervalMs: 70_000,
    pageOutAfterMs: [60_000, 10_000],
    open: () => libc,
    proc,
  });
  await flush();
  assert.equal(pagedOut.length, 0);
  clock.step(70_000);
  await flush();
  assert.equal(pagedOut.length, 3, "one pass for both times");
  clock.step(70_000);
  await flush();
  assert.equal(pagedOut.length, 3);
  stop.abort();
  await loop;
});

Deno.test("startFreeOSMemory says at V(2) when the kernel refuses the page-out, and goes on trimming", async () => {
  const clock = new FakeClock();
  const stop = new AbortController();
  const lines: string[] = [];
  const { libc, proc } = recording(-1);
  let trims = 0;
  const loop = startFreeOSMemory({
    clock,
    logger: createLogger({ verbosity: 2, write: (l) => lines.push(l) }),
    signal: stop.signal,
    intervalMs: 10_000,
    pageOutAfterMs: [0],
    open: () => ({ ...libc, trim: () => ++trims }),
    proc,
  });
  await flush();
  clock.step(10_000);
  await flush();
  stop.abort();
  assert.equal(await loop, true);
  assert.equal(trims, 2);
  assert.equal(lines.length, 1);
  assert.match(
    lines[0]!,
    /"Not paging out the executable's start-up pages" err="madvise\(MADV_PAGEOUT\) was refused"/,
  );
});

/** Resident KiB of this process's mappings of `exe`, from /proc/self/smaps. */
/**
 * The KiB of `exe`'s mappings resident in this process, all of them and those only this process
 * maps (smaps' Private_Clean and Private_Dirty): a page other processes map too (another deno)
 * is not paged out.
 */
function residentKiB(exe: string): { rss: number; private: number } {
  const out = { rss: 0, private: 0 };
  let mine = false;
  for (const line of Deno.readTextFileSync("/proc/self/smaps").split("\n")) {
    const head = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \d+\s+(.*)$/.exec(line);
    if (head) mine = head[1] === exe;
    if (!mine) continue;
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss) out.rss += Number(rss[1]);
    const priv = /^Private_(?:Clean|Dirty):\s+(\d+) kB/.exec(line);
    if (priv) out.private += Number(priv[1]);
  }
  return out;
}

Deno.test("openMallocTrim pages out this process's executable: its private resident pages go down", () => {
  const exe = Deno.realPathSync(Deno.execPath());
  const ranges = mappingsOf(Deno.readTextFileSync("/proc/self/maps"), exe);
  assert.ok(ranges.length > 0, `no mapping of ${exe}`);
  const libc = openMallocTrim();
  try {
    const before = residentKiB(exe);
    for (const r of ranges) assert.equal(libc.pageOut(r.start, r.length), 0);
    const after = residentKiB(exe);
    // Pages other processes map too (the deno of every test file running beside this one) stay,
    // and reading smaps again maps some back in (so all of Rss may even grow): the pages only
    // this process maps are those that go.
    assert.ok(before.private > 0, `no page of ${exe} is this process's alone`);
    assert.ok(
      after.private < before.private,
      `${JSON.stringify(before)} KiB resident before, ${JSON.stringify(after)} KiB after`,
    );
  } finally {
    libc.close();
  }
});
