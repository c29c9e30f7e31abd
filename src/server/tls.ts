/**
 * @module
 * The kubelet API server's serving certificate and TLS settings. Owns: loading
 * `tlsCertFile`/`tlsPrivateKeyFile` when configured, else `<cert-dir>/kubelet.crt` and
 * `kubelet.key`, generating and writing that pair when neither file exists (a self-signed CA
 * `<host>-ca@<unix time>` and a serving certificate `<host>@<unix time>` signed by it, RSA 2048,
 * one year); and turning `tlsMinVersion`/`tlsCipherSuites` (Go crypto/tls names) into the
 * OpenSSL names `node:tls` takes. Talks to the file system only; the certificate is built with
 * `node:crypto` and the DER writer in `certificate/asn1.ts`, never with an external program. What it returns
 * feeds `ServerTLS` in `server.ts`.
 *
 * Corresponds to upstream `cmd/kubelet/app/server.go` (InitializeTLS), client-go
 * `util/cert` (GenerateSelfSignedCertKey, CanReadCertAndKey, WriteCert; `keyutil.WriteKey`) and
 * component-base `cli/flag/ciphersuites_flag.go` (TLSCipherSuites, TLSVersion).
 *
 * Deno's `node:tls` is rustls underneath: it honours `minVersion` but ignores `ciphers`, and it
 * has no TLS 1.0/1.1 and no CBC, RC4, 3DES or RSA-key-exchange suites at all. So the server must
 * check each connection's negotiated suite with {@link cipherAllowed} after the handshake (see
 * that function); the `ciphers` string is still produced for a Node/OpenSSL runtime.
 */

import {
  createHash,
  createPrivateKey,
  generateKeyPairSync,
  type KeyObject,
  sign,
  X509Certificate,
} from "node:crypto";
import { isIPv4, isIPv6 } from "node:net";
import { dirname, join } from "node:path";
import {
  bitString,
  boolean,
  contextTag,
  directoryString,
  ia5String,
  implicitTag,
  integer,
  namedBits,
  nullValue,
  octetString,
  oid,
  pem,
  sequence,
  set,
  x509Time,
} from "../certificate/asn1.ts";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import type { KubeletConfiguration } from "../apis/config_types.ts";

