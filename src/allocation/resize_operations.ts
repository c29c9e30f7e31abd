/**
 * @module
 * Tells whether a pod update asks for an in-place resize, and counts each change it asks of a
 * container's cpu or memory, requests and limits apart, in
 * kubelet_container_requested_resizes_total (operation add, remove, increase or decrease).
 * The pod sync calls it through the allocation manager once for each pod update from a source;
 * a resize found there is queued for the allocation manager to decide. Corresponds to upstream
 * `recordResizeOperations`, `recordContainerResizeOperations`,
 * `recordPodLevelResourceResizeOperations` and `resizeOperationForResources`
 * (pkg/kubelet/kubelet.go); pod-level resource changes are told but not counted, as upstream.
 */

import type { V1Container, V1Pod } from "@kubernetes/client-node";
import type { KubeletMetrics } from "../metrics/metrics.ts";
import { cmpDec, type Dec, parseDec } from "../qos/resource_helpers.ts";
import { isResizableContainer, requirementsEqual } from "./allocation_manager.ts";

/** What one resource of a container does between two versions of its pod. */
export type ResizeOperation = "add" | "remove" | "increase" | "decrease";

/** The counter {@link recordResizeOperations} moves. */
export type ResizeOperationMetrics = Pick<KubeletMetrics, "containerRequestedResizes">;

const ZERO: Dec = { n: 0n, s: 0 };

function amount(list: Readonly<Record<string, string>> | undefined, name: string): Dec {
  const q = list?.[name];
  return q === undefined ? ZERO : parseDec(String(q));
}

/**
 * upstream resizeOperationForResources: a missing quantity counts as zero, so going to or from
 * zero is a remove or an add, not a decrease or an increase. Undefined when unchanged.
 */
export function resizeOperationForResources(
  newAmount: Dec,
  oldAmount: Dec,
): ResizeOperation | undefined {
  const newZero = newAmount.n === 0n;
  const oldZero = oldAmount.n === 0n;
  if (newZero && !oldZero) return "remove";
  if (oldZero && !newZero) return "add";
  const c = cmpDec(newAmount, oldAmount);
  if (c < 0) return "decrease";
  if (c > 0) return "increase";
  return undefined;
}

/** The label values, in upstream's order of counting. */
const COUNTED = [
  ["memory", "requests"],
  ["memory", "limits"],
  ["cpu", "requests"],
  ["cpu", "limits"],
] as const;

/**
 * upstream recordContainerResizeOperations: counts every changed cpu or memory amount of each
 * resizable container (matched by name and kind) and says whether there was any.
 */
export function recordContainerResizeOperations(
  oldPod: V1Pod,
  pod: V1Pod,
  metrics?: ResizeOperationMetrics,
): boolean {
  let hasResize = false;
  const kinds = [
    ["init", oldPod.spec?.initContainers, pod.spec?.initContainers],
    ["regular", oldPod.spec?.containers, pod.spec?.containers],
  ] as const;
  for (const [kind, olds, news] of kinds) {
    for (const old of olds ?? []) {
      if (!isResizableContainer(old, kind)) continue;
      // The API forbids adding or removing containers in an update; such a pod has no resize.
      const now: V1Container | undefined = news?.findLast((c) =>
        c.name === old.name && isResizableContainer(c, kind)
      );
      if (!now) continue;
      for (const [resource, requirement] of COUNTED) {
        const op = resizeOperationForResources(
          amount(now.resources?.[requirement], resource),
          amount(old.resources?.[requirement], resource),
        );
        if (op === undefined) continue;
        hasResize = true;
        metrics?.containerRequestedResizes.inc({ resource, requirement, operation: op });
      }
    }
  }
  return hasResize;
}

/**
 * upstream recordResizeOperations: whether the update resizes a container or the pod-level
 * resources (not counted, as upstream's TODO). The containers are counted first and the
 * pod-level resources looked at only when no container changed, as upstream's `||`.
 */
export function recordResizeOperations(
  oldPod: V1Pod,
  pod: V1Pod,
  metrics?: ResizeOperationMetrics,
): boolean {
  return recordContainerResizeOperations(oldPod, pod, metrics) ||
    !requirementsEqual(oldPod.spec?.resources, pod.spec?.resources);
}
