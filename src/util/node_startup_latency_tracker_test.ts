import assert from "node:assert/strict";
import { KubeletMetrics } from "../metrics/metrics.ts";
import { FakeClock } from "./clock.ts";
import { bootTimeFromUptime, NodeStartupLatencyTracker } from "./node_startup_latency_tracker.ts";

function setup(bootTimeMs: number | undefined) {
  const clock = new FakeClock(1_000_000);
  const metrics = new KubeletMetrics({ process: false });
  const tracker = new NodeStartupLatencyTracker({ clock, metrics, bootTimeMs });
  const values = () => [
    metrics.nodeStartupPreKubelet.get(),
    metrics.nodeStartupPreRegistration.get(),
    metrics.nodeStartupRegistration.get(),
    metrics.nodeStartupPostRegistration.get(),
    metrics.nodeStartup.get(),
  ];
  return { clock, tracker, values };
}

Deno.test("node start-up: each step once, boot to Ready in total", () => {
  const { clock, tracker, values } = setup(400_000);
  clock.step(500);
  tracker.recordAttemptRegisterNode();
  clock.step(250);
  tracker.recordAttemptRegisterNode(); // a retry: the first attempt counts
  tracker.recordNodeReady(); // not registered yet: nothing
  assert.deepEqual(values(), [0, 0, 0, 0, 0]);
  clock.step(100);
  tracker.recordRegisteredNewNode();
  assert.deepEqual(values(), [600, 0.5, 0.35, 0, 0]);
  clock.step(2_000);
  tracker.recordNodeReady();
  clock.step(9_000);
  tracker.recordNodeReady(); // later Ready reports change nothing
  tracker.recordRegisteredNewNode();
  assert.deepEqual(values(), [600, 0.5, 0.35, 2, 602.85]);
});

Deno.test("node start-up: a Node that existed is no registration; no boot time, no boot figures", () => {
  const existed = setup(400_000);
  existed.tracker.recordAttemptRegisterNode();
  existed.tracker.recordNodeReady();
  assert.deepEqual(existed.values(), [0, 0, 0, 0, 0]);
  const noBoot = setup(undefined);
  noBoot.tracker.recordAttemptRegisterNode();
  noBoot.clock.step(1_000);
  noBoot.tracker.recordRegisteredNewNode();
  noBoot.tracker.recordNodeReady();
  assert.deepEqual(noBoot.values(), [0, 0, 1, 0, 0]);
});

Deno.test("boot time: now minus whole seconds of uptime, truncated to the second", () => {
  assert.equal(bootTimeFromUptime("20351.84 40000.12\n", 1_765_000_000_700), 1_764_979_649_000);
  assert.equal(bootTimeFromUptime("", 1), undefined);
  assert.equal(bootTimeFromUptime("garbage", 1), undefined);
});
