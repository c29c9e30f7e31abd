import assert from "node:assert/strict";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import { createLogger } from "../klog/klog.ts";
import { KubeletMetrics } from "../metrics/metrics.ts";
import {
  topoDualSocketHT,
  topoDualSocketMultiNumaPerSocketHT,
  topoDualSocketNoHT,
  topoQuadSocketFourWayHT,
  topoSingleSocketHT,
} from "../testing/numa_fixtures.ts";
import { getPodAdmitResult } from "../topologymanager/admission_error.ts";
import { BitMask } from "../topologymanager/bitmask.ts";
import { hintLessThan, type TopologyHint } from "../topologymanager/policy.ts";
import { CPUAssignmentError } from "./cpu_assignment.ts";
import { CPUSet } from "./cpuset.ts";
import type { CPUPolicy } from "./policy.ts";
import { NonePolicy } from "./policy_none.ts";
import {
  InvalidCPUStateError,
  SMTAlignmentError,
  StaticPolicy,
  StaticPolicyError,
  type StaticPolicyInit,
} from "./policy_static.ts";
import { MemoryState } from "./state.ts";
import { type CPUTopology, discoverCPUTopology } from "./topology.ts";

const quiet = createLogger({ write: () => {}, pid: 1 });
const S = (...cpus: number[]) => new CPUSet(cpus);
const P = (s: string) => CPUSet.parse(s);
const NO_HINT: TopologyHint = { numaNodeAffinity: undefined, preferred: false };

type Assignments = Record<string, Record<string, CPUSet>>;

interface PolicyCase {
  topo: CPUTopology;
  numReservedCPUs?: number;
  reservedCPUs?: CPUSet;
  options?: Record<string, string>;
  hint?: TopologyHint;
}

function newPolicy(c: PolicyCase, extra: Partial<StaticPolicyInit> = {}): StaticPolicy {
  return new StaticPolicy({
    topology: c.topo,
    numReservedCPUs: c.numReservedCPUs ?? 0,
    reservedCPUs: c.reservedCPUs,
    cpuPolicyOptions: c.options,
    // The upstream tests turn the alpha options on.
    gates: { alphaOptions: true },
    affinity: () => c.hint ?? NO_HINT,
    logger: quiet,
    ...extra,
  });
}

function memState(assignments: Assignments, defaultSet: CPUSet): MemoryState {
  const s = new MemoryState();
  s.setDefaultCPUSet(defaultSet);
  s.setCPUAssignments(
    new Map(Object.entries(assignments).map(([p, cs]) => [p, new Map(Object.entries(cs))])),
  );
  return s;
}

/**
 * A policy working on upstream's test state as given. Upstream's tests hand the policy a mock
 * state without Start, some of them inconsistent (CPUs neither shared nor assigned, reserved
 * CPUs missing from the shared pool), which Start refuses; so the policy starts on an empty
 * state that is then filled in.
 */
function started(c: PolicyCase, assignments: Assignments, defaultSet: CPUSet) {
  const p = newPolicy(c);
  const st = new MemoryState();
  p.start(st);
  st.setDefaultCPUSet(defaultSet);
  st.setCPUAssignments(memState(assignments, defaultSet).getCPUAssignments());
  return { p, st };
}

function makePod(uid: string, name: string, request: string, limit: string): V1Pod {
  return {
    metadata: { uid, name: uid, namespace: "default" },
    spec: {
      containers: [{
        name,
        resources: {
          requests: { cpu: request, memory: "1G" },
          limits: { cpu: limit, memory: "1G" },
        },
      }],
    },
  };
}

type ContainerOpts = [request: string, limit: string, restartPolicy?: string];

function resources(o: ContainerOpts): Partial<V1Container> {
  if (o[0] === "") return o[2] ? { restartPolicy: o[2] } : {};
  return {
    resources: {
      requests: { cpu: o[0], memory: "1G" },
      limits: { cpu: o[1], memory: "1G" },
    },
    ...(o[2] ? { restartPolicy: o[2] } : {}),
  };
}

/** Upstream makeMultiContainerPodWithOptions: pod "podUID", initContainer-i, appContainer-i. */
function multiPod(init: ContainerOpts[], app: ContainerOpts[], uid = "podUID"): V1Pod {
  return {
    metadata: { uid, name: "pod", namespace: "default" },
    spec: {
      initContainers: init.map((o, i) => ({ name: `initContainer-${i}`, ...resources(o) })),
      containers: app.map((o, i) => ({ name: `appContainer-${i}`, ...resources(o) })),
    },
  };
}

const mask = (...bits: number[]) => BitMask.of(...bits);

Deno.test("StaticPolicy is named static and SMTAlignmentError keeps its reason and upstream's texts", () => {
  assert.equal(newPolicy({ topo: topoSingleSocketHT, numReservedCPUs: 1 }).name, "static");
  // upstream TestSMTAlignmentErrorText
  assert.equal(
    new SMTAlignmentError({ requestedCPUs: 15, cpusPerCore: 4 }).message,
    "SMT Alignment Error: requested 15 cpus not multiple cpus per core = 4",
  );
  assert.equal(
    new SMTAlignmentError({ requestedCPUs: 4, cpusPerCore: 2, availablePhysicalCPUs: 0 }).message,
    "SMT Alignment Error: requested 4 cpus not multiple cpus per core = 2",
  );
  const physical = new SMTAlignmentError({
    requestedCPUs: 4,
    cpusPerCore: 2,
    availablePhysicalCPUs: 0,
    causedByPhysicalCPUs: true,
  });
  assert.equal(
    physical.message,
    "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = 0, " +
      "requested CPUs = 4, CPUs per core = 2",
  );
  assert.deepEqual(getPodAdmitResult(physical), {
    admit: false,
    reason: "SMTAlignmentError",
    message: physical.message,
  });
});

