import assert from "node:assert/strict";
import { join } from "node:path";
import { removeIfExists } from "./remove.ts";

Deno.test("removeIfExists removes a file, takes a missing one as removed, and fails otherwise", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const file = join(dir, "f");
    await Deno.writeTextFile(file, "x");
    await removeIfExists(file);
    await assert.rejects(() => Deno.stat(file), Deno.errors.NotFound);
    await removeIfExists(file);
    // A directory that is not empty is an error, not silently kept.
    await Deno.mkdir(join(dir, "d"));
    await Deno.writeTextFile(join(dir, "d", "f"), "x");
    await assert.rejects(() => removeIfExists(join(dir, "d")));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
