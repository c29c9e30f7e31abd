/**
 * @module
 * The kubelet's side of one registered device plugin: the client of the plugin's DevicePlugin
 * service over the socket it registered (GetDevicePluginOptions once at connection,
 * ListAndWatch for as long as the plugin lives, Allocate, PreStartContainer,
 * GetPreferredAllocation), and the time the plugin stopped, after which its resource is kept
 * for {@link ENDPOINT_STOP_GRACE_PERIOD_MS} before it is dropped from the node. An endpoint
 * restored from the checkpoint has no plugin yet: it is stopped from the start, and its calls
 * fail with upstream's "endpoint ... has been stopped".
 * Corresponds to upstream `pkg/kubelet/cm/devicemanager/endpoint.go` and
 * `plugin/v1beta1/client.go`.
 */

import { CriConnection, CriError, criMethods, GrpcCode } from "../cri/connection.ts";
import {
  type AllocateResponse,
  type Device,
  DevicePluginDefinition,
  type DevicePluginOptions,
  type PreferredAllocationResponse,
} from "../../proto/deviceplugin/v1beta1/api.ts";
import type { Clock } from "../util/clock.ts";
import { errorText } from "../util/errors.ts";

const PLUGIN = criMethods(DevicePluginDefinition);

/** How long a stopped plugin's resource stays on the node (upstream endpointStopGracePeriod). */
export const ENDPOINT_STOP_GRACE_PERIOD_MS = 5 * 60_000;
/** Upstream's dial timeout of a device plugin's socket. */
export const DIAL_TIMEOUT_MS = 10_000;
/** Upstream KubeletPreStartContainerRPCTimeoutInSecs. */
export const PRE_START_CONTAINER_TIMEOUT_MS = 30_000;

/** One device plugin, connected or stopped. */
export class Endpoint {
  readonly resource: string;
  readonly socket: string | undefined;
  readonly #clock: Clock;
  #conn: CriConnection | undefined;
  #stoppedAt: number | undefined;

  private constructor(resource: string, socket: string | undefined, clock: Clock) {
    this.resource = resource;
    this.socket = socket;
    this.#clock = clock;
    if (socket !== undefined) this.#conn = new CriConnection({ endpoint: socket });
  }

  /** An endpoint restored from the checkpoint: stopped, waiting for its plugin to come back. */
  static stopped(resource: string, clock: Clock): Endpoint {
    const e = new Endpoint(resource, undefined, clock);
    e.#stoppedAt = clock.now();
    return e;
  }

  /**
   * Dials the plugin and asks its options (upstream client.Connect then PluginConnected);
   * throws upstream's messages.
   */
  static async connect(
    resource: string,
    socket: string,
    clock: Clock,
    signal?: AbortSignal,
  ): Promise<{ endpoint: Endpoint; options: DevicePluginOptions }> {
    const e = new Endpoint(resource, socket, clock);
    try {
      const options = await e.#connection().unary(PLUGIN.getDevicePluginOptions, {}, {
        timeoutMs: DIAL_TIMEOUT_MS,
        signal,
      });
      return { endpoint: e, options };
    } catch (err) {
      e.close();
      if (err instanceof CriError && err.code === GrpcCode.UNAVAILABLE) {
        throw new Error(`failed to dial device plugin: ${errorText(err)}`, { cause: err });
      }
      throw new Error(`failed to get device plugin options: ${errorText(err)}`, { cause: err });
    }
  }

  /** The plugin's device lists as it sends them; ends (or throws) when the stream does. */
  listAndWatch(signal: AbortSignal): AsyncGenerator<{ devices: Device[] }> {
    return this.#connection().stream(PLUGIN.listAndWatch, {}, { signal });
  }

  /** upstream allocate: one container's devices. */
  allocate(deviceIds: readonly string[], signal?: AbortSignal): Promise<AllocateResponse> {
    return this.#connection().unary(
      PLUGIN.allocate,
      { containerRequests: [{ devicesIds: [...deviceIds] }] },
      { signal },
    );
  }

  /** upstream preStartContainer, with its 30 s deadline. */
  async preStartContainer(deviceIds: readonly string[], signal?: AbortSignal): Promise<void> {
    await this.#connection().unary(
      PLUGIN.preStartContainer,
      { devicesIds: [...deviceIds] },
      { signal, timeoutMs: PRE_START_CONTAINER_TIMEOUT_MS },
    );
  }

  /** upstream getPreferredAllocation. */
  getPreferredAllocation(
    available: readonly string[],
    mustInclude: readonly string[],
    size: number,
    signal?: AbortSignal,
  ): Promise<PreferredAllocationResponse> {
    return this.#connection().unary(PLUGIN.getPreferredAllocation, {
      containerRequests: [{
        availableDeviceIDs: [...available],
        mustIncludeDeviceIDs: [...mustInclude],
        allocationSize: size,
      }],
    }, { signal });
  }

  /** Marks the plugin gone (upstream setStopTime); its calls fail from now on. */
  stop(): void {
    this.#stoppedAt ??= this.#clock.now();
    this.close();
  }

  get stopped(): boolean {
    return this.#stoppedAt !== undefined;
  }

  /** Whether the plugin stopped more than the grace period ago. */
  stopGracePeriodExpired(): boolean {
    return this.#stoppedAt !== undefined &&
      this.#clock.now() - this.#stoppedAt > ENDPOINT_STOP_GRACE_PERIOD_MS;
  }

  /** Closes the connection (a stream in progress ends). */
  close(): void {
    this.#conn?.close();
    this.#conn = undefined;
  }

  toString(): string {
    return `${this.resource} (${this.socket ?? "restored from the checkpoint"})`;
  }

  #connection(): CriConnection {
    if (this.#stoppedAt !== undefined || this.#conn === undefined) {
      throw new Error(`endpoint ${this} has been stopped`);
    }
    return this.#conn;
  }
}
