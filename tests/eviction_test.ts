/**
 * Eviction end to end, on real containerd through the real apiserver: a pod writing past its
 * emptyDir sizeLimit is evicted with upstream's message (local storage eviction), a container
 * over its memory limit is reported OOMKilled with exit code 137, pods of each QoS class get
 * upstream's cgroups and values under kubepods, a BestEffort memory hog is evicted first when
 * the pods' allocatable memory runs short and MemoryPressure clears after the transition
 * period, and a node
 * under memory pressure (here made so by a hard threshold no node can meet) reports
 * MemoryPressure and refuses new BestEffort pods while it admits others. Upstream's
 * counterparts are `test/e2e_node/eviction_test.go` (LocalStorageCapacityIsolationEviction,
 * MemoryAllocatableEviction) and the admission part of `pkg/kubelet/eviction`.
 */

import assert from "node:assert/strict";
import { basename, join } from "node:path";
import { detectCgroupLayout } from "../src/cm/cgroup_layout.ts";
import type { CoreV1EventList, V1Node, V1Pod } from "@kubernetes/client-node";
import type { KubeClient } from "../src/client/kube_client.ts";
import type { RunningAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import { BUSYBOX, BUSYBOX_IMAGE, importImages, PAUSE } from "./images.ts";
import { e2eSuite, poll, startNodeAgent, waitPod } from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("eviction e2e tests", [
  "containerd",
  "ctr",
  "runc",
  "openssl",
  "go",
]);
const NS = "default";

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly containerd: ContainerdHandle;
  readonly agent: RunningAgent;
  readonly node: string;
}

/** A world whose agent runs with `configLines`. */
function suiteFor(name: string, node: string, configLines: string[]) {
  return e2eSuite<World>({
    name,
    gate,
    userAgent: `${name}-e2e-test`,
    async start() {
      const dir = await Deno.makeTempDir({ prefix: `${name}-e2e-` });
      const stack = new AsyncDisposableStack();
      try {
        const cp = stack.use(await startControlPlane({ dir: join(dir, "cp"), nodeNames: [node] }));
        const socket = join(dir, "containerd", "containerd.sock");
        const containerd = stack.use(
          await startContainerd({ dir: join(dir, "containerd"), socket }),
        );
        await importImages({ containerdSocket: socket, images: [BUSYBOX, PAUSE] });
        const { agent } = await startNodeAgent({
          cp,
          dir,
          nodeName: node,
          endpoint: containerd.endpoint,
          configLines,
        });
        stack.move();
        return { dir, cp, containerd, agent, node };
      } catch (e) {
        await stack.disposeAsync();
        await Deno.remove(dir, { recursive: true }).catch(() => {});
        throw e;
      }
    },
  });
}

function pod(w: World, name: string, script: string, spec: Record<string, unknown> = {}) {
  const { resources, volumeMounts, ...rest } = spec;
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS },
    spec: {
      nodeName: w.node,
      automountServiceAccountToken: false,
      terminationGracePeriodSeconds: 1,
      restartPolicy: "Never",
      containers: [{
        name: "main",
        image: BUSYBOX_IMAGE,
        imagePullPolicy: "Never",
        command: ["sh", "-c", script],
        resources,
        volumeMounts,
      }],
      ...rest,
    },
  });
}

async function create(w: World, manifest: string): Promise<void> {
  const r = await w.cp.kubectl(["create", "-f", "-"], { stdin: manifest });
  assert.equal(r.code, 0, r.stderr);
}

async function events(api: KubeClient, name: string) {
  return (await api.get<CoreV1EventList>(
    `/api/v1/namespaces/${NS}/events?fieldSelector=involvedObject.name%3D${name}`,
  )).items;
}

// ---- Local storage: emptyDir sizeLimit ----------------------------------------------------------

const storage = suiteFor("eviction storage", "kts-evict-storage", [
  // Volume usage is measured this often (upstream default 1m) so the test is quick.
  "volumeStatsAggPeriod: 2s",
]);

storage.test("a pod writing past its emptyDir sizeLimit is evicted", async (w, api) => {
  await create(
    w,
    pod(w, "filler", "dd if=/dev/zero of=/scratch/fill bs=1M count=16; sleep 3600", {
      volumes: [{ name: "scratch", emptyDir: { sizeLimit: "8Mi" } }],
      volumeMounts: [{ name: "scratch", mountPath: "/scratch" }],
    }),
  );
  const message = 'Usage of EmptyDir volume "scratch" exceeds the limit "8Mi". ';
  const evicted = await waitPod(
    api,
    NS,
    "filler",
    "Failed with reason Evicted",
    (p) => p.status?.phase === "Failed" && p.status.reason === "Evicted",
    90_000,
  );
  assert.equal(evicted.status?.message, message);
  const ev = await poll("the Evicted event", async () => {
    return (await events(api, "filler")).find((e) => e.reason === "Evicted");
  }, 30_000);
  assert.equal(ev.type, "Warning");
  assert.equal(ev.message, message);
});

