/**
 * @module
 * Runs a container's lifecycle hooks (postStart, preStop): an `exec` command through the CRI's
 * ExecSync, an `httpGet` request to the pod (any response counts, an HTTPS request answered in
 * plain HTTP is retried over HTTP) or a `sleep`, and words a failure as upstream does. Also
 * holds {@link runInContainer}, the ExecSync wrapper exec probes share. Talks to the CRI runtime
 * service; called by `kuberuntime/kuberuntime_container.ts` and `prober/prober.ts`.
 * Corresponds to upstream `pkg/kubelet/lifecycle/handlers.go` (and the RunInContainer /
 * ExecSync error handling of `kuberuntime` and `cri-client`).
 */

import type { V1Container, V1LifecycleHandler, V1Pod } from "@kubernetes/client-node";
import { abortable, type Clock } from "../util/clock.ts";
import { CriError } from "../cri/connection.ts";
import { kobj, type Logger } from "../klog/klog.ts";
import type { RuntimeService } from "../cri/remote_runtime.ts";
import { UPSTREAM_VERSION } from "../util/version.ts";
import { httpGet, HttpGetError, newRequestForHttpGetAction } from "../prober/probe_http.ts";
import { type EventRecorder, podRef } from "../client/record.ts";
import type { KubeletMetrics } from "../metrics/metrics.ts";

/** `kube-<purpose>/<major>.<minor>` (upstream userAgent in pkg/probe/http/request.go). */
export function userAgentFor(purpose: string): string {
  const [major = "", minor = ""] = UPSTREAM_VERSION.slice(1).split(".");
  return `kube-${purpose}/${major}.${minor}`;
}

/** A command that exited non-zero (upstream utilexec.CodeExitError). */
export class ExecExitError extends Error {
  override name = "ExecExitError";
  constructor(readonly exitCode: number, message: string) {
    super(message);
  }
}

/** A command that did not finish within its timeout (upstream exec.TimeoutError). */
export class ExecTimeoutError extends Error {
  override name = "ExecTimeoutError";
}

/** What ran: stdout then stderr, as upstream RunInContainer joins them. */
export interface ExecOutput {
  readonly output: Uint8Array;
  /** The failure: {@link ExecExitError}, {@link ExecTimeoutError} or the runtime's error. */
  readonly error?: Error;
}

/**
 * upstream RunInContainer: ExecSync with `timeoutSeconds` (0: none), bounded locally by the same
 * deadline. Never throws except when `signal` aborts.
 */
export async function runInContainer(
  runtime: Pick<RuntimeService, "execSync">,
  containerId: string,
  cmd: readonly string[],
  timeoutSeconds: number,
  signal: AbortSignal,
): Promise<ExecOutput> {
  const deadline = timeoutSeconds > 0 ? AbortSignal.timeout(timeoutSeconds * 1000) : undefined;
  const both = deadline ? AbortSignal.any([deadline, signal]) : signal;
  try {
    const res = await abortable(runtime.execSync(containerId, cmd, timeoutSeconds, both), both);
    const output = new Uint8Array(res.stdout.length + res.stderr.length);
    output.set(res.stdout);
    output.set(res.stderr, res.stdout.length);
    if (res.exitCode !== 0) {
      return {
        output,
        error: new ExecExitError(
          res.exitCode,
          `command '${cmd.join(" ")}' exited with ${res.exitCode}: ${
            new TextDecoder().decode(res.stderr)
          }`,
        ),
      };
    }
    return { output };
  } catch (e) {
    signal.throwIfAborted();
    if (deadline?.aborted || (e instanceof CriError && e.code === 4 && timeoutSeconds > 0)) {
      return {
        output: new Uint8Array(),
        error: new ExecTimeoutError(`command ${JSON.stringify(cmd.join(" "))} timed out`),
      };
    }
    if (e instanceof CriError) return { output: new Uint8Array(), error: new Error(e.grpcText) };
    return { output: new Uint8Array(), error: e instanceof Error ? e : new Error(String(e)) };
  }
}

/** upstream format.Pod: `<name>_<namespace>(<uid>)`. */
function formatPod(pod: V1Pod): string {
  return `${pod.metadata?.name ?? ""}_${pod.metadata?.namespace ?? ""}(${pod.metadata?.uid ?? ""})`;
}

/** Go's %v of a string slice: `[a b c]`. */
function goSlice(items: readonly string[]): string {
  return `[${items.join(" ")}]`;
}

/** Options of {@link HandlerRunner}. */
export interface HandlerRunnerOptions {
  readonly runtime: Pick<RuntimeService, "execSync">;
  readonly logger: Logger;
  readonly clock: Clock;
  /** The HTTP hook request's deadline (upstream's hook client has none). @default 30000 */
  readonly httpTimeoutMs?: number;
  /** Where a LifecycleHTTPFallback event goes. @default none */
  readonly recorder?: EventRecorder;
  /** kubelet_lifecycle_handler_http_fallbacks_total, kubelet_sleep_action_terminated_early_total. */
  readonly metrics?: HandlerMetrics;
}

/** The metrics {@link HandlerRunner} records. */
export type HandlerMetrics = Pick<
  KubeletMetrics,
  "lifecycleHandlerHttpFallbacks" | "sleepActionTerminatedEarly"
>;

