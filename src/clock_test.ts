import assert from "node:assert/strict";
import { FakeClock } from "./clock.ts";

Deno.test("FakeClock wakes sleeps only when stepped past them", async () => {
  const clock = new FakeClock(0);
  const woke: number[] = [];
  const a = clock.sleep(100).then(() => woke.push(100));
  const b = clock.sleep(50).then(() => woke.push(50));
  clock.step(49);
  await Promise.resolve();
  assert.deepEqual(woke, []);
  clock.step(60);
  await Promise.all([a, b]);
  assert.deepEqual(woke, [50, 100]);
  assert.equal(clock.now(), 109);
});

Deno.test("FakeClock sleep rejects when its signal aborts", async () => {
  const clock = new FakeClock(0);
  const ctl = new AbortController();
  const p = clock.sleep(1000, ctl.signal);
  ctl.abort(new Error("stop"));
  await assert.rejects(p, /stop/);
  assert.equal(clock.waiters, 0);
});
