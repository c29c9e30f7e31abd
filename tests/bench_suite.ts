/**
 * @module
 * The benchmark suite (`deno task bench`): the same workload against this agent and against the
 * upstream kubelet of the pinned release, one after the other in one run, on one containerd
 * and one kube-apiserver, printed as tables with the ratios. Not a test: it prints figures and
 * fails only when a workload cannot be run at all.
 *
 * What it measures, per kubelet (tests/_bench_agents.ts starts both, with the same
 * configuration; its module documentation lists every deviation from upstream's defaults):
 * - pod start latency, two ways: "client" = the create request sent → a watch on pods shows
 *   every container running (this process's monotonic clock, ms precision), and upstream's pod
 *   startup SLI = the pod's `creationTimestamp` → the watch shows every container running
 *   (wall clock; the timestamp has second precision, so this reads 0-1 s high). The image is
 *   present (`imagePullPolicy: Never`), no init containers, no service account token; the
 *   container serves HTTP (busybox httpd) and has a readiness probe of it. Cases: 1 pod at a
 *   time (created, running, deleted, gone; N times) and bursts created at once; p50/p90/p99/max,
 *   and for a burst the time from the first create to the last pod running;
 * - the kubelet's own share of that: its latency minus the floor's at p50 and p99, ours and
 *   upstream's (tests/_bench_overhead.ts);
 * - the raw CRI floor (tests/_bench_cri_floor.ts): RunPodSandbox + PodSandboxStatus +
 *   CreateContainer + StartContainer straight to the same containerd, with the requests a
 *   kubelet sends for the bench pod (built by this agent's config code), as many and the same
 *   way (one at a time, then bursts), so the kubelet's own overhead shows; each burst twice:
 *   all at once (as the upstream kubelet issues it) and with at most our agent's default
 *   --max-parallel-sandbox-starts RunPodSandbox calls in flight;
 * - CPU (cores, from /proc/<pid>/stat over a window) and resident memory (VmRSS averaged over
 *   the window, VmHWM as the peak) at 0 pods and with each burst's pods running, and the
 *   per-pod slope of both (least squares over those points). At 0 pods two windows in a row:
 *   the first after the node is Ready (start-up still costs CPU there: ours 6.7-8 m in its
 *   first 30 s against 3-4.3 m later), the second the steady figure;
 * - over the same windows (tests/_bench_steady.ts): the kubelet's API requests per second (pod
 *   status, events, Node and Lease), its PLEG relists and their mean duration, and how late its
 *   readiness probes ran, from the pods' own logs of the probe requests;
 * - the fake-CRI scale test, our agent only (the upstream kubelet cannot run on our fake
 *   runtime): src/testing/pod_density.ts with many pods, in its own process.
 *
 * The kubelets (`--agents`, tests/_bench_pleg.ts): `agent` (ours as it ships, with its evented
 * PLEG), `agent-relist` (ours with the EventedPLEG gate off: the generic PLEG relisting every
 * second), `agent-release` (ours started from the release file of `deno task release` instead of
 * `deno run main.ts`: tests/_bench_release.ts builds it, and the report gives its size, the size
 * of its extracted tree, and the two agents' start-up, RSS and CPU side by side) and `upstream`;
 * with both `agent` and `agent-relist` the report puts their PLEGs' relists, idle CPU and pod
 * start latency side by side with the Go kubelet's. `--runtime containerd2` runs everything on
 * containerd 2.x built from its Go module (tests/runtime_build.ts) instead of Debian's 1.6, which
 * has no container events (so there the evented PLEG relists too).
 *
 * Modes: full (default: 50 sequential, bursts of 30, 110 and 250 with `maxPods: 250`, 2-minute
 * windows, a probe every 10 s, fake CRI at 110 and 1000 pods) and `--short` (or
 * KUBELET_TS_BENCH=short: 5 sequential, a burst of 10, 10-second windows, a probe every 5 s, fake
 * CRI at 50 and 200 pods), which fits CI; `--sequential`, `--bursts`, `--window-s`,
 * `--fake-pods` and `--probe-period` override a mode's counts. `--out <file>` also writes the
 * report as Markdown with the date and the machine (and `--note <text>` under them).
 * `--agents agent` or `--agents upstream`
 * runs one only. Needs root, containerd, runc and Go (the control plane and the upstream kubelet
 * are built by tests/control_plane_build.ts, cached); without them it says why and measures
 * nothing. Everything it starts is stopped at the end.
 *
 * Upstream's counterparts: the node e2e density test (`test/e2e_node/density_test.go`) and the
 * pod startup SLI of sig-scalability (`slos/pod_startup_latency.md`).
 */

import { join } from "node:path";
import { parseArgs } from "node:util";
import type { V1Node, V1Pod, V1Service } from "@kubernetes/client-node";
import * as api from "../proto/runtime/v1/api.ts";
import { CriConnection } from "../src/cri/connection.ts";
import { unmountUnder } from "../src/privilege/host_view.ts";
import { isStatus, type KubeClient } from "../src/client/kube_client.ts";
import { DEFAULT_SANDBOX_STARTS_PER_CPU } from "../src/kuberuntime/kuberuntime_manager.ts";
import { RemoteImageService } from "../src/cri/remote_image.ts";
import { RemoteRuntimeService } from "../src/cri/remote_runtime.ts";
import { Semaphore } from "../src/util/semaphore.ts";
import {
  type BenchAgent,
  type BenchAgentOptions,
  releaseExtractDir,
  settledWithin,
  startOurAgent,
  startUpstreamKubelet,
} from "./_bench_agents.ts";
import {
  buildBenchRelease,
  type ReleaseFigures,
  releaseSection,
  withExtracted,
} from "./_bench_release.ts";
import {
  cpuDuring,
  measureWindow,
  mib,
  millicores,
  ms,
  percent,
  percentile,
  ratio,
  residentMiB,
  seconds,
  sleep,
  slope,
  type StartCpu,
  table,
  type WindowFigures,
} from "./_bench_measure.ts";
import { PodWatch } from "./_bench_pod_watch.ts";
import { dropPageCache, dropText, type PageCacheDrop } from "./_bench_kernel.ts";
import {
  comparedAgent,
  overheadAt,
  type OverheadCase,
  overheadMet,
  overheadTable,
} from "./_bench_overhead.ts";
import {
  countEvents,
  probeLateness,
  readProbeTimes,
  scrapeSteady,
  type SteadyFigures,
  steadyFigures,
  steadyTable,
} from "./_bench_steady.ts";
import {
  AGENT_KINDS,
  type AgentKind,
  isOurs,
  plegMode,
  plegTable,
  RELIST_CONFIG_LINES,
  scrapeRelists,
} from "./_bench_pleg.ts";
import { AGENT_V8_FLAGS } from "../deploy/compile.ts";
import { breakdownTable, fetchTimelines, stepDurations } from "./_bench_timeline.ts";
import { opsBetween, opsSection, type OpTotals, scrapeRuntimeOps } from "./_bench_cri_ops.ts";
import { REPO_ROOT } from "./agent_process.ts";
import {
  type ContainerdHandle,
  runtimeFromEnv,
  type RuntimeKind,
  startContainerd,
} from "./containerd_harness.ts";
import {
  ensureControlPlaneBinaries,
  ensureUpstreamKubelet,
  formatDuration,
  KUBERNETES_VERSION,
} from "./control_plane_build.ts";
import { type ControlPlane, dumpLogsOnFailure, startControlPlane } from "./control_plane.ts";
import { CriFloor } from "./_bench_cri_floor.ts";
import { BUSYBOX, BUSYBOX_IMAGE, importImages, PAUSE } from "./images.ts";
import {
  adminClient,
  ensureDefaultServiceAccount,
  removeCgroupTree,
  removeStaleTestCgroups,
  TEST_CGROUP_PARENT,
} from "./node_harness.ts";
import { whyNotRunnable } from "./requirements.ts";

