import assert from "node:assert/strict";
import { getContainerStatus, isRestartableInitContainer } from "./podutil.ts";

Deno.test("isRestartableInitContainer is true for restartPolicy Always alone", () => {
  // One definition for what the status code, the resource arithmetic and the termination order
  // each used to decide with a copy of their own.
  assert.equal(isRestartableInitContainer({ restartPolicy: "Always" }), true);
  for (const restartPolicy of [undefined, "", "Never", "OnFailure", "always"]) {
    assert.equal(isRestartableInitContainer({ restartPolicy }), false, String(restartPolicy));
  }
  assert.equal(isRestartableInitContainer({}), false);
});

Deno.test("getContainerStatus finds the named status or none", () => {
  const statuses = [
    { name: "a", ready: true, restartCount: 0, image: "i", imageID: "" },
    { name: "b", ready: false, restartCount: 2, image: "i", imageID: "" },
  ];
  assert.equal(getContainerStatus(statuses, "b")?.restartCount, 2);
  assert.equal(getContainerStatus(statuses, "c"), undefined);
  assert.equal(getContainerStatus(undefined, "a"), undefined);
});
