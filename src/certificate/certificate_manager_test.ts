import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1CertificateSigningRequest } from "@kubernetes/client-node";
import { type TestCA, testCA } from "../testing/cert_fixtures.ts";
import { generateECKey, makeCSR, privateKeyPem } from "./pkcs10.ts";
import { KUBE_APISERVER_CLIENT_KUBELET_SIGNER } from "./csr.ts";
import {
  CertificateManager,
  type CertificateManagerOptions,
  rotationDeadline,
} from "./certificate_manager.ts";
import { CertificateStore } from "./certificate_store.ts";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import { KubeClient } from "../client/kube_client.ts";
import { kubeletClientUsages, nodeSubject } from "./kubelet.ts";

const DAY = 86_400_000;

Deno.test("rotationDeadline falls at 70-90 % of the lifetime", () => {
  const leaf = { notBefore: 1_000_000, notAfter: 1_000_000 + 100 * DAY };
  assert.equal(rotationDeadline(leaf, 0), 1_000_000 + 70 * DAY);
  assert.equal(rotationDeadline(leaf, 0.5), 1_000_000 + 80 * DAY);
  for (let i = 0; i < 100; i++) {
    const d = rotationDeadline(leaf, Math.random());
    assert.ok(d >= leaf.notBefore + 70 * DAY && d < leaf.notBefore + 90 * DAY);
  }
});

/** A CSR API on plain HTTP that signs or denies each request as `policy` says. */
function fakeCSRApi(ca: TestCA, policy: () => "approve" | "deny" | "pending") {
  const csrs = new Map<string, V1CertificateSigningRequest>();
  let n = 0;
  const server = Deno.serve({ port: 0, hostname: "127.0.0.1", onListen() {} }, async (req) => {
    const url = new URL(req.url);
    const base = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    if (req.method === "POST" && url.pathname === base) {
      const csr = (await req.json()) as V1CertificateSigningRequest;
      const name = `csr-${++n}`;
      csr.metadata = { name, uid: `uid-${n}`, resourceVersion: String(n) };
      const decision = policy();
      if (decision === "approve") {
        const cert = await ca.sign(atob(csr.spec!.request), { serial: 100 + n });
        csr.status = {
          conditions: [{ type: "Approved", status: "True", reason: "AutoApproved", message: "" }],
          certificate: btoa(cert),
        };
      } else if (decision === "deny") {
        csr.status = {
          conditions: [{ type: "Denied", status: "True", reason: "NotMine", message: "go away" }],
        };
      }
      csrs.set(name, csr);
      return Response.json(csr, { status: 201 });
    }
    if (req.method === "GET" && url.pathname === base && !url.searchParams.has("watch")) {
      const name = url.searchParams.get("fieldSelector")?.replace("metadata.name=", "") ?? "";
      const item = csrs.get(name);
      return Response.json({ metadata: { resourceVersion: String(n) }, items: item ? [item] : [] });
    }
    // A watch that never says anything more (pending requests stay pending).
    return new Response(new ReadableStream({ start() {} }));
  });
  const addr = server.addr as Deno.NetAddr;
  return { server, csrs, url: `http://127.0.0.1:${addr.port}` };
}

