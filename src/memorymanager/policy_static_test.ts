import assert from "node:assert/strict";
import type { V1Container, V1Pod, V1ResourceRequirements } from "@kubernetes/client-node";
import { createLogger } from "../klog/klog.ts";
import { KubeletMetrics } from "../metrics/metrics.ts";
import { BitMask } from "../topologymanager/bitmask.ts";
import type { ProviderHints, TopologyHint } from "../topologymanager/policy.ts";
import type { Block } from "./checkpoint.ts";
import {
  getPodRequestedResources,
  isAffinityViolatingNUMAAllocations,
  type MachineMemory,
  StaticPolicy,
  type SystemReservedMemory,
} from "./policy_static.ts";
import {
  type Assignments,
  type MachineState,
  MemoryState,
  type MemoryTableState,
  type NodeState,
} from "./state.ts";

const quiet = createLogger({ write: () => {}, pid: 1 });
const MB = 2 ** 20;
const GB = 2 ** 30;
const HP1G = "hugepages-1Gi";
const HP2M = "hugepages-2Mi";

/** A memory table: total, system reserved, allocatable, reserved, free. */
function t(
  totalMemSize: number,
  systemReserved: number,
  allocatable: number,
  reserved: number,
  free: number,
): MemoryTableState {
  return { totalMemSize, systemReserved, allocatable, reserved, free };
}

function node(
  cells: number[],
  numberOfAssignments: number,
  map: Record<string, MemoryTableState>,
): NodeState {
  return { cells, numberOfAssignments, memoryMap: new Map(Object.entries(map)) };
}

function machineState(nodes: Record<number, NodeState>): MachineState {
  return new Map(Object.entries(nodes).map(([k, v]) => [Number(k), v]));
}

function assignments(a: Record<string, Record<string, Block[]>>): Assignments {
  return new Map(Object.entries(a).map(([p, cs]) => [p, new Map(Object.entries(cs))]));
}

const blk = (numaAffinity: number[], type: string, size: number): Block => ({
  numaAffinity,
  type,
  size,
});

const reserved = (r: Record<number, Record<string, number>>): SystemReservedMemory =>
  new Map(Object.entries(r).map(([k, v]) => [Number(k), new Map(Object.entries(v))]));

const RESERVED_512M_ON_0 = reserved({ 0: { memory: 512 * MB } });

function machine(
  ...nodes: { id: number; memory: number; hugePages?: [number, number][] }[]
): MachineMemory {
  return {
    nodes: nodes.map((n) => ({
      id: n.id,
      memoryBytes: n.memory,
      hugePages: new Map(n.hugePages ?? []),
    })),
  };
}

function req(r: Record<string, string>): V1ResourceRequirements {
  return { requests: { ...r }, limits: { ...r } };
}

const GUARANTEED = req({ cpu: "1000Mi", memory: "1Gi", [HP1G]: "1Gi" });
const BURSTABLE: V1ResourceRequirements = {
  requests: { cpu: "1000Mi", memory: "1Gi", [HP1G]: "1Gi" },
  limits: { cpu: "1000Mi", memory: "2Gi", [HP1G]: "2Gi" },
};

function pod(
  uid: string,
  containers: V1Container[],
  initContainers: V1Container[] = [],
): V1Pod {
  return {
    metadata: { uid, name: uid, namespace: "default" },
    spec: { containers, initContainers },
  };
}

const simplePod = (uid: string, name: string, resources: V1ResourceRequirements) =>
  pod(uid, [{ name, resources }]);

interface Setup {
  machine?: MachineMemory;
  systemReserved?: SystemReservedMemory;
  machineState?: MachineState;
  assignments?: Assignments;
  hint?: TopologyHint;
}

function setup(o: Setup): { policy: StaticPolicy; state: MemoryState; metrics: KubeletMetrics } {
  const metrics = new KubeletMetrics();
  const hint = o.hint ?? { numaNodeAffinity: undefined, preferred: false };
  const policy = new StaticPolicy({
    machine: o.machine ?? { nodes: [] },
    systemReserved: o.systemReserved ?? RESERVED_512M_ON_0,
    affinity: () => hint,
    logger: quiet,
    metrics,
  });
  const state = new MemoryState();
  state.setMachineState(o.machineState ?? new Map());
  state.setMemoryAssignments(o.assignments ?? new Map());
  return { policy, state, metrics };
}

/** Blocks compared without regard to order, as upstream areMemoryBlocksEqual. */
function sortedAssignments(a: Assignments) {
  const key = (b: Block) => `${b.type}@${b.numaAffinity.join(",")}:${b.size}`;
  return Object.fromEntries(
    [...a].map(([p, cs]) => [
      p,
      Object.fromEntries([...cs].map(([c, bs]) => [c, bs.map(key).sort()])),
    ]),
  );
}

