/**
 * @module
 * The Linux part of a container's CRI config: cgroup resources (CPU shares and CFS quota, none for
 * a container on exclusive CPUs, memory limit, oom_score_adj, a limit for every hugepage size of
 * the node, swap as memorySwap.swapBehavior says) and the effective security context (user, groups,
 * capabilities, privileged, read-only rootfs, no_new_privs, masked and read-only /proc paths,
 * seccomp, AppArmor, SELinux, namespaces), plus the runAsNonRoot check against the image's user.
 * What it reads from the host comes through `_host_linux.ts`. Private to `kuberuntime_container.ts`
 * (and `pod_resize.ts`). Corresponds to upstream `kuberuntime_container_linux.go`,
 * `security_context.go`, `security_context_others.go`, `kuberuntime_security_profile.go`,
 * `helpers_linux.go` (its CPU conversions are cm/helpers_linux.ts) and
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
import { getContainerOOMScoreAdjust, getPodQOS, isCriticalPod } from "../qos/qos.ts";
import { parseQuantity } from "../util/quantity.ts";
import { milliCPUToQuota, milliCPUToShares, QUOTA_PERIOD } from "../cm/helpers_linux.ts";
import { hugePageUnitSize } from "../cm/hugepages.ts";
import {
  cmpDec,
  isPodLevelResourcesSet,
  isZeroDec,
  milliValueOf,
  parseDec,
  valueOf,
} from "../qos/resource_helpers.ts";
import { namespacesForPod } from "./namespaces.ts";
import { type HostLinux, hostLinux } from "./_host_linux.ts";
import type { UsernsManager } from "../userns/userns_manager.ts";
import type { ExclusiveCpus } from "../cm/exclusive_cpus.ts";

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
  /**
   * Swap for containers (config memorySwap.swapBehavior): "NoSwap" (also "") or "LimitedSwap",
   * a share of the node's swap proportional to a Burstable container's memory request, on v2.
   * @default "NoSwap"
   */
  readonly swapBehavior?: string;
  /**
   * What the host says: hugepage sizes, swap accounting, SELinux, masked paths.
   * @default the host's, each read once through the host view
   */
  readonly host?: HostLinux;
  /**
   * Each pod's user namespace as its sandbox got it (the userns manager's allocation).
   * @default none: a `hostUsers: false` pod is refused as not supported
   */
  readonly userNamespaces?: Pick<UsernsManager, "podUserNamespace">;
  /**
   * Containers on exclusive CPUs, whose CFS quota is lifted (-1) under
   * DisableCPUQuotaWithExclusiveCPUs (cm/exclusive_cpus.ts).
   * @default none: every CPU limit is enforced, as with that gate off
   */
  readonly exclusiveCpus?: Pick<ExclusiveCpus, "container">;
}

/** resource.Quantity's Value: whole units rounded up. */
export function quantityValue(q: string | undefined): number {
  if (q === undefined) return 0;
  return Math.ceil(Number(parseQuantity(q).toPrecision(15)));
}

/** upstream generateLinuxContainerResources, without MemoryQoS (an alpha feature gate). */
export function generateLinuxContainerResources(
  pod: V1Pod,
  container: V1Container,
  opts: LinuxConfigOptions,
): api.LinuxContainerResources {
  const own = container.resources?.limits ?? {};
  const requests = container.resources?.requests ?? {};
  // upstream getCPULimit / getMemoryLimit: with pod-level resources, a container without its own
  // limit is bounded by the pod's (what components reading the container's limits rely on).
  const podLimits = isPodLevelResourcesSet(pod) ? pod.spec?.resources?.limits ?? {} : {};
  const limits: Record<string, string> = { ...own };
  for (const name of ["cpu", "memory"] as const) {
    const pl = podLimits[name];
    if (pl !== undefined && quantityValue(own[name]) === 0) limits[name] = String(pl);
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
    // A quota on CPUs no other container uses would only throttle this one.
    r.cpuQuota = opts.exclusiveCpus?.container(pod, container)
      ? -1n
      : milliCPUToQuota(cpuLimit, QUOTA_PERIOD);
  }
  if (opts.cgroupV2 && !opts.singleProcessOOMKill) r.unified = { "memory.oom.group": "1" };
  const host = opts.host ?? hostLinux();
  // Pod-level hugepage limits, then the container's own, which take precedence.
  r.hugepageLimits = hugepageLimits(
    { ...stringValues(podLimits), ...stringValues(own) },
    host.hugePageSizes(),
  );
  configureContainerSwapResources(r, pod, container, opts, host);
  return r;
}

/** A resource list's quantities as strings (the client types allow numbers). */
function stringValues(list: Readonly<Record<string, unknown>>): Record<string, string> {
  return Object.fromEntries(Object.entries(list).map(([k, v]) => [k, String(v)]));
}

