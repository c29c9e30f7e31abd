// Expected values are typed in from upstream Kubernetes v1.36.3: k8s.io/kubelet v0.36.3
// config/v1beta1/types.go, pkg/kubelet/apis/config/v1beta1/defaults.go,
// pkg/kubelet/eviction/defaults_linux.go, cmd/kubelet/app/options/options.go and
// k8s.io/component-base v0.36.3 logs/api/v1. They are deliberately not read from the table.

import assert from "node:assert/strict";
import { type AnyField, applyDefaults, decode, f } from "./config_schema.ts";
import { Document } from "yaml";
import {
  applyDependentDefaults,
  DEFAULT_EVICTION_HARD,
  KUBELET_CONFIG_API_VERSION,
  KUBELET_CONFIG_KIND,
  type KubeletConfiguration,
  kubeletConfigurationFields,
} from "./config_types.ts";

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;

function defaulted(decoded: Record<string, unknown> = {}): KubeletConfiguration {
  const cfg = applyDefaults(kubeletConfigurationFields, decoded);
  applyDependentDefaults(cfg, decoded);
  return cfg;
}

/**
 * Decodes a value as if it had been read from a config file. The nodes are built with
 * `new Document`, which, unlike the YAML parser, needs no environment access.
 */
function decodeFile(value: Record<string, unknown>): Record<string, unknown> {
  const root = f.object(kubeletConfigurationFields, { go: "KubeletConfiguration", doc: "root" });
  const nodes = new Document(value).contents;
  return decode(root, nodes, "", { file: "kubelet.yaml" }) as Record<string, unknown>;
}

/** Every field of the table, nested ones and list or map elements included, by path. */
function allFields(fields: Readonly<Record<string, AnyField>>, prefix = ""): [string, AnyField][] {
  const out: [string, AnyField][] = [];
  const visit = (path: string, fld: AnyField) => {
    out.push([path, fld]);
    const spec = fld.spec;
    if (spec.type === "object") out.push(...allFields(spec.fields, path));
    if (spec.type === "list" || spec.type === "map") visit(`${path}[]`, spec.of);
  };
  for (const [name, fld] of Object.entries(fields)) {
    visit(prefix === "" ? name : `${prefix}.${name}`, fld);
  }
  return out;
}

function nestedFields(path: string): Readonly<Record<string, AnyField>> {
  let fields: Readonly<Record<string, AnyField>> = kubeletConfigurationFields;
  for (const part of path.split(".")) {
    let fld = fields[part];
    assert.ok(fld, `no field ${part} in ${path}`);
    if (fld.spec.type === "list") fld = fld.spec.of;
    assert.equal(fld.spec.type, "object", path);
    if (fld.spec.type !== "object") throw new Error("unreachable");
    fields = fld.spec.fields;
  }
  return fields;
}

Deno.test("KUBELET_CONFIG_API_VERSION and KUBELET_CONFIG_KIND name the v1beta1 type", () => {
  assert.equal(KUBELET_CONFIG_API_VERSION, "kubelet.config.k8s.io/v1beta1");
  assert.equal(KUBELET_CONFIG_KIND, "KubeletConfiguration");
});

