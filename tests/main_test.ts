/**
 * The agent as a process: bad input is one clear line and exit 1 before anything starts; the
 * permission set denies what lies outside it; SIGTERM ends it with exit 0.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { startFakeRuntime } from "../src/testing/fake_remote_runtime.ts";
import { request } from "node:https";
import { errorLines, runAgent, spawnAgent } from "./agent_process.ts";
import { freePort } from "./child_process.ts";

const HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

async function withConfig(
  text: string,
  fn: (file: string, dir: string) => Promise<void>,
): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "kubelet-main-" });
  try {
    const file = join(dir, "kubelet.yaml");
    await Deno.writeTextFile(file, text);
    await fn(file, dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** Asserts exit 1 and one error line that contains every fragment, with no stack trace. */
function assertOneError(r: { code: number; stderr: string }, ...fragments: string[]): void {
  assert.equal(r.code, 1, r.stderr);
  const errors = errorLines(r.stderr);
  assert.equal(errors.length, 1, `expected one error line:\n${r.stderr}`);
  for (const f of fragments) {
    assert.ok(errors[0]?.includes(f), `missing ${JSON.stringify(f)} in:\n${errors[0]}`);
  }
  assert.doesNotMatch(r.stderr, /^\s+at /m, "stack trace printed");
}

Deno.test("main rejects a missing config file, naming it", async () => {
  const r = await runAgent(["--config", "/nonexistent/kubelet.yaml"]);
  assertOneError(r, "/nonexistent/kubelet.yaml", "no such file");
});

Deno.test("main rejects a YAML syntax error with file and line", async () => {
  await withConfig(
    `${HEADER}syncFrequency: 1m\nevictionHard: {memory.available: 100Mi\n`,
    async (file) => {
      const r = await runAgent(["--config", file]);
      assertOneError(r, `${file}:`, "is not valid YAML or JSON");
    },
  );
});

Deno.test("main rejects a wrong apiVersion with file, line, field and value", async () => {
  await withConfig(
    "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n",
    async (file) => {
      const r = await runAgent(["--config", file]);
      assertOneError(
        r,
        `${file}:1`,
        "field 'apiVersion'",
        "'kubelet.config.k8s.io/v1'",
        "kubelet.config.k8s.io/v1beta1",
      );
    },
  );
});

Deno.test("main rejects a wrong kind", async () => {
  await withConfig(
    "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n",
    async (file) => {
      const r = await runAgent(["--config", file]);
      assertOneError(r, `${file}:2`, "field 'kind'", "'KubeProxyConfiguration'");
    },
  );
});

Deno.test("main goes past an unknown field as upstream, logging its path and line", async () => {
  // Upstream decodes leniently when only strictness fails, and says so; the bad value after it
  // still stops the start (and ends this run).
  await withConfig(
    `${HEADER}port: 10250\nauthentication:\n  anonymous:\n    enable: true\n` +
      "imageGCHighThresholdPercent: 150\n",
    async (file) => {
      const r = await runAgent(["--config", file]);
      assertOneError(r, `${file}:7`, "field 'imageGCHighThresholdPercent'", "150");
      const lenient = r.stderr.split("\n").find((l) =>
        l.startsWith("I") && l.includes('"Using lenient decoding as strict decoding failed"')
      );
      assert.ok(lenient, r.stderr);
      assert.ok(
        lenient.includes(`${file}:6: field 'authentication.anonymous.enable' is not a known field`),
        lenient,
      );
    },
  );
});

Deno.test("main rejects a value of the wrong type with path, line and value", async () => {
  await withConfig(`${HEADER}nodeStatusUpdateFrequency: 10\n`, async (file) => {
    const r = await runAgent(["--config", file]);
    assertOneError(
      r,
      `${file}:3`,
      "field 'nodeStatusUpdateFrequency'",
      "must be a duration such as 10s",
      "current value is 10",
    );
  });
});

Deno.test("main rejects an out-of-range value with path, line and value", async () => {
  await withConfig(`${HEADER}imageGCHighThresholdPercent: 150\n`, async (file) => {
    const r = await runAgent(["--config", file]);
    assertOneError(r, `${file}:3`, "field 'imageGCHighThresholdPercent'", "150");
  });
});

Deno.test("main rejects a bad flag value naming the flag", async () => {
  const r = await runAgent(["--node-status-update-frequency", "10"]);
  assertOneError(r, "--node-status-update-frequency", '\\"10\\"');
});

Deno.test("main rejects an unknown flag", async () => {
  const r = await runAgent(["--no-such-flag=1"]);
  assertOneError(r, "unknown flag: --no-such-flag");
});

