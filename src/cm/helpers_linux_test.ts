import assert from "node:assert/strict";
import { milliCPUToQuota, milliCPUToShares } from "./helpers_linux.ts";

Deno.test("milliCPUToShares converts as upstream MilliCPUToShares", () => {
  assert.deepEqual([0n, 1n, 100n, 250n, 1000n, 300_000n].map(milliCPUToShares), [
    2n,
    2n,
    102n,
    256n,
    1024n,
    262_144n,
  ]);
});

Deno.test("milliCPUToQuota converts as upstream MilliCPUToQuota", () => {
  assert.equal(milliCPUToQuota(0n, 100_000n), 0n);
  assert.equal(milliCPUToQuota(5n, 100_000n), 1000n);
  assert.equal(milliCPUToQuota(250n, 100_000n), 25_000n);
  assert.equal(milliCPUToQuota(500n, 100_000n), 50_000n);
  assert.equal(milliCPUToQuota(2500n, 50_000n), 125_000n);
});

Deno.test("milliCPUToQuota stays exact past 2^53 millicores", () => {
  // The container's copy computed in floats and gave 900719925474099200 here, the sandbox's
  // and the QoS manager's bigint copies 900719925474099300, as upstream's int64 arithmetic does.
  assert.equal(milliCPUToQuota(2n ** 53n + 1n, 100_000n), 900_719_925_474_099_300n);
});
