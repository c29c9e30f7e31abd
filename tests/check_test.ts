/**
 * `kubelet --check` as an operator runs it, against real containerd and a real kube-apiserver:
 * on a node set up as the e2e agents are, it finds no problem and says who the apiserver takes
 * it for; deploy/'s sample configuration passes every CIS v1.12 item it checks; with
 * misconfigurations planted (the runtime's socket wrong, cgroup v1 refused on a v1
 * host, a serving key that is not the certificate's, a client CA file that holds no
 * certificate, a client certificate from another CA), one run names each, with its fix, and
 * exits 1.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { hostIsCgroup2UnifiedMode } from "../src/cm/cgroup_mode.ts";
import { runAgent } from "./agent_process.ts";
import { startContainerd } from "./containerd_harness.ts";
import { startControlPlane } from "./control_plane.ts";
import { writeKubeletConfig } from "./node_harness.ts";
import { createPki, issueCertificate } from "./pki.ts";
import { requireRoot } from "./requirements.ts";

const gate = await requireRoot("kubelet --check e2e tests", [
  "containerd",
  "ctr",
  "runc",
  "openssl",
  "go",
]);
const NODE = "kts-check";

Deno.test({
  name: "kubelet --check: a sound node passes, and one run names every planted problem",
  ignore: gate.ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    gate.check();
    const dir = await Deno.makeTempDir({ prefix: "check-e2e-" });
    await using stack = new AsyncDisposableStack();
    stack.defer(() => Deno.remove(dir, { recursive: true }).catch(() => {}));
    const cp = stack.use(await startControlPlane({ dir: join(dir, "cp"), nodeNames: [NODE] }));
    const socket = join(dir, "containerd", "containerd.sock");
    const containerd = stack.use(await startContainerd({ dir: join(dir, "containerd"), socket }));

    // A node set up for pods forwards IPv4: kubeadm's preflight asks for it, and the CNI bridge
    // plugin turns it on with its first gateway. A fresh host has it off until then, and this
    // test may run before any other test has started a pod.
    await Deno.writeTextFile("/proc/sys/net/ipv4/ip_forward", "1\n");
    const sound = join(dir, "sound.yaml");
    await writeKubeletConfig(sound, { endpoint: containerd.endpoint });
    const base = ["--check", "--hostname-override", NODE];
    const good = await runAgent([
      ...base,
      ...["--config", sound, "--kubeconfig", cp.nodeKubeconfig(NODE)],
    ]);
    assert.equal(good.code, 0, good.stdout + good.stderr);
    assert.match(good.stdout, /^\[ok\] {6}runtime: containerd \S+ serves CRI v1 at unix:\/\//m);
    assert.match(good.stdout, new RegExp(`accepts .* as system:node:${NODE}$`, "m"));
    assert.match(good.stdout, /^no problems found/m);

    // deploy/'s sample as an operator installs it (root's, mode 0600), pointed at this node's
    // runtime and cluster CA: every CIS v1.12 item checked here passes, 4.2.14 (seccompDefault)
    // and 4.2.12 (ECDHE suites only) included; the CA file stays 0644, as v1.12 allows.
    const v1Host = !(await hostIsCgroup2UnifiedMode());
    const sample = (await Deno.readTextFile(new URL("../deploy/kubelet.yaml", import.meta.url)))
      .replace(
        /^containerRuntimeEndpoint: .*$/m,
        `containerRuntimeEndpoint: ${containerd.endpoint}`,
      )
      .replace(/^( +clientCAFile: ).*$/m, `$1${cp.pki.ca.cert}`)
      .concat(`failCgroupV1: ${v1Host}\n`);
    const deployed = join(dir, "deployed.yaml");
    await Deno.writeTextFile(deployed, sample, { mode: 0o600 });
    await Deno.chmod(deployed, 0o600);
    // No --hostname-override here: 4.2.7 asks for none (the apiserver check may then name
    // another node; only the CIS lines matter to this run).
    const cis = await runAgent([
      ...["--check", "--config", deployed, "--kubeconfig", cp.nodeKubeconfig(NODE)],
    ]);
    assert.doesNotMatch(cis.stdout, /^\[warning\] cis:/m, cis.stdout);
    // 14 of 4.2, and 4.1's mode and owner of the kubeconfig, the client CA and the config file.
    assert.match(
      cis.stdout,
      /^\[ok\] {6}cis: the CIS Benchmark's 20 kubelet items checked here pass$/m,
      cis.stdout,
    );

    // Planted: each of these alone would stop the kubelet or leave it unable to work.
    const planted = join(dir, "planted");
    await Deno.mkdir(planted);
    const serving = await issueCertificate({
      dir: planted,
      name: "serving",
      ca: cp.pki.ca,
      subject: { commonName: NODE },
      usage: "server",
    });
    const stranger = await createPki(join(dir, "stranger"), { nodeNames: [NODE] });
    const rogue = stranger.nodes.get(NODE)!;
    const kubeconfig = join(planted, "rogue.conf");
    await Deno.writeTextFile(
      kubeconfig,
      [
        "apiVersion: v1",
        "kind: Config",
        `clusters: [{name: c, cluster: {server: '${cp.server}', certificate-authority: ${cp.pki.ca.cert}}}]`,
        `users: [{name: u, user: {client-certificate: ${rogue.cert}, client-key: ${rogue.key}}}]`,
        "contexts: [{name: x, context: {cluster: c, user: u}}]",
        "current-context: x",
      ].join("\n"),
    );
    const notCa = join(planted, "ca.crt");
    await Deno.writeTextFile(notCa, "this is not a certificate\n");
    const v1 = !(await hostIsCgroup2UnifiedMode());
    const config = join(planted, "kubelet.yaml");
    await Deno.writeTextFile(
      config,
      [
        "apiVersion: kubelet.config.k8s.io/v1beta1",
        "kind: KubeletConfiguration",
        `failCgroupV1: ${v1}`,
        `containerRuntimeEndpoint: unix://${dir}/containerd/wrong.sock`,
        `tlsCertFile: ${serving.cert}`,
        `tlsPrivateKeyFile: ${cp.pki.admin.key}`,
        "authentication:",
        "  x509:",
        `    clientCAFile: ${notCa}`,
        "",
      ].join("\n"),
    );
    const bad = await runAgent([...base, "--config", config, "--kubeconfig", kubeconfig]);
    assert.equal(bad.code, 1, bad.stdout + bad.stderr);
    const expected = [
      /^\[PROBLEM\] runtime: the container runtime's socket .*wrong\.sock does not exist$/m,
      /^\[PROBLEM\] certificates: tlsPrivateKeyFile .* is not the key of tlsCertFile /m,
      /^\[PROBLEM\] certificates: clientCAFile .*ca\.crt: holds no PEM certificate$/m,
      /^\[PROBLEM\] apiserver: https:\/\/127\.0\.0\.1:\d+ refuses the credentials of .*rogue\.conf \(401 Unauthorized\)$/m,
      ...(v1 ? [/^\[PROBLEM\] cgroups: the host runs cgroup v1 and failCgroupV1 is true/m] : []),
    ];
    for (const e of expected) assert.match(bad.stdout, e, bad.stdout);
    const problems = bad.stdout.split("\n").filter((l) => l.startsWith("[PROBLEM]"));
    assert.equal(problems.length, expected.length, bad.stdout);
    assert.match(bad.stdout, new RegExp(`^${expected.length} problems found`, "m"));
    // Every problem comes with what to do.
    const lines = bad.stdout.split("\n");
    lines.forEach((l, i) => {
      if (l.startsWith("[PROBLEM]")) assert.match(lines[i + 1] ?? "", /^ {10}fix: \S/, l);
    });
    await containerd.stop();
  },
});
