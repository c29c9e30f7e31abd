/**
 * @module
 * HTTP/2 frames (RFC 9113 section 4 and 6): the protocol's constants, a frame's bytes, and a
 * parser that cuts a connection's incoming bytes into frames after checking the client
 * connection preface. What golang.org/x/net/http2's Framer does for grpc-go's server.
 */

/** Frame types (RFC 9113 section 6). */
export const FrameType = {
  DATA: 0x0,
  HEADERS: 0x1,
  PRIORITY: 0x2,
  RST_STREAM: 0x3,
  SETTINGS: 0x4,
  PUSH_PROMISE: 0x5,
  PING: 0x6,
  GOAWAY: 0x7,
  WINDOW_UPDATE: 0x8,
  CONTINUATION: 0x9,
} as const;

/** Frame flags; ACK shares END_STREAM's bit on SETTINGS and PING. */
export const Flag = {
  END_STREAM: 0x1,
  ACK: 0x1,
  END_HEADERS: 0x4,
  PADDED: 0x8,
  PRIORITY: 0x20,
} as const;

/** Error codes of RST_STREAM and GOAWAY (RFC 9113 section 7). */
export const ErrorCode = {
  NO_ERROR: 0x0,
  PROTOCOL_ERROR: 0x1,
  INTERNAL_ERROR: 0x2,
  FLOW_CONTROL_ERROR: 0x3,
  SETTINGS_TIMEOUT: 0x4,
  STREAM_CLOSED: 0x5,
  FRAME_SIZE_ERROR: 0x6,
  REFUSED_STREAM: 0x7,
  CANCEL: 0x8,
  COMPRESSION_ERROR: 0x9,
  CONNECT_ERROR: 0xa,
  ENHANCE_YOUR_CALM: 0xb,
  INADEQUATE_SECURITY: 0xc,
  HTTP_1_1_REQUIRED: 0xd,
} as const;

const ERROR_NAMES = Object.fromEntries(Object.entries(ErrorCode).map(([k, v]) => [v, k]));

/** An error code's name, e.g. "PROTOCOL_ERROR"; unknown codes as hex. */
export function errorCodeName(code: number): string {
  return ERROR_NAMES[code] ?? `0x${code.toString(16)}`;
}

/** SETTINGS parameters (RFC 9113 section 6.5.2). */
export const Setting = {
  HEADER_TABLE_SIZE: 0x1,
  ENABLE_PUSH: 0x2,
  MAX_CONCURRENT_STREAMS: 0x3,
  INITIAL_WINDOW_SIZE: 0x4,
  MAX_FRAME_SIZE: 0x5,
  MAX_HEADER_LIST_SIZE: 0x6,
} as const;

/** The initial flow-control window of a connection and, unless changed, of each stream. */
export const DEFAULT_WINDOW = 65_535;
/** The largest flow-control window. */
export const MAX_WINDOW = 2 ** 31 - 1;
/** SETTINGS_MAX_FRAME_SIZE's initial value, and the smallest allowed. */
export const DEFAULT_MAX_FRAME_SIZE = 16_384;
/** SETTINGS_MAX_FRAME_SIZE's largest allowed value. */
export const MAX_FRAME_SIZE_LIMIT = 2 ** 24 - 1;

/** The client connection preface's fixed octets (RFC 9113 section 3.4). */
export const PREFACE = new TextEncoder().encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

const HEADER_BYTES = 9;

/** One frame as read. */
export interface Frame {
  readonly type: number;
  readonly flags: number;
  readonly streamId: number;
  readonly payload: Uint8Array;
}

/**
 * A protocol error: of the whole connection (a GOAWAY with `code`, then the connection closes)
 * when `streamId` is undefined, else of that stream only (an RST_STREAM).
 */
export class H2Error extends Error {
  override name = "H2Error";
  constructor(readonly code: number, message: string, readonly streamId?: number) {
    super(message);
  }
}

/** A frame's 9-octet header and payload, in one array. */
export function encodeFrame(
  type: number,
  flags: number,
  streamId: number,
  payload: Uint8Array = new Uint8Array(0),
): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(HEADER_BYTES + payload.length);
  const view = new DataView(out.buffer);
  view.setUint32(0, payload.length << 8);
  out[3] = type;
  out[4] = flags;
  view.setUint32(5, streamId & MAX_WINDOW);
  out.set(payload, HEADER_BYTES);
  return out;
}

