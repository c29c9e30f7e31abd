/**
 * @module
 * PodConfig: merges the pod sources (static files, the apiserver, a URL) into the incremental
 * updates the sync loop consumes. Each source sends its whole set of pods (SET); PodConfig
 * compares it with what that source sent before and emits REMOVE, ADD, UPDATE, DELETE and
 * RECONCILE updates in that order, as upstream's PodConfigNotificationIncremental mode does,
 * and records which sources have been seen (sourcesReady). Corresponds to upstream
 * `pkg/kubelet/config/config.go` (podStorage.merge, checkAndUpdatePod) and
 * `pkg/kubelet/types/pod_update.go`.
 */

import type { V1Pod } from "@kubernetes/client-node";
import { kobj, type Logger } from "../klog/klog.ts";
import { deepCopy } from "../util/deep_copy.ts";

/** What a pod update asks of the kubelet (upstream kubetypes.PodOperation). */
export type PodOperation = "SET" | "ADD" | "DELETE" | "REMOVE" | "UPDATE" | "RECONCILE";

/** Pods of one source that one operation applies to. */
export interface PodUpdate {
  readonly op: PodOperation;
  readonly pods: readonly V1Pod[];
  readonly source: string;
}

/** Source names, as upstream's kubetypes. */
export const FILE_SOURCE = "file";
export const HTTP_SOURCE = "http";
export const API_SOURCE = "api";

/** Annotations the kubelet keeps on pods (upstream kubetypes). */
export const CONFIG_SOURCE_ANNOTATION = "kubernetes.io/config.source";
export const CONFIG_MIRROR_ANNOTATION = "kubernetes.io/config.mirror";
export const CONFIG_FIRST_SEEN_ANNOTATION = "kubernetes.io/config.seen";
export const CONFIG_HASH_ANNOTATION = "kubernetes.io/config.hash";

/** Whether the pod came from a file or URL rather than the apiserver (upstream `IsStaticPod`). */
export function isStaticPod(pod: V1Pod): boolean {
  const source = pod.metadata?.annotations?.[CONFIG_SOURCE_ANNOTATION];
  return source !== undefined && source !== API_SOURCE;
}

/** Whether the pod is the apiserver's mirror of a static pod (upstream `IsMirrorPod`). */
export function isMirrorPod(pod: V1Pod): boolean {
  return pod.metadata?.annotations?.[CONFIG_MIRROR_ANNOTATION] !== undefined;
}

/** The kubelet's own annotations, ignored when deciding whether a pod changed. */
const LOCAL_ANNOTATIONS = [
  CONFIG_SOURCE_ANNOTATION,
  CONFIG_MIRROR_ANNOTATION,
  CONFIG_FIRST_SEEN_ANNOTATION,
];

/** What PodConfig needs. */
export interface PodConfigOptions {
  /** Milliseconds since the epoch, for the first-seen annotation. */
  readonly now: () => number;
  /**
   * Called with a pod a source sent twice under one name (upstream records an event).
   * @default a log line on `logger`, when given
   */
  readonly onDuplicate?: (pod: V1Pod, source: string) => void;
  /** Where the default onDuplicate logs. */
  readonly logger?: Logger;
  /**
   * Called with every pod of a set that is not a static pod, as the source delivered it, and
   * the time it was merged (upstream's startupSLIObserver.ObservedPodOnWatch). @default none
   */
  readonly onPodObserved?: (pod: V1Pod, whenMs: number) => void;
}

function fullName(pod: V1Pod): string {
  return `${pod.metadata?.name ?? ""}_${pod.metadata?.namespace ?? ""}`;
}

function deepEqual(a: unknown, b: unknown): boolean {
  return JSON.stringify(canonical(a)) === JSON.stringify(canonical(b));
}

/** Sorted keys and no undefined members, so equal objects print alike. */
function canonical(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(canonical);
  if (v instanceof Date) return v.toISOString();
  if (v !== null && typeof v === "object") {
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(v).sort()) {
      const x = (v as Record<string, unknown>)[k];
      if (x !== undefined) out[k] = canonical(x);
    }
    return out;
  }
  return v;
}

