import assert from "node:assert/strict";
import type { V1RuntimeClass } from "@kubernetes/client-node";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import type { RequestOptions, WatchEvent } from "../client/kube_client.ts";
import {
  RUNTIME_CLASSES_PATH,
  type RuntimeClassClient,
  RuntimeClassManager,
  RuntimeClassNotFoundError,
} from "./runtimeclass_manager.ts";

const logger = createLogger({ write: () => {}, now: () => new Date(0), pid: 1 });

function rc(name: string, handler: string): V1RuntimeClass {
  return {
    apiVersion: "node.k8s.io/v1",
    kind: "RuntimeClass",
    metadata: { name, uid: `uid-${name}`, resourceVersion: "1" },
    handler,
  };
}

/** A client listing `items` once, then watching whatever {@link push} sends. */
function fakeClient(items: V1RuntimeClass[]) {
  const calls: string[] = [];
  const queue: WatchEvent<unknown>[] = [];
  let wake: (() => void) | undefined;
  const client: RuntimeClassClient = {
    request<T>(method: string, path: string, _opts?: RequestOptions): Promise<T> {
      calls.push(`${method} ${path}`);
      return Promise.resolve({ metadata: { resourceVersion: "7" }, items } as T);
    },
    async *watch<T>(
      path: string,
      opts: { resourceVersion?: string; signal?: AbortSignal } = {},
    ): AsyncGenerator<WatchEvent<T>> {
      calls.push(`WATCH ${path} rv=${opts.resourceVersion}`);
      while (!opts.signal?.aborted) {
        const ev = queue.shift();
        if (ev) {
          yield ev as WatchEvent<T>;
          continue;
        }
        await new Promise<void>((r) => {
          wake = r;
          opts.signal?.addEventListener("abort", () => r(), { once: true });
        });
      }
    },
  };
  const push = (ev: WatchEvent<unknown>) => {
    queue.push(ev);
    wake?.();
  };
  return { client, calls, push, drained: () => queue.length === 0 };
}

async function until(what: string, cond: () => boolean): Promise<void> {
  for (let i = 0; i < 1000 && !cond(); i++) await new Promise((r) => setTimeout(r, 1));
  assert.ok(cond(), what);
}

Deno.test("RuntimeClassManager resolves no class to the default handler without listing", () => {
  const { client, calls } = fakeClient([]);
  const m = new RuntimeClassManager({ client, clock: new FakeClock(), logger });
  assert.equal(m.lookupRuntimeHandler(undefined), "");
  assert.equal(m.lookupRuntimeHandler(null), "");
  assert.equal(m.lookupRuntimeHandler(""), "");
  assert.deepEqual(calls, []);
});

Deno.test("RuntimeClassManager fails a class it does not hold with the lister's NotFound, before the first list too", () => {
  const { client } = fakeClient([]);
  const m = new RuntimeClassManager({ client, clock: new FakeClock(), logger });
  assert.equal(m.hasSynced(), false);
  assert.throws(() => m.lookupRuntimeHandler("gvisor"), (e: unknown) => {
    assert.ok(e instanceof RuntimeClassNotFoundError);
    assert.equal(e.name, "RuntimeClassNotFoundError");
    assert.equal(e.runtimeClassName, "gvisor");
    // What client-go's lister says (errors.NewNotFound(nodev1.Resource("runtimeclass"), name)).
    assert.equal(e.message, 'runtimeclass.node.k8s.io "gvisor" not found');
    return true;
  });
});

Deno.test("RuntimeClassManager lists and watches every RuntimeClass and follows their changes", async () => {
  const { client, calls, push, drained } = fakeClient([rc("gvisor", "runsc"), rc("kata", "kata")]);
  const m = new RuntimeClassManager({ client, clock: new FakeClock(), logger });
  const ctl = new AbortController();
  const running = m.run(ctl.signal);
  await until("synced", () => m.hasSynced());
  assert.deepEqual(calls, [`GET ${RUNTIME_CLASSES_PATH}`, `WATCH ${RUNTIME_CLASSES_PATH} rv=7`]);
  assert.equal(m.lookupRuntimeHandler("gvisor"), "runsc");
  assert.equal(m.lookupRuntimeHandler("kata"), "kata");
  assert.throws(() => m.lookupRuntimeHandler("test"), RuntimeClassNotFoundError);

  // A class created later resolves; a deleted one no longer does.
  push({ type: "ADDED", object: rc("test", "runc-test") });
  push({ type: "DELETED", object: rc("kata", "kata") });
  const handlerOf = (name: string) => {
    try {
      return m.lookupRuntimeHandler(name);
    } catch {
      return undefined;
    }
  };
  await until("events applied", () => drained() && handlerOf("kata") === undefined);
  assert.equal(m.lookupRuntimeHandler("test"), "runc-test");
  assert.equal(m.lookupRuntimeHandler("gvisor"), "runsc");

  ctl.abort();
  await running;
});
