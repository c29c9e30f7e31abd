/**
 * TLS bootstrap and certificate rotation end to end: the agent starts with only a bootstrap
 * token kubeconfig against a real kube-apiserver (bootstrap token auth, Node,RBAC, kubeadm's RBAC
 * for the token) while the harness approves and signs CSRs as kube-controller-manager would
 * (tests/csr_controller.ts, 90 s certificates). It gets a client certificate, registers its Node
 * under that identity, renews the certificate before it expires without a restart or a missed
 * heartbeat, serves a requested serving certificate (serverTLSBootstrap) and rotates that too;
 * an agent whose requests are denied says so on every try and keeps running.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1CertificateSigningRequest, V1Lease, V1Node } from "@kubernetes/client-node";
import type { RunningAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import {
  type BootstrapToken,
  type CsrController,
  setupBootstrapToken,
  startCsrController,
} from "./csr_controller.ts";
import { adminClient, e2eSuite, poll, startNodeAgent } from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("TLS bootstrap e2e tests", [
  "containerd",
  "ctr",
  "runc",
  "openssl",
  "go",
]);
const NODE = "kts-tlsboot";
const DENIED = "kts-tlsboot-denied";
/** Lifetime of every certificate the harness signs: rotation falls 63-81 s after issue. */
const SIGNING_SECONDS = 90;

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly containerd: ContainerdHandle;
  readonly agent: RunningAgent;
  readonly agentDir: string;
  readonly kubeconfig: string;
  readonly port: number;
  readonly token: BootstrapToken;
  readonly csrs: CsrController;
  readonly stop: AbortController;
}

const suite = e2eSuite<World>({
  name: "tls bootstrap",
  gate,
  userAgent: "tls-bootstrap-e2e-test",
  stderrLines: 60,
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "tlsboot-e2e-" });
    const cp = await startControlPlane({
      dir: join(dir, "cp"),
      apiserverArgs: ["--enable-bootstrap-token-auth"],
    });
    const containerd = await startContainerd({
      dir: join(dir, "containerd"),
      socket: join(dir, "containerd", "containerd.sock"),
    });
    const token = await setupBootstrapToken(cp, join(dir, "bootstrap-kubelet.conf"));
    const stop = new AbortController();
    const api = await adminClient(cp, "tls-bootstrap-e2e-controller");
    const csrs = await startCsrController({
      cp,
      api,
      dir: join(dir, "signer"),
      signingDurationSeconds: SIGNING_SECONDS,
      denyNodes: [DENIED],
      signal: stop.signal,
    });
    void csrs.done.finally(() => api.close());
    const agentDir = join(dir, NODE);
    await Deno.mkdir(agentDir);
    const kubeconfig = join(agentDir, "kubelet.conf");
    const { agent, port } = await startNodeAgent({
      cp,
      dir: agentDir,
      nodeName: NODE,
      endpoint: containerd.endpoint,
      kubeconfig,
      configLines: ["rotateCertificates: true", "serverTLSBootstrap: true"],
      extraArgs: ["--bootstrap-kubeconfig", token.kubeconfig, "-v=2"],
    });
    return { dir, cp, containerd, agent, agentDir, kubeconfig, port, token, csrs, stop };
  },
});
const e2e = suite.test;

function ready(node: V1Node): string | undefined {
  return node.status?.conditions?.find((c) => c.type === "Ready")?.status;
}

