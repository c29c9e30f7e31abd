/**
 * @module
 * The Linux part of a container's CRI config: cgroup resources (CPU shares and CFS quota,
 * memory limit, oom_score_adj) and the effective security context (user, groups, capabilities,
 * privileged, read-only rootfs, no_new_privs, masked and read-only /proc paths, seccomp,
 * AppArmor, SELinux, namespaces), plus the runAsNonRoot check against the image's user.
 * Private to `kuberuntime_container.ts`. Corresponds to upstream
 * `kuberuntime_container_linux.go`, `security_context.go`, `security_context_others.go`,
 * `kuberuntime_security_profile.go`, `helpers_linux.go` (its CPU conversions are cm/helpers_linux.ts) and
 * `pkg/securitycontext/util.go`.
 */

import type {
  V1Container,
  V1Pod,
  V1SeccompProfile,
  V1SecurityContext,
} from "@kubernetes/client-node";
import * as api from "../../proto/runtime/v1/api.ts";
import { CreateContainerConfigError } from "./expansion.ts";
import { getContainerOOMScoreAdjust } from "../qos/qos.ts";
import { parseQuantity } from "../util/quantity.ts";
import { milliCPUToQuota, milliCPUToShares, QUOTA_PERIOD } from "../cm/helpers_linux.ts";
import { milliValueOf, parseDec } from "../qos/resource_helpers.ts";
import { namespacesForPod } from "./namespaces.ts";

/** A CPU quantity in millicores, exact and rounded up (resource.Quantity's MilliValue). */
function milliCPU(q: string | undefined): bigint {
  return q === undefined ? 0n : milliValueOf(parseDec(q));
}

/** Node-level settings that shape every container's Linux config. */
export interface LinuxConfigOptions {
  /** The node's memory, for oom_score_adj of Burstable containers. */
  readonly memoryCapacityBytes: number;
  /** Enforce CPU limits with CFS quota (config cpuCFSQuota). @default true */
  readonly cpuCFSQuota?: boolean;
  /** RuntimeDefault seccomp for containers that name no profile (config seccompDefault). @default false */
  readonly seccompDefault?: boolean;
  /** Where Localhost seccomp profiles live: `<rootDirectory>/seccomp`. @default "/var/lib/kubelet/seccomp" */
  readonly seccompProfileRoot?: string;
  /** The host runs cgroup v2 (unified). @default false */
  readonly cgroupV2?: boolean;
  /** Kill only the offending process on OOM instead of the container's cgroup (config singleProcessOOMKill). @default false */
  readonly singleProcessOOMKill?: boolean;
}

/** resource.Quantity's Value: whole units rounded up. */
export function quantityValue(q: string | undefined): number {
  if (q === undefined) return 0;
  return Math.ceil(Number(parseQuantity(q).toPrecision(15)));
}

/** upstream generateLinuxContainerResources, without swap, hugepages and MemoryQoS. */
export function generateLinuxContainerResources(
  pod: V1Pod,
  container: V1Container,
  opts: LinuxConfigOptions,
): api.LinuxContainerResources {
  const limits = container.resources?.limits ?? {};
  const requests = container.resources?.requests ?? {};
  for (const name of [...Object.keys(limits), ...Object.keys(requests)]) {
    if (name.startsWith("hugepages-")) {
      throw new CreateContainerConfigError(`${name}: hugepages are not supported yet`);
    }
  }
  if (pod.spec?.resources?.limits || pod.spec?.resources?.requests) {
    throw new CreateContainerConfigError("pod-level resources are not supported yet");
  }
  const cpuLimit = milliCPU(limits.cpu);
  // A missing request defaults to the limit, as the apiserver does for new pods; an explicit 0
  // is the kernel's minimum (v1.36 calculateLinuxResources).
  const cpuShares = milliCPUToShares("cpu" in requests ? milliCPU(requests.cpu) : cpuLimit);
  const r = api.LinuxContainerResources.create({
    cpuShares,
    memoryLimitInBytes: BigInt(quantityValue(limits.memory)),
    oomScoreAdj: BigInt(getContainerOOMScoreAdjust(pod, container, opts.memoryCapacityBytes)),
  });
  if (opts.cpuCFSQuota ?? true) {
    r.cpuPeriod = QUOTA_PERIOD;
    r.cpuQuota = milliCPUToQuota(cpuLimit, QUOTA_PERIOD);
  }
  if (opts.cgroupV2 && !opts.singleProcessOOMKill) r.unified = { "memory.oom.group": "1" };
  return r;
}

/**
 * securitycontext.DetermineEffectiveSecurityContext: the pod's user, group, runAsNonRoot and
 * SELinux settings, overridden field by field by the container's.
 */
