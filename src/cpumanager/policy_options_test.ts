import assert from "node:assert/strict";
import {
  fakeTopoMultiSocketDualSocketPerNumaHT,
  topoDualSocketMultiNumaPerSocketHT,
} from "../testing/numa_fixtures.ts";
import {
  ALIGN_BY_SOCKET_OPTION,
  checkCPUPolicyOptionAvailable,
  CPUPolicyOptionsError,
  DEFAULT_STATIC_POLICY_OPTIONS,
  DISTRIBUTE_CPUS_ACROSS_CORES_OPTION,
  DISTRIBUTE_CPUS_ACROSS_NUMA_OPTION,
  FULL_PCPUS_ONLY_OPTION,
  newStaticPolicyOptions,
  PREFER_ALIGN_BY_UNCORE_CACHE_OPTION,
  STRICT_CPU_RESERVATION_OPTION,
  validateStaticPolicyOptions,
} from "./policy_options.ts";

const ALPHA = { alphaOptions: true };

// upstream TestPolicyDefaultsAvailable, TestPolicyOptionsAvailable,
// TestPolicyOptionsAlwaysAvailableOnceGA
Deno.test("checkCPUPolicyOptionAvailable gates alpha and beta options as v1.36 does", () => {
  const available = (option: string, gates = {}) => {
    try {
      checkCPUPolicyOptionAvailable(option, gates);
      return true;
    } catch (e) {
      assert.ok(e instanceof CPUPolicyOptionsError);
      return false;
    }
  };
  // Default gates: alpha off, beta on.
  assert.equal(available("this-option-does-not-exist"), false);
  assert.equal(available(FULL_PCPUS_ONLY_OPTION), true);
  assert.equal(available(DISTRIBUTE_CPUS_ACROSS_NUMA_OPTION), true);
  assert.equal(available(ALIGN_BY_SOCKET_OPTION), false);
  assert.equal(available(DISTRIBUTE_CPUS_ACROSS_CORES_OPTION), false);
  assert.equal(available("this-option-does-not-exist", { betaOptions: true }), false);
  assert.equal(available(ALIGN_BY_SOCKET_OPTION, ALPHA), true);
  assert.equal(available(DISTRIBUTE_CPUS_ACROSS_CORES_OPTION, ALPHA), true);
  assert.equal(available(DISTRIBUTE_CPUS_ACROSS_NUMA_OPTION, { betaOptions: false }), false);
  const off = { alphaOptions: false, betaOptions: false };
  for (
    const ga of [
      FULL_PCPUS_ONLY_OPTION,
      STRICT_CPU_RESERVATION_OPTION,
      PREFER_ALIGN_BY_UNCORE_CACHE_OPTION,
    ]
  ) {
    assert.equal(available(ga, off), true, ga);
  }
  assert.throws(() => checkCPUPolicyOptionAvailable("nope"), {
    message: 'unknown CPU Manager Policy option: "nope"',
  });
  assert.throws(() => checkCPUPolicyOptionAvailable(ALIGN_BY_SOCKET_OPTION), {
    message: 'CPU Manager Policy Alpha-level Options not enabled, but option "align-by-socket" ' +
      "provided",
  });
  assert.throws(
    () => checkCPUPolicyOptionAvailable(DISTRIBUTE_CPUS_ACROSS_NUMA_OPTION, { betaOptions: false }),
    {
      message: "CPU Manager Policy Beta-level Options not enabled, but option " +
        '"distribute-cpus-across-numa" provided',
    },
  );
});

// upstream TestStaticPolicyOptions
Deno.test("newStaticPolicyOptions parses Go booleans and refuses unknown options", () => {
  assert.deepEqual(newStaticPolicyOptions(undefined), DEFAULT_STATIC_POLICY_OPTIONS);
  assert.deepEqual(newStaticPolicyOptions({}), DEFAULT_STATIC_POLICY_OPTIONS);
  assert.throws(() => newStaticPolicyOptions({ badValue1: "" }), CPUPolicyOptionsError);
  assert.throws(
    () => newStaticPolicyOptions({ badValue1: "", badvalue2: "aaaa" }),
    CPUPolicyOptionsError,
  );
  assert.deepEqual(newStaticPolicyOptions({ [FULL_PCPUS_ONLY_OPTION]: "true" }), {
    ...DEFAULT_STATIC_POLICY_OPTIONS,
    fullPhysicalCPUsOnly: true,
  });
  assert.throws(() => newStaticPolicyOptions({ [FULL_PCPUS_ONLY_OPTION]: "enabled!" }), {
    message: 'bad value for option "full-pcpus-only": strconv.ParseBool: parsing "enabled!": ' +
      "invalid syntax",
  });
  assert.throws(
    () => newStaticPolicyOptions({ [FULL_PCPUS_ONLY_OPTION]: "1", badvalue2: "lorem ipsum" }),
    { message: 'unknown CPU Manager Policy option: "badvalue2"' },
  );
  // Every option, with Go's other spellings of true and false.
  assert.deepEqual(
    newStaticPolicyOptions({
      [FULL_PCPUS_ONLY_OPTION]: "t",
      [STRICT_CPU_RESERVATION_OPTION]: "TRUE",
      [PREFER_ALIGN_BY_UNCORE_CACHE_OPTION]: "1",
      [ALIGN_BY_SOCKET_OPTION]: "True",
      [DISTRIBUTE_CPUS_ACROSS_NUMA_OPTION]: "F",
    }, ALPHA),
    {
      fullPhysicalCPUsOnly: true,
      strictCPUReservation: true,
      preferAlignByUncoreCache: true,
      alignBySocket: true,
      distributeCPUsAcrossNUMA: false,
      distributeCPUsAcrossCores: false,
    },
  );
});

