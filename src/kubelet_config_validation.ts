/**
 * @module
 * Checks a defaulted KubeletConfiguration against upstream's rules before anything starts:
 * ranges, ports, durations that must be ordered, values that need a feature gate, enumerated
 * options, reserved cgroups for node-allocatable enforcement, logging and tracing settings, and
 * the eviction thresholds. Returns every problem with its JSON field path, instead of upstream's
 * one aggregated error. Corresponds to upstream
 * `pkg/kubelet/apis/config/validation/validation.go` (ValidateKubeletConfiguration),
 * `validation_linux.go`, `validation_reserved_memory.go`, and the component-base logging,
 * tracing, metrics and feature-gate checks it calls.
 */

import { formatDuration } from "./duration.ts";
import { parseThresholdConfig, ThresholdConfigError } from "./eviction_thresholds.ts";
import type { KubeletConfiguration } from "./kubelet_config_types.ts";
import { parseQuantity } from "./quantity.ts";

/** One problem with a configuration value. */
export interface ValidationIssue {
  /** The JSON field path, e.g. "authentication.webhook.cacheTTL" or "reservedMemory[1].limits". */
  readonly path: string;
  /** The offending value (durations in Go syntax, e.g. "500ms"), or undefined when missing. */
  readonly value: unknown;
  /** What is expected, written to follow the field name: "must be between 0 and 100". */
  readonly message: string;
}

/** What validation needs besides the configuration itself. */
export interface ValidationOptions {
  /**
   * Feature gates from the command line; they win over `featureGates` in the configuration,
   * as upstream's flag precedence makes them. Unset gates take upstream's defaults.
   */
  readonly featureGates?: Readonly<Record<string, boolean>>;
  /**
   * The Kubernetes release whose feature-gate defaults apply and whose previous minor
   * version `showHiddenMetricsForVersion` may name.
   * @default "v1.36.3", the release of the field table in kubelet_config_types.ts
   */
  readonly kubernetesVersion?: string;
  /** True when the host runs cgroup v1; enables upstream's Linux cgroup v1 checks. */
  readonly cgroupV1?: boolean;
}

/** A feature gate's default from one release on; `locked` gates cannot be changed. */
type GateStage = readonly [since: string, enabled: boolean, locked?: "locked"];

/**
 * Upstream's versioned defaults (pkg/features/kube_features.go, v1.35 table) for the gates
 * that validation consults, plus component-base's logging gates.
 */
const GATES: Readonly<Record<string, readonly GateStage[]>> = {
  CustomCPUCFSQuotaPeriod: [["1.12", false]],
  GracefulNodeShutdown: [["1.20", false], ["1.21", true]],
  GracefulNodeShutdownBasedOnPodPriority: [["1.23", false], ["1.24", true]],
  ImageMaximumGCAge: [["1.29", false], ["1.30", true], ["1.35", true, "locked"]],
  KubeletCrashLoopBackOffMax: [["1.32", false], ["1.35", true]],
  KubeletEnsureSecretPulledImages: [["1.33", false], ["1.35", true]],
  KubeletTracing: [["1.25", false], ["1.27", true], ["1.34", true, "locked"]],
  LoggingAlphaOptions: [["1.24", false]],
  LoggingBetaOptions: [["1.24", true]],
  MemoryQoS: [["1.22", false]],
  NodeLogQuery: [["1.27", false], ["1.30", false]],
  NodeSwap: [["1.22", false], ["1.30", true], ["1.34", true, "locked"]],
  RotateKubeletServerCertificate: [["1.7", false], ["1.12", true]],
};

function minorOf(version: string): [number, number] {
  const m = /^v?(\d+)\.(\d+)/.exec(version);
  return m ? [Number(m[1]), Number(m[2])] : [0, 0];
}

function atOrAfter(version: [number, number], since: string): boolean {
  const [major, minor] = minorOf(since);
  return version[0] > major || (version[0] === major && version[1] >= minor);
}

function gateStage(name: string, version: [number, number]): GateStage | undefined {
  let found: GateStage | undefined;
  for (const stage of GATES[name] ?? []) if (atOrAfter(version, stage[0])) found = stage;
  return found;
}

/** The enabled state of each gate validation consults, at a release, with overrides applied. */
export function effectiveFeatureGates(
  kubernetesVersion: string,
  ...overrides: (Readonly<Record<string, boolean>> | undefined)[]
): Record<string, boolean> {
  const version = minorOf(kubernetesVersion);
  const out: Record<string, boolean> = {};
  for (const name of Object.keys(GATES)) out[name] = gateStage(name, version)?.[1] ?? false;
  for (const o of overrides) {
    for (const [name, on] of Object.entries(o ?? {})) {
      const stage = gateStage(name, version);
      // A locked gate keeps its value; the attempt to change it is reported separately.
      out[name] = stage?.[2] === "locked" ? stage[1] : on;
    }
  }
  return out;
}

