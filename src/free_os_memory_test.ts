import assert from "node:assert/strict";
import { FakeClock } from "./clock.ts";
import { openMallocTrim, startFreeOSMemory } from "./free_os_memory.ts";
import { createLogger } from "./klog.ts";

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
    open: () => ({ trim: () => ++trims && 1, close: () => closed = true }),
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
