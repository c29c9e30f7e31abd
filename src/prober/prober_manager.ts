/**
 * @module
 * ProberManager: one probe worker per pod × container × probe kind (liveness, readiness,
 * startup) for the pod's containers and sidecars, their results by container id, and the
 * prober's metrics. Workers are not timers: the manager keeps each worker's next run time and
 * one loop sleeps on the injected {@link Clock} until the earliest one (or an in-flight probe's
 * deadline), then runs what is due with bounded concurrency. It reads the runtime's view of
 * each pod through `getPodStatus`, runs probes through a {@link ProbeRunner} (src/prober/prober.ts),
 * and calls `onUpdate` when a result changes so the kubelet syncs the pod. Corresponds to
 * upstream `pkg/kubelet/prober/prober_manager.go`, `worker.go` and `results/results_manager.go`.
 */

import type { V1Container, V1Pod, V1Probe } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import { type Clock, WAIT_ENDED } from "../util/clock.ts";
import { kobj, type Logger } from "../klog/klog.ts";
import type { PodStatus } from "../container/pod_cache.ts";
import { MAX_PROBE_RETRIES, type ProbeKind, type Prober } from "./prober.ts";
import { type ProbeResult, ProberMetrics, ResultsManager, type WorkerLabels } from "./_results.ts";
import { containerShouldRestart } from "../pod/podutil.ts";
import { type RuntimeContainerState, shouldAllContainersRestart } from "../status/generate.ts";

export type { ProbeKind, ProbeResult };

/** What runs one probe: src/prober/prober.ts {@link Prober}, or a scripted fake in tests. */
export type ProbeRunner = Pick<Prober, "probe">;

/** Options of {@link ProberManager}. */
export interface ProberManagerOptions {
  /** Runs one probe; "Unknown" means the probe errored and its result is thrown away. */
  runner: ProbeRunner;
  /** The runtime's view of the pod (containerStatuses newest first, ips). */
  getPodStatus(uid: string): PodStatus | undefined;
  clock: Clock;
  logger: Logger;
  /** Called when a result changes (upstream's updates channels): the kubelet syncs the pod. */
  onUpdate(kind: ProbeKind, podUID: string, containerId: string, result: ProbeResult): void;
  /** Probes run at once. @default 32 */
  concurrency?: number;
  /** Source of the first run's jitter, in [0, 1). @default Math.random */
  random?: () => number;
  /**
   * Whether the pod's status (the status manager's) says the container has started: upstream's
   * worker gates on that `started`, which a kubelet restart carries over for a running container
   * (ChangeContainerStatusOnKubeletRestart off), so a started container's startup probe does not
   * run again and its other probes are not held back. @default startup probe results only
   */
  startedInStatus?: (podUID: string, containerName: string) => boolean;
}

/** A bad {@link ProberManagerOptions} field or a misuse of the manager. */
export class ProberManagerError extends Error {
  override name = "ProberManagerError";
}

/** Upstream probeType.String(). */
const KIND_NAMES: Record<ProbeKind, string> = {
  liveness: "Liveness",
  readiness: "Readiness",
  startup: "Startup",
};

/** How long before the kubelet's start a container counts as started by the previous one. */
export const KUBELET_RESTART_GRACE_MS = 10_000;

/** The result a worker reports for a new container before probing it (upstream initialValue). */
const INITIAL: Record<ProbeKind, ProbeResult> = {
  liveness: "Success",
  readiness: "Failure",
  startup: "Unknown",
};

/** API defaults of a probe's timing fields. */
const DEFAULTS = {
  periodSeconds: 10,
  timeoutSeconds: 1,
  successThreshold: 1,
  failureThreshold: 3,
  initialDelaySeconds: 0,
};

interface InFlight {
  readonly controller: AbortController;
  readonly startedAt: number;
  readonly deadline: number;
}

interface Worker {
  readonly key: string;
  readonly kind: ProbeKind;
  readonly pod: V1Pod;
  readonly podUID: string;
  readonly container: V1Container;
  readonly spec: V1Probe;
  readonly labels: WorkerLabels;
  /** The container this worker last saw; "" before the first. */
  containerId: string;
  lastResult: ProbeResult | undefined;
  resultRun: number;
  /** Set after a liveness/startup failure: no probing until a new container. */
  onHold: boolean;
  /** When the worker is next due, in clock milliseconds. */
  nextAt: number;
  queued: boolean;
  inFlight: InFlight | undefined;
  stopped: boolean;
}

