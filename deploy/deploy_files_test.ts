import assert from "node:assert/strict";
import { parse as parseYaml } from "yaml";
import { loadKubeletConfiguration } from "../src/app/kubelet_config.ts";
import { kubeletConfigurationFields } from "../src/apis/config_types.ts";
import { parseCommandLine } from "../src/apis/flags.ts";
import { INSTALL_DIR, INSTALLER_IMAGE } from "./installer_image.ts";

const DEPLOY = new URL(".", import.meta.url).pathname;
const read = (path: string) => Deno.readTextFileSync(`${DEPLOY}${path}`);

/** The settings of one systemd unit file: key → values in order (an empty value resets). */
function unitSettings(text: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#") || line.startsWith("[")) continue;
    const eq = line.indexOf("=");
    assert.ok(eq > 0, `a unit line is key=value: '${line}'`);
    const key = line.slice(0, eq);
    const value = line.slice(eq + 1);
    out.set(key, value === "" ? [] : [...(out.get(key) ?? []), value]);
  }
  return out;
}

/** `Environment="A=b c"` values and EnvironmentFile lines (`A="b c"`) into variables. */
function assignments(values: readonly string[], into: Map<string, string>): void {
  const unquote = (v: string) => (/^"(.*)"$/.exec(v)?.[1] ?? v);
  for (const v of values) {
    const m = /^([A-Z_][A-Z0-9_]*)=(.*)$/.exec(unquote(v.trim()));
    assert.ok(m, `an assignment: '${v}'`);
    into.set(m[1] as string, unquote(m[2] as string));
  }
}

/**
 * ExecStart as systemd runs it: words split on blanks; an unquoted `$VAR` becomes the words of
 * its value (none when unset), `${VAR}` one word.
 */
function execArgs(execStart: string, env: ReadonlyMap<string, string>): string[] {
  const out: string[] = [];
  for (const word of execStart.trim().split(/\s+/)) {
    const whole = /^\$([A-Z_][A-Z0-9_]*)$/.exec(word);
    if (whole) out.push(...(env.get(whole[1] as string) ?? "").split(/\s+/).filter(Boolean));
    else out.push(word.replace(/\$\{([A-Z_][A-Z0-9_]*)\}/g, (_, k) => env.get(k) ?? ""));
  }
  return out;
}

// What `kubeadm join` writes to /var/lib/kubelet/kubeadm-flags.env (buildKubeletArgs), and a
// typical /etc/default/kubelet.
const KUBEADM_FLAGS_ENV =
  'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.10.1 --hostname-override=node-a --register-with-taints=node-role.kubernetes.io/control-plane:NoSchedule"';
const ETC_DEFAULT_KUBELET = "KUBELET_EXTRA_ARGS=--node-ip=10.0.0.5";

Deno.test("the kubeadm drop-in's command line parses, flag by flag", () => {
  const unit = unitSettings(read("systemd/kubelet.service"));
  const dropin = unitSettings(read("systemd/10-kubeadm.conf"));
  assert.deepEqual(dropin.get("EnvironmentFile"), [
    "-/var/lib/kubelet/kubeadm-flags.env",
    "-/etc/default/kubelet",
  ]);
  const execStart = dropin.get("ExecStart");
  assert.equal(execStart?.length, 1, "the drop-in resets ExecStart, then sets one");
  assert.deepEqual(unit.get("ExecStart"), ["/usr/local/bin/kubelet"]);

  const env = new Map<string, string>();
  assignments(dropin.get("Environment") ?? [], env);
  assignments([KUBEADM_FLAGS_ENV, ETC_DEFAULT_KUBELET], env); // the files win, in order
  const [binary, ...args] = execArgs(execStart?.[0] ?? "", env);
  assert.equal(binary, "/usr/local/bin/kubelet");
  assert.deepEqual(args.map((a) => a.replace(/=.*/, "")), [
    "--bootstrap-kubeconfig",
    "--kubeconfig",
    "--config",
    "--container-runtime-endpoint",
    "--pod-infra-container-image",
    "--hostname-override",
    "--register-with-taints",
    "--node-ip",
  ]);

  const cl = parseCommandLine(args, kubeletConfigurationFields);
  assert.equal(cl.flags.bootstrapKubeconfig, "/etc/kubernetes/bootstrap-kubelet.conf");
  assert.equal(cl.flags.kubeConfig, "/etc/kubernetes/kubelet.conf");
  assert.equal(cl.flags.kubeletConfigFile, "/var/lib/kubelet/config.yaml");
  assert.equal(cl.flags.podInfraContainerImage, "registry.k8s.io/pause:3.10.1");
  assert.equal(cl.flags.hostnameOverride, "node-a");
  assert.equal(cl.flags.nodeIP, "10.0.0.5");
  assert.deepEqual(cl.config.map((c) => [c.path.join("."), c.value]), [
    ["containerRuntimeEndpoint", "unix:///var/run/containerd/containerd.sock"],
    ["registerWithTaints", [{
      key: "node-role.kubernetes.io/control-plane",
      effect: "NoSchedule",
    }]],
  ]);
  // Upstream's deprecation warnings, logged once at start, not failures.
  assert.ok(
    cl.warnings.some((w) => w.startsWith("Flag --pod-infra-container-image has been deprecated")),
  );
});

