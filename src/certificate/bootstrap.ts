/**
 * @module
 * TLS bootstrap: turning `--bootstrap-kubeconfig` (a bootstrap token, usually) into the kubelet's
 * own client certificate and a `--kubeconfig` that points at it. {@link loadClientConfig} is the
 * path taken with `rotateCertificates` (the client certificate manager then requests the
 * certificate in the background); {@link loadClientCert} the one without, which waits for the
 * certificate before the kubelet goes on: a key kept in `<cert-dir>/kubelet-client.key.tmp`
 * until the request is issued, a CSR named after a digest of key, subject and usages, the pair
 * stored as `kubelet-client-<time>.pem` behind the `kubelet-client-current.pem` symlink, and the
 * kubeconfig written (0600) with both client-certificate and client-key naming that symlink.
 * Corresponds to upstream `pkg/kubelet/certificate/bootstrap/bootstrap.go`.
 */

import { Buffer } from "node:buffer";
import { createHash, createPublicKey, type KeyObject } from "node:crypto";
import { dirname, join } from "node:path";
import { stringify } from "yaml";
import { generateECKey, makeCSR, parsePrivateKeyPem, privateKeyPem } from "./pkcs10.ts";
import {
  KUBE_APISERVER_CLIENT_KUBELET_SIGNER,
  requestCertificate,
  waitForCertificate,
} from "./csr.ts";
import { CertificateStore } from "./certificate_store.ts";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import { KubeClient } from "../client/kube_client.ts";
import { loadKubeconfig, type RestConfig } from "../client/kubeconfig.ts";
import { kubeletClientUsages, nodeSubject } from "./kubelet.ts";
import { parseCertificate, parsePemCertificates } from "./x509.ts";

/** The file the bootstrap key waits in until its certificate is issued. */
export const TMP_PRIVATE_KEY_FILE = "kubelet-client.key.tmp";
/** How long {@link loadClientCert} waits for the certificate (3600 s upstream). */
export const BOOTSTRAP_WAIT_MS = 3_600_000;

/** Bootstrapping cannot go on; the message says why. */
export class BootstrapError extends Error {
  override name = "BootstrapError";
}

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/**
 * Whether `kubeconfig` exists and holds client certificates that are all unexpired
 * (isClientConfigStillValid). A file that cannot be read or used is logged and counts as invalid.
 */
export async function isClientConfigStillValid(
  kubeconfig: string,
  now: number,
  logger: Logger,
): Promise<boolean> {
  try {
    await Deno.stat(kubeconfig);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return false;
    throw new BootstrapError(
      `error reading existing bootstrap kubeconfig ${kubeconfig}: ${message(e)}`,
    );
  }
  let config: RestConfig;
  try {
    config = await loadKubeconfig(kubeconfig);
  } catch (e) {
    logger.error(e, `unable to read existing bootstrap client config from ${kubeconfig}`);
    return false;
  }
  let certs: Uint8Array[] = [];
  try {
    certs = parsePemCertificates(config.certPem ?? "");
  } catch (e) {
    logger.error(
      e,
      `unable to load TLS certificates from existing bootstrap client config read from ${kubeconfig}`,
    );
    return false;
  }
  if (certs.length === 0) {
    logger.error(
      null,
      `unable to read TLS certificates from existing bootstrap client config read from ${kubeconfig}`,
    );
    return false;
  }
  for (const der of certs) {
    const notAfter = parseCertificate(der).notAfter;
    if (now > notAfter.getTime()) {
      logger.error(
        null,
        `part of the existing bootstrap client certificate in ${kubeconfig} is expired: ${notAfter.toISOString()}`,
      );
      return false;
    }
  }
  return true;
}

/**
 * Writes the kubeconfig the kubelet runs with after bootstrapping: the bootstrap kubeconfig's
 * server and CA (its file when it named one, else the data), and `pemPath` as both client
 * certificate and key (writeKubeconfigFromBootstrapping). Mode 0600.
 */
export async function writeKubeconfigFromBootstrapping(
  bootstrap: RestConfig,
  kubeconfig: string,
  pemPath: string,
): Promise<void> {
  const cluster: Record<string, unknown> = { server: bootstrap.server };
  if (bootstrap.caFile) cluster["certificate-authority"] = bootstrap.caFile;
  else if (bootstrap.caPem) cluster["certificate-authority-data"] = btoa(bootstrap.caPem);
  if (bootstrap.insecureSkipTLSVerify) cluster["insecure-skip-tls-verify"] = true;
  // Keys in the order clientcmd writes them (alphabetical).
  const doc = {
    apiVersion: "v1",
    clusters: [{ cluster, name: "default-cluster" }],
    contexts: [{
      context: { cluster: "default-cluster", namespace: "default", user: "default-auth" },
      name: "default-context",
    }],
    "current-context": "default-context",
    kind: "Config",
    preferences: {},
    users: [{
      name: "default-auth",
      user: { "client-certificate": pemPath, "client-key": pemPath },
    }],
  };
  await writePrivateFile(kubeconfig, stringify(doc, { lineWidth: 0 }));
  await Deno.chmod(kubeconfig, 0o600);
}

