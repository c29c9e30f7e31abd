import assert from "node:assert/strict";
import { applyDefaults } from "../apis/config_schema.ts";
import {
  applyDependentDefaults,
  type KubeletConfiguration,
  kubeletConfigurationFields,
} from "../apis/config_types.ts";
import type { MachineInfo } from "../stats/machine_info.ts";
import {
  capacityAndAllocatable,
  conditionEvents,
  GOARCH,
  hugePageResourceName,
  initialNode,
  nodeDeclaredFeatures,
  nodeStatus,
  nodeStatusHasChanged,
  type StatusInputs,
} from "./node_status.ts";

function config(decoded: Record<string, unknown> = {}): KubeletConfiguration {
  const c = applyDefaults(kubeletConfigurationFields, decoded);
  applyDependentDefaults(c, decoded);
  return c;
}

const MACHINE: MachineInfo = {
  numCores: 2,
  memoryCapacity: 8 * 2 ** 30,
  hugePages: new Map([[2 * 2 ** 20, 0]]),
  machineID: "m",
  systemUUID: "u",
  bootID: "b",
  kernelVersion: "6.18.0",
  osImage: "Debian GNU/Linux 12 (bookworm)",
};

function inputs(over: Partial<StatusInputs> = {}): StatusInputs {
  return {
    config: config(),
    machine: MACHINE,
    rootfsCapacity: 100 * 2 ** 30,
    hostname: "node-a",
    nodeIPs: ["10.0.0.5"],
    kubeletVersion: "v1.36.3",
    containerRuntimeVersion: "containerd://1.6.20",
    images: [],
    notReadyReasons: [],
    now: Date.UTC(2026, 11, 2, 12, 0, 0),
    ...over,
  };
}

Deno.test("initialNode sets upstream's labels, taints and attach-detach annotation", () => {
  const node = initialNode({
    nodeName: "node-a",
    hostname: "node-a",
    nodeLabels: { "node-role.kubernetes.io/worker": "" },
    registerWithTaints: [{ key: "dedicated", value: "db", effect: "NoSchedule" }],
    registerSchedulable: false,
    enableControllerAttachDetach: true,
  });
  assert.deepEqual(node.metadata?.labels, {
    "kubernetes.io/hostname": "node-a",
    "kubernetes.io/os": "linux",
    "kubernetes.io/arch": GOARCH,
    "beta.kubernetes.io/os": "linux",
    "beta.kubernetes.io/arch": GOARCH,
    "node-role.kubernetes.io/worker": "",
  });
  assert.deepEqual(node.metadata?.annotations, {
    "volumes.kubernetes.io/controller-managed-attach-detach": "true",
  });
  assert.equal(node.spec?.unschedulable, true);
  assert.deepEqual(node.spec?.taints, [
    { key: "dedicated", value: "db", effect: "NoSchedule" },
    { key: "node.kubernetes.io/unschedulable", effect: "NoSchedule" },
  ]);
});

Deno.test("capacityAndAllocatable subtracts reservations and hard eviction thresholds", () => {
  const { capacity, allocatable } = capacityAndAllocatable(inputs({
    config: config({
      systemReserved: { cpu: "500m", memory: "1Gi" },
      kubeReserved: { memory: "512Mi" },
    }),
  }));
  // Upstream's BinarySI quantities: the largest suffix that divides the amount exactly.
  assert.deepEqual(capacity, {
    cpu: "2",
    memory: "8Gi",
    pods: "110",
    "ephemeral-storage": "100Gi",
    "hugepages-2Mi": "0",
  });
  assert.equal(allocatable.cpu, "1500m");
  assert.equal(allocatable.memory, "6556Mi", "8Gi - 1Gi - 512Mi - 100Mi");
  // Upstream's value: nodefs.available<10% is the float32 0.1 (0.10000000149...), so the
  // threshold is int64(107374182400 × 0.10000000149) = 10737418400, 160 bytes over 10Gi.
  assert.equal(allocatable["ephemeral-storage"], "96636764000", "100Gi less the 10% threshold");
  assert.equal(allocatable.pods, "110");
  assert.equal(hugePageResourceName(2 ** 30), "hugepages-1Gi");
});

