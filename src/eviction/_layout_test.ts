import assert from "node:assert/strict";
import { parseThresholdConfig } from "./thresholds.ts";
import { createLogger } from "../klog/klog.ts";
import { detectDiskLayout, updateContainerFsThresholds } from "./_layout.ts";

const CONFIG = {
  evictionHard: {
    "nodefs.available": "10%",
    "nodefs.inodesFree": "5%",
    "imagefs.available": "15%",
    "imagefs.inodesFree": "5%",
  },
  evictionSoft: { "nodefs.available": "20%", "imagefs.available": "25%" },
  evictionSoftGracePeriod: { "nodefs.available": "1m", "imagefs.available": "2m" },
};

function containerFs(thresholds: ReturnType<typeof parseThresholdConfig>) {
  return thresholds
    .filter((t) => t.signal.startsWith("containerfs."))
    .map((t) => [
      t.signal,
      t.value.kind === "percentage" ? Math.round(t.value.percentage * 100) : t.value.quantity,
      t.gracePeriod,
    ]);
}

Deno.test("updateContainerFsThresholds follows nodefs on one filesystem", () => {
  const { thresholds, overridden } = updateContainerFsThresholds(
    parseThresholdConfig(CONFIG),
    false,
    false,
  );
  assert.deepEqual(containerFs(thresholds), [
    ["containerfs.available", 10, 0],
    ["containerfs.available", 20, 60_000],
    ["containerfs.inodesFree", 5, 0],
  ]);
  assert.deepEqual(overridden, []);
});

Deno.test("updateContainerFsThresholds follows imagefs when it holds the containers", () => {
  const { thresholds } = updateContainerFsThresholds(parseThresholdConfig(CONFIG), true, false);
  assert.deepEqual(containerFs(thresholds), [
    ["containerfs.available", 15, 0],
    ["containerfs.available", 25, 120_000],
    ["containerfs.inodesFree", 5, 0],
  ]);
});

Deno.test("updateContainerFsThresholds replaces configured containerfs thresholds in place", () => {
  const parsed = parseThresholdConfig({
    evictionHard: { "containerfs.available": "1Gi", "nodefs.available": "10%" },
  });
  const { thresholds, overridden } = updateContainerFsThresholds(parsed, true, true);
  assert.deepEqual(thresholds.map((t) => t.signal), ["containerfs.available", "nodefs.available"]);
  assert.deepEqual(containerFs(thresholds), [["containerfs.available", 10, 0]]);
  assert.deepEqual(overridden, ["found containerfs.available for hard eviction. ignoring"]);
});

Deno.test("detectDiskLayout reclaims containers then images as the layout dictates", async () => {
  const calls: string[] = [];
  const deps = (dedicated: boolean, split: boolean) => ({
    diskInfo: {
      hasDedicatedImageFs: () => Promise.resolve(dedicated),
      hasDedicatedContainerFs: () => Promise.resolve(split),
    },
    imageGC: {
      deleteUnusedImages: () => {
        calls.push("images");
        return Promise.resolve(0);
      },
    },
    containerGC: {
      deleteAllUnusedContainers: () => {
        calls.push("containers");
        return Promise.resolve();
      },
    },
    logger: createLogger({ write: () => {} }),
  });
  const run = async (
    dedicated: boolean,
    split: boolean,
    signal: "nodefs.available" | "imagefs.available",
  ) => {
    calls.length = 0;
    const layout = await detectDiskLayout([], deps(dedicated, split));
    for (const f of layout.reclaim.get(signal) ?? []) await f();
    return [...calls];
  };
  assert.deepEqual(await run(false, false, "nodefs.available"), ["containers", "images"]);
  assert.deepEqual(await run(true, false, "nodefs.available"), []);
  assert.deepEqual(await run(true, false, "imagefs.available"), ["containers", "images"]);
  assert.deepEqual(await run(true, true, "imagefs.available"), ["images"]);
  assert.deepEqual(await run(true, true, "nodefs.available"), ["containers"]);
});

Deno.test("detectDiskLayout fails when the image filesystem cannot be told apart", async () => {
  const lines: string[] = [];
  await assert.rejects(
    detectDiskLayout([], {
      diskInfo: {
        hasDedicatedImageFs: () => Promise.reject(new Error("no imagefs info")),
        hasDedicatedContainerFs: () => Promise.resolve(false),
      },
      imageGC: { deleteUnusedImages: () => Promise.resolve(0) },
      containerGC: { deleteAllUnusedContainers: () => Promise.resolve() },
      logger: createLogger({ write: (l) => lines.push(l) }),
    }),
    /eviction manager: failed to get HasDedicatedImageFs: Error: no imagefs info/,
  );
  assert.ok(lines.some((l) => l.includes("Eviction manager: failed to get HasDedicatedImageFs")));
});
