import assert from "node:assert/strict";
import { createLogger } from "../klog/klog.ts";
import { FakeClock } from "./clock.ts";
import { awaitStopped, running, within } from "./stopping.ts";

/** Lets every settled promise's continuations run. */
async function settle(): Promise<void> {
  for (let i = 0; i < 10; i++) await Promise.resolve();
}

Deno.test("awaitStopped names the parts still stopping every period, until all have stopped", async () => {
  const clock = new FakeClock();
  const lines: string[] = [];
  const logger = createLogger({ write: (l) => lines.push(l) });
  const sync = Promise.withResolvers<void>();
  const status = Promise.withResolvers<void>();
  const parts = [
    running("healthz", Promise.resolve()),
    ...within("pods", [running("sync loop", sync.promise), running("status", status.promise)]),
  ];
  let stopped = false;
  const waiting = awaitStopped(parts, { clock, logger, everyMs: 5000 }).then(() => stopped = true);
  await settle();
  assert.deepEqual(lines, [], "nothing logged before the first period");
  clock.step(5000);
  await settle();
  assert.equal(lines.length, 1);
  assert.match(
    lines[0] ?? "",
    /"Still stopping" parts=\["pods\/sync loop","pods\/status"\] waited="5s"/,
  );
  status.reject(new Error("failed while stopping")); // a failure is stopped too
  await settle();
  clock.step(5000);
  await settle();
  assert.match(lines[1] ?? "", /"Still stopping" parts=\["pods\/sync loop"\] waited="10s"/);
  assert.equal(stopped, false, "the sync loop has not stopped");
  sync.resolve();
  await waiting;
  assert.equal(clock.waiters, 0, "the report's sleep ends with the wait");
  assert.equal(lines.length, 2);
});

Deno.test("awaitStopped logs nothing when every part stops within the period", async () => {
  const clock = new FakeClock();
  const lines: string[] = [];
  const logger = createLogger({ write: (l) => lines.push(l) });
  await awaitStopped([running("a", Promise.resolve()), running("b", Promise.resolve())], {
    clock,
    logger,
  });
  assert.deepEqual(lines, []);
  assert.equal(clock.waiters, 0);
});