// upstream TestStaticPolicyStart and TestStaticPolicyStartWithResvList
Deno.test("StaticPolicy.start initialises an empty state and refuses inconsistent ones", () => {
  const STRICT = { "strict-cpu-reservation": "true" };
  const cases: {
    name: string;
    c: PolicyCase;
    assignments?: Assignments;
    defaultSet: CPUSet;
    want?: CPUSet;
    error?: string;
  }[] = [
    {
      name: "non-corrupted state",
      c: { topo: topoDualSocketHT },
      assignments: { fakePod: { "0": S(0) } },
      defaultSet: P("1-11"),
      want: P("1-11"),
    },
    {
      name: "empty cpuset",
      c: { topo: topoDualSocketHT, numReservedCPUs: 1 },
      defaultSet: S(),
      want: P("0-11"),
    },
    {
      name: "reserved cores 0 & 6 are not present in available cpuset",
      c: { topo: topoDualSocketHT, numReservedCPUs: 2 },
      defaultSet: S(0, 1),
      error: 'not all reserved cpus: "0,6" are present in defaultCpuSet: "0-1"',
    },
    {
      name: "some of reserved cores are present in available cpuset (strict)",
      c: { topo: topoDualSocketHT, numReservedCPUs: 2, options: STRICT },
      defaultSet: S(0, 1),
      error: 'some of strictly reserved cpus: "0" are present in defaultCpuSet: "0-1"',
    },
    {
      name: "assigned core 2 is still present in available cpuset",
      c: { topo: topoDualSocketHT },
      assignments: { fakePod: { "0": S(0, 1, 2) } },
      defaultSet: P("2-11"),
      error: 'pod: fakePod, container: 0 cpuset: "0-2" overlaps with default cpuset "2-11"',
    },
    {
      name: "assigned core 2 is still present in available cpuset (strict)",
      c: { topo: topoDualSocketHT, options: STRICT },
      assignments: { fakePod: { "0": S(0, 1, 2) } },
      defaultSet: P("2-11"),
      error: 'pod: fakePod, container: 0 cpuset: "0-2" overlaps with default cpuset "2-11"',
    },
    {
      name: "core 12 is not present in topology but is in state cpuset",
      c: { topo: topoDualSocketHT },
      assignments: { fakePod: { "0": S(0, 1, 2), "1": S(3, 4) } },
      defaultSet: P("5-12"),
      error: 'current set of available CPUs "0-11" doesn\'t match with CPUs in state "0-12"',
    },
    {
      name: "core 11 is present in topology but is not in state cpuset",
      c: { topo: topoDualSocketHT },
      assignments: { fakePod: { "0": S(0, 1, 2), "1": S(3, 4) } },
      defaultSet: P("5-10"),
      error: 'current set of available CPUs "0-11" doesn\'t match with CPUs in state "0-10"',
    },
    {
      name: "assignments without a shared pool",
      c: { topo: topoDualSocketHT },
      assignments: { fakePod: { "0": P("0-11") } },
      defaultSet: S(),
      error: "default cpuset cannot be empty",
    },
    // With --reserved-cpus.
    {
      name: "empty cpuset, reserved list",
      c: { topo: topoDualSocketHT, numReservedCPUs: 2, reservedCPUs: S(0, 1) },
      defaultSet: S(),
      want: P("0-11"),
    },
    {
      name: "empty cpuset, reserved list, strict",
      c: { topo: topoDualSocketHT, numReservedCPUs: 2, reservedCPUs: S(0, 1), options: STRICT },
      defaultSet: S(),
      want: P("2-11"),
    },
    {
      name: "reserved cores 0 & 1 are not present in available cpuset",
      c: { topo: topoDualSocketHT, numReservedCPUs: 2, reservedCPUs: S(0, 1) },
      defaultSet: P("2-5"),
      error: 'not all reserved cpus: "0-1" are present in defaultCpuSet: "2-5"',
    },
    {
      name: "reserved cores 0 & 1 are present in available cpuset, strict",
      c: { topo: topoDualSocketHT, numReservedCPUs: 2, reservedCPUs: S(0, 1), options: STRICT },
      defaultSet: P("0-5"),
      error: 'some of strictly reserved cpus: "0-1" are present in defaultCpuSet: "0-5"',
    },
  ];
  for (const tc of cases) {
    const p = newPolicy(tc.c);
    const st = memState(tc.assignments ?? {}, tc.defaultSet);
    if (tc.error !== undefined) {
      assert.throws(
        () => p.start(st),
        { name: "InvalidCPUStateError", message: tc.error },
        tc.name,
      );
      // Not started: the policy refuses to work on the refused state.
      assert.throws(() => p.getAvailableCPUs(), /not started/, tc.name);
      continue;
    }
    p.start(st);
    assert.equal(st.getDefaultCPUSet().toString(), tc.want!.toString(), tc.name);
  }
  assert.ok(new InvalidCPUStateError("x") instanceof Error);
});

Deno.test("StaticPolicy reserves by topology or takes the given list, and checks the count", () => {
  // Low-numbered cores first: 2 of topoSingleSocketHT are core 0's threads {0,4}.
  const p = newPolicy({ topo: topoSingleSocketHT, numReservedCPUs: 2 });
  assert.equal(p.reservedCPUs.toString(), "0,4");
  assert.equal(p.getAllocatableCPUs().toString(), "1-3,5-7");
  // Reserved CPUs that are not whole cores reserve their siblings for full-pcpus-only.
  const q = newPolicy({ topo: topoDualSocketHT, numReservedCPUs: 2, reservedCPUs: S(1, 6) });
  assert.equal(q.reservedPhysicalCPUs.toString(), "0-1,6-7");
  // upstream "inconsistency between numReservedCPUs and reserved"
  assert.throws(
    () => newPolicy({ topo: topoDualSocketHT, numReservedCPUs: 1, reservedCPUs: S(0, 1) }),
    {
      name: "StaticPolicyError",
      message:
        "[cpumanager] unable to reserve the required amount of CPUs (size of 0-1 did not equal 1)",
    },
  );
  assert.throws(() => newPolicy({ topo: topoSingleSocketHT, numReservedCPUs: 9 }), {
    message:
      "[cpumanager] unable to reserve the required amount of CPUs (size of  did not equal 9)",
  });
  assert.throws(
    () => newPolicy({ topo: topoSingleSocketHT, numReservedCPUs: 1, reservedCPUs: S(42) }),
    {
      message: "[cpumanager] unable to build the reserved physical CPUs from the reserved set: " +
        "unknown CPU ID: 42",
    },
  );
  assert.ok(new StaticPolicyError("x") instanceof Error);
  // Options are parsed and checked against the topology manager's policy.
  assert.throws(
    () =>
      newPolicy({
        topo: topoDualSocketMultiNumaPerSocketHT,
        options: { "align-by-socket": "true" },
      }, {
        topologyManagerPolicy: "single-numa-node",
      }),
    /Topolgy manager single-numa-node policy is incompatible/,
  );
  assert.throws(
    () =>
      newPolicy({ topo: topoSingleSocketHT, options: { "align-by-socket": "true" } }, {
        gates: {},
      }),
    /Alpha-level Options not enabled/,
  );
});

