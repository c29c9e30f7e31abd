import assert from "node:assert/strict";
import type { IncomingMessage } from "node:http";
import { request } from "node:https";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import { KubeClient } from "../client/kube_client.ts";
import type { KubeletConfiguration } from "../apis/config_types.ts";
import type { RequestAttributes, UserInfo } from "./server.ts";
import { serveKubeletAPI } from "./server.ts";
import { MetricsRegistry } from "../metrics/metrics.ts";
import { ApiserverMetrics } from "../metrics/apiserver_metrics.ts";
import { parseExposition } from "../metrics/prometheus.ts";
import { WorkqueueMetrics } from "../metrics/workqueue_metrics.ts";
import {
  AuthConfigError,
  AuthenticationError,
  type AuthOptions,
  buildAuth,
  CLIENT_CA_QUEUE,
  type KubeletAuth,
  nodeAuthorizerAttributes,
  nodeAuthorizerAttributesList,
  type NodeRequestAttributes,
  subjectAccessReview,
  webhookAuthorizer,
} from "./auth.ts";

const EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
const logger = createLogger({ write: () => {}, pid: 1 });
const CA_FILE = "/etc/kubernetes/pki/ca.crt";

async function openssl(dir: string, args: string[]): Promise<void> {
  const out = await new Deno.Command("openssl", { args, cwd: dir, stdout: "null", stderr: "piped" })
    .output();
  if (!out.success) {
    throw new Error(`openssl ${args.join(" ")}: ${new TextDecoder().decode(out.stderr)}`);
  }
}

interface Pair {
  readonly cert: string;
  readonly key: string;
}

/** A client CA, clients of it and of another CA, and a serving pair, as PEM text. */
async function makePki() {
  const dir = await Deno.makeTempDir({ prefix: "server_auth_test_" });
  const selfSigned = (name: string, subj: string) =>
    openssl(dir, [
      ...["req", "-x509", "-new", ...EC, "-keyout", `${name}.key`, "-out", `${name}.crt`],
      ...["-subj", subj, "-days", "30"],
    ]);
  let serial = 1;
  const issue = async (name: string, subj: string, ca: string) => {
    const n = serial++;
    await openssl(dir, [
      ...["req", "-new", ...EC, "-keyout", `${name}.key`, "-out", `${name}.csr`],
      ...["-subj", subj],
    ]);
    await Deno.writeTextFile(
      `${dir}/${name}.ext`,
      "basicConstraints = critical,CA:FALSE\nextendedKeyUsage = clientAuth\n",
    );
    await openssl(dir, [
      ...["x509", "-req", "-in", `${name}.csr`, "-CA", `${ca}.crt`, "-CAkey", `${ca}.key`],
      ...[
        "-set_serial",
        String(n),
        "-days",
        "30",
        "-extfile",
        `${name}.ext`,
        "-out",
        `${name}.crt`,
      ],
    ]);
  };
  await Promise.all([
    selfSigned("ca", "/CN=kubernetes"),
    selfSigned("other-ca", "/CN=other"),
    selfSigned("serving", "/CN=kubelet"),
  ]);
  await Promise.all([
    issue("alice", "/O=g1/CN=alice", "ca"),
    issue("admin", "/O=system:masters/CN=kube-apiserver-kubelet-client", "ca"),
    issue("mallory", "/O=system:masters/CN=mallory", "other-ca"),
  ]);
  const read = async (name: string): Promise<Pair> => ({
    cert: await Deno.readTextFile(`${dir}/${name}.crt`),
    key: await Deno.readTextFile(`${dir}/${name}.key`),
  });
  const pki = {
    ca: await read("ca"),
    serving: await read("serving"),
    alice: await read("alice"),
    admin: await read("admin"),
    mallory: await read("mallory"),
    otherCa: await read("other-ca"),
  };
  await Deno.remove(dir, { recursive: true });
  return pki;
}

let pkiPromise: ReturnType<typeof makePki> | undefined;
const getPki = () => pkiPromise ??= makePki();

type ReviewSpec = Record<string, unknown> & {
  resourceAttributes?: Record<string, string>;
  user?: string;
  token?: string;
};

