/**
 * Pod lifecycle end to end: the agent against a real kube-apiserver and real containerd runs
 * pods created with kubectl (bound to it by spec.nodeName, as no scheduler runs here), reports
 * their status as upstream does, stops them gracefully, runs static pods with mirror pods,
 * rejects what does not fit, and adopts its running pods after a SIGKILL.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import { type RunningAgent, spawnAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import { BUSYBOX, BUSYBOX_IMAGE, importImages, PAUSE } from "./images.ts";
import {
  e2eSuite,
  getPod,
  POD_POLL_MS,
  podCgroupLimits,
  poll,
  startNodeAgent,
  SYNC_LOOP_STARTED,
  waitPod,
  waitPodGone,
} from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("pod lifecycle e2e tests", [
  "containerd",
  "ctr",
  "runc",
  "openssl",
  "go",
]);
const NODE = "kts-pods-e2e";
const NS = "default";

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly containerd: ContainerdHandle;
  readonly staticDir: string;
  readonly args: string[];
  /** The agent's podLogsDir (its own: see startNodeAgent). */
  readonly podLogsDir: string;
  agent: RunningAgent;
}

const suite = e2eSuite<World>({
  name: "pod lifecycle",
  gate,
  userAgent: "pods-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "pods-e2e-" });
    const cp = await startControlPlane({ dir: join(dir, "cp"), nodeNames: [NODE] });
    const socket = join(dir, "containerd", "containerd.sock");
    const containerd = await startContainerd({ dir: join(dir, "containerd"), socket });
    await importImages({ containerdSocket: socket, images: [BUSYBOX, PAUSE] });
    const staticDir = join(dir, "manifests");
    await Deno.mkdir(staticDir, { recursive: true });
    const { agent, args, podLogsDir } = await startNodeAgent({
      cp,
      dir,
      nodeName: NODE,
      endpoint: containerd.endpoint,
      configLines: [`staticPodPath: ${staticDir}`, "fileCheckFrequency: 2s"],
    });
    return { dir, cp, containerd, staticDir, args, podLogsDir, agent };
  },
});
const e2e = suite.test;

interface PodOptions {
  restartPolicy?: "Always" | "OnFailure" | "Never";
  grace?: number;
  initContainers?: unknown[];
  cpu?: string;
  terminationMessagePolicy?: "File" | "FallbackToLogsOnError";
}

/** A busybox pod bound to the node, running `script` in container "main". */
function podManifest(name: string, script: string, o: PodOptions = {}): string {
  const pod = {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS, labels: { e2e: "pods" } },
    spec: {
      nodeName: NODE,
      automountServiceAccountToken: false,
      restartPolicy: o.restartPolicy ?? "Always",
      terminationGracePeriodSeconds: o.grace ?? 2,
      ...(o.initContainers ? { initContainers: o.initContainers } : {}),
      containers: [{
        name: "main",
        image: BUSYBOX_IMAGE,
        imagePullPolicy: "Never",
        command: ["sh", "-c", script],
        ...(o.cpu ? { resources: { requests: { cpu: o.cpu } } } : {}),
        ...(o.terminationMessagePolicy
          ? { terminationMessagePolicy: o.terminationMessagePolicy }
          : {}),
      }],
    },
  };
  return JSON.stringify(pod);
}

async function create(w: World, manifest: string): Promise<void> {
  const r = await w.cp.kubectl(["create", "-f", "-"], { stdin: manifest });
  assert.equal(r.code, 0, r.stderr);
}

function status(pod: V1Pod, name = "main"): V1ContainerStatus | undefined {
  return [...(pod.status?.containerStatuses ?? []), ...(pod.status?.initContainerStatuses ?? [])]
    .find((c) => c.name === name);
}

