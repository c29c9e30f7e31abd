/**
 * @module
 * One unary gRPC call over a new cleartext TCP connection (HTTP/2 with prior knowledge), as
 * the kubelet's gRPC probe makes it: upstream dials with grpc-go's `WithBlock`, so the dial
 * retries with grpc-go's backoff until the server's SETTINGS come (the connection is ready) or
 * the deadline passes, and only then is the call sent; the two failures are told apart in the
 * probe's output. The client side of what `_h2_connection.ts` serves, cut down to one stream:
 * push off, PING answered, the peer's SETTINGS acknowledged, its flow-control window kept and
 * the reply's DATA credited back. No node:http2 (grpc-js): that costs about 7 MiB and can abort
 * the process on some GOAWAYs (denoland/deno#36788).
 */

import { concatBytes } from "../util/bytes.ts";
import { type Clock, realClock } from "../util/clock.ts";
import { errorText } from "../util/errors.ts";
import {
  DEFAULT_WINDOW,
  encodeFrame,
  ErrorCode,
  errorCodeName,
  Flag,
  type Frame,
  FrameParser,
  FrameType,
  PREFACE,
  Setting,
  settingsPayload,
  unpadded,
  words,
} from "./_h2_frames.ts";
import { encodeHeaderBlock, HpackDecoder } from "./_hpack.ts";
import {
  FRAME_PREFIX_BYTES,
  GrpcCode,
  grpcFrame,
  GrpcStatusError,
  grpcTimeout,
  headerStatus,
  unaryMessage,
} from "./_grpc_wire.ts";

/** grpc-go's default largest message a client receives: 4 MiB. */
const MAX_RECEIVE_MESSAGE_BYTES = 4 * 1024 * 1024;
/** grpc-go's connection backoff (backoff.DefaultConfig): base 1 s, factor 1.6, jitter 0.2. */
const BACKOFF = { baseMs: 1000, factor: 1.6, jitter: 0.2, maxMs: 120_000 } as const;
/** The one stream a call uses. */
const STREAM = 1;

/** What {@link h2cUnary} needs. */
export interface H2cUnaryOptions {
  readonly hostname: string;
  readonly port: number;
  /** The `:authority` header: `host:port`, an IPv6 host in brackets. */
  readonly authority: string;
  /** The method's path, e.g. "/grpc.health.v1.Health/Check". */
  readonly path: string;
  /** The request message, encoded. */
  readonly message: Uint8Array;
  readonly userAgent: string;
  /** The whole call's time, dial included; sent as grpc-timeout for what is left. */
  readonly timeoutMs: number;
  /** Aborting rejects with its reason. */
  readonly signal?: AbortSignal;
  /** The backoff's random draw in [0, 1). @default Math.random */
  readonly random?: () => number;
  /** The backoff's waits. @default the wall clock */
  readonly clock?: Clock;
}

/**
 * How the call went: `unconnected` when no connection became ready before the deadline (`error`
 * is then grpc-go's "context deadline exceeded"), else the reply message or the call's status.
 */
export type H2cUnaryResult =
  | { readonly kind: "unconnected"; readonly error: string }
  | { readonly kind: "reply"; readonly message: Uint8Array }
  | { readonly kind: "status"; readonly status: GrpcStatusError };

/** Dials `hostname:port` until ready and makes the call; rejects only when `signal` aborts. */
export async function h2cUnary(opts: H2cUnaryOptions): Promise<H2cUnaryResult> {
  opts.signal?.throwIfAborted();
  const deadline = performance.now() + opts.timeoutMs;
  const timer = new AbortController();
  const timeout = setTimeout(() => timer.abort(), opts.timeoutMs);
  const signal = opts.signal ? AbortSignal.any([opts.signal, timer.signal]) : timer.signal;
  try {
    const conn = await dial(opts, signal);
    if (conn === undefined) {
      opts.signal?.throwIfAborted();
      return { kind: "unconnected", error: "context deadline exceeded" };
    }
    try {
      return await call(conn, opts, deadline, signal);
    } finally {
      conn.close();
    }
  } finally {
    clearTimeout(timeout);
  }
}

/** Dials until a connection is ready; undefined when `signal` aborted first. */
async function dial(opts: H2cUnaryOptions, signal: AbortSignal): Promise<H2cConn | undefined> {
  const random = opts.random ?? Math.random;
  let delay: number = BACKOFF.baseMs;
  while (!signal.aborted) {
    const conn = await H2cConn.connect(opts.hostname, opts.port, signal);
    if (conn !== undefined) return conn;
    const wait = delay * (1 + BACKOFF.jitter * (random() * 2 - 1));
    delay = Math.min(delay * BACKOFF.factor, BACKOFF.maxMs);
    await (opts.clock ?? realClock).sleep(wait, signal).catch(() => {});
  }
  return undefined;
}

