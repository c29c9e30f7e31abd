import assert from "node:assert/strict";
import {
  type DBusMessage,
  DBusWireError,
  decodeMessage,
  encodeMessage,
  messageLength,
  MessageType,
  Reader,
  splitSignature,
  Writer,
} from "./_dbus_marshal.ts";

function roundTrip(sig: string, value: Parameters<Writer["value"]>[1]) {
  const w = new Writer();
  w.value(sig, value);
  return new Reader(w.bytes()).value(sig);
}

Deno.test("splitSignature splits complete types", () => {
  assert.deepEqual(splitSignature("sa{sv}(ib)at"), ["s", "a{sv}", "(ib)", "at"]);
  assert.throws(() => splitSignature("a{sv"), /unclosed/);
  assert.throws(() => splitSignature("z"), /unknown type code 'z'/);
});

Deno.test("Writer and Reader round-trip every type the shutdown manager meets", () => {
  assert.equal(roundTrip("y", 255), 255);
  assert.equal(roundTrip("b", true), true);
  assert.equal(roundTrip("n", -2), -2);
  assert.equal(roundTrip("q", 65535), 65535);
  assert.equal(roundTrip("i", -7), -7);
  assert.equal(roundTrip("u", 4294967295), 4294967295);
  assert.equal(roundTrip("x", -5n), -5n);
  assert.equal(roundTrip("t", 18446744073709551615n), 18446744073709551615n);
  assert.equal(roundTrip("d", 1.5), 1.5);
  assert.equal(roundTrip("s", "héllo"), "héllo");
  assert.equal(roundTrip("o", "/org/freedesktop/login1"), "/org/freedesktop/login1");
  assert.deepEqual(roundTrip("v", { signature: "t", value: 5_000_000n }), {
    signature: "t",
    value: 5_000_000n,
  });
  assert.deepEqual(
    roundTrip("a{sv}", [["a", { signature: "b", value: false }], ["b", {
      signature: "as",
      value: ["x", "y"],
    }]]),
    [["a", { signature: "b", value: false }], ["b", { signature: "as", value: ["x", "y"] }]],
  );
  assert.deepEqual(roundTrip("(yt)", [1, 2n]), [1, 2n]);
  assert.deepEqual(roundTrip("at", []), []);
});

Deno.test("Writer pads an empty array of 8-aligned elements (the D-Bus spec's rule)", () => {
  const w = new Writer();
  w.value("at", []);
  // Length 0, then padding to 8 for the (absent) first element.
  assert.deepEqual([...w.bytes()], [0, 0, 0, 0, 0, 0, 0, 0]);
});

Deno.test("Writer refuses a value that does not fit its type", () => {
  assert.throws(() => new Writer().value("s", 3), DBusWireError);
  assert.throws(() => new Writer().value("b", 1), /is not a 'b'/);
  assert.throws(() => new Writer().value("(ss)", ["one"]), DBusWireError);
});

Deno.test("Reader refuses truncated bytes, bad booleans and runaway arrays", () => {
  assert.throws(() => new Reader(new Uint8Array([5, 0, 0, 0, 0x61])).value("s"), /message ends/);
  assert.throws(() => new Reader(new Uint8Array([2, 0, 0, 0])).value("b"), /boolean value 2/);
  assert.throws(() => new Reader(new Uint8Array([0xff, 0xff, 0, 0])).value("ay"), /message ends/);
});

Deno.test("encodeMessage and decodeMessage round-trip a signal, and messageLength frames it", () => {
  const m: DBusMessage = {
    type: MessageType.signal,
    flags: 0,
    serial: 7,
    path: "/org/freedesktop/login1",
    interface: "org.freedesktop.login1.Manager",
    member: "PrepareForShutdown",
    signature: "b",
    body: [true],
  };
  const bytes = encodeMessage(m);
  const two = new Uint8Array(bytes.length * 2);
  two.set(bytes);
  two.set(bytes, bytes.length);
  assert.equal(messageLength(two), bytes.length);
  assert.equal(messageLength(bytes.subarray(0, bytes.length - 1)), undefined);
  assert.deepEqual(decodeMessage(bytes), m);
});

Deno.test("messageLength refuses big-endian messages, which we do not speak", () => {
  const bytes = encodeMessage({ type: 1, flags: 0, serial: 1, body: [] });
  bytes[0] = 0x42;
  assert.throws(() => messageLength(bytes), /endianness 'B' not supported/);
});
