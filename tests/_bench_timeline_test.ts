import assert from "node:assert/strict";
import { breakdownTable, stepDurations, STEPS, type TimelinePhase } from "./_bench_timeline.ts";
import { FULL, parseBenchArgs, SHORT, USAGE, withOverrides } from "./bench_suite.ts";

const T0 = Date.parse("2026-12-03T10:00:00.000Z");
const at = (ms: number) => new Date(T0 + ms).toISOString();

const PHASES: TimelinePhase[] = [
  { phase: "seen", time: at(40) },
  { phase: "admitted", time: at(41) },
  { phase: "volumesReady", time: at(45) },
  { phase: "sandboxCreated", time: at(300) },
  { phase: "imagePulled", container: "a", time: at(302) },
  { phase: "containerCreated", container: "a", time: at(350) },
  { phase: "containerStarted", container: "a", time: at(400) },
  { phase: "imagePulled", container: "b", time: at(410) },
  { phase: "containerCreated", container: "b", time: at(450) },
  { phase: "containerStarted", container: "b", time: at(500) },
  { phase: "running", time: at(520) },
  { phase: "statusWritten", time: at(565) },
];

Deno.test("stepDurations splits a timeline bracketed by the bench's times, last container deciding", () => {
  const d = stepDurations(PHASES, T0, T0 + 600);
  assert.deepEqual(Object.fromEntries(d), {
    sent: 40,
    seen: 1,
    admitted: 4,
    volumesReady: 255,
    sandboxCreated: 110,
    imagePulled: 40,
    containerCreated: 50,
    containerStarted: 20,
    running: 45,
    statusWritten: 35,
  });
  // The steps add up to the client latency.
  assert.equal([...d.values()].reduce((a, b) => a + b, 0), 600);
});

Deno.test("stepDurations leaves out steps whose ends are missing", () => {
  const d = stepDurations(PHASES.filter((p) => p.phase !== "sandboxCreated"), T0, T0 + 600);
  assert.equal(d.has("volumesReady"), false);
  assert.equal(d.has("sandboxCreated"), false);
  assert.equal(d.get("seen"), 1);
});

Deno.test("breakdownTable has one row per step with its count and percentiles", () => {
  const pods = [stepDurations(PHASES, T0, T0 + 600), new Map([["sent", 10]])];
  const lines = breakdownTable(pods).split("\n");
  assert.equal(lines.length, STEPS.length + 2);
  assert.match(lines[2]!, /create request sent → kubelet saw the pod \|\s+2 \|\s+10 ms \|\s+40 ms/);
  assert.match(lines[5]!, /volumes ready → sandbox created\s+\|\s+1 \|\s+255 ms/);
});

Deno.test("withOverrides replaces the counts it is given and names a bad flag value", () => {
  const m = withOverrides(FULL, {
    bursts: "110",
    sequential: "0",
    "window-s": "30",
    "fake-pods": "",
    "probe-period": "0",
  });
  assert.deepEqual(m, {
    name: "full",
    sequential: 0,
    bursts: [110],
    windowMs: 30_000,
    fakePods: [],
    probePeriodS: 0,
  });
  // The cases: 50 pods one at a time, bursts up to 250, probed pods.
  assert.deepEqual([FULL.sequential, FULL.bursts, FULL.probePeriodS], [50, [30, 110, 250], 10]);
  assert.deepEqual(withOverrides(FULL, {}), FULL);
  assert.throws(
    () => withOverrides(FULL, { bursts: "30,x" }),
    /--bursts must be an integer of at least 1: current value is 'x'/,
  );
  assert.throws(() => withOverrides(FULL, { "window-s": "0" }), /--window-s .* '0'/);
  assert.throws(
    () => withOverrides(FULL, { "probe-period": "-1" }),
    /--probe-period must be an integer of at least 0: current value is '-1'/,
  );
});

Deno.test("parseBenchArgs: the mode, the agents, --help, and errors that name the option", () => {
  const a = parseBenchArgs(["--short", "--agents", "agent", "--bursts", "", "--out", "/tmp/r.md"]);
  assert.equal(a.help, false);
  assert.deepEqual(a.mode, { ...SHORT, bursts: [] });
  assert.deepEqual(a.agents, ["agent"]);
  assert.equal(a.out, "/tmp/r.md");
  assert.deepEqual(parseBenchArgs([], { short: true }).mode, SHORT, "KUBELET_TS_BENCH=short");
  assert.deepEqual(parseBenchArgs([]).agents, ["agent", "upstream"]);
  assert.equal(parseBenchArgs(["--help"]).help, true);
  assert.match(USAGE, /--fake-pods A,B/);
  assert.match(USAGE, /--probe-period S/);
  assert.equal(parseBenchArgs(["--probe-period", "3"]).mode.probePeriodS, 3);
  assert.throws(() => parseBenchArgs(["--window", "5"]), /Unknown option '--window'/);
  assert.throws(() => parseBenchArgs(["--out"]), /--out/);
  assert.throws(
    () => parseBenchArgs(["--agents", "agent,go"]),
    /--agents must list some of 'agent', 'agent-relist', 'agent-release', 'upstream': current value is 'go'/,
  );
});

Deno.test("parseBenchArgs: --agents with the relisting variant, --runtime and its default", () => {
  const a = parseBenchArgs(["--agents", "agent,agent-relist,upstream", "--runtime", "containerd2"]);
  assert.deepEqual(a.agents, ["agent", "agent-relist", "upstream"]);
  assert.equal(a.runtime, "containerd2");
  assert.equal(parseBenchArgs([]).runtime, "containerd");
  assert.equal(parseBenchArgs([], { runtime: "containerd2" }).runtime, "containerd2");
  assert.equal(
    parseBenchArgs(["--runtime", "containerd"], { runtime: "containerd2" }).runtime,
    "containerd",
    "the flag over KUBELET_TS_RUNTIME",
  );
  assert.throws(
    () => parseBenchArgs(["--runtime", "crio"]),
    /--runtime must be 'containerd' .* or 'containerd2' .*: current value is 'crio'/,
  );
  assert.match(USAGE, /--runtime NAME/);
  assert.match(USAGE, /agent-relist/);
  assert.deepEqual(parseBenchArgs(["--agents", "agent,agent-release"]).agents, [
    "agent",
    "agent-release",
  ]);
  assert.match(USAGE, /agent-release \(ours from the release file/);
});