const TOPOLOGY_POLICIES = ["none", "best-effort", "restricted", "single-numa-node"];
const TOPOLOGY_SCOPES = ["container", "pod"];
const HAIRPIN_MODES = ["none", "hairpin-veth", "promiscuous-bridge"];
const SWAP_BEHAVIORS = ["", "NoSwap", "LimitedSwap"];
const PULL_CREDENTIAL_POLICIES = [
  "NeverVerify",
  "NeverVerifyPreloadedImages",
  "NeverVerifyAllowlistedImages",
  "AlwaysVerify",
];
const MEMORY_RESERVATION_POLICIES = ["None", "TieredReservation"];
const TAINT_EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
const DEFAULT_CFS_QUOTA_PERIOD_MS = 100;
const USER_NS_UNIT = 65536;
const MAX_INT32 = 2 ** 31 - 1;

/** The release whose rules and gate defaults apply unless the caller names another. */
export const VALIDATION_RELEASE = "v1.36.3";

const quote = (values: readonly string[]) => values.map((v) => JSON.stringify(v)).join(", ");

/**
 * Validates a defaulted KubeletConfiguration; returns every issue found, in upstream's order,
 * or an empty list. A field left absent is read as Go's zero value (0, "", false), as upstream
 * sees it after conversion, so validate after defaulting.
 */
