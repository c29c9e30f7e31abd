import assert from "node:assert/strict";
import { containerRef } from "./ref.ts";

const POD = {
  metadata: { name: "web", namespace: "shop", uid: "u-1", resourceVersion: "7" },
  spec: {
    containers: [{ name: "app" }],
    initContainers: [{ name: "init" }],
    ephemeralContainers: [{ name: "debug" }],
  },
};

Deno.test("containerRef points the pod's reference at the container's place in the spec", () => {
  const base = {
    kind: "Pod",
    apiVersion: "v1",
    name: "web",
    namespace: "shop",
    uid: "u-1",
    resourceVersion: "7",
  };
  assert.deepEqual(containerRef(POD, "app"), { ...base, fieldPath: "spec.containers{app}" });
  assert.deepEqual(containerRef(POD, "init"), { ...base, fieldPath: "spec.initContainers{init}" });
  assert.deepEqual(containerRef(POD, "debug"), {
    ...base,
    fieldPath: "spec.ephemeralContainers{debug}",
  });
  assert.deepEqual(containerRef(POD, "POD"), {
    ...base,
    fieldPath: "implicitly required container POD",
  });
});
