/**
 * @module
 * The CertificateSigningRequest API as the kubelet uses it: create a `certificates.k8s.io/v1`
 * CSR (or reuse one of the same name made for the same key by an earlier run), then list and
 * watch it until it is approved and its certificate issued, or denied, failed, deleted or
 * replaced. Talks to the apiserver through {@link KubeClient}. Corresponds to client-go
 * `util/certificate/csr/csr.go` (RequestCertificate, WaitForCertificate, ensureCompatible);
 * the v1beta1 fallback is left out, since that API left the apiserver in 1.22.
 */

import type { V1CertificateSigningRequest } from "@kubernetes/client-node";
import { createPublicKey, type KeyObject } from "node:crypto";
import { parseCSRPem } from "./pkcs10.ts";
import { parseCertificate, parsePemCertificates } from "./x509.ts";
import type { Logger } from "../klog/klog.ts";
import { isStatus, KubeApiError, type KubeClient } from "../client/kube_client.ts";

/** The signer of kubelet client certificates (certificatesv1.KubeAPIServerClientKubeletSignerName). */
export const KUBE_APISERVER_CLIENT_KUBELET_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet";
/** The signer of kubelet serving certificates (certificatesv1.KubeletServingSignerName). */
export const KUBELET_SERVING_SIGNER = "kubernetes.io/kubelet-serving";

const CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

/** The request failed for a reason the caller logs; carries the apiserver error when there is one. */
export class CsrRequestError extends Error {
  override name = "CsrRequestError";
}

/** What {@link requestCertificate} sends. */
export interface CertificateRequestOptions {
  /** PEM `CERTIFICATE REQUEST`. */
  readonly csrPem: string;
  /** A fixed name (the bootstrap's digest); empty for `generateName: csr-`. */
  readonly name: string;
  readonly signerName: string;
  /** spec.expirationSeconds; sent only when set, as upstream. */
  readonly expirationSeconds?: number;
  readonly usages: readonly string[];
  /** The key the request was signed with, to recognise an existing request of the same name. */
  readonly privateKey: KeyObject;
  readonly logger: Logger;
  readonly signal?: AbortSignal;
}

function b64(text: string): string {
  return btoa(text);
}

function fromB64(text: string | undefined): string {
  if (!text) return "";
  return new TextDecoder().decode(Uint8Array.from(atob(text), (c) => c.charCodeAt(0)));
}

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

/** Creates the CSR, or reuses a compatible one of the same name; returns its name and uid. */
export async function requestCertificate(
  client: KubeClient,
  opts: CertificateRequestOptions,
): Promise<{ name: string; uid: string }> {
  const csr: V1CertificateSigningRequest = {
    apiVersion: "certificates.k8s.io/v1",
    kind: "CertificateSigningRequest",
    metadata: opts.name !== "" ? { name: opts.name } : { generateName: "csr-" },
    spec: {
      request: b64(opts.csrPem),
      usages: [...opts.usages],
      signerName: opts.signerName,
      ...(opts.expirationSeconds !== undefined
        ? { expirationSeconds: opts.expirationSeconds }
        : {}),
    },
  };
  try {
    const created = await client.create(CSR_PATH, csr, opts.signal);
    const name = created.metadata?.name ?? "";
    opts.logger.v(2).info("Certificate signing request created", { csr: name });
    return { name, uid: created.metadata?.uid ?? "" };
  } catch (e) {
    if (!(isStatus(e, 409) && opts.name !== "")) {
      throw new CsrRequestError(`cannot create certificate signing request: ${message(e)}`, {
        cause: e,
      });
    }
  }
  opts.logger.info("csr for this node already exists, reusing");
  let existing: V1CertificateSigningRequest;
  try {
    existing = await client.get(`${CSR_PATH}/${opts.name}`, opts.signal);
  } catch (e) {
    throw new CsrRequestError(`cannot retrieve certificate signing request: ${message(e)}`, {
      cause: e,
    });
  }
  const problem = incompatibility(existing, csr, opts.privateKey);
  if (problem) throw new CsrRequestError(`retrieved csr is not compatible: ${problem}`);
  opts.logger.info("csr for this node is still valid");
  return { name: existing.metadata?.name ?? opts.name, uid: existing.metadata?.uid ?? "" };
}

