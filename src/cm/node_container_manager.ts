/**
 * @module
 * The container manager's start-up checks and the node allocatable cgroup: which cgroup driver
 * to use (the runtime's, when its RuntimeConfig says), whether the controllers the kubelet needs
 * are there, the pods' root cgroup (`<cgroupRoot>/kubepods`) sized to the node's allocatable
 * resources, and the limits on the system-reserved and kube-reserved cgroups. Talks to the CRI
 * (RuntimeConfig), the cgroup manager and the event recorder; the node-allocatable update is
 * retried every minute on the Clock until it succeeds, as upstream. Corresponds to upstream
 * `pkg/kubelet/cm/node_container_manager_linux.go`, the start checks of
 * `container_manager_linux.go` and `getCgroupDriverFromCRI` of `cmd/kubelet/app/server.go`.
 */

import {
  type CgroupManager,
  formatCgroupName,
  newCgroupName,
  parseCgroupfsName,
  type ResourceConfig,
} from "./cgroup_manager.ts";
import { type Clock, realClock } from "../util/clock.ts";
import { type EventRecorder, nodeRef } from "../client/record.ts";
import type { Logger } from "../klog/klog.ts";
import { allocatableAbsolute, cgroupConfigOf } from "./_node_allocatable.ts";
import { resourceList, valueOf } from "../qos/resource_helpers.ts";

export {
  checkCgroupDriver,
  type CheckCgroupDriverOptions,
  type RuntimeConfigService,
  type SystemFeatures,
  validateSystemRequirements,
} from "./_start_checks.ts";

/** Upstream's event reasons for node allocatable enforcement. */
export const NODE_ALLOCATABLE_ENFORCED = "NodeAllocatableEnforced";
/** Upstream's event reason when enforcing node allocatable failed. */
export const FAILED_NODE_ALLOCATABLE_ENFORCEMENT = "FailedNodeAllocatableEnforcement";

/** Options of {@link NodeContainerManager}. */
export interface NodeContainerManagerOptions {
  cgroupManager: Pick<CgroupManager, "parse" | "validate" | "exists" | "create" | "update">;
  /** Config `cgroupRoot` (cgroupfs form); empty means "/". */
  cgroupRoot: string;
  /** @default true */
  cgroupsPerQOS?: boolean;
  /** @default ["pods"] */
  enforceNodeAllocatable?: readonly string[];
  systemReserved?: Readonly<Record<string, string>>;
  kubeReserved?: Readonly<Record<string, string>>;
  systemReservedCgroup?: string;
  kubeReservedCgroup?: string;
  /** Capacity as quantities (cpu, memory, hugepages-*), with "pid" for the node's pid limit. */
  capacity: Readonly<Record<string, string>>;
  nodeName: string;
  recorder: EventRecorder;
  /** @default realClock */
  clock?: Clock;
  logger: Logger;
}

/** How often a failed node allocatable update is retried (upstream: every minute). */
export const NODE_ALLOCATABLE_RETRY_MS = 60_000;

/** The node allocatable cgroup and the reserved cgroups' limits (upstream containerManagerImpl). */
export class NodeContainerManager {
  /** The pods' root cgroup: the cgroup root plus "kubepods" with cgroupsPerQOS. */
  readonly rootName: string[];
  readonly #o: NodeContainerManagerOptions;
  readonly #cgroupRoot: string[];
  readonly #perQOS: boolean;
  readonly #enforce: Set<string>;
  readonly #clock: Clock;
  readonly #log: Logger;