storage.test(
  "a container over its memory limit is OOMKilled with exit code 137",
  async (w, api) => {
    // busybox tail keeps a line without end in memory: /dev/zero never ends one.
    await create(
      w,
      pod(w, "oom", "tail /dev/zero", { resources: { limits: { memory: "32Mi" } } }),
    );
    const p = await waitPod(
      api,
      NS,
      "oom",
      "Failed, its container terminated",
      // The phase turns terminal once the pod worker has finished, a sync after the exit.
      (p) =>
        p.status?.phase === "Failed" &&
        p.status.containerStatuses?.[0]?.state?.terminated !== undefined,
      60_000,
    );
    const terminated = p.status?.containerStatuses?.[0]?.state?.terminated;
    assert.equal(terminated?.reason, "OOMKilled");
    assert.equal(terminated?.exitCode, 137);
    assert.equal(p.status?.phase, "Failed");
  },
);

storage.test(
  "pods of each QoS class get upstream's cgroups and values under kubepods",
  async (w, api) => {
    const layout = await detectCgroupLayout();
    const cpuDir = layout.v1.get("cpu") ?? layout.unified!;
    const memDir = layout.v1.get("memory") ?? layout.unified!;
    const v2 = layout.v1.get("cpu") === undefined;
    // The harness gives each agent its own cgroup root (tests/node_harness.ts).
    const root = `/kubelet-ts-e2e/${basename(w.dir).replace(/[^A-Za-z0-9_.-]/g, "_")}/kubepods`;
    const limits = { cpu: "250m", memory: "64Mi" };
    await create(w, pod(w, "qos-g", "sleep 3600", { resources: { requests: limits, limits } }));
    await create(w, pod(w, "qos-b", "sleep 3600", { resources: { requests: { cpu: "100m" } } }));
    await create(w, pod(w, "qos-be", "sleep 3600"));
    const uid = async (name: string) =>
      (await waitPod(api, NS, name, "Running", (p) => p.status?.phase === "Running")).metadata!
        .uid!;
    const [g, b, be] = [await uid("qos-g"), await uid("qos-b"), await uid("qos-be")];
    const read = async (dir: string, path: string, file: string) =>
      (await Deno.readTextFile(join(dir, path, file))).trim();
    if (v2) {
      assert.equal(await read(cpuDir, `${root}/pod${g}`, "cpu.max"), "25000 100000");
      assert.equal(await read(memDir, `${root}/pod${g}`, "memory.max"), String(64 * 2 ** 20));
    } else {
      // Guaranteed: directly under kubepods, shares from the request, quota and memory limit.
      assert.equal(await read(cpuDir, `${root}/pod${g}`, "cpu.shares"), "256");
      assert.equal(await read(cpuDir, `${root}/pod${g}`, "cpu.cfs_quota_us"), "25000");
      assert.equal(
        await read(memDir, `${root}/pod${g}`, "memory.limit_in_bytes"),
        String(64 * 2 ** 20),
      );
      // Burstable and BestEffort under their class cgroups.
      assert.equal(await read(cpuDir, `${root}/burstable/pod${b}`, "cpu.shares"), "102");
      assert.equal(await read(cpuDir, `${root}/besteffort/pod${be}`, "cpu.shares"), "2");
      assert.equal(await read(cpuDir, `${root}/besteffort`, "cpu.shares"), "2");
    }
    // The containers run inside their pod's cgroup.
    const children: string[] = [];
    for await (const e of Deno.readDir(join(memDir, `${root}/pod${g}`))) {
      if (e.isDirectory) children.push(e.name);
    }
    assert.ok(children.length >= 2, `sandbox and container cgroups: ${children}`);
    for (const name of ["qos-g", "qos-b", "qos-be"]) {
      await w.cp.kubectl(["delete", "pod", name, "-n", NS, "--wait=false"]);
    }
    // Pod cgroups go once the pods are gone (housekeeping).
    await poll(
      "the Guaranteed pod's cgroup removed",
      async () => {
        try {
          await Deno.stat(join(cpuDir, `${root}/pod${g}`));
          return undefined;
        } catch {
          return true;
        }
      },
      60_000,
      1_000,
    );
  },
);

storage.teardown("teardown", async (w) => {
  await w.containerd.stop();
});

// ---- Memory pressure: eviction of a memory hog -------------------------------------------------

