/**
 * @module
 * What kube-controller-manager and kubeadm do for TLS bootstrap, for tests whose control plane
 * (tests/control_plane.ts) runs no controller manager: {@link setupBootstrapToken} writes a
 * bootstrap token Secret and kubeadm's RBAC for it (`system:node-bootstrapper` and auto-approval
 * of node client CSRs for the token's group, auto-approval of self renewals for `system:nodes`)
 * and a bootstrap kubeconfig; {@link startCsrController} watches CertificateSigningRequests,
 * approves kubelet client requests as the csrapproving controller does (a SubjectAccessReview of
 * `certificatesigningrequests/nodeclient` or `/selfnodeclient` for the requester), approves kubelet
 * serving requests as an administrator would (`kubectl certificate approve`; no controller
 * approves those upstream), denies requests for node names it is told to, and signs approved
 * requests with the cluster CA as the csrsigning controller does, for `signingDurationSeconds`
 * (kube-controller-manager's --cluster-signing-duration) or the requested expirationSeconds if
 * shorter. Signing runs `openssl ca`, which sets validity to the second.
 *
 * Upstream: kubeadm `phases/bootstraptoken/node` (AllowBootstrapTokensToPostCSRs,
 * AutoApproveNodeBootstrapTokens, AutoApproveNodeCertificateRotation) and
 * kube-controller-manager's `pkg/controller/certificates/approver/sarapprove.go` and
 * `signer/signer.go`.
 */

import type { V1CertificateSigningRequest } from "@kubernetes/client-node";
import { join } from "node:path";
import { stringify } from "yaml";
import type { KubeClient } from "../src/client/kube_client.ts";
import type { ControlPlane } from "./control_plane.ts";

const CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
/** The group kubeadm's default node token carries (auth-extra-groups). */
export const BOOTSTRAP_GROUP = "system:bootstrappers:kubeadm:default-node-token";

/** A bootstrap token and the kubeconfig that presents it. */
export interface BootstrapToken {
  readonly id: string;
  readonly secret: string;
  /** `<id>.<secret>`. */
  readonly token: string;
  /** The user the apiserver sees: `system:bootstrap:<id>`. */
  readonly user: string;
  readonly kubeconfig: string;
}

async function kubectlOk(cp: ControlPlane, args: string[], stdin?: string): Promise<void> {
  const r = await cp.kubectl(args, { stdin });
  if (r.code !== 0 && !/AlreadyExists|already exists/.test(r.stderr)) {
    throw new Error(`kubectl ${args.join(" ")} failed: ${r.stderr}`);
  }
}

function randomToken(n: number): string {
  const abc = "abcdefghijklmnopqrstuvwxyz0123456789";
  return Array.from(crypto.getRandomValues(new Uint8Array(n)), (b) => abc[b % abc.length]).join("");
}

/**
 * Creates a bootstrap token Secret in kube-system (`bootstrap-token-<id>`, usable for
 * authentication and signing, group {@link BOOTSTRAP_GROUP}, expiring in a day), kubeadm's three
 * ClusterRoleBindings, and `path`, a kubeconfig with the token and the cluster CA. The apiserver
 * must run with --enable-bootstrap-token-auth.
 */
export async function setupBootstrapToken(cp: ControlPlane, path: string): Promise<BootstrapToken> {
  const id = randomToken(6);
  const secret = randomToken(16);
  const expiration = new Date(Date.now() + 86_400_000).toISOString().replace(/\.\d+Z$/, "Z");
  await kubectlOk(
    cp,
    ["apply", "-f", "-"],
    JSON.stringify({
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: `bootstrap-token-${id}`, namespace: "kube-system" },
      type: "bootstrap.kubernetes.io/token",
      stringData: {
        description: "kubelet-ts TLS bootstrap e2e",
        "token-id": id,
        "token-secret": secret,
        expiration,
        "usage-bootstrap-authentication": "true",
        "usage-bootstrap-signing": "true",
        "auth-extra-groups": BOOTSTRAP_GROUP,
      },
    }),
  );
  const bindings: [string, string, string][] = [
    ["kubeadm:kubelet-bootstrap", "system:node-bootstrapper", BOOTSTRAP_GROUP],
    [
      "kubeadm:node-autoapprove-bootstrap",
      "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
      BOOTSTRAP_GROUP,
    ],
    [
      "kubeadm:node-autoapprove-certificate-rotation",
      "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
      "system:nodes",
    ],
  ];
  for (const [name, role, group] of bindings) {
    await kubectlOk(cp, [
      "create",
      "clusterrolebinding",
      name,
      `--clusterrole=${role}`,
      `--group=${group}`,
    ]);
  }
  const config = {
    apiVersion: "v1",
    kind: "Config",
    clusters: [{
      name: "kubelet-ts",
      cluster: { server: cp.server, "certificate-authority": cp.pki.ca.cert },
    }],
    users: [{ name: "tls-bootstrap-token-user", user: { token: `${id}.${secret}` } }],
    contexts: [{
      name: "tls-bootstrap",
      context: { cluster: "kubelet-ts", user: "tls-bootstrap-token-user" },
    }],
    "current-context": "tls-bootstrap",
  };
  await Deno.writeTextFile(path, stringify(config), { mode: 0o600 });
  return { id, secret, token: `${id}.${secret}`, user: `system:bootstrap:${id}`, kubeconfig: path };
}

