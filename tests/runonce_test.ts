/**
 * `--runonce` end to end: the agent reads the static pods once, runs them against real
 * containerd until every container runs, reports and exits 0 leaving them running; a pod that
 * cannot start makes it exit 1 naming the pod.
 *
 * The pods outlive the agent, so each test removes them itself afterwards, passed or failed:
 * through CRI, as a kubelet deleting them would, while containerd still runs (their shims exit
 * with their last task). It ends by checking that no shim of its containerd is left.
 */

import assert from "node:assert/strict";
import { basename, join } from "node:path";
import * as api from "../proto/runtime/v1/api.ts";
import { preInitRuntimeService } from "../src/cri/runtime_service.ts";
import { CONTAINER_LOGS_DIR } from "../src/kubelet.ts";
import { runAgent } from "./agent_process.ts";
import {
  type ContainerdHandle,
  findShims,
  killShims,
  type ShimProcess,
  startContainerd,
} from "./containerd_harness.ts";
import { BUSYBOX, BUSYBOX_IMAGE, ctrOrThrow, importImages, PAUSE } from "./images.ts";
import { removeCgroupTree, TEST_CGROUP_PARENT, writeKubeletConfig } from "./node_harness.ts";
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

/** How long a shim may take to exit once its pod is removed and containerd has stopped. */
const SHIM_EXIT_MS = 15_000;

interface World {
  readonly containerd: ContainerdHandle;
  readonly args: string[];
}

/** Imports the images and writes the agent's config; containerd is already running. */
async function world(dir: string, containerd: ContainerdHandle): Promise<World> {
  await importImages({ containerdSocket: containerd.socket, images: [BUSYBOX, PAUSE] });
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

/**
 * Stops and removes every pod sandbox through CRI (StopPodSandbox stops its containers,
 * RemovePodSandbox removes them), then checks that CRI lists no sandbox and no container.
 */
async function removePods(endpoint: string): Promise<void> {
  const cri = preInitRuntimeService({ containerRuntimeEndpoint: endpoint, timeoutMs: 60_000 });
  try {
    const runtime = cri.runtimeService;
    for (const sandbox of await runtime.listPodSandbox(api.PodSandboxFilter.create({}))) {
      await runtime.stopPodSandbox(sandbox.id);
      await runtime.removePodSandbox(sandbox.id);
    }
    const sandboxes = await runtime.listPodSandbox(api.PodSandboxFilter.create({}));
    const containers = await runtime.listContainers(api.ContainerFilter.create({}));
    assert.deepEqual(
      { sandboxes: sandboxes.map((s) => s.id), containers: containers.map((c) => c.id) },
      { sandboxes: [], containers: [] },
      "CRI still lists these after StopPodSandbox and RemovePodSandbox of every sandbox",
    );
  } finally {
    cri.close();
  }
}

/** The shims of the containerd under `dir` still running after {@link SHIM_EXIT_MS}. */
async function shimsLeft(dir: string): Promise<ShimProcess[]> {
  const end = Date.now() + SHIM_EXIT_MS;
  for (;;) {
    const shims = await findShims(`${dir}/`);
    if (shims.length === 0 || Date.now() >= end) return shims;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Removes the agent's /var/log/containers links into `dir` (the agent that made them is gone). */
async function removeContainerLogLinks(dir: string): Promise<void> {
  try {
    for await (const entry of Deno.readDir(CONTAINER_LOGS_DIR)) {
      const link = join(CONTAINER_LOGS_DIR, entry.name);
      const target = await Deno.readLink(link).catch(() => "");
      if (target.startsWith(`${dir}/`)) await Deno.remove(link).catch(() => {});
    }
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
}

/**
 * One test in a directory and containerd of its own. Afterwards, whatever happened: the pods
 * removed through CRI, containerd stopped, then the check that no shim of it is left; any shim
 * and container still there are killed, the agent's cgroup root, log links and the directory
 * removed. The first failure is the test's; later ones (clean-up after a failure) are logged.
 */
function runonceTest(name: string, fn: (dir: string, w: World) => Promise<void>) {
  Deno.test({
    name: `--runonce ${name}`,
    ignore: gate.ignore,
    sanitizeResources: false,
    sanitizeOps: false,
    async fn() {
      gate.check();
      const dir = await Deno.makeTempDir({ prefix: "runonce-" });
      const failures: unknown[] = [];
      const step = async (run: () => Promise<void>) => {
        try {
          await run();
        } catch (e) {
          failures.push(e);
        }
      };
      let containerd: ContainerdHandle | undefined;
      await step(async () => {
        const socket = join(dir, "containerd", "containerd.sock");
        containerd = await startContainerd({ dir: join(dir, "containerd"), socket });
        await fn(dir, await world(dir, containerd));
      });
      const started = containerd;
      if (started) {
        await step(() => removePods(started.endpoint));
        await step(() => started.stop());
      }
      const left = await shimsLeft(dir);
      await killShims(`${dir}/`);
      // Last out, once no container runs in it: the cgroup root writeKubeletConfig made.
      await removeCgroupTree(`${TEST_CGROUP_PARENT}/${basename(dir)}`);
      await removeContainerLogLinks(dir);
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      const shims = `containerd-shim processes of ${dir} outlived the test (killed now)`;
      if (failures.length > 0) {
        for (const later of failures.slice(1)) console.error(`--runonce ${name}: also: ${later}`);
        if (left.length > 0) console.error(`--runonce ${name}: also: ${shims}`, left);
        throw failures[0];
      }
      assert.deepEqual(left, [], shims);
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