  constructor(opts: NodeContainerManagerOptions) {
    this.#o = opts;
    this.#log = opts.logger;
    this.#clock = opts.clock ?? realClock;
    this.#perQOS = opts.cgroupsPerQOS ?? true;
    this.#enforce = new Set(opts.enforceNodeAllocatable ?? ["pods"]);
    let root = opts.cgroupRoot;
    if (this.#perQOS && root === "") {
      this.#log.info(
        "--cgroups-per-qos enabled, but --cgroup-root was not specified.  defaulting to /",
      );
      root = "/";
    }
    this.#cgroupRoot = parseCgroupfsName(root);
    this.rootName = this.#perQOS ? newCgroupName(this.#cgroupRoot, "kubepods") : this.#cgroupRoot;
  }

  /** Checks the configured cgroup root exists, with cgroupsPerQOS (NewContainerManager). */
  async validateCgroupRoot(): Promise<void> {
    if (!this.#perQOS) return;
    try {
      await this.#o.cgroupManager.validate(this.#cgroupRoot);
    } catch (e) {
      throw new Error(`invalid configuration: ${(e as Error).message}`, { cause: e });
    }
    this.#log.info("Container manager verified user specified cgroup-root exists", {
      cgroupRoot: this.#cgroupRoot,
    });
  }

  /** Allocatable memory in bytes (capacity minus reservations), for the QoS manager. */
  allocatableMemory(): bigint | undefined {
    const m = allocatableAbsolute(this.#o.capacity, this.#o.systemReserved, this.#o.kubeReserved)
      .get("memory");
    return m === undefined ? undefined : valueOf(m);
  }

  /** Creates the pods' root cgroup when missing (createNodeAllocatableCgroups). */
  async createNodeAllocatableCgroup(): Promise<void> {
    if (!this.#perQOS) throw new Error("createNodeAllocatableCgroup needs cgroupsPerQOS");
    if (await this.#o.cgroupManager.exists(this.rootName)) return;
    try {
      await this.#o.cgroupManager.create(this.rootName, this.#rootConfig());
    } catch (e) {
      this.#log.error(e, "Failed to create cgroup", { cgroupName: this.rootName });
      throw e;
    }
  }

  /**
   * Sizes the pods' root cgroup (retried every minute until it works, until `signal` aborts;
   * this resolves after the first try) and enforces the reserved cgroups' limits when
   * `enforceNodeAllocatable` asks, throwing on the first that fails.
   */
  async enforceNodeAllocatable(signal?: AbortSignal): Promise<void> {
    this.#log.v(4).info("Attempting to enforce Node Allocatable", {
      enforceNodeAllocatable: [...this.#enforce],
    });
    if (this.rootName.length > 0) {
      const rc = this.#rootConfig();
      let firstDone!: () => void;
      const first = new Promise<void>((resolve) => firstDone = resolve);
      // Ends on success or when `signal` aborts its sleep.
      this.#updateRootUntilDone(rc, firstDone, signal).catch(() => firstDone());
      await first;
    }
    const o = this.#o;
    const reserved: [string, string, string | undefined, typeof o.systemReserved, boolean][] = [
      ["system-reserved", "System Reserved", o.systemReservedCgroup, o.systemReserved, false],
      ["kube-reserved", "Kube Reserved", o.kubeReservedCgroup, o.kubeReserved, false],
      [
        "system-reserved-compressible",
        "System Reserved Compressible",
        o.systemReservedCgroup,
        o.systemReserved,
        true,
      ],
      [
        "kube-reserved-compressible",
        "Kube Reserved Compressible",
        o.kubeReservedCgroup,
        o.kubeReserved,
        true,
      ],
    ];
    for (const [key, what, cgroup, limits, compressible] of reserved) {
      if (!this.#enforce.has(key)) continue;
      const name = cgroup ?? "";
      try {
        await this.#enforceExisting(name, limits, compressible);
      } catch (e) {
        const msg = `Failed to enforce ${what} Cgroup Limits on ${JSON.stringify(name)}: ${
          (e as Error).message
        }`;
        this.#event("Warning", FAILED_NODE_ALLOCATABLE_ENFORCEMENT, msg);
        throw new Error(msg, { cause: e });
      }
      const owner = key.startsWith("kube") ? "kube" : "system";
      this.#event(
        "Normal",
        NODE_ALLOCATABLE_ENFORCED,
        `Updated limits on ${owner} reserved cgroup ${name}`,
      );
    }
  }

  /** Capacity, or allocatable when "pods" is enforced, as the pods' root cgroup's limits. */
  #rootConfig(): ResourceConfig {
    const o = this.#o;
    const enforced = this.#perQOS && this.#enforce.has("pods");
    const rl = allocatableAbsolute(
      o.capacity,
      enforced ? o.systemReserved : undefined,
      enforced ? o.kubeReserved : undefined,
    );
    return cgroupConfigOf(rl, false)!;
  }

  async #updateRootUntilDone(
    rc: ResourceConfig,
    firstDone: () => void,
    signal?: AbortSignal,
  ): Promise<void> {
    for (;;) {
      try {
        await this.#o.cgroupManager.update(this.rootName, rc);
        this.#event(
          "Normal",
          NODE_ALLOCATABLE_ENFORCED,
          "Updated Node Allocatable limit across pods",
        );
        firstDone();
        return;
      } catch (e) {
        this.#event(
          "Warning",
          FAILED_NODE_ALLOCATABLE_ENFORCEMENT,
          `Failed to update Node Allocatable Limits ${formatCgroupName(this.rootName)}: ${
            (e as Error).message
          }`,
        );
      }
      firstDone();
      await this.#clock.sleep(NODE_ALLOCATABLE_RETRY_MS, signal);
    }
  }

  async #enforceExisting(
    cgroup: string,
    limits: Readonly<Record<string, string>> | undefined,
    compressible: boolean,
  ): Promise<void> {
    const name = this.#o.cgroupManager.parse(cgroup);
    if (cgroup === "" || name.length === 0) {
      throw new Error(
        `the reserved cgroup must be a non-root cgroup, got ${JSON.stringify(cgroup)}`,
      );
    }
    const rc = cgroupConfigOf(
      limits === undefined ? undefined : resourceList(limits),
      compressible,
    );
    if (rc === undefined) {
      throw new Error(`${formatCgroupName(name)} cgroup is not configured properly`);
    }
    this.#log.v(4).info("Enforcing limits on cgroup", {
      cgroupName: name,
      cpuShares: rc.cpuShares,
      memory: rc.memory,
      pidsLimit: rc.pidsLimit,
    });
    await this.#o.cgroupManager.validate(name);
    await this.#o.cgroupManager.update(name, rc);
  }

  #event(type: "Normal" | "Warning", reason: string, message: string): void {
    const ref = nodeRef(this.#o.nodeName);
    this.#o.recorder.event(ref, type, reason, message);
  }
}
