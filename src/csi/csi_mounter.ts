/**
 * @module
 * The CSI volume plugin, `kubernetes.io/csi`: a PersistentVolume with a `csi` source, and an
 * inline `csi` volume of a pod (a driver's Ephemeral lifecycle mode), set up through the
 * registered driver's Node service.
 *
 * Setting up a persistent volume: the driver must support the Persistent mode (any driver
 * without a CSIDriver object does), an attachable volume (a CSIDriver without
 * `attachRequired: false`) waits for its VolumeAttachment `csi-<sha256(handle+driver+node)>`
 * to be attached and takes its attachment metadata as publish context; a driver with
 * STAGE_UNSTAGE_VOLUME stages the volume once for the node at
 * `<root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount` (its `vol_data.json`
 * beside it); then the volume is published into the pod's
 * `<pods>/<uid>/volumes/kubernetes.io~csi/<spec name>/mount` (`vol_data.json` beside it, for
 * tear-down after a restart). The volume context gets the pod's identity when the CSIDriver asks
 * (`podInfoOnMount`), secrets come from the `nodeStageSecretRef` and `nodePublishSecretRef`, and
 * the pod's fsGroup is applied as the CSIDriver's `fsGroupPolicy` says (by the driver when it has
 * VOLUME_MOUNT_GROUP). Tearing down unpublishes it and removes the pod's files; once no pod on
 * the node publishes the volume any more (their `vol_data.json` files say), it is unstaged and
 * its global mount removed. Operations on one volume never interleave.
 *
 * A CSIDriver's `tokenRequests` put the pod's service account tokens in the volume context (or
 * the secrets); with `requiresRepublish` the volume is published again at every pod sync, so the
 * driver sees fresh tokens. Block volumes are csi_block.ts's. SELinux mount contexts are not
 * built (nothing is mounted with a context option).
 *
 * Corresponds to upstream `pkg/volume/csi/csi_mounter.go` (SetUpAt, TearDownAt),
 * `csi_attacher.go` (WaitForAttach, MountDevice, UnmountDevice, getAttachmentName,
 * makeDeviceMountPath) and `csi_plugin.go` (CanAttach, skipAttach, getPublishContext).
 */

import { createHash } from "node:crypto";
import { dirname, join } from "node:path";
import type {
  V1CSIDriver,
  V1PersistentVolume,
  V1Pod,
  V1Secret,
  V1Volume,
  V1VolumeAttachment,
} from "@kubernetes/client-node";
import { apiErrorText, isStatus, type KubeClient } from "../client/kube_client.ts";
import type { Logger } from "../klog/klog.ts";
import type { TokenManager } from "../token/token_manager.ts";
import type { CommandRunner, Mounter } from "../util/mount.ts";
import { errorText } from "../util/errors.ts";
import { KeyedQueue } from "../util/keyed_queue.ts";
import { NodeServiceCapability_RPC_Type as Cap, VolumeUsage_Unit } from "../../proto/csi/v1/csi.ts";
import {
  MetricsNotSupportedError,
  type MountedVolume,
  OperationNotSupportedError,
  specFromVolume,
  UncertainOperationError,
  type VolumeAttachmentInfo,
  VolumeOperationError,
  type VolumePlugin,
  type VolumeSetUpContext,
  type VolumeSpec,
  type VolumeTearDownContext,
  type VolumeUsage,
} from "../volume/plugin.ts";
import { setVolumeOwnership } from "../volume/empty_dir.ts";
import { CsiClient, FS_TYPE_BLOCK, isFinalCsiError } from "./csi_client.ts";
import { type CsiBlockHost, mapCsiBlock, unmapCsiBlock } from "./csi_block.ts";
import { CSI_PLUGIN_NAME, type CsiDrivers } from "./csi_plugin.ts";

/** The file beside a volume's mount that says what it is (upstream volDataFileName). */
export const VOL_DATA_FILE = "vol_data.json";
/** The global mount's directory name (upstream globalMountInGlobalPath). */
export const GLOBAL_MOUNT = "globalmount";
/** The directory a pod's volume is published at, inside its volume dir. */
export const MOUNT_DIR = "mount";

/** What a pod volume's vol_data.json holds (upstream volDataKey). */
export interface VolumeData {
  readonly specVolID: string;
  readonly volumeHandle: string;
  readonly driverName: string;
  readonly nodeName: string;
  readonly attachmentID: string;
  readonly volumeLifecycleMode: "Persistent" | "Ephemeral";
}

