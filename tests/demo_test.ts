/**
 * `deno task demo` end to end: it installs what is missing, starts a private containerd, imports
 * the busybox and pause images, starts the agent in standalone mode (with --allow-all)
 * against that containerd, shows the sample static pod's log, and stops both cleanly once the pod
 * has run for DEMO_SECONDS. While it runs, the ctr and crictl commands it prints must show the
 * pod; once it has stopped, what it says it leaves must be there.
 */

import assert from "node:assert/strict";
import { REPO_ROOT } from "./agent_process.ts";
import { requireRoot } from "./requirements.ts";
import { exists } from "./child_process.ts";

const gate = await requireRoot("the demo test", ["containerd", "ctr", "runc"]);

/** How long the demo may take to get the pod running (packages, images, containerd, agent). */
const POD_START_BOUND_MS = 300_000;

/** Everything a stream has given so far, and the end of it. */
function collect(stream: ReadableStream<Uint8Array>): { text(): string; done: Promise<void> } {
  let text = "";
  const done = stream.pipeThrough(new TextDecoderStream()).pipeTo(
    new WritableStream({ write: (chunk) => void (text += chunk) }),
  );
  return { text: () => text, done };
}

/** The first match of `pattern` in `text()`, polled until `ms` have passed or `done` settles. */
async function waitForMatch(
  source: { text(): string; done: Promise<void> },
  pattern: RegExp,
  ms: number,
): Promise<RegExpMatchArray> {
  const end = Date.now() + ms;
  let ended = false;
  source.done.then(() => (ended = true), () => (ended = true));
  for (;;) {
    const match = source.text().match(pattern);
    if (match) return match;
    if (ended || Date.now() > end) {
      throw new Error(
        `the demo did not print ${pattern} ${ended ? "before it ended" : `within ${ms} ms`}; ` +
          `it printed:\n${source.text()}`,
      );
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Runs a command line the demo printed (words split at spaces) and returns its stdout. */
async function runPrinted(line: string): Promise<string> {
  const [program, ...args] = line.split(" ");
  const out = await new Deno.Command(program!, {
    args,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(30_000),
  }).output();
  const dec = new TextDecoder();
  assert.equal(out.code, 0, `'${line}' failed: ${dec.decode(out.stderr)}`);
  return dec.decode(out.stdout);
}

Deno.test({
  name: "demo starts containerd and the agent in standalone mode and stops both",
  ignore: gate.ignore,
  sanitizeResources: false,
  async fn() {
    gate.check();
    const demo = new Deno.Command(Deno.execPath(), {
      args: ["task", "demo"],
      cwd: REPO_ROOT,
      env: { DEMO_SECONDS: "12", NO_COLOR: "1" },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const stdout = collect(demo.stdout);
    const stderr = collect(demo.stderr);
    let passed = false;
    let status: Deno.CommandStatus;
    try {
      // While the pod runs, the commands the demo prints show it.
      const ctr = await waitForMatch(
        stdout,
        /^demo: {3}(ctr --address \/run\/kubelet-ts\/demo\/containerd\.sock -n k8s\.io containers ls)$/m,
        POD_START_BOUND_MS,
      );
      const containers = await runPrinted(ctr[1]!);
      assert.match(containers, /registry\.k8s\.io\/pause:3\.6/, containers);
      assert.match(containers, /docker\.io\/library\/busybox:1\.36/, containers);
      const crictl = await waitForMatch(
        stdout,
        /^demo: {3}(\S*crictl --runtime-endpoint unix:\/\/\/run\/kubelet-ts\/demo\/containerd\.sock pods)$/m,
        1_000,
      );
      if (/crictl is not on this machine/.test(stdout.text())) {
        console.warn("demo test: no crictl here, so the crictl command it printed is not run");
      } else {
        const pods = await runPrinted(crictl[1]!);
        assert.match(pods, /\bhello-\S+\s+default\b/, pods);
      }
      passed = true;
    } finally {
      // When something above failed, the demo is stopped as on Ctrl-C; otherwise it stops itself.
      if (!passed) {
        try {
          demo.kill("SIGTERM");
        } catch {
          // it has exited already
        }
      }
      status = await demo.status;
      await stdout.done;
      await stderr.done;
    }
    const text = stdout.text() + stderr.text();
    assert.equal(status.code, 0, text);
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
    // DEMO_SECONDS counts from the pod's start: set-up came before it, and the pod (a line every
    // 5 s) had the 12 s to print its second line.
    const clock = text.indexOf(
      "demo: the agent is up and the hello pod runs; stopping in DEMO_SECONDS=12 s",
    );
    assert.ok(clock > text.indexOf("demo: the hello pod runs; its log is "), text);
    assert.ok(clock > text.indexOf("demo: imported "), text);
    assert.ok(text.indexOf("demo: DEMO_SECONDS=12 elapsed, stopping") > clock, text);
    assert.match(text, /demo: pod log: \S+ stdout F hello from kubelet-ts: line 2/);
    assert.match(text, /"Kubelet stopped"/);
    assert.match(text, /demo: stopping containerd/);
    // What it says it leaves is there.
    const leaves = text.slice(text.indexOf("demo: this run leaves on this machine:"));
    assert.match(leaves, /^demo: this run leaves on this machine:/, text);
    assert.match(
      leaves,
      /demo: {3}packages: none installed by this run|demo: {3}packages this run/,
    );
    assert.match(
      leaves,
      /demo: {3}its containerd's .* in \/var\/lib\/kubelet-ts-demo\/containerd, with the images docker\.io\/library\/busybox:1\.36 and registry\.k8s\.io\/pause:3\.6 it imported/,
    );
    for (
      const path of [
        "/var/lib/kubelet-ts-demo",
        "/run/kubelet-ts/demo",
        "/etc/kubernetes/kubelet-demo.yaml",
        "/etc/kubernetes/manifests-demo",
        `${REPO_ROOT}.cache/images`,
        "/var/lib/kubelet",
      ]
    ) {
      const mentioned = new RegExp(` ${path.replaceAll(".", "\\.")}(?=[ ,;)]|$)`, "m");
      assert.match(leaves, mentioned, `the demo does not say it leaves ${path}`);
      assert.ok(await exists(path), `the demo says it leaves ${path}, but it is not there`);
    }
  },
});
