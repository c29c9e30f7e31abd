/**
 * @module
 * A small ASN.1 DER writer: just the types an X.509 certificate needs (SEQUENCE, SET, INTEGER,
 * OBJECT IDENTIFIER, BOOLEAN, NULL, strings, UTCTime/GeneralizedTime, BIT STRING, OCTET STRING
 * and context-specific tags), each returning its encoded bytes. Private to `server/tls.ts`,
 * which builds the kubelet's self-signed serving certificate with it; it plays the part of Go's
 * `encoding/asn1` as `crypto/x509.CreateCertificate` uses it.
 */

import { concatBytes } from "../util/bytes.ts";

/** A malformed value handed to a DER writer. */
export class Asn1Error extends Error {
  override name = "Asn1Error";
}

/** Universal tag numbers used here. */
export const TAG = {
  boolean: 0x01,
  integer: 0x02,
  bitString: 0x03,
  octetString: 0x04,
  null: 0x05,
  oid: 0x06,
  utf8String: 0x0c,
  printableString: 0x13,
  ia5String: 0x16,
  utcTime: 0x17,
  generalizedTime: 0x18,
  sequence: 0x30,
  set: 0x31,
} as const;

/** The DER length octets: short form below 128, else long form with the fewest bytes. */
export function encodeLength(n: number): Uint8Array {
  if (!Number.isSafeInteger(n) || n < 0) throw new Asn1Error(`invalid DER length ${n}`);
  if (n < 0x80) return Uint8Array.of(n);
  const bytes: number[] = [];
  for (let v = n; v > 0; v = Math.floor(v / 256)) bytes.unshift(v % 256);
  return Uint8Array.of(0x80 | bytes.length, ...bytes);
}

/** A tag-length-value with a one-byte tag. */
export function tlv(tag: number, content: Uint8Array): Uint8Array {
  return concatBytes([Uint8Array.of(tag), encodeLength(content.length), content]);
}

/** SEQUENCE of already-encoded elements. */
export function sequence(...items: Uint8Array[]): Uint8Array {
  return tlv(TAG.sequence, concatBytes(items));
}

/** SET OF already-encoded elements, sorted by their encodings as DER requires. */
export function set(...items: Uint8Array[]): Uint8Array {
  const sorted = [...items].sort(compareBytes);
  return tlv(TAG.set, concatBytes(sorted));
}

function compareBytes(a: Uint8Array, b: Uint8Array): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    if (a[i] !== b[i]) return a[i]! - b[i]!;
  }
  return a.length - b.length;
}

/** INTEGER, two's complement in the fewest bytes. */
export function integer(value: bigint | number): Uint8Array {
  let v = BigInt(value);
  const bytes: number[] = [];
  if (v >= 0n) {
    do {
      bytes.unshift(Number(v & 0xffn));
      v >>= 8n;
    } while (v > 0n);
    if (bytes[0]! & 0x80) bytes.unshift(0);
  } else {
    do {
      bytes.unshift(Number(v & 0xffn));
      v >>= 8n;
    } while (v < -1n);
    if (!(bytes[0]! & 0x80)) bytes.unshift(0xff);
  }
  return tlv(TAG.integer, Uint8Array.from(bytes));
}

/** BOOLEAN (DER: 0xff for true). */
export function boolean(value: boolean): Uint8Array {
  return tlv(TAG.boolean, Uint8Array.of(value ? 0xff : 0x00));
}

/** NULL. */
export function nullValue(): Uint8Array {
  return Uint8Array.of(TAG.null, 0x00);
}

/** OBJECT IDENTIFIER from dotted text such as "1.2.840.113549.1.1.11". */
export function oid(dotted: string): Uint8Array {
  const arcs = dotted.split(".").map((s) => {
    if (!/^\d+$/.test(s)) throw new Asn1Error(`invalid OID '${dotted}'`);
    return BigInt(s);
  });
  const [first, second, ...rest] = arcs;
  if (first === undefined || second === undefined || first > 2n || (first < 2n && second > 39n)) {
    throw new Asn1Error(`invalid OID '${dotted}'`);
  }
  const out: number[] = [];
  for (const arc of [first * 40n + second, ...rest]) {
    const chunk: number[] = [];
    let v = arc;
    do {
      chunk.unshift(Number(v & 0x7fn) | (chunk.length > 0 ? 0x80 : 0));
      v >>= 7n;
    } while (v > 0n);
    out.push(...chunk);
  }
  return tlv(TAG.oid, Uint8Array.from(out));
}

