import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Container, V1Pod, V1PodStatus } from "@kubernetes/client-node";
import { createLogger } from "../klog/klog.ts";
import { FakeClock } from "../util/clock.ts";
import { applyDefaults } from "../apis/config_schema.ts";
import {
  applyDependentDefaults,
  type KubeletConfiguration,
  kubeletConfigurationFields,
} from "../apis/config_types.ts";
import { MACHINE_DUAL_SOCKET_HT, writeNumaMachine } from "../testing/numa_fixtures.ts";
import { discoverCPUTopology } from "../cpumanager/topology.ts";
import { readMachineTopology } from "../cpumanager/machine_topology.ts";
import { DeviceManager } from "../devicemanager/manager.ts";
import type { InternalContainerLifecycle } from "./internal_container_lifecycle.ts";
import {
  applyReservedSystemCPUs,
  ResourceManagerConfigError,
  ResourceManagers,
  runtimeContainers,
} from "./resource_managers.ts";
import * as api from "../../proto/runtime/v1/api.ts";

const quiet = createLogger({ write: () => {}, pid: 1 });

function config(over: Partial<KubeletConfiguration>): KubeletConfiguration {
  const c = applyDefaults(kubeletConfigurationFields, {}) as KubeletConfiguration;
  applyDependentDefaults(c, {});
  return Object.assign(c, over);
}

function guaranteed(uid: string, cpu: string): V1Pod {
  const resources = { requests: { cpu, memory: "64Mi" }, limits: { cpu, memory: "64Mi" } };
  return {
    metadata: { uid, name: uid, namespace: "default" },
    spec: { containers: [{ name: "main", image: "i", resources }] },
  };
}

function burstable(uid: string): V1Pod {
  return {
    metadata: { uid, name: uid, namespace: "default" },
    spec: { containers: [{ name: "main", image: "i", resources: { requests: { cpu: "100m" } } }] },
  };
}

function running(id: string): V1PodStatus {
  return {
    containerStatuses: [{
      name: "main",
      containerID: `containerd://${id}`,
      image: "i",
      imageID: "",
      ready: true,
      restartCount: 0,
      state: { running: {} },
    }],
  };
}

interface Env extends AsyncDisposable {
  readonly root: string;
  readonly active: V1Pod[];
  readonly statuses: Map<string, V1PodStatus>;
  readonly updates: [string, string][];
  readonly made: ResourceManagers[];
  make(over: Partial<KubeletConfiguration>): Promise<ResourceManagers>;
}

async function env(): Promise<Env> {
  const root = await Deno.makeTempDir({ prefix: "resource-managers-test-" });
  const sys = await writeNumaMachine(MACHINE_DUAL_SOCKET_HT, join(root, "host"));
  const machine = await readMachineTopology(sys);
  const ctl = new AbortController();
  const clock = new FakeClock();
  const e: Env = {
    root,
    active: [],
    statuses: new Map(),
    updates: [],
    made: [],
    async make(over) {
      const cfg = config(over);
      const reserved = applyReservedSystemCPUs(cfg, discoverCPUTopology(machine), quiet);
      const devices = new DeviceManager({
        rootDirectory: join(root, "kubelet"),
        clock,
        logger: quiet,
        activePods: () => e.active,
        sourcesReady: () => true,
        signal: ctl.signal,
      });
      const m = new ResourceManagers({
        config: cfg,
        machine,
        cpuTopology: discoverCPUTopology(machine),
        reservedCPUs: reserved,
        rootDirectory: join(root, "kubelet"),
        capacity: { cpu: "12", memory: String(2 * 16 * 2 ** 30) },
        devices,
        clock,
        logger: quiet,
        activePods: () => e.active,
        sourcesReady: () => true,
        podStatus: (uid) => e.statuses.get(uid),
        updateContainerResources: (id, linux) => {
          e.updates.push([id, linux.cpusetCpus]);
          return Promise.resolve();
        },
      });
      await Deno.mkdir(join(root, "kubelet"), { recursive: true });
      e.made.push(m);
      await m.start(ctl.signal, new Map());
      return m;
    },
    async [Symbol.asyncDispose]() {
      ctl.abort();
      for (const m of e.made) await m.cpu.flush();
      await Deno.remove(root, { recursive: true });
    },
  };
  return e;
}