export function effectiveSecurityContext(pod: V1Pod, container: V1Container): V1SecurityContext {
  const p = pod.spec?.securityContext;
  const fromPod: V1SecurityContext = {};
  if (p?.seLinuxOptions) fromPod.seLinuxOptions = { ...p.seLinuxOptions };
  if (p?.runAsUser != null) fromPod.runAsUser = p.runAsUser;
  if (p?.runAsGroup != null) fromPod.runAsGroup = p.runAsGroup;
  if (p?.runAsNonRoot != null) fromPod.runAsNonRoot = p.runAsNonRoot;
  const c = container.securityContext;
  if (!c) return fromPod;
  const eff: V1SecurityContext = { ...fromPod };
  if (c.seLinuxOptions) eff.seLinuxOptions = { ...c.seLinuxOptions };
  if (c.capabilities) eff.capabilities = { ...c.capabilities };
  for (
    const k of [
      "privileged",
      "runAsUser",
      "runAsGroup",
      "runAsNonRoot",
      "readOnlyRootFilesystem",
      "allowPrivilegeEscalation",
      "procMount",
    ] as const
  ) {
    if (c[k] != null) (eff as Record<string, unknown>)[k] = c[k];
  }
  return eff;
}

/** What the image says its default user is: a uid, or a name it could not resolve. */
export interface ImageUser {
  readonly uid?: bigint;
  readonly username: string;
}

/** upstream verifyRunAsNonRoot; returns the error message, or undefined when allowed. */
export function verifyRunAsNonRoot(
  pod: V1Pod,
  container: V1Container,
  user: ImageUser,
  podFullName: string,
): string | undefined {
  const sc = effectiveSecurityContext(pod, container);
  if (!sc.runAsNonRoot) return undefined;
  const where = `(pod: ${JSON.stringify(podFullName)}, container: ${container.name})`;
  if (sc.runAsUser != null) {
    return sc.runAsUser === 0 ? `container's runAsUser breaks non-root policy ${where}` : undefined;
  }
  if (user.uid === 0n) return `container has runAsNonRoot and image will run as root ${where}`;
  if (user.uid === undefined && user.username !== "") {
    return `container has runAsNonRoot and image has non-numeric user (${user.username}), ` +
      `cannot verify user is non-root ${where}`;
  }
  return undefined;
}

// These must stay in sync with moby's defaults, as upstream's do.
const DEFAULT_MASKED_PATHS = [
  "/proc/asound",
  "/proc/acpi",
  "/proc/kcore",
  "/proc/keys",
  "/proc/latency_stats",
  "/proc/timer_list",
  "/proc/timer_stats",
  "/proc/sched_debug",
  "/proc/scsi",
  "/sys/firmware",
  "/sys/devices/virtual/powercap",
];
const DEFAULT_READONLY_PATHS = [
  "/proc/bus",
  "/proc/fs",
  "/proc/irq",
  "/proc/sys",
  "/proc/sysrq-trigger",
];

const SUPPLEMENTAL_GROUPS_POLICY: Record<string, api.SupplementalGroupsPolicy> = {
  Merge: api.SupplementalGroupsPolicy.Merge,
  Strict: api.SupplementalGroupsPolicy.Strict,
};

