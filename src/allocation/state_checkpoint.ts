/**
 * @module
 * The resources of each pod's containers, kept in memory and in a checkpoint file under the
 * kubelet's root directory, so that they survive a restart: `allocated_pods_state` holds what
 * the kubelet admitted (the allocation manager's), `actuated_pods_state` what the runtime was
 * last told (the runtime manager's). The file has upstream's format, `{"data": <JSON>,
 * "checksum": <FNV-1a 32 of spew's "(string)" + data>}`, so the Go kubelet and this one read
 * each other's. A file that does not parse or whose checksum does not match is an error naming
 * the file: the node must be drained and the file removed, as upstream says. Corresponds to
 * upstream `pkg/kubelet/allocation/state` (state_mem.go, state_checkpoint.go, checkpoint.go)
 * and `pkg/kubelet/checkpointmanager` (checksum, atomic file store).
 */

import type { V1ResourceRequirements } from "@kubernetes/client-node";
import { join } from "node:path";
import { fnv1a32 } from "../util/fnv.ts";
import { writeFileAtomic } from "../checkpointmanager/checkpoint_manager.ts";

/** The checkpoint the allocation manager keeps (upstream allocatedPodsStateFile). */
export const ALLOCATED_PODS_STATE_FILE = "allocated_pods_state";
/** The checkpoint the runtime manager keeps (upstream actuatedPodsStateFile). */
export const ACTUATED_PODS_STATE_FILE = "actuated_pods_state";

/** One pod's resources: its containers' by name, and its pod-level resources if any. */
export interface PodResourceInfo {
  readonly containerResources: ReadonlyMap<string, V1ResourceRequirements>;
  readonly podLevelResources?: V1ResourceRequirements;
}

/** Where a {@link ResourceState} keeps its checkpoint; without one it lives in memory only. */
export interface ResourceStateOptions {
  /** The kubelet's root directory. */
  readonly directory: string;
  /** {@link ALLOCATED_PODS_STATE_FILE} or {@link ACTUATED_PODS_STATE_FILE}. */
  readonly name: string;
}

/** The checkpoint could not be read back; the message names the file and says what to do. */
export class CheckpointError extends Error {
  override name = "CheckpointError";
}

/** Pod resources by pod UID, in memory and, with options, checkpointed on every change. */
export class ResourceState {
  readonly #pods = new Map<string, PodResourceInfo>();
  readonly #path: string | undefined;
  #lastChecksum = -1;
  /** Writes happen one at a time, in the order of the changes. */
  #writing: Promise<void> = Promise.resolve();
  /** The write queued behind the one under way, not started yet: later changes join it. */
  #queued: Promise<void> | undefined;

  private constructor(path: string | undefined) {
    this.#path = path;
  }

  /** A state that is not persisted (tests, and the Go kubelet's NewInMemoryManager). */
  static inMemory(): ResourceState {
    return new ResourceState(undefined);
  }

  /**
   * Restores the checkpoint at `<directory>/<name>`; a missing file is an empty state. Throws
   * {@link CheckpointError} for a file that is corrupt.
   */
  static async open(opts: ResourceStateOptions): Promise<ResourceState> {
    const path = join(opts.directory, opts.name);
    const state = new ResourceState(path);
    let text: string;
    try {
      text = await Deno.readTextFile(path);
    } catch (e) {
      if (e instanceof Deno.errors.NotFound) return state;
      throw new CheckpointError(`could not read checkpoint ${path}: ${(e as Error).message}`);
    }
    try {
      const { entries, checksum } = decodeCheckpoint(text);
      for (const [uid, info] of entries) state.#pods.set(uid, info);
      state.#lastChecksum = checksum;
    } catch (e) {
      throw new CheckpointError(
        `could not restore state from checkpoint: ${(e as Error).message}, please drain this ` +
          `node and delete pod resource information checkpoint file ${
            JSON.stringify(path)
          } before restarting Kubelet`,
      );
    }
    return state;
  }

  /** The pod's resources, if any are recorded. */
  get(uid: string): PodResourceInfo | undefined {
    return this.#pods.get(uid);
  }

  /** One container's resources, if recorded. */
  getContainer(uid: string, name: string): V1ResourceRequirements | undefined {
    return this.#pods.get(uid)?.containerResources.get(name);
  }

