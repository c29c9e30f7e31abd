/**
 * @module
 * One configured credential provider: which images it serves (`matchImages`, matched as
 * upstream's `URLsMatchStr`), the in-memory cache of its answers (keyed by image, registry or
 * `<global>` as the response's `cacheKeyType` says, for the response's `cacheDuration` or the
 * configured `defaultCacheDuration`; expired entries are dropped when looked up and all of them
 * every 15 minutes), one run at a time per image (upstream's singleflight), and with
 * `tokenAttributes` (KEP-4412) the pod's service account: its required and optional
 * annotations, a token for the configured audience bound to the pod, and a cache key per
 * service account (and per token with cacheType Token). Corresponds to upstream `pluginProvider`,
 * `serviceAccountProvider` and `perPodPluginProvider` of
 * `pkg/credentialprovider/plugin/plugin.go`.
 */

import type { V1ServiceAccount } from "@kubernetes/client-node";
import { abortable, type Clock } from "../util/clock.ts";
import type { TokenRequestSpec } from "../token/token_manager.ts";
import type { CredentialProvider } from "./config.ts";
import type {
  CredentialPlugin,
  CredentialProviderResponse,
  PluginAuthConfig,
} from "./exec_plugin.ts";
import { urlsMatch } from "./urls_match.ts";
import { errorText } from "../util/errors.ts";

/** The key under which credentials for every image are cached. */
export const GLOBAL_CACHE_KEY = "<global>";
/** How often every expired entry is dropped (upstream cachePurgeInterval). */
export const CACHE_PURGE_INTERVAL_MS = 15 * 60 * 1000;

/** Registry patterns to credentials, as a docker config holds them. */
export type DockerConfig = Readonly<Record<string, PluginAuthConfig>>;

/** The pod an image is pulled for. */
export interface PodCoordinates {
  readonly namespace: string;
  readonly name: string;
  readonly uid: string;
  /** `spec.serviceAccountName`; "" when none. */
  readonly serviceAccountName: string;
}

/** The service account whose token got the credentials (upstream ServiceAccountCoordinates). */
export interface ServiceAccountCoordinates {
  readonly uid: string;
  readonly namespace: string;
  readonly name: string;
}

/** What one provider gives for an image. */
export interface ProvidedCredentials {
  readonly config: DockerConfig;
  /** Set when the credentials came through the pod's service account token. */
  readonly serviceAccount?: ServiceAccountCoordinates;
}

/** The apiserver calls the service account token mode needs. */
export interface ServiceAccountAccess {
  getServiceAccount(
    namespace: string,
    name: string,
    signal?: AbortSignal,
  ): Promise<V1ServiceAccount>;
  /** A token (its text) of the service account for `spec` (the kubelet's token manager). */
  getServiceAccountToken(
    namespace: string,
    name: string,
    spec: TokenRequestSpec,
    signal?: AbortSignal,
  ): Promise<string>;
}

/** Options of {@link PluginProvider}. */
export interface PluginProviderOptions {
  readonly provider: CredentialProvider;
  readonly plugin: CredentialPlugin;
  readonly clock: Clock;
  /**
   * Set when the provider has `tokenAttributes` and the gate
   * KubeletServiceAccountTokenForCredentialProviders is on. @default none: no token mode
   */
  readonly serviceAccounts?: ServiceAccountAccess;
}

/** A required service account annotation is missing: the plugin is not run (not an error). */
class RequiredAnnotationNotFound extends Error {
  override name = "RequiredAnnotationNotFound";
}

interface CacheEntry {
  readonly credentials: DockerConfig;
  readonly expiresAt: number;
}

/** One provider; see the module documentation. */
export class PluginProvider {
  readonly name: string;
  readonly #p: CredentialProvider;
  readonly #plugin: CredentialPlugin;
  readonly #clock: Clock;
  readonly #sa: ServiceAccountAccess | undefined;
  readonly #cache = new Map<string, CacheEntry>();
  readonly #inFlight = new Map<string, Promise<CredentialProviderResponse>>();
  #lastPurge: number;

