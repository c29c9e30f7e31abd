/**
 * @module
 * The CPU manager's state: which CPUs each container holds exclusively (pod UID -> container
 * name -> {@link CPUSet}) and the shared pool every other container runs on (the default
 * CPU set). {@link MemoryState} keeps it in memory; {@link CheckpointState} keeps the same in
 * memory and rewrites `<root-dir>/cpu_manager_state` (see `checkpoint.ts`) after each change,
 * one atomic write at a time, and restores it at start: a missing file is written afresh, a
 * file for another policy or one that does not read fails the start with upstream's advice to
 * drain the node and delete the file. Setters are synchronous, as the policy calls them in the
 * middle of an allocation; {@link CheckpointState.flush} waits for the writes they queued.
 * Upstream logs and goes on when a write fails, and so does this.
 *
 * Corresponds to upstream `pkg/kubelet/cm/cpumanager/state` (state.go, state_mem.go,
 * state_checkpoint.go) with the PodLevelResourceManagers gate off, as v1.36 has it by default:
 * no pod-level entries.
 */

import { join } from "node:path";
import { writeFileAtomic } from "../checkpointmanager/checkpoint_manager.ts";
import type { Logger } from "../klog/klog.ts";
import { goQuote } from "../klog/encode.ts";
import { errorText } from "../util/errors.ts";
import {
  CPU_MANAGER_STATE_FILE,
  type DecodeCpuCheckpointOptions,
  decodeCpuManagerCheckpoint,
  encodeCpuManagerCheckpoint,
} from "./checkpoint.ts";
import { CPUSet } from "./cpuset.ts";

/** Pod UID -> container name -> the container's exclusive CPUs (upstream ContainerCPUAssignments). */
export type ContainerCPUAssignments = Map<string, Map<string, CPUSet>>;

/** A deep copy of `a` (the sets themselves are immutable). */
export function cloneAssignments(
  a: ReadonlyMap<string, ReadonlyMap<string, CPUSet>>,
): ContainerCPUAssignments {
  return new Map([...a].map(([pod, containers]) => [pod, new Map(containers)]));
}

/** The CPU manager's state (upstream state.State, without the pod-level entries). */
export interface CPUManagerState {
  /** The container's exclusive CPUs, undefined when it has none. */
  getCPUSet(podUID: string, containerName: string): CPUSet | undefined;
  /** The shared pool. */
  getDefaultCPUSet(): CPUSet;
  /** The container's exclusive CPUs, else the shared pool. */
  getCPUSetOrDefault(podUID: string, containerName: string): CPUSet;
  /** A copy of every assignment. */
  getCPUAssignments(): ContainerCPUAssignments;
  setCPUSet(podUID: string, containerName: string, cpus: CPUSet): void;
  setDefaultCPUSet(cpus: CPUSet): void;
  /** Replaces every assignment with a copy of `a`. */
  setCPUAssignments(a: ReadonlyMap<string, ReadonlyMap<string, CPUSet>>): void;
  /** Forgets the container's assignment, and the pod once it has none left. */
  delete(podUID: string, containerName: string): void;
  /** Empties the shared pool and forgets every assignment. */
  clearState(): void;
}

/** The state in memory (upstream stateMemory). */
export class MemoryState implements CPUManagerState {
  #assignments: ContainerCPUAssignments = new Map();
  #defaultCPUSet = new CPUSet();
  readonly #logger: Logger | undefined;

  /** `logger` gets upstream's lines for each change. */
  constructor(logger?: Logger) {
    this.#logger = logger;
  }

  getCPUSet(podUID: string, containerName: string): CPUSet | undefined {
    return this.#assignments.get(podUID)?.get(containerName);
  }

  getDefaultCPUSet(): CPUSet {
    return this.#defaultCPUSet;
  }

  getCPUSetOrDefault(podUID: string, containerName: string): CPUSet {
    return this.getCPUSet(podUID, containerName) ?? this.#defaultCPUSet;
  }