  /** The UIDs of every pod recorded. */
  uids(): string[] {
    return [...this.#pods.keys()];
  }

  /** Replaces the pod's resources and checkpoints them (the memory changes at once). */
  set(uid: string, info: PodResourceInfo): Promise<void> {
    this.#pods.set(uid, {
      containerResources: new Map(
        [...info.containerResources].map(([n, r]) => [n, copyRequirements(r)]),
      ),
      ...(info.podLevelResources
        ? { podLevelResources: copyRequirements(info.podLevelResources) }
        : {}),
    });
    return this.#store();
  }

  /** Records one container's resources (keeping the pod's others) and checkpoints them. */
  setContainer(uid: string, name: string, r: V1ResourceRequirements): Promise<void> {
    const old = this.#pods.get(uid);
    const containers = new Map(old?.containerResources ?? []);
    containers.set(name, copyRequirements(r));
    this.#pods.set(uid, { ...old, containerResources: containers });
    return this.#store();
  }

  /** The pod's pod-level resources, if recorded. */
  getPodLevel(uid: string): V1ResourceRequirements | undefined {
    return this.#pods.get(uid)?.podLevelResources;
  }

  /**
   * Records the pod's pod-level resources (keeping its containers') and checkpoints them
   * (upstream SetPodLevelResources).
   */
  setPodLevel(uid: string, r: V1ResourceRequirements): Promise<void> {
    const old = this.#pods.get(uid);
    this.#pods.set(uid, {
      containerResources: new Map(old?.containerResources ?? []),
      podLevelResources: copyRequirements(r),
    });
    return this.#store();
  }

  /** Forgets the pod. */
  remove(uid: string): Promise<void> {
    if (!this.#pods.delete(uid)) return Promise.resolve();
    return this.#store();
  }

  /** Forgets every pod not in `keep` (upstream RemoveOrphanedPods). */
  removeOrphans(keep: ReadonlySet<string>): Promise<void> {
    let changed = false;
    for (const uid of [...this.#pods.keys()]) {
      if (!keep.has(uid)) changed = this.#pods.delete(uid) || changed;
    }
    return changed ? this.#store() : Promise.resolve();
  }

  /**
   * Checkpoints the state: the memory changes before the write, so a caller that does not wait
   * sees its change at once. Writes are serialized, and the state is encoded when its write
   * starts: changes made while a write is under way share the one write after it (a burst of
   * pod admissions writes the file a few times, not once per pod with every pod in it).
   */
  #store(): Promise<void> {
    const path = this.#path;
    if (path === undefined) return Promise.resolve();
    if (this.#queued === undefined) {
      const next = this.#writing.then(() => {
        this.#queued = undefined;
        return this.#write(path);
      });
      this.#queued = next;
      this.#writing = next.catch(() => {});
    }
    return this.#queued;
  }

  /** Writes the state as it is now, unless the file already holds it. */
  async #write(path: string): Promise<void> {
    const { text, checksum } = encodeCheckpoint(this.#pods);
    if (checksum === this.#lastChecksum) return;
    // Written aside, synced and renamed (upstream's filestore), so a crash or a power loss leaves
    // the old file or the new one, never half; a failed write leaves no temporary file.
    try {
      await writeFileAtomic(path, text);
    } catch (e) {
      throw new CheckpointError((e as Error).message, { cause: e });
    }
    this.#lastChecksum = checksum;
  }
}

/** A deep copy of requests and limits (claims are not resources the kubelet sizes). */
export function copyRequirements(r: V1ResourceRequirements): V1ResourceRequirements {
  const out: V1ResourceRequirements = {};
  if (r.limits) out.limits = { ...r.limits };
  if (r.requests) out.requests = { ...r.requests };
  if (r.claims) out.claims = r.claims.map((c) => ({ ...c }));
  return out;
}

/** upstream checksum.New over a string: FNV-1a 32 of spew's `%#v`, `(string)` + the data. */
export function checkpointChecksum(data: string): number {
  return fnv1a32(new TextEncoder().encode(`(string)${data}`));
}

/** Go's encoding/json of a map[string]string: keys sorted. */
function goStringMap(m: Readonly<Record<string, string>>): string {
  const keys = Object.keys(m).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${JSON.stringify(m[k])}`).join(",")}}`;
}

