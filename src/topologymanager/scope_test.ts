import assert from "node:assert/strict";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import { createLogger } from "../klog/klog.ts";
import { KubeletMetrics } from "../metrics/metrics.ts";
import {
  type AdmissionError,
  TOPOLOGY_AFFINITY_ERROR,
  UNEXPECTED_ADMISSION_ERROR,
} from "./admission_error.ts";
import { BitMask } from "./bitmask.ts";
import { NumaInfo } from "./numa_info.ts";
import type { MergeResult, Policy, ProviderHints, TopologyHint } from "./policy.ts";
import { BestEffortPolicy } from "./policy_best_effort.ts";
import { RestrictedPolicy } from "./policy_restricted.ts";
import { SingleNumaNodePolicy } from "./policy_single_numa_node.ts";
import { admissionOrder, ContainerScope, type HintProvider, NoneScope, PodScope } from "./scope.ts";

const quiet = createLogger({ write: () => {}, pid: 1 });
const NUMA = new NumaInfo([0, 1], new Map());

const h = (preferred: boolean, ...bits: number[]): TopologyHint => ({
  numaNodeAffinity: BitMask.of(...bits),
  preferred,
});
const view = (t: TopologyHint) => ({
  mask: t.numaNodeAffinity?.toString(),
  preferred: t.preferred,
});
const hints = (r: Record<string, TopologyHint[] | undefined>): ProviderHints =>
  new Map(Object.entries(r));

/** A hint provider that answers from tables and writes what it is asked into `log`. */
class FakeProvider implements HintProvider {
  constructor(
    readonly name: string,
    readonly log: string[],
    readonly o: {
      container?: (c: V1Container) => ProviderHints;
      pod?: ProviderHints;
      allocateError?: (c: V1Container) => unknown;
      onAllocate?: (c: V1Container) => void;
    } = {},
  ) {}
  getTopologyHints(_pod: V1Pod, c: V1Container): ProviderHints {
    this.log.push(`${this.name} hints ${c.name}`);
    return this.o.container?.(c);
  }
  getPodTopologyHints(_pod: V1Pod): ProviderHints {
    this.log.push(`${this.name} pod hints`);
    return this.o.pod;
  }
  allocate(_pod: V1Pod, c: V1Container): Promise<void> {
    this.log.push(`${this.name} allocate ${c.name}`);
    this.o.onAllocate?.(c);
    const e = this.o.allocateError?.(c);
    return e === undefined ? Promise.resolve() : Promise.reject(e);
  }
}

/** A policy that records what it is given (upstream mockPolicy). */
class RecordingPolicy implements Policy {
  readonly name = "none" as const;
  seen: readonly ProviderHints[] | undefined;
  merge(providersHints: readonly ProviderHints[]): MergeResult {
    this.seen = providersHints;
    return { hint: { numaNodeAffinity: undefined, preferred: false }, admit: true };
  }
}

function pod(): V1Pod {
  return {
    metadata: { uid: "uid-1", name: "web", namespace: "default" },
    spec: {
      initContainers: [
        { name: "setup" },
        // A sidecar (restartable init container) is aligned as any init container.
        { name: "proxy", restartPolicy: "Always" },
      ],
      containers: [{ name: "app" }, { name: "log" }],
    },
  };
}

function metrics() {
  return new KubeletMetrics({ process: false });
}

Deno.test("admissionOrder puts init containers, sidecars included, first", () => {
  assert.deepEqual(admissionOrder(pod()).map((c) => c.name), ["setup", "proxy", "app", "log"]);
  assert.deepEqual(admissionOrder({}), []);
});

Deno.test("ContainerScope and PodScope give the policy every provider's hints in order", () => {
  const cases: [string, ProviderHints[]][] = [
    ["No hint providers", []],
    ["HintProvider returns empty non-nil map", [hints({})]],
    ["HintProvider returns nil hints for a resource", [hints({ resource: undefined })]],
    ["2 HintProviders 1 with 1 resource 1 with nil hints", [
      hints({ resource1: [h(true, 0)] }),
      undefined,
    ]],
    ["Assorted HintProviders", [
      hints({ "resource-1/A": [h(true, 0), h(false, 0, 1)], "resource-1/B": [h(true, 1)] }),
      hints({ "resource-2/A": [h(true, 2), h(false, 3, 4)] }),
      hints({ "resource-3": undefined }),
    ]],
  ];
  for (const [name, perProvider] of cases) {
    for (const kind of ["container", "pod"] as const) {
      const policy = new RecordingPolicy();
      const log: string[] = [];
      const scope = kind === "container"
        ? new ContainerScope(policy, { logger: quiet })
        : new PodScope(policy, { logger: quiet });
      perProvider.forEach((ph, i) =>
        scope.addHintProvider(new FakeProvider(`p${i}`, log, { container: () => ph, pod: ph }))
      );
      const actual = scope instanceof ContainerScope
        ? scope.accumulateProvidersHints(pod(), { name: "app" })
        : scope.accumulateProvidersHints(pod());
      assert.deepEqual(actual, perProvider, `${kind}: ${name}`);
      if (scope instanceof ContainerScope) scope.calculateAffinity(pod(), { name: "app" });
      else scope.calculateAffinity(pod());
      assert.deepEqual(policy.seen, perProvider, `${kind}: ${name}`);
    }
  }
});

