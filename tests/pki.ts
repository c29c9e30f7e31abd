/**
 * @module
 * A throw-away PKI for one test run of the control plane, made with the `openssl` CLI
 * (node:crypto makes keys but cannot sign certificates): a cluster CA, the apiserver's serving
 * certificate, client certificates for the admin, for the apiserver's calls to kubelets and for
 * each node's kubelet, and the service-account signing key pair. It also writes kubeconfig
 * files that point at those files or embed them.
 *
 * It corresponds to what `kubeadm init phase certs` and `kubeadm init phase kubeconfig` write
 * under /etc/kubernetes: the same subjects (`kubernetes-admin` in `system:masters`,
 * `system:node:<name>` in `system:nodes`) and the same SANs on the serving certificate, so the
 * apiserver's Node authorizer and NodeRestriction admission treat a node's client certificate
 * exactly as they would in a kubeadm cluster. No front-proxy CA: nothing here aggregates APIs.
 */

import { stringify } from "yaml";

/** Paths of a PEM certificate and its PEM private key. */
export interface CertKeyPair {
  readonly cert: string;
  readonly key: string;
}

/** The files {@link createPki} wrote, all absolute paths under its `dir`. */
export interface Pki {
  readonly dir: string;
  /** The cluster CA: signs every certificate below; the apiserver's `--client-ca-file`. */
  readonly ca: CertKeyPair;
  /** The apiserver's serving certificate (SANs in {@link APISERVER_SANS}). */
  readonly apiserver: CertKeyPair;
  /** The apiserver's client certificate towards kubelets (CN kube-apiserver-kubelet-client). */
  readonly apiserverKubeletClient: CertKeyPair;
  /** Client certificate of CN kubernetes-admin, O system:masters. */
  readonly admin: CertKeyPair;
  /** Client certificate of CN system:node:<name>, O system:nodes, for each node name. */
  readonly nodes: ReadonlyMap<string, CertKeyPair>;
  /** Service-account token signing key (private) and its public key. */
  readonly serviceAccount: { readonly key: string; readonly pub: string };
}

/** Options for {@link createPki}. */
export interface PkiOptions {
  /** Nodes to issue kubelet client certificates for. @default [] */
  readonly nodeNames?: readonly string[];
  /** Key algorithm of every key. @default "rsa" (2048 bits, kubeadm's default) */
  readonly keyType?: KeyType;
  /** Validity of every certificate, in days from now. @default 30 */
  readonly days?: number;
  /**
   * More SANs on the apiserver's serving certificate than {@link APISERVER_SANS}, e.g. the
   * address a kubelet in another network namespace reaches it at. @default []
   */
  readonly apiserverSans?: readonly string[];
  readonly signal?: AbortSignal;
}

/** `rsa` is RSA 2048, `ecdsa` is ECDSA P-256. */
export type KeyType = "rsa" | "ecdsa";

/** SANs of the apiserver's serving certificate: loopback, and the in-cluster service names. */
export const APISERVER_SANS: readonly string[] = [
  "127.0.0.1",
  "localhost",
  "kubernetes",
  "kubernetes.default",
  "kubernetes.default.svc",
  "kubernetes.default.svc.cluster.local",
  "10.96.0.1", // first address of --service-cluster-ip-range=10.96.0.0/12
];

