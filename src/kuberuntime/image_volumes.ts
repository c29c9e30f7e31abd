/**
 * @module
 * Image volumes (`spec.volumes[].image`, KEP-4639, GA in v1.36) on the runtime side: each
 * volume's image is pulled through the ImageManager with the volume's pullPolicy and the pod's
 * pull secrets (events about the pod), and each container that mounts one gets the image's CRI
 * spec, which `kubelet_mounts.ts` turns into a Mount with `image` (and `image_sub_path`) set for
 * the runtime to mount read-only. A failed pull fails the start of every container that mounts
 * the volume, with the pull's reason (ErrImagePull, ImagePullBackOff, ...) as its waiting
 * reason. The kubelet detects nothing about the runtime: one that cannot mount images (containerd
 * before 2.1 ignores `Mount.image`) fails CreateContainer with its own error, as under upstream.
 * Corresponds to upstream `pkg/kubelet/kuberuntime/kuberuntime_manager.go` (getImageVolumes,
 * toKubeContainerImageVolumes, incrementImageVolumeMetrics, imageVolumePulls) and
 * `kubecontainer.ImageVolumes`.
 */

import type { V1Container, V1Pod, V1Secret, V1Volume } from "@kubernetes/client-node";
import type * as api from "../../proto/runtime/v1/api.ts";
import { containerRef } from "../container/ref.ts";
import type { EventRecorder } from "../client/record.ts";
import type { SyncErrorReason } from "../container/sync_result.ts";
import type { ImageManager } from "../images/image_manager.ts";
import { kobj, type Logger } from "../klog/klog.ts";

/** The image spec of each image volume a container mounts, by volume name. */
export type ImageVolumes = ReadonlyMap<string, api.ImageSpec>;

/** One image volume's pull: the spec to mount, or why it is not there (upstream imageVolumePullResult). */
export type ImageVolumePullResult =
  | { readonly spec: api.ImageSpec }
  | { readonly error: { readonly reason: SyncErrorReason; readonly message: string } };

/** The pull of each image volume of a pod, by volume name (upstream imageVolumePulls). */
export type ImageVolumePulls = ReadonlyMap<string, ImageVolumePullResult>;

/** What {@link getImageVolumes} needs. */
export interface ImageVolumeDeps {
  readonly imageManager: Pick<ImageManager, "ensureImageExists">;
  readonly recorder: EventRecorder;
  readonly logger: Logger;
}

/** What {@link getImageVolumes} pulls for. */
export interface ImageVolumesRequest {
  readonly pod: V1Pod;
  readonly sandboxConfig?: api.PodSandboxConfig;
  readonly pullSecrets: readonly V1Secret[];
  /**
   * Only the image volumes of these names. @default every image volume of the pod, as upstream
   * SyncPod pulls them
   */
  readonly volumeNames?: ReadonlySet<string>;
}

/** The pull policies the API accepts (upstream supportedPullPolicies). */
const PULL_POLICIES = ["Always", "IfNotPresent", "Never"];

/**
 * upstream getImageVolumes: ensures the image of each image volume of the pod (the ones named in
 * `volumeNames`), in spec order, one at a time. A failure is kept in the result for the
 * containers that mount the volume; only an aborted `signal` throws.
 */
export async function getImageVolumes(
  deps: ImageVolumeDeps,
  signal: AbortSignal,
  req: ImageVolumesRequest,
): Promise<ImageVolumePulls> {
  const { pod } = req;
  const out = new Map<string, ImageVolumePullResult>();
  for (const [index, volume] of (pod.spec?.volumes ?? []).entries()) {
    const source = volume.image;
    if (!source || (req.volumeNames && !req.volumeNames.has(volume.name))) continue;
    const invalid = invalidPullPolicy(volume, index);
    if (invalid !== undefined) {
      deps.logger.error(new Error(invalid), "Failed to ensure image", { pod: kobj(pod) });
      out.set(volume.name, { error: { reason: "CreateContainerConfigError", message: invalid } });
      continue;
    }
    const result = await deps.imageManager.ensureImageExists(signal, {
      pod,
      imageVolume: source,
      pullSecrets: req.pullSecrets,
      sandboxConfig: req.sandboxConfig,
    });
    if ("error" in result) {
      deps.logger.error(new Error(result.error.reason), "Failed to ensure image", {
        pod: kobj(pod),
      });
      out.set(volume.name, { error: result.error });
      continue;
    }
    deps.logger.v(4).info("Pulled image", { ref: result.imageRef, pod: kobj(pod) });
    out.set(volume.name, {
      spec: {
        image: result.imageRef,
        userSpecifiedImage: source.reference ?? "",
        // The pod's handler goes here only under the RuntimeClassInImageCriApi gate (alpha,
        // off; not implemented here), as upstream getPodRuntimeHandler: the default handler.
        runtimeHandler: "",
        annotations: { ...pod.metadata?.annotations },
        imageRef: "",
      },
    });
  }
  return out;
}

