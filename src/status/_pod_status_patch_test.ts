import assert from "node:assert/strict";
import { podStatusPatch } from "./_pod_status_patch.ts";

Deno.test("podStatusPatch leaves out an empty merge list that was absent", () => {
  // The apiserver answers 500 "no elements in any of the given slices" to `podIPs: []` with an
  // empty `$setElementOrder/podIPs`.
  const { patch } = podStatusPatch(
    { phase: "Pending" },
    { phase: "Failed", podIPs: [], conditions: [] },
    "u1",
  );
  assert.deepEqual(patch, { metadata: { uid: "u1" }, status: { phase: "Failed" } });
});

Deno.test("podStatusPatch merges conditions by type with the element order", () => {
  const { patch } = podStatusPatch(
    { conditions: [{ type: "Ready", status: "False" }] },
    { conditions: [{ type: "Ready", status: "True" }, { type: "Initialized", status: "True" }] },
    "u1",
  );
  assert.deepEqual(patch.status, {
    conditions: [{ type: "Ready", status: "True" }, { type: "Initialized", status: "True" }],
    "$setElementOrder/conditions": [{ type: "Ready" }, { type: "Initialized" }],
  });
});

Deno.test("podStatusPatch treats an empty list like a missing one, as Go's omitempty", () => {
  const { unchanged } = podStatusPatch(
    { phase: "Pending", initContainerStatuses: [] },
    { phase: "Pending" },
    "u1",
  );
  assert.equal(unchanged, true);
  const { patch } = podStatusPatch(
    { phase: "Pending", containerStatuses: [{ name: "a" }] },
    { phase: "Pending", containerStatuses: [] },
    "u1",
  );
  assert.deepEqual(patch.status, { containerStatuses: null });
});
