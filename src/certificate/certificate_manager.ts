/**
 * @module
 * Keeps one certificate current: starts from the store (or a bootstrap pair), and in the
 * background, at a jittered 70-90 % of the certificate's lifetime (at once when there is none,
 * it was a bootstrap pair, or it no longer covers what the template asks for), makes a new
 * ECDSA P-256 key, sends a CertificateSigningRequest, waits up to 15 minutes for it to be
 * issued and stores the new pair. A failed attempt is retried after 2, 4, 8 and 16 s (10 %
 * jitter), then every 32 s, each failure one error line naming why (a denied request says so).
 * Listeners hear of every new certificate. Talks to the apiserver through the client its
 * `clientFor` gives and to the disk through its store.
 *
 * Corresponds to client-go `util/certificate/certificate_manager.go` (manager: Current,
 * ServerHealthy, Start, rotateCerts, nextRotationDeadline, jitteryDuration,
 * getCurrentCertificateOrBootstrap); the kubelet's two instances are built in
 * `kubelet.ts`.
 */

import type { KeyObject } from "node:crypto";
import { type CertificateTemplate, generateECKey, makeCSR, privateKeyPem } from "./pkcs10.ts";
import { requestCertificate, waitForCertificate } from "./csr.ts";
import { loadCertificate, NoCertKeyError, type TLSCertificate } from "./certificate_store.ts";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import { ipBytes } from "../server/tls.ts";
import { formatDuration } from "../util/duration.ts";
import { KubeApiError, type KubeClient } from "../client/kube_client.ts";

/** How long one request may wait to be issued (certificateWaitTimeout). */
export const CERTIFICATE_WAIT_TIMEOUT_MS = 15 * 60_000;
/** The retry schedule of a failed rotation: wait.Backoff{2s, x2, 10 % jitter, 5 steps}. */
export const ROTATION_BACKOFF = { durationMs: 2_000, factor: 2, jitter: 0.1, steps: 5 } as const;
/** After the backoff is spent, one attempt every 32 s until one succeeds. */
export const ROTATION_RETRY_MS = 32_000;
/** How often a dynamic template is compared with the certificate. */
export const TEMPLATE_CHECK_MS = 1_000;

/** Where the pairs live (certificate_store.ts, or a fake in tests). */
export interface CertificateStoreLike {
  current(): Promise<TLSCertificate>;
  update(certPem: string, keyPem: string): Promise<TLSCertificate>;
}

/** What a {@link CertificateManager} is made of (client-go certificate.Config). */
export interface CertificateManagerOptions {
  /** spec.signerName of its requests; also its logger name. */
  readonly signerName: string;
  /** The request; read on every rotation (the serving one changes with the node's addresses). */
  readonly getTemplate: () => CertificateTemplate | undefined;
  /** True when {@link getTemplate} can change: checked every second against the certificate. */
  readonly dynamicTemplate?: boolean;
  /** spec.usages for a new key (DefaultKubeletClientGetUsages and friends). */
  readonly getUsages: (key: KeyObject) => string[];
  readonly store: CertificateStoreLike;
  /** A pair used (and rotated at once) when the store has none. */
  readonly bootstrap?: { readonly certPem: string; readonly keyPem: string };
  /**
   * The client to send requests with, given the current certificate (client-go ClientsetFunc);
   * unset: no rotation at all.
   */
  readonly clientFor?: (current: TLSCertificate | undefined) => KubeClient;
  /** spec.expirationSeconds; unset sends none, as the kubelet does. */
  readonly requestedLifetimeSeconds?: number;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Random number in [0, 1), for jitter. @default Math.random */
  readonly random?: () => number;
  /** @default generateECKey */
  readonly generateKey?: () => KeyObject;
  /** @default CERTIFICATE_WAIT_TIMEOUT_MS */
  readonly waitTimeoutMs?: number;
}

function sameTemplate(a: CertificateTemplate | undefined, b: CertificateTemplate | undefined) {
  return JSON.stringify(a ?? null) === JSON.stringify(b ?? null);
}

/** The rotation point: notBefore plus 70-90 % of the lifetime (jitteryDuration). */
export function rotationDeadline(
  leaf: { readonly notBefore: number; readonly notAfter: number },
  random: number,
): number {
  const total = leaf.notAfter - leaf.notBefore;
  // wait.Jitter(total, 0.2) - 0.3 * total = total * (0.7 + 0.2 * random)
  return leaf.notBefore + Math.floor(total + total * 0.2 * random - total * 0.3);
}

/** One certificate kept current (client-go certificate.Manager). */
export class CertificateManager {
  readonly #o: CertificateManagerOptions;
  readonly #log: Logger;
  #cert: TLSCertificate | undefined;
  #forceRotation: boolean;
  #serverHealth = false;
  #lastRequest: { template: CertificateTemplate; abort: AbortController } | undefined;
  #templateChanged = new AbortController();
  readonly #listeners = new Set<(cert: TLSCertificate) => void>();

