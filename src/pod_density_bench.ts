/**
 * @module
 * Pod density on the fake CRI: 110 pods (upstream's default maxPods) given to the real pod
 * lifecycle at once, in standalone mode, with the real clock. Prints, per pod, the time from
 * the ADD to the container's Started event and to the status manager's status showing every
 * container running (p50, p99, max), the time until the last pod got there, the memory of this
 * process before and after (exact heap figures with `--v8-flags=--expose-gc`), and, with 110
 * running pods over 10 s, the CPU time per second of the sync loop, pod workers, PLEG and
 * updateRuntimeUp, with the CRI calls per second they make. Then `deno bench` times one PLEG
 * relist of the 110 running pods.
 *
 * The pieces are built here as `Kubelet.#startPodLifecycle` in `kubelet.ts` builds them
 * (PodConfig, SyncLoop, PodSyncer and its PodWorkers, KubeRuntimeManager, ImageManager, PLEG,
 * PodCache, StatusManager without a client), from upstream's default configuration; nothing
 * is factored out of the kubelet for it. The fake runtime (`fake_remote_runtime.ts`) runs in
 * a child process behind its unix socket, so the CPU and memory figures are the agent's alone
 * and its CRI calls cross a real socket. Corresponds to upstream's node e2e density test
 * (`test/e2e_node/density_test.go`), without an apiserver.
 */

import { join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import type { V1Pod, V1PodStatus } from "@kubernetes/client-node";
import { hostIsCgroup2UnifiedMode } from "./cgroup_mode.ts";
import { realClock } from "./clock.ts";
import { type EventRecorder, loggingRecorder } from "./dependencies.ts";
import { createLogger } from "./klog.ts";
import { RUNTIME_UP_PERIOD_MS } from "./kubelet.ts";
import { loadKubeletConfiguration } from "./kubelet_config.ts";
import { newKubeletFlags } from "./kubelet_flags.ts";
import { newPodLifecycle } from "./kubelet_pod_lifecycle.ts";
import { readMachineInfo } from "./machine_info.ts";
import { initialNode, nodeStatus } from "./node_status.ts";
import { PodCache } from "./pod_cache.ts";
import { FILE_SOURCE, PodConfig } from "./pod_config.ts";
import { GenericPLEG } from "./pleg.ts";
import { RuntimeState } from "./runtime_state.ts";
import { preInitRuntimeService } from "./runtime_service.ts";
import { StatusManager, type StatusManagerOptions } from "./status_manager.ts";
import { KUBELET_VERSION } from "./version.ts";

const PODS = 110;
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

  override setPodStatus(pod: V1Pod, status: V1PodStatus): void {
    super.setPodStatus(pod, status);
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
function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)] ?? NaN;
}

const ms = (v: number) => `${v.toFixed(0)} ms`;
const mib = (bytes: number) => `${(bytes / MIB).toFixed(1)} MiB`;

/** V8's gc(), exposed by `deno bench --v8-flags=--expose-gc`. */
const gc = (globalThis as { gc?: () => void }).gc;

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

