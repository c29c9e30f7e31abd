/**
 * @module
 * The `kubernetes.io/projected` volume plugin: one directory on a tmpfs holding the files of
 * several sources (configMap, secret, downwardAPI, serviceAccountToken), written atomically
 * and rewritten on every pod sync, so rotated tokens and edited objects reach running
 * containers. Sources are applied in order and a later source's file wins a path both name.
 * This is what serves the `kube-api-access-<x>` volume the ServiceAccount admission plugin
 * injects (token, ca.crt, namespace). Gets ConfigMaps and Secrets from the object managers,
 * tokens from `token/token_manager.ts`, mounts the tmpfs through `util/mount.ts` and writes through
 * `_projection.ts`. Corresponds to upstream `pkg/volume/projected/projected.go`
 * (projectedVolumeMounter.SetUpAt, collectData, TearDownAt) and `pkg/volume/util`
 * (FsUserFrom).
 */

import type {
  V1Container,
  V1Pod,
  V1ServiceAccountTokenProjection,
  V1Volume,
  V1VolumeProjection,
} from "@kubernetes/client-node";
import type { FileProjection } from "./atomic_writer.ts";
import type { Clock } from "../util/clock.ts";
import { createLogger, kobj, type Logger } from "../klog/klog.ts";
import type { Mounter } from "../util/mount.ts";
import type { TokenManager } from "../token/token_manager.ts";
import { DEFAULT_VOLUME_MODE, projectVolumePayload, removeVolumeDir } from "./_projection.ts";
import { type ConfigMapGetter, makeConfigMapPayload } from "./configmap.ts";
import {
  aggregateMessage,
  makeDownwardApiPayload,
  type NodeAllocatableFunc,
} from "./downward_api.ts";
import {
  type MountedVolume,
  type VolumePlugin,
  type VolumeSetUpContext,
  VolumeSourceError,
  type VolumeTearDownContext,
} from "./plugin.ts";
import { makeSecretPayload, type SecretGetter } from "./secret.ts";

/** Upstream projectedPluginName. */
export const PROJECTED_PLUGIN_NAME = "kubernetes.io/projected";

/** A serviceAccountToken source's lifetime when the pod does not say (the API default). */
export const DEFAULT_TOKEN_EXPIRATION_SECONDS = 3600;

/** Options of {@link ProjectedPlugin}. */
export interface ProjectedPluginOptions {
  readonly configMaps: ConfigMapGetter;
  readonly secrets: SecretGetter;
  /** Service account tokens; a torn-down pod's tokens are dropped from its cache. */
  readonly tokens: Pick<TokenManager, "getServiceAccountToken" | "deleteServiceAccountToken">;
  /** Mounts the volume's tmpfs and unmounts it at teardown. */
  readonly mounter: Mounter;
  /** @default a text logger on stderr */
  readonly logger?: Logger;
  /** Names the atomic writer's timestamped directories. @default the wall clock */
  readonly clock?: Clock;
  /**
   * The default of missing limits for downwardAPI `resourceFieldRef` items.
   * @default none: such items fail
   */
  readonly nodeAllocatable?: NodeAllocatableFunc;
  /** The node's allocatable memory in bytes, bounding the tmpfs. @default unknown */
  readonly nodeAllocatableMemory?: () => number | undefined;
}

/** The projected plugin (upstream `projectedPlugin` with its mounter and unmounter). */
export class ProjectedPlugin implements VolumePlugin {
  readonly name = PROJECTED_PLUGIN_NAME;
  readonly requiresRemount = true;
  readonly #o: ProjectedPluginOptions;
  readonly #log: Logger;

  constructor(opts: ProjectedPluginOptions) {
    this.#o = opts;
    this.#log = opts.logger ?? createLogger();
  }

  /** Handles volumes with a `projected` source. */
  canSupport(volume: V1Volume): boolean {
    return volume.projected !== undefined && volume.projected !== null;
  }