/** How much the suite does. */
export interface BenchMode {
  readonly name: "full" | "short";
  /** Pods started one at a time. */
  readonly sequential: number;
  /** Burst sizes, ascending. */
  readonly bursts: readonly number[];
  /** CPU and memory window at each pod count, in ms. */
  readonly windowMs: number;
  /** Pod counts of the fake-CRI scale test. */
  readonly fakePods: readonly number[];
  /** The bench pods' HTTP readiness probe period in seconds; 0: no probe. */
  readonly probePeriodS: number;
}

export const FULL: BenchMode = {
  name: "full",
  sequential: 50,
  bursts: [30, 110, 250],
  windowMs: 120_000,
  fakePods: [110, 1000],
  probePeriodS: 10,
};

export const SHORT: BenchMode = {
  name: "short",
  sequential: 5,
  bursts: [10],
  windowMs: 10_000,
  fakePods: [50, 200],
  probePeriodS: 5,
};

/**
 * The mode with the command line's overrides: `--sequential N`, `--bursts A,B`, `--window-s S`,
 * `--fake-pods A,B` (empty: none) and `--probe-period S` (0: none), each a count; a bad value
 * names the flag and the value.
 */
export function withOverrides(
  base: BenchMode,
  flags: {
    sequential?: string;
    bursts?: string;
    "window-s"?: string;
    "fake-pods"?: string;
    "probe-period"?: string;
  },
): BenchMode {
  const count = (flag: string, v: string, min: number) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min) {
      throw new Error(`--${flag} must be an integer of at least ${min}: current value is '${v}'`);
    }
    return n;
  };
  const list = (flag: string, v: string) =>
    v.trim() === "" ? [] : v.split(",").map((x) => count(flag, x.trim(), 1));
  return {
    name: base.name,
    sequential: flags.sequential === undefined
      ? base.sequential
      : count("sequential", flags.sequential, 0),
    bursts: flags.bursts === undefined ? base.bursts : list("bursts", flags.bursts),
    windowMs: flags["window-s"] === undefined
      ? base.windowMs
      : count("window-s", flags["window-s"], 1) * 1000,
    fakePods: flags["fake-pods"] === undefined
      ? base.fakePods
      : list("fake-pods", flags["fake-pods"]),
    probePeriodS: flags["probe-period"] === undefined
      ? base.probePeriodS
      : count("probe-period", flags["probe-period"], 0),
  };
}

const NS = "default";
/** Bound on one case's pods to run, or to leave the API. */
const WAIT_MS = 300_000;
/** Quiet time after an agent starts or a burst runs, before a window. */
const SETTLE_MS = 5_000;
/** Bench pods' names start with this, so cleanup finds only them. */
const PREFIX = `bench-${crypto.randomUUID().slice(0, 6)}`;
/** The port the bench pods serve HTTP on, for their readiness probe. */
const PROBE_PORT = 8080;
/**
 * Serves /etc over HTTP with busybox's httpd, which logs each request (tests/_bench_steady.ts
 * reads the probes' times from that); exits at once on SIGTERM, so deleting a pod is quick.
 */
const COMMAND = [
  "sh",
  "-c",
  `trap 'exit 0' TERM; httpd -f -v -p ${PROBE_PORT} -h /etc & sleep 3600 & wait`,
];

/** Latencies of one case, in ms, one per pod. */
interface Latencies {
  /** Create request sent → watch shows every container running. */
  readonly client: number[];
  /** creationTimestamp → watch shows every container running (upstream's SLI). */
  readonly sli: number[];
}

/** One burst's figures. */
interface BurstResult {
  readonly size: number;
  readonly latency: Latencies;
  /** First create sent → last pod running, in ms. */
  readonly lastRunningMs: number;
  /** Delete requests sent → every pod gone from the API, in ms. */
  readonly deleteMs: number;
  /** CPU and memory with the burst's pods running. */
  readonly window: WindowFigures;
  /** Over {@link window}: API requests, PLEG relists, probe lateness. */
  readonly steady: SteadyFigures;
  /** Our agent only: each pod's step durations from its /debug/pods timeline. */
  readonly steps?: Map<string, number>[];
  /** CPU spent from the first create to the last pod running. */
  readonly cpu: StartCpu;
  /**
   * The CRI calls the kubelet timed between a scrape just before the first create and one just
   * after the last pod ran (the previous burst's teardown can still be running then).
   */
  readonly ops: Map<string, OpTotals> | Error;
}

/** What one kubelet did. */
interface AgentResult {
  readonly label: string;
  readonly kubeletVersion: string;
  /** Spawned → its sync loop started, ms. */
  readonly startMs: number;
  /** From the release file: its first start (tests/_bench_agents.ts BenchAgent.firstStart). */
  readonly firstStart?: BenchAgent["firstStart"];
  /** 0 pods, the first window after the node is Ready: start-up work still running. */
  readonly startup: WindowFigures;
  /** 0 pods, the window after {@link startup}: the steady figure the targets compare. */
  readonly idle: WindowFigures;
  /** Over {@link idle}: API requests and PLEG relists. */
  readonly idleSteady: SteadyFigures;
  readonly sequential: Latencies;
  /** The CRI calls the kubelet timed while it started the sequential pods; an Error when unread. */
  readonly sequentialOps: Map<string, OpTotals> | Error;
  /** Our agent only: each sequential pod's step durations from its /debug/pods timeline. */
  readonly sequentialSteps?: Map<string, number>[];
  readonly bursts: BurstResult[];
  /** VmHWM at the end, in MiB. */
  readonly peakMiB: number;
  readonly errorLines: string;
  /** Which PLEG it ran (tests/_bench_pleg.ts plegMode). */
  readonly pleg: string;
  /** PLEG relists per minute over the two windows at 0 pods; NaN when /metrics was not read. */
  readonly relistsPerMinute: number;
}

/** The CRI floor's figures. */
interface FloorResult {
  readonly sequential: number[];
  /**
   * Each burst all at once, as the upstream kubelet issues it, and `paced`: at most
   * {@link SANDBOX_STARTS} RunPodSandbox calls in flight, as our agent issues it by default.
   */
  readonly bursts: {
    size: number;
    latency: number[];
    lastMs: number;
    /** CPU spent while the all-at-once burst started. */
    cpu: StartCpu;
    paced: { latency: number[]; lastMs: number; cpu: StartCpu };
  }[];
}

/** Our agent's default --max-parallel-sandbox-starts on this machine. */
const SANDBOX_STARTS = DEFAULT_SANDBOX_STARTS_PER_CPU * navigator.hardwareConcurrency;