e2e("a kubectl pod runs with a pod IP, and its log is in podLogsDir's layout", async (w, api) => {
  await create(w, podManifest("web", "echo hello from web; sleep 3600"));
  const pod = await waitPod(api, NS, "web", "Running", (p) => p.status?.phase === "Running");
  const uid = pod.metadata!.uid!;
  assert.match(pod.status?.podIP ?? "", /^10\.88\./);
  assert.deepEqual(pod.status?.podIPs?.map((i) => i.ip), [pod.status?.podIP]);
  assert.ok(pod.status?.hostIP, "hostIP is set");
  assert.ok(pod.status?.startTime, "startTime is set");
  assert.equal(pod.status?.qosClass, "BestEffort");
  const c = status(pod)!;
  assert.ok(c.state?.running?.startedAt, JSON.stringify(c));
  assert.match(c.containerID ?? "", /^containerd:\/\/[0-9a-f]{64}$/);
  assert.equal(c.restartCount, 0);
  assert.equal(c.ready, true);
  assert.equal(c.started, true);
  assert.equal(c.image, BUSYBOX_IMAGE);
  const types = (pod.status?.conditions ?? []).filter((x) => x.status === "True").map((x) => x.type)
    .sort();
  assert.deepEqual(types, [
    "ContainersReady",
    "Initialized",
    "PodReadyToStartContainers",
    "PodScheduled",
    "Ready",
  ]);
  // /var/log/pods by default; each e2e agent has its own (see startNodeAgent).
  const log = `${w.podLogsDir}/${NS}_web_${uid}/main/0.log`;
  const text = await poll(
    "the container log",
    async () => {
      const t = await Deno.readTextFile(log);
      return t.includes("hello from web") ? t : undefined;
    },
    10_000,
    POD_POLL_MS,
  );
  assert.match(text, /^\S+ stdout F hello from web$/m);
  const logs = await w.cp.kubectl(["get", "events", "-n", NS, "-o", "json"]);
  const reasons =
    (JSON.parse(logs.stdout).items as { reason: string; involvedObject: { name: string } }[])
      .filter((e) => e.involvedObject.name === "web").map((e) => e.reason);
  for (const r of ["Pulled", "Created", "Started"]) {
    assert.ok(reasons.includes(r), `${r} event: ${reasons}`);
  }
  // containerd 1.6 has no container events: the evented PLEG says so once and relists.
  const said = w.agent.stderr().split("\n").filter((l) =>
    l.includes("does not serve CRI GetContainerEvents")
  );
  assert.equal(said.length, 1, said.join("\n"));
});

e2e("a pod deleted with a grace period gets SIGTERM, then leaves the API", async (w, api) => {
  await create(
    w,
    podManifest(
      "graceful",
      "trap 'echo got SIGTERM; exit 0' TERM; echo ready; while true; do sleep 0.2; done",
      { grace: 30 },
    ),
  );
  const pod = await waitPod(api, NS, "graceful", "Running", (p) => p.status?.phase === "Running");
  const uid = pod.metadata!.uid!;
  const start = Date.now();
  const del = await w.cp.kubectl(["delete", "pod", "graceful", "-n", NS, "--wait=false"]);
  assert.equal(del.code, 0, del.stderr);
  // Read while it exists: once the pod is terminated its dead container goes, log included.
  const logPath = `${w.podLogsDir}/${NS}_graceful_${uid}/main/0.log`;
  const log = await poll(
    "the TERM line",
    async () => {
      const t = await Deno.readTextFile(logPath).catch(() => "");
      return t.includes("got SIGTERM") ? t : undefined;
    },
    30_000,
    20,
  );
  assert.match(log, /got SIGTERM/);
  await waitPodGone(api, NS, "graceful", 30_000);
  assert.ok(Date.now() - start < 20_000, "the container stopped on SIGTERM, not at the deadline");
  // The container deletor removes it with its log, well before the container GC's minute.
  await poll(
    "the dead container's log removed",
    async () => (await Deno.stat(logPath).then(() => false, () => true)) || undefined,
    10_000,
    POD_POLL_MS,
  );
});

