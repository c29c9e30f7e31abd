/**
 * @module
 * A gRPC server on a unix socket, for the services the kubelet serves to plugins and agents
 * (device plugin Registration on `device-plugins/kubelet.sock`, PodResourcesLister on
 * `pod-resources/kubelet.sock`). It serves generated service definitions (ts-proto's generic
 * definitions, as {@link criMethods} reads them) with unary and server-streaming handlers, and
 * answers as grpc-go's server does: the same status codes and wording for unknown methods,
 * oversize or malformed requests and deadlines. Upstream uses grpc-go (`grpc.NewServer`) in
 * pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go and pkg/kubelet/apis/podresources.
 *
 * HTTP/2 is our own ({@link ./_h2_connection.ts}): Deno.serve speaks h2c on a unix socket but
 * cannot send the trailers gRPC ends a response with, and node:http2 (grpc-js) costs about
 * 7 MiB and can abort the process on some GOAWAYs (denoland/deno#36788).
 */

import { dirname } from "node:path";
import type { Logger } from "../klog/klog.ts";
import { type Clock, realClock } from "../util/clock.ts";
import { errorText } from "../util/errors.ts";
import { type Codec, criMethods, type ServiceDefinition } from "./connection.ts";
import {
  encodeGrpcMessage,
  FRAME_PREFIX_BYTES,
  GrpcCode,
  grpcFrame,
  GrpcStatusError,
  parseGrpcTimeout,
} from "./_grpc_wire.ts";
import { H2Connection, type H2Stream, type StreamEvents } from "./_h2_connection.ts";
import type { HeaderField } from "./_hpack.ts";

export { GrpcCode, GrpcStatusError };

/** grpc-go's default largest request message a server accepts: 4 MiB. */
export const DEFAULT_MAX_RECEIVE_MESSAGE_BYTES = 4 * 1024 * 1024;

/** What {@link GrpcServer.listen} needs. */
export interface GrpcServerOptions {
  /** The unix socket to serve; its directory is made and a stale socket file removed. */
  readonly path: string;
  /** Protocol errors of clients are logged at V(4). */
  readonly logger?: Logger;
  /** The largest request message; larger ones fail ResourceExhausted. @default 4 MiB */
  readonly maxReceiveMessageBytes?: number;
  /** Deadlines from `grpc-timeout` and the close grace period. @default the wall clock */
  readonly clock?: Clock;
  /** How long {@link GrpcServer.close} lets unary calls finish. @default 1000 */
  readonly closeGracePeriodMs?: number;
}

/** What a handler gets besides the request. */
export interface CallContext {
  /**
   * Aborted when the client cancels the call, its deadline (`grpc-timeout`) passes or the
   * server closes; the reason is a {@link GrpcStatusError} (Canceled, DeadlineExceeded,
   * Unavailable).
   */
  readonly signal: AbortSignal;
  /** The request's headers, without HTTP/2 pseudo-headers. */
  readonly metadata: Headers;
}

/** A unary method's handler. */
export type UnaryHandler<Req, Res> = (request: Req, ctx: CallContext) => Res | Promise<Res>;
/** A server-streaming method's handler: the messages to send, in order. */
export type ServerStreamHandler<Req, Res> = (request: Req, ctx: CallContext) => AsyncIterable<Res>;

type Message<C> = C extends Codec<infer T> ? T : never;

/** Handlers for every method of a service, under the generated (camelCase) keys. */
export type ServiceHandlers<D extends ServiceDefinition> = {
  readonly [K in keyof D["methods"]]: D["methods"][K]["responseStream"] extends true
    ? ServerStreamHandler<
      Message<D["methods"][K]["requestType"]>,
      Message<D["methods"][K]["responseType"]>
    >
    : UnaryHandler<
      Message<D["methods"][K]["requestType"]>,
      Message<D["methods"][K]["responseType"]>
    >;
};