// upstream TestPolicyOptionsCompatibility
Deno.test("newStaticPolicyOptions refuses the pairs upstream refuses", () => {
  const ok: Record<string, string>[] = [
    { [FULL_PCPUS_ONLY_OPTION]: "true" },
    { [DISTRIBUTE_CPUS_ACROSS_CORES_OPTION]: "true" },
    { [PREFER_ALIGN_BY_UNCORE_CACHE_OPTION]: "true", [STRICT_CPU_RESERVATION_OPTION]: "true" },
    { [PREFER_ALIGN_BY_UNCORE_CACHE_OPTION]: "true", [FULL_PCPUS_ONLY_OPTION]: "true" },
    { [PREFER_ALIGN_BY_UNCORE_CACHE_OPTION]: "true", [ALIGN_BY_SOCKET_OPTION]: "true" },
    // Only options set to true conflict.
    { [FULL_PCPUS_ONLY_OPTION]: "true", [DISTRIBUTE_CPUS_ACROSS_CORES_OPTION]: "false" },
  ];
  for (const o of ok) newStaticPolicyOptions(o, ALPHA);
  const refused: [Record<string, string>, string][] = [
    [
      { [FULL_PCPUS_ONLY_OPTION]: "true", [DISTRIBUTE_CPUS_ACROSS_CORES_OPTION]: "true" },
      "static policy options full-pcpus-only and distribute-cpus-across-cores can not be used at the same time",
    ],
    [
      {
        [DISTRIBUTE_CPUS_ACROSS_NUMA_OPTION]: "true",
        [DISTRIBUTE_CPUS_ACROSS_CORES_OPTION]: "true",
      },
      "static policy options distribute-cpus-across-numa and distribute-cpus-across-cores can not be used at the same time",
    ],
    [
      {
        [PREFER_ALIGN_BY_UNCORE_CACHE_OPTION]: "true",
        [DISTRIBUTE_CPUS_ACROSS_CORES_OPTION]: "true",
      },
      "static policy options prefer-align-cpus-by-uncorecache and distribute-cpus-across-cores can not be used at the same time",
    ],
    [
      {
        [PREFER_ALIGN_BY_UNCORE_CACHE_OPTION]: "true",
        [DISTRIBUTE_CPUS_ACROSS_NUMA_OPTION]: "true",
      },
      "static policy options prefer-align-cpus-by-uncorecache and distribute-cpus-across-numa can not be used at the same time",
    ],
  ];
  for (const [o, message] of refused) {
    assert.throws(() => newStaticPolicyOptions(o, ALPHA), {
      name: "CPUPolicyOptionsError",
      message,
    });
  }
});

// upstream TestValidateStaticPolicyOptions
Deno.test("validateStaticPolicyOptions checks align-by-socket against the machine and the topology manager", () => {
  const opts = (o: Record<string, string>) => newStaticPolicyOptions(o, ALPHA);
  const snc = topoDualSocketMultiNumaPerSocketHT;
  validateStaticPolicyOptions(opts({ [FULL_PCPUS_ONLY_OPTION]: "true" }), snc, "single-numa-node");
  assert.throws(
    () =>
      validateStaticPolicyOptions(
        opts({ [ALIGN_BY_SOCKET_OPTION]: "true" }),
        snc,
        "single-numa-node",
      ),
    {
      message: "Topolgy manager single-numa-node policy is incompatible with CPUManager " +
        "align-by-socket policy option",
    },
  );
  assert.throws(
    () =>
      validateStaticPolicyOptions(
        opts({ [ALIGN_BY_SOCKET_OPTION]: "true" }),
        fakeTopoMultiSocketDualSocketPerNumaHT,
        "none",
      ),
    {
      message:
        "Align by socket is not compatible with hardware where number of sockets are more than number of NUMA",
    },
  );
  for (const tm of ["none", "best-effort", "restricted"]) {
    validateStaticPolicyOptions(opts({ [ALIGN_BY_SOCKET_OPTION]: "true" }), snc, tm);
  }
});
