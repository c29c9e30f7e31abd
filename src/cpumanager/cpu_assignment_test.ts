import assert from "node:assert/strict";
import { CPUSet } from "./cpuset.ts";
import {
  CPUAccumulator,
  CPUAssignmentError,
  type CPUSortingStrategy,
  takeByTopologyNUMADistributed,
  takeByTopologyNUMAPacked,
} from "./cpu_assignment.ts";
import { type CPUTopology, discoverCPUTopology } from "./topology.ts";
import { readMachineTopology } from "./machine_topology.ts";
import {
  fakeTopoMultiSocketDualSocketPerNumaHT as fakeMultiSocketPerNuma,
  MACHINE_DUAL_SOCKET_NPS2,
  topoDualSocketHT as dualHT,
  topoDualSocketMultiNumaPerSocketHT as multiNuma,
  topoDualSocketMultiNumaPerSocketHTLarge as multiNumaLarge,
  topoDualSocketNoHT as dualNoHT,
  topoQuadSocketFourWayHT as quad,
  topoSingleSocketHT as singleHT,
  topoTripleSocketHT as tripleHT,
  topoUncoreDualSocketNoSMT as uncoreDualNoSMT,
  topoUncoreSingleSocketMultiNuma as uncoreMultiNuma,
  topoUncoreSingleSocketNoSMT as uncoreSingleNoSMT,
  topoUncoreSingleSocketSMT as uncoreSingleSMT,
  writeNumaMachine,
} from "../testing/numa_fixtures.ts";

const P = CPUSet.parse;
const all = (n: number) => P(`0-${n - 1}`);

function acc(topo: CPUTopology, available: CPUSet, numCPUs = 0) {
  return new CPUAccumulator(topo, available, numCPUs, "packed");
}

// upstream TestCPUAccumulatorFreeSockets
Deno.test("CPUAccumulator.freeSockets lists the sockets with every CPU free", () => {
  const cases: [string, CPUTopology, CPUSet, number[]][] = [
    ["single socket HT, 1 socket free", singleHT, all(8), [0]],
    ["single socket HT, 0 sockets free", singleHT, P("1-7"), []],
    ["dual socket HT, 2 sockets free", dualHT, all(12), [0, 1]],
    ["dual socket HT, 1 socket free", dualHT, P("0-9,11"), [1]],
    ["dual socket HT, 0 sockets free", dualHT, P("0,2-9,11"), []],
    ["multi numa per socket, 2 sockets free", multiNuma, P("0-79"), [0, 1]],
    ["multi numa per socket, 1 socket free", multiNuma, P("1-79"), [1]],
    ["multi numa per socket, 0 sockets free", multiNuma, P("1-78"), []],
    ["multi socket per numa, 4 sockets free", fakeMultiSocketPerNuma, P("0-79"), [0, 1, 2, 3]],
    ["multi socket per numa, 3 sockets free", fakeMultiSocketPerNuma, P("0-19,21-79"), [0, 1, 3]],
    ["multi socket per numa, 2 sockets free", fakeMultiSocketPerNuma, P("0-59,61-78"), [0, 1]],
    [
      "multi socket per numa, 1 socket free",
      fakeMultiSocketPerNuma,
      P("1-19,21-38,41-60,61-78"),
      [1],
    ],
    [
      "multi socket per numa, 0 sockets free",
      fakeMultiSocketPerNuma,
      P("0-40,42-49,51-68,71-79"),
      [],
    ],
  ];
  for (const [name, topo, available, want] of cases) {
    assert.deepEqual(acc(topo, available).freeSockets().sort((a, b) => a - b), want, name);
  }
});

