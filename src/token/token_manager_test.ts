import assert from "node:assert/strict";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import { KubeApiError, type RequestOptions } from "../client/kube_client.ts";
import { TokenManager, TokenManagerError, type TokenRequestSpec } from "./token_manager.ts";

interface Call {
  method: string;
  path: string;
  body: unknown;
}

/** A fake apiserver: each TokenRequest gets token `t<n>`, valid for the requested lifetime. */
function fakeApi(clock: FakeClock) {
  const calls: Call[] = [];
  let fail: Error | undefined;
  let discovery: string[] = ["serviceaccounts", "serviceaccounts/token"];
  const client = {
    request<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
      calls.push({ method, path, body: opts.body });
      if (path === "/api/v1") {
        return Promise.resolve(
          { groupVersion: "v1", resources: discovery.map((name) => ({ name })) } as T,
        );
      }
      if (fail !== undefined) return Promise.reject(fail);
      const spec = (opts.body as { spec: TokenRequestSpec }).spec;
      const seconds = spec.expirationSeconds ?? 3600;
      return Promise.resolve({
        kind: "TokenRequest",
        spec: { ...spec, expirationSeconds: seconds },
        status: {
          token: `t${calls.length}`,
          expirationTimestamp: new Date(clock.now() + seconds * 1000).toISOString(),
        },
      } as T);
    },
  };
  return {
    client,
    calls,
    tokenCalls: () => calls.filter((c) => c.path !== "/api/v1").length,
    failWith(err: Error | undefined) {
      fail = err;
    },
    setDiscovery(names: string[]) {
      discovery = names;
    },
  };
}

function manager(opts: { random?: () => number } = {}) {
  const clock = new FakeClock(Date.UTC(2026, 0, 1));
  const api = fakeApi(clock);
  const lines: string[] = [];
  const tm = new TokenManager({
    client: api.client,
    clock,
    logger: createLogger({ write: (l) => lines.push(l), now: () => new Date(0), pid: 1 }),
    random: opts.random ?? (() => 0),
  });
  return { clock, api, lines, tm };
}

function spec(uid = "uid-1", expirationSeconds = 3600, audiences?: string[]): TokenRequestSpec {
  return {
    audiences,
    expirationSeconds,
    boundObjectRef: { kind: "Pod", apiVersion: "v1", name: "web", uid },
  };
}

const S = 1000;

Deno.test("TokenManager POSTs a TokenRequest bound to the pod", async () => {
  const { api, tm } = manager();
  const got = await tm.getServiceAccountToken("ns1", "default", spec("uid-1", 3607, ["aud"]));
  assert.equal(got.token, "t1");
  assert.equal(got.expirationTimestamp, "2026-01-01T01:00:07.000Z");
  assert.deepEqual(api.calls, [{
    method: "POST",
    path: "/api/v1/namespaces/ns1/serviceaccounts/default/token",
    body: {
      apiVersion: "authentication.k8s.io/v1",
      kind: "TokenRequest",
      spec: {
        audiences: ["aud"],
        expirationSeconds: 3607,
        boundObjectRef: { kind: "Pod", apiVersion: "v1", name: "web", uid: "uid-1" },
      },
    },
  }]);
});

Deno.test("TokenManager sends the service account's UID as the request's precondition", async () => {
  const { api, tm } = manager();
  const withUid = { ...spec(), serviceAccountUID: "sa-uid-1" };
  await tm.getServiceAccountToken("ns1", "default", withUid);
  const body = api.calls[0]?.body as { metadata?: { uid?: string }; spec: object };
  assert.deepEqual(body.metadata, { uid: "sa-uid-1" });
  assert.equal("serviceAccountUID" in body.spec, false);
  // The same name with another UID (made again) is another token; the same UID is cached.
  await tm.getServiceAccountToken("ns1", "default", withUid);
  assert.equal(api.tokenCalls(), 1);
  await tm.getServiceAccountToken("ns1", "default", { ...spec(), serviceAccountUID: "sa-uid-2" });
  await tm.getServiceAccountToken("ns1", "default", spec());
  assert.equal(api.tokenCalls(), 3);
  assert.equal((api.calls[2]?.body as { metadata?: unknown }).metadata, undefined);
});

