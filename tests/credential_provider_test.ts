/**
 * Image credential provider plugins (KEP-2133, KEP-4412) end to end: the agent against a real
 * kube-apiserver, a private containerd and a registry behind basic auth, started with
 * `--image-credential-provider-config` and `--image-credential-provider-bin-dir` naming plugins
 * this test writes (shell scripts that log each CredentialProviderRequest and print a
 * CredentialProviderResponse with the registry's credentials). Pods without imagePullSecrets
 * pull through the plugin; a second pull within the cache duration does not run it again; an
 * image no `matchImages` entry matches fails with the registry's 401 as without a plugin; a
 * provider with `tokenAttributes` gets a token of the pod's service account for its audience;
 * a broken configuration stops the agent at start naming the file, the field and the value.
 * Upstream's node e2e tests run a credential provider the same way (test/e2e_node/plugins/
 * gcp-credential-provider, installed by the node e2e builder).
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import { type ImageSpec, importImages, PAUSE } from "./images.ts";
import type { KubeClient } from "../src/client/kube_client.ts";
import { e2eSuite, startNodeAgent, waitPod } from "./node_harness.ts";
import type { RunningAgent } from "./agent_process.ts";
import {
  pushImage,
  type RegistryAuth,
  type RegistryHandle,
  startRegistry,
} from "./registry_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("credential provider e2e tests", [
  "containerd",
  "ctr",
  "runc",
  "openssl",
  "go",
  "docker-registry",
  "htpasswd",
]);
const NODE = "kts-credprov-e2e";
const BROKEN_NODE = "kts-credprov-broken";
const NS = "default";
const AUTH: RegistryAuth = { username: "plugin-user", password: "credprov-e2e-s3cret" };
const AUDIENCE = "registry.kubelet-ts.test";

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly containerd: ContainerdHandle;
  readonly registry: RegistryHandle;
  /** Where the plugins append one line per run: their name, then the request. */
  readonly invocations: string;
  readonly binDir: string;
  readonly agent: RunningAgent;
}

function image(name: string): ImageSpec {
  return {
    name: `kubelet-ts.local/credprov-e2e/${name}:1`,
    cmd: ["sh"],
    labels: { "io.kubelet-ts.e2e.variant": `credprov-${name}` },
  };
}

/** A plugin that logs its request and answers the registry's credentials for `cacheKeyType`. */
function pluginScript(invocations: string, registry: string, cacheKeyType: string): string {
  const response = JSON.stringify({
    kind: "CredentialProviderResponse",
    apiVersion: "credentialprovider.kubelet.k8s.io/v1",
    cacheKeyType,
    cacheDuration: "5m",
    auth: { [registry]: AUTH },
  });
  return `#!/bin/sh
request=$(cat)
printf '%s %s\\n' "$(basename "$0")" "$request" >> '${invocations}'
printf '%s\\n' '${response}'
`;
}

