import assert from "node:assert/strict";
import { CorruptCheckpointError, MalformedCheckpointError } from "../checkpointmanager/errors.ts";
import {
  decodeMemoryManagerCheckpoint,
  encodeMemoryManagerCheckpoint,
  MEMORY_MANAGER_STATE_FILE,
  type MemoryTable,
} from "./checkpoint.ts";

// Written by upstream's own code in the Go program (module h3gen, k8s.io/kubernetes v1.36.3
// from the module cache) whose source is in the report of issue 43's checkpoint helper:
// MEM_NONE, MEM_STATIC, MEM_NILS by MemoryManagerCheckpointV1.MarshalCheckpoint through the
// checkpoint manager (what v1.36 writes with PodLevelResourceManagers off); MEM_V1_TYPENAME
// hashed by checksum.New under the V1 type name; MEM_V2_PODENTRIES by the V2 (gate on) marshal.
const MEM_NILS =
  '{"policyName":"Static","machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"a":{"total":1,"systemReserved":0,"allocatable":1,"reserved":0,"free":1},"z":null},"cells":[0]},"1":null,"2":{"numberOfAssignments":0,"memoryMap":null,"cells":null}},"entries":{"p":{"c":[{"numaAffinity":null,"type":"memory","size":1}]}},"checksum":980198564}';
const MEM_NONE = '{"policyName":"None","machineState":{},"checksum":4236770233}';
const MEM_STATIC =
  '{"policyName":"Static","machineState":{"0":{"numberOfAssignments":3,"memoryMap":{"hugepages-1Gi":{"total":8589934592,"systemReserved":0,"allocatable":8589934592,"reserved":2147483648,"free":6442450944},"hugepages-2Mi":{"total":0,"systemReserved":0,"allocatable":0,"reserved":0,"free":0},"memory":{"total":137438953472,"systemReserved":1073741824,"allocatable":136365211648,"reserved":4294967296,"free":132070244352}},"cells":[0,1]},"1":{"numberOfAssignments":1,"memoryMap":{"memory":{"total":9007199254740991,"systemReserved":0,"allocatable":9007199254740991,"reserved":0,"free":9007199254740991}},"cells":[0,1]}},"entries":{"pod-b":{"ctr":[{"numaAffinity":[0,1],"type":"memory","size":4294967296},{"numaAffinity":[0],"type":"hugepages-1Gi","size":2147483648}]},"pod-é":{"c":[]}},"checksum":3980162818}';
const MEM_V1_TYPENAME =
  '{"policyName":"Static","machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":1073741824,"systemReserved":0,"allocatable":1073741824,"reserved":0,"free":1073741824}},"cells":[0]}},"checksum":4288328655}';
const MEM_V2_PODENTRIES =
  '{"policyName":"Static","machineState":{},"podEntries":{"p":{"memoryBlocks":[{"numaAffinity":[0],"type":"memory","size":1}]}},"checksum":4069061552}';

const FILE = `/var/lib/kubelet/${MEMORY_MANAGER_STATE_FILE}`;
const GI = 2 ** 30;

function table(total: number, systemReserved: number, reserved: number): MemoryTable {
  const allocatable = total - systemReserved;
  return {
    totalMemSize: total,
    systemReserved,
    allocatable,
    reserved,
    free: allocatable - reserved,
  };
}

Deno.test("encodeMemoryManagerCheckpoint writes the Go kubelet's bytes", () => {
  assert.equal(
    encodeMemoryManagerCheckpoint({
      policyName: "None",
      machineState: new Map(),
      entries: new Map(),
    }),
    MEM_NONE,
  );
  assert.equal(
    encodeMemoryManagerCheckpoint({
      policyName: "Static",
      machineState: new Map([
        [1, {
          numberOfAssignments: 1,
          cells: [0, 1],
          memoryMap: new Map([["memory", table(Number.MAX_SAFE_INTEGER, 0, 0)]]),
        }],
        [0, {
          numberOfAssignments: 3,
          cells: [0, 1],
          memoryMap: new Map([
            ["memory", table(128 * GI, GI, 4 * GI)],
            ["hugepages-2Mi", table(0, 0, 0)],
            ["hugepages-1Gi", table(8 * GI, 0, 2 * GI)],
          ]),
        }],
      ]),
      entries: new Map([
        ["pod-é", new Map([["c", []]])],
        [
          "pod-b",
          new Map([["ctr", [
            { numaAffinity: [0, 1], type: "memory", size: 4 * GI },
            { numaAffinity: [0], type: "hugepages-1Gi", size: 2 * GI },
          ]]]),
        ],
      ]),
    }),
    MEM_STATIC,
  );
});

