/**
 * @module
 * Private to `image_manager.ts`: the records behind image pull credential verification
 * (KEP-2535, feature gate KubeletEnsureSecretPulledImages) and the decision whether a pod may
 * use an image already on the node.
 *
 * {@link PullRecordsStore} keeps two kinds of JSON records under `<rootDirectory>/image_manager`:
 * `pulling/` holds an ImagePullIntent per image being pulled (written before a pull, removed after
 * it), `pulled/` an ImagePulledRecord per image reference with the credentials each image name was
 * pulled with (secret coordinates and a hash of the credentials, or "node pods accessible" for an
 * anonymous pull). Files are named "sha256-" + the hex SHA-256 of the key, written atomically via
 * a ".tmp" file, and hold kubelet.config.k8s.io/v1alpha1 objects as upstream writes them. A
 * write-through LRU cache keeps the most recent records; while it holds every record (it has never
 * evicted one) a miss needs no disk read. An unreadable or corrupted file is logged and its content
 * treated as absent; its existence still marks the image as pulled by the kubelet, so pods must
 * prove their credentials again (fail safe).
 *
 * {@link ImagePullManager} counts in-flight pulls, turns leftover intents into credential-less
 * records at start, merges the credentials of each successful pull into the image's record, and
 * answers `mustAttemptImagePull` under the configured verification policy.
 *
 * Corresponds to upstream `pkg/kubelet/images/pullmanager/` (`image_pull_manager.go`,
 * `image_pull_policies.go`, `fs_pullrecords.go`, `mem_pullrecords.go`) and the record types of
 * `k8s.io/kubelet/config/v1alpha1`.
 */

import { createHash } from "node:crypto";
import { join } from "node:path";
import type * as api from "../../proto/runtime/v1/api.ts";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import { goJsonString } from "../util/go_json.ts";
import { parseImageName } from "./_docker_keyring.ts";
import type { ImageMetrics, MustPullCheckResult } from "../metrics/image_metrics.ts";
import { errorText } from "../util/errors.ts";
import { removeIfExists } from "../util/remove.ts";

/** The API version of the records on disk. */
export const RECORDS_API_VERSION = "kubelet.config.k8s.io/v1alpha1";

/** A record of the kubelet starting to pull `image` (a container's `image` field). */
export interface ImagePullIntent {
  readonly image: string;
}

/** The coordinates of a pull secret and the hash of the credentials it supplied. */
export interface ImagePullSecret {
  readonly uid: string;
  readonly namespace: string;
  readonly name: string;
  readonly credentialHash: string;
}

/** A service account whose token got pull credentials from a credential provider. */
export interface ImagePullServiceAccount {
  readonly uid: string;
  readonly namespace: string;
  readonly name: string;
}

/**
 * What a pod has to prove it may use an image: its pull secrets' credentials for the image, and
 * the service account through which a credential provider gave it credentials (upstream keeps
 * one, the first, since the audience is not taken into account).
 */
export interface PodPullCredentials {
  readonly secrets: readonly ImagePullSecret[];
  readonly serviceAccount?: ImagePullServiceAccount;
}

/** The credentials an image was pulled with. */
export interface ImagePullCredentials {
  readonly kubernetesSecrets?: readonly ImagePullSecret[];
  readonly kubernetesServiceAccounts?: readonly ImagePullServiceAccount[];
  /** Any pod of the node may use the image: node-wide credentials or an anonymous pull. */
  readonly nodePodsAccessible?: boolean;
}

/** The credentials with which each image name (no tag or digest) of an image was pulled. */
export interface ImagePulledRecord {
  /** RFC 3339, seconds. */
  readonly lastUpdatedTime: string;
  readonly imageRef: string;
  readonly credentialMapping: Readonly<Record<string, ImagePullCredentials>>;
}

/** A record file whose content is not a record of the expected kind. */
export class PullRecordDecodeError extends Error {
  override name = "PullRecordDecodeError";
}

/** A bad credential verification policy or allowlist pattern. */
export class VerificationPolicyError extends Error {
  override name = "VerificationPolicyError";
}

const SHA256_PREFIX = "sha256-";
const TMP_SUFFIX = ".tmp";

/** The file name of the record keyed by `key` (an image or an image reference). */
export function cacheFilename(key: string): string {
  return SHA256_PREFIX + createHash("sha256").update(key).digest("hex");
}

/**
 * Upstream `hashAuthConfig`: the hex SHA-256 of the credentials as Go's json.Marshal writes
 * `credentialprovider.AuthConfig` (empty fields omitted).
 */
