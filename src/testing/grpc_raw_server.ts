/**
 * @module
 * Test helper: a gRPC server with one unary method that takes and answers message bytes as
 * they are, for replies no generated codec writes (a truncated message, a hand-encoded health
 * status). Used by the CRI connection's tests and the gRPC probe end-to-end test.
 */

import { GrpcServer } from "../cri/grpc_server.ts";

/** Options of {@link serveRawUnary}: a unix socket `path` or a TCP `port` on `hostname`. */
export type RawUnaryOptions =
  & {
    /** The method's path, e.g. "/grpc.health.v1.Health/Check". */
    readonly method: string;
    /** The reply's bytes, asked anew for each call. */
    readonly reply: () => Uint8Array;
  }
  & (
    | { readonly socket: string }
    | { readonly hostname: string; readonly port: number }
  );

const bytes = {
  encode: (b: Uint8Array) => ({ finish: () => b }),
  decode: (b: Uint8Array) => b,
};

/** Serves one raw unary method until disposed. */
export async function serveRawUnary(opts: RawUnaryOptions): Promise<AsyncDisposable> {
  const [, service = "", name = ""] = /^\/([^/]+)\/([^/]+)$/.exec(opts.method) ?? [];
  if (service === "") throw new Error(`method '${opts.method}' is not /<service>/<method>`);
  const server = "socket" in opts
    ? await GrpcServer.listen({ path: opts.socket, closeGracePeriodMs: 0 })
    : GrpcServer.serve(Deno.listen({ hostname: opts.hostname, port: opts.port }), {
      closeGracePeriodMs: 0,
    });
  server.register({
    fullName: service,
    methods: { raw: { name, requestType: bytes, responseType: bytes, responseStream: false } },
  }, { raw: () => opts.reply() });
  return { [Symbol.asyncDispose]: () => server.close() };
}
