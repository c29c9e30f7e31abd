import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import { newExclusiveCpus } from "./exclusive_cpus.ts";

const POD: V1Pod = {
  metadata: { uid: "u1", name: "p", namespace: "ns" },
  spec: {
    initContainers: [{ name: "init" }],
    containers: [{ name: "shared" }, { name: "pinned" }],
  },
};

Deno.test("newExclusiveCpus finds pinned containers and their pods, as upstream", () => {
  const pinned = new Map([["u1/pinned", [2, 3]], ["u2/init", [4]]]);
  const x = newExclusiveCpus({
    exclusiveCpus: (uid, name) => pinned.get(`${uid}/${name}`) ?? [],
  })!;
  assert.equal(x.container(POD, { name: "pinned" }), true);
  assert.equal(x.container(POD, { name: "shared" }), false);
  assert.equal(x.pod(POD), true);
  // An init container with exclusive CPUs counts for its pod.
  const other: V1Pod = { ...POD, metadata: { uid: "u2" } };
  assert.equal(x.pod(other), true);
  assert.equal(x.pod({ ...POD, metadata: { uid: "u3" } }), false);
});

Deno.test("newExclusiveCpus lifts no quota with DisableCPUQuotaWithExclusiveCPUs off", () => {
  const exclusiveCpus = () => [1];
  assert.ok(newExclusiveCpus({ exclusiveCpus, featureGates: {} }));
  assert.equal(
    newExclusiveCpus({ exclusiveCpus, featureGates: { DisableCPUQuotaWithExclusiveCPUs: false } }),
    undefined,
  );
});