Deno.test("nodeStatus reports Ready with upstream reasons, and NotReady with the runtime's", () => {
  const ready = nodeStatus(inputs());
  const byType = Object.fromEntries((ready.conditions ?? []).map((c) => [c.type, c]));
  assert.equal(byType.Ready?.status, "True");
  assert.equal(byType.Ready?.reason, "KubeletReady");
  assert.equal(byType.Ready?.message, "kubelet is posting ready status");
  assert.equal(byType.MemoryPressure?.reason, "KubeletHasSufficientMemory");
  assert.equal(byType.DiskPressure?.reason, "KubeletHasNoDiskPressure");
  assert.equal(byType.PIDPressure?.reason, "KubeletHasSufficientPID");
  assert.deepEqual(ready.nodeInfo?.containerRuntimeVersion, "containerd://1.6.20");
  assert.deepEqual(ready.addresses, [{ type: "InternalIP", address: "10.0.0.5" }, {
    type: "Hostname",
    address: "node-a",
  }]);
  assert.deepEqual(ready.daemonEndpoints, { kubeletEndpoint: { Port: 10250 } });

  const later = inputs({
    now: Date.UTC(2026, 11, 2, 12, 0, 10),
    notReadyReasons: ["container runtime is down"],
  });
  const notReady = nodeStatus(later, ready);
  const nr = notReady.conditions?.find((c) => c.type === "Ready");
  assert.equal(nr?.status, "False");
  assert.equal(nr?.reason, "KubeletNotReady");
  assert.equal(nr?.message, "container runtime is down");
  assert.equal(String(nr?.lastTransitionTime), "2026-12-02T12:00:10Z", "the transition is stamped");
  const mem = notReady.conditions?.find((c) => c.type === "MemoryPressure");
  assert.equal(
    String(mem?.lastTransitionTime),
    "2026-12-02T12:00:00Z",
    "an unchanged condition keeps its time",
  );
  assert.equal(String(mem?.lastHeartbeatTime), "2026-12-02T12:00:10Z");
});

Deno.test("nodeStatusHasChanged ignores heartbeat times only", () => {
  const a = nodeStatus(inputs());
  const b = nodeStatus(inputs({ now: Date.UTC(2026, 11, 2, 12, 0, 10) }), a);
  assert.equal(nodeStatusHasChanged(a, b), false);
  const c = nodeStatus(
    inputs({ now: Date.UTC(2026, 11, 2, 12, 0, 20), notReadyReasons: ["x"] }),
    b,
  );
  assert.equal(nodeStatusHasChanged(b, c), true);
});

Deno.test("nodeStatus lists the largest images first with at most five names each", () => {
  const image = (id: string, size: number, tags: string[]) => ({
    id,
    repoTags: tags,
    repoDigests: [],
    size: BigInt(size),
    uid: undefined,
    username: "",
    spec: undefined,
    pinned: false,
  });
  const s = nodeStatus(inputs({
    images: [
      image("a", 10, ["a:1"]),
      image("b", 30, ["b:1", "b:2", "b:3", "b:4", "b:5", "b:6"]),
    ] as never,
  }));
  assert.deepEqual(s.images, [
    { names: ["b:1", "b:2", "b:3", "b:4", "b:5"], sizeBytes: 30 },
    { names: ["a:1"], sizeBytes: 10 },
  ]);
});

Deno.test("nodeStatus reports the eviction manager's pressure with upstream's reasons", () => {
  const status = nodeStatus({ ...inputs(), pressure: { memory: true, disk: true, pid: true } });
  const byType = Object.fromEntries((status.conditions ?? []).map((c) => [c.type, c]));
  assert.deepEqual(
    ["MemoryPressure", "DiskPressure", "PIDPressure"].map((t) => [
      byType[t]?.status,
      byType[t]?.reason,
      byType[t]?.message,
    ]),
    [
      ["True", "KubeletHasInsufficientMemory", "kubelet has insufficient memory available"],
      ["True", "KubeletHasDiskPressure", "kubelet has disk pressure"],
      ["True", "KubeletHasInsufficientPID", "kubelet has insufficient PID available"],
    ],
  );
  // Back to False: a new transition time.
  const later = nodeStatus({ ...inputs(), now: inputs().now + 60_000 }, status);
  const mem = later.conditions?.find((c) => c.type === "MemoryPressure");
  assert.equal(mem?.status, "False");
  assert.notEqual(
    String(mem?.lastTransitionTime),
    String(byType.MemoryPressure?.lastTransitionTime),
  );
});

