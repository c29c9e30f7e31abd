import assert from "node:assert/strict";
import { abortable, FakeClock, MAX_TIMER_MS, realClock } from "./clock.ts";

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

Deno.test("realClock sleeps past one timer's range in several timers, none longer than it", async () => {
  const realSetTimeout = globalThis.setTimeout;
  const realNow = performance.now;
  let now = 1_000_000;
  const armed: { fn: () => void; ms: number }[] = [];
  // deno-lint-ignore no-explicit-any
  (globalThis as any).setTimeout = (fn: () => void, ms: number) => {
    armed.push({ fn, ms });
    return armed.length;
  };
  performance.now = () => now;
  try {
    const year = 365 * 24 * 3600_000;
    let done = false;
    const slept = realClock.sleep(year).then(() => done = true);
    assert.deepEqual(armed.map((a) => a.ms), [MAX_TIMER_MS]);
    let fired = 0;
    while (!done && fired < 100) {
      const next = armed[fired++]!;
      now += next.ms;
      next.fn();
      await Promise.resolve();
    }
    await slept;
    assert.ok(armed.every((a) => a.ms <= MAX_TIMER_MS && a.ms >= 0));
    assert.equal(armed.reduce((s, a) => s + a.ms, 0), year);
    assert.equal(armed.length, Math.ceil(year / MAX_TIMER_MS));
  } finally {
    globalThis.setTimeout = realSetTimeout;
    performance.now = realNow;
  }
});

Deno.test("realClock's long sleep rejects on abort after a timer was armed again, clearing that timer", async () => {
  const realSetTimeout = globalThis.setTimeout;
  const realClearTimeout = globalThis.clearTimeout;
  const realNow = performance.now;
  let now = 0;
  const armed: (() => void)[] = [];
  const cleared: number[] = [];
  // deno-lint-ignore no-explicit-any
  (globalThis as any).setTimeout = (fn: () => void) => armed.push(fn);
  // deno-lint-ignore no-explicit-any
  (globalThis as any).clearTimeout = (id: number) => cleared.push(id);
  performance.now = () => now;
  try {
    const ac = new AbortController();
    const slept = realClock.sleep(3 * MAX_TIMER_MS, ac.signal);
    now += MAX_TIMER_MS;
    armed[0]!();
    assert.equal(armed.length, 2);
    ac.abort(new Error("stop"));
    await assert.rejects(slept, /stop/);
    assert.deepEqual(cleared, [2]);
  } finally {
    globalThis.setTimeout = realSetTimeout;
    globalThis.clearTimeout = realClearTimeout;
    performance.now = realNow;
  }
});
