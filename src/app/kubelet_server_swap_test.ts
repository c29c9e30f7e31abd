import assert from "node:assert/strict";
import { join } from "node:path";
import { createLogger } from "../klog/klog.ts";
import { swapIsOn } from "./kubelet_server.ts";

Deno.test("swapIsOn reads /proc/swaps as upstream's swap.IsSwapOn", async () => {
  const dir = await Deno.makeTempDir({ prefix: "swaps-" });
  const logger = createLogger({ format: "text", verbosity: 0 });
  try {
    const file = join(dir, "swaps");
    const header = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";
    await Deno.writeTextFile(file, header);
    assert.equal(await swapIsOn(logger, file), false);
    await Deno.writeTextFile(file, `${header}/swapfile  file  1048572  0  -2\n`);
    assert.equal(await swapIsOn(logger, file), true);
    assert.equal(await swapIsOn(logger, join(dir, "missing")), false, "no file: no swap");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
