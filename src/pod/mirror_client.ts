/**
 * @module
 * Mirror pods: the apiserver copies of static pods (from files or a URL), through which the
 * control plane sees pods it cannot change. {@link MirrorClient} creates a mirror (the static
 * pod with `kubernetes.io/config.mirror` set to its config hash and owned by the Node, as the
 * NodeRestriction admission plugin requires) and deletes one with grace period 0. The helpers
 * tell static, mirror and API pods apart and build the `<name>_<namespace>` full names the
 * kubelet keys pods by.
 *
 * Corresponds to upstream `pkg/kubelet/pod/mirror_client.go`, `pkg/kubelet/types/pod_update.go`
 * (GetPodSource, IsStaticPod, IsMirrorPod) and `pkg/kubelet/container` GetPodFullName /
 * ParsePodFullName. Talks to the apiserver through {@link KubeClient}.
 */

import type { V1DeleteOptions, V1Pod } from "@kubernetes/client-node";
import { KObj, type Logger } from "../klog/klog.ts";
import { isStatus, type KubeClient } from "../client/kube_client.ts";
import {
  CONFIG_HASH_ANNOTATION,
  CONFIG_MIRROR_ANNOTATION,
  CONFIG_SOURCE_ANNOTATION,
  isMirrorPod,
  isStaticPod,
} from "../config/pod_config.ts";

export { isMirrorPod, isStaticPod };

/** A mirror pod operation that could not be attempted (bad full name, node not known). */
export class MirrorPodError extends Error {
  override name = "MirrorPodError";
}

/** `<name>_<namespace>` (upstream kubecontainer.BuildPodFullName). */
export function buildPodFullName(name: string, namespace: string): string {
  return `${name}_${namespace}`;
}

/** The pod's `<name>_<namespace>` (upstream kubecontainer.GetPodFullName). */
export function podFullName(pod: V1Pod): string {
  return buildPodFullName(pod.metadata?.name ?? "", pod.metadata?.namespace ?? "");
}

/** Splits a full name into name and namespace; throws {@link MirrorPodError} when malformed. */
export function parsePodFullName(fullName: string): { name: string; namespace: string } {
  const parts = fullName.split("_");
  const [name, namespace] = parts;
  if (parts.length !== 2 || !name || !namespace) {
    throw new MirrorPodError(`failed to parse the pod full name "${fullName}"`);
  }
  return { name, namespace };
}

/** The source the pod came from ("file", "http", "api"); throws when it has none. */
export function getPodSource(pod: V1Pod): string {
  const source = pod.metadata?.annotations?.[CONFIG_SOURCE_ANNOTATION];
  if (source === undefined) {
    throw new MirrorPodError(`cannot get source of pod "${pod.metadata?.uid ?? ""}"`);
  }
  return source;
}

/** The static pod's config hash; "" when it has none (upstream getPodHash). */
export function getStaticPodHash(pod: V1Pod): string {
  return pod.metadata?.annotations?.[CONFIG_HASH_ANNOTATION] ?? "";
}

/** The hash a mirror pod carries, or undefined for a pod that is no mirror. */
export function getHashFromMirrorPod(pod: V1Pod): string | undefined {
  return pod.metadata?.annotations?.[CONFIG_MIRROR_ANNOTATION];
}

/** True when `mirror` is the mirror of this version of `pod`: same name, namespace and hash. */
export function isMirrorPodOf(mirror: V1Pod, pod: V1Pod): boolean {
  if (
    pod.metadata?.name !== mirror.metadata?.name ||
    pod.metadata?.namespace !== mirror.metadata?.namespace
  ) {
    return false;
  }
  const hash = getHashFromMirrorPod(mirror);
  return hash !== undefined && hash === getStaticPodHash(pod);
}

/** Options of {@link MirrorClient}. */
export interface MirrorClientOptions {
  readonly client: KubeClient;
  readonly nodeName: string;
  /** The registered Node's UID, for the owner reference; undefined until it is known. */
  readonly getNodeUID: () => string | undefined;
  readonly logger: Logger;
}

