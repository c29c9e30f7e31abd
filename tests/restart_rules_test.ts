/**
 * Container restart rules end to end (ContainerRestartRules and
 * RestartAllContainersOnContainerExits, both beta and on in v1.36): the agent against a real
 * kube-apiserver (which accepts the fields with its default feature gates) and real containerd
 * runs pods whose containers carry their own `restartPolicy` and `restartPolicyRules`, and
 * reports the phases, restart counts and last states upstream reports. Each container keeps what
 * it must remember across its restarts in an emptyDir, which outlives them.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Container, V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import type { RunningAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import { BUSYBOX, BUSYBOX_IMAGE, importImages, PAUSE } from "./images.ts";
import { e2eSuite, POD_POLL_MS, poll, startNodeAgent, waitPod } from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("restart rules e2e tests", [
  "containerd",
  "ctr",
  "runc",
  "openssl",
  "go",
]);
const NODE = "kts-restart-rules-e2e";
const NS = "default";

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly containerd: ContainerdHandle;
  readonly podLogsDir: string;
  agent: RunningAgent;
}

const suite = e2eSuite<World>({
  name: "restart rules",
  gate,
  userAgent: "restart-rules-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "restart-rules-e2e-" });
    const cp = await startControlPlane({ dir: join(dir, "cp"), nodeNames: [NODE] });
    const socket = join(dir, "containerd", "containerd.sock");
    const containerd = await startContainerd({ dir: join(dir, "containerd"), socket });
    await importImages({ containerdSocket: socket, images: [BUSYBOX, PAUSE] });
    const { agent, podLogsDir } = await startNodeAgent({
      cp,
      dir,
      nodeName: NODE,
      endpoint: containerd.endpoint,
    });
    return { dir, cp, containerd, podLogsDir, agent };
  },
});
const e2e = suite.test;

/** A busybox container running `script`, with the pod's emptyDir at /data. */
function container(name: string, script: string, o: Partial<V1Container> = {}): V1Container {
  return {
    name,
    image: BUSYBOX_IMAGE,
    imagePullPolicy: "Never",
    command: ["sh", "-c", script],
    volumeMounts: [{ name: "data", mountPath: "/data" }],
    ...o,
  };
}

/** A pod bound to the node, with restartPolicy Never and an emptyDir "data". */
async function create(
  w: World,
  name: string,
  containers: V1Container[],
  initContainers: V1Container[] = [],
): Promise<void> {
  const pod = {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS },
    spec: {
      nodeName: NODE,
      automountServiceAccountToken: false,
      restartPolicy: "Never",
      terminationGracePeriodSeconds: 2,
      ...(initContainers.length > 0 ? { initContainers } : {}),
      containers,
      volumes: [{ name: "data", emptyDir: {} }],
    },
  };
  const r = await w.cp.kubectl(["create", "-f", "-"], { stdin: JSON.stringify(pod) });
  assert.equal(r.code, 0, r.stderr);
}

function status(pod: V1Pod, name: string): V1ContainerStatus {
  const all = [
    ...(pod.status?.containerStatuses ?? []),
    ...(pod.status?.initContainerStatuses ?? []),
  ];
  const s = all.find((c) => c.name === name);
  assert.ok(s, `no status for ${name}: ${JSON.stringify(pod.status)}`);
  return s;
}

/** Fails with the pod's status if it reaches a terminal phase other than `want`. */
function phaseIs(want: string) {
  return (p: V1Pod): boolean => {
    const phase = p.status?.phase;
    if (phase !== want && (phase === "Failed" || phase === "Succeeded")) {
      throw new Error(`phase ${phase}, not ${want}: ${JSON.stringify(p.status)}`);
    }
    return phase === want;
  };
}

e2e(
  "a Restart rule restarts a container of a Never pod after exit 42, and not after exit 1",
  async (w, api) => {
    await create(w, "rule-42", [
      container("main", "if [ -f /data/ran ]; then exit 1; fi; touch /data/ran; exit 42", {
        restartPolicy: "Never",
        restartPolicyRules: [{ action: "Restart", exitCodes: { operator: "In", values: [42] } }],
      }),
    ]);
    // Exit 42 restarts it (the first restart has no back-off); exit 1 matches no rule, and its
    // restartPolicy Never makes the pod Failed.
    const pod = await waitPod(api, NS, "rule-42", "Failed", phaseIs("Failed"));
    const s = status(pod, "main");
    assert.equal(s.restartCount, 1, JSON.stringify(s));
    assert.equal(s.state?.terminated?.exitCode, 1, JSON.stringify(s));
    assert.equal(s.state?.terminated?.reason, "Error");
    assert.equal(s.lastState?.terminated?.exitCode, 42, JSON.stringify(s));
  },
);