// upstream TestCPUAccumulatorFreeNUMANodes
Deno.test("CPUAccumulator.freeNUMANodes lists the NUMA nodes with every CPU free, fullest first", () => {
  const cases: [string, CPUTopology, CPUSet, number[]][] = [
    ["single socket HT, 1 NUMA node free", singleHT, all(8), [0]],
    ["single socket HT, 0 NUMA node free", singleHT, P("1-7"), []],
    ["dual socket HT, 2 NUMA node free", dualHT, all(12), [0, 1]],
    ["dual socket HT, 1 NUMA node free", dualHT, P("0-9,11"), [1]],
    ["dual socket HT, 0 NUMA node free", dualHT, P("0,2-9,11"), []],
    ["multi numa per socket, 4 NUMA node free", multiNuma, P("0-79"), [0, 1, 2, 3]],
    ["multi numa per socket, 3 NUMA node free", multiNuma, P("1-79"), [1, 2, 3]],
    ["multi numa per socket, 2 NUMA node free", multiNuma, P("1-9,11-79"), [2, 3]],
    ["multi numa per socket, 1 NUMA node free", multiNuma, P("1-9,11-59,61-79"), [3]],
    ["multi numa per socket, 0 NUMA node free", multiNuma, P("1-9,11-59,61-78"), []],
    ["multi socket per numa, 2 NUMA node free", fakeMultiSocketPerNuma, P("0-79"), [0, 1]],
    ["multi socket per numa, 1 NUMA node free", fakeMultiSocketPerNuma, P("0-9,11-79"), [1]],
    ["multi socket per numa, 0 NUMA node free", fakeMultiSocketPerNuma, P("0-9,11-59,61-79"), []],
  ];
  for (const [name, topo, available, want] of cases) {
    assert.deepEqual(acc(topo, available).freeNUMANodes(), want, name);
  }
});

// upstream TestCPUAccumulatorFreeSocketsAndNUMANodes
Deno.test("CPUAccumulator free sockets and NUMA nodes agree on a multi-NUMA socket", () => {
  const cases: [CPUSet, number[], number[]][] = [
    [P("0-79"), [0, 1], [0, 1, 2, 3]],
    [P("1-79"), [1], [1, 2, 3]],
    [P("1-9,11-79"), [1], [2, 3]],
    [P("1-59,61-79"), [], [1, 3]],
  ];
  for (const [available, sockets, numas] of cases) {
    const a = acc(multiNuma, available);
    assert.deepEqual(a.freeNUMANodes(), numas, available.toString());
    assert.deepEqual(a.freeSockets(), sockets, available.toString());
  }
});

// upstream TestCPUAccumulatorFreeCores
Deno.test("CPUAccumulator.freeCores lists whole free cores in taking order", () => {
  const cases: [string, CPUTopology, CPUSet, number[]][] = [
    ["single socket HT, 4 cores free", singleHT, all(8), [0, 1, 2, 3]],
    ["single socket HT, 3 cores free", singleHT, CPUSet.of(0, 1, 2, 4, 5, 6), [0, 1, 2]],
    ["single socket HT, 3 cores free (1 partially consumed)", singleHT, P("0-6"), [0, 1, 2]],
    ["single socket HT, 0 cores free", singleHT, CPUSet.of(), []],
    ["single socket HT, 0 cores free (4 partially consumed)", singleHT, P("0-3"), []],
    ["dual socket HT, 6 cores free", dualHT, all(12), [0, 2, 4, 1, 3, 5]],
    ["dual socket HT, 5 cores free (1 consumed from socket 0)", dualHT, P("1-5,7-11"), [
      2,
      4,
      1,
      3,
      5,
    ]],
    ["dual socket HT, 4 cores free (1 consumed from each socket)", dualHT, P("2-5,8-11"), [
      2,
      4,
      3,
      5,
    ]],
  ];
  for (const [name, topo, available, want] of cases) {
    assert.deepEqual(acc(topo, available).freeCores(), want, name);
  }
});

