/**
 * @module
 * The memory manager's state: each NUMA node's accounting by memory type (the machine state)
 * and the blocks each container was given, kept in memory and, for the kubelet, in the
 * `memory_manager_state` checkpoint of checkpoint.ts. Readers get copies, as upstream's
 * `Clone`s give, so a policy edits a copy and sets it back. {@link CheckpointedMemoryState}
 * restores the file at start (a missing one is written empty; a bad one, or one of another
 * policy, fails the start with upstream's "could not restore state from checkpoint: ..."
 * wording) and writes the file after every change; writes run one at a time, each with the
 * newest state, and a failed write is logged, as upstream logs "Failed to store state to
 * checkpoint" and carries on. Corresponds to upstream
 * `pkg/kubelet/cm/memorymanager/state/state_mem.go` and `state_checkpoint.go` (the V1 format;
 * the PodLevelResourceManagers gate's pod entries are not kept).
 */

import { CheckpointManager } from "../checkpointmanager/checkpoint_manager.ts";
import type { Logger } from "../klog/klog.ts";
import { errorText } from "../util/errors.ts";
import {
  type Block,
  decodeMemoryManagerCheckpoint,
  encodeMemoryManagerCheckpoint,
  MEMORY_MANAGER_STATE_FILE,
  type MemoryManagerCheckpoint,
} from "./checkpoint.ts";

/** One NUMA node's accounting of one memory type, in bytes; a policy's working copy. */
export interface MemoryTableState {
  totalMemSize: number;
  systemReserved: number;
  allocatable: number;
  reserved: number;
  free: number;
}

/** One NUMA node's state; a policy's working copy (upstream NUMANodeState). */
export interface NodeState {
  numberOfAssignments: number;
  memoryMap: Map<string, MemoryTableState>;
  cells: number[];
}

/** NUMA node id to its state (upstream NUMANodeMap). */
export type MachineState = Map<number, NodeState>;

/** Pod UID -> container name -> blocks (upstream ContainerMemoryAssignments). */
export type Assignments = Map<string, Map<string, Block[]>>;

/** A copy of a machine state. */
export function cloneMachineState(m: ReadonlyMap<number, Readonly<NodeState>>): MachineState {
  const out: MachineState = new Map();
  for (const [node, s] of m) {
    out.set(node, {
      numberOfAssignments: s.numberOfAssignments,
      cells: [...s.cells],
      memoryMap: new Map([...s.memoryMap].map(([r, t]) => [r, { ...t }])),
    });
  }
  return out;
}

function cloneBlocks(blocks: readonly Block[]): Block[] {
  return blocks.map((b) => ({ ...b, numaAffinity: [...b.numaAffinity] }));
}

function cloneAssignments(a: ReadonlyMap<string, ReadonlyMap<string, readonly Block[]>>) {
  const out: Assignments = new Map();
  for (const [pod, containers] of a) {
    out.set(pod, new Map([...containers].map(([c, b]) => [c, cloneBlocks(b)])));
  }
  return out;
}

/** The state in memory (upstream stateMemory). */
export class MemoryState {
  #machine: MachineState = new Map();
  #assignments: Assignments = new Map();

  /** Runs after every change; the checkpointed state writes the file. */
  protected onChange(): void {}

