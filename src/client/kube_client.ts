/**
 * @module
 * A small Kubernetes REST client on Deno's fetch: TLS with the kubeconfig's CA and client
 * certificate (or, for a cluster with `insecure-skip-tls-verify`, through `node:https` without
 * verifying the server's certificate, _insecure_transport.ts), client-side rate limiting, JSON bodies, apiserver `Status` errors as typed
 * errors, and watches as async iterables. It replaces client-go's clientset for the handful of
 * calls a kubelet makes (nodes, leases, pods, events) at a fraction of the memory that
 * `@kubernetes/client-node`'s generated clients cost; object types still come from client-node,
 * imported as types only. Corresponds to client-go's `rest.RESTClient` as the kubelet configures
 * it (kubeAPIQPS/kubeAPIBurst, user agent, a separate unthrottled heartbeat client), with
 * client-go's request metrics (rest_client_*; watches, as upstream's, are neither throttled nor
 * timed).
 */

import type { RestClientMetrics } from "../metrics/rest_client_metrics.ts";
import { abortable, type Clock } from "../util/clock.ts";
import type { RestConfig } from "./kubeconfig.ts";
import { TokenBucket } from "./rate_limiter.ts";
import { InsecureTransport, type TransportRequest } from "./_insecure_transport.ts";
import { linkSignals } from "../util/linked_signal.ts";

/** An error the apiserver answered with (a metav1.Status), or a transport failure (code 0). */
export class KubeApiError extends Error {
  override name = "KubeApiError";
  constructor(
    readonly method: string,
    readonly path: string,
    /** HTTP status; 0 when the request did not reach the apiserver. */
    readonly code: number,
    /** metav1.Status reason, e.g. "NotFound", "AlreadyExists", "Forbidden", "Conflict". */
    readonly reason: string,
    /** The apiserver's own message (a Go client's error text), or the transport's. */
    readonly statusMessage: string,
    options?: ErrorOptions,
  ) {
    super(
      `${method} ${path}: ${code === 0 ? "" : `${code} ${reason}: `}${statusMessage}`,
      options,
    );
  }
}

/** What a Go client's error says: the apiserver's message for an answer, else the whole text. */
export function apiErrorText(e: unknown): string {
  if (e instanceof KubeApiError && e.code !== 0) return e.statusMessage;
  return e instanceof Error ? e.message : String(e);
}

/** True for an apiserver answer with HTTP status `code`. */
export function isStatus(e: unknown, code: number): e is KubeApiError {
  return e instanceof KubeApiError && e.code === code;
}

/** One watch event. */
export interface WatchEvent<T> {
  readonly type: "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK" | "ERROR";
  readonly object: T;
}

/** Options of {@link KubeClient}. */
export interface KubeClientOptions {
  readonly config: RestConfig;
  readonly clock: Clock;
  /** Requests per second; <= 0 disables limiting. @default 50 */
  readonly qps?: number;
  /** @default 100 */
  readonly burst?: number;
  /** Deadline of each request (not of watches), in ms; undefined for none. */
  readonly timeoutMs?: number;
  readonly userAgent: string;
  /**
   * The client certificate, asked for at each request instead of the kubeconfig's (a rotating
   * certificate manager's `current()`). When it returns another object than last time, new
   * requests go over a new TLS client with it; the old one is closed once its requests have
   * their answers. Undefined sends no client certificate.
   */
  readonly clientCertificate?: () =>
    | { readonly certPem: string; readonly keyPem: string }
    | undefined;
  /** Where requests are recorded (rest_client_*). @default none */
  readonly metrics?: RestClientMetrics;
}

/** Request options. */
export interface RequestOptions {
  readonly query?: Record<string, string | number | boolean | undefined>;
  readonly body?: unknown;
  /** Content type of the body. @default "application/json" */
  readonly contentType?: string;
  readonly signal?: AbortSignal;
  /** Told the HTTP status of the answer, success or not (client-go's Result.StatusCode). */
  readonly onStatus?: (status: number) => void;
}

/**
 * Longest piece of a request body handed to fetch. Deno's fetch speaks HTTP/2 through the h2
 * crate, which copies a DATA payload under 1024 bytes into its write buffer but writes a longer
 * one with a write of its own (TLS streams take no vectored writes), and Deno leaves TCP_NODELAY
 * off on its sockets: the payload then waits in the kernel for the apiserver's delayed ACK of
 * the headers, ~40 ms a request (a status patch of a running pod is 1-2 KiB). Pieces this long
 * are copied, and go out with the headers.
 */
