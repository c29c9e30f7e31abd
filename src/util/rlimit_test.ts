import assert from "node:assert/strict";
import { libcSetNoFileLimit, setNumFiles } from "./rlimit.ts";

function openFilesLimits(): [string, string] {
  const line = Deno.readTextFileSync("/proc/self/limits").split("\n")
    .find((l) => l.startsWith("Max open files"));
  const [soft, hard] = line!.replace("Max open files", "").trim().split(/\s+/);
  return [soft!, hard!];
}

Deno.test("setNumFiles sets the soft and hard limits alike, or throws Go's errno text", () => {
  const calls: [bigint, bigint][] = [];
  setNumFiles(4096, { setrlimit: (s, h) => (calls.push([s, h]), 0) });
  assert.deepEqual(calls, [[4096n, 4096n]]);
  assert.throws(
    () => setNumFiles(1000000, { setrlimit: () => 1 }),
    /^Error: operation not permitted$/,
  );
  assert.throws(() => setNumFiles(5, { setrlimit: () => 99 }), /errno 99/);
  assert.throws(() => setNumFiles(-1, { setrlimit: () => 0 }), /invalid number of open files: -1/);
});

Deno.test("libcSetNoFileLimit changes this process's RLIMIT_NOFILE (/proc/self/limits)", () => {
  const [soft, hard] = openFilesLimits();
  assert.notEqual(hard, "unlimited");
  const h = BigInt(hard);
  try {
    // The hard limit as both: always allowed, and the soft one moves to it.
    assert.equal(libcSetNoFileLimit(h, h), 0);
    assert.deepEqual(openFilesLimits(), [hard, hard]);
    assert.equal(libcSetNoFileLimit(h - 1n, h), 0);
    assert.deepEqual(openFilesLimits(), [String(h - 1n), hard]);
    // A soft limit above the hard one is EINVAL, read back from errno.
    assert.equal(libcSetNoFileLimit(h + 1n, h), 22);
    assert.deepEqual(openFilesLimits(), [String(h - 1n), hard]);
  } finally {
    assert.equal(libcSetNoFileLimit(BigInt(soft), h), 0);
  }
});
