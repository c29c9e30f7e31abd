/**
 * @module
 * The CRI PodSandboxConfig of a pod: identity, labels and annotations, hostname, log directory,
 * DNS, host port mappings, and the Linux part (cgroup parent, namespaces, sandbox security
 * context, sysctls, overhead and pod-wide resources, without CFS quota for a pod on exclusive
 * CPUs). Pure apart from the DNS lookup it asks
 * network/dns.ts for; the runtime manager calls it before RunPodSandbox. Corresponds to upstream
 * `pkg/kubelet/kuberuntime/kuberuntime_sandbox.go` (generatePodSandboxConfig,
 * generatePodSandboxLinuxConfig), `kuberuntime_sandbox_linux.go` (applySandboxResources),
 * `calculateLinuxResources` of `kuberuntime_container_linux.go`, `kuberuntime/util`
 * (NamespacesForPod), `pkg/kubelet/kubelet_pods.go` (GeneratePodHostNameAndDomain),
 * `pkg/kubelet/util` (GetNodenameForKernel) and `kuberuntime/helpers.go`
 * (BuildPodLogsDirectory). A `hostUsers: false` pod gets the user namespace the userns manager
 * allocates for its RuntimeClass's handler (upstream NamespacesForPod). Pod specs this kubelet
 * cannot honour (Windows pods; user namespaces without a userns manager) are refused with
 * {@link SandboxConfigError}.
 */

import type { V1Container, V1Pod } from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import {
  type Dec,
  milliValueOf,
  podLimits,
  podRequests,
  resourceList,
  valueOf,
} from "../qos/resource_helpers.ts";
import type { DnsConfigurer } from "../network/dns.ts";
import { createLogger, kobj, type Logger } from "../klog/klog.ts";
import { newPodAnnotations, newPodLabels } from "./labels.ts";
import { milliCPUToQuota, milliCPUToShares } from "../cm/helpers_linux.ts";
import { namespacesForPod } from "./namespaces.ts";
import type { RuntimeHandlerLookup } from "../runtimeclass/runtimeclass_manager.ts";
import type { UsernsManager } from "../userns/userns_manager.ts";
import type { ExclusiveCpus } from "../cm/exclusive_cpus.ts";

/** Options of {@link generatePodSandboxConfig}. */
export interface SandboxConfigOptions {
  readonly dns: DnsConfigurer;
  /** @default "/var/log/pods" (config podLogsDir) */
  readonly podLogsDirectory: string;
  /** The pod's cgroup parent (the container manager's), "" for the runtime's default. */
  readonly cgroupParent?: string | ((pod: V1Pod) => string);
  /** Node hostname, for hostNetwork pods (whose sandbox hostname upstream leaves empty). */
  readonly nodeHostname: string;
  /** Cluster domain for the pod's subdomain FQDN (config clusterDomain). */
  readonly clusterDomain: string;
  /** Enforce CPU limits with CFS quota (config cpuCFSQuota). @default true */
  readonly cpuCFSQuota?: boolean;
  /** CFS quota period in ms (config cpuCFSQuotaPeriod). @default 100 */
  readonly cpuCFSQuotaPeriodMs?: number;
  /** Whether the node runs cgroup v2 (unified). @default false */
  readonly cgroupV2?: boolean;
  /** Config singleProcessOOMKill; false on cgroup v2 sets memory.oom.group. @default !cgroupV2 */
  readonly singleProcessOOMKill?: boolean;
  /**
   * Allocates the user namespace of a `hostUsers: false` pod (upstream's usernsManager).
   * @default none: such a pod is refused as not supported
   */
  readonly userNamespaces?: Pick<UsernsManager, "getOrCreateUserNamespaceMappings">;
  /** Resolves the pod's RuntimeClass to its runtime handler. @default the default handler "" */
  readonly runtimeClasses?: RuntimeHandlerLookup;
  /**
   * Pods on exclusive CPUs, whose pod-wide resources get no CFS quota (-1) under
   * DisableCPUQuotaWithExclusiveCPUs (cm/exclusive_cpus.ts).
   * @default none: every CPU limit is enforced, as with that gate off
   */
  readonly exclusiveCpus?: Pick<ExclusiveCpus, "pod">;
  readonly logger?: Logger;
}