// upstream TestCPUAccumulatorFreeCPUs
Deno.test("CPUAccumulator.freeCPUs orders single threads fullest place first", () => {
  const cases: [string, CPUTopology, CPUSet, number[]][] = [
    ["single socket HT, 8 cpus free", singleHT, all(8), [0, 4, 1, 5, 2, 6, 3, 7]],
    ["single socket HT, 5 cpus free", singleHT, P("3-7"), [4, 5, 6, 3, 7]],
    ["dual socket HT, 12 cpus free", dualHT, all(12), [0, 6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11]],
    ["dual socket HT, 11 cpus free", dualHT, P("1-11"), [6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11]],
    ["dual socket HT, 10 cpus free", dualHT, P("1-5,7-11"), [2, 8, 4, 10, 1, 7, 3, 9, 5, 11]],
    ["triple socket HT, 12 cpus free", tripleHT, P("0-3,6-13"), [
      12,
      13,
      0,
      1,
      2,
      3,
      6,
      7,
      8,
      9,
      10,
      11,
    ]],
  ];
  for (const [name, topo, available, want] of cases) {
    assert.deepEqual(acc(topo, available).freeCPUs(), want, name);
  }
});

// upstream TestCPUAccumulatorTake
Deno.test("CPUAccumulator.take moves CPUs to the result and counts down", () => {
  const cases: [string, CPUSet, CPUSet[], number, boolean, boolean][] = [
    ["take 0 of 8, require 1", all(8), [CPUSet.of()], 1, false, false],
    ["take 0 of none, require 1", CPUSet.of(), [CPUSet.of()], 1, false, true],
    ["take 1, require 1", all(8), [CPUSet.of(0)], 1, true, false],
    ["take 1, require 2", all(8), [CPUSet.of(0)], 2, false, false],
    ["take 2 of 3, require 4", P("0-2"), [CPUSet.of(0), CPUSet.of(1)], 4, false, true],
    [
      "take all one at a time",
      all(8),
      [0, 1, 2, 3, 4, 5, 6, 7].map((c) => CPUSet.of(c)),
      8,
      true,
      false,
    ],
  ];
  for (const [name, available, takes, numCPUs, satisfied, failed] of cases) {
    const a = acc(singleHT, available, numCPUs);
    let taken = 0;
    for (const cpus of takes) {
      a.take(cpus);
      taken += cpus.size;
    }
    assert.equal(a.isSatisfied(), satisfied, name);
    assert.equal(a.isFailed(), failed, name);
    for (const cpus of takes) {
      assert.equal(cpus.intersection(a.details.cpus()).size, 0, name);
      assert.ok(cpus.isSubsetOf(a.result), name);
    }
    assert.equal(a.numCPUsNeeded, numCPUs - taken, name);
  }
});

type TakeCase = [
  name: string,
  topo: CPUTopology,
  available: CPUSet,
  numCPUs: number,
  want: CPUSet | string,
];

// upstream commonTakeByTopologyTestCases
const common: TakeCase[] = [
  [
    "take more cpus than are available from single socket with HT",
    singleHT,
    CPUSet.of(0, 2, 4, 6),
    5,
    "not enough cpus available to satisfy request: requested=5, available=4",
  ],
  ["take zero cpus from single socket with HT", singleHT, all(8), 0, CPUSet.of()],
  ["take one cpu from single socket with HT", singleHT, all(8), 1, CPUSet.of(0)],
  ["take one cpu, some cpus are taken", singleHT, CPUSet.of(1, 3, 5, 6, 7), 1, CPUSet.of(6)],
  ["take two cpus from single socket with HT", singleHT, all(8), 2, CPUSet.of(0, 4)],
  ["take all cpus from single socket with HT", singleHT, all(8), 8, all(8)],
  ["take two cpus, only one core totally free", singleHT, P("0-3,6"), 2, CPUSet.of(2, 6)],
  ["take a socket of cpus from dual socket with HT", dualHT, all(12), 6, P("0,2,4,6,8,10")],
  ["take a socket from multi-numa-per-socket", multiNuma, P("0-79"), 40, P("0-19,40-59")],
  ["take a NUMA node from multi-numa-per-socket", multiNuma, P("0-79"), 20, P("0-9,40-49")],
  [
    "take a NUMA node from multi-numa-per-socket, 1 NUMA node already taken",
    multiNuma,
    P("10-39,50-79"),
    20,
    P("10-19,50-59"),
  ],
  ["take a socket and a NUMA node", multiNuma, P("0-79"), 60, P("0-29,40-69")],
  ["take a socket and a NUMA node, a core taken", multiNuma, P("1-39,41-79"), 60, P("10-39,50-79")],
];

