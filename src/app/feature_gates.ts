/**
 * @module
 * What each feature gate does to this kubelet, and the `featureGates` settings it refuses at
 * start because it lacks their behaviour. Upstream's counterpart is the registry in
 * `pkg/features/kube_features.go` (with component-base's, client-go's and apiserver's gates)
 * and every `DefaultFeatureGate.Enabled` call the Go kubelet makes; the registry itself, with
 * each gate's stage, default and lock at v1.36, is component_metrics.ts's
 * {@link featureGateStates}.
 *
 * A gate the Go kubelet reads is in {@link KUBELET_GATES}, with one of these classes:
 * - `honoured`: `module` reads the gate and does what upstream does for either value;
 * - `default only`: only the default's behaviour is built; the other value is refused by
 *   {@link unsupportedFeatureGates}, with `why` saying what is missing;
 * - `default missing`: the default's behaviour is missing (a gap to close), the other value's
 *   is what this agent does, so setting it is accepted;
 * - `no kubelet effect`: upstream reads it, but nothing outside the process shows it (informer
 *   internals) or only the Windows kubelet reads it.
 *
 * A gate absent from the table is not read by the Go kubelet (an apiserver, scheduler or
 * controller gate): it is accepted and has no effect, as upstream. A locked gate is absent too:
 * upstream refuses any change of it, and so does validation (`_validation_feature_gates.ts`).
 * AllAlpha and AllBeta count by what they switch: refused when they switch a gate of the table
 * that is not followed through them (every module here reads a gate by its own name).
 */

import type { ValidationIssue } from "../apis/validation.ts";
import { featureGateStates } from "../metrics/component_metrics.ts";

/** How this kubelet treats one gate the Go kubelet reads. */
export type GateClass = "honoured" | "default only" | "default missing" | "no kubelet effect";

/** One gate of {@link KUBELET_GATES}. */
export interface KubeletGate {
  readonly class: GateClass;
  /** What is missing (`default only`, `default missing`) or why nothing shows. */
  readonly why?: string;
  /** The module, under src/, that reads the gate (`honoured`). */
  readonly module?: string;
}

const honoured = (module: string): KubeletGate => ({ class: "honoured", module });
const defaultOnly = (why: string): KubeletGate => ({ class: "default only", why });
const defaultMissing = (why: string): KubeletGate => ({ class: "default missing", why });
const noEffect = (why: string): KubeletGate => ({ class: "no kubelet effect", why });

const STATIC_POD_VALIDATION = "static pods are validated as with the gate's default only";
const INFORMER_INTERNALS = "client-go informer internals: nothing outside the process shows them";

