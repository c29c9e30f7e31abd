/**
 * @module
 * The configMap volume plugin: projects a ConfigMap's keys as files into
 * `<pods>/<uid>/volumes/kubernetes.io~configmap/<name>`, all keys or the source's items, and
 * projects them again on every pod sync so edits reach running pods through the atomic
 * `..data` swap. Gets ConfigMaps from the ConfigMap manager (`client/object_manager.ts`) and writes
 * through `_projection.ts`. Corresponds to upstream `pkg/volume/configmap/configmap.go`
 * (configMapVolumeMounter.SetUpAt, MakePayload, TearDownAt).
 */

import type {
  V1ConfigMap,
  V1ConfigMapProjection,
  V1ConfigMapVolumeSource,
  V1Volume,
} from "@kubernetes/client-node";
import type { FileProjection } from "./atomic_writer.ts";
import type { Clock } from "../util/clock.ts";
import { createLogger, type Logger } from "../klog/klog.ts";
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
export const CONFIG_MAP_PLUGIN_NAME = "kubernetes.io/configmap";

/** Where ConfigMaps come from: an `ObjectManager<V1ConfigMap>` or anything shaped like it. */
export interface ConfigMapGetter {
  /** The ConfigMap, or undefined when the apiserver does not have it. */
  get(namespace: string, name: string, signal?: AbortSignal): Promise<V1ConfigMap | undefined>;
}

/** Options of {@link ConfigMapPlugin}. */
export interface ConfigMapPluginOptions {
  readonly configMaps: ConfigMapGetter;
  /** @default a text logger on stderr */
  readonly logger?: Logger;
  /** Names the atomic writer's timestamped directories. @default the wall clock */
  readonly clock?: Clock;
}

/** The configMap plugin (upstream `configMapPlugin` with its mounter and unmounter). */
export class ConfigMapPlugin implements VolumePlugin {
  readonly name = CONFIG_MAP_PLUGIN_NAME;
  readonly requiresRemount = true;
  readonly #configMaps: ConfigMapGetter;
  readonly #log: Logger;
  readonly #clock: Clock | undefined;

  constructor(opts: ConfigMapPluginOptions) {
    this.#configMaps = opts.configMaps;
    this.#log = opts.logger ?? createLogger();
    this.#clock = opts.clock;
  }

  /** Handles volumes with a `configMap` source. */
  canSupport(volume: V1Volume): boolean {
    return volume.configMap !== undefined && volume.configMap !== null;
  }

  /**
   * Fetches the ConfigMap and projects its payload. A missing ConfigMap is an empty volume when
   * the source is optional, else `configmap "<name>" not found`.
   */
  async setUp(ctx: VolumeSetUpContext): Promise<MountedVolume> {
    ctx.signal?.throwIfAborted();
    const source = ctx.volume.configMap;
    if (source === undefined || source === null) {
      throw new VolumeSourceError(`volume ${ctx.volume.name} has no configMap source`);
    }
    const namespace = ctx.pod.metadata?.namespace ?? "";
    const name = source.name ?? "";
    this.#log.v(3).info(
      `Setting up volume ${ctx.volume.name} for pod ${ctx.pod.metadata?.uid} at ${ctx.dir}`,
    );
    let configMap: V1ConfigMap | undefined;
    try {
      configMap = await this.#configMaps.get(namespace, name, ctx.signal);
    } catch (err) {
      this.#log.error(err, `Couldn't get configMap ${namespace}/${name}`);
      throw err;
    }
    if (configMap !== undefined) {
      const data = Object.values(configMap.data ?? {});
      const binary = Object.values(configMap.binaryData ?? {});
      const bytes = data.reduce((n, v) => n + new TextEncoder().encode(v).length, 0) +
        binary.reduce((n, v) => n + Math.floor(v.replace(/=+$/, "").length * 3 / 4), 0);
      this.#log.v(3).info(
        `Received configMap ${namespace}/${name} containing (${
          data.length + binary.length
        }) pieces of data, ${bytes} total bytes`,
      );
    }
    const payload = makeConfigMapPayload(
      source,
      configMap,
      source.defaultMode ?? DEFAULT_VOLUME_MODE,
      namespace,
    );
    await projectVolumePayload({ ctx, payload, logger: this.#log, clock: this.#clock });
    return { hostPath: ctx.dir, readOnly: true, selinuxRelabel: true };
  }

  /** Removes the volume directory; a missing one is fine. */
  tearDown(ctx: VolumeTearDownContext): Promise<void> {
    return removeVolumeDir(ctx);
  }
}

/**
 * The files of a configMap volume or projected source (upstream configmap.MakePayload):
 * `data` as UTF-8 and `binaryData` decoded, by key or through the source's items. An undefined
 * `configMap` is a missing one: an error unless the source is optional.
 */
export function makeConfigMapPayload(
  source: V1ConfigMapVolumeSource | V1ConfigMapProjection,
  configMap: V1ConfigMap | undefined,
  defaultMode: number,
  namespace: string,
): Map<string, FileProjection> {
  const name = source.name ?? "";
  const optional = source.optional === true;
  if (configMap === undefined && !optional) {
    // The NotFound message of upstream's configmap manager (group resource "configmap").
    throw new VolumeSourceError(`configmap ${JSON.stringify(name)} not found`);
  }
  const data = new Map<string, Uint8Array>();
  for (const [key, value] of Object.entries(configMap?.binaryData ?? {})) {
    data.set(key, decodeBase64(value, `binaryData key ${key} of configmap ${namespace}/${name}`));
  }
  for (const [key, value] of Object.entries(configMap?.data ?? {})) {
    data.set(key, new TextEncoder().encode(value));
  }
  return keyToPathPayload({
    items: source.items,
    data,
    defaultMode,
    optional,
    kind: "configmap",
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
