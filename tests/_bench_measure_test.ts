import assert from "node:assert/strict";
import { millicores, ms, seconds } from "./_bench_measure.ts";

Deno.test("millicores keeps a tenth: idle kubelets differ by less than one", () => {
  assert.equal(millicores(0.00543), "5.4 m");
  assert.equal(millicores(0.0059), "5.9 m");
  assert.equal(millicores(0.022), "22.0 m");
  assert.equal(millicores(NaN), "n/a");
  assert.equal(seconds(2.514), "2.51 s");
  assert.equal(seconds(undefined), "n/a");
});

Deno.test("ms rounds to whole milliseconds, never printing -0", () => {
  assert.equal(ms(12.6), "13 ms");
  assert.equal(ms(-0.3), "0 ms");
  assert.equal(ms(-12.6), "-13 ms");
  assert.equal(ms(Infinity), "n/a");
});