  private constructor(
    opts: CertificateManagerOptions,
    cert: TLSCertificate | undefined,
    force: boolean,
    log: Logger,
  ) {
    this.#o = opts;
    this.#cert = cert;
    this.#forceRotation = force;
    this.#log = log;
  }

  /** Loads the current pair, or the bootstrap pair (getCurrentCertificateOrBootstrap). */
  static async create(opts: CertificateManagerOptions): Promise<CertificateManager> {
    const log = opts.logger.with({ logger: opts.signerName });
    let current: TLSCertificate | undefined;
    try {
      current = await opts.store.current();
    } catch (e) {
      if (!(e instanceof NoCertKeyError)) throw e;
    }
    if (current && opts.clock.now() < current.leaf.notAfter) {
      return new CertificateManager(opts, current, false, log);
    }
    if (!opts.bootstrap) return new CertificateManager(opts, undefined, true, log);
    const boot = loadCertificate(opts.bootstrap.certPem, opts.bootstrap.keyPem, "bootstrap data");
    try {
      await opts.store.update(opts.bootstrap.certPem, opts.bootstrap.keyPem);
    } catch (e) {
      log.error(e, "Unable to set the cert/key pair to the bootstrap certificate");
    }
    return new CertificateManager(opts, boot, true, log);
  }

  /** The certificate in use; undefined when there is none yet or it has expired. */
  current(): TLSCertificate | undefined {
    const c = this.#cert;
    if (c && this.#o.clock.now() > c.leaf.notAfter) {
      this.#log.v(2).info("Current certificate is expired");
      return undefined;
    }
    return c;
  }

  /** Whether the last answers suggest the apiserver is reachable (ServerHealthy). */
  serverHealthy(): boolean {
    return this.#serverHealth;
  }

