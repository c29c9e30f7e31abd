/**
 * @module
 * Growing a mounted claim's file system on the node once the volume grew in the storage backend
 * (upstream's in-use volume expansion). The volume manager calls {@link expandInUseVolume} on each
 * sync of a pod whose claim's PersistentVolume is now larger than the claim's capacity when it
 * was mounted. As upstream's NodeExpander (with RecoverVolumeExpansionFailure, GA): the node's
 * part runs when the resizer left the claim `NodeResizePending` (or `NodeResizeInProgress` after
 * an interrupted try), toward the claim's allocated size; the claim is marked
 * `NodeResizeInProgress`, the plugin grows the file system, then the claim's capacity is set and
 * its resize status and conditions cleared, with `FileSystemResizeSuccess` events on the pod and
 * the claim. A claim written by an older resizer (no allocated size) is grown to the PV's size
 * and finished the same way. A failure is a `VolumeResizeFailed` event on the pod, and a
 * `NodeResizeError` condition on the claim when the driver's answer is final; the next sync
 * tries again. A read-only volume is not grown (`FileSystemResizeFailed`).
 * Corresponds to upstream `pkg/volume/util/operationexecutor/node_expander.go`,
 * `operation_generator.go` (nodeExpandVolume, GenerateExpandInUseVolumeFunc) and
 * `pkg/volume/util/resize_util.go` (MarkNodeExpansionInProgress,
 * MarkNodeExpansionFinishedWithRecovery, MarkNodeExpansionFailedCondition).
 */

import type { V1Pod } from "@kubernetes/client-node";
import type { KubeClient } from "../client/kube_client.ts";
import { type EventRecorder, objectRef, podRef } from "../client/record.ts";
import { errorText } from "../util/errors.ts";
import { quantityOrUndefined } from "../util/quantity.ts";
import {
  OperationNotSupportedError,
  UncertainOperationError,
  type VolumePlugin,
  type VolumeSpec,
} from "./plugin.ts";

/** The claim conditions of resizing, which a finished expansion removes. */
const RESIZE_CONDITIONS = [
  "Resizing",
  "FileSystemResizePending",
  "ControllerResizeError",
  "NodeResizeError",
];

/** The annotation by which a resizer says a RWX claim needs nothing from nodes. */
const NODE_EXPANSION_NOT_REQUIRED = "volume.kubernetes.io/node-expansion-not-required";

/** What {@link expandInUseVolume} needs. */
export interface ExpandOptions {
  readonly client: Pick<KubeClient, "patch">;
  readonly recorder: EventRecorder;
  readonly nodeName: string;
  readonly pod: V1Pod;
  /** The claim's spec, with its claim and PersistentVolume as read on this sync. */
  readonly spec: VolumeSpec;
  readonly plugin: VolumePlugin;
  /** The volume's directory. */
  readonly dir: string;
  /** The size the node last grew the volume to, or the claim's capacity when it was mounted. */
  readonly currentBytes: number;
  readonly signal?: AbortSignal;
}

/**
 * Grows the volume if its PersistentVolume is larger than `currentBytes` and the claim asks the
 * node to; resolves to the size the volume now has (to keep), or `currentBytes` when nothing was
 * done yet. Throws the failure of the plugin's NodeExpand (already reported in events).
 */