const PRINTABLE = /^[A-Za-z0-9 '()+,\-./:=?]*$/;

/** PrintableString; throws for characters outside its set. */
export function printableString(s: string): Uint8Array {
  if (!PRINTABLE.test(s)) throw new Asn1Error(`'${s}' is not a PrintableString`);
  return tlv(TAG.printableString, new TextEncoder().encode(s));
}

/** UTF8String. */
export function utf8String(s: string): Uint8Array {
  return tlv(TAG.utf8String, new TextEncoder().encode(s));
}

/** PrintableString when every character allows it, else UTF8String (what Go's encoding/asn1 picks). */
export function directoryString(s: string): Uint8Array {
  return PRINTABLE.test(s) ? printableString(s) : utf8String(s);
}

/** IA5String (ASCII); throws for other characters. */
export function ia5String(s: string): Uint8Array {
  // deno-lint-ignore no-control-regex
  if (!/^[\x00-\x7f]*$/.test(s)) throw new Asn1Error(`'${s}' is not an IA5String`);
  return tlv(TAG.ia5String, new TextEncoder().encode(s));
}

function pad(n: number, width: number): string {
  return String(n).padStart(width, "0");
}

/** UTCTime, `YYMMDDHHMMSSZ`, whole seconds (years 1950 to 2049). */
export function utcTime(d: Date): Uint8Array {
  const y = d.getUTCFullYear();
  if (y < 1950 || y > 2049) throw new Asn1Error(`year ${y} does not fit a UTCTime`);
  return tlv(TAG.utcTime, new TextEncoder().encode(`${pad(y % 100, 2)}${timeTail(d)}`));
}

/** GeneralizedTime, `YYYYMMDDHHMMSSZ`, whole seconds. */
export function generalizedTime(d: Date): Uint8Array {
  const y = d.getUTCFullYear();
  if (y < 0 || y > 9999) throw new Asn1Error(`year ${y} does not fit a GeneralizedTime`);
  return tlv(TAG.generalizedTime, new TextEncoder().encode(`${pad(y, 4)}${timeTail(d)}`));
}

function timeTail(d: Date): string {
  if (Number.isNaN(d.getTime())) throw new Asn1Error("invalid date");
  return `${pad(d.getUTCMonth() + 1, 2)}${pad(d.getUTCDate(), 2)}${pad(d.getUTCHours(), 2)}` +
    `${pad(d.getUTCMinutes(), 2)}${pad(d.getUTCSeconds(), 2)}Z`;
}

/** An X.509 Time: UTCTime through 2049, GeneralizedTime after (RFC 5280 4.1.2.5). */
export function x509Time(d: Date): Uint8Array {
  const y = d.getUTCFullYear();
  return y >= 1950 && y <= 2049 ? utcTime(d) : generalizedTime(d);
}

/** BIT STRING of whole bytes, or with `unusedBits` trailing bits of the last byte unused. */
export function bitString(bytes: Uint8Array, unusedBits = 0): Uint8Array {
  if (unusedBits < 0 || unusedBits > 7 || (bytes.length === 0 && unusedBits !== 0)) {
    throw new Asn1Error(`invalid unused bit count ${unusedBits}`);
  }
  return tlv(TAG.bitString, concatBytes([Uint8Array.of(unusedBits), bytes]));
}

/**
 * A named-bit BIT STRING (such as KeyUsage) from bit numbers, bit 0 being the most significant
 * bit of the first byte; trailing zero bits are dropped, as DER requires.
 */
export function namedBits(bits: readonly number[]): Uint8Array {
  if (bits.length === 0) return bitString(new Uint8Array(0));
  const highest = Math.max(...bits);
  const bytes = new Uint8Array(Math.floor(highest / 8) + 1);
  for (const b of bits) {
    if (!Number.isInteger(b) || b < 0) throw new Asn1Error(`invalid bit number ${b}`);
    bytes[b >> 3]! |= 0x80 >> (b & 7);
  }
  return bitString(bytes, 7 - (highest & 7));
}

/** OCTET STRING. */
export function octetString(bytes: Uint8Array): Uint8Array {
  return tlv(TAG.octetString, bytes);
}

/**
 * A context-specific tag `[n]`: constructed for EXPLICIT tagging (content is an encoded element)
 * and for IMPLICIT tagging of a constructed type; primitive for IMPLICIT primitive types.
 */
export function contextTag(n: number, content: Uint8Array, constructed: boolean): Uint8Array {
  if (!Number.isInteger(n) || n < 0 || n > 30) throw new Asn1Error(`invalid context tag ${n}`);
  return tlv(0x80 | (constructed ? 0x20 : 0) | n, content);
}

/**
 * IMPLICIT `[n]` tagging of an already-encoded element: the same length and content under the
 * context-specific tag (constructed stays constructed).
 */
export function implicitTag(n: number, encoded: Uint8Array): Uint8Array {
  if (!Number.isInteger(n) || n < 0 || n > 30) throw new Asn1Error(`invalid context tag ${n}`);
  const first = encoded[0];
  if (first === undefined) throw new Asn1Error("cannot tag an empty encoding");
  const out = encoded.slice();
  out[0] = 0x80 | (first & 0x20) | n;
  return out;
}

/** PEM armour: base64 in 64-character lines between BEGIN/END lines of `label`. */
export function pem(label: string, der: Uint8Array): string {
  let b64 = "";
  const CHUNK = 0x8000;
  for (let i = 0; i < der.length; i += CHUNK) {
    b64 += String.fromCharCode(...der.subarray(i, i + CHUNK));
  }
  b64 = btoa(b64);
  const lines = b64.match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join("\n")}\n-----END ${label}-----\n`;
}
