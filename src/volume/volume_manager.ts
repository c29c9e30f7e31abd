/**
 * @module
 * VolumeManager: sets up and tears down the volumes of the pods on this node. It keeps the
 * volume manager's three states (upstream `pkg/kubelet/volumemanager`): the desired state is
 * computed from a pod's spec on each call (the volumes its containers mount, a claim resolved to
 * its bound PersistentVolume by `persistent_volume_claims.ts`, each with the plugin that supports
 * it; a volume's directory is named after its spec, the PersistentVolume for a claim), the actual state is what was set up (per pod, per volume, its
 * plugin and {@link MountedVolume}), and the reconcile step runs inside
 * {@link VolumeManager.mountPodVolumes} and {@link VolumeManager.unmountPodVolumes}, called by
 * the pod worker of each pod instead of a 100 ms reconciler loop. After an agent restart the
 * actual state is empty and volumes are found again on disk under
 * `<pods>/<uid>/volumes/<escaped plugin>/<name>` (upstream reconstruction). Housekeeping calls
 * {@link VolumeManager.cleanupOrphanedPodDirs} for the directories of pods the kubelet no longer
 * knows (upstream `kubelet_volumes.go`). Talks to the volume plugins (`plugin.ts`), the
 * event recorder, the local filesystem, and the configMap and secret managers through
 * {@link PodReferences}. Calls for one pod are serialised; different pods run concurrently.
 * Given {@link VolumeMetrics} it times each operation as upstream's operation executor does
 * (verify_controller_attached_volume when a pod's volume first enters the actual state: an
 * attachable one (a CSI volume of a driver that attaches) must be reported in the node's
 * volumesInUse and listed in its volumesAttached, any other is only marked attached; volume_mount
 * per SetUp, remounts
 * included; volume_unmount per TearDown; overall_volume_mount from the volume entering the
 * desired state, or from this sync for a remount), counts the desired and actual volumes per
 * plugin at each scrape, and reports each orphaned pod directories sweep.
 */

import { join } from "node:path";
import type { V1Node, V1Pod, V1Volume } from "@kubernetes/client-node";
import type { KubeClient } from "../client/kube_client.ts";
import { type EventRecorder, podRef } from "../client/record.ts";
import { kobj, type Logger } from "../klog/klog.ts";
import { type Clock, realClock } from "../util/clock.ts";
import type { VolumeCounts, VolumeMetrics, VolumeState } from "../metrics/volume_metrics.ts";
import {
  type MountedVolume,
  podVolumeDeviceLink,
  podVolumeDevicesDir,
  podVolumeDir,
  podVolumesDir,
  specFromVolume,
  unescapePluginName,
  VolumeOperationError,
  type VolumePlugin,
  type VolumeSpec,
  type VolumeUsage,
} from "./plugin.ts";
import { createVolumeSpec } from "./persistent_volume_claims.ts";
import { expandInUseVolume } from "./node_expander.ts";
import { quantityOrUndefined } from "../util/quantity.ts";
import { errorText } from "../util/errors.ts";
import { KeyedQueue } from "../util/keyed_queue.ts";
import { Semaphore } from "../util/semaphore.ts";

/** A manager that must know a pod before its volumes are set up (configMap, secret managers). */
export interface PodReferences {
  registerPod(pod: V1Pod): void;
  unregisterPod(pod: V1Pod): void;
}

/** Options of {@link VolumeManager}. */
export interface VolumeManagerOptions {
  /** `<rootDirectory>/pods`. */
  readonly podsDirectory: string;
  /** Every volume plugin; a volume is set up by the one plugin whose canSupport accepts it. */
  readonly plugins: readonly VolumePlugin[];
  /** Receives the FailedMount events of pods. */
  readonly recorder: EventRecorder;
  readonly logger: Logger;
  /** Told of each pod before its volumes are set up, and after they are torn down. @default [] */
  readonly references?: readonly PodReferences[];
  /** Where volume operations, volume counts and orphan sweeps are recorded. @default none */
  readonly metrics?: VolumeMetrics;
  /** Times the operations. @default the wall clock */
  readonly clock?: Clock;
  /**
   * Reads claims, their PersistentVolumes and this node (volumesAttached) from the apiserver.
   * @default none: claims fail with "no kubeClient defined" (standalone mode)
   */
  readonly client?: Pick<KubeClient, "get" | "patch">;
  /** This node's name, to read its volumesAttached. */
  readonly nodeName?: string;
}

/**
 * Some volume a pod's containers mount is not set up; the message is upstream
 * WaitForAttachAndMount's: `unmounted volumes=[a b], unattached volumes=[], failed to process
 * volumes=[]: <error>`.
 */
export class VolumeMountError extends Error {
  override name = "VolumeMountError";
  /** Volumes the containers mount that are not set up, sorted. */
  readonly unmountedVolumes: readonly string[];
  /** Attachable volumes not attached, sorted; none of our plugins is attachable. */
  readonly unattachedVolumes: readonly string[];
  /** Volumes no plugin could take (unsupported type), sorted. */
  readonly volumesNotProcessed: readonly string[];

