/**
 * @module
 * The kubelet's client of one DRA driver's kubelet plugin: NodePrepareResources and
 * NodeUnprepareResources, and the NodeWatchResources stream of its devices' health
 * (`v1alpha1.DRAResourceHealth`), over the unix socket the plugin registered, through the gRPC
 * transport CRI uses (`src/cri/connection.ts`), one connection per registered plugin, closed
 * when it deregisters. The service is the one chosen at registration: `v1.DRAPlugin`, or
 * `v1beta1.DRAPlugin`, whose messages are v1's on the wire (v1 only adds a device's share ID), so
 * v1's codecs serve both under their own paths. Each unary call is bounded by the plugin's timeout
 * (45 s unless registration names one) and observed in dra_grpc_operations_duration_seconds.
 * Corresponds to upstream `pkg/kubelet/cm/dra/plugin/dra_plugin.go`.
 */

import { CriConnection, CriError, criMethods, GRPC_CODE_NAMES } from "../cri/connection.ts";
import type { CriMethod } from "../cri/connection.ts";
import {
  DRAPluginDefinition,
  type NodePrepareResourcesRequest,
  type NodePrepareResourcesResponse,
  type NodeUnprepareResourcesRequest,
  type NodeUnprepareResourcesResponse,
} from "../../proto/dra/v1/api.ts";
import {
  DRAResourceHealthDefinition,
  type NodeWatchResourcesResponse,
} from "../../proto/dra_health/v1alpha1/api.ts";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import type { DraMetrics } from "../metrics/dra_metrics.ts";

/** upstream defaultClientCallTimeout: half the kubelet's retry period. */
export const DRA_CLIENT_CALL_TIMEOUT_MS = 45_000;

/** upstream drapbv1.DRAPluginService. */
export const DRA_V1_SERVICE = "v1.DRAPlugin";
/** upstream drapbv1beta1.DRAPluginService. */
export const DRA_V1BETA1_SERVICE = "v1beta1.DRAPlugin";
/** The services this kubelet can call, newest first (upstream servicesSupportedByKubelet). */
export const DRA_SERVICES_SUPPORTED: readonly string[] = [DRA_V1_SERVICE, DRA_V1BETA1_SERVICE];

const V1 = criMethods(DRAPluginDefinition);
const HEALTH = criMethods(DRAResourceHealthDefinition);

/** v1's methods under another package's paths (same messages on the wire). */
function servedAs<Req, Res>(m: CriMethod<Req, Res>, pkg: string): CriMethod<Req, Res> {
  return { ...m, path: m.path.replace(".dra.v1.", `.dra.${pkg}.`) };
}

const METHODS = {
  [DRA_V1_SERVICE]: V1,
  [DRA_V1BETA1_SERVICE]: {
    nodePrepareResources: servedAs(V1.nodePrepareResources, "v1beta1"),
    nodeUnprepareResources: servedAs(V1.nodeUnprepareResources, "v1beta1"),
  },
} as const;

/** Options of {@link DraPlugin}. */
export interface DraPluginOptions {
  readonly driverName: string;
  /** The plugin's socket: a path or `unix://` URL. */
  readonly endpoint: string;
  /** One of {@link DRA_SERVICES_SUPPORTED}. */
  readonly service: string;
  /** @default {@link DRA_CLIENT_CALL_TIMEOUT_MS} */
  readonly timeoutMs?: number;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly metrics?: DraMetrics;
}

/** One registered plugin of a DRA driver (upstream DRAPlugin). */
export class DraPlugin {
  readonly driverName: string;
  readonly endpoint: string;
  readonly service: string;
  readonly #o: DraPluginOptions;
  readonly #conn: CriConnection;
  readonly #methods: (typeof METHODS)[keyof typeof METHODS];

  constructor(opts: DraPluginOptions) {
    const methods = METHODS[opts.service as keyof typeof METHODS];
    if (!methods) throw new Error(`internal error: unsupported chosen service: "${opts.service}"`);
    this.#o = opts;
    this.driverName = opts.driverName;
    this.endpoint = opts.endpoint;
    this.service = opts.service;
    this.#methods = methods;
    this.#conn = new CriConnection({ endpoint: opts.endpoint });
  }

  /** upstream NodePrepareResources. */
  nodePrepareResources(
    req: NodePrepareResourcesRequest,
    signal?: AbortSignal,
  ): Promise<NodePrepareResourcesResponse> {
    return this.#call(this.#methods.nodePrepareResources, req, signal);
  }

  /** upstream NodeUnprepareResources. */
  nodeUnprepareResources(
    req: NodeUnprepareResourcesRequest,
    signal?: AbortSignal,
  ): Promise<NodeUnprepareResourcesResponse> {
    return this.#call(this.#methods.nodeUnprepareResources, req, signal);
  }

  /**
   * upstream NodeWatchResources: the plugin's health reports as they come, with no deadline;
   * ends when the plugin ends the stream or `signal` aborts, throws when the call fails.
   */
  nodeWatchResources(signal: AbortSignal): AsyncGenerator<NodeWatchResourcesResponse> {
    this.#o.logger.v(4).info("Starting WatchResources stream", {
      driverName: this.driverName,
      endpoint: this.endpoint,
    });
    return this.#conn.stream(HEALTH.nodeWatchResources, {}, { signal });
  }

  /** Ends the connection; idempotent. */
  close(): void {
    this.#conn.close();
  }

  async #call<Req, Res>(method: CriMethod<Req, Res>, req: Req, signal?: AbortSignal): Promise<Res> {
    const { clock, logger, metrics } = this.#o;
    const log = logger.v(4);
    log.info(`Calling ${method.path.split("/").at(-1)} rpc`, {
      driverName: this.driverName,
      endpoint: this.endpoint,
    });
    const start = clock.now();
    let code = "OK";
    try {
      return await this.#conn.unary(method, req, {
        timeoutMs: this.#o.timeoutMs ?? DRA_CLIENT_CALL_TIMEOUT_MS,
        signal,
      });
    } catch (e) {
      code = e instanceof CriError ? GRPC_CODE_NAMES[e.code] ?? String(e.code) : "Unknown";
      // What upstream's callers show: grpc-go's text, without our RPC prefix.
      if (e instanceof CriError) throw new Error(e.grpcText, { cause: e });
      throw e;
    } finally {
      metrics?.observeGrpc(this.driverName, method.path, code, (clock.now() - start) / 1000);
      log.info(`Done calling ${method.path.split("/").at(-1)} rpc`, {
        driverName: this.driverName,
        code,
      });
    }
  }
}