export function validateKubeletConfiguration(
  cfg: KubeletConfiguration,
  opts: ValidationOptions = {},
): ValidationIssue[] {
  const issues: ValidationIssue[] = [];
  const add: Add = (path, value, message) => {
    issues.push({ path, value, message });
  };
  const version = opts.kubernetesVersion ?? VALIDATION_RELEASE;
  const gates = effectiveFeatureGates(version, cfg.featureGates, opts.featureGates);
  const on = (gate: string) => gates[gate] === true;
  const nonNegative = (path: string, v: number | undefined) => {
    if ((v ?? 0) < 0) add(path, v, "must not be a negative number");
  };
  const inRange = (path: string, v: number, lo: number, hi: number) => {
    if (v < lo || v > hi) add(path, v, `must be between ${lo} and ${hi}, inclusive`);
  };
  const oneOf = (path: string, v: string, allowed: readonly string[]) => {
    if (!allowed.includes(v)) add(path, v, `must be one of: ${quote(allowed)}`);
  };

  checkLockedGates(version, cfg.featureGates, opts.featureGates, add);

  if ((cfg.nodeLeaseDurationSeconds ?? 0) <= 0) {
    add("nodeLeaseDurationSeconds", cfg.nodeLeaseDurationSeconds, "must be greater than 0");
  }
  if ((cfg.systemCgroups ?? "") !== "" && (cfg.cgroupRoot ?? "") === "") {
    add("systemCgroups", cfg.systemCgroups, "requires cgroupRoot (--cgroup-root) to be specified");
  }
  nonNegative("eventBurst", cfg.eventBurst);
  nonNegative("eventRecordQPS", cfg.eventRecordQPS);
  const healthzPort = cfg.healthzPort ?? 0;
  if (healthzPort !== 0 && !isPort(healthzPort)) {
    add("healthzPort", healthzPort, "must be between 1 and 65535, inclusive");
  }

  const cfsPeriod = cfg.cpuCFSQuotaPeriod ?? 0;
  if (!on("CustomCPUCFSQuotaPeriod") && cfsPeriod !== DEFAULT_CFS_QUOTA_PERIOD_MS) {
    add(
      "cpuCFSQuotaPeriod",
      formatDuration(cfsPeriod),
      "requires feature gate CustomCPUCFSQuotaPeriod unless it is 100ms",
    );
  }
  if (on("CustomCPUCFSQuotaPeriod") && (cfsPeriod < 1 || cfsPeriod > 1000)) {
    add("cpuCFSQuotaPeriod", formatDuration(cfsPeriod), "must be between 1ms and 1s, inclusive");
  }

  const gcHigh = cfg.imageGCHighThresholdPercent ?? 0;
  const gcLow = cfg.imageGCLowThresholdPercent ?? 0;
  inRange("imageGCHighThresholdPercent", gcHigh, 0, 100);
  inRange("imageGCLowThresholdPercent", gcLow, 0, 100);
  if (gcLow >= gcHigh) {
    add(
      "imageGCLowThresholdPercent",
      gcLow,
      `must be less than imageGCHighThresholdPercent (${gcHigh})`,
    );
  }
  const gcMaxAge = cfg.imageMaximumGCAge ?? 0;
  const gcMinAge = cfg.imageMinimumGCAge ?? 0;
  if (gcMaxAge !== 0 && !on("ImageMaximumGCAge")) {
    add("imageMaximumGCAge", formatDuration(gcMaxAge), "requires feature gate ImageMaximumGCAge");
  }
  if (gcMinAge < 0) add("imageMinimumGCAge", formatDuration(gcMinAge), "must not be negative");
  if (gcMaxAge < 0) add("imageMaximumGCAge", formatDuration(gcMaxAge), "must not be negative");
  if (gcMaxAge > 0 && gcMaxAge <= gcMinAge) {
    add(
      "imageMaximumGCAge",
      formatDuration(gcMaxAge),
      `must be greater than imageMinimumGCAge (${formatDuration(gcMinAge)})`,
    );
  }

  inRange("iptablesDropBit", cfg.iptablesDropBit ?? 0, 0, 31);
  inRange("iptablesMasqueradeBit", cfg.iptablesMasqueradeBit ?? 0, 0, 31);
  nonNegative("kubeAPIBurst", cfg.kubeAPIBurst);
  nonNegative("kubeAPIQPS", cfg.kubeAPIQPS);
  if ((cfg.nodeStatusMaxImages ?? 0) < -1) {
    add("nodeStatusMaxImages", cfg.nodeStatusMaxImages, "must be -1 or greater");
  }
  nonNegative("maxOpenFiles", cfg.maxOpenFiles);
  nonNegative("maxPods", cfg.maxPods);
  inRange("oomScoreAdj", cfg.oomScoreAdj ?? 0, -1000, 1000);
  nonNegative("podsPerCore", cfg.podsPerCore);
  const port = cfg.port ?? 0;
  if (!isPort(port)) add("port", port, "must be between 1 and 65535, inclusive");
  const readOnlyPort = cfg.readOnlyPort ?? 0;
  if (readOnlyPort !== 0 && !isPort(readOnlyPort)) {
    add("readOnlyPort", readOnlyPort, "must be between 0 and 65535, inclusive");
  }
  nonNegative("registryBurst", cfg.registryBurst);
  nonNegative("registryPullQPS", cfg.registryPullQPS);
  const parallelPulls = cfg.maxParallelImagePulls;
  if (parallelPulls !== undefined && parallelPulls < 1) {
    add("maxParallelImagePulls", parallelPulls, "must be a positive number");
  }
  if (cfg.serializeImagePulls === true && parallelPulls !== undefined && parallelPulls > 1) {
    add(
      "maxParallelImagePulls",
      parallelPulls,
      "cannot be larger than 1 unless serializeImagePulls (--serialize-image-pulls) is false",
    );
  }
  if (cfg.serverTLSBootstrap === true && !on("RotateKubeletServerCertificate")) {
    add("serverTLSBootstrap", true, "requires feature gate RotateKubeletServerCertificate");
  }
  if (cfg.runOnce === true) {
    add("runOnce", true, "must not be set: run-once mode is deprecated");
  }

  (cfg.registerWithTaints ?? []).forEach((taint, i) => {
    const problem = taintProblem(taint.key ?? "", taint.value ?? "", taint.effect ?? "");
    if (problem) add(`registerWithTaints[${i}]`, taint, `is not a valid taint: ${problem}`);
    if (taint.timeAdded !== undefined) {
      add(`registerWithTaints[${i}].timeAdded`, taint.timeAdded, "must not be set");
    }
  });

  oneOf("topologyManagerPolicy", cfg.topologyManagerPolicy ?? "", TOPOLOGY_POLICIES);
  oneOf("topologyManagerScope", cfg.topologyManagerScope ?? "", TOPOLOGY_SCOPES);

  checkShutdown(cfg, on, add);

  const swapBehavior = cfg.memorySwap?.swapBehavior ?? "";
  if (on("NodeSwap") && !SWAP_BEHAVIORS.includes(swapBehavior)) {
    add("memorySwap.swapBehavior", swapBehavior, `must be one of: ${quote(SWAP_BEHAVIORS)}`);
  }
  if (!on("NodeSwap") && swapBehavior !== "") {
    add(
      "memorySwap.swapBehavior",
      swapBehavior,
      "cannot be set when feature gate NodeSwap is disabled",
    );
  }

  const maxRestart = cfg.crashLoopBackOff?.maxContainerRestartPeriod;
  const maxRestartPath = "crashLoopBackOff.maxContainerRestartPeriod";
  if (on("KubeletCrashLoopBackOffMax")) {
    if (maxRestart === undefined) {
      add(
        maxRestartPath,
        undefined,
        "must be set when feature gate KubeletCrashLoopBackOffMax is on",
      );
    } else if (Math.trunc(maxRestart) < 1000 || Math.trunc(maxRestart) > 300_000) {
      add(maxRestartPath, formatDuration(maxRestart), "must be between 1s and 300s, inclusive");
    }
  } else if (maxRestart !== undefined) {
    add(
      maxRestartPath,
      formatDuration(maxRestart),
      "must not be set unless feature gate KubeletCrashLoopBackOffMax is enabled",
    );
  }

  checkEnforceNodeAllocatable(cfg, add);
  oneOf("hairpinMode", cfg.hairpinMode ?? "", HAIRPIN_MODES);
  checkPullCredentials(cfg, on("KubeletEnsureSecretPulledImages"), add);

  const reservedCPUs = cfg.reservedSystemCPUs ?? "";
  if (reservedCPUs !== "") {
    if ((cfg.systemReservedCgroup ?? "") !== "" || (cfg.kubeReservedCgroup ?? "") !== "") {
      add(
        "reservedSystemCPUs",
        reservedCPUs,
        "cannot be used with systemReservedCgroup (--system-reserved-cgroup) or " +
          "kubeReservedCgroup (--kube-reserved-cgroup)",
      );
    }
    const problem = cpuSetProblem(reservedCPUs);
    if (problem) {
      add("reservedSystemCPUs", reservedCPUs, `must be a CPU list such as 0-3,8: ${problem}`);
    }
  }

  checkReservedMemory(cfg.reservedMemory ?? [], add);
  checkLinux(cfg, opts.cgroupV1 === true, add);
  checkShowHiddenMetrics(cfg.showHiddenMetricsForVersion ?? "", version, add);
  checkLogging(cfg.logging, gates, add);
  checkTracing(cfg.tracing, add);

  const throttling = cfg.memoryThrottlingFactor;
  if (on("MemoryQoS") && throttling === undefined) {
    add("memoryThrottlingFactor", undefined, "must be set when feature gate MemoryQoS is enabled");
  }
  if (throttling !== undefined && (throttling <= 0 || throttling > 1)) {
    add("memoryThrottlingFactor", throttling, "must be greater than 0 and at most 1.0");
  }
  const reservationPolicy = cfg.memoryReservationPolicy ?? "";
  if (!on("MemoryQoS") && reservationPolicy === "TieredReservation") {
    add("memoryReservationPolicy", reservationPolicy, "requires feature gate MemoryQoS");
  }
  oneOf("memoryReservationPolicy", reservationPolicy, MEMORY_RESERVATION_POLICIES);

  if ((cfg.containerRuntimeEndpoint ?? "") === "") {
    add("containerRuntimeEndpoint", cfg.containerRuntimeEndpoint, "must be specified");
  }
  if (cfg.enableSystemLogQuery === true && !on("NodeLogQuery")) {
    add("enableSystemLogQuery", true, "requires feature gate NodeLogQuery");
  }
  if (cfg.enableSystemLogQuery === true && cfg.enableSystemLogHandler !== true) {
    add("enableSystemLogQuery", true, "requires enableSystemLogHandler to be true");
  }
  const logWorkers = cfg.containerLogMaxWorkers ?? 0;
  if (logWorkers < 1) add("containerLogMaxWorkers", logWorkers, "must be at least 1");
  const monitorInterval = cfg.containerLogMonitorInterval ?? 0;
  if (monitorInterval < 3000) {
    add(
      "containerLogMonitorInterval",
      formatDuration(monitorInterval),
      "must be a duration of at least 3s",
    );
  }
  const logFiles = cfg.containerLogMaxFiles ?? 0;
  if (logFiles <= 1) add("containerLogMaxFiles", logFiles, "must be greater than 1");
  checkPodLogsDir(cfg.podLogsDir ?? "", add);
  checkEviction(cfg, add);
  return issues;
}

