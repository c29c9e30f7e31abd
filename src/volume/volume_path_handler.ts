/**
 * @module
 * The host paths of a pod's block volume (upstream's volumepathhandler): the device a CSI driver
 * published is bind-mounted onto `<global map path>/<pod UID>` (one file per pod: the node's
 * record of who maps it), linked from the pod's `volumeDevices/<plugin>/<name>` (what the
 * container runtime is given), and held open by a loop device over the bind mount, so that the
 * device cannot silently go and another take its name while a container uses it. Unmapping
 * undoes each step; every step is idempotent. Uses mount(8), umount(8) and losetup(8).
 * Corresponds to upstream `pkg/volume/util/volumepathhandler` and `pkg/volume/util/util.go`
 * (MapBlockVolume, UnmapBlockVolume).
 */

import { join } from "node:path";
import { type CommandRunner, type Mounter, runCommand } from "../util/mount.ts";
import { errorText } from "../util/errors.ts";
import { makeSymlink } from "../privilege/launcher_calls.ts";

/** What {@link mapBlockVolume} and {@link unmapBlockVolume} need. */
export interface BlockPathOptions {
  readonly mounter: Pick<Mounter, "mount" | "unmount" | "mountAt">;
  /** Runs losetup. @default {@link runCommand} */
  readonly run?: CommandRunner;
  readonly signal?: AbortSignal;
}

/** Where one pod's block volume is mapped. */
export interface BlockMapPaths {
  /** The device the driver published (a device node, or a file bind-mounted over one). */
  readonly devicePath: string;
  /** The node's map directory of the volume: `<global map path>/<pod UID>` is bind-mounted. */
  readonly globalMapPath: string;
  /** The pod's `volumeDevices/<escaped plugin>` directory. */
  readonly podDeviceDir: string;
  /** The link's name in it: the volume's spec name. */
  readonly linkName: string;
  readonly podUid: string;
}

/** upstream MapBlockVolume: bind mount, link, loop device. */
export async function mapBlockVolume(p: BlockMapPaths, o: BlockPathOptions): Promise<void> {
  const bindFile = join(p.globalMapPath, p.podUid);
  await Deno.mkdir(p.globalMapPath, { recursive: true, mode: 0o750 });
  if (!(await o.mounter.mountAt(bindFile))) {
    await Deno.writeFile(bindFile, new Uint8Array(), { mode: 0o750 });
    try {
      await o.mounter.mount(p.devicePath, bindFile, "", ["bind"], o.signal);
    } catch (e) {
      throw new Error(
        `blkUtil.MapDevice failed. devicePath: ${p.devicePath}, globalMapPath:${p.globalMapPath}, podUID: ${p.podUid}, bindMount: true: ${
          errorText(e)
        }`,
      );
    }
  }
  await Deno.mkdir(p.podDeviceDir, { recursive: true, mode: 0o750 });
  const link = join(p.podDeviceDir, p.linkName);
  await Deno.remove(link).catch(ignoreNotFound);
  await makeSymlink(p.devicePath, link);
  // Held open by a loop device, as upstream's AttachFileDevice.
  if ((await loopDeviceOf(bindFile, o)) === undefined) {
    await (o.run ?? runCommand)("losetup", ["-f", bindFile], o.signal).catch((e) => {
      throw new Error(`makeLoopDevice failed for path ${bindFile}: ${errorText(e)}`);
    });
  }
}

/** upstream UnmapBlockVolume: the link, the loop device, then the bind mount. */
export async function unmapBlockVolume(
  p: Omit<BlockMapPaths, "devicePath">,
  o: BlockPathOptions,
): Promise<void> {
  await Deno.remove(join(p.podDeviceDir, p.linkName)).catch(ignoreNotFound);
  const bindFile = join(p.globalMapPath, p.podUid);
  const loop = await loopDeviceOf(bindFile, o);
  if (loop) await (o.run ?? runCommand)("losetup", ["-d", loop], o.signal);
  if (await o.mounter.mountAt(bindFile)) await o.mounter.unmount(bindFile, o.signal);
  await Deno.remove(bindFile).catch(ignoreNotFound);
}

/** The pods whose map files are in `globalMapPath` (each pod that maps the volume). */
export async function mappedPods(globalMapPath: string): Promise<string[]> {
  const out: string[] = [];
  try {
    for await (const e of Deno.readDir(globalMapPath)) out.push(e.name);
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
  return out.sort();
}

/** The loop device over `path` (`losetup -j`), undefined when there is none. */
async function loopDeviceOf(path: string, o: BlockPathOptions): Promise<string | undefined> {
  let out: string;
  try {
    out = await (o.run ?? runCommand)("losetup", ["-j", path], o.signal);
  } catch (e) {
    throw new Error(`GetLoopDevice failed for path ${path}: ${errorText(e)}`);
  }
  // "/dev/loop3: [2049]:1234 (/path)"
  const first = out.split("\n").find((l) => l.includes(":"));
  return first?.slice(0, first.indexOf(":")) || undefined;
}

function ignoreNotFound(e: unknown): void {
  if (!(e instanceof Deno.errors.NotFound)) throw e;
}
