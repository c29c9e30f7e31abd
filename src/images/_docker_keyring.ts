/**
 * @module
 * Private to `image_manager.ts`: image reference parsing and the keyring built from a pod's
 * pull secrets. References are parsed as docker's `reference.ParseNormalizedNamed` does ("nginx"
 * is "docker.io/library/nginx", tag "latest"); secrets of type `kubernetes.io/dockerconfigjson`
 * and `kubernetes.io/dockercfg` become keyrings whose entries match images by registry host
 * (globs per dot-separated label, same port) and path prefix, most specific first, with
 * "index.docker.io" credentials used for Docker Hub images. Credential provider plugins' answers
 * go into such a keyring too, each entry tagged with the service account it came through.
 * Corresponds to upstream `pkg/util/parsers`, `pkg/credentialprovider/keyring.go`, `config.go`
 * and `secrets/secrets.go`.
 */

import type { V1Secret } from "@kubernetes/client-node";
import { urlsMatch } from "../credentialprovider/urls_match.ts";
import type { ServiceAccountCoordinates } from "../credentialprovider/plugin_provider.ts";

/** A parsed image reference. */
export interface ImageName {
  /** The normalised repository, e.g. "docker.io/library/nginx". */
  readonly repo: string;
  /** The tag; "latest" when the reference has neither tag nor digest. */
  readonly tag: string;
  /** "algo:hex", or "" when absent. */
  readonly digest: string;
}

/** A reference that does not parse. */
export class InvalidReferenceError extends Error {
  override name = "InvalidReferenceError";
}

const COMPONENT = "[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*";
const LABEL = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
const DOMAIN = `${LABEL}(?:\\.${LABEL})*(?::[0-9]+)?`;
const TAG = "[\\w][\\w.-]{0,127}";
const DIGEST = "[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}";
const REFERENCE = new RegExp(
  `^((?:${DOMAIN}/)?${COMPONENT}(?:/${COMPONENT})*)(?::(${TAG}))?(?:@(${DIGEST}))?$`,
);
const NAME_TOTAL_LENGTH_MAX = 255;

/** Parses `image` as upstream `parsers.ParseImageName`; throws {@link InvalidReferenceError}. */
export function parseImageName(image: string): ImageName {
  const m = REFERENCE.exec(image);
  if (!m) {
    const name = image.split(/[:@]/)[0] ?? "";
    if (name !== name.toLowerCase() && REFERENCE.test(image.toLowerCase())) {
      throw new InvalidReferenceError(
        `invalid reference format: repository name (${name}) must be lowercase`,
      );
    }
    throw new InvalidReferenceError("invalid reference format");
  }
  const name = m[1] ?? "";
  if (name.length > NAME_TOTAL_LENGTH_MAX) {
    throw new InvalidReferenceError(
      `repository name must not be more than ${NAME_TOTAL_LENGTH_MAX} characters`,
    );
  }
  const tag = m[2] ?? "";
  const digest = m[3] ?? "";
  return { repo: normalizeRepo(name), tag: tag || (digest ? "" : "latest"), digest };
}

/** docker's splitDockerDomain: Docker Hub names gain "docker.io/" and "library/". */
function normalizeRepo(name: string): string {
  const slash = name.indexOf("/");
  let domain = "docker.io";
  let rest = name;
  if (slash >= 0) {
    const first = name.slice(0, slash);
    if (first.includes(".") || first.includes(":") || first === "localhost") {
      domain = first === "index.docker.io" ? "docker.io" : first;
      rest = name.slice(slash + 1);
    }
  }
  if (domain === "docker.io" && !rest.includes("/")) rest = `library/${rest}`;
  return `${domain}/${rest}`;
}

/** One credential from a docker config (upstream `credentialprovider.AuthConfig`). */
export interface DockerAuth {
  readonly username: string;
  readonly password: string;
  readonly email: string;
}

/** Credentials for images, from one or more docker configs. */
export interface DockerKeyring {
  /** The credentials whose registry matches `repo` (a normalised repository), best first. */
  lookup(repo: string): DockerAuth[];
}

/** The registry of Docker Hub credentials, as `docker login` writes it. */
const DEFAULT_REGISTRY_HOST = "index.docker.io";

/** A pull secret's coordinates (upstream SecretCoordinates). */
export interface SecretCoordinates {
  readonly uid: string;
  readonly namespace: string;
  readonly name: string;
}

/**
 * Where a credential came from (upstream CredentialSource): a pod's pull secret, or the service
 * account whose token a credential provider got it with; neither for node-wide credentials.
 */
export type CredentialSource =
  | { readonly secret: SecretCoordinates }
  | { readonly serviceAccount: ServiceAccountCoordinates };

/** A credential and where it came from. */
export interface TrackedDockerAuth {
  readonly auth: DockerAuth;
  readonly secret?: SecretCoordinates;
  readonly serviceAccount?: ServiceAccountCoordinates;
}

/** Upstream `BasicDockerKeyring`: one docker config's entries, keyed by host and path. */
export class BasicDockerKeyring implements DockerKeyring {
  readonly #creds = new Map<string, TrackedDockerAuth[]>();
  #index: string[] = [];

