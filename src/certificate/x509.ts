/**
 * @module
 * Client certificate verification for the kubelet API, as Go's `crypto/x509`
 * `Certificate.Verify` does it with the options the kubelet's x509 authenticator passes (the
 * client CA bundle as roots, the other certificates the client sent as intermediates, key usage
 * ClientAuth), and the identity upstream's `CommonNameUserConversion` takes from a verified leaf.
 * A small DER reader gets the fields Go checks (names, validity, basic constraints, key usage,
 * extended key usage, critical extensions), because node:crypto's `X509Certificate` in Deno does
 * not expose extended key usage; signatures are checked with `X509Certificate.verify`.
 * Private helper of `server/auth.ts`. Corresponds to k8s.io/apiserver
 * `pkg/authentication/request/x509/x509.go` (Authenticator.AuthenticateRequest,
 * CommonNameUserConversion) and Go's `crypto/x509/verify.go`.
 */

import { createHash, X509Certificate } from "node:crypto";
import type { UserInfo } from "../server/server.ts";
import { goJsonString } from "../util/go_json.ts";

/** The user.Info extra key that carries the credential's identity (upstream user.CredentialIDKey). */
export const CREDENTIAL_ID_KEY = "authentication.kubernetes.io/credential-id";

/** The subject attribute that carries a user UID (k8s.io/apimachinery asn1.X509UID). */
export const X509_UID_OID = "1.3.6.1.4.1.57683.2";

const OID_CN = "2.5.4.3";
const OID_O = "2.5.4.10";
const EKU_ANY = "2.5.29.37.0";
/** id-kp-clientAuth. */
export const EKU_CLIENT_AUTH = "1.3.6.1.5.5.7.3.2";
/** id-kp-serverAuth. */
export const EKU_SERVER_AUTH = "1.3.6.1.5.5.7.3.1";
const KEY_USAGE_CERT_SIGN = 1 << 5;
const MAX_SIGNATURE_CHECKS = 100;

/** Extensions Go's parser understands; any other marked critical fails verification. */
const HANDLED_EXTENSIONS = new Set([
  "2.5.29.14",
  "2.5.29.15",
  "2.5.29.17",
  "2.5.29.19",
  "2.5.29.30",
  "2.5.29.31",
  "2.5.29.32",
  "2.5.29.33",
  "2.5.29.35",
  "2.5.29.36",
  "2.5.29.37",
  "2.5.29.54",
  "1.3.6.1.5.5.7.1.1",
]);

/** Signature algorithms Go refuses to verify, by OID, with Go's names for them. */
const INSECURE_ALGORITHMS: Readonly<Record<string, string>> = {
  "1.2.840.113549.1.1.2": "MD2-RSA",
  "1.2.840.113549.1.1.4": "MD5-RSA",
  "1.2.840.113549.1.1.5": "SHA1-RSA",
  "1.2.840.10040.4.3": "DSA-SHA1",
  "1.2.840.10045.4.1": "ECDSA-SHA1",
};

/** A certificate that is not well-formed DER. */
export class CertificateParseError extends Error {
  override name = "CertificateParseError";
}

/** Why a certificate did not verify; the message is Go's. */
export class CertificateVerifyError extends Error {
  override name = "CertificateVerifyError";
}

/** One attribute of a distinguished name; `value` is undefined when it is not a string type. */
export interface NameAttribute {
  readonly oid: string;
  readonly value: string | undefined;
}

