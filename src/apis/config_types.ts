/**
 * @module
 * The field table of the `kubelet.config.k8s.io/v1beta1` KubeletConfiguration, the file the
 * kubelet reads with `--config`: every field upstream declares (apart from `apiVersion` and
 * `kind`, which the loader checks), in upstream's order, with its Go type, one line of
 * documentation, its default, and the command-line flag that also sets it. The decoder, the
 * defaulting and the TypeScript type all come from this one table (see `config_schema.ts`).
 *
 * Upstream sources, as of Kubernetes v1.36.3:
 * - `staging/src/k8s.io/kubelet/config/v1beta1/types.go` (k8s.io/kubelet v0.36.3): fields, Go types,
 *   nested structs and the documented enums.
 * - `pkg/kubelet/apis/config/v1beta1/defaults.go` (`SetDefaults_KubeletConfiguration`): the defaults.
 * - `pkg/kubelet/eviction/defaults_linux.go` and `cmd/kubelet/app/server.go` (`loadConfigFile`): the
 *   `evictionHard` default and its merging.
 * - `cmd/kubelet/app/options/options.go` (`AddKubeletConfigFlags`): the flags bound to fields.
 * - `pkg/kubelet/apis/config/validation/validation.go`, plus the managers that reject unknown
 *   policy names at start-up: where a string only takes a fixed set of values (`enum`).
 * - k8s.io/component-base v0.36.3 `logs/api/v1` (`LoggingConfiguration`, `AddFlags`,
 *   `SetRecommendedLoggingConfiguration`) and `tracing/api/v1` (`TracingConfiguration`).
 *
 * Conventions. A field with a `default` always holds a value after `applyDefaults`; a field
 * without one stays absent when the file leaves it out, and absence then means Go's zero value
 * (`0`, `""`, `false`, empty list or map, or a nil pointer). Defaults that upstream derives from
 * another field, from a feature gate or from the platform are not in the table:
 * {@link applyDependentDefaults} applies them afterwards.
 *
 * What the table cannot say exactly:
 * - `logging.flushFrequency` is a `TimeOrMetaDuration` upstream, which also accepts an integer
 *   count of nanoseconds (kubeadm writes `flushFrequency: 0`). It is modelled as a duration
 *   whose decoder reads that integer form too, as milliseconds.
 * - `registerWithTaints[].timeAdded` is a `*metav1.Time`; it is kept as its RFC 3339 text.
 *   Upstream validation refuses any value for it, so nothing reads it.
 * - The flags `--reserved-memory` (`0:memory=1Gi,hugepages-1Mi=2Gi;1:memory=2Gi`) and `--vmodule`
 *   (`pattern=N,...` into a list of objects) have text forms that no `FlagFormat` describes; their
 *   fields name the flag without a format and the flag parser must treat them specially.
 * - `--manifest-url-header` is upstream's colon-separated multimap (`key:value,...`, repeatable);
 *   it is marked "map-slice", whose separator in `config_schema.ts` is `=`.
 * - `--seccomp-default` is a KubeletFlags flag, not bound to `seccompDefault`: upstream ORs the two
 *   at start-up, so `seccompDefault` carries no `flag`.
 */

import { f, type ObjectOf } from "./config_schema.ts";

/** The API group and version of the kubelet's configuration file. */
export const KUBELET_CONFIG_API_VERSION = "kubelet.config.k8s.io/v1beta1";
/** The kind of the kubelet's configuration file. */
export const KUBELET_CONFIG_KIND = "KubeletConfiguration";

/**
 * The hard eviction thresholds a Linux kubelet uses when the file sets no `evictionHard`
 * (upstream `pkg/kubelet/eviction/defaults_linux.go`; `imagefs.inodesFree` since v1.30).
 */
export const DEFAULT_EVICTION_HARD: Readonly<Record<string, string>> = Object.freeze({
  "memory.available": "100Mi",
  "nodefs.available": "10%",
  "nodefs.inodesFree": "5%",
  "imagefs.available": "15%",
  "imagefs.inodesFree": "5%",
});

// One-line helpers for the element types of lists and maps.
const str = (doc: string) => f.string({ go: "string", doc });
const qty = (doc: string) => f.quantity({ go: "resource.Quantity", doc });

/** Fields shared by the text and JSON logging formats (component-base `OutputRoutingOptions`). */
function outputRouting(format: "text" | "json") {
  return {
    splitStream: f.bool({
      go: "bool",
      doc:
        `[Alpha] In ${format} format, send errors to stderr and info messages to buffered stdout.`,
      flag: `log-${format}-split-stream`,
    }),
    infoBufferSize: f.quantity({
      go: "resource.QuantityValue",
      doc: `[Alpha] Size of the info stream buffer with split ${format} output; zero disables it.`,
      default: "0",
      flag: `log-${format}-info-buffer-size`,
    }),
  };
}