  constructor(opts: PluginProviderOptions) {
    this.name = opts.provider.name;
    this.#p = opts.provider;
    this.#plugin = opts.plugin;
    this.#clock = opts.clock;
    const t = opts.provider.tokenAttributes;
    this.#sa = t && t.serviceAccountTokenAudience !== "" ? opts.serviceAccounts : undefined;
    this.#lastPurge = opts.clock.now();
  }

  /** Whether the provider runs in service account token mode. */
  get usesServiceAccount(): boolean {
    return this.#sa !== undefined;
  }

  /** How many answers are cached, expired ones included until they are dropped. */
  get cacheSize(): number {
    return this.#cache.size;
  }

  /** Upstream `isImageAllowed`: whether one of `matchImages` matches `image`. */
  isImageAllowed(image: string): boolean {
    return this.#p.matchImages.some((m) => urlsMatch(m, image));
  }

  /**
   * Upstream `provide`: the credentials for `image` (a repository without tag) from the cache or
   * a run of the plugin; empty when the image does not match or the pod's service account does
   * not qualify. Throws on a failed run or token request (the caller logs it).
   */
  async provide(
    image: string,
    pod: PodCoordinates,
    signal?: AbortSignal,
  ): Promise<ProvidedCredentials> {
    const none: ProvidedCredentials = { config: {} };
    if (!this.isImageAllowed(image)) return none;
    let token = "";
    let tokenHash = "";
    let annotations: Record<string, string> | undefined;
    let saKey = "";
    let serviceAccount: ServiceAccountCoordinates | undefined;
    const sa = this.#sa;
    const attrs = this.#p.tokenAttributes;
    if (sa && attrs) {
      if (pod.serviceAccountName === "" && attrs.requireServiceAccount) return none;
      if (pod.serviceAccountName !== "") {
        let uid: string;
        try {
          ({ uid, annotations } = await this.#serviceAccountData(sa, pod, signal));
        } catch (e) {
          if (e instanceof RequiredAnnotationNotFound) return none;
          throw new Error(`failed to get service account: ${errorText(e)}`, { cause: e });
        }
        try {
          token = await sa.getServiceAccountToken(pod.namespace, pod.serviceAccountName, {
            audiences: [attrs.serviceAccountTokenAudience],
            boundObjectRef: { apiVersion: "v1", kind: "Pod", name: pod.name, uid: pod.uid },
            serviceAccountUID: uid,
          }, signal);
        } catch (e) {
          throw new Error(`failed to get service account token: ${errorText(e)}`, { cause: e });
        }
        tokenHash = await hashIfNotEmpty(token);
        const b = new KeyBuilder().string(pod.namespace).string(pod.serviceAccountName).string(uid)
          .annotations(annotations);
        if (attrs.cacheType === "Token") b.string("token").string(tokenHash);
        saKey = b.build();
        serviceAccount = { uid, namespace: pod.namespace, name: pod.serviceAccountName };
      }
    }

    const result = (config: DockerConfig): ProvidedCredentials =>
      serviceAccount ? { config, serviceAccount } : { config };
    const cached = this.#cached(image, saKey);
    if (cached) return result(cached);

    // One run per image (or, with a token, per image, token and annotations) at a time.
    const flightKey = sa && pod.serviceAccountName !== ""
      ? new KeyBuilder().string(image).string(tokenHash).annotations(annotations ?? {}).build()
      : image;
    let run = this.#inFlight.get(flightKey);
    if (!run) {
      run = this.#plugin.exec({
        image,
        ...(token ? { serviceAccountToken: token } : {}),
        ...(annotations && Object.keys(annotations).length > 0
          ? { serviceAccountAnnotations: annotations }
          : {}),
      });
      const started = run;
      this.#inFlight.set(flightKey, started);
      started.then(
        () => this.#inFlight.delete(flightKey),
        () => this.#inFlight.delete(flightKey),
      );
    }
    let response: CredentialProviderResponse;
    try {
      response = await abortable(run, signal);
    } catch (e) {
      signal?.throwIfAborted();
      throw new Error(
        `failed to get credential from external registry credential provider: ${errorText(e)}`,
        { cause: e },
      );
    }
    if (token !== "" && attrs?.cacheType !== "Token") {
      if (Object.values(response.auth).some((a) => a.password === token)) {
        throw new Error(
          "credential provider plugin returned the service account token as the password which " +
            "is not allowed when service account cache type is not set to 'Token'",
        );
      }
    }
    let baseKey: string;
    switch (response.cacheKeyType) {
      case "Image":
        baseKey = image;
        break;
      case "Registry":
        baseKey = parseRegistry(image);
        break;
      case "Global":
        baseKey = GLOBAL_CACHE_KEY;
        break;
      default:
        throw new Error(
          `credential provider plugin did not return a valid cacheKeyType: ${response.cacheKeyType}`,
        );
    }
    const config: DockerConfig = Object.fromEntries(
      Object.entries(response.auth).map((
        [k, a],
      ) => [k, { username: a.username, password: a.password }]),
    );
    const duration = response.cacheDuration ?? this.#p.defaultCacheDuration ?? 0;
    // An explicit 0, or no duration and a default of 0: not cached.
    if (duration === 0) return result(config);
    this.#cache.set(cacheKey(baseKey, saKey), {
      credentials: config,
      expiresAt: this.#clock.now() + duration,
    });
    return result(config);
  }

  /** Upstream `getCachedCredentials`: by image, then registry, then global. */
  #cached(image: string, saKey: string): DockerConfig | undefined {
    const now = this.#clock.now();
    if (now > this.#lastPurge + CACHE_PURGE_INTERVAL_MS) {
      for (const [key, entry] of this.#cache) if (now > entry.expiresAt) this.#cache.delete(key);
      this.#lastPurge = now;
    }
    for (const base of [image, parseRegistry(image), GLOBAL_CACHE_KEY]) {
      const key = cacheKey(base, saKey);
      const entry = this.#cache.get(key);
      if (!entry) continue;
      // An expired entry is gone once looked up (client-go's ExpirationStore).
      if (now > entry.expiresAt) {
        this.#cache.delete(key);
        continue;
      }
      return entry.credentials;
    }
    return undefined;
  }

  async #serviceAccountData(
    sa: ServiceAccountAccess,
    pod: PodCoordinates,
    signal?: AbortSignal,
  ): Promise<{ uid: string; annotations: Record<string, string> }> {
    const account = await sa.getServiceAccount(pod.namespace, pod.serviceAccountName, signal);
    const have = account.metadata?.annotations ?? {};
    const annotations: Record<string, string> = {};
    const attrs = this.#p.tokenAttributes;
    for (const k of attrs?.requiredServiceAccountAnnotationKeys ?? []) {
      const v = have[k];
      if (v === undefined) {
        throw new RequiredAnnotationNotFound(`required annotation ${k} not found`);
      }
      annotations[k] = v;
    }
    for (const k of attrs?.optionalServiceAccountAnnotationKeys ?? []) {
      const v = have[k];
      if (v !== undefined) annotations[k] = v;
    }
    return { uid: account.metadata?.uid ?? "", annotations };
  }
}