/** The parts of a certificate that verification and user conversion look at. */
export interface ParsedCertificate {
  readonly raw: Uint8Array;
  readonly version: number;
  readonly serialNumber: bigint;
  readonly signatureAlgorithm: string;
  readonly rawIssuer: Uint8Array;
  readonly rawSubject: Uint8Array;
  readonly subject: readonly NameAttribute[];
  /** The last CN, as Go's pkix.Name keeps it; "" when absent. */
  readonly commonName: string;
  /** Every O, in order. */
  readonly organization: readonly string[];
  readonly notBefore: Date;
  readonly notAfter: Date;
  readonly rawSubjectPublicKeyInfo: Uint8Array;
  readonly basicConstraintsValid: boolean;
  readonly isCA: boolean;
  /** -1 when the basic constraints carry no path length. */
  readonly maxPathLen: number;
  /** Go's KeyUsage bit set (bit i = named bit i); 0 when absent. */
  readonly keyUsage: number;
  /** Extended key usage OIDs; empty when absent. */
  readonly extKeyUsage: readonly string[];
  readonly subjectKeyId: Uint8Array;
  readonly authorityKeyId: Uint8Array;
  readonly unhandledCriticalExtensions: readonly string[];
  readonly hasNameConstraints: boolean;
  /** For signature checks. */
  readonly x509: X509Certificate;
}

interface Tlv {
  readonly tag: number;
  readonly start: number;
  readonly body: number;
  readonly end: number;
}

function malformed(what: string): CertificateParseError {
  return new CertificateParseError(`x509: malformed certificate: ${what}`);
}

function readTlv(buf: Uint8Array, pos: number, limit: number): Tlv {
  if (pos + 2 > limit) throw malformed("truncated element");
  const tag = buf[pos]!;
  if ((tag & 0x1f) === 0x1f) throw malformed("high tag number");
  let len = buf[pos + 1]!;
  let body = pos + 2;
  if (len & 0x80) {
    const n = len & 0x7f;
    if (n === 0 || n > 4) throw malformed("unsupported length");
    len = 0;
    for (let i = 0; i < n; i++) {
      if (body >= limit) throw malformed("truncated length");
      len = len * 256 + buf[body++]!;
    }
  }
  const end = body + len;
  if (end > limit) throw malformed("element longer than its parent");
  return { tag, start: pos, body, end };
}

function children(buf: Uint8Array, t: Tlv): Tlv[] {
  const out: Tlv[] = [];
  for (let p = t.body; p < t.end;) {
    const c = readTlv(buf, p, t.end);
    out.push(c);
    p = c.end;
  }
  return out;
}

function expect(t: Tlv | undefined, tag: number, what: string): Tlv {
  if (!t || t.tag !== tag) throw malformed(what);
  return t;
}

function decodeOid(buf: Uint8Array, t: Tlv): string {
  const parts: number[] = [];
  let v = 0;
  for (let i = t.body; i < t.end; i++) {
    const b = buf[i]!;
    v = v * 128 + (b & 0x7f);
    if ((b & 0x80) === 0) {
      if (parts.length === 0) {
        if (v < 80) parts.push(Math.floor(v / 40), v % 40);
        else parts.push(2, v - 80);
      } else parts.push(v);
      v = 0;
    }
  }
  return parts.join(".");
}

function decodeInteger(buf: Uint8Array, t: Tlv): bigint {
  if (t.end === t.body) throw malformed("empty integer");
  let v = 0n;
  for (let i = t.body; i < t.end; i++) v = (v << 8n) | BigInt(buf[i]!);
  if (buf[t.body]! & 0x80) v -= 1n << BigInt(8 * (t.end - t.body));
  return v;
}

function decodeTime(buf: Uint8Array, t: Tlv): Date {
  const s = new TextDecoder("latin1").decode(buf.subarray(t.body, t.end));
  let m: RegExpMatchArray | null;
  let year: number;
  if (t.tag === 0x17 && (m = s.match(/^(\d\d)(\d\d)(\d\d)(\d\d)(\d\d)(\d\d)Z$/))) {
    const yy = Number(m[1]);
    year = yy < 50 ? 2000 + yy : 1900 + yy;
  } else if (t.tag === 0x18 && (m = s.match(/^(\d{4})(\d\d)(\d\d)(\d\d)(\d\d)(\d\d)Z$/))) {
    year = Number(m[1]);
  } else {
    throw malformed(`bad time '${s}'`);
  }
  const [mo, d, h, mi, se] = [m[2], m[3], m[4], m[5], m[6]].map(Number) as [
    number,
    number,
    number,
    number,
    number,
  ];
  return new Date(Date.UTC(year, mo - 1, d, h, mi, se));
}