function check(
  name: string,
  want: CPUSet | string,
  run: () => CPUSet,
) {
  if (typeof want === "string") {
    assert.throws(run, (e) => e instanceof CPUAssignmentError && e.message === want, name);
    return;
  }
  const got = run();
  assert.ok(got.equals(want), `${name}: got ${got}, want ${want}`);
}

// upstream TestTakeByTopologyNUMAPacked
Deno.test("takeByTopologyNUMAPacked takes what upstream takes", () => {
  const cases: [...TakeCase, boolean][] = [
    ...common.map((c): [...TakeCase, boolean] => [...c, false]),
    [
      "take one cpu from dual socket with HT - core from Socket 0",
      dualHT,
      P("1-5,7-11"),
      1,
      CPUSet.of(2),
      false,
    ],
    [
      "allocate 4 full cores, 3 filling the first NUMA node and 1 from the second",
      dualHT,
      all(12),
      8,
      P("0,6,2,8,4,10,1,7"),
      false,
    ],
    [
      "allocate 32 full cores, 30 filling 3 NUMA nodes and 2 from the fourth",
      multiNuma,
      P("0-79"),
      64,
      P("0-29,40-69,30,31,70,71"),
      false,
    ],
    // PreferAlignByUncoreCache
    [
      "take cpus from two full UncoreCaches and partial from a single UncoreCache",
      uncoreSingleNoSMT,
      P("1-15"),
      10,
      CPUSet.of(1, 2, 4, 5, 6, 7, 8, 9, 10, 11),
      true,
    ],
    [
      "take one cpu from dual socket with HT - uncore aligned",
      dualHT,
      P("1-5,7-11"),
      1,
      CPUSet.of(1),
      true,
    ],
    [
      "take first available UncoreCache from first socket",
      uncoreDualNoSMT,
      P("0-15"),
      4,
      P("0-3"),
      true,
    ],
    [
      "take all available UncoreCache from first socket",
      uncoreDualNoSMT,
      P("2-15"),
      6,
      P("2-7"),
      true,
    ],
    [
      "take first available UncoreCache from second socket",
      uncoreDualNoSMT,
      P("8-15"),
      4,
      P("8-11"),
      true,
    ],
    [
      "take first available UncoreCache from available NUMA",
      uncoreMultiNuma,
      P("3,4-8,12"),
      2,
      P("4-5"),
      true,
    ],
    [
      "take cpus from best available UncoreCache group - SMT enabled",
      uncoreSingleSMT,
      P("2-3,10-11,4-7,12-15"),
      6,
      CPUSet.of(4, 5, 6, 12, 13, 14),
      true,
    ],
    [
      "take cpus from multiple UncoreCache of single socket - SMT enabled",
      uncoreSingleSMT,
      P("1-7,9-15"),
      10,
      P("4-7,12-15,1,9"),
      true,
    ],
  ];
  for (const [name, topo, available, numCPUs, want, uncore] of cases) {
    check(name, want, () => takeByTopologyNUMAPacked(topo, available, numCPUs, "packed", uncore));
  }
});

