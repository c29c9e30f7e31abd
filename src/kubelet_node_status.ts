/**
 * @module
 * Registers the Node and keeps its status current: registerWithAPIServer (create, or reconcile
 * an existing Node's default labels and annotations), a fast status update at start so the node
 * turns Ready as soon as the runtime is, then every nodeStatusUpdateFrequency (with 4 % jitter)
 * a status patch, skipped while nothing but heartbeats changed and nodeStatusReportFrequency has
 * not passed. Each update first gives the runtime the Node's pod CIDRs (kubelet_network.ts); a
 * change of them makes the patch happen. Failures are logged once per change of state; a Node
 * deleted while the kubelet runs is registered again. Corresponds to upstream
 * `pkg/kubelet/kubelet_node_status.go`.
 */

import { isExtendedResourceName } from "./lifecycle/predicate.ts";
import type { V1Node, V1NodeAddress, V1NodeStatus } from "@kubernetes/client-node";
import type * as api from "../proto/runtime/v1/api.ts";
import { type Clock, WAIT_ENDED } from "./util/clock.ts";
import type { Logger } from "./klog/klog.ts";
import { isStatus, type KubeClient } from "./client/kube_client.ts";
import { type EventRecorder, nodeRef } from "./client/record.ts";
import type { KubeletConfiguration } from "./apis/config_types.ts";
import type { MachineInfo } from "./stats/machine_info.ts";
import type { NodeStartupLatencyTracker } from "./util/node_startup_latency_tracker.ts";
import {
  conditionEvents,
  initialNode,
  type InitialNodeOptions,
  nodeStatus,
  nodeStatusHasChanged,
  type StatusInputs,
} from "./nodestatus/node_status.ts";
import { linkSignals } from "./util/linked_signal.ts";

/** Upstream's nodeStatusUpdateRetry. */
export const NODE_STATUS_UPDATE_RETRY = 5;

/** What the node status manager needs; each a narrow function, as upstream's setters take. */
export interface NodeStatusOptions extends InitialNodeOptions {
  readonly client: KubeClient;
  /** Unthrottled client for status heartbeats. */
  readonly heartbeatClient: KubeClient;
  readonly config: KubeletConfiguration;
  readonly nodeIPs: readonly string[];
  readonly kubeletVersion: string;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly machineInfo: () => Promise<MachineInfo>;
  readonly rootfsCapacity: () => Promise<number | undefined>;
  /** "containerd://1.6.20" once the runtime answered Version. */
  readonly containerRuntimeVersion: () => string;
  /** status.declaredFeatures. @default none */
  readonly declaredFeatures?: readonly string[];
  /** The runtime's handlers of its last CRI Status. @default none */
  readonly runtimeHandlers?: () => StatusInputs["runtimeHandlers"];
  /** The node's images (the kubelet serves them from its image cache, src/images/image_cache.ts). */
  readonly listImages: (signal?: AbortSignal) => Promise<readonly api.Image[]>;
  /** Why the node is not ready, from the runtime state; empty when it is. */
  readonly notReadyReasons: () => string[];
  /**
   * The volume manager's attachable volumes in use (undefined until it knows them), and where
   * the node's reported volumesInUse go after each update (upstream markVolumesFromNode).
   * @default none: volumesInUse is not reported
   */
  readonly volumes?: {
    volumesInUse(): readonly string[] | undefined;
    markVolumesReportedInUse(names: readonly string[]): void;
  };
  /** Memory, disk and PID pressure (the eviction manager's). @default none */
  readonly pressure?: () => { memory: boolean; disk: boolean; pid: boolean } | undefined;
  /** The device plugins' resources (the device manager's capacity). @default none */
  readonly devices?: () => StatusInputs["devices"];
  /**
   * Whether the extended resources of an existing Node must be zeroed at registration: the
   * device manager has no checkpoint, so the node was recreated (upstream
   * reconcileExtendedResource). @default never
   */
  readonly shouldResetExtendedResourceCapacity?: () => Promise<boolean>;
  /** Random number in [0, 1), for jitter. @default Math.random */
  readonly random?: () => number;
  /**
   * The Node as the node informer last saw it (upstream's nodeLister), or undefined before its
   * first list or after a deletion. The first try of each update reads it instead of asking the
   * apiserver; retries GET the Node. @default none: every try GETs the Node
   */
  readonly cachedNode?: () => V1Node | undefined;
  /** Where the node status events go (upstream recordNodeStatusEvent). @default none */
  readonly recorder?: EventRecorder;
  /** Told of the first registration attempt, the Node's creation and its first Ready status. */
  readonly startupTracker?: NodeStartupLatencyTracker;
  /**
   * Gives the runtime the Node's `spec.podCIDRs` joined by "," before each status update
   * (upstream updatePodCIDR, kubelet_network.ts): true when the CIDR changed, which makes the
   * status patch happen even if the status did not change; a rejection is logged and counts as a
   * change, as upstream's, the first time for that CIDR (see #updatePodCIDR). @default none: the
   * pod CIDR is not given to the runtime
   */
  readonly updatePodCIDR?: (cidr: string, signal?: AbortSignal) => Promise<boolean>;
}

