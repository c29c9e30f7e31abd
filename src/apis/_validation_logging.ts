/**
 * @module
 * Validation rules for what the kubelet reports about itself: component-base logging (format,
 * verbosity, vmodule and the gated format options), tracing (sampling rate and a Go-parseable
 * endpoint with a supported scheme), `showHiddenMetricsForVersion`, and where and how container
 * logs are kept (rotation settings and a normalized, absolute, ASCII `podLogsDir`). Private to
 * validation.ts.
 */

import { formatDuration } from "../util/duration.ts";
import type { KubeletConfiguration } from "./config_types.ts";
import { parseQuantity } from "../util/quantity.ts";
import { minorOf } from "./_validation_feature_gates.ts";

/** Reports one issue, as validateKubeletConfiguration collects them. */
type Add = (path: string, value: unknown, message: string) => void;

const MAX_INT32 = 2 ** 31 - 1;

/** showHiddenMetricsForVersion: empty, or the minor release before this one. */
export function checkShowHiddenMetrics(target: string, kubernetesVersion: string, add: Add) {
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
export function checkLogging(
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
export function checkTracing(tracing: KubeletConfiguration["tracing"], add: Add) {
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

/** Container log rotation (workers, monitor interval, file count) and the pod logs directory. */
export function checkContainerLogs(cfg: KubeletConfiguration, add: Add) {
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
