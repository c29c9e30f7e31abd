/**
 * @module
 * ImageManager: makes sure a container's image is on the node before the container starts.
 * Applies the pull policy, pulls through the CRI image service with the pod's pull secrets,
 * serialises or bounds concurrent pulls, paces them by registryPullQPS/registryBurst, backs off
 * per pod and image after a failure, and reports each step as an event on the pod.
 * Corresponds to upstream `pkg/kubelet/images/image_manager.go`, `puller.go` and `types.go`,
 * with the credential loop of `kuberuntime_image.go` `PullImage`.
 */

import type { V1Container, V1Pod, V1Secret } from "@kubernetes/client-node";
import type * as api from "../proto/runtime/v1/api.ts";
import type { Clock } from "./clock.ts";
import type { EventRecorder, ObjectRef } from "./dependencies.ts";
import { TokenBucket } from "./rate_limiter.ts";
import type { ImageManagerService } from "./remote_image.ts";
import { type DockerKeyring, keyringFromSecrets, parseImageName } from "./_docker_keyring.ts";
import { formatDuration } from "./duration.ts";
import { CriError } from "./cri_connection.ts";

/** Why an image is not available, as the container's waiting reason (upstream `types.go`). */
export type ImageErrorReason =
  | "ErrImagePull"
  | "ImagePullBackOff"
  | "ErrImageNeverPull"
  | "InvalidImageName"
  | "ImageInspectError";

/** The outcome of {@link ImageManager.ensureImageExists}. */
export type EnsureImageResult =
  | { readonly imageRef: string }
  | { readonly error: { readonly reason: ImageErrorReason; readonly message: string } };

/** What {@link ImageManager.ensureImageExists} needs about one container. */
export interface EnsureImageRequest {
  readonly pod: V1Pod;
  readonly container: V1Container;
  readonly pullSecrets: readonly V1Secret[];
  readonly sandboxConfig?: api.PodSandboxConfig;
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

/** Admits at most `limit` holders at once, in arrival order. */
class Semaphore {
  #free: number;
  readonly #waiting: Array<() => void> = [];

  constructor(limit: number) {
    this.#free = limit;
  }

