import assert from "node:assert/strict";
import { ReasonCache, ReasonCacheError } from "./reason_cache.ts";
import { fail, PodSyncResult } from "./container/sync_result.ts";

function result(
  steps: [
    action: "StartContainer" | "InitContainer" | "KillContainer",
    target: string,
    error?:
      | "CrashLoopBackOff"
      | "ErrImagePull",
  ][],
): PodSyncResult {
  const r = new PodSyncResult();
  for (const [action, target, error] of steps) {
    const step = r.add(action, target);
    if (error) fail(step, error, `${error} for ${target}`);
  }
  return r;
}

Deno.test("ReasonCache records failed starts and clears succeeded ones", () => {
  const cache = new ReasonCache();
  cache.update(
    "uid-1",
    result([
      ["StartContainer", "app", "CrashLoopBackOff"],
      ["InitContainer", "init", "ErrImagePull"],
      ["KillContainer", "old", "CrashLoopBackOff"],
    ]),
  );
  assert.deepEqual(cache.get("uid-1", "app"), {
    reason: "CrashLoopBackOff",
    message: "CrashLoopBackOff for app",
  });
  assert.deepEqual(cache.get("uid-1", "init"), {
    reason: "ErrImagePull",
    message: "ErrImagePull for init",
  });
  assert.equal(cache.get("uid-1", "old"), undefined, "only start steps count");
  assert.equal(cache.get("uid-2", "app"), undefined, "keyed by pod UID");

  cache.update("uid-1", result([["StartContainer", "app"]]));
  assert.equal(cache.get("uid-1", "app"), undefined, "a successful start clears the reason");
  assert.notEqual(cache.get("uid-1", "init"), undefined, "other containers are untouched");
});

Deno.test("ReasonCache evicts the least recently used entry beyond its capacity", () => {
  const cache = new ReasonCache(2);
  cache.update("u", result([["StartContainer", "a", "ErrImagePull"]]));
  cache.update("u", result([["StartContainer", "b", "ErrImagePull"]]));
  assert.notEqual(cache.get("u", "a"), undefined); // a is now the most recently used
  cache.update("u", result([["StartContainer", "c", "ErrImagePull"]]));
  assert.equal(cache.size, 2);
  assert.equal(cache.get("u", "b"), undefined, "b was the least recently used");
  assert.notEqual(cache.get("u", "a"), undefined);
  assert.notEqual(cache.get("u", "c"), undefined);
});

Deno.test("ReasonCache remove forgets one container", () => {
  const cache = new ReasonCache();
  cache.update("u", result([["StartContainer", "a", "ErrImagePull"]]));
  cache.remove("u", "a");
  assert.equal(cache.get("u", "a"), undefined);
});

Deno.test("ReasonCache rejects a capacity that is not a positive integer", () => {
  assert.throws(() => new ReasonCache(0), ReasonCacheError);
  assert.throws(() => new ReasonCache(1.5), /'capacity' must be a positive integer/);
});
