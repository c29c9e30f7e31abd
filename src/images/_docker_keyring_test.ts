import assert from "node:assert/strict";
import type { V1Secret } from "@kubernetes/client-node";
import {
  BasicDockerKeyring,
  isDefaultRegistryMatch,
  keyringFromSecrets,
  parseImageName,
  PullSecretError,
} from "./_docker_keyring.ts";
import { urlsMatch } from "../credentialprovider/urls_match.ts";

const user = (username: string) => ({ username, password: `${username}-pw` });

Deno.test("parseImageName normalises Docker Hub names and defaults the tag", () => {
  assert.deepEqual(parseImageName("nginx"), {
    repo: "docker.io/library/nginx",
    tag: "latest",
    digest: "",
  });
  assert.equal(parseImageName("index.docker.io/foo/bar:1").repo, "docker.io/foo/bar");
  assert.equal(parseImageName("registry.example.com:5000/a/b:2").tag, "2");
  const digest = `sha256:${"a".repeat(64)}`;
  assert.deepEqual(parseImageName(`quay.io/x@${digest}`), {
    repo: "quay.io/x",
    tag: "",
    digest,
  });
  assert.throws(() => parseImageName("Nginx"), /must be lowercase/);
  assert.throws(() => parseImageName("a b"), /invalid reference format/);
});

Deno.test("BasicDockerKeyring matches host, path prefix and globs, most specific first", () => {
  const k = new BasicDockerKeyring();
  k.add({
    "https://registry.example.com/v1/": user("host"),
    "registry.example.com/team": user("team"),
    "*.example.org": user("glob"),
    "registry.example.com:5000": user("port"),
  });
  assert.deepEqual(k.lookup("registry.example.com/team/app").map((c) => c.username), [
    "team",
    "host",
  ]);
  assert.deepEqual(k.lookup("registry.example.com/other").map((c) => c.username), ["host"]);
  assert.deepEqual(k.lookup("a.example.org/x").map((c) => c.username), ["glob"]);
  assert.deepEqual(k.lookup("a.b.example.org/x"), []);
  assert.deepEqual(k.lookup("registry.example.com:5000/x").map((c) => c.username), ["port"]);
  assert.deepEqual(k.lookup("quay.io/x"), []);
});

Deno.test("BasicDockerKeyring uses index.docker.io credentials for Docker Hub images", () => {
  const k = new BasicDockerKeyring();
  k.add({ "https://index.docker.io/v1/": user("hub") });
  assert.deepEqual(k.lookup("docker.io/library/nginx").map((c) => c.username), ["hub"]);
  assert.deepEqual(k.lookup("quay.io/x"), []);
  const d = new BasicDockerKeyring();
  d.add({ "docker.io": user("d") });
  assert.deepEqual(d.lookup("docker.io/library/nginx").map((c) => c.username), ["d"]);
});

Deno.test("BasicDockerKeyring decodes auth as base64 user:password", () => {
  const k = new BasicDockerKeyring();
  k.add({ "quay.io": { auth: btoa("bob:s3:cret"), email: "b@x" } });
  assert.deepEqual(k.lookup("quay.io/x"), [{ username: "bob", password: "s3:cret", email: "b@x" }]);
  assert.throws(() => new BasicDockerKeyring().add({ "q.io": { auth: btoa("nocolon") } }), /':'/);
});

Deno.test("urlsMatch and isDefaultRegistryMatch follow upstream's rules", () => {
  assert.equal(urlsMatch("*.io", "quay.io/x"), true);
  assert.equal(urlsMatch("quay.io", "quay.io:443/x"), false);
  assert.equal(urlsMatch("quay.io/a", "quay.io/b"), false);
  assert.equal(isDefaultRegistryMatch("ubuntu"), true);
  assert.equal(isDefaultRegistryMatch("foo/bar"), true);
  assert.equal(isDefaultRegistryMatch("docker.io/foo/bar"), true);
  assert.equal(isDefaultRegistryMatch("localhost:5000/x"), false);
  assert.equal(isDefaultRegistryMatch("quay.io/x"), false);
});

