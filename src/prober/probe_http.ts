/**
 * @module
 * The HTTP GET of httpGet probes and lifecycle hooks: builds the request from a
 * `V1HTTPGetAction` (scheme, host defaulting to the pod IP, named or numeric port, path, the
 * probe's headers, `User-Agent` and `Accept` defaults, the `Host` header), sends it with one
 * deadline for the whole exchange, follows redirects only on the same host (at most 10), skips
 * TLS verification and reads at most 10 KiB of the body. Private helper of `prober.ts` and
 * `lifecycle/handlers.ts`. Corresponds to upstream `pkg/probe/http/{http.go,request.go}` and
 * `pkg/probe/util.go` (ResolveContainerPort).
 */

import http from "node:http";
import https from "node:https";
import type { V1Container, V1HTTPGetAction } from "@kubernetes/client-node";

/** upstream maxRespBodyLength: the body is read up to this many bytes. */
export const MAX_RESP_BODY_LENGTH = 10 * 1024;
/** Redirects followed on the same host before the request fails (Go's client default). */
export const MAX_REDIRECTS = 10;

/** A probe or hook that cannot even be built (bad port, bad URL). */
export class ProbeConfigError extends Error {
  override name = "ProbeConfigError";
}

/** An HTTP exchange that failed before a response (refused, timed out, garbage). */
export class HttpGetError extends Error {
  override name = "HttpGetError";
}

/** upstream ResolveContainerPort: a port number, a named container port, or a number as text. */
export function resolveContainerPort(
  port: number | string | undefined,
  container: V1Container,
): number {
  let n: number;
  if (typeof port === "number") {
    n = port;
  } else if (typeof port === "string") {
    const named = container.ports?.find((p) => p.name === port);
    if (named) {
      n = named.containerPort;
    } else if (/^[+-]?\d+$/.test(port)) {
      n = Number(port);
    } else {
      throw new ProbeConfigError(`strconv.Atoi: parsing ${JSON.stringify(port)}: invalid syntax`);
    }
  } else {
    throw new ProbeConfigError(`intOrString had no kind: ${JSON.stringify(port)}`);
  }
  if (Number.isInteger(n) && n > 0 && n < 65536) return n;
  throw new ProbeConfigError(`invalid port number: ${n}`);
}

/** `host:port`, bracketing IPv6 addresses (Go's net.JoinHostPort). */
export function joinHostPort(host: string, port: number): string {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}

/** The URL as Go prints it: the port always shown. */
export function urlString(url: URL): string {
  const port = url.port || (url.protocol === "https:" ? "443" : "80");
  return `${url.protocol}//${url.hostname}:${port}${url.pathname}${url.search}`;
}

/** A built GET request. */
export interface HttpGetRequest {
  readonly url: URL;
  /** Canonical header name → values, as Go's http.Header holds them. */
  readonly headers: ReadonlyMap<string, readonly string[]>;
}

/** Go's textproto.CanonicalMIMEHeaderKey for the usual token names. */
function canonicalHeaderKey(name: string): string {
  if (!/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/.test(name)) return name;
  return name.toLowerCase().replace(
    /(^|-)([a-z])/g,
    (_, d: string, c: string) => d + c.toUpperCase(),
  );
}

/**
 * upstream NewRequestForHTTPGetAction: the request an httpGet action makes; `userAgent` is used
 * unless the action sets `User-Agent`. Throws {@link ProbeConfigError} for a bad port or URL.
 */
export function newRequestForHttpGetAction(
  action: V1HTTPGetAction,
  container: V1Container,
  podIP: string,
  userAgent: string,
): HttpGetRequest {
  const scheme = (action.scheme ?? "").toLowerCase() || "http";
  const host = action.host || podIP;
  const port = resolveContainerPort(action.port as number | string | undefined, container);
  let url: URL;
  try {
    url = new URL(action.path ?? "", `${scheme}://${joinHostPort(host, port)}/`);
    url.protocol = `${scheme}:`;
    url.host = joinHostPort(host, port);
  } catch (e) {
    throw new ProbeConfigError(`invalid URL for ${scheme}://${host}:${port}${action.path ?? ""}`, {
      cause: e,
    });
  }
  const headers = new Map<string, string[]>();
  for (const h of action.httpHeaders ?? []) {
    const key = canonicalHeaderKey(h.name);
    headers.set(key, [...(headers.get(key) ?? []), h.value]);
  }
  if (!headers.has("User-Agent")) headers.set("User-Agent", [userAgent]);
  const accept = headers.get("Accept");
  if (!accept) headers.set("Accept", ["*/*"]);
  else if (accept[0] === "") headers.delete("Accept");
  return { url, headers };
}