e2e("exit codes under each restart policy reach upstream's phase and reasons", async (w, api) => {
  const cases = [
    { name: "never-ok", policy: "Never", code: 0, phase: "Succeeded", reason: "Completed" },
    { name: "never-fail", policy: "Never", code: 1, phase: "Failed", reason: "Error" },
    { name: "onfailure-ok", policy: "OnFailure", code: 0, phase: "Succeeded", reason: "Completed" },
  ] as const;
  for (const c of cases) {
    await create(w, podManifest(c.name, `exit ${c.code}`, { restartPolicy: c.policy }));
  }
  for (const c of cases) {
    const pod = await waitPod(api, NS, c.name, c.phase, (p) => p.status?.phase === c.phase);
    const s = status(pod)!;
    assert.equal(s.state?.terminated?.reason, c.reason, c.name);
    assert.equal(s.state?.terminated?.exitCode, c.code, c.name);
    assert.equal(s.restartCount, 0, c.name);
    assert.equal(s.ready, false);
  }
  // Restarted by policy: exit 1 under OnFailure, exit 0 under Always.
  await create(w, podManifest("onfailure-fail", "exit 1", { restartPolicy: "OnFailure" }));
  await create(w, podManifest("always-ok", "exit 0", { restartPolicy: "Always" }));
  for (
    const [name, reason, code] of [["onfailure-fail", "Error", 1], [
      "always-ok",
      "Completed",
      0,
    ]] as const
  ) {
    const pod = await waitPod(
      api,
      NS,
      name,
      "a restart and CrashLoopBackOff",
      (p) =>
        (status(p)?.restartCount ?? 0) >= 1 &&
        status(p)?.state?.waiting?.reason === "CrashLoopBackOff",
      90_000,
    );
    const s = status(pod)!;
    assert.equal(s.lastState?.terminated?.reason, reason);
    assert.equal(s.lastState?.terminated?.exitCode, code);
    assert.match(
      s.state?.waiting?.message ?? "",
      /^back-off \d+s restarting failed container=main pod=/,
    );
    assert.equal(pod.status?.phase, "Running", `${name} stays Running between restarts`);
  }
});

e2e(
  "termination messages come from the file, or the log with FallbackToLogsOnError",
  async (w, api) => {
    await create(
      w,
      podManifest("msg-file", "printf 'from the file' > /dev/termination-log; exit 3", {
        restartPolicy: "Never",
      }),
    );
    await create(
      w,
      podManifest("msg-log", "echo line one; echo last words; exit 4", {
        restartPolicy: "Never",
        terminationMessagePolicy: "FallbackToLogsOnError",
      }),
    );
    const file = await waitPod(api, NS, "msg-file", "Failed", (p) => p.status?.phase === "Failed");
    assert.equal(status(file)?.state?.terminated?.message, "from the file");
    const log = await waitPod(api, NS, "msg-log", "Failed", (p) => p.status?.phase === "Failed");
    assert.equal(status(log)?.state?.terminated?.message, "line one\nlast words\n");
  },
);

e2e("init containers run in order; a failing one under Never fails the pod", async (w, api) => {
  const init = (name: string, script: string) => ({
    name,
    image: BUSYBOX_IMAGE,
    imagePullPolicy: "Never",
    command: ["sh", "-c", script],
  });
  await create(
    w,
    podManifest("inits", "sleep 3600", {
      initContainers: [init("first", "sleep 1"), init("second", "sleep 1")],
    }),
  );
  const pod = await waitPod(api, NS, "inits", "Running", (p) => p.status?.phase === "Running");
  const first = status(pod, "first")!.state!.terminated!;
  const second = status(pod, "second")!.state!.terminated!;
  assert.equal(first.reason, "Completed");
  assert.equal(second.reason, "Completed");
  assert.ok(
    new Date(first.finishedAt!).getTime() <= new Date(second.startedAt!).getTime(),
    "second started after first finished",
  );
  assert.ok(
    new Date(second.finishedAt!).getTime() <=
      new Date(status(pod)!.state!.running!.startedAt!).getTime(),
  );

  await create(
    w,
    podManifest("init-fails", "sleep 3600", {
      restartPolicy: "Never",
      initContainers: [init("broken", "exit 3"), init("after", "true")],
    }),
  );
  const failed = await waitPod(
    api,
    NS,
    "init-fails",
    "Failed",
    (p) => p.status?.phase === "Failed",
  );
  assert.equal(status(failed, "broken")!.state?.terminated?.exitCode, 3);
  assert.equal(status(failed, "after")!.state?.waiting?.reason, "PodInitializing");
  assert.equal(status(failed)!.state?.waiting?.reason, "PodInitializing");
  const initialized = failed.status?.conditions?.find((c) => c.type === "Initialized");
  assert.equal(initialized?.status, "False");
});