/** What {@link loadClientConfig} returns. */
export interface ClientConfigs {
  /** Credentials to request certificates with (the bootstrap ones while there is no cert). */
  readonly certConfig: RestConfig;
  /** The kubelet's own: server and CA, the certificate from the store. */
  readonly userConfig: RestConfig;
}

/**
 * The client configurations of the rotation path (LoadClientConfig): with no bootstrap
 * kubeconfig, or a still valid `kubeconfig`, both are `kubeconfig`'s; else the certificate
 * requests go with the bootstrap credentials and `kubeconfig` is rewritten to point at
 * `<certDir>/kubelet-client-current.pem`, which the manager fills.
 */
export async function loadClientConfig(o: {
  kubeconfig: string;
  bootstrapKubeconfig: string;
  certDirectory: string;
  clock: Clock;
  logger: Logger;
}): Promise<ClientConfigs> {
  const { logger } = o;
  if (o.bootstrapKubeconfig === "") {
    const config = await loadKubeconfig(o.kubeconfig);
    logger.v(2).info("No bootstrapping requested, will use kubeconfig");
    return { certConfig: config, userConfig: config };
  }
  const store = await CertificateStore.open({
    pairNamePrefix: "kubelet-client",
    certDirectory: o.certDirectory,
    keyDirectory: o.certDirectory,
    logger,
  });
  if (await isClientConfigStillValid(o.kubeconfig, o.clock.now(), logger)) {
    const config = await loadKubeconfig(o.kubeconfig);
    logger.v(2).info("Current kubeconfig file contents are still valid, no bootstrap necessary");
    return { certConfig: config, userConfig: config };
  }
  const bootstrap = await loadKubeconfig(o.bootstrapKubeconfig);
  const pemPath = store.currentPath();
  await writeKubeconfigFromBootstrapping(bootstrap, o.kubeconfig, pemPath);
  logger.v(2).info(
    "Use the bootstrap credentials to request a cert, and set kubeconfig to point to the certificate dir",
  );
  // AnonymousClientConfig: the server and CA only; the certificate comes from the manager.
  const user: RestConfig = {
    server: bootstrap.server,
    caPem: bootstrap.caPem,
    caFile: bootstrap.caFile,
    insecureSkipTLSVerify: bootstrap.insecureSkipTLSVerify,
    tlsServerName: bootstrap.tlsServerName,
    certFile: pemPath,
    keyFile: pemPath,
    source: o.kubeconfig,
  };
  return { certConfig: bootstrap, userConfig: user };
}

/**
 * The CSR name for a key, subject and usages: `node-csr-` and the base64url SHA-512/256 of each
 * part, base64url-encoded and followed by '|' (digestedName). The same inputs after a restart
 * give the same name, so a request still pending is found again instead of made twice.
 */
export function digestedName(
  publicKey: KeyObject,
  subject: { commonName: string; organizations?: readonly string[] },
  usages: readonly string[],
): string {
  const hash = createHash("sha512-256");
  const write = (data: Uint8Array | string) => {
    const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
    hash.update(Buffer.from(bytes).toString("base64url"));
    hash.update("|");
  };
  write(new Uint8Array(createPublicKey(publicKey).export({ type: "spki", format: "der" })));
  write(subject.commonName);
  for (const o of subject.organizations ?? []) write(o);
  for (const u of usages) write(u);
  return `node-csr-${hash.digest("base64url")}`;
}

/** The key in `path`, or a new ECDSA P-256 key written there 0600 (keyutil.LoadOrGenerateKeyFile). */
async function loadOrGenerateKeyFile(path: string): Promise<KeyObject> {
  try {
    return parsePrivateKeyPem(await Deno.readTextFile(path));
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) {
      throw new BootstrapError(`error loading key from ${path}: ${message(e)}`, { cause: e });
    }
  }
  const key = generateECKey();
  await writePrivateFile(path, privateKeyPem(key));
  await Deno.chmod(path, 0o600);
  return key;
}

/** Options of {@link loadClientCert}. */
export interface LoadClientCertOptions {
  readonly kubeconfig: string;
  readonly bootstrapKubeconfig: string;
  readonly certDirectory: string;
  readonly nodeName: string;
  readonly userAgent: string;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly signal: AbortSignal;
  /** @default BOOTSTRAP_WAIT_MS */
  readonly waitMs?: number;
  /** How long to wait for the apiserver's /healthz first. @default 60000 */
  readonly serverWaitMs?: number;
}

