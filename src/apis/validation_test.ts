import assert from "node:assert/strict";
import { applyDefaults } from "./config_schema.ts";
import {
  applyDependentDefaults,
  type KubeletConfiguration,
  kubeletConfigurationFields,
} from "./config_types.ts";
import {
  effectiveFeatureGates,
  validateKubeletConfiguration,
  type ValidationIssue,
  type ValidationOptions,
} from "./validation.ts";

/** A configuration as the loader builds it from an empty file: upstream's defaults. */
function defaulted(): KubeletConfiguration {
  const cfg = applyDefaults(kubeletConfigurationFields, {}) as KubeletConfiguration;
  applyDependentDefaults(cfg);
  return cfg;
}

/** Validates the defaulted configuration after `change` and returns the issues. */
function issuesAfter(
  change: (cfg: KubeletConfiguration) => void,
  opts?: ValidationOptions,
): ValidationIssue[] {
  const cfg = defaulted();
  change(cfg);
  return validateKubeletConfiguration(cfg, opts);
}

/** Asserts that exactly one issue is reported, with this path and message. */
function expectIssue(
  change: (cfg: KubeletConfiguration) => void,
  path: string,
  message: string,
  opts?: ValidationOptions,
) {
  const issues = issuesAfter(change, opts);
  assert.deepEqual(issues.map((i) => [i.path, i.message]), [[path, message]]);
  return issues[0];
}

Deno.test("validateKubeletConfiguration accepts the defaulted configuration", () => {
  assert.deepEqual(validateKubeletConfiguration(defaulted()), []);
});

Deno.test("validateKubeletConfiguration requires a positive node lease duration", () => {
  const issue = expectIssue(
    (c) => (c.nodeLeaseDurationSeconds = 0),
    "nodeLeaseDurationSeconds",
    "must be greater than 0",
  );
  assert.equal(issue?.value, 0);
});

Deno.test("validateKubeletConfiguration requires cgroupRoot with systemCgroups", () => {
  expectIssue(
    (c) => (c.systemCgroups = "/system.slice"),
    "systemCgroups",
    "requires cgroupRoot (--cgroup-root) to be specified",
  );
});

Deno.test("validateKubeletConfiguration rejects negative QPS and burst values", () => {
  expectIssue((c) => (c.eventBurst = -1), "eventBurst", "must not be a negative number");
  expectIssue((c) => (c.kubeAPIQPS = -0.5), "kubeAPIQPS", "must not be a negative number");
  expectIssue((c) => (c.registryPullQPS = -1), "registryPullQPS", "must not be a negative number");
  expectIssue((c) => (c.maxPods = -1), "maxPods", "must not be a negative number");
});

Deno.test("validateKubeletConfiguration checks port ranges", () => {
  expectIssue((c) => (c.port = 0), "port", "must be between 1 and 65535, inclusive");
  expectIssue(
    (c) => (c.readOnlyPort = 65536),
    "readOnlyPort",
    "must be between 0 and 65535, inclusive",
  );
  expectIssue(
    (c) => (c.healthzPort = 70000),
    "healthzPort",
    "must be between 1 and 65535, inclusive",
  );
  assert.deepEqual(issuesAfter((c) => ((c.healthzPort = 0), (c.readOnlyPort = 0))), []);
});

Deno.test("validateKubeletConfiguration gates and bounds cpuCFSQuotaPeriod", () => {
  const issue = expectIssue(
    (c) => (c.cpuCFSQuotaPeriod = 200),
    "cpuCFSQuotaPeriod",
    "requires feature gate CustomCPUCFSQuotaPeriod unless it is 100ms",
  );
  assert.equal(issue?.value, "200ms");
  expectIssue(
    (c) => (c.cpuCFSQuotaPeriod = 2000),
    "cpuCFSQuotaPeriod",
    "must be between 1ms and 1s, inclusive",
    { featureGates: { CustomCPUCFSQuotaPeriod: true } },
  );
});

