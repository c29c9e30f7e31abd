/**
 * The CPU manager's static policy end to end: our agent on real containerd with the real
 * apiserver, `cpuManagerPolicy: static` and `reservedSystemCPUs: "0"` on this 2-CPU machine.
 *
 * - Node allocatable cpu is capacity less the reserved CPUs (upstream's --reserved-cpus
 *   override of systemReserved).
 * - A Guaranteed pod with an integer CPU request gets an exclusive CPU (its container's cgroup
 *   `cpuset.cpus` and what the process may run on), a Burstable pod the shared pool; it started
 *   before on all CPUs and the reconcile loop moves it off the exclusive one.
 * - A second Guaranteed pod finds no CPU left: UnexpectedAdmissionError with upstream's message.
 * - A kubelet restart keeps both placements (the `cpu_manager_state` checkpoint).
 * - Once the Guaranteed pod goes, its CPU returns to the shared pool.
 */

import assert from "node:assert/strict";
import { basename, join } from "node:path";
import type { V1Node, V1Pod } from "@kubernetes/client-node";
import type { KubeClient } from "../src/client/kube_client.ts";
import { detectCgroupLayout } from "../src/cm/cgroup_layout.ts";
import { CPUSet } from "../src/cpumanager/cpuset.ts";
import type { RunningAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import { BUSYBOX, BUSYBOX_IMAGE, importImages, PAUSE } from "./images.ts";
import {
  createObject,
  deletePodAndWait,
  e2eSuite,
  ensureDefaultServiceAccount,
  ensureRootCAConfigMap,
  getPod,
  poll,
  restartAgent,
  startNodeAgent,
  TEST_CGROUP_PARENT,
  waitPod,
} from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("CPU manager e2e tests", ["containerd", "runc"]);
const NODE = "kts-cpu-manager";
const NS = "default";
/** The machine's CPUs: the shared pool before any is taken. */
const ALL = CPUSet.parse((await Deno.readTextFile("/sys/devices/system/cpu/online")).trim());
const CPUS = ALL.toString();

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly containerd: ContainerdHandle;
  agent: RunningAgent;
  readonly args: string[];
  readonly rootDir: string;
}

const suite = e2eSuite<World>({
  name: "cpu manager",
  gate,
  userAgent: "cpu-manager-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "cpu-manager-e2e-" });
    const stack = new AsyncDisposableStack();
    try {
      const cp = stack.use(await startControlPlane({ dir: join(dir, "cp"), nodeNames: [NODE] }));
      const socket = join(dir, "containerd", "containerd.sock");
      const containerd = stack.use(await startContainerd({ dir: join(dir, "containerd"), socket }));
      await importImages({ containerdSocket: socket, images: [BUSYBOX, PAUSE] });
      for (const ns of [NS]) {
        await ensureDefaultServiceAccount(cp, ns);
        await ensureRootCAConfigMap(cp, ns);
      }
      const { agent, args } = await startNodeAgent({
        cp,
        dir,
        nodeName: NODE,
        endpoint: containerd.endpoint,
        configLines: [
          "nodeStatusUpdateFrequency: 2s",
          "cpuManagerPolicy: static",
          'reservedSystemCPUs: "0"',
          "cpuManagerReconcilePeriod: 1s",
        ],
        // For the CPU manager's "restored state from checkpoint" line (V(2)).
        extraArgs: ["-v=2"],
      });
      stack.move();
      return { dir, cp, containerd, agent, args, rootDir: join(dir, "root") };
    } catch (e) {
      await stack.disposeAsync();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw e;
    }
  },
});
const e2e = suite.test;

async function podWith(w: World, name: string, resources: Record<string, unknown>): Promise<void> {
  await createObject(w.cp, {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS },
    spec: {
      nodeName: NODE,
      terminationGracePeriodSeconds: 1,
      containers: [{
        name: "main",
        image: BUSYBOX_IMAGE,
        command: ["sleep", "3600"],
        resources,
      }],
    },
  });
}

const GUARANTEED = { requests: { cpu: "1", memory: "32Mi" }, limits: { cpu: "1", memory: "32Mi" } };
/**
 * Burstable by its memory request; no cpu request, so allocatable cpu (one CPU here) is left
 * whole for the Guaranteed pod.
 */
const BURSTABLE = { requests: { memory: "16Mi" } };

function deletePod(w: World, api: KubeClient, name: string): Promise<void> {
  return deletePodAndWait(w.cp, api, NS, name);
}

async function running(api: KubeClient, name: string): Promise<V1Pod> {
  return await waitPod(api, NS, name, "Running", (p) => p.status?.phase === "Running", 90_000);
}

/** The CPUs a new process of the pod's container may run on (the kernel's view). */
async function allowedCpus(w: World, name: string): Promise<string> {
  const r = await w.cp.kubectl([
    "exec",
    name,
    "-n",
    NS,
    "--",
    "sh",
    "-c",
    "grep Cpus_allowed_list /proc/self/status",
  ]);
  assert.equal(r.code, 0, r.stderr);
  return r.stdout.split(":")[1]!.trim();
}