/** Registers the node and reports its status. */
export class NodeStatusManager {
  readonly #o: NodeStatusOptions;
  #node: V1Node | undefined;
  #registered = false;
  #lastReport = 0;
  #lastStatus: V1NodeStatus | undefined;
  #failing = false;
  #wake: AbortController | undefined;
  #poked = false;
  /** Upstream lastNodeUnschedulable: the schedulability the last event reported. */
  #lastUnschedulable = false;
  /** The pod CIDR the runtime refused last, until it accepts one. */
  #refusedPodCIDR: string | undefined;

  constructor(opts: NodeStatusOptions) {
    this.#o = opts;
  }

  /** Ends the current wait so the next status update happens now (a readiness change). */
  poke(): void {
    // A poke while an update is under way is kept for the moment it ends: that update may
    // have computed its status before the change.
    this.#poked = true;
    this.#wake?.abort(WAIT_ENDED);
  }

  /** The Node as last read or written. */
  get node(): V1Node | undefined {
    return this.#node;
  }

  /** The addresses of the last status reported (upstream getLastObservedNodeAddresses). */
  lastObservedNodeAddresses(): V1NodeAddress[] {
    return this.#lastStatus?.addresses ?? [];
  }

  get registered(): boolean {
    return this.#registered;
  }

  #path(sub = ""): string {
    return `/api/v1/nodes/${this.#o.nodeName}${sub}`;
  }

  /** One registration attempt (upstream tryRegisterWithAPIServer); true when registered. */
  async tryRegister(signal?: AbortSignal): Promise<boolean> {
    const { client, logger } = this.#o;
    // Upstream's initialNode runs the status setters (recording their events) as it builds the
    // Node it registers. Readiness is read first, before anything is awaited: registration
    // starts before the runtime's first status check, so a new node is registered NotReady
    // and turns Ready (a NodeReady event) once the runtime is checked, as upstream's does.
    const notReadyReasons = [...this.#o.notReadyReasons()];
    const node = initialNode(this.#o);
    const status = await this.#computeStatus(undefined, notReadyReasons, signal);
    for (const reason of conditionEvents(undefined, status.conditions ?? [])) {
      this.#recordNodeStatusEvent(reason);
    }
    node.status = { ...node.status, ...status };
    try {
      this.#node = await client.create("/api/v1/nodes", node, signal);
      this.#o.startupTracker?.recordRegisteredNewNode();
      logger.info("Successfully registered node", { node: this.#o.nodeName });
      return (this.#registered = true);
    } catch (e) {
      if (!isStatus(e, 409)) throw e;
    }
    const existing = await client.get<V1Node>(this.#path(), signal);
    const patch = reconcileExisting(node, existing);
    this.#node = patch
      ? await client.patch<V1Node>(this.#path(), patch, "strategic", signal)
      : existing;
    if (await this.#o.shouldResetExtendedResourceCapacity?.()) {
      const zeroed = zeroExtendedResources(this.#node);
      if (zeroed) {
        for (const resourceName of Object.keys(zeroed.status.capacity)) {
          logger.info("Zero out resource capacity in existing node", {
            resourceName,
            node: this.#o.nodeName,
          });
        }
        this.#node = await client.patch<V1Node>(
          `${this.#path()}/status`,
          zeroed,
          "strategic",
          signal,
        );
      }
    }
    logger.info("Node was previously registered", { node: this.#o.nodeName });
    return (this.#registered = true);
  }

  /** Registers, retrying with backoff (100 ms doubling to 7 s) until done or aborted. */
  async registerWithAPIServer(signal: AbortSignal): Promise<void> {
    let delay = 100;
    let logged = false;
    this.#o.startupTracker?.recordAttemptRegisterNode();
    while (!signal.aborted && !this.#registered) {
      try {
        await this.tryRegister(signal);
        return;
      } catch (e) {
        if (signal.aborted) return;
        if (!logged) {
          this.#o.logger.error(e, "Unable to register node with API server; retrying", {
            node: this.#o.nodeName,
          });
        }
        logged = true;
      }
      await this.#o.clock.sleep(delay, signal).catch(() => {});
      delay = Math.min(delay * 2, 7_000);
    }
  }

  /** Computes the status and patches it when it changed or the report period passed. */
  async updateNodeStatus(signal?: AbortSignal): Promise<void> {
    const o = this.#o;
    let lastError: unknown;
    for (let i = 0; i < NODE_STATUS_UPDATE_RETRY; i++) {
      try {
        await this.#tryUpdate(i, signal);
        return;
      } catch (e) {
        if (signal?.aborted) throw e;
        if (isStatus(e, 404)) {
          // Someone deleted the Node: register it again on the next round.
          this.#registered = false;
          o.logger.error(e, "Node not found; it will be registered again", { node: o.nodeName });
          throw e;
        }
        lastError = e;
      }
    }
    throw lastError;
  }

  async #tryUpdate(tryNumber: number, signal?: AbortSignal): Promise<void> {
    const o = this.#o;
    // As upstream's tryUpdateNodeStatus: the first try reads the informer's copy (no request:
    // on an idle node this GET was one of the two requests every 10 s); a retry, or a first
    // try the informer cannot serve, GETs the Node, so a Node deleted under us shows up as
    // NotFound even while nothing is to be reported.
    const cached = tryNumber === 0 ? o.cachedNode?.() : undefined;
    if (tryNumber === 0 && o.cachedNode && !cached) {
      throw new Error(`node ${o.nodeName} is not in the node informer's cache`);
    }
    this.#node = cached ?? await o.heartbeatClient.request<V1Node>("GET", this.#path(), {
      // Without an informer the first try reads the apiserver's cache, as upstream did before
      // it had one; a retry reads etcd.
      query: tryNumber === 0 ? { resourceVersion: "0" } : undefined,
      signal,
    });
    const podCIDRChanged = await this.#updatePodCIDR(this.#node, signal);
    const now = o.clock.now();
    const previous = this.#lastStatus ?? this.#node?.status;
    const status = await this.#computeStatus(previous, undefined, signal);
    // The setters record their events as they compute, before the patch, as upstream's.
    for (const reason of conditionEvents(previous?.conditions, status.conditions ?? [])) {
      this.#recordNodeStatusEvent(reason);
    }
    this.#recordNodeSchedulableEvent(this.#node?.spec?.unschedulable ?? false);
    const due = now - this.#lastReport >= (o.config.nodeStatusReportFrequency ?? 300_000);
    if (!podCIDRChanged && !due && !nodeStatusHasChanged(this.#lastStatus, status)) {
      o.volumes?.markVolumesReportedInUse(this.#node?.status?.volumesInUse ?? []);
      return;
    }
    this.#node = await o.heartbeatClient.patch<V1Node>(
      this.#path("/status"),
      { status },
      "strategic",
      signal,
    );
    o.volumes?.markVolumesReportedInUse(this.#node.status?.volumesInUse ?? []);
    this.#lastStatus = status;
    this.#lastReport = now;
    const ready = this.#node.status?.conditions?.find((c) => c.type === "Ready");
    if (ready?.status === "True") o.startupTracker?.recordNodeReady();
  }

  /**
   * Upstream updateNode's pod CIDR step: the Node's CIDRs to the runtime, when it has any (they
   * may have been given before, so an unchanged spec.podCIDR does not mean nothing to do). A
   * refusal forces a patch and is logged once per CIDR: upstream's fast path patches only a Ready
   * node and its regular one runs every 10 s, while this loop polls every 100 ms until the node
   * is Ready, which a CIDR the runtime keeps refusing can hold off for good.
   */
  async #updatePodCIDR(
    node: V1Node | undefined,
    signal: AbortSignal | undefined,
  ): Promise<boolean> {
    const cidrs = node?.spec?.podCIDRs ?? [];
    const update = this.#o.updatePodCIDR;
    if (cidrs.length === 0 || update === undefined) return false;
    const cidr = cidrs.join(",");
    try {
      const changed = await update(cidr, signal);
      this.#refusedPodCIDR = undefined;
      return changed;
    } catch (e) {
      if (signal?.aborted) throw e;
      if (this.#refusedPodCIDR === cidr) return false;
      this.#refusedPodCIDR = cidr;
      this.#o.logger.error(e, "Error updating pod CIDR");
      return true;
    }
  }

  /** The status setters' output over `previous`; readiness as given, else as it is now. */
  async #computeStatus(
    previous: V1NodeStatus | undefined,
    notReadyReasons: string[] | undefined,
    signal: AbortSignal | undefined,
  ): Promise<V1NodeStatus> {
    const o = this.#o;
    return nodeStatus({
      config: o.config,
      machine: await o.machineInfo(),
      rootfsCapacity: await o.rootfsCapacity(),
      hostname: o.hostname,
      nodeIPs: o.nodeIPs,
      kubeletVersion: o.kubeletVersion,
      containerRuntimeVersion: o.containerRuntimeVersion(),
      runtimeHandlers: o.runtimeHandlers?.(),
      declaredFeatures: o.declaredFeatures,
      images: await o.listImages(signal).catch(() => []),
      notReadyReasons: notReadyReasons ?? o.notReadyReasons(),
      pressure: o.pressure?.(),
      volumesInUse: o.volumes?.volumesInUse(),
      devices: o.devices?.(),
      now: o.clock.now(),
    }, previous);
  }

  /** Upstream recordNodeStatusEvent: a Normal event on the Node naming its new state. */
  #recordNodeStatusEvent(reason: string): void {
    const o = this.#o;
    o.logger.v(2).info("Recording event message for node", { node: o.nodeName, event: reason });
    // Upstream's kl.nodeRef: apiVersion v1, kind Node, the node's name, no namespace or uid.
    const ref = nodeRef(o.nodeName);
    o.recorder?.event(ref, "Normal", reason, `Node ${o.nodeName} status is now: ${reason}`);
  }

  /** Upstream recordNodeSchedulableEvent: an event each time spec.unschedulable changes. */
  #recordNodeSchedulableEvent(unschedulable: boolean): void {
    if (this.#lastUnschedulable === unschedulable) return;
    this.#recordNodeStatusEvent(unschedulable ? "NodeNotSchedulable" : "NodeSchedulable");
    this.#lastUnschedulable = unschedulable;
  }

  /** Registers (when --register-node), then reports status until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    const o = this.#o;
    const random = o.random ?? Math.random;
    let fast = true;
    while (!signal.aborted) {
      if (o.config.registerNode && !this.#registered) await this.registerWithAPIServer(signal);
      if (signal.aborted) break;
      this.#poked = false;
      // Whether the status about to be posted says Ready: only then can fast polling end.
      const readyBefore = o.notReadyReasons().length === 0;
      try {
        await this.updateNodeStatus(signal);
        if (this.#failing) o.logger.info("Node status updated again", { node: o.nodeName });
        this.#failing = false;
      } catch (e) {
        if (signal.aborted) break;
        if (!this.#failing && !isStatus(e, 404)) {
          o.logger.error(e, "Unable to update node status", { node: o.nodeName });
        }
        this.#failing = true;
      }
      // fastStatusUpdateOnce: poll quickly until the node reports Ready, then settle into the period.
      if (fast && readyBefore && !this.#failing) fast = false;
      if (this.#poked) continue;
      const period = fast ? 100 : o.config.nodeStatusUpdateFrequency * (1 + 0.04 * random());
      this.#wake = new AbortController();
      using link = linkSignals(signal, this.#wake.signal);
      await o.clock.sleep(period, link.signal).catch(() => {});
    }
  }
}

/**
 * The status patch that sets every extended resource of the node to 0, or undefined when it has
 * none (upstream reconcileExtendedResource, for a node whose device plugins must register
 * again before their devices count).
 */
export function zeroExtendedResources(
  node: V1Node,
):
  | { status: { capacity: Record<string, string>; allocatable: Record<string, string> } }
  | undefined {
  const names = Object.keys(node.status?.capacity ?? {}).filter(isExtendedResourceName);
  if (names.length === 0) return undefined;
  const zero = Object.fromEntries(names.map((n) => [n, "0"]));
  return { status: { capacity: zero, allocatable: { ...zero } } };
}

/**
 * What an existing Node needs to match this kubelet (upstream reconcileCMADAnnotation and
 * updateDefaultLabels): a strategic merge patch, or undefined when nothing differs.
 */
export function reconcileExisting(
  wanted: V1Node,
  existing: V1Node,
): Record<string, unknown> | undefined {
  const defaults = [
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
  ];
  const labels: Record<string, string> = {};
  for (const key of defaults) {
    const v = wanted.metadata?.labels?.[key];
    if (v !== undefined && existing.metadata?.labels?.[key] !== v) labels[key] = v;
  }
  const annotations: Record<string, string | null> = {};
  const cmad = "volumes.kubernetes.io/controller-managed-attach-detach";
  const want = wanted.metadata?.annotations?.[cmad];
  const have = existing.metadata?.annotations?.[cmad];
  if (want !== have) annotations[cmad] = want ?? null;
  if (Object.keys(labels).length === 0 && Object.keys(annotations).length === 0) return undefined;
  return { metadata: { labels, annotations } };
}
