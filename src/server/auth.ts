/**
 * @module
 * Authentication and authorization of the kubelet API (port 10250), built from the
 * `authentication` and `authorization` sections of the KubeletConfiguration:
 *
 * - Authentication, in upstream's order: a client certificate verified against
 *   `authentication.x509.clientCAFile` (CN is the user, O the groups), then a bearer token from
 *   `Authorization: Bearer` or a websocket `base64url.bearer.authorization.k8s.io.` subprotocol,
 *   checked with a TokenReview and cached for `authentication.webhook.cacheTTL`. Every user they
 *   accept gets the group `system:authenticated`. When `authentication.anonymous.enabled`, a
 *   request that no method accepted, and that none rejected with an error, is `system:anonymous`
 *   in `system:unauthenticated`; a bad certificate or token is always a 401.
 * - Authorization: `AlwaysAllow`, or `Webhook`, a SubjectAccessReview for the `nodes` resource
 *   and the subresource its path maps to, answers cached for `cacheAuthorizedTTL` (allowed) and
 *   `cacheUnauthorizedTTL` (not allowed).
 *
 * It talks to the apiserver through {@link KubeClient} (TokenReview, SubjectAccessReview) and
 * reads the client CA file; {@link serveKubeletAPI} in `server.ts` calls what it builds. Each
 * webhook attempt, token cache lookup, client certificate and CA file check is recorded as
 * k8s.io/apiserver records it (apiserver_delegated_authn/authz_*, authentication_token_cache_*,
 * apiserver_client_certificate_expiration_seconds, and the `DynamicCABundle-client-ca-bundle`
 * workqueue).
 * Corresponds to upstream `cmd/kubelet/app/auth.go` (BuildAuth, BuildAuthn, BuildAuthz),
 * `pkg/kubelet/server/auth.go` (NewNodeAuthorizerAttributesGetter) and the k8s.io/apiserver
 * pieces they assemble: `authenticatorfactory.DelegatingAuthenticatorConfig`, the x509,
 * bearertoken, websocket, anonymous, union and group authenticators, the cached webhook token
 * authenticator, `authorizerfactory` and the webhook authorizer.
 */

import { createHash, X509Certificate } from "node:crypto";
import type { IncomingMessage } from "node:http";
import type { TLSSocket } from "node:tls";
import type { V1SubjectAccessReview, V1TokenReview } from "@kubernetes/client-node";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import { KubeApiError, type KubeClient } from "../client/kube_client.ts";
import type { KubeletConfiguration } from "../apis/config_types.ts";
import type {
  AttributesGetter,
  Authenticator,
  Authorizer,
  RequestAttributes,
  UserInfo,
} from "./server.ts";
import {
  parseCertificate,
  parsePemCertificates,
  verifyClientCertificate,
} from "../certificate/x509.ts";
import { type ApiserverMetrics, webhookCode } from "../metrics/apiserver_metrics.ts";
import type { QueueMetrics, WorkqueueMetrics } from "../metrics/workqueue_metrics.ts";
import type { Counter, Histogram } from "../metrics/metrics.ts";

export { verifyClientCertificate } from "../certificate/x509.ts";

/** The anonymous user's name (upstream user.Anonymous). */
export const ANONYMOUS_USER = "system:anonymous";
/** The group of every anonymous request (upstream user.AllUnauthenticated). */
export const UNAUTHENTICATED_GROUP = "system:unauthenticated";
/** The group added to every authenticated user (upstream user.AllAuthenticated). */
export const AUTHENTICATED_GROUP = "system:authenticated";
/** The websocket subprotocol prefix that carries a bearer token. */
export const BEARER_PROTOCOL_PREFIX = "base64url.bearer.authorization.k8s.io.";

const TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews";
const SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
/** Upstream's LRU size of the webhook authorizer's answers; also bounds the token cache here. */
const CACHE_SIZE = 8192;
/** Upstream does not cache decisions on attributes this large (maxControlledAttrCacheSize). */
const MAX_CACHED_ATTRIBUTES_SIZE = 10000;
const CA_RELOAD_INTERVAL_MS = 60_000;

/** Retries of a webhook call (upstream wait.Backoff). */
export interface RetryBackoff {
  /** First wait, in ms. @default 500 */
  readonly initialMs: number;
  /** Growth of each wait. @default 1.5 */
  readonly factor: number;
  /** Up to this fraction of each wait is added at random. @default 0.2 */
  readonly jitter: number;
  /** Attempts in all. @default 5 */
  readonly steps: number;
}

