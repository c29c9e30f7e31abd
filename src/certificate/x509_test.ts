import assert from "node:assert/strict";
import { createHash, X509Certificate } from "node:crypto";
import {
  CREDENTIAL_ID_KEY,
  parseCertificate,
  parsePemCertificates,
  verifyClientCertificate,
} from "./x509.ts";
import type { UserInfo } from "../server/server.ts";

const EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
const OID_CONFIG = [
  "oid_section = oids",
  "[oids]",
  "k8sUID = 1.3.6.1.4.1.57683.2",
  "[req]",
  "distinguished_name = dn",
  "[dn]",
  "",
].join("\n");

async function openssl(dir: string, args: string[]): Promise<void> {
  const out = await new Deno.Command("openssl", { args, cwd: dir, stdout: "null", stderr: "piped" })
    .output();
  if (!out.success) {
    throw new Error(`openssl ${args.join(" ")}: ${new TextDecoder().decode(out.stderr)}`);
  }
}

/** A throw-away PKI in a temp dir; every certificate is read back as DER. */
async function makePki() {
  const dir = await Deno.makeTempDir({ prefix: "x509_test_" });
  await Deno.writeTextFile(`${dir}/oid.cnf`, OID_CONFIG);
  let serial = 100;
  const selfSigned = (name: string, subj: string, days: number, ext: string[] = []) =>
    openssl(dir, [
      ...["req", "-x509", "-new", ...EC, "-keyout", `${name}.key`, "-out", `${name}.crt`],
      ...["-subj", subj, "-days", String(days), ...ext.flatMap((e) => ["-addext", e])],
    ]);
  const issue = async (name: string, subj: string, ca: string, ext: string[], days = 30) => {
    const n = serial++;
    await openssl(dir, [
      ...["req", "-new", ...EC, "-keyout", `${name}.key`, "-out", `${name}.csr`],
      ...["-subj", subj, "-config", "oid.cnf"],
    ]);
    await Deno.writeTextFile(`${dir}/${name}.ext`, ext.join("\n") + "\n");
    await openssl(dir, [
      ...["x509", "-req", "-in", `${name}.csr`, "-CA", `${ca}.crt`, "-CAkey", `${ca}.key`],
      ...["-set_serial", String(n), "-days", String(days), "-extfile", `${name}.ext`],
      ...["-out", `${name}.crt`],
    ]);
  };
  const client = [
    "basicConstraints = critical,CA:FALSE",
    "keyUsage = critical,digitalSignature",
    "extendedKeyUsage = clientAuth",
    "subjectKeyIdentifier = hash",
    "authorityKeyIdentifier = keyid",
  ];
  await Promise.all([
    selfSigned("ca", "/CN=test-ca", 30),
    selfSigned("other-ca", "/CN=other-ca", 30),
    selfSigned("lookalike-ca", "/CN=test-ca", 30),
    selfSigned("short-ca", "/CN=short-ca", 1),
  ]);
  await Promise.all([
    issue("alice", "/O=g1/O=g2/CN=alice", "ca", client),
    issue("mallory", "/CN=mallory", "other-ca", client),
    issue("eve", "/O=system:masters/CN=eve", "lookalike-ca", client),
    issue("server", "/CN=kubelet-serving", "ca", [
      "basicConstraints = critical,CA:FALSE",
      "extendedKeyUsage = serverAuth",
    ]),
    issue("no-eku", "/CN=plain", "ca", ["basicConstraints = critical,CA:FALSE"]),
    issue("no-cn", "/O=only-group", "ca", client),
    issue("carol", "/CN=carol/k8sUID=uid-7", "ca", client),
    issue("critical", "/CN=crit", "ca", [...client, "1.2.3.4 = critical,ASN1:UTF8String:x"]),
    issue("int-ca", "/CN=intermediate-ca", "ca", [
      "basicConstraints = critical,CA:TRUE",
      "keyUsage = critical,keyCertSign",
      "subjectKeyIdentifier = hash",
      "authorityKeyIdentifier = keyid",
    ]),
    issue("gina", "/CN=gina", "short-ca", client),
  ]);
  await Promise.all([
    issue("dave", "/CN=dave", "int-ca", client),
    issue("frank", "/CN=frank", "alice", client),
  ]);
  const der = async (name: string) => {
    const pem = await Deno.readTextFile(`${dir}/${name}.crt`);
    const [d] = parsePemCertificates(pem);
    assert.ok(d, `${name}.crt holds a certificate`);
    return d;
  };
  const names = [
    "ca",
    "other-ca",
    "lookalike-ca",
    "short-ca",
    "alice",
    "mallory",
    "eve",
    "server",
    "no-eku",
    "no-cn",
    "carol",
    "critical",
    "int-ca",
    "gina",
    "dave",
    "frank",
  ] as const;
  const certs = Object.fromEntries(
    await Promise.all(names.map(async (n) => [n, await der(n)] as const)),
  ) as Record<(typeof names)[number], Uint8Array>;
  await Deno.remove(dir, { recursive: true });
  const root = (n: (typeof names)[number]) => new X509Certificate(certs[n]);
  const alice = parseCertificate(certs.alice);
  return {
    certs,
    roots: [root("ca")],
    root,
    alice,
    // Inside every certificate's validity (they were all made just now, for 1 or 30 days).
    now: new Date(alice.notBefore.getTime() + 3600_000),
  };
}

