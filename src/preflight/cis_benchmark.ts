/**
 * @module
 * The CIS Kubernetes Benchmark v1.12's worker node items for the kubelet (kube-bench's
 * `cfg/cis-1.12/node.yaml`, the benchmark for Kubernetes 1.32 and later), checked against the
 * effective configuration (section 4.2, kube-bench's reading of each) and against the files the
 * configuration names (section 4.1: the kubeconfig and the config file mode 0600 or stricter,
 * the client CA file 0644 or stricter, each owned by root). `kubelet --check` reports each failed
 * item as a warning. Upstream's defaults fail six of the fourteen 4.2 items on purpose (they need
 * site values: a client CA, a serving certificate, rotation, the cipher list, a PID limit, the
 * default seccomp profile); deploy/'s sample configuration passes all of them. Where kube-bench
 * only asks that a field be set (4.2.13, 4.2.14), the value the benchmark names is checked.
 */

import type { KubeletConfiguration } from "../apis/config_types.ts";
import type { KubeletFlags } from "../apis/flags.ts";

/** One benchmark item's outcome. */
export interface CisResult {
  /** The item number, e.g. "4.2.1". */
  readonly id: string;
  readonly title: string;
  readonly pass: boolean;
  /** What was found. */
  readonly detail: string;
  /** What to change when it fails. */
  readonly fix: string;
}

/**
 * CIS 4.2.12's strong cipher suites (the list kube-bench's cis-1.12 checks against): forward
 * secret ECDHE with AEAD only. v1.12 dropped the RSA key exchange GCM suites
 * (TLS_RSA_WITH_AES_256_GCM_SHA384, TLS_RSA_WITH_AES_128_GCM_SHA256) earlier versions listed.
 */
export const CIS_STRONG_CIPHERS: readonly string[] = [
  "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
  "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
  "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
  "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
  "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
  "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
];

type Item = readonly [
  id: string,
  title: string,
  check: (c: KubeletConfiguration, f: KubeletFlags) => [pass: boolean, detail: string],
  fix: string,
];

const ITEMS: readonly Item[] = [
  [
    "4.2.1",
    "anonymous-auth is false",
    (
      c,
    ) => [
      !c.authentication.anonymous.enabled,
      `anonymous.enabled: ${c.authentication.anonymous.enabled}`,
    ],
    "set authentication.anonymous.enabled: false",
  ],
  [
    "4.2.2",
    "authorization-mode is not AlwaysAllow",
    (c) => [c.authorization.mode !== "AlwaysAllow", `authorization.mode: ${c.authorization.mode}`],
    "set authorization.mode: Webhook",
  ],
  [
    "4.2.3",
    "client-ca-file is set",
    (c) => {
      const ca = c.authentication.x509.clientCAFile ?? "";
      return [ca !== "", `authentication.x509.clientCAFile: ${ca === "" ? "unset" : ca}`];
    },
    "set authentication.x509.clientCAFile to the cluster CA (kubeadm: /etc/kubernetes/pki/ca.crt)",
  ],
  [
    "4.2.4",
    "read-only-port, if defined, is 0",
    (c) => [(c.readOnlyPort ?? 0) === 0, `readOnlyPort: ${c.readOnlyPort ?? 0}`],
    "set readOnlyPort: 0",
  ],
  [
    "4.2.5",
    "streaming-connection-idle-timeout is not 0",
    (c) => [
      c.streamingConnectionIdleTimeout !== 0,
      `streamingConnectionIdleTimeout: ${c.streamingConnectionIdleTimeout} ms`,
    ],
    "set streamingConnectionIdleTimeout: 4h0m0s (or any non-zero duration)",
  ],
  [
    "4.2.6",
    "make-iptables-util-chains is true",
    (c) => [c.makeIPTablesUtilChains, `makeIPTablesUtilChains: ${c.makeIPTablesUtilChains}`],
    "set makeIPTablesUtilChains: true",
  ],
  [
    "4.2.7",
    "hostname-override is not set",
    (_c, f) => [
      f.hostnameOverride === "",
      `--hostname-override: ${f.hostnameOverride === "" ? "unset" : f.hostnameOverride}`,
    ],
    "remove --hostname-override (the node name is the host name)",
  ],
  [
    "4.2.8",
    "eventRecordQPS captures events",
    (c) => [c.eventRecordQPS >= 0, `eventRecordQPS: ${c.eventRecordQPS}`],
    "set eventRecordQPS to 0 (unlimited) or a level that keeps the events you need",
  ],
  [
    "4.2.9",
    "tls-cert-file and tls-private-key-file are set",
    (c) => {
      const both = (c.tlsCertFile ?? "") !== "" && (c.tlsPrivateKeyFile ?? "") !== "";
      return [
        both || c.serverTLSBootstrap === true,
        both
          ? `tlsCertFile: ${c.tlsCertFile}`
          : c.serverTLSBootstrap
          ? "serverTLSBootstrap: true (serving certificates from the cluster CA)"
          : "neither tlsCertFile/tlsPrivateKeyFile nor serverTLSBootstrap: a self-signed certificate",
      ];
    },
    "set tlsCertFile and tlsPrivateKeyFile, or serverTLSBootstrap: true",
  ],
  [
    "4.2.10",
    "rotate-certificates is not false",
    (c) => [c.rotateCertificates === true, `rotateCertificates: ${c.rotateCertificates ?? false}`],
    "set rotateCertificates: true",
  ],
  [
    "4.2.11",
    "RotateKubeletServerCertificate is true",
    (c) => {
      const gate = c.featureGates?.RotateKubeletServerCertificate ?? true;
      return [gate, `featureGates.RotateKubeletServerCertificate: ${gate}`];
    },
    "leave the RotateKubeletServerCertificate feature gate on (its default)",
  ],
  [
    "4.2.12",
    "only strong cryptographic ciphers",
    (c) => {
      const suites = c.tlsCipherSuites ?? [];
      const weak = suites.filter((s) => !CIS_STRONG_CIPHERS.includes(s));
      if (suites.length === 0) return [false, "tlsCipherSuites: unset (Go's default list)"];
      return [
        weak.length === 0,
        weak.length === 0 ? "tlsCipherSuites: strong only" : `weak: ${weak.join(", ")}`,
      ];
    },
    `set tlsCipherSuites to (a subset of) ${CIS_STRONG_CIPHERS.join(",")}`,
  ],
  [
    "4.2.13",
    "a limit is set on pod PIDs",
    (c) => [c.podPidsLimit > 0, `podPidsLimit: ${c.podPidsLimit}`],
    "set podPidsLimit (e.g. 4096)",
  ],
  [
    "4.2.14",
    "seccomp-default is true",
    (c, f) => {
      // Upstream ORs the deprecated flag with the field (cmd/kubelet/app/server.go).
      const on = c.seccompDefault === true || f.seccompDefault;
      return [
        on,
        f.seccompDefault && c.seccompDefault !== true
          ? "--seccomp-default: true"
          : `seccompDefault: ${c.seccompDefault ?? false}`,
      ];
    },
    "set seccompDefault: true (containers without a seccomp profile get RuntimeDefault)",
  ],
];

