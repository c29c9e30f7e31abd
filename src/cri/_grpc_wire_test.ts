import assert from "node:assert/strict";
import {
  encodeGrpcMessage,
  GrpcCode,
  grpcFrame,
  GrpcFrameReader,
  GrpcStatusError,
  grpcTimeout,
  headerStatus,
  parseGrpcTimeout,
  unaryMessage,
} from "./_grpc_wire.ts";

/** A body that delivers `chunks` one read at a time. */
function body(...chunks: number[][]): ReadableStream<Uint8Array> {
  return ReadableStream.from(chunks.map((c) => Uint8Array.from(c)));
}

async function rejectsWith(p: Promise<unknown>, code: number, details: RegExp): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof GrpcStatusError, String(e));
    assert.equal(e.code, code);
    assert.match(e.details, details);
    return true;
  });
}

Deno.test("grpcFrame prefixes the message with a zero flag and its big-endian length", () => {
  assert.deepEqual([...grpcFrame(Uint8Array.of(7, 8, 9))], [0, 0, 0, 0, 3, 7, 8, 9]);
  assert.deepEqual([...grpcFrame(new Uint8Array(0))], [0, 0, 0, 0, 0]);
  assert.deepEqual([...grpcFrame(new Uint8Array(258)).subarray(0, 5)], [0, 0, 0, 1, 2]);
});

Deno.test("GrpcFrameReader reads messages however the body is cut into chunks", async () => {
  const frames = [...grpcFrame(Uint8Array.of(1, 2)), ...grpcFrame(new Uint8Array(0))];
  const third = [...grpcFrame(Uint8Array.of(3, 4, 5))];
  // Cut inside the first prefix, inside a message, and with an empty chunk.
  const r = new GrpcFrameReader(
    body(
      frames.slice(0, 3),
      frames.slice(3, 6),
      [],
      frames.slice(6),
      third.slice(0, 6),
      third.slice(6),
    ),
    100,
  );
  assert.deepEqual([...(await r.next())!], [1, 2]);
  assert.deepEqual([...(await r.next())!], []);
  assert.deepEqual([...(await r.next())!], [3, 4, 5]);
  assert.equal(await r.next(), undefined);
  // Two messages in one chunk.
  const both = new GrpcFrameReader(
    body([...grpcFrame(Uint8Array.of(1)), ...grpcFrame(Uint8Array.of(2))]),
    100,
  );
  assert.deepEqual([...(await both.next())!], [1]);
  assert.deepEqual([...(await both.next())!], [2]);
  assert.equal(await both.next(), undefined);
});

Deno.test("GrpcFrameReader refuses oversize, compressed and cut-off messages", async () => {
  await rejectsWith(
    new GrpcFrameReader(body([0, 0, 0, 0, 101]), 100).next(),
    GrpcCode.RESOURCE_EXHAUSTED,
    /^grpc: received message larger than max \(101 vs\. 100\)$/,
  );
  await rejectsWith(
    new GrpcFrameReader(body([1, 0, 0, 0, 1, 9]), 100).next(),
    GrpcCode.INTERNAL,
    /compressed flag set/,
  );
  await rejectsWith(
    new GrpcFrameReader(body([0, 0, 0, 0, 4, 1, 2]), 100).next(),
    GrpcCode.INTERNAL,
    /closed the stream in the middle of a message \(7 of 9 bytes\)/,
  );
  await rejectsWith(
    new GrpcFrameReader(body([0, 0]), 100).next(),
    GrpcCode.INTERNAL,
    /in the middle of a message \(2 of 5 bytes\)/,
  );
});

