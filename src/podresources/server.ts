/**
 * @module
 * The pod resources API (`podresources/v1` PodResourcesLister) the kubelet serves on
 * `<root-dir>/pod-resources/kubelet.sock` for node monitoring agents (GPU exporters, NUMA-aware
 * schedulers' node agents): List gives every active pod's containers with the devices, exclusive
 * CPUs and memory they were given; GetAllocatableResources what the node has to give; Get one
 * pod. Requests are rate limited as upstream's are (100 per second, bursts of 10; beyond that
 * `ResourceExhausted: rejected by rate limit`).
 * Corresponds to upstream `pkg/kubelet/apis/podresources/server_v1.go`, `constants.go`,
 * `pkg/kubelet/apis/grpc/ratelimit.go` and `ListenAndServePodResources` of
 * `pkg/kubelet/server/server.go`.
 *
 * The older `v1alpha1` service is served beside it, as upstream's (List only: every pod the kubelet
 * knows, its containers' devices; upstream `server_v1alpha1.go`).
 */

import type { V1Container, V1Pod } from "@kubernetes/client-node";
import {
  type ContainerDevices,
  type ContainerMemory,
  type ContainerResources,
  type DynamicResource,
  type PodResources,
  PodResourcesListerDefinition,
} from "../../proto/podresources/v1/api.ts";
import { PodResourcesListerDefinition as V1alpha1Definition } from "../../proto/podresources/v1alpha1/api.ts";
import { GrpcServer, GrpcStatusError } from "../cri/grpc_server.ts";
import { GrpcCode } from "../cri/connection.ts";
import type { Clock } from "../util/clock.ts";
import { TokenBucket } from "../client/rate_limiter.ts";
import type { Logger } from "../klog/klog.ts";
import type { ResourceDeviceInstances } from "../devicemanager/pod_devices.ts";

/** The socket's directory under the root directory (upstream getPodResourcesDir). */
export const POD_RESOURCES_DIR = "pod-resources";
/** The socket's name (upstream podresources.Socket, with `.sock`). */
export const POD_RESOURCES_SOCKET = "kubelet.sock";
/** upstream DefaultQPS. */
export const DEFAULT_QPS = 100;
/** upstream DefaultBurstTokens. */
export const DEFAULT_BURST_TOKENS = 10;

/** Where the answers come from (upstream PodResourcesProviders). */
export interface PodResourcesProviders {
  /**
   * The pods List gives: the active ones (KubeletPodResourcesListUseActivePods, on), else every
   * pod the kubelet knows.
   */
  readonly listPods: () => readonly V1Pod[];
  /** Every pod the kubelet knows (the v1alpha1 List's). */
  readonly allPods: () => readonly V1Pod[];
  /** A pod by namespace and name, active or not. */
  readonly podByName: (namespace: string, name: string) => V1Pod | undefined;
  readonly devices?: {
    updateAllocatedDevices(): void;
    getDevices(podUID: string, container: string): ResourceDeviceInstances | undefined;
    getAllocatableDevices(): ResourceDeviceInstances;
  };
  readonly cpus?: {
    getCpus(podUID: string, container: string): readonly number[];
    getAllocatableCpus(): readonly number[];
  };
  readonly memory?: {
    getMemory(podUID: string, container: string): readonly ContainerMemory[];
    getAllocatableMemory(): readonly ContainerMemory[];
  };
  readonly dynamicResources?: {
    getDynamicResources(pod: V1Pod, container: V1Container): readonly DynamicResource[];
  };
}

/** The counters upstream keeps (pod_resources_endpoint_*), by API version "v1". */
export interface PodResourcesMetrics {
  request(kind: "list" | "get_allocatable" | "get"): void;
  /** A request to the v1alpha1 service (counted in the total only, as upstream). */
  requestV1alpha1(): void;
  error(kind: "list" | "get_allocatable" | "get"): void;
}

/** Options of {@link PodResourcesServer}. */
export interface PodResourcesServerOptions {
  readonly providers: PodResourcesProviders;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly metrics?: PodResourcesMetrics;
  /** @default {@link DEFAULT_QPS} */
  readonly qps?: number;
  /** @default {@link DEFAULT_BURST_TOKENS} */
  readonly burst?: number;
}

/** The PodResourcesLister handlers; see the module documentation. */
export class PodResourcesServer {
  readonly #o: PodResourcesServerOptions;
  readonly #limiter: TokenBucket;