/** A loopback apiserver answering TokenReviews and SubjectAccessReviews. */
function fakeApiserver() {
  const state = {
    requests: [] as { path: string; body: Record<string, unknown> }[],
    /** token → TokenReview status */
    tokens: new Map<string, Record<string, unknown>>(),
    /** SubjectAccessReview spec → status */
    policy: (_spec: ReviewSpec): Record<string, unknown> => ({ allowed: false }),
    /** Answer this many requests with a 500 first. */
    failures: 0,
  };
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const url = new URL(req.url);
    const body = await req.json() as Record<string, unknown> & { spec: ReviewSpec };
    state.requests.push({ path: url.pathname, body });
    if (state.failures > 0) {
      state.failures--;
      return Response.json({ kind: "Status", reason: "InternalError", message: "etcd is gone" }, {
        status: 500,
      });
    }
    if (url.pathname === "/apis/authentication.k8s.io/v1/tokenreviews") {
      const status = state.tokens.get(body.spec.token ?? "") ?? { user: {} };
      return Response.json({ ...body, status }, { status: 201 });
    }
    if (url.pathname === "/apis/authorization.k8s.io/v1/subjectaccessreviews") {
      return Response.json({ ...body, status: state.policy(body.spec) }, { status: 201 });
    }
    return Response.json({ kind: "Status", reason: "NotFound" }, { status: 404 });
  });
  const addr = server.addr as Deno.NetAddr;
  const clock = new FakeClock(Date.now());
  const client = new KubeClient({
    config: { server: `http://127.0.0.1:${addr.port}`, insecureSkipTLSVerify: false, source: "t" },
    clock,
    qps: -1,
    userAgent: "test",
  });
  return {
    state,
    clock,
    client,
    async close() {
      client.close();
      await server.shutdown();
    },
  };
}

type AuthConfig = Pick<KubeletConfiguration, "authentication" | "authorization">;

function config(o: {
  clientCAFile?: string;
  webhook?: boolean;
  anonymous?: boolean;
  mode?: string;
} = {}): AuthConfig {
  return {
    authentication: {
      x509: o.clientCAFile === undefined ? {} : { clientCAFile: o.clientCAFile },
      webhook: { enabled: o.webhook ?? true, cacheTTL: 120_000 },
      anonymous: { enabled: o.anonymous ?? false },
    },
    authorization: {
      mode: o.mode ?? "Webhook",
      webhook: { cacheAuthorizedTTL: 300_000, cacheUnauthorizedTTL: 30_000 },
    },
  };
}

function options(
  api: ReturnType<typeof fakeApiserver>,
  cfg: AuthConfig,
  caPem?: string,
): AuthOptions {
  return {
    config: cfg,
    nodeName: "node-a",
    client: api.client,
    clock: api.clock,
    logger,
    readFile: (p) =>
      p === CA_FILE && caPem !== undefined
        ? Promise.resolve(caPem)
        : Promise.reject(new Deno.errors.NotFound(`open ${p}: no such file or directory`)),
    webhookRetryBackoff: { initialMs: 500, factor: 1.5, jitter: 0, steps: 5 },
  };
}

/** A request as the authenticator sees it: headers, and the client's certificates if any. */
function fakeRequest(
  o: { headers?: Record<string, string>; certs?: string[]; method?: string } = {},
): IncomingMessage {
  const ders = (o.certs ?? []).map((pem) => {
    const b64 = pem.replace(/-----[A-Z ]+-----/g, "").replace(/\s+/g, "");
    return Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  });
  type Peer = { raw?: Uint8Array; issuerCertificate?: Peer };
  const chain: Peer[] = ders.map((raw) => ({ raw }));
  chain.forEach((c, i) => (c.issuerCertificate = chain[i + 1] ?? c));
  return {
    method: o.method ?? "GET",
    headers: { ...o.headers },
    socket: { getPeerCertificate: () => chain[0] ?? {} },
  } as unknown as IncomingMessage;
}

async function authn(auth: KubeletAuth, req: IncomingMessage): Promise<UserInfo | undefined> {
  return await auth.authenticator.authenticate(req);
}

Deno.test("buildAuth refuses webhook modes without a client, as upstream", async () => {
  const clock = new FakeClock();
  const base = { nodeName: "n", clock, logger };
  await assert.rejects(
    buildAuth({ ...base, config: config({ webhook: true, mode: "AlwaysAllow" }) }),
    new AuthConfigError("no client provided, cannot use webhook authentication"),
  );
  await assert.rejects(
    buildAuth({ ...base, config: config({ webhook: false, anonymous: true }) }),
    new AuthConfigError("no client provided, cannot use webhook authorization"),
  );
  await assert.rejects(
    buildAuth({ ...base, config: config({ webhook: false, mode: "AlwaysAllow" }) }),
    new AuthConfigError("No authentication method configured"),
  );
  await assert.rejects(
    buildAuth({ ...base, config: config({ webhook: false, anonymous: true, mode: "RBAC" }) }),
    new AuthConfigError("unknown authorization mode RBAC"),
  );
  await assert.rejects(
    buildAuth({ ...base, config: config({ webhook: false, anonymous: true, mode: "" }) }),
    new AuthConfigError("no authorization mode specified"),
  );
});