// upstream TestTakeByTopologyWithSpreadPhysicalCPUsPreferredOption
Deno.test("takeByTopologyNUMAPacked with the spread strategy spreads over cores", () => {
  const cases: TakeCase[] = [
    ["single socket HT, 3 cpus", singleHT, all(8), 3, P("0-2")],
    ["dual socket HT, 2 cpus", dualHT, all(12), 2, CPUSet.of(0, 2)],
    ["dual socket HT, 3 cpus", dualHT, all(12), 3, CPUSet.of(0, 2, 4)],
    ["dual socket HT, 6 cpus", dualHT, all(12), 6, P("0,2,4,6,8,10")],
    ["dual socket HT, 8 cpus", dualHT, all(12), 8, P("0,2,4,6,8,10,1,3")],
    ["dual socket without HT, 2 cpus", dualNoHT, all(8), 2, CPUSet.of(0, 1)],
    ["dual socket with multi numa per socket and HT, 8 cpus", multiNuma, P("0-79"), 8, P("0-7")],
    [
      "quad socket four way with HT, 12 cpus",
      quad,
      P("0-287"),
      12,
      P("0-2,9-10,13-14,21-22,25-26,33"),
    ],
  ];
  for (const [name, topo, available, numCPUs, want] of cases) {
    check(name, want, () => takeByTopologyNUMAPacked(topo, available, numCPUs, "spread"));
  }
});

type DistCase = [
  name: string,
  topo: CPUTopology,
  available: CPUSet,
  numCPUs: number,
  groupSize: number,
  want: CPUSet | string,
];

// upstream TestTakeByTopologyNUMADistributed (with commonTakeByTopologyExtendedTestCases)
Deno.test("takeByTopologyNUMADistributed spreads over NUMA nodes as upstream does", () => {
  const cases: DistCase[] = [
    ...common.map(([n, t, a, c, w]): DistCase => [n, t, a, c, 1, w]),
    ["allocate 4 full cores with 2 on each NUMA node", dualHT, all(12), 8, 1, P("0,6,2,8,1,7,3,9")],
    [
      "allocate 32 full cores with 8 on each NUMA node",
      multiNuma,
      P("0-79"),
      64,
      1,
      P("0-7,10-17,20-27,30-37,40-47,50-57,60-67,70-77"),
    ],
    [
      "allocate 24 full cores with 8 on the first 3 NUMA nodes",
      multiNuma,
      P("0-79"),
      48,
      1,
      P("0-7,10-17,20-27,40-47,50-57,60-67"),
    ],
    [
      "allocate 24 full cores on the first 3 NUMA nodes (all but 2 of the first)",
      multiNuma,
      P("1-29,32-39,41-69,72-79"),
      48,
      1,
      P("1-8,10-17,20-27,41-48,50-57,60-67"),
    ],
    [
      "allocate 24 full cores on the last 3 NUMA nodes (though the first could hold 8)",
      multiNuma,
      P("2-29,31-39,42-69,71-79"),
      48,
      1,
      P("10-17,20-27,31-38,50-57,60-67,71-78"),
    ],
    [
      "allocate 8 full cores with 2 on each NUMA node",
      multiNuma,
      P("0-2,10-12,20-22,30-32,40-41,50-51,60-61,70-71"),
      16,
      1,
      P("0-1,10-11,20-21,30-31,40-41,50-51,60-61,70-71"),
    ],
    [
      "take one cpu from dual socket with HT - core from Socket 0",
      dualHT,
      P("1-5,7-11"),
      1,
      1,
      CPUSet.of(1),
    ],
    ["take one cpu - cpuGroupSize 2", dualHT, P("1-5,7-11"), 1, 2, CPUSet.of(2)],
    [
      "allocate 13 full cores over the first 2 NUMA nodes",
      multiNuma,
      P("0-79"),
      26,
      1,
      P("0-6,10-16,40-45,50-55"),
    ],
    [
      "allocate 13 full cores over the first 2 NUMA nodes (cpuGroupSize 2)",
      multiNuma,
      P("0-79"),
      26,
      2,
      P("0-6,10-15,40-46,50-55"),
    ],
    [
      "allocate 31 full cores, 15 CPUs per NUMA node and 1 more on NUMA 0 and 1",
      multiNuma,
      P("0-79"),
      62,
      1,
      P("0-7,10-17,20-27,30-37,40-47,50-57,60-66,70-76"),
    ],
    [
      "allocate 31 full cores, 14 CPUs per NUMA node and 2 more on NUMA 0, 1, 2 (cpuGroupSize 2)",
      multiNuma,
      P("0-79"),
      62,
      2,
      P("0-7,10-17,20-27,30-36,40-47,50-57,60-67,70-76"),
    ],
    [
      "allocate 31 full cores, 15 CPUs per NUMA node and 1 more on NUMA 2, 3 (to keep balance)",
      multiNuma,
      P("0-8,10-18,20-39,40-48,50-58,60-79"),
      62,
      1,
      P("0-7,10-17,20-27,30-37,40-46,50-56,60-67,70-77"),
    ],
    [
      "allocate 31 full cores, 14 CPUs per NUMA node and 2 more on NUMA 0, 2, 3 (cpuGroupSize 2)",
      multiNuma,
      P("0-8,10-18,20-39,40-48,50-58,60-79"),
      62,
      2,
      P("0-7,10-16,20-27,30-37,40-47,50-56,60-67,70-77"),
    ],
    [
      "ensure bestRemainder chosen with NUMA nodes that have enough CPUs",
      multiNuma,
      P("0-3,10-13,20-23,30-36,40-43,50-53,60-63,70-76"),
      34,
      1,
      P("0-3,10-13,20-23,30-34,40-43,50-53,60-63,70-74"),
    ],
    [
      "ensure previous failure encountered on live machine has been fixed (1/1)",
      multiNumaLarge,
      P("0,128,30,31,158,159,43-47,171-175,62,63,190,191,75-79,203-207,94,96,222,223,101-111,229-239,126,127,254,255"),
      28,
      1,
      P("43-47,75-79,96,101-105,171-174,203-206,229-232"),
    ],
  ];
  for (const [name, topo, available, numCPUs, groupSize, want] of cases) {
    check(
      name,
      want,
      () => takeByTopologyNUMADistributed(topo, available, numCPUs, groupSize, "packed"),
    );
  }
});

