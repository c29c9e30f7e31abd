import assert from "node:assert/strict";
import { dropText, memoryCgroups } from "./_bench_kernel.ts";

Deno.test("memoryCgroups reads the memory controller's count from /proc/cgroups", () => {
  const text = [
    "#subsys_name\thierarchy\tnum_cgroups\tenabled",
    "cpuset\t3\t318\t1",
    "memory\t4\t9185\t1",
    "pids\t8\t318\t1",
    "",
  ].join("\n");
  assert.equal(memoryCgroups(text), 9185);
  assert.equal(memoryCgroups("cpu\t1\t4\t1\n"), undefined);
  assert.equal(memoryCgroups("memory\t0\tx\t1\n"), undefined);
  assert.equal(memoryCgroups(""), undefined);
});

Deno.test("dropText gives the count before and after, ? where unknown", () => {
  assert.equal(dropText({ before: 9185, after: 328 }), "9185 → 328 memory cgroups");
  assert.equal(dropText({ after: 3 }), "? → 3 memory cgroups");
});