e2e(
  "a container with restartPolicy OnFailure in a Never pod restarts after a failure until it succeeds",
  async (w, api) => {
    await create(w, "onfailure", [
      container("main", "if [ -f /data/ran ]; then exit 0; fi; touch /data/ran; exit 3", {
        restartPolicy: "OnFailure",
      }),
    ]);
    const pod = await waitPod(api, NS, "onfailure", "Succeeded", phaseIs("Succeeded"));
    const s = status(pod, "main");
    assert.equal(s.restartCount, 1, JSON.stringify(s));
    assert.equal(s.state?.terminated?.reason, "Completed");
    assert.equal(s.lastState?.terminated?.exitCode, 3, JSON.stringify(s));
  },
);

e2e(
  "a RestartAllContainers rule restarts every container of the pod in its sandbox, init containers first",
  async (w, api) => {
    await create(
      w,
      "restart-all",
      [
        container(
          "trigger",
          "if [ -f /data/ran ]; then exec sleep 3600; fi; touch /data/ran; sleep 3; exit 42",
          {
            restartPolicy: "Never",
            restartPolicyRules: [{
              action: "RestartAllContainers",
              exitCodes: { operator: "In", values: [42] },
            }],
          },
        ),
        container("other", "exec sleep 3600"),
      ],
      [container("init", "echo run >> /data/inits; wc -l < /data/inits")],
    );
    const first = await waitPod(api, NS, "restart-all", "Running", phaseIs("Running"));
    const sandboxIP = first.status?.podIP;
    const uid = first.metadata!.uid!;

    const pod = await waitPod(
      api,
      NS,
      "restart-all",
      "both containers running again",
      (p) => {
        phaseIs("Running")(p);
        return ["trigger", "other"].every((n) => {
          const s = status(p, n);
          return s.restartCount === 1 && s.state?.running !== undefined;
        });
      },
      90_000,
    );
    assert.equal(pod.status?.phase, "Running");
    assert.equal(pod.status?.podIP, sandboxIP, "the sandbox is kept");
    const removed = {
      reason: "RestartingAllContainers",
      message: "The container is removed because RestartAllContainers in place",
      exitCode: 137,
    };
    for (const name of ["trigger", "other"]) {
      const s = status(pod, name);
      const t = s.lastState?.terminated;
      assert.deepEqual(
        { reason: t?.reason, message: t?.message, exitCode: t?.exitCode },
        removed,
        `${name}: ${JSON.stringify(s)}`,
      );
    }
    const init = status(pod, "init");
    assert.equal(init.restartCount, 1, JSON.stringify(init));
    assert.equal(init.state?.terminated?.exitCode, 0, JSON.stringify(init));
    const restarting = pod.status?.conditions?.find((c) => c.type === "AllContainersRestarting");
    assert.equal(restarting?.status, "False", JSON.stringify(pod.status?.conditions));
    assert.equal(
      pod.status?.conditions?.find((c) => c.type === "Initialized")?.status,
      "True",
    );

    // The init container ran again in the same pod (the emptyDir saw it twice); every first
    // instance's log is kept beside the second's.
    const podLogs = `${w.podLogsDir}/${NS}_restart-all_${uid}`;
    const again = await poll(
      "the second init run's log",
      async () => {
        const t = await Deno.readTextFile(`${podLogs}/init/1.log`).catch(() => "");
        return t.includes(" F ") ? t : undefined;
      },
      10_000,
      POD_POLL_MS,
    );
    assert.match(again, /stdout F 2$/m);
    for (const name of ["init", "trigger", "other"]) {
      assert.equal((await Deno.stat(`${podLogs}/${name}/0.log`)).isFile, true, `${name}/0.log`);
    }
    // The running container was stopped for the action, with upstream's event message.
    const ev = await w.cp.kubectl(["get", "events", "-n", NS, "-o", "json"]);
    const killing = (JSON.parse(ev.stdout).items as {
      reason: string;
      message: string;
      involvedObject: { name: string; fieldPath?: string };
    }[]).filter((e) => e.involvedObject.name === "restart-all" && e.reason === "Killing");
    assert.ok(
      killing.some((e) =>
        e.message === "killing" && e.involvedObject.fieldPath === "spec.containers{other}"
      ),
      JSON.stringify(killing),
    );
  },
);

suite.teardown("teardown", async (w) => {
  await w.containerd.stop();
});