type Add = (path: string, value: unknown, message: string) => void;
type Gate = (name: string) => boolean;

function isPort(n: number): boolean {
  return Number.isInteger(n) && n >= 1 && n <= 65535;
}

function checkLockedGates(
  kubernetesVersion: string,
  fromConfig: Readonly<Record<string, boolean>> | undefined,
  fromFlags: Readonly<Record<string, boolean>> | undefined,
  add: Add,
) {
  const version = minorOf(kubernetesVersion);
  for (const [name, on] of Object.entries({ ...fromConfig, ...fromFlags })) {
    const stage = gateStage(name, version);
    if (stage?.[2] === "locked" && on !== stage[1]) {
      add(
        `featureGates.${name}`,
        on,
        `cannot be set to ${on}: the feature is locked to ${stage[1]} in ${kubernetesVersion}`,
      );
    }
  }
}

function checkShutdown(cfg: KubeletConfiguration, on: Gate, add: Add) {
  const shutdown = cfg.shutdownGracePeriod ?? 0;
  const critical = cfg.shutdownGracePeriodCriticalPods ?? 0;
  const oneSecondOrZero = (ms: number) => ms === 0 || ms >= 1000;
  if (on("GracefulNodeShutdown")) {
    if (critical > shutdown) {
      add(
        "shutdownGracePeriodCriticalPods",
        formatDuration(critical),
        `must be less than or equal to shutdownGracePeriod (${formatDuration(shutdown)})`,
      );
    }
    if (!oneSecondOrZero(shutdown)) {
      add("shutdownGracePeriod", formatDuration(shutdown), "must be either zero or at least 1s");
    }
    if (!oneSecondOrZero(critical)) {
      add(
        "shutdownGracePeriodCriticalPods",
        formatDuration(critical),
        "must be either zero or at least 1s",
      );
    }
  } else if (shutdown > 0 || critical > 0) {
    add(
      shutdown > 0 ? "shutdownGracePeriod" : "shutdownGracePeriodCriticalPods",
      formatDuration(shutdown > 0 ? shutdown : critical),
      "requires feature gate GracefulNodeShutdown",
    );
  }
  const byPriority = cfg.shutdownGracePeriodByPodPriority ?? [];
  if (byPriority.length === 0) return;
  if (!on("GracefulNodeShutdownBasedOnPodPriority")) {
    add(
      "shutdownGracePeriodByPodPriority",
      byPriority,
      "requires feature gate GracefulNodeShutdownBasedOnPodPriority",
    );
  } else if (shutdown > 0 || critical > 0) {
    add(
      "shutdownGracePeriodByPodPriority",
      byPriority,
      "cannot be set together with shutdownGracePeriod or shutdownGracePeriodCriticalPods",
    );
  }
}

