/**
 * @module
 * The ConfigMap and Secret managers: which objects the pods on this node refer to, and their
 * current content for volumes and environment variables. Three strategies, as the kubelet's
 * `configMapAndSecretChangeDetectionStrategy`: `Watch` keeps one {@link Reflector} per
 * referenced object (field selector `metadata.name=<name>`) for as long as a registered pod
 * refers to it; `Cache` keeps each GET for a TTL; `Get` asks the apiserver every time. Talks to
 * the apiserver through `kube_client.ts`. Corresponds to upstream `pkg/kubelet/util/manager`
 * (watch_based_manager.go, cache_based_manager.go), `pkg/kubelet/configmap`,
 * `pkg/kubelet/secret` and `pkg/api/v1/pod` (VisitPodConfigmapNames, VisitPodSecretNames).
 */

import type {
  V1ConfigMap,
  V1Container,
  V1EphemeralContainer,
  V1Pod,
  V1Secret,
} from "@kubernetes/client-node";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import { isStatus, type KubeClient } from "./kube_client.ts";
import type { EnvSource } from "../kubelet_env.ts";
import { Reflector } from "./reflector.ts";

/** How the managers learn about changes (upstream ResourceChangeDetectionStrategy). */
export type ChangeDetectionStrategy = "Watch" | "Cache" | "Get";

/** What {@link ObjectManager} needs. */
export interface ObjectManagerOptions {
  /** `get` for Cache and Get; `request` (the reflector's list) and `watch` for Watch. */
  readonly client: Pick<KubeClient, "get" | "request" | "watch">;
  readonly resource: "configmaps" | "secrets";
  /** The configured strategy; upstream's default is Watch. */
  readonly strategy: ChangeDetectionStrategy;
  readonly clock: Clock;
  readonly logger: Logger;
  /** How long a GET stays fresh with the Cache strategy. @default 60000 (upstream defaultTTL) */
  readonly ttlMs?: number;
}

/** The objects an {@link ObjectManager} keeps. */
interface ManagedObject {
  metadata?: { name?: string; resourceVersion?: string };
  immutable?: boolean;
}

/** How long a Watch-strategy get waits for the first list (upstream polls for one second). */
const SYNC_TIMEOUT_MS = 1000;

/**
 * ConfigMaps or Secrets of registered pods (upstream configmap.Manager / secret.Manager).
 * Register every pod the kubelet runs, unregister it when it is gone.
 */
export class ObjectManager<T extends ManagedObject> {
  readonly #store: ObjectStore<T>;
  readonly #namesOf: (pod: V1Pod) => Set<string>;
  /** Registered pods by namespace/name/uid, to drop an updated pod's old references. */
  readonly #pods = new Map<string, V1Pod>();
  #closed = false;

  constructor(opts: ObjectManagerOptions) {
    this.#namesOf = opts.resource === "configmaps" ? configMapNamesOf : secretNamesOf;
    switch (opts.strategy) {
      case "Watch":
        this.#store = new WatchStore<T>(opts);
        break;
      case "Cache":
        this.#store = new CacheStore<T>(opts);
        break;
      case "Get":
        this.#store = new GetStore<T>(opts);
        break;
      default:
        throw new Error(
          `Cannot create the ${opts.resource} manager: strategy must be Watch, Cache or Get: current value is '${
            String(opts.strategy)
          }'`,
        );
    }
  }

