import assert from "node:assert/strict";
import { defaultPodStatus, PodCache } from "./pod_cache.ts";

function status(id: string, ips: string[] = []) {
  return { ...defaultPodStatus(id), name: "web", namespace: "default", ips };
}

Deno.test("PodCache get returns a default status for an unknown pod", () => {
  const cache = new PodCache();
  const { status: s, error } = cache.get("uid-1");
  assert.equal(s.id, "uid-1");
  assert.deepEqual(s.containerStatuses, []);
  assert.equal(error, undefined);
});

Deno.test("PodCache set stores the status and error, delete forgets them", () => {
  const cache = new PodCache();
  const err = new Error("boom");
  cache.set("uid-1", status("uid-1", ["10.0.0.1"]), err, 100);
  assert.deepEqual(cache.get("uid-1").status.ips, ["10.0.0.1"]);
  assert.equal(cache.get("uid-1").error, err);
  cache.delete("uid-1");
  assert.deepEqual(cache.get("uid-1").status.ips, []);
});

Deno.test("PodCache getNewerThan resolves at once for a newer entry", async () => {
  const cache = new PodCache();
  cache.set("uid-1", status("uid-1", ["10.0.0.1"]), undefined, 200);
  const e = await cache.getNewerThan("uid-1", 100);
  assert.deepEqual(e.status.ips, ["10.0.0.1"]);
  assert.equal(cache.waiters, 0);
});

Deno.test("PodCache getNewerThan waits for a set at or after minTime", async () => {
  const cache = new PodCache();
  cache.set("uid-1", status("uid-1", ["10.0.0.1"]), undefined, 100);
  let resolved = false;
  const p = cache.getNewerThan("uid-1", 150).then((e) => {
    resolved = true;
    return e;
  });
  cache.set("uid-1", status("uid-1", ["10.0.0.2"]), undefined, 120);
  await Promise.resolve();
  assert.equal(resolved, false);
  assert.equal(cache.waiters, 1);
  cache.set("uid-1", status("uid-1", ["10.0.0.3"]), undefined, 160);
  assert.deepEqual((await p).status.ips, ["10.0.0.3"]);
  assert.equal(cache.waiters, 0);
});

Deno.test("PodCache updateTime wakes waiters of pods with no entry", async () => {
  const cache = new PodCache();
  const p = cache.getNewerThan("uid-2", 150);
  cache.updateTime(100);
  assert.equal(cache.waiters, 1);
  cache.updateTime(200);
  const e = await p;
  assert.equal(e.status.id, "uid-2");
  assert.equal(cache.timestamp, 200);
  // Everything is now newer than 150, so a new call resolves at once.
  assert.equal((await cache.getNewerThan("uid-3", 150)).status.id, "uid-3");
});

Deno.test("PodCache getNewerThan rejects and forgets its waiter on abort", async () => {
  const cache = new PodCache();
  const ac = new AbortController();
  const p = cache.getNewerThan("uid-1", 100, ac.signal);
  assert.equal(cache.waiters, 1);
  ac.abort(new Error("stop"));
  await assert.rejects(p, /stop/);
  assert.equal(cache.waiters, 0);
  await assert.rejects(cache.getNewerThan("uid-1", 100, ac.signal), /stop/);
});
