import assert from "node:assert/strict";
import type { V1ServiceAccount } from "@kubernetes/client-node";
import { FakeClock } from "../util/clock.ts";
import type { TokenRequestSpec } from "../token/token_manager.ts";
import type { CredentialProvider, ServiceAccountTokenAttributes } from "./config.ts";
import type {
  CredentialPlugin,
  CredentialProviderRequest,
  CredentialProviderResponse,
} from "./exec_plugin.ts";
import {
  CACHE_PURGE_INTERVAL_MS,
  cacheKey,
  PluginProvider,
  type PodCoordinates,
  type ServiceAccountAccess,
} from "./plugin_provider.ts";

/** A plugin that records its requests and answers `response` (or what `answer` returns). */
class FakePlugin implements CredentialPlugin {
  readonly requests: CredentialProviderRequest[] = [];
  constructor(
    public response: Partial<CredentialProviderResponse> = {},
    readonly gate?: Promise<void>,
  ) {}

  async exec(request: CredentialProviderRequest): Promise<CredentialProviderResponse> {
    this.requests.push(request);
    await this.gate;
    return {
      cacheKeyType: "Image",
      auth: { "registry.io": { username: "user", password: `pass${this.requests.length}` } },
      ...this.response,
    };
  }
}

const POD: PodCoordinates = {
  namespace: "ns",
  name: "pod",
  uid: "pod-uid",
  serviceAccountName: "",
};

function setup(
  opts: {
    response?: Partial<CredentialProviderResponse>;
    provider?: Partial<CredentialProvider>;
    serviceAccounts?: ServiceAccountAccess;
    gate?: Promise<void>;
  } = {},
) {
  const clock = new FakeClock();
  const plugin = new FakePlugin(opts.response, opts.gate);
  const provider = new PluginProvider({
    clock,
    plugin,
    serviceAccounts: opts.serviceAccounts,
    provider: {
      name: "fake",
      matchImages: ["*.registry.io", "registry.io", "other.io"],
      defaultCacheDuration: 0,
      apiVersion: "credentialprovider.kubelet.k8s.io/v1",
      args: [],
      env: [],
      ...opts.provider,
    },
  });
  return { clock, plugin, provider };
}

Deno.test("PluginProvider caches by image, registry or globally as the response's cacheKeyType says", async () => {
  const runs = async (cacheKeyType: string, images: string[]) => {
    const { plugin, provider } = setup({ response: { cacheKeyType, cacheDuration: 60_000 } });
    for (const image of images) await provider.provide(image, POD);
    return plugin.requests.map((r) => r.image);
  };
  const images = [
    "registry.io/a",
    "registry.io/a",
    "registry.io/b",
    "x.registry.io/a",
    "other.io/c",
  ];
  assert.deepEqual(await runs("Image", images), [
    "registry.io/a",
    "registry.io/b",
    "x.registry.io/a",
    "other.io/c",
  ]);
  assert.deepEqual(await runs("Registry", images), [
    "registry.io/a",
    "x.registry.io/a",
    "other.io/c",
  ]);
  assert.deepEqual(await runs("Global", images), ["registry.io/a"]);
  const { provider } = setup({ response: { cacheKeyType: "Repository" } });
  await assert.rejects(provider.provide("registry.io/a", POD), {
    message: "credential provider plugin did not return a valid cacheKeyType: Repository",
  });
});