  /** Adds references to the objects `pod` refers to, dropping those of its previous version. */
  registerPod(pod: V1Pod): void {
    if (this.#closed) return;
    const ns = pod.metadata?.namespace ?? "";
    const uid = pod.metadata?.uid ?? "";
    // New references first, so an object both versions use keeps its watch.
    for (const name of this.#namesOf(pod)) this.#store.addReference(ns, name, uid);
    const key = podKey(pod);
    const prev = this.#pods.get(key);
    this.#pods.set(key, pod);
    if (prev !== undefined) this.#dropReferences(prev);
  }

  /** Drops the references of the registered version of `pod`. */
  unregisterPod(pod: V1Pod): void {
    const key = podKey(pod);
    const prev = this.#pods.get(key);
    this.#pods.delete(key);
    if (prev !== undefined) this.#dropReferences(prev);
  }

  /**
   * The object, or undefined when the apiserver does not have it. With Watch and Cache, throws
   * `object "<ns>"/"<name>" not registered` when no registered pod refers to it.
   */
  get(namespace: string, name: string, signal?: AbortSignal): Promise<T | undefined> {
    if (this.#closed) {
      return Promise.reject(new Error(`object manager is closed: cannot get ${namespace}/${name}`));
    }
    return this.#store.get(namespace, name, signal);
  }

  /** Stops every watch; idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#pods.clear();
    this.#store.close();
  }

  #dropReferences(pod: V1Pod): void {
    const ns = pod.metadata?.namespace ?? "";
    const uid = pod.metadata?.uid ?? "";
    for (const name of this.#namesOf(pod)) this.#store.deleteReference(ns, name, uid);
  }
}

/** An {@link EnvSource} over the managers; an absent manager fails as with no kube client. */
export function envSourceOf(
  configMaps: ObjectManager<V1ConfigMap> | undefined,
  secrets: ObjectManager<V1Secret> | undefined,
): EnvSource {
  const noClient = (kind: string, ns: string, name: string) =>
    Promise.reject(new Error(`couldn't get ${kind} ${ns}/${name}, no kubeClient defined`));
  return {
    getConfigMap: (ns, name, signal) =>
      configMaps === undefined ? noClient("configMap", ns, name) : configMaps.get(ns, name, signal),
    getSecret: (ns, name, signal) =>
      secrets === undefined ? noClient("secret", ns, name) : secrets.get(ns, name, signal),
  };
}

/** The ConfigMaps a pod refers to: volumes, projected sources, env and envFrom of all containers. */
export function configMapNamesOf(pod: V1Pod): Set<string> {
  const names = new Set<string>();
  const add = (name: string | undefined) => {
    if (name) names.add(name);
  };
  for (const c of allContainers(pod)) {
    for (const from of c.envFrom ?? []) add(from.configMapRef?.name);
    for (const e of c.env ?? []) add(e.valueFrom?.configMapKeyRef?.name);
  }
  for (const v of pod.spec?.volumes ?? []) {
    add(v.configMap?.name);
    for (const s of v.projected?.sources ?? []) add(s.configMap?.name);
  }
  return names;
}

/**
 * The Secrets a pod refers to: image pull secrets, env and envFrom of all containers, secret
 * and projected volumes, and the secret references of the other volume sources.
 */
export function secretNamesOf(pod: V1Pod): Set<string> {
  const names = new Set<string>();
  const add = (name: string | undefined) => {
    if (name) names.add(name);
  };
  for (const ref of pod.spec?.imagePullSecrets ?? []) add(ref.name);
  for (const c of allContainers(pod)) {
    for (const from of c.envFrom ?? []) add(from.secretRef?.name);
    for (const e of c.env ?? []) add(e.valueFrom?.secretKeyRef?.name);
  }
  for (const v of pod.spec?.volumes ?? []) {
    add(v.secret?.secretName);
    for (const s of v.projected?.sources ?? []) add(s.secret?.name);
    add(v.azureFile?.secretName);
    add(v.cephfs?.secretRef?.name);
    add(v.cinder?.secretRef?.name);
    add(v.flexVolume?.secretRef?.name);
    add(v.rbd?.secretRef?.name);
    add(v.scaleIO?.secretRef?.name);
    add(v.iscsi?.secretRef?.name);
    add(v.storageos?.secretRef?.name);
    add(v.csi?.nodePublishSecretRef?.name);
  }
  return names;
}

function allContainers(pod: V1Pod): Array<V1Container | V1EphemeralContainer> {
  return [
    ...(pod.spec?.initContainers ?? []),
    ...(pod.spec?.containers ?? []),
    ...(pod.spec?.ephemeralContainers ?? []),
  ];
}

function podKey(pod: V1Pod): string {
  const m = pod.metadata;
  return `${m?.namespace ?? ""}/${m?.name ?? ""}/${m?.uid ?? ""}`;
}

function objectPath(resource: string, namespace: string, name: string): string {
  return `/api/v1/namespaces/${encodeURIComponent(namespace)}/${resource}/${
    encodeURIComponent(name)
  }`;
}

/** Upstream's error for a get of an object no registered pod refers to (`%q/%q`). */
function notRegistered(namespace: string, name: string): Error {
  return new Error(
    `object ${JSON.stringify(namespace)}/${JSON.stringify(name)} not registered`,
  );
}

/** The storage behind a strategy (upstream manager.Store). */
interface ObjectStore<T> {
  addReference(namespace: string, name: string, podUid: string): void;
  deleteReference(namespace: string, name: string, podUid: string): void;
  get(namespace: string, name: string, signal?: AbortSignal): Promise<T | undefined>;
  close(): void;
}

/** A GET, with 404 as undefined. */
async function getOrUndefined<T>(
  client: Pick<KubeClient, "get">,
  path: string,
  signal?: AbortSignal,
): Promise<T | undefined> {
  try {
    return await client.get<T>(path, signal);
  } catch (err) {
    if (isStatus(err, 404)) return undefined;
    throw err;
  }
}

/** The Get strategy: every get is a GET (upstream NewSimpleConfigMapManager / SecretManager). */
class GetStore<T> implements ObjectStore<T> {
  readonly #o: ObjectManagerOptions;

  constructor(opts: ObjectManagerOptions) {
    this.#o = opts;
  }

  addReference(): void {}

  deleteReference(): void {}

  get(namespace: string, name: string, signal?: AbortSignal): Promise<T | undefined> {
    return getOrUndefined<T>(this.#o.client, objectPath(this.#o.resource, namespace, name), signal);
  }

  close(): void {}
}

interface CachedObject<T> {
  /** undefined: the apiserver answered 404. */
  object: T | undefined;
  fetchedAt: number;
}

interface CacheItem<T> {
  refCount: number;
  /** undefined until the first GET, and again after every new reference. */
  data: CachedObject<T> | undefined;
  /** The GET in flight, which concurrent gets share. */
  inFlight: Promise<T | undefined> | undefined;
}

/** The Cache strategy: GETs kept for a TTL (upstream cache_based_manager.go objectStore). */
class CacheStore<T extends ManagedObject> implements ObjectStore<T> {
  readonly #o: ObjectManagerOptions;
  readonly #ttlMs: number;
  readonly #items = new Map<string, CacheItem<T>>();

  constructor(opts: ObjectManagerOptions) {
    this.#o = opts;
    this.#ttlMs = opts.ttlMs ?? 60_000;
  }

  addReference(namespace: string, name: string): void {
    const key = `${namespace}/${name}`;
    let item = this.#items.get(key);
    if (item === undefined) {
      item = { refCount: 0, data: undefined, inFlight: undefined };
      this.#items.set(key, item);
    }
    item.refCount++;
    // A new reference (a new or updated pod) forces a fresh GET, as upstream.
    item.data = undefined;
  }

  deleteReference(namespace: string, name: string): void {
    const key = `${namespace}/${name}`;
    const item = this.#items.get(key);
    if (item === undefined) return;
    item.refCount--;
    if (item.refCount <= 0) this.#items.delete(key);
  }

  get(namespace: string, name: string, signal?: AbortSignal): Promise<T | undefined> {
    const item = this.#items.get(`${namespace}/${name}`);
    if (item === undefined) return Promise.reject(notRegistered(namespace, name));
    const data = item.data;
    if (data !== undefined && this.#o.clock.now() < data.fetchedAt + this.#ttlMs) {
      return Promise.resolve(data.object);
    }
    if (item.inFlight === undefined) {
      item.inFlight = this.#refresh(item, namespace, name, signal).finally(() => {
        item.inFlight = undefined;
      });
    }
    return item.inFlight;
  }

  async #refresh(
    item: CacheItem<T>,
    namespace: string,
    name: string,
    signal?: AbortSignal,
  ): Promise<T | undefined> {
    const prev = item.data;
    let path = objectPath(this.#o.resource, namespace, name);
    // A periodic refresh may be served from the apiserver's cache (upstream FromApiserverCache).
    if (prev?.object !== undefined) path += "?resourceVersion=0";
    let object: T | undefined;
    try {
      object = await getOrUndefined<T>(this.#o.client, path, signal);
    } catch (err) {
      // With nothing cached the error is the answer; otherwise the stale copy is.
      if (prev === undefined) throw err;
      this.#o.logger.v(4).info("Cannot refresh object; using the cached copy", {
        object: `${namespace}/${name}`,
        err: err instanceof Error ? err.message : String(err),
      });
      return prev.object;
    }
    if (object === undefined || !isOlder(object, prev?.object)) {
      item.data = { object, fetchedAt: this.#o.clock.now() };
    }
    return item.data?.object;
  }

  close(): void {
    this.#items.clear();
  }
}

/** Whether `next` has a lower resourceVersion than `prev` (upstream isObjectOlder). */
function isOlder(next: ManagedObject, prev: ManagedObject | undefined): boolean {
  const a = Number(next.metadata?.resourceVersion);
  const b = Number(prev?.metadata?.resourceVersion);
  return Number.isInteger(a) && Number.isInteger(b) && a < b;
}

interface WatchItem<T> {
  /** Reference counts by pod UID (upstream refMap). */
  readonly refs: Map<string, number>;
  readonly reflector: Reflector<T & { metadata?: { uid?: string } }>;
  readonly stop: AbortController;
  readonly synced: Promise<void>;
  object: T | undefined;
}

/** The Watch strategy: one reflector per referenced object (upstream watch_based_manager.go). */
class WatchStore<T extends ManagedObject> implements ObjectStore<T> {
  readonly #o: ObjectManagerOptions;
  readonly #items = new Map<string, WatchItem<T>>();

  constructor(opts: ObjectManagerOptions) {
    this.#o = opts;
  }

  addReference(namespace: string, name: string, podUid: string): void {
    const key = `${namespace}/${name}`;
    let item = this.#items.get(key);
    if (item === undefined) {
      item = this.#start(namespace, name);
      this.#items.set(key, item);
    }
    item.refs.set(podUid, (item.refs.get(podUid) ?? 0) + 1);
  }

  deleteReference(namespace: string, name: string, podUid: string): void {
    const key = `${namespace}/${name}`;
    const item = this.#items.get(key);
    if (item === undefined) return;
    const n = (item.refs.get(podUid) ?? 0) - 1;
    if (n > 0) item.refs.set(podUid, n);
    else item.refs.delete(podUid);
    if (item.refs.size === 0) {
      item.stop.abort();
      this.#items.delete(key);
    }
  }

  async get(namespace: string, name: string, signal?: AbortSignal): Promise<T | undefined> {
    const item = this.#items.get(`${namespace}/${name}`);
    if (item === undefined) throw notRegistered(namespace, name);
    if (!item.reflector.hasSynced) await this.#waitForSync(item, signal);
    const object = item.object;
    // An immutable object never changes: its watch is no longer needed (upstream does the same).
    if (object?.immutable === true && !item.stop.signal.aborted) {
      item.stop.abort();
      this.#o.logger.v(4).info("Stopped watching for changes - object is immutable", {
        obj: `${namespace}/${name}`,
      });
    }
    return object;
  }

