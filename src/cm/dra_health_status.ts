/**
 * @module
 * A container's `allocatedResourcesStatus` for the DRA claims it names (the ResourceHealthStatus
 * feature): one entry per claim (and request), `claim:<name>` or `claim:<name>/<request>`, with
 * the health of each device the claim's drivers prepared for it (devices of other requests left
 * out; a subrequest counts as its request), by the device's first CDI device ID, else
 * `<driver>/<pool>/<device>`, each ID once; the driver's message too with
 * ResourceHealthStatusMessage. Claims not prepared here, and entries with no device, are left
 * out. Pure: the claims and the health come from the DRA manager.
 * Corresponds to upstream UpdateAllocatedResourcesStatus and buildResourceHealth of
 * `pkg/kubelet/cm/dra/manager.go`, with `resourceclaim.BaseRequestRef`.
 */

import type {
  V1Pod,
  V1PodResourceClaim,
  V1ResourceHealth,
  V1ResourceStatus,
} from "@kubernetes/client-node";
import { kobj, type Logger } from "../klog/klog.ts";
import type { ClaimInfoState } from "./dra_state.ts";
import type { DeviceHealth } from "./dra_health.ts";

/** What {@link containerClaimsHealth} reads. */
export interface ClaimsHealthSource {
  /** The prepared claim `namespace/name`, undefined when it is not. */
  readonly claimInfo: (name: string, namespace: string) => ClaimInfoState | undefined;
  /** A device's health; undefined reads Unknown. */
  readonly health: (driver: string, pool: string, device: string) => DeviceHealth | undefined;
  /** The ResourceClaim a pod's claim names (resourceclaim.Name); may throw. */
  readonly claimName: (pod: V1Pod, claim: V1PodResourceClaim) => string | undefined;
  /** The ResourceHealthStatusMessage gate. */
  readonly withMessage: boolean;
  readonly logger: Logger;
}

/** The container's claims' device health; see the module documentation. */
export function containerClaimsHealth(
  pod: V1Pod,
  containerName: string,
  src: ClaimsHealthSource,
): V1ResourceStatus[] {
  const container = (pod.spec?.containers ?? []).find((c) => c.name === containerName);
  const claims = container?.resources?.claims ?? [];
  if (claims.length === 0) return [];
  const logger = src.logger.with({ pod: kobj(pod) });
  const namespace = pod.metadata?.namespace ?? "";
  // The generated names first; the pod's claim resolved when its status lacks them yet.
  const generated = new Map<string, string>();
  for (const s of pod.status?.resourceClaimStatuses ?? []) {
    if (s.resourceClaimName != null) generated.set(s.name, s.resourceClaimName);
  }
  const out = new Map<string, V1ResourceHealth[]>();
  for (const claim of claims) {
    let name = generated.get(claim.name);
    if (name === undefined) {
      const podClaim = (pod.spec?.resourceClaims ?? []).find((c) => c.name === claim.name);
      try {
        name = podClaim && src.claimName(pod, podClaim);
      } catch {
        // Not generated yet: nothing to report.
      }
    }
    if (name === undefined) {
      logger.v(4).info("Could not find generated name for resource claim", {
        container: containerName,
        claimName: claim.name,
      });
      continue;
    }
    const info = src.claimInfo(name, namespace);
    if (!info) {
      logger.v(4).info("Could not find claim info for resource claim", {
        container: containerName,
        claimName: name,
      });
      continue;
    }
    const resources: V1ResourceHealth[] = [];
    const seen = new Set<string>();
    const request = claim.request ? claim.request.split("/")[0]! : "";
    for (const [driver, devices] of info.driverState) {
      for (const d of devices) {
        if (request !== "" && d.requestNames.length > 0 && !d.requestNames.includes(request)) {
          continue;
        }
        const id = d.cdiDeviceIds[0] ?? `${driver}/${d.poolName}/${d.deviceName}`;
        if (seen.has(id)) continue;
        seen.add(id);
        const h = src.health(driver, d.poolName, d.deviceName);
        const r: V1ResourceHealth = { resourceID: id, health: h?.health ?? "Unknown" };
        if (src.withMessage && h?.message) r.message = h.message;
        resources.push(r);
      }
    }
    out.set(
      claim.request ? `claim:${claim.name}/${claim.request}` : `claim:${claim.name}`,
      resources,
    );
  }
  return [...out].filter(([, r]) => r.length > 0).map(([name, resources]) => ({ name, resources }));
}
