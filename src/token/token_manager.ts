/**
 * @module
 * TokenManager: service account tokens for the pods of this node, requested from the apiserver's
 * TokenRequest API (`POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token`) and cached per
 * request until they need a refresh: past 80% of their lifetime, older than 24 h, or issued in
 * the future after a clock jump. When a refresh fails the cached token is used while it is still
 * valid. The projected volume plugin (`volume/projected.ts`) asks it for tokens; the integrator
 * calls {@link TokenManager.cleanup} from housekeeping (upstream runs it every minute) and
 * {@link TokenManager.deleteServiceAccountToken} when a pod's volumes are torn down.
 * Corresponds to upstream `pkg/kubelet/token/token_manager.go`.
 */

import type {
  AuthenticationV1TokenRequest,
  V1APIResourceList,
  V1BoundObjectReference,
  V1TokenRequestSpec,
} from "@kubernetes/client-node";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import { goQuote } from "../klog/encode.ts";
import { isStatus, type KubeClient } from "../client/kube_client.ts";

/** Tokens older than this are refreshed whatever their expiry (upstream maxTTL). */
export const MAX_TOKEN_TTL_MS = 24 * 60 * 60 * 1000;
/** How often upstream drops expired tokens from the cache (upstream gcPeriod). */
export const TOKEN_GC_PERIOD_MS = 60 * 1000;
/** Upstream maxJitter: refreshes happen up to this much earlier, in whole seconds. */
export const MAX_TOKEN_JITTER_MS = 10 * 1000;

/**
 * What a token request asks for: audiences, lifetime and the object the token is bound to; and,
 * as the request's `metadata.uid`, the service account's UID when the token must be refused for
 * another account of the same name (one deleted and made again: upstream's precondition).
 */
export type TokenRequestSpec =
  & Pick<V1TokenRequestSpec, "audiences" | "expirationSeconds" | "boundObjectRef">
  & { readonly serviceAccountUID?: string };

/** A token and when it expires (RFC 3339), as the apiserver's TokenRequest status gives them. */
export interface ServiceAccountToken {
  readonly token: string;
  readonly expirationTimestamp: string;
}

/** A token could not be fetched and no valid cached one was left. */
export class TokenManagerError extends Error {
  override name = "TokenManagerError";
}

/** Options of {@link TokenManager}. */
export interface TokenManagerOptions {
  /** The apiserver. @default none: a standalone kubelet, every request fails */
  readonly client?: Pick<KubeClient, "request">;
  readonly clock: Clock;
  readonly logger: Logger;
  /**
   * A number in [0, 1) that picks each refresh check's jitter (0 for none).
   * @default Math.random, as upstream's rand.Float64
   */
  readonly random?: () => number;
}

/** One cached token request: what was asked, and what the apiserver answered. */
interface CachedToken {
  readonly token: ServiceAccountToken;
  /** The answer's lifetime in seconds (the answer's spec, else the request's). */
  readonly expirationSeconds: number | undefined;
  /** Parsed `expirationTimestamp`, ms since the epoch. */
  readonly expiresAt: number;
  /** The pod the token is bound to, for {@link TokenManager.deleteServiceAccountToken}. */
  readonly boundUid: string | undefined;
}

/** Service account tokens of this node's pods (upstream `token.Manager`). */
export class TokenManager {
  readonly #client: Pick<KubeClient, "request"> | undefined;
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #random: () => number;
  readonly #cache = new Map<string, CachedToken>();
  /** Whether the apiserver serves serviceaccounts/token; asked once, after a 404. */
  #supported: Promise<boolean> | undefined;

  constructor(opts: TokenManagerOptions) {
    this.#client = opts.client;
    this.#clock = opts.clock;
    this.#log = opts.logger;
    this.#random = opts.random ?? Math.random;
  }