Deno.test("PluginProvider keeps an answer for its cacheDuration, else defaultCacheDuration", async () => {
  {
    const { clock, plugin, provider } = setup({ response: { cacheDuration: 60_000 } });
    const first = await provider.provide("registry.io/a", POD);
    assert.deepEqual(first.config, { "registry.io": { username: "user", password: "pass1" } });
    clock.step(60_000);
    // Expired only after the deadline, as upstream's clock.Now().After(expiresAt).
    assert.deepEqual((await provider.provide("registry.io/a", POD)).config, first.config);
    clock.step(1);
    const second = await provider.provide("registry.io/a", POD);
    assert.equal(second.config["registry.io"]?.password, "pass2");
    assert.equal(plugin.requests.length, 2);
  }
  {
    // An explicit 0 is never cached, even with a default.
    const { plugin, provider } = setup({
      response: { cacheDuration: 0 },
      provider: { defaultCacheDuration: 600_000 },
    });
    await provider.provide("registry.io/a", POD);
    await provider.provide("registry.io/a", POD);
    assert.equal(plugin.requests.length, 2);
  }
  {
    // No duration in the response: the default, here 10 minutes.
    const { clock, plugin, provider } = setup({ provider: { defaultCacheDuration: 600_000 } });
    await provider.provide("registry.io/a", POD);
    clock.step(599_000);
    await provider.provide("registry.io/a", POD);
    assert.equal(plugin.requests.length, 1);
    clock.step(2_000);
    await provider.provide("registry.io/a", POD);
    assert.equal(plugin.requests.length, 2);
  }
  {
    // No duration and a default of 0: not cached.
    const { plugin, provider } = setup();
    await provider.provide("registry.io/a", POD);
    await provider.provide("registry.io/a", POD);
    assert.equal(plugin.requests.length, 2);
  }
});

Deno.test("PluginProvider drops every expired answer at the 15-minute purge", async () => {
  const { clock, provider } = setup({ response: { cacheDuration: 120_000 } });
  await provider.provide("registry.io/a", POD);
  await provider.provide("registry.io/b", POD);
  assert.equal(provider.cacheSize, 2);
  clock.step(5 * 60_000);
  // Expired but never looked up: still held until the purge.
  await provider.provide("registry.io/c", POD);
  assert.equal(provider.cacheSize, 3);
  clock.step(CACHE_PURGE_INTERVAL_MS);
  await provider.provide("other.io/x", POD);
  assert.equal(provider.cacheSize, 1, "only the answer just added is left");
});

Deno.test("PluginProvider runs only for matching images, once for concurrent requests", async () => {
  const release = Promise.withResolvers<void>();
  const { plugin, provider } = setup({ gate: release.promise });
  assert.deepEqual(await provider.provide("quay.io/a", POD), { config: {} });
  assert.equal(plugin.requests.length, 0);
  const both = Promise.all([
    provider.provide("registry.io/a", POD),
    provider.provide("registry.io/a", POD),
  ]);
  release.resolve();
  const [a, b] = await both;
  assert.deepEqual(a, b);
  assert.equal(plugin.requests.length, 1);
});

Deno.test("cacheKey is upstream's length-prefixed key", () => {
  assert.equal(cacheKey("image1", ""), "\x00\x06image1\x00\x00");
});

/** Service accounts and tokens of a fake apiserver; each token request gets a new token. */
class FakeServiceAccounts implements ServiceAccountAccess {
  readonly tokenRequests: { namespace: string; name: string; spec: TokenRequestSpec }[] = [];
  constructor(readonly annotations: Record<string, string> = {}) {}

  getServiceAccount(namespace: string, name: string): Promise<V1ServiceAccount> {
    return Promise.resolve({
      metadata: { namespace, name, uid: `${name}-uid`, annotations: this.annotations },
    });
  }

  getServiceAccountToken(namespace: string, name: string, spec: TokenRequestSpec) {
    this.tokenRequests.push({ namespace, name, spec });
    return Promise.resolve(`token-${this.tokenRequests.length}`);
  }
}

function tokenAttributes(t: Partial<ServiceAccountTokenAttributes> = {}) {
  return {
    serviceAccountTokenAudience: "my-audience",
    cacheType: "ServiceAccount",
    requireServiceAccount: true,
    requiredServiceAccountAnnotationKeys: [],
    optionalServiceAccountAnnotationKeys: [],
    ...t,
  };
}

