/**
 * @module
 * The server side of one HTTP/2 connection (RFC 9113) in cleartext, as a gRPC server needs it:
 * the connection preface and SETTINGS exchange, PING, GOAWAY both ways, header blocks across
 * CONTINUATION frames (decoded with {@link ./_hpack.ts}), padding, PRIORITY ignored, and flow
 * control both ways: request DATA is credited back with WINDOW_UPDATE as it is handed on, and
 * response DATA waits for the peer's stream and connection windows and keeps to its frame size.
 * Requests are handed on as {@link H2Stream}s ({@link ./_h2_stream.ts}). A client's protocol error ends its connection with
 * a GOAWAY (a stream error, that stream with an RST_STREAM) and never reaches the caller as a
 * throw. What grpc-go's http2Server (internal/transport/http2_server.go) does over x/net/http2.
 */

import type { Logger } from "../klog/klog.ts";
import {
  DEFAULT_MAX_FRAME_SIZE,
  DEFAULT_WINDOW,
  encodeFrame,
  ErrorCode,
  errorCodeName,
  Flag,
  type Frame,
  FrameParser,
  FrameType,
  H2Error,
  MAX_FRAME_SIZE_LIMIT,
  MAX_WINDOW,
  Setting,
  settingsPayload,
  unpadded,
  words,
} from "./_h2_frames.ts";
import { encodeHeaderBlock, type HeaderField, HpackDecoder, HpackError } from "./_hpack.ts";
import { H2Stream, StreamClosedError, type StreamEvents, type StreamSink } from "./_h2_stream.ts";

export { H2Stream, StreamClosedError, type StreamEvents };

/** Streams a client may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS we announce). */
export const MAX_CONCURRENT_STREAMS = 100;
/** The decoded header list a request may have (SETTINGS_MAX_HEADER_LIST_SIZE we announce). */
export const MAX_HEADER_LIST_SIZE = 64 * 1024;
/** Credit request DATA back once this much of a window is used. */
const WINDOW_UPDATE_THRESHOLD = DEFAULT_WINDOW / 4;
/** Response DATA waits while more than this is queued for the socket. */
const HIGH_WATER = 256 * 1024;
/** A client that makes us queue this much without reading (PING or SETTINGS floods) is dropped. */
const MAX_QUEUED = 16 * 1024 * 1024;
/** How long the last frames (a GOAWAY) may take to be written before the socket is closed. */
const FLUSH_TIMEOUT_MS = 1000;

/** What {@link H2Connection} needs. */
export interface H2ConnectionOptions {
  readonly conn: Deno.Conn;
  /** Called for each new request with its headers; returns where its body goes. */
  readonly onStream: (stream: H2Stream) => StreamEvents;
  readonly logger?: Logger;
}

/** One client connection. */
export class H2Connection implements StreamSink {
  /** Resolves when the socket is closed. */
  readonly closed: Promise<void>;
  readonly #conn: Deno.Conn;
  readonly #opts: H2ConnectionOptions;
  readonly #parser = new FrameParser();
  readonly #hpack = new HpackDecoder();
  readonly #streams = new Map<number, H2Stream>();
  #lastStreamId = 0;
  /** A header block in progress: HEADERS without END_HEADERS, then CONTINUATION. */
  #block?: { streamId: number; flags: number; parts: Uint8Array[]; size: number };
  #settingsSeen = false;
  // The peer's settings and our send windows.
  #peerInitialWindow = DEFAULT_WINDOW;
  #peerMaxFrameSize = DEFAULT_MAX_FRAME_SIZE;
  #sendWindow = DEFAULT_WINDOW;
  #windowWaiters = new Set<() => void>();
  // Our receive window of the connection.
  #recvWindow = DEFAULT_WINDOW;
  #recvUnacked = 0;
  // The socket writer.
  #queue: Uint8Array[] = [];
  #queued = 0;
  #writing?: Promise<void>;
  #drainWaiters = new Set<() => void>();
  /** We sent GOAWAY: no new streams; the connection closes when the last one ends. */
  #goingAway = false;
  #dead = false;
  #resolveClosed!: () => void;

