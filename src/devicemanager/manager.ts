/**
 * @module
 * The device manager: device plugins register on `<root-dir>/device-plugins/kubelet.sock`
 * (device plugin API v1beta1) or through the plugin registry, the kubelet dials each back, keeps
 * its ListAndWatch stream open and counts its healthy and unhealthy devices, which become the
 * node's capacity (all of them) and allocatable (the healthy ones) of the plugin's extended
 * resource. At admission each container asking for such a resource gets devices chosen here
 * (the plugin's preferred ones when it says it has a preference) and the plugin's Allocate
 * answer; at container creation that answer becomes the container's env, mounts, device nodes,
 * annotations and CDI devices, after PreStartContainer when the plugin asked for it.
 * Allocations are kept in `<root-dir>/device-plugins/kubelet_internal_checkpoint` (upstream's
 * format) so that a restarted kubelet gives running pods the same devices. A plugin that goes
 * away leaves its resource on the node, all unhealthy, for five minutes, then the resource is
 * reported as 0 and dropped; a plugin that registers again (as plugins do when they see the
 * kubelet's socket re-created) takes its resource back. With the ResourceHealthStatus gate (beta,
 * on), a device whose health changes while a pod holds it, or that reappears in a plugin's list,
 * has its pods handed to `onHealthChange` for a new status, and
 * {@link DeviceManager.allocatedResourcesStatus} gives each container's devices with their health
 * (the container status's `allocatedResourcesStatus`). As upstream, a plugin that goes away
 * leaves its devices' last reported health there: the device plugin API knows no Unknown.
 * The registration socket, the plugin registry's handler and the plugins' streams are
 * {@link PluginServer}'s (`plugin_server.ts`); this module keeps what they report.
 * Corresponds to upstream `pkg/kubelet/cm/devicemanager/manager.go`; the registration side is
 * upstream's `plugin/v1beta1/server.go`, `handler.go` and `client.go`.
 */

import type {
  V1Container,
  V1Pod,
  V1ResourceHealth,
  V1ResourceStatus,
} from "@kubernetes/client-node";
import { join } from "node:path";
import type {
  ContainerAllocateResponse,
  Device,
  DevicePluginOptions,
} from "../../proto/deviceplugin/v1beta1/api.ts";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import { errorText } from "../util/errors.ts";
import { parseQuantity } from "../util/quantity.ts";
import { Endpoint } from "./endpoint.ts";
import {
  type DeviceRunContainerOptions,
  type DevicesPerNuma,
  NODE_WITHOUT_TOPOLOGY,
  PodDevices,
  type ResourceDeviceInstances,
} from "./pod_devices.ts";
import { CHECKPOINT_FILE, decodeDeviceCheckpoint, encodeDeviceCheckpoint } from "./checkpoint.ts";
import { writeFileAtomic } from "../checkpointmanager/checkpoint_manager.ts";
import type { TopologyHint } from "../topologymanager/policy.ts";
import {
  filterByAffinity,
  generateDeviceTopologyHints,
  hasTopologyAlignment,
} from "./topology_hints.ts";
import type { PluginHandler } from "../pluginmanager/plugin_handler.ts";
import { podLimits, valueOf } from "../qos/resource_helpers.ts";
import { type ClientHandler, PluginServer } from "./plugin_server.ts";

/** The directory device plugins put their sockets in, under the root directory. */
export const DEVICE_PLUGINS_DIR = "device-plugins";

/** A container's allocation failed; its message is upstream's. */
export class DeviceAllocationError extends Error {
  override name = "DeviceAllocationError";
}

/** Options of {@link DeviceManager}. */
export interface DeviceManagerOptions {
  /** The kubelet's root directory; sockets and the checkpoint live in `device-plugins/`. */
  readonly rootDirectory: string;
  readonly clock: Clock;
  readonly logger: Logger;
  /** The pods admitted and not terminated (upstream activePods). */
  readonly activePods: () => readonly V1Pod[];
  /** Whether every pod source has been seen (upstream sourcesReady.AllReady). */
  readonly sourcesReady: () => boolean;
  /** Ends the registration server and the plugins' streams. */
  readonly signal: AbortSignal;
  /** Device plugin metrics. @default none */
  readonly metrics?: DeviceManagerMetrics;
  /** The machine's NUMA nodes, for topology hints. @default [0] */
  readonly numaNodes?: readonly number[];
  /** The NUMA nodes the topology manager chose for a container. @default none */
  readonly affinity?: (podUID: string, container: string) => TopologyHint | undefined;
  /** The kubelet's feature gates: ResourceHealthStatus. @default on */
  readonly featureGates?: Readonly<Record<string, boolean>>;
  /**
   * Pods holding a device whose health changed: their status is to be made again (upstream's
   * `update` channel). @default none
   */
  readonly onHealthChange?: (podUIDs: string[]) => void;
}