/** What src/testing/pod_density.ts prints as JSON. */
interface DensityResult {
  pods: number;
  allRunningMs: number;
  runningP50Ms: number;
  runningP99Ms: number;
  steadyCpuMsPerSecond: number;
  rssMiB: number;
  heapUsedMiB: number;
  relistMs: number;
  relistCpuMs: number;
  syncAllCpuMs: number;
  syncAllMs: number;
  criCallsPerSecond: Record<string, number>;
}

/** A bench pod; with `probePeriodS` above 0, an HTTP readiness probe of /hostname that often. */
function benchPod(name: string, nodeName: string, probePeriodS: number): V1Pod {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS, labels: { bench: PREFIX } },
    spec: {
      nodeName,
      automountServiceAccountToken: false,
      terminationGracePeriodSeconds: 1,
      containers: [{
        name: "main",
        image: BUSYBOX_IMAGE,
        imagePullPolicy: "Never",
        command: COMMAND,
        ...(probePeriodS > 0
          ? {
            readinessProbe: {
              httpGet: { path: "/hostname", port: PROBE_PORT },
              periodSeconds: probePeriodS,
              timeoutSeconds: 1,
            },
          }
          : {}),
      }],
    },
  };
}

/** Creates the pods at once, each timed from its own request; waits for the watch to show them running. */
async function startPods(
  client: KubeClient,
  watch: PodWatch,
  nodeName: string,
  names: readonly string[],
  probePeriodS: number,
): Promise<{ latency: Latencies; lastRunningMs: number; sentWall: Map<string, number> }> {
  const sent = new Map<string, number>();
  const sentWall = new Map<string, number>();
  await Promise.all(names.map(async (name) => {
    sent.set(name, performance.now());
    sentWall.set(name, Date.now());
    await client.create(`/api/v1/namespaces/${NS}/pods`, benchPod(name, nodeName, probePeriodS));
  }));
  await watch.waitFor(names, "running", WAIT_MS);
  const first = Math.min(...sent.values());
  return {
    latency: {
      client: names.map((n) => watch.runningAt.get(n)! - sent.get(n)!),
      sli: names.map((n) => watch.sliMs.get(n) ?? NaN),
    },
    lastRunningMs: Math.max(...names.map((n) => watch.runningAt.get(n)!)) - first,
    sentWall,
  };
}

/** Deletes the pods (gracefully) and waits until the kubelet has removed them from the API. */
async function deletePods(
  client: KubeClient,
  watch: PodWatch,
  names: readonly string[],
): Promise<number> {
  const t0 = performance.now();
  await Promise.all(names.map(async (name) => {
    try {
      await client.delete(`/api/v1/namespaces/${NS}/pods/${name}`);
    } catch (e) {
      if (!isStatus(e, 404)) throw e;
    }
  }));
  await watch.waitFor(names, "deleted", WAIT_MS);
  return performance.now() - t0;
}

/** How many error lines a kubelet logged, and the most frequent messages. */
function errorSummary(stderr: string): string {
  const counts = new Map<string, number>();
  for (const line of stderr.split("\n")) {
    if (!/^E\d{4} /.test(line)) continue;
    const msg = line.match(/\] ("(?:[^"\\]|\\.)*")/)?.[1] ?? line.slice(0, 120);
    counts.set(msg, (counts.get(msg) ?? 0) + 1);
  }
  const total = [...counts.values()].reduce((a, b) => a + b, 0);
  const top = [...counts].sort((a, b) => b[1] - a[1]).slice(0, 3).map(([m, n]) => `${m} ×${n}`);
  return total === 0 ? "none" : `${total} (${top.join("; ")})`;
}

/** Stops and removes every sandbox in the runtime, so each kubelet starts on an empty one. */
async function clearRuntime(runtime: RemoteRuntimeService): Promise<void> {
  const sandboxes = await runtime.listPodSandbox(api.PodSandboxFilter.create({}));
  for (const s of sandboxes) {
    await runtime.stopPodSandbox(s.id).catch(() => {});
    await runtime.removePodSandbox(s.id).catch(() => {});
  }
}

/** The CRI floor (tests/_bench_cri_floor.ts): the sequential pods, then each burst twice. */
async function criFloor(
  floor: CriFloor,
  mode: BenchMode,
  containerdPid: number,
): Promise<FloorResult> {
  const sequential: number[] = [];
  for (let i = 0; i < mode.sequential; i++) {
    sequential.push(...(await floor.burst(1)).latency);
  }
  const bursts = [];
  for (const size of mode.bursts) {
    const all = await floor.burst(size, { containerdPid });
    const paced = await floor.burst(size, {
      sandboxStarts: new Semaphore(SANDBOX_STARTS),
      containerdPid,
    });
    bursts.push({
      size,
      latency: all.latency,
      lastMs: all.lastMs,
      cpu: all.cpu!,
      paced: { latency: paced.latency, lastMs: paced.lastMs, cpu: paced.cpu! },
    });
  }
  return { sequential, bursts };
}

/**
 * The CRI floor on `conn`'s runtime, for the bench pod with the cluster's Services (the env
 * both kubelets give it), in `dir`.
 */
async function measureFloor(
  runtime: RemoteRuntimeService,
  conn: CriConnection,
  cp: ControlPlane,
  dir: string,
  mode: BenchMode,
  containerdPid: number,
): Promise<FloorResult> {
  // The pods' admission needs it, and no controller manager runs to make it.
  await ensureDefaultServiceAccount(cp, NS);
  const client = await adminClient(cp, "bench-suite");
  try {
    const services = (await client.get<{ items: V1Service[] }>("/api/v1/services")).items;
    const floor = await CriFloor.create({
      runtime,
      images: new RemoteImageService({ connection: conn }),
      dir,
      // The pod as a kubelet gets it: the apiserver's dry run applies the API's defaults.
      pod: (name) =>
        client.create(
          `/api/v1/namespaces/${NS}/pods?dryRun=All`,
          benchPod(`${PREFIX}-${name}`, "kts-bench-floor", mode.probePeriodS),
        ),
      services,
    }, BUSYBOX_IMAGE);
    try {
      return await criFloor(floor, mode, containerdPid);
    } finally {
      await floor.close();
    }
  } finally {
    client.close();
  }
}

