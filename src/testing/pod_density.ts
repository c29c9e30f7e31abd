/**
 * @module
 * Pod density on the fake CRI, for src/testing/pod_density_bench.ts and the benchmark suite
 * (tests/bench_suite.ts): N pods given to the real pod lifecycle at once, in standalone mode,
 * with the real clock, and what that lifecycle costs once they run: CPU per second in a steady
 * window, memory, one PLEG relist of all pods (and its CPU), and one sync of every pod (status
 * generated and set; its CPU), with the CRI calls per second it makes.
 *
 * The pieces are built here as `Kubelet.#startPodLifecycle` in `kubelet.ts` builds them
 * (PodConfig, SyncLoop, PodSyncer and its PodWorkers, KubeRuntimeManager, ImageManager, PLEG,
 * PodCache, StatusManager without a client), from upstream's default configuration; nothing
 * is factored out of the kubelet for it. The fake runtime (`fake_remote_runtime.ts`) runs in
 * a child process behind its unix socket, so the CPU and memory figures are the lifecycle's
 * alone and its CRI calls cross a real socket. Corresponds to upstream's node e2e density test
 * (`test/e2e_node/density_test.go`), without an apiserver.
 *
 * As a script, `deno run -A --v8-flags=--expose-gc src/testing/pod_density.ts --pods 1000 [--probes]
 * [--json]` prints the figures ({@link DensityFigures}) for that many pods.
 */

import { join } from "node:path";
import process from "node:process";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import type { V1Pod, V1PodStatus } from "@kubernetes/client-node";
import { hostIsCgroup2UnifiedMode } from "../cm/cgroup_mode.ts";
import { realClock } from "../util/clock.ts";
import { type EventRecorder, loggingRecorder } from "../client/record.ts";
import { createLogger } from "../klog/klog.ts";
import { RUNTIME_UP_PERIOD_MS } from "../kubelet.ts";
import { loadKubeletConfiguration } from "../app/kubelet_config.ts";
import { newKubeletFlags } from "../apis/flags.ts";
import { newPodLifecycle } from "../kubelet_pod_lifecycle.ts";
import { readMachineInfo } from "../stats/machine_info.ts";
import { initialNode, nodeStatus } from "../nodestatus/node_status.ts";
import { PodCache } from "../container/pod_cache.ts";
import { FILE_SOURCE, PodConfig } from "../config/pod_config.ts";
import { GenericPLEG } from "../pleg/generic.ts";
import { RuntimeState } from "../runtime_state.ts";
import { preInitRuntimeService } from "../cri/runtime_service.ts";
import { StatusManager, type StatusManagerOptions } from "../status/status_manager.ts";
import { KUBELET_VERSION } from "../util/version.ts";
import { containerRuntimeVersion } from "../kuberuntime/runtime_version.ts";

const IMAGE = "docker.io/library/busybox:1.36";
const NODE = "density-node";
/** How long every pod may take to run before the bench fails. */
const START_TIMEOUT_MS = 60_000;
/** Quiet time between the last pod running and the steady-state window. */
const SETTLE_MS = 2_000;
const STEADY_MS = 10_000;
/** Linux USER_HZ, the unit of utime and stime in /proc/<pid>/stat. */
const CLOCK_TICKS_PER_SECOND = 100;
const MIB = 2 ** 20;

/** The bench could not get its pods running. */
class DensityBenchError extends Error {
  override name = "DensityBenchError";
}

/** The status manager, noting when each pod's status first shows all its containers running. */
class TimedStatusManager extends StatusManager {
  /** performance.now() by pod UID. */
  readonly runningAt = new Map<string, number>();
  /** setPodStatus calls so far: one per pod sync. */
  statusSets = 0;
  #onSet: (() => void) | undefined;
  readonly #all = Promise.withResolvers<void>();
  readonly #want: number;

  constructor(opts: StatusManagerOptions, want: number) {
    super(opts);
    this.#want = want;
  }