/** The families the device manager records (upstream DevicePlugin* metrics). */
export interface DeviceManagerMetrics {
  registration(resourceName: string): void;
  allocationDuration(resourceName: string, seconds: number): void;
}

interface EndpointInfo {
  readonly endpoint: Endpoint;
  /** Undefined for an endpoint restored from the checkpoint. */
  readonly options: DevicePluginOptions | undefined;
}

/** The device plugin resources of the node, for the node status (upstream GetCapacity). */
export interface DeviceCapacity {
  readonly capacity: Record<string, number>;
  readonly allocatable: Record<string, number>;
  /** Resources whose plugin is gone for good: reported as 0. */
  readonly removed: string[];
}

/** The device manager; see the module documentation. */
export class DeviceManager {
  readonly #o: DeviceManagerOptions;
  readonly #dir: string;
  readonly #endpoints = new Map<string, EndpointInfo>();
  readonly #allDevices = new Map<string, Map<string, Device>>();
  readonly #healthy = new Map<string, Set<string>>();
  readonly #unhealthy = new Map<string, Set<string>>();
  #allocated = new Map<string, Set<string>>();
  readonly #podDevices = new PodDevices();
  /** Devices an init container used that the next containers of the same pod may reuse. */
  #devicesToReuse = new Map<string, Map<string, Set<string>>>();
  /** `<pod UID>/<container>` of the containers running when the kubelet started. */
  #runningAtStart = new Set<string>();
  readonly #server: PluginServer;
  #writing: Promise<void> = Promise.resolve();

