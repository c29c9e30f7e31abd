/**
 * @module
 * DraManager: the pod side of Dynamic Resource Allocation. Before a pod's sandbox is created the
 * runtime manager calls {@link DraManager.prepareResources}; once its containers have stopped
 * the pod syncer calls {@link DraManager.unprepareResources}. Each call is one observation of
 * dra_operations_duration_seconds, claims or not, as upstream times them.
 *
 * No DRA driver can register with this kubelet (there is no plugin registration service), so
 * no claim is ever prepared: a pod whose `spec.resourceClaims` name a generated or existing
 * ResourceClaim fails to prepare, as upstream fails it on a node where the claim's driver is not
 * registered, and the pod does not start. Claims with no ResourceClaim (a template for which
 * none was generated) need nothing. Unpreparing finds nothing prepared, so it only checks the
 * claim references, as upstream does. dra_resource_claims_in_use therefore reads 0 for `<any>`.
 *
 * Corresponds to upstream `pkg/kubelet/cm/dra/manager.go` (PrepareResources,
 * UnprepareResources), `claiminfo.go` (claimsInUse) and `resourceclaim.Name` of
 * k8s.io/dynamic-resource-allocation.
 */

import type { V1Pod, V1PodResourceClaim } from "@kubernetes/client-node";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import { ANY_DRIVER, type DraMetrics, type DraOperation } from "../metrics/dra_metrics.ts";

/** Options of {@link DraManager}. */
export interface DraManagerOptions {
  readonly clock: Clock;
  readonly logger: Logger;
  /** Where the operations and the claims in use are recorded. @default none */
  readonly metrics?: DraMetrics;
}

/** A pod's resource claims could not be prepared or unprepared; the message is upstream's. */
export class DynamicResourcesError extends Error {
  override name = "DynamicResourcesError";
}

/**
 * Upstream resourceclaim.Name: the ResourceClaim a pod's claim refers to, or undefined when a
 * template produced none (nothing to do). Throws when a template's claim is not generated yet or
 * the claim names no source.
 */
export function resourceClaimName(pod: V1Pod, claim: V1PodResourceClaim): string | undefined {
  const who = `pod "${pod.metadata?.namespace ?? ""}/${pod.metadata?.name ?? ""}"`;
  if (claim.resourceClaimName != null) return claim.resourceClaimName;
  if (claim.resourceClaimTemplateName != null) {
    const status = (pod.status?.resourceClaimStatuses ?? []).find((s) => s.name === claim.name);
    if (!status) throw new Error(`${who}: ResourceClaim not created yet`);
    return status.resourceClaimName ?? undefined;
  }
  throw new Error(
    `${who}, spec.resourceClaim ${
      JSON.stringify(claim.name)
    }: none of the supported fields are set`,
  );
}

/** Prepares and unprepares pods' ResourceClaims; see the module documentation. */
export class DraManager {
  readonly #o: DraManagerOptions;

  constructor(opts: DraManagerOptions) {
    this.#o = opts;
    opts.metrics?.setClaimsInUseSource(() => this.claimsInUse());
  }

  /**
   * Upstream PrepareResources: prepares every ResourceClaim of the pod before its sandbox is
   * made. Throws {@link DynamicResourcesError} when one cannot be (here: any that names a claim).
   */
  prepareResources(pod: V1Pod): void {
    this.#timed("PrepareResources", "prepare dynamic resources", () => {
      for (const claim of pod.spec?.resourceClaims ?? []) {
        this.#o.logger.v(3).info("Processing resource", { podClaim: claim.name });
        const name = resourceClaimName(pod, claim);
        if (name === undefined) continue;
        throw new Error(
          `ResourceClaim ${name}: no DRA driver can be registered with this kubelet, ` +
            "so its devices cannot be prepared",
        );
      }
    });
  }

  /**
   * Upstream UnprepareResources, after the pod's containers stopped: releases what was prepared
   * for it (nothing here). Throws {@link DynamicResourcesError} for a claim reference that names
   * no ResourceClaim source or a template claim never generated, as upstream does.
   */
  unprepareResources(pod: V1Pod): void {
    this.#timed("UnprepareResources", "unprepare dynamic resources", () => {
      for (const claim of pod.spec?.resourceClaims ?? []) resourceClaimName(pod, claim);
    });
  }

  /** Prepared claims by driver, and {@link ANY_DRIVER}: none is ever prepared here. */
  claimsInUse(): Map<string, number> {
    return new Map([[ANY_DRIVER, 0]]);
  }

  #timed(operation: DraOperation, what: string, fn: () => void): void {
    const start = this.#o.clock.now();
    let failure: unknown;
    try {
      fn();
    } catch (e) {
      failure = e;
    }
    this.#o.metrics?.observeOperation(
      operation,
      (this.#o.clock.now() - start) / 1000,
      failure !== undefined,
    );
    if (failure !== undefined) {
      const message = failure instanceof Error ? failure.message : String(failure);
      throw new DynamicResourcesError(`${what}: ${message}`, { cause: failure });
    }
  }
}