Deno.test("kubeletConfigurationFields defaults match upstream defaults.go", () => {
  const cfg = defaulted();

  assert.equal(cfg.enableServer, true);
  assert.equal(cfg.staticPodPath, undefined);
  assert.equal(cfg.podLogsDir, "/var/log/pods");
  assert.equal(cfg.syncFrequency, 1 * MINUTE);
  assert.equal(cfg.fileCheckFrequency, 20 * SECOND);
  assert.equal(cfg.httpCheckFrequency, 20 * SECOND);
  assert.equal(cfg.address, "0.0.0.0");
  assert.equal(cfg.port, 10250);
  // No default upstream: the Go zero value, 0, disables the read-only port.
  assert.equal(cfg.readOnlyPort ?? 0, 0);
  assert.equal(cfg.readOnlyPort, undefined);

  assert.equal(cfg.authentication.anonymous.enabled, false);
  assert.equal(cfg.authentication.webhook.enabled, true);
  assert.equal(cfg.authentication.webhook.cacheTTL, 2 * MINUTE);
  assert.equal(cfg.authentication.x509.clientCAFile, undefined);
  assert.equal(cfg.authorization.mode, "Webhook");
  assert.equal(cfg.authorization.webhook.cacheAuthorizedTTL, 5 * MINUTE);
  assert.equal(cfg.authorization.webhook.cacheUnauthorizedTTL, 30 * SECOND);

  assert.equal(cfg.registryPullQPS, 5);
  assert.equal(cfg.registryBurst, 10);
  assert.equal(cfg.eventRecordQPS, 50);
  assert.equal(cfg.eventBurst, 100);
  assert.equal(cfg.enableDebuggingHandlers, true);
  assert.equal(cfg.enableContentionProfiling, undefined);
  assert.equal(cfg.healthzPort, 10248);
  assert.equal(cfg.healthzBindAddress, "127.0.0.1");
  assert.equal(cfg.oomScoreAdj, -999);
  assert.equal(cfg.clusterDomain, undefined);
  assert.equal(cfg.clusterDNS, undefined);
  assert.equal(cfg.streamingConnectionIdleTimeout, 4 * HOUR);
  assert.equal(cfg.nodeStatusUpdateFrequency, 10 * SECOND);
  assert.equal(cfg.nodeStatusReportFrequency, 5 * MINUTE);
  assert.equal(cfg.nodeLeaseDurationSeconds, 40);
  assert.equal(cfg.imageMinimumGCAge, 2 * MINUTE);
  assert.equal(cfg.imageMaximumGCAge ?? 0, 0);
  assert.equal(cfg.imageGCHighThresholdPercent, 85);
  assert.equal(cfg.imageGCLowThresholdPercent, 80);
  assert.equal(cfg.volumeStatsAggPeriod, 1 * MINUTE);
  assert.equal(cfg.cgroupsPerQOS, true);
  assert.equal(cfg.cgroupDriver, "cgroupfs");
  assert.equal(cfg.cpuManagerPolicy, "none");
  assert.equal(cfg.singleProcessOOMKill, undefined);
  assert.equal(cfg.cpuManagerReconcilePeriod, 10 * SECOND);
  assert.equal(cfg.memoryManagerPolicy, "None");
  assert.equal(cfg.topologyManagerPolicy, "none");
  assert.equal(cfg.topologyManagerScope, "container");
  assert.equal(cfg.runtimeRequestTimeout, 2 * MINUTE);
  assert.equal(cfg.hairpinMode, "promiscuous-bridge");
  assert.equal(cfg.maxPods, 110);
  assert.equal(cfg.podPidsLimit, -1);
  assert.equal(cfg.resolvConf, "/etc/resolv.conf");
  assert.equal(cfg.cpuCFSQuota, true);
  assert.equal(cfg.cpuCFSQuotaPeriod, 100);
  assert.equal(cfg.nodeStatusMaxImages, 50);
  assert.equal(cfg.maxOpenFiles, 1_000_000);
  // Upstream's default is application/vnd.kubernetes.protobuf: this kubelet speaks JSON only.
  assert.equal(cfg.contentType, "application/json");
  assert.equal(cfg.kubeAPIQPS, 50);
  assert.equal(cfg.kubeAPIBurst, 100);
  assert.equal(cfg.serializeImagePulls, true);
  assert.equal(cfg.maxParallelImagePulls, undefined);
  assert.deepEqual(cfg.evictionHard, {
    "memory.available": "100Mi",
    "nodefs.available": "10%",
    "nodefs.inodesFree": "5%",
    "imagefs.available": "15%",
    "imagefs.inodesFree": "5%",
  });
  assert.equal(cfg.evictionSoft, undefined);
  assert.equal(cfg.evictionPressureTransitionPeriod, 5 * MINUTE);
  assert.equal(cfg.evictionMaxPodGracePeriod ?? 0, 0);
  assert.equal(cfg.mergeDefaultEvictionSettings, false);
  assert.equal(cfg.podsPerCore ?? 0, 0);
  assert.equal(cfg.enableControllerAttachDetach, true);
  assert.equal(cfg.makeIPTablesUtilChains, true);
  assert.equal(cfg.iptablesMasqueradeBit, 14);
  assert.equal(cfg.iptablesDropBit, 15);
  assert.equal(cfg.featureGates, undefined);
  assert.equal(cfg.failSwapOn, true);
  assert.deepEqual(cfg.memorySwap, {});
  assert.equal(cfg.containerLogMaxSize, "10Mi");
  assert.equal(cfg.containerLogMaxFiles, 5);
  assert.equal(cfg.containerLogMaxWorkers, 1);
  assert.equal(cfg.containerLogMonitorInterval, 10 * SECOND);
  assert.equal(cfg.configMapAndSecretChangeDetectionStrategy, "Watch");
  assert.equal(cfg.systemReserved, undefined);
  assert.equal(cfg.kubeReserved, undefined);
  assert.deepEqual(cfg.enforceNodeAllocatable, ["pods"]);
  assert.equal(cfg.volumePluginDir, "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/");
  assert.deepEqual(cfg.logging, {
    format: "text",
    flushFrequency: 5 * SECOND,
    verbosity: 0,
    options: { text: { infoBufferSize: "0" }, json: { infoBufferSize: "0" } },
  });
  assert.equal(cfg.enableSystemLogHandler, true);
  assert.equal(cfg.enableSystemLogQuery, undefined);
  assert.equal(cfg.shutdownGracePeriod ?? 0, 0);
  assert.equal(cfg.shutdownGracePeriodCriticalPods ?? 0, 0);
  assert.equal(cfg.shutdownGracePeriodByPodPriority, undefined);
  assert.equal(cfg.reservedMemory, undefined);
  assert.equal(cfg.enableProfilingHandler, true);
  assert.equal(cfg.enableDebugFlagsHandler, true);
  assert.equal(cfg.seccompDefault, false);
  assert.equal(cfg.memoryThrottlingFactor, 0.9);
  assert.equal(cfg.memoryReservationPolicy, "None");
  assert.equal(cfg.registerWithTaints, undefined);
  assert.equal(cfg.registerNode, true);
  assert.equal(cfg.tracing, undefined);
  assert.equal(cfg.localStorageCapacityIsolation, true);
  assert.equal(cfg.containerRuntimeEndpoint, "unix:///run/containerd/containerd.sock");
  assert.equal(cfg.imageServiceEndpoint, undefined);
  assert.equal(cfg.failCgroupV1, true);
  assert.equal(cfg.userNamespaces, undefined);
  // Both gates are beta and on by default since v1.35.
  assert.equal(cfg.crashLoopBackOff.maxContainerRestartPeriod, 300 * SECOND);
  assert.equal(cfg.imagePullCredentialsVerificationPolicy, "NeverVerifyPreloadedImages");
});

