/**
 * @module
 * The control plane harness against a real kube-apiserver (built from its Go module) and etcd:
 * system namespaces exist, a node's client certificate has exactly a node's rights (it may
 * create its own Node and no other, as the Node authorizer and NodeRestriction decide), the
 * apiserver comes back on the same port after an outage, and stop() leaves no process behind.
 * Needs root and openssl; without them it is skipped loudly, or fails when CI=true.
 */

import assert from "node:assert/strict";
import { ensureControlPlaneBinaries } from "./control_plane_build.ts";
import { type ControlPlane, dumpLogsOnFailure, startControlPlane } from "./control_plane.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("control plane tests", ["openssl"]);

/** A Node object as a kubelet registers it, minimal. */
function nodeManifest(name: string): Record<string, unknown> {
  return {
    apiVersion: "v1",
    kind: "Node",
    metadata: { name, labels: { "kubernetes.io/hostname": name } },
  };
}

/** A fetch client that presents node `name`'s client certificate. */
async function nodeClient(cp: ControlPlane, name: string): Promise<Deno.HttpClient> {
  const pair = cp.pki.nodes.get(name);
  assert.ok(pair, `the PKI has a certificate for ${name}`);
  return Deno.createHttpClient({
    caCerts: [await Deno.readTextFile(cp.pki.ca.cert)],
    cert: await Deno.readTextFile(pair.cert),
    key: await Deno.readTextFile(pair.key),
  });
}

async function request(
  cp: ControlPlane,
  client: Deno.HttpClient,
  method: string,
  path: string,
  body?: { type: string; value: unknown },
): Promise<{ status: number; text: string }> {
  const res = await fetch(`${cp.server}${path}`, {
    client,
    method,
    headers: body ? { "Content-Type": body.type } : {},
    body: body ? JSON.stringify(body.value) : undefined,
    signal: AbortSignal.timeout(10_000),
  });
  return { status: res.status, text: await res.text() };
}

/** Processes whose command line mentions `dir` (ours, and any a test left behind). */
async function processesUnder(dir: string): Promise<string[]> {
  const found: string[] = [];
  for await (const entry of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(entry.name) || Number(entry.name) === Deno.pid) continue;
    try {
      const stat = await Deno.readTextFile(`/proc/${entry.name}/stat`);
      if (/^\d+ \(.*\) Z /.test(stat)) continue; // exited, not yet reaped
      const cmdline = (await Deno.readTextFile(`/proc/${entry.name}/cmdline`)).replaceAll(
        "\0",
        " ",
      );
      if (cmdline.includes(dir)) found.push(`${entry.name}: ${cmdline}`);
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

function isAlive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z /.test(Deno.readTextFileSync(`/proc/${pid}/stat`));
  } catch {
    return false;
  }
}

