import assert from "node:assert/strict";
import { BitMask } from "./bitmask.ts";
import { calculateAverageFor, newNumaInfo, NumaInfo, NumaInfoError } from "./numa_info.ts";
import { DEFAULT_POLICY_OPTIONS } from "./policy_options.ts";

const m = (...bits: number[]) => BitMask.of(...bits);
const closest = { ...DEFAULT_POLICY_OPTIONS, preferClosestNuma: true };
const FOUR = new Map([
  [0, [10, 11, 12, 12]],
  [1, [11, 10, 12, 12]],
  [2, [12, 12, 10, 11]],
  [3, [12, 12, 11, 10]],
]);

Deno.test("newNumaInfo keeps distances only with prefer-closest-numa-nodes", () => {
  const cases: { nodes: number[]; distances: Map<number, number[]> }[] = [
    { nodes: [0], distances: new Map([[0, [10, 11, 12, 12]]]) },
    { nodes: [0, 1], distances: new Map([[0, [10, 11, 12, 12]], [1, [11, 10, 12, 12]]]) },
    { nodes: [0, 1, 2, 3], distances: FOUR },
    // One node whose id is 1; two nodes not sequential.
    { nodes: [1], distances: new Map([[1, [11, 10, 12, 12]]]) },
    { nodes: [0, 2], distances: new Map([[0, [10, 11, 12, 12]], [2, [12, 12, 10, 11]]]) },
  ];
  for (const topology of cases) {
    const plain = newNumaInfo(topology, DEFAULT_POLICY_OPTIONS);
    assert.deepEqual(plain.nodes, topology.nodes);
    assert.equal(plain.distances.size, 0);
    const near = newNumaInfo(topology, closest);
    assert.deepEqual(near.nodes, topology.nodes);
    assert.deepEqual(near.distances, topology.distances);
  }
});

Deno.test("newNumaInfo refuses a node without distances under prefer-closest-numa-nodes", () => {
  const topology = { nodes: [0], distances: new Map() };
  assert.throws(
    () => newNumaInfo(topology, closest),
    (e) => e instanceof NumaInfoError && e.message === "error getting NUMA distances from cadvisor",
  );
  assert.deepEqual(newNumaInfo(topology, DEFAULT_POLICY_OPTIONS).nodes, [0]);
  assert.throws(() => newNumaInfo({ nodes: [64], distances: new Map() }, DEFAULT_POLICY_OPTIONS));
});

Deno.test("calculateAverageFor averages every ordered pair of the mask's nodes", () => {
  const two = new Map([[0, [10, 11]], [1, [11, 10]]]);
  assert.equal(calculateAverageFor(new Map([[0, [10]]]), m(0)), 10);
  assert.equal(calculateAverageFor(two, m(0)), 10);
  assert.equal(calculateAverageFor(two, m(0, 1)), 10.5);
  assert.equal(calculateAverageFor(FOUR, m(0, 2)), 11);
  assert.equal(calculateAverageFor(FOUR, m(0, 2, 3)), 11.11111111111111);
  assert.equal(calculateAverageFor(new Map(), BitMask.empty()), 0);
});

Deno.test("NumaInfo closest prefers narrow, then near, then low masks", () => {
  const same3 = new Map([[0, [10, 10, 10]], [1, [10, 10, 10]], [2, [10, 10, 10]]]);
  const same4 = new Map([0, 1, 2, 3].map((n) => [n, [10, 10, 10, 10]]));
  const cases: [string, BitMask, BitMask, "current" | "candidate", Map<number, number[]>][] = [
    ["lengths differ, current narrower", m(0), m(0, 2), "current", new Map()],
    ["same length and distance, current lower", m(0, 1), m(0, 2), "current", same3],
    ["same length and distance, candidate lower", m(0, 3), m(0, 2), "candidate", same4],
    ["same length, candidate nearer", m(0, 3), m(0, 1), "candidate", FOUR],
    ["same length, current nearer", m(2, 3), m(0, 3), "current", FOUR],
  ];
  for (const [name, current, candidate, expected, distances] of cases) {
    const info = new NumaInfo([], distances);
    const r = info.closest(candidate, current);
    assert.equal(r, expected === "current" ? current : candidate, name);
  }
});

Deno.test("NumaInfo narrowest and defaultAffinityMask", () => {
  const info = new NumaInfo([0, 2, 3], new Map());
  assert.equal(info.defaultAffinityMask().toString(), "1101");
  const a = m(1);
  const b = m(0, 1);
  assert.equal(info.narrowest(a, b), a);
  assert.equal(info.narrowest(b, a), a);
  const c = m(2);
  // Neither narrower (equal): the second.
  const c2 = m(2);
  assert.equal(info.narrowest(c, c2), c2);
});
