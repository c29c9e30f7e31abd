/**
 * @module
 * The user namespaces of pods with `hostUsers: false`: each gets its own block of `idsPerPod`
 * host IDs (config userNamespaces.idsPerPod, 65536 by default) out of the kubelet's range
 * (kubelet_mappings.ts), mapped to IDs 0..idsPerPod-1 inside, the same for users and groups.
 * The block is chosen at random among the free ones (upstream's allocation bitmap scans from a
 * random slot), kept in memory and in the file `userns` of the pod's directory, written aside,
 * synced and renamed with upstream's JSON, so that a restarted kubelet (this one or the Go
 * kubelet) finds every pod's block again. A block is released when the pod terminates, and by
 * housekeeping for pods that are neither known nor running. A pod that keeps the host's users
 * gets the node's user namespace, named explicitly.
 *
 * A runtime (or RuntimeClass handler) that does not say, in CRI Status' runtime handlers, that
 * it supports user namespaces fails the pod with upstream's message; the runtime makes the
 * namespace and the idmapped mounts of the pod's volumes.
 *
 * Read by the sandbox and container configs (`kuberuntime/`), released by the pod syncer;
 * built once at start by `kubelet.ts`, where an unusable range stops the kubelet as upstream.
 * Corresponds to upstream `pkg/kubelet/userns/userns_manager.go` (MakeUserNsManager,
 * GetOrCreateUserNamespaceMappings, Release, CleanupOrphanedPodUsernsAllocations) and
 * `pkg/kubelet/kubelet_getters.go` (HandlerSupportsUserNamespaces).
 */

import type { V1Pod } from "@kubernetes/client-node";
import { join } from "node:path";
import * as api from "../../proto/runtime/v1/api.ts";
import type { Logger } from "../klog/klog.ts";
import { getKubeletMappings, type KubeletMappings } from "./kubelet_mappings.ts";

/** Host IDs per pod must be a multiple of this (upstream userNsUnitLength). */
export const USER_NS_UNIT_LENGTH = 65536;
/** config userNamespaces.idsPerPod when unset (upstream DefaultKubeletUserNamespacesIDsPerPod). */
export const DEFAULT_IDS_PER_POD = 65536;
/** The file in the pod's directory that holds its mappings (upstream mappingsFile). */
export const MAPPINGS_FILE = "userns";

/** What a {@link UsernsManager} needs (upstream's userNsPodsManager, the kubelet's getters). */
export interface UsernsManagerOptions {
  /** `<rootDirectory>/pods`: each pod's directory is `<podsDirectory>/<uid>`. */
  readonly podsDirectory: string;
  /** config userNamespaces.idsPerPod. @default 65536 */
  readonly idsPerPod?: number;
  /** config maxPods: the range must hold a block for each. */
  readonly maxPods: number;
  /**
   * Whether the runtime handler supports user namespaces (see
   * {@link handlerSupportsUserNamespaces}); throws when the handler is not known.
   */
  readonly handlerSupportsUserNamespaces: (runtimeHandler: string) => boolean;
  /** The kubelet's range of host IDs. @default {@link getKubeletMappings} */
  readonly kubeletMappings?: (idsPerPod: number) => Promise<KubeletMappings>;
  readonly logger: Logger;
  /** A number in [0, 1), for the first slot scanned. @default Math.random */
  readonly random?: () => number;
}

/** A user namespace that cannot be made or read back; the message is upstream's. */
export class UserNamespaceError extends Error {
  override name = "UserNamespaceError";
}

/** One range of an ID map, as the `userns` file holds it (upstream idMapping). */
interface IdMapping {
  readonly hostId: number;
  readonly containerId: number;
  readonly length: number;
}

/**
 * upstream HandlerSupportsUserNamespaces over the handlers of the runtime's last CRI Status:
 * none at all (a runtime older than the field) supports nothing; an unknown name throws.
 */
export function handlerSupportsUserNamespaces(
  handlers: readonly api.RuntimeHandler[],
  runtimeHandler: string,
): boolean {
  if (handlers.length === 0) return false;
  const h = handlers.find((h) => h.name === runtimeHandler);
  if (!h) throw new Error(`the handler ${JSON.stringify(runtimeHandler)} is not known`);
  return h.features?.userNamespaces ?? false;
}

