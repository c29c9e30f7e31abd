/**
 * @module
 * The node's heartbeat lease `kube-node-lease/<node>`: created with an owner reference to the
 * Node, renewed every quarter of nodeLeaseDurationSeconds, retried with backoff on errors, and
 * logged once per change of state rather than on every failure. Corresponds to upstream
 * `k8s.io/component-helpers/apimachinery/lease` as the kubelet runs it.
 */

import type { V1Lease, V1Node } from "@kubernetes/client-node";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import { isStatus, type KubeClient } from "../client/kube_client.ts";

/** Upstream's renewIntervalFraction. */
export const RENEW_INTERVAL_FRACTION = 0.25;
/** Upstream's maxBackoff between failed attempts. */
export const MAX_BACKOFF_MS = 7_000;

/** Lease time format: metav1.MicroTime, RFC 3339 with microseconds. */
export function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
}

/** What the lease controller needs. */
export interface NodeLeaseOptions {
  readonly client: KubeClient;
  readonly nodeName: string;
  readonly leaseDurationSeconds: number;
  readonly clock: Clock;
  readonly logger: Logger;
  /** The Node for the owner reference, once registered. */
  readonly getNode: () => V1Node | undefined;
}

/** Keeps the node lease fresh until the signal aborts. */
export class NodeLeaseController {
  readonly #o: NodeLeaseOptions;
  #lease: V1Lease | undefined;
  #failing = false;

  constructor(opts: NodeLeaseOptions) {
    this.#o = opts;
  }

  get path(): string {
    return `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${this.#o.nodeName}`;
  }

  /** The renew interval: a quarter of the lease duration (10 s by default). */
  get renewIntervalMs(): number {
    return this.#o.leaseDurationSeconds * 1000 * RENEW_INTERVAL_FRACTION;
  }

  /** Creates or renews the lease once; throws on failure. */
  async sync(signal?: AbortSignal): Promise<V1Lease> {
    const { client, nodeName, clock } = this.#o;
    const desired = (base: V1Lease | undefined): V1Lease => {
      const node = this.#o.getNode();
      const lease: V1Lease = {
        apiVersion: "coordination.k8s.io/v1",
        kind: "Lease",
        metadata: { ...base?.metadata, name: nodeName, namespace: "kube-node-lease" },
        spec: {
          ...base?.spec,
          holderIdentity: nodeName,
          leaseDurationSeconds: this.#o.leaseDurationSeconds,
          renewTime: microTime(clock.now()) as unknown as Date,
        },
      };
      if (node?.metadata?.uid && !lease.metadata?.ownerReferences?.length) {
        lease.metadata!.ownerReferences = [{
          apiVersion: "v1",
          kind: "Node",
          name: nodeName,
          uid: node.metadata.uid,
        }];
      }
      return lease;
    };
    if (this.#lease) {
      try {
        this.#lease = await client.update(this.path, desired(this.#lease), signal);
        return this.#lease;
      } catch (e) {
        // A conflict or a deleted lease: start again from what the apiserver has.
        if (!isStatus(e, 409) && !isStatus(e, 404)) throw e;
        this.#lease = undefined;
      }
    }
    try {
      const current = await client.get<V1Lease>(this.path, signal);
      this.#lease = await client.update(this.path, desired(current), signal);
    } catch (e) {
      if (!isStatus(e, 404)) throw e;
      const created = desired(undefined);
      this.#lease = await client.create(
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
        created,
        signal,
      );
    }
    return this.#lease!;
  }

  /** Renews every interval, backing off (up to 7 s) while the apiserver fails. */
  async run(signal: AbortSignal): Promise<void> {
    const { clock, logger } = this.#o;
    let backoff = 200;
    while (!signal.aborted) {
      let wait = this.renewIntervalMs;
      try {
        await this.sync(signal);
        if (this.#failing) logger.info("Node lease renewed again", { node: this.#o.nodeName });
        this.#failing = false;
        backoff = 200;
      } catch (e) {
        if (signal.aborted) break;
        if (!this.#failing) {
          logger.error(e, "Failed to update lease; retrying with backoff", {
            node: this.#o.nodeName,
          });
        }
        this.#failing = true;
        wait = backoff;
        backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
      }
      await clock.sleep(wait, signal).catch(() => {});
    }
  }
}
