import assert from "node:assert/strict";
import { fnv1a32 } from "./fnv.ts";

Deno.test("fnv1a32 matches the FNV-1a reference vectors, also over a view", () => {
  const enc = new TextEncoder();
  assert.equal(fnv1a32(enc.encode("")), 0x811c9dc5);
  assert.equal(fnv1a32(enc.encode("a")), 0xe40c292c);
  assert.equal(fnv1a32(enc.encode("foobar")), 0xbf9cf968);
  assert.equal(fnv1a32(enc.encode("xxfoobarxx").subarray(2, 8)), 0xbf9cf968);
});