const ENFORCE_KEYS = [
  "pods",
  "system-reserved",
  "system-reserved-compressible",
  "kube-reserved",
  "kube-reserved-compressible",
  "none",
];

function checkEnforceNodeAllocatable(cfg: KubeletConfiguration, add: Add) {
  const values = cfg.enforceNodeAllocatable ?? [];
  for (const base of ["system-reserved", "kube-reserved"]) {
    if (values.includes(base) && values.includes(`${base}-compressible`)) {
      add(
        "enforceNodeAllocatable",
        values,
        `cannot contain both "${base}" and "${base}-compressible"`,
      );
    }
  }
  const seen = new Set<string>();
  values.forEach((val, i) => {
    const path = `enforceNodeAllocatable[${i}]`;
    if (seen.has(val)) {
      add(path, val, "is a duplicate enforcement");
      return;
    }
    seen.add(val);
    switch (val) {
      case "pods":
        break;
      case "system-reserved":
      case "system-reserved-compressible":
        if ((cfg.systemReservedCgroup ?? "") === "") {
          add(
            "systemReservedCgroup",
            "",
            `must be specified when enforceNodeAllocatable contains "${val}"`,
          );
        }
        break;
      case "kube-reserved":
      case "kube-reserved-compressible":
        if ((cfg.kubeReservedCgroup ?? "") === "") {
          add(
            "kubeReservedCgroup",
            "",
            `must be specified when enforceNodeAllocatable contains "${val}"`,
          );
        }
        break;
      case "none":
        if (values.length > 1) {
          add("enforceNodeAllocatable", values, 'may not contain other enforcements with "none"');
        }
        return;
      default:
        add(path, val, `must be one of: ${quote(ENFORCE_KEYS)}`);
        return;
    }
    if (cfg.cgroupsPerQOS !== true) {
      add(
        "cgroupsPerQOS",
        cfg.cgroupsPerQOS ?? false,
        `must be true when enforceNodeAllocatable contains "${val}"`,
      );
    }
  });
}

function checkPullCredentials(cfg: KubeletConfiguration, gateOn: boolean, add: Add) {
  const policy = cfg.imagePullCredentialsVerificationPolicy ?? "";
  const allowlist = cfg.preloadedImagesVerificationAllowlist ?? [];
  if (!gateOn) {
    if (policy !== "") {
      add(
        "imagePullCredentialsVerificationPolicy",
        policy,
        "must not be set unless feature gate KubeletEnsureSecretPulledImages is enabled",
      );
    }
    if (allowlist.length > 0) {
      add(
        "preloadedImagesVerificationAllowlist",
        allowlist,
        "must not be set unless feature gate KubeletEnsureSecretPulledImages is enabled",
      );
    }
    return;
  }
  if (!PULL_CREDENTIAL_POLICIES.includes(policy)) {
    add(
      "imagePullCredentialsVerificationPolicy",
      policy,
      `must be one of: ${quote(PULL_CREDENTIAL_POLICIES)}`,
    );
  }
  if (allowlist.length > 0 && policy !== "NeverVerifyAllowlistedImages") {
    add(
      "preloadedImagesVerificationAllowlist",
      allowlist,
      'can only be set when imagePullCredentialsVerificationPolicy is "NeverVerifyAllowlistedImages"',
    );
    return;
  }
  for (const [i, pattern] of allowlist.entries()) {
    const problem = imagePatternProblem(pattern);
    if (problem) {
      add(
        `preloadedImagesVerificationAllowlist[${i}]`,
        pattern,
        `is not a valid image pattern: ${problem}`,
      );
      return;
    }
  }
}

