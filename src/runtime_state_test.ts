import assert from "node:assert/strict";
import { FakeClock } from "./util/clock.ts";
import { aggregate, formatCondition, RuntimeState } from "./runtime_state.ts";

const ready = (type: string) => ({ type, status: true, reason: "", message: "" });

Deno.test("RuntimeState reports no sync yet, then ready, then down after 30s without Status", () => {
  const clock = new FakeClock(1_000_000);
  const s = new RuntimeState(clock);
  assert.equal(s.runtimeErrors(), "container runtime status check may not have completed yet");
  assert.equal(s.networkErrors(), "network state unknown");
  s.recordStatus([ready("RuntimeReady"), ready("NetworkReady")]);
  assert.equal(s.runtimeErrors(), undefined);
  assert.equal(s.networkErrors(), undefined);
  clock.step(29_999);
  assert.equal(s.runtimeErrors(), undefined);
  clock.step(1);
  assert.equal(s.runtimeErrors(), "container runtime is down");
});

Deno.test("RuntimeState.recordStatus words unready conditions as upstream", () => {
  const s = new RuntimeState(new FakeClock(5));
  const r = s.recordStatus([
    { type: "RuntimeReady", status: false, reason: "Boom", message: "runtime broke" },
    {
      type: "NetworkReady",
      status: false,
      reason: "NetworkPluginNotReady",
      message: "cni plugin not initialized",
    },
  ]);
  assert.deepEqual(r, { runtimeReady: false, networkReady: false });
  assert.equal(
    s.networkErrors(),
    "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:cni plugin not initialized",
  );
  assert.equal(
    s.runtimeErrors(),
    "[container runtime status check may not have completed yet, container runtime not ready: RuntimeReady=false reason:Boom message:runtime broke]",
  );
  s.recordStatus([]);
  assert.match(s.runtimeErrors() ?? "", /container runtime not ready: <nil>/);
});

Deno.test("RuntimeState health checks join the runtime errors", () => {
  const clock = new FakeClock(5);
  const s = new RuntimeState(clock);
  s.recordStatus([ready("RuntimeReady"), ready("NetworkReady")]);
  let healthy = true;
  s.addHealthCheck("PLEG", () => (healthy ? undefined : "pleg was last seen active 3m0s ago"));
  assert.equal(s.runtimeErrors(), undefined);
  healthy = false;
  assert.equal(s.runtimeErrors(), "PLEG is not healthy: pleg was last seen active 3m0s ago");
});

Deno.test("formatCondition and aggregate print as upstream", () => {
  assert.equal(formatCondition(undefined), "<nil>");
  assert.equal(aggregate([]), undefined);
  assert.equal(aggregate(["a"]), "a");
  assert.equal(aggregate(["a", "b"]), "[a, b]");
});

Deno.test("RuntimeState keeps the pod CIDR the runtime accepted, empty before any", () => {
  const s = new RuntimeState(new FakeClock(5));
  assert.equal(s.podCIDR(), "");
  s.setPodCIDR("10.244.1.0/24");
  assert.equal(s.podCIDR(), "10.244.1.0/24");
});
