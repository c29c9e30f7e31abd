/**
 * @module
 * One HTTP/2 stream of the kubelet's gRPC server: a request's headers, what ends it early, and
 * how its response goes out (headers, flow-controlled DATA, trailers, RST_STREAM) through the
 * connection that owns it ({@link ./_h2_connection.ts}). grpc-go's ServerStream.
 */

import { DEFAULT_WINDOW, ErrorCode, errorCodeName, FrameType, words } from "./_h2_frames.ts";
import type { HeaderField } from "./_hpack.ts";

/** Why a stream ended before the server finished it. */
export class StreamClosedError extends Error {
  override name = "StreamClosedError";
  constructor(message: string, readonly code: number = ErrorCode.CANCEL) {
    super(message);
  }
}

/** What a stream's consumer hears of the request body. */
export interface StreamEvents {
  /** Request DATA, in order; the window is credited back once this returns. */
  data(chunk: Uint8Array): void;
  /** The request ended (END_STREAM). */
  end(): void;
}

/** What a stream needs of its connection. */
export interface StreamSink {
  /** Queues one frame. */
  send(type: number, flags: number, streamId: number, payload?: Uint8Array): void;
  /** Queues a header block. */
  sendHeaders(streamId: number, fields: readonly HeaderField[], end: boolean): void;
  /** Takes up to `want` octets of the send windows; 0 when none is open. */
  reserve(stream: H2Stream, want: number): number;
  /** Resolves at the next window change. */
  windowChange(signal: AbortSignal): Promise<void>;
  /** Resolves once the socket's queue is short enough. */
  drain(signal: AbortSignal): Promise<void>;
  /** Drops a stream that ended. */
  forget(stream: H2Stream): void;
}

/** One request and its response. */
export class H2Stream {
  readonly id: number;
  readonly headers: readonly HeaderField[];
  /** Aborted with a {@link StreamClosedError} when the client resets it or the connection ends. */
  readonly signal: AbortSignal;
  /** The peer's window for our DATA; negative after a SETTINGS change shrinks it. */
  sendWindow: number;
  recvWindow = DEFAULT_WINDOW;
  recvUnacked = 0;
  /** The client sent END_STREAM. */
  remoteEnded = false;
  /** We sent END_STREAM or RST_STREAM. */
  localEnded = false;
  events?: StreamEvents;
  readonly #ctl = new AbortController();
  readonly #conn: StreamSink;

  constructor(conn: StreamSink, id: number, headers: readonly HeaderField[], window: number) {
    this.#conn = conn;
    this.id = id;
    this.headers = headers;
    this.sendWindow = window;
    this.signal = this.#ctl.signal;
  }

  /** Sends the response headers; with `end`, they are all (trailers-only) and the stream ends. */
  respond(fields: readonly HeaderField[], end = false): void {
    if (this.localEnded) return;
    this.#conn.sendHeaders(this.id, fields, end);
    if (end) this.#ended();
  }

  /**
   * Sends `data` as DATA frames as the windows allow; resolves once all is queued for the
   * socket. Rejects with the signal's reason if the stream ends first.
   */
  async write(data: Uint8Array): Promise<void> {
    for (let at = 0; at < data.length;) {
      if (this.signal.aborted) throw this.signal.reason;
      if (this.localEnded) throw new StreamClosedError("stream already ended");
      const n = this.#conn.reserve(this, data.length - at);
      if (n === 0) {
        await this.#conn.windowChange(this.signal);
        continue;
      }
      this.#conn.send(FrameType.DATA, 0, this.id, data.subarray(at, at + n));
      at += n;
      await this.#conn.drain(this.signal);
    }
  }

  /** Sends the trailers, ending the stream. */
  end(trailers: readonly HeaderField[]): void {
    this.respond(trailers, true);
  }

  /** Ends the stream with RST_STREAM `code`. */
  reset(code: number): void {
    if (this.localEnded) return;
    this.#conn.send(FrameType.RST_STREAM, 0, this.id, words(code));
    this.localEnded = true;
    this.abort(new StreamClosedError(`stream reset by the server: ${errorCodeName(code)}`, code));
  }

  /** Ends the stream's signal and forgets it; further frames for it are dropped. */
  abort(reason: StreamClosedError): void {
    this.#conn.forget(this);
    if (!this.#ctl.signal.aborted) this.#ctl.abort(reason);
  }

  /** After our END_STREAM: a client still sending is told to stop (grpc-go does the same). */
  #ended(): void {
    this.localEnded = true;
    if (!this.remoteEnded) {
      this.#conn.send(FrameType.RST_STREAM, 0, this.id, words(ErrorCode.NO_ERROR));
    }
    this.#conn.forget(this);
  }
}
