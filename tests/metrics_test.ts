/**
 * The kubelet's own metrics and the pod start-up timeline end to end, on real containerd
 * through the real apiserver, read as Prometheus and kubectl read them (the node proxy, so the
 * request is authenticated and authorized as `nodes/metrics` and `nodes/proxy`): /metrics
 * parses strictly as text format 0.0.4 and carries every metric of the issue with upstream's
 * HELP, type and labels; the pod start-up SLI histogram counts exactly the pods started; a
 * failing image pull shows in the runtime operation errors; an eviction shows in
 * kubelet_evictions under its signal; `/debug/pods/<ns>/<name>` lists every phase of a started
 * pod in order, and 404 for a pod the kubelet does not know. Upstream's counterparts are
 * `test/e2e_node/density_test.go` (pod start-up latency from the kubelet's metrics) and
 * `test/e2e/instrumentation/monitoring/metrics_grabber.go`.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import {
  type ParsedFamily,
  type ParsedSample,
  parseExposition,
} from "../src/metrics/prometheus.ts";
import type { RunningAgent } from "./agent_process.ts";
import { type ContainerdHandle, startContainerd } from "./containerd_harness.ts";
import { type ControlPlane, startControlPlane } from "./control_plane.ts";
import { BUSYBOX, BUSYBOX_IMAGE, importImages, PAUSE } from "./images.ts";
import { e2eSuite, poll, startNodeAgent, waitPod } from "./node_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("metrics e2e tests", ["containerd", "ctr", "runc", "openssl", "go"]);
const NODE = "kts-metrics-e2e";
const NS = "default";
/** The pods whose start the SLI must count. */
const STARTED = ["started-a", "started-b", "started-c"];

interface World {
  readonly dir: string;
  readonly cp: ControlPlane;
  readonly containerd: ContainerdHandle;
  readonly agent: RunningAgent;
}

const suite = e2eSuite<World>({
  name: "metrics",
  gate,
  userAgent: "metrics-e2e-test",
  async start() {
    const dir = await Deno.makeTempDir({ prefix: "metrics-e2e-" });
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
        // Volume usage is measured this often (upstream default 1m) so the eviction is quick.
        configLines: ["volumeStatsAggPeriod: 2s"],
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

function pod(name: string, spec: Record<string, unknown> = {}): string {
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
        command: ["sh", "-c", "sleep 3600"],
      }],
      ...spec,
    },
  });
}

async function create(w: World, manifest: string): Promise<void> {
  const r = await w.cp.kubectl(["create", "-f", "-"], { stdin: manifest });
  assert.equal(r.code, 0, r.stderr);
}

/** GET through the apiserver's node proxy: the kubelet authenticates and authorizes it. */
async function raw(
  w: World,
  path: string,
): Promise<{ code: number; stdout: string; stderr: string }> {
  return await w.cp.kubectl(["get", "--raw", `/api/v1/nodes/${NODE}/proxy${path}`]);
}

async function scrape(w: World): Promise<Map<string, ParsedFamily>> {
  const r = await raw(w, "/metrics");
  assert.equal(r.code, 0, r.stderr);
  // Strict: HELP and TYPE first, escaping, histogram buckets, sums and counts consistent.
  return new Map(parseExposition(r.stdout).map((f) => [f.name, f]));
}

function family(
  families: Map<string, ParsedFamily>,
  name: string,
  type: ParsedFamily["type"],
  help: string,
): ParsedFamily {
  const f = families.get(name);
  assert.ok(f, `${name} is on /metrics`);
  assert.equal(f.type, type, `${name} type`);
  assert.equal(f.help, help, `${name} HELP`);
  return f;
}

/** The samples of a family that carry exactly these label names (besides histograms' le). */
function withLabels(f: ParsedFamily, names: string[]): ParsedSample[] {
  for (const s of f.samples) {
    const own = Object.keys(s.labels).filter((k) => !(s.suffix === "_bucket" && k === "le"));
    assert.deepEqual(own.sort(), [...names].sort(), `${f.name} labels`);
  }
  return [...f.samples];
}

function value(f: ParsedFamily, labels: Record<string, string>, suffix?: string): number {
  const s = f.samples.find((x) =>
    x.suffix === suffix &&
    Object.entries(labels).every(([k, v]) => x.labels[k] === v) &&
    Object.keys(x.labels).length === Object.keys(labels).length
  );
  assert.ok(s, `${f.name}${suffix ?? ""} ${JSON.stringify(labels)}`);
  return s.value;
}