/** One registered method. */
interface Route {
  readonly request: Codec<unknown>;
  readonly response: Codec<unknown>;
  readonly responseStream: boolean;
  readonly handler: (request: unknown, ctx: CallContext) => unknown;
}

const CANCELED = () => new GrpcStatusError(GrpcCode.CANCELLED, "context canceled");
const DEADLINE = () => new GrpcStatusError(GrpcCode.DEADLINE_EXCEEDED, "context deadline exceeded");
const STOPPED = () =>
  new GrpcStatusError(GrpcCode.UNAVAILABLE, "grpc: the server has been stopped");

/** A gRPC server listening on a unix socket (or on a listener given, {@link GrpcServer.serve}). */
export class GrpcServer {
  /** Where it listens: the socket's path, or "host:port" on TCP. */
  readonly path: string;
  readonly #listener: Deno.Listener;
  /** The socket file to remove at close; none for TCP. */
  readonly #socketFile?: string;
  readonly #routes = new Map<string, Route>();
  readonly #services = new Set<string>();
  readonly #connections = new Set<H2Connection>();
  readonly #calls = new Set<ServerCall>();
  readonly #opts: GrpcServerOptions;
  #closing?: Promise<void>;
  /** The accept loop; it ends once the listener is closed. */
  readonly #accepting: Promise<void>;

  private constructor(opts: GrpcServerOptions, listener: Deno.Listener, socketFile?: string) {
    this.#opts = opts;
    const addr = listener.addr;
    this.path = addr.transport === "tcp" ? `${addr.hostname}:${addr.port}` : opts.path;
    this.#socketFile = socketFile;
    this.#listener = listener;
    this.#accepting = this.#accept();
  }

  /** Listens on `opts.path`, replacing a stale socket file. */
  static async listen(opts: GrpcServerOptions): Promise<GrpcServer> {
    await Deno.mkdir(dirname(opts.path), { recursive: true });
    await Deno.remove(opts.path).catch((e) => {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    });
    const listener = Deno.listen({ transport: "unix", path: opts.path });
    return new GrpcServer(opts, listener, opts.path);
  }

  /**
   * Serves on a listener the caller made, a TCP one too (tests serve pods' health services
   * so); a unix socket's file is left to the caller.
   */
  static serve(listener: Deno.Listener, opts: Omit<GrpcServerOptions, "path"> = {}): GrpcServer {
    const addr = listener.addr;
    const path = addr.transport === "unix" ? addr.path : "";
    return new GrpcServer({ ...opts, path }, listener);
  }

  /** The TCP port it listens on; undefined on a unix socket. */
  get port(): number | undefined {
    const addr = this.#listener.addr;
    return addr.transport === "tcp" ? addr.port : undefined;
  }