Deno.test("buildAuth names the client CA file it cannot use", async () => {
  const api = fakeApiserver();
  try {
    const cfg = config({ clientCAFile: CA_FILE });
    await assert.rejects(
      buildAuth(options(api, cfg)),
      (e: Error) =>
        e instanceof AuthConfigError &&
        e.message.startsWith(`authentication.x509.clientCAFile: cannot read '${CA_FILE}'`),
    );
    await assert.rejects(
      buildAuth(options(api, cfg, "")),
      new AuthConfigError(`missing content for CA bundle "client-ca-bundle::${CA_FILE}"`),
    );
    await assert.rejects(
      buildAuth(options(api, cfg, "not a certificate\n")),
      new AuthConfigError(
        `error loading CA bundle for "client-ca-bundle::${CA_FILE}": data does not contain any valid RSA or ECDSA certificates`,
      ),
    );
  } finally {
    await api.close();
  }
});

Deno.test("buildAuth authenticates a client certificate as CN in O and system:authenticated", async () => {
  const pki = await getPki();
  const api = fakeApiserver();
  try {
    const auth = await buildAuth(options(api, config({ clientCAFile: CA_FILE }), pki.ca.cert));
    const user = await authn(auth, fakeRequest({ certs: [pki.alice.cert] }));
    assert.equal(user?.name, "alice");
    assert.deepEqual(user?.groups, ["g1", "system:authenticated"]);
    assert.match(user?.extra?.["authentication.kubernetes.io/credential-id"]?.[0] ?? "", /^X509/);
    assert.equal(await authn(auth, fakeRequest()), undefined);
    await assert.rejects(
      authn(auth, fakeRequest({ certs: [pki.mallory.cert] })),
      (e: Error) =>
        e instanceof AuthenticationError &&
        /failed: x509: certificate signed by unknown authority$/.test(e.message),
    );
    // Expired once the clock passes the certificate's 30 days.
    api.clock.step(31 * 86400_000);
    await assert.rejects(
      authn(auth, fakeRequest({ certs: [pki.alice.cert] })),
      /certificate has expired or is not yet valid/,
    );
    assert.equal(api.state.requests.length, 0);
  } finally {
    await api.close();
  }
});

Deno.test("buildAuth lets anonymous in only when enabled and never past a bad credential", async () => {
  const pki = await getPki();
  const api = fakeApiserver();
  try {
    const on = await buildAuth(
      options(api, config({ clientCAFile: CA_FILE, anonymous: true }), pki.ca.cert),
    );
    assert.deepEqual(await authn(on, fakeRequest()), {
      name: "system:anonymous",
      groups: ["system:unauthenticated"],
    });
    await assert.rejects(
      authn(on, fakeRequest({ certs: [pki.mallory.cert] })),
      AuthenticationError,
    );
    await assert.rejects(
      authn(on, fakeRequest({ headers: { authorization: "Bearer nope" } })),
      new AuthenticationError("invalid bearer token"),
    );
    const off = await buildAuth(options(api, config({ clientCAFile: CA_FILE }), pki.ca.cert));
    assert.equal(await authn(off, fakeRequest()), undefined);
    // Only anonymous configured: every request is anonymous, with no group added.
    const only = await buildAuth(options(api, config({ webhook: false, anonymous: true })));
    assert.deepEqual(await authn(only, fakeRequest({ certs: [pki.mallory.cert] })), {
      name: "system:anonymous",
      groups: ["system:unauthenticated"],
    });
  } finally {
    await api.close();
  }
});

Deno.test("buildAuth accepts a bearer token through a TokenReview and drops the header", async () => {
  const api = fakeApiserver();
  api.state.tokens.set("tok-bob", {
    authenticated: true,
    user: { username: "bob", uid: "u-1", groups: ["devs"], extra: { scopes: ["a"] } },
  });
  try {
    const auth = await buildAuth(options(api, config()));
    const req = fakeRequest({ headers: { authorization: "Bearer tok-bob" } });
    assert.deepEqual(await authn(auth, req), {
      name: "bob",
      uid: "u-1",
      groups: ["devs", "system:authenticated"],
      extra: { scopes: ["a"] },
    });
    assert.equal(req.headers.authorization, undefined);
    assert.deepEqual(api.state.requests, [{
      path: "/apis/authentication.k8s.io/v1/tokenreviews",
      body: {
        kind: "TokenReview",
        apiVersion: "authentication.k8s.io/v1",
        metadata: {},
        spec: { token: "tok-bob" },
        status: { user: {} },
      },
    }]);
    // Not a bearer header: no opinion, no review.
    assert.equal(
      await authn(auth, fakeRequest({ headers: { authorization: "Basic eA==" } })),
      undefined,
    );
    assert.equal(api.state.requests.length, 1);
  } finally {
    await api.close();
  }
});

Deno.test("buildAuth rejects a denied token with the review's error or 'invalid bearer token'", async () => {
  const api = fakeApiserver();
  api.state.tokens.set("expired", { authenticated: false, error: "token has expired" });
  try {
    const auth = await buildAuth(options(api, config({ anonymous: true })));
    await assert.rejects(
      authn(auth, fakeRequest({ headers: { authorization: "Bearer expired" } })),
      new AuthenticationError("token has expired"),
    );
    await assert.rejects(
      authn(auth, fakeRequest({ headers: { authorization: "Bearer unknown" } })),
      new AuthenticationError("invalid bearer token"),
    );
  } finally {
    await api.close();
  }
});