  /**
   * A token of service account `namespace/name` for `spec`, from the cache or a new
   * TokenRequest. When the refresh of a cached token fails, the cached token is returned (and the
   * failure logged) while it has not expired; otherwise throws {@link TokenManagerError}.
   */
  async getServiceAccountToken(
    namespace: string,
    name: string,
    spec: TokenRequestSpec,
    signal?: AbortSignal,
  ): Promise<ServiceAccountToken> {
    const key = cacheKey(name, namespace, spec);
    const cached = this.#cache.get(key);
    if (cached !== undefined && !this.#requiresRefresh(cached)) return cached.token;

    let fresh: CachedToken;
    try {
      fresh = await this.#fetch(namespace, name, spec, signal);
    } catch (err) {
      signal?.throwIfAborted();
      const detail = err instanceof Error ? err.message : String(err);
      if (cached === undefined) {
        throw new TokenManagerError(`failed to fetch token: ${detail}`, { cause: err });
      }
      if (this.#expired(cached)) {
        throw new TokenManagerError(`token ${key} expired and refresh failed: ${detail}`, {
          cause: err,
        });
      }
      this.#log.error(err, "Couldn't update token", { cacheKey: key });
      return cached.token;
    }
    this.#cache.set(key, fresh);
    return fresh.token;
  }

  /** Forgets every token bound to the pod (upstream DeleteServiceAccountToken). */
  deleteServiceAccountToken(podUid: string): void {
    for (const [key, entry] of this.#cache) {
      if (entry.boundUid === podUid) this.#cache.delete(key);
    }
  }

  /** Drops expired tokens; call it every {@link TOKEN_GC_PERIOD_MS} (upstream cleanup). */
  cleanup(): void {
    for (const [key, entry] of this.#cache) {
      if (this.#expired(entry)) this.#cache.delete(key);
    }
  }

  /** How many tokens are cached. */
  get size(): number {
    return this.#cache.size;
  }

  async #fetch(
    namespace: string,
    name: string,
    spec: TokenRequestSpec,
    signal?: AbortSignal,
  ): Promise<CachedToken> {
    const client = this.#client;
    if (client === undefined) {
      throw new TokenManagerError("cannot use TokenManager when kubelet is in standalone mode");
    }
    const { serviceAccountUID, ...wanted } = spec;
    const body: AuthenticationV1TokenRequest = {
      apiVersion: "authentication.k8s.io/v1",
      kind: "TokenRequest",
      ...(serviceAccountUID ? { metadata: { uid: serviceAccountUID } } : {}),
      spec: { ...wanted, audiences: wanted.audiences ?? [] },
    };
    const path = `/api/v1/namespaces/${encodeURIComponent(namespace)}/serviceaccounts/${
      encodeURIComponent(name)
    }/token`;
    let answer: WireTokenRequest;
    try {
      answer = await client.request<WireTokenRequest>("POST", path, { body, signal });
    } catch (err) {
      if (isStatus(err, 404) && !(await this.#tokenRequestsSupported(client, signal))) {
        throw new TokenManagerError("the API server does not have TokenRequest endpoints enabled", {
          cause: err,
        });
      }
      throw err;
    }
    const token = answer.status?.token;
    const expirationTimestamp = answer.status?.expirationTimestamp;
    const expiresAt = expirationTimestamp === undefined ? NaN : Date.parse(expirationTimestamp);
    if (token === undefined || expirationTimestamp === undefined || Number.isNaN(expiresAt)) {
      throw new TokenManagerError(
        `TokenRequest for ${namespace}/${name} answered without status.token and a valid status.expirationTimestamp`,
      );
    }
    return {
      token: { token, expirationTimestamp },
      expirationSeconds: answer.spec?.expirationSeconds ?? spec.expirationSeconds,
      expiresAt,
      boundUid: spec.boundObjectRef?.uid,
    };
  }

  /** Upstream's discovery check: does `/api/v1` list `serviceaccounts/token`? Asked once. */
  #tokenRequestsSupported(
    client: Pick<KubeClient, "request">,
    signal?: AbortSignal,
  ): Promise<boolean> {
    this.#supported ??= client.request<V1APIResourceList>("GET", "/api/v1", { signal }).then(
      (list) => (list.resources ?? []).some((r) => r.name === "serviceaccounts/token"),
      // As upstream's sync.Once: a failed discovery counts as unsupported, and is not retried.
      () => false,
    );
    return this.#supported;
  }

  #expired(entry: CachedToken): boolean {
    return this.#clock.now() > entry.expiresAt;
  }

  /**
   * Upstream requiresRefresh: older than 24 h, within 20% of its lifetime of expiring (both
   * brought forward by a jitter of whole seconds below 10 s), or issued after now.
   */
  #requiresRefresh(entry: CachedToken): boolean {
    if (entry.expirationSeconds === undefined) {
      this.#log.error(null, "Expiration seconds was nil for token request", {
        expirationTimestamp: entry.token.expirationTimestamp,
      });
      return false;
    }
    const now = this.#clock.now();
    const exp = entry.expiresAt;
    const iat = exp - entry.expirationSeconds * 1000;
    const jitter = Math.trunc(this.#random() * MAX_TOKEN_JITTER_MS / 1000) * 1000;
    if (now > iat + MAX_TOKEN_TTL_MS - jitter) return true;
    // Go's integer division: 20% of the lifetime in whole seconds.
    const margin = Math.trunc(entry.expirationSeconds * 20 / 100) * 1000;
    if (now > exp - margin - jitter) return true;
    return now < iat;
  }
}

/** The TokenRequest as JSON carries it (client-node types the timestamp as a Date). */
interface WireTokenRequest {
  spec?: { expirationSeconds?: number };
  status?: { token?: string; expirationTimestamp?: string };
}

/**
 * Upstream keyFunc, `%q/%q/%#v/%#v/%#v` of name, namespace, audiences, expiration and bound
 * object: free of secrets, so safe to log.
 */
function cacheKey(name: string, namespace: string, spec: TokenRequestSpec): string {
  const auds = spec.audiences === undefined
    ? "[]string(nil)"
    : `[]string{${spec.audiences.map(goQuote).join(", ")}}`;
  const ref: V1BoundObjectReference = spec.boundObjectRef ?? {};
  const refText = `v1.BoundObjectReference{Kind:${goQuote(ref.kind ?? "")}, APIVersion:${
    goQuote(ref.apiVersion ?? "")
  }, Name:${goQuote(ref.name ?? "")}, UID:${goQuote(ref.uid ?? "")}}`;
  return `${goQuote(name)}/${goQuote(namespace)}/${auds}/${
    spec.expirationSeconds ?? 0
  }/${refText}/${goQuote(spec.serviceAccountUID ?? "")}`;
}
