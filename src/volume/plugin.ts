/**
 * @module
 * The volume plugin contract and the on-disk layout of pod volumes. Each plugin
 * (`empty_dir.ts`, `host_path.ts`, `configmap.ts`, `secret.ts`,
 * `downward_api.ts`, `projected.ts`) sets a volume up in its directory
 * `<root-dir>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>` (or names a host path) and
 * tears it down; the volume manager (`volume_manager.ts`) decides when. Corresponds to
 * upstream `pkg/volume/plugins.go` (VolumePlugin, CanSupport, RequiresRemount), `volume.go`
 * (Mounter.SetUp, Unmounter.TearDown) and `pkg/kubelet/kubelet_getters.go`
 * (getPodVolumeDir, getPodVolumesDir, getPodPluginDir).
 */

import { join } from "node:path";
import type {
  V1PersistentVolume,
  V1PersistentVolumeClaim,
  V1Pod,
  V1Volume,
} from "@kubernetes/client-node";

/**
 * One volume of a pod as the plugins see it (upstream `volume.Spec`): the pod's volume, and for
 * a persistentVolumeClaim or generic ephemeral volume the PersistentVolume bound to its claim.
 */
export interface VolumeSpec {
  /**
   * upstream Spec.Name(): the PersistentVolume's name for a claim, else the pod volume's name.
   * It names the volume's directory and the volume in events.
   */
  readonly name: string;
  readonly volume: V1Volume;
  /** The bound PersistentVolume of a claim. */
  readonly persistentVolume?: V1PersistentVolume;
  /** The claim's `readOnly` (upstream Spec.ReadOnly); false for other volumes. */
  readonly readOnly: boolean;
  /** The claim, as read with its PersistentVolume. */
  readonly claim?: V1PersistentVolumeClaim;
  /** A claim of volumeMode Block that containers map as a device (volumeDevices). */
  readonly block?: boolean;
}

/** The spec of a pod volume that is not a claim. */
export function specFromVolume(volume: V1Volume): VolumeSpec {
  return { name: volume.name, volume, readOnly: false };
}

/** What a plugin gets to set up one volume of one pod. */
export interface VolumeSetUpContext {
  readonly pod: V1Pod;
  readonly volume: V1Volume;
  /** The volume with its PersistentVolume, if a claim. @default specFromVolume(volume) */
  readonly spec?: VolumeSpec;
  /** The volume's directory, `<pods>/<uid>/volumes/kubernetes.io~<plugin>/<spec name>`. */
  readonly dir: string;
  readonly signal?: AbortSignal;
}

/** What a plugin gets to tear down one volume, possibly after a restart (no pod spec then). */
export interface VolumeTearDownContext {
  readonly podUid: string;
  readonly volumeName: string;
  /** The volume's directory, as in {@link VolumeSetUpContext.dir}. */
  readonly dir: string;
  readonly signal?: AbortSignal;
}

/** A volume that is set up: where containers mount it from. */
export interface MountedVolume {
  /** The host path bind-mounted into containers (the volume dir, or a hostPath's path). */
  readonly hostPath: string;
  /** Containers get it read-only whatever their volumeMount says (upstream ReadOnly attribute). */
  readonly readOnly: boolean;
  /** The runtime should relabel it for SELinux (upstream `SELinuxRelabel` attribute). */
  readonly selinuxRelabel: boolean;
}

/** A volume plugin (upstream `volume.VolumePlugin` with its Mounter and Unmounter). */
export interface VolumePlugin {
  /** Upstream plugin name, such as `kubernetes.io/empty-dir`. */
  readonly name: string;
  /** Whether this plugin handles the pod volume (upstream CanSupport). */
  canSupport(volume: V1Volume): boolean;
  /** Whether this plugin handles the PersistentVolume (upstream CanSupport of a PV spec). */
  canSupportPersistentVolume?(pv: V1PersistentVolume): boolean;
  /**
   * Whether the volume must be attached to the node by the attach-detach controller before it
   * is set up (upstream CanAttach), and its unique name (upstream GetUniqueVolumeName, as
   * node.status.volumesInUse and volumesAttached list it). Undefined: never attachable.
   */
  attachment?(spec: VolumeSpec, signal?: AbortSignal): Promise<VolumeAttachmentInfo | undefined>;
  /**
   * The attachment of a volume found set up in `dir` after a restart (upstream reconstruction),
   * so the node keeps reporting it in use until it is torn down. Undefined: not attachable.
   */
  reconstructAttachment?(
    dir: string,
    signal?: AbortSignal,
  ): Promise<VolumeAttachmentInfo | undefined>;
  /**
   * The volume is set up again on every pod sync, so content changes reach running pods
   * (upstream RequiresRemount: configMap, secret, downwardAPI, projected).
   */
  readonly requiresRemount: boolean;
  /**
   * Whether this volume is set up again on every pod sync although {@link requiresRemount} is
   * false (upstream RequiresRemount(spec): a CSI driver with `requiresRepublish`).
   */
  requiresRemountFor?(spec: VolumeSpec, signal?: AbortSignal): Promise<boolean>;
  /**
   * The usage of a set-up volume in `dir` (upstream MetricsProvider.GetMetrics), for
   * /stats/summary and kubelet_volume_stats_*. Throws {@link MetricsNotSupportedError} when the
   * volume cannot tell. Undefined: the plugin has no metrics (du-measured volumes are measured by
   * the stats provider itself).
   */
  getMetrics?(dir: string, signal?: AbortSignal): Promise<VolumeUsage>;
  /**
   * Grows the file system of the set-up volume in `dir` to `newSizeBytes` (upstream
   * NodeExpandableVolumePlugin.NodeExpand). Throws {@link OperationNotSupportedError} when the
   * volume needs nothing from the node to grow. Undefined: never expanded on the node.
   */
  nodeExpand?(
    spec: VolumeSpec,
    dir: string,
    newSizeBytes: number,
    signal?: AbortSignal,
  ): Promise<void>;
  /**
   * Maps a block volume (a claim of volumeMode Block in `volumeDevices`) for the pod: `ctx.dir`
   * is its link `<pods>/<uid>/volumeDevices/<escaped plugin>/<spec name>`, the host path given
   * to the runtime (upstream BlockVolumeMapper). Undefined: no block volumes.
   */
  mapDevice?(ctx: VolumeSetUpContext): Promise<MountedVolume>;
  /** Undoes {@link mapDevice}; `ctx.dir` is the pod's link. */
  unmapDevice?(ctx: VolumeTearDownContext): Promise<void>;
  /** Sets the volume up; idempotent. Throws an Error whose message is the FailedMount text. */
  setUp(ctx: VolumeSetUpContext): Promise<MountedVolume>;
  /** Removes what setUp made (unmounts tmpfs, deletes the volume dir); idempotent. */
  tearDown(ctx: VolumeTearDownContext): Promise<void>;
}