Deno.test("Scope getAffinity is an empty hint for what it does not know", () => {
  const scope = new ContainerScope(new BestEffortPolicy(NUMA), { logger: quiet });
  assert.deepEqual(view(scope.getAffinity("0aafa4c4", "nginx")), {
    mask: undefined,
    preferred: false,
  });
});

Deno.test("ContainerScope aligns each container on its own, init containers first", async () => {
  const log: string[] = [];
  const scope = new ContainerScope(new RestrictedPolicy(NUMA), { logger: quiet });
  const seenAtAllocate: Record<string, string | undefined> = {};
  // The CPU manager fits init containers on node 0 and the rest on node 1.
  const cpu = new FakeProvider("cpu", log, {
    container: (c) =>
      hints({
        cpu: c.name === "app" || c.name === "log" ? [h(true, 1), h(false, 0, 1)] : [h(true, 0)],
      }),
    onAllocate: (c) => {
      seenAtAllocate[c.name] = scope.getAffinity("uid-1", c.name).numaNodeAffinity?.toString();
    },
  });
  const memory = new FakeProvider("memory", log, { container: () => undefined });
  scope.addHintProvider(cpu);
  scope.addHintProvider(memory);
  assert.deepEqual(await scope.admit(pod()), { admit: true });
  assert.deepEqual(log, [
    ...["setup", "proxy", "app", "log"].flatMap((c) => [
      `cpu hints ${c}`,
      `memory hints ${c}`,
      `cpu allocate ${c}`,
      `memory allocate ${c}`,
    ]),
  ]);
  // Each provider reads the container's affinity while allocating it.
  assert.deepEqual(seenAtAllocate, { setup: "01", proxy: "01", app: "10", log: "10" });
  assert.deepEqual(view(scope.getAffinity("uid-1", "app")), { mask: "10", preferred: true });
});

Deno.test("ContainerScope refuses at the first container that cannot be aligned", async () => {
  const log: string[] = [];
  const m = metrics();
  const scope = new ContainerScope(new SingleNumaNodePolicy(NUMA), { logger: quiet, metrics: m });
  scope.addHintProvider(
    new FakeProvider("cpu", log, {
      container: (c) => hints({ cpu: c.name === "app" ? [h(false, 0, 1)] : [h(true, 0)] }),
    }),
  );
  assert.deepEqual(await scope.admit(pod()), {
    admit: false,
    reason: TOPOLOGY_AFFINITY_ERROR,
    message: "Resources cannot be allocated with Topology locality",
  });
  // The containers before it were aligned and allocated; nothing after it was asked.
  assert.deepEqual(log, [
    "cpu hints setup",
    "cpu allocate setup",
    "cpu hints proxy",
    "cpu allocate proxy",
    "cpu hints app",
  ]);
  assert.equal(m.topologyAdmissionErrors.get(), 1);
  assert.deepEqual(view(scope.getAffinity("uid-1", "app")), { mask: undefined, preferred: false });
});

class SmtAlignmentError extends Error implements AdmissionError {
  override name = "SMTAlignmentError";
  readonly admissionReason = "SMTAlignmentError";
}

Deno.test("Scopes turn allocation failures into upstream's verdicts", async () => {
  const cases: [unknown, string, string][] = [
    [
      new Error("no free devices"),
      UNEXPECTED_ADMISSION_ERROR,
      "Allocate failed due to no free devices, which is unexpected",
    ],
    [
      "plain string",
      UNEXPECTED_ADMISSION_ERROR,
      "Allocate failed due to plain string, which is unexpected",
    ],
    [
      new SmtAlignmentError("SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2"),
      "SMTAlignmentError",
      "SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2",
    ],
    // An admission error wrapped in another is found along `cause`, as errors.As unwraps.
    [
      new Error("allocating cpus", { cause: new SmtAlignmentError("inner") }),
      "SMTAlignmentError",
      "inner",
    ],
  ];
  for (const [err, reason, message] of cases) {
    for (
      const make of [
        (m: KubeletMetrics) =>
          new ContainerScope(new BestEffortPolicy(NUMA), { logger: quiet, metrics: m }),
        (m: KubeletMetrics) =>
          new PodScope(new BestEffortPolicy(NUMA), { logger: quiet, metrics: m }),
        (m: KubeletMetrics) => new NoneScope({ logger: quiet, metrics: m }),
      ]
    ) {
      const log: string[] = [];
      const m = metrics();
      const scope = make(m);
      scope.addHintProvider(
        new FakeProvider("devices", log, {
          allocateError: (c) => (c.name === "app" ? err : undefined),
        }),
      );
      scope.addHintProvider(new FakeProvider("cpu", log));
      assert.deepEqual(await scope.admit(pod()), { admit: false, reason, message }, scope.name);
      // The provider after the failing one is not asked to allocate that container, nor is
      // any later container allocated.
      assert.equal(log.includes("cpu allocate app"), false);
      assert.equal(log.some((l) => l.endsWith("allocate log")), false);
      // Upstream counts allocation failures as errors, except under the none policy.
      assert.equal(m.topologyAdmissionErrors.get(), scope.name === "none" ? 0 : 1, scope.name);
    }
  }
});