/** Every field of the v1beta1 KubeletConfiguration, in upstream's declaration order. */
export const kubeletConfigurationFields = {
  enableServer: f.bool({
    go: "*bool",
    doc: "Enables the kubelet's secured (HTTPS) server.",
    default: true,
    flag: "enable-server",
  }),
  staticPodPath: f.string({
    go: "string",
    doc: "Directory of static pod files to run, or the path of a single static pod file.",
    flag: "pod-manifest-path",
  }),
  podLogsDir: f.string({
    go: "string",
    doc: "Root directory under which the kubelet places pod log files; must be absolute and clean.",
    default: "/var/log/pods",
  }),
  syncFrequency: f.duration({
    go: "metav1.Duration",
    doc: "Longest time between synchronizing running containers and config.",
    default: "1m0s",
    flag: "sync-frequency",
  }),
  fileCheckFrequency: f.duration({
    go: "metav1.Duration",
    doc: "How often static pod files are checked for new data.",
    default: "20s",
    flag: "file-check-frequency",
  }),
  httpCheckFrequency: f.duration({
    go: "metav1.Duration",
    doc: "How often the static pod URL is checked for new data.",
    default: "20s",
    flag: "http-check-frequency",
  }),
  staticPodURL: f.string({
    go: "string",
    doc: "URL from which to read static pods to run.",
    flag: "manifest-url",
  }),
  staticPodURLHeader: f.map(
    f.list(str("One value of the header."), {
      go: "[]string",
      doc: "The values of one HTTP header.",
    }),
    {
      go: "map[string][]string",
      doc: "HTTP headers, each with its list of values, sent when fetching staticPodURL.",
      flag: "manifest-url-header",
      // Upstream's flag is a colon-separated multimap: `key:value,key:value`, repeatable.
      flagFormat: "map-slice",
    },
  ),
  address: f.string({
    go: "string",
    doc: "IP address the kubelet serves on; 0.0.0.0 for all interfaces.",
    default: "0.0.0.0",
    flag: "address",
    flagFormat: "ip",
  }),
  port: f.int32({
    go: "int32",
    doc: "Port of the kubelet's secured server, between 1 and 65535.",
    default: 10250,
    flag: "port",
  }),
  readOnlyPort: f.int32({
    go: "int32",
    doc: "Port of the unauthenticated read-only server; 0 (the default when unset) disables it.",
    flag: "read-only-port",
  }),
  tlsCertFile: f.string({
    go: "string",
    doc: "Serving certificate (with any intermediates); if unset with the key, one is self-signed.",
    flag: "tls-cert-file",
  }),
  tlsPrivateKeyFile: f.string({
    go: "string",
    doc: "Private key matching tlsCertFile.",
    flag: "tls-private-key-file",
  }),
  tlsCipherSuites: f.list(str("Name of a Go crypto/tls cipher suite."), {
    go: "[]string",
    doc: "Cipher suites the server allows (TLS 1.3 suites are not configurable); Go's when unset.",
    flag: "tls-cipher-suites",
    flagFormat: "list",
  }),
  tlsCurvePreferences: f.list(f.int32({ go: "int32", doc: "A Go crypto/tls CurveID number." }), {
    go: "[]int32",
    doc: "Key exchange mechanisms the server allows, as numeric CurveIDs; order is ignored.",
    flag: "tls-curve-preferences",
    flagFormat: "list",
  }),
  tlsMinVersion: f.string({
    go: "string",
    doc: "Lowest TLS version the server accepts; TLS 1.2 when empty (Go's server default).",
    flag: "tls-min-version",
    enum: ["VersionTLS10", "VersionTLS11", "VersionTLS12", "VersionTLS13"],
  }),
  rotateCertificates: f.bool({
    go: "bool",
    doc: "Renews the client certificate through the certificates.k8s.io API before it expires.",
    flag: "rotate-certificates",
  }),
  serverTLSBootstrap: f.bool({
    go: "bool",
    doc:
      "Requests the serving certificate from the certificates.k8s.io API instead of self-signing.",
    flag: "rotate-server-certificates",
  }),
  authentication: f.object({
    x509: f.object({
      clientCAFile: f.string({
        go: "string",
        doc: "CA bundle; a client certificate it signed authenticates as its CommonName.",
        flag: "client-ca-file",
      }),
    }, {
      go: "KubeletX509Authentication",
      doc: "Client certificate authentication.",
    }),
    webhook: f.object({
      enabled: f.bool({
        go: "*bool",
        doc: "Authenticates bearer tokens with the TokenReview API.",
        default: true,
        flag: "authentication-token-webhook",
      }),
      cacheTTL: f.duration({
        go: "metav1.Duration",
        doc: "How long TokenReview results are cached.",
        default: "2m0s",
        flag: "authentication-token-webhook-cache-ttl",
      }),
    }, {
      go: "KubeletWebhookAuthentication",
      doc: "Bearer token authentication through the API server.",
    }),
    anonymous: f.object({
      enabled: f.bool({
        go: "*bool",
        doc: "Lets requests no other method rejected in as system:anonymous.",
        default: false,
        flag: "anonymous-auth",
      }),
    }, {
      go: "KubeletAnonymousAuthentication",
      doc: "Anonymous access.",
    }),
  }, {
    go: "KubeletAuthentication",
    doc: "How requests to the kubelet's server are authenticated.",
  }),
  authorization: f.object({
    mode: f.string({
      go: "KubeletAuthorizationMode",
      doc: "AlwaysAllow, or Webhook to ask the SubjectAccessReview API.",
      default: "Webhook",
      flag: "authorization-mode",
      enum: ["AlwaysAllow", "Webhook"],
    }),
    webhook: f.object({
      cacheAuthorizedTTL: f.duration({
        go: "metav1.Duration",
        doc: "How long 'authorized' answers from the webhook are cached.",
        default: "5m0s",
        flag: "authorization-webhook-cache-authorized-ttl",
      }),
      cacheUnauthorizedTTL: f.duration({
        go: "metav1.Duration",
        doc: "How long 'unauthorized' answers from the webhook are cached.",
        default: "30s",
        flag: "authorization-webhook-cache-unauthorized-ttl",
      }),
    }, {
      go: "KubeletWebhookAuthorization",
      doc: "Settings of Webhook authorization.",
    }),
  }, {
    go: "KubeletAuthorization",
    doc: "How requests to the kubelet's server are authorized.",
  }),
  registryPullQPS: f.int32({
    go: "*int32",
    doc: "Image pulls allowed per second; 0 means no limit.",
    default: 5,
    flag: "registry-qps",
  }),
  registryBurst: f.int32({
    go: "int32",
    doc: "Burst of image pulls allowed above registryPullQPS, when that is above 0.",
    default: 10,
    flag: "registry-burst",
  }),
  imagePullCredentialsVerificationPolicy: f.string({
    go: "ImagePullCredentialsVerificationPolicy",
    doc: "Whether pods must prove pull credentials for images already on the node.",
    // Defaulted by applyDependentDefaults: only when KubeletEnsureSecretPulledImages is on.
    enum: [
      "NeverVerify",
      "NeverVerifyPreloadedImages",
      "NeverVerifyAllowlistedImages",
      "AlwaysVerify",
    ],
  }),
  preloadedImagesVerificationAllowlist: f.list(
    str("An image name without tag or digest, optionally ending in /*."),
    {
      go: "[]string",
      doc: "Images exempt from re-verification under NeverVerifyAllowlistedImages.",
    },
  ),
  eventRecordQPS: f.int32({
    go: "*int32",
    doc: "Events created per second; 0 means no limit.",
    default: 50,
    flag: "event-qps",
  }),
  eventBurst: f.int32({
    go: "int32",
    doc: "Burst of event creations allowed above eventRecordQPS, when that is above 0.",
    default: 100,
    flag: "event-burst",
  }),
  enableDebuggingHandlers: f.bool({
    go: "*bool",
    doc: "Serves logs, exec, attach and port-forward endpoints.",
    default: true,
    flag: "enable-debugging-handlers",
  }),
  enableContentionProfiling: f.bool({
    go: "bool",
    doc: "Enables block profiling when the debugging handlers are on.",
    flag: "contention-profiling",
  }),
  healthzPort: f.int32({
    go: "*int32",
    doc: "Port of the local healthz endpoint; 0 disables it.",
    default: 10248,
    flag: "healthz-port",
  }),
  healthzBindAddress: f.string({
    go: "string",
    doc: "IP address the healthz endpoint serves on.",
    default: "127.0.0.1",
    flag: "healthz-bind-address",
    flagFormat: "ip",
  }),
  oomScoreAdj: f.int32({
    go: "*int32",
    doc: "oom_score_adj of the kubelet process, within [-1000, 1000].",
    default: -999,
    flag: "oom-score-adj",
  }),
  clusterDomain: f.string({
    go: "string",
    doc: "Cluster DNS domain that containers search in addition to the host's domains.",
    flag: "cluster-domain",
  }),
  clusterDNS: f.list(str("IP address of a DNS server."), {
    go: "[]string",
    doc: "DNS servers for containers with ClusterFirst DNS, instead of the host's.",
    flag: "cluster-dns",
    flagFormat: "list",
  }),
  streamingConnectionIdleTimeout: f.duration({
    go: "metav1.Duration",
    doc: "Deprecated, no effect: idle time after which a streaming connection was closed.",
    default: "4h0m0s",
    flag: "streaming-connection-idle-timeout",
  }),
  nodeStatusUpdateFrequency: f.duration({
    go: "metav1.Duration",
    doc: "How often node status is computed and, if it changed, posted.",
    default: "10s",
    flag: "node-status-update-frequency",
  }),
  nodeStatusReportFrequency: f.duration({
    go: "metav1.Duration",
    doc: "How often unchanged node status is posted anyway.",
    // Defaulted by applyDependentDefaults: 5m, or nodeStatusUpdateFrequency when that is set.
  }),
  nodeLeaseDurationSeconds: f.int32({
    go: "int32",
    doc: "Duration set on the node's Lease in kube-node-lease; must be above 0.",
    default: 40,
  }),
  imageMinimumGCAge: f.duration({
    go: "metav1.Duration",
    doc: "Youngest age at which an unused image may be garbage collected.",
    default: "2m0s",
    flag: "minimum-image-ttl-duration",
  }),
  imageMaximumGCAge: f.duration({
    go: "metav1.Duration",
    doc: "Age after which an unused image is garbage collected; 0 (unset) disables this.",
  }),
  imageGCHighThresholdPercent: f.int32({
    go: "*int32",
    doc: "Disk usage percent above which image garbage collection always runs.",
    default: 85,
    flag: "image-gc-high-threshold",
  }),
  imageGCLowThresholdPercent: f.int32({
    go: "*int32",
    doc: "Disk usage percent image garbage collection frees down to; below the high threshold.",
    default: 80,
    flag: "image-gc-low-threshold",
  }),
  volumeStatsAggPeriod: f.duration({
    go: "metav1.Duration",
    doc: "How often volume disk usage is computed and cached for all pods.",
    default: "1m0s",
    flag: "volume-stats-agg-period",
  }),
  kubeletCgroups: f.string({
    go: "string",
    doc: "Absolute name of the cgroup to isolate the kubelet in.",
    flag: "kubelet-cgroups",
  }),
  systemCgroups: f.string({
    go: "string",
    doc: "Absolute cgroup for non-kernel processes outside containers; needs cgroupRoot.",
    flag: "system-cgroups",
  }),
  cgroupRoot: f.string({
    go: "string",
    doc: "Root cgroup for pods, applied by the runtime on a best effort basis.",
    flag: "cgroup-root",
  }),
  cgroupsPerQOS: f.bool({
    go: "*bool",
    doc: "Creates the QoS class cgroup hierarchy with pods under their class's cgroup.",
    default: true,
    flag: "cgroups-per-qos",
  }),
  cgroupDriver: f.string({
    go: "string",
    doc: "Driver used to manage cgroups on the host.",
    default: "cgroupfs",
    flag: "cgroup-driver",
    // Upstream documents only these two; its cgroup manager takes anything but "systemd" as
    // cgroupfs. Refusing other text catches typos that upstream would silently accept.
    enum: ["cgroupfs", "systemd"],
  }),
  cpuManagerPolicy: f.string({
    go: "string",
    doc: "CPU manager policy; the CPU manager refuses unknown names at start-up.",
    default: "none",
    flag: "cpu-manager-policy",
    enum: ["none", "static"],
  }),
  singleProcessOOMKill: f.bool({
    go: "*bool",
    doc:
      "Stops setting memory.oom.group so OOM kills single processes; unset: from cgroup version.",
  }),
  cpuManagerPolicyOptions: f.map(str("Value of one CPU manager policy option."), {
    go: "map[string]string",
    doc: "Options that fine-tune the CPU manager policy.",
    flag: "cpu-manager-policy-options",
    flagFormat: "map-nosplit",
  }),
  cpuManagerReconcilePeriod: f.duration({
    go: "metav1.Duration",
    doc: "Reconciliation period of the CPU manager.",
    default: "10s",
    flag: "cpu-manager-reconcile-period",
  }),
  memoryManagerPolicy: f.string({
    go: "string",
    doc: "Memory manager policy; the memory manager refuses unknown names at start-up.",
    default: "None",
    flag: "memory-manager-policy",
    // Upstream also has "BestEffort", available on Windows only.
    enum: ["None", "Static"],
  }),
  topologyManagerPolicy: f.string({
    go: "string",
    doc: "How strictly the topology manager requires NUMA alignment of a pod's resources.",
    default: "none",
    flag: "topology-manager-policy",
    enum: ["none", "best-effort", "restricted", "single-numa-node"],
  }),
  topologyManagerScope: f.string({
    go: "string",
    doc: "Whether topology hints are generated per container or per pod.",
    default: "container",
    flag: "topology-manager-scope",
    enum: ["container", "pod"],
  }),
  topologyManagerPolicyOptions: f.map(str("Value of one topology manager policy option."), {
    go: "map[string]string",
    doc: "Options that fine-tune the topology manager policy.",
    flag: "topology-manager-policy-options",
    flagFormat: "map-nosplit",
  }),
  qosReserved: f.map(str("A percentage such as 50%."), {
    go: "map[string]string",
    doc: "Percent of a resource (only memory) reserved for Guaranteed pods; needs QOSReserved.",
    flag: "qos-reserved",
    flagFormat: "map",
  }),
  runtimeRequestTimeout: f.duration({
    go: "metav1.Duration",
    doc: "Timeout of runtime requests other than pull, logs, exec and attach.",
    default: "2m0s",
    flag: "runtime-request-timeout",
  }),
  hairpinMode: f.string({
    go: "string",
    doc: "How the container bridge is set up so pods can reach themselves through a Service.",
    default: "promiscuous-bridge",
    flag: "hairpin-mode",
    enum: ["promiscuous-bridge", "hairpin-veth", "none"],
  }),
  maxPods: f.int32({
    go: "int32",
    doc: "Largest number of pods that can run on this kubelet.",
    default: 110,
    flag: "max-pods",
  }),
  podCIDR: f.string({
    go: "string",
    doc: "CIDR for pod IP addresses in standalone mode; the control plane assigns it otherwise.",
    flag: "pod-cidr",
  }),
  podPidsLimit: f.int64({
    go: "*int64",
    doc: "Most process IDs in any pod; -1 uses the node's allocatable PID capacity.",
    // applyDependentDefaults also turns any negative value into -1, as upstream does.
    default: -1,
    flag: "pod-max-pids",
  }),
  resolvConf: f.string({
    go: "*string",
    doc: "Resolver configuration that container DNS starts from; empty disables DNS lookups.",
    default: "/etc/resolv.conf",
    flag: "resolv-conf",
  }),
  runOnce: f.bool({
    go: "bool",
    doc: "Deprecated: run the pods found once and exit; validation refuses true.",
    flag: "runonce",
  }),
  cpuCFSQuota: f.bool({
    go: "*bool",
    doc: "Enforces CPU limits with CFS quota.",
    default: true,
    flag: "cpu-cfs-quota",
  }),
  cpuCFSQuotaPeriod: f.duration({
    go: "*metav1.Duration",
    doc:
      "CFS quota period (cpu.cfs_period_us), 1ms to 1s; other values need CustomCPUCFSQuotaPeriod.",
    default: "100ms",
    flag: "cpu-cfs-quota-period",
  }),
  nodeStatusMaxImages: f.int32({
    go: "*int32",
    doc: "Most images listed in Node.status.images; -1 means no cap.",
    default: 50,
    flag: "node-status-max-images",
  }),
  maxOpenFiles: f.int64({
    go: "int64",
    doc: "Number of files the kubelet process may open.",
    default: 1000000,
    flag: "max-open-files",
  }),
  contentType: f.string({
    go: "string",
    doc:
      "Content type of requests sent to the API server: application/json, the only one this kubelet speaks (upstream's default is application/vnd.kubernetes.protobuf, refused here).",
    default: "application/json",
    flag: "kube-api-content-type",
  }),
  kubeAPIQPS: f.int32({
    go: "*int32",
    doc: "Queries per second to the API server (events and heartbeats excepted).",
    default: 50,
    flag: "kube-api-qps",
  }),
  kubeAPIBurst: f.int32({
    go: "int32",
    doc: "Burst of queries to the API server allowed above kubeAPIQPS.",
    default: 100,
    flag: "kube-api-burst",
  }),
  serializeImagePulls: f.bool({
    go: "*bool",
    doc: "Pulls one image at a time.",
    flag: "serialize-image-pulls",
    // Defaulted by applyDependentDefaults: false only when maxParallelImagePulls is 2 or more.
  }),
  maxParallelImagePulls: f.int32({
    go: "*int32",
    doc: "Most image pulls at once when serializeImagePulls is false; unset means no limit.",
  }),
  evictionHard: f.map(str("A quantity such as 100Mi or a percentage such as 10%."), {
    go: "map[string]string",
    doc: "Hard eviction thresholds by signal, e.g. memory.available: 100Mi.",
    flag: "eviction-hard",
    flagFormat: "langle-map",
    // Defaulted by applyDependentDefaults (Linux set, merged per mergeDefaultEvictionSettings).
  }),
  evictionSoft: f.map(str("A quantity such as 300Mi or a percentage such as 10%."), {
    go: "map[string]string",
    doc: "Soft eviction thresholds by signal, acted on after their grace period.",
    flag: "eviction-soft",
    flagFormat: "langle-map",
  }),
  evictionSoftGracePeriod: f.map(str("A duration such as 1m30s."), {
    go: "map[string]string",
    doc: "How long each soft eviction threshold must hold before pods are evicted.",
    flag: "eviction-soft-grace-period",
    flagFormat: "map",
  }),
  evictionPressureTransitionPeriod: f.duration({
    go: "metav1.Duration",
    doc: "How long to wait before leaving an eviction pressure condition; 0s means the default.",
    default: "5m0s",
    flag: "eviction-pressure-transition-period",
  }),
  evictionMaxPodGracePeriod: f.int32({
    go: "int32",
    doc: "Cap in seconds on a pod's termination grace period in soft evictions.",
    flag: "eviction-max-pod-grace-period",
  }),
  evictionMinimumReclaim: f.map(str("A quantity such as 2Gi or a percentage."), {
    go: "map[string]string",
    doc: "Least amount of each resource an eviction reclaims under pressure.",
    flag: "eviction-minimum-reclaim",
    flagFormat: "map",
  }),
  mergeDefaultEvictionSettings: f.bool({
    go: "*bool",
    doc: "Fills signals missing from evictionHard with their defaults instead of zero.",
    default: false,
  }),
  podsPerCore: f.int32({
    go: "int32",
    doc: "Most pods per CPU core, capped by maxPods; 0 means no per-core limit.",
    flag: "pods-per-core",
  }),
  enableControllerAttachDetach: f.bool({
    go: "*bool",
    doc: "Leaves volume attach and detach to the attach/detach controller (needed for CSI).",
    default: true,
    flag: "enable-controller-attach-detach",
  }),
  protectKernelDefaults: f.bool({
    go: "bool",
    doc: "Fails instead of changing kernel tunables that differ from what the kubelet expects.",
    flag: "protect-kernel-defaults",
  }),
  makeIPTablesUtilChains: f.bool({
    go: "*bool",
    doc:
      "Creates the KUBE-IPTABLES-HINT chain (the host's iptables mode) and, for IPv4, KUBE-FIREWALL dropping outside packets to 127.0.0.0/8; recreated when a firewall flush removes them.",
    default: true,
    flag: "make-iptables-util-chains",
  }),
  iptablesMasqueradeBit: f.int32({
    go: "*int32",
    doc: "Deprecated, no effect: the fwmark bit once used for KUBE-MARK-MASQ.",
    default: 14,
  }),
  iptablesDropBit: f.int32({
    go: "*int32",
    doc: "Deprecated, no effect: the fwmark bit once used for KUBE-MARK-DROP.",
    default: 15,
  }),
  featureGates: f.map(f.bool({ go: "bool", doc: "Whether the feature is enabled." }), {
    go: "map[string]bool",
    doc: "Feature gates to switch on or off, over the built-in defaults.",
    flag: "feature-gates",
    flagFormat: "map",
  }),
  failSwapOn: f.bool({
    go: "*bool",
    doc: "Refuses to start when swap is enabled on the node.",
    default: true,
    flag: "fail-swap-on",
  }),
  memorySwap: f.object({
    swapBehavior: f.string({
      go: "string",
      doc: "NoSwap (also when empty) or LimitedSwap, proportional to the memory request.",
      enum: ["NoSwap", "LimitedSwap"],
    }),
  }, {
    go: "MemorySwapConfiguration",
    doc: "Swap available to container workloads.",
  }),
  containerLogMaxSize: f.quantity({
    // A string upstream, parsed as a quantity by the container log manager.
    go: "string",
    doc: "Size at which a container log file is rotated, e.g. 10Mi.",
    default: "10Mi",
    flag: "container-log-max-size",
  }),
  containerLogMaxFiles: f.int32({
    go: "*int32",
    doc: "Most log files kept per container; must be above 1.",
    default: 5,
    flag: "container-log-max-files",
  }),
  containerLogMaxWorkers: f.int32({
    go: "*int32",
    doc: "Concurrent log rotation workers; 1 rotates one container at a time.",
    default: 1,
  }),
  containerLogMonitorInterval: f.duration({
    go: "*metav1.Duration",
    doc: "How often container logs are checked for rotation; at least 3s.",
    default: "10s",
  }),
  configMapAndSecretChangeDetectionStrategy: f.string({
    go: "ResourceChangeDetectionStrategy",
    doc: "How ConfigMap and Secret changes are noticed: direct Get, TTL Cache, or Watch.",
    default: "Watch",
    enum: ["Get", "Cache", "Watch"],
  }),
  systemReserved: f.map(qty("Amount reserved, such as 200m or 150G."), {
    go: "map[string]string",
    doc: "Resources reserved for non-Kubernetes components, e.g. cpu=200m,memory=150G.",
    flag: "system-reserved",
    flagFormat: "map",
  }),
  kubeReserved: f.map(qty("Amount reserved, such as 200m or 150G."), {
    go: "map[string]string",
    doc: "Resources reserved for Kubernetes system components.",
    flag: "kube-reserved",
    flagFormat: "map",
  }),
  reservedSystemCPUs: f.string({
    go: "string",
    doc: "CPU list for system and Kubernetes threads; overrides the CPUs of the reservations.",
    flag: "reserved-cpus",
  }),
  showHiddenMetricsForVersion: f.string({
    go: "string",
    doc: "Previous minor version (e.g. 1.16) whose hidden metrics are shown again.",
  }),
  systemReservedCgroup: f.string({
    go: "string",
    doc: "Absolute top-level cgroup that enforces systemReserved for OS daemons.",
    flag: "system-reserved-cgroup",
  }),
  kubeReservedCgroup: f.string({
    go: "string",
    doc: "Absolute top-level cgroup that enforces kubeReserved for Kubernetes daemons.",
    flag: "kube-reserved-cgroup",
  }),
  enforceNodeAllocatable: f.list(
    f.string({
      go: "string",
      doc: "One level of node allocatable enforcement.",
      enum: [
        "none",
        "pods",
        "system-reserved",
        "system-reserved-compressible",
        "kube-reserved",
        "kube-reserved-compressible",
      ],
    }),
    {
      go: "[]string",
      doc: "Node allocatable enforcements to apply; needs cgroupsPerQOS.",
      default: ["pods"],
      flag: "enforce-node-allocatable",
      flagFormat: "list",
    },
  ),
  allowedUnsafeSysctls: f.list(str("A sysctl name or a pattern ending in *."), {
    go: "[]string",
    doc: "Unsafe sysctls, or patterns of them, that pods may set.",
    flag: "allowed-unsafe-sysctls",
    flagFormat: "list",
  }),
  volumePluginDir: f.string({
    go: "string",
    doc: "Directory searched for third-party (flexvolume) volume plugins.",
    default: "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/",
    flag: "volume-plugin-dir",
  }),
  providerID: f.string({
    go: "string",
    doc: "ID of the node's instance for a cloud provider.",
    flag: "provider-id",
  }),
  kernelMemcgNotification: f.bool({
    go: "bool",
    doc: "Uses kernel memcg notifications for memory eviction thresholds instead of polling.",
    flag: "kernel-memcg-notification",
  }),
  logging: f.object({
    format: f.string({
      go: "string",
      doc: "Structure of log messages.",
      default: "text",
      flag: "logging-format",
      enum: ["text", "json"],
    }),
    flushFrequency: f.duration({
      // Also read as an integer count of nanoseconds; see the module notes.
      go: "TimeOrMetaDuration",
      doc: "Longest time between log flushes, for buffering backends.",
      default: "5s",
      flag: "log-flush-frequency",
    }),
    verbosity: f.uint32({
      go: "VerbosityLevel",
      doc: "Log verbosity threshold; 0 logs only the most important messages.",
      default: 0,
      flag: "v",
    }),
    vmodule: f.list(
      f.object({
        filePattern: f.string({
          go: "string",
          doc: "Base file name (without .go) or glob pattern, without commas or equal signs.",
        }),
        verbosity: f.uint32({
          go: "VerbosityLevel",
          doc: "Verbosity threshold for messages from matching files.",
        }),
      }, {
        go: "VModuleItem",
        doc: "The verbosity of the files matching one pattern.",
      }),
      {
        go: "VModuleConfiguration",
        doc: "Per-file verbosity overrides; text format only.",
        // The flag's text is `pattern=N,pattern=N`, a form no FlagFormat describes.
        flag: "vmodule",
      },
    ),
    options: f.object({
      text: f.object(outputRouting("text"), {
        go: "TextOptions",
        doc: "[Alpha] Options of the text format.",
      }),
      json: f.object(outputRouting("json"), {
        go: "JSONOptions",
        doc: "[Alpha] Options of the JSON format.",
      }),
    }, {
      go: "FormatOptions",
      doc: "[Alpha] Options of each log format; needs LoggingAlphaOptions.",
    }),
  }, {
    go: "logsapi.LoggingConfiguration",
    doc: "Logging options (component-base).",
  }),
  enableSystemLogHandler: f.bool({
    go: "*bool",
    doc: "Serves system logs at /logs/.",
    default: true,
  }),
  enableSystemLogQuery: f.bool({
    go: "*bool",
    doc: "Enables node log queries on /logs; needs enableSystemLogHandler.",
  }),
  shutdownGracePeriod: f.duration({
    go: "metav1.Duration",
    doc: "Total delay of node shutdown for terminating pods; 0 disables graceful shutdown.",
  }),
  shutdownGracePeriodCriticalPods: f.duration({
    go: "metav1.Duration",
    doc: "Part of shutdownGracePeriod kept for terminating critical pods.",
  }),
  shutdownGracePeriodByPodPriority: f.list(
    f.object({
      priority: f.int32({
        go: "int32",
        doc: "Lowest priority class value of the range.",
      }),
      shutdownGracePeriodSeconds: f.int64({
        go: "int64",
        doc: "Shutdown grace period in seconds for pods in the range.",
      }),
    }, {
      go: "ShutdownGracePeriodByPodPriority",
      doc: "The shutdown grace period of one range of pod priorities.",
    }),
    {
      go: "[]ShutdownGracePeriodByPodPriority",
      doc: "Shutdown grace periods by pod priority; excludes the two plain grace periods.",
    },
  ),
  crashLoopBackOff: f.object({
    maxContainerRestartPeriod: f.duration({
      go: "*metav1.Duration",
      doc: "Longest container restart back-off, 1s to 300s.",
      // Defaulted by applyDependentDefaults: 300s when KubeletCrashLoopBackOffMax is on.
    }),
  }, {
    go: "CrashLoopBackOffConfig",
    doc: "Node-wide settings of container restart back-off.",
  }),
  reservedMemory: f.list(
    f.object({
      numaNode: f.int32({ go: "int32", doc: "The NUMA node the reservation applies to." }),
      limits: f.map(qty("Amount reserved, such as 1Gi."), {
        go: "v1.ResourceList",
        doc: "Memory reserved on the node by type: memory or hugepages-<size>.",
      }),
    }, {
      go: "MemoryReservation",
      doc: "The memory reserved on one NUMA node.",
    }),
    {
      go: "[]MemoryReservation",
      doc: "Memory per NUMA node kept from container workloads by the memory manager.",
      // The flag's text is `0:memory=1Gi,hugepages-1Mi=2Gi;1:memory=2Gi`.
      flag: "reserved-memory",
      flagFormat: "reserved-memory",
    },
  ),
  enableProfilingHandler: f.bool({
    go: "*bool",
    doc: "Serves profiling at /debug/pprof/.",
    default: true,
  }),
  enableDebugFlagsHandler: f.bool({
    go: "*bool",
    doc: "Serves the flags endpoint at /debug/flags/v.",
    default: true,
  }),
  seccompDefault: f.bool({
    go: "*bool",
    doc: "Uses RuntimeDefault as the default seccomp profile of all workloads.",
    default: false,
    // No flag: upstream's --seccomp-default is a KubeletFlags flag ORed with this at start-up.
  }),
  memoryThrottlingFactor: f.float({
    go: "*float64",
    doc: "Factor of the memory limit that sets cgroup v2 memory.high under MemoryQoS, in (0, 1].",
    default: 0.9,
  }),
  memoryReservationPolicy: f.string({
    go: "MemoryReservationPolicy",
    doc: "None, or TieredReservation to set memory.min and memory.low under MemoryQoS.",
    default: "None",
    enum: ["None", "TieredReservation"],
  }),
  registerWithTaints: f.list(
    f.object({
      key: f.string({ go: "string", doc: "The taint key." }),
      value: f.string({ go: "string", doc: "The taint value." }),
      effect: f.string({
        go: "TaintEffect",
        doc: "What the taint does to pods that do not tolerate it.",
        enum: ["NoSchedule", "PreferNoSchedule", "NoExecute"],
      }),
      timeAdded: f.string({
        // A metav1.Time, kept as its RFC 3339 text; upstream validation refuses any value.
        go: "*metav1.Time",
        doc: "When the taint was added; must not be set here.",
      }),
    }, {
      go: "v1.Taint",
      doc: "A taint to place on the node.",
    }),
    {
      go: "[]v1.Taint",
      doc: "Taints added to the Node when it first registers; needs registerNode.",
      flag: "register-with-taints",
      flagFormat: "taints",
    },
  ),
  registerNode: f.bool({
    go: "*bool",
    doc: "Registers the node with the API server.",
    default: true,
    flag: "register-node",
  }),
  tracing: f.optionalObject({
    endpoint: f.string({
      go: "*string",
      doc: "OTLP gRPC collector to send traces to (insecure); localhost:4317 when unset.",
    }),
    samplingRatePerMillion: f.int32({
      go: "*int32",
      doc: "Spans sampled per million; unset follows the parent span and never samples otherwise.",
    }),
  }, {
    go: "*tracingapi.TracingConfiguration",
    doc: "OpenTelemetry tracing of the kubelet (component-base).",
  }),
  localStorageCapacityIsolation: f.bool({
    go: "*bool",
    doc: "Enforces ephemeral storage requests, limits and emptyDir sizeLimit.",
    default: true,
    flag: "local-storage-capacity-isolation",
  }),
  containerRuntimeEndpoint: f.string({
    go: "string",
    doc: "CRI runtime service endpoint, e.g. unix:///path/to/runtime.sock.",
    default: "unix:///run/containerd/containerd.sock",
    flag: "container-runtime-endpoint",
  }),
  imageServiceEndpoint: f.string({
    go: "string",
    doc: "CRI image service endpoint; containerRuntimeEndpoint when empty.",
    flag: "image-service-endpoint",
  }),
  failCgroupV1: f.bool({
    go: "*bool",
    doc: "Refuses to start on hosts that use cgroup v1.",
    default: true,
    flag: "fail-cgroupv1",
  }),
  userNamespaces: f.optionalObject({
    idsPerPod: f.int64({
      go: "*int64",
      doc: "UIDs and GIDs mapped per pod, a multiple of 65536 below 2^32 (65536 when unset).",
    }),
  }, {
    go: "*UserNamespaces",
    doc: "User namespace settings.",
  }),
};