export function credentialHash(auth: { readonly username: string; readonly password: string }) {
  const fields: string[] = [];
  if (auth.username !== "") fields.push(`"username":${goJsonString(auth.username)}`);
  if (auth.password !== "") fields.push(`"password":${goJsonString(auth.password)}`);
  return createHash("sha256").update(`{${fields.join(",")}}`).digest("hex");
}

/** Upstream `trimImageTagDigest`: the normalised repository of `image`; throws when invalid. */
export function trimImageTagDigest(image: string): string {
  return parseImageName(image).repo;
}

// ---------------------------------------------------------------------------------------------
// Encoding

function encodeIntent(intent: ImagePullIntent): string {
  return JSON.stringify({ kind: "ImagePullIntent", apiVersion: RECORDS_API_VERSION, ...intent });
}

function encodeCredentials(c: ImagePullCredentials): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (c.kubernetesSecrets?.length) out.kubernetesSecrets = c.kubernetesSecrets;
  if (c.kubernetesServiceAccounts?.length) {
    out.kubernetesServiceAccounts = c.kubernetesServiceAccounts;
  }
  if (c.nodePodsAccessible) out.nodePodsAccessible = true;
  return out;
}

function encodePulledRecord(r: ImagePulledRecord): string {
  const obj: Record<string, unknown> = {
    kind: "ImagePulledRecord",
    apiVersion: RECORDS_API_VERSION,
    lastUpdatedTime: r.lastUpdatedTime,
    imageRef: r.imageRef,
  };
  // Go writes map keys sorted and leaves an empty map out (omitempty).
  const keys = Object.keys(r.credentialMapping).sort();
  if (keys.length > 0) {
    obj.credentialMapping = Object.fromEntries(
      keys.map((k) => [k, encodeCredentials(r.credentialMapping[k] ?? {})]),
    );
  }
  return JSON.stringify(obj);
}

type Json = Record<string, unknown>;

function object(v: unknown, what: string): Json {
  if (typeof v !== "object" || v === null || Array.isArray(v)) {
    throw new PullRecordDecodeError(`${what}: expected an object`);
  }
  return v as Json;
}

function str(o: Json, key: string, what: string): string {
  const v = o[key];
  if (v === undefined || v === null) return "";
  if (typeof v !== "string") throw new PullRecordDecodeError(`${what}.${key}: expected a string`);
  return v;
}

/** Upstream decodes strictly: unknown fields are errors. */
function onlyKeys(o: Json, allowed: readonly string[], what: string): void {
  for (const k of Object.keys(o)) {
    if (!allowed.includes(k)) throw new PullRecordDecodeError(`${what}: unknown field "${k}"`);
  }
}

function typeMeta(o: Json, kind: string): void {
  if (o.kind !== kind || o.apiVersion !== RECORDS_API_VERSION) {
    throw new PullRecordDecodeError(
      `expected kind ${kind} of ${RECORDS_API_VERSION}, got kind ${JSON.stringify(o.kind)} of ` +
        JSON.stringify(o.apiVersion),
    );
  }
}

function parse(text: string): Json {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (e) {
    throw new PullRecordDecodeError(`not JSON: ${e instanceof Error ? e.message : e}`, {
      cause: e,
    });
  }
  return object(parsed, "record");
}

/** Parses an ImagePullIntent file; throws {@link PullRecordDecodeError}. */
export function decodeIntent(text: string): ImagePullIntent {
  const o = parse(text);
  typeMeta(o, "ImagePullIntent");
  onlyKeys(o, ["kind", "apiVersion", "image"], "ImagePullIntent");
  return { image: str(o, "image", "ImagePullIntent") };
}

function list<T>(v: unknown, what: string, item: (o: Json, what: string) => T): T[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw new PullRecordDecodeError(`${what}: expected a list`);
  return v.map((e, i) => item(object(e, `${what}[${i}]`), `${what}[${i}]`));
}

function decodeCredentials(o: Json, what: string): ImagePullCredentials {
  onlyKeys(o, ["kubernetesSecrets", "kubernetesServiceAccounts", "nodePodsAccessible"], what);
  const secrets = list(o.kubernetesSecrets, `${what}.kubernetesSecrets`, (s, w) => {
    onlyKeys(s, ["uid", "namespace", "name", "credentialHash"], w);
    return {
      uid: str(s, "uid", w),
      namespace: str(s, "namespace", w),
      name: str(s, "name", w),
      credentialHash: str(s, "credentialHash", w),
    };
  });
  const accounts = list(
    o.kubernetesServiceAccounts,
    `${what}.kubernetesServiceAccounts`,
    (s, w) => {
      onlyKeys(s, ["uid", "namespace", "name"], w);
      return { uid: str(s, "uid", w), namespace: str(s, "namespace", w), name: str(s, "name", w) };
    },
  );
  const node = o.nodePodsAccessible ?? false;
  if (typeof node !== "boolean") {
    throw new PullRecordDecodeError(`${what}.nodePodsAccessible: expected a boolean`);
  }
  return {
    ...(secrets.length > 0 ? { kubernetesSecrets: secrets } : {}),
    ...(accounts.length > 0 ? { kubernetesServiceAccounts: accounts } : {}),
    ...(node ? { nodePodsAccessible: true } : {}),
  };
}

