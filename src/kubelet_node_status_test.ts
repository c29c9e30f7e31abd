import assert from "node:assert/strict";
import type { V1Node } from "@kubernetes/client-node";
import { FakeClock } from "./util/clock.ts";
import { applyDefaults } from "./apis/config_schema.ts";
import { createLogger } from "./klog/klog.ts";
import { KubeClient } from "./client/kube_client.ts";
import { applyDependentDefaults, kubeletConfigurationFields } from "./apis/config_types.ts";
import {
  NodeStatusManager,
  type NodeStatusOptions,
  reconcileExisting,
  zeroExtendedResources,
} from "./kubelet_node_status.ts";
import type { EventRecorder, ObjectRef } from "./client/record.ts";
import { initialNode } from "./nodestatus/node_status.ts";
import { KubeletMetrics } from "./metrics/metrics.ts";
import { NodeStartupLatencyTracker } from "./util/node_startup_latency_tracker.ts";
import { PodCIDRUpdater } from "./kubelet_network.ts";
import { RuntimeState } from "./runtime_state.ts";

/** A loopback stand-in for the apiserver's node endpoints. */
function nodeServer() {
  const nodes = new Map<string, V1Node>();
  const requests: string[] = [];
  let uid = 0;
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const url = new URL(req.url);
    requests.push(`${req.method} ${url.pathname}${url.search}`);
    const [, , , , name, sub] = url.pathname.split("/");
    const notFound = () =>
      Response.json({ kind: "Status", reason: "NotFound", message: "nodes not found" }, {
        status: 404,
      });
    if (req.method === "POST") {
      const body = await req.json() as V1Node;
      if (nodes.has(body.metadata!.name!)) {
        return Response.json({ reason: "AlreadyExists" }, { status: 409 });
      }
      body.metadata!.uid = `uid-${++uid}`;
      nodes.set(body.metadata!.name!, body);
      return Response.json(body, { status: 201 });
    }
    const node = nodes.get(name ?? "");
    if (!node) return notFound();
    if (req.method === "GET") return Response.json(node);
    if (req.method === "PATCH") {
      const patch = await req.json() as {
        status?: V1Node["status"];
        metadata?: V1Node["metadata"];
      };
      if (sub === "status") node.status = patch.status;
      else node.metadata!.labels = { ...node.metadata!.labels, ...patch.metadata?.labels };
      return Response.json(node);
    }
    return new Response("unexpected", { status: 500 });
  });
  return { server, nodes, requests, url: `http://127.0.0.1:${(server.addr as Deno.NetAddr).port}` };
}

function manager(
  url: string,
  clock: FakeClock,
  notReady: string[] = [],
  cachedNode?: () => V1Node | undefined,
  extra: Partial<NodeStatusOptions> = {},
) {
  const client = new KubeClient({
    config: { server: url, insecureSkipTLSVerify: false, source: "t" },
    clock,
    qps: -1,
    userAgent: "t",
  });
  const config = applyDefaults(kubeletConfigurationFields, {});
  applyDependentDefaults(config, {});
  const m = new NodeStatusManager({
    client,
    heartbeatClient: client,
    config,
    nodeName: "node-a",
    hostname: "node-a",
    nodeIPs: ["10.0.0.5"],
    nodeLabels: { role: "worker" },
    registerWithTaints: [],
    registerSchedulable: true,
    enableControllerAttachDetach: true,
    kubeletVersion: "v1.36.3",
    clock,
    logger: createLogger({ write: () => {}, now: () => new Date(0), pid: 1 }),
    machineInfo: () =>
      Promise.resolve({
        numCores: 2,
        memoryCapacity: 2 ** 33,
        hugePages: new Map(),
        machineID: "m",
        systemUUID: "s",
        bootID: "b",
        kernelVersion: "k",
        osImage: "o",
      }),
    rootfsCapacity: () => Promise.resolve(2 ** 36),
    containerRuntimeVersion: () => "containerd://1.6.20",
    listImages: () => Promise.resolve([]),
    notReadyReasons: () => notReady,
    cachedNode,
    ...extra,
  });
  return { client, m };
}

