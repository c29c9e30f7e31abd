/**
 * @module
 * The kubelet API server (`address:port`, default 0.0.0.0:10250): HTTPS with the serving
 * certificate, every request authenticated (client certificate, bearer token, or anonymous when
 * enabled) and authorized (as the `nodes` resource and its subresources) before it reaches its
 * route; upgrade requests (exec, attach, port-forward) go through the same checks. Routes are
 * given by the modules that own them (logs, streaming, stats, ...) as {@link Route}s. Built on
 * `node:https`, since Deno.serve cannot ask for client certificates; the peer certificate is
 * verified by the {@link Authenticator}, not by the TLS layer (see shared/ENVIRONMENT.md).
 * A request net/http would not read gets its answer byte for byte: 431 for a head over
 * MaxHeaderBytes plus Go's slop, 400 for a malformed one.
 * Corresponds to upstream `pkg/kubelet/server/server.go` (Server, InstallAuthFilter,
 * ListenAndServeKubeletServer).
 */

import { createServer, type Server } from "node:https";
import {
  createServer as createHttpServer,
  type IncomingMessage,
  type Server as HttpServer,
  type ServerResponse,
} from "node:http";
import type { Duplex } from "node:stream";
import type { TLSSocket } from "node:tls";
import type { Logger } from "../klog/klog.ts";
import type { KubeletMetrics } from "../metrics/metrics.ts";
import { cipherAllowed } from "./tls.ts";

/** Who made a request (upstream user.Info). */
export interface UserInfo {
  readonly name: string;
  readonly uid?: string;
  readonly groups: readonly string[];
  readonly extra?: Readonly<Record<string, readonly string[]>>;
}

/** What an authorizer is asked about a request (upstream authorizer.Attributes, trimmed). */
export interface RequestAttributes {
  readonly user: UserInfo;
  /** get, list, watch, create, update, patch, delete (from the HTTP method, as upstream). */
  readonly verb: string;
  /** Always "nodes" for the kubelet API. */
  readonly resource: string;
  /** proxy, stats, metrics, log, spec, pods, configz, healthz, checkpoint, ... */
  readonly subresource: string;
  /** The node name. */
  readonly name: string;
  readonly apiGroup: string;
  readonly apiVersion: string;
  /** The request path, for non-resource checks and messages. */
  readonly path: string;
  /**
   * Further attribute sets the authorizer tries when this one is denied (fine-grained kubelet
   * authorization: `pods`, then `proxy`); the 403 names them all.
   */
  readonly alternatives?: readonly RequestAttributes[];
}

/** Authenticates a request; undefined when no method accepted it (a 401). */
export interface Authenticator {
  authenticate(req: IncomingMessage, signal?: AbortSignal): Promise<UserInfo | undefined>;
}

/** Authorizes a request (upstream authorizer.Authorizer). */
export interface Authorizer {
  authorize(
    attrs: RequestAttributes,
    signal?: AbortSignal,
  ): Promise<{ allowed: boolean; reason: string }>;
}

/** Who a request on the read-only port is: nobody checked. */
const ANONYMOUS: UserInfo = { name: "system:anonymous", groups: ["system:unauthenticated"] };

/** Maps a request to its authorization attributes (upstream NewNodeAuthorizerAttributesGetter). */
export type AttributesGetter = (
  user: UserInfo,
  req: IncomingMessage,
  url: URL,
) => RequestAttributes;

/** One request as a route sees it, after authentication and authorization. */
export interface KubeletRequest {
  readonly req: IncomingMessage;
  readonly url: URL;
  readonly user: UserInfo;
  /** The path parameters named in the route's pattern (`:name`, or `*rest` for the tail). */
  readonly params: Readonly<Record<string, string>>;
  /** Aborted when the client goes away or the server stops. */
  readonly signal: AbortSignal;
}

/** Answers a plain request. */
export type Handler = (r: KubeletRequest, res: ServerResponse) => Promise<void> | void;

/** Takes over the connection of an upgrade request (exec, attach, port-forward). */
export type UpgradeHandler = (
  r: KubeletRequest,
  socket: Duplex,
  head: Uint8Array,
) => Promise<void> | void;

/**
 * A route: a path pattern such as `/containerLogs/:namespace/:pod/:container` or `/logs/*path`,
 * the methods it answers (all when unset), and a handler for plain requests and/or upgrades.
 */
export interface Route {
  readonly pattern: string;
  readonly methods?: readonly string[];
  readonly handler?: Handler;
  readonly upgrade?: UpgradeHandler;
}