interface AddCase extends PolicyCase {
  name: string;
  assignments: Assignments;
  defaultSet: CPUSet;
  pod: V1Pod;
  error?: Error;
  want?: CPUSet;
}

function runAdd(tc: AddCase) {
  const { p, st } = started(tc, tc.assignments, tc.defaultSet);
  const pod = tc.pod;
  const container = pod.spec!.containers[0]!;
  const uid = pod.metadata!.uid!;
  let err: unknown;
  try {
    p.allocate(pod, container);
  } catch (e) {
    err = e;
  }
  if (tc.error === undefined) assert.equal(err, undefined, `${tc.name}: ${err}`);
  else {
    assert.ok(err instanceof Error, tc.name);
    assert.equal(err.constructor, tc.error.constructor, tc.name);
    assert.equal(err.message, tc.error.message, tc.name);
  }
  const got = st.getCPUSet(uid, container.name);
  if (tc.want === undefined) {
    assert.equal(got, undefined, tc.name);
    return;
  }
  assert.equal(got?.toString(), tc.want.toString(), tc.name);
  assert.ok(got.intersection(st.getDefaultCPUSet()).isEmpty(), tc.name);
}

const QUAD_ALL = topoQuadSocketFourWayHT.cpuDetails.cpus();
const QUAD_SOCK0 = topoQuadSocketFourWayHT.cpuDetails.cpusInSockets(0);
const QUAD_SOCK1 = topoQuadSocketFourWayHT.cpuDetails.cpusInSockets(1);

// upstream TestStaticPolicyAdd: optionsInsensitiveTestCases, run without options and with
// full-pcpus-only.
const OPTIONS_INSENSITIVE: AddCase[] = [
  {
    name: "GuPodMultipleCores, SingleSocketHT, ExpectAllocOneCore",
    topo: topoSingleSocketHT,
    numReservedCPUs: 1,
    assignments: { fakePod: { fakeContainer100: S(2, 3, 6, 7) } },
    defaultSet: S(0, 1, 4, 5),
    pod: makePod("fakePod", "fakeContainer3", "2000m", "2000m"),
    want: S(1, 5),
  },
  {
    name: "GuPodMultipleCores, DualSocketHT, ExpectAllocOneSocket",
    topo: topoDualSocketHT,
    numReservedCPUs: 1,
    assignments: { fakePod: { fakeContainer100: S(2) } },
    defaultSet: S(0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11),
    pod: makePod("fakePod", "fakeContainer3", "6000m", "6000m"),
    want: S(1, 3, 5, 7, 9, 11),
  },
  {
    name: "GuPodMultipleCores, DualSocketHT, ExpectAllocThreeCores",
    topo: topoDualSocketHT,
    numReservedCPUs: 1,
    assignments: { fakePod: { fakeContainer100: S(1, 5) } },
    defaultSet: S(0, 2, 3, 4, 6, 7, 8, 9, 10, 11),
    pod: makePod("fakePod", "fakeContainer3", "6000m", "6000m"),
    want: S(2, 3, 4, 8, 9, 10),
  },
  {
    name: "GuPodMultipleCores, DualSocketNoHT, ExpectAllocOneSocket",
    topo: topoDualSocketNoHT,
    numReservedCPUs: 1,
    assignments: { fakePod: { fakeContainer100: S() } },
    defaultSet: S(0, 1, 3, 4, 5, 6, 7),
    pod: makePod("fakePod", "fakeContainer1", "4000m", "4000m"),
    want: S(4, 5, 6, 7),
  },
  {
    name: "GuPodMultipleCores, DualSocketNoHT, ExpectAllocFourCores",
    topo: topoDualSocketNoHT,
    numReservedCPUs: 1,
    assignments: { fakePod: { fakeContainer100: S(4, 5) } },
    defaultSet: S(0, 1, 3, 6, 7),
    pod: makePod("fakePod", "fakeContainer1", "4000m", "4000m"),
    want: S(1, 3, 6, 7),
  },
  {
    name: "GuPodMultipleCores, DualSocketHT, ExpectAllocOneSocketOneCore",
    topo: topoDualSocketHT,
    numReservedCPUs: 1,
    assignments: { fakePod: { fakeContainer100: S(2) } },
    defaultSet: S(0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11),
    pod: makePod("fakePod", "fakeContainer3", "8000m", "8000m"),
    want: S(1, 3, 4, 5, 7, 9, 10, 11),
  },
  {
    name: "NonGuPod, SingleSocketHT, NoAlloc",
    topo: topoSingleSocketHT,
    numReservedCPUs: 1,
    assignments: {},
    defaultSet: P("0-7"),
    pod: makePod("fakePod", "fakeContainer1", "1000m", "2000m"),
  },
  {
    name: "GuPodNonIntegerCore, SingleSocketHT, NoAlloc",
    topo: topoSingleSocketHT,
    numReservedCPUs: 1,
    assignments: {},
    defaultSet: P("0-7"),
    pod: makePod("fakePod", "fakeContainer4", "977m", "977m"),
  },
  {
    name: "GuPodMultipleCores, topoQuadSocketFourWayHT, ExpectAllocSock0",
    topo: topoQuadSocketFourWayHT,
    assignments: { fakePod: { fakeContainer100: S(3, 11, 4, 5, 6, 7) } },
    defaultSet: QUAD_ALL.difference(S(3, 11, 4, 5, 6, 7)),
    pod: makePod("fakePod", "fakeContainer5", "72000m", "72000m"),
    want: QUAD_SOCK0,
  },
  {
    name: "GuPodMultipleCores, topoQuadSocketFourWayHT, ExpectAllocAllFullCoresFromThreeSockets",
    topo: topoQuadSocketFourWayHT,
    assignments: {
      fakePod: {
        fakeContainer100: QUAD_ALL.difference(
          S(1, 25, 13, 38, 2, 9, 11, 35, 23, 48, 12, 51, 53, 173, 113, 233, 54, 61),
        ),
      },
    },
    defaultSet: S(1, 25, 13, 38, 2, 9, 11, 35, 23, 48, 12, 51, 53, 173, 113, 233, 54, 61),
    pod: makePod("fakePod", "fakeCcontainer5", "12000m", "12000m"),
    want: S(1, 25, 13, 38, 11, 35, 23, 48, 53, 173, 113, 233),
  },
  {
    name: "GuPodMultipleCores, topoQuadSocketFourWayHT, ExpectAllocAllSock1+FullCore",
    topo: topoQuadSocketFourWayHT,
    assignments: {
      fakePod: {
        fakeContainer100: QUAD_ALL.difference(
          QUAD_SOCK1.union(S(10, 34, 22, 47, 53, 173, 61, 181, 108, 228, 115, 235)),
        ),
      },
    },
    defaultSet: QUAD_SOCK1.union(S(10, 34, 22, 47, 53, 173, 61, 181, 108, 228, 115, 235)),
    pod: makePod("fakePod", "fakeContainer5", "76000m", "76000m"),
    want: QUAD_SOCK1.union(S(10, 34, 22, 47)),
  },
];