Deno.test("NodeStatusManager registers, skips unchanged reports until the report period, re-registers a deleted Node", async () => {
  const s = nodeServer();
  const clock = new FakeClock(Date.UTC(2026, 11, 2, 12, 0, 0));
  const { client, m } = manager(s.url, clock);
  try {
    assert.equal(await m.tryRegister(), true);
    assert.equal(s.nodes.get("node-a")?.metadata?.labels?.role, "worker");
    await m.updateNodeStatus();
    assert.equal(
      s.nodes.get("node-a")?.status?.conditions?.find((c) => c.type === "Ready")?.status,
      "True",
    );
    const patches = () =>
      s.requests.filter((r) => r === "PATCH /api/v1/nodes/node-a/status").length;
    assert.equal(patches(), 1);
    assert.ok(
      s.requests.includes("GET /api/v1/nodes/node-a?resourceVersion=0"),
      "without an informer the first try reads the apiserver's cache",
    );
    clock.step(10_000);
    await m.updateNodeStatus();
    assert.equal(
      patches(),
      1,
      "only heartbeat times changed: no report before nodeStatusReportFrequency",
    );
    clock.step(5 * 60_000);
    await m.updateNodeStatus();
    assert.equal(patches(), 2, "the report period passed");

    s.nodes.delete("node-a");
    await assert.rejects(m.updateNodeStatus(), /404/);
    assert.equal(m.registered, false);
    assert.equal(await m.tryRegister(), true);
    assert.equal(s.nodes.get("node-a")?.metadata?.uid, "uid-2");
  } finally {
    client.close();
    await s.server.shutdown();
  }
});

Deno.test("NodeStatusManager gives the runtime the Node's pod CIDRs joined by ',', once per change, and patches when only they changed", async () => {
  const s = nodeServer();
  const clock = new FakeClock(Date.UTC(2026, 11, 2, 12, 0, 0));
  const pushed: string[] = [];
  const podCIDR = new PodCIDRUpdater({
    state: new RuntimeState(clock),
    runtime: () => ({ updatePodCIDR: (cidr) => Promise.resolve(void pushed.push(cidr)) }),
    logger: createLogger({ write: () => {} }),
  });
  const asked: string[] = [];
  const { client, m } = manager(s.url, clock, [], undefined, {
    updatePodCIDR: (cidr, signal) => {
      asked.push(cidr);
      return podCIDR.update(cidr, signal);
    },
  });
  const patches = () => s.requests.filter((r) => r === "PATCH /api/v1/nodes/node-a/status").length;
  try {
    await m.tryRegister();
    await m.updateNodeStatus();
    assert.equal(patches(), 1);
    assert.deepEqual(asked, [], "a Node without spec.podCIDRs has nothing to give");

    // The controller manager allocates the node's CIDRs.
    s.nodes.get("node-a")!.spec = {
      podCIDR: "10.244.1.0/24",
      podCIDRs: ["10.244.1.0/24", "fd00:1::/64"],
    };
    clock.step(10_000);
    await m.updateNodeStatus();
    assert.deepEqual(pushed, ["10.244.1.0/24,fd00:1::/64"]);
    assert.equal(patches(), 2, "only the pod CIDR changed: the status is patched all the same");

    clock.step(10_000);
    await m.updateNodeStatus();
    assert.deepEqual(asked, ["10.244.1.0/24,fd00:1::/64", "10.244.1.0/24,fd00:1::/64"]);
    assert.deepEqual(pushed, ["10.244.1.0/24,fd00:1::/64"], "unchanged: not given again");
    assert.equal(patches(), 2);

    s.nodes.get("node-a")!.spec = { podCIDR: "10.244.7.0/24", podCIDRs: ["10.244.7.0/24"] };
    clock.step(10_000);
    await m.updateNodeStatus();
    assert.deepEqual(pushed, ["10.244.1.0/24,fd00:1::/64", "10.244.7.0/24"]);
    assert.equal(patches(), 3);
  } finally {
    client.close();
    await s.server.shutdown();
  }
});