function plainState(m: MachineState) {
  return Object.fromEntries(
    [...m].map(([id, s]) => [id, {
      n: s.numberOfAssignments,
      cells: [...s.cells].sort(),
      map: Object.fromEntries(s.memoryMap),
    }]),
  );
}

function plainHints(h: ProviderHints) {
  if (h === undefined) return undefined;
  return Object.fromEntries(
    [...h].map((
      [r, hs],
    ) => [r, (hs ?? []).map((x) => `${x.numaNodeAffinity?.getBits().join(",")}:${x.preferred}`)]),
  );
}

const single2G = () =>
  machineState({
    0: node([0], 0, {
      memory: t(2 * GB, 512 * MB, 1536 * MB, 0, 1536 * MB),
      [HP1G]: t(GB, 0, GB, 0, GB),
    }),
  });

// ---- New / Start ----

Deno.test("StaticPolicy refuses a machine without memory reserved for the system", () => {
  assert.throws(
    () => setup({ systemReserved: reserved({ 0: { [HP1G]: GB } }) }),
    { message: "[memorymanager] you should specify the system reserved memory" },
  );
  assert.equal(
    setup({ systemReserved: reserved({ 0: {}, 1: { memory: 1 } }) }).policy.name,
    "Static",
  );
});

Deno.test("StaticPolicy start fails when the machine state is empty but it has assignments", () => {
  const { policy, state } = setup({
    assignments: assignments({ pod: { container1: [blk([0], "memory", 512 * MB)] } }),
  });
  assert.throws(() => policy.start(state), {
    message: "[memorymanager] machine state can not be empty when it has memory assignments",
  });
});

Deno.test("StaticPolicy start fills an empty state from the machine, hugepages taken off memory", () => {
  const { policy, state } = setup({
    machine: machine({ id: 0, memory: 3 * GB, hugePages: [[GB, 1]] }),
  });
  policy.start(state);
  assert.deepEqual(
    plainState(state.getMachineState()),
    plainState(machineState({
      0: node([0], 0, {
        memory: t(3 * GB, 512 * MB, 1536 * MB, 0, 1536 * MB),
        [HP1G]: t(GB, 0, GB, 0, GB),
      }),
    })),
  );
  assert.equal(state.getMemoryAssignments().size, 0);
});

const MISMATCH = "[memorymanager] the expected machine state is different from the real one";

Deno.test("StaticPolicy start refuses a state that does not match the machine", async (t2) => {
  const m2 = machine({ id: 0, memory: 2 * GB, hugePages: [[GB, 1]] });
  const base = () =>
    node([0], 0, {
      memory: t(2 * GB, 512 * MB, 512 * MB, 0, 512 * MB),
      [HP1G]: t(GB, 0, GB, 0, GB),
    });
  const cases: [string, MachineMemory, MachineState, Assignments?][] = [
    [
      "a NUMA node is missing",
      machine({ id: 0, memory: 2 * GB, hugePages: [[GB, 1]] }, {
        id: 1,
        memory: 2 * GB,
        hugePages: [[GB, 1]],
      }),
      machineState({ 0: base() }),
    ],
    [
      "the memory resource is missing",
      m2,
      machineState({ 0: node([0], 0, { [HP1G]: t(GB, 0, GB, 0, GB) }) }),
    ],
    [
      "the total memory differs",
      m2,
      machineState({
        0: node([0], 0, {
          memory: t(1536 * MB, 512 * MB, 512 * MB, 0, 512 * MB),
          [HP1G]: t(GB, 0, GB, 0, GB),
        }),
      }),
    ],
    [
      "the system reserved memory differs",
      m2,
      machineState({
        0: node([0], 0, {
          memory: t(2 * GB, 1024, 512 * MB, 0, 512 * MB),
          [HP1G]: t(GB, 0, GB, 0, GB),
        }),
      }),
    ],
    [
      "the reserved memory differs from the assignments",
      m2,
      machineState({
        0: node([0], 1, {
          memory: t(2 * GB, 512 * MB, 512 * MB, 0, 512 * MB),
          [HP1G]: t(GB, 0, GB, 0, GB),
        }),
      }),
      assignments({ pod: { container1: [blk([0], "memory", 512 * MB)] } }),
    ],
    [
      "the number of assignments differs",
      m2,
      machineState({
        0: node([0], 2, {
          memory: t(2 * GB, 512 * MB, 512 * MB, 512 * MB, 0),
          [HP1G]: t(GB, 0, GB, 0, GB),
        }),
      }),
      assignments({ pod: { container1: [blk([0], "memory", 512 * MB)] } }),
    ],
  ];
  for (const [name, m, ms, a] of cases) {
    await t2.step(name, () => {
      const { policy, state } = setup({ machine: m, machineState: ms, assignments: a });
      assert.throws(() => policy.start(state), { message: MISMATCH });
    });
  }
});