/** What came back: the status and at most {@link MAX_RESP_BODY_LENGTH} bytes of body. */
export interface HttpGetResponse {
  readonly statusCode: number;
  readonly body: string;
  /** The URL that answered (after same-host redirects). */
  readonly url: URL;
}

/** Options of {@link httpGet}. */
export interface HttpGetOptions {
  /** The deadline of the whole exchange, redirects and body included. */
  readonly timeoutMs: number;
  readonly signal?: AbortSignal;
}

const REDIRECT_CODES = new Set([301, 302, 303, 307, 308]);

/**
 * Sends the GET as upstream's probe client does: no keep-alive, no proxy, TLS unverified,
 * same-host redirects only. Throws {@link HttpGetError} (Go's `Get "<url>": ...` text) when no
 * response came; rethrows the abort reason when `signal` aborts.
 */
export async function httpGet(req: HttpGetRequest, opts: HttpGetOptions): Promise<HttpGetResponse> {
  const deadline = AbortSignal.timeout(opts.timeoutMs);
  const signal = opts.signal ? AbortSignal.any([deadline, opts.signal]) : deadline;
  const first = req.url;
  let url = req.url;
  let hostHeader = req.headers.get("Host")?.[0];
  for (let redirects = 0;; redirects++) {
    const res = await once(url, req.headers, hostHeader, signal, opts);
    const location = res.location;
    if (!REDIRECT_CODES.has(res.statusCode) || location === undefined || location === "") {
      return { statusCode: res.statusCode, body: res.body, url };
    }
    let next: URL;
    try {
      next = new URL(location, url);
    } catch {
      throw new HttpGetError(
        `Get ${JSON.stringify(urlString(url))}: failed to parse Location header ${
          JSON.stringify(location)
        }`,
      );
    }
    if (next.hostname !== first.hostname) {
      return { statusCode: res.statusCode, body: res.body, url };
    }
    if (redirects + 1 >= MAX_REDIRECTS) {
      throw new HttpGetError(`Get ${JSON.stringify(urlString(next))}: stopped after 10 redirects`);
    }
    // Go keeps a custom Host header only through a relative redirect.
    if (hostHeader !== undefined && /^[a-z][a-z0-9+.-]*:/i.test(location)) hostHeader = undefined;
    url = next;
  }
}

interface RawResponse {
  readonly statusCode: number;
  readonly location: string | undefined;
  readonly body: string;
}

function once(
  url: URL,
  headers: ReadonlyMap<string, readonly string[]>,
  hostHeader: string | undefined,
  signal: AbortSignal,
  opts: HttpGetOptions,
): Promise<RawResponse> {
  const prefix = `Get ${JSON.stringify(urlString(url))}: `;
  return new Promise<RawResponse>((resolve, reject) => {
    if (signal.aborted) {
      reject(abortError(signal, opts, prefix, "awaiting headers"));
      return;
    }
    const out: Record<string, string | string[]> = {};
    for (const [k, v] of headers) if (k !== "Host") out[k] = [...v];
    if (hostHeader) out["Host"] = hostHeader;
    const mod = url.protocol === "https:" ? https : http;
    let stage = "awaiting headers";
    let settled = false;
    const done = (f: () => void) => {
      if (settled) return;
      settled = true;
      signal.removeEventListener("abort", onAbort);
      f();
    };
    const request = mod.request({
      protocol: url.protocol,
      hostname: url.hostname.replace(/^\[|\]$/g, ""),
      port: url.port,
      path: url.pathname + url.search,
      method: "GET",
      headers: out,
      agent: false,
      rejectUnauthorized: false,
      // Probes do not verify (upstream's InsecureSkipVerify), so no trust store is needed; an
      // explicit empty one keeps node:tls from loading the system's, which needs the `sys`
      // permission "ca" that the agent's permission set does not grant.
      ca: [],
    }, (res) => {
      stage = "reading body";
      const chunks: Uint8Array[] = [];
      let size = 0;
      const finish = () => {
        res.destroy();
        request.destroy();
        const loc = res.headers.location;
        done(() =>
          resolve({
            statusCode: res.statusCode ?? 0,
            location: Array.isArray(loc) ? loc[0] : loc,
            body: new TextDecoder().decode(concat(chunks, MAX_RESP_BODY_LENGTH)),
          })
        );
      };
      res.on("data", (d: Uint8Array) => {
        chunks.push(d);
        size += d.length;
        if (size >= MAX_RESP_BODY_LENGTH) finish();
      });
      res.on("end", finish);
      res.on("error", (e: Error) => done(() => reject(new HttpGetError(prefix + e.message))));
    });
    const onAbort = () => {
      const err = abortError(signal, opts, prefix, stage);
      done(() => reject(err));
      request.destroy();
    };
    signal.addEventListener("abort", onAbort, { once: true });
    request.on("error", (e: Error & { code?: string }) => {
      done(() => reject(new HttpGetError(prefix + goErrorText(e, url), { cause: e })));
    });
    request.end();
  });
}

