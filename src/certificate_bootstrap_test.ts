import assert from "node:assert/strict";
import { clientConfigStillValid } from "./certificate_bootstrap.ts";
import { generateSelfSignedCertKey } from "./server_tls.ts";

const NOW = new Date("2026-12-01T00:00:00Z");
const YEAR_MS = 365 * 24 * 3600 * 1000;

function kubeconfig(user: Record<string, string>): string {
  const lines = Object.entries(user).map(([k, v]) => `    ${k}: ${v}`).join("\n");
  return `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:6443
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
users:
- name: u
  user:
${lines}
`;
}

Deno.test("clientConfigStillValid accepts a kubeconfig with an unexpired client certificate only", async () => {
  const dir = await Deno.makeTempDir({ prefix: "certificate-bootstrap-" });
  try {
    // Valid from an hour before NOW for one year.
    const { certPem, keyPem } = generateSelfSignedCertKey("system:node:a", [], [], NOW);
    const b64 = (s: string) => btoa(s);
    const good = `${dir}/kubelet.conf`;
    await Deno.writeTextFile(
      good,
      kubeconfig({ "client-certificate-data": b64(certPem), "client-key-data": b64(keyPem) }),
    );
    assert.deepEqual(await clientConfigStillValid(good, NOW), { valid: true });

    const later = await clientConfigStillValid(good, new Date(NOW.getTime() + 2 * YEAR_MS));
    assert.equal(later.valid, false);
    assert.match(
      (later as { reason: string }).reason,
      new RegExp(`part of the existing client certificate in ${good} is expired: 2027-`),
    );

    const missing = await clientConfigStillValid(`${dir}/absent.conf`, NOW);
    assert.deepEqual(missing, {
      valid: false,
      reason: `the kubeconfig ${dir}/absent.conf does not exist`,
    });
    assert.deepEqual(await clientConfigStillValid("", NOW), {
      valid: false,
      reason: "no --kubeconfig is given",
    });

    const token = `${dir}/token.conf`;
    await Deno.writeTextFile(token, kubeconfig({ token: "abc" }));
    assert.deepEqual(await clientConfigStillValid(token, NOW), {
      valid: false,
      reason: `the kubeconfig ${token} has no client certificate`,
    });

    const broken = `${dir}/broken.conf`;
    await Deno.writeTextFile(broken, "clusters: 3\n");
    const r = await clientConfigStillValid(broken, NOW);
    assert.equal(r.valid, false);
    assert.match((r as { reason: string }).reason, /unable to read the existing kubeconfig: /);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
