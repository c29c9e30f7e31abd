import assert from "node:assert/strict";
import { ContainerAllocateResponse } from "../../proto/deviceplugin/v1beta1/api.ts";
import { CorruptCheckpointError, MalformedCheckpointError } from "../checkpointmanager/errors.ts";
import { CHECKPOINT_FILE, decodeDeviceCheckpoint, encodeDeviceCheckpoint } from "./checkpoint.ts";

// Written by upstream's own code: checkpoint.New(...).MarshalCheckpoint() through
// checkpointmanager.CreateCheckpoint, in the Go program (module h3gen, k8s.io/kubernetes
// v1.36.3 from the module cache) whose source is in the report of issue 43's checkpoint helper.
// DM_EMPTY: a fresh kubelet (nil entries, no plugins). DM_FULL: three entries, NUMA nodes -1, 0,
// 1, 2, 10, an empty device list, an empty AllocResp, unicode, `"`, `<>&`, U+2028 and a tab.
// DM_NILS: nil DeviceIDs, AllocResp and device list, which upstream reads back.
const DM_EMPTY = '{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{}},"Checksum":3467439661}';
const DM_FULL =
  '{"Data":{"PodDeviceEntries":[{"PodUID":"pod-b","ContainerName":"ctr1","ResourceName":"vendor.com/gpu","DeviceIDs":{"-1":["gpu-9"],"0":["gpu-0","gpu-1"],"1":["gpu-2"],"10":["gpu-10"],"2":["gpu-3"]},"AllocResp":"Cg8KB1ZJU0lCTEUSBGRldjAKDAoFw5xuw68SAzwmPhITCgYvZGV2L3gSBy9ob3N0L3gYARogCgwvZGV2L252aWRpYTASDC9kZXYvbnZpZGlhMBoCcnciBgoBYRIBYioSChB2ZW5kb3IuY29tL2dwdT0w"},{"PodUID":"pod-a","ContainerName":"init-ç","ResourceName":"vendor.com/nic","DeviceIDs":{"0":["nic\\"0","nic\\u003c1\\u003e\\u0026"]},"AllocResp":"Cg8KB1ZJU0lCTEUSBGRldjEKDAoFw5xuw68SAzwmPhITCgYvZGV2L3gSBy9ob3N0L3gYARogCgwvZGV2L252aWRpYTASDC9kZXYvbnZpZGlhMBoCcnciBgoBYRIBYioSChB2ZW5kb3IuY29tL2dwdT0w"},{"PodUID":"pod-a","ContainerName":"ctr-日本","ResourceName":"vendor.com/gpu","DeviceIDs":{"0":[]},"AllocResp":""}],"RegisteredDevices":{"vendor.com/gpu":["gpu-0","gpu-1","gpu-2","gpu-3","gpu-9","gpu-10"],"vendor.com/idle":[],"vendor.com/nic":["nic\\"0","nic\\u003c1\\u003e\\u0026"],"vendor.com/ä":["\\u2028x\\ty"]}},"Checksum":4294541737}';
const DM_NILS =
  '{"Data":{"PodDeviceEntries":[{"PodUID":"p","ContainerName":"c","ResourceName":"r","DeviceIDs":null,"AllocResp":null}],"RegisteredDevices":{"r":null}},"Checksum":1400218696}';

const FILE = `/var/lib/kubelet/device-plugins/${CHECKPOINT_FILE}`;

function allocResp(i: number): ContainerAllocateResponse {
  return {
    envs: { VISIBLE: `dev${i}`, "Ünï": "<&>" },
    mounts: [{ containerPath: "/dev/x", hostPath: "/host/x", readOnly: true }],
    devices: [{ containerPath: "/dev/nvidia0", hostPath: "/dev/nvidia0", permissions: "rw" }],
    annotations: { a: "b" },
    cdiDevices: [{ name: "vendor.com/gpu=0" }],
  };
}

Deno.test("encodeDeviceCheckpoint writes the Go kubelet's bytes", () => {
  assert.equal(
    encodeDeviceCheckpoint({ podDeviceEntries: [], registeredDevices: new Map() }),
    DM_EMPTY,
  );
  const text = encodeDeviceCheckpoint({
    podDeviceEntries: [
      {
        podUID: "pod-b",
        containerName: "ctr1",
        resourceName: "vendor.com/gpu",
        deviceIds: new Map([[2, ["gpu-3"]], [-1, ["gpu-9"]], [0, ["gpu-0", "gpu-1"]], [1, [
          "gpu-2",
        ]], [10, ["gpu-10"]]]),
        allocResp: allocResp(0),
      },
      {
        podUID: "pod-a",
        containerName: "init-ç",
        resourceName: "vendor.com/nic",
        deviceIds: new Map([[0, ['nic"0', "nic<1>&"]]]),
        allocResp: allocResp(1),
      },
      {
        podUID: "pod-a",
        containerName: "ctr-日本",
        resourceName: "vendor.com/gpu",
        deviceIds: new Map([[0, []]]),
        allocResp: ContainerAllocateResponse.fromPartial({}),
      },
    ],
    registeredDevices: new Map([
      ["vendor.com/ä", ["\u2028x\ty"]],
      ["vendor.com/gpu", ["gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-9", "gpu-10"]],
      ["vendor.com/nic", ['nic"0', "nic<1>&"]],
      ["vendor.com/idle", []],
    ]),
  });
  assert.equal(text, DM_FULL);
});