Deno.test("NodeStatusManager logs a pod CIDR the runtime refused once and still updates the status", async () => {
  const s = nodeServer();
  const clock = new FakeClock(Date.UTC(2026, 11, 2, 12, 0, 0));
  const lines: string[] = [];
  const { client, m } = manager(s.url, clock, [], undefined, {
    logger: createLogger({ write: (l) => lines.push(l), now: () => new Date(0), pid: 1 }),
    updatePodCIDR: () => Promise.reject(new Error("failed to update pod CIDR: runtime down")),
  });
  const patches = () => s.requests.filter((r) => r === "PATCH /api/v1/nodes/node-a/status").length;
  try {
    await m.tryRegister();
    await m.updateNodeStatus();
    assert.equal(patches(), 1);
    s.nodes.get("node-a")!.spec = { podCIDRs: ["10.244.1.0/24"] };
    clock.step(10_000);
    await m.updateNodeStatus();
    assert.equal(patches(), 2, "a refused CIDR may have changed: the status is patched");
    assert.ok(
      lines.some((l) =>
        l.startsWith("E") && l.includes('"Error updating pod CIDR"') &&
        l.includes("failed to update pod CIDR: runtime down")
      ),
      lines.join("\n"),
    );
    const logged = lines.length;
    clock.step(100);
    await m.updateNodeStatus();
    assert.equal(patches(), 2, "the same CIDR refused again: no patch on every poll");
    assert.equal(lines.length, logged, "nor a log line");
  } finally {
    client.close();
    await s.server.shutdown();
  }
});

Deno.test("NodeStatusManager records the node status events upstream's setters record", async () => {
  const s = nodeServer();
  const clock = new FakeClock(Date.UTC(2026, 11, 2, 12, 0, 0));
  const recorded: { ref: ObjectRef; type: string; reason: string; message: string }[] = [];
  const recorder: EventRecorder = {
    event: (ref, type, reason, message) => recorded.push({ ref, type, reason, message }),
  };
  const notReady = ["container runtime is down"];
  let memoryPressure = false;
  const { client, m } = manager(s.url, clock, notReady, undefined, {
    recorder,
    pressure: () => ({ memory: memoryPressure, disk: false, pid: false }),
  });
  const reasons = () => recorded.splice(0).map((e) => e.reason);
  try {
    await m.tryRegister();
    await m.updateNodeStatus();
    // New pressure conditions start Unknown upstream, so each records; a new Ready does not.
    assert.deepEqual(recorded[0], {
      ref: { apiVersion: "v1", kind: "Node", name: "node-a" },
      type: "Normal",
      reason: "NodeHasSufficientMemory",
      message: "Node node-a status is now: NodeHasSufficientMemory",
    });
    assert.deepEqual(reasons(), [
      "NodeHasSufficientMemory",
      "NodeHasNoDiskPressure",
      "NodeHasSufficientPID",
    ]);
    clock.step(10_000);
    await m.updateNodeStatus();
    assert.deepEqual(reasons(), [], "nothing changed: no events");

    notReady.length = 0;
    clock.step(10_000);
    await m.updateNodeStatus();
    assert.deepEqual(reasons(), ["NodeReady"]);

    memoryPressure = true;
    notReady.push("PLEG is not healthy");
    clock.step(10_000);
    await m.updateNodeStatus();
    assert.deepEqual(reasons(), ["NodeHasInsufficientMemory", "NodeNotReady"]);

    s.nodes.get("node-a")!.spec!.unschedulable = true;
    clock.step(10_000);
    await m.updateNodeStatus();
    assert.deepEqual(reasons(), ["NodeNotSchedulable"]);
    s.nodes.get("node-a")!.spec!.unschedulable = false;
    clock.step(10_000);
    await m.updateNodeStatus();
    assert.deepEqual(reasons(), ["NodeSchedulable"]);
  } finally {
    client.close();
    await s.server.shutdown();
  }
});

Deno.test("NodeStatusManager reads the informer's Node on the first try and GETs it only on retries", async () => {
  const s = nodeServer();
  const clock = new FakeClock(Date.UTC(2026, 11, 2, 12, 0, 0));
  let cached: V1Node | undefined;
  const { client, m } = manager(s.url, clock, [], () => cached);
  const gets = () => s.requests.filter((r) => r.startsWith("GET "));
  try {
    assert.equal(await m.tryRegister(), true);
    // Before the informer's first list: the first try fails, the retry reads etcd.
    await m.updateNodeStatus();
    assert.deepEqual(gets(), ["GET /api/v1/nodes/node-a"]);
    assert.equal(s.requests.at(-1), "PATCH /api/v1/nodes/node-a/status");

    cached = structuredClone(s.nodes.get("node-a"));
    for (let i = 0; i < 3; i++) {
      clock.step(10_000);
      await m.updateNodeStatus();
    }
    assert.equal(gets().length, 1, "the informer's copy served every first try");
    assert.equal(m.node?.metadata?.uid, "uid-1");

    // The Node deleted: the informer drops it, the retry's GET finds it gone.
    s.nodes.delete("node-a");
    cached = undefined;
    clock.step(10_000);
    await assert.rejects(m.updateNodeStatus(), /404/);
    assert.equal(m.registered, false);
    assert.equal(gets().length, 2);
  } finally {
    client.close();
    await s.server.shutdown();
  }
});