export const BODY_PIECE_BYTES = 1000;

const utf8 = new TextEncoder();
const utf8Decoder = new TextDecoder();

/**
 * The body fetch sends for `text`: its bytes when they fit one piece, else a stream of pieces
 * of at most {@link BODY_PIECE_BYTES}, all queued at once.
 */
export function requestBody(
  text: string,
): Uint8Array<ArrayBuffer> | ReadableStream<Uint8Array<ArrayBuffer>> {
  return bodyOf(utf8.encode(text));
}

function bodyOf(
  bytes: Uint8Array<ArrayBuffer>,
): Uint8Array<ArrayBuffer> | ReadableStream<Uint8Array<ArrayBuffer>> {
  if (bytes.length <= BODY_PIECE_BYTES) return bytes;
  return new ReadableStream<Uint8Array<ArrayBuffer>>({
    start(controller) {
      for (let at = 0; at < bytes.length; at += BODY_PIECE_BYTES) {
        controller.enqueue(bytes.subarray(at, at + BODY_PIECE_BYTES));
      }
      controller.close();
    },
  });
}

/** Patch flavours the apiserver accepts. */
export const PATCH = {
  strategic: "application/strategic-merge-patch+json",
  merge: "application/merge-patch+json",
  json: "application/json-patch+json",
} as const;

/** How requests reach the apiserver with one client certificate. */
interface Transport {
  fetch(url: string, req: TransportRequest): Promise<Response>;
  close(): void;
}

/** Deno's fetch over one HttpClient (HTTP/2, the server's certificate verified). */
function fetchTransport(client: Deno.HttpClient): Transport {
  return {
    fetch: (url, r) =>
      fetch(url, {
        method: r.method,
        headers: r.headers,
        body: r.body === undefined ? undefined : bodyOf(r.body),
        client,
        signal: r.signal,
      }),
    close: () => client.close(),
  };
}

/** A client of one apiserver with one identity. */
export class KubeClient {
  readonly server: string;
  #http: Transport;
  /** The certificate #http was built with, when it comes from `clientCertificate`. */
  #httpCert: unknown;
  /** Requests waiting for their answer, per TLS client. */
  readonly #inflight = new Map<Transport, number>();
  /** Replaced TLS clients still carrying requests; closed when the last one is answered. */
  readonly #retired = new Set<Transport>();
  #closed = false;
  readonly #limiter: TokenBucket;
  readonly #opts: KubeClientOptions;
  readonly #headers: Record<string, string>;
  /** The server's host as written (Go's URL.Host keeps a default port; WHATWG's drops it). */
  readonly #host: string;

