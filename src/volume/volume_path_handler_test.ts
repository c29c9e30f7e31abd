import assert from "node:assert/strict";
import { join } from "node:path";
import { FakeMounter } from "../testing/fake_mounter.ts";
import { mapBlockVolume, mappedPods, unmapBlockVolume } from "./volume_path_handler.ts";

/** A mounter and losetup that keep their state in memory and record each command. */
function fakes() {
  const mounter = new FakeMounter();
  const loops = new Map<string, string>();
  const log = mounter.log;
  const run = (cmd: string, args: readonly string[]) => {
    log.push(`${cmd} ${args.join(" ")}`);
    if (args[0] === "-j") {
      const dev = loops.get(args[1]!);
      return Promise.resolve(dev ? `${dev}: [2049]:12 (${args[1]})\n` : "");
    }
    if (args[0] === "-f") loops.set(args[1]!, `/dev/loop${loops.size}`);
    if (args[0] === "-d") { for (const [k, v] of loops) if (v === args[1]) loops.delete(k); }
    return Promise.resolve("");
  };
  return { mounter, run, log, mounts: mounter.mounts, loops };
}

Deno.test("mapBlockVolume bind-mounts, links and holds the device open; unmap undoes each step", async () => {
  const dir = await Deno.makeTempDir({ prefix: "volume-path-handler-" });
  try {
    const f = fakes();
    const paths = {
      devicePath: join(dir, "publish", "pv-1", "u1"),
      globalMapPath: join(dir, "pv-1", "dev"),
      podDeviceDir: join(dir, "pods", "u1", "volumeDevices", "kubernetes.io~csi"),
      linkName: "pv-1",
      podUid: "u1",
    };
    const bindFile = join(paths.globalMapPath, "u1");
    const o = { mounter: f.mounter, run: f.run };
    await mapBlockVolume(paths, o);
    // Idempotent: a second map changes nothing on the node.
    await mapBlockVolume(paths, o);
    assert.deepEqual(f.log, [
      `mount -o bind ${paths.devicePath} ${bindFile}`,
      `losetup -j ${bindFile}`,
      `losetup -f ${bindFile}`,
      `losetup -j ${bindFile}`,
    ]);
    assert.equal(await Deno.readLink(join(paths.podDeviceDir, "pv-1")), paths.devicePath);
    assert.deepEqual(await mappedPods(paths.globalMapPath), ["u1"]);

    f.log.length = 0;
    await unmapBlockVolume(paths, o);
    assert.deepEqual(f.log, [
      `losetup -j ${bindFile}`,
      "losetup -d /dev/loop0",
      `umount ${bindFile}`,
    ]);
    assert.deepEqual(await mappedPods(paths.globalMapPath), []);
    assert.equal(
      await Deno.lstat(join(paths.podDeviceDir, "pv-1")).then(() => true, () => false),
      false,
    );
    // Unmapping what is gone already is fine.
    await unmapBlockVolume(paths, o);
    assert.deepEqual([...f.mounts, ...f.loops.keys()], []);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
