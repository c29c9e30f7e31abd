/**
 * @module
 * Runs one liveness, readiness or startup probe of a container: `exec` through the CRI's
 * ExecSync, `httpGet`, `tcpSocket` or `grpc` against the pod, each bounded by the probe's
 * `timeoutSeconds`; retries a probe that errored (up to 3 tries), records upstream's Unhealthy
 * and ProbeWarning events on the container and logs the outcome. The periodic workers that call
 * it are a separate piece. Talks to the CRI runtime service and the event recorder.
 * Corresponds to upstream `pkg/kubelet/prober/prober.go` with `pkg/probe/exec`.
 */

import type { V1Container, V1Pod, V1Probe } from "@kubernetes/client-node";
import type { Clock } from "../util/clock.ts";
import type { EventRecorder } from "../client/record.ts";
import { kobj, type Logger } from "../klog/klog.ts";
import { runInContainer, userAgentFor } from "../lifecycle/handlers.ts";
import type { RuntimeService } from "../cri/remote_runtime.ts";
import { expand, mappingFuncFor } from "../kuberuntime/expansion.ts";
import {
  doHttpProbe,
  MAX_RESP_BODY_LENGTH,
  newRequestForHttpGetAction,
  resolveContainerPort,
} from "./probe_http.ts";
import { doTcpProbe } from "./_probe_tcp.ts";
import { doGrpcProbe } from "./_probe_grpc.ts";
import { containerRef } from "../container/ref.ts";

/** Which probe of the container to run. */
export type ProbeKind = "liveness" | "readiness" | "startup";

/**
 * A probe's result: Success or Failure as upstream's results.Result; Unknown when the probe
 * errored (upstream returns an error, and its worker throws that result away), with the error
 * text as `output`.
 */
export type ProbeOutcome = { result: "Success" | "Failure" | "Unknown"; output: string };

/** Options of {@link Prober}. */
export interface ProberOptions {
  readonly runtime: Pick<RuntimeService, "execSync">;
  readonly recorder: EventRecorder;
  readonly logger: Logger;
  readonly clock: Clock;
  /** The HTTP probe's User-Agent. @default "kube-probe/1.36" */
  readonly userAgent?: string;
}

/** upstream maxProbeRetries: tries of a probe that errored. */
export const MAX_PROBE_RETRIES = 3;

/** The API default of `timeoutSeconds`. */
const DEFAULT_TIMEOUT_SECONDS = 1;

const KIND_NAMES: Record<ProbeKind, string> = {
  liveness: "Liveness",
  readiness: "Readiness",
  startup: "Startup",
};

/** A probe that could not run; its message is upstream's error text. */
export class ProbeError extends Error {
  override name = "ProbeError";
}

type RawResult = "Success" | "Warning" | "Failure" | "Unknown";
interface RawOutcome {
  readonly result: RawResult;
  readonly output: string;
  readonly error?: Error;
}

/** Runs container probes; see the module documentation. */
export class Prober {
  readonly #runtime: Pick<RuntimeService, "execSync">;
  readonly #recorder: EventRecorder;
  readonly #log: Logger;
  readonly #userAgent: string;

  constructor(opts: ProberOptions) {
    this.#runtime = opts.runtime;
    this.#recorder = opts.recorder;
    this.#log = opts.logger;
    this.#userAgent = opts.userAgent ?? userAgentFor("probe");
  }