Deno.test("StaticPolicy start refuses assignments on a NUMA node or resource the machine lacks", () => {
  const m = machine({ id: 0, memory: 2 * GB, hugePages: [[GB, 1]] });
  const ms = machineState({
    0: node([0], 1, {
      memory: t(2 * GB, 512 * MB, 512 * MB, 512 * MB, 0),
      [HP1G]: t(GB, 0, GB, 0, GB),
    }),
  });
  let s = setup({
    machine: m,
    machineState: ms,
    assignments: assignments({ pod: { container1: [blk([1], "memory", 512 * MB)] } }),
  });
  assert.throws(() => s.policy.start(s.state), {
    message:
      "[memorymanager] (pod: pod, container: container1) the memory assignment uses the NUMA that does not exist",
  });
  s = setup({
    machine: m,
    machineState: ms,
    assignments: assignments({ pod: { container1: [blk([0], HP2M, 512 * MB)] } }),
  });
  assert.throws(() => s.policy.start(s.state), {
    message:
      "[memorymanager] (pod: pod, container: container1) the memory assignment uses memory resource that does not exist",
  });
});

Deno.test("StaticPolicy start accepts a cross-NUMA group whose split differs but totals agree", () => {
  const m = machine({ id: 0, memory: 2 * GB }, { id: 1, memory: 2 * GB });
  // The expected state puts 1.5 GiB on node 0 and 512 MiB on node 1; the file the reverse.
  const { policy, state } = setup({
    machine: m,
    systemReserved: reserved({ 0: { memory: 512 * MB }, 1: { memory: 512 * MB } }),
    machineState: machineState({
      0: node([0, 1], 1, { memory: t(2 * GB, 512 * MB, 1536 * MB, 512 * MB, GB) }),
      1: node([0, 1], 1, { memory: t(2 * GB, 512 * MB, 1536 * MB, 1536 * MB, 0) }),
    }),
    assignments: assignments({ pod: { c: [blk([0, 1], "memory", 2 * GB)] } }),
  });
  policy.start(state);
  // ... but a total that differs within the group is refused.
  const bad = setup({
    machine: m,
    systemReserved: reserved({ 0: { memory: 512 * MB }, 1: { memory: 512 * MB } }),
    machineState: machineState({
      0: node([0, 1], 1, { memory: t(2 * GB, 512 * MB, 1536 * MB, 512 * MB, GB) }),
      1: node([0, 1], 1, { memory: t(2 * GB, 512 * MB, 1536 * MB, 1024 * MB, 512 * MB) }),
    }),
    assignments: assignments({ pod: { c: [blk([0, 1], "memory", 2 * GB)] } }),
  });
  assert.throws(() => bad.policy.start(bad.state), { message: MISMATCH });
});

// ---- Allocate ----

Deno.test("StaticPolicy allocate does nothing for a non-Guaranteed pod or one with pod-level resources", () => {
  for (
    const p of [
      simplePod("pod1", "container1", BURSTABLE),
      {
        ...simplePod("pod1", "container1", GUARANTEED),
        spec: {
          containers: [{ name: "container1", resources: GUARANTEED }],
          resources: req({ cpu: "1", memory: "1Gi" }),
        },
      },
    ]
  ) {
    const { policy, state, metrics } = setup({ machineState: single2G() });
    policy.allocate(state, p, p.spec!.containers[0]!);
    assert.equal(state.getMemoryAssignments().size, 0);
    assert.deepEqual(plainState(state.getMachineState()), plainState(single2G()));
    assert.equal(metrics.memoryManagerPinningRequests.get(), 0);
  }
});

Deno.test("StaticPolicy allocate leaves a container already in the state alone", () => {
  const a = assignments({
    pod1: { container1: [blk([0], "memory", GB), blk([0], HP1G, GB)] },
  });
  const ms = machineState({
    0: node([0], 2, {
      memory: t(2 * GB, 512 * MB, 1536 * MB, GB, 512 * MB),
      [HP1G]: t(GB, 0, GB, GB, 0),
    }),
  });
  const { policy, state } = setup({ machineState: ms, assignments: a });
  const p = simplePod("pod1", "container1", GUARANTEED);
  policy.allocate(state, p, p.spec!.containers[0]!);
  assert.deepEqual(sortedAssignments(state.getMemoryAssignments()), sortedAssignments(a));
  assert.deepEqual(plainState(state.getMachineState()), plainState(ms));
});

Deno.test("StaticPolicy allocate computes the default hint when the topology manager gave none", () => {
  const { policy, state, metrics } = setup({ machineState: single2G() });
  const p = simplePod("pod1", "container1", GUARANTEED);
  policy.allocate(state, p, p.spec!.containers[0]!);
  assert.deepEqual(
    sortedAssignments(state.getMemoryAssignments()),
    sortedAssignments(assignments({
      pod1: { container1: [blk([0], "memory", GB), blk([0], HP1G, GB)] },
    })),
  );
  assert.deepEqual(
    plainState(state.getMachineState()),
    plainState(machineState({
      0: node([0], 2, {
        memory: t(2 * GB, 512 * MB, 1536 * MB, GB, 512 * MB),
        [HP1G]: t(GB, 0, GB, GB, 0),
      }),
    })),
  );
  assert.equal(metrics.memoryManagerPinningRequests.get(), 1);
  assert.equal(metrics.memoryManagerPinningErrors.get(), 0);
});