Deno.test("buildAuth caches token reviews for cacheTTL, accepted and denied, but not errors", async () => {
  const api = fakeApiserver();
  api.state.tokens.set("good", { authenticated: true, user: { username: "g" } });
  api.state.tokens.set("broken", { authenticated: false, error: "boom" });
  try {
    const auth = await buildAuth(options(api, config()));
    const bearer = (t: string) => fakeRequest({ headers: { authorization: `Bearer ${t}` } });
    const reviews = () => api.state.requests.length;
    assert.equal((await authn(auth, bearer("good")))?.name, "g");
    await assert.rejects(authn(auth, bearer("bad")), AuthenticationError);
    await assert.rejects(authn(auth, bearer("broken")), /boom/);
    assert.equal(reviews(), 3);
    api.clock.step(119_999);
    assert.equal((await authn(auth, bearer("good")))?.name, "g");
    await assert.rejects(authn(auth, bearer("bad")), AuthenticationError);
    await assert.rejects(authn(auth, bearer("broken")), /boom/);
    assert.equal(reviews(), 4, "only the error is asked again");
    api.clock.step(1);
    assert.equal((await authn(auth, bearer("good")))?.name, "g");
    await assert.rejects(authn(auth, bearer("bad")), AuthenticationError);
    assert.equal(reviews(), 6, "both asked again after cacheTTL");
  } finally {
    await api.close();
  }
});

Deno.test("buildAuth retries a TokenReview that failed with a 500, on the clock", async () => {
  const api = fakeApiserver();
  api.state.tokens.set("good", { authenticated: true, user: { username: "g" } });
  api.state.failures = 2;
  try {
    const auth = await buildAuth(options(api, config()));
    const pending = authn(auth, fakeRequest({ headers: { authorization: "Bearer good" } }));
    for (const wait of [500, 750]) {
      for (let i = 0; i < 500 && api.clock.waiters === 0; i++) {
        await new Promise((r) => setTimeout(r, 2));
      }
      assert.equal(api.clock.waiters, 1);
      api.clock.step(wait - 1);
      assert.equal(api.clock.waiters, 1, "not before the back-off");
      api.clock.step(1);
    }
    assert.equal((await pending)?.name, "g");
    assert.equal(api.state.requests.length, 3);
  } finally {
    await api.close();
  }
});

Deno.test("buildAuth reads a bearer token from a websocket subprotocol", async () => {
  const api = fakeApiserver();
  api.state.tokens.set("ws-token", { authenticated: true, user: { username: "w" } });
  try {
    const auth = await buildAuth(options(api, config()));
    const encoded = btoa("ws-token").replace(/=+$/, "").replaceAll("+", "-").replaceAll("/", "_");
    const ws = (protocols: string) =>
      fakeRequest({
        headers: {
          connection: "Upgrade",
          upgrade: "websocket",
          "sec-websocket-protocol": protocols,
        },
      });
    const req = ws(`base64url.bearer.authorization.k8s.io.${encoded}, v5.channel.k8s.io`);
    assert.equal((await authn(auth, req))?.name, "w");
    assert.equal(req.headers["sec-websocket-protocol"], "v5.channel.k8s.io");
    await assert.rejects(
      authn(auth, ws(`base64url.bearer.authorization.k8s.io.${encoded}`)),
      new AuthenticationError("missing additional subprotocol"),
    );
    assert.equal(await authn(auth, ws("v5.channel.k8s.io")), undefined);
  } finally {
    await api.close();
  }
});

Deno.test("buildAuth takes a valid token even when the certificate failed, as upstream's union", async () => {
  const pki = await getPki();
  const api = fakeApiserver();
  api.state.tokens.set("good", { authenticated: true, user: { username: "g" } });
  try {
    const auth = await buildAuth(options(api, config({ clientCAFile: CA_FILE }), pki.ca.cert));
    const req = fakeRequest({
      certs: [pki.mallory.cert],
      headers: { authorization: "Bearer good" },
    });
    assert.equal((await authn(auth, req))?.name, "g");
    const both = fakeRequest({
      certs: [pki.mallory.cert],
      headers: { authorization: "Bearer bad" },
    });
    await assert.rejects(
      authn(auth, both),
      (e: Error) => /^\[verifying certificate .*, invalid bearer token\]$/.test(e.message),
    );
  } finally {
    await api.close();
  }
});

const user: UserInfo = { name: "u", groups: ["g"] };