/** Big-endian 32-bit words as a payload (RST_STREAM, WINDOW_UPDATE, GOAWAY's head). */
export function words(...values: number[]): Uint8Array {
  const out = new Uint8Array(4 * values.length);
  const view = new DataView(out.buffer);
  values.forEach((v, i) => view.setUint32(4 * i, v));
  return out;
}

/** A SETTINGS payload from [id, value] pairs. */
export function settingsPayload(settings: readonly (readonly [number, number])[]): Uint8Array {
  const out = new Uint8Array(6 * settings.length);
  const view = new DataView(out.buffer);
  settings.forEach(([id, value], i) => {
    view.setUint16(6 * i, id);
    view.setUint32(6 * i + 2, value);
  });
  return out;
}

/**
 * Cuts incoming octets into frames: the client preface first, then frames no longer than
 * `maxFrameSize` (our SETTINGS_MAX_FRAME_SIZE). Payloads are views of octets that are never
 * written again, so they may be kept.
 */
export class FrameParser {
  #buf: Uint8Array = new Uint8Array(0);
  #prefaceSeen: boolean;
  readonly #maxFrameSize: number;

  /** `preface`: whether the octets start with the client preface (false to read a server). */
  constructor(opts: { maxFrameSize?: number; preface?: boolean } = {}) {
    this.#maxFrameSize = opts.maxFrameSize ?? DEFAULT_MAX_FRAME_SIZE;
    this.#prefaceSeen = !(opts.preface ?? true);
  }

  /** Adds octets read from the connection (copied). */
  push(chunk: Uint8Array): void {
    if (this.#buf.length === 0) {
      this.#buf = chunk.slice();
      return;
    }
    const joined = new Uint8Array(this.#buf.length + chunk.length);
    joined.set(this.#buf);
    joined.set(chunk, this.#buf.length);
    this.#buf = joined;
  }

  /** The next whole frame, or undefined until more octets come; throws {@link H2Error}. */
  next(): Frame | undefined {
    if (!this.#prefaceSeen) {
      const n = Math.min(this.#buf.length, PREFACE.length);
      for (let i = 0; i < n; i++) {
        if (this.#buf[i] !== PREFACE[i]) {
          throw new H2Error(ErrorCode.PROTOCOL_ERROR, "bad client connection preface");
        }
      }
      if (n < PREFACE.length) return undefined;
      this.#prefaceSeen = true;
      this.#buf = this.#buf.subarray(PREFACE.length);
    }
    if (this.#buf.length < HEADER_BYTES) return undefined;
    const view = new DataView(this.#buf.buffer, this.#buf.byteOffset, HEADER_BYTES);
    const length = view.getUint32(0) >>> 8;
    if (length > this.#maxFrameSize) {
      throw new H2Error(
        ErrorCode.FRAME_SIZE_ERROR,
        `frame of ${length} octets is over SETTINGS_MAX_FRAME_SIZE ${this.#maxFrameSize}`,
      );
    }
    if (this.#buf.length < HEADER_BYTES + length) return undefined;
    const frame: Frame = {
      type: this.#buf[3]!,
      flags: this.#buf[4]!,
      streamId: view.getUint32(5) & MAX_WINDOW,
      payload: this.#buf.subarray(HEADER_BYTES, HEADER_BYTES + length),
    };
    this.#buf = this.#buf.subarray(HEADER_BYTES + length);
    return frame;
  }
}

/**
 * The payload of a HEADERS or DATA frame without its padding (and a HEADERS frame's priority
 * fields); throws a connection {@link H2Error} for padding longer than the payload.
 */
export function unpadded(frame: Frame): Uint8Array {
  let p = frame.payload;
  let pad = 0;
  if (frame.flags & Flag.PADDED) {
    if (p.length < 1) {
      throw new H2Error(ErrorCode.FRAME_SIZE_ERROR, "padded frame without pad length");
    }
    pad = p[0]!;
    p = p.subarray(1);
  }
  if (frame.type === FrameType.HEADERS && frame.flags & Flag.PRIORITY) {
    if (p.length < 5) throw new H2Error(ErrorCode.FRAME_SIZE_ERROR, "HEADERS priority cut short");
    p = p.subarray(5);
  }
  if (pad > p.length) {
    throw new H2Error(ErrorCode.PROTOCOL_ERROR, `padding of ${pad} octets is over the payload`);
  }
  return p.subarray(0, p.length - pad);
}
