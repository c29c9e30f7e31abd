import assert from "node:assert/strict";
import { FakeClock } from "../util/clock.ts";
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

Deno.test("TokenBucket is limited only with a positive qps, as client-go has a limiter", () => {
  const bucket = new TokenBucket(new FakeClock(0), 5, 10);
  assert.equal(bucket.limited, true);
  bucket.setRate(-1, 0);
  assert.equal(bucket.limited, false);
  assert.equal(new TokenBucket(new FakeClock(0), 0, 10).limited, false);
});
