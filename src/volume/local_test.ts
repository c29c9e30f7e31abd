import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1PersistentVolume, V1Pod } from "@kubernetes/client-node";
import { createLogger } from "../klog/klog.ts";
import { FakeMounter } from "../testing/fake_mounter.ts";
import { LOCAL_VOLUME_PLUGIN_NAME, LocalVolumePlugin } from "./local.ts";

const pod: V1Pod = {
  metadata: { name: "p", namespace: "ns", uid: "u1" },
  spec: { containers: [] },
};
const volume = { name: "data", persistentVolumeClaim: { claimName: "c" } };

function plugin(kind: "dir" | "device") {
  const mounter = new FakeMounter();
  const p = new LocalVolumePlugin({
    logger: createLogger({ write: () => {} }),
    stat: () => Promise.resolve({ isDirectory: kind === "dir", isFile: false }),
    mounter,
  });
  return { p, log: mounter.log };
}

const pv = (path: string): V1PersistentVolume => ({
  metadata: { name: "pv-l" },
  spec: { local: { path }, mountOptions: ["noatime"] },
});

Deno.test("LocalVolumePlugin bind-mounts a local PV's directory into the pod, once, and unmounts it", async () => {
  const root = await Deno.makeTempDir({ prefix: "local-volume-" });
  try {
    const { p, log } = plugin("dir");
    assert.equal(p.name, LOCAL_VOLUME_PLUGIN_NAME);
    assert.equal(p.canSupportPersistentVolume(pv("/mnt/disk")), true);
    assert.equal(p.canSupport({ name: "x", emptyDir: {} }), false);
    const dir = join(root, "pods", "u1", "volumes", "kubernetes.io~local-volume", "pv-l");
    const spec = { name: "pv-l", volume, persistentVolume: pv("/mnt/disk"), readOnly: true };
    assert.deepEqual(await p.setUp({ pod, volume, spec, dir }), {
      hostPath: dir,
      readOnly: true,
      selinuxRelabel: false,
    });
    await p.setUp({ pod, volume, spec, dir });
    assert.deepEqual(log, [`mount -o bind,ro,noatime /mnt/disk ${dir}`]);
    await p.tearDown({ podUid: "u1", volumeName: "pv-l", dir });
    assert.deepEqual(log.slice(1), [`umount ${dir}`]);
    assert.equal(await Deno.lstat(dir).then(() => true, () => false), false);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("LocalVolumePlugin refuses an empty path, '..', and a block device it cannot format yet", async () => {
  const dir = "/nonexistent/dir";
  const spec = (path: string) => ({
    name: "pv-l",
    volume,
    persistentVolume: pv(path),
    readOnly: false,
  });
  await assert.rejects(plugin("dir").p.setUp({ pod, volume, spec: spec(""), dir }), {
    message: 'LocalVolume volume "pv-l" path is empty',
  });
  await assert.rejects(plugin("dir").p.setUp({ pod, volume, spec: spec("/mnt/../etc"), dir }), {
    message: "invalid path: /mnt/../etc must not contain '..'",
  });
  await assert.rejects(plugin("device").p.setUp({ pod, volume, spec: spec("/dev/sdb"), dir }), {
    message:
      'LocalVolume volume "pv-l": /dev/sdb is not a directory: local volumes on block devices are not supported yet by this kubelet',
  });
});