Deno.test("StaticPolicy allocate fails when no NUMA node can hold the container", () => {
  const { policy, state, metrics } = setup({
    machineState: machineState({
      0: node([0], 0, {
        memory: t(GB, 512 * MB, 512 * MB, 0, 512 * MB),
        [HP1G]: t(GB, 0, GB, 0, GB),
      }),
    }),
  });
  const p = simplePod("pod1", "container1", GUARANTEED);
  assert.throws(() => policy.allocate(state, p, p.spec!.containers[0]!), {
    message:
      "[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available",
  });
  assert.equal(metrics.memoryManagerPinningErrors.get(), 1);
});

const fourNodes = () =>
  machineState(Object.fromEntries([0, 1, 2, 3].map((i) => [
    i,
    node([i], 0, {
      memory: t(GB, 512 * MB, 512 * MB, 0, 512 * MB),
      [HP1G]: t(GB, 0, GB, 0, GB),
    }),
  ])));

/** Node 0 used alone for 512 MiB; nodes 1 and 2 too small alone (upstream's tables). */
const oneUsedTwoSmall = () => ({
  machineState: machineState({
    0: node([0], 1, {
      memory: t(1536 * MB, 512 * MB, GB, 512 * MB, 512 * MB),
      [HP1G]: t(GB, 0, GB, 0, GB),
    }),
    1: node([1], 0, {
      memory: t(GB, 512 * MB, 512 * MB, 0, 512 * MB),
      [HP1G]: t(GB, 0, GB, 0, GB),
    }),
    2: node([2], 0, {
      memory: t(GB, 512 * MB, 512 * MB, 0, 512 * MB),
      [HP1G]: t(GB, 0, GB, 0, GB),
    }),
  }),
  systemReserved: reserved({
    0: { memory: 512 * MB },
    1: { memory: 512 * MB },
    2: { memory: 512 * MB },
  }),
  assignments: assignments({ pod1: { container1: [blk([0], "memory", 512 * MB)] } }),
});

Deno.test("StaticPolicy allocate fails when the hint is preferred and the default hint is not", () => {
  const { policy, state } = setup({
    ...oneUsedTwoSmall(),
    hint: { numaNodeAffinity: undefined, preferred: true },
  });
  const p = simplePod("pod2", "container2", GUARANTEED);
  assert.throws(() => policy.allocate(state, p, p.spec!.containers[0]!), {
    message: "[memorymanager] failed to find the default preferred hint",
  });
});

Deno.test("StaticPolicy allocate extends a narrower hint to the nodes the request needs", () => {
  const { policy, state } = setup({
    machineState: fourNodes(),
    systemReserved: reserved({ 0: { memory: 512 * MB } }),
    hint: { numaNodeAffinity: BitMask.of(0), preferred: true },
  });
  const p = simplePod("pod1", "container1", GUARANTEED);
  policy.allocate(state, p, p.spec!.containers[0]!);
  assert.deepEqual(
    sortedAssignments(state.getMemoryAssignments()),
    sortedAssignments(assignments({
      pod1: { container1: [blk([0, 1], "memory", GB), blk([0, 1], HP1G, GB)] },
    })),
  );
});

Deno.test("StaticPolicy allocate fails when the hint is preferred and its extension is not", () => {
  const { policy, state } = setup({
    ...oneUsedTwoSmall(),
    hint: { numaNodeAffinity: BitMask.of(1), preferred: true },
  });
  const p = simplePod("pod2", "container2", GUARANTEED);
  assert.throws(() => policy.allocate(state, p, p.spec!.containers[0]!), {
    message: "[memorymanager] failed to find the extended preferred hint",
  });
});

Deno.test("StaticPolicy allocate fails when no NUMA node set extends the hint", () => {
  const { policy, state } = setup({
    machineState: machineState({
      0: node([0], 0, {
        memory: t(GB, 512 * MB, 512 * MB, 0, 512 * MB),
        [HP1G]: t(GB, 0, GB, 0, GB),
      }),
      1: node([1, 2], 1, {
        memory: t(2 * GB, 512 * MB, 1536 * MB, GB, 512 * MB),
        [HP1G]: t(GB, 0, GB, 0, GB),
      }),
      2: node([1, 2], 1, {
        memory: t(2 * GB, 512 * MB, 1536 * MB, GB, 512 * MB),
        [HP1G]: t(GB, 0, GB, 0, GB),
      }),
    }),
    hint: { numaNodeAffinity: BitMask.of(0), preferred: false },
  });
  const p = simplePod("pod1", "container1", GUARANTEED);
  assert.throws(() => policy.allocate(state, p, p.spec!.containers[0]!), {
    message: "[memorymanager] failed to find NUMA nodes to extend the current topology hint",
  });
});

