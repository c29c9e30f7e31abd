import assert from "node:assert/strict";
import {
  convertReserved,
  getSystemReservedMemory,
  type MemoryReservation,
  nodeAllocatableReservation,
  validateReservedMemory,
} from "./reserved_memory.ts";

const HP2M = "hugepages-2Mi";
const HP1G = "hugepages-1Gi";
const msg = (total: string, type: string, allocatable: string) =>
  `the total amount ${JSON.stringify(total)} of type ${
    JSON.stringify(type)
  } is not equal to the value ${
    JSON.stringify(allocatable)
  } determined by Node Allocatable feature`;

Deno.test("validateReservedMemory checks each memory type's sum against node allocatable", async (t) => {
  const cases: [string, Record<string, string>, MemoryReservation[], string][] = [
    ["neither set", {}, [], ""],
    ["both zero", { memory: "0" }, [{ numaNode: 0, limits: { memory: "0" } }], ""],
    [
      "allocatable unset, reserved set",
      {},
      [{ numaNode: 0, limits: { memory: "12" } }],
      msg("12", "memory", "0"),
    ],
    ["allocatable set, reserved unset", { [HP2M]: "5" }, [], msg("0", HP2M, "5")],
    [
      "not equal",
      { memory: "5" },
      [{ numaNode: 0, limits: { memory: "12" } }],
      msg("12", "memory", "5"),
    ],
    [
      "a NUMA node the machine does not have",
      { memory: "17" },
      [{ numaNode: 0, limits: { memory: "12" } }, { numaNode: 2, limits: { memory: "5" } }],
      "the reserved memory configuration references a NUMA node 2 that does not exist on this machine",
    ],
    [
      "totals equal",
      { memory: "17", [HP2M]: "77", [HP1G]: "13" },
      [
        { numaNode: 0, limits: { memory: "12", [HP2M]: "70", [HP1G]: "13" } },
        { numaNode: 1, limits: { memory: "5", [HP2M]: "7" } },
      ],
      "",
    ],
    [
      "hugepages-2Mi total not equal",
      { memory: "17", [HP2M]: "14", [HP1G]: "13" },
      [
        { numaNode: 0, limits: { memory: "12", [HP2M]: "70", [HP1G]: "13" } },
        { numaNode: 1, limits: { memory: "5", [HP2M]: "7" } },
      ],
      msg("77", HP2M, "14"),
    ],
    // Quantities print as Go prints the sums: in the format of the last non-zero entry.
    [
      "binary quantities",
      { memory: "2Gi", cpu: "1" },
      [{ numaNode: 0, limits: { memory: "1Gi" } }, { numaNode: 1, limits: { memory: "2Gi" } }],
      msg("3Gi", "memory", "2Gi"),
    ],
    ["other resources are ignored", { cpu: "2", pods: "3" }, [], ""],
  ];
  for (const [name, allocatable, reservations, want] of cases) {
    await t.step(name, () => {
      const run = () => validateReservedMemory([0, 1], allocatable, reservations);
      if (want === "") run();
      else assert.throws(run, { name: "MemoryManagerError", message: want });
    });
  }
});

Deno.test("convertReserved gives every machine node a map, later entries winning", () => {
  const got = convertReserved([0, 1, 2], [
    { numaNode: 0, limits: { memory: "1Gi", [HP2M]: "4Mi" } },
    { numaNode: 1, limits: { memory: "512Mi" } },
    { numaNode: 1, limits: { memory: "256Mi" } },
  ]);
  assert.deepEqual(
    [...got].map(([n, m]) => [n, Object.fromEntries(m)]),
    [[0, { memory: 2 ** 30, [HP2M]: 4 * 2 ** 20 }], [1, { memory: 256 * 2 ** 20 }], [2, {}]],
  );
  assert.throws(() => convertReserved([0], [{ numaNode: 0, limits: { memory: "1.5" } }]), {
    message: "could not covert a variable of type Quantity to int64",
  });
});

Deno.test("getSystemReservedMemory validates before converting", () => {
  assert.deepEqual(
    [...getSystemReservedMemory([0, 1], {}, [])].map(([n, m]) => [n, m.size]),
    [[0, 0], [1, 0]],
  );
  assert.throws(
    () => getSystemReservedMemory([0], {}, [{ numaNode: 0, limits: { memory: "1Gi" } }]),
    { message: msg("1Gi", "memory", "0") },
  );
  const got = getSystemReservedMemory([0, 1], { memory: "1Gi" }, [
    { numaNode: 0, limits: { memory: "512Mi" } },
    { numaNode: 1, limits: { memory: "512Mi" } },
  ]);
  assert.equal(got.get(1)?.get("memory"), 512 * 2 ** 20);
});

Deno.test("nodeAllocatableReservation adds system, kube and hard eviction reservations", () => {
  assert.deepEqual(
    nodeAllocatableReservation({
      capacity: {
        cpu: "4",
        memory: "32Gi",
        [HP2M]: "128Mi",
        "ephemeral-storage": "100Gi",
        pods: "110",
      },
      systemReserved: { cpu: "500m", memory: "1Gi" },
      kubeReserved: { memory: "512Mi", [HP2M]: "4Mi", "example.com/x": "1" },
      evictionHard: { "memory.available": "100Mi", "nodefs.available": "10%" },
    }),
    {
      cpu: "500m",
      memory: "1636Mi",
      [HP2M]: "4Mi",
      // 10% as float32 of 100 GiB.
      "ephemeral-storage": String(Math.trunc(100 * 2 ** 30 * Math.fround(0.1))),
    },
  );
  assert.deepEqual(nodeAllocatableReservation({ capacity: { memory: "1Gi" } }), {});
});
