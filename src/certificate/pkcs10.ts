/**
 * @module
 * PKCS#10 certificate signing requests (RFC 2986) as Go's `x509.CreateCertificateRequest`
 * writes them for the kubelet: a subject of O= then CN= attributes, the public key, the DNS
 * names and IP addresses as a subjectAltName extension request, signed with the private key
 * (ECDSA with SHA-256, or SHA-256 with RSA). Also generates the kubelet's ECDSA P-256 keys and
 * writes keys as PEM the way client-go's keyutil does (`EC PRIVATE KEY`, `RSA PRIVATE KEY`), and
 * reads the subject and public key back out of a request. Built on `asn1.ts` and `node:crypto`.
 *
 * Corresponds to client-go `util/cert/csr.go` (MakeCSR, MakeCSRFromTemplate) and
 * `util/keyutil` (MarshalPrivateKeyToPEM, ParsePrivateKeyPEM).
 */

import {
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
  sign,
} from "node:crypto";
import {
  bitString,
  contextTag,
  directoryString,
  ia5String,
  implicitTag,
  integer,
  nullValue,
  octetString,
  oid,
  pem,
  sequence,
  set,
} from "./asn1.ts";
import { concatBytes } from "../util/bytes.ts";
import { ipBytes } from "../server/tls.ts";

/** A request that cannot be built or read. */
export class CsrError extends Error {
  override name = "CsrError";
}

/** What a request asks for (the fields of Go's x509.CertificateRequest the kubelet sets). */
export interface CertificateTemplate {
  readonly commonName: string;
  /** O= values, in order. @default [] */
  readonly organizations?: readonly string[];
  /** DNS subjectAltNames. @default [] */
  readonly dnsNames?: readonly string[];
  /** IP subjectAltNames, as text. @default [] */
  readonly ipAddresses?: readonly string[];
}

const OID = {
  organization: "2.5.4.10",
  commonName: "2.5.4.3",
  extensionRequest: "1.2.840.113549.1.9.14",
  subjectAltName: "2.5.29.17",
  ecdsaWithSHA256: "1.2.840.10045.4.3.2",
  ecdsaWithSHA384: "1.2.840.10045.4.3.3",
  sha256WithRSA: "1.2.840.113549.1.1.11",
} as const;

/** The subject Name in Go's pkix.Name order: one RDN with every O, then one with the CN. */
function subjectName(t: CertificateTemplate): Uint8Array {
  const rdns: Uint8Array[] = [];
  const orgs = t.organizations ?? [];
  if (orgs.length > 0) {
    rdns.push(set(...orgs.map((o) => sequence(oid(OID.organization), directoryString(o)))));
  }
  if (t.commonName !== "") {
    rdns.push(set(sequence(oid(OID.commonName), directoryString(t.commonName))));
  }
  return sequence(...rdns);
}

/** The subjectAltName extension value: DNS names, then IP addresses (Go's marshalSANs order). */
function subjectAltNames(t: CertificateTemplate): Uint8Array | undefined {
  const names: Uint8Array[] = [];
  for (const d of t.dnsNames ?? []) names.push(implicitTag(2, ia5String(d)));
  for (const ip of t.ipAddresses ?? []) {
    const bytes = ipBytes(ip);
    if (!bytes) throw new CsrError(`'${ip}' is not an IP address`);
    names.push(implicitTag(7, octetString(bytes)));
  }
  return names.length === 0 ? undefined : sequence(...names);
}

/** The signature algorithm for `key` and the digest node:crypto signs with. */
function signatureAlgorithm(key: KeyObject): { id: Uint8Array; digest: string } {
  switch (key.asymmetricKeyType) {
    case "ec": {
      const curve = key.asymmetricKeyDetails?.namedCurve;
      // Go signs with the hash that matches the curve size.
      if (curve === "secp384r1") {
        return { id: sequence(oid(OID.ecdsaWithSHA384)), digest: "sha384" };
      }
      return { id: sequence(oid(OID.ecdsaWithSHA256)), digest: "sha256" };
    }
    case "rsa":
      return { id: sequence(oid(OID.sha256WithRSA), nullValue()), digest: "sha256" };
    default:
      throw new CsrError(
        `cannot sign a certificate request with a ${key.asymmetricKeyType} key: only ECDSA and RSA keys are supported`,
      );
  }
}