function decodeString(buf: Uint8Array, t: Tlv): string | undefined {
  const bytes = buf.subarray(t.body, t.end);
  switch (t.tag) {
    case 0x0c:
      try {
        return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
      } catch {
        throw malformed("invalid UTF-8 string");
      }
    case 0x12: // NumericString
    case 0x13: // PrintableString
    case 0x14: // T61String, read as Latin-1 as Go does
    case 0x16: // IA5String
      return new TextDecoder("latin1").decode(bytes);
    case 0x1e: { // BMPString
      if (bytes.length % 2 !== 0) throw malformed("odd BMPString");
      let out = "";
      for (let i = 0; i < bytes.length; i += 2) {
        out += String.fromCharCode((bytes[i]! << 8) | bytes[i + 1]!);
      }
      return out;
    }
    default:
      return undefined;
  }
}

function decodeName(buf: Uint8Array, t: Tlv): NameAttribute[] {
  const out: NameAttribute[] = [];
  for (const rdn of children(buf, expect(t, 0x30, "name"))) {
    for (const atv of children(buf, expect(rdn, 0x31, "relative distinguished name"))) {
      const [type, value] = children(buf, expect(atv, 0x30, "attribute"));
      const oid = decodeOid(buf, expect(type, 0x06, "attribute type"));
      if (!value) throw malformed("attribute without value");
      out.push({ oid, value: decodeString(buf, value) });
    }
  }
  return out;
}

function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

interface Extensions {
  basicConstraintsValid: boolean;
  isCA: boolean;
  maxPathLen: number;
  keyUsage: number;
  extKeyUsage: string[];
  subjectKeyId: Uint8Array;
  authorityKeyId: Uint8Array;
  unhandledCriticalExtensions: string[];
  hasNameConstraints: boolean;
}

function decodeExtensions(buf: Uint8Array, list: Tlv | undefined): Extensions {
  const ext: Extensions = {
    basicConstraintsValid: false,
    isCA: false,
    maxPathLen: -1,
    keyUsage: 0,
    extKeyUsage: [],
    subjectKeyId: new Uint8Array(),
    authorityKeyId: new Uint8Array(),
    unhandledCriticalExtensions: [],
    hasNameConstraints: false,
  };
  if (!list) return ext;
  const seen = new Set<string>();
  for (const e of children(buf, expect(list, 0x30, "extensions"))) {
    const parts = children(buf, expect(e, 0x30, "extension"));
    const oid = decodeOid(buf, expect(parts[0], 0x06, "extension id"));
    if (seen.has(oid)) throw malformed(`duplicate extension ${oid}`);
    seen.add(oid);
    let critical = false;
    let valueAt = 1;
    if (parts[1]?.tag === 0x01) {
      critical = buf[parts[1].body] !== 0;
      valueAt = 2;
    }
    const octets = expect(parts[valueAt], 0x04, "extension value");
    if (critical && !HANDLED_EXTENSIONS.has(oid)) ext.unhandledCriticalExtensions.push(oid);
    const inner = () => readTlv(buf, octets.body, octets.end);
    switch (oid) {
      case "2.5.29.19": {
        const fields = children(buf, expect(inner(), 0x30, "basic constraints"));
        ext.basicConstraintsValid = true;
        for (const f of fields) {
          if (f.tag === 0x01) ext.isCA = buf[f.body] !== 0;
          else if (f.tag === 0x02) ext.maxPathLen = Number(decodeInteger(buf, f));
        }
        break;
      }
      case "2.5.29.15": {
        const bits = expect(inner(), 0x03, "key usage");
        const unused = buf[bits.body] ?? 0;
        const nbits = (bits.end - bits.body - 1) * 8 - unused;
        for (let i = 0; i < nbits && i < 31; i++) {
          if (buf[bits.body + 1 + (i >> 3)]! & (0x80 >> (i & 7))) ext.keyUsage |= 1 << i;
        }
        break;
      }
      case "2.5.29.37":
        for (const o of children(buf, expect(inner(), 0x30, "extended key usage"))) {
          ext.extKeyUsage.push(decodeOid(buf, expect(o, 0x06, "key purpose")));
        }
        break;
      case "2.5.29.14": {
        const id = expect(inner(), 0x04, "subject key id");
        ext.subjectKeyId = buf.slice(id.body, id.end);
        break;
      }
      case "2.5.29.35":
        for (const f of children(buf, expect(inner(), 0x30, "authority key id"))) {
          if (f.tag === 0x80) ext.authorityKeyId = buf.slice(f.body, f.end);
        }
        break;
      case "2.5.29.30":
        ext.hasNameConstraints = true;
        break;
    }
  }
  return ext;
}

