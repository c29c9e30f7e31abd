/**
 * @module
 * One cgroup per pod under its QoS class cgroup (`kubepods/burstable/pod<uid>`; Guaranteed pods
 * directly under `kubepods`), sized from the pod spec: cpu shares from the requests, CFS quota
 * and memory limit when every container sets one, pids from `podPidsLimit`, hugepages from the
 * requests; no CFS quota for a pod on exclusive CPUs (DisableCPUQuotaWithExclusiveCPUs, through
 * cm/exclusive_cpus.ts), at creation and in the settings an in-place resize writes. Gives the
 * CRI the sandbox's cgroup_parent, finds pod cgroups left on the host and removes them (killing
 * what still runs in them first). Talks to the cgroup manager and, to kill
 * leftovers, to processes by pid. Corresponds to upstream
 * `pkg/kubelet/cm/pod_container_manager_linux.go` and `helpers_linux.go` (ResourceConfigForPod).
 */

import type { V1Pod } from "@kubernetes/client-node";
import type { CgroupManager, ResourceConfig } from "./cgroup_manager.ts";
import { formatCgroupName, newCgroupName } from "./cgroup_manager.ts";
import { kobj, type Logger } from "../klog/klog.ts";
import { getPodQOS } from "../qos/qos.ts";
import type { QOSContainersInfo } from "./qos_container_manager.ts";
import { type PodResourceOptions, resourceConfigForPod } from "./_pod_resources.ts";
import type { ExclusiveCpus } from "./exclusive_cpus.ts";

export { type PodResourceOptions, resourceConfigForPod } from "./_pod_resources.ts";

/** Options of {@link PodContainerManager}. */
export interface PodContainerManagerOptions extends PodResourceOptions {
  cgroupManager: Pick<
    CgroupManager,
    | "name"
    | "runtimeName"
    | "parse"
    | "mountPoints"
    | "exists"
    | "create"
    | "update"
    | "destroy"
    | "pids"
    | "reduceCPULimits"
    | "config"
    | "memoryUsage"
  >;
  /** From the QoS container manager. */
  qosContainers: QOSContainersInfo;
  /** Sends SIGKILL to a process. @default Deno.kill(pid, "SIGKILL") */
  kill?: (pid: number) => void;
  /**
   * Pods on exclusive CPUs, whose cgroup gets no CFS quota (newExclusiveCpus).
   * @default none: every pod's CPU limit is enforced (with enforceCPULimits)
   */
  exclusiveCpus?: Pick<ExclusiveCpus, "pod">;
  logger: Logger;
}

const POD_PREFIX = "pod";

/** Pod-level cgroups (upstream `podContainerManagerImpl`). */
export class PodContainerManager {
  readonly #cm: PodContainerManagerOptions["cgroupManager"];
  readonly #qos: QOSContainersInfo;
  readonly #opts: PodResourceOptions;
  readonly #kill: (pid: number) => void;
  readonly #exclusive: Pick<ExclusiveCpus, "pod"> | undefined;
  readonly #log: Logger;

