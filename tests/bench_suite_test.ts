/**
 * @module
 * The benchmark suite's short mode runs end to end and prints the comparison: `deno task bench
 * --short` (tests/bench_suite.ts) against this agent and the upstream kubelet, with every table
 * holding a row for both. It checks that the suite works, not how fast anything is: the figures
 * themselves are benchmarks, recorded in bench/results/, never asserted.
 */

import assert from "node:assert/strict";
import { STEPS } from "./_bench_timeline.ts";
import { REPO_ROOT } from "./agent_process.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("the benchmark suite", [
  "containerd",
  "ctr",
  "runc",
  "openssl",
  "go",
]);

Deno.test({
  name: "bench suite --short prints the comparison table with both kubelets",
  ignore: gate.ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    gate.check();
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["task", "--quiet", "bench", "--short"],
      cwd: REPO_ROOT,
      env: { NO_COLOR: "1" },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
    const dec = new TextDecoder();
    const stdout = dec.decode(out.stdout);
    const stderr = dec.decode(out.stderr);
    assert.equal(
      out.code,
      0,
      `deno task bench --short exited ${out.code}:\n${stderr.slice(-8000)}`,
    );
    const row = (label: string) =>
      new RegExp(`^\\| ${label}\\s+\\|\\s+\\d+\\s+\\|\\s+\\d+ ms \\|`, "m");
    for (const who of ["CRI floor", "agent", "upstream"]) {
      assert.match(stdout, row(`1 pod × 5 sequential: ${who}`), stdout);
      assert.match(stdout, row(`burst of 10: ${who}`), stdout);
    }
    // The floor again with our agent's default pacing of RunPodSandbox.
    const paced = 4 * navigator.hardwareConcurrency;
    assert.match(stdout, row(`burst of 10: CRI floor, ≤${paced} sandbox starts at once`), stdout);
    assert.match(
      stdout,
      /^\| 0 pods\s+\|\s+[\d.]+ MiB \|\s+\d+\.\d m \|\s+[\d.]+ MiB \|\s+\d+\.\d m \|/m,
    );
    assert.match(
      stdout,
      /^\| 0 pods, first 10 s after Ready\s+\|\s+[\d.]+ MiB \|\s+\d+\.\d m \|\s+[\d.]+ MiB \|/m,
    );
    assert.match(stdout, /^\| 10 pods\s+\|\s+[\d.]+ MiB \|/m);
    assert.match(
      stdout,
      /Kubelets: agent = kubelet-ts reporting v1\.36\.3\S*, upstream = Go kubelet reporting v1\.36\.3/,
    );
    assert.match(stdout, /^\| 200\s+\|\s+\d+ ms \|/m, "the fake-CRI scale test row");
    // Every pod of the burst has every step of our agent's timeline.
    assert.match(stdout, /^### Where our agent's time goes, 1 pod × 5 sequential/m);
    // Both kubelets' CRI timings of the sequential pods: one sandbox and one container each.
    assert.match(
      stdout,
      /^\| run_podsandbox\s+\|\s+1\.0 \|\s+[\d.]+ ms \|\s+1\.0 \|\s+[\d.]+ ms \|$/m,
    );
    assert.doesNotMatch(stdout, /\/metrics not read/);
    assert.match(stdout, /^### Where our agent's time goes, burst of 10/m);
    for (const [from, what] of STEPS) {
      // The steps around the accepted write: a pod's timeline can lack it, and the watch can
      // show the write before the kubelet reads the answer (a negative step).
      const around = from === "running" || from === "statusWritten";
      const n = around ? "\\d+" : "10";
      assert.match(stdout, new RegExp(`^\\| ${what}\\s+\\| ${n} \\|\\s+-?\\d+ ms \\|`, "m"));
    }
    // CPU while the burst started: containerd under the floor (all at once, then paced), then
    // kubelet and containerd under each agent, each with the machine's busy share; and the
    // busiest processes by name.
    assert.match(
      stdout,
      /^\| burst of 10 \|(\s+[\d.]+ s \|\s+\d+ % \|){2}(\s+[\d.]+ s \|\s+[\d.]+ s \|\s+\d+ % \|){2}$/m,
      stdout,
    );
    assert.match(stdout, /^- burst of 10, agent, CPU by process: .*\bcontainerd [\d.]+ s/m);
    // The kubelets' own share above the floor, at p50 and p99.
    assert.match(stdout, /^\| burst of 10, p99 +\| +\d+ ms \| +-?\d+ ms \| +-?\d+ ms \| /m);
    // At steady state with the burst running: API writes, relists, the probes' lateness, both.
    const num = "[\\d.]+";
    for (const what of ["pod status writes/s", "event writes/s", "all API requests/s"]) {
      assert.match(stdout, new RegExp(`^\\| 10 pods: ${what} +\\| +${num} \\| +${num} \\|$`, "m"));
    }
    assert.match(
      stdout,
      new RegExp(
        `^\\| 10 pods: PLEG relists/s, mean relist +\\|( +${num}, ${num} ms \\|){2}$`,
        "m",
      ),
    );
    // Every pod probed in the 10 s window (a probe every 5 s), by both kubelets.
    assert.match(
      stdout,
      /^\| 10 pods: probes, > 1 period late, pods unprobed +\|( +[1-9]\d*, \d+, 0 \|){2}$/m,
    );
    // The events about the burst's pods the apiserver holds, from each kubelet: none lost.
    assert.match(stdout, /^\| 10 pods: events stored per pod +\|( +[1-9][\d.]* \|){2}$/m);
    assert.match(stdout, /^### Targets/m);
    assert.match(stdout, /^- (met|NOT met): RSS ≤ upstream's at 0 pods/m);
    assert.match(stdout, /^- (met|NOT met): steady CPU ≤ 0.8× upstream's at 10 pods/m);
    assert.match(stdout, /^- (met|NOT met): no probe more than one period late at 10 pods/m);
  },
});