/** Options of {@link CsiVolumePlugin}. */
export interface CsiVolumePluginOptions {
  readonly drivers: CsiDrivers;
  /** Reads CSIDrivers, VolumeAttachments and secrets; undefined in standalone mode. */
  readonly client?: Pick<KubeClient, "get">;
  readonly nodeName: string;
  /** `<root-dir>`: global mounts go under `<root-dir>/plugins/kubernetes.io/csi`. */
  readonly rootDirectory: string;
  /** `<root-dir>/pods`: where other pods' vol_data.json files are looked up. */
  readonly podsDirectory: string;
  /** Tells mount points from directories. */
  readonly mounter: Pick<Mounter, "mountAt" | "mount" | "unmount">;
  readonly logger: Logger;
  /** Bounds each driver call. @default CSI_TIMEOUT_MS */
  readonly timeoutMs?: number;
  /** Tokens for CSIDrivers' `tokenRequests`. @default none: such drivers' volumes fail */
  readonly tokens?: Pick<TokenManager, "getServiceAccountToken">;
  /** Runs losetup for block volumes. @default runCommand */
  readonly run?: CommandRunner;
  /** The CSIVolumeHealth gate: metrics carry the driver's volume condition. @default false */
  readonly volumeHealth?: boolean;
  /** The time metrics are taken at. @default Date.now */
  readonly now?: () => number;
}

/** upstream log(): the plugin's name before the message. */
function log(msg: string): string {
  return `${CSI_PLUGIN_NAME}: ${msg}`;
}

/** upstream getAttachmentName: the VolumeAttachment of a volume on a node. */
export function attachmentName(volumeHandle: string, driver: string, nodeName: string): string {
  return `csi-${sha256(`${volumeHandle}${driver}${nodeName}`)}`;
}

/** A CSI PersistentVolume's unique volume name (upstream GetVolumeName with the plugin name). */
export function csiUniqueVolumeName(driver: string, volumeHandle: string): string {
  return `${CSI_PLUGIN_NAME}/${driver}^${volumeHandle}`;
}

/** The CSI plugin; see the module documentation. */
export class CsiVolumePlugin implements VolumePlugin {
  readonly name = CSI_PLUGIN_NAME;
  readonly requiresRemount = false;
  readonly #o: CsiVolumePluginOptions;
  /** Each volume's operations, one at a time (upstream nestedpendingoperations). */
  readonly #queue = new KeyedQueue();
  /** Global mounts staged since start; after a restart each volume is staged again (idempotent). */
  readonly #staged = new Set<string>();

  constructor(opts: CsiVolumePluginOptions) {
    this.#o = opts;
  }

  canSupport(volume: V1Volume): boolean {
    return volume.csi !== undefined && volume.csi !== null;
  }

  canSupportPersistentVolume(pv: V1PersistentVolume): boolean {
    return pv.spec?.csi !== undefined && pv.spec.csi !== null;
  }

  /** upstream RequiresRemount: the driver's CSIDriver asks to be called again on each sync. */
  async requiresRemountFor(spec: VolumeSpec, signal?: AbortSignal): Promise<boolean> {
    const driver = spec.persistentVolume?.spec?.csi?.driver ?? spec.volume.csi?.driver;
    if (!driver) return false;
    try {
      return (await this.#csiDriver(driver, signal))?.spec.requiresRepublish === true;
    } catch (e) {
      this.#o.logger.v(5).info(
        log(`Failed to mark "${spec.name}" as republish required, err: ${errorText(e)}`),
      );
      return false;
    }
  }

