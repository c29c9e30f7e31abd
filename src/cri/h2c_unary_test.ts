import assert from "node:assert/strict";
import {
  encodeFrame,
  ErrorCode,
  Flag,
  type Frame,
  FrameParser,
  FrameType,
  Setting,
  settingsPayload,
  words,
} from "./_h2_frames.ts";
import { encodeHeaderBlock, type HeaderField, HpackDecoder } from "./_hpack.ts";
import { GrpcCode, grpcFrame } from "./_grpc_wire.ts";
import { h2cUnary, type H2cUnaryOptions } from "./h2c_unary.ts";

/** The server side of one connection, frame by frame, as a test scripts it. */
interface Peer {
  /** The client's next frame (the preface is checked and skipped). */
  next(): Promise<Frame>;
  /** The next frame of `type`, skipping others (kept in `skipped`). */
  until(type: number): Promise<Frame>;
  readonly skipped: Frame[];
  send(...frames: Uint8Array[]): Promise<void>;
  /** A header block's fields. */
  fields(f: Frame): HeaderField[];
}

/** A TCP server that runs `script` on each connection it accepts. */
function scripted(script: (peer: Peer, n: number) => Promise<void>) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const errors: unknown[] = [];
  let closed = false;
  const done = (async () => {
    let n = 0;
    for await (const conn of listener) {
      const parser = new FrameParser();
      const hpack = new HpackDecoder();
      const reader = conn.readable.getReader();
      const writer = conn.writable.getWriter();
      const skipped: Frame[] = [];
      const next = async (): Promise<Frame> => {
        for (;;) {
          const f = parser.next();
          if (f !== undefined) return f;
          const { value, done } = await reader.read();
          if (done) throw new Error("client closed");
          parser.push(value);
        }
      };
      const peer: Peer = {
        next,
        skipped,
        async until(type) {
          for (;;) {
            const f = await next();
            if (f.type === type) return f;
            skipped.push(f);
          }
        },
        async send(...frames) {
          for (const f of frames) await writer.write(f);
        },
        fields: (f) => hpack.decode(f.payload).fields,
      };
      await script(peer, n++).catch((e) => errors.push(e)).finally(() => {
        try {
          conn.close();
        } catch {
          // The client closed it.
        }
      });
    }
  })();
  return {
    port: listener.addr.port,
    errors,
    /** Stops accepting and waits for the scripts to end; idempotent. */
    async [Symbol.asyncDispose]() {
      if (!closed) {
        closed = true;
        listener.close();
      }
      await done;
    },
  };
}

/** Reads the client's frames until it closes the connection. */
async function untilClosed(peer: Peer): Promise<void> {
  try {
    for (;;) await peer.next();
  } catch {
    // Closed.
  }
}

const settings = (...s: (readonly [number, number])[]) =>
  encodeFrame(FrameType.SETTINGS, 0, 0, settingsPayload(s));
const headers = (fields: HeaderField[], flags: number) =>
  encodeFrame(FrameType.HEADERS, flags, 1, encodeHeaderBlock(fields));
const OK_HEADERS: HeaderField[] = [[":status", "200"], ["content-type", "application/grpc"]];

function call(port: number, more: Partial<H2cUnaryOptions> = {}) {
  return h2cUnary({
    hostname: "127.0.0.1",
    port,
    authority: `127.0.0.1:${port}`,
    path: "/test.Svc/Do",
    message: Uint8Array.of(1, 2, 3, 4, 5),
    userAgent: "kube-probe/1.36 grpc-go/1.79.3",
    timeoutMs: 2000,
    ...more,
  });
}