/** Parses an ImagePulledRecord file; throws {@link PullRecordDecodeError}. */
export function decodePulledRecord(text: string): ImagePulledRecord {
  const o = parse(text);
  typeMeta(o, "ImagePulledRecord");
  const what = "ImagePulledRecord";
  onlyKeys(o, ["kind", "apiVersion", "lastUpdatedTime", "imageRef", "credentialMapping"], what);
  const mapping: Record<string, ImagePullCredentials> = {};
  if (o.credentialMapping !== undefined && o.credentialMapping !== null) {
    const m = object(o.credentialMapping, `${what}.credentialMapping`);
    for (const [image, creds] of Object.entries(m)) {
      const w = `${what}.credentialMapping[${JSON.stringify(image)}]`;
      mapping[image] = decodeCredentials(object(creds, w), w);
    }
  }
  return {
    lastUpdatedTime: str(o, "lastUpdatedTime", what),
    imageRef: str(o, "imageRef", what),
    credentialMapping: mapping,
  };
}

// ---------------------------------------------------------------------------------------------
// Cache and locks

/** An LRU map that knows whether it still holds every record (upstream `lruCache`). */
class LruCache<V> {
  readonly #entries = new Map<string, V>();
  /** True while the cache has every record: a miss then means there is none. */
  authoritative = false;

  constructor(readonly maxSize: number) {}

  get(key: string): V | undefined {
    const v = this.#entries.get(key);
    if (v === undefined) return undefined;
    this.#entries.delete(key);
    this.#entries.set(key, v);
    return v;
  }

  set(key: string, value: V): void {
    this.#entries.delete(key);
    this.#entries.set(key, value);
    if (this.#entries.size > this.maxSize) {
      const oldest = this.#entries.keys().next().value;
      if (oldest !== undefined) this.#entries.delete(oldest);
      // An evicted record may still be on disk: a miss proves nothing any more.
      this.authoritative = false;
    }
  }

  delete(key: string): void {
    this.#entries.delete(key);
  }

  clear(): void {
    this.#entries.clear();
  }

  get size(): number {
    return this.#entries.size;
  }
}

/** Serialises async work per key, as upstream's striped locks do per image or image ref. */
class KeyedMutex {
  readonly #tails = new Map<string, Promise<void>>();