/** The cpuset a container is created with, through the container hooks. */
function createdWith(l: InternalContainerLifecycle, pod: V1Pod, what = "cpusetCpus"): string {
  const config = api.ContainerConfig.create({
    linux: { resources: api.LinuxContainerResources.create() },
  });
  l.preCreateContainer(pod, pod.spec!.containers[0] as V1Container, config);
  return config.linux!.resources![what as "cpusetCpus"];
}

Deno.test("reservedSystemCPUs replaces the cpu reservations, and must be the machine's CPUs", async () => {
  await using e = await env();
  const machine = await readMachineTopology(join(e.root, "host"));
  const topo = discoverCPUTopology(machine);
  const c = config({
    reservedSystemCPUs: "0,6",
    kubeReserved: { cpu: "500m", memory: "1Gi" },
    systemReserved: { cpu: "3" },
  });
  assert.equal(applyReservedSystemCPUs(c, topo, quiet).toString(), "0,6");
  assert.deepEqual(c.kubeReserved, { memory: "1Gi" });
  assert.deepEqual(c.systemReserved, { cpu: "2" });
  assert.throws(
    () => applyReservedSystemCPUs(config({ reservedSystemCPUs: "0-99" }), topo, quiet),
    /reserved-cpus: 0-99 is not a subset of online-cpus: 0-11/,
  );
  // Without it, nothing changes.
  const plain = config({ kubeReserved: { cpu: "1" } });
  assert.equal(applyReservedSystemCPUs(plain, topo, quiet).size, 0);
  assert.deepEqual(plain.kubeReserved, { cpu: "1" });
});

Deno.test("the static policy needs reserved CPUs, and a bad policy is refused with upstream's message", async () => {
  await using e = await env();
  await assert.rejects(
    e.make({ cpuManagerPolicy: "static" }),
    (err: Error) =>
      err instanceof ResourceManagerConfigError &&
      err.message ===
        "[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero",
  );
  await assert.rejects(e.make({ cpuManagerPolicy: "dynamic" }), /unknown policy: "dynamic"/);
});

Deno.test("a Guaranteed pod is admitted with exclusive CPUs, others share the rest, and the reconcile loop moves running containers", async () => {
  await using e = await env();
  const m = await e.make({ cpuManagerPolicy: "static", reservedSystemCPUs: "0,6" });
  const shared = burstable("shared");
  e.active.push(shared);
  // A Burstable pod needs nothing of the managers: admitted synchronously.
  assert.equal(m.needsAllocation(shared), false);
  assert.equal(createdWith(m.internalLifecycle, shared), "0-11");
  e.statuses.set("shared", running("c-shared"));
  await m.cpu.reconcileState();
  assert.deepEqual(e.updates, [["c-shared", "0-11"]]);

  const pinned = guaranteed("pinned", "2");
  assert.equal(m.needsAllocation(pinned), true);
  assert.deepEqual(await m.admit(pinned), { admit: true });
  e.active.push(pinned);
  const own = createdWith(m.internalLifecycle, pinned);
  assert.equal(own.split(/[-,]/).length, 2, own);
  assert.deepEqual(m.cpusForPodResources.getCpus("pinned", "main").length, 2);
  // The pod resources API's allocatable CPUs leave out the reserved ones.
  assert.deepEqual(m.cpusForPodResources.getAllocatableCpus(), [1, 2, 3, 4, 5, 7, 8, 9, 10, 11]);

  // The shared container is moved off the exclusive CPUs at the next pass.
  e.updates.length = 0;
  await m.cpu.reconcileState();
  const sharedNow = createdWith(m.internalLifecycle, shared);
  assert.notEqual(sharedNow, "0-11");
  assert.deepEqual(e.updates, [["c-shared", sharedNow]]);
  // And left alone once it has them.
  e.updates.length = 0;
  await m.cpu.reconcileState();
  assert.deepEqual(e.updates, []);

  // A pod asking for more than is left is refused with upstream's reason and message.
  const r = await m.admit(guaranteed("huge", "9"));
  assert.equal(r.admit, false);
  assert.equal(r.reason, "UnexpectedAdmissionError");
  assert.equal(
    r.message,
    "Allocate failed due to not enough cpus available to satisfy request: requested=9, " +
      "available=8, which is unexpected",
  );

  // The Guaranteed pod gone, its CPUs return to the shared pool at the next pass.
  e.active.splice(e.active.indexOf(pinned), 1);
  e.updates.length = 0;
  await m.cpu.reconcileState();
  assert.deepEqual(e.updates, [["c-shared", "0-11"]]);
});