  /** upstream CanAttach: persistent volumes of drivers without `attachRequired: false`. */
  async attachment(
    spec: VolumeSpec,
    signal?: AbortSignal,
  ): Promise<VolumeAttachmentInfo | undefined> {
    const source = spec.persistentVolume?.spec?.csi;
    if (!source) return undefined;
    if (await this.#skipAttach(source.driver, signal)) return undefined;
    return { uniqueName: csiUniqueVolumeName(source.driver, source.volumeHandle) };
  }

  /** upstream ConstructVolumeSpec with CanAttach: a persistent volume of an attaching driver. */
  async reconstructAttachment(
    dir: string,
    signal?: AbortSignal,
  ): Promise<VolumeAttachmentInfo | undefined> {
    const data = await loadVolumeData(dir);
    if (!data || data.volumeLifecycleMode !== "Persistent") return undefined;
    if (await this.#skipAttach(data.driverName, signal)) return undefined;
    return { uniqueName: csiUniqueVolumeName(data.driverName, data.volumeHandle) };
  }

  /**
   * upstream metricsCsi.GetMetrics: NodeGetVolumeStats of the published volume in `dir`, for a
   * driver with GET_VOLUME_STATS; its condition too with the CSIVolumeHealth gate and
   * VOLUME_CONDITION.
   */
  async getMetrics(dir: string, signal?: AbortSignal): Promise<VolumeUsage> {
    const time = (this.#o.now ?? Date.now)();
    const data = await loadVolumeData(dir);
    if (!data) throw new Error(log(`no ${VOL_DATA_FILE} in ${dir}`));
    using client = new CsiClient(this.#o.drivers, data.driverName, this.#o.timeoutMs);
    const caps = await client.nodeCapabilities(signal);
    if (!caps.has(Cap.GET_VOLUME_STATS)) {
      throw new MetricsNotSupportedError(
        `metrics are not supported for ${data.driverName} volumes`,
      );
    }
    const res = await client.nodeGetVolumeStats(data.volumeHandle, join(dir, MOUNT_DIR), signal);
    const condition = this.#o.volumeHealth && caps.has(Cap.VOLUME_CONDITION)
      ? res.volumeCondition ?? { abnormal: false, message: "" }
      : undefined;
    if (!condition && res.usage.length === 0) {
      throw new Error("failed to get usage from response. usage is nil");
    }
    let out: VolumeUsage = {
      time,
      capacityBytes: 0,
      availableBytes: 0,
      usedBytes: 0,
      inodes: 0,
      inodesFree: 0,
      inodesUsed: 0,
      ...(condition ? { abnormal: condition.abnormal, message: condition.message } : {}),
    };
    for (const u of res.usage) {
      const [total, available, used] = [Number(u.total), Number(u.available), Number(u.used)];
      if (u.unit === VolumeUsage_Unit.BYTES) {
        out = { ...out, capacityBytes: total, availableBytes: available, usedBytes: used };
      } else if (u.unit === VolumeUsage_Unit.INODES) {
        out = { ...out, inodes: total, inodesFree: available, inodesUsed: used };
      } else {
        this.#o.logger.error(null, "unknown unit in VolumeUsage", { unit: u.unit });
      }
    }
    return out;
  }

  /** upstream's BlockVolumeMapper: see csi_block.ts. */
  mapDevice(ctx: VolumeSetUpContext): Promise<MountedVolume> {
    const spec = ctx.spec ?? specFromVolume(ctx.volume);
    return this.#queue.run(`block/${spec.name}`, () =>
      mapCsiBlock(this.#blockHost(), {
        pod: ctx.pod,
        spec,
        dir: ctx.dir,
        staged: this.#staged,
        ...(ctx.signal ? { signal: ctx.signal } : {}),
      }));
  }

  /** Undoes {@link mapDevice} (csi_block.ts). */
  unmapDevice(ctx: VolumeTearDownContext): Promise<void> {
    return this.#queue.run(`block/${ctx.volumeName}`, () =>
      unmapCsiBlock(this.#blockHost(), {
        podUid: ctx.podUid,
        specName: ctx.volumeName,
        dir: ctx.dir,
        staged: this.#staged,
        ...(ctx.signal ? { signal: ctx.signal } : {}),
      }));
  }

