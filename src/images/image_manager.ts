/**
 * @module
 * ImageManager: makes sure a container's image, or an image volume's, is on the node before the
 * container starts.
 * Applies the pull policy, pulls through the CRI image service with the pod's pull secrets,
 * serialises or bounds concurrent pulls, paces them by registryPullQPS/registryBurst, backs off
 * per pod and image after a failure, and reports each step as an event on the pod.
 * With `recordsDirectory` set it also verifies pull credentials for images already on the node
 * (KEP-2535, KubeletEnsureSecretPulledImages): every pull is recorded with the credentials that
 * made it succeed (see `_pull_records.ts`), and a pod may use a present image only when the
 * verification policy exempts it or a record shows it pulled anonymously or with one of the pod's
 * pull secrets; otherwise the pod pulls it again with its own credentials.
 * With `credentialProviders` (KEP-2133) the credentials credential provider plugins give for the
 * image follow the pull secrets', as upstream's keyring orders them; one got through the pod's
 * service account token is recorded with that service account.
 * Corresponds to upstream `pkg/kubelet/images/image_manager.go`, `puller.go` and `types.go`,
 * with the credential loop of `kuberuntime_image.go` `PullImage`.
 */

import type { V1Container, V1ImageVolumeSource, V1Pod, V1Secret } from "@kubernetes/client-node";
import type * as api from "../../proto/runtime/v1/api.ts";
import type { Clock } from "../util/clock.ts";
import { type EventRecorder, type ObjectRef, podRef } from "../client/record.ts";
import { TokenBucket } from "../client/rate_limiter.ts";
import { Semaphore } from "../util/semaphore.ts";
import type { ImageManagerService } from "../cri/remote_image.ts";
import {
  BasicDockerKeyring,
  type DockerAuth,
  keyringFromSecrets,
  parseImageName,
  PullSecretError,
} from "./_docker_keyring.ts";
import type { ImageCredentialProvider } from "../credentialprovider/plugins.ts";
import { formatDuration } from "../util/duration.ts";
import { criErrorText } from "../cri/connection.ts";
import type { PodStartupLatencyTracker } from "../pod_startup_latency_tracker.ts";
import { createLogger, kobj, type Logger } from "../klog/klog.ts";
import {
  credentialHash,
  type CredentialVerificationPolicy,
  type ImagePullCredentials,
  ImagePullManager,
  type ImagePullSecret,
  type ImagePullServiceAccount,
  PullRecordsStore,
  type RequireVerification,
  verificationPolicy,
} from "./_pull_records.ts";
import type { ImageMetrics } from "../metrics/image_metrics.ts";

export type { CredentialVerificationPolicy };

/** Why an image is not available, as the container's waiting reason (upstream `types.go`). */
export type ImageErrorReason =
  | "ErrImagePull"
  | "ImagePullBackOff"
  | "ErrImageNeverPull"
  | "InvalidImageName"
  | "ImageInspectError";

/** The outcome of {@link ImageManager.ensureImageExists}. */
export type EnsureImageResult =
  | {
    readonly imageRef: string;
    /** The image's status when it was found present (not pulled): its user, for the config. */
    readonly image?: api.Image;
  }
  | { readonly error: { readonly reason: ImageErrorReason; readonly message: string } };

/** What {@link ImageManager.ensureImageExists} needs: a container's image or an image volume's. */
export type EnsureImageRequest = EnsureContainerImageRequest | EnsureVolumeImageRequest;

/** The pod side of an {@link EnsureImageRequest}. */
interface EnsurePodImageRequest {
  readonly pod: V1Pod;
  readonly pullSecrets: readonly V1Secret[];
  readonly sandboxConfig?: api.PodSandboxConfig;
}

/** A container's image, with its imagePullPolicy; events are about the container. */
export interface EnsureContainerImageRequest extends EnsurePodImageRequest {
  readonly container: V1Container;
  readonly imageVolume?: undefined;
}

/**
 * An image volume's image (`spec.volumes[].image`), with the volume's pullPolicy; events are
 * about the pod, as upstream getImageVolumes passes the pod's reference.
 */
