/**
 * @module
 * Pod start latency end to end, on real containerd: the agent against a private kube-apiserver
 * runs busybox pods bound to it, and the latency of a pod is the time from sending its create
 * request to a watch on pods showing every container running. Two cases: one pod at a time
 * (created, measured, deleted, ten times) and a burst of 30 pods created at once. Printed with
 * p50, p99 and max (nearest rank: with 10 or 30 samples p99 is the max), next to the CRI floor
 * (RunPodSandbox + CreateContainer + StartContainer straight to the same containerd, the same
 * way: one at a time and 30 at once), and the agent's resident memory (VmRSS) with no pods and
 * after the burst. Needs root, containerd, runc and the control plane programs; without them it
 * says why and measures nothing. Everything it starts is stopped at the end.
 *
 * It uses the e2e harness (control plane, containerd, images, and tests/node_harness.ts to
 * start the agent) and tests/cri_suite.ts's minimal CRI configs for the floor. Corresponds to
 * upstream's node e2e startup latency test (`test/e2e_node/density_test.go`).
 */

import { join } from "node:path";
import type { V1Node, V1Pod } from "@kubernetes/client-node";
import * as api from "../proto/runtime/v1/api.ts";
import { CriConnection } from "../src/cri_connection.ts";
import { isStatus, type KubeClient } from "../src/kube_client.ts";
import { RemoteRuntimeService } from "../src/remote_runtime.ts";
import { PodWatch } from "./_bench_pod_watch.ts";
import type { RunningAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, dumpLogsOnFailure, startControlPlane } from "./control_plane.ts";
import { containerConfig, type CriTarget, sandboxConfig } from "./cri_suite.ts";
import { BUSYBOX, BUSYBOX_IMAGE, importImages, PAUSE } from "./images.ts";
import { adminClient, startNodeAgent } from "./node_harness.ts";
import { whyNotRunnable } from "./requirements.ts";

const NODE = "kts-bench";
const NS = "default";
const SINGLE_RUNS = 10;
const BURST = 30;
/** Bound on one case's pods to run, or to leave the API. */
const WAIT_MS = 120_000;
/** Bench pods' names start with this, so cleanup finds only them. */
const PREFIX = `bench-${crypto.randomUUID().slice(0, 8)}`;
/** Exits at once on SIGTERM, so deleting a pod between runs is quick. */
const COMMAND = ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"];

/** One row of the result table. */
interface Row {
  readonly what: string;
  /** Milliseconds, one per pod. */
  readonly samples: readonly number[];
}

/** Nearest-rank percentile of ascending `sorted`. */
function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)] ?? NaN;
}

function table(rows: readonly Row[]): string {
  const width = Math.max(...rows.map((r) => r.what.length));
  const cell = (v: number) => `${v.toFixed(0)} ms`.padStart(9);
  const head = `  ${"case".padEnd(width)}   n ${"p50".padStart(9)} ${"p99".padStart(9)} ${
    "max".padStart(9)
  }`;
  return [
    head,
    ...rows.map((r) => {
      const s = [...r.samples].sort((a, b) => a - b);
      return `  ${r.what.padEnd(width)} ${String(s.length).padStart(3)} ${
        cell(percentile(s, 50))
      } ${cell(percentile(s, 99))} ${cell(percentile(s, 100))}`;
    }),
  ].join("\n");
}

/** How many error lines the agent logged, and the most frequent messages. */
function errorSummary(stderr: string): string {
  const counts = new Map<string, number>();
  for (const line of stderr.split("\n")) {
    if (!/^E\d{4} /.test(line)) continue;
    const msg = line.match(/\] ("(?:[^"\\]|\\.)*")/)?.[1] ?? line;
    counts.set(msg, (counts.get(msg) ?? 0) + 1);
  }
  const total = [...counts.values()].reduce((a, b) => a + b, 0);
  const top = [...counts].sort((a, b) => b[1] - a[1]).slice(0, 3).map(([m, n]) => `${m} ×${n}`);
  return total === 0 ? "none" : `${total} (${top.join(", ")})`;
}

/** VmRSS and VmHWM (peak) of `pid`, in MiB. */
async function residentMemory(pid: number): Promise<{ rss: number; peak: number }> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  const kb = (field: string) =>
    Number(status.match(new RegExp(`^${field}:\\s+(\\d+) kB`, "m"))?.[1]);
  return { rss: kb("VmRSS") / 1024, peak: kb("VmHWM") / 1024 };
}