async function until(what: string, cond: () => boolean): Promise<void> {
  for (let i = 0; i < 1000; i++) {
    if (cond()) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error(`never happened: ${what}`);
}

async function world(policy: () => "approve" | "deny" | "pending") {
  const ca = await testCA();
  const api = fakeCSRApi(ca, policy);
  const clock = new FakeClock(Date.now());
  const lines: string[] = [];
  const logger = createLogger({ verbosity: 2, write: (l) => lines.push(l) });
  const client = new KubeClient({
    config: { server: api.url, insecureSkipTLSVerify: false, source: "test" },
    clock,
    qps: -1,
    userAgent: "test",
  });
  const dir = join(ca.dir, "pki");
  const store = await CertificateStore.open({
    pairNamePrefix: "kubelet-client",
    certDirectory: dir,
    keyDirectory: dir,
    logger,
  });
  const opts: CertificateManagerOptions = {
    signerName: KUBE_APISERVER_CLIENT_KUBELET_SIGNER,
    getTemplate: () => nodeSubject("node-a"),
    getUsages: kubeletClientUsages,
    store,
    clientFor: () => client,
    clock,
    logger,
    random: () => 0.5,
  };
  return {
    ca,
    api,
    clock,
    lines,
    store,
    opts,
    async close() {
      client.close();
      await api.server.shutdown();
      await ca.remove();
    },
  };
}

Deno.test("CertificateManager requests at once without a certificate, then rotates at the jittered deadline", async () => {
  const w = await world(() => "approve");
  const stop = new AbortController();
  try {
    const m = await CertificateManager.create(w.opts);
    assert.equal(m.current(), undefined);
    const seen: bigint[] = [];
    m.onCertificate((c) => seen.push(c.leaf.serialNumber));
    const running = m.run(stop.signal);
    await until("the first certificate", () => seen.length === 1);
    const first = m.current()!;
    assert.equal(first.leaf.commonName, "system:node:node-a");
    const sent = [...w.api.csrs.values()][0]!;
    assert.equal(sent.spec?.signerName, "kubernetes.io/kube-apiserver-client-kubelet");
    assert.deepEqual(sent.spec?.usages, ["digital signature", "client auth"]);
    assert.equal(sent.spec?.expirationSeconds, undefined, "not asked for unless configured");
    assert.ok(m.serverHealthy());

    // random 0.5: the deadline is notBefore + 80 % of the one-day lifetime.
    const deadline = first.leaf.notBefore + 0.8 * DAY;
    // wait.Until's one-second period, then the wait for the deadline.
    await until("the loop's period", () => w.clock.waiters > 0);
    w.clock.step(1_000);
    await until(
      "the wait for the deadline",
      () => w.lines.some((l) => l.includes('"Waiting for next certificate rotation"')),
    );
    w.clock.step(deadline - w.clock.now() - 1_000);
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(seen.length, 1, "not rotated before the deadline");
    w.clock.step(1_000);
    await until("the rotation", () => seen.length === 2);
    assert.notEqual(m.current()!.leaf.serialNumber, first.leaf.serialNumber);
    assert.equal((await w.store.current()).leaf.serialNumber, seen[1]);
    stop.abort();
    await running;
  } finally {
    stop.abort();
    await w.close();
  }
});

Deno.test("CertificateManager keeps going after a denied request: an error line per try, 2 s then 4 s apart", async () => {
  const w = await world(() => "deny");
  const stop = new AbortController();
  try {
    const m = await CertificateManager.create(w.opts);
    const running = m.run(stop.signal);
    const denied = () =>
      w.lines.filter((l) =>
        l.startsWith("E") && l.includes('"Certificate request was not signed"') &&
        l.includes("certificate signing request is denied, reason: NotMine, message: go away")
      ).length;
    await until("the first denial", () => denied() === 1);
    await until("the backoff sleep", () => w.clock.waiters > 0);
    w.clock.step(1_900);
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(denied(), 1, "the first retry waits 2 s (10 % jitter)");
    w.clock.step(300);
    await until("the second denial", () => denied() === 2);
    await until("the backoff sleep", () => w.clock.waiters > 0);
    w.clock.step(4_400);
    await until("the third denial", () => denied() === 3);
    assert.equal(m.current(), undefined);
    assert.equal(w.api.csrs.size, 3, "a new request each time");
    stop.abort();
    await running;
  } finally {
    stop.abort();
    await w.close();
  }
});

Deno.test("CertificateManager rotates a bootstrap pair at once and an expired one is not current", async () => {
  const w = await world(() => "pending");
  try {
    const key = generateECKey();
    const certPem = await w.ca.sign(makeCSR(key, nodeSubject("node-a")), { days: 1 });
    const m = await CertificateManager.create({
      ...w.opts,
      bootstrap: { certPem, keyPem: privateKeyPem(key) },
    });
    assert.ok(m.current(), "the bootstrap pair is used until a new one comes");
    assert.equal(m.nextRotationDeadline(), w.clock.now(), "a bootstrap pair is rotated at once");
    const later = m.nextRotationDeadline();
    assert.ok(later > w.clock.now() + 0.7 * DAY - 60_000, "then the normal deadline");
    w.clock.step(2 * DAY);
    assert.equal(m.current(), undefined);
  } finally {
    await w.close();
  }
});

Deno.test("CertificateManager rotates at once when the certificate lacks what the template asks for", async () => {
  const w = await world(() => "pending");
  try {
    const key = generateECKey();
    const certPem = await w.ca.sign(makeCSR(key, nodeSubject("node-a")), { days: 1 });
    await w.store.update(certPem, privateKeyPem(key));
    let ips: string[] = [];
    const m = await CertificateManager.create({
      ...w.opts,
      getTemplate: () => ({ ...nodeSubject("node-a"), ipAddresses: ips }),
    });
    assert.ok(m.nextRotationDeadline() > w.clock.now());
    ips = ["10.0.0.9"];
    assert.equal(m.nextRotationDeadline(), w.clock.now());
    assert.ok(
      w.lines.some((l) => l.includes("Current certificate is missing requested IP addresses")),
    );
  } finally {
    await w.close();
  }
});
