/**
 * @module
 * The volume plugins this kubelet has, built once for the volume manager (upstream
 * `cmd/kubelet/app/plugins.go` ProbeVolumePlugins, in-tree part): emptyDir, hostPath (also of
 * PersistentVolumes), configMap, secret, downwardAPI, projected, image, local (of
 * PersistentVolumes) and nfs. ConfigMaps and Secrets come from the object managers
 * (`client/object_manager.ts`); without a kube client (standalone mode) a configMap, secret or
 * projected volume fails to mount with upstream's "no kubeClient defined" message, like env
 * references do. CSI volumes (inline, and the PersistentVolumes of claims) are set up by
 * `src/csi/csi_mounter.ts`, added beside these by the pod lifecycle. Other volume types (the
 * cloud ones, iscsi, fc, cephfs...) have no plugin here: the volume manager fails such pods with
 * FailedMount naming the volume.
 */

import type { V1ConfigMap, V1Secret } from "@kubernetes/client-node";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import type { Mounter } from "../util/mount.ts";
import { quantityOrUndefined } from "../util/quantity.ts";
import type { TokenManager } from "../token/token_manager.ts";
import { type ConfigMapGetter, ConfigMapPlugin } from "./configmap.ts";
import { DownwardApiPlugin, type NodeAllocatableFunc } from "./downward_api.ts";
import { EmptyDirPlugin } from "./empty_dir.ts";
import { HostPathPlugin } from "./host_path.ts";
import { ImagePlugin } from "./image.ts";
import { LocalVolumePlugin } from "./local.ts";
import { NfsPlugin } from "./nfs.ts";
import type { VolumePlugin } from "./plugin.ts";
import { ProjectedPlugin } from "./projected.ts";
import { type SecretGetter, SecretPlugin } from "./secret.ts";

/** What {@link probeVolumePlugins} needs. */
export interface VolumePluginsOptions {
  readonly mounter: Mounter;
  /** ConfigMaps of registered pods. @default none: configMap volumes fail (standalone mode) */
  readonly configMaps?: ConfigMapGetter;
  /** Secrets of registered pods. @default none: secret volumes fail (standalone mode) */
  readonly secrets?: SecretGetter;
  readonly tokens: Pick<TokenManager, "getServiceAccountToken" | "deleteServiceAccountToken">;
  /** The node's allocatable resources (node status): tmpfs bound, resourceFieldRef default. */
  readonly nodeAllocatable: NodeAllocatableFunc;
  readonly logger: Logger;
  /** Names the atomic writer's timestamped directories. @default the wall clock */
  readonly clock?: Clock;
  /** Mount tmpfs with `noswap` (see EmptyDirPluginOptions.tmpfsNoswap). @default false */
  readonly tmpfsNoswap?: boolean;
}

/** Every in-tree plugin, in upstream's probe order. */
export function probeVolumePlugins(o: VolumePluginsOptions): VolumePlugin[] {
  const { mounter, logger, clock, nodeAllocatable } = o;
  const configMaps = o.configMaps ?? noClientGetter<V1ConfigMap>("configMap");
  const secrets = o.secrets ?? noClientGetter<V1Secret>("secret");
  const nodeAllocatableMemory = () => quantityOrUndefined(nodeAllocatable()?.["memory"]);
  return [
    new EmptyDirPlugin({ mounter, logger, tmpfsNoswap: o.tmpfsNoswap, nodeAllocatableMemory }),
    new HostPathPlugin({ logger }),
    new SecretPlugin({ secrets, mounter, logger, clock, nodeAllocatableMemory }),
    new ConfigMapPlugin({ configMaps, logger, clock }),
    new DownwardApiPlugin({ logger, clock, nodeAllocatable }),
    new ProjectedPlugin({
      configMaps,
      secrets,
      tokens: o.tokens,
      mounter,
      logger,
      clock,
      nodeAllocatable,
      nodeAllocatableMemory,
    }),
    new ImagePlugin(),
    new LocalVolumePlugin({ mounter, logger }),
    new NfsPlugin({ mounter }),
  ];
}

/** A getter for a kubelet without an apiserver: every get fails as upstream's does then. */
function noClientGetter<T>(kind: string): {
  get(namespace: string, name: string): Promise<T | undefined>;
} {
  return {
    get: (namespace, name) =>
      Promise.reject(new Error(`couldn't get ${kind} ${namespace}/${name}, no kubeClient defined`)),
  };
}