Deno.test("kubeletConfigurationFields lists every field of upstream's types.go in order", () => {
  // KubeletConfiguration, without the TypeMeta fields apiVersion and kind.
  assert.deepEqual(Object.keys(kubeletConfigurationFields), [
    "enableServer",
    "staticPodPath",
    "podLogsDir",
    "syncFrequency",
    "fileCheckFrequency",
    "httpCheckFrequency",
    "staticPodURL",
    "staticPodURLHeader",
    "address",
    "port",
    "readOnlyPort",
    "tlsCertFile",
    "tlsPrivateKeyFile",
    "tlsCipherSuites",
    "tlsCurvePreferences",
    "tlsMinVersion",
    "rotateCertificates",
    "serverTLSBootstrap",
    "authentication",
    "authorization",
    "registryPullQPS",
    "registryBurst",
    "imagePullCredentialsVerificationPolicy",
    "preloadedImagesVerificationAllowlist",
    "eventRecordQPS",
    "eventBurst",
    "enableDebuggingHandlers",
    "enableContentionProfiling",
    "healthzPort",
    "healthzBindAddress",
    "oomScoreAdj",
    "clusterDomain",
    "clusterDNS",
    "streamingConnectionIdleTimeout",
    "nodeStatusUpdateFrequency",
    "nodeStatusReportFrequency",
    "nodeLeaseDurationSeconds",
    "imageMinimumGCAge",
    "imageMaximumGCAge",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "volumeStatsAggPeriod",
    "kubeletCgroups",
    "systemCgroups",
    "cgroupRoot",
    "cgroupsPerQOS",
    "cgroupDriver",
    "cpuManagerPolicy",
    "singleProcessOOMKill",
    "cpuManagerPolicyOptions",
    "cpuManagerReconcilePeriod",
    "memoryManagerPolicy",
    "topologyManagerPolicy",
    "topologyManagerScope",
    "topologyManagerPolicyOptions",
    "qosReserved",
    "runtimeRequestTimeout",
    "hairpinMode",
    "maxPods",
    "podCIDR",
    "podPidsLimit",
    "resolvConf",
    "runOnce",
    "cpuCFSQuota",
    "cpuCFSQuotaPeriod",
    "nodeStatusMaxImages",
    "maxOpenFiles",
    "contentType",
    "kubeAPIQPS",
    "kubeAPIBurst",
    "serializeImagePulls",
    "maxParallelImagePulls",
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionPressureTransitionPeriod",
    "evictionMaxPodGracePeriod",
    "evictionMinimumReclaim",
    "mergeDefaultEvictionSettings",
    "podsPerCore",
    "enableControllerAttachDetach",
    "protectKernelDefaults",
    "makeIPTablesUtilChains",
    "iptablesMasqueradeBit",
    "iptablesDropBit",
    "featureGates",
    "failSwapOn",
    "memorySwap",
    "containerLogMaxSize",
    "containerLogMaxFiles",
    "containerLogMaxWorkers",
    "containerLogMonitorInterval",
    "configMapAndSecretChangeDetectionStrategy",
    "systemReserved",
    "kubeReserved",
    "reservedSystemCPUs",
    "showHiddenMetricsForVersion",
    "systemReservedCgroup",
    "kubeReservedCgroup",
    "enforceNodeAllocatable",
    "allowedUnsafeSysctls",
    "volumePluginDir",
    "providerID",
    "kernelMemcgNotification",
    "logging",
    "enableSystemLogHandler",
    "enableSystemLogQuery",
    "shutdownGracePeriod",
    "shutdownGracePeriodCriticalPods",
    "shutdownGracePeriodByPodPriority",
    "crashLoopBackOff",
    "reservedMemory",
    "enableProfilingHandler",
    "enableDebugFlagsHandler",
    "seccompDefault",
    "memoryThrottlingFactor",
    "memoryReservationPolicy",
    "registerWithTaints",
    "registerNode",
    "tracing",
    "localStorageCapacityIsolation",
    "containerRuntimeEndpoint",
    "imageServiceEndpoint",
    "failCgroupV1",
    "userNamespaces",
  ]);
});