// Docker reference grammar, enough to tell a repository name from one with a tag or digest.
const DOMAIN_COMPONENT = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
const DOMAIN =
  `(?:${DOMAIN_COMPONENT}(?:\\.${DOMAIN_COMPONENT})*|\\[[0-9a-fA-F:.]+\\])(?::[0-9]+)?`;
const PATH_COMPONENT = "[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*";
const REPOSITORY = new RegExp(`^(?:${DOMAIN}/)?${PATH_COMPONENT}(?:/${PATH_COMPONENT})*$`);

/** Upstream's allowlist pattern rules: a full image name, or a prefix ending in "/*". */
function imagePatternProblem(pattern: string): string | undefined {
  if (pattern !== pattern.trim()) return `leading/trailing spaces are not allowed: ${pattern}`;
  const wildcard = pattern.endsWith("/*");
  const trimmed = wildcard ? pattern.slice(0, -1) : pattern;
  if (trimmed.length === 0) return `the supplied pattern is too short: ${pattern}`;
  if (trimmed.includes("*")) {
    return `not a valid wildcard pattern, only patterns ending with '/*' are allowed: ${pattern}`;
  }
  if (wildcard) return trimmed.length === 1 ? "at least registry hostname is required" : undefined;
  const lastSlash = trimmed.lastIndexOf("/");
  const hasTag = trimmed.includes("@") || trimmed.slice(lastSlash + 1).includes(":");
  const name = trimmed.split("@")[0]?.replace(/:[^/]*$/, "") ?? "";
  if (!REPOSITORY.test(name)) {
    return "failed to parse as an image name: invalid reference format";
  }
  // Upstream compares the pattern with its normalized name, so a name that normalization
  // rewrites (no registry host, docker.io without "library/", index.docker.io) is refused too.
  const [first = "", ...path] = name.split("/");
  const hasDomain = path.length > 0 &&
    (first.includes(".") || first.includes(":") || first === "localhost" ||
      first !== first.toLowerCase());
  const rewritten = !hasDomain || first === "index.docker.io" ||
    (first === "docker.io" && path.length === 1);
  if (hasTag || rewritten) {
    return `neither tag nor digest is accepted in an image reference: ${pattern}`;
  }
  return undefined;
}

const QUALIFIED_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** Upstream's CheckTaintValidation: a qualified-name key, a label value, a known effect. */
function taintProblem(key: string, value: string, effect: string): string | undefined {
  const parts = key.split("/");
  const name = parts.length === 2 ? parts[1] ?? "" : key;
  const prefix = parts.length === 2 ? parts[0] ?? "" : undefined;
  if (parts.length > 2) return "invalid taint key: a qualified name must have at most one '/'";
  if (name === "" || name.length > 63 || !QUALIFIED_NAME.test(name)) {
    return "invalid taint key: name part must consist of alphanumeric characters, '-', '_' or " +
      "'.', start and end with an alphanumeric character, and be at most 63 characters";
  }
  if (
    prefix !== undefined &&
    (prefix === "" || prefix.length > 253 || !DNS1123_SUBDOMAIN.test(prefix))
  ) {
    return "invalid taint key: prefix part must be a lowercase RFC 1123 subdomain";
  }
  if (value !== "" && (value.length > 63 || !QUALIFIED_NAME.test(value))) {
    return "invalid taint value: a valid label value must be 63 characters or less and must " +
      "consist of alphanumeric characters, '-', '_' or '.', starting and ending with an " +
      "alphanumeric character";
  }
  if (effect !== "" && !TAINT_EFFECTS.includes(effect)) {
    return `invalid taint effect: ${effect}, unsupported taint effect`;
  }
  return undefined;
}

/** k8s.io/utils/cpuset.Parse's syntax: "0-3,8,10-11". */
function cpuSetProblem(text: string): string | undefined {
  const atoi = (s: string) => (/^[+-]?[0-9]+$/.test(s) ? Number(s) : undefined);
  for (const r of text.split(",")) {
    const dash = r.indexOf("-");
    const bounds = dash < 0 ? [r] : [r.slice(0, dash), r.slice(dash + 1)];
    const nums = bounds.map(atoi);
    const bad = bounds.find((_, i) => nums[i] === undefined);
    if (bad !== undefined) return `strconv.Atoi: parsing "${bad}": invalid syntax`;
    const [start, end] = nums as number[];
    if (end !== undefined && start !== undefined && start > end) {
      return `invalid range "${r}" (${start} > ${end})`;
    }
  }
  return undefined;
}

