import assert from "node:assert/strict";
import * as api from "../../proto/runtime/v1/api.ts";
import { FakeClock } from "../util/clock.ts";
import { IMAGE_CACHE_REFRESH_MS, ImageCache } from "./image_cache.ts";
import { createLogger } from "../klog/klog.ts";

function image(id: string): api.Image {
  return api.Image.create({ id, repoTags: [`${id}:1`], size: 1 });
}

/** A runtime whose ListImages answers `images` (or throws `fail`), counting the calls. */
function runtime() {
  const r = {
    images: [image("a")],
    fail: undefined as Error | undefined,
    calls: 0,
    listImages: () => {
      r.calls++;
      return r.fail ? Promise.reject(r.fail) : Promise.resolve([...r.images]);
    },
  };
  return r;
}

function cache(r: ReturnType<typeof runtime>, clock: FakeClock) {
  const lines: string[] = [];
  const logger = createLogger({ write: (l) => lines.push(l), now: () => new Date(0), pid: 1 });
  return { c: new ImageCache({ listImages: r.listImages, clock, logger }), lines };
}

/** Lets pending promise callbacks run. */
async function settle(): Promise<void> {
  for (let i = 0; i < 10; i++) await Promise.resolve();
}

Deno.test("ImageCache lists the images once per refresh period, not per read", async () => {
  const r = runtime();
  const clock = new FakeClock();
  const { c } = cache(r, clock);
  const ac = new AbortController();
  const running = c.run(ac.signal);
  try {
    assert.deepEqual((await c.list()).map((i) => i.id), ["a"], "the first read waits for a list");
    assert.equal(r.calls, 1, "the read shared the list in flight");
    for (let i = 0; i < 5; i++) await c.list();
    assert.equal(r.calls, 1, "later reads are served from the cache");

    r.images.push(image("b"));
    clock.step(IMAGE_CACHE_REFRESH_MS - 1);
    await settle();
    assert.deepEqual((await c.list()).map((i) => i.id), ["a"], "not yet refreshed");
    clock.step(1);
    await settle();
    assert.equal(r.calls, 2);
    assert.deepEqual((await c.list()).map((i) => i.id), ["a", "b"], "refreshed after 30 s");
  } finally {
    ac.abort();
    await running;
  }
});

Deno.test("ImageCache keeps the last list when a refresh fails, and says so", async () => {
  const r = runtime();
  const clock = new FakeClock();
  const { c, lines } = cache(r, clock);
  const ac = new AbortController();
  const running = c.run(ac.signal);
  try {
    await c.list();
    r.fail = new Error("rpc error: code = Unavailable");
    r.images = [];
    clock.step(IMAGE_CACHE_REFRESH_MS);
    await settle();
    assert.equal(r.calls, 2);
    assert.deepEqual((await c.list()).map((i) => i.id), ["a"]);
    assert.ok(
      lines.some((l) =>
        l.includes('"Failed to update image list"') && l.includes("code = Unavailable")
      ),
      lines.join("\n"),
    );
  } finally {
    ac.abort();
    await running;
  }
});

Deno.test("ImageCache answers no images while the runtime has never listed them, and asks again", async () => {
  const r = runtime();
  r.fail = new Error("connection refused");
  const { c } = cache(r, new FakeClock());
  assert.deepEqual(await c.list(), []);
  assert.deepEqual(await c.list(), []);
  assert.equal(r.calls, 2, "each read before the first success asks the runtime");
  r.fail = undefined;
  assert.deepEqual((await c.list()).map((i) => i.id), ["a"]);
  await c.list();
  assert.equal(r.calls, 3);
});