Deno.test("kubeletConfigurationFields describes every nested upstream struct", () => {
  const nested: Record<string, string[]> = {
    "authentication": ["x509", "webhook", "anonymous"],
    "authentication.x509": ["clientCAFile"],
    "authentication.webhook": ["enabled", "cacheTTL"],
    "authentication.anonymous": ["enabled"],
    "authorization": ["mode", "webhook"],
    "authorization.webhook": ["cacheAuthorizedTTL", "cacheUnauthorizedTTL"],
    "memorySwap": ["swapBehavior"],
    "logging": ["format", "flushFrequency", "verbosity", "vmodule", "options"],
    "logging.vmodule": ["filePattern", "verbosity"],
    "logging.options": ["text", "json"],
    "logging.options.text": ["splitStream", "infoBufferSize"],
    "logging.options.json": ["splitStream", "infoBufferSize"],
    "shutdownGracePeriodByPodPriority": ["priority", "shutdownGracePeriodSeconds"],
    "crashLoopBackOff": ["maxContainerRestartPeriod"],
    "reservedMemory": ["numaNode", "limits"],
    "registerWithTaints": ["key", "value", "effect", "timeAdded"],
    "tracing": ["endpoint", "samplingRatePerMillion"],
    "userNamespaces": ["idsPerPod"],
  };
  for (const [path, names] of Object.entries(nested)) {
    assert.deepEqual(Object.keys(nestedFields(path)), names, path);
  }
});