  async run<T>(fn: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    signal?.throwIfAborted();
    if (this.#free > 0) this.#free--;
    else await this.#wait(signal);
    try {
      return await fn();
    } finally {
      const next = this.#waiting.shift();
      if (next) next();
      else this.#free++;
    }
  }

  #wait(signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        const i = this.#waiting.indexOf(wake);
        if (i >= 0) this.#waiting.splice(i, 1);
        reject(signal?.reason);
      };
      const wake = () => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#waiting.push(wake);
    });
  }
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
  readonly #pulls: Semaphore | undefined;
  readonly #limiter: TokenBucket;

  constructor(opts: ImageManagerOptions) {
    this.#images = opts.imageService;
    this.#recorder = opts.recorder;
    this.#clock = opts.clock;
    this.#backOff = new BackOff(
      opts.clock,
      opts.backOffInitialMs ?? 10_000,
      opts.backOffMaxMs ?? 300_000,
    );
    const serial = opts.serializeImagePulls ?? true;
    const parallel = opts.maxParallelImagePulls;
    this.#pulls = serial
      ? new Semaphore(1)
      : parallel && parallel > 0
      ? new Semaphore(parallel)
      : undefined;
    this.#limiter = new TokenBucket(
      opts.clock,
      opts.registryPullQPS ?? 5,
      opts.registryBurst ?? 10,
    );
  }

  /**
   * Returns the image's reference in the runtime, pulling it when the policy asks; a failure
   * is returned, not thrown. Throws only when `signal` aborts.
   */
  async ensureImageExists(
    signal: AbortSignal,
    req: EnsureImageRequest,
  ): Promise<EnsureImageResult> {
    const { pod, container } = req;
    // Events are about the container, as upstream's container reference.
    const isInit = (pod.spec?.initContainers ?? []).some((c) => c.name === container.name);
    const ref: ObjectRef = {
      kind: "Pod",
      name: pod.metadata?.name ?? "",
      namespace: pod.metadata?.namespace,
      uid: pod.metadata?.uid,
      resourceVersion: pod.metadata?.resourceVersion,
      fieldPath: `spec.${isInit ? "initContainers" : "containers"}{${container.name}}`,
    };
    const imgRef = container.image ?? "";
    const fail = (reason: ImageErrorReason, message: string): EnsureImageResult => ({
      error: { reason, message },
    });

    let image: string;
    try {
      image = applyDefaultImageTag(imgRef);
    } catch (e) {
      const msg = `Failed to apply default image tag ${q(imgRef)}: ${errorText(e)}`;
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
    try {
      present = (await this.#images.imageStatus(spec, false, signal)).image?.id ?? "";
    } catch (e) {
      signal.throwIfAborted();
      const msg = `Failed to inspect image ${q(imgRef)}: ${errorText(e)}`;
      this.#recorder.event(ref, "Warning", "InspectFailed", msg);
      return fail("ImageInspectError", msg);
    }

    const policy = container.imagePullPolicy || defaultPullPolicy(imgRef);
    if (policy === "Never" && present === "") {
      const msg = `Container image ${q(imgRef)} is not present with pull policy of Never`;
      this.#recorder.event(ref, "Warning", "ErrImageNeverPull", msg);
      return fail("ErrImageNeverPull", msg);
    }
    if (present !== "" && policy !== "Always") {
      const msg = `Container image ${q(imgRef)} already present on machine`;
      this.#recorder.event(ref, "Normal", "Pulled", msg);
      return { imageRef: present };
    }

    const backOffKey = `${pod.metadata?.uid ?? ""}_${imgRef}`;
    if (this.#backOff.isInBackOffSinceUpdate(backOffKey)) {
      const msg = `Back-off pulling image ${q(imgRef)}`;
      this.#recorder.event(ref, "Normal", "BackOff", msg);
      // The waiting message carries the last pull error (upstream ImagePullBackOff message).
      const last = this.#lastErrors.get(backOffKey);
      return fail("ImagePullBackOff", last ? `${msg}: ErrImagePull: ${last}` : msg);
    }

    this.#recorder.event(ref, "Normal", "Pulling", `Pulling image ${q(imgRef)}`);
    const start = this.#clock.now();
    let pulled: { imageRef: string; pullMs: number; size: bigint };
    try {
      const keyring = keyringFromSecrets(req.pullSecrets);
      pulled = await this.#queue(
        () => this.#pull(spec, keyring, req.sandboxConfig, signal),
        signal,
      );
    } catch (e) {
      signal.throwIfAborted();
      const text = errorText(e);
      this.#recorder.event(ref, "Warning", "Failed", `Failed to pull image ${q(imgRef)}: ${text}`);
      this.#backOff.next(backOffKey);
      this.#lastErrors.set(backOffKey, text);
      return fail("ErrImagePull", text);
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
  }

  #queue<T>(fn: () => Promise<T>, signal: AbortSignal): Promise<T> {
    return this.#pulls ? this.#pulls.run(fn, signal) : fn();
  }

  /** The puller's work: every matching credential in turn, else anonymous; then the size. */
  async #pull(
    spec: api.ImageSpec,
    keyring: DockerKeyring,
    sandboxConfig: api.PodSandboxConfig | undefined,
    signal: AbortSignal,
  ): Promise<{ imageRef: string; pullMs: number; size: bigint }> {
    const start = this.#clock.now();
    const creds = keyring.lookup(parseImageName(spec.image).repo);
    const auths: Array<api.AuthConfig | undefined> = creds.map((c) => ({
      username: c.username,
      password: c.password,
      auth: "",
      serverAddress: "",
      identityToken: "",
      registryToken: "",
    }));
    if (auths.length === 0) auths.push(undefined);
    const errors: string[] = [];
    for (const auth of auths) {
      try {
        await this.#limiter.wait(signal);
        const imageRef = await this.#images.pullImage(spec, auth, sandboxConfig, signal);
        const pullMs = this.#clock.now() - start;
        const status = await this.#images.imageStatus(
          { ...spec, image: imageRef, userSpecifiedImage: "" },
          false,
          signal,
        );
        return { imageRef, pullMs, size: status.image?.size ?? 0n };
      } catch (e) {
        signal.throwIfAborted();
        errors.push(errorText(e));
      }
    }
    // utilerrors.NewAggregate: one error prints alone, several as "[a, b]".
    throw new Error(errors.length === 1 ? errors[0] : `[${errors.join(", ")}]`);
  }
}

/** What upstream shows of a pull error: a CRI error as Go's gRPC client prints it. */
function errorText(e: unknown): string {
  if (e instanceof CriError) return e.grpcText;
  return e instanceof Error ? e.message : String(e);
}
