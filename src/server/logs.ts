/**
 * @module
 * The log routes of the kubelet API: `/containerLogs/{namespace}/{pod}/{container}` (what
 * `kubectl logs` reaches through the apiserver) and `/logs/` (the node's log directory, served as
 * files and directory listings). Container logs: decodes the pod log options from the query,
 * validates them, finds the pod (pod manager) and the container instance to read (current or
 * previous, from the runtime's pod status and the pod's API status), asks the runtime for its log
 * path and streams the file with {@link readLogs}. Node logs: a static file server confined to
 * the node log directory, refusing symlinks that lead out of it. Talks to the pod manager, the
 * pod cache, and the CRI RuntimeService (ContainerStatus). With enableSystemLogQuery, `/logs/`
 * also answers node log queries (`?query=<service or file>`, journal.ts and journal_copy.ts):
 * a query of services streams journalctl's output or the services' files, a query of one file
 * serves that file as `/logs/<file>` would. Corresponds to upstream
 * `pkg/kubelet/server/server.go` (getContainerLogs, getLogs, InstallSystemLogHandler),
 * `pkg/kubelet/kubelet_pods.go` (GetKubeletContainerLogs, validateContainerLogStatus),
 * `kuberuntime_container.go` (GetContainerLogs) and the `/logs/` handler of `kubelet.go` (Run: the
 * http.FileServer, and the NodeLogQuery handler in front of it).
 */