Deno.test("validateKubeletConfiguration checks image garbage collection thresholds", () => {
  expectIssue(
    (c) => (c.imageGCHighThresholdPercent = 101),
    "imageGCHighThresholdPercent",
    "must be between 0 and 100, inclusive",
  );
  expectIssue(
    (c) => (c.imageGCLowThresholdPercent = 90),
    "imageGCLowThresholdPercent",
    "must be less than imageGCHighThresholdPercent (85)",
  );
});

Deno.test("validateKubeletConfiguration orders imageMaximumGCAge after imageMinimumGCAge", () => {
  expectIssue(
    (c) => (c.imageMaximumGCAge = 60_000),
    "imageMaximumGCAge",
    "must be greater than imageMinimumGCAge (2m0s)",
  );
  const issues = issuesAfter((c) => (c.imageMaximumGCAge = -1000));
  assert.deepEqual(issues.map((i) => i.message), ["must not be negative"]);
});

Deno.test("validateKubeletConfiguration keeps iptables bits within 0..31", () => {
  expectIssue(
    (c) => (c.iptablesMasqueradeBit = 32),
    "iptablesMasqueradeBit",
    "must be between 0 and 31, inclusive",
  );
});

Deno.test("validateKubeletConfiguration checks nodeStatusMaxImages and oomScoreAdj", () => {
  expectIssue((c) => (c.nodeStatusMaxImages = -2), "nodeStatusMaxImages", "must be -1 or greater");
  expectIssue(
    (c) => (c.oomScoreAdj = -1001),
    "oomScoreAdj",
    "must be between -1000 and 1000, inclusive",
  );
});

Deno.test("validateKubeletConfiguration checks parallel image pulls", () => {
  expectIssue(
    (c) => ((c.serializeImagePulls = false), (c.maxParallelImagePulls = 0)),
    "maxParallelImagePulls",
    "must be a positive number",
  );
  expectIssue(
    (c) => ((c.serializeImagePulls = true), (c.maxParallelImagePulls = 3)),
    "maxParallelImagePulls",
    "cannot be larger than 1 unless serializeImagePulls (--serialize-image-pulls) is false",
  );
});

Deno.test("validateKubeletConfiguration gates serverTLSBootstrap", () => {
  expectIssue(
    (c) => (c.serverTLSBootstrap = true),
    "serverTLSBootstrap",
    "requires feature gate RotateKubeletServerCertificate",
    { featureGates: { RotateKubeletServerCertificate: false } },
  );
});

Deno.test("validateKubeletConfiguration checks registerWithTaints", () => {
  expectIssue(
    (c) => (c.registerWithTaints = [{ key: "dedicated", value: "gpu", effect: "Sometimes" }]),
    "registerWithTaints[0]",
    "is not a valid taint: invalid taint effect: Sometimes, unsupported taint effect",
  );
  expectIssue(
    (c) => (c.registerWithTaints = [{ key: "-bad-", effect: "NoSchedule" }]),
    "registerWithTaints[0]",
    "is not a valid taint: invalid taint key: name part must consist of alphanumeric " +
      "characters, '-', '_' or '.', start and end with an alphanumeric character, and be at " +
      "most 63 characters",
  );
});

Deno.test("validateKubeletConfiguration checks topology manager policy and scope", () => {
  expectIssue(
    (c) => (c.topologyManagerPolicy = "strict"),
    "topologyManagerPolicy",
    'must be one of: "none", "best-effort", "restricted", "single-numa-node"',
  );
  expectIssue(
    (c) => (c.topologyManagerScope = "node"),
    "topologyManagerScope",
    'must be one of: "container", "pod"',
  );
});

Deno.test("validateKubeletConfiguration relates the shutdown grace periods", () => {
  expectIssue(
    (c) => ((c.shutdownGracePeriod = 10_000), (c.shutdownGracePeriodCriticalPods = 20_000)),
    "shutdownGracePeriodCriticalPods",
    "must be less than or equal to shutdownGracePeriod (10s)",
  );
  expectIssue(
    (c) => (c.shutdownGracePeriod = 500),
    "shutdownGracePeriod",
    "must be either zero or at least 1s",
  );
  expectIssue(
    (c) => (c.shutdownGracePeriod = 30_000),
    "shutdownGracePeriod",
    "requires feature gate GracefulNodeShutdown",
    { featureGates: { GracefulNodeShutdown: false } },
  );
});

