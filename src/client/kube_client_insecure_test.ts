import assert from "node:assert/strict";
import { createServer, type Server } from "node:https";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { TLSSocket } from "node:tls";
import { testCA, testServerCert } from "../testing/cert_fixtures.ts";
import { FakeClock } from "../util/clock.ts";
import { KubeApiError, KubeClient } from "./kube_client.ts";
import type { RestConfig } from "./kubeconfig.ts";

/**
 * An apiserver-like TLS server whose certificate no client here trusts (its CA is never given
 * to them). It asks for a client certificate and answers with the CommonName it got.
 */
async function untrustedApiserver() {
  const ca = await testCA();
  const { certPem, keyPem } = await testServerCert(ca);
  const watches = new Set<ServerResponse>();
  const server: Server = createServer(
    { cert: certPem, key: keyPem, requestCert: true, rejectUnauthorized: false },
    async (req: IncomingMessage, res: ServerResponse) => {
      let body = "";
      for await (const c of req) body += String(c);
      const url = new URL(req.url ?? "/", "https://x");
      const peer = (req.socket as TLSSocket).getPeerCertificate();
      const user = peer?.subject?.CN ?? "";
      res.setHeader("content-type", "application/json");
      if (url.searchParams.get("watch") === "true") {
        res.writeHead(200);
        res.write('{"type":"ADDED","object":{"n":1}}\n');
        res.write('{"type":"MODIFIED","object":{"n":2}}\n');
        watches.add(res);
        return;
      }
      if (url.pathname === "/api/v1/nodes/missing") {
        res.writeHead(404);
        res.end(JSON.stringify({ kind: "Status", reason: "NotFound", message: "not there" }));
        return;
      }
      res.writeHead(req.method === "POST" ? 201 : 200);
      res.end(JSON.stringify({ method: req.method, path: url.pathname, user, body }));
    },
  );
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  return {
    url: `https://127.0.0.1:${port}`,
    ca,
    async close() {
      for (const w of watches) w.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await ca.remove();
    },
  };
}

/** A client certificate of CN `name`, from a CA of its own. */
async function clientCert(name: string) {
  const ca = await testCA();
  const key = await Deno.makeTempFile();
  const out = await new Deno.Command("openssl", {
    args: [
      ...["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"],
      ...["-keyout", key, "-subj", `/CN=${name}`],
    ],
    stdout: "piped",
    stderr: "null",
  }).output();
  const certPem = await ca.sign(new TextDecoder().decode(out.stdout));
  const keyPem = await Deno.readTextFile(key);
  await Deno.remove(key);
  await ca.remove();
  return { certPem, keyPem };
}

function client(config: Partial<RestConfig> & { server: string }): KubeClient {
  return new KubeClient({
    config: { insecureSkipTLSVerify: false, source: "test.kubeconfig", ...config },
    clock: new FakeClock(Date.now()),
    qps: -1,
    userAgent: "test",
  });
}

// First in the file: node:tls loads the system roots once per process, which would hide the need.
Deno.test({
  name:
    "KubeClient with insecure-skip-tls-verify needs no sys permission (the agent's sandbox has none)",
  permissions: { net: true, read: true, write: true, run: ["openssl"], env: true, sys: false },
  async fn() {
    const api = await untrustedApiserver();
    const insecure = client({ server: api.url, insecureSkipTLSVerify: true });
    try {
      assert.equal((await insecure.get<{ path: string }>("/healthz")).path, "/healthz");
    } finally {
      insecure.close();
      await api.close();
    }
  },
});

Deno.test("KubeClient with insecure-skip-tls-verify talks to a server whose certificate it cannot verify", async () => {
  const api = await untrustedApiserver();
  const cert = await clientCert("system:node:n1");
  const insecure = client({ server: api.url, insecureSkipTLSVerify: true, ...cert });
  try {
    assert.deepEqual(await insecure.get("/api/v1/nodes/n1"), {
      method: "GET",
      path: "/api/v1/nodes/n1",
      user: "system:node:n1",
      body: "",
    });
    // A body longer than one fetch piece, and an answer code other than 200.
    const big = { metadata: { name: "n1" }, note: "x".repeat(5000) };
    const made = await insecure.create<{ body: string }>("/api/v1/nodes", big as never);
    assert.deepEqual(JSON.parse(made.body), big);
    await assert.rejects(
      insecure.get("/api/v1/nodes/missing"),
      (e: unknown) => e instanceof KubeApiError && e.code === 404 && e.reason === "NotFound",
    );
    // A watch streams until its signal ends it.
    const stop = new AbortController();
    const seen: number[] = [];
    for await (
      const ev of insecure.watch<{ n: number }>("/api/v1/nodes", { signal: stop.signal })
    ) {
      seen.push(ev.object.n);
      if (seen.length === 2) stop.abort();
    }
    assert.deepEqual(seen, [1, 2]);
  } finally {
    insecure.close();
    await api.close();
  }
});

Deno.test("KubeClient without insecure-skip-tls-verify refuses a server whose certificate it cannot verify", async () => {
  const api = await untrustedApiserver();
  const verifying = client({ server: api.url });
  try {
    await assert.rejects(
      verifying.get("/api/v1/nodes/n1"),
      (e: unknown) => e instanceof KubeApiError && e.code === 0,
    );
  } finally {
    verifying.close();
    await api.close();
  }
});

Deno.test("KubeClient with insecure-skip-tls-verify and a rotating certificate presents the current one", async () => {
  const api = await untrustedApiserver();
  let current = await clientCert("first");
  const rotating = new KubeClient({
    config: { server: api.url, insecureSkipTLSVerify: true, source: "test.kubeconfig" },
    clientCertificate: () => current,
    clock: new FakeClock(Date.now()),
    qps: -1,
    userAgent: "test",
  });
  try {
    assert.equal((await rotating.get<{ user: string }>("/x")).user, "first");
    current = await clientCert("second");
    assert.equal((await rotating.get<{ user: string }>("/x")).user, "second");
  } finally {
    rotating.close();
    await api.close();
  }
});
