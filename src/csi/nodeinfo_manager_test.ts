import assert from "node:assert/strict";
import type { V1Node } from "@kubernetes/client-node";
import { KubeApiError } from "../client/kube_client.ts";
import { FakeClock } from "../util/clock.ts";
import { captureLogger, drive } from "../testing/cm_fixtures.ts";
import {
  ANNOTATION_KEY_NODE_ID,
  type CSINode,
  MIGRATED_PLUGINS,
  MIGRATED_PLUGINS_ANNOTATION,
  NodeInfoManager,
} from "./nodeinfo_manager.ts";

const NODE = "node-a";
const NODE_PATH = `/api/v1/nodes/${NODE}`;
const CSINODE_PATH = `/apis/storage.k8s.io/v1/csinodes/${NODE}`;

/** An apiserver of one Node and maybe its CSINode, recording each write. */
function fakeApi(node: V1Node) {
  let csiNode: CSINode | undefined;
  const writes: string[] = [];
  let failNext = 0;
  const notFound = (method: string, path: string) =>
    new KubeApiError(method, path, 404, "NotFound", "not found");
  const client = {
    get<T>(path: string): Promise<T> {
      if (failNext > 0) {
        failNext--;
        return Promise.reject(new KubeApiError("GET", path, 500, "InternalError", "boom"));
      }
      if (path === NODE_PATH) return Promise.resolve(structuredClone(node) as T);
      if (path === CSINODE_PATH) {
        return csiNode
          ? Promise.resolve(structuredClone(csiNode) as T)
          : Promise.reject(notFound("GET", path));
      }
      return Promise.reject(notFound("GET", path));
    },
    create<T>(path: string, body: T): Promise<T> {
      writes.push(`create ${path}`);
      csiNode = { ...(structuredClone(body) as CSINode) };
      csiNode.metadata.uid = "csinode-uid";
      return Promise.resolve(structuredClone(csiNode) as T);
    },
    update<T>(path: string, body: T): Promise<T> {
      writes.push(`update ${path}`);
      csiNode = structuredClone(body) as CSINode;
      return Promise.resolve(body);
    },
    delete<T>(path: string): Promise<T> {
      writes.push(`delete ${path}`);
      csiNode = undefined;
      return Promise.resolve({} as T);
    },
    patch<T>(path: string, body: unknown, type: string): Promise<T> {
      writes.push(`patch ${path} ${type} ${JSON.stringify(body)}`);
      const meta = (body as { metadata: Record<string, Record<string, string | null>> }).metadata;
      node.metadata ??= {};
      for (const field of ["labels", "annotations"] as const) {
        const m: Record<string, string> = { ...node.metadata[field] };
        for (const [k, v] of Object.entries(meta[field] ?? {})) {
          if (v === null) delete m[k];
          else m[k] = v;
        }
        node.metadata[field] = m;
      }
      return Promise.resolve(structuredClone(node) as T);
    },
  };
  return {
    client,
    writes,
    node,
    csiNode: () => csiNode,
    setCSINode(c: CSINode | undefined) {
      csiNode = c;
    },
    failGets(n: number) {
      failNext = n;
    },
  };
}

function manager(api: ReturnType<typeof fakeApi>) {
  const clock = new FakeClock(0);
  const { logger, lines } = captureLogger();
  const nim = new NodeInfoManager({
    client: api.client,
    nodeName: NODE,
    clock,
    logger,
    random: () => 0,
  });
  return { nim, clock, lines };
}

const node = (): V1Node => ({ metadata: { name: NODE, uid: "node-uid", labels: { a: "b" } } });

Deno.test("initializeCSINodeWithAnnotation makes the CSINode, owned by the Node, with the migrated plugins", async () => {
  const api = fakeApi(node());
  const { nim } = manager(api);
  await nim.initializeCSINodeWithAnnotation();
  assert.deepEqual(api.csiNode(), {
    apiVersion: "storage.k8s.io/v1",
    kind: "CSINode",
    metadata: {
      name: NODE,
      uid: "csinode-uid",
      annotations: { [MIGRATED_PLUGINS_ANNOTATION]: MIGRATED_PLUGINS.join(",") },
      ownerReferences: [{ apiVersion: "v1", kind: "Node", name: NODE, uid: "node-uid" }],
    },
    spec: { drivers: [] },
  });
  assert.equal(
    MIGRATED_PLUGINS.join(","),
    "kubernetes.io/aws-ebs,kubernetes.io/azure-disk,kubernetes.io/azure-file,kubernetes.io/cinder,kubernetes.io/gce-pd,kubernetes.io/portworx-volume,kubernetes.io/vsphere-volume",
  );
  // Again: nothing to write.
  await nim.initializeCSINodeWithAnnotation();
  assert.deepEqual(api.writes, [`create /apis/storage.k8s.io/v1/csinodes`]);
});

