import assert from "node:assert/strict";
import type { Device } from "../../proto/deviceplugin/v1beta1/api.ts";
import { BitMask } from "../topologymanager/bitmask.ts";
import {
  filterByAffinity,
  generateDeviceTopologyHints,
  hasTopologyAlignment,
} from "./topology_hints.ts";

function devices(spec: Record<string, number[]>): Map<string, Device> {
  return new Map(
    Object.entries(spec).map(([ID, nodes]) => [ID, {
      ID,
      health: "Healthy",
      topology: nodes.length === 0 ? undefined : { nodes: nodes.map((n) => ({ ID: BigInt(n) })) },
    }]),
  );
}

const show = (hints: { numaNodeAffinity: BitMask | undefined; preferred: boolean }[]) =>
  hints.map((h) => `${h.numaNodeAffinity?.getBits().join("+")}${h.preferred ? "*" : ""}`);

Deno.test("generateDeviceTopologyHints prefers the narrowest NUMA sets that can hold the request (upstream's cases)", () => {
  const d = devices({ a: [0], b: [0], c: [1], d: [1] });
  const all = new Set(d.keys());
  // One device: either node alone, both nodes not preferred.
  assert.deepEqual(show(generateDeviceTopologyHints([0, 1], d, all, new Set(), 1)), [
    "0*",
    "1*",
    "0+1",
  ]);
  // Three devices need both nodes.
  assert.deepEqual(show(generateDeviceTopologyHints([0, 1], d, all, new Set(), 3)), ["0+1*"]);
  // Only node 1 has a free device; node 0 alone could have held it, so {1} is preferred.
  assert.deepEqual(
    show(generateDeviceTopologyHints([0, 1], d, new Set(["c"]), new Set(), 1)),
    ["1*", "0+1"],
  );
  // Two requested, one free on each node: only both nodes can, and no single node would have
  // been too small, so it is not preferred.
  assert.deepEqual(
    show(generateDeviceTopologyHints([0, 1], d, new Set(["a", "c"]), new Set(), 2)),
    ["0+1"],
  );
  // A reusable device on node 0 rules out node 1 alone.
  assert.deepEqual(
    show(generateDeviceTopologyHints([0, 1], d, new Set(["c", "d"]), new Set(["a"]), 2)),
    ["0+1"],
  );
  // NUMA nodes the machine does not have are ignored.
  assert.deepEqual(
    show(
      generateDeviceTopologyHints([0], devices({ x: [0], y: [7] }), new Set(["x"]), new Set(), 1),
    ),
    ["0*"],
  );
});

Deno.test("hasTopologyAlignment and filterByAffinity split devices by the chosen NUMA nodes", () => {
  assert.equal(hasTopologyAlignment(devices({ a: [], b: [] })), false);
  const d = devices({ a: [0], b: [0], c: [1], d: [1], e: [] });
  assert.equal(hasTopologyAlignment(d), true);
  const all = new Set(d.keys());
  const r = filterByAffinity(BitMask.of(1), d, all);
  assert.deepEqual(r, { aligned: ["c", "d"], unaligned: ["a", "b"], noAffinity: ["e"] });
  // Without a hint, everything is without affinity.
  assert.deepEqual(filterByAffinity(undefined, d, all).noAffinity, [...all]);
});
