/**
 * @module
 * The on-disk store of a rotated certificate and key: each pair the kubelet obtains is written to
 * `<prefix>-<YYYY-MM-DD-HH-MM-SS>.pem` (the certificates, then the key; mode 0600) in the cert
 * directory, and `<prefix>-current.pem` is a symlink to the one in use, swapped atomically through
 * `<prefix>-updated.pem` and a rename. Reads fall back to configured files and then to
 * `<prefix>.crt`/`<prefix>.key`. The prefixes the kubelet uses are `kubelet-client` and
 * `kubelet-server`. Corresponds to client-go `util/certificate/certificate_store.go` (fileStore).
 */

import { createPrivateKey, X509Certificate } from "node:crypto";
import { isAbsolute, join, resolve } from "node:path";
import { parseCertificate, parsePemCertificates } from "./x509.ts";
import type { Logger } from "../klog/klog.ts";
import { symlink } from "../privilege/launcher_calls.ts";

/** A certificate chain with its key, as the TLS stack uses it (Go's tls.Certificate with Leaf). */
export interface TLSCertificate {
  /** PEM of the certificates, leaf first. */
  readonly certPem: string;
  /** PEM of the private key. */
  readonly keyPem: string;
  readonly leaf: CertificateLeaf;
}

/** What the managers read from the leaf certificate. */
export interface CertificateLeaf {
  readonly serialNumber: bigint;
  readonly commonName: string;
  readonly organization: readonly string[];
  readonly dnsNames: readonly string[];
  /** IP addresses as X509Certificate prints them. */
  readonly ipAddresses: readonly string[];
  /** ms since the epoch. */
  readonly notBefore: number;
  readonly notAfter: number;
}

/** No certificate and key are in the store yet (client-go NoCertKeyError). */
export class NoCertKeyError extends Error {
  override name = "NoCertKeyError";
}

/** A pair that is there but cannot be used. */
export class CertificateStoreError extends Error {
  override name = "CertificateStoreError";
}

/** Where a store keeps its pairs. */
export interface CertificateStoreOptions {
  /** `kubelet-client` or `kubelet-server`. */
  readonly pairNamePrefix: string;
  readonly certDirectory: string;
  readonly keyDirectory: string;
  /** A configured certificate file, read when no current pair exists. @default "" */
  readonly certFile?: string;
  /** Its key. @default "" */
  readonly keyFile?: string;
  readonly logger: Logger;
  /** Local time for the file names. @default Date.now */
  readonly now?: () => number;
}

/** Parses PEM certificates and a key into a {@link TLSCertificate}; throws on a mismatch. */
export function loadCertificate(certPem: string, keyPem: string, source: string): TLSCertificate {
  const ders = parsePemCertificates(certPem);
  const first = ders[0];
  if (!first) {
    throw new CertificateStoreError(
      `could not convert data from "${source}" into cert/key pair: tls: failed to find any PEM data in certificate input`,
    );
  }
  let x509: X509Certificate;
  const block = privateKeyBlock(keyPem);
  try {
    x509 = new X509Certificate(first);
    if (!block) throw new Error("tls: failed to find any PEM data in key input");
    if (!x509.checkPrivateKey(createPrivateKey(block))) {
      throw new Error("tls: private key does not match public key");
    }
  } catch (e) {
    throw new CertificateStoreError(
      `could not convert data from "${source}" into cert/key pair: ${
        e instanceof Error ? e.message : e
      }`,
      { cause: e },
    );
  }
  const parsed = parseCertificate(first);
  const sans = (x509.subjectAltName ?? "").split(/,\s*/).filter((s) => s !== "");
  return {
    certPem: ders.map((d) => derToPem(d)).join(""),
    keyPem: block!,
    leaf: {
      serialNumber: parsed.serialNumber,
      commonName: parsed.commonName,
      organization: parsed.organization,
      dnsNames: sans.filter((s) => s.startsWith("DNS:")).map((s) => s.slice(4)),
      ipAddresses: sans.filter((s) => s.startsWith("IP Address:")).map((s) => s.slice(11)),
      notBefore: parsed.notBefore.getTime(),
      notAfter: parsed.notAfter.getTime(),
    },
  };
}

function derToPem(der: Uint8Array): string {
  let bin = "";
  for (const b of der) bin += String.fromCharCode(b);
  const lines = btoa(bin).match(/.{1,64}/g) ?? [];
  return `-----BEGIN CERTIFICATE-----\n${lines.join("\n")}\n-----END CERTIFICATE-----\n`;
}

function privateKeyBlock(keyPem: string): string | undefined {
  return /-----BEGIN ([A-Z ]*PRIVATE KEY)-----[\s\S]*?-----END \1-----\n?/.exec(keyPem)?.[0];
}