  #blockHost(): CsiBlockHost {
    return {
      rootDirectory: this.#o.rootDirectory,
      nodeName: this.#o.nodeName,
      mounter: this.#o.mounter,
      ...(this.#o.run ? { run: this.#o.run } : {}),
      logger: this.#o.logger,
      client: (driver) => {
        try {
          return new CsiClient(this.#o.drivers, driver, this.#o.timeoutMs);
        } catch (e) {
          throw new Error(log(`blockMapper.SetUpDevice failed to get CSI client: ${errorText(e)}`));
        }
      },
      csiDriver: (driver, signal) => this.#csiDriver(driver, signal),
      publishContext: async (driver, handle, signal) =>
        (await this.#skipAttach(driver, signal))
          ? undefined
          : await this.#waitForAttach(driver, handle, signal),
      secret: (ref, field, signal) => this.#secret(ref, field, signal),
      podInfo: (pod) => podInfo(pod, "Persistent"),
      attachmentName: (handle, driver) => attachmentName(handle, driver, this.#o.nodeName),
    };
  }

  /**
   * upstream csiPlugin.NodeExpand of a published file system: NodeExpandVolume of the pod's
   * mount (and the global mount when staged), for a driver with EXPAND_VOLUME.
   */
  nodeExpand(
    spec: VolumeSpec,
    dir: string,
    newSizeBytes: number,
    signal?: AbortSignal,
  ): Promise<void> {
    const source = spec.persistentVolume?.spec?.csi;
    if (!source) {
      return Promise.reject(
        new Error(
          log(
            "Expander.NodeExpand failed to get CSI persistent source: not a CSI PersistentVolume",
          ),
        ),
      );
    }
    const key = csiUniqueVolumeName(source.driver, source.volumeHandle);
    return this.#queue.run(key, async () => {
      using client = new CsiClient(this.#o.drivers, source.driver, this.#o.timeoutMs);
      const caps = await client.nodeCapabilities(signal);
      if (!caps.has(Cap.EXPAND_VOLUME)) {
        throw new OperationNotSupportedError(
          `NodeExpand is not supported by the CSI driver ${source.driver}`,
        );
      }
      const secrets = source.nodeExpandSecretRef
        ? await this.#secret(source.nodeExpandSecretRef, "NodeExpandSecretRef", signal)
        : {};
      // A block volume is grown at the device published for the pod, which its link names.
      const volumePath = spec.block ? await Deno.readLink(dir) : join(dir, MOUNT_DIR);
      try {
        await client.nodeExpandVolume({
          volumeId: source.volumeHandle,
          volumePath,
          newSizeBytes,
          fsType: spec.block ? FS_TYPE_BLOCK : source.fsType ?? "",
          accessMode: spec.persistentVolume?.spec?.accessModes?.[0] ?? "ReadWriteOnce",
          mountOptions: spec.persistentVolume?.spec?.mountOptions ?? [],
          secrets,
          ...(caps.has(Cap.STAGE_UNSTAGE_VOLUME)
            ? { stagingTargetPath: this.deviceMountPath(source.driver, source.volumeHandle) }
            : {}),
        }, signal);
      } catch (e) {
        const msg = `Expander.NodeExpand failed to expand the volume : ${errorText(e)}`;
        if (!isFinalCsiError(e)) throw new UncertainOperationError(msg, { cause: e });
        throw new Error(msg, { cause: e });
      }
    });
  }

  setUp(ctx: VolumeSetUpContext): Promise<MountedVolume> {
    const spec = ctx.spec ?? specFromVolume(ctx.volume);
    const pvSource = spec.persistentVolume?.spec?.csi;
    const key = pvSource
      ? csiUniqueVolumeName(pvSource.driver, pvSource.volumeHandle)
      : `${ctx.pod.metadata?.uid ?? ""}/${spec.name}`;
    return this.#queue.run(key, () => this.#setUp(ctx, spec));
  }

  async tearDown(ctx: VolumeTearDownContext): Promise<void> {
    const data = await loadVolumeData(ctx.dir);
    const key = data?.volumeLifecycleMode === "Persistent"
      ? csiUniqueVolumeName(data.driverName, data.volumeHandle)
      : `${ctx.podUid}/${ctx.volumeName}`;
    await this.#queue.run(key, () => this.#tearDown(ctx, data));
  }

  // ---- Set-up -------------------------------------------------------------------------------

  async #setUp(ctx: VolumeSetUpContext, spec: VolumeSpec): Promise<MountedVolume> {
    const { pod, signal } = ctx;
    const pv = spec.persistentVolume;
    const inline = spec.volume.csi;
    const source = pv?.spec?.csi;
    const driverName = source?.driver ?? inline?.driver ?? "";
    let client: CsiClient;
    try {
      client = new CsiClient(this.#o.drivers, driverName, this.#o.timeoutMs);
    } catch (e) {
      // upstream: the driver's absence is transient; the pod's next sync tries again.
      throw new Error(log(`mounter.SetUpAt failed to get CSI client: ${errorText(e)}`));
    }
    using _closer = client;
    const mode = source ? "Persistent" : "Ephemeral";
    const csiDriver = await this.#csiDriver(driverName, signal);
    checkLifecycleMode(driverName, csiDriver, mode);
    const caps = await client.nodeCapabilities(signal);
    const volumeHandle = source?.volumeHandle ?? csiEphemeralVolumeHandle(pod, spec.name);
    const ns = pod.metadata?.namespace ?? "";
    const fsGroup = pod.spec?.securityContext?.fsGroup ?? undefined;
    const mountGroup = caps.has(Cap.VOLUME_MOUNT_GROUP) ? fsGroup : undefined;
    const fsType = source ? source.fsType ?? "" : inline?.fsType ?? "";
    const accessMode = pv?.spec?.accessModes?.[0] ?? "ReadWriteOnce";
    const mountOptions = pv?.spec?.mountOptions ?? [];

    let publishContext: Record<string, string> | undefined;
    let stagingTargetPath: string | undefined;
    if (source) {
      const attach = !(await this.#skipAttach(driverName, signal));
      if (attach) publishContext = await this.#waitForAttach(driverName, volumeHandle, signal);
      const deviceMountPath = this.deviceMountPath(driverName, volumeHandle);
      // MountDevice: the volume is staged once for the node; staging is idempotent.
      await Deno.mkdir(deviceMountPath, { recursive: true, mode: 0o750 }).catch((e) => {
        throw new Error(
          log(`attacher.MountDevice failed to create dir "${deviceMountPath}":  ${errorText(e)}`),
        );
      });
      if (caps.has(Cap.STAGE_UNSTAGE_VOLUME)) {
        stagingTargetPath = deviceMountPath;
        if (!this.#staged.has(deviceMountPath)) {
          const secrets = source.nodeStageSecretRef
            ? await this.#secret(source.nodeStageSecretRef, "NodeStageSecretRef", signal)
            : {};
          await saveVolumeData(dirname(deviceMountPath), {
            volumeHandle,
            driverName,
          });
          try {
            await client.nodeStageVolume({
              volumeId: volumeHandle,
              stagingTargetPath: deviceMountPath,
              accessMode,
              fsType,
              mountOptions,
              secrets,
              volumeContext: source.volumeAttributes ?? {},
              ...(publishContext ? { publishContext } : {}),
              ...(mountGroup !== undefined ? { fsGroup: mountGroup } : {}),
            }, signal);
          } catch (e) {
            if (isFinalCsiError(e)) await this.#removeQuietly(deviceMountPath, false);
            throw new VolumeOperationError("MountVolume.MountDevice", errorText(e), { cause: e });
          }
          this.#staged.add(deviceMountPath);
          this.#o.logger.info(
            `MountVolume.MountDevice succeeded for volume "${spec.name}" device mount path "${deviceMountPath}"`,
            { pod: `${ns}/${pod.metadata?.name ?? ""}` },
          );
        }
      } else {
        this.#o.logger.info(
          log(
            "attacher.MountDevice STAGE_UNSTAGE_VOLUME capability not set. Skipping MountDevice...",
          ),
        );
      }
    }

    // SetUpAt: the driver creates the target; the kubelet its parent and vol_data.json.
    const targetPath = join(ctx.dir, MOUNT_DIR);
    await Deno.mkdir(ctx.dir, { recursive: true, mode: 0o750 }).catch((e) => {
      throw new Error(log(`mounter.SetUpAt failed to create dir "${ctx.dir}":  ${errorText(e)}`));
    });
    const secretRef = source?.nodePublishSecretRef ??
      (inline?.nodePublishSecretRef
        ? { name: inline.nodePublishSecretRef.name, namespace: ns }
        : undefined);
    const secrets = secretRef ? await this.#secret(secretRef, "NodePublishSecretRef", signal) : {};
    let volumeContext: Record<string, string> = {
      ...(source?.volumeAttributes ?? inline?.volumeAttributes ?? {}),
    };
    if (csiDriver?.spec.podInfoOnMount) volumeContext = { ...volumeContext, ...podInfo(pod, mode) };
    const tokens = await this.#serviceAccountTokens(pod, csiDriver, signal);
    let publishSecrets = secrets;
    if (tokens) {
      if (tokens.inSecrets) publishSecrets = { ...secrets, ...tokens.attrs };
      else volumeContext = { ...volumeContext, ...tokens.attrs };
    }
    const readOnly = spec.readOnly || inline?.readOnly === true;
    await saveVolumeData(
      ctx.dir,
      {
        specVolID: spec.name,
        volumeHandle,
        driverName,
        nodeName: this.#o.nodeName,
        volumeLifecycleMode: mode,
        attachmentID: attachmentName(volumeHandle, driverName, this.#o.nodeName),
      } satisfies VolumeData,
    );
    // A republish (requiresRepublish) of a volume the pod already uses must not remove it.
    const republish = await this.#isMountPoint(targetPath);
    try {
      await client.nodePublishVolume({
        volumeId: volumeHandle,
        targetPath,
        readOnly,
        accessMode,
        fsType,
        mountOptions,
        secrets: publishSecrets,
        volumeContext,
        ...(stagingTargetPath ? { stagingTargetPath } : {}),
        ...(publishContext ? { publishContext } : {}),
        ...(mountGroup !== undefined ? { fsGroup: mountGroup } : {}),
      }, signal);
    } catch (e) {
      // A final failure leaves nothing mounted: the pod's files go; an uncertain one is kept
      // for tear-down, which unpublishes it.
      if (isFinalCsiError(e) && !republish) await this.#removeQuietly(targetPath, true);
      throw e;
    }

    if (mountGroup === undefined && fsGroup !== undefined) {
      const policy = csiDriver?.spec.fsGroupPolicy ?? "ReadWriteOnceWithFSType";
      if (supportsFSGroup(policy, fsType, readOnly, pv, inline !== undefined)) {
        try {
          await setVolumeOwnership(targetPath, fsGroup, {
            readOnly,
            logger: this.#o.logger,
            ...(signal ? { signal } : {}),
            ...(pod.spec?.securityContext?.fsGroupChangePolicy
              ? { changePolicy: pod.spec.securityContext.fsGroupChangePolicy }
              : {}),
          });
        } catch (e) {
          throw new Error(`applyFSGroup failed for vol ${volumeHandle}: ${errorText(e)}`);
        }
      }
    }
    return { hostPath: targetPath, readOnly, selinuxRelabel: false };
  }

  /** upstream WaitForAttach (one look; the pod's next sync looks again): the publish context. */
  async #waitForAttach(
    driver: string,
    volumeHandle: string,
    signal?: AbortSignal,
  ): Promise<Record<string, string>> {
    const id = attachmentName(volumeHandle, driver, this.#o.nodeName);
    let va: V1VolumeAttachment;
    try {
      va = await this.#client().get<V1VolumeAttachment>(
        `/apis/storage.k8s.io/v1/volumeattachments/${id}`,
        signal,
      );
    } catch (e) {
      throw new VolumeOperationError(
        "MountVolume.WaitForAttach",
        `volume ${volumeHandle} has GET error for volume attachment ${id}: ${apiErrorText(e)}`,
      );
    }
    const fail = (msg: string) => new VolumeOperationError("MountVolume.WaitForAttach", msg);
    if (va.metadata?.deletionTimestamp) throw fail("volume attachment is being deleted");
    if (!va.status?.attached) {
      throw fail(
        va.status?.attachError?.message ??
          `volume ${volumeHandle} is not attached for volume attachment ${id}`,
      );
    }
    return { ...(va.status.attachmentMetadata ?? {}) };
  }

  // ---- Tear-down ----------------------------------------------------------------------------

  async #tearDown(ctx: VolumeTearDownContext, data: VolumeData | undefined): Promise<void> {
    const targetPath = join(ctx.dir, MOUNT_DIR);
    if (!data) {
      // Nothing says what was published here: only an unmounted directory can go.
      if (await this.#isMountPoint(targetPath)) {
        throw new Error(
          log(
            `Unmounter.TearDownAt failed: ${VOL_DATA_FILE} is missing beside the mount point ${targetPath}`,
          ),
        );
      }
      await removeMountDir(targetPath, this.#o.mounter, true);
      return;
    }
    let client: CsiClient;
    try {
      client = new CsiClient(this.#o.drivers, data.driverName, this.#o.timeoutMs);
    } catch (e) {
      throw new Error(log(`Unmounter.TearDownAt failed to get CSI client: ${errorText(e)}`));
    }
    using _closer = client;
    try {
      await client.nodeUnpublishVolume(data.volumeHandle, targetPath, ctx.signal);
    } catch (e) {
      throw new Error(log(`Unmounter.TearDownAt failed: ${errorText(e)}`), { cause: e });
    }
    await removeMountDir(targetPath, this.#o.mounter, true);
    this.#o.logger.v(4).info(
      log(`Unmounter.TearDownAt successfully unmounted dir [${targetPath}]`),
    );
    if (data.volumeLifecycleMode === "Persistent") {
      await this.#unmountDeviceIfUnused(client, data, ctx);
    }
  }

  /** upstream UnmountDevice, once no pod on the node publishes the volume. */
  async #unmountDeviceIfUnused(
    client: CsiClient,
    data: VolumeData,
    ctx: VolumeTearDownContext,
  ): Promise<void> {
    if (await this.#publishedElsewhere(data)) return;
    const deviceMountPath = this.deviceMountPath(data.driverName, data.volumeHandle);
    const dataDir = dirname(deviceMountPath);
    const device = await loadDeviceData(dataDir);
    if (!device) {
      // Not staged (the driver lacks STAGE_UNSTAGE_VOLUME): only the directories go.
      await removeMountDir(deviceMountPath, this.#o.mounter, true);
      return;
    }
    const caps = await client.nodeCapabilities(ctx.signal);
    if (caps.has(Cap.STAGE_UNSTAGE_VOLUME)) {
      try {
        await client.nodeUnstageVolume(device.volumeHandle, deviceMountPath, ctx.signal);
      } catch (e) {
        throw new Error(log(`attacher.UnmountDevice failed: ${errorText(e)}`), { cause: e });
      }
    }
    this.#staged.delete(deviceMountPath);
    try {
      await removeMountDir(deviceMountPath, this.#o.mounter, true);
    } catch (e) {
      throw new Error(log(`failed to clean up global mount ${dataDir}: ${errorText(e)}`));
    }
    this.#o.logger.info(
      `UnmountDevice succeeded for volume "${data.specVolID}" device mount path "${deviceMountPath}"`,
    );
  }

  /** Whether another pod's vol_data.json names the same persistent volume. */
  async #publishedElsewhere(data: VolumeData): Promise<boolean> {
    const escaped = CSI_PLUGIN_NAME.replaceAll("/", "~");
    for (const pod of await readDirNames(this.#o.podsDirectory)) {
      const pluginDir = join(this.#o.podsDirectory, pod, "volumes", escaped);
      for (const name of await readDirNames(pluginDir)) {
        const other = await loadVolumeData(join(pluginDir, name)).catch(() => undefined);
        if (
          other && other.volumeLifecycleMode === "Persistent" &&
          other.driverName === data.driverName && other.volumeHandle === data.volumeHandle
        ) return true;
      }
    }
    return false;
  }

  // ---- Helpers ------------------------------------------------------------------------------

  /** upstream makeDeviceMountPath. */
  deviceMountPath(driver: string, volumeHandle: string): string {
    return join(
      this.#o.rootDirectory,
      "plugins",
      CSI_PLUGIN_NAME,
      driver,
      sha256(volumeHandle),
      GLOBAL_MOUNT,
    );
  }

  #client(): Pick<KubeClient, "get"> {
    if (!this.#o.client) {
      throw new Error(log("CSI persistent volumes need an apiserver: no kubeClient defined"));
    }
    return this.#o.client;
  }

  /** The driver's CSIDriver object, undefined when there is none. */
  async #csiDriver(name: string, signal?: AbortSignal): Promise<V1CSIDriver | undefined> {
    if (!this.#o.client) return undefined;
    try {
      return await this.#o.client.get<V1CSIDriver>(
        `/apis/storage.k8s.io/v1/csidrivers/${encodeURIComponent(name)}`,
        signal,
      );
    } catch (e) {
      if (isStatus(e, 404)) return undefined;
      throw new Error(log(`failed to get CSIDriver ${name}: ${apiErrorText(e)}`));
    }
  }

  /**
   * upstream podServiceAccountTokenAttrs: a token of the pod's service account for each of the
   * CSIDriver's `tokenRequests`, as `csi.storage.k8s.io/serviceAccount.tokens` (the JSON of
   * audience to TokenRequest status), for the volume context or, with
   * `serviceAccountTokenInSecrets`, the secrets. Undefined when the driver asks for none.
   */
  async #serviceAccountTokens(
    pod: V1Pod,
    csiDriver: V1CSIDriver | undefined,
    signal?: AbortSignal,
  ): Promise<{ attrs: Record<string, string>; inSecrets: boolean } | undefined> {
    const requests = csiDriver?.spec.tokenRequests ?? [];
    if (requests.length === 0) return undefined;
    const tokens = this.#o.tokens;
    if (!tokens) throw new Error(log("ServiceAccountTokenGetter is nil"));
    const outputs: Record<string, { token: string; expirationTimestamp: string }> = {};
    for (const r of requests) {
      const t = await tokens.getServiceAccountToken(
        pod.metadata?.namespace ?? "",
        pod.spec?.serviceAccountName ?? "",
        {
          audiences: r.audience ? [r.audience] : [],
          ...(r.expirationSeconds !== undefined ? { expirationSeconds: r.expirationSeconds } : {}),
          boundObjectRef: {
            apiVersion: "v1",
            kind: "Pod",
            name: pod.metadata?.name ?? "",
            uid: pod.metadata?.uid ?? "",
          },
        },
        signal,
      );
      outputs[r.audience] = { token: t.token, expirationTimestamp: t.expirationTimestamp };
    }
    // Go's json.Marshal of a map: keys sorted.
    const sorted = Object.fromEntries(Object.entries(outputs).sort(([a], [b]) => a < b ? -1 : 1));
    const inSecrets = (csiDriver?.spec as { serviceAccountTokenInSecrets?: boolean } | undefined)
      ?.serviceAccountTokenInSecrets === true;
    return {
      attrs: { "csi.storage.k8s.io/serviceAccount.tokens": JSON.stringify(sorted) },
      inSecrets,
    };
  }

  /** upstream skipAttach: a CSIDriver says `attachRequired: false`. */
  async #skipAttach(driver: string, signal?: AbortSignal): Promise<boolean> {
    const d = await this.#csiDriver(driver, signal);
    return d?.spec.attachRequired === false;
  }

