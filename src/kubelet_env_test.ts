import assert from "node:assert/strict";
import type {
  V1ConfigMap,
  V1Container,
  V1EnvFromSource,
  V1EnvVar,
  V1Pod,
  V1Secret,
  V1Service,
} from "@kubernetes/client-node";
import type { ObjectRef } from "./client/record.ts";
import { createLogger } from "./klog/klog.ts";
import {
  EnvError,
  EnvFileError,
  type EnvSource,
  makeEnvironmentVariables,
  type MakeEnvOptions,
  parseEnvFile,
  secureJoin,
} from "./kubelet_env.ts";
import type { MountedVolume } from "./volume/plugin.ts";

const b64 = (s: string) => btoa(String.fromCharCode(...new TextEncoder().encode(s)));

const CONFIG_MAPS: Record<string, V1ConfigMap> = {
  app: {
    metadata: { name: "app" },
    data: { MODE: "fast", LEVEL: "3", "bad key": "x", "1st": "y" },
  },
  other: { metadata: { name: "other" }, data: { MODE: "slow" } },
};
const SECRETS: Record<string, V1Secret> = {
  creds: { metadata: { name: "creds" }, data: { USER: b64("admin"), PASS: b64("pä$$") } },
};

interface FakeSource extends EnvSource {
  readonly calls: string[];
}

function source(): FakeSource {
  const calls: string[] = [];
  return {
    calls,
    getConfigMap(ns, name) {
      calls.push(`configmap ${ns}/${name}`);
      return Promise.resolve(CONFIG_MAPS[name]);
    },
    getSecret(ns, name) {
      calls.push(`secret ${ns}/${name}`);
      return Promise.resolve(SECRETS[name]);
    },
  };
}

function pod(containers: V1Container[] = []): V1Pod {
  return {
    metadata: {
      name: "web",
      namespace: "prod",
      uid: "uid-1",
      labels: { app: "web", tier: "front" },
      annotations: { "example.com/owner": "team-a" },
    },
    spec: {
      nodeName: "node-1",
      serviceAccountName: "web-sa",
      containers: [{ name: "main" }, ...containers],
      initContainers: [{ name: "init", resources: { requests: { cpu: "100m" } } }],
    },
  };
}

async function envOf(
  container: Partial<V1Container>,
  opts: Partial<MakeEnvOptions> = {},
): Promise<Record<string, string>> {
  const list = await makeEnvironmentVariables({
    pod: pod(),
    container: { name: "c", ...container },
    podIPs: ["10.0.0.5", "fd00::5"],
    hostIPs: ["192.0.2.1", "2001:db8::1"],
    nodeAllocatable: { cpu: "4", memory: "8Gi", "ephemeral-storage": "100Gi" },
    source: source(),
    ...opts,
  });
  return Object.fromEntries(list.map((e) => [e.name, e.value]));
}

const one = async (e: Omit<V1EnvVar, "name">, opts: Partial<MakeEnvOptions> = {}) =>
  (await envOf({ env: [{ name: "V", ...e }] }, opts))["V"];

Deno.test("makeEnvironmentVariables resolves every downward API fieldRef", async () => {
  const cases: Array<[string, string]> = [
    ["metadata.name", "web"],
    ["metadata.namespace", "prod"],
    ["metadata.uid", "uid-1"],
    ["metadata.labels['app']", "web"],
    ["metadata.labels['missing']", ""],
    ["metadata.annotations['example.com/owner']", "team-a"],
    ["metadata.labels", 'app="web"\ntier="front"'],
    ["spec.nodeName", "node-1"],
    ["spec.host", "node-1"],
    ["spec.serviceAccountName", "web-sa"],
    ["status.hostIP", "192.0.2.1"],
    ["status.hostIPs", "192.0.2.1,2001:db8::1"],
    ["status.podIP", "10.0.0.5"],
    ["status.podIPs", "10.0.0.5,fd00::5"],
  ];
  for (const [fieldPath, want] of cases) {
    assert.equal(
      await one({ valueFrom: { fieldRef: { apiVersion: "v1", fieldPath } } }),
      want,
      fieldPath,
    );
  }
});

