import assert from "node:assert/strict";
import { runtimeContainerId } from "./container_id.ts";

Deno.test("runtimeContainerId takes the runtime's ID out of an API container ID", () => {
  assert.equal(runtimeContainerId("containerd://abc123"), "abc123");
  assert.equal(runtimeContainerId("abc123"), "abc123");
  assert.equal(runtimeContainerId(""), "");
});
