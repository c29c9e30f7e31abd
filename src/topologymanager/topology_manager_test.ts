import assert from "node:assert/strict";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import { createLogger } from "../klog/klog.ts";
import { KubeletMetrics } from "../metrics/metrics.ts";
import { FakeClock } from "../util/clock.ts";
import { TOPOLOGY_AFFINITY_ERROR, UNEXPECTED_ADMISSION_ERROR } from "./admission_error.ts";
import { BitMask } from "./bitmask.ts";
import {
  type HintProvider,
  type ProviderHints,
  type TopologyHint,
  TopologyManager,
  TopologyManagerConfigError,
  type TopologyManagerOptions,
} from "./topology_manager.ts";

const quiet = createLogger({ write: () => {}, pid: 1 });
const TWO = { nodes: [0, 1], distances: new Map([[0, [10, 11]], [1, [11, 10]]]) };

const h = (preferred: boolean, ...bits: number[]): TopologyHint => ({
  numaNodeAffinity: BitMask.of(...bits),
  preferred,
});

/** A provider that gives the same hints for every container and for the pod. */
class FakeProvider implements HintProvider {
  readonly log: string[] = [];
  constructor(
    readonly hints: ProviderHints,
    readonly allocateImpl: (c: V1Container) => Promise<void> = () => Promise.resolve(),
  ) {}
  getTopologyHints(_pod: V1Pod, c: V1Container): ProviderHints {
    this.log.push(`hints ${c.name}`);
    return this.hints;
  }
  getPodTopologyHints(): ProviderHints {
    this.log.push("pod hints");
    return this.hints;
  }
  allocate(_pod: V1Pod, c: V1Container): Promise<void> {
    this.log.push(`allocate ${c.name}`);
    return this.allocateImpl(c);
  }
}

function manager(o: Partial<TopologyManagerOptions> = {}): TopologyManager {
  return new TopologyManager({ numa: TWO, logger: quiet, ...o });
}

function pod(uid = "uid-1"): V1Pod {
  return {
    metadata: { uid, name: uid, namespace: "default" },
    spec: { containers: [{ name: "c" }] },
  };
}

Deno.test("TopologyManager picks the policy, and refuses bad settings with upstream's errors", () => {
  for (const policy of ["none", "best-effort", "restricted", "single-numa-node"]) {
    assert.equal(manager({ policy }).policy.name, policy);
  }
  assert.equal(manager().policy.name, "none");
  const nine = { nodes: [0, 1, 2, 3, 4, 5, 6, 7, 8], distances: new Map() };
  const bad: [Partial<TopologyManagerOptions>, string][] = [
    [{ policy: "unknown" }, 'unknown policy: "unknown"'],
    [
      { policy: "best-effort", options: { "unknown-option": "true" } },
      'unknown Topology Manager Policy option: "unknown-option"',
    ],
    [
      { policy: "restricted", options: { "unknown-option": "true" } },
      'unknown Topology Manager Policy option: "unknown-option"',
    ],
    [
      {
        policy: "best-effort",
        options: { "prefer-closest-numa-nodes": "true" },
        numa: { nodes: [0], distances: new Map() },
      },
      "cannot discover NUMA topology: error getting NUMA distances from cadvisor",
    ],
    [{ policy: "best-effort", numa: nine }, "unsupported on machines with more than 8 NUMA Nodes"],
    [{ policy: "best-effort", scope: "unknown" }, 'unknown scope: "unknown"'],
  ];
  for (const [o, message] of bad) {
    assert.throws(
      () => manager(o),
      (e) => e instanceof TopologyManagerConfigError && e.message === message,
      message,
    );
  }
  // max-allowable-numa-nodes lifts the limit.
  const sixteen = manager({
    policy: "single-numa-node",
    numa: nine,
    options: { "max-allowable-numa-nodes": "16" },
  });
  assert.equal(sixteen.policy.name, "single-numa-node");
  // Under the none policy neither the machine, the options nor the scope matter.
  assert.equal(
    manager({ policy: "none", numa: nine, options: { bad: "x" }, scope: "unknown" }).name,
    "none",
  );
});

Deno.test("TopologyManager scope follows topologyManagerScope", () => {
  assert.equal(manager({ policy: "best-effort" }).name, "container");
  assert.equal(manager({ policy: "best-effort", scope: "container" }).name, "container");
  assert.equal(manager({ policy: "best-effort", scope: "pod" }).name, "pod");
  assert.equal(manager({ policy: "none", scope: "pod" }).name, "none");
});

