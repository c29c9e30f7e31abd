import assert from "node:assert/strict";
import { formatBinarySI, isQuantity, parseQuantity, QuantitySyntaxError } from "./quantity.ts";

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

Deno.test("formatBinarySI writes amounts as apimachinery canonicalizes BinarySI", () => {
  assert.equal(formatBinarySI(0), "0");
  assert.equal(formatBinarySI(1000), "1000");
  assert.equal(formatBinarySI(1024), "1Ki");
  assert.equal(formatBinarySI(1536), "1536");
  assert.equal(formatBinarySI(25_275_973_632), "24683568Ki");
  assert.equal(formatBinarySI(8 * 2 ** 30), "8Gi");
  assert.equal(formatBinarySI(1023 * 1024 + 1), "1047553");
  assert.equal(formatBinarySI(3 * 2 ** 50), "3Pi");
  assert.throws(() => formatBinarySI(1.5), RangeError);
});
