/**
 * @module
 * The topology manager: an admit handler that, for every pod added, asks the hint providers
 * (the device, CPU and memory managers, in the order they are added) where they could place the
 * pod's resources, lets `topologyManagerPolicy` pick the best NUMA node set and decide whether
 * the pod is admitted (TopologyAffinityError, "Resources cannot be allocated with Topology
 * locality", when not), stores that set per container for the providers to read
 * ({@link TopologyManager.getAffinity}) and has them allocate. `topologyManagerScope` says
 * whether a set is chosen per container or per pod; with the `none` policy no hint is asked for
 * and the providers just allocate. Admissions run one at a time, as upstream's sync loop runs
 * them. Records kubelet_topology_manager_admission_{requests_total,errors_total,duration_ms}.
 * Corresponds to upstream `pkg/kubelet/cm/topologymanager/topology_manager.go`.
 */

import type { V1Container, V1Pod } from "@kubernetes/client-node";
import { kobj, type Logger } from "../klog/klog.ts";
import type { KubeletMetrics } from "../metrics/metrics.ts";
import { type Clock, realClock } from "../util/clock.ts";
import { getPodAdmitResult, type PodAdmitResult } from "./admission_error.ts";
import { errorText } from "../util/errors.ts";
import { newNumaInfo, type NumaTopology } from "./numa_info.ts";
import {
  type Policy,
  POLICY_BEST_EFFORT,
  POLICY_NONE,
  POLICY_RESTRICTED,
  POLICY_SINGLE_NUMA_NODE,
  type TopologyHint,
} from "./policy.ts";
import { BestEffortPolicy } from "./policy_best_effort.ts";
import { newPolicyOptions } from "./policy_options.ts";
import { RestrictedPolicy } from "./policy_restricted.ts";
import { SingleNumaNodePolicy } from "./policy_single_numa_node.ts";
import {
  CONTAINER_TOPOLOGY_SCOPE,
  ContainerScope,
  type HintProvider,
  NoneScope,
  POD_TOPOLOGY_SCOPE,
  PodScope,
  type Scope,
  type ScopeName,
} from "./scope.ts";

export type { HintProvider } from "./scope.ts";
export type { ProviderHints, TopologyHint } from "./policy.ts";
export type { PodAdmitResult } from "./admission_error.ts";

/** The metrics the topology manager records. */
export type TopologyManagerMetrics = Pick<
  KubeletMetrics,
  "topologyAdmissionRequests" | "topologyAdmissionErrors" | "topologyAdmissionDuration"
>;

/** Options of {@link TopologyManager}. */
export interface TopologyManagerOptions {
  /** `topologyManagerPolicy`. @default "none" */
  readonly policy?: string;
  /** `topologyManagerScope`; ignored with the `none` policy. @default "container" */
  readonly scope?: string;
  /** `topologyManagerPolicyOptions`; ignored with the `none` policy. @default {} */
  readonly options?: Readonly<Record<string, string>>;
  /** The machine's NUMA nodes and their distances (the machine topology reader's). */
  readonly numa: NumaTopology;
  readonly logger: Logger;
  /** @default none */
  readonly metrics?: TopologyManagerMetrics;
  /** Times admissions. @default the wall clock */
  readonly clock?: Clock;
  /** TopologyManagerPolicyAlphaOptions. @default false */
  readonly alphaOptions?: boolean;
  /** TopologyManagerPolicyBetaOptions. @default true */
  readonly betaOptions?: boolean;
}

/**
 * The topology manager cannot start: a bad policy, scope or option, or a machine it does not
 * support. The message is upstream's.
 */
export class TopologyManagerConfigError extends Error {
  override name = "TopologyManagerConfigError";
}

/** The topology manager (upstream manager); see the module documentation. */
export class TopologyManager {
  readonly #scope: Scope;
  readonly #logger: Logger;
  readonly #metrics: TopologyManagerMetrics | undefined;
  readonly #clock: Clock;
  #tail: Promise<unknown> = Promise.resolve();

  /** Throws {@link TopologyManagerConfigError}; see upstream NewManager. */
  constructor(o: TopologyManagerOptions) {
    this.#logger = o.logger;
    this.#metrics = o.metrics;
    this.#clock = o.clock ?? realClock;
    this.#scope = newScope(o);
  }

  /** The scope's name: `container`, `pod`, or `none` under the `none` policy. */
  get name(): ScopeName {
    return this.#scope.name;
  }

  /** The policy. */
  get policy(): Policy {
    return this.#scope.policy;
  }

  /** Adds a provider to consult at admission and to allocate through. */
  addHintProvider(p: HintProvider): void {
    this.#scope.addHintProvider(p);
  }

