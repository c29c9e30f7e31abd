import assert from "node:assert/strict";
import { createLogger } from "../klog/klog.ts";
import { BitMask } from "./bitmask.ts";
import { NumaInfo } from "./numa_info.ts";
import {
  filterProvidersHints,
  formatHint,
  formatProviderHints,
  hintIsEqual,
  hintLessThan,
  HintMerger,
  isAlignmentGuaranteed,
  maxOfMinAffinityCounts,
  mergePermutation,
  type Policy,
  POLICY_BEST_EFFORT,
  type ProviderHints,
  type TopologyHint,
} from "./policy.ts";
import { BestEffortPolicy } from "./policy_best_effort.ts";
import { NonePolicy } from "./policy_none.ts";
import { DEFAULT_POLICY_OPTIONS } from "./policy_options.ts";
import { RestrictedPolicy } from "./policy_restricted.ts";
import { filterSingleNumaHints, SingleNumaNodePolicy } from "./policy_single_numa_node.ts";

const quiet = createLogger({ write: () => {}, pid: 1 });
const closestOpts = { ...DEFAULT_POLICY_OPTIONS, preferClosestNuma: true };

/** A hint on `bits`. */
const h = (preferred: boolean, ...bits: number[]): TopologyHint => ({
  numaNodeAffinity: BitMask.of(...bits),
  preferred,
});
/** A "don't care" hint. */
const any = (preferred: boolean): TopologyHint => ({ numaNodeAffinity: undefined, preferred });
/** A provider's hints by resource. */
const p = (hints: Record<string, TopologyHint[] | undefined>): ProviderHints =>
  new Map(Object.entries(hints));

/** What a test compares: the mask as upstream prints it (or undefined) and preferred. */
const view = (t: TopologyHint | undefined) =>
  t && { mask: t.numaNodeAffinity?.toString(), preferred: t.preferred };

interface MergeCase {
  readonly name: string;
  readonly hp: readonly ProviderHints[];
  readonly expected: TopologyHint;
}

function twoProviders(a: TopologyHint[], b: TopologyHint[]): ProviderHints[] {
  return [p({ resource1: a }), p({ resource2: b })];
}

/** Upstream commonPolicyMergeTestCases. */
function commonCases(): MergeCase[] {
  return [
    {
      name: "Two providers, 1 hint each, same mask, both preferred 1/2",
      hp: twoProviders([h(true, 0)], [h(true, 0)]),
      expected: h(true, 0),
    },
    {
      name: "Two providers, 1 hint each, same mask, both preferred 2/2",
      hp: twoProviders([h(true, 1)], [h(true, 1)]),
      expected: h(true, 1),
    },
    {
      name: "Two providers, 1 no hints, 1 single hint preferred 1/2",
      hp: [undefined, p({ resource: [h(true, 0)] })],
      expected: h(true, 0),
    },
    {
      name: "Two providers, 1 no hints, 1 single hint preferred 2/2",
      hp: [undefined, p({ resource: [h(true, 1)] })],
      expected: h(true, 1),
    },
    {
      name: "Two providers, 1 with 2 hints, 1 with single hint matching 1/2",
      hp: twoProviders([h(true, 0), h(true, 1)], [h(true, 0)]),
      expected: h(true, 0),
    },
    {
      name: "Two providers, 1 with 2 hints, 1 with single hint matching 2/2",
      hp: twoProviders([h(true, 0), h(true, 1)], [h(true, 1)]),
      expected: h(true, 1),
    },
    {
      name: "Two providers, both with 2 hints, matching narrower preferred hint from both",
      hp: twoProviders([h(true, 0), h(true, 1)], [h(true, 0), h(false, 0, 1)]),
      expected: h(true, 0),
    },
    {
      name: "Ensure less narrow preferred hints are chosen over narrower non-preferred hints",
      hp: twoProviders([h(true, 1), h(false, 0, 1)], [h(true, 0), h(true, 1), h(false, 0, 1)]),
      expected: h(true, 1),
    },
    {
      name: "Multiple resources, same provider",
      hp: [p({
        resource1: [h(true, 1), h(false, 0, 1)],
        resource2: [h(true, 0), h(true, 1), h(false, 0, 1)],
      })],
      expected: h(true, 1),
    },
  ];
}