Deno.test({
  name: "startControlPlane serves system namespaces, node rights, an outage and a clean stop",
  ignore: gate.ignore,
  async fn(t) {
    gate.check();
    const binaries = await ensureControlPlaneBinaries();
    for (const [what, path] of Object.entries(binaries)) {
      assert.ok((await Deno.stat(path)).isFile, `${what} is built at ${path}`);
    }
    const dir = await Deno.makeTempDir({ prefix: "control-plane-" });
    let passed = false;
    let cp: ControlPlane | undefined;
    try {
      const started = performance.now();
      cp = await startControlPlane({
        dir,
        nodeNames: ["node-a"],
        binaries,
        signal: AbortSignal.timeout(300_000),
        log: (m) => console.log(m),
      });
      console.log(
        `control plane: cold start to ready in ${Math.round(performance.now() - started)} ms`,
      );
      const plane = cp;
      assert.match(plane.server, /^https:\/\/127\.0\.0\.1:\d+$/);

      // A failed step does not throw; this does, so the logs are printed and later steps skip.
      const step = async (name: string, fn: () => Promise<void>) => {
        if (!(await t.step(name, fn))) throw new Error(`step failed: ${name}`);
      };
      await dumpLogsOnFailure(plane, async () => {
        await step("kubectl get ns lists the system namespaces", async () => {
          const out = await plane.kubectl(["get", "ns", "-o", "name"]);
          assert.equal(out.code, 0, out.stderr);
          for (const ns of ["default", "kube-system", "kube-node-lease"]) {
            assert.match(out.stdout, new RegExp(`^namespace/${ns}$`, "m"));
          }
        });

        await step("a node's credentials create its own Node", async () => {
          const out = await plane.kubectl(["create", "-f", "-"], {
            kubeconfig: plane.nodeKubeconfig("node-a"),
            stdin: JSON.stringify(nodeManifest("node-a")),
          });
          assert.equal(out.code, 0, out.stderr);
          assert.match(out.stdout, /node\/node-a created/);
          const who = await plane.kubectl(["auth", "whoami", "-o", "jsonpath={.status.userInfo}"], {
            kubeconfig: plane.nodeKubeconfig("node-a"),
          });
          assert.equal(who.code, 0, who.stderr);
          assert.match(who.stdout, /"username":"system:node:node-a"/);
          assert.match(who.stdout, /"system:nodes"/);
        });

        await step("a node's credentials cannot create or patch another Node", async () => {
          using client = await nodeClient(plane, "node-a");
          const create = await request(plane, client, "POST", "/api/v1/nodes", {
            type: "application/json",
            value: nodeManifest("node-b"),
          });
          assert.equal(create.status, 403, create.text);
          assert.match(
            JSON.parse(create.text).message,
            /node "node-a" is not allowed to modify node "node-b"/,
          );

          const made = await plane.kubectl(["create", "-f", "-"], {
            stdin: JSON.stringify(nodeManifest("node-b")),
          });
          assert.equal(made.code, 0, made.stderr);
          const patch = await request(plane, client, "PATCH", "/api/v1/nodes/node-b", {
            type: "application/merge-patch+json",
            value: { metadata: { labels: { stolen: "yes" } } },
          });
          assert.equal(patch.status, 403, patch.text);
          const viaKubectl = await plane.kubectl(
            ["label", "node", "node-b", "stolen=yes"],
            { kubeconfig: plane.nodeKubeconfig("node-a") },
          );
          assert.notEqual(viaKubectl.code, 0);
          assert.match(viaKubectl.stderr, /Forbidden|forbidden/);

          const own = await request(plane, client, "PATCH", "/api/v1/nodes/node-a", {
            type: "application/merge-patch+json",
            value: { metadata: { labels: { "example.com/patched": "yes" } } },
          });
          assert.equal(own.status, 200, own.text);
        });

        await step(
          "stopApiserver then startApiserver serves node-a on the same port",
          async () => {
            const server = plane.server;
            const { etcd } = plane.pids();
            await plane.stopApiserver();
            await plane.stopApiserver(); // idempotent
            assert.equal(plane.pids().apiserver, undefined);
            {
              using client = await nodeClient(plane, "node-a");
              await assert.rejects(request(plane, client, "GET", "/api/v1/nodes/node-a"));
            }
            const restarted = performance.now();
            await plane.startApiserver();
            console.log(
              `control plane: apiserver restart to ready in ${
                Math.round(performance.now() - restarted)
              } ms`,
            );
            assert.equal(plane.server, server);
            assert.equal(plane.pids().etcd, etcd, "etcd kept running");
            using client = await nodeClient(plane, "node-a");
            const got = await request(plane, client, "GET", "/api/v1/nodes/node-a");
            assert.equal(got.status, 200, got.text);
            assert.equal(JSON.parse(got.text).metadata.labels["example.com/patched"], "yes");
          },
        );
      });

      const { etcd, apiserver } = plane.pids();
      assert.ok(etcd !== undefined && apiserver !== undefined);
      await plane.stop();
      await plane.stop(); // idempotent
      assert.ok(!isAlive(etcd), "etcd is gone");
      assert.ok(!isAlive(apiserver), "kube-apiserver is gone");
      assert.deepEqual(await processesUnder(dir), []);
      assert.deepEqual(plane.pids(), { etcd: undefined, apiserver: undefined });
      await assert.rejects(plane.startApiserver(), /control plane was stopped/);
      passed = true;
    } finally {
      await cp?.stop();
      if (passed) await Deno.remove(dir, { recursive: true });
      else console.error(`control plane test failed: kept ${dir} (PKI, data, logs)`);
    }
  },
});