/**
 * Requests the client certificate with the bootstrap kubeconfig unless `kubeconfig` is still
 * valid (LoadClientCert), and writes `kubeconfig` pointing at it. Throws {@link BootstrapError}
 * (or the CSR's error: denied, failed, timed out) when there is no certificate.
 */
export async function loadClientCert(o: LoadClientCertOptions): Promise<void> {
  const { logger, clock } = o;
  if (await isClientConfigStillValid(o.kubeconfig, clock.now(), logger)) {
    logger.v(2).info("Kubeconfig exists and is valid, skipping bootstrap", { path: o.kubeconfig });
    return;
  }
  logger.v(2).info(
    "Using bootstrap kubeconfig to generate TLS client cert, key and kubeconfig file",
  );
  let bootstrap: RestConfig;
  try {
    bootstrap = await loadKubeconfig(o.bootstrapKubeconfig);
  } catch (e) {
    throw new BootstrapError(`unable to load bootstrap kubeconfig: ${message(e)}`, { cause: e });
  }
  const client = new KubeClient({ config: bootstrap, clock, qps: -1, userAgent: o.userAgent });
  try {
    const store = await CertificateStore.open({
      pairNamePrefix: "kubelet-client",
      certDirectory: o.certDirectory,
      keyDirectory: o.certDirectory,
      logger,
    });
    // The key of an expired pair is used again; else the one waiting in the tmp file, or a new one.
    let key: KeyObject | undefined;
    try {
      key = parsePrivateKeyPem((await store.current()).keyPem);
    } catch {
      key = undefined;
    }
    const tmpKey = join(o.certDirectory, TMP_PRIVATE_KEY_FILE);
    if (!key) {
      logger.v(2).info(
        "No valid private key and/or certificate found, reusing existing private key or creating a new one",
      );
      key = await loadOrGenerateKeyFile(tmpKey);
    }
    await waitForServer(client, o.serverWaitMs ?? 60_000, clock, logger, o.signal).catch((e) => {
      if (o.signal.aborted) throw e;
      logger.info("Error waiting for apiserver to come up", { err: message(e) });
    });
    const subject = nodeSubject(o.nodeName);
    const usages = kubeletClientUsages(key);
    const { name, uid } = await requestCertificate(client, {
      csrPem: makeCSR(key, subject),
      name: digestedName(key, subject, usages),
      signerName: KUBE_APISERVER_CLIENT_KUBELET_SIGNER,
      usages,
      privateKey: key,
      logger,
      signal: o.signal,
    });
    logger.v(2).info("Waiting for client certificate to be issued");
    const deadline = new AbortController();
    const stop = new AbortController();
    clock.sleep(o.waitMs ?? BOOTSTRAP_WAIT_MS, stop.signal).then(() => deadline.abort(), () => {});
    let certPem: string;
    try {
      certPem = await waitForCertificate(client, name, uid, {
        logger,
        signal: AbortSignal.any([o.signal, deadline.signal]),
        sleep: (ms, s) => clock.sleep(ms, s),
      });
    } finally {
      stop.abort();
    }
    await store.update(certPem, privateKeyPem(key));
    await Deno.remove(tmpKey).catch((e) => {
      if (!(e instanceof Deno.errors.NotFound)) {
        logger.v(2).info("Failed cleaning up private key file", { path: tmpKey, err: message(e) });
      }
    });
    await writeKubeconfigFromBootstrapping(bootstrap, o.kubeconfig, store.currentPath());
  } finally {
    client.close();
  }
}

/** Polls /healthz every 2 s (20 % jitter, 1 s per try) until it answers or `ms` pass (waitForServer). */
async function waitForServer(
  client: KubeClient,
  ms: number,
  clock: Clock,
  logger: Logger,
  signal: AbortSignal,
): Promise<void> {
  const end = clock.now() + ms;
  const probe = client.with({ timeoutMs: 1_000 });
  try {
    while (clock.now() < end) {
      signal.throwIfAborted();
      try {
        await probe.getText("/healthz", signal);
        return;
      } catch (e) {
        if (signal.aborted) throw e;
        logger.info("Failed to connect to apiserver", { err: message(e) });
      }
      await clock.sleep(2_000 * (1 + 0.2 * Math.random()), signal);
    }
    throw new BootstrapError("timed out waiting to connect to apiserver");
  } finally {
    probe.close();
  }
}

/**
 * Writes `path` (mode 0600), making its directory (0755, parents too) only when it is missing:
 * the sandbox grants the file, not its directory, so the directory is neither stat-ed nor made
 * when it is there.
 */
async function writePrivateFile(path: string, text: string): Promise<void> {
  try {
    await Deno.writeTextFile(path, text, { mode: 0o600 });
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
    await Deno.mkdir(dirname(path), { recursive: true, mode: 0o755 });
    await Deno.writeTextFile(path, text, { mode: 0o600 });
  }
}