Deno.test("decodeMemoryManagerCheckpoint reads the Go kubelet's files", () => {
  const cp = decodeMemoryManagerCheckpoint(MEM_STATIC, FILE);
  assert.equal(cp.policyName, "Static");
  assert.deepEqual(
    cp.machineState.get(0)?.memoryMap.get("hugepages-1Gi"),
    table(8 * GI, 0, 2 * GI),
  );
  assert.equal(cp.machineState.get(1)?.memoryMap.get("memory")?.free, Number.MAX_SAFE_INTEGER);
  assert.deepEqual(cp.entries.get("pod-b")?.get("ctr")?.[1], {
    numaAffinity: [0],
    type: "hugepages-1Gi",
    size: 2 * GI,
  });
  assert.deepEqual(cp.entries.get("pod-é"), new Map([["c", []]]));
  assert.equal(encodeMemoryManagerCheckpoint(cp), MEM_STATIC);
  assert.equal(
    encodeMemoryManagerCheckpoint(decodeMemoryManagerCheckpoint(MEM_NONE, FILE)),
    MEM_NONE,
  );
  // Hashed under the V1 type name: accepted too.
  assert.equal(decodeMemoryManagerCheckpoint(MEM_V1_TYPENAME, FILE).machineState.size, 1);
  // Nil node states, tables, cells: the checksum is over the nils, the values read as zero.
  const nils = decodeMemoryManagerCheckpoint(MEM_NILS, FILE);
  assert.deepEqual(nils.machineState.get(1), {
    numberOfAssignments: 0,
    memoryMap: new Map(),
    cells: [],
  });
  assert.deepEqual(nils.machineState.get(0)?.memoryMap.get("z"), table(0, 0, 0));
  assert.deepEqual(nils.entries.get("p")?.get("c"), [{
    numaAffinity: [],
    type: "memory",
    size: 1,
  }]);
});

Deno.test("decodeMemoryManagerCheckpoint refuses what upstream refuses with its gate off", () => {
  // The PodLevelResourceManagers format: its checksum covers podEntries.
  assert.throws(
    () => decodeMemoryManagerCheckpoint(MEM_V2_PODENTRIES, FILE),
    CorruptCheckpointError,
  );
  assert.throws(
    () =>
      decodeMemoryManagerCheckpoint(
        MEM_STATIC.replace('"size":2147483648', '"size":2147483649'),
        FILE,
      ),
    (e) =>
      e instanceof CorruptCheckpointError && e.expected === 3980162818n &&
      e.message.startsWith(`${FILE}: checkpoint is corrupted`),
  );
  assert.throws(
    () => decodeMemoryManagerCheckpoint(MEM_NONE.replace("{}", '{"0":{"cells":[1.5]}}'), FILE),
    (e) =>
      e instanceof MalformedCheckpointError &&
      e.message === `${FILE}: machineState["0"].cells[0]: want an integer, got 1.5`,
  );
  // A checksum of 0 is taken unverified, as upstream does.
  assert.equal(
    decodeMemoryManagerCheckpoint(MEM_STATIC.replace(/"checksum":\d+$/, '"checksum":0}'), FILE)
      .policyName,
    "Static",
  );
});

Deno.test("decodeMemoryManagerCheckpoint refuses sizes it cannot hold exactly", () => {
  const text = MEM_NONE.replace("{}", '{"0":{"memoryMap":{"memory":{"total":9007199254740993}}}}')
    .replace(/"checksum":\d+/, '"checksum":0');
  assert.throws(
    () => decodeMemoryManagerCheckpoint(text, FILE),
    (e) =>
      e instanceof MalformedCheckpointError &&
      e.message.includes(
        'machineState["0"].memoryMap.memory.totalMemSize: 9007199254740993 is beyond 2^53',
      ),
  );
});
