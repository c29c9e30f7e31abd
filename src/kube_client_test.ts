import assert from "node:assert/strict";
import { join } from "node:path";
import { testCA } from "./_cert_fixtures.ts";
import { FakeClock } from "./clock.ts";
import { KubeClient } from "./kube_client.ts";

async function openssl(args: string[]): Promise<string> {
  const o = await new Deno.Command("openssl", { args, stdout: "piped", stderr: "piped" }).output();
  if (!o.success) {
    throw new Error(`openssl ${args.join(" ")}: ${new TextDecoder().decode(o.stderr)}`);
  }
  return new TextDecoder().decode(o.stdout);
}

Deno.test("KubeClient speaks HTTP/1.1 to a server that offers HTTP/2 too", async () => {
  const ca = await testCA();
  const key = join(ca.dir, "server.key");
  const csr = await openssl([
    ...["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"],
    ...["-keyout", key, "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
  ]);
  const cert = await ca.sign(csr);
  // A TLS server that offers h2 first and answers HTTP/1.1 only; it records what was agreed.
  const listener = Deno.listenTls({
    hostname: "127.0.0.1",
    port: 0,
    cert,
    key: await Deno.readTextFile(key),
    alpnProtocols: ["h2", "http/1.1"],
  });
  const agreed: (string | null)[] = [];
  const serving = (async () => {
    for await (const conn of listener) {
      const { alpnProtocol } = await conn.handshake();
      agreed.push(alpnProtocol);
      if (alpnProtocol === "http/1.1") {
        await conn.read(new Uint8Array(4096));
        const body = '{"kind":"Node"}';
        await conn.write(new TextEncoder().encode(
          `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`,
        ));
      }
      conn.close();
    }
  })();
  const port = (listener.addr as Deno.NetAddr).port;
  const client = new KubeClient({
    config: {
      server: `https://127.0.0.1:${port}`,
      caPem: ca.certPem,
      insecureSkipTLSVerify: false,
      source: "test",
    },
    clock: new FakeClock(Date.now()),
    qps: -1,
    userAgent: "test",
  });
  try {
    const node = await client.get<{ kind: string }>("/api/v1/nodes/n1");
    assert.equal(node.kind, "Node");
    assert.deepEqual(agreed, ["http/1.1"]);
  } finally {
    client.close();
    listener.close();
    await serving.catch(() => {});
    await ca.remove();
  }
});
