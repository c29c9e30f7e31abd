/**
 * The rule the configuration keeps: every KubeletConfiguration field and every flag either takes
 * effect (a module outside the schema, defaults, validation and preflight reads it), is one that
 * upstream v1.36.3 accepts and ignores too (deprecated no-ops, settings of a policy that is
 * refused otherwise), or stops the agent at start naming the field, its value and that it is not
 * supported. The tables below classify each one; the tests check every claim: the module reads
 * the field, the refusal happens. A field added to the schema without a row fails the walk.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { ConfigError, listFields } from "../apis/config_schema.ts";
import { type KubeletConfiguration, kubeletConfigurationFields } from "../apis/config_types.ts";
import { kubeletFlagList, newKubeletFlags } from "../apis/flags.ts";
import { evictionConfigFrom } from "../eviction/eviction_manager.ts";
import { loadKubeletConfiguration } from "./kubelet_config.ts";
import { validateKubeletFlags } from "./kubelet_flags.ts";

const SRC = new URL("../", import.meta.url);

/** Read by `module`, which contains `reads` (default: the field's last name) as a word. */
interface Effect {
  readonly kind: "effect";
  readonly module: string;
  readonly reads?: string;
}
/** Accepted and ignored by upstream too; `ref` says where upstream shows it. */
interface UpstreamNoop {
  readonly kind: "noop";
  readonly ref: string;
}
/**
 * Stops the start when set to `value`: loadKubeletConfiguration refuses it (unsupported_settings.ts
 * or upstream's validation), or `by`, the start-up function of the module that refuses it, which
 * `wiredIn` shows the start-up path calls with the field.
 */
interface Refused {
  readonly kind: "refused";
  readonly value: unknown;
  /** Other fields the file sets for the value to be taken at all (a feature gate). */
  readonly with?: Record<string, unknown>;
  readonly by?: (config: KubeletConfiguration) => unknown;
  readonly wiredIn?: { readonly module: string; readonly reads: string };
}
/** Not classified yet: what it lacks, and why it is not done here. */
interface Pending {
  readonly kind: "pending";
  readonly reason: string;
}
type Class = Effect | UpstreamNoop | Refused | Pending;

const read = (module: string, reads?: string): Effect => ({ kind: "effect", module, reads });
const noop = (ref: string): UpstreamNoop => ({ kind: "noop", ref });
const refused = (value: unknown, more: Omit<Refused, "kind" | "value"> = {}): Refused => ({
  kind: "refused",
  value,
  ...more,
});
const pending = (reason: string): Pending => ({ kind: "pending", reason });

/** Where a field may not be said to take effect: the schema, defaults, validation, checks. */
const NOT_AN_EFFECT = [
  /^apis\/config_(types|schema|reference)\.ts$/,
  /^apis\/flags\.ts$/,
  /^apis\/_?validation.*\.ts$/,
  /^app\/(kubelet_config|unsupported_settings)\.ts$/,
  /^preflight\//,
  /^privilege\/permission(s|_set)\.ts$/,
  /^testing\//,
];