let pki: ReturnType<typeof makePki> | undefined;
const getPki = () => pki ??= makePki();

function userOf(r: ReturnType<typeof verifyClientCertificate>): UserInfo {
  assert.ok(r && !("error" in r), `expected a user, got ${JSON.stringify(r)}`);
  return r;
}

function errorOf(r: ReturnType<typeof verifyClientCertificate>): string {
  assert.ok(r && "error" in r, `expected an error, got ${JSON.stringify(r)}`);
  return r.error;
}

Deno.test("verifyClientCertificate accepts a certificate of the client CA as CN and O", async () => {
  const p = await getPki();
  const user = verifyClientCertificate([p.certs.alice], p.roots, p.now);
  const fp = createHash("sha256").update(p.certs.alice).digest("hex");
  assert.deepEqual(user, {
    name: "alice",
    groups: ["g1", "g2"],
    extra: { [CREDENTIAL_ID_KEY]: [`X509SHA256=${fp}`] },
  });
});

Deno.test("verifyClientCertificate rejects a certificate of another CA", async () => {
  const p = await getPki();
  const err = errorOf(verifyClientCertificate([p.certs.mallory], p.roots, p.now));
  const m = parseCertificate(p.certs.mallory);
  assert.match(err, /^verifying certificate SN=\d+, SKID=[0-9A-F:]+, AKID=[0-9A-F:]+ failed: /);
  assert.ok(err.includes(`SN=${m.serialNumber}`));
  assert.ok(err.endsWith("failed: x509: certificate signed by unknown authority"), err);
});

Deno.test("verifyClientCertificate rejects an expired and a not-yet-valid certificate", async () => {
  const p = await getPki();
  const after = new Date(p.alice.notAfter.getTime() + 1000);
  const before = new Date(p.alice.notBefore.getTime() - 1000);
  const iso = (d: Date) => d.toISOString().replace(/\.\d{3}Z$/, "Z");
  assert.ok(
    errorOf(verifyClientCertificate([p.certs.alice], p.roots, after)).endsWith(
      `x509: certificate has expired or is not yet valid: current time ${iso(after)} is after ${
        iso(p.alice.notAfter)
      }`,
    ),
  );
  assert.ok(
    errorOf(verifyClientCertificate([p.certs.alice], p.roots, before)).endsWith(
      `x509: certificate has expired or is not yet valid: current time ${iso(before)} is before ${
        iso(p.alice.notBefore)
      }`,
    ),
  );
  // The last instant of validity still counts, as in Go. The CA was made a moment before
  // alice, so its own validity may end a second earlier: take the earlier of the two.
  const caNotAfter = new Date(p.root("ca").validTo);
  assert.ok(!Number.isNaN(caNotAfter.getTime()), p.root("ca").validTo);
  const last = new Date(Math.min(p.alice.notAfter.getTime(), caNotAfter.getTime()));
  assert.equal(userOf(verifyClientCertificate([p.certs.alice], p.roots, last)).name, "alice");
});

Deno.test("verifyClientCertificate rejects a CA look-alike with the same subject and another key", async () => {
  const p = await getPki();
  // eve's issuer is "CN=test-ca", but it was signed by a different key.
  const err = errorOf(verifyClientCertificate([p.certs.eve], p.roots, p.now));
  assert.ok(
    err.endsWith(
      'x509: certificate signed by unknown authority (possibly because of "x509: ECDSA verification failure" while trying to verify candidate authority certificate "test-ca")',
    ),
    err,
  );
  // Sending the look-alike CA along as an intermediate does not help either.
  const err2 = errorOf(
    verifyClientCertificate([p.certs.eve, p.certs["lookalike-ca"]], p.roots, p.now),
  );
  assert.match(err2, /certificate signed by unknown authority/);
  // Nor does presenting the look-alike itself.
  const err3 = errorOf(verifyClientCertificate([p.certs["lookalike-ca"]], p.roots, p.now));
  assert.match(err3, /certificate signed by unknown authority/);
});