const NON_PREFERRED_WIDE = [h(false, 0, 1, 2, 3), h(false, 0, 1)];

/** Upstream bestEffortPolicy.mergeTestCases (best-effort and restricted). */
function bestEffortCases(nodes: number[]): MergeCase[] {
  return [
    {
      name: "Two providers, 2 hints each, same mask (some with different bits), same preferred",
      hp: twoProviders([h(true, 0, 1), h(true, 0, 2)], [h(true, 0, 1), h(true, 0, 2)]),
      expected: h(true, 0, 1),
    },
    { name: "TopologyHint not set", hp: [], expected: h(true, ...nodes) },
    {
      name: "HintProvider returns empty non-nil map[string][]TopologyHint",
      hp: [p({})],
      expected: h(true, ...nodes),
    },
    {
      name: "HintProvider returns -nil map[string][]TopologyHint from provider",
      hp: [p({ resource: undefined })],
      expected: h(true, ...nodes),
    },
    {
      name: "HintProvider returns empty non-nil map[string][]TopologyHint from provider",
      hp: [p({ resource: [] })],
      expected: h(false, ...nodes),
    },
    {
      name: "Single TopologyHint with Preferred as true and NUMANodeAffinity as nil",
      hp: [p({ resource: [any(true)] })],
      expected: h(true, ...nodes),
    },
    {
      name: "Single TopologyHint with Preferred as false and NUMANodeAffinity as nil",
      hp: [p({ resource: [any(false)] })],
      expected: h(false, ...nodes),
    },
    {
      name: "Two providers, 1 hint each, no common mask",
      hp: twoProviders([h(true, 0)], [h(true, 1)]),
      expected: h(false, ...nodes),
    },
    {
      name: "Two providers, 1 hint each, same mask, 1 preferred, 1 not 1/2",
      hp: twoProviders([h(true, 0)], [h(false, 0)]),
      expected: h(false, 0),
    },
    {
      name: "Two providers, 1 hint each, same mask, 1 preferred, 1 not 2/2",
      hp: twoProviders([h(true, 1)], [h(false, 1)]),
      expected: h(false, 1),
    },
    {
      name: "Two providers, 1 hint each, 1 wider mask, both preferred 1/2",
      hp: twoProviders([h(true, 0)], [h(true, 0, 1)]),
      expected: h(false, 0),
    },
    {
      name: "Two providers, 1 with 2 hints, 1 with single non-preferred hint matching",
      hp: twoProviders([h(true, 0), h(true, 1)], [h(false, 0, 1)]),
      expected: h(false, 0),
    },
    {
      name: "Two providers, 1 hint each, 1 wider mask, both preferred 2/2",
      hp: twoProviders([h(true, 1)], [h(true, 0, 1)]),
      expected: h(false, 1),
    },
    {
      name: "bestNonPreferredAffinityCount (1)",
      hp: twoProviders(NON_PREFERRED_WIDE, [h(false, 0, 1)]),
      expected: h(false, 0, 1),
    },
    {
      name: "bestNonPreferredAffinityCount (2)",
      hp: twoProviders(NON_PREFERRED_WIDE, [h(false, 0, 3)]),
      expected: h(false, 0, 3),
    },
    {
      name: "bestNonPreferredAffinityCount (3)",
      hp: twoProviders(NON_PREFERRED_WIDE, [h(false, 1, 2)]),
      expected: h(false, 1, 2),
    },
    {
      name: "bestNonPreferredAffinityCount (4)",
      hp: twoProviders(NON_PREFERRED_WIDE, [h(false, 2, 3)]),
      expected: h(false, 2, 3),
    },
  ];
}

