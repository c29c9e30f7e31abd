/**
 * @module
 * Heap growth of a long-running loop over many wakes, for its tests ({@link loopHeapGrowth}):
 * `prober` (the prober manager: one pod probed every second) or `sync` (the sync loop: a tick and
 * a probe update each second, no PLEG event) on a fake clock. A loop that keeps something per
 * wake (a reaction on a promise that outlives it) grows by hundreds of bytes a wake. The garbage
 * collector is reached in-process (V8's flag set at run time, `gc` from a new context), so no
 * second process maps the deno binary meanwhile.
 */

import type { V1Pod } from "@kubernetes/client-node";
import v8 from "node:v8";
import vm from "node:vm";
import * as api from "../../proto/runtime/v1/api.ts";
import { FakeClock } from "../util/clock.ts";
import { createLogger } from "../klog/klog.ts";
import { ProberManager } from "../prober/prober_manager.ts";
import { type SyncHandler, SyncLoop } from "../kubelet_sync_loop.ts";
import type { PodLifecycleEvent } from "../pleg/generic.ts";

/** Which loop {@link loopHeapGrowth} runs. */
export type HeapLoop = "prober" | "sync";

/** A full garbage collection, from V8's `gc` (exposed at run time). */
function collector(): () => void {
  v8.setFlagsFromString("--expose-gc");
  return vm.runInNewContext("gc") as () => void;
}

/** The used heap's growth in bytes over `wakes` rounds of `loop`, after 1,000 to warm up. */
export async function loopHeapGrowth(loop: HeapLoop, wakes: number): Promise<number> {
  const gc = collector();
  const clock = new FakeClock();
  const ac = new AbortController();
  let done: Promise<void>;
  let perRound = () => {};
  if (loop === "prober") {
    const pod: V1Pod = {
      metadata: { name: "web", namespace: "ns", uid: "u1" },
      spec: {
        containers: [{
          name: "c",
          image: "x",
          readinessProbe: { exec: { command: ["true"] }, periodSeconds: 1 },
        }],
      },
    };
    const manager = new ProberManager({
      runner: { probe: () => Promise.resolve({ result: "Success", output: "" }) },
      getPodStatus: () => ({
        id: "u1",
        name: "web",
        namespace: "ns",
        ips: ["10.0.0.5"],
        sandboxStatuses: [],
        containerStatuses: [api.ContainerStatus.fromPartial({
          id: "c1",
          metadata: { name: "c", attempt: 0 },
          state: api.ContainerState.CONTAINER_RUNNING,
          startedAt: BigInt(clock.now() - 60_000) * 1_000_000n,
        })],
        timestamp: 0,
      }),
      clock,
      logger: createLogger({ write: () => {} }),
      onUpdate: () => {},
      random: () => 0,
    });
    done = manager.run(ac.signal);
    manager.addPod(pod);
  } else {
    const noop = () => {};
    const handler = new Proxy({}, {
      get: (_t, name) =>
        name === "podsToSync"
          ? () => []
          : name === "handlePodCleanups"
          ? () => Promise.resolve()
          : noop,
    }) as SyncHandler;
    const sync = new SyncLoop({
      handler,
      // A PLEG that has nothing to say: its next event never comes.
      pleg: {
        next: (signal?: AbortSignal) =>
          new Promise<PodLifecycleEvent>((_, reject) =>
            signal?.addEventListener("abort", () => reject(signal.reason), { once: true })
          ),
        takeQueued: () => [],
      },
      runtimeErrors: () => undefined,
      sourcesReady: () => true,
      clock,
      logger: createLogger({ write: () => {} }),
    });
    done = sync.run(ac.signal);
    perRound = () => sync.pushProbeUpdate("u1");
  }
  const settle = async () => {
    for (let i = 0; i < 20; i++) await null;
  };
  const round = async () => {
    perRound();
    await settle();
    clock.step(1_000);
    await settle();
  };
  for (let i = 0; i < 1_000; i++) await round();
  gc();
  const before = Deno.memoryUsage().heapUsed;
  for (let i = 0; i < wakes; i++) await round();
  gc();
  const after = Deno.memoryUsage().heapUsed;
  ac.abort();
  await done;
  return after - before;
}
