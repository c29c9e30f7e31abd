/**
 * @module
 * `topologyManagerPolicyOptions`: which options exist, at which maturity (both are GA in
 * v1.36, so neither feature gate matters to them), and their parsing into
 * {@link PolicyOptions}, with upstream's error texts. An alpha option needs the
 * TopologyManagerPolicyAlphaOptions gate, a beta one TopologyManagerPolicyBetaOptions; v1.36 has
 * neither kind, but the check stays so that a future option slots in. Corresponds to upstream
 * `pkg/kubelet/cm/topologymanager/policy_options.go`.
 */

import type { Logger } from "../klog/klog.ts";
import { parseBool } from "../apis/flags.ts";
import { goAtoi } from "../server/journal.ts";
import { errorText } from "../util/errors.ts";
import { goQuote } from "../klog/encode.ts";

/** Prefer the set of NUMA nodes with the shortest average distance among equally wide sets. */
export const PREFER_CLOSEST_NUMA_NODES = "prefer-closest-numa-nodes";
/** Raise the limit of NUMA nodes above which the topology manager refuses to start. */
export const MAX_ALLOWABLE_NUMA_NODES = "max-allowable-numa-nodes";

/**
 * Most NUMA nodes a machine may have for a policy other than none (upstream
 * defaultMaxAllowableNUMANodes): the number of masks to rank grows as 2^nodes.
 */
export const DEFAULT_MAX_ALLOWABLE_NUMA_NODES = 8;

/** An option's maturity, which decides the feature gate it needs. */
export type OptionLevel = "alpha" | "beta" | "stable";

/** Every option and its maturity at v1.36 (upstream alphaOptions, betaOptions, stableOptions). */
export const POLICY_OPTION_LEVELS: ReadonlyMap<string, OptionLevel> = new Map([
  [PREFER_CLOSEST_NUMA_NODES, "stable"],
  [MAX_ALLOWABLE_NUMA_NODES, "stable"],
]);

/** The parsed options (upstream PolicyOptions). */
export interface PolicyOptions {
  /** @default false */
  readonly preferClosestNuma: boolean;
  /** @default 8 */
  readonly maxAllowableNumaNodes: number;
}

/** The options when none is set. */
export const DEFAULT_POLICY_OPTIONS: PolicyOptions = {
  preferClosestNuma: false,
  maxAllowableNumaNodes: DEFAULT_MAX_ALLOWABLE_NUMA_NODES,
};

/** An unknown, not enabled or badly valued option; the message is upstream's. */
export class PolicyOptionsError extends Error {
  override name = "PolicyOptionsError";
}

/** The gates that admit alpha and beta options, and the option table (tests swap it). */
export interface OptionGates {
  /** TopologyManagerPolicyAlphaOptions. @default false */
  readonly alphaOptions?: boolean;
  /** TopologyManagerPolicyBetaOptions. @default true */
  readonly betaOptions?: boolean;
  /** @default POLICY_OPTION_LEVELS */
  readonly levels?: ReadonlyMap<string, OptionLevel>;
}

/** Throws {@link PolicyOptionsError} unless `option` exists and its gate is on. */
export function checkPolicyOptionAvailable(option: string, gates: OptionGates = {}): void {
  const level = (gates.levels ?? POLICY_OPTION_LEVELS).get(option);
  if (level === undefined) {
    throw new PolicyOptionsError(`unknown Topology Manager Policy option: ${goQuote(option)}`);
  }
  if (level === "alpha" && !(gates.alphaOptions ?? false)) {
    throw new PolicyOptionsError(
      `topology manager policy alpha-level options not enabled, but option ${
        goQuote(option)
      } provided`,
    );
  }
  if (level === "beta" && !(gates.betaOptions ?? true)) {
    throw new PolicyOptionsError(
      `topology manager policy beta-level options not enabled, but option ${
        goQuote(option)
      } provided`,
    );
  }
}

/** Options of {@link newPolicyOptions}. */
export interface NewPolicyOptionsOptions extends OptionGates {
  /** Warned when max-allowable-numa-nodes goes above the default. */
  readonly logger: Logger;
}

/**
 * Parses `topologyManagerPolicyOptions` (upstream NewPolicyOptions); throws
 * {@link PolicyOptionsError} at the first bad entry, in the map's order.
 */
export function newPolicyOptions(
  options: Readonly<Record<string, string>> | undefined,
  o: NewPolicyOptionsOptions,
): PolicyOptions {
  let preferClosestNuma = false;
  let maxAllowableNumaNodes = DEFAULT_MAX_ALLOWABLE_NUMA_NODES;
  for (const [name, value] of Object.entries(options ?? {})) {
    checkPolicyOptionAvailable(name, o);
    if (name === PREFER_CLOSEST_NUMA_NODES) {
      try {
        preferClosestNuma = parseBool(value);
      } catch (e) {
        throw new PolicyOptionsError(
          `bad value for option ${goQuote(name)}: ${errorText(e)}`,
          { cause: e },
        );
      }
    } else if (name === MAX_ALLOWABLE_NUMA_NODES) {
      const n = goAtoi(value);
      if (typeof n === "string") {
        throw new PolicyOptionsError(
          `unable to convert policy option to integer ${goQuote(name)}: ${n}`,
        );
      }
      if (n < DEFAULT_MAX_ALLOWABLE_NUMA_NODES) {
        throw new PolicyOptionsError(
          `the minimum value of ${
            goQuote(name)
          } should not be less than ${DEFAULT_MAX_ALLOWABLE_NUMA_NODES}`,
        );
      }
      if (n > DEFAULT_MAX_ALLOWABLE_NUMA_NODES) {
        o.logger.info(
          "WARNING: the value of max-allowable-numa-nodes is more than the default recommended value",
          {
            "max-allowable-numa-nodes": n,
            defaultMaxAllowableNUMANodes: DEFAULT_MAX_ALLOWABLE_NUMA_NODES,
          },
        );
      }
      maxAllowableNumaNodes = n;
    } else {
      // Only reachable with an option table that knows more options than this switch.
      throw new PolicyOptionsError(
        `unsupported topologymanager option: ${goQuote(name)} (${value})`,
      );
    }
  }
  return { preferClosestNuma, maxAllowableNumaNodes };
}