export interface EnsureVolumeImageRequest extends EnsurePodImageRequest {
  readonly imageVolume: V1ImageVolumeSource;
  readonly container?: undefined;
}

/** Options of {@link ImageManager}. */
export interface ImageManagerOptions {
  readonly imageService: ImageManagerService;
  readonly recorder: EventRecorder;
  readonly clock: Clock;
  /** One pull at a time when true. @default true */
  readonly serializeImagePulls?: boolean;
  /** Concurrent pulls when not serialised; undefined means no limit. @default undefined */
  readonly maxParallelImagePulls?: number;
  /** Pulls a second; 0 means no limit. @default 5 */
  readonly registryPullQPS?: number;
  /** Pulls allowed in a burst. @default 10 */
  readonly registryBurst?: number;
  /** First back-off after a failed pull, in ms; it doubles per failure. @default 10000 */
  readonly backOffInitialMs?: number;
  /** Longest back-off, in ms (upstream MaxContainerBackOff). @default 300000 */
  readonly backOffMaxMs?: number;
  /**
   * Where pull records live, `<rootDirectory>/image_manager`; setting it turns on credential
   * verification for present images (feature gate KubeletEnsureSecretPulledImages).
   * @default undefined (no verification: any pod may use a present image)
   */
  readonly recordsDirectory?: string;
  /**
   * KubeletConfiguration `imagePullCredentialsVerificationPolicy`; used with `recordsDirectory`.
   * @default "NeverVerifyPreloadedImages"
   */
  readonly verificationPolicy?: CredentialVerificationPolicy;
  /**
   * KubeletConfiguration `preloadedImagesVerificationAllowlist`: image names or "registry/path/*"
   * exempt from verification under NeverVerifyAllowlistedImages.
   * @default []
   */
  readonly allowlist?: readonly string[];
  /** @default a text logger on stderr */
  readonly logger?: Logger;
  /** Told when a pod's pull starts and ends (upstream podPullingTimeRecorder). @default none */
  readonly pullingTimeRecorder?: Pick<
    PodStartupLatencyTracker,
    "recordImageStartedPulling" | "recordImageFinishedPulling"
  >;
  /**
   * Where each ensure-image request, each credential check and the pull records' sizes are
   * recorded. @default none
   */
  readonly metrics?: ImageMetrics;
  /**
   * The credential provider plugins (`--image-credential-provider-config`), asked for each
   * image the pod's secrets are looked up for. @default none
   */
  readonly credentialProviders?: ImageCredentialProvider;
}

/** Options that cannot work, found when the {@link ImageManager} is built. */
export class ImageManagerOptionsError extends Error {
  override name = "ImageManagerOptionsError";
}

/**
 * Upstream `flowcontrol.Backoff` without jitter: per key, a delay that starts at `initial`,
 * doubles at each failure up to `max`, and is forgotten once 2×max has passed since the last.
 */
export class BackOff {
  readonly #entries = new Map<string, { backoff: number; lastUpdate: number }>();

  constructor(readonly clock: Clock, readonly initialMs: number, readonly maxMs: number) {}

  /** Records a failure of `id` now. */
  next(id: string): void {
    const now = this.clock.now();
    const e = this.#entries.get(id);
    if (!e || this.#expired(now, e.lastUpdate)) {
      this.#entries.set(id, { backoff: this.initialMs, lastUpdate: now });
    } else {
      e.backoff = Math.min(e.backoff * 2, this.maxMs);
      e.lastUpdate = now;
    }
  }

