/**
 * @module
 * Whether a pod needs a new sandbox, and with which attempt number: the one decision SyncPod
 * (`pod_actions.ts`) and the PodReadyToStartContainers condition (`status/generate.ts`) both
 * take from the runtime's view of the pod. Corresponds to upstream `PodSandboxChanged`
 * (pkg/kubelet/kuberuntime/util/util.go).
 */

import type { V1Pod } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import type { PodStatus } from "../container/pod_cache.ts";

/** What {@link podSandboxChanged} found. */
export interface SandboxChange {
  /** A new sandbox must be created. */
  readonly changed: boolean;
  /** The attempt number for the sandbox to use or create. */
  readonly attempt: number;
  /** The sandbox to reuse or to kill first; "" when none. */
  readonly sandboxId: string;
}

/**
 * Whether the pod needs a new sandbox: none exists, several are ready, the newest is not ready,
 * its network namespace mode no longer matches `hostNetwork`, or it has no IP. A new sandbox's
 * attempt is the newest sandbox's plus one, as upstream counts it (sandboxes come newest first).
 */
export function podSandboxChanged(pod: V1Pod, podStatus: PodStatus): SandboxChange {
  const newest = podStatus.sandboxStatuses[0];
  if (newest === undefined) return { changed: true, attempt: 0, sandboxId: "" };
  const attempt = newest.metadata?.attempt ?? 0;
  const ready =
    podStatus.sandboxStatuses.filter((s) => s.state === api.PodSandboxState.SANDBOX_READY).length;
  if (ready > 1 || newest.state !== api.PodSandboxState.SANDBOX_READY) {
    return { changed: true, attempt: attempt + 1, sandboxId: newest.id };
  }
  const hostNetwork = pod.spec?.hostNetwork === true;
  const mode = newest.linux?.namespaces?.options?.network ?? api.NamespaceMode.POD;
  if (mode !== (hostNetwork ? api.NamespaceMode.NODE : api.NamespaceMode.POD)) {
    return { changed: true, attempt: attempt + 1, sandboxId: "" };
  }
  if (!hostNetwork && newest.network !== undefined && newest.network.ip === "") {
    return { changed: true, attempt: attempt + 1, sandboxId: newest.id };
  }
  return { changed: false, attempt, sandboxId: newest.id };
}
