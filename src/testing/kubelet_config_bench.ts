/**
 * Start-up cost of reading configuration: flags, a config file with drop-ins, defaults and
 * validation, as `main.ts` does them once per start.
 */

import { join } from "node:path";
import { loadKubeletConfiguration } from "../app/kubelet_config.ts";
import { kubeletConfigurationFields } from "../apis/config_types.ts";
import { parseCommandLine } from "../apis/flags.ts";

const dir = await Deno.makeTempDir({ prefix: "kubelet-config-bench-" });
const file = join(dir, "kubelet.yaml");
await Deno.writeTextFile(
  file,
  [
    "apiVersion: kubelet.config.k8s.io/v1beta1",
    "kind: KubeletConfiguration",
    "failCgroupV1: false",
    "staticPodPath: /etc/kubernetes/manifests",
    "clusterDNS: [10.96.0.10]",
    "clusterDomain: cluster.local",
    "evictionHard: {memory.available: 200Mi, nodefs.available: 10%}",
    "systemReserved: {cpu: 100m, memory: 256Mi}",
    "authentication:",
    "  x509: {clientCAFile: /etc/kubernetes/pki/ca.crt}",
    "  webhook: {enabled: true, cacheTTL: 2m}",
    "authorization: {mode: Webhook}",
    "",
  ].join("\n"),
);
await Deno.mkdir(join(dir, "conf.d"));
await Deno.writeTextFile(
  join(dir, "conf.d", "10-pods.conf"),
  "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 250\n",
);
const args = ["--config", file, "--config-dir", join(dir, "conf.d"), "--v=2", "--node-ip=10.0.0.5"];

Deno.bench("parseCommandLine with a typical node's flags", () => {
  parseCommandLine(args, kubeletConfigurationFields);
});

Deno.bench("loadKubeletConfiguration: file, drop-in, flags, defaults, validation", async () => {
  const cl = parseCommandLine(args, kubeletConfigurationFields);
  await loadKubeletConfiguration({
    configFile: cl.flags.kubeletConfigFile,
    dropinDir: cl.flags.kubeletDropinConfigDirectory,
    flags: cl.config,
    cgroupV1: true,
  });
});

globalThis.addEventListener("unload", () => Deno.removeSync(dir, { recursive: true }));
