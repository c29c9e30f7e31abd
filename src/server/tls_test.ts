import assert from "node:assert/strict";
import { createServer, type Server } from "node:https";
import type { TLSSocket } from "node:tls";
import { createPrivateKey, X509Certificate } from "node:crypto";
import { join } from "node:path";
import { FakeClock } from "../util/clock.ts";
import { createLogger, type Logger } from "../klog/klog.ts";
import {
  CIPHER_SUITES,
  cipherAllowed,
  generateSelfSignedCertKey,
  ipBytes,
  loadOrGenerateServingCert,
  type ServingCertOptions,
  tlsSettings,
  TLSSettingsError,
} from "./tls.ts";

const NOW = new Date(Date.UTC(2026, 0, 1, 12, 0, 0));
const UNIX = NOW.getTime() / 1000;
const HOUR = 3600_000;

function capture(verbosity = 0): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  return { logger: createLogger({ verbosity, write: (l) => lines.push(l) }), lines };
}

/** Splits a PEM bundle into its certificates, in order. */
function pemBlocks(bundle: string): string[] {
  return bundle.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----\n/g) ?? [];
}

async function run(cmd: string, args: string[]): Promise<{ ok: boolean; out: string }> {
  const o = await new Deno.Command(cmd, { args, stdin: "null", stdout: "piped", stderr: "piped" })
    .output();
  const dec = new TextDecoder();
  return { ok: o.success, out: dec.decode(o.stdout) + dec.decode(o.stderr) };
}

/** Writes the leaf, the CA and the key of a bundle to `dir`. */
async function writeParts(dir: string, pair: { certPem: string; keyPem: string }) {
  const [leaf, ca] = pemBlocks(pair.certPem);
  assert.ok(leaf && ca, "the bundle holds a serving certificate then a CA");
  const files = { leaf: join(dir, "leaf.pem"), ca: join(dir, "ca.pem"), key: join(dir, "key.pem") };
  await Deno.writeTextFile(files.leaf, leaf);
  await Deno.writeTextFile(files.ca, ca);
  await Deno.writeTextFile(files.key, pair.keyPem);
  return files;
}

