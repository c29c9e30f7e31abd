/**
 * User namespaces (`hostUsers: false`, UserNamespacesSupport GA in v1.36) end to end, through the
 * real apiserver. On containerd 2.x (built by tests/runtime_build.ts), whose CRI Status says its
 * handlers support user namespaces, the pod runs: root inside is a block of 65536 unprivileged
 * host IDs outside (the container's process on the host has that uid and uid_map), the block is
 * the one the agent recorded in the pod's `userns` file, a second pod gets another, and the pod's
 * volumes (an emptyDir and the projected service account token, a tmpfs) are idmapped mounts:
 * what root writes inside is owned by the host's root on disk. On Debian's containerd 1.6, which
 * reports no runtime handlers, the pod's sandbox fails with upstream's message, and the Go
 * kubelet v1.36.3 on its own containerd 1.6 gives the same event for the same pod. The same world
 * shows the other handler feature containerd 2.x reports, recursive read-only mounts: a
 * `recursiveReadOnly: Enabled` mount is read-only down to its submounts there and says Enabled in
 * the container's status; on containerd 1.6, IfPossible is a plain read-only mount and Enabled
 * fails with the Go kubelet's message.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { CriConnection } from "../src/cri/connection.ts";
import { RemoteRuntimeService } from "../src/cri/remote_runtime.ts";
import type { RunningAgent } from "./agent_process.ts";
import { type BenchAgent, startUpstreamKubelet } from "./_bench_agents.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import { BUSYBOX, BUSYBOX_IMAGE, importImages, PAUSE } from "./images.ts";
import {
  e2eSuite,
  ensureDefaultServiceAccount,
  ensureRootCAConfigMap,
  POD_POLL_MS,
  poll,
  startNodeAgent,
  waitPod,
  waitPodGone,
} from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("user namespace e2e tests", ["containerd", "ctr", "runc", "go"]);
/** Our agent on containerd 2.x. */
const NODE2 = "kts-userns-c2";
/** Our agent on Debian's containerd 1.6. */
const NODE16 = "kts-userns-c16";
/** The Go kubelet on another containerd 1.6. */
const NODE_UPSTREAM = "kts-userns-up";
const NS = "default";
const IDS_PER_POD = 65536;

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly containerd2: ContainerdHandle;
  readonly agent: RunningAgent;
  /** --root-dir of the agent on containerd 2.x. */
  readonly rootDir: string;
  readonly containerd16: ContainerdHandle;
  readonly agent16: RunningAgent;
  readonly containerdUpstream: ContainerdHandle;
  readonly upstream: BenchAgent;
}

const suite = e2eSuite<World>({
  name: "user namespaces",
  gate,
  userAgent: "user-namespaces-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "userns-e2e-" });
    // runc, inside the pod's user namespace, walks to the container's rootfs under containerd's
    // state directory as the pod's unprivileged host uid: a 0700 parent denies it (containerd
    // makes its own root and state 0711 for this).
    await Deno.chmod(dir, 0o711);
    const stack = new AsyncDisposableStack();
    try {
      const cp = stack.use(
        await startControlPlane({
          dir: join(dir, "cp"),
          nodeNames: [NODE2, NODE16, NODE_UPSTREAM],
        }),
      );
      await ensureDefaultServiceAccount(cp);
      await ensureRootCAConfigMap(cp);
      const runtime = async (name: string, runtime: "containerd" | "containerd2") => {
        const socket = join(dir, name, "containerd.sock");
        const c = stack.use(await startContainerd({ dir: join(dir, name), socket, runtime }));
        await importImages({ containerdSocket: socket, images: [BUSYBOX, PAUSE] });
        return c;
      };
      const containerd2 = await runtime("c2", "containerd2");
      const containerd16 = await runtime("c16", "containerd");
      const containerdUpstream = await runtime("cup", "containerd");
      const agentOn = async (nodeName: string, containerd: ContainerdHandle, sub: string) => {
        await Deno.mkdir(join(dir, sub), { recursive: true });
        const { agent } = await startNodeAgent({
          cp,
          dir: join(dir, sub),
          nodeName,
          endpoint: containerd.endpoint,
        });
        stack.defer(async () => {
          agent.process.kill("SIGTERM");
          await agent.process.status;
        });
        return agent;
      };
      const agent = await agentOn(NODE2, containerd2, "node-c2");
      const agent16 = await agentOn(NODE16, containerd16, "node-c16");
      const upstream = await startUpstreamKubelet({
        cp,
        dir: join(dir, "node-up"),
        nodeName: NODE_UPSTREAM,
        endpoint: containerdUpstream.endpoint,
        log: (line) => console.error(line),
      });
      stack.move();
      return {
        dir,
        cp,
        containerd2,
        agent,
        rootDir: join(dir, "node-c2", "root"),
        containerd16,
        agent16,
        containerdUpstream,
        upstream,
      };
    } catch (e) {
      // Nothing of a world that did not start may outlive the test run.
      await stack.disposeAsync();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw e;
    }
  },
});

