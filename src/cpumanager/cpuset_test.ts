import assert from "node:assert/strict";
import { CPUSet, CPUSetParseError } from "./cpuset.ts";

function throwsWith(fn: () => unknown, message: string) {
  assert.throws(fn, (e) => e instanceof CPUSetParseError && e.message.includes(message));
}

Deno.test("CPUSet.parse reads upstream's accepted lists", () => {
  const cases: [string, number[]][] = [
    ["", []],
    ["5", [5]],
    ["1,2,3,4,5", [1, 2, 3, 4, 5]],
    ["1-5", [1, 2, 3, 4, 5]],
    ["1-2,3-5", [1, 2, 3, 4, 5]],
    ["5,4,3,2,1", [1, 2, 3, 4, 5]],
    ["3-6,1-5", [1, 2, 3, 4, 5, 6]],
    ["3-3,5-5", [3, 5]],
    ["+7", [7]],
  ];
  for (const [s, want] of cases) assert.deepEqual(CPUSet.parse(s).list(), want, s);
});

Deno.test("CPUSet.parse rejects what upstream rejects", () => {
  const bad = [
    "nonnumeric",
    "non-numeric",
    "no,numbers",
    "0-a",
    "a-0",
    "0,a",
    "a,0",
    "1-2,a,3-5",
    "0,",
    "0,,",
    ",3",
    ",,3",
    "0,,3",
    "-1",
    "1-",
    "1,2-,3",
    "1,-2,3",
    "-1--2",
    "--1",
    "1--",
    "3-0",
    "0--3",
    " 1",
  ];
  for (const s of bad) assert.throws(() => CPUSet.parse(s), CPUSetParseError, s);
});

Deno.test("CPUSet.parse errors carry upstream's messages", () => {
  throwsWith(() => CPUSet.parse("0,a"), 'strconv.Atoi: parsing "a": invalid syntax');
  throwsWith(() => CPUSet.parse("1-"), 'strconv.Atoi: parsing "": invalid');
  throwsWith(() => CPUSet.parse("3-0"), 'invalid range "3-0" (3 > 0)');
  throwsWith(() => CPUSet.parse("0--3"), 'invalid range "0--3" (0 > -3)');
  throwsWith(
    () => CPUSet.parse("99999999999999999999"),
    'parsing "99999999999999999999": value out of range',
  );
});

Deno.test("CPUSet.toString is the canonical cpu list", () => {
  assert.deepEqual(CPUSet.of().toString(), "");
  assert.deepEqual(CPUSet.of(5).toString(), "5");
  assert.deepEqual(CPUSet.of(1, 2, 3, 4, 5).toString(), "1-5");
  assert.deepEqual(CPUSet.of(8, 6, 5, 3, 2, 1).toString(), "1-3,5-6,8");
  assert.deepEqual(CPUSet.parse("0-3,2,9,10").toString(), "0-3,9-10");
  assert.deepEqual(JSON.stringify({ s: CPUSet.of(0, 1) }), '{"s":"0-1"}');
});

Deno.test("CPUSet set operations leave their operands unchanged", () => {
  const a = CPUSet.parse("0-5");
  const b = CPUSet.parse("4-7");
  assert.deepEqual(a.union(b).toString(), "0-7");
  assert.deepEqual(a.union(b, CPUSet.of(10)).toString(), "0-7,10");
  assert.deepEqual(a.union().toString(), "0-5");
  assert.deepEqual(a.intersection(b).toString(), "4-5");
  assert.deepEqual(a.difference(b).toString(), "0-3");
  assert.deepEqual(b.difference(a).toString(), "6-7");
  assert.deepEqual(a.toString(), "0-5");
  assert.deepEqual(b.toString(), "4-7");
  assert.ok(CPUSet.of(1, 2).isSubsetOf(a));
  assert.ok(CPUSet.of().isSubsetOf(a));
  assert.ok(!b.isSubsetOf(a));
  assert.ok(CPUSet.parse("5,4,3,2,1,0").equals(a));
  assert.ok(!a.equals(b));
  assert.ok(!CPUSet.of(1, 2).equals(CPUSet.of(1, 2, 3)));
  assert.deepEqual(a.size, 6);
  assert.ok(CPUSet.of().isEmpty());
  assert.ok(a.has(0));
  assert.ok(!a.has(6));
  assert.deepEqual(CPUSet.of(9, 1, 5).list(), [1, 5, 9]);
  assert.deepEqual([...CPUSet.of(9, 1, 5)], [1, 5, 9]);
  assert.deepEqual(CPUSet.of(9, 1, 5).unsortedList().sort((x, y) => x - y), [1, 5, 9]);
  const listed = a.list();
  listed.push(99);
  assert.ok(!a.has(99));
});
