/**
 * @module
 * CSI block volumes (a claim of volumeMode Block that containers list in `volumeDevices`). Under
 * `<root>/plugins/kubernetes.io/csi/volumeDevices`: NodeStageVolume once per node at
 * `staging/<pv>` (a driver with STAGE_UNSTAGE_VOLUME), NodePublishVolume for each pod at
 * `publish/<pv>/<pod UID>`, `<pv>/data/vol_data.json` saying what the volume is, and
 * `<pv>/dev/<pod UID>` where the published device is bind-mounted for the pod
 * (`volume/volume_path_handler.ts`, which also links it from the pod's
 * `volumeDevices/kubernetes.io~csi/<pv>` and holds it open with a loop device). Unmapping a pod
 * undoes its part and NodeUnpublishVolume; once no pod maps the volume, NodeUnstageVolume and the
 * volume's files go.
 * Corresponds to upstream `pkg/volume/csi/csi_block.go` (SetUpDevice, MapPodDevice,
 * UnmapPodDevice, TearDownDevice) and `csi_plugin.go` (NewBlockVolumeMapper).
 */

import { dirname, join } from "node:path";
import type { V1CSIDriver, V1Pod } from "@kubernetes/client-node";
import { NodeServiceCapability_RPC_Type as Cap } from "../../proto/csi/v1/csi.ts";
import type { CommandRunner, Mounter } from "../util/mount.ts";
import { errorText } from "../util/errors.ts";
import type { Logger } from "../klog/klog.ts";
import type { MountedVolume, VolumeSpec } from "../volume/plugin.ts";
import { mapBlockVolume, mappedPods, unmapBlockVolume } from "../volume/volume_path_handler.ts";
import { type CsiClient, FS_TYPE_BLOCK } from "./csi_client.ts";
import { CSI_PLUGIN_NAME } from "./csi_plugin.ts";

/** What the block mapper takes from the CSI plugin. */
export interface CsiBlockHost {
  readonly rootDirectory: string;
  readonly nodeName: string;
  readonly mounter: Pick<Mounter, "mount" | "unmount" | "mountAt">;
  /** Runs losetup. @default runCommand */
  readonly run?: CommandRunner;
  readonly logger: Logger;
  client(driver: string): CsiClient;
  csiDriver(driver: string, signal?: AbortSignal): Promise<V1CSIDriver | undefined>;
  /** The VolumeAttachment's metadata of an attachable volume, undefined for another. */
  publishContext(
    driver: string,
    handle: string,
    signal?: AbortSignal,
  ): Promise<Record<string, string> | undefined>;
  secret(
    ref: { name?: string; namespace?: string },
    field: string,
    signal?: AbortSignal,
  ): Promise<Record<string, string>>;
  podInfo(pod: V1Pod): Record<string, string>;
  attachmentName(handle: string, driver: string): string;
}

function log(msg: string): string {
  return `${CSI_PLUGIN_NAME}: ${msg}`;
}

/** `<root>/plugins/kubernetes.io/csi/volumeDevices` (upstream GetVolumeDevicePluginDir). */
export function volumeDevicesDir(rootDirectory: string): string {
  return join(rootDirectory, "plugins", CSI_PLUGIN_NAME, "volumeDevices");
}

/** The paths of one block volume. */
export function blockPaths(rootDirectory: string, specName: string, podUid: string) {
  const base = volumeDevicesDir(rootDirectory);
  const volumeDir = join(base, specName.replaceAll("/", "~"));
  return {
    staging: join(base, "staging", specName),
    publishDir: join(base, "publish", specName),
    publish: join(base, "publish", specName, podUid),
    volumeDir,
    data: join(volumeDir, "data"),
    globalMap: join(volumeDir, "dev"),
  };
}