/** Runs the workload against one kubelet, started by `start`, and stops it. */
async function benchAgent(
  mode: BenchMode,
  cp: ControlPlane,
  containerdPid: number,
  start: () => Promise<BenchAgent>,
  log: (line: string) => void,
): Promise<AgentResult> {
  const client = await adminClient(cp, "bench-suite");
  const stop = new AbortController();
  const agent = await start();
  const all: string[] = [];
  let watch: PodWatch | undefined;
  try {
    log(`bench: ${agent.label} (pid ${agent.pid}) is up as node ${agent.nodeName}`);
    const node = await client.get<V1Node>(`/api/v1/nodes/${agent.nodeName}`);
    watch = await PodWatch.start({
      client,
      namespace: NS,
      nodeName: agent.nodeName,
      signal: stop.signal,
    });
    await sleep(SETTLE_MS);
    // Two windows at 0 pods: the first still holds start-up work (V8's optimizing compiles,
    // our launcher's page-out 60 s after start, the first passes of the GC managers), so it
    // says what starting costs; the second is the steady figure, as at 30 and 110 pods. The
    // PLEG's relists are counted over both, scraped outside them.
    const relistsBefore = await scrapeRelists(client, agent.nodeName).catch(() => NaN);
    log(`bench: ${agent.label}: two ${mode.windowMs / 1000} s windows at 0 pods`);
    const startup = await measureWindow(agent.pid, mode.windowMs);
    const idleBefore = await scrapeSteady(client, agent.nodeName);
    const idle = await measureWindow(agent.pid, mode.windowMs);
    const idleSteady = steadyFigures(idleBefore, await scrapeSteady(client, agent.nodeName));
    const relistsAfter = await scrapeRelists(client, agent.nodeName).catch(() => NaN);
    const relistsPerMinute = (relistsAfter - relistsBefore) / (2 * mode.windowMs / 60_000);

    const sequential: Latencies = { client: [], sli: [] };
    const sequentialSteps: Map<string, number>[] = [];
    const opsBefore = await scrapeRuntimeOps(client, agent.nodeName).catch((e) => e as Error);
    for (let i = 0; i < mode.sequential; i++) {
      const name = `${PREFIX}-${agent.label}-seq-${i}`;
      all.push(name);
      const r = await startPods(client, watch, agent.nodeName, [name], mode.probePeriodS);
      sequential.client.push(...r.latency.client);
      sequential.sli.push(...r.latency.sli);
      if (isOurs(agent.label)) {
        sequentialSteps.push(
          ...await burstSteps(client, watch, agent.nodeName, [name], r.sentWall),
        );
      }
      await deletePods(client, watch, [name]);
    }
    const sequentialOps = opsBetween(
      opsBefore,
      await scrapeRuntimeOps(client, agent.nodeName).catch((e) => e as Error),
    );
    log(`bench: ${agent.label}: ${mode.sequential} sequential pods done`);

    const bursts: BurstResult[] = [];
    for (const size of mode.bursts) {
      const names = Array.from(
        { length: size },
        (_, i) => `${PREFIX}-${agent.label}-b${size}-${i}`,
      );
      all.push(...names);
      const burstOpsBefore = await scrapeRuntimeOps(client, agent.nodeName)
        .catch((e) => e as Error);
      const { result: r, cpu } = await cpuDuring(
        { kubelet: agent.pid, containerd: containerdPid },
        () => startPods(client, watch!, agent.nodeName, names, mode.probePeriodS),
      );
      const burstOps = opsBetween(
        burstOpsBefore,
        await scrapeRuntimeOps(client, agent.nodeName).catch((e) => e as Error),
      );
      log(`bench: ${agent.label}: burst of ${size} running after ${ms(r.lastRunningMs)}`);
      const steps = isOurs(agent.label)
        ? await burstSteps(client, watch, agent.nodeName, names, r.sentWall)
        : undefined;
      // Probed pods turn Ready within a period of running: that settles first.
      await sleep(SETTLE_MS + mode.probePeriodS * 1000);
      const before = await scrapeSteady(client, agent.nodeName);
      const from = Date.now();
      const window = await measureWindow(agent.pid, mode.windowMs);
      const to = Date.now();
      const after = await scrapeSteady(client, agent.nodeName);
      const probes = mode.probePeriodS > 0
        ? probeLateness(
          await readProbeTimes(agent.podLogsDir, NS, names, "main"),
          mode.probePeriodS * 1000,
          from,
          to,
        )
        : undefined;
      const events = await countEvents(client, NS, agent.nodeName, names);
      const deleteMs = await deletePods(client, watch, names);
      bursts.push({
        size,
        latency: r.latency,
        lastRunningMs: r.lastRunningMs,
        deleteMs,
        window,
        steady: steadyFigures(before, after, probes, events),
        steps,
        cpu,
        ops: burstOps,
      });
    }
    return {
      label: agent.label,
      kubeletVersion: node.status?.nodeInfo?.kubeletVersion ?? "?",
      startMs: agent.startMs,
      firstStart: agent.firstStart,
      startup,
      idle,
      idleSteady,
      sequential,
      sequentialOps,
      sequentialSteps: isOurs(agent.label) ? sequentialSteps : undefined,
      bursts,
      peakMiB: (await residentMiB(agent.pid)).peak,
      errorLines: errorSummary(agent.stderr()),
      pleg: plegMode(agent.label, agent.stderr()),
      relistsPerMinute,
    };
  } catch (e) {
    console.error(
      `${agent.label} stderr (last 60 lines):\n${agent.stderr().split("\n").slice(-60).join("\n")}`,
    );
    throw e;
  } finally {
    // Whatever a failed run leaves behind is deleted before the kubelet stops.
    if (watch) await deletePods(client, watch, all).catch(() => {});
    const code = await agent.stop();
    if (code !== 0) {
      log(
        `bench: ${agent.label} exited ${code}; its stderr's last 30 lines:\n${
          agent.stderr().split("\n").slice(-30).join("\n")
        }`,
      );
    }
    stop.abort();
    if (watch) await settledWithin(watch.finished, 10_000, `the pod watch of ${agent.label}`);
    client.close();
  }
}

/** Each burst pod's step durations from our agent's /debug/pods timelines. */
async function burstSteps(
  client: KubeClient,
  watch: PodWatch,
  nodeName: string,
  names: readonly string[],
  sentWall: ReadonlyMap<string, number>,
): Promise<Map<string, number>[]> {
  const timelines = await fetchTimelines(client, nodeName, NS, names);
  return names.flatMap((n) => {
    const phases = timelines.get(n);
    const sent = sentWall.get(n);
    const watched = watch.runningWallAt.get(n);
    return phases && sent !== undefined && watched !== undefined
      ? [stepDurations(phases, sent, watched)]
      : [];
  });
}

/** Runs src/testing/pod_density.ts with `pods` pods in a process of its own; its JSON result. */
async function fakeCriDensity(pods: number): Promise<DensityResult> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      ...["run", "--quiet", "--allow-all", `--v8-flags=--expose-gc,${AGENT_V8_FLAGS}`],
      ...["src/testing/pod_density.ts", "--pods", String(pods), "--json"],
    ],
    cwd: REPO_ROOT,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  const stdout = dec.decode(out.stdout).trim();
  if (!out.success) {
    throw new Error(
      `src/testing/pod_density.ts --pods ${pods} exited ${out.code}:\n${dec.decode(out.stderr)}`,
    );
  }
  return JSON.parse(stdout.split("\n").at(-1)!) as DensityResult;
}

/** Removes the /var/log/containers links the kubelets made for bench pods. */
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

/** Everything one run measured. */
interface SuiteResult {
  readonly mode: BenchMode;
  readonly floor: FloorResult;
  /** The paced floor's limit, {@link SANDBOX_STARTS}. */
  readonly sandboxStarts: number;
  readonly agents: AgentResult[];
  readonly density: DensityResult[];
  /** With `agent-release`: the release file and the tree it extracted. */
  readonly release?: ReleaseFigures;
  readonly buildNote: string;
  /** The page cache dropped before each phase, with the memory cgroups before and after. */
  readonly pageCache?: readonly { readonly phase: string; readonly drop: PageCacheDrop }[];
  readonly server: string;
  readonly runtime: string;
}

const pct = (v: readonly number[]) =>
  [percentile(v, 50), percentile(v, 90), percentile(v, 99), percentile(v, 100)].map(ms);

