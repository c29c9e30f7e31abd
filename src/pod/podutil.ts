/**
 * @module
 * Questions about a pod's spec and status that the runtime manager, the status code, the
 * resource arithmetic and the volume plugins all ask, answered once. Corresponds to upstream's
 * `podutil` (pkg/api/v1/pod/util.go).
 */

import type { V1ContainerStatus } from "@kubernetes/client-node";

/**
 * Whether an init container is a sidecar: its `restartPolicy` is `Always` (upstream
 * podutil.IsRestartableInitContainer). Regular containers carry no restartPolicy.
 */
export function isRestartableInitContainer(c: { readonly restartPolicy?: string }): boolean {
  return c.restartPolicy === "Always";
}

/** The status of the named container in the list (upstream podutil.GetContainerStatus). */
export function getContainerStatus(
  statuses: readonly V1ContainerStatus[] | undefined,
  name: string,
): V1ContainerStatus | undefined {
  return statuses?.find((s) => s.name === name);
}