export async function expandInUseVolume(o: ExpandOptions): Promise<number> {
  const { spec, plugin } = o;
  const pv = spec.persistentVolume;
  const claim = spec.claim;
  if (!pv || !claim || !plugin.nodeExpand) return o.currentBytes;
  const pvBytes = quantityOrUndefined(pv.spec?.capacity?.storage);
  if (pvBytes === undefined || pvBytes <= o.currentBytes) return o.currentBytes;

  const simple = (prefix: string, suffix: string) =>
    `${prefix} for volume "${spec.name}" ${suffix}`;
  if (spec.readOnly) {
    const msg = simple("MountVolume.NodeExpandVolume failed", "requested read-only file system");
    o.recorder.event(podRef(o.pod), "Warning", "FileSystemResizeFailed", msg);
    o.recorder.event(
      objectRef("PersistentVolumeClaim", claim),
      "Warning",
      "FileSystemResizeFailed",
      msg,
    );
    // As upstream: the read-only volume counts as done at its current size.
    return pvBytes;
  }

  const status = claim.status ?? {};
  const resizeStatus = status.allocatedResourceStatuses?.["storage"] ?? "";
  const allocated = status.allocatedResources?.["storage"];
  const legacy = resizeStatus === "" && allocated === undefined;
  const newQuantity = legacy ? pv.spec?.capacity?.["storage"] ?? "" : allocated ?? "";
  const newBytes = quantityOrUndefined(newQuantity) ?? pvBytes;
  const statusBytes = quantityOrUndefined(status.capacity?.["storage"]) ?? 0;
  const alreadyUpdated = statusBytes >= newBytes && resizeStatus === "";

  // upstream runPreCheck: whether the node's part may run now.
  const rwxWithoutNode = alreadyUpdated &&
    (claim.spec?.accessModes ?? []).includes("ReadWriteMany") &&
    claim.metadata?.annotations?.[NODE_EXPANSION_NOT_REQUIRED] === undefined;
  const allowed = legacy
    ? !alreadyUpdated || rwxWithoutNode
    : rwxWithoutNode || resizeStatus === "NodeResizePending" ||
      resizeStatus === "NodeResizeInProgress";
  if (!allowed) return alreadyUpdated ? newBytes : o.currentBytes;

  const ns = claim.metadata?.namespace ?? "";
  const statusPath = `/api/v1/namespaces/${encodeURIComponent(ns)}/persistentvolumeclaims/${
    encodeURIComponent(claim.metadata?.name ?? "")
  }/status`;
  if (!alreadyUpdated && !legacy) {
    await o.client.patch(
      statusPath,
      {
        status: { allocatedResourceStatuses: { storage: "NodeResizeInProgress" } },
      },
      "strategic",
      o.signal,
    );
  }
  try {
    await plugin.nodeExpand(spec, o.dir, newBytes, o.signal);
  } catch (e) {
    if (e instanceof OperationNotSupportedError && alreadyUpdated) return newBytes;
    const msg = simple("NodeExpandVolume.NodeExpandVolume failed", `: ${errorText(e)}`);
    o.recorder.event(podRef(o.pod), "Warning", "VolumeResizeFailed", msg);
    if (!(e instanceof OperationNotSupportedError) && !(e instanceof UncertainOperationError)) {
      await o.client.patch(
        statusPath,
        {
          status: {
            conditions: [{
              type: "NodeResizeError",
              status: "True",
              lastTransitionTime: new Date().toISOString(),
              message: `failed to expand pvc with ${errorText(e)}`,
            }],
          },
        },
        "strategic",
        o.signal,
      ).catch(() => {});
    }
    throw new Error(msg, { cause: e });
  }
  const ok = simple("MountVolume.NodeExpandVolume succeeded", o.nodeName);
  o.recorder.event(podRef(o.pod), "Normal", "FileSystemResizeSuccess", ok);
  o.recorder.event(
    objectRef("PersistentVolumeClaim", claim),
    "Normal",
    "FileSystemResizeSuccess",
    ok,
  );
  if (alreadyUpdated) return newBytes;
  // upstream MarkNodeExpansionFinishedWithRecovery.
  const present = (status.conditions ?? []).filter((c) => RESIZE_CONDITIONS.includes(c.type));
  await o.client.patch(
    statusPath,
    {
      status: {
        capacity: { storage: newQuantity },
        allocatedResourceStatuses: { storage: null },
        ...(present.length > 0
          ? { conditions: present.map((c) => ({ type: c.type, $patch: "delete" })) }
          : {}),
      },
    },
    "strategic",
    o.signal,
  );
  return newBytes;
}