Deno.test("StaticPolicy allocate spreads memory over several NUMA nodes", () => {
  const { policy, state } = setup({
    machineState: fourNodes(),
    hint: { numaNodeAffinity: undefined, preferred: true },
  });
  const p = simplePod("pod1", "container1", GUARANTEED);
  policy.allocate(state, p, p.spec!.containers[0]!);
  assert.deepEqual(
    sortedAssignments(state.getMemoryAssignments()),
    sortedAssignments(assignments({
      pod1: { container1: [blk([0, 1], "memory", GB), blk([0, 1], HP1G, GB)] },
    })),
  );
  const want = fourNodes();
  for (const i of [0, 1]) {
    want.get(i)!.cells = [0, 1];
    want.get(i)!.numberOfAssignments = 2;
    want.get(i)!.memoryMap.set("memory", t(GB, 512 * MB, 512 * MB, 512 * MB, 0));
  }
  // Hugepages come from the first node of the group while it has them.
  want.get(0)!.memoryMap.set(HP1G, t(GB, 0, GB, GB, 0));
  assert.deepEqual(plainState(state.getMachineState()), plainState(want));
});

Deno.test("StaticPolicy allocate refuses a NUMA node for both single and cross-node memory", () => {
  const ms = machineState({
    0: node([0], 2, {
      memory: t(2 * GB, 512 * MB, 1536 * MB, GB, 512 * MB),
      [HP1G]: t(GB, 0, GB, GB, 0),
    }),
    1: node([1], 0, {
      memory: t(2 * GB, 512 * MB, 1536 * MB, 0, 1536 * MB),
      [HP1G]: t(GB, 0, GB, 0, GB),
    }),
  });
  const { policy, state } = setup({
    machineState: ms,
    systemReserved: reserved({ 0: { memory: 512 * MB }, 1: { memory: 512 * MB } }),
    assignments: assignments({
      pod1: { container1: [blk([0], "memory", GB), blk([0], HP1G, GB)] },
    }),
    hint: { numaNodeAffinity: BitMask.of(0, 1), preferred: true },
  });
  const p = simplePod("pod2", "container1", GUARANTEED);
  assert.throws(() => policy.allocate(state, p, p.spec!.containers[0]!), {
    message: "[memorymanager] preferred hint violates NUMA node allocation",
  });
});

function initPod(
  inits: [string, string, boolean?][],
  apps: [string, string][],
): V1Pod {
  const c = (name: string, size: string, restartable?: boolean): V1Container => ({
    name,
    resources: req({ cpu: "1000Mi", memory: size, [HP1G]: size }),
    ...(restartable ? { restartPolicy: "Always" } : {}),
  });
  return pod(
    "pod1",
    apps.map(([n, s]) => c(n, s)),
    inits.map(([n, s, r]) => c(n, s, r)),
  );
}

function allocateAll(policy: StaticPolicy, state: MemoryState, p: V1Pod): void {
  for (const c of [...p.spec!.initContainers!, ...p.spec!.containers]) {
    policy.allocate(state, p, c);
  }
}

Deno.test("StaticPolicy allocate reuses init containers' memory (1Gi, 2Gi then 3Gi, 4Gi)", () => {
  const { policy, state } = setup({
    machineState: machineState({
      0: node([0], 0, {
        memory: t(8 * GB, 512 * MB, 7680 * MB, 0, 7680 * MB),
        [HP1G]: t(8 * GB, 0, 8 * GB, 0, 8 * GB),
      }),
    }),
  });
  allocateAll(
    policy,
    state,
    initPod([["initContainer1", "1Gi"], ["initContainer2", "2Gi"]], [
      ["container1", "3Gi"],
      ["container2", "4Gi"],
    ]),
  );
  const both = (size: number) => [blk([0], "memory", size), blk([0], HP1G, size)];
  assert.deepEqual(
    sortedAssignments(state.getMemoryAssignments()),
    sortedAssignments(assignments({
      pod1: {
        initContainer1: both(0),
        initContainer2: both(0),
        container1: both(3 * GB),
        container2: both(4 * GB),
      },
    })),
  );
  assert.deepEqual(
    plainState(state.getMachineState()),
    plainState(machineState({
      0: node([0], 8, {
        memory: t(8 * GB, 512 * MB, 7680 * MB, 7 * GB, 512 * MB),
        [HP1G]: t(8 * GB, 0, 8 * GB, 7 * GB, GB),
      }),
    })),
  );
});

