import assert from "node:assert/strict";
import { join } from "node:path";
import { parseLoadavgTasks, readRlimit } from "./process_stats.ts";

async function withProc(files: Record<string, string>, fn: (root: string) => Promise<void>) {
  const root = await Deno.makeTempDir({ prefix: "process-stats-" });
  try {
    for (const [path, text] of Object.entries(files)) {
      await Deno.mkdir(join(root, path, ".."), { recursive: true });
      await Deno.writeTextFile(join(root, path), text);
    }
    await fn(root);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
}

const AT = new Date("2026-12-01T00:00:00Z");

Deno.test("readRlimit takes the smaller of pid_max and threads-max and loadavg's total", async () => {
  await withProc({
    "proc/sys/kernel/pid_max": "4194304\n",
    "proc/sys/kernel/threads-max": "192724\n",
    "proc/loadavg": "1.36 3.49 4.53 2/3518 3715089\n",
  }, async (root) => {
    assert.deepEqual(await readRlimit({ root, now: () => AT }), {
      maxPid: 192724,
      curProc: 3518,
      time: AT,
      missing: [],
    });
  });
  await withProc({
    "proc/sys/kernel/pid_max": "32768\n",
    "proc/sys/kernel/threads-max": "192724\n",
    "proc/loadavg": "0.04 0.06 0.42 1/100 19202\n",
  }, async (root) => {
    const r = await readRlimit({ root, now: () => AT });
    assert.equal(r.maxPid, 32768);
    assert.equal(r.curProc, 100);
  });
});

Deno.test("readRlimit leaves out what it cannot read and says why", async () => {
  await withProc({
    "proc/sys/kernel/pid_max": "lots\n",
    "proc/loadavg": "0.1 0.2 0.3\n",
  }, async (root) => {
    const r = await readRlimit({ root, now: () => AT });
    assert.equal(r.maxPid, undefined);
    assert.equal(r.curProc, undefined);
    assert.deepEqual(r.missing, [
      '/proc/sys/kernel/pid_max: not an integer: "lots"',
      "/proc/sys/kernel/threads-max: no such file",
      "not enough fields in /proc/loadavg",
    ]);
  });
  await withProc({ "proc/sys/kernel/threads-max": "5000\n" }, async (root) => {
    const r = await readRlimit({ root });
    assert.equal(r.maxPid, 5000, "one readable limit is still the limit");
    assert.deepEqual(r.missing, [
      "/proc/sys/kernel/pid_max: no such file",
      "/proc/loadavg: no such file",
    ]);
    assert.ok(Math.abs(r.time.getTime() - Date.now()) < 60_000);
  });
});

Deno.test("parseLoadavgTasks rejects an odd fourth field", () => {
  assert.equal(parseLoadavgTasks("0.00 0.01 0.05 1/208 4242"), 208);
  assert.match(String(parseLoadavgTasks("0.00 0.01 0.05 208 4242")), /fourth field/);
  assert.match(String(parseLoadavgTasks("0.00 0.01 0.05 1/x 4242")), /fourth field/);
});

Deno.test("readRlimit reads this machine", async () => {
  const r = await readRlimit();
  assert.deepEqual(r.missing, []);
  assert.ok((r.maxPid ?? 0) > 0);
  assert.ok((r.curProc ?? 0) >= 1);
});
