/**
 * @module
 * What the node tells the cluster of its CSI drivers: the CSINode object named after the node
 * (owned by the Node, `spec.drivers` with each registered driver's node ID, topology keys and
 * volume limit, and the `storage.alpha.kubernetes.io/migrated-plugins` annotation listing the
 * in-tree plugins whose volumes go through CSI), and on the Node the
 * `csi.volume.kubernetes.io/nodeid` annotation (driver name to node ID, JSON) and the drivers'
 * topology labels. Each change is read-modify-write, retried with upstream's backoff (4 tries,
 * 10 ms growing fivefold). Corresponds to upstream `pkg/volume/csi/nodeinfomanager`.
 */

import type { V1Node } from "@kubernetes/client-node";
import { isStatus, type KubeClient } from "../client/kube_client.ts";
import type { Clock } from "../util/clock.ts";
import { type Backoff, exponentialBackoff } from "../util/backoff.ts";
import type { Logger } from "../klog/klog.ts";
import { errorText } from "../util/errors.ts";

/** The Node annotation of the drivers' node IDs. */
export const ANNOTATION_KEY_NODE_ID = "csi.volume.kubernetes.io/nodeid";
/** The CSINode annotation of the migrated in-tree plugins (v1.MigratedPluginsAnnotationKey). */
export const MIGRATED_PLUGINS_ANNOTATION = "storage.alpha.kubernetes.io/migrated-plugins";

/**
 * The in-tree plugins whose volumes go through CSI drivers (csi_plugin.go's migratedPlugins:
 * every one is migrated at v1.36), as the annotation lists them, sorted.
 */
export const MIGRATED_PLUGINS: readonly string[] = [
  "kubernetes.io/aws-ebs",
  "kubernetes.io/azure-disk",
  "kubernetes.io/azure-file",
  "kubernetes.io/cinder",
  "kubernetes.io/gce-pd",
  "kubernetes.io/portworx-volume",
  "kubernetes.io/vsphere-volume",
];

/** upstream updateBackoff. */
const UPDATE_BACKOFF: Backoff = { steps: 4, durationMs: 10, factor: 5, jitter: 0.1 };

const MAX_INT32 = 2 ** 31 - 1;

/** storage.k8s.io/v1 CSINode, the fields this manager writes. */
export interface CSINode {
  apiVersion?: string;
  kind?: string;
  metadata: {
    name: string;
    uid?: string;
    resourceVersion?: string;
    annotations?: Record<string, string>;
    ownerReferences?: { apiVersion: string; kind: string; name: string; uid: string }[];
  };
  spec: { drivers: CSINodeDriver[] };
}

/** One driver of a CSINode. */
export interface CSINodeDriver {
  name: string;
  nodeID: string;
  topologyKeys?: string[] | null;
  allocatable?: { count?: number };
}

/** Options of {@link NodeInfoManager}. */
export interface NodeInfoManagerOptions {
  readonly client: Pick<KubeClient, "get" | "create" | "update" | "delete" | "patch">;
  readonly nodeName: string;
  readonly clock: Clock;
  readonly logger: Logger;
  /** @default {@link MIGRATED_PLUGINS} */
  readonly migratedPlugins?: readonly string[];
  /** For the backoff's jitter. @default Math.random */
  readonly random?: () => number;
}

/** upstream nodeInfoManager: CSINode and Node updates for the CSI drivers on this node. */
export class NodeInfoManager {
  readonly #o: NodeInfoManagerOptions;
  readonly #migrated: readonly string[];
  /** The Node's UID, the CSINode's owner; read at initialization. */
  #nodeUID = "";
  /** Serializes the read-modify-writes (upstream's lock). */
  #queue: Promise<unknown> = Promise.resolve();

  constructor(opts: NodeInfoManagerOptions) {
    this.#o = opts;
    this.#migrated = [...(opts.migratedPlugins ?? MIGRATED_PLUGINS)].sort();
  }

