import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Pod } from "@kubernetes/client-node";
import { Mounter } from "../util/mount.ts";
import { FakeMounter } from "../testing/fake_mounter.ts";
import { NFS_PLUGIN_NAME, NfsPlugin } from "./nfs.ts";

const pod: V1Pod = {
  metadata: { name: "p", namespace: "ns", uid: "u1" },
  spec: { containers: [] },
};

Deno.test("NfsPlugin mounts a pod's nfs volume and a PV's, read-only as asked, and unmounts them", async () => {
  const root = await Deno.makeTempDir({ prefix: "nfs-" });
  try {
    const f = new FakeMounter();
    const p = new NfsPlugin({ mounter: f });
    assert.equal(p.name, NFS_PLUGIN_NAME);
    const inline = {
      name: "share",
      nfs: { server: "10.0.0.9", path: "/exports/a", readOnly: true },
    };
    assert.equal(p.canSupport(inline), true);
    const dir = join(root, "inline");
    assert.deepEqual(await p.setUp({ pod, volume: inline, dir }), {
      hostPath: dir,
      readOnly: true,
      selinuxRelabel: false,
    });
    const pv = {
      metadata: { name: "pv-n" },
      spec: { nfs: { server: "fd00::9", path: "/exports/b" }, mountOptions: ["nfsvers=4.1"] },
    };
    assert.equal(p.canSupportPersistentVolume(pv), true);
    const volume = { name: "data", persistentVolumeClaim: { claimName: "c" } };
    const pvDir = join(root, "pv");
    await p.setUp({
      pod,
      volume,
      spec: { name: "pv-n", volume, persistentVolume: pv, readOnly: false },
      dir: pvDir,
    });
    // Set up again: already mounted, nothing more.
    await p.setUp({
      pod,
      volume,
      spec: { name: "pv-n", volume, persistentVolume: pv, readOnly: false },
      dir: pvDir,
    });
    assert.deepEqual(f.log, [
      `mount -t nfs -o ro 10.0.0.9:/exports/a ${dir}`,
      `mount -t nfs -o nfsvers=4.1 [fd00::9]:/exports/b ${pvDir}`,
    ]);
    await p.tearDown({ podUid: "u1", volumeName: "pv-n", dir: pvDir });
    assert.equal(f.log.at(-1), `umount ${pvDir}`);
    assert.equal(await Deno.lstat(pvDir).then(() => true, () => false), false);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("NfsPlugin: a failed mount leaves no dir and says what mount said", async () => {
  const root = await Deno.makeTempDir({ prefix: "nfs-" });
  try {
    // mount(8) itself, with a mount helper that fails as a node without mount.nfs does.
    const mounter = new Mounter({
      run: (cmd, args) =>
        Promise.reject(
          new Error(
            `mount failed: exit status 32\nMounting command: ${cmd}\nMounting arguments: ${
              args.join(" ")
            }\nOutput: mount: bad option; for several filesystems (e.g. nfs, cifs) you might need a /sbin/mount.<type> helper program.`,
          ),
        ),
      readMountInfo: () => Promise.resolve(""),
    });
    const p = new NfsPlugin({ mounter });
    const dir = join(root, "share");
    await assert.rejects(
      p.setUp({ pod, volume: { name: "share", nfs: { server: "10.0.0.9", path: "/x" } }, dir }),
      { message: /Mounting arguments: -t nfs 10\.0\.0\.9:\/x .*helper program\.$/s },
    );
    assert.equal(await Deno.lstat(dir).then(() => true, () => false), false);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
