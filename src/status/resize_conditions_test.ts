import assert from "node:assert/strict";
import { FakeClock } from "../util/clock.ts";
import { PodResizeConditions } from "./resize_conditions.ts";
import { KubeletMetrics } from "../metrics/metrics.ts";

Deno.test("PodResizeConditions: pending reasons other than Infeasible are Deferred", () => {
  const c = new PodResizeConditions(new FakeClock());
  assert.equal(c.setPending("u", "OutOfcpu", "not enough cpu", 2), true);
  assert.equal(c.isDeferred("u"), true);
  assert.equal(c.get("u")[0]?.reason, "Deferred");
  assert.equal(c.get("u")[0]?.message, "not enough cpu");
  // The same reason and generation again is no change; a new generation is.
  assert.equal(c.setPending("u", "OutOfmemory", "not enough memory", 2), false);
  assert.equal(c.setPending("u", "OutOfcpu", "x", 3), true);
  assert.equal(c.setPending("u", "Infeasible", "never", 3), true);
  assert.equal(c.isInfeasible("u"), true);
  assert.deepEqual(c.pendingCounts(), new Map([["infeasible", 1]]));
  c.clearPending("u");
  assert.deepEqual(c.get("u"), []);
});

Deno.test("PodResizeConditions: InProgress keeps its generation, and its reason unless given one", () => {
  const clock = new FakeClock();
  const c = new PodResizeConditions(clock);
  assert.deepEqual(c.setInProgress("u", "", "", 2), { generation: 2, updated: true });
  const first = c.get("u")[0]!;
  clock.step(1000);
  // A later sync of generation 3 does not move it; only clearing does.
  assert.deepEqual(c.setInProgress("u", "", "", 3), { generation: 2, updated: false });
  assert.equal(c.get("u")[0]?.lastTransitionTime, first.lastTransitionTime);
  assert.notEqual(c.get("u")[0]?.lastProbeTime, first.lastProbeTime);
  assert.deepEqual(c.setInProgress("u", "Error", "boom", 3), { generation: 2, updated: true });
  assert.equal(c.get("u")[0]?.reason, "Error");
  assert.deepEqual(c.setInProgress("u", "", "", 3), { generation: 2, updated: false });
  assert.equal(c.get("u")[0]?.message, "boom");
  assert.deepEqual(c.clearInProgress("u"), { generation: 2 });
  assert.equal(c.clearInProgress("u"), undefined);
});

Deno.test("PodResizeConditions takes the API's conditions after a restart, and forgets pods gone", () => {
  const c = new PodResizeConditions(new FakeClock());
  c.backfill([{
    metadata: { uid: "u" },
    status: {
      conditions: [
        { type: "PodResizePending", status: "True", reason: "Deferred", observedGeneration: 4 },
        { type: "Ready", status: "True" },
      ],
    },
  }]);
  assert.equal(c.isDeferred("u"), true);
  assert.equal(c.get("u")[0]?.observedGeneration, 4);
  c.retain(new Set(["other"]));
  assert.deepEqual(c.get("u"), []);
});

Deno.test("PodResizeConditions keeps kubelet_pod_pending_resizes and kubelet_pod_in_progress_resizes current", async () => {
  const metrics = new KubeletMetrics({ process: false });
  const c = new PodResizeConditions(new FakeClock(), metrics);
  /** In-progress count, then `reason=count` of each pending reason rendered. */
  const rendered = async () =>
    (await metrics.render()).split("\n").flatMap((l) => {
      const m = /^kubelet_pod_(?:pending_resizes\{reason="(\w+)"\}|in_progress_resizes) (\d+)$/
        .exec(l);
      return m ? [m[1] ? `${m[1]}=${m[2]}` : m[2]!] : [];
    }).join(" ");
  assert.equal(await rendered(), "0");
  c.setPending("a", "OutOfcpu", "", 1);
  assert.equal(await rendered(), "0 deferred=1", "by lower-case reason");
  c.setPending("b", "Infeasible", "", 1);
  c.setPending("c", "Infeasible", "", 1);
  assert.equal(await rendered(), "0 deferred=1 infeasible=2");
  c.setInProgress("d", "", "", 1);
  assert.equal(await rendered(), "1 deferred=1 infeasible=2");
  // A reason no pod has any more is gone, not left at its last count.
  c.clearPending("a");
  assert.equal(await rendered(), "1 infeasible=2");
  c.setPending("b", "OutOfmemory", "", 2);
  assert.equal(await rendered(), "1 deferred=1 infeasible=1");
  c.clearInProgress("d");
  assert.equal(await rendered(), "0 deferred=1 infeasible=1");
  c.setInProgress("b", "", "", 2);
  c.retain(new Set(["c"]));
  assert.equal(await rendered(), "0 infeasible=1");
  // After a restart, the conditions the pods carry count again.
  c.backfill([{
    metadata: { uid: "e" },
    status: {
      conditions: [
        { type: "PodResizePending", status: "True", reason: "Deferred" },
        { type: "PodResizeInProgress", status: "True" },
      ],
    },
  }]);
  assert.equal(await rendered(), "1 deferred=1 infeasible=1");
});