/** Runs lifecycle handlers; see the module documentation. */
export class HandlerRunner {
  readonly #runtime: Pick<RuntimeService, "execSync">;
  readonly #log: Logger;
  readonly #clock: Clock;
  readonly #httpTimeoutMs: number;
  readonly #recorder: EventRecorder | undefined;
  readonly #metrics: HandlerMetrics | undefined;

  constructor(opts: HandlerRunnerOptions) {
    this.#recorder = opts.recorder;
    this.#metrics = opts.metrics;
    this.#runtime = opts.runtime;
    this.#log = opts.logger;
    this.#clock = opts.clock;
    this.#httpTimeoutMs = opts.httpTimeoutMs ?? 30_000;
  }

  /**
   * Runs `handler` for the container; resolves with upstream's failure message, or undefined on
   * success. Throws only when `signal` aborts (except for sleep, which then fails as upstream).
   */
  async run(
    signal: AbortSignal,
    containerId: string,
    pod: V1Pod,
    podIPs: readonly string[],
    container: V1Container,
    handler: V1LifecycleHandler,
  ): Promise<string | undefined> {
    const where = `for Container ${JSON.stringify(container.name)} in Pod ${
      JSON.stringify(formatPod(pod))
    }`;
    if (handler.exec) {
      const command = handler.exec.command ?? [];
      const { output, error } = await runInContainer(
        this.#runtime,
        containerId,
        command,
        0,
        signal,
      );
      if (!error) return undefined;
      const text = new TextDecoder().decode(output);
      this.#log.v(1).info("Exec lifecycle hook for Container in Pod failed", {
        err: error.message,
        execCommand: command,
        containerName: container.name,
        pod: kobj(pod),
        message: text,
      });
      return `Exec lifecycle hook (${
        goSlice(command)
      }) ${where} failed - error: ${error.message}, message: ${JSON.stringify(text)}`;
    }
    if (handler.httpGet) {
      const error = await this.#runHttp(signal, pod, podIPs, container, handler);
      if (error === undefined) return undefined;
      this.#log.v(1).info("HTTP lifecycle hook for Container in Pod failed", {
        err: error,
        path: handler.httpGet.path ?? "",
        containerName: container.name,
        pod: kobj(pod),
      });
      return `HTTP lifecycle hook (${
        handler.httpGet.path ?? ""
      }) ${where} failed - error: ${error}`;
    }
    if (handler.sleep) {
      const seconds = handler.sleep.seconds;
      try {
        await this.#clock.sleep(seconds * 1000, signal);
        return undefined;
      } catch {
        this.#metrics?.sleepActionTerminatedEarly.inc();
        const error = "container terminated before sleep hook finished";
        this.#log.v(1).info("Sleep lifecycle hook for Container in Pod failed", {
          err: error,
          sleepSeconds: seconds,
          containerName: container.name,
          pod: kobj(pod),
        });
        return `Sleep lifecycle hook (${seconds}) ${where} failed - error: ${error}`;
      }
    }
    const error = `invalid handler: ${JSON.stringify(handler)}`;
    this.#log.error(new Error(error), "Cannot run handler");
    return `Cannot run handler: ${error}`;
  }

  /** upstream runHTTPHandler: the error text, or undefined once any response came back. */
  async #runHttp(
    signal: AbortSignal,
    pod: V1Pod,
    podIPs: readonly string[],
    container: V1Container,
    handler: V1LifecycleHandler,
  ): Promise<string | undefined> {
    const action = handler.httpGet!;
    let podIP = action.host ?? "";
    if (podIP === "") {
      const first = podIPs[0];
      if (first === undefined) return "failed to find networking container: the pod has no IPs";
      podIP = first;
    }
    let req;
    try {
      req = newRequestForHttpGetAction(action, container, podIP, userAgentFor("lifecycle"));
    } catch (e) {
      return e instanceof Error ? e.message : String(e);
    }
    const opts = { timeoutMs: this.#httpTimeoutMs, signal };
    try {
      await httpGet(req, opts);
      return undefined;
    } catch (e) {
      if (!(e instanceof HttpGetError)) throw e;
      if (req.url.protocol !== "https:" || !isHttpResponseError(e)) return e.message;
      // An HTTP server answered the TLS handshake: retry in plain HTTP, without credentials.
      this.#log.v(1).info(
        "HTTPS request to lifecycle hook got HTTP response, retrying with HTTP.",
        {
          pod: kobj(pod),
          host: req.url.host,
        },
      );
      const url = new URL(req.url);
      url.protocol = "http:";
      const headers = new Map(req.headers);
      headers.delete("Authorization");
      try {
        await httpGet({ url, headers }, opts);
        this.#metrics?.lifecycleHandlerHttpFallbacks.inc();
        this.#recorder?.event(
          podRef(pod),
          "Warning",
          "LifecycleHTTPFallback",
          `request to HTTPS lifecycle hook ${url.host} got HTTP response, retry with HTTP succeeded`,
        );
        return undefined;
      } catch (retry) {
        if (!(retry instanceof HttpGetError)) throw retry;
        return e.message;
      }
    }
  }
}

/** upstream isHTTPResponseError: a TLS client that got a plain HTTP answer. */
function isHttpResponseError(e: HttpGetError): boolean {
  return /http response to https client|wrong version number|packet length too long|InvalidContentType|record overflow|corrupt message/i
    .test(`${e.message} ${e.cause instanceof Error ? e.cause.message : ""}`);
}
