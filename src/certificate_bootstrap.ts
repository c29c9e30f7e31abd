/**
 * @module
 * Whether the kubelet must TLS-bootstrap, as upstream's `pkg/kubelet/certificate/bootstrap`
 * decides it (`isClientConfigStillValid`): given `--bootstrap-kubeconfig`, a `--kubeconfig` that
 * exists, loads, and whose client certificates are all unexpired is used as it is and the
 * bootstrap is skipped. kubeadm's drop-in always passes both flags, so a joined node starts on
 * its kubeconfig. Requesting a certificate with the bootstrap credentials is not implemented:
 * the caller refuses to start when {@link clientConfigStillValid} says it would be needed.
 */

import { ConfigError } from "./config_schema.ts";
import { loadKubeconfig } from "./kubeconfig.ts";
import { parseCertificate, parsePemCertificates } from "./_x509.ts";

/** The answer of {@link clientConfigStillValid}: valid, or why a bootstrap would be needed. */
export type ClientConfigValidity = { valid: true } | { valid: false; reason: string };

/**
 * Checks the kubeconfig at `path` as upstream does before bootstrapping: missing, unreadable,
 * without a client certificate, or with an expired one (at `now`) is not valid.
 */
export async function clientConfigStillValid(
  path: string,
  now: Date,
): Promise<ClientConfigValidity> {
  if (path === "") return { valid: false, reason: "no --kubeconfig is given" };
  try {
    await Deno.stat(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) {
      return { valid: false, reason: `the kubeconfig ${path} does not exist` };
    }
    throw e;
  }
  let certPem: string | undefined;
  try {
    certPem = (await loadKubeconfig(path)).certPem;
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    return { valid: false, reason: `unable to read the existing kubeconfig: ${e.message}` };
  }
  let certs: Uint8Array[] = [];
  try {
    certs = certPem === undefined ? [] : parsePemCertificates(certPem);
  } catch (e) {
    return {
      valid: false,
      reason: `unable to read the client certificate of ${path}: ${(e as Error).message}`,
    };
  }
  if (certs.length === 0) {
    return { valid: false, reason: `the kubeconfig ${path} has no client certificate` };
  }
  for (const der of certs) {
    let notAfter: Date;
    try {
      notAfter = parseCertificate(der).notAfter;
    } catch (e) {
      return {
        valid: false,
        reason: `unable to read the client certificate of ${path}: ${(e as Error).message}`,
      };
    }
    if (now > notAfter) {
      return {
        valid: false,
        reason:
          `part of the existing client certificate in ${path} is expired: ${notAfter.toISOString()}`,
      };
    }
  }
  return { valid: true };
}