/** TLS settings (from tlsCertFile/tlsPrivateKeyFile or the self-signed pair, tlsMinVersion, tlsCipherSuites). */
export interface ServerTLS {
  /**
   * PEM certificate chain. Undefined while a requested serving certificate has not come
   * (serverTLSBootstrap): handshakes fail until {@link KubeletAPIServer.setCertificate}.
   */
  readonly cert?: string;
  /** PEM private key. */
  readonly key?: string;
  /** OpenSSL's name, e.g. "TLSv1.2". @default Node's default */
  readonly minVersion?: "TLSv1" | "TLSv1.1" | "TLSv1.2" | "TLSv1.3";
  /** OpenSSL cipher list, from tlsCipherSuites. @default Node's default */
  readonly ciphers?: string;
}

/** What {@link serveKubeletAPI} needs. */
export interface KubeletAPIOptions {
  readonly hostname: string;
  readonly port: number;
  /** Unset: plain HTTP, only for the read-only port. */
  readonly tls?: ServerTLS;
  /** Required unless {@link readOnly}. */
  readonly authenticator?: Authenticator;
  /** Required unless {@link readOnly}. */
  readonly authorizer?: Authorizer;
  /** Required unless {@link readOnly}. */
  readonly attributes?: AttributesGetter;
  /**
   * The read-only port (readOnlyPort): no authentication or authorization, as upstream serves
   * it. Give it only routes that may be read by anyone.
   */
  readonly readOnly?: boolean;
  readonly routes: readonly Route[];
  readonly logger: Logger;
  /** Aborting it closes the server and every connection. */
  readonly signal: AbortSignal;
  /**
   * Go's MaxHeaderBytes: a request whose head (request line, header lines and the blank line)
   * is longer than this plus {@link HEADER_SLOP} bytes is answered 431 and the connection
   * closed. @default 1 MiB (what ListenAndServeKubeletServer sets, Go's DefaultMaxHeaderBytes)
   */
  readonly maxHeaderSize?: number;
  /** kubelet_http_requests_total, _duration_seconds and _inflight_requests. @default none */
  readonly metrics?: HttpMetrics;
}

/** The metrics {@link serveKubeletAPI} records for every request. */
export type HttpMetrics = Pick<
  KubeletMetrics,
  "httpRequests" | "httpRequestsDuration" | "httpInflightRequests"
>;

/**
 * The `path` label values of upstream's server (its metrics buckets: the root of each handler it
 * installs with the default flags, `metrics/<name>` for the metrics endpoints); any other path
 * is "other". /metrics/slis is not among them upstream either.
 */
const METRIC_BUCKETS: ReadonlySet<string> = new Set([
  "healthz",
  "pods",
  "stats",
  "metrics",
  "metrics/cadvisor",
  "metrics/probes",
  "metrics/resource",
  "run",
  "exec",
  "attach",
  "portForward",
  "containerLogs",
  "configz",
  "runningpods",
  "checkpoint",
  "pprof",
  "logs",
  "debug",
]);

/** Methods upstream labels as themselves; any other is "other". */
const METRIC_METHODS: ReadonlySet<string> = new Set([
  "OPTIONS",
  "GET",
  "HEAD",
  "POST",
  "PUT",
  "DELETE",
  "TRACE",
  "CONNECT",
]);

/** Paths upstream counts as long-running (streaming). */
const LONG_RUNNING: ReadonlySet<string> = new Set(["exec", "attach", "portforward", "debug"]);

/**
 * The labels upstream's ServeHTTP gives a request: the method (or "other"), the path's bucket
 * (upstream getURLRootPath: `metrics/<name>` for the metrics endpoints, else the first segment;
 * "other" when no handler has that root), the server (readwrite, or readonly for the read-only
 * port) and whether the bucket is a streaming one.
 */
