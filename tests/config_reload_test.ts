/**
 * SIGHUP reloads the configuration of a running agent, on real containerd through the real
 * apiserver: a raised hard eviction threshold takes effect without a restart (the node reports
 * MemoryPressure and a smaller allocatable memory, and both go back when the threshold does), a
 * changed port is refused with a log line naming it, and a broken file changes nothing. Upstream
 * has no counterpart: its kubelet reads the file once.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Node } from "@kubernetes/client-node";
import type { KubeClient } from "../src/client/kube_client.ts";
import type { RunningAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import type { ControlPlane } from "./control_plane.ts";
import { startControlPlane } from "./control_plane.ts";
import { importImages, PAUSE } from "./images.ts";
import { e2eSuite, poll, startNodeAgent } from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("config reload e2e tests", [
  "containerd",
  "ctr",
  "runc",
  "openssl",
  "go",
]);
const NODE = "kts-reload";
const THRESHOLD = "  memory.available: 100Mi";

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly containerd: ContainerdHandle;
  readonly agent: RunningAgent;
  /** The agent's --config file. */
  readonly config: string;
  readonly port: number;
}

const suite = e2eSuite<World>({
  name: "config reload",
  gate,
  userAgent: "config-reload-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "config-reload-e2e-" });
    const stack = new AsyncDisposableStack();
    try {
      const cp = stack.use(await startControlPlane({ dir: join(dir, "cp"), nodeNames: [NODE] }));
      const socket = join(dir, "containerd", "containerd.sock");
      const containerd = stack.use(
        await startContainerd({ dir: join(dir, "containerd"), socket }),
      );
      await importImages({ containerdSocket: socket, images: [PAUSE] });
      const { agent, config, port } = await startNodeAgent({
        cp,
        dir,
        nodeName: NODE,
        endpoint: containerd.endpoint,
        configLines: ["evictionHard:", THRESHOLD, "evictionPressureTransitionPeriod: 10s"],
      });
      stack.move();
      return { dir, cp, containerd, agent, config, port };
    } catch (e) {
      await stack.disposeAsync();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw e;
    }
  },
});

/** Replaces `from` with `to` in the agent's config file, sends SIGHUP and waits for the outcome. */
async function reload(w: World, from: string, to: string, outcome: RegExp): Promise<string> {
  const text = await Deno.readTextFile(w.config);
  assert.ok(text.includes(from), `${from} in ${text}`);
  await Deno.writeTextFile(w.config, text.replace(from, to));
  const before = w.agent.stderr().length;
  w.agent.process.kill("SIGHUP");
  return await poll(
    "the reload's outcome in the log",
    () => {
      const said = w.agent.stderr().slice(before).split("\n").find((l) => outcome.test(l));
      return Promise.resolve(said);
    },
    60_000,
    50,
  );
}

async function node(api: KubeClient): Promise<V1Node> {
  return await api.get<V1Node>(`/api/v1/nodes/${NODE}`);
}

const pressure = (n: V1Node) =>
  n.status?.conditions?.find((c) => c.type === "MemoryPressure")?.status;

/**
 * The running configuration through the apiserver's node proxy; a failed proxy request (the
 * apiserver under CI's load) is retried for 30 s, and its last error is the timeout's message.
 */
async function configz(w: World): Promise<Record<string, unknown>> {
  return await poll(
    "/configz through the node proxy",
    async () => {
      const r = await w.cp.kubectl(["get", "--raw", `/api/v1/nodes/${NODE}/proxy/configz`]);
      if (r.code !== 0) throw new Error(`kubectl exited ${r.code}: ${r.stderr}`);
      return JSON.parse(r.stdout).kubeletconfig as Record<string, unknown>;
    },
    30_000,
    500,
  );
}

suite.test(
  "a raised evictionHard takes effect without a restart, and so does lowering it again",
  async (w, api) => {
    const starts = () =>
      w.agent.stderr().split("\n").filter((l) => l.includes('"kubelet version"'));
    assert.equal(starts().length, 1);
    const first = await poll(
      "the node's status",
      async () => {
        const n = await node(api);
        return pressure(n) ? n : undefined;
      },
      60_000,
      500,
    );
    assert.equal(pressure(first), "False");
    const allocatable = first.status!.allocatable!.memory!;

    // No node has 1000Gi available: the threshold is met at the next eviction pass.
    const line = await reload(
      w,
      THRESHOLD,
      "  memory.available: 1000Gi",
      /Kubelet configuration reloaded|Failed to reload/,
    );
    assert.match(line, /applied="evictionHard"/);
    const pressed = await poll(
      "MemoryPressure",
      async () => {
        const n = await node(api);
        return pressure(n) === "True" ? n : undefined;
      },
      90_000,
      500,
    );
    // Node allocatable is capacity minus the hard threshold: nothing is left.
    assert.equal(pressed.status!.allocatable!.memory, "0", "allocatable memory under 1000Gi");
    const hard = (await configz(w)).evictionHard as Record<string, string>;
    assert.equal(hard["memory.available"], "1000Gi", "/configz shows the running value");

    await reload(w, "  memory.available: 1000Gi", THRESHOLD, /Kubelet configuration reloaded/);
    const relieved = await poll(
      "MemoryPressure to clear after the 10 s transition",
      async () => {
        const n = await node(api);
        return pressure(n) === "False" ? n : undefined;
      },
      90_000,
      1_000,
    );
    assert.equal(relieved.status!.allocatable!.memory, allocatable);
    assert.equal(starts().length, 1, "the agent never restarted");
  },
);

suite.test("a changed port is refused and named; the live fields of the same file apply", async (w) => {
  const line = await reload(
    w,
    `port: ${w.port}`,
    `port: ${w.port + 1}\nimageGCHighThresholdPercent: 90`,
    /Refusing to change/,
  );
  assert.match(line, new RegExp(`field="port" running=${w.port} new=${w.port + 1}`));
  const cfg = await configz(w);
  assert.equal(cfg.port, w.port);
  assert.equal(cfg.imageGCHighThresholdPercent, 90);
  await reload(
    w,
    `port: ${w.port + 1}\nimageGCHighThresholdPercent: 90`,
    `port: ${w.port}`,
    /Kubelet configuration reloaded/,
  );
});

suite.test("a broken file changes nothing and says where it is broken", async (w) => {
  const before = await configz(w);
  const line = await reload(
    w,
    THRESHOLD,
    "  memory.available: [1000Gi",
    /Failed to reload kubelet configuration/,
  );
  assert.match(line, /nothing changed/);
  assert.ok(line.includes(w.config), line);
  assert.deepEqual(await configz(w), before);
  await reload(w, "  memory.available: [1000Gi", THRESHOLD, /Kubelet configuration reloaded/);
});

suite.teardown("stop", async (w) => {
  await w.containerd.stop();
});
