/**
 * @module
 * `cpuManagerPolicyOptions`: which options the static CPU manager policy knows, at which
 * maturity in v1.36, their parsing into {@link StaticPolicyOptions}, the pairs that cannot be
 * combined, and the check against the machine and the topology manager's policy, all with
 * upstream's error texts. At v1.36 `full-pcpus-only`, `strict-cpu-reservation` and
 * `prefer-align-cpus-by-uncorecache` are GA (always available), `distribute-cpus-across-numa` is
 * beta (the CPUManagerPolicyBetaOptions gate, on by default) and `align-by-socket` and
 * `distribute-cpus-across-cores` are alpha (CPUManagerPolicyAlphaOptions, off by default).
 * Corresponds to upstream `pkg/kubelet/cm/cpumanager/policy_options.go`.
 */

import { parseBool } from "../apis/flags.ts";
import { goQuote } from "../klog/encode.ts";
import { POLICY_SINGLE_NUMA_NODE } from "../topologymanager/policy.ts";
import { errorText } from "../util/errors.ts";
import type { CPUTopology } from "./topology.ts";

/** Only whole physical cores: a request must be a multiple of the threads per core. */
export const FULL_PCPUS_ONLY_OPTION = "full-pcpus-only";
/** Spread a request that needs several NUMA nodes evenly over them (KEP-2902). */
export const DISTRIBUTE_CPUS_ACROSS_NUMA_OPTION = "distribute-cpus-across-numa";
/** Treat a socket, not a NUMA node, as the unit of alignment. */
export const ALIGN_BY_SOCKET_OPTION = "align-by-socket";
/** Take CPUs from different cores first, instead of filling a core's threads. */
export const DISTRIBUTE_CPUS_ACROSS_CORES_OPTION = "distribute-cpus-across-cores";
/** Keep the reserved CPUs out of the shared pool as well. */
export const STRICT_CPU_RESERVATION_OPTION = "strict-cpu-reservation";
/** Prefer CPUs that share an uncore (L3) cache, best effort. */
export const PREFER_ALIGN_BY_UNCORE_CACHE_OPTION = "prefer-align-cpus-by-uncorecache";

/** An option's maturity, which decides the feature gate it needs. */
export type CPUPolicyOptionLevel = "alpha" | "beta" | "stable";

/** Every option and its maturity at v1.36 (upstream alphaOptions, betaOptions, stableOptions). */
export const CPU_POLICY_OPTION_LEVELS: ReadonlyMap<string, CPUPolicyOptionLevel> = new Map([
  [ALIGN_BY_SOCKET_OPTION, "alpha"],
  [DISTRIBUTE_CPUS_ACROSS_CORES_OPTION, "alpha"],
  [DISTRIBUTE_CPUS_ACROSS_NUMA_OPTION, "beta"],
  [FULL_PCPUS_ONLY_OPTION, "stable"],
  [STRICT_CPU_RESERVATION_OPTION, "stable"],
  [PREFER_ALIGN_BY_UNCORE_CACHE_OPTION, "stable"],
]);

/** The parsed options (upstream StaticPolicyOptions); every field defaults to false. */
export interface StaticPolicyOptions {
  /** `full-pcpus-only`. */
  readonly fullPhysicalCPUsOnly: boolean;
  /** `distribute-cpus-across-numa`. */
  readonly distributeCPUsAcrossNUMA: boolean;
  /** `align-by-socket`. */
  readonly alignBySocket: boolean;
  /** `distribute-cpus-across-cores`. */
  readonly distributeCPUsAcrossCores: boolean;
  /** `strict-cpu-reservation`. */
  readonly strictCPUReservation: boolean;
  /** `prefer-align-cpus-by-uncorecache`. */
  readonly preferAlignByUncoreCache: boolean;
}

/** The options when none is set. */
export const DEFAULT_STATIC_POLICY_OPTIONS: StaticPolicyOptions = {
  fullPhysicalCPUsOnly: false,
  distributeCPUsAcrossNUMA: false,
  alignBySocket: false,
  distributeCPUsAcrossCores: false,
  strictCPUReservation: false,
  preferAlignByUncoreCache: false,
};

/** An unknown, not enabled, badly valued or conflicting option; the message is upstream's. */
export class CPUPolicyOptionsError extends Error {
  override name = "CPUPolicyOptionsError";
}

/** The feature gates that admit alpha and beta options. */
export interface CPUPolicyOptionGates {
  /** CPUManagerPolicyAlphaOptions. @default false */
  readonly alphaOptions?: boolean;
  /** CPUManagerPolicyBetaOptions. @default true */
  readonly betaOptions?: boolean;
}

