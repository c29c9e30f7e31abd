/**
 * @module
 * A watch on the pods of one node for the benchmark suite (tests/bench_suite.ts): it notes, by
 * pod name, when the watch first showed every container of the pod running (on the
 * `performance.now()` clock of this process, and as wall-clock time next to the pod's
 * `creationTimestamp`, for upstream's pod startup SLI) and when it showed the pod deleted, and
 * lets the bench wait for either. It talks to the apiserver through `src/client/kube_client.ts` (list for the resource
 * version, then watch from it, resumed when the server ends the watch).
 */

import type { V1Pod, V1PodList } from "@kubernetes/client-node";
import type { KubeClient } from "../src/client/kube_client.ts";

/** Options of {@link PodWatch.start}. */
export interface PodWatchOptions {
  readonly client: KubeClient;
  readonly namespace: string;
  /** Only pods bound to this node are watched. */
  readonly nodeName: string;
  /** Stops the watch. */
  readonly signal: AbortSignal;
}

/** The bench waited longer than its bound for pods. */
export class PodWatchTimeoutError extends Error {
  override name = "PodWatchTimeoutError";
}

/** Whether the pod's status shows each of its containers running. */
export function allContainersRunning(pod: V1Pod): boolean {
  const names = (pod.spec?.containers ?? []).map((c) => c.name);
  const statuses = pod.status?.containerStatuses ?? [];
  return names.length > 0 &&
    names.every((n) => statuses.some((s) => s.name === n && s.state?.running !== undefined));
}

/** Pods of a node as a watch shows them; see the module documentation. */
export class PodWatch {
  /** performance.now() at which each pod was first seen with every container running. */
  readonly runningAt = new Map<string, number>();
  /**
   * Upstream's pod startup SLI of each pod, in ms: wall-clock time the watch showed every
   * container running minus the pod's `creationTimestamp` (which has second precision, so
   * this reads 0 to 1000 ms high).
   */
  readonly sliMs = new Map<string, number>();
  /** Wall-clock time (ms since the epoch) at which each pod was first seen running. */
  readonly runningWallAt = new Map<string, number>();
  /** performance.now() at which each pod was seen deleted. */
  readonly deletedAt = new Map<string, number>();
  #changed = Promise.withResolvers<void>();
  #failed: Error | undefined;
  #finished: Promise<void> = Promise.resolve();

  private constructor() {}

  /** Lists the node's pods, then watches from that version until `signal` aborts. */
  static async start(opts: PodWatchOptions): Promise<PodWatch> {
    const w = new PodWatch();
    const path = `/api/v1/namespaces/${opts.namespace}/pods`;
    const fieldSelector = `spec.nodeName=${opts.nodeName}`;
    const list = await opts.client.request<V1PodList>("GET", path, {
      query: { fieldSelector },
      signal: opts.signal,
    });
    let resourceVersion = list.metadata?.resourceVersion;
    w.#finished = (async () => {
      while (!opts.signal.aborted) {
        for await (
          const ev of opts.client.watch<V1Pod>(path, {
            resourceVersion,
            fieldSelector,
            signal: opts.signal,
          })
        ) {
          if (ev.type === "ERROR") throw new Error(`watch error: ${JSON.stringify(ev.object)}`);
          resourceVersion = ev.object.metadata?.resourceVersion ?? resourceVersion;
          if (ev.type !== "BOOKMARK") w.#see(ev.type, ev.object);
        }
      }
    })().catch((e) => {
      if (!opts.signal.aborted) w.#fail(e instanceof Error ? e : new Error(String(e)));
    });
    return w;
  }

  /** Resolves when the watch has stopped. */
  get finished(): Promise<void> {
    return this.#finished;
  }

  #see(type: string, pod: V1Pod): void {
    const name = pod.metadata?.name ?? "";
    const now = performance.now();
    if (type === "DELETED") {
      if (!this.deletedAt.has(name)) this.deletedAt.set(name, now);
    } else if (!this.runningAt.has(name) && allContainersRunning(pod)) {
      this.runningAt.set(name, now);
      this.runningWallAt.set(name, Date.now());
      // A Date in the type; the JSON from the watch holds the RFC 3339 string.
      const stamp = pod.metadata?.creationTimestamp;
      const created = stamp === undefined ? NaN : new Date(stamp).getTime();
      if (Number.isFinite(created)) this.sliMs.set(name, Date.now() - created);
    }
    this.#changed.resolve();
    this.#changed = Promise.withResolvers<void>();
  }

  #fail(e: Error): void {
    this.#failed = e;
    this.#changed.resolve();
  }

  /** Waits until every pod in `names` is running (or deleted, with `until: "deleted"`). */
  async waitFor(
    names: readonly string[],
    until: "running" | "deleted",
    timeoutMs: number,
  ): Promise<void> {
    const seen = until === "running" ? this.runningAt : this.deletedAt;
    const end = performance.now() + timeoutMs;
    for (;;) {
      if (this.#failed) throw this.#failed;
      const missing = names.filter((n) => !seen.has(n));
      if (missing.length === 0) return;
      const left = end - performance.now();
      if (left <= 0) {
        throw new PodWatchTimeoutError(
          `${missing.length} of ${names.length} pods not ${until} after ${timeoutMs} ms: ` +
            missing.slice(0, 5).join(", "),
        );
      }
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        this.#changed.promise,
        new Promise((r) => timer = setTimeout(r, left)),
      ]);
      clearTimeout(timer);
    }
  }
}