/** Every leaf field of the KubeletConfiguration (a list of structs counts as one field). */
const FIELDS: Record<string, Class> = {
  enableServer: read("kubelet.ts", "config.enableServer"),
  staticPodPath: read("kubelet.ts", "config.staticPodPath"),
  podLogsDir: read("kubelet_pod_lifecycle.ts", "config.podLogsDir"),
  syncFrequency: read("kubelet_pod_lifecycle.ts", "config.syncFrequency"),
  fileCheckFrequency: read("kubelet.ts", "config.fileCheckFrequency"),
  httpCheckFrequency: read("kubelet.ts", "config.httpCheckFrequency"),
  staticPodURL: read("kubelet.ts", "config.staticPodURL"),
  staticPodURLHeader: read("kubelet.ts", "config.staticPodURLHeader"),
  address: read("kubelet.ts", "config.address"),
  port: read("kubelet.ts", "config.port"),
  readOnlyPort: read("kubelet.ts", "config.readOnlyPort"),
  tlsCertFile: read("kubelet.ts", "config.tlsCertFile"),
  tlsPrivateKeyFile: read("kubelet.ts", "config.tlsPrivateKeyFile"),
  tlsCipherSuites: read("server/tls.ts", "tlsCipherSuites"),
  tlsCurvePreferences: refused([23]),
  tlsMinVersion: read("server/tls.ts", "tlsMinVersion"),
  rotateCertificates: read("app/kubelet_server.ts", "config.rotateCertificates"),
  serverTLSBootstrap: read("kubelet.ts", "config.serverTLSBootstrap"),
  "authentication.x509.clientCAFile": read("server/auth.ts", "authentication.x509.clientCAFile"),
  "authentication.webhook.enabled": read("server/auth.ts", "authentication.webhook.enabled"),
  "authentication.webhook.cacheTTL": read("server/auth.ts", "authentication.webhook.cacheTTL"),
  "authentication.anonymous.enabled": read("server/auth.ts", "authentication.anonymous.enabled"),
  "authorization.mode": read("server/auth.ts", "authorization.mode"),
  "authorization.webhook.cacheAuthorizedTTL": read(
    "server/auth.ts",
    "authorization.webhook.cacheAuthorizedTTL",
  ),
  "authorization.webhook.cacheUnauthorizedTTL": read(
    "server/auth.ts",
    "authorization.webhook.cacheUnauthorizedTTL",
  ),
  registryPullQPS: read("kubelet_pod_lifecycle.ts", "config.registryPullQPS"),
  registryBurst: read("kubelet_pod_lifecycle.ts", "config.registryBurst"),
  imagePullCredentialsVerificationPolicy: read(
    "kubelet_pod_lifecycle.ts",
    "config.imagePullCredentialsVerificationPolicy",
  ),
  preloadedImagesVerificationAllowlist: read(
    "kubelet_pod_lifecycle.ts",
    "config.preloadedImagesVerificationAllowlist",
  ),
  eventRecordQPS: read("app/kubelet_server.ts", "config.eventRecordQPS"),
  eventBurst: read("app/kubelet_server.ts", "config.eventBurst"),
  enableDebuggingHandlers: read("kubelet.ts", "config.enableDebuggingHandlers"),
  enableContentionProfiling: refused(true),
  healthzPort: read("kubelet.ts", "config.healthzPort"),
  healthzBindAddress: read("kubelet.ts", "config.healthzBindAddress"),
  oomScoreAdj: read("app/kubelet_server.ts", "s.config.oomScoreAdj"),
  clusterDomain: read("kubelet_pod_lifecycle.ts", "config.clusterDomain"),
  clusterDNS: read("kubelet_pod_lifecycle.ts", "config.clusterDNS"),
  streamingConnectionIdleTimeout: read("kubelet.ts", "config.streamingConnectionIdleTimeout"),
  nodeStatusUpdateFrequency: read("kubelet_node_status.ts", "nodeStatusUpdateFrequency"),
  nodeStatusReportFrequency: read("kubelet_node_status.ts", "nodeStatusReportFrequency"),
  nodeLeaseDurationSeconds: read("kubelet.ts", "config.nodeLeaseDurationSeconds"),
  imageMinimumGCAge: read("kubelet.ts", "config.imageMinimumGCAge"),
  imageMaximumGCAge: read("kubelet.ts", "imageMaximumGCAge"),
  imageGCHighThresholdPercent: read("kubelet.ts", "config.imageGCHighThresholdPercent"),
  imageGCLowThresholdPercent: read("kubelet.ts", "config.imageGCLowThresholdPercent"),
  volumeStatsAggPeriod: read("kubelet.ts", "config.volumeStatsAggPeriod"),
  kubeletCgroups: read("kubelet.ts", "config.kubeletCgroups"),
  systemCgroups: read("kubelet.ts", "config.systemCgroups"),
  cgroupRoot: read("kubelet.ts", "config.cgroupRoot"),
  cgroupsPerQOS: read("kubelet.ts", "config.cgroupsPerQOS"),
  cgroupDriver: read("kubelet.ts", "config.cgroupDriver"),
  cpuManagerPolicy: read("cm/resource_managers.ts", "config.cpuManagerPolicy"),
  singleProcessOOMKill: read("kubelet_pod_lifecycle.ts", "config.singleProcessOOMKill"),
  cpuManagerPolicyOptions: read("cm/resource_managers.ts", "config.cpuManagerPolicyOptions"),
  cpuManagerReconcilePeriod: read("cm/resource_managers.ts", "config.cpuManagerReconcilePeriod"),
  memoryManagerPolicy: read("cm/resource_managers.ts", "config.memoryManagerPolicy"),
  topologyManagerPolicy: read("cm/resource_managers.ts", "config.topologyManagerPolicy"),
  topologyManagerScope: read("cm/resource_managers.ts", "config.topologyManagerScope"),
  topologyManagerPolicyOptions: read(
    "cm/resource_managers.ts",
    "config.topologyManagerPolicyOptions",
  ),
  qosReserved: read("cm/container_manager.ts", "qosReserved"),
  runtimeRequestTimeout: read("app/kubelet_server.ts", "config.runtimeRequestTimeout"),
  hairpinMode: noop(
    "validated only: nothing in pkg/kubelet reads HairpinMode since dockershim was removed",
  ),
  maxPods: read("nodestatus/node_status.ts", "config.maxPods"),
  podCIDR: read("kubelet.ts", "config.podCIDR"),
  podPidsLimit: read("cm/container_manager.ts", "podPidsLimit"),
  resolvConf: read("kubelet_pod_lifecycle.ts", "config.resolvConf"),
  runOnce: noop(
    "v1beta1 runOnce is refused by upstream's validation when true; the --runonce flag acts",
  ),
  cpuCFSQuota: read("kubelet_pod_lifecycle.ts", "config.cpuCFSQuota"),
  cpuCFSQuotaPeriod: read("kubelet_pod_lifecycle.ts", "config.cpuCFSQuotaPeriod"),
  nodeStatusMaxImages: read("nodestatus/node_status.ts", "config.nodeStatusMaxImages"),
  maxOpenFiles: read("app/kubelet_server.ts", "config.maxOpenFiles"),
  contentType: refused("application/vnd.kubernetes.protobuf"),
  kubeAPIQPS: read("app/kubelet_server.ts", "config.kubeAPIQPS"),
  kubeAPIBurst: read("app/kubelet_server.ts", "config.kubeAPIBurst"),
  serializeImagePulls: read("kubelet_pod_lifecycle.ts", "config.serializeImagePulls"),
  maxParallelImagePulls: read("kubelet_pod_lifecycle.ts", "config.maxParallelImagePulls"),
  evictionHard: read("eviction/thresholds.ts", "evictionHard"),
  evictionSoft: read("eviction/thresholds.ts", "evictionSoft"),
  evictionSoftGracePeriod: read("eviction/thresholds.ts", "evictionSoftGracePeriod"),
  evictionPressureTransitionPeriod: read(
    "eviction/_config.ts",
    "cfg.evictionPressureTransitionPeriod",
  ),
  evictionMaxPodGracePeriod: read("eviction/_config.ts", "cfg.evictionMaxPodGracePeriod"),
  evictionMinimumReclaim: read("eviction/thresholds.ts", "evictionMinimumReclaim"),
  mergeDefaultEvictionSettings: read(
    "apis/config_types.ts#applyDependentDefaults",
    "cfg.mergeDefaultEvictionSettings",
  ),
  podsPerCore: read("nodestatus/node_status.ts", "config.podsPerCore"),
  enableControllerAttachDetach: read("kubelet.ts", "config.enableControllerAttachDetach"),
  protectKernelDefaults: read("app/kubelet_server.ts", "config.protectKernelDefaults"),
  makeIPTablesUtilChains: read("kubelet.ts", "config.makeIPTablesUtilChains"),
  iptablesMasqueradeBit: noop('deprecated in types.go: "no longer has any effect"'),
  iptablesDropBit: noop('deprecated in types.go: "no longer has any effect"'),
  featureGates: read("kubelet.ts", "config.featureGates"),
  failSwapOn: read("app/kubelet_server.ts", "config.failSwapOn"),
  "memorySwap.swapBehavior": read("kubelet_pod_lifecycle.ts", "config.memorySwap?.swapBehavior"),
  containerLogMaxSize: read("kubelet.ts", "config.containerLogMaxSize"),
  containerLogMaxFiles: read("kubelet.ts", "config.containerLogMaxFiles"),
  containerLogMaxWorkers: read("kubelet.ts", "config.containerLogMaxWorkers"),
  containerLogMonitorInterval: read("kubelet.ts", "config.containerLogMonitorInterval"),
  configMapAndSecretChangeDetectionStrategy: read(
    "kubelet_pod_lifecycle.ts",
    "config.configMapAndSecretChangeDetectionStrategy",
  ),
  systemReserved: read("kubelet.ts", "config.systemReserved"),
  kubeReserved: read("kubelet.ts", "config.kubeReserved"),
  reservedSystemCPUs: read("cm/resource_managers.ts", "config.reservedSystemCPUs"),
  showHiddenMetricsForVersion: refused("1.35"),
  systemReservedCgroup: read("cm/container_manager.ts", "systemReservedCgroup"),
  kubeReservedCgroup: read("cm/container_manager.ts", "kubeReservedCgroup"),
  enforceNodeAllocatable: read("cm/container_manager.ts", "enforceNodeAllocatable"),
  allowedUnsafeSysctls: read("kubelet.ts", "config.allowedUnsafeSysctls"),
  volumePluginDir: read("kubelet.ts", "config.volumePluginDir"),
  providerID: read("kubelet.ts", "config.providerID"),
  kernelMemcgNotification: refused(true, {
    by: (c) => evictionConfigFrom(c),
    wiredIn: { module: "kubelet.ts", reads: "evictionConfigFrom(config" },
  }),
  "logging.format": read("app/kubelet_command.ts", "config.logging.format"),
  "logging.flushFrequency": noop(
    "component-base logs: the flush daemon flushes buffered output only; klog writes to stderr " +
      "unbuffered (the kubelet's only output), as klog.ts does",
  ),
  "logging.verbosity": read("app/kubelet_command.ts", "config.logging.verbosity"),
  "logging.vmodule": read("app/kubelet_command.ts", "config.logging.vmodule"),
  "logging.options.text.splitStream": refused(true, {
    with: { featureGates: { LoggingAlphaOptions: true } },
  }),
  "logging.options.text.infoBufferSize": refused("64Ki", {
    with: { featureGates: { LoggingAlphaOptions: true } },
  }),
  "logging.options.json.splitStream": refused(true, {
    with: { featureGates: { LoggingAlphaOptions: true } },
  }),
  "logging.options.json.infoBufferSize": refused("64Ki", {
    with: { featureGates: { LoggingAlphaOptions: true } },
  }),
  enableSystemLogHandler: read("kubelet.ts", "config.enableSystemLogHandler"),
  enableSystemLogQuery: read("kubelet.ts", "enableSystemLogQuery: config.enableSystemLogQuery"),
  shutdownGracePeriod: read("kubelet.ts", "config.shutdownGracePeriod"),
  shutdownGracePeriodCriticalPods: read("kubelet.ts", "config.shutdownGracePeriodCriticalPods"),
  shutdownGracePeriodByPodPriority: read(
    "nodeshutdown/nodeshutdown_manager.ts",
    "shutdownGracePeriodByPodPriority",
  ),
  "crashLoopBackOff.maxContainerRestartPeriod": read(
    "kubelet_pod_lifecycle.ts",
    "config.crashLoopBackOff?.maxContainerRestartPeriod",
  ),
  reservedMemory: read("cm/resource_managers.ts", "config.reservedMemory"),
  enableProfilingHandler: read("kubelet.ts", "config.enableProfilingHandler"),
  enableDebugFlagsHandler: read("kubelet.ts", "config.enableDebugFlagsHandler"),
  seccompDefault: read("kubelet.ts", "config.seccompDefault"),
  memoryThrottlingFactor: noop(
    "read under the MemoryQoS gate only (alpha, off; featureGates.MemoryQoS: true is refused)",
  ),
  memoryReservationPolicy: noop(
    "read under the MemoryQoS gate only (alpha, off; featureGates.MemoryQoS: true is refused)",
  ),
  registerWithTaints: read("kubelet.ts", "config.registerWithTaints"),
  registerNode: read("kubelet_node_status.ts", "registerNode"),
  "tracing.endpoint": refused("localhost:4317"),
  "tracing.samplingRatePerMillion": refused(100),
  localStorageCapacityIsolation: read("eviction/_config.ts", "cfg.localStorageCapacityIsolation"),
  containerRuntimeEndpoint: read("kubelet.ts", "config.containerRuntimeEndpoint"),
  imageServiceEndpoint: read("app/kubelet_server.ts", "config.imageServiceEndpoint"),
  // Upstream's effect is a validation rule: refuse to start on a cgroup v1 host.
  failCgroupV1: read("apis/_validation_node.ts#checkLinux", "failCgroupV1"),
  "userNamespaces.idsPerPod": read("kubelet.ts", "config.userNamespaces?.idsPerPod"),
};

