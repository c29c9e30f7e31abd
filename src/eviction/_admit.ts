/**
 * @module
 * Admission under node pressure: critical pods always; under memory pressure alone, pods
 * other than BestEffort and BestEffort pods tolerating the memory-pressure taint; under any
 * other pressure nothing. Private to eviction_manager.ts. Corresponds to upstream
 * `managerImpl.Admit` in `pkg/kubelet/eviction/eviction_manager.go` and
 * `TolerationsTolerateTaint` in `k8s.io/component-helpers/scheduling/corev1`.
 */

import type { V1Pod, V1Toleration } from "@kubernetes/client-node";
import type { AdmitResult } from "../lifecycle/predicate.ts";
import { getPodQOS, isCriticalPod } from "../qos/qos.ts";
import { nodeConditionMessage, REASON } from "./_message.ts";

/** The taint the node carries under memory pressure (upstream TaintNodeMemoryPressure). */
export const TAINT_NODE_MEMORY_PRESSURE = "node.kubernetes.io/memory-pressure";

/** Whether `pod` may be admitted while the node reports `conditions`. */
export function admitUnderPressure(pod: V1Pod, conditions: readonly string[]): AdmitResult {
  if (conditions.length === 0 || isCriticalPod(pod)) return { admit: true };
  if (conditions.length === 1 && conditions[0] === "MemoryPressure") {
    if (getPodQOS(pod) !== "BestEffort") return { admit: true };
    const taint = { key: TAINT_NODE_MEMORY_PRESSURE, effect: "NoSchedule", value: "" };
    if ((pod.spec?.tolerations ?? []).some((t) => tolerates(t, taint))) return { admit: true };
  }
  return { admit: false, reason: REASON, message: nodeConditionMessage(conditions) };
}

/** Upstream Toleration.ToleratesTaint; Gt and Lt need a numeric taint value, absent here. */
function tolerates(
  t: V1Toleration,
  taint: { readonly key: string; readonly effect: string; readonly value: string },
): boolean {
  if (t.effect && t.effect !== taint.effect) return false;
  if (t.key && t.key !== taint.key) return false;
  switch (t.operator ?? "") {
    case "":
    case "Equal":
      return (t.value ?? "") === taint.value;
    case "Exists":
      return true;
    default:
      return false;
  }
}
