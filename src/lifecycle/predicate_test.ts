import assert from "node:assert/strict";
import type { V1Container, V1Node, V1Pod } from "@kubernetes/client-node";
import { admitPod, isExtendedResourceName, podRequests } from "./predicate.ts";

function node(overrides: Partial<V1Node> = {}): V1Node {
  return {
    metadata: { name: "node-a", labels: { "kubernetes.io/os": "linux", zone: "a" } },
    status: { allocatable: { cpu: "1500m", memory: "1Gi", pods: "3" } },
    ...overrides,
  };
}

function container(name: string, requests: Record<string, string> = {}): V1Container {
  return { name, image: "busybox", resources: { requests } };
}

function pod(name: string, spec: Partial<V1Pod["spec"]> = {}, labels?: Record<string, string>) {
  const p: V1Pod = {
    metadata: { name, namespace: "default", labels },
    spec: { containers: [container("main")], ...spec },
  };
  return p;
}

Deno.test("admitPod admits a pod that fits", () => {
  const other = pod("other", { containers: [container("c", { cpu: "500m", memory: "256Mi" })] });
  const p = pod("p", { containers: [container("c", { cpu: "1", memory: "512Mi" })] });
  assert.deepEqual(admitPod({ pod: p, otherPods: [other], node: node() }), { admit: true });
});

Deno.test("admitPod rejects with OutOfcpu in milli-cores", () => {
  const other = pod("other", { containers: [container("c", { cpu: "500m" })] });
  const p = pod("p", { containers: [container("c", { cpu: "2" })] });
  assert.deepEqual(admitPod({ pod: p, otherPods: [other], node: node() }), {
    admit: false,
    reason: "OutOfcpu",
    message: "Node didn't have enough resource: cpu, requested: 2000, used: 500, capacity: 1500",
  });
});

Deno.test("admitPod rejects with OutOfmemory in bytes", () => {
  const other = pod("other", { containers: [container("c", { memory: "512Mi" })] });
  const p = pod("p", { containers: [container("c", { memory: "600Mi" })] });
  assert.deepEqual(admitPod({ pod: p, otherPods: [other], node: node() }), {
    admit: false,
    reason: "OutOfmemory",
    message: "Node didn't have enough resource: memory, requested: 629145600, " +
      "used: 536870912, capacity: 1073741824",
  });
});

Deno.test("admitPod rejects with OutOfpods when allocatable pods are used up", () => {
  const others = [pod("a"), pod("b"), pod("c")];
  assert.deepEqual(admitPod({ pod: pod("p"), otherPods: others, node: node() }), {
    admit: false,
    reason: "OutOfpods",
    message: "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3",
  });
});

Deno.test("admitPod reports hugepages and known extended resources, ignores unknown ones", () => {
  const n = node({
    status: { allocatable: { cpu: "1", memory: "1Gi", pods: "10", "example.com/gpu": "1" } },
  });
  const gpu = pod("p", { containers: [container("c", { "example.com/gpu": "2" })] });
  assert.deepEqual(admitPod({ pod: gpu, otherPods: [], node: n }), {
    admit: false,
    reason: "OutOfexample.com/gpu",
    message: "Node didn't have enough resource: example.com/gpu, requested: 2, used: 0, " +
      "capacity: 1",
  });
  const unknown = pod("p", { containers: [container("c", { "example.com/fpga": "5" })] });
  assert.deepEqual(admitPod({ pod: unknown, otherPods: [], node: n }), { admit: true });
  const huge = pod("p", { containers: [container("c", { "hugepages-2Mi": "2Mi" })] });
  const result = admitPod({ pod: huge, otherPods: [], node: n });
  assert.equal(result.admit ? "" : result.reason, "OutOfhugepages-2Mi");
});

Deno.test("podRequests takes the max of running set and init peak, counting sidecars", () => {
  const p = pod("p", {
    containers: [container("main", { cpu: "500m" })],
    initContainers: [
      container("setup", { cpu: "1" }),
      { ...container("sidecar", { cpu: "200m" }), restartPolicy: "Always" },
      container("late-init", { cpu: "900m" }),
    ],
    overhead: { cpu: "100m" },
  });
  // Running: 500m + 200m = 700m. Init peak: max(1000m, 200m, 900m + 200m) = 1100m. Plus 100m.
  assert.equal(Math.round((podRequests(p).get("cpu") ?? 0) * 1000), 1200);
});

Deno.test("admitPod counts init containers and sidecars of pending and admitted pods", () => {
  const other = pod("other", {
    containers: [container("c", { cpu: "100m" })],
    initContainers: [{ ...container("side", { cpu: "300m" }), restartPolicy: "Always" }],
  });
  const p = pod("p", {
    containers: [container("c", { cpu: "100m" })],
    initContainers: [container("init", { cpu: "1200m" })],
  });
  assert.deepEqual(admitPod({ pod: p, otherPods: [other], node: node() }), {
    admit: false,
    reason: "OutOfcpu",
    message: "Node didn't have enough resource: cpu, requested: 1200, used: 400, capacity: 1500",
  });
});