/** The container's `cpuset.cpus` in its cgroup on the host (cgroup v1 or v2). */
async function cgroupCpus(w: World, pod: V1Pod, qos: "" | "burstable"): Promise<string> {
  const layout = await detectCgroupLayout();
  const id = pod.status?.containerStatuses?.[0]?.containerID?.replace(/^\w+:\/\//, "") ?? "";
  const path = join(
    `/${TEST_CGROUP_PARENT}/${basename(w.dir).replace(/[^A-Za-z0-9_.-]/g, "_")}/kubepods`,
    qos,
    `pod${pod.metadata?.uid}`,
    id,
  );
  const dir = layout.v1.get("cpuset") ?? layout.unified!;
  const file = layout.v1.has("cpuset") ? "cpuset.cpus" : "cpuset.cpus.effective";
  return (await Deno.readTextFile(join(dir, path, file))).trim();
}

e2e("allocatable cpu leaves out the reserved CPUs", async (_w, api) => {
  const n = await poll(
    "the Node's cpu",
    async () => {
      const node = await api.get<V1Node>(`/api/v1/nodes/${NODE}`);
      return node.status?.allocatable?.cpu !== undefined ? node : undefined;
    },
    60_000,
    500,
  );
  const capacity = Number(n.status?.capacity?.cpu);
  assert.equal(n.status?.allocatable?.cpu, String(capacity - 1));
});

e2e(
  "a Guaranteed pod gets an exclusive CPU, and the shared pool shrinks for the others",
  async (w, api) => {
    // Started first, on every CPU.
    await podWith(w, "shared", BURSTABLE);
    await running(api, "shared");
    assert.equal(await allowedCpus(w, "shared"), CPUS);
    await podWith(w, "pinned", GUARANTEED);
    const pinned = await running(api, "pinned");
    const own = CPUSet.parse(await allowedCpus(w, "pinned"));
    // One CPU, never a reserved one.
    assert.equal(own.size, 1);
    assert.equal(own.has(0), false);
    assert.equal(await cgroupCpus(w, pinned, ""), own.toString());
    // The reconcile loop moves the Burstable container off it.
    const rest = ALL.difference(own).toString();
    await poll(
      "the shared pool without the exclusive CPU",
      async () => {
        return (await allowedCpus(w, "shared")) === rest ? true : undefined;
      },
      30_000,
      500,
    );
    assert.equal(await cgroupCpus(w, await getPod(api, NS, "shared"), "burstable"), rest);
    const state = JSON.parse(await Deno.readTextFile(join(w.rootDir, "cpu_manager_state")));
    assert.equal(state.policyName, "static");
    assert.equal(state.defaultCpuSet, rest);
    assert.deepEqual(state.entries[pinned.metadata!.uid!], { main: own.toString() });
  },
);

e2e(
  "a Guaranteed pod finding no free CPU is rejected with UnexpectedAdmissionError",
  async (w, api) => {
    // Every CPU but the reserved one and the one taken is free: ask for one more.
    const want = String(ALL.size - 1);
    await podWith(w, "no-room", {
      requests: { cpu: want, memory: "32Mi" },
      limits: { cpu: want, memory: "32Mi" },
    });
    const p = await waitPod(
      api,
      NS,
      "no-room",
      "Failed",
      (p) => p.status?.phase === "Failed",
      60_000,
    );
    assert.equal(p.status?.reason, "UnexpectedAdmissionError");
    assert.equal(
      p.status?.message,
      "Pod was rejected: Allocate failed due to not enough cpus available to satisfy request: " +
        `requested=${want}, available=${ALL.size - 2}, which is unexpected`,
    );
    await deletePod(w, api, "no-room");
  },
);

e2e("a kubelet restart keeps both placements", async (w, api) => {
  const before = await getPod(api, NS, "pinned");
  await restartAgent(w);
  await new Promise((r) => setTimeout(r, 3_000));
  const after = await getPod(api, NS, "pinned");
  assert.equal(after.status?.phase, "Running");
  assert.equal(
    after.status?.containerStatuses?.[0]?.restartCount,
    before.status?.containerStatuses?.[0]?.restartCount,
  );
  const own = CPUSet.parse(await allowedCpus(w, "pinned"));
  assert.equal(own.size, 1);
  assert.equal(await allowedCpus(w, "shared"), ALL.difference(own).toString());
  // The new kubelet took the assignments from cpu_manager_state, not afresh.
  assert.match(w.agent.stderr(), /"restored state from checkpoint"/);
  const state = JSON.parse(await Deno.readTextFile(join(w.rootDir, "cpu_manager_state")));
  assert.deepEqual(state.entries[after.metadata!.uid!], { main: own.toString() });
});

e2e("once the Guaranteed pod is gone its CPU is shared again", async (w, api) => {
  await deletePod(w, api, "pinned");
  await poll(
    "the shared pool back to every CPU",
    async () => {
      return (await allowedCpus(w, "shared")) === CPUS ? true : undefined;
    },
    30_000,
    500,
  );
  await deletePod(w, api, "shared");
});

suite.teardown("teardown", async (w) => {
  await w.containerd.stop();
});