function checkReservedMemory(
  entries: NonNullable<KubeletConfiguration["reservedMemory"]>,
  add: Add,
) {
  const seen = new Map<number, Set<string>>();
  entries.forEach((entry, i) => {
    const numa = entry.numaNode ?? 0;
    const names = seen.get(numa) ?? new Set<string>();
    seen.set(numa, names);
    for (const [name, q] of Object.entries(entry.limits ?? {})) {
      const path = `reservedMemory[${i}].limits.${name}`;
      if (name !== "memory" && !name.startsWith("hugepages-")) {
        add(
          path,
          q,
          `is not supported for NUMA node ${numa}: only memory and hugepages-<size> are`,
        );
      }
      let zero = false;
      try {
        zero = parseQuantity(q) === 0;
      } catch {
        // The schema rejects bad quantity syntax while decoding.
      }
      if (zero) add(path, q, `must not be zero for NUMA node ${numa}`);
      if (names.has(name)) add(path, q, `is a duplicate for NUMA node ${numa}`);
      names.add(name);
    }
  });
}

/** Upstream's validation_linux.go: the first cgroup or user-namespace problem, if any. */
function checkLinux(cfg: KubeletConfiguration, cgroupV1: boolean, add: Add) {
  if (cgroupV1 && cfg.failCgroupV1 === true) {
    add(
      "failCgroupV1",
      true,
      "must be false on a host using cgroup v1 (cgroup v1 is in maintenance mode)",
    );
    return;
  }
  if (cgroupV1 && cfg.singleProcessOOMKill === false) {
    add("singleProcessOOMKill", false, "must not be explicitly false on a host using cgroup v1");
    return;
  }
  const idsPerPod = cfg.userNamespaces?.idsPerPod;
  if (idsPerPod === undefined) return;
  const path = "userNamespaces.idsPerPod";
  if (idsPerPod < USER_NS_UNIT) add(path, idsPerPod, `must not be less than ${USER_NS_UNIT}`);
  else if (idsPerPod % USER_NS_UNIT !== 0) {
    add(path, idsPerPod, `must be a multiple of ${USER_NS_UNIT}`);
  } else if (idsPerPod > 2 ** 32 - 1) add(path, idsPerPod, `must not be more than ${2 ** 32 - 1}`);
}

function checkShowHiddenMetrics(target: string, kubernetesVersion: string, add: Add) {
  if (target === "") return;
  const [major, minor] = minorOf(kubernetesVersion);
  const valid = `${major}.${minor - 1}`;
  if (target !== valid) {
    add(
      "showHiddenMetricsForVersion",
      target,
      `must be omitted or have the value '${valid}': only the previous minor version is allowed`,
    );
  }
}

/** component-base logs/api/v1 Validate, for the formats the kubelet registers. */
function checkLogging(
  logging: KubeletConfiguration["logging"],
  gates: Readonly<Record<string, boolean>>,
  add: Add,
) {
  const format = logging.format ?? "";
  if (format !== "text" && format !== "json") {
    add("logging.format", format, 'must be a supported log format: "text" or "json"');
  } else if (format === "json" && gates.LoggingBetaOptions !== true) {
    add("logging.format", format, "requires feature gate LoggingBetaOptions");
  }
  if ((logging.verbosity ?? 0) > MAX_INT32) {
    add("logging.verbosity", logging.verbosity, `must be at most ${MAX_INT32}`);
  }
  const vmodule = logging.vmodule ?? [];
  if (vmodule.length > 0 && format !== "" && format !== "text") {
    add("logging.vmodule", vmodule, "is only supported for the text log format");
  }
  vmodule.forEach((item, i) => {
    const pattern = item.filePattern ?? "";
    if (pattern === "") add(`logging.vmodule[${i}]`, item, "must have a non-empty file pattern");
    if (/[=,]/.test(pattern)) {
      add(`logging.vmodule[${i}]`, pattern, "must have a file pattern without '=' or ','");
    }
    if ((item.verbosity ?? 0) > MAX_INT32) {
      add(`logging.vmodule[${i}]`, item.verbosity, `must have a verbosity of at most ${MAX_INT32}`);
    }
  });
  for (const name of ["text", "json"] as const) {
    const o = logging.options?.[name] ?? {};
    if (o.splitStream === true && gates.LoggingAlphaOptions !== true) {
      add(`logging.options.${name}.splitStream`, true, "requires feature gate LoggingAlphaOptions");
    }
    let buffer = 0;
    try {
      buffer = parseQuantity(o.infoBufferSize ?? "0");
    } catch {
      // Bad syntax is rejected while decoding.
    }
    if (buffer !== 0 && gates.LoggingAlphaOptions !== true) {
      add(
        `logging.options.${name}.infoBufferSize`,
        o.infoBufferSize,
        "requires feature gate LoggingAlphaOptions",
      );
    }
  }
}