/** Options of {@link startCsrController}. */
export interface CsrControllerOptions {
  readonly cp: ControlPlane;
  /** An admin client. */
  readonly api: KubeClient;
  /** Working directory for the signer's files. */
  readonly dir: string;
  /** Lifetime of issued certificates (--cluster-signing-duration). */
  readonly signingDurationSeconds: number;
  /** Node names whose requests are denied (KubectlDeny), client and serving alike. @default [] */
  readonly denyNodes?: readonly string[];
  readonly signal: AbortSignal;
}

/** What the controller did, for assertions. */
export interface CsrControllerEvent {
  readonly name: string;
  readonly action: "approved" | "denied" | "signed";
  readonly signerName: string;
  readonly username: string;
  readonly reason?: string;
}

/** A running CSR controller. */
export interface CsrController {
  readonly events: CsrControllerEvent[];
  /** Ends with the signal. */
  readonly done: Promise<void>;
}

async function openssl(args: string[], cwd: string): Promise<string> {
  const o = await new Deno.Command("openssl", {
    args,
    cwd,
    clearEnv: true,
    env: { PATH: "/usr/local/bin:/usr/bin:/bin" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  if (!o.success) throw new Error(`openssl ${args.join(" ")}: ${dec.decode(o.stderr)}`);
  return dec.decode(o.stdout);
}

/** `YYMMDDHHMMSSZ`, as `openssl ca -startdate` takes it. */
function asn1Time(ms: number): string {
  return new Date(ms).toISOString().replace(
    /^\d\d(\d\d)-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d).*$/,
    "$1$2$3$4$5$6Z",
  );
}

/** Subject and SAN presence of a PEM request. */
async function describe(
  csrFile: string,
  cwd: string,
): Promise<{ cn: string; orgs: string[]; sans: boolean }> {
  const text = await openssl(
    ["req", "-in", csrFile, "-noout", "-text", "-nameopt", "RFC2253"],
    cwd,
  );
  const subject = /Subject: (.*)/.exec(text)?.[1] ?? "";
  const parts = subject.split(",").map((p) => p.trim());
  return {
    cn: parts.find((p) => p.startsWith("CN="))?.slice(3) ?? "",
    orgs: parts.filter((p) => p.startsWith("O=")).map((p) => p.slice(2)),
    sans: /Subject Alternative Name/.test(text),
  };
}

/** Starts the approver and signer; it runs until `signal` aborts. */
export async function startCsrController(o: CsrControllerOptions): Promise<CsrController> {
  const dir = o.dir;
  await Deno.mkdir(join(dir, "newcerts"), { recursive: true });
  await Deno.writeTextFile(join(dir, "index.txt"), "");
  await Deno.writeTextFile(join(dir, "serial"), "1000\n");
  await Deno.writeTextFile(
    join(dir, "ca.cnf"),
    [
      "[ca]",
      "default_ca = signer",
      "[signer]",
      `database = ${join(dir, "index.txt")}`,
      `new_certs_dir = ${join(dir, "newcerts")}`,
      `serial = ${join(dir, "serial")}`,
      "default_md = sha256",
      "policy = any",
      "unique_subject = no",
      "copy_extensions = copy",
      "email_in_dn = no",
      "[any]",
      "organizationName = optional",
      "commonName = supplied",
      "[client]",
      "basicConstraints = critical,CA:FALSE",
      "keyUsage = critical,digitalSignature",
      "extendedKeyUsage = clientAuth",
      "authorityKeyIdentifier = keyid",
      "[server]",
      "basicConstraints = critical,CA:FALSE",
      "keyUsage = critical,digitalSignature",
      "extendedKeyUsage = serverAuth",
      "authorityKeyIdentifier = keyid",
      "",
    ].join("\n"),
  );
  const events: CsrControllerEvent[] = [];
  const handled = new Set<string>();
  let n = 0;

  const condition = (type: string, reason: string, message: string) => ({
    type,
    status: "True",
    reason,
    message,
    // The JSON form is RFC 3339 text; client-node types it as a Date.
    lastUpdateTime: new Date().toISOString().replace(/\.\d+Z$/, "Z") as unknown as Date,
  });

  const decide = async (csr: V1CertificateSigningRequest): Promise<void> => {
    const name = csr.metadata?.name ?? "";
    const spec = csr.spec!;
    const file = join(dir, `${name}.csr`);
    await Deno.writeTextFile(file, atob(spec.request));
    const subject = await describe(file, dir);
    const node = subject.cn.replace(/^system:node:/, "");
    const record = (action: CsrControllerEvent["action"], reason?: string) =>
      events.push({
        name,
        action,
        signerName: spec.signerName,
        username: spec.username ?? "",
        reason,
      });
    if (o.denyNodes?.includes(node)) {
      csr.status = {
        ...csr.status,
        conditions: [
          condition("Denied", "KubectlDeny", "This CSR was denied by kubectl certificate deny."),
        ],
      };
      await o.api.update(`${CSR_PATH}/${name}/approval`, csr, o.signal);
      record("denied", "KubectlDeny");
      return;
    }
    if (spec.signerName === "kubernetes.io/kube-apiserver-client-kubelet") {
      // csrapproving's isNodeClientCert: O=[system:nodes], CN system:node:*, no SANs.
      const isNodeClient = subject.orgs.length === 1 && subject.orgs[0] === "system:nodes" &&
        subject.cn.startsWith("system:node:") && !subject.sans;
      if (!isNodeClient) return;
      const self = subject.cn === spec.username;
      const sar = await o.api.create<
        { status?: { allowed?: boolean } } & Record<string, unknown>
      >("/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        apiVersion: "authorization.k8s.io/v1",
        kind: "SubjectAccessReview",
        spec: {
          user: spec.username,
          uid: spec.uid,
          groups: spec.groups,
          extra: spec.extra,
          resourceAttributes: {
            group: "certificates.k8s.io",
            resource: "certificatesigningrequests",
            verb: "create",
            subresource: self ? "selfnodeclient" : "nodeclient",
          },
        },
      }, o.signal);
      if (!sar.status?.allowed) return;
      const message = self
        ? "Auto approving self kubelet client certificate after SubjectAccessReview."
        : "Auto approving kubelet client certificate after SubjectAccessReview.";
      csr.status = { ...csr.status, conditions: [condition("Approved", "AutoApproved", message)] };
      await o.api.update(`${CSR_PATH}/${name}/approval`, csr, o.signal);
      record("approved", "AutoApproved");
      return;
    }
    if (spec.signerName === "kubernetes.io/kubelet-serving") {
      csr.status = {
        ...csr.status,
        conditions: [
          condition(
            "Approved",
            "KubectlApprove",
            "This CSR was approved by kubectl certificate approve.",
          ),
        ],
      };
      await o.api.update(`${CSR_PATH}/${name}/approval`, csr, o.signal);
      record("approved", "KubectlApprove");
    }
  };

  const sign = async (csr: V1CertificateSigningRequest): Promise<void> => {
    const name = csr.metadata?.name ?? "";
    const spec = csr.spec!;
    const ext = spec.signerName === "kubernetes.io/kubelet-serving" ? "server" : "client";
    const seconds = Math.min(o.signingDurationSeconds, spec.expirationSeconds ?? Infinity);
    const now = Date.now();
    const file = join(dir, `${name}.csr`);
    await Deno.writeTextFile(file, atob(spec.request));
    const out = join(dir, `${name}-${++n}.crt`);
    await openssl([
      ...["ca", "-batch", "-config", join(dir, "ca.cnf"), "-notext", "-preserveDN"],
      ...["-cert", o.cp.pki.ca.cert, "-keyfile", o.cp.pki.ca.key, "-extensions", ext],
      ...["-startdate", asn1Time(now), "-enddate", asn1Time(now + seconds * 1000)],
      ...["-in", file, "-out", out],
    ], dir);
    csr.status = { ...csr.status, certificate: btoa(await Deno.readTextFile(out)) };
    await o.api.update(`${CSR_PATH}/${name}/status`, csr, o.signal);
    events.push({
      name,
      action: "signed",
      signerName: spec.signerName,
      username: spec.username ?? "",
    });
  };

  const handle = async (csr: V1CertificateSigningRequest) => {
    const name = csr.metadata?.name ?? "";
    const conds = csr.status?.conditions ?? [];
    try {
      if (conds.length === 0 && !handled.has(`decide/${name}`)) {
        handled.add(`decide/${name}`);
        await decide(csr);
      } else if (
        conds.some((c) => c.type === "Approved") && !csr.status?.certificate &&
        !handled.has(`sign/${name}`)
      ) {
        handled.add(`sign/${name}`);
        await sign(csr);
      }
    } catch (e) {
      if (o.signal.aborted) return;
      console.error(`csr controller: ${name}: ${e instanceof Error ? e.message : e}`);
      handled.delete(`decide/${name}`);
      handled.delete(`sign/${name}`);
    }
  };

  const done = (async () => {
    while (!o.signal.aborted) {
      try {
        const list = await o.api.get<
          { metadata?: { resourceVersion?: string }; items?: V1CertificateSigningRequest[] }
        >(
          CSR_PATH,
          o.signal,
        );
        for (const csr of list.items ?? []) await handle(csr);
        for await (
          const ev of o.api.watch<V1CertificateSigningRequest>(CSR_PATH, {
            resourceVersion: list.metadata?.resourceVersion,
            signal: o.signal,
          })
        ) {
          if (ev.type === "ADDED" || ev.type === "MODIFIED") await handle(ev.object);
        }
      } catch (e) {
        if (o.signal.aborted) return;
        console.error(`csr controller: ${e instanceof Error ? e.message : e}`);
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  })();
  return { events, done };
}
