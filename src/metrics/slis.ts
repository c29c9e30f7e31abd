/**
 * @module
 * The kubelet's `/metrics/slis`: the results of its health checks as component-base's SLI
 * metrics. `kubernetes_healthcheck{name,type}` is 1 when a check last passed and 0 when it last
 * failed, `kubernetes_healthchecks_total{name,status,type}` counts every run by outcome, and
 * `process_start_time_seconds` is read once, when the registry is made. The `/healthz` handlers
 * (the kubelet API's and the healthz port's) record each check they run, with `type` the path's
 * first segment (`healthz`), as apiserver's healthz does; a DELETE on the endpoint empties the
 * registry, start time included, as `HandlerWithReset` does.
 *
 * Upstream keeps one SLI registry per process (package `slis`'s Registry) that every healthz
 * handler records into; {@link sharedSLIMetrics} is that one, and tests make their own.
 * Corresponds to k8s.io/component-base/metrics/prometheus/slis (metrics.go, registry.go,
 * routes.go) and metrics/processstarttime.go.
 */

import { Counter, Gauge, MetricsRegistry } from "./_registry.ts";
import { type ProcessCollectorOptions, readProcessSample } from "./_process.ts";
import { PrometheusText } from "./prometheus.ts";

/** The outcome of one health check run (upstream slis.HealthcheckStatus). */
export type HealthcheckStatus = "success" | "error";

/** Options of {@link SLIMetrics}. */
export interface SLIMetricsOptions {
  /** Where the process start time is read. @default /proc/self */
  readonly process?: ProcessCollectorOptions;
  /** Seconds since the epoch, used when the start time cannot be read. @default Date.now */
  readonly now?: () => number;
}

/** The SLI registry and its two health check metrics. */
export class SLIMetrics {
  readonly registry = new MetricsRegistry();
  /** kubernetes_healthcheck{name,type}: 1 when the check last passed, else 0. */
  readonly healthcheck: Gauge;
  /** kubernetes_healthchecks_total{name,status,type}: runs by outcome. */
  readonly healthchecksTotal: Counter;
  /** process_start_time_seconds, a vector without labels so that a reset removes it. */
  readonly processStartTime: Gauge;
  readonly #started: Promise<void>;

  constructor(opts: SLIMetricsOptions = {}) {
    this.healthcheck = this.registry.register(
      new Gauge({
        name: "kubernetes_healthcheck",
        help: "This metric records the result of a single healthcheck.",
        stabilityLevel: "STABLE",
        labelNames: ["name", "type"],
      }),
    );
    this.healthchecksTotal = this.registry.register(
      new Counter({
        name: "kubernetes_healthchecks_total",
        help: "This metric records the results of all healthcheck.",
        stabilityLevel: "STABLE",
        labelNames: ["name", "type", "status"],
      }),
    );
    this.processStartTime = this.registry.register(
      new Gauge({
        name: "process_start_time_seconds",
        help: "Start time of the process since unix epoch in seconds.",
        labelNames: [],
      }),
    );
    const now = opts.now ?? Date.now;
    // Upstream falls back to the current second when procfs cannot be read.
    this.#started = readProcessSample(opts.process).then((s) =>
      this.processStartTime.set(s.startTimeSeconds ?? Math.floor(now() / 1000), {})
    );
  }

  /** Records one run of check `name` by the handler of `type` (upstream ObserveHealthcheck). */
  observeHealthcheck(name: string, type: string, status: HealthcheckStatus): void {
    this.healthcheck.set(status === "success" ? 1 : 0, { name, type });
    this.healthchecksTotal.inc({ name, type, status });
  }

  /** The exposition text. */
  async render(): Promise<string> {
    await this.#started;
    return await this.registry.render();
  }

  /** Forgets every series, the start time's too (upstream KubeRegistry.Reset). */
  async reset(): Promise<void> {
    await this.#started;
    this.healthcheck.reset();
    this.healthchecksTotal.reset();
    this.processStartTime.reset();
  }
}

let startTime: Promise<number> | undefined;

/**
 * `process_start_time_seconds` as every KubeRegistry of upstream's carries it (the one behind
 * /metrics/probes too): the process's start from procfs, read once, else the current second.
 */
export async function processStartTimeText(): Promise<string> {
  startTime ??= readProcessSample().then((s) =>
    s.startTimeSeconds ?? Math.floor(Date.now() / 1000)
  );
  const name = "process_start_time_seconds";
  return new PrometheusText()
    .family(name, "[ALPHA] Start time of the process since unix epoch in seconds.", "gauge")
    .sample(name, {}, await startTime)
    .render();
}

let shared: SLIMetrics | undefined;

/** The process's SLI registry, made on first use (upstream's package-level slis.Registry). */
export function sharedSLIMetrics(): SLIMetrics {
  shared ??= new SLIMetrics();
  return shared;
}