Deno.test("the kubelet unit starts after containerd and restarts as upstream's does", () => {
  const unit = unitSettings(read("systemd/kubelet.service"));
  assert.ok(unit.get("After")?.[0]?.split(/\s+/).includes("containerd.service"));
  assert.ok(unit.get("Wants")?.[0]?.split(/\s+/).includes("containerd.service"));
  assert.equal(unit.get("Requires"), undefined, "a containerd restart must not stop the agent");
  assert.deepEqual(unit.get("Restart"), ["always"]);
  assert.deepEqual(unit.get("RestartSec"), ["10"]);
  assert.deepEqual(unit.get("StartLimitInterval"), ["0"]);
  assert.deepEqual(unit.get("WantedBy"), ["multi-user.target"]);
  for (const file of ["systemd/kubelet.service", "systemd/10-kubeadm.conf"]) {
    assert.match(read(file), /^# Managed by the kubelet-ts installer/, file);
  }
});

Deno.test("the sample config loads with no errors, with the drop-in's flags on top", async () => {
  const { config } = await loadKubeletConfiguration({
    configFile: `${DEPLOY}kubelet.yaml`,
    dropinDir: "",
    flags: [],
    // On a cgroup v1 host it needs failCgroupV1: false, as its comment says.
    cgroupV1: false,
  });
  assert.equal(config.cgroupDriver, "cgroupfs");
  assert.equal(config.authorization.mode, "Webhook");
  assert.equal(config.authentication.anonymous.enabled, false);
  assert.equal(config.authentication.x509.clientCAFile, "/etc/kubernetes/pki/ca.crt");
  assert.deepEqual(config.clusterDNS, ["10.96.0.10"]);
  assert.equal(config.staticPodPath, "/etc/kubernetes/manifests");
  assert.equal(config.containerRuntimeEndpoint, "unix:///run/containerd/containerd.sock");
});

Deno.test("a config.yaml as kubeadm writes it loads with no errors", async () => {
  // `kubeadm init` v1.36 writes every duration it leaves to the kubelet as 0s.
  const kubeadmConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: ""
cpuManagerReconcilePeriod: 0s
crashLoopBackOff: {}
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
kind: KubeletConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
rotateCertificates: true
runtimeRequestTimeout: 0s
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
`;
  const dir = await Deno.makeTempDir({ prefix: "deploy-files-test-" });
  try {
    await Deno.writeTextFile(`${dir}/config.yaml`, kubeadmConfig);
    const cl = parseCommandLine([
      `--config=${dir}/config.yaml`,
      "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
    ], kubeletConfigurationFields);
    const { config } = await loadKubeletConfiguration({
      configFile: cl.flags.kubeletConfigFile,
      dropinDir: "",
      flags: cl.config,
      cgroupV1: false,
    });
    // 0s means "default" in the file, as upstream's defaulting treats it.
    assert.equal(config.syncFrequency, 60_000);
    assert.equal(config.containerRuntimeEndpoint, "unix:///var/run/containerd/containerd.sock");
    assert.equal(config.cgroupDriver, "systemd");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the DaemonSet runs the installer image privileged on every node with the host paths", () => {
  const ds = parseYaml(read("daemonset.yaml"));
  assert.equal(ds.kind, "DaemonSet");
  assert.equal(ds.metadata.namespace, "kube-system");
  assert.equal(ds.spec.updateStrategy.type, "RollingUpdate");
  assert.deepEqual(ds.spec.selector.matchLabels, ds.spec.template.metadata.labels);
  const pod = ds.spec.template.spec;
  assert.equal(pod.hostPID, true);
  assert.equal(pod.priorityClassName, "system-node-critical");
  assert.deepEqual(pod.tolerations, [{ operator: "Exists" }]);
  const [c] = pod.containers;
  assert.equal(c.image, INSTALLER_IMAGE, "the manifest names the image deno task image builds");
  assert.equal(c.securityContext.privileged, true);
  const env = Object.fromEntries(
    c.env.map((e: { name: string; value: string }) => [e.name, e.value]),
  );
  // Every host directory the installer writes is a hostPath mounted under HOST_ROOT.
  const volumes = new Map(
    pod.volumes.map((v: { name: string; hostPath: { path: string } }) => [v.name, v.hostPath.path]),
  );
  const mounts = new Map(
    c.volumeMounts.map((
      m: { name: string; mountPath: string },
    ) => [m.mountPath, volumes.get(m.name)]),
  );
  const binDir = env.KUBELET_PATH.replace(/\/[^/]+$/, "");
  assert.equal(mounts.get(`${env.HOST_ROOT}${binDir}`), binDir);
  assert.equal(mounts.get(`${env.HOST_ROOT}${env.SYSTEMD_DIR}`), env.SYSTEMD_DIR);
  assert.equal(env.RESTART_KUBELET, "true");
  assert.equal(env.PREPARE_KUBELET, "true");
  // The installer's own defaults are what the manifest spells out.
  const script = read("install.sh");
  const settings = [
    "HOST_ROOT",
    "KUBELET_PATH",
    "SYSTEMD_DIR",
    "RESTART_KUBELET",
    "PREPARE_KUBELET",
  ];
  for (const name of settings) {
    assert.ok(script.includes(`${name}=\${${name}:-${env[name]}}`), `install.sh defaults ${name}`);
  }
  assert.ok(INSTALL_DIR.startsWith("/"));
});