  async run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.#tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((r) => (release = r));
    const tail = prev.then(() => mine);
    this.#tails.set(key, tail);
    await prev;
    try {
      return await fn();
    } finally {
      release();
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Store

/** Options of {@link PullRecordsStore.open}. */
export interface PullRecordsStoreOptions {
  /** The directory that holds `pulling/` and `pulled/`: `<rootDirectory>/image_manager`. */
  readonly directory: string;
  readonly logger: Logger;
  /** Intents kept in memory (at most 1024). @default 50 */
  readonly intentsCacheSize?: number;
  /** Pulled records kept in memory (at most 2000). @default 100 */
  readonly pulledRecordsCacheSize?: number;
  /**
   * Told the record files on disk and the caches' usage after each write or removal (upstream's
   * metering accessors). @default none
   */
  readonly metrics?: ImageMetrics;
}

/** What {@link PullRecordsStore.getPulledRecord} found. */
export interface PulledRecordLookup {
  /** Whether a file for the image reference exists, readable or not. */
  readonly exists: boolean;
  /** The record; undefined when absent or unreadable (the reason is logged). */
  readonly record?: ImagePulledRecord;
}

/** Pull intents and pulled records on disk, behind a write-through LRU cache. */
export class PullRecordsStore {
  readonly pullingDir: string;
  readonly pulledDir: string;
  readonly #log: Logger;
  readonly #intents: LruCache<ImagePullIntent>;
  readonly #pulled: LruCache<ImagePulledRecord>;
  readonly #metrics: ImageMetrics | undefined;

  private constructor(opts: PullRecordsStoreOptions) {
    this.pullingDir = join(opts.directory, "pulling");
    this.pulledDir = join(opts.directory, "pulled");
    this.#log = opts.logger;
    this.#metrics = opts.metrics;
    this.#intents = new LruCache(Math.min(opts.intentsCacheSize ?? 50, 1024));
    this.#pulled = new LruCache(Math.min(opts.pulledRecordsCacheSize ?? 100, 2000));
  }

  /** Creates the directories (mode 0700) and warms the caches. */
  static async open(opts: PullRecordsStoreOptions): Promise<PullRecordsStore> {
    const store = new PullRecordsStore(opts);
    await Deno.mkdir(store.pullingDir, { recursive: true, mode: 0o700 });
    await Deno.mkdir(store.pulledDir, { recursive: true, mode: 0o700 });
    await store.listIntents();
    await store.listPulledRecords();
    return store;
  }

  /** Every readable intent; unreadable files are logged and skipped. */
  listIntents(): Promise<ImagePullIntent[]> {
    return this.#refreshingList(this.#intents, this.pullingDir, decodeIntent, (i) => i.image);
  }

  /** Whether an intent for exactly `image` exists. */
  async intentExists(image: string): Promise<boolean> {
    if (this.#intents.get(image)) return true;
    if (this.#intents.authoritative) return false;
    const text = await readIfExists(join(this.pullingDir, cacheFilename(image)));
    if (text === undefined) return false;
    const intent = decodeIntent(text);
    if (intent.image !== image) return false;
    this.#intents.set(image, intent);
    return true;
  }

  async writeIntent(image: string): Promise<void> {
    const intent = { image };
    await writeAtomically(this.pullingDir, cacheFilename(image), encodeIntent(intent));
    this.#intents.set(image, intent);
    await this.#meterIntents();
  }

  async deleteIntent(image: string): Promise<void> {
    await removeIfExists(join(this.pullingDir, cacheFilename(image)));
    this.#intents.delete(image);
    await this.#meterIntents();
  }

  /** Every readable pulled record; unreadable files are logged and skipped. */
  listPulledRecords(): Promise<ImagePulledRecord[]> {
    return this.#refreshingList(
      this.#pulled,
      this.pulledDir,
      decodePulledRecord,
      (r) => r.imageRef,
    );
  }

  /** The record of `imageRef`; an unreadable file is logged and reported as existing. */
  async getPulledRecord(imageRef: string): Promise<PulledRecordLookup> {
    const cached = this.#pulled.get(imageRef);
    if (cached) return { exists: true, record: cached };
    if (this.#pulled.authoritative) return { exists: false };
    const path = join(this.pulledDir, cacheFilename(imageRef));
    const text = await readIfExists(path);
    if (text === undefined) return { exists: false };
    let record: ImagePulledRecord;
    try {
      record = decodePulledRecord(text);
    } catch (e) {
      this.#log.error(e, "Failed to read an image pulled record, ignoring its content", {
        path,
        imageRef,
      });
      return { exists: true };
    }
    // A hash collision would name another image's file.
    if (record.imageRef !== imageRef) return { exists: false };
    this.#pulled.set(imageRef, record);
    return { exists: true, record };
  }

  async writePulledRecord(record: ImagePulledRecord): Promise<void> {
    await writeAtomically(
      this.pulledDir,
      cacheFilename(record.imageRef),
      encodePulledRecord(record),
    );
    this.#pulled.set(record.imageRef, record);
    await this.#meterPulledRecords();
  }

  async deletePulledRecord(imageRef: string): Promise<void> {
    await removeIfExists(join(this.pulledDir, cacheFilename(imageRef)));
    this.#pulled.delete(imageRef);
    await this.#meterPulledRecords();
  }

  async #meterIntents(): Promise<void> {
    const m = this.#metrics;
    if (!m) return;
    const files = await this.#countCacheFiles(this.pullingDir);
    if (files !== undefined) m.onDiskPullIntents.set(files);
    m.inMemoryPullIntentsUsage.set(usagePercent(this.#intents));
  }

  async #meterPulledRecords(): Promise<void> {
    const m = this.#metrics;
    if (!m) return;
    const files = await this.#countCacheFiles(this.pulledDir);
    if (files !== undefined) m.onDiskPulledRecords.set(files);
    m.inMemoryPulledRecordsUsage.set(usagePercent(this.#pulled));
  }

  /** Record files in `dir` (temporary files left out); undefined, logged, when unreadable. */
  async #countCacheFiles(dir: string): Promise<number | undefined> {
    let n = 0;
    try {
      for await (const entry of Deno.readDir(dir)) if (isCacheFile(entry)) n++;
    } catch (e) {
      this.#log.v(4).info("failed to count image pull records, can't update metric", {
        path: dir,
        error: errorText(e),
      });
      return undefined;
    }
    return n;
  }

  /** Upstream `cacheRefreshingList`: a full list may make the cache authoritative again. */
  async #refreshingList<V>(
    cache: LruCache<V>,
    dir: string,
    decode: (text: string) => V,
    key: (v: V) => string,
  ): Promise<V[]> {
    const { items, failed } = await this.#readDir(dir, decode);
    if (cache.authoritative) return items;
    const complete = !failed && items.length < cache.maxSize;
    if (complete || cache.size === 0) {
      cache.clear();
      for (const item of items.slice(0, cache.maxSize)) cache.set(key(item), item);
      cache.authoritative = complete;
    }
    return items;
  }