const suite = e2eSuite<World>({
  name: "credential provider",
  gate,
  userAgent: "credprov-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "credprov-e2e-" });
    const cp = await startControlPlane({ dir: join(dir, "cp"), nodeNames: [NODE, BROKEN_NODE] });
    const socket = join(dir, "containerd", "containerd.sock");
    const containerd = await startContainerd({ dir: join(dir, "containerd"), socket });
    const registry = await startRegistry({ dir: join(dir, "registry"), auth: AUTH });
    for (const repo of ["matched", "matched-too", "unmatched", "sa"]) {
      await pushImage({ registry, image: image(repo), ref: `e2e/${repo}:1`, auth: AUTH });
    }
    await importImages({ containerdSocket: socket, images: [PAUSE] });
    const binDir = join(dir, "plugins");
    await Deno.mkdir(binDir);
    const invocations = join(dir, "invocations.log");
    await Deno.writeTextFile(invocations, "");
    await Deno.writeTextFile(
      join(binDir, "test-credential-provider"),
      pluginScript(invocations, registry.host, "Registry"),
      { mode: 0o755 },
    );
    await Deno.writeTextFile(
      join(binDir, "sa-credential-provider"),
      pluginScript(invocations, registry.host, "Image"),
      { mode: 0o755 },
    );
    const config = join(dir, "credential-provider.yaml");
    await Deno.writeTextFile(
      config,
      `apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: test-credential-provider
    matchImages:
      - "${registry.host}/e2e/matched"
    defaultCacheDuration: 1m
    apiVersion: credentialprovider.kubelet.k8s.io/v1
  - name: sa-credential-provider
    matchImages:
      - "${registry.host}/e2e/sa"
    defaultCacheDuration: 1m
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    tokenAttributes:
      serviceAccountTokenAudience: ${AUDIENCE}
      cacheType: ServiceAccount
      requireServiceAccount: true
`,
    );
    // NodeRestriction (ServiceAccountNodeAudienceRestriction) lets a node ask for a token of an
    // audience no pod volume names only with this permission, as for upstream's kubelet.
    const rbac = await cp.kubectl(["apply", "-f", "-"], {
      stdin: JSON.stringify({
        apiVersion: "v1",
        kind: "List",
        items: [{
          apiVersion: "rbac.authorization.k8s.io/v1",
          kind: "ClusterRole",
          metadata: { name: "credprov-e2e-audience" },
          rules: [{
            apiGroups: [""],
            resources: [AUDIENCE],
            verbs: ["request-serviceaccounts-token-audience"],
          }],
        }, {
          apiVersion: "rbac.authorization.k8s.io/v1",
          kind: "ClusterRoleBinding",
          metadata: { name: "credprov-e2e-audience" },
          roleRef: {
            apiGroup: "rbac.authorization.k8s.io",
            kind: "ClusterRole",
            name: "credprov-e2e-audience",
          },
          subjects: [{
            apiGroup: "rbac.authorization.k8s.io",
            kind: "User",
            name: `system:node:${NODE}`,
          }],
        }],
      }),
    });
    assert.equal(rbac.code, 0, rbac.stderr);
    const { agent } = await startNodeAgent({
      cp,
      dir,
      nodeName: NODE,
      endpoint: containerd.endpoint,
      // A pod in image pull back-off is synced again at its resync: 10 s shows it in seconds.
      configLines: ["syncFrequency: 10s"],
      extraArgs: [
        ...["--image-credential-provider-config", config],
        ...["--image-credential-provider-bin-dir", binDir],
      ],
    });
    return { dir, cp, containerd, registry, invocations, binDir, agent };
  },
});
const e2e = suite.test;

/** A pod bound to the node, without pull secrets, running `image` and sleeping. */
function podManifest(name: string, image: string, policy: "Always" | "IfNotPresent"): string {
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS },
    spec: {
      nodeName: NODE,
      automountServiceAccountToken: false,
      terminationGracePeriodSeconds: 2,
      containers: [{
        name: "main",
        image,
        imagePullPolicy: policy,
        command: ["sh", "-c", "sleep 3600"],
      }],
    },
  });
}

async function create(w: World, manifest: string): Promise<void> {
  const r = await w.cp.kubectl(["create", "-f", "-"], { stdin: manifest });
  assert.equal(r.code, 0, r.stderr);
}

function mainStatus(pod: V1Pod): V1ContainerStatus | undefined {
  return pod.status?.containerStatuses?.find((c) => c.name === "main");
}

/** Each plugin run so far: the plugin's name and the request it read. */
async function runs(w: World): Promise<{ plugin: string; request: Record<string, unknown> }[]> {
  const text = await Deno.readTextFile(w.invocations);
  return text.split("\n").filter((l) => l !== "").map((l) => {
    const space = l.indexOf(" ");
    return { plugin: l.slice(0, space), request: JSON.parse(l.slice(space + 1)) };
  });
}

async function running(api: KubeClient, name: string) {
  const pod = await waitPod(api, NS, name, "Running", (p) => p.status?.phase === "Running");
  assert.ok(mainStatus(pod)?.state?.running, JSON.stringify(mainStatus(pod)));
  return pod;
}