  getCPUAssignments(): ContainerCPUAssignments {
    return cloneAssignments(this.#assignments);
  }

  setCPUSet(podUID: string, containerName: string, cpus: CPUSet): void {
    let pod = this.#assignments.get(podUID);
    if (pod === undefined) this.#assignments.set(podUID, pod = new Map());
    pod.set(containerName, cpus);
    this.#logger?.info("Updated desired CPUSet", {
      podUID,
      containerName,
      cpuSet: cpus.toString(),
    });
  }

  setDefaultCPUSet(cpus: CPUSet): void {
    this.#defaultCPUSet = cpus;
    this.#logger?.info("Updated default CPUSet", { cpuSet: cpus.toString() });
  }

  setCPUAssignments(a: ReadonlyMap<string, ReadonlyMap<string, CPUSet>>): void {
    this.#assignments = cloneAssignments(a);
    this.#logger?.info("Updated CPUSet assignments", { assignments: formatAssignments(a) });
  }

  delete(podUID: string, containerName: string): void {
    const pod = this.#assignments.get(podUID);
    pod?.delete(containerName);
    if (pod?.size === 0) this.#assignments.delete(podUID);
    this.#logger?.v(2).info("Deleted CPUSet assignment", { podUID, containerName });
  }

  clearState(): void {
    this.#defaultCPUSet = new CPUSet();
    this.#assignments = new Map();
    this.#logger?.v(2).info("Cleared state");
  }
}

/** Assignments as Go's %v prints them: `map[pod:map[c:0-3]]`, keys sorted. */
function formatAssignments(a: ReadonlyMap<string, ReadonlyMap<string, CPUSet>>): string {
  const sorted = <V>(m: ReadonlyMap<string, V>) =>
    [...m].sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0));
  return `map[${
    sorted(a).map(([pod, cs]) =>
      `${pod}:map[${sorted(cs).map(([c, set]) => `${c}:${set}`).join(" ")}]`
    ).join(" ")
  }]`;
}

/** The checkpoint could not be restored; the message is upstream's, naming the file. */
export class CPUStateRestoreError extends Error {
  override name = "CPUStateRestoreError";
}

/** How {@link CheckpointState.open} finds and reads the checkpoint. */
export interface CheckpointStateOptions {
  /** The kubelet's root directory (upstream stateDir). */
  readonly directory: string;
  /** The configured policy's name; a checkpoint of another one is refused. */
  readonly policyName: string;
  /** @default "cpu_manager_state" */
  readonly fileName?: string;
  /** The pod and container of a V1 file's container IDs (upstream initialContainers). */
  readonly containerRef?: DecodeCpuCheckpointOptions["containerRef"];
  readonly logger: Logger;
}

/**
 * The state in memory, written to its checkpoint after every change (upstream
 * stateCheckpoint).
 */
export class CheckpointState implements CPUManagerState {
  /** The checkpoint file. */
  readonly path: string;
  readonly policyName: string;
  readonly #cache: MemoryState;
  readonly #logger: Logger;
  #writing: Promise<void> = Promise.resolve();

  private constructor(path: string, policyName: string, logger: Logger) {
    this.path = path;
    this.policyName = policyName;
    this.#logger = logger;
    this.#cache = new MemoryState(logger);
  }

  /**
   * Restores the state from its checkpoint, writing one when there is none (upstream
   * NewCheckpointState). Throws {@link CPUStateRestoreError} "could not restore state from
   * checkpoint: <why>, please drain this node and delete the CPU manager checkpoint file
   * "<path>" before restarting Kubelet".
   */
  static async open(o: CheckpointStateOptions): Promise<CheckpointState> {
    const path = join(o.directory, o.fileName ?? CPU_MANAGER_STATE_FILE);
    const state = new CheckpointState(path, o.policyName, o.logger);
    try {
      await state.#restore(o);
    } catch (e) {
      throw new CPUStateRestoreError(
        `could not restore state from checkpoint: ${errorText(e)}, please drain this node ` +
          `and delete the CPU manager checkpoint file ${goQuote(path)} before restarting Kubelet`,
        { cause: e },
      );
    }
    return state;
  }

