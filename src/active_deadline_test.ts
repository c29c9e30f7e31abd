import assert from "node:assert/strict";
import type { V1Pod, V1PodStatus } from "@kubernetes/client-node";
import {
  ActiveDeadlineHandler,
  DEADLINE_EXCEEDED_MESSAGE,
  DEADLINE_EXCEEDED_REASON,
} from "./active_deadline.ts";
import { FakeClock } from "./util/clock.ts";

const START = Date.UTC(2026, 0, 1, 12, 0, 0);

function setup(statuses: Map<string, V1PodStatus> = new Map()) {
  const clock = new FakeClock(START);
  const events: string[] = [];
  const handler = new ActiveDeadlineHandler({
    clock,
    recorder: {
      event: (ref, type, reason, message) =>
        events.push(`${ref.name} ${type} ${reason} ${message}`),
    },
    podStatus: (uid) => statuses.get(uid),
  });
  return { clock, events, handler };
}

function pod(deadline: number | undefined, startTime?: Date): V1Pod {
  return {
    metadata: { name: "web", namespace: "default", uid: "u-1" },
    spec: { containers: [{ name: "main" }], activeDeadlineSeconds: deadline },
    status: startTime ? { phase: "Running", startTime } : { phase: "Pending" },
  };
}

Deno.test("ActiveDeadlineHandler fails a pod once it has been active for its deadline", () => {
  const { clock, events, handler } = setup();
  const p = pod(5, new Date(START));
  clock.step(4_999);
  assert.equal(handler.shouldSync(p), false);
  assert.deepEqual(handler.shouldEvict(p), { evict: false });
  clock.step(1);
  assert.equal(handler.shouldSync(p), true);
  assert.deepEqual(handler.shouldEvict(p), {
    evict: true,
    reason: DEADLINE_EXCEEDED_REASON,
    message: DEADLINE_EXCEEDED_MESSAGE,
  });
  assert.deepEqual(events, [
    "web Normal DeadlineExceeded Pod was active on the node longer than the specified deadline",
  ]);
});

Deno.test("ActiveDeadlineHandler ignores pods without a deadline or not started", () => {
  const { clock, events, handler } = setup();
  clock.step(3_600_000);
  assert.equal(handler.shouldSync(pod(undefined, new Date(START))), false);
  assert.equal(handler.shouldSync(pod(5)), false, "no startTime yet");
  assert.deepEqual(handler.shouldEvict(pod(5)), { evict: false });
  assert.deepEqual(events, []);
});

Deno.test("ActiveDeadlineHandler reads the start from the status manager before the API's", () => {
  // The kubelet's own status is the latest: the API object may not carry startTime yet.
  const statuses = new Map<string, V1PodStatus>([["u-1", { startTime: new Date(START) }]]);
  const { clock, handler } = setup(statuses);
  clock.step(10_000);
  assert.equal(handler.shouldSync(pod(10)), true);
  // A shortened deadline on a running pod counts from the same start.
  assert.equal(handler.shouldSync(pod(30, new Date(START))), false);
  assert.equal(handler.shouldSync(pod(9, new Date(START))), true);
});