  async #readDir<V>(
    dir: string,
    decode: (text: string) => V,
  ): Promise<{ items: V[]; failed: boolean }> {
    const items: V[] = [];
    let failed = false;
    let entries: Deno.DirEntry[];
    try {
      entries = await Array.fromAsync(Deno.readDir(dir));
    } catch (e) {
      this.#log.error(e, "Failed to list image pull records", { path: dir });
      return { items, failed: true };
    }
    // Sorted, so that which records fit in the cache does not depend on the filesystem.
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const entry of entries) {
      if (!isCacheFile(entry)) continue;
      const path = join(dir, entry.name);
      try {
        items.push(decode(await Deno.readTextFile(path)));
      } catch (e) {
        failed = true;
        this.#log.error(e, "Failed to read an image pull record, ignoring it", { path });
      }
    }
    return { items, failed };
  }
}

/** Whole percent of the cache in use, as upstream's integer arithmetic gives it. */
function usagePercent(cache: LruCache<unknown>): number {
  return Math.floor(cache.size * 100 / cache.maxSize);
}

function isCacheFile(entry: Deno.DirEntry): boolean {
  return entry.isFile && entry.name.startsWith(SHA256_PREFIX) && !entry.name.endsWith(TMP_SUFFIX);
}

async function readIfExists(path: string): Promise<string | undefined> {
  try {
    return await Deno.readTextFile(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return undefined;
    throw e;
  }
}

/** Writes via "<name>.tmp" and a rename, so a crash never leaves half a record. */
async function writeAtomically(dir: string, name: string, content: string): Promise<void> {
  await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
  const target = join(dir, name);
  const tmp = target + TMP_SUFFIX;
  try {
    await Deno.writeTextFile(tmp, content, { mode: 0o600 });
    await Deno.rename(tmp, target);
  } catch (e) {
    await removeIfExists(tmp).catch(() => {});
    throw e;
  }
}

// ---------------------------------------------------------------------------------------------
// Policies

/** The values of KubeletConfiguration `imagePullCredentialsVerificationPolicy`. */
export type CredentialVerificationPolicy =
  | "NeverVerify"
  | "NeverVerifyPreloadedImages"
  | "NeverVerifyAllowlistedImages"
  | "AlwaysVerify";

/** Whether a pod must prove its credentials for `image`, given whether the kubelet pulled it. */
export type RequireVerification = (image: string, pulledByKubelet: boolean) => boolean;

/**
 * Upstream `NewImagePullCredentialVerificationPolicy`; throws {@link VerificationPolicyError}
 * for an unknown policy or a bad allowlist pattern.
 */
export function verificationPolicy(
  policy: string,
  allowlist: readonly string[],
  logger: Logger,
): RequireVerification {
  switch (policy) {
    case "NeverVerify":
      return () => false;
    case "NeverVerifyPreloadedImages":
      return (_, pulledByKubelet) => pulledByKubelet;
    case "AlwaysVerify":
      return () => true;
    case "NeverVerifyAllowlistedImages":
      return allowlistPolicy(allowlist, logger);
    default:
      throw new VerificationPolicyError(
        `unknown image pull credential verification policy: ${policy}`,
      );
  }
}

/** Allowlisted images are never verified, whoever pulled them; the others always are. */
function allowlistPolicy(allowlist: readonly string[], logger: Logger): RequireVerification {
  const names = new Set<string>();
  const prefixes: string[] = [];
  for (const pattern of allowlist) {
    const { normalized, wildcard } = allowlistPattern(pattern);
    if (wildcard) prefixes.push(normalized);
    else names.add(normalized);
  }
  return (image) => {
    let name: string;
    try {
      name = parseImageName(image).repo;
    } catch (e) {
      logger.error(e, "failed to parse image name", { image });
      return true;
    }
    return !(names.has(name) || prefixes.some((p) => name.startsWith(p)));
  };
}

/** Upstream `getAllowlistImagePattern`: a full image name, or a "registry/path/*" prefix. */
export function allowlistPattern(pattern: string): { normalized: string; wildcard: boolean } {
  const fail = (msg: string) => new VerificationPolicyError(msg);
  if (pattern !== pattern.trim()) {
    throw fail(`leading/trailing spaces are not allowed: ${pattern}`);
  }
  const wildcard = pattern.endsWith("/*");
  const trimmed = wildcard ? pattern.slice(0, -1) : pattern;
  if (trimmed.length === 0) throw fail(`the supplied pattern is too short: ${pattern}`);
  if (trimmed.includes("*")) {
    throw fail(
      `not a valid wildcard pattern, only patterns ending with '/*' are allowed: ${pattern}`,
    );
  }
  if (wildcard) {
    if (trimmed.length === 1) throw fail("at least registry hostname is required");
    return { normalized: trimmed, wildcard };
  }
  let repo: string;
  try {
    repo = parseImageName(trimmed).repo;
  } catch (e) {
    throw fail(`failed to parse as an image name: ${e instanceof Error ? e.message : e}`);
  }
  if (repo !== trimmed) {
    throw fail(`neither tag nor digest is accepted in an image reference: ${pattern}`);
  }
  return { normalized: trimmed, wildcard };
}

// ---------------------------------------------------------------------------------------------
// Pull manager

/** Stop recording newly matched secrets once an image has this many (upstream's limit). */
const WRITE_RECORD_WHILE_MATCHING_LIMIT = 100;

/** Options of {@link ImagePullManager}. */
export interface ImagePullManagerOptions {
  readonly store: PullRecordsStore;
  readonly requireVerification: RequireVerification;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Counts each credential check by result. @default none */
  readonly metrics?: ImageMetrics;
}

/** Upstream `PullManager`: pull intents, pulled records and the credential check. */
export class ImagePullManager {
  readonly #store: PullRecordsStore;
  readonly #require: RequireVerification;
  readonly #clock: Clock;
  readonly #log: Logger;
  /** In-flight pulls per image; the intent file goes when the count returns to zero. */
  readonly #intentCounters = new Map<string, number>();
  readonly #intentLocks = new KeyedMutex();
  readonly #pulledLocks = new KeyedMutex();
  readonly #metrics: ImageMetrics | undefined;

  constructor(opts: ImagePullManagerOptions) {
    this.#metrics = opts.metrics;
    this.#store = opts.store;
    this.#require = opts.requireVerification;
    this.#clock = opts.clock;
    this.#log = opts.logger;
  }

  /**
   * Turns intents left by a previous run into pulled records without credentials when the
   * runtime has the image (so every pod must prove its credentials), and removes those intents.
   * Intents of images the runtime does not have stay. Errors are logged.
   */
  async initialize(listImages: () => Promise<readonly api.Image[]>): Promise<void> {
    const intents = await this.#store.listIntents();
    if (intents.length === 0) return;
    let images: readonly api.Image[] = [];
    try {
      images = await listImages();
    } catch (e) {
      this.#log.error(e, "failed to list images");
    }
    const inFlight = new Set(intents.map((i) => i.image));
    for (const image of images) {
      const names = new Set(
        [...image.repoDigests, ...image.repoTags].filter((n) => inFlight.has(n)),
      );
      for (const name of names) {
        try {
          await this.#writePulledRecordIfChanged(name, image.id, undefined);
        } catch (e) {
          this.#log.error(e, "failed to write an image pull record", { imageRef: image.id });
          continue;
        }
        try {
          await this.#store.deleteIntent(name);
        } catch (e) {
          this.#log.v(2).info("failed to remove image pull intent file", {
            imageName: name,
            error: String(e),
          });
        }
      }
    }
  }

  /** Records that `image` is about to be pulled; throws when the intent cannot be written. */
  recordPullIntent(image: string): Promise<void> {
    return this.#intentLocks.run(image, async () => {
      try {
        await this.#store.writeIntent(image);
      } catch (e) {
        throw new Error(`failed to record image pull intent: ${errorText(e)}`, { cause: e });
      }
      this.#intentCounters.set(image, (this.#intentCounters.get(image) ?? 0) + 1);
    });
  }

  /**
   * Records a successful pull of `image` as `imageRef` with `credentials` (undefined: pulled in
   * unknown circumstances, so credentials must be checked next time). Errors are logged; the
   * intent then stays, so that the image still counts as pulled by the kubelet.
   */
  async recordImagePulled(
    image: string,
    imageRef: string,
    credentials: ImagePullCredentials | undefined,
  ): Promise<void> {
    try {
      await this.#writePulledRecordIfChanged(image, imageRef, credentials);
    } catch (e) {
      this.#log.error(e, "failed to write image pulled record", { imageRef });
      return;
    }
    await this.#decrementIntent(image);
  }

  /** Records a failed (or abandoned) pull of `image`. */
  recordImagePullFailed(image: string): Promise<void> {
    return this.#decrementIntent(image);
  }

  /**
   * Whether the pod must pull `image` (present as `imageRef`) to prove it may use it: the policy
   * demands verification and no record shows the image pulled anonymously, with node-wide
   * credentials, with one of the pod's pull secrets (by coordinates or by credential hash) or
   * through the pod's service account (a credential provider's token mode). `podCredentials` is
   * asked only when a record names secrets or service accounts.
   */
  async mustAttemptImagePull(
    image: string,
    imageRef: string,
    podCredentials: () => PodPullCredentials | Promise<PodPullCredentials>,
  ): Promise<boolean> {
    if (imageRef === "") return true;
    const { mustPull, result } = await this.#mustAttemptImagePull(image, imageRef, podCredentials);
    this.#metrics?.recordMustPullCheck(result);
    return mustPull;
  }

  /** The decision of {@link mustAttemptImagePull}, with the result the checks counter counts. */
  async #mustAttemptImagePull(
    image: string,
    imageRef: string,
    podCredentials: () => PodPullCredentials | Promise<PodPullCredentials>,
  ): Promise<{ mustPull: boolean; result: MustPullCheckResult }> {
    const decided = (mustPull: boolean, result: MustPullCheckResult) => ({ mustPull, result });
    let record: ImagePulledRecord | undefined;
    let pulledByKubelet = false;
    try {
      await this.#pulledLocks.run(imageRef, () =>
        this.#intentLocks.run(image, async () => {
          const found = await this.#store.getPulledRecord(imageRef);
          record = found.record;
          pulledByKubelet = found.exists ||
            (this.#intentCounters.get(image) ?? 0) > 0 ||
            await this.#store.intentExists(image);
        }));
    } catch (e) {
      this.#log.error(e, "Unable to access cache records about image pulls");
      return decided(true, "error");
    }
    if (!this.#require(image, pulledByKubelet)) return decided(false, "credentialPolicyAllowed");
    if (!record) return decided(true, "mustAuthenticate");

    let sanitized: string;
    try {
      sanitized = trimImageTagDigest(image);
    } catch (e) {
      this.#log.error(e, "failed to parse image name, forcing image credentials reverification", {
        image,
      });
      return decided(true, "error");
    }
    const cached = record.credentialMapping[sanitized];
    if (!cached) return decided(true, "mustAuthenticate");
    if (cached.nodePodsAccessible) return decided(false, "credentialRecordFound");
    const cachedSecrets = cached.kubernetesSecrets ?? [];
    const cachedAccounts = cached.kubernetesServiceAccounts ?? [];
    if (cachedSecrets.length === 0 && cachedAccounts.length === 0) {
      return decided(true, "mustAuthenticate");
    }

    const pod = await podCredentials();
    for (const podSecret of pod.secrets) {
      for (const c of cachedSecrets) {
        const hashesMatch = c.credentialHash !== "" &&
          c.credentialHash === podSecret.credentialHash;
        const coordinatesMatch = c.uid === podSecret.uid && c.namespace === podSecret.namespace &&
          c.name === podSecret.name;
        const underLimit = cachedSecrets.length < WRITE_RECORD_WHILE_MATCHING_LIMIT;
        const remember = () =>
          this.#writePulledRecordIfChanged(image, imageRef, { kubernetesSecrets: [podSecret] })
            .catch((e) =>
              this.#log.error(e, "failed to write an image pulled record", { image, imageRef })
            );
        if (hashesMatch) {
          // Known credentials in another secret: remember that secret too.
          if (!coordinatesMatch && underLimit) await remember();
          return decided(false, "credentialRecordFound");
        }
        // The same secret with new credentials counts (and is remembered) only under the limit.
        if (coordinatesMatch && underLimit) {
          await remember();
          return decided(false, "credentialRecordFound");
        }
      }
    }
    const account = pod.serviceAccount;
    if (
      account &&
      cachedAccounts.some((a) =>
        a.uid === account.uid && a.namespace === account.namespace && a.name === account.name
      )
    ) {
      return decided(false, "credentialRecordFound");
    }
    return decided(true, "mustAuthenticate");
  }

  /**
   * Deletes the records of image references not in `imageRefsInUse` that were last updated
   * before `until` (ms since the epoch); for image garbage collection.
   */
  async pruneUnknownRecords(imageRefsInUse: readonly string[], until: number): Promise<void> {
    const inUse = new Set(imageRefsInUse);
    for (const record of await this.#store.listPulledRecords()) {
      if (!(Date.parse(record.lastUpdatedTime) < until) || inUse.has(record.imageRef)) continue;
      await this.#pulledLocks.run(
        record.imageRef,
        () => this.#store.deletePulledRecord(record.imageRef),
      ).catch((e) =>
        this.#log.error(e, "failed to remove an ImagePulledRecord", { imageRef: record.imageRef })
      );
    }
  }

  #decrementIntent(image: string): Promise<void> {
    return this.#intentLocks.run(image, async () => {
      const count = this.#intentCounters.get(image) ?? 0;
      if (count > 1) {
        this.#intentCounters.set(image, count - 1);
        return;
      }
      try {
        await this.#store.deleteIntent(image);
      } catch (e) {
        this.#log.error(e, "failed to remove image pull intent", { image });
        return;
      }
      this.#intentCounters.delete(image);
    });
  }

  #writePulledRecordIfChanged(
    image: string,
    imageRef: string,
    credentials: ImagePullCredentials | undefined,
  ): Promise<void> {
    return this.#pulledLocks.run(imageRef, async () => {
      let sanitized: string;
      try {
        sanitized = trimImageTagDigest(image);
      } catch (e) {
        throw new Error(`invalid image name ${JSON.stringify(image)}: ${errorText(e)}`, {
          cause: e,
        });
      }
      const now = rfc3339(this.#clock.now());
      const { record } = await this.#store.getPulledRecord(imageRef);
      let next: ImagePulledRecord | undefined;
      if (!record) {
        // The record alone marks the image as pulled by the kubelet; without credentials
        // every pod must prove its own.
        next = {
          lastUpdatedTime: now,
          imageRef,
          credentialMapping: credentials ? { [sanitized]: credentials } : {},
        };
      } else {
        next = mergePulledRecord(record, sanitized, credentials, now);
      }
      if (next) await this.#store.writePulledRecord(next);
    });
  }
}