  /**
   * Admits or refuses a pod and allocates its resources (upstream Admit). Admissions are
   * serialized: one starts when the previous one has ended.
   */
  admit(pod: V1Pod): Promise<PodAdmitResult> {
    const run = this.#tail.then(() => this.#admit(pod));
    this.#tail = run.catch(() => {});
    return run;
  }

  async #admit(pod: V1Pod): Promise<PodAdmitResult> {
    this.#logger.v(4).info("Topology manager admission check", { pod: kobj(pod) });
    this.#metrics?.topologyAdmissionRequests.inc();
    const start = this.#clock.now();
    let r: PodAdmitResult;
    try {
      r = await this.#scope.admit(pod);
    } catch (e) {
      // A provider that throws while giving hints: the pod is refused, the agent goes on.
      this.#logger.error(e, "Topology manager admission failed", { pod: kobj(pod) });
      r = getPodAdmitResult(e);
    }
    // Whole milliseconds, as upstream's Duration.Milliseconds().
    this.#metrics?.topologyAdmissionDuration.observe(Math.trunc(this.#clock.now() - start));
    this.#logger.v(4).info("Pod Admit Result", {
      Message: r.admit ? "" : r.message,
      pod: kobj(pod),
    });
    return r;
  }

  /** The NUMA affinity chosen for the container; "no hint" when none was. */
  getAffinity(podUID: string, containerName: string): TopologyHint {
    return this.#scope.getAffinity(podUID, containerName);
  }

  /** Records a created container's ID (upstream AddContainer, at PreCreateContainer). */
  addContainer(pod: V1Pod, container: V1Container, containerID: string): void {
    this.#scope.addContainer(pod, container, containerID);
  }

  /** Forgets a stopped container (upstream RemoveContainer, at PostStopContainer). */
  removeContainer(containerID: string): void {
    this.#scope.removeContainer(containerID);
  }

  /** Forgets everything stored for the pod (no upstream counterpart; see Scope.removePod). */
  removePod(podUID: string): void {
    this.#scope.removePod(podUID);
  }
}

function newScope(o: TopologyManagerOptions): Scope {
  const policyName = o.policy ?? POLICY_NONE;
  const scopeOpts = { logger: o.logger, metrics: o.metrics };
  // Under the none policy the scope does not matter, and neither do the options.
  if (policyName === POLICY_NONE) {
    o.logger.info("Creating topology manager with none policy");
    return new NoneScope(scopeOpts);
  }
  let opts;
  try {
    opts = newPolicyOptions(o.options, {
      logger: o.logger,
      alphaOptions: o.alphaOptions,
      betaOptions: o.betaOptions,
    });
  } catch (e) {
    throw new TopologyManagerConfigError(errorText(e), { cause: e });
  }
  const scopeName = o.scope ?? CONTAINER_TOPOLOGY_SCOPE;
  o.logger.info("Creating topology manager with policy per scope", {
    topologyPolicyName: policyName,
    topologyScopeName: scopeName,
    topologyPolicyOptions:
      `{PreferClosestNUMA:${opts.preferClosestNuma} MaxAllowableNUMANodes:${opts.maxAllowableNumaNodes}}`,
  });
  let numaInfo;
  try {
    numaInfo = newNumaInfo(o.numa, opts);
  } catch (e) {
    throw new TopologyManagerConfigError(`cannot discover NUMA topology: ${errorText(e)}`, {
      cause: e,
    });
  }
  if (numaInfo.nodes.length > opts.maxAllowableNumaNodes) {
    throw new TopologyManagerConfigError(
      `unsupported on machines with more than ${opts.maxAllowableNumaNodes} NUMA Nodes`,
    );
  }
  let policy: Policy;
  switch (policyName) {
    case POLICY_BEST_EFFORT:
      policy = new BestEffortPolicy(numaInfo, opts);
      break;
    case POLICY_RESTRICTED:
      policy = new RestrictedPolicy(numaInfo, opts);
      break;
    case POLICY_SINGLE_NUMA_NODE:
      policy = new SingleNumaNodePolicy(numaInfo, opts);
      break;
    default:
      throw new TopologyManagerConfigError(`unknown policy: "${policyName}"`);
  }
  switch (scopeName) {
    case CONTAINER_TOPOLOGY_SCOPE:
      return new ContainerScope(policy, scopeOpts);
    case POD_TOPOLOGY_SCOPE:
      return new PodScope(policy, scopeOpts);
    default:
      throw new TopologyManagerConfigError(`unknown scope: "${scopeName}"`);
  }
}
