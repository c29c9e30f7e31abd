import assert from "node:assert/strict";
import { Semaphore } from "./semaphore.ts";

/** A promise the test settles by hand. */
function gate(): { promise: Promise<void>; open: () => void } {
  const { promise, resolve } = Promise.withResolvers<void>();
  return { promise, open: resolve };
}

Deno.test("Semaphore admits at most its limit and serves the rest in arrival order", async () => {
  const sem = new Semaphore(2);
  const gates = [gate(), gate(), gate(), gate()];
  const started: number[] = [];
  const runs = gates.map((g, i) =>
    sem.run(async () => {
      started.push(i);
      await g.promise;
      return i;
    })
  );
  await Promise.resolve();
  assert.deepEqual(started, [0, 1]);
  assert.deepEqual(sem.waiting, 2);
  gates[1]!.open();
  await runs[1];
  await Promise.resolve();
  assert.deepEqual(started, [0, 1, 2]);
  gates[0]!.open();
  gates[2]!.open();
  gates[3]!.open();
  assert.deepEqual(await Promise.all(runs), [0, 1, 2, 3]);
  assert.deepEqual(started, [0, 1, 2, 3]);
  assert.deepEqual(sem.waiting, 0);
});

Deno.test("Semaphore frees the slot when the holder throws", async () => {
  const sem = new Semaphore(1);
  await assert.rejects(() => sem.run(() => Promise.reject(new Error("boom"))), /boom/);
  assert.deepEqual(await sem.run(() => Promise.resolve("next")), "next");
});

Deno.test("Semaphore: an aborted waiter leaves the queue and the next one gets the slot", async () => {
  const sem = new Semaphore(1);
  const hold = gate();
  const first = sem.run(() => hold.promise);
  const abort = new AbortController();
  const aborted = sem.run(() => Promise.resolve("never"), abort.signal);
  const third = sem.run(() => Promise.resolve("third"));
  assert.deepEqual(sem.waiting, 2);
  abort.abort(new Error("pod deleted"));
  await assert.rejects(aborted, /pod deleted/);
  assert.deepEqual(sem.waiting, 1);
  hold.open();
  await first;
  assert.deepEqual(await third, "third");
  await assert.rejects(
    () => sem.run(() => Promise.resolve(1), AbortSignal.abort(new Error("gone"))),
    /gone/,
  );
});

Deno.test("Semaphore refuses a limit below 1", () => {
  assert.throws(() => new Semaphore(0), { name: "RangeError", message: /got 0$/ });
  assert.throws(() => new Semaphore(1.5), { name: "RangeError", message: /got 1.5$/ });
});