/**
 * The credential provider flags: read by the module of src/ (outside apis/) that names the
 * KubeletFlags key, once src/credentialprovider/ exists and one does; pending until then.
 */
function credentialProviderFlag(key: string): Class {
  const hasFolder = (() => {
    try {
      return Deno.statSync(new URL("credentialprovider/", SRC)).isDirectory;
    } catch {
      return false;
    }
  })();
  const readers = hasFolder ? modulesNaming(key) : [];
  return readers[0] !== undefined
    ? read(readers[0], key)
    : pending("the credential provider plugins (src/credentialprovider/) do not read it yet");
}

function modulesNaming(word: string): string[] {
  const out: string[] = [];
  const walk = (dir: URL, prefix: string) => {
    for (const e of Deno.readDirSync(dir)) {
      if (e.isDirectory) walk(new URL(`${e.name}/`, dir), `${prefix}${e.name}/`);
      else if (
        e.name.endsWith(".ts") && !e.name.endsWith("_test.ts") && !prefix.startsWith("apis/") &&
        !prefix.startsWith("testing/") &&
        new RegExp(`\\b${word}\\b`).test(Deno.readTextFileSync(new URL(e.name, dir)))
      ) out.push(`${prefix}${e.name}`);
    }
  };
  walk(SRC, "");
  return out.filter((m) => !NOT_AN_EFFECT.some((re) => re.test(m))).sort();
}