  constructor(
    unmounted: readonly string[],
    unattached: readonly string[],
    notProcessed: readonly string[],
    cause: Error,
  ) {
    super(
      `unmounted volumes=${goList(unmounted)}, unattached volumes=${
        goList(unattached)
      }, failed to process volumes=${goList(notProcessed)}: ${cause.message}`,
      { cause },
    );
    this.unmountedVolumes = unmounted;
    this.unattachedVolumes = unattached;
    this.volumesNotProcessed = notProcessed;
  }
}

/** Some volumes of a pod could not be torn down; each is in {@link errors} (Go's aggregate text). */
export class VolumeUnmountError extends Error {
  override name = "VolumeUnmountError";
  readonly errors: readonly Error[];

  constructor(errors: readonly Error[]) {
    super(aggregateMessage(errors), { cause: errors[0] });
    this.errors = errors;
  }
}

/** A volume in the actual state: set up by `pluginName`, mounted from `mounted.hostPath`. */
interface ActualVolume {
  readonly pluginName: string;
  /** The spec's name, naming its directory (a claim's PersistentVolume). */
  readonly specName: string;
  readonly mounted: MountedVolume;
  /** A block volume, mapped at the pod's `volumeDevices` link. */
  readonly block?: boolean;
  /** upstream UniqueVolumeName of an attachable volume. */
  readonly attachableName?: string;
  /**
   * A claim's size in bytes as the node knows it: its capacity when mounted, then what the node
   * grew it to (upstream's persistentVolumeSize, InitializeClaimSize).
   */
  size?: number;
}

/** A volume in the desired state: its plugin and when its mount was requested (ms). */
interface DesiredVolume {
  readonly pluginName: string;
  readonly requestedAt: number;
  /** upstream UniqueVolumeName of an attachable volume. */
  readonly attachableName?: string;
}

interface PodState {
  /** The last pod seen by mountPodVolumes; undefined after a restart. */
  pod?: V1Pod;
  readonly volumes: Map<string, ActualVolume>;
  /** The desired state: the volumes of the last mountPodVolumes, until the pod's unmount. */
  desired: Map<string, DesiredVolume>;
  /** Volumes marked attached (verified), until torn down. */
  readonly attached: Set<string>;
}

/** A volume directory found on disk. */
interface DiskVolume {
  readonly pluginName: string;
  /** The directory's name: the volume's spec name. */
  readonly volumeName: string;
  /** The pod volume's name, for a volume of the actual state. */
  readonly outerName?: string;
  /** The pod's link of a block volume (`dir` is then that link). */
  readonly block?: boolean;
  readonly dir: string;
}

/** A pod's volume dirs, and anything else under its volumes dir that is not one. */
interface DiskScan {
  readonly volumes: DiskVolume[];
  readonly other: string[];
}

/** Sets up and tears down pod volumes; see the module documentation. */
export class VolumeManager {
  readonly #o: VolumeManagerOptions;
  /** The actual state of the world, by pod UID. */
  readonly #pods = new Map<string, PodState>();
  /** Each pod's calls, one at a time, so calls for one pod never interleave. */
  readonly #queue = new KeyedQueue();

  readonly #clock: Clock;
  /** The attachable volumes the node status last reported in use. */
  #reportedInUse = new Set<string>();
  /**
   * Attachable volumes found set up on disk at start, by volume dir, until torn down; undefined
   * until {@link reconstruct} has looked.
   */
  #reconstructed: Map<string, string> | undefined;

  constructor(opts: VolumeManagerOptions) {
    this.#o = opts;
    this.#clock = opts.clock ?? realClock;
    opts.metrics?.setVolumeCountsSource(() => this.volumeCounts());
  }

  /**
   * Volumes per state and plugin, as volume_manager_total_volumes shows them: each pod's
   * desired volumes, and each pod's set-up volumes.
   */
  volumeCounts(): VolumeCounts {
    const desired = new Map<string, number>();
    const actual = new Map<string, number>();
    const add = (m: Map<string, number>, plugin: string) => m.set(plugin, (m.get(plugin) ?? 0) + 1);
    for (const state of this.#pods.values()) {
      for (const v of state.desired.values()) add(desired, v.pluginName);
      for (const v of state.volumes.values()) add(actual, v.pluginName);
    }
    return new Map<VolumeState, Map<string, number>>([
      ["desired_state_of_world", desired],
      ["actual_state_of_world", actual],
    ]);
  }

  /**
   * Sets up the volumes the pod's containers mount (upstream WaitForAttachAndMount with the
   * reconciler's mount pass): a volume not yet set up, and again one whose plugin requires a
   * remount; volumes of the pod no longer desired are torn down first. Each failed SetUp is a
   * FailedMount event; a failed remount keeps the previous mount. Throws
   * {@link VolumeMountError} when some desired volume is not set up after all were tried.
   */
  mountPodVolumes(signal: AbortSignal, pod: V1Pod): Promise<void> {
    const uid = pod.metadata?.uid ?? "";
    return this.#queue.run(uid, () => this.#mount(signal, pod, uid));
  }

