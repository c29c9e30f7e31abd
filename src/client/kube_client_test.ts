import assert from "node:assert/strict";
import { concatBytes } from "../util/bytes.ts";
import { testCA, testServerCert } from "../testing/cert_fixtures.ts";
import { FakeClock } from "../util/clock.ts";
import { BODY_PIECE_BYTES, KubeClient, requestBody } from "./kube_client.ts";
import { MetricsRegistry } from "../metrics/metrics.ts";
import { parseExposition } from "../metrics/prometheus.ts";
import { RestClientMetrics } from "../metrics/rest_client_metrics.ts";

async function bytesOf(body: Uint8Array | ReadableStream<Uint8Array>): Promise<Uint8Array[]> {
  if (body instanceof Uint8Array) return [body];
  return await Array.fromAsync(body);
}

Deno.test("requestBody sends a body of one piece whole", async () => {
  const text = JSON.stringify({ status: { message: "é".padEnd(BODY_PIECE_BYTES - 40, "x") } });
  const pieces = await bytesOf(requestBody(text));
  assert.equal(pieces.length, 1);
  assert.equal(new TextDecoder().decode(pieces[0]), text);
});

Deno.test("requestBody cuts a longer body into pieces the h2 crate copies", async () => {
  const text = JSON.stringify({ status: { message: "ü".padEnd(3 * BODY_PIECE_BYTES, "y") } });
  const pieces = await bytesOf(requestBody(text));
  assert.equal(pieces.length, 4);
  for (const p of pieces) assert.ok(p.length <= BODY_PIECE_BYTES && p.length < 1024, `${p.length}`);
  assert.equal(new TextDecoder().decode(concatBytes(pieces)), text);
});

/** One HTTP/2 frame as the fake server read it. */
interface Frame {
  readonly type: number;
  readonly flags: number;
  readonly stream: number;
  readonly payload: Uint8Array;
}

const DATA = 0x0;
const HEADERS = 0x1;
const SETTINGS = 0x4;
const PING = 0x6;
const END_STREAM = 0x1;
const ACK = 0x1;
const END_HEADERS = 0x4;

function frame(type: number, flags: number, stream: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(9 + payload.length);
  const v = new DataView(out.buffer);
  v.setUint32(0, payload.length << 8);
  out[3] = type;
  out[4] = flags;
  v.setUint32(5, stream);
  out.set(payload, 9);
  return out;
}

/**
 * A TLS server that speaks just enough HTTP/2 (RFC 9113) to answer each request `{}` with status
 * 200 (HPACK static index 8), and records every frame the client sent.
 */
function fakeH2Server(cert: { certPem: string; keyPem: string }) {
  const listener = Deno.listenTls({
    hostname: "127.0.0.1",
    port: 0,
    cert: cert.certPem,
    key: cert.keyPem,
    alpnProtocols: ["h2"],
  });
  const frames: Frame[] = [];
  const serve = async (conn: Deno.TlsConn) => {
    await conn.handshake();
    await conn.write(frame(SETTINGS, 0, 0, new Uint8Array()));
    let buf: Uint8Array = new Uint8Array();
    let prefaceLeft = 24;
    const chunk = new Uint8Array(65536);
    for (;;) {
      const n = await conn.read(chunk);
      if (n === null) return;
      buf = concatBytes([buf, chunk.subarray(0, n)]);
      if (prefaceLeft > 0) {
        const skip = Math.min(prefaceLeft, buf.length);
        buf = buf.subarray(skip);
        prefaceLeft -= skip;
      }
      while (buf.length >= 9) {
        const v = new DataView(buf.buffer, buf.byteOffset);
        const length = v.getUint32(0) >>> 8;
        if (buf.length < 9 + length) break;
        const f = {
          type: buf[3]!,
          flags: buf[4]!,
          stream: v.getUint32(5) & 0x7fffffff,
          payload: buf.slice(9, 9 + length),
        };
        buf = buf.subarray(9 + length);
        frames.push(f);
        if (f.type === SETTINGS && !(f.flags & ACK)) {
          await conn.write(frame(SETTINGS, ACK, 0, new Uint8Array()));
        } else if (f.type === PING && !(f.flags & ACK)) {
          await conn.write(frame(PING, ACK, 0, f.payload));
        } else if ((f.type === HEADERS || f.type === DATA) && f.flags & END_STREAM) {
          await conn.write(frame(HEADERS, END_HEADERS, f.stream, new Uint8Array([0x88])));
          await conn.write(frame(DATA, END_STREAM, f.stream, new TextEncoder().encode("{}")));
        }
      }
    }
  };
  const conns: Promise<void>[] = [];
  const accepting = (async () => {
    for await (const conn of listener) {
      conns.push(serve(conn).catch(() => {}).finally(() => conn.close()));
    }
  })();
  return {
    port: (listener.addr as Deno.NetAddr).port,
    frames,
    async close() {
      listener.close();
      await accepting.catch(() => {});
      await Promise.all(conns);
    },
  };
}