e2e("a sidecar starts first and keeps running beside the main container", async (w, api) => {
  await create(
    w,
    podManifest("sidecar", "sleep 3600", {
      initContainers: [{
        name: "proxy",
        image: BUSYBOX_IMAGE,
        imagePullPolicy: "Never",
        restartPolicy: "Always",
        command: ["sh", "-c", "sleep 3600"],
      }],
    }),
  );
  const pod = await waitPod(
    api,
    NS,
    "sidecar",
    "Running with both",
    (p) =>
      p.status?.phase === "Running" && !!status(p)?.state?.running &&
      !!status(p, "proxy")?.state?.running,
  );
  const proxy = status(pod, "proxy")!;
  assert.equal(proxy.started, true);
  assert.ok(
    new Date(proxy.state!.running!.startedAt!).getTime() <=
      new Date(status(pod)!.state!.running!.startedAt!).getTime(),
  );
});

e2e("a pod asking for more CPU than allocatable is rejected with OutOfcpu", async (w, api) => {
  await create(w, podManifest("too-big", "sleep 3600", { cpu: "1000" }));
  const pod = await waitPod(api, NS, "too-big", "Failed", (p) => p.status?.phase === "Failed");
  assert.equal(pod.status?.reason, "OutOfcpu");
  assert.match(
    pod.status?.message ?? "",
    /^Pod was rejected: Node didn't have enough resource: cpu/,
  );
  // Others are untouched.
  await create(w, podManifest("fits", "sleep 3600"));
  await waitPod(api, NS, "fits", "Running", (p) => p.status?.phase === "Running");
});

e2e(
  "sysctls: a safe one is set in the pod, an unsafe one is rejected with SysctlForbidden",
  async (w, api) => {
    const withSysctl = (name: string, sysctl: string, value: string) => {
      const pod = JSON.parse(
        podManifest(name, "cat /proc/sys/net/ipv4/ip_local_port_range; sleep 3600"),
      );
      pod.spec.securityContext = { sysctls: [{ name: sysctl, value }] };
      return JSON.stringify(pod);
    };
    await create(w, withSysctl("safe-sysctl", "net.ipv4.ip_local_port_range", "40000 50000"));
    await waitPod(api, NS, "safe-sysctl", "Running", (p) => p.status?.phase === "Running");
    const logs = await poll("the container's view of its sysctl", async () => {
      const r = await w.cp.kubectl(["logs", "-n", NS, "safe-sysctl"]);
      return r.stdout.trim() !== "" ? r.stdout : undefined;
    }, 30_000);
    assert.match(logs, /^40000\s+50000\n$/);
    // Not allowlisted (allowedUnsafeSysctls is empty): upstream's admission rejection.
    await create(w, withSysctl("unsafe-sysctl", "kernel.msgmax", "65536"));
    const pod = await waitPod(
      api,
      NS,
      "unsafe-sysctl",
      "Failed",
      (p) => p.status?.phase === "Failed",
    );
    assert.equal(pod.status?.reason, "SysctlForbidden");
    assert.equal(
      pod.status?.message,
      'Pod was rejected: forbidden sysctl: "kernel.msgmax" not allowlisted',
    );
  },
);

