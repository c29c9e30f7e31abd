/**
 * No secret reaches the log or /configz, at the highest verbosity: on real containerd through
 * the real apiserver, an agent at `-v=10` runs a pod that mounts a Secret, takes a key of it as
 * env, gets the kube-api-access service account token and names an image pull secret; then the
 * agent's whole log and its /configz are searched for the secret values (plain and base64), the
 * token, the pull password and the private keys of the node's client and serving certificates.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { RunningAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import { BUSYBOX, BUSYBOX_IMAGE, importImages, PAUSE } from "./images.ts";
import {
  e2eSuite,
  ensureDefaultServiceAccount,
  ensureRootCAConfigMap,
  startNodeAgent,
  waitPod,
} from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("secrets-in-logs e2e tests", [
  "containerd",
  "ctr",
  "runc",
  "openssl",
  "go",
]);
const NODE = "kts-secrets-log";
const NS = "default";

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly containerd: ContainerdHandle;
  readonly agent: RunningAgent;
}

const suite = e2eSuite<World>({
  name: "secrets in logs",
  gate,
  userAgent: "secrets-log-e2e-test",
  stderrLines: 5,
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "secrets-log-e2e-" });
    const stack = new AsyncDisposableStack();
    try {
      const cp = stack.use(await startControlPlane({ dir: join(dir, "cp"), nodeNames: [NODE] }));
      const socket = join(dir, "containerd", "containerd.sock");
      const containerd = stack.use(
        await startContainerd({ dir: join(dir, "containerd"), socket }),
      );
      await importImages({ containerdSocket: socket, images: [BUSYBOX, PAUSE] });
      await ensureDefaultServiceAccount(cp, NS);
      await ensureRootCAConfigMap(cp, NS);
      const { agent } = await startNodeAgent({
        cp,
        dir,
        nodeName: NODE,
        endpoint: containerd.endpoint,
        configLines: ["syncFrequency: 5s", "logging:", "  verbosity: 10"],
      });
      stack.move();
      return { dir, cp, containerd, agent };
    } catch (e) {
      await stack.disposeAsync();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw e;
    }
  },
});

const b64 = (s: string) => btoa(s);

/** The base64 body lines of a PEM private key (any one of them is a leak). */
async function keyLines(file: string): Promise<string[]> {
  const pem = await Deno.readTextFile(file);
  return pem.split("\n").filter((l) => l.length >= 40 && !l.startsWith("-----"));
}

suite.test(
  "secret values, tokens and private keys appear nowhere in a -v=10 log or /configz",
  async (w, api) => {
    const suffix = crypto.randomUUID().slice(0, 8);
    const value = `s3cr3t-value-${suffix}`;
    const envValue = `env-s3cr3t-${suffix}`;
    const pullPassword = `pull-pa55-${suffix}`;
    const pullAuth = b64(`puller:${pullPassword}`);
    const create = async (obj: unknown) => {
      const r = await w.cp.kubectl(["create", "-f", "-"], { stdin: JSON.stringify(obj) });
      assert.equal(r.code, 0, r.stderr);
    };
    await create({
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "app", namespace: NS },
      stringData: { password: value, env: envValue },
    });
    await create({
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "regcred", namespace: NS },
      type: "kubernetes.io/dockerconfigjson",
      stringData: {
        ".dockerconfigjson": JSON.stringify({
          auths: {
            "registry.example.test": { username: "puller", password: pullPassword, auth: pullAuth },
          },
        }),
      },
    });
    await create({
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "holder", namespace: NS },
      spec: {
        nodeName: NODE,
        terminationGracePeriodSeconds: 1,
        imagePullSecrets: [{ name: "regcred" }],
        volumes: [{ name: "app", secret: { secretName: "app" } }],
        containers: [{
          name: "main",
          image: BUSYBOX_IMAGE,
          imagePullPolicy: "IfNotPresent",
          command: ["sh", "-c", "cat /etc/app/password; echo; echo $APP_ENV; sleep 3600"],
          env: [{ name: "APP_ENV", valueFrom: { secretKeyRef: { name: "app", key: "env" } } }],
          volumeMounts: [{ name: "app", mountPath: "/etc/app" }],
        }],
      },
    });
    await waitPod(api, NS, "holder", "Running", (p) => p.status?.phase === "Running");
    // The container did get the values: they were there to leak.
    const logs = await w.cp.kubectl(["logs", "holder", "-n", NS]);
    assert.equal(logs.stdout, `${value}\n${envValue}\n`, logs.stderr);
    const token = (await w.cp.kubectl([
      "exec",
      "holder",
      "-n",
      NS,
      "--",
      "cat",
      "/var/run/secrets/kubernetes.io/serviceaccount/token",
    ])).stdout.trim();
    assert.match(token, /^[\w-]+\.[\w-]+\.[\w-]+$/, "a JWT");
    // Some syncs of the pod at -v=10 (resyncs every 5 s), with the secret read each time.
    await new Promise((r) => setTimeout(r, 12_000));

    const nodeKey = (await Deno.readTextFile(w.cp.nodeKubeconfig(NODE))).match(
      /client-key: (\S+)/,
    )?.[1];
    assert.ok(nodeKey, "the node kubeconfig names its key file");
    const servingKey = join(w.dir, "pki", "kubelet.key");
    const secrets: [string, string][] = [
      ["the secret value", value],
      ["the secret value in base64", b64(value)],
      ["the env secret", envValue],
      ["the env secret in base64", b64(envValue)],
      ["the pull password", pullPassword],
      ["the pull auth", pullAuth],
      ["the service account token", token],
      ["the token's signature", token.split(".")[2]!],
      ...(await keyLines(nodeKey)).map((l): [string, string] => ["the node's client key", l]),
      ...(await keyLines(servingKey)).map((l): [string, string] => ["the serving key", l]),
    ];
    const log = w.agent.stderr();
    // -v=10 is in force: the PLEG's v5 line is there.
    assert.match(log, /"GenericPLEG: Relisting"/, "a -v=10 log was searched");
    assert.match(log, /holder/, "the log talks about the pod");
    const configz = await w.cp.kubectl(["get", "--raw", `/api/v1/nodes/${NODE}/proxy/configz`]);
    assert.equal(configz.code, 0, configz.stderr);
    for (const [what, secret] of secrets) {
      const at = log.indexOf(secret);
      assert.equal(
        at,
        -1,
        `${what} is in the log: ...${log.slice(Math.max(0, at - 200), at + 50)}`,
      );
      assert.ok(!configz.stdout.includes(secret), `${what} is in /configz`);
    }
  },
);

suite.teardown("stop", async (w) => {
  await w.containerd.stop();
});
