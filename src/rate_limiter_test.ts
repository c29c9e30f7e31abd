import assert from "node:assert/strict";
import { FakeClock } from "./clock.ts";
import { TokenBucket } from "./rate_limiter.ts";

/** Lets every pending promise chain run (a macrotask turn; no time passes on the fake clock). */
function settle(): Promise<void> {
  return new Promise((r) => setTimeout(r, 0));
}

Deno.test("TokenBucket lets a burst through, then paces at qps", async () => {
  const clock = new FakeClock(0);
  const bucket = new TokenBucket(clock, 10, 3);
  const done: number[] = [];
  for (let i = 0; i < 5; i++) void bucket.wait().then(() => done.push(i));
  await settle();
  assert.deepEqual(done, [0, 1, 2], "the burst passes at once");
  clock.step(99);
  await settle();
  assert.deepEqual(done, [0, 1, 2], "the fourth waits 100 ms at 10 qps");
  clock.step(1);
  await settle();
  assert.deepEqual(done, [0, 1, 2, 3]);
  clock.step(100);
  await settle();
  assert.deepEqual(done, [0, 1, 2, 3, 4]);
});

Deno.test("TokenBucket with qps <= 0 never waits", async () => {
  const bucket = new TokenBucket(new FakeClock(0), -1, 0);
  for (let i = 0; i < 1000; i++) await bucket.wait();
});

Deno.test("TokenBucket drops an aborted waiter without stalling the queue", async () => {
  const clock = new FakeClock(0);
  const bucket = new TokenBucket(clock, 1, 1);
  await bucket.wait();
  const ctl = new AbortController();
  const first = bucket.wait(ctl.signal);
  const second = bucket.wait();
  await settle();
  ctl.abort(new Error("gone"));
  await assert.rejects(first, /gone/);
  clock.step(1000);
  await second;
});

Deno.test("TokenBucket serves background callers after every other", async () => {
  const clock = new FakeClock(0);
  const bucket = new TokenBucket(clock, 10, 1);
  await bucket.wait();
  const done: string[] = [];
  void bucket.wait(undefined, { background: true }).then(() => done.push("b1"));
  void bucket.wait(undefined, { background: true }).then(() => done.push("b2"));
  await settle();
  void bucket.wait().then(() => done.push("f1"));
  clock.step(100);
  await settle();
  assert.deepEqual(done, ["f1"], "a later foreground caller goes first");
  void bucket.wait().then(() => done.push("f2"));
  clock.step(100);
  await settle();
  assert.deepEqual(done, ["f1", "f2"]);
  clock.step(100);
  await settle();
  clock.step(100);
  await settle();
  assert.deepEqual(done, ["f1", "f2", "b1", "b2"], "then the background, in order");
});

Deno.test("TokenBucket drops an aborted background waiter", async () => {
  const clock = new FakeClock(0);
  const bucket = new TokenBucket(clock, 1, 1);
  await bucket.wait();
  const ctl = new AbortController();
  const gone = bucket.wait(ctl.signal, { background: true });
  const next = bucket.wait(undefined, { background: true });
  ctl.abort(new Error("gone"));
  await assert.rejects(gone, /gone/);
  clock.step(1000);
  await next;
});
