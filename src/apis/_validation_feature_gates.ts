/**
 * @module
 * The feature gates that kubelet configuration validation consults: upstream's versioned
 * defaults for each (pkg/features/kube_features.go, plus component-base's logging gates), the
 * effective state at a release once the configuration's and the command line's overrides are
 * applied, and the rule that a gate locked at a release cannot be changed. Private to
 * validation.ts, which re-exports {@link effectiveFeatureGates}.
 */

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

/** Reports each gate set to something other than the value it is locked to at this release. */
export function checkLockedGates(
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
