/**
 * `--runonce` end to end: the agent reads the static pods once, runs them against real
 * containerd until every container runs, reports and exits 0 leaving them running; a pod that
 * cannot start makes it exit 1 naming the pod.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { runAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { BUSYBOX, BUSYBOX_IMAGE, ctrOrThrow, importImages, PAUSE } from "./images.ts";
import { writeKubeletConfig } from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("--runonce e2e tests", ["containerd", "ctr", "runc"]);

function manifest(name: string, image: string): string {
  return [
    "apiVersion: v1",
    "kind: Pod",
    `metadata: {name: ${name}, namespace: default}`,
    "spec:",
    "  containers:",
    `  - {name: main, image: ${image}, imagePullPolicy: Never, command: [sleep, '3600']}`,
    "",
  ].join("\n");
}

async function world(dir: string): Promise<{ containerd: ContainerdHandle; args: string[] }> {
  const socket = join(dir, "containerd", "containerd.sock");
  const containerd = await startContainerd({ dir: join(dir, "containerd"), socket });
  await importImages({ containerdSocket: socket, images: [BUSYBOX, PAUSE] });
  const manifests = join(dir, "manifests");
  await Deno.mkdir(manifests, { recursive: true });
  const config = join(dir, "kubelet.yaml");
  await writeKubeletConfig(config, {
    endpoint: containerd.endpoint,
    lines: [`staticPodPath: ${manifests}`, `podLogsDir: ${join(dir, "pod-logs")}`],
  });
  const args = [
    "--config",
    config,
    "--runonce",
    "--root-dir",
    join(dir, "root"),
    "--hostname-override",
    "runonce-node",
  ];
  return { containerd, args };
}

function runonceTest(
  name: string,
  fn: (dir: string, w: Awaited<ReturnType<typeof world>>) => Promise<void>,
) {
  Deno.test({
    name: `--runonce ${name}`,
    ignore: gate.ignore,
    sanitizeResources: false,
    sanitizeOps: false,
    async fn() {
      gate.check();
      const dir = await Deno.makeTempDir({ prefix: "runonce-" });
      const w = await world(dir);
      try {
        await fn(dir, w);
      } finally {
        await w.containerd.stop();
        await Deno.remove(dir, { recursive: true }).catch(() => {});
      }
    },
  });
}

runonceTest("runs the static pods, reports them started and exits 0", async (dir, w) => {
  await Deno.writeTextFile(join(dir, "manifests", "a.yaml"), manifest("a", BUSYBOX_IMAGE));
  await Deno.writeTextFile(join(dir, "manifests", "b.yaml"), manifest("b", BUSYBOX_IMAGE));
  const out = await runAgent(w.args);
  assert.equal(out.code, 0, out.stderr);
  assert.match(out.stderr, /"Processing manifest with pods" numPods=2/);
  assert.match(out.stderr, /"Started pod" pod="default\/a-runonce-node"/);
  assert.match(out.stderr, /"Started pod" pod="default\/b-runonce-node"/);
  assert.match(out.stderr, /"Started kubelet as runonce"/);
  // The pods are left running.
  const tasks = await ctrOrThrow(w.containerd.socket, "k8s.io", ["tasks", "ls"], {
    what: "list tasks",
  });
  const running = tasks.split("\n").filter((l) => /\bRUNNING\b/.test(l));
  assert.equal(running.length, 4, tasks); // two sandboxes, two containers
});

runonceTest("exits 1 naming a pod that cannot start", async (dir, w) => {
  await Deno.writeTextFile(join(dir, "manifests", "ok.yaml"), manifest("ok", BUSYBOX_IMAGE));
  await Deno.writeTextFile(
    join(dir, "manifests", "missing.yaml"),
    manifest("missing", "kubelet-ts.local/absent:1"),
  );
  const out = await runAgent(w.args);
  assert.equal(out.code, 1, out.stderr);
  assert.match(out.stderr, /runonce failed: error running pods: \[missing-runonce-node_default\(/);
  assert.match(out.stderr, /"Started pod" pod="default\/ok-runonce-node"/);
});

runonceTest("exits 1 when no manifest update comes within 1 s", async (dir, w) => {
  await Deno.remove(join(dir, "manifests"), { recursive: true });
  const cfg = w.args[w.args.indexOf("--config") + 1]!;
  const text = (await Deno.readTextFile(cfg)).replace(/staticPodPath: .*\n/, "");
  await Deno.writeTextFile(cfg, text);
  const out = await runAgent(w.args);
  assert.equal(out.code, 1, out.stderr);
  assert.match(out.stderr, /no pod manifest update after 1s/);
});