/** Every gate the Go kubelet v1.36.3 reads that is not locked, by name. */
export const KUBELET_GATES: Readonly<Record<string, KubeletGate>> = {
  AllowDNSOnlyNodeCSR: defaultOnly(
    "a serving certificate is requested only once the node has an IP",
  ),
  AllowParsingUserUIDFromCertAuth: defaultOnly(
    "a client certificate's UID attribute is always taken as the user's UID",
  ),
  AtomicFIFO: noEffect(INFORMER_INTERNALS),
  CBORServingAndStorage: defaultOnly("/flagz and /statusz are not served, in CBOR or otherwise"),
  CPUManagerPolicyAlphaOptions: honoured("cm/resource_managers.ts"),
  CPUManagerPolicyBetaOptions: honoured("cm/resource_managers.ts"),
  CRIListStreaming: defaultOnly("containers, sandboxes and images are listed with unary CRI calls"),
  CSIVolumeHealth: honoured("kubelet_pod_lifecycle.ts"),
  ChangeContainerStatusOnKubeletRestart: defaultOnly(
    "running containers keep their started state across a restart of the kubelet",
  ),
  ClientsAllowCARotation: defaultMissing(
    "the kubeconfig's CA file is read once at start, as with the gate off",
  ),
  ClientsAllowCBOR: defaultOnly("requests to the API server and its answers are JSON"),
  ClientsAllowTLSCacheGC: noEffect("client-go's TLS transport cache: nothing outside shows it"),
  ClientsPreferCBOR: defaultOnly("requests to the API server and its answers are JSON"),
  ClusterTrustBundleProjection: defaultOnly("clusterTrustBundle projected volumes are not built"),
  ComponentFlagz: defaultMissing("/flagz is not served, as with the gate off"),
  ComponentStatusz: defaultMissing("/statusz is not served, as with the gate off"),
  ContainerCheckpoint: honoured("kubelet.ts"),
  ContainerRestartRules: defaultOnly("container restart rules are always followed"),
  ContainerStopSignals: defaultOnly(
    "a container's lifecycle.stopSignal is not sent to the runtime",
  ),
  ContextualLogging: defaultOnly("log lines always carry the values contextual loggers add"),
  CustomCPUCFSQuotaPeriod: honoured("apis/validation.ts"),
  DRAExtendedResource: defaultMissing(
    "extended resources backed by DRA are not built: an extended resource is a device plugin's",
  ),
  DRAWorkloadResourceClaims: defaultOnly("claims of pod groups are not prepared"),
  DisableCPUQuotaWithExclusiveCPUs: honoured("cm/exclusive_cpus.ts"),
  EnvFiles: defaultOnly("fileKeyRef environment variables are always resolved"),
  EventedPLEG: honoured("kubelet_pod_lifecycle.ts"),
  ExtendWebSocketsToKubelet: defaultMissing(
    "WebSocket streams are proxied to the runtime untranslated, as with the gate off",
  ),
  GracefulNodeShutdown: honoured("apis/_validation_node.ts"),
  GracefulNodeShutdownBasedOnPodPriority: honoured("apis/_validation_node.ts"),
  HostnameOverride: defaultOnly("spec.hostnameOverride is always applied"),
  ImageVolumeWithDigest: defaultOnly("image volume digests are not reported in container status"),
  InOrderInformersBatchProcess: noEffect(INFORMER_INTERNALS),
  InPlacePodLevelResourcesVerticalScaling: honoured("kubelet_pod_lifecycle.ts"),
  InPlacePodVerticalScalingExclusiveCPUs: defaultOnly(
    "the CPU manager does not resize exclusive CPUs: a Guaranteed pod's cpu resize under the " +
      "static policy is Infeasible",
  ),
  InPlacePodVerticalScalingExclusiveMemory: defaultOnly(
    "the memory manager does not resize NUMA-pinned memory: a Guaranteed pod's memory resize " +
      "under the Static policy is Infeasible",
  ),
  InPlacePodVerticalScalingInitContainers: defaultOnly(
    "init containers are always resized in place",
  ),
  InformerResourceVersion: noEffect(INFORMER_INTERNALS),
  KubeletCrashLoopBackOffMax: honoured("apis/config_types.ts"),
  KubeletEnsureSecretPulledImages: honoured("apis/config_types.ts"),
  KubeletInUserNamespace: defaultOnly(
    "errors setting sysctls, oom_score_adj and cgroups are not tolerated as in a user namespace",
  ),
  KubeletPodResourcesListUseActivePods: honoured("kubelet.ts"),
  KubeletRegistrationGetOnExistsOnly: defaultOnly(
    "a node create refused as forbidden is still followed by a get of the node",
  ),
  KubeletSeparateDiskGC: defaultOnly("a separate container filesystem is always handled apart"),
  KubeletServiceAccountTokenForCredentialProviders: honoured("kubelet_pod_lifecycle.ts"),
  LocalStorageCapacityIsolationFSQuotaMonitoring: defaultOnly(
    "emptyDir usage is measured by walking it, without project quotas",
  ),
  LoggingAlphaOptions: honoured("apis/_validation_logging.ts"),
  LoggingBetaOptions: honoured("apis/_validation_logging.ts"),
  MatchLabelKeysInPodTopologySpread: defaultOnly(STATIC_POD_VALIDATION),
  MatchLabelKeysInPodTopologySpreadSelectorMerge: defaultOnly(STATIC_POD_VALIDATION),
  // Under MemoryQoS, memoryThrottlingFactor and memoryReservationPolicy take effect upstream;
  // without it (the default) upstream ignores them too.
  MemoryQoS: defaultOnly("memory.high and memory.min are not set for containers"),
  NativeHistograms: defaultOnly("/metrics has classic histograms only"),
  NodeDeclaredFeatures: honoured("nodestatus/node_status.ts"),
  PLEGOnDemandRelist: defaultOnly("the PLEG always inspects a pod on demand after its sync"),
  PodAndContainerStatsFromCRI: defaultOnly(
    "pod and container CPU and memory stats come from cgroups, not from CRI stats",
  ),
  PodCertificateRequest: defaultOnly("podCertificate projected volumes are not built"),
  PodDeletionCost: defaultOnly(STATIC_POD_VALIDATION),
  PodLevelResourceManagers: defaultOnly(
    "pod-level resources are not handed to the CPU and memory managers",
  ),
  PodLevelResources: defaultOnly("pod-level resources are always applied"),
  PodLogsQuerySplitStreams: defaultOnly("/containerLogs refuses the stream parameter"),
  PodReadyToStartContainersCondition: defaultOnly(
    "the PodReadyToStartContainers condition is always reported",
  ),
  PodsAPI: defaultOnly("the pods gRPC API is not served"),
  PreventStaticPodAPIReferences: defaultOnly(
    "static pods that reference API objects are always refused",
  ),
  QOSReserved: defaultOnly("qosReserved is not applied to the QoS class cgroups"),
  ReduceDefaultCrashLoopBackOffDecay: defaultOnly("the crash-loop back-off starts at 10s"),
  ReloadKubeletClientCAFile: defaultOnly("the client CA file is always reloaded when it changes"),
  ReloadKubeletServerCertificateFile: defaultMissing(
    "tlsCertFile is read once at start, as with the gate off",
  ),
  // Also read by cm/dra_manager.ts (DRA claims' devices).
  ResourceHealthStatus: honoured("devicemanager/manager.ts"),
  ResourceHealthStatusMessage: honoured("cm/dra_manager.ts"),
  RestartAllContainersOnContainerExits: defaultOnly(
    "RestartAllContainers restart rules are always followed",
  ),
  RotateKubeletServerCertificate: honoured("apis/validation.ts"),
  RuntimeClassInImageCriApi: defaultOnly(
    "images are pulled and listed for the default runtime handler only",
  ),
  SELinuxMount: defaultOnly("nothing is mounted with an SELinux context option"),
  StrictIPCIDRValidation: defaultOnly(STATIC_POD_VALIDATION),
  TaintTolerationComparisonOperators: defaultOnly(
    "tolerations with the Gt and Lt operators are not matched at admission and eviction",
  ),
  TopologyManagerPolicyAlphaOptions: honoured("cm/resource_managers.ts"),
  TopologyManagerPolicyBetaOptions: honoured("cm/resource_managers.ts"),
  UnlockWhileProcessingFIFO: noEffect(INFORMER_INTERNALS),
  UserNamespacesHostNetworkSupport: defaultOnly(STATIC_POD_VALIDATION),
  WatchListClient: defaultMissing("informers list, then watch, as with the gate off"),
  WindowsCPUAndMemoryAffinity: noEffect("read by the Windows kubelet only"),
  WindowsGracefulNodeShutdown: noEffect("read by the Windows kubelet only"),
};