Deno.test("nodeAuthorizerAttributesList maps every kubelet path as upstream", () => {
  const table: [string, string[]][] = [
    ["/stats/summary", ["stats"]],
    ["/stats", ["stats"]],
    ["/metrics", ["metrics"]],
    ["/metrics/cadvisor", ["metrics"]],
    ["/metrics/probes", ["metrics"]],
    ["/metrics/resource", ["metrics"]],
    ["/logs/", ["log"]],
    ["/logs/syslog", ["log"]],
    ["/spec/", ["proxy"]],
    ["/pods", ["pods", "proxy"]],
    ["/pods/", ["pods", "proxy"]],
    ["/runningpods/", ["pods", "proxy"]],
    ["/configz", ["configz", "proxy"]],
    ["/healthz", ["healthz", "proxy"]],
    ["/healthz/syncloop", ["healthz", "proxy"]],
    ["/statusz", ["statusz"]],
    ["/flagz", ["configz"]],
    ["/exec/ns/pod/c", ["proxy"]],
    ["/attach/ns/pod/c", ["proxy"]],
    ["/portForward/ns/pod", ["proxy"]],
    ["/containerLogs/ns/pod/c", ["proxy"]],
    ["/run/ns/pod/c", ["proxy"]],
    ["/checkpoint/ns/pod/c", ["checkpoint"]],
    ["/podsx", ["proxy"]],
    ["/metricsfoo", ["proxy"]],
    ["/", ["proxy"]],
  ];
  for (const [path, subs] of table) {
    const attrs = nodeAuthorizerAttributesList("node-a", user, "GET", path);
    assert.deepEqual(attrs.map((a) => a.subresource), subs, path);
    for (const a of attrs) {
      assert.deepEqual(
        { ...a, subresource: "" },
        {
          user,
          verb: "get",
          resource: "nodes",
          subresource: "",
          name: "node-a",
          apiGroup: "",
          apiVersion: "v1",
          path,
        },
      );
    }
  }
  // Without KubeletFineGrainedAuthz: the old mapping.
  const old = (p: string) =>
    nodeAuthorizerAttributesList("n", user, "GET", p, false).map((a) => a.subresource);
  assert.deepEqual(old("/pods"), ["proxy"]);
  assert.deepEqual(old("/configz"), ["proxy"]);
  assert.deepEqual(old("/stats/summary"), ["stats"]);
});

Deno.test("nodeAuthorizerAttributes takes the verb from the method, as upstream", () => {
  const verbs: [string, string][] = [
    ["GET", "get"],
    ["POST", "create"],
    ["PUT", "update"],
    ["PATCH", "patch"],
    ["DELETE", "delete"],
    ["HEAD", ""],
    ["OPTIONS", ""],
  ];
  const getter = nodeAuthorizerAttributes("node-a");
  for (const [method, verb] of verbs) {
    const a = getter(user, fakeRequest({ method }), new URL("https://k/exec/a/b/c?x=1"));
    assert.equal(a.verb, verb, method);
    assert.equal(a.subresource, "proxy");
    assert.deepEqual((a as NodeRequestAttributes).alternatives, []);
  }
  const pods = getter(user, fakeRequest(), new URL("https://k/pods")) as NodeRequestAttributes;
  assert.equal(pods.subresource, "pods");
  assert.deepEqual(pods.alternatives.map((x) => x.subresource), ["proxy"]);
});

const podsAttrs: RequestAttributes = {
  user: {
    name: "alice",
    groups: ["g1", "system:authenticated"],
    extra: { "authentication.kubernetes.io/credential-id": ["X509SHA256=ab"] },
  },
  verb: "get",
  resource: "nodes",
  subresource: "pods",
  name: "node-a",
  apiGroup: "",
  apiVersion: "v1",
  path: "/pods",
};

Deno.test("subjectAccessReview sends what upstream's webhook authorizer sends", () => {
  assert.equal(
    JSON.stringify(subjectAccessReview(podsAttrs)),
    JSON.stringify({
      kind: "SubjectAccessReview",
      apiVersion: "authorization.k8s.io/v1",
      metadata: {},
      spec: {
        resourceAttributes: {
          verb: "get",
          version: "v1",
          resource: "nodes",
          subresource: "pods",
          name: "node-a",
        },
        user: "alice",
        groups: ["g1", "system:authenticated"],
        extra: { "authentication.kubernetes.io/credential-id": ["X509SHA256=ab"] },
      },
      status: { allowed: false },
    }),
  );
  const anon = subjectAccessReview({
    ...podsAttrs,
    user: { name: "system:anonymous", uid: "x", groups: [] },
    verb: "",
  });
  assert.deepEqual(anon.spec, {
    resourceAttributes: { version: "v1", resource: "nodes", subresource: "pods", name: "node-a" },
    user: "system:anonymous",
    uid: "x",
  });
});