Deno.test("TokenManager caches a token per request", async () => {
  const { api, clock, tm } = manager();
  const a = await tm.getServiceAccountToken("ns1", "default", spec());
  clock.step(60 * S);
  const b = await tm.getServiceAccountToken("ns1", "default", spec());
  assert.equal(b.token, a.token);
  assert.equal(api.tokenCalls(), 1);
  // Another audience, lifetime, pod or account is another token.
  await tm.getServiceAccountToken("ns1", "default", spec("uid-1", 3600, ["vault"]));
  await tm.getServiceAccountToken("ns1", "default", spec("uid-1", 7200));
  await tm.getServiceAccountToken("ns1", "default", spec("uid-2"));
  await tm.getServiceAccountToken("ns1", "builder", spec());
  await tm.getServiceAccountToken("ns2", "default", spec());
  assert.equal(api.tokenCalls(), 6);
  assert.equal(tm.size, 6);
});

Deno.test("TokenManager refreshes a token past 80% of its lifetime", async () => {
  const { api, clock, tm } = manager();
  await tm.getServiceAccountToken("ns1", "default", spec("uid-1", 3600));
  clock.step(2880 * S); // exactly 80%: upstream's After is strict
  assert.equal((await tm.getServiceAccountToken("ns1", "default", spec())).token, "t1");
  clock.step(1);
  assert.equal((await tm.getServiceAccountToken("ns1", "default", spec())).token, "t2");
  assert.equal(api.tokenCalls(), 2);
});

Deno.test("TokenManager refreshes earlier by a jitter of whole seconds", async () => {
  const { clock, tm } = manager({ random: () => 0.95 }); // 9.5 s, truncated to 9 s
  await tm.getServiceAccountToken("ns1", "default", spec("uid-1", 3600));
  clock.step((2880 - 9) * S);
  assert.equal((await tm.getServiceAccountToken("ns1", "default", spec())).token, "t1");
  clock.step(1);
  assert.equal((await tm.getServiceAccountToken("ns1", "default", spec())).token, "t2");
});

Deno.test("TokenManager refreshes a token older than 24 hours", async () => {
  const { clock, tm } = manager();
  const week = 7 * 24 * 3600;
  await tm.getServiceAccountToken("ns1", "default", spec("uid-1", week));
  clock.step(24 * 3600 * S);
  assert.equal(
    (await tm.getServiceAccountToken("ns1", "default", spec("uid-1", week))).token,
    "t1",
  );
  clock.step(1);
  assert.equal(
    (await tm.getServiceAccountToken("ns1", "default", spec("uid-1", week))).token,
    "t2",
  );
});

Deno.test("TokenManager refreshes a token issued after now (clock jumped back)", async () => {
  const { clock, tm } = manager();
  await tm.getServiceAccountToken("ns1", "default", spec());
  clock.step(-1);
  assert.equal((await tm.getServiceAccountToken("ns1", "default", spec())).token, "t2");
});

