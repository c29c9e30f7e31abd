import assert from "node:assert/strict";
import { join } from "node:path";
import { hugePageSizesFromDirNames, readHugePageSizes } from "./hugepages.ts";

Deno.test("hugePageSizesFromDirNames names sizes as cgroups do, in the kernel's order", () => {
  assert.deepEqual(
    hugePageSizesFromDirNames([
      "hugepages-2048kB",
      "hugepages-1048576kB",
      "hugepages-64kB",
      "hugepages-32768kB",
      "hugepages-2048",
      "other",
    ]),
    ["2MB", "1GB", "64KB", "32MB"],
  );
});

Deno.test("readHugePageSizes reads a directory and none when it is missing", async () => {
  const dir = await Deno.makeTempDir({ prefix: "hugepages-" });
  try {
    await Deno.mkdir(join(dir, "hugepages-2048kB"));
    assert.deepEqual(readHugePageSizes(dir), ["2MB"]);
    assert.deepEqual(readHugePageSizes(join(dir, "missing")), []);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