function benchPod(name: string): V1Pod {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS, labels: { bench: PREFIX } },
    spec: {
      nodeName: NODE,
      automountServiceAccountToken: false,
      terminationGracePeriodSeconds: 1,
      containers: [{
        name: "main",
        image: BUSYBOX_IMAGE,
        imagePullPolicy: "Never",
        command: COMMAND,
      }],
    },
  };
}

/**
 * RunPodSandbox + CreateContainer + StartContainer for `count` pods, all at once, straight to
 * the runtime; milliseconds per pod. The pods are removed afterwards.
 */
async function criStart(
  runtime: RemoteRuntimeService,
  logRoot: string,
  count: number,
): Promise<number[]> {
  const target = { imageName: BUSYBOX_IMAGE, logRoot } as CriTarget;
  const configs = Array.from(
    { length: count },
    (_, i) => sandboxConfig(target, `${PREFIX}-cri-${i}`),
  );
  for (const c of configs) await Deno.mkdir(c.logDirectory, { recursive: true });
  const ids: string[] = [];
  try {
    return await Promise.all(configs.map(async (sandbox, i) => {
      const t0 = performance.now();
      const id = await runtime.runPodSandbox(sandbox, "");
      ids.push(id);
      const container = await runtime.createContainer(
        id,
        containerConfig(target, `main-${i}`, COMMAND),
        sandbox,
      );
      await runtime.startContainer(container);
      return performance.now() - t0;
    }));
  } finally {
    for (const id of ids) {
      await runtime.stopPodSandbox(id).catch(() => {});
      await runtime.removePodSandbox(id).catch(() => {});
    }
  }
}

/** The CRI floor: one pod at a time, `SINGLE_RUNS` times, then a burst of `BURST`. */
async function criFloor(containerd: ContainerdHandle, logRoot: string): Promise<Row[]> {
  const conn = new CriConnection({ endpoint: containerd.endpoint });
  const runtime = new RemoteRuntimeService({ connection: conn });
  try {
    const single: number[] = [];
    for (let i = 0; i < SINGLE_RUNS; i++) single.push(...await criStart(runtime, logRoot, 1));
    const burst = await criStart(runtime, logRoot, BURST);
    // Nothing may be left for the agent to find and kill as orphans.
    const left = await runtime.listPodSandbox(api.PodSandboxFilter.create({}));
    if (left.length > 0) throw new Error(`${left.length} CRI floor sandboxes were left behind`);
    return [
      { what: "CRI floor: 1 pod (sequential)", samples: single },
      { what: `CRI floor: ${BURST}-pod burst`, samples: burst },
    ];
  } finally {
    conn.close();
  }
}

/** Creates the pods, each timed from its own request, and waits for the watch to show them running. */
async function startPods(
  client: KubeClient,
  watch: PodWatch,
  names: readonly string[],
): Promise<{ latencies: number[]; firstSent: number; lastRunning: number }> {
  const sent = new Map<string, number>();
  await Promise.all(names.map(async (name) => {
    sent.set(name, performance.now());
    await client.create(`/api/v1/namespaces/${NS}/pods`, benchPod(name));
  }));
  await watch.waitFor(names, "running", WAIT_MS);
  const latencies = names.map((n) => watch.runningAt.get(n)! - sent.get(n)!);
  return {
    latencies,
    firstSent: Math.min(...sent.values()),
    lastRunning: Math.max(...names.map((n) => watch.runningAt.get(n)!)),
  };
}

/** Deletes the pods (gracefully) and waits until the agent has removed them from the API. */
async function deletePods(
  client: KubeClient,
  watch: PodWatch,
  names: readonly string[],
): Promise<void> {
  await Promise.all(names.map(async (name) => {
    try {
      await client.delete(`/api/v1/namespaces/${NS}/pods/${name}`);
    } catch (e) {
      if (!isStatus(e, 404)) throw e;
    }
  }));
  await watch.waitFor(names, "deleted", WAIT_MS);
}