/**
 * A pullPolicy the API would have refused, as its validation says it; undefined when valid or
 * unset (the ImageManager then defaults it from the tag, as the apiserver does).
 */
function invalidPullPolicy(volume: V1Volume, index: number): string | undefined {
  const policy = volume.image?.pullPolicy;
  if (policy === undefined || policy === "" || PULL_POLICIES.includes(policy)) return undefined;
  return `spec.volumes[${index}].image.pullPolicy: Unsupported value: ${
    JSON.stringify(policy)
  }: supported values: ${PULL_POLICIES.map((p) => JSON.stringify(p)).join(", ")}`;
}

/** The names of the volumes a container mounts. */
export function mountedVolumeNames(container: V1Container): Set<string> {
  return new Set((container.volumeMounts ?? []).map((m) => m.name));
}

/** Why a container cannot start for its image volumes: a SyncResult reason and message. */
export interface ImageVolumeFailure {
  readonly reason: SyncErrorReason;
  readonly message: string;
}

/**
 * upstream toKubeContainerImageVolumes: the specs of the image volumes the container mounts.
 * Each mount of a volume whose pull failed records a Failed event on the container ("Error:
 * <reason>"); the last such failure is returned, and the container is not started.
 */
export function toKubeContainerImageVolumes(
  deps: Pick<ImageVolumeDeps, "recorder">,
  pulls: ImageVolumePulls,
  pod: V1Pod,
  container: V1Container,
): { imageVolumes: ImageVolumes } | { failure: ImageVolumeFailure } {
  const imageVolumes = new Map<string, api.ImageSpec>();
  if (pulls.size === 0) return { imageVolumes };
  let last: ImageVolumeFailure | undefined;
  for (const m of container.volumeMounts ?? []) {
    const pull = pulls.get(m.name);
    if (!pull) continue;
    if ("error" in pull) {
      // upstream prints the gRPC status of the error value: the reason, or the whole message
      // when the error is not one of the image errors.
      const shown = pull.error.reason === "CreateContainerConfigError"
        ? pull.error.message
        : pull.error.reason;
      deps.recorder.event(
        containerRef(pod, container.name),
        "Warning",
        "Failed",
        `Error: ${shown}`,
      );
      last = pull.error;
      continue;
    }
    imageVolumes.set(m.name, pull.spec);
  }
  return last ? { failure: last } : { imageVolumes };
}

/** The prefix of a runtime's error for an image volume it could not mount (CRI errors.go). */
export const IMAGE_VOLUME_MOUNT_FAILED = "ImageVolumeMountFailed";

/** The counters {@link incrementImageVolumeMetrics} updates. */
export interface ImageVolumeMetrics {
  /** kubelet_image_volume_requested_total */
  readonly imageVolumeRequestedTotal: { inc(labels?: undefined, by?: number): void };
  /** kubelet_image_volume_mounted_succeed_total */
  readonly imageVolumeMountedSucceedTotal: { inc(): void };
  /** kubelet_image_volume_mounted_errors_total */
  readonly imageVolumeMountedErrorsTotal: { inc(): void };
}

/**
 * upstream incrementImageVolumeMetrics, after a start with the container's image volumes:
 * requested by the number of volumes, and per mount of one a success unless CreateContainer
 * failed with the runtime's ImageVolumeMountFailed error.
 */
export function incrementImageVolumeMetrics(
  metrics: ImageVolumeMetrics,
  failure: ImageVolumeFailure | undefined,
  container: V1Container,
  imageVolumes: ImageVolumes,
): void {
  metrics.imageVolumeRequestedTotal.inc(undefined, imageVolumes.size);
  for (const m of container.volumeMounts ?? []) {
    if (!imageVolumes.has(m.name)) continue;
    if (
      failure?.reason === "CreateContainerError" &&
      failure.message.startsWith(IMAGE_VOLUME_MOUNT_FAILED)
    ) {
      metrics.imageVolumeMountedErrorsTotal.inc();
    } else {
      metrics.imageVolumeMountedSucceedTotal.inc();
    }
  }
}