  /** Resolves once `want` pods have been seen running. */
  get allRunning(): Promise<void> {
    return this.#all.promise;
  }

  /** Resolves once setPodStatus has been called `n` more times. */
  async nextSets(n: number, timeoutMs: number): Promise<void> {
    const want = this.statusSets + n;
    const done = Promise.withResolvers<void>();
    this.#onSet = () => {
      if (this.statusSets >= want) done.resolve();
    };
    const t = setTimeout(
      () => done.reject(new DensityBenchError(`pod syncs did not finish in ${timeoutMs} ms`)),
      timeoutMs,
    );
    try {
      await done.promise;
    } finally {
      clearTimeout(t);
      this.#onSet = undefined;
    }
  }

  override setPodStatus(pod: V1Pod, status: V1PodStatus): void {
    super.setPodStatus(pod, status);
    this.statusSets++;
    this.#onSet?.();
    const uid = pod.metadata?.uid ?? "";
    if (this.runningAt.has(uid)) return;
    const containers = pod.spec?.containers.length ?? 0;
    const running = (status.containerStatuses ?? []).filter((c) => c.state?.running).length;
    if (containers === 0 || running < containers) return;
    this.runningAt.set(uid, performance.now());
    if (this.runningAt.size === this.#want) this.#all.resolve();
  }
}

/** Nearest-rank percentile of ascending `sorted`. */
export function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)] ?? NaN;
}

const mib = (bytes: number) => `${(bytes / MIB).toFixed(1)} MiB`;

/** V8's gc(), exposed by `deno bench --v8-flags=--expose-gc`. */
export const gc = (globalThis as { gc?: () => void }).gc;

function memory(): string {
  // Without a collection first, heap used counts garbage too.
  gc?.();
  const m = Deno.memoryUsage();
  return `rss ${mib(m.rss)}, heap used ${mib(m.heapUsed)} of ${mib(m.heapTotal)}`;
}

/** CPU seconds (user + system) of process `pid` so far; undefined without /proc. */
async function processCpuSeconds(pid: number): Promise<number | undefined> {
  try {
    const stat = await Deno.readTextFile(`/proc/${pid}/stat`);
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS_PER_SECOND;
  } catch {
    return undefined;
  }
}

/** A busybox pod with one long-running container, as a static pod file would give it. */
function probe() {
  return {
    exec: { command: ["true"] },
    periodSeconds: 1,
    timeoutSeconds: 1,
    successThreshold: 1,
    failureThreshold: 3,
  };
}

function densityPod(i: number, probes: boolean): V1Pod {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name: `density-${i}`,
      namespace: "default",
      uid: crypto.randomUUID(),
    },
    // With the scheme defaults the apiserver (or a static pod file's decoding) gives a pod.
    spec: {
      nodeName: NODE,
      restartPolicy: "Always",
      dnsPolicy: "ClusterFirst",
      securityContext: {},
      schedulerName: "default-scheduler",
      enableServiceLinks: true,
      terminationGracePeriodSeconds: 1,
      containers: [{
        name: "main",
        image: IMAGE,
        imagePullPolicy: "IfNotPresent",
        command: ["sleep", "3600"],
        terminationMessagePath: "/dev/termination-log",
        terminationMessagePolicy: "File",
        // Three exec probes at 1 s (the fake runtime's ExecSync answers at once, exit 0).
        ...(probes
          ? { startupProbe: probe(), livenessProbe: probe(), readinessProbe: probe() }
          : {}),
      }],
    },
  };
}

/** The fake runtime in a child process; a line on its stdin asks for its CRI call counts. */
interface FakeRuntimeChild {
  readonly endpoint: string;
  readonly pid: number;
  /** CRI calls served so far, by RPC name. */
  calls(): Promise<Record<string, number>>;
  /** Closes its stdin and waits for it to exit; idempotent. */
  stop(): Promise<void>;
}

