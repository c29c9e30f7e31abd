/**
 * RuntimeClass end to end, on Debian's containerd 1.6 with a second runc handler
 * (`runc-test`, the harness's `runtimeHandlers`) and the real apiserver, whose RuntimeClass
 * admission copies a class's overhead into `spec.overhead`. Our agent and the Go kubelet v1.36.3
 * each run on a containerd of their own, configured alike, and get the same pods, as upstream's
 * e2e specs of test/e2e/common/node/runtimeclass.go: a pod of a class whose handler the runtime
 * has runs in a sandbox of that handler (CRI PodSandbox and containerd's verbose status say so),
 * with the class's overhead in its pod cgroup; a class whose handler the runtime lacks leaves
 * the pod Pending with upstream's FailedCreatePodSandBox event and the runtime's error; a pod
 * whose class is deleted before it reaches the node gets the lister's NotFound in that event
 * and starts once the class exists again. Our agent's `kubelet_run_podsandbox_*` carry the
 * handler as their `runtime_handler` label.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import * as api from "../proto/runtime/v1/api.ts";
import { CriConnection } from "../src/cri/connection.ts";
import { RemoteRuntimeService } from "../src/cri/remote_runtime.ts";
import type { KubeClient } from "../src/client/kube_client.ts";
import type { RunningAgent } from "./agent_process.ts";
import { type BenchAgent, startUpstreamKubelet } from "./_bench_agents.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import { BUSYBOX, BUSYBOX_IMAGE, importImages, PAUSE } from "./images.ts";
import {
  e2eSuite,
  POD_POLL_MS,
  podCgroupLimits,
  poll,
  startNodeAgent,
  waitPod,
} from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("RuntimeClass e2e tests", ["containerd", "ctr", "runc", "go"]);
/** Our agent. */
const NODE = "kts-rc-ours";
/** The Go kubelet. */
const NODE_UPSTREAM = "kts-rc-up";
const NS = "default";
/** The second handler both containerds have (runc, as the default one). */
const HANDLER = "runc-test";
/** A handler neither containerd has. */
const MISSING_HANDLER = "rc-e2e-unconfigured";
/** The class of {@link HANDLER}, with an overhead. */
const CLASS = "rc-e2e-second";
/** The class of {@link MISSING_HANDLER}. */
const CLASS_UNCONFIGURED = "rc-e2e-unconfigured";
/** The overhead of {@link CLASS}. */
const OVERHEAD = { cpu: "250m", memory: "32Mi" };

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  /** containerd 1.6 and our agent on {@link NODE}. */
  readonly containerd: ContainerdHandle;
  readonly agent: RunningAgent;
  readonly agentDir: string;
  /** Another containerd 1.6 and the Go kubelet on {@link NODE_UPSTREAM}. */
  readonly containerdUpstream: ContainerdHandle;
  readonly upstream: BenchAgent;
  readonly upstreamDir: string;
}

function runtimeClassManifest(name: string, handler: string, overhead?: object): string {
  return JSON.stringify({
    apiVersion: "node.k8s.io/v1",
    kind: "RuntimeClass",
    metadata: { name },
    handler,
    ...(overhead ? { overhead: { podFixed: overhead } } : {}),
  });
}

const suite = e2eSuite<World>({
  name: "RuntimeClass",
  gate,
  userAgent: "runtime-class-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "rc-e2e-" });
    const stack = new AsyncDisposableStack();
    try {
      const cp = stack.use(
        await startControlPlane({ dir: join(dir, "cp"), nodeNames: [NODE, NODE_UPSTREAM] }),
      );
      // The classes exist before either kubelet lists them.
      for (
        const m of [
          runtimeClassManifest(CLASS, HANDLER, OVERHEAD),
          runtimeClassManifest(CLASS_UNCONFIGURED, MISSING_HANDLER),
        ]
      ) {
        const r = await cp.kubectl(["create", "-f", "-"], { stdin: m });
        assert.equal(r.code, 0, r.stderr);
      }
      const runtime = async (name: string) => {
        const socket = join(dir, name, "containerd.sock");
        const c = stack.use(
          await startContainerd({
            dir: join(dir, name),
            socket,
            runtime: "containerd",
            runtimeHandlers: [HANDLER],
          }),
        );
        await importImages({ containerdSocket: socket, images: [BUSYBOX, PAUSE] });
        return c;
      };
      const containerd = await runtime("c-ours");
      const containerdUpstream = await runtime("c-up");
      const agentDir = join(dir, "rc-node-ours");
      await Deno.mkdir(agentDir, { recursive: true });
      const { agent } = await startNodeAgent({
        cp,
        dir: agentDir,
        nodeName: NODE,
        endpoint: containerd.endpoint,
      });
      stack.defer(async () => {
        agent.process.kill("SIGTERM");
        await agent.process.status;
      });
      const upstreamDir = join(dir, "rc-node-up");
      const upstream = await startUpstreamKubelet({
        cp,
        dir: upstreamDir,
        nodeName: NODE_UPSTREAM,
        endpoint: containerdUpstream.endpoint,
        log: (line) => console.error(line),
      });
      stack.move();
      return {
        dir,
        cp,
        containerd,
        agent,
        agentDir,
        containerdUpstream,
        upstream,
        upstreamDir,
      };
    } catch (e) {
      // Nothing of a world that did not start may outlive the test run.
      await stack.disposeAsync();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw e;
    }
  },
});

