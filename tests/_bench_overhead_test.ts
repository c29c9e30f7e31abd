import assert from "node:assert/strict";
import { comparedAgent, overheadAt, overheadMet, overheadTable } from "./_bench_overhead.ts";

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

Deno.test("overheadAt subtracts the floor's percentile from each kubelet's", () => {
  const c = {
    what: "burst",
    floor: range(100, 100),
    agent: range(110, 100),
    upstream: range(140, 100),
  };
  assert.deepEqual(overheadAt(c, 50), { floorMs: 149, agentMs: 10, upstreamMs: 40 });
  assert.deepEqual(overheadAt(c, 99), { floorMs: 198, agentMs: 10, upstreamMs: 40 });
  assert.ok(overheadMet(overheadAt(c, 50), 0.5));
  assert.ok(!overheadMet({ floorMs: 1, agentMs: 21, upstreamMs: 40 }, 0.5));
  // Upstream at or under the floor: ours must not be above it.
  assert.ok(overheadMet({ floorMs: 1, agentMs: -3, upstreamMs: -1 }, 0.5));
  assert.ok(!overheadMet({ floorMs: 1, agentMs: 1, upstreamMs: -1 }, 0.5));
});

Deno.test("overheadTable prints p50 and p99 rows with the ratio", () => {
  const text = overheadTable([
    { what: "burst of 250", floor: [1000], agent: [1100], upstream: [1400] },
    { what: "1 pod × 50", floor: [100], agent: [90], upstream: [100] },
    { what: "burst of 110", floor: [1000], agent: [900], upstream: [1500] },
  ]);
  assert.match(text, /\| burst of 110, p50 +\| +1000 ms \| +-100 ms \| +500 ms \| +< 0 \|/);
  assert.match(text, /\| burst of 250, p50 \| +1000 ms \| +100 ms \| +400 ms \| +0\.25× \|/);
  assert.match(text, /\| 1 pod × 50, p99 +\| +100 ms \| +-10 ms \| +0 ms \| +n\/a \|/);
});

Deno.test("comparedAgent takes the checkout's agent, else the release file's, never upstream", () => {
  const of = (...labels: string[]) => comparedAgent(labels.map((label) => ({ label })))?.label;
  assert.equal(of("agent", "agent-release", "upstream"), "agent");
  assert.equal(of("agent-release", "agent", "upstream"), "agent");
  assert.equal(of("agent-release", "upstream"), "agent-release");
  assert.equal(of("agent-relist", "upstream"), undefined);
  assert.equal(of("upstream"), undefined);
});

Deno.test("overheadTable names our kubelet in its header", () => {
  const cases = [{ what: "burst of 250", floor: [1000], agent: [1100], upstream: [1400] }];
  assert.match(overheadTable(cases), /\| agent − floor \|.*\| agent \/ upstream overhead \|/);
  const text = overheadTable(cases, "agent-release");
  assert.match(text, /\| agent-release − floor \|.*\| agent-release \/ upstream overhead \|/);
});
