import assert from "node:assert/strict";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import type { KubeClient, WatchEvent } from "./kube_client.ts";
import { Reflector, WATCH_BACKOFF_INITIAL_MS, WATCH_BACKOFF_MAX_MS } from "./reflector.ts";

interface Obj {
  metadata?: { uid?: string; name?: string; resourceVersion?: string };
}

/** An apiserver whose every watch answers 410 Gone at once, as after etcd compaction. */
function expiringApiserver() {
  let lists = 0;
  const client = {
    request: <T>() => {
      lists++;
      return Promise.resolve(
        { metadata: { resourceVersion: String(lists) }, items: [{ metadata: { uid: "a" } }] } as T,
      );
    },
    async *watch<T>(): AsyncGenerator<WatchEvent<T>> {
      yield {
        type: "ERROR",
        object: { code: 410, reason: "Expired", message: "too old resource version: 1 (9)" },
      } as unknown as WatchEvent<T>;
    },
  } as unknown as Pick<KubeClient, "request" | "watch">;
  return { client, lists: () => lists };
}

/** Lets the reflector run until it waits on the clock. */
async function settle(clock: FakeClock): Promise<void> {
  for (let i = 0; i < 50 && clock.waiters === 0; i++) await new Promise((r) => setTimeout(r, 0));
}

Deno.test("Reflector backs off 800 ms doubling to 30 s between lists when watches expire", async () => {
  const clock = new FakeClock();
  const api = expiringApiserver();
  const lines: string[] = [];
  const seen: number[] = [];
  const r = new Reflector<Obj>({
    client: api.client,
    path: "/api/v1/pods",
    clock,
    logger: createLogger({ write: (l) => lines.push(l), verbosity: 4 }),
    what: "pods",
    onChange: (items) => seen.push(items.length),
    random: () => 0,
  });
  const ac = new AbortController();
  const running = r.run(ac.signal);
  await settle(clock);
  assert.equal(api.lists(), 1);
  assert.deepEqual(seen, [1]);
  assert.ok(
    lines.some((l) => l.includes('"Watch closed"') && l.includes("too old resource version")),
  );
  let expected = WATCH_BACKOFF_INITIAL_MS;
  for (let round = 2; round <= 9; round++) {
    clock.step(expected - 1);
    await settle(clock);
    assert.equal(api.lists(), round - 1, `no list before ${expected} ms`);
    clock.step(1);
    await settle(clock);
    assert.equal(api.lists(), round, `a list after ${expected} ms`);
    expected = Math.min(expected * 2, WATCH_BACKOFF_MAX_MS);
  }
  assert.equal(expected, WATCH_BACKOFF_MAX_MS);
  ac.abort();
  clock.step(WATCH_BACKOFF_MAX_MS);
  await running;
});