Deno.test("h2cUnary sends the call after the server's SETTINGS and reads a reply cut across frames", async () => {
  await using server = scripted(async (peer) => {
    const hello = await peer.next();
    assert.equal(hello.type, FrameType.SETTINGS);
    // Our stream may carry 2 octets until a WINDOW_UPDATE; a PING wants its ACK.
    await peer.send(
      settings([Setting.INITIAL_WINDOW_SIZE, 2]),
      encodeFrame(FrameType.PING, 0, 0, Uint8Array.of(1, 2, 3, 4, 5, 6, 7, 8)),
    );
    const h = await peer.until(FrameType.HEADERS);
    assert.equal(h.streamId, 1);
    const fields = new Map(peer.fields(h));
    assert.equal(fields.get(":path"), "/test.Svc/Do");
    assert.equal(fields.get(":authority"), `127.0.0.1:${server.port}`);
    assert.equal(fields.get("user-agent"), "kube-probe/1.36 grpc-go/1.79.3");
    assert.equal(fields.get("te"), "trailers");
    assert.match(fields.get("grpc-timeout") ?? "", /^\d+m$/);
    const first = await peer.until(FrameType.DATA);
    assert.equal(first.payload.length, 2);
    assert.equal(first.flags & Flag.END_STREAM, 0);
    await peer.send(encodeFrame(FrameType.WINDOW_UPDATE, 0, 1, words(100)));
    const rest = await peer.until(FrameType.DATA);
    assert.equal(rest.flags & Flag.END_STREAM, Flag.END_STREAM);
    assert.deepEqual([...first.payload, ...rest.payload], [
      ...grpcFrame(Uint8Array.of(1, 2, 3, 4, 5)),
    ]);
    assert.ok(peer.skipped.some((f) => f.type === FrameType.SETTINGS && f.flags & Flag.ACK));
    assert.ok(peer.skipped.some((f) => f.type === FrameType.PING && f.flags & Flag.ACK));
    const reply = grpcFrame(Uint8Array.of(9, 8, 7));
    const trailers = encodeHeaderBlock([["grpc-status", "0"]]);
    await peer.send(
      headers(OK_HEADERS, Flag.END_HEADERS),
      encodeFrame(FrameType.DATA, 0, 1, reply.subarray(0, 4)),
      encodeFrame(FrameType.DATA, 0, 1, reply.subarray(4)),
      // Trailers across a CONTINUATION.
      encodeFrame(FrameType.HEADERS, Flag.END_STREAM, 1, trailers.subarray(0, 1)),
      encodeFrame(FrameType.CONTINUATION, Flag.END_HEADERS, 1, trailers.subarray(1)),
    );
    // Each DATA frame is credited back on the connection and the stream.
    const credits = [await peer.until(FrameType.WINDOW_UPDATE)];
    while (credits.length < 4) credits.push(await peer.until(FrameType.WINDOW_UPDATE));
    assert.deepEqual(credits.map((f) => [f.streamId, f.payload[3]]), [[0, 4], [1, 4], [0, 4], [
      1,
      4,
    ]]);
  });
  assert.deepEqual(await call(server.port), { kind: "reply", message: Uint8Array.of(9, 8, 7) });
  // The script's own checks, once it has run to its end.
  await server[Symbol.asyncDispose]();
  assert.deepEqual(server.errors, []);
});