/** Why an existing CSR is not the one we would make (client-go ensureCompatible), or undefined. */
function incompatibility(
  found: V1CertificateSigningRequest,
  wanted: V1CertificateSigningRequest,
  key: KeyObject,
): string | undefined {
  let a, b;
  try {
    a = parseCSRPem(fromB64(found.spec?.request));
  } catch (e) {
    return `unable to parse new csr: ${message(e)}`;
  }
  try {
    b = parseCSRPem(fromB64(wanted.spec?.request));
  } catch (e) {
    return `unable to parse original csr: ${message(e)}`;
  }
  if (!equalBytes(a.rawSubject, b.rawSubject)) return "csr subjects differ";
  const fs = found.spec?.signerName ?? "";
  const ws = wanted.spec?.signerName ?? "";
  if (fs !== "" && ws !== "" && fs !== ws) {
    return `csr signerNames differ: new "${fs}", orig: "${ws}"`;
  }
  const ours = new Uint8Array(createPublicKey(key).export({ type: "spki", format: "der" }));
  if (!equalBytes(a.rawSubjectPublicKeyInfo, ours)) {
    return "error validating signature new CSR against old key: the request is for another key";
  }
  const issued = fromB64(found.status?.certificate);
  if (issued !== "") {
    for (const der of parsePemCertificates(issued)) {
      const notAfter = parseCertificate(der).notAfter;
      if (Date.now() > notAfter.getTime()) {
        return `one of the certificates for the CSR has expired: ${notAfter.toISOString()}`;
      }
    }
  }
  return undefined;
}

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/**
 * What one observed state of the CSR means: the issued PEM certificate, undefined to keep
 * waiting, or a {@link CsrRequestError} (denied, failed, replaced).
 */
export function certificateFromCSR(
  csr: V1CertificateSigningRequest,
  uid: string,
  logger?: Logger,
): string | undefined {
  const name = csr.metadata?.name ?? "";
  if (uid !== "" && csr.metadata?.uid !== uid) {
    throw new CsrRequestError(`csr "${name}" changed UIDs`);
  }
  let approved = false;
  for (const c of csr.status?.conditions ?? []) {
    if (c.type === "Denied") {
      throw new CsrRequestError(
        `certificate signing request is denied, reason: ${c.reason ?? ""}, message: ${
          c.message ?? ""
        }`,
      );
    }
    if (c.type === "Failed") {
      throw new CsrRequestError(
        `certificate signing request failed, reason: ${c.reason ?? ""}, message: ${
          c.message ?? ""
        }`,
      );
    }
    if (c.type === "Approved") approved = true;
  }
  if (!approved) return undefined;
  const cert = fromB64(csr.status?.certificate);
  if (cert !== "") {
    logger?.v(2).info("Certificate signing request is issued", { csr: name });
    return cert;
  }
  logger?.v(2).info("Certificate signing request is approved, waiting to be issued", { csr: name });
  return undefined;
}

/** The error a wait ends with when its deadline passes (wait.ErrorInterrupted). */
export const TIMED_OUT = "timed out waiting for the condition";

/**
 * Waits until CSR `name` (of `uid`) has its certificate issued, and returns the PEM. Lists it,
 * then watches from that list; a closed watch is listed and watched again. Throws
 * {@link CsrRequestError} when it is denied, failed, deleted or replaced, and one saying
 * {@link TIMED_OUT} when `signal` aborts.
 */
export async function waitForCertificate(
  client: KubeClient,
  name: string,
  uid: string,
  opts: {
    logger: Logger;
    signal: AbortSignal;
    retryMs?: number;
    sleep: (ms: number, s: AbortSignal) => Promise<void>;
  },
): Promise<string> {
  const fieldSelector = `metadata.name=${name}`;
  const { signal, logger } = opts;
  const timedOut = () => new CsrRequestError(TIMED_OUT);
  for (;;) {
    if (signal.aborted) throw timedOut();
    let list: { metadata?: { resourceVersion?: string }; items?: V1CertificateSigningRequest[] };
    try {
      list = await client.request("GET", CSR_PATH, { query: { fieldSelector }, signal });
    } catch (e) {
      if (signal.aborted) throw timedOut();
      logger.v(2).info("Error fetching v1 certificate signing request", { err: message(e) });
      await opts.sleep(opts.retryMs ?? 1_000, signal).catch(() => {});
      continue;
    }
    const item = list.items?.[0];
    if (item) {
      const cert = certificateFromCSR(item, uid, logger);
      if (cert !== undefined) return cert;
    }
    try {
      for await (
        const ev of client.watch<V1CertificateSigningRequest>(CSR_PATH, {
          resourceVersion: list.metadata?.resourceVersion,
          fieldSelector,
          signal,
        })
      ) {
        if (ev.type === "DELETED") throw new CsrRequestError(`csr "${name}" was deleted`);
        if (ev.type !== "ADDED" && ev.type !== "MODIFIED") continue;
        const cert = certificateFromCSR(ev.object, uid, logger);
        if (cert !== undefined) return cert;
      }
    } catch (e) {
      if (e instanceof CsrRequestError) throw e;
      if (signal.aborted) throw timedOut();
      if (!(e instanceof KubeApiError)) throw e;
      logger.v(2).info("Watch of the certificate signing request ended", { err: message(e) });
      await opts.sleep(opts.retryMs ?? 1_000, signal).catch(() => {});
    }
  }
}