Deno.test("decodeDeviceCheckpoint reads the Go kubelet's files", () => {
  const full = decodeDeviceCheckpoint(DM_FULL, FILE);
  assert.deepEqual(full.skipped, []);
  assert.deepEqual(full.podDeviceEntries.map((e) => [e.podUID, e.containerName, e.resourceName]), [
    ["pod-b", "ctr1", "vendor.com/gpu"],
    ["pod-a", "init-ç", "vendor.com/nic"],
    ["pod-a", "ctr-日本", "vendor.com/gpu"],
  ]);
  assert.deepEqual(full.podDeviceEntries[0]!.deviceIds.get(-1), ["gpu-9"]);
  assert.deepEqual(full.podDeviceEntries[0]!.allocResp.envs, allocResp(0).envs);
  assert.deepEqual(full.podDeviceEntries[1]!.deviceIds.get(0), ['nic"0', "nic<1>&"]);
  assert.deepEqual(full.registeredDevices.get("vendor.com/ä"), ["\u2028x\ty"]);
  assert.deepEqual(full.registeredDevices.get("vendor.com/idle"), []);
  // Read back and written again, each file is the same bytes.
  assert.equal(encodeDeviceCheckpoint(full), DM_FULL);
  assert.equal(encodeDeviceCheckpoint(decodeDeviceCheckpoint(DM_EMPTY, FILE)), DM_EMPTY);

  // Nil where Go allows it: accepted, read as empty.
  const nils = decodeDeviceCheckpoint(DM_NILS, FILE);
  assert.deepEqual(nils.podDeviceEntries[0]!.deviceIds, new Map());
  assert.deepEqual(nils.registeredDevices, new Map([["r", []]]));
});

Deno.test("decodeDeviceCheckpoint reads as json.Unmarshal does: any case, unknown fields", () => {
  const text = DM_EMPTY.replace('"Data"', '"data"').replace("{", '{"Extra":[1,2],');
  assert.deepEqual(decodeDeviceCheckpoint(text, FILE).podDeviceEntries, []);
});

Deno.test("decodeDeviceCheckpoint says a changed file is corrupted, naming the file", () => {
  assert.throws(
    () => decodeDeviceCheckpoint(DM_FULL.replace("gpu-10", "gpu-11"), FILE),
    (e) =>
      e instanceof CorruptCheckpointError && e.expected === 4294541737n &&
      e.message.startsWith(`${FILE}: checkpoint is corrupted: it records checksum 4294541737`),
  );
  // A missing checksum is 0, which is not the content's.
  assert.throws(
    () => decodeDeviceCheckpoint('{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{}}}', FILE),
    CorruptCheckpointError,
  );
});

Deno.test("decodeDeviceCheckpoint names the file and field of a malformed checkpoint", () => {
  const cases: [string, string][] = [
    ["{", `${FILE}: not JSON`],
    [
      DM_FULL.replace('"-1":', '"x":'),
      `${FILE}: Data.PodDeviceEntries[0].DeviceIDs["x"]: want an integer key, got 'x'`,
    ],
    [
      DM_FULL.replace('"AllocResp":""', '"AllocResp":"A"'),
      `${FILE}: Data.PodDeviceEntries[2].AllocResp: want standard base64 with padding`,
    ],
    [
      '{"Data":{"RegisteredDevices":{"r":"a"}},"Checksum":1}',
      `${FILE}: Data.RegisteredDevices.r: want an array, got string "a"`,
    ],
    ['{"Data":[],"Checksum":1}', `${FILE}: Data: want an object, got an array`],
    ['{"Checksum":-1}', `${FILE}: Checksum: want an integer, got -1`],
  ];
  for (const [text, message] of cases) {
    assert.throws(
      () => decodeDeviceCheckpoint(text, FILE),
      (e) => e instanceof MalformedCheckpointError && e.message.startsWith(message),
      message,
    );
  }
});

Deno.test("decodeDeviceCheckpoint reports an entry whose AllocResp is not protobuf as skipped", () => {
  // 0x0a 0x10: field 1, 16 bytes long, and then nothing.
  const junk = DM_NILS.replace('"AllocResp":null', '"AllocResp":"ChA="');
  let actual = 0n;
  try {
    decodeDeviceCheckpoint(junk, FILE);
  } catch (e) {
    actual = (e as CorruptCheckpointError).actual;
  }
  const text = junk.replace(/"Checksum":\d+/, `"Checksum":${actual}`);
  const cp = decodeDeviceCheckpoint(text, FILE);
  assert.deepEqual(cp.podDeviceEntries, []);
  assert.deepEqual(cp.skipped.map((s) => [s.podUID, s.containerName, s.resourceName]), [
    ["p", "c", "r"],
  ]);
  assert.ok(cp.skipped[0]!.error instanceof Error);
  assert.deepEqual([...cp.registeredDevices.keys()], ["r"]);
});