Deno.test("kubeletConfigurationFields gives every field a doc and a Go type", () => {
  const fields = allFields(kubeletConfigurationFields);
  assert.ok(fields.length > 150, `only ${fields.length} fields`);
  for (const [path, fld] of fields) {
    assert.ok(fld.options.doc.trim().length > 0, `${path} has no doc`);
    assert.ok(fld.options.go.trim().length > 0, `${path} has no Go type`);
    assert.ok(!fld.options.doc.includes("\n"), `${path} doc is not one line`);
  }
});

Deno.test("kubeletConfigurationFields binds each flag to one field only", () => {
  const seen = new Map<string, string>();
  for (const [path, fld] of allFields(kubeletConfigurationFields)) {
    const flag = fld.options.flag;
    if (flag === undefined) continue;
    assert.ok(!flag.startsWith("-"), `${path}: flag ${flag} has dashes`);
    assert.ok(!seen.has(flag), `flag ${flag} is bound to ${seen.get(flag)} and ${path}`);
    seen.set(flag, path);
  }
});

Deno.test("kubeletConfigurationFields binds the flags of AddKubeletConfigFlags", () => {
  const byFlag = new Map<string, AnyField>();
  const pathOf = new Map<string, string>();
  for (const [path, fld] of allFields(kubeletConfigurationFields)) {
    if (fld.options.flag) {
      byFlag.set(fld.options.flag, fld);
      pathOf.set(fld.options.flag, path);
    }
  }
  const expected: Record<string, string> = {
    "anonymous-auth": "authentication.anonymous.enabled",
    "authentication-token-webhook": "authentication.webhook.enabled",
    "authorization-mode": "authorization.mode",
    "client-ca-file": "authentication.x509.clientCAFile",
    "contention-profiling": "enableContentionProfiling",
    "kube-api-content-type": "contentType",
    "log-flush-frequency": "logging.flushFrequency",
    "manifest-url": "staticPodURL",
    "manifest-url-header": "staticPodURLHeader",
    "minimum-image-ttl-duration": "imageMinimumGCAge",
    "pod-manifest-path": "staticPodPath",
    "pod-max-pids": "podPidsLimit",
    "registry-qps": "registryPullQPS",
    "event-qps": "eventRecordQPS",
    "reserved-cpus": "reservedSystemCPUs",
    "rotate-server-certificates": "serverTLSBootstrap",
    "runonce": "runOnce",
    "v": "logging.verbosity",
    "fail-cgroupv1": "failCgroupV1",
  };
  for (const [flag, path] of Object.entries(expected)) {
    assert.equal(pathOf.get(flag), path, flag);
  }
  const formats: Record<string, string> = {
    "eviction-hard": "langle-map",
    "eviction-soft": "langle-map",
    "eviction-soft-grace-period": "map",
    "eviction-minimum-reclaim": "map",
    "feature-gates": "map",
    "system-reserved": "map",
    "kube-reserved": "map",
    "qos-reserved": "map",
    "manifest-url-header": "map-slice",
    "register-with-taints": "taints",
    "cluster-dns": "list",
    "tls-cipher-suites": "list",
    "enforce-node-allocatable": "list",
    "allowed-unsafe-sysctls": "list",
  };
  for (const [flag, format] of Object.entries(formats)) {
    assert.equal(byFlag.get(flag)?.options.flagFormat, format, flag);
  }
  // Config-only fields have no flag upstream.
  for (
    const path of [
      "podLogsDir",
      "nodeStatusReportFrequency",
      "nodeLeaseDurationSeconds",
      "imageMaximumGCAge",
      "containerLogMaxWorkers",
      "shutdownGracePeriod",
      "seccompDefault",
      "memoryThrottlingFactor",
      "iptablesMasqueradeBit",
    ] as const
  ) {
    assert.equal(kubeletConfigurationFields[path].options.flag, undefined, path);
  }
});

