import assert from "node:assert/strict";
import type { V1PersistentVolumeClaim, V1Pod } from "@kubernetes/client-node";
import { FakeKubeGetter } from "../testing/fake_kube_getter.ts";
import { expandInUseVolume } from "./node_expander.ts";
import {
  OperationNotSupportedError,
  UncertainOperationError,
  type VolumePlugin,
  type VolumeSpec,
} from "./plugin.ts";

const GI = 2 ** 30;
const pod: V1Pod = { metadata: { name: "db-0", namespace: "shop", uid: "u1" } };
const STATUS = "/api/v1/namespaces/shop/persistentvolumeclaims/data/status";

function spec(claimStatus: V1PersistentVolumeClaim["status"], readOnly = false): VolumeSpec {
  return {
    name: "pv-1",
    volume: { name: "data", persistentVolumeClaim: { claimName: "data" } },
    persistentVolume: { metadata: { name: "pv-1" }, spec: { capacity: { storage: "2Gi" } } },
    readOnly,
    claim: {
      metadata: { name: "data", namespace: "shop", uid: "c1" },
      spec: { accessModes: ["ReadWriteOnce"] },
      status: claimStatus,
    },
  };
}

function plugin(fail?: Error) {
  const calls: string[] = [];
  const p: VolumePlugin = {
    name: "kubernetes.io/csi",
    requiresRemount: false,
    canSupport: () => false,
    setUp: () => Promise.reject(new Error("unused")),
    tearDown: () => Promise.resolve(),
    nodeExpand: (s, dir, size) => {
      calls.push(`${s.name} ${dir} ${size}`);
      return fail ? Promise.reject(fail) : Promise.resolve();
    },
  };
  return { p, calls };
}

function run(s: VolumeSpec, p: VolumePlugin, client: FakeKubeGetter, events: string[]) {
  return expandInUseVolume({
    client,
    recorder: {
      event: (ref, type, reason, msg) => events.push(`${ref.kind} ${type} ${reason} ${msg}`),
    },
    nodeName: "node-a",
    pod,
    spec: s,
    plugin: p,
    dir: "/pods/u1/volumes/kubernetes.io~csi/pv-1",
    currentBytes: GI,
  });
}

Deno.test("expandInUseVolume grows a NodeResizePending claim's file system and finishes the claim", async () => {
  const client = new FakeKubeGetter();
  const events: string[] = [];
  const { p, calls } = plugin();
  const s = spec({
    capacity: { storage: "1Gi" },
    allocatedResources: { storage: "2Gi" },
    allocatedResourceStatuses: { storage: "NodeResizePending" },
    conditions: [{ type: "FileSystemResizePending", status: "True" }, {
      type: "Other",
      status: "True",
    }],
  });
  assert.equal(await run(s, p, client, events), 2 * GI);
  assert.deepEqual(calls, [`pv-1 /pods/u1/volumes/kubernetes.io~csi/pv-1 ${2 * GI}`]);
  assert.deepEqual(client.patches, [
    {
      path: STATUS,
      type: "strategic",
      body: { status: { allocatedResourceStatuses: { storage: "NodeResizeInProgress" } } },
    },
    {
      path: STATUS,
      type: "strategic",
      body: {
        status: {
          capacity: { storage: "2Gi" },
          allocatedResourceStatuses: { storage: null },
          conditions: [{ type: "FileSystemResizePending", $patch: "delete" }],
        },
      },
    },
  ]);
  const ok = 'MountVolume.NodeExpandVolume succeeded for volume "pv-1" node-a';
  assert.deepEqual(events, [
    `Pod Normal FileSystemResizeSuccess ${ok}`,
    `PersistentVolumeClaim Normal FileSystemResizeSuccess ${ok}`,
  ]);
});

Deno.test("expandInUseVolume waits while the resizer has not asked the node, and does nothing when the PV did not grow", async () => {
  const client = new FakeKubeGetter();
  const events: string[] = [];
  const { p, calls } = plugin();
  // The controller side is still resizing.
  const pending = spec({
    capacity: { storage: "1Gi" },
    allocatedResources: { storage: "2Gi" },
    allocatedResourceStatuses: { storage: "ControllerResizeInProgress" },
  });
  assert.equal(await run(pending, p, client, events), GI);
  // The claim is already at the new size (no node expansion was needed).
  const done = spec({ capacity: { storage: "2Gi" }, allocatedResources: { storage: "2Gi" } });
  assert.equal(await run(done, p, client, events), 2 * GI);
  const same = { ...done, persistentVolume: { spec: { capacity: { storage: "1Gi" } } } };
  assert.equal(await run(same, p, client, events), GI);
  assert.deepEqual([calls, client.patches, events], [[], [], []]);
});

Deno.test("expandInUseVolume reports failures: final ones as the claim's NodeResizeError, uncertain ones only as events", async () => {
  const status = {
    capacity: { storage: "1Gi" },
    allocatedResources: { storage: "2Gi" },
    allocatedResourceStatuses: { storage: "NodeResizePending" },
  };
  for (
    const [err, condition] of [[new Error("disk full"), true], [
      new UncertainOperationError("timeout"),
      false,
    ]] as const
  ) {
    const client = new FakeKubeGetter();
    const events: string[] = [];
    await assert.rejects(run(spec(status), plugin(err).p, client, events), {
      message: `NodeExpandVolume.NodeExpandVolume failed for volume "pv-1" : ${err.message}`,
    });
    assert.deepEqual(events, [
      `Pod Warning VolumeResizeFailed NodeExpandVolume.NodeExpandVolume failed for volume "pv-1" : ${err.message}`,
    ]);
    const last = client.patches.at(-1)?.body as {
      status: { conditions?: { type: string; message: string }[] };
    };
    assert.equal(client.patches.length, condition ? 2 : 1);
    if (condition) {
      assert.equal(last.status.conditions?.[0]?.type, "NodeResizeError");
      assert.equal(last.status.conditions?.[0]?.message, "failed to expand pvc with disk full");
    }
  }
  // A driver that needs nothing from the node, for a claim already at its size.
  const rwx = spec({ capacity: { storage: "2Gi" } });
  rwx.claim!.spec = { accessModes: ["ReadWriteMany"] };
  const events: string[] = [];
  assert.equal(
    await run(rwx, plugin(new OperationNotSupportedError("no")).p, new FakeKubeGetter(), events),
    2 * GI,
  );
  assert.deepEqual(events, []);
});

Deno.test("expandInUseVolume does not grow a read-only volume", async () => {
  const events: string[] = [];
  const { p, calls } = plugin();
  const s = spec({
    capacity: { storage: "1Gi" },
    allocatedResourceStatuses: { storage: "NodeResizePending" },
  }, true);
  assert.equal(await run(s, p, new FakeKubeGetter(), events), 2 * GI);
  assert.deepEqual(calls, []);
  const msg =
    'MountVolume.NodeExpandVolume failed for volume "pv-1" requested read-only file system';
  assert.deepEqual(events, [
    `Pod Warning FileSystemResizeFailed ${msg}`,
    `PersistentVolumeClaim Warning FileSystemResizeFailed ${msg}`,
  ]);
});