  /**
   * Adds a docker config: registry location to entry (`{username, password, auth, email}`),
   * each entry tagged with its source when given. Throws on an entry whose auth does not
   * decode, adding none of the config.
   */
  add(config: Readonly<Record<string, unknown>>, source?: CredentialSource): void {
    const entries = Object.entries(config).map(([loc, raw]) =>
      [loc, parseEntry(loc, raw)] as const
    );
    for (const [loc, auth] of entries) {
      const { host, path } = splitSchemeless(loc.replace(/^https?:\/\//, ""));
      // The docker client treats /v1/ and /v2/ as the bare host (ResolveAuthConfig).
      const effective = path.startsWith("/v1/") || path.startsWith("/v2/") ? path.slice(3) : path;
      const key = effective !== "" && effective !== "/" ? host + effective : host;
      const list = this.#creds.get(key) ?? [];
      if (list.length === 0) this.#index.push(key);
      list.push(source ? { auth, ...source } : { auth });
      this.#creds.set(key, list);
    }
    // Reverse lexical order puts longer (more specific) keys first, as upstream sorts.
    this.#index = [...new Set(this.#index)].sort().reverse();
  }

  lookup(repo: string): DockerAuth[] {
    return this.lookupTracked(repo).map((t) => t.auth);
  }

  /** {@link lookup} with each credential's service account. */
  lookupTracked(repo: string): TrackedDockerAuth[] {
    const found: TrackedDockerAuth[] = [];
    for (const key of this.#index) {
      if (urlsMatch(key, repo)) found.push(...(this.#creds.get(key) ?? []));
    }
    if (found.length > 0) return found;
    if (isDefaultRegistryMatch(repo)) return [...(this.#creds.get(DEFAULT_REGISTRY_HOST) ?? [])];
    return [];
  }
}

function parseEntry(loc: string, raw: unknown): DockerAuth {
  const e = (typeof raw === "object" && raw !== null ? raw : {}) as Record<string, unknown>;
  const str = (v: unknown) => (typeof v === "string" ? v : "");
  const email = str(e.email);
  const auth = str(e.auth);
  if (auth === "") return { username: str(e.username), password: str(e.password), email };
  let decoded: string;
  try {
    decoded = atob(auth);
  } catch {
    throw new Error(
      `the auth of registry '${loc}' is not base64: expected base64 of user:password`,
    );
  }
  const colon = decoded.indexOf(":");
  if (colon < 0) {
    throw new Error(`the auth of registry '${loc}' has no ':': expected base64 of user:password`);
  }
  return { username: decoded.slice(0, colon), password: decoded.slice(colon + 1), email };
}

/** Host (with any port) and path ("" or starting with "/") of a URL without its scheme. */
function splitSchemeless(s: string): { host: string; path: string } {
  const slash = s.indexOf("/");
  return slash < 0 ? { host: s, path: "" } : { host: s.slice(0, slash), path: s.slice(slash) };
}

/** Upstream `isDefaultRegistryMatch`: whether `image` lives on Docker Hub. */
export function isDefaultRegistryMatch(image: string): boolean {
  const slash = image.indexOf("/");
  const first = slash < 0 ? image : image.slice(0, slash);
  if (first === "") return false;
  if (slash < 0) return true;
  if (first === "docker.io" || first === "index.docker.io") return true;
  return !/[.:]/.test(first);
}

const SECRET_KEYS: Readonly<Record<string, string>> = {
  "kubernetes.io/dockerconfigjson": ".dockerconfigjson",
  "kubernetes.io/dockercfg": ".dockercfg",
};

/** A pull secret whose docker config does not parse: the pod's pulls fail, naming it. */
export class PullSecretError extends Error {
  override name = "PullSecretError";
}

/**
 * The keyring of a pod's pull secrets (upstream `secrets.MakeDockerKeyring`): one keyring of
 * every secret's entries, each tagged with its secret, most specific registry key first across
 * all of them. Secrets of other types, or without their key, are skipped; a secret whose data
 * does not parse throws {@link PullSecretError} naming it, as upstream's fails the lookup.
 */
export function keyringFromSecrets(secrets: readonly V1Secret[]): BasicDockerKeyring {
  const keyring = new BasicDockerKeyring();
  for (const secret of secrets) {
    const key = SECRET_KEYS[secret.type ?? ""];
    const data = key === undefined ? undefined : secret.data?.[key];
    if (data === undefined || data === "") continue;
    const meta = secret.metadata ?? {};
    const coords = { uid: meta.uid ?? "", namespace: meta.namespace ?? "", name: meta.name ?? "" };
    try {
      const parsed: unknown = JSON.parse(new TextDecoder().decode(base64Bytes(data)));
      // JSON null is an empty config, as Go's decoder reads it.
      const config =
        (key === ".dockerconfigjson" ? (parsed as { auths?: unknown } | null)?.auths : parsed) ??
          {};
      if (typeof config !== "object" || config === null || Array.isArray(config)) {
        throw new Error(`expected an object of registries, got ${JSON.stringify(config)}`);
      }
      keyring.add(config as Record<string, unknown>, { secret: coords });
    } catch (e) {
      throw new PullSecretError(
        `pull secret ${coords.namespace}/${coords.name}: ${key} does not parse: ${
          e instanceof Error ? e.message : String(e)
        }`,
        { cause: e },
      );
    }
  }
  return keyring;
}

function base64Bytes(b64: string): Uint8Array {
  return Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
}