Deno.test("StaticPolicy.allocate: upstream's cases that hold with and without full-pcpus-only", () => {
  for (const tc of OPTIONS_INSENSITIVE) {
    for (const options of [undefined, { "full-pcpus-only": "true" }]) {
      runAdd({ ...tc, options, name: `${JSON.stringify(options)} ${tc.name}` });
    }
  }
});

Deno.test("StaticPolicy.allocate: upstream's cases for the default options", () => {
  const notEnough = (r: number, a: number) =>
    new CPUAssignmentError(
      `not enough cpus available to satisfy request: requested=${r}, available=${a}`,
    );
  const cases: AddCase[] = [
    {
      name: "GuPodSingleCore, SingleSocketHT, ExpectAllocOneCPU",
      topo: topoSingleSocketHT,
      numReservedCPUs: 1,
      assignments: {},
      defaultSet: P("0-7"),
      pod: makePod("fakePod", "fakeContainer2", "1000m", "1000m"),
      want: S(4), // the sibling of the partly reserved core
    },
    {
      name: "GuPodMultipleCores, topoQuadSocketFourWayHT, ExpectAllocCPUs",
      topo: topoQuadSocketFourWayHT,
      assignments: {
        fakePod: { fakeContainer100: QUAD_ALL.difference(S(10, 11, 53, 37, 55, 67, 52)) },
      },
      defaultSet: S(10, 11, 53, 67, 52),
      pod: makePod("fakePod", "fakeContainer5", "5000m", "5000m"),
      want: S(10, 11, 53, 67, 52),
    },
    {
      name: "GuPodSingleCore, SingleSocketHT, ExpectError",
      topo: topoSingleSocketHT,
      numReservedCPUs: 1,
      assignments: {},
      defaultSet: P("0-7"),
      pod: makePod("fakePod", "fakeContainer2", "8000m", "8000m"),
      error: notEnough(8, 7),
    },
    {
      name: "GuPodMultipleCores, SingleSocketHT, ExpectSameAllocation",
      topo: topoSingleSocketHT,
      numReservedCPUs: 1,
      assignments: { fakePod: { fakeContainer3: S(2, 3, 6, 7) } },
      defaultSet: S(0, 1, 4, 5),
      pod: makePod("fakePod", "fakeContainer3", "4000m", "4000m"),
      want: S(2, 3, 6, 7),
    },
    {
      name: "GuPodMultipleCores, DualSocketHT, NoAllocExpectError",
      topo: topoDualSocketHT,
      numReservedCPUs: 1,
      assignments: { fakePod: { fakeContainer100: S(1, 2, 3) } },
      defaultSet: S(0, 4, 5, 6, 7, 8, 9, 10, 11),
      pod: makePod("fakePod", "fakeContainer5", "10000m", "10000m"),
      error: notEnough(10, 8),
    },
    {
      name: "GuPodMultipleCores, SingleSocketHT, NoAllocExpectError",
      topo: topoSingleSocketHT,
      numReservedCPUs: 1,
      assignments: { fakePod: { fakeContainer100: S(1, 2, 3, 4, 5, 6) } },
      defaultSet: S(0, 7),
      pod: makePod("fakePod", "fakeContainer5", "2000m", "2000m"),
      error: notEnough(2, 1),
    },
    {
      name: "GuPodMultipleCores, topoQuadSocketFourWayHT, NoAlloc",
      topo: topoQuadSocketFourWayHT,
      assignments: {
        fakePod: { fakeContainer100: QUAD_ALL.difference(S(10, 11, 53, 37, 55, 67, 52)) },
      },
      defaultSet: S(10, 11, 53, 37, 55, 67, 52),
      pod: makePod("fakePod", "fakeContainer5", "76000m", "76000m"),
      error: notEnough(76, 7),
    },
    // upstream TestStaticPolicyAddWithResvList
    {
      name: "reserved list, GuPodSingleCore, SingleSocketHT, ExpectError",
      topo: topoSingleSocketHT,
      numReservedCPUs: 1,
      reservedCPUs: S(0),
      assignments: {},
      defaultSet: P("0-7"),
      pod: makePod("fakePod", "fakeContainer2", "8000m", "8000m"),
      error: notEnough(8, 7),
    },
    {
      name: "reserved list, GuPodSingleCore, SingleSocketHT, ExpectAllocOneCPU",
      topo: topoSingleSocketHT,
      numReservedCPUs: 2,
      reservedCPUs: S(0, 1),
      assignments: {},
      defaultSet: P("0-7"),
      pod: makePod("fakePod", "fakeContainer2", "1000m", "1000m"),
      want: S(4),
    },
    {
      name: "reserved list, GuPodMultipleCores, SingleSocketHT, ExpectAllocOneCore",
      topo: topoSingleSocketHT,
      numReservedCPUs: 2,
      reservedCPUs: S(0, 1),
      assignments: { fakePod: { fakeContainer100: S(2, 3, 6, 7) } },
      defaultSet: S(0, 1, 4, 5),
      pod: makePod("fakePod", "fakeContainer3", "2000m", "2000m"),
      want: S(4, 5),
    },
  ];
  for (const tc of cases) runAdd(tc);
});