  /**
   * upstream InitializeCSINodeWithAnnotation: the CSINode exists, is owned by this Node, and
   * lists the migrated plugins. Throws after the backoff with upstream's message.
   */
  async initializeCSINodeWithAnnotation(signal?: AbortSignal): Promise<void> {
    await this.#retried("error updating CSINode annotation", () => this.#tryInitialize(signal), {
      signal,
      // Upstream names only the last failure here, and logs each one.
      lastOnly: true,
      onFailure: (e) => this.#o.logger.v(2).info(`Failed to publish CSINode: ${errorText(e)}`),
    });
  }

  /** upstream InstallCSIDriver: the Node's annotation and labels, then the CSINode's driver. */
  async installCSIDriver(
    driverName: string,
    driverNodeID: string,
    maxAttachLimit: number,
    topology: Readonly<Record<string, string>>,
    signal?: AbortSignal,
  ): Promise<void> {
    if (driverNodeID === "") {
      throw new Error("error adding CSI driver node info: driverNodeID must not be empty");
    }
    try {
      await this.#updateNode((node) => {
        const a = updateNodeIDInNode(node, driverName, driverNodeID);
        const b = updateTopologyLabels(node, topology);
        return a || b;
      }, signal);
    } catch (e) {
      throw new Error(`error updating Node object with CSI driver node info: ${errorText(e)}`);
    }
    try {
      await this.#retried(
        "error updating CSINode",
        () => this.#tryUpdateCSINode(driverName, driverNodeID, maxAttachLimit, topology, signal),
        { signal },
      );
    } catch (e) {
      throw new Error(`error updating CSINode object with CSI driver node info: ${errorText(e)}`);
    }
  }

  /** upstream UninstallCSIDriver: the CSINode's driver, then the Node's annotation entry. */
  async uninstallCSIDriver(driverName: string, signal?: AbortSignal): Promise<void> {
    try {
      await this.#retried("error updating CSINode", () => this.#tryUninstall(driverName, signal), {
        signal,
      });
    } catch (e) {
      throw new Error(`error uninstalling CSI driver from CSINode object ${errorText(e)}`);
    }
    try {
      await this.#updateNode((node) => removeNodeIDFromNode(node, driverName), signal);
    } catch (e) {
      throw new Error(`error removing CSI driver node info from Node object ${errorText(e)}`);
    }
  }

  async #tryInitialize(signal?: AbortSignal): Promise<void> {
    const node = await this.#o.client.get<V1Node>(this.#nodePath(), signal);
    this.#nodeUID = node.metadata?.uid ?? "";
    const existing = await this.#getCSINode(signal);
    if (!existing) {
      await this.#createCSINode(signal);
      return;
    }
    await this.#ensureNodeOwnsCSINode(existing, signal);
    if (this.#setMigrationAnnotation(existing)) {
      await this.#o.client.update(this.#csiNodePath(), existing, signal);
    }
  }

  async #tryUpdateCSINode(
    driverName: string,
    driverNodeID: string,
    maxAttachLimit: number,
    topology: Readonly<Record<string, string>>,
    signal?: AbortSignal,
  ): Promise<void> {
    const csiNode = (await this.#getCSINode(signal)) ?? await this.#createCSINode(signal);
    await this.#ensureNodeOwnsCSINode(csiNode, signal);
    const keys = Object.keys(topology).sort();
    let specModified = true;
    const others: CSINodeDriver[] = [];
    for (const d of csiNode.spec.drivers ?? []) {
      if (d.name !== driverName) {
        others.push(d);
        continue;
      }
      const sameKeys = sameSet(d.topologyKeys ?? [], keys);
      if (d.nodeID === driverNodeID && sameKeys && keepAllocatableCount(d, maxAttachLimit)) {
        specModified = false;
      }
    }
    const annotationModified = this.#setMigrationAnnotation(csiNode);
    if (!specModified && !annotationModified) return;
    const driver: CSINodeDriver = { name: driverName, nodeID: driverNodeID, topologyKeys: keys };
    if (maxAttachLimit > 0) {
      let limit = maxAttachLimit;
      if (limit > MAX_INT32) {
        this.#o.logger.warning(
          `Exceeded max supported attach limit value, truncating it to ${MAX_INT32}`,
        );
        limit = MAX_INT32;
      }
      driver.allocatable = { count: limit };
    } else if (maxAttachLimit !== 0) {
      this.#o.logger.error(
        null,
        `Invalid attach limit value ${maxAttachLimit} cannot be added to CSINode object for "${driverName}"`,
      );
    }
    csiNode.spec.drivers = [...others, driver];
    await this.#o.client.update(this.#csiNodePath(), csiNode, signal);
  }

  async #tryUninstall(driverName: string, signal?: AbortSignal): Promise<void> {
    const csiNode = await this.#getCSINode(signal);
    if (!csiNode) return;
    const drivers = (csiNode.spec.drivers ?? []).filter((d) => d.name !== driverName);
    if (drivers.length === (csiNode.spec.drivers ?? []).length) return;
    csiNode.spec.drivers = drivers;
    await this.#o.client.update(this.#csiNodePath(), csiNode, signal);
  }

  async #ensureNodeOwnsCSINode(csiNode: CSINode, signal?: AbortSignal): Promise<void> {
    let owner = "";
    let found = false;
    for (const ref of csiNode.metadata.ownerReferences ?? []) {
      if (ref.kind !== "Node") continue;
      owner = ref.uid;
      if (ref.name !== this.#o.nodeName) continue;
      if (owner === this.#nodeUID) {
        found = true;
        break;
      }
    }
    if (found) return;
    this.#o.logger.v(2).info(
      `existing CSINode "${csiNode.metadata.name}" is owned by different node (oldNodeID="${owner}", newNodeID="${this.#nodeUID}"), cleaning up...`,
    );
    try {
      await this.#o.client.delete(this.#csiNodePath(), undefined, signal);
    } catch (e) {
      throw new Error(
        `error deleting existing CSINode "${csiNode.metadata.name}": ${errorText(e)}`,
      );
    }
    throw new Error(
      `CSINode "${csiNode.metadata.name}" was owned by different node (oldNodeID="${owner}", newNodeID="${this.#nodeUID}"), deleted it`,
    );
  }

  /** upstream CreateCSINode: owned by the Node, no drivers, the migration annotation. */
  #createCSINode(signal?: AbortSignal): Promise<CSINode> {
    const csiNode: CSINode = {
      apiVersion: "storage.k8s.io/v1",
      kind: "CSINode",
      metadata: {
        name: this.#o.nodeName,
        ownerReferences: [{
          apiVersion: "v1",
          kind: "Node",
          name: this.#o.nodeName,
          uid: this.#nodeUID,
        }],
      },
      spec: { drivers: [] },
    };
    this.#setMigrationAnnotation(csiNode);
    return this.#o.client.create("/apis/storage.k8s.io/v1/csinodes", csiNode, signal);
  }

  /** upstream setMigrationAnnotation: whether the annotation changed. */
  #setMigrationAnnotation(csiNode: CSINode): boolean {
    const annotations = csiNode.metadata.annotations ?? {};
    const old = annotations[MIGRATED_PLUGINS_ANNOTATION] ?? "";
    if (sameSet(old === "" ? [] : old.split(","), this.#migrated)) return false;
    if (this.#migrated.length > 0) {
      annotations[MIGRATED_PLUGINS_ANNOTATION] = this.#migrated.join(",");
    } else delete annotations[MIGRATED_PLUGINS_ANNOTATION];
    csiNode.metadata.annotations = annotations;
    return true;
  }

  async #getCSINode(signal?: AbortSignal): Promise<CSINode | undefined> {
    try {
      return await this.#o.client.get<CSINode>(this.#csiNodePath(), signal);
    } catch (e) {
      if (isStatus(e, 404)) return undefined;
      throw e;
    }
  }

  /**
   * upstream updateNode: reads the Node, applies `change` (true when it changed something) and
   * patches the status subresource with the metadata it changed, as PatchNodeStatus does.
   */
  #updateNode(change: (node: V1Node) => boolean, signal?: AbortSignal): Promise<void> {
    return this.#retried("error updating node", async () => {
      const original = await this.#o.client.get<V1Node>(this.#nodePath(), signal);
      const node: V1Node = structuredClone(original);
      if (!change(node)) return;
      const patch = {
        metadata: {
          labels: mapPatch(original.metadata?.labels, node.metadata?.labels),
          annotations: mapPatch(original.metadata?.annotations, node.metadata?.annotations),
        },
      };
      await this.#o.client.patch(`${this.#nodePath()}/status`, patch, "strategic", signal);
    }, { signal });
  }

  /**
   * Runs `attempt` under the backoff, each try under the lock; fails with upstream's message:
   * `<what>: <timeout>; caused by: <the failures>` (all of them, aggregated, or the last).
   */
  async #retried(
    what: string,
    attempt: () => Promise<void>,
    opts: {
      readonly signal?: AbortSignal | undefined;
      readonly lastOnly?: boolean;
      readonly onFailure?: (e: unknown) => void;
    } = {},
  ): Promise<void> {
    const errors: string[] = [];
    try {
      await this.#backoff(async () => {
        try {
          await this.#locked(attempt);
          return true;
        } catch (e) {
          opts.signal?.throwIfAborted();
          errors.push(errorText(e));
          opts.onFailure?.(e);
          return false;
        }
      }, opts.signal);
    } catch (e) {
      const caused = opts.lastOnly || errors.length === 1
        ? errors.at(-1)
        : `[${errors.join(", ")}]`;
      throw new Error(`${what}: ${errorText(e)}; caused by: ${caused}`);
    }
  }

  #backoff(condition: () => Promise<boolean>, signal?: AbortSignal): Promise<void> {
    return exponentialBackoff(UPDATE_BACKOFF, condition, {
      clock: this.#o.clock,
      ...(signal ? { signal } : {}),
      ...(this.#o.random ? { random: this.#o.random } : {}),
    });
  }

  #locked<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(fn, fn);
    this.#queue = run.catch(() => {});
    return run;
  }

  #nodePath(): string {
    return `/api/v1/nodes/${encodeURIComponent(this.#o.nodeName)}`;
  }

  #csiNodePath(): string {
    return `/apis/storage.k8s.io/v1/csinodes/${encodeURIComponent(this.#o.nodeName)}`;
  }
}