/** Runs `fn` when `signal` aborts, at once if it has; the returned function stops that. */
function onAbort(signal: AbortSignal, fn: () => void): () => void {
  if (signal.aborted) {
    fn();
    return () => {};
  }
  signal.addEventListener("abort", fn, { once: true });
  return () => signal.removeEventListener("abort", fn);
}

/** Sends the request on stream 1 and reads its reply; deadline and abort become statuses. */
async function call(
  conn: H2cConn,
  opts: H2cUnaryOptions,
  deadline: number,
  signal: AbortSignal,
): Promise<H2cUnaryResult> {
  const remaining = Math.max(1, Math.ceil(deadline - performance.now()));
  const block = encodeHeaderBlock([
    [":method", "POST"],
    [":scheme", "http"],
    [":path", opts.path],
    [":authority", opts.authority],
    ["content-type", "application/grpc"],
    ["user-agent", opts.userAgent],
    ["te", "trailers"],
    ["grpc-timeout", grpcTimeout(remaining)],
  ]);
  const stop = onAbort(signal, () => conn.close());
  try {
    const headers = encodeFrame(FrameType.HEADERS, Flag.END_HEADERS, STREAM, block);
    const status = await conn.exchange(headers, grpcFrame(opts.message));
    if (status instanceof Uint8Array) return { kind: "reply", message: status };
    return { kind: "status", status };
  } catch (e) {
    opts.signal?.throwIfAborted();
    if (signal.aborted) {
      return {
        kind: "status",
        status: new GrpcStatusError(GrpcCode.DEADLINE_EXCEEDED, "context deadline exceeded"),
      };
    }
    // A malformed reply (its message, its header block) is the call's status, as grpc-go's.
    if (e instanceof GrpcStatusError) return { kind: "status", status: e };
    return {
      kind: "status",
      status: new GrpcStatusError(
        GrpcCode.UNAVAILABLE,
        `connection error: desc = "error reading from server: ${errorText(e)}"`,
      ),
    };
  } finally {
    stop();
  }
}

/** grpc-go's codes for a stream reset (http2ErrConvTab). */
function resetCode(code: number): number {
  switch (code) {
    case ErrorCode.FLOW_CONTROL_ERROR:
    case ErrorCode.ENHANCE_YOUR_CALM:
      return GrpcCode.RESOURCE_EXHAUSTED;
    case ErrorCode.REFUSED_STREAM:
      return GrpcCode.UNAVAILABLE;
    case ErrorCode.CANCEL:
      return GrpcCode.CANCELLED;
    case ErrorCode.INADEQUATE_SECURITY:
      return GrpcCode.PERMISSION_DENIED;
    case ErrorCode.NO_ERROR:
    case ErrorCode.PROTOCOL_ERROR:
    case ErrorCode.INTERNAL_ERROR:
    case ErrorCode.SETTINGS_TIMEOUT:
    case ErrorCode.STREAM_CLOSED:
    case ErrorCode.FRAME_SIZE_ERROR:
    case ErrorCode.COMPRESSION_ERROR:
    case ErrorCode.CONNECT_ERROR:
    case ErrorCode.HTTP_1_1_REQUIRED:
      return GrpcCode.INTERNAL;
    default:
      return GrpcCode.UNKNOWN;
  }
}

/** One client connection: frames in and out. */
class H2cConn {
  readonly #conn: Deno.TcpConn;
  readonly #reader: ReadableStreamDefaultReader<Uint8Array>;
  readonly #writer: WritableStreamDefaultWriter<Uint8Array>;
  readonly #parser = new FrameParser({ preface: false });
  readonly #hpack = new HpackDecoder();
  /** The peer's windows for what we send: the connection's and our stream's. */
  #connWindow = DEFAULT_WINDOW;
  #streamWindow = DEFAULT_WINDOW;
  /** The peer's SETTINGS_INITIAL_WINDOW_SIZE as last announced. */
  #initialWindow = DEFAULT_WINDOW;
  #closed = false;

  private constructor(conn: Deno.TcpConn) {
    this.#conn = conn;
    this.#reader = conn.readable.getReader();
    this.#writer = conn.writable.getWriter();
  }