Deno.test("StaticPolicy.allocate: full-pcpus-only refuses partial cores with SMTAlignmentError", () => {
  const FULL = { "full-pcpus-only": "true" };
  const cases: AddCase[] = [
    {
      name: "GuPodSingleCore, SingleSocketHT, ExpectAllocOneCPU",
      topo: topoSingleSocketHT,
      options: FULL,
      numReservedCPUs: 1,
      assignments: {},
      defaultSet: P("0-7"),
      pod: makePod("fakePod", "fakeContainer2", "1000m", "1000m"),
      error: new SMTAlignmentError({ requestedCPUs: 1, cpusPerCore: 2 }),
    },
    {
      // SMT level 4.
      name: "GuPodMultipleCores, topoQuadSocketFourWayHT, ExpectAllocOneCPUs",
      topo: topoQuadSocketFourWayHT,
      options: FULL,
      numReservedCPUs: 8,
      assignments: {},
      defaultSet: QUAD_ALL,
      pod: makePod("fakePod", "fakeContainer15", "15000m", "15000m"),
      error: new SMTAlignmentError({ requestedCPUs: 15, cpusPerCore: 4 }),
    },
    {
      name: "GuPodManyCores, topoDualSocketHT, ExpectDoNotAllocPartialCPU",
      topo: topoDualSocketHT,
      options: FULL,
      numReservedCPUs: 2,
      reservedCPUs: S(1, 6),
      assignments: {},
      defaultSet: S(0, 2, 3, 4, 5, 7, 8, 9, 10, 11),
      pod: makePod("fakePod", "fakeContainerBug113537_1", "10000m", "10000m"),
      error: new SMTAlignmentError({
        requestedCPUs: 10,
        cpusPerCore: 2,
        availablePhysicalCPUs: 8,
        causedByPhysicalCPUs: true,
      }),
    },
    {
      name: "GuPodManyCores, topoDualSocketHT, AutoReserve, ExpectAllocAllCPUs",
      topo: topoDualSocketHT,
      options: FULL,
      numReservedCPUs: 2,
      assignments: {},
      defaultSet: S(1, 2, 3, 4, 5, 7, 8, 9, 10, 11),
      pod: makePod("fakePod", "fakeContainerBug113537_2", "10000m", "10000m"),
      want: S(1, 2, 3, 4, 5, 7, 8, 9, 10, 11),
    },
    {
      name: "GuPodManyCores, topoDualSocketHT, ExpectAllocAllCPUs",
      topo: topoDualSocketHT,
      options: FULL,
      numReservedCPUs: 2,
      reservedCPUs: S(0, 6),
      assignments: {},
      defaultSet: S(1, 2, 3, 4, 5, 7, 8, 9, 10, 11),
      pod: makePod("fakePod", "fakeContainerBug113537_2", "10000m", "10000m"),
      want: S(1, 2, 3, 4, 5, 7, 8, 9, 10, 11),
    },
  ];
  for (const tc of cases) runAdd(tc);
  // The refusal becomes the pod's admission verdict with its own reason.
  const { p } = started(
    { topo: topoSingleSocketHT, options: FULL, numReservedCPUs: 1 },
    {},
    P("0-7"),
  );
  const pod = makePod("fakePod", "c", "3", "3");
  let err: unknown;
  try {
    p.allocate(pod, pod.spec!.containers[0]!);
  } catch (e) {
    err = e;
  }
  assert.equal(getPodAdmitResult(err).admit, false);
  assert.equal((getPodAdmitResult(err) as { reason: string }).reason, "SMTAlignmentError");
});

Deno.test("StaticPolicy.allocate takes the hint's NUMA nodes first, or their sockets with align-by-socket", () => {
  // upstream alignBySocketOptionTestCases
  const hint = { numaNodeAffinity: mask(0, 2), preferred: true };
  for (
    const [value, want] of [["true", S(2, 11)], ["false", S(2, 21)]] as const
  ) {
    runAdd({
      name: `align-by-socket ${value}`,
      topo: topoDualSocketMultiNumaPerSocketHT,
      options: { "align-by-socket": value },
      numReservedCPUs: 1,
      assignments: {},
      defaultSet: S(2, 11, 21, 22),
      pod: makePod("fakePod", "fakeContainer2", "2000m", "2000m"),
      hint,
      want,
    });
  }
});

// upstream TestTopologyAwareAllocateCPUs
Deno.test("StaticPolicy.allocateCPUs fills from the NUMA affinity first", () => {
  const cases: [string, BitMask | undefined, number, CPUSet][] = [
    ["Request 2 CPUs, No BitMask", undefined, 2, S(0, 6)],
    ["Request 2 CPUs, BitMask on Socket 0", mask(0), 2, S(0, 6)],
    ["Request 2 CPUs, BitMask on Socket 1", mask(1), 2, S(1, 7)],
    ["Request 8 CPUs, BitMask on Socket 0", mask(0), 8, S(0, 6, 2, 8, 4, 10, 1, 7)],
    ["Request 8 CPUs, BitMask on Socket 1", mask(1), 8, S(1, 7, 3, 9, 5, 11, 0, 6)],
  ];
  for (const [name, affinity, n, want] of cases) {
    const p = newPolicy({ topo: topoDualSocketHT });
    const st = memState({}, P("0-11"));
    p.start(st);
    const alloc = p.allocateCPUs(n, affinity);
    assert.equal(alloc.cpus.toString(), want.toString(), name);
    assert.equal(st.getDefaultCPUSet().toString(), P("0-11").difference(want).toString(), name);
  }
});