/** upstream updateNodeIDInNode. */
function updateNodeIDInNode(node: V1Node, driver: string, nodeID: string): boolean {
  const ids = nodeIDMap(node);
  if (ids[driver] === nodeID) return false;
  ids[driver] = nodeID;
  node.metadata ??= {};
  node.metadata.annotations = {
    ...node.metadata.annotations,
    [ANNOTATION_KEY_NODE_ID]: goJSONMap(ids),
  };
  return true;
}

/** upstream removeNodeIDFromNode. */
function removeNodeIDFromNode(node: V1Node, driver: string): boolean {
  const ids = nodeIDMap(node);
  if (!(driver in ids)) return false;
  delete ids[driver];
  const annotations = { ...node.metadata?.annotations };
  if (Object.keys(ids).length === 0) delete annotations[ANNOTATION_KEY_NODE_ID];
  else annotations[ANNOTATION_KEY_NODE_ID] = goJSONMap(ids);
  node.metadata = { ...node.metadata, annotations };
  return true;
}

/** upstream updateTopologyLabels: a label the driver would change is a collision. */
function updateTopologyLabels(node: V1Node, topology: Readonly<Record<string, string>>): boolean {
  const entries = Object.entries(topology);
  if (entries.length === 0) return false;
  const labels = node.metadata?.labels ?? {};
  for (const [k, v] of entries) {
    const cur = labels[k];
    if (cur !== undefined && cur !== v) {
      throw new Error(
        `detected topology value collision: driver reported "${k}":"${v}" but existing label is "${k}":"${cur}"`,
      );
    }
  }
  node.metadata = { ...node.metadata, labels: { ...labels, ...topology } };
  return true;
}