Deno.test("headerStatus reads trailers-only statuses, HTTP errors and foreign content", () => {
  const grpc = (extra: Record<string, string> = {}) =>
    new Headers({ "content-type": "application/grpc", ...extra });
  assert.equal(headerStatus(200, grpc()), undefined);
  assert.equal(headerStatus(200, grpc({ "grpc-status": "0" })), undefined);
  assert.equal(
    headerStatus(200, new Headers({ "content-type": "application/grpc+proto" })),
    undefined,
  );
  const failed = headerStatus(
    200,
    grpc({ "grpc-status": "5", "grpc-message": "not%20found%3A%20%22x%22" }),
  );
  assert.equal(failed?.code, GrpcCode.NOT_FOUND);
  assert.equal(failed?.details, 'not found: "x"');
  // A malformed escape is shown as it came.
  assert.equal(
    headerStatus(200, grpc({ "grpc-status": "2", "grpc-message": "100%" }))?.details,
    "100%",
  );
  assert.equal(headerStatus(200, grpc({ "grpc-status": "x" }))?.code, GrpcCode.INTERNAL);
  assert.equal(headerStatus(404, grpc())?.code, GrpcCode.UNIMPLEMENTED);
  assert.equal(headerStatus(503, grpc())?.code, GrpcCode.UNAVAILABLE);
  assert.equal(
    headerStatus(500, grpc())?.details,
    "unexpected HTTP status code received from server: 500",
  );
  const html = headerStatus(200, new Headers({ "content-type": "text/html" }));
  assert.equal(html?.code, GrpcCode.UNKNOWN);
  assert.match(html!.details, /unexpected content-type "text\/html"/);
});

Deno.test("grpcTimeout writes at most eight digits with the finest unit that fits", () => {
  assert.equal(grpcTimeout(240_000), "240000m");
  assert.equal(grpcTimeout(0.2), "1m");
  assert.equal(grpcTimeout(-5), "0m");
  assert.equal(grpcTimeout(99_999_999), "99999999m");
  assert.equal(grpcTimeout(100_000_000), "100000S");
});

Deno.test("unaryMessage takes the one message of a whole unary body", async () => {
  assert.deepEqual([...unaryMessage(grpcFrame(Uint8Array.of(4, 2)), 100)], [4, 2]);
  assert.deepEqual([...unaryMessage(grpcFrame(new Uint8Array(0)), 100)], []);
  const fails = (bytes: number[], code: number, details: RegExp) =>
    rejectsWith(
      Promise.resolve().then(() => unaryMessage(Uint8Array.from(bytes), 100)),
      code,
      details,
    );
  await fails([], GrpcCode.INTERNAL, /^server closed the stream without a response$/);
  await fails([0, 0, 0], GrpcCode.INTERNAL, /middle of a message \(3 of 5 bytes\)/);
  await fails([0, 0, 0, 0, 3, 1], GrpcCode.INTERNAL, /middle of a message \(6 of 8 bytes\)/);
  await fails(
    [...grpcFrame(Uint8Array.of(1)), ...grpcFrame(Uint8Array.of(2))],
    GrpcCode.INTERNAL,
    /^server sent more than one response$/,
  );
  await fails([0, 0, 0, 0, 101], GrpcCode.RESOURCE_EXHAUSTED, /larger than max \(101 vs\. 100\)/);
  await fails([1, 0, 0, 0, 1, 9], GrpcCode.INTERNAL, /compressed flag set/);
});

Deno.test("parseGrpcTimeout reads each unit and words a bad value as grpc-go does", () => {
  assert.equal(parseGrpcTimeout("2H"), 7_200_000);
  assert.equal(parseGrpcTimeout("3M"), 180_000);
  assert.equal(parseGrpcTimeout("10S"), 10_000);
  assert.equal(parseGrpcTimeout("99999999m"), 99_999_999);
  assert.equal(parseGrpcTimeout("1500u"), 1.5);
  assert.equal(parseGrpcTimeout("2000000n"), 2);
  assert.equal(parseGrpcTimeout(grpcTimeout(1234)), 1234);
  assert.throws(() => parseGrpcTimeout("1"), /timeout string is too short: "1"/);
  assert.throws(() => parseGrpcTimeout("123456789S"), /timeout string is too long/);
  assert.throws(() => parseGrpcTimeout("10x"), /timeout unit is not recognized: "10x"/);
  assert.throws(() => parseGrpcTimeout("-1S"), /parsing "-1": invalid syntax/);
});

Deno.test("encodeGrpcMessage percent-encodes '%' and octets outside printable ASCII", () => {
  assert.equal(encodeGrpcMessage("plain text ~!"), "plain text ~!");
  assert.equal(encodeGrpcMessage('100% full: "ü"\n'), '100%25 full: "%C3%BC"%0A');
  assert.equal(encodeGrpcMessage(""), "");
  // What the client decodes back.
  const text = "ünïcode\tand 50%";
  assert.equal(
    headerStatus(
      200,
      new Headers({ "grpc-status": "2", "grpc-message": encodeGrpcMessage(text) }),
    )?.details,
    text,
  );
});