  /** Whether `id` is still within the delay since its last failure. */
  isInBackOffSinceUpdate(id: string): boolean {
    const now = this.clock.now();
    const e = this.#entries.get(id);
    if (!e || this.#expired(now, e.lastUpdate)) return false;
    return now - e.lastUpdate < e.backoff;
  }

  /** Drops the entries that have expired. */
  /** Whether `id` has a back-off entry. */
  has(id: string): boolean {
    return this.#entries.has(id);
  }

  gc(): void {
    const now = this.clock.now();
    for (const [id, e] of this.#entries) {
      if (this.#expired(now, e.lastUpdate)) this.#entries.delete(id);
    }
  }

  #expired(now: number, lastUpdate: number): boolean {
    return now - lastUpdate > 2 * this.maxMs;
  }
}

/** One pull at a time when serialized, else at most `maxParallel` (unlimited when unset). */
function pullSemaphore(serialize = true, maxParallel?: number): Semaphore | undefined {
  if (serialize) return new Semaphore(1);
  return maxParallel && maxParallel > 0 ? new Semaphore(maxParallel) : undefined;
}

/** The pull policy the apiserver would default to: Always for ":latest" or no tag. */
export function defaultPullPolicy(image: string): "Always" | "IfNotPresent" {
  try {
    return parseImageName(image).tag === "latest" ? "Always" : "IfNotPresent";
  } catch {
    return "IfNotPresent";
  }
}

/** Upstream `applyDefaultImageTag`: appends ":latest" to a reference with no tag or digest. */
export function applyDefaultImageTag(image: string): string {
  const { tag, digest } = parseImageName(image);
  return digest === "" && tag !== "" && !image.endsWith(`:${tag}`) ? `${image}:${tag}` : image;
}

/** Go's `%q` of a string, for messages that quote an image the way upstream prints it. */
const q = (s: string) => JSON.stringify(s);

/** Ensures containers' images are present; see the module documentation. */
export class ImageManager {
  readonly #images: ImageManagerService;
  readonly #recorder: EventRecorder;
  readonly #clock: Clock;
  readonly #backOff: BackOff;
  /** The last pull error per back-off key, for the ImagePullBackOff message. */
  readonly #lastErrors = new Map<string, string>();
  #pulls: Semaphore | undefined;
  readonly #limiter: TokenBucket;
  readonly #log: Logger;
  readonly #recordsDirectory: string | undefined;
  readonly #requireVerification: RequireVerification | undefined;
  #pullManager: Promise<ImagePullManager> | undefined;

  /** Throws {@link ImageManagerOptionsError} for an unknown policy or a bad allowlist pattern. */
  readonly #pulling: ImageManagerOptions["pullingTimeRecorder"];
  readonly #metrics: ImageMetrics | undefined;
  readonly #providers: ImageCredentialProvider | undefined;