/** Creates and deletes mirror pods (upstream basicMirrorClient). */
export class MirrorClient {
  readonly #o: MirrorClientOptions;

  constructor(opts: MirrorClientOptions) {
    this.#o = opts;
  }

  /**
   * Creates the mirror of static pod `pod`. An existing mirror with the same hash counts as
   * success; one with another hash fails with the apiserver's AlreadyExists error.
   */
  async createMirrorPod(pod: V1Pod, signal?: AbortSignal): Promise<void> {
    const { client, nodeName } = this.#o;
    const namespace = pod.metadata?.namespace;
    const name = pod.metadata?.name;
    if (!namespace || !name) {
      throw new MirrorPodError(
        `Cannot create mirror pod: the static pod needs a name and a namespace: got "${
          podFullName(pod)
        }"`,
      );
    }
    const hash = getStaticPodHash(pod);
    // Mirror pods must be owned by their Node (MirrorPodNodeRestriction, KEP 1314).
    const nodeUID = this.#o.getNodeUID();
    if (!nodeUID) {
      throw new MirrorPodError(`failed to get node UID: UID unset for node ${nodeName}`);
    }
    const copy = structuredClone(pod);
    const meta = copy.metadata ?? {};
    copy.metadata = meta;
    meta.annotations = { ...meta.annotations, [CONFIG_MIRROR_ANNOTATION]: hash };
    meta.ownerReferences = [{
      apiVersion: "v1",
      kind: "Node",
      name: nodeName,
      uid: nodeUID,
      controller: true,
    }];
    // The apiserver assigns these; a resourceVersion on create is rejected outright.
    delete meta.uid;
    delete meta.resourceVersion;
    delete copy.status;
    const path = `/api/v1/namespaces/${encodeURIComponent(namespace)}/pods`;
    try {
      await client.create<V1Pod>(path, copy, signal);
    } catch (err) {
      if (!isStatus(err, 409) || err.reason !== "AlreadyExists") throw err;
      // The existing pod is fine if it mirrors this very version of the static pod.
      let existing: V1Pod;
      try {
        existing = await client.get<V1Pod>(`${path}/${encodeURIComponent(name)}`, signal);
      } catch (getErr) {
        if (signal?.aborted) throw getErr;
        throw err;
      }
      if (getHashFromMirrorPod(existing) !== hash) throw err;
    }
  }

  /**
   * Deletes the mirror pod `podFullName` with grace period 0, only if its UID is `uid` when
   * one is given. Resolves to whether it was deleted: a missing pod or another UID gives
   * false, and so does any other failure, which is logged (as upstream). Throws
   * {@link MirrorPodError} for a malformed full name.
   */
  async deleteMirrorPod(
    podFullName: string,
    uid: string | undefined,
    signal?: AbortSignal,
  ): Promise<boolean> {
    const { client, logger } = this.#o;
    let parsed: { name: string; namespace: string };
    try {
      parsed = parsePodFullName(podFullName);
    } catch (err) {
      logger.error(err, "Failed to parse a pod full name", { podFullName });
      throw err;
    }
    const { name, namespace } = parsed;
    const pod = new KObj(name, namespace);
    logger.v(2).info("Deleting a mirror pod", { pod, podUID: uid ?? "" });
    const options: V1DeleteOptions = {
      apiVersion: "v1",
      kind: "DeleteOptions",
      gracePeriodSeconds: 0,
    };
    if (uid !== undefined) options.preconditions = { uid };
    try {
      await client.delete(
        `/api/v1/namespaces/${encodeURIComponent(namespace)}/pods/${encodeURIComponent(name)}`,
        options,
        signal,
      );
      return true;
    } catch (err) {
      if (signal?.aborted) throw err;
      // A failed UID precondition answers 409 Conflict; neither it nor 404 is worth a log.
      if (!isStatus(err, 404) && !isStatus(err, 409)) {
        logger.error(err, "Failed deleting a mirror pod", { pod });
      }
      return false;
    }
  }
}
