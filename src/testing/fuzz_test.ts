import assert from "node:assert/strict";
import { caseSeed, isCrash, mutate, Rng, runFuzz } from "./fuzz.ts";

Deno.test("Rng replays a seed exactly, and caseSeed gives each case its own", () => {
  const a = new Rng(42);
  const b = new Rng(42);
  const xs = Array.from({ length: 5 }, () => a.next());
  assert.deepEqual(xs, Array.from({ length: 5 }, () => b.next()));
  assert.ok(xs.every((x) => x >= 0 && x < 1));
  assert.notEqual(caseSeed(1, 0), caseSeed(1, 1));
  assert.equal(caseSeed(7, 3), caseSeed(7, 3));
});

Deno.test("mutate changes a copy and leaves the example alone", () => {
  const example = { a: { b: [1, 2, 3], c: "x" }, d: true };
  const before = structuredClone(example);
  let changed = 0;
  for (let i = 0; i < 50; i++) {
    if (JSON.stringify(mutate(new Rng(i), example)) !== JSON.stringify(example)) changed++;
  }
  assert.deepEqual(example, before);
  assert.ok(changed > 40, `only ${changed} of 50 mutations changed anything`);
});

Deno.test("isCrash tells engine errors and empty messages from rejections", () => {
  assert.match(isCrash(new TypeError("x is undefined"))!, /^TypeError: x is undefined/);
  assert.match(isCrash(new RangeError("Maximum call stack size exceeded"))!, /^RangeError/);
  assert.equal(isCrash(new Error("")), "Error with an empty message");
  assert.match(isCrash("text")!, /non-Error/);
  class ConfigError extends Error {}
  assert.equal(isCrash(new ConfigError("/etc/kubelet.yaml: field 'x' ...")), undefined);
});

Deno.test("runFuzz counts rejections, reports crashes and hangs with their seeds", async () => {
  const r = await runFuzz({
    target: "t",
    seed: 1,
    cases: 4,
    generate: (_rng, i) => i,
    run: (i) => {
      if (i === 1) throw new Error("bad input");
      if (i === 2) throw new TypeError("crash");
      if (i === 3) return new Promise<never>(() => {});
      return "accepted";
    },
    timeoutMs: 50,
  });
  assert.equal(r.accepted, 1);
  assert.equal(r.rejected, 1);
  assert.deepEqual(r.failures.map((f) => [f.index, f.seed, f.input]), [
    [2, caseSeed(1, 2), "2"],
    [3, caseSeed(1, 3), "3"],
  ]);
  assert.match(r.failures[1]!.error, /^HANG/);
});