  constructor(opts: ImageManagerOptions) {
    this.#metrics = opts.metrics;
    this.#providers = opts.credentialProviders;
    this.#images = opts.imageService;
    this.#recorder = opts.recorder;
    this.#clock = opts.clock;
    this.#log = opts.logger ?? createLogger();
    this.#pulling = opts.pullingTimeRecorder;
    this.#recordsDirectory = opts.recordsDirectory;
    if (opts.recordsDirectory !== undefined) {
      const policy = opts.verificationPolicy ?? "NeverVerifyPreloadedImages";
      try {
        this.#requireVerification = verificationPolicy(policy, opts.allowlist ?? [], this.#log);
      } catch (e) {
        throw new ImageManagerOptionsError(
          `Cannot verify image pull credentials with policy '${policy}' and allowlist ` +
            `${JSON.stringify(opts.allowlist ?? [])}: ${criErrorText(e)}`,
          { cause: e },
        );
      }
    }
    this.#backOff = new BackOff(
      opts.clock,
      opts.backOffInitialMs ?? 10_000,
      opts.backOffMaxMs ?? 300_000,
    );
    this.#pulls = pullSemaphore(opts.serializeImagePulls, opts.maxParallelImagePulls);
    this.#limiter = new TokenBucket(
      opts.clock,
      opts.registryPullQPS ?? 5,
      opts.registryBurst ?? 10,
    );
  }

  /**
   * Changes serializeImagePulls / maxParallelImagePulls (a configuration reload): pulls that
   * start from now on follow the new limit; those under way finish under the old one.
   */
  setPullParallelism(serializeImagePulls?: boolean, maxParallelImagePulls?: number): void {
    this.#pulls = pullSemaphore(serializeImagePulls, maxParallelImagePulls);
  }

  /**
   * Opens the pull records and turns intents left by a previous run into records (upstream does
   * this when the kubelet starts). Called on first use when not called before; a no-op without
   * `recordsDirectory`. Throws when the records directory cannot be created or read.
   */
  async start(signal?: AbortSignal): Promise<void> {
    const pending = this.#openPullManager();
    if (!pending) return;
    await pending;
    signal?.throwIfAborted();
  }

  /**
   * Drops the pull records of image references not in `imageRefsInUse` last updated before
   * `until` (ms since the epoch), as image garbage collection does upstream. A no-op without
   * `recordsDirectory`.
   */
  async pruneUnknownRecords(
    imageRefsInUse: readonly string[],
    until: number,
    signal?: AbortSignal,
  ): Promise<void> {
    const pending = this.#openPullManager();
    if (!pending) return;
    await (await pending).pruneUnknownRecords(imageRefsInUse, until);
    signal?.throwIfAborted();
  }

  #openPullManager(): Promise<ImagePullManager> | undefined {
    const directory = this.#recordsDirectory;
    const requireVerification = this.#requireVerification;
    if (directory === undefined || !requireVerification) return undefined;
    this.#pullManager ??= (async () => {
      const metrics = this.#metrics;
      const store = await PullRecordsStore.open({ directory, logger: this.#log, metrics });
      const manager = new ImagePullManager({
        store,
        requireVerification,
        clock: this.#clock,
        logger: this.#log,
        metrics,
      });
      await manager.initialize(() => this.#images.listImages());
      return manager;
    })();
    // A failure is retried at the next use rather than remembered.
    this.#pullManager.catch(() => (this.#pullManager = undefined));
    return this.#pullManager;
  }

  /**
   * Returns the image's reference in the runtime, pulling it when the policy asks; a failure
   * is returned, not thrown. Throws only when `signal` aborts.
   */
  async ensureImageExists(
    signal: AbortSignal,
    req: EnsureImageRequest,
  ): Promise<EnsureImageResult> {
    const { policy } = imageTarget(req);
    // What the request found, as kubelet_image_manager_ensure_image_requests_total labels it.
    const outcome: EnsureOutcome = {};
    try {
      return await this.#ensureImageExists(signal, req, outcome);
    } finally {
      this.#metrics?.recordEnsureImageRequest(policy, outcome.presentLocally, outcome.pullRequired);
    }
  }

  async #ensureImageExists(
    signal: AbortSignal,
    req: EnsureImageRequest,
    outcome: EnsureOutcome,
  ): Promise<EnsureImageResult> {
    const { pod } = req;
    const podUID = pod.metadata?.uid ?? "";
    const { ref, imgRef, policy } = imageTarget(req);
    const fail = (reason: ImageErrorReason, message: string): EnsureImageResult => ({
      error: { reason, message },
    });
    // Nothing is pulled with the other secrets, as upstream's keyring fails as a whole; upstream
    // shows the decoder's bare text as both reason and message, here ErrImagePull names the
    // secret and the key that do not parse.
    const badSecret = (e: PullSecretError): EnsureImageResult => fail("ErrImagePull", e.message);

    let image: string;
    try {
      image = applyDefaultImageTag(imgRef);
    } catch (e) {
      const msg = `Failed to apply default image tag ${q(imgRef)}: ${criErrorText(e)}`;
      this.#recorder.event(ref, "Warning", "InspectFailed", msg);
      return fail("InvalidImageName", msg);
    }
    const spec: api.ImageSpec = {
      image,
      annotations: { ...pod.metadata?.annotations },
      userSpecifiedImage: imgRef,
      runtimeHandler: "",
      imageRef: "",
    };

    let present: string;
    let found: api.Image | undefined;
    try {
      found = (await this.#images.imageStatus(spec, false, signal)).image;
      present = found?.id ?? "";
    } catch (e) {
      signal.throwIfAborted();
      const msg = `Failed to inspect image ${q(imgRef)}: ${criErrorText(e)}`;
      this.#recorder.event(ref, "Warning", "InspectFailed", msg);
      return fail("ImageInspectError", msg);
    }

    // Upstream does not look for the image under Always: whether it is present stays unknown.
    if (policy !== "Always") outcome.presentLocally = present !== "";
    if (policy === "Never" && present === "") {
      return this.#neverPulled(ref, imgRef);
    }
    // The pod's credentials for this image, each with the secret or service account it came
    // from; looked up once, and no earlier than needed (plugins may run for them).
    let tracked: Promise<TrackedAuth[]> | undefined;
    const credentials = () => (tracked ??= this.#credentials(req, image, signal));

    const verifying = this.#openPullManager();
    let records: ImagePullManager | undefined;
    if (verifying) {
      try {
        records = await verifying;
      } catch (e) {
        signal.throwIfAborted();
        // Fail safe: without records no present image can be shown to be the pod's to use.
        const msg = `Failed to open image pull records: ${criErrorText(e)}`;
        this.#log.error(e, "Failed to open image pull records", { pod: kobj(pod) });
        return fail("ErrImagePull", msg);
      }
      signal.throwIfAborted();
    }

    if (present !== "" && policy !== "Always") {
      outcome.pullRequired = false;
      if (!records) {
        const msg = `Container image ${q(imgRef)} already present on machine`;
        this.#recorder.event(ref, "Normal", "Pulled", msg);
        // A pull of this image by another pod may be in flight for this one: it ends here.
        this.#pulling?.recordImageFinishedPulling(podUID);
        return { imageRef: present, image: found };
      }
      let mustPull: boolean;
      try {
        mustPull = await records.mustAttemptImagePull(imgRef, present, async () => {
          const creds = await credentials();
          return {
            secrets: creds.flatMap((c) => (c.secret ? [c.secret] : [])),
            // The first one only: upstream does not tell service accounts apart by audience.
            serviceAccount: creds.find((c) => c.serviceAccount)?.serviceAccount,
          };
        });
      } catch (e) {
        if (e instanceof PullSecretError) return badSecret(e);
        throw e;
      }
      signal.throwIfAborted();
      if (!mustPull) {
        const msg = `Container image ${q(imgRef)} already present on machine and can be ` +
          "accessed by the pod";
        this.#recorder.event(ref, "Normal", "Pulled", msg);
        this.#pulling?.recordImageFinishedPulling(podUID);
        return { imageRef: present, image: found };
      }
      outcome.pullRequired = true;
      // Present but not shown to be this pod's: with Never it is as if it were absent.
      if (policy === "Never") return this.#neverPulled(ref, imgRef);
    }
    outcome.pullRequired = true;
    // Looked up before the pull is queued, as upstream does (plugins may run for them).
    let pullAuths: TrackedAuth[];
    try {
      pullAuths = await credentials();
    } catch (e) {
      if (e instanceof PullSecretError) return badSecret(e);
      throw e;
    }
    signal.throwIfAborted();

    const backOffKey = `${pod.metadata?.uid ?? ""}_${imgRef}`;
    if (this.#backOff.isInBackOffSinceUpdate(backOffKey)) {
      const msg = `Back-off pulling image ${q(imgRef)}`;
      this.#recorder.event(ref, "Normal", "BackOff", msg);
      // The waiting message carries the last pull error (upstream ImagePullBackOff message).
      const last = this.#lastErrors.get(backOffKey);
      return fail("ImagePullBackOff", last ? `${msg}: ErrImagePull: ${last}` : msg);
    }

    if (records) {
      try {
        await records.recordPullIntent(imgRef);
      } catch (e) {
        return fail(
          "ErrImagePull",
          `Failed to record image pull intent for container image ${q(imgRef)}: ${criErrorText(e)}`,
        );
      }
    }
    let recorded = false;
    try {
      this.#pulling?.recordImageStartedPulling(podUID);
      this.#recorder.event(ref, "Normal", "Pulling", `Pulling image ${q(imgRef)}`);
      const start = this.#clock.now();
      let pulled: PullOutcome;
      try {
        pulled = await this.#queue(
          () => this.#pull(spec, pullAuths, req.sandboxConfig, signal),
          signal,
        );
      } catch (e) {
        signal.throwIfAborted();
        const text = criErrorText(e);
        this.#recorder.event(
          ref,
          "Warning",
          "Failed",
          `Failed to pull image ${q(imgRef)}: ${text}`,
        );
        this.#backOff.next(backOffKey);
        this.#lastErrors.set(backOffKey, text);
        return fail("ErrImagePull", text);
      }
      this.#pulling?.recordImageFinishedPulling(podUID);
      if (records) {
        recorded = true;
        await records.recordImagePulled(imgRef, pulled.imageRef, pullCredentials(pulled.used));
      }
      const totalMs = this.#clock.now() - start;
      this.#recorder.event(
        ref,
        "Normal",
        "Pulled",
        `Successfully pulled image ${q(imgRef)} in ${formatDuration(pulled.pullMs)} ` +
          `(${formatDuration(totalMs)} including waiting). Image size: ${pulled.size} bytes.`,
      );
      this.#lastErrors.delete(backOffKey);
      this.#backOff.gc();
      for (const key of this.#lastErrors.keys()) {
        if (!this.#backOff.has(key)) this.#lastErrors.delete(key);
      }
      return { imageRef: pulled.imageRef };
    } finally {
      // A failed or abandoned pull lowers the image's count of pulls in flight.
      if (records && !recorded) await records.recordImagePullFailed(imgRef);
    }
  }

  /** Upstream `imageNotPresentOnNeverPolicyError`, also used when a present image is not the pod's. */
  #neverPulled(ref: ObjectRef, imgRef: string): EnsureImageResult {
    const msg = `Container image ${q(imgRef)} is not present with pull policy of Never`;
    this.#recorder.event(ref, "Warning", "ErrImageNeverPull", msg);
    return { error: { reason: "ErrImageNeverPull", message: msg } };
  }

  /**
   * Upstream `makeLookupPullCredentialsFunc`: the pod's pull secrets' credentials for `image`,
   * then those of the credential provider plugins (a plugin's failure is logged by them and
   * leaves its credentials out).
   */
  async #credentials(
    req: EnsureImageRequest,
    image: string,
    signal: AbortSignal,
  ): Promise<TrackedAuth[]> {
    let repo: string;
    try {
      repo = parseImageName(image).repo;
    } catch {
      return [];
    }
    const fromSecrets = trackedCredentials(req.pullSecrets, repo);
    if (!this.#providers) return fromSecrets;
    const { pod } = req;
    const provided = await this.#providers.provide(repo, {
      namespace: pod.metadata?.namespace ?? "",
      name: pod.metadata?.name ?? "",
      uid: pod.metadata?.uid ?? "",
      serviceAccountName: pod.spec?.serviceAccountName ?? "",
    }, signal);
    // One keyring of every provider's answer, as upstream's externalCredentialProviderKeyring.
    const keyring = new BasicDockerKeyring();
    for (const p of provided) {
      try {
        keyring.add(p.config, p.serviceAccount ? { serviceAccount: p.serviceAccount } : undefined);
      } catch (e) {
        this.#log.error(e, "Entry in credential provider response invalid, ignoring");
      }
    }
    const fromProviders = keyring.lookupTracked(repo).map((t) =>
      t.serviceAccount ? { auth: t.auth, serviceAccount: t.serviceAccount } : { auth: t.auth }
    );
    return [...fromSecrets, ...fromProviders];
  }

  #queue<T>(fn: () => Promise<T>, signal: AbortSignal): Promise<T> {
    return this.#pulls ? this.#pulls.run(fn, signal) : fn();
  }

  /**
   * The puller's work: every matching credential in turn, else anonymous; then the size. The
   * outcome names the credential that worked (undefined for an anonymous pull).
   */
  async #pull(
    spec: api.ImageSpec,
    creds: readonly TrackedAuth[],
    sandboxConfig: api.PodSandboxConfig | undefined,
    signal: AbortSignal,
  ): Promise<PullOutcome> {
    const start = this.#clock.now();
    const attempts: Array<TrackedAuth | undefined> = creds.length > 0 ? [...creds] : [undefined];
    const errors: string[] = [];
    for (const cred of attempts) {
      const auth: api.AuthConfig | undefined = cred && {
        username: cred.auth.username,
        password: cred.auth.password,
        auth: "",
        serverAddress: "",
        identityToken: "",
        registryToken: "",
      };
      try {
        await this.#limiter.wait(signal);
        const imageRef = await this.#images.pullImage(spec, auth, sandboxConfig, signal);
        const pullMs = this.#clock.now() - start;
        const status = await this.#images.imageStatus(
          { ...spec, image: imageRef, userSpecifiedImage: "" },
          false,
          signal,
        );
        return { imageRef, pullMs, size: status.image?.size ?? 0n, used: cred };
      } catch (e) {
        signal.throwIfAborted();
        errors.push(criErrorText(e));
      }
    }
    // utilerrors.NewAggregate: one error prints alone, several as "[a, b]".
    throw new Error(errors.length === 1 ? errors[0] : `[${errors.join(", ")}]`);
  }
}