/** Per-node and global flags; those that set a configuration field are classified above. */
const FLAGS: Record<string, Class> = {
  "config": read("app/kubelet_command.ts", "flags.kubeletConfigFile"),
  "config-dir": read("app/kubelet_command.ts", "flags.kubeletDropinConfigDirectory"),
  "kubeconfig": read("app/kubelet_server.ts", "flags.kubeConfig"),
  "bootstrap-kubeconfig": read("app/kubelet_server.ts", "flags.bootstrapKubeconfig"),
  "hostname-override": read("app/kubelet_server.ts", "flags.hostnameOverride"),
  "node-ip": read("app/kubelet_server.ts", "flags.nodeIP"),
  "cert-dir": read("app/kubelet_server.ts", "flags.certDirectory"),
  "cloud-provider": read("app/kubelet_flags.ts", "flags.cloudProvider"),
  "root-dir": read("kubelet.ts", "flags.rootDirectory"),
  "seccomp-default": read("kubelet.ts", "flags.seccompDefault"),
  "node-labels": read("kubelet.ts", "nodeLabels"),
  "lock-file": refused("/run/kubelet.lock"),
  "exit-on-lock-contention": refused(true),
  "runonce": read("app/kubelet_server.ts", "flags.runOnce"),
  "pod-infra-container-image": noop(
    "deprecated; nothing in cmd/kubelet or pkg/kubelet reads PodInfraContainerImage in v1.36",
  ),
  // Being built by another change: classified by where the flag is read once it is.
  "image-credential-provider-config": credentialProviderFlag("imageCredentialProviderConfigFile"),
  "image-credential-provider-bin-dir": credentialProviderFlag("imageCredentialProviderBinDir"),
  "housekeeping-interval": read("kubelet.ts", "flags.housekeepingInterval"),
  "minimum-container-ttl-duration": read("kubelet.ts", "minimumGCAge"),
  "maximum-dead-containers-per-container": read("kubelet.ts", "maxPerPodContainerCount"),
  "maximum-dead-containers": read("kubelet.ts", "maxContainerCount"),
  "register-schedulable": read("kubelet.ts", "registerSchedulable"),
  "experimental-allocatable-ignore-eviction": read(
    "eviction/_config.ts",
    "experimentalNodeAllocatableIgnoreEvictionThreshold",
  ),
  "experimental-mounter-path": refused("/usr/local/bin/mount"),
  "help": read("app/kubelet_command.ts", "cl.help"),
  "check": read("app/kubelet_command.ts", "cl.check"),
  "max-parallel-sandbox-starts": read("kubelet.ts", "flags.maxParallelSandboxStarts"),
  "least-privilege": read("app/kubelet_command.ts", "cl.leastPrivilege"),
  "version": read("app/kubelet_command.ts", "cl.version"),
};