async function lstat(path: string): Promise<Deno.FileInfo | undefined> {
  try {
    return await Deno.lstat(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return undefined;
    throw e;
  }
}

async function exists(path: string): Promise<boolean> {
  if (path === "") return false;
  try {
    await Deno.stat(path);
    return true;
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return false;
    throw e;
  }
}

function pad(n: number, w = 2): string {
  return String(n).padStart(w, "0");
}

/** The file store of one kind of pair. */
export class CertificateStore {
  readonly #o: CertificateStoreOptions;

  private constructor(opts: CertificateStoreOptions) {
    this.#o = opts;
  }

  /** Opens the store, finishing a swap a crash interrupted (client-go NewFileStore). */
  static async open(opts: CertificateStoreOptions): Promise<CertificateStore> {
    const store = new CertificateStore(opts);
    await store.#recover();
    return store;
  }

  #file(qualifier: string): string {
    return join(this.#o.certDirectory, `${this.#o.pairNamePrefix}-${qualifier}.pem`);
  }

  /** `<certDirectory>/<prefix>-current.pem`. */
  currentPath(): string {
    return this.#file("current");
  }

  async #recover(): Promise<void> {
    if (await exists(this.currentPath())) return;
    const updated = this.#file("updated");
    const info = await lstat(updated);
    if (!info) return;
    if (!info.isSymlink) {
      throw new CertificateStoreError(`expected "${updated}" to be a symlink but it is a file`);
    }
    await Deno.rename(updated, this.currentPath());
  }

  /** The pair in use; throws {@link NoCertKeyError} when there is none. */
  async current(): Promise<TLSCertificate> {
    const { logger } = this.#o;
    const pairFile = this.currentPath();
    if (await exists(pairFile)) {
      logger.info("Loading cert/key pair from a file", { filePath: pairFile });
      const text = await Deno.readTextFile(pairFile);
      return loadCertificate(text, text, pairFile);
    }
    const certFile = this.#o.certFile ?? "";
    const keyFile = this.#o.keyFile ?? "";
    if (await exists(certFile) && await exists(keyFile)) {
      logger.info("Loading cert/key pair", { certFile, keyFile });
      return loadCertificate(
        await Deno.readTextFile(certFile),
        await Deno.readTextFile(keyFile),
        certFile,
      );
    }
    const c = join(this.#o.certDirectory, `${this.#o.pairNamePrefix}.crt`);
    const k = join(this.#o.keyDirectory, `${this.#o.pairNamePrefix}.key`);
    if (await exists(c) && await exists(k)) {
      logger.info("Loading cert/key pair", { certFile: c, keyFile: k });
      return loadCertificate(await Deno.readTextFile(c), await Deno.readTextFile(k), c);
    }
    throw new NoCertKeyError(
      `no cert/key files read at "${pairFile}", ("${certFile}", "${keyFile}") or ("${this.#o.certDirectory}", "${this.#o.keyDirectory}")`,
    );
  }

  /**
   * Writes a new pair to a timestamped file (mode 0600) and points `<prefix>-current.pem` at it;
   * returns it loaded. The PEM must hold certificates and one private key that match.
   */
  async update(certPem: string, keyPem: string): Promise<TLSCertificate> {
    const d = new Date((this.#o.now ?? Date.now)());
    const ts = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}-` +
      `${pad(d.getHours())}-${pad(d.getMinutes())}-${pad(d.getSeconds())}`;
    const dir = this.#o.certDirectory;
    try {
      await Deno.mkdir(dir, { recursive: true, mode: 0o755 });
    } catch (e) {
      throw new CertificateStoreError(
        `could not create directory "${dir}" to store certificates: ${e}`,
        { cause: e },
      );
    }
    const certs = parsePemCertificates(certPem);
    if (certs.length === 0) {
      throw new CertificateStoreError(
        "invalid certificate data: data does not contain any valid RSA or ECDSA certificates",
      );
    }
    const key = privateKeyBlock(keyPem);
    if (!key) throw new CertificateStoreError("invalid key data");
    const path = this.#file(ts);
    const text = certs.map(derToPem).join("") + (key.endsWith("\n") ? key : `${key}\n`);
    // Checked before anything is written: a pair that does not match never becomes current.
    const cert = loadCertificate(text, text, path);
    await Deno.writeTextFile(path, text, { mode: 0o600 });
    await Deno.chmod(path, 0o600);
    await this.#updateSymlink(path);
    return cert;
  }

  async #updateSymlink(target: string): Promise<void> {
    const current = this.currentPath();
    const updated = this.#file("updated");
    const cur = await lstat(current);
    if (cur && !cur.isSymlink) {
      throw new CertificateStoreError(`expected "${current}" to be a symlink but it is a file`);
    }
    const upd = await lstat(updated);
    if (upd) {
      if (!upd.isSymlink) {
        throw new CertificateStoreError(`expected "${updated}" to be a symlink but it is a file`);
      }
      await Deno.remove(updated);
    }
    const abs = isAbsolute(target) ? target : resolve(target);
    await symlink(abs, updated);
    // rename(2) replaces the old link in one step: readers see the old pair or the new one.
    await Deno.rename(updated, current);
  }
}
