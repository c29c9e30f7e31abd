/**
 * @module
 * What component-base adds to every component's /metrics: the build (kubernetes_build_info), the
 * state of every feature gate the kubelet knows (kubernetes_feature_enabled) and the counts of
 * registered, disabled and hidden metrics. {@link CountingRegistry} is the registry that counts
 * its registrations by stability level, as component-base's KubeRegistry does at each
 * `MustRegister`; it counts the /metrics registry's own metrics only, where upstream's
 * process-wide counter also counts the other endpoints' registries and every metric a linked
 * package registers (so the Go kubelet's numbers are higher). No metric is disabled or hidden.
 *
 * kubernetes_build_info describes this agent, not a Go build: `git_version` is the version the
 * node reports (`v1.36.3+kubelet-ts.<ours>`), `major`/`minor` the upstream release it follows,
 * `compiler` is `deno` and `go_version` the Deno runtime it runs on (`deno2.9.6`, as Go writes
 * `go1.26.8`), `platform` linux/<GOARCH>; `git_commit`, `git_tree_state` and `build_date` are
 * empty because nothing records them in the agent (the values `--version=raw` prints).
 *
 * Corresponds to component-base `metrics/prometheus/version`, `metrics/prometheus/feature`
 * (fed by `featuregate.AddMetrics`), `metrics/registry.go` and `metrics/options.go`.
 */

import {
  Counter,
  Gauge,
  type Histogram,
  MetricsRegistry,
  type OverflowReporter,
  type StabilityLevel,
} from "./_registry.ts";
import { type KnownFeature, KUBE_FEATURES_1_36 } from "./_kube_features.ts";
import { versionInfo } from "../util/version.ts";

/** A registry that counts what is registered into it (registered_metrics_total). */
export class CountingRegistry extends MetricsRegistry {
  readonly registeredMetrics: Counter;
  readonly disabledMetrics: Counter;
  readonly hiddenMetrics: Counter;

  constructor(opts: { onOverflow?: OverflowReporter } = {}) {
    super(opts);
    // Made first so that they count themselves, as RegisterMetaMetrics does.
    this.registeredMetrics = new Counter({
      name: "registered_metrics_total",
      help: "The count of registered metrics broken by stability level and deprecation version.",
      stabilityLevel: "BETA",
      labelNames: ["stability_level", "deprecated_version"],
    });
    this.register(this.registeredMetrics);
    // No metric is disabled (there is no --disabled-metrics) nor hidden (none is deprecated).
    this.disabledMetrics = this.register(
      new Counter({
        name: "disabled_metrics_total",
        help: "The count of disabled metrics.",
        stabilityLevel: "BETA",
      }),
    );
    this.hiddenMetrics = this.register(
      new Counter({
        name: "hidden_metrics_total",
        help: "The count of hidden metrics.",
        stabilityLevel: "BETA",
      }),
    );
    this.register(
      new Counter({
        name: "cardinality_enforcement_unexpected_categorizations_total",
        help: "The count of unexpected categorizations during cardinality enforcement.",
      }),
    );
  }

  override register<T extends Counter | Gauge | Histogram>(metric: T): T {
    super.register(metric);
    this.countRegistered(stabilityOf(metric.help));
    return metric;
  }

  /** Counts a metric written by a collector but registered as a metric upstream. */
  countRegistered(level: StabilityLevel): void {
    this.registeredMetrics?.inc({ stability_level: level, deprecated_version: "" });
  }
}

function stabilityOf(help: string): StabilityLevel {
  const level = /^\[(INTERNAL|ALPHA|BETA|STABLE)\] /.exec(help)?.[1];
  return (level ?? "ALPHA") as StabilityLevel;
}

/** The labels of kubernetes_build_info for this agent. */
export function buildInfoLabels(): Record<string, string> {
  const v = versionInfo();
  return {
    major: v.major ?? "",
    minor: v.minor ?? "",
    git_version: v.gitVersion ?? "",
    git_commit: v.gitCommit ?? "",
    git_tree_state: v.gitTreeState ?? "",
    build_date: v.buildDate ?? "",
    go_version: `deno${Deno.version.deno}`,
    compiler: v.compiler ?? "deno",
    platform: v.platform ?? "",
  };
}

/**
 * Whether each known gate is on with `overrides` applied, as upstream's `Enabled`: an explicit
 * value wins, except on a locked gate; AllAlpha and AllBeta set the alpha or beta gates not set
 * explicitly; every other gate keeps its default.
 */
export function featureGateStates(
  overrides: Readonly<Record<string, boolean>> = {},
  known: readonly KnownFeature[] = KUBE_FEATURES_1_36,
): { name: string; stage: string; enabled: boolean }[] {
  const all = { ALPHA: overrides.AllAlpha, BETA: overrides.AllBeta };
  return known.map(([name, stage, enabled, locked]) => {
    let on = enabled;
    const set = overrides[name];
    if (locked) on = enabled;
    else if (set !== undefined) on = set;
    else if ((stage === "ALPHA" || stage === "BETA") && all[stage] !== undefined) {
      on = all[stage] ?? on;
    }
    return { name, stage, enabled: on };
  });
}

/** The build and feature gate families. */
export class ComponentMetrics {
  /** kubernetes_build_info{...}: always 1. */
  readonly buildInfo: Gauge;
  /** kubernetes_feature_enabled{name,stage}: 1 when the gate is on. */
  readonly featureEnabled: Gauge;

  constructor(r: MetricsRegistry) {
    this.buildInfo = r.register(
      new Gauge({
        name: "kubernetes_build_info",
        help:
          "A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running.",
        stabilityLevel: "BETA",
        labelNames: [
          "major",
          "minor",
          "git_version",
          "git_commit",
          "git_tree_state",
          "build_date",
          "go_version",
          "compiler",
          "platform",
        ],
      }),
    );
    this.buildInfo.set(1, buildInfoLabels());
    this.featureEnabled = r.register(
      new Gauge({
        name: "kubernetes_feature_enabled",
        help: "This metric records the data about the stage and enablement of a k8s feature.",
        stabilityLevel: "BETA",
        labelNames: ["name", "stage"],
      }),
    );
    this.recordFeatureGates();
  }

  /** Records every known gate with the configuration's `featureGates` applied (upstream AddMetrics). */
  recordFeatureGates(overrides?: Readonly<Record<string, boolean>>): void {
    for (const g of featureGateStates(overrides)) {
      this.featureEnabled.set(g.enabled ? 1 : 0, { name: g.name, stage: g.stage });
    }
  }
}
