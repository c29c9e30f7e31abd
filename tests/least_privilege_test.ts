/**
 * `--least-privilege` end to end, on real containerd through the real apiserver: the agent, started
 * as it ships (--allow-all, as root, no flag), runs inside the permission set src/privilege/permission_set.ts computes, reads the host through its view (node status,
 * the summary API, pod network stats and filesystem sizes through the launcher), mounts tmpfs
 * volumes with the `mount` it may run, gets hostPath volumes anywhere checked and made by the
 * launcher, and logs no permission error while it works; the launcher pages out the binary's
 * start-up pages. After SIGTERM the view is gone. What the set refuses is
 * src/privilege/permission_set_test.ts's. Upstream has no counterpart.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Node } from "@kubernetes/client-node";
import { ownDenoBinary, type RunningAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import type { ControlPlane } from "./control_plane.ts";
import { startControlPlane } from "./control_plane.ts";
import { BUSYBOX, BUSYBOX_IMAGE, importImages, PAUSE } from "./images.ts";
import {
  e2eSuite,
  ensureDefaultServiceAccount,
  poll,
  startNodeAgent,
  waitPod,
} from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";
import { hostViewDir } from "../src/privilege/permission_set.ts";
import { mountsUnder } from "../src/privilege/host_view.ts";

const gate = await requireRoot("least-privilege e2e tests", [
  "containerd",
  "ctr",
  "runc",
  "openssl",
  "go",
]);
const NODE = "kts-least-privilege";
const NS = "default";

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly containerd: ContainerdHandle;
  readonly agent: RunningAgent;
  /** The agent's host view directory. */
  readonly view: string;
  /** When the agent was started (ms since the epoch). */
  readonly started: number;
}

const suite = e2eSuite<World>({
  name: "least privilege",
  gate,
  userAgent: "least-privilege-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "least-privilege-e2e-" });
    const stack = new AsyncDisposableStack();
    try {
      const cp = stack.use(await startControlPlane({ dir: join(dir, "cp"), nodeNames: [NODE] }));
      const socket = join(dir, "containerd", "containerd.sock");
      const containerd = stack.use(
        await startContainerd({ dir: join(dir, "containerd"), socket }),
      );
      await importImages({ containerdSocket: socket, images: [BUSYBOX, PAUSE] });
      await ensureDefaultServiceAccount(cp, NS);
      const started = Date.now();
      const { agent } = await startNodeAgent({
        cp,
        dir,
        nodeName: NODE,
        endpoint: containerd.endpoint,
        // No flag: the sandbox is the default (KUBELET_TS_LEAST_PRIVILEGE=0 turns it off for
        // every agent, and this test fails then). -v=2 for the launcher's page-out line; a
        // binary of its own, as on a node, for the pages that page-out gives back.
        extraArgs: ["-v=2"],
        executable: await ownDenoBinary(dir),
      });
      stack.move();
      const view = await hostViewDir("/run/kubelet-ts", join(dir, "root"));
      return { dir, cp, containerd, agent, view, started };
    } catch (e) {
      await stack.disposeAsync();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw e;
    }
  },
});

/** The node's Summary API answer through the apiserver's node proxy. */
async function getSummary(w: World) {
  const r = await w.cp.kubectl(["get", "--raw", `/api/v1/nodes/${NODE}/proxy/stats/summary`]);
  if (r.code !== 0) throw new Error(r.stderr);
  return JSON.parse(r.stdout);
}

async function create(w: World, manifest: unknown): Promise<void> {
  const r = await w.cp.kubectl(["create", "-f", "-"], { stdin: JSON.stringify(manifest) });
  assert.equal(r.code, 0, r.stderr);
}

function pod(name: string, volumes: unknown[], mounts: unknown[]) {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS },
    spec: {
      nodeName: NODE,
      automountServiceAccountToken: false,
      terminationGracePeriodSeconds: 1,
      volumes,
      containers: [{
        name: "main",
        image: BUSYBOX_IMAGE,
        imagePullPolicy: "Never",
        command: ["sh", "-c", "sleep 3600"],
        volumeMounts: mounts,
      }],
    },
  };
}

