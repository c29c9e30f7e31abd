/**
 * @module
 * The secret volume plugin: projects a Secret's keys as files into
 * `<pods>/<uid>/volumes/kubernetes.io~secret/<name>`, on a tmpfs so that secret data never
 * reaches the node's disk, and projects them again on every pod sync so rotations reach running
 * pods. Gets Secrets from the Secret manager (`client/object_manager.ts`), mounts through `util/mount.ts`
 * and writes through `_projection.ts`. Corresponds to upstream
 * `pkg/volume/secret/secret.go` (secretVolumeMounter.SetUpAt over a medium Memory emptyDir,
 * MakePayload, TearDownAt).
 */

import type {
  V1Secret,
  V1SecretProjection,
  V1SecretVolumeSource,
  V1Volume,
} from "@kubernetes/client-node";
import type { FileProjection } from "./atomic_writer.ts";
import type { Clock } from "../util/clock.ts";
import { createLogger, type Logger } from "../klog/klog.ts";
import type { Mounter } from "../util/mount.ts";
import {
  DEFAULT_VOLUME_MODE,
  keyToPathPayload,
  projectVolumePayload,
  removeVolumeDir,
} from "./_projection.ts";
import {
  type MountedVolume,
  type VolumePlugin,
  type VolumeSetUpContext,
  VolumeSourceError,
  type VolumeTearDownContext,
} from "./plugin.ts";

/** The plugin's upstream name. */
export const SECRET_PLUGIN_NAME = "kubernetes.io/secret";

/** Where Secrets come from: an `ObjectManager<V1Secret>` or anything shaped like it. */
export interface SecretGetter {
  /** The Secret, or undefined when the apiserver does not have it. */
  get(namespace: string, name: string, signal?: AbortSignal): Promise<V1Secret | undefined>;
}

/** Options of {@link SecretPlugin}. */
export interface SecretPluginOptions {
  readonly secrets: SecretGetter;
  /** Mounts the volume's tmpfs and unmounts it at teardown. */
  readonly mounter: Mounter;
  /** @default a text logger on stderr */
  readonly logger?: Logger;
  /** Names the atomic writer's timestamped directories. @default the wall clock */
  readonly clock?: Clock;
  /** The node's allocatable memory in bytes, bounding the tmpfs. @default () => undefined */
  readonly nodeAllocatableMemory?: () => number | undefined;
}

/** The secret plugin (upstream `secretPlugin` with its mounter and unmounter). */
export class SecretPlugin implements VolumePlugin {
  readonly name = SECRET_PLUGIN_NAME;
  readonly requiresRemount = true;
  readonly #secrets: SecretGetter;
  readonly #mounter: Mounter;
  readonly #log: Logger;
  readonly #clock: Clock | undefined;
  readonly #nodeAllocatableMemory: () => number | undefined;

  constructor(opts: SecretPluginOptions) {
    this.#nodeAllocatableMemory = opts.nodeAllocatableMemory ?? (() => undefined);
    this.#secrets = opts.secrets;
    this.#mounter = opts.mounter;
    this.#log = opts.logger ?? createLogger();
    this.#clock = opts.clock;
  }

  /** Handles volumes with a `secret` source. */
  canSupport(volume: V1Volume): boolean {
    return volume.secret !== undefined && volume.secret !== null;
  }

  /**
   * Fetches the Secret, mounts a tmpfs on the volume directory unless one is there, and
   * projects the payload. A missing Secret is an empty volume when the source is optional,
   * else `secret "<name>" not found`.
   */
  async setUp(ctx: VolumeSetUpContext): Promise<MountedVolume> {
    ctx.signal?.throwIfAborted();
    const source = ctx.volume.secret;
    if (source === undefined || source === null) {
      throw new VolumeSourceError(`volume ${ctx.volume.name} has no secret source`);
    }
    const namespace = ctx.pod.metadata?.namespace ?? "";
    const name = source.secretName ?? "";
    this.#log.v(3).info(
      `Setting up volume ${ctx.volume.name} for pod ${ctx.pod.metadata?.uid} at ${ctx.dir}`,
    );
    let secret: V1Secret | undefined;
    try {
      secret = await this.#secrets.get(namespace, name, ctx.signal);
    } catch (err) {
      this.#log.error(err, `Couldn't get secret ${namespace}/${name}`);
      throw err;
    }
    const payload = makeSecretPayload(
      source,
      secret,
      source.defaultMode ?? DEFAULT_VOLUME_MODE,
      namespace,
    );
    if (secret !== undefined) {
      let bytes = 0;
      for (const file of payload.values()) bytes += file.data.length;
      this.#log.v(3).info(
        `Received secret ${namespace}/${name} containing (${
          Object.keys(secret.data ?? {}).length
        }) pieces of data, ${bytes} total bytes`,
      );
    }
    await projectVolumePayload({
      ctx,
      payload,
      logger: this.#log,
      clock: this.#clock,
      tmpfs: this.#mounter,
      nodeAllocatableMemory: this.#nodeAllocatableMemory(),
    });
    return { hostPath: ctx.dir, readOnly: true, selinuxRelabel: true };
  }

  /** Unmounts the tmpfs and removes the volume directory; a missing one is fine. */
  tearDown(ctx: VolumeTearDownContext): Promise<void> {
    return removeVolumeDir(ctx, this.#mounter);
  }
}

/**
 * The files of a secret volume or projected source (upstream secret.MakePayload): each key's
 * base64-decoded data, by key or through the source's items. An undefined `secret` is a
 * missing one: an error unless the source is optional.
 */
export function makeSecretPayload(
  source: V1SecretVolumeSource | V1SecretProjection,
  secret: V1Secret | undefined,
  defaultMode: number,
  namespace: string,
): Map<string, FileProjection> {
  // A volume source names its Secret `secretName`, a projected source `name`.
  const name = ("name" in source ? source.name : (source as V1SecretVolumeSource).secretName) ??
    "";
  const optional = source.optional === true;
  if (secret === undefined && !optional) {
    // The NotFound message of upstream's secret manager (group resource "secret").
    throw new VolumeSourceError(`secret ${JSON.stringify(name)} not found`);
  }
  const data = new Map<string, Uint8Array>();
  for (const [key, value] of Object.entries(secret?.data ?? {})) {
    data.set(key, decodeBase64(value, `key ${key} of secret ${namespace}/${name}`));
  }
  return keyToPathPayload({
    items: source.items,
    data,
    defaultMode,
    optional,
    kind: "secret",
    name,
    namespace,
  });
}

/** Decodes standard base64, as Go's JSON decoding of []byte does. */
function decodeBase64(value: string, what: string): Uint8Array {
  let bin: string;
  try {
    bin = atob(value);
  } catch (err) {
    throw new VolumeSourceError(`${what}: invalid base64`, { cause: err });
  }
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}
