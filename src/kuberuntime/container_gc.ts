/**
 * @module
 * ContainerGC: removes dead containers, dead pod sandboxes and pod log directories. Exited
 * containers older than `minimumGCAge` are grouped by (pod UID, container name); all of a
 * removed pod's go once every pod source is ready, each group keeps its newest
 * `maxPerPodContainer`, and `maxContainers` caps the total (evenly per group, then oldest
 * first). A container goes with its log files and its /var/log/containers symlink. Sandboxes
 * that are not ready and hold no container go, except the newest of a pod that still exists.
 * Pod log directories of removed pods go, and so do dangling /var/log/containers symlinks of
 * exited containers. One failed removal is logged and the rest go on. Talks to the CRI runtime
 * service, the pod workers (which pods are gone) and the filesystem. Corresponds to upstream
 * `pkg/kubelet/kuberuntime/kuberuntime_gc.go` and `pkg/kubelet/container/container_gc.go`, with
 * the loop of `Kubelet.StartGarbageCollection` (ContainerGCFailed).
 */

import * as api from "../../proto/runtime/v1/api.ts";
import type { Clock } from "../util/clock.ts";
import type { EventRecorder, ObjectRef } from "../client/record.ts";
import { formatDuration } from "../util/duration.ts";
import type { Logger } from "../klog/klog.ts";
import { getContainerInfoFromLabels } from "./labels.ts";
import { containerGone, removeContainer } from "./kuberuntime_container.ts";
import type { InternalContainerLifecycle } from "../cm/internal_container_lifecycle.ts";
import type { RuntimeService } from "../cri/remote_runtime.ts";

/** How often containers are collected (upstream ContainerGCPeriod). */
export const CONTAINER_GC_PERIOD_MS = 60_000;

/** Which dead containers are kept (upstream kubecontainer.GCPolicy). */
export interface ContainerGCPolicy {
  /** --minimum-container-ttl-duration: younger containers are kept. @default 0 */
  readonly minAgeMs: number;
  /** --maximum-dead-containers-per-container; negative: no limit. @default 1 */
  readonly maxPerPodContainer: number;
  /** --maximum-dead-containers; negative: no limit. @default -1 */
  readonly maxContainers: number;
}

/** Which pods are gone (upstream podStateProvider; the pod workers answer it). */
export interface PodStateProvider {
  /** The pod is deleted or evicted and terminated: everything of it may go. */
  shouldPodContentBeRemoved(uid: string): boolean;
  /** The pod is terminated: its containers and sandboxes may go. */
  shouldPodRuntimeBeRemoved(uid: string): boolean;
}

/** Stops a container in unknown state before its removal (upstream killContainer, no pod). */
export type KillContainerFunc = (
  containerId: string,
  containerName: string,
  signal?: AbortSignal,
) => Promise<void>;

/** Options of {@link ContainerGC}. */
export interface ContainerGCOptions {
  readonly runtime: Pick<
    RuntimeService,
    | "listContainers"
    | "containerStatus"
    | "removeContainer"
    | "listPodSandbox"
    | "stopPodSandbox"
    | "removePodSandbox"
  >;
  readonly podStateProvider: PodStateProvider;
  /** Every pod source has sent its first set (upstream SourcesReadyProvider.AllReady). */
  readonly sourcesReady: () => boolean;
  /** @default {@link DEFAULT_CONTAINER_GC_POLICY} */
  readonly policy?: Partial<ContainerGCPolicy>;
  /** config podLogsDir: `<ns>_<name>_<uid>` directories. @default "/var/log/pods" */
  readonly podLogsDirectory?: string;
  /** Where `<pod>_<ns>_<container>-<id>.log` symlinks live. @default "/var/log/containers" */
  readonly legacyContainerLogsDirectory?: string;
  /** Its post-stop hook runs before a container is removed. @default none */
  readonly internalLifecycle?: Pick<InternalContainerLifecycle, "postStopContainer">;
  /**
   * Kills a container in unknown state, reason "Unknown". @default none: such a container is
   * skipped with an error saying this is not supported yet
   */
  readonly killContainer?: KillContainerFunc;
  readonly recorder: EventRecorder;
  /** The node, which ContainerGCFailed is about. */
  readonly nodeRef: ObjectRef;
  readonly clock: Clock;
  readonly logger: Logger;
}