  constructor(opts: PodResourcesServerOptions) {
    this.#o = opts;
    this.#limiter = new TokenBucket(
      opts.clock,
      opts.qps ?? DEFAULT_QPS,
      opts.burst ?? DEFAULT_BURST_TOKENS,
    );
  }

  /** Serves the API on `path` until `signal` aborts. */
  async serve(path: string, signal: AbortSignal): Promise<GrpcServer> {
    this.#o.logger.info("Setting rate limiting for endpoint", {
      service: "podresources",
      qps: this.#o.qps ?? DEFAULT_QPS,
      burstTokens: this.#o.burst ?? DEFAULT_BURST_TOKENS,
    });
    const server = await GrpcServer.listen({ path, logger: this.#o.logger });
    server.register(PodResourcesListerDefinition, {
      list: () => this.#limited(() => this.list()),
      getAllocatableResources: () => this.#limited(() => this.getAllocatableResources()),
      get: (req) => this.#limited(() => this.get(req.podNamespace, req.podName)),
    });
    server.register(V1alpha1Definition, { list: () => this.#limited(() => this.listV1alpha1()) });
    this.#o.logger.info("Starting to serve the podresources API", { endpoint: `unix://${path}` });
    signal.addEventListener("abort", () => void server.close(), { once: true });
    return server;
  }

  #limited<T>(f: () => T): T {
    if (!this.#limiter.tryTake()) {
      throw new GrpcStatusError(GrpcCode.RESOURCE_EXHAUSTED, "rejected by rate limit");
    }
    return f();
  }

  /** upstream List. */
  list(): { podResources: PodResources[] } {
    this.#o.metrics?.request("list");
    const { providers } = this.#o;
    providers.devices?.updateAllocatedDevices();
    return { podResources: providers.listPods().map((p) => this.#podResources(p)) };
  }

  /** upstream v1alpha1 List: every pod, its (non-init) containers' devices. */
  listV1alpha1(): {
    podResources: {
      name: string;
      namespace: string;
      containers: {
        name: string;
        devices: { resourceName: string; deviceIds: string[] }[];
      }[];
    }[];
  } {
    this.#o.metrics?.requestV1alpha1();
    const { providers } = this.#o;
    providers.devices?.updateAllocatedDevices();
    return {
      podResources: providers.allPods().map((pod) => ({
        name: pod.metadata?.name ?? "",
        namespace: pod.metadata?.namespace ?? "",
        containers: (pod.spec?.containers ?? []).map((c) => ({
          name: c.name,
          devices: containerDevices(providers.devices?.getDevices(pod.metadata?.uid ?? "", c.name))
            .map((d) => ({ resourceName: d.resourceName, deviceIds: d.deviceIds })),
        })),
      })),
    };
  }

  /** upstream GetAllocatableResources. */
  getAllocatableResources(): {
    devices: ContainerDevices[];
    cpuIds: bigint[];
    memory: ContainerMemory[];
  } {
    this.#o.metrics?.request("get_allocatable");
    const { providers } = this.#o;
    return {
      devices: containerDevices(providers.devices?.getAllocatableDevices()),
      cpuIds: (providers.cpus?.getAllocatableCpus() ?? []).map(BigInt),
      memory: [...(providers.memory?.getAllocatableMemory() ?? [])],
    };
  }

  /** upstream Get: NotFound-less, as upstream (an Unknown status with its message). */
  get(namespace: string, name: string): { podResources: PodResources } {
    this.#o.metrics?.request("get");
    const pod = this.#o.providers.podByName(namespace, name);
    if (!pod) {
      this.#o.metrics?.error("get");
      throw new GrpcStatusError(
        GrpcCode.UNKNOWN,
        `pod ${name} in namespace ${namespace} not found`,
      );
    }
    return { podResources: this.#podResources(pod) };
  }

  #podResources(pod: V1Pod): PodResources {
    const containers: ContainerResources[] = [];
    for (const c of pod.spec?.initContainers ?? []) {
      if (c.restartPolicy === "Always") containers.push(this.#containerResources(pod, c));
    }
    for (const c of pod.spec?.containers ?? []) containers.push(this.#containerResources(pod, c));
    return {
      name: pod.metadata?.name ?? "",
      namespace: pod.metadata?.namespace ?? "",
      containers,
    };
  }

  #containerResources(pod: V1Pod, c: V1Container): ContainerResources {
    const { providers } = this.#o;
    const uid = pod.metadata?.uid ?? "";
    return {
      name: c.name,
      devices: containerDevices(providers.devices?.getDevices(uid, c.name)),
      cpuIds: (providers.cpus?.getCpus(uid, c.name) ?? []).map(BigInt),
      memory: [...(providers.memory?.getMemory(uid, c.name) ?? [])],
      dynamicResources: [...(providers.dynamicResources?.getDynamicResources(pod, c) ?? [])],
    };
  }
}

/**
 * A container's prepared ResourceClaims as the API lists them (upstream
 * containerManagerImpl.GetDynamicResources): per claim, one entry per prepared device with its
 * driver, pool, name, share and CDI devices. As upstream builds them, a driver's devices after
 * the first also list the CDI devices of the ones before.
 */
export function dynamicResources(
  claims: readonly {
    readonly claimName: string;
    readonly namespace: string;
    readonly driverState: ReadonlyMap<
      string,
      readonly {
        readonly poolName: string;
        readonly deviceName: string;
        readonly shareId: string | null;
        readonly cdiDeviceIds: readonly string[];
      }[]
    >;
  }[],
): DynamicResource[] {
  return claims.map((claim) => {
    const claimResources: DynamicResource["claimResources"] = [];
    for (const [driverName, devices] of claim.driverState) {
      const cdiDevices: { name: string }[] = [];
      for (const d of devices) {
        for (const name of d.cdiDeviceIds) cdiDevices.push({ name });
        claimResources.push({
          cdiDevices: [...cdiDevices],
          driverName,
          poolName: d.poolName,
          deviceName: d.deviceName,
          ...(d.shareId !== null ? { shareId: d.shareId } : {}),
        });
      }
    }
    return { claimName: claim.claimName, claimNamespace: claim.namespace, claimResources };
  });
}

/**
 * Devices as the API lists them (upstream containerDevicesFromResourceDeviceInstances): one
 * entry per device and NUMA node, without topology for a device that has none.
 */
export function containerDevices(devices: ResourceDeviceInstances | undefined): ContainerDevices[] {
  const out: ContainerDevices[] = [];
  for (const [resourceName, byId] of devices ?? []) {
    for (const [id, d] of byId) {
      const nodes = d.topology?.nodes ?? [];
      if (nodes.length === 0) {
        out.push({ resourceName, deviceIds: [id] });
        continue;
      }
      for (const n of nodes) {
        out.push({ resourceName, deviceIds: [id], topology: { nodes: [{ ID: n.ID }] } });
      }
    }
  }
  return out;
}
