/**
 * Node lifecycle end to end: the agent, with a node's own credentials against a real
 * kube-apiserver (Node,RBAC authorization and NodeRestriction) and real containerd, registers
 * its Node, turns it Ready with truthful nodeInfo, keeps its lease fresh, reports the runtime
 * going away and coming back, survives an apiserver outage and re-registers a deleted Node.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Lease, V1Node } from "@kubernetes/client-node";
import { KUBELET_VERSION } from "../src/util/version.ts";
import type { RunningAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import { e2eSuite, kubeClient, poll, startNodeAgent } from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("node lifecycle e2e tests", [
  "containerd",
  "ctr",
  "runc",
  "openssl",
  "go",
]);
const NODE = "kts-node-e2e";

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  containerd: ContainerdHandle;
  readonly socket: string;
  readonly agent: RunningAgent;
  /** The agent's kubelet API port (a free one, not 10250). */
  readonly port: number;
}

const suite = e2eSuite<World>({
  name: "node lifecycle",
  gate,
  userAgent: "node-e2e-test",
  stderrLines: 40,
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "node-e2e-" });
    const cp = await startControlPlane({ dir: join(dir, "cp"), nodeNames: [NODE] });
    const socket = join(dir, "containerd", "containerd.sock");
    const containerd = await startContainerd({ dir: join(dir, "containerd"), socket });
    // Not waiting for the sync loop: the first test times Ready from the runtime's readiness.
    const { agent, port } = await startNodeAgent({
      cp,
      dir,
      nodeName: NODE,
      endpoint: containerd.endpoint,
      configLines: [
        `podLogsDir: ${dir}/pod-logs`,
        "registerWithTaints:",
        "  - {key: e2e.kubelet-ts/dedicated, value: tests, effect: NoSchedule}",
      ],
      hostnameOverride: NODE.toUpperCase(),
      extraArgs: ["--node-labels", "e2e.kubelet-ts/role=worker"],
      waitFor: null,
    });
    return { dir, cp, containerd, socket, agent, port };
  },
});
const e2e = suite.test;

function ready(node: V1Node): string | undefined {
  return node.status?.conditions?.find((c) => c.type === "Ready")?.status;
}