/** The node's user namespace (upstream NamespaceMode_NODE, no mappings). */
function nodeUserNamespace(): api.UserNamespace {
  return { mode: api.NamespaceMode.NODE, uids: [], gids: [] };
}

function podUID(pod: V1Pod): string {
  return pod.metadata?.uid ?? "";
}

function isUint32(v: unknown): v is number {
  return typeof v === "number" && Number.isInteger(v) && v >= 0 && v <= 2 ** 32 - 1;
}

/** The `userns` file's mappings, as upstream's json.Unmarshal would take them. */
function decodeMappings(text: string): { uids: IdMapping[]; gids: IdMapping[] } {
  const bad = (why: string) =>
    new UserNamespaceError(`invalid user namespace mappings file: ${why}`);
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw bad((e as Error).message);
  }
  if (typeof doc !== "object" || doc === null || Array.isArray(doc)) {
    throw bad("json: cannot unmarshal into Go value of type userns.userNamespace");
  }
  const list = (key: string): IdMapping[] => {
    const v = (doc as Record<string, unknown>)[key];
    if (v === undefined || v === null) return [];
    if (!Array.isArray(v)) throw bad(`json: cannot unmarshal ${key} into []userns.idMapping`);
    return v.map((m, i) => {
      const o = (typeof m === "object" && m !== null ? m : {}) as Record<string, unknown>;
      const field = (f: string): number => {
        const n = o[f] ?? 0;
        if (!isUint32(n)) throw bad(`json: ${key}[${i}].${f} is not a uint32: ${String(n)}`);
        return n;
      };
      return {
        hostId: field("hostId"),
        containerId: field("containerId"),
        length: field("length"),
      };
    });
  };
  return { uids: list("uidMappings"), gids: list("gidMappings") };
}

/** The `userns` file's bytes for one block, byte for byte as upstream's json.Marshal. */
function encodeMappings(firstID: number, length: number): string {
  const m = `[{"hostId":${firstID},"containerId":0,"length":${length}}]`;
  return `{"uidMappings":${m},"gidMappings":${m}}`;
}

/**
 * Writes `data` to `<dir>/<name>` as upstream's file store does (a `.`-prefixed temporary file,
 * synced, renamed over), then syncs the directory so the file survives a power loss.
 */
async function writeFileDurably(dir: string, name: string, data: string): Promise<void> {
  await Deno.mkdir(dir, { recursive: true, mode: 0o755 });
  const tmp = await Deno.makeTempFile({ dir, prefix: "." });
  try {
    const file = await Deno.open(tmp, { write: true, truncate: true });
    try {
      const bytes = new TextEncoder().encode(data);
      let written = 0;
      while (written < bytes.length) written += await file.write(bytes.subarray(written));
      await file.sync();
    } finally {
      file.close();
    }
    await Deno.rename(tmp, join(dir, name));
  } catch (e) {
    await Deno.remove(tmp).catch(() => {});
    throw e;
  }
  const parent = await Deno.open(dir, { read: true });
  try {
    await parent.sync();
  } finally {
    parent.close();
  }
}

/** Allocates, records and releases the pods' blocks of host IDs; see the module documentation. */
export class UsernsManager {
  readonly #opts: UsernsManagerOptions;
  /** Which blocks are taken, by index from the range's first block. */
  readonly #used: Uint8Array;
  #count = 0;
  /** The first host ID of each pod's block, by pod UID. */
  readonly #usedBy = new Map<string, number>();
  /** The range's first block, as an index of blocks from ID 0 (upstream off). */
  readonly #off: number;
  /** How many blocks the range holds (upstream len). */
  readonly #len: number;
  readonly #userNsLength: number;
  /** One operation at a time, as upstream's mutex. */
  #tail: Promise<unknown> = Promise.resolve();

  private constructor(opts: UsernsManagerOptions, mapping: KubeletMappings, length: number) {
    this.#opts = opts;
    this.#userNsLength = length;
    this.#off = mapping.firstID / length;
    this.#len = mapping.length / length;
    this.#used = new Uint8Array(this.#len);
  }

