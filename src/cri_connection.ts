/**
 * @module
 * One gRPC connection to a CRI endpoint (`unix:///run/containerd/containerd.sock`) and the two
 * call shapes the kubelet makes on it: unary calls with a deadline and an AbortSignal, and
 * server streams. Errors carry the RPC name and the gRPC code, worded as Go's gRPC prints them.
 * The channel reconnects by itself with upstream's backoff (100 ms doubling to 3 s), so a
 * restarted runtime is reached again without a new client. Corresponds to the dialing half of
 * upstream `pkg/kubelet/cri/remote/remote_runtime.go`.
 */

import * as grpc from "@grpc/grpc-js";
import type { Buffer } from "node:buffer";
import { unixSocketPath } from "./permissions.ts";

/** Upstream's maxMsgSize for CRI messages: 16 MiB. */
export const MAX_MESSAGE_SIZE = 16 * 1024 * 1024;

/** gRPC status code names as Go's codes.Code prints them. */
export const GRPC_CODE_NAMES: Readonly<Record<number, string>> = {
  0: "OK",
  1: "Canceled",
  2: "Unknown",
  3: "InvalidArgument",
  4: "DeadlineExceeded",
  5: "NotFound",
  6: "AlreadyExists",
  7: "PermissionDenied",
  8: "ResourceExhausted",
  9: "FailedPrecondition",
  10: "Aborted",
  11: "OutOfRange",
  12: "Unimplemented",
  13: "Internal",
  14: "Unavailable",
  15: "DataLoss",
  16: "Unauthenticated",
};

/** A failed CRI call: which RPC, its gRPC status code, and the runtime's description. */
export class CriError extends Error {
  override name = "CriError";
  constructor(
    /** e.g. "RuntimeService/ContainerStatus". */
    readonly rpc: string,
    readonly code: grpc.status,
    readonly details: string,
    options?: ErrorOptions,
  ) {
    super(`${rpc}: rpc error: code = ${GRPC_CODE_NAMES[code] ?? code} desc = ${details}`, options);
  }

  /** The error as Go's gRPC client prints it, without the RPC name (what upstream shows users). */
  get grpcText(): string {
    return `rpc error: code = ${GRPC_CODE_NAMES[this.code] ?? this.code} desc = ${this.details}`;
  }
}

/** True when `e` is a CRI error with gRPC code `code`. */
export function isCriCode(e: unknown, code: grpc.status): e is CriError {
  return e instanceof CriError && e.code === code;
}

/** A unary RPC as the generated service definitions describe it. */
export interface UnaryMethod<Req, Res> {
  readonly path: string;
  readonly requestStream: false;
  readonly responseStream: false;
  requestSerialize(value: Req): Buffer;
  responseDeserialize(value: Buffer): Res;
}

/** A server-streaming RPC as the generated service definitions describe it. */
export interface StreamMethod<Req, Res> {
  readonly path: string;
  readonly requestStream: false;
  readonly responseStream: true;
  requestSerialize(value: Req): Buffer;
  responseDeserialize(value: Buffer): Res;
}

/** Per-call limits. */
export interface CallOptions {
  /** Deadline from now; undefined for none (image pulls, streams). */
  readonly timeoutMs?: number;
  readonly signal?: AbortSignal;
}

/** What {@link CriConnection} needs. */
export interface ConnectionOptions {
  /** `unix:///path`, or an absolute socket path. */
  readonly endpoint: string;
}

/** Turns the kubelet's endpoint syntax into a grpc-js target. */
export function grpcTarget(endpoint: string): string {
  const socket = unixSocketPath(endpoint);
  if (socket !== undefined) return `unix://${socket}`;
  throw new Error(
    `endpoint '${endpoint}' is not supported: only unix:// endpoints (or absolute socket paths) are on Linux`,
  );
}

/** The name of an RPC from its path: "/runtime.v1.RuntimeService/Version" → "RuntimeService/Version". */
export function rpcName(path: string): string {
  return path.replace(/^\/runtime\.v1\./, "");
}