  /** upstream getCredentialsFromSecret. */
  async #secret(
    ref: { name?: string; namespace?: string },
    field: string,
    signal?: AbortSignal,
  ): Promise<Record<string, string>> {
    const name = ref.name ?? "";
    const ns = ref.namespace ?? "";
    let secret: V1Secret;
    try {
      secret = await this.#client().get<V1Secret>(
        `/api/v1/namespaces/${encodeURIComponent(ns)}/secrets/${encodeURIComponent(name)}`,
        signal,
      );
    } catch (e) {
      throw new Error(
        `fetching ${field} ${ns}/${name} failed: ${
          log(
            `failed to find the secret ${name} in the namespace ${ns} with error: ${
              apiErrorText(e)
            }`,
          )
        }`,
      );
    }
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(secret.data ?? {})) out[k] = atobText(v);
    return out;
  }

  /** removeMountDir after a failed call: a failure is logged, the call's error is what counts. */
  async #removeQuietly(path: string, withData: boolean): Promise<void> {
    try {
      await removeMountDir(path, this.#o.mounter, withData);
    } catch (e) {
      this.#o.logger.error(e, log("failed to remove mount dir after error"), { path });
    }
  }

  async #isMountPoint(path: string): Promise<boolean> {
    return (await this.#o.mounter.mountAt(path)) !== undefined;
  }
}