  close(): void {
    for (const item of this.#items.values()) item.stop.abort();
    this.#items.clear();
  }

  #start(namespace: string, name: string): WatchItem<T> {
    const stop = new AbortController();
    let markSynced = () => {};
    const synced = new Promise<void>((resolve) => {
      markSynced = resolve;
    });
    const reflector = new Reflector<T & { metadata?: { uid?: string } }>({
      // The reflector only lists (request) and watches; see ObjectManagerOptions.client.
      client: this.#o.client,
      path: `/api/v1/namespaces/${encodeURIComponent(namespace)}/${this.#o.resource}`,
      fieldSelector: `metadata.name=${name}`,
      clock: this.#o.clock,
      logger: this.#o.logger,
      what: `${this.#o.resource} ${namespace}/${name}`,
      onChange: (items) => {
        item.object = items.find((o) => o.metadata?.name === name);
        markSynced();
      },
    });
    const item: WatchItem<T> = { refs: new Map(), reflector, stop, synced, object: undefined };
    reflector.run(stop.signal).catch((err) => {
      this.#o.logger.error(err, "Reflector stopped", { object: `${namespace}/${name}` });
    });
    return item;
  }

  async #waitForSync(item: WatchItem<T>, signal?: AbortSignal): Promise<void> {
    const timer = new AbortController();
    const abort = signal === undefined ? timer.signal : AbortSignal.any([timer.signal, signal]);
    const timedOut = this.#o.clock.sleep(SYNC_TIMEOUT_MS, abort).then(() => true, () => false);
    try {
      const expired = await Promise.race([item.synced.then(() => false), timedOut]);
      signal?.throwIfAborted();
      if (expired) {
        const resource = this.#o.resource === "configmaps" ? "configmap" : "secret";
        throw new Error(`failed to sync ${resource} cache: timed out waiting for the condition`);
      }
    } finally {
      timer.abort();
    }
  }
}