/** Whether the image was found present and had to be pulled; unset while not known. */
interface EnsureOutcome {
  presentLocally?: boolean;
  pullRequired?: boolean;
}

/** A successful pull: the runtime's reference, timings, size and the credential used. */
interface PullOutcome {
  readonly imageRef: string;
  readonly pullMs: number;
  readonly size: bigint;
  readonly used: TrackedAuth | undefined;
}

/**
 * Upstream `credentialprovider.TrackedAuthConfig`: a credential and the secret or service account
 * it came from.
 */
interface TrackedAuth {
  readonly auth: DockerAuth;
  /** The secret's coordinates and the credential hash; undefined for other credentials. */
  readonly secret?: ImagePullSecret;
  /** The service account whose token a credential provider got it with. */
  readonly serviceAccount?: ImagePullServiceAccount;
}

/**
 * The pod's secrets' credentials for `repo` in the keyring's order (most specific registry key
 * first across the secrets), each with its secret's coordinates and credential hash; throws
 * PullSecretError for a secret that does not parse.
 */
function trackedCredentials(secrets: readonly V1Secret[], repo: string): TrackedAuth[] {
  return keyringFromSecrets(secrets).lookupTracked(repo).map((t) => ({
    auth: t.auth,
    secret: {
      uid: t.secret?.uid ?? "",
      namespace: t.secret?.namespace ?? "",
      name: t.secret?.name ?? "",
      credentialHash: credentialHash(t.auth),
    },
  }));
}

