/**
 * @module
 * The runtime's view of one pod as tests build it: a sandbox status and the PodStatus (pod
 * cache entry) holding some, for the sandbox decision's and the status generator's tests.
 */

import * as api from "../../proto/runtime/v1/api.ts";
import type { PodStatus } from "../container/pod_cache.ts";

/** A sandbox of pod `ns/p` (uid `uid-1`) with id `sb-<attempt>`. */
export function sandboxStatus(
  state: api.PodSandboxState,
  ip: string,
  attempt = 0,
): api.PodSandboxStatus {
  return api.PodSandboxStatus.fromPartial({
    id: `sb-${attempt}`,
    metadata: { name: "p", uid: "uid-1", namespace: "ns", attempt },
    state,
    network: { ip, additionalIps: [] },
  });
}

/** The runtime's status of pod `ns/p` with these sandboxes (newest first) and no containers. */
export function runtimePodStatus(sandboxes: api.PodSandboxStatus[]): PodStatus {
  return {
    id: "uid-1",
    name: "p",
    namespace: "ns",
    ips: [],
    sandboxStatuses: sandboxes,
    containerStatuses: [],
    timestamp: 1,
  };
}
