import assert from "node:assert/strict";
import { createLogger } from "../klog/klog.ts";
import {
  checkPolicyOptionAvailable,
  MAX_ALLOWABLE_NUMA_NODES,
  newPolicyOptions,
  type OptionLevel,
  POLICY_OPTION_LEVELS,
  PolicyOptionsError,
  PREFER_CLOSEST_NUMA_NODES,
} from "./policy_options.ts";

const quiet = createLogger({ write: () => {}, pid: 1 });
const FANCY_BETA = "fancy-new-option";
const FANCY_ALPHA = "fancy-alpha-option";
// Upstream's tests add made-up options to the alpha and beta sets; so do these.
const levels: ReadonlyMap<string, OptionLevel> = new Map([
  ...POLICY_OPTION_LEVELS,
  [FANCY_BETA, "beta"],
  [FANCY_ALPHA, "alpha"],
]);

Deno.test("POLICY_OPTION_LEVELS has both v1.36 options as GA", () => {
  assert.deepEqual([...POLICY_OPTION_LEVELS], [
    [PREFER_CLOSEST_NUMA_NODES, "stable"],
    [MAX_ALLOWABLE_NUMA_NODES, "stable"],
  ]);
});

Deno.test("newPolicyOptions parses options with upstream's errors", () => {
  const ok: [Record<string, string> | undefined, boolean, number][] = [
    [{ [PREFER_CLOSEST_NUMA_NODES]: "true", [MAX_ALLOWABLE_NUMA_NODES]: "8" }, true, 8],
    [{ [MAX_ALLOWABLE_NUMA_NODES]: "12" }, false, 12],
    [undefined, false, 8],
    [{ [PREFER_CLOSEST_NUMA_NODES]: "T" }, true, 8],
  ];
  for (const [options, preferClosestNuma, maxAllowableNumaNodes] of ok) {
    assert.deepEqual(
      newPolicyOptions(options, { logger: quiet, levels, betaOptions: true }),
      { preferClosestNuma, maxAllowableNumaNodes },
    );
  }
  // A gated option whose gate is on passes the gate and then, known to the table but not to
  // the parser, is unsupported (upstream's "options success" cases ignore that error).
  for (
    const [option, gates] of [[FANCY_BETA, {}], [FANCY_ALPHA, { alphaOptions: true }]] as const
  ) {
    assert.throws(
      () => newPolicyOptions({ [option]: "true" }, { logger: quiet, levels, ...gates }),
      (e) =>
        e instanceof PolicyOptionsError &&
        e.message === `unsupported topologymanager option: "${option}" (true)`,
    );
  }
  const bad: [Record<string, string>, string, Partial<{ betaOptions: boolean }>][] = [
    [
      { [PREFER_CLOSEST_NUMA_NODES]: "not a boolean" },
      'bad value for option "prefer-closest-numa-nodes": strconv.ParseBool: parsing "not a boolean": invalid syntax',
      {},
    ],
    [
      { [MAX_ALLOWABLE_NUMA_NODES]: "can't parse to int" },
      `unable to convert policy option to integer "max-allowable-numa-nodes": strconv.Atoi: parsing "can't parse to int": invalid syntax`,
      {},
    ],
    [
      { [MAX_ALLOWABLE_NUMA_NODES]: "7" },
      'the minimum value of "max-allowable-numa-nodes" should not be less than 8',
      {},
    ],
    [
      { [FANCY_BETA]: "true" },
      'topology manager policy beta-level options not enabled, but option "fancy-new-option" provided',
      { betaOptions: false },
    ],
    [
      { [FANCY_ALPHA]: "true" },
      'topology manager policy alpha-level options not enabled, but option "fancy-alpha-option" provided',
      {},
    ],
    [{ "unknown-option": "true" }, 'unknown Topology Manager Policy option: "unknown-option"', {}],
  ];
  for (const [options, message, gates] of bad) {
    assert.throws(
      () => newPolicyOptions(options, { logger: quiet, levels, ...gates }),
      (e) => e instanceof PolicyOptionsError && e.message === message,
      message,
    );
  }
});

Deno.test("newPolicyOptions warns when max-allowable-numa-nodes exceeds 8", () => {
  const lines: string[] = [];
  const logger = createLogger({ write: (l) => lines.push(l), pid: 1 });
  newPolicyOptions({ [MAX_ALLOWABLE_NUMA_NODES]: "8" }, { logger });
  assert.equal(lines.length, 0);
  newPolicyOptions({ [MAX_ALLOWABLE_NUMA_NODES]: "16" }, { logger });
  assert.equal(lines.length, 1);
  assert.match(
    lines[0]!,
    /"WARNING: the value of max-allowable-numa-nodes is more than the default recommended value" max-allowable-numa-nodes=16 defaultMaxAllowableNUMANodes=8/,
  );
});

Deno.test("checkPolicyOptionAvailable follows the option's level and gate", () => {
  const cases: [string, { alphaOptions?: boolean; betaOptions?: boolean }, boolean][] = [
    ["this-option-does-not-exist", {}, false],
    ["this-option-does-not-exist", { betaOptions: true }, false],
    [PREFER_CLOSEST_NUMA_NODES, {}, true],
    [PREFER_CLOSEST_NUMA_NODES, { betaOptions: false }, true],
    [PREFER_CLOSEST_NUMA_NODES, { alphaOptions: false }, true],
    [MAX_ALLOWABLE_NUMA_NODES, { betaOptions: false }, true],
    [FANCY_ALPHA, { alphaOptions: true }, true],
    [FANCY_ALPHA, { alphaOptions: false }, false],
    [FANCY_ALPHA, {}, false],
    [FANCY_BETA, { betaOptions: true }, true],
    [FANCY_BETA, {}, true],
    [FANCY_BETA, { betaOptions: false }, false],
  ];
  for (const [option, gates, available] of cases) {
    let ok = true;
    try {
      checkPolicyOptionAvailable(option, { ...gates, levels });
    } catch (e) {
      assert.ok(e instanceof PolicyOptionsError);
      ok = false;
    }
    assert.equal(ok, available, `${option} ${JSON.stringify(gates)}`);
  }
});