/** The serving certificate could not be loaded, generated or written. */
export class ServingCertError extends Error {
  override name = "ServingCertError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** `tlsMinVersion` or `tlsCipherSuites` holds a name upstream does not accept. */
export class TLSSettingsError extends Error {
  override name = "TLSSettingsError";
}

/** A TLS protocol version as `node:tls` names it. */
export type TLSVersionName = "TLSv1" | "TLSv1.1" | "TLSv1.2" | "TLSv1.3";

/** Go's `tls.VersionTLS1x` constant names (the values `tlsMinVersion` takes) mapped to node's. */
export const TLS_VERSIONS: Readonly<Record<string, TLSVersionName>> = {
  VersionTLS10: "TLSv1",
  VersionTLS11: "TLSv1.1",
  VersionTLS12: "TLSv1.2",
  VersionTLS13: "TLSv1.3",
};

/** What upstream uses when `tlsMinVersion` is empty (component-base DefaultTLSVersion). */
export const DEFAULT_TLS_MIN_VERSION: TLSVersionName = "TLSv1.2";

/** One cipher suite upstream accepts in `tlsCipherSuites`. */
export interface CipherSuiteInfo {
  /** The OpenSSL name (`node:tls` ciphers, `TLSSocket.getCipher().name`). */
  readonly openssl: string;
  /** In Go's `tls.InsecureCipherSuites()`: accepted, with a log line. */
  readonly insecure: boolean;
  /** A TLS 1.3 suite: always enabled, not configurable (as in Go). */
  readonly tls13: boolean;
}

function suite(openssl: string, insecure = false, tls13 = false): CipherSuiteInfo {
  return { openssl, insecure, tls13 };
}

/**
 * Every name `tlsCipherSuites` accepts: Go's `tls.CipherSuites()`, the two legacy CHACHA20 names
 * kept by component-base, and `tls.InsecureCipherSuites()`.
 */
export const CIPHER_SUITES: Readonly<Record<string, CipherSuiteInfo>> = {
  TLS_AES_128_GCM_SHA256: suite("TLS_AES_128_GCM_SHA256", false, true),
  TLS_AES_256_GCM_SHA384: suite("TLS_AES_256_GCM_SHA384", false, true),
  TLS_CHACHA20_POLY1305_SHA256: suite("TLS_CHACHA20_POLY1305_SHA256", false, true),
  TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA: suite("ECDHE-ECDSA-AES128-SHA"),
  TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA: suite("ECDHE-ECDSA-AES256-SHA"),
  TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA: suite("ECDHE-RSA-AES128-SHA"),
  TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA: suite("ECDHE-RSA-AES256-SHA"),
  TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256: suite("ECDHE-ECDSA-AES128-GCM-SHA256"),
  TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384: suite("ECDHE-ECDSA-AES256-GCM-SHA384"),
  TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256: suite("ECDHE-RSA-AES128-GCM-SHA256"),
  TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384: suite("ECDHE-RSA-AES256-GCM-SHA384"),
  TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256: suite("ECDHE-RSA-CHACHA20-POLY1305"),
  TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256: suite("ECDHE-ECDSA-CHACHA20-POLY1305"),
  TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305: suite("ECDHE-RSA-CHACHA20-POLY1305"),
  TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305: suite("ECDHE-ECDSA-CHACHA20-POLY1305"),
  TLS_RSA_WITH_RC4_128_SHA: suite("RC4-SHA", true),
  TLS_RSA_WITH_3DES_EDE_CBC_SHA: suite("DES-CBC3-SHA", true),
  TLS_RSA_WITH_AES_128_CBC_SHA: suite("AES128-SHA", true),
  TLS_RSA_WITH_AES_256_CBC_SHA: suite("AES256-SHA", true),
  TLS_RSA_WITH_AES_128_CBC_SHA256: suite("AES128-SHA256", true),
  TLS_RSA_WITH_AES_128_GCM_SHA256: suite("AES128-GCM-SHA256", true),
  TLS_RSA_WITH_AES_256_GCM_SHA384: suite("AES256-GCM-SHA384", true),
  TLS_ECDHE_ECDSA_WITH_RC4_128_SHA: suite("ECDHE-ECDSA-RC4-SHA", true),
  TLS_ECDHE_RSA_WITH_RC4_128_SHA: suite("ECDHE-RSA-RC4-SHA", true),
  TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA: suite("ECDHE-RSA-DES-CBC3-SHA", true),
  TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256: suite("ECDHE-ECDSA-AES128-SHA256", true),
  TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256: suite("ECDHE-RSA-AES128-SHA256", true),
};

/** TLS 1.3 suites, kept in every cipher list: Go never lets them be configured away. */
const TLS13_SUITES = Object.values(CIPHER_SUITES).filter((s) => s.tls13).map((s) => s.openssl);

/** The `node:tls` options derived from the configuration. */
export interface TLSSettings {
  /** Always set: upstream's default applies when `tlsMinVersion` is empty. */
  readonly minVersion: TLSVersionName;
  /** OpenSSL cipher list; undefined leaves the runtime's default (Go's when unset). */
  readonly ciphers?: string;
}

/**
 * Maps `tlsMinVersion` and `tlsCipherSuites` to `node:tls` options (upstream InitializeTLS with
 * cliflag.TLSVersion/TLSCipherSuites). Throws {@link TLSSettingsError} naming the field and the
 * value for an unknown name. Logs upstream's lines for insecure suites and for suites given with
 * TLS 1.3, which then are ignored, as Go ignores them.
 */
export function tlsSettings(
  config: Pick<KubeletConfiguration, "tlsMinVersion" | "tlsCipherSuites">,
  logger?: Logger,
): TLSSettings {
  const names = config.tlsCipherSuites ?? [];
  const suites = names.map((name) => {
    const info = Object.hasOwn(CIPHER_SUITES, name) ? CIPHER_SUITES[name] : undefined;
    if (!info) {
      throw new TLSSettingsError(
        `Cannot start: 'tlsCipherSuites' must list Go crypto/tls cipher suite names such as ` +
          `TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256: Cipher suite ${name} not supported or doesn't exist`,
      );
    }
    if (info.insecure) logger?.info("Use of insecure cipher detected.", { cipher: name });
    return info;
  });

  const versionName = config.tlsMinVersion ?? "";
  const minVersion = versionName === ""
    ? DEFAULT_TLS_MIN_VERSION
    : Object.hasOwn(TLS_VERSIONS, versionName)
    ? TLS_VERSIONS[versionName]
    : undefined;
  if (!minVersion) {
    throw new TLSSettingsError(
      `Cannot start: 'tlsMinVersion' must be one of ${Object.keys(TLS_VERSIONS).join(", ")}: ` +
        `unknown tls version ${JSON.stringify(versionName)}`,
    );
  }
  if (suites.length === 0) return { minVersion };
  if (minVersion === "TLSv1.3") {
    logger?.info(
      "Warning: TLS 1.3 cipher suites are not configurable, ignoring --tls-cipher-suites",
    );
    return { minVersion };
  }
  const list = [...TLS13_SUITES];
  for (const s of suites) if (!list.includes(s.openssl)) list.push(s.openssl);
  return { minVersion, ciphers: list.join(":") };
}

/**
 * Whether a connection's negotiated suite (`TLSSocket.getCipher()`) is one `ciphers` allows;
 * TLS 1.3 connections always are. Deno's `node:tls` ignores the `ciphers` option, so the server
 * calls this on `secureConnection` and destroys the socket when it answers false, before any
 * request is read.
 */
export function cipherAllowed(
  ciphers: string | undefined,
  negotiated: { readonly name: string; readonly version?: string },
): boolean {
  if (ciphers === undefined || ciphers === "") return true;
  if (negotiated.version === "TLSv1.3") return true;
  return ciphers.split(":").includes(negotiated.name);
}

// --- the self-signed certificate -------------------------------------------------------------

const OID = {
  commonName: "2.5.4.3",
  sha256WithRSA: "1.2.840.113549.1.1.11",
  subjectKeyId: "2.5.29.14",
  keyUsage: "2.5.29.15",
  subjectAltName: "2.5.29.17",
  basicConstraints: "2.5.29.19",
  authorityKeyId: "2.5.29.35",
  extKeyUsage: "2.5.29.37",
  serverAuth: "1.3.6.1.5.5.7.3.1",
} as const;

/** KeyUsage bit numbers (RFC 5280 4.2.1.3). */
const KEY_USAGE = { digitalSignature: 0, keyEncipherment: 2, keyCertSign: 5 } as const;

const HOUR_MS = 60 * 60 * 1000;
/** Upstream: "one year self-signed certs", for the CA and the serving certificate alike. */
const MAX_AGE_MS = 365 * 24 * HOUR_MS;

/** The 4- or 16-byte form of an IP address, as Go's `net.IP.To4()`/`To16()` give it. */
export function ipBytes(text: string): Uint8Array | undefined {
  if (isIPv4(text)) return Uint8Array.from(text.split(".").map(Number));
  if (!isIPv6(text) || text.includes("%")) return undefined;
  let s = text;
  const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(s);
  if (v4) {
    const [a, b, c, d] = v4[1]!.split(".").map(Number) as [number, number, number, number];
    s = s.slice(0, -v4[1]!.length) +
      `${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = s.split("::") as [string, string | undefined];
  const groups = (part: string | undefined) => (part ? part.split(":") : []);
  const h = groups(head);
  const t = groups(tail);
  const all = tail === undefined ? h : [...h, ...Array(8 - h.length - t.length).fill("0"), ...t];
  const out = new Uint8Array(16);
  all.forEach((g, i) => {
    const v = parseInt(g, 16);
    out[2 * i] = v >> 8;
    out[2 * i + 1] = v & 0xff;
  });
  // An IPv4-mapped address is written as 4 bytes, as Go does.
  const mapped = out.subarray(0, 12).every((b, i) => (i < 10 ? b === 0 : b === 0xff));
  return mapped ? out.slice(12) : out;
}

function name(commonName: string): Uint8Array {
  return sequence(set(sequence(oid(OID.commonName), directoryString(commonName))));
}

function extension(id: string, critical: boolean, value: Uint8Array): Uint8Array {
  return sequence(oid(id), ...(critical ? [boolean(true)] : []), octetString(value));
}

/** Go 1.25's SubjectKeyId: the first 160 bits of SHA-256 of the subjectPublicKey bits. */
function keyId(publicKey: KeyObject): Uint8Array {
  const pkcs1 = publicKey.export({ type: "pkcs1", format: "der" });
  return new Uint8Array(createHash("sha256").update(pkcs1).digest()).slice(0, 20);
}

interface CertSpec {
  readonly serial: number;
  readonly issuer: string;
  readonly subject: string;
  readonly notBefore: Date;
  readonly notAfter: Date;
  readonly publicKey: KeyObject;
  readonly extensions: readonly Uint8Array[];
  readonly signer: KeyObject;
}

/** Builds and signs an X.509 v3 certificate (sha256WithRSAEncryption); returns its DER. */
function certificate(spec: CertSpec): Uint8Array {
  const algorithm = sequence(oid(OID.sha256WithRSA), nullValue());
  const spki = new Uint8Array(spec.publicKey.export({ type: "spki", format: "der" }));
  const tbs = sequence(
    contextTag(0, integer(2), true),
    integer(spec.serial),
    algorithm,
    name(spec.issuer),
    sequence(x509Time(spec.notBefore), x509Time(spec.notAfter)),
    name(spec.subject),
    spki,
    contextTag(3, sequence(...spec.extensions), true),
  );
  const signature = new Uint8Array(sign("sha256", tbs, spec.signer));
  return sequence(tbs, algorithm, bitString(signature));
}

/**
 * Creates a CA `<host>-ca@<unix time>` and a serving certificate `<host>@<unix time>` signed by
 * it (client-go GenerateSelfSignedCertKey): RSA 2048, valid from an hour before `now` for one
 * year, serverAuth, SANs `host` (as an IP or DNS name) then `ips` then `dnsNames`. `certPem` is
 * the serving certificate followed by the CA; `keyPem` is the serving key (PKCS#1).
 */
export function generateSelfSignedCertKey(
  host: string,
  ips: readonly string[],
  dnsNames: readonly string[],
  now: Date,
): { certPem: string; keyPem: string } {
  if (host === "") throw new ServingCertError("Cannot generate a serving certificate: empty host");
  const sanIPs: Uint8Array[] = [];
  const sanDNS: string[] = [];
  const hostIP = ipBytes(host);
  if (hostIP) sanIPs.push(hostIP);
  else sanDNS.push(host);
  for (const ip of ips) {
    const bytes = ipBytes(ip);
    if (!bytes) {
      throw new ServingCertError(
        `Cannot generate a serving certificate: '${ip}' is not an IP address`,
      );
    }
    sanIPs.push(bytes);
  }
  sanDNS.push(...dnsNames);

  const unix = Math.floor(now.getTime() / 1000);
  // Valid an hour earlier to absorb clock skew, as upstream does.
  const notBefore = new Date(now.getTime() - HOUR_MS);
  const notAfter = new Date(notBefore.getTime() + MAX_AGE_MS);

  const ca = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const caName = `${host}-ca@${unix}`;
  const caKeyId = keyId(ca.publicKey);
  const caDer = certificate({
    serial: 1,
    issuer: caName,
    subject: caName,
    notBefore,
    notAfter,
    publicKey: ca.publicKey,
    signer: ca.privateKey,
    extensions: [
      extension(
        OID.keyUsage,
        true,
        namedBits([KEY_USAGE.digitalSignature, KEY_USAGE.keyEncipherment, KEY_USAGE.keyCertSign]),
      ),
      extension(OID.basicConstraints, true, sequence(boolean(true))),
      extension(OID.subjectKeyId, false, octetString(caKeyId)),
    ],
  });

  const leaf = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const generalNames = [
    ...sanDNS.map((d) => implicitTag(2, ia5String(d))),
    ...sanIPs.map((ip) => implicitTag(7, octetString(ip))),
  ];
  const leafDer = certificate({
    serial: 2,
    issuer: caName,
    subject: `${host}@${unix}`,
    notBefore,
    notAfter,
    publicKey: leaf.publicKey,
    signer: ca.privateKey,
    extensions: [
      extension(
        OID.keyUsage,
        true,
        namedBits([KEY_USAGE.digitalSignature, KEY_USAGE.keyEncipherment]),
      ),
      extension(OID.extKeyUsage, false, sequence(oid(OID.serverAuth))),
      extension(OID.basicConstraints, true, sequence()),
      extension(OID.authorityKeyId, false, sequence(implicitTag(0, octetString(caKeyId)))),
      extension(OID.subjectAltName, false, sequence(...generalNames)),
    ],
  });

  return {
    certPem: pem("CERTIFICATE", leafDer) + pem("CERTIFICATE", caDer),
    keyPem: String(leaf.privateKey.export({ type: "pkcs1", format: "pem" })),
  };
}

// --- loading and writing ---------------------------------------------------------------------

/** What {@link loadOrGenerateServingCert} needs. */
export interface ServingCertOptions {
  /** Configured certificate file; empty means none. @default "" */
  readonly tlsCertFile: string;
  /** Configured key file; empty means none. @default "" */
  readonly tlsPrivateKeyFile: string;
  /** `--cert-dir`, where kubelet.crt/kubelet.key live. @default "/var/lib/kubelet/pki" */
  readonly certDirectory: string;
  /** The node's hostname (after --hostname-override): the certificate's host. */
  readonly hostname: string;
  /** Node IPs added as IP SANs of a generated certificate. @default [] */
  readonly nodeIPs: readonly string[];
  readonly clock: Clock;
  readonly logger: Logger;
  readonly signal?: AbortSignal;
}

/** The serving pair in use. */
export interface ServingCert {
  /** PEM chain. */
  readonly cert: string;
  /** PEM private key. */
  readonly key: string;
  readonly certFile: string;
  readonly keyFile: string;
  /** True when this call generated and wrote the pair. */
  readonly generated: boolean;
}

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

async function canRead(path: string): Promise<boolean> {
  // As client-go's canReadFile: any error opening the file counts as "cannot read".
  try {
    (await Deno.open(path, { read: true })).close();
    return true;
  } catch {
    return false;
  }
}

async function readField(path: string, field: string, signal?: AbortSignal): Promise<string> {
  try {
    return await Deno.readTextFile(path, { signal });
  } catch (e) {
    if (signal?.aborted) throw e;
    throw new ServingCertError(`Cannot start: '${field}' cannot be read: ${message(e)}`, {
      cause: e,
    });
  }
}

/** Writes through a temporary file and a rename, so a crash never leaves half a file. */
async function writeFileMode(
  path: string,
  data: string,
  mode: number,
  signal?: AbortSignal,
): Promise<void> {
  await Deno.mkdir(dirname(path), { recursive: true, mode: 0o750 });
  const tmp = `${path}.tmp-${crypto.randomUUID()}`;
  try {
    await Deno.writeTextFile(tmp, data, { mode, signal });
    await Deno.chmod(tmp, mode);
    await Deno.rename(tmp, path);
  } catch (e) {
    await Deno.remove(tmp).catch(() => {});
    throw e;
  }
}

/** Checks that both PEMs parse and that the key belongs to the first certificate. */
function checkPair(
  cert: string,
  key: string,
  certFile: string,
  keyFile: string,
  clock: Clock,
  logger: Logger,
): void {
  let x509: X509Certificate;
  let privateKey: KeyObject;
  try {
    x509 = new X509Certificate(cert);
  } catch (e) {
    throw new ServingCertError(
      `Cannot start: ${certFile} does not hold a PEM certificate: ${message(e)}`,
      { cause: e },
    );
  }
  try {
    privateKey = createPrivateKey(key);
  } catch (e) {
    throw new ServingCertError(
      `Cannot start: ${keyFile} does not hold a PEM private key: ${message(e)}`,
      { cause: e },
    );
  }
  if (!x509.checkPrivateKey(privateKey)) {
    throw new ServingCertError(
      `Cannot start: ${keyFile} does not match ${certFile}: tls: private key does not match public key`,
    );
  }
  const notAfter = Date.parse(x509.validTo);
  if (notAfter < clock.now()) {
    // Upstream serves it anyway and never renews it; say so rather than fail.
    logger.warning("Serving certificate has expired", {
      certFile,
      notAfter: new Date(notAfter).toISOString(),
    });
  }
}

/**
 * Finds the serving pair (upstream InitializeTLS): `tlsCertFile`/`tlsPrivateKeyFile` when set;
 * else `<certDirectory>/kubelet.crt` and `kubelet.key`, loaded when both exist and generated
 * (see {@link generateSelfSignedCertKey}) and written when neither does. Key files are written
 * 0600, certificates 0644, created directories 0750. Throws {@link ServingCertError}.
 */
export async function loadOrGenerateServingCert(opts: ServingCertOptions): Promise<ServingCert> {
  const { clock, logger, signal } = opts;
  signal?.throwIfAborted();
  const certSet = opts.tlsCertFile !== "";
  const keySet = opts.tlsPrivateKeyFile !== "";
  if (certSet !== keySet) {
    const [given, missing] = certSet
      ? ["tlsCertFile", "tlsPrivateKeyFile"]
      : ["tlsPrivateKeyFile", "tlsCertFile"];
    throw new ServingCertError(
      `Cannot start: '${missing}' must be set together with '${given}' ` +
        `('${certSet ? opts.tlsCertFile : opts.tlsPrivateKeyFile}'): current value is ''`,
    );
  }
  if (certSet) {
    const cert = await readField(opts.tlsCertFile, "tlsCertFile", signal);
    const key = await readField(opts.tlsPrivateKeyFile, "tlsPrivateKeyFile", signal);
    checkPair(cert, key, opts.tlsCertFile, opts.tlsPrivateKeyFile, clock, logger);
    return {
      cert,
      key,
      certFile: opts.tlsCertFile,
      keyFile: opts.tlsPrivateKeyFile,
      generated: false,
    };
  }

  const certFile = join(opts.certDirectory, "kubelet.crt");
  const keyFile = join(opts.certDirectory, "kubelet.key");
  const certReadable = await canRead(certFile);
  const keyReadable = await canRead(keyFile);
  if (certReadable !== keyReadable) {
    throw new ServingCertError(
      `Cannot start: error reading ${certReadable ? keyFile : certFile}, ` +
        "certificate and key must be supplied as a pair",
    );
  }
  if (certReadable) {
    const cert = await readField(certFile, "--cert-dir", signal);
    const key = await readField(keyFile, "--cert-dir", signal);
    checkPair(cert, key, certFile, keyFile, clock, logger);
    return { cert, key, certFile, keyFile, generated: false };
  }

  let pair: { certPem: string; keyPem: string };
  try {
    pair = generateSelfSignedCertKey(opts.hostname, opts.nodeIPs, [], new Date(clock.now()));
  } catch (e) {
    throw new ServingCertError(`Cannot start: unable to generate self signed cert: ${message(e)}`, {
      cause: e,
    });
  }
  for (
    const [path, data, mode] of [
      [certFile, pair.certPem, 0o644],
      [keyFile, pair.keyPem, 0o600],
    ] as const
  ) {
    try {
      await writeFileMode(path, data, mode, signal);
    } catch (e) {
      if (signal?.aborted) throw e;
      throw new ServingCertError(`Cannot start: unable to write ${path}: ${message(e)}`, {
        cause: e,
      });
    }
  }
  logger.v(4).info("Using self-signed cert", { TLSCertFile: certFile, TLSPrivateKeyFile: keyFile });
  return { cert: pair.certPem, key: pair.keyPem, certFile, keyFile, generated: true };
}
