/**
 * @module
 * The spec of a pod volume that names a claim: a `persistentVolumeClaim` volume, or a generic
 * `ephemeral` volume (the claim `<pod>-<volume>` its controller creates for the pod). The claim
 * must be bound and not being deleted, its PersistentVolume must point back at it, an ephemeral
 * volume's claim must be controlled by the pod, and the PersistentVolume's volumeMode must match
 * how the containers use it (volumeMounts: Filesystem, volumeDevices: Block). Errors carry
 * upstream's messages, which become the pod's "failed to process volumes" text.
 * Corresponds to upstream `pkg/kubelet/volumemanager/populator/desired_state_of_world_populator.go`
 * (createVolumeSpec, getPVCExtractPV, getPVSpec) and `k8s.io/component-helpers/storage/ephemeral`.
 */

import type {
  V1PersistentVolume,
  V1PersistentVolumeClaim,
  V1Pod,
  V1Volume,
} from "@kubernetes/client-node";
import { apiErrorText, type KubeClient } from "../client/kube_client.ts";
import { specFromVolume, type VolumeSpec } from "./plugin.ts";

/** The finalizer that keeps a claim in use from going away (upstream PVCProtectionFinalizer). */
export const PVC_PROTECTION_FINALIZER = "kubernetes.io/pvc-protection";

/** What {@link createVolumeSpec} needs. */
export interface VolumeSpecOptions {
  readonly client: Pick<KubeClient, "get">;
  /** Volume names some container mounts (volumeMounts). */
  readonly mounts: ReadonlySet<string>;
  /** Volume names some container maps as a block device (volumeDevices). */
  readonly devices: ReadonlySet<string>;
  readonly signal?: AbortSignal;
}

/** The spec of `volume`, with the bound PersistentVolume for a claim (upstream createVolumeSpec). */
export async function createVolumeSpec(
  pod: V1Pod,
  volume: V1Volume,
  o: VolumeSpecOptions,
): Promise<VolumeSpec> {
  const ns = pod.metadata?.namespace ?? "";
  const ephemeral = !volume.persistentVolumeClaim && volume.ephemeral !== undefined;
  const source = volume.persistentVolumeClaim ??
    (ephemeral ? { claimName: ephemeralClaimName(pod, volume), readOnly: false } : undefined);
  if (!source) return specFromVolume(volume);
  const claimName = source.claimName;
  const wrap = (e: unknown) => new Error(`error processing PVC ${ns}/${claimName}: ${text(e)}`);
  let claim: V1PersistentVolumeClaim;
  try {
    claim = await claimOf(o, ns, claimName);
  } catch (e) {
    throw wrap(e);
  }
  if (ephemeral) volumeIsForPod(pod, claim);
  let pv: V1PersistentVolume;
  try {
    pv = await boundVolumeOf(o, claim.spec?.volumeName ?? "", claim.metadata?.uid ?? "");
  } catch (e) {
    throw wrap(e);
  }
  const mode = pv.spec?.volumeMode || "Filesystem";
  if (o.mounts.has(volume.name) && mode !== "Filesystem") {
    throw new Error(
      `volume ${volume.name} has volumeMode ${mode}, but is specified in volumeMounts`,
    );
  }
  if (o.devices.has(volume.name) && mode !== "Block") {
    throw new Error(
      `volume ${volume.name} has volumeMode ${mode}, but is specified in volumeDevices`,
    );
  }
  return {
    name: pv.metadata?.name ?? "",
    volume,
    persistentVolume: pv,
    readOnly: source.readOnly === true,
    claim,
  };
}

/** The claim a generic ephemeral volume gets (upstream ephemeral.VolumeClaimName). */
export function ephemeralClaimName(pod: V1Pod, volume: V1Volume): string {
  return `${pod.metadata?.name ?? ""}-${volume.name}`;
}

/** upstream ephemeral.VolumeIsForPod: the claim is controlled by the pod. */
function volumeIsForPod(pod: V1Pod, claim: V1PersistentVolumeClaim): void {
  const ns = pod.metadata?.namespace ?? "";
  const controlled = (claim.metadata?.ownerReferences ?? []).some((r) =>
    r.controller === true && r.uid === pod.metadata?.uid
  );
  if (claim.metadata?.namespace !== ns || !controlled) {
    throw new Error(
      `PVC ${claim.metadata?.namespace ?? ""}/${
        claim.metadata?.name ?? ""
      } was not created for pod ${ns}/${pod.metadata?.name ?? ""} (pod is not owner)`,
    );
  }
}

/** upstream getPVCExtractPV: the claim, bound and not being deleted. */
async function claimOf(
  o: VolumeSpecOptions,
  ns: string,
  name: string,
): Promise<V1PersistentVolumeClaim> {
  let claim: V1PersistentVolumeClaim;
  try {
    claim = await o.client.get<V1PersistentVolumeClaim>(
      `/api/v1/namespaces/${encodeURIComponent(ns)}/persistentvolumeclaims/${
        encodeURIComponent(name)
      }`,
      o.signal,
    );
  } catch (e) {
    throw new Error(`failed to fetch PVC from API server: ${text(e)}`, { cause: e });
  }
  const finalizers = claim.metadata?.finalizers ?? [];
  if (claim.metadata?.deletionTimestamp && !finalizers.includes(PVC_PROTECTION_FINALIZER)) {
    throw new Error("PVC is being deleted");
  }
  if (claim.status?.phase !== "Bound") throw new Error("PVC is not bound");
  if (!claim.spec?.volumeName) throw new Error("PVC has empty pvc.Spec.VolumeName");
  return claim;
}

/** upstream getPVSpec: the PersistentVolume, bound to the claim of `claimUid`. */
async function boundVolumeOf(
  o: VolumeSpecOptions,
  name: string,
  claimUid: string,
): Promise<V1PersistentVolume> {
  let pv: V1PersistentVolume;
  try {
    pv = await o.client.get<V1PersistentVolume>(
      `/api/v1/persistentvolumes/${encodeURIComponent(name)}`,
      o.signal,
    );
  } catch (e) {
    throw new Error(`failed to fetch PV ${name} from API server: ${text(e)}`, { cause: e });
  }
  const ref = pv.spec?.claimRef;
  if (!ref) {
    throw new Error(
      `found PV object ${name} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim`,
    );
  }
  if ((ref.uid ?? "") !== claimUid) {
    throw new Error(
      `found PV object ${name} but its pv.Spec.ClaimRef.UID ${
        ref.uid ?? ""
      } does not point to claim.UID ${claimUid}`,
    );
  }
  return pv;
}

function text(e: unknown): string {
  return apiErrorText(e);
}