  async #restore(o: CheckpointStateOptions): Promise<void> {
    let text: string;
    try {
      text = await Deno.readTextFile(this.path);
    } catch (e) {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
      await writeFileAtomic(this.path, this.#encode());
      return;
    }
    const cp = decodeCpuManagerCheckpoint(text, this.path, { containerRef: o.containerRef });
    if (cp.version === 1) this.#logger.info("migrating cpu manager checkpoint from v1 to v2");
    if (cp.policyName !== this.policyName) {
      throw new Error(
        `configured policy ${goQuote(this.policyName)} differs from state checkpoint policy ${
          goQuote(cp.policyName)
        }`,
      );
    }
    let defaultCPUSet: CPUSet;
    try {
      defaultCPUSet = CPUSet.parse(cp.defaultCpuSet);
    } catch (e) {
      throw new Error(
        `could not parse default cpu set ${goQuote(cp.defaultCpuSet)}: ${errorText(e)}`,
        { cause: e },
      );
    }
    const assignments: ContainerCPUAssignments = new Map();
    for (const [pod, containers] of cp.entries) {
      const m = new Map<string, CPUSet>();
      for (const [container, text] of containers) {
        try {
          m.set(container, CPUSet.parse(text));
        } catch (e) {
          throw new Error(
            `could not parse cpuset ${goQuote(text)} for container ${goQuote(container)} in pod ${
              goQuote(pod)
            }: ${errorText(e)}`,
            { cause: e },
          );
        }
      }
      assignments.set(pod, m);
    }
    this.#cache.setDefaultCPUSet(defaultCPUSet);
    this.#cache.setCPUAssignments(assignments);
    this.#logger.v(2).info("restored state from checkpoint");
    this.#logger.v(2).info("defaultCPUSet", { defaultCpuSet: defaultCPUSet.toString() });
  }

  #encode(): string {
    const entries = new Map<string, Map<string, string>>();
    for (const [pod, containers] of this.#cache.getCPUAssignments()) {
      entries.set(pod, new Map([...containers].map(([c, set]) => [c, set.toString()])));
    }
    return encodeCpuManagerCheckpoint({
      policyName: this.policyName,
      defaultCpuSet: this.#cache.getDefaultCPUSet().toString(),
      entries,
    });
  }

  /** Queues a write of the current state; a failure is logged, as upstream does. */
  #store(kv: Record<string, unknown> = {}): void {
    const text = this.#encode();
    this.#writing = this.#writing.then(async () => {
      try {
        await writeFileAtomic(this.path, text);
      } catch (e) {
        this.#logger.error(e, "Failed to store state to checkpoint", kv);
      }
    });
  }

  /** Resolves once every change made so far is on disk (or its write failed and was logged). */
  flush(): Promise<void> {
    return this.#writing;
  }

  getCPUSet(podUID: string, containerName: string): CPUSet | undefined {
    return this.#cache.getCPUSet(podUID, containerName);
  }

  getDefaultCPUSet(): CPUSet {
    return this.#cache.getDefaultCPUSet();
  }

  getCPUSetOrDefault(podUID: string, containerName: string): CPUSet {
    return this.#cache.getCPUSetOrDefault(podUID, containerName);
  }

  getCPUAssignments(): ContainerCPUAssignments {
    return this.#cache.getCPUAssignments();
  }

  setCPUSet(podUID: string, containerName: string, cpus: CPUSet): void {
    this.#cache.setCPUSet(podUID, containerName, cpus);
    this.#store({ podUID, containerName });
  }

  setDefaultCPUSet(cpus: CPUSet): void {
    this.#cache.setDefaultCPUSet(cpus);
    this.#store();
  }

  setCPUAssignments(a: ReadonlyMap<string, ReadonlyMap<string, CPUSet>>): void {
    this.#cache.setCPUAssignments(a);
    this.#store();
  }

  delete(podUID: string, containerName: string): void {
    this.#cache.delete(podUID, containerName);
    this.#store({ podUID, containerName });
  }

  clearState(): void {
    this.#cache.clearState();
    this.#store();
  }
}
