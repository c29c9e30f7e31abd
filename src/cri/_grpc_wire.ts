/**
 * @module
 * The gRPC-over-HTTP/2 wire format as a client needs it: status codes, length-prefixed message
 * frames, reading frames back from a response body, and the status a response's headers carry.
 * The CRI client ((`connection.ts`)) speaks it over Deno's fetch; the server
 * ((`grpc_server.ts`)) shares the framing, the status codes, `grpc-timeout` and `grpc-message`. Follows the gRPC
 * protocol description (PROTOCOL-HTTP2.md) and the wording of grpc-go, which upstream links.
 */

/** gRPC status codes (google.golang.org/grpc/codes), with grpc-js's constant names. */
export const GrpcCode = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  DATA_LOSS: 15,
  UNAUTHENTICATED: 16,
} as const;

/** One of {@link GrpcCode}'s values. */
export type GrpcCode = (typeof GrpcCode)[keyof typeof GrpcCode];

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

/** A call's outcome other than OK, before it is tied to an RPC name. */
export class GrpcStatusError extends Error {
  override name = "GrpcStatusError";
  constructor(readonly code: number, readonly details: string) {
    super(`code = ${GRPC_CODE_NAMES[code] ?? code} desc = ${details}`);
  }
}

/** Bytes of a frame's prefix: the compressed flag and the big-endian message length. */
const PREFIX = 5;

/** The length of a message frame's prefix, for readers outside this module. */
export const FRAME_PREFIX_BYTES = PREFIX;

/** `message` as one uncompressed gRPC frame. */
export function grpcFrame(message: Uint8Array): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(PREFIX + message.length);
  new DataView(out.buffer).setUint32(1, message.length);
  out.set(message, PREFIX);
  return out;
}

/** The `grpc-timeout` header value for a deadline `ms` from now (at most 8 digits a unit). */
export function grpcTimeout(ms: number): string {
  const whole = Math.max(0, Math.ceil(ms));
  if (whole < 1e8) return `${whole}m`;
  const seconds = Math.ceil(whole / 1000);
  return seconds < 1e8 ? `${seconds}S` : `${Math.min(Math.ceil(seconds / 3600), 99_999_999)}H`;
}

/** The milliseconds of each `grpc-timeout` unit. */
const TIMEOUT_UNITS: Readonly<Record<string, number>> = {
  H: 3_600_000,
  M: 60_000,
  S: 1000,
  m: 1,
  u: 1e-3,
  n: 1e-6,
};

/**
 * The milliseconds a request's `grpc-timeout` header gives (at most 8 digits and a unit);
 * throws an Error worded as grpc-go's decodeTimeout for a malformed one.
 */
export function parseGrpcTimeout(value: string): number {
  if (value.length < 2) throw new Error(`transport: timeout string is too short: "${value}"`);
  if (value.length > 9) throw new Error(`transport: timeout string is too long: "${value}"`);
  const unit = TIMEOUT_UNITS[value.at(-1)!];
  if (unit === undefined) {
    throw new Error(`transport: timeout unit is not recognized: "${value}"`);
  }
  const digits = value.slice(0, -1);
  if (!/^\d+$/.test(digits)) {
    throw new Error(`strconv.ParseUint: parsing "${digits}": invalid syntax`);
  }
  return Number(digits) * unit;
}

/**
 * A status message as the `grpc-message` header carries it: octets outside printable ASCII,
 * and '%', percent-encoded from UTF-8 (grpc-go's encodeGrpcMessage).
 */
