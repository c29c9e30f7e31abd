/**
 * @module
 * The QoS class cgroups under the node allocatable cgroup (`kubepods`): Burstable and
 * BestEffort pods get their own (`kubepods/burstable`, `kubepods/besteffort`); Guaranteed pods
 * sit directly under `kubepods`. Keeps BestEffort at the minimum cpu shares, sizes Burstable's
 * shares to the sum of its pods' CPU requests, leaves hugepages unbounded, and (with the
 * QOSReserved gate and `qosReserved` memory) caps the lower classes' memory so Guaranteed
 * requests stay available. Also the CPU unit conversions of upstream `helpers_linux.go`.
 * Talks to the cgroup manager; the integrator calls {@link QOSContainerManager.updateCgroups}
 * every minute and on pod admission and removal. Corresponds to upstream
 * `pkg/kubelet/cm/qos_container_manager_linux.go`.
 */

import type { V1Pod } from "@kubernetes/client-node";
import type { CgroupManager, ResourceConfig } from "./cgroup_manager.ts";
import { formatCgroupName, newCgroupName } from "./cgroup_manager.ts";
import type { Logger } from "../klog/klog.ts";
import { getPodQOS, type QOSClass } from "../qos/qos.ts";
import { milliValueOf, podRequests, valueOf } from "../qos/resource_helpers.ts";
import { milliCPUToShares, MIN_SHARES } from "./helpers_linux.ts";

/** The CgroupNames of the three QoS classes (upstream `QOSContainersInfo`). */
export interface QOSContainersInfo {
  guaranteed: string[];
  burstable: string[];
  bestEffort: string[];
}

/** A bad `qosReserved` entry. */
export class QOSReservedError extends Error {
  override name = "QOSReservedError";
}

/** Parses `qosReserved` ({memory: "50%"}) into percentages; only memory may be reserved. */
export function parseQOSReserved(m: Readonly<Record<string, string>>): Map<string, bigint> {
  const out = new Map<string, bigint>();
  for (const [k, v] of Object.entries(m)) {
    if (k !== "memory") throw new QOSReservedError(`cannot reserve "${k}" resource`);
    const bad = (why: string) =>
      new QOSReservedError(`failed to parse percentage "${v}" for "${k}" resource: ${why}`);
    if (!v.endsWith("%")) throw bad(`percentage expected, got '${v}'`);
    const n = v.slice(0, -1);
    if (!/^[+-]?\d+$/.test(n)) throw bad(`invalid number in percentage '${v}'`);
    const pct = BigInt(n);
    if (pct < 0n || pct > 100n) throw bad("percentage must be between 0 and 100");
    out.set(k, pct);
  }
  return out;
}

/** Options of {@link QOSContainerManager}. */
export interface QOSContainerManagerOptions {
  cgroupManager: Pick<
    CgroupManager,
    "validate" | "exists" | "create" | "update" | "memoryUsage" | "hugePageSizes" | "inheritCpusets"
  >;
  /** The node allocatable cgroup, e.g. ["kubepods"]. */
  rootName: readonly string[];
  /** Percent of memory held back for higher classes (config `qosReserved`). */
  qosReserved?: Readonly<Record<string, string>>;
  /** The QOSReserved feature gate (alpha). @default false */
  qosReservedGate?: boolean;
  /** Allocatable memory in bytes (capacity minus reservations), for qosReserved. */
  allocatableMemory?: () => bigint | undefined;
  logger: Logger;
}

const UNBOUNDED_HUGEPAGES = 1n << 62n;

/** Creates and keeps the QoS class cgroups (upstream `qosContainerManagerImpl`). */
export class QOSContainerManager {
  readonly #cm: QOSContainerManagerOptions["cgroupManager"];
  readonly #log: Logger;
  readonly #info: QOSContainersInfo;
  readonly #reserved: Map<string, bigint>;
  readonly #allocatable: () => bigint | undefined;
  #queue: Promise<void> = Promise.resolve();
  /** The update queued behind the running one, not started yet. */
  #waiting: Promise<void> | undefined;
  #activePods: () => readonly V1Pod[] = () => [];