e2e(
  "a pod without pull secrets pulls a private image with the plugin's credentials, cached",
  async (w, api) => {
    const matched = `${w.registry.host}/e2e/matched:1`;
    await create(w, podManifest("via-plugin", matched, "Always"));
    await running(api, "via-plugin");
    const first = await runs(w);
    assert.deepEqual(first, [{
      plugin: "test-credential-provider",
      request: {
        kind: "CredentialProviderRequest",
        apiVersion: "credentialprovider.kubelet.k8s.io/v1",
        image: `${w.registry.host}/e2e/matched`,
      },
    }]);

    // Within the cache duration (5m, Registry key): another pull of it and of another image of
    // the registry under the matched path use the cached answer; the plugin is not run again.
    await create(w, podManifest("via-plugin-again", matched, "Always"));
    await running(api, "via-plugin-again");
    await create(
      w,
      podManifest("via-plugin-too", `${w.registry.host}/e2e/matched-too:1`, "Always"),
    );
    await running(api, "via-plugin-too");
    assert.equal((await runs(w)).length, 1, JSON.stringify(await runs(w)));

    // Upstream's plugin metrics: one timed run, no error, and the configuration's hash.
    const metrics = await w.cp.kubectl(["get", "--raw", `/api/v1/nodes/${NODE}/proxy/metrics`]);
    assert.equal(metrics.code, 0, metrics.stderr);
    assert.match(
      metrics.stdout,
      /^kubelet_credential_provider_plugin_duration_count\{plugin_name="test-credential-provider"\} 1$/m,
    );
    assert.doesNotMatch(metrics.stdout, /^kubelet_credential_provider_plugin_errors_total\{/m);
    assert.match(
      metrics.stdout,
      /^kubelet_credential_provider_config_info\{hash="sha256:[0-9a-f]{64}"\} 1$/m,
    );
  },
);

e2e(
  "an image no matchImages entry matches fails with the registry's 401, the plugin not run",
  async (w, api) => {
    const before = (await runs(w)).length;
    const unmatched = `${w.registry.host}/e2e/unmatched:1`;
    await create(w, podManifest("no-plugin", unmatched, "IfNotPresent"));
    const pod = await waitPod(
      api,
      NS,
      "no-plugin",
      "waiting with ErrImagePull",
      (p) => mainStatus(p)?.state?.waiting?.reason === "ErrImagePull",
    );
    assert.match(
      mainStatus(pod)?.state?.waiting?.message ?? "",
      new RegExp(
        `failed to resolve reference "${unmatched.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}": ` +
          `pulling from host ${w.registry.host.replace(/\./g, "\\.")} failed with status code ` +
          `\\[manifests 1\\]: 401 Unauthorized$`,
      ),
    );
    assert.equal((await runs(w)).length, before);
  },
);

e2e(
  "a provider with tokenAttributes gets a token of the pod's service account for its audience",
  async (w, api) => {
    const before = (await runs(w)).length;
    const sa = `${w.registry.host}/e2e/sa:1`;
    const manifest = JSON.parse(podManifest("via-token", sa, "Always"));
    manifest.spec.serviceAccountName = "default";
    await create(w, JSON.stringify(manifest));
    const pod = await running(api, "via-token");
    const mine = (await runs(w)).slice(before);
    assert.equal(mine.length, 1, JSON.stringify(mine));
    assert.equal(mine[0]!.plugin, "sa-credential-provider");
    const request = mine[0]!.request;
    assert.equal(request.image, `${w.registry.host}/e2e/sa`);
    const token = String(request.serviceAccountToken ?? "");
    const claims = JSON.parse(atob(token.split(".")[1]!.replace(/-/g, "+").replace(/_/g, "/")));
    assert.deepEqual(claims.aud, [AUDIENCE]);
    assert.equal(claims.sub, `system:serviceaccount:${NS}:default`);
    // Bound to the pod it was pulled for.
    assert.equal(claims["kubernetes.io"]?.pod?.name, "via-token");
    assert.equal(claims["kubernetes.io"]?.pod?.uid, pod.metadata?.uid);
  },
);

e2e(
  "a broken credential provider configuration stops the agent at start, naming file, field and value",
  async (w) => {
    const dir = join(w.dir, "broken");
    await Deno.mkdir(dir, { recursive: true });
    const config = join(dir, "credential-provider.yaml");
    await Deno.writeTextFile(
      config,
      `apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: test-credential-provider
    matchImages: ["${w.registry.host}/e2e/matched"]
    defaultCacheDuration: -1m
    apiVersion: credentialprovider.kubelet.k8s.io/v1
`,
    );
    const { agent } = await startNodeAgent({
      cp: w.cp,
      dir,
      nodeName: BROKEN_NODE,
      endpoint: w.containerd.endpoint,
      waitFor: null,
      extraArgs: [
        ...["--image-credential-provider-config", config],
        ...["--image-credential-provider-bin-dir", w.binDir],
      ],
    });
    let timer: ReturnType<typeof setTimeout> | undefined;
    const status = await Promise.race([
      agent.process.status,
      new Promise<undefined>((r) => (timer = setTimeout(() => r(undefined), 60_000))),
    ]);
    clearTimeout(timer);
    if (!status) agent.process.kill("SIGKILL");
    assert.equal(status?.code, 1, agent.stderr());
    assert.ok(
      agent.stderr().includes(
        `failed to validate credential provider config \\"${config}\\": ` +
          `providers.defaultCacheDuration: Invalid value: \\"-1m0s\\": must be greater than or equal to 0`,
      ),
      agent.stderr(),
    );
    assert.match(agent.stderr(), /"Failed to register CRI auth plugins"/);
  },
);

suite.teardown("teardown", async (w) => {
  await w.containerd.stop();
  await w.registry.stop();
});