Deno.test("makeEnvironmentVariables orders pod IPs by the node's primary family", async () => {
  const opts = { podIPs: ["10.0.0.5", "fd00::5", "10.0.0.6"], hostIPs: ["2001:db8::1"] };
  assert.equal(
    await one({ valueFrom: { fieldRef: { fieldPath: "status.podIP" } } }, opts),
    "fd00::5",
  );
  assert.equal(
    await one({ valueFrom: { fieldRef: { fieldPath: "status.podIPs" } } }, opts),
    "fd00::5,10.0.0.5",
  );
});

Deno.test("makeEnvironmentVariables rejects unsupported fieldRefs with upstream's messages", async () => {
  const cases: Array<[string | undefined, string, string, string[]?]> = [
    ["v2", "metadata.name", "unsupported pod version: v2"],
    ["v1", "spec.containers", "field label not supported: spec.containers"],
    ["v1", "spec.nodeName['x']", "field label does not support subscript: spec.nodeName['x']"],
    ["v1", "status.phase", "unsupported fieldPath: status.phase"],
    ["v1", "status.hostIP", "host IP unknown; known addresses: []", []],
  ];
  for (const [apiVersion, fieldPath, message, hostIPs] of cases) {
    await assert.rejects(
      one({ valueFrom: { fieldRef: { apiVersion, fieldPath } } }, hostIPs ? { hostIPs } : {}),
      (e) => e instanceof EnvError && e.message === message,
      fieldPath,
    );
  }
});

Deno.test("makeEnvironmentVariables resolves resourceFieldRef with divisors, rounding up", async () => {
  const resources = {
    requests: { cpu: "250m", memory: "100Mi", "hugepages-2Mi": "4Mi" },
    limits: { cpu: "1500m", memory: "1Gi" },
  };
  const cases: Array<[string, string | undefined, string, string?]> = [
    ["limits.cpu", undefined, "2"],
    ["limits.cpu", "1m", "1500"],
    ["requests.cpu", undefined, "1"],
    ["requests.cpu", "1m", "250"],
    ["requests.cpu", "100m", "3"],
    ["limits.memory", undefined, String(2 ** 30)],
    ["limits.memory", "1Mi", "1024"],
    ["requests.memory", "1M", "105"],
    ["requests.memory", "1Gi", "1"],
    ["requests.hugepages-2Mi", "1Mi", "4"],
    ["requests.ephemeral-storage", undefined, "0"],
    // A missing limit is the node's allocatable.
    ["limits.ephemeral-storage", "1Gi", "100"],
    // Another container by name: init containers keep their missing limits, as upstream.
    ["requests.cpu", "1m", "100", "init"],
    ["limits.cpu", "1m", "0", "init"],
    ["limits.cpu", undefined, "4", "main"],
  ];
  for (const [resource, divisor, want, containerName] of cases) {
    const env = await envOf({
      resources,
      env: [{ name: "V", valueFrom: { resourceFieldRef: { resource, divisor, containerName } } }],
    });
    assert.equal(env["V"], want, `${resource} / ${divisor ?? "1"} of ${containerName ?? "self"}`);
  }
});

Deno.test("makeEnvironmentVariables defaults a missing or zero limit to node allocatable only", async () => {
  const env = await envOf({
    resources: { limits: { memory: "0" } },
    env: [
      {
        name: "MEM",
        valueFrom: { resourceFieldRef: { resource: "limits.memory", divisor: "1Gi" } },
      },
      { name: "CPU", valueFrom: { resourceFieldRef: { resource: "limits.cpu" } } },
      { name: "REQ", valueFrom: { resourceFieldRef: { resource: "requests.cpu", divisor: "1m" } } },
    ],
  });
  assert.deepEqual(env, { MEM: "8", CPU: "4", REQ: "0" });
  await assert.rejects(
    one({ valueFrom: { resourceFieldRef: { resource: "limits.cpu" } } }, {
      nodeAllocatable: undefined,
    }),
    { name: "EnvError", message: "failed to find node object, expected a node" },
  );
  await assert.rejects(
    one({ valueFrom: { resourceFieldRef: { resource: "limits.gpu" } } }),
    { message: "unsupported container resource : limits.gpu" },
  );
  await assert.rejects(
    one({ valueFrom: { resourceFieldRef: { resource: "limits.cpu", containerName: "nope" } } }),
    { message: "container nope not found" },
  );
});