Deno.test("webhookAuthorizer caches allowed for cacheAuthorizedTTL and denied for cacheUnauthorizedTTL", async () => {
  const api = fakeApiserver();
  api.state.policy = (spec) =>
    spec.user === "alice" ? { allowed: true, reason: "rbac says yes" } : { allowed: false };
  try {
    const authz = webhookAuthorizer({
      client: api.client,
      clock: api.clock,
      logger,
      authorizedTTLMs: 300_000,
      unauthorizedTTLMs: 30_000,
    });
    const bob = { ...podsAttrs, user: { name: "bob", groups: [] } };
    assert.deepEqual(await authz.authorize(podsAttrs), { allowed: true, reason: "rbac says yes" });
    assert.deepEqual(await authz.authorize(bob), { allowed: false, reason: "" });
    assert.deepEqual(api.state.requests.map((r) => r.path), [
      "/apis/authorization.k8s.io/v1/subjectaccessreviews",
      "/apis/authorization.k8s.io/v1/subjectaccessreviews",
    ]);
    assert.deepEqual(api.state.requests[0]?.body, subjectAccessReview(podsAttrs));
    api.clock.step(29_999);
    await authz.authorize(podsAttrs);
    await authz.authorize(bob);
    assert.equal(api.state.requests.length, 2);
    api.clock.step(1);
    await authz.authorize(podsAttrs);
    assert.equal((await authz.authorize(bob)).allowed, false);
    assert.equal(api.state.requests.length, 3, "the denial expired, the allowance did not");
    api.clock.step(270_000);
    await authz.authorize(podsAttrs);
    assert.equal(api.state.requests.length, 4);
    // Other attributes are another question.
    await authz.authorize({ ...podsAttrs, verb: "create" });
    assert.equal(api.state.requests.length, 5);
  } finally {
    await api.close();
  }
});

Deno.test("webhookAuthorizer fails on an answer that both allows and denies", async () => {
  const api = fakeApiserver();
  api.state.policy = () => ({ allowed: true, denied: true });
  try {
    const authz = webhookAuthorizer({
      client: api.client,
      clock: api.clock,
      logger,
      authorizedTTLMs: 1,
      unauthorizedTTLMs: 1,
    });
    await assert.rejects(
      authz.authorize(podsAttrs),
      /webhook subject access review returned both allow and deny response/,
    );
  } finally {
    await api.close();
  }
});

Deno.test("buildAuth authorizes /pods as nodes/pods, then nodes/proxy, and /stats only as stats", async () => {
  const api = fakeApiserver();
  api.state.policy = (spec) => ({ allowed: spec.resourceAttributes?.subresource === "proxy" });
  try {
    const auth = await buildAuth(options(api, config({ webhook: false, anonymous: true })));
    const ask = (path: string) =>
      auth.authorizer.authorize(
        auth.attributes({ name: "m", groups: [] }, fakeRequest(), new URL(`https://k${path}`)),
      );
    const subresources = () =>
      api.state.requests.map((r) => (r.body.spec as ReviewSpec).resourceAttributes?.subresource);
    assert.equal((await ask("/pods")).allowed, true);
    assert.deepEqual(subresources(), ["pods", "proxy"]);
    assert.equal((await ask("/stats/summary")).allowed, false);
    assert.deepEqual(subresources(), ["pods", "proxy", "stats"]);
    api.state.policy = (spec) => ({ allowed: spec.resourceAttributes?.subresource === "healthz" });
    assert.equal((await ask("/healthz")).allowed, true);
    assert.deepEqual(subresources(), ["pods", "proxy", "stats", "healthz"]);
  } finally {
    await api.close();
  }
});

Deno.test("buildAuth in AlwaysAllow mode allows everything without asking", async () => {
  const api = fakeApiserver();
  try {
    const auth = await buildAuth(
      options(api, config({ webhook: false, anonymous: true, mode: "AlwaysAllow" })),
    );
    const attrs = auth.attributes(
      { name: "system:anonymous", groups: ["system:unauthenticated"] },
      fakeRequest({ method: "POST" }),
      new URL("https://k/exec/ns/pod/c"),
    );
    assert.deepEqual(await auth.authorizer.authorize(attrs), { allowed: true, reason: "" });
    assert.equal(api.state.requests.length, 0);
  } finally {
    await api.close();
  }
});

Deno.test("buildAuth reloads the client CA file every minute and keeps the last good one", async () => {
  const pki = await getPki();
  const api = fakeApiserver();
  let pem = pki.ca.cert;
  const ctrl = new AbortController();
  try {
    const auth = await buildAuth({
      ...options(api, config({ clientCAFile: CA_FILE })),
      readFile: () => Promise.resolve(pem),
    });
    const sleeping = async () => {
      for (let i = 0; i < 500 && api.clock.waiters === 0; i++) {
        await new Promise((r) => setTimeout(r, 2));
      }
      assert.equal(api.clock.waiters, 1);
    };
    const loop = auth.runClientCAReload(ctrl.signal);
    const mallory = () => authn(auth, fakeRequest({ certs: [pki.mallory.cert] }));
    await assert.rejects(mallory(), AuthenticationError);
    await sleeping();
    pem = "garbage";
    api.clock.step(60_000);
    await sleeping();
    assert.equal((await authn(auth, fakeRequest({ certs: [pki.alice.cert] })))?.name, "alice");
    pem = pki.ca.cert + pki.otherCa.cert;
    api.clock.step(59_999);
    await assert.rejects(mallory(), AuthenticationError);
    api.clock.step(1);
    await sleeping();
    assert.equal((await mallory())?.name, "mallory");
    ctrl.abort();
    await loop;
  } finally {
    ctrl.abort();
    await api.close();
  }
});

