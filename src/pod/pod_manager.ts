/**
 * @module
 * The kubelet's desired set of pods: every pod the config sources assigned to this node, and
 * the mirror pods the apiserver holds for its static pods, each indexed by UID and by full name
 * (`<name>_<namespace>`). A static pod and its mirror share a full name, which is how one is
 * found from the other; a mirror UID translates to its static pod's UID, so that an API request
 * about the mirror (logs, exec, stats) reaches the pod the kubelet actually runs. Mirror pods
 * whose static pod is gone are reported as orphans for the kubelet to delete.
 *
 * Corresponds to upstream `pkg/kubelet/pod/pod_manager.go` (basicManager), without its metrics.
 * Fed by the sync loop from PodConfig updates; read by the pod workers, the status manager and
 * the kubelet server. Pods are stored as given, not copied.
 */

import type { V1Pod } from "@kubernetes/client-node";
import { buildPodFullName, isMirrorPod, isStaticPod, podFullName } from "./mirror_client.ts";

/** {@link PodManager.getPodAndMirrorPod}'s answer. */
export interface PodAndMirrorPod {
  /** The regular or static pod, if known. */
  readonly pod: V1Pod | undefined;
  /** Its mirror pod, if known. */
  readonly mirrorPod: V1Pod | undefined;
  /** True when the pod asked about was the mirror. */
  readonly wasMirror: boolean;
}

/** {@link PodManager.getPodsAndMirrorPods}'s answer. */
export interface PodsAndMirrorPods {
  /** Regular and static pods (upstream allPods). */
  readonly pods: V1Pod[];
  /** Mirror pods (upstream allMirrorPods). */
  readonly mirrorPods: V1Pod[];
  /** Full names of mirror pods whose static pod is not known. */
  readonly orphanedMirrorPodFullnames: string[];
}

/** Static pod UIDs and mirror pod UIDs, both ways (upstream GetUIDTranslations). */
export interface UIDTranslations {
  /** Static pod UID → its mirror's UID; "" for a static pod without a mirror. */
  readonly podToMirror: Map<string, string>;
  /** Mirror pod UID → its static pod's UID. */
  readonly mirrorToPod: Map<string, string>;
}

/** Stores the pods bound to this node and their mirror pods (upstream basicManager). */
export class PodManager {
  #podByUID = new Map<string, V1Pod>();
  #podByFullName = new Map<string, V1Pod>();
  #mirrorPodByUID = new Map<string, V1Pod>();
  #mirrorPodByFullName = new Map<string, V1Pod>();
  /** Mirror pod UID → static pod UID. */
  #translationByUID = new Map<string, string>();

  /** Replaces every pod with `pods`. */
  setPods(pods: readonly V1Pod[]): void {
    this.#podByUID = new Map();
    this.#podByFullName = new Map();
    this.#mirrorPodByUID = new Map();
    this.#mirrorPodByFullName = new Map();
    this.#translationByUID = new Map();
    for (const pod of pods) this.#update(pod);
  }

  /** Adds a pod or mirror pod (the same as {@link updatePod}). */
  addPod(pod: V1Pod): void {
    this.#update(pod);
  }

  /** Adds or replaces a pod or mirror pod. */
  updatePod(pod: V1Pod): void {
    this.#update(pod);
  }

  /**
   * Forgets a pod or mirror pod. Removing a static pod keeps its mirror's UID translation, as
   * upstream does; removing the mirror drops it.
   */
  removePod(pod: V1Pod): void {
    const fullName = podFullName(pod);
    const uid = pod.metadata?.uid ?? "";
    if (isMirrorPod(pod)) {
      this.#mirrorPodByUID.delete(uid);
      this.#mirrorPodByFullName.delete(fullName);
      this.#translationByUID.delete(uid);
    } else {
      this.#podByUID.delete(uid);
      this.#podByFullName.delete(fullName);
    }
  }

