/**
 * Hugepages end to end, on real containerd 1.6 through the real apiserver, on a machine with 2 MiB
 * pages reserved for the test (`vm.nr_hugepages`, restored afterwards): the Node reports
 * `hugepages-2Mi` capacity and allocatable from the kernel's pool, a pod requesting
 * `hugepages-2Mi` is admitted and runs with upstream's `hugepage_limits` in its CRI container
 * config (as the runtime received it, `crictl inspect`), and its emptyDir of medium
 * `HugePages` is a real hugetlbfs mount with the pod's page size, which the container can map.
 * Whether the hugetlb cgroup holds the limit depends on the host: on these cgroup v1 (hybrid)
 * machines the hugetlb controller is bound to the unified hierarchy, which runc's v1 manager
 * does not write, under the Go kubelet as under this one; the pod cgroup's limit is covered by
 * the container manager's fixture tests (src/cm). Upstream's counterpart is
 * `test/e2e_node/hugepages_test.go`.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Node } from "@kubernetes/client-node";
import type { RunningAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import { ensureControlPlaneBinaries } from "./control_plane_build.ts";
import { BUSYBOX, BUSYBOX_IMAGE, importImages, PAUSE } from "./images.ts";
import { e2eSuite, poll, startNodeAgent, waitPod } from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("hugepages e2e tests", [
  "containerd",
  "ctr",
  "runc",
  "openssl",
  "go",
]);
const NODE = "kts-hugepages-e2e";
const NS = "default";
const NR_HUGEPAGES = "/proc/sys/vm/nr_hugepages";
/** 2 MiB pages reserved for the test: 8 MiB. */
const PAGES = 4;

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly containerd: ContainerdHandle;
  readonly agent: RunningAgent;
  /** vm.nr_hugepages before the test. */
  readonly savedPages: string;
}

const suite = e2eSuite<World>({
  name: "hugepages",
  gate,
  userAgent: "hugepages-e2e-test",
  async start() {
    const savedPages = (await Deno.readTextFile(NR_HUGEPAGES)).trim();
    await Deno.writeTextFile(NR_HUGEPAGES, String(PAGES));
    const got = (await Deno.readTextFile(NR_HUGEPAGES)).trim();
    if (got !== String(PAGES)) {
      await Deno.writeTextFile(NR_HUGEPAGES, savedPages);
      throw new Error(`cannot reserve ${PAGES} hugepages: ${NR_HUGEPAGES} reads ${got}`);
    }
    const dir = await Deno.makeTempDir({ prefix: "hugepages-e2e-" });
    const stack = new AsyncDisposableStack();
    stack.defer(() => Deno.writeTextFile(NR_HUGEPAGES, savedPages));
    try {
      const cp = stack.use(await startControlPlane({ dir: join(dir, "cp"), nodeNames: [NODE] }));
      const socket = join(dir, "containerd", "containerd.sock");
      const containerd = stack.use(await startContainerd({ dir: join(dir, "containerd"), socket }));
      await importImages({ containerdSocket: socket, images: [BUSYBOX, PAUSE] });
      const { agent } = await startNodeAgent({
        cp,
        dir,
        nodeName: NODE,
        endpoint: containerd.endpoint,
      });
      stack.move();
      return { dir, cp, containerd, agent, savedPages };
    } catch (e) {
      await stack.disposeAsync();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw e;
    }
  },
});
const e2e = suite.test;

e2e("the Node reports the kernel's 2 MiB pages as hugepages-2Mi", async (_w, api) => {
  const node = await poll("hugepages-2Mi in the Node's capacity", async () => {
    const n = await api.get<V1Node>(`/api/v1/nodes/${NODE}`);
    return n.status?.capacity?.["hugepages-2Mi"] === "8Mi" ? n : undefined;
  }, 60_000);
  assert.equal(node.status?.allocatable?.["hugepages-2Mi"], "8Mi");
  // The other size the kernel offers has no pages: upstream reports it at 0.
  assert.equal(node.status?.capacity?.["hugepages-1Gi"], "0");
});

e2e("a pod requesting hugepages runs with its limits and a hugetlbfs emptyDir", async (w, api) => {
  const manifest = {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name: "huge", namespace: NS },
    spec: {
      nodeName: NODE,
      automountServiceAccountToken: false,
      terminationGracePeriodSeconds: 1,
      containers: [{
        name: "main",
        image: BUSYBOX_IMAGE,
        imagePullPolicy: "Never",
        command: ["sh", "-c", "sleep 3600"],
        resources: {
          requests: { cpu: "10m", memory: "32Mi", "hugepages-2Mi": "4Mi" },
          limits: { cpu: "10m", memory: "32Mi", "hugepages-2Mi": "4Mi" },
        },
        volumeMounts: [{ name: "hp", mountPath: "/hugepages" }],
      }],
      volumes: [{ name: "hp", emptyDir: { medium: "HugePages" } }],
    },
  };
  const r = await w.cp.kubectl(["create", "-f", "-"], { stdin: JSON.stringify(manifest) });
  assert.equal(r.code, 0, r.stderr);
  await waitPod(api, NS, "huge", "Running", (p) => p.status?.phase === "Running");

  const mounts = await w.cp.kubectl(["exec", "-n", NS, "huge", "--", "cat", "/proc/mounts"]);
  assert.equal(mounts.code, 0, mounts.stderr);
  const line = mounts.stdout.split("\n").find((l) => l.split(" ")[1] === "/hugepages");
  assert.match(line ?? "", /^\S+ \/hugepages hugetlbfs \S*pagesize=2M/, mounts.stdout);

  // What the runtime was told: every size the kernel offers, the requested one set.
  const { crictl } = await ensureControlPlaneBinaries();
  const ps = await new Deno.Command(crictl, {
    args: ["--runtime-endpoint", w.containerd.endpoint, "ps", "-q", "--name", "main"],
    stdout: "piped",
  }).output();
  const id = new TextDecoder().decode(ps.stdout).trim().split("\n")[0] ?? "";
  assert.notEqual(id, "");
  const inspect = await new Deno.Command(crictl, {
    args: ["--runtime-endpoint", w.containerd.endpoint, "inspect", id],
    stdout: "piped",
  }).output();
  const info = JSON.parse(new TextDecoder().decode(inspect.stdout)).info;
  const limits = info.config.linux.resources.hugepage_limits as {
    page_size: string;
    limit?: number;
  }[];
  // The runtime's JSON leaves a zero limit out (proto3).
  assert.deepEqual(
    Object.fromEntries(limits.map((l) => [l.page_size, l.limit ?? 0])),
    { "2MB": 4 * 2 ** 20, "1GB": 0 },
  );
});

suite.teardown("teardown", async (w) => {
  await w.containerd.stop();
  await Deno.writeTextFile(NR_HUGEPAGES, w.savedPages);
});
