/**
 * @module
 * The D-Bus wire format (little-endian) for {@link DBusConnection} in `dbus.ts`: values by
 * signature, and whole messages with their header fields. Covers the basic types, strings,
 * object paths, signatures, arrays, structs, dict entries and variants; file descriptors (`h`)
 * travel as their index only, since Deno cannot pass them over a unix socket. Corresponds to
 * what godbus's encoder and decoder do for the kubelet's node shutdown manager.
 */

/** A value of a `v` (variant): its signature and the value. */
export interface DBusVariant {
  readonly signature: string;
  readonly value: DBusValue;
}

/** A D-Bus value: numbers for 32-bit and smaller integers and doubles, bigints for 64-bit. */
export type DBusValue =
  | number
  | bigint
  | boolean
  | string
  | DBusVariant
  | readonly DBusValue[];

/** Bytes that are not a valid message, or a value that does not fit its signature. */
export class DBusWireError extends Error {
  override name = "DBusWireError";
}

/** Message types. */
export const MessageType = { methodCall: 1, methodReturn: 2, error: 3, signal: 4 } as const;

/** One D-Bus message. */
export interface DBusMessage {
  readonly type: number;
  readonly flags: number;
  readonly serial: number;
  readonly path?: string;
  readonly interface?: string;
  readonly member?: string;
  readonly errorName?: string;
  readonly replySerial?: number;
  readonly destination?: string;
  readonly sender?: string;
  readonly signature?: string;
  readonly body: readonly DBusValue[];
}

/** Splits a signature into its complete types ("a{sv}s" → ["a{sv}", "s"]). */
export function splitSignature(sig: string): string[] {
  const out: string[] = [];
  let i = 0;
  while (i < sig.length) {
    const end = typeEnd(sig, i);
    out.push(sig.slice(i, end));
    i = end;
  }
  return out;
}

function typeEnd(sig: string, i: number): number {
  const c = sig[i];
  if (c === undefined) throw new DBusWireError(`signature '${sig}' ends inside a type`);
  if ("ybnqiuxtdsoghv".includes(c)) return i + 1;
  if (c === "a") return typeEnd(sig, i + 1);
  const close = c === "(" ? ")" : c === "{" ? "}" : undefined;
  if (!close) throw new DBusWireError(`signature '${sig}' has an unknown type code '${c}'`);
  let j = i + 1;
  while (sig[j] !== close) {
    if (j >= sig.length) throw new DBusWireError(`signature '${sig}' has an unclosed '${c}'`);
    j = typeEnd(sig, j);
  }
  return j + 1;
}

function alignOf(type: string): number {
  switch (type[0]) {
    case "y":
    case "g":
    case "v":
      return 1;
    case "n":
    case "q":
      return 2;
    case "x":
    case "t":
    case "d":
    case "(":
    case "{":
      return 8;
    default:
      return 4;
  }
}

const enc = new TextEncoder();
const dec = new TextDecoder("utf-8", { fatal: true });

/** Builds the little-endian bytes of values. */
export class Writer {
  #buf = new Uint8Array(256);
  #view = new DataView(this.#buf.buffer);
  #len = 0;

  get length(): number {
    return this.#len;
  }

  bytes(): Uint8Array {
    return this.#buf.slice(0, this.#len);
  }