Deno.test("makeEnvironmentVariables resolves configMap and secret key refs as upstream", async () => {
  const cm = (name: string, key: string, optional?: boolean) => ({
    valueFrom: { configMapKeyRef: { name, key, optional } },
  });
  const sec = (name: string, key: string, optional?: boolean) => ({
    valueFrom: { secretKeyRef: { name, key, optional } },
  });
  assert.equal(await one(cm("app", "MODE")), "fast");
  assert.equal(await one(sec("creds", "PASS")), "pä$$");
  // Optional: a missing object or key leaves the variable out.
  assert.deepEqual(
    await envOf({
      env: [{ name: "A", ...cm("gone", "K", true) }, { name: "B", ...cm("app", "K", true) }],
    }),
    {},
  );
  assert.deepEqual(await envOf({ env: [{ name: "A", ...sec("creds", "K", true) }] }), {});
  const failures: Array<[Omit<V1EnvVar, "name">, string]> = [
    [cm("gone", "K"), 'configmap "gone" not found'],
    [cm("app", "K"), "couldn't find key K in ConfigMap prod/app"],
    [sec("gone", "K"), 'secret "gone" not found'],
    [sec("creds", "K"), "couldn't find key K in Secret prod/creds"],
  ];
  for (const [e, message] of failures) {
    await assert.rejects(
      one(e),
      (err) => err instanceof EnvError && err.message === message,
      message,
    );
  }
});

Deno.test("makeEnvironmentVariables without a source fails as upstream without a kube client", async () => {
  await assert.rejects(
    one({ valueFrom: { configMapKeyRef: { name: "app", key: "MODE", optional: true } } }, {
      source: undefined,
    }),
    { message: "couldn't get configMap prod/app, no kubeClient defined" },
  );
  await assert.rejects(
    envOf({ envFrom: [{ secretRef: { name: "creds" } }] }, { source: undefined }),
    { message: "couldn't get secret prod/creds, no kubeClient defined" },
  );
  // Plain values and the downward API need no source.
  assert.equal(await one({ value: "x" }, { source: undefined }), "x");
});

Deno.test("makeEnvironmentVariables fetches each object once per container", async () => {
  const src = source();
  await envOf({
    envFrom: [{ configMapRef: { name: "app" } }],
    env: [
      { name: "A", valueFrom: { configMapKeyRef: { name: "app", key: "MODE" } } },
      { name: "B", valueFrom: { configMapKeyRef: { name: "app", key: "LEVEL" } } },
      { name: "C", valueFrom: { secretKeyRef: { name: "creds", key: "USER" } } },
      { name: "D", valueFrom: { secretKeyRef: { name: "creds", key: "PASS" } } },
    ],
  }, { source: src });
  assert.deepEqual(src.calls, ["configmap prod/app", "secret prod/creds"]);
});

Deno.test("makeEnvironmentVariables takes envFrom with prefixes, every key as it is", async () => {
  const events: Array<{ ref: ObjectRef; type: string; reason: string; message: string }> = [];
  const recorder = {
    event: (ref: ObjectRef, type: "Normal" | "Warning", reason: string, message: string) =>
      events.push({ ref, type, reason, message }),
  };
  const envFrom: V1EnvFromSource[] = [
    { configMapRef: { name: "app" } },
    { secretRef: { name: "creds" }, prefix: "DB_" },
    { configMapRef: { name: "gone", optional: true } },
  ];
  const env = await envOf({ envFrom }, { recorder });
  // Keys that are not C identifiers pass (RelaxedEnvironmentVariableValidation, GA upstream).
  assert.deepEqual(env, {
    MODE: "fast",
    LEVEL: "3",
    "1st": "y",
    "bad key": "x",
    DB_USER: "admin",
    DB_PASS: "pä$$",
  });
  assert.deepEqual(events, []);
  await assert.rejects(envOf({ envFrom: [{ configMapRef: { name: "gone" } }] }), {
    message: 'configmap "gone" not found',
  });
});