export function encodeGrpcMessage(message: string): string {
  if (/^[\x20-\x24\x26-\x7e]*$/.test(message)) return message;
  let out = "";
  for (const b of new TextEncoder().encode(message)) {
    out += b >= 0x20 && b <= 0x7e && b !== 0x25
      ? String.fromCharCode(b)
      : `%${b.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}

/**
 * The status a response's headers carry before any message: a non-200 HTTP status mapped as
 * grpc-go maps it, a content type that is not gRPC, or a trailers-only response's grpc-status.
 * Undefined when the headers say nothing yet (messages and the trailers follow).
 */
export function headerStatus(status: number, headers: Headers): GrpcStatusError | undefined {
  if (status !== 200) {
    return new GrpcStatusError(
      httpStatusCode(status),
      `unexpected HTTP status code received from server: ${status}`,
    );
  }
  const grpcStatus = headers.get("grpc-status");
  if (grpcStatus !== null) {
    const code = Number(grpcStatus);
    if (!Number.isInteger(code) || code < 0) {
      return new GrpcStatusError(
        GrpcCode.INTERNAL,
        `transport: malformed grpc-status: ${JSON.stringify(grpcStatus)}`,
      );
    }
    return code === GrpcCode.OK
      ? undefined
      : new GrpcStatusError(code, decodeGrpcMessage(headers.get("grpc-message") ?? ""));
  }
  const type = headers.get("content-type") ?? "";
  if (!/^application\/grpc(?:[+;]|$)/.test(type)) {
    return new GrpcStatusError(
      GrpcCode.UNKNOWN,
      `transport: received unexpected content-type ${JSON.stringify(type)}`,
    );
  }
  return undefined;
}

/** grpc-go's mapping of an HTTP status on a gRPC response to a code. */
function httpStatusCode(status: number): GrpcCode {
  switch (status) {
    case 400:
      return GrpcCode.INTERNAL;
    case 401:
      return GrpcCode.UNAUTHENTICATED;
    case 403:
      return GrpcCode.PERMISSION_DENIED;
    case 404:
      return GrpcCode.UNIMPLEMENTED;
    case 429:
    case 502:
    case 503:
    case 504:
      return GrpcCode.UNAVAILABLE;
    default:
      return GrpcCode.UNKNOWN;
  }
}

/** grpc-message is percent-encoded; a malformed one is shown as it came. */
function decodeGrpcMessage(raw: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}

/**
 * The one message of a unary response's whole body. Throws {@link GrpcStatusError} as
 * {@link GrpcFrameReader} does, and for a body with no message or more than one.
 */
export function unaryMessage(body: Uint8Array, maxMessageSize: number): Uint8Array {
  if (body.length === 0) {
    throw new GrpcStatusError(GrpcCode.INTERNAL, "server closed the stream without a response");
  }
  const length = framedLength(body, maxMessageSize);
  if (body.length < PREFIX + length) {
    throw new GrpcStatusError(
      GrpcCode.INTERNAL,
      `server closed the stream in the middle of a message (${body.length} of ${
        PREFIX + length
      } bytes)`,
    );
  }
  if (body.length > PREFIX + length) {
    throw new GrpcStatusError(GrpcCode.INTERNAL, "server sent more than one response");
  }
  return body.subarray(PREFIX);
}

/** The message length a frame's prefix gives; throws for a compressed or oversize message. */
function framedLength(buf: Uint8Array, max: number): number {
  if (buf.length < PREFIX) {
    throw new GrpcStatusError(
      GrpcCode.INTERNAL,
      `server closed the stream in the middle of a message (${buf.length} of ${PREFIX} bytes)`,
    );
  }
  if (buf[0] !== 0) {
    throw new GrpcStatusError(
      GrpcCode.INTERNAL,
      `grpc: compressed flag set with identity or empty encoding (flag ${buf[0]})`,
    );
  }
  const length = new DataView(buf.buffer, buf.byteOffset, PREFIX).getUint32(1);
  if (length > max) {
    throw new GrpcStatusError(
      GrpcCode.RESOURCE_EXHAUSTED,
      `grpc: received message larger than max (${length} vs. ${max})`,
    );
  }
  return length;
}

const EMPTY = new Uint8Array(0);

/** Reads gRPC frames off a response body, one message at a time. */
export class GrpcFrameReader {
  readonly #reader: ReadableStreamDefaultReader<Uint8Array>;
  readonly #max: number;
  #buf: Uint8Array = EMPTY;

  constructor(body: ReadableStream<Uint8Array>, maxMessageSize: number) {
    this.#reader = body.getReader();
    this.#max = maxMessageSize;
  }

  /**
   * The next message, or undefined at the end of the body. Throws {@link GrpcStatusError} for a
   * message over the size limit, a compressed one (none is asked for) or a body cut mid-frame.
   */
  async next(): Promise<Uint8Array | undefined> {
    if (!await this.#fill(PREFIX)) return undefined;
    const length = framedLength(this.#buf, this.#max);
    await this.#fill(PREFIX + length);
    const message = this.#buf.subarray(PREFIX, PREFIX + length);
    this.#buf = this.#buf.subarray(PREFIX + length);
    return message;
  }

  /** Stops reading: the rest of the body is dropped. */
  async cancel(): Promise<void> {
    await this.#reader.cancel().catch(() => {});
  }

  /** Buffers `want` bytes; false at a clean end before any, throws at an end inside a frame. */
  async #fill(want: number): Promise<boolean> {
    if (this.#buf.length >= want) return true;
    // Chunks are joined once, when enough have come: a large message is copied once.
    const chunks = this.#buf.length > 0 ? [this.#buf] : [];
    let size = this.#buf.length;
    while (size < want) {
      const { done, value } = await this.#reader.read();
      if (done) {
        if (size === 0) return false;
        throw new GrpcStatusError(
          GrpcCode.INTERNAL,
          `server closed the stream in the middle of a message (${size} of ${want} bytes)`,
        );
      }
      if (value.length === 0) continue;
      chunks.push(value);
      size += value.length;
    }
    if (chunks.length === 1) {
      this.#buf = chunks[0]!;
    } else {
      const joined = new Uint8Array(size);
      let at = 0;
      for (const c of chunks) {
        joined.set(c, at);
        at += c.length;
      }
      this.#buf = joined;
    }
    return true;
  }
}
