/**
 * @module
 * Checks a defaulted KubeletConfiguration against upstream's rules before anything starts:
 * ranges, ports, durations that must be ordered, values that need a feature gate, enumerated
 * options, reserved cgroups for node-allocatable enforcement, logging and tracing settings, and
 * the eviction thresholds. Returns every problem with its JSON field path, instead of upstream's
 * one aggregated error. Corresponds to upstream
 * `pkg/kubelet/apis/config/validation/validation.go` (ValidateKubeletConfiguration),
 * `validation_linux.go`, `validation_reserved_memory.go`, and the component-base logging,
 * tracing, metrics and feature-gate checks it calls. The rules run here in upstream's order;
 * the larger families live beside this module: `_validation_feature_gates.ts`,
 * `_validation_node.ts` (taints, shutdown, Linux host), `_validation_node_allocatable.ts`,
 * `_validation_image_credentials.ts` and `_validation_logging.ts` (logging, tracing, metrics,
 * container logs).
 */

import { formatDuration } from "../util/duration.ts";
import { parseThresholdConfig, ThresholdConfigError } from "../eviction/thresholds.ts";
import type { KubeletConfiguration } from "./config_types.ts";
import { checkLockedGates, effectiveFeatureGates } from "./_validation_feature_gates.ts";
import { checkPullCredentials } from "./_validation_image_credentials.ts";
import {
  checkContainerLogs,
  checkLogging,
  checkShowHiddenMetrics,
  checkTracing,
} from "./_validation_logging.ts";
import { checkLinux, checkRegisterWithTaints, checkShutdown } from "./_validation_node.ts";
import {
  checkEnforceNodeAllocatable,
  checkReservedMemory,
  checkReservedSystemCPUs,
} from "./_validation_node_allocatable.ts";

export { effectiveFeatureGates };

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
   * @default "v1.36.3", the release of the field table in config_types.ts
   */
  readonly kubernetesVersion?: string;
  /** True when the host runs cgroup v1; enables upstream's Linux cgroup v1 checks. */
  readonly cgroupV1?: boolean;
}

const TOPOLOGY_POLICIES = ["none", "best-effort", "restricted", "single-numa-node"];
const TOPOLOGY_SCOPES = ["container", "pod"];
const HAIRPIN_MODES = ["none", "hairpin-veth", "promiscuous-bridge"];
const SWAP_BEHAVIORS = ["", "NoSwap", "LimitedSwap"];
const MEMORY_RESERVATION_POLICIES = ["None", "TieredReservation"];
const DEFAULT_CFS_QUOTA_PERIOD_MS = 100;

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

  checkRegisterWithTaints(cfg.registerWithTaints ?? [], add);

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

  checkReservedSystemCPUs(cfg, add);

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
  checkContainerLogs(cfg, add);
  checkEviction(cfg, add);
  return issues;
}

type Add = (path: string, value: unknown, message: string) => void;

function isPort(n: number): boolean {
  return Number.isInteger(n) && n >= 1 && n <= 65535;
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
