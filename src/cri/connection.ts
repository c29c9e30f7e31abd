/**
 * @module
 * One connection to a CRI endpoint (`unix:///run/containerd/containerd.sock`) and the two call
 * shapes the kubelet makes on it: unary calls with a deadline and an AbortSignal, and server
 * streams. Errors carry the RPC name and the gRPC code, worded as Go's gRPC prints them.
 * Corresponds to the dialing half of upstream `pkg/kubelet/cri/remote/remote_runtime.go`.
 *
 * gRPC goes over Deno's own fetch (HTTP/2 with prior knowledge on the unix socket, the wire
 * format in {@link ./_grpc_wire.ts}), not a gRPC library: grpc-js and node:http2 would hold about
 * 7 MiB more for as long as the kubelet runs, and cost more CPU per call. A call that finds the
 * runtime gone fails Unavailable at once, as Go's gRPC does for calls that do not wait for
 * readiness; the next call dials again, so a restarted runtime is reached without a new client.
 * What fetch cannot show is the trailers: a status the runtime sends after messages (never for
 * a unary call; grpc-go ends a failed one with its status in the headers) reads as the end of
 * the stream.
 */

import {
  GRPC_CODE_NAMES,
  GrpcCode,
  grpcFrame,
  GrpcFrameReader,
  GrpcStatusError,
  grpcTimeout,
  headerStatus,
  unaryMessage,
} from "./_grpc_wire.ts";
import { unixSocketPath } from "../privilege/permissions.ts";
import { errorText } from "../util/errors.ts";

export { GRPC_CODE_NAMES, GrpcCode };

/** Upstream's maxMsgSize for CRI messages: 16 MiB. */
export const MAX_MESSAGE_SIZE = 16 * 1024 * 1024;