Deno.test("capacityAndAllocatable takes percentage thresholds off as upstream's float32", () => {
  // Values from Go: int64(float64(c) * float64(float32(10) / 100)) and its difference.
  const ephemeral = (rootfsCapacity: number, evictionHard?: Record<string, string>) =>
    capacityAndAllocatable(inputs({ rootfsCapacity, config: config({ evictionHard }) }))
      .allocatable["ephemeral-storage"];
  assert.equal(ephemeral(82_000_000_000), "73799999878", "122 bytes under 90 %");
  assert.equal(
    ephemeral(82_000_000_000, { "nodefs.available": "2Gi" }),
    "77980973Ki",
    "82000000000 - 2Gi, BinarySI",
  );
  assert.equal(
    ephemeral(82_000_000_000, { "nodefs.available": "0%", "memory.available": "1Gi" }),
    "80078125Ki",
    "0% disables the threshold: all of 82000000000",
  );
  const memory = capacityAndAllocatable(inputs({
    config: config({ evictionHard: { "memory.available": "5%" } }),
  })).allocatable.memory;
  assert.equal(memory, "8160437856", "8Gi less int64(8589934592 × float32(0.05)) = 429496736");
});

Deno.test("conditionEvents records as upstream's condition setters", () => {
  const c = (type: string, status: string) => ({ type, status });
  const next = [
    c("MemoryPressure", "False"),
    c("DiskPressure", "True"),
    c("PIDPressure", "False"),
    c("Ready", "True"),
  ];
  assert.deepEqual(conditionEvents(undefined, next), [
    "NodeHasSufficientMemory",
    "NodeHasDiskPressure",
    "NodeHasSufficientPID",
  ]);
  // The node lifecycle controller set every condition Unknown while the kubelet was away.
  const unknown = next.map((x) => c(x.type, "Unknown"));
  assert.deepEqual(conditionEvents(unknown, next), [
    "NodeHasSufficientMemory",
    "NodeHasDiskPressure",
    "NodeHasSufficientPID",
    "NodeReady",
  ]);
  assert.deepEqual(conditionEvents(next, next), []);
  assert.deepEqual(
    conditionEvents(next, [
      c("MemoryPressure", "True"),
      c("DiskPressure", "False"),
      c("PIDPressure", "True"),
      c("Ready", "False"),
    ]),
    [
      "NodeHasInsufficientMemory",
      "NodeHasNoDiskPressure",
      "NodeHasInsufficientPID",
      "NodeNotReady",
    ],
  );
});

Deno.test("capacityAndAllocatable leaves ephemeral-storage out without localStorageCapacityIsolation", () => {
  const { capacity, allocatable } = capacityAndAllocatable(inputs({
    config: config({ localStorageCapacityIsolation: false }),
  }));
  assert.equal(capacity["ephemeral-storage"], undefined);
  assert.equal(allocatable["ephemeral-storage"], undefined);
  assert.equal(capacity.cpu, "2");
});

Deno.test("nodeStatus reports the machine's swap in nodeInfo only when it has some (NodeSwap)", () => {
  assert.equal(nodeStatus(inputs()).nodeInfo?.swap, undefined);
  const swapped = nodeStatus(inputs({ machine: { ...MACHINE, swapCapacity: 2 * 2 ** 30 } }));
  assert.deepEqual(swapped.nodeInfo?.swap, { capacity: 2 * 2 ** 30 });
});

Deno.test("nodeStatus lists the runtime's handlers with their features, as upstream's RuntimeHandlers setter", () => {
  assert.equal(nodeStatus(inputs()).runtimeHandlers, undefined, "none reported: left out");
  const s = nodeStatus(inputs({
    runtimeHandlers: [
      { name: "", features: { recursiveReadOnlyMounts: true, userNamespaces: true } },
      { name: "runc-test" },
    ],
  }));
  assert.deepEqual(s.runtimeHandlers, [
    { name: "", features: { recursiveReadOnlyMounts: true, userNamespaces: true } },
    { name: "runc-test", features: { recursiveReadOnlyMounts: false, userNamespaces: false } },
  ]);
});

Deno.test("the node declares the features it supports, as upstream's NodeDeclaredFeatures setter", () => {
  assert.deepEqual(nodeDeclaredFeatures({}), [
    "InPlacePodLevelResourcesVerticalScaling",
    "RestartAllContainersOnContainerExits",
  ]);
  assert.deepEqual(
    nodeDeclaredFeatures({
      InPlacePodLevelResourcesVerticalScaling: false,
      RestartAllContainersOnContainerExits: false,
    }),
    [],
  );
  assert.deepEqual(nodeDeclaredFeatures({ NodeDeclaredFeatures: false }), []);
  const s = nodeStatus(inputs({ declaredFeatures: ["RestartAllContainersOnContainerExits"] }));
  assert.deepEqual((s as { declaredFeatures?: string[] }).declaredFeatures, [
    "RestartAllContainersOnContainerExits",
  ]);
  assert.equal(
    (nodeStatus(inputs()) as { declaredFeatures?: string[] }).declaredFeatures,
    undefined,
  );
});
