/**
 * @module
 * The order in which a pod with sidecars shuts down: every regular container first, then the
 * restartable init containers (sidecars) from the last to the first, each waiting at most its
 * grace period for those it depends on. Private to `kuberuntime_container.ts`; corresponds to
 * upstream `kuberuntime_termination_order.go`.
 */

import type { V1Pod } from "@kubernetes/client-node";
import type { Clock } from "../util/clock.ts";
import { isRestartableInitContainer } from "../pod/podutil.ts";

/** A promise with its resolver. */
interface Gate {
  readonly done: Promise<void>;
  readonly open: () => void;
}

function gate(): Gate {
  let open!: () => void;
  const done = new Promise<void>((resolve) => (open = resolve));
  return { done, open };
}

/** Who waits for whom during one pod's termination; see the module documentation. */
export class TerminationOrdering {
  readonly #terminated = new Map<string, Gate>();
  readonly #prereqs = new Map<string, Promise<void>[]>();

  constructor(readonly clock: Clock, pod: V1Pod, runningContainerNames: readonly string[]) {
    const running = new Set(runningContainerNames);
    const add = (name: string): Gate => {
      const g = gate();
      this.#terminated.set(name, g);
      // Containers not running gate nothing.
      if (!running.has(name)) g.open();
      return g;
    };
    const mains = (pod.spec?.containers ?? []).map((c) => add(c.name).done);
    let previousSidecar: Gate | undefined;
    for (const ic of [...(pod.spec?.initContainers ?? [])].reverse()) {
      const g = add(ic.name);
      if (!isRestartableInitContainer(ic)) continue;
      const prereqs = [...mains];
      if (previousSidecar) prereqs.push(previousSidecar.done);
      this.#prereqs.set(ic.name, prereqs);
      previousSidecar = g;
    }
  }

  /**
   * Waits until `name` may stop, or `gracePeriodSeconds` have passed; resolves with the seconds
   * waited. No wait when the grace period is not positive.
   */
  async waitForTurn(
    name: string,
    gracePeriodSeconds: number,
    signal?: AbortSignal,
  ): Promise<number> {
    if (gracePeriodSeconds <= 0) return 0;
    const prereqs = this.#prereqs.get(name) ?? [];
    if (prereqs.length === 0) return 0;
    const start = this.clock.now();
    const timer = new AbortController();
    const stop = signal ? AbortSignal.any([signal, timer.signal]) : timer.signal;
    try {
      await Promise.race([
        Promise.all(prereqs),
        this.clock.sleep(gracePeriodSeconds * 1000, stop).catch(() => {}),
      ]);
    } finally {
      timer.abort();
    }
    signal?.throwIfAborted();
    return (this.clock.now() - start) / 1000;
  }

  /** Records that `name` has stopped, releasing those waiting for it. */
  containerTerminated(name: string): void {
    this.#terminated.get(name)?.open();
    this.#terminated.delete(name);
  }
}