Deno.test("StaticPolicy allocate reuses init containers' memory (7Gi, 4Gi then 4Gi, 3Gi)", () => {
  const { policy, state } = setup({
    machineState: machineState({
      0: node([0], 0, {
        memory: t(8 * GB, 512 * MB, 7680 * MB, 0, 7680 * MB),
        [HP1G]: t(8 * GB, 0, 8 * GB, 0, 8 * GB),
      }),
    }),
  });
  allocateAll(
    policy,
    state,
    initPod([["initContainer1", "7Gi"], ["initContainer2", "4Gi"]], [
      ["container1", "4Gi"],
      ["container2", "3Gi"],
    ]),
  );
  const both = (size: number) => [blk([0], "memory", size), blk([0], HP1G, size)];
  // Everything comes out of init1's 7 GiB; the init blocks shrink to 0 as it is reused.
  assert.deepEqual(
    sortedAssignments(state.getMemoryAssignments()),
    sortedAssignments(assignments({
      pod1: {
        initContainer1: both(0),
        initContainer2: both(0),
        container1: both(4 * GB),
        container2: both(3 * GB),
      },
    })),
  );
  const ms = state.getMachineState().get(0)!;
  assert.equal(ms.memoryMap.get("memory")!.reserved, 7 * GB);
  assert.equal(ms.numberOfAssignments, 8);
});

Deno.test("StaticPolicy allocate does not reuse restartable init containers' memory", () => {
  const { policy, state } = setup({
    machineState: machineState({
      0: node([0], 0, {
        memory: t(7680 * MB, 512 * MB, 7 * GB, 0, 7 * GB),
        [HP1G]: t(7 * GB, 0, 7 * GB, 0, 7 * GB),
      }),
    }),
  });
  allocateAll(
    policy,
    state,
    initPod([
      ["initContainer1", "1Gi"],
      ["restartableInitContainer2", "2Gi", true],
      ["initContainer3", "3Gi"],
      ["restartableInitContainer4", "4Gi", true],
    ], [["container1", "1Gi"]]),
  );
  const both = (size: number) => [blk([0], "memory", size), blk([0], HP1G, size)];
  assert.deepEqual(
    sortedAssignments(state.getMemoryAssignments()),
    sortedAssignments(assignments({
      pod1: {
        initContainer1: both(0),
        restartableInitContainer2: both(2 * GB),
        initContainer3: both(0),
        restartableInitContainer4: both(4 * GB),
        container1: both(GB),
      },
    })),
  );
  assert.deepEqual(
    plainState(state.getMachineState()),
    plainState(machineState({
      0: node([0], 10, {
        memory: t(7680 * MB, 512 * MB, 7 * GB, 7 * GB, 0),
        [HP1G]: t(7 * GB, 0, 7 * GB, 7 * GB, 0),
      }),
    })),
  );
});

// ---- RemoveContainer ----

Deno.test("StaticPolicy removeContainer does nothing for a container not in the state", () => {
  const { policy, state } = setup({ machineState: single2G() });
  policy.removeContainer(state, "pod1", "container1");
  assert.deepEqual(plainState(state.getMachineState()), plainState(single2G()));
});

Deno.test("StaticPolicy removeContainer frees the blocks and drops the assignment", () => {
  const { policy, state } = setup({
    machineState: machineState({
      0: node([0], 2, {
        memory: t(2 * GB, 512 * MB, 1536 * MB, GB, 512 * MB),
        [HP1G]: t(GB, 0, GB, GB, 0),
      }),
    }),
    assignments: assignments({
      pod1: { container1: [blk([0], "memory", GB), blk([0], HP1G, GB)] },
    }),
  });
  policy.removeContainer(state, "pod1", "container1");
  assert.equal(state.getMemoryAssignments().size, 0);
  assert.deepEqual(plainState(state.getMachineState()), plainState(single2G()));
});

Deno.test("StaticPolicy removeContainer frees a cross-NUMA container and ungroups its nodes", () => {
  const grouped = machineState({
    0: node([0, 1], 2, {
      memory: t(2 * GB, 512 * MB, 1536 * MB, 1536 * MB, 0),
      [HP1G]: t(GB, 0, GB, GB, 0),
    }),
    1: node([0, 1], 2, {
      memory: t(2 * GB, 512 * MB, 1536 * MB, 512 * MB, GB),
      [HP1G]: t(GB, 0, GB, 0, GB),
    }),
  });
  const { policy, state } = setup({
    machineState: grouped,
    assignments: assignments({
      pod1: { container1: [blk([0, 1], "memory", 2 * GB), blk([0, 1], HP1G, GB)] },
    }),
  });
  policy.removeContainer(state, "pod1", "container1");
  const free = (id: number) =>
    node([id], 0, {
      memory: t(2 * GB, 512 * MB, 1536 * MB, 0, 1536 * MB),
      [HP1G]: t(GB, 0, GB, 0, GB),
    });
  assert.deepEqual(
    plainState(state.getMachineState()),
    plainState(machineState({ 0: free(0), 1: free(1) })),
  );
});

