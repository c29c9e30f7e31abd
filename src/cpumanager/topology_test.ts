import assert from "node:assert/strict";
import { CPUSet } from "./cpuset.ts";
import { CPUDetails, CPUTopology, discoverCPUTopology, emptyAllocation } from "./topology.ts";
import { TopologyError } from "./machine_topology.ts";
import {
  topoDualSocketMultiNumaPerSocketHT,
  topoUncoreSingleSocketSMT,
} from "../testing/numa_fixtures.ts";

Deno.test("discoverCPUTopology fails without CPUs", () => {
  assert.throws(
    () => discoverCPUTopology({ numCPUs: 0, numSockets: 0, nodes: [], warnings: [] }),
    (e) => e instanceof TopologyError && e.message === "could not detect number of cpus",
  );
});

Deno.test("CPUDetails answers upstream's topology queries", () => {
  const d = topoDualSocketMultiNumaPerSocketHT.cpuDetails;
  assert.equal(d.cpusInNUMANodes(1).toString(), "10-19,50-59");
  assert.equal(d.cpusInNUMANodes(0, 3).toString(), "0-9,30-49,70-79");
  assert.equal(d.cpusInSockets(1).toString(), "20-39,60-79");
  assert.equal(d.cpusInCores(3).toString(), "3,43");
  assert.equal(d.coresInSockets(0).toString(), "0-19");
  assert.equal(d.coresInNUMANodes(2).toString(), "20-29");
  assert.equal(d.numaNodesInSockets(1).toString(), "2-3");
  assert.equal(d.socketsInNUMANodes(0, 1).toString(), "0");
  assert.equal(d.numaNodes().toString(), "0-3");
  assert.equal(d.sockets().toString(), "0-1");
  assert.equal(d.cores().size, 40);
  const part = d.keepOnly(CPUSet.parse("0-4,40-41"));
  assert.equal(part.size, 7);
  assert.equal(part.cores().toString(), "0-4");
  assert.equal(part.cpus().toString(), "0-4,40-41");

  const u = topoUncoreSingleSocketSMT.cpuDetails;
  assert.equal(u.uncoreCaches().toString(), "0-1");
  assert.equal(u.uncoreInNUMANodes(0).toString(), "0-1");
  assert.equal(u.cpusInUncoreCaches(1).toString(), "4-7,12-15");
  assert.equal(u.coresNeededInUncoreCache(2, 1).toString(), "4-5");
  assert.equal(u.coresNeededInUncoreCache(9, 1).toString(), "4-7");
  assert.equal(new CPUDetails().cpus().size, 0);
});

Deno.test("CPUTopology per-CPU lookups and alignment", () => {
  const t = topoUncoreSingleSocketSMT;
  assert.equal(t.cpuSocketID(9), 0);
  assert.equal(t.cpuNUMANodeID(9), 0);
  assert.equal(t.cpuCoreID(9), 1);
  assert.throws(
    () => t.cpuCoreID(99),
    (e) => e instanceof RangeError && /unknown CPU ID: 99/.test(e.message),
  );
  assert.equal(t.checkAlignment(CPUSet.parse("0-3,8-11")).uncoreCache, true);
  assert.equal(t.checkAlignment(CPUSet.parse("3-4")).uncoreCache, false);
  assert.equal(t.checkAlignment(CPUSet.of(99, 0)).uncoreCache, false);
  assert.equal(t.checkAlignment(CPUSet.of(99)).uncoreCache, true);
  assert.deepEqual(emptyAllocation().aligned, { uncoreCache: true });
  const none = new CPUTopology({
    numCPUs: 0,
    numCores: 0,
    numSockets: 0,
    cpuDetails: new CPUDetails(),
  });
  assert.deepEqual([none.cpusPerCore(), none.cpusPerSocket(), none.cpusPerUncore()], [0, 0, 0]);
});