Deno.test("NodeStatusManager reconciles an existing Node's default labels instead of recreating it", async () => {
  const s = nodeServer();
  const clock = new FakeClock(0);
  const { client, m } = manager(s.url, clock);
  try {
    s.nodes.set("node-a", {
      metadata: { name: "node-a", uid: "uid-0", labels: { "kubernetes.io/hostname": "old" } },
    });
    assert.equal(await m.tryRegister(), true);
    assert.equal(s.nodes.get("node-a")?.metadata?.uid, "uid-0", "not recreated");
    assert.equal(s.nodes.get("node-a")?.metadata?.labels?.["kubernetes.io/hostname"], "node-a");
  } finally {
    client.close();
    await s.server.shutdown();
  }
});

Deno.test("NodeStatusManager zeroes an existing Node's extended resources when the device manager has no checkpoint, and reports the plugins' devices", async () => {
  const s = nodeServer();
  const clock = new FakeClock(0);
  let reset = true;
  const { client, m } = manager(s.url, clock, [], undefined, {
    shouldResetExtendedResourceCapacity: () => Promise.resolve(reset),
    devices: () => ({
      capacity: { "example.com/gpu": 3 },
      allocatable: { "example.com/gpu": 2 },
      removed: ["example.com/old"],
    }),
  });
  try {
    s.nodes.set("node-a", {
      metadata: { name: "node-a", uid: "uid-0", labels: {} },
      status: {
        capacity: { cpu: "2", "example.com/gpu": "4", "kubernetes.io/batteries": "1" },
        allocatable: { cpu: "2", "example.com/gpu": "4" },
      },
    });
    assert.equal(await m.tryRegister(), true);
    assert.deepEqual(s.nodes.get("node-a")?.status, {
      capacity: { "example.com/gpu": "0" },
      allocatable: { "example.com/gpu": "0" },
    });
    reset = false;
    await m.updateNodeStatus();
    const st = s.nodes.get("node-a")!.status!;
    assert.equal(st.capacity?.["example.com/gpu"], "3");
    assert.equal(st.allocatable?.["example.com/gpu"], "2");
    assert.equal(st.capacity?.["example.com/old"], "0");
    assert.equal(st.allocatable?.["example.com/old"], "0");
  } finally {
    client.close();
    await s.server.shutdown();
  }
});

Deno.test("zeroExtendedResources leaves native and kubernetes.io resources alone", () => {
  assert.equal(zeroExtendedResources({ status: { capacity: { cpu: "1" } } }), undefined);
  assert.deepEqual(
    zeroExtendedResources({
      status: { capacity: { cpu: "1", "hugepages-2Mi": "0", "nvidia.com/gpu": "8" } },
    }),
    { status: { capacity: { "nvidia.com/gpu": "0" }, allocatable: { "nvidia.com/gpu": "0" } } },
  );
});

Deno.test("reconcileExisting patches only what differs", () => {
  const wanted = initialNode({
    nodeName: "n",
    hostname: "n",
    nodeLabels: { extra: "x" },
    registerWithTaints: [],
    registerSchedulable: true,
    enableControllerAttachDetach: true,
  });
  assert.equal(reconcileExisting(wanted, structuredClone(wanted)), undefined);
  const patch = reconcileExisting(wanted, {
    metadata: { labels: { ...wanted.metadata?.labels, "kubernetes.io/os": "windows" } },
  });
  assert.deepEqual(patch, {
    metadata: {
      labels: { "kubernetes.io/os": "linux" },
      annotations: { "volumes.kubernetes.io/controller-managed-attach-detach": "true" },
    },
  });
});

/** The tracker, noting each call with the number of apiserver requests made before it. */
class CallLog extends NodeStartupLatencyTracker {
  readonly calls: string[] = [];
  constructor(readonly requests: readonly string[], clock: FakeClock, metrics: KubeletMetrics) {
    super({ clock, metrics, bootTimeMs: undefined });
  }
  override recordAttemptRegisterNode(): void {
    this.calls.push(`attempt after ${this.requests.length}`);
    super.recordAttemptRegisterNode();
  }
  override recordRegisteredNewNode(): void {
    this.calls.push(`registered after ${this.requests.length}`);
    super.recordRegisteredNewNode();
  }
  override recordNodeReady(): void {
    this.calls.push(`ready after ${this.requests.length}`);
    super.recordNodeReady();
  }
}

