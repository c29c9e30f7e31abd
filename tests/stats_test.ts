/**
 * Statistics end to end, on real containerd through the real apiserver, read as metrics-server
 * and kubectl read them (the node proxy): the node's memory capacity is /proc/meminfo's
 * MemTotal; `/stats/summary` decodes with the Summary API's schema and has what metrics-server
 * needs (node and pod CPU and memory); a container spinning a CPU shows about one core; a
 * container filling memory shows its working set grow; bytes sent to a pod over the CNI bridge
 * show in its network counters; `/metrics/resource` and `/metrics/cadvisor` carry the samples.
 * Upstream's counterparts are `test/e2e_node/summary_test.go` and
 * `test/e2e/instrumentation/monitoring/metrics_grabber.go`.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { V1Node, V1Pod } from "@kubernetes/client-node";
import type { KubeClient } from "../src/client/kube_client.ts";
import { decodeSummary, type PodStats, type Summary } from "../src/apis/stats_types.ts";
import type { RunningAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import { BUSYBOX, BUSYBOX_IMAGE, importImages, PAUSE } from "./images.ts";
import { e2eSuite, poll, startNodeAgent, waitPod } from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("stats e2e tests", ["containerd", "ctr", "runc", "openssl", "go"]);
const NODE = "kts-stats-e2e";
const NS = "default";
/** Two housekeeping passes (10 s apart) and the summary request. */
const SAMPLE_MS = 60_000;

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly containerd: ContainerdHandle;
  readonly agent: RunningAgent;
}

const suite = e2eSuite<World>({
  name: "stats",
  gate,
  userAgent: "stats-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "stats-e2e-" });
    const stack = new AsyncDisposableStack();
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
      return { dir, cp, containerd, agent };
    } catch (e) {
      await stack.disposeAsync();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw e;
    }
  },
});
const e2e = suite.test;

function pod(name: string, script: string): string {
  return JSON.stringify({
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS },
    spec: {
      nodeName: NODE,
      automountServiceAccountToken: false,
      terminationGracePeriodSeconds: 1,
      containers: [{
        name: "main",
        image: BUSYBOX_IMAGE,
        imagePullPolicy: "Never",
        command: ["sh", "-c", script],
      }],
    },
  });
}

async function create(w: World, manifest: string): Promise<void> {
  const r = await w.cp.kubectl(["create", "-f", "-"], { stdin: manifest });
  assert.equal(r.code, 0, r.stderr);
}

async function raw(w: World, path: string): Promise<string> {
  const r = await w.cp.kubectl(["get", "--raw", `/api/v1/nodes/${NODE}/proxy${path}`]);
  assert.equal(r.code, 0, `${path}: ${r.stderr}`);
  return r.stdout;
}

async function summary(w: World): Promise<Summary> {
  return decodeSummary(JSON.parse(await raw(w, "/stats/summary")));
}

function podStats(s: Summary, name: string): PodStats | undefined {
  return s.pods.find((p) => p.podRef.name === name && p.podRef.namespace === NS);
}

async function running(api: KubeClient, name: string): Promise<V1Pod> {
  return await waitPod(api, NS, name, "Running", (p) => p.status?.phase === "Running");
}

e2e("the node's memory capacity is /proc/meminfo's MemTotal", async (_w, api) => {
  const meminfo = await Deno.readTextFile("/proc/meminfo");
  const kb = /^MemTotal:\s+(\d+) kB$/m.exec(meminfo)?.[1];
  assert.ok(kb);
  const node = await poll("the node's capacity", async () => {
    const n = await api.get<V1Node>(`/api/v1/nodes/${NODE}`);
    return n.status?.capacity?.memory ? n : undefined;
  }, 30_000);
  assert.equal(node.status?.capacity?.memory, `${kb}Ki`);
});

e2e("/stats/summary has the Summary API's shape and what metrics-server reads", async (w, api) => {
  await create(w, pod("idle", "sleep 3600"));
  await running(api, "idle");
  const s = await poll(
    "node and pod CPU and memory",
    async () => {
      const s = await summary(w);
      const p = podStats(s, "idle");
      const ready = s.node.cpu?.usageNanoCores !== undefined &&
        s.node.memory?.workingSetBytes !== undefined &&
        p?.cpu?.usageNanoCores !== undefined && p.memory?.workingSetBytes !== undefined &&
        p.containers[0]?.cpu?.usageNanoCores !== undefined;
      return ready ? s : undefined;
    },
    SAMPLE_MS,
    2_000,
  );
  assert.equal(s.node.nodeName, NODE);
  assert.ok((s.node.memory?.usageBytes ?? 0) > 0);
  assert.ok((s.node.fs?.capacityBytes ?? 0) > 0);
  assert.ok((s.node.runtime?.imageFs?.usedBytes ?? 0) > 0, "the imported images");
  assert.ok((s.node.rlimit?.maxpid ?? 0) > 0);
  // The agent's own cgroup is the "kubelet" system container.
  const kubelet = s.node.systemContainers?.find((c) => c.name === "kubelet");
  assert.ok((kubelet?.memory?.workingSetBytes ?? 0) > 0, "the kubelet system container");
  const p = podStats(s, "idle")!;
  assert.deepEqual(p.containers.map((c) => c.name), ["main"]);
  const main = p.containers[0]!;
  assert.ok((main.memory?.workingSetBytes ?? 0) > 0);
  assert.ok(main.rootfs !== undefined, "the writable layer from the runtime");
  assert.ok(p.network?.interfaces?.some((i) => i.name === "eth0"));
  assert.ok((p.process_stats?.process_count ?? 0) >= 1);

  // only_cpu_and_memory, as the resource metrics endpoint uses it.
  const cm = decodeSummary(JSON.parse(await raw(w, "/stats/summary?only_cpu_and_memory=true")));
  assert.equal(cm.node.fs, undefined);
  assert.ok(podStats(cm, "idle")?.memory?.workingSetBytes);
});

