import assert from "node:assert/strict";
import {
  canonicalQuantity,
  formatQuantity,
  intQuantity,
  parseQuantityFormatted,
} from "./quantity_format.ts";

Deno.test("formatQuantity prints binary amounts with the largest exact suffix", () => {
  assert.equal(formatQuantity(intQuantity(100 * 2 ** 20, "BinarySI")), "100Mi");
  assert.equal(formatQuantity(intQuantity(48_298_524_672, "BinarySI")), "47166528Ki");
  assert.equal(formatQuantity(intQuantity(2 ** 30, "BinarySI")), "1Gi");
  // Not a multiple of 1024: the plain number, as in "Threshold quantity: 48335976730".
  assert.equal(formatQuantity(intQuantity(48_335_976_730, "BinarySI")), "48335976730");
});

Deno.test("formatQuantity prints small binary amounts as decimal, as Go does", () => {
  assert.equal(formatQuantity(intQuantity(1000, "BinarySI")), "1k");
  assert.equal(formatQuantity(intQuantity(1023, "BinarySI")), "1023");
  assert.equal(formatQuantity(intQuantity(1024, "BinarySI")), "1Ki");
  assert.equal(formatQuantity(intQuantity(0, "BinarySI")), "0");
});

Deno.test("formatQuantity uses exponents that are multiples of 3 for decimal amounts", () => {
  assert.equal(formatQuantity(intQuantity(4000, "DecimalSI")), "4k");
  assert.equal(formatQuantity(intQuantity(1500, "DecimalSI")), "1500");
  assert.equal(formatQuantity(intQuantity(32_768, "DecimalSI")), "32768");
  assert.equal(formatQuantity(intQuantity(5_000_000, "DecimalSI")), "5M");
});

Deno.test("canonicalQuantity keeps the written format and canonicalizes the amount", () => {
  assert.equal(canonicalQuantity("100Mi"), "100Mi");
  assert.equal(canonicalQuantity("0.5Gi"), "512Mi");
  assert.equal(canonicalQuantity("1024Mi"), "1Gi");
  assert.equal(canonicalQuantity("1.5G"), "1500M");
  assert.equal(canonicalQuantity("500M"), "500M");
  assert.equal(canonicalQuantity("129e6"), "129e6");
  assert.equal(canonicalQuantity("100m"), "100m");
  assert.equal(canonicalQuantity("0.1Mi"), "104857600m");
  assert.equal(canonicalQuantity("128974848"), "128974848");
});

Deno.test("parseQuantityFormatted rounds below a nano up, as ParseQuantity does", () => {
  const q = parseQuantityFormatted("0.0000000001");
  assert.deepEqual(q.value, { n: 1n, s: 9 });
  assert.equal(formatQuantity(q), "1n");
});
