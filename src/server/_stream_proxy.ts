/**
 * @module
 * The upgrade proxy behind exec, attach and port-forward: dials the container runtime's
 * streaming server (on loopback, plain HTTP), replays the client's upgrade request to the URL the
 * runtime handed out, relays the runtime's answer, and after a 101 pipes bytes both ways until
 * either side closes or the connection idles out. Private to `streaming.ts`. Corresponds
 * to upstream `k8s.io/apimachinery/pkg/util/proxy/upgradeaware.go` (UpgradeAwareHandler.tryUpgrade,
 * with the kubelet's `responder`), redirect and rate limiting left out as the kubelet does.
 */

import { STATUS_CODES } from "node:http";
import type { IncomingMessage } from "node:http";
import { connect, isIP, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";

/** Longest response header section accepted from the runtime. */
const MAX_HEAD_BYTES = 1 << 20;
/** How long a refused upgrade's answer may take to reach the client (upstream's deadline). */
const REFUSAL_DEADLINE_MS = 10_000;

/** A streaming URL the kubelet will not proxy to. */
export class StreamingUrlError extends Error {
  override name = "StreamingUrlError";
}

/** True for an IP literal in 127.0.0.0/8, `::1` or `::ffff:127.0.0.0/104`, in any spelling. */
export function isLoopbackHost(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, "");
  if (isIP(host) === 4) return host.startsWith("127.");
  if (isIP(host) !== 6) return false;
  // The WHATWG URL parser prints IPv6 in its shortest form, and v4-mapped tails in hex.
  const canonical = new URL(`http://[${host}]/`).hostname;
  return canonical === "[::1]" || /^\[::ffff:7f[0-9a-f]{2}:[0-9a-f]{1,4}\]$/.test(canonical);
}

/**
 * Checks the URL a CRI Exec/Attach/PortForward call returned: absolute, plain HTTP, and on a
 * loopback address, since the runtime's streaming server is unauthenticated.
 */
export function parseStreamingUrl(raw: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new StreamingUrlError(
      `invalid streaming URL from the container runtime: ${JSON.stringify(raw)}: ` +
        "expected an absolute http URL such as http://127.0.0.1:42937/exec/token",
    );
  }
  if (url.protocol === "https:") {
    throw new StreamingUrlError(
      `streaming URL ${JSON.stringify(raw)}: https streaming servers are not supported yet`,
    );
  }
  if (url.protocol !== "http:") {
    throw new StreamingUrlError(
      `streaming URL ${JSON.stringify(raw)}: scheme ${
        JSON.stringify(url.protocol.slice(0, -1))
      } is not supported: expected http`,
    );
  }
  if (!isLoopbackHost(url.hostname)) {
    throw new StreamingUrlError(
      `refusing to proxy to the container runtime's streaming server at ${
        JSON.stringify(url.host)
      }: its host is not a loopback address (configure the runtime to stream on 127.0.0.1)`,
    );
  }
  return url;
}

/** Writes a whole HTTP/1.1 answer on a raw socket and closes it. */
export function writeRawResponse(
  socket: Duplex,
  status: number,
  body: string,
  headers: Readonly<Record<string, string>> = {},
): void {
  const bytes = new TextEncoder().encode(body);
  const lines = [`HTTP/1.1 ${status} ${STATUS_CODES[status] ?? "Error"}`];
  const all: Record<string, string> = {
    "Content-Type": "text/plain; charset=utf-8",
    ...headers,
    "Content-Length": String(bytes.length),
    "Connection": "close",
  };
  for (const [k, v] of Object.entries(all)) lines.push(`${k}: ${v}`);
  if (socket.destroyed || socket.writableEnded) return;
  socket.write(`${lines.join("\r\n")}\r\n\r\n`);
  socket.end(bytes);
}

/** Go's http.Error on a raw socket: the text and a newline, nosniff. */
export function writeRawHttpError(socket: Duplex, status: number, message: string): void {
  writeRawResponse(socket, status, `${message}\n`, { "X-Content-Type-Options": "nosniff" });
}

/** What {@link proxyUpgrade} needs. */
export interface ProxyUpgradeOptions {
  /** The runtime's streaming URL, already checked by {@link parseStreamingUrl}. */
  readonly target: URL;
  /** The client's upgrade request (method and headers are replayed). */
  readonly req: IncomingMessage;
  /** The client's connection, taken over. */
  readonly client: Duplex;
  /** Bytes the client sent after its request headers. */
  readonly head: Uint8Array;
  /** Close both sides after this long without a byte either way; 0 for never. */
  readonly idleTimeoutMs: number;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Aborting it closes both sides. */
  readonly signal: AbortSignal;
}

interface BackendHead {
  /** Every byte read so far: the header section and whatever followed it. */
  readonly bytes: Uint8Array;
  readonly status: number;
  readonly contentLength: number | undefined;
}