  /**
   * upstream MakeUserNsManager: checks the kubelet's range against idsPerPod and maxPods, then
   * records the block of every pod directory that has a `userns` file. Rejects with upstream's
   * message when the range is unusable or a file does not read back.
   */
  static async open(opts: UsernsManagerOptions): Promise<UsernsManager> {
    const length = opts.idsPerPod ?? DEFAULT_IDS_PER_POD;
    const mapping = await (opts.kubeletMappings ??
      ((idsPerPod) => getKubeletMappings({ idsPerPod, logger: opts.logger })))(length).catch(
        (e) => {
          throw new UserNamespaceError(`kubelet mappings: ${(e as Error).message}`, { cause: e });
        },
      );
    const { firstID, length: total } = mapping;
    if (length % USER_NS_UNIT_LENGTH !== 0) {
      throw new UserNamespaceError(
        `kubelet user namespace length ${length} is not a multiple of ${USER_NS_UNIT_LENGTH}`,
      );
    }
    if (firstID % length !== 0) {
      throw new UserNamespaceError(
        `kubelet user assigned ID ${firstID} is not a multiple of ${length}`,
      );
    }
    if (firstID < length) {
      // Mapping ID 0 would hand a pod the host's root.
      throw new UserNamespaceError(
        `kubelet user assigned ID ${firstID} must be greater or equal to ${length}`,
      );
    }
    if (total % length !== 0) {
      throw new UserNamespaceError(
        `kubelet user assigned IDs length ${total} is not a multiple of ${length}`,
      );
    }
    if (Math.floor(total / length) < opts.maxPods) {
      throw new UserNamespaceError(
        `kubelet user assigned IDs are not enough to support ${opts.maxPods} pods`,
      );
    }
    const m = new UsernsManager(opts, mapping, length);
    opts.logger.v(5).info("User namespace manager mapping", {
      offset: m.#off,
      length: m.#len,
      idsPerPod: length,
    });
    let found: string[];
    try {
      found = await m.#listPodsFromDisk();
    } catch (e) {
      if (e instanceof Deno.errors.NotFound) return m;
      throw new UserNamespaceError(`read pods from disk: ${(e as Error).message}`, { cause: e });
    }
    for (const uid of found) {
      opts.logger.v(5).info("reading pod from disk for user namespace", { podUID: uid });
      try {
        const text = await m.#readMappingsFile(uid);
        // No file: the pod keeps the host's users.
        if (text !== undefined && text !== "") m.#parseAndRecord(uid, text);
      } catch (e) {
        throw new UserNamespaceError(
          `record pod mappings for existing pod ${JSON.stringify(uid)}: ${(e as Error).message}`,
          { cause: e },
        );
      }
    }
    return m;
  }

  /** The first host ID of the pod's block, or undefined when it has none. */
  allocatedTo(uid: string): number | undefined {
    return this.#usedBy.get(uid);
  }

  /** How many blocks are taken. */
  get allocated(): number {
    return this.#count;
  }