e2e(
  "/metrics carries every kubelet metric with upstream's HELP and labels, and the SLI histogram counts the pods started",
  async (w, api) => {
    for (const name of STARTED) await create(w, pod(name));
    // An image no registry serves: its pull fails, the pod never starts.
    await create(
      w,
      pod("unpullable", {
        containers: [{
          name: "main",
          image: "127.0.0.1:1/metrics-e2e/absent:1",
          imagePullPolicy: "IfNotPresent",
        }],
      }),
    );
    for (const name of STARTED) {
      await waitPod(api, NS, name, "Running", (p) => p.status?.phase === "Running");
    }
    await waitPod(
      api,
      NS,
      "unpullable",
      "waiting on its image",
      (p) =>
        ["ErrImagePull", "ImagePullBackOff"].includes(
          p.status?.containerStatuses?.[0]?.state?.waiting?.reason ?? "",
        ),
      60_000,
    );

    // The SLI is observed once the watch shows the status the kubelet wrote; the running
    // gauges follow the next relist (a started pod's status no longer waits for one).
    const families = await poll(
      "the SLI histogram and the gauges to count the started pods",
      async () => {
        const f = await scrape(w);
        const sli = f.get("kubelet_pod_start_sli_duration_seconds");
        const count = sli?.samples.find((s) => s.suffix === "_count")?.value ?? 0;
        const running =
          f.get("kubelet_running_containers")?.samples.find((s) =>
            s.labels.container_state === "running"
          )?.value ?? 0;
        return count >= STARTED.length && running >= STARTED.length ? f : undefined;
      },
      60_000,
    );

    const sli = family(
      families,
      "kubelet_pod_start_sli_duration_seconds",
      "histogram",
      "[ALPHA] Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
    );
    withLabels(sli, []);
    assert.equal(
      value(sli, {}, "_count"),
      STARTED.length,
      "the SLI counts exactly the pods started",
    );
    assert.equal(value(sli, { le: "+Inf" }, "_bucket"), STARTED.length);
    assert.ok(value(sli, {}, "_sum") > 0);

    const start = family(
      families,
      "kubelet_pod_start_duration_seconds",
      "histogram",
      "[ALPHA] Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
    );
    withLabels(start, []);
    assert.ok(value(start, {}, "_count") >= STARTED.length);

    const worker = family(
      families,
      "kubelet_pod_worker_duration_seconds",
      "histogram",
      "[ALPHA] Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
    );
    withLabels(worker, ["operation_type"]);
    assert.ok(value(worker, { operation_type: "create" }, "_count") >= STARTED.length);
    assert.ok(value(worker, { operation_type: "sync" }, "_count") >= 1);

    for (
      const [name, help] of [
        [
          "kubelet_pleg_relist_duration_seconds",
          "[ALPHA] Duration in seconds for relisting pods in PLEG.",
        ],
        [
          "kubelet_pleg_relist_interval_seconds",
          "[ALPHA] Interval in seconds between relisting in PLEG.",
        ],
      ]
    ) {
      const f = family(families, name!, "histogram", help!);
      withLabels(f, []);
      assert.ok(value(f, {}, "_count") > 0, name);
    }

    const pods = family(
      families,
      "kubelet_running_pods",
      "gauge",
      "[ALPHA] Number of pods that have a running pod sandbox",
    );
    withLabels(pods, []);
    // The three started pods and the one waiting on its image all have a ready sandbox.
    assert.equal(value(pods, {}), STARTED.length + 1);
    const containers = family(
      families,
      "kubelet_running_containers",
      "gauge",
      "[ALPHA] Number of containers currently running",
    );
    withLabels(containers, ["container_state"]);
    assert.equal(value(containers, { container_state: "running" }), STARTED.length);

    const ops = family(
      families,
      "kubelet_runtime_operations_total",
      "counter",
      "[ALPHA] Cumulative number of runtime operations by operation type.",
    );
    withLabels(ops, ["operation_type"]);
    for (const op of ["run_podsandbox", "create_container", "start_container"]) {
      assert.ok(value(ops, { operation_type: op }) >= STARTED.length, op);
    }
    for (const op of ["list_podsandbox", "list_containers", "status", "pull_image"]) {
      assert.ok(value(ops, { operation_type: op }) >= 1, op);
    }
    const durations = family(
      families,
      "kubelet_runtime_operations_duration_seconds",
      "histogram",
      "[ALPHA] Duration in seconds of runtime operations. Broken down by operation type.",
    );
    withLabels(durations, ["operation_type"]);
    assert.equal(
      value(durations, { operation_type: "run_podsandbox" }, "_count"),
      value(ops, { operation_type: "run_podsandbox" }),
    );
    // Upstream's ExponentialBuckets(.005, 2.5, 14), as Go prints the bounds.
    const bounds = durations.samples
      .filter((s) => s.suffix === "_bucket" && s.labels.operation_type === "run_podsandbox")
      .map((s) => s.labels.le);
    assert.deepEqual(bounds, [
      "0.005",
      "0.0125",
      "0.03125",
      "0.078125",
      "0.1953125",
      "0.48828125",
      "1.220703125",
      "3.0517578125",
      "7.62939453125",
      "19.073486328125",
      "47.6837158203125",
      "119.20928955078125",
      "298.0232238769531",
      "745.0580596923828",
      "+Inf",
    ]);
    const errors = family(
      families,
      "kubelet_runtime_operations_errors_total",
      "counter",
      "[ALPHA] Cumulative number of runtime operation errors by operation type.",
    );
    withLabels(errors, ["operation_type"]);
    assert.ok(value(errors, { operation_type: "pull_image" }) >= 1);

    const node = family(
      families,
      "kubelet_node_name",
      "gauge",
      "[ALPHA] The node's name. The count is always 1.",
    );
    withLabels(node, ["node"]);
    assert.equal(value(node, { node: NODE }), 1);

    const startedPods = family(
      families,
      "kubelet_started_pods_total",
      "counter",
      "[ALPHA] Cumulative number of pods started",
    );
    withLabels(startedPods, []);
    assert.ok(value(startedPods, {}) >= STARTED.length + 1);

    const rest = family(
      families,
      "rest_client_requests_total",
      "counter",
      "[ALPHA] Number of HTTP requests, partitioned by status code, method, and host.",
    );
    withLabels(rest, ["code", "method", "host"]);
    const host = new URL(w.cp.server).host;
    assert.ok(value(rest, { code: "200", method: "GET", host }) >= 1);
    assert.ok(value(rest, { code: "200", method: "PATCH", host }) >= STARTED.length);

    const rss = family(
      families,
      "process_resident_memory_bytes",
      "gauge",
      "Resident memory size in bytes.",
    );
    assert.ok(value(rss, {}) > 10 * 1024 * 1024);
    const cpu = family(
      families,
      "process_cpu_seconds_total",
      "counter",
      "Total user and system CPU time spent in seconds.",
    );
    assert.ok(value(cpu, {}) > 0);
  },
);