/** Upstream's flag defaults. */
export const DEFAULT_CONTAINER_GC_POLICY: ContainerGCPolicy = {
  minAgeMs: 0,
  maxPerPodContainer: 1,
  maxContainers: -1,
};

/** A policy upstream's NewContainerGC refuses. */
export class ContainerGCPolicyError extends Error {
  override name = "ContainerGCPolicyError";
}

/** A collection that failed in part; `errors` are the parts. */
export class ContainerGCError extends Error {
  override name = "ContainerGCError";
  constructor(message: string, readonly errors: readonly unknown[] = []) {
    super(message);
  }
}

interface GCInfo {
  readonly id: string;
  /** The container's name; unused for sandboxes. */
  readonly name: string;
  /** Nanoseconds since the epoch. */
  readonly createdAt: bigint;
  /** Containers: state unknown, kill first. Sandboxes: ready or holding containers. */
  readonly flag: boolean;
}

const newestFirst = (a: GCInfo, b: GCInfo) =>
  a.createdAt > b.createdAt ? -1 : a.createdAt < b.createdAt ? 1 : 0;

/** Collects dead containers, sandboxes and logs; see the module documentation. */
export class ContainerGC {
  readonly #o: ContainerGCOptions;
  readonly #policy: ContainerGCPolicy;
  readonly #podLogs: string;
  readonly #legacyLogs: string;

  constructor(opts: ContainerGCOptions) {
    const policy = { ...DEFAULT_CONTAINER_GC_POLICY, ...opts.policy };
    if (policy.minAgeMs < 0) {
      throw new ContainerGCPolicyError(
        `invalid minimum garbage collection age: ${formatDuration(policy.minAgeMs)}`,
      );
    }
    this.#o = opts;
    this.#policy = policy;
    this.#podLogs = trimSlash(opts.podLogsDirectory ?? "/var/log/pods");
    this.#legacyLogs = trimSlash(opts.legacyContainerLogsDirectory ?? "/var/log/containers");
  }

  /** The policy in force, defaults filled in. */
  get policy(): ContainerGCPolicy {
    return this.#policy;
  }

  /**
   * Collects every {@link CONTAINER_GC_PERIOD_MS} until `signal` aborts, the first pass at once;
   * a failed pass is logged and recorded as a ContainerGCFailed event.
   */
  async run(
    signal: AbortSignal,
    allSourcesReady: () => boolean = this.#o.sourcesReady,
  ): Promise<void> {
    const { clock, logger } = this.#o;
    let failed = false;
    while (!signal.aborted) {
      try {
        await this.garbageCollect(allSourcesReady(), false, signal);
        logger.v(failed ? 1 : 4).info("Container garbage collection succeeded");
        failed = false;
      } catch (e) {
        if (signal.aborted) return;
        logger.error(e, "Container garbage collection failed");
        this.#o.recorder.event(this.#o.nodeRef, "Warning", "ContainerGCFailed", messageOf(e));
        failed = true;
      }
      try {
        await clock.sleep(CONTAINER_GC_PERIOD_MS, signal);
      } catch {
        return;
      }
    }
  }

