/**
 * @module
 * The HTTP transport of a cluster whose kubeconfig sets `insecure-skip-tls-verify: true`:
 * client-go's `InsecureSkipVerify` transport, which still speaks TLS (and presents the client
 * certificate) but does not verify the server's certificate. Deno's fetch has no such option for
 * one client (only the process-wide `--unsafely-ignore-certificate-errors`), so these requests
 * go through `node:https` with `rejectUnauthorized: false`, over HTTP/1.1 with keep-alive, and
 * come back as fetch `Response`s (a watch's body streams). Private to kube_client.ts.
 */

import { Agent, request } from "node:https";
import type { IncomingMessage } from "node:http";
import { Readable } from "node:stream";

/** What {@link InsecureTransport} is built with. */
export interface InsecureTransportOptions {
  /** PEM client certificate and key, if any. */
  readonly certPem?: string;
  readonly keyPem?: string;
  /** SNI name to send instead of the URL's host (kubeconfig `tls-server-name`). */
  readonly serverName?: string;
}

/** One request as kube_client.ts sends it. */
export interface TransportRequest {
  readonly method: string;
  readonly headers: Record<string, string>;
  readonly body?: Uint8Array<ArrayBuffer>;
  readonly signal?: AbortSignal;
}

/** Statuses whose Response may not have a body (fetch's null body statuses). */
const NULL_BODY = new Set([101, 103, 204, 205, 304]);

/** HTTPS without verification of the server's certificate, for one kubeconfig cluster. */
export class InsecureTransport {
  readonly #agent: Agent;
  readonly #serverName?: string;

  constructor(opts: InsecureTransportOptions) {
    this.#agent = new Agent({
      keepAlive: true,
      rejectUnauthorized: false,
      // Nothing is verified, so no roots are needed: without `ca`, Deno's node:tls loads the
      // system's, which needs `--allow-sys=ca`, a permission the agent's sandbox does not hold.
      ca: [],
      cert: opts.certPem,
      key: opts.keyPem,
    });
    this.#serverName = opts.serverName;
  }

  /** Sends one request; resolves once the status and headers are in, the body streaming. */
  fetch(url: string, req: TransportRequest): Promise<Response> {
    return new Promise<Response>((resolve, reject) => {
      req.signal?.throwIfAborted();
      const headers: Record<string, string> = { ...req.headers };
      if (req.body !== undefined) headers["content-length"] = String(req.body.length);
      const r = request(url, {
        method: req.method,
        headers,
        agent: this.#agent,
        rejectUnauthorized: false,
        servername: this.#serverName,
      }, (res: IncomingMessage) => {
        const status = res.statusCode ?? 0;
        const out = new Headers();
        for (const [k, v] of Object.entries(res.headers)) {
          for (const one of Array.isArray(v) ? v : v === undefined ? [] : [v]) out.append(k, one);
        }
        let body: ReadableStream<Uint8Array> | null = null;
        if (NULL_BODY.has(status)) res.resume();
        else body = Readable.toWeb(res) as unknown as ReadableStream<Uint8Array>;
        // An abort after the headers ends the body too (a watch being stopped).
        req.signal?.addEventListener("abort", () => res.destroy(req.signal?.reason), {
          once: true,
        });
        resolve(new Response(body, { status, statusText: res.statusMessage ?? "", headers: out }));
      });
      const onAbort = () => r.destroy(req.signal?.reason);
      req.signal?.addEventListener("abort", onAbort, { once: true });
      r.on("error", (e) => {
        req.signal?.removeEventListener("abort", onAbort);
        reject(req.signal?.aborted ? req.signal.reason : e);
      });
      r.end(req.body);
    });
  }

  /** Closes its connections, idle or not (kube_client.ts retires a transport once idle). */
  close(): void {
    this.#agent.destroy();
  }
}