// ---- Hints ----

Deno.test("StaticPolicy getTopologyHints gives none for a non-Guaranteed pod", () => {
  const { policy, state } = setup({ machineState: single2G() });
  const p = simplePod("pod1", "container1", BURSTABLE);
  assert.equal(policy.getTopologyHints(state, p, p.spec!.containers[0]!), undefined);
  assert.equal(policy.getPodTopologyHints(state, p), undefined);
});

Deno.test("StaticPolicy getTopologyHints regenerates the hints of an existing assignment", () => {
  const { policy, state } = setup({
    machineState: single2G(),
    assignments: assignments({
      pod1: { container1: [blk([0], "memory", GB), blk([0], HP1G, GB)] },
    }),
  });
  const p = simplePod("pod1", "container1", GUARANTEED);
  const want = { memory: ["0:true"], [HP1G]: ["0:true"] };
  assert.deepEqual(plainHints(policy.getTopologyHints(state, p, p.spec!.containers[0]!)), want);
  assert.deepEqual(plainHints(policy.getPodTopologyHints(state, p)), want);
});

Deno.test("StaticPolicy getTopologyHints gives none when the existing assignment does not match the request", () => {
  const cases: Block[][] = [
    [blk([0], "memory", GB)],
    [blk([0], "memory", GB), blk([0], HP2M, GB)],
    [blk([0], "memory", 512 * MB), blk([0], HP1G, GB)],
  ];
  for (const blocks of cases) {
    const { policy, state } = setup({
      machineState: single2G(),
      assignments: assignments({ pod1: { container1: blocks } }),
    });
    const p = simplePod("pod1", "container1", GUARANTEED);
    assert.equal(policy.getTopologyHints(state, p, p.spec!.containers[0]!), undefined);
  }
});

Deno.test("StaticPolicy getTopologyHints skips nodes grouped by another container", () => {
  const ms = machineState({
    0: node([0, 1], 2, {
      memory: t(2 * GB, 512 * MB, 1536 * MB, 1536 * MB, 0),
      [HP1G]: t(GB, 0, GB, GB, 0),
    }),
    1: node([0, 1], 2, {
      memory: t(2 * GB, 512 * MB, 1536 * MB, 512 * MB, GB),
      [HP1G]: t(GB, 0, GB, GB, 0),
    }),
    2: node([2], 0, {
      memory: t(2 * GB, 512 * MB, 1536 * MB, 0, 1536 * MB),
      [HP1G]: t(GB, 0, GB, 0, GB),
    }),
    3: node([3], 0, {
      memory: t(2 * GB, 512 * MB, 1536 * MB, 0, 1536 * MB),
      [HP1G]: t(GB, 0, GB, 0, GB),
    }),
  });
  const { policy, state } = setup({
    machineState: ms,
    assignments: assignments({
      pod1: { container1: [blk([0, 1], "memory", 2 * GB), blk([0, 1], HP1G, 2 * GB)] },
    }),
  });
  const p = simplePod("pod2", "container2", GUARANTEED);
  const want = ["2:true", "3:true", "2,3:false"];
  assert.deepEqual(plainHints(policy.getTopologyHints(state, p, p.spec!.containers[0]!)), {
    memory: want,
    [HP1G]: want,
  });
});

Deno.test("StaticPolicy getTopologyHints does not prefer a group when one node would be enough", () => {
  const ms = machineState({
    0: node([0, 1], 2, {
      memory: t(2 * GB, 512 * MB, 1536 * MB, 1536 * MB, 0),
      [HP2M]: t(20 * MB, 0, 20 * MB, 20 * MB, 0),
    }),
    1: node([0, 1], 2, {
      memory: t(2 * GB, 512 * MB, 1536 * MB, 512 * MB, GB),
      [HP2M]: t(20 * MB, 0, 20 * MB, 4 * MB, 16 * MB),
    }),
  });
  const { policy, state } = setup({
    machineState: ms,
    systemReserved: reserved({ 0: { memory: 512 * MB }, 1: { memory: 512 * MB } }),
    assignments: assignments({
      pod1: { container1: [blk([0, 1], "memory", 2 * GB), blk([0, 1], HP2M, 24 * MB)] },
    }),
  });
  const p = simplePod("pod2", "container2", req({ cpu: "1000Mi", memory: "1Gi", [HP2M]: "16Mi" }));
  assert.deepEqual(plainHints(policy.getTopologyHints(state, p, p.spec!.containers[0]!)), {
    memory: ["0,1:false"],
    [HP2M]: ["0,1:false"],
  });
});

