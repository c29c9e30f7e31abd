import assert from "node:assert/strict";
import { join } from "node:path";
import { ConfigError } from "../apis/config_schema.ts";
import { featureGateStates } from "../metrics/component_metrics.ts";
import { KUBELET_GATES, unsupportedFeatureGates } from "./feature_gates.ts";
import { loadKubeletConfiguration } from "./kubelet_config.ts";

const SRC = new URL("../", import.meta.url);

/**
 * Every gate the Go kubelet v1.36.3 reads, locked or not, found by grepping the packages
 * `go list -deps k8s.io/kubernetes/cmd/kubelet` names for `Enabled(<gate>)`: pkg/kubelet,
 * cmd/kubelet, pkg/volume, pkg/credentialprovider; component-base's logs, metrics and zpages;
 * client-go's rest, transport, tools/cache and util/watchlist; apiserver's x509 authenticator,
 * webhook authorizer, flagz and statusz; and pkg/api/pod and pkg/apis/core/validation as the
 * kubelet validates static pods with them. A gate upstream starts to read is added here, and the
 * test then asks for its row in KUBELET_GATES.
 */
const KUBELET_READ = [
  "APIServerTracing",
  "AllowDNSOnlyNodeCSR",
  "AllowParsingUserUIDFromCertAuth",
  "AtomicFIFO",
  "AuthorizeWithSelectors",
  "CBORServingAndStorage",
  "CPUManagerPolicyAlphaOptions",
  "CPUManagerPolicyBetaOptions",
  "CRIListStreaming",
  "CSIVolumeHealth",
  "ChangeContainerStatusOnKubeletRestart",
  "ClientsAllowCARotation",
  "ClientsAllowCBOR",
  "ClientsAllowTLSCacheGC",
  "ClientsPreferCBOR",
  "ClusterTrustBundleProjection",
  "ComponentFlagz",
  "ComponentStatusz",
  "ContainerCheckpoint",
  "ContainerRestartRules",
  "ContainerStopSignals",
  "ContextualLogging",
  "CustomCPUCFSQuotaPeriod",
  "DRAExtendedResource",
  "DRAWorkloadResourceClaims",
  "DisableCPUQuotaWithExclusiveCPUs",
  "DisableNodeKubeProxyVersion",
  "DynamicResourceAllocation",
  "EnvFiles",
  "EventedPLEG",
  "ExtendWebSocketsToKubelet",
  "GitRepoVolumeDriver",
  "GracefulNodeShutdown",
  "GracefulNodeShutdownBasedOnPodPriority",
  "HostnameOverride",
  "ImageMaximumGCAge",
  "ImageVolume",
  "ImageVolumeWithDigest",
  "InOrderInformers",
  "InOrderInformersBatchProcess",
  "InPlacePodLevelResourcesVerticalScaling",
  "InPlacePodVerticalScaling",
  "InPlacePodVerticalScalingExclusiveCPUs",
  "InPlacePodVerticalScalingExclusiveMemory",
  "InPlacePodVerticalScalingInitContainers",
  "InformerResourceVersion",
  "KubeletCrashLoopBackOffMax",
  "KubeletEnsureSecretPulledImages",
  "KubeletFineGrainedAuthz",
  "KubeletInUserNamespace",
  "KubeletPSI",
  "KubeletPodResourcesGet",
  "KubeletPodResourcesListUseActivePods",
  "KubeletRegistrationGetOnExistsOnly",
  "KubeletSeparateDiskGC",
  "KubeletServiceAccountTokenForCredentialProviders",
  "LocalStorageCapacityIsolationFSQuotaMonitoring",
  "LoggingAlphaOptions",
  "LoggingBetaOptions",
  "MatchLabelKeysInPodTopologySpread",
  "MatchLabelKeysInPodTopologySpreadSelectorMerge",
  "MemoryQoS",
  "MutableCSINodeAllocatableCount",
  "NativeHistograms",
  "NodeDeclaredFeatures",
  "NodeLogQuery",
  "NodeSwap",
  "PLEGOnDemandRelist",
  "PodAndContainerStatsFromCRI",
  "PodCertificateRequest",
  "PodDeletionCost",
  "PodLevelResourceManagers",
  "PodLevelResources",
  "PodLifecycleSleepAction",
  "PodLifecycleSleepActionAllowZero",
  "PodLogsQuerySplitStreams",
  "PodObservedGenerationTracking",
  "PodReadyToStartContainersCondition",
  "PodsAPI",
  "PreventStaticPodAPIReferences",
  "QOSReserved",
  "RecoverVolumeExpansionFailure",
  "RecursiveReadOnlyMounts",
  "ReduceDefaultCrashLoopBackOffDecay",
  "RelaxedDNSSearchValidation",
  "RelaxedEnvironmentVariableValidation",
  "ReloadKubeletClientCAFile",
  "ReloadKubeletServerCertificateFile",
  "ResourceHealthStatus",
  "ResourceHealthStatusMessage",
  "RestartAllContainersOnContainerExits",
  "RotateKubeletServerCertificate",
  "RuntimeClassInImageCriApi",
  "SELinuxChangePolicy",
  "SELinuxMount",
  "SELinuxMountReadWriteOncePod",
  "SidecarContainers",
  "StrictIPCIDRValidation",
  "SupplementalGroupsPolicy",
  "TaintTolerationComparisonOperators",
  "TopologyManagerPolicyAlphaOptions",
  "TopologyManagerPolicyBetaOptions",
  "TopologyManagerPolicyOptions",
  "UnlockWhileProcessingFIFO",
  "UserNamespacesHostNetworkSupport",
  "UserNamespacesSupport",
  "WatchListClient",
  "WindowsCPUAndMemoryAffinity",
  "WindowsGracefulNodeShutdown",
];

const HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

/** The registry's gates with their default and lock (a locked gate ignores what is set). */
const REGISTRY = featureGateStates().map(({ name, enabled }) => {
  const [set] = featureGateStates({ [name]: !enabled }).filter((g) => g.name === name);
  return { name, enabled, locked: set?.enabled === enabled };
});
const defaultOf = (name: string) => REGISTRY.find((g) => g.name === name)?.enabled;

/** loadKubeletConfiguration on a file that sets these gates: the error, or undefined. */
async function loadGates(gates: Record<string, boolean>): Promise<unknown> {
  const dir = await Deno.makeTempDir({ prefix: "kubelet-feature-gates-" });
  const file = join(dir, "k.yaml");
  const lines = Object.entries(gates).map(([k, v]) => `  ${k}: ${v}\n`).join("");
  try {
    await Deno.writeTextFile(file, `${HEADER}${lines === "" ? "" : `featureGates:\n${lines}`}`);
    await loadKubeletConfiguration({ configFile: file, dropinDir: "", flags: [], cgroupV1: false });
    return undefined;
  } catch (e) {
    return e;
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("KUBELET_GATES classifies every gate the Go kubelet reads, and only those", () => {
  // A new upstream release brings new gates: grep for their readers and update KUBELET_READ.
  assert.equal(REGISTRY.length, 242);
  const known = new Set(REGISTRY.map((g) => g.name));
  const locked = new Set(REGISTRY.filter((g) => g.locked).map((g) => g.name));
  for (const name of KUBELET_READ) {
    assert.ok(known.has(name), `${name} is not in upstream's registry`);
    assert.ok(
      name in KUBELET_GATES || locked.has(name),
      `${name} is read by the Go kubelet: classify it in KUBELET_GATES`,
    );
  }
  for (const name of Object.keys(KUBELET_GATES)) {
    assert.ok(KUBELET_READ.includes(name), `${name} is not read by the Go kubelet`);
    assert.ok(!locked.has(name), `${name} is locked: validation refuses any change of it`);
  }
});

Deno.test("unsupportedFeatureGates refuses nothing in the default configuration", async () => {
  assert.deepEqual(unsupportedFeatureGates(undefined), []);
  assert.deepEqual(unsupportedFeatureGates({}), []);
  // Every gate set to its default is no change.
  const defaults = Object.fromEntries(REGISTRY.map((g) => [g.name, g.enabled]));
  assert.deepEqual(unsupportedFeatureGates(defaults), []);
  assert.equal(await loadGates({}), undefined);
});

Deno.test("unsupportedFeatureGates stops the start on each default-only gate set to its other value", async () => {
  const defaultOnly = Object.entries(KUBELET_GATES).filter(([, g]) => g.class === "default only");
  assert.ok(defaultOnly.length > 0);
  for (const [name, gate] of defaultOnly) {
    const value = !defaultOf(name);
    const result = await loadGates({ [name]: value });
    assert.ok(result instanceof ConfigError, `${name}: ${value}: ${result}`);
    assert.equal(result.path, `featureGates.${name}`);
    assert.ok(
      result.message.includes(
        `field 'featureGates.${name}' is not supported yet by this kubelet (${gate.why})` +
          `: current value is ${value}`,
      ),
      result.message,
    );
  }
});

Deno.test("unsupportedFeatureGates accepts the other value of the gates it follows or need not", async () => {
  const accepted = Object.entries(KUBELET_GATES).filter(([, g]) => g.class !== "default only");
  for (const [name] of accepted) {
    const value = !defaultOf(name);
    assert.equal(await loadGates({ [name]: value }), undefined, `${name}: ${value}`);
  }
  // A gate the kubelet does not read is accepted, as upstream accepts it.
  assert.equal(await loadGates({ MaxUnavailableStatefulSet: true }), undefined);
});

Deno.test("KUBELET_GATES names, for each honoured gate, a module that reads it", async () => {
  for (const [name, gate] of Object.entries(KUBELET_GATES)) {
    if (gate.class !== "honoured") continue;
    assert.ok(gate.module, name);
    const text = await Deno.readTextFile(new URL(gate.module, SRC));
    // Read as a property (`featureGates?.X`, `gates.X`) or a name (`on("X")`), not a comment.
    assert.match(text, new RegExp(`(\\??\\.|")${name}\\b`), `${gate.module} does not read ${name}`);
  }
});

Deno.test("validation refuses each locked gate set to its other value with upstream's message", async () => {
  const locked = REGISTRY.filter((g) => g.locked);
  assert.ok(locked.length > 0);
  for (const { name, enabled } of locked) {
    const result = await loadGates({ [name]: !enabled });
    assert.ok(result instanceof ConfigError, `${name}: ${result}`);
    assert.equal(result.path, `featureGates.${name}`);
    assert.ok(
      result.message.includes(
        `cannot set feature gate ${name} to ${!enabled}, feature is locked to ${enabled}`,
      ),
      result.message,
    );
  }
});

Deno.test("unsupportedFeatureGates refuses AllAlpha and AllBeta by the gates they switch", async () => {
  const on = await loadGates({ AllAlpha: true });
  assert.ok(on instanceof ConfigError, String(on));
  assert.equal(on.path, "featureGates.AllAlpha");
  assert.match(on.message, /is not supported yet by this kubelet \(it sets .*MemoryQoS=true/);
  // No alpha gate is on by default: AllAlpha=false switches nothing.
  assert.equal(await loadGates({ AllAlpha: false }), undefined);
  const off = unsupportedFeatureGates({ AllBeta: false });
  assert.deepEqual(off.map((i) => [i.path, i.value]), [["featureGates.AllBeta", false]]);
  assert.match(off[0]!.message, /PodLevelResources=false/);
  // An explicit value wins over AllAlpha, as upstream: with every switched gate kept at its
  // default by name, AllAlpha switches nothing this kubelet follows by name only.
  const kept = Object.fromEntries(
    REGISTRY.filter((g) => KUBELET_GATES[g.name]?.class === "default only" && !g.enabled)
      .concat(REGISTRY.filter((g) => KUBELET_GATES[g.name]?.class === "honoured" && !g.enabled))
      .map((g) => [g.name, false]),
  );
  assert.deepEqual(unsupportedFeatureGates({ ...kept, AllAlpha: true }), []);
});