/** The probes a container has, in upstream's AddPod order. */
function probesOf(c: V1Container): [ProbeKind, V1Probe][] {
  const out: [ProbeKind, V1Probe][] = [];
  if (c.startupProbe) out.push(["startup", c.startupProbe]);
  if (c.readinessProbe) out.push(["readiness", c.readinessProbe]);
  if (c.livenessProbe) out.push(["liveness", c.livenessProbe]);
  return out;
}

/** Regular containers and sidecars (init containers with restartPolicy Always). */
function probedContainers(pod: V1Pod): V1Container[] {
  const sidecars = (pod.spec?.initContainers ?? []).filter((c) => c.restartPolicy === "Always");
  return [...(pod.spec?.containers ?? []), ...sidecars];
}

function keyOf(podUID: string, containerName: string, kind: ProbeKind): string {
  return `${podUID}/${containerName}/${kind}`;
}

/**
 * The grace period to kill a container with after its liveness or startup probe failed: the
 * probe's own `terminationGracePeriodSeconds` when set (upstream killContainer), else undefined.
 */
export function probeTerminationGracePeriodSeconds(
  container: V1Container,
  kind: "liveness" | "startup",
): number | undefined {
  const probe = kind === "liveness" ? container.livenessProbe : container.startupProbe;
  return probe?.terminationGracePeriodSeconds ?? undefined;
}

/** Probe workers and their results; see the module documentation. */
export class ProberManager {
  readonly #runner: ProbeRunner;
  readonly #getPodStatus: (uid: string) => PodStatus | undefined;
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #concurrency: number;
  readonly #random: () => number;
  readonly #startedInStatus: (podUID: string, containerName: string) => boolean;
  readonly #start: number;
  readonly #workers = new Map<string, Worker>();
  readonly #results: Record<ProbeKind, ResultsManager>;
  readonly #metrics = new ProberMetrics();
  readonly #queue: Worker[] = [];
  #inFlight = 0;
  #running = false;
  #kicked = false;
  #wake: (() => void) | undefined;

