import assert from "node:assert/strict";
import {
  compareRuns,
  firstLine,
  parseJUnit,
  readResultRows,
  renderComparison,
  renderResults,
  type RowState,
} from "./conformance_report.ts";
import { main } from "./conformance_compare.ts";

const REPORT = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="4" disabled="0" errors="0" failures="1" time="42.5">
  <testsuite name="Kubernetes e2e suite" package="/e2e" tests="4" failures="1" time="42.5">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="1.5"></testcase>
    <testcase name="[sig-node] Pods should get a host IP [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" status="passed" time="4.25">
      <system-err>STEP: creating pod</system-err>
    </testcase>
    <testcase name="[sig-node] Pods should allow activeDeadlineSeconds to be updated [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" status="failed" time="30">
      <failure message="wait for pod &quot;pod-update&quot; to be Failed: timed out&#10;more detail" type="failed">[FAILED] wait ...</failure>
    </testcase>
    <testcase name="[sig-storage] CSI Volumes [Serial]" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
  </testsuite>
</testsuites>`;

Deno.test("parseJUnit reads ginkgo's specs with state, time and message", () => {
  const specs = parseJUnit(REPORT);
  assert.deepEqual(specs.map((s) => [s.state, s.seconds]), [
    ["passed", 1.5],
    ["passed", 4.25],
    ["failed", 30],
    ["skipped", 0],
  ]);
  assert.equal(
    specs[2]!.message,
    'wait for pod "pod-update" to be Failed: timed out\nmore detail',
  );
  assert.equal(
    specs[1]!.name,
    "[sig-node] Pods should get a host IP [NodeConformance] [Conformance]",
  );
});

Deno.test("renderResults lists failures first and counts what ran", () => {
  const text = renderResults({
    agent: "agent",
    runtime: "containerd 1.6.20",
    focus: "\\[Conformance\\]",
    skip: "\\[Serial\\]",
    started: "2026-12-06T05:00:00Z",
    wallSeconds: 42.5,
    commit: "abc1234",
    images: new Map([["registry.k8s.io/e2e-test-images/busybox:1.37.0-1", "stand-in: Debian's"]]),
    command: "deno task conformance",
  }, parseJUnit(REPORT));
  // The suite node is not a spec: 1 passed, not 2.
  assert.match(text, /\*\*1 passed, 1 failed\*\* \(1 specs of the suite not run\)/);
  const rows = text.split("\n").filter((l) => /^\| (passed|failed) /.test(l));
  assert.equal(rows.length, 2);
  assert.match(
    rows[0]!,
    /^\| failed \| 30\.0 \| \[sig-node\] Pods should allow activeDeadlineSeconds/,
  );
  assert.match(rows[0]!, /\| wait for pod "pod-update" to be Failed: timed out \|$/);
  assert.match(
    text,
    /\| `registry.k8s.io\/e2e-test-images\/busybox:1.37.0-1` \| stand-in: Debian's \|/,
  );
});

Deno.test("renderResults names the registry the specs pull from when there is one", () => {
  const setup = {
    agent: "agent",
    runtime: "containerd 2.4.2",
    focus: "ImageVolume",
    skip: "",
    started: "2026-12-06T05:00:00Z",
    wallSeconds: 1,
    commit: "abc1234",
    images: new Map<string, string>(),
    command: "deno task conformance",
  };
  assert.doesNotMatch(renderResults(setup, []), /registry:/);
  const text = renderResults({ ...setup, registry: "registry.k8s.io is a local | registry" }, []);
  assert.match(text, /^- registry: registry\.k8s\.io is a local \\\| registry$/m);
});

Deno.test("firstLine skips blank lines and shortens long ones", () => {
  assert.equal(firstLine("\n\n  boom\nmore"), "boom");
  assert.equal(firstLine("x".repeat(300)).length, 200);
  assert.equal(firstLine(""), "");
});

Deno.test("readResultRows reads the spec rows back, later files replacing earlier rows", () => {
  const run = renderResults(SETUP_FOR_ROWS, [
    { name: "[sig-a] one | with a bar", state: "passed", seconds: 1, message: "" },
    { name: "[sig-a] two", state: "failed", seconds: 2, message: "x | y\nmore" },
    { name: "[sig-a] three", state: "skipped", seconds: 0, message: "" },
  ]);
  const rerun = renderResults(SETUP_FOR_ROWS, [
    { name: "[sig-a] two", state: "passed", seconds: 2, message: "" },
  ]);
  assert.deepEqual([...readResultRows(run)], [
    ["[sig-a] two", "failed"],
    ["[sig-a] one | with a bar", "passed"],
  ]);
  assert.deepEqual(readResultRows(run, rerun).get("[sig-a] two"), "passed");
  assert.equal(readResultRows("| result | seconds | spec | failure |\n| x | 1 | a | |").size, 0);
  // One file naming a spec twice would let a row hide another.
  assert.throws(() => readResultRows(`${rerun}\n${rerun}`), /lists '\[sig-a\] two' twice/);
});

Deno.test("compareRuns names what passed with the reference and not with the candidate", () => {
  const ref = new Map(
    [["a", "passed"], ["b", "passed"], ["c", "failed"], ["d", "failed"], ["f", "failed"]] as const,
  );
  const got = new Map(
    [["a", "passed"], ["b", "failed"], ["c", "passed"], ["d", "failed"], ["e", "passed"]] as const,
  );
  const c = compareRuns(got, ref);
  assert.deepEqual(c, {
    regressions: ["b"],
    improvements: ["c"],
    bothFailed: ["d"],
    referenceFailedOnly: ["f"],
    bothPassed: 1,
    candidateOnly: ["e"],
  });
  const text = renderComparison(c, { candidate: "ours", reference: "Go" });
  assert.match(text, /^- passed with Go, not with ours: \*\*1\*\*$/m);
  assert.match(text, /^### Passed with Go, not with ours \(1\)\n\n- b$/m);
  // A spec the candidate did not run counts against it.
  assert.deepEqual(compareRuns(new Map(), ref).regressions, ["a", "b"]);
});

const SETUP_FOR_ROWS = {
  agent: "agent",
  runtime: "containerd 1.6.20",
  focus: "x",
  skip: "y",
  started: "2026-12-07T00:00:00Z",
  wallSeconds: 1,
  commit: "abc",
  images: new Map<string, string>(),
  command: "deno task conformance",
};

/** The rows of a kubeadm-topology record of 2026-12-07 (`agent` or `upstream`, then a suffix). */
async function readKubeadmRecord(name: string): Promise<Map<string, RowState>> {
  return readResultRows(
    await Deno.readTextFile(
      new URL(
        `./results/conformance-2026-12-07-kubeadm-containerd-1.6.20-${name}.md`,
        import.meta.url,
      ),
    ),
  );
}

Deno.test("compareRuns of the kubeadm records finds nothing passing with Go only", async () => {
  // The records docs/status.md and README cite: the [Conformance] suite without [Serial] and
  // [Disruptive] on the two-node kubeadm cluster, both kubelets, 2026-12-07.
  const upstream = await readKubeadmRecord("upstream");
  const ours = await readKubeadmRecord("agent");
  assert.equal(upstream.size, 417);
  assert.equal(ours.size, 417);
  const c = compareRuns(ours, upstream);
  assert.deepEqual(c.regressions, []);
  assert.equal(c.bothPassed, 415);
  assert.deepEqual(c.bothFailed.map((s) => s.replace(/^\[It\] \[[\w-]+\] (\w+).*$/, "$1")), [
    "Aggregator",
    "ImageVolume",
  ]);
});

Deno.test("compareRuns of the kubeadm [Serial] records finds all 29 passing with both kubelets", async () => {
  // The rest of the [Conformance] suite on the same cluster: the specs the run above skipped.
  const upstream = await readKubeadmRecord("upstream-serial");
  const ours = await readKubeadmRecord("agent-serial");
  for (const rows of [ours, upstream]) {
    assert.equal(rows.size, 29);
    assert.ok([...rows.keys()].every((s) => s.includes("[Serial]") && s.includes("[Conformance]")));
    assert.equal([...rows.keys()].filter((s) => s.includes("[Disruptive]")).length, 2);
  }
  const c = compareRuns(ours, upstream);
  assert.deepEqual(c.regressions, []);
  assert.equal(c.bothPassed, 29);
  // With the run above: every [Conformance] spec of v1.36 the harness lists, none twice.
  const all = new Set([...(await readKubeadmRecord("agent")).keys(), ...ours.keys()]);
  assert.equal(all.size, 417 + 29);
});

Deno.test("conformance-compare exits 0 without regressions, 1 with, 2 on bad usage", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const write = async (name: string, state: "passed" | "failed") => {
      const file = `${dir}/${name}.md`;
      await Deno.writeTextFile(
        file,
        renderResults(SETUP_FOR_ROWS, [{ name: "[sig-a] one", state, seconds: 1, message: "" }]),
      );
      return file;
    };
    const passed = await write("passed", "passed");
    const failed = await write("failed", "failed");
    const quiet = { log: console.log, error: console.error };
    console.log = console.error = () => {};
    try {
      assert.equal(await main(["--ours", passed, "--upstream", passed]), 0);
      assert.equal(await main(["--ours", failed, "--upstream", passed]), 1);
      // A rerun replaces the first run's row.
      assert.equal(await main(["--ours", failed, "--ours", passed, "--upstream", passed]), 0);
      assert.equal(await main([passed, passed]), 2);
      assert.equal(await main(["--ours", passed]), 2);
      assert.equal(await main(["--ours", `${dir}/absent.md`, "--upstream", passed]), 2);
    } finally {
      Object.assign(console, quiet);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
