/**
 * @module
 * A generated service definition (ts-proto's generic definitions: CRI, CSI, plugin registration)
 * as grpc-js serves it, for fake runtimes, drivers and registrars in tests, and
 * {@link serveGrpc}, which serves such services on a unix socket. Test support only.
 */

import { Buffer } from "node:buffer";
import { dirname } from "node:path";
import * as grpc from "@grpc/grpc-js";
import { criMethods, type ServiceDefinition } from "../cri/connection.ts";

/** The grpc-js service of `definition`: each method's path and codecs. */
export function grpcService(definition: ServiceDefinition): grpc.ServiceDefinition {
  const out: Record<string, grpc.MethodDefinition<unknown, unknown>> = {};
  for (const [key, m] of Object.entries(criMethods(definition))) {
    out[key] = {
      path: m.path,
      requestStream: false,
      responseStream: m.responseStream,
      requestSerialize: (v) => Buffer.from(m.request.encode(v).finish()),
      requestDeserialize: (b) => m.request.decode(b),
      responseSerialize: (v) => Buffer.from(m.response.encode(v).finish()),
      responseDeserialize: (b) => m.response.decode(b),
    };
  }
  return out;
}

/**
 * Serves what `add` adds on a new unix socket at `path` (its directory is made, a stale socket
 * removed).
 */
export async function serveGrpc(
  path: string,
  add: (server: grpc.Server) => void,
): Promise<grpc.Server> {
  await Deno.mkdir(dirname(path), { recursive: true });
  await Deno.remove(path).catch(() => {});
  const server = new grpc.Server();
  add(server);
  await new Promise<void>((resolve, reject) =>
    server.bindAsync(
      `unix://${path}`,
      grpc.ServerCredentials.createInsecure(),
      (e) => e ? reject(e) : resolve(),
    )
  );
  return server;
}
