/**
 * @module
 * The kubelet API's streaming endpoints: `/exec`, `/attach` and `/portForward` (GET or POST,
 * with or without the pod UID in the path) and `/run` (POST). The streaming ones check the query
 * (remotecommand/portforward options), find the pod and its container or sandbox, ask the CRI
 * runtime (Exec/Attach/PortForward) for a streaming URL, and proxy the client's SPDY or WebSocket
 * upgrade to that URL, which must be on loopback; `/run` runs the command with CRI ExecSync and
 * answers its output. Talks to the pod manager and pod cache through narrow lookups and to the
 * runtime service. Corresponds to upstream `pkg/kubelet/server/server.go` (getExec, getAttach,
 * getPortForward, getRun), `pkg/kubelet/kubelet_pods.go` (GetExec, GetAttach, GetPortForward,
 * RunInContainer), `cri-streaming` remotecommand.NewOptions / portforward.NewV4Options and
 * `streaming.WriteError`; the proxying is in `_stream_proxy.ts`.
 */

import type { ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import type * as api from "../../proto/runtime/v1/api.ts";
import { type Clock, realClock } from "../util/clock.ts";
import { CriError, criErrorText, GrpcCode } from "../cri/connection.ts";
import type { Logger } from "../klog/klog.ts";
import type { RuntimeService } from "../cri/remote_runtime.ts";
import { httpError, type KubeletRequest, type Route } from "./server.ts";
import {
  parseStreamingUrl,
  proxyUpgrade,
  writeRawHttpError,
  writeRawResponse,
} from "./_stream_proxy.ts";

/** What {@link streamingRoutes} needs. */
export interface StreamingRoutesOptions {
  /** The pod the kubelet runs under this namespace and name (pod manager), or undefined. */
  getPodByName(namespace: string, name: string): V1Pod | undefined;
  /** The running container's runtime id for a pod container name (from the pod cache), or undefined. */
  findContainerId(podUID: string, containerName: string): string | undefined;
  /** The pod's newest sandbox id (from the pod cache), or undefined. */
  findSandboxId(podUID: string): string | undefined;
  /** The CRI calls used: Exec/Attach/PortForward return the streaming URL. */
  runtime: Pick<RuntimeService, "exec" | "attach" | "portForward" | "execSync">;
  logger: Logger;
  /** Upstream streamingConnectionIdleTimeout (config), for the proxied connection; 0 for none. @default 4h */
  idleTimeoutMs?: number;
  /** Time source of the idle timeout. @default realClock */
  clock?: Clock;
}

/** Which streams an exec or attach asks for (upstream remotecommand.Options). */
export interface StreamOptions {
  readonly stdin: boolean;
  readonly stdout: boolean;
  readonly stderr: boolean;
  readonly tty: boolean;
}

/** A request the kubelet refuses; `status` and `message` are what the client sees. */
export class StreamingRequestError extends Error {
  override name = "StreamingRequestError";
  constructor(readonly status: number, message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

const DEFAULT_IDLE_TIMEOUT_MS = 4 * 60 * 60 * 1000;

/**
 * The query parameter names of the kubelet's streaming API, as the apiserver sends them
 * (k8s.io/api/core/v1 ExecStdinParam "input", ExecStdoutParam "output", ExecStderrParam
 * "error", ExecTTYParam, ExecCommandParam).
 */
const PARAM = {
  command: "command",
  stdin: "input",
  stdout: "output",
  stderr: "error",
  tty: "tty",
  port: "port",
} as const;

/**
 * Parses the stream flags as upstream remotecommand.NewOptions: each is on only when "1"; a TTY
 * cannot carry stderr, so stderr is dropped with a TTY; at least one stream must be asked for.
 */
export function parseStreamOptions(query: URLSearchParams): StreamOptions {
  const on = (name: string) => query.get(name) === "1";
  const tty = on(PARAM.tty);
  const stdin = on(PARAM.stdin);
  const stdout = on(PARAM.stdout);
  // Upstream bypasses stderr with a TTY (a V(4) log line), rather than failing the request.
  const stderr = on(PARAM.stderr) && !tty;
  if (!stdin && !stdout && !stderr) {
    throw new StreamingRequestError(400, "you must specify at least 1 of stdin, stdout, stderr");
  }
  return { stdin, stdout, stderr, tty };
}

/**
 * Parses the ports of a WebSocket port-forward as upstream portforward.NewV4Options (repeated
 * `port` parameters, each a comma-separated list); SPDY clients name ports per stream instead,
 * so they get none.
 */
export function parsePortForwardPorts(query: URLSearchParams, webSocket: boolean): number[] {
  if (!webSocket) return [];
  const values = query.getAll(PARAM.port);
  if (values.length === 0) {
    throw new StreamingRequestError(400, `query parameter "${PARAM.port}" is required`);
  }
  const ports: number[] = [];
  for (const value of values) {
    if (value === "") {
      throw new StreamingRequestError(400, `query parameter "${PARAM.port}" cannot be empty`);
    }
    for (const p of value.split(",")) {
      // strconv.ParseUint(p, 10, 16): digits only, at most 65535.
      const syntax = /^[0-9]+$/.test(p);
      const port = syntax ? Number(p) : NaN;
      if (!syntax || port > 65535) {
        const why = syntax ? "value out of range" : "invalid syntax";
        throw new StreamingRequestError(
          400,
          `unable to parse ${JSON.stringify(value)} as a port: strconv.ParseUint: parsing ${
            JSON.stringify(p)
          }: ${why}`,
        );
      }
      if (port < 1) {
        throw new StreamingRequestError(400, `port ${JSON.stringify(value)} must be > 0`);
      }
      ports.push(port);
    }
  }
  return ports;
}

/** `httpstream.IsUpgradeRequest` and `wsstream.IsWebSocketRequest` on Node's parsed headers. */
function isWebSocketRequest(r: KubeletRequest): boolean {
  const connection = r.req.headers.connection ?? "";
  const upgrade = r.req.headers.upgrade ?? "";
  return connection.toLowerCase().includes("upgrade") && upgrade.toLowerCase() === "websocket";
}

/** Where an answer goes: a plain response, or the raw socket of an upgrade request. */
interface Reply {
  /** go-restful's WriteError and streaming.WriteError: the text as is. */
  text(status: number, message: string, headers?: Record<string, string>): void;
  /** Go's http.Error: the text and a newline, nosniff. */
  httpError(status: number, message: string): void;
}

function replyTo(res: ServerResponse): Reply {
  return {
    text(status, message, headers = {}) {
      if (res.headersSent) return void res.destroy();
      res.writeHead(status, { "content-type": "text/plain; charset=utf-8", ...headers });
      res.end(message);
    },
    httpError: (status, message) => httpError(res, status, message),
  };
}

function replyToSocket(socket: Duplex): Reply {
  return {
    text: (status, message, headers) => writeRawResponse(socket, status, message, headers),
    httpError: (status, message) => writeRawHttpError(socket, status, message),
  };
}

/** Upstream streaming.WriteError: NotFound 404, ResourceExhausted 429 (+Retry-After), else 500. */
function writeStreamingError(reply: Reply, e: unknown): void {
  const message = criErrorText(e);
  if (e instanceof CriError && e.code === GrpcCode.NOT_FOUND) return reply.text(404, message);
  if (e instanceof CriError && e.code === GrpcCode.RESOURCE_EXHAUSTED) {
    const after = /\[Retry-After:([0-9]+)\]/.exec(message)?.[1];
    return reply.text(429, message, after === undefined ? {} : { "Retry-After": after });
  }
  reply.text(500, message);
}

/** `kubecontainer.GetPodFullName`. */
function podFullName(pod: V1Pod): string {
  return `${pod.metadata?.name ?? ""}_${pod.metadata?.namespace ?? ""}`;
}

/** `kubecontainer.GetContainerSpec`: regular, init, then ephemeral containers. */
function containerSpec(pod: V1Pod, name: string): V1Container | undefined {
  const spec = pod.spec;
  return spec?.containers.find((c) => c.name === name) ??
    spec?.initContainers?.find((c) => c.name === name) ??
    (spec?.ephemeralContainers?.find((c) => c.name === name) as V1Container | undefined);
}

/** Asks the runtime for a streaming URL; undefined once the failure has been answered. */
type Prepare = (r: KubeletRequest, reply: Reply) => Promise<string | undefined>;

/** The routes; see the module documentation. */
export function streamingRoutes(opts: StreamingRoutesOptions): Route[] {
  const { logger, runtime } = opts;
  const clock = opts.clock ?? realClock;
  const idleTimeoutMs = opts.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;

  /** Parses stream options, answering 400 (and logging, as utilruntime.HandleError) on failure. */
  const streamOptions = (r: KubeletRequest, reply: Reply): StreamOptions | undefined => {
    try {
      return parseStreamOptions(r.url.searchParams);
    } catch (e) {
      if (!(e instanceof StreamingRequestError)) throw e;
      logger.error(e, "Unhandled Error");
      reply.text(e.status, e.message);
      return undefined;
    }
  };

  const lookupPod = (r: KubeletRequest, reply: Reply): V1Pod | undefined => {
    const pod = opts.getPodByName(r.params.podNamespace ?? "", r.params.podID ?? "");
    if (!pod) reply.text(404, "pod does not exist");
    return pod;
  };

  /** Calls the runtime; a failure or an empty URL is answered as streaming.WriteError does. */
  const ask = async (
    reply: Reply,
    call: () => Promise<string>,
  ): Promise<string | undefined> => {
    try {
      const url = await call();
      if (url === "") throw new Error("URL is not set");
      return url;
    } catch (e) {
      writeStreamingError(reply, e);
      return undefined;
    }
  };

  const prepareExec: Prepare = async (r, reply) => {
    const streams = streamOptions(r, reply);
    if (!streams) return undefined;
    const pod = lookupPod(r, reply);
    if (!pod) return undefined;
    const name = r.params.containerName ?? "";
    // Upstream finds the runtime pod by full name, so a UID in the path does not matter here.
    const containerId = opts.findContainerId(pod.metadata?.uid ?? "", name);
    if (containerId === undefined) {
      reply.text(500, `container not found (${JSON.stringify(name)})`);
      return undefined;
    }
    const request: api.ExecRequest = {
      containerId,
      cmd: r.url.searchParams.getAll(PARAM.command),
      ...streams,
    };
    return await ask(reply, () => runtime.exec(request, r.signal));
  };

  const prepareAttach: Prepare = async (r, reply) => {
    const streams = streamOptions(r, reply);
    if (!streams) return undefined;
    const pod = lookupPod(r, reply);
    if (!pod) return undefined;
    const name = r.params.containerName ?? "";
    const fullName = podFullName(pod);
    const podUID = pod.metadata?.uid ?? "";
    const containerId = opts.findContainerId(podUID, name);
    if (containerId === undefined) {
      reply.text(500, `container ${name} not found in pod ${fullName}`);
      return undefined;
    }
    const uid = r.params.uid ?? "";
    if (uid !== "" && uid !== podUID) {
      reply.text(500, `pod ${fullName} not found`);
      return undefined;
    }
    const spec = containerSpec(pod, name);
    if (!spec) {
      reply.text(500, `container ${name} not found in pod ${fullName}`);
      return undefined;
    }
    // A process's TTY is fixed when it starts: attach follows the container spec, not the query.
    const request: api.AttachRequest = { containerId, ...streams, tty: spec.tty === true };
    return await ask(reply, () => runtime.attach(request, r.signal));
  };

  const preparePortForward: Prepare = async (r, reply) => {
    let port: number[];
    try {
      port = parsePortForwardPorts(r.url.searchParams, isWebSocketRequest(r));
    } catch (e) {
      if (!(e instanceof StreamingRequestError)) throw e;
      logger.error(e, "Unhandled Error");
      reply.text(e.status, e.message);
      return undefined;
    }
    const pod = lookupPod(r, reply);
    if (!pod) return undefined;
    const podUID = pod.metadata?.uid ?? "";
    const uid = r.params.uid ?? "";
    if (uid !== "" && uid !== podUID) {
      reply.text(404, "pod not found");
      return undefined;
    }
    const podSandboxId = opts.findSandboxId(podUID);
    if (podSandboxId === undefined) {
      reply.text(500, `pod not found (${JSON.stringify(podFullName(pod))})`);
      return undefined;
    }
    return await ask(reply, () => runtime.portForward({ podSandboxId, port }, r.signal));
  };

  /** The checked streaming URL, or undefined once the refusal has been answered. */
  const target = (reply: Reply, raw: string): URL | undefined => {
    try {
      return parseStreamingUrl(raw);
    } catch (e) {
      logger.error(e, "Error while proxying request");
      reply.httpError(500, criErrorText(e));
      return undefined;
    }
  };

  const plain = (prepare: Prepare): Route["handler"] => async (r, res) => {
    const reply = replyTo(res);
    const raw = await prepare(r, reply);
    if (raw === undefined || !target(reply, raw)) return;
    // The UpgradeAwareHandler requires an upgrade; its responder answers 500.
    const e = new Error("Upgrade request required");
    logger.error(e, "Error while proxying request");
    reply.httpError(500, e.message);
  };

  const upgrade = (prepare: Prepare): Route["upgrade"] => async (r, socket, head) => {
    const reply = replyToSocket(socket);
    const raw = await prepare(r, reply);
    if (raw === undefined) return;
    const url = target(reply, raw);
    if (!url) return;
    await proxyUpgrade({
      target: url,
      req: r.req,
      client: socket,
      head,
      idleTimeoutMs,
      clock,
      logger,
      signal: r.signal,
    });
  };

  const run: Route["handler"] = async (r, res) => {
    const pod = opts.getPodByName(r.params.podNamespace ?? "", r.params.podID ?? "");
    const reply = replyTo(res);
    if (!pod) return reply.text(404, "pod does not exist");
    // For legacy reasons /run takes one `cmd` parameter split on spaces, unlike exec.
    const cmd = (r.url.searchParams.get("cmd") ?? "").split(" ");
    const name = r.params.containerName ?? "";
    const containerId = opts.findContainerId(pod.metadata?.uid ?? "", name);
    if (containerId === undefined) {
      return reply.text(500, `container not found (${JSON.stringify(name)})`);
    }
    let out: api.ExecSyncResponse;
    try {
      // Upstream passes no timeout (a TODO there).
      out = await runtime.execSync(containerId, cmd, 0, r.signal);
    } catch (e) {
      return reply.text(500, criErrorText(e));
    }
    if (out.exitCode !== 0) {
      const stderr = new TextDecoder().decode(out.stderr);
      return reply.text(500, `command '${cmd.join(" ")}' exited with ${out.exitCode}: ${stderr}`);
    }
    // Stdout then stderr, not interleaved, as upstream RunInContainer.
    const data = new Uint8Array(out.stdout.length + out.stderr.length);
    data.set(out.stdout);
    data.set(out.stderr, out.stdout.length);
    if (data.length === 0) {
      res.writeHead(200);
      return void res.end();
    }
    res.writeHead(200, { "content-type": "application/json" });
    res.end(data);
  };

  const streaming = (base: string, tails: readonly string[], prepare: Prepare): Route[] =>
    tails.map((tail) => ({
      pattern: `/${base}/:podNamespace/:podID${tail}`,
      methods: ["GET", "POST"],
      handler: plain(prepare),
      upgrade: upgrade(prepare),
    }));

  return [
    ...streaming("exec", ["/:containerName", "/:uid/:containerName"], prepareExec),
    ...streaming("attach", ["/:containerName", "/:uid/:containerName"], prepareAttach),
    ...streaming("portForward", ["", "/:uid"], preparePortForward),
    { pattern: "/run/:podNamespace/:podID/:containerName", methods: ["POST"], handler: run },
    { pattern: "/run/:podNamespace/:podID/:uid/:containerName", methods: ["POST"], handler: run },
  ];
}