Deno.test("NodeStatusManager tells the start-up tracker of the first attempt, the Node it created and the first Ready posted", async () => {
  const s = nodeServer();
  const clock = new FakeClock(Date.UTC(2026, 11, 2, 12, 0, 0));
  const metrics = new KubeletMetrics({ process: false });
  const tracker = new CallLog(s.requests, clock, metrics);
  const notReady = ["container runtime is down"];
  const { client, m } = manager(s.url, clock, notReady, undefined, { startupTracker: tracker });
  try {
    clock.step(1_500);
    await m.registerWithAPIServer(new AbortController().signal);
    assert.deepEqual(s.requests, ["POST /api/v1/nodes"]);
    assert.deepEqual(tracker.calls, ["attempt after 0", "registered after 1"]);
    assert.equal(metrics.nodeStartupPreRegistration.get(), 1.5);
    // A status that is not Ready: posted, but the node is not ready yet.
    clock.step(2_000);
    await m.updateNodeStatus();
    assert.equal(s.requests.at(-1), "PATCH /api/v1/nodes/node-a/status");
    assert.deepEqual(tracker.calls.slice(2), []);
    notReady.length = 0;
    clock.step(3_000);
    await m.updateNodeStatus();
    assert.deepEqual(tracker.calls.slice(2), [`ready after ${s.requests.length}`]);
    assert.equal(metrics.nodeStartupPostRegistration.get(), 5);
  } finally {
    client.close();
    await s.server.shutdown();
  }
});

Deno.test("NodeStatusManager does not count a Node that already existed as registered by it", async () => {
  const s = nodeServer();
  const clock = new FakeClock(0);
  const metrics = new KubeletMetrics({ process: false });
  const tracker = new CallLog(s.requests, clock, metrics);
  const { client, m } = manager(s.url, clock, [], undefined, { startupTracker: tracker });
  try {
    s.nodes.set("node-a", { metadata: { name: "node-a", uid: "uid-0" } });
    await m.registerWithAPIServer(new AbortController().signal);
    assert.equal(m.registered, true);
    assert.equal(s.requests[0], "POST /api/v1/nodes", "the create was answered 409");
    assert.deepEqual(tracker.calls, ["attempt after 0"]);
    clock.step(1_000);
    await m.updateNodeStatus();
    // Ready is reported as upstream's patchNodeStatus does; the tracker ignores it unregistered.
    assert.deepEqual(tracker.calls.slice(1), [`ready after ${s.requests.length}`]);
    assert.equal(metrics.nodeStartupRegistration.get(), 0);
    assert.equal(metrics.nodeStartupPostRegistration.get(), 0);
  } finally {
    client.close();
    await s.server.shutdown();
  }
});

Deno.test("NodeStatusManager registers the Node with its status as readiness stood when registration began, recording the setters' events", async () => {
  const s = nodeServer();
  const clock = new FakeClock(Date.UTC(2026, 11, 2, 12, 0, 0));
  const recorded: string[] = [];
  const recorder: EventRecorder = { event: (_ref, _type, reason) => recorded.push(reason) };
  const notReady = ["container runtime status check may not have completed yet"];
  const { client, m } = manager(s.url, clock, notReady, undefined, {
    recorder,
    // The runtime's first check completes while the registration gathers the machine's facts.
    machineInfo: () => {
      notReady.length = 0;
      return Promise.resolve({
        numCores: 2,
        memoryCapacity: 2 ** 33,
        hugePages: new Map(),
        machineID: "m",
        systemUUID: "s",
        bootID: "b",
        kernelVersion: "k",
        osImage: "o",
      });
    },
  });
  try {
    await m.tryRegister();
    const created = s.nodes.get("node-a")!;
    const ready = created.status?.conditions?.find((c) => c.type === "Ready");
    assert.equal(ready?.status, "False", "registered NotReady: the runtime was not yet checked");
    assert.equal(ready?.reason, "KubeletNotReady");
    assert.equal(created.status?.conditions?.length, 4);
    assert.deepEqual(recorded.splice(0), [
      "NodeHasSufficientMemory",
      "NodeHasNoDiskPressure",
      "NodeHasSufficientPID",
    ]);
    await m.updateNodeStatus();
    assert.deepEqual(recorded, ["NodeReady"]);
  } finally {
    client.close();
    await s.server.shutdown();
  }
});