import { runtimeContainerId } from "../container/container_id.ts";
import type { ServerResponse } from "node:http";
import { extname, join, posix } from "node:path";
import type { V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import { type Clock, realClock } from "../util/clock.ts";
import { type LogOptions, readLogs } from "../logs/container_logs.ts";
import type { Logger } from "../klog/klog.ts";
import { getContainerInfoFromLabels } from "../kuberuntime/labels.ts";
import type { PodStatus } from "../container/pod_cache.ts";
import type { RuntimeService } from "../cri/remote_runtime.ts";
import { httpError, type KubeletRequest, type Route } from "./server.ts";
import {
  aggregateError,
  goParseQuery,
  NODE_LOG_DIR,
  type NodeLogQuery,
  parseNodeLogQuery,
  validateNodeLogQuery,
} from "./journal.ts";
import { copyNodeLogQuery } from "./journal_copy.ts";

/** What {@link logRoutes} needs. */
export interface LogRoutesOptions {
  /** The kubelet's pod manager. */
  getPodByName(namespace: string, name: string): V1Pod | undefined;
  /** The runtime's status of a pod, from the pod cache (containers newest first). */
  getPodStatus(uid: string): PodStatus;
  /** For a container's log path and state. */
  runtime: Pick<RuntimeService, "containerStatus">;
  /** The directory `/logs/` serves. @default "/var/log" */
  nodeLogDirectory?: string;
  logger: Logger;
  /** The prefix of API container IDs, `<runtimeName>://<id>`. @default "containerd" */
  runtimeName?: string;
  /** For sinceSeconds and the follow poll. @default realClock */
  clock?: Clock;
  /** How often a followed log is checked for new data (upstream logForceCheckPeriod). @default 1000 */
  followPollIntervalMs?: number;
  /** Wake followers on inotify events besides the poll. @default true */
  watchLogFiles?: boolean;
  /** enableDebuggingHandlers: when false both routes answer 405. @default true */
  enableDebuggingHandlers?: boolean;
  /** enableSystemLogHandler: when false `/logs/` answers 405. @default true */
  enableSystemLogHandler?: boolean;
  /**
   * enableSystemLogQuery: `/logs/?query=` answers node log queries (the NodeLogQuery gate is GA
   * and locked on in 1.36; validation requires enableSystemLogHandler). @default false
   */
  enableSystemLogQuery?: boolean;
  /** The journalctl program node log queries run. @default "journalctl" */
  journalctl?: string;
  /** The deadline of one node log query. @default 30000 */
  nodeLogQueryTimeoutMs?: number;
}

/** Upstream waiting reasons used when the runtime has no container yet (kubelet_pods.go). */
const CONTAINER_CREATING = "ContainerCreating";
const POD_INITIALIZING = "PodInitializing";

/** An HTTP answer that ends a request early. */
interface Refusal {
  status: number;
  message: string;
}

/** The decoded container log query (upstream v1.PodLogOptions as the kubelet uses it). */
export interface ContainerLogQuery {
  options: LogOptions;
  previous: boolean;
}

const INT64 = /^[+-]?\d+$/;
const MAX_INT64 = (1n << 63n) - 1n;
const RFC3339_SECONDS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

/**
 * Decodes and validates the query as upstream getContainerLogs does: 400 `Unable to decode
 * query.` for values that do not parse, 422 `Invalid request.` for invalid options, 400 for a
 * stream other than All (the PodLogsQuerySplitStreams gate is off, as upstream's default).
 */
export function parseContainerLogQuery(
  query: URLSearchParams,
  now: number,
): ContainerLogQuery | Refusal {
  const undecodable = { status: 400, message: `{"message": "Unable to decode query."}` };
  const invalid = { status: 422, message: `{"message": "Invalid request."}` };
  const values = new Map<string, string>();
  for (const key of query.keys()) {
    if (!values.has(key)) values.set(key, query.get(key) ?? "");
  }
  // Backwards compatibility: "tail" stands for tailLines, and "all" for no limit.
  const legacyTail = values.get("tail");
  if (legacyTail !== undefined && legacyTail !== "") {
    if (legacyTail === "all") values.delete("tailLines");
    else values.set("tailLines", legacyTail);
  }
  const bool = (key: string): boolean => {
    const v = values.get(key);
    return v !== undefined && v !== "0" && v.toLowerCase() !== "false";
  };
  const int = (key: string): number | undefined | Refusal => {
    const v = values.get(key);
    if (v === undefined) return undefined;
    if (!INT64.test(v)) return undecodable;
    const n = BigInt(v);
    if (n > MAX_INT64 || n < -MAX_INT64 - 1n) return undecodable;
    return Number(n);
  };
  const tailLines = int("tailLines");
  const limitBytes = int("limitBytes");
  const sinceSeconds = int("sinceSeconds");
  for (const x of [tailLines, limitBytes, sinceSeconds]) if (typeof x === "object") return x;
  let sinceTime: Date | undefined;
  const st = values.get("sinceTime");
  if (st !== undefined && st !== "" && st !== "null") {
    const ms = RFC3339_SECONDS.test(st) ? Date.parse(st) : NaN;
    if (Number.isNaN(ms)) return undecodable;
    sinceTime = new Date(ms);
  }
  const stream = values.get("stream");

  // Upstream ValidatePodLogOptions.
  if (typeof tailLines === "number" && tailLines < 0) return invalid;
  if (typeof limitBytes === "number" && limitBytes < 1) return invalid;
  if (sinceSeconds !== undefined && sinceTime !== undefined) return invalid;
  if (typeof sinceSeconds === "number" && sinceSeconds < 1) return invalid;
  if (stream !== undefined) {
    if (stream !== "All" && stream !== "Stdout" && stream !== "Stderr") return invalid;
    if (stream !== "All" && tailLines !== undefined) return invalid;
    if (stream !== "All") {
      return {
        status: 400,
        message: `unable to return the given log stream: ${
          JSON.stringify(stream)
        }. Please enable PodLogsQuerySplitStreams feature gate in kubelet`,
      };
    }
  }

  // Upstream NewLogOptions.
  const options: LogOptions = { follow: bool("follow"), timestamps: bool("timestamps") };
  if (typeof tailLines === "number") options.tailLines = tailLines;
  if (typeof limitBytes === "number") options.limitBytes = limitBytes;
  if (typeof sinceSeconds === "number") options.since = new Date(now - sinceSeconds * 1000);
  if (sinceTime !== undefined && (!options.since || sinceTime > options.since)) {
    options.since = sinceTime;
  }
  return { options, previous: bool("previous") };
}

/** The container instance whose logs are read: its CRI id and its API container ID. */
export interface LogContainer {
  id: string;
  containerID: string;
}

/** What {@link selectLogContainer} decides from. */
export interface SelectLogContainerInput {
  pod: V1Pod;
  podStatus: PodStatus;
  containerName: string;
  previous: boolean;
  /** @default "containerd" */
  runtimeName?: string;
}

interface LogView {
  containerID?: string;
  running?: boolean;
  terminatedID?: string;
  waitingReason?: string;
  lastTerminatedID?: string;
}

function apiContainerStatus(pod: V1Pod, name: string): V1ContainerStatus | undefined {
  const s = pod.status;
  return [
    ...(s?.containerStatuses ?? []),
    ...(s?.initContainerStatuses ?? []),
    ...(s?.ephemeralContainerStatuses ?? []),
  ].find((c) => c.name === name);
}

function fromApiStatus(cs: V1ContainerStatus): LogView {
  return {
    containerID: cs.containerID,
    running: cs.state?.running !== undefined,
    terminatedID: cs.state?.terminated ? cs.state.terminated.containerID ?? "" : undefined,
    waitingReason: cs.state?.waiting ? cs.state.waiting.reason ?? "" : undefined,
    lastTerminatedID: cs.lastState?.terminated
      ? cs.lastState.terminated.containerID ?? ""
      : undefined,
  };
}

/**
 * The API view of one container that upstream's status generation would give: the newest
 * runtime instance is the state, the one before it (if it exited) the last termination; a start
 * failure the API status reports as waiting (CrashLoopBackOff, ErrImagePull, ...) moves an exited
 * newest instance to the last termination, as upstream's reason cache does.
 */
function logView(input: SelectLogContainerInput): LogView {
  const { pod, podStatus, containerName } = input;
  const prefix = `${input.runtimeName ?? "containerd"}://`;
  const instances = podStatus.containerStatuses
    .filter((c) =>
      (getContainerInfoFromLabels(c.labels).containerName || c.metadata?.name) === containerName
    )
    .sort((a, b) => (a.createdAt === b.createdAt ? 0 : a.createdAt > b.createdAt ? -1 : 1));
  const apiStatus = apiContainerStatus(pod, containerName);
  const newest = instances[0];
  if (newest === undefined) {
    if (apiStatus) return fromApiStatus(apiStatus);
    const hasInit = (pod.spec?.initContainers?.length ?? 0) > 0;
    return { waitingReason: hasInit ? POD_INITIALIZING : CONTAINER_CREATING };
  }
  const view: LogView = { containerID: prefix + newest.id };
  switch (newest.state) {
    case api.ContainerState.CONTAINER_RUNNING:
      view.running = true;
      break;
    case api.ContainerState.CONTAINER_EXITED:
      view.terminatedID = prefix + newest.id;
      break;
    default:
      view.waitingReason = "";
  }
  const before = instances[1];
  if (before?.state === api.ContainerState.CONTAINER_EXITED) {
    view.lastTerminatedID = prefix + before.id;
  }
  const reason = apiStatus?.state?.waiting?.reason;
  if (
    !view.running && reason !== undefined && reason !== "" && reason !== CONTAINER_CREATING &&
    reason !== POD_INITIALIZING
  ) {
    if (view.terminatedID !== undefined) view.lastTerminatedID = view.terminatedID;
    view.terminatedID = undefined;
    view.waitingReason = reason;
  } else if (view.waitingReason === "" && apiStatus?.state?.waiting?.reason) {
    view.waitingReason = apiStatus.state.waiting.reason;
  }
  return view;
}

/**
 * Which container instance to read (upstream validateContainerLogStatus): the last terminated
 * one with `previous`, else the running one, else the terminated one; an Error with upstream's
 * text (answered with 400) when there is none.
 */
export function selectLogContainer(input: SelectLogContainerInput): LogContainer | Error {
  const name = JSON.stringify(input.containerName);
  const podName = JSON.stringify(input.pod.metadata?.name ?? "");
  const inPod = `container ${name} in pod ${podName}`;
  const v = logView(input);
  let cid: string;
  if (input.previous) {
    if (!v.lastTerminatedID) {
      return new Error(`previous terminated container ${name} in pod ${podName} not found`);
    }
    cid = v.lastTerminatedID;
  } else if (v.running) {
    cid = v.containerID ?? "";
  } else if (v.terminatedID !== undefined) {
    // When the next instance did not start, the terminated state has no ID: use the last one.
    if (v.terminatedID === "") {
      if (!v.lastTerminatedID) return new Error(`${inPod} is terminated`);
      cid = v.lastTerminatedID;
    } else {
      cid = v.terminatedID;
    }
  } else if (v.lastTerminatedID !== undefined) {
    if (v.lastTerminatedID === "") return new Error(`${inPod} is terminated`);
    cid = v.lastTerminatedID;
  } else if (v.waitingReason !== undefined) {
    switch (v.waitingReason) {
      case "ErrImagePull":
        return new Error(`${inPod} is waiting to start: image can't be pulled`);
      case "ImagePullBackOff":
        return new Error(`${inPod} is waiting to start: trying and failing to pull image`);
      default:
        return new Error(`${inPod} is waiting to start: ${v.waitingReason}`);
    }
  } else {
    return new Error(`${inPod} is waiting to start - no logs yet`);
  }
  return { id: runtimeContainerId(cid), containerID: cid };
}

/** go-restful's WriteError: the status and the bare text (Go sniffs text/plain). */
function restfulError(res: ServerResponse, status: number, message: string): void {
  if (res.headersSent) {
    // Upstream writes the error after the streamed logs, under the 200 already sent.
    if (!res.writableEnded) res.end(message);
    return;
  }
  res.writeHead(status, { "content-type": "text/plain; charset=utf-8" });
  res.end(message);
}

/** The GET-only filter of upstream's read-only web services. */
function onlyGet(r: KubeletRequest, res: ServerResponse): boolean {
  if (r.req.method === "GET") return true;
  res.setHeader("allow", "GET");
  restfulError(res, 405, "Method Not Allowed");
  return false;
}

/**
 * A stream writer onto the response whose writes settle once each chunk is handed to the
 * socket, as upstream's flushwriter flushes every write. So the end of the body is never sent
 * in the same TLS record as the last log bytes: a Go client that meets both in one read gets
 * (n, io.EOF), and the apiserver's WebSocket log stream (wsstream messageCopy) drops those n
 * bytes ("retrieving logs from the container over websockets" read an empty log).
 */
function responseWriter(res: ServerResponse): WritableStreamDefaultWriter<Uint8Array> {
  return new WritableStream<Uint8Array>({
    write(chunk) {
      return new Promise<void>((resolve, reject) => {
        if (res.destroyed || res.writableEnded) {
          return reject(new Error("the client went away"));
        }
        const settle = (err?: Error | null) => {
          res.off("close", onClose);
          if (err || res.destroyed) reject(err ?? new Error("the client went away"));
          else resolve();
        };
        const onClose = () => settle(new Error("the client went away"));
        res.on("close", onClose);
        res.write(chunk, settle);
      });
    },
  }).getWriter();
}

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

function disabled(message: string): Route["handler"] {
  return (_r, res) => httpError(res, 405, message);
}

/** The log routes; see the module documentation. */
export function logRoutes(opts: LogRoutesOptions): Route[] {
  if (opts.enableDebuggingHandlers === false) {
    const handler = disabled("Debug endpoints are disabled.");
    return [
      { pattern: "/containerLogs/*rest", handler },
      { pattern: "/logs/*path", handler },
    ];
  }
  const logs: Route = opts.enableSystemLogHandler === false
    ? { pattern: "/logs/*path", handler: disabled("logs endpoint is disabled.") }
    : {
      pattern: "/logs/*path",
      handler: opts.enableSystemLogQuery
        ? (r, res) => serveNodeLogQuery(opts, r, res)
        : (r, res) => serveNodeLogs(opts, r, res),
    };
  return [
    {
      pattern: "/containerLogs/:namespace/:pod/:container",
      handler: (r, res) => getContainerLogs(opts, r, res),
    },
    logs,
  ];
}

async function getContainerLogs(
  opts: LogRoutesOptions,
  r: KubeletRequest,
  res: ServerResponse,
): Promise<void> {
  if (!onlyGet(r, res)) return;
  const namespace = r.params.namespace ?? "";
  const podName = r.params.pod ?? "";
  const containerName = r.params.container ?? "";
  if (podName === "") return restfulError(res, 400, `{"message": "Missing podID."}`);
  if (containerName === "") {
    return restfulError(res, 400, `{"message": "Missing container name."}`);
  }
  if (namespace === "") return restfulError(res, 400, `{"message": "Missing podNamespace."}`);
  const clock = opts.clock ?? realClock;
  const query = parseContainerLogQuery(r.url.searchParams, clock.now());
  if ("status" in query) return restfulError(res, query.status, query.message);

  const pod = opts.getPodByName(namespace, podName);
  if (!pod) return restfulError(res, 404, `pod ${JSON.stringify(podName)} does not exist`);
  const spec = pod.spec;
  const inSpec = [
    ...(spec?.containers ?? []),
    ...(spec?.initContainers ?? []),
    ...(spec?.ephemeralContainers ?? []),
  ].some((c) => c.name === containerName);
  if (!inSpec) {
    return restfulError(
      res,
      404,
      `container ${JSON.stringify(containerName)} not found in pod ${JSON.stringify(podName)}`,
    );
  }

  const chosen = selectLogContainer({
    pod,
    podStatus: opts.getPodStatus(pod.metadata?.uid ?? ""),
    containerName,
    previous: query.previous,
    runtimeName: opts.runtimeName,
  });
  if (chosen instanceof Error) return restfulError(res, 400, chosen.message);

  // Upstream commits the 200 before asking the runtime, so the client sees the stream begin.
  res.writeHead(200, { "content-type": "text/plain; charset=utf-8" });
  res.flushHeaders();
  const logger = opts.logger;
  try {
    let status: api.ContainerStatus | undefined;
    try {
      status = (await opts.runtime.containerStatus(chosen.id, false, r.signal)).status;
    } catch (e) {
      if (r.signal.aborted) throw e;
      logger.v(4).info("Failed to get container status", {
        containerID: chosen.containerID,
        err: message(e),
      });
      throw new Error(`unable to retrieve container logs for ${chosen.containerID}`);
    }
    if (!status) throw new Error("container status is nil");
    const containerDone = async () => {
      const s = (await opts.runtime.containerStatus(chosen.id, false, r.signal)).status;
      if (s?.state === api.ContainerState.CONTAINER_RUNNING) return false;
      logger.v(5).info("Container is not running", { containerId: chosen.id, state: s?.state });
      return true;
    };
    await readLogs(
      status.logPath,
      {
        ...query.options,
        containerDone,
        clock: opts.clock,
        pollIntervalMs: opts.followPollIntervalMs,
        watch: opts.watchLogFiles,
        logger,
      },
      responseWriter(res),
      r.signal,
    );
    res.end();
  } catch (e) {
    if (r.signal.aborted) {
      res.destroy();
      return;
    }
    restfulError(res, 400, message(e));
  }
}

// --- /logs/: upstream http.StripPrefix("/logs/", http.FileServer(http.Dir(nodeLogDir))) ---

const FILE_CHUNK = 64 * 1024;

/** Go's mime.TypeByExtension for the builtin table plus what Debian's mime.types adds here. */
const MIME_TYPES: Readonly<Record<string, string>> = {
  ".avif": "image/avif",
  ".css": "text/css; charset=utf-8",
  ".gif": "image/gif",
  ".htm": "text/html; charset=utf-8",
  ".html": "text/html; charset=utf-8",
  ".jpeg": "image/jpeg",
  ".jpg": "image/jpeg",
  ".js": "text/javascript; charset=utf-8",
  ".json": "application/json",
  ".mjs": "text/javascript; charset=utf-8",
  ".pdf": "application/pdf",
  ".png": "image/png",
  ".svg": "image/svg+xml",
  ".wasm": "application/wasm",
  ".webp": "image/webp",
  ".xml": "text/xml; charset=utf-8",
  ".gz": "application/gzip",
  ".txt": "text/plain; charset=utf-8",
};

/** A reduced http.DetectContentType: archives, binary data, or text. */
function sniff(head: Uint8Array): string {
  if (head[0] === 0x1f && head[1] === 0x8b && head[2] === 0x08) return "application/x-gzip";
  if (head[0] === 0x50 && head[1] === 0x4b && head[2] === 0x03 && head[3] === 0x04) {
    return "application/zip";
  }
  for (const b of head) {
    if (b <= 0x08 || b === 0x0b || (b >= 0x0e && b <= 0x1a) || (b >= 0x1c && b <= 0x1f)) {
      return "application/octet-stream";
    }
  }
  return "text/plain; charset=utf-8";
}

const encoder = new TextEncoder();

/** Go's url.URL{Path: p}.String(): path escaping, and "./" before a colon in the first segment. */
function goPathURL(p: string): string {
  let out = "";
  for (const b of encoder.encode(p)) {
    const c = String.fromCharCode(b);
    out += /[A-Za-z0-9\-_.~$&+,/:;=@]/.test(c)
      ? c
      : `%${b.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  const colon = out.indexOf(":");
  return colon >= 0 && !out.slice(0, colon).includes("/") ? `./${out}` : out;
}

/** Go's htmlReplacer. */
function htmlEscape(s: string): string {
  return s.replace(
    /[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "'": "&#39;" })[c]!,
  );
}

/** http.Error for an open or stat failure, as Go's toHTTPError maps it. */
function fileError(res: ServerResponse, e: unknown): void {
  if (e instanceof Deno.errors.NotFound || e instanceof Deno.errors.NotADirectory) {
    return httpError(res, 404, "404 page not found");
  }
  if (e instanceof Deno.errors.PermissionDenied) return httpError(res, 403, "403 Forbidden");
  return httpError(res, 500, "500 Internal Server Error");
}

/** Go's localRedirect: a relative 301, keeping the query. */
function localRedirect(r: KubeletRequest, res: ServerResponse, target: string): void {
  const q = r.url.search;
  res.writeHead(301, { location: q ? `${target}${q}` : target });
  res.end();
}

/** Answers 304 when If-Modified-Since is not before the modification time (seconds). */
function notModified(r: KubeletRequest, res: ServerResponse, mtime: Date | null): boolean {
  const ims = r.req.headers["if-modified-since"];
  if (!mtime || !ims || r.req.headers["if-none-match"] !== undefined) return false;
  const t = Date.parse(ims);
  if (Number.isNaN(t) || Math.floor(mtime.getTime() / 1000) * 1000 > t) return false;
  res.writeHead(304);
  res.end();
  return true;
}

/** Writes `length` bytes of the open file from `offset`, waiting for the client to drain. */
async function sendFile(
  file: Deno.FsFile,
  offset: number,
  length: number,
  res: ServerResponse,
  signal: AbortSignal,
): Promise<void> {
  await file.seek(offset, Deno.SeekMode.Start);
  const out = responseWriter(res);
  let left = length;
  while (left > 0) {
    signal.throwIfAborted();
    const buf = new Uint8Array(Math.min(FILE_CHUNK, left));
    const n = await file.read(buf);
    if (n === null) break;
    await out.write(buf.subarray(0, n));
    left -= n;
  }
  res.end();
}

/** A single "bytes=a-b" range of a file of `size` bytes; undefined to serve it whole. */
function parseRange(
  header: string | undefined,
  size: number,
): { start: number; length: number } | undefined | "invalid" | "no-overlap" {
  if (header === undefined || header === "") return undefined;
  if (!header.startsWith("bytes=")) return "invalid";
  const specs = header.slice(6).split(",").map((s) => s.trim()).filter((s) => s !== "");
  // Several ranges would need multipart/byteranges: serving the whole file is also valid HTTP.
  if (specs.length !== 1) return specs.length === 0 ? "invalid" : undefined;
  const m = /^(\d*)-(\d*)$/.exec(specs[0]!);
  if (!m || (m[1] === "" && m[2] === "")) return "invalid";
  if (m[1] === "") {
    const n = Math.min(Number(m[2]), size);
    if (n === 0) return "no-overlap";
    return { start: size - n, length: n };
  }
  const start = Number(m[1]);
  if (start >= size) return "no-overlap";
  const end = m[2] === "" ? size - 1 : Math.min(Number(m[2]), size - 1);
  if (end < start) return "invalid";
  return { start, length: end - start + 1 };
}

async function serveFile(
  r: KubeletRequest,
  res: ServerResponse,
  path: string,
  info: Deno.FileInfo,
): Promise<void> {
  let file: Deno.FsFile;
  try {
    file = await Deno.open(path, { read: true });
  } catch (e) {
    return fileError(res, e);
  }
  try {
    if (notModified(r, res, info.mtime)) return;
    const size = info.size;
    let type = MIME_TYPES[extname(path).toLowerCase()];
    if (type === undefined) {
      const head = new Uint8Array(Math.min(512, size));
      let got = 0;
      while (got < head.length) {
        const n = await file.read(head.subarray(got));
        if (n === null) break;
        got += n;
      }
      type = sniff(head.subarray(0, got));
    }
    const headers: Record<string, string> = { "content-type": type, "accept-ranges": "bytes" };
    if (info.mtime) headers["last-modified"] = info.mtime.toUTCString();
    const range = parseRange(r.req.headers.range, size);
    if (range === "invalid" || range === "no-overlap") {
      res.setHeader("content-range", `bytes */${size}`);
      return httpError(
        res,
        416,
        range === "invalid" ? "invalid range" : "invalid range: failed to overlap",
      );
    }
    if (range === undefined) {
      res.writeHead(200, { ...headers, "content-length": String(size) });
      return await sendFile(file, 0, size, res, r.signal);
    }
    res.writeHead(206, {
      ...headers,
      "content-length": String(range.length),
      "content-range": `bytes ${range.start}-${range.start + range.length - 1}/${size}`,
    });
    await sendFile(file, range.start, range.length, res, r.signal);
  } finally {
    file.close();
  }
}

async function serveDirectory(
  r: KubeletRequest,
  res: ServerResponse,
  path: string,
  info: Deno.FileInfo,
  logger: Logger,
): Promise<void> {
  if (notModified(r, res, info.mtime)) return;
  const names: string[] = [];
  try {
    for await (const e of Deno.readDir(path)) names.push(e.isDirectory ? `${e.name}/` : e.name);
  } catch (e) {
    logger.error(e, "http: error reading directory", { path });
    return httpError(res, 500, "Error reading directory");
  }
  names.sort((a, b) => (a.replace(/\/$/, "") < b.replace(/\/$/, "") ? -1 : 1));
  const headers: Record<string, string> = { "content-type": "text/html; charset=utf-8" };
  if (info.mtime) headers["last-modified"] = info.mtime.toUTCString();
  res.writeHead(200, headers);
  res.write(`<!doctype html>\n<meta name="viewport" content="width=device-width">\n<pre>\n`);
  for (const n of names) res.write(`<a href="${goPathURL(n)}">${htmlEscape(n)}</a>\n`);
  res.end("</pre>\n");
}

function within(root: string, path: string): boolean {
  return path === root || path.startsWith(root.endsWith("/") ? root : `${root}/`);
}

/**
 * `/logs/<path>`: the file or directory listing under the node log directory. The path is
 * cleaned as Go's http.Dir does (so `..` cannot climb above the directory), and a symlink that
 * resolves outside the directory is answered as not found.
 */
async function serveNodeLogs(
  opts: LogRoutesOptions,
  r: KubeletRequest,
  res: ServerResponse,
): Promise<void> {
  if (!onlyGet(r, res)) return;
  const urlPath = nodeLogPath(r, res);
  if (urlPath !== undefined) await serveNodeLogFile(opts, r, res, urlPath);
}

/** The decoded path under `/logs` (with its leading `/`), or undefined once answered. */
function nodeLogPath(r: KubeletRequest, res: ServerResponse): string | undefined {
  const prefix = "/logs/";
  const rawPath = r.url.pathname;
  let refusal: [number, string] | undefined;
  let urlPath = "";
  if (!rawPath.startsWith(prefix)) refusal = [404, "404 page not found"];
  else {
    try {
      urlPath = decodeURIComponent(rawPath.slice(prefix.length - 1));
      if (urlPath.includes("\0")) refusal = [400, "invalid character in file path"];
    } catch {
      refusal = [400, "invalid URL escape"];
    }
  }
  if (refusal === undefined) return urlPath;
  httpError(res, ...refusal);
}

/**
 * `/logs/` with enableSystemLogQuery (upstream's handler in kubelet.go Run): a query is decoded
 * (400 for values that do not parse), must come without a path (406), is validated (406);
 * services are streamed as journal_copy.ts writes them, one file is served as `/logs/<file>`
 * would be. A request without query parameters is the file server's.
 */
async function serveNodeLogQuery(
  opts: LogRoutesOptions,
  r: KubeletRequest,
  res: ServerResponse,
): Promise<void> {
  if (!onlyGet(r, res)) return;
  const urlPath = nodeLogPath(r, res);
  if (urlPath === undefined) return;
  const query = parseNodeLogQuery(goParseQuery(r.url.search.slice(1)));
  if (query === undefined) return await serveNodeLogFile(opts, r, res, urlPath);
  if ("errors" in query) return httpError(res, 400, aggregateError(query.errors));
  if (urlPath !== "/" && urlPath !== "//") {
    return httpError(res, 406, "path not allowed in query mode");
  }
  const root = opts.nodeLogDirectory ?? NODE_LOG_DIR;
  const errors = await validateNodeLogQuery(query, root);
  if (errors.length > 0) return httpError(res, 406, aggregateError(errors));
  if (query.services.length > 0) return await streamNodeLogQuery(opts, r, res, query);
  // Validation leaves exactly one file, relative to the log directory.
  await serveNodeLogFile(opts, r, res, `/${query.files[0]}`);
}

/** The answer to a query of services, gzip-encoded when the client asks for exactly "gzip". */
async function streamNodeLogQuery(
  opts: LogRoutesOptions,
  r: KubeletRequest,
  res: ServerResponse,
  query: NodeLogQuery,
): Promise<void> {
  const headers: Record<string, string> = { "content-type": "text/plain;charset=UTF-8" };
  const gzip = r.req.headers["accept-encoding"] === "gzip";
  if (gzip) headers["content-encoding"] = "gzip";
  res.writeHead(200, headers);
  const out = responseWriter(res);
  let write = (chunk: Uint8Array) => out.write(chunk);
  let finish = async () => {};
  if (gzip) {
    const compress = new CompressionStream("gzip") as TransformStream<Uint8Array, Uint8Array>;
    const sent = compress.readable.pipeTo(
      new WritableStream({ write: (chunk) => out.write(chunk) }),
    );
    const input = compress.writable.getWriter();
    write = (chunk) => input.write(chunk);
    finish = async () => {
      await input.close();
      await sent;
    };
  }
  try {
    await copyNodeLogQuery(query, write, {
      journalctl: opts.journalctl,
      logDir: opts.nodeLogDirectory,
      timeoutMs: opts.nodeLogQueryTimeoutMs,
    }, r.signal);
    await finish();
    res.end();
  } catch (e) {
    if (!r.signal.aborted) {
      opts.logger.v(2).info("Node log query ended early", { err: message(e) });
    }
    res.destroy();
  }
}

/** `/logs/<urlPath>` from the node log directory, as http.FileServer serves it. */
async function serveNodeLogFile(
  opts: LogRoutesOptions,
  r: KubeletRequest,
  res: ServerResponse,
  urlPath: string,
): Promise<void> {
  const root = opts.nodeLogDirectory ?? NODE_LOG_DIR;
  if (urlPath.endsWith("/index.html")) return localRedirect(r, res, "./");
  const name = posix.normalize(urlPath).replace(/\/+$/, "") || "/";
  const cleaned = posix.resolve("/", name);
  const candidate = join(root, cleaned);
  let real: string;
  let realRoot: string;
  let info: Deno.FileInfo;
  try {
    realRoot = await Deno.realPath(root);
    real = await Deno.realPath(candidate);
    if (!within(realRoot, real)) {
      opts.logger.v(2).info("Refused a node log path that leaves the log directory", {
        path: cleaned,
      });
      return httpError(res, 404, "404 page not found");
    }
    info = await Deno.stat(real);
  } catch (e) {
    return fileError(res, e);
  }
  const base = posix.basename(urlPath) || ".";
  if (info.isDirectory) {
    if (!urlPath.endsWith("/")) return localRedirect(r, res, `${goPathURL(base)}/`);
    let index: { path: string; info: Deno.FileInfo } | undefined;
    try {
      const path = await Deno.realPath(join(real, "index.html"));
      const indexInfo = await Deno.stat(path);
      if (indexInfo.isFile && within(realRoot, path)) index = { path, info: indexInfo };
    } catch {
      // no index page: list the directory
    }
    if (index) return await serveFile(r, res, index.path, index.info);
    return await serveDirectory(r, res, real, info, opts.logger);
  }
  if (urlPath.endsWith("/")) return localRedirect(r, res, `../${goPathURL(base)}`);
  await serveFile(r, res, real, info);
}