/** upstream supportsVolumeLifecycleMode. */
function checkLifecycleMode(
  driver: string,
  csiDriver: V1CSIDriver | undefined,
  mode: "Persistent" | "Ephemeral",
): void {
  if (!csiDriver) {
    if (mode === "Persistent") return;
    throw new Error(
      log(
        `mounter.SetupAt failed to check volume lifecycle mode: volume mode "${mode}" not supported by driver ${driver} (no CSIDriver object)`,
      ),
    );
  }
  const modes = csiDriver.spec.volumeLifecycleModes ?? ["Persistent"];
  if (modes.includes(mode)) return;
  throw new Error(
    log(
      `mounter.SetupAt failed to check volume lifecycle mode: volume mode "${mode}" not supported by driver ${driver} (only supports [${
        modes.map((m) => JSON.stringify(m)).join(" ")
      }])`,
    ),
  );
}

/** upstream supportsFSGroup. */
function supportsFSGroup(
  policy: string,
  fsType: string,
  readOnly: boolean,
  pv: V1PersistentVolume | undefined,
  inline: boolean,
): boolean {
  if (policy === "None" || readOnly) return false;
  if (policy === "File") return true;
  if (fsType === "") return false;
  if (pv) return (pv.spec?.accessModes ?? []).includes("ReadWriteOnce");
  return inline;
}

