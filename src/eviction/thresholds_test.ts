import assert from "node:assert/strict";
import {
  getThresholdQuantity,
  isHardEvictionThreshold,
  parseThresholdConfig,
  ThresholdConfigError,
} from "./thresholds.ts";

function rejects(
  config: Parameters<typeof parseThresholdConfig>[0],
  field: string,
  message: string,
) {
  assert.throws(() => parseThresholdConfig(config), (e: unknown) => {
    assert.ok(e instanceof ThresholdConfigError);
    assert.equal(e.field, field);
    assert.equal(e.message, message);
    return true;
  });
}

Deno.test("parseThresholdConfig parses hard, soft, grace periods and minimum reclaims", () => {
  const thresholds = parseThresholdConfig({
    evictionHard: { "memory.available": "100Mi", "nodefs.available": "10%" },
    evictionSoft: { "memory.available": "1Gi" },
    evictionSoftGracePeriod: { "memory.available": "1m30s" },
    evictionMinimumReclaim: { "memory.available": "0.5Gi", "nodefs.available": "5%" },
  });
  assert.equal(thresholds.length, 3);
  const [hardMem, hardFs, softMem] = thresholds;
  assert.deepEqual(hardMem, {
    signal: "memory.available",
    operator: "LessThan",
    value: { kind: "quantity", quantity: "100Mi", amount: 100 * 2 ** 20 },
    gracePeriod: 0,
    minReclaim: { kind: "quantity", quantity: "0.5Gi", amount: 2 ** 29 },
  });
  assert.equal(hardFs?.value.kind, "percentage");
  assert.equal(hardFs?.value.kind === "percentage" && hardFs.value.percentage, Math.fround(0.1));
  assert.equal(hardFs?.minReclaim?.kind, "percentage");
  assert.equal(softMem?.gracePeriod, 90_000);
  assert.ok(hardMem && isHardEvictionThreshold(hardMem));
  assert.ok(softMem && !isHardEvictionThreshold(softMem));
});

Deno.test("parseThresholdConfig ignores 0% and 100% thresholds", () => {
  const thresholds = parseThresholdConfig({
    evictionHard: { "nodefs.available": "0%", "imagefs.available": "100%" },
  });
  assert.deepEqual(thresholds, []);
});

Deno.test("parseThresholdConfig copies hard memory.available to allocatable when pods are enforced", () => {
  const thresholds = parseThresholdConfig({
    enforceNodeAllocatable: ["pods"],
    evictionHard: { "memory.available": "100Mi" },
  });
  assert.deepEqual(thresholds.map((t) => t.signal), [
    "memory.available",
    "allocatableMemory.available",
  ]);
});

Deno.test("parseThresholdConfig rejects an unknown signal", () => {
  rejects(
    { evictionHard: { "memory.free": "100Mi" } },
    "evictionHard",
    "unsupported eviction signal memory.free",
  );
  rejects(
    { evictionSoftGracePeriod: { "cpu.available": "1m" } },
    "evictionSoftGracePeriod",
    "unsupported eviction signal cpu.available",
  );
});

Deno.test("parseThresholdConfig rejects an operator other than the implied less-than", () => {
  // The map form has no operator: a value written as ">100Mi" or "<=100Mi" is no quantity.
  for (const value of [">100Mi", "=100Mi", "<=100Mi"]) {
    rejects(
      { evictionHard: { "memory.available": value } },
      "evictionHard",
      "quantities must match the regular expression " +
        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
    );
  }
});

Deno.test("parseThresholdConfig rejects percentages out of range or malformed", () => {
  rejects(
    { evictionHard: { "nodefs.available": "101%" } },
    "evictionHard",
    "eviction percentage threshold nodefs.available must be <= 100%: 101%",
  );
  rejects(
    { evictionHard: { "nodefs.available": "-5%" } },
    "evictionHard",
    "eviction percentage threshold nodefs.available must be >= 0%: -5%",
  );
  rejects(
    { evictionHard: { "nodefs.available": "ten%" } },
    "evictionHard",
    'strconv.ParseFloat: parsing "ten": invalid syntax',
  );
  rejects(
    { evictionMinimumReclaim: { "nodefs.available": "0%" } },
    "evictionMinimumReclaim",
    "eviction percentage minimum reclaim nodefs.available must be positive: 0%",
  );
});

Deno.test("parseThresholdConfig requires a grace period for each soft threshold", () => {
  rejects(
    { evictionSoft: { "memory.available": "1Gi" } },
    "evictionSoft",
    "grace period must be specified for the soft eviction threshold memory.available",
  );
  rejects(
    {
      evictionSoft: { "memory.available": "1Gi" },
      evictionSoftGracePeriod: { "memory.available": "-1s" },
    },
    "evictionSoftGracePeriod",
    "invalid eviction grace period specified: -1s, must be a positive value",
  );
  rejects(
    {
      evictionSoft: { "memory.available": "1Gi" },
      evictionSoftGracePeriod: { "memory.available": "90" },
    },
    "evictionSoftGracePeriod",
    'time: invalid duration "90"',
  );
});

Deno.test("parseThresholdConfig rejects zero and negative quantities", () => {
  rejects(
    { evictionHard: { "memory.available": "-100Mi" } },
    "evictionHard",
    "eviction threshold memory.available must be positive: -100Mi",
  );
  rejects(
    { evictionHard: { "pid.available": "0" } },
    "evictionHard",
    "eviction threshold pid.available must be positive: 0",
  );
  rejects(
    { evictionMinimumReclaim: { "memory.available": "-1Mi" } },
    "evictionMinimumReclaim",
    "negative eviction minimum reclaim specified for memory.available",
  );
});

Deno.test("getThresholdQuantity scales a percentage by capacity", () => {
  assert.equal(getThresholdQuantity({ kind: "quantity", quantity: "1Ki", amount: 1024 }, 10), 1024);
  assert.equal(getThresholdQuantity({ kind: "percentage", percentage: 0.25 }, 1000), 250);
});