/** Every 4.2 item against the effective configuration and flags. */
export function cisKubeletChecks(config: KubeletConfiguration, flags: KubeletFlags): CisResult[] {
  return ITEMS.map(([id, title, check, fix]) => {
    const [pass, detail] = check(config, flags);
    return { id, title, pass, detail, fix };
  });
}

/** A file section 4.1 covers, and the item numbers for its mode and owner. */
export interface CisFile {
  readonly path: string;
  /** e.g. "--kubeconfig". */
  readonly what: string;
  readonly modeItem: string;
  /** The most permissive mode the item allows, e.g. 0o600. */
  readonly mode: number;
  readonly ownerItem: string;
}

/** The 4.1 files the configuration names (the unit file is the service manager's). */
export function cisFiles(config: KubeletConfiguration, flags: KubeletFlags): CisFile[] {
  const files: CisFile[] = [
    {
      path: flags.kubeConfig,
      what: "--kubeconfig",
      modeItem: "4.1.5",
      mode: 0o600,
      ownerItem: "4.1.6",
    },
    // A CA certificate is public: since v1.11 the benchmark allows it to be world-readable.
    {
      path: config.authentication.x509.clientCAFile ?? "",
      what: "clientCAFile",
      modeItem: "4.1.7",
      mode: 0o644,
      ownerItem: "4.1.8",
    },
    {
      path: flags.kubeletConfigFile,
      what: "--config",
      modeItem: "4.1.9",
      mode: 0o600,
      ownerItem: "4.1.10",
    },
  ];
  return files.filter((f) => f.path !== "");
}

/** 4.1: each file's mode within its item's and owned by root:root; a missing file is skipped. */
export async function cisFileChecks(files: readonly CisFile[]): Promise<CisResult[]> {
  const out: CisResult[] = [];
  for (const f of files) {
    const info = await Deno.stat(f.path).catch(() => undefined);
    if (!info) continue;
    const mode = (info.mode ?? 0) & 0o777;
    const allowed = f.mode.toString(8);
    out.push({
      id: f.modeItem,
      title: `${f.what} file permissions are ${allowed} or more restrictive`,
      pass: (mode & ~f.mode) === 0,
      detail: `${f.path}: ${mode.toString(8).padStart(4, "0")}`,
      fix: `chmod ${allowed} ${f.path}`,
    });
    out.push({
      id: f.ownerItem,
      title: `${f.what} file ownership is root:root`,
      pass: info.uid === 0 && info.gid === 0,
      detail: `${f.path}: uid ${info.uid} gid ${info.gid}`,
      fix: `chown root:root ${f.path}`,
    });
  }
  return out;
}