/** A busybox pod with its own user namespace, an emptyDir and the default token volume. */
function podManifest(name: string, nodeName: string): string {
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS, labels: { e2e: "user-namespaces" } },
    spec: {
      nodeName,
      hostUsers: false,
      restartPolicy: "Always",
      terminationGracePeriodSeconds: 2,
      containers: [{
        name: "test",
        image: BUSYBOX_IMAGE,
        command: ["/bin/sh", "-c", "sleep 3600"],
        volumeMounts: [{ name: "data", mountPath: "/data" }],
      }],
      volumes: [{ name: "data", emptyDir: {} }],
    },
  });
}

async function create(w: World, manifest: string): Promise<void> {
  const r = await w.cp.kubectl(["create", "-f", "-"], { stdin: manifest });
  assert.equal(r.code, 0, r.stderr);
}

async function exec(w: World, pod: string, script: string): Promise<string> {
  const r = await w.cp.kubectl([
    "exec",
    pod,
    "-n",
    NS,
    "-c",
    "test",
    "--",
    "/bin/sh",
    "-c",
    script,
  ]);
  assert.equal(r.code, 0, `${script}: ${r.stderr}`);
  return r.stdout;
}

/** The host pid of a container, from containerd's verbose CRI status. */
async function hostPid(containerd: ContainerdHandle, containerID: string): Promise<number> {
  const connection = new CriConnection({ endpoint: containerd.endpoint });
  try {
    const runtime = new RemoteRuntimeService({ connection, timeoutMs: 30_000 });
    const st = await runtime.containerStatus(containerID.replace(/^containerd:\/\//, ""), true);
    const info = JSON.parse(st.info["info"] ?? "{}") as { pid?: number };
    assert.ok(typeof info.pid === "number" && info.pid > 0, JSON.stringify(st.info));
    return info.pid;
  } finally {
    connection.close();
  }
}

/** The first field of /proc/<pid>/status' Uid line (the real uid), as the host sees it. */
async function hostUid(pid: number): Promise<number> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  const m = /^Uid:\s+(\d+)/m.exec(status);
  assert.ok(m, status);
  return Number(m[1]);
}

/** `<inside> <outside> <length>` of a uid_map with one line. */
function parseMap(text: string): [number, number, number] {
  const lines = text.trim().split("\n");
  assert.equal(lines.length, 1, text);
  const f = lines[0]!.trim().split(/\s+/).map(Number);
  assert.equal(f.length, 3, text);
  return [f[0]!, f[1]!, f[2]!];
}

suite.test(
  "on containerd 2.x the pod's root is an unprivileged block of host IDs, its volumes idmapped",
  async (w, api) => {
    const name = "userns-pod";
    await create(w, podManifest(name, NODE2));
    const p = await waitPod(
      api,
      NS,
      name,
      "Running",
      (p) => p.status?.phase === "Running",
      120_000,
    );
    const uid = p.metadata!.uid!;

    // Inside: root, with 65536 IDs mapped from a high block.
    assert.equal((await exec(w, name, "id -u")).trim(), "0");
    const [inside, outside, length] = parseMap(await exec(w, name, "cat /proc/self/uid_map"));
    assert.deepEqual([inside, length], [0, IDS_PER_POD]);
    assert.ok(outside >= IDS_PER_POD && outside % IDS_PER_POD === 0, String(outside));
    assert.deepEqual(parseMap(await exec(w, name, "cat /proc/self/gid_map")), [0, outside, length]);

    // Outside: the container's process runs as that unprivileged uid on the host.
    const containerID = p.status?.containerStatuses?.[0]?.containerID ?? "";
    const pid = await hostPid(w.containerd2, containerID);
    const uidOutside = await hostUid(pid);
    console.error(`uid_map 0 ${outside} ${length}; host pid ${pid} runs as uid ${uidOutside}`);
    assert.equal(uidOutside, outside, "uid 0 inside is the block's first uid outside");
    assert.deepEqual(parseMap(await Deno.readTextFile(`/proc/${pid}/uid_map`)), [
      0,
      outside,
      length,
    ]);

    // The agent recorded that block in the pod's directory, in upstream's format.
    const file = JSON.parse(await Deno.readTextFile(join(w.rootDir, "pods", uid, "userns")));
    const mapping = { hostId: outside, containerId: 0, length: IDS_PER_POD };
    assert.deepEqual(file, { uidMappings: [mapping], gidMappings: [mapping] });

    // The volumes are idmapped: root inside writes the emptyDir as the host's root, and reads
    // the token tmpfs the agent wrote as root.
    await exec(w, name, "echo hello > /data/f && ls -ln /data/f");
    const onHost = await Deno.stat(
      join(w.rootDir, "pods", uid, "volumes", "kubernetes.io~empty-dir", "data", "f"),
    );
    assert.equal(onHost.uid, 0, "owned by the host's root through the idmapped mount");
    assert.equal(
      (await exec(w, name, "cat /var/run/secrets/kubernetes.io/serviceaccount/namespace")).trim(),
      NS,
    );
    assert.match(await exec(w, name, "ls -ln /data/f"), /^-\S+\s+\d+\s+0\s+0\s/);

    // A second pod gets a block of its own.
    await create(w, podManifest("userns-pod-2", NODE2));
    await waitPod(
      api,
      NS,
      "userns-pod-2",
      "Running",
      (p) => p.status?.phase === "Running",
      120_000,
    );
    const [, outside2] = parseMap(await exec(w, "userns-pod-2", "cat /proc/self/uid_map"));
    assert.notEqual(outside2, outside);
    assert.ok(outside2 >= IDS_PER_POD && outside2 % IDS_PER_POD === 0, String(outside2));

    // Deleted, the pod's block goes with its directory.
    const del = await w.cp.kubectl(["delete", "pod", name, "-n", NS, "--wait=false"]);
    assert.equal(del.code, 0, del.stderr);
    await waitPodGone(api, NS, name, 120_000);
    await poll(
      "the pod's userns file removed",
      async () => {
        try {
          await Deno.stat(join(w.rootDir, "pods", uid, "userns"));
          return undefined;
        } catch (e) {
          return e instanceof Deno.errors.NotFound ? true : undefined;
        }
      },
      60_000,
      POD_POLL_MS,
    );
  },
);

/** The pod's FailedCreatePodSandBox event message on one node. */
async function sandboxFailure(w: World, name: string, nodeName: string): Promise<string> {
  await create(w, podManifest(name, nodeName));
  const event = await poll(
    `the FailedCreatePodSandBox event of ${name}`,
    async () => {
      const r = await w.cp.kubectl(["get", "events", "-n", NS, "-o", "json"]);
      assert.equal(r.code, 0, r.stderr);
      const items = JSON.parse(r.stdout).items as {
        reason: string;
        message: string;
        involvedObject: { name: string };
      }[];
      return items.find((e) =>
        e.involvedObject.name === name && e.reason === "FailedCreatePodSandBox"
      );
    },
    120_000,
    POD_POLL_MS,
  );
  return event.message;
}

suite.test(
  "on containerd 1.6 the pod fails with upstream's message, as under the Go kubelet",
  async (w, api) => {
    const ours = await sandboxFailure(w, "on-c16", NODE16);
    const theirs = await sandboxFailure(w, "on-upstream", NODE_UPSTREAM);
    console.error(
      `containerd 1.6: ours ${JSON.stringify(ours)}\nGo kubelet ${JSON.stringify(theirs)}`,
    );
    assert.equal(ours, theirs);
    assert.equal(
      ours,
      "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces",
    );
    const p = await waitPod(api, NS, "on-c16", "Pending", (p) => p.status?.phase === "Pending");
    assert.equal(p.status?.containerStatuses?.[0]?.state?.waiting?.reason, "ContainerCreating");
  },
);

/** A busybox pod mounting `hostDir` read-only at /rro with `mode` of recursiveReadOnly. */
function rroManifest(name: string, nodeName: string, hostDir: string, mode: string): string {
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS, labels: { e2e: "user-namespaces" } },
    spec: {
      nodeName,
      restartPolicy: "Always",
      terminationGracePeriodSeconds: 2,
      containers: [{
        name: "test",
        image: BUSYBOX_IMAGE,
        command: ["/bin/sh", "-c", "sleep 3600"],
        volumeMounts: [{
          name: "host",
          mountPath: "/rro",
          readOnly: true,
          recursiveReadOnly: mode,
        }],
      }],
      volumes: [{ name: "host", hostPath: { path: hostDir, type: "Directory" } }],
    },
  });
}