  /**
   * upstream GetOrCreateUserNamespaceMappings: the node's user namespace for a pod that keeps
   * the host's users; for `hostUsers: false`, the pod's block (read back from its file, or
   * allocated and written) as the POD mode mappings, once the runtime handler is known to
   * support user namespaces. Rejects with upstream's messages.
   */
  getOrCreateUserNamespaceMappings(pod: V1Pod, runtimeHandler: string): Promise<api.UserNamespace> {
    if (pod.spec?.hostUsers !== false) return Promise.resolve(nodeUserNamespace());
    let supported = false;
    let err: unknown;
    try {
      supported = this.#opts.handlerSupportsUserNamespaces(runtimeHandler);
    } catch (e) {
      err = e;
    }
    if (!supported) {
      let msg = "can't set `spec.hostUsers: false`, runtime does not support user namespaces";
      if (runtimeHandler !== "") {
        msg = `can't set \`spec.hostUsers: false\`, RuntimeClass handler ${
          JSON.stringify(runtimeHandler)
        } does not support user namespaces`;
      }
      if (err !== undefined) msg = `${msg}: ${(err as Error).message ?? String(err)}`;
      return Promise.reject(new UserNamespaceError(msg, { cause: err }));
    }
    const uid = podUID(pod);
    return this.#locked(async () => {
      const text = await this.#readMappingsFile(uid);
      let firstID: number;
      if (text !== undefined && text !== "") {
        try {
          firstID = this.#parseAndRecord(uid, text);
        } catch (e) {
          throw new UserNamespaceError(`user namespace: ${(e as Error).message}`, { cause: e });
        }
      } else {
        try {
          firstID = await this.#createUserNs(uid);
        } catch (e) {
          throw new UserNamespaceError(`create user namespace: ${(e as Error).message}`, {
            cause: e,
          });
        }
      }
      return this.#podMode(firstID);
    });
  }

  /**
   * The pod's user namespace as its sandbox got it, from memory (the sandbox, made or
   * reconfigured earlier in the same sync, holds the block): for the containers' configs,
   * which containerd 2.x requires to equal the sandbox's. Throws for a `hostUsers: false` pod
   * without a block.
   */
  podUserNamespace(pod: V1Pod): api.UserNamespace {
    if (pod.spec?.hostUsers !== false) return nodeUserNamespace();
    const firstID = this.#usedBy.get(podUID(pod));
    if (firstID === undefined) {
      throw new UserNamespaceError(
        `no user namespace is allocated to pod ${JSON.stringify(podUID(pod))}`,
      );
    }
    return this.#podMode(firstID);
  }

  /** upstream Release: frees the pod's block and removes its file. */
  release(uid: string): Promise<void> {
    return this.#locked(() => this.#releaseLocked(uid));
  }

  /**
   * upstream CleanupOrphanedPodUsernsAllocations: frees the blocks of pod directories whose pod
   * is not in `known` (the pods the kubelet has, and those the runtime still runs), and of pods
   * that no longer have a directory.
   */
  cleanupOrphanedPodUsernsAllocations(known: ReadonlySet<string>): Promise<void> {
    return this.#locked(async () => {
      let found: string[];
      try {
        found = await this.#listPodsFromDisk();
      } catch (e) {
        throw new UserNamespaceError(
          `user namespace: read pods from disk: ${(e as Error).message}`,
          {
            cause: e,
          },
        );
      }
      for (const uid of found) {
        if (known.has(uid)) continue;
        this.#opts.logger.v(5).info("Clean up orphaned pod user namespace possible allocation", {
          podUID: uid,
        });
        await this.#releaseLocked(uid);
      }
      const onDisk = new Set(found);
      for (const uid of [...this.#usedBy.keys()]) {
        if (onDisk.has(uid)) continue;
        this.#opts.logger.v(5).info("Clean up orphaned pod user namespace possible allocation", {
          podUID: uid,
        });
        await this.#releaseLocked(uid);
      }
    });
  }

  // ---- Helpers ------------------------------------------------------------------------------

  #locked<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#tail.then(fn);
    this.#tail = run.catch(() => {});
    return run;
  }

  #podMode(firstID: number): api.UserNamespace {
    const mapping = { hostId: firstID, containerId: 0, length: this.#userNsLength };
    return { mode: api.NamespaceMode.POD, uids: [{ ...mapping }], gids: [{ ...mapping }] };
  }

  #podDir(uid: string): string {
    return join(this.#opts.podsDirectory, uid);
  }

  async #listPodsFromDisk(): Promise<string[]> {
    const out: string[] = [];
    for await (const e of Deno.readDir(this.#opts.podsDirectory)) {
      if (e.isDirectory) out.push(e.name);
    }
    return out;
  }

  async #readMappingsFile(uid: string): Promise<string | undefined> {
    try {
      return await Deno.readTextFile(join(this.#podDir(uid), MAPPINGS_FILE));
    } catch (e) {
      if (e instanceof Deno.errors.NotFound) return undefined;
      throw e;
    }
  }

  /** upstream parseUserNsFileAndRecord: checks the file is one we produce, records its block. */
  #parseAndRecord(uid: string, text: string): number {
    const { uids, gids } = decodeMappings(text);
    if (uids.length !== 1) {
      throw new UserNamespaceError(
        "invalid user namespace configuration: no more than one mapping allowed.",
      );
    }
    if (uids.length !== gids.length) {
      throw new UserNamespaceError(
        "invalid user namespace configuration: GID and UID mappings should be identical.",
      );
    }
    const u = uids[0]!;
    const g = gids[0]!;
    if (u.hostId !== g.hostId || u.containerId !== g.containerId || u.length !== g.length) {
      throw new UserNamespaceError(
        "invalid user namespace configuration: GID and UID mapping should be identical",
      );
    }
    // Runtimes assume root is mapped; only files this kubelet wrote are taken.
    if (u.containerId !== 0) {
      throw new UserNamespaceError("invalid user namespace configuration: UID 0 must be mapped");
    }
    this.#record(uid, u.hostId, u.length);
    return u.hostId;
  }

  /** upstream record: takes the block [from, from+length) for the pod. */
  #record(uid: string, from: number, length: number): void {
    if (length !== this.#userNsLength) {
      throw new UserNamespaceError(`wrong user namespace length ${length}`);
    }
    if (from % this.#userNsLength !== 0) {
      throw new UserNamespaceError(`wrong user namespace offset specified ${from}`);
    }
    const prev = this.#usedBy.get(uid);
    if (prev !== undefined && prev !== from) {
      throw new UserNamespaceError(
        `different user namespace range already used by pod ${JSON.stringify(uid)}`,
      );
    }
    const index = from / this.#userNsLength - this.#off;
    if (index < 0 || index >= this.#len) {
      throw new UserNamespaceError(`id ${from} is out of range`);
    }
    if (prev === undefined && this.#used[index] === 1) {
      throw new UserNamespaceError(`range picked for pod ${JSON.stringify(uid)} already taken`);
    }
    if (prev !== undefined) return;
    this.#opts.logger.v(5).info("new pod user namespace allocation", { podUID: uid });
    this.#used[index] = 1;
    this.#count++;
    this.#usedBy.set(uid, from);
  }

  /** upstream allocateOne: a free block from a random slot on, or an error when none is. */
  #allocateOne(uid: string): number {
    if (this.#count >= this.#len) {
      throw new UserNamespaceError(
        "could not find an empty slot to allocate a user namespace",
      );
    }
    const start = Math.floor((this.#opts.random ?? Math.random)() * this.#len) % this.#len;
    for (let i = 0; i < this.#len; i++) {
      const at = (start + i) % this.#len;
      if (this.#used[at] === 1) continue;
      this.#used[at] = 1;
      this.#count++;
      const firstID = (at + this.#off) * this.#userNsLength;
      this.#usedBy.set(uid, firstID);
      this.#opts.logger.v(5).info("new pod user namespace allocation", { podUID: uid });
      return firstID;
    }
    throw new UserNamespaceError("could not find an empty slot to allocate a user namespace");
  }

  /** upstream createUserNs: allocates a block and writes the file; released again on failure. */
  async #createUserNs(uid: string): Promise<number> {
    const firstID = this.#allocateOne(uid);
    try {
      await writeFileDurably(
        this.#podDir(uid),
        MAPPINGS_FILE,
        encodeMappings(firstID, this.#userNsLength),
      );
    } catch (e) {
      await this.#releaseLocked(uid);
      throw e;
    }
    return firstID;
  }

  async #releaseLocked(uid: string): Promise<void> {
    const firstID = this.#usedBy.get(uid);
    if (firstID === undefined) {
      this.#opts.logger.v(5).info("pod user namespace allocation not present", { podUID: uid });
      return;
    }
    this.#usedBy.delete(uid);
    this.#opts.logger.v(5).info("releasing pod user namespace allocation", { podUID: uid });
    await Deno.remove(join(this.#podDir(uid), MAPPINGS_FILE)).catch(() => {});
    const index = firstID / this.#userNsLength - this.#off;
    if (this.#used[index] === 1) {
      this.#used[index] = 0;
      this.#count--;
    }
  }
}
