/**
 * @module
 * The KubeletConfiguration settings upstream acts on and this kubelet cannot yet: each one set
 * stops the agent at start (and a SIGHUP reload), naming the field, its value and that it is not
 * supported yet, instead of being accepted and silently ignored. Upstream has no counterpart: its
 * packages that act on these fields (the tracing and logging options of component-base, ...)
 * are what they configure. kubelet_config.ts runs {@link unsupportedSettings} after upstream's
 * validation, so a value upstream refuses gets upstream's message first. The table test
 * (config_fields_test.ts) holds every field to one of: read by a module, an upstream no-op, or
 * refused here (or by the module named there).
 */

import type { KubeletConfiguration } from "../apis/config_types.ts";
import type { ValidationIssue } from "../apis/validation.ts";
import { parseQuantity } from "../util/quantity.ts";
import { unsupportedFeatureGates } from "./feature_gates.ts";

const NOT_YET = "is not supported yet by this kubelet";

/** What the configuration sets that this kubelet would have to ignore; empty when nothing. */
export function unsupportedSettings(cfg: KubeletConfiguration): ValidationIssue[] {
  const out: ValidationIssue[] = [];
  const add = (path: string, value: unknown, why: string) =>
    out.push({ path, value, message: `${NOT_YET} (${why})` });

  // pkg/kubelet/cm: upstream's NewNonePolicy refuses CPU manager options; refused here too,
  // where the file and line of the field can be named.
  const cpuOptions = Object.entries(cfg.cpuManagerPolicyOptions ?? {});
  if (cpuOptions.length > 0 && cfg.cpuManagerPolicy === "none") {
    out.push({
      path: "cpuManagerPolicyOptions",
      value: cfg.cpuManagerPolicyOptions,
      message:
        `is refused with the none CPU manager policy, as upstream refuses it: None policy: ` +
        `received unsupported options=map[${cpuOptions.map(([k, v]) => `${k}:${v}`).join(" ")}]`,
    });
  }
  if ((cfg.tlsCurvePreferences ?? []).length > 0) {
    add(
      "tlsCurvePreferences",
      cfg.tlsCurvePreferences,
      "the server's TLS stack chooses its key exchange groups itself",
    );
  }
  if (cfg.enableContentionProfiling) {
    add(
      "enableContentionProfiling",
      true,
      "V8 has no block profiler: /debug/pprof/block answers 501",
    );
  }
  if (cfg.tracing?.endpoint !== undefined) {
    add("tracing.endpoint", cfg.tracing.endpoint, "no OpenTelemetry spans are made or exported");
  }
  if ((cfg.tracing?.samplingRatePerMillion ?? 0) > 0) {
    add(
      "tracing.samplingRatePerMillion",
      cfg.tracing?.samplingRatePerMillion,
      "no OpenTelemetry spans are made or exported",
    );
  }
  for (const format of ["text", "json"] as const) {
    const o = cfg.logging.options[format];
    if (o.splitStream) {
      add(`logging.options.${format}.splitStream`, true, "every log line goes to stderr");
    }
    if (o.infoBufferSize !== "" && parseQuantity(o.infoBufferSize) !== 0) {
      add(
        `logging.options.${format}.infoBufferSize`,
        o.infoBufferSize,
        "log lines are written unbuffered",
      );
    }
  }
  if ((cfg.showHiddenMetricsForVersion ?? "") !== "") {
    add(
      "showHiddenMetricsForVersion",
      cfg.showHiddenMetricsForVersion,
      "the metrics registry keeps no hidden metrics to show again",
    );
  }
  if (cfg.contentType !== "application/json") {
    // The default here; upstream's is protobuf, which needs each API type's protobuf codec.
    add(
      "contentType",
      cfg.contentType,
      "requests and answers are application/json; remove the setting or set application/json",
    );
  }
  out.push(...unsupportedFeatureGates(cfg.featureGates));
  return out;
}