  /**
   * Removes everything of terminated pods too (upstream DeleteAllUnusedContainers): what the
   * eviction manager calls to reclaim disk.
   */
  deleteAllUnusedContainers(signal?: AbortSignal): Promise<void> {
    this.#o.logger.info("Attempting to delete unused containers");
    return this.garbageCollect(this.#o.sourcesReady(), true, signal);
  }

  /**
   * One collection (upstream GarbageCollect): containers, then sandboxes, then pod logs. With
   * `evictNonDeletedPods`, terminated pods count as removed. Every step runs; one that could
   * not (a listing failed) is thrown, several as a {@link ContainerGCError} (upstream's
   * aggregate). A failed single removal is only logged.
   */
  async garbageCollect(
    allSourcesReady: boolean,
    evictNonDeletedPods: boolean,
    signal?: AbortSignal,
  ): Promise<void> {
    const errors: unknown[] = [];
    const steps = [
      () => this.#evictContainers(allSourcesReady, evictNonDeletedPods, signal),
      () => this.#evictSandboxes(evictNonDeletedPods, signal),
      () => this.#evictPodLogsDirectories(allSourcesReady, signal),
    ];
    for (const step of steps) {
      try {
        await step();
      } catch (e) {
        signal?.throwIfAborted();
        errors.push(e);
      }
    }
    if (errors.length === 1) throw errors[0];
    if (errors.length > 1) {
      throw new ContainerGCError(`[${errors.map(messageOf).join(", ")}]`, errors);
    }
  }

  #removable(uid: string, evictNonDeletedPods: boolean): boolean {
    const pods = this.#o.podStateProvider;
    return pods.shouldPodContentBeRemoved(uid) ||
      (evictNonDeletedPods && pods.shouldPodRuntimeBeRemoved(uid));
  }