e2e(
  "the node registers and turns Ready by the fast status update after the runtime, with truthful fields",
  async (w, api) => {
    await w.agent.waitFor("Container runtime initialized", 60_000);
    const runtimeReadyAt = Date.now();
    await poll("Ready=True", async () => {
      const n = await api.get<V1Node>(`/api/v1/nodes/${NODE}`);
      return ready(n) === "True" ? n : undefined;
    }, 10_000);
    // Not a speed bound: without the fast status update at start (100 ms polls until Ready),
    // Ready waits for the next periodic update, nodeStatusUpdateFrequency (10 s) away; half of
    // that tells the two apart on a loaded machine too.
    const readyAfter = Date.now() - runtimeReadyAt;
    assert.ok(readyAfter < 5_000, `Ready ${readyAfter} ms after the runtime was ready`);
    // What an operator sees: kubectl get node.
    const got = await w.cp.kubectl(["get", "node", NODE, "-o", "json"]);
    assert.equal(got.code, 0, got.stderr);
    const node = JSON.parse(got.stdout) as V1Node;
    assert.equal(ready(node), "True");

    const labels = node.metadata?.labels ?? {};
    assert.equal(labels["kubernetes.io/hostname"], NODE, "the name is lower-cased");
    assert.equal(labels["kubernetes.io/os"], "linux");
    assert.equal(labels["kubernetes.io/arch"], "amd64");
    assert.equal(labels["beta.kubernetes.io/arch"], "amd64");
    assert.equal(labels["e2e.kubelet-ts/role"], "worker");
    // The apiserver's TaintNodesByCondition admission adds node.kubernetes.io/not-ready to a new
    // Node; the node lifecycle controller (not run here) would lift it.
    assert.deepEqual(node.spec?.taints?.filter((t) => t.key !== "node.kubernetes.io/not-ready"), [
      { key: "e2e.kubelet-ts/dedicated", value: "tests", effect: "NoSchedule" },
    ]);

    const info = node.status?.nodeInfo;
    const readText = async (p: string) => (await Deno.readTextFile(p)).trim();
    assert.equal(info?.machineID, await readText("/etc/machine-id"));
    assert.equal(info?.bootID, await readText("/proc/sys/kernel/random/boot_id"));
    // cAdvisor's GetSystemUUID: product_uuid as read, else the device tree's, else machine-id.
    let uuid = "";
    for (
      const p of [
        "/sys/class/dmi/id/product_uuid",
        "/proc/device-tree/system-id",
        "/proc/device-tree/vm,uuid",
        "/etc/machine-id",
      ]
    ) {
      uuid = (await readText(p).catch(() => "")).replace(/\0+$/, "").trim();
      if (uuid !== "") break;
    }
    assert.equal(info?.systemUUID, uuid);
    assert.equal(info?.kernelVersion, Deno.osRelease());
    const pretty = /^PRETTY_NAME="?([^"\n]*)"?$/m.exec(await Deno.readTextFile("/etc/os-release"))
      ?.[1];
    assert.equal(info?.osImage, pretty);
    assert.match(
      info?.containerRuntimeVersion ?? "",
      /^containerd:\/\/\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/,
    );
    assert.equal(info?.kubeletVersion, KUBELET_VERSION);
    assert.equal(info?.operatingSystem, "linux");
    assert.equal(info?.architecture, "amd64");
    assert.equal(node.status?.capacity?.cpu, String(navigator.hardwareConcurrency));
    assert.equal(node.status?.capacity?.pods, "110");
    assert.ok(node.status?.allocatable?.memory, "allocatable memory is reported");
    assert.deepEqual(
      (node.status?.daemonEndpoints?.kubeletEndpoint as unknown as { Port: number }).Port,
      w.port,
      "the configured kubelet API port",
    );
    assert.ok(node.status?.addresses?.some((a) => a.type === "InternalIP"));
    assert.ok(node.status?.addresses?.some((a) => a.type === "Hostname" && a.address === NODE));
  },
);

e2e("the lease is owned by the Node and its renewTime advances every ~10 s", async (_w, api) => {
  const path = `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${NODE}`;
  const first = await poll("the lease", () => api.get<V1Lease>(path), 30_000);
  assert.equal(first.spec?.holderIdentity, NODE);
  assert.equal(first.spec?.leaseDurationSeconds, 40);
  const node = await api.get<V1Node>(`/api/v1/nodes/${NODE}`);
  const owner = await poll("the owner reference", async () => {
    const l = await api.get<V1Lease>(path);
    return l.metadata?.ownerReferences?.[0];
  }, 30_000);
  assert.deepEqual({ kind: owner.kind, name: owner.name, uid: owner.uid }, {
    kind: "Node",
    name: NODE,
    uid: node.metadata?.uid,
  });
  const t0 = Date.parse(String(first.spec?.renewTime));
  const next = await poll("a renewal", async () => {
    const l = await api.get<V1Lease>(path);
    return Date.parse(String(l.spec?.renewTime)) > t0 ? l : undefined;
  }, 15_000);
  const gap = Date.parse(String(next.spec?.renewTime)) - t0;
  assert.ok(gap >= 8_000 && gap <= 12_500, `renewed ${gap} ms later, expected about 10 s`);
});