  /** Calls `fn` with each new certificate; returns the unsubscribe function. */
  onCertificate(fn: (cert: TLSCertificate) => void): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }

  /** Whether the certificate holds the template's CN and every asked-for name and O. */
  certSatisfiesTemplate(): boolean {
    const cert = this.#cert;
    if (!cert) return false;
    const t = this.#o.getTemplate();
    if (!t) return true;
    const log = this.#log.v(2);
    const leaf = cert.leaf;
    if (t.commonName !== leaf.commonName) {
      log.info("Current certificate CN does not match requested CN", {
        currentName: leaf.commonName,
        requestedName: t.commonName,
      });
      return false;
    }
    const missing = (want: readonly string[] | undefined, have: readonly string[]) =>
      [...new Set(want ?? [])].filter((w) => !have.includes(w)).sort();
    const dns = missing(t.dnsNames, leaf.dnsNames);
    if (dns.length > 0) {
      log.info("Current certificate is missing requested DNS names", { dnsNames: dns });
      return false;
    }
    const ips = missing(t.ipAddresses?.map(normalIP), leaf.ipAddresses.map(normalIP));
    if (ips.length > 0) {
      log.info("Current certificate is missing requested IP addresses", { IPs: ips });
      return false;
    }
    const orgs = missing(t.organizations, leaf.organization);
    if (orgs.length > 0) {
      log.info("Current certificate is missing requested orgs", { orgs });
      return false;
    }
    return true;
  }

  /** When to rotate next: now when forced or unsatisfied, else the jittered deadline. */
  nextRotationDeadline(): number {
    const now = this.#o.clock.now();
    if (this.#forceRotation) {
      this.#forceRotation = false;
      return now;
    }
    if (!this.certSatisfiesTemplate()) return now;
    const leaf = this.#cert!.leaf;
    const deadline = rotationDeadline(leaf, (this.#o.random ?? Math.random)());
    this.#log.v(2).info("Certificate rotation deadline determined", {
      expiration: new Date(leaf.notAfter).toISOString(),
      deadline: new Date(deadline).toISOString(),
    });
    return deadline;
  }

  /**
   * Rotates until `signal` aborts (client-go Start, run inline): waits for the deadline, then
   * rotates with backoff. Resolves at once when there is no client to rotate with.
   */
  async run(signal: AbortSignal): Promise<void> {
    if (!this.#o.clientFor) {
      this.#log.v(2).info("Certificate rotation is not enabled, no connection to the apiserver");
      return;
    }
    this.#log.v(2).info("Certificate rotation is enabled");
    const watcher = this.#o.dynamicTemplate ? this.#watchTemplate(signal) : undefined;
    const { clock } = this.#o;
    while (!signal.aborted) {
      try {
        await this.#rotateWhenDue(signal);
      } catch (e) {
        if (signal.aborted) break;
        this.#log.error(e, "Certificate rotation loop failed");
      }
      await clock.sleep(1_000, signal).catch(() => {});
    }
    await watcher;
  }

  async #rotateWhenDue(signal: AbortSignal): Promise<void> {
    const { clock } = this.#o;
    const wait = this.nextRotationDeadline() - clock.now();
    if (wait > 0) {
      this.#log.v(2).info("Waiting for next certificate rotation", { sleep: formatDuration(wait) });
      const changed = this.#templateChanged.signal;
      await clock.sleep(wait, AbortSignal.any([signal, changed])).catch(() => {});
      if (signal.aborted) return;
      if (changed.aborted) {
        this.#templateChanged = new AbortController();
        // Already asked for what the template now says: back to waiting for the deadline.
        if (sameTemplate(this.#lastRequest?.template, this.#o.getTemplate())) return;
        this.#log.v(2).info("Certificate template changed, rotating");
      }
    }
    // No template yet (the serving one waits for the node's addresses): check again later.
    if (!this.#o.getTemplate()) return;
    const b = ROTATION_BACKOFF;
    const random = this.#o.random ?? Math.random;
    let delay: number = b.durationMs;
    for (let step = 1;; step++) {
      if (await this.rotateCerts(signal)) return;
      if (signal.aborted) return;
      if (step >= b.steps) break;
      await clock.sleep(delay * (1 + b.jitter * random()), signal).catch(() => {});
      if (signal.aborted) return;
      delay *= b.factor;
    }
    this.#log.error(
      new Error("timed out waiting for the condition"),
      "Reached backoff limit, still unable to rotate certs",
    );
    while (!signal.aborted) {
      await clock.sleep(ROTATION_RETRY_MS, signal).catch(() => {});
      if (signal.aborted || await this.rotateCerts(signal)) return;
    }
  }

  /** Compares the template with the certificate every second (the dynamic-template goroutine). */
  async #watchTemplate(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      await this.#o.clock.sleep(TEMPLATE_CHECK_MS, signal).catch(() => {});
      if (signal.aborted) return;
      const last = this.#lastRequest;
      if (!this.certSatisfiesTemplate() && !sameTemplate(last?.template, this.#o.getTemplate())) {
        // A request still waiting for a template that is no longer wanted is given up.
        last?.abort.abort();
        this.#templateChanged.abort();
      }
    }
  }

  /**
   * One rotation attempt (rotateCerts): new key, request, wait, store. True when the new
   * certificate is in use; each failure is logged and gives false.
   */
  async rotateCerts(signal: AbortSignal): Promise<boolean> {
    const o = this.#o;
    const log = this.#log;
    log.v(2).info("Rotating certificates");
    let key: KeyObject;
    let csrPem: string;
    const template = o.getTemplate();
    try {
      key = (o.generateKey ?? generateECKey)();
      if (!template) throw new Error("unable to create a csr, no template available");
      csrPem = makeCSR(key, template);
    } catch (e) {
      log.error(e, "Unable to generate a certificate signing request");
      return false;
    }
    let client: KubeClient;
    try {
      client = o.clientFor!(this.current());
    } catch (e) {
      log.error(e, "Unable to load a client to request certificates");
      return false;
    }
    let req: { name: string; uid: string };
    try {
      req = await requestCertificate(client, {
        csrPem,
        name: "",
        signerName: o.signerName,
        expirationSeconds: o.requestedLifetimeSeconds,
        usages: o.getUsages(key),
        privateKey: key,
        logger: log,
        signal,
      });
    } catch (e) {
      if (signal.aborted) return false;
      log.error(e, "Failed while requesting a signed certificate from the control plane");
      this.#updateServerError(e);
      return false;
    }
    const abort = new AbortController();
    this.#lastRequest = { template, abort };
    const stopTimer = new AbortController();
    o.clock.sleep(o.waitTimeoutMs ?? CERTIFICATE_WAIT_TIMEOUT_MS, stopTimer.signal).then(
      () => abort.abort(),
      () => {},
    );
    let certPem: string;
    try {
      certPem = await waitForCertificate(client, req.name, req.uid, {
        logger: log,
        signal: AbortSignal.any([signal, abort.signal]),
        sleep: (ms, s) => o.clock.sleep(ms, s),
      });
    } catch (e) {
      if (signal.aborted) return false;
      log.error(e, "Certificate request was not signed");
      return false;
    } finally {
      stopTimer.abort();
    }
    let cert: TLSCertificate;
    try {
      cert = await o.store.update(certPem, privateKeyPem(key));
    } catch (e) {
      log.error(e, "Unable to store the new cert/key pair");
      return false;
    }
    this.#serverHealth = true;
    this.#cert = cert;
    log.v(2).info("Certificate rotated", {
      serial: cert.leaf.serialNumber.toString(16),
      expiration: new Date(cert.leaf.notAfter).toISOString(),
    });
    for (const fn of this.#listeners) {
      try {
        fn(cert);
      } catch (e) {
        log.error(e, "Certificate listener failed");
      }
    }
    return true;
  }

  /** Infers the apiserver's health from a failed request (updateServerError). */
  #updateServerError(e: unknown): void {
    const api = e instanceof Error && e.cause instanceof KubeApiError ? e.cause : undefined;
    const code = api?.code ?? 0;
    if (code === 401) this.#serverHealth = true;
    else if (code >= 500) this.#serverHealth = false;
    else this.#serverHealth = code === 404 || code === 403;
  }
}

/** An IP address in one form whatever way it was written ("fd00::7", "FD00:0:0:0:0:0:0:7"). */
function normalIP(ip: string): string {
  const bytes = ipBytes(ip);
  return bytes ? Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("") : ip;
}