  constructor(opts: ProberManagerOptions) {
    const concurrency = opts.concurrency ?? 32;
    if (!Number.isInteger(concurrency) || concurrency < 1) {
      throw new ProberManagerError(
        `Cannot create prober manager: 'concurrency' must be a whole number of at least 1: current value is '${concurrency}'`,
      );
    }
    this.#runner = opts.runner;
    this.#getPodStatus = opts.getPodStatus;
    this.#clock = opts.clock;
    this.#log = opts.logger;
    this.#concurrency = concurrency;
    this.#random = opts.random ?? Math.random;
    this.#startedInStatus = opts.startedInStatus ?? (() => false);
    this.#start = opts.clock.now();
    const results = (kind: ProbeKind) =>
      new ResultsManager((id, uid, r) => opts.onUpdate(kind, uid, id, r));
    this.#results = {
      liveness: results("liveness"),
      readiness: results("readiness"),
      startup: results("startup"),
    };
  }

  /** Runs due probes until the signal aborts; one sleep on the clock at a time. */
  async run(signal: AbortSignal): Promise<void> {
    if (this.#running) throw new ProberManagerError("ProberManager.run: already running");
    this.#running = true;
    try {
      while (!signal.aborted) {
        this.#tick();
        const wakeAt = this.#nextWake();
        // Only this iteration's promises are raced, and the abort listener goes after it: a
        // promise that outlives the loop (one for the stop) would keep a reaction of every
        // race until it settles, tens a second with 250 probed pods, never freed.
        const woken = new Promise<void>((resolve) => {
          this.#wake = resolve;
          if (this.#kicked) resolve();
        });
        const onAbort = () => this.#wake?.();
        signal.addEventListener("abort", onAbort, { once: true });
        this.#kicked = false;
        const sleep = new AbortController();
        const waits = [woken];
        if (wakeAt !== undefined) {
          const ms = Math.max(0, wakeAt - this.#clock.now());
          waits.push(this.#clock.sleep(ms, sleep.signal).catch(() => {}));
        }
        await Promise.race(waits);
        signal.removeEventListener("abort", onAbort);
        sleep.abort(WAIT_ENDED);
        this.#wake = undefined;
      }
    } finally {
      this.#running = false;
      for (const w of this.#workers.values()) this.#abandon(w);
    }
  }

  /** Starts workers for every probe of the pod's containers and sidecars (upstream AddPod). */
  addPod(pod: V1Pod): void {
    const uid = pod.metadata?.uid ?? "";
    const now = this.#clock.now();
    for (const c of probedContainers(pod)) {
      for (const [kind, spec] of probesOf(c)) {
        const key = keyOf(uid, c.name, kind);
        if (this.#workers.has(key)) {
          this.#log.v(4).info(`${KIND_NAMES[kind]} probe already exists for container`, {
            pod: kobj(pod),
            containerName: c.name,
          });
          continue;
        }
        const period = periodMs(spec);
        // After a kubelet restart every worker would start at once: spread the first runs.
        const jitter = period > now - this.#start ? Math.floor(this.#random() * period) : 0;
        this.#workers.set(key, {
          key,
          kind,
          pod,
          podUID: uid,
          container: c,
          spec,
          labels: {
            probeType: KIND_NAMES[kind],
            container: c.name,
            pod: pod.metadata?.name ?? "",
            namespace: pod.metadata?.namespace ?? "",
            podUID: uid,
          },
          containerId: "",
          lastResult: undefined,
          resultRun: 0,
          onHold: false,
          nextAt: now + jitter,
          queued: false,
          inFlight: undefined,
          stopped: false,
        });
      }
    }
    this.#kick();
  }

  /** Stops the liveness and startup workers of a terminating pod (upstream StopLivenessAndStartup). */
  stopLivenessAndStartup(pod: V1Pod): void {
    this.#stopPodWorkers(pod, ["liveness", "startup"]);
  }

  /** Stops the pod's workers and forgets their results (upstream RemovePod). */
  removePod(pod: V1Pod): void {
    this.#stopPodWorkers(pod, ["readiness", "liveness", "startup"]);
  }

  /** Stops the workers of every pod not in `desiredUIDs` (upstream CleanupPods). */
  cleanupPods(desiredUIDs: ReadonlySet<string>): void {
    for (const w of [...this.#workers.values()]) {
      if (!desiredUIDs.has(w.podUID)) this.#stop(w);
    }
  }

  /**
   * Whether a container started at `startedAtMs` (since the epoch; 0 unknown) ran before this
   * kubelet started, less a 10 s grace (upstream kubeletRestartGracePeriod).
   */
  startedBeforeKubelet(startedAtMs: number): boolean {
    return startedAtMs > 0 && startedAtMs < this.#start - KUBELET_RESTART_GRACE_MS;
  }

  /** Readiness by container id: true when the probe succeeded; undefined when none is cached. */
  ready(containerId: string): boolean | undefined {
    const r = this.#results.readiness.get(containerId);
    return r === undefined ? undefined : r === "Success";
  }

  /** Startup by container id: true when the probe succeeded; undefined when none is cached. */
  started(containerId: string): boolean | undefined {
    const r = this.#results.startup.get(containerId);
    return r === undefined ? undefined : r === "Success";
  }

  /** The cached liveness result of a container. */
  liveness(containerId: string): ProbeResult | undefined {
    return this.#results.liveness.get(containerId);
  }

  /** The cached startup result of a container. */
  startup(containerId: string): ProbeResult | undefined {
    return this.#results.startup.get(containerId);
  }

  /** Prometheus text exposition of prober_probe_total and prober_probe_duration_seconds. */
  metricsText(): string {
    return this.#metrics.text();
  }

  /** How many workers exist (upstream workerCount, for tests and debugging). */
  get workerCount(): number {
    return this.#workers.size;
  }

  #stopPodWorkers(pod: V1Pod, kinds: readonly ProbeKind[]): void {
    const uid = pod.metadata?.uid ?? "";
    for (const c of probedContainers(pod)) {
      for (const kind of kinds) {
        const w = this.#workers.get(keyOf(uid, c.name, kind));
        if (w) this.#stop(w);
      }
    }
  }

  #kick(): void {
    this.#kicked = true;
    this.#wake?.();
  }

  /** Expires overdue probes, then starts due workers up to the concurrency bound. */
  #tick(): void {
    const now = this.#clock.now();
    for (const w of this.#workers.values()) {
      if (w.inFlight && w.inFlight.deadline <= now) this.#timedOut(w, now);
    }
    for (const w of this.#workers.values()) {
      if (!w.stopped && !w.inFlight && !w.queued && w.nextAt <= now) {
        w.queued = true;
        this.#queue.push(w);
      }
    }
    while (this.#inFlight < this.#concurrency && this.#queue.length > 0) {
      const w = this.#queue.shift()!;
      w.queued = false;
      if (w.stopped) continue;
      this.#doProbe(w, now);
    }
  }

  /** The earliest time the loop has work: a worker due or a deadline; undefined for none. */
  #nextWake(): number | undefined {
    let at: number | undefined;
    for (const w of this.#workers.values()) {
      const t = w.inFlight ? w.inFlight.deadline : w.queued ? undefined : w.nextAt;
      if (t !== undefined && (at === undefined || t < at)) at = t;
    }
    return at;
  }

  /** Upstream doProbe up to the probe call; the call itself completes in {@link #finish}. */
  #doProbe(w: Worker, now: number): void {
    const keepGoing = this.#check(w, now);
    if (keepGoing === "probe") return;
    if (keepGoing) this.#reschedule(w, now);
    else this.#stop(w);
  }

  #check(w: Worker, now: number): boolean | "probe" {
    const log = { pod: kobj(w.pod), containerName: w.container.name };
    const status = this.#getPodStatus(w.podUID);
    if (!status) {
      // Either the pod has not been created yet, or it was already deleted.
      this.#log.v(3).info("No status for pod", { pod: kobj(w.pod) });
      return true;
    }
    const c = status.containerStatuses.find((s) => s.metadata?.name === w.container.name);
    if (!c || c.id === "") {
      this.#log.v(3).info("Probe target container not found", log);
      return true;
    }
    const results = this.#results[w.kind];
    if (w.containerId !== c.id) {
      if (w.containerId !== "") results.remove(w.containerId);
      w.containerId = c.id;
      // ChangeContainerStatusOnKubeletRestart off (upstream's default): a container that ran
      // before this kubelet started gets no initial Failure, so a kubelet restart does not make
      // a Ready container NotReady until it is probed.
      const ranBefore = c.state === api.ContainerState.CONTAINER_RUNNING &&
        this.startedBeforeKubelet(Number(c.startedAt / 1_000_000n));
      if (!ranBefore) results.set(w.containerId, INITIAL[w.kind], w.podUID);
      // A new container: resume probing.
      w.onHold = false;
    }
    if (w.onHold) return true;

    if (c.state === api.ContainerState.CONTAINER_CREATED) {
      // Created and not started yet: its start is under way in the sync that created it. This
      // prober reads the runtime's view, which shows that window; upstream's reads the API
      // status, which practically never does. Marking it failed there would have the next sync
      // kill the container as it starts ("failed liveness probe" with no probe run).
      this.#log.v(3).info("Probe target container not started yet", log);
      return true;
    }
    if (c.state !== api.ContainerState.CONTAINER_RUNNING) {
      this.#log.v(3).info("Non-running container probed", log);
      results.set(w.containerId, "Failure", w.podUID);
      // Stop when the container will not be restarted: its restart rules and policy (then the
      // pod's) say so, and the pod is not restarting all its containers in place.
      if (c.state !== api.ContainerState.CONTAINER_EXITED) return true;
      return containerShouldRestart(w.container, w.pod.spec, c.exitCode) ||
        shouldAllContainersRestart(w.pod, status.containerStatuses.map(runtimeState), undefined);
    }

    if (w.pod.metadata?.deletionTimestamp && w.kind !== "readiness") {
      this.#log.v(3).info("Pod deletion requested, setting probe result to success", {
        probeType: KIND_NAMES[w.kind],
        ...log,
      });
      if (w.kind === "startup") {
        this.#log.info("Pod deletion requested before container has fully started", log);
      }
      // A last result for a quiet shutdown.
      results.set(w.containerId, "Success", w.podUID);
      return false;
    }

    const runningSeconds = Math.trunc((now - Number(c.startedAt / 1_000_000n)) / 1000);
    if (runningSeconds < (w.spec.initialDelaySeconds ?? DEFAULTS.initialDelaySeconds)) {
      return true;
    }

    // The startup probe gates the others; it stops once the container has started.
    if (this.#containerStarted(w, c.id)) {
      if (w.kind === "startup") return true;
    } else if (w.kind !== "startup") {
      return true;
    }

    const timeoutMs = (w.spec.timeoutSeconds || DEFAULTS.timeoutSeconds) * 1000;
    const inFlight: InFlight = {
      controller: new AbortController(),
      startedAt: now,
      // The prober gives each of its tries the probe's timeout; past that the runner hangs.
      deadline: now + timeoutMs * MAX_PROBE_RETRIES,
    };
    w.inFlight = inFlight;
    this.#inFlight++;
    const containerId = w.containerId;
    let outcome: ReturnType<ProbeRunner["probe"]>;
    try {
      outcome = this.#runner.probe(
        inFlight.controller.signal,
        w.kind,
        w.pod,
        status.ips,
        w.container,
        containerId,
      );
    } catch (err) {
      // A runner that throws at once must not break the loop.
      outcome = Promise.reject(err);
    }
    outcome.then(
      (r) => this.#finish(w, inFlight, r.result),
      (err: unknown) => {
        this.#log.v(1).info("Probe errored", { ...log, probeType: KIND_NAMES[w.kind], err });
        this.#finish(w, inFlight, undefined);
      },
    );
    return "probe";
  }

  /** Upstream's container Started: the startup result is Success, or there is no startup probe. */
  #containerStarted(w: Worker, containerId: string): boolean {
    if (!this.#workers.has(keyOf(w.podUID, w.container.name, "startup"))) return true;
    return this.#results.startup.get(containerId) === "Success" ||
      this.#startedInStatus(w.podUID, w.container.name);
  }

  #finish(w: Worker, inFlight: InFlight, result: ProbeResult | undefined): void {
    if (w.inFlight !== inFlight) return; // timed out or stopped meanwhile
    w.inFlight = undefined;
    this.#inFlight--;
    const now = this.#clock.now();
    // "Unknown" is an errored probe, whose result upstream's worker throws away.
    if (result !== undefined && result !== "Unknown") {
      this.#record(w, result, (now - inFlight.startedAt) / 1000);
    }
    this.#reschedule(w, now);
    this.#kick();
  }

  #timedOut(w: Worker, now: number): void {
    const inFlight = w.inFlight!;
    w.inFlight = undefined;
    this.#inFlight--;
    inFlight.controller.abort(
      new ProberManagerError(`${KIND_NAMES[w.kind]} probe of ${w.container.name} timed out`),
    );
    this.#log.v(1).info("Probe timed out", {
      probeType: KIND_NAMES[w.kind],
      pod: kobj(w.pod),
      containerName: w.container.name,
    });
    this.#record(w, "Failure", (now - inFlight.startedAt) / 1000);
    this.#reschedule(w, now);
  }

  /** Metrics, thresholds and the cached result of one finished probe. */
  #record(w: Worker, result: "Success" | "Failure", seconds: number): void {
    if (result === "Success") {
      this.#metrics.inc(w.labels, "successful");
      this.#metrics.observe(w.labels, seconds);
    } else {
      this.#metrics.inc(w.labels, "failed");
    }
    if (w.lastResult === result) {
      w.resultRun++;
    } else {
      w.lastResult = result;
      w.resultRun = 1;
    }
    const threshold = result === "Failure"
      ? w.spec.failureThreshold ?? DEFAULTS.failureThreshold
      : w.spec.successThreshold ?? DEFAULTS.successThreshold;
    if (w.resultRun < threshold) return;
    this.#results[w.kind].set(w.containerId, result, w.podUID);
    if (w.kind !== "readiness" && result === "Failure") {
      // The container will be restarted: hold until a new container id appears.
      w.onHold = true;
      w.resultRun = 0;
    }
  }

  /** The next tick of the worker's period after `now`. */
  #reschedule(w: Worker, now: number): void {
    const period = periodMs(w.spec);
    do w.nextAt += period; while (w.nextAt <= now);
  }

  #stop(w: Worker): void {
    this.#abandon(w);
    w.stopped = true;
    if (w.containerId !== "") this.#results[w.kind].remove(w.containerId);
    this.#metrics.delete(w.labels);
    this.#workers.delete(w.key);
    this.#kick();
  }

  /** Aborts the worker's probe in flight, if any, and frees its slot. */
  #abandon(w: Worker): void {
    const inFlight = w.inFlight;
    if (!inFlight) return;
    w.inFlight = undefined;
    this.#inFlight--;
    inFlight.controller.abort(new ProberManagerError("probe worker stopped"));
  }
}

function periodMs(spec: V1Probe): number {
  return (spec.periodSeconds || DEFAULTS.periodSeconds) * 1000;
}

/** A CRI container status as {@link shouldAllContainersRestart} reads it. */
function runtimeState(c: api.ContainerStatus): RuntimeContainerState {
  const exited = c.state === api.ContainerState.CONTAINER_EXITED;
  return {
    name: c.metadata?.name ?? "",
    state: exited
      ? "exited"
      : c.state === api.ContainerState.CONTAINER_RUNNING
      ? "running"
      : c.state === api.ContainerState.CONTAINER_CREATED
      ? "created"
      : "unknown",
    exitCode: exited ? c.exitCode : 0,
  };
}