Deno.test("StaticPolicy.allocate spreads over NUMA nodes with distribute-cpus-across-numa", () => {
  // 6 of 7 free CPUs on two 4-CPU nodes: packed fills node 1 and takes 2 of node 0; distributed
  // takes 3 of each.
  const base = {
    topo: topoDualSocketNoHT,
    numReservedCPUs: 1,
    assignments: {},
    defaultSet: P("0-7"),
    pod: makePod("fakePod", "c", "6", "6"),
  };
  runAdd({ ...base, name: "packed", want: S(1, 2, 4, 5, 6, 7) });
  runAdd({
    ...base,
    name: "distributed",
    options: { "distribute-cpus-across-numa": "true" },
    want: S(1, 2, 3, 4, 5, 6),
  });
  // distribute-cpus-across-cores (alpha) takes one thread per core first.
  runAdd({
    name: "spread over cores",
    topo: topoSingleSocketHT,
    numReservedCPUs: 1,
    options: { "distribute-cpus-across-cores": "true" },
    assignments: {},
    defaultSet: P("0-7"),
    pod: makePod("fakePod", "c", "2", "2"),
    want: S(1, 2),
  });
});

Deno.test("StaticPolicy with strict-cpu-reservation keeps the reserved CPUs out of the shared pool", () => {
  const c: PolicyCase = {
    topo: topoDualSocketHT,
    numReservedCPUs: 2,
    options: { "strict-cpu-reservation": "true" },
  };
  const p = newPolicy(c);
  const st = new MemoryState();
  p.start(st);
  assert.equal(st.getDefaultCPUSet().toString(), "1-5,7-11");
  // Socket 1 (odd CPUs) whole, then core 2 = {2,8} of socket 0; never the reserved {0,6}.
  const pod = makePod("pod", "c", "8", "8");
  p.allocate(pod, pod.spec!.containers[0]!);
  assert.equal(st.getCPUSet("pod", "c")?.toString(), "1-3,5,7-9,11");
  assert.equal(st.getDefaultCPUSet().toString(), "4,10");
  // The state is still valid for a restart, reserved CPUs in no set.
  newPolicy(c).start(st);
  // As upstream, a state whose shared pool is empty cannot be restarted on.
  const rest = makePod("pod2", "c", "2", "2");
  p.allocate(rest, rest.spec!.containers[0]!);
  assert.throws(() => newPolicy(c).start(st), { message: "default cpuset cannot be empty" });
});

// upstream TestStaticPolicyReuseCPUs and TestStaticPolicyDoNotReuseCPUs
Deno.test("StaticPolicy hands an init container's CPUs on, but not a sidecar's", () => {
  {
    const { p, st } = started({ topo: topoSingleSocketHT }, {}, P("0-7"));
    const pod = multiPod([["4000m", "4000m"]], [["2000m", "2000m"]]);
    for (const c of [...pod.spec!.initContainers!, ...pod.spec!.containers]) p.allocate(pod, c);
    assert.equal(st.getCPUSet("podUID", "initContainer-0")?.toString(), "0-1,4-5");
    assert.equal(st.getCPUSet("podUID", "appContainer-0")?.toString(), "0,4");
    assert.equal(st.getDefaultCPUSet().toString(), "2-3,6-7");
    // Removing the init container releases only what the app container does not hold.
    p.removeContainer("podUID", "initContainer-0");
    assert.equal(st.getDefaultCPUSet().toString(), "1-3,5-7");
    assert.equal(st.getCPUSet("podUID", "initContainer-0"), undefined);
  }
  {
    const { p, st } = started({ topo: topoSingleSocketHT }, {}, P("0-7"));
    const pod = multiPod([["4000m", "4000m", "Always"]], [["2000m", "2000m"]]);
    for (const c of [...pod.spec!.initContainers!, ...pod.spec!.containers]) p.allocate(pod, c);
    assert.equal(st.getCPUSet("podUID", "appContainer-0")?.toString(), "2,6");
    assert.equal(st.getDefaultCPUSet().toString(), "3,7");
  }
  {
    // Another pod's allocation forgets the first pod's reusable CPUs.
    const { p, st } = started({ topo: topoSingleSocketHT }, {}, P("0-7"));
    const a = multiPod([["2", "2"]], [["2", "2"]], "a");
    const b = makePod("b", "c", "2", "2");
    p.allocate(a, a.spec!.initContainers![0]!);
    p.allocate(b, b.spec!.containers[0]!);
    p.allocate(a, a.spec!.containers[0]!);
    assert.equal(st.getCPUSet("a", "initContainer-0")?.toString(), "0,4");
    assert.equal(st.getCPUSet("b", "c")?.toString(), "1,5");
    assert.equal(st.getCPUSet("a", "appContainer-0")?.toString(), "2,6");
  }
});

// upstream TestStaticPolicyRemove
Deno.test("StaticPolicy.removeContainer returns the container's CPUs to the shared pool", () => {
  const cases: [string, string, Assignments, CPUSet, CPUSet][] = [
    [
      "DeAllocOneContainer",
      "fakeContainer1",
      { fakePod: { fakeContainer1: S(1, 2, 3) } },
      P("4-7"),
      P("1-7"),
    ],
    [
      "DeAllocOneContainer, BeginEmpty",
      "fakeContainer1",
      { fakePod: { fakeContainer1: S(1, 2, 3), fakeContainer2: S(4, 5, 6, 7) } },
      S(),
      S(1, 2, 3),
    ],
    [
      "DeAllocTwoContainer",
      "fakeContainer1",
      { fakePod: { fakeContainer1: S(1, 3, 5), fakeContainer2: S(2, 4) } },
      S(6, 7),
      S(1, 3, 5, 6, 7),
    ],
    [
      "NoDeAlloc",
      "fakeContainer2",
      { fakePod: { fakeContainer1: S(1, 3, 5) } },
      S(2, 4, 6, 7),
      S(2, 4, 6, 7),
    ],
  ];
  for (const [name, container, assignments, defaultSet, want] of cases) {
    const { p, st } = started({ topo: topoSingleSocketHT }, assignments, defaultSet);
    p.removeContainer("fakePod", container);
    assert.equal(st.getDefaultCPUSet().toString(), want.toString(), name);
    assert.equal(st.getCPUSet("fakePod", container), undefined, name);
  }
});