async function openssl(args: string[], stdin?: string): Promise<string> {
  const child = new Deno.Command("openssl", {
    args,
    stdin: stdin === undefined ? "null" : "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  if (stdin !== undefined) {
    const w = child.stdin.getWriter();
    await w.write(new TextEncoder().encode(stdin)).catch(() => {});
    await w.close().catch(() => {});
  }
  const o = await child.output();
  return new TextDecoder().decode(o.stdout);
}

/** Serial, subject (RFC 2253), issuer, SANs and validity of the first certificate in `pem`. */
async function describeCert(pem: string) {
  const text = await openssl([
    ...["x509", "-noout", "-serial", "-subject", "-issuer", "-startdate", "-enddate"],
    ...["-ext", "subjectAltName,extendedKeyUsage", "-nameopt", "RFC2253"],
  ], pem);
  const field = (k: string) => new RegExp(`^${k}=(.*)$`, "m").exec(text)?.[1] ?? "";
  return {
    serial: field("serial"),
    subject: field("subject"),
    issuer: field("issuer"),
    notBefore: Date.parse(field("notBefore")),
    notAfter: Date.parse(field("notAfter")),
    text,
  };
}

/** The certificate a TLS client sees on the agent's kubelet API port. */
async function servedCert(port: number) {
  const out = await openssl(["s_client", "-connect", `127.0.0.1:${port}`, "-showcerts"], "");
  const pem = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/.exec(out)?.[0];
  if (!pem) throw new Error(`no certificate served on ${port}:\n${out}`);
  return await describeCert(pem);
}

const csrPath = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

e2e(
  "with only a bootstrap token the agent gets a signed client certificate and registers its Node",
  async (w, api) => {
    const node = await poll("the Node Ready", async () => {
      const n = await api.get<V1Node>(`/api/v1/nodes/${NODE}`);
      return ready(n) === "True" ? n : undefined;
    }, 90_000);
    assert.equal(node.metadata?.labels?.["kubernetes.io/hostname"], NODE);

    // The first request came from the bootstrap token and was auto-approved as a node client.
    const list = await api.get<{ items: V1CertificateSigningRequest[] }>(csrPath);
    const first = list.items.find((c) =>
      c.spec.signerName === "kubernetes.io/kube-apiserver-client-kubelet" &&
      c.spec.username === w.token.user
    );
    assert.ok(first, JSON.stringify(list.items.map((c) => c.spec.username)));
    assert.deepEqual(first.spec.groups?.sort(), [
      "system:authenticated",
      "system:bootstrappers",
      "system:bootstrappers:kubeadm:default-node-token",
    ]);
    assert.deepEqual(first.spec.usages, ["digital signature", "client auth"]);
    assert.equal(first.spec.expirationSeconds, undefined);
    assert.equal(first.status?.conditions?.[0]?.reason, "AutoApproved");
    assert.match(first.metadata?.name ?? "", /^csr-/);

    // The cert store: kubelet-client-current.pem -> kubelet-client-<time>.pem (0600), cert+key.
    const pki = join(w.agentDir, "pki");
    const current = join(pki, "kubelet-client-current.pem");
    assert.ok((await Deno.lstat(current)).isSymlink);
    const target = await Deno.readLink(current);
    assert.match(target, /\/kubelet-client-\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d\.pem$/);
    assert.equal((await Deno.stat(target)).mode! & 0o777, 0o600);
    const pem = await Deno.readTextFile(current);
    assert.match(pem, /-----BEGIN CERTIFICATE-----[\s\S]+-----BEGIN EC PRIVATE KEY-----/);
    const cert = await describeCert(pem);
    assert.equal(cert.subject, `CN=system:node:${NODE},O=system:nodes`);
    assert.equal(cert.issuer, "CN=kubernetes");
    assert.match(cert.text, /TLS Web Client Authentication/);
    await assert.rejects(Deno.stat(join(pki, "kubelet-client.key.tmp")), Deno.errors.NotFound);

    // The kubeconfig the agent wrote points at the symlink for both certificate and key.
    assert.equal((await Deno.stat(w.kubeconfig)).mode! & 0o777, 0o600);
    const kc = await Deno.readTextFile(w.kubeconfig);
    assert.match(kc, new RegExp(`client-certificate: ${current}`));
    assert.match(kc, new RegExp(`client-key: ${current}`));
    assert.match(kc, new RegExp(`server: ${w.cp.server}`));
    assert.doesNotMatch(kc, /token/);

    // The lease is held by the node identity (NodeRestriction lets only system:node:<name> write it).
    const lease = await poll(
      "the lease",
      () =>
        api.get<V1Lease>(`/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${NODE}`),
      30_000,
    );
    assert.equal(lease.spec?.holderIdentity, NODE);
  },
);

e2e(
  "the client certificate is renewed before it expires, with no restart and no failed heartbeat",
  async (w, api) => {
    const current = join(w.agentDir, "pki", "kubelet-client-current.pem");
    const before = await describeCert(await Deno.readTextFile(current));
    assert.ok(before.notAfter - before.notBefore <= SIGNING_SECONDS * 1000);
    const pid = w.agent.process.pid;
    const stderrAt = w.agent.stderr().length;
    const leasePath = `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${NODE}`;
    const renewals: number[] = [];
    let notReady = 0;
    const after = await poll(
      "a new client certificate",
      async () => {
        const l = await api.get<V1Lease>(leasePath);
        const t = Date.parse(String(l.spec?.renewTime));
        if (renewals.at(-1) !== t) renewals.push(t);
        if (ready(await api.get<V1Node>(`/api/v1/nodes/${NODE}`)) !== "True") notReady++;
        const c = await describeCert(await Deno.readTextFile(current));
        return c.serial !== before.serial ? c : undefined;
      },
      (SIGNING_SECONDS + 30) * 1000,
      1_000,
    );
    assert.ok(Date.now() < before.notAfter, "renewed before the old certificate expired");
    assert.ok(after.notBefore >= before.notBefore);
    assert.equal(after.subject, `CN=system:node:${NODE},O=system:nodes`);

    // Renewed by the node itself, approved as a self node client.
    const csrs = await api.get<{ items: V1CertificateSigningRequest[] }>(csrPath);
    const renewal = csrs.items.filter((c) =>
      c.spec.signerName === "kubernetes.io/kube-apiserver-client-kubelet" &&
      c.spec.username === `system:node:${NODE}`
    );
    assert.ok(renewal.length >= 1);
    assert.match(renewal[0]!.status?.conditions?.[0]?.message ?? "", /self kubelet client/);

    // The same process, and heartbeats kept coming through the switch.
    assert.equal(w.agent.process.pid, pid);
    assert.equal(
      await Promise.race([w.agent.process.status.then(() => "exited"), Promise.resolve("running")]),
      "running",
    );
    await w.agent.waitFor(
      "Certificate rotation detected, shutting down client connections to start using new credentials",
      15_000,
    );
    // Heartbeats after the switch, over connections with the new certificate.
    const switched = Date.now();
    await poll("a lease renewal after the switch", async () => {
      const l = await api.get<V1Lease>(leasePath);
      return Date.parse(String(l.spec?.renewTime)) > switched - 500 ? l : undefined;
    }, 15_000);
    assert.equal(notReady, 0, "the node stayed Ready");
    const gaps = renewals.slice(1).map((t, i) => t - renewals[i]!);
    assert.ok(gaps.every((g) => g <= 12_500), `lease renewal gaps ${gaps}`);
    const errors = w.agent.stderr().slice(stderrAt).split("\n").filter((l) =>
      /Failed to update lease|Unable to update node status|Unable to register node/.test(l)
    );
    assert.deepEqual(errors, []);
  },
);

e2e(
  "with serverTLSBootstrap the kubelet API serves the certificate the CSR got, and a rotated one after",
  async (w, api) => {
    const first = await poll(
      "a served node certificate",
      async () => {
        const c = await servedCert(w.port).catch(() => undefined);
        return c?.issuer === "CN=kubernetes" ? c : undefined;
      },
      60_000,
      500,
    );
    assert.equal(first.subject, `CN=system:node:${NODE},O=system:nodes`);
    assert.match(first.text, /TLS Web Server Authentication/);
    assert.match(first.text, /IP Address:/);
    const csrs = await api.get<{ items: V1CertificateSigningRequest[] }>(csrPath);
    const serving = csrs.items.filter((c) => c.spec.signerName === "kubernetes.io/kubelet-serving");
    assert.ok(serving.length >= 1);
    assert.equal(serving[0]!.spec.username, `system:node:${NODE}`);
    assert.deepEqual(serving[0]!.spec.usages, ["digital signature", "server auth"]);
    const link = join(w.agentDir, "pki", "kubelet-server-current.pem");
    assert.ok((await Deno.lstat(link)).isSymlink);

    const next = await poll(
      "a rotated serving certificate",
      async () => {
        const c = await servedCert(w.port).catch(() => undefined);
        return c && c.serial !== first.serial ? c : undefined;
      },
      (SIGNING_SECONDS + 30) * 1000,
      1_000,
    );
    assert.ok(Date.now() < first.notAfter + 1_000, "rotated before the old one expired");
    assert.equal(next.issuer, "CN=kubernetes");
    const onDisk = await describeCert(await Deno.readTextFile(link));
    assert.equal(onDisk.serial, next.serial);
  },
);

e2e(
  "a denied request is said on every try and the agent keeps running",
  async (w) => {
    await Deno.mkdir(join(w.dir, DENIED));
    const { agent } = await startNodeAgent({
      cp: w.cp,
      dir: join(w.dir, DENIED),
      nodeName: DENIED,
      endpoint: w.containerd.endpoint,
      kubeconfig: join(w.dir, DENIED, "kubelet.conf"),
      configLines: ["rotateCertificates: true"],
      extraArgs: ["--bootstrap-kubeconfig", w.token.kubeconfig],
      // With rotation the request goes on in the background: start-up finishes regardless.
      waitFor: '"Started kubelet"',
    });
    try {
      const denied =
        /^E.*"Certificate request was not signed" err="certificate signing request is denied, reason: KubectlDeny, message: This CSR was denied by kubectl certificate deny\."/gm;
      await poll(
        "two denial lines",
        () => {
          const n = agent.stderr().match(denied)?.length ?? 0;
          return Promise.resolve(n >= 2 ? n : undefined);
        },
        60_000,
        200,
      );
      const status = await Promise.race([
        agent.process.status.then(() => "exited"),
        new Promise((r) => setTimeout(() => r("running"), 1_000)),
      ]);
      assert.equal(status, "running", agent.stderr().split("\n").slice(-20).join("\n"));
    } finally {
      agent.process.kill("SIGTERM");
      const st = await agent.process.status;
      assert.equal(st.code, 0, agent.stderr().split("\n").slice(-20).join("\n"));
    }
  },
);

e2e(
  "without rotateCertificates the bootstrap finishes before start-up goes on, with a digest-named CSR",
  async (w, api) => {
    const name = "kts-tlsboot-once";
    const dir = join(w.dir, name);
    await Deno.mkdir(dir);
    const kubeconfig = join(dir, "kubelet.conf");
    const { agent } = await startNodeAgent({
      cp: w.cp,
      dir,
      nodeName: name,
      endpoint: w.containerd.endpoint,
      kubeconfig,
      extraArgs: ["--bootstrap-kubeconfig", w.token.kubeconfig],
      // All of start-up: a SIGTERM while it runs ends the agent with code 1.
      waitFor: '"Started kubelet"',
    });
    try {
      await poll("the Node", () => api.get<V1Node>(`/api/v1/nodes/${name}`), 30_000);
      const csrs = await api.get<{ items: V1CertificateSigningRequest[] }>(csrPath);
      const mine = csrs.items.filter((c) => c.spec.username === w.token.user).map((c) =>
        c.metadata?.name ?? ""
      );
      assert.ok(mine.some((n) => /^node-csr-[A-Za-z0-9_-]{43}$/.test(n)), mine.join(", "));
      const pki = join(dir, "pki");
      await assert.rejects(Deno.stat(join(pki, "kubelet-client.key.tmp")), Deno.errors.NotFound);
      const cert = await describeCert(
        await Deno.readTextFile(join(pki, "kubelet-client-current.pem")),
      );
      assert.equal(cert.subject, `CN=system:node:${name},O=system:nodes`);
      assert.match(
        await Deno.readTextFile(kubeconfig),
        /client-key: .*kubelet-client-current\.pem/,
      );
      assert.doesNotMatch(agent.stderr(), /Certificate rotation is enabled/);
    } finally {
      agent.process.kill("SIGTERM");
      assert.equal(
        (await agent.process.status).code,
        0,
        agent.stderr().split("\n").slice(-15).join("\n"),
      );
    }
  },
);

suite.teardown("(teardown)", async (w) => {
  w.stop.abort();
  await w.csrs.done;
  await w.containerd.stop();
});