  /**
   * Serves a service; a method without a handler answers Unimplemented, as grpc-go's generated
   * Unimplemented server does. Throws for a service already registered or a client-streaming
   * method.
   */
  register<D extends ServiceDefinition>(
    definition: D,
    handlers: Partial<ServiceHandlers<D>>,
  ): void {
    if (this.#services.has(definition.fullName)) {
      throw new Error(`Cannot register service '${definition.fullName}': it is already registered`);
    }
    const methods = criMethods(definition);
    for (const [key, m] of Object.entries(definition.methods)) {
      if ((m as { requestStream?: boolean }).requestStream) {
        throw new Error(
          `Cannot register '${definition.fullName}/${m.name}': client streaming is not supported`,
        );
      }
      const method = methods[key]!;
      this.#routes.set(method.path, {
        request: method.request,
        response: method.response,
        responseStream: method.responseStream,
        handler: (handlers as Record<string, Route["handler"] | undefined>)[key] ??
          (() => {
            throw status(GrpcCode.UNIMPLEMENTED, `method ${m.name} not implemented`);
          }),
      });
    }
    this.#services.add(definition.fullName);
  }

  /**
   * Graceful stop: no new connections, a GOAWAY on each, server streams ended Unavailable,
   * unary calls given the grace period, then every connection closed and the socket removed.
   * Idempotent.
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  async #close(): Promise<void> {
    try {
      this.#listener.close();
    } catch {
      // Already closed.
    }
    // Deno unlinks a unix socket when its listener is dropped, which a pending accept delays
    // past close(): that unlink must not remove a socket made at the same path after us.
    await this.#accepting;
    for (const c of this.#connections) c.goAway();
    for (const call of this.#calls) if (call.streaming) call.stop();
    const clock = this.#opts.clock ?? realClock;
    const grace = new AbortController();
    const idle = Promise.all([...this.#connections].map((c) => c.closed));
    await Promise.race([
      idle,
      clock.sleep(this.#opts.closeGracePeriodMs ?? 1000, grace.signal).catch(() => {}),
    ]);
    grace.abort();
    for (const call of this.#calls) call.stop();
    for (const c of this.#connections) c.close();
    await Promise.all([...this.#connections].map((c) => c.closed));
    if (this.#socketFile !== undefined) await Deno.remove(this.#socketFile).catch(() => {});
  }

  async #accept(): Promise<void> {
    for (;;) {
      let conn: Deno.Conn;
      try {
        conn = await this.#listener.accept();
      } catch (e) {
        if (this.#closing === undefined) {
          this.#opts.logger?.error(e, "gRPC server stopped accepting connections", {
            path: this.path,
          });
        }
        return;
      }
      if (this.#closing !== undefined) {
        conn.close();
        continue;
      }
      const h2 = new H2Connection({
        conn,
        logger: this.#opts.logger,
        onStream: (stream) => new ServerCall(this.#callOptions, stream),
      });
      this.#connections.add(h2);
      void h2.closed.then(() => this.#connections.delete(h2));
    }
  }

  readonly #callOptions: CallOptions = {
    routes: this.#routes,
    services: this.#services,
    calls: this.#calls,
    maxReceive: () => this.#opts.maxReceiveMessageBytes ?? DEFAULT_MAX_RECEIVE_MESSAGE_BYTES,
    clock: () => this.#opts.clock ?? realClock,
  };
}

interface CallOptions {
  readonly routes: ReadonlyMap<string, Route>;
  readonly services: ReadonlySet<string>;
  readonly calls: Set<ServerCall>;
  readonly maxReceive: () => number;
  readonly clock: () => Clock;
}

/** One call: checks its headers, collects its request, runs its handler and answers. */
class ServerCall implements StreamEvents {
  readonly #stream: H2Stream;
  readonly #opts: CallOptions;
  readonly #ctl = new AbortController();
  #route?: Route;
  #chunks: Uint8Array[] = [];
  #size = 0;
  /** The request message's length, once its prefix came. */
  #length?: number;
  #headersSent = false;
  /** The status is sent (or the stream is gone): nothing more is written. */
  #done = false;

