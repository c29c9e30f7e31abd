import assert from "node:assert/strict";
import { join } from "node:path";
import { CIS_STRONG_CIPHERS, cisFileChecks, cisFiles, cisKubeletChecks } from "./cis_benchmark.ts";
import { loadKubeletConfiguration } from "../app/kubelet_config.ts";
import type { KubeletConfiguration } from "../apis/config_types.ts";
import { newKubeletFlags } from "../apis/flags.ts";

const HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

/** The effective configuration of a file with `body`, as the agent loads it. */
async function load(body: string): Promise<KubeletConfiguration> {
  const dir = await Deno.makeTempDir({ prefix: "cis-" });
  try {
    const file = join(dir, "kubelet.yaml");
    await Deno.writeTextFile(file, HEADER + body);
    return (await loadKubeletConfiguration({
      configFile: file,
      dropinDir: "",
      flags: [],
      cgroupV1: false,
    })).config;
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** A configuration that answers every 4.2 item. */
export const HARDENED = [
  "authentication:",
  "  anonymous: {enabled: false}",
  "  webhook: {enabled: true}",
  "  x509: {clientCAFile: /etc/kubernetes/pki/ca.crt}",
  "authorization: {mode: Webhook}",
  "readOnlyPort: 0",
  "streamingConnectionIdleTimeout: 4h0m0s",
  "makeIPTablesUtilChains: true",
  "eventRecordQPS: 50",
  "serverTLSBootstrap: true",
  "rotateCertificates: true",
  `tlsCipherSuites: [${CIS_STRONG_CIPHERS.join(", ")}]`,
  "podPidsLimit: 4096",
  "seccompDefault: true",
  "",
].join("\n");

const failing = (c: KubeletConfiguration, flags = newKubeletFlags()) =>
  cisKubeletChecks(c, flags).filter((r) => !r.pass).map((r) => r.id);

Deno.test("CIS 4.2: a hardened configuration passes all 14 items of v1.12", async () => {
  const results = cisKubeletChecks(await load(HARDENED), newKubeletFlags());
  assert.equal(results.length, 14);
  assert.deepEqual(results.map((r) => r.id), Array.from({ length: 14 }, (_, i) => `4.2.${i + 1}`));
  assert.deepEqual(results.filter((r) => !r.pass), []);
});

Deno.test("CIS 4.2: upstream's file defaults fail exactly the items that need site values", async () => {
  const results = cisKubeletChecks(await load(""), newKubeletFlags());
  assert.deepEqual(results.filter((r) => !r.pass).map((r) => r.id), [
    "4.2.3",
    "4.2.9",
    "4.2.10",
    "4.2.12",
    "4.2.13",
    "4.2.14",
  ]);
  for (const r of results.filter((r) => !r.pass)) assert.ok(r.fix.length > 0, r.id);
});

Deno.test("CIS 4.2: each item fails alone when its setting is weakened", async () => {
  const hardened = await load(HARDENED);
  const cases: [string, (c: KubeletConfiguration) => void][] = [
    ["4.2.1", (c) => (c.authentication.anonymous.enabled = true)],
    ["4.2.2", (c) => (c.authorization.mode = "AlwaysAllow")],
    ["4.2.3", (c) => (c.authentication.x509.clientCAFile = "")],
    ["4.2.4", (c) => (c.readOnlyPort = 10255)],
    ["4.2.5", (c) => (c.streamingConnectionIdleTimeout = 0)],
    ["4.2.6", (c) => (c.makeIPTablesUtilChains = false)],
    ["4.2.8", (c) => (c.eventRecordQPS = -1)],
    ["4.2.9", (c) => (c.serverTLSBootstrap = false)],
    ["4.2.10", (c) => (c.rotateCertificates = false)],
    ["4.2.11", (c) => (c.featureGates = { RotateKubeletServerCertificate: false })],
    [
      "4.2.12",
      (c) => (c.tlsCipherSuites = [CIS_STRONG_CIPHERS[0]!, "TLS_RSA_WITH_AES_128_CBC_SHA"]),
    ],
    ["4.2.13", (c) => (c.podPidsLimit = -1)],
    ["4.2.14", (c) => (c.seccompDefault = false)],
  ];
  for (const [id, weaken] of cases) {
    const config = structuredClone(hardened);
    weaken(config);
    assert.deepEqual(failing(config), [id], id);
  }
  const flags = { ...newKubeletFlags(), hostnameOverride: "node-a" };
  assert.deepEqual(failing(hardened, flags), ["4.2.7"]);
  // Both certificate files set instead of serverTLSBootstrap also answers 4.2.9.
  const files = structuredClone(hardened);
  Object.assign(files, {
    serverTLSBootstrap: false,
    tlsCertFile: "/a.crt",
    tlsPrivateKeyFile: "/a.key",
  });
  assert.deepEqual(failing(files), []);
  // The deprecated --seccomp-default flag, ORed with the field as upstream does, answers 4.2.14.
  const noField = structuredClone(hardened);
  noField.seccompDefault = false;
  assert.deepEqual(failing(noField, { ...newKubeletFlags(), seccompDefault: true }), []);
});

Deno.test("CIS 4.2.12: v1.12 no longer counts the RSA key exchange GCM suites as strong", async () => {
  const config = await load(HARDENED);
  assert.deepEqual(CIS_STRONG_CIPHERS, [
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
  ]);
  for (const rsa of ["TLS_RSA_WITH_AES_256_GCM_SHA384", "TLS_RSA_WITH_AES_128_GCM_SHA256"]) {
    config.tlsCipherSuites = [...CIS_STRONG_CIPHERS, rsa];
    const item = cisKubeletChecks(config, newKubeletFlags()).find((r) => r.id === "4.2.12")!;
    assert.equal(item.pass, false, rsa);
    assert.equal(item.detail, `weak: ${rsa}`);
  }
});

Deno.test("CIS 4.1: files named by the configuration must be 0600 (the CA 0644) or stricter and root's", async () => {
  const dir = await Deno.makeTempDir({ prefix: "cis-files-" });
  try {
    const kubeconfig = join(dir, "kubelet.conf");
    const config = join(dir, "config.yaml");
    const ca = join(dir, "ca.crt");
    await Deno.writeTextFile(kubeconfig, "x", { mode: 0o600 });
    await Deno.writeTextFile(config, "x");
    await Deno.chmod(config, 0o644);
    await Deno.writeTextFile(ca, "x");
    await Deno.chmod(ca, 0o644);
    const flags = { ...newKubeletFlags(), kubeConfig: kubeconfig, kubeletConfigFile: config };
    const withCa = await load(HARDENED);
    withCa.authentication.x509.clientCAFile = ca;
    const results = await cisFileChecks(cisFiles(withCa, flags));
    const byId = new Map(results.map((r) => [r.id, r]));
    assert.equal(byId.get("4.1.5")?.pass, true);
    assert.equal(byId.get("4.1.9")?.pass, false);
    assert.match(byId.get("4.1.9")!.detail, /config\.yaml: 0644$/);
    assert.equal(byId.get("4.1.9")!.fix, `chmod 600 ${config}`);
    const root = Deno.uid() === 0;
    assert.equal(byId.get("4.1.6")?.pass, root);
    // The CA certificate may be world-readable (v1.11 and later), not group-writable.
    assert.equal(byId.get("4.1.7")?.pass, true);
    assert.equal(
      byId.get("4.1.7")?.title,
      "clientCAFile file permissions are 644 or more restrictive",
    );
    await Deno.chmod(ca, 0o664);
    const looser = await cisFileChecks(cisFiles(withCa, flags));
    const item = looser.find((r) => r.id === "4.1.7")!;
    assert.equal(item.pass, false);
    assert.equal(item.fix, `chmod 644 ${ca}`);
    // The client CA file of the hardened config does not exist here: skipped, not failed.
    const missing = await cisFileChecks(cisFiles(await load(HARDENED), flags));
    assert.equal(missing.some((r) => r.id === "4.1.7"), false);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("CIS 4.2: deploy/'s sample configuration passes all 14 items", async () => {
  const file = new URL("../../deploy/kubelet.yaml", import.meta.url).pathname;
  const { config } = await loadKubeletConfiguration({
    configFile: file,
    dropinDir: "",
    flags: [],
    cgroupV1: false,
  });
  const results = cisKubeletChecks(config, newKubeletFlags());
  assert.equal(results.length, 14);
  assert.deepEqual(results.filter((r) => !r.pass), []);
});