async function nodeReady(client: KubeClient, ms: number): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    try {
      const node = await client.get<V1Node>(`/api/v1/nodes/${NODE}`);
      if (node.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True")) return;
    } catch (e) {
      if (!isStatus(e, 404)) throw e;
    }
    if (Date.now() > end) throw new Error(`node ${NODE} was not Ready within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Removes the /var/log/containers links the agent made for bench pods. */
async function removeLegacyLogLinks(): Promise<void> {
  try {
    for await (const e of Deno.readDir("/var/log/containers")) {
      if (e.name.startsWith(`${PREFIX}-`)) {
        await Deno.remove(`/var/log/containers/${e.name}`).catch(() => {});
      }
    }
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
}

async function run(): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "pod-start-bench-" });
  const stack = new AsyncDisposableStack();
  const stop = new AbortController();
  let agent: RunningAgent | undefined;
  try {
    stack.defer(() => Deno.remove(dir, { recursive: true }).catch(() => {}));
    stack.defer(removeLegacyLogLinks);
    const cp: ControlPlane = await startControlPlane({ dir: join(dir, "cp"), nodeNames: [NODE] });
    stack.defer(() => cp.stop());
    const containerd = await startContainerd({ dir: join(dir, "containerd") });
    stack.defer(() => containerd.stop());
    await importImages({ containerdSocket: containerd.socket, images: [BUSYBOX, PAUSE] });

    await dumpLogsOnFailure(cp, async () => {
      const floor = await criFloor(containerd, join(dir, "cri-logs"));

      const client = await adminClient(cp, "pod-start-bench");
      stack.defer(() => client.close());

      const { agent: a } = await startNodeAgent({
        cp,
        dir,
        nodeName: NODE,
        endpoint: containerd.endpoint,
        configLines: [`podLogsDir: ${join(dir, "pod-logs")}`],
      });
      agent = a;
      stack.defer(async () => {
        a.process.kill("SIGTERM");
        const timer = setTimeout(() => a.process.kill("SIGKILL"), 20_000);
        const status = await a.process.status;
        clearTimeout(timer);
        if (status.code !== 0) console.warn(`pod_start_bench: the agent exited ${status.code}`);
      });
      await nodeReady(client, 60_000);
      const idle = await residentMemory(a.process.pid);

      const watch = await PodWatch.start({
        client,
        namespace: NS,
        nodeName: NODE,
        signal: stop.signal,
      });
      stack.defer(async () => {
        stop.abort();
        await watch.finished;
      });
      const all: string[] = [];
      // Whatever a failed run leaves behind is deleted before the agent stops.
      stack.defer(() => deletePods(client, watch, all).catch(() => {}));

      const single: number[] = [];
      const deletion: number[] = [];
      for (let i = 0; i < SINGLE_RUNS; i++) {
        const name = `${PREFIX}-single-${i}`;
        all.push(name);
        single.push(...(await startPods(client, watch, [name])).latencies);
        const t0 = performance.now();
        await deletePods(client, watch, [name]);
        deletion.push(watch.deletedAt.get(name)! - t0);
      }

      const burstNames = Array.from({ length: BURST }, (_, i) => `${PREFIX}-burst-${i}`);
      all.push(...burstNames);
      const burst = await startPods(client, watch, burstNames);
      const afterBurst = await residentMemory(a.process.pid);
      const t0 = performance.now();
      await deletePods(client, watch, burstNames);
      const burstDeletion = performance.now() - t0;

      const server = (await client.get<{ gitVersion?: string }>("/version")).gitVersion ?? "?";
      console.log(
        [
          "",
          `pod_start_bench: the agent (pid ${a.process.pid}) on containerd, kube-apiserver ${server}; ` +
          "latency = create request sent → watch shows every container running",
          table([
            ...floor,
            { what: "agent: 1 pod (sequential)", samples: single },
            { what: `agent: ${BURST}-pod burst`, samples: burst.latencies },
            { what: "agent: 1 pod, delete → gone from the API", samples: deletion },
          ]),
          `  agent ${BURST}-pod burst: first create sent → last pod running ${
            (burst.lastRunning - burst.firstSent).toFixed(0)
          } ms; delete → all gone ${burstDeletion.toFixed(0)} ms`,
          `  agent memory: VmRSS ${idle.rss.toFixed(1)} MiB with 0 pods, ${
            afterBurst.rss.toFixed(1)
          } MiB after the burst (VmHWM ${afterBurst.peak.toFixed(1)} MiB)`,
          `  agent error lines: ${errorSummary(a.stderr())}`,
          "",
        ].join("\n"),
      );
    });
  } catch (e) {
    if (agent) {
      console.error(
        `agent stderr (last 60 lines):\n${agent.stderr().split("\n").slice(-60).join("\n")}`,
      );
    }
    throw e;
  } finally {
    await stack.disposeAsync();
  }
}

const why = await whyNotRunnable(["containerd", "ctr", "runc", "openssl", "go"]);
if (why) console.warn(`pod_start_bench: SKIPPED, nothing measured: ${why}`);
else await run();
