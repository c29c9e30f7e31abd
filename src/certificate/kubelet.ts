/**
 * @module
 * The kubelet's two certificate managers and the watch over its client certificate: the client
 * one (`kubelet-client-*.pem`, signer `kubernetes.io/kube-apiserver-client-kubelet`, subject
 * `system:node:<name>` / O=`system:nodes`) and the serving one (`kubelet-server-*.pem`, signer
 * `kubernetes.io/kubelet-serving`, SANs from the node's last reported addresses, no request until
 * it has an IP). {@link watchClientCertificate} says when the client certificate changed and
 * stops the process when it has had none (or an expired one) for too long while the apiserver
 * answers. Corresponds to upstream `pkg/kubelet/certificate/kubelet.go` and `transport.go`.
 */

import type { V1NodeAddress } from "@kubernetes/client-node";
import type { KeyObject } from "node:crypto";
import { isIP } from "node:net";
import type { CertificateTemplate } from "./pkcs10.ts";
import { CertificateManager } from "./certificate_manager.ts";
import { KUBE_APISERVER_CLIENT_KUBELET_SIGNER, KUBELET_SERVING_SIGNER } from "./csr.ts";
import { CertificateStore, type TLSCertificate } from "./certificate_store.ts";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import type { KubeClient } from "../client/kube_client.ts";
import { formatDuration } from "../util/duration.ts";

/** Usages of a client certificate: key encipherment only for RSA keys (DefaultKubeletClientGetUsages). */
export function kubeletClientUsages(key: KeyObject | undefined): string[] {
  return key?.asymmetricKeyType === "rsa"
    ? ["digital signature", "key encipherment", "client auth"]
    : ["digital signature", "client auth"];
}

/** Usages of a serving certificate (DefaultKubeletServingGetUsages). */
export function kubeletServingUsages(key: KeyObject | undefined): string[] {
  return key?.asymmetricKeyType === "rsa"
    ? ["digital signature", "key encipherment", "server auth"]
    : ["digital signature", "server auth"];
}

/** The subject every kubelet certificate carries. */
export function nodeSubject(nodeName: string): CertificateTemplate {
  return { commonName: `system:node:${nodeName}`, organizations: ["system:nodes"] };
}

/**
 * DNS names and IPs for the serving certificate (addressesToHostnamesAndIPs): Hostname (as an IP
 * when it is one), InternalIP/ExternalIP, InternalDNS/ExternalDNS; unique and sorted.
 */
export function addressesToHostnamesAndIPs(
  addresses: readonly V1NodeAddress[],
): { dnsNames: string[]; ips: string[] } {
  const dns = new Set<string>();
  const ips = new Set<string>();
  for (const a of addresses) {
    if (a.address === "") continue;
    switch (a.type) {
      case "Hostname":
        (isIP(a.address) ? ips : dns).add(a.address);
        break;
      case "InternalIP":
      case "ExternalIP":
        if (isIP(a.address)) ips.add(a.address);
        break;
      case "InternalDNS":
      case "ExternalDNS":
        dns.add(a.address);
        break;
    }
  }
  return { dnsNames: [...dns].sort(), ips: [...ips].sort() };
}

/** Common inputs of both managers. */
interface ManagerBase {
  readonly certDirectory: string;
  readonly nodeName: string;
  readonly clock: Clock;
  readonly logger: Logger;
  /** @default Math.random */
  readonly random?: () => number;
}

/** Options of {@link newKubeletClientCertificateManager}. */
export interface ClientCertificateManagerOptions extends ManagerBase {
  /** Certificate data from --kubeconfig, rotated at once (what kubeadm hands a control plane node). */
  readonly bootstrap?: { readonly certPem: string; readonly keyPem: string };
  /** Files --kubeconfig names, read when no current pair exists. */
  readonly certFile?: string;
  readonly keyFile?: string;
  /** The client to request with, given the current certificate. */
  readonly clientFor: (current: TLSCertificate | undefined) => KubeClient;
}

/** The client certificate manager (NewKubeletClientCertificateManager). */
export async function newKubeletClientCertificateManager(
  o: ClientCertificateManagerOptions,
): Promise<CertificateManager> {
  const store = await CertificateStore.open({
    pairNamePrefix: "kubelet-client",
    certDirectory: o.certDirectory,
    keyDirectory: o.certDirectory,
    certFile: o.certFile,
    keyFile: o.keyFile,
    logger: o.logger,
  });
  const template = nodeSubject(o.nodeName);
  return await CertificateManager.create({
    signerName: KUBE_APISERVER_CLIENT_KUBELET_SIGNER,
    getTemplate: () => template,
    getUsages: kubeletClientUsages,
    store,
    bootstrap: o.bootstrap,
    clientFor: o.clientFor,
    clock: o.clock,
    logger: o.logger,
    random: o.random,
  });
}

