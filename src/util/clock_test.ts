import assert from "node:assert/strict";
import { abortable, FakeClock } from "./clock.ts";

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

Deno.test("abortable settles as the promise does, or with the reason once the signal aborts", async () => {
  assert.equal(await abortable(Promise.resolve(1), undefined), 1);
  assert.equal(await abortable(Promise.resolve(2), new AbortController().signal), 2);
  const ac = new AbortController();
  const never = new Promise<number>(() => {});
  const waiting = abortable(never, ac.signal);
  ac.abort(new Error("stopped"));
  await assert.rejects(waiting, /stopped/);
  await assert.rejects(abortable(Promise.reject(new Error("late")), ac.signal), /stopped/);
});

Deno.test("FakeClock stepToNext jumps to the earliest pending sleep", async () => {
  const clock = new FakeClock(0);
  const woke: number[] = [];
  void clock.sleep(300).then(() => woke.push(clock.now()));
  void clock.sleep(100).then(() => woke.push(clock.now()));
  clock.stepToNext();
  await Promise.resolve();
  assert.deepEqual(woke, [100]);
  clock.stepToNext();
  await Promise.resolve();
  assert.deepEqual(woke, [100, 300]);
  clock.stepToNext();
  assert.equal(clock.now(), 300);
});