Deno.test("a CSINode of another Node (same name, old UID) is deleted, then made again", async () => {
  const api = fakeApi(node());
  api.setCSINode({
    metadata: {
      name: NODE,
      ownerReferences: [{ apiVersion: "v1", kind: "Node", name: NODE, uid: "old-uid" }],
    },
    spec: { drivers: [{ name: "stale.csi", nodeID: "x" }] },
  });
  const { nim, clock, lines } = manager(api);
  await drive(clock, nim.initializeCSINodeWithAnnotation(), 10);
  assert.deepEqual(api.writes, [
    `delete ${CSINODE_PATH}`,
    "create /apis/storage.k8s.io/v1/csinodes",
  ]);
  assert.deepEqual(api.csiNode()?.spec.drivers, []);
  assert.ok(
    lines.some((l) =>
      l.includes(
        `existing CSINode \\"${NODE}\\" is owned by different node (oldNodeID=\\"old-uid\\", newNodeID=\\"node-uid\\"), cleaning up...`,
      )
    ),
    lines.join("\n"),
  );
});

Deno.test("installCSIDriver sets the Node's nodeid annotation and topology labels, and the CSINode's driver", async () => {
  const api = fakeApi(node());
  const { nim } = manager(api);
  await nim.initializeCSINodeWithAnnotation();
  await nim.installCSIDriver("hostpath.csi.k8s.io", "node-a", 0, {
    "topology.hostpath.csi/node": "node-a",
  });
  await nim.installCSIDriver("b.csi", "id-b", 16, {});
  assert.equal(
    api.node.metadata?.annotations?.[ANNOTATION_KEY_NODE_ID],
    '{"b.csi":"id-b","hostpath.csi.k8s.io":"node-a"}',
  );
  assert.deepEqual(api.node.metadata?.labels, { a: "b", "topology.hostpath.csi/node": "node-a" });
  assert.deepEqual(api.csiNode()?.spec.drivers, [
    { name: "hostpath.csi.k8s.io", nodeID: "node-a", topologyKeys: ["topology.hostpath.csi/node"] },
    { name: "b.csi", nodeID: "id-b", topologyKeys: [], allocatable: { count: 16 } },
  ]);
  // The same again writes nothing.
  const before = api.writes.length;
  await nim.installCSIDriver("b.csi", "id-b", 16, {});
  assert.equal(api.writes.length, before);
  // The node patch goes to the status subresource, as upstream's PatchNodeStatus.
  assert.ok(api.writes.some((w) => w.startsWith(`patch ${NODE_PATH}/status strategic `)));

  await nim.uninstallCSIDriver("hostpath.csi.k8s.io");
  assert.deepEqual(api.csiNode()?.spec.drivers.map((d) => d.name), ["b.csi"]);
  assert.equal(api.node.metadata?.annotations?.[ANNOTATION_KEY_NODE_ID], '{"b.csi":"id-b"}');
  await nim.uninstallCSIDriver("b.csi");
  assert.equal(api.node.metadata?.annotations?.[ANNOTATION_KEY_NODE_ID], undefined);
  assert.deepEqual(api.csiNode()?.spec.drivers, []);
});

Deno.test("installCSIDriver refuses an empty node ID and a topology label another value holds", async () => {
  const api = fakeApi(node());
  const { nim, clock } = manager(api);
  await assert.rejects(
    nim.installCSIDriver("d", "", 0, {}),
    { message: "error adding CSI driver node info: driverNodeID must not be empty" },
  );
  await assert.rejects(
    drive(clock, nim.installCSIDriver("d", "id", 0, { a: "c" }), 10),
    (e: Error) =>
      e.message.startsWith(
        "error updating Node object with CSI driver node info: error updating node: timed out waiting for the condition; caused by: [",
      ) &&
      e.message.includes(
        'detected topology value collision: driver reported "a":"c" but existing label is "a":"b"',
      ),
  );
});

Deno.test("a failing apiserver is retried with upstream's backoff, then named", async () => {
  const api = fakeApi(node());
  const { nim, clock } = manager(api);
  // Three failures, the fourth try works.
  api.failGets(3);
  await drive(clock, nim.initializeCSINodeWithAnnotation(), 10);
  assert.equal(clock.now(), 10 + 50 + 250);
  api.failGets(8);
  await assert.rejects(
    drive(clock, nim.initializeCSINodeWithAnnotation(), 10),
    (e: Error) =>
      e.message.startsWith(
        "error updating CSINode annotation: timed out waiting for the condition; caused by: GET /api/v1/nodes/node-a: 500 InternalError: boom",
      ),
  );
});