Deno.test("main prints upstream-style version and help", async () => {
  const v = await runAgent(["--version"]);
  assert.equal(v.code, 0);
  assert.match(v.stdout, /^Kubernetes v1\.\d+\.\d+/);
  const h = await runAgent(["--help"]);
  assert.equal(h.code, 0);
  assert.match(h.stdout, /--config string/);
  assert.match(h.stdout, /--kubeconfig string/);
});

Deno.test("main under its permission set is denied a read outside it, naming the permission", async () => {
  // These machines run cgroup v1, which upstream refuses by default since failCgroupV1 exists.
  const r = await runAgent(["--fail-cgroupv1=false", "--kubeconfig", "/etc/shadow"], {
    permissions: "kubelet",
  });
  assertOneError(r, "read access to '/etc/shadow'", "--kubeconfig", "--allow-read=/etc/shadow");
  const c = await runAgent(["--config", "/etc/shadow"], { permissions: "kubelet" });
  assertOneError(c, "read access to '/etc/shadow'", "--config");
});

Deno.test("main names a bad kubeconfig as a failure to run, not to load the configuration", async () => {
  await withConfig(HEADER, async (file, dir) => {
    const kubeconfig = join(dir, "kubelet.conf");
    await Deno.writeTextFile(kubeconfig, "apiVersion: v1\nkind: Config\nclusters: 5\n");
    const r = await runAgent([
      "--fail-cgroupv1=false",
      "--config",
      file,
      "--kubeconfig",
      kubeconfig,
    ]);
    assertOneError(r, '"command failed"', "failed to run Kubelet", kubeconfig);
    assert.doesNotMatch(r.stderr, /Failed to load kubelet configuration/);
  });
});

Deno.test("main with --least-privilege but not --allow-all says the launcher needs it", async () => {
  const r = await runAgent(["--least-privilege", "--fail-cgroupv1=false"], {
    permissions: "kubelet",
  });
  assertOneError(
    r,
    "--least-privilege needs the process to start with --allow-all",
    'notGranted="read,write,run,',
  );
});

/** A config for a running agent: its own healthz port and runtime socket under `dir`. */
async function agentConfig(
  dir: string,
): Promise<{ file: string; port: number; apiPort: number; socket: string }> {
  const port = freePort();
  const apiPort = freePort();
  const socket = join(dir, "cri.sock");
  const file = join(dir, "kubelet.yaml");
  // Standalone, the webhooks have no apiserver: the kubelet API on loopback, open to anyone.
  // No pod cgroups: these agents run beside other tests' agents on the host's cgroup tree.
  await Deno.writeTextFile(
    file,
    `${HEADER}failCgroupV1: false\ncgroupsPerQOS: false\nenforceNodeAllocatable: []\nhealthzPort: ${port}\ncontainerRuntimeEndpoint: unix://${socket}\npodLogsDir: ${dir}/pod-logs\n` +
      `address: 127.0.0.1\nport: ${apiPort}\nauthentication: {anonymous: {enabled: true}, webhook: {enabled: false}}\nauthorization: {mode: AlwaysAllow}\n`,
  );
  return { file, port, apiPort, socket };
}

/** The HTTP status of an anonymous GET on the kubelet API (its certificate is self-signed). */
function apiStatus(port: number, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: "127.0.0.1", port, path, rejectUnauthorized: false },
      (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      },
    );
    req.on("error", reject);
    req.end();
  });
}

function agentArgs(dir: string, file: string): string[] {
  return ["--config", file, "--root-dir", join(dir, "root"), "--cert-dir", join(dir, "pki")];
}

