/**
 * Pod density on the fake CRI: 110 pods (upstream's default maxPods), each with three exec
 * probes at 1 s, given to the real pod lifecycle at once (src/testing/pod_density.ts builds it).
 * Prints, per pod, the time from the ADD to the container's Started event and to the status
 * manager's status showing every container running (p50, p99, max), the time until the last
 * pod got there, the memory of this process before and after (exact heap figures with
 * `--v8-flags=--expose-gc`), and, with 110 running pods over 10 s, the CPU time per second of
 * the sync loop, pod workers, PLEG, prober and updateRuntimeUp, with the CRI calls per second
 * they make. Then `deno bench` times one PLEG relist of the 110 running pods. The benchmark
 * suite (tests/bench_suite.ts) runs the same lifecycle at larger scale.
 */

import { gc, percentile, startPodDensity } from "./pod_density.ts";

const PODS = 110;
const SETTLE_MS = 2_000;
const STEADY_MS = 10_000;

const ms = (v: number) => `${v.toFixed(0)} ms`;
const pause = (t: number) => new Promise((r) => setTimeout(r, t));

const density = await startPodDensity({ pods: PODS, probes: true });
try {
  const { start } = density;
  await pause(SETTLE_MS);
  const steady = await density.steady(STEADY_MS);
  const memorySteady = density.memory();
  // The same window with every probe worker stopped: the difference is the prober's cost.
  density.stopProbes();
  await pause(SETTLE_MS);
  const noProbe = await density.steady(STEADY_MS);
  const callRates = Object.entries(steady.callsPerSecond)
    .sort((a, b) => b[1] - a[1])
    .map(([rpc, rate]) => `${rpc} ${rate.toFixed(1)}`);
  console.log(
    [
      "",
      `pod_density_bench: ${PODS} pods on the fake CRI, standalone (PodConfig → SyncLoop → ` +
      "PodWorkers → KubeRuntimeManager; PLEG → PodCache; StatusManager)",
      `  ADD → container started (the runtime manager's Started event), per pod: p50 ${
        ms(percentile(start.started, 50))
      }, p99 ${ms(percentile(start.started, 99))}, max ${ms(percentile(start.started, 100))}`,
      `  ADD → status shows the container running, per pod: p50 ${
        ms(percentile(start.running, 50))
      }, p99 ${ms(percentile(start.running, 99))}, max ${ms(percentile(start.running, 100))}`,
      `  ADD → all ${PODS} pods running: ${ms(percentile(start.running, 100))}`,
      `  memory of this process (${
        gc ? "after gc()" : "no gc() first: run with --v8-flags=--expose-gc for exact heap figures"
      }):`,
      `  memory before the lifecycle: ${start.memoryBefore}`,
      `  memory with 0 pods:          ${start.memoryIdle}`,
      `  memory with ${PODS} pods:        ${start.memoryRunning}`,
      `  memory after ${STEADY_MS / 1000} s steady:    ${memorySteady}`,
      `  steady state over ${steady.seconds.toFixed(1)} s with ${PODS} running pods: CPU ${
        steady.cpuMsPerSecond.toFixed(1)
      } ms/s (${(steady.cpuMsPerSecond / 10).toFixed(1)} % of a core: user ${
        steady.userMsPerSecond.toFixed(1)
      }, system ${steady.systemMsPerSecond.toFixed(1)}), ${
        steady.iterationsPerSecond.toFixed(1)
      } sync loop iterations/s`,
      `  CRI calls/s: ${callRates.join(", ") || "none"}; fake runtime process CPU ${
        Number.isFinite(steady.fakeCpuMsPerSecond)
          ? `${steady.fakeCpuMsPerSecond.toFixed(1)} ms/s`
          : "n/a"
      }`,
      `  the prober (${PODS * 3} exec probes at 1 s): ${
        (steady.cpuMsPerSecond - noProbe.cpuMsPerSecond).toFixed(1)
      } ms/s of CPU (${steady.cpuMsPerSecond.toFixed(1)} ms/s with the probes, ${
        noProbe.cpuMsPerSecond.toFixed(1)
      } ms/s after stopping them)`,
      `  log lines written: ${density.logLines()}, errors while the pods ran: ${density.errors.length}`,
      "",
    ].join("\n"),
  );
  if (density.errors.length > 0) {
    console.warn(`errors logged:\n${density.errors.slice(-10).join("\n")}`);
  }
} catch (e) {
  await density.close();
  throw e;
}

Deno.bench(`PLEG relist of ${PODS} running pods, nothing changed`, async () => {
  await density.relist();
});

// Deno.bench has no after-all hook; a last bench run exactly once stops the fake runtime.
Deno.bench({
  name: "(teardown: stop the fake runtime)",
  group: "teardown",
  n: 1,
  warmup: 0,
  async fn() {
    await density.close();
  },
});