/** Go's encoding/json of v1.ResourceRequirements (limits, requests, claims; all omitempty). */
function goRequirements(r: V1ResourceRequirements | undefined): string {
  if (r === undefined) return "null";
  const parts: string[] = [];
  if (r.limits && Object.keys(r.limits).length > 0) parts.push(`"limits":${goStringMap(r.limits)}`);
  if (r.requests && Object.keys(r.requests).length > 0) {
    parts.push(`"requests":${goStringMap(r.requests)}`);
  }
  if (r.claims && r.claims.length > 0) {
    const claims = r.claims.map((c) =>
      c.request === undefined
        ? `{"name":${JSON.stringify(c.name)}}`
        : `{"name":${JSON.stringify(c.name)},"request":${JSON.stringify(c.request)}}`
    );
    parts.push(`"claims":[${claims.join(",")}]`);
  }
  return `{${parts.join(",")}}`;
}

/** The checkpoint file's text and checksum for these pods, as the Go kubelet writes it. */
export function encodeCheckpoint(
  pods: ReadonlyMap<string, PodResourceInfo>,
): { text: string; checksum: number } {
  const uids = [...pods.keys()].sort();
  const entries = uids.map((uid) => {
    const info = pods.get(uid)!;
    const names = [...info.containerResources.keys()].sort();
    const containers = names.map((n) =>
      `${JSON.stringify(n)}:${goRequirements(info.containerResources.get(n))}`
    );
    return `${JSON.stringify(uid)}:{"ContainerResources":{${containers.join(",")}},` +
      `"PodLevelResources":${goRequirements(info.podLevelResources)}}`;
  });
  const data = uids.length === 0 ? "{}" : `{"entries":{${entries.join(",")}}}`;
  const checksum = checkpointChecksum(data);
  return { text: `{"data":${JSON.stringify(data)},"checksum":${checksum}}`, checksum };
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function stringMap(v: unknown, where: string): Record<string, string> | undefined {
  if (v === undefined || v === null) return undefined;
  if (!isRecord(v)) throw new Error(`${where}: want an object of quantities`);
  for (const [k, q] of Object.entries(v)) {
    if (typeof q !== "string") throw new Error(`${where}.${k}: want a quantity string`);
  }
  return v as Record<string, string>;
}

function requirements(v: unknown, where: string): V1ResourceRequirements {
  if (!isRecord(v)) throw new Error(`${where}: want an object`);
  const out: V1ResourceRequirements = {};
  const limits = stringMap(v.limits, `${where}.limits`);
  const requests = stringMap(v.requests, `${where}.requests`);
  if (limits) out.limits = limits;
  if (requests) out.requests = requests;
  if (Array.isArray(v.claims)) out.claims = v.claims as V1ResourceRequirements["claims"];
  return out;
}

/** Parses and verifies a checkpoint file's text; throws naming what is wrong. */
export function decodeCheckpoint(
  text: string,
): { entries: Map<string, PodResourceInfo>; checksum: number } {
  const outer: unknown = JSON.parse(text);
  if (!isRecord(outer) || typeof outer.data !== "string" || typeof outer.checksum !== "number") {
    throw new Error(`want {"data": string, "checksum": number}`);
  }
  const actual = checkpointChecksum(outer.data);
  if (actual !== outer.checksum) {
    throw new Error(
      `checkpoint is corrupted: checksum ${outer.checksum} does not match the data's ${actual}`,
    );
  }
  const data: unknown = JSON.parse(outer.data);
  if (!isRecord(data)) throw new Error("data: want an object");
  const entries = new Map<string, PodResourceInfo>();
  const raw = data.entries ?? {};
  if (!isRecord(raw)) throw new Error("data.entries: want an object");
  for (const [uid, v] of Object.entries(raw)) {
    const where = `data.entries[${JSON.stringify(uid)}]`;
    if (!isRecord(v)) throw new Error(`${where}: want an object`);
    const containers = new Map<string, V1ResourceRequirements>();
    const cr = v.ContainerResources ?? {};
    if (!isRecord(cr)) throw new Error(`${where}.ContainerResources: want an object`);
    for (const [name, r] of Object.entries(cr)) {
      containers.set(name, requirements(r, `${where}.ContainerResources.${name}`));
    }
    const pl = v.PodLevelResources;
    entries.set(uid, {
      containerResources: containers,
      ...(pl === undefined || pl === null
        ? {}
        : { podLevelResources: requirements(pl, `${where}.PodLevelResources`) }),
    });
  }
  return { entries, checksum: outer.checksum };
}
