import assert from "node:assert/strict";
import { parsePsi, readPsi } from "./psi_stats.ts";

Deno.test("parsePsi reads some and full lines", () => {
  const p = parsePsi(
    "some avg10=0.21 avg60=0.82 avg300=7.06 total=4233452866\n" +
      "full avg10=1.50 avg60=0.00 avg300=0.00 total=12\n",
  );
  assert.deepEqual(p, {
    some: { avg10: 0.21, avg60: 0.82, avg300: 7.06, total: 4233452866 },
    full: { avg10: 1.5, avg60: 0, avg300: 0, total: 12 },
  });
});

Deno.test("parsePsi leaves full zero when the kernel writes only some", () => {
  const p = parsePsi("some avg10=1.00 avg60=2.00 avg300=3.00 total=4\n");
  assert.deepEqual(p?.full, { avg10: 0, avg60: 0, avg300: 0, total: 0 });
  assert.equal(p?.some.total, 4);
});

Deno.test("parsePsi rejects malformed files", () => {
  assert.equal(parsePsi(""), undefined);
  assert.equal(parsePsi("some avg10=x avg60=0 avg300=0 total=0\n"), undefined);
  assert.equal(parsePsi("some avg10=0 avg60=0 total=0\n"), undefined);
});

Deno.test("readPsi is undefined for a missing file", async () => {
  const dir = await Deno.makeTempDir();
  try {
    assert.equal(readPsi(dir, "cpu.pressure"), undefined);
    await Deno.writeTextFile(`${dir}/cpu.pressure`, "some avg10=0 avg60=0 avg300=0 total=9\n");
    assert.equal(readPsi(dir, "cpu.pressure")?.some.total, 9);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
