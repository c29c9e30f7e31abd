import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Pod, V1Volume } from "@kubernetes/client-node";
import { IMAGE_PLUGIN_NAME, ImagePlugin } from "./image.ts";

const volume: V1Volume = { name: "data", image: { reference: "data:1", pullPolicy: "Always" } };
const pod: V1Pod = {
  metadata: { name: "p", namespace: "ns", uid: "uid-1" },
  spec: {
    containers: [{ name: "c", volumeMounts: [{ name: "data", mountPath: "/data" }] }],
    volumes: [volume],
  },
};

Deno.test("ImagePlugin takes image volumes only, under upstream's name", () => {
  const plugin = new ImagePlugin();
  assert.equal(plugin.name, IMAGE_PLUGIN_NAME);
  assert.equal(plugin.name, "kubernetes.io/image");
  assert.equal(plugin.requiresRemount, false);
  assert.equal(plugin.canSupport(volume), true);
  // An image source without a reference is still an image volume: the pull names the problem.
  assert.equal(plugin.canSupport({ name: "x", image: {} }), true);
  assert.equal(plugin.canSupport({ name: "x", emptyDir: {} }), false);
  assert.equal(plugin.canSupport({ name: "x" }), false);
});

Deno.test("ImagePlugin setUp is read-only with no host path and touches nothing on disk", async () => {
  const dir = await Deno.makeTempDir({ prefix: "image_volume_test_" });
  try {
    const plugin = new ImagePlugin();
    const volumeDir = join(dir, "volumes", "kubernetes.io~image", "data");
    const mounted = await plugin.setUp({ pod, volume, dir: volumeDir });
    assert.deepEqual(mounted, { hostPath: "", readOnly: true, selinuxRelabel: false });
    assert.deepEqual([...Deno.readDirSync(dir)], [], "no volume directory is made");
    await plugin.tearDown({ podUid: "uid-1", volumeName: "data", dir: volumeDir });
    assert.deepEqual([...Deno.readDirSync(dir)], []);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
