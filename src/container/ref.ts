/**
 * @module
 * The reference events about one container carry: the pod's reference pointed at the
 * container's place in the pod spec. Corresponds to upstream's `GenerateContainerRef`
 * (pkg/kubelet/container/ref.go); used by the runtime manager, the prober and the lifecycle
 * handlers for every container event.
 */

import type { V1Pod } from "@kubernetes/client-node";
import { type ObjectRef, podRef } from "../client/record.ts";

/** upstream GenerateContainerRef: the pod, pointed at the container's place in its spec. */
export function containerRef(pod: V1Pod, name: string): ObjectRef {
  const spec = pod.spec;
  const fieldPath = spec?.containers?.some((c) => c.name === name)
    ? `spec.containers{${name}}`
    : spec?.initContainers?.some((c) => c.name === name)
    ? `spec.initContainers{${name}}`
    : spec?.ephemeralContainers?.some((c) => c.name === name)
    ? `spec.ephemeralContainers{${name}}`
    : `implicitly required container ${name}`;
  return { ...podRef(pod), fieldPath };
}