/**
 * Upstream `pulledRecordMergeNewCreds`: `record` with `creds` added for `image` (a name without
 * tag or digest), or undefined when nothing changes. Node-wide access replaces any secrets;
 * secrets merge by coordinates (the newer hash wins), sorted by namespace, name and uid.
 */
export function mergePulledRecord(
  record: ImagePulledRecord,
  image: string,
  creds: ImagePullCredentials | undefined,
  now: string,
): ImagePulledRecord | undefined {
  if (!creds) return undefined;
  const secrets = creds.kubernetesSecrets ?? [];
  const accounts = creds.kubernetesServiceAccounts ?? [];
  if (!creds.nodePodsAccessible && secrets.length === 0 && accounts.length === 0) return undefined;
  const current = record.credentialMapping[image];
  const withCreds = (c: ImagePullCredentials): ImagePulledRecord => ({
    lastUpdatedTime: now,
    imageRef: record.imageRef,
    credentialMapping: { ...record.credentialMapping, [image]: c },
  });
  if (!current) return withCreds(creds);
  if (current.nodePodsAccessible) return undefined;
  if (creds.nodePodsAccessible) return withCreds({ nodePodsAccessible: true });
  if (secrets.length > 0) {
    const merged = mergeCoordinates(
      current.kubernetesSecrets ?? [],
      secrets,
      (a, b) => a.credentialHash === b.credentialHash,
    );
    return merged && withCreds({ ...current, kubernetesSecrets: merged });
  }
  const merged = mergeCoordinates(current.kubernetesServiceAccounts ?? [], accounts, () => true);
  return merged && withCreds({ ...current, kubernetesServiceAccounts: merged });
}

type Coordinates = { readonly uid: string; readonly namespace: string; readonly name: string };

/** `orig` with `added` merged by coordinates and sorted, or undefined when unchanged. */
function mergeCoordinates<T extends Coordinates>(
  orig: readonly T[],
  added: readonly T[],
  same: (a: T, b: T) => boolean,
): T[] | undefined {
  const key = (c: Coordinates) => JSON.stringify([c.namespace, c.name, c.uid]);
  const byKey = new Map(orig.map((c) => [key(c), c]));
  let changed = false;
  for (const c of added) {
    const old = byKey.get(key(c));
    if (!old || !same(old, c)) {
      changed = true;
      byKey.set(key(c), c);
    }
  }
  if (!changed) return undefined;
  const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
  return [...byKey.values()].sort((a, b) =>
    cmp(a.namespace, b.namespace) || cmp(a.name, b.name) || cmp(a.uid, b.uid)
  );
}

/** metav1.Time as JSON: RFC 3339 in UTC, whole seconds. */
function rfc3339(ms: number): string {
  return new Date(Math.floor(ms / 1000) * 1000).toISOString().replace(".000Z", "Z");
}