Deno.test("validateKubeletConfiguration keeps shutdownGracePeriodByPodPriority exclusive", () => {
  const byPriority = [{ priority: 0, shutdownGracePeriodSeconds: 10 }];
  expectIssue(
    (c) => ((c.shutdownGracePeriodByPodPriority = byPriority), (c.shutdownGracePeriod = 30_000)),
    "shutdownGracePeriodByPodPriority",
    "cannot be set together with shutdownGracePeriod or shutdownGracePeriodCriticalPods",
  );
  expectIssue(
    (c) => (c.shutdownGracePeriodByPodPriority = byPriority),
    "shutdownGracePeriodByPodPriority",
    "requires feature gate GracefulNodeShutdownBasedOnPodPriority",
    { featureGates: { GracefulNodeShutdownBasedOnPodPriority: false } },
  );
});

Deno.test("validateKubeletConfiguration checks memorySwap.swapBehavior", () => {
  expectIssue(
    (c) => (c.memorySwap = { swapBehavior: "UnlimitedSwap" }),
    "memorySwap.swapBehavior",
    'must be one of: "", "NoSwap", "LimitedSwap"',
  );
  // NodeSwap could still be turned off before it was locked in 1.34; the 1.35 beta defaults
  // are cleared because 1.33 has neither gate on.
  expectIssue(
    (c) => {
      c.memorySwap = { swapBehavior: "LimitedSwap" };
      c.crashLoopBackOff = {};
      delete c.imagePullCredentialsVerificationPolicy;
    },
    "memorySwap.swapBehavior",
    "cannot be set when feature gate NodeSwap is disabled",
    { featureGates: { NodeSwap: false }, kubernetesVersion: "v1.33.0" },
  );
});

Deno.test("validateKubeletConfiguration reports a locked feature gate", () => {
  expectIssue(
    (c) => (c.featureGates = { NodeSwap: false }),
    "featureGates.NodeSwap",
    "cannot set feature gate NodeSwap to false, feature is locked to true",
  );
  // Locked in upstream's v1.36 registry, not among the gates validation consults.
  expectIssue(
    (c) => (c.featureGates = { SidecarContainers: false }),
    "featureGates.SidecarContainers",
    "cannot set feature gate SidecarContainers to false, feature is locked to true",
  );
  expectIssue(
    (c) => (c.featureGates = { GitRepoVolumeDriver: true }),
    "featureGates.GitRepoVolumeDriver",
    "cannot set feature gate GitRepoVolumeDriver to true, feature is locked to false",
  );
  assert.deepEqual(issuesAfter((c) => (c.featureGates = { SidecarContainers: true })), []);
});

Deno.test("validateKubeletConfiguration reports a feature gate upstream does not know", () => {
  expectIssue(
    (c) => (c.featureGates = { NoSuchGate: true }),
    "featureGates.NoSuchGate",
    "unrecognized feature gate: NoSuchGate",
  );
});

Deno.test("validateKubeletConfiguration lets command-line gates win over the file", () => {
  assert.equal(
    effectiveFeatureGates("v1.34.0", { MemoryQoS: true }, { MemoryQoS: false }).MemoryQoS,
    false,
  );
  expectIssue(
    (c) => ((c.featureGates = { MemoryQoS: true }), (c.memoryThrottlingFactor = 2)),
    "memoryThrottlingFactor",
    "must be greater than 0 and at most 1.0",
    { featureGates: { MemoryQoS: false } },
  );
});