/** A failed CRI call: which RPC, its gRPC status code, and the runtime's description. */
export class CriError extends Error {
  override name = "CriError";
  constructor(
    /** e.g. "RuntimeService/ContainerStatus". */
    readonly rpc: string,
    readonly code: number,
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

/**
 * What upstream shows of an error from a CRI call: a {@link CriError} as Go's gRPC client prints
 * it (`rpc error: code = ... desc = ...`, without our RPC name), anything else by its message.
 */
export function criErrorText(e: unknown): string {
  if (e instanceof CriError) return e.grpcText;
  return e instanceof Error ? e.message : String(e);
}

/** True when `e` is a CRI error with gRPC code `code`. */
export function isCriCode(e: unknown, code: number): e is CriError {
  return e instanceof CriError && e.code === code;
}

/** A message type's codec, as the generated bindings give it. */
export interface Codec<T> {
  encode(message: T): { finish(): Uint8Array };
  decode(input: Uint8Array): T;
}

/** One RPC, ready to call: its HTTP/2 path and its messages' codecs. */
export interface CriMethod<Req, Res> {
  /** e.g. "/runtime.v1.RuntimeService/Version". */
  readonly path: string;
  readonly responseStream: boolean;
  readonly request: Codec<Req>;
  readonly response: Codec<Res>;
}

/** A service as the generated bindings define it (ts-proto's generic definitions). */
export interface ServiceDefinition {
  readonly fullName: string;
  readonly methods: {
    readonly [key: string]: {
      readonly name: string;
      // deno-lint-ignore no-explicit-any
      readonly requestType: Codec<any>;
      // deno-lint-ignore no-explicit-any
      readonly responseType: Codec<any>;
      readonly responseStream: boolean;
    };
  };
}

type Message<C> = C extends Codec<infer T> ? T : never;

/** Every method of a service as a {@link CriMethod}, under the generated (camelCase) keys. */
export type CriMethods<D extends ServiceDefinition> = {
  readonly [K in keyof D["methods"]]: CriMethod<
    Message<D["methods"][K]["requestType"]>,
    Message<D["methods"][K]["responseType"]>
  >;
};

/** The methods of a generated service definition, with their paths. */
export function criMethods<D extends ServiceDefinition>(definition: D): CriMethods<D> {
  const out: Record<string, CriMethod<unknown, unknown>> = {};
  for (const [key, m] of Object.entries(definition.methods)) {
    out[key] = {
      path: `/${definition.fullName}/${m.name}`,
      responseStream: m.responseStream,
      request: m.requestType,
      response: m.responseType,
    };
  }
  return out as CriMethods<D>;
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

/** The socket path of a CRI endpoint; only unix sockets are supported on Linux. */
export function criSocketPath(endpoint: string): string {
  const socket = unixSocketPath(endpoint);
  if (socket !== undefined) return socket;
  throw new Error(
    `endpoint '${endpoint}' is not supported: only unix:// endpoints (or absolute socket paths) are on Linux`,
  );
}

/** The name of an RPC from its path: "/runtime.v1.RuntimeService/Version" → "RuntimeService/Version". */
export function rpcName(path: string): string {
  return path.replace(/^\/runtime\.v1\./, "");
}

/** Why a call's own controller aborted it. */
const DEADLINE = Symbol("deadline");
const CANCELED = Symbol("canceled");
const CLOSED = Symbol("closed");

const HEADERS: HeadersInit = { "content-type": "application/grpc", te: "trailers" };

/** One call's fetch, with the caller's signal, its deadline and the connection's close. */
class Call {
  readonly ctl = new AbortController();
  /** The response body's frames, once the headers came. */
  reader?: GrpcFrameReader;
  readonly #signal?: AbortSignal;
  readonly #timer?: ReturnType<typeof setTimeout>;
  readonly #onAbort = () => this.abort(CANCELED);

  constructor(signal: AbortSignal | undefined, timeoutMs: number | undefined) {
    this.#signal = signal;
    signal?.addEventListener("abort", this.#onAbort, { once: true });
    if (timeoutMs !== undefined) {
      this.#timer = setTimeout(() => this.abort(DEADLINE), timeoutMs);
    }
  }

  /**
   * Ends the call: the fetch, and a read of its stream body in progress (aborting the fetch
   * alone does not always end a pending body read in Deno 2.9: seen with a stream aborted right
   * after messages came). A unary body is read whole with no reader to cancel; grpc-go writes a
   * unary reply's headers, message and status together, so that read does not wait on the
   * runtime.
   */
  abort(why: typeof DEADLINE | typeof CANCELED | typeof CLOSED): void {
    if (this.ctl.signal.aborted) return;
    this.ctl.abort(why);
    void this.reader?.cancel();
  }

  /** Reads the response's frames; ends the read at once if the call was aborted meanwhile. */
  read(res: Response): GrpcFrameReader {
    this.reader = new GrpcFrameReader(res.body!, MAX_MESSAGE_SIZE);
    if (this.ctl.signal.aborted) void this.reader.cancel();
    return this.reader;
  }

  /** Why the call was aborted, if it was. */
  get reason(): typeof DEADLINE | typeof CANCELED | typeof CLOSED | undefined {
    return this.ctl.signal.aborted ? this.ctl.signal.reason : undefined;
  }

  done(): void {
    clearTimeout(this.#timer);
    this.#signal?.removeEventListener("abort", this.#onAbort);
  }

  /** The failure `e` (from fetch or the body) as a CRI error. */
  error(rpc: string, e: unknown, socket: string): CriError {
    switch (this.reason) {
      case DEADLINE:
        return new CriError(rpc, GrpcCode.DEADLINE_EXCEEDED, "context deadline exceeded");
      case CANCELED:
        return new CriError(rpc, GrpcCode.CANCELLED, "context canceled", {
          cause: this.#signal?.reason,
        });
      case CLOSED:
        return new CriError(rpc, GrpcCode.UNAVAILABLE, "the connection is closed");
    }
    if (e instanceof CriError) return e;
    if (e instanceof GrpcStatusError) return new CriError(rpc, e.code, e.details, { cause: e });
    return new CriError(rpc, GrpcCode.UNAVAILABLE, transportText(e, socket), { cause: e });
  }
}

/** A response message, or the error grpc-go gives for one it cannot unmarshal. */
function decode<Res>(method: CriMethod<unknown, Res>, message: Uint8Array): Res {
  try {
    return method.response.decode(message);
  } catch (e) {
    throw new GrpcStatusError(
      GrpcCode.INTERNAL,
      `grpc: failed to unmarshal the received message: ${errorText(e)}`,
    );
  }
}

/** A fetch failure worded as grpc-go words a dial or transport error. */
function transportText(e: unknown, socket: string): string {
  const cause = e instanceof Error && e.cause instanceof Error ? e.cause.message : String(e);
  const dial = /client error \(Connect\): (.*)$/.exec(cause);
  if (dial) {
    return `connection error: desc = "transport: Error while dialing: dial unix ${socket}: ${
      dial[1]
    }"`;
  }
  return `error reading from server: ${cause}`;
}

/** A connection to one CRI endpoint, shared by the runtime and image services when they agree. */
export class CriConnection {
  readonly endpoint: string;
  readonly #socket: string;
  readonly #url: string;
  readonly #client: Deno.HttpClient;
  readonly #calls = new Set<Call>();
  #closed = false;

  constructor(opts: ConnectionOptions) {
    this.endpoint = opts.endpoint;
    this.#socket = criSocketPath(opts.endpoint);
    // The authority is not read by CRI runtimes; grpc-go's client sends "localhost" too.
    this.#url = "http://localhost";
    this.#client = Deno.createHttpClient({
      proxy: { transport: "unix", path: this.#socket },
      http1: false,
      http2: true,
    });
  }

  /** Makes one unary call; rejects with {@link CriError}. */
  async unary<Req, Res>(
    method: CriMethod<Req, Res>,
    request: Req,
    opts: CallOptions = {},
  ): Promise<Res> {
    const rpc = rpcName(method.path);
    const call = this.#open(rpc, opts);
    try {
      const res = await this.#send(method, request, call, opts.timeoutMs);
      if (res === undefined) {
        throw new CriError(rpc, GrpcCode.INTERNAL, "server sent OK status without a response");
      }
      // One read of the whole body (message and trailers): cheaper than reading it as a stream.
      return decode(method, unaryMessage(await res.bytes(), MAX_MESSAGE_SIZE));
    } catch (e) {
      throw call.error(rpc, e, this.#socket);
    } finally {
      this.#end(call);
    }
  }

  /** Opens a server stream; iterate it, and abort `signal` to end it. */
  async *stream<Req, Res>(
    method: CriMethod<Req, Res>,
    request: Req,
    opts: CallOptions = {},
  ): AsyncGenerator<Res> {
    const rpc = rpcName(method.path);
    if (opts.signal?.aborted) return;
    const call = this.#open(rpc, opts);
    try {
      let reader: GrpcFrameReader | undefined;
      try {
        const res = await this.#send(method, request, call, opts.timeoutMs);
        if (res !== undefined) reader = call.read(res);
      } catch (e) {
        if (call.reason === CANCELED || call.reason === CLOSED) return;
        throw call.error(rpc, e, this.#socket);
      }
      while (reader !== undefined) {
        let message: Uint8Array | undefined;
        try {
          message = await reader.next();
        } catch (e) {
          if (call.reason === CANCELED || call.reason === CLOSED) return;
          throw call.error(rpc, e, this.#socket);
        }
        if (message === undefined) return;
        yield decode(method, message);
      }
    } finally {
      this.#end(call);
      // A consumer that stops early ends the stream on the runtime's side too.
      call.abort(CANCELED);
    }
  }

  /** Ends open streams and calls, and closes the connection; idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const call of this.#calls) call.abort(CLOSED);
    this.#calls.clear();
    this.#client.close();
  }

  #open(rpc: string, opts: CallOptions): Call {
    if (this.#closed) throw new CriError(rpc, GrpcCode.UNAVAILABLE, "the connection is closed");
    if (opts.signal?.aborted) {
      throw new CriError(rpc, GrpcCode.CANCELLED, "context canceled", {
        cause: opts.signal.reason,
      });
    }
    const call = new Call(opts.signal, opts.timeoutMs);
    this.#calls.add(call);
    return call;
  }

  #end(call: Call): void {
    call.done();
    this.#calls.delete(call);
  }

  /**
   * Sends the request; resolves with the response, or undefined when the headers ended the call
   * with OK. Throws the status the headers carry.
   */
  async #send<Req, Res>(
    method: CriMethod<Req, Res>,
    request: Req,
    call: Call,
    timeoutMs: number | undefined,
  ): Promise<Response | undefined> {
    let message: Uint8Array;
    try {
      message = method.request.encode(request).finish();
    } catch (e) {
      throw new GrpcStatusError(GrpcCode.INTERNAL, `grpc: error while marshaling: ${errorText(e)}`);
    }
    if (message.length > MAX_MESSAGE_SIZE) {
      throw new GrpcStatusError(
        GrpcCode.RESOURCE_EXHAUSTED,
        `trying to send message larger than max (${message.length} vs. ${MAX_MESSAGE_SIZE})`,
      );
    }
    const headers = timeoutMs === undefined
      ? HEADERS
      : { ...HEADERS, "grpc-timeout": grpcTimeout(timeoutMs) };
    const res = await fetch(this.#url + method.path, {
      method: "POST",
      client: this.#client,
      headers,
      body: grpcFrame(message),
      signal: call.ctl.signal,
    });
    const status = headerStatus(res.status, res.headers);
    if (status !== undefined || res.headers.has("grpc-status") || res.body === null) {
      await res.body?.cancel().catch(() => {});
      if (status !== undefined) throw status;
      return undefined;
    }
    return res;
  }
}