export function httpMetricLabels(
  method: string,
  path: string,
  readOnly: boolean,
): Record<string, string> {
  const parts = path.replace(/^\//, "").split("/", 3);
  const root = parts[0] === "metrics" && parts.length > 1
    ? `${parts[0]}/${parts[1]}`
    : parts[0] ?? "";
  const bucket = METRIC_BUCKETS.has(root) ? root : "other";
  return {
    method: METRIC_METHODS.has(method) ? method : "other",
    path: bucket,
    server_type: readOnly ? "readonly" : "readwrite",
    long_running: String(LONG_RUNNING.has(bucket)),
  };
}

/** A listening server. */
export interface KubeletAPIServer {
  /** The port it listens on (useful with port 0). */
  readonly port: number;
  /** Settles once the server has closed. */
  readonly finished: Promise<void>;
  /** Serves a new certificate to connections from now on (a rotated serving certificate). */
  setCertificate(cert: string, key: string): void;
}

const STATUS_TEXT: Readonly<Record<number, string>> = {
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  405: "Method Not Allowed",
  500: "Internal Server Error",
};

/** Go's "bufio slop" added to MaxHeaderBytes: the read limit of a request head is their sum. */
export const HEADER_SLOP = 4096;

/** How long a refused connection is kept open, as Go's rstAvoidanceDelay. */
const RST_AVOIDANCE_MS = 500;

/**
 * The whole answer net/http's conn.serve writes for a request it cannot read, byte for byte:
 * a head over the limit (431), or a malformed request (400).
 */
export function refusal(status: 400 | 431): string {
  const text = status === 431 ? "431 Request Header Fields Too Large" : "400 Bad Request";
  return `HTTP/1.1 ${text}\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n${text}`;
}

/**
 * Answers a request that cannot be served with {@link refusal} and closes the connection. What
 * the client still sends is read and dropped for {@link RST_AVOIDANCE_MS} (Go half-closes and
 * waits as long), so the answer is not lost to a reset while the client is still writing; the
 * HTTP parser is detached first, so nothing after it is served.
 */
function hangUp(socket: Duplex, status: 400 | 431): void {
  socket.removeAllListeners("data");
  socket.on("data", () => {});
  socket.on("error", () => {});
  socket.write(refusal(status));
  const timer = setTimeout(() => socket.destroy(), RST_AVOIDANCE_MS);
  socket.once("close", () => clearTimeout(timer));
}

/**
 * The length of a request's head as sent: request line, header lines and the blank line,
 * counted from what the parser kept (header bytes arrive as latin1, one char a byte). Optional
 * whitespace around a header value is trimmed by the parser, so this is a lower bound for a
 * client that pads values; it is exact for the usual `Name: value` form.
 */
export function requestHeadBytes(req: IncomingMessage): number {
  let n = `${req.method} ${req.url} HTTP/${req.httpVersion}\r\n\r\n`.length;
  const raw = req.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) n += raw[i]!.length + 2 + raw[i + 1]!.length + 2;
  return n;
}

interface CompiledRoute {
  readonly route: Route;
  readonly match: (path: string) => Record<string, string> | undefined;
}

/** decodeURIComponent, or undefined for a bad escape such as `%zz`. */
function decode(s: string): string | undefined {
  try {
    return decodeURIComponent(s);
  } catch {
    return undefined;
  }
}

/**
 * Turns `/a/:x/*rest` into a matcher returning the named parts, or undefined (also when a part
 * has a bad escape).
 */
export function compilePattern(
  pattern: string,
): (path: string) => Record<string, string> | undefined {
  const parts = pattern.split("/").filter((p) => p !== "");
  return (path) => {
    const segs = path.split("/").filter((p) => p !== "");
    const params: Record<string, string> = {};
    for (let i = 0; i < parts.length; i++) {
      const p = parts[i]!;
      if (p.startsWith("*")) {
        const rest = segs.slice(i).map(decode);
        if (rest.some((r) => r === undefined)) return undefined;
        params[p.slice(1)] = rest.join("/");
        return params;
      }
      const s = segs[i];
      if (s === undefined) return undefined;
      if (p.startsWith(":")) {
        const d = decode(s);
        if (d === undefined) return undefined;
        params[p.slice(1)] = d;
      } else if (p !== s) return undefined;
    }
    return segs.length === parts.length ? params : undefined;
  };
}

/** Writes a plain-text answer, as Go's http.Error does. */
export function httpError(res: ServerResponse, status: number, message: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(status, {
    "content-type": "text/plain; charset=utf-8",
    "x-content-type-options": "nosniff",
  });
  res.end(message.endsWith("\n") ? message : `${message}\n`);
}

/** Writes a JSON answer. */
export function writeJson(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
}

/** Upstream's 403 text (InstallAuthFilter). */
export function forbiddenMessage(a: RequestAttributes): string {
  const subresources = [a, ...(a.alternatives ?? [])].map((x) => x.subresource).join(" ");
  return `Forbidden (user=${a.user.name}, verb=${a.verb}, resource=${a.resource}, subresource(s)=[${subresources}])`;
}