Deno.test("kubeletConfigurationFields declares upstream's Go types", () => {
  const t = kubeletConfigurationFields;
  assert.equal(t.enableServer.options.go, "*bool");
  assert.equal(t.syncFrequency.options.go, "metav1.Duration");
  assert.equal(t.cpuCFSQuotaPeriod.options.go, "*metav1.Duration");
  assert.equal(t.staticPodURLHeader.options.go, "map[string][]string");
  assert.equal(t.tlsCurvePreferences.options.go, "[]int32");
  assert.equal(t.podPidsLimit.options.go, "*int64");
  assert.equal(t.maxOpenFiles.options.go, "int64");
  assert.equal(t.resolvConf.options.go, "*string");
  assert.equal(t.memoryThrottlingFactor.options.go, "*float64");
  assert.equal(t.featureGates.options.go, "map[string]bool");
  assert.equal(t.registerWithTaints.options.go, "[]v1.Taint");
  assert.equal(t.tracing.options.go, "*tracingapi.TracingConfiguration");
  assert.equal(t.logging.options.go, "logsapi.LoggingConfiguration");
  assert.equal(
    t.configMapAndSecretChangeDetectionStrategy.options.go,
    "ResourceChangeDetectionStrategy",
  );
  assert.equal(nestedFields("reservedMemory").limits?.options.go, "v1.ResourceList");
});

Deno.test("applyDependentDefaults takes nodeStatusReportFrequency from an explicit update frequency", () => {
  assert.equal(
    defaulted({ nodeStatusUpdateFrequency: 20 * SECOND }).nodeStatusReportFrequency,
    20 * SECOND,
  );
  // Explicitly set to the default value still counts as set when the decoded object is given.
  assert.equal(
    defaulted({ nodeStatusUpdateFrequency: 10 * SECOND }).nodeStatusReportFrequency,
    10 * SECOND,
  );
  assert.equal(
    defaulted({ nodeStatusReportFrequency: 1 * MINUTE }).nodeStatusReportFrequency,
    1 * MINUTE,
  );
  const cfg = applyDefaults(kubeletConfigurationFields, { nodeStatusUpdateFrequency: 30 * SECOND });
  applyDependentDefaults(cfg);
  assert.equal(cfg.nodeStatusReportFrequency, 30 * SECOND);
});

Deno.test("applyDependentDefaults turns a negative podPidsLimit into -1", () => {
  assert.equal(defaulted({ podPidsLimit: -5 }).podPidsLimit, -1);
  assert.equal(defaulted({ podPidsLimit: 4096 }).podPidsLimit, 4096);
});

Deno.test("applyDependentDefaults serializes image pulls unless parallel pulls are set", () => {
  assert.equal(defaulted({ maxParallelImagePulls: 1 }).serializeImagePulls, true);
  assert.equal(defaulted({ maxParallelImagePulls: 5 }).serializeImagePulls, false);
  assert.equal(
    defaulted({ maxParallelImagePulls: 5, serializeImagePulls: true }).serializeImagePulls,
    true,
  );
});