suite.test(
  "the agent says it runs in its permission set and reads the host through its view",
  async (w, api) => {
    const stderr = w.agent.stderr();
    assert.match(
      stderr,
      /"Running the kubelet in its permission set" hostView="\/run\/kubelet-ts\/view-/,
    );
    assert.equal(stderr.split("\n").filter((l) => l.includes('"kubelet version"')).length, 1);
    const mounts = await mountsUnder(w.view);
    for (const p of ["proc/meminfo", "proc/self/mountinfo", "sys/fs/cgroup", "etc/machine-id"]) {
      assert.ok(mounts.includes(join(w.view, p)), `${p} is in the view: ${mounts.join(" ")}`);
    }
    const node = await poll(
      "the node Ready",
      async () => {
        const n = await api.get<V1Node>(`/api/v1/nodes/${NODE}`);
        const ready = n.status?.conditions?.find((c) => c.type === "Ready")?.status === "True";
        return ready ? n : undefined;
      },
      60_000,
      500,
    );
    // Read from /proc and /sys through the view: machine facts and the OS image.
    assert.ok(Number(node.status?.capacity?.cpu) > 0);
    assert.match(node.status?.capacity?.memory ?? "", /^\d+Ki$/);
    assert.equal(
      node.status?.nodeInfo?.machineID,
      (await Deno.readTextFile("/etc/machine-id")).trim(),
    );
    assert.notEqual(node.status?.nodeInfo?.osImage ?? "", "");
    assert.notEqual(node.status?.nodeInfo?.bootID ?? "", "");
    const summary = await poll(
      "the summary API's node memory",
      async () => {
        const s = await getSummary(w);
        return s.node?.memory?.workingSetBytes > 0 ? s : undefined;
      },
      60_000,
      1_000,
    );
    assert.ok(summary.node.cpu.usageCoreNanoSeconds > 0, "node CPU from the view's cgroup tree");
    // The process collector: its own /proc files through the view, its open files counted by
    // the launcher (the fd directory is not in the view).
    const metrics = await w.cp.kubectl(["get", "--raw", `/api/v1/nodes/${NODE}/proxy/metrics`]);
    assert.equal(metrics.code, 0, metrics.stderr);
    for (const family of ["process_open_fds", "process_max_fds", "process_resident_memory_bytes"]) {
      const m = new RegExp(`^${family} (\\S+)$`, "m").exec(metrics.stdout);
      assert.ok(m && Number(m[1]) > 0, `${family} in /metrics: ${m?.[0]}`);
    }
  },
);