/** openssl failed, or an argument cannot go into a certificate. */
export class PkiError extends Error {
  override name = "PkiError";
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

/** Creates `dir` and writes a fresh CA, key pairs and certificates into it. */
export async function createPki(dir: string, opts: PkiOptions = {}): Promise<Pki> {
  const nodeNames = opts.nodeNames ?? [];
  for (const name of nodeNames) checkNodeName(name);
  if (new Set(nodeNames).size !== nodeNames.length) {
    throw new PkiError(`Node names must be unique: current value is [${nodeNames.join(", ")}]`);
  }
  const abs = absolute(dir);
  await Deno.mkdir(abs, { recursive: true, mode: 0o700 });
  const common = { dir: abs, keyType: opts.keyType ?? "rsa", signal: opts.signal };
  const days = opts.days ?? 30;

  const ca = await createCa({ ...common, name: "ca", commonName: "kubernetes", days });
  const issue = (name: string, subject: Subject, usage: Usage, sans: readonly string[] = []) =>
    issueCertificate({ ...common, ca, name, subject, usage, sans, days });
  // One Promise.all, so a failure of any leaves no other rejection unhandled.
  const [apiserver, apiserverKubeletClient, admin, serviceAccount, nodes] = await Promise.all([
    issue("apiserver", { commonName: "kube-apiserver" }, "server", [
      ...APISERVER_SANS,
      ...(opts.apiserverSans ?? []),
    ]),
    issue("apiserver-kubelet-client", {
      commonName: "kube-apiserver-kubelet-client",
      organizations: ["system:masters"],
    }, "client"),
    issue("admin", { commonName: "kubernetes-admin", organizations: ["system:masters"] }, "client"),
    createKeyPair({ ...common, name: "sa" }).then(async (key) => {
      const pub = `${abs}/sa.pub`;
      await openssl(["pkey", "-in", key, "-pubout", "-out", pub], opts.signal);
      return { key, pub };
    }),
    Promise.all(nodeNames.map(async (name) =>
      [
        name,
        await issue(`kubelet-${name}`, {
          commonName: `system:node:${name}`,
          organizations: ["system:nodes"],
        }, "client"),
      ] as const
    )),
  ]);
  return {
    dir: abs,
    ca,
    apiserver,
    apiserverKubeletClient,
    admin,
    nodes: new Map(nodes),
    serviceAccount,
  };
}

/** The subject of a certificate. */
export interface Subject {
  readonly commonName: string;
  /** O= entries, in order; Kubernetes reads them as the user's groups. */
  readonly organizations?: readonly string[];
}

/** What a leaf certificate is for (extendedKeyUsage). */
export type Usage = "client" | "server" | "both";

/** Options for {@link issueCertificate}. */
export interface IssueOptions {
  /** Directory for `<name>.crt` and `<name>.key`. */
  readonly dir: string;
  /** Base name of the files. */
  readonly name: string;
  readonly ca: CertKeyPair;
  readonly subject: Subject;
  readonly usage: Usage;
  /** DNS names and IP addresses (told apart by their form). @default [] */
  readonly sans?: readonly string[];
  /** @default "rsa" */
  readonly keyType?: KeyType;
  /** @default 30 */
  readonly days?: number;
  readonly signal?: AbortSignal;
}

/**
 * Makes a key pair and a certificate for it signed by `ca`. Exported for tests that need more
 * identities than {@link createPki} makes (a kubelet serving certificate, an unknown user).
 */
export async function issueCertificate(opts: IssueOptions): Promise<CertKeyPair> {
  const dir = absolute(opts.dir);
  const key = await createKeyPair({
    dir,
    name: opts.name,
    keyType: opts.keyType ?? "rsa",
    signal: opts.signal,
  });
  const config = `${dir}/${opts.name}.cnf`;
  const csr = `${dir}/${opts.name}.csr`;
  const cert = `${dir}/${opts.name}.crt`;
  const eku = { client: "clientAuth", server: "serverAuth", both: "serverAuth,clientAuth" };
  const ext = [
    "basicConstraints = critical,CA:FALSE",
    "keyUsage = critical,digitalSignature,keyEncipherment",
    `extendedKeyUsage = ${eku[opts.usage]}`,
    "subjectKeyIdentifier = hash",
    "authorityKeyIdentifier = keyid:always",
  ];
  const sans = opts.sans ?? [];
  if (sans.length > 0) ext.push(`subjectAltName = ${sans.map(sanEntry).join(",")}`);
  await Deno.writeTextFile(config, opensslConfig(opts.subject, ext));
  await openssl(["req", "-new", "-key", key, "-config", config, "-out", csr], opts.signal);
  await openssl([
    ...["x509", "-req", "-in", csr, "-CA", opts.ca.cert, "-CAkey", opts.ca.key],
    ...["-set_serial", serial(), "-days", String(opts.days ?? 30), "-sha256"],
    ...["-extfile", config, "-extensions", "ext", "-out", cert],
  ], opts.signal);
  await Deno.remove(csr);
  return { cert, key };
}

/** A self-signed CA certificate and its key, `<name>.crt` and `<name>.key` in `dir`. */
async function createCa(args: {
  dir: string;
  name: string;
  commonName: string;
  keyType: KeyType;
  days: number;
  signal?: AbortSignal;
}): Promise<CertKeyPair> {
  const key = await createKeyPair(args);
  const config = `${args.dir}/${args.name}.cnf`;
  const cert = `${args.dir}/${args.name}.crt`;
  await Deno.writeTextFile(
    config,
    opensslConfig({ commonName: args.commonName }, [
      "basicConstraints = critical,CA:TRUE",
      "keyUsage = critical,digitalSignature,keyEncipherment,keyCertSign,cRLSign",
      "subjectKeyIdentifier = hash",
    ]),
  );
  await openssl([
    ...["req", "-x509", "-new", "-key", key, "-config", config, "-extensions", "ext"],
    ...["-set_serial", serial(), "-days", String(args.days), "-sha256", "-out", cert],
  ], args.signal);
  return { cert, key };
}

/** A private key (PKCS#8 PEM, mode 0600) at `<dir>/<name>.key`; returns its path. */
async function createKeyPair(
  args: { dir: string; name: string; keyType: KeyType; signal?: AbortSignal },
): Promise<string> {
  const key = `${args.dir}/${args.name}.key`;
  // Created empty with mode 0600 first: openssl would create it with the umask's mode.
  await Deno.writeTextFile(key, "", { mode: 0o600 });
  await Deno.chmod(key, 0o600);
  const algorithm = args.keyType === "rsa"
    ? ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"]
    : ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"];
  await openssl(["genpkey", ...algorithm, "-out", key], args.signal);
  return key;
}

/** An openssl config with the subject (for `req`) and an `[ext]` section of extensions. */
function opensslConfig(subject: Subject, ext: readonly string[]): string {
  const orgs = subject.organizations ?? [];
  for (const value of [subject.commonName, ...orgs]) {
    if (value === "" || /[\n\r$\\"]/.test(value)) {
      throw new PkiError(
        `A subject field must be non-empty without newlines, '$', '\\' or '"': ` +
          `current value is ${JSON.stringify(value)}`,
      );
    }
  }
  return [
    "# Written by tests/pki.ts",
    "[req]",
    "distinguished_name = dn",
    "prompt = no",
    "utf8 = yes",
    "string_mask = utf8only",
    "[dn]",
    ...orgs.map((o, i) => `${i}.O = ${o}`),
    `CN = ${subject.commonName}`,
    "[ext]",
    ...ext,
    "",
  ].join("\n");
}

function sanEntry(san: string): string {
  if (/^\d{1,3}(\.\d{1,3}){3}$/.test(san) || san.includes(":")) return `IP:${san}`;
  if (!/^[a-z0-9*]([-a-z0-9.*]*[a-z0-9])?$/i.test(san)) {
    throw new PkiError(`A SAN must be a DNS name or an IP address: current value is '${san}'`);
  }
  return `DNS:${san}`;
}

/** A random positive 127-bit serial number, as openssl's `-set_serial` takes it. */
function serial(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[0] = (bytes[0] ?? 0) & 0x7f | 0x01;
  return `0x${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

/** A node name must be a DNS subdomain (RFC 1123), as the Node object's name is. */
function checkNodeName(name: string): void {
  if (
    name.length > 253 ||
    !/^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/.test(name)
  ) {
    throw new PkiError(
      `A node name must be a lower-case RFC 1123 subdomain such as node-a: ` +
        `current value is '${name}'`,
    );
  }
}

async function openssl(args: string[], signal?: AbortSignal): Promise<void> {
  let out: Deno.CommandOutput;
  try {
    out = await new Deno.Command("openssl", {
      args,
      // OPENSSL_CONF and friends would change what gets written.
      clearEnv: true,
      env: { PATH: "/usr/local/bin:/usr/bin:/bin" },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      signal,
    }).output();
  } catch (err) {
    signal?.throwIfAborted();
    throw new PkiError(
      `Cannot run openssl (install Debian's openssl package): ${(err as Error).message}`,
      { cause: err },
    );
  }
  if (!out.success) {
    signal?.throwIfAborted();
    throw new PkiError(
      `'openssl ${args.join(" ")}' failed with code ${out.code}: ` +
        new TextDecoder().decode(out.stderr).trim(),
    );
  }
}

/** Options for {@link writeKubeconfig}. */
export interface KubeconfigOptions {
  /** Where to write it (mode 0600); its directory is created. */
  readonly path: string;
  /** The apiserver, `https://127.0.0.1:PORT`. */
  readonly server: string;
  readonly caFile: string;
  readonly certFile: string;
  readonly keyFile: string;
  /** Name of the user entry, e.g. `kubernetes-admin` or `system:node:node-a`. */
  readonly user: string;
  /** Name of the cluster entry. @default "kubelet-ts" */
  readonly cluster?: string;
  /**
   * Embed the PEM files as `certificate-authority-data`, `client-certificate-data` and
   * `client-key-data` (base64) instead of referring to their paths.
   * @default false
   */
  readonly embed?: boolean;
}

/** Writes a kubeconfig with one cluster, one user and one context, which is current. */
export async function writeKubeconfig(opts: KubeconfigOptions): Promise<string> {
  const cluster = opts.cluster ?? "kubelet-ts";
  const context = `${opts.user}@${cluster}`;
  const data = async (file: string) => btoa(await Deno.readTextFile(file));
  const clusterEntry = opts.embed
    ? { server: opts.server, "certificate-authority-data": await data(opts.caFile) }
    : { server: opts.server, "certificate-authority": absolute(opts.caFile) };
  const userEntry = opts.embed
    ? {
      "client-certificate-data": await data(opts.certFile),
      "client-key-data": await data(opts.keyFile),
    }
    : {
      "client-certificate": absolute(opts.certFile),
      "client-key": absolute(opts.keyFile),
    };
  const config = {
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: cluster, cluster: clusterEntry }],
    users: [{ name: opts.user, user: userEntry }],
    contexts: [{ name: context, context: { cluster, user: opts.user } }],
    "current-context": context,
    preferences: {},
  };
  const path = absolute(opts.path);
  await Deno.mkdir(path.slice(0, path.lastIndexOf("/")) || "/", { recursive: true });
  await Deno.writeTextFile(path, stringify(config, { lineWidth: 0 }), { mode: 0o600 });
  await Deno.chmod(path, 0o600);
  return path;
}

function absolute(path: string): string {
  const p = path.startsWith("/") ? path : `${Deno.cwd()}/${path}`;
  return p.replace(/\/+$/, "") || "/";
}
