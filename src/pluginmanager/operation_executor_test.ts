import assert from "node:assert/strict";
import { createLogger } from "../klog/klog.ts";
import { FakeClock } from "../util/clock.ts";
import {
  INITIAL_DURATION_BEFORE_RETRY_MS,
  MAX_DURATION_BEFORE_RETRY_MS,
  OperationExecutor,
} from "./operation_executor.ts";

function setup() {
  const clock = new FakeClock(Date.UTC(2026, 0, 1));
  const lines: string[] = [];
  const logger = createLogger({ write: (l) => lines.push(l), now: () => new Date(0), pid: 1 });
  const executor = new OperationExecutor({ logger, now: () => clock.now() });
  return { clock, lines, executor };
}

Deno.test("OperationExecutor runs one operation per name at a time", async () => {
  const { executor } = setup();
  const gate = Promise.withResolvers<void>();
  assert.equal(executor.run("/a.sock", () => gate.promise), "started");
  assert.equal(executor.isOperationPending("/a.sock"), true);
  assert.equal(executor.run("/a.sock", () => Promise.resolve()), "pending");
  assert.equal(executor.run("/b.sock", () => Promise.resolve()), "started", "other names run");
  gate.resolve();
  await executor.waitForCompletion();
  assert.equal(executor.isOperationPending("/a.sock"), false);
  assert.equal(executor.run("/a.sock", () => Promise.resolve()), "started");
  await executor.waitForCompletion();
});

Deno.test("OperationExecutor backs off a failing name exponentially up to 2m2s, and logs upstream's line", async () => {
  const { clock, lines, executor } = setup();
  const fail = () => Promise.reject(new Error("RegisterPlugin error -- boom"));
  let expected = INITIAL_DURATION_BEFORE_RETRY_MS;
  for (let i = 0; i < 12; i++) {
    assert.equal(executor.run("/a.sock", fail), "started", `try ${i}`);
    await executor.waitForCompletion();
    // Refused until strictly more than the backoff has passed (upstream SafeToRetry's <=).
    clock.step(expected);
    assert.equal(executor.run("/a.sock", fail), "backoff", `try ${i} at ${expected} ms`);
    clock.step(1);
    if (i < 11) expected = Math.min(2 * expected, MAX_DURATION_BEFORE_RETRY_MS);
  }
  assert.equal(expected, MAX_DURATION_BEFORE_RETRY_MS);
  assert.match(
    lines[0]!,
    /^E.* "Operation for \\"\/a\.sock\\" failed\. No retries permitted until 2026-01-01 00:00:00\.5 \+0000 UTC \(durationBeforeRetry 500ms\)\. Error: RegisterPlugin error -- boom"$/,
  );
  assert.match(lines[1]!, /\(durationBeforeRetry 1s\)/);
  assert.match(lines.at(-1)!, /\(durationBeforeRetry 2m2s\)/);

  // A success forgets the backoff.
  clock.step(MAX_DURATION_BEFORE_RETRY_MS);
  assert.equal(executor.run("/a.sock", () => Promise.resolve()), "started");
  await executor.waitForCompletion();
  assert.equal(executor.run("/a.sock", fail), "started");
  await executor.waitForCompletion();
  assert.match(lines.at(-1)!, /\(durationBeforeRetry 500ms\)/);
});
