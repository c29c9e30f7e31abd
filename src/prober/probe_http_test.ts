import assert from "node:assert/strict";
import http from "node:http";
import https from "node:https";
import type { AddressInfo } from "node:net";
import {
  doHttpProbe,
  type HttpGetRequest,
  newRequestForHttpGetAction,
  resolveContainerPort,
  urlString,
} from "./probe_http.ts";

type Handler = (req: http.IncomingMessage, res: http.ServerResponse) => void;

async function serve(handler: Handler, tls?: { key: string; cert: string }) {
  const server = tls ? https.createServer(tls, handler) : http.createServer(handler);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    [Symbol.asyncDispose]: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** A raw TCP server: `onConn` decides what a connection gets. */
function rawServer(onConn: (c: Deno.Conn) => void) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conns: Deno.Conn[] = [];
  (async () => {
    for await (const c of listener) {
      conns.push(c);
      onConn(c);
    }
  })().catch(() => {});
  return {
    port: listener.addr.port,
    [Symbol.dispose]() {
      listener.close();
      for (const c of conns) {
        try {
          c.close();
        } catch { /* already closed */ }
      }
    },
  };
}

const req = (
  port: number,
  path = "/",
  extra: Partial<Parameters<typeof newRequestForHttpGetAction>[0]> = {},
) =>
  newRequestForHttpGetAction(
    { port, path, ...extra },
    { name: "c" },
    "127.0.0.1",
    "kube-probe/1.36",
  );

Deno.test("newRequestForHttpGetAction sets User-Agent, Accept, Host and the probe's headers", () => {
  const r = newRequestForHttpGetAction(
    {
      port: "web",
      path: "/healthz?x=1",
      scheme: "HTTPS",
      httpHeaders: [{ name: "x-custom", value: "a" }, { name: "X-Custom", value: "b" }, {
        name: "host",
        value: "example.com",
      }],
    },
    { name: "c", ports: [{ name: "web", containerPort: 8443 }] },
    "10.0.0.5",
    "kube-probe/1.36",
  );
  assert.equal(r.url.href, "https://10.0.0.5:8443/healthz?x=1");
  assert.deepEqual(r.headers.get("X-Custom"), ["a", "b"]);
  assert.deepEqual(r.headers.get("Host"), ["example.com"]);
  assert.deepEqual(r.headers.get("User-Agent"), ["kube-probe/1.36"]);
  assert.deepEqual(r.headers.get("Accept"), ["*/*"]);
  const noAccept = newRequestForHttpGetAction(
    { port: 80, httpHeaders: [{ name: "Accept", value: "" }, { name: "User-Agent", value: "me" }] },
    { name: "c" },
    "fd00::1",
    "kube-probe/1.36",
  );
  assert.equal(noAccept.headers.has("Accept"), false);
  assert.deepEqual(noAccept.headers.get("User-Agent"), ["me"]);
  assert.equal(urlString(noAccept.url), "http://[fd00::1]:80/");
});

Deno.test("resolveContainerPort takes numbers, names and numeric text, and rejects the rest", () => {
  const c = { name: "c", ports: [{ name: "http", containerPort: 8080 }] };
  assert.equal(resolveContainerPort(80, c), 80);
  assert.equal(resolveContainerPort("http", c), 8080);
  assert.equal(resolveContainerPort("9090", c), 9090);
  assert.throws(
    () => resolveContainerPort("nope", c),
    /strconv.Atoi: parsing "nope": invalid syntax/,
  );
  assert.throws(() => resolveContainerPort(0, c), /invalid port number: 0/);
  assert.throws(() => resolveContainerPort(70000, c), /invalid port number: 70000/);
});

Deno.test("doHttpProbe succeeds on 2xx with the body and the headers sent", async () => {
  let seen: http.IncomingHttpHeaders = {};
  await using s = await serve((rq, res) => {
    seen = rq.headers;
    res.end("fine");
  });
  const r = req(s.port, "/", { httpHeaders: [{ name: "Host", value: "svc.local" }] });
  assert.deepEqual(await doHttpProbe(r, { timeoutMs: 1000 }), {
    result: "Success",
    output: "fine",
  });
  assert.equal(seen["user-agent"], "kube-probe/1.36");
  assert.equal(seen["host"], "svc.local");
  assert.equal(seen["accept"], "*/*");
});

Deno.test("doHttpProbe fails on 4xx/5xx without the body", async () => {
  await using s = await serve((_, res) => {
    res.statusCode = 503;
    res.end("secret");
  });
  assert.deepEqual(await doHttpProbe(req(s.port), { timeoutMs: 1000 }), {
    result: "Failure",
    output: "HTTP probe failed with statuscode: 503",
  });
});