Deno.test("KubeClient sends a long body over HTTP/2 in DATA frames under 1024 bytes", async () => {
  const ca = await testCA();
  const server = fakeH2Server(await testServerCert(ca));
  const client = new KubeClient({
    config: {
      server: `https://127.0.0.1:${server.port}`,
      caPem: ca.certPem,
      insecureSkipTLSVerify: false,
      source: "test",
    },
    clock: new FakeClock(Date.now()),
    qps: -1,
    userAgent: "test",
  });
  try {
    const status = { status: { message: "m".padEnd(5000, "z") } };
    await client.patch("/api/v1/namespaces/ns/pods/p/status", status, "strategic");
    const small = { status: { message: "short" } };
    await client.patch("/api/v1/namespaces/ns/pods/p/status", small, "strategic");
    const byStream = Map.groupBy(server.frames.filter((f) => f.type === DATA), (f) => f.stream);
    const bodies = [...byStream.values()];
    assert.equal(bodies.length, 2);
    const [long, short] = bodies as [Frame[], Frame[]];
    for (const f of long) assert.ok(f.payload.length < 1024, `DATA frame of ${f.payload.length}`);
    const text = (fs: Frame[]) => new TextDecoder().decode(concatBytes(fs.map((f) => f.payload)));
    assert.deepEqual(JSON.parse(text(long)), status);
    assert.equal(long.filter((f) => f.payload.length > 0).length, 6);
    assert.deepEqual(JSON.parse(text(short)), small);
  } finally {
    client.close();
    await server.close();
    await ca.remove();
  }
});

/** Lets pending promise chains run until `cond` holds (bounded; no fake time passes). */
async function until(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !cond(); i++) await new Promise((r) => setTimeout(r, 2));
  assert.ok(cond(), "condition not reached");
}