  constructor(opts: H2ConnectionOptions) {
    this.#opts = opts;
    this.#conn = opts.conn;
    this.closed = new Promise((r) => this.#resolveClosed = r);
    this.send(
      FrameType.SETTINGS,
      0,
      0,
      settingsPayload([
        [Setting.MAX_CONCURRENT_STREAMS, MAX_CONCURRENT_STREAMS],
        [Setting.MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST_SIZE],
      ]),
    );
    void this.#read();
  }

  /** Streams in progress. */
  get streams(): number {
    return this.#streams.size;
  }

  /**
   * Graceful close: a GOAWAY naming the last stream taken, so the client opens no more; the
   * connection closes when the streams in progress end.
   */
  goAway(): void {
    if (this.#goingAway || this.#dead) return;
    this.#goingAway = true;
    this.send(FrameType.GOAWAY, 0, 0, words(this.#lastStreamId, ErrorCode.NO_ERROR));
    if (this.#streams.size === 0) this.#shutdown();
  }

  /** Ends every stream and closes the socket once what is queued is written. */
  close(): void {
    this.goAway();
    this.#shutdown();
  }

  // The rest is for H2Stream.

  /** Queues one frame; dropped once the connection is dead. */
  send(type: number, flags: number, streamId: number, payload?: Uint8Array): void {
    if (this.#dead) return;
    const frame = encodeFrame(type, flags, streamId, payload);
    this.#queue.push(frame);
    this.#queued += frame.length;
    if (this.#queued > MAX_QUEUED) {
      this.#log("HTTP/2 client does not read its responses, closing the connection", {
        queuedBytes: this.#queued,
      });
      this.#destroy();
      return;
    }
    this.#writing ??= this.#flush();
  }

  /** A header block as HEADERS and, past the peer's frame size, CONTINUATION frames. */
  sendHeaders(streamId: number, fields: readonly HeaderField[], end: boolean): void {
    const block = encodeHeaderBlock(fields);
    const max = this.#peerMaxFrameSize;
    for (let at = 0, first = true; first || at < block.length; first = false) {
      const part = block.subarray(at, at + max);
      at += part.length;
      const flags = (at >= block.length ? Flag.END_HEADERS : 0) |
        (first && end ? Flag.END_STREAM : 0);
      this.send(first ? FrameType.HEADERS : FrameType.CONTINUATION, flags, streamId, part);
    }
  }

  /** Takes up to `want` octets of both send windows and the frame size; 0 when none is open. */
  reserve(stream: H2Stream, want: number): number {
    const n = Math.max(
      0,
      Math.min(want, this.#peerMaxFrameSize, this.#sendWindow, stream.sendWindow),
    );
    this.#sendWindow -= n;
    stream.sendWindow -= n;
    return n;
  }

  /** Resolves at the next WINDOW_UPDATE or SETTINGS change; rejects when `signal` aborts. */
  windowChange(signal: AbortSignal): Promise<void> {
    return this.#wait(this.#windowWaiters, signal);
  }

  /** Resolves once the socket's queue is short enough; rejects when `signal` aborts. */
  drain(signal: AbortSignal): Promise<void> {
    if (this.#queued <= HIGH_WATER || this.#dead) return Promise.resolve();
    return this.#wait(this.#drainWaiters, signal);
  }

  /** Drops a stream that ended; a going-away connection closes after its last. */
  forget(stream: H2Stream): void {
    if (this.#streams.get(stream.id) !== stream) return;
    this.#streams.delete(stream.id);
    this.#wake(this.#windowWaiters);
    if (this.#goingAway && this.#streams.size === 0) this.#shutdown();
  }

  #wait(waiters: Set<() => void>, signal: AbortSignal): Promise<void> {
    if (signal.aborted) return Promise.reject(signal.reason);
    return new Promise((resolve, reject) => {
      const done = () => {
        waiters.delete(done);
        signal.removeEventListener("abort", onAbort);
        resolve();
      };
      const onAbort = () => {
        waiters.delete(done);
        reject(signal.reason);
      };
      waiters.add(done);
      signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  #wake(waiters: Set<() => void>): void {
    for (const w of [...waiters]) w();
  }

  async #flush(): Promise<void> {
    try {
      while (this.#queue.length > 0) {
        const parts = this.#queue;
        this.#queue = [];
        const size = parts.reduce((n, p) => n + p.length, 0);
        const chunk = parts.length === 1 ? parts[0]! : new Uint8Array(size);
        if (parts.length > 1) {
          let at = 0;
          for (const p of parts) {
            chunk.set(p, at);
            at += p.length;
          }
        }
        for (let at = 0; at < chunk.length;) at += await this.#conn.write(chunk.subarray(at));
        this.#queued -= size;
        if (this.#queued <= HIGH_WATER) this.#wake(this.#drainWaiters);
      }
    } catch (e) {
      if (!this.#dead) this.#log("HTTP/2 connection write failed", { err: String(e) });
      this.#destroy();
    } finally {
      this.#writing = undefined;
    }
  }

  async #read(): Promise<void> {
    const buf = new Uint8Array(64 * 1024);
    try {
      for (;;) {
        const n = await this.#conn.read(buf);
        if (n === null || this.#dead) break;
        this.#parser.push(buf.subarray(0, n));
        for (let f = this.#parser.next(); f !== undefined; f = this.#parser.next()) {
          this.#frame(f);
          if (this.#dead) return;
        }
      }
    } catch (e) {
      if (e instanceof H2Error) {
        this.#log("HTTP/2 client protocol error, closing the connection", {
          code: errorCodeName(e.code),
          err: e.message,
        });
        this.send(
          FrameType.GOAWAY,
          0,
          0,
          new Uint8Array([
            ...words(this.#lastStreamId, e.code),
            ...new TextEncoder().encode(e.message),
          ]),
        );
        this.#goingAway = true;
      } else if (!this.#dead) {
        this.#log("HTTP/2 connection read failed", { err: String(e) });
      }
    }
    this.#shutdown();
  }

  #frame(f: Frame): void {
    if (!this.#settingsSeen && f.type !== FrameType.SETTINGS) {
      throw new H2Error(ErrorCode.PROTOCOL_ERROR, "the client's first frame is not SETTINGS");
    }
    if (this.#block !== undefined && f.type !== FrameType.CONTINUATION) {
      throw new H2Error(ErrorCode.PROTOCOL_ERROR, "header block interrupted by another frame");
    }
    try {
      this.#dispatch(f);
    } catch (e) {
      if (!(e instanceof H2Error) || e.streamId === undefined) throw e;
      this.#log("HTTP/2 stream error", { stream: e.streamId, code: errorCodeName(e.code) });
      const stream = this.#streams.get(e.streamId);
      if (stream) stream.reset(e.code);
      else this.send(FrameType.RST_STREAM, 0, e.streamId, words(e.code));
    }
  }

  #dispatch(f: Frame): void {
    const onConnection = f.streamId === 0;
    const needStream = () => {
      if (onConnection) {
        throw new H2Error(ErrorCode.PROTOCOL_ERROR, `frame type ${f.type} on stream 0`);
      }
    };
    const needConnection = () => {
      if (!onConnection) {
        throw new H2Error(ErrorCode.PROTOCOL_ERROR, `frame type ${f.type} on a stream`);
      }
    };
    switch (f.type) {
      case FrameType.DATA:
        needStream();
        return this.#data(f);
      case FrameType.HEADERS: {
        needStream();
        const fragment = unpadded(f);
        if (f.flags & Flag.END_HEADERS) return this.#headers(f.streamId, f.flags, fragment);
        this.#block = { streamId: f.streamId, flags: f.flags, parts: [fragment], size: 0 };
        this.#block.size = fragment.length;
        return;
      }
      case FrameType.CONTINUATION: {
        const block = this.#block;
        if (block === undefined || block.streamId !== f.streamId) {
          throw new H2Error(ErrorCode.PROTOCOL_ERROR, "CONTINUATION without HEADERS");
        }
        block.parts.push(f.payload);
        block.size += f.payload.length;
        // A header block this long cannot decode within the list size: a CONTINUATION flood.
        if (block.size > 2 * MAX_HEADER_LIST_SIZE) {
          throw new H2Error(ErrorCode.ENHANCE_YOUR_CALM, "header block too long");
        }
        if (f.flags & Flag.END_HEADERS) {
          this.#block = undefined;
          const whole = new Uint8Array(block.size);
          let at = 0;
          for (const p of block.parts) {
            whole.set(p, at);
            at += p.length;
          }
          this.#headers(block.streamId, block.flags, whole);
        }
        return;
      }
      case FrameType.PRIORITY:
        needStream();
        if (f.payload.length !== 5) {
          throw new H2Error(ErrorCode.FRAME_SIZE_ERROR, "PRIORITY of bad length", f.streamId);
        }
        return;
      case FrameType.RST_STREAM: {
        needStream();
        if (f.payload.length !== 4) {
          throw new H2Error(ErrorCode.FRAME_SIZE_ERROR, "RST_STREAM of bad length");
        }
        if (f.streamId > this.#lastStreamId) {
          throw new H2Error(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on an idle stream");
        }
        const code = new DataView(f.payload.buffer, f.payload.byteOffset).getUint32(0);
        const stream = this.#streams.get(f.streamId);
        if (stream) {
          stream.localEnded = true;
          stream.abort(
            new StreamClosedError(`stream reset by the client: ${errorCodeName(code)}`, code),
          );
        }
        return;
      }
      case FrameType.SETTINGS:
        needConnection();
        return this.#settings(f);
      case FrameType.PUSH_PROMISE:
        throw new H2Error(ErrorCode.PROTOCOL_ERROR, "PUSH_PROMISE from a client");
      case FrameType.PING:
        needConnection();
        if (f.payload.length !== 8) {
          throw new H2Error(ErrorCode.FRAME_SIZE_ERROR, "PING of bad length");
        }
        if (!(f.flags & Flag.ACK)) this.send(FrameType.PING, Flag.ACK, 0, f.payload);
        return;
      case FrameType.GOAWAY: {
        needConnection();
        if (f.payload.length < 8) throw new H2Error(ErrorCode.FRAME_SIZE_ERROR, "short GOAWAY");
        const code = new DataView(f.payload.buffer, f.payload.byteOffset).getUint32(4);
        if (code !== ErrorCode.NO_ERROR) {
          this.#log("HTTP/2 client sent GOAWAY", {
            code: errorCodeName(code),
            debug: new TextDecoder().decode(f.payload.subarray(8)),
          });
        }
        // The client opens no more streams: finish the ones in progress, then close.
        this.#goingAway = true;
        if (this.#streams.size === 0) this.#shutdown();
        return;
      }
      case FrameType.WINDOW_UPDATE:
        return this.#windowUpdate(f);
      default:
        // Unknown frame types are ignored (RFC 9113 section 4.1).
        return;
    }
  }

  #data(f: Frame): void {
    const length = f.payload.length;
    if (length > this.#recvWindow) {
      throw new H2Error(ErrorCode.FLOW_CONTROL_ERROR, "DATA over the connection window");
    }
    this.#recvWindow -= length;
    this.#recvUnacked += length;
    // The connection window is credited back whatever becomes of the frame.
    if (this.#recvUnacked >= WINDOW_UPDATE_THRESHOLD) {
      this.send(FrameType.WINDOW_UPDATE, 0, 0, words(this.#recvUnacked));
      this.#recvWindow += this.#recvUnacked;
      this.#recvUnacked = 0;
    }
    if (f.streamId > this.#lastStreamId) {
      throw new H2Error(ErrorCode.PROTOCOL_ERROR, "DATA on an idle stream");
    }
    const stream = this.#streams.get(f.streamId);
    // A stream we ended or reset: frames the client sent before it knew are dropped.
    if (stream === undefined) return;
    if (stream.remoteEnded) {
      throw new H2Error(ErrorCode.STREAM_CLOSED, "DATA after END_STREAM", f.streamId);
    }
    if (length > stream.recvWindow) {
      throw new H2Error(ErrorCode.FLOW_CONTROL_ERROR, "DATA over the stream window", f.streamId);
    }
    stream.recvWindow -= length;
    const data = unpadded(f);
    const end = (f.flags & Flag.END_STREAM) !== 0;
    // Marked first, so that a response given while the data is handed on sends no RST_STREAM.
    if (end) stream.remoteEnded = true;
    if (data.length > 0) stream.events?.data(data);
    if (end) {
      this.#remoteEnd(stream);
      return;
    }
    stream.recvUnacked += length;
    if (stream.recvUnacked >= WINDOW_UPDATE_THRESHOLD && this.#streams.has(stream.id)) {
      this.send(FrameType.WINDOW_UPDATE, 0, stream.id, words(stream.recvUnacked));
      stream.recvWindow += stream.recvUnacked;
      stream.recvUnacked = 0;
    }
  }

  /** The request ended: the consumer hears of it unless the stream is already over. */
  #remoteEnd(stream: H2Stream): void {
    stream.remoteEnded = true;
    if (this.#streams.get(stream.id) !== stream) return;
    stream.events?.end();
    if (stream.localEnded) this.forget(stream);
  }

  #headers(streamId: number, flags: number, block: Uint8Array): void {
    this.#block = undefined;
    let decoded;
    try {
      decoded = this.#hpack.decode(block, MAX_HEADER_LIST_SIZE);
    } catch (e) {
      if (!(e instanceof HpackError)) throw e;
      throw new H2Error(ErrorCode.COMPRESSION_ERROR, e.message);
    }
    const end = (flags & Flag.END_STREAM) !== 0;
    const existing = this.#streams.get(streamId);
    if (existing !== undefined) {
      // Trailers from the client: they must end the request.
      if (existing.remoteEnded) {
        throw new H2Error(ErrorCode.STREAM_CLOSED, "HEADERS after END_STREAM", streamId);
      }
      if (!end) {
        throw new H2Error(ErrorCode.PROTOCOL_ERROR, "trailers without END_STREAM", streamId);
      }
      return this.#remoteEnd(existing);
    }
    if (streamId <= this.#lastStreamId) return; // a stream we already ended
    if (streamId % 2 === 0) {
      throw new H2Error(ErrorCode.PROTOCOL_ERROR, `client stream ${streamId} is even`);
    }
    this.#lastStreamId = streamId;
    if (this.#goingAway) {
      throw new H2Error(ErrorCode.REFUSED_STREAM, "going away", streamId);
    }
    if (decoded.truncated) {
      // grpc-go's answer to a header list over its limit.
      throw new H2Error(ErrorCode.FRAME_SIZE_ERROR, "header list too large", streamId);
    }
    if (this.#streams.size >= MAX_CONCURRENT_STREAMS) {
      throw new H2Error(ErrorCode.REFUSED_STREAM, "too many concurrent streams", streamId);
    }
    const malformed = decoded.fields.find(([name]) => name !== name.toLowerCase());
    if (malformed !== undefined) {
      throw new H2Error(ErrorCode.PROTOCOL_ERROR, "upper-case header name", streamId);
    }
    const stream = new H2Stream(this, streamId, decoded.fields, this.#peerInitialWindow);
    stream.remoteEnded = end;
    this.#streams.set(streamId, stream);
    stream.events = this.#opts.onStream(stream);
    if (end) this.#remoteEnd(stream);
  }

  #settings(f: Frame): void {
    if (f.flags & Flag.ACK) {
      if (f.payload.length !== 0) {
        throw new H2Error(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload");
      }
      return;
    }
    if (f.payload.length % 6 !== 0) {
      throw new H2Error(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS of bad length");
    }
    this.#settingsSeen = true;
    const view = new DataView(f.payload.buffer, f.payload.byteOffset, f.payload.length);
    for (let at = 0; at < f.payload.length; at += 6) {
      const id = view.getUint16(at);
      const value = view.getUint32(at + 2);
      switch (id) {
        case Setting.ENABLE_PUSH:
          if (value > 1) throw new H2Error(ErrorCode.PROTOCOL_ERROR, "ENABLE_PUSH not 0 or 1");
          break;
        case Setting.INITIAL_WINDOW_SIZE: {
          if (value > MAX_WINDOW) {
            throw new H2Error(ErrorCode.FLOW_CONTROL_ERROR, "INITIAL_WINDOW_SIZE over 2^31-1");
          }
          const delta = value - this.#peerInitialWindow;
          this.#peerInitialWindow = value;
          for (const s of this.#streams.values()) {
            s.sendWindow += delta;
            if (s.sendWindow > MAX_WINDOW) {
              throw new H2Error(ErrorCode.FLOW_CONTROL_ERROR, "stream window over 2^31-1");
            }
          }
          break;
        }
        case Setting.MAX_FRAME_SIZE:
          if (value < DEFAULT_MAX_FRAME_SIZE || value > MAX_FRAME_SIZE_LIMIT) {
            throw new H2Error(ErrorCode.PROTOCOL_ERROR, `MAX_FRAME_SIZE ${value} out of range`);
          }
          this.#peerMaxFrameSize = value;
          break;
          // HEADER_TABLE_SIZE: our encoder keeps no table. MAX_CONCURRENT_STREAMS: we open none.
          // MAX_HEADER_LIST_SIZE: our response headers are short. Unknown ones are ignored.
      }
    }
    this.send(FrameType.SETTINGS, Flag.ACK, 0);
    this.#wake(this.#windowWaiters);
  }

  #windowUpdate(f: Frame): void {
    if (f.payload.length !== 4) {
      throw new H2Error(ErrorCode.FRAME_SIZE_ERROR, "WINDOW_UPDATE of bad length");
    }
    const increment = new DataView(f.payload.buffer, f.payload.byteOffset).getUint32(0) &
      MAX_WINDOW;
    if (f.streamId === 0) {
      if (increment === 0) throw new H2Error(ErrorCode.PROTOCOL_ERROR, "WINDOW_UPDATE of 0");
      this.#sendWindow += increment;
      if (this.#sendWindow > MAX_WINDOW) {
        throw new H2Error(ErrorCode.FLOW_CONTROL_ERROR, "connection window over 2^31-1");
      }
    } else {
      if (f.streamId > this.#lastStreamId) {
        throw new H2Error(ErrorCode.PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream");
      }
      const stream = this.#streams.get(f.streamId);
      if (stream === undefined) return;
      if (increment === 0) {
        throw new H2Error(ErrorCode.PROTOCOL_ERROR, "WINDOW_UPDATE of 0", f.streamId);
      }
      stream.sendWindow += increment;
      if (stream.sendWindow > MAX_WINDOW) {
        throw new H2Error(ErrorCode.FLOW_CONTROL_ERROR, "stream window over 2^31-1", f.streamId);
      }
    }
    this.#wake(this.#windowWaiters);
  }

  /** Ends every stream, writes what is queued (within a bound) and closes the socket. */
  #shutdown(): void {
    if (this.#dead) return;
    this.#dead = true;
    for (const s of [...this.#streams.values()]) {
      s.abort(new StreamClosedError("the connection is closed"));
    }
    this.#wake(this.#windowWaiters);
    this.#wake(this.#drainWaiters);
    const writing = this.#writing ?? Promise.resolve();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<void>((r) => timer = setTimeout(r, FLUSH_TIMEOUT_MS));
    void Promise.race([writing, timeout]).then(() => {
      clearTimeout(timer);
      this.#destroy();
    });
  }

  /** Closes the socket now. */
  #destroy(): void {
    this.#dead = true;
    this.#queue = [];
    try {
      this.#conn.close();
    } catch {
      // Already closed.
    }
    for (const s of [...this.#streams.values()]) {
      s.abort(new StreamClosedError("the connection is closed"));
    }
    this.#wake(this.#windowWaiters);
    this.#wake(this.#drainWaiters);
    this.#resolveClosed();
  }

  #log(msg: string, kv: Record<string, unknown>): void {
    this.#opts.logger?.v(4).info(msg, kv);
  }
}
