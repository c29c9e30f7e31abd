/**
 * @module
 * Smoke test of the containerd harness: a private containerd starts in a temp dir, answers
 * `ctr version`, and is gone after stop(). Needs root and containerd; without them it is
 * skipped loudly, or fails when CI=true (CI must not pass by skipping).
 */

import assert from "node:assert/strict";
import { startContainerd } from "./containerd_harness.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("containerd harness tests", ["containerd", "ctr", "runc"]);

function isAlive(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    // A zombie (state Z) has exited but is not reaped yet.
    return !/^\d+ \(.*\) Z /.test(stat);
  } catch {
    return false;
  }
}

async function ctrVersion(socket: string): Promise<Deno.CommandOutput> {
  return await new Deno.Command("ctr", {
    args: ["--address", socket, "--connect-timeout", "1s", "--timeout", "5s", "version"],
    stdout: "piped",
    stderr: "piped",
  }).output();
}

Deno.test({
  name: "startContainerd serves ctr version and stop removes the process",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    const dir = await Deno.makeTempDir({ prefix: "containerd-harness-" });
    try {
      const containerd = await startContainerd({ dir, signal: AbortSignal.timeout(120_000) });
      try {
        assert.equal(containerd.endpoint, `unix://${dir}/containerd.sock`);
        assert.ok(isAlive(containerd.pid), "containerd runs after start");

        const out = await ctrVersion(containerd.socket);
        const text = new TextDecoder().decode(out.stdout);
        assert.ok(out.success, `ctr version failed: ${new TextDecoder().decode(out.stderr)}`);
        assert.match(text, /Server:\s+Version:\s+\S+/);

        const config = await Deno.readTextFile(containerd.configFile);
        assert.match(config, /restrict_oom_score_adj = true/);
        assert.match(config, /sandbox_image = "registry\.k8s\.io\/pause:3\.6"/);
      } finally {
        await containerd.stop();
      }
      assert.ok(!isAlive(containerd.pid), "containerd is gone after stop()");
      await containerd.stop(); // idempotent
      assert.ok(!(await ctrVersion(containerd.socket)).success, "socket no longer answers");
      assert.match(await Deno.readTextFile(containerd.logFile), /containerd successfully booted/);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "startContainerd refuses a socket another containerd already serves",
  ignore: gate.ignore,
  async fn() {
    gate.check();
    const dir = await Deno.makeTempDir({ prefix: "containerd-harness-" });
    try {
      await using first = await startContainerd({ dir: `${dir}/a`, socket: `${dir}/c.sock` });
      await assert.rejects(
        startContainerd({ dir: `${dir}/b`, socket: first.socket }),
        /another containerd already serves/,
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