  constructor(opts: DeviceManagerOptions) {
    this.#o = opts;
    this.#dir = join(opts.rootDirectory, DEVICE_PLUGINS_DIR);
    this.#server = new PluginServer({
      directory: this.#dir,
      clock: opts.clock,
      logger: opts.logger,
      signal: opts.signal,
      handler: this.#clientHandler(),
      onRegistration: (resource) => opts.metrics?.registration(resource),
    });
  }

  /** The registration socket's path. */
  get socketPath(): string {
    return this.#server.socketPath;
  }

  get #checkpointPath(): string {
    return join(this.#dir, CHECKPOINT_FILE);
  }

  /**
   * upstream Start: makes the directory, removes the sockets left in it (plugins see their
   * kubelet go and register again), restores the checkpoint (a bad one is logged, as upstream
   * does, and the allocations start empty) and serves the registration socket.
   * `runningContainers` are `<pod UID>/<container name>` of the containers running now.
   */
  async start(runningContainers: Iterable<string> = []): Promise<void> {
    const { logger } = this.#o;
    logger.v(2).info("Starting Device Plugin manager");
    this.#runningAtStart = new Set(runningContainers);
    await Deno.mkdir(this.#dir, { recursive: true, mode: 0o750 });
    await this.#cleanupPluginDirectory();
    try {
      await this.#readCheckpoint();
    } catch (err) {
      logger.error(
        err,
        "Continue after failing to read checkpoint file. Device allocation info may NOT be up-to-date",
      );
    }
    await this.#server.start();
    this.#o.signal.addEventListener("abort", () => void this.stop(), { once: true });
  }

  /** Stops the server and every plugin's stream (upstream Stop). */
  async stop(): Promise<void> {
    for (const { endpoint } of this.#endpoints.values()) endpoint.close();
    await this.#server.stop();
    await this.#writing;
  }

  /** The handler of `DevicePlugin` registrations through the plugin registry. */
  pluginHandler(): PluginHandler {
    return this.#server.pluginHandler();
  }

  /** What the plugin server reports lands in this manager's endpoints and device sets. */
  #clientHandler(): ClientHandler {
    return {
      endpoint: (resource) => this.#endpoints.get(resource)?.endpoint,
      pluginConnected: (resource, endpoint, options) => {
        // A plugin registering again replaces the one before (its stream ends with it).
        const old = this.#endpoints.get(resource);
        this.#endpoints.set(resource, { endpoint, options });
        old?.endpoint.close();
        this.#o.logger.v(2).info("Device plugin connected", { resourceName: resource });
      },
      pluginListAndWatchReceiver: (resource, devices) => this.#deviceUpdate(resource, devices),
      pluginDisconnected: (resource, endpoint) => {
        this.#markResourceUnhealthy(resource);
        this.#o.logger.v(2).info("Endpoint became unhealthy", { resourceName: resource });
        endpoint.stop();
      },
    };
  }

  #markResourceUnhealthy(resource: string): void {
    const healthy = this.#healthy.get(resource) ?? new Set();
    this.#healthy.set(resource, new Set());
    const unhealthy = this.#unhealthy.get(resource) ?? new Set();
    for (const id of healthy) unhealthy.add(id);
    this.#unhealthy.set(resource, unhealthy);
  }

  /** upstream genericDeviceUpdateCallback: the plugin's whole list, as it sent it. */
  #deviceUpdate(resource: string, devices: readonly Device[]): void {
    const healthy = new Set<string>();
    const unhealthy = new Set<string>();
    const all = new Map<string, Device>();
    const old = this.#allDevices.get(resource);
    // A device new to the list may have been held all along (its plugin was away).
    const changed = new Set<string>();
    for (const d of devices) {
      all.set(d.ID, d);
      (d.health === "Healthy" ? healthy : unhealthy).add(d.ID);
      if (old?.get(d.ID)?.health !== d.health) changed.add(d.ID);
    }
    this.#allDevices.set(resource, all);
    this.#healthy.set(resource, healthy);
    this.#unhealthy.set(resource, unhealthy);
    if (this.#healthOn && changed.size > 0) {
      const pods = [...this.#podDevices.podsHolding(resource, changed)].sort();
      if (pods.length > 0) this.#o.onHealthChange?.(pods);
    }
    this.#writeCheckpoint();
    this.#o.logger.v(2).info("Processed device updates for resource", {
      resourceName: resource,
      totalCount: devices.length,
      healthyCount: healthy.size,
    });
  }

  /**
   * upstream GetCapacity: healthy devices in capacity and allocatable, unhealthy ones in
   * capacity only; a resource whose plugin stopped more than the grace period ago is removed.
   */
  getCapacity(): DeviceCapacity {
    const capacity: Record<string, number> = {};
    const allocatable: Record<string, number> = {};
    const removed = new Set<string>();
    const gone = (resource: string) => {
      const e = this.#endpoints.get(resource);
      return e === undefined || e.endpoint.stopGracePeriodExpired();
    };
    for (const [resource, devices] of this.#healthy) {
      if (gone(resource)) {
        removed.add(resource);
        continue;
      }
      capacity[resource] = devices.size;
      allocatable[resource] = devices.size;
    }
    for (const [resource, devices] of this.#unhealthy) {
      if (gone(resource)) {
        removed.add(resource);
        continue;
      }
      capacity[resource] = (capacity[resource] ?? 0) + devices.size;
      allocatable[resource] ??= 0;
    }
    for (const resource of removed) {
      this.#endpoints.delete(resource);
      this.#healthy.delete(resource);
      this.#unhealthy.delete(resource);
    }
    if (removed.size > 0) this.#writeCheckpoint();
    return { capacity, allocatable, removed: [...removed] };
  }

  /** Whether `resource` is a device plugin's (upstream isDevicePluginResource). */
  isDevicePluginResource(resource: string): boolean {
    return this.#healthy.has(resource) || this.#allocated.has(resource);
  }

  /** Whether any container of the pod asks for a device plugin resource. */
  needsDevices(pod: V1Pod): boolean {
    return allContainers(pod).some((c) =>
      Object.keys(c.resources?.limits ?? {}).some((r) => this.isDevicePluginResource(r))
    );
  }

  /**
   * Allocates devices to each container of the pod, init containers first (upstream topology
   * manager admitPolicyNone calling Allocate). Throws {@link DeviceAllocationError}.
   */
  async allocatePod(pod: V1Pod, signal?: AbortSignal): Promise<void> {
    for (const c of allContainers(pod)) await this.allocate(pod, c, signal);
  }

  /** upstream Allocate: one container, reusing what the pod's init containers freed. */
  async allocate(pod: V1Pod, container: V1Container, signal?: AbortSignal): Promise<void> {
    const uid = pod.metadata?.uid ?? "";
    for (const other of this.#devicesToReuse.keys()) {
      if (other !== uid) this.#devicesToReuse.delete(other);
    }
    let reuse = this.#devicesToReuse.get(uid);
    if (!reuse) this.#devicesToReuse.set(uid, reuse = new Map());
    const init = pod.spec?.initContainers?.find((c) => c.name === container.name);
    await this.#allocateContainer(pod, container, reuse, signal);
    if (init && init.restartPolicy !== "Always") {
      this.#podDevices.addContainerAllocated(uid, container.name, reuse);
    } else {
      this.#podDevices.removeContainerAllocated(uid, container.name, reuse);
    }
  }

  async #allocateContainer(
    pod: V1Pod,
    container: V1Container,
    reuse: Map<string, Set<string>>,
    signal?: AbortSignal,
  ): Promise<void> {
    const uid = pod.metadata?.uid ?? "";
    let updatedAllocated = false;
    let changed = false;
    for (const [resource, quantity] of Object.entries(container.resources?.limits ?? {})) {
      if (!this.isDevicePluginResource(resource)) continue;
      const needed = Math.trunc(parseQuantity(String(quantity)));
      if (!updatedAllocated) {
        this.updateAllocatedDevices();
        updatedAllocated = true;
      }
      const devices = await this.#devicesToAllocate(
        uid,
        container.name,
        resource,
        needed,
        reuse.get(resource) ?? new Set(),
        signal,
      );
      if (devices === undefined || devices.size === 0) continue;
      changed = true;
      const info = this.#endpoints.get(resource);
      if (!info) {
        this.#allocated = this.#podDevices.devices();
        throw new DeviceAllocationError(`unknown Device Plugin ${resource}`);
      }
      const ids = [...devices];
      this.#o.logger.v(4).info("Making allocation request for device plugin", {
        devices: ids,
        resourceName: resource,
        containerName: container.name,
      });
      const started = this.#o.clock.now();
      let resp: ContainerAllocateResponse | undefined;
      try {
        const all = await info.endpoint.allocate(ids, signal);
        resp = all.containerResponses[0];
        if (resp === undefined) {
          throw new DeviceAllocationError(
            `no containers return in allocation response ${JSON.stringify(all)}`,
          );
        }
      } catch (err) {
        this.#allocated = this.#podDevices.devices();
        throw err instanceof DeviceAllocationError
          ? err
          : new DeviceAllocationError(rpcText(err), { cause: err });
      } finally {
        this.#o.metrics?.allocationDuration(resource, (this.#o.clock.now() - started) / 1000);
      }
      const perNuma: DevicesPerNuma = new Map();
      for (const id of ids) {
        const nodes = this.#allDevices.get(resource)?.get(id)?.topology?.nodes ?? [];
        const keys = nodes.length === 0 ? [NODE_WITHOUT_TOPOLOGY] : nodes.map((n) => Number(n.ID));
        for (const k of keys) perNuma.set(k, [...(perNuma.get(k) ?? []), id]);
      }
      this.#podDevices.insert(uid, container.name, resource, perNuma, resp);
    }
    if (changed) await this.#writeCheckpoint();
  }

  /** upstream devicesToAllocate; undefined when nothing needs allocating. */
  async #devicesToAllocate(
    podUID: string,
    container: string,
    resource: string,
    required: number,
    reusable: Set<string>,
    signal?: AbortSignal,
  ): Promise<Set<string> | undefined> {
    const { logger } = this.#o;
    let needed = required;
    const had = this.#podDevices.containerDevices(podUID, container, resource);
    if (had !== undefined) {
      logger.v(3).info("Found pre-allocated devices for resource on pod", {
        resourceName: resource,
        containerName: container,
        podUID,
        devices: [...had].sort(),
      });
      needed -= had.size;
      if (needed !== 0) {
        throw new DeviceAllocationError(
          `pod ${JSON.stringify(podUID)} container ${JSON.stringify(container)} changed ` +
            `request for resource ${JSON.stringify(resource)} from ${had.size} to ${required}`,
        );
      }
    }
    if (!this.#o.sourcesReady() && this.#runningAtStart.has(`${podUID}/${container}`)) {
      logger.v(3).info("Container detected running, nothing to do", {
        deviceNumber: needed,
        resourceName: resource,
        podUID,
        containerName: container,
      });
      return undefined;
    }
    const healthy = this.#healthy.get(resource);
    if (!healthy) {
      throw new DeviceAllocationError(`cannot allocate unregistered device ${resource}`);
    }
    if (healthy.size === 0) {
      throw new DeviceAllocationError(
        `no healthy devices present; cannot allocate unhealthy devices ${resource}`,
      );
    }
    if (had !== undefined && [...had].some((id) => !healthy.has(id))) {
      throw new DeviceAllocationError(
        "previously allocated devices are no longer healthy; cannot allocate unhealthy " +
          `devices ${resource}`,
      );
    }
    if (needed === 0) return undefined;

    const allocated = new Set<string>();
    let inUse = this.#allocated.get(resource);
    if (!inUse) this.#allocated.set(resource, inUse = new Set());
    const takeFrom = (devices: Iterable<string>): boolean => {
      for (const id of devices) {
        if (allocated.has(id)) continue;
        inUse!.add(id);
        allocated.add(id);
        if (--needed === 0) return true;
      }
      return false;
    };
    if (takeFrom(reusable)) return allocated;
    const available = [...healthy].filter((id) => !inUse!.has(id));
    if (available.length < needed) {
      // What was taken from the reusable devices is given back.
      for (const id of allocated) inUse.delete(id);
      throw new DeviceAllocationError(
        `requested number of devices unavailable for ${resource}. Requested: ${needed}, ` +
          `Available: ${available.length}`,
      );
    }
    // The devices on the NUMA nodes the topology manager chose come first.
    const all = this.#allDevices.get(resource) ?? new Map();
    const availableSet = new Set(available);
    const { aligned, unaligned, noAffinity } = filterByAffinity(
      this.#o.affinity?.(podUID, container)?.numaNodeAffinity,
      all,
      availableSet,
    );
    const preferred = (from: readonly string[]) =>
      this.#preferredAllocation(
        podUID,
        container,
        resource,
        [...new Set([...from, ...allocated])],
        [...allocated],
        required,
        signal,
      );
    if (needed < aligned.length) {
      const alignedSet = new Set(aligned);
      const best = await preferred(aligned);
      if (takeFrom([...best].filter((id) => alignedSet.has(id)))) return allocated;
      if (takeFrom(aligned)) return allocated;
      throw new DeviceAllocationError(
        `unexpectedly allocated less resources than required. Requested: ${required}, Got: ${
          required - needed
        }`,
      );
    }
    if (takeFrom(aligned)) return allocated;
    const best = await preferred(available);
    if (takeFrom([...best].filter((id) => availableSet.has(id)))) return allocated;
    if (takeFrom(unaligned)) return allocated;
    if (takeFrom(noAffinity)) return allocated;
    throw new DeviceAllocationError(
      `unexpectedly allocated less resources than required. Requested: ${required}, Got: ${
        required - needed
      }`,
    );
  }

  async #preferredAllocation(
    podUID: string,
    container: string,
    resource: string,
    available: string[],
    mustInclude: string[],
    size: number,
    signal?: AbortSignal,
  ): Promise<Set<string>> {
    const info = this.#endpoints.get(resource);
    if (!info) {
      throw new DeviceAllocationError(
        `endpoint not found in cache for a registered resource: ${resource}`,
      );
    }
    if (!info.options?.getPreferredAllocationAvailable) return new Set();
    this.#o.logger.v(4).info("Issuing a GetPreferredAllocation call for container", {
      resourceName: resource,
      containerName: container,
      podUID,
    });
    try {
      const resp = await info.endpoint.getPreferredAllocation(
        available,
        mustInclude,
        size,
        signal,
      );
      return new Set(resp.containerResponses[0]?.deviceIDs ?? []);
    } catch (err) {
      throw new DeviceAllocationError(
        `device plugin GetPreferredAllocation rpc failed with err: ${rpcText(err)}`,
        { cause: err },
      );
    }
  }

  /**
   * upstream GetDeviceRunContainerOptions: PreStartContainer for plugins that asked for it, a
   * new allocation for a container that has none yet, then the container's run options.
   */
  async runContainerOptions(
    pod: V1Pod,
    container: V1Container,
    signal?: AbortSignal,
  ): Promise<DeviceRunContainerOptions | undefined> {
    const uid = pod.metadata?.uid ?? "";
    let reallocate = false;
    // Whether the pod is still active, asked once (upstream checkPodActive).
    let isActive: boolean | undefined;
    const active = () => isActive ??= this.#o.activePods().some((p) => p.metadata?.uid === uid);
    for (const [resource, quantity] of Object.entries(container.resources?.limits ?? {})) {
      if (!this.isDevicePluginResource(resource) || parseQuantity(String(quantity)) === 0) {
        continue;
      }
      await this.#preStartContainer(uid, container.name, resource, signal);
      if (!active()) continue;
      if (this.#podDevices.containerDevices(uid, container.name, resource) === undefined) {
        reallocate = true;
      }
    }
    if (reallocate) {
      this.#o.logger.v(2).info("Needs to re-allocate device plugin resources for pod", {
        containerName: container.name,
      });
      await this.allocate(pod, container, signal);
    }
    return this.#podDevices.runContainerOptions(uid, container.name, this.#o.logger);
  }

  async #preStartContainer(
    podUID: string,
    container: string,
    resource: string,
    signal?: AbortSignal,
  ): Promise<void> {
    const info = this.#endpoints.get(resource);
    if (!info) {
      throw new DeviceAllocationError(
        `endpoint not found in cache for a registered resource: ${resource}`,
      );
    }
    if (!info.options?.preStartRequired) return;
    const devices = this.#podDevices.containerDevices(podUID, container, resource);
    if (devices === undefined) {
      throw new DeviceAllocationError(
        `no devices found allocated in local cache for pod ${podUID}, container ${container}, ` +
          `resource ${resource}`,
      );
    }
    this.#o.logger.v(4).info("Issuing a PreStartContainer call for container", {
      containerName: container,
      podUID,
    });
    try {
      await info.endpoint.preStartContainer([...devices], signal);
    } catch (err) {
      throw new DeviceAllocationError(
        `device plugin PreStartContainer rpc failed with err: ${rpcText(err)}`,
        { cause: err },
      );
    }
  }

  /** upstream GetTopologyHints: where each device resource of the container could go. */
  getTopologyHints(pod: V1Pod, container: V1Container): Map<string, TopologyHint[] | undefined> {
    this.updateAllocatedDevices();
    const uid = pod.metadata?.uid ?? "";
    return this.#hints(this.#containerRequests(container), (resource) => ({
      allocated: this.#podDevices.containerDevices(uid, container.name, resource),
      reusable: this.#devicesToReuse.get(uid)?.get(resource) ?? new Set<string>(),
    }));
  }

  /** upstream GetPodTopologyHints: the same for the whole pod (the pod scope). */
  getPodTopologyHints(pod: V1Pod): Map<string, TopologyHint[] | undefined> {
    this.updateAllocatedDevices();
    const uid = pod.metadata?.uid ?? "";
    // upstream getPodDeviceRequest: the pod's effective limits (init containers, sidecars).
    const requests = new Map<string, number>();
    for (const [resource, q] of podLimits(pod, { excludeOverhead: true })) {
      if (this.isDevicePluginResource(resource)) requests.set(resource, Number(valueOf(q)));
    }
    return this.#hints(requests, (resource) => {
      const all = new Set<string>();
      for (const c of allContainers(pod)) {
        for (const id of this.#podDevices.containerDevices(uid, c.name, resource) ?? []) {
          all.add(id);
        }
      }
      return { allocated: all.size > 0 ? all : undefined, reusable: new Set<string>() };
    });
  }

  #hints(
    requests: Map<string, number>,
    known: (resource: string) => { allocated?: Set<string>; reusable: Set<string> },
  ): Map<string, TopologyHint[] | undefined> {
    const out = new Map<string, TopologyHint[] | undefined>();
    const nodes = this.#o.numaNodes ?? [0];
    for (const [resource, requested] of requests) {
      const devices = this.#allDevices.get(resource) ?? new Map<string, Device>();
      if (!hasTopologyAlignment(devices)) {
        out.set(resource, undefined);
        continue;
      }
      const { allocated, reusable } = known(resource);
      if (allocated !== undefined && allocated.size > 0) {
        out.set(
          resource,
          allocated.size === requested
            ? generateDeviceTopologyHints(nodes, devices, allocated, new Set(), requested)
            : [],
        );
        continue;
      }
      const inUse = this.#allocated.get(resource) ?? new Set<string>();
      const available = new Set(
        [...(this.#healthy.get(resource) ?? [])].filter((id) => !inUse.has(id)),
      );
      if (new Set([...available, ...reusable]).size < requested) {
        out.set(resource, []);
        continue;
      }
      out.set(
        resource,
        generateDeviceTopologyHints(nodes, devices, available, reusable, requested),
      );
    }
    return out;
  }

  /** The device plugin resources the container asks for (upstream getContainerDeviceRequest). */
  #containerRequests(container: V1Container): Map<string, number> {
    const out = new Map<string, number>();
    for (const [resource, q] of Object.entries(container.resources?.limits ?? {})) {
      if (this.isDevicePluginResource(resource)) {
        out.set(resource, Math.trunc(parseQuantity(String(q))));
      }
    }
    return out;
  }

  /** upstream UpdateAllocatedDevices: frees the devices of pods no longer active. */
  updateAllocatedDevices(): void {
    if (!this.#o.sourcesReady()) return;
    const gone = this.#podDevices.pods();
    for (const p of this.#o.activePods()) gone.delete(p.metadata?.uid ?? "");
    if (gone.size === 0) return;
    this.#o.logger.v(3).info("Pods to be removed", { podUIDs: [...gone].sort() });
    this.#podDevices.delete(gone);
    this.#allocated = this.#podDevices.devices();
  }

  /** The container's devices for the pod resources API (upstream GetDevices). */
  getDevices(podUID: string, container: string): ResourceDeviceInstances | undefined {
    return this.#podDevices.containerDeviceInstances(podUID, container);
  }

  get #healthOn(): boolean {
    return this.#o.featureGates?.ResourceHealthStatus !== false;
  }

  /**
   * upstream UpdateAllocatedResourcesStatus for one container: each resource of its devices with
   * each device's health as its plugin last sent it (Healthy when it never did), sorted; empty
   * with the ResourceHealthStatus gate off.
   */
  allocatedResourcesStatus(pod: V1Pod, containerName: string): V1ResourceStatus[] {
    if (!this.#healthOn) return [];
    const devices = this.#podDevices.containerDeviceInstances(
      pod.metadata?.uid ?? "",
      containerName,
    );
    const out: V1ResourceStatus[] = [];
    for (const resource of [...(devices?.keys() ?? [])].sort()) {
      const known = this.#allDevices.get(resource);
      const resources: V1ResourceHealth[] = [...devices!.get(resource)!.keys()].sort().map((
        id,
      ) => ({
        resourceID: id,
        health: (known?.get(id)?.health ?? "Healthy") === "Healthy" ? "Healthy" : "Unhealthy",
      }));
      out.push({ name: resource, resources });
    }
    return out;
  }

  /** The healthy devices of every resource (upstream GetAllocatableDevices). */
  getAllocatableDevices(): ResourceDeviceInstances {
    const out: ResourceDeviceInstances = new Map();
    for (const [resource, ids] of this.#healthy) {
      const all = this.#allDevices.get(resource);
      if (!all) continue;
      const m = new Map<string, Pick<Device, "topology">>();
      for (const id of ids) {
        const d = all.get(id);
        if (d) m.set(id, d);
      }
      out.set(resource, m);
    }
    return out;
  }

  /**
   * upstream sanitizeNodeAllocatable: allocatable as admission sees it, never below what is
   * already allocated (a restarted kubelet admits running pods before their plugin is back).
   */
  sanitizeAllocatable(allocatable: Readonly<Record<string, string>>): Record<string, string> {
    const out = { ...allocatable };
    for (const [resource, devices] of this.#allocated) {
      const have = out[resource] === undefined ? undefined : parseQuantity(out[resource]);
      if (have !== undefined && have >= devices.size) continue;
      out[resource] = String(devices.size);
    }
    return out;
  }

  async #cleanupPluginDirectory(): Promise<void> {
    const errs: string[] = [];
    for await (const entry of Deno.readDir(this.#dir)) {
      const path = join(this.#dir, entry.name);
      if (path === this.#checkpointPath) continue;
      let info: Deno.FileInfo;
      try {
        info = await Deno.stat(path);
      } catch (err) {
        this.#o.logger.error(err, "Failed to stat file", { path });
        continue;
      }
      if (info.isDirectory || !info.isSocket) continue;
      try {
        await Deno.remove(path);
      } catch (err) {
        this.#o.logger.error(err, "Failed to remove file", { path });
        errs.push(errorText(err));
      }
    }
    if (errs.length > 0) {
      throw new Error(`Failed to cleanup the device plugin directory ${this.#dir}: ${errs}`);
    }
  }

  async #readCheckpoint(): Promise<void> {
    let text: string;
    try {
      text = await Deno.readTextFile(this.#checkpointPath);
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) {
        this.#o.logger.error(err, "Failed to read data from checkpoint", {
          checkpoint: CHECKPOINT_FILE,
        });
        return;
      }
      throw err;
    }
    const data = decodeDeviceCheckpoint(text, this.#checkpointPath);
    for (const e of data.skipped) {
      this.#o.logger.error(e.error, "Can't unmarshal allocResp", {
        podUID: e.podUID,
        containerName: e.containerName,
        resourceName: e.resourceName,
      });
    }
    for (const e of data.podDeviceEntries) {
      const ids = new Map([...e.deviceIds].map(([numa, list]) => [numa, [...list]]));
      this.#podDevices.insert(e.podUID, e.containerName, e.resourceName, ids, e.allocResp);
    }
    this.#allocated = this.#podDevices.devices();
    for (const resource of data.registeredDevices.keys()) {
      this.#healthy.set(resource, new Set());
      this.#unhealthy.set(resource, new Set());
      this.#endpoints.set(resource, {
        endpoint: Endpoint.stopped(resource, this.#o.clock),
        options: undefined,
      });
    }
    this.#o.logger.v(4).info("Read data from checkpoint file", { checkpoint: CHECKPOINT_FILE });
  }

  /** Writes the checkpoint after the writes before it; a failure is logged (upstream). */
  #writeCheckpoint(): Promise<void> {
    const registered = new Map<string, string[]>();
    for (const [resource, ids] of this.#healthy) registered.set(resource, [...ids]);
    const text = encodeDeviceCheckpoint({
      podDeviceEntries: [...this.#podDevices.entries()],
      registeredDevices: registered,
    });
    const path = this.#checkpointPath;
    this.#writing = this.#writing.then(async () => {
      try {
        await writeFileAtomic(path, text);
        this.#o.logger.v(4).info("Checkpoint file written", { checkpoint: CHECKPOINT_FILE });
      } catch (err) {
        this.#o.logger.error(err, "Failed to write checkpoint file", {
          checkpoint: CHECKPOINT_FILE,
        });
      }
    });
    return this.#writing;
  }
}

/**
 * Whether the node's extended resources must be reset to 0 at registration: no device manager
 * checkpoint, so this is a new node (upstream ShouldResetExtendedResourceCapacity).
 */
export async function deviceCheckpointMissing(rootDirectory: string): Promise<boolean> {
  try {
    await Deno.stat(join(rootDirectory, DEVICE_PLUGINS_DIR, CHECKPOINT_FILE));
    return false;
  } catch {
    return true;
  }
}

/** The pod's init containers then its containers. */
function allContainers(pod: V1Pod): V1Container[] {
  return [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])];
}

/** An error as Go's gRPC client prints it. */
function rpcText(err: unknown): string {
  return err instanceof Error && "grpcText" in err ? String(err.grpcText) : errorText(err);
}