function annotationsEqual(a: Record<string, string> = {}, b: Record<string, string> = {}): boolean {
  const strip = (m: Record<string, string>) =>
    Object.fromEntries(Object.entries(m).filter(([k]) => !LOCAL_ANNOTATIONS.includes(k)));
  return deepEqual(strip(a), strip(b));
}

/** True when two versions of a pod differ in what the kubelet acts on (upstream podsDifferSemantically). */
export function podsDifferSemantically(existing: V1Pod, ref: V1Pod): boolean {
  const e = existing.metadata ?? {};
  const r = ref.metadata ?? {};
  return !(
    deepEqual(existing.spec, ref.spec) &&
    deepEqual(e.labels ?? {}, r.labels ?? {}) &&
    deepEqual(e.deletionTimestamp, r.deletionTimestamp) &&
    deepEqual(e.deletionGracePeriodSeconds, r.deletionGracePeriodSeconds) &&
    annotationsEqual(e.annotations, r.annotations)
  );
}

/** Merges the sources' pod sets into incremental updates. */
export class PodConfig {
  readonly #opts: PodConfigOptions;
  /** source → pod UID → pod, as last merged. */
  readonly #pods = new Map<string, Map<string, V1Pod>>();
  /** source → full name → UID of the pod holding it, for {@link apply}'s duplicate check. */
  readonly #names = new Map<string, Map<string, string>>();
  readonly #seen = new Set<string>();

  constructor(opts: PodConfigOptions) {
    this.#opts = opts;
  }