/** Parses a DER certificate; throws {@link CertificateParseError}. */
export function parseCertificate(der: Uint8Array): ParsedCertificate {
  const raw = new Uint8Array(der);
  const top = readTlv(raw, 0, raw.length);
  if (top.end !== raw.length) throw malformed("trailing data");
  const [tbs, sigAlg] = children(raw, expect(top, 0x30, "certificate"));
  const fields = children(raw, expect(tbs, 0x30, "tbsCertificate"));
  let i = 0;
  let version = 1;
  if (fields[0]?.tag === 0xa0) {
    const v = expect(readTlv(raw, fields[0].body, fields[0].end), 0x02, "version");
    version = Number(decodeInteger(raw, v)) + 1;
    i = 1;
  }
  const serialNumber = decodeInteger(raw, expect(fields[i], 0x02, "serial number"));
  const issuer = expect(fields[i + 2], 0x30, "issuer");
  const validity = children(raw, expect(fields[i + 3], 0x30, "validity"));
  const subject = expect(fields[i + 4], 0x30, "subject");
  const spki = expect(fields[i + 5], 0x30, "subject public key info");
  const extList = fields.slice(i + 6).find((f) => f.tag === 0xa3);
  const [algOid] = children(raw, expect(sigAlg, 0x30, "signature algorithm"));
  const [nb, na] = validity;
  if (!nb || !na) throw malformed("validity");
  const names = decodeName(raw, subject);
  let x509: X509Certificate;
  try {
    x509 = new X509Certificate(raw);
  } catch (e) {
    throw new CertificateParseError(`x509: malformed certificate: ${String(e)}`, { cause: e });
  }
  return {
    raw,
    version,
    serialNumber,
    signatureAlgorithm: decodeOid(raw, expect(algOid, 0x06, "signature algorithm id")),
    rawIssuer: raw.slice(issuer.start, issuer.end),
    rawSubject: raw.slice(subject.start, subject.end),
    subject: names,
    commonName: names.filter((n) => n.oid === OID_CN && n.value !== undefined).at(-1)?.value ??
      "",
    organization: names.filter((n) => n.oid === OID_O && n.value !== undefined).map((n) =>
      n.value!
    ),
    notBefore: decodeTime(raw, nb),
    notAfter: decodeTime(raw, na),
    rawSubjectPublicKeyInfo: raw.slice(spki.start, spki.end),
    ...decodeExtensions(raw, extList ? readTlv(raw, extList.body, extList.end) : undefined),
    x509,
  };
}