function densityPod(i: number): V1Pod {
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
        startupProbe: probe(),
        livenessProbe: probe(),
        readinessProbe: probe(),
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
    import * as api from ${href("../proto/runtime/v1/api.ts")};
    const rpcs = [...Object.values(api.RuntimeServiceService), ...Object.values(api.ImageServiceService)]
      .map((m) => m.path.slice(m.path.lastIndexOf("/") + 1));
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
    cwd: fileURLToPath(new URL("../", import.meta.url)),
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

const dir = await Deno.makeTempDir({ prefix: "pod-density-bench-" });
const fake = await startFakeRuntimeChild(join(dir, "cri.sock"));
const root = new AbortController();
const running: Promise<void>[] = [];
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
/** A PLEG outside the lifecycle, for the relist bench. */
let benchPleg: GenericPLEG | undefined;

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
    containerRuntimeVersion: `${version.runtimeName}://${version.runtimeVersion}`,
    images: [],
    notReadyReasons: [],
    now: clock.now(),
  });

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
    newStatusManager: (o) => (timed = new TimedStatusManager(o, PODS)),
  });
  const { pleg, loop } = lifecycle;
  const statusManager = timed!;
  runtimeState.addHealthCheck("PLEG", () => {
    const h = pleg.healthy();
    return h.ok ? undefined : h.message;
  });
  running.push(...lifecycle.run(signal));

  // As after the agent's start: the runtime is up and the PLEG has relisted once.
  const readyBy = Date.now() + 10_000;
  while (runtimeState.runtimeErrors() !== undefined || runtimeState.networkErrors() !== undefined) {
    if (Date.now() > readyBy) {
      throw new DensityBenchError(
        `the lifecycle did not get ready: ${runtimeState.runtimeErrors()}`,
      );
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  const memoryIdle = memory();

  const pods = Array.from({ length: PODS }, (_, i) => densityPod(i));
  // Start-up complaints (the loop waiting for the first relist) are not the pods' doing.
  errors.length = 0;
  const added = performance.now();
  for (const update of podConfig.set(FILE_SOURCE, pods)) loop.push(update);
  const timeout = new Promise<never>((_, reject) => {
    const t = setTimeout(() => {
      reject(
        new DensityBenchError(
          `only ${statusManager.runningAt.size} of ${PODS} pods were running after ${
            START_TIMEOUT_MS / 1000
          } s; errors logged:\n${errors.slice(-20).join("\n")}`,
        ),
      );
    }, START_TIMEOUT_MS);
    statusManager.allRunning.then(() => clearTimeout(t));
  });
  await Promise.race([statusManager.allRunning, timeout]);
  const latencies = [...statusManager.runningAt.values()].map((t) => t - added).sort((a, b) =>
    a - b
  );
  const started = [...startedAt.values()].map((t) => t - added).sort((a, b) => a - b);
  const memoryRunning = memory();

  await new Promise((r) => setTimeout(r, SETTLE_MS));
  const calls0 = await fake.calls();
  const fakeCpu0 = await processCpuSeconds(fake.pid);
  const iterations0 = loop.iterations;
  const cpu0 = process.cpuUsage();
  const wall0 = performance.now();
  await new Promise((r) => setTimeout(r, STEADY_MS));
  const cpu = process.cpuUsage(cpu0);
  const seconds = (performance.now() - wall0) / 1000;
  const iterations = loop.iterations - iterations0;
  const fakeCpu1 = await processCpuSeconds(fake.pid);
  const calls1 = await fake.calls();
  const memorySteady = memory();

  // The same window with every probe worker stopped: the difference is the prober's cost.
  lifecycle.prober.cleanupPods(new Set());
  await new Promise((r) => setTimeout(r, SETTLE_MS));
  const noProbeCpu0 = process.cpuUsage();
  const noProbeWall0 = performance.now();
  await new Promise((r) => setTimeout(r, STEADY_MS));
  const noProbeCpu = process.cpuUsage(noProbeCpu0);
  const noProbeSeconds = (performance.now() - noProbeWall0) / 1000;
  const noProbeMsPerSecond = (noProbeCpu.user + noProbeCpu.system) / 1000 / noProbeSeconds;
  root.abort();
  await Promise.allSettled(running);

  const cpuMsPerSecond = (cpu.user + cpu.system) / 1000 / seconds;
  const callRates = Object.entries(calls1)
    .map(([rpc, n]) => [rpc, (n - (calls0[rpc] ?? 0)) / seconds] as const)
    .filter(([, rate]) => rate > 0)
    .sort((a, b) => b[1] - a[1])
    .map(([rpc, rate]) => `${rpc} ${rate.toFixed(1)}`);
  const fakeCpu = fakeCpu0 !== undefined && fakeCpu1 !== undefined
    ? `${((fakeCpu1 - fakeCpu0) * 1000 / seconds).toFixed(1)} ms/s`
    : "n/a";
  console.log(
    [
      "",
      `pod_density_bench: ${PODS} pods on the fake CRI, standalone (PodConfig → SyncLoop → ` +
      "PodWorkers → KubeRuntimeManager; PLEG → PodCache; StatusManager)",
      `  ADD → container started (the runtime manager's Started event), per pod: p50 ${
        ms(percentile(started, 50))
      }, p99 ${ms(percentile(started, 99))}, max ${ms(percentile(started, 100))}`,
      `  ADD → status shows the container running, per pod: p50 ${
        ms(percentile(latencies, 50))
      }, p99 ${ms(percentile(latencies, 99))}, max ${ms(percentile(latencies, 100))}`,
      `  ADD → all ${PODS} pods running: ${ms(percentile(latencies, 100))}`,
      `  memory of this process (${
        gc ? "after gc()" : "no gc() first: run with --v8-flags=--expose-gc for exact heap figures"
      }):`,
      `  memory before the lifecycle: ${memoryBefore}`,
      `  memory with 0 pods:          ${memoryIdle}`,
      `  memory with ${PODS} pods:        ${memoryRunning}`,
      `  memory after ${STEADY_MS / 1000} s steady:    ${memorySteady}`,
      `  steady state over ${seconds.toFixed(1)} s with ${PODS} running pods: CPU ${
        cpuMsPerSecond.toFixed(1)
      } ms/s (${(cpuMsPerSecond / 10).toFixed(1)} % of a core: user ${
        (cpu.user / 1000 / seconds).toFixed(1)
      }, system ${(cpu.system / 1000 / seconds).toFixed(1)}), ${
        (iterations / seconds).toFixed(1)
      } sync loop iterations/s`,
      `  CRI calls/s: ${callRates.join(", ") || "none"}; fake runtime process CPU ${fakeCpu}`,
      `  the prober (${PODS * 3} exec probes at 1 s): ${
        (cpuMsPerSecond - noProbeMsPerSecond).toFixed(1)
      } ms/s of CPU (${cpuMsPerSecond.toFixed(1)} ms/s with the probes, ${
        noProbeMsPerSecond.toFixed(1)
      } ms/s after stopping them)`,
      `  log lines written: ${logLines}, errors while the pods ran: ${errors.length}`,
      "",
    ].join("\n"),
  );
  if (errors.length > 0) console.warn(`errors logged:\n${errors.slice(-10).join("\n")}`);

  benchPleg = new GenericPLEG({ runtime, cache: new PodCache(), clock, logger });
  await benchPleg.relist();
} catch (e) {
  root.abort();
  await Promise.allSettled(running);
  services.close();
  await fake.stop();
  await Deno.remove(dir, { recursive: true }).catch(() => {});
  throw e;
}

Deno.bench(`PLEG relist of ${PODS} running pods, nothing changed`, async () => {
  await benchPleg!.relist();
});

// Deno.bench has no after-all hook; a last bench run exactly once stops the fake runtime.
Deno.bench({
  name: "(teardown: stop the fake runtime)",
  group: "teardown",
  n: 1,
  warmup: 0,
  async fn() {
    services.close();
    await fake.stop();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  },
});
