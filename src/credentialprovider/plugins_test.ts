import assert from "node:assert/strict";
import { join } from "node:path";
import { createLogger } from "../klog/klog.ts";
import { FakeClock } from "../util/clock.ts";
import { CredentialProviders, loadCredentialProviderPlugins } from "./plugins.ts";

const V1 = "credentialprovider.kubelet.k8s.io/v1";

function configYaml(names: string[], extra = ""): string {
  return `apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
${
    names.map((n) =>
      `  - name: ${n}
    matchImages: ["registry.io"]
    defaultCacheDuration: 1m
    apiVersion: ${V1}
${extra}`
    ).join("")
  }`;
}

Deno.test("loadCredentialProviderPlugins stops at what upstream refuses, naming it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "cp-load-" });
  try {
    const bin = join(dir, "bin");
    const config = join(dir, "config.yaml");
    await Deno.writeTextFile(config, configYaml(["good"]));
    await assert.rejects(loadCredentialProviderPlugins({ configPath: config, binDir: bin }), {
      name: "CredentialProviderConfigError",
      message: `plugin binary directory ${bin} did not exist`,
    });
    await Deno.mkdir(bin);
    await assert.rejects(loadCredentialProviderPlugins({ configPath: config, binDir: bin }), {
      message: `plugin binary executable ${join(bin, "good")} did not exist`,
    });
    await Deno.writeTextFile(join(bin, "good"), "#!/bin/sh\n", { mode: 0o644 });
    await assert.rejects(loadCredentialProviderPlugins({ configPath: config, binDir: bin }), {
      message: `error inspecting binary executable ${join(bin, "good")}: exec: "${
        join(bin, "good")
      }": permission denied`,
    });
    await Deno.chmod(join(bin, "good"), 0o755);
    const loaded = await loadCredentialProviderPlugins({ configPath: config, binDir: bin });
    assert.deepEqual(loaded.executables, [join(bin, "good")]);
    assert.match(loaded.hash, /^sha256:/);

    // Validation errors name the file, each field and its value; several are aggregated.
    await Deno.writeTextFile(
      config,
      configYaml(["a/b"]).replace("defaultCacheDuration: 1m", "defaultCacheDuration: -1m"),
    );
    await assert.rejects(loadCredentialProviderPlugins({ configPath: config, binDir: bin }), {
      message: `failed to validate credential provider config "${config}": ` +
        `[providers.name: Invalid value: "a/b": provider name cannot contain '/', ` +
        `providers.defaultCacheDuration: Invalid value: "-1m0s": must be greater than or equal to 0]`,
    });
    const tokenAttrs = `    tokenAttributes:
      serviceAccountTokenAudience: aud
      cacheType: Token
      requireServiceAccount: true
`;
    await Deno.writeTextFile(config, configYaml(["good"], tokenAttrs));
    await assert.rejects(
      loadCredentialProviderPlugins({
        configPath: config,
        binDir: bin,
        serviceAccountTokenGate: false,
      }),
      /tokenAttributes is not supported when KubeletServiceAccountTokenForCredentialProviders/,
    );
    await loadCredentialProviderPlugins({ configPath: config, binDir: bin });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("CredentialProviders asks each provider in order and logs one that fails", async () => {
  const dir = await Deno.makeTempDir({ prefix: "cp-providers-" });
  const lines: string[] = [];
  try {
    const bin = join(dir, "bin");
    await Deno.mkdir(bin);
    await Deno.writeTextFile(join(bin, "broken"), "#!/bin/sh\necho oops >&2\nexit 1\n", {
      mode: 0o755,
    });
    await Deno.writeTextFile(
      join(bin, "works"),
      `#!/bin/sh\necho '{"kind":"CredentialProviderResponse","apiVersion":"${V1}",` +
        `"cacheKeyType":"Registry","auth":{"registry.io":{"username":"u","password":"p"}}}'\n`,
      { mode: 0o755 },
    );
    const config = join(dir, "config.yaml");
    await Deno.writeTextFile(config, configYaml(["broken", "works"]));
    const plugins = await loadCredentialProviderPlugins({ configPath: config, binDir: bin });
    const providers = new CredentialProviders({
      plugins,
      clock: new FakeClock(),
      logger: createLogger({ write: (l) => lines.push(l) }),
    });
    const pod = { namespace: "ns", name: "p", uid: "u", serviceAccountName: "" };
    const got = await providers.provide("registry.io/app", pod);
    assert.deepEqual(got, [{ config: { "registry.io": { username: "u", password: "p" } } }]);
    assert.equal(lines.length, 1);
    assert.match(
      lines[0]!,
      /"Failed to provide credentials for image" err=<\n\tfailed to get credential/,
    );
    assert.match(
      lines[0]!,
      /error execing credential provider plugin broken for image registry.io\/app: exit status 1: oops/,
    );
    assert.match(lines[0]!, / > provider="broken" image="registry.io\/app"$/);
    // An image no provider matches runs nothing.
    assert.deepEqual(await providers.provide("quay.io/app", pod), [{ config: {} }, { config: {} }]);
    assert.equal(lines.length, 1);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