/** Upstream mergeTestCasesNoPolicies: without prefer-closest-numa-nodes, the lowest mask. */
function noOptionCases(): MergeCase[] {
  return [
    {
      name: "bestNonPreferredAffinityCount (5)",
      hp: twoProviders(NON_PREFERRED_WIDE, [h(false, 1, 2), h(false, 2, 3)]),
      expected: h(false, 1, 2),
    },
    {
      name: "bestNonPreferredAffinityCount (6)",
      hp: twoProviders(NON_PREFERRED_WIDE, [
        h(false, 1, 2, 3),
        h(false, 1, 2),
        h(false, 1, 3),
        h(false, 2, 3),
      ]),
      expected: h(false, 1, 2),
    },
  ];
}

/** Upstream mergeTestCasesClosestNUMA: with prefer-closest-numa-nodes, the nearest mask. */
function closestCases(): MergeCase[] {
  return [
    {
      name: "Two providers, 2 hints each, same mask (some with different bits), same preferred",
      hp: twoProviders([h(true, 0, 4), h(true, 0, 2)], [h(true, 0, 4), h(true, 0, 2)]),
      expected: h(true, 0, 2),
    },
    {
      name: "Two providers, 2 hints each, different mask",
      hp: twoProviders([h(true, 4), h(true, 0, 2)], [h(true, 4), h(true, 0, 2)]),
      expected: h(true, 4),
    },
    {
      name: "bestNonPreferredAffinityCount (5)",
      hp: twoProviders(NON_PREFERRED_WIDE, [h(false, 1, 2), h(false, 2, 3)]),
      expected: h(false, 2, 3),
    },
    {
      name: "bestNonPreferredAffinityCount (6)",
      hp: twoProviders(NON_PREFERRED_WIDE, [
        h(false, 1, 2, 3),
        h(false, 1, 2),
        h(false, 1, 3),
        h(false, 2, 3),
      ]),
      expected: h(false, 2, 3),
    },
  ];
}

/** Upstream singleNumaNodePolicy.mergeTestCases. */
function singleNumaCases(): MergeCase[] {
  return [
    { name: "TopologyHint not set", hp: [], expected: any(true) },
    {
      name: "HintProvider returns empty non-nil map[string][]TopologyHint",
      hp: [p({})],
      expected: any(true),
    },
    {
      name: "HintProvider returns -nil map[string][]TopologyHint from provider",
      hp: [p({ resource: undefined })],
      expected: any(true),
    },
    {
      name: "HintProvider returns empty non-nil map[string][]TopologyHint from provider",
      hp: [p({ resource: [] })],
      expected: any(false),
    },
    {
      name: "Single TopologyHint with Preferred as true and NUMANodeAffinity as nil",
      hp: [p({ resource: [any(true)] })],
      expected: any(true),
    },
    {
      name: "Single TopologyHint with Preferred as false and NUMANodeAffinity as nil",
      hp: [p({ resource: [any(false)] })],
      expected: any(false),
    },
    {
      name: "Two providers, 1 hint each, no common mask",
      hp: twoProviders([h(true, 0)], [h(true, 1)]),
      expected: any(false),
    },
    {
      name: "Two providers, 1 hint each, same mask, 1 preferred, 1 not 1/2",
      hp: twoProviders([h(true, 0)], [h(false, 0)]),
      expected: any(false),
    },
    {
      name: "Two providers, 1 hint each, same mask, 1 preferred, 1 not 2/2",
      hp: twoProviders([h(true, 1)], [h(false, 1)]),
      expected: any(false),
    },
    {
      name: "Two providers, 1 with 2 hints, 1 with single non-preferred hint matching",
      hp: twoProviders([h(true, 0), h(true, 1)], [h(false, 0, 1)]),
      expected: any(false),
    },
    {
      name: "Single NUMA hint generation",
      hp: [p({
        resource1: [h(true, 0, 1)],
        resource2: [h(true, 0), h(true, 1), h(false, 0, 1)],
      })],
      expected: any(false),
    },
    {
      name: "One no-preference provider",
      hp: [p({ resource1: [h(true, 0), h(true, 1), h(false, 0, 1)] }), undefined],
      expected: h(true, 0),
    },
  ];
}