/** upstream's NewRuntimeClassPod: busybox, a Guaranteed container so the pod cgroup has limits. */
function podManifest(name: string, nodeName: string | undefined, runtimeClassName: string) {
  const resources = { cpu: "250m", memory: "64Mi" };
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS, labels: { e2e: "runtime-class" } },
    spec: {
      ...(nodeName ? { nodeName } : {}),
      runtimeClassName,
      restartPolicy: "Never",
      automountServiceAccountToken: false,
      terminationGracePeriodSeconds: 1,
      containers: [{
        name: "test",
        image: BUSYBOX_IMAGE,
        command: ["/bin/sleep", "3600"],
        resources: { requests: resources, limits: resources },
      }],
    },
  });
}

async function kubectl(w: World, args: string[], stdin?: string): Promise<string> {
  const r = await w.cp.kubectl(args, stdin === undefined ? undefined : { stdin });
  assert.equal(r.code, 0, `kubectl ${args.join(" ")}: ${r.stderr}`);
  return r.stdout;
}

/** The parts of a core/v1 Event these tests read. */
interface PodEvent {
  type: string;
  reason: string;
  message: string;
  involvedObject: { name: string };
}

async function podEvents(w: World, name: string): Promise<PodEvent[]> {
  const out = await kubectl(w, ["get", "events", "-n", NS, "-o", "json"]);
  return (JSON.parse(out).items as PodEvent[]).filter((e) => e.involvedObject.name === name);
}

/** The first FailedCreatePodSandBox event about the pod, polled for. */
function sandboxFailure(w: World, name: string): Promise<PodEvent> {
  return poll(
    `the FailedCreatePodSandBox event of ${name}`,
    async () => (await podEvents(w, name)).find((e) => e.reason === "FailedCreatePodSandBox"),
    90_000,
    POD_POLL_MS,
  );
}

function status(p: V1Pod): V1ContainerStatus | undefined {
  return p.status?.containerStatuses?.find((c) => c.name === "test");
}

/** What the runtime says of the pod's sandbox: its handler in the list and in verbose status. */
async function sandboxOf(
  containerd: ContainerdHandle,
  uid: string,
): Promise<{ listed: string; verbose: unknown }> {
  const connection = new CriConnection({ endpoint: containerd.endpoint });
  try {
    const runtime = new RemoteRuntimeService({ connection, timeoutMs: 30_000 });
    const [sb] = await runtime.listPodSandbox(
      api.PodSandboxFilter.create({ labelSelector: { "io.kubernetes.pod.uid": uid } }),
    );
    assert.ok(sb, `a sandbox of pod ${uid}`);
    const st = await runtime.podSandboxStatus(sb.id, true);
    const info = JSON.parse(st.info["info"] ?? "{}") as { runtimeHandler?: unknown };
    return { listed: sb.runtimeHandler, verbose: info.runtimeHandler };
  } finally {
    connection.close();
  }
}

async function running(api: KubeClient, name: string): Promise<V1Pod> {
  return await waitPod(api, NS, name, "Running", (p) => p.status?.phase === "Running", 120_000);
}

/** Our agent's /metrics through the apiserver's node proxy. */
function metrics(w: World): Promise<string> {
  return kubectl(w, ["get", "--raw", `/api/v1/nodes/${NODE}/proxy/metrics`]);
}

suite.test(
  "a pod of a class whose handler the runtime has runs with that handler and the class's overhead",
  async (w, api) => {
    await kubectl(w, ["create", "-f", "-"], podManifest("rc-ours", NODE, CLASS));
    await kubectl(w, ["create", "-f", "-"], podManifest("rc-up", NODE_UPSTREAM, CLASS));
    const ours = await running(api, "rc-ours");
    const theirs = await running(api, "rc-up");
    // The apiserver's RuntimeClass admission set the class's overhead.
    assert.deepEqual(ours.spec?.overhead, OVERHEAD);

    // containerd ran the sandbox with the class's handler.
    assert.deepEqual(await sandboxOf(w.containerd, ours.metadata!.uid!), {
      listed: HANDLER,
      verbose: HANDLER,
    });
    assert.deepEqual(await sandboxOf(w.containerdUpstream, theirs.metadata!.uid!), {
      listed: HANDLER,
      verbose: HANDLER,
    });

    // The pod cgroup holds the containers' limits plus the overhead: 500m and 96Mi, as the Go
    // kubelet's does.
    const cgroup = await podCgroupLimits(w.agentDir, ours.metadata!.uid!);
    console.error(`pod cgroup: ${JSON.stringify(cgroup)}`);
    assert.deepEqual(cgroup, await podCgroupLimits(w.upstreamDir, theirs.metadata!.uid!));
    const memory = String(96 * 2 ** 20);
    if ("cpu.max" in cgroup) {
      assert.deepEqual(cgroup, { "cpu.max": "50000 100000", "memory.max": memory });
    } else {
      assert.deepEqual(cgroup, {
        "cpu.cfs_quota_us": "50000",
        "cpu.shares": "512",
        "memory.limit_in_bytes": memory,
      });
    }

    // No failed attempt on the way.
    assert.deepEqual(
      (await podEvents(w, "rc-ours")).filter((e) => e.reason === "FailedCreatePodSandBox"),
      [],
    );
    assert.match(
      await metrics(w),
      new RegExp(
        `^kubelet_run_podsandbox_duration_seconds_count\\{runtime_handler="${HANDLER}"\\} [1-9]`,
        "m",
      ),
    );
  },
);