/** Upstream `parseRegistry`: the image's first path element, port included. */
export function parseRegistry(image: string): string {
  return image.split("/")[0] ?? "";
}

/** Upstream `generateCacheKey`: the base key and the service account key, length-prefixed. */
export function cacheKey(base: string, serviceAccountKey: string): string {
  return new KeyBuilder().string(base).string(serviceAccountKey).build();
}

/**
 * Upstream's cryptobyte cache key builder: each string with a 2-byte big-endian length prefix,
 * annotations as a 4-byte count then sorted key/value pairs; a string of bytes.
 */
class KeyBuilder {
  #bytes: number[] = [];

  string(s: string): this {
    const b = new TextEncoder().encode(s);
    this.#bytes.push((b.length >> 8) & 0xff, b.length & 0xff, ...b);
    return this;
  }

  annotations(a: Readonly<Record<string, string>>): this {
    const keys = Object.keys(a).sort();
    const n = keys.length;
    this.#bytes.push((n >>> 24) & 0xff, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff);
    for (const k of keys) this.string(k).string(a[k] ?? "");
    return this;
  }

  build(): string {
    return String.fromCharCode(...this.#bytes);
  }
}

async function hashIfNotEmpty(data: string): Promise<string> {
  if (data === "") return "";
  const d = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(data)));
  return `sha256:${[...d].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
}