  #room(n: number): void {
    if (this.#len + n <= this.#buf.length) return;
    const next = new Uint8Array(Math.max(this.#buf.length * 2, this.#len + n));
    next.set(this.#buf);
    this.#buf = next;
    this.#view = new DataView(next.buffer);
  }

  align(n: number): void {
    const pad = (n - (this.#len % n)) % n;
    this.#room(pad);
    this.#buf.fill(0, this.#len, this.#len + pad);
    this.#len += pad;
  }

  raw(b: Uint8Array): void {
    this.#room(b.length);
    this.#buf.set(b, this.#len);
    this.#len += b.length;
  }

  u8(v: number): void {
    this.#room(1);
    this.#buf[this.#len++] = v;
  }

  u32(v: number): void {
    this.align(4);
    this.#room(4);
    this.#view.setUint32(this.#len, v, true);
    this.#len += 4;
  }

  setU32(at: number, v: number): void {
    this.#view.setUint32(at, v, true);
  }

  value(type: string, v: DBusValue): void {
    const bad = () =>
      new DBusWireError(`value ${JSON.stringify(String(v)).slice(0, 60)} is not a '${type}'`);
    const num = (): number => {
      if (typeof v !== "number" || !Number.isFinite(v)) throw bad();
      return v;
    };
    const c = type[0];
    this.align(alignOf(type));
    switch (c) {
      case "y":
        return this.u8(num() & 0xff);
      case "b":
        if (typeof v !== "boolean") throw bad();
        return this.u32(v ? 1 : 0);
      case "n":
      case "q": {
        this.#room(2);
        if (c === "n") this.#view.setInt16(this.#len, num(), true);
        else this.#view.setUint16(this.#len, num(), true);
        this.#len += 2;
        return;
      }
      case "i":
        this.#room(4);
        this.#view.setInt32(this.#len, num(), true);
        this.#len += 4;
        return;
      case "u":
      case "h":
        return this.u32(num() >>> 0);
      case "x":
      case "t": {
        const b = typeof v === "bigint" ? v : BigInt(num());
        this.#room(8);
        if (c === "x") this.#view.setBigInt64(this.#len, b, true);
        else this.#view.setBigUint64(this.#len, b, true);
        this.#len += 8;
        return;
      }
      case "d":
        this.#room(8);
        this.#view.setFloat64(this.#len, num(), true);
        this.#len += 8;
        return;
      case "s":
      case "o": {
        if (typeof v !== "string") throw bad();
        const b = enc.encode(v);
        this.u32(b.length);
        this.raw(b);
        return this.u8(0);
      }
      case "g": {
        if (typeof v !== "string") throw bad();
        const b = enc.encode(v);
        this.u8(b.length);
        this.raw(b);
        return this.u8(0);
      }
      case "v": {
        if (typeof v !== "object" || Array.isArray(v) || v === null) throw bad();
        const variant = v as DBusVariant;
        this.value("g", variant.signature);
        return this.value(variant.signature, variant.value);
      }
      case "a": {
        if (!Array.isArray(v)) throw bad();
        const elem = type.slice(1);
        this.u32(0);
        const lenAt = this.#len - 4;
        this.align(alignOf(elem));
        const start = this.#len;
        for (const e of v as DBusValue[]) this.value(elem, e);
        this.setU32(lenAt, this.#len - start);
        return;
      }
      case "(":
      case "{": {
        if (!Array.isArray(v)) throw bad();
        const fields = splitSignature(type.slice(1, -1));
        if (fields.length !== v.length) throw bad();
        fields.forEach((f, i) => this.value(f, (v as DBusValue[])[i]!));
        return;
      }
      default:
        throw new DBusWireError(`cannot write type '${type}'`);
    }
  }
}

/** Reads values from little-endian bytes; offsets count from the message start for alignment. */
export class Reader {
  #view: DataView;
  #bytes: Uint8Array;
  pos = 0;

  constructor(bytes: Uint8Array) {
    this.#bytes = bytes;
    this.#view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  #need(n: number): void {
    if (this.pos + n > this.#bytes.length) {
      throw new DBusWireError(`message ends at byte ${this.#bytes.length}, needed ${this.pos + n}`);
    }
  }

  align(n: number): void {
    this.pos += (n - (this.pos % n)) % n;
  }

  u8(): number {
    this.#need(1);
    return this.#bytes[this.pos++]!;
  }

  u32(): number {
    this.align(4);
    this.#need(4);
    const v = this.#view.getUint32(this.pos, true);
    this.pos += 4;
    return v;
  }

  #text(n: number): string {
    this.#need(n + 1);
    const s = dec.decode(this.#bytes.subarray(this.pos, this.pos + n));
    this.pos += n + 1;
    return s;
  }

  value(type: string, depth = 0): DBusValue {
    if (depth > 64) throw new DBusWireError("values nested deeper than 64");
    this.align(alignOf(type));
    switch (type[0]) {
      case "y":
        return this.u8();
      case "b": {
        const v = this.u32();
        if (v > 1) throw new DBusWireError(`boolean value ${v} is not 0 or 1`);
        return v === 1;
      }
      case "n":
      case "q": {
        this.#need(2);
        const v = type[0] === "n"
          ? this.#view.getInt16(this.pos, true)
          : this.#view.getUint16(this.pos, true);
        this.pos += 2;
        return v;
      }
      case "i": {
        this.#need(4);
        const v = this.#view.getInt32(this.pos, true);
        this.pos += 4;
        return v;
      }
      case "u":
      case "h":
        return this.u32();
      case "x":
      case "t": {
        this.#need(8);
        const v = type[0] === "x"
          ? this.#view.getBigInt64(this.pos, true)
          : this.#view.getBigUint64(this.pos, true);
        this.pos += 8;
        return v;
      }
      case "d": {
        this.#need(8);
        const v = this.#view.getFloat64(this.pos, true);
        this.pos += 8;
        return v;
      }
      case "s":
      case "o":
        return this.#text(this.u32());
      case "g":
        return this.#text(this.u8());
      case "v": {
        const signature = this.value("g") as string;
        const types = splitSignature(signature);
        if (types.length !== 1) {
          throw new DBusWireError(`variant signature '${signature}' is not one complete type`);
        }
        return { signature, value: this.value(signature, depth + 1) };
      }
      case "a": {
        const n = this.u32();
        const elem = type.slice(1);
        this.align(alignOf(elem));
        const end = this.pos + n;
        this.#need(n);
        const out: DBusValue[] = [];
        while (this.pos < end) out.push(this.value(elem, depth + 1));
        if (this.pos !== end) {
          throw new DBusWireError(`array of '${elem}' overruns its length ${n}`);
        }
        return out;
      }
      case "(":
      case "{":
        return splitSignature(type.slice(1, -1)).map((f) => this.value(f, depth + 1));
      default:
        throw new DBusWireError(`cannot read type '${type}'`);
    }
  }
}

const FIELDS = [
  [1, "path", "o"],
  [2, "interface", "s"],
  [3, "member", "s"],
  [4, "errorName", "s"],
  [5, "replySerial", "u"],
  [6, "destination", "s"],
  [7, "sender", "s"],
  [8, "signature", "g"],
] as const;

/** The bytes of a message (its body written with `signature`). */
export function encodeMessage(m: DBusMessage): Uint8Array {
  const body = new Writer();
  const types = splitSignature(m.signature ?? "");
  if (types.length !== m.body.length) {
    throw new DBusWireError(
      `signature '${m.signature ?? ""}' has ${types.length} types for ${m.body.length} values`,
    );
  }
  types.forEach((t, i) => body.value(t, m.body[i]!));
  const w = new Writer();
  w.u8(0x6c); // 'l'
  w.u8(m.type);
  w.u8(m.flags);
  w.u8(1);
  w.u32(body.length);
  w.u32(m.serial);
  const fields: DBusValue[] = [];
  for (const [code, key, sig] of FIELDS) {
    const v = m[key];
    if (v === undefined || (key === "signature" && v === "")) continue;
    fields.push([code, { signature: sig, value: v }]);
  }
  w.value("a(yv)", fields);
  w.align(8);
  w.raw(body.bytes());
  return w.bytes();
}

/**
 * The length of the first message in `buf`, or undefined when more bytes are needed.
 * Throws on a big-endian or malformed header.
 */
export function messageLength(buf: Uint8Array): number | undefined {
  if (buf.length < 16) return undefined;
  if (buf[0] !== 0x6c) {
    throw new DBusWireError(`message endianness '${String.fromCharCode(buf[0]!)}' not supported`);
  }
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const bodyLen = view.getUint32(4, true);
  const fieldsLen = view.getUint32(12, true);
  const total = 16 + fieldsLen + ((8 - (fieldsLen % 8)) % 8) + bodyLen;
  if (total > 128 << 20) throw new DBusWireError(`message of ${total} bytes is over 128 MiB`);
  return buf.length >= total ? total : undefined;
}

/** Decodes one whole message. */
export function decodeMessage(bytes: Uint8Array): DBusMessage {
  const r = new Reader(bytes);
  r.u8();
  const type = r.u8();
  const flags = r.u8();
  const version = r.u8();
  if (version !== 1) throw new DBusWireError(`protocol version ${version} not supported`);
  r.u32();
  const serial = r.u32();
  const head: Record<string, DBusValue> = {};
  for (const f of r.value("a(yv)") as DBusValue[][]) {
    const known = FIELDS.find(([code]) => code === f[0]);
    if (known) head[known[1]] = (f[1] as DBusVariant).value;
  }
  r.align(8);
  const body = splitSignature((head.signature as string | undefined) ?? "").map((t) => r.value(t));
  return { type, flags, serial, ...head, body } as DBusMessage;
}