/** A DER certificate signing request for `template`, signed by `key`. */
export function makeCSRDer(key: KeyObject, template: CertificateTemplate): Uint8Array {
  if (key.type !== "private") throw new CsrError("a certificate request needs a private key");
  const spki = new Uint8Array(createPublicKey(key).export({ type: "spki", format: "der" }));
  const san = subjectAltNames(template);
  // Attributes are [0] IMPLICIT SET OF Attribute; only the extension request is ever sent.
  const attributes = san
    ? [
      sequence(
        oid(OID.extensionRequest),
        set(sequence(sequence(oid(OID.subjectAltName), octetString(san)))),
      ),
    ]
    : [];
  const info = sequence(
    integer(0),
    subjectName(template),
    spki,
    contextTag(0, concatBytes(attributes), true),
  );
  const alg = signatureAlgorithm(key);
  const signature = new Uint8Array(sign(alg.digest, info, key));
  return sequence(info, alg.id, bitString(signature));
}

/** {@link makeCSRDer} as PEM (`CERTIFICATE REQUEST`), the form the CSR API takes. */
export function makeCSR(key: KeyObject, template: CertificateTemplate): string {
  return pem("CERTIFICATE REQUEST", makeCSRDer(key, template));
}

/** A new ECDSA P-256 private key, the kubelet's default (client-go generateKeyFunc). */
export function generateECKey(): KeyObject {
  return generateKeyPairSync("ec", { namedCurve: "prime256v1" }).privateKey;
}

/** PEM of a private key as keyutil.MarshalPrivateKeyToPEM writes it: SEC1 for EC, PKCS#1 for RSA. */
export function privateKeyPem(key: KeyObject): string {
  if (key.asymmetricKeyType === "ec") return String(key.export({ type: "sec1", format: "pem" }));
  if (key.asymmetricKeyType === "rsa") return String(key.export({ type: "pkcs1", format: "pem" }));
  return String(key.export({ type: "pkcs8", format: "pem" }));
}

/** The first private key in `text` (keyutil.ParsePrivateKeyPEM); throws {@link CsrError}. */
export function parsePrivateKeyPem(text: string): KeyObject {
  const block = /-----BEGIN ((?:EC |RSA )?PRIVATE KEY)-----[\s\S]*?-----END \1-----/.exec(text);
  if (!block) throw new CsrError("data does not contain a valid RSA or ECDSA private key");
  try {
    return createPrivateKey(block[0]);
  } catch (e) {
    throw new CsrError(`data does not contain a valid RSA or ECDSA private key: ${e}`, {
      cause: e,
    });
  }
}

// --- reading a request back --------------------------------------------------------------------

interface Tlv {
  readonly tag: number;
  readonly start: number;
  readonly body: number;
  readonly end: number;
}

function readTlv(buf: Uint8Array, pos: number, limit: number): Tlv {
  const bad = () => new CsrError("x509: malformed certificate request");
  if (pos + 2 > limit) throw bad();
  const tag = buf[pos]!;
  let len = buf[pos + 1]!;
  let body = pos + 2;
  if (len & 0x80) {
    const n = len & 0x7f;
    if (n === 0 || n > 4 || body + n > limit) throw bad();
    len = 0;
    for (let i = 0; i < n; i++) len = len * 256 + buf[body++]!;
  }
  if (body + len > limit) throw bad();
  return { tag, start: pos, body, end: body + len };
}

function childrenOf(buf: Uint8Array, t: Tlv): Tlv[] {
  const out: Tlv[] = [];
  for (let at = t.body; at < t.end;) {
    const c = readTlv(buf, at, t.end);
    out.push(c);
    at = c.end;
  }
  return out;
}

/** The parts of a request that tell two requests apart (client-go ensureCompatible). */
export interface ParsedCSR {
  /** DER of the subject Name. */
  readonly rawSubject: Uint8Array;
  /** DER of the SubjectPublicKeyInfo. */
  readonly rawSubjectPublicKeyInfo: Uint8Array;
}

/** Reads the subject and public key of a PEM `CERTIFICATE REQUEST`; throws {@link CsrError}. */
export function parseCSRPem(text: string): ParsedCSR {
  const m = /-----BEGIN CERTIFICATE REQUEST-----([\s\S]*?)-----END CERTIFICATE REQUEST-----/
    .exec(text);
  if (!m) throw new CsrError("PEM block type must be CERTIFICATE REQUEST");
  const der = Uint8Array.from(atob((m[1] ?? "").replace(/\s+/g, "")), (c) => c.charCodeAt(0));
  const top = readTlv(der, 0, der.length);
  const [info] = childrenOf(der, top);
  if (!info) throw new CsrError("x509: malformed certificate request");
  const [, subject, spki] = childrenOf(der, info);
  if (!subject || !spki) throw new CsrError("x509: malformed certificate request");
  return {
    rawSubject: der.slice(subject.start, subject.end),
    rawSubjectPublicKeyInfo: der.slice(spki.start, spki.end),
  };
}
