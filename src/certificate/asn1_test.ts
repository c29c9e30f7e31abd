import assert from "node:assert/strict";
import {
  Asn1Error,
  bitString,
  boolean,
  contextTag,
  directoryString,
  encodeLength,
  generalizedTime,
  ia5String,
  implicitTag,
  integer,
  namedBits,
  nullValue,
  octetString,
  oid,
  pem,
  printableString,
  sequence,
  set,
  utcTime,
  x509Time,
} from "./asn1.ts";

const hex = (b: Uint8Array) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join(" ");

Deno.test("encodeLength uses the short form below 128 and the shortest long form above", () => {
  assert.equal(hex(encodeLength(0)), "00");
  assert.equal(hex(encodeLength(127)), "7f");
  assert.equal(hex(encodeLength(128)), "81 80");
  assert.equal(hex(encodeLength(255)), "81 ff");
  assert.equal(hex(encodeLength(256)), "82 01 00");
  assert.equal(hex(encodeLength(70000)), "83 01 11 70");
  assert.throws(() => encodeLength(-1), Asn1Error);
});

Deno.test("integer writes minimal two's complement", () => {
  assert.equal(hex(integer(0)), "02 01 00");
  assert.equal(hex(integer(2)), "02 01 02");
  assert.equal(hex(integer(127)), "02 01 7f");
  assert.equal(hex(integer(128)), "02 02 00 80");
  assert.equal(hex(integer(256)), "02 02 01 00");
  assert.equal(hex(integer(-1)), "02 01 ff");
  assert.equal(hex(integer(-128)), "02 01 80");
  assert.equal(hex(integer(-129)), "02 02 ff 7f");
  assert.equal(hex(integer(65537n)), "02 03 01 00 01");
});

Deno.test("oid encodes the first two arcs together and base-128 continuation bytes", () => {
  assert.equal(hex(oid("1.2.840.113549.1.1.11")), "06 09 2a 86 48 86 f7 0d 01 01 0b");
  assert.equal(hex(oid("2.5.29.17")), "06 03 55 1d 11");
  assert.equal(hex(oid("1.3.6.1.5.5.7.3.1")), "06 08 2b 06 01 05 05 07 03 01");
  assert.throws(() => oid("1"), Asn1Error);
  assert.throws(() => oid("1.x.3"), Asn1Error);
  assert.throws(() => oid("3.1"), Asn1Error);
});

Deno.test("boolean and nullValue use DER's canonical bytes", () => {
  assert.equal(hex(boolean(true)), "01 01 ff");
  assert.equal(hex(boolean(false)), "01 01 00");
  assert.equal(hex(nullValue()), "05 00");
});

Deno.test("namedBits drops trailing zero bits and counts the unused ones", () => {
  // digitalSignature(0) | keyEncipherment(2) | keyCertSign(5): 1010 0100, 2 unused bits.
  assert.equal(hex(namedBits([0, 2, 5])), "03 02 02 a4");
  assert.equal(hex(namedBits([0, 2])), "03 02 05 a0");
  assert.equal(hex(namedBits([8])), "03 03 07 00 80");
  assert.equal(hex(namedBits([])), "03 01 00");
  assert.equal(hex(bitString(Uint8Array.of(1, 2))), "03 03 00 01 02");
  assert.throws(() => bitString(new Uint8Array(0), 3), Asn1Error);
});

Deno.test("strings pick their types and reject characters outside them", () => {
  assert.equal(hex(printableString("A b")), "13 03 41 20 62");
  assert.equal(directoryString("node-1")[0], 0x13);
  assert.equal(directoryString("node-1@1700000000")[0], 0x0c, "'@' is not printable");
  assert.throws(() => printableString("a@b"), Asn1Error);
  assert.equal(hex(ia5String("a.b")), "16 03 61 2e 62");
  assert.throws(() => ia5String("ü"), Asn1Error);
});

Deno.test("utcTime and generalizedTime write whole UTC seconds", () => {
  const d = new Date(Date.UTC(2026, 0, 2, 3, 4, 5, 678));
  assert.equal(new TextDecoder().decode(utcTime(d).subarray(2)), "260102030405Z");
  assert.equal(new TextDecoder().decode(generalizedTime(d).subarray(2)), "20260102030405Z");
  assert.throws(() => utcTime(new Date(Date.UTC(2050, 0, 1))), Asn1Error);
});

Deno.test("x509Time switches to GeneralizedTime from 2050", () => {
  assert.equal(x509Time(new Date(Date.UTC(2049, 11, 31, 23, 59, 59)))[0], 0x17);
  assert.equal(x509Time(new Date(Date.UTC(2050, 0, 1)))[0], 0x18);
  assert.equal(x509Time(new Date(Date.UTC(1949, 11, 31)))[0], 0x18);
});

Deno.test("sequence, set and tags nest encodings", () => {
  assert.equal(hex(sequence()), "30 00");
  assert.equal(hex(sequence(integer(1), nullValue())), "30 05 02 01 01 05 00");
  // SET OF is sorted by encoding.
  assert.equal(hex(set(integer(2), integer(1))), "31 06 02 01 01 02 01 02");
  assert.equal(hex(contextTag(0, integer(2), true)), "a0 03 02 01 02");
  assert.equal(hex(implicitTag(7, octetString(Uint8Array.of(127, 0, 0, 1)))), "87 04 7f 00 00 01");
  assert.equal(hex(implicitTag(1, sequence())), "a1 00");
  assert.throws(() => implicitTag(31, nullValue()), Asn1Error);
});

Deno.test("pem wraps base64 at 64 characters", () => {
  const text = pem("TEST", new Uint8Array(100).fill(0xab));
  const lines = text.trimEnd().split("\n");
  assert.equal(lines[0], "-----BEGIN TEST-----");
  assert.equal(lines.at(-1), "-----END TEST-----");
  assert.equal(lines[1]!.length, 64);
  assert.equal(
    lines.slice(1, -1).join(""),
    btoa(String.fromCharCode(...new Uint8Array(100).fill(0xab))),
  );
});