/** A pod spec the sandbox config cannot be built from, named by field and value. */
export class SandboxConfigError extends Error {
  override name = "SandboxConfigError";
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

/** The pod's log directory, `<root>/<namespace>_<name>_<uid>` (upstream BuildPodLogsDirectory). */
export function buildPodLogsDirectory(
  root: string,
  namespace: string,
  podName: string,
  podUID: string,
): string {
  const dir = `${namespace}_${podName}_${podUID}`;
  return root.endsWith("/") ? `${root}${dir}` : `${root}/${dir}`;
}

/** Whether the pod uses the node's network namespace (upstream IsHostNetworkPod). */
export function isHostNetworkPod(pod: V1Pod): boolean {
  return pod.spec?.hostNetwork === true;
}

const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const SYSCTL_NAME = /^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$/;
const HOSTNAME_MAX_LEN = 63;
const FQDN_MAX_LEN = 64;

function dns1123LabelErrors(value: string): string[] {
  const errs: string[] = [];
  if (value.length > 63) errs.push("must be no more than 63 characters");
  if (!DNS1123_LABEL.test(value)) {
    errs.push(
      "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
    );
  }
  return errs;
}

function dns1123SubdomainErrors(value: string): string[] {
  const errs: string[] = [];
  if (value.length > 253) errs.push("must be no more than 253 characters");
  if (!DNS1123_SUBDOMAIN.test(value)) {
    errs.push(
      "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
    );
  }
  return errs;
}

// Cap at 63 characters (64 bytes with the terminating NUL) without a trailing '-' or '.'.
function truncatePodHostnameIfNeeded(podName: string, hostname: string, logger: Logger): string {
  if (hostname.length <= HOSTNAME_MAX_LEN) return hostname;
  const cut = hostname.slice(0, HOSTNAME_MAX_LEN);
  logger.error(null, "Hostname for pod was too long, truncated it", {
    podName,
    hostnameMaxLen: HOSTNAME_MAX_LEN,
    truncatedHostname: cut,
  });
  const trimmed = cut.replace(/[-.]+$/, "");
  if (trimmed === "") {
    throw new SandboxConfigError(
      `hostname for pod ${JSON.stringify(podName)} was invalid: ${JSON.stringify(hostname)}`,
    );
  }
  return trimmed;
}

/**
 * The pod's hostname and domain (upstream GeneratePodHostNameAndDomain, HostnameOverride on):
 * spec.hostnameOverride alone when set; else spec.hostname or the pod name, truncated; the
 * domain is `<subdomain>.<namespace>.svc.<clusterDomain>` when spec.subdomain is set.
 */
export function generatePodHostNameAndDomain(
  pod: V1Pod,
  clusterDomain: string,
  logger: Logger = createLogger(),
): { hostname: string; domain: string } {
  const podName = pod.metadata?.name ?? "";
  const override = pod.spec?.hostnameOverride;
  if (override !== undefined && override !== null) {
    const errs = dns1123SubdomainErrors(override);
    if (errs.length > 0) {
      throw new SandboxConfigError(
        `pod HostnameOverride ${JSON.stringify(override)} is not a valid DNS subdomain: ${
          errs.join(";")
        }`,
      );
    }
    return { hostname: truncatePodHostnameIfNeeded(podName, override, logger), domain: "" };
  }
  let hostname = podName;
  const specHostname = pod.spec?.hostname ?? "";
  if (specHostname !== "") {
    const errs = dns1123LabelErrors(specHostname);
    if (errs.length > 0) {
      throw new SandboxConfigError(
        `pod Hostname ${JSON.stringify(specHostname)} is not a valid DNS label: ${errs.join(";")}`,
      );
    }
    hostname = specHostname;
  }
  hostname = truncatePodHostnameIfNeeded(podName, hostname, logger);
  let domain = "";
  const subdomain = pod.spec?.subdomain ?? "";
  if (subdomain !== "") {
    const errs = dns1123LabelErrors(subdomain);
    if (errs.length > 0) {
      throw new SandboxConfigError(
        `pod Subdomain ${JSON.stringify(subdomain)} is not a valid DNS label: ${errs.join(";")}`,
      );
    }
    domain = `${subdomain}.${pod.metadata?.namespace ?? ""}.svc.${clusterDomain}`;
  }
  return { hostname, domain };
}

/** The kernel nodename: the FQDN when setHostnameAsFQDN and a domain are set (max 64 chars). */
export function getNodenameForKernel(
  hostname: string,
  domain: string,
  setHostnameAsFQDN: boolean | undefined,
): string {
  if (domain === "" || setHostnameAsFQDN !== true) return hostname;
  const fqdn = `${hostname}.${domain}`;
  if (fqdn.length > FQDN_MAX_LEN) {
    throw new SandboxConfigError(
      `failed to construct FQDN from pod hostname and cluster domain, FQDN ${fqdn} is too long (${FQDN_MAX_LEN} characters is the max, ${fqdn.length} characters requested)`,
    );
  }
  return fqdn;
}

function toRuntimeProtocol(protocol: string | undefined, logger: Logger): api.Protocol {
  switch (protocol) {
    case "TCP":
      return api.Protocol.TCP;
    case "UDP":
      return api.Protocol.UDP;
    case "SCTP":
      return api.Protocol.SCTP;
  }
  logger.warning("Unknown protocol, defaulting to TCP", { protocol: protocol ?? "" });
  return api.Protocol.TCP;
}

/**
 * Every declared port of the container, as upstream MakePortMappings: ports with hostPort 0 are
 * passed too (the runtime publishes only non-zero ones), and a repeated port name is dropped.
 */
function makePortMappings(container: V1Container, logger: Logger): api.PortMapping[] {
  const names = new Set<string>();
  const out: api.PortMapping[] = [];
  for (const p of container.ports ?? []) {
    const hostIP = p.hostIP ?? "";
    const family = hostIP === "" ? "any" : hostIP.includes(":") ? "v6" : "v4";
    const name = p.name ||
      `${family}-${p.protocol ?? ""}-${hostIP}:${p.containerPort}:${p.hostPort ?? 0}`;
    if (names.has(name)) {
      logger.info("Port name conflicted, it is defined more than once", { portName: name });
      continue;
    }
    names.add(name);
    out.push({
      protocol: toRuntimeProtocol(p.protocol, logger),
      containerPort: p.containerPort,
      hostPort: p.hostPort ?? 0,
      hostIp: hostIP,
    });
  }
  return out;
}

/** Whether any init, regular or ephemeral container is privileged (upstream). */
function hasPrivilegedContainer(pod: V1Pod): boolean {
  const s = pod.spec;
  return [...(s?.initContainers ?? []), ...(s?.containers ?? []), ...(s?.ephemeralContainers ?? [])]
    .some((c) => c.securityContext?.privileged === true);
}

/**
 * Upstream sysctl.NormalizeName: a name whose first separator is '/' uses '/' between parts,
 * so '.' and '/' are swapped ("net/ipv4/conf/eno2.100/rp_filter" to
 * "net.ipv4.conf.eno2/100.rp_filter"), as runc only takes dots.
 */
export function normalizeSysctlName(name: string): string {
  const first = name.search(/[./]/);
  if (first === -1 || name[first] === ".") return name;
  return name.replace(/[./]/g, (c) => c === "." ? "/" : ".");
}

function sandboxSysctls(pod: V1Pod): Record<string, string> {
  const out: Record<string, string> = {};
  const sysctls = pod.spec?.securityContext?.sysctls ?? [];
  sysctls.forEach((s, i) => {
    const name = s.name ?? "";
    if (name.length > 253 || !SYSCTL_NAME.test(name)) {
      throw new SandboxConfigError(
        `Cannot create sandbox: 'spec.securityContext.sysctls[${i}].name' must be a sysctl name such as kernel.shm_rmid_forced or net/ipv4/ip_forward: current value is ${
          JSON.stringify(name)
        }`,
      );
    }
    out[normalizeSysctlName(name)] = s.value ?? "";
  });
  return out;
}

/**
 * upstream NamespacesForPod: the user namespace comes from the userns manager, which checks that
 * the pod's runtime handler supports one. The RuntimeClass is resolved here only for pods that
 * ask for a user namespace; for the others the runtime manager resolves it before RunPodSandbox.
 * Rejects with the manager's error (upstream's message) as it is.
 */
async function namespaceOptions(
  pod: V1Pod,
  opts: SandboxConfigOptions,
): Promise<api.NamespaceOption> {
  const userns = opts.userNamespaces;
  if (!userns) {
    if (pod.spec?.hostUsers === false) {
      throw new SandboxConfigError(
        "Cannot create sandbox: 'spec.hostUsers' false (a user namespace for the pod) is not supported: no user namespace manager",
      );
    }
    return namespacesForPod(pod);
  }
  const handler = pod.spec?.hostUsers === false
    ? opts.runtimeClasses?.lookupRuntimeHandler(pod.spec.runtimeClassName) ?? ""
    : "";
  return namespacesForPod(pod, await userns.getOrCreateUserNamespaceMappings(pod, handler));
}

function supplementalGroupsPolicy(value: string | undefined): api.SupplementalGroupsPolicy {
  switch (value) {
    case undefined:
    case "Merge":
      return api.SupplementalGroupsPolicy.Merge;
    case "Strict":
      return api.SupplementalGroupsPolicy.Strict;
  }
  throw new SandboxConfigError(`unsupported supplementalGroupsPolicy: ${value}`);
}

function sandboxSecurityContext(
  pod: V1Pod,
  namespaceOptions: api.NamespaceOption,
): api.LinuxSandboxSecurityContext {
  const sc = pod.spec?.securityContext;
  const groups: bigint[] = [];
  if (sc?.fsGroup !== undefined) groups.push(BigInt(sc.fsGroup));
  // Volume GID annotations (upstream GetExtraSupplementalGroupsForPod) join once volumes exist.
  for (const g of sc?.supplementalGroups ?? []) groups.push(BigInt(g));
  const se = sc?.seLinuxOptions;
  return {
    namespaceOptions,
    selinuxOptions: se
      ? { user: se.user ?? "", role: se.role ?? "", type: se.type ?? "", level: se.level ?? "" }
      : undefined,
    runAsUser: sc?.runAsUser !== undefined ? { value: BigInt(sc.runAsUser) } : undefined,
    runAsGroup: sc?.runAsGroup !== undefined ? { value: BigInt(sc.runAsGroup) } : undefined,
    readonlyRootfs: false,
    supplementalGroups: groups,
    supplementalGroupsPolicy: supplementalGroupsPolicy(sc?.supplementalGroupsPolicy),
    privileged: hasPrivilegedContainer(pod),
    // The sandbox always runs runtime/default so pods may use least-privileged profiles
    // (upstream issue 84623); the pod's own seccompProfile applies to its containers.
    seccomp: { profileType: api.SecurityProfile_ProfileType.RuntimeDefault, localhostRef: "" },
    apparmor: undefined,
    seccompProfilePath: "",
  };
}

/** What {@link calculateLinuxResources} needs from the kubelet configuration. */
export interface LinuxResourcesOptions {
  /** @default true */
  readonly cpuCFSQuota?: boolean;
  /** @default 100 */
  readonly cpuCFSQuotaPeriodMs?: number;
  /** @default false */
  readonly cgroupV2?: boolean;
  /** @default !cgroupV2 */
  readonly singleProcessOOMKill?: boolean;
}

/**
 * CRI Linux resources from a CPU request (undefined: absent, then the limit stands in), CPU
 * limit and memory limit (upstream calculateLinuxResources); with `disableCPUQuota` (exclusive
 * CPUs) the quota is unlimited (-1) where CFS quota is enforced.
 */
export function calculateLinuxResources(
  cpuRequest: Dec | undefined,
  cpuLimit: Dec | undefined,
  memoryLimit: Dec | undefined,
  opts: LinuxResourcesOptions = {},
  disableCPUQuota = false,
): api.LinuxContainerResources {
  const shares = cpuRequest === undefined && cpuLimit !== undefined
    ? milliCPUToShares(milliValueOf(cpuLimit))
    : milliCPUToShares(milliValueOf(cpuRequest));
  const out: api.LinuxContainerResources = {
    cpuPeriod: 0n,
    cpuQuota: 0n,
    cpuShares: shares,
    memoryLimitInBytes: valueOf(memoryLimit),
    oomScoreAdj: 0n,
    cpusetCpus: "",
    cpusetMems: "",
    hugepageLimits: [],
    unified: {},
    memorySwapLimitInBytes: 0n,
  };
  if (opts.cpuCFSQuota ?? true) {
    const period = BigInt(Math.round((opts.cpuCFSQuotaPeriodMs ?? 100) * 1000));
    out.cpuQuota = disableCPUQuota ? -1n : milliCPUToQuota(milliValueOf(cpuLimit), period);
    out.cpuPeriod = period;
  }
  const cgroupV2 = opts.cgroupV2 ?? false;
  if (cgroupV2 && !(opts.singleProcessOOMKill ?? !cgroupV2)) {
    // Kill every process of the cgroup on OOM rather than one.
    out.unified = { "memory.oom.group": "1" };
  }
  return out;
}

// Pod-wide resources without overhead (pod-level resources when set), without quota for a
// pod on exclusive CPUs, and the overhead alone treated as requests == limits (upstream
// applySandboxResources).
function sandboxResources(
  pod: V1Pod,
  opts: LinuxResourcesOptions & Pick<SandboxConfigOptions, "exclusiveCpus">,
  logger: Logger,
): { resources: api.LinuxContainerResources; overhead: api.LinuxContainerResources } {
  const req = podRequests(pod, { excludeOverhead: true });
  const lim = podLimits(pod, { excludeOverhead: true });
  const unlimited = opts.exclusiveCpus?.pod(pod) ?? false;
  logger.v(5).info("Enforcing CFS quota", { pod: kobj(pod), unlimited });
  const resources = calculateLinuxResources(
    req.get("cpu"),
    lim.get("cpu") ?? { n: 0n, s: 0 },
    lim.get("memory"),
    opts,
    unlimited,
  );
  let overhead = emptyResources();
  if (pod.spec?.overhead) {
    const o = resourceList(pod.spec.overhead);
    const cpu = o.get("cpu") ?? { n: 0n, s: 0 };
    overhead = calculateLinuxResources(cpu, cpu, o.get("memory"), opts);
  }
  return { resources, overhead };
}

function emptyResources(): api.LinuxContainerResources {
  return {
    cpuPeriod: 0n,
    cpuQuota: 0n,
    cpuShares: 0n,
    memoryLimitInBytes: 0n,
    oomScoreAdj: 0n,
    cpusetCpus: "",
    cpusetMems: "",
    hugepageLimits: [],
    unified: {},
    memorySwapLimitInBytes: 0n,
  };
}

function refuseUnsupported(pod: V1Pod): void {
  const os = pod.spec?.os?.name;
  if (os !== undefined && os !== "linux") {
    throw new SandboxConfigError(
      `Cannot create sandbox: 'spec.os.name' ${
        JSON.stringify(os)
      } is not supported yet: only linux`,
    );
  }
}

/**
 * The CRI sandbox config of the pod (upstream generatePodSandboxConfig). Throws
 * {@link SandboxConfigError} for a spec it cannot honour, and rejects with the DNS
 * configurer's error when the host resolver file is unreadable.
 */
export async function generatePodSandboxConfig(
  pod: V1Pod,
  attempt: number,
  opts: SandboxConfigOptions,
  signal?: AbortSignal,
): Promise<api.PodSandboxConfig> {
  signal?.throwIfAborted();
  const logger = opts.logger ?? createLogger();
  refuseUnsupported(pod);
  const meta = pod.metadata;
  const config: api.PodSandboxConfig = {
    metadata: {
      name: meta?.name ?? "",
      namespace: meta?.namespace ?? "",
      uid: meta?.uid ?? "",
      attempt,
    },
    hostname: "",
    logDirectory: "",
    dnsConfig: await opts.dns.getPodDNS(pod, signal),
    portMappings: [],
    labels: newPodLabels(pod),
    annotations: newPodAnnotations(pod),
    linux: undefined,
    windows: undefined,
  };

  // A host-network sandbox keeps the node's UTS namespace, so it gets no hostname of its own.
  if (!isHostNetworkPod(pod)) {
    const { hostname, domain } = generatePodHostNameAndDomain(pod, opts.clusterDomain, logger);
    config.hostname = getNodenameForKernel(hostname, domain, pod.spec?.setHostnameAsFQDN);
  }

  config.logDirectory = buildPodLogsDirectory(
    opts.podLogsDirectory,
    meta?.namespace ?? "",
    meta?.name ?? "",
    meta?.uid ?? "",
  );

  for (const c of pod.spec?.containers ?? []) {
    config.portMappings.push(...makePortMappings(c, logger));
  }

  const { resources, overhead } = sandboxResources(pod, opts, logger);
  config.linux = {
    cgroupParent: typeof opts.cgroupParent === "function"
      ? opts.cgroupParent(pod)
      : opts.cgroupParent ?? "",
    securityContext: sandboxSecurityContext(pod, await namespaceOptions(pod, opts)),
    sysctls: sandboxSysctls(pod),
    overhead,
    resources,
  };
  logger.v(5).info("Generated pod sandbox config", { pod: kobj(pod), attempt });
  return config;
}