/** upstream returnMachineInfo(), through discoverCPUTopology: node 0 = cores {0,6} {1,7} {2,8}. */
const HINTS_TOPO = discoverCPUTopology({
  numCPUs: 12,
  numSockets: 2,
  warnings: [],
  nodes: [0, 1].map((id) => ({
    id,
    cpus: new CPUSet(),
    memoryBytes: 0,
    hugePages: new Map(),
    cores: [0, 1, 2].map((k) => ({
      id: k,
      socketID: id,
      threads: [3 * id + k, 3 * id + k + 6],
      uncoreCacheID: 1,
    })),
  })),
});

const sortHints = (hs: readonly TopologyHint[]) =>
  [...hs].sort((a, b) => (hintLessThan(a, b) ? -1 : hintLessThan(b, a) ? 1 : 0))
    .map((h) => `${h.numaNodeAffinity?.toString()}:${h.preferred}`);

// upstream returnTestCases() of topology_hints_test.go (with PodLevelResourceManagers off)
Deno.test("StaticPolicy.getTopologyHints and getPodTopologyHints: upstream's cases", () => {
  const first = mask(0);
  const second = mask(1);
  const cross = mask(0, 1);
  const pod = (n: string) => makePod("fakePod", "fakeContainer", n, n);
  const h = (m: BitMask, preferred: boolean): TopologyHint => ({ numaNodeAffinity: m, preferred });
  const free = P("2-11");
  const cases: [string, V1Pod, Assignments, CPUSet, TopologyHint[] | undefined][] = [
    ["Request 2 CPUs, 4 available on NUMA 0, 6 available on NUMA 1", pod("2"), {}, free, [
      h(first, true),
      h(second, true),
      h(cross, false),
    ]],
    ["Request 5 CPUs, 4 available on NUMA 0, 6 available on NUMA 1", pod("5"), {}, free, [
      h(second, true),
      h(cross, false),
    ]],
    ["Request 7 CPUs, 4 available on NUMA 0, 6 available on NUMA 1", pod("7"), {}, free, [
      h(cross, true),
    ]],
    ["Request 11 CPUs, 4 available on NUMA 0, 6 available on NUMA 1", pod("11"), {}, free, []],
    ["Request 2 CPUs, 1 available on NUMA 0, 1 available on NUMA 1", pod("2"), {}, S(0, 3), [
      h(cross, false),
    ]],
    ["Request more CPUs than available", pod("5"), {}, S(0, 1, 2, 3), []],
    [
      "Regenerate Single-Node NUMA Hints if already allocated 1/2",
      pod("2"),
      { fakePod: { fakeContainer: S(0, 6) } },
      S(),
      [h(first, true), h(cross, false)],
    ],
    [
      "Regenerate Single-Node NUMA Hints if already allocated 2/2",
      pod("2"),
      { fakePod: { fakeContainer: S(3, 9) } },
      S(),
      [h(second, true), h(cross, false)],
    ],
    [
      "Regenerate Cross-NUMA Hints if already allocated",
      pod("11"),
      { fakePod: { fakeContainer: P("0-10") } },
      S(),
      [h(cross, true)],
    ],
    [
      "Requested less than already allocated",
      pod("2"),
      { fakePod: { fakeContainer: S(0, 6, 3, 9) } },
      S(),
      [],
    ],
    [
      "Requested more than already allocated",
      pod("11"),
      { fakePod: { fakeContainer: S(0, 6, 3, 9) } },
      S(),
      [],
    ],
    [
      "Pod has pod level resources but PodLevelResourceManagers is disabled, no hint generation",
      {
        ...pod("2"),
        spec: {
          ...pod("2").spec!,
          resources: { requests: { cpu: "3", memory: "1G" }, limits: { cpu: "3", memory: "1G" } },
        },
      },
      {},
      S(0, 1, 2, 3),
      undefined,
    ],
    [
      "Not Guaranteed: no preference",
      makePod("fakePod", "fakeContainer", "1", "2"),
      {},
      free,
      undefined,
    ],
  ];
  for (const [name, p0, assignments, defaultSet, want] of cases) {
    const { p } = started({ topo: HINTS_TOPO }, assignments, defaultSet);
    const container = p0.spec!.containers[0]!;
    for (
      const [kind, hints] of [["container", p.getTopologyHints(p0, container)], [
        "pod",
        p.getPodTopologyHints(p0),
      ]] as const
    ) {
      if (want === undefined) {
        assert.equal(hints, undefined, `${kind} ${name}`);
        continue;
      }
      assert.deepEqual([...hints!.keys()], ["cpu"], `${kind} ${name}`);
      assert.deepEqual(sortHints(hints!.get("cpu")!), sortHints(want), `${kind} ${name}`);
    }
  }
});

// upstream TestGetPodTopologyHintsWithPolicyOptions
Deno.test("StaticPolicy.getPodTopologyHints prefers socket-aligned masks with align-by-socket", () => {
  const m = mask;
  const all = [m(0), m(0, 1), m(0, 2), m(0, 3), m(0, 1, 2), m(0, 1, 3), m(0, 2, 3), m(0, 1, 2, 3)];
  const hints = (value: string, request: string, free: CPUSet) => {
    const { p } = started(
      {
        topo: topoDualSocketMultiNumaPerSocketHT,
        options: { "align-by-socket": value },
      },
      {},
      free,
    );
    const pod = makePod("fakePod", "fakeContainer", request, request);
    return sortHints(p.getPodTopologyHints(pod)!.get("cpu")!);
  };
  const want = (preferred: BitMask[], masks = all) =>
    sortHints(
      masks.map((mk) => ({
        numaNodeAffinity: mk,
        preferred: preferred.some((p) => p.isEqual(mk)),
      })),
    );
  assert.deepEqual(hints("false", "2", S(2, 3, 11)), want([m(0)]));
  assert.deepEqual(hints("true", "2", S(2, 3, 11)), want([m(0), m(0, 1)]));
  assert.deepEqual(
    hints("true", "41", P("0-28,40-57")),
    want([m(0, 1, 2), m(0, 1, 2, 3)], [m(0, 1, 2), m(0, 1, 2, 3)]),
  );
});