/** The DER certificates of a PEM bundle, in order; blocks of other types are skipped. */
export function parsePemCertificates(pem: string): Uint8Array[] {
  const out: Uint8Array[] = [];
  const re = /-----BEGIN ([A-Z0-9 ]+)-----([\s\S]*?)-----END \1-----/g;
  for (const m of pem.matchAll(re)) {
    if (m[1] !== "CERTIFICATE") continue;
    const b64 = (m[2] ?? "").replace(/\s+/g, "");
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(b64)) throw malformed("bad base64 in PEM block");
    const bin = atob(b64);
    out.push(Uint8Array.from(bin, (c) => c.charCodeAt(0)));
  }
  return out;
}

function rfc3339(d: Date): string {
  return d.toISOString().replace(/\.\d{3}Z$/, "Z");
}

type CertKind = "leaf" | "intermediate" | "root";

function checkValid(c: ParsedCertificate, kind: CertKind, chainLen: number, now: Date): void {
  if (c.unhandledCriticalExtensions.length > 0) {
    throw new CertificateVerifyError("x509: unhandled critical extension");
  }
  if (now.getTime() < c.notBefore.getTime()) {
    throw new CertificateVerifyError(
      `x509: certificate has expired or is not yet valid: current time ${rfc3339(now)} is before ${
        rfc3339(c.notBefore)
      }`,
    );
  }
  if (now.getTime() > c.notAfter.getTime()) {
    throw new CertificateVerifyError(
      `x509: certificate has expired or is not yet valid: current time ${rfc3339(now)} is after ${
        rfc3339(c.notAfter)
      }`,
    );
  }
  if (kind === "leaf") return;
  if (c.hasNameConstraints) {
    // Go checks the leaf's names against them; until that is written, refuse such chains.
    throw new CertificateVerifyError(
      "x509: name constraints on a client CA are not supported yet",
    );
  }
  if (kind === "intermediate" && (!c.basicConstraintsValid || !c.isCA)) {
    throw new CertificateVerifyError(
      "x509: certificate is not authorized to sign other certificates",
    );
  }
  if (c.basicConstraintsValid && c.maxPathLen >= 0 && chainLen - 1 > c.maxPathLen) {
    throw new CertificateVerifyError("x509: too many intermediates for path length constraint");
  }
}

function checkSignatureFrom(child: ParsedCertificate, parent: ParsedCertificate): void {
  if (
    (parent.version === 3 && !parent.basicConstraintsValid) ||
    (parent.basicConstraintsValid && !parent.isCA) ||
    (parent.keyUsage !== 0 && (parent.keyUsage & KEY_USAGE_CERT_SIGN) === 0)
  ) {
    throw new CertificateVerifyError(
      "x509: invalid signature: parent certificate cannot sign this kind of certificate",
    );
  }
  const insecure = INSECURE_ALGORITHMS[child.signatureAlgorithm];
  if (insecure) {
    throw new CertificateVerifyError(
      `x509: cannot verify signature: insecure algorithm ${insecure}`,
    );
  }
  let ok: boolean;
  try {
    ok = child.x509.verify(parent.x509.publicKey);
  } catch (e) {
    throw new CertificateVerifyError(`x509: cannot verify signature: ${String(e)}`);
  }
  if (!ok) {
    const type = parent.x509.publicKey.asymmetricKeyType;
    throw new CertificateVerifyError(
      type === "ec"
        ? "x509: ECDSA verification failure"
        : type === "ed25519"
        ? "x509: Ed25519 verification failure"
        : "crypto/rsa: verification error",
    );
  }
}

function unknownAuthority(hint?: { err: Error; cert: ParsedCertificate }): CertificateVerifyError {
  let s = "x509: certificate signed by unknown authority";
  if (hint) {
    const c = hint.cert;
    const name = c.commonName || c.organization[0] || `serial:${c.serialNumber}`;
    s += ` (possibly because of ${
      goJsonString(hint.err.message, false)
    } while trying to verify candidate authority certificate ${goJsonString(name, false)})`;
  }
  return new CertificateVerifyError(s);
}