e2e("a container spinning a CPU shows about one core", async (w, api) => {
  await create(w, pod("spin", "while :; do :; done"));
  await running(api, "spin");
  const cores = await poll(
    "a sample over a busy interval",
    async () => {
      const c = podStats(await summary(w), "spin")?.containers[0];
      const n = c?.cpu?.usageNanoCores;
      // The first rate may span the container's start; wait for one above half a core.
      return n !== undefined && n > 0.5e9 ? n / 1e9 : undefined;
    },
    SAMPLE_MS,
    2_000,
  );
  assert.ok(cores > 0.7 && cores < 1.3, `usageNanoCores of one busy loop: ${cores} cores`);
  await w.cp.kubectl(["delete", "pod", "spin", "-n", NS, "--wait=false"]);
});

e2e("a container that fills memory shows its working set grow", async (w, api) => {
  // Pages of a tmpfs file are the container's memory (shmem), never inactive file cache.
  await create(
    w,
    pod("fill", "sleep 15; dd if=/dev/zero of=/dev/shm/fill bs=1M count=48; sleep 3600"),
  );
  await running(api, "fill");
  const before = await poll(
    "a first working set",
    async () => {
      return podStats(await summary(w), "fill")?.containers[0]?.memory?.workingSetBytes;
    },
    SAMPLE_MS,
    1_000,
  );
  const after = await poll(
    "the working set 40 MiB higher",
    async () => {
      const ws = podStats(await summary(w), "fill")?.containers[0]?.memory?.workingSetBytes;
      return ws !== undefined && ws - before >= 40 * 2 ** 20 ? ws : undefined;
    },
    2 * SAMPLE_MS,
    2_000,
  );
  assert.ok(after - before >= 40 * 2 ** 20);
});

e2e("bytes sent to a pod over the CNI bridge show in its network counters", async (w, api) => {
  await create(w, pod("sink", "while true; do nc -l -p 8080 > /dev/null; done"));
  const p = await running(api, "sink");
  const ip = p.status?.podIP;
  assert.ok(ip);
  const payload = new Uint8Array(2 * 2 ** 20);
  const conn = await poll(
    "the listener",
    async () => {
      try {
        return await Deno.connect({ hostname: ip, port: 8080 });
      } catch {
        return undefined;
      }
    },
    30_000,
    500,
  );
  let written = 0;
  while (written < payload.length) written += await conn.write(payload.subarray(written));
  conn.close();
  const rx = await poll(
    "rxBytes past 2 MiB",
    async () => {
      const n = podStats(await summary(w), "sink")?.network?.rxBytes;
      return n !== undefined && n >= payload.length ? n : undefined;
    },
    SAMPLE_MS,
    2_000,
  );
  assert.ok(rx >= payload.length);
});

e2e("/metrics/resource and /metrics/cadvisor carry the samples", async (w, api) => {
  await create(w, pod("metered", "sleep 3600"));
  await running(api, "metered");
  // The sandbox can be sampled a housekeeping wake before its container is.
  const text = await poll(
    "the pod and its container in /metrics/resource",
    async () => {
      const t = await raw(w, "/metrics/resource");
      return t.includes('pod_memory_working_set_bytes{namespace="default",pod="metered"}') &&
          t.includes(
            'container_memory_working_set_bytes{container="main",namespace="default",pod="metered"}',
          )
        ? t
        : undefined;
    },
    SAMPLE_MS,
    2_000,
  );
  for (
    const family of [
      "node_cpu_usage_seconds_total",
      "node_memory_working_set_bytes",
      "container_cpu_usage_seconds_total",
      "container_memory_working_set_bytes",
      "container_start_time_seconds",
      "pod_cpu_usage_seconds_total",
      "pod_memory_working_set_bytes",
      "resource_scrape_error",
    ]
  ) {
    assert.match(text, new RegExp(`^# TYPE ${family} `, "m"), family);
  }
  assert.match(
    text,
    /^container_memory_working_set_bytes\{container="main",namespace="default",pod="metered"\} \d/m,
  );
  assert.match(text, /^resource_scrape_error 0$/m);
  const cadvisor = await raw(w, "/metrics/cadvisor");
  assert.match(cadvisor, /^container_memory_working_set_bytes\{.*pod="metered".*\} \d/m);
  assert.match(cadvisor, /^machine_memory_bytes\{.*\} \d/m);
});

suite.teardown("teardown", async (w) => {
  await w.containerd.stop();
});
