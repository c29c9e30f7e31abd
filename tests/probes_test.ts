/**
 * Probes and lifecycle hooks end to end, on real containerd through the real apiserver:
 * liveness restarts, readiness toggling Ready, a closed TCP port, a gRPC health server, a
 * startup probe holding liveness back, preStop before SIGTERM and a failing postStart.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { serveRawUnary } from "../src/testing/grpc_raw_server.ts";
import type { V1Pod } from "@kubernetes/client-node";
import type { RunningAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import { freePort } from "./child_process.ts";
import {
  BUSYBOX,
  BUSYBOX_IMAGE,
  HTTPD,
  HTTPD_IMAGE,
  HTTPD_INDEX,
  HTTPD_PORT,
  importImages,
  PAUSE,
} from "./images.ts";
import { e2eSuite, getPod, POD_POLL_MS, poll, startNodeAgent, waitPod } from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("probes e2e tests", ["containerd", "ctr", "runc", "openssl", "go"]);
const NODE = "kts-probes-e2e";
const NS = "default";

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly containerd: ContainerdHandle;
  readonly agent: RunningAgent;
  /** The agent's podLogsDir (its own: see startNodeAgent). */
  readonly podLogsDir: string;
}

const suite = e2eSuite<World>({
  name: "probes",
  gate,
  userAgent: "probes-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "probes-e2e-" });
    const cp = await startControlPlane({ dir: join(dir, "cp"), nodeNames: [NODE] });
    const socket = join(dir, "containerd", "containerd.sock");
    const containerd = await startContainerd({ dir: join(dir, "containerd"), socket });
    await importImages({ containerdSocket: socket, images: [BUSYBOX, PAUSE, HTTPD] });
    const { agent, podLogsDir } = await startNodeAgent({
      cp,
      dir,
      nodeName: NODE,
      endpoint: containerd.endpoint,
    });
    return { dir, cp, containerd, agent, podLogsDir };
  },
});
const e2e = suite.test;

function pod(name: string, spec: Record<string, unknown>, container: Record<string, unknown>) {
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS },
    spec: {
      nodeName: NODE,
      automountServiceAccountToken: false,
      terminationGracePeriodSeconds: 5,
      ...spec,
      containers: [{ name: "main", imagePullPolicy: "Never", image: BUSYBOX_IMAGE, ...container }],
    },
  });
}

async function create(w: World, manifest: string): Promise<void> {
  const r = await w.cp.kubectl(["create", "-f", "-"], { stdin: manifest });
  assert.equal(r.code, 0, r.stderr);
}

function main(p: V1Pod) {
  return p.status?.containerStatuses?.find((c) => c.name === "main");
}

function ready(p: V1Pod): string | undefined {
  return p.status?.conditions?.find((c) => c.type === "Ready")?.status;
}

async function events(w: World, name: string): Promise<{ reason: string; message: string }[]> {
  const r = await w.cp.kubectl(["get", "events", "-n", NS, "-o", "json"]);
  assert.equal(r.code, 0, r.stderr);
  return (JSON.parse(r.stdout).items as {
    reason: string;
    message: string;
    involvedObject: { name: string };
  }[]).filter((e) => e.involvedObject.name === name);
}

async function waitEvent(w: World, name: string, reason: string, message: RegExp) {
  return await poll(
    `event ${reason} on ${name}`,
    async () => {
      const e = (await events(w, name)).find((e) => e.reason === reason && message.test(e.message));
      return e;
    },
    60_000,
    500,
  );
}

e2e(
  "a failing liveness exec probe restarts the container, with Unhealthy and Killing events",
  async (w, api) => {
    await create(
      w,
      pod("live", {}, {
        command: ["sh", "-c", "touch /tmp/alive; sleep 3; rm /tmp/alive; sleep 3600"],
        livenessProbe: {
          exec: { command: ["test", "-f", "/tmp/alive"] },
          periodSeconds: 1,
          failureThreshold: 1,
        },
      }),
    );
    await waitPod(api, NS, "live", "a restart", (p) => (main(p)?.restartCount ?? 0) >= 1, 60_000);
    await waitEvent(w, "live", "Unhealthy", /^Liveness probe failed: /);
    await waitEvent(
      w,
      "live",
      "Killing",
      /^Container main failed liveness probe, will be restarted$/,
    );
  },
);

e2e(
  "an httpGet readiness probe toggles Ready when the page goes and comes back",
  async (w, api) => {
    await create(
      w,
      pod("ready-http", {}, {
        image: HTTPD_IMAGE,
        command: undefined,
        readinessProbe: {
          httpGet: { path: "/index.html", port: HTTPD_PORT },
          periodSeconds: 1,
          failureThreshold: 1,
        },
      }),
    );
    await waitPod(api, NS, "ready-http", "Ready", (p) => ready(p) === "True");
    const rm = await w.cp.kubectl(["exec", "ready-http", "-n", NS, "--", "rm", "/www/index.html"]);
    assert.equal(rm.code, 0, rm.stderr);
    const notReady = await waitPod(api, NS, "ready-http", "not Ready", (p) => ready(p) === "False");
    assert.equal(main(notReady)?.ready, false);
    assert.equal(
      notReady.status?.conditions?.find((c) => c.type === "ContainersReady")?.status,
      "False",
    );
    const put = await w.cp.kubectl(
      ["exec", "-i", "ready-http", "-n", NS, "--", "sh", "-c", "cat > /www/index.html"],
      { stdin: HTTPD_INDEX },
    );
    assert.equal(put.code, 0, put.stderr);
    await waitPod(api, NS, "ready-http", "Ready again", (p) => ready(p) === "True");
    await waitEvent(
      w,
      "ready-http",
      "Unhealthy",
      /^Readiness probe failed: HTTP probe failed with statuscode: 404$/,
    );
  },
);