/** Candidates whose subject is `c`'s issuer, most plausible first (Go's findPotentialParents). */
function potentialParents(
  c: ParsedCertificate,
  pool: readonly ParsedCertificate[],
): ParsedCertificate[] {
  const rank = (p: ParsedCertificate) => {
    if (bytesEqual(p.subjectKeyId, c.authorityKeyId)) return 0;
    if ((p.subjectKeyId.length === 0) !== (c.authorityKeyId.length === 0)) return 1;
    return 2;
  };
  return pool.filter((p) => bytesEqual(p.rawSubject, c.rawIssuer))
    .map((p, i) => ({ p, i, r: rank(p) }))
    .sort((a, b) => a.r - b.r || a.i - b.i)
    .map((x) => x.p);
}

interface Pools {
  readonly roots: readonly ParsedCertificate[];
  readonly intermediates: readonly ParsedCertificate[];
  readonly now: Date;
  sigChecks: number;
}

function buildChains(chain: ParsedCertificate[], pools: Pools): ParsedCertificate[][] {
  const c = chain[chain.length - 1]!;
  const chains: ParsedCertificate[][] = [];
  let hint: { err: Error; cert: ParsedCertificate } | undefined;
  // As in Go, the error of the last candidate that was followed (or the check limit) wins.
  let err: Error | undefined;
  const consider = (kind: CertKind, cand: ParsedCertificate) => {
    const inChain = chain.some((x) =>
      bytesEqual(x.rawSubject, cand.rawSubject) &&
      bytesEqual(x.rawSubjectPublicKeyInfo, cand.rawSubjectPublicKeyInfo)
    );
    if (inChain) return;
    if (++pools.sigChecks > MAX_SIGNATURE_CHECKS) {
      err = new CertificateVerifyError(
        "x509: signature check attempts limit reached while verifying certificate chain",
      );
      return;
    }
    try {
      checkSignatureFrom(c, cand);
      checkValid(cand, kind, chain.length, pools.now);
    } catch (e) {
      if (!(e instanceof CertificateVerifyError)) throw e;
      hint ??= { err: e, cert: cand };
      return;
    }
    if (kind === "root") {
      chains.push([...chain, cand]);
      return;
    }
    try {
      chains.push(...buildChains([...chain, cand], pools));
      err = undefined;
    } catch (e) {
      if (!(e instanceof CertificateVerifyError)) throw e;
      err = e;
    }
  };
  for (const r of potentialParents(c, pools.roots)) consider("root", r);
  for (const m of potentialParents(c, pools.intermediates)) consider("intermediate", m);
  if (chains.length > 0) return chains;
  throw err ?? unknownAuthority(hint);
}

/** Go's checkChainForKeyUsage: every certificate that names usages must allow `usage`. */
function chainAllows(chain: readonly ParsedCertificate[], usage: string): boolean {
  return chain.every((c) =>
    c.extKeyUsage.length === 0 || c.extKeyUsage.includes(EKU_ANY) || c.extKeyUsage.includes(usage)
  );
}

/**
 * Verifies `leaf` up to one of `roots` through `intermediates` at `now`, for client
 * authentication, as Go's `Certificate.Verify`; returns the verified chains (leaf first) or
 * throws {@link CertificateVerifyError} with Go's message.
 */
export function verifyChains(
  leaf: ParsedCertificate,
  intermediates: readonly ParsedCertificate[],
  roots: readonly ParsedCertificate[],
  now: Date,
): ParsedCertificate[][] {
  checkValid(leaf, "leaf", 0, now);
  const candidates = roots.some((r) => bytesEqual(r.raw, leaf.raw))
    ? [[leaf]]
    : buildChains([leaf], { roots, intermediates, now, sigChecks: 0 });
  const chains = candidates.filter((ch) => chainAllows(ch, EKU_CLIENT_AUTH));
  if (chains.length === 0) {
    throw new CertificateVerifyError("x509: certificate specifies an incompatible key usage");
  }
  return chains;
}

