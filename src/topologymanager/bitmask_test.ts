import assert from "node:assert/strict";
import { BitMask, BitMaskRangeError, iterateBitMasks } from "./bitmask.ts";

const m = (...bits: number[]) => BitMask.of(...bits);

Deno.test("BitMask prints as upstream's String does", () => {
  assert.equal(BitMask.empty().toString(), "00");
  assert.equal(m(0).toString(), "01");
  assert.equal(m(1).toString(), "10");
  assert.equal(m(0, 1).toString(), "11");
  assert.equal(m(0, 2).toString(), "0101");
  // Upstream compares with `>`: exactly 1<<2 keeps width 2.
  assert.equal(m(2).toString(), "100");
  assert.equal(m(3).toString(), "1000");
  assert.equal(m(63).toString(), "1" + "0".repeat(63));
  assert.equal(JSON.stringify({ a: m(0, 1) }), '{"a":"11"}');
});

Deno.test("BitMask add and remove refuse bits outside 0-63 and change nothing", () => {
  assert.equal(BitMask.empty().add(0).toString(), "01");
  assert.equal(BitMask.empty().add(1).toString(), "10");
  assert.equal(BitMask.empty().add(0, 1).toString(), "11");
  assert.throws(() => BitMask.empty().add(-1, 64), BitMaskRangeError);
  assert.throws(() => BitMask.of(64), /bit number must be in range 0-63/);
  assert.equal(m(0).remove(0).toString(), "00");
  assert.equal(m(0, 1).remove(1).toString(), "01");
  assert.equal(m(0, 1).remove(0, 1).toString(), "00");
  const one = m(0);
  assert.throws(() => one.remove(-1, 64), BitMaskRangeError);
  assert.equal(one.toString(), "01");
});

Deno.test("BitMask and/or combine every mask", () => {
  const and = (...masks: number[][]) => {
    const all = masks.map((b) => m(...b));
    return all[0]!.and(...all).toString();
  };
  assert.equal(and([0, 1], [0, 1]), "11");
  assert.equal(and([0, 1], [1]), "10");
  assert.equal(and([0], [0, 1]), "01");
  assert.equal(and([0, 1], [0, 1], [1]), "10");
  assert.equal(and([0], [0], [1], [0, 1]), "00");
  assert.equal(and([0, 1, 2, 3], [1, 2, 3], [2, 3], [3]), "1000");
  const or = (...masks: number[][]) => {
    const all = masks.map((b) => m(...b));
    return all[0]!.or(...all).toString();
  };
  assert.equal(or([0], []), "01");
  assert.equal(or([1], [1]), "10");
  assert.equal(or([0], [1]), "11");
  assert.equal(or([0, 1], [0, 1]), "11");
  assert.equal(or([0], [1], [0, 1]), "11");
  assert.equal(or([3], [2], [1], [0]), "1111");
  // Operations return new masks.
  const a = m(0);
  a.or(m(1));
  assert.equal(a.toString(), "01");
});

Deno.test("BitMask empty, filled, isEmpty, isSet, anySet, isEqual, count, getBits", () => {
  assert.equal(BitMask.filled().count(), 64);
  assert.equal(BitMask.filled().toString(), "1".repeat(64));
  assert.equal(BitMask.empty().isEmpty(), true);
  assert.equal(m(0).isEmpty(), false);
  assert.equal(m(0, 1).isEmpty(), false);
  assert.equal(BitMask.empty().isSet(0), false);
  assert.equal(m(0).isSet(0), true);
  assert.equal(m(0, 1).isSet(1), true);
  assert.equal(m(0, 1).isSet(64), false);
  assert.equal(m(0, 1).isSet(-1), false);
  assert.equal(BitMask.empty().anySet([0, 1]), false);
  assert.equal(m(0).anySet([0, 1]), true);
  assert.equal(m(0, 1).anySet([0, 1]), true);
  assert.equal(m(0).anySet([64, 65]), false);
  assert.equal(m(1, 2).anySet([0, 3]), false);
  assert.equal(BitMask.empty().isEqual(BitMask.empty()), true);
  assert.equal(BitMask.empty().isEqual(m(0)), false);
  assert.equal(m(0).isEqual(m(0)), true);
  assert.equal(m(0).isEqual(m(1)), false);
  assert.equal(m(0, 1).isEqual(m(0, 1)), true);
  assert.equal(BitMask.empty().count(), 0);
  assert.equal(m(0).count(), 1);
  assert.equal(m(0, 1).count(), 2);
  assert.deepEqual(BitMask.empty().getBits(), []);
  assert.deepEqual(m(0).getBits(), [0]);
  assert.deepEqual(m(1, 0).getBits(), [0, 1]);
  assert.deepEqual(m(63, 5).getBits(), [5, 63]);
});

Deno.test("BitMask isNarrowerThan counts bits, then prefers lower ones", () => {
  assert.equal(m(0).isNarrowerThan(m(0, 1)), true);
  assert.equal(m(0, 1).isNarrowerThan(m(0)), false);
  assert.equal(m(0).isNarrowerThan(m(1)), true);
  assert.equal(m(1).isNarrowerThan(m(0)), false);
  // Wider but lower-valued still loses.
  assert.equal(m(0, 1).isNarrowerThan(m(5)), false);
});

Deno.test("BitMask isLessThan and isGreaterThan compare unsigned values", () => {
  assert.equal(m(0).isLessThan(m(0)), false);
  assert.equal(m(1).isLessThan(m(0)), false);
  assert.equal(m(0).isLessThan(m(1)), true);
  assert.equal(m(0).isGreaterThan(m(0)), false);
  assert.equal(m(1).isGreaterThan(m(0)), true);
  assert.equal(m(0).isGreaterThan(m(1)), false);
  // Bit 63 is the top of an unsigned number, not a sign.
  assert.equal(m(63).isGreaterThan(m(62, 0)), true);
});

Deno.test("iterateBitMasks yields every non-empty combination, smallest first", () => {
  for (const n of [1, 2, 4, 8, 16]) {
    const bits = Array.from({ length: n }, (_, i) => i);
    let count = 0;
    iterateBitMasks(bits, () => count++);
    assert.equal(count, 2 ** n - 1, `${n} bits`);
  }
  const seen: string[] = [];
  iterateBitMasks([0, 2, 3], (mask) => seen.push(mask.getBits().join(",")));
  assert.deepEqual(seen, ["0", "2", "3", "0,2", "0,3", "2,3", "0,2,3"]);
});
