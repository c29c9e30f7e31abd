/**
 * @module
 * Test helper: a grpc-js server with one unary method that takes and answers message bytes as
 * they are, for replies no generated codec writes (a truncated message, a hand-encoded health
 * status). Used by the CRI connection's tests and the gRPC probe end-to-end test.
 */

import { Buffer } from "node:buffer";
import * as grpc from "@grpc/grpc-js";

/** Options of {@link serveRawUnary}. */
export interface RawUnaryOptions {
  /** Where grpc-js binds: `unix:///path` or `host:port`. */
  readonly address: string;
  /** The method's path, e.g. "/grpc.health.v1.Health/Check". */
  readonly path: string;
  /** The reply's bytes, asked anew for each call. */
  readonly reply: () => Uint8Array;
}

/** Serves one raw unary method until disposed. */
export async function serveRawUnary(opts: RawUnaryOptions): Promise<Disposable> {
  const server = new grpc.Server();
  const bytes = (b: Uint8Array) => Buffer.from(b);
  const raw = (b: Buffer) => new Uint8Array(b);
  server.addService({
    method: {
      path: opts.path,
      requestStream: false,
      responseStream: false,
      requestSerialize: bytes,
      requestDeserialize: raw,
      responseSerialize: bytes,
      responseDeserialize: raw,
    },
  }, {
    method: (_call: unknown, cb: (e: null, r: Uint8Array) => void) => cb(null, opts.reply()),
  });
  await new Promise<void>((resolve, reject) =>
    server.bindAsync(
      opts.address,
      grpc.ServerCredentials.createInsecure(),
      (e) => e ? reject(e) : resolve(),
    )
  );
  return { [Symbol.dispose]: () => server.forceShutdown() };
}