/** A volume's usage (upstream volume.Metrics). */
export interface VolumeUsage {
  /** When it was measured, in ms. */
  readonly time: number;
  readonly capacityBytes?: number;
  readonly availableBytes?: number;
  readonly usedBytes?: number;
  readonly inodes?: number;
  readonly inodesFree?: number;
  readonly inodesUsed?: number;
  /** The volume's condition, when the driver reports it. */
  readonly abnormal?: boolean;
  readonly message?: string;
}

/** The volume cannot report its usage (upstream volume.NewNotSupportedError). */
export class MetricsNotSupportedError extends Error {
  override name = "MetricsNotSupportedError";
}

/** The plugin has nothing to do for this operation (upstream NewOperationNotSupportedError). */
export class OperationNotSupportedError extends Error {
  override name = "OperationNotSupportedError";
}

/**
 * The operation may have done its work, or still be doing it (a timeout, the driver away):
 * unlike other failures it is not final (upstream !IsOperationFinishedError).
 */
export class UncertainOperationError extends Error {
  override name = "UncertainOperationError";
}

/** An attachable volume (see {@link VolumePlugin.attachment}). */
export interface VolumeAttachmentInfo {
  /** upstream UniqueVolumeName, such as `kubernetes.io/csi/<driver>^<volume handle>`. */
  readonly uniqueName: string;
}

/** The mounted volumes of one pod by volume name (for subPath and fileKeyRef lookups). */
export type PodVolumesFunc = (podUid: string) => ReadonlyMap<string, MountedVolume>;

/** `kubernetes.io/empty-dir` → `kubernetes.io~empty-dir` (upstream EscapeQualifiedName). */
export function escapePluginName(name: string): string {
  return name.replaceAll("/", "~");
}

/** The inverse of {@link escapePluginName}. */
export function unescapePluginName(name: string): string {
  return name.replaceAll("~", "/");
}

/** `<pods>/<uid>/volumes`. */
export function podVolumesDir(podsDir: string, podUid: string): string {
  return join(podsDir, podUid, "volumes");
}

/** `<pods>/<uid>/volumes/<escaped plugin>/<volume>`. */
export function podVolumeDir(
  podsDir: string,
  podUid: string,
  pluginName: string,
  volumeName: string,
): string {
  return join(podVolumesDir(podsDir, podUid), escapePluginName(pluginName), volumeName);
}

/** `<pods>/<uid>/volumeDevices`. */
export function podVolumeDevicesDir(podsDir: string, podUid: string): string {
  return join(podsDir, podUid, "volumeDevices");
}

/** `<pods>/<uid>/volumeDevices/<escaped plugin>/<volume>`: a block volume's link. */
export function podVolumeDeviceLink(
  podsDir: string,
  podUid: string,
  pluginName: string,
  volumeName: string,
): string {
  return join(podVolumeDevicesDir(podsDir, podUid), escapePluginName(pluginName), volumeName);
}

/** `<pods>/<uid>/plugins/<escaped plugin>`. */
export function podPluginDir(podsDir: string, podUid: string, pluginName: string): string {
  return join(podsDir, podUid, "plugins", escapePluginName(pluginName));
}

/** A volume's source names an object or key that is missing or invalid (the FailedMount text). */
export class VolumeSourceError extends Error {
  override name = "VolumeSourceError";
}

/**
 * A set-up step other than SetUp failed: events and logs name that step (upstream's
 * "MountVolume.WaitForAttach failed", "MountVolume.MountDevice failed") instead of SetUp.
 */
export class VolumeOperationError extends Error {
  override name = "VolumeOperationError";
  constructor(
    /** Such as `MountVolume.MountDevice`. */
    readonly operation: string,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}