Deno.test("validateKubeletConfiguration bounds crashLoopBackOff.maxContainerRestartPeriod", () => {
  expectIssue(
    (c) => (c.crashLoopBackOff = { maxContainerRestartPeriod: 600_000 }),
    "crashLoopBackOff.maxContainerRestartPeriod",
    "must be between 1s and 300s, inclusive",
    { featureGates: { KubeletCrashLoopBackOffMax: true } },
  );
  expectIssue(
    (c) => (c.crashLoopBackOff = { maxContainerRestartPeriod: 60_000 }),
    "crashLoopBackOff.maxContainerRestartPeriod",
    "must not be set unless feature gate KubeletCrashLoopBackOffMax is enabled",
    { featureGates: { KubeletCrashLoopBackOffMax: false } },
  );
});

Deno.test("validateKubeletConfiguration checks enforceNodeAllocatable values", () => {
  expectIssue(
    (c) => (c.enforceNodeAllocatable = ["pods", "everything"]),
    "enforceNodeAllocatable[1]",
    'must be one of: "pods", "system-reserved", "system-reserved-compressible", ' +
      '"kube-reserved", "kube-reserved-compressible", "none"',
  );
  expectIssue(
    (c) => (c.enforceNodeAllocatable = ["none", "pods"]),
    "enforceNodeAllocatable",
    'may not contain other enforcements with "none"',
  );
  expectIssue(
    (c) => (c.enforceNodeAllocatable = ["pods", "pods"]),
    "enforceNodeAllocatable[1]",
    "is a duplicate enforcement",
  );
});

Deno.test("validateKubeletConfiguration requires reserved cgroups and cgroupsPerQOS", () => {
  expectIssue(
    (c) => (c.enforceNodeAllocatable = ["pods", "system-reserved"]),
    "systemReservedCgroup",
    'must be specified when enforceNodeAllocatable contains "system-reserved"',
  );
  expectIssue(
    (c) => (c.cgroupsPerQOS = false),
    "cgroupsPerQOS",
    'must be true when enforceNodeAllocatable contains "pods"',
  );
  const issues = issuesAfter((c) => {
    c.enforceNodeAllocatable = ["kube-reserved", "kube-reserved-compressible"];
    c.kubeReservedCgroup = "/kube.slice";
  });
  assert.deepEqual(issues.map((i) => [i.path, i.message]), [[
    "enforceNodeAllocatable",
    'cannot contain both "kube-reserved" and "kube-reserved-compressible"',
  ]]);
});

Deno.test("validateKubeletConfiguration checks hairpinMode", () => {
  expectIssue(
    (c) => (c.hairpinMode = "bridge"),
    "hairpinMode",
    'must be one of: "none", "hairpin-veth", "promiscuous-bridge"',
  );
});

Deno.test("validateKubeletConfiguration checks reservedSystemCPUs", () => {
  expectIssue(
    (c) => ((c.reservedSystemCPUs = "0-1"), (c.systemReservedCgroup = "/system.slice")),
    "reservedSystemCPUs",
    "cannot be used with systemReservedCgroup (--system-reserved-cgroup) or " +
      "kubeReservedCgroup (--kube-reserved-cgroup)",
  );
  expectIssue(
    (c) => (c.reservedSystemCPUs = "3-1"),
    "reservedSystemCPUs",
    'must be a CPU list such as 0-3,8: invalid range "3-1" (3 > 1)',
  );
  assert.deepEqual(issuesAfter((c) => (c.reservedSystemCPUs = "0-3,8")), []);
});

Deno.test("validateKubeletConfiguration checks reservedMemory limits", () => {
  const issues = issuesAfter((c) => {
    c.reservedMemory = [
      { numaNode: 0, limits: { memory: "1Gi", cpu: "1" } },
      { numaNode: 0, limits: { memory: "0" } },
    ];
  });
  assert.deepEqual(issues.map((i) => [i.path, i.message]), [
    [
      "reservedMemory[0].limits.cpu",
      "is not supported for NUMA node 0: only memory and hugepages-<size> are",
    ],
    ["reservedMemory[1].limits.memory", "must not be zero for NUMA node 0"],
    ["reservedMemory[1].limits.memory", "is a duplicate for NUMA node 0"],
  ]);
});