const NOT_YET = "is not supported yet by this kubelet";

/**
 * Whether AllAlpha or AllBeta switching `gate` goes unfollowed here: a `default only` gate lacks
 * the other behaviour, and an `honoured` gate's module reads the gate by its own name only.
 */
function followedOnlyByName(gate: KubeletGate): boolean {
  return gate.class === "default only" || gate.class === "honoured";
}

/**
 * The `featureGates` settings this kubelet cannot follow, in unsupported_settings.ts's shape:
 * a `default only` gate set to its other value, and AllAlpha or AllBeta when they switch a gate
 * that is followed only by its own name. Locked and unknown gates are validation's.
 */
export function unsupportedFeatureGates(
  gates: Readonly<Record<string, boolean>> | undefined,
): ValidationIssue[] {
  const set = gates ?? {};
  const defaults = new Map(featureGateStates().map((g) => [g.name, g.enabled]));
  const out: ValidationIssue[] = [];
  const switchedBy: Record<"AllAlpha" | "AllBeta", string[]> = { AllAlpha: [], AllBeta: [] };
  for (const { name, stage, enabled } of featureGateStates(set)) {
    const gate = KUBELET_GATES[name];
    if (!gate || enabled === defaults.get(name)) continue;
    if (name in set) {
      if (gate.class === "default only") {
        out.push({
          path: `featureGates.${name}`,
          value: enabled,
          message: `${NOT_YET} (${gate.why})`,
        });
      }
    } else if (followedOnlyByName(gate)) {
      switchedBy[stage === "ALPHA" ? "AllAlpha" : "AllBeta"].push(`${name}=${enabled}`);
    }
  }
  for (const [all, switched] of Object.entries(switchedBy)) {
    if (switched.length === 0) continue;
    out.push({
      path: `featureGates.${all}`,
      value: set[all],
      message: `${NOT_YET} (it sets ${switched.join(", ")}; set the gates one by one)`,
    });
  }
  return out;
}
