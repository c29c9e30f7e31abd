/**
 * @module
 * The `kubernetes.io/downward-api` volume plugin: files holding the pod's metadata (name,
 * namespace, uid, labels, annotations, one label or annotation) and its containers' resource
 * requests and limits, written atomically into the volume directory and rewritten on every pod
 * sync, so a relabel reaches running containers. The volume is a plain directory (upstream wraps
 * an emptyDir on disk). Built on `_projection.ts` (directory, atomic write, fsGroup) and
 * `fieldpath.ts` (selector resolution); node allocatable comes from a function the
 * integrator passes. Corresponds to upstream `pkg/volume/downwardapi/downwardapi.go`
 * (downwardAPIPlugin, SetUpAt, CollectData).
 */

import { posix } from "node:path";
import type { V1DownwardAPIVolumeFile, V1Pod, V1Volume } from "@kubernetes/client-node";
import type { FileProjection } from "./atomic_writer.ts";
import type { Clock } from "../util/clock.ts";
import { createLogger, kobj, type Logger } from "../klog/klog.ts";
import {
  extractFieldPathAsString,
  extractResourceValueByContainerNameAndNodeAllocatable,
} from "./fieldpath.ts";
import { DEFAULT_VOLUME_MODE, projectVolumePayload, removeVolumeDir } from "./_projection.ts";
import {
  type MountedVolume,
  type VolumePlugin,
  type VolumeSetUpContext,
  VolumeSourceError,
  type VolumeTearDownContext,
} from "./plugin.ts";

/** Upstream downwardAPIPluginName. */
export const DOWNWARD_API_PLUGIN_NAME = "kubernetes.io/downward-api";

/** The node's allocatable resources (node status), or undefined while they are not known. */
export type NodeAllocatableFunc = () => Readonly<Record<string, string>> | undefined;

/** Options of {@link DownwardApiPlugin}. */
export interface DownwardApiPluginOptions {
  /** @default a text logger on stderr */
  readonly logger?: Logger;
  /** Names the atomic writer's timestamped directories. @default the wall clock */
  readonly clock?: Clock;
  /**
   * The default of a container's missing cpu, memory and ephemeral-storage limits for
   * `resourceFieldRef` items (upstream VolumeHost.GetNodeAllocatable).
   * @default none: such items fail
   */
  readonly nodeAllocatable?: NodeAllocatableFunc;
}

/**
 * The files of downwardAPI items (upstream CollectData): path (cleaned) → the field's text with
 * the item's mode, else `defaultMode`. An item with neither selector is an empty file. Every
 * item is tried; throws {@link VolumeSourceError} with the failures aggregated as upstream's
 * utilerrors.NewAggregate prints them.
 */
export function makeDownwardApiPayload(
  items: readonly V1DownwardAPIVolumeFile[],
  pod: V1Pod,
  defaultMode: number,
  nodeAllocatable: NodeAllocatableFunc | undefined,
): Map<string, FileProjection> {
  const errs: unknown[] = [];
  const payload = new Map<string, FileProjection>();
  const encoder = new TextEncoder();
  for (const item of items) {
    let text = "";
    try {
      if (item.fieldRef) {
        text = extractFieldPathAsString(pod, item.fieldRef.fieldPath);
      } else if (item.resourceFieldRef) {
        const allocatable = nodeAllocatable?.();
        if (allocatable === undefined) {
          throw new VolumeSourceError(
            "error retrieving node: the node's allocatable resources are not known yet",
          );
        }
        text = extractResourceValueByContainerNameAndNodeAllocatable(
          item.resourceFieldRef,
          pod,
          item.resourceFieldRef.containerName ?? "",
          allocatable,
        );
      }
    } catch (err) {
      errs.push(err);
    }
    payload.set(cleanPath(item.path), {
      data: encoder.encode(text),
      mode: item.mode ?? defaultMode,
    });
  }
  if (errs.length > 0) throw new VolumeSourceError(aggregateMessage(errs), { cause: errs[0] });
  return payload;
}

/**
 * utilerrors.NewAggregate(errs).Error(): one distinct message alone, several as `[a, b]`.
 * Exported for the projected plugin, which aggregates its sources' failures the same way.
 */
export function aggregateMessage(errs: readonly unknown[]): string {
  const seen = new Set<string>();
  for (const err of errs) seen.add(err instanceof Error ? err.message : String(err));
  const msgs = [...seen];
  return msgs.length === 1 ? msgs[0] ?? "" : `[${msgs.join(", ")}]`;
}

/** Sets up and tears down downwardAPI volumes (upstream downwardAPIPlugin). */
export class DownwardApiPlugin implements VolumePlugin {
  readonly name = DOWNWARD_API_PLUGIN_NAME;
  readonly requiresRemount = true;
  readonly #log: Logger;
  readonly #clock: Clock | undefined;
  readonly #nodeAllocatable: NodeAllocatableFunc | undefined;

  constructor(opts: DownwardApiPluginOptions = {}) {
    this.#log = opts.logger ?? createLogger();
    this.#clock = opts.clock;
    this.#nodeAllocatable = opts.nodeAllocatable;
  }

  canSupport(volume: V1Volume): boolean {
    return volume.downwardAPI !== undefined && volume.downwardAPI !== null;
  }

  /** Writes the items' current values; called again on every sync to pick up changes. */
  async setUp(ctx: VolumeSetUpContext): Promise<MountedVolume> {
    const { pod, volume } = ctx;
    const source = volume.downwardAPI;
    if (!source) {
      throw new VolumeSourceError(`volume ${volume.name} is not a downwardAPI volume`);
    }
    this.#log.v(3).info("Setting up a downwardAPI volume", {
      volume: volume.name,
      pod: kobj(pod),
      dir: ctx.dir,
    });
    let payload: Map<string, FileProjection>;
    try {
      payload = makeDownwardApiPayload(
        source.items ?? [],
        pod,
        source.defaultMode ?? DEFAULT_VOLUME_MODE,
        this.#nodeAllocatable,
      );
    } catch (err) {
      this.#log.error(err, "Error preparing data for downwardAPI volume", {
        volume: volume.name,
        pod: kobj(pod),
      });
      throw err;
    }
    await projectVolumePayload({ ctx, payload, logger: this.#log, clock: this.#clock });
    return { hostPath: ctx.dir, readOnly: true, selinuxRelabel: true };
  }

  /** Removes the volume directory. */
  async tearDown(ctx: VolumeTearDownContext): Promise<void> {
    await removeVolumeDir(ctx);
  }
}

/** Go's filepath.Clean for the relative paths validation lets through. */
function cleanPath(path: string): string {
  const out = posix.normalize(path);
  return out.length > 1 && out.endsWith("/") ? out.slice(0, -1) : out;
}