  /** The volumes of the pod that are set up, by volume name. */
  podVolumes(podUid: string): ReadonlyMap<string, MountedVolume> {
    const out = new Map<string, MountedVolume>();
    for (const [name, v] of this.#pods.get(podUid)?.volumes ?? []) out.set(name, v.mounted);
    return out;
  }

  /**
   * The pod's set-up volumes whose plugin reports their usage (upstream ListVolumesForPod with
   * a MetricsProvider), by pod volume name.
   */
  volumesWithMetrics(
    podUid: string,
  ): { name: string; getMetrics(signal?: AbortSignal): Promise<VolumeUsage> }[] {
    const out: { name: string; getMetrics(signal?: AbortSignal): Promise<VolumeUsage> }[] = [];
    for (const [name, v] of this.#pods.get(podUid)?.volumes ?? []) {
      const plugin = this.#o.plugins.find((p) => p.name === v.pluginName);
      const get = plugin?.getMetrics?.bind(plugin);
      if (!get || v.block) continue;
      const dir = podVolumeDir(this.#o.podsDirectory, podUid, v.pluginName, v.specName);
      out.push({ name, getMetrics: (signal) => get(dir, signal) });
    }
    return out;
  }

  /** Whether the pod may still have volumes: in the actual state, or anything on disk. */
  podVolumesExist(podUid: string): boolean {
    if ((this.#pods.get(podUid)?.volumes.size ?? 0) > 0) return true;
    const disk = this.#scanDisk(podUid);
    return disk.volumes.length > 0 || disk.other.length > 0;
  }

  /**
   * Tears down every volume of the pod, those of the actual state and those found on disk,
   * then removes its empty volume dirs and unregisters it from the references. Throws
   * {@link VolumeUnmountError} naming each volume left (a failed TearDown, an unknown plugin).
   */
  unmountPodVolumes(signal: AbortSignal, podUid: string): Promise<void> {
    return this.#queue.run(podUid, () => this.#unmountAll(signal, podUid));
  }

  /**
   * Upstream cleanupOrphanedPodDirs: for each pod dir whose UID is not in `keepUids`, tears
   * down its volumes and, once none is left, removes the pod dir without crossing into other
   * filesystems. Symlinks are removed, never followed; errors of one pod are logged and the
   * others go on. Up to {@link ORPHAN_CLEANUP_CONCURRENCY} pods are cleaned up at once
   * (upstream: one after another), so that the housekeeping after a mass deletion does not wait
   * for each pod's directory removals in turn.
   */
  async cleanupOrphanedPodDirs(
    signal: AbortSignal,
    keepUids: ReadonlySet<string>,
  ): Promise<void> {
    const { podsDirectory, logger } = this.#o;
    const candidates = new Set<string>();
    try {
      for await (const e of Deno.readDir(podsDirectory)) {
        // A symlink is not a directory here: it is never followed.
        if (e.isDirectory) candidates.add(e.name);
      }
    } catch (e) {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    }
    // Pods known only in memory (their dir removed under us) still have volumes to tear down.
    for (const uid of this.#pods.keys()) candidates.add(uid);

    const limit = new Semaphore(ORPHAN_CLEANUP_CONCURRENCY);
    let orphans = 0;
    // `keepUids` is looked at again when a pod's turn comes: a pod dispatched meanwhile (a
    // static pod put back under its UID) joins it and is left alone.
    const cleanup = (uid: string) =>
      this.#queue.run(uid, async () => {
        if (keepUids.has(uid)) return;
        orphans++;
        await this.#cleanupOrphan(signal, uid);
      });
    const results = await Promise.allSettled(
      [...candidates].filter((uid) => !keepUids.has(uid)).map((uid) =>
        limit.run(() => cleanup(uid), signal)
      ),
    );
    // Aborted: the cleanups under way have settled; the sweep counts for nothing.
    signal.throwIfAborted();
    const errors = results.flatMap((r) => r.status === "rejected" ? [asError(r.reason)] : []);
    this.#o.metrics?.setOrphanSweep(orphans, errors.length);
    // Upstream's logSpew: one line for the lot, each at a high verbosity.
    const first = errors[0];
    if (first) {
      logger.error(first, "There were many similar errors. Turn up verbosity to see them.", {
        numErrs: errors.length,
      });
      for (const err of errors) logger.v(5).info("Orphan pod", { err: err.message });
    }
  }

  // ---- Reconciling one pod ------------------------------------------------------------------

  async #mount(signal: AbortSignal, pod: V1Pod, uid: string): Promise<void> {
    signal.throwIfAborted();
    const { logger, recorder } = this.#o;
    // The configMap and secret managers watch what the pod references before plugins read it.
    for (const r of this.#o.references ?? []) r.registerPod(pod);
    const state = this.#state(uid);
    state.pod = pod;

    // The desired state: volumes some container mounts, each with its spec and plugin.
    const used = usedVolumeNames(pod);
    const desired = new Map<
      string,
      {
        volume: V1Volume;
        spec: VolumeSpec;
        plugin: VolumePlugin;
        attachableName?: string;
        remount: boolean;
      }
    >();
    const notProcessed: string[] = [];
    const processErrors: string[] = [];
    for (const volume of pod.spec?.volumes ?? []) {
      if (!used.all.has(volume.name)) {
        logger.v(4).info("Skipping unused volume", { pod: kobj(pod), volumeName: volume.name });
        continue;
      }
      try {
        const spec = await this.#createVolumeSpec(signal, pod, volume, used);
        const plugin = this.#findPluginBySpec(spec);
        const attachment = await plugin.attachment?.(spec, signal);
        const remount = plugin.requiresRemount ||
          (await plugin.requiresRemountFor?.(spec, signal)) === true;
        desired.set(volume.name, {
          volume,
          spec,
          plugin,
          remount,
          ...(attachment ? { attachableName: attachment.uniqueName } : {}),
        });
      } catch (e) {
        if (signal.aborted) throw e;
        logger.error(e, "Error processing volume", { pod: kobj(pod), volumeName: volume.name });
        notProcessed.push(volume.name);
        processErrors.push(asError(e).message);
      }
    }

    // The desired state keeps when each mount was first asked for; a remount is asked anew.
    const requested = this.#clock.now();
    const before = state.desired;
    state.desired = new Map();
    for (const [name, { plugin, attachableName, remount }] of desired) {
      const old = before.get(name);
      const keep = old && old.pluginName === plugin.name && !remount;
      state.desired.set(name, {
        pluginName: plugin.name,
        requestedAt: keep ? old.requestedAt : requested,
        ...(attachableName ? { attachableName } : {}),
      });
    }
    // A volume that could not be processed this time (its claim unreadable, say) may still be
    // mounted: nothing is torn down until every volume of the pod is known again.
    if (notProcessed.length === 0) {
      // Unmount before mount, as the reconciler does.
      const dirs = new Set<string>();
      for (const { plugin, spec } of desired.values()) {
        dirs.add(this.#volumeDir(uid, plugin.name, spec.name, spec.block === true));
      }
      await this.#tearDownUndesired(signal, uid, dirs);
    }

    const metrics = this.#o.metrics;
    let firstSetUpError: Error | undefined;
    const unattached: string[] = [];
    for (const [name, { volume, spec, plugin, attachableName, remount }] of desired) {
      signal.throwIfAborted();
      const previous = state.volumes.get(name);
      // A mounted claim whose volume grew is grown on the node, remounted or not.
      if (previous) await this.#expandIfGrown(signal, pod, uid, spec, plugin, previous);
      if (previous && !remount) continue;
      const fail = (operation: string, err: Error) => {
        firstSetUpError ??= err;
        recorder.event(
          podRef(pod),
          "Warning",
          "FailedMount",
          `${operation} failed for volume "${spec.name}" : ${err.message}`,
        );
        logger.error(err, `${operation} failed for volume "${spec.name}"`, {
          pod: kobj(pod),
          podUID: uid,
        });
      };
      if (!state.attached.has(name)) {
        // upstream VerifyControllerAttachedVolume: the attach-detach controller attached an
        // attachable volume once the node reported it in use; any other is marked attached.
        const t0 = this.#clock.now();
        const verifyError = attachableName
          ? await this.#verifyControllerAttached(signal, attachableName)
          : undefined;
        metrics?.observeOperation(
          plugin.name,
          "verify_controller_attached_volume",
          (this.#clock.now() - t0) / 1000,
          verifyError !== undefined,
        );
        if (verifyError) {
          unattached.push(name);
          // upstream GenerateError: the step, the volume, then the cause if any.
          const text = verifyError.cause === undefined
            ? `${verifyError.message} for volume "${spec.name}" `
            : `${verifyError.message} for volume "${spec.name}" : ${errorText(verifyError.cause)}`;
          firstSetUpError ??= new Error(text, { cause: verifyError });
          recorder.event(podRef(pod), "Warning", "FailedMount", text);
          logger.error(verifyError, text, { pod: kobj(pod), podUID: uid });
          continue;
        }
        state.attached.add(name);
      }
      const block = spec.block === true;
      const dir = this.#volumeDir(uid, plugin.name, spec.name, block);
      const opName = block ? "map_volume" : "volume_mount";
      const t0 = this.#clock.now();
      try {
        const ctx = { pod, volume, spec, dir, signal };
        const mounted = block && plugin.mapDevice
          ? await plugin.mapDevice(ctx)
          : await plugin.setUp(ctx);
        const now = this.#clock.now();
        metrics?.observeOperation(plugin.name, opName, (now - t0) / 1000, false);
        const asked = state.desired.get(name)?.requestedAt ?? t0;
        metrics?.observeEndToEnd(plugin.name, "overall_volume_mount", (now - asked) / 1000);
        // A remount keeps the size the node already grew the volume to.
        const size = previous?.size ??
          quantityOrUndefined(spec.claim?.status?.capacity?.["storage"]);
        state.volumes.set(name, {
          pluginName: plugin.name,
          specName: spec.name,
          mounted,
          ...(block ? { block } : {}),
          ...(attachableName ? { attachableName } : {}),
          ...(size !== undefined ? { size } : {}),
        });
        // Remounts happen on every sync: upstream logs them only at a high verbosity.
        const done = block ? "MapVolume.MapPodDevice" : "MountVolume.SetUp";
        logger.v(previous ? 4 : 1).info(`${done} succeeded for volume "${spec.name}"`, {
          pod: kobj(pod),
          podUID: uid,
        });
      } catch (e) {
        if (signal.aborted) throw e;
        metrics?.observeOperation(plugin.name, opName, (this.#clock.now() - t0) / 1000, true);
        // A failed remount leaves the previous mount in the actual state.
        const err = asError(e);
        const operation = e instanceof VolumeOperationError
          ? e.operation
          : block
          ? "MapVolume.MapPodDevice"
          : "MountVolume.SetUp";
        fail(operation, err);
      }
    }

    // Upstream returns as soon as every expected volume is mounted, whatever else failed.
    const unmounted = [...used.all].filter((n) => !state.volumes.has(n) && isSpecVolume(pod, n))
      .sort();
    if (unmounted.length === 0) {
      logger.v(3).info("All volumes are attached and mounted for pod", { pod: kobj(pod) });
      return;
    }
    const cause = processErrors.length > 0
      ? new Error(processErrors.join("; "))
      : firstSetUpError ?? new Error("volumes are not set up");
    throw new VolumeMountError(unmounted, unattached.sort(), notProcessed.sort(), cause);
  }

  /** upstream's in-use expansion (node_expander.ts) of a mounted claim whose PV grew. */
  async #expandIfGrown(
    signal: AbortSignal,
    pod: V1Pod,
    uid: string,
    spec: VolumeSpec,
    plugin: VolumePlugin,
    actual: ActualVolume,
  ): Promise<void> {
    const client = this.#o.client;
    if (!client || actual.size === undefined || !spec.claim || !plugin.nodeExpand) return;
    try {
      actual.size = await expandInUseVolume({
        client,
        recorder: this.#o.recorder,
        nodeName: this.#o.nodeName ?? "",
        pod,
        spec,
        plugin,
        dir: this.#volumeDir(uid, plugin.name, spec.name, actual.block === true),
        currentBytes: actual.size,
        signal,
      });
    } catch (e) {
      if (signal.aborted) throw e;
      // Reported in events; the pod keeps its volume at the old size, the next sync tries again.
      this.#o.logger.error(e, "Failed to expand a volume in use", {
        pod: kobj(pod),
        volumeName: spec.name,
      });
    }
  }

  /**
   * upstream GetVolumesInUse: the unique names of the attachable volumes desired or set up on
   * this node, sorted, for node.status.volumesInUse.
   */
  volumesInUse(): string[] | undefined {
    if (!this.#reconstructed) return undefined;
    const names = new Set<string>(this.#reconstructed.values());
    for (const state of this.#pods.values()) {
      for (const v of state.desired.values()) if (v.attachableName) names.add(v.attachableName);
      for (const v of state.volumes.values()) if (v.attachableName) names.add(v.attachableName);
    }
    return [...names].sort();
  }

  /**
   * upstream reconstruction, for the node status: finds the attachable volumes set up on disk
   * (an agent restart), which stay in use until torn down. Until it has run, volumesInUse()
   * is undefined and the node status leaves volumesInUse as it is, so that the attach-detach
   * controller never detaches a volume still mounted here. A volume it cannot read is logged
   * and left out.
   */
  async reconstruct(signal: AbortSignal): Promise<void> {
    const found = new Map<string, string>();
    let pods: string[] = [];
    try {
      pods = [...Deno.readDirSync(this.#o.podsDirectory)].filter((e) => e.isDirectory)
        .map((e) => e.name);
    } catch (e) {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    }
    for (const uid of pods) {
      for (const v of this.#scanDisk(uid).volumes) {
        const plugin = this.#o.plugins.find((p) => p.name === v.pluginName);
        if (!plugin?.reconstructAttachment) continue;
        try {
          const a = await plugin.reconstructAttachment(v.dir, signal);
          if (a) found.set(v.dir, a.uniqueName);
        } catch (e) {
          if (signal.aborted) throw e;
          this.#o.logger.error(e, "Could not construct volume information", {
            podUID: uid,
            volumeName: v.volumeName,
            pluginName: v.pluginName,
          });
        }
      }
    }
    this.#reconstructed = found;
  }

  /** upstream MarkVolumesAsReportedInUse: the node status now lists these volumes in use. */
  markVolumesReportedInUse(names: readonly string[]): void {
    this.#reportedInUse = new Set(names);
  }

  /** The error of upstream VerifyControllerAttachedVolume for an attachable volume, if any. */
  async #verifyControllerAttached(
    signal: AbortSignal,
    uniqueName: string,
  ): Promise<Error | undefined> {
    if (!this.#reportedInUse.has(uniqueName)) {
      return new Error(
        "Volume has not been added to the list of VolumesInUse in the node's volume status",
      );
    }
    let node: V1Node;
    try {
      if (!this.#o.client || !this.#o.nodeName) throw new Error("no kubeClient defined");
      node = await this.#o.client.get<V1Node>(
        `/api/v1/nodes/${encodeURIComponent(this.#o.nodeName)}`,
        signal,
      );
    } catch (e) {
      if (signal.aborted) throw e;
      return new Error("VerifyControllerAttachedVolume failed fetching node from API server", {
        cause: e,
      });
    }
    if ((node.status?.volumesAttached ?? []).some((v) => v.name === uniqueName)) return undefined;
    return new Error("Volume not attached according to node status");
  }

  /** The spec of a pod volume, a claim resolved to its PersistentVolume. */
  async #createVolumeSpec(
    signal: AbortSignal,
    pod: V1Pod,
    volume: V1Volume,
    used: UsedVolumes,
  ): Promise<VolumeSpec> {
    const claim = volume.persistentVolumeClaim !== undefined || volume.ephemeral !== undefined;
    if (!claim) {
      if (used.devices.has(volume.name)) {
        throw new Error(
          `volume ${volume.name} is specified in volumeDevices: only a persistentVolumeClaim or ephemeral volume of volumeMode Block can be`,
        );
      }
      return specFromVolume(volume);
    }
    if (!this.#o.client) {
      throw new Error(
        `volume ${volume.name}: persistent volume claims need an apiserver: no kubeClient defined`,
      );
    }
    const spec = await createVolumeSpec(pod, volume, {
      client: this.#o.client,
      mounts: used.mounts,
      devices: used.devices,
      signal,
    });
    return used.devices.has(volume.name) ? { ...spec, block: true } : spec;
  }

  /** Tears down the pod's volumes that are set up or on disk but whose dir is not desired. */
  async #tearDownUndesired(
    signal: AbortSignal,
    uid: string,
    desiredDirs: ReadonlySet<string>,
  ): Promise<void> {
    const { logger } = this.#o;
    for (const target of this.#teardownTargets(uid)) {
      if (desiredDirs.has(target.dir)) continue;
      signal.throwIfAborted();
      try {
        await this.#tearDown(signal, uid, target);
      } catch (e) {
        if (signal.aborted) throw e;
        // Kept in the actual state (or on disk): the next sync tries again.
        logger.error(e, "Failed to tear down a volume no longer in the pod's spec", {
          podUID: uid,
          volumeName: target.volumeName,
        });
      }
    }
  }

  async #unmountAll(signal: AbortSignal, uid: string): Promise<void> {
    signal.throwIfAborted();
    // The pod leaves the desired state: everything of it is to be torn down.
    const podState = this.#pods.get(uid);
    if (podState) podState.desired = new Map();
    const errors: Error[] = [];
    for (const target of this.#teardownTargets(uid)) {
      signal.throwIfAborted();
      try {
        await this.#tearDown(signal, uid, target);
      } catch (e) {
        if (signal.aborted) throw e;
        errors.push(asError(e));
      }
    }
    await this.#removeEmptyVolumeDirs(uid);

    const state = this.#pods.get(uid);
    if (state?.pod) {
      for (const r of this.#o.references ?? []) r.unregisterPod(state.pod);
      state.pod = undefined;
    }
    if (state && state.volumes.size === 0) this.#pods.delete(uid);
    if (errors.length > 0) throw new VolumeUnmountError(errors);
  }

  /** Every volume of the pod to tear down: the actual state's, then those only on disk. */
  #teardownTargets(uid: string): DiskVolume[] {
    const out: DiskVolume[] = [];
    const seen = new Set<string>();
    for (const [outerName, v] of this.#pods.get(uid)?.volumes ?? []) {
      const dir = this.#volumeDir(uid, v.pluginName, v.specName, v.block === true);
      out.push({
        pluginName: v.pluginName,
        volumeName: v.specName,
        outerName,
        dir,
        ...(v.block ? { block: true } : {}),
      });
      seen.add(dir);
    }
    for (const v of this.#scanDisk(uid).volumes) if (!seen.has(v.dir)) out.push(v);
    return out;
  }

  async #tearDown(signal: AbortSignal, uid: string, target: DiskVolume): Promise<void> {
    const { volumeName, dir, pluginName } = target;
    const plugin = this.#o.plugins.find((p) => p.name === pluginName);
    if (!plugin) {
      throw new Error(
        `no volume plugin matched name: ${pluginName}: tearing down "${dir}" is not supported yet`,
      );
    }
    const t0 = this.#clock.now();
    const observe = (failed: boolean) =>
      this.#o.metrics?.observeOperation(
        pluginName,
        target.block ? "unmap_volume" : "volume_unmount",
        (this.#clock.now() - t0) / 1000,
        failed,
      );
    try {
      if (target.block) {
        if (!plugin.unmapDevice) {
          throw new Error(`volume plugin ${pluginName} does not support block volumes`);
        }
        await plugin.unmapDevice({ podUid: uid, volumeName, dir, signal });
      } else {
        await plugin.tearDown({ podUid: uid, volumeName, dir, signal });
      }
    } catch (e) {
      if (signal.aborted) throw e;
      observe(true);
      const err = asError(e);
      const op = target.block ? "UnmapVolume.UnmapBlockVolume" : "UnmountVolume.TearDown";
      throw new Error(`${op} failed for volume "${volumeName}" : ${err.message}`, {
        cause: err,
      });
    }
    observe(false);
    this.#reconstructed?.delete(dir);
    const state = this.#pods.get(uid);
    const outer = target.outerName ?? volumeName;
    if (state?.volumes.get(outer)?.pluginName === pluginName) {
      state.volumes.delete(outer);
      // Unmounted: a new mount verifies its attachment again.
      state.attached.delete(outer);
    }
    this.#o.logger.info(`UnmountVolume.TearDown succeeded for volume "${volumeName}"`, {
      podUID: uid,
      pluginName,
    });
  }

