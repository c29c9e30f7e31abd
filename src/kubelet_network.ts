/**
 * @module
 * The node's pod CIDR as the container runtime knows it. {@link PodCIDRUpdater.update} gives the
 * runtime a CIDR (CRI UpdateRuntimeConfig, through the runtime manager) when it differs from the
 * one the runtime state holds, one update at a time. The kubelet calls it once the runtime manager
 * is built with the configuration's `podCIDR`, and each node status update calls it with the
 * Node's `spec.podCIDRs` joined by ","; containerd's CRI renders its `cni.conf_template` with it
 * while no CNI network is loaded, which is how a kubeadm node whose CIDR the controller manager
 * allocates gets its pod network. Corresponds to upstream `pkg/kubelet/kubelet_network.go`
 * (`updatePodCIDR`, serialized by `Kubelet.updatePodCIDRMux`).
 */

import type { Logger } from "./klog/klog.ts";
import type { RuntimeState } from "./runtime_state.ts";
import { errorText } from "./util/errors.ts";
import { Semaphore } from "./util/semaphore.ts";

/** What gives the runtime the pod CIDR (the runtime manager's UpdatePodCIDR). */
export interface PodCIDRRuntime {
  updatePodCIDR(podCIDR: string, signal?: AbortSignal): Promise<void>;
}

/** Options of {@link PodCIDRUpdater}. */
export interface PodCIDRUpdaterOptions {
  /** Holds the CIDR the runtime last accepted. */
  readonly state: Pick<RuntimeState, "podCIDR" | "setPodCIDR">;
  /**
   * The runtime manager, or undefined until it is built. Upstream builds it after the runtime
   * answered Version, before anything asks for the pod CIDR; here node status updates start
   * first, and a CIDR asked for before then is given on the first update after.
   */
  readonly runtime: () => PodCIDRRuntime | undefined;
  readonly logger: Logger;
}

/** The runtime refused the pod CIDR; the CIDR may have changed all the same. */
export class PodCIDRUpdateError extends Error {
  override name = "PodCIDRUpdateError";
}

/** Gives the runtime the node's pod CIDR when it changes. */
export class PodCIDRUpdater {
  readonly #o: PodCIDRUpdaterOptions;
  /** Upstream updatePodCIDRMux: a check and the update it leads to are one step. */
  readonly #lock = new Semaphore(1);

  constructor(opts: PodCIDRUpdaterOptions) {
    this.#o = opts;
  }

  /**
   * Gives the runtime `cidr` when it differs from the state's (upstream updatePodCIDR). True when
   * it did; throws a {@link PodCIDRUpdateError} when the runtime refused it, which counts as a
   * change (upstream returns true with the error, to be on the safe side), and the state keeps
   * the old CIDR so that the next call tries again.
   */
  update(cidr: string, signal?: AbortSignal): Promise<boolean> {
    return this.#lock.run(async () => {
      const { state, logger } = this.#o;
      const podCIDR = state.podCIDR();
      if (podCIDR === cidr) return false;
      const runtime = this.#o.runtime();
      if (runtime === undefined) {
        logger.v(4).info("Pod CIDR waits for the container runtime", { podCIDR: cidr });
        return false;
      }
      try {
        await runtime.updatePodCIDR(cidr, signal);
      } catch (e) {
        throw new PodCIDRUpdateError(`failed to update pod CIDR: ${errorText(e)}`, { cause: e });
      }
      logger.info("Updating Pod CIDR", { originalPodCIDR: podCIDR, newPodCIDR: cidr });
      state.setPodCIDR(cidr);
      return true;
    }, signal);
  }
}
