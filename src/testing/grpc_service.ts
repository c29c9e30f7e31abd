/**
 * @module
 * A generated service definition (ts-proto's generic definitions: CRI, CSI, plugin registration)
 * as grpc-js serves it, for fake runtimes, drivers and registrars in tests. Test support only.
 */

import { Buffer } from "node:buffer";
import type * as grpc from "@grpc/grpc-js";
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
