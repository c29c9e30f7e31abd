/**
 * The agent as a process meets configurations upstream accepts or refuses as upstream does: an
 * unknown field and a bad --node-ip are `--check` problems; a CPU manager policy it cannot honour
 * stops the start naming file, line, field and value; and a kubeconfig with
 * `insecure-skip-tls-verify: true` (no CA) reaches a real kube-apiserver, registers the node and
 * passes `--check`'s apiserver check, with a warning at start.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { parse, stringify } from "yaml";
import { startFakeRuntime } from "../src/testing/fake_remote_runtime.ts";
import { errorLines, runAgent, spawnAgent } from "./agent_process.ts";
import { freePort } from "./child_process.ts";
import { startControlPlane } from "./control_plane.ts";
import { requireRoot } from "./requirements.ts";

const HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "kubelet-decoding-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("--check reports an unknown field and a bad --node-ip as problems", async () => {
  await withDir(async (dir) => {
    const file = join(dir, "kubelet.yaml");
    await Deno.writeTextFile(file, `${HEADER}failCgroupV1: false\nmaxPodz: 10\n`);
    const r = await runAgent(["--check", "--config", file, "--node-ip", "10.0.0.300"]);
    assert.equal(r.code, 1, r.stdout + r.stderr);
    assert.match(
      r.stdout,
      /^\[PROBLEM\] flags: could not parse --node-ip "10\.0\.0\.300": '10\.0\.0\.300' is not an IP address$/m,
      r.stdout,
    );
    assert.ok(
      r.stdout.includes(
        `[PROBLEM] configuration: the kubelet would start, but ignoring what strict decoding refuses: strict decoding error: ${file}:4: field 'maxPodz' is not a known field`,
      ),
      r.stdout,
    );
    // The file loaded: its CIS items are checked, not skipped.
    assert.doesNotMatch(r.stdout, /cis: not checked/);
  });
});

Deno.test("--check does not judge the CIS items on defaults when the configuration does not load", async () => {
  await withDir(async (dir) => {
    const file = join(dir, "kubelet.yaml");
    await Deno.writeTextFile(file, `${HEADER}failCgroupV1: false\nmaxPods: many\n`);
    const r = await runAgent(["--check", "--config", file]);
    assert.equal(r.code, 1, r.stdout + r.stderr);
    assert.match(r.stdout, /^\[PROBLEM\] configuration: .*field 'maxPods'/m);
    assert.match(r.stdout, /^\[warning\] cis: not checked: the configuration did not load/m);
    assert.doesNotMatch(r.stdout, /cis: 4\.2\./);
  });
});

Deno.test("the agent stops at start for the static CPU manager policy without reserved CPUs, as upstream", async () => {
  await withDir(async (dir) => {
    const file = join(dir, "kubelet.yaml");
    await Deno.writeTextFile(file, `${HEADER}failCgroupV1: false\ncpuManagerPolicy: static\n`);
    const r = await runAgent(["--config", file]);
    assert.equal(r.code, 1, r.stderr);
    const errors = errorLines(r.stderr);
    assert.ok(
      errors.some((l) =>
        l.includes(
          "failed to run Kubelet: [cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero",
        )
      ),
      r.stderr,
    );
  });
});

const gate = await requireRoot("insecure-skip-tls-verify e2e test", ["openssl", "go"]);
const NODE = "kts-insecure";

Deno.test({
  name: "a kubeconfig with insecure-skip-tls-verify reaches a real apiserver, with a warning",
  ignore: gate.ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    gate.check();
    const dir = await Deno.makeTempDir({ prefix: "insecure-e2e-" });
    await using stack = new AsyncDisposableStack();
    stack.defer(() => Deno.remove(dir, { recursive: true }).catch(() => {}));
    const cp = stack.use(await startControlPlane({ dir: join(dir, "cp"), nodeNames: [NODE] }));
    // The node's kubeconfig without the cluster CA: the apiserver's certificate cannot be
    // verified, and is not.
    const kc = parse(await Deno.readTextFile(cp.nodeKubeconfig(NODE))) as {
      clusters: { cluster: Record<string, unknown> }[];
    };
    for (const c of kc.clusters) {
      delete c.cluster["certificate-authority"];
      delete c.cluster["certificate-authority-data"];
      c.cluster["insecure-skip-tls-verify"] = true;
    }
    const kubeconfig = join(dir, "insecure.conf");
    await Deno.writeTextFile(kubeconfig, stringify(kc));

    const check = await runAgent([
      ...["--check", "--fail-cgroupv1=false", "--hostname-override", NODE],
      ...["--kubeconfig", kubeconfig],
    ]);
    assert.match(
      check.stdout,
      new RegExp(`^\\[ok\\] +apiserver: .* as system:node:${NODE}$`, "m"),
      check.stdout,
    );

    const socket = join(dir, "cri.sock");
    await using _runtime = await startFakeRuntime({ socket });
    const file = join(dir, "kubelet.yaml");
    await Deno.writeTextFile(
      file,
      `${HEADER}failCgroupV1: false\ncgroupsPerQOS: false\nenforceNodeAllocatable: []\n` +
        `healthzPort: ${freePort()}\ncontainerRuntimeEndpoint: unix://${socket}\n` +
        `podLogsDir: ${dir}/pod-logs\naddress: 127.0.0.1\nport: ${freePort()}\n`,
    );
    const agent = spawnAgent([
      ...["--config", file, "--kubeconfig", kubeconfig, "--hostname-override", NODE],
      ...["--root-dir", join(dir, "root"), "--cert-dir", join(dir, "pki")],
    ]);
    try {
      await agent.waitFor("Successfully registered node", 60_000);
      const warning = agent.stderr().split("\n").find((l) =>
        l.startsWith("W") && l.includes("insecure-skip-tls-verify")
      );
      assert.ok(warning?.includes(`kubeconfig="${kubeconfig}"`), agent.stderr());
    } finally {
      agent.process.kill("SIGTERM");
      await agent.process.status;
    }
  },
});
