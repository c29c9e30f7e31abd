import assert from "node:assert/strict";
import { join } from "node:path";
import { createLogger } from "../klog/klog.ts";
import { decodeResponse, encodeRequest, ExecPlugin, type PluginObserver } from "./exec_plugin.ts";

const V1 = "credentialprovider.kubelet.k8s.io/v1";
const logger = createLogger({ write: () => {} });

/** A bin dir with `name` running `body` (sh). */
async function binDir(name: string, body: string): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "cp-exec-" });
  await Deno.writeTextFile(join(dir, name), `#!/bin/sh\n${body}\n`, { mode: 0o755 });
  return dir;
}

// Upstream plugin_test.go Test_encodeRequest.
Deno.test("encodeRequest writes each version as upstream's encoder", () => {
  for (const v of ["v1alpha1", "v1beta1", "v1"]) {
    assert.equal(
      encodeRequest(`credentialprovider.kubelet.k8s.io/${v}`, { image: "test.registry.io/foobar" }),
      `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/${v}",` +
        `"image":"test.registry.io/foobar"}\n`,
    );
  }
  assert.equal(
    encodeRequest(V1, {
      image: "test.registry.io/foobar",
      serviceAccountToken: "service-account-token",
      serviceAccountAnnotations: { "domain.io/annotation1": "value1" },
    }),
    `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1",` +
      `"image":"test.registry.io/foobar","serviceAccountToken":"service-account-token",` +
      `"serviceAccountAnnotations":{"domain.io/annotation1":"value1"}}\n`,
  );
});

// Upstream plugin_test.go Test_decodeResponse.
Deno.test("decodeResponse accepts every version of the group and nothing else", () => {
  for (const v of ["v1", "v1beta1", "v1alpha1"]) {
    assert.deepEqual(
      decodeResponse(
        `{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/${v}",` +
          `"cacheKeyType":"Registry","cacheDuration":"1m","auth":{"*.registry.io":` +
          `{"username":"user","password":"password"}}}`,
      ),
      {
        cacheKeyType: "Registry",
        cacheDuration: 60_000,
        auth: { "*.registry.io": { username: "user", password: "password" } },
      },
    );
  }
  const bad = [
    `{"kind":"WrongKind","apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1","cacheKeyType":"Registry"}`,
    `{"kind":"CredentialProviderResponse","apiVersion":"foobar.kubelet.k8s.io/v1beta1","cacheKeyType":"Registry"}`,
    `{"kind":"CredentialProviderResponse","apiVersion":"${V1}","cacheKeyType":"Image","extra":1}`,
    `{"kind":"CredentialProviderResponse","apiVersion":"${V1}","auth":{"a":{"user":"x"}}}`,
    `{"kind":"CredentialProviderResponse","apiVersion":"${V1}","cacheDuration":"soon"}`,
    `{"apiVersion":"${V1}","cacheKeyType":"Image"}`,
  ];
  for (const data of bad) assert.throws(() => decodeResponse(data), Error, data);
});

Deno.test("ExecPlugin sends the request on stdin with args and env, and reads the response", async () => {
  const dir = await binDir(
    "test-plugin",
    `cat > "$(dirname "$0")/request.json"
printf '%s|%s|%s' "$1" "$2" "$PLUGIN_FOO" > "$(dirname "$0")/seen"
echo '{"kind":"CredentialProviderResponse","apiVersion":"${V1}","cacheKeyType":"Image","cacheDuration":"5m","auth":{"registry.io":{"username":"u","password":"p"}}}'`,
  );
  const seen: string[] = [];
  const observer: PluginObserver = {
    observeDuration: (name, s) => seen.push(`${name} ${s >= 0}`),
    countError: (name) => seen.push(`error ${name}`),
  };
  try {
    const plugin = new ExecPlugin({
      name: "test-plugin",
      binDir: dir,
      apiVersion: V1,
      args: ["--a", "b"],
      env: [{ name: "PLUGIN_FOO", value: "bar" }],
      logger,
      observer,
    });
    const response = await plugin.exec({
      image: "registry.io/app",
      serviceAccountToken: "tok",
      serviceAccountAnnotations: { "x.io/k": "v" },
    });
    assert.deepEqual(response, {
      cacheKeyType: "Image",
      cacheDuration: 300_000,
      auth: { "registry.io": { username: "u", password: "p" } },
    });
    assert.equal(
      await Deno.readTextFile(join(dir, "request.json")),
      encodeRequest(V1, {
        image: "registry.io/app",
        serviceAccountToken: "tok",
        serviceAccountAnnotations: { "x.io/k": "v" },
      }),
    );
    assert.equal(await Deno.readTextFile(join(dir, "seen")), "--a|b|bar");
    assert.deepEqual(seen, ["test-plugin true"]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ExecPlugin reports a failed run, a wrong apiVersion and an undecodable response as upstream", async () => {
  const dir = await binDir(
    "p",
    `case "$1" in
fail) echo "no credentials for you" >&2; exit 3;;
version) echo '{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1"}';;
secret) echo '{"kind":"CredentialProviderResponse","apiVersion":"${V1}","cacheKeyType":"Image","secret":"hunter2"}';;
notjson) echo 'hello';;
sleep) exec sleep 30;;
esac`,
  );
  const errors: string[] = [];
  const plugin = (arg: string, timeoutMs?: number) =>
    new ExecPlugin({
      name: "p",
      binDir: dir,
      apiVersion: V1,
      args: [arg],
      logger,
      timeoutMs,
      observer: { observeDuration: () => {}, countError: (n) => errors.push(n) },
    });
  try {
    await assert.rejects(plugin("fail").exec({ image: "r.io/a" }), {
      message: "error execing credential provider plugin p for image r.io/a: exit status 3: " +
        "no credentials for you\n",
    });
    await assert.rejects(plugin("version").exec({ image: "r.io/a" }), {
      message: "apiVersion from credential plugin response did not match expected apiVersion:" +
        `${V1}, actual apiVersion:credentialprovider.kubelet.k8s.io/v1beta1`,
    });
    // The decoder's message would quote the response, which may hold credentials.
    await assert.rejects(plugin("secret").exec({ image: "r.io/a" }), {
      message: "error decoding credential provider plugin response from stdout",
    });
    await assert.rejects(
      plugin("notjson").exec({ image: "r.io/a" }),
      {
        message:
          "error reading GVK from response: invalid character 'h' looking for beginning of value",
      },
    );
    const started = Date.now();
    await assert.rejects(plugin("sleep", 300).exec({ image: "r.io/a" }), {
      message:
        "error execing credential provider plugin p for image r.io/a: context deadline exceeded: ",
    });
    assert.ok(Date.now() - started < 10_000, "the run was killed at its deadline");
    await assert.rejects(
      new ExecPlugin({ name: "missing", binDir: dir, apiVersion: V1, logger }).exec({
        image: "r.io/a",
      }),
      {
        message: `error execing credential provider plugin missing for image r.io/a: fork/exec ${
          join(dir, "missing")
        }: no such file or directory: `,
      },
    );
    assert.deepEqual(errors, ["p", "p"]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