/** upstream buildNodeIDMapFromAnnotation. */
function nodeIDMap(node: V1Node): Record<string, string> {
  const raw = node.metadata?.annotations?.[ANNOTATION_KEY_NODE_ID] ?? "";
  if (raw === "") return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch (e) {
    throw new Error(
      `failed to parse node's "${ANNOTATION_KEY_NODE_ID}" annotation value (${
        JSON.stringify(raw)
      }) err=${errorText(e)}`,
    );
  }
  if (parsed === null) return {};
  if (typeof parsed !== "object" || Array.isArray(parsed)) {
    throw new Error(
      `failed to parse node's "${ANNOTATION_KEY_NODE_ID}" annotation value (${
        JSON.stringify(raw)
      }) err=not an object of driver names to node IDs`,
    );
  }
  return { ...(parsed as Record<string, string>) };
}

/** A map as Go's json.Marshal writes it: keys sorted. */
function goJSONMap(m: Record<string, string>): string {
  return JSON.stringify(Object.fromEntries(Object.entries(m).sort(([a], [b]) => a < b ? -1 : 1)));
}

/** The strategic merge patch of one string map: changed keys, and null for removed ones. */
function mapPatch(
  before: Readonly<Record<string, string>> | undefined,
  after: Readonly<Record<string, string>> | undefined,
): Record<string, string | null> | undefined {
  const out: Record<string, string | null> = {};
  for (const [k, v] of Object.entries(after ?? {})) if (before?.[k] !== v) out[k] = v;
  for (const k of Object.keys(before ?? {})) if (!(k in (after ?? {}))) out[k] = null;
  return Object.keys(out).length > 0 ? out : undefined;
}

/** upstream keepAllocatableCount. */
function keepAllocatableCount(d: CSINodeDriver, maxAttachLimit: number): boolean {
  if (maxAttachLimit === 0) return d.allocatable?.count === undefined;
  return d.allocatable?.count === maxAttachLimit;
}

function sameSet(a: readonly string[], b: readonly string[]): boolean {
  const sa = new Set(a);
  const sb = new Set(b);
  return sa.size === sb.size && [...sa].every((x) => sb.has(x));
}