async function startFakeRuntimeChild(socket: string): Promise<FakeRuntimeChild> {
  const href = (p: string) => JSON.stringify(new URL(p, import.meta.url).href);
  const script = `
    import { startFakeRuntime } from ${href("./fake_remote_runtime.ts")};
    import * as api from ${href("../../proto/runtime/v1/api.ts")};
    const rpcs = [
      ...Object.values(api.RuntimeServiceDefinition.methods),
      ...Object.values(api.ImageServiceDefinition.methods),
    ].map((m) => m.name);
    const runtime = await startFakeRuntime({
      socket: ${JSON.stringify(socket)},
      preloadImages: ${JSON.stringify([IMAGE])},
    });
    console.log("ready");
    for await (const chunk of Deno.stdin.readable.pipeThrough(new TextDecoderStream())) {
      for (const _ of chunk.split("\\n").slice(1)) {
        console.log(JSON.stringify(Object.fromEntries(rpcs.map((r) => [r, runtime.callCount(r)]))));
      }
    }
    await runtime.stop();
  `;
  const child = new Deno.Command(Deno.execPath(), {
    args: ["eval", "--quiet", script],
    cwd: fileURLToPath(new URL("../../", import.meta.url)),
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = "";
  const readLine = async (): Promise<string> => {
    for (;;) {
      const nl = buffered.indexOf("\n");
      if (nl >= 0) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        return line;
      }
      const { value, done } = await lines.read();
      if (done) throw new DensityBenchError("the fake runtime process exited");
      buffered += value;
    }
  };
  const stdin = child.stdin.getWriter();
  let stopping: Promise<void> | undefined;
  const stop = () =>
    stopping ??= (async () => {
      await stdin.close().catch(() => {});
      const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await child.status;
      clearTimeout(timer);
      await lines.cancel().catch(() => {});
    })();
  try {
    const ready = await readLine();
    if (ready !== "ready") throw new DensityBenchError(`the fake runtime said '${ready}'`);
  } catch (e) {
    await stop();
    throw e;
  }
  return {
    endpoint: `unix://${socket}`,
    pid: child.pid,
    async calls() {
      await stdin.write(new TextEncoder().encode("\n"));
      return JSON.parse(await readLine()) as Record<string, number>;
    },
    stop,
  };
}

/** Options of {@link startPodDensity}. */
export interface PodDensityOptions {
  /** How many pods. */
  readonly pods: number;
  /** Whether each pod's container has startup, liveness and readiness exec probes at 1 s. */
  readonly probes: boolean;
}

/** How the pods started, and the memory of this process along the way. */
export interface DensityStart {
  /** ADD → the runtime manager's Started event, ms per pod, ascending. */
  readonly started: number[];
  /** ADD → the status shows the container running, ms per pod, ascending. */
  readonly running: number[];
  readonly memoryBefore: string;
  readonly memoryIdle: string;
  readonly memoryRunning: string;
}

/** What one steady window saw. */
export interface SteadyFigures {
  readonly seconds: number;
  /** CPU of this process, ms per second, and its user and system parts. */
  readonly cpuMsPerSecond: number;
  readonly userMsPerSecond: number;
  readonly systemMsPerSecond: number;
  readonly iterationsPerSecond: number;
  /** CRI calls per second by RPC, only those made. */
  readonly callsPerSecond: Record<string, number>;
  /** CPU of the fake runtime's process, ms per second; NaN without /proc. */
  readonly fakeCpuMsPerSecond: number;
}

/** A running density setup: the pods run until {@link PodDensity.close}. */
export interface PodDensity {
  readonly pods: number;
  readonly start: DensityStart;
  /** Error lines the lifecycle logged since the pods were added. */
  readonly errors: readonly string[];
  /** Log lines written so far. */
  logLines(): number;
  /** Watches this process for `ms`. */
  steady(ms: number): Promise<SteadyFigures>;
  /** Stops every probe worker. */
  stopProbes(): void;
  /** One relist of all pods by a PLEG outside the lifecycle (its own cache). */
  relist(): Promise<void>;
  /** Asks every pod's worker to sync once; resolves when each has set its status. */
  syncAll(): Promise<void>;
  /** "rss …, heap used … of …", after gc() when exposed. */
  memory(): string;
  /** Memory figures in MiB, after gc() when exposed. */
  memoryMiB(): { rss: number; heapUsed: number };
  /** Stops the lifecycle and the fake runtime; idempotent. */
  close(): Promise<void>;
}

/** Builds the lifecycle on a fake runtime, adds `pods` pods and waits until all run. */
export async function startPodDensity(opts: PodDensityOptions): Promise<PodDensity> {
  const dir = await Deno.makeTempDir({ prefix: "pod-density-" });
  const fake = await startFakeRuntimeChild(join(dir, "cri.sock"));
  const root = new AbortController();
  const running: Promise<unknown>[] = [];
  const errors: string[] = [];
  let logLines = 0;
  const logger = createLogger({
    write(line) {
      logLines++;
      if (line.startsWith("E")) errors.push(line);
    },
  });
  const services = preInitRuntimeService({
    containerRuntimeEndpoint: fake.endpoint,
    timeoutMs: 10_000,
  });
  const runtime = services.runtimeService;
  /** performance.now() of each pod's "Started" event, by pod UID. */
  const startedAt = new Map<string, number>();
  let closing: Promise<void> | undefined;
  const close = () =>
    closing ??= (async () => {
      root.abort();
      await Promise.allSettled(running);
      services.close();
      await fake.stop();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    })();

  try {
    const memoryBefore = memory();
    const { config } = await loadKubeletConfiguration({
      configFile: "",
      dropinDir: "",
      flags: [],
      cgroupV1: false,
    });
    config.podLogsDir = join(dir, "pod-logs");
    // As on a kubeadm node: pods get the cluster's DNS server and search domains.
    config.clusterDNS = ["10.96.0.10"];
    config.clusterDomain = "cluster.local";
    config.containerRuntimeEndpoint = fake.endpoint;
    const flags = newKubeletFlags();
    flags.rootDirectory = join(dir, "root");
    const clock = realClock;
    // The standalone recorder, noting when the runtime manager reports each pod's container started.
    const logged = loggingRecorder(logger);
    const recorder: EventRecorder = {
      event(ref, type, reason, message) {
        if (reason === "Started" && ref.uid && !startedAt.has(ref.uid)) {
          startedAt.set(ref.uid, performance.now());
        }
        logged.event(ref, type, reason, message);
      },
    };
    const signal = root.signal;
    const version = await runtime.version(undefined, signal);
    const machine = await readMachineInfo();

    // updateRuntimeUp, as Kubelet.#updateRuntimeUpLoop runs it.
    const runtimeState = new RuntimeState(clock);
    running.push((async () => {
      while (!signal.aborted) {
        try {
          const res = await runtime.status(false, signal);
          runtimeState.recordStatus(res.status?.conditions ?? []);
        } catch (e) {
          if (!signal.aborted) logger.error(e, "Container runtime sanity check failed");
        }
        await clock.sleep(RUNTIME_UP_PERIOD_MS, signal).catch(() => {});
      }
    })());

    // The node admission sees, as Kubelet.#initialNode builds it in standalone mode.
    const node = initialNode({
      nodeName: NODE,
      hostname: NODE,
      nodeLabels: flags.nodeLabels,
      registerWithTaints: [],
      registerSchedulable: flags.registerSchedulable,
      enableControllerAttachDetach: config.enableControllerAttachDetach,
    });
    node.status = nodeStatus({
      config,
      machine,
      hostname: NODE,
      nodeIPs: [],
      kubeletVersion: KUBELET_VERSION,
      containerRuntimeVersion: containerRuntimeVersion(version),
      images: [],
      notReadyReasons: [],
      now: clock.now(),
    });
    // Admission counts pods against the node's capacity; a scale test goes past maxPods.
    node.status.allocatable = { ...node.status.allocatable, pods: String(opts.pods) };
    node.status.capacity = { ...node.status.capacity, pods: String(opts.pods) };

    // The pod lifecycle, as Kubelet.#startPodLifecycle builds it.
    const podConfig = new PodConfig({ now: () => clock.now(), logger });
    let timed: TimedStatusManager | undefined;
    const lifecycle = newPodLifecycle({
      config,
      runtime,
      imageService: services.imageService,
      clock,
      logger,
      recorder,
      nodeName: NODE,
      hostname: NODE,
      nodeIPs: [],
      rootDirectory: flags.rootDirectory,
      memoryCapacityBytes: machine.memoryCapacity,
      cgroupV2: await hostIsCgroup2UnifiedMode(),
      getNode: () => node,
      runtimeErrors: () => runtimeState.runtimeErrors(),
      networkErrors: () => runtimeState.networkErrors(),
      sourcesReady: () => podConfig.seenAllSources([FILE_SOURCE]),
      // The agent links into /var/log/containers; a bench keeps to its own directory.
      legacyContainerLogsDirectory: join(dir, "containers"),
      signal,
      newStatusManager: (o) => (timed = new TimedStatusManager(o, opts.pods)),
    });
    const { pleg, loop } = lifecycle;
    const statusManager = timed!;
    runtimeState.addHealthCheck("PLEG", () => {
      const h = pleg.healthy();
      return h.ok ? undefined : h.message;
    });
    running.push(...lifecycle.run(signal).map((p) => p.done));

    // As after the agent's start: the runtime is up and the PLEG has relisted once.
    const readyBy = Date.now() + 10_000;
    while (
      runtimeState.runtimeErrors() !== undefined || runtimeState.networkErrors() !== undefined
    ) {
      if (Date.now() > readyBy) {
        throw new DensityBenchError(
          `the lifecycle did not get ready: ${runtimeState.runtimeErrors()}`,
        );
      }
      await new Promise((r) => setTimeout(r, 10));
    }
    const memoryIdle = memory();

    const pods = Array.from({ length: opts.pods }, (_, i) => densityPod(i, opts.probes));
    // Start-up complaints (the loop waiting for the first relist) are not the pods' doing.
    errors.length = 0;
    const added = performance.now();
    for (const update of podConfig.set(FILE_SOURCE, pods)) loop.push(update);
    const startTimeoutMs = START_TIMEOUT_MS * Math.max(1, opts.pods / 110);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        reject(
          new DensityBenchError(
            `only ${statusManager.runningAt.size} of ${opts.pods} pods were running after ${
              startTimeoutMs / 1000
            } s; errors logged:\n${errors.slice(-20).join("\n")}`,
          ),
        );
      }, startTimeoutMs);
    });
    try {
      await Promise.race([statusManager.allRunning, timeout]);
    } finally {
      clearTimeout(timer);
    }
    const start: DensityStart = {
      running: [...statusManager.runningAt.values()].map((t) => t - added).sort((a, b) => a - b),
      started: [...startedAt.values()].map((t) => t - added).sort((a, b) => a - b),
      memoryBefore,
      memoryIdle,
      memoryRunning: memory(),
    };
    const benchPleg = new GenericPLEG({ runtime, cache: new PodCache(), clock, logger });
    await benchPleg.relist();

    return {
      pods: opts.pods,
      start,
      errors,
      logLines: () => logLines,
      async steady(ms) {
        const calls0 = await fake.calls();
        const fakeCpu0 = await processCpuSeconds(fake.pid);
        const iterations0 = loop.iterations;
        const cpu0 = process.cpuUsage();
        const wall0 = performance.now();
        await new Promise((r) => setTimeout(r, ms));
        const cpu = process.cpuUsage(cpu0);
        const seconds = (performance.now() - wall0) / 1000;
        const iterations = loop.iterations - iterations0;
        const fakeCpu1 = await processCpuSeconds(fake.pid);
        const calls1 = await fake.calls();
        const callsPerSecond: Record<string, number> = {};
        for (const [rpc, n] of Object.entries(calls1)) {
          const rate = (n - (calls0[rpc] ?? 0)) / seconds;
          if (rate > 0) callsPerSecond[rpc] = rate;
        }
        return {
          seconds,
          cpuMsPerSecond: (cpu.user + cpu.system) / 1000 / seconds,
          userMsPerSecond: cpu.user / 1000 / seconds,
          systemMsPerSecond: cpu.system / 1000 / seconds,
          iterationsPerSecond: iterations / seconds,
          callsPerSecond,
          fakeCpuMsPerSecond: fakeCpu0 !== undefined && fakeCpu1 !== undefined
            ? (fakeCpu1 - fakeCpu0) * 1000 / seconds
            : NaN,
        };
      },
      stopProbes: () => lifecycle.prober.cleanupPods(new Set()),
      relist: () => benchPleg.relist(),
      async syncAll() {
        const all = lifecycle.podManager.getPods();
        const done = statusManager.nextSets(all.length, startTimeoutMs);
        lifecycle.syncer.handlePodSyncs(all);
        await done;
      },
      memory,
      memoryMiB() {
        gc?.();
        const m = Deno.memoryUsage();
        return { rss: m.rss / MIB, heapUsed: m.heapUsed / MIB };
      },
      close,
    };
  } catch (e) {
    await close();
    throw e;
  }
}

