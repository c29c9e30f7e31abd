/**
 * @module
 * DraManager: the pod side of Dynamic Resource Allocation (resource.k8s.io/v1).
 *
 * - {@link DraManager.prepareResources}, before a pod's sandbox is made: each of the pod's claims
 *   names a ResourceClaim ({@link resourceClaimName}), which is fetched and must be allocated
 *   and reserved for the pod (and, for a template's claim, owned by it); every driver it was
 *   allocated from must be registered. Only then does the cache change: the pod is recorded on
 *   each claim and checkpointed, and claims not prepared yet go to their drivers'
 *   NodePrepareResources in one call per driver; the devices they return (with their CDI device
 *   IDs) are recorded, and the claims marked prepared and checkpointed. A claim another pod
 *   already prepared is not prepared again.
 * - {@link DraManager.cdiDevices}: the CDI devices of the claims (and requests) a container
 *   names, for its CRI config.
 * - {@link DraManager.unprepareResources}, once the pod's containers stopped: a claim other
 *   pods still use only loses this pod; the others go to NodeUnprepareResources, one call per
 *   driver, then leave the cache and the checkpoint.
 * - {@link DraManager.run}: loads the checkpoint (a restarted kubelet knows what it prepared),
 *   runs the plugins' registration side (ResourceSlice clean-up), and every 60 s, once the pod
 *   sources are ready, unprepares the claims of pods that are no longer active.
 *
 * - Device health (the ResourceHealthStatus gate, beta and on): each registered plugin's
 *   NodeWatchResources stream feeds the health cache (`dra_health.ts`), and the pods whose
 *   devices changed are handed to `onHealthChange` for a new status;
 *   {@link DraManager.allocatedResourcesStatus} gives a container's `allocatedResourcesStatus`
 *   (`dra_health_status.ts`): one entry per claim (and request) it names, with each device's
 *   health, and its message with ResourceHealthStatusMessage (beta and on).
 *
 * Errors read as upstream's, and each Prepare/Unprepare is one observation of
 * dra_operations_duration_seconds. Not done: claims of pod groups and extended resources backed
 * by DRA. Corresponds to upstream `pkg/kubelet/cm/dra/manager.go` and `resourceclaim.Name`,
 * `IsForPod`, `IsReservedForPod` and `BaseRequestRef` of k8s.io/dynamic-resource-allocation.
 */

import type {
  V1Container,
  V1Pod,
  V1PodResourceClaim,
  V1ResourceStatus,
} from "@kubernetes/client-node";
import type { ResourceV1ResourceClaim } from "@kubernetes/client-node";
import type { KubeClient } from "../client/kube_client.ts";
import { apiErrorText } from "../client/kube_client.ts";
import type { Claim, NodePrepareResourcesResponse } from "../../proto/dra/v1/api.ts";
import type { Clock } from "../util/clock.ts";
import { errorText } from "../util/errors.ts";
import { kobj, type Logger } from "../klog/klog.ts";
import { ANY_DRIVER, type DraMetrics, type DraOperation } from "../metrics/dra_metrics.ts";
import { ClaimInfo, ClaimInfoCache } from "./dra_claim_info.ts";
import type { ClaimInfoState } from "./dra_state.ts";
import type { DraPlugin } from "./dra_plugin.ts";
import { DraPluginManager } from "./dra_plugin_manager.ts";
import { type DeviceHealth, DraHealthCache, watchHealthStream } from "./dra_health.ts";
import { containerClaimsHealth } from "./dra_health_status.ts";

/** upstream defaultReconcilePeriod. */
export const DRA_RECONCILE_PERIOD_MS = 60_000;