  /**
   * A ready connection: the preface and our SETTINGS sent, the server's SETTINGS read and
   * acknowledged. Undefined when the dial failed, the server ended the connection first, or
   * `signal` aborted.
   */
  static async connect(
    hostname: string,
    port: number,
    signal: AbortSignal,
  ): Promise<H2cConn | undefined> {
    let tcp: Deno.TcpConn;
    try {
      tcp = await Deno.connect({ hostname, port, signal });
    } catch {
      return undefined;
    }
    const conn = new H2cConn(tcp);
    const stop = onAbort(signal, () => conn.close());
    try {
      const settings = settingsPayload([[Setting.ENABLE_PUSH, 0]]);
      const hello = new Uint8Array(PREFACE.length + 9 + settings.length);
      hello.set(PREFACE);
      hello.set(encodeFrame(FrameType.SETTINGS, 0, 0, settings), PREFACE.length);
      await conn.write(hello);
      for (;;) {
        const f = await conn.#next();
        if (f === undefined) break;
        if (f.type === FrameType.SETTINGS && !(f.flags & Flag.ACK) && f.streamId === 0) {
          await conn.#settings(f);
          return conn;
        }
        // A server's first frame must be SETTINGS (RFC 9113 section 3.4).
        break;
      }
    } catch {
      // The server ended the connection or spoke something else (or the dial was aborted).
    } finally {
      stop();
    }
    conn.close();
    return undefined;
  }