  constructor(opts: PodContainerManagerOptions) {
    this.#cm = opts.cgroupManager;
    this.#qos = opts.qosContainers;
    this.#opts = {
      enforceCPULimits: opts.enforceCPULimits,
      cpuPeriodUs: opts.cpuPeriodUs,
      podPidsLimit: opts.podPidsLimit,
    };
    this.#kill = opts.kill ?? ((pid) => Deno.kill(pid, "SIGKILL"));
    this.#exclusive = opts.exclusiveCpus;
    this.#log = opts.logger;
  }

  /** upstream ResourceConfigForPod, without CPU limits enforced for a pod on exclusive CPUs. */
  #config(pod: V1Pod): ResourceConfig {
    if (this.#opts.enforceCPULimits && this.#exclusive?.pod(pod)) {
      this.#log.v(2).info("Disabled CFS quota", { pod: kobj(pod) });
      return resourceConfigForPod(pod, { ...this.#opts, enforceCPULimits: false });
    }
    return resourceConfigForPod(pod, this.#opts);
  }

  /** The pod's CgroupName: its QoS class cgroup plus "pod<uid>" (GetPodContainerName). */
  cgroupName(pod: V1Pod): string[] {
    const uid = pod.metadata?.uid ?? "";
    if (uid === "") throw new RangeError("Cannot name a pod cgroup: the pod has no metadata.uid");
    const qos = getPodQOS(pod);
    const parent = qos === "Guaranteed"
      ? this.#qos.guaranteed
      : qos === "Burstable"
      ? this.#qos.burstable
      : this.#qos.bestEffort;
    return newCgroupName(parent, `${POD_PREFIX}${uid}`);
  }

  /** What the CRI gets as the sandbox's cgroup_parent (upstream GetPodCgroupParent). */
  cgroupParent(pod: V1Pod): string {
    return this.#cm.runtimeName(this.cgroupName(pod));
  }

  /** Whether the pod's cgroup exists. */
  exists(pod: V1Pod): Promise<boolean> {
    return this.#cm.exists(this.cgroupName(pod));
  }

  /**
   * Creates the pod's cgroup with its limits when it does not exist; an existing one is left
   * as it is, as upstream (see {@link update}).
   */
  async ensureExists(pod: V1Pod): Promise<void> {
    if (!await this.exists(pod)) await this.create(pod);
  }

  /**
   * Creates the pod's cgroup with its limits, for a caller that has just seen it missing
   * ({@link exists}); the directories of one that exists after all are kept, its limits set.
   */
  async create(pod: V1Pod): Promise<void> {
    const name = this.cgroupName(pod);
    try {
      await this.#cm.create(name, this.#config(pod));
    } catch (e) {
      throw new Error(
        `failed to create container for ${formatCgroupName(name)} : ${(e as Error).message}`,
        { cause: e },
      );
    }
  }

  /** Applies the spec's limits to the existing pod cgroup again. */
  update(pod: V1Pod): Promise<void> {
    return this.#cm.update(this.cgroupName(pod), this.#config(pod));
  }

  /** The pod cgroup's current cpu or memory settings (upstream GetPodCgroupConfig). */
  getConfig(pod: V1Pod, resource: "cpu" | "memory"): Promise<ResourceConfig> {
    return this.#cm.config(this.cgroupName(pod), resource);
  }

  /** Writes the given settings, and only those, to the pod's cgroup (SetPodCgroupConfig). */
  setConfig(pod: V1Pod, rc: ResourceConfig): Promise<void> {
    return this.#cm.update(this.cgroupName(pod), rc);
  }

  /** The memory the pod's cgroup uses now, in bytes. */
  memoryUsage(pod: V1Pod): Promise<bigint> {
    return this.#cm.memoryUsage(this.cgroupName(pod));
  }

  /**
   * The settings the pod's spec asks for (upstream ResourceConfigForPod), as the in-place resize
   * writes them: without quota on exclusive CPUs, as upstream's doPodResizeAction.
   */
  specConfig(pod: V1Pod): ResourceConfig {
    return this.#config(pod);
  }

  /**
   * The pods whose cgroups exist on the host, by uid, for cleaning up pods that are gone
   * (upstream GetAllPodsFromCgroups).
   */
  podsFromCgroups(): Map<string, string[]> {
    const found = new Map<string, string[]>();
    const roots = [this.#qos.bestEffort, this.#qos.burstable, this.#qos.guaranteed];
    for (const mount of this.#cm.mountPoints()) {
      for (const root of roots) {
        const literal = this.#cm.name(root);
        let dirs: string[] = [];
        try {
          dirs = readDirs(`${mount}${literal === "/" ? "" : literal}`);
        } catch (e) {
          if (e instanceof Deno.errors.NotFound) continue;
          throw new Error(
            `failed to read the cgroup directory ${mount}${literal} : ${(e as Error).message}`,
            { cause: e },
          );
        }
        for (const dir of dirs) {
          const path = `${literal === "/" ? "" : literal}/${dir}`;
          const name = this.#cm.parse(path);
          const base = name.at(-1) ?? "";
          if (!base.includes(POD_PREFIX)) continue;
          const parts = base.split(POD_PREFIX);
          if (parts.length !== 2) {
            this.#log.info("Pod cgroup manager ignored unexpected cgroup because it is not a pod", {
              path,
            });
            continue;
          }
          found.set(parts[1]!, name);
        }
      }
    }
    return found;
  }

  /** Kills what still runs in the pod's cgroup, then removes it (upstream Destroy). */
  async destroy(uid: string, signal?: AbortSignal): Promise<void> {
    for (const name of await this.#namesOf(uid)) {
      await this.#killProcesses(name);
      try {
        await this.#cm.destroy(name, signal);
      } catch (e) {
        this.#log.info("Failed to delete cgroup paths", {
          cgroupName: name,
          err: (e as Error).message,
        });
        throw new Error(
          `failed to delete cgroup paths for ${formatCgroupName(name)} : ${(e as Error).message}`,
          { cause: e },
        );
      }
    }
  }

  /** Lowers a leftover pod cgroup's cpu shares while its volumes are torn down. */
  async reduceCPULimits(uid: string): Promise<void> {
    for (const name of await this.#namesOf(uid)) await this.#cm.reduceCPULimits(name);
  }

  async #namesOf(uid: string): Promise<string[][]> {
    const out: string[][] = [];
    for (const root of [this.#qos.guaranteed, this.#qos.burstable, this.#qos.bestEffort]) {
      const name = newCgroupName(root, `${POD_PREFIX}${uid}`);
      const literal = this.#cm.name(name);
      for (const mount of this.#cm.mountPoints()) {
        if (await exists(`${mount}${literal}`)) {
          out.push(name);
          break;
        }
      }
    }
    return out;
  }

  async #killProcesses(name: string[]): Promise<void> {
    const pids = await this.#cm.pids(name);
    if (pids.length === 0) return;
    const killed = new Set<number>();
    let errors: string[] = [];
    for (let attempt = 0; attempt < 5; attempt++) {
      if (attempt > 0) {
        this.#log.v(3).info("Attempt failed to kill all unwanted process from cgroup, retrying", {
          attempt,
          cgroupName: name,
        });
      }
      errors = [];
      for (const pid of pids) {
        if (killed.has(pid)) continue;
        try {
          this.#kill(pid);
          killed.add(pid);
        } catch (e) {
          // Gone already is what we wanted.
          if (e instanceof Deno.errors.NotFound) killed.add(pid);
          else errors.push((e as Error).message);
        }
      }
      if (errors.length === 0) return;
    }
    throw new Error(
      `failed to kill all the processes attached to the ${formatCgroupName(name)} cgroups : ` +
        errors.join(", "),
    );
  }
}

/** Subdirectories of `path`; synchronous, as a cgroup directory is listed from memory. */
function readDirs(path: string): string[] {
  const out: string[] = [];
  for (const e of Deno.readDirSync(path)) if (e.isDirectory) out.push(e.name);
  return out;
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch {
    return false;
  }
}