/** Pending with the container ContainerCreating, and the sandbox event, on one node. */
async function stuck(
  w: World,
  api: KubeClient,
  name: string,
): Promise<{ phase: string; waiting: string; event: string }> {
  const event = await sandboxFailure(w, name);
  const p = await waitPod(
    api,
    NS,
    name,
    "ContainerCreating",
    (p) => status(p)?.state?.waiting?.reason === "ContainerCreating",
    60_000,
  );
  return {
    phase: p.status?.phase ?? "",
    waiting: status(p)?.state?.waiting?.reason ?? "",
    event: `${event.type} ${event.reason}: ${event.message}`,
  };
}

suite.test(
  "a class whose handler the runtime lacks leaves the pod Pending with the runtime's error, as under the Go kubelet",
  async (w, api) => {
    await kubectl(w, ["create", "-f", "-"], podManifest("unconf-ours", NODE, CLASS_UNCONFIGURED));
    await kubectl(
      w,
      ["create", "-f", "-"],
      podManifest("unconf-up", NODE_UPSTREAM, CLASS_UNCONFIGURED),
    );
    const ours = await stuck(w, api, "unconf-ours");
    const theirs = await stuck(w, api, "unconf-up");
    console.error(
      `unconfigured handler: ours ${JSON.stringify(ours)}\nGo kubelet ${JSON.stringify(theirs)}`,
    );
    assert.deepEqual(ours, theirs);
    assert.deepEqual(ours, {
      phase: "Pending",
      waiting: "ContainerCreating",
      event:
        `Warning FailedCreatePodSandBox: Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for "${MISSING_HANDLER}" is configured`,
    });
    assert.match(
      await metrics(w),
      new RegExp(
        `^kubelet_run_podsandbox_errors_total\\{runtime_handler="${MISSING_HANDLER}"\\} [1-9]`,
        "m",
      ),
    );
  },
);

suite.test(
  "a pod whose class is missing gets the lister's NotFound, as under the Go kubelet, and runs once the class exists",
  async (w, api) => {
    const late = "rc-e2e-late";
    const binding = (pod: string, node: string) =>
      api.request("POST", `/api/v1/namespaces/${NS}/pods/${pod}/binding`, {
        body: {
          apiVersion: "v1",
          kind: "Binding",
          metadata: { name: pod, namespace: NS },
          target: { apiVersion: "v1", kind: "Node", name: node },
        },
      });
    // The apiserver admits a pod only while its class exists: create the pods unbound, delete
    // the class, then bind them (admission does not look at bindings).
    await kubectl(w, ["create", "-f", "-"], runtimeClassManifest(late, HANDLER));
    await kubectl(w, ["create", "-f", "-"], podManifest("late-ours", undefined, late));
    await kubectl(w, ["create", "-f", "-"], podManifest("late-up", undefined, late));
    await kubectl(w, ["delete", "runtimeclass", late]);
    // The kubelets' watches of RuntimeClasses deliver the deletion in milliseconds.
    await new Promise((r) => setTimeout(r, 2_000));
    await binding("late-ours", NODE);
    await binding("late-up", NODE_UPSTREAM);

    const ours = await stuck(w, api, "late-ours");
    const theirs = await stuck(w, api, "late-up");
    console.error(
      `missing class: ours ${JSON.stringify(ours)}\nGo kubelet ${JSON.stringify(theirs)}`,
    );
    assert.deepEqual(ours, theirs);
    assert.deepEqual(ours, {
      phase: "Pending",
      waiting: "ContainerCreating",
      event:
        `Warning FailedCreatePodSandBox: Failed to create pod sandbox: runtimeclass.node.k8s.io "${late}" not found`,
    });

    // The pod workers retry; the class's return lets both pods run.
    await kubectl(w, ["create", "-f", "-"], runtimeClassManifest(late, HANDLER));
    const p = await running(api, "late-ours");
    await running(api, "late-up");
    assert.equal((await sandboxOf(w.containerd, p.metadata!.uid!)).listed, HANDLER);
  },
);

suite.teardown("stop", async (w) => {
  const code = await w.upstream.stop();
  if (code !== 0) console.error(`the Go kubelet exited ${code}`);
  await w.containerdUpstream.stop();
  await w.containerd.stop();
});