Deno.test("TokenManager returns the cached token when a refresh fails before expiry", async () => {
  const { api, clock, lines, tm } = manager();
  await tm.getServiceAccountToken("ns1", "default", spec());
  clock.step(3000 * S);
  api.failWith(new KubeApiError("POST", "/x", 503, "ServiceUnavailable", "down"));
  assert.equal((await tm.getServiceAccountToken("ns1", "default", spec())).token, "t1");
  assert.equal(api.tokenCalls(), 2);
  assert.equal(lines.length, 1);
  assert.match(
    lines[0] ?? "",
    /^E.*"Couldn't update token" err="POST \/x: 503 ServiceUnavailable: down" cacheKey="\\"default\\"\/\\"ns1\\"\/\[\]string\(nil\)\/3600\/v1\.BoundObjectReference\{Kind:\\"Pod\\", APIVersion:\\"v1\\", Name:\\"web\\", UID:\\"uid-1\\"\}\/\\"\\""$/,
  );
  // Past expiry the stale token is no use.
  clock.step(601 * S);
  await assert.rejects(
    tm.getServiceAccountToken("ns1", "default", spec()),
    (e: unknown) =>
      e instanceof TokenManagerError &&
      e.message.startsWith(`token "default"/"ns1"/[]string(nil)/3600/`) &&
      e.message.endsWith("expired and refresh failed: POST /x: 503 ServiceUnavailable: down"),
  );
});

Deno.test("TokenManager fails when the first fetch fails", async () => {
  const { api, tm } = manager();
  api.failWith(new KubeApiError("POST", "/x", 403, "Forbidden", "no"));
  await assert.rejects(
    tm.getServiceAccountToken("ns1", "default", spec()),
    new TokenManagerError("failed to fetch token: POST /x: 403 Forbidden: no"),
  );
  assert.equal(tm.size, 0);
});

Deno.test("TokenManager says when the apiserver lacks the TokenRequest API", async () => {
  const { api, tm } = manager();
  api.failWith(new KubeApiError("POST", "/x", 404, "NotFound", "the server could not find"));
  api.setDiscovery(["serviceaccounts"]);
  await assert.rejects(
    tm.getServiceAccountToken("ns1", "default", spec()),
    new TokenManagerError(
      "failed to fetch token: the API server does not have TokenRequest endpoints enabled",
    ),
  );
  // A 404 with the API present is the plain NotFound (a missing service account).
  const other = manager();
  other.api.failWith(new KubeApiError("POST", "/x", 404, "NotFound", "sa not found"));
  await assert.rejects(
    other.tm.getServiceAccountToken("ns1", "default", spec()),
    new TokenManagerError("failed to fetch token: POST /x: 404 NotFound: sa not found"),
  );
});

Deno.test("TokenManager fails in standalone mode", async () => {
  const tm = new TokenManager({
    clock: new FakeClock(),
    logger: createLogger({ write: () => {} }),
  });
  await assert.rejects(
    tm.getServiceAccountToken("ns1", "default", spec()),
    new TokenManagerError(
      "failed to fetch token: cannot use TokenManager when kubelet is in standalone mode",
    ),
  );
});

Deno.test("TokenManager cleanup drops expired tokens only", async () => {
  const { api, clock, tm } = manager();
  await tm.getServiceAccountToken("ns1", "default", spec("uid-1", 600));
  await tm.getServiceAccountToken("ns1", "default", spec("uid-2", 3600));
  clock.step(600 * S);
  tm.cleanup();
  assert.equal(tm.size, 2); // expiry is inclusive: not yet expired
  clock.step(1);
  tm.cleanup();
  assert.equal(tm.size, 1);
  assert.equal((await tm.getServiceAccountToken("ns1", "default", spec("uid-2"))).token, "t2");
  assert.equal(api.tokenCalls(), 2);
});

Deno.test("TokenManager deleteServiceAccountToken drops the pod's tokens only", async () => {
  const { api, tm } = manager();
  await tm.getServiceAccountToken("ns1", "default", spec("uid-1"));
  await tm.getServiceAccountToken("ns1", "default", spec("uid-1", 3600, ["vault"]));
  await tm.getServiceAccountToken("ns1", "default", spec("uid-2"));
  tm.deleteServiceAccountToken("uid-1");
  assert.equal(tm.size, 1);
  await tm.getServiceAccountToken("ns1", "default", spec("uid-2"));
  assert.equal(api.tokenCalls(), 3);
  await tm.getServiceAccountToken("ns1", "default", spec("uid-1"));
  assert.equal(api.tokenCalls(), 4);
});
