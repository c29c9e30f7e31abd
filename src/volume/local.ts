/**
 * @module
 * The local volume plugin, `kubernetes.io/local-volume`: a PersistentVolume with a `local` source
 * (a directory of this node, which the PV's node affinity keeps its pods on), bind-mounted into
 * the pod's volume dir `<pods>/<uid>/volumes/kubernetes.io~local-volume/<pv>` (read-only with a
 * read-only claim, with the PV's mount options), the pod's fsGroup applied when writable; torn
 * down by unmounting and removing that dir. A local PV on a block device (formatted and mounted
 * once for the node by upstream) is refused, saying so.
 * Corresponds to upstream `pkg/volume/local/local.go` (localVolumeMounter.SetUpAt,
 * localVolumeUnmounter.TearDownAt).
 */

import type { V1PersistentVolume, V1Volume } from "@kubernetes/client-node";
import type { Logger } from "../klog/klog.ts";
import type { Mounter } from "../util/mount.ts";
import { statPath } from "../privilege/launcher_calls.ts";
import { setVolumeOwnership } from "./empty_dir.ts";
import type {
  MountedVolume,
  VolumePlugin,
  VolumeSetUpContext,
  VolumeTearDownContext,
} from "./plugin.ts";

/** The plugin's upstream name. */
export const LOCAL_VOLUME_PLUGIN_NAME = "kubernetes.io/local-volume";

/** Options of {@link LocalVolumePlugin}. */
export interface LocalVolumePluginOptions {
  readonly mounter: Pick<Mounter, "mount" | "unmount" | "mountAt">;
  readonly logger: Logger;
  /** What the path is. @default the launcher's stat (the path may be anywhere on the host) */
  readonly stat?: (path: string) => Promise<{ isDirectory: boolean; isFile: boolean }>;
}

/** The local volume plugin; see the module documentation. */
export class LocalVolumePlugin implements VolumePlugin {
  readonly name = LOCAL_VOLUME_PLUGIN_NAME;
  readonly requiresRemount = false;
  readonly #o: LocalVolumePluginOptions;

  constructor(opts: LocalVolumePluginOptions) {
    this.#o = opts;
  }

  canSupport(_volume: V1Volume): boolean {
    return false;
  }

  canSupportPersistentVolume(pv: V1PersistentVolume): boolean {
    return pv.spec?.local !== undefined && pv.spec.local !== null;
  }

  /** upstream SetUpAt: a bind mount of the local path. */
  async setUp(ctx: VolumeSetUpContext): Promise<MountedVolume> {
    const pv = ctx.spec?.persistentVolume;
    const name = ctx.spec?.name ?? ctx.volume.name;
    const path = pv?.spec?.local?.path ?? "";
    const readOnly = ctx.spec?.readOnly === true;
    if (path === "") throw new Error(`LocalVolume volume "${name}" path is empty`);
    if (path.split("/").includes("..")) {
      throw new Error(`invalid path: ${path} must not contain '..'`);
    }
    const info = await (this.#o.stat ?? statPath)(path);
    if (!info.isDirectory) {
      throw new Error(
        `LocalVolume volume "${name}": ${path} is not a directory: local volumes on block devices are not supported yet by this kubelet`,
      );
    }
    const mounted = { hostPath: ctx.dir, readOnly, selinuxRelabel: false };
    if (await this.#o.mounter.mountAt(ctx.dir)) return mounted;
    await Deno.mkdir(ctx.dir, { recursive: true, mode: 0o750 });
    const options = ["bind", ...(readOnly ? ["ro"] : []), ...(pv?.spec?.mountOptions ?? [])];
    try {
      await this.#o.mounter.mount(path, ctx.dir, "", options, ctx.signal);
    } catch (e) {
      await Deno.remove(ctx.dir).catch(() => {});
      throw e;
    }
    const fsGroup = ctx.pod.spec?.securityContext?.fsGroup ?? undefined;
    if (!readOnly && fsGroup !== undefined) {
      await setVolumeOwnership(ctx.dir, fsGroup, {
        logger: this.#o.logger,
        ...(ctx.signal ? { signal: ctx.signal } : {}),
        ...(ctx.pod.spec?.securityContext?.fsGroupChangePolicy
          ? { changePolicy: ctx.pod.spec.securityContext.fsGroupChangePolicy }
          : {}),
      });
    }
    return mounted;
  }

  /** upstream TearDownAt: unmount, then remove the pod's dir. */
  async tearDown(ctx: VolumeTearDownContext): Promise<void> {
    if (await this.#o.mounter.mountAt(ctx.dir)) await this.#o.mounter.unmount(ctx.dir, ctx.signal);
    await Deno.remove(ctx.dir).catch((e) => {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    });
  }
}
