import assert from "node:assert/strict";
import { join } from "node:path";
import { ConfigError } from "../apis/config_schema.ts";
import { loadKubeletConfiguration } from "./kubelet_config.ts";

const HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

async function loadText(text: string) {
  const dir = await Deno.makeTempDir({ prefix: "kubelet-unsupported-" });
  const file = join(dir, "k.yaml");
  try {
    await Deno.writeTextFile(file, `${HEADER}${text}`);
    return {
      file,
      result: await loadKubeletConfiguration({
        configFile: file,
        dropinDir: "",
        flags: [],
        cgroupV1: false,
      }).catch((e) => e),
    };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("unsupportedSettings stops the start naming file, line, field, value and that it is not supported yet", async () => {
  const cases: [string, number, string, string][] = [
    [
      "featureGates:\n  RuntimeClassInImageCriApi: true\n",
      4,
      "featureGates.RuntimeClassInImageCriApi",
      "true",
    ],
    ["featureGates:\n  MemoryQoS: true\n", 4, "featureGates.MemoryQoS", "true"],
    ["featureGates:\n  PodLevelResources: false\n", 4, "featureGates.PodLevelResources", "false"],
  ];
  for (const [text, line, field, value] of cases) {
    const { file, result } = await loadText(text);
    assert.ok(result instanceof ConfigError, `${text}: ${result}`);
    assert.equal(result.file, file);
    assert.equal(result.line, line);
    assert.equal(result.path, field);
    assert.match(result.message, /is not supported yet by this kubelet/);
    assert.ok(result.message.includes(`current value is ${value}`), result.message);
  }
});

Deno.test("unsupportedSettings refuses CPU manager options with the none policy as upstream does", async () => {
  const { result } = await loadText('cpuManagerPolicyOptions:\n  full-pcpus-only: "true"\n');
  assert.ok(result instanceof ConfigError, String(result));
  assert.match(
    result.message,
    /None policy: received unsupported options=map\[full-pcpus-only:true\]/,
  );
});

Deno.test("unsupportedSettings accepts the none policies and what upstream ignores under them", async () => {
  const { result } = await loadText(
    "cpuManagerPolicy: none\nmemoryManagerPolicy: None\ntopologyManagerPolicy: none\n" +
      "topologyManagerScope: pod\ncpuManagerReconcilePeriod: 5s\nhairpinMode: hairpin-veth\n",
  );
  assert.ok(!(result instanceof Error), String(result));
});

Deno.test("unsupportedSettings accepts the static CPU manager and the topology manager policies", async () => {
  const { result } = await loadText(
    'cpuManagerPolicy: static\nreservedSystemCPUs: "0"\ncpuManagerPolicyOptions:\n' +
      '  full-pcpus-only: "true"\ntopologyManagerPolicy: single-numa-node\n' +
      "topologyManagerScope: pod\nmemoryManagerPolicy: Static\nreservedMemory:\n" +
      "- numaNode: 0\n  limits:\n    memory: 100Mi\n",
  );
  assert.ok(!(result instanceof Error), String(result));
});

Deno.test("unsupportedSettings accepts podCIDR, which the kubelet gives the runtime", async () => {
  const { result } = await loadText("podCIDR: 10.244.0.0/24\n");
  assert.ok(!(result instanceof Error), String(result));
  assert.equal(result.config.podCIDR, "10.244.0.0/24");
});

Deno.test("unsupportedSettings leaves upstream's own refusal first", async () => {
  const { result } = await loadText(
    "tlsCurvePreferences: [23]\nimageGCHighThresholdPercent: 150\n",
  );
  assert.ok(result instanceof ConfigError, String(result));
  assert.equal(result.path, "imageGCHighThresholdPercent");
});