function fourNodes(): NumaInfo {
  return new NumaInfo(
    [0, 1, 2, 3],
    new Map([
      [0, [10, 11, 12, 12]],
      [1, [11, 10, 12, 12]],
      [2, [12, 12, 10, 11]],
      [3, [12, 12, 11, 10]],
    ]),
  );
}

function eightNodes(): NumaInfo {
  return new NumaInfo(
    [0, 1, 2, 3, 4, 5, 6, 7],
    new Map([
      [0, [10, 11, 12, 12, 30, 30, 30, 30]],
      [1, [11, 10, 12, 12, 30, 30, 30, 30]],
      [2, [12, 12, 10, 11, 30, 30, 30, 30]],
      [3, [12, 12, 11, 10, 30, 30, 30, 30]],
      [4, [30, 30, 30, 30, 10, 11, 12, 12]],
      [5, [30, 30, 30, 30, 11, 10, 12, 12]],
      [6, [30, 30, 30, 30, 12, 12, 10, 11]],
      [7, [30, 30, 30, 30, 12, 12, 13, 10]],
    ]),
  );
}

function testPolicyMerge(policy: Policy, cases: readonly MergeCase[]): void {
  for (const c of cases) {
    const { hint } = policy.merge(c.hp, quiet);
    assert.deepEqual(view(hint), view(c.expected), `${policy.name}: ${c.name}`);
  }
}

Deno.test("BestEffortPolicy merges as upstream's table says", () => {
  const info = fourNodes();
  testPolicyMerge(new BestEffortPolicy(info), [
    ...commonCases(),
    ...bestEffortCases([...info.nodes]),
    ...noOptionCases(),
  ]);
});

Deno.test("BestEffortPolicy with prefer-closest-numa-nodes picks the nearest nodes", () => {
  const info = eightNodes();
  testPolicyMerge(new BestEffortPolicy(info, closestOpts), [
    ...commonCases(),
    ...bestEffortCases([...info.nodes]),
    ...closestCases(),
  ]);
});

Deno.test("RestrictedPolicy merges as best-effort does", () => {
  const info = fourNodes();
  testPolicyMerge(new RestrictedPolicy(info), [
    ...commonCases(),
    ...bestEffortCases([...info.nodes]),
    ...noOptionCases(),
  ]);
  const eight = eightNodes();
  testPolicyMerge(new RestrictedPolicy(eight, closestOpts), [
    ...commonCases(),
    ...bestEffortCases([...eight.nodes]),
    ...closestCases(),
  ]);
});

Deno.test("SingleNumaNodePolicy merges one-node hints only", () => {
  testPolicyMerge(new SingleNumaNodePolicy(fourNodes()), [...commonCases(), ...singleNumaCases()]);
  // The option changes nothing: one-node masks have no distance to compare.
  testPolicyMerge(new SingleNumaNodePolicy(fourNodes(), closestOpts), [
    ...commonCases(),
    ...singleNumaCases(),
  ]);
});

Deno.test("policies admit as upstream's canAdmitPodResult does", () => {
  const info = fourNodes();
  const notPreferred = [p({ resource: [h(false, 0, 1)] })];
  const preferred = [p({ resource: [h(true, 0)] })];
  assert.equal(new BestEffortPolicy(info).merge(notPreferred, quiet).admit, true);
  assert.equal(new BestEffortPolicy(info).merge(preferred, quiet).admit, true);
  assert.equal(new RestrictedPolicy(info).merge(notPreferred, quiet).admit, false);
  assert.equal(new RestrictedPolicy(info).merge(preferred, quiet).admit, true);
  assert.equal(new SingleNumaNodePolicy(info).merge(notPreferred, quiet).admit, false);
  assert.equal(new SingleNumaNodePolicy(info).merge(preferred, quiet).admit, true);
  // A preferred two-node hint is still refused by single-numa-node.
  const wide = [p({ resource: [h(true, 0, 1)] })];
  assert.equal(new RestrictedPolicy(info).merge(wide, quiet).admit, true);
  assert.equal(new SingleNumaNodePolicy(info).merge(wide, quiet).admit, false);
});