  /** Regular and static pods; no mirror pods. */
  getPods(): V1Pod[] {
    return [...this.#podByUID.values()];
  }

  /** Regular and static pods, mirror pods, and the mirror pods without a static pod. */
  getPodsAndMirrorPods(): PodsAndMirrorPods {
    const orphanedMirrorPodFullnames: string[] = [];
    for (const fullName of this.#mirrorPodByFullName.keys()) {
      if (!this.#podByFullName.has(fullName)) orphanedMirrorPodFullnames.push(fullName);
    }
    return {
      pods: [...this.#podByUID.values()],
      mirrorPods: [...this.#mirrorPodByUID.values()],
      orphanedMirrorPodFullnames,
    };
  }

  /** The regular or static pod with this UID; mirror UIDs find nothing (translate first). */
  getPodByUID(uid: string): V1Pod | undefined {
    return this.#podByUID.get(uid);
  }

  /** The regular or static pod with this `<name>_<namespace>`. */
  getPodByFullName(fullName: string): V1Pod | undefined {
    return this.#podByFullName.get(fullName);
  }

  /** The regular or static pod `namespace/name`. */
  getPodByName(namespace: string, name: string): V1Pod | undefined {
    return this.#podByFullName.get(buildPodFullName(name, namespace));
  }

  /** The mirror pod of a static pod. */
  getMirrorPodByPod(pod: V1Pod): V1Pod | undefined {
    return this.#mirrorPodByFullName.get(podFullName(pod));
  }

  /** The static pod of a mirror pod. */
  getPodByMirrorPod(mirrorPod: V1Pod): V1Pod | undefined {
    return this.#podByFullName.get(podFullName(mirrorPod));
  }

  /** Given a pod or a mirror pod, the pod and the mirror pod, as far as they are known. */
  getPodAndMirrorPod(pod: V1Pod): PodAndMirrorPod {
    const fullName = podFullName(pod);
    if (isMirrorPod(pod)) {
      return { pod: this.#podByFullName.get(fullName), mirrorPod: pod, wasMirror: true };
    }
    return { pod, mirrorPod: this.#mirrorPodByFullName.get(fullName), wasMirror: false };
  }

  /** A mirror pod's UID as its static pod's UID; any other UID as it is. */
  translatePodUID(uid: string): string {
    if (uid === "") return uid;
    return this.#translationByUID.get(uid) ?? uid;
  }

  /** Both directions of the static/mirror UID translation. */
  getUIDTranslations(): UIDTranslations {
    const podToMirror = new Map<string, string>();
    const mirrorToPod = new Map<string, string>();
    // Every static pod appears, with "" when it has no mirror: callers then know there is none
    // rather than mistaking the static pod's own UID for one.
    for (const [uid, pod] of this.#podByUID) {
      if (isStaticPod(pod)) podToMirror.set(uid, "");
    }
    for (const [mirrorUID, podUID] of this.#translationByUID) {
      mirrorToPod.set(mirrorUID, podUID);
      podToMirror.set(podUID, mirrorUID);
    }
    return { podToMirror, mirrorToPod };
  }

  #update(pod: V1Pod): void {
    // A static pod and its mirror are matched by full name.
    const fullName = podFullName(pod);
    const uid = pod.metadata?.uid ?? "";
    if (isMirrorPod(pod)) {
      this.#mirrorPodByUID.set(uid, pod);
      this.#mirrorPodByFullName.set(fullName, pod);
      const staticPod = this.#podByFullName.get(fullName);
      if (staticPod) this.#translationByUID.set(uid, staticPod.metadata?.uid ?? "");
    } else {
      this.#podByUID.set(uid, pod);
      this.#podByFullName.set(fullName, pod);
      const mirror = this.#mirrorPodByFullName.get(fullName);
      if (mirror) this.#translationByUID.set(mirror.metadata?.uid ?? "", uid);
    }
  }
}
