/**
 * @module
 * RemoteRuntimeService: the CRI RuntimeService over a {@link CriConnection}, one method per RPC
 * with upstream's names and deadlines (runtimeRequestTimeout; twice that for RunPodSandbox;
 * plus the container's own timeout for StopContainer and ExecSync; none for event streams).
 * Every method takes an AbortSignal. Corresponds to upstream
 * `pkg/kubelet/cri/remote/remote_runtime.go` and the `internalapi.RuntimeService` interface.
 */

import * as api from "../../proto/runtime/v1/api.ts";
import { type CriConnection, type CriMethod, criMethods } from "./connection.ts";
import { isEmptyFilter, ReusingListCodec } from "./_list_reuse.ts";

/** The CRI API version this kubelet speaks. */
export const CRI_API_VERSION = "v1";

/** The kubelet's view of a CRI runtime service; tests substitute their own. */
export type RuntimeService = Pick<RemoteRuntimeService, keyof RemoteRuntimeService>;

/** Options of {@link RemoteRuntimeService}. */
export interface RemoteRuntimeOptions {
  readonly connection: CriConnection;
  /** runtimeRequestTimeout in milliseconds. @default 120000 */
  readonly timeoutMs?: number;
}

const S = criMethods(api.RuntimeServiceDefinition);