Deno.test("NonePolicy admits with an empty hint whatever the providers say", () => {
  const none: Policy = new NonePolicy();
  assert.equal(none.name, "none");
  for (const hp of [[], [p({ resource: [h(true, 0)] })], [p({ resource: [h(false, 0, 1)] })]]) {
    const r = none.merge(hp, quiet);
    assert.deepEqual(view(r.hint), { mask: undefined, preferred: false });
    assert.equal(r.admit, true);
  }
});

Deno.test("filterSingleNumaHints keeps preferred one-node and don't-care hints", () => {
  const cases: [TopologyHint[][], TopologyHint[][]][] = [
    [[], []],
    [[[any(false)], [any(true)]], [[], [any(true)]]],
    [[[h(true, 0), any(false)], [h(true, 1), any(true)]], [[h(true, 0)], [h(true, 1), any(true)]]],
    [[[h(true, 1), h(true, 0), any(false)], []], [[h(true, 1), h(true, 0)], []]],
    [
      [
        [h(true, 0), h(true, 1), h(false, 1, 2), h(false, 0, 1, 2), any(false)],
        [h(false, 1, 2), h(false, 0, 1, 2), h(false, 0, 2), h(false, 3)],
        [h(false, 1, 2), h(false, 0, 1, 2), h(false, 0, 2)],
      ],
      [[h(true, 0), h(true, 1)], [], []],
    ],
  ];
  for (const [input, expected] of cases) {
    const actual = filterSingleNumaHints(input);
    assert.deepEqual(actual.map((r) => r.map(view)), expected.map((r) => r.map(view)));
  }
});

Deno.test("filterProvidersHints turns missing hints into don't-care ones", () => {
  const all = filterProvidersHints(
    [undefined, p({}), p({ a: undefined, b: [], c: [h(true, 1)] })],
    quiet,
  );
  assert.deepEqual(all.map((r) => r.map(view)), [
    [view(any(true))],
    [view(any(true))],
    [view(any(true))],
    [view(any(false))],
    [view(h(true, 1))],
  ]);
});

Deno.test("mergePermutation ANDs masks and prefers only equal preferred ones", () => {
  const all = BitMask.of(0, 1, 2, 3);
  assert.deepEqual(view(mergePermutation(all, [h(true, 0, 1), h(true, 0, 1)])), {
    mask: "11",
    preferred: true,
  });
  assert.deepEqual(view(mergePermutation(all, [h(true, 0, 1), h(true, 1)])), {
    mask: "10",
    preferred: false,
  });
  assert.deepEqual(view(mergePermutation(all, [any(true), h(true, 2)])), {
    mask: "100",
    preferred: true,
  });
  assert.deepEqual(view(mergePermutation(all, [any(false)])), { mask: "1111", preferred: false });
});

Deno.test("maxOfMinAffinityCounts takes the widest narrowest hint", () => {
  const cases: [TopologyHint[][], number][] = [
    [[], 0],
    [[[h(true)]], 0],
    [[[h(true, 0)]], 1],
    [[[h(true, 0, 1)]], 2],
    [[[h(true, 0, 1), h(true, 0, 1, 2)]], 2],
    [[[h(true, 0, 1), h(true, 0, 1, 2)], [h(true, 0, 1, 2)]], 3],
    [[[h(true, 0, 1), h(true, 0, 1, 2)], [h(true, 0, 1, 2), h(true, 0, 1, 2, 3)]], 3],
  ];
  for (const [hints, expected] of cases) assert.equal(maxOfMinAffinityCounts(hints), expected);
});