Deno.test("makeEnvironmentVariables lets env override envFrom and later envFrom override earlier", async () => {
  const list = await makeEnvironmentVariables({
    pod: pod(),
    container: {
      name: "c",
      envFrom: [{ configMapRef: { name: "app" } }, { configMapRef: { name: "other" } }],
      env: [
        { name: "LEVEL", value: "9" },
        { name: "EXTRA", value: "e" },
        { name: "EXTRA", value: "f" },
      ],
    },
    podIPs: [],
    hostIPs: [],
    source: source(),
  });
  assert.deepEqual(list, [
    { name: "MODE", value: "slow" },
    { name: "LEVEL", value: "9" },
    { name: "bad key", value: "x" },
    { name: "1st", value: "y" },
    { name: "EXTRA", value: "f" },
  ]);
});

Deno.test("makeEnvironmentVariables expands $(VAR) against envFrom and earlier env only", async () => {
  const env = await envOf({
    envFrom: [{ configMapRef: { name: "other" } }],
    env: [
      { name: "HOST", value: "db" },
      { name: "URL", value: "pg://$(HOST):$(PORT)/$(MODE)" },
      { name: "PORT", value: "5432" },
      { name: "ESC", value: "$$(HOST) $$$(HOST) $(HOST" },
      { name: "FROM", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
      { name: "REF", value: "$(FROM)-$(MODE)" },
      // A resolved valueFrom is taken as is, never expanded.
      { name: "RAW", valueFrom: { configMapKeyRef: { name: "dollar", key: "V" } } },
    ],
  }, {
    source: {
      ...source(),
      getConfigMap: (_ns, name) =>
        Promise.resolve(
          name === "dollar" ? { data: { V: "$(HOST)" } } : CONFIG_MAPS[name],
        ),
    },
  });
  assert.deepEqual(env, {
    MODE: "slow",
    HOST: "db",
    URL: "pg://db:$(PORT)/slow",
    PORT: "5432",
    ESC: "$(HOST) $db $(HOST",
    FROM: "web",
    REF: "web-slow",
    RAW: "$(HOST)",
  });
});

Deno.test("makeEnvironmentVariables fails fileKeyRef loudly without pod volumes", async () => {
  await assert.rejects(
    one({ valueFrom: { fileKeyRef: { volumeName: "v", path: "p", key: "k" } } }),
    /not supported yet/,
  );
});

const services = (synced = true): NonNullable<MakeEnvOptions["services"]> => {
  const all: V1Service[] = [
    {
      metadata: { namespace: "default", name: "kubernetes" },
      spec: { clusterIP: "10.96.0.1", ports: [{ name: "https", port: 443 }] },
    },
    {
      metadata: { namespace: "prod", name: "db" },
      spec: { clusterIP: "fd00::7", ports: [{ port: 5432 }] },
    },
    {
      metadata: { namespace: "prod", name: "dns" },
      spec: { clusterIP: "None", ports: [{ port: 53 }] },
    },
    {
      metadata: { namespace: "dev", name: "cache" },
      spec: { clusterIP: "10.1.0.3", ports: [{ port: 6379 }] },
    },
  ];
  return {
    list: (ns) => all.filter((s) => ns === undefined || s.metadata?.namespace === ns),
    hasSynced: () => synced,
  };
};

Deno.test("makeEnvironmentVariables adds service links last, below envFrom and env", async () => {
  const list = await makeEnvironmentVariables({
    pod: pod(),
    container: {
      name: "c",
      envFrom: [{ configMapRef: { name: "dollar" } }],
      env: [
        { name: "DB_SERVICE_PORT", value: "1" },
        { name: "URL", value: "pg://$(DB_SERVICE_HOST):$(DB_SERVICE_PORT)/$(CACHE_SERVICE_HOST)" },
        { name: "K8S", value: "$(KUBERNETES_PORT)" },
      ],
    },
    podIPs: [],
    hostIPs: [],
    source: { ...source(), getConfigMap: () => Promise.resolve({ data: { DB_PORT: "mine" } }) },
    services: services(),
  });
  const env = Object.fromEntries(list.map((e) => [e.name, e.value]));
  // What the container defines wins; `$(VAR)` sees service variables; other namespaces' and
  // headless services give nothing.
  assert.equal(env["DB_PORT"], "mine");
  assert.equal(env["DB_SERVICE_PORT"], "1");
  assert.equal(env["URL"], "pg://fd00::7:1/$(CACHE_SERVICE_HOST)");
  assert.equal(env["K8S"], "tcp://10.96.0.1:443");
  assert.equal(env["DB_PORT_5432_TCP"], "tcp://[fd00::7]:5432");
  assert.equal(env["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
  assert.equal(env["CACHE_SERVICE_HOST"], undefined);
  assert.equal(env["DNS_SERVICE_HOST"], undefined);
  // Each name once; the container's own variables first, in their order.
  assert.equal(new Set(list.map((e) => e.name)).size, list.length);
  assert.deepEqual(list.slice(0, 4).map((e) => e.name), [
    "DB_PORT",
    "DB_SERVICE_PORT",
    "URL",
    "K8S",
  ]);
  assert.equal(list[4]?.name, "DB_SERVICE_HOST");
});

Deno.test("makeEnvironmentVariables with enableServiceLinks false keeps only the kubernetes service", async () => {
  const p = pod();
  p.spec = { ...p.spec!, enableServiceLinks: false };
  const list = await makeEnvironmentVariables({
    pod: p,
    container: { name: "c" },
    podIPs: [],
    hostIPs: [],
    services: services(),
  });
  assert.deepEqual(list.filter((e) => e.name.endsWith("_SERVICE_HOST")), [
    { name: "KUBERNETES_SERVICE_HOST", value: "10.96.0.1" },
  ]);
  // Standalone, with no Services at all: no service variables.
  assert.deepEqual(await envOf({}, { services: undefined }), {});
});

Deno.test("makeEnvironmentVariables refuses to build env before services are listed, except for static pods", async () => {
  await assert.rejects(envOf({}, { services: services(false) }), (e) =>
    e instanceof EnvError &&
    e.message === "services have not yet been read at least once, cannot construct envvars");
  const p = pod();
  p.metadata!.annotations = { "kubernetes.io/config.source": "file" };
  const list = await makeEnvironmentVariables({
    pod: p,
    container: { name: "c", env: [{ name: "A", value: "a" }] },
    podIPs: [],
    hostIPs: [],
    services: services(false),
  });
  assert.equal(list[0]?.name, "A");
  assert.equal(list.find((e) => e.name === "KUBERNETES_SERVICE_HOST")?.value, "10.96.0.1");
});

/** A temp dir as the `envs` volume of pod uid-1, with `files` written into it. */
async function withVolume(
  files: Record<string, string>,
  fn: (opts: Partial<MakeEnvOptions>, dir: string) => Promise<void>,
): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "kubelet-env-" });
  try {
    for (const [name, text] of Object.entries(files)) {
      await Deno.writeTextFile(`${dir}/${name}`, text);
    }
    const mounted: MountedVolume = { hostPath: dir, readOnly: false, selinuxRelabel: false };
    const podVolumes = (uid: string) => new Map(uid === "uid-1" ? [["envs", mounted]] : []);
    await fn({ podVolumes }, dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

const fileRef = (key: string, path = "app.env", optional?: boolean, volumeName = "envs") => ({
  valueFrom: { fileKeyRef: { volumeName, path, key, optional } },
});

Deno.test("makeEnvironmentVariables reads fileKeyRef keys from an env file in the volume", async () => {
  const text = "# settings\nMODE='fast'\n  LEVEL='3' # inline\nMULTI='a\nb'\nEMPTY=''\n";
  await withVolume({ "app.env": text }, async (opts) => {
    const env = await envOf({
      env: [
        { name: "M", ...fileRef("MODE") },
        { name: "L", ...fileRef("LEVEL") },
        { name: "X", ...fileRef("MULTI") },
        { name: "REF", value: "$(M)-$(L)" },
      ],
    }, opts);
    assert.deepEqual(env, { M: "fast", L: "3", X: "a\nb", REF: "fast-3" });
    // Optional: a missing or empty key leaves the variable out.
    assert.deepEqual(
      await envOf({
        env: [{ name: "A", ...fileRef("NOPE", undefined, true) }, {
          name: "B",
          ...fileRef("EMPTY", undefined, true),
        }],
      }, opts),
      {},
    );
  });
});

Deno.test("makeEnvironmentVariables fails fileKeyRef with upstream's messages", async () => {
  await withVolume(
    { "app.env": "MODE='fast'\nEMPTY=''\n", "bad.env": "MODE=fast\n" },
    async (opts, dir) => {
      const cases: Array<[Omit<V1EnvVar, "name">, string]> = [
        [fileRef("NOPE"), `environment variable key "NOPE" not found in file "${dir}/app.env"`],
        [fileRef("EMPTY"), `environment variable key "EMPTY" not found in file "${dir}/app.env"`],
        [
          fileRef("MODE", "app.env", false, "gone"),
          'cannot find the volume "gone" referenced by FileKeyRef',
        ],
        [fileRef("MODE", "bad.env"), "couldn't parse env file"],
        // A missing file is a parse failure even when optional, as upstream.
        [fileRef("MODE", "missing.env", true), "couldn't parse env file"],
      ];
      for (const [e, message] of cases) {
        await assert.rejects(
          one(e, opts),
          (err) => err instanceof EnvError && err.message === message,
          message,
        );
      }
    },
  );
});

Deno.test("makeEnvironmentVariables refuses fileKeyRef into an image volume, which has no host path", async () => {
  const image: MountedVolume = { hostPath: "", readOnly: true, selinuxRelabel: false };
  const podVolumes = (uid: string) => new Map(uid === "uid-1" ? [["img", image]] : []);
  const message = 'failed to get host path for volume "img": path is empty';
  await assert.rejects(
    one(fileRef("MODE", "app.env", false, "img"), { podVolumes }),
    (err) => err instanceof EnvError && err.message === message,
  );
});

Deno.test("makeEnvironmentVariables logs why an env file cannot be parsed", async () => {
  await withVolume({ "bad.env": "MODE=fast\n" }, async (opts) => {
    const lines: Array<{ err: unknown; msg: string; kv?: Record<string, unknown> }> = [];
    const logger = createLogger({ write: () => {}, now: () => new Date(0), pid: 1 });
    const recording = {
      ...logger,
      error: (err: unknown, msg: string, kv?: Record<string, unknown>) =>
        lines.push({ err, msg, kv }),
    };
    await assert.rejects(
      one(fileRef("MODE", "bad.env"), { ...opts, logger: recording }),
      (e) => e instanceof EnvError && e.cause instanceof EnvFileError,
    );
    assert.equal(lines.length, 1);
    assert.equal(lines[0]?.msg, "Failed to parse env file");
    assert.equal(
      (lines[0]?.err as Error).message,
      "invalid environment variable format at line 1: value must be enclosed in single quotes",
    );
    assert.equal(String(lines[0]?.kv?.["pod"]), "prod/web");
  });
});

Deno.test("makeEnvironmentVariables keeps fileKeyRef paths inside the volume", async () => {
  const outside = await Deno.makeTempDir({ prefix: "kubelet-env-outside-" });
  try {
    await Deno.writeTextFile(`${outside}/secret.env`, "MODE='stolen'\n");
    await withVolume({ "app.env": "MODE='mine'\n" }, async (opts, dir) => {
      await Deno.mkdir(`${dir}/sub`);
      await Deno.symlink(`${outside}/secret.env`, `${dir}/abs.env`);
      await Deno.symlink("../../../../../../../../..", `${dir}/sub/up`);
      await Deno.symlink("/app.env", `${dir}/sub/root.env`);
      // An absolute link resolves against the volume: abs.env is <vol>/<outside>/secret.env.
      await assert.rejects(one(fileRef("MODE", "abs.env"), opts), {
        message: "couldn't parse env file",
      });
      assert.equal(await one(fileRef("MODE", "sub/root.env"), opts), "mine");
      assert.equal(await one(fileRef("MODE", "sub/up/app.env"), opts), "mine");
      assert.equal(await one(fileRef("MODE", "../../app.env"), opts), "mine");
    });
  } finally {
    await Deno.remove(outside, { recursive: true });
  }
});

Deno.test("secureJoin resolves links and dot-dots within the root", async () => {
  const root = await Deno.makeTempDir({ prefix: "kubelet-securejoin-" });
  try {
    await Deno.mkdir(`${root}/a/b`, { recursive: true });
    await Deno.symlink("b", `${root}/a/rel`);
    await Deno.symlink("/a", `${root}/abs`);
    await Deno.symlink("loop", `${root}/loop`);
    assert.equal(await secureJoin(root, "a/rel/f"), `${root}/a/b/f`);
    assert.equal(await secureJoin(root, "abs/../../x"), `${root}/x`);
    assert.equal(await secureJoin(root, "missing/../a//./b"), `${root}/a/b`);
    assert.equal(await secureJoin(root, ".."), root);
    await assert.rejects(secureJoin(root, "loop"), /too many levels of symbolic links/);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("parseEnvFile follows upstream's strict single-quote format", async () => {
  const dir = await Deno.makeTempDir({ prefix: "kubelet-envfile-" });
  try {
    const parse = async (text: string, key: string) => {
      await Deno.writeTextFile(`${dir}/f.env`, text);
      return await parseEnvFile(`${dir}/f.env`, key);
    };
    const ok: Array<[string, string, string]> = [
      ["A='x'\n", "A", "x"],
      ["\t  A='x y'  # note\r\n", "A", "x y"],
      ["A='$(B) \\n \"q\"'", "A", '$(B) \\n "q"'],
      ["A='one\n\n# kept\ntwo'\n", "A", "one\n\n# kept\ntwo"],
      ["A= 'ignored'\n", "A", ""],
      ["A='first'\nA='second'\n", "A", "first"],
      ["A='x'\n", "B", ""],
      ["A='x'\nnot a line\n", "A", "x"], // the first match ends the read
      ["A='x'", "A", "x"],
    ];
    for (const [text, key, want] of ok) {
      assert.equal(await parse(text, key), want, JSON.stringify(text));
    }
    const bad: Array<[string, string]> = [
      ["A='x'\nnot a line\n", "invalid environment variable format at line 2: missing '='"],
      ["='x'\n", "invalid environment variable format at line 1: empty variable name"],
      [
        "A ='x'\n",
        "invalid environment variable format at line 1: whitespace before '=' is not allowed",
      ],
      [
        "A=x\n",
        "invalid environment variable format at line 1: value must be enclosed in single quotes",
      ],
      [
        "A=\n",
        "invalid environment variable format at line 1: value must be enclosed in single quotes",
      ],
      // No escapes inside quotes: a second quote ends the value, and what follows is an error.
      [
        "A='it''s'\n",
        "invalid environment variable format at line 1: unexpected content after closing quote",
      ],
      [
        "\nA='x\ny' z\n",
        "invalid environment variable format at line 3: unexpected content after closing quote",
      ],
      [
        "\nA='x\ny\n",
        "invalid environment variable format starting at line 2: unclosed single quote",
      ],
      [
        `A='${"x".repeat(70_000)}'\n`,
        'error reading environment variable file "F": bufio.Scanner: token too long',
      ],
    ];
    for (const [text, message] of bad) {
      await assert.rejects(
        parse(text, "Z"),
        (e) => e instanceof EnvFileError && e.message === message.replace("F", `${dir}/f.env`),
        message,
      );
    }
    // A line just under Go's 64 KiB token limit is fine.
    assert.equal((await parse(`A='${"x".repeat(65_000)}'\n`, "A")).length, 65_000);
    await assert.rejects(
      parseEnvFile(`${dir}/missing.env`, "A"),
      /^EnvFileError: failed to open environment variable file/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