Deno.test("keyringFromSecrets reads dockerconfigjson and dockercfg secrets in order", () => {
  const enc = (o: unknown) => btoa(JSON.stringify(o));
  const meta = (name: string) => ({ name, namespace: "ns", uid: `uid-${name}` });
  const secrets: V1Secret[] = [
    {
      metadata: meta("opaque"),
      type: "Opaque",
      data: { ".dockerconfigjson": enc({ auths: { "quay.io": user("opaque") } }) },
    },
    {
      metadata: meta("json"),
      type: "kubernetes.io/dockerconfigjson",
      data: { ".dockerconfigjson": enc({ auths: { "quay.io": user("json") } }) },
    },
    {
      metadata: meta("cfg"),
      type: "kubernetes.io/dockercfg",
      data: { ".dockercfg": enc({ "quay.io": user("cfg") }) },
    },
    // Of the right type without its key, or an empty one: skipped.
    { metadata: meta("empty"), type: "kubernetes.io/dockercfg", data: { ".dockercfg": "" } },
    { metadata: meta("other-key"), type: "kubernetes.io/dockercfg", data: { x: enc({}) } },
  ];
  const found = keyringFromSecrets(secrets).lookupTracked("quay.io/x");
  assert.deepEqual(found.map((c) => [c.auth.username, c.secret?.name]), [
    ["json", "json"],
    ["cfg", "cfg"],
  ]);
  assert.deepEqual(found[0]?.secret, { name: "json", namespace: "ns", uid: "uid-json" });
});

Deno.test("keyringFromSecrets merges the secrets: the most specific registry first, across them", () => {
  const enc = (o: unknown) => btoa(JSON.stringify(o));
  const secret = (name: string, auths: Record<string, unknown>): V1Secret => ({
    metadata: { name, namespace: "ns", uid: name },
    type: "kubernetes.io/dockerconfigjson",
    data: { ".dockerconfigjson": enc({ auths }) },
  });
  // Upstream's one BasicDockerKeyring: quay.io/team (second secret) before quay.io (first).
  const k = keyringFromSecrets([
    secret("wide", { "quay.io": user("wide") }),
    secret("team", { "quay.io/team": user("team") }),
  ]);
  assert.deepEqual(k.lookupTracked("quay.io/team/app").map((c) => c.secret?.name), [
    "team",
    "wide",
  ]);
  assert.deepEqual(k.lookupTracked("quay.io/other").map((c) => c.secret?.name), ["wide"]);
});

Deno.test("keyringFromSecrets fails as a whole on a secret that does not parse, naming it", () => {
  const good: V1Secret = {
    metadata: { name: "good", namespace: "ns" },
    type: "kubernetes.io/dockercfg",
    data: { ".dockercfg": btoa(JSON.stringify({ "quay.io": user("good") })) },
  };
  const bad = (name: string, data: string): V1Secret => ({
    metadata: { name, namespace: "ns" },
    type: "kubernetes.io/dockerconfigjson",
    data: { ".dockerconfigjson": btoa(data) },
  });
  assert.throws(
    () => keyringFromSecrets([good, bad("broken", "not json")]),
    (e: Error) =>
      e instanceof PullSecretError &&
      e.message.startsWith("pull secret ns/broken: .dockerconfigjson does not parse: "),
  );
  assert.throws(
    () =>
      keyringFromSecrets([
        bad("bad-auth", JSON.stringify({ auths: { "q.io": { auth: "eA==" } } })),
      ]),
    /pull secret ns\/bad-auth: .dockerconfigjson does not parse: the auth of registry 'q.io' has no ':'/,
  );
  assert.throws(
    () => keyringFromSecrets([bad("list", JSON.stringify({ auths: [] }))]),
    /pull secret ns\/list: .dockerconfigjson does not parse: expected an object of registries, got \[\]/,
  );
  // JSON null is an empty config, as Go reads it.
  assert.deepEqual(keyringFromSecrets([bad("null", "null")]).lookup("quay.io/x"), []);
});