Deno.test("validateKubeletConfiguration checks userNamespaces.idsPerPod", () => {
  expectIssue(
    (c) => (c.userNamespaces = { idsPerPod: 1000 }),
    "userNamespaces.idsPerPod",
    "must not be less than 65536",
  );
  expectIssue(
    (c) => (c.userNamespaces = { idsPerPod: 65536 + 1 }),
    "userNamespaces.idsPerPod",
    "must be a multiple of 65536",
  );
});

Deno.test("validateKubeletConfiguration applies the cgroup v1 rules only on cgroup v1", () => {
  const v1 = { cgroupV1: true };
  expectIssue(
    (c) => ((c.singleProcessOOMKill = false), (c.failCgroupV1 = false)),
    "singleProcessOOMKill",
    "must not be explicitly false on a host using cgroup v1",
    v1,
  );
  expectIssue(
    () => {},
    "failCgroupV1",
    "must be false on a host using cgroup v1 (cgroup v1 is in maintenance mode)",
    v1,
  );
  assert.deepEqual(issuesAfter((c) => (c.singleProcessOOMKill = false)), []);
});

Deno.test("validateKubeletConfiguration allows only the previous minor for hidden metrics", () => {
  assert.deepEqual(issuesAfter((c) => (c.showHiddenMetricsForVersion = "1.35")), []);
  expectIssue(
    (c) => (c.showHiddenMetricsForVersion = "1.30"),
    "showHiddenMetricsForVersion",
    "must be omitted or have the value '1.35': only the previous minor version is allowed",
  );
});

Deno.test("validateKubeletConfiguration checks the logging configuration", () => {
  expectIssue(
    (c) => (c.logging.format = "xml"),
    "logging.format",
    'must be a supported log format: "text" or "json"',
  );
  expectIssue(
    (c) => {
      c.logging.format = "json";
      c.logging.vmodule = [{ filePattern: "pod_workers", verbosity: 4 }];
    },
    "logging.vmodule",
    "is only supported for the text log format",
  );
});

Deno.test("validateKubeletConfiguration checks the tracing configuration", () => {
  expectIssue(
    (c) => (c.tracing = { samplingRatePerMillion: -1 }),
    "tracing.samplingRatePerMillion",
    "must not be negative",
  );
  expectIssue(
    (c) => (c.tracing = { endpoint: "dn%2s://localhost:4317" }),
    "tracing.endpoint",
    'must be a valid URL: parse "dn%2s://localhost:4317": ' +
      "first path segment in URL cannot contain colon",
  );
  expectIssue(
    (c) => (c.tracing = { endpoint: "http://collector:4317" }),
    "tracing.endpoint",
    'has unsupported scheme "http": options are none, dns, unix, or unix-abstract',
  );
  assert.deepEqual(issuesAfter((c) => (c.tracing = { endpoint: "localhost:4317" })), []);
});

Deno.test("validateKubeletConfiguration checks memoryThrottlingFactor", () => {
  expectIssue(
    (c) => (c.memoryThrottlingFactor = 1.1),
    "memoryThrottlingFactor",
    "must be greater than 0 and at most 1.0",
  );
  const { memoryThrottlingFactor: _, ...unset } = defaulted();
  const issues = validateKubeletConfiguration(unset as KubeletConfiguration, {
    featureGates: { MemoryQoS: true },
  });
  assert.deepEqual(issues.map((i) => [i.path, i.message]), [[
    "memoryThrottlingFactor",
    "must be set when feature gate MemoryQoS is enabled",
  ]]);
});

Deno.test("validateKubeletConfiguration requires containerRuntimeEndpoint", () => {
  expectIssue(
    (c) => (c.containerRuntimeEndpoint = ""),
    "containerRuntimeEndpoint",
    "must be specified",
  );
});

Deno.test("validateKubeletConfiguration gates enableSystemLogQuery", () => {
  // NodeLogQuery is GA and locked on in 1.36: no gate to set.
  expectIssue(
    (c) => ((c.enableSystemLogQuery = true), (c.enableSystemLogHandler = false)),
    "enableSystemLogQuery",
    "requires enableSystemLogHandler to be true",
  );
});

