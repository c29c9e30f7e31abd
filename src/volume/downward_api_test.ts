import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Pod, V1Volume } from "@kubernetes/client-node";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import {
  aggregateMessage,
  DOWNWARD_API_PLUGIN_NAME,
  DownwardApiPlugin,
  makeDownwardApiPayload,
} from "./downward_api.ts";
import { podVolumeDir, VolumeSourceError } from "./plugin.ts";

const decode = (b: Uint8Array | undefined) => new TextDecoder().decode(b);

function makePod(labels: Record<string, string>): V1Pod {
  return {
    metadata: {
      name: "web",
      namespace: "shop",
      uid: "0b7c-11",
      labels,
      annotations: { note: 'a "quoted"\nvalue' },
    },
    spec: {
      containers: [{
        name: "main",
        resources: { requests: { cpu: "250m" }, limits: { memory: "128Mi" } },
      }],
    },
  };
}

const volume: V1Volume = {
  name: "podinfo",
  downwardAPI: {
    defaultMode: 0o644,
    items: [
      { path: "labels", fieldRef: { apiVersion: "v1", fieldPath: "metadata.labels" } },
      { path: "annotations", fieldRef: { fieldPath: "metadata.annotations" } },
      { path: "meta/./name", mode: 0o400, fieldRef: { fieldPath: "metadata.name" } },
      {
        path: "cpu_limit",
        resourceFieldRef: { containerName: "main", resource: "limits.cpu", divisor: "1m" },
      },
    ],
  },
};

const allocatable = () => ({ cpu: "2", memory: "4Gi" });

Deno.test("makeDownwardApiPayload renders each item with its mode", () => {
  const items = volume.downwardAPI?.items ?? [];
  const payload = makeDownwardApiPayload(
    [...items, { path: "empty" }],
    makePod({ tier: "front", app: "web" }),
    0o640,
    allocatable,
  );
  assert.deepEqual([...payload.keys()], [
    "labels",
    "annotations",
    "meta/name",
    "cpu_limit",
    "empty",
  ]);
  assert.equal(decode(payload.get("labels")?.data), 'app="web"\ntier="front"');
  assert.equal(decode(payload.get("annotations")?.data), 'note="a \\"quoted\\"\\nvalue"');
  assert.equal(decode(payload.get("meta/name")?.data), "web");
  assert.equal(payload.get("meta/name")?.mode, 0o400);
  assert.equal(payload.get("labels")?.mode, 0o640);
  assert.equal(decode(payload.get("cpu_limit")?.data), "2000"); // node allocatable, in millicores
  assert.equal(decode(payload.get("empty")?.data), "");
});

Deno.test("makeDownwardApiPayload aggregates every failure", () => {
  const pod = makePod({});
  assert.throws(
    () =>
      makeDownwardApiPayload(
        [
          { path: "a", fieldRef: { fieldPath: "spec.nodeName" } },
          { path: "b", fieldRef: { fieldPath: "metadata.name" } },
          { path: "c", fieldRef: { fieldPath: "spec.nodeName" } },
          { path: "d", resourceFieldRef: { containerName: "nope", resource: "limits.cpu" } },
        ],
        pod,
        0o644,
        allocatable,
      ),
    new VolumeSourceError("[unsupported fieldPath: spec.nodeName, container nope not found]"),
  );
  assert.throws(
    () =>
      makeDownwardApiPayload(
        [{ path: "d", resourceFieldRef: { containerName: "main", resource: "limits.cpu" } }],
        pod,
        0o644,
        undefined,
      ),
    new VolumeSourceError(
      "error retrieving node: the node's allocatable resources are not known yet",
    ),
  );
  assert.equal(aggregateMessage([new Error("x")]), "x");
});

Deno.test("DownwardApiPlugin supports downwardAPI volumes only", () => {
  const plugin = new DownwardApiPlugin();
  assert.equal(plugin.name, DOWNWARD_API_PLUGIN_NAME);
  assert.equal(plugin.name, "kubernetes.io/downward-api");
  assert.equal(plugin.requiresRemount, true);
  assert.equal(plugin.canSupport(volume), true);
  assert.equal(plugin.canSupport({ name: "x", emptyDir: {} }), false);
});

Deno.test("DownwardApiPlugin writes the files and rewrites them after a relabel", async () => {
  const root = await Deno.makeTempDir();
  try {
    const clock = new FakeClock(Date.UTC(2026, 0, 1));
    const plugin = new DownwardApiPlugin({
      logger: createLogger({ write: () => {} }),
      clock,
      nodeAllocatable: allocatable,
    });
    const dir = podVolumeDir(root, "0b7c-11", DOWNWARD_API_PLUGIN_NAME, "podinfo");
    const mounted = await plugin.setUp({ pod: makePod({ tier: "front" }), volume, dir });
    assert.deepEqual(mounted, { hostPath: dir, readOnly: true, selinuxRelabel: true });
    assert.equal(await Deno.readTextFile(join(dir, "labels")), 'tier="front"');
    assert.equal(await Deno.readTextFile(join(dir, "meta/name")), "web");
    assert.equal(await Deno.readTextFile(join(dir, "cpu_limit")), "2000");
    assert.equal((await Deno.stat(join(dir, "labels"))).mode! & 0o777, 0o644);
    assert.equal((await Deno.stat(join(dir, "meta/name"))).mode! & 0o777, 0o400);
    assert.equal((await Deno.lstat(join(dir, "labels"))).isSymlink, true);

    clock.step(1000);
    await plugin.setUp({ pod: makePod({ tier: "back", app: "web" }), volume, dir });
    assert.equal(await Deno.readTextFile(join(dir, "labels")), 'app="web"\ntier="back"');

    await plugin.tearDown({ podUid: "0b7c-11", volumeName: "podinfo", dir });
    await assert.rejects(Deno.lstat(dir), Deno.errors.NotFound);
    await plugin.tearDown({ podUid: "0b7c-11", volumeName: "podinfo", dir }); // idempotent
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("DownwardApiPlugin fails before creating the directory on a bad item", async () => {
  const root = await Deno.makeTempDir();
  try {
    const plugin = new DownwardApiPlugin({ logger: createLogger({ write: () => {} }) });
    const dir = join(root, "podinfo");
    const bad: V1Volume = {
      name: "podinfo",
      downwardAPI: { items: [{ path: "x", fieldRef: { fieldPath: "status.podIP" } }] },
    };
    await assert.rejects(
      plugin.setUp({ pod: makePod({}), volume: bad, dir }),
      new VolumeSourceError("unsupported fieldPath: status.podIP"),
    );
    await assert.rejects(Deno.lstat(dir), Deno.errors.NotFound);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