  constructor(opts: CallOptions, stream: H2Stream) {
    this.#opts = opts;
    this.#stream = stream;
    const early = this.#start();
    if (early !== undefined) {
      const [httpStatus, status] = early;
      this.#finish(status, httpStatus);
      return;
    }
    opts.calls.add(this);
    stream.signal.addEventListener("abort", () => this.#abort(CANCELED()), { once: true });
  }

  /** Whether the method streams its response (ended at once when the server closes). */
  get streaming(): boolean {
    return this.#route?.responseStream ?? false;
  }

  /** The server is closing: ends the call Unavailable. */
  stop(): void {
    const status = STOPPED();
    if (this.#abort(status)) this.#finish(status);
  }

  /** An early answer, as grpc-go checks a request's headers; undefined to go on. */
  #start(): [number, GrpcStatusError] | undefined {
    const h = new Map<string, string[]>();
    for (const [name, value] of this.#stream.headers) {
      const list = h.get(name);
      if (list) list.push(value);
      else h.set(name, [value]);
    }
    const one = (name: string) => h.get(name)?.[0];
    const authorities = h.get(":authority")?.length ?? 0;
    const hosts = h.get("host")?.length ?? 0;
    if (authorities > 1 || hosts > 1) {
      return [
        400,
        status(
          GrpcCode.INTERNAL,
          `num values of :authority: ${authorities}, num values of host: ${hosts}, both must only have 1 value as per HTTP/2 spec`,
        ),
      ];
    }
    const type = one("content-type") ?? "";
    if (!/^application\/grpc(?:[+;]|$)/.test(type)) {
      return [
        415,
        status(GrpcCode.INVALID_ARGUMENT, `invalid gRPC request content-type "${type}"`),
      ];
    }
    let timeoutMs: number | undefined;
    const timeout = one("grpc-timeout");
    if (timeout !== undefined) {
      try {
        timeoutMs = parseGrpcTimeout(timeout);
      } catch (e) {
        return [400, status(GrpcCode.INTERNAL, `malformed grpc-timeout: ${errorText(e)}`)];
      }
    }
    if (authorities + hosts === 0) {
      return [400, status(GrpcCode.INTERNAL, "no host or :authority header present")];
    }
    const method = one(":method") ?? "";
    if (method !== "POST") {
      return [
        405,
        status(
          GrpcCode.INTERNAL,
          `Received a HEADERS frame with :method "${method}" which should be POST`,
        ),
      ];
    }
    if (timeoutMs === 0) return [200, DEADLINE()];
    const path = one(":path") ?? "";
    const route = this.#opts.routes.get(path);
    if (route === undefined) return [200, unknownMethod(path, this.#opts.services)];
    const encoding = one("grpc-encoding");
    if (encoding !== undefined && encoding !== "identity") {
      return [
        200,
        status(
          GrpcCode.UNIMPLEMENTED,
          `grpc: Decompressor is not installed for grpc-encoding "${encoding}"`,
        ),
      ];
    }
    this.#route = route;
    if (timeoutMs !== undefined) {
      this.#opts.clock().sleep(timeoutMs, this.#ctl.signal).then(() => {
        const status = DEADLINE();
        if (this.#abort(status)) this.#finish(status);
      }, () => {});
    }
    return undefined;
  }

  data(chunk: Uint8Array): void {
    if (this.#done || this.#route === undefined) return;
    this.#chunks.push(chunk);
    this.#size += chunk.length;
    if (this.#length === undefined && this.#size >= FRAME_PREFIX_BYTES) {
      const head = this.#joined();
      const flag = head[0]!;
      if (flag !== 0) {
        return this.#fail(status(
          GrpcCode.INTERNAL,
          flag === 1
            ? "grpc: compressed flag set with identity or empty encoding"
            : `grpc: received unexpected payload format ${flag}`,
        ));
      }
      const length = new DataView(head.buffer, head.byteOffset).getUint32(1);
      const max = this.#opts.maxReceive();
      if (length > max) {
        return this.#fail(status(
          GrpcCode.RESOURCE_EXHAUSTED,
          `grpc: received message larger than max (${length} vs. ${max})`,
        ));
      }
      this.#length = length;
    }
    if (this.#length !== undefined && this.#size >= 2 * FRAME_PREFIX_BYTES + this.#length) {
      this.#fail(status(
        GrpcCode.INTERNAL,
        "cardinality violation: received multiple request messages for non-client-streaming RPC",
      ));
    }
  }

  end(): void {
    if (this.#done || this.#route === undefined) return;
    if (this.#size === 0) {
      return this.#fail(status(
        GrpcCode.INTERNAL,
        "cardinality violation: received no request message from non-client-streaming RPC",
      ));
    }
    if (this.#length === undefined || this.#size !== FRAME_PREFIX_BYTES + this.#length) {
      return this.#fail(status(GrpcCode.INTERNAL, "unexpected EOF"));
    }
    const message = this.#joined().subarray(FRAME_PREFIX_BYTES);
    this.#chunks = [];
    let request: unknown;
    try {
      request = this.#route.request.decode(message);
    } catch (e) {
      return this.#fail(status(
        GrpcCode.INTERNAL,
        `grpc: failed to unmarshal the received message: ${errorText(e)}`,
      ));
    }
    void this.#run(this.#route, request);
  }

  async #run(route: Route, request: unknown): Promise<void> {
    const ctx: CallContext = { signal: this.#ctl.signal, metadata: metadata(this.#stream.headers) };
    try {
      if (route.responseStream) {
        const messages = route.handler(request, ctx) as AsyncIterable<unknown>;
        for await (const message of messages) {
          if (this.#done) break;
          await this.#send(route, message);
        }
      } else {
        const message = await route.handler(request, ctx);
        if (!this.#done) await this.#send(route, message);
      }
      this.#fail(status(GrpcCode.OK, ""));
    } catch (e) {
      this.#fail(e instanceof GrpcStatusError ? e : status(GrpcCode.UNKNOWN, errorText(e)));
    }
  }

  async #send(route: Route, message: unknown): Promise<void> {
    let bytes: Uint8Array;
    try {
      bytes = route.response.encode(message).finish();
    } catch (e) {
      throw status(GrpcCode.INTERNAL, `grpc: error while marshaling: ${errorText(e)}`);
    }
    if (!this.#headersSent) {
      this.#headersSent = true;
      this.#stream.respond([[":status", "200"], ["content-type", "application/grpc"]]);
    }
    await this.#stream.write(grpcFrame(bytes));
  }

  /** Ends the call with `st` unless it is over. */
  #fail(st: GrpcStatusError): void {
    if (this.#abort(st)) this.#finish(st);
  }

  /** Marks the call over and aborts the handler's signal; false if it already was. */
  #abort(reason: GrpcStatusError): boolean {
    if (this.#done) return false;
    this.#done = true;
    this.#chunks = [];
    this.#opts.calls.delete(this);
    this.#ctl.abort(reason);
    return true;
  }

  /** Sends the status: trailers, or a trailers-only response when no headers went. */
  #finish(st: GrpcStatusError, httpStatus = 200): void {
    this.#done = true;
    const trailers: HeaderField[] = [
      ["grpc-status", String(st.code)],
      ["grpc-message", encodeGrpcMessage(st.details)],
    ];
    if (this.#headersSent) {
      this.#stream.end(trailers);
    } else {
      this.#stream.respond(
        [[":status", String(httpStatus)], ["content-type", "application/grpc"], ...trailers],
        true,
      );
    }
  }

  #joined(): Uint8Array {
    if (this.#chunks.length === 1) return this.#chunks[0]!;
    const out = new Uint8Array(this.#size);
    let at = 0;
    for (const c of this.#chunks) {
      out.set(c, at);
      at += c.length;
    }
    this.#chunks = [out];
    return out;
  }
}

function status(code: number, details: string): GrpcStatusError {
  return new GrpcStatusError(code, details);
}

/** grpc-go's answer to a path no registered method has. */
function unknownMethod(path: string, services: ReadonlySet<string>): GrpcStatusError {
  const name = path.startsWith("/") ? path.slice(1) : path;
  const slash = name.lastIndexOf("/");
  if (slash === -1) {
    return status(GrpcCode.UNIMPLEMENTED, `malformed method name: ${JSON.stringify(path)}`);
  }
  const service = name.slice(0, slash);
  const method = name.slice(slash + 1);
  return status(
    GrpcCode.UNIMPLEMENTED,
    services.has(service)
      ? `unknown method ${method} for service ${service}`
      : `unknown service ${service}`,
  );
}

/** The request's headers as metadata; values Headers refuses are left out. */
function metadata(fields: readonly HeaderField[]): Headers {
  const out = new Headers();
  for (const [name, value] of fields) {
    if (name.startsWith(":")) continue;
    try {
      out.append(name, value);
    } catch {
      // Not a valid HTTP header value.
    }
  }
  return out;
}
