/**
 * @module
 * The Linux namespaces of a pod, as both its sandbox and every container in it give them to the
 * runtime: network and IPC of the pod or the node, PID per container, shared in the pod or the
 * node's, and the user namespace: the node's, named explicitly (UserNamespacesSupport is GA), or
 * for a `hostUsers: false` pod its own, with the mappings the user namespace manager
 * (userns/userns_manager.ts) allocated. containerd 2.x refuses a container whose user namespace
 * differs from its sandbox's, so both must come from here. Corresponds to upstream
 * `NamespacesForPod` (pkg/kubelet/kuberuntime/util/util.go); the RuntimeClass lookup and the
 * mappings are its callers'.
 */

import type { V1Pod } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";

/**
 * Upstream NamespacesForPod, given the pod's user namespace (upstream
 * GetOrCreateUserNamespaceMappings). @param userns defaults to the node's user namespace
 */
export function namespacesForPod(pod: V1Pod, userns?: api.UserNamespace): api.NamespaceOption {
  const s = pod.spec;
  let pid = api.NamespaceMode.CONTAINER;
  if (s?.hostPID === true) pid = api.NamespaceMode.NODE;
  else if (s?.shareProcessNamespace === true) pid = api.NamespaceMode.POD;
  return {
    network: s?.hostNetwork === true ? api.NamespaceMode.NODE : api.NamespaceMode.POD,
    pid,
    ipc: s?.hostIPC === true ? api.NamespaceMode.NODE : api.NamespaceMode.POD,
    targetId: "",
    usernsOptions: userns ?? { mode: api.NamespaceMode.NODE, uids: [], gids: [] },
  };
}