/** Options of {@link DraManager}. */
export interface DraManagerOptions {
  readonly clock: Clock;
  readonly logger: Logger;
  /** Where the operations and the claims in use are recorded. @default none */
  readonly metrics?: DraMetrics;
  /**
   * Reads the pods' ResourceClaims and deletes stale ResourceSlices. @default none (standalone
   * mode): a pod with a ResourceClaim cannot be prepared
   */
  readonly kubeClient?: KubeClient;
  /** This node, whose ResourceSlices are cleaned up. @default "" */
  readonly nodeName?: string;
  /** Where `dra_manager_state` is kept (the root directory). @default none: in memory only */
  readonly stateDirectory?: string;
  /** The pods that may still run here, for the reconcile loop. @default none */
  readonly activePods?: () => readonly V1Pod[];
  /** Every pod source has sent its first set. @default never: no reconciling */
  readonly sourcesReady?: () => boolean;
  /**
   * The registered plugins. @default one built from these options, which hands each plugin's
   * health stream to this manager
   */
  readonly plugins?: DraPluginManager;
  /**
   * The kubelet's feature gates: ResourceHealthStatus (devices' health watched and reported,
   * @default on) and ResourceHealthStatusMessage (with the drivers' messages, @default on).
   */
  readonly featureGates?: Readonly<Record<string, boolean>>;
  /** Pods whose devices' health changed: their status is to be made again. @default none */
  readonly onHealthChange?: (podUIDs: string[]) => void;
}

/** A pod's resource claims could not be prepared or unprepared; the message is upstream's. */
export class DynamicResourcesError extends Error {
  override name = "DynamicResourcesError";
}

/**
 * Upstream resourceclaim.Name: the ResourceClaim a pod's claim refers to, or undefined when a
 * template produced none (nothing to do). Throws when a template's claim is not generated yet or
 * the claim names no source.
 */
export function resourceClaimName(pod: V1Pod, claim: V1PodResourceClaim): string | undefined {
  return claimNameOf(pod, claim).name;
}

/** resourceclaim.Name with its mustCheckOwner. */
function claimNameOf(
  pod: V1Pod,
  claim: V1PodResourceClaim,
): { name: string | undefined; mustCheckOwner: boolean } {
  const who = `pod "${pod.metadata?.namespace ?? ""}/${pod.metadata?.name ?? ""}"`;
  if (claim.resourceClaimName != null) {
    return { name: claim.resourceClaimName, mustCheckOwner: false };
  }
  if (claim.resourceClaimTemplateName != null) {
    const status = (pod.status?.resourceClaimStatuses ?? []).find((s) => s.name === claim.name);
    if (!status) throw new Error(`${who}: ResourceClaim not created yet`);
    return { name: status.resourceClaimName ?? undefined, mustCheckOwner: true };
  }
  throw new Error(
    `${who}, spec.resourceClaim ${
      JSON.stringify(claim.name)
    }: none of the supported fields are set`,
  );
}

/** upstream resourceclaim.IsForPod (pod groups not accepted: their gate is off in 1.36). */
function checkIsForPod(pod: V1Pod, claim: ResourceV1ResourceClaim): void {
  const p = `${pod.metadata?.namespace}/${pod.metadata?.name}`;
  const c = `${claim.metadata?.namespace}/${claim.metadata?.name}`;
  if (claim.metadata?.namespace !== pod.metadata?.namespace) {
    throw new Error(`ResourceClaim ${c} is not in the same namespace as Pod ${p}`);
  }
  const controller = (claim.metadata?.ownerReferences ?? []).find((r) => r.controller === true);
  if (!controller || controller.uid !== pod.metadata?.uid) {
    throw new Error(`ResourceClaim ${c} was not created for Pod ${p} (Pod is not owner)`);
  }
}

/** upstream resourceclaim.IsReservedForPod. */
function isReservedForPod(pod: V1Pod, claim: ResourceV1ResourceClaim): boolean {
  return (claim.status?.reservedFor ?? []).some((r) => r.uid === pod.metadata?.uid);
}

/** Prepares and unprepares pods' ResourceClaims; see the module documentation. */
export class DraManager {
  readonly #o: DraManagerOptions;
  /** The registered DRA plugins: the plugin manager's DRAPlugin handler. */
  readonly plugins: DraPluginManager;
  #cache: ClaimInfoCache | undefined;
  #loading: Promise<ClaimInfoCache> | undefined;
  #health: DraHealthCache | undefined;
  #healthLoading: Promise<DraHealthCache> | undefined;

  constructor(opts: DraManagerOptions) {
    this.#o = opts;
    this.plugins = opts.plugins ?? new DraPluginManager({
      kubeClient: opts.kubeClient,
      nodeName: opts.nodeName ?? "",
      clock: opts.clock,
      logger: opts.logger,
      metrics: opts.metrics,
      healthStream: this.#healthOn ? (p, signal) => this.#watchHealth(p, signal) : undefined,
    });
    opts.metrics?.setClaimsInUseSource(() => this.claimsInUse());
  }

