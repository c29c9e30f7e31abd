/**
 * @module
 * A device plugin for unit tests: serves the DevicePlugin service (v1beta1) on a unix socket
 * ({@link GrpcServer}), sends its device list on ListAndWatch and again at each {@link
 * FakeDevicePlugin.setDevices}, answers Allocate with an env, a mount, a device node and a CDI
 * device per device ID, and records every call. Test support only; the end-to-end tests run
 * upstream's sample device plugin.
 */

import {
  type AllocateRequest,
  type ContainerAllocateResponse,
  type Device,
  DevicePluginDefinition,
  type DevicePluginOptions,
  type ListAndWatchResponse,
  type PreferredAllocationRequest,
  type PreStartContainerRequest,
} from "../../proto/deviceplugin/v1beta1/api.ts";
import { GrpcCode, GrpcServer, GrpcStatusError } from "../cri/grpc_server.ts";

/** Options of {@link FakeDevicePlugin.start}. */
export interface FakeDevicePluginOptions {
  readonly socket: string;
  readonly devices: Device[];
  readonly options?: Partial<DevicePluginOptions>;
  /** The IDs GetPreferredAllocation answers. @default the last available ones */
  readonly preferred?: (req: PreferredAllocationRequest) => string[];
  /** Makes Allocate fail with this message. */
  readonly failAllocate?: string;
}

/** A recorded call. */
export type PluginCall =
  | { method: "Allocate"; request: AllocateRequest }
  | { method: "PreStartContainer"; request: PreStartContainerRequest }
  | { method: "GetPreferredAllocation"; request: PreferredAllocationRequest }
  | { method: "GetDevicePluginOptions" | "ListAndWatch"; request: unknown };

/** The answer to one container's Allocate for `ids`. */
export function fakeAllocation(ids: readonly string[]): ContainerAllocateResponse {
  return {
    envs: Object.fromEntries(ids.map((id) => [`DEVICE_${id}`, `/dev/fake-${id}`])),
    mounts: ids.map((id) => ({
      containerPath: `/run/fake/${id}`,
      hostPath: `/var/run/fake/${id}`,
      readOnly: true,
    })),
    devices: ids.map((id) => ({
      containerPath: `/dev/fake-${id}`,
      hostPath: `/dev/null`,
      permissions: "rw",
    })),
    annotations: { "fake.example.com/ids": ids.join(",") },
    cdiDevices: ids.map((id) => ({ name: `example.com/fake=${id}` })),
  };
}

/** See the module documentation. */
export class FakeDevicePlugin {
  readonly calls: PluginCall[] = [];
  #devices: Device[];
  /** One sender per open ListAndWatch. */
  readonly #streams = new Set<(devices: Device[]) => void>();
  #server: GrpcServer | undefined;
  readonly #o: FakeDevicePluginOptions;

  private constructor(o: FakeDevicePluginOptions) {
    this.#o = o;
    this.#devices = o.devices;
  }

  static async start(o: FakeDevicePluginOptions): Promise<FakeDevicePlugin> {
    const p = new FakeDevicePlugin(o);
    const record = (call: PluginCall) => p.calls.push(call);
    const server = await GrpcServer.listen({ path: o.socket });
    server.register(DevicePluginDefinition, {
      getDevicePluginOptions: () => {
        record({ method: "GetDevicePluginOptions", request: {} });
        return { preStartRequired: false, getPreferredAllocationAvailable: false, ...o.options };
      },
      listAndWatch: (_request, ctx) => {
        record({ method: "ListAndWatch", request: {} });
        return p.#watch(ctx.signal);
      },
      allocate: (request) => {
        record({ method: "Allocate", request });
        if (o.failAllocate) throw new GrpcStatusError(GrpcCode.UNKNOWN, o.failAllocate);
        return {
          containerResponses: request.containerRequests.map((r) => fakeAllocation(r.devicesIds)),
        };
      },
      preStartContainer: (request) => {
        record({ method: "PreStartContainer", request });
        return {};
      },
      getPreferredAllocation: (request) => {
        record({ method: "GetPreferredAllocation", request });
        const first = request.containerRequests[0]!;
        const ids = o.preferred?.(request) ??
          first.availableDeviceIDs.slice(-first.allocationSize);
        return { containerResponses: [{ deviceIDs: ids }] };
      },
    });
    p.#server = server;
    return p;
  }

  /** Sends a new device list to every open ListAndWatch. */
  setDevices(devices: Device[]): void {
    this.#devices = devices;
    for (const send of this.#streams) send(devices);
  }

  /** How many calls of `method` were made. */
  count(method: PluginCall["method"]): number {
    return this.calls.filter((c) => c.method === method).length;
  }

  /** Stops serving, as when the plugin exits: open streams end Unavailable, the socket goes. */
  async stop(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    await server?.close();
  }

  /** One ListAndWatch: the device list now, then each one {@link setDevices} sends. */
  #watch(signal: AbortSignal): ReadableStream<ListAndWatchResponse> {
    return new ReadableStream({
      start: (c) => {
        const send = (devices: Device[]) => c.enqueue({ devices });
        send(this.#devices);
        this.#streams.add(send);
        signal.addEventListener("abort", () => {
          this.#streams.delete(send);
          c.close();
        }, { once: true });
      },
    });
  }
}
