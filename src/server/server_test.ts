import assert from "node:assert/strict";
import { request } from "node:https";
import { connect } from "node:tls";
import { join } from "node:path";
import { createLogger } from "../klog/klog.ts";
import {
  compilePattern,
  httpMetricLabels,
  type HttpMetrics,
  type KubeletAPIServer,
  type Route,
  serveKubeletAPI,
} from "./server.ts";
import { KubeletMetrics } from "../metrics/metrics.ts";

/** A self-signed serving pair from openssl, in a temp dir. */
async function servingPair(): Promise<{ cert: string; key: string }> {
  const dir = await Deno.makeTempDir({ prefix: "server-test-" });
  const out = await new Deno.Command("openssl", {
    args: [
      ...["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=kubelet"],
      ...["-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem")],
    ],
    stdout: "null",
    stderr: "piped",
  }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  const pair = {
    cert: await Deno.readTextFile(join(dir, "cert.pem")),
    key: await Deno.readTextFile(join(dir, "key.pem")),
  };
  await Deno.remove(dir, { recursive: true });
  return pair;
}

async function start(
  ctrl: AbortController,
  extra: { metrics?: HttpMetrics; routes?: Route[] } = {},
): Promise<KubeletAPIServer> {
  return await serveKubeletAPI({
    metrics: extra.metrics,
    hostname: "127.0.0.1",
    port: 0,
    tls: await servingPair(),
    // "Bearer good" and "Bearer denied" authenticate; nothing else does.
    authenticator: {
      authenticate: (req) => {
        const token = req.headers.authorization?.replace(/^Bearer /, "");
        return Promise.resolve(
          token === "good" || token === "denied" ? { name: token, groups: [] } : undefined,
        );
      },
    },
    authorizer: {
      authorize: (a) => Promise.resolve({ allowed: a.user.name === "good", reason: "" }),
    },
    attributes: (user, req, url) => ({
      user,
      verb: req.method === "POST" ? "create" : "get",
      resource: "nodes",
      subresource: url.pathname.startsWith("/exec") ? "proxy" : "pods",
      name: "node-1",
      apiGroup: "",
      apiVersion: "v1",
      path: url.pathname,
    }),
    routes: [
      {
        pattern: "/hello/:who",
        methods: ["GET"],
        handler: (r, res) => void res.end(`hi ${r.params.who}`),
      },
      {
        pattern: "/exec/*rest",
        upgrade: (r, socket, head) => {
          socket.write(
            `HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\nX-Rest: ${r.params.rest}\r\n\r\n`,
          );
          if (head.length > 0) socket.write(head);
          socket.on("data", (d) => socket.write(d));
        },
      },
      ...extra.routes ?? [],
    ],
    logger: createLogger({ write: () => {}, pid: 1 }),
    signal: ctrl.signal,
  });
}

