/**
 * @module
 * The `kubernetes.io/image` volume plugin (KEP-4639, GA in v1.36): the stand-in that lets the
 * volume manager accept a pod's `image` volumes. Nothing is set up on the node: the image is
 * pulled by the container start (`kuberuntime/image_volumes.ts`, through the ImageManager with
 * the volume's pullPolicy) and handed to the runtime as a CRI Mount with `image` set, which the
 * runtime mounts read-only from its own snapshot (`kubelet_mounts.ts`). So set-up reports an
 * empty host path, read-only, no SELinux relabel, and tear-down has nothing to remove.
 * Corresponds to upstream `pkg/volume/image/image.go` (imagePlugin).
 */

import type { V1Volume } from "@kubernetes/client-node";
import type {
  MountedVolume,
  VolumePlugin,
  VolumeSetUpContext,
  VolumeTearDownContext,
} from "./plugin.ts";

/** The plugin's upstream name. */
export const IMAGE_PLUGIN_NAME = "kubernetes.io/image";

/**
 * What an image volume looks like to containers (upstream imagePlugin.GetAttributes and
 * GetPath): no host path (the runtime mounts the image), always read-only, never relabelled.
 */
export const IMAGE_VOLUME: MountedVolume = Object.freeze({
  hostPath: "",
  readOnly: true,
  selinuxRelabel: false,
});

/** Accepts `image` volumes without doing anything on the node; see the module documentation. */
export class ImagePlugin implements VolumePlugin {
  readonly name = IMAGE_PLUGIN_NAME;
  readonly requiresRemount = false;

  canSupport(volume: V1Volume): boolean {
    return volume.image != null;
  }

  setUp(_ctx: VolumeSetUpContext): Promise<MountedVolume> {
    return Promise.resolve(IMAGE_VOLUME);
  }

  tearDown(_ctx: VolumeTearDownContext): Promise<void> {
    return Promise.resolve();
  }
}