Deno.test("HintMerger compare ranks as upstream's TestCompareHintsNarrowest", () => {
  type C = [string, number, TopologyHint | undefined, TopologyHint, "current" | "candidate"];
  const cases: C[] = [
    ["candidate.NUMANodeAffinity.Count() == 0 (1)", -1, undefined, h(false), "current"],
    ["candidate.NUMANodeAffinity.Count() == 0 (2)", -1, h(true), h(false), "current"],
    ["current == nil (1)", -1, undefined, h(true, 0), "candidate"],
    ["current == nil (2)", -1, undefined, h(false, 0), "candidate"],
    ["!current.Preferred && candidate.Preferred", -1, h(false, 0), h(true, 0), "candidate"],
    ["current.Preferred && !candidate.Preferred", -1, h(true, 0), h(false, 0), "current"],
    ["current.Preferred && candidate.Preferred (1)", -1, h(true, 0), h(true, 0), "current"],
    ["current.Preferred && candidate.Preferred (2)", -1, h(true, 0, 1), h(true, 0), "candidate"],
    ["current.Preferred && candidate.Preferred (3)", -1, h(true, 0), h(true, 0, 1), "current"],
    ["(1.1)", 1, h(false, 0, 1), h(false, 0, 1), "current"],
    ["(1.2)", 1, h(false, 1, 2), h(false, 0, 1), "candidate"],
    ["(1.3)", 1, h(false, 0, 1), h(false, 1, 2), "current"],
    ["(2.1)", 2, h(false, 0, 1), h(false, 0), "current"],
    ["(2.2)", 2, h(false, 0, 1), h(false, 0, 1), "current"],
    ["(2.3)", 2, h(false, 1, 2), h(false, 0, 1), "candidate"],
    ["(2.4)", 2, h(false, 0, 1), h(false, 1, 2), "current"],
    ["(3a)", 2, h(false, 0), h(false, 0, 1, 2), "current"],
    ["(3b)", 2, h(false, 0), h(false, 0, 1), "candidate"],
    ["(3ca.1)", 3, h(false, 0), h(false, 0, 1), "candidate"],
    ["(3ca.2)", 3, h(false, 0), h(false, 1, 2), "candidate"],
    ["(3ca.3)", 4, h(false, 0, 1), h(false, 1, 2, 3), "candidate"],
    ["(3cb)", 4, h(false, 1, 2, 3), h(false, 0, 1), "current"],
    ["(3cc.1)", 4, h(false, 0, 1, 2), h(false, 0, 1, 2), "current"],
    ["(3cc.2)", 4, h(false, 0, 1, 2), h(false, 1, 2, 3), "current"],
    ["(3cc.3)", 4, h(false, 1, 2, 3), h(false, 0, 1, 2), "candidate"],
  ];
  for (const [name, best, current, candidate, expected] of cases) {
    const merger = new HintMerger(
      new NumaInfo([], new Map()),
      [],
      POLICY_BEST_EFFORT,
      DEFAULT_POLICY_OPTIONS,
    );
    merger.bestNonPreferredAffinityCount = best;
    const r = merger.compare(current, candidate);
    assert.equal(r, expected === "current" ? current : candidate, name);
  }
});

Deno.test("TopologyHint helpers compare and print as upstream's", () => {
  assert.equal(hintIsEqual(h(true, 0), h(true, 0)), true);
  assert.equal(hintIsEqual(h(true, 0), h(false, 0)), false);
  assert.equal(hintIsEqual(any(true), any(true)), true);
  assert.equal(hintIsEqual(any(true), h(true, 0)), false);
  assert.equal(hintLessThan(h(true, 0, 1), h(false, 0)), true);
  assert.equal(hintLessThan(h(true, 0), h(true, 0, 1)), true);
  assert.equal(hintLessThan(h(true, 1), h(true, 0)), false);
  assert.equal(formatHint(h(true, 0, 2)), "{NUMANodeAffinity:0101 Preferred:true}");
  assert.equal(formatHint(any(false)), "{NUMANodeAffinity:<nil> Preferred:false}");
  assert.equal(
    formatProviderHints(p({ memory: [h(true, 0)], cpu: [h(false, 0, 1), any(true)] })),
    "map[cpu:[{NUMANodeAffinity:11 Preferred:false} {NUMANodeAffinity:<nil> Preferred:true}] memory:[{NUMANodeAffinity:01 Preferred:true}]]",
  );
  assert.equal(isAlignmentGuaranteed(new SingleNumaNodePolicy(fourNodes())), true);
  assert.equal(isAlignmentGuaranteed(new RestrictedPolicy(fourNodes())), false);
  assert.equal(isAlignmentGuaranteed(new NonePolicy()), false);
});