function abortError(signal: AbortSignal, opts: HttpGetOptions, prefix: string, stage: string) {
  if (opts.signal?.aborted) return opts.signal.reason;
  return new HttpGetError(
    stage === "reading body"
      ? `${prefix}context deadline exceeded (Client.Timeout or context cancellation while reading body)`
      : `${prefix}context deadline exceeded (Client.Timeout exceeded while awaiting headers)`,
    { cause: signal.reason },
  );
}

/** The node error in the words Go's net/http uses for the same failure. */
function goErrorText(e: Error & { code?: string }, url: URL): string {
  const addr = `${url.hostname}:${url.port || (url.protocol === "https:" ? 443 : 80)}`;
  switch (e.code) {
    case "ECONNREFUSED":
      return `dial tcp ${addr}: connect: connection refused`;
    case "ECONNRESET":
      return e.message === "socket hang up"
        ? "EOF"
        : `read tcp ${addr}: read: connection reset by peer`;
    case "EHOSTUNREACH":
      return `dial tcp ${addr}: connect: no route to host`;
    case "ENETUNREACH":
      return `dial tcp ${addr}: connect: network is unreachable`;
    case "HPE_INVALID_CONSTANT":
    case "HPE_INVALID_VERSION":
    case "HPE_INVALID_STATUS":
      return `net/http: HTTP/1.x transport connection broken: malformed HTTP response`;
    default:
      return e.message === "socket hang up" ? "EOF" : e.message;
  }
}

function concat(chunks: readonly Uint8Array[], limit: number): Uint8Array {
  const total = Math.min(limit, chunks.reduce((n, c) => n + c.length, 0));
  const out = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    if (at >= total) break;
    const part = c.subarray(0, total - at);
    out.set(part, at);
    at += part.length;
  }
  return out;
}

/** The outcome of an HTTP probe, before the prober maps Warning to a success with an event. */
export interface HttpProbeOutcome {
  readonly result: "Success" | "Warning" | "Failure";
  readonly output: string;
}

/**
 * upstream DoHTTPProbe: 200–399 succeeds (a 3xx that was not followed is a Warning, "Probe
 * terminated redirects"); any other status fails without the body; a transport error fails
 * with its text.
 */
export async function doHttpProbe(
  req: HttpGetRequest,
  opts: HttpGetOptions,
): Promise<HttpProbeOutcome> {
  let res: HttpGetResponse;
  try {
    res = await httpGet(req, opts);
  } catch (e) {
    if (e instanceof HttpGetError) return { result: "Failure", output: e.message };
    throw e;
  }
  if (res.statusCode >= 200 && res.statusCode < 400) {
    if (res.statusCode >= 300) {
      return {
        result: "Warning",
        output: `Probe terminated redirects, Response body: ${res.body}`,
      };
    }
    return { result: "Success", output: res.body };
  }
  // Upstream keeps the body out of the user-facing message (issue 99425).
  return { result: "Failure", output: `HTTP probe failed with statuscode: ${res.statusCode}` };
}