/** The upgrade request as the runtime's server should see it: the client's, aimed at the URL. */
function upgradeRequest(req: IncomingMessage, target: URL): string {
  const lines = [`${req.method ?? "GET"} ${target.pathname}${target.search} HTTP/1.1`];
  lines.push(`Host: ${req.headers.host ?? target.host}`);
  const prior: string[] = [];
  const raw = req.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!;
    const value = raw[i + 1]!;
    const lower = name.toLowerCase();
    if (lower === "host") continue;
    if (lower === "x-forwarded-for") {
      prior.push(value);
      continue;
    }
    lines.push(`${name}: ${value}`);
  }
  // utilnet.AppendForwardedForHeader: the client's address after any earlier proxies'.
  const clientIP = req.socket.remoteAddress;
  if (clientIP) lines.push(`X-Forwarded-For: ${[...prior, clientIP].join(", ")}`);
  else if (prior.length > 0) lines.push(`X-Forwarded-For: ${prior.join(", ")}`);
  return `${lines.join("\r\n")}\r\n\r\n`;
}

function dial(target: URL, signal: AbortSignal): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const host = target.hostname.replace(/^\[|\]$/g, "");
    const port = target.port === "" ? 80 : Number(target.port);
    const socket = connect({ host, port });
    const onAbort = () => {
      socket.destroy();
      reject(signal.reason);
    };
    if (signal.aborted) return onAbort();
    signal.addEventListener("abort", onAbort, { once: true });
    socket.once("connect", () => {
      signal.removeEventListener("abort", onAbort);
      socket.off("error", reject);
      resolve(socket);
    });
    socket.once("error", (e) => {
      signal.removeEventListener("abort", onAbort);
      reject(e);
    });
  });
}

function indexOfHeadEnd(buf: Uint8Array): number {
  for (let i = 3; i < buf.length; i++) {
    if (buf[i] === 10 && buf[i - 1] === 13 && buf[i - 2] === 10 && buf[i - 3] === 13) return i + 1;
  }
  return -1;
}

/** Reads the runtime's answer head, as Go's http.ReadResponse would, leaving the socket paused. */
function readBackendHead(backend: Socket): Promise<BackendHead> {
  return new Promise((resolve, reject) => {
    let buf = new Uint8Array(0);
    const done = () => {
      backend.pause();
      backend.off("data", onData);
      backend.off("end", onEnd);
      backend.off("error", onError);
    };
    const onData = (chunk: Uint8Array) => {
      const next = new Uint8Array(buf.length + chunk.length);
      next.set(buf);
      next.set(chunk, buf.length);
      buf = next;
      const end = indexOfHeadEnd(buf);
      if (end < 0) {
        if (buf.length > MAX_HEAD_BYTES) {
          done();
          reject(new Error("malformed HTTP response: header section too long"));
        }
        return;
      }
      done();
      const text = new TextDecoder().decode(buf.subarray(0, end));
      const [statusLine = "", ...headerLines] = text.split("\r\n");
      const m = /^HTTP\/\d\.\d (\d{3})(?: .*)?$/.exec(statusLine);
      if (!m) return reject(new Error(`malformed HTTP response ${JSON.stringify(statusLine)}`));
      let contentLength: number | undefined;
      for (const line of headerLines) {
        const cl = /^content-length:\s*(\d+)\s*$/i.exec(line);
        if (cl) contentLength = Number(cl[1]);
      }
      resolve({ bytes: buf, status: Number(m[1]), contentLength });
    };
    const onEnd = () => {
      done();
      reject(new Error(buf.length === 0 ? "EOF" : "unexpected EOF"));
    };
    const onError = (e: Error) => {
      done();
      reject(e);
    };
    backend.on("data", onData);
    backend.once("end", onEnd);
    backend.once("error", onError);
    backend.resume();
  });
}

/**
 * Relays a refused upgrade (status 400 and up) to the client, body included, then closes both;
 * the relay is bounded by upstream's 10 s deadline.
 */
async function relayRefusal(
  backend: Socket,
  client: Duplex,
  head: BackendHead,
  clock: Clock,
): Promise<void> {
  const headerEnd = indexOfHeadEnd(head.bytes);
  let remaining = head.contentLength === undefined
    ? Infinity
    : head.contentLength - (head.bytes.length - headerEnd);
  client.write(head.bytes);
  const deadline = new AbortController();
  await new Promise<void>((resolve) => {
    const finish = () => {
      backend.off("data", onData);
      deadline.abort();
      resolve();
    };
    const onData = (chunk: Uint8Array) => {
      const part = chunk.length > remaining ? chunk.subarray(0, remaining) : chunk;
      client.write(part);
      remaining -= part.length;
      if (remaining <= 0) finish();
    };
    if (remaining <= 0) return finish();
    backend.on("data", onData);
    backend.once("end", finish);
    backend.once("close", finish);
    backend.once("error", finish);
    backend.resume();
    clock.sleep(REFUSAL_DEADLINE_MS, deadline.signal).then(finish, () => {});
  });
  backend.destroy();
  client.end();
}

