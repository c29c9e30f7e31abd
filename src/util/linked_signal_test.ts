import assert from "node:assert/strict";
import { linkSignals } from "./linked_signal.ts";

Deno.test("linkSignals aborts with the first source's reason and lets go of its sources", () => {
  const a = new AbortController();
  const b = new AbortController();
  const linked = linkSignals(a.signal, b.signal);
  assert.equal(linked.signal.aborted, false);
  b.abort(new Error("b stopped"));
  assert.equal(linked.signal.aborted, true);
  assert.equal((linked.signal.reason as Error).message, "b stopped");
  // Already aborted: the new signal is too.
  assert.equal(linkSignals(a.signal, b.signal).signal.aborted, true);
});

Deno.test("linkSignals, disposed, no longer follows its sources and holds no listener on them", () => {
  const root = new AbortController();
  let listeners = 0;
  const add = root.signal.addEventListener.bind(root.signal);
  const remove = root.signal.removeEventListener.bind(root.signal);
  root.signal.addEventListener = ((...args: Parameters<typeof add>) => {
    listeners++;
    add(...args);
  }) as typeof add;
  root.signal.removeEventListener = ((...args: Parameters<typeof remove>) => {
    listeners--;
    remove(...args);
  }) as typeof remove;
  for (let i = 0; i < 1000; i++) {
    using linked = linkSignals(root.signal, new AbortController().signal);
    assert.equal(linked.signal.aborted, false);
  }
  assert.equal(listeners, 0, "every wait's listener is removed from the long-lived source");
  const kept = linkSignals(root.signal);
  kept[Symbol.dispose]();
  root.abort();
  assert.equal(kept.signal.aborted, false);
});
