import assert from "node:assert/strict";
import { join } from "node:path";
import { parsePrivateKeyPem } from "./pkcs10.ts";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import { loadKubeconfig } from "../client/kubeconfig.ts";
import {
  digestedName,
  isClientConfigStillValid,
  loadClientConfig,
  writeKubeconfigFromBootstrapping,
} from "./bootstrap.ts";

// A fixed key, and the name Go's digestedName gives for it (computed with Go's
// crypto/sha512.New512_256 and base64.RawURLEncoding over the same parts, as bootstrap.go does).
const KEY = `-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIHPYNkLpzs77GnghtUa2hLEtE8bVx7M6Ggn/AW7ITxoJoAoGCCqGSM49
AwEHoUQDQgAEvISuDNWAOXei11b721zejKQMYyf4eAoloJqFbO3POhniSkzhZLSv
vXfoxvsZC4Hk142OZG5GToLJUdFxw4U9/A==
-----END EC PRIVATE KEY-----
`;

Deno.test("digestedName names the CSR as upstream's bootstrap does", () => {
  const name = digestedName(
    parsePrivateKeyPem(KEY),
    { commonName: "system:node:node-a", organizations: ["system:nodes"] },
    ["digital signature", "client auth"],
  );
  assert.equal(name, "node-csr-nfWo8SUvjiDcsmXlmlpWygnCeReuqm4ZL7le7TBRWaM");
});

const CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

Deno.test("loadClientConfig rewrites --kubeconfig to point at kubelet-client-current.pem (0600)", async () => {
  const dir = await Deno.makeTempDir();
  const lines: string[] = [];
  const logger = createLogger({ write: (l) => lines.push(l) });
  try {
    const bootstrap = join(dir, "bootstrap-kubelet.conf");
    await Deno.writeTextFile(join(dir, "ca.crt"), CA);
    await Deno.writeTextFile(
      bootstrap,
      [
        "apiVersion: v1",
        "kind: Config",
        "clusters: [{name: c, cluster: {server: 'https://10.0.0.1:6443', certificate-authority: ca.crt}}]",
        "users: [{name: u, user: {token: abcdef.0123456789abcdef}}]",
        "contexts: [{name: x, context: {cluster: c, user: u}}]",
        "current-context: x",
      ].join("\n"),
    );
    const kubeconfig = join(dir, "etc", "kubelet.conf");
    const pki = join(dir, "pki");
    assert.equal(await isClientConfigStillValid(kubeconfig, Date.now(), logger), false);
    const { certConfig, userConfig } = await loadClientConfig({
      kubeconfig,
      bootstrapKubeconfig: bootstrap,
      certDirectory: pki,
      clock: new FakeClock(),
      logger,
    });
    assert.equal(certConfig.token, "abcdef.0123456789abcdef");
    assert.equal(userConfig.token, undefined, "the kubelet's own config carries no token");
    assert.equal(userConfig.certFile, join(pki, "kubelet-client-current.pem"));
    assert.equal((await Deno.stat(kubeconfig)).mode! & 0o777, 0o600);
    const text = await Deno.readTextFile(kubeconfig);
    assert.match(text, /current-context: default-context/);
    assert.match(text, new RegExp(`certificate-authority: ${join(dir, "ca.crt")}`));
    assert.match(
      text,
      new RegExp(`client-certificate: ${join(pki, "kubelet-client-current.pem")}`),
    );
    assert.match(text, new RegExp(`client-key: ${join(pki, "kubelet-client-current.pem")}`));
    // Until the certificate is there, the written kubeconfig is not valid: a restart bootstraps again.
    assert.equal(await isClientConfigStillValid(kubeconfig, Date.now(), logger), false);
    assert.ok(
      lines.some((l) =>
        l.startsWith("E") && l.includes("unable to read existing bootstrap client config")
      ),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("writeKubeconfigFromBootstrapping embeds the CA when the bootstrap kubeconfig did", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const out = join(dir, "kubelet.conf");
    await writeKubeconfigFromBootstrapping(
      { server: "https://10.0.0.1:6443", caPem: CA, insecureSkipTLSVerify: false, source: "b" },
      out,
      "/var/lib/kubelet/pki/kubelet-client-current.pem",
    );
    const text = await Deno.readTextFile(out);
    assert.match(text, new RegExp(`certificate-authority-data: ${btoa(CA)}`));
    await assert.rejects(loadKubeconfig(out), /kubelet-client-current\.pem/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