Deno.test({
  name: "main sets the process's open-files limit (maxOpenFiles) before the kubelet starts",
  sanitizeResources: false,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "kubelet-process-" });
    try {
      const { file, socket } = await agentConfig(dir);
      await Deno.writeTextFile(file, "maxOpenFiles: 4096\n", { append: true });
      await using _runtime = await startFakeRuntime({ socket });
      const agent = spawnAgent(agentArgs(dir, file));
      await agent.waitFor("Started kubelet");
      // RLIMIT_NOFILE, soft and hard, of the process (the launcher's and the kubelet's Worker's).
      const limits = await Deno.readTextFile(`/proc/${agent.process.pid}/limits`);
      assert.match(limits, /^Max open files\s+4096\s+4096\s+files/m, limits);
      agent.process.kill("SIGTERM");
      assert.equal((await agent.process.status).code, 0, agent.stderr());
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "main exits 0 on SIGTERM after stopping its servers",
  sanitizeResources: false,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "kubelet-sigterm-" });
    try {
      const { file, port, apiPort, socket } = await agentConfig(dir);
      await using _runtime = await startFakeRuntime({ socket });
      const agent = spawnAgent(agentArgs(dir, file));
      await agent.waitFor("Started kubelet");
      assert.match(
        agent.stderr(),
        /"Container runtime initialized" containerRuntime="fake-runtime"/,
      );
      const res = await fetch(`http://127.0.0.1:${port}/healthz`);
      assert.equal(await res.text(), "ok");
      // The kubelet API listens over TLS.
      assert.equal(await apiStatus(apiPort, "/pods"), 200);
      agent.process.kill("SIGTERM");
      const status = await agent.process.status;
      assert.equal(status.code, 0, agent.stderr());
      assert.match(agent.stderr(), /Received signal, shutting down/);
      await assert.rejects(fetch(`http://127.0.0.1:${port}/healthz`));
      await assert.rejects(apiStatus(port + 1, "/pods"));
      assert.ok((await Deno.stat(join(dir, "root", "pods"))).isDirectory);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "main exits 0 on SIGTERM during start-up",
  sanitizeResources: false,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "kubelet-early-sigterm-" });
    try {
      const { file, socket } = await agentConfig(dir);
      await using _runtime = await startFakeRuntime({ socket });
      const agent = spawnAgent(agentArgs(dir, file));
      // Seen in the fault suite: a SIGTERM as the sync loop starts ended with exit 1 and
      // "command failed" err="received SIGTERM".
      await agent.waitFor("Starting kubelet main sync loop");
      agent.process.kill("SIGTERM");
      const status = await agent.process.status;
      assert.equal(status.code, 0, agent.stderr());
      assert.doesNotMatch(agent.stderr(), /command failed/);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name:
    "main waits for a runtime that is down at start, naming its socket once, and goes on when it comes up",
  sanitizeResources: false,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "kubelet-noruntime-" });
    try {
      const { file, socket } = await agentConfig(dir);
      const agent = spawnAgent(agentArgs(dir, file));
      await agent.waitFor("Container runtime is not reachable");
      // Let it retry a few times: the error is logged once per state change, not per retry.
      await new Promise((r) => setTimeout(r, 1500));
      const errors = errorLines(agent.stderr());
      assert.equal(errors.length, 1, agent.stderr());
      assert.ok(errors[0]?.includes(`endpoint="unix://${socket}"`), errors[0]);
      assert.doesNotMatch(agent.stderr(), /^\s+at /m, "stack trace printed");
      await using _runtime = await startFakeRuntime({ socket });
      await agent.waitFor("Started kubelet");
      assert.match(agent.stderr(), /"Container runtime is reachable again"/);
      agent.process.kill("SIGTERM");
      assert.equal((await agent.process.status).code, 0, agent.stderr());
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "main exits 0 on SIGTERM while still starting (TLS bootstrap waiting for the apiserver)",
  sanitizeResources: false,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "kubelet-early-sigterm-" });
    try {
      const { file } = await agentConfig(dir);
      const ca = join(dir, "ca.crt");
      const made = await new Deno.Command("openssl", {
        args: ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=ca"]
          .concat(["-keyout", join(dir, "ca.key"), "-out", ca]),
        stdout: "null",
        stderr: "null",
      }).output();
      assert.ok(made.success);
      const boot = join(dir, "bootstrap.conf");
      await Deno.writeTextFile(
        boot,
        [
          "apiVersion: v1",
          "kind: Config",
          `clusters: [{name: c, cluster: {server: 'https://127.0.0.1:${freePort()}', certificate-authority: ${ca}}}]`,
          "users: [{name: u, user: {token: abcdef.0123456789abcdef}}]",
          "contexts: [{name: x, context: {cluster: c, user: u}}]",
          "current-context: x",
        ].join("\n"),
      );
      const agent = spawnAgent([
        ...agentArgs(dir, file),
        ...["--bootstrap-kubeconfig", boot, "--kubeconfig", join(dir, "kubelet.conf")],
      ]);
      await agent.waitFor("Failed to connect to apiserver");
      agent.process.kill("SIGTERM");
      assert.equal((await agent.process.status).code, 0, agent.stderr());
      assert.match(agent.stderr(), /"Kubelet stopped"/);
      assert.doesNotMatch(agent.stderr(), /command failed/);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "main exits 1 when the runtime does not serve CRI v1",
  sanitizeResources: false,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "kubelet-criv1-" });
    try {
      const { file, socket } = await agentConfig(dir);
      await using runtime = await startFakeRuntime({ socket });
      runtime.injectError("Version", 12, "unknown service runtime.v1.RuntimeService", 1000);
      const r = await runAgent(agentArgs(dir, file));
      assertOneError(
        r,
        "validate CRI v1 runtime API for endpoint",
        `unix://${socket}`,
        "Unimplemented",
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