Deno.test("applyDependentDefaults keeps a given evictionHard unless merging is asked for", () => {
  assert.deepEqual(defaulted({ evictionHard: { "memory.available": "1Gi" } }).evictionHard, {
    "memory.available": "1Gi",
  });
  assert.deepEqual(defaulted({ evictionHard: {} }).evictionHard, {});
  assert.deepEqual(
    defaulted({ evictionHard: { "memory.available": "1Gi" }, mergeDefaultEvictionSettings: true })
      .evictionHard,
    {
      "memory.available": "1Gi",
      "nodefs.available": "10%",
      "nodefs.inodesFree": "5%",
      "imagefs.available": "15%",
      "imagefs.inodesFree": "5%",
    },
  );
  // The shared default is never handed out to be mutated.
  const cfg = defaulted();
  assert.notEqual(cfg.evictionHard, DEFAULT_EVICTION_HARD);
  assert.ok(Object.isFrozen(DEFAULT_EVICTION_HARD));
});

Deno.test("applyDependentDefaults follows the feature gates the defaults depend on", () => {
  const off = defaulted({
    featureGates: { KubeletCrashLoopBackOffMax: false, KubeletEnsureSecretPulledImages: false },
  });
  assert.equal(off.crashLoopBackOff.maxContainerRestartPeriod, undefined);
  assert.equal(off.imagePullCredentialsVerificationPolicy, undefined);
  const set = defaulted({
    crashLoopBackOff: { maxContainerRestartPeriod: 10 * SECOND },
    imagePullCredentialsVerificationPolicy: "AlwaysVerify",
  });
  assert.equal(set.crashLoopBackOff.maxContainerRestartPeriod, 10 * SECOND);
  assert.equal(set.imagePullCredentialsVerificationPolicy, "AlwaysVerify");
});

Deno.test("kubeletConfigurationFields decodes a config file strictly", () => {
  const decoded = decodeFile({
    syncFrequency: "30s",
    authorization: { mode: "AlwaysAllow" },
    registerWithTaints: [{ key: "dedicated", value: "infra", effect: "NoSchedule" }],
    reservedMemory: [{ numaNode: 0, limits: { memory: "1Gi" } }],
    logging: { format: "json", vmodule: [{ filePattern: "kubelet", verbosity: 4 }] },
    tracing: { samplingRatePerMillion: 100 },
  });
  const cfg = defaulted(decoded);
  assert.equal(cfg.syncFrequency, 30 * SECOND);
  assert.equal(cfg.authorization.mode, "AlwaysAllow");
  assert.equal(cfg.authorization.webhook.cacheAuthorizedTTL, 5 * MINUTE);
  assert.deepEqual(cfg.registerWithTaints, [{
    key: "dedicated",
    value: "infra",
    effect: "NoSchedule",
  }]);
  assert.deepEqual(cfg.reservedMemory, [{ numaNode: 0, limits: { memory: "1Gi" } }]);
  assert.equal(cfg.logging.format, "json");
  assert.deepEqual(cfg.logging.vmodule, [{ filePattern: "kubelet", verbosity: 4 }]);
  assert.deepEqual(cfg.tracing, { samplingRatePerMillion: 100 });

  assert.throws(() => decodeFile({ cgroupDriver: "sytemd" }), /cgroupDriver.*must be one of/);
  assert.throws(() => decodeFile({ authorization: { mode: "RBAC" } }), /authorization\.mode/);
  // TimeOrMetaDuration reads integer nanoseconds too; a metav1.Duration only duration text.
  assert.equal(
    defaulted(decodeFile({ logging: { flushFrequency: 5e9 } })).logging.flushFrequency,
    5 * SECOND,
  );
  assert.throws(() => decodeFile({ syncFrequency: 5e9 }), /syncFrequency.*must be a duration/);
  assert.throws(() => decodeFile({ nodeStatusUpdateFrequncy: "10s" }), /unknown field/);
});