Deno.test("verifyClientCertificate rejects a server-only certificate and accepts one without EKU", async () => {
  const p = await getPki();
  assert.ok(
    errorOf(verifyClientCertificate([p.certs.server], p.roots, p.now)).endsWith(
      "x509: certificate specifies an incompatible key usage",
    ),
  );
  const plain = verifyClientCertificate([p.certs["no-eku"]], p.roots, p.now);
  assert.equal(userOf(plain).name, "plain");
});

Deno.test("verifyClientCertificate has no opinion without a certificate or without a CN", async () => {
  const p = await getPki();
  assert.equal(verifyClientCertificate([], p.roots, p.now), undefined);
  assert.equal(verifyClientCertificate([p.certs["no-cn"]], p.roots, p.now), undefined);
});

Deno.test("verifyClientCertificate builds the chain through intermediates the client sent", async () => {
  const p = await getPki();
  const user = verifyClientCertificate([p.certs.dave, p.certs["int-ca"]], p.roots, p.now);
  assert.equal(userOf(user).name, "dave");
  assert.match(
    errorOf(verifyClientCertificate([p.certs.dave], p.roots, p.now)),
    /certificate signed by unknown authority$/,
  );
  // The intermediate's CA is not trusted here.
  assert.match(
    errorOf(
      verifyClientCertificate([p.certs.dave, p.certs["int-ca"]], [p.root("other-ca")], p.now),
    ),
    /certificate signed by unknown authority$/,
  );
});

Deno.test("verifyClientCertificate refuses a client certificate used as a CA", async () => {
  const p = await getPki();
  const err = errorOf(verifyClientCertificate([p.certs.frank, p.certs.alice], p.roots, p.now));
  assert.ok(
    err.endsWith(
      'x509: certificate signed by unknown authority (possibly because of "x509: invalid signature: parent certificate cannot sign this kind of certificate" while trying to verify candidate authority certificate "alice")',
    ),
    err,
  );
});

Deno.test("verifyClientCertificate rejects a chain whose root has expired", async () => {
  const p = await getPki();
  const shortCa = parseCertificate(p.certs["short-ca"]);
  const later = new Date(shortCa.notAfter.getTime() + 1000);
  const err = errorOf(verifyClientCertificate([p.certs.gina], [p.root("short-ca")], later));
  assert.match(
    err,
    /unknown authority \(possibly because of "x509: certificate has expired or is not yet valid: current time .* is after .*" while trying to verify candidate authority certificate "short-ca"\)$/,
  );
  const ok = verifyClientCertificate([p.certs.gina], [p.root("short-ca")], p.now);
  assert.equal(userOf(ok).name, "gina");
});

Deno.test("verifyClientCertificate rejects an unknown critical extension", async () => {
  const p = await getPki();
  assert.ok(
    errorOf(verifyClientCertificate([p.certs.critical], p.roots, p.now)).endsWith(
      "x509: unhandled critical extension",
    ),
  );
});

Deno.test("verifyClientCertificate reads the user UID from the subject", async () => {
  const p = await getPki();
  const user = verifyClientCertificate([p.certs.carol], p.roots, p.now);
  assert.equal(userOf(user).uid, "uid-7");
  assert.deepEqual(userOf(user).groups, []);
});

Deno.test("verifyClientCertificate accepts a certificate that is itself in the bundle", async () => {
  const p = await getPki();
  const user = verifyClientCertificate([p.certs.alice], [p.root("alice")], p.now);
  assert.equal(userOf(user).name, "alice");
});

Deno.test("verifyClientCertificate reports garbage as malformed", async () => {
  const p = await getPki();
  assert.match(
    errorOf(verifyClientCertificate([new Uint8Array([0x30, 0x03, 1, 2])], p.roots, p.now)),
    /^x509: malformed certificate/,
  );
});

Deno.test("parseCertificate reads the fields verification uses", async () => {
  const p = await getPki();
  const ca = parseCertificate(p.certs.ca);
  assert.equal(ca.version, 3);
  assert.equal(ca.isCA, true);
  assert.equal(ca.basicConstraintsValid, true);
  assert.equal(ca.maxPathLen, -1);
  assert.equal(ca.commonName, "test-ca");
  assert.deepEqual(p.alice.organization, ["g1", "g2"]);
  assert.deepEqual(p.alice.extKeyUsage, ["1.3.6.1.5.5.7.3.2"]);
  assert.equal(p.alice.keyUsage, 1); // digitalSignature
  assert.equal(p.alice.isCA, false);
  assert.deepEqual(p.alice.authorityKeyId, ca.subjectKeyId);
  assert.equal(p.alice.notAfter.getTime() - p.alice.notBefore.getTime(), 30 * 86400_000);
});

Deno.test("parsePemCertificates skips other blocks", () => {
  const pem = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n" +
    "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n";
  assert.deepEqual(parsePemCertificates(pem), [new Uint8Array([1, 2, 3])]);
});