/** The report: Markdown tables with the figures and ratios. */
export function report(r: SuiteResult): string {
  const out: string[] = [];
  const agent = r.agents.find((a) => a.label === "agent");
  // Ratios, overhead and targets: the checkout's agent, or the release file's run alone.
  const ours = comparedAgent(r.agents);
  const upstream = r.agents.find((a) => a.label === "upstream");
  out.push(
    `Mode: ${r.mode.name} (${r.mode.sequential} sequential pods, bursts of ${
      r.mode.bursts.join(" and ")
    }, ${r.mode.windowMs / 1000} s CPU/memory windows, ${
      r.mode.probePeriodS > 0
        ? `an HTTP readiness probe every ${r.mode.probePeriodS} s on each pod`
        : "no probes"
    }, maxPods ${Math.max(110, ...r.mode.bursts)}). kube-apiserver ${r.server}, ${r.runtime}. ` +
      `Kubelets: ${
        r.agents.map((a) =>
          `${a.label} = ${
            a.label === "agent"
              ? "kubelet-ts"
              : a.label === "agent-relist"
              ? "kubelet-ts with EventedPLEG=false"
              : a.label === "agent-release"
              ? "kubelet-ts from the release file"
              : "Go kubelet"
          } reporting ${a.kubeletVersion}`
        ).join(", ")
      }, run one after the other in that order. ${r.buildNote}${
        r.pageCache?.length
          ? ` The page cache was dropped before each phase (${
            r.pageCache.map((p) => `${p.phase}: ${dropText(p.drop)}`).join("; ")
          }).`
          : ""
      }`,
    "",
    "### Pod start latency (client: create request sent → watch shows every container running)",
    "",
    "The CRI floor issues RunPodSandbox, PodSandboxStatus, CreateContainer and StartContainer " +
      "straight to containerd, with the requests a kubelet sends for the bench pod (cgroup parent, " +
      "RuntimeDefault seccomp for the sandbox, /etc/hosts and termination-log mounts, service env).",
    "",
  );
  const cases: {
    what: string;
    floor: number[];
    paced?: number[];
    get: (a: AgentResult) => Latencies;
  }[] = [
    {
      what: `1 pod × ${r.mode.sequential} sequential`,
      floor: r.floor.sequential,
      get: (a) => a.sequential,
    },
    ...r.mode.bursts.map((size, i) => ({
      what: `burst of ${size}`,
      floor: r.floor.bursts[i]?.latency ?? [],
      paced: r.floor.bursts[i]?.paced.latency ?? [],
      get: (a: AgentResult) => a.bursts[i]?.latency ?? { client: [], sli: [] },
    })),
  ];
  const rows: string[][] = [];
  for (const c of cases) {
    rows.push([`${c.what}: CRI floor`, String(c.floor.length), ...pct(c.floor)]);
    if (c.paced) {
      rows.push([
        `${c.what}: CRI floor, ≤${r.sandboxStarts} sandbox starts at once`,
        String(c.paced.length),
        ...pct(c.paced),
      ]);
    }
    for (const a of r.agents) {
      const l = c.get(a).client;
      rows.push([`${c.what}: ${a.label}`, String(l.length), ...pct(l)]);
    }
  }
  out.push(table(["case", "n", "p50", "p90", "p99", "max"], rows), "");

  if (ours && upstream) {
    out.push(
      "### The kubelet's own share: latency minus the CRI floor's (all at once) at the same percentile",
      "",
      overheadTable(overheadCases(r, ours, upstream), ours.label),
      "",
    );
  }

  out.push(
    "### Pod startup SLI as upstream defines it (creationTimestamp → watch shows all containers running; the timestamp has 1 s precision, so 0-1 s high)",
    "",
  );
  const sliRows: string[][] = [];
  for (const c of cases) {
    for (const a of r.agents) {
      const l = c.get(a).sli;
      sliRows.push([`${c.what}: ${a.label}`, String(l.length), ...pct(l)]);
    }
  }
  out.push(table(["case", "n", "p50", "p90", "p99", "max"], sliRows), "");

  out.push("### Bursts: first create sent → last pod running; delete → all gone", "");
  const burstRows = r.mode.bursts.map((size, i) => [
    `burst of ${size}`,
    ms(r.floor.bursts[i]?.lastMs ?? NaN),
    ms(r.floor.bursts[i]?.paced.lastMs ?? NaN),
    ...r.agents.flatMap((
      a,
    ) => [ms(a.bursts[i]?.lastRunningMs ?? NaN), ms(a.bursts[i]?.deleteMs ?? NaN)]),
  ]);
  out.push(
    table([
      "case",
      "CRI floor: last started",
      `CRI floor, ≤${r.sandboxStarts} at once`,
      ...r.agents.flatMap((a) => [`${a.label}: last running`, `${a.label}: all gone`]),
    ], burstRows),
    "",
  );

  out.push(
    "### CPU while each burst started (first create sent → last pod running; CPU seconds from /proc/<pid>/stat, the machine's busy share from /proc/stat)",
    "",
  );
  const cpuRows = r.mode.bursts.map((size, i) => {
    const f = r.floor.bursts[i];
    return [
      `burst of ${size}`,
      seconds(f?.cpu.containerd),
      percent(f?.cpu.machineBusy),
      seconds(f?.paced.cpu.containerd),
      percent(f?.paced.cpu.machineBusy),
      ...r.agents.flatMap((a) => {
        const c = a.bursts[i]?.cpu;
        return [seconds(c?.kubelet), seconds(c?.containerd), percent(c?.machineBusy)];
      }),
    ];
  });
  out.push(
    table([
      "case",
      "CRI floor: containerd",
      "CRI floor: machine busy",
      `CRI floor, ≤${r.sandboxStarts} at once: containerd`,
      `CRI floor, ≤${r.sandboxStarts} at once: machine busy`,
      ...r.agents.flatMap((a) => [
        `${a.label}: kubelet`,
        `${a.label}: containerd`,
        `${a.label}: machine busy`,
      ]),
    ], cpuRows),
    "",
  );
  const top = (c: StartCpu | undefined) =>
    c?.byName.slice(0, 8).map(([n, v]) => `${n} ${v.toFixed(1)} s`).join(", ") ?? "n/a";
  for (const [i, size] of r.mode.bursts.entries()) {
    out.push(`- burst of ${size}, CRI floor, CPU by process: ${top(r.floor.bursts[i]?.cpu)}`);
    out.push(
      `- burst of ${size}, CRI floor ≤${r.sandboxStarts} at once, CPU by process: ${
        top(r.floor.bursts[i]?.paced.cpu)
      }`,
    );
    for (const a of r.agents) {
      out.push(`- burst of ${size}, ${a.label}, CPU by process: ${top(a.bursts[i]?.cpu)}`);
    }
  }
  out.push("");

  out.push(
    `### CPU and memory of the kubelet process (/proc/<pid>; CPU averaged over ${
      r.mode.windowMs / 1000
    } s, RSS = mean VmRSS over the window; at 0 pods the second window after the node is Ready, the first has a row of its own)`,
    "",
  );
  const counts = [0, ...r.mode.bursts];
  const windowOf = (a: AgentResult, i: number) => i === 0 ? a.idle : a.bursts[i - 1]?.window;
  const windowRow = (label: string, pick: (a: AgentResult) => WindowFigures | undefined) => [
    label,
    ...r.agents.flatMap((a) => [mib(pick(a)?.rssMiB ?? NaN), millicores(pick(a)?.cores ?? NaN)]),
    ...(ours && upstream
      ? [
        ratio(pick(ours)?.rssMiB ?? NaN, pick(upstream)?.rssMiB ?? NaN),
        ratio(pick(ours)?.cores ?? NaN, pick(upstream)?.cores ?? NaN),
      ]
      : []),
  ];
  const resRows = [
    windowRow(`0 pods, first ${r.mode.windowMs / 1000} s after Ready`, (a) => a.startup),
    ...counts.map((n, i) => windowRow(`${n} pods`, (a) => windowOf(a, i))),
  ];
  resRows.push([
    "peak (VmHWM, whole run)",
    ...r.agents.flatMap((a) => [mib(a.peakMiB), ""]),
    ...(ours && upstream ? [ratio(ours.peakMiB, upstream.peakMiB), ""] : []),
  ]);
  resRows.push([
    "per-pod slope",
    ...r.agents.flatMap((a) => {
      const pts = counts.map((n, i) => [n, windowOf(a, i)] as const);
      const mem = slope(pts.map(([n, w]) => [n, w?.rssMiB ?? NaN]));
      const cpu = slope(pts.map(([n, w]) => [n, w?.cores ?? NaN]));
      return [`${(mem * 1024).toFixed(0)} KiB/pod`, `${(cpu * 1000).toFixed(2)} m/pod`];
    }),
    ...(ours && upstream ? ["", ""] : []),
  ]);
  out.push(
    table([
      "pods running",
      ...r.agents.flatMap((a) => [`${a.label} RSS`, `${a.label} CPU`]),
      ...(ours && upstream ? [`RSS ${ours.label}/upstream`, `CPU ${ours.label}/upstream`] : []),
    ], resRows),
    "",
  );
  out.push(...r.agents.map((a) => `- ${a.label} error lines: ${a.errorLines}`), "");

  out.push(
    `### At steady state, over the same windows: API requests (the apiserver's apiserver_request_total), PLEG relists (each kubelet's kubelet_pleg_relist_duration_seconds), readiness probe lateness (gaps between a pod's probe requests minus the ${r.mode.probePeriodS} s period, from the pods' httpd logs), events the apiserver holds about the burst's pods at the window's end`,
    "",
    steadyTable(
      counts,
      r.agents.map((a) => ({
        label: a.label,
        windows: [a.idleSteady, ...r.mode.bursts.map((_, i) => a.bursts[i]?.steady)],
      })),
    ),
    "",
  );

  const fromRelease = r.agents.find((a) => a.label === "agent-release");
  if (r.release && fromRelease) {
    const figures = (a: AgentResult) => ({
      label: a.label,
      startMs: a.startMs,
      firstStart: a.firstStart,
      windows: [
        { what: `0 pods, first ${r.mode.windowMs / 1000} s after Ready`, ...a.startup },
        ...counts.map((n, i) => ({ what: `${n} pods`, ...windowOf(a, i)! })),
      ],
      peakMiB: a.peakMiB,
    });
    out.push(
      ...releaseSection(r.release, agent && figures(agent), figures(fromRelease)),
      "",
    );
  }

  if (r.mode.sequential > 0) {
    out.push(...opsSection(
      `${r.mode.sequential} sequential pods`,
      r.mode.sequential,
      r.agents.map((a) => ({ label: a.label, ops: a.sequentialOps })),
    ));
  }
  for (const size of r.mode.bursts) {
    out.push(...opsSection(
      `burst of ${size} (scraped just before the first create and just after the last pod ran; the previous burst's teardown, such as its container removals, can still run then)`,
      size,
      r.agents.flatMap((a) => {
        const b = a.bursts.find((b) => b.size === size);
        return b ? [{ label: a.label, ops: b.ops }] : [];
      }),
    ));
  }
  for (const a of r.agents.filter((a) => isOurs(a.label))) {
    // "our agent" for the agent as it ships, as in earlier records; its variants by label.
    const who = a.label === "agent" ? "our agent" : a.label;
    if (a.sequentialSteps?.length) {
      out.push(
        `### Where ${who}'s time goes, 1 pod × ${r.mode.sequential} sequential (its /debug/pods timelines, bracketed by the bench's create and watch times)`,
        "",
        breakdownTable(a.sequentialSteps),
        "",
      );
    }
    for (const [i, b] of a.bursts.entries()) {
      if (!b.steps) continue;
      out.push(
        `### Where ${who}'s time goes, burst of ${
          r.mode.bursts[i]
        } (its /debug/pods timelines, bracketed by the bench's create and watch times)`,
        "",
        breakdownTable(b.steps),
        "",
      );
    }
  }

  if (r.agents.some((a) => a.label === "agent-relist")) {
    out.push(
      "### PLEG: evented against relisting (relists from each kubelet's kubelet_pleg_relist_duration_seconds over the two 0-pod windows; CPU and latency as above)",
      "",
      plegTable(r.agents.map((a) => ({
        label: a.label,
        pleg: a.pleg,
        relistsPerMinute: a.relistsPerMinute,
        startupCores: a.startup.cores,
        idleCores: a.idle.cores,
        sequential: a.sequential.client,
        bursts: a.bursts.map((b) => ({
          size: b.size,
          latency: b.latency.client,
          cores: b.window.cores,
        })),
      }))),
      "",
    );
  }

  if (r.density.length > 0) {
    out.push(
      "### Fake-CRI scale test (our pod lifecycle standalone, fake runtime in another process; no probes)",
      "",
    );
    const dRows = r.density.map((d) => [
      String(d.pods),
      ms(d.allRunningMs),
      ms(d.runningP99Ms),
      `${d.steadyCpuMsPerSecond.toFixed(1)} ms/s`,
      mib(d.rssMiB),
      mib(d.heapUsedMiB),
      `${d.relistMs.toFixed(1)} ms`,
      `${(d.relistCpuMs * 1000 / d.pods).toFixed(1)} µs`,
      `${(d.syncAllCpuMs * 1000 / d.pods).toFixed(0)} µs`,
    ]);
    if (r.density.length > 1) {
      const pts = (f: (d: DensityResult) => number) =>
        r.density.map((d) => [d.pods, f(d)] as [number, number]);
      dRows.push([
        "per-pod slope",
        "",
        "",
        `${slope(pts((d) => d.steadyCpuMsPerSecond)).toFixed(3)} ms/s`,
        `${(slope(pts((d) => d.rssMiB)) * 1024).toFixed(0)} KiB`,
        `${(slope(pts((d) => d.heapUsedMiB)) * 1024).toFixed(0)} KiB`,
        `${slope(pts((d) => d.relistMs)).toFixed(3)} ms`,
        "",
        "",
      ]);
    }
    out.push(
      table([
        "pods",
        "ADD → all running",
        "p99 per pod",
        "steady CPU",
        "RSS",
        "heap used",
        "one relist",
        "relist CPU per pod",
        "sync (status) CPU per pod",
      ], dRows),
      "",
    );
  }

  if (ours && upstream) {
    out.push("### Targets", "", `For ${ours.label}:`, "", ...targets(r, ours, upstream), "");
  }
  return out.join("\n");
}

