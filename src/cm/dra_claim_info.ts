/**
 * @module
 * The DRA manager's cache of claims: for each ResourceClaim (by namespace and name) the pods on
 * this node that use it, the drivers it was allocated from and the devices each prepared, and
 * whether it is prepared in this kubelet's life. Every change that matters after a restart is
 * written to the checkpoint (`dra_state.ts`) by the manager; entries read back from it are not
 * prepared until a pod's PrepareResources runs again, which calls no driver for a claim already
 * prepared and only marks it. The claims in use (dra_resource_claims_in_use) are the prepared
 * ones. Corresponds to upstream `pkg/kubelet/cm/dra/claiminfo.go`.
 */

import type { ResourceV1ResourceClaim } from "@kubernetes/client-node";
import { CheckpointManager } from "../checkpointmanager/checkpoint_manager.ts";
import { ANY_DRIVER } from "../metrics/dra_metrics.ts";
import {
  type ClaimInfoState,
  DRA_CHECKPOINT_CODEC,
  DRA_MANAGER_STATE_FILE,
  type DraDevice,
} from "./dra_state.ts";

/** One claim the kubelet knows (upstream ClaimInfo). */
export class ClaimInfo {
  readonly state: ClaimInfoState;
  #prepared = false;

  constructor(state: ClaimInfoState) {
    this.state = state;
  }

  /** A claim as the apiserver has it; throws "not allocated" when it is not. */
  static fromClaim(claim: ResourceV1ResourceClaim): ClaimInfo {
    const allocation = claim.status?.allocation;
    if (!allocation) throw new Error("not allocated");
    const driverState = new Map<string, DraDevice[]>();
    for (const r of allocation.devices?.results ?? []) driverState.set(r.driver, []);
    return new ClaimInfo({
      claimUid: claim.metadata?.uid ?? "",
      claimName: claim.metadata?.name ?? "",
      namespace: claim.metadata?.namespace ?? "",
      podUids: new Set(),
      driverState,
    });
  }

  get prepared(): boolean {
    return this.#prepared;
  }

  setPrepared(): void {
    this.#prepared = true;
  }

  addDevice(driverName: string, device: DraDevice): void {
    const devices = this.state.driverState.get(driverName) ?? [];
    devices.push(device);
    this.state.driverState.set(driverName, devices);
  }

  /**
   * The CDI device IDs of the claim's devices for `requestName` (every device when it is empty,
   * and devices that name no request for any request), as upstream cdiDevicesAsList.
   */
  cdiDevices(requestName: string): string[] {
    const out: string[] = [];
    for (const devices of this.state.driverState.values()) {
      for (const d of devices) {
        if (
          requestName === "" || d.requestNames.length === 0 ||
          d.requestNames.includes(requestName)
        ) {
          out.push(...d.cdiDeviceIds);
        }
      }
    }
    return out;
  }
}

/** Options of {@link ClaimInfoCache.load}. */
export interface ClaimInfoCacheOptions {
  /** Where `dra_manager_state` is kept: the kubelet's root directory. @default none: in memory */
  readonly stateDirectory?: string;
}

/** The claims by `namespace/name`, and their checkpoint (upstream claimInfoCache). */
export class ClaimInfoCache {
  readonly #claims = new Map<string, ClaimInfo>();
  readonly #checkpoints: CheckpointManager | undefined;

  private constructor(checkpoints: CheckpointManager | undefined) {
    this.#checkpoints = checkpoints;
  }

  /**
   * The cache as the checkpoint left it; a missing checkpoint is written empty, a corrupt one
   * rejects (upstream newClaimInfoCache: the kubelet does not start, the node must be drained).
   */
  static async load(opts: ClaimInfoCacheOptions = {}): Promise<ClaimInfoCache> {
    const checkpoints = opts.stateDirectory === undefined
      ? undefined
      : new CheckpointManager({ directory: opts.stateDirectory });
    const cache = new ClaimInfoCache(checkpoints);
    if (!checkpoints) return cache;
    const states = await checkpoints.getCheckpoint(DRA_MANAGER_STATE_FILE, DRA_CHECKPOINT_CODEC);
    if (states === undefined) {
      await checkpoints.createCheckpoint(DRA_MANAGER_STATE_FILE, DRA_CHECKPOINT_CODEC, null);
      return cache;
    }
    for (const s of states ?? []) cache.add(new ClaimInfo(s));
    return cache;
  }

  get(claimName: string, namespace: string): ClaimInfo | undefined {
    return this.#claims.get(`${namespace}/${claimName}`);
  }

  add(info: ClaimInfo): void {
    this.#claims.set(`${info.state.namespace}/${info.state.claimName}`, info);
  }

  delete(claimName: string, namespace: string): void {
    this.#claims.delete(`${namespace}/${claimName}`);
  }

  values(): IterableIterator<ClaimInfo> {
    return this.#claims.values();
  }

  /** Whether any claim is used by pod `uid` (upstream hasPodReference). */
  hasPodReference(uid: string): boolean {
    for (const info of this.#claims.values()) if (info.state.podUids.has(uid)) return true;
    return false;
  }

  /**
   * Writes every claim to the checkpoint; the content is taken now, the writes go in order
   * (upstream syncToCheckpoint). Does nothing without a state directory.
   */
  syncToCheckpoint(): Promise<void> {
    if (!this.#checkpoints) return Promise.resolve();
    const states = [...this.#claims.values()].map((i) => i.state);
    return this.#checkpoints.createCheckpoint(DRA_MANAGER_STATE_FILE, DRA_CHECKPOINT_CODEC, states);
  }

  /** Prepared claims by driver, and {@link ANY_DRIVER} for all (upstream claimsInUse). */
  claimsInUse(): Map<string, number> {
    const counts = new Map<string, number>();
    let total = 0;
    for (const info of this.#claims.values()) {
      if (!info.prepared) continue;
      total++;
      for (const driver of info.state.driverState.keys()) {
        counts.set(driver, (counts.get(driver) ?? 0) + 1);
      }
    }
    counts.set(ANY_DRIVER, total);
    return counts;
  }
}