Deno.test("PodScope merges the pod's hints once and stores them for every container", async () => {
  const log: string[] = [];
  const scope = new PodScope(new RestrictedPolicy(NUMA), { logger: quiet });
  scope.addHintProvider(
    new FakeProvider("cpu", log, { pod: hints({ cpu: [h(true, 1), h(false, 0, 1)] }) }),
  );
  scope.addHintProvider(new FakeProvider("memory", log, { pod: hints({ memory: [h(true, 1)] }) }));
  assert.deepEqual(await scope.admit(pod()), { admit: true });
  assert.deepEqual(log, [
    "cpu pod hints",
    "memory pod hints",
    ...["setup", "proxy", "app", "log"].flatMap((
      c,
    ) => [`cpu allocate ${c}`, `memory allocate ${c}`]),
  ]);
  for (const c of ["setup", "proxy", "app", "log"]) {
    assert.deepEqual(view(scope.getAffinity("uid-1", c)), { mask: "10", preferred: true });
  }
});

Deno.test("PodScope refuses before allocating anything", async () => {
  const log: string[] = [];
  const m = metrics();
  const scope = new PodScope(new RestrictedPolicy(NUMA), { logger: quiet, metrics: m });
  scope.addHintProvider(new FakeProvider("cpu", log, { pod: hints({ cpu: [h(true, 0)] }) }));
  scope.addHintProvider(new FakeProvider("memory", log, { pod: hints({ memory: [h(true, 1)] }) }));
  const r = await scope.admit(pod());
  assert.equal(r.admit, false);
  assert.equal(!r.admit && r.reason, TOPOLOGY_AFFINITY_ERROR);
  assert.deepEqual(log, ["cpu pod hints", "memory pod hints"]);
  assert.equal(m.topologyAdmissionErrors.get(), 1);
  assert.deepEqual(view(scope.getAffinity("uid-1", "app")), { mask: undefined, preferred: false });
});

Deno.test("NoneScope allocates every container without asking for hints", async () => {
  const log: string[] = [];
  const scope = new NoneScope({ logger: quiet });
  scope.addHintProvider(new FakeProvider("devices", log));
  assert.equal(scope.policy.name, "none");
  assert.deepEqual(await scope.admit(pod()), { admit: true });
  assert.deepEqual(log, [
    "devices allocate setup",
    "devices allocate proxy",
    "devices allocate app",
    "devices allocate log",
  ]);
  assert.deepEqual(view(scope.getAffinity("uid-1", "app")), { mask: undefined, preferred: false });
});

Deno.test("Scope removeContainer drops an affinity once no container ID of it is left", async () => {
  const scope = new PodScope(new BestEffortPolicy(NUMA), { logger: quiet });
  scope.addHintProvider(new FakeProvider("cpu", [], { pod: hints({ cpu: [h(true, 0)] }) }));
  await scope.admit(pod());
  const p = pod();
  scope.addContainer(p, { name: "app" }, "id-1");
  // The container restarted: a new ID for the same name.
  scope.addContainer(p, { name: "app" }, "id-2");
  scope.addContainer(p, { name: "log" }, "id-3");
  scope.removeContainer("unknown");
  scope.removeContainer("id-1");
  assert.equal(view(scope.getAffinity("uid-1", "app")).mask, "01");
  scope.removeContainer("id-2");
  assert.equal(view(scope.getAffinity("uid-1", "app")).mask, undefined);
  assert.equal(view(scope.getAffinity("uid-1", "log")).mask, "01");
  // Removing twice is harmless.
  scope.removeContainer("id-2");
  assert.equal(view(scope.getAffinity("uid-1", "log")).mask, "01");
});

Deno.test("Scope removePod forgets the pod's affinities and container IDs", async () => {
  const scope = new PodScope(new BestEffortPolicy(NUMA), { logger: quiet });
  scope.addHintProvider(new FakeProvider("cpu", [], { pod: hints({ cpu: [h(true, 1)] }) }));
  await scope.admit(pod());
  const other: V1Pod = { ...pod(), metadata: { uid: "uid-2", name: "other" } };
  await scope.admit(other);
  scope.addContainer(pod(), { name: "app" }, "id-1");
  scope.removePod("uid-1");
  for (const c of ["setup", "proxy", "app", "log"]) {
    assert.equal(view(scope.getAffinity("uid-1", c)).mask, undefined);
    assert.equal(view(scope.getAffinity("uid-2", c)).mask, "10");
  }
  // The forgotten container ID no longer maps to the pod.
  scope.removeContainer("id-1");
  assert.equal(view(scope.getAffinity("uid-2", "app")).mask, "10");
});