// Pods get 400Mi (kubepods is sized to capacity minus kubeReserved), and the allocatable memory
// threshold, derived from memory.available, is 100Mi: a pod filling 320Mi starves them.
const meminfo = await Deno.readTextFile("/proc/meminfo").catch(() => "MemTotal: 0 kB");
const memTotalKi = Number(/^MemTotal:\s+(\d+) kB$/m.exec(meminfo)?.[1] ?? 0);
const hogs = suiteFor("eviction hog", "kts-evict-hog", [
  "kubeReserved:",
  `  memory: ${Math.max(0, memTotalKi - 400 * 1024)}Ki`,
  "evictionHard:",
  "  memory.available: 100Mi",
  "evictionPressureTransitionPeriod: 10s",
]);

hogs.test(
  "a BestEffort memory hog is evicted first, and MemoryPressure clears after the transition",
  async (w, api) => {
    await create(
      w,
      pod(w, "keeper", "sleep 3600", { resources: { requests: { memory: "32Mi" } } }),
    );
    await waitPod(api, NS, "keeper", "Running", (p) => p.status?.phase === "Running");
    await create(
      w,
      pod(w, "hog", "sleep 2; dd if=/dev/zero of=/fill/x bs=1M count=320; sleep 3600", {
        volumes: [{ name: "fill", emptyDir: { medium: "Memory" } }],
        volumeMounts: [{ name: "fill", mountPath: "/fill" }],
      }),
    );
    const pressure = (n: V1Node) =>
      n.status?.conditions?.find((c) => c.type === "MemoryPressure")?.status;
    const evicted = await waitPod(
      api,
      NS,
      "hog",
      "evicted",
      (p) => p.status?.phase === "Failed" && p.status.reason === "Evicted",
      90_000,
    );
    assert.match(evicted.status?.message ?? "", /^The node was low on resource: memory\. /);
    // The pod within its request stays.
    const keeper = await waitPod(api, NS, "keeper", "still Running", () => true);
    assert.equal(keeper.status?.phase, "Running");
    await poll(
      "MemoryPressure reported",
      async () => {
        const n = await api.get<V1Node>(`/api/v1/nodes/${w.node}`);
        return pressure(n) === "True" ? n : undefined;
      },
      30_000,
      500,
    );
    // With the hog gone, the pressure clears once the transition period has passed.
    await poll(
      "MemoryPressure cleared",
      async () => {
        const n = await api.get<V1Node>(`/api/v1/nodes/${w.node}`);
        return pressure(n) === "False" ? n : undefined;
      },
      90_000,
      1_000,
    );
    assert.equal(
      (await waitPod(api, NS, "keeper", "still Running", () => true)).status?.phase,
      "Running",
    );
  },
);

hogs.teardown("teardown", async (w) => {
  await w.containerd.stop();
});

// ---- Memory pressure: admission -----------------------------------------------------------------

const memory = suiteFor("eviction memory", "kts-evict-memory", [
  // No node has this much memory available: the node is under memory pressure at once.
  "evictionHard:",
  "  memory.available: 1000Ti",
  "evictionPressureTransitionPeriod: 10s",
]);

memory.test(
  "under MemoryPressure a new BestEffort pod is refused and others are admitted",
  async (w, api) => {
    const node = await poll(
      "MemoryPressure on the node",
      async () => {
        const n = await api.get<V1Node>(`/api/v1/nodes/${w.node}`);
        const c = n.status?.conditions?.find((c) => c.type === "MemoryPressure");
        return c?.status === "True" ? n : undefined;
      },
      60_000,
      1_000,
    );
    const cond = node.status?.conditions?.find((c) => c.type === "MemoryPressure");
    assert.equal(cond?.reason, "KubeletHasInsufficientMemory");
    assert.equal(cond?.message, "kubelet has insufficient memory available");

    await create(w, pod(w, "besteffort", "sleep 3600"));
    const refused = await waitPod(
      api,
      NS,
      "besteffort",
      "rejected",
      (p) => p.status?.phase === "Failed",
      60_000,
    );
    assert.equal(refused.status?.reason, "Evicted");
    assert.equal(
      refused.status?.message,
      "Pod was rejected: The node had condition: [MemoryPressure]. ",
    );

    // A Burstable pod is admitted (and, the node being starved, evicted later). It asks for CPU
    // only: the threshold leaves no allocatable memory, so a memory request would not fit.
    await create(
      w,
      pod(w, "burstable", "sleep 3600", {
        resources: { requests: { cpu: "10m" } },
      }),
    );
    const admitted = await waitPod(
      api,
      NS,
      "burstable",
      "admitted",
      (p: V1Pod) =>
        p.status?.phase === "Running" ||
        (p.status?.phase === "Failed" && p.status.message !== undefined &&
          !p.status.message.startsWith("Pod was rejected")),
      60_000,
    );
    assert.notEqual(admitted.status?.message?.startsWith("Pod was rejected"), true);
  },
);

memory.teardown("teardown", async (w) => {
  await w.containerd.stop();
});