Deno.test("StaticPolicy.getPodTopologyHints counts reusable and already assigned CPUs", () => {
  const p = newPolicy({ topo: HINTS_TOPO });
  const st = new MemoryState();
  p.start(st);
  // An init container of 2 on node 0 ran; the app container of 4 may reuse its CPUs, so only
  // masks holding node 0 qualify, and node 0 alone has 1 more free CPU than the 2 needed.
  const pod = multiPod([["2", "2"]], [["4", "4"]]);
  p.allocate(pod, pod.spec!.initContainers![0]!);
  assert.equal(st.getCPUSet("podUID", "initContainer-0")?.toString(), "0,6");
  assert.deepEqual(sortHints(p.getTopologyHints(pod, pod.spec!.containers[0]!)!.get("cpu")!), [
    "01:true",
    "11:false",
  ]);
  // Pod scope: 4 needed, 2 assigned plus 4 free on node 0.
  assert.deepEqual(sortHints(p.getPodTopologyHints(pod)!.get("cpu")!), ["01:true", "11:false"]);
  p.allocate(pod, pod.spec!.containers[0]!);
  assert.equal(st.getCPUSet("podUID", "appContainer-0")?.toString(), "0-1,6-7");
});

// upstream TestPodGuaranteedCPUs
Deno.test("StaticPolicy.podGuaranteedCPUs takes the peak of init, sidecar and app containers", () => {
  const p = newPolicy({ topo: topoSingleSocketHT });
  const o = (n: string, restart?: string): ContainerOpts => [n, n, restart];
  const A = "Always";
  const cases: [string, V1Pod, number][] = [
    ["not Guaranteed 1", multiPod([o("0")], [o("0")]), 0],
    ["not Guaranteed 2", multiPod([o("0")], [o("2")]), 0],
    ["not Guaranteed 3", multiPod([o("2")], [o("0")]), 0],
    ["Guaranteed Pod requests 2 CPUs", multiPod([o("2")], [o("2")]), 2],
    ["Guaranteed Pod requests 5 CPUs", multiPod([o("5")], [o("5")]), 5],
    ["app bigger than init", multiPod([o("2")], [o("5")]), 5],
    ["init bigger than app", multiPod([o("5")], [o("2")]), 5],
    ["sum of multiple containers", multiPod([o("2"), o("4")], [o("2"), o("4")]), 6],
    ["restartable init container + regular container", multiPod([o("1", A)], [o("1")]), 2],
    [
      "multiple restartable init containers",
      multiPod([o("5"), o("1", A), o("2", A), o("3", A)], [o("1")]),
      7,
    ],
    [
      "multiple restartable and regular init containers",
      multiPod([o("5"), o("1", A), o("2", A), o("5"), o("3", A)], [o("1")]),
      8,
    ],
    [
      "restartable init, regular init and regular container",
      multiPod([o("10", A), o("200")], [o("100")]),
      210,
    ],
  ];
  for (const [name, pod, want] of cases) assert.equal(p.podGuaranteedCPUs(pod), want, name);
});

Deno.test("StaticPolicy skips pods with pod-level resources, as upstream with PodLevelResourceManagers off", () => {
  const { p, st } = started({ topo: topoSingleSocketHT }, {}, P("0-7"));
  const pod = makePod("pod", "c", "2", "2");
  pod.spec!.resources = {
    requests: { cpu: "3", memory: "1G" },
    limits: { cpu: "3", memory: "1G" },
  };
  p.allocate(pod, pod.spec!.containers[0]!);
  assert.equal(st.getCPUSet("pod", "c"), undefined);
  assert.equal(st.getDefaultCPUSet().toString(), "0-7");
});

Deno.test("StaticPolicy keeps the CPU manager metrics", () => {
  const metrics = new KubeletMetrics({ process: false });
  const p = newPolicy({ topo: topoSingleSocketHT, numReservedCPUs: 1 }, { metrics });
  const st = new MemoryState();
  p.start(st);
  assert.equal(metrics.cpuManagerSharedPoolSize.get(), 7000);
  assert.equal(metrics.cpuManagerExclusiveCpus.get(), 0);
  const pod = makePod("pod", "c", "2", "2");
  p.allocate(pod, pod.spec!.containers[0]!);
  const big = makePod("pod2", "c", "8", "8");
  assert.throws(() => p.allocate(big, big.spec!.containers[0]!), CPUAssignmentError);
  // Not pinned: neither a request nor an error.
  const shared = makePod("pod3", "c", "500m", "500m");
  p.allocate(shared, shared.spec!.containers[0]!);
  assert.equal(metrics.cpuManagerPinningRequests.get(), 2);
  assert.equal(metrics.cpuManagerPinningErrors.get(), 1);
  assert.equal(metrics.cpuManagerSharedPoolSize.get(), 5000);
  assert.equal(metrics.cpuManagerExclusiveCpus.get(), 2);
  p.removeContainer("pod", "c");
  assert.equal(metrics.cpuManagerSharedPoolSize.get(), 7000);
  assert.equal(metrics.cpuManagerExclusiveCpus.get(), 0);
});

// upstream policy_none_test.go
Deno.test("NonePolicy pins nothing and takes no options", () => {
  const p: CPUPolicy = new NonePolicy({ logger: quiet });
  assert.equal(p.name, "none");
  const st = memState({}, P("0-7"));
  p.start(st);
  const pod = makePod("fakePod", "fakeContainer1", "1000m", "1000m");
  p.allocate(pod, pod.spec!.containers[0]!);
  assert.equal(st.getCPUSet("fakePod", "fakeContainer1"), undefined);
  assert.equal(st.getDefaultCPUSet().toString(), "0-7");
  p.removeContainer("fakePod", "fakeContainer1");
  assert.equal(p.getTopologyHints(pod, pod.spec!.containers[0]!), undefined);
  assert.equal(p.getPodTopologyHints(pod), undefined);
  assert.ok(p.getAllocatableCPUs().isEmpty());
  assert.throws(
    () =>
      new NonePolicy({ logger: quiet, cpuPolicyOptions: { "full-pcpus-only": "true", a: "b" } }),
    {
      name: "CPUPolicyOptionsError",
      message: "None policy: received unsupported options=map[a:b full-pcpus-only:true]",
    },
  );
});