/** Throws {@link CPUPolicyOptionsError} unless `option` exists and its gate is on. */
export function checkCPUPolicyOptionAvailable(
  option: string,
  gates: CPUPolicyOptionGates = {},
): void {
  const level = CPU_POLICY_OPTION_LEVELS.get(option);
  if (level === undefined) {
    throw new CPUPolicyOptionsError(`unknown CPU Manager Policy option: ${goQuote(option)}`);
  }
  if (level === "alpha" && !(gates.alphaOptions ?? false)) {
    throw new CPUPolicyOptionsError(
      `CPU Manager Policy Alpha-level Options not enabled, but option ${goQuote(option)} provided`,
    );
  }
  if (level === "beta" && !(gates.betaOptions ?? true)) {
    throw new CPUPolicyOptionsError(
      `CPU Manager Policy Beta-level Options not enabled, but option ${goQuote(option)} provided`,
    );
  }
}

const FIELDS: ReadonlyMap<string, keyof StaticPolicyOptions> = new Map([
  [FULL_PCPUS_ONLY_OPTION, "fullPhysicalCPUsOnly"],
  [DISTRIBUTE_CPUS_ACROSS_NUMA_OPTION, "distributeCPUsAcrossNUMA"],
  [ALIGN_BY_SOCKET_OPTION, "alignBySocket"],
  [DISTRIBUTE_CPUS_ACROSS_CORES_OPTION, "distributeCPUsAcrossCores"],
  [STRICT_CPU_RESERVATION_OPTION, "strictCPUReservation"],
  [PREFER_ALIGN_BY_UNCORE_CACHE_OPTION, "preferAlignByUncoreCache"],
]);

/** Options that cannot be set together, in upstream's order of checking. */
const CONFLICTS: readonly (readonly [keyof StaticPolicyOptions, string, string])[] = [
  ["fullPhysicalCPUsOnly", FULL_PCPUS_ONLY_OPTION, DISTRIBUTE_CPUS_ACROSS_CORES_OPTION],
  [
    "distributeCPUsAcrossNUMA",
    DISTRIBUTE_CPUS_ACROSS_NUMA_OPTION,
    DISTRIBUTE_CPUS_ACROSS_CORES_OPTION,
  ],
  [
    "preferAlignByUncoreCache",
    PREFER_ALIGN_BY_UNCORE_CACHE_OPTION,
    DISTRIBUTE_CPUS_ACROSS_CORES_OPTION,
  ],
  [
    "preferAlignByUncoreCache",
    PREFER_ALIGN_BY_UNCORE_CACHE_OPTION,
    DISTRIBUTE_CPUS_ACROSS_NUMA_OPTION,
  ],
];

/**
 * Parses `cpuManagerPolicyOptions` (upstream NewStaticPolicyOptions): each value is a Go
 * boolean ("1", "t", "TRUE", "false", ...). Throws {@link CPUPolicyOptionsError} at the first
 * bad entry, in the object's order (Go's map order is random), then for a conflicting pair.
 */
export function newStaticPolicyOptions(
  options: Readonly<Record<string, string>> | undefined,
  gates: CPUPolicyOptionGates = {},
): StaticPolicyOptions {
  const opts: { -readonly [K in keyof StaticPolicyOptions]: boolean } = {
    ...DEFAULT_STATIC_POLICY_OPTIONS,
  };
  for (const [name, value] of Object.entries(options ?? {})) {
    checkCPUPolicyOptionAvailable(name, gates);
    const field = FIELDS.get(name);
    if (field === undefined) {
      // Only reachable when the level table knows an option this table does not.
      throw new CPUPolicyOptionsError(`unsupported cpumanager option: ${goQuote(name)} (${value})`);
    }
    try {
      opts[field] = parseBool(value);
    } catch (e) {
      throw new CPUPolicyOptionsError(`bad value for option ${goQuote(name)}: ${errorText(e)}`, {
        cause: e,
      });
    }
  }
  for (const [field, a, b] of CONFLICTS) {
    const other = FIELDS.get(b)!;
    if (opts[field] && opts[other]) {
      throw new CPUPolicyOptionsError(
        `static policy options ${a} and ${b} can not be used at the same time`,
      );
    }
  }
  return opts;
}

/**
 * Throws {@link CPUPolicyOptionsError} when the options do not suit the machine or the
 * topology manager's policy (upstream ValidateStaticPolicyOptions): `align-by-socket` with the
 * `single-numa-node` policy, or on a machine with more sockets than NUMA nodes.
 */
export function validateStaticPolicyOptions(
  opts: StaticPolicyOptions,
  topology: CPUTopology,
  topologyManagerPolicy: string,
): void {
  if (!opts.alignBySocket) return;
  if (topologyManagerPolicy === POLICY_SINGLE_NUMA_NODE) {
    // Upstream's message, misspelling included.
    throw new CPUPolicyOptionsError(
      `Topolgy manager ${POLICY_SINGLE_NUMA_NODE} policy is incompatible with CPUManager ` +
        `${ALIGN_BY_SOCKET_OPTION} policy option`,
    );
  }
  if (topology.numSockets > topology.numNUMANodes) {
    throw new CPUPolicyOptionsError(
      "Align by socket is not compatible with hardware where number of sockets are more than number of NUMA",
    );
  }
}
