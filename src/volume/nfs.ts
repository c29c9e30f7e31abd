/**
 * @module
 * The NFS volume plugin, `kubernetes.io/nfs`: an `nfs` volume of a pod, or a PersistentVolume with
 * an `nfs` source, mounted with `mount -t nfs <server>:<path>` into the pod's volume dir (the
 * node needs the nfs mount helper, `mount.nfs`, and the kernel's NFS client, as upstream's),
 * read-only when the volume or the claim says so, with the PV's mount options; a failed mount
 * leaves no dir behind and carries mount's output (on a node without the helper, mount's "you
 * might need a /sbin/mount.<type> helper program"). Torn down by unmounting and removing the dir.
 * Corresponds to upstream `pkg/volume/nfs/nfs.go` (nfsMounter.SetUpAt, nfsUnmounter.TearDownAt).
 */

import type { V1PersistentVolume, V1Volume } from "@kubernetes/client-node";
import type { Mounter } from "../util/mount.ts";
import type {
  MountedVolume,
  VolumePlugin,
  VolumeSetUpContext,
  VolumeTearDownContext,
} from "./plugin.ts";

/** The plugin's upstream name. */
export const NFS_PLUGIN_NAME = "kubernetes.io/nfs";

/** The NFS plugin; see the module documentation. */
export class NfsPlugin implements VolumePlugin {
  readonly name = NFS_PLUGIN_NAME;
  readonly requiresRemount = false;
  readonly #mounter: Pick<Mounter, "mount" | "unmount" | "mountAt">;

  constructor(opts: { readonly mounter: Pick<Mounter, "mount" | "unmount" | "mountAt"> }) {
    this.#mounter = opts.mounter;
  }

  canSupport(volume: V1Volume): boolean {
    return volume.nfs !== undefined && volume.nfs !== null;
  }

  canSupportPersistentVolume(pv: V1PersistentVolume): boolean {
    return pv.spec?.nfs !== undefined && pv.spec.nfs !== null;
  }

  /** upstream SetUpAt. */
  async setUp(ctx: VolumeSetUpContext): Promise<MountedVolume> {
    const pv = ctx.spec?.persistentVolume;
    const source = pv ? pv.spec?.nfs : ctx.volume.nfs;
    if (!source) throw new Error("Spec does not reference a NFS volume type");
    const readOnly = pv ? ctx.spec?.readOnly === true : source.readOnly === true;
    const mounted = { hostPath: ctx.dir, readOnly, selinuxRelabel: false };
    if (await this.#mounter.mountAt(ctx.dir)) return mounted;
    await Deno.mkdir(ctx.dir, { recursive: true, mode: 0o750 });
    // An IPv6 server is bracketed, as upstream's getServerFromSource.
    const server = source.server.includes(":") ? `[${source.server}]` : source.server;
    const options = [...(pv?.spec?.mountOptions ?? []), ...(readOnly ? ["ro"] : [])];
    try {
      await this.#mounter.mount(`${server}:${source.path}`, ctx.dir, "nfs", options, ctx.signal);
    } catch (e) {
      if (await this.#mounter.mountAt(ctx.dir)) await this.#mounter.unmount(ctx.dir, ctx.signal);
      await Deno.remove(ctx.dir).catch(() => {});
      throw e;
    }
    return mounted;
  }

  /** upstream TearDownAt: unmount (a mount point), then remove the dir. */
  async tearDown(ctx: VolumeTearDownContext): Promise<void> {
    if (await this.#mounter.mountAt(ctx.dir)) await this.#mounter.unmount(ctx.dir, ctx.signal);
    await Deno.remove(ctx.dir).catch((e) => {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    });
  }
}
