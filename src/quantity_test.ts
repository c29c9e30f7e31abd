import assert from "node:assert/strict";
import { isQuantity, parseQuantity, QuantitySyntaxError } from "./quantity.ts";

Deno.test("parseQuantity reads binary, decimal and exponent forms", () => {
  assert.equal(parseQuantity("100Mi"), 100 * 2 ** 20);
  assert.equal(parseQuantity("1.5Gi"), 1.5 * 2 ** 30);
  assert.equal(parseQuantity("500m"), 0.5);
  assert.equal(parseQuantity("2"), 2);
  assert.equal(parseQuantity("1k"), 1000);
  assert.equal(parseQuantity("1e3"), 1000);
  assert.equal(parseQuantity("1E3"), 1000);
  assert.equal(parseQuantity(".5"), 0.5);
  assert.equal(parseQuantity("-1"), -1);
});

Deno.test("parseQuantity rejects what apimachinery rejects", () => {
  for (const bad of ["", "Mi", "1 Mi", "1MB", "1.2.3", "ten", "1mi", " 1", "1Ki2"]) {
    assert.throws(() => parseQuantity(bad), QuantitySyntaxError, bad);
    assert.equal(isQuantity(bad), false);
  }
});
