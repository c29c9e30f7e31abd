/**
 * @module
 * The registration side of the device manager: the `Registration` service on
 * `<root-dir>/device-plugins/kubelet.sock` (device plugin API v1beta1), the plugin registry's
 * `DevicePlugin` handler, dialing each plugin back on the socket it names, following its
 * ListAndWatch stream for as long as it lives, and disconnecting it when the stream ends or the
 * plugin registry sees it go. What a connection, a device list or a departure means for the node
 * is up to the {@link ClientHandler} (the device manager), which also owns the endpoints.
 * Corresponds to upstream `pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go`,
 * `handler.go`, `client.go` (Run, Disconnect) and `api.go` (ClientHandler).
 */

import {
  type Device,
  type DevicePluginOptions,
  type RegisterRequest,
  RegistrationDefinition,
} from "../../proto/deviceplugin/v1beta1/api.ts";
import { join } from "node:path";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import { errorText } from "../util/errors.ts";
import { GrpcServer, GrpcStatusError } from "../cri/grpc_server.ts";
import { GrpcCode } from "../cri/connection.ts";
import type { PluginHandler } from "../pluginmanager/plugin_handler.ts";
import { isExtendedResourceName } from "../lifecycle/predicate.ts";
import { Endpoint } from "./endpoint.ts";

/** The device plugin API version this kubelet speaks (upstream api.Version). */
export const DEVICE_PLUGIN_VERSION = "v1beta1";
/** The kubelet's registration socket's name in the device plugin directory. */
export const KUBELET_SOCKET = "kubelet.sock";

/** What the server tells the device manager about its plugins (upstream ClientHandler). */
export interface ClientHandler {
  /** The endpoint now kept for `resource`, connected or stopped. */
  endpoint(resource: string): Endpoint | undefined;
  /** upstream PluginConnected: `endpoint` replaces the resource's endpoint before it. */
  pluginConnected(resource: string, endpoint: Endpoint, options: DevicePluginOptions): void;
  /** upstream PluginListAndWatchReceiver: the plugin's whole device list, as it sent it. */
  pluginListAndWatchReceiver(resource: string, devices: readonly Device[]): void;
  /** upstream PluginDisconnected: the resource's devices unhealthy, `endpoint` stopped. */
  pluginDisconnected(resource: string, endpoint: Endpoint): void;
}

/** Options of {@link PluginServer}. */
export interface PluginServerOptions {
  /** The device plugin directory: the registration socket and the plugins' sockets. */
  readonly directory: string;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Ends the dials and the plugins' streams. */
  readonly signal: AbortSignal;
  readonly handler: ClientHandler;
  /** Counts a registration request (upstream DevicePluginRegistrationCount). @default none */
  readonly onRegistration?: (resourceName: string) => void;
}

/** The registration server and plugin registry handler; see the module documentation. */
export class PluginServer {
  readonly #o: PluginServerOptions;
  #server: GrpcServer | undefined;

  constructor(opts: PluginServerOptions) {
    this.#o = opts;
  }

  /** The registration socket's path. */
  get socketPath(): string {
    return join(this.#o.directory, KUBELET_SOCKET);
  }

  /** Serves the registration socket; the directory exists and holds no stale socket. */
  async start(): Promise<void> {
    const { logger } = this.#o;
    logger.v(2).info("Creating device plugin registration server", {
      version: DEVICE_PLUGIN_VERSION,
      socket: this.socketPath,
    });
    this.#server = await GrpcServer.listen({ path: this.socketPath, logger });
    this.#server.register(RegistrationDefinition, {
      register: async (req: RegisterRequest) => {
        await this.#register(req);
        return {};
      },
    });
  }

  /** Closes the registration socket; idempotent. */
  async stop(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    await server?.close();
  }

  /** The handler of `DevicePlugin` registrations through the plugin registry. */
  pluginHandler(): PluginHandler {
    return {
      validatePlugin: (name, _endpoint, versions) => {
        if (!versions.includes(DEVICE_PLUGIN_VERSION)) {
          throw new Error(
            `manager version, ${DEVICE_PLUGIN_VERSION}, is not among plugin supported versions [${
              versions.join(" ")
            }]`,
          );
        }
        if (!isExtendedResourceName(name)) {
          throw new Error(
            `invalid name of device plugin socket: the ResourceName ${JSON.stringify(name)} ` +
              "is invalid",
          );
        }
      },
      registerPlugin: (name, endpoint) => this.#connect(name, endpoint),
      deRegisterPlugin: (name) => {
        const endpoint = this.#o.handler.endpoint(name);
        if (endpoint && !endpoint.stopped) this.#disconnect(name, endpoint);
      },
    };
  }

  async #register(req: RegisterRequest): Promise<void> {
    const { logger } = this.#o;
    logger.info("Got registration request from device plugin with resource", {
      resourceName: req.resourceName,
    });
    this.#o.onRegistration?.(req.resourceName);
    if (req.version !== DEVICE_PLUGIN_VERSION) {
      const msg = `requested API version ${JSON.stringify(req.version)} is not supported by ` +
        `kubelet. Supported version is ${JSON.stringify(`[${DEVICE_PLUGIN_VERSION}]`)}`;
      logger.error(new Error(msg), "Bad registration request from device plugin with resource", {
        resourceName: req.resourceName,
      });
      throw new GrpcStatusError(GrpcCode.UNKNOWN, msg);
    }
    if (!isExtendedResourceName(req.resourceName)) {
      const msg = `the ResourceName ${JSON.stringify(req.resourceName)} is invalid`;
      logger.error(new Error(msg), "Bad registration request from device plugin");
      throw new GrpcStatusError(GrpcCode.UNKNOWN, msg);
    }
    try {
      await this.#connect(req.resourceName, join(this.#o.directory, req.endpoint));
    } catch (err) {
      logger.error(err, "Error connecting to device plugin client");
      throw new GrpcStatusError(GrpcCode.UNKNOWN, errorText(err));
    }
  }

  /** Dials a plugin, hands it to the handler and follows its ListAndWatch. */
  async #connect(resource: string, socket: string): Promise<void> {
    const { endpoint, options } = await Endpoint.connect(
      resource,
      socket,
      this.#o.clock,
      this.#o.signal,
    );
    this.#o.handler.pluginConnected(resource, endpoint, options);
    void this.#watch(resource, endpoint);
  }

  /** upstream client.Run then runClient: the stream, then the disconnection when it ends. */
  async #watch(resource: string, endpoint: Endpoint): Promise<void> {
    const { logger, signal, handler } = this.#o;
    try {
      for await (const res of endpoint.listAndWatch(signal)) {
        logger.v(2).info("State pushed for device plugin", {
          resource,
          resourceCapacity: res.devices.length,
        });
        if (handler.endpoint(resource) !== endpoint) return;
        handler.pluginListAndWatchReceiver(resource, res.devices);
      }
      if (!signal.aborted) {
        logger.error(null, "ListAndWatch ended unexpectedly for device plugin", { resource });
      }
    } catch (err) {
      logger.error(err, "ListAndWatch ended unexpectedly for device plugin", { resource });
    }
    if (handler.endpoint(resource) === endpoint) this.#disconnect(resource, endpoint);
  }

  /** upstream client.Disconnect. */
  #disconnect(resource: string, endpoint: Endpoint): void {
    this.#o.handler.pluginDisconnected(resource, endpoint);
    this.#o.logger.v(2).info("Device plugin disconnected", { resource });
  }
}
