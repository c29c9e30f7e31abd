import assert from "node:assert/strict";
import { CorruptCheckpointError } from "../checkpointmanager/errors.ts";
import { type ClaimInfoState, decodeDraCheckpoint, encodeDraCheckpoint } from "./dra_state.ts";

// Files as upstream's state/checkpointer_test.go (v1.36.3) has them, checksums included.
const ONE_CLAIM =
  `{"Data":"{\\"kind\\":\\"DRACheckpoint\\",\\"apiVersion\\":\\"checkpoint.dra.kubelet.k8s.io/v1\\",\\"ClaimInfoStateList\\":[{\\"ClaimUID\\":\\"067798be-454e-4be4-9047-1aa06aea63f7\\",\\"ClaimName\\":\\"example\\",\\"Namespace\\":\\"default\\",\\"PodUIDs\\":{\\"139cdb46-f989-4f17-9561-ca10cfb509a6\\":{}},\\"DriverState\\":{\\"test-driver.cdi.k8s.io\\":{\\"Devices\\":[{\\"PoolName\\":\\"worker-1\\",\\"DeviceName\\":\\"dev-1\\",\\"ShareID\\":null,\\"RequestNames\\":[\\"test request\\"],\\"CDIDeviceIDs\\":[\\"example.com/example=cdi-example\\"]}]}}}]}","Checksum":2570581864}`;
const SHARED =
  `{"Data":"{\\"kind\\":\\"DRACheckpoint\\",\\"apiVersion\\":\\"checkpoint.dra.kubelet.k8s.io/v1\\",\\"ClaimInfoStateList\\":[{\\"ClaimUID\\":\\"067798be-454e-4be4-9047-1aa06aea63f7\\",\\"ClaimName\\":\\"example\\",\\"Namespace\\":\\"default\\",\\"PodUIDs\\":{\\"139cdb46-f989-4f17-9561-ca10cfb509a6\\":{}},\\"DriverState\\":{\\"test-driver.cdi.k8s.io\\":{\\"Devices\\":[{\\"PoolName\\":\\"worker-1\\",\\"DeviceName\\":\\"dev-1\\",\\"ShareID\\":\\"aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa\\",\\"RequestNames\\":[\\"test request\\"],\\"CDIDeviceIDs\\":[\\"example.com/example=cdi-example\\"]}]}}}]}","Checksum":736302156}`;
const V0 =
  `{"Data":"{\\"kind\\":\\"DRACheckpoint\\",\\"apiVersion\\":\\"checkpoint.dra.kubelet.k8s.io/v0\\",\\"ClaimInfoStateList\\":[{\\"ClaimUID\\":\\"067798be-454e-4be4-9047-1aa06aea63f7\\",\\"ClaimName\\":\\"example\\",\\"Namespace\\":\\"default\\",\\"PodUIDs\\":{\\"139cdb46-f989-4f17-9561-ca10cfb509a6\\":{}},\\"DriverState\\":{\\"test-driver.cdi.k8s.io\\":{\\"Devices\\":[{\\"PoolName\\":\\"worker-1\\",\\"DeviceName\\":\\"dev-1\\",\\"CDIDeviceIDs\\":[\\"example.com/example=cdi-example\\"]}]}}}]}","Checksum":1284376732}`;

function claim(shareId: string | null = null): ClaimInfoState {
  return {
    claimUid: "067798be-454e-4be4-9047-1aa06aea63f7",
    claimName: "example",
    namespace: "default",
    podUids: new Set(["139cdb46-f989-4f17-9561-ca10cfb509a6"]),
    driverState: new Map([["test-driver.cdi.k8s.io", [{
      poolName: "worker-1",
      deviceName: "dev-1",
      shareId,
      requestNames: ["test request"],
      cdiDeviceIds: ["example.com/example=cdi-example"],
    }]]]),
  };
}

Deno.test("encodeDraCheckpoint writes upstream's file byte for byte", () => {
  assert.equal(encodeDraCheckpoint([claim()]), ONE_CLAIM);
  assert.equal(encodeDraCheckpoint([claim("aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa")]), SHARED);
  // No claims at all (upstream GetOrCreate's first file) and an empty cache.
  assert.match(encodeDraCheckpoint(null), /\\"ClaimInfoStateList\\":null\}"/);
  assert.match(encodeDraCheckpoint([]), /\\"ClaimInfoStateList\\":\[\]\}"/);
});

Deno.test("decodeDraCheckpoint reads upstream's files, older versions and missing fields too", () => {
  assert.deepEqual(decodeDraCheckpoint(ONE_CLAIM), [claim()]);
  assert.deepEqual(decodeDraCheckpoint(SHARED), [claim("aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa")]);
  const [old] = decodeDraCheckpoint(V0);
  assert.deepEqual(old!.driverState.get("test-driver.cdi.k8s.io")?.[0]?.requestNames, []);
  assert.deepEqual(decodeDraCheckpoint(encodeDraCheckpoint(null)), []);
});

Deno.test("decodeDraCheckpoint rejects a file whose checksum does not match its Data", () => {
  const changed = ONE_CLAIM.replace("dev-1", "dev-2");
  assert.throws(
    () => decodeDraCheckpoint(changed, "/var/lib/kubelet/dra_manager_state"),
    (e: unknown) =>
      e instanceof CorruptCheckpointError && e.expected === 2570581864n &&
      e.file === "/var/lib/kubelet/dra_manager_state",
  );
});