Deno.test("TopologyManager admit decides as upstream's TestAdmit, in both scopes", async () => {
  const preferred = new Map([["resource", [h(true, 0), h(false, 0, 1)]]]);
  const twoPreferred = new Map([["resource", [h(true, 0), h(true, 1), h(false, 0, 1)]]]);
  const noPreferred = new Map([["resource", [h(false, 0, 1)]]]);
  const cases: [string, string, ProviderHints[], boolean][] = [
    ["None Policy. No Hints.", "none", [], true],
    ["single-numa-node Policy. No Hints.", "single-numa-node", [undefined], true],
    ["Restricted Policy. No Hints.", "restricted", [undefined], true],
    ["BestEffort Policy. Preferred Affinity.", "best-effort", [preferred], true],
    ["BestEffort Policy. More than one Preferred Affinity.", "best-effort", [twoPreferred], true],
    ["BestEffort Policy. No Preferred Affinity.", "best-effort", [noPreferred], true],
    ["Restricted Policy. Preferred Affinity.", "restricted", [preferred], true],
    ["Restricted Policy. More than one Preferred affinity.", "restricted", [twoPreferred], true],
    ["Restricted Policy. No Preferred affinity.", "restricted", [noPreferred], false],
    ["single-numa-node Policy. No Preferred affinity.", "single-numa-node", [noPreferred], false],
  ];
  for (const [name, policy, providers, expected] of cases) {
    for (const scope of ["container", "pod"]) {
      const m = manager({ policy, scope });
      for (const hints of providers) m.addHintProvider(new FakeProvider(hints));
      const r = await m.admit(pod());
      assert.equal(r.admit, expected, `${scope}: ${name}`);
      if (!r.admit) {
        assert.equal(r.reason, TOPOLOGY_AFFINITY_ERROR);
        assert.equal(r.message, "Resources cannot be allocated with Topology locality");
      }
    }
  }
});

Deno.test("TopologyManager stores the affinity the providers read while allocating", async () => {
  const m = manager({ policy: "best-effort" });
  let seen: TopologyHint | undefined;
  const p = new FakeProvider(new Map([["cpu", [h(false, 0, 1), h(true, 1)]]]), () => {
    seen = m.getAffinity("uid-1", "c");
    return Promise.resolve();
  });
  m.addHintProvider(p);
  assert.deepEqual(await m.admit(pod()), { admit: true });
  assert.equal(seen?.numaNodeAffinity?.toString(), "10");
  assert.equal(seen?.preferred, true);
  assert.deepEqual(p.log, ["hints c", "allocate c"]);
  m.addContainer(pod(), { name: "c" }, "cid");
  m.removeContainer("cid");
  assert.equal(m.getAffinity("uid-1", "c").numaNodeAffinity, undefined);
  await m.admit(pod());
  m.removePod("uid-1");
  assert.equal(m.getAffinity("uid-1", "c").numaNodeAffinity, undefined);
});

Deno.test("TopologyManager records requests, errors and whole-millisecond durations", async () => {
  const metrics = new KubeletMetrics({ process: false });
  const clock = new FakeClock();
  const m = manager({ policy: "restricted", metrics, clock });
  let hints: ProviderHints = new Map([["cpu", [h(true, 0)]]]);
  m.addHintProvider({
    getTopologyHints: () => hints,
    getPodTopologyHints: () => hints,
    allocate: () => {
      clock.step(7.9);
      return Promise.resolve();
    },
  });
  assert.equal((await m.admit(pod())).admit, true);
  hints = new Map([["cpu", [h(false, 0, 1)]]]);
  assert.equal((await m.admit(pod("uid-2"))).admit, false);
  assert.equal(metrics.topologyAdmissionRequests.get(), 2);
  assert.equal(metrics.topologyAdmissionErrors.get(), 1);
  assert.equal(metrics.topologyAdmissionDuration.count(), 2);
  const text = await metrics.render();
  assert.match(text, /^kubelet_topology_manager_admission_duration_ms_sum 7$/m);
  // The none policy counts requests and durations, never errors.
  const none = manager({ metrics, clock });
  none.addHintProvider({
    getTopologyHints: () => undefined,
    getPodTopologyHints: () => undefined,
    allocate: () => Promise.reject(new Error("boom")),
  });
  assert.deepEqual(await none.admit(pod()), {
    admit: false,
    reason: UNEXPECTED_ADMISSION_ERROR,
    message: "Allocate failed due to boom, which is unexpected",
  });
  assert.equal(metrics.topologyAdmissionRequests.get(), 3);
  assert.equal(metrics.topologyAdmissionErrors.get(), 1);
});

Deno.test("TopologyManager runs one admission at a time", async () => {
  const m = manager({ policy: "best-effort" });
  const log: string[] = [];
  let release = () => {};
  const gate = new Promise<void>((r) => release = r);
  m.addHintProvider({
    getTopologyHints: (p) => {
      log.push(`hints ${p.metadata?.uid}`);
      return undefined;
    },
    getPodTopologyHints: () => undefined,
    allocate: async (p) => {
      log.push(`allocate ${p.metadata?.uid}`);
      if (p.metadata?.uid === "a") await gate;
    },
  });
  const first = m.admit(pod("a"));
  const second = m.admit(pod("b"));
  await new Promise((r) => setTimeout(r, 0));
  assert.deepEqual(log, ["hints a", "allocate a"]);
  release();
  assert.deepEqual(await first, { admit: true });
  assert.deepEqual(await second, { admit: true });
  assert.deepEqual(log, ["hints a", "allocate a", "hints b", "allocate b"]);
});

Deno.test("TopologyManager refuses a pod whose provider throws while giving hints", async () => {
  const m = manager({ policy: "best-effort" });
  let broken = true;
  m.addHintProvider({
    getTopologyHints: () => {
      if (broken) throw new Error("state corrupt");
      return undefined;
    },
    getPodTopologyHints: () => undefined,
    allocate: () => Promise.resolve(),
  });
  assert.deepEqual(await m.admit(pod()), {
    admit: false,
    reason: UNEXPECTED_ADMISSION_ERROR,
    message: "Allocate failed due to state corrupt, which is unexpected",
  });
  // The next admission still runs.
  broken = false;
  assert.deepEqual(await m.admit(pod("uid-2")), { admit: true });
});
