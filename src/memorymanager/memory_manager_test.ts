import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import { readMachineTopology } from "../cpumanager/machine_topology.ts";
import { createLogger } from "../klog/klog.ts";
import { MACHINE_DUAL_SOCKET_HT, writeNumaMachine } from "../testing/numa_fixtures.ts";
import { getPodAdmitResult } from "../topologymanager/admission_error.ts";
import { TopologyManager } from "../topologymanager/topology_manager.ts";
import { FakeClock } from "../util/clock.ts";
import { decodeMemoryManagerCheckpoint, MEMORY_MANAGER_STATE_FILE } from "./checkpoint.ts";
import { MemoryManager, type MemoryManagerOptions } from "./memory_manager.ts";
import type { MachineMemory } from "./policy_static.ts";

const quiet = createLogger({ write: () => {}, pid: 1 });
const MI = 2 ** 20;
const GI = 2 ** 30;

/** The fixture machine: 2 NUMA nodes of 16 GiB, each with 64 2 MiB pages and one 1 GiB page. */
let machineCache: MachineMemory | undefined;
async function fixtureMachine(): Promise<MachineMemory> {
  if (machineCache) return machineCache;
  const root = await writeNumaMachine(MACHINE_DUAL_SOCKET_HT);
  try {
    machineCache = await readMachineTopology(root);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
  return machineCache;
}

const NO_HINT = () => ({ numaNodeAffinity: undefined, preferred: false });

async function manager(
  dir: string,
  o: Partial<MemoryManagerOptions> = {},
): Promise<MemoryManager> {
  return new MemoryManager({
    policy: "Static",
    machine: await fixtureMachine(),
    reservedMemory: [
      { numaNode: 0, limits: { memory: "1Gi" } },
      { numaNode: 1, limits: { memory: "1Gi" } },
    ],
    nodeAllocatableReservation: { memory: "2Gi", cpu: "1" },
    stateDirectory: dir,
    logger: quiet,
    affinity: NO_HINT,
    ...o,
  });
}

function guaranteed(name: string, memory: string, extra: Record<string, string> = {}) {
  const r = { cpu: "1", memory, ...extra };
  return { name, resources: { requests: r, limits: r } };
}

function pod(uid: string, containers: V1Container[], initContainers: V1Container[] = []): V1Pod {
  return { metadata: { uid, name: uid, namespace: "ns" }, spec: { containers, initContainers } };
}

async function readState(dir: string) {
  const file = join(dir, MEMORY_MANAGER_STATE_FILE);
  return decodeMemoryManagerCheckpoint(await Deno.readTextFile(file), file);
}

Deno.test("MemoryManager refuses bad policies and reservations with upstream's errors", async () => {
  const dir = "/nonexistent";
  await assert.rejects(() => manager(dir, { policy: "fake" }), {
    name: "MemoryManagerError",
    message: 'unknown policy: "fake"',
  });
  await assert.rejects(() => manager(dir, { policy: "BestEffort" }), {
    message: 'policy "BestEffort" is not available for platform "linux"',
  });
  await assert.rejects(
    () =>
      manager(dir, {
        reservedMemory: [
          { numaNode: 0, limits: { memory: "1Gi" } },
          { numaNode: 1, limits: { memory: "2Gi" } },
        ],
      }),
    {
      message:
        'the total amount "3Gi" of type "memory" is not equal to the value "2Gi" determined by Node Allocatable feature',
    },
  );
  await assert.rejects(
    () => manager(dir, { reservedMemory: [], nodeAllocatableReservation: {} }),
    { message: "[memorymanager] you should specify the system reserved memory" },
  );
  // None needs no reservation at all.
  assert.equal((await manager(dir, { policy: "None", reservedMemory: [] })).policyName, "None");
});

Deno.test("MemoryManager start writes a new checkpoint with the machine's state", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const m = await manager(dir);
    await m.start(() => []);
    const cp = await readState(dir);
    assert.equal(cp.policyName, "Static");
    assert.equal(cp.entries.size, 0);
    // 16 GiB - 1 GiB reserved - 128 MiB of 2 MiB pages - 1 GiB of 1 GiB pages.
    assert.deepEqual(cp.machineState.get(1)?.memoryMap.get("memory"), {
      totalMemSize: 16 * GI,
      systemReserved: GI,
      allocatable: 16 * GI - GI - 128 * MI - GI,
      reserved: 0,
      free: 16 * GI - GI - 128 * MI - GI,
    });
    assert.deepEqual(cp.machineState.get(0)?.memoryMap.get("hugepages-2Mi")?.allocatable, 128 * MI);
    assert.deepEqual(
      m.getAllocatableMemory().map((c) => [c.topology?.nodes[0]?.ID, c.memoryType, c.size]),
      [
        [0n, "hugepages-1Gi", BigInt(GI)],
        [0n, "hugepages-2Mi", BigInt(128 * MI)],
        [0n, "memory", BigInt(14208 * MI)],
        [1n, "hugepages-1Gi", BigInt(GI)],
        [1n, "hugepages-2Mi", BigInt(128 * MI)],
        [1n, "memory", BigInt(14208 * MI)],
      ],
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("MemoryManager aligns with the topology manager and survives a restart", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const tm = new TopologyManager({
      policy: "single-numa-node",
      numa: { nodes: [0, 1], distances: new Map([[0, [10, 32]], [1, [32, 10]]]) },
      logger: quiet,
      clock: new FakeClock(),
    });
    const m = await manager(dir, { affinity: (p, c) => tm.getAffinity(p, c) });
    tm.addHintProvider(m);
    const pods: V1Pod[] = [];
    await m.start(() => pods);
    // 10 GiB fits once per node. With no node left, upstream's hints are an empty map, which
    // the topology manager reads as "no preference": the refusal comes from allocate.
    for (const uid of ["a", "b", "c"]) {
      pods.push(pod(uid, [guaranteed("c", "10Gi", { "hugepages-2Mi": "64Mi" })]));
    }
    assert.deepEqual(await tm.admit(pods[0]!), { admit: true });
    assert.deepEqual(await tm.admit(pods[1]!), { admit: true });
    assert.deepEqual(await tm.admit(pods[2]!), {
      admit: false,
      reason: "UnexpectedAdmissionError",
      message:
        "Allocate failed due to [memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available, which is unexpected",
    });
    const c = pods[0]!.spec!.containers[0]!;
    assert.deepEqual(m.getMemoryNUMANodes(pods[0]!, c), [0]);
    assert.deepEqual(m.getMemoryNUMANodes(pods[1]!, c), [1]);
    assert.deepEqual(
      m.getMemory("a", "c").map((x) => [x.memoryType, x.size, x.topology?.nodes.map((n) => n.ID)]),
      [["memory", BigInt(10 * GI), [0n]], ["hugepages-2Mi", BigInt(64 * MI), [0n]]],
    );
    const cp = await readState(dir);
    assert.equal(cp.machineState.get(0)?.numberOfAssignments, 2);
    assert.equal(cp.machineState.get(0)?.memoryMap.get("memory")?.reserved, 10 * GI);

    // A new kubelet reads the file: same blocks, same hints, same nodes.
    const again = await manager(dir);
    await again.start(() => pods.slice(0, 2));
    assert.deepEqual(again.getMemoryNUMANodes(pods[1]!, c), [1]);
    const hints = again.getTopologyHints(pods[1]!, c);
    assert.deepEqual(
      [...hints!].map((
        [r, hs],
      ) => [r, hs!.map((h) => [h.numaNodeAffinity!.getBits(), h.preferred])]),
      [["memory", [[[1], true]]], ["hugepages-2Mi", [[[1], true]]]],
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("MemoryManager start refuses a checkpoint of another policy, a corrupt one, a changed machine", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const file = join(dir, MEMORY_MANAGER_STATE_FILE);
    await (await manager(dir, { policy: "None" })).start(() => []);
    assert.equal((await readState(dir)).policyName, "None");
    await assert.rejects(() => manager(dir).then((m) => m.start(() => [])), {
      name: "MemoryStateRestoreError",
      message:
        'could not restore state from checkpoint: [memorymanager] configured policy "Static" differs from state checkpoint policy "None", please drain this node and delete the memory manager checkpoint file ' +
        `${JSON.stringify(file)} before restarting Kubelet`,
    });

    await Deno.writeTextFile(file, (await Deno.readTextFile(file)).replace("None", "Nonf"));
    await assert.rejects(
      () => manager(dir, { policy: "None" }).then((m) => m.start(() => [])),
      (e) => {
        assert.match(
          (e as Error).message,
          /^could not restore state from checkpoint: .*checkpoint is corrupted.*, please drain this node and delete the memory manager checkpoint file ".*memory_manager_state" before restarting Kubelet$/,
        );
        return true;
      },
    );

    // Reservations changed between two starts: the recorded state no longer adds up.
    await Deno.remove(file);
    await (await manager(dir)).start(() => []);
    const changed = await manager(dir, {
      reservedMemory: [{ numaNode: 0, limits: { memory: "2Gi" } }],
    });
    await assert.rejects(() => changed.start(() => []), {
      name: "MemoryManagerError",
      message: "[memorymanager] the expected machine state is different from the real one",
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("MemoryManager frees earlier init containers once a later container is added", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const m = await manager(dir);
    const p = pod("p", [guaranteed("app", "2Gi")], [
      guaranteed("init1", "3Gi"),
      { ...guaranteed("sidecar", "1Gi"), restartPolicy: "Always" },
      guaranteed("init2", "1Gi"),
    ]);
    await m.start(() => [p]);
    for (const c of [...p.spec!.initContainers!, ...p.spec!.containers]) await m.allocate(p, c);
    const names = async () => [...(await readState(dir)).entries.get("p")?.keys() ?? []].sort();
    assert.deepEqual(await names(), ["app", "init1", "init2", "sidecar"]);
    m.addContainer(p, p.spec!.initContainers![2]!, "id-init2");
    await m.flush();
    // init1 ran to completion before init2; the sidecar keeps running.
    assert.deepEqual(await names(), ["app", "init2", "sidecar"]);
    m.addContainer(p, p.spec!.containers[0]!, "id-app");
    await m.flush();
    assert.deepEqual(await names(), ["app", "sidecar"]);
    // The sidecar's 1 GiB and the app's 2 GiB: the app reused 2 of init1's 3 GiB, so 3 GiB held.
    assert.equal(
      (await readState(dir)).machineState.get(0)?.memoryMap.get("memory")?.reserved,
      3 * GI,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("MemoryManager removes containers, and stale state once the sources are ready", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const m = await manager(dir);
    const a = pod("a", [guaranteed("c", "1Gi")]);
    const b = pod("b", [guaranteed("c", "1Gi")]);
    let active = [a, b];
    let ready = false;
    await m.start(() => active, [], () => ready);
    await m.allocate(a, a.spec!.containers[0]!);
    await m.allocate(b, b.spec!.containers[0]!);
    active = [a];
    // Sources not ready: b's memory stays.
    m.getTopologyHints(a, a.spec!.containers[0]!);
    await m.flush();
    assert.deepEqual([...(await readState(dir)).entries.keys()].sort(), ["a", "b"]);
    ready = true;
    m.getTopologyHints(a, a.spec!.containers[0]!);
    await m.flush();
    assert.deepEqual([...(await readState(dir)).entries.keys()], ["a"]);
    await m.removeContainer("a", "c");
    const cp = await readState(dir);
    assert.equal(cp.entries.size, 0);
    assert.equal(cp.machineState.get(0)?.numberOfAssignments, 0);
    assert.equal(cp.machineState.get(0)?.memoryMap.get("memory")?.reserved, 0);
    assert.equal(m.getMemoryNUMANodes(a, a.spec!.containers[0]!), undefined);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("MemoryManager allocate failures become UnexpectedAdmissionError verdicts", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const m = await manager(dir);
    await m.start(() => []);
    const p = pod("big", [guaranteed("c", "40Gi")]);
    const err = await m.allocate(p, p.spec!.containers[0]!).then(() => undefined, (e) => e);
    assert.deepEqual(getPodAdmitResult(err), {
      admit: false,
      reason: "UnexpectedAdmissionError",
      message:
        "Allocate failed due to [memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available, which is unexpected",
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("MemoryManager with the None policy pins nothing", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const m = await manager(dir, { policy: "None", reservedMemory: [] });
    await m.start(() => []);
    const p = pod("p", [guaranteed("c", "1Gi")]);
    assert.equal(m.getTopologyHints(p, p.spec!.containers[0]!), undefined);
    await m.allocate(p, p.spec!.containers[0]!);
    assert.equal(m.getMemoryNUMANodes(p, p.spec!.containers[0]!), undefined);
    assert.deepEqual(m.getAllocatableMemory(), []);
    assert.equal(
      await Deno.readTextFile(join(dir, MEMORY_MANAGER_STATE_FILE)),
      '{"policyName":"None","machineState":{},"checksum":4236770233}',
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