  /** True once every source in `expected` has sent its first set (upstream SeenAllSources). */
  seenAllSources(expected: Iterable<string>): boolean {
    for (const s of expected) if (!this.#seen.has(s)) return false;
    return true;
  }

  /** Every pod of every source, as last merged. */
  allPods(): V1Pod[] {
    return [...this.#pods.values()].flatMap((m) => [...m.values()]);
  }

  /**
   * Takes a source's whole set of pods and returns the updates it implies, in upstream's order:
   * REMOVE, ADD, UPDATE, DELETE, RECONCILE; empty operations are left out.
   */
  set(source: string, pods: readonly V1Pod[]): PodUpdate[] {
    this.#seen.add(source);
    const old = this.#pods.get(source) ?? new Map<string, V1Pod>();
    const next = new Map<string, V1Pod>();
    const b = new Buckets();
    const names = new Set<string>();
    for (const incoming of pods) {
      const ref = this.#prepare(incoming, source, names);
      if (ref === undefined) continue;
      const uid = ref.metadata?.uid ?? fullName(ref);
      next.set(uid, this.#mergePod(ref, old.get(uid), b));
    }
    for (const [uid, pod] of old) if (!next.has(uid)) b.removes.push(pod);
    this.#pods.set(source, next);
    this.#names.set(source, new Map([...next].map(([uid, pod]) => [fullName(pod), uid])));
    return b.toUpdates(source);
  }

  /**
   * Takes one change of one pod of a source that already sent its set (a watch event) and
   * returns the same updates {@link set} would for the source's set with that change, without
   * comparing every other pod again (nor listing their names): a burst of N pods then costs
   * O(N) rather than O(N²).
   */
  apply(source: string, type: "ADDED" | "MODIFIED" | "DELETED", pod: V1Pod): PodUpdate[] {
    this.#seen.add(source);
    let current = this.#pods.get(source);
    if (current === undefined) this.#pods.set(source, current = new Map<string, V1Pod>());
    let index = this.#names.get(source);
    if (index === undefined) this.#names.set(source, index = new Map<string, string>());
    const uid = pod.metadata?.uid ?? fullName(pod);
    const b = new Buckets();
    if (type === "DELETED") {
      const existing = current.get(uid);
      if (existing !== undefined) {
        current.delete(uid);
        const name = fullName(existing);
        if (index.get(name) === uid) index.delete(name);
        b.removes.push(existing);
      }
      return b.toUpdates(source);
    }
    // The other pods' names, as far as this pod's goes: taken or not.
    const name = fullName(pod);
    const holder = index.get(name);
    const names = new Set<string>(holder !== undefined && holder !== uid ? [name] : []);
    const ref = this.#prepare(pod, source, names);
    if (ref !== undefined) {
      current.set(uid, this.#mergePod(ref, current.get(uid), b));
      index.set(name, uid);
    }
    return b.toUpdates(source);
  }

  /**
   * The kubelet's copy of an incoming pod, annotated with its source; undefined (and reported)
   * when `names` already holds its full name. Adds the name to `names`.
   */
  #prepare(incoming: V1Pod, source: string, names: Set<string>): V1Pod | undefined {
    const ref = deepCopy(incoming);
    const name = fullName(ref);
    if (names.has(name)) {
      if (this.#opts.onDuplicate) this.#opts.onDuplicate(ref, source);
      else {
        this.#opts.logger?.info(
          "Pod with the same full name already exists in the source; ignoring",
          { pod: kobj(ref), source },
        );
      }
      return undefined;
    }
    names.add(name);
    ref.metadata ??= {};
    ref.metadata.annotations = {
      ...ref.metadata.annotations,
      [CONFIG_SOURCE_ANNOTATION]: source,
    };
    if (this.#opts.onPodObserved && !isStaticPod(ref)) {
      this.#opts.onPodObserved(ref, this.#opts.now());
    }
    return ref;
  }

  /**
   * Merges a prepared pod into the one last merged under its UID (upstream
   * checkAndUpdatePod), noting the update it implies in `b`; returns the pod to keep.
   */
  #mergePod(ref: V1Pod, existing: V1Pod | undefined, b: Buckets): V1Pod {
    const meta = ref.metadata ??= {};
    const annotations = meta.annotations ??= {};
    if (!existing) {
      annotations[CONFIG_FIRST_SEEN_ANNOTATION] ??= new Date(this.#opts.now()).toISOString();
      b.adds.push(ref);
      return ref;
    }
    // A new object, never the old one changed: the kubelet's managers still hold that one and
    // compare it with the update (an in-place resize is told from its old resources).
    if (!podsDifferSemantically(existing, ref)) {
      // The kubelet owns pod status: a source that reports another one is reconciled.
      if (!deepEqual(existing.status, ref.status)) {
        const reconciled = { ...existing, status: ref.status };
        b.reconciles.push(reconciled);
        return reconciled;
      }
      return existing;
    }
    const seen = existing.metadata?.annotations?.[CONFIG_FIRST_SEEN_ANNOTATION];
    if (seen !== undefined) annotations[CONFIG_FIRST_SEEN_ANNOTATION] = seen;
    const updated: V1Pod = {
      ...existing,
      spec: ref.spec,
      status: ref.status,
      metadata: {
        ...existing.metadata,
        labels: meta.labels,
        annotations,
        deletionTimestamp: meta.deletionTimestamp,
        deletionGracePeriodSeconds: meta.deletionGracePeriodSeconds,
        generation: meta.generation,
      },
    };
    (meta.deletionTimestamp ? b.deletes : b.updates).push(updated);
    return updated;
  }
}

/** The pods of one merge, by the operation they need. */
class Buckets {
  readonly removes: V1Pod[] = [];
  readonly adds: V1Pod[] = [];
  readonly updates: V1Pod[] = [];
  readonly deletes: V1Pod[] = [];
  readonly reconciles: V1Pod[] = [];

  /** The updates in upstream's order; empty operations are left out. */
  toUpdates(source: string): PodUpdate[] {
    const ops: [PodOperation, V1Pod[]][] = [
      ["REMOVE", this.removes],
      ["ADD", this.adds],
      ["UPDATE", this.updates],
      ["DELETE", this.deletes],
      ["RECONCILE", this.reconciles],
    ];
    return ops.filter(([, pods]) => pods.length > 0).map(([op, pods]) => ({ op, pods, source }));
  }
}