/** Upstream DefaultAuthWebhookRetryBackoff. */
export const DEFAULT_WEBHOOK_RETRY_BACKOFF: RetryBackoff = {
  initialMs: 500,
  factor: 1.5,
  jitter: 0.2,
  steps: 5,
};

/** What {@link buildAuth} needs. */
export interface AuthOptions {
  readonly config: Pick<KubeletConfiguration, "authentication" | "authorization">;
  readonly nodeName: string;
  /** The apiserver; required by the webhook modes. @default none */
  readonly client?: KubeClient;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Reads the client CA file. @default Deno.readTextFile */
  readonly readFile?: (path: string) => Promise<string>;
  /** Feature gate KubeletFineGrainedAuthz. @default true (GA in v1.36) */
  readonly fineGrainedAuthz?: boolean;
  /** Retries of TokenReview and SubjectAccessReview calls. @default DEFAULT_WEBHOOK_RETRY_BACKOFF */
  readonly webhookRetryBackoff?: RetryBackoff;
  /** Where calls, cache lookups, certificates and CA reloads are recorded. @default none */
  readonly metrics?: AuthMetrics;
}

/** The metrics authentication and authorization record into. */
export interface AuthMetrics {
  readonly apiserver: ApiserverMetrics;
  /** The CA file reload reports as upstream's `DynamicCABundle-client-ca-bundle` queue. */
  readonly workqueue?: WorkqueueMetrics;
}

/** The workqueue name of the client CA file's reload (dynamiccertificates, purpose client-ca-bundle). */
export const CLIENT_CA_QUEUE = "DynamicCABundle-client-ca-bundle";

/** The kubelet API's auth (upstream server.AuthInterface) and the CA reload loop. */
export interface KubeletAuth {
  readonly authenticator: Authenticator;
  readonly authorizer: Authorizer;
  readonly attributes: AttributesGetter;
  /** Re-reads the client CA file every minute until `signal` aborts (no-op without one). */
  runClientCAReload(signal: AbortSignal): Promise<void>;
}

/** A configuration the kubelet API's auth cannot be built from. */
export class AuthConfigError extends Error {
  override name = "AuthConfigError";
}

/** A credential was presented and rejected (a 401, never anonymous). */
export class AuthenticationError extends Error {
  override name = "AuthenticationError";
}

/** The webhook authorizer could not decide (a 500). */
export class AuthorizationError extends Error {
  override name = "AuthorizationError";
}

/** Attributes with the ones to try after them when they are not allowed (fine-grained authz). */
export interface NodeRequestAttributes extends RequestAttributes {
  /** Tried in order when the first is not allowed; upstream's list after its first entry. */
  readonly alternatives: readonly RequestAttributes[];
}

/** Builds the authenticator, the attributes getter and the authorizer (upstream BuildAuth). */
export async function buildAuth(opts: AuthOptions): Promise<KubeletAuth> {
  const authn = await buildAuthn(opts);
  const attributes = nodeAuthorizerAttributes(opts.nodeName, {
    fineGrained: opts.fineGrainedAuthz ?? true,
    logger: opts.logger,
  });
  const authorizer = buildAuthz(opts);
  return { ...authn, authorizer, attributes };
}

// ---------------------------------------------------------------------------------------------
// Request attributes

/** Upstream isSubpath: `path` is `prefix` (without a trailing slash) or below it. */
function isSubpath(path: string, prefix: string): boolean {
  const p = prefix.endsWith("/") ? prefix.slice(0, -1) : prefix;
  return path === p || (path.startsWith(p) && path[p.length] === "/");
}

/** The subresources a request path is authorized as, in the order they are tried. */
export function nodeSubresources(path: string, fineGrained = true): string[] {
  const out: string[] = [];
  if (fineGrained) {
    if (isSubpath(path, "/pods")) out.push("pods");
    else if (isSubpath(path, "/healthz")) out.push("healthz");
    else if (isSubpath(path, "/configz")) out.push("configz");
    else if (isSubpath(path, "/runningpods/")) out.push("pods");
  }
  if (isSubpath(path, "/stats/")) out.push("stats");
  else if (isSubpath(path, "/metrics")) out.push("metrics");
  else if (isSubpath(path, "/logs/")) out.push("log");
  else if (isSubpath(path, "/checkpoint/")) out.push("checkpoint");
  else if (isSubpath(path, "/statusz")) out.push("statusz");
  else if (isSubpath(path, "/flagz")) out.push("configz");
  else out.push("proxy");
  return out;
}