  /** Removes the pod's empty plugin dirs and its volumes dir when empty (rmdir only). */
  async #removeEmptyVolumeDirs(uid: string): Promise<void> {
    for (
      const dir of [
        podVolumesDir(this.#o.podsDirectory, uid),
        podVolumeDevicesDir(this.#o.podsDirectory, uid),
      ]
    ) {
      const info = await lstatOrUndefined(dir);
      if (!info?.isDirectory) continue;
      for await (const e of Deno.readDir(dir)) {
        if (e.isDirectory) await rmdirIfEmpty(join(dir, e.name));
      }
      await rmdirIfEmpty(dir);
    }
  }

  /** Upstream cleanupOrphanedPodDirs for one pod, under the pod's lock. */
  async #cleanupOrphan(signal: AbortSignal, uid: string): Promise<void> {
    let teardownError: Error | undefined;
    try {
      await this.#unmountAll(signal, uid);
    } catch (e) {
      if (signal.aborted) throw e;
      teardownError = asError(e);
    }
    // If volumes are not torn down, removing the directory could lose data.
    if (this.podVolumesExist(uid)) {
      this.#o.logger.v(3).info("Orphaned pod found, but volumes are not cleaned up", {
        podUID: uid,
      });
      throw teardownError ??
        new Error(`orphaned pod "${uid}" found, but volume paths are still present on disk`);
    }
    const podDir = join(this.#o.podsDirectory, uid);
    const info = await lstatOrUndefined(podDir);
    if (!info?.isDirectory) return;
    const errors: Error[] = [];
    for await (const e of Deno.readDir(podDir)) {
      const path = join(podDir, e.name);
      // Never removed recursively: that could lose data of a volume still mounted there.
      if (e.name === "volumes" || e.name === "volumeDevices") {
        errors.push(new Error(`volumes subdir was found after it was removed: ${path}`));
        continue;
      }
      try {
        await removeAllOneFilesystem(path, info.dev);
      } catch (err) {
        errors.push(asError(err));
      }
    }
    if (errors.length > 0) throw new VolumeUnmountError(errors);
    this.#o.logger.v(3).info("Orphaned pod found, removing", { podUID: uid });
    await Deno.remove(podDir);
  }

  // ---- Helpers ------------------------------------------------------------------------------

  /** A volume's directory, or a block volume's link. */
  #volumeDir(uid: string, pluginName: string, specName: string, block: boolean): string {
    return block
      ? podVolumeDeviceLink(this.#o.podsDirectory, uid, pluginName, specName)
      : podVolumeDir(this.#o.podsDirectory, uid, pluginName, specName);
  }

  #state(uid: string): PodState {
    let s = this.#pods.get(uid);
    if (!s) {
      this.#pods.set(uid, s = { volumes: new Map(), desired: new Map(), attached: new Set() });
    }
    return s;
  }

  /** Upstream FindPluginBySpec, with "not supported yet" naming the volume's source field. */
  #findPluginBySpec(spec: VolumeSpec): VolumePlugin {
    const { volume, persistentVolume: pv } = spec;
    const matches = this.#o.plugins.filter((p) =>
      pv ? p.canSupportPersistentVolume?.(pv) === true : p.canSupport(volume)
    );
    const [only] = matches;
    if (only && matches.length === 1) {
      if (spec.block && !only.mapDevice) {
        throw new Error(`volume plugin ${only.name} does not support block volumes`);
      }
      return only;
    }
    if (matches.length > 1) {
      throw new Error(`multiple volume plugins matched: ${matches.map((p) => p.name).join(",")}`);
    }
    if (pv) {
      const field = volumeSourceField(pv.spec ?? {}, PV_SPEC_FIELDS);
      throw new Error(
        field === undefined
          ? `PersistentVolume ${spec.name} has no volume source`
          : `PersistentVolume ${spec.name}: volume type "${field}" is not supported yet`,
      );
    }
    const field = volumeSourceField(volume, ["name"]);
    throw new Error(
      field === undefined
        ? `volume "${volume.name}" has no volume source`
        : `volume type "${field}" is not supported yet`,
    );
  }

  /**
   * The pod's volume dirs on disk, `volumes/<escaped plugin>/<name>`; only real directories
   * count, and nothing is followed through a symlink. Anything else found is in `other`.
   * Synchronous: every sync of a pod scans its directory, local and small (listing the
   * directories volumes are mounted on does not enter them), where each asynchronous call
   * costs a thread-pool round trip.
   */
  #scanDisk(uid: string): DiskScan {
    const scan: DiskScan = { volumes: [], other: [] };
    const volumesDir = podVolumesDir(this.#o.podsDirectory, uid);
    const podDir = lstatSyncOrUndefined(join(this.#o.podsDirectory, uid));
    if (!podDir?.isDirectory) return scan;
    // Block volumes: `volumeDevices/<escaped plugin>/<name>`, each a link.
    const devicesDir = podVolumeDevicesDir(this.#o.podsDirectory, uid);
    if (lstatSyncOrUndefined(devicesDir)?.isDirectory) {
      for (const p of Deno.readDirSync(devicesDir)) {
        const pluginDir = join(devicesDir, p.name);
        if (!p.isDirectory) {
          scan.other.push(pluginDir);
          continue;
        }
        for (const v of Deno.readDirSync(pluginDir)) {
          const dir = join(pluginDir, v.name);
          scan.volumes.push({
            pluginName: unescapePluginName(p.name),
            volumeName: v.name,
            dir,
            block: true,
          });
        }
      }
    }
    const info = lstatSyncOrUndefined(volumesDir);
    if (!info) return scan;
    if (!info.isDirectory) {
      scan.other.push(volumesDir);
      return scan;
    }
    for (const p of Deno.readDirSync(volumesDir)) {
      const pluginDir = join(volumesDir, p.name);
      if (!p.isDirectory) {
        scan.other.push(pluginDir);
        continue;
      }
      for (const v of Deno.readDirSync(pluginDir)) {
        const dir = join(pluginDir, v.name);
        if (v.isDirectory) {
          scan.volumes.push({ pluginName: unescapePluginName(p.name), volumeName: v.name, dir });
        } else scan.other.push(dir);
      }
    }
    return scan;
  }
}

/** The volume names containers use (upstream GetPodVolumeNames). */
interface UsedVolumes {
  /** Mounted or mapped as a device. */
  readonly all: Set<string>;
  readonly mounts: Set<string>;
  readonly devices: Set<string>;
}

/** Volume names some container mounts or maps as a device (upstream GetPodVolumeNames). */
function usedVolumeNames(pod: V1Pod): UsedVolumes {
  const used: UsedVolumes = { all: new Set(), mounts: new Set(), devices: new Set() };
  const spec = pod.spec;
  const containers = [
    ...(spec?.initContainers ?? []),
    ...(spec?.containers ?? []),
    ...(spec?.ephemeralContainers ?? []),
  ];
  for (const c of containers) {
    for (const m of c.volumeMounts ?? []) used.mounts.add(m.name);
    for (const d of c.volumeDevices ?? []) used.devices.add(d.name);
  }
  for (const n of [...used.mounts, ...used.devices]) used.all.add(n);
  return used;
}

function isSpecVolume(pod: V1Pod, name: string): boolean {
  return (pod.spec?.volumes ?? []).some((v) => v.name === name);
}

/** Orphaned pods whose directories {@link VolumeManager.cleanupOrphanedPodDirs} cleans at once. */
export const ORPHAN_CLEANUP_CONCURRENCY = 8;

/** PersistentVolumeSpec fields that are not its volume source. */
const PV_SPEC_FIELDS = [
  "accessModes",
  "capacity",
  "claimRef",
  "mountOptions",
  "nodeAffinity",
  "persistentVolumeReclaimPolicy",
  "storageClassName",
  "volumeAttributesClassName",
  "volumeMode",
];

/** The field naming the volume's source, such as `persistentVolumeClaim`. */
function volumeSourceField(object: object, notSources: readonly string[]): string | undefined {
  for (const [key, value] of Object.entries(object)) {
    if (!notSources.includes(key) && value !== undefined && value !== null) return key;
  }
  return undefined;
}

/** Go's `%v` of a string slice: `[a b]`. */
function goList(items: readonly string[]): string {
  return `[${items.join(" ")}]`;
}

/** Go's utilerrors aggregate text: the only message, or `[a, b]`. */
function aggregateMessage(errors: readonly Error[]): string {
  if (errors.length === 1) return errors[0]?.message ?? "";
  return `[${errors.map((e) => e.message).join(", ")}]`;
}

function asError(e: unknown): Error {
  return e instanceof Error ? e : new Error(String(e));
}

function lstatSyncOrUndefined(path: string): Deno.FileInfo | undefined {
  try {
    return Deno.lstatSync(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return undefined;
    throw e;
  }
}

async function lstatOrUndefined(path: string): Promise<Deno.FileInfo | undefined> {
  try {
    return await Deno.lstat(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return undefined;
    throw e;
  }
}

/** rmdir(2): removes `path` only when it is an empty directory. */
async function rmdirIfEmpty(path: string): Promise<void> {
  try {
    await Deno.remove(path);
  } catch (e) {
    // Not empty (a volume left behind, reported by whoever left it) or already gone.
    if (e instanceof Deno.errors.NotFound || isNotEmpty(e)) return;
    throw e;
  }
}

function isNotEmpty(e: unknown): boolean {
  return e instanceof Error && (e as { code?: string }).code === "ENOTEMPTY";
}

/**
 * Upstream RemoveAllOneFilesystem: removes `path` and what is under it, unlinking symlinks
 * rather than following them, and refusing to descend into a directory on another device (a
 * mount point), which would delete what is mounted there.
 */
async function removeAllOneFilesystem(path: string, dev: number): Promise<void> {
  const info = await lstatOrUndefined(path);
  if (!info) return;
  if (!info.isDirectory) {
    await Deno.remove(path);
    return;
  }
  if (info.dev !== dev) throw new Error(`cannot delete directory ${path}: it is a mount point`);
  for await (const e of Deno.readDir(path)) await removeAllOneFilesystem(join(path, e.name), dev);
  await Deno.remove(path);
}
