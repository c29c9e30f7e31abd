/**
 * @module
 * The test suite's stand-in for kubernetes-csi/node-driver-registrar, which the Go module proxy
 * this suite builds from refuses at every version (see tests/csi_build.ts): a grpc-js server of
 * pluginregistration v1's Registration service on a socket in the kubelet's plugins_registry,
 * answering the kubelet's plugin watcher with a CSI driver's name, endpoint and versions and
 * recording what the kubelet notifies.
 */

import type * as grpc from "@grpc/grpc-js";
import { grpcService, serveGrpc } from "../src/testing/grpc_service.ts";
import {
  type PluginInfo,
  RegistrationDefinition,
  type RegistrationStatus,
} from "../proto/pluginregistration/v1/api.ts";

/** Options of {@link startRegistrar}. */
export interface RegistrarOptions {
  /** The registration socket, e.g. `<root-dir>/plugins_registry/<name>-reg.sock`. */
  readonly socket: string;
  /** The driver's name. */
  readonly name: string;
  /** The driver's socket. */
  readonly endpoint: string;
  /** @default ["1.0.0"] */
  readonly supportedVersions?: readonly string[];
}

/** A running registrar. */
export interface Registrar extends AsyncDisposable {
  readonly socket: string;
  /** What the kubelet notified, in order. */
  readonly notified: RegistrationStatus[];
  /** Stops serving and removes the socket (the kubelet then deregisters the driver). */
  stop(): Promise<void>;
}

/** Serves node-driver-registrar's Registration service for one CSI driver. */
export async function startRegistrar(opts: RegistrarOptions): Promise<Registrar> {
  const notified: RegistrationStatus[] = [];
  const server = await serveGrpc(
    opts.socket,
    (s) =>
      s.addService(grpcService(RegistrationDefinition), {
        getInfo: (_: unknown, cb: grpc.sendUnaryData<PluginInfo>) =>
          cb(null, {
            type: "CSIPlugin",
            name: opts.name,
            endpoint: opts.endpoint,
            supportedVersions: [...(opts.supportedVersions ?? ["1.0.0"])],
          }),
        notifyRegistrationStatus: (
          call: grpc.ServerUnaryCall<RegistrationStatus, unknown>,
          cb: grpc.sendUnaryData<unknown>,
        ) => {
          notified.push(call.request);
          cb(null, {});
        },
      }),
  );
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    server.forceShutdown();
    await Deno.remove(opts.socket).catch(() => {});
  };
  return { socket: opts.socket, notified, stop, [Symbol.asyncDispose]: stop };
}