Deno.test("StaticPolicy gives no hints for a pod with pod-level resources (gate off)", () => {
  const { policy, state } = setup({ machineState: single2G() });
  const p: V1Pod = {
    metadata: { uid: "pod1" },
    spec: {
      containers: [{ name: "container1", resources: GUARANTEED }],
      resources: req({ cpu: "1", memory: "1Gi" }),
    },
  };
  assert.equal(policy.getTopologyHints(state, p, p.spec!.containers[0]!), undefined);
  assert.equal(policy.getPodTopologyHints(state, p), undefined);
});

Deno.test("StaticPolicy getPodTopologyHints sizes the pod as init and long-running containers need", () => {
  const { policy, state } = setup({
    machineState: machineState({
      0: node([0], 0, { memory: t(4 * GB, 512 * MB, 3 * GB, 0, 3 * GB) }),
      1: node([1], 0, { memory: t(4 * GB, 512 * MB, 3 * GB, 0, 3 * GB) }),
    }),
  });
  const mem = (name: string, size: string, restartPolicy?: string): V1Container => ({
    name,
    resources: req({ cpu: "1", memory: size }),
    ...(restartPolicy ? { restartPolicy } : {}),
  });
  // Init 4Gi > apps 1Gi + 1Gi: only both nodes together can hold 4 GiB.
  const p = pod("p", [mem("a", "1Gi"), mem("b", "1Gi")], [mem("i", "4Gi")]);
  assert.deepEqual(plainHints(policy.getPodTopologyHints(state, p)), { memory: ["0,1:true"] });
});

// ---- helpers ----

Deno.test("getPodRequestedResources takes the larger of init and long-running needs per type", () => {
  const c = (name: string, r: Record<string, string>, restartPolicy?: string): V1Container => ({
    name,
    resources: req(r),
    ...(restartPolicy ? { restartPolicy } : {}),
  });
  const cases: [string, V1Pod, Record<string, number>][] = [
    [
      "init > apps",
      pod("p", [c("a", { memory: "1Gi" }), c("b", { memory: "1Gi" })], [
        c("i", { memory: "3Gi" }),
      ]),
      { memory: 3 * GB },
    ],
    [
      "init < apps",
      pod("p", [c("a", { memory: "2Gi" }), c("b", { memory: "2Gi" })], [
        c("i", { memory: "3Gi" }),
      ]),
      { memory: 4 * GB },
    ],
    [
      "types apart",
      pod("p", [c("a", { memory: "1Gi", [HP2M]: "4Mi" })], [
        c("i", { memory: "2Gi", [HP2M]: "2Mi" }),
      ]),
      { memory: 2 * GB, [HP2M]: 4 * MB },
    ],
    [
      "sidecars count with the apps and under later init containers",
      pod("p", [c("a", { memory: "1Gi" })], [
        c("s", { memory: "1Gi" }, "Always"),
        c("i", { memory: "3Gi" }),
      ]),
      { memory: 4 * GB },
    ],
    [
      "sidecars long-running",
      pod("p", [c("a", { memory: "3Gi" })], [
        c("i", { memory: "1Gi" }),
        c("s", { memory: "2Gi" }, "Always"),
      ]),
      { memory: 5 * GB },
    ],
  ];
  for (const [name, p, want] of cases) {
    assert.deepEqual(Object.fromEntries(getPodRequestedResources(p)), want, name);
  }
  assert.throws(
    () => getPodRequestedResources(pod("p", [c("a", { memory: "1500m" })])),
    { message: "[memorymanager] failed to represent quantity as int64" },
  );
});

Deno.test("isAffinityViolatingNUMAAllocations refuses other groups and single-node nodes", () => {
  const ms = machineState({
    0: node([0, 1], 1, {}),
    1: node([0, 1], 1, {}),
    2: node([2], 1, {}),
    3: node([3], 0, {}),
  });
  assert.equal(isAffinityViolatingNUMAAllocations(ms, BitMask.of(1, 3)), true);
  assert.equal(isAffinityViolatingNUMAAllocations(ms, BitMask.of(2, 3)), true);
  assert.equal(isAffinityViolatingNUMAAllocations(ms, BitMask.of(0, 1)), false);
  assert.equal(isAffinityViolatingNUMAAllocations(ms, BitMask.of(2)), false);
  assert.equal(isAffinityViolatingNUMAAllocations(ms, BitMask.of(3)), false);
});

Deno.test("StaticPolicy getAllocatableMemory lists each node's non-zero allocatable types", () => {
  const { policy, state } = setup({
    machine: machine({ id: 0, memory: 3 * GB, hugePages: [[GB, 1], [2 * MB, 0]] }, {
      id: 1,
      memory: 2 * GB,
    }),
    systemReserved: reserved({ 0: { memory: 512 * MB }, 1: { memory: 512 * MB } }),
  });
  policy.start(state);
  assert.deepEqual(policy.getAllocatableMemory(state), [
    blk([0], HP1G, GB),
    blk([0], "memory", 1536 * MB),
    blk([1], "memory", 1536 * MB),
  ]);
});