suite.test(
  "pods with secret, tmpfs and hostPath volumes run; a hostPath of the wrong type is FailedMount",
  async (w, api) => {
    await create(w, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "lp-secret", namespace: NS },
      stringData: { password: "s3cr3t" },
    });
    await create(
      w,
      pod(
        "lp-volumes",
        [
          { name: "sec", secret: { secretName: "lp-secret" } },
          { name: "mem", emptyDir: { medium: "Memory" } },
          { name: "disk", emptyDir: {} },
        ],
        [
          { name: "sec", mountPath: "/etc/sec" },
          { name: "mem", mountPath: "/mem" },
          { name: "disk", mountPath: "/disk" },
        ],
      ),
    );
    await waitPod(api, NS, "lp-volumes", "Running", (p) => p.status?.phase === "Running");
    const r = await w.cp.kubectl(["exec", "lp-volumes", "--", "cat", "/etc/sec/password"]);
    assert.equal(r.stdout, "s3cr3t");

    // hostPath volumes may name any host path: the launcher checks and makes them.
    const made = join(w.dir, "host", "made", "deep");
    await create(
      w,
      pod("lp-hostpath", [
        { name: "etc", hostPath: { path: "/etc/ssl", type: "Directory" } },
        { name: "made", hostPath: { path: made, type: "DirectoryOrCreate" } },
      ], [
        { name: "etc", mountPath: "/host-etc", readOnly: true },
        { name: "made", mountPath: "/made" },
      ]),
    );
    await waitPod(api, NS, "lp-hostpath", "Running", (p) => p.status?.phase === "Running");
    assert.equal((await Deno.stat(made)).isDirectory, true);
    const ls = await w.cp.kubectl(["exec", "lp-hostpath", "--", "ls", "/host-etc"]);
    assert.equal(ls.code, 0, ls.stderr);
    await create(
      w,
      pod("lp-hostpath-file", [
        { name: "etc", hostPath: { path: "/etc/ssl", type: "File" } },
      ], [{ name: "etc", mountPath: "/host-etc" }]),
    );
    const event = await poll(
      "a FailedMount event for the hostPath of the wrong type",
      async () => {
        const out = await w.cp.kubectl([
          "get",
          "events",
          "-n",
          NS,
          "--field-selector",
          "involvedObject.name=lp-hostpath-file,reason=FailedMount",
          "-o",
          "jsonpath={.items[*].message}",
        ]);
        return out.stdout.trim() === "" ? undefined : out.stdout;
      },
      60_000,
      1_000,
    );
    assert.match(event, /hostPath type check failed: \/etc\/ssl is not a file, it's a Directory/);
  },
);

suite.test("nothing else the agent does is refused: no permission error in its log after 25 s", async (w) => {
  // The eviction manager (every 10 s), image and container GC, stats and the status loops have
  // all run by then; each reads or writes something, so a path missing from the set shows here.
  await new Promise((r) => setTimeout(r, Math.max(0, w.started + 25_000 - Date.now())));
  const refused = w.agent.stderr().split("\n").filter((l) =>
    /NotCapable|Requires (read|write|run|all|net|env|sys|ffi) access/.test(l) &&
    !l.includes("/etc/ssl")
  );
  assert.deepEqual(refused, []);
  // The launcher has paged out the executable's start-up pages (10 s after it started):
  // tens of MiB of the binary's code that start-up touched and the running kubelet does not.
  const paged =
    /"Paged out the executable's start-up pages".* rssBeforeBytes=(\d+) rssAfterBytes=(\d+)/
      .exec(w.agent.stderr());
  assert.ok(paged, "the launcher's page-out line");
  const freed = Number(paged[1]) - Number(paged[2]);
  assert.ok(freed > 10 * 2 ** 20, `the page-out gave back only ${freed} bytes`);
  const node = (await getSummary(w)).node;
  assert.ok(
    node.fs?.capacityBytes > 0,
    `node fs stats (the launcher's statvfs): ${JSON.stringify(node.fs)}`,
  );
  assert.ok(node.runtime?.imageFs?.capacityBytes > 0, "image fs stats");
  // A pod's cgroup and network counters: /proc/<pid>/cgroup and net/dev through the launcher.
  const pod = await poll(
    "the summary's stats of pod lp-volumes",
    async () => {
      const p = (await getSummary(w)).pods?.find((p: { podRef: { name: string } }) =>
        p.podRef.name === "lp-volumes"
      );
      return p?.containers?.[0]?.memory?.workingSetBytes > 0 && p?.network?.interfaces?.length > 0
        ? p
        : undefined;
    },
    60_000,
    2_000,
  );
  assert.ok(pod.containers[0].cpu.usageCoreNanoSeconds >= 0);
});

suite.teardown("stop", async (w) => {
  // e2eSuite's teardown has checked the SIGTERM exit 0; the view must be gone with the agent.
  try {
    assert.deepEqual(await mountsUnder(w.view), []);
    await Deno.stat(w.view).then(
      () => assert.fail(`${w.view} is still there`),
      (e) => assert.ok(e instanceof Deno.errors.NotFound),
    );
  } finally {
    await w.containerd.stop();
  }
});
