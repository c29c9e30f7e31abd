import assert from "node:assert/strict";
import { KeyedQueue } from "./keyed_queue.ts";

Deno.test("KeyedQueue runs one call at a time per key, keys side by side, past failures", async () => {
  const q = new KeyedQueue();
  const events: string[] = [];
  const gate = Promise.withResolvers<void>();
  const a1 = q.run("a", async () => {
    events.push("a1 start");
    await gate.promise;
    events.push("a1 end");
    throw new Error("a1 failed");
  });
  const a2 = q.run("a", () => {
    events.push("a2");
    return Promise.resolve(2);
  });
  const b = q.run("b", () => {
    events.push("b");
    return Promise.resolve("b");
  });
  assert.equal(await b, "b");
  assert.deepEqual(events, ["a1 start", "b"], "a2 waits for a1; b does not");
  gate.resolve();
  await assert.rejects(a1, { message: "a1 failed" });
  assert.equal(await a2, 2);
  assert.deepEqual(events, ["a1 start", "b", "a1 end", "a2"]);
  await new Promise((r) => setTimeout(r, 0));
  assert.equal(q.size, 0, "nothing kept once the queues are empty");
});