/** upstream NewBlockVolumeMapper, SetUpDevice, MapPodDevice and MapBlockVolume. */
export async function mapCsiBlock(
  host: CsiBlockHost,
  o: {
    pod: V1Pod;
    spec: VolumeSpec;
    /** The pod's link: `<pods>/<uid>/volumeDevices/kubernetes.io~csi/<pv>`. */
    dir: string;
    staged: Set<string>;
    signal?: AbortSignal;
  },
): Promise<MountedVolume> {
  const { pod, spec, signal } = o;
  const source = spec.persistentVolume?.spec?.csi;
  if (!source) {
    throw new Error(
      log(
        "blockMapper.MapPodDevice failed to get CSI persistent source: not a CSI PersistentVolume",
      ),
    );
  }
  const uid = pod.metadata?.uid ?? "";
  const paths = blockPaths(host.rootDirectory, spec.name, uid);
  using client = host.client(source.driver);
  const accessMode = spec.persistentVolume?.spec?.accessModes?.[0] ?? "ReadWriteOnce";
  const publishContext = await host.publishContext(source.driver, source.volumeHandle, signal);
  await Deno.mkdir(paths.data, { recursive: true, mode: 0o750 });
  await Deno.writeTextFile(
    join(paths.data, "vol_data.json"),
    JSON.stringify({
      specVolID: spec.name,
      volumeHandle: source.volumeHandle,
      driverName: source.driver,
      nodeName: host.nodeName,
      attachmentID: host.attachmentName(source.volumeHandle, source.driver),
    }),
  );
  const caps = await client.nodeCapabilities(signal);
  if (caps.has(Cap.STAGE_UNSTAGE_VOLUME) && !o.staged.has(paths.staging)) {
    const secrets = source.nodeStageSecretRef
      ? await host.secret(source.nodeStageSecretRef, "NodeStageSecretRef", signal)
      : {};
    await Deno.mkdir(paths.staging, { recursive: true, mode: 0o750 });
    await client.nodeStageVolume({
      volumeId: source.volumeHandle,
      stagingTargetPath: paths.staging,
      fsType: FS_TYPE_BLOCK,
      accessMode,
      secrets,
      volumeContext: source.volumeAttributes ?? {},
      ...(publishContext ? { publishContext } : {}),
    }, signal);
    o.staged.add(paths.staging);
  }
  const csiDriver = await host.csiDriver(source.driver, signal);
  const volumeContext = {
    ...(source.volumeAttributes ?? {}),
    ...(csiDriver?.spec.podInfoOnMount ? host.podInfo(pod) : {}),
  };
  const secrets = source.nodePublishSecretRef
    ? await host.secret(source.nodePublishSecretRef, "NodePublishSecretRef", signal)
    : {};
  await Deno.mkdir(paths.publishDir, { recursive: true, mode: 0o750 });
  await client.nodePublishVolume({
    volumeId: source.volumeHandle,
    targetPath: paths.publish,
    stagingTargetPath: paths.staging,
    readOnly: spec.readOnly,
    accessMode,
    fsType: FS_TYPE_BLOCK,
    volumeContext,
    secrets,
    ...(publishContext ? { publishContext } : {}),
  }, signal);
  try {
    await mapBlockVolume({
      devicePath: paths.publish,
      globalMapPath: paths.globalMap,
      podDeviceDir: dirname(o.dir),
      linkName: spec.name,
      podUid: uid,
    }, {
      mounter: host.mounter,
      ...(host.run ? { run: host.run } : {}),
      ...(signal ? { signal } : {}),
    });
  } catch (e) {
    throw new Error(`MapVolume.MapBlockVolume failed for volume "${spec.name}" : ${errorText(e)}`);
  }
  return { hostPath: o.dir, readOnly: spec.readOnly, selinuxRelabel: false };
}

/**
 * upstream UnmapBlockVolume and UnmapPodDevice for the pod, then TearDownDevice once no pod maps
 * the volume. `dir` is the pod's link; what the volume is comes from its data file.
 */
export async function unmapCsiBlock(
  host: CsiBlockHost,
  o: { podUid: string; specName: string; dir: string; staged: Set<string>; signal?: AbortSignal },
): Promise<void> {
  const paths = blockPaths(host.rootDirectory, o.specName, o.podUid);
  const data = await readData(paths.data);
  const opts = {
    mounter: host.mounter,
    ...(host.run ? { run: host.run } : {}),
    ...(o.signal ? { signal: o.signal } : {}),
  };
  await unmapBlockVolume({
    globalMapPath: paths.globalMap,
    podDeviceDir: dirname(o.dir),
    linkName: o.specName,
    podUid: o.podUid,
  }, opts);
  if (!data) {
    // Nothing says which driver published it: only what the kubelet made goes.
    await Deno.remove(paths.publish).catch(() => {});
    return;
  }
  let client: CsiClient;
  try {
    client = host.client(data.driverName);
  } catch (e) {
    throw new Error(log(`blockMapper.UnmapPodDevice failed to get CSI client: ${errorText(e)}`));
  }
  using _closer = client;
  try {
    await client.nodeUnpublishVolume(data.volumeHandle, paths.publish, o.signal);
  } catch (e) {
    throw new Error(log(`blockMapper.unpublishVolumeForBlock failed: ${errorText(e)}`));
  }
  if ((await mappedPods(paths.globalMap)).length > 0) return;
  // TearDownDevice: no pod maps it any more.
  const staged = await Deno.stat(paths.staging).then(() => true, () => false);
  if (staged) {
    const caps = await client.nodeCapabilities(o.signal);
    if (caps.has(Cap.STAGE_UNSTAGE_VOLUME)) {
      try {
        await client.nodeUnstageVolume(data.volumeHandle, paths.staging, o.signal);
      } catch (e) {
        throw new Error(log(`blockMapper.unstageVolumeForBlock failed: ${errorText(e)}`));
      }
    }
  }
  o.staged.delete(paths.staging);
  // cleanupOrphanDeviceFiles.
  await Deno.remove(paths.publishDir).catch(() => {});
  await Deno.remove(paths.staging, { recursive: true }).catch(() => {});
  await Deno.remove(paths.volumeDir, { recursive: true }).catch(() => {});
  host.logger.info(`UnmapDevice succeeded for volume "${o.specName}"`);
}

async function readData(
  dir: string,
): Promise<{ volumeHandle: string; driverName: string } | undefined> {
  let text: string;
  try {
    text = await Deno.readTextFile(join(dir, "vol_data.json"));
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return undefined;
    throw e;
  }
  const raw = JSON.parse(text) as Record<string, unknown>;
  return { volumeHandle: String(raw.volumeHandle ?? ""), driverName: String(raw.driverName ?? "") };
}