  /**
   * upstream prober.probe: runs the container's probe of that kind (Success when it has none),
   * records Unhealthy / ProbeWarning events and maps the outcome. Throws only when `signal`
   * aborts.
   */
  async probe(
    signal: AbortSignal,
    kind: ProbeKind,
    pod: V1Pod,
    podIPs: readonly string[],
    container: V1Container,
    containerId: string,
  ): Promise<ProbeOutcome> {
    const spec = kind === "liveness"
      ? container.livenessProbe
      : kind === "readiness"
      ? container.readinessProbe
      : container.startupProbe;
    const kv = {
      probeType: KIND_NAMES[kind],
      pod: kobj(pod),
      podUID: pod.metadata?.uid ?? "",
      containerName: container.name,
    };
    if (!spec) {
      this.#log.info("Probe is nil", kv);
      return { result: "Success", output: "" };
    }
    let raw: RawOutcome = { result: "Unknown", output: "" };
    for (let i = 0; i < MAX_PROBE_RETRIES; i++) {
      raw = await this.#runProbe(signal, spec, podIPs, container, containerId);
      if (!raw.error) break;
    }
    const event = (reason: string, message: string) =>
      this.#recorder.event(containerRef(pod, container.name), "Warning", reason, message);
    const name = KIND_NAMES[kind];
    if (raw.error) {
      this.#log.v(1).info("Probe errored", {
        ...kv,
        err: raw.error.message,
        probeResult: raw.result.toLowerCase(),
      });
      event(
        "Unhealthy",
        `${name} probe errored and resulted in ${raw.result.toLowerCase()} state: ${raw.error.message}`,
      );
      return { result: "Unknown", output: raw.error.message };
    }
    switch (raw.result) {
      case "Success":
        this.#log.v(3).info("Probe succeeded", kv);
        return { result: "Success", output: raw.output };
      case "Warning":
        event("ProbeWarning", `${name} probe warning: ${raw.output}`);
        this.#log.v(3).info("Probe succeeded with a warning", { ...kv, output: raw.output });
        return { result: "Success", output: raw.output };
      case "Failure":
        this.#log.v(1).info("Probe failed", { ...kv, probeResult: "failure", output: raw.output });
        event("Unhealthy", `${name} probe failed: ${raw.output}`);
        return { result: "Failure", output: raw.output };
      case "Unknown":
        this.#log.v(1).info("Probe unknown without error", { ...kv, probeResult: "unknown" });
        return { result: "Failure", output: raw.output };
    }
  }

  /** upstream runProbe: one try of the probe's handler. */
  async #runProbe(
    signal: AbortSignal,
    spec: V1Probe,
    podIPs: readonly string[],
    container: V1Container,
    containerId: string,
  ): Promise<RawOutcome> {
    const timeoutSeconds = spec.timeoutSeconds || DEFAULT_TIMEOUT_SECONDS;
    const timeoutMs = timeoutSeconds * 1000;
    const podIP = podIPs[0] ?? "";
    try {
      if (spec.exec) {
        const command = expandStatic(spec.exec.command ?? [], container);
        this.#log.v(4).info("Exec-Probe runProbe", {
          containerName: container.name,
          execCommand: command,
        });
        return await this.#exec(signal, containerId, command, timeoutSeconds);
      }
      if (spec.httpGet) {
        const req = newRequestForHttpGetAction(spec.httpGet, container, podIP, this.#userAgent);
        this.#log.v(4).info("HTTP-Probe", { scheme: req.url.protocol, url: req.url.href });
        return await doHttpProbe(req, { timeoutMs, signal });
      }
      if (spec.tcpSocket) {
        const port = resolveContainerPort(
          spec.tcpSocket.port as number | string | undefined,
          container,
        );
        const host = spec.tcpSocket.host || podIP;
        this.#log.v(4).info("TCP-Probe", { host, port, timeout: timeoutMs });
        return await doTcpProbe(host, port, timeoutMs, signal);
      }
      if (spec.grpc) {
        this.#log.v(4).info("GRPC-Probe", {
          host: podIP,
          service: spec.grpc.service ?? "",
          port: spec.grpc.port,
          timeout: timeoutMs,
        });
        return await doGrpcProbe({
          host: podIP,
          port: spec.grpc.port,
          service: spec.grpc.service ?? "",
          timeoutMs,
          userAgent: this.#userAgent,
          signal,
        });
      }
    } catch (e) {
      signal.throwIfAborted();
      return {
        result: "Unknown",
        output: "",
        error: e instanceof Error ? e : new Error(String(e)),
      };
    }
    this.#log.info("Failed to find probe builder for container", { containerName: container.name });
    return {
      result: "Unknown",
      output: "",
      error: new ProbeError(`missing probe handler for ${container.name}`),
    };
  }

  /** upstream execProber.Probe over RunInContainer. */
  async #exec(
    signal: AbortSignal,
    containerId: string,
    command: readonly string[],
    timeoutSeconds: number,
  ): Promise<RawOutcome> {
    const { output, error } = await runInContainer(
      this.#runtime,
      containerId,
      command,
      timeoutSeconds,
      signal,
    );
    const data = new TextDecoder().decode(output.subarray(0, MAX_RESP_BODY_LENGTH));
    this.#log.v(4).info("Exec probe response", { output: data });
    if (!error) return { result: "Success", output: data };
    if (error.name === "ExecExitError") return { result: "Failure", output: data };
    // When an exec probe times out its output is empty: the timeout is the message.
    if (error.name === "ExecTimeoutError") return { result: "Failure", output: error.message };
    return { result: "Unknown", output: "", error };
  }
}

/** upstream ExpandContainerCommandOnlyStatic: `$(VAR)` from the container's literal env only. */
function expandStatic(command: readonly string[], container: V1Container): string[] {
  const vars = new Map<string, string>();
  for (const e of container.env ?? []) if (e.value !== undefined) vars.set(e.name, e.value);
  const mapping = mappingFuncFor(vars);
  return command.map((c) => expand(c, mapping));
}

/** The container's place in the pod spec, as upstream's event references carry it. */