  async write(bytes: Uint8Array): Promise<void> {
    await this.#writer.write(bytes);
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.#conn.close();
    } catch {
      // Already closed by the peer.
    }
  }

  /**
   * Sends the `headers` frame and `body` (as the peer's windows allow, with the headers in one
   * write) ending stream 1, and reads the stream's reply: the one message, or the status that
   * ended it. Throws when the connection ends early.
   */
  async exchange(headers: Uint8Array, body: Uint8Array): Promise<Uint8Array | GrpcStatusError> {
    let unsent = await this.#sendData(body, headers);
    let headersSeen = false;
    const data: Uint8Array[] = [];
    let dataBytes = 0;
    for (;;) {
      const f = await this.#next();
      if (f === undefined) throw new Error("EOF");
      if (f.type === FrameType.HEADERS && f.streamId === STREAM) {
        const { headers, httpStatus } = await this.#headerBlock(f);
        const ends = (f.flags & Flag.END_STREAM) !== 0;
        if (!headersSeen) {
          headersSeen = true;
          const status = headerStatus(httpStatus, headers);
          if (status !== undefined) return status;
          if (!ends) continue;
        }
        // Trailers, or a trailers-only reply: the status ends the call.
        if (!headers.has("grpc-status")) return noTrailers();
        return headerStatus(200, headers) ??
          unaryMessage(concatBytes(data), MAX_RECEIVE_MESSAGE_BYTES);
      }
      switch (f.type) {
        case FrameType.DATA: {
          if (f.streamId !== STREAM) break;
          data.push(unpadded(f));
          const before = dataBytes;
          dataBytes += data.at(-1)!.length;
          if (before < FRAME_PREFIX_BYTES && dataBytes >= FRAME_PREFIX_BYTES) {
            // The length the message's prefix declares, as grpc-go checks it: once, when the
            // prefix is whole.
            const prefix = concatBytes(data).subarray(0, FRAME_PREFIX_BYTES);
            const length = new DataView(prefix.buffer, prefix.byteOffset, 5).getUint32(1);
            if (length > MAX_RECEIVE_MESSAGE_BYTES) {
              return new GrpcStatusError(
                GrpcCode.RESOURCE_EXHAUSTED,
                `grpc: received message larger than max (${length} vs. ${MAX_RECEIVE_MESSAGE_BYTES})`,
              );
            }
          }
          if (f.payload.length > 0) {
            const credit = words(f.payload.length);
            await this.write(concatBytes([
              encodeFrame(FrameType.WINDOW_UPDATE, 0, 0, credit),
              encodeFrame(FrameType.WINDOW_UPDATE, 0, STREAM, credit),
            ]));
          }
          if (f.flags & Flag.END_STREAM) return noTrailers();
          break;
        }
        case FrameType.RST_STREAM: {
          if (f.streamId !== STREAM) break;
          const code = f.payload.length === 4
            ? new DataView(f.payload.buffer, f.payload.byteOffset, 4).getUint32(0)
            : ErrorCode.PROTOCOL_ERROR;
          return new GrpcStatusError(
            resetCode(code),
            `stream terminated by RST_STREAM with error code: ${errorCodeName(code)}`,
          );
        }
        case FrameType.SETTINGS:
          if (!(f.flags & Flag.ACK)) await this.#settings(f);
          unsent = await this.#sendData(unsent);
          break;
        case FrameType.WINDOW_UPDATE:
          if (f.payload.length !== 4) break;
          if (f.streamId === 0) this.#connWindow += word(f.payload);
          else if (f.streamId === STREAM) this.#streamWindow += word(f.payload);
          unsent = await this.#sendData(unsent);
          break;
        case FrameType.PING:
          if (!(f.flags & Flag.ACK)) {
            await this.write(encodeFrame(FrameType.PING, Flag.ACK, 0, f.payload));
          }
          break;
        case FrameType.GOAWAY:
          if (f.payload.length >= 8 && word(f.payload) >= STREAM) break;
          // grpc-go retries such a stream once on a new connection; a probe is not retried.
          return new GrpcStatusError(
            GrpcCode.UNAVAILABLE,
            "the stream is rejected because server is draining the connection",
          );
        case FrameType.CONTINUATION:
          throw new Error("CONTINUATION without a header block");
      }
    }
  }

  /** The fields of the header block `first` opens, read to its END_HEADERS. */
  async #headerBlock(first: Frame): Promise<{ headers: Headers; httpStatus: number }> {
    const parts = [unpadded(first)];
    let f = first;
    while (!(f.flags & Flag.END_HEADERS)) {
      const next = await this.#next();
      if (next === undefined) throw new Error("EOF");
      if (next.type !== FrameType.CONTINUATION || next.streamId !== first.streamId) {
        throw new Error("header block interrupted by another frame");
      }
      parts.push(next.payload);
      f = next;
    }
    const headers = new Headers();
    let httpStatus = 0;
    for (const [name, value] of this.#hpack.decode(concatBytes(parts)).fields) {
      if (name === ":status") httpStatus = Number(value);
      else if (!name.startsWith(":")) headers.append(name, value);
    }
    return { headers, httpStatus };
  }

  /**
   * Sends what the windows allow of `rest`, the last frame ending the stream, after `first`
   * (the HEADERS frame) in the same write.
   */
  async #sendData(
    rest: Uint8Array | undefined,
    first?: Uint8Array,
  ): Promise<Uint8Array | undefined> {
    const frames = first ? [first] : [];
    while (rest !== undefined) {
      const n = Math.min(rest.length, this.#connWindow, this.#streamWindow, 16_384);
      if (n <= 0 && rest.length > 0) break;
      const last = n === rest.length;
      this.#connWindow -= n;
      this.#streamWindow -= n;
      frames.push(
        encodeFrame(FrameType.DATA, last ? Flag.END_STREAM : 0, STREAM, rest.subarray(0, n)),
      );
      rest = last ? undefined : rest.subarray(n);
    }
    if (frames.length > 0) await this.write(concatBytes(frames));
    return rest;
  }

  /** Takes the peer's SETTINGS (its initial stream window) and acknowledges them. */
  async #settings(f: Frame): Promise<void> {
    const view = new DataView(f.payload.buffer, f.payload.byteOffset, f.payload.length);
    for (let at = 0; at + 6 <= f.payload.length; at += 6) {
      if (view.getUint16(at) === Setting.INITIAL_WINDOW_SIZE) {
        // A change applies to the open stream by its difference (RFC 9113 section 6.9.2).
        const value = view.getUint32(at + 2);
        this.#streamWindow += value - this.#initialWindow;
        this.#initialWindow = value;
      }
    }
    await this.write(encodeFrame(FrameType.SETTINGS, Flag.ACK, 0));
  }

  /** The next frame, or undefined at the end of the connection. */
  async #next(): Promise<Frame | undefined> {
    for (;;) {
      const f = this.#parser.next();
      if (f !== undefined) return f;
      const { value, done } = await this.#reader.read();
      if (done) return undefined;
      this.#parser.push(value);
    }
  }
}

/** A 31-bit value at the start of a payload (a window increment, a stream id). */
function word(payload: Uint8Array): number {
  return new DataView(payload.buffer, payload.byteOffset, 4).getUint32(0) & 0x7fffffff;
}

/** grpc-go's status for a stream that ended without trailers. */
function noTrailers(): GrpcStatusError {
  return new GrpcStatusError(
    GrpcCode.INTERNAL,
    "server closed the stream without sending trailers",
  );
}