Deno.test("takeByTopologyNUMADistributed packs a request that is not a multiple of the group", () => {
  // 3 CPUs in groups of 2 cannot be distributed: upstream packs them onto the fullest core and NUMA node.
  const got = takeByTopologyNUMADistributed(dualHT, P("1-5,7-11"), 3, 2);
  assert.equal(got.toString(), takeByTopologyNUMAPacked(dualHT, P("1-5,7-11"), 3).toString());
  assert.equal(got.toString(), "2,4,8");
});

Deno.test("takeByTopology strategies: spread never takes whole cores first", () => {
  const strategies: CPUSortingStrategy[] = ["packed", "spread"];
  const got = strategies.map((s) => takeByTopologyNUMAPacked(singleHT, all(8), 2, s).toString());
  assert.deepEqual(got, ["0,4", "0-1"]);
});

Deno.test("takeByTopology on a topology read from a sysfs tree", async () => {
  const root = await writeNumaMachine(MACHINE_DUAL_SOCKET_NPS2);
  try {
    const topo = discoverCPUTopology(await readMachineTopology(root));
    assert.equal(takeByTopologyNUMAPacked(topo, P("0-79"), 20).toString(), "0-9,40-49");
    assert.equal(takeByTopologyNUMAPacked(topo, P("1-39,41-79"), 60).toString(), "10-39,50-79");
    assert.equal(
      takeByTopologyNUMADistributed(topo, P("0-79"), 26, 2).toString(),
      "0-6,10-15,40-46,50-55",
    );
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