/** component-base tracing/api/v1 ValidateTracingConfiguration. */
function checkTracing(tracing: KubeletConfiguration["tracing"], add: Add) {
  if (!tracing) return;
  const rate = tracing.samplingRatePerMillion;
  if (rate !== undefined) {
    if (rate < 0) add("tracing.samplingRatePerMillion", rate, "must not be negative");
    if (rate > 1_000_000) {
      add("tracing.samplingRatePerMillion", rate, "must be at most one million");
    }
  }
  if (tracing.endpoint !== undefined) {
    const endpoint = tracing.endpoint.includes("//")
      ? tracing.endpoint
      : `dns://${tracing.endpoint}`;
    const parsed = parseGoURL(endpoint);
    if ("error" in parsed) {
      add(
        "tracing.endpoint",
        tracing.endpoint,
        `must be a valid URL: parse "${endpoint}": ${parsed.error}`,
      );
    } else if (!["dns", "unix", "unix-abstract"].includes(parsed.scheme)) {
      add(
        "tracing.endpoint",
        tracing.endpoint,
        `has unsupported scheme "${parsed.scheme}": options are none, dns, unix, or unix-abstract`,
      );
    }
  }
}

/** The parts of Go's net/url.Parse that decide whether an endpoint parses, and its scheme. */
function parseGoURL(raw: string): { scheme: string } | { error: string } {
  // deno-lint-ignore no-control-regex
  if (/[\x00-\x1f\x7f]/.test(raw)) return { error: "net/url: invalid control character in URL" };
  let scheme = "";
  let rest = raw;
  for (let i = 0; i < raw.length; i++) {
    const ch = raw[i] ?? "";
    if (/[a-zA-Z]/.test(ch)) continue;
    if (/[0-9+.-]/.test(ch)) {
      if (i === 0) break;
      continue;
    }
    if (ch === ":") {
      if (i === 0) return { error: "missing protocol scheme" };
      scheme = raw.slice(0, i).toLowerCase();
      rest = raw.slice(i + 1);
    }
    break;
  }
  rest = rest.split("#")[0]?.split("?")[0] ?? "";
  if (scheme === "" && !rest.startsWith("/") && (rest.split("/")[0] ?? "").includes(":")) {
    return { error: "first path segment in URL cannot contain colon" };
  }
  const badEscape = /%(?![0-9a-fA-F]{2})(.{0,2})/.exec(rest);
  if (rest.startsWith("//")) {
    const authority = rest.slice(2).split("/")[0] ?? "";
    const host = authority.slice(authority.lastIndexOf("@") + 1);
    const port = /^(?:\[[^\]]*\]|[^:]*)(:.*)?$/.exec(host)?.[1];
    if (port !== undefined && !/^:[0-9]*$/.test(port)) {
      return { error: `invalid port "${port}" after host` };
    }
  }
  if (badEscape) return { error: `invalid URL escape "%${badEscape[1]}"` };
  return { scheme };
}

/** Go's filepath.Clean for Unix paths. */
function cleanPath(p: string): string {
  if (p === "") return ".";
  const rooted = p.startsWith("/");
  const out: string[] = [];
  for (const seg of p.split("/")) {
    if (seg === "" || seg === ".") continue;
    if (seg === "..") {
      if (out.length > 0 && out[out.length - 1] !== "..") out.pop();
      else if (!rooted) out.push("..");
      continue;
    }
    out.push(seg);
  }
  const joined = (rooted ? "/" : "") + out.join("/");
  return joined === "" ? "." : joined;
}

function checkPodLogsDir(dir: string, add: Add) {
  if (dir === "") add("podLogsDir", dir, "must be specified");
  if (!dir.startsWith("/")) add("podLogsDir", dir, "must be an absolute path");
  if (cleanPath(dir) !== dir) add("podLogsDir", dir, `must be normalized (${cleanPath(dir)})`);
  // The path is a metrics label value, so it must be ASCII.
  // deno-lint-ignore no-control-regex
  if (/[^\x00-\x7f]/.test(dir)) add("podLogsDir", dir, "must contain ASCII characters only");
}

/** Upstream parses the eviction maps when the kubelet starts; a bad entry stops it. */
function checkEviction(cfg: KubeletConfiguration, add: Add) {
  try {
    parseThresholdConfig(cfg);
  } catch (e) {
    if (!(e instanceof ThresholdConfigError)) throw e;
    add(e.field, { [e.signal]: e.value }, `has a bad entry: ${e.message}`);
  }
}