/** Fields the pending rows are allowed to hold; a new one must be added here knowingly. */
const KNOWN_PENDING: string[] = [];

function leafFields(): string[] {
  return listFields(kubeletConfigurationFields)
    .filter(({ path, field }) => !path.includes("[]") && field.spec.type !== "object")
    .map(({ path }) => path);
}

async function moduleText(module: string): Promise<string> {
  const [path, fn] = module.split("#") as [string, string | undefined];
  if (path.endsWith("/")) {
    const dir = new URL(path, SRC);
    const texts: string[] = [];
    for await (const e of Deno.readDir(dir)) {
      if (e.isFile && e.name.endsWith(".ts") && !e.name.endsWith("_test.ts")) {
        texts.push(await Deno.readTextFile(new URL(e.name, dir)));
      }
    }
    return texts.join("\n");
  }
  const text = await Deno.readTextFile(new URL(path, SRC));
  if (fn === undefined) return text;
  const at = text.indexOf(`function ${fn}(`);
  assert.ok(at >= 0, `${path} has no function ${fn}`);
  return text.slice(at);
}

function escape(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

async function assertReads(name: string, c: { module: string; reads?: string }): Promise<void> {
  const path = c.module.split("#")[0]!;
  // Defaulting and validation rules that are the field's whole effect upstream too.
  const excepted = /#(applyDependentDefaults|checkLinux)$/.test(c.module);
  assert.ok(
    excepted || !NOT_AN_EFFECT.some((re) => re.test(path)),
    `${name}: ${c.module} is schema, defaults, validation or a check, not an effect`,
  );
  const reads = c.reads ?? name.split(".").at(-1)!;
  const text = await moduleText(c.module);
  assert.match(
    text,
    new RegExp(`${escape(reads)}(?![\\w])`),
    `${name}: ${c.module} reads ${reads}`,
  );
}

function setPath(target: Record<string, unknown>, path: string, value: unknown): void {
  const keys = path.split(".");
  let obj = target;
  for (const k of keys.slice(0, -1)) obj = (obj[k] ??= {}) as Record<string, unknown>;
  obj[keys.at(-1)!] = value;
}

async function loadWith(raw: Record<string, unknown>) {
  const dir = await Deno.makeTempDir({ prefix: "config-fields-" });
  const file = join(dir, "k.json");
  try {
    await Deno.writeTextFile(
      file,
      JSON.stringify({
        apiVersion: "kubelet.config.k8s.io/v1beta1",
        kind: "KubeletConfiguration",
        ...raw,
      }),
    );
    return await loadKubeletConfiguration({
      configFile: file,
      dropinDir: "",
      flags: [],
      cgroupV1: false,
    })
      .then((l) => l.config, (e: unknown) => e as Error);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("every KubeletConfiguration field is classified, and no row names a field that is gone", () => {
  const fields = leafFields();
  assert.deepEqual(fields.filter((f) => !(f in FIELDS)), [], "fields with no row");
  assert.deepEqual(Object.keys(FIELDS).filter((f) => !fields.includes(f)), [], "rows of no field");
});

Deno.test("every flag is classified: its field's row, or a row of its own", () => {
  const flags = kubeletFlagList(kubeletConfigurationFields);
  for (const f of flags) {
    if (f.field !== undefined) assert.ok(f.field in FIELDS, `--${f.name} sets ${f.field}`);
  }
  const own = flags.filter((f) => f.field === undefined).map((f) => f.name);
  assert.deepEqual(own.filter((f) => !(f in FLAGS)), [], "flags with no row");
  assert.deepEqual(Object.keys(FLAGS).filter((f) => !own.includes(f)), [], "rows of no flag");
});

Deno.test("each field and flag said to take effect is read by the module named", async () => {
  for (const [name, c] of [...Object.entries(FIELDS), ...Object.entries(FLAGS)]) {
    if (c.kind === "effect") await assertReads(name, c);
    if (c.kind === "noop") assert.ok(c.ref.length > 20, `${name}: name upstream's reference`);
  }
});

Deno.test("each field said to be refused stops the start, naming the field and its value", async () => {
  for (const [name, c] of Object.entries(FIELDS)) {
    if (c.kind !== "refused") continue;
    const raw: Record<string, unknown> = structuredClone(c.with ?? {});
    setPath(raw, name, c.value);
    const got = await loadWith(raw);
    if (c.by) {
      // Accepted by the loader, refused by the module the start-up path hands it to.
      assert.ok(!(got instanceof Error), `${name}: ${got}`);
      assert.throws(() => c.by!(got), /not supported yet/, name);
      await assertReads(name, c.wiredIn!);
      continue;
    }
    assert.ok(got instanceof ConfigError, `${name}=${JSON.stringify(c.value)} was accepted`);
    assert.equal(got.path, name, got.message);
    assert.match(got.message, /not supported yet|refused/, got.message);
    const shown = typeof c.value === "string" ? `'${c.value}'` : JSON.stringify(c.value);
    assert.ok(got.message.includes(`current value is ${shown}`), got.message);
  }
});

Deno.test("each flag said to be refused stops the start, naming the flag", () => {
  const keys: Record<string, keyof ReturnType<typeof newKubeletFlags>> = {
    "lock-file": "lockFilePath",
    "exit-on-lock-contention": "exitOnLockContention",
    "experimental-mounter-path": "experimentalMounterPath",
  };
  for (const [name, c] of Object.entries(FLAGS)) {
    if (c.kind !== "refused") continue;
    const key = keys[name];
    assert.ok(key, `--${name}: name its KubeletFlags key here`);
    const flags = { ...newKubeletFlags(), [key]: c.value };
    const [first] = validateKubeletFlags(flags);
    assert.ok(first, `--${name} was accepted`);
    assert.ok(
      first.message.includes(`--${name}`) || first.message.includes("lock file"),
      first.message,
    );
  }
});

Deno.test("the rows still pending are the known ones", () => {
  const rows = [...Object.entries(FIELDS), ...Object.entries(FLAGS)];
  const open = rows.filter(([, c]) => c.kind === "pending").map(([n]) => n);
  assert.deepEqual(open, KNOWN_PENDING);
});