Deno.test("h2cUnary words the server's refusals as grpc-go does", async (t) => {
  const cases: Array<[string, Uint8Array[], number, string]> = [
    [
      "trailers-only",
      [headers(
        [...OK_HEADERS, ["grpc-status", "12"], ["grpc-message", "unknown service x%25"]],
        Flag.END_HEADERS | Flag.END_STREAM,
      )],
      GrpcCode.UNIMPLEMENTED,
      "unknown service x%",
    ],
    [
      "reset",
      [encodeFrame(FrameType.RST_STREAM, 0, 1, words(ErrorCode.REFUSED_STREAM))],
      GrpcCode.UNAVAILABLE,
      "stream terminated by RST_STREAM with error code: REFUSED_STREAM",
    ],
    [
      "goaway",
      [encodeFrame(FrameType.GOAWAY, 0, 0, words(0, ErrorCode.NO_ERROR))],
      GrpcCode.UNAVAILABLE,
      "the stream is rejected because server is draining the connection",
    ],
    [
      "no trailers",
      [
        headers(OK_HEADERS, Flag.END_HEADERS),
        encodeFrame(FrameType.DATA, Flag.END_STREAM, 1, grpcFrame(Uint8Array.of(1))),
      ],
      GrpcCode.INTERNAL,
      "server closed the stream without sending trailers",
    ],
    [
      "HTTP status",
      [headers([[":status", "404"]], Flag.END_HEADERS | Flag.END_STREAM)],
      GrpcCode.UNIMPLEMENTED,
      "unexpected HTTP status code received from server: 404",
    ],
    [
      "reset with an unknown code",
      [encodeFrame(FrameType.RST_STREAM, 0, 1, words(0x42))],
      GrpcCode.UNKNOWN,
      "stream terminated by RST_STREAM with error code: 0x42",
    ],
    [
      "OK without a message",
      [headers([...OK_HEADERS, ["grpc-status", "0"]], Flag.END_HEADERS | Flag.END_STREAM)],
      GrpcCode.INTERNAL,
      "server closed the stream without a response",
    ],
    [
      "a message over 4 MiB",
      [
        headers(OK_HEADERS, Flag.END_HEADERS),
        // Only the prefix comes: its declared length is enough to refuse the message.
        encodeFrame(FrameType.DATA, 0, 1, Uint8Array.of(0, 0, 0x40, 0, 1)),
      ],
      GrpcCode.RESOURCE_EXHAUSTED,
      "grpc: received message larger than max (4194305 vs. 4194304)",
    ],
    [
      "closed",
      [],
      GrpcCode.UNAVAILABLE,
      'connection error: desc = "error reading from server: EOF"',
    ],
  ];
  for (const [name, frames, code, details] of cases) {
    await t.step(name, async () => {
      await using server = scripted(async (peer) => {
        await peer.send(settings());
        await peer.until(FrameType.DATA);
        await peer.send(...frames);
      });
      const out = await call(server.port);
      await server[Symbol.asyncDispose]();
      assert.deepEqual(server.errors, []);
      assert.equal(out.kind, "status");
      if (out.kind !== "status") return;
      assert.deepEqual([out.status.code, out.status.details], [code, details]);
    });
  }
});

Deno.test("h2cUnary dials again with grpc-go's backoff until a server is ready", async () => {
  // The first connection ends before any SETTINGS (not ready); the second is served.
  await using server = scripted(async (peer, n) => {
    if (n === 0) return;
    await peer.send(settings());
    await peer.until(FrameType.DATA);
    await peer.send(
      headers(OK_HEADERS, Flag.END_HEADERS),
      encodeFrame(FrameType.DATA, 0, 1, grpcFrame(Uint8Array.of(7))),
      headers([["grpc-status", "0"]], Flag.END_HEADERS | Flag.END_STREAM),
    );
  });
  const t0 = performance.now();
  // random 0: the first wait is the base second less its jitter, 0.8 s.
  const out = await call(server.port, { random: () => 0 });
  const took = performance.now() - t0;
  assert.deepEqual(out, { kind: "reply", message: Uint8Array.of(7) });
  assert.ok(took >= 790 && took < 1800, `took ${took} ms`);
});

Deno.test("h2cUnary ends at its deadline: unconnected, or the call's DeadlineExceeded", async () => {
  // Accepted but never a SETTINGS frame: no connection is ready.
  await using silent = scripted(untilClosed);
  const t0 = performance.now();
  assert.deepEqual(await call(silent.port, { timeoutMs: 200, random: () => 0 }), {
    kind: "unconnected",
    error: "context deadline exceeded",
  });
  // At the deadline, not after the backoff's 0.8 s wait that the deadline cut short.
  const took = performance.now() - t0;
  assert.ok(took < 700, `took ${took} ms`);
  await using hung = scripted(async (peer) => {
    await peer.send(settings());
    await untilClosed(peer);
  });
  const out = await call(hung.port, { timeoutMs: 200 });
  assert.equal(out.kind === "status" && out.status.code, GrpcCode.DEADLINE_EXCEEDED);
  // The caller's own abort rejects with its reason.
  const ctl = new AbortController();
  setTimeout(() => ctl.abort(new Error("stop")), 50);
  await assert.rejects(call(hung.port, { signal: ctl.signal }), /stop/);
});
