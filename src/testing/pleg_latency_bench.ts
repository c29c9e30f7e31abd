/**
 * @module
 * How long a container exit takes to reach the pod cache (the runtime status the pod worker
 * syncs from) and the sync loop's PLEG event, with the evented PLEG and with relisting alone
 * (upstream's generic PLEG, every second). The fake CRI runtime runs in this process behind a
 * real unix socket, on the real clock; each trial starts a pod's container, waits for it to be
 * seen running, then makes it exit and times the ContainerDied event. Prints p50, p90 and max
 * per mode. Run: `deno run --allow-all src/testing/pleg_latency_bench.ts [trials]`.
 */

import { join } from "node:path";
import * as api from "../../proto/runtime/v1/api.ts";
import { realClock } from "../util/clock.ts";
import { CriConnection } from "../cri/connection.ts";
import { EventedPLEG } from "../pleg/evented.ts";
import { startFakeRuntime } from "./fake_remote_runtime.ts";
import { createLogger } from "../klog/klog.ts";
import { GenericPLEG, type PodLifecycleEventGenerator } from "../pleg/generic.ts";
import { PodCache } from "../container/pod_cache.ts";
import { RemoteRuntimeService } from "../cri/remote_runtime.ts";

const IMAGE = "docker.io/library/busybox:1.36";

type Mode = "evented" | "relist";

/** Milliseconds from each exit to its ContainerDied event, for one mode. */
async function measure(mode: Mode, trials: number): Promise<number[]> {
  const dir = await Deno.makeTempDir({ prefix: "pleg-latency-" });
  const fake = await startFakeRuntime({ preloadImages: [IMAGE], socket: join(dir, "cri.sock") });
  const connection = new CriConnection({ endpoint: fake.endpoint });
  const runtime = new RemoteRuntimeService({ connection, timeoutMs: 10_000 });
  const cache = new PodCache();
  const logger = createLogger({ write: () => {} });
  const generic = new GenericPLEG({ runtime, cache, clock: realClock, logger });
  const pleg: PodLifecycleEventGenerator = mode === "evented"
    ? new EventedPLEG({ runtime, cache, generic, clock: realClock, logger })
    : generic;
  const ctl = new AbortController();
  const running = pleg.run(ctl.signal);
  try {
    if (pleg instanceof EventedPLEG) {
      while (!pleg.inUse) await new Promise((r) => setTimeout(r, 10));
    }
    const out: number[] = [];
    for (let i = 0; i < trials; i++) {
      const uid = `uid-${i}`;
      const labels = {
        "io.kubernetes.pod.name": `p${i}`,
        "io.kubernetes.pod.namespace": "default",
        "io.kubernetes.pod.uid": uid,
      };
      const config = api.PodSandboxConfig.create({
        metadata: { name: `p${i}`, namespace: "default", uid, attempt: 0 },
        labels,
      });
      const sandbox = await runtime.runPodSandbox(config, "");
      const id = await runtime.createContainer(
        sandbox,
        api.ContainerConfig.create({
          metadata: { name: "main", attempt: 0 },
          image: { image: IMAGE },
          labels: { ...labels, "io.kubernetes.container.name": "main" },
        }),
        config,
      );
      await runtime.startContainer(id);
      await until(pleg, (e) => e.type === "ContainerStarted" && e.data === id, ctl.signal);
      // Exit at a random point of the relist period, as exits come.
      await new Promise((r) => setTimeout(r, Math.random() * 1_000));
      const exited = performance.now();
      fake.service.exitContainer(id, 1);
      await until(pleg, (e) => e.type === "ContainerDied" && e.data === id, ctl.signal);
      out.push(performance.now() - exited);
    }
    return out;
  } finally {
    ctl.abort();
    await running;
    connection.close();
    await fake.stop();
    await Deno.remove(dir, { recursive: true });
  }
}

async function until(
  pleg: PodLifecycleEventGenerator,
  match: (e: { type: string; data: string }) => boolean,
  signal: AbortSignal,
): Promise<void> {
  while (!match(await pleg.next(signal)));
}

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] ?? NaN;
}

if (import.meta.main) {
  const trials = Number(Deno.args[0] ?? 20);
  console.log(`container exit → ContainerDied event and pod cache, fake CRI, ${trials} trials`);
  console.log("mode      p50 ms   p90 ms   max ms");
  for (const mode of ["evented", "relist"] as const) {
    const ms = (await measure(mode, trials)).sort((a, b) => a - b);
    const f = (n: number) => n.toFixed(1).padStart(8);
    console.log(
      `${mode.padEnd(8)}${f(quantile(ms, 0.5))} ${f(quantile(ms, 0.9))} ${f(ms.at(-1)!)}`,
    );
  }
}
