/**
 * @module
 * What the preflight checks report, and the certificate helpers both halves use. Private to
 * preflight.ts and _remote.ts.
 */

import { X509Certificate } from "node:crypto";

/** One result: a check passed, or found a problem (fails the run) or a warning (does not). */
export interface Finding {
  /** The area: "runtime", "swap", "certificates", ... */
  readonly check: string;
  readonly level: "ok" | "warning" | "problem";
  readonly message: string;
  /** What to do; every warning and problem has one. */
  readonly fix?: string;
}

export const ok = (check: string, message: string): Finding => ({ check, level: "ok", message });
export const problem = (check: string, message: string, fix: string): Finding => ({
  check,
  level: "problem",
  message,
  fix,
});
export const warning = (check: string, message: string, fix: string): Finding => ({
  check,
  level: "warning",
  message,
  fix,
});

/** Days before expiry from which a certificate is reported. */
const EXPIRY_WARNING_DAYS = 30;

/** Problems with a certificate's validity period at `now`. */
export function validity(what: string, cert: X509Certificate, now: number): Finding[] {
  const from = Date.parse(cert.validFrom);
  const to = Date.parse(cert.validTo);
  const subject = cert.subject.replaceAll("\n", ", ");
  if (now > to) {
    return [problem(
      "certificates",
      `${what} (${subject}) expired on ${new Date(to).toISOString()}`,
      "renew it (or enable rotateCertificates / serverTLSBootstrap)",
    )];
  }
  if (now < from) {
    return [problem(
      "certificates",
      `${what} (${subject}) is not valid before ${new Date(from).toISOString()}`,
      "check the node's clock, or reissue the certificate",
    )];
  }
  const days = Math.floor((to - now) / 86_400_000);
  if (days < EXPIRY_WARNING_DAYS) {
    return [warning(
      "certificates",
      `${what} (${subject}) expires in ${days} days`,
      "renew it before then",
    )];
  }
  return [];
}

/** The certificates of a PEM file. */
export async function readPemCertificates(file: string): Promise<X509Certificate[]> {
  const pem = await Deno.readTextFile(file);
  const blocks = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  return blocks.map((b) => new X509Certificate(b));
}