e2e("the node's credentials cannot modify another Node", async (w) => {
  const nodeClient = await kubeClient(w.cp.nodeKubeconfig(NODE), "node-e2e-test");
  try {
    await assert.rejects(
      nodeClient.create("/api/v1/nodes", {
        apiVersion: "v1",
        kind: "Node",
        metadata: { name: "someone-else" },
      }),
      (e: unknown) => (e as { code?: number }).code === 403,
    );
    await assert.rejects(
      nodeClient.patch(`/api/v1/nodes/someone-else/status`, { status: {} }, "strategic"),
      (e: unknown) =>
        (e as { code?: number }).code === 403 || (e as { code?: number }).code === 404,
    );
  } finally {
    nodeClient.close();
  }
});

e2e(
  "containerd stopped turns the node NotReady with the runtime's reason; started again, Ready",
  async (w, api) => {
    await w.containerd.stop();
    const notReady = await poll("Ready=False", async () => {
      const n = await api.get<V1Node>(`/api/v1/nodes/${NODE}`);
      return ready(n) === "False" ? n : undefined;
    }, 15_000);
    const cond = notReady.status?.conditions?.find((c) => c.type === "Ready");
    assert.equal(cond?.reason, "KubeletNotReady");
    assert.match(cond?.message ?? "", /container runtime/);
    w.containerd = await startContainerd({ dir: join(w.dir, "containerd"), socket: w.socket });
    await poll("Ready=True again", async () => {
      const n = await api.get<V1Node>(`/api/v1/nodes/${NODE}`);
      return ready(n) === "True" ? n : undefined;
    }, 20_000);
  },
);

e2e(
  "an apiserver outage of 60 s: the agent keeps running, logs once, and catches up",
  async (w, api) => {
    const path = `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${NODE}`;
    // Counted from before the stop: the agent's watches break, and it says so, while the
    // apiserver is still exiting.
    const before = w.agent.stderr().length;
    await w.cp.stopApiserver();
    await new Promise((r) => setTimeout(r, 60_000));
    const during = w.agent.stderr().slice(before).split("\n").filter((l) => l.startsWith("E"));
    // Each failing loop (lease, node status, each watch) says so once, not on every retry.
    const loops = during.map((l) =>
      l.replace(/^E\S+ \S+ +\d+ /, "").replace(/ err=.*?(?= what=|$)/, "")
    );
    assert.ok(during.length >= 1, "the outage is logged");
    assert.equal(
      new Set(loops).size,
      loops.length,
      `one line per failing loop, not per retry:\n${during.join("\n")}`,
    );
    await w.cp.startApiserver();
    const restartedAt = Date.now();
    await poll("a lease renewed after the outage", async () => {
      const l = await api.get<V1Lease>(path);
      return Date.parse(String(l.spec?.renewTime)) >= restartedAt - 1_000 ? l : undefined;
    }, 30_000);
    // Status is patched only when it changes or nodeStatusReportFrequency (5 m) passes, and
    // each update reads the node informer's copy first (upstream's tryUpdateNodeStatus), so
    // an unchanged status needs no apiserver: the lease is the heartbeat that failed and
    // recovers, and says so.
    await w.agent.waitFor("Node lease renewed again", 30_000);
    const node = await api.get<V1Node>(`/api/v1/nodes/${NODE}`);
    assert.equal(ready(node), "True");
    const status = await Promise.race([
      w.agent.process.status,
      new Promise((r) => setTimeout(() => r("running"), 100)),
    ]);
    assert.equal(status, "running", "the agent did not exit");
  },
);

e2e("a Node deleted while the agent runs is registered again", async (_w, api) => {
  const old = await api.get<V1Node>(`/api/v1/nodes/${NODE}`);
  await api.delete(`/api/v1/nodes/${NODE}`);
  const again = await poll("the Node back", async () => {
    const n = await api.get<V1Node>(`/api/v1/nodes/${NODE}`);
    return n.metadata?.uid !== old.metadata?.uid ? n : undefined;
  }, 30_000);
  assert.equal(again.metadata?.labels?.["e2e.kubelet-ts/role"], "worker");
});

suite.teardown("(teardown)", async (w) => {
  await w.containerd.stop();
});