Deno.test("the CPU assignments survive a restart, and a checkpoint of another policy stops the start", async () => {
  await using e = await env();
  const m = await e.make({ cpuManagerPolicy: "static", reservedSystemCPUs: "0" });
  const pinned = guaranteed("pinned", "1");
  e.active.push(pinned);
  assert.deepEqual(await m.admit(pinned), { admit: true });
  const own = createdWith(m.internalLifecycle, pinned);
  const again = await e.make({ cpuManagerPolicy: "static", reservedSystemCPUs: "0" });
  assert.equal(createdWith(again.internalLifecycle, pinned), own);
  await assert.rejects(
    e.make({ cpuManagerPolicy: "none" }),
    /configured policy "none" differs from state checkpoint policy "static"/,
  );
});

Deno.test("the Static memory manager pins a Guaranteed pod's memory to a NUMA node, and refuses reservations that do not add up", async () => {
  await using e = await env();
  await assert.rejects(
    e.make({ memoryManagerPolicy: "Static" }),
    /the total amount "0" of type "memory" is not equal to the value "100Mi" determined by Node Allocatable feature/,
  );
  await assert.rejects(
    e.make({
      memoryManagerPolicy: "Static",
      reservedMemory: [{ numaNode: 0, limits: { memory: "1Gi" } }],
    }),
    /the total amount "1Gi" of type "memory" is not equal to the value "100Mi" determined by Node Allocatable feature/,
  );
  const m = await e.make({
    memoryManagerPolicy: "Static",
    topologyManagerPolicy: "single-numa-node",
    reservedMemory: [{ numaNode: 0, limits: { memory: "100Mi" } }],
  });
  const pod = guaranteed("mem", "1");
  assert.equal(m.needsAllocation(pod), true);
  assert.deepEqual(await m.admit(pod), { admit: true });
  e.active.push(pod);
  const mems = createdWith(m.internalLifecycle, pod, "cpusetMems");
  assert.match(mems, /^[01]$/);
  const blocks = m.memoryForPodResources.getMemory("mem", "main");
  assert.deepEqual(blocks.map((b) => [b.memoryType, b.size]), [["memory", 64n * 2n ** 20n]]);
  assert.deepEqual(blocks[0]!.topology?.nodes.map((n) => String(n.ID)), [mems]);
  await m.memory.flush();
});

Deno.test("runtimeContainers maps every container and lists the running ones", async () => {
  const got = await runtimeContainers({
    listContainers: () =>
      Promise.resolve([
        {
          id: "a",
          state: api.ContainerState.CONTAINER_RUNNING,
          labels: { "io.kubernetes.pod.uid": "u1", "io.kubernetes.container.name": "app" },
        },
        {
          id: "b",
          state: api.ContainerState.CONTAINER_EXITED,
          labels: { "io.kubernetes.pod.uid": "u1", "io.kubernetes.container.name": "init" },
        },
      ] as never),
  });
  assert.deepEqual([...got.containers], [["a", { podUID: "u1", name: "app" }], [
    "b",
    { podUID: "u1", name: "init" },
  ]]);
  assert.deepEqual(got.running, ["u1/app"]);
});