e2e("a tcpSocket probe on a closed port fails", async (w, api) => {
  await create(
    w,
    pod("tcp-closed", {}, {
      command: ["sleep", "3600"],
      readinessProbe: { tcpSocket: { port: 8081 }, periodSeconds: 1 },
    }),
  );
  await waitPod(api, NS, "tcp-closed", "Running", (p) => p.status?.phase === "Running");
  await waitEvent(
    w,
    "tcp-closed",
    "Unhealthy",
    /^Readiness probe failed: dial tcp [\d.]+:8081: connect: connection refused$/,
  );
  assert.equal(ready(await getPod(api, NS, "tcp-closed")), "False");
});

e2e(
  "a gRPC probe passes while the health server serves, and fails when it stops",
  async (w, api) => {
    const port = freePort();
    let serving = true;
    // grpc.health.v1.Health/Check: the answer carries a status (1 = SERVING, 2 = NOT_SERVING)
    // in field 1.
    await using _server = await serveRawUnary({
      hostname: "0.0.0.0",
      port,
      method: "/grpc.health.v1.Health/Check",
      reply: () => new Uint8Array([0x08, serving ? 1 : 2]),
    });
    // On the host network, the pod IP is the node's: the probe reaches this server.
    await create(
      w,
      pod("grpc", { hostNetwork: true }, {
        command: ["sleep", "3600"],
        readinessProbe: { grpc: { port }, periodSeconds: 1, failureThreshold: 1 },
      }),
    );
    await waitPod(api, NS, "grpc", "Ready", (p) => ready(p) === "True");
    serving = false;
    await waitPod(api, NS, "grpc", "not Ready", (p) => ready(p) === "False");
    await waitEvent(
      w,
      "grpc",
      "Unhealthy",
      /^Readiness probe failed: service unhealthy \(responded with "NOT_SERVING"\)$/,
    );
  },
);

e2e("a startup probe holds liveness back until it succeeds", async (w, api) => {
  await create(
    w,
    pod("slow-start", {}, {
      command: ["sh", "-c", "sleep 4; touch /tmp/started; sleep 3600"],
      startupProbe: {
        exec: { command: ["test", "-f", "/tmp/started"] },
        periodSeconds: 1,
        failureThreshold: 30,
      },
      livenessProbe: { exec: { command: ["false"] }, periodSeconds: 1, failureThreshold: 1 },
    }),
  );
  const running = await waitPod(
    api,
    NS,
    "slow-start",
    "Running",
    (p) => p.status?.phase === "Running",
  );
  const startedAt = Date.now();
  void running;
  const restarted = await waitPod(
    api,
    NS,
    "slow-start",
    "the liveness restart once started",
    (p) => (main(p)?.restartCount ?? 0) >= 1,
    60_000,
  );
  assert.ok(Date.now() - startedAt >= 3_000, "liveness waited for the startup probe");
  assert.equal(main(restarted)?.lastState?.terminated !== undefined, true);
});

e2e("preStop runs before SIGTERM; a failing postStart restarts the container", async (w, api) => {
  await create(
    w,
    pod("stopper", {}, {
      command: [
        "sh",
        "-c",
        "trap 'echo got SIGTERM; cat /tmp/prestop; exit 0' TERM; while true; do sleep 0.2; done",
      ],
      lifecycle: {
        preStop: { exec: { command: ["sh", "-c", "echo prestop-ran > /tmp/prestop"] } },
      },
    }),
  );
  const p = await waitPod(api, NS, "stopper", "Running", (p) => p.status?.phase === "Running");
  const uid = p.metadata!.uid!;
  const del = await w.cp.kubectl(["delete", "pod", "stopper", "-n", NS, "--wait=false"]);
  assert.equal(del.code, 0, del.stderr);
  const log = await poll(
    "the TERM line",
    async () => {
      const t = await Deno.readTextFile(`${w.podLogsDir}/${NS}_stopper_${uid}/main/0.log`);
      return t.includes("got SIGTERM") ? t : undefined;
    },
    30_000,
    POD_POLL_MS,
  );
  assert.match(log, /got SIGTERM\n.*prestop-ran/s, "the preStop file existed when SIGTERM came");

  await create(
    w,
    pod("poststart", {}, {
      command: ["sleep", "3600"],
      lifecycle: { postStart: { exec: { command: ["sh", "-c", "exit 7"] } } },
    }),
  );
  await waitEvent(w, "poststart", "FailedPostStartHook", /.+/);
  await waitPod(api, NS, "poststart", "a restart", (p) => (main(p)?.restartCount ?? 0) >= 1);
});

suite.teardown("teardown", async (w) => {
  await w.containerd.stop();
});