Deno.test("validateKubeletConfiguration checks container log settings", () => {
  expectIssue(
    (c) => (c.containerLogMaxFiles = 1),
    "containerLogMaxFiles",
    "must be greater than 1",
  );
  expectIssue(
    (c) => (c.containerLogMaxWorkers = 0),
    "containerLogMaxWorkers",
    "must be at least 1",
  );
  const issue = expectIssue(
    (c) => (c.containerLogMonitorInterval = 1000),
    "containerLogMonitorInterval",
    "must be a duration of at least 3s",
  );
  assert.equal(issue?.value, "1s");
});

Deno.test("validateKubeletConfiguration requires an absolute, clean, ASCII podLogsDir", () => {
  expectIssue(
    (c) => (c.podLogsDir = "/var/log//pods"),
    "podLogsDir",
    "must be normalized (/var/log/pods)",
  );
  expectIssue(
    (c) => (c.podLogsDir = "/var/log/pöds"),
    "podLogsDir",
    "must contain ASCII characters only",
  );
  const issues = issuesAfter((c) => (c.podLogsDir = "logs"));
  assert.deepEqual(issues.map((i) => i.message), ["must be an absolute path"]);
});

Deno.test("validateKubeletConfiguration reports a bad eviction threshold", () => {
  const issue = expectIssue(
    (c) => (c.evictionHard = { "memory.available": "-100Mi" }),
    "evictionHard",
    "has a bad entry: eviction threshold memory.available must be positive: -100Mi",
  );
  assert.deepEqual(issue?.value, { "memory.available": "-100Mi" });
  expectIssue(
    (c) => (c.evictionSoft = { "memory.available": "500Mi" }),
    "evictionSoft",
    "has a bad entry: grace period must be specified for the soft eviction threshold " +
      "memory.available",
  );
});

Deno.test("validateKubeletConfiguration checks image pull credential verification", () => {
  const gate = { featureGates: { KubeletEnsureSecretPulledImages: true } };
  expectIssue(
    (c) => (c.imagePullCredentialsVerificationPolicy = "Sometimes"),
    "imagePullCredentialsVerificationPolicy",
    'must be one of: "NeverVerify", "NeverVerifyPreloadedImages", ' +
      '"NeverVerifyAllowlistedImages", "AlwaysVerify"',
    gate,
  );
  expectIssue(
    (c) => {
      c.imagePullCredentialsVerificationPolicy = "NeverVerifyAllowlistedImages";
      c.preloadedImagesVerificationAllowlist = ["registry.k8s.io/pause:3.10"];
    },
    "preloadedImagesVerificationAllowlist[0]",
    "is not a valid image pattern: neither tag nor digest is accepted in an image reference: " +
      "registry.k8s.io/pause:3.10",
    gate,
  );
});

Deno.test("validateKubeletConfiguration accepts only normalized allowlist patterns", () => {
  const gate = { featureGates: { KubeletEnsureSecretPulledImages: true } };
  const problems = (pattern: string) =>
    issuesAfter((c) => {
      c.imagePullCredentialsVerificationPolicy = "NeverVerifyAllowlistedImages";
      c.preloadedImagesVerificationAllowlist = [pattern];
    }, gate).map((i) => i.message);
  assert.deepEqual(problems("registry.k8s.io/pause"), []);
  assert.deepEqual(problems("registry.k8s.io/*"), []);
  assert.deepEqual(problems("docker.io/library/nginx"), []);
  assert.deepEqual(problems("nginx"), [
    "is not a valid image pattern: neither tag nor digest is accepted in an image reference: nginx",
  ]);
  assert.deepEqual(problems("registry.k8s.io/pa*"), [
    "is not a valid image pattern: not a valid wildcard pattern, only patterns ending with '/*' " +
    "are allowed: registry.k8s.io/pa*",
  ]);
});