function columnHex(b: Uint8Array): string {
  return Array.from(b, (x) => x.toString(16).toUpperCase().padStart(2, "0")).join(":");
}

/** How upstream names a certificate in errors: serial, subject key id, authority key id. */
export function certificateIdentifier(c: ParsedCertificate): string {
  return `SN=${c.serialNumber}, SKID=${columnHex(c.subjectKeyId)}, AKID=${
    columnHex(c.authorityKeyId)
  }`;
}

/**
 * Upstream CommonNameUserConversion: name = CN, groups = O, uid from the X509 UID attribute,
 * the certificate's SHA-256 as credential id; undefined when the CN is empty. Throws for a
 * malformed UID.
 */
export function commonNameUser(leaf: ParsedCertificate): UserInfo | undefined {
  if (leaf.commonName === "") return undefined;
  const uids = leaf.subject.filter((a) => a.oid === X509_UID_OID);
  if (uids.some((u) => u.value === undefined)) {
    throw new CertificateVerifyError("unable to parse UID into a string");
  }
  if (uids.length > 1) {
    throw new CertificateVerifyError(
      `expected 1 UID, but found multiple: [${uids.map((u) => u.value).join(" ")}]`,
    );
  }
  const uid = uids[0]?.value;
  if (uid === "") throw new CertificateVerifyError("UID cannot be an empty string");
  const id = `X509SHA256=${createHash("sha256").update(leaf.raw).digest("hex")}`;
  return {
    name: leaf.commonName,
    ...(uid !== undefined ? { uid } : {}),
    groups: [...leaf.organization],
    extra: { [CREDENTIAL_ID_KEY]: [id] },
  };
}

const parsedRoots = new WeakMap<X509Certificate, ParsedCertificate>();

function parseRoot(c: X509Certificate): ParsedCertificate {
  let p = parsedRoots.get(c);
  if (!p) {
    p = parseCertificate(new Uint8Array(c.raw));
    parsedRoots.set(c, p);
  }
  return p;
}

/**
 * Authenticates a client certificate chain (leaf first, as the client sent it) against the
 * client CA bundle, as upstream's x509 authenticator with CommonNameUserConversion: the user,
 * `{ error }` (upstream's "verifying certificate SN=..., SKID=..., AKID=... failed: ..."), or
 * undefined when there is no certificate or it names no user (no opinion, so other
 * authenticators may still accept the request).
 */
export function verifyClientCertificate(
  chainDer: readonly Uint8Array[],
  roots: readonly X509Certificate[],
  now: Date,
): UserInfo | { error: string } | undefined {
  const [leafDer, ...rest] = chainDer;
  if (!leafDer) return undefined;
  let leaf: ParsedCertificate;
  let intermediates: ParsedCertificate[];
  let rootCerts: ParsedCertificate[];
  try {
    leaf = parseCertificate(leafDer);
    intermediates = rest.map(parseCertificate);
    rootCerts = roots.map(parseRoot);
  } catch (e) {
    return { error: e instanceof Error ? e.message : String(e) };
  }
  let chains: ParsedCertificate[][];
  try {
    chains = verifyChains(leaf, intermediates, rootCerts, now);
  } catch (e) {
    if (!(e instanceof CertificateVerifyError)) throw e;
    return { error: `verifying certificate ${certificateIdentifier(leaf)} failed: ${e.message}` };
  }
  const errors: string[] = [];
  for (const chain of chains) {
    try {
      const user = commonNameUser(chain[0]!);
      if (user) return user;
    } catch (e) {
      errors.push(e instanceof Error ? e.message : String(e));
    }
  }
  if (errors.length === 0) return undefined;
  return { error: errors.length === 1 ? errors[0]! : `[${errors.join(", ")}]` };
}