/** Upstream's verb for an HTTP method; other methods (HEAD, OPTIONS) get "" as upstream. */
export function apiVerb(method: string | undefined): string {
  switch (method) {
    case "POST":
      return "create";
    case "GET":
      return "get";
    case "PUT":
      return "update";
    case "PATCH":
      return "patch";
    case "DELETE":
      return "delete";
    default:
      return "";
  }
}

/** Options of {@link nodeAuthorizerAttributes}. */
export interface AttributesOptions {
  /** Feature gate KubeletFineGrainedAuthz. @default true */
  readonly fineGrained?: boolean;
  /** Logs each request's attributes at V(5), as upstream. @default none */
  readonly logger?: Logger;
}

/** Every attribute set a request is authorized with, first to last (upstream's list). */
export function nodeAuthorizerAttributesList(
  nodeName: string,
  user: UserInfo,
  method: string | undefined,
  path: string,
  fineGrained = true,
): RequestAttributes[] {
  const verb = apiVerb(method);
  return nodeSubresources(path, fineGrained).map((subresource) => ({
    user,
    verb,
    resource: "nodes",
    subresource,
    name: nodeName,
    apiGroup: "",
    apiVersion: "v1",
    path,
  }));
}

/**
 * Upstream NewNodeAuthorizerAttributesGetter: `nodes/<name>` with the subresource of the path
 * (stats, metrics, log, checkpoint, statusz, configz for /flagz, else proxy); with fine-grained
 * authorization /pods, /runningpods/, /healthz and /configz get pods, pods, healthz, configz
 * first and proxy as {@link NodeRequestAttributes.alternatives}.
 */
export function nodeAuthorizerAttributes(
  nodeName: string,
  opts: AttributesOptions = {},
): AttributesGetter {
  return (user, req, url): NodeRequestAttributes => {
    const list = nodeAuthorizerAttributesList(
      nodeName,
      user,
      req.method,
      url.pathname,
      opts.fineGrained ?? true,
    );
    const [first, ...rest] = list as [RequestAttributes, ...RequestAttributes[]];
    opts.logger?.v(5).info("Node request attributes", {
      user: user.name,
      verb: first.verb,
      resource: first.resource,
      "subresource(s)": list.map((a) => a.subresource),
    });
    return { ...first, alternatives: rest };
  };
}

/**
 * Asks `authorizer` about each attribute set in turn and stops at the first allowed one, as
 * upstream's auth filter does; an error stops at once.
 */
export async function authorizeAny(
  authorizer: Authorizer,
  attrs: readonly RequestAttributes[],
  signal?: AbortSignal,
): Promise<{ allowed: boolean; reason: string }> {
  let last = { allowed: false, reason: "" };
  for (const a of attrs) {
    last = await authorizer.authorize(a, signal);
    if (last.allowed) return last;
  }
  return last;
}

