import assert from "node:assert/strict";
import { createPublicKey, generateKeyPairSync } from "node:crypto";
import { join } from "node:path";
import {
  CsrError,
  generateECKey,
  makeCSR,
  parseCSRPem,
  parsePrivateKeyPem,
  privateKeyPem,
} from "./pkcs10.ts";

async function openssl(args: string[], stdin?: string): Promise<{ ok: boolean; out: string }> {
  const child = new Deno.Command("openssl", {
    args,
    stdin: stdin === undefined ? "null" : "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  if (stdin !== undefined) {
    const w = child.stdin.getWriter();
    await w.write(new TextEncoder().encode(stdin));
    await w.close();
  }
  const o = await child.output();
  const dec = new TextDecoder();
  return { ok: o.success, out: dec.decode(o.stdout) + dec.decode(o.stderr) };
}

const NODE_CLIENT = { commonName: "system:node:node-a", organizations: ["system:nodes"] };

Deno.test("makeCSR writes a request openssl verifies, with the kubelet's subject (ECDSA P-256)", async () => {
  const key = generateECKey();
  assert.equal(key.asymmetricKeyDetails?.namedCurve, "prime256v1");
  const csr = makeCSR(key, NODE_CLIENT);
  assert.match(csr, /^-----BEGIN CERTIFICATE REQUEST-----\n/);
  const r = await openssl(["req", "-verify", "-noout", "-subject", "-nameopt", "RFC2253"], csr);
  assert.ok(r.ok, r.out);
  assert.match(r.out, /verify OK/i);
  // RFC 2253 prints the last RDN first: the CN follows the O in the encoding, as Go writes it.
  assert.match(r.out, /subject=CN=system:node:node-a,O=system:nodes/);
  assert.doesNotMatch((await openssl(["req", "-noout", "-text"], csr)).out, /Alternative Name/);
});

Deno.test("makeCSR carries DNS names and IP addresses as a subjectAltName extension request", async () => {
  const key = generateECKey();
  const csr = makeCSR(key, {
    ...NODE_CLIENT,
    dnsNames: ["node-a", "node-a.example"],
    ipAddresses: ["10.0.0.7", "fd00::7"],
  });
  const r = await openssl(["req", "-verify", "-noout", "-text"], csr);
  assert.ok(r.ok, r.out);
  assert.match(r.out, /X509v3 Subject Alternative Name:/);
  assert.match(
    r.out,
    /DNS:node-a, DNS:node-a\.example, IP Address:10\.0\.0\.7, IP Address:FD00:0:0:0:0:0:0:7/,
  );
  assert.match(r.out, /ecdsa-with-SHA256/);
});

Deno.test("makeCSR signs with an RSA key too (a key reused from an older kubelet)", async () => {
  const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const r = await openssl(["req", "-verify", "-noout", "-text"], makeCSR(privateKey, NODE_CLIENT));
  assert.ok(r.ok, r.out);
  assert.match(r.out, /sha256WithRSAEncryption/);
});

Deno.test("makeCSR refuses a bad IP address and a key it cannot sign with", () => {
  assert.throws(
    () => makeCSR(generateECKey(), { ...NODE_CLIENT, ipAddresses: ["10.0.0.300"] }),
    (e: unknown) => e instanceof CsrError && /'10\.0\.0\.300' is not an IP address/.test(e.message),
  );
  const { privateKey } = generateKeyPairSync("ed25519");
  assert.throws(() => makeCSR(privateKey, NODE_CLIENT), /only ECDSA and RSA keys are supported/);
});

Deno.test("privateKeyPem writes SEC1 and PKCS#1 as keyutil does, and parsePrivateKeyPem reads them", async () => {
  const ec = generateECKey();
  const ecPem = privateKeyPem(ec);
  assert.match(ecPem, /^-----BEGIN EC PRIVATE KEY-----/);
  const { privateKey: rsa } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  assert.match(privateKeyPem(rsa), /^-----BEGIN RSA PRIVATE KEY-----/);
  const back = parsePrivateKeyPem(
    `-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n${ecPem}`,
  );
  assert.deepEqual(
    createPublicKey(back).export({ type: "spki", format: "der" }),
    createPublicKey(ec).export({ type: "spki", format: "der" }),
  );
  assert.throws(() => parsePrivateKeyPem("no key here"), CsrError);
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(join(dir, "k.pem"), ecPem);
    const r = await openssl(["ec", "-check", "-noout", "-in", join(dir, "k.pem")]);
    assert.ok(r.ok, r.out);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("parseCSRPem gives back the subject and the public key", () => {
  const key = generateECKey();
  const parsed = parseCSRPem(makeCSR(key, NODE_CLIENT));
  assert.deepEqual(
    parsed.rawSubjectPublicKeyInfo,
    new Uint8Array(createPublicKey(key).export({ type: "spki", format: "der" })),
  );
  assert.equal(parsed.rawSubject[0], 0x30);
  assert.throws(
    () => parseCSRPem("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----"),
    /CERTIFICATE REQUEST/,
  );
});
