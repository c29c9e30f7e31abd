/**
 * @module
 * Validation rules about the node itself: the taints it registers with (upstream's
 * CheckTaintValidation), graceful node shutdown periods and their feature gates, and the Linux
 * host checks of upstream's validation_linux.go (cgroup v1 settings, user namespace ID ranges).
 * Private to validation.ts.
 */

import { formatDuration } from "../util/duration.ts";
import type { KubeletConfiguration } from "./config_types.ts";

/** Reports one issue, as validateKubeletConfiguration collects them. */
type Add = (path: string, value: unknown, message: string) => void;
/** Whether a feature gate is on. */
type Gate = (name: string) => boolean;

const USER_NS_UNIT = 65536;

/** registerWithTaints: valid taints, without timeAdded. */
export function checkRegisterWithTaints(
  taints: NonNullable<KubeletConfiguration["registerWithTaints"]>,
  add: Add,
) {
  taints.forEach((taint, i) => {
    const problem = taintProblem(taint.key ?? "", taint.value ?? "", taint.effect ?? "");
    if (problem) add(`registerWithTaints[${i}]`, taint, `is not a valid taint: ${problem}`);
    if (taint.timeAdded !== undefined) {
      add(`registerWithTaints[${i}].timeAdded`, taint.timeAdded, "must not be set");
    }
  });
}

const TAINT_EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
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

/** Graceful node shutdown periods: zero or at least 1s, and only with their feature gates. */
export function checkShutdown(cfg: KubeletConfiguration, on: Gate, add: Add) {
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

/** Upstream's validation_linux.go: the first cgroup or user-namespace problem, if any. */
export function checkLinux(cfg: KubeletConfiguration, cgroupV1: boolean, add: Add) {
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