/** Options of {@link newKubeletServerCertificateManager}. */
export interface ServerCertificateManagerOptions extends ManagerBase {
  /** Undefined: no rotation (standalone). */
  readonly client?: KubeClient;
  /** `tlsCertFile`/`tlsPrivateKeyFile`, read when no current pair exists. */
  readonly tlsCertFile?: string;
  readonly tlsPrivateKeyFile?: string;
  /** The node's addresses as last reported (getLastObservedNodeAddresses). */
  readonly getAddresses: () => readonly V1NodeAddress[];
}

/** The serving certificate manager (NewKubeletServerCertificateManager). */
export async function newKubeletServerCertificateManager(
  o: ServerCertificateManagerOptions,
): Promise<CertificateManager> {
  const store = await CertificateStore.open({
    pairNamePrefix: "kubelet-server",
    certDirectory: o.certDirectory,
    keyDirectory: o.certDirectory,
    certFile: o.tlsCertFile,
    keyFile: o.tlsPrivateKeyFile,
    logger: o.logger,
  });
  const subject = nodeSubject(o.nodeName);
  const client = o.client;
  return await CertificateManager.create({
    signerName: KUBELET_SERVING_SIGNER,
    getTemplate: () => {
      const { dnsNames, ips } = addressesToHostnamesAndIPs(o.getAddresses());
      // Without an IP there is nothing the apiserver could reach the kubelet by: no request.
      if (ips.length === 0) return undefined;
      return { ...subject, dnsNames, ipAddresses: ips };
    },
    dynamicTemplate: true,
    getUsages: kubeletServingUsages,
    store,
    clientFor: client ? () => client : undefined,
    clock: o.clock,
    logger: o.logger,
    random: o.random,
  });
}

/** How often the client certificate is checked once there is one (upstream: 10 s). */
export const CLIENT_CERT_CHECK_MS = 10_000;
/** How long the kubelet goes on without a valid client certificate (buildKubeletClientConfig). */
export const CLIENT_CERT_EXIT_AFTER_MS = 5 * 60_000;

/** Options of {@link watchClientCertificate}. */
export interface ClientCertificateWatchOptions {
  readonly manager: Pick<CertificateManager, "current" | "serverHealthy">;
  readonly clock: Clock;
  readonly logger: Logger;
  /** @default CLIENT_CERT_EXIT_AFTER_MS; 0 never exits */
  readonly exitAfterMs?: number;
  /** Ends the process (os.Exit(1) upstream). */
  readonly exit: (code: number) => void;
  readonly signal: AbortSignal;
}

/**
 * The check upstream's rotating transport runs (every second until the first certificate, then
 * every 10 s): logs when the certificate changed (new requests then use it: see KubeClient's
 * `clientCertificate`), and exits when none has been valid for `exitAfterMs` while the apiserver
 * answers, or the one in use expired while it answers.
 */
export async function watchClientCertificate(o: ClientCertificateWatchOptions): Promise<void> {
  const exitAfter = o.exitAfterMs ?? CLIENT_CERT_EXIT_AFTER_MS;
  let lastAvailable = o.clock.now();
  let last = o.manager.current();
  while (!o.signal.aborted) {
    await o.clock.sleep(last ? CLIENT_CERT_CHECK_MS : 1_000, o.signal).catch(() => {});
    if (o.signal.aborted) return;
    const curr = o.manager.current();
    const now = o.clock.now();
    if (exitAfter > 0) {
      if (!curr) {
        if (now > lastAvailable + exitAfter) {
          const kv = {
            lastCertificateAvailabilityTime: new Date(lastAvailable).toISOString(),
            shutdownThreshold: formatDuration(exitAfter),
          };
          if (o.manager.serverHealthy()) {
            o.logger.error(
              null,
              "No valid client certificate is found and the server is responsive, exiting.",
              kv,
            );
            o.exit(1);
            return;
          }
          o.logger.error(
            null,
            "No valid client certificate is found but the server is not responsive. A restart may be necessary to retrieve new initial credentials.",
            kv,
          );
        }
      } else {
        if (now > curr.leaf.notAfter) {
          if (o.manager.serverHealthy()) {
            o.logger.error(
              null,
              "The currently active client certificate has expired and the server is responsive, exiting.",
            );
            o.exit(1);
            return;
          }
          o.logger.error(
            null,
            "The currently active client certificate has expired, but the server is not responsive. A restart may be necessary to retrieve new initial credentials.",
          );
        }
        lastAvailable = now;
      }
    }
    if (!curr || curr === last) continue;
    last = curr;
    o.logger.info(
      "Certificate rotation detected, shutting down client connections to start using new credentials",
    );
  }
}