e2e(
  "pod-level resources bound the pod cgroup and a container without limits of its own",
  async (w, api) => {
    const pod = JSON.parse(podManifest("pod-level", "sleep 3600"));
    // Guaranteed by the pod-level resources alone: the container sets none.
    pod.spec.resources = {
      requests: { cpu: "200m", memory: "64Mi" },
      limits: { cpu: "200m", memory: "64Mi" },
    };
    await create(w, JSON.stringify(pod));
    const running = await waitPod(
      api,
      NS,
      "pod-level",
      "Running",
      (p) => p.status?.phase === "Running",
    );
    assert.equal(running.status?.qosClass, "Guaranteed");
    const cgroup = await podCgroupLimits(w.dir, running.metadata!.uid!);
    const mem = String(64 * 2 ** 20);
    assert.deepEqual(
      cgroup,
      "cpu.max" in cgroup
        ? { "cpu.max": "20000 100000", "memory.max": mem }
        : { "cpu.cfs_quota_us": "20000", "cpu.shares": "204", "memory.limit_in_bytes": mem },
    );
    // The container's own limit is the pod's (upstream getMemoryLimit), as its cgroup shows.
    const limit = await w.cp.kubectl([
      "exec",
      "-n",
      NS,
      "pod-level",
      "--",
      "sh",
      "-c",
      "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max",
    ]);
    assert.equal(limit.code, 0, limit.stderr);
    assert.equal(limit.stdout.trim(), mem);
  },
);

e2e(
  "a resize of pod-level resources reaches the pod cgroup, the container and the pod status",
  async (w, api) => {
    const pod = JSON.parse(podManifest("pod-level-resize", "sleep 3600"));
    pod.spec.resources = {
      requests: { cpu: "200m", memory: "64Mi" },
      limits: { cpu: "200m", memory: "64Mi" },
    };
    await create(w, JSON.stringify(pod));
    const running = await waitPod(
      api,
      NS,
      "pod-level-resize",
      "Running",
      (p) => p.status?.phase === "Running",
    );
    const uid = running.metadata!.uid!;
    // Guaranteed stays Guaranteed: requests and limits grow together.
    const patch = await w.cp.kubectl([
      "patch",
      "pod",
      "pod-level-resize",
      "-n",
      NS,
      "--subresource",
      "resize",
      "--type",
      "merge",
      "-p",
      JSON.stringify({
        spec: {
          resources: {
            requests: { cpu: "400m", memory: "128Mi" },
            limits: { cpu: "400m", memory: "128Mi" },
          },
        },
      }),
    ]);
    assert.equal(patch.code, 0, patch.stderr);
    const mem = String(128 * 2 ** 20);
    const cgroup = await poll(
      "the pod cgroup at the new pod-level limits",
      async () => {
        const c = await podCgroupLimits(w.dir, uid);
        const want = "cpu.max" in c
          ? { "cpu.max": "40000 100000", "memory.max": mem }
          : { "cpu.cfs_quota_us": "40000", "cpu.shares": "409", "memory.limit_in_bytes": mem };
        return JSON.stringify(c) === JSON.stringify(want) ? c : undefined;
      },
      60_000,
      POD_POLL_MS,
    );
    assert.ok(cgroup);
    // The container sets no limit of its own: it follows the pod's.
    const limit = await w.cp.kubectl([
      "exec",
      "-n",
      NS,
      "pod-level-resize",
      "--",
      "sh",
      "-c",
      "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max",
    ]);
    assert.equal(limit.code, 0, limit.stderr);
    assert.equal(limit.stdout.trim(), mem);
    // The status reports the new allocation and what the pod cgroup runs with; the resize is
    // done (no PodResizePending or PodResizeInProgress condition), in the same container.
    const resized = await waitPod(
      api,
      NS,
      "pod-level-resize",
      "the pod-level resize in the status",
      (p) =>
        p.status?.resources?.limits?.cpu === "400m" &&
        p.status?.resources?.limits?.memory === "128Mi" &&
        !(p.status?.conditions ?? []).some((c) => c.type.startsWith("PodResize")),
    );
    assert.deepEqual(resized.status?.allocatedResources, { cpu: "400m", memory: "128Mi" });
    assert.equal(resized.status?.resources?.requests?.cpu, "400m");
    assert.equal(status(resized)?.restartCount, 0);
    assert.equal(status(resized)?.containerID, status(running)?.containerID);
    const del = await w.cp.kubectl(["delete", "pod", "pod-level-resize", "-n", NS, "--wait=false"]);
    assert.equal(del.code, 0, del.stderr);
  },
);

