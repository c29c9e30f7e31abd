import assert from "node:assert/strict";
import { Counter, Gauge, Histogram } from "./_registry.ts";
import { parseExposition } from "./prometheus.ts";
import {
  buildInfoLabels,
  ComponentMetrics,
  CountingRegistry,
  featureGateStates,
} from "./component_metrics.ts";
import { KUBE_FEATURES_1_36 } from "./_kube_features.ts";
import { KUBELET_VERSION } from "../util/version.ts";

Deno.test("CountingRegistry counts registrations by stability level, its own included", async () => {
  const r = new CountingRegistry();
  r.register(new Counter({ name: "a_total", help: "a" }));
  r.register(new Gauge({ name: "b", help: "b", stabilityLevel: "STABLE" }));
  r.register(new Histogram({ name: "c", help: "c", buckets: [1], stabilityLevel: "BETA" }));
  const count = (level: string) =>
    r.registeredMetrics.get({ stability_level: level, deprecated_version: "" });
  // registered, disabled and hidden (BETA) and cardinality enforcement (ALPHA) count themselves.
  assert.equal(count("BETA"), 4);
  assert.equal(count("ALPHA"), 2);
  assert.equal(count("STABLE"), 1);
  const families = new Map(parseExposition(await r.render()).map((f) => [f.name, f]));
  assert.equal(families.get("disabled_metrics_total")?.samples[0]?.value, 0);
  assert.equal(families.get("hidden_metrics_total")?.samples[0]?.value, 0);
  assert.equal(
    families.get("registered_metrics_total")?.help,
    "[BETA] The count of registered metrics broken by stability level and deprecation version.",
  );
});

Deno.test("buildInfoLabels describes this agent and its Deno runtime", () => {
  const l = buildInfoLabels();
  assert.deepEqual(Object.keys(l).sort(), [
    "build_date",
    "compiler",
    "git_commit",
    "git_tree_state",
    "git_version",
    "go_version",
    "major",
    "minor",
    "platform",
  ]);
  assert.equal(l.git_version, KUBELET_VERSION);
  assert.equal(`v${l.major}.${l.minor}`, KUBELET_VERSION.replace(/^(v\d+\.\d+).*$/, "$1"));
  assert.equal(l.compiler, "deno");
  assert.equal(l.go_version, `deno${Deno.version.deno}`);
  assert.match(l.platform ?? "", /^linux\/(amd64|arm64)$/);
});

Deno.test("featureGateStates applies overrides, AllAlpha/AllBeta and locks as upstream", () => {
  const known = [
    ["A", "ALPHA", false],
    ["B", "BETA", true],
    ["G", "", true, "locked"],
    ["D", "DEPRECATED", false],
    ["A2", "ALPHA", false],
  ] as const;
  const on = (o: Record<string, boolean>) =>
    Object.fromEntries(featureGateStates(o, known).map((g) => [g.name, g.enabled]));
  assert.deepEqual(on({}), { A: false, B: true, G: true, D: false, A2: false });
  assert.deepEqual(on({ A: true, G: false, D: true }), {
    A: true,
    B: true,
    G: true,
    D: true,
    A2: false,
  });
  assert.deepEqual(on({ AllAlpha: true, A2: false, AllBeta: false }), {
    A: true,
    B: false,
    G: true,
    D: false,
    A2: false,
  });
});

Deno.test("ComponentMetrics records every gate the Go kubelet v1.36.3 knows, with its stage", async () => {
  const r = new CountingRegistry();
  const m = new ComponentMetrics(r);
  // 242 gates in the Go kubelet's kubernetes_feature_enabled, AllAlpha and AllBeta included.
  assert.equal(KUBE_FEATURES_1_36.length, 242);
  assert.equal(m.featureEnabled.get({ name: "NodeSwap", stage: "" }), 1);
  assert.equal(m.featureEnabled.get({ name: "InPlacePodVerticalScaling", stage: "" }), 1);
  assert.equal(m.featureEnabled.get({ name: "AllAlpha", stage: "ALPHA" }), 0);
  m.recordFeatureGates({ AllAlpha: true });
  const families = new Map(parseExposition(await r.render()).map((f) => [f.name, f]));
  const gates = families.get("kubernetes_feature_enabled")!;
  assert.equal(gates.type, "gauge");
  assert.equal(gates.samples.length, 242);
  for (const s of gates.samples) {
    assert.deepEqual(Object.keys(s.labels).sort(), ["name", "stage"]);
    if (s.labels.stage === "ALPHA") assert.equal(s.value, 1, s.labels.name);
  }
  const info = families.get("kubernetes_build_info")!;
  assert.match(info.help, /^\[BETA\] A metric with a constant '1' value/);
  assert.equal(info.samples[0]?.value, 1);
});