e2e(
  "/debug/pods/<ns>/<name> lists every phase of a started pod's start in order",
  async (w, api) => {
    await create(
      w,
      pod("timeline", {
        containers: ["first", "second"].map((name) => ({
          name,
          image: BUSYBOX_IMAGE,
          imagePullPolicy: "Never",
          command: ["sh", "-c", "sleep 3600"],
        })),
      }),
    );
    await waitPod(api, NS, "timeline", "Running", (p) => p.status?.phase === "Running");
    const body = await poll("the timeline up to ready", async () => {
      const r = await raw(w, `/debug/pods/${NS}/timeline`);
      assert.equal(r.code, 0, r.stderr);
      const t = JSON.parse(r.stdout) as {
        namespace: string;
        name: string;
        uid: string;
        phases: { phase: string; container?: string; time: string; sinceFirstMs: number }[];
      };
      const has = (phase: string) => t.phases.some((p) => p.phase === phase);
      return has("ready") && has("statusWritten") ? t : undefined;
    }, 30_000);
    assert.equal(body.namespace, NS);
    assert.equal(body.name, "timeline");
    const named = body.phases.map((p) =>
      p.container === undefined ? p.phase : `${p.phase}(${p.container})`
    );
    // The accepted write and the first readiness come in either order.
    assert.ok(
      named.indexOf("statusWritten") > named.indexOf("running"),
      `the status write after running: ${named.join(" ")}`,
    );
    assert.deepEqual(
      named.filter((n) => n !== "statusWritten"),
      [
        "seen",
        "admitted",
        "volumesReady",
        "sandboxCreated",
        "imagePulled(first)",
        "containerCreated(first)",
        "containerStarted(first)",
        "imagePulled(second)",
        "containerCreated(second)",
        "containerStarted(second)",
        "running",
        "ready",
      ],
    );
    const times = body.phases.map((p) => Date.parse(p.time));
    for (const p of body.phases) {
      assert.match(
        p.time,
        /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/,
        "RFC 3339 with milliseconds",
      );
    }
    assert.deepEqual(times, [...times].sort((a, b) => a - b), "in time order");
    assert.deepEqual(body.phases.map((p) => p.sinceFirstMs), times.map((t) => t - times[0]!));

    const unknown = await raw(w, `/debug/pods/${NS}/no-such-pod`);
    assert.notEqual(unknown.code, 0);
    assert.match(unknown.stderr, /NotFound|not found|404/i);
  },
);

e2e("an eviction counts in kubelet_evictions under its signal", async (w, api) => {
  await create(
    w,
    pod("filler", {
      restartPolicy: "Never",
      containers: [{
        name: "main",
        image: BUSYBOX_IMAGE,
        imagePullPolicy: "Never",
        command: ["sh", "-c", "dd if=/dev/zero of=/scratch/fill bs=1M count=16; sleep 3600"],
        volumeMounts: [{ name: "scratch", mountPath: "/scratch" }],
      }],
      volumes: [{ name: "scratch", emptyDir: { sizeLimit: "8Mi" } }],
    }),
  );
  await waitPod(
    api,
    NS,
    "filler",
    "Failed with reason Evicted",
    (p) => p.status?.phase === "Failed" && p.status.reason === "Evicted",
    90_000,
  );
  const families = await scrape(w);
  const evictions = family(
    families,
    "kubelet_evictions",
    "counter",
    "[ALPHA] Cumulative number of pod evictions by eviction signal",
  );
  withLabels(evictions, ["eviction_signal"]);
  assert.equal(value(evictions, { eviction_signal: "emptydirfs.limit" }), 1);
});

suite.teardown("teardown", async (w) => {
  await w.containerd.stop();
});