e2e("a static pod runs with a mirror pod, follows edits and goes when removed", async (w, api) => {
  const manifest = (msg: string) =>
    [
      "apiVersion: v1",
      "kind: Pod",
      "metadata: {name: static-web, namespace: default}",
      "spec:",
      "  containers:",
      `  - {name: main, image: ${BUSYBOX_IMAGE}, imagePullPolicy: Never, command: [sh, -c, 'echo ${msg}; sleep 3600']}`,
      "",
    ].join("\n");
  await Deno.writeTextFile(join(w.staticDir, "bad.yaml"), "apiVersion: v1\nkind: Pod\nspec: [\n");
  await Deno.writeTextFile(join(w.staticDir, "web.yaml"), manifest("v1"));
  const name = `static-web-${NODE}`;
  const mirror = await waitPod(
    api,
    NS,
    name,
    "mirror Running",
    (p) => p.status?.phase === "Running",
  );
  assert.ok(mirror.metadata?.annotations?.["kubernetes.io/config.mirror"]);
  assert.equal(mirror.metadata?.ownerReferences?.[0]?.kind, "Node");
  assert.equal(mirror.metadata?.ownerReferences?.[0]?.name, NODE);
  const firstHash = mirror.metadata?.annotations?.["kubernetes.io/config.hash"];

  await Deno.writeTextFile(join(w.staticDir, "web.yaml"), manifest("v2"));
  const edited = await waitPod(
    api,
    NS,
    name,
    "the edited pod Running",
    (p) =>
      p.metadata?.annotations?.["kubernetes.io/config.hash"] !== firstHash &&
      p.status?.phase === "Running",
    60_000,
  );
  assert.equal(
    edited.metadata?.annotations?.["kubernetes.io/config.mirror"],
    edited.metadata?.annotations?.["kubernetes.io/config.hash"],
  );

  // A deleted mirror pod is recreated.
  const del = await w.cp.kubectl(["delete", "pod", name, "-n", NS, "--wait=false"]);
  assert.equal(del.code, 0, del.stderr);
  await waitPod(
    api,
    NS,
    name,
    "the mirror pod back",
    (p) => p.metadata?.uid !== edited.metadata?.uid && !p.metadata?.deletionTimestamp,
    60_000,
  );

  await Deno.remove(join(w.staticDir, "web.yaml"));
  await waitPodGone(api, NS, name, 60_000);
  await Deno.remove(join(w.staticDir, "bad.yaml"));
});

e2e(
  "killed with SIGKILL and started again, the agent adopts 20 pods without restarts",
  async (w, api) => {
    const names = Array.from({ length: 20 }, (_, i) => `adopt-${i}`);
    for (const n of names) await create(w, podManifest(n, "sleep 3600"));
    const before = new Map<string, string>();
    for (const n of names) {
      const p = await waitPod(api, NS, n, "Running", (p) => p.status?.phase === "Running", 120_000);
      before.set(n, status(p)!.containerID!);
    }
    w.agent.process.kill("SIGKILL");
    await w.agent.process.status;
    w.agent = spawnAgent(w.args);
    await w.agent.waitFor(SYNC_LOOP_STARTED, 60_000);
    // Long enough for several syncs of every pod.
    await new Promise((r) => setTimeout(r, 8_000));
    for (const n of names) {
      const p = await getPod(api, NS, n);
      const s = status(p)!;
      assert.equal(p.status?.phase, "Running", n);
      assert.equal(s.restartCount, 0, n);
      assert.equal(s.containerID, before.get(n), `${n} kept its container`);
    }
    const del = await w.cp.kubectl(["delete", "pods", "-n", NS, "-l", "e2e=pods", "--wait=false"]);
    assert.equal(del.code, 0, del.stderr);
  },
);

suite.teardown("teardown", async (w) => {
  await w.containerd.stop();
});