/** What the script prints with `--json`. */
export interface DensityFigures {
  pods: number;
  allRunningMs: number;
  runningP50Ms: number;
  runningP99Ms: number;
  steadyCpuMsPerSecond: number;
  rssMiB: number;
  heapUsedMiB: number;
  /** Mean wall time of one relist of all pods, and its CPU in this process. */
  relistMs: number;
  relistCpuMs: number;
  /** One sync of every pod: CPU in this process, and wall time. */
  syncAllCpuMs: number;
  syncAllMs: number;
  criCallsPerSecond: Record<string, number>;
  errors: number;
}

/** How many relists the script times. */
const RELISTS = 10;

/** Runs the density measurement for the script; see the module documentation. */
export async function measurePodDensity(
  pods: number,
  probes: boolean,
  steadyMs = STEADY_MS,
): Promise<DensityFigures> {
  const d = await startPodDensity({ pods, probes });
  try {
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    const steady = await d.steady(steadyMs);
    const mem = d.memoryMiB();
    let cpu0 = process.cpuUsage();
    let t0 = performance.now();
    for (let i = 0; i < RELISTS; i++) await d.relist();
    let cpu = process.cpuUsage(cpu0);
    const relistMs = (performance.now() - t0) / RELISTS;
    const relistCpuMs = (cpu.user + cpu.system) / 1000 / RELISTS;
    cpu0 = process.cpuUsage();
    t0 = performance.now();
    await d.syncAll();
    cpu = process.cpuUsage(cpu0);
    return {
      pods,
      allRunningMs: percentile(d.start.running, 100),
      runningP50Ms: percentile(d.start.running, 50),
      runningP99Ms: percentile(d.start.running, 99),
      steadyCpuMsPerSecond: steady.cpuMsPerSecond,
      rssMiB: mem.rss,
      heapUsedMiB: mem.heapUsed,
      relistMs,
      relistCpuMs,
      syncAllCpuMs: (cpu.user + cpu.system) / 1000,
      syncAllMs: performance.now() - t0,
      criCallsPerSecond: steady.callsPerSecond,
      errors: d.errors.length,
    };
  } finally {
    await d.close();
  }
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      pods: { type: "string", default: "110" },
      probes: { type: "boolean", default: false },
      json: { type: "boolean", default: false },
    },
  });
  const pods = Number(values.pods);
  if (!Number.isInteger(pods) || pods < 1) {
    throw new DensityBenchError(
      `--pods must be a positive integer: current value is '${values.pods}'`,
    );
  }
  const figures = await measurePodDensity(pods, values.probes);
  console.log(values.json ? JSON.stringify(figures) : figures);
}