  constructor(opts: QOSContainerManagerOptions) {
    this.#cm = opts.cgroupManager;
    this.#log = opts.logger;
    const root = [...opts.rootName];
    this.#info = {
      guaranteed: root,
      burstable: newCgroupName(root, "burstable"),
      bestEffort: newCgroupName(root, "besteffort"),
    };
    this.#reserved = opts.qosReservedGate ? parseQOSReserved(opts.qosReserved ?? {}) : new Map();
    this.#allocatable = opts.allocatableMemory ?? (() => undefined);
  }

  /** The class cgroups' names, for the pod container manager. */
  containersInfo(): QOSContainersInfo {
    return this.#info;
  }

  /**
   * Checks the node allocatable cgroup exists and creates (or refreshes) the Burstable and
   * BestEffort cgroups. The caller runs {@link updateCgroups} right after, then every minute.
   */
  async start(): Promise<void> {
    const root = this.#info.guaranteed;
    try {
      await this.#cm.validate(root);
    } catch (e) {
      throw new Error(
        `error validating root container ${formatCgroupName(root)} : ${(e as Error).message}`,
        { cause: e },
      );
    }
    await this.#inheritCpusets(root);
    const classes: [QOSClass, string[]][] = [
      ["Burstable", this.#info.burstable],
      ["BestEffort", this.#info.bestEffort],
    ];
    for (const [qos, name] of classes) {
      const rc: ResourceConfig = { hugePageLimit: await this.#unboundedHugePages() };
      if (qos === "BestEffort") rc.cpuShares = MIN_SHARES;
      const exists = await this.#cm.exists(name);
      try {
        if (exists) await this.#cm.update(name, rc);
        else await this.#cm.create(name, rc);
      } catch (e) {
        const verb = exists ? "update" : "create";
        throw new Error(
          `failed to ${verb} top level ${qos} QOS cgroup : ${(e as Error).message}`,
          { cause: e },
        );
      }
      await this.#inheritCpusets(name);
    }
  }

  /**
   * New pod cgroups below `name` take its cpus and mems as they are made (see
   * {@link CgroupManager.inheritCpusets}); a failure only costs speed, so it is logged.
   */
  async #inheritCpusets(name: readonly string[]): Promise<void> {
    try {
      await this.#cm.inheritCpusets(name);
    } catch (e) {
      this.#log.error(e, "Failed to let new cpuset cgroups inherit their parent's cpus and mems", {
        cgroupName: name,
      });
    }
  }

  /**
   * Recomputes and applies the class cgroups' limits from the active pods; calls are
   * serialized. A call made while another is already waiting to run joins that one: it reads
   * the active pods (from the latest caller's source) only when it starts, so it covers every
   * caller's pod. A burst of new pods then costs two updates, not one each (upstream takes a
   * mutex per call). Throws the first failed update, as upstream.
   */
  updateCgroups(activePods: () => readonly V1Pod[]): Promise<void> {
    this.#activePods = activePods;
    if (this.#waiting) return this.#waiting;
    const run = this.#queue.then(() => {
      this.#waiting = undefined;
      return this.#update(this.#activePods());
    });
    this.#waiting = run;
    this.#queue = run.catch(() => {});
    return run;
  }

  async #update(pods: readonly V1Pod[]): Promise<void> {
    const hugePageLimit = await this.#unboundedHugePages();
    const configs = new Map<QOSClass, { name: string[]; rc: ResourceConfig }>([
      ["Guaranteed", { name: this.#info.guaranteed, rc: { hugePageLimit } }],
      ["Burstable", { name: this.#info.burstable, rc: { hugePageLimit } }],
      ["BestEffort", { name: this.#info.bestEffort, rc: { hugePageLimit } }],
    ]);
    let burstableMilli = 0n;
    for (const pod of pods) {
      if (getPodQOS(pod) !== "Burstable") continue;
      burstableMilli += milliValueOf(podRequests(pod).get("cpu"));
    }
    configs.get("BestEffort")!.rc.cpuShares = MIN_SHARES;
    configs.get("Burstable")!.rc.cpuShares = milliCPUToShares(burstableMilli);

    const memoryPct = this.#reserved.get("memory");
    if (memoryPct !== undefined) {
      this.#setMemoryReserve(configs, pods, memoryPct);
      let ok = true;
      for (const { name, rc } of configs.values()) {
        await this.#cm.update(name, rc).catch(() => ok = false);
      }
      if (ok) {
        this.#log.v(4).info("Updated QoS cgroup configuration");
        return;
      }
      await this.#retrySetMemoryReserve(configs);
    }
    for (const { name, rc } of configs.values()) {
      try {
        await this.#cm.update(name, rc);
      } catch (e) {
        this.#log.error(e, "Failed to update QoS cgroup configuration");
        throw e;
      }
    }
    this.#log.v(4).info("Updated QoS cgroup configuration");
  }

  async #unboundedHugePages(): Promise<Map<number, bigint>> {
    const sizes = await this.#cm.hugePageSizes();
    return new Map(sizes.map((s) => [s, UNBOUNDED_HUGEPAGES]));
  }

  /** Lower classes get allocatable memory minus the reserved share of higher requests. */
  #setMemoryReserve(
    configs: Map<QOSClass, { rc: ResourceConfig }>,
    pods: readonly V1Pod[],
    pct: bigint,
  ): void {
    const allocatable = this.#allocatable();
    if (allocatable === undefined) {
      this.#log.v(2).info(
        "Allocatable memory value could not be determined, not setting QoS memory limits",
      );
      return;
    }
    if (allocatable === 0n) {
      this.#log.v(2).info(
        "Allocatable memory reported as 0, might be in standalone mode, not setting QoS memory limits",
      );
      return;
    }
    const requests = { Guaranteed: 0n, Burstable: 0n };
    for (const pod of pods) {
      const qos = getPodQOS(pod);
      if (qos === "BestEffort") continue;
      requests[qos] += valueOf(podRequests(pod).get("memory"));
    }
    for (const [qos, limits] of Object.entries(requests)) {
      this.#log.v(2).info("QoS pod memory limit", { qos, limits, percentReserve: pct });
    }
    const burstable = allocatable - (requests.Guaranteed * pct) / 100n;
    configs.get("Burstable")!.rc.memory = burstable;
    configs.get("BestEffort")!.rc.memory = burstable - (requests.Burstable * pct) / 100n;
  }

  /** A class already above its new limit is capped at its usage instead, to stop growth. */
  async #retrySetMemoryReserve(
    configs: Map<QOSClass, { name: string[]; rc: ResourceConfig }>,
  ): Promise<void> {
    for (const { name, rc } of configs.values()) {
      let usage: bigint;
      try {
        usage = await this.#cm.memoryUsage(name);
      } catch (e) {
        this.#log.v(2).info("Failed to get resource stats", { err: (e as Error).message });
        return;
      }
      if (rc.memory !== undefined && usage > rc.memory) rc.memory = usage;
    }
  }
}