Deno.test("doHttpProbe follows same-host redirects and warns on another host", async () => {
  await using s = await serve((rq, res) => {
    if (rq.url === "/a") res.writeHead(302, { location: "/b" }).end();
    else if (rq.url === "/b") res.end("at b");
    else if (rq.url === "/away") {
      res.writeHead(301, { location: "http://localhost:1/x" }).end("moved");
    } else res.writeHead(302, { location: rq.url + "x" }).end();
  });
  assert.deepEqual(await doHttpProbe(req(s.port, "/a"), { timeoutMs: 1000 }), {
    result: "Success",
    output: "at b",
  });
  assert.deepEqual(await doHttpProbe(req(s.port, "/away"), { timeoutMs: 1000 }), {
    result: "Warning",
    output: "Probe terminated redirects, Response body: moved",
  });
  const loop = await doHttpProbe(req(s.port, "/loop"), { timeoutMs: 1000 });
  assert.equal(loop.result, "Failure");
  assert.match(loop.output, /stopped after 10 redirects$/);
});

Deno.test("doHttpProbe reads at most 10 KiB of the body", async () => {
  await using s = await serve((_, res) => res.end("x".repeat(50_000)));
  const r = await doHttpProbe(req(s.port), { timeoutMs: 1000 });
  assert.equal(r.result, "Success");
  assert.equal(r.output.length, 10 * 1024);
});

Deno.test("doHttpProbe skips TLS verification for HTTPS", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const out = await new Deno.Command("openssl", {
      args: [
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        `${dir}/k.pem`,
        "-out",
        `${dir}/c.pem`,
        "-days",
        "1",
        "-subj",
        "/CN=probe-test",
      ],
      stdout: "null",
      stderr: "null",
    }).output();
    assert.ok(out.success);
    const tls = {
      key: await Deno.readTextFile(`${dir}/k.pem`),
      cert: await Deno.readTextFile(`${dir}/c.pem`),
    };
    await using s = await serve((_, res) => res.end("secure"), tls);
    assert.deepEqual(
      await doHttpProbe(req(s.port, "/", { scheme: "HTTPS" }), { timeoutMs: 1000 }),
      {
        result: "Success",
        output: "secure",
      },
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("doHttpProbe fails with Go's texts for refused, garbage and closed connections", async () => {
  using closed = rawServer((c) => c.close());
  using garbage = rawServer((c) => {
    c.write(new TextEncoder().encode("garbage\r\n\r\n")).then(() => c.close(), () => {});
  });
  const free = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const refusedPort = free.addr.port;
  free.close();
  const refused = await doHttpProbe(req(refusedPort), { timeoutMs: 1000 });
  assert.deepEqual(refused, {
    result: "Failure",
    output:
      `Get "http://127.0.0.1:${refusedPort}/": dial tcp 127.0.0.1:${refusedPort}: connect: connection refused`,
  });
  const eof = await doHttpProbe(req(closed.port), { timeoutMs: 1000 });
  assert.equal(eof.result, "Failure");
  assert.match(eof.output, /^Get "http:\/\/127\.0\.0\.1:\d+\/": /);
  const bad = await doHttpProbe(req(garbage.port), { timeoutMs: 1000 });
  assert.equal(bad.result, "Failure");
  assert.match(bad.output, /^Get "http:\/\/127\.0\.0\.1:\d+\/": /);
});

Deno.test("doHttpProbe gives up at the deadline on a hung or slow target", async () => {
  using hung = rawServer(() => {});
  await using slow = await serve((_, res) => {
    res.writeHead(200);
    res.write("partial");
  });
  for (
    const [port, stage] of [[hung.port, "awaiting headers"], [slow.port, "reading body"]] as const
  ) {
    const t0 = performance.now();
    const r: HttpGetRequest = req(port);
    const out = await doHttpProbe(r, { timeoutMs: 300 });
    const elapsed = performance.now() - t0;
    assert.equal(out.result, "Failure");
    assert.match(out.output, new RegExp(`context deadline exceeded .*${stage.split(" ")[0]}`));
    assert.ok(elapsed < 1500, `took ${elapsed} ms`);
  }
});

Deno.test("doHttpProbe rethrows when the caller's signal aborts", async () => {
  using hung = rawServer(() => {});
  const ctl = new AbortController();
  const p = doHttpProbe(req(hung.port), { timeoutMs: 5000, signal: ctl.signal });
  ctl.abort(new Error("stopping"));
  await assert.rejects(p, /stopping/);
});
