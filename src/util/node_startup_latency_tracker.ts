/**
 * @module
 * How long the node took to come up, in the four steps upstream's kubelet reports on /metrics:
 * boot → kubelet start (`kubelet_node_startup_pre_kubelet_duration_seconds`), start → first
 * registration attempt (`..._pre_registration_...`), first attempt → the Node created
 * (`..._registration_...`), created → first status posted Ready (`..._post_registration_...`),
 * and boot → Ready in total (`kubelet_node_startup_duration_seconds`). Each step is recorded
 * once; a kubelet that finds its Node already registered records no registration and no
 * readiness, as upstream's. The boot time is the kernel's uptime subtracted from now, in whole
 * seconds as upstream's GetBootTime (sysinfo) gives it; without it the two boot-based figures
 * stay unset. Corresponds to upstream `pkg/kubelet/util/node_startup_latency_tracker.go` and
 * `boottime_util_linux.go`.
 */

import type { Gauge } from "../metrics/metrics.ts";
import type { Clock } from "./clock.ts";

/** The gauges the tracker sets (KubeletMetrics' nodeStartup* members). */
export interface NodeStartupMetrics {
  readonly nodeStartupPreKubelet: Gauge;
  readonly nodeStartupPreRegistration: Gauge;
  readonly nodeStartupRegistration: Gauge;
  readonly nodeStartupPostRegistration: Gauge;
  readonly nodeStartup: Gauge;
}

/** Options of {@link NodeStartupLatencyTracker}. */
export interface NodeStartupLatencyTrackerOptions {
  readonly clock: Clock;
  readonly metrics: NodeStartupMetrics;
  /** When the machine booted, ms since the epoch; undefined when unknown. */
  readonly bootTimeMs: number | undefined;
}

/** Records the node's start-up steps; see the module documentation. */
export class NodeStartupLatencyTracker {
  readonly #o: NodeStartupLatencyTrackerOptions;
  readonly #kubeletStart: number;
  #firstAttempt: number | undefined;
  #registered: number | undefined;
  #ready: number | undefined;

  /** The kubelet starts now (upstream: when NewMainKubelet builds the tracker). */
  constructor(opts: NodeStartupLatencyTrackerOptions) {
    this.#o = opts;
    this.#kubeletStart = opts.clock.now();
  }

  /** Upstream RecordAttemptRegisterNode: the first call counts. */
  recordAttemptRegisterNode(): void {
    this.#firstAttempt ??= this.#o.clock.now();
  }

  /** Upstream RecordRegisteredNewNode: the Node was created by this kubelet. */
  recordRegisteredNewNode(): void {
    if (this.#firstAttempt === undefined || this.#registered !== undefined) return;
    const now = this.#registered = this.#o.clock.now();
    const { metrics: m, bootTimeMs } = this.#o;
    if (bootTimeMs !== undefined) {
      m.nodeStartupPreKubelet.set((this.#kubeletStart - bootTimeMs) / 1000);
    }
    m.nodeStartupPreRegistration.set((this.#firstAttempt - this.#kubeletStart) / 1000);
    m.nodeStartupRegistration.set((now - this.#firstAttempt) / 1000);
  }

  /** Upstream RecordNodeReady: a status that says Ready was posted. */
  recordNodeReady(): void {
    if (this.#registered === undefined || this.#ready !== undefined) return;
    const now = this.#ready = this.#o.clock.now();
    const { metrics: m, bootTimeMs } = this.#o;
    m.nodeStartupPostRegistration.set((now - this.#registered) / 1000);
    if (bootTimeMs !== undefined) m.nodeStartup.set((now - bootTimeMs) / 1000);
  }
}

/**
 * The boot time from /proc/uptime's text: now minus the whole seconds of uptime, truncated to
 * the second (upstream: sysinfo's integral Uptime, `Truncate(time.Second)`); undefined when the
 * text is not an uptime.
 */
export function bootTimeFromUptime(uptimeText: string, nowMs: number): number | undefined {
  const m = /^(\d+)(?:\.\d+)? /.exec(uptimeText);
  if (!m) return undefined;
  const boot = nowMs - Number(m[1]) * 1000;
  return boot - (boot % 1000);
}

/** Reads /proc/uptime for {@link bootTimeFromUptime}; undefined when it cannot be read. */
export function readBootTime(nowMs: number, path = "/proc/uptime"): number | undefined {
  try {
    return bootTimeFromUptime(Deno.readTextFileSync(path), nowMs);
  } catch {
    return undefined;
  }
}
