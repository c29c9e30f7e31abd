/**
 * @module
 * What the kubelet knows of its container runtime's health, kept by updateRuntimeUp (every 5 s,
 * CRI Status) and read by the sync loop (which backs off while the runtime has errors) and by
 * the node's Ready condition, and the pod CIDR last given to the runtime (kubelet_network.ts
 * keeps it). Corresponds to upstream `pkg/kubelet/runtime.go` and the condition handling of
 * `Kubelet.updateRuntimeUp`.
 */

import type { Clock } from "./util/clock.ts";

/** How long the runtime may go without a good Status before it counts as down (upstream 30 s). */
export const MAX_WAIT_FOR_CONTAINER_RUNTIME_MS = 30_000;

/** One CRI runtime condition, as the Status RPC reports it. */
export interface RuntimeCondition {
  readonly type: string;
  readonly status: boolean;
  readonly reason: string;
  readonly message: string;
}

/** Formats a condition as upstream's `RuntimeCondition.String()`; `<nil>` when absent. */
export function formatCondition(c: RuntimeCondition | undefined): string {
  return c === undefined
    ? "<nil>"
    : `${c.type}=${c.status} reason:${c.reason} message:${c.message}`;
}

/** Joins errors as upstream's utilerrors.NewAggregate prints them; undefined when none. */
export function aggregate(errors: readonly string[]): string | undefined {
  if (errors.length === 0) return undefined;
  if (errors.length === 1) return errors[0];
  return `[${errors.join(", ")}]`;
}

/** The runtime, network and storage state, with the time of the last good runtime Status. */
export class RuntimeState {
  #lastBaseRuntimeSync = 0;
  #networkError: string | undefined = "network state unknown";
  #runtimeError: string | undefined;
  #storageError: string | undefined;
  #podCIDR = "";
  readonly #healthChecks: { name: string; check: () => string | undefined }[] = [];

  constructor(
    private readonly clock: Clock,
    private readonly threshold = MAX_WAIT_FOR_CONTAINER_RUNTIME_MS,
  ) {}

  /** Adds a check; it returns undefined when healthy, or why not. */
  addHealthCheck(name: string, check: () => string | undefined): void {
    this.#healthChecks.push({ name, check });
  }

  setRuntimeSync(at: number): void {
    this.#lastBaseRuntimeSync = at;
  }

  setNetworkState(error: string | undefined): void {
    this.#networkError = error;
  }

  setRuntimeState(error: string | undefined): void {
    this.#runtimeError = error;
  }

  setStorageState(error: string | undefined): void {
    this.#storageError = error;
  }

  /** Records the pod CIDR the runtime accepted with UpdateRuntimeConfig. */
  setPodCIDR(cidr: string): void {
    this.#podCIDR = cidr;
  }

  /** The pod CIDR the runtime last accepted; empty before any. */
  podCIDR(): string {
    return this.#podCIDR;
  }

  /** Why pods cannot be synced now, or undefined. */
  runtimeErrors(): string | undefined {
    const errs: string[] = [];
    if (this.#lastBaseRuntimeSync === 0) {
      errs.push("container runtime status check may not have completed yet");
    } else if (this.#lastBaseRuntimeSync + this.threshold <= this.clock.now()) {
      errs.push("container runtime is down");
    }
    for (const hc of this.#healthChecks) {
      const why = hc.check();
      if (why !== undefined) errs.push(`${hc.name} is not healthy: ${why}`);
    }
    if (this.#runtimeError !== undefined) errs.push(this.#runtimeError);
    return aggregate(errs);
  }

  networkErrors(): string | undefined {
    return this.#networkError;
  }

  storageErrors(): string | undefined {
    return this.#storageError;
  }

  /**
   * Records one Status answer's conditions as upstream's updateRuntimeUp does: the network
   * error, the runtime error, and the sync time when the runtime is ready.
   */
  recordStatus(
    conditions: readonly RuntimeCondition[],
  ): { runtimeReady: boolean; networkReady: boolean } {
    const network = conditions.find((c) => c.type === "NetworkReady");
    const networkReady = network?.status === true;
    this.setNetworkState(
      networkReady ? undefined : `container runtime network not ready: ${formatCondition(network)}`,
    );
    const runtime = conditions.find((c) => c.type === "RuntimeReady");
    const runtimeReady = runtime?.status === true;
    if (!runtimeReady) {
      this.setRuntimeState(`container runtime not ready: ${formatCondition(runtime)}`);
      return { runtimeReady, networkReady };
    }
    this.setRuntimeState(undefined);
    this.setRuntimeSync(this.clock.now());
    return { runtimeReady, networkReady };
  }
}