/** A node:https server answering "ok"; `onSecure` sees every handshake. */
async function listen(
  tls: { cert: string; key: string; minVersion?: "TLSv1" | "TLSv1.1" | "TLSv1.2" | "TLSv1.3" },
  onSecure?: (s: TLSSocket) => void,
): Promise<{ server: Server; port: number; close: () => Promise<void> }> {
  const server = createServer(
    { cert: tls.cert, key: tls.key, minVersion: tls.minVersion },
    (_q, r) => r.end("ok"),
  );
  if (onSecure) server.on("secureConnection", onSecure);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  return {
    server,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

function options(dir: string, over: Partial<ServingCertOptions> = {}): ServingCertOptions {
  return {
    tlsCertFile: "",
    tlsPrivateKeyFile: "",
    certDirectory: join(dir, "pki"),
    hostname: "node-1",
    nodeIPs: ["10.0.0.5"],
    clock: new FakeClock(NOW.getTime()),
    logger: capture().logger,
    ...over,
  };
}

// --- generateSelfSignedCertKey ---------------------------------------------------------------

Deno.test("generateSelfSignedCertKey builds a CA and a serving certificate signed by it", () => {
  const pair = generateSelfSignedCertKey("node-1", ["10.0.0.5", "fd00::5"], ["node-1.local"], NOW);
  const blocks = pemBlocks(pair.certPem);
  assert.equal(blocks.length, 2);
  const leaf = new X509Certificate(blocks[0]!);
  const ca = new X509Certificate(blocks[1]!);

  assert.equal(ca.subject, `CN=node-1-ca@${UNIX}`);
  assert.equal(ca.issuer, ca.subject);
  assert.equal(ca.ca, true);
  assert.equal(parseInt(ca.serialNumber, 16), 1);
  assert.ok(ca.verify(ca.publicKey), "the CA is self-signed");

  assert.equal(leaf.subject, `CN=node-1@${UNIX}`);
  assert.equal(leaf.issuer, `CN=node-1-ca@${UNIX}`);
  assert.equal(leaf.ca, false);
  assert.equal(parseInt(leaf.serialNumber, 16), 2);
  assert.ok(leaf.checkIssued(ca));
  assert.ok(leaf.verify(ca.publicKey), "the serving certificate is signed by the CA");
  assert.ok(!leaf.verify(leaf.publicKey));
  assert.equal(
    leaf.subjectAltName,
    "DNS:node-1, DNS:node-1.local, IP Address:10.0.0.5, IP Address:fd00::5",
  );

  for (const c of [leaf, ca]) {
    assert.equal(Date.parse(c.validFrom), NOW.getTime() - HOUR, "valid from an hour earlier");
    assert.equal(Date.parse(c.validTo), NOW.getTime() - HOUR + 365 * 24 * HOUR, "for one year");
  }
  assert.match(pair.keyPem, /^-----BEGIN RSA PRIVATE KEY-----\n/);
  // The key is the serving certificate's, not the CA's.
  assert.ok(leaf.checkPrivateKey(createPrivateKey(pair.keyPem)));
  assert.ok(!ca.checkPrivateKey(createPrivateKey(pair.keyPem)));
  assert.equal(leaf.publicKey.asymmetricKeyDetails?.modulusLength, 2048);
  assert.equal(ca.publicKey.asymmetricKeyDetails?.modulusLength, 2048);
});

Deno.test("generateSelfSignedCertKey passes openssl verify and shows upstream's extensions", async () => {
  const dir = await Deno.makeTempDir({ prefix: "server-tls-test-" });
  try {
    const files = await writeParts(dir, generateSelfSignedCertKey("node-1", ["10.0.0.5"], [], NOW));
    const at = String(UNIX);
    const verify = await run("openssl", ["verify", "-attime", at, "-CAfile", files.ca, files.leaf]);
    assert.ok(verify.ok, verify.out);
    assert.match(verify.out, /leaf\.pem: OK/);
    // Before notBefore the same chain must fail, so the check above means something.
    const early = await run("openssl", [
      ...["verify", "-attime", String(UNIX - 2 * 3600), "-CAfile", files.ca, files.leaf],
    ]);
    assert.ok(!early.ok, early.out);
    // A different CA does not verify it.
    const other = await writeParts(
      await Deno.makeTempDir({ dir }),
      generateSelfSignedCertKey("node-1", [], [], NOW),
    );
    assert.ok(
      !(await run("openssl", ["verify", "-attime", at, "-CAfile", other.ca, files.leaf])).ok,
    );

    const leafText = (await run("openssl", ["x509", "-in", files.leaf, "-noout", "-text"])).out;
    assert.match(leafText, /Version: 3 \(0x2\)/);
    assert.match(leafText, /Signature Algorithm: sha256WithRSAEncryption/);
    assert.match(leafText, /Key Usage: critical\s+Digital Signature, Key Encipherment\n/);
    assert.match(leafText, /Extended Key Usage: ?\s+TLS Web Server Authentication\n/);
    assert.match(leafText, /Basic Constraints: critical\s+CA:FALSE/);
    assert.match(leafText, /Authority Key Identifier/);
    assert.match(leafText, /Subject Alternative Name: ?\s+DNS:node-1, IP Address:10\.0\.0\.5\n/);

    const caText = (await run("openssl", ["x509", "-in", files.ca, "-noout", "-text"])).out;
    assert.match(
      caText,
      /Key Usage: critical\s+Digital Signature, Key Encipherment, Certificate Sign\n/,
    );
    assert.match(caText, /Basic Constraints: critical\s+CA:TRUE/);
    assert.match(caText, /Subject Key Identifier/);
    const ski = /Subject Key Identifier: ?\s+([0-9A-F:]+)/.exec(caText)?.[1];
    const aki = /Authority Key Identifier: ?\s+(?:keyid:)?([0-9A-F:]+)/.exec(leafText)?.[1];
    assert.ok(ski && ski === aki, `AKI ${aki} matches the CA's SKI ${ski}`);

    const purpose = (await run("openssl", ["x509", "-in", files.leaf, "-noout", "-purpose"])).out;
    assert.match(purpose, /SSL server : Yes/);
    assert.match(purpose, /SSL client : No/);
    // Strict DER: openssl re-encodes it byte for byte.
    const der = await run("openssl", ["asn1parse", "-in", files.leaf, "-strictpem"]);
    assert.ok(der.ok, der.out);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("generateSelfSignedCertKey puts an IP host in the IP SANs", () => {
  const pair = generateSelfSignedCertKey("192.168.1.7", ["::ffff:10.1.2.3"], [], NOW);
  const leaf = new X509Certificate(pemBlocks(pair.certPem)[0]!);
  assert.equal(leaf.subject, `CN=192.168.1.7@${UNIX}`);
  // A v4-mapped address is written in its 4-byte form, as Go's To4 gives it.
  assert.equal(leaf.subjectAltName, "IP Address:192.168.1.7, IP Address:10.1.2.3");
});

Deno.test("generateSelfSignedCertKey writes GeneralizedTime for dates after 2049", () => {
  const late = new Date(Date.UTC(2049, 5, 1));
  const leaf = new X509Certificate(
    pemBlocks(generateSelfSignedCertKey("n", [], [], late).certPem)[0]!,
  );
  assert.equal(new Date(Date.parse(leaf.validTo)).getUTCFullYear(), 2050);
  assert.equal(Date.parse(leaf.validFrom), late.getTime() - HOUR);
});

Deno.test("generateSelfSignedCertKey rejects an empty host and a bad IP", () => {
  assert.throws(() => generateSelfSignedCertKey("", [], [], NOW), /empty host/);
  assert.throws(
    () => generateSelfSignedCertKey("n", ["10.0.0.300"], [], NOW),
    /'10\.0\.0\.300' is not an IP address/,
  );
});

Deno.test("ipBytes gives Go's 4- and 16-byte forms", () => {
  assert.deepEqual(ipBytes("10.0.0.1"), Uint8Array.of(10, 0, 0, 1));
  assert.deepEqual(ipBytes("::1"), Uint8Array.of(...new Array(15).fill(0), 1));
  assert.deepEqual(
    ipBytes("fd00:1::2:3"),
    Uint8Array.of(0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 3),
  );
  assert.deepEqual(ipBytes("::ffff:1.2.3.4"), Uint8Array.of(1, 2, 3, 4));
  assert.deepEqual(ipBytes("64:ff9b::1.2.3.4")?.slice(12), Uint8Array.of(1, 2, 3, 4));
  assert.equal(ipBytes("node-1"), undefined);
  assert.equal(ipBytes("fe80::1%eth0"), undefined);
});

// --- handshakes with real clients ------------------------------------------------------------

Deno.test("generateSelfSignedCertKey serves TLS that curl accepts with only the CA", async () => {
  // A handshake checks validity against the wall clock, so this certificate starts now.
  const pair = generateSelfSignedCertKey("node-1", ["127.0.0.1"], [], new Date());
  const dir = await Deno.makeTempDir({ prefix: "server-tls-test-" });
  const srv = await listen({ cert: pair.certPem, key: pair.keyPem });
  try {
    const files = await writeParts(dir, pair);
    const url = `https://node-1:${srv.port}/`;
    const resolve = `node-1:${srv.port}:127.0.0.1`;
    const good = await run("curl", ["-sS", "--cacert", files.ca, "--resolve", resolve, url]);
    assert.ok(good.ok, good.out);
    assert.equal(good.out, "ok");
    const byIP = await run("curl", ["-sS", "--cacert", files.ca, `https://127.0.0.1:${srv.port}/`]);
    assert.ok(byIP.ok, byIP.out);
    // A name that is not in the SANs is refused.
    const wrong = await run("curl", [
      ...["-sS", "--cacert", files.ca, "--resolve", `other:${srv.port}:127.0.0.1`],
      `https://other:${srv.port}/`,
    ]);
    assert.ok(!wrong.ok, wrong.out);
    // Without the CA, the chain is not trusted.
    assert.ok(!(await run("curl", ["-sS", "--resolve", resolve, url])).ok);
  } finally {
    await srv.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("generateSelfSignedCertKey serves TLS that Deno's fetch (rustls) accepts with the CA", async () => {
  const pair = generateSelfSignedCertKey("localhost", ["127.0.0.1"], [], new Date());
  const ca = pemBlocks(pair.certPem)[1]!;
  const srv = await listen({ cert: pair.certPem, key: pair.keyPem });
  const client = Deno.createHttpClient({ caCerts: [ca] });
  try {
    for (const host of ["localhost", "127.0.0.1"]) {
      const res = await fetch(`https://${host}:${srv.port}/`, { client });
      assert.equal(await res.text(), "ok", host);
    }
    // The same request without the CA fails, so the one above really verified the chain.
    await assert.rejects(async () => {
      const res = await fetch(`https://127.0.0.1:${srv.port}/`);
      await res.body?.cancel();
    });
  } finally {
    client.close();
    await srv.close();
  }
});

// --- loadOrGenerateServingCert ---------------------------------------------------------------

Deno.test("loadOrGenerateServingCert generates kubelet.crt and kubelet.key with their modes", async () => {
  const dir = await Deno.makeTempDir({ prefix: "server-tls-test-" });
  try {
    const { logger, lines } = capture(4);
    const got = await loadOrGenerateServingCert(options(dir, { logger }));
    const pki = join(dir, "pki");
    assert.equal(got.generated, true);
    assert.equal(got.certFile, join(pki, "kubelet.crt"));
    assert.equal(got.keyFile, join(pki, "kubelet.key"));
    assert.equal(await Deno.readTextFile(got.certFile), got.cert);
    assert.equal(await Deno.readTextFile(got.keyFile), got.key);
    assert.equal((await Deno.stat(got.certFile)).mode! & 0o777, 0o644);
    assert.equal((await Deno.stat(got.keyFile)).mode! & 0o777, 0o600);
    assert.equal((await Deno.stat(pki)).mode! & 0o777, 0o750);
    assert.deepEqual([...Deno.readDirSync(pki)].map((e) => e.name).sort(), [
      "kubelet.crt",
      "kubelet.key",
    ]);
    const leaf = new X509Certificate(got.cert);
    assert.equal(leaf.subject, `CN=node-1@${UNIX}`, "named from the injected clock");
    assert.equal(leaf.subjectAltName, "DNS:node-1, IP Address:10.0.0.5");
    assert.ok(lines.some((l) => l.includes("Using self-signed cert") && l.includes(got.certFile)));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("loadOrGenerateServingCert loads the pair it wrote instead of regenerating", async () => {
  const dir = await Deno.makeTempDir({ prefix: "server-tls-test-" });
  try {
    const first = await loadOrGenerateServingCert(options(dir));
    const clock = new FakeClock(NOW.getTime() + 10_000);
    const second = await loadOrGenerateServingCert(options(dir, { clock }));
    assert.equal(second.generated, false);
    assert.equal(second.cert, first.cert);
    assert.equal(second.key, first.key);
    assert.equal(second.certFile, first.certFile);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("loadOrGenerateServingCert warns about an expired pair but keeps it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "server-tls-test-" });
  try {
    const first = await loadOrGenerateServingCert(options(dir));
    const { logger, lines } = capture();
    const clock = new FakeClock(NOW.getTime() + 400 * 24 * HOUR);
    const later = await loadOrGenerateServingCert(options(dir, { clock, logger }));
    assert.equal(later.cert, first.cert);
    assert.ok(lines.some((l) => l.includes("Serving certificate has expired")), lines.join("\n"));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("loadOrGenerateServingCert refuses half a pair in the cert directory", async () => {
  const dir = await Deno.makeTempDir({ prefix: "server-tls-test-" });
  try {
    const got = await loadOrGenerateServingCert(options(dir));
    await Deno.remove(got.keyFile);
    await assert.rejects(
      loadOrGenerateServingCert(options(dir)),
      (e: Error) =>
        e.name === "ServingCertError" &&
        e.message.includes(
          `error reading ${got.keyFile}, certificate and key must be supplied as a pair`,
        ),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("loadOrGenerateServingCert uses tlsCertFile and tlsPrivateKeyFile when given", async () => {
  const dir = await Deno.makeTempDir({ prefix: "server-tls-test-" });
  try {
    const pair = generateSelfSignedCertKey("given", [], [], NOW);
    const certFile = join(dir, "serving.crt");
    const keyFile = join(dir, "serving.key");
    await Deno.writeTextFile(certFile, pair.certPem);
    await Deno.writeTextFile(keyFile, pair.keyPem);
    const got = await loadOrGenerateServingCert(
      options(dir, { tlsCertFile: certFile, tlsPrivateKeyFile: keyFile }),
    );
    assert.deepEqual(got, {
      cert: pair.certPem,
      key: pair.keyPem,
      certFile,
      keyFile,
      generated: false,
    });
    await assert.rejects(Deno.stat(join(dir, "pki")), Deno.errors.NotFound, "nothing generated");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("loadOrGenerateServingCert names the field and path of a missing configured file", async () => {
  const dir = await Deno.makeTempDir({ prefix: "server-tls-test-" });
  try {
    const pair = generateSelfSignedCertKey("given", [], [], NOW);
    const certFile = join(dir, "serving.crt");
    const keyFile = join(dir, "serving.key");
    await assert.rejects(
      loadOrGenerateServingCert(
        options(dir, { tlsCertFile: certFile, tlsPrivateKeyFile: keyFile }),
      ),
      (e: Error) =>
        e.name === "ServingCertError" && e.message.includes("'tlsCertFile'") &&
        e.message.includes(certFile),
    );
    await Deno.writeTextFile(certFile, pair.certPem);
    await assert.rejects(
      loadOrGenerateServingCert(
        options(dir, { tlsCertFile: certFile, tlsPrivateKeyFile: keyFile }),
      ),
      (e: Error) => e.message.includes("'tlsPrivateKeyFile'") && e.message.includes(keyFile),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("loadOrGenerateServingCert requires tlsCertFile and tlsPrivateKeyFile together", async () => {
  await assert.rejects(
    loadOrGenerateServingCert(options("/nonexistent", { tlsCertFile: "/etc/x.crt" })),
    /'tlsPrivateKeyFile' must be set together with 'tlsCertFile' \('\/etc\/x\.crt'\)/,
  );
  await assert.rejects(
    loadOrGenerateServingCert(options("/nonexistent", { tlsPrivateKeyFile: "/etc/x.key" })),
    /'tlsCertFile' must be set together with 'tlsPrivateKeyFile'/,
  );
});

Deno.test("loadOrGenerateServingCert rejects a key that does not match the certificate", async () => {
  const dir = await Deno.makeTempDir({ prefix: "server-tls-test-" });
  try {
    const a = generateSelfSignedCertKey("a", [], [], NOW);
    const b = generateSelfSignedCertKey("b", [], [], NOW);
    const certFile = join(dir, "a.crt");
    const keyFile = join(dir, "b.key");
    await Deno.writeTextFile(certFile, a.certPem);
    await Deno.writeTextFile(keyFile, b.keyPem);
    await assert.rejects(
      loadOrGenerateServingCert(
        options(dir, { tlsCertFile: certFile, tlsPrivateKeyFile: keyFile }),
      ),
      /does not match .*private key does not match public key/,
    );
    await Deno.writeTextFile(keyFile, "not a key");
    await assert.rejects(
      loadOrGenerateServingCert(
        options(dir, { tlsCertFile: certFile, tlsPrivateKeyFile: keyFile }),
      ),
      /b\.key does not hold a PEM private key/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("loadOrGenerateServingCert stops on an aborted signal", async () => {
  const ctrl = new AbortController();
  ctrl.abort(new Error("stopping"));
  await assert.rejects(
    loadOrGenerateServingCert(options("/nonexistent", { signal: ctrl.signal })),
    /stopping/,
  );
});

Deno.test("loadOrGenerateServingCert reports a cert directory it cannot write", async () => {
  const dir = await Deno.makeTempDir({ prefix: "server-tls-test-" });
  try {
    // A file where the directory should be: mkdir fails whoever runs the test (even root).
    await Deno.writeTextFile(join(dir, "pki"), "");
    await assert.rejects(
      loadOrGenerateServingCert(options(dir)),
      (e: Error) =>
        e.name === "ServingCertError" &&
        e.message.includes(`unable to write ${join(dir, "pki", "kubelet.crt")}`),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

// --- tlsSettings -----------------------------------------------------------------------------

Deno.test("tlsSettings maps tlsMinVersion and defaults to TLS 1.2 as upstream", () => {
  assert.deepEqual(tlsSettings({}), { minVersion: "TLSv1.2" });
  assert.deepEqual(tlsSettings({ tlsMinVersion: "" }), { minVersion: "TLSv1.2" });
  assert.equal(tlsSettings({ tlsMinVersion: "VersionTLS10" }).minVersion, "TLSv1");
  assert.equal(tlsSettings({ tlsMinVersion: "VersionTLS11" }).minVersion, "TLSv1.1");
  assert.equal(tlsSettings({ tlsMinVersion: "VersionTLS12" }).minVersion, "TLSv1.2");
  assert.equal(tlsSettings({ tlsMinVersion: "VersionTLS13" }).minVersion, "TLSv1.3");
});

Deno.test("tlsSettings names the field and value of an unknown version", () => {
  assert.throws(
    () => tlsSettings({ tlsMinVersion: "TLSv1.2" }),
    (e: Error) =>
      e instanceof TLSSettingsError && e.message.includes("'tlsMinVersion'") &&
      e.message.includes('unknown tls version "TLSv1.2"') && e.message.includes("VersionTLS13"),
  );
});

Deno.test("tlsSettings maps Go cipher suite names to OpenSSL names", () => {
  const got = tlsSettings({
    tlsCipherSuites: [
      "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
      "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
      "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
      "TLS_RSA_WITH_AES_128_CBC_SHA",
      "TLS_AES_128_GCM_SHA256",
    ],
  });
  assert.equal(
    got.ciphers,
    // TLS 1.3 suites always lead, as Go never lets them be configured away; duplicates collapse.
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256:" +
      "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-CHACHA20-POLY1305:AES128-SHA",
  );
  assert.equal(got.minVersion, "TLSv1.2");
  assert.deepEqual(tlsSettings({ tlsCipherSuites: [] }), { minVersion: "TLSv1.2" });
});

Deno.test("tlsSettings does not take inherited object keys for names", () => {
  assert.throws(() => tlsSettings({ tlsMinVersion: "toString" }), TLSSettingsError);
  assert.throws(() => tlsSettings({ tlsCipherSuites: ["constructor"] }), TLSSettingsError);
});

Deno.test("tlsSettings names the field and value of an unknown cipher suite", () => {
  assert.throws(
    () =>
      tlsSettings({
        tlsCipherSuites: ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"],
      }),
    (e: Error) =>
      e instanceof TLSSettingsError && e.message.includes("'tlsCipherSuites'") &&
      e.message.includes("Cipher suite ECDHE-RSA-AES128-GCM-SHA256 not supported or doesn't exist"),
  );
});

Deno.test("tlsSettings logs insecure suites and ignores suites under TLS 1.3", () => {
  const { logger, lines } = capture();
  const got = tlsSettings({ tlsCipherSuites: ["TLS_RSA_WITH_RC4_128_SHA"] }, logger);
  assert.equal(got.ciphers?.endsWith(":RC4-SHA"), true);
  assert.ok(
    lines.some((l) =>
      l.includes("Use of insecure cipher detected.") && l.includes("TLS_RSA_WITH_RC4_128_SHA")
    ),
  );
  assert.ok(!lines.some((l) => l.includes("TLS 1.3")));

  const quiet = capture();
  tlsSettings({ tlsCipherSuites: ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"] }, quiet.logger);
  assert.deepEqual(quiet.lines, []);

  const v13 = capture();
  assert.deepEqual(
    tlsSettings(
      { tlsMinVersion: "VersionTLS13", tlsCipherSuites: ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"] },
      v13.logger,
    ),
    { minVersion: "TLSv1.3" },
  );
  assert.ok(
    v13.lines.some((l) =>
      l.includes(
        "Warning: TLS 1.3 cipher suites are not configurable, ignoring --tls-cipher-suites",
      )
    ),
  );
});

Deno.test("CIPHER_SUITES agrees with openssl's own name table", async () => {
  const listed = await run("openssl", ["ciphers", "-stdname", "ALL:COMPLEMENTOFALL:@SECLEVEL=0"]);
  assert.ok(listed.ok, listed.out);
  const byOpenSSL = new Map<string, string>();
  for (const line of listed.out.split("\n")) {
    const [std, , name] = line.trim().split(/\s+/);
    if (std && name) byOpenSSL.set(name, std);
  }
  let checked = 0;
  for (const [goName, info] of Object.entries(CIPHER_SUITES)) {
    const std = byOpenSSL.get(info.openssl);
    // RC4 and 3DES are compiled out of this OpenSSL; the table is checked statically below.
    if (std === undefined) continue;
    // The two legacy CHACHA20 names are Go aliases of the _SHA256 suites.
    const expected = goName.endsWith("_CHACHA20_POLY1305") ? `${goName}_SHA256` : goName;
    assert.equal(std, expected, `${goName} -> ${info.openssl}`);
    checked++;
  }
  assert.ok(checked >= 20, `checked ${checked} suites against openssl`);
  assert.equal(CIPHER_SUITES.TLS_RSA_WITH_RC4_128_SHA?.openssl, "RC4-SHA");
  assert.equal(CIPHER_SUITES.TLS_RSA_WITH_3DES_EDE_CBC_SHA?.openssl, "DES-CBC3-SHA");
  assert.equal(
    CIPHER_SUITES.TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA?.openssl,
    "ECDHE-RSA-DES-CBC3-SHA",
  );
  assert.equal(CIPHER_SUITES.TLS_ECDHE_RSA_WITH_RC4_128_SHA?.openssl, "ECDHE-RSA-RC4-SHA");
  assert.equal(CIPHER_SUITES.TLS_ECDHE_ECDSA_WITH_RC4_128_SHA?.openssl, "ECDHE-ECDSA-RC4-SHA");
  assert.equal(Object.keys(CIPHER_SUITES).length, 27);
  assert.equal(Object.values(CIPHER_SUITES).filter((s) => s.insecure).length, 12);
});

Deno.test("tlsSettings minVersion makes the server refuse older clients", async () => {
  const pair = generateSelfSignedCertKey("localhost", [], [], new Date());
  const { minVersion } = tlsSettings({ tlsMinVersion: "VersionTLS13" });
  const srv = await listen({ cert: pair.certPem, key: pair.keyPem, minVersion });
  try {
    const url = `https://localhost:${srv.port}/`;
    const old = await run("curl", ["-sSk", "--tls-max", "1.2", url]);
    assert.ok(!old.ok, old.out);
    const ok = await run("curl", ["-sSk", "--tlsv1.3", url]);
    assert.ok(ok.ok, ok.out);
  } finally {
    await srv.close();
  }
});

Deno.test("cipherAllowed admits listed TLS 1.2 suites and every TLS 1.3 suite", () => {
  const { ciphers } = tlsSettings({ tlsCipherSuites: ["TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"] });
  assert.ok(cipherAllowed(ciphers, { name: "ECDHE-RSA-AES256-GCM-SHA384", version: "TLSv1.2" }));
  assert.ok(!cipherAllowed(ciphers, { name: "ECDHE-RSA-AES128-GCM-SHA256", version: "TLSv1.2" }));
  assert.ok(cipherAllowed(ciphers, { name: "TLS_AES_256_GCM_SHA384", version: "TLSv1.3" }));
  assert.ok(cipherAllowed(undefined, { name: "anything", version: "TLSv1.2" }));
});

Deno.test("cipherAllowed on secureConnection enforces tlsCipherSuites that Deno's tls ignores", async () => {
  const pair = generateSelfSignedCertKey("localhost", [], [], new Date());
  const { ciphers } = tlsSettings({ tlsCipherSuites: ["TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"] });
  const srv = await listen({ cert: pair.certPem, key: pair.keyPem }, (s) => {
    if (!cipherAllowed(ciphers, s.getCipher())) s.destroy();
  });
  try {
    const url = `https://localhost:${srv.port}/`;
    const tls12 = ["-sSk", "--tls-max", "1.2", "--ciphers"];
    const allowed = await run("curl", [...tls12, "ECDHE-RSA-AES256-GCM-SHA384", url]);
    assert.equal(allowed.out, "ok");
    const refused = await run("curl", [...tls12, "ECDHE-RSA-AES128-GCM-SHA256", url]);
    assert.ok(!refused.ok, refused.out);
    const tls13 = await run("curl", ["-sSk", "--tlsv1.3", url]);
    assert.equal(tls13.out, "ok");
  } finally {
    await srv.close();
  }
});