  constructor(opts: KubeClientOptions) {
    const c = opts.config;
    this.#opts = opts;
    this.server = c.server;
    this.#host = /^[a-zA-Z][a-zA-Z0-9+.-]*:\/\/([^/?#]*)/.exec(c.server)?.[1] ?? "none";
    if (opts.clientCertificate) {
      this.#httpCert = opts.clientCertificate();
      this.#http = this.#newHttp(this.#httpCert as { certPem: string; keyPem: string } | undefined);
    } else {
      this.#http = this.#newHttp(
        c.certPem && c.keyPem ? { certPem: c.certPem, keyPem: c.keyPem } : undefined,
      );
    }
    this.#limiter = new TokenBucket(opts.clock, opts.qps ?? 50, opts.burst ?? 100);
    this.#headers = { "user-agent": opts.userAgent, accept: "application/json" };
    if (c.token) this.#headers.authorization = `Bearer ${c.token}`;
  }

  #newHttp(cert: { certPem: string; keyPem: string } | undefined): Transport {
    // client-go would reuse a cached transport for the same TLS settings; none is kept here.
    this.#opts.metrics?.transportCreateCalls.inc({ result: "uncacheable" });
    const c = this.#opts.config;
    if (c.insecureSkipTLSVerify) {
      return new InsecureTransport({
        certPem: cert?.certPem,
        keyPem: cert?.keyPem,
        serverName: c.tlsServerName,
      });
    }
    return fetchTransport(Deno.createHttpClient({
      caCerts: c.caPem ? [c.caPem] : undefined,
      cert: cert?.certPem,
      key: cert?.keyPem,
    } as Deno.CreateHttpClientOptions));
  }

  /** The TLS client for a new request, rebuilt when the client certificate changed. */
  #acquire(): Transport {
    const source = this.#opts.clientCertificate;
    if (source && !this.#closed) {
      const cert = source();
      if (cert !== this.#httpCert) {
        this.#retire(this.#http);
        this.#http = this.#newHttp(cert);
        this.#httpCert = cert;
      }
    }
    const http = this.#http;
    this.#inflight.set(http, (this.#inflight.get(http) ?? 0) + 1);
    return http;
  }

  #release(http: Transport): void {
    const n = (this.#inflight.get(http) ?? 1) - 1;
    if (n > 0) return void this.#inflight.set(http, n);
    this.#inflight.delete(http);
    if (this.#retired.delete(http)) closeQuietly(http);
  }

  #retire(http: Transport): void {
    // Closing a client does not cut answers already streaming (watches), only new requests.
    if (this.#inflight.has(http)) this.#retired.add(http);
    else closeQuietly(http);
  }

  /** A client with the same identity and other limits (events, heartbeats). */
  with(limits: Pick<KubeClientOptions, "qps" | "burst" | "timeoutMs">): KubeClient {
    return new KubeClient({ ...this.#opts, ...limits });
  }

  #url(path: string, query?: RequestOptions["query"]): string {
    const url = new URL(this.server + path);
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v !== undefined) url.searchParams.set(k, String(v));
    }
    return url.toString();
  }

  /** Waits for the rate limiter, timing the wait when there is a limit (client-go tryThrottle). */
  async #throttle(method: string, signal: AbortSignal | undefined): Promise<void> {
    const m = this.#opts.metrics;
    if (!m || !this.#limiter.limited) return await this.#limiter.wait(signal);
    const start = this.#opts.clock.now();
    try {
      await this.#limiter.wait(signal);
    } finally {
      m.rateLimiterDuration.observe(seconds(this.#opts.clock.now() - start), {
        verb: method,
        host: this.#host,
      });
    }
  }

  /**
   * Sends one request and returns the answer with its status checked. A watch (`watch`) is not
   * throttled, has no deadline and records only its result, as client-go's Watch.
   */
  async #fetch(
    method: string,
    path: string,
    opts: RequestOptions,
    watch: boolean,
  ): Promise<Response> {
    if (!watch) await this.#throttle(method, opts.signal);
    const signals = [
      opts.signal,
      !watch && this.#opts.timeoutMs ? AbortSignal.timeout(this.#opts.timeoutMs) : undefined,
    ]
      .filter((s): s is AbortSignal => s !== undefined);
    const headers = { ...this.#headers };
    if (opts.body !== undefined) headers["content-type"] = opts.contentType ?? "application/json";
    const bytes = opts.body === undefined ? undefined : utf8.encode(JSON.stringify(opts.body));
    const m = this.#opts.metrics;
    let res: Response;
    const http = this.#acquire();
    try {
      res = await http.fetch(this.#url(path, opts.query), {
        method,
        headers,
        body: bytes,
        signal: signals.length === 0 ? undefined : AbortSignal.any(signals),
      });
    } catch (e) {
      this.#count("<error>", method);
      if (opts.signal?.aborted) throw opts.signal.reason;
      throw new KubeApiError(method, path, 0, "", e instanceof Error ? e.message : String(e), {
        cause: e,
      });
    } finally {
      this.#release(http);
      if (!watch) m?.requestSize.observe(bytes?.length ?? 0, { verb: method, host: this.#host });
    }
    this.#count(String(res.status), method);
    opts.onStatus?.(res.status);
    if (!res.ok) {
      const text = await this.#readText(res, method, true);
      let status: { reason?: string; message?: string } = {};
      try {
        status = JSON.parse(text);
      } catch {
        status = { message: text.trim() };
      }
      throw new KubeApiError(
        method,
        path,
        res.status,
        status.reason ?? res.statusText,
        status.message ?? text,
      );
    }
    return res;
  }

  /** client-go's request result metric: code (or `<error>`), verb and host. */
  #count(code: string, method: string): void {
    this.#opts.metrics?.requests.inc({ code, method, host: this.#host });
  }

  /**
   * Reads an answer's body, recording its size as client-go's Do and DoRaw do: always for a
   * success, for an error status only when it has a body.
   */
  async #readText(res: Response, method: string, failed = false): Promise<string> {
    const body = await res.arrayBuffer();
    if (!failed || body.byteLength > 0) {
      this.#opts.metrics?.responseSize.observe(body.byteLength, { verb: method, host: this.#host });
    }
    return utf8Decoder.decode(body);
  }

  /** Runs a request whose latency counts from throttling to its body read (client-go request). */
  async #timed<T>(method: string, run: () => Promise<T>): Promise<T> {
    const m = this.#opts.metrics;
    if (!m) return await run();
    const start = this.#opts.clock.now();
    try {
      return await run();
    } finally {
      m.requestDuration.observe(seconds(this.#opts.clock.now() - start), {
        verb: method,
        host: this.#host,
      });
    }
  }

  /** One request; resolves to the decoded JSON answer. */
  request<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    return this.#timed(method, async () => {
      // The caller's signal is often the kubelet's own, which lives on: the request combines
      // a link to it that it drops when done (src/util/linked_signal.ts), not the signal itself.
      using link = opts.signal ? linkSignals(opts.signal) : undefined;
      const res = await this.#fetch(method, path, { ...opts, signal: link?.signal }, false);
      return JSON.parse(await this.#readText(res, method)) as T;
    });
  }

  /** GET of a non-JSON path such as /healthz; resolves to the body text. */
  getText(path: string, signal?: AbortSignal): Promise<string> {
    return this.#timed("GET", async () => {
      using link = signal ? linkSignals(signal) : undefined;
      const res = await this.#fetch("GET", path, { signal: link?.signal }, false);
      return await this.#readText(res, "GET");
    });
  }

  get<T>(path: string, signal?: AbortSignal): Promise<T> {
    return this.request<T>("GET", path, { signal });
  }

  create<T>(path: string, body: T, signal?: AbortSignal): Promise<T> {
    return this.request<T>("POST", path, { body, signal });
  }

  update<T>(path: string, body: T, signal?: AbortSignal): Promise<T> {
    return this.request<T>("PUT", path, { body, signal });
  }

  patch<T>(
    path: string,
    body: unknown,
    type: keyof typeof PATCH,
    signal?: AbortSignal,
  ): Promise<T> {
    return this.request<T>("PATCH", path, { body, contentType: PATCH[type], signal });
  }

  delete<T>(path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
    return this.request<T>("DELETE", path, { body, signal });
  }

  /** Watches `path` from `resourceVersion`; ends when the server closes or `signal` aborts. */
  async *watch<T>(
    path: string,
    opts: {
      resourceVersion?: string;
      fieldSelector?: string;
      timeoutSeconds?: number;
      signal?: AbortSignal;
    } = {},
  ): AsyncGenerator<WatchEvent<T>> {
    const res = await this.#fetch("GET", path, {
      query: {
        watch: true,
        allowWatchBookmarks: true,
        resourceVersion: opts.resourceVersion,
        fieldSelector: opts.fieldSelector,
        timeoutSeconds: opts.timeoutSeconds,
      },
      signal: opts.signal,
    }, true);
    if (!res.body) return;
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    try {
      for (;;) {
        // The abort ends the wait even where it does not end the body.
        const { value, done } = await abortable(reader.read(), opts.signal);
        if (done) return;
        buffer += value;
        let nl: number;
        while ((nl = buffer.indexOf("\n")) >= 0) {
          const line = buffer.slice(0, nl).trim();
          buffer = buffer.slice(nl + 1);
          if (line !== "") yield JSON.parse(line) as WatchEvent<T>;
        }
      }
    } catch (e) {
      if (opts.signal?.aborted) return;
      throw new KubeApiError(
        "GET",
        path,
        0,
        "",
        `watch broke: ${e instanceof Error ? e.message : String(e)}`,
        { cause: e },
      );
    } finally {
      const cancelled = reader.cancel().catch(() => {});
      // Stopped: a body that does not end on the abort must not hold the stop (a safeguard: the
      // decoder's side settles its cancel without waiting for the body's).
      if (!opts.signal?.aborted) await cancelled;
    }
  }

  /** Releases the TLS client; idempotent. */
  close(): void {
    this.#closed = true;
    closeQuietly(this.#http);
    for (const http of this.#retired) closeQuietly(http);
    this.#retired.clear();
  }
}

function seconds(ms: number): number {
  return Math.max(0, ms) / 1000;
}

function closeQuietly(http: Transport): void {
  try {
    http.close();
  } catch {
    // already closed
  }
}