/** upstream getPodInfoAttrs. */
function podInfo(pod: V1Pod, mode: string): Record<string, string> {
  return {
    "csi.storage.k8s.io/pod.name": pod.metadata?.name ?? "",
    "csi.storage.k8s.io/pod.namespace": pod.metadata?.namespace ?? "",
    "csi.storage.k8s.io/pod.uid": pod.metadata?.uid ?? "",
    "csi.storage.k8s.io/serviceAccount.name": pod.spec?.serviceAccountName ?? "",
    "csi.storage.k8s.io/ephemeral": String(mode === "Ephemeral"),
  };
}

/** upstream makeVolumeHandle for inline volumes: `csi-<sha256(podUID+volume name)>`. */
export function csiEphemeralVolumeHandle(pod: V1Pod, specName: string): string {
  return `csi-${sha256(`${pod.metadata?.uid ?? ""}${specName}`)}`;
}

function sha256(s: string): string {
  return createHash("sha256").update(s).digest("hex");
}

function atobText(b64: string): string {
  return new TextDecoder().decode(Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)));
}

/** Writes `data` as `<dir>/vol_data.json` (upstream saveVolumeData). */
async function saveVolumeData(dir: string, data: Record<string, string>): Promise<void> {
  try {
    await Deno.writeTextFile(join(dir, VOL_DATA_FILE), JSON.stringify(data));
  } catch (e) {
    throw new Error(log(`failed to save volume info data: ${errorText(e)}`));
  }
}

