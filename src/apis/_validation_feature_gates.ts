/**
 * @module
 * The feature gates that kubelet configuration validation consults: upstream's versioned
 * defaults for each (pkg/features/kube_features.go, plus component-base's logging gates), the
 * effective state at a release once the configuration's and the command line's overrides are
 * applied, and upstream's refusal of a gate the release does not know or has locked. Private to
 * validation.ts, which re-exports {@link effectiveFeatureGates}.
 */

import { featureGateStates } from "../metrics/component_metrics.ts";

/** The release whose gates component_metrics.ts's registry knows, with their locks. */
const REGISTRY_RELEASE = "1.36";

/** Reports one issue, as validateKubeletConfiguration collects them. */
type Add = (path: string, value: unknown, message: string) => void;

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
  NodeLogQuery: [["1.27", false], ["1.30", false], ["1.36", true, "locked"]],
  NodeSwap: [["1.22", false], ["1.30", true], ["1.34", true, "locked"]],
  RotateKubeletServerCertificate: [["1.7", false], ["1.12", true]],
};

/** The [major, minor] of a version such as "v1.36.3" or "1.35"; [0, 0] when there is none. */
export function minorOf(version: string): [number, number] {
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

/**
 * Upstream SetFromMap's refusals, which validation repeats: a gate the release does not know, and
 * a gate set to something other than the value it is locked to. At the release of the known-gate
 * registry (component_metrics.ts, {@link REGISTRY_RELEASE}) every gate is checked; at another
 * release, only the locks of the gates in {@link GATES}.
 */
export function checkLockedGates(
  kubernetesVersion: string,
  fromConfig: Readonly<Record<string, boolean>> | undefined,
  fromFlags: Readonly<Record<string, boolean>> | undefined,
  add: Add,
) {
  const version = minorOf(kubernetesVersion);
  const registry = version.join(".") === REGISTRY_RELEASE;
  for (const [name, on] of Object.entries({ ...fromConfig, ...fromFlags })) {
    const stage = gateStage(name, version);
    let lockedTo = stage?.[2] === "locked" ? stage[1] : undefined;
    if (registry && lockedTo === undefined) {
      // featureGateStates keeps a locked gate at its default whatever is set.
      const state = featureGateStates({ [name]: on }).find((g) => g.name === name);
      if (!state) {
        add(`featureGates.${name}`, on, `unrecognized feature gate: ${name}`);
        continue;
      }
      if (state.enabled !== on) lockedTo = state.enabled;
    }
    if (lockedTo !== undefined && on !== lockedTo) {
      add(
        `featureGates.${name}`,
        on,
        `cannot set feature gate ${name} to ${on}, feature is locked to ${lockedTo}`,
      );
    }
  }
}