  async #listContainers(signal?: AbortSignal): Promise<api.Container[]> {
    try {
      return await this.#o.runtime.listContainers(api.ContainerFilter.create(), signal);
    } catch (e) {
      signal?.throwIfAborted();
      this.#o.logger.error(e, "ListContainers failed");
      throw e;
    }
  }

  async #evictContainers(
    allSourcesReady: boolean,
    evictNonDeletedPods: boolean,
    signal?: AbortSignal,
  ): Promise<void> {
    const { minAgeMs, maxPerPodContainer, maxContainers } = this.#policy;
    const newestGCTime = BigInt(this.#o.clock.now() - minAgeMs) * 1_000_000n;
    // Evict units: (pod UID, container name), in the order first seen.
    const units = new Map<string, { uid: string; containers: GCInfo[] }>();
    for (const c of await this.#listContainers(signal)) {
      if (c.state === api.ContainerState.CONTAINER_RUNNING) continue;
      if (c.createdAt > newestGCTime) continue;
      const uid = getContainerInfoFromLabels(c.labels).podUid;
      const name = c.metadata?.name ?? "";
      const key = `${uid}\u0000${name}`;
      let unit = units.get(key);
      if (!unit) units.set(key, unit = { uid, containers: [] });
      unit.containers.push({
        id: c.id,
        name,
        createdAt: c.createdAt,
        flag: c.state === api.ContainerState.CONTAINER_UNKNOWN,
      });
    }

    if (allSourcesReady) {
      for (const [key, unit] of units) {
        if (!this.#removable(unit.uid, evictNonDeletedPods)) continue;
        await this.#removeOldestN(unit.containers, unit.containers.length, signal);
        units.delete(key);
      }
    }
    if (maxPerPodContainer >= 0) await this.#enforcePerUnit(units, maxPerPodContainer, signal);

    const count = () => [...units.values()].reduce((n, u) => n + u.containers.length, 0);
    if (maxContainers >= 0 && count() > maxContainers) {
      // An equal share per unit (at least one), then the oldest of what is left.
      await this.#enforcePerUnit(
        units,
        Math.max(1, Math.trunc(maxContainers / units.size)),
        signal,
      );
      const n = count();
      if (n > maxContainers) {
        const flattened = [...units.values()].flatMap((u) => u.containers).sort(newestFirst);
        await this.#removeOldestN(flattened, n - maxContainers, signal);
      }
    }
  }

  async #enforcePerUnit(
    units: Map<string, { containers: GCInfo[] }>,
    max: number,
    signal?: AbortSignal,
  ): Promise<void> {
    for (const unit of units.values()) {
      const toRemove = unit.containers.length - max;
      if (toRemove > 0) {
        unit.containers = await this.#removeOldestN(unit.containers, toRemove, signal);
      }
    }
  }

  /** Removes the oldest `toRemove`, oldest first; returns the rest as if all went. */
  async #removeOldestN(
    containers: GCInfo[],
    toRemove: number,
    signal?: AbortSignal,
  ): Promise<GCInfo[]> {
    const { logger } = this.#o;
    const numToKeep = containers.length - toRemove;
    if (numToKeep > 0) containers.sort(newestFirst);
    for (let i = containers.length - 1; i >= numToKeep; i--) {
      const c = containers[i]!;
      try {
        // A container in unknown state may still run: stop it first.
        if (c.flag) await this.#kill(c, signal);
      } catch (e) {
        signal?.throwIfAborted();
        logger.error(e, "Failed to stop container", { containerID: c.id });
        continue;
      }
      try {
        await this.#removeContainer(c.id, signal);
      } catch (e) {
        signal?.throwIfAborted();
        // Removed meanwhile (the container deletor works beside this pass): not a failure.
        if (containerGone(e)) continue;
        logger.error(e, "Failed to remove container", { containerID: c.id });
      }
    }
    return containers.slice(0, Math.max(0, numToKeep));
  }

  #kill(c: GCInfo, signal?: AbortSignal): Promise<void> {
    const kill = this.#o.killContainer;
    if (!kill) {
      return Promise.reject(
        new Error(
          `killing container ${JSON.stringify(c.id)} in unknown state before its removal ` +
            `is not supported yet: ContainerGC has no killContainer`,
        ),
      );
    }
    return kill(c.id, c.name, signal);
  }

  /** upstream removeContainer, as pod sync removes one (kuberuntime_container.ts). */
  async #removeContainer(id: string, signal?: AbortSignal): Promise<void> {
    await removeContainer(
      {
        logger: this.#o.logger,
        runtime: this.#o.runtime,
        legacyContainerLogsDirectory: this.#legacyLogs,
        internalLifecycle: this.#o.internalLifecycle,
      },
      id,
      signal,
    );
  }

  async #evictSandboxes(evictNonDeletedPods: boolean, signal?: AbortSignal): Promise<void> {
    const containers = await this.#listContainers(signal);
    let sandboxes: api.PodSandbox[];
    try {
      sandboxes = await this.#o.runtime.listPodSandbox(api.PodSandboxFilter.create(), signal);
    } catch (e) {
      signal?.throwIfAborted();
      this.#o.logger.error(e, "ListPodSandbox failed");
      throw e;
    }
    const holding = new Set(containers.map((c) => c.podSandboxId));
    const byPod = new Map<string, GCInfo[]>();
    for (const sb of sandboxes) {
      const uid = sb.metadata?.uid ?? "";
      let list = byPod.get(uid);
      if (!list) byPod.set(uid, list = []);
      list.push({
        id: sb.id,
        name: "",
        createdAt: sb.createdAt,
        flag: sb.state === api.PodSandboxState.SANDBOX_READY || holding.has(sb.id),
      });
    }
    for (const [uid, list] of byPod) {
      // A removed pod loses even its newest dead sandbox; a live one keeps it.
      const toRemove = this.#removable(uid, evictNonDeletedPods) ? list.length : list.length - 1;
      const numToKeep = list.length - toRemove;
      if (numToKeep > 0) list.sort(newestFirst);
      for (let i = list.length - 1; i >= numToKeep; i--) {
        const sb = list[i]!;
        if (!sb.flag) await this.#removeSandbox(sb.id, signal);
      }
    }
  }

  async #removeSandbox(id: string, signal?: AbortSignal): Promise<void> {
    const { logger, runtime } = this.#o;
    logger.v(4).info("Removing sandbox", { sandboxID: id });
    try {
      // The kubelet should have stopped it already; make sure.
      await runtime.stopPodSandbox(id, signal);
    } catch (e) {
      signal?.throwIfAborted();
      logger.error(e, "Failed to stop sandbox before removing", { sandboxID: id });
      return;
    }
    try {
      await runtime.removePodSandbox(id, signal);
    } catch (e) {
      signal?.throwIfAborted();
      logger.error(e, "Failed to remove sandbox", { sandboxID: id });
    }
  }

  async #evictPodLogsDirectories(allSourcesReady: boolean, signal?: AbortSignal): Promise<void> {
    const { logger, runtime } = this.#o;
    if (allSourcesReady) {
      let names: string[];
      try {
        names = await readNames(this.#podLogs);
      } catch (e) {
        throw new ContainerGCError(
          `failed to read podLogsDirectory ${JSON.stringify(this.#podLogs)}: ${messageOf(e)}`,
          [e],
        );
      }
      for (const name of names) {
        const podUID = name.slice(name.lastIndexOf("_") + 1);
        if (!this.#o.podStateProvider.shouldPodContentBeRemoved(podUID)) continue;
        logger.v(4).info("Removing pod logs", { podUID });
        try {
          await Deno.remove(`${this.#podLogs}/${name}`, { recursive: true });
        } catch (e) {
          if (!(e instanceof Deno.errors.NotFound)) {
            logger.error(e, "Failed to remove pod logs directory", { path: name });
          }
        }
      }
    }

    // Dangling symlinks of exited containers; a rotating log is briefly missing too.
    const links = (await readNames(this.#legacyLogs).catch(() => [] as string[]))
      .filter((n) => n.endsWith(".log"));
    for (const link of links) {
      signal?.throwIfAborted();
      const path = `${this.#legacyLogs}/${link}`;
      try {
        await Deno.stat(path);
        continue;
      } catch (e) {
        if (!(e instanceof Deno.errors.NotFound)) continue;
      }
      const containerID = containerIDFromLegacySymlink(path);
      if (containerID instanceof Error) {
        logger.v(4).info("Unable to obtain container ID", { err: containerID });
      } else {
        try {
          const status = (await runtime.containerStatus(containerID, false, signal)).status;
          if (!status) {
            logger.v(4).info("Container status is nil");
            continue;
          }
          if (status.state !== api.ContainerState.CONTAINER_EXITED) {
            logger.v(5).info("Container is still running, not removing symlink", {
              containerID,
              path,
            });
            continue;
          }
        } catch (e) {
          signal?.throwIfAborted();
          logger.info("Error getting ContainerStatus for containerID", { containerID, err: e });
        }
      }
      try {
        await Deno.remove(path);
        logger.v(4).info("Removed symlink", { path });
      } catch (e) {
        logger.error(e, "Failed to remove container log dead symlink", { path });
      }
    }
  }
}

/** upstream getContainerIDFromLegacyLogSymlink: the part after the last "-", without ".log". */
export function containerIDFromLegacySymlink(path: string): string | Error {
  const last = path.slice(path.lastIndexOf("-") + 1);
  if (!last.endsWith(".log")) {
    return new Error(`${JSON.stringify(path)} doesn't end with ".log"`);
  }
  const id = last.slice(0, -".log".length);
  // A runtime finds a container by an id as short as 6 characters.
  if (id.length < 6) return new Error(`container Id ${JSON.stringify(id)} is too short`);
  return id;
}

async function readNames(dir: string): Promise<string[]> {
  const names: string[] = [];
  for await (const e of Deno.readDir(dir)) names.push(e.name);
  return names.sort();
}

function trimSlash(path: string): string {
  return path.length > 1 ? path.replace(/\/+$/, "") : path;
}

function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