/** Starts the kubelet API server; resolves once it listens. */
export async function serveKubeletAPI(opts: KubeletAPIOptions): Promise<KubeletAPIServer> {
  const { logger } = opts;
  const routes: CompiledRoute[] = opts.routes.map((route) => ({
    route,
    match: compilePattern(route.pattern),
  }));
  // Node's parser counts only the URL and the header names and values, never more than the
  // head's length: a parser limit of Go's whole read limit refuses nothing Go reads, and the
  // head's real length is checked once parsed (tooLarge).
  const headLimit = (opts.maxHeaderSize ?? 1 << 20) + HEADER_SLOP;
  const server: Server | HttpServer = opts.tls
    ? createServer({
      cert: opts.tls.cert,
      key: opts.tls.key,
      minVersion: opts.tls.minVersion,
      ciphers: opts.tls.ciphers,
      // The client certificate is asked for but verified by the authenticator (module doc).
      requestCert: true,
      rejectUnauthorized: false,
      maxHeaderSize: headLimit,
    })
    : createHttpServer({ maxHeaderSize: headLimit });
  const { authenticator, authorizer, attributes } = opts;
  let auth: "none" | {
    authenticator: Authenticator;
    authorizer: Authorizer;
    attributes: AttributesGetter;
  } = "none";
  if (!opts.readOnly) {
    if (!authenticator || !authorizer || !attributes) {
      throw new Error(
        "the kubelet API needs an authenticator, an authorizer and an attributes getter unless it is the read-only port",
      );
    }
    auth = { authenticator, authorizer, attributes };
  }

  /** The route for a request, or why there is none: 404 (no path) or 405 (no method). */
  const find = (method: string, path: string, upgrade: boolean) => {
    let status = 404;
    for (const c of routes) {
      const params = c.match(path);
      if (!params) continue;
      if (upgrade ? !c.route.upgrade : !c.route.handler) continue;
      if (c.route.methods && !c.route.methods.includes(method)) {
        status = 405;
        continue;
      }
      return { route: c.route, params, status: 200 };
    }
    return { route: undefined, params: undefined, status };
  };
  const notFound = (status: number) =>
    status === 405 ? "405: Method Not Allowed" : "404 page not found";

  /** Authenticates and authorizes; returns the request or answers the failure itself. */
  const admit = async (
    req: IncomingMessage,
    params: Record<string, string>,
    signal: AbortSignal,
    fail: (status: number, message: string) => void,
  ): Promise<KubeletRequest | undefined> => {
    const url = new URL(req.url ?? "/", "https://kubelet");
    if (auth === "none") return { req, url, user: ANONYMOUS, params, signal };
    let user: UserInfo | undefined;
    try {
      user = await auth.authenticator.authenticate(req, signal);
    } catch (e) {
      logger.error(e, "Unable to authenticate the request");
      fail(401, "Unauthorized");
      return undefined;
    }
    if (!user) {
      fail(401, "Unauthorized");
      return undefined;
    }
    const attrs = auth.attributes(user, req, url);
    let decision: { allowed: boolean; reason: string };
    try {
      decision = await auth.authorizer.authorize(attrs, signal);
    } catch (e) {
      logger.error(e, "Authorization error", { user: user.name, verb: attrs.verb });
      fail(
        500,
        `Authorization error (user=${user.name}, verb=${attrs.verb}, resource=${attrs.resource}, subresource(s)=[${attrs.subresource}])`,
      );
      return undefined;
    }
    if (!decision.allowed) {
      logger.v(2).info("Forbidden", { user: user.name, verb: attrs.verb, reason: decision.reason });
      fail(403, forbiddenMessage(attrs));
      return undefined;
    }
    return { req, url, user, params, signal };
  };

  /** A head Go would not have read to its end: answered 431 on the raw connection. */
  const tooLarge = (req: IncomingMessage): boolean => {
    if (requestHeadBytes(req) <= headLimit) return false;
    logger.v(4).info("Request header fields too large", { limit: headLimit });
    hangUp(req.socket, 431);
    return true;
  };

  /** Counts a request as upstream's ServeHTTP does; the returned function ends it. */
  const track = (method: string, path: string): () => void => {
    const m = opts.metrics;
    if (!m) return () => {};
    const labels = httpMetricLabels(method, path, opts.readOnly ?? false);
    const start = performance.now();
    m.httpRequests.inc(labels);
    m.httpInflightRequests.set(m.httpInflightRequests.get(labels) + 1, labels);
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      m.httpInflightRequests.set(m.httpInflightRequests.get(labels) - 1, labels);
      m.httpRequestsDuration.observe((performance.now() - start) / 1000, labels);
    };
  };

  server.on("request", (req: IncomingMessage, res: ServerResponse) => {
    if (tooLarge(req)) return;
    const ctrl = new AbortController();
    const onClose = () => ctrl.abort();
    res.on("close", onClose);
    const path = new URL(req.url ?? "/", "https://kubelet").pathname;
    res.on("close", track(req.method ?? "GET", path));
    const signal = AbortSignal.any([opts.signal, ctrl.signal]);
    const found = find(req.method ?? "GET", path, false);
    (async () => {
      const r = await admit(req, found.params ?? {}, signal, (s, m) => httpError(res, s, m));
      if (!r) return;
      if (!found.route) return httpError(res, found.status, notFound(found.status));
      await found.route.handler!(r, res);
    })().catch((e) => {
      if (!signal.aborted) logger.error(e, "Request failed", { path });
      httpError(res, 500, "Internal Server Error");
    });
  });

  server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Uint8Array) => {
    if (tooLarge(req)) return;
    const ctrl = new AbortController();
    const path = new URL(req.url ?? "/", "https://kubelet").pathname;
    socket.on("close", track(req.method ?? "GET", path));
    socket.on("close", () => ctrl.abort());
    socket.on("error", () => ctrl.abort());
    const signal = AbortSignal.any([opts.signal, ctrl.signal]);
    const found = find(req.method ?? "GET", path, true);
    const fail = (status: number, message: string) => {
      const text = `${message}\n`;
      socket.end(
        `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? "Error"}\r\n` +
          `Content-Type: text/plain; charset=utf-8\r\nContent-Length: ${
            new TextEncoder().encode(text).length
          }\r\n` +
          `Connection: close\r\n\r\n${text}`,
      );
    };
    (async () => {
      const r = await admit(req, found.params ?? {}, signal, fail);
      if (!r) return;
      if (!found.route) return fail(found.status, notFound(found.status));
      await found.route.upgrade!(r, socket, head);
    })().catch((e) => {
      if (!signal.aborted) logger.error(e, "Upgrade request failed", { path });
      socket.destroy();
    });
  });

  // Deno's TLS ignores `ciphers`: a connection whose suite tlsCipherSuites does not list is
  // closed here instead (TLS 1.3 suites are always allowed, as Go does).
  const ciphers = opts.tls?.ciphers;
  if (ciphers !== undefined) {
    server.on("secureConnection", (s: TLSSocket) => {
      const cipher = s.getCipher();
      if (cipherAllowed(ciphers, cipher)) return;
      logger.v(2).info("TLS cipher suite not allowed", { cipher: cipher.name });
      s.destroy();
    });
  }
  let hasCert = opts.tls?.cert !== undefined;
  server.on("tlsClientError", (e: Error, s: Duplex & { remoteAddress?: string }) => {
    if (!hasCert) {
      // Upstream's GetCertificate fails the handshake with this, and net/http logs it.
      logger.info(
        `http: TLS handshake error from ${
          s?.remoteAddress ?? ""
        }: no serving certificate available for the kubelet`,
      );
      return;
    }
    logger.v(4).info("TLS handshake failed", { err: e.message });
  });
  // A request the parser refuses gets Go's answer: 431 past the header limit, 400 when
  // malformed; a connection error (a reset, a timeout) gets none. The parser may report the
  // same connection again as more bytes arrive: only the first report answers.
  const refused = new WeakSet<Duplex>();
  server.on("clientError", (e: Error & { code?: string }, socket: Duplex) => {
    if (refused.has(socket)) return;
    refused.add(socket);
    if (!e.code?.startsWith("HPE_") || !socket.writable) return void socket.destroy();
    logger.v(4).info("Unreadable request", { err: e.message });
    hangUp(socket, e.code === "HPE_HEADER_OVERFLOW" ? 431 : 400);
  });

  const finished = new Promise<void>((resolve) => server.on("close", () => resolve()));
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port, opts.hostname, () => {
      server.off("error", reject);
      resolve();
    });
  });
  // Every connection, upgraded ones included, is closed on stop: close() alone waits for them.
  const sockets = new Set<Duplex>();
  server.on(opts.tls ? "secureConnection" : "connection", (s: Duplex) => {
    sockets.add(s);
    s.once("close", () => sockets.delete(s));
  });
  const stop = () => {
    server.close();
    server.closeAllConnections?.();
    for (const s of sockets) s.destroy();
  };
  if (opts.signal.aborted) stop();
  else opts.signal.addEventListener("abort", stop, { once: true });
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : opts.port;
  const setCertificate = (cert: string, key: string) => {
    if (!opts.tls) throw new Error("the read-only server has no certificate to replace");
    (server as Server).setSecureContext({
      cert,
      key,
      minVersion: opts.tls.minVersion,
      ciphers: opts.tls.ciphers,
    });
    hasCert = true;
  };
  return { port, finished, setCertificate };
}
