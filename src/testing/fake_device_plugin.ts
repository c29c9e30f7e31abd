/**
 * @module
 * A device plugin for unit tests: serves the DevicePlugin service (v1beta1) on a unix socket
 * through grpc-js, sends its device list on ListAndWatch and again at each {@link
 * FakeDevicePlugin.setDevices}, answers Allocate with an env, a mount, a device node and a CDI
 * device per device ID, and records every call. Test support only; the end-to-end tests run
 * upstream's sample device plugin.
 */

import type * as grpc from "@grpc/grpc-js";
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
import { grpcService, serveGrpc } from "./grpc_service.ts";

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
  readonly #streams = new Set<grpc.ServerWritableStream<unknown, ListAndWatchResponse>>();
  #server: grpc.Server | undefined;
  readonly #o: FakeDevicePluginOptions;

  private constructor(o: FakeDevicePluginOptions) {
    this.#o = o;
    this.#devices = o.devices;
  }

  static async start(o: FakeDevicePluginOptions): Promise<FakeDevicePlugin> {
    const p = new FakeDevicePlugin(o);
    const record = (call: PluginCall) => p.calls.push(call);
    p.#server = await serveGrpc(
      o.socket,
      (srv) =>
        srv.addService(grpcService(DevicePluginDefinition), {
          getDevicePluginOptions: (_c: unknown, cb: grpc.sendUnaryData<DevicePluginOptions>) => {
            record({ method: "GetDevicePluginOptions", request: {} });
            cb(null, {
              preStartRequired: false,
              getPreferredAllocationAvailable: false,
              ...o.options,
            });
          },
          listAndWatch: (call: grpc.ServerWritableStream<unknown, ListAndWatchResponse>) => {
            record({ method: "ListAndWatch", request: {} });
            p.#streams.add(call);
            call.on("cancelled", () => p.#streams.delete(call));
            call.write({ devices: p.#devices });
          },
          allocate: (
            call: grpc.ServerUnaryCall<AllocateRequest, unknown>,
            cb: grpc.sendUnaryData<unknown>,
          ) => {
            record({ method: "Allocate", request: call.request });
            if (o.failAllocate) {
              cb({ code: 2, details: o.failAllocate } as grpc.ServiceError);
              return;
            }
            cb(null, {
              containerResponses: call.request.containerRequests.map((r) =>
                fakeAllocation(r.devicesIds)
              ),
            });
          },
          preStartContainer: (
            call: grpc.ServerUnaryCall<PreStartContainerRequest, unknown>,
            cb: grpc.sendUnaryData<unknown>,
          ) => {
            record({ method: "PreStartContainer", request: call.request });
            cb(null, {});
          },
          getPreferredAllocation: (
            call: grpc.ServerUnaryCall<PreferredAllocationRequest, unknown>,
            cb: grpc.sendUnaryData<unknown>,
          ) => {
            record({ method: "GetPreferredAllocation", request: call.request });
            const ids = o.preferred?.(call.request) ??
              call.request.containerRequests[0]!.availableDeviceIDs.slice(
                -call.request.containerRequests[0]!.allocationSize,
              );
            cb(null, { containerResponses: [{ deviceIDs: ids }] });
          },
        }),
    );
    return p;
  }

  /** Sends a new device list to every open ListAndWatch. */
  setDevices(devices: Device[]): void {
    this.#devices = devices;
    for (const s of this.#streams) s.write({ devices });
  }

  /** How many calls of `method` were made. */
  count(method: PluginCall["method"]): number {
    return this.calls.filter((c) => c.method === method).length;
  }

  /** Stops serving: open streams end, as when the plugin exits. */
  async stop(): Promise<void> {
    for (const s of this.#streams) s.end();
    this.#streams.clear();
    const server = this.#server;
    this.#server = undefined;
    if (server) await new Promise<void>((r) => server.tryShutdown(() => r()));
    server?.forceShutdown();
  }
}