Deno.test("KubeClient records client-go's rest_client metrics per verb, code and host", async () => {
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const url = new URL(req.url);
    await req.arrayBuffer();
    if (url.searchParams.get("watch") === "true") {
      return new Response('{"type":"ADDED","object":{}}\n', { status: 200 });
    }
    if (url.pathname === "/missing") {
      return Response.json({ kind: "Status", reason: "NotFound", message: "gone" }, {
        status: 404,
      });
    }
    if (req.method === "POST") return new Response('{"made":true}', { status: 201 });
    return new Response('{"a":1}', { status: 200 });
  });
  const port = (server.addr as Deno.NetAddr).port;
  const host = `127.0.0.1:${port}`;
  const registry = new MetricsRegistry();
  const m = new RestClientMetrics(registry);
  const clock = new FakeClock(0);
  const client = new KubeClient({
    config: { server: `http://${host}`, insecureSkipTLSVerify: false, source: "t" },
    clock,
    qps: 1,
    burst: 1,
    userAgent: "test",
    metrics: m,
  });
  try {
    assert.equal(m.transportCreateCalls.get({ result: "uncacheable" }), 1);
    assert.deepEqual(await client.get("/ok"), { a: 1 });
    // The bucket is empty now: the POST waits a second on the rate limiter.
    const created = client.create("/things", { x: "y" });
    await until(() => clock.waiters === 1);
    clock.step(1000);
    assert.deepEqual(await created, { made: true });
    // A watch is neither throttled (no token left) nor timed; its answer is counted.
    const events = await Array.fromAsync(client.watch("/things"));
    assert.equal(events.length, 1);
    const missing = client.get("/missing");
    await until(() => clock.waiters === 1);
    clock.step(1000);
    await assert.rejects(missing, /404 NotFound: gone/);

    const get = { verb: "GET", host };
    const post = { verb: "POST", host };
    assert.equal(m.requests.get({ code: "200", method: "GET", host }), 2);
    assert.equal(m.requests.get({ code: "201", method: "POST", host }), 1);
    assert.equal(m.requests.get({ code: "404", method: "GET", host }), 1);
    assert.equal(m.requestDuration.count(get), 2, "the watch is not timed");
    assert.equal(m.requestDuration.count(post), 1);
    assert.equal(m.rateLimiterDuration.count(get), 2);
    assert.equal(m.requestSize.count(post), 1);
    const text = await registry.render();
    const families = new Map(parseExposition(text).map((f) => [f.name, f]));
    const sum = (family: string, labels: Record<string, string>) =>
      families.get(family)?.samples.find((s) =>
        s.suffix === "_sum" && Object.entries(labels).every(([k, v]) => s.labels[k] === v)
      )?.value;
    // Throttling counts into the request's latency, as client-go's request() times it.
    assert.equal(sum("rest_client_rate_limiter_duration_seconds", post), 1);
    assert.equal(sum("rest_client_request_duration_seconds", post), 1);
    assert.equal(sum("rest_client_rate_limiter_duration_seconds", get), 1);
    assert.equal(sum("rest_client_request_size_bytes", post), JSON.stringify({ x: "y" }).length);
    assert.equal(sum("rest_client_request_size_bytes", get), 0);
    const notFound = JSON.stringify({ kind: "Status", reason: "NotFound", message: "gone" });
    assert.equal(sum("rest_client_response_size_bytes", get), 7 + notFound.length);
    assert.equal(sum("rest_client_response_size_bytes", post), 13);
    assert.equal(families.get("rest_client_exec_plugin_ttl_seconds")?.samples[0]?.value, Infinity);
    assert.equal(families.get("rest_client_transport_cache_entries")?.samples[0]?.value, 0);
  } finally {
    client.close();
    await server.shutdown();
  }
  // No answer at all: `<error>`.
  const down = new KubeClient({
    config: { server: `http://${host}`, insecureSkipTLSVerify: false, source: "t" },
    clock,
    qps: -1,
    userAgent: "test",
    metrics: m,
  });
  try {
    await assert.rejects(down.get("/ok"));
    assert.equal(m.requests.get({ code: "<error>", method: "GET", host }), 1);
    assert.equal(m.rateLimiterDuration.count({ verb: "GET", host }), 2, "no limiter, no wait");
  } finally {
    down.close();
  }
});

Deno.test("KubeClient's watch ends when its signal aborts, though the answer's body does not", async () => {
  // A body that ignores the abort (and whose cancel never settles): the watch must not wait on it.
  const fetch = globalThis.fetch;
  let cancelled = false;
  globalThis.fetch = () => {
    const event = new TextEncoder().encode(
      JSON.stringify({ type: "ADDED", object: { metadata: { name: "a" } } }) + "\n",
    );
    const body = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(event);
      },
      cancel() {
        cancelled = true;
        return new Promise(() => {});
      },
    });
    return Promise.resolve(new Response(body, { status: 200 }));
  };
  const client = new KubeClient({
    config: { server: "http://127.0.0.1:1", insecureSkipTLSVerify: false, source: "t" },
    clock: new FakeClock(),
    qps: -1,
    userAgent: "test",
  });
  try {
    const stop = new AbortController();
    const names: string[] = [];
    const watching = (async () => {
      for await (
        const ev of client.watch<{ metadata: { name: string } }>("/api/v1/pods", {
          signal: stop.signal,
        })
      ) {
        names.push(ev.object.metadata.name);
      }
    })();
    // Stopped while the watch waits for the next event, as at a shutdown.
    while (names.length === 0) await new Promise((r) => setTimeout(r, 1));
    await new Promise((r) => setTimeout(r, 10));
    stop.abort();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<string>((r) => {
      timer = setTimeout(() => r("still watching after 2 s"), 2_000);
    });
    const outcome = await Promise.race([watching.then(() => "ended"), timeout]);
    clearTimeout(timer);
    assert.equal(outcome, "ended");
    assert.deepEqual(names, ["a"]);
    for (let i = 0; i < 100 && !cancelled; i++) await new Promise((r) => setTimeout(r, 1));
    assert.ok(cancelled, "the body is cancelled all the same");
  } finally {
    globalThis.fetch = fetch;
    client.close();
  }
});