/** Wraps an authorizer so that {@link NodeRequestAttributes.alternatives} are tried too. */
function withAlternatives(inner: Authorizer): Authorizer {
  return {
    authorize(attrs, signal) {
      const alternatives = (attrs as Partial<NodeRequestAttributes>).alternatives ?? [];
      const { alternatives: _, ...first } = attrs as NodeRequestAttributes;
      return authorizeAny(inner, [first, ...alternatives], signal);
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Authentication

/** One authentication method: a user, undefined for no opinion, or a thrown error. */
type RequestAuthenticator = (
  req: IncomingMessage,
  signal?: AbortSignal,
) => Promise<UserInfo | undefined>;

/** Upstream's union authenticator: the first user wins; errors are kept and thrown at the end. */
function union(methods: readonly RequestAuthenticator[]): RequestAuthenticator {
  return async (req, signal) => {
    const errors: string[] = [];
    for (const m of methods) {
      try {
        const user = await m(req, signal);
        if (user) return user;
      } catch (e) {
        if (signal?.aborted) throw e;
        errors.push(e instanceof Error ? e.message : String(e));
      }
    }
    const unique = [...new Set(errors)];
    if (unique.length === 1) throw new AuthenticationError(unique[0]!);
    if (unique.length > 1) throw new AuthenticationError(`[${unique.join(", ")}]`);
    return undefined;
  };
}

/** Upstream AuthenticatedGroupAdder. */
function addAuthenticatedGroup(inner: RequestAuthenticator): RequestAuthenticator {
  return async (req, signal) => {
    const user = await inner(req, signal);
    if (!user || user.name === ANONYMOUS_USER) return user;
    if (user.groups.some((g) => g === AUTHENTICATED_GROUP || g === UNAUTHENTICATED_GROUP)) {
      return user;
    }
    return { ...user, groups: [...user.groups, AUTHENTICATED_GROUP] };
  };
}

const anonymousUser: UserInfo = { name: ANONYMOUS_USER, groups: [UNAUTHENTICATED_GROUP] };

/** The certificates the client sent, leaf first, as DER. */
export function peerCertificateChain(req: IncomingMessage): Uint8Array[] {
  const socket = req.socket as Partial<TLSSocket>;
  if (typeof socket.getPeerCertificate !== "function") return [];
  type Peer = { raw?: Uint8Array; issuerCertificate?: Peer };
  let cert: Peer | undefined = socket.getPeerCertificate(true) as Peer;
  const out: Uint8Array[] = [];
  while (cert?.raw && cert.raw.length > 0 && out.length < 16) {
    const raw = new Uint8Array(cert.raw);
    if (out.some((r) => r.length === raw.length && r.every((b, i) => b === raw[i]))) break;
    out.push(raw);
    cert = cert.issuerCertificate === cert ? undefined : cert.issuerCertificate;
  }
  return out;
}

/** A loaded client CA bundle. */
interface CABundle {
  readonly content: string;
  readonly roots: readonly X509Certificate[];
}

function loadCABundle(name: string, content: string): CABundle {
  if (content.length === 0) throw new AuthConfigError(`missing content for CA bundle "${name}"`);
  let roots: X509Certificate[];
  try {
    roots = parsePemCertificates(content).map((der) => {
      parseCertificate(der);
      return new X509Certificate(der);
    });
  } catch (e) {
    throw new AuthConfigError(
      `error loading CA bundle for "${name}": ${e instanceof Error ? e.message : String(e)}`,
    );
  }
  if (roots.length === 0) {
    throw new AuthConfigError(
      `error loading CA bundle for "${name}": data does not contain any valid RSA or ECDSA certificates`,
    );
  }
  return { content, roots };
}

function x509Authenticator(
  ca: () => CABundle,
  clock: Clock,
  expiration: Histogram | undefined,
): RequestAuthenticator {
  return (req) => {
    const chain = peerCertificateChain(req);
    if (chain.length === 0) return Promise.resolve(undefined);
    if (expiration) {
      // Observed before verification, as upstream: every certificate presented counts.
      let notAfter: number | undefined;
      try {
        notAfter = parseCertificate(chain[0]!).notAfter.getTime();
      } catch {
        // an unparsable certificate fails verification below
      }
      if (notAfter !== undefined) expiration.observe((notAfter - clock.now()) / 1000);
    }
    const result = verifyClientCertificate(chain, ca().roots, new Date(clock.now()));
    if (result && "error" in result) {
      return Promise.reject(new AuthenticationError(result.error));
    }
    return Promise.resolve(result);
  };
}

/** Authenticates a bearer token: a user, undefined when it is not valid, or a thrown error. */
type TokenAuthenticator = (token: string, signal?: AbortSignal) => Promise<UserInfo | undefined>;

/** Upstream bearertoken.Authenticator. */
function bearerTokenAuthenticator(tokens: TokenAuthenticator): RequestAuthenticator {
  return async (req, signal) => {
    const auth = (req.headers.authorization ?? "").trim();
    if (auth === "") return undefined;
    const parts = auth.split(" ");
    if (parts.length < 2 || parts[0]!.toLowerCase() !== "bearer") return undefined;
    const token = parts[1]!;
    if (token === "") return undefined;
    const user = await tokens(token, signal);
    if (!user) throw new AuthenticationError("invalid bearer token");
    // As upstream: nothing past authentication should be tempted to use the token.
    delete req.headers.authorization;
    return user;
  };
}

function isWebSocketRequest(req: IncomingMessage): boolean {
  const upgrade = req.headers.upgrade;
  if (typeof upgrade !== "string" || upgrade.toLowerCase() !== "websocket") return false;
  return /(^|.*,\s*)upgrade($|\s*,)/.test(String(req.headers.connection ?? "").toLowerCase());
}

/** Upstream websocket.ProtocolAuthenticator. */
function websocketProtocolAuthenticator(tokens: TokenAuthenticator): RequestAuthenticator {
  return async (req, signal) => {
    if (!isWebSocketRequest(req)) return undefined;
    const header = req.headers["sec-websocket-protocol"];
    let token = "";
    let sawToken = false;
    const others: string[] = [];
    for (const value of Array.isArray(header) ? header : header ? [header] : []) {
      for (const raw of value.split(",")) {
        const protocol = raw.trim();
        if (!protocol.startsWith(BEARER_PROTOCOL_PREFIX)) {
          others.push(protocol);
          continue;
        }
        if (sawToken) {
          throw new AuthenticationError("multiple base64.bearer.authorization tokens specified");
        }
        sawToken = true;
        const encoded = protocol.slice(BEARER_PROTOCOL_PREFIX.length);
        if (!/^[A-Za-z0-9_-]*$/.test(encoded) || encoded.length % 4 === 1) {
          throw new AuthenticationError("invalid base64.bearer.authorization token encoding");
        }
        try {
          token = new TextDecoder("utf-8", { fatal: true }).decode(
            Uint8Array.from(
              atob(encoded.replaceAll("-", "+").replaceAll("_", "/")),
              (c) => c.charCodeAt(0),
            ),
          );
        } catch {
          throw new AuthenticationError("invalid base64.bearer.authorization token");
        }
      }
    }
    if (token.length > 0 && others.length === 0) {
      throw new AuthenticationError("missing additional subprotocol");
    }
    if (token.length === 0) return undefined;
    const user = await tokens(token, signal);
    if (!user) throw new AuthenticationError("invalid bearer token");
    req.headers["sec-websocket-protocol"] = others.join(",");
    return user;
  };
}

/** Is an apiserver error worth another try (upstream webhook.DefaultShouldRetry)? */
function shouldRetry(e: unknown): boolean {
  if (!(e instanceof KubeApiError)) return false;
  if (e.code === 0) return /connection reset|ECONNRESET|connection closed/i.test(e.message);
  return e.code === 500 || e.code === 504 || e.code === 429;
}

/** A webhook's per-attempt metrics (delegated authn or authz). */
interface WebhookMetrics {
  readonly total: Counter;
  readonly duration: Histogram;
}

/**
 * One webhook attempt, recorded by its HTTP code (`<error>` when no answer came) with its
 * latency, as upstream's webhook authenticator and authorizer record each Create.
 */
async function recordedCreate<T>(
  client: KubeClient,
  path: string,
  body: T,
  clock: Clock,
  metrics: WebhookMetrics | undefined,
  signal?: AbortSignal,
): Promise<T> {
  if (!metrics) return await client.create<T>(path, body, signal);
  const start = clock.now();
  let code = 0;
  try {
    return await client.request<T>("POST", path, {
      body,
      signal,
      onStatus: (status) => (code = status),
    });
  } finally {
    const labels = { code: webhookCode(code) };
    metrics.total.inc(labels);
    metrics.duration.observe(Math.max(0, clock.now() - start) / 1000, labels);
  }
}

/** Upstream webhook.WithExponentialBackoff over the injected clock. */
async function withBackoff<T>(
  backoff: RetryBackoff,
  clock: Clock,
  call: () => Promise<T>,
  signal?: AbortSignal,
): Promise<T> {
  let wait = backoff.initialMs;
  for (let step = 1;; step++) {
    try {
      return await call();
    } catch (e) {
      if (signal?.aborted || !shouldRetry(e) || step >= backoff.steps) throw e;
    }
    await clock.sleep(wait + Math.random() * backoff.jitter * wait, signal);
    wait *= backoff.factor;
  }
}

/** What a TokenReview says: a user, or not authenticated with an optional error. */
type TokenResult = { readonly user: UserInfo } | { readonly user?: undefined; error?: string };

/** Upstream's webhook token authenticator (TokenReview), without audiences as the kubelet uses it. */
function webhookTokenAuthenticator(
  client: KubeClient,
  backoff: RetryBackoff,
  clock: Clock,
  logger: Logger,
  metrics: ApiserverMetrics | undefined,
): (token: string, signal?: AbortSignal) => Promise<TokenResult> {
  const recorded = metrics && {
    total: metrics.delegatedAuthnRequests,
    duration: metrics.delegatedAuthnRequestDuration,
  };
  return async (token, signal) => {
    const review: V1TokenReview = {
      kind: "TokenReview",
      apiVersion: "authentication.k8s.io/v1",
      metadata: {},
      spec: { token },
      status: { user: {} },
    };
    let result: V1TokenReview;
    try {
      result = await withBackoff(
        backoff,
        clock,
        () => recordedCreate(client, TOKEN_REVIEWS, review, clock, recorded, signal),
        signal,
      );
    } catch (e) {
      if (!signal?.aborted) logger.error(e, "Failed to make webhook authenticator request");
      throw e;
    }
    const status = result.status ?? {};
    if (!status.authenticated) return status.error ? { error: status.error } : {};
    const u = status.user ?? {};
    return {
      user: {
        name: u.username ?? "",
        ...(u.uid ? { uid: u.uid } : {}),
        groups: u.groups ?? [],
        ...(u.extra ? { extra: u.extra } : {}),
      },
    };
  };
}

/** A small map with per-entry expiry on the injected clock, oldest evicted past its size. */
class ExpiringCache<V> {
  readonly #entries = new Map<string, { value: V; expires: number }>();
  constructor(readonly clock: Clock, readonly size: number) {}

  get(key: string): V | undefined {
    const e = this.#entries.get(key);
    if (!e) return undefined;
    this.#entries.delete(key);
    if (e.expires <= this.clock.now()) return undefined;
    this.#entries.set(key, e);
    return e.value;
  }

  set(key: string, value: V, ttlMs: number): void {
    this.#entries.delete(key);
    this.#entries.set(key, { value, expires: this.clock.now() + ttlMs });
    while (this.#entries.size > this.size) {
      const oldest = this.#entries.keys().next();
      if (oldest.done) break;
      this.#entries.delete(oldest.value);
    }
  }
}

/**
 * Upstream's cached token authenticator with cacheErrs=false: users and plain rejections are
 * kept for `ttlMs`, errors are not; concurrent reviews of one token share a request. Lookups
 * (hit or miss, with their latency in whole milliseconds), waiting callers and fetches are
 * recorded as upstream's stats collector does.
 */
function cachedTokens(
  review: (token: string, signal?: AbortSignal) => Promise<TokenResult>,
  ttlMs: number,
  clock: Clock,
  metrics?: ApiserverMetrics,
): TokenAuthenticator {
  const cache = new ExpiringCache<TokenResult>(clock, CACHE_SIZE);
  const inflight = new Map<string, Promise<TokenResult>>();
  const active = (status: "blocked" | "in_flight", by: number) => {
    const g = metrics?.tokenCacheActiveFetches;
    g?.set(g.get({ status }) + by, { status });
  };
  const lookedUp = (start: number, hit: boolean) => {
    if (!metrics) return;
    const labels = { status: hit ? "hit" : "miss" };
    metrics.tokenCacheRequests.inc(labels);
    metrics.tokenCacheRequestDuration.observe(
      Math.floor(Math.max(0, clock.now() - start)) / 1000,
      labels,
    );
  };
  const fetch = async (token: string, signal?: AbortSignal): Promise<TokenResult> => {
    active("in_flight", 1);
    let ok = false;
    try {
      const result = await review(token, signal);
      ok = true;
      return result;
    } finally {
      metrics?.tokenCacheFetches.inc({ status: ok ? "ok" : "error" });
      active("in_flight", -1);
    }
  };
  return async (token, signal) => {
    const start = clock.now();
    const key = createHash("sha256").update(token).digest("hex");
    let result = cache.get(key);
    if (result) lookedUp(start, true);
    else {
      active("blocked", 1);
      try {
        let pending = inflight.get(key);
        if (!pending) {
          pending = fetch(token, signal).finally(() => inflight.delete(key));
          inflight.set(key, pending);
        }
        result = await pending;
      } finally {
        active("blocked", -1);
        lookedUp(start, false);
      }
      if (ttlMs > 0 && !("error" in result && result.error)) cache.set(key, result, ttlMs);
    }
    if (result.user) return result.user;
    if ("error" in result && result.error) throw new AuthenticationError(result.error);
    return undefined;
  };
}

/** Builds the request authenticator (upstream BuildAuthn + DelegatingAuthenticatorConfig.New). */
export async function buildAuthn(
  opts: AuthOptions,
): Promise<Pick<KubeletAuth, "authenticator" | "runClientCAReload">> {
  const { authentication } = opts.config;
  const methods: RequestAuthenticator[] = [];
  let runClientCAReload: KubeletAuth["runClientCAReload"] = () => Promise.resolve();

  const caFile = authentication.x509.clientCAFile ?? "";
  if (caFile !== "") {
    const readFile = opts.readFile ?? ((p: string) => Deno.readTextFile(p));
    const name = `client-ca-bundle::${caFile}`;
    const read = async () => {
      try {
        return await readFile(caFile);
      } catch (e) {
        throw new AuthConfigError(
          `authentication.x509.clientCAFile: cannot read '${caFile}': ${
            e instanceof Error ? e.message : String(e)
          }`,
          { cause: e },
        );
      }
    };
    let bundle = loadCABundle(name, await read());
    opts.logger.v(2).info("Loaded a new CA Bundle and Verifier", { name });
    methods.push(
      x509Authenticator(
        () => bundle,
        opts.clock,
        opts.metrics?.apiserver.clientCertificateExpiration,
      ),
    );
    const queue: QueueMetrics | undefined = opts.metrics?.workqueue?.queue(CLIENT_CA_QUEUE);
    /** One check of the file: upstream's queue item, added at start and on each change. */
    const check = async () => {
      queue?.add(CLIENT_CA_QUEUE);
      queue?.get(CLIENT_CA_QUEUE);
      try {
        const content = await read();
        if (content === bundle.content) return;
        bundle = loadCABundle(name, content);
        opts.logger.v(2).info("Loaded a new CA Bundle and Verifier", { name });
      } catch (e) {
        opts.logger.error(e, "Failed to reload the client CA bundle; keeping the last one", {
          name,
        });
      } finally {
        queue?.done(CLIENT_CA_QUEUE);
      }
    };
    runClientCAReload = async (signal) => {
      opts.logger.info("Starting controller", { name });
      try {
        await check();
        while (!signal.aborted) {
          await opts.clock.sleep(CA_RELOAD_INTERVAL_MS, signal);
          await check();
        }
      } catch (e) {
        if (!signal.aborted) throw e;
      } finally {
        opts.logger.info("Shutting down controller", { name });
      }
    };
  }

  if (authentication.webhook.enabled) {
    if (!opts.client) {
      throw new AuthConfigError("no client provided, cannot use webhook authentication");
    }
    const tokens = cachedTokens(
      webhookTokenAuthenticator(
        opts.client,
        opts.webhookRetryBackoff ?? DEFAULT_WEBHOOK_RETRY_BACKOFF,
        opts.clock,
        opts.logger,
        opts.metrics?.apiserver,
      ),
      authentication.webhook.cacheTTL,
      opts.clock,
      opts.metrics?.apiserver,
    );
    methods.push(bearerTokenAuthenticator(tokens), websocketProtocolAuthenticator(tokens));
  }

  const anonymous = authentication.anonymous.enabled;
  let authenticate: RequestAuthenticator;
  if (methods.length === 0) {
    if (!anonymous) throw new AuthConfigError("No authentication method configured");
    authenticate = () => Promise.resolve(anonymousUser);
  } else {
    const known = addAuthenticatedGroup(union(methods));
    // Upstream NewFailOnError: an error from the methods above is final, never anonymous.
    authenticate = anonymous
      ? async (req, signal) => (await known(req, signal)) ?? anonymousUser
      : known;
  }
  return { authenticator: { authenticate }, runClientCAReload };
}

// ---------------------------------------------------------------------------------------------
// Authorization

/** Upstream's AlwaysAllow authorizer. */
export const alwaysAllow: Authorizer = {
  authorize: () => Promise.resolve({ allowed: true, reason: "" }),
};

/** The SubjectAccessReview upstream's webhook authorizer sends for `attrs`. */
export function subjectAccessReview(attrs: RequestAttributes): V1SubjectAccessReview {
  const u = attrs.user;
  const omitEmpty = <T extends Record<string, unknown>>(o: T): T =>
    Object.fromEntries(
      Object.entries(o).filter(([, v]) =>
        v !== undefined && v !== "" && !(Array.isArray(v) && v.length === 0) &&
        !(typeof v === "object" && v !== null && !Array.isArray(v) && Object.keys(v).length === 0)
      ),
    ) as T;
  return {
    kind: "SubjectAccessReview",
    apiVersion: "authorization.k8s.io/v1",
    metadata: {},
    spec: omitEmpty({
      resourceAttributes: omitEmpty({
        verb: attrs.verb,
        group: attrs.apiGroup,
        version: attrs.apiVersion,
        resource: attrs.resource,
        subresource: attrs.subresource,
        name: attrs.name,
      }),
      user: u.name,
      groups: [...u.groups],
      extra: u.extra
        ? Object.fromEntries(Object.entries(u.extra).map(([k, v]) => [k, [...v]]))
        : undefined,
      uid: u.uid,
    }),
    status: { allowed: false },
  };
}

/** Options of {@link webhookAuthorizer}. */
export interface WebhookAuthorizerOptions {
  readonly client: KubeClient;
  readonly clock: Clock;
  readonly logger: Logger;
  /** How long allowed answers are kept, ms. @default 5m (cacheAuthorizedTTL) */
  readonly authorizedTTLMs: number;
  /** How long other answers are kept, ms. @default 30s (cacheUnauthorizedTTL) */
  readonly unauthorizedTTLMs: number;
  /** @default DEFAULT_WEBHOOK_RETRY_BACKOFF */
  readonly retryBackoff?: RetryBackoff;
  /** apiserver_delegated_authz_request_*, per SubjectAccessReview attempt. @default none */
  readonly metrics?: ApiserverMetrics;
}

/** Upstream's webhook authorizer: a SubjectAccessReview per attribute set, answers cached. */
export function webhookAuthorizer(opts: WebhookAuthorizerOptions): Authorizer {
  const cache = new ExpiringCache<{ allowed: boolean; denied: boolean; reason: string }>(
    opts.clock,
    CACHE_SIZE,
  );
  const recorded = opts.metrics && {
    total: opts.metrics.delegatedAuthzRequests,
    duration: opts.metrics.delegatedAuthzRequestDuration,
  };
  return {
    async authorize(attrs, signal) {
      const review = subjectAccessReview(attrs);
      const key = JSON.stringify(review.spec);
      let status = cache.get(key);
      if (!status) {
        let result: V1SubjectAccessReview;
        try {
          result = await withBackoff(
            opts.retryBackoff ?? DEFAULT_WEBHOOK_RETRY_BACKOFF,
            opts.clock,
            () =>
              recordedCreate(
                opts.client,
                SUBJECT_ACCESS_REVIEWS,
                review,
                opts.clock,
                recorded,
                signal,
              ),
            signal,
          );
        } catch (e) {
          if (!signal?.aborted) opts.logger.error(e, "Failed to make webhook authorizer request");
          throw e;
        }
        status = {
          allowed: result.status?.allowed === true,
          denied: result.status?.denied === true,
          reason: result.status?.reason ?? "",
        };
        const size = [
          attrs.verb,
          attrs.apiGroup,
          attrs.apiVersion,
          attrs.resource,
          attrs.subresource,
          attrs.name,
          attrs.path,
        ].reduce((n, s) => n + s.length, 0);
        if (size < MAX_CACHED_ATTRIBUTES_SIZE) {
          cache.set(key, status, status.allowed ? opts.authorizedTTLMs : opts.unauthorizedTTLMs);
        }
      }
      if (status.allowed && status.denied) {
        throw new AuthorizationError(
          "webhook subject access review returned both allow and deny response",
        );
      }
      return { allowed: status.allowed, reason: status.reason };
    },
  };
}

/** Builds the authorizer for `authorization.mode` (upstream BuildAuthz). */
export function buildAuthz(opts: AuthOptions): Authorizer {
  const { authorization } = opts.config;
  switch (authorization.mode) {
    case "AlwaysAllow":
      return withAlternatives(alwaysAllow);
    case "Webhook":
      if (!opts.client) {
        throw new AuthConfigError("no client provided, cannot use webhook authorization");
      }
      return withAlternatives(webhookAuthorizer({
        client: opts.client,
        clock: opts.clock,
        logger: opts.logger,
        authorizedTTLMs: authorization.webhook.cacheAuthorizedTTL,
        unauthorizedTTLMs: authorization.webhook.cacheUnauthorizedTTL,
        retryBackoff: opts.webhookRetryBackoff,
        metrics: opts.metrics?.apiserver,
      }));
    case "":
      throw new AuthConfigError("no authorization mode specified");
    default:
      throw new AuthConfigError(`unknown authorization mode ${authorization.mode}`);
  }
}