/**
 * upstream GetHugepageLimitsFromResources: every page size of the node, limited to what the
 * `hugepages-<size>` limits say (the pod's, overridden by the container's), else 0 (no
 * hugepages without asking).
 */
function hugepageLimits(
  limits: Readonly<Record<string, string>>,
  sizes: readonly string[],
): api.HugepageLimit[] {
  const required = new Map<string, bigint>();
  for (const [name, amount] of Object.entries(limits)) {
    if (!name.startsWith("hugepages-")) continue;
    try {
      const pageSize = hugePageUnitSize(Number(valueOf(parseDec(name.slice("hugepages-".length)))));
      required.set(pageSize, valueOf(parseDec(amount)));
    } catch {
      // upstream logs and skips a size it cannot name; validation keeps such names out.
    }
  }
  return sizes.map((pageSize) => ({ pageSize, limit: required.get(pageSize) ?? 0n }));
}

type SwapBehavior = "NoSwap" | "LimitedSwap";

/**
 * upstream GetContainerSwapBehavior: LimitedSwap only for a Burstable, non-critical pod's
 * container that requests memory below its limit, on cgroup v2 with swap accounting.
 */
function containerSwapBehavior(
  pod: V1Pod,
  container: V1Container,
  opts: LinuxConfigOptions,
  host: HostLinux,
): SwapBehavior {
  if (opts.swapBehavior !== "LimitedSwap") return "NoSwap";
  const v2 = opts.cgroupV2 ?? false;
  // NodeSwap is locked on since v1.34.
  if (!host.swapControllerAvailable(v2) || !v2 || isCriticalPod(pod)) return "NoSwap";
  const request = parseDec(container.resources?.requests?.memory ?? "0");
  const limit = parseDec(container.resources?.limits?.memory ?? "0");
  if (getPodQOS(pod) !== "Burstable") return "NoSwap";
  if (isZeroDec(request) && isZeroDec(limit)) return "NoSwap";
  if (cmpDec(request, limit) === 0) return "NoSwap";
  return "LimitedSwap";
}

/**
 * upstream configureContainerSwapResources, with swap accounting only: no swap is memory+swap
 * equal to the memory limit on v1 and memory.swap.max 0 on v2; LimitedSwap is memory.swap.max
 * of the container's share of the node's memory, times the node's swap.
 */
function configureContainerSwapResources(
  r: api.LinuxContainerResources,
  pod: V1Pod,
  container: V1Container,
  opts: LinuxConfigOptions,
  host: HostLinux,
): void {
  const v2 = opts.cgroupV2 ?? false;
  if (!host.swapControllerAvailable(v2)) return;
  let swap = 0n;
  if (containerSwapBehavior(pod, container, opts, host) === "LimitedSwap") {
    const request = valueOf(parseDec(container.resources?.requests?.memory ?? "0"));
    const capacity = opts.memoryCapacityBytes;
    // upstream calcSwapForBurstablePods refuses these, and the container gets no swap.
    if (capacity > 0 && Number(request) <= capacity) {
      swap = BigInt(Math.trunc(Number(request) / capacity * host.swapCapacityBytes()));
    }
  }
  if (!v2) {
    r.memorySwapLimitInBytes = r.memoryLimitInBytes;
    return;
  }
  r.unified = { ...r.unified, "memory.swap.max": String(swap) };
}

/**
 * Whether mounts may ask the runtime to relabel them (upstream ANDs every mount's flag with
 * selinux.GetEnabled).
 */
export function selinuxRelabelAllowed(opts: LinuxConfigOptions): boolean {
  return (opts.host ?? hostLinux()).selinuxEnabled();
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
  let userns: api.UserNamespace | undefined;
  if (opts.userNamespaces) {
    try {
      userns = opts.userNamespaces.podUserNamespace(pod);
    } catch (e) {
      throw new CreateContainerConfigError((e as Error).message, { cause: e });
    }
  } else if (pod.spec?.hostUsers === false) {
    throw new CreateContainerConfigError(
      "user namespaces (hostUsers: false) are not supported without a user namespace manager",
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
  sc.namespaceOptions = api.NamespaceOption.create(namespacesForPod(pod, userns));
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
  sc.maskedPaths = unmasked ? [] : [...(opts.host ?? hostLinux()).defaultMaskedPaths()];
  sc.readonlyPaths = unmasked ? [] : [...DEFAULT_READONLY_PATHS];
  return sc;
}

/**
 * The mounts with the pod's ID mappings when it has its own user namespace, so that the runtime
 * makes them idmapped mounts (upstream applyPlatformSpecificContainerConfig).
 */
export function idMappedMounts(
  mounts: api.Mount[],
  userns: api.UserNamespace | undefined,
): api.Mount[] {
  if (userns?.mode !== api.NamespaceMode.POD) return mounts;
  return mounts.map((m) => ({
    ...m,
    uidMappings: userns.uids.map((u) => ({ ...u })),
    gidMappings: userns.gids.map((g) => ({ ...g })),
  }));
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
