/**
 * @module
 * The test suite's stand-in for kubernetes-csi/node-driver-registrar, which the Go module proxy
 * this suite builds from refuses at every version (see tests/csi_build.ts): a gRPC server
 * (src/cri/grpc_server.ts) of pluginregistration v1's Registration service on a socket in the
 * kubelet's plugins_registry, answering the kubelet's plugin watcher with a CSI driver's name,
 * endpoint and versions and recording what the kubelet notifies.
 */

import { GrpcServer } from "../src/cri/grpc_server.ts";
import {
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
  // Stopped as a registrar that exits: calls in flight are not waited for.
  const server = await GrpcServer.listen({ path: opts.socket, closeGracePeriodMs: 0 });
  server.register(RegistrationDefinition, {
    getInfo: () => ({
      type: "CSIPlugin",
      name: opts.name,
      endpoint: opts.endpoint,
      supportedVersions: [...(opts.supportedVersions ?? ["1.0.0"])],
    }),
    notifyRegistrationStatus: (request) => {
      notified.push(request);
      return {};
    },
  });
  const stop = () => server.close();
  return { socket: opts.socket, notified, stop, [Symbol.asyncDispose]: stop };
}