Deno.test("PluginProvider asks for a pod-bound token for the configured audience and passes annotations", async () => {
  const sa = new FakeServiceAccounts({ "example.com/role": "puller", "other/key": "x" });
  const { plugin, provider } = setup({
    serviceAccounts: sa,
    response: { cacheDuration: 60_000 },
    provider: {
      tokenAttributes: tokenAttributes({
        optionalServiceAccountAnnotationKeys: ["example.com/role"],
      }),
    },
  });
  // requireServiceAccount and a pod without one: the plugin is not run.
  assert.deepEqual(await provider.provide("registry.io/a", POD), { config: {} });
  assert.equal(plugin.requests.length, 0);

  const pod = { ...POD, serviceAccountName: "builder" };
  const got = await provider.provide("registry.io/a", pod);
  assert.deepEqual(got.serviceAccount, { uid: "builder-uid", namespace: "ns", name: "builder" });
  assert.deepEqual(sa.tokenRequests, [{
    namespace: "ns",
    name: "builder",
    spec: {
      audiences: ["my-audience"],
      boundObjectRef: { apiVersion: "v1", kind: "Pod", name: "pod", uid: "pod-uid" },
      // Upstream's precondition: the token is for this account, not one made again since.
      serviceAccountUID: "builder-uid",
    },
  }]);
  assert.deepEqual(plugin.requests, [{
    image: "registry.io/a",
    serviceAccountToken: "token-1",
    serviceAccountAnnotations: { "example.com/role": "puller" },
  }]);
  // cacheType ServiceAccount: another pod of the same account uses the cached answer.
  await provider.provide("registry.io/a", { ...pod, name: "pod2", uid: "pod2-uid" });
  assert.equal(plugin.requests.length, 1);
  // Another account does not.
  await provider.provide("registry.io/a", { ...pod, serviceAccountName: "deployer" });
  assert.equal(plugin.requests.length, 2);
});

Deno.test("PluginProvider with cacheType Token caches per token, and refuses the token echoed otherwise", async () => {
  {
    const sa = new FakeServiceAccounts();
    const { plugin, provider } = setup({
      serviceAccounts: sa,
      response: { cacheDuration: 60_000 },
      provider: { tokenAttributes: tokenAttributes({ cacheType: "Token" }) },
    });
    const pod = { ...POD, serviceAccountName: "builder" };
    await provider.provide("registry.io/a", pod);
    await provider.provide("registry.io/a", pod);
    // Each call got a new token from the fake, so each is a cache miss.
    assert.equal(plugin.requests.length, 2);
  }
  {
    const sa = new FakeServiceAccounts();
    const { plugin, provider } = setup({
      serviceAccounts: sa,
      provider: { tokenAttributes: tokenAttributes() },
    });
    plugin.response = { auth: { "registry.io": { username: "x", password: "token-1" } } };
    await assert.rejects(provider.provide("registry.io/a", { ...POD, serviceAccountName: "b" }), {
      message: "credential provider plugin returned the service account token as the password " +
        "which is not allowed when service account cache type is not set to 'Token'",
    });
  }
});

Deno.test("PluginProvider skips a service account without a required annotation", async () => {
  const sa = new FakeServiceAccounts({});
  const { plugin, provider } = setup({
    serviceAccounts: sa,
    provider: {
      tokenAttributes: tokenAttributes({
        requiredServiceAccountAnnotationKeys: ["example.com/role"],
      }),
    },
  });
  const got = await provider.provide("registry.io/a", { ...POD, serviceAccountName: "builder" });
  assert.deepEqual(got, { config: {} });
  assert.equal(plugin.requests.length, 0);
  assert.equal(sa.tokenRequests.length, 0);
});

Deno.test("PluginProvider without a required service account runs without a token for a pod without one", async () => {
  const sa = new FakeServiceAccounts();
  const { plugin, provider } = setup({
    serviceAccounts: sa,
    provider: { tokenAttributes: tokenAttributes({ requireServiceAccount: false }) },
  });
  const got = await provider.provide("registry.io/a", POD);
  assert.equal(got.serviceAccount, undefined);
  assert.deepEqual(plugin.requests, [{ image: "registry.io/a" }]);
});