/** A channel to one CRI endpoint, shared by the runtime and image services when they agree. */
export class CriConnection {
  readonly endpoint: string;
  readonly #client: grpc.Client;
  readonly #streams = new Set<grpc.ClientReadableStream<unknown>>();
  #closed = false;

  constructor(opts: ConnectionOptions) {
    this.endpoint = opts.endpoint;
    this.#client = new grpc.Client(grpcTarget(opts.endpoint), grpc.credentials.createInsecure(), {
      "grpc.max_receive_message_length": MAX_MESSAGE_SIZE,
      "grpc.max_send_message_length": MAX_MESSAGE_SIZE,
      "grpc.initial_reconnect_backoff_ms": 100,
      "grpc.max_reconnect_backoff_ms": 3000,
      "grpc.min_reconnect_backoff_ms": 100,
    });
  }

  /** Makes one unary call; rejects with {@link CriError}. */
  unary<Req, Res>(
    method: UnaryMethod<Req, Res>,
    request: Req,
    opts: CallOptions = {},
  ): Promise<Res> {
    const rpc = rpcName(method.path);
    const { signal, timeoutMs } = opts;
    if (this.#closed) {
      return Promise.reject(new CriError(rpc, grpc.status.UNAVAILABLE, "the connection is closed"));
    }
    if (signal?.aborted) {
      return Promise.reject(
        new CriError(rpc, grpc.status.CANCELLED, "context canceled", { cause: signal.reason }),
      );
    }
    return new Promise<Res>((resolve, reject) => {
      const options: grpc.CallOptions = timeoutMs === undefined
        ? {}
        : { deadline: Date.now() + timeoutMs };
      const onAbort = () => call.cancel();
      const call = this.#client.makeUnaryRequest(
        method.path,
        (v: Req) => method.requestSerialize(v),
        (b: Buffer) => method.responseDeserialize(b),
        request,
        new grpc.Metadata(),
        options,
        (err, res) => {
          signal?.removeEventListener("abort", onAbort);
          if (err) {
            const details = err.code === grpc.status.CANCELLED && signal?.aborted
              ? "context canceled"
              : err.details;
            reject(
              new CriError(rpc, err.code, details, {
                cause: signal?.aborted ? signal.reason : err,
              }),
            );
          } else if (res === undefined) {
            reject(new CriError(rpc, grpc.status.INTERNAL, "empty response"));
          } else {
            resolve(res);
          }
        },
      );
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** Opens a server stream; iterate it, and abort `signal` to end it. */
  async *stream<Req, Res>(
    method: StreamMethod<Req, Res>,
    request: Req,
    opts: CallOptions = {},
  ): AsyncGenerator<Res> {
    const rpc = rpcName(method.path);
    if (opts.signal?.aborted) return;
    if (this.#closed) throw new CriError(rpc, grpc.status.UNAVAILABLE, "the connection is closed");
    const call = this.#client.makeServerStreamRequest(
      method.path,
      (v: Req) => method.requestSerialize(v),
      (b: Buffer) => method.responseDeserialize(b),
      request,
      new grpc.Metadata(),
      opts.timeoutMs === undefined ? {} : { deadline: Date.now() + opts.timeoutMs },
    );
    const onAbort = () => call.cancel();
    opts.signal?.addEventListener("abort", onAbort, { once: true });
    this.#streams.add(call);
    try {
      for await (const item of call) yield item as Res;
    } catch (e) {
      const err = e as grpc.ServiceError;
      if (err.code === grpc.status.CANCELLED && (opts.signal?.aborted || this.#closed)) return;
      throw new CriError(rpc, err.code ?? grpc.status.UNKNOWN, err.details ?? String(e), {
        cause: e,
      });
    } finally {
      this.#streams.delete(call);
      opts.signal?.removeEventListener("abort", onAbort);
      call.cancel();
    }
  }

  /** Ends open streams and closes the channel; idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const call of this.#streams) call.cancel();
    this.#streams.clear();
    this.#client.close();
  }
}