/** The CRI RuntimeService of one endpoint. */
export class RemoteRuntimeService {
  readonly #conn: CriConnection;
  readonly #timeout: number;
  /**
   * The unfiltered lists (the PLEG's relist each second, the garbage collectors'), decoded
   * reusing the previous list's objects for the entries that did not change (`_list_reuse.ts`):
   * the objects these lists return are shared between calls and must not be changed.
   */
  readonly #allSandboxes = {
    ...S.listPodSandbox,
    response: new ReusingListCodec({
      response: api.ListPodSandboxResponse,
      entry: api.PodSandbox,
      field: 1,
      wrap: (items) => ({ items }),
    }),
  };
  readonly #allContainers = {
    ...S.listContainers,
    response: new ReusingListCodec({
      response: api.ListContainersResponse,
      entry: api.Container,
      field: 1,
      wrap: (containers) => ({ containers }),
    }),
  };

  constructor(opts: RemoteRuntimeOptions) {
    this.#conn = opts.connection;
    this.#timeout = opts.timeoutMs ?? 120_000;
  }

  version(apiVersion = CRI_API_VERSION, signal?: AbortSignal): Promise<api.VersionResponse> {
    return this.#unary(S.version, api.VersionRequest.create({ version: apiVersion }), signal);
  }

  async runPodSandbox(
    config: api.PodSandboxConfig,
    runtimeHandler: string,
    signal?: AbortSignal,
  ): Promise<string> {
    // Upstream doubles the deadline: sandbox set-up includes the network plugin.
    const res = await this.#conn.unary(
      S.runPodSandbox,
      api.RunPodSandboxRequest.create({ config, runtimeHandler }),
      {
        signal,
        timeoutMs: this.#timeout * 2,
      },
    );
    if (res.podSandboxId === "") {
      throw new Error(`PodSandboxId is not set for sandbox ${JSON.stringify(config.metadata)}`);
    }
    return res.podSandboxId;
  }

  async stopPodSandbox(podSandboxId: string, signal?: AbortSignal): Promise<void> {
    await this.#unary(S.stopPodSandbox, api.StopPodSandboxRequest.create({ podSandboxId }), signal);
  }

  async removePodSandbox(podSandboxId: string, signal?: AbortSignal): Promise<void> {
    await this.#unary(
      S.removePodSandbox,
      api.RemovePodSandboxRequest.create({ podSandboxId }),
      signal,
    );
  }

  podSandboxStatus(
    podSandboxId: string,
    verbose = false,
    signal?: AbortSignal,
  ): Promise<api.PodSandboxStatusResponse> {
    return this.#unary(
      S.podSandboxStatus,
      api.PodSandboxStatusRequest.create({ podSandboxId, verbose }),
      signal,
    );
  }

  async listPodSandbox(
    filter?: api.PodSandboxFilter,
    signal?: AbortSignal,
  ): Promise<api.PodSandbox[]> {
    return (await this.#unary(
      isEmptyFilter(filter) ? this.#allSandboxes : S.listPodSandbox,
      api.ListPodSandboxRequest.create({ filter }),
      signal,
    )).items;
  }

  async createContainer(
    podSandboxId: string,
    config: api.ContainerConfig,
    sandboxConfig: api.PodSandboxConfig,
    signal?: AbortSignal,
  ): Promise<string> {
    const res = await this.#unary(
      S.createContainer,
      api.CreateContainerRequest.create({ podSandboxId, config, sandboxConfig }),
      signal,
    );
    if (res.containerId === "") {
      throw new Error(`ContainerId is not set for container ${JSON.stringify(config.metadata)}`);
    }
    return res.containerId;
  }

  async startContainer(containerId: string, signal?: AbortSignal): Promise<void> {
    await this.#unary(S.startContainer, api.StartContainerRequest.create({ containerId }), signal);
  }

  /** Stops a container, giving it `timeoutSeconds` after SIGTERM before SIGKILL. */
  async stopContainer(
    containerId: string,
    timeoutSeconds: number,
    signal?: AbortSignal,
  ): Promise<void> {
    await this.#conn.unary(
      S.stopContainer,
      api.StopContainerRequest.create({
        containerId,
        timeout: BigInt(Math.max(0, Math.trunc(timeoutSeconds))),
      }),
      { signal, timeoutMs: this.#timeout + Math.max(0, timeoutSeconds) * 1000 },
    );
  }

  async removeContainer(containerId: string, signal?: AbortSignal): Promise<void> {
    await this.#unary(
      S.removeContainer,
      api.RemoveContainerRequest.create({ containerId }),
      signal,
    );
  }

  async listContainers(
    filter?: api.ContainerFilter,
    signal?: AbortSignal,
  ): Promise<api.Container[]> {
    return (await this.#unary(
      isEmptyFilter(filter) ? this.#allContainers : S.listContainers,
      api.ListContainersRequest.create({ filter }),
      signal,
    )).containers;
  }

  containerStatus(
    containerId: string,
    verbose = false,
    signal?: AbortSignal,
  ): Promise<api.ContainerStatusResponse> {
    return this.#unary(
      S.containerStatus,
      api.ContainerStatusRequest.create({ containerId, verbose }),
      signal,
    );
  }

  async updateContainerResources(
    containerId: string,
    linux: api.LinuxContainerResources | undefined,
    signal?: AbortSignal,
  ): Promise<void> {
    await this.#unary(
      S.updateContainerResources,
      api.UpdateContainerResourcesRequest.create({ containerId, linux }),
      signal,
    );
  }

  async reopenContainerLog(containerId: string, signal?: AbortSignal): Promise<void> {
    await this.#unary(
      S.reopenContainerLog,
      api.ReopenContainerLogRequest.create({ containerId }),
      signal,
    );
  }

  /**
   * Runs a command in a container and waits for it. `timeoutSeconds` 0 means no limit; otherwise
   * the call's deadline is that plus runtimeRequestTimeout, as upstream, so the runtime can clean up.
   */
  execSync(
    containerId: string,
    cmd: readonly string[],
    timeoutSeconds: number,
    signal?: AbortSignal,
  ): Promise<api.ExecSyncResponse> {
    return this.#conn.unary(
      S.execSync,
      api.ExecSyncRequest.create({
        containerId,
        cmd: [...cmd],
        timeout: BigInt(Math.max(0, Math.trunc(timeoutSeconds))),
      }),
      { signal, timeoutMs: timeoutSeconds > 0 ? this.#timeout + timeoutSeconds * 1000 : undefined },
    );
  }

  async exec(request: api.ExecRequest, signal?: AbortSignal): Promise<string> {
    return (await this.#unary(S.exec, request, signal)).url;
  }

  async attach(request: api.AttachRequest, signal?: AbortSignal): Promise<string> {
    return (await this.#unary(S.attach, request, signal)).url;
  }

  async portForward(request: api.PortForwardRequest, signal?: AbortSignal): Promise<string> {
    return (await this.#unary(S.portForward, request, signal)).url;
  }

  async containerStats(
    containerId: string,
    signal?: AbortSignal,
  ): Promise<api.ContainerStats | undefined> {
    return (await this.#unary(
      S.containerStats,
      api.ContainerStatsRequest.create({ containerId }),
      signal,
    )).stats;
  }

  async listContainerStats(
    filter?: api.ContainerStatsFilter,
    signal?: AbortSignal,
  ): Promise<api.ContainerStats[]> {
    return (await this.#unary(
      S.listContainerStats,
      api.ListContainerStatsRequest.create({ filter }),
      signal,
    )).stats;
  }

  async podSandboxStats(
    podSandboxId: string,
    signal?: AbortSignal,
  ): Promise<api.PodSandboxStats | undefined> {
    return (await this.#unary(
      S.podSandboxStats,
      api.PodSandboxStatsRequest.create({ podSandboxId }),
      signal,
    )).stats;
  }

  async listPodSandboxStats(
    filter?: api.PodSandboxStatsFilter,
    signal?: AbortSignal,
  ): Promise<api.PodSandboxStats[]> {
    return (await this.#unary(
      S.listPodSandboxStats,
      api.ListPodSandboxStatsRequest.create({ filter }),
      signal,
    )).stats;
  }

  async updateRuntimeConfig(runtimeConfig: api.RuntimeConfig, signal?: AbortSignal): Promise<void> {
    await this.#unary(
      S.updateRuntimeConfig,
      api.UpdateRuntimeConfigRequest.create({ runtimeConfig }),
      signal,
    );
  }

  status(verbose = false, signal?: AbortSignal): Promise<api.StatusResponse> {
    return this.#unary(S.status, api.StatusRequest.create({ verbose }), signal);
  }

  /**
   * Checkpoints a container. As upstream: a requested timeout longer than runtimeRequestTimeout
   * is the deadline; a shorter one is raised to runtimeRequestTimeout, in the request too.
   */
  async checkpointContainer(
    request: api.CheckpointContainerRequest,
    signal?: AbortSignal,
  ): Promise<void> {
    if (request.timeout < 0n) {
      throw new Error("CheckpointContainer requires the timeout value to be > 0");
    }
    const defaultSeconds = BigInt(Math.floor(this.#timeout / 1000));
    const req = request.timeout > defaultSeconds
      ? request
      : { ...request, timeout: defaultSeconds };
    const timeoutMs = request.timeout > defaultSeconds
      ? Number(request.timeout) * 1000
      : this.#timeout;
    await this.#conn.unary(S.checkpointContainer, req, { signal, timeoutMs });
  }

  /** Container events until `signal` aborts (containerd 1.7+; 1.6 answers Unimplemented). */
  getContainerEvents(signal?: AbortSignal): AsyncGenerator<api.ContainerEventResponse> {
    return this.#conn.stream(S.getContainerEvents, api.GetEventsRequest.create({}), { signal });
  }

  async listMetricDescriptors(signal?: AbortSignal): Promise<api.MetricDescriptor[]> {
    return (await this.#unary(
      S.listMetricDescriptors,
      api.ListMetricDescriptorsRequest.create({}),
      signal,
    )).descriptors;
  }

  async listPodSandboxMetrics(signal?: AbortSignal): Promise<api.PodSandboxMetrics[]> {
    return (await this.#unary(
      S.listPodSandboxMetrics,
      api.ListPodSandboxMetricsRequest.create({}),
      signal,
    )).podMetrics;
  }

  runtimeConfig(signal?: AbortSignal): Promise<api.RuntimeConfigResponse> {
    return this.#unary(S.runtimeConfig, api.RuntimeConfigRequest.create({}), signal);
  }

  async updatePodSandboxResources(
    request: api.UpdatePodSandboxResourcesRequest,
    signal?: AbortSignal,
  ): Promise<void> {
    await this.#unary(S.updatePodSandboxResources, request, signal);
  }

  #unary<Req, Res>(method: CriMethod<Req, Res>, req: Req, signal?: AbortSignal): Promise<Res> {
    return this.#conn.unary(method, req, { signal, timeoutMs: this.#timeout });
  }
}