function httpsGet(
  port: number,
  path: string,
  o: { client?: Pair; token?: string } = {},
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({
      host: "127.0.0.1",
      port,
      path,
      agent: false,
      rejectUnauthorized: false,
      cert: o.client?.cert,
      key: o.client?.key,
      headers: o.token ? { authorization: `Bearer ${o.token}` } : {},
    }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

Deno.test("buildAuth behind serveKubeletAPI answers 401, 403 and 200 over real TLS", async () => {
  const pki = await getPki();
  const api = fakeApiserver();
  // The apiserver's kubelet client may do anything; alice nothing.
  api.state.policy = (spec) => ({ allowed: spec.user === "kube-apiserver-kubelet-client" });
  api.state.tokens.set("tok-admin", {
    authenticated: true,
    user: { username: "kube-apiserver-kubelet-client" },
  });
  const ctrl = new AbortController();
  try {
    const auth = await buildAuth(options(api, config({ clientCAFile: CA_FILE }), pki.ca.cert));
    const server = await serveKubeletAPI({
      hostname: "127.0.0.1",
      port: 0,
      tls: pki.serving,
      ...auth,
      routes: [{
        pattern: "/pods",
        methods: ["GET"],
        handler: (r, res) => void res.end(JSON.stringify({ user: r.user.name })),
      }],
      logger,
      signal: ctrl.signal,
    });
    assert.deepEqual(await httpsGet(server.port, "/pods"), {
      status: 401,
      body: "Unauthorized\n",
    });
    assert.deepEqual(await httpsGet(server.port, "/pods", { client: pki.mallory }), {
      status: 401,
      body: "Unauthorized\n",
    });
    assert.deepEqual(await httpsGet(server.port, "/pods", { client: pki.alice }), {
      status: 403,
      body: "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[pods proxy])\n",
    });
    assert.deepEqual(await httpsGet(server.port, "/pods", { client: pki.admin }), {
      status: 200,
      body: JSON.stringify({ user: "kube-apiserver-kubelet-client" }),
    });
    assert.deepEqual(await httpsGet(server.port, "/pods", { token: "tok-admin" }), {
      status: 200,
      body: JSON.stringify({ user: "kube-apiserver-kubelet-client" }),
    });
    const sars = api.state.requests.filter((r) => r.path.endsWith("subjectaccessreviews"));
    assert.deepEqual(
      sars.map((r) => {
        const spec = r.body.spec as ReviewSpec;
        return `${spec.user} ${spec.resourceAttributes?.subresource}`;
      }),
      [
        "alice pods",
        "alice proxy",
        "kube-apiserver-kubelet-client pods",
        "kube-apiserver-kubelet-client pods",
      ],
    );
    ctrl.abort();
    await server.finished;
  } finally {
    ctrl.abort();
    await api.close();
  }
});

/** The apiserver metrics of one test, with a scrape that reads them back. */
function authMetrics(clock: FakeClock) {
  const registry = new MetricsRegistry();
  const metrics = {
    apiserver: new ApiserverMetrics(registry),
    workqueue: new WorkqueueMetrics(registry, { clock }),
  };
  const scrape = async () =>
    new Map(parseExposition(await registry.render()).map((f) => [f.name, f]));
  return { metrics, scrape };
}

Deno.test("buildAuth records each TokenReview attempt and the token cache as upstream", async () => {
  const api = fakeApiserver();
  api.state.tokens.set("good", { authenticated: true, user: { username: "g" } });
  api.state.failures = 1;
  const { metrics, scrape } = authMetrics(api.clock);
  const m = metrics.apiserver;
  try {
    const auth = await buildAuth({ ...options(api, config()), metrics });
    const bearer = () => authn(auth, fakeRequest({ headers: { authorization: "Bearer good" } }));
    const first = bearer();
    const second = bearer();
    for (let i = 0; i < 500 && api.clock.waiters === 0; i++) {
      await new Promise((r) => setTimeout(r, 2));
    }
    // Both wait on the one review, which is in flight (backing off after its 500).
    assert.equal(m.tokenCacheActiveFetches.get({ status: "blocked" }), 2);
    assert.equal(m.tokenCacheActiveFetches.get({ status: "in_flight" }), 1);
    api.clock.step(500);
    assert.equal((await first)?.name, "g");
    assert.equal((await second)?.name, "g");
    assert.equal((await bearer())?.name, "g");
    assert.equal(m.delegatedAuthnRequests.get({ code: "500" }), 1);
    assert.equal(m.delegatedAuthnRequests.get({ code: "201" }), 1);
    assert.equal(m.delegatedAuthnRequestDuration.count({ code: "201" }), 1);
    assert.equal(m.tokenCacheRequests.get({ status: "miss" }), 2);
    assert.equal(m.tokenCacheRequests.get({ status: "hit" }), 1);
    assert.equal(m.tokenCacheFetches.get({ status: "ok" }), 1);
    assert.equal(m.tokenCacheActiveFetches.get({ status: "blocked" }), 0);
    assert.equal(m.tokenCacheActiveFetches.get({ status: "in_flight" }), 0);
    // The misses waited half a second of fake time for the retry.
    const f = await scrape();
    const missSum = f.get("authentication_token_cache_request_duration_seconds")?.samples
      .find((s) => s.suffix === "_sum" && s.labels.status === "miss")?.value;
    assert.equal(missSum, 1);
    assert.equal(
      f.get("apiserver_delegated_authn_request_total")?.help,
      "[ALPHA] Number of HTTP requests partitioned by status code.",
    );
  } finally {
    await api.close();
  }
});

Deno.test("buildAuth records SubjectAccessReview calls by code, <error> without an answer", async () => {
  const api = fakeApiserver();
  api.state.policy = () => ({ allowed: true });
  const { metrics } = authMetrics(api.clock);
  try {
    const auth = await buildAuth({ ...options(api, config()), metrics });
    const user = { name: "alice", groups: [] };
    const attrs = (path: string) =>
      auth.attributes(user, fakeRequest(), new URL(`https://k${path}`));
    assert.equal((await auth.authorizer.authorize(attrs("/metrics"))).allowed, true);
    assert.equal((await auth.authorizer.authorize(attrs("/metrics"))).allowed, true, "cached");
    assert.equal(metrics.apiserver.delegatedAuthzRequests.get({ code: "201" }), 1);
    await api.close();
    await assert.rejects(auth.authorizer.authorize(attrs("/stats/summary")));
    assert.equal(metrics.apiserver.delegatedAuthzRequests.get({ code: "<error>" }), 1);
    assert.equal(metrics.apiserver.delegatedAuthzRequestDuration.count({ code: "<error>" }), 1);
  } finally {
    await api.close().catch(() => {});
  }
});

Deno.test("buildAuth observes each client certificate's remaining lifetime and the CA reload queue", async () => {
  const pki = await getPki();
  const api = fakeApiserver();
  const { metrics, scrape } = authMetrics(api.clock);
  const ctrl = new AbortController();
  try {
    const auth = await buildAuth({
      ...options(api, config({ clientCAFile: CA_FILE, webhook: false }), pki.ca.cert),
      metrics,
    });
    let f = await scrape();
    assert.equal(f.get("workqueue_adds_total")?.samples[0]?.labels.name, CLIENT_CA_QUEUE);
    assert.equal(f.get("workqueue_adds_total")?.samples[0]?.value, 0);
    assert.equal((await authn(auth, fakeRequest({ certs: [pki.alice.cert] })))?.name, "alice");
    // Refused certificates count too, as upstream observes before verifying.
    await assert.rejects(authn(auth, fakeRequest({ certs: [pki.mallory.cert] })));
    const h = metrics.apiserver.clientCertificateExpiration;
    assert.equal(h.count(), 2);
    f = await scrape();
    const buckets = f.get("apiserver_client_certificate_expiration_seconds")!.samples
      .filter((s) => s.suffix === "_bucket");
    // Issued for 30 days: past the 1-week bound, within the 1-month one.
    assert.equal(buckets.find((s) => s.labels.le === "604800")?.value, 0);
    assert.equal(buckets.find((s) => s.labels.le === "2.592e+06")?.value, 2);
    const loop = auth.runClientCAReload(ctrl.signal);
    for (let i = 0; i < 500 && api.clock.waiters === 0; i++) {
      await new Promise((r) => setTimeout(r, 2));
    }
    api.clock.step(60_000);
    for (let i = 0; i < 500 && metrics.workqueue.adds.get({ name: CLIENT_CA_QUEUE }) < 2; i++) {
      await new Promise((r) => setTimeout(r, 2));
    }
    // Checked at start and after a minute, each an add, a take and a finished piece of work.
    assert.equal(metrics.workqueue.adds.get({ name: CLIENT_CA_QUEUE }), 2);
    assert.equal(metrics.workqueue.depth.get({ name: CLIENT_CA_QUEUE }), 0);
    ctrl.abort();
    await loop;
    assert.equal(metrics.workqueue.workDuration.count({ name: CLIENT_CA_QUEUE }), 2);
  } finally {
    ctrl.abort();
    await api.close();
  }
});