/** The sequential case and each burst, ours and upstream's latencies with the floor's. */
function overheadCases(r: SuiteResult, agent: AgentResult, upstream: AgentResult): OverheadCase[] {
  return [
    {
      what: `1 pod × ${r.mode.sequential} sequential`,
      floor: r.floor.sequential,
      agent: agent.sequential.client,
      upstream: upstream.sequential.client,
    },
    ...r.mode.bursts.map((size, i) => ({
      what: `burst of ${size}`,
      floor: r.floor.bursts[i]?.latency ?? [],
      agent: agent.bursts[i]?.latency.client ?? [],
      upstream: upstream.bursts[i]?.latency.client ?? [],
    })),
  ];
}

/** Bursts of this size and more are held to the overhead target. */
const OVERHEAD_TARGET_FROM = 110;

/**
 * The targets, each met or not, with the figures: the kubelet's overhead above the CRI floor at
 * most half of upstream's at p50 and p99 for bursts of {@link OVERHEAD_TARGET_FROM} pods and more;
 * RSS and CPU at 0 pods no higher than upstream's and at the largest burst at most 0.8× its; no
 * probe more than one period late with the largest burst running.
 */
function targets(r: SuiteResult, agent: AgentResult, upstream: AgentResult): string[] {
  const lines: string[] = [];
  const check = (ok: boolean, what: string) => lines.push(`- ${ok ? "met" : "NOT met"}: ${what}`);
  const cases = overheadCases(r, agent, upstream);
  for (const [i, c] of cases.entries()) {
    if (i === 0 || r.mode.bursts[i - 1]! < OVERHEAD_TARGET_FROM) continue;
    for (const p of [50, 99]) {
      const o = overheadAt(c, p);
      check(
        overheadMet(o, 0.5),
        `overhead above the CRI floor ≤ 0.5× upstream's at p${p}, ${c.what}: ${ms(o.agentMs)} vs ${
          ms(o.upstreamMs)
        } (floor ${ms(o.floorMs)})`,
      );
    }
  }
  const last = r.mode.bursts.length;
  const bounds: [number, number][] = last > 0 ? [[0, 1], [last, 0.8]] : [[0, 1]];
  for (const [i, factor] of bounds) {
    const wa = i === 0 ? agent.idle : agent.bursts[i - 1]!.window;
    const wu = i === 0 ? upstream.idle : upstream.bursts[i - 1]!.window;
    const n = i === 0 ? 0 : r.mode.bursts[i - 1];
    const bound = factor === 1 ? "≤ upstream's" : `≤ ${factor}× upstream's`;
    check(
      wa.rssMiB <= wu.rssMiB * factor,
      `RSS ${bound} at ${n} pods: ${mib(wa.rssMiB)} vs ${mib(wu.rssMiB)} (${
        ratio(wa.rssMiB, wu.rssMiB)
      })`,
    );
    check(
      wa.cores <= wu.cores * factor,
      `steady CPU ${bound} at ${n} pods: ${millicores(wa.cores)} vs ${millicores(wu.cores)} (${
        ratio(wa.cores, wu.cores)
      })`,
    );
  }
  const probes = agent.bursts.at(-1)?.steady.probes;
  if (probes) {
    check(
      probes.late === 0 && probes.unprobed === 0,
      `no probe more than one period late at ${
        r.mode.bursts.at(-1)
      } pods: ${probes.late} late, ${probes.unprobed} pods unprobed, latest ${
        ms(probes.maxMs)
      } (upstream: ${upstream.bursts.at(-1)?.steady.probes?.late ?? "n/a"} late, latest ${
        ms(upstream.bursts.at(-1)?.steady.probes?.maxMs ?? NaN)
      })`,
    );
  }
  return lines;
}

