import assert from "node:assert/strict";
import { moduleAt, type ModuleStarts, parseModuleStarts } from "./_bundle_sites.ts";

Deno.test("moduleAt finds a bundle line's module and its line within the module", () => {
  const starts: ModuleStarts = [[3, "src/util/clock.ts"], [6, "src/klog/klog.ts"], [9, "x.js"]];
  assert.equal(moduleAt(starts, 1), undefined);
  assert.deepEqual(moduleAt(starts, 4), { path: "src/util/clock.ts", line: 1 });
  assert.deepEqual(moduleAt(starts, 7), { path: "src/klog/klog.ts", line: 1 });
  assert.deepEqual(moduleAt(starts, 8), { path: "src/klog/klog.ts", line: 2 });
  assert.deepEqual(moduleAt(starts, 500), { path: "x.js", line: 491 });
  assert.deepEqual(moduleAt([], 5), undefined);
});

Deno.test("parseModuleStarts takes a sorted list of [line, path] and nothing else", () => {
  assert.deepEqual(parseModuleStarts('[[1,"a.ts"],[4,"b.ts"]]'), [[1, "a.ts"], [4, "b.ts"]]);
  for (const bad of ["{}", '[[2,"a"],[1,"b"]]', "[[1]]", '[[0,"a"]]', '[[1.5,"a"]]', "not json"]) {
    assert.equal(parseModuleStarts(bad), undefined, bad);
  }
});
