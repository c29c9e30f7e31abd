import assert from "node:assert/strict";
import { join } from "node:path";
import { ConfigError } from "../apis/config_schema.ts";
import { loadKubeconfig } from "./kubeconfig.ts";

async function withKubeconfig(cluster: string, fn: (file: string) => Promise<void>) {
  const dir = await Deno.makeTempDir({ prefix: "kubeconfig-" });
  const file = join(dir, "kubelet.conf");
  await Deno.writeTextFile(
    file,
    [
      "apiVersion: v1",
      "kind: Config",
      `clusters: [{name: c, cluster: {server: 'https://10.0.0.1:6443', ${cluster}}}]`,
      "users: [{name: u, user: {token: abc}}]",
      "contexts: [{name: x, context: {cluster: c, user: u}}]",
      "current-context: x",
    ].join("\n"),
  );
  try {
    await fn(file);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("loadKubeconfig takes insecure-skip-tls-verify as client-go does", async () => {
  await withKubeconfig("insecure-skip-tls-verify: true", async (file) => {
    const c = await loadKubeconfig(file);
    assert.equal(c.insecureSkipTLSVerify, true);
    assert.equal(c.caPem, undefined);
    assert.equal(c.server, "https://10.0.0.1:6443");
  });
});

Deno.test("loadKubeconfig refuses insecure-skip-tls-verify with a certificate authority, as client-go's transport", async () => {
  await withKubeconfig(
    `insecure-skip-tls-verify: true, certificate-authority-data: ${btoa("PEM")}`,
    async (file) => {
      await assert.rejects(loadKubeconfig(file), (e: unknown) => {
        assert.ok(e instanceof ConfigError, String(e));
        assert.equal(e.file, file);
        assert.equal(e.path, "clusters[c].cluster.insecure-skip-tls-verify");
        assert.match(
          e.message,
          /specifying a root certificates file with the insecure flag is not allowed/,
        );
        return true;
      });
    },
  );
});