  /** A copy of the machine state. */
  getMachineState(): MachineState {
    return cloneMachineState(this.#machine);
  }

  /** A copy of the container's blocks; undefined when it has none recorded. */
  getMemoryBlocks(podUID: string, containerName: string): Block[] | undefined {
    const blocks = this.#assignments.get(podUID)?.get(containerName);
    return blocks === undefined ? undefined : cloneBlocks(blocks);
  }

  /** A copy of every container's blocks. */
  getMemoryAssignments(): Assignments {
    return cloneAssignments(this.#assignments);
  }

  /** Replaces the machine state with a copy of `m`. */
  setMachineState(m: ReadonlyMap<number, Readonly<NodeState>>): void {
    this.#machine = cloneMachineState(m);
    this.onChange();
  }

  /** Records the container's blocks. */
  setMemoryBlocks(podUID: string, containerName: string, blocks: readonly Block[]): void {
    let pod = this.#assignments.get(podUID);
    if (pod === undefined) this.#assignments.set(podUID, pod = new Map());
    pod.set(containerName, cloneBlocks(blocks));
    this.onChange();
  }

  /** Replaces every container's blocks with a copy of `a`. */
  setMemoryAssignments(a: ReadonlyMap<string, ReadonlyMap<string, readonly Block[]>>): void {
    this.#assignments = cloneAssignments(a);
    this.onChange();
  }

  /** Forgets the container's blocks, and the pod once it has none left. */
  delete(podUID: string, containerName: string): void {
    const pod = this.#assignments.get(podUID);
    if (pod === undefined) return;
    pod.delete(containerName);
    if (pod.size === 0) this.#assignments.delete(podUID);
    this.onChange();
  }

  /** Forgets everything. */
  clearState(): void {
    this.#machine = new Map();
    this.#assignments = new Map();
    this.onChange();
  }
}

/** The checkpoint could not be restored; the kubelet must not start. */
export class MemoryStateRestoreError extends Error {
  override name = "MemoryStateRestoreError";
}

/** Where and how {@link CheckpointedMemoryState.restore} keeps the state. */
export interface CheckpointedMemoryStateOptions {
  /** The kubelet's root directory (`rootDirectory`); the file is `memory_manager_state` in it. */
  readonly directory: string;
  /** The configured policy name, recorded in and checked against the file. */
  readonly policyName: string;
  readonly logger: Logger;
}

/** A {@link MemoryState} written to the checkpoint after every change (upstream stateCheckpoint). */
export class CheckpointedMemoryState extends MemoryState {
  readonly path: string;
  readonly #manager: CheckpointManager;
  readonly #policyName: string;
  readonly #logger: Logger;
  #dirty = false;
  #writing: Promise<void> | undefined;

  private constructor(o: CheckpointedMemoryStateOptions) {
    super();
    this.#manager = new CheckpointManager({ directory: o.directory });
    this.path = this.#manager.path(MEMORY_MANAGER_STATE_FILE);
    this.#policyName = o.policyName;
    this.#logger = o.logger;
  }

  /**
   * The state in the checkpoint, or an empty one written to a new file when there is none.
   * Throws {@link MemoryStateRestoreError} with upstream's message when the file cannot be read
   * or written, is corrupt, or names another policy.
   */
  static async restore(o: CheckpointedMemoryStateOptions): Promise<CheckpointedMemoryState> {
    const s = new CheckpointedMemoryState(o);
    try {
      const cp = await s.#manager.getCheckpoint(MEMORY_MANAGER_STATE_FILE, {
        encode: encodeMemoryManagerCheckpoint,
        decode: decodeMemoryManagerCheckpoint,
      });
      if (cp === undefined) {
        await s.#write();
      } else {
        if (cp.policyName !== o.policyName) {
          throw new Error(
            `[memorymanager] configured policy ${JSON.stringify(o.policyName)} differs from ` +
              `state checkpoint policy ${JSON.stringify(cp.policyName)}`,
          );
        }
        s.#restoring(cp);
        o.logger.v(2).info("State checkpoint: restored state from checkpoint");
      }
    } catch (e) {
      throw new MemoryStateRestoreError(
        `could not restore state from checkpoint: ${errorText(e)}, please drain this node and ` +
          `delete the memory manager checkpoint file ${JSON.stringify(s.path)} before ` +
          "restarting Kubelet",
        { cause: e },
      );
    }
    return s;
  }

  #restoring(cp: MemoryManagerCheckpoint): void {
    // Upstream sets the cache directly: restoring does not rewrite the file.
    const machine: MachineState = new Map();
    for (const [node, st] of cp.machineState) {
      machine.set(node, {
        numberOfAssignments: st.numberOfAssignments,
        cells: [...st.cells],
        memoryMap: new Map([...st.memoryMap].map(([r, t]) => [r, { ...t }])),
      });
    }
    this.#silently(() => {
      this.setMachineState(machine);
      this.setMemoryAssignments(cp.entries);
    });
  }

  protected override onChange(): void {
    this.#schedule();
  }

  #quiet = false;
  #silently(f: () => void): void {
    this.#quiet = true;
    try {
      f();
    } finally {
      this.#quiet = false;
    }
  }

  /** Resolves once every change made so far is on disk (or its write has failed and been logged). */
  async flush(): Promise<void> {
    while (this.#writing !== undefined) await this.#writing;
  }

  #schedule(): void {
    if (this.#quiet) return;
    this.#dirty = true;
    if (this.#writing !== undefined) return;
    this.#writing = (async () => {
      try {
        while (this.#dirty) {
          this.#dirty = false;
          try {
            await this.#write();
          } catch (e) {
            this.#logger.error(e, "Failed to store state to checkpoint");
          }
        }
      } finally {
        this.#writing = undefined;
      }
    })();
  }

  #write(): Promise<void> {
    const value: MemoryManagerCheckpoint = {
      policyName: this.#policyName,
      machineState: this.getMachineState(),
      entries: this.getMemoryAssignments(),
    };
    return this.#manager.createCheckpoint(
      MEMORY_MANAGER_STATE_FILE,
      { encode: encodeMemoryManagerCheckpoint, decode: decodeMemoryManagerCheckpoint },
      value,
    );
  }
}
