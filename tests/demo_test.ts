/**
 * `deno task demo` end to end: it installs what is missing, starts a private containerd, imports
 * the busybox and pause images, starts the agent in standalone mode (with --allow-all)
 * against that containerd, shows the sample static pod's log, and stops both cleanly when
 * DEMO_SECONDS runs out.
 */

import assert from "node:assert/strict";
import { REPO_ROOT } from "./agent_process.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("the demo test", ["containerd", "ctr", "runc"]);

Deno.test({
  name: "demo starts containerd and the agent in standalone mode and stops both",
  ignore: gate.ignore,
  sanitizeResources: false,
  async fn() {
    gate.check();
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["task", "demo"],
      cwd: REPO_ROOT,
      env: { DEMO_SECONDS: "12", NO_COLOR: "1" },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 0, text);
    assert.match(
      text,
      /demo: containerd serves unix:\/\/\/run\/kubelet-ts\/demo\/containerd\.sock/,
    );
    assert.match(
      text,
      /"Container runtime initialized" containerRuntime="containerd" version="[^"]+" apiVersion="v1"/,
    );
    assert.match(text, /"Started kubelet" nodeName="[^"]+" mode="standalone"/);
    // The sample static pod runs, and its log is read from /var/log/pods.
    assert.match(
      text,
      /demo: the hello pod runs; its log is \/var\/log\/pods\/default_hello-[^/]+\/hello\/\d+\.log/,
    );
    assert.match(text, /demo: pod log: \S+ stdout F hello from kubelet-ts: line 1/);
    assert.match(text, /"Kubelet stopped"/);
    assert.match(text, /demo: stopping containerd/);
  },
});
