import assert from "node:assert/strict";
import type { V1Pod, V1PodResourceClaim } from "@kubernetes/client-node";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import { MetricsRegistry } from "../metrics/metrics.ts";
import { DraMetrics } from "../metrics/dra_metrics.ts";
import { parseExposition } from "../metrics/prometheus.ts";
import { DraManager, DynamicResourcesError, resourceClaimName } from "./dra_manager.ts";

function setup() {
  const registry = new MetricsRegistry();
  const metrics = new DraMetrics(registry);
  const dra = new DraManager({
    clock: new FakeClock(),
    logger: createLogger({ write: () => {} }),
    metrics,
  });
  return { registry, metrics, dra };
}

function pod(claims: V1PodResourceClaim[] | undefined, status?: V1Pod["status"]): V1Pod {
  return {
    metadata: { name: "web", namespace: "default", uid: "u1" },
    spec: { containers: [{ name: "c", image: "busybox" }], resourceClaims: claims },
    status,
  };
}

const ops = (m: DraMetrics, operation: string, isError: boolean) =>
  m.operationsDuration.count({ operation_name: operation, is_error: String(isError) });

Deno.test("DraManager times PrepareResources and UnprepareResources of a pod without claims", () => {
  const { dra, metrics } = setup();
  dra.prepareResources(pod(undefined));
  dra.unprepareResources(pod(undefined));
  assert.equal(ops(metrics, "PrepareResources", false), 1);
  assert.equal(ops(metrics, "UnprepareResources", false), 1);
});

Deno.test("DraManager fails to prepare a claim, as upstream without a registered driver", () => {
  const { dra, metrics } = setup();
  const p = pod([{ name: "gpu", resourceClaimName: "gpu-claim" }]);
  assert.throws(
    () => dra.prepareResources(p),
    (e: unknown) =>
      e instanceof DynamicResourcesError &&
      e.message.startsWith("prepare dynamic resources: ResourceClaim gpu-claim: "),
  );
  assert.equal(ops(metrics, "PrepareResources", true), 1);
  // Nothing was prepared: unpreparing has nothing to release.
  dra.unprepareResources(p);
  assert.equal(ops(metrics, "UnprepareResources", false), 1);
});

Deno.test("DraManager skips a template claim for which no ResourceClaim was generated", () => {
  const { dra, metrics } = setup();
  const claims = [{ name: "gpu", resourceClaimTemplateName: "gpu-template" }];
  // Generated: a claim to prepare, which fails here.
  assert.throws(() =>
    dra.prepareResources(pod(claims, {
      resourceClaimStatuses: [{ name: "gpu", resourceClaimName: "web-gpu-x7" }],
    }))
  );
  // None needed (the status names no claim): nothing to do.
  dra.prepareResources(pod(claims, { resourceClaimStatuses: [{ name: "gpu" }] }));
  assert.equal(ops(metrics, "PrepareResources", false), 1);
  // Not generated yet: upstream's error, for both operations.
  assert.throws(() => dra.prepareResources(pod(claims)), /ResourceClaim not created yet/);
  assert.throws(() => dra.unprepareResources(pod(claims)), /ResourceClaim not created yet/);
  assert.equal(ops(metrics, "UnprepareResources", true), 1);
});

Deno.test("resourceClaimName rejects a claim that names no source", () => {
  assert.throws(
    () => resourceClaimName(pod([]), { name: "x" }),
    /pod "default\/web", spec.resourceClaim "x": none of the supported fields are set/,
  );
});

Deno.test("DraManager shows no claim in use for <any> driver", async () => {
  const { registry } = setup();
  const f = parseExposition(await registry.render()).find((x) =>
    x.name === "dra_resource_claims_in_use"
  );
  assert.deepEqual(f?.samples.map((s) => [s.labels.driver_name, s.value]), [["<any>", 0]]);
});