/** The date, machine and load, for the header of a recorded run. */
async function machineHeader(started: Date, loadBefore: string): Promise<string> {
  const cpuinfo = await Deno.readTextFile("/proc/cpuinfo").catch(() => "");
  const model = cpuinfo.match(/^model name\s*:\s*(.*)$/m)?.[1] ?? "?";
  const cores = cpuinfo.match(/^processor\s*:/gm)?.length ?? 0;
  const memTotal = Deno.systemMemoryInfo().total / 2 ** 30;
  return [
    `Date: ${started.toISOString()}; host ${Deno.hostname()}; ${model}, ${cores} CPUs, ${
      memTotal.toFixed(1)
    } GiB; kernel ${Deno.osRelease()}; deno ${Deno.version.deno}.`,
    `Load average at start ${loadBefore}, at end ${
      Deno.loadavg().map((v) => v.toFixed(2)).join(" ")
    }.`,
  ].join("\n");
}

/** Runs the suite; returns the report. */
export async function runSuite(
  mode: BenchMode,
  agents: readonly AgentKind[],
  opts: {
    /** @default console.error */
    log?: (line: string) => void;
    /** @default $KUBELET_TS_RUNTIME, else "containerd" */
    runtime?: RuntimeKind;
  } = {},
): Promise<SuiteResult> {
  const log = opts.log ?? ((l: string) => console.error(l));
  const buildStarted = performance.now();
  const binaries = await ensureControlPlaneBinaries({ log });
  if (agents.includes("upstream")) await ensureUpstreamKubelet({ log });
  const buildNote = `Programs ready (built, or taken from the build cache) in ${
    formatDuration(performance.now() - buildStarted)
  }.`;

  // Cgroups left by earlier runs' kubelets skew the comparison: upstream's cAdvisor tracks every
  // cgroup on the host (with 881 stale trees its idle CPU was 21 m instead of 6 m, its idle RSS
  // 141 instead of 86 MiB; ours reads only its pods').
  const stale = await removeStaleTestCgroups();
  if (stale > 0) log(`bench: removed ${stale} cgroup trees of earlier runs`);
  const dir = await Deno.makeTempDir({ prefix: "bench-suite-" });
  const stack = new AsyncDisposableStack();
  try {
    stack.defer(async () => {
      // The upstream kubelet makes its root dir a mount of its own, and pods' volumes are
      // mounts too: unmount what is left under the run's directory before removing it.
      await unmountUnder(dir);
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    });
    stack.defer(removeLegacyLogLinks);
    const nodeNames = agents.map((a) => `kts-bench-${a}`);
    const cp = await startControlPlane({ dir: join(dir, "cp"), nodeNames, binaries });
    stack.defer(() => cp.stop());
    const containerd: ContainerdHandle = await startContainerd({
      dir: join(dir, "containerd"),
      runtime: opts.runtime ?? runtimeFromEnv(),
    });
    stack.defer(() => containerd.stop());
    await importImages({ containerdSocket: containerd.socket, images: [BUSYBOX, PAUSE] });
    const conn = new CriConnection({ endpoint: containerd.endpoint });
    stack.defer(() => conn.close());
    const runtime = new RemoteRuntimeService({ connection: conn });
    const version = await runtime.version();

    return await dumpLogsOnFailure(cp, async () => {
      // Each phase from a dropped page cache: dying memory cgroups slow the kernel down.
      const pageCache: { phase: string; drop: PageCacheDrop }[] = [];
      const settle = async (phase: string) => {
        const drop = await dropPageCache();
        pageCache.push({ phase, drop });
        log(`bench: page cache dropped before ${phase}: ${dropText(drop)}`);
      };
      await settle("the CRI floor");
      log("bench: CRI floor");
      const floor = await measureFloor(
        runtime,
        conn,
        cp,
        join(dir, `${PREFIX}-floor`),
        mode,
        containerd.pid,
      );
      let release = agents.includes("agent-release")
        ? await buildBenchRelease(join(dir, "release"), log)
        : undefined;
      const results: AgentResult[] = [];
      const agentNames: string[] = [];
      for (const label of agents) {
        await clearRuntime(runtime);
        await settle(label);
        const agentName = `${PREFIX}-${label}`;
        agentNames.push(agentName);
        const opts: BenchAgentOptions = {
          cp,
          // Its basename names the agent's cgroupRoot: unique, so parallel runs never share one.
          dir: join(dir, agentName),
          nodeName: `kts-bench-${label}`,
          endpoint: containerd.endpoint,
          maxPods: Math.max(110, ...mode.bursts),
        };
        const start = label === "upstream"
          ? () => startUpstreamKubelet({ ...opts, log })
          : () =>
            startOurAgent({
              ...opts,
              label,
              configLines: label === "agent-relist" ? RELIST_CONFIG_LINES : [],
              releaseFile: label === "agent-release" ? release?.path : undefined,
            });
        results.push(await benchAgent(mode, cp, containerd.pid, start, log));
        if (label === "agent-release" && release) {
          release = await withExtracted(release, releaseExtractDir(opts.dir));
        }
      }
      await clearRuntime(runtime);
      // With every pod gone, the agents' cgroup roots (pods outlive a kubelet, so do their
      // cgroups) go too; what fails here the next run's sweep removes.
      for (const n of agentNames) await removeCgroupTree(`${TEST_CGROUP_PARENT}/${n}`);
      const density: DensityResult[] = [];
      if (agents.some(isOurs)) {
        for (const pods of mode.fakePods) {
          log(`bench: fake CRI, ${pods} pods`);
          density.push(await fakeCriDensity(pods));
        }
      }
      const client = await adminClient(cp, "bench-suite");
      const server = (await client.get<{ gitVersion?: string }>("/version")).gitVersion ?? "?";
      client.close();
      return {
        mode,
        floor,
        sandboxStarts: SANDBOX_STARTS,
        agents: results,
        density,
        release,
        buildNote,
        pageCache,
        server,
        runtime: `${version.runtimeName} ${version.runtimeVersion}`,
      };
    });
  } finally {
    await stack.disposeAsync();
  }
}