/** The decoded and defaulted kubelet configuration. */
export type KubeletConfiguration = ObjectOf<typeof kubeletConfigurationFields>;

/**
 * Feature gates whose state decides a default, with their default in v1.36 (both beta and on
 * since v1.35, per upstream `pkg/features/kube_features.go`).
 */
const GATE_DEFAULTS = {
  KubeletCrashLoopBackOffMax: true,
  KubeletEnsureSecretPulledImages: true,
} as const;

function gateEnabled(cfg: KubeletConfiguration, gate: keyof typeof GATE_DEFAULTS): boolean {
  return cfg.featureGates?.[gate] ?? GATE_DEFAULTS[gate];
}

const FIVE_MINUTES_MS = 5 * 60_000;
const DEFAULT_NODE_STATUS_UPDATE_MS = 10_000;
/** Upstream's MaxContainerBackOff. */
const MAX_CONTAINER_BACK_OFF_MS = 300_000;

/**
 * Applies the defaults the field table cannot hold, on a configuration that
 * `applyDefaults` has already defaulted; changes `cfg` in place.
 *
 * `decoded` is the file's decoded object before defaulting. One rule depends on whether the
 * file set a field at all; without `decoded`, a value equal to its default counts as not set.
 */
export function applyDependentDefaults(
  cfg: KubeletConfiguration,
  decoded?: Readonly<Record<string, unknown>>,
): void {
  // defaults.go: nodeStatusReportFrequency falls back to nodeStatusUpdateFrequency when that was
  // set explicitly, for backward compatibility, and to 5m otherwise.
  if (!cfg.nodeStatusReportFrequency) {
    const update = cfg.nodeStatusUpdateFrequency;
    const explicit = decoded === undefined
      ? update !== DEFAULT_NODE_STATUS_UPDATE_MS
      : Boolean(decoded.nodeStatusUpdateFrequency);
    cfg.nodeStatusReportFrequency = explicit && update ? update : FIVE_MINUTES_MS;
  }

  // defaults.go: a nil or negative podPidsLimit becomes -1 (the node's allocatable PID limit).
  if (cfg.podPidsLimit < 0) cfg.podPidsLimit = -1;

  // defaults.go: serializeImagePulls is true unless maxParallelImagePulls is set to 2 or more.
  if (cfg.serializeImagePulls === undefined) {
    const parallel = cfg.maxParallelImagePulls;
    cfg.serializeImagePulls = parallel === undefined || parallel < 2;
  }

  // server.go loadConfigFile: an absent evictionHard gets the platform's defaults (Linux here);
  // with mergeDefaultEvictionSettings, signals the file leaves out inherit them instead of
  // being disabled.
  if (cfg.evictionHard === undefined) {
    cfg.evictionHard = { ...DEFAULT_EVICTION_HARD };
  } else if (cfg.mergeDefaultEvictionSettings) {
    cfg.evictionHard = { ...DEFAULT_EVICTION_HARD, ...cfg.evictionHard };
  }

  // defaults.go: when KubeletCrashLoopBackOffMax is enabled, the back-off cap defaults to
  // MaxContainerBackOff (300s).
  if (
    gateEnabled(cfg, "KubeletCrashLoopBackOffMax") &&
    cfg.crashLoopBackOff.maxContainerRestartPeriod === undefined
  ) {
    cfg.crashLoopBackOff.maxContainerRestartPeriod = MAX_CONTAINER_BACK_OFF_MS;
  }

  // defaults.go: when KubeletEnsureSecretPulledImages is enabled, images not pulled by the kubelet
  // may be used without re-checking credentials.
  if (
    gateEnabled(cfg, "KubeletEnsureSecretPulledImages") &&
    !cfg.imagePullCredentialsVerificationPolicy
  ) {
    cfg.imagePullCredentialsVerificationPolicy = "NeverVerifyPreloadedImages";
  }
}