function get(
  port: number,
  path: string,
  token?: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({
      host: "127.0.0.1",
      port,
      path,
      rejectUnauthorized: false,
      headers: token ? { authorization: `Bearer ${token}` } : {},
    }, (res) => {
      let body = "";
      res.on("data", (c) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

Deno.test("compilePattern matches named and tail parameters", () => {
  const m = compilePattern("/containerLogs/:ns/:pod/:container");
  assert.deepEqual(m("/containerLogs/default/web/app"), {
    ns: "default",
    pod: "web",
    container: "app",
  });
  assert.equal(m("/containerLogs/default/web"), undefined);
  assert.equal(m("/containerLogs/default/web/app/extra"), undefined);
  assert.deepEqual(compilePattern("/logs/*path")("/logs/a/b%20c"), { path: "a/b c" });
  // A bad escape matches nothing rather than throwing.
  assert.equal(compilePattern("/logs/*path")("/logs/%zz"), undefined);
  assert.equal(m("/containerLogs/default/%zz/app"), undefined);
});

Deno.test("serveKubeletAPI answers 401, 403, 404 and the route, in that order of checks", async () => {
  const ctrl = new AbortController();
  const s = await start(ctrl);
  assert.deepEqual(await get(s.port, "/hello/bob", "good"), { status: 200, body: "hi bob" });
  assert.deepEqual(await get(s.port, "/hello/bob"), { status: 401, body: "Unauthorized\n" });
  assert.deepEqual(await get(s.port, "/nothing", "good"), {
    status: 404,
    body: "404 page not found\n",
  });
  const post = await new Promise<number>((resolve, reject) => {
    const req = request({
      host: "127.0.0.1",
      port: s.port,
      path: "/hello/bob",
      method: "POST",
      rejectUnauthorized: false,
      headers: { authorization: "Bearer good" },
    }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on("error", reject);
    req.end();
  });
  assert.equal(post, 405, "a known path with another method");
  // Authorization comes before routing: an unknown path is still forbidden to the denied user.
  assert.deepEqual(await get(s.port, "/nothing", "denied"), {
    status: 403,
    body: "Forbidden (user=denied, verb=get, resource=nodes, subresource(s)=[pods])\n",
  });
  ctrl.abort();
  await s.finished;
});

Deno.test("serveKubeletAPI authenticates upgrades and hands the connection over", async () => {
  const ctrl = new AbortController();
  const s = await start(ctrl);
  const talk = (token: string | undefined, payload: string) =>
    new Promise<string>((resolve, reject) => {
      const socket = connect({ host: "127.0.0.1", port: s.port, rejectUnauthorized: false });
      let got = "";
      socket.on("data", (d) => {
        got += d;
        if (got.includes("pong") || got.includes("\r\n\r\n") && !got.startsWith("HTTP/1.1 101")) {
          socket.end();
        }
      });
      socket.on("end", () => resolve(got));
      socket.on("close", () => resolve(got));
      socket.on("error", reject);
      socket.write(
        `POST /exec/ns/pod/c HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n` +
          (token ? `Authorization: Bearer ${token}\r\n` : "") + `\r\n${payload}`,
      );
    });
  const ok = await talk("good", "pong");
  assert.match(ok, /^HTTP\/1\.1 101 Switching Protocols\r\n/);
  assert.match(ok, /X-Rest: ns\/pod\/c/);
  assert.match(ok, /pong/);
  assert.match(await talk(undefined, ""), /^HTTP\/1\.1 401 Unauthorized\r\n/);
  assert.match(await talk("denied", ""), /^HTTP\/1\.1 403 Forbidden\r\n/);
  ctrl.abort();
  await s.finished;
});

Deno.test("serveKubeletAPI read-only: plain HTTP, no authentication, only its routes", async () => {
  const ctrl = new AbortController();
  const s = await serveKubeletAPI({
    hostname: "127.0.0.1",
    port: 0,
    readOnly: true,
    routes: [{ pattern: "/pods", handler: (_r, res) => void res.end("pods") }],
    logger: createLogger({ write: () => {}, pid: 1 }),
    signal: ctrl.signal,
  });
  const ok = await fetch(`http://127.0.0.1:${s.port}/pods`);
  assert.deepEqual([ok.status, await ok.text()], [200, "pods"]);
  const other = await fetch(`http://127.0.0.1:${s.port}/configz`);
  assert.deepEqual([other.status, await other.text()], [404, "404 page not found\n"]);
  ctrl.abort();
  await s.finished;
});

Deno.test("serveKubeletAPI refuses to start without authentication unless read-only", async () => {
  await assert.rejects(
    serveKubeletAPI({
      hostname: "127.0.0.1",
      port: 0,
      tls: await servingPair(),
      routes: [],
      logger: createLogger({ write: () => {}, pid: 1 }),
      signal: AbortSignal.abort(),
    }),
    /needs an authenticator, an authorizer and an attributes getter/,
  );
});

/** Sends `bytes` over TLS and reads until the server closes. */
function exchange(port: number, bytes: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: "127.0.0.1", port, rejectUnauthorized: false });
    let got = "";
    socket.on("secureConnect", () => socket.write(bytes));
    socket.on("data", (d) => (got += d));
    socket.on("close", () => resolve(got));
    socket.on("error", reject);
  });
}

/** A request for /hello/bob whose head is exactly `size` bytes, padded by one header. */
function headOfSize(size: number, method = "GET", extra = ""): string {
  const start = `${method} /hello/bob HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\n` +
    `${extra}Connection: close\r\nX-Pad: `;
  return `${start}${"p".repeat(size - start.length - 4)}\r\n\r\n`;
}

Deno.test("serveKubeletAPI answers a head over Go's limit with net/http's 431 and serves one at it", async () => {
  const ctrl = new AbortController();
  const s = await start(ctrl);
  // ListenAndServeKubeletServer's MaxHeaderBytes (1 MiB) plus net/http's 4096 bytes of slop.
  const limit = (1 << 20) + 4096;
  const go431 = "HTTP/1.1 431 Request Header Fields Too Large\r\n" +
    "Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n" +
    "431 Request Header Fields Too Large";
  const atLimit = await exchange(s.port, headOfSize(limit));
  assert.match(atLimit, /^HTTP\/1\.1 200 OK\r\n/);
  assert.match(atLimit, /\r\n\r\nhi bob$/);
  // One byte more: the parser still reads it, the length check refuses it.
  assert.equal(await exchange(s.port, headOfSize(limit + 1)), go431);
  // Far over: the parser itself gives up, mid-header, while the client is still sending.
  assert.equal(await exchange(s.port, headOfSize(3 << 20)), go431);
  // Upgrades (exec, attach, port-forward) are held to the same limit.
  const upgrade = "Connection: Upgrade\r\nUpgrade: test\r\n";
  assert.equal(await exchange(s.port, headOfSize(limit + 1, "POST", upgrade)), go431);
  ctrl.abort();
  await s.finished;
});

Deno.test("serveKubeletAPI answers a malformed request with net/http's 400", async () => {
  const ctrl = new AbortController();
  const s = await start(ctrl);
  assert.equal(
    await exchange(s.port, "NOT HTTP AT ALL\r\n\r\n"),
    "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n" +
      "Connection: close\r\n\r\n400 Bad Request",
  );
  ctrl.abort();
  await s.finished;
});

Deno.test("serveKubeletAPI survives 1000 malformed requests and still answers", async () => {
  const ctrl = new AbortController();
  const s = await start(ctrl);
  const { connect: connectTcp } = await import("node:net");
  const raw = (bytes: string | Uint8Array, tls: boolean) =>
    new Promise<void>((resolve) => {
      const socket = tls
        ? connect({ host: "127.0.0.1", port: s.port, rejectUnauthorized: false })
        : connectTcp({ host: "127.0.0.1", port: s.port });
      const done = () => {
        socket.destroy();
        resolve();
      };
      socket.on(tls ? "secureConnect" : "connect", () => {
        socket.write(bytes);
        // Half-close: no more from this side, whatever the server still says.
        socket.end();
      });
      socket.on("data", () => {});
      socket.on("error", done);
      socket.on("close", done);
      setTimeout(done, 2_000);
    });
  const huge = "X-Big: " + "a".repeat(2 << 20) + "\r\n";
  const cases: [string | Uint8Array, boolean][] = [
    ["GET /%zz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\n\r\n", true],
    ["GET /hello/../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n", true],
    ["NOT HTTP AT ALL\r\n\r\n", true],
    [`GET / HTTP/1.1\r\nHost: x\r\n${huge}\r\n`, true],
    ["GET /hello/bob HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc", true],
    ["POST /exec/a/b/c HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n", true],
    // Not TLS at all: a broken handshake.
    ["GET /hello/bob HTTP/1.1\r\n\r\n", false],
    [new Uint8Array([0x16, 0x03, 0x01, 0x00, 0xff, 1, 2, 3]), false],
  ];
  for (let i = 0; i < 1000; i += 25) {
    await Promise.all(
      Array.from({ length: 25 }, (_, j) => raw(...cases[(i + j) % cases.length]!)),
    );
  }
  assert.deepEqual(await get(s.port, "/hello/bob", "good"), { status: 200, body: "hi bob" });
  ctrl.abort();
  await s.finished;
});

Deno.test("httpMetricLabels labels a request as upstream's ServeHTTP does", () => {
  const labels = (method: string, path: string, readOnly = false) =>
    Object.values(httpMetricLabels(method, path, readOnly)).join(" ");
  // method, path bucket, server type, long running
  assert.equal(labels("GET", "/metrics"), "GET metrics readwrite false");
  assert.equal(labels("GET", "/metrics/cadvisor"), "GET metrics/cadvisor readwrite false");
  assert.equal(labels("GET", "/metrics/resource/extra"), "GET metrics/resource readwrite false");
  assert.equal(labels("GET", "/metrics/slis"), "GET other readwrite false", "no bucket upstream");
  assert.equal(labels("GET", "/stats/summary"), "GET stats readwrite false");
  assert.equal(labels("POST", "/exec/ns/pod/c"), "POST exec readwrite true");
  assert.equal(labels("POST", "/attach/ns/pod/c"), "POST attach readwrite true");
  assert.equal(labels("GET", "/debug/pprof/heap"), "GET debug readwrite true");
  // Upstream's long-running set spells it "portforward": its own bucket never matches.
  assert.equal(labels("POST", "/portForward/ns/pod"), "POST portForward readwrite false");
  assert.equal(labels("GET", "/containerLogs/ns/pod/c"), "GET containerLogs readwrite false");
  assert.equal(labels("GET", "/nothing/here"), "GET other readwrite false");
  assert.equal(labels("GET", "/"), "GET other readwrite false");
  assert.equal(labels("PATCH", "/pods"), "other pods readwrite false");
  assert.equal(labels("GET", "/pods", true), "GET pods readonly false");
  assert.deepEqual(Object.keys(httpMetricLabels("GET", "/", false)), [
    "method",
    "path",
    "server_type",
    "long_running",
  ]);
});

Deno.test("serveKubeletAPI counts every request, holds it in flight until answered and times it, refused ones too", async () => {
  const metrics = new KubeletMetrics({ process: false });
  const gate = Promise.withResolvers<void>();
  const ctrl = new AbortController();
  const s = await start(ctrl, {
    metrics,
    routes: [{
      pattern: "/pods/hold",
      handler: async (_r, res) => {
        await gate.promise;
        res.end("done");
      },
    }],
  });
  const pods = { method: "GET", path: "pods", server_type: "readwrite", long_running: "false" };
  const other = { ...pods, path: "other" };
  const poll = async (what: string, cond: () => boolean) => {
    for (let i = 0; i < 500 && !cond(); i++) await new Promise((r) => setTimeout(r, 2));
    assert.ok(cond(), what);
  };
  try {
    const held = get(s.port, "/pods/hold", "good");
    await poll("in flight", () => metrics.httpInflightRequests.get(pods) === 1);
    assert.equal(metrics.httpRequests.get(pods), 1, "counted as it arrives");
    assert.equal(metrics.httpRequestsDuration.count(pods), 0);
    gate.resolve();
    assert.deepEqual(await held, { status: 200, body: "done" });
    await poll("answered", () => metrics.httpRequestsDuration.count(pods) === 1);
    assert.equal(metrics.httpInflightRequests.get(pods), 0);
    // Refused before any handler (401, 404): counted all the same, as upstream counts first.
    assert.equal((await get(s.port, "/hello/bob")).status, 401);
    assert.equal((await get(s.port, "/nothing", "good")).status, 404);
    await poll("both timed", () => metrics.httpRequestsDuration.count(other) === 2);
    assert.equal(metrics.httpRequests.get(other), 2);
    assert.equal(metrics.httpInflightRequests.get(other), 0);
    assert.match(
      await metrics.render(),
      /^kubelet_http_requests_total\{long_running="false",method="GET",path="pods",server_type="readwrite"\} 1$/m,
    );
  } finally {
    gate.resolve();
    ctrl.abort();
    await s.finished;
  }
});