Deno.test("admitPod rejects a host port already taken on the node", () => {
  const withPort = (name: string, hostIP?: string) =>
    pod(name, {
      containers: [{ name: "c", ports: [{ containerPort: 80, hostPort: 8080, hostIP }] }],
    });
  assert.deepEqual(
    admitPod({ pod: withPort("p"), otherPods: [withPort("o", "10.0.0.1")], node: node() }),
    {
      admit: false,
      reason: "NodePorts",
      message:
        "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports",
    },
  );
  assert.deepEqual(
    admitPod({
      pod: withPort("p", "10.0.0.2"),
      otherPods: [withPort("o", "10.0.0.1")],
      node: node(),
    }),
    { admit: true },
  );
});

Deno.test("admitPod rejects a node selector or required affinity mismatch", () => {
  const expected = {
    admit: false,
    reason: "NodeAffinity",
    message: "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector",
  };
  const bySelector = pod("p", { nodeSelector: { zone: "b" } });
  assert.deepEqual(admitPod({ pod: bySelector, otherPods: [], node: node() }), expected);
  const byAffinity = pod("p", {
    affinity: {
      nodeAffinity: {
        requiredDuringSchedulingIgnoredDuringExecution: {
          nodeSelectorTerms: [{
            matchExpressions: [{ key: "zone", operator: "NotIn", values: ["a"] }],
          }],
        },
      },
    },
  });
  assert.deepEqual(admitPod({ pod: byAffinity, otherPods: [], node: node() }), expected);
  const matching = pod("p", {
    nodeSelector: { zone: "a" },
    affinity: {
      nodeAffinity: {
        requiredDuringSchedulingIgnoredDuringExecution: {
          nodeSelectorTerms: [
            { matchExpressions: [{ key: "zone", operator: "In", values: ["b"] }] },
            { matchFields: [{ key: "metadata.name", operator: "In", values: ["node-a"] }] },
          ],
        },
      },
    },
  });
  assert.deepEqual(admitPod({ pod: matching, otherPods: [], node: node() }), { admit: true });
});

Deno.test("admitPod rejects a pod bound to another node name", () => {
  assert.deepEqual(
    admitPod({ pod: pod("p", { nodeName: "node-b" }), otherPods: [], node: node() }),
    {
      admit: false,
      reason: "NodeName",
      message: "Predicate NodeName failed: node(s) didn't match the requested node name",
    },
  );
});

Deno.test("admitPod rejects an OS label or OS field that is not the host OS", () => {
  const byLabel = pod("p", {}, { "kubernetes.io/os": "windows" });
  assert.deepEqual(admitPod({ pod: byLabel, otherPods: [], node: node() }), {
    admit: false,
    reason: "PodOSSelectorNodeLabelDoesNotMatch",
    message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label",
  });
  const byField = pod("p", { os: { name: "windows" } });
  assert.deepEqual(admitPod({ pod: byField, otherPods: [], node: node() }), {
    admit: false,
    reason: "PodOSNotSupported",
    message: "Failed to admit pod as the OS field doesn't match node OS",
  });
  assert.deepEqual(admitPod({ pod: byField, otherPods: [], node: node(), hostOS: "windows" }), {
    admit: true,
  });
});

Deno.test("admitPod rejects untolerated NoExecute taints except for static pods", () => {
  const tainted = node({
    spec: {
      taints: [
        { key: "dedicated", value: "gpu", effect: "NoExecute" },
        { key: "maint", effect: "NoSchedule" },
      ],
    },
  });
  assert.deepEqual(admitPod({ pod: pod("p"), otherPods: [], node: tainted }), {
    admit: false,
    reason: "TaintToleration",
    message: "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate",
  });
  const tolerant = pod("p", {
    tolerations: [{ key: "dedicated", operator: "Equal", value: "gpu" }],
  });
  assert.deepEqual(admitPod({ pod: tolerant, otherPods: [], node: tainted }), { admit: true });
  const staticPod = pod("p");
  staticPod.metadata!.annotations = { "kubernetes.io/config.source": "file" };
  assert.deepEqual(admitPod({ pod: staticPod, otherPods: [], node: tainted }), { admit: true });
});

Deno.test("admitPod leaves its inputs untouched", () => {
  const other = pod("other", { containers: [container("c", { cpu: "500m" })] });
  const p = pod("p", {
    containers: [container("c", { cpu: "2", "example.com/unknown": "1" })],
    initContainers: [{ ...container("side", { cpu: "1" }), restartPolicy: "Always" }],
  });
  const n = node();
  const before = structuredClone({ p, other, n });
  admitPod({ pod: p, otherPods: [other], node: n });
  assert.deepEqual({ p, other, n }, before);
});

Deno.test("isExtendedResourceName follows upstream's v1helper.IsExtendedResourceName", () => {
  for (const ok of ["example.com/gpu", "nvidia.com/gpu", "a.b/c_d.e-f"]) {
    assert.equal(isExtendedResourceName(ok), true, ok);
  }
  for (
    const bad of [
      "cpu",
      "hugepages-2Mi",
      "kubernetes.io/batteries",
      "requests.example.com/gpu",
      "example.com/",
      "Example.com/gpu",
      "example.com/gpu/extra",
      `example.com/${"x".repeat(64)}`,
    ]
  ) {
    assert.equal(isExtendedResourceName(bad), false, bad);
  }
});