/** `deno task bench --help`. */
export const USAGE = `Usage: deno task bench [options]

Runs the same workload against this agent and the upstream kubelet (and the raw CRI floor) on
one containerd and one kube-apiserver, and prints the comparison. Needs root, containerd, runc
and Go. See tests/bench_suite.ts for what each figure means.

Options:
  --short            CI's mode: 5 sequential pods, a burst of 10, 10 s windows
                     (also KUBELET_TS_BENCH=short); the default is the full mode
  --agents LIST      comma-separated, run in that order: agent (ours as it ships, evented
                     PLEG), agent-relist (ours with EventedPLEG=false, relisting),
                     agent-release (ours from the release file of 'deno task release'),
                     upstream (default: agent,upstream); with agent and agent-relist, a PLEG
                     table compares them; with agent-release, a table of its sizes and memory
  --runtime NAME     containerd (Debian's 1.6, no container events) or containerd2 (2.x
                     built from its Go module); default $KUBELET_TS_RUNTIME, else containerd
  --sequential N     pods started one at a time
  --bursts A,B       burst sizes ("" for none)
  --window-s S       CPU and memory windows, seconds
  --fake-pods A,B    fake-CRI scale runs of our agent ("" for none)
  --probe-period S   the pods' HTTP readiness probe period, seconds (0 for none)
  --out FILE         also write the report as Markdown, with the date and the machine
  --note TEXT        a line under the header of --out's file
  --help             this text
`;

/** What the command line asks for; {@link parseBenchArgs}. */
export interface BenchArgs {
  readonly help: boolean;
  readonly mode: BenchMode;
  readonly agents: AgentKind[];
  readonly runtime: RuntimeKind;
  readonly out?: string;
  readonly note?: string;
}

/**
 * The bench's command line; throws an error naming the option and value for an unknown option,
 * a missing value or a bad count or agent.
 */
export function parseBenchArgs(
  args: string[],
  env: { short?: boolean; runtime?: string } = {},
): BenchArgs {
  // node:util's own errors ("Unknown option '--x'", "Option '--out <value>' argument missing")
  // name the option already.
  const { values } = parseArgs({
    args,
    options: {
      help: { type: "boolean", default: false },
      short: { type: "boolean", default: false },
      agents: { type: "string", default: "agent,upstream" },
      runtime: { type: "string" },
      out: { type: "string" },
      note: { type: "string" },
      sequential: { type: "string" },
      bursts: { type: "string" },
      "window-s": { type: "string" },
      "fake-pods": { type: "string" },
      "probe-period": { type: "string" },
    },
  });
  const short = values.short || env.short === true;
  const mode = withOverrides(short ? SHORT : FULL, values);
  const agents = values.agents.split(",").map((a) => a.trim());
  for (const a of agents) {
    if (!(AGENT_KINDS as readonly string[]).includes(a)) {
      throw new Error(
        `--agents must list some of ${
          AGENT_KINDS.map((k) => `'${k}'`).join(", ")
        }: current value is '${a}'`,
      );
    }
  }
  const runtime = values.runtime ?? env.runtime ?? "containerd";
  if (runtime !== "containerd" && runtime !== "containerd2") {
    throw new Error(
      `--runtime must be 'containerd' (Debian's 1.6) or 'containerd2' (2.x built from its Go ` +
        `module): current value is '${runtime}'`,
    );
  }
  return {
    help: values.help,
    mode,
    agents: agents as AgentKind[],
    runtime,
    out: values.out,
    note: values.note,
  };
}

if (import.meta.main) {
  let parsed: BenchArgs;
  try {
    parsed = parseBenchArgs(Deno.args, {
      short: Deno.env.get("KUBELET_TS_BENCH") === "short",
      runtime: Deno.env.get("KUBELET_TS_RUNTIME"),
    });
  } catch (e) {
    console.error(`bench: ${e instanceof Error ? e.message : e}\n\n${USAGE}`);
    Deno.exit(2);
  }
  if (parsed.help) {
    console.log(USAGE);
    Deno.exit(0);
  }
  const { mode, agents, runtime, out, note } = parsed;
  const why = await whyNotRunnable(["containerd", "ctr", "runc", "openssl", "go"]);
  if (why) {
    console.warn(`bench_suite: SKIPPED, nothing measured: ${why}`);
  } else {
    const started = new Date();
    const loadBefore = Deno.loadavg().map((v) => v.toFixed(2)).join(" ");
    const result = await runSuite(mode, agents, { runtime });
    const text = report(result);
    console.log(`\n${text}`);
    if (out) {
      await Deno.writeTextFile(
        out,
        [
          `# Benchmark suite run (${mode.name} mode): kubelet-ts vs the upstream kubelet ${KUBERNETES_VERSION}`,
          "",
          await machineHeader(started, loadBefore),
          ...(note ? ["", note] : []),
          "",
          `Command: \`deno task bench${Deno.args.length ? " " + Deno.args.join(" ") : ""}\`.`,
          "",
          text,
        ].join("\n"),
      );
      console.error(`bench: report written to ${out}`);
    }
  }
}
