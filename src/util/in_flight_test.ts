import assert from "node:assert/strict";
import { InFlight } from "./in_flight.ts";

/** A promise and its resolve/reject, for operations a test ends by hand. */
function held<T = void>() {
  return Promise.withResolvers<T>();
}

Deno.test("InFlight counts operations until they settle and passes results and errors on", async () => {
  const f = new InFlight();
  assert.equal(f.busy, false);
  const a = held<number>(), b = held<number>();
  const ra = f.track(() => a.promise);
  const rb = f.track(() => b.promise);
  assert.equal(f.count, 2);
  assert.equal(f.busy, true);
  a.resolve(7);
  assert.equal(await ra, 7);
  assert.equal(f.count, 1);
  const boom = new Error("no");
  b.reject(boom);
  await assert.rejects(rb, (e) => e === boom);
  assert.equal(f.count, 0);
  assert.equal(f.busy, false);
});

Deno.test("InFlight idle resolves when the last operation ends, not before", async () => {
  const f = new InFlight();
  await f.idle(); // none in flight: at once
  const a = held(), b = held();
  const ra = f.track(() => a.promise);
  const rb = f.track(() => b.promise);
  let idle = false;
  const waiting = f.idle().then(() => idle = true);
  a.resolve();
  await ra;
  await Promise.resolve();
  assert.equal(idle, false, "one operation is still in flight");
  b.resolve();
  await rb;
  await waiting;
  assert.equal(idle, true);
});

Deno.test("InFlight idle resolves when its signal aborts", async () => {
  const f = new InFlight();
  const a = held();
  const ra = f.track(() => a.promise);
  const ctl = new AbortController();
  const waiting = f.idle(ctl.signal);
  ctl.abort();
  await waiting;
  assert.equal(f.busy, true);
  a.resolve();
  await ra;
});