  /**
   * Collects every source's files, then mounts the tmpfs (first time only) and projects them.
   * Nothing is created when a source fails; the error aggregates every failed source.
   */
  async setUp(ctx: VolumeSetUpContext): Promise<MountedVolume> {
    ctx.signal?.throwIfAborted();
    const { pod, volume } = ctx;
    if (!volume.projected) {
      throw new VolumeSourceError(`volume ${volume.name} has no projected source`);
    }
    this.#log.v(3).info(
      `Setting up volume ${volume.name} for pod ${pod.metadata?.uid} at ${ctx.dir}`,
    );
    let collected: Collected;
    try {
      collected = await this.#collectData(ctx);
    } catch (err) {
      this.#log.error(err, "Error preparing data for projected volume", {
        volume: volume.name,
        pod: kobj(pod),
      });
      throw err;
    }
    await projectVolumePayload({
      ctx,
      payload: collected.payload,
      logger: this.#log,
      clock: this.#o.clock,
      tmpfs: this.#o.mounter,
      nodeAllocatableMemory: this.#o.nodeAllocatableMemory?.(),
    });
    return { hostPath: ctx.dir, readOnly: true, selinuxRelabel: true };
  }

  /** Unmounts the tmpfs, removes the directory and forgets the pod's tokens. */
  async tearDown(ctx: VolumeTearDownContext): Promise<void> {
    this.#log.v(3).info(
      `Tearing down volume ${ctx.volumeName} for pod ${ctx.podUid} at ${ctx.dir}`,
    );
    await removeVolumeDir(ctx, this.#o.mounter);
    this.#o.tokens.deleteServiceAccountToken(ctx.podUid);
  }

  /** Upstream collectData: every source in order, later files replacing earlier ones. */
  async #collectData(ctx: VolumeSetUpContext): Promise<Collected> {
    const { pod, signal } = ctx;
    const projected = ctx.volume.projected ?? {};
    const defaultMode = projected.defaultMode ?? DEFAULT_VOLUME_MODE;
    const namespace = pod.metadata?.namespace ?? "";
    const fsUser = fsUserFrom(pod);
    const fsGroup = pod.spec?.securityContext?.fsGroup ?? undefined;
    const errs: unknown[] = [];
    const payload = new Map<string, FileProjection>();
    const merge = (files: ReadonlyMap<string, FileProjection>) => {
      for (const [path, file] of files) {
        payload.set(path, file);
      }
    };

    for (const source of projected.sources ?? []) {
      signal?.throwIfAborted();
      try {
        if (source.secret) {
          const name = source.secret.name ?? "";
          const secret = await this.#get(
            "secret",
            namespace,
            name,
            () => this.#o.secrets.get(namespace, name, signal),
          );
          merge(makeSecretPayload(source.secret, secret, defaultMode, namespace));
        } else if (source.configMap) {
          const name = source.configMap.name ?? "";
          const configMap = await this.#get(
            "configMap",
            namespace,
            name,
            () => this.#o.configMaps.get(namespace, name, signal),
          );
          merge(makeConfigMapPayload(source.configMap, configMap, defaultMode, namespace));
        } else if (source.downwardAPI) {
          merge(
            makeDownwardApiPayload(
              source.downwardAPI.items ?? [],
              pod,
              defaultMode,
              this.#o.nodeAllocatable,
            ),
          );
        } else if (source.serviceAccountToken) {
          const tp = source.serviceAccountToken;
          // With fsGroup set, the ownership pass turns 0600 into 0640 for the group.
          const mode = fsUser !== undefined || fsGroup !== undefined ? 0o600 : defaultMode;
          const token = await this.#o.tokens.getServiceAccountToken(
            namespace,
            pod.spec?.serviceAccountName ?? "",
            tokenRequestSpec(tp, pod),
            signal,
          );
          // Upstream's FileProjection.FsUser: the token is the pod user's, so it can stay 0600.
          payload.set(tp.path, { data: new TextEncoder().encode(token.token), mode, fsUser });
        } else {
          throw new VolumeSourceError(unsupportedSource(ctx.volume.name, source));
        }
      } catch (err) {
        signal?.throwIfAborted();
        errs.push(err);
      }
    }
    if (errs.length > 0) throw new VolumeSourceError(aggregateMessage(errs), { cause: errs[0] });
    return { payload };
  }

  /** A ConfigMap or Secret, logging a failed get as upstream does. */
  async #get<T>(
    kind: "secret" | "configMap",
    namespace: string,
    name: string,
    get: () => Promise<T | undefined>,
  ): Promise<T | undefined> {
    try {
      return await get();
    } catch (err) {
      this.#log.error(err, `Couldn't get ${kind} ${namespace}/${name}`);
      throw err;
    }
  }
}

/** What {@link ProjectedPlugin} projects; token files carry the pod user as their owner. */
interface Collected {
  readonly payload: Map<string, FileProjection>;
}

/** The TokenRequest spec of a serviceAccountToken source: bound to the pod. */
function tokenRequestSpec(tp: V1ServiceAccountTokenProjection, pod: V1Pod) {
  return {
    // An empty audience asks for the apiserver's own audiences.
    audiences: tp.audience ? [tp.audience] : undefined,
    expirationSeconds: tp.expirationSeconds ?? DEFAULT_TOKEN_EXPIRATION_SECONDS,
    boundObjectRef: {
      apiVersion: "v1",
      kind: "Pod",
      name: pod.metadata?.name ?? "",
      uid: pod.metadata?.uid ?? "",
    },
  };
}

/** The message for a source this kubelet cannot project yet. */
function unsupportedSource(volumeName: string, source: V1VolumeProjection): string {
  const kind = source.clusterTrustBundle
    ? "clusterTrustBundle"
    : source.podCertificate
    ? "podCertificate"
    : `${JSON.stringify(Object.keys(source))}`;
  return `projected volume ${volumeName}: ${kind} sources are not supported yet`;
}

/**
 * Upstream FsUserFrom: the run-as user every init and regular container shares (a container's
 * securityContext.runAsUser over the pod's), or undefined when one has none or two differ.
 */
export function fsUserFrom(pod: V1Pod): number | undefined {
  const containers: V1Container[] = [
    ...(pod.spec?.initContainers ?? []),
    ...(pod.spec?.containers ?? []),
  ];
  let fsUser: number | undefined;
  for (const c of containers) {
    const runAsUser = c.securityContext?.runAsUser ?? pod.spec?.securityContext?.runAsUser;
    if (runAsUser === undefined || runAsUser === null) return undefined;
    if (fsUser !== undefined && fsUser !== runAsUser) return undefined;
    fsUser = runAsUser;
  }
  return fsUser;
}