/**
 * Pipes bytes between `a` and `b` with back-pressure. When one side ends, the other is ended
 * after its pending bytes are written, then both are closed, as upstream closes both halves once
 * either copy returns. Resolves once both are closed.
 */
function pipeBoth(
  a: Duplex,
  b: Duplex,
  onActivity: () => void,
  signal: AbortSignal,
): Promise<void> {
  return new Promise((resolve) => {
    let closed = false;
    /** The side being ended after its peer's EOF; its own close then ends everything. */
    let draining: Duplex | undefined;
    const teardown = () => {
      if (closed) return;
      closed = true;
      signal.removeEventListener("abort", teardown);
      a.destroy();
      b.destroy();
      resolve();
    };
    const relay = (src: Duplex, dst: Duplex) => {
      src.on("data", (chunk: Uint8Array) => {
        onActivity();
        if (!dst.write(chunk)) src.pause();
      });
      dst.on("drain", () => {
        if (!closed) src.resume();
      });
      src.once("end", () => {
        if (draining) return teardown();
        draining = dst;
        dst.end(teardown);
      });
      src.once("error", teardown);
      src.once("close", () => {
        // The source closing after its EOF must not cut the other side's final bytes short.
        if (draining !== dst) teardown();
      });
    };
    relay(a, b);
    relay(b, a);
    if (signal.aborted) return teardown();
    signal.addEventListener("abort", teardown, { once: true });
    a.resume();
    b.resume();
  });
}

/**
 * Replays the client's upgrade request to `target` and, once the runtime answers 101, pipes the
 * two connections together. Failures before the pipe answer the client 500 with the error text
 * (upstream's responder); a refusal from the runtime (4xx/5xx) is relayed as is. Resolves once
 * both connections are closed.
 */
export async function proxyUpgrade(opts: ProxyUpgradeOptions): Promise<void> {
  const { client, logger, clock } = opts;
  const fail = (e: unknown) => {
    const message = e instanceof Error ? e.message : String(e);
    logger.error(e, "Error while proxying request");
    writeRawHttpError(client, 500, message);
  };
  let backend: Socket;
  try {
    backend = await dial(opts.target, opts.signal);
  } catch (e) {
    if (opts.signal.aborted) return void client.destroy();
    return fail(new Error(`error dialing backend: ${e instanceof Error ? e.message : e}`));
  }
  const onAbort = () => backend.destroy();
  opts.signal.addEventListener("abort", onAbort, { once: true });
  try {
    backend.write(upgradeRequest(opts.req, opts.target));
    if (opts.head.length > 0) backend.write(opts.head);
    let head: BackendHead;
    try {
      head = await readBackendHead(backend);
    } catch (e) {
      backend.destroy();
      if (opts.signal.aborted) return void client.destroy();
      return fail(e);
    }
    if (head.status !== 101 && head.status < 400) {
      backend.destroy();
      return fail(new Error(`invalid upgrade response: status code ${head.status}`));
    }
    if (head.status !== 101) {
      logger.v(6).info("Proxy upgrade error", { statusCode: head.status });
      return await relayRefusal(backend, client, head, clock);
    }
    client.write(head.bytes);
    let last = clock.now();
    const stop = new AbortController();
    const piped = pipeBoth(client, backend, () => (last = clock.now()), opts.signal).finally(() =>
      stop.abort()
    );
    if (opts.idleTimeoutMs > 0) {
      watchIdle(clock, opts.idleTimeoutMs, () => last, stop.signal).then((expired) => {
        if (!expired) return;
        logger.v(2).info("Streaming connection idle, closing it", {
          idleTimeout: `${opts.idleTimeoutMs}ms`,
          path: opts.target.pathname,
        });
        client.destroy();
        backend.destroy();
      });
    }
    await piped;
    logger.v(6).info("Disconnecting from backend proxy", { location: opts.target.href });
  } finally {
    opts.signal.removeEventListener("abort", onAbort);
  }
}

/** Resolves true once `idleMs` pass with no activity, false when `signal` aborts first. */
async function watchIdle(
  clock: Clock,
  idleMs: number,
  lastActivity: () => number,
  signal: AbortSignal,
): Promise<boolean> {
  for (;;) {
    const wait = lastActivity() + idleMs - clock.now();
    if (wait <= 0) return !signal.aborted;
    try {
      await clock.sleep(wait, signal);
    } catch {
      return false;
    }
  }
}
