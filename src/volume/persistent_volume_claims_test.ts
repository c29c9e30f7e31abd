import assert from "node:assert/strict";
import type { V1PersistentVolume, V1PersistentVolumeClaim, V1Pod } from "@kubernetes/client-node";
import { FakeKubeGetter } from "../testing/fake_kube_getter.ts";
import { createVolumeSpec, ephemeralClaimName } from "./persistent_volume_claims.ts";

function fakeGetter(objects: Record<string, unknown>): FakeKubeGetter {
  return new FakeKubeGetter(objects);
}

const pod: V1Pod = {
  metadata: { name: "web", namespace: "ns", uid: "pod-uid" },
  spec: { containers: [] },
};

function claim(
  name: string,
  extra: Partial<V1PersistentVolumeClaim> = {},
): V1PersistentVolumeClaim {
  return {
    metadata: { name, namespace: "ns", uid: `${name}-uid`, ...extra.metadata },
    spec: { volumeName: "pv-1", ...extra.spec },
    status: { phase: "Bound", ...extra.status },
  };
}

function pv(claimUid: string, mode?: string): V1PersistentVolume {
  return {
    metadata: { name: "pv-1" },
    spec: {
      csi: { driver: "d.example.com", volumeHandle: "h1" },
      claimRef: { uid: claimUid },
      ...(mode ? { volumeMode: mode } : {}),
    },
  };
}

const CLAIMS = "/api/v1/namespaces/ns/persistentvolumeclaims";
const PV = "/api/v1/persistentvolumes/pv-1";
const used = (mounts: string[], devices: string[] = []) => ({
  mounts: new Set(mounts),
  devices: new Set(devices),
});

Deno.test("createVolumeSpec resolves a bound claim to its PersistentVolume, named after it", async () => {
  const client = fakeGetter({ [`${CLAIMS}/c1`]: claim("c1"), [PV]: pv("c1-uid") });
  const volume = { name: "data", persistentVolumeClaim: { claimName: "c1", readOnly: true } };
  const spec = await createVolumeSpec(pod, volume, { client, ...used(["data"]) });
  assert.equal(spec.name, "pv-1");
  assert.equal(spec.readOnly, true);
  assert.equal(spec.persistentVolume?.spec?.csi?.volumeHandle, "h1");
  assert.equal(spec.volume, volume);
});

Deno.test("createVolumeSpec gives upstream's messages for claims that cannot be used yet", async () => {
  const volume = { name: "data", persistentVolumeClaim: { claimName: "c1" } };
  const cases: [Record<string, unknown>, string][] = [
    [
      {},
      'error processing PVC ns/c1: failed to fetch PVC from API server: persistentvolumeclaims "c1" not found',
    ],
    [
      { [`${CLAIMS}/c1`]: claim("c1", { status: { phase: "Pending" } }) },
      "error processing PVC ns/c1: PVC is not bound",
    ],
    [
      { [`${CLAIMS}/c1`]: claim("c1", { spec: { volumeName: "" } }) },
      "error processing PVC ns/c1: PVC has empty pvc.Spec.VolumeName",
    ],
    [
      { [`${CLAIMS}/c1`]: claim("c1", { metadata: { deletionTimestamp: new Date() } }) },
      "error processing PVC ns/c1: PVC is being deleted",
    ],
    [
      { [`${CLAIMS}/c1`]: claim("c1") },
      'error processing PVC ns/c1: failed to fetch PV pv-1 from API server: persistentvolumes "pv-1" not found',
    ],
    [
      { [`${CLAIMS}/c1`]: claim("c1"), [PV]: pv("other-uid") },
      "error processing PVC ns/c1: found PV object pv-1 but its pv.Spec.ClaimRef.UID other-uid does not point to claim.UID c1-uid",
    ],
    [
      { [`${CLAIMS}/c1`]: claim("c1"), [PV]: pv("c1-uid", "Block") },
      "volume data has volumeMode Block, but is specified in volumeMounts",
    ],
  ];
  for (const [objects, message] of cases) {
    await assert.rejects(
      createVolumeSpec(pod, volume, { client: fakeGetter(objects), ...used(["data"]) }),
      { message },
    );
  }
  // A claim being deleted but still protected is used until its pods are gone.
  const protectedClaim = claim("c1", {
    metadata: { deletionTimestamp: new Date(), finalizers: ["kubernetes.io/pvc-protection"] },
  });
  const client = fakeGetter({ [`${CLAIMS}/c1`]: protectedClaim, [PV]: pv("c1-uid") });
  assert.equal((await createVolumeSpec(pod, volume, { client, ...used(["data"]) })).name, "pv-1");
  // A Filesystem volume mapped as a device.
  await assert.rejects(
    createVolumeSpec(pod, volume, { client, ...used([], ["data"]) }),
    { message: "volume data has volumeMode Filesystem, but is specified in volumeDevices" },
  );
});

Deno.test("createVolumeSpec uses a generic ephemeral volume's claim only when the pod controls it", async () => {
  const volume = { name: "scratch", ephemeral: { volumeClaimTemplate: { spec: {} } } };
  assert.equal(ephemeralClaimName(pod, volume), "web-scratch");
  const owned = claim("web-scratch", {
    metadata: {
      ownerReferences: [{
        apiVersion: "v1",
        kind: "Pod",
        name: "web",
        uid: "pod-uid",
        controller: true,
      }],
    },
  });
  const ok = fakeGetter({ [`${CLAIMS}/web-scratch`]: owned, [PV]: pv("web-scratch-uid") });
  const spec = await createVolumeSpec(pod, volume, { client: ok, ...used(["scratch"]) });
  assert.equal(spec.name, "pv-1");
  assert.equal(spec.readOnly, false);

  const foreign = claim("web-scratch");
  const bad = fakeGetter({ [`${CLAIMS}/web-scratch`]: foreign, [PV]: pv("web-scratch-uid") });
  await assert.rejects(createVolumeSpec(pod, volume, { client: bad, ...used(["scratch"]) }), {
    message: "PVC ns/web-scratch was not created for pod ns/web (pod is not owner)",
  });
});

Deno.test("createVolumeSpec passes other volumes through under their own name", async () => {
  const volume = { name: "inline", csi: { driver: "d.example.com" } };
  const spec = await createVolumeSpec(pod, volume, { client: fakeGetter({}), ...used(["inline"]) });
  assert.deepEqual(spec, { name: "inline", volume, readOnly: false });
});
