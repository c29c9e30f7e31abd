import assert from "node:assert/strict";
import type { V1Container, V1Pod, V1ResourceRequirements } from "@kubernetes/client-node";
import { KubeletMetrics } from "../metrics/metrics.ts";
import { parseDec } from "../qos/resource_helpers.ts";
import { recordResizeOperations, resizeOperationForResources } from "./resize_operations.ts";

function c(name: string, resources: V1ResourceRequirements): V1Container {
  return { name, image: "img", resources };
}

function pod(containers: V1Container[], initContainers?: V1Container[]): V1Pod {
  return {
    metadata: { uid: "u", name: "p", namespace: "ns" },
    spec: { containers, ...(initContainers ? { initContainers } : {}) },
  };
}

/** Every non-zero series of kubelet_container_requested_resizes_total, as resource/requirement/op. */
async function counted(metrics: KubeletMetrics): Promise<string[]> {
  const text = await metrics.render();
  const re =
    /^kubelet_container_requested_resizes_total\{operation="(\w+)",requirement="(\w+)",resource="(\w+)"\} (\d+)$/gm;
  return [...text.matchAll(re)].map(([, op, req, res, n]) => `${res}/${req}/${op}=${n}`).sort();
}

Deno.test("resizeOperationForResources treats a missing amount as zero, as upstream", () => {
  const q = (s: string) => parseDec(s);
  assert.equal(resizeOperationForResources(q("200m"), q("100m")), "increase");
  assert.equal(resizeOperationForResources(q("0.1"), q("200m")), "decrease");
  assert.equal(resizeOperationForResources(q("0"), q("100Mi")), "remove");
  assert.equal(resizeOperationForResources(q("1Gi"), q("0")), "add");
  // Equal amounts written differently are no change.
  assert.equal(resizeOperationForResources(q("1Gi"), q("1024Mi")), undefined);
  assert.equal(resizeOperationForResources(q("0"), q("0m")), undefined);
});

Deno.test("recordResizeOperations counts each changed amount of each container once", async () => {
  const metrics = new KubeletMetrics({ process: false });
  const before = pod(
    [
      c("a", { requests: { cpu: "100m", memory: "64Mi" }, limits: { cpu: "1", memory: "128Mi" } }),
      c("b", { requests: { cpu: "100m" } }),
    ],
    [c("init", { requests: { cpu: "50m" } })],
  );
  const after = pod(
    [
      // cpu request up, cpu limit removed, memory request down, memory limit unchanged.
      c("a", { requests: { cpu: "200m", memory: "32Mi" }, limits: { memory: "128Mi" } }),
      // a memory limit added; the cpu request written differently but equal.
      c("b", { requests: { cpu: "0.1" }, limits: { memory: "1Gi" } }),
    ],
    // Init containers are resizable in v1.36 (InPlacePodVerticalScalingInitContainers).
    [c("init", { requests: { cpu: "100m" } })],
  );
  assert.equal(recordResizeOperations(before, after, metrics), true);
  assert.deepEqual(await counted(metrics), [
    "cpu/limits/remove=1",
    "cpu/requests/increase=2",
    "memory/limits/add=1",
    "memory/requests/decrease=1",
  ]);
});

Deno.test("recordResizeOperations counts nothing for an update that resizes nothing", async () => {
  const metrics = new KubeletMetrics({ process: false });
  const p = pod([c("a", { requests: { cpu: "100m" }, limits: { memory: "1Gi" } })]);
  const relabelled = structuredClone(p);
  relabelled.metadata!.labels = { x: "y" };
  // Other resources than cpu and memory are not resized in place; "0" is no amount.
  relabelled.spec!.containers[0]!.resources = {
    requests: { cpu: "100m", memory: "0", "ephemeral-storage": "1Gi" },
    limits: { memory: "1024Mi" },
  };
  assert.equal(recordResizeOperations(p, relabelled, metrics), false);
  assert.deepEqual(await counted(metrics), []);
});

Deno.test("recordResizeOperations tells a pod-level resize without counting it, as upstream", async () => {
  const metrics = new KubeletMetrics({ process: false });
  const p = pod([c("a", { requests: { cpu: "100m" } })]);
  p.spec!.resources = { limits: { cpu: "1" } };
  const up = structuredClone(p);
  up.spec!.resources = { limits: { cpu: "2" } };
  assert.equal(recordResizeOperations(p, up, metrics), true);
  assert.deepEqual(await counted(metrics), []);
});