/** A pod volume's vol_data.json, undefined when absent. */
export async function loadVolumeData(dir: string): Promise<VolumeData | undefined> {
  const raw = await readJsonOrUndefined(join(dir, VOL_DATA_FILE));
  if (!raw) return undefined;
  const get = (k: string) => typeof raw[k] === "string" ? raw[k] as string : "";
  const mode = get("volumeLifecycleMode");
  return {
    specVolID: get("specVolID"),
    volumeHandle: get("volumeHandle"),
    driverName: get("driverName"),
    nodeName: get("nodeName"),
    attachmentID: get("attachmentID"),
    // Files written before the field existed describe persistent volumes.
    volumeLifecycleMode: mode === "Ephemeral" ? "Ephemeral" : "Persistent",
  };
}

async function loadDeviceData(
  dir: string,
): Promise<{ volumeHandle: string; driverName: string } | undefined> {
  const raw = await readJsonOrUndefined(join(dir, VOL_DATA_FILE));
  if (!raw) return undefined;
  return { volumeHandle: String(raw.volumeHandle ?? ""), driverName: String(raw.driverName ?? "") };
}

async function readJsonOrUndefined(path: string): Promise<Record<string, unknown> | undefined> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return undefined;
    throw e;
  }
  try {
    const v = JSON.parse(text);
    if (v && typeof v === "object" && !Array.isArray(v)) return v as Record<string, unknown>;
  } catch { /* reported below */ }
  throw new Error(log(`failed to parse volume data file ${path}: not a JSON object`));
}

/**
 * upstream removeMountDir: removes the mount dir when it is no longer a mount point, then
 * (with `withData`) the vol_data.json beside it and their parent when empty.
 */
async function removeMountDir(
  mountPath: string,
  mounter: Pick<Mounter, "mountAt">,
  withData = false,
): Promise<void> {
  if (await mounter.mountAt(mountPath)) {
    throw new Error(log(`${mountPath} is still a mount point`));
  }
  await Deno.remove(mountPath).catch(ignoreNotFound);
  if (!withData) return;
  const parent = dirname(mountPath);
  await Deno.remove(join(parent, VOL_DATA_FILE)).catch(ignoreNotFound);
  await Deno.remove(parent).catch(ignoreNotFound);
}

function ignoreNotFound(e: unknown): void {
  if (e instanceof Deno.errors.NotFound) return;
  throw e;
}

async function readDirNames(dir: string): Promise<string[]> {
  const out: string[] = [];
  try {
    for await (const e of Deno.readDir(dir)) if (e.isDirectory) out.push(e.name);
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
  return out;
}