/** upstream determineEffectiveSecurityContext: the CRI security context of one container. */
export function determineEffectiveSecurityContext(
  pod: V1Pod,
  container: V1Container,
  user: ImageUser,
  opts: LinuxConfigOptions,
): api.LinuxContainerSecurityContext {
  if (pod.spec?.hostUsers === false) {
    throw new CreateContainerConfigError(
      "user namespaces (hostUsers: false) are not supported yet",
    );
  }
  const eff = effectiveSecurityContext(pod, container);
  const sc = api.LinuxContainerSecurityContext.create({
    privileged: eff.privileged ?? false,
    readonlyRootfs: eff.readOnlyRootFilesystem ?? false,
  });
  if (eff.capabilities) {
    sc.capabilities = api.Capability.create({
      addCapabilities: [...(eff.capabilities.add ?? [])],
      dropCapabilities: [...(eff.capabilities.drop ?? [])],
    });
  }
  if (eff.seLinuxOptions) {
    const o = eff.seLinuxOptions;
    sc.selinuxOptions = {
      user: o.user ?? "",
      role: o.role ?? "",
      type: o.type ?? "",
      level: o.level ?? "",
    };
  }
  if (eff.runAsGroup != null) sc.runAsGroup = { value: BigInt(eff.runAsGroup) };
  if (eff.runAsUser != null) {
    sc.runAsUser = { value: BigInt(eff.runAsUser) };
  } else {
    if (user.uid !== undefined) sc.runAsUser = { value: user.uid };
    sc.runAsUsername = user.username;
  }
  sc.seccomp = seccompProfile(pod, container, opts);
  const apparmor = appArmorProfile(pod, container);
  if (apparmor) {
    sc.apparmor = apparmor.profile;
    sc.apparmorProfile = apparmor.deprecated;
  }
  // The sandbox's namespaces, user namespace included (containerd 2.x compares the two).
  sc.namespaceOptions = api.NamespaceOption.create(namespacesForPod(pod));
  const podSc = pod.spec?.securityContext;
  if (podSc?.fsGroup != null) sc.supplementalGroups.push(BigInt(podSc.fsGroup));
  for (const g of podSc?.supplementalGroups ?? []) sc.supplementalGroups.push(BigInt(g));
  if (podSc?.supplementalGroupsPolicy != null) {
    const policy = SUPPLEMENTAL_GROUPS_POLICY[podSc.supplementalGroupsPolicy];
    if (policy === undefined) {
      throw new CreateContainerConfigError(
        `unsupported supplementalGroupsPolicy: ${podSc.supplementalGroupsPolicy}`,
      );
    }
    sc.supplementalGroupsPolicy = policy;
  }
  sc.noNewPrivs = eff.allowPrivilegeEscalation === false;
  const unmasked = eff.procMount === "Unmasked";
  sc.maskedPaths = unmasked ? [] : [...DEFAULT_MASKED_PATHS];
  sc.readonlyPaths = unmasked ? [] : [...DEFAULT_READONLY_PATHS];
  return sc;
}

/** upstream getSeccompProfile: the container's field, else the pod's, else the node default. */
function seccompProfile(
  pod: V1Pod,
  container: V1Container,
  opts: LinuxConfigOptions,
): api.SecurityProfile {
  const fallback = opts.seccompDefault ?? false;
  const field: V1SeccompProfile | undefined = container.securityContext?.seccompProfile ??
    pod.spec?.securityContext?.seccompProfile;
  const T = api.SecurityProfile_ProfileType;
  if (!field) {
    return { profileType: fallback ? T.RuntimeDefault : T.Unconfined, localhostRef: "" };
  }
  if (field.type === "RuntimeDefault") return { profileType: T.RuntimeDefault, localhostRef: "" };
  if (field.type === "Localhost") {
    if (!field.localhostProfile) {
      throw new CreateContainerConfigError(
        "localhostProfile must be set if seccompProfile type is Localhost.",
      );
    }
    const root = (opts.seccompProfileRoot ?? "/var/lib/kubelet/seccomp").replace(/\/+$/, "");
    return { profileType: T.Localhost, localhostRef: `${root}/${field.localhostProfile}` };
  }
  return { profileType: T.Unconfined, localhostRef: "" };
}

const APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/";

/**
 * upstream getAppArmorProfile: the container's field, else the pod's, else the deprecated
 * annotation; undefined when none is set, leaving the runtime's default.
 */
function appArmorProfile(
  pod: V1Pod,
  container: V1Container,
): { profile: api.SecurityProfile; deprecated: string } | undefined {
  const T = api.SecurityProfile_ProfileType;
  const field = container.securityContext?.appArmorProfile ??
    pod.spec?.securityContext?.appArmorProfile;
  if (field) {
    switch (field.type) {
      case "RuntimeDefault":
        return {
          profile: { profileType: T.RuntimeDefault, localhostRef: "" },
          deprecated: "runtime/default",
        };
      case "Unconfined":
        return {
          profile: { profileType: T.Unconfined, localhostRef: "" },
          deprecated: "unconfined",
        };
      case "Localhost": {
        const name = field.localhostProfile ?? "";
        return {
          profile: { profileType: T.Localhost, localhostRef: name },
          deprecated: `localhost/${name}`,
        };
      }
      default:
        throw new CreateContainerConfigError(`unknown apparmor profile type: "${field.type}"`);
    }
  }
  const annotation = pod.metadata?.annotations?.[APPARMOR_ANNOTATION_PREFIX + container.name];
  if (annotation === undefined) return undefined;
  if (annotation === "runtime/default") {
    return { profile: { profileType: T.RuntimeDefault, localhostRef: "" }, deprecated: annotation };
  }
  if (annotation === "unconfined") {
    return { profile: { profileType: T.Unconfined, localhostRef: "" }, deprecated: annotation };
  }
  if (annotation.startsWith("localhost/")) {
    return {
      profile: { profileType: T.Localhost, localhostRef: annotation.slice("localhost/".length) },
      deprecated: annotation,
    };
  }
  throw new CreateContainerConfigError(`invalid AppArmor profile name: "${annotation}"`);
}
