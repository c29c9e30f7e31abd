import assert from "node:assert/strict";
import { join } from "node:path";
import * as api from "../../proto/runtime/v1/api.ts";
import { CriConnection, type CriMethod, criMethods, GrpcCode, isCriCode } from "./connection.ts";
import { GrpcServer, type GrpcServerOptions, GrpcStatusError } from "./grpc_server.ts";
import {
  encodeFrame,
  ErrorCode,
  Flag,
  type Frame,
  FrameParser,
  FrameType,
  PREFACE,
  Setting,
  settingsPayload,
  words,
} from "./_h2_frames.ts";
import { encodeHeaderBlock, HpackDecoder } from "./_hpack.ts";
import { encodeGrpcMessage, grpcFrame } from "./_grpc_wire.ts";
import { captureLogger } from "../testing/cm_fixtures.ts";
import { FakeClock } from "../util/clock.ts";

const RUNTIME = criMethods(api.RuntimeServiceDefinition);

/** A server on a socket in a fresh temp dir and a CriConnection to it; all go afterwards. */
async function withServer(
  setup: (server: GrpcServer) => void,
  fn: (conn: CriConnection, server: GrpcServer, path: string) => Promise<void>,
  opts: Partial<GrpcServerOptions> = {},
): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "grpc-server-" });
  const path = join(dir, "sub", "kubelet.sock");
  const server = await GrpcServer.listen({ path, ...opts });
  setup(server);
  const conn = new CriConnection({ endpoint: `unix://${path}` });
  try {
    await fn(conn, server, path);
  } finally {
    conn.close();
    await server.close();
    await Deno.remove(dir, { recursive: true });
  }
}

async function until(what: string, cond: () => boolean): Promise<void> {
  const end = Date.now() + 5_000;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** A promise that settles when `signal` aborts, with its reason. */
function aborted(signal: AbortSignal): Promise<unknown> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve(signal.reason);
    signal.addEventListener("abort", () => resolve(signal.reason), { once: true });
  });
}

/** Version answers with the request's version as runtimeVersion. */
const echo = (req: api.VersionRequest) =>
  api.VersionResponse.create({ runtimeName: "grpc-server-test", runtimeVersion: req.version });

