/**
 * @module
 * Questions about a pod's spec and status that the runtime manager, the status code, the
 * resource arithmetic and the volume plugins all ask, answered once. Corresponds to upstream's
 * `podutil` (pkg/api/v1/pod/util.go).
 */

import type {
  V1Container,
  V1ContainerRestartRule,
  V1ContainerStatus,
  V1PodSpec,
} from "@kubernetes/client-node";

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

/**
 * The first of the container's restartPolicyRules whose exit codes match `exitCode`, operator
 * In or NotIn; a rule with another operator never matches (upstream
 * podutil.FindMatchingContainerRestartRule).
 */
export function findMatchingContainerRestartRule(
  container: Pick<V1Container, "restartPolicyRules">,
  exitCode: number,
): V1ContainerRestartRule | undefined {
  for (const rule of container.restartPolicyRules ?? []) {
    const codes = rule.exitCodes;
    if (codes === undefined) continue;
    const listed = (codes.values ?? []).includes(exitCode);
    if (codes.operator === "In" && listed) return rule;
    if (codes.operator === "NotIn" && !listed) return rule;
  }
  return undefined;
}

/**
 * Whether the container restarts after exiting with `exitCode` (upstream
 * podutil.ContainerShouldRestart, ContainerRestartRules and RestartAllContainersOnContainerExits
 * on): rules count only beside a container-level restartPolicy; the first matching rule with
 * action Restart or RestartAllContainers restarts it; without one, its own restartPolicy
 * decides, then the pod's (Always when unset).
 */
export function containerShouldRestart(
  container: Pick<V1Container, "restartPolicy" | "restartPolicyRules">,
  spec: Pick<V1PodSpec, "restartPolicy"> | undefined,
  exitCode: number,
): boolean {
  if (container.restartPolicy !== undefined) {
    const action = findMatchingContainerRestartRule(container, exitCode)?.action;
    if (action === "Restart" || action === "RestartAllContainers") return true;
    switch (container.restartPolicy) {
      case "Always":
        return true;
      case "OnFailure":
        return exitCode !== 0;
      case "Never":
        return false;
    }
  }
  switch (spec?.restartPolicy) {
    case "OnFailure":
      return exitCode !== 0;
    case "Never":
      return false;
    default:
      return true;
  }
}

/**
 * Whether an init or regular container has a rule with action RestartAllContainers, so that
 * the pod may be restarted in place (upstream podutil.AllContainersCouldRestart).
 */
export function allContainersCouldRestart(
  spec: Pick<V1PodSpec, "containers" | "initContainers"> | undefined,
): boolean {
  const all = [...(spec?.initContainers ?? []), ...(spec?.containers ?? [])];
  return all.some((c) =>
    (c.restartPolicyRules ?? []).some((r) => r.action === "RestartAllContainers")
  );
}