/** Upstream `trackedToImagePullCreds`: an anonymous or node-wide pull is every pod's. */
function pullCredentials(used: TrackedAuth | undefined): ImagePullCredentials {
  if (used?.secret) return { kubernetesSecrets: [used.secret] };
  if (used?.serviceAccount) return { kubernetesServiceAccounts: [used.serviceAccount] };
  return { nodePodsAccessible: true };
}

/**
 * Whose image a request names: the object its events are about, the reference as written and
 * the pull policy (the apiserver's default when unset, as for a pod that skipped defaulting).
 */
function imageTarget(req: EnsureImageRequest): { ref: ObjectRef; imgRef: string; policy: string } {
  const { pod } = req;
  if (req.imageVolume) {
    const imgRef = req.imageVolume.reference ?? "";
    return {
      ref: podRef(pod),
      imgRef,
      policy: req.imageVolume.pullPolicy || defaultPullPolicy(imgRef),
    };
  }
  const { container } = req;
  // Events are about the container, as upstream's container reference.
  const isInit = (pod.spec?.initContainers ?? []).some((c) => c.name === container.name);
  const imgRef = container.image ?? "";
  return {
    ref: {
      kind: "Pod",
      name: pod.metadata?.name ?? "",
      namespace: pod.metadata?.namespace,
      uid: pod.metadata?.uid,
      resourceVersion: pod.metadata?.resourceVersion,
      fieldPath: `spec.${isInit ? "initContainers" : "containers"}{${container.name}}`,
    },
    imgRef,
    policy: container.imagePullPolicy || defaultPullPolicy(imgRef),
  };
}