/** Exit code and output of `touch <path>` in the pod. */
async function tryTouch(w: World, pod: string, path: string): Promise<[number, string]> {
  const r = await w.cp.kubectl(["exec", pod, "-n", NS, "-c", "test", "--", "touch", path]);
  return [r.code, r.stderr];
}

suite.test(
  "recursiveReadOnly: containerd 2.x mounts read-only all the way down; on containerd 1.6 Enabled fails as under the Go kubelet",
  async (w, api) => {
    // A host directory with a tmpfs mounted inside it: a plain read-only bind mount leaves the
    // tmpfs writable, a recursively read-only one does not.
    const hostDir = join(w.dir, "rro");
    await Deno.mkdir(join(hostDir, "sub"), { recursive: true });
    const mount = await new Deno.Command("mount", {
      args: ["-t", "tmpfs", "-o", "size=1m", "tmpfs", join(hostDir, "sub")],
    }).output();
    assert.equal(mount.code, 0, new TextDecoder().decode(mount.stderr));
    try {
      const running = (name: string) =>
        waitPod(api, NS, name, "Running", (p) => p.status?.phase === "Running", 120_000);
      const rroOf = (p: { status?: { containerStatuses?: { volumeMounts?: unknown[] }[] } }) =>
        (p.status?.containerStatuses?.[0]?.volumeMounts?.[0] as { recursiveReadOnly?: string })
          ?.recursiveReadOnly;

      // containerd 2.x: its CRI Status says the default handler supports it.
      await create(w, rroManifest("rro-c2", NODE2, hostDir, "Enabled"));
      await running("rro-c2");
      const [code, err] = await tryTouch(w, "rro-c2", "/rro/sub/x");
      assert.notEqual(code, 0, "the submount is writable");
      assert.match(err, /Read-only file system/);
      await poll(
        "rro-c2 status Enabled",
        async () => {
          const p = await waitPod(api, NS, "rro-c2", "Running", () => true);
          return rroOf(p) === "Enabled" ? true : undefined;
        },
        30_000,
        POD_POLL_MS,
      );

      // containerd 1.6 lists no handlers: IfPossible is a plain read-only mount, Disabled.
      await create(w, rroManifest("rro-c16-ifpossible", NODE16, hostDir, "IfPossible"));
      const c16 = await running("rro-c16-ifpossible");
      assert.equal(rroOf(c16), "Disabled");
      assert.deepEqual((await tryTouch(w, "rro-c16-ifpossible", "/rro/sub/y"))[0], 0);
      assert.notEqual((await tryTouch(w, "rro-c16-ifpossible", "/rro/top"))[0], 0);

      // Enabled cannot be had there: the container waits, with the Go kubelet's message.
      const waiting = async (name: string, nodeName: string) => {
        await create(w, rroManifest(name, nodeName, hostDir, "Enabled"));
        const p = await waitPod(
          api,
          NS,
          name,
          "CreateContainerConfigError",
          (p) =>
            p.status?.containerStatuses?.[0]?.state?.waiting?.reason ===
              "CreateContainerConfigError",
          120_000,
        );
        return p.status!.containerStatuses![0]!.state!.waiting!.message ?? "";
      };
      const ours = await waiting("rro-c16-enabled", NODE16);
      const theirs = await waiting("rro-up-enabled", NODE_UPSTREAM);
      console.error(
        `recursiveReadOnly Enabled on containerd 1.6: ours ${ours}; Go kubelet ${theirs}`,
      );
      assert.equal(ours, theirs);
      assert.equal(
        ours,
        'failed to resolve recursive read-only mode: volume "host" requested recursive read-only mode, but it is not supported by the runtime',
      );
    } finally {
      for (const pod of ["rro-c2", "rro-c16-ifpossible", "rro-c16-enabled", "rro-up-enabled"]) {
        await w.cp.kubectl(["delete", "pod", pod, "-n", NS, "--wait=false", "--ignore-not-found"]);
      }
      for (const pod of ["rro-c2", "rro-c16-ifpossible"]) await waitPodGone(api, NS, pod, 120_000);
      await new Deno.Command("umount", { args: ["-l", join(hostDir, "sub")] }).output();
    }
  },
);

suite.teardown("stop", async (w) => {
  const code = await w.upstream.stop();
  if (code !== 0) console.error(`the Go kubelet exited ${code}`);
  w.agent16.process.kill("SIGTERM");
  await w.agent16.process.status;
  await w.containerdUpstream.stop();
  await w.containerd16.stop();
  await w.containerd2.stop();
});
