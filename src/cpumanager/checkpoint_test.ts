import assert from "node:assert/strict";
import { CorruptCheckpointError, MalformedCheckpointError } from "../checkpointmanager/errors.ts";
import {
  CPU_MANAGER_STATE_FILE,
  decodeCpuManagerCheckpoint,
  encodeCpuManagerCheckpoint,
} from "./checkpoint.ts";

// Written by upstream's own code in the Go program (module h3gen, k8s.io/kubernetes v1.36.3
// from the module cache) whose source is in the report of issue 43's checkpoint helper:
// CPU_NONE, CPU_STATIC by CPUManagerCheckpointV2.MarshalCheckpoint through the checkpoint
// manager (what v1.36 writes with PodLevelResourceManagers off); CPU_V2_TYPENAME hashed by
// checksum.New under the V2 type name; CPU_V1 a V1 file as pre-V2 kubelets wrote it (hashed
// under CPUManagerCheckpoint, which is what v1.36's V1 VerifyChecksum accepts).
const CPU_NONE = '{"policyName":"none","defaultCpuSet":"","checksum":1353318690}';
const CPU_STATIC =
  '{"policyName":"static","defaultCpuSet":"0,4-7","entries":{"pod-a":{"ctr-ü":"8-11,16"},"pod-b":{"ctr":"1-2","sidecar":"3"},"pod-empty-c":{}},"checksum":2288598262}';
const CPU_V1 =
  '{"policyName":"static","defaultCpuSet":"0,3","entries":{"containerid-1":"1","containerid-2":"2"},"checksum":2402166194}';
const CPU_V2_TYPENAME =
  '{"policyName":"static","defaultCpuSet":"0-1","entries":{"p":{"c":"2"}},"checksum":1144074675}';

const FILE = `/var/lib/kubelet/${CPU_MANAGER_STATE_FILE}`;

Deno.test("encodeCpuManagerCheckpoint writes the Go kubelet's bytes", () => {
  assert.equal(
    encodeCpuManagerCheckpoint({ policyName: "none", defaultCpuSet: "", entries: new Map() }),
    CPU_NONE,
  );
  assert.equal(
    encodeCpuManagerCheckpoint({
      policyName: "static",
      defaultCpuSet: "0,4-7",
      entries: new Map([
        ["pod-empty-c", new Map()],
        ["pod-b", new Map([["sidecar", "3"], ["ctr", "1-2"]])],
        ["pod-a", new Map([["ctr-ü", "8-11,16"]])],
      ]),
    }),
    CPU_STATIC,
  );
});

Deno.test("decodeCpuManagerCheckpoint reads the Go kubelet's V2 files, under either type name", () => {
  const cp = decodeCpuManagerCheckpoint(CPU_STATIC, FILE);
  assert.equal(cp.version, 2);
  assert.equal(cp.policyName, "static");
  assert.equal(cp.defaultCpuSet, "0,4-7");
  assert.deepEqual(cp.entries.get("pod-a"), new Map([["ctr-ü", "8-11,16"]]));
  assert.deepEqual(cp.entries.get("pod-empty-c"), new Map());
  assert.equal(encodeCpuManagerCheckpoint(cp), CPU_STATIC);
  assert.deepEqual(decodeCpuManagerCheckpoint(CPU_NONE, FILE).entries, new Map());
  const named = decodeCpuManagerCheckpoint(CPU_V2_TYPENAME, FILE);
  assert.deepEqual(named.entries, new Map([["p", new Map([["c", "2"]])]]));
  // A checksum of 0 is taken unverified, as upstream does.
  const zero = decodeCpuManagerCheckpoint(
    CPU_STATIC.replace(/"checksum":\d+/, '"checksum":0'),
    FILE,
  );
  assert.equal(zero.defaultCpuSet, "0,4-7");
});

Deno.test("decodeCpuManagerCheckpoint migrates V1 through the initial containers", () => {
  const refs = new Map([
    ["containerid-1", { podUID: "pod-1", containerName: "a" }],
    ["containerid-2", { podUID: "pod-1", containerName: "b" }],
  ]);
  const cp = decodeCpuManagerCheckpoint(CPU_V1, FILE, { containerRef: (id) => refs.get(id) });
  assert.equal(cp.version, 1);
  assert.equal(cp.defaultCpuSet, "0,3");
  assert.deepEqual(cp.entries, new Map([["pod-1", new Map([["a", "1"], ["b", "2"]])]]));
  assert.throws(
    () => decodeCpuManagerCheckpoint(CPU_V1, FILE),
    (e) =>
      e instanceof MalformedCheckpointError &&
      e.message ===
        `${FILE}: failed to migrate checkpoint from v1 to v2: containerID 'containerid-1' not ` +
          "found in initial containers list",
  );
  // A changed V1 file is corrupt as a V1 file.
  assert.throws(
    () => decodeCpuManagerCheckpoint(CPU_V1.replace('"1"', '"5"'), FILE),
    (e) => e instanceof CorruptCheckpointError && e.expected === 2402166194n,
  );
});

Deno.test("decodeCpuManagerCheckpoint says a changed V2 file is corrupted, naming the file", () => {
  assert.throws(
    () => decodeCpuManagerCheckpoint(CPU_STATIC.replace("1-2", "1-3"), FILE),
    (e) =>
      e instanceof CorruptCheckpointError && e.expected === 2288598262n &&
      e.message.startsWith(`${FILE}: checkpoint is corrupted`),
  );
  assert.throws(
    () => decodeCpuManagerCheckpoint('{"policyName":1}', FILE),
    (e) =>
      e instanceof MalformedCheckpointError &&
      e.message === `${FILE}: policyName: want a string, got number 1`,
  );
});
