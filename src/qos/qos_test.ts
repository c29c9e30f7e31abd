import assert from "node:assert/strict";
import type { V1Container, V1Pod, V1ResourceRequirements } from "@kubernetes/client-node";
import {
  computePodQOS,
  getContainerOOMScoreAdjust,
  getPodQOS,
  isCriticalPod,
  isNodeCriticalPod,
} from "./qos.ts";

const GI = 1024 ** 3;
const CAPACITY = 4 * GI;

function container(name: string, resources?: V1ResourceRequirements): V1Container {
  return { name, image: "busybox", resources };
}

function pod(containers: V1Container[], extra: Partial<V1Pod["spec"]> = {}): V1Pod {
  return {
    metadata: { name: "p", namespace: "default", uid: "u1" },
    spec: { containers, ...extra },
  };
}

const guaranteed = { requests: { cpu: "1", memory: "1Gi" }, limits: { cpu: "1", memory: "1Gi" } };

Deno.test("getPodQOS honours status.qosClass over the spec", () => {
  const p = pod([container("a")]);
  p.status = { qosClass: "Guaranteed" };
  assert.equal(getPodQOS(p), "Guaranteed");
  assert.equal(computePodQOS(p), "BestEffort");
});

Deno.test("computePodQOS is BestEffort without cpu or memory requests and limits", () => {
  assert.equal(computePodQOS(pod([container("a"), container("b", {})])), "BestEffort");
  const storageOnly = container("c", { requests: { "ephemeral-storage": "1Gi" } });
  assert.equal(computePodQOS(pod([storageOnly])), "BestEffort");
});

Deno.test("computePodQOS is Guaranteed when every container has equal cpu and memory", () => {
  const sameAmount = container("b", {
    requests: { cpu: "1000m", memory: "1073741824" },
    limits: { cpu: "1", memory: "1Gi" },
  });
  assert.equal(computePodQOS(pod([container("a", guaranteed), sameAmount])), "Guaranteed");
});

Deno.test("computePodQOS is Burstable for requests below limits or mixed containers", () => {
  const lower = container("a", { requests: { cpu: "500m" }, limits: { cpu: "1" } });
  assert.equal(computePodQOS(pod([lower])), "Burstable");
  assert.equal(computePodQOS(pod([container("a", guaranteed), container("b")])), "Burstable");
  const memOnly = container("a", { requests: { memory: "1Gi" }, limits: { memory: "1Gi" } });
  assert.equal(computePodQOS(pod([memOnly])), "Burstable");
});

Deno.test("computePodQOS counts init containers", () => {
  const p = pod([container("a", guaranteed)], { initContainers: [container("init")] });
  assert.equal(computePodQOS(p), "Burstable");
});

Deno.test("computePodQOS uses pod-level resources when the pod sets them", () => {
  const p = pod([container("a"), container("b", { requests: { cpu: "100m" } })], {
    resources: guaranteed,
  });
  assert.equal(computePodQOS(p), "Guaranteed");
});

Deno.test("getContainerOOMScoreAdjust gives Guaranteed -997 and BestEffort 1000", () => {
  const g = pod([container("a", guaranteed)]);
  assert.equal(getContainerOOMScoreAdjust(g, g.spec!.containers[0]!, CAPACITY), -997);
  const b = pod([container("a")]);
  assert.equal(getContainerOOMScoreAdjust(b, b.spec!.containers[0]!, CAPACITY), 1000);
});

Deno.test("getContainerOOMScoreAdjust scales Burstable by memory request", () => {
  const c = container("a", { requests: { memory: "1Gi" } });
  assert.equal(getContainerOOMScoreAdjust(pod([c]), c, CAPACITY), 750);
  // No memory request would score 1000; Burstable stays below BestEffort.
  const cpuOnly = container("b", { requests: { cpu: "100m" } });
  assert.equal(getContainerOOMScoreAdjust(pod([cpuOnly]), cpuOnly, CAPACITY), 999);
  // Requesting all memory would reach 0; Burstable stays above Guaranteed's 3.
  const huge = container("c", { requests: { memory: "8Gi" } });
  assert.equal(getContainerOOMScoreAdjust(pod([huge]), huge, CAPACITY), 3);
});

Deno.test("getContainerOOMScoreAdjust gives node-critical pods -997 whatever their QoS", () => {
  const p = pod([container("a")], { priorityClassName: "system-node-critical" });
  p.metadata!.annotations = { "kubernetes.io/config.source": "file" };
  assert.ok(isNodeCriticalPod(p));
  assert.equal(getContainerOOMScoreAdjust(p, p.spec!.containers[0]!, CAPACITY), -997);
  // Static but not system-node-critical: critical, yet scored by QoS.
  const s = pod([container("a")]);
  s.metadata!.annotations = { "kubernetes.io/config.source": "file" };
  assert.ok(isCriticalPod(s));
  assert.equal(isNodeCriticalPod(s), false);
  assert.equal(getContainerOOMScoreAdjust(s, s.spec!.containers[0]!, CAPACITY), 1000);
});

Deno.test("isCriticalPod counts mirror pods and system-critical priority, not api pods", () => {
  const api = pod([container("a")]);
  api.metadata!.annotations = { "kubernetes.io/config.source": "api" };
  assert.equal(isCriticalPod(api), false);
  const mirror = pod([container("a")]);
  mirror.metadata!.annotations = { "kubernetes.io/config.mirror": "abc" };
  assert.ok(isCriticalPod(mirror));
  assert.ok(isCriticalPod(pod([container("a")], { priority: 2_000_000_000 })));
  assert.equal(isCriticalPod(pod([container("a")], { priority: 1_999_999_999 })), false);
});

Deno.test("getContainerOOMScoreAdjust keeps sidecars at or below the regular containers", () => {
  const sidecar: V1Container = {
    ...container("side", { requests: { memory: "1Gi" } }),
    restartPolicy: "Always",
  };
  const main = container("main", { requests: { memory: "2Gi" } });
  const p = pod([main], { initContainers: [sidecar] });
  assert.equal(getContainerOOMScoreAdjust(p, main, CAPACITY), 500);
  assert.equal(getContainerOOMScoreAdjust(p, sidecar, CAPACITY), 500);
  // A plain init container with the same request is not clamped.
  const init = container("init", { requests: { memory: "1Gi" } });
  const q = pod([main], { initContainers: [init] });
  assert.equal(getContainerOOMScoreAdjust(q, init, CAPACITY), 750);
});

Deno.test("getContainerOOMScoreAdjust shares unclaimed pod-level memory among containers", () => {
  const a = container("a", { requests: { memory: "512Mi" } });
  const b = container("b");
  const p = pod([a, b], { resources: { requests: { memory: "2Gi" } } });
  // (2Gi - 512Mi) / 2 containers = 768Mi each on top of their own request.
  assert.equal(getContainerOOMScoreAdjust(p, a, CAPACITY), 1000 - Math.floor(1280000 / 4096));
  assert.equal(getContainerOOMScoreAdjust(p, b, CAPACITY), 1000 - Math.floor(768000 / 4096));
});

Deno.test("getContainerOOMScoreAdjust refuses a non-positive capacity for Burstable pods", () => {
  const c = container("a", { requests: { memory: "1Gi" } });
  assert.throws(() => getContainerOOMScoreAdjust(pod([c]), c, 0), RangeError);
});
