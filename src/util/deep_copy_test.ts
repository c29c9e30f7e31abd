import assert from "node:assert/strict";
import { deepCopy } from "./deep_copy.ts";

Deno.test("deepCopy copies JSON-shaped objects deeply, keeping undefined fields", () => {
  const pod = {
    metadata: { name: "web", labels: { app: "web" }, uid: undefined },
    spec: { containers: [{ name: "c", args: ["a", "b"], ports: [{ containerPort: 80 }] }] },
    status: { phase: "Running", conditions: [], podIP: null },
  };
  const c = deepCopy(pod);
  assert.deepEqual(c, pod);
  assert.deepEqual(c, structuredClone(pod));
  assert.ok(Object.hasOwn(c.metadata, "uid"), "an undefined field stays a field");
  assert.notEqual(c.spec.containers[0], pod.spec.containers[0]);
  c.spec.containers[0]!.args.push("x");
  c.metadata.labels.app = "other";
  assert.deepEqual(pod.spec.containers[0]!.args, ["a", "b"]);
  assert.equal(pod.metadata.labels.app, "web");
});

Deno.test("deepCopy hands what is not plain data to structuredClone", () => {
  const when = new Date(0);
  const v = { at: when, seen: new Map([["a", 1]]), list: [when] };
  const c = deepCopy(v);
  assert.ok(c.at instanceof Date && c.at !== when && c.at.getTime() === 0);
  assert.ok(c.list[0] instanceof Date && c.list[0] !== when);
  assert.deepEqual([...c.seen], [["a", 1]]);
  assert.notEqual(c.seen, v.seen);
  assert.equal(deepCopy(null), null);
  assert.equal(deepCopy("s"), "s");
});