Deno.test("GrpcServer answers CriConnection's unary calls, with messages past 64 KiB and 1 MiB both ways", async () => {
  const dir = await Deno.makeTempDir({ prefix: "grpc-server-" });
  try {
    // A stale socket file is replaced.
    const path = join(dir, "kubelet.sock");
    await Deno.writeTextFile(path, "stale");
    await using server = await GrpcServer.listen({ path });
    server.register(api.RuntimeServiceDefinition, { version: echo });
    const conn = new CriConnection({ endpoint: `unix://${path}` });
    try {
      for (const size of [0, 10, 100 * 1024, 1024 * 1024]) {
        const version = "v".repeat(size);
        const res = await conn.unary(RUNTIME.version, api.VersionRequest.create({ version }));
        assert.equal(res.runtimeName, "grpc-server-test");
        assert.equal(res.runtimeVersion.length, size);
      }
    } finally {
      conn.close();
    }
    await server.close();
    await assert.rejects(Deno.lstat(path), Deno.errors.NotFound);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("GrpcServer sends a handler's GrpcStatusError, and Unknown for any other throw", () =>
  withServer((s) =>
    s.register(api.RuntimeServiceDefinition, {
      version: (req) => {
        if (req.version === "status") {
          throw new GrpcStatusError(GrpcCode.FAILED_PRECONDITION, '100% full: "ünïcode"\nline');
        }
        throw new Error("plain failure");
      },
    }), async (conn) => {
    await assert.rejects(
      conn.unary(RUNTIME.version, api.VersionRequest.create({ version: "status" })),
      (e: unknown) =>
        isCriCode(e, GrpcCode.FAILED_PRECONDITION) &&
        e.details === '100% full: "ünïcode"\nline',
    );
    await assert.rejects(
      conn.unary(RUNTIME.version, api.VersionRequest.create({})),
      (e: unknown) => isCriCode(e, GrpcCode.UNKNOWN) && e.details === "plain failure",
    );
  }));

Deno.test("GrpcServer answers unknown services and methods Unimplemented, in grpc-go's words", () =>
  withServer((s) => s.register(api.RuntimeServiceDefinition, { version: echo }), async (conn) => {
    const calls: [CriMethod<api.VersionRequest, api.VersionResponse>, string][] = [
      [
        { ...RUNTIME.version, path: "/runtime.v1.ImageService/ImageFsInfo" },
        "unknown service runtime.v1.ImageService",
      ],
      [
        { ...RUNTIME.version, path: "/runtime.v1.RuntimeService/Nope" },
        "unknown method Nope for service runtime.v1.RuntimeService",
      ],
      [{ ...RUNTIME.version, path: "/nothing" }, 'malformed method name: "/nothing"'],
      [
        { ...RUNTIME.version, path: "/runtime.v1.RuntimeService/Status" },
        "method Status not implemented",
      ],
    ];
    for (const [method, details] of calls) {
      await assert.rejects(
        conn.unary(method, api.VersionRequest.create({})),
        (e: unknown) => isCriCode(e, GrpcCode.UNIMPLEMENTED) && e.details === details,
      );
    }
  }));

Deno.test("GrpcServer streams a handler's messages and ends the call when the client cancels", async () => {
  let handlerSignal: AbortSignal | undefined;
  await withServer((s) =>
    s.register(api.RuntimeServiceDefinition, {
      async *getContainerEvents(_req, ctx) {
        handlerSignal = ctx.signal;
        for (let i = 0; i < 3; i++) {
          yield api.ContainerEventResponse.create({ containerId: `c${i}` });
        }
        if (ctx.metadata.get("x-forever") === null) return;
        await aborted(ctx.signal);
      },
    }), async (conn) => {
    const got: string[] = [];
    for await (const e of conn.stream(RUNTIME.getContainerEvents, {})) got.push(e.containerId);
    assert.deepEqual(got, ["c0", "c1", "c2"]);
    assert.equal(handlerSignal?.aborted, true); // the call is over
  });
  // Cancel: the client stops reading a stream that has more to come.
  await withServer((s) =>
    s.register(api.RuntimeServiceDefinition, {
      async *getContainerEvents(_req, ctx) {
        handlerSignal = ctx.signal;
        for (let i = 0;; i++) {
          yield api.ContainerEventResponse.create({ containerId: `c${i}` });
          await new Promise((r) => setTimeout(r, 1));
        }
      },
    }), async (conn) => {
    const ctl = new AbortController();
    let n = 0;
    for await (const _ of conn.stream(RUNTIME.getContainerEvents, {}, { signal: ctl.signal })) {
      if (++n === 2) ctl.abort();
    }
    const reason = await aborted(handlerSignal!);
    assert.ok(reason instanceof GrpcStatusError && reason.code === GrpcCode.CANCELLED);
  });
});

Deno.test("GrpcServer aborts a unary handler when the client cancels", async () => {
  let reason: unknown;
  await withServer((s) =>
    s.register(api.RuntimeServiceDefinition, {
      version: async (_req, ctx) => {
        reason = await aborted(ctx.signal);
        return api.VersionResponse.create({});
      },
    }), async (conn) => {
    const ctl = new AbortController();
    const call = conn.unary(RUNTIME.version, { version: "" }, { signal: ctl.signal });
    setTimeout(() => ctl.abort(), 20);
    await assert.rejects(call, (e: unknown) => isCriCode(e, GrpcCode.CANCELLED));
    await until("the handler's signal", () => reason !== undefined);
    assert.equal((reason as GrpcStatusError).code, GrpcCode.CANCELLED);
  });
});

Deno.test("GrpcServer ends a call DeadlineExceeded at its grpc-timeout", async () => {
  const clock = new FakeClock();
  let reason: unknown;
  await withServer((s) =>
    s.register(api.RuntimeServiceDefinition, {
      version: async (_req, ctx) => {
        reason = await aborted(ctx.signal);
        return api.VersionResponse.create({});
      },
    }), async (conn) => {
    // The client's own deadline is far off; the server's clock reaches it first.
    const call = conn.unary(RUNTIME.version, { version: "" }, { timeoutMs: 60_000 });
    await until("the call to start", () => clock.waiters === 1);
    clock.step(60_000);
    await assert.rejects(
      call,
      (e: unknown) =>
        isCriCode(e, GrpcCode.DEADLINE_EXCEEDED) && e.details === "context deadline exceeded",
    );
    assert.equal((reason as GrpcStatusError).code, GrpcCode.DEADLINE_EXCEEDED);
  }, { clock });
});

Deno.test("GrpcServer refuses a request over maxReceiveMessageBytes ResourceExhausted", () =>
  withServer((s) => s.register(api.RuntimeServiceDefinition, { version: echo }), async (conn) => {
    const req = api.VersionRequest.create({ version: "x".repeat(2000) });
    const length = api.VersionRequest.encode(req).finish().length;
    await assert.rejects(conn.unary(RUNTIME.version, req), (e: unknown) => {
      assert.ok(isCriCode(e, GrpcCode.RESOURCE_EXHAUSTED), String(e));
      assert.equal(e.details, `grpc: received message larger than max (${length} vs. 1000)`);
      return true;
    });
    // The connection is still good.
    assert.equal((await conn.unary(RUNTIME.version, { version: "ok" })).runtimeVersion, "ok");
  }, { maxReceiveMessageBytes: 1000 }));

Deno.test("GrpcServer close ends streams, lets unary calls finish, and removes the socket", async () => {
  const dir = await Deno.makeTempDir({ prefix: "grpc-server-" });
  const path = join(dir, "kubelet.sock");
  const server = await GrpcServer.listen({ path, closeGracePeriodMs: 5_000 });
  let release = () => {};
  let streamReason: unknown;
  server.register(api.RuntimeServiceDefinition, {
    version: () =>
      new Promise((resolve) =>
        release = () => resolve(api.VersionResponse.create({ runtimeName: "late" }))
      ),
    async *getContainerEvents(_req, ctx) {
      yield api.ContainerEventResponse.create({ containerId: "first" });
      streamReason = await aborted(ctx.signal);
    },
  });
  const conn = new CriConnection({ endpoint: `unix://${path}` });
  try {
    const events: string[] = [];
    const streaming = (async () => {
      for await (const e of conn.stream(RUNTIME.getContainerEvents, {})) events.push(e.containerId);
    })();
    await until("the first event", () => events.length === 1);
    const unary = conn.unary(RUNTIME.version, { version: "" });
    await new Promise((r) => setTimeout(r, 20));
    const closing = server.close();
    await streaming;
    assert.equal((streamReason as GrpcStatusError).code, GrpcCode.UNAVAILABLE);
    release();
    assert.equal((await unary).runtimeName, "late");
    await closing;
    await server.close(); // idempotent
    await assert.rejects(Deno.lstat(path), Deno.errors.NotFound);
    await assert.rejects(
      conn.unary(RUNTIME.version, { version: "" }),
      (e: unknown) => isCriCode(e, GrpcCode.UNAVAILABLE),
    );
  } finally {
    conn.close();
    await server.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("GrpcServer's close leaves alone a socket a new server made at the same path", async () => {
  // A plugin or the kubelet restarting its server: Deno unlinks a unix socket when its listener
  // is dropped, which the old server's pending accept delayed past close() (seen in 1 of 3 to 10
  // restarts).
  const dir = await Deno.makeTempDir({ prefix: "grpc-server-" });
  const path = join(dir, "plugin.sock");
  try {
    for (let i = 0; i < 30; i++) {
      const old = await GrpcServer.listen({ path, closeGracePeriodMs: 0 });
      await old.close();
      const next = await GrpcServer.listen({ path, closeGracePeriodMs: 0 });
      await new Promise((r) => setTimeout(r, 5));
      const there = await Deno.lstat(path).then(() => true, () => false);
      await next.close();
      assert.ok(there, `restart ${i}: the new server's socket is gone`);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("GrpcServer.serve serves on a TCP listener given and removes no file at close", async () => {
  const server = GrpcServer.serve(Deno.listen({ hostname: "127.0.0.1", port: 0 }), {
    closeGracePeriodMs: 0,
  });
  server.register(api.RuntimeServiceDefinition, { version: echo });
  try {
    assert.equal(server.path, `127.0.0.1:${server.port}`);
    const client = Deno.createHttpClient({ http1: false, http2: true });
    try {
      const res = await fetch(`http://127.0.0.1:${server.port}${RUNTIME.version.path}`, {
        method: "POST",
        client,
        headers: { "content-type": "application/grpc", te: "trailers" },
        body: grpcFrame(api.VersionRequest.encode({ version: "tcp" }).finish()),
      });
      const body = new Uint8Array(await res.arrayBuffer());
      assert.equal(api.VersionResponse.decode(body.subarray(5)).runtimeVersion, "tcp");
    } finally {
      client.close();
    }
  } finally {
    await server.close();
  }
});

/** crictl as tests/setup.ts builds it (tests/control_plane_build.ts's cache). */
const CRICTL = `${Deno.env.get("HOME")}/.cache/kubelet-ts/bin/crictl-v1.36.0/crictl`;
const haveCrictl = (() => {
  try {
    return Deno.statSync(CRICTL).isFile;
  } catch {
    return false;
  }
})();
// Skipped loudly without it, outside CI; under CI=true a missing crictl fails the test.
if (!haveCrictl && Deno.env.get("CI") !== "true") {
  console.error(`SKIP GrpcServer's grpc-go test: no ${CRICTL} (deno task test builds it)`);
}

Deno.test({
  name: "GrpcServer answers crictl (grpc-go) version",
  ignore: !haveCrictl && Deno.env.get("CI") !== "true",
  fn: () =>
    withServer((s) =>
      s.register(api.RuntimeServiceDefinition, {
        version: () =>
          api.VersionResponse.create({
            version: "0.1.0",
            runtimeName: "kubelet-ts-test",
            runtimeVersion: "v9.8.7",
            runtimeApiVersion: "v1",
          }),
      }), async (_conn, _server, path) => {
      const out = await new Deno.Command(CRICTL, {
        args: [
          "--runtime-endpoint",
          `unix://${path}`,
          "--image-endpoint",
          `unix://${path}`,
          "--timeout",
          "10s",
          "version",
        ],
        stdout: "piped",
        stderr: "piped",
      }).output();
      const text = new TextDecoder().decode(out.stdout);
      assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
      assert.match(text, /RuntimeName:\s+kubelet-ts-test/);
      assert.match(text, /RuntimeVersion:\s+v9\.8\.7/);
    }),
});

/** A hand-driven HTTP/2 client on a raw socket. */
class RawClient {
  readonly frames: Frame[] = [];
  readonly #parser = new FrameParser({ preface: false, maxFrameSize: 2 ** 24 - 1 });
  readonly done: Promise<void>;

  private constructor(readonly conn: Deno.Conn) {
    this.done = this.#read();
  }

  static async connect(path: string): Promise<RawClient> {
    return new RawClient(await Deno.connect({ transport: "unix", path }));
  }

  async write(...chunks: Uint8Array[]): Promise<void> {
    for (const c of chunks) {
      for (let at = 0; at < c.length;) at += await this.conn.write(c.subarray(at));
    }
  }

  /** The first frame (from `from` on) that `pred` accepts. */
  async frame(pred: (f: Frame) => boolean, from = 0): Promise<Frame> {
    let found: Frame | undefined;
    await until("a frame", () => (found = this.frames.slice(from).find(pred)) !== undefined);
    return found!;
  }

  async #read(): Promise<void> {
    const buf = new Uint8Array(65536);
    try {
      for (;;) {
        const n = await this.conn.read(buf);
        if (n === null) return;
        this.#parser.push(buf.subarray(0, n));
        for (let f = this.#parser.next(); f; f = this.#parser.next()) this.frames.push(f);
      }
    } catch {
      // Closed.
    }
  }

  close(): void {
    try {
      this.conn.close();
    } catch {
      // Already closed.
    }
  }
}

const HELLO = [PREFACE, encodeFrame(FrameType.SETTINGS, 0, 0)];

function requestHeaders(path = "/runtime.v1.RuntimeService/Version"): Uint8Array {
  return encodeHeaderBlock([
    [":method", "POST"],
    [":scheme", "http"],
    [":path", path],
    [":authority", "localhost"],
    ["content-type", "application/grpc"],
    ["te", "trailers"],
  ]);
}

function goAwayCode(f: Frame): number {
  return new DataView(f.payload.buffer, f.payload.byteOffset).getUint32(4);
}

Deno.test("GrpcServer closes a malformed client's connection with GOAWAY and serves the next", async () => {
  const { logger, lines } = captureLogger();
  await withServer(
    (s) => s.register(api.RuntimeServiceDefinition, { version: echo }),
    async (conn, _s, path) => {
      const cases: [string, Uint8Array[], number][] = [
        [
          "HTTP/1.1",
          [new TextEncoder().encode("GET / HTTP/1.1\r\nHost: x\r\n\r\n")],
          ErrorCode.PROTOCOL_ERROR,
        ],
        [
          "DATA on stream 0",
          [...HELLO, encodeFrame(FrameType.DATA, 0, 0, Uint8Array.of(1))],
          ErrorCode.PROTOCOL_ERROR,
        ],
        ["bad HPACK", [
          ...HELLO,
          encodeFrame(FrameType.HEADERS, Flag.END_HEADERS, 1, Uint8Array.of(0x80)),
        ], ErrorCode.COMPRESSION_ERROR],
        [
          "frame too large",
          [...HELLO, encodeFrame(FrameType.DATA, 0, 1, new Uint8Array(20_000))],
          ErrorCode.FRAME_SIZE_ERROR,
        ],
        ["first frame not SETTINGS", [
          PREFACE,
          encodeFrame(FrameType.PING, 0, 0, new Uint8Array(8)),
        ], ErrorCode.PROTOCOL_ERROR],
        [
          "CONTINUATION alone",
          [...HELLO, encodeFrame(FrameType.CONTINUATION, Flag.END_HEADERS, 1)],
          ErrorCode.PROTOCOL_ERROR,
        ],
        [
          "garbage",
          [...HELLO, crypto.getRandomValues(new Uint8Array(9)).fill(0xff, 0, 3)],
          ErrorCode.FRAME_SIZE_ERROR,
        ],
      ];
      for (const [name, bytes, code] of cases) {
        const raw = await RawClient.connect(path);
        await raw.write(...bytes).catch(() => {});
        await raw.done; // the server closes the socket
        const goAway = raw.frames.find((f) => f.type === FrameType.GOAWAY);
        assert.equal(goAway && goAwayCode(goAway), code, name);
        raw.close();
        assert.equal((await conn.unary(RUNTIME.version, { version: name })).runtimeVersion, name);
      }
      assert.ok(lines.some((l) => l.includes("HTTP/2 client protocol error")), lines.join("\n"));
    },
    { logger },
  );
});

Deno.test("GrpcServer keeps to the client's windows and frame size, and credits request DATA", () =>
  withServer(
    (s) => s.register(api.RuntimeServiceDefinition, { version: echo }),
    async (_conn, _s, path) => {
      const raw = await RawClient.connect(path);
      try {
        // A 1000-octet stream window; the connection window stays 65535.
        await raw.write(
          PREFACE,
          encodeFrame(
            FrameType.SETTINGS,
            0,
            0,
            settingsPayload([[Setting.INITIAL_WINDOW_SIZE, 1000]]),
          ),
          encodeFrame(FrameType.PING, 0, 0, Uint8Array.of(1, 2, 3, 4, 5, 6, 7, 8)),
        );
        const pong = await raw.frame((f) => f.type === FrameType.PING);
        assert.equal(pong.flags & Flag.ACK, Flag.ACK);
        assert.deepEqual([...pong.payload], [1, 2, 3, 4, 5, 6, 7, 8]);
        await raw.frame((f) => f.type === FrameType.SETTINGS && (f.flags & Flag.ACK) !== 0);
        // A 100 KiB request, its header block cut into HEADERS (padded) and CONTINUATION, its
        // body in 16 KiB DATA frames as the server's windows allow.
        const block = requestHeaders();
        const pad = 7;
        const first = new Uint8Array([pad, ...block.subarray(0, 10), ...new Uint8Array(pad)]);
        await raw.write(
          encodeFrame(FrameType.HEADERS, Flag.PADDED, 1, first),
          encodeFrame(FrameType.PRIORITY, 0, 1, new Uint8Array(5)),
        ).catch(() => {});
        // PRIORITY inside a header block is a protocol error: start over on a new connection.
        await raw.done;
        assert.equal(
          goAwayCode(raw.frames.find((f) => f.type === FrameType.GOAWAY)!),
          ErrorCode.PROTOCOL_ERROR,
        );
        raw.close();

        const c = await RawClient.connect(path);
        try {
          await c.write(
            PREFACE,
            encodeFrame(
              FrameType.SETTINGS,
              0,
              0,
              settingsPayload([[Setting.INITIAL_WINDOW_SIZE, 1000]]),
            ),
            encodeFrame(FrameType.HEADERS, Flag.PADDED, 1, first),
            encodeFrame(FrameType.CONTINUATION, Flag.END_HEADERS, 1, block.subarray(10)),
          );
          const body = grpcFrame(
            api.VersionRequest.encode({ version: "v".repeat(100 * 1024) }).finish(),
          );
          let sent = 0;
          const credited = (stream: number) =>
            c.frames.filter((f) => f.type === FrameType.WINDOW_UPDATE && f.streamId === stream)
              .reduce(
                (n, f) => n + new DataView(f.payload.buffer, f.payload.byteOffset).getUint32(0),
                0,
              );
          // What the server lets us send: its windows (both 65535) plus what it credited back.
          const credit = () => Math.min(65_535 + credited(0), 65_535 + credited(1)) - sent;
          while (sent < body.length) {
            await until("the server to credit request DATA", () => credit() > 0);
            const n = Math.min(16_384, body.length - sent, credit());
            const end = sent + n === body.length ? Flag.END_STREAM : 0;
            await c.write(encodeFrame(FrameType.DATA, end, 1, body.subarray(sent, sent + n)));
            sent += n;
          }
          assert.ok(c.frames.some((f) => f.type === FrameType.WINDOW_UPDATE && f.streamId === 1));
          // The reply: HEADERS, then DATA within the 1000-octet stream window.
          await c.frame((f) => f.type === FrameType.DATA);
          await new Promise((r) => setTimeout(r, 20));
          const data = () => c.frames.filter((f) => f.type === FrameType.DATA && f.streamId === 1);
          assert.equal(data().reduce((n, f) => n + f.payload.length, 0), 1000);
          // Open the stream window: the rest comes, in frames of at most 16 KiB, then trailers.
          await c.write(
            encodeFrame(FrameType.WINDOW_UPDATE, 0, 1, words(1_000_000)),
            encodeFrame(FrameType.WINDOW_UPDATE, 0, 0, words(1_000_000)),
          );
          const trailers = await c.frame((f) =>
            f.type === FrameType.HEADERS && (f.flags & Flag.END_STREAM) !== 0
          );
          assert.ok(data().every((f) => f.payload.length <= 16_384));
          const reply = new Uint8Array(data().reduce((n, f) => n + f.payload.length, 0));
          data().reduce((at, f) => (reply.set(f.payload, at), at + f.payload.length), 0);
          assert.equal(
            api.VersionResponse.decode(reply.subarray(5)).runtimeVersion.length,
            100 * 1024,
          );
          const fields = new HpackDecoder().decode(trailers.payload).fields;
          assert.deepEqual(fields, [["grpc-status", "0"], ["grpc-message", ""]]);
        } finally {
          c.close();
          await c.done;
        }
      } finally {
        raw.close();
        await raw.done;
      }
    },
  ));

Deno.test("GrpcServer answers requests gRPC does not allow as grpc-go does", () =>
  withServer(
    (s) => s.register(api.RuntimeServiceDefinition, { version: echo }),
    async (_conn, _s, path) => {
      const c = await RawClient.connect(path);
      try {
        await c.write(...HELLO);
        const base: [string, string][] = [
          [":method", "POST"],
          [":scheme", "http"],
          [":path", "/runtime.v1.RuntimeService/Version"],
          [":authority", "localhost"],
          ["content-type", "application/grpc"],
        ];
        const cases: [[string, string][], Uint8Array, string, string, string][] = [
          [
            [["content-type", "text/plain"]],
            new Uint8Array(0),
            "415",
            "3",
            'invalid gRPC request content-type "text/plain"',
          ],
          [
            [[":method", "GET"]],
            new Uint8Array(0),
            "405",
            "13",
            'Received a HEADERS frame with :method "GET" which should be POST',
          ],
          [
            [["grpc-timeout", "1x"]],
            new Uint8Array(0),
            "400",
            "13",
            'malformed grpc-timeout: transport: timeout unit is not recognized: "1x"',
          ],
          [
            [["grpc-encoding", "gzip"]],
            new Uint8Array(0),
            "200",
            "12",
            'grpc: Decompressor is not installed for grpc-encoding "gzip"',
          ],
          [
            [],
            Uint8Array.of(1, 0, 0, 0, 0),
            "200",
            "13",
            "grpc: compressed flag set with identity or empty encoding",
          ],
          [
            [],
            new Uint8Array(0),
            "200",
            "13",
            "cardinality violation: received no request message from non-client-streaming RPC",
          ],
          [
            [],
            new Uint8Array([...grpcFrame(new Uint8Array(0)), ...grpcFrame(new Uint8Array(0))]),
            "200",
            "13",
            "cardinality violation: received multiple request messages for non-client-streaming RPC",
          ],
          [[], Uint8Array.of(0, 0, 0, 0, 9, 1), "200", "13", "unexpected EOF"],
        ];
        for (const [i, [changes, body, httpStatus, code, message]] of cases.entries()) {
          const id = 2 * i + 1;
          const fields = new Map(base);
          for (const [k, v] of changes) fields.set(k, v);
          await c.write(
            encodeFrame(
              FrameType.HEADERS,
              Flag.END_HEADERS,
              id,
              encodeHeaderBlock([...fields]),
            ),
            encodeFrame(FrameType.DATA, Flag.END_STREAM, id, body),
          );
          const reply = await c.frame((f) => f.type === FrameType.HEADERS && f.streamId === id);
          assert.equal(reply.flags & Flag.END_STREAM, Flag.END_STREAM); // trailers-only
          assert.deepEqual(new HpackDecoder().decode(reply.payload).fields, [
            [":status", httpStatus],
            ["content-type", "application/grpc"],
            ["grpc-status", code],
            ["grpc-message", encodeGrpcMessage(message)],
          ], message);
        }
      } finally {
        c.close();
        await c.done;
      }
    },
  ));