  /** The claim cache, read from the checkpoint on first use (upstream NewManager). */
  load(): Promise<ClaimInfoCache> {
    this.#loading ??= ClaimInfoCache.load({ stateDirectory: this.#o.stateDirectory }).then(
      (cache) => this.#cache = cache,
    );
    return this.#loading;
  }

  get #healthOn(): boolean {
    return this.#o.featureGates?.ResourceHealthStatus !== false;
  }

  /** The health cache, read from `dra_health_state` on first use (upstream NewManager). */
  loadHealth(): Promise<DraHealthCache> {
    this.#healthLoading ??= DraHealthCache.load({
      clock: this.#o.clock,
      logger: this.#o.logger,
      stateDirectory: this.#o.stateDirectory,
    }).then((cache) => this.#health = cache);
    return this.#healthLoading;
  }

  /**
   * Reads the checkpoint (upstream NewManager's claim info cache): one that cannot be read throws,
   * and the kubelet does not start, as upstream's. The health cache is read too (a bad one is
   * logged).
   */
  async start(): Promise<void> {
    if (this.#healthOn) await this.loadHealth();
    try {
      await this.load();
    } catch (e) {
      const err = new Error(
        `create ResourceClaim cache: could not read the DRA checkpoint, please drain node and ` +
          `remove DRA state file: ${errorText(e)}`,
        { cause: e },
      );
      this.#o.logger.error(err, "Failed to start the DRA manager");
      throw err;
    }
  }

  /**
   * upstream Start: {@link start}, then the plugins' ResourceSlice clean-up as plugins come and
   * go, and a reconcile every {@link DRA_RECONCILE_PERIOD_MS} until `signal` aborts.
   */
  async run(signal: AbortSignal): Promise<void> {
    await this.start();
    const plugins = this.plugins.run(signal);
    try {
      while (!signal.aborted) {
        await this.reconcile(signal);
        await this.#o.clock.sleep(DRA_RECONCILE_PERIOD_MS, signal);
      }
    } catch {
      // Aborted.
    }
    await plugins;
  }

  /** upstream reconcileLoop: unprepares the claims of pods no longer active. */
  async reconcile(signal?: AbortSignal): Promise<void> {
    if (!this.#o.sourcesReady?.() || !this.#o.activePods) return;
    const cache = await this.load();
    const active = new Set(this.#o.activePods().map((p) => p.metadata?.uid ?? ""));
    const inactive = new Map<string, { namespace: string; claims: string[] }>();
    for (const info of cache.values()) {
      for (const uid of info.state.podUids) {
        if (active.has(uid)) continue;
        const entry = inactive.get(uid) ?? { namespace: info.state.namespace, claims: [] };
        entry.claims.push(info.state.claimName);
        inactive.set(uid, entry);
      }
    }
    for (const [uid, { namespace, claims }] of inactive) {
      try {
        await this.#unprepare(uid, namespace, claims, signal);
      } catch (e) {
        this.#o.logger.info("Unpreparing pod resources in reconcile loop failed, will retry", {
          podUID: uid,
          err: errorText(e),
        });
      }
    }
  }

  /**
   * Upstream PrepareResources: prepares every ResourceClaim of the pod before its sandbox is
   * made. Rejects with {@link DynamicResourcesError} when one cannot be.
   */
  prepareResources(pod: V1Pod, signal?: AbortSignal): Promise<void> {
    return this.#timed(
      "PrepareResources",
      "prepare dynamic resources",
      () => this.#prepare(pod, signal),
    );
  }

  /**
   * Upstream UnprepareResources, after the pod's containers stopped: releases what was prepared
   * for it. Idempotent. Rejects with {@link DynamicResourcesError}.
   */
  unprepareResources(pod: V1Pod, signal?: AbortSignal): Promise<void> {
    return this.#timed("UnprepareResources", "unprepare dynamic resources", async () => {
      const names: string[] = [];
      for (const claim of pod.spec?.resourceClaims ?? []) {
        const name = resourceClaimName(pod, claim);
        if (name !== undefined) names.push(name);
      }
      await this.#unprepare(pod.metadata?.uid ?? "", pod.metadata?.namespace ?? "", names, signal);
    });
  }

  /** upstream PodMightNeedToUnprepareResources: a claim still records pod `uid`. */
  podMightNeedToUnprepareResources(uid: string): boolean {
    return this.#cache?.hasPodReference(uid) ?? false;
  }

  /**
   * Upstream GetResources: the CDI device IDs of the claims (and requests) `container` names,
   * in the pod's claim order. Throws when a named claim is not prepared.
   */
  cdiDevices(pod: V1Pod, container: V1Container): string[] {
    const wanted = new Map<string, string[]>();
    for (const c of container.resources?.claims ?? []) {
      wanted.set(c.name, [...(wanted.get(c.name) ?? []), c.request ?? ""]);
    }
    if (wanted.size === 0) return [];
    const out: string[] = [];
    const namespace = pod.metadata?.namespace ?? "";
    for (const podClaim of pod.spec?.resourceClaims ?? []) {
      const requests = wanted.get(podClaim.name);
      if (!requests) continue;
      const name = resourceClaimName(pod, podClaim);
      if (name === undefined) continue;
      const info = this.#cache?.get(name, namespace);
      if (!info) {
        throw new Error(
          `internal error: unable to get claim info for ResourceClaim ${name} in namespace ${namespace}`,
        );
      }
      for (const r of requests) out.push(...info.cdiDevices(r));
    }
    return out;
  }

  /**
   * upstream GetContainerClaimInfos: the prepared claims the container names, as recorded.
   * Throws for a claim that is not prepared.
   */
  containerClaimInfos(pod: V1Pod, container: V1Container): ClaimInfoState[] {
    const names = new Set((container.resources?.claims ?? []).map((c) => c.name));
    const namespace = pod.metadata?.namespace ?? "";
    const out: ClaimInfoState[] = [];
    for (const podClaim of pod.spec?.resourceClaims ?? []) {
      if (!names.has(podClaim.name)) continue;
      const name = resourceClaimName(pod, podClaim);
      if (name === undefined) continue;
      const info = this.#cache?.get(name, namespace);
      if (!info) throw new Error(`unable to get information for ResourceClaim ${name}`);
      out.push(info.state);
    }
    return out;
  }

  /**
   * upstream UpdateAllocatedResourcesStatus for one container ({@link containerClaimsHealth});
   * empty with the ResourceHealthStatus gate off.
   */
  allocatedResourcesStatus(pod: V1Pod, containerName: string): V1ResourceStatus[] {
    if (!this.#healthOn) return [];
    return containerClaimsHealth(pod, containerName, {
      claimInfo: (name, namespace) => this.#cache?.get(name, namespace)?.state,
      health: (driver, pool, device) => this.#health?.get(driver, pool, device),
      claimName: resourceClaimName,
      withMessage: this.#o.featureGates?.ResourceHealthStatusMessage !== false,
      logger: this.#o.logger,
    });
  }

  /** Follows one plugin's health stream (upstream HandleWatchResourcesStream). */
  async #watchHealth(plugin: DraPlugin, signal: AbortSignal): Promise<void> {
    const cache = await this.loadHealth();
    await watchHealthStream({
      driverName: plugin.driverName,
      stream: plugin.nodeWatchResources(signal),
      cache,
      podsUsing: (driver, devices) => this.#podsUsing(driver, devices),
      onChange: (uids) => this.#o.onHealthChange?.(uids),
      logger: this.#o.logger,
      signal,
    });
  }

  /** The pods whose claims hold one of the driver's `devices`, sorted. */
  #podsUsing(
    driver: string,
    devices: readonly Pick<DeviceHealth, "poolName" | "deviceName">[],
  ): string[] {
    const keys = new Set(devices.map((d) => `${d.poolName}/${d.deviceName}`));
    const pods = new Set<string>();
    for (const info of this.#cache?.values() ?? []) {
      const held = info.state.driverState.get(driver) ?? [];
      if (held.some((d) => keys.has(`${d.poolName}/${d.deviceName}`))) {
        for (const uid of info.state.podUids) pods.add(uid);
      }
    }
    return [...pods].sort();
  }

  /** Prepared claims by driver, and {@link ANY_DRIVER}. */
  claimsInUse(): Map<string, number> {
    return this.#cache?.claimsInUse() ?? new Map([[ANY_DRIVER, 0]]);
  }

  async #prepare(pod: V1Pod, signal?: AbortSignal): Promise<void> {
    const logger = this.#o.logger.with({ pod: kobj(pod) });
    const cache = await this.load();
    const namespace = pod.metadata?.namespace ?? "";
    const podUid = pod.metadata?.uid ?? "";
    // Validation first, without touching the cache: a pod that fails here can be deleted
    // without an unprepare that would need its (maybe never installed) driver.
    const infos: { claim: ResourceV1ResourceClaim; info: ClaimInfo; plugins: DraPlugin[] }[] = [];
    for (const podClaim of pod.spec?.resourceClaims ?? []) {
      logger.v(3).info("Processing resource", { podClaim: podClaim.name });
      const { name, mustCheckOwner } = claimNameOf(pod, podClaim);
      if (name === undefined) {
        logger.v(5).info("No need to prepare resources, no claim generated", {
          podClaim: podClaim.name,
        });
        continue;
      }
      const claim = await this.#getClaim(namespace, name, signal);
      if (mustCheckOwner) checkIsForPod(pod, claim);
      if (!isReservedForPod(pod, claim)) {
        throw new Error(
          `pod ${pod.metadata?.name} (${podUid}) is not allowed to use ResourceClaim ${name} (${claim.metadata?.uid})`,
        );
      }
      let info: ClaimInfo;
      try {
        info = ClaimInfo.fromClaim(claim);
      } catch (e) {
        throw new Error(`ResourceClaim ${claim.metadata?.name}: ${errorText(e)}`);
      }
      // The driver is needed even for a claim prepared already: if it is gone, the node is not
      // in a state to run the pod.
      const plugins = [...info.state.driverState.keys()].map((d) => this.plugins.getPlugin(d));
      infos.push({ claim, info, plugins });
    }

    // Record the pod on each claim and checkpoint that, then batch what is not prepared yet.
    const batches = new Map<DraPlugin, Claim[]>();
    const toPrepare = new Map<string, ResourceV1ResourceClaim>();
    for (const { claim, info: fresh, plugins } of infos) {
      const name = claim.metadata?.name ?? "";
      let info = cache.get(name, namespace);
      if (!info) {
        info = fresh;
        cache.add(info);
      } else if (info.state.claimUid !== claim.metadata?.uid) {
        throw new Error(
          `old ResourceClaim with same name ${name} and different UID ${info.state.claimUid} still exists (previous pod force-deleted?!)`,
        );
      }
      info.state.podUids.add(podUid);
      try {
        await cache.syncToCheckpoint();
      } catch (e) {
        throw new Error(`checkpoint ResourceClaim cache: ${errorText(e)}`, { cause: e });
      }
      if (info.prepared) {
        logger.v(5).info("Resources already prepared", { podClaim: name });
        continue;
      }
      toPrepare.set(info.state.claimUid, claim);
      const req: Claim = { namespace, uid: info.state.claimUid, name };
      for (const plugin of plugins) batches.set(plugin, [...(batches.get(plugin) ?? []), req]);
    }

    for (const [plugin, claims] of batches) {
      let res: NodePrepareResourcesResponse;
      try {
        res = await plugin.nodePrepareResources({ claims }, signal);
      } catch (e) {
        throw new Error(`NodePrepareResources: ${errorText(e)}`, { cause: e });
      }
      const results = Object.entries(res.claims);
      for (const [uid, result] of results) {
        const req = claims.find((c) => c.uid === uid);
        if (!req) {
          throw new Error(`NodePrepareResources returned result for unknown claim UID ${uid}`);
        }
        if (result.error !== "") {
          throw new Error(
            `NodePrepareResources failed for ResourceClaim ${req.name}: ${result.error}`,
          );
        }
        const claim = toPrepare.get(uid)!;
        const info = cache.get(claim.metadata?.name ?? "", namespace);
        if (!info) {
          throw new Error(
            `internal error: unable to get claim info for ResourceClaim ${claim.metadata?.name} in namespace ${namespace}`,
          );
        }
        for (const d of result.devices) {
          info.addDevice(plugin.driverName, {
            poolName: d.poolName,
            deviceName: d.deviceName,
            shareId: d.shareId ?? null,
            requestNames: d.requestNames,
            cdiDeviceIds: d.cdiDeviceIds,
          });
        }
      }
      const unfinished = claims.length - results.length;
      if (unfinished !== 0) {
        throw new Error(`NodePrepareResources skipped ${unfinished} ResourceClaims`);
      }
    }

    for (const claim of toPrepare.values()) {
      const info = cache.get(claim.metadata?.name ?? "", namespace);
      if (!info) {
        throw new Error(
          `internal error: unable to get claim info for ResourceClaim ${claim.metadata?.name} in namespace ${namespace}`,
        );
      }
      info.setPrepared();
    }
    try {
      await cache.syncToCheckpoint();
    } catch (e) {
      throw new Error(`checkpoint ResourceClaim state: ${errorText(e)}`, { cause: e });
    }
  }

  async #getClaim(
    namespace: string,
    name: string,
    signal?: AbortSignal,
  ): Promise<ResourceV1ResourceClaim> {
    const client = this.#o.kubeClient;
    if (!client) {
      throw new Error(
        `ResourceClaim ${name}: cannot be fetched without an API server (standalone mode)`,
      );
    }
    try {
      return await client.get<ResourceV1ResourceClaim>(
        `/apis/resource.k8s.io/v1/namespaces/${encodeURIComponent(namespace)}/resourceclaims/${
          encodeURIComponent(name)
        }`,
        signal,
      );
    } catch (e) {
      throw new Error(`fetch ResourceClaim ${name}: ${apiErrorText(e)}`, { cause: e });
    }
  }

  async #unprepare(
    podUid: string,
    namespace: string,
    claimNames: readonly string[],
    signal?: AbortSignal,
  ): Promise<void> {
    const cache = await this.load();
    const batches = new Map<string, Claim[]>();
    const unprepared: string[] = [];
    for (const name of claimNames) {
      const info = cache.get(name, namespace);
      if (!info) continue;
      if (info.state.podUids.size > 1) {
        // Other pods still use it; checkpointed below once this call succeeds.
        info.state.podUids.delete(podUid);
        continue;
      }
      unprepared.push(name);
      const req: Claim = { namespace: info.state.namespace, uid: info.state.claimUid, name };
      for (const driver of info.state.driverState.keys()) {
        batches.set(driver, [...(batches.get(driver) ?? []), req]);
      }
    }
    for (const [driver, claims] of batches) {
      const plugin = this.plugins.getPlugin(driver);
      let res;
      try {
        res = await plugin.nodeUnprepareResources({ claims }, signal);
      } catch (e) {
        throw new Error(`NodeUnprepareResources: ${errorText(e)}`, { cause: e });
      }
      const results = Object.entries(res.claims);
      for (const [uid, result] of results) {
        const req = claims.find((c) => c.uid === uid);
        if (!req) {
          throw new Error(`NodeUnprepareResources returned result for unknown claim UID ${uid}`);
        }
        if (result.error !== "") {
          throw new Error(
            `NodeUnprepareResources failed for ResourceClaim ${req.name}: ${result.error}`,
          );
        }
      }
      const unfinished = claims.length - results.length;
      if (unfinished !== 0) {
        throw new Error(`NodeUnprepareResources skipped ${unfinished} ResourceClaims`);
      }
    }
    for (const name of unprepared) {
      cache.delete(name, namespace);
      this.#o.logger.v(6).info("Deleted claim info cache entry", { claim: `${namespace}/${name}` });
    }
    try {
      await cache.syncToCheckpoint();
    } catch (e) {
      throw new Error(`checkpoint ResourceClaim state: ${errorText(e)}`, { cause: e });
    }
  }

  async #timed(operation: DraOperation, what: string, fn: () => Promise<void>): Promise<void> {
    const start = this.#o.clock.now();
    let failure: unknown;
    try {
      await fn();
    } catch (e) {
      failure = e;
    }
    this.#o.metrics?.observeOperation(
      operation,
      (this.#o.clock.now() - start) / 1000,
      failure !== undefined,
    );
    if (failure !== undefined) {
      throw new DynamicResourcesError(`${what}: ${errorText(failure)}`, { cause: failure });
    }
  }
}
