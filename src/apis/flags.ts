/**
 * @module
 * The kubelet's command line: `KubeletFlags` (per-node settings that are not part of the
 * shared KubeletConfiguration) and the deprecated flags that still set configuration fields,
 * with upstream's names, defaults and value syntax (pflag's booleans, pflag's `--flag=value`
 * and `--flag value`, cliflag's `k=v` and `k<v` maps, taints, IPs). Parsed with `node:util`
 * parseArgs. Corresponds to upstream `cmd/kubelet/app/options/options.go`,
 * `container_runtime.go` and component-base's logging flags.
 */

import { parseArgs } from "node:util";
import { isIP } from "node:net";
import { type AnyField, decodeScalar, type FlagFormat, listFields } from "./config_schema.ts";
import { DurationSyntaxError, parseDuration } from "../util/duration.ts";
import type { KubeletConfiguration } from "./config_types.ts";

/**
 * The kubelet's whole start-up input: the per-node flags and the configuration (upstream
 * `options.KubeletServer`).
 */
export interface KubeletServer {
  readonly flags: KubeletFlags;
  readonly config: KubeletConfiguration;
}

/** Settings that belong to one node and never come from the shared configuration file. */
export interface KubeletFlags {
  /** --config: the KubeletConfiguration file; empty means built-in (legacy) defaults. */
  kubeletConfigFile: string;
  /** --config-dir: drop-in directory whose `*.conf` files are merged in lexical order. */
  kubeletDropinConfigDirectory: string;
  /** --kubeconfig: how to reach the apiserver; empty means standalone mode. */
  kubeConfig: string;
  /** --bootstrap-kubeconfig */
  bootstrapKubeconfig: string;
  /** --hostname-override */
  hostnameOverride: string;
  /** --node-ip: one IP or a comma-separated dual-stack pair. */
  nodeIP: string;
  /** --cert-dir @default "/var/lib/kubelet/pki" */
  certDirectory: string;
  /** --cloud-provider: only "" and "external" are supported. */
  cloudProvider: string;
  /** --root-dir @default "/var/lib/kubelet" */
  rootDirectory: string;
  /** --node-labels */
  nodeLabels: Record<string, string>;
  /** --lock-file */
  lockFilePath: string;
  /** --exit-on-lock-contention */
  exitOnLockContention: boolean;
  /** --seccomp-default (deprecated flag for the config field seccompDefault; kept as upstream). */
  seccompDefault: boolean;
  /** --runonce: run the static pods, report, exit. */
  runOnce: boolean;
  /** --pod-infra-container-image: deprecated; the runtime chooses the sandbox image. */
  podInfraContainerImage: string;
  /** --image-credential-provider-config */
  imageCredentialProviderConfigFile: string;
  /** --image-credential-provider-bin-dir */
  imageCredentialProviderBinDir: string;
  /** --minimum-container-ttl-duration (deprecated), milliseconds. @default 0 */
  minimumGCAge: number;
  /** --maximum-dead-containers-per-container (deprecated) @default 1 */
  maxPerPodContainerCount: number;
  /** --maximum-dead-containers (deprecated) @default -1 */
  maxContainerCount: number;
  /** --register-schedulable (deprecated) @default true */
  registerSchedulable: boolean;
  /** --experimental-allocatable-ignore-eviction (deprecated) @default false */
  experimentalNodeAllocatableIgnoreEvictionThreshold: boolean;
  /** --experimental-mounter-path (deprecated) */
  experimentalMounterPath: string;
  /** --housekeeping-interval (cAdvisor's): between statistics samples, in ms. @default 10000 */
  housekeepingInterval: number;
  /**
   * --max-parallel-sandbox-starts (this agent's own): RunPodSandbox calls in flight at once;
   * 0 = no limit (upstream's behaviour). @default undefined: 4 × the node's CPUs
   */
  maxParallelSandboxStarts?: number;
}

/** The defaults of upstream's NewKubeletFlags. */
export function newKubeletFlags(): KubeletFlags {
  return {
    kubeletConfigFile: "",
    kubeletDropinConfigDirectory: "",
    kubeConfig: "",
    bootstrapKubeconfig: "",
    hostnameOverride: "",
    nodeIP: "",
    certDirectory: "/var/lib/kubelet/pki",
    cloudProvider: "",
    rootDirectory: "/var/lib/kubelet",
    nodeLabels: {},
    lockFilePath: "",
    exitOnLockContention: false,
    seccompDefault: false,
    runOnce: false,
    podInfraContainerImage: "",
    imageCredentialProviderConfigFile: "",
    imageCredentialProviderBinDir: "",
    minimumGCAge: 0,
    maxPerPodContainerCount: 1,
    maxContainerCount: -1,
    registerSchedulable: true,
    experimentalNodeAllocatableIgnoreEvictionThreshold: false,
    experimentalMounterPath: "",
    housekeepingInterval: 10_000,
  };
}

type FlagKind = "string" | "bool" | "int" | "duration" | "map" | "version";

interface OwnFlag {
  readonly key: keyof KubeletFlags | "help" | "version" | "check" | "leastPrivilege";
  readonly kind: FlagKind;
  readonly usage: string;
  readonly deprecated?: string;
  readonly short?: string;
  /** For an int flag: what is wrong with a value it refuses, undefined when it takes it. */
  readonly check?: (value: number) => string | undefined;
}

const DEPRECATED_GC =
  "Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.";

/** Flags of KubeletFlags and the global ones, by upstream name. */
const OWN_FLAGS: Readonly<Record<string, OwnFlag>> = {
  "config": {
    key: "kubeletConfigFile",
    kind: "string",
    usage:
      "The Kubelet will load its initial configuration from this file. Omit this flag to use the built-in default configuration values. Command-line flags override configuration from this file.",
  },
  "config-dir": {
    key: "kubeletDropinConfigDirectory",
    kind: "string",
    usage:
      "Path to a directory of drop-in configuration files (*.conf) merged, in lexical order, over --config.",
  },
  "kubeconfig": {
    key: "kubeConfig",
    kind: "string",
    usage:
      "Path to a kubeconfig file, specifying how to connect to the API server. Providing --kubeconfig enables API server mode, omitting --kubeconfig enables standalone mode.",
  },
  "bootstrap-kubeconfig": {
    key: "bootstrapKubeconfig",
    kind: "string",
    usage:
      "Path to a kubeconfig file used to get a client certificate for the kubelet when --kubeconfig does not exist.",
  },
  "hostname-override": {
    key: "hostnameOverride",
    kind: "string",
    usage: "If non-empty, will use this string as identification instead of the actual hostname.",
  },
  "node-ip": {
    key: "nodeIP",
    kind: "string",
    usage: "IP address (or comma-separated dual-stack IP addresses) of the node.",
  },
  "cert-dir": {
    key: "certDirectory",
    kind: "string",
    usage: "The directory where the TLS certs are located.",
  },
  "cloud-provider": {
    key: "cloudProvider",
    kind: "string",
    usage: "The provider for cloud services: empty for none, or 'external'.",
  },
  "root-dir": {
    key: "rootDirectory",
    kind: "string",
    usage: "Directory path for managing kubelet files (volume mounts, etc).",
  },
  "seccomp-default": {
    key: "seccompDefault",
    kind: "bool",
    usage: "Enable the use of `RuntimeDefault` as the default seccomp profile for all workloads.",
  },
  "node-labels": {
    key: "nodeLabels",
    kind: "map",
    usage:
      "Labels to add when registering the node in the cluster. Labels must be key=value pairs separated by ','.",
  },
  "lock-file": {
    key: "lockFilePath",
    kind: "string",
    usage: "<Warning: Alpha feature> The path to file for kubelet to use as a lock file.",
  },
  "exit-on-lock-contention": {
    key: "exitOnLockContention",
    kind: "bool",
    usage: "Whether kubelet should exit upon lock-file contention.",
  },
  "runonce": {
    key: "runOnce",
    kind: "bool",
    usage:
      "If true, exit after spawning pods from static pod files or remote urls. Exclusive with --enable-server.",
  },
  "pod-infra-container-image": {
    key: "podInfraContainerImage",
    kind: "string",
    usage:
      "Specified image will not be pruned by the image garbage collector. CRI implementations have their own configuration to set this image.",
    deprecated:
      "will be removed in a future release. Image garbage collector will get sandbox image information from CRI.",
  },
  "image-credential-provider-config": {
    key: "imageCredentialProviderConfigFile",
    kind: "string",
    usage: "The path to the credential provider plugin config file.",
  },
  "image-credential-provider-bin-dir": {
    key: "imageCredentialProviderBinDir",
    kind: "string",
    usage: "The path to the directory where credential provider plugin binaries are located.",
  },
  "housekeeping-interval": {
    key: "housekeepingInterval",
    kind: "duration",
    usage: "Interval between container housekeepings",
  },
  "minimum-container-ttl-duration": {
    key: "minimumGCAge",
    kind: "duration",
    usage: "Minimum age for a finished container before it is garbage collected.",
    deprecated: DEPRECATED_GC,
  },
  "maximum-dead-containers-per-container": {
    key: "maxPerPodContainerCount",
    kind: "int",
    usage: "Maximum number of old instances to retain per container.",
    deprecated: DEPRECATED_GC,
  },
  "maximum-dead-containers": {
    key: "maxContainerCount",
    kind: "int",
    usage:
      "Maximum number of old instances of containers to retain globally. To disable, set to a negative number.",
    deprecated: DEPRECATED_GC,
  },
  "register-schedulable": {
    key: "registerSchedulable",
    kind: "bool",
    usage: "Register the node as schedulable.",
    deprecated: "will be removed in a future version",
  },
  "experimental-allocatable-ignore-eviction": {
    key: "experimentalNodeAllocatableIgnoreEvictionThreshold",
    kind: "bool",
    usage:
      "When set to 'true', hard eviction thresholds are ignored while calculating node allocatable.",
    deprecated: "will be removed in 1.25 or later.",
  },
  "experimental-mounter-path": {
    key: "experimentalMounterPath",
    kind: "string",
    usage: "Path of mounter binary.",
    deprecated: "will be removed in 1.25 or later. in favor of using CSI.",
  },
  "help": { key: "help", kind: "bool", short: "h", usage: "help for kubelet" },
  // Not upstream's: the preflight check (preflight/preflight.ts).
  "check": {
    key: "check",
    kind: "bool",
    usage:
      "Check the node for everything that would stop the kubelet (runtime, cgroups, swap, kernel settings, certificates, apiserver, permissions), report each problem with what to do, and exit (non-zero if there are problems)",
  },
  // Not upstream's: pace RunPodSandbox (kuberuntime/kuberuntime_manager.ts).
  "max-parallel-sandbox-starts": {
    key: "maxParallelSandboxStarts",
    kind: "int",
    check: (n) => n < 0 ? "must be 0 (no limit) or more" : undefined,
    usage:
      "The most RunPodSandbox calls in flight at once; the other pods wait their turn. The runtime creates sandboxes faster in total when they do not all contend for the CPUs at once (the upstream kubelet starts them all together). 0 means no limit. Default: 4 × the node's CPUs",
  },
  // Not upstream's: run the agent inside its own Deno permission set (privilege/permission_set.ts).
  "least-privilege": {
    key: "leastPrivilege",
    kind: "bool",
    usage:
      "Run inside a permission set computed from the configuration (its paths, a read-only view of /proc and /sys, the cgroup tree, mount and umount): reading or writing elsewhere or running other programs is refused. On by default when the process has every permission and runs as root; --least-privilege=false runs the kubelet with all of the process's permissions",
  },
  "version": {
    key: "version",
    kind: "version",
    usage:
      "--version, --version=raw prints version information and quits; --version=vX.Y.Z... sets the reported version",
  },
};

/** Flags that set `logging` fields (component-base logsapi.AddFlags), with their syntax. */
const LOGGING_FLAGS: Readonly<
  Record<
    string,
    {
      path: readonly string[];
      short?: string;
      kind: "string" | "uint" | "duration" | "bool" | "vmodule" | "quantity";
      usage: string;
    }
  >
> = {
  "v": {
    path: ["logging", "verbosity"],
    short: "v",
    kind: "uint",
    usage: "number for the log level verbosity",
  },
  "vmodule": {
    path: ["logging", "vmodule"],
    kind: "vmodule",
    usage:
      "comma-separated list of pattern=N settings for file-filtered logging (only works for text log format)",
  },
  "logging-format": {
    path: ["logging", "format"],
    kind: "string",
    usage: 'Sets the log format. Permitted formats: "json", "text".',
  },
  "log-flush-frequency": {
    path: ["logging", "flushFrequency"],
    kind: "duration",
    usage: "Maximum number of seconds between log flushes",
  },
  "log-json-split-stream": {
    path: ["logging", "options", "json", "splitStream"],
    kind: "bool",
    usage: "[Alpha] In JSON format, write error messages to stderr and info messages to stdout.",
  },
  "log-json-info-buffer-size": {
    path: ["logging", "options", "json", "infoBufferSize"],
    kind: "quantity",
    usage:
      "[Alpha] In JSON format with split output streams, the info messages can be buffered for a while to increase performance.",
  },
  "log-text-split-stream": {
    path: ["logging", "options", "text", "splitStream"],
    kind: "bool",
    usage: "[Alpha] In text format, write error messages to stderr and info messages to stdout.",
  },
  "log-text-info-buffer-size": {
    path: ["logging", "options", "text", "infoBufferSize"],
    kind: "quantity",
    usage:
      "[Alpha] In text format with split output streams, the info messages can be buffered for a while to increase performance.",
  },
};

const CONFIG_FLAG_DEPRECATION =
  "This parameter should be set via the config file specified by the Kubelet's --config flag. See https://kubernetes.io/docs/tasks/administer-cluster/kubelet-config-file/ for more information.";

/** A command line that cannot be used; `message` is upstream's wording where it has one. */
export class FlagError extends Error {
  override name = "FlagError";
}

/** One configuration field set on the command line, already decoded to its typed value. */
export interface ConfigFlagValue {
  readonly flag: string;
  readonly path: readonly string[];
  readonly value: unknown;
}

/** The result of parsing the command line. */
export interface CommandLine {
  readonly flags: KubeletFlags;
  /** Configuration fields set by flags, in command-line order; applied over the file. */
  readonly config: readonly ConfigFlagValue[];
  readonly help: boolean;
  /** `--check`: run the preflight check and exit. */
  readonly check: boolean;
  /**
   * `--least-privilege`: run the agent in its sandbox (privilege/permission_set.ts); undefined when not given,
   * which sandboxes whenever the launcher can (privilege/launcher.ts).
   */
  readonly leastPrivilege: boolean | undefined;
  /** undefined, "true" or "raw" (upstream's --version values). */
  readonly version?: string;
  /** Deprecation warnings to log once logging is set up. */
  readonly warnings: readonly string[];
}

interface ConfigFlag {
  readonly path: readonly string[];
  readonly field: AnyField;
}

/** Lists the configuration fields that upstream binds to flags, by flag name. */
export function configFlags(fields: Readonly<Record<string, AnyField>>): Map<string, ConfigFlag> {
  const out = new Map<string, ConfigFlag>();
  for (const { path, field } of listFields(fields)) {
    const flag = field.options.flag;
    if (!flag || flag in OWN_FLAGS || flag in LOGGING_FLAGS || path.includes("[]")) continue;
    out.set(flag, { path: path.split("."), field });
  }
  return out;
}

/**
 * Every flag the command line takes: those that set a configuration field name its dotted
 * path (`field`); the others are KubeletFlags or global flags (--help, --version, ...).
 */
export function kubeletFlagList(
  fields: Readonly<Record<string, AnyField>>,
): { readonly name: string; readonly field?: string }[] {
  return [
    ...Object.keys(OWN_FLAGS).map((name) => ({ name })),
    ...Object.entries(LOGGING_FLAGS).map(([name, f]) => ({ name, field: f.path.join(".") })),
    ...[...configFlags(fields)].map(([name, f]) => ({ name, field: f.path.join(".") })),
  ];
}

const TRUE = new Set(["1", "t", "T", "TRUE", "true", "True"]);
const FALSE = new Set(["0", "f", "F", "FALSE", "false", "False"]);

/** Go's strconv.ParseBool. */
export function parseBool(text: string): boolean {
  if (TRUE.has(text)) return true;
  if (FALSE.has(text)) return false;
  throw new Error(`strconv.ParseBool: parsing "${text}": invalid syntax`);
}

function parseGoInt(text: string): number {
  const t = text.replaceAll("_", "");
  if (!/^[+-]?(0[xX][0-9a-fA-F]+|0[oO]?[0-7]+|0[bB][01]+|[0-9]+)$/.test(t)) {
    throw new Error(`strconv.ParseInt: parsing "${text}": invalid syntax`);
  }
  const neg = t.startsWith("-");
  const body = t.replace(/^[+-]/, "");
  const n = /^0[0-7]+$/.test(body) ? parseInt(body, 8) : Number(body.replace(/^0[oO]/, "0o"));
  return neg ? -n : n;
}

function splitPairs(text: string, sep: string, flag: string): [string, string][] {
  const out: [string, string][] = [];
  for (const part of text.split(",")) {
    const item = part.trim();
    if (item === "") continue;
    const at = item.indexOf(sep);
    if (at < 0) throw new Error(`malformed pair, expect string${sep}string`);
    out.push([item.slice(0, at).trim(), item.slice(at + 1).trim()]);
  }
  if (out.length === 0 && text.trim() !== "") throw new Error(`no pairs in --${flag}`);
  return out;
}

function parseTaints(text: string): { key: string; value?: string; effect: string }[] {
  return text.split(",").filter((s) => s.trim() !== "").map((spec) => {
    const m = /^([^=:]+)(?:=([^:]*))?:([A-Za-z]+)$/.exec(spec.trim());
    if (!m || m[1] === undefined || m[3] === undefined) {
      throw new Error(
        `invalid taint spec: ${spec}, expected <key>=<value>:<effect> or <key>:<effect>`,
      );
    }
    if (!["NoSchedule", "PreferNoSchedule", "NoExecute"].includes(m[3])) {
      throw new Error(`invalid taint effect: ${m[3]}, unsupported taint effect`);
    }
    return m[2] === undefined
      ? { key: m[1], effect: m[3] }
      : { key: m[1], value: m[2], effect: m[3] };
  });
}

function parseReservedMemory(text: string): { numaNode: number; limits: Record<string, string> }[] {
  const out: { numaNode: number; limits: Record<string, string> }[] = [];
  for (const part of text.split(";")) {
    const at = part.indexOf(":");
    if (at < 0) {
      throw new Error(
        "the reserved memory has incorrect format, expected numaNodeID:type=quantity[,type=quantity...]",
      );
    }
    const numaNode = parseGoInt(part.slice(0, at).trim());
    const limits: Record<string, string> = {};
    for (const [k, v] of splitPairs(part.slice(at + 1), "=", "reserved-memory")) {
      decodeScalar(QUANTITY_FIELD, v);
      limits[k] = v;
    }
    out.push({ numaNode, limits });
  }
  return out;
}

const QUANTITY_FIELD = {
  spec: { type: "quantity" },
  options: { go: "resource.Quantity", doc: "" },
} as unknown as AnyField;

/** Turns one flag's text into the field's typed value, merging with earlier uses of the flag. */
function flagValue(
  field: AnyField,
  format: FlagFormat | undefined,
  text: string,
  previous: unknown,
): unknown {
  const spec = field.spec;
  switch (spec.type) {
    case "bool":
      return parseBool(text);
    case "int":
      return decodeScalar(field, parseGoInt(text));
    case "float": {
      const n = Number(text);
      if (text.trim() === "" || !Number.isFinite(n)) {
        throw new Error(`strconv.ParseFloat: parsing "${text}": invalid syntax`);
      }
      return n;
    }
    case "duration":
      return parseDuration(text);
    case "string":
      if (format === "ip" && text !== "" && isIP(text) === 0) {
        throw new Error(`"${text}" is not a valid IP address`);
      }
      return decodeScalar(field, text);
    case "quantity":
      return decodeScalar(field, text);
    case "list": {
      const prev = Array.isArray(previous) ? previous : [];
      if (format === "taints") return [...prev, ...parseTaints(text)];
      if (format === "reserved-memory") return [...prev, ...parseReservedMemory(text)];
      const items = text === "" ? [] : text.split(",").map((s) => s.trim());
      return [...prev, ...items.map((s) => decodeScalar(spec.of, s))];
    }
    case "map": {
      const out: Record<string, unknown> = previous && typeof previous === "object"
        ? { ...previous as Record<string, unknown> }
        : {};
      if (format === "map-slice") {
        for (const [k, v] of splitPairs(text, ":", "flag")) {
          const list = (out[k] as string[] | undefined) ?? [];
          out[k] = [...list, v];
        }
        return out;
      }
      const pairs: [string, string][] = format === "map-nosplit"
        ? (() => {
          const at = text.indexOf("=");
          if (at < 0) throw new Error("malformed pair, expect string=string");
          return [[text.slice(0, at).trim(), text.slice(at + 1).trim()]];
        })()
        : splitPairs(text, format === "langle-map" ? "<" : "=", "flag");
      for (const [k, v] of pairs) {
        out[k] = spec.of.spec.type === "bool" ? parseBool(v) : decodeScalar(spec.of, v);
      }
      return out;
    }
    default:
      throw new Error(`flags of type ${field.options.go} are not supported`);
  }
}

function isBoolFlag(name: string, cfg: Map<string, ConfigFlag>): boolean {
  const own = OWN_FLAGS[name];
  if (own) return own.kind === "bool" || own.kind === "version";
  const log = LOGGING_FLAGS[name];
  if (log) return log.kind === "bool";
  return cfg.get(name)?.field.spec.type === "bool";
}

/**
 * Parses the kubelet's command line. Throws {@link FlagError} with upstream's wording for an
 * unknown flag, a positional argument or a value of the wrong syntax.
 */
export function parseCommandLine(
  argv: readonly string[],
  fields: Readonly<Record<string, AnyField>>,
): CommandLine {
  const cfg = configFlags(fields);
  const names = new Set([...Object.keys(OWN_FLAGS), ...Object.keys(LOGGING_FLAGS), ...cfg.keys()]);
  // pflag lets booleans stand alone or take `=value`; parseArgs wants one form, so give every
  // flag a value: a bare boolean becomes `--name=true`.
  const args: string[] = [];
  let rest = false;
  for (const arg of argv) {
    if (rest || arg === "--") {
      rest = true;
      args.push(arg);
      continue;
    }
    const m = /^--?([^=]+)$/.exec(arg);
    const name = m?.[1] === "h" ? "help" : m?.[1];
    if (name !== undefined && (arg.startsWith("--") || name === "help") && isBoolFlag(name, cfg)) {
      args.push(`--${name}=true`);
    } else if (arg.startsWith("-v=")) {
      args.push(`--v=${arg.slice(3)}`);
    } else {
      args.push(arg);
    }
  }
  const options: Record<string, { type: "string"; multiple: true; short?: string }> = {};
  for (const name of names) {
    options[name] = { type: "string", multiple: true };
    const short = OWN_FLAGS[name]?.short ?? LOGGING_FLAGS[name]?.short;
    if (short) options[name].short = short;
  }
  let parsed: ReturnType<
    typeof parseArgs<
      { options: typeof options; allowPositionals: true; tokens: true; strict: true }
    >
  >;
  try {
    parsed = parseArgs({ args, options, allowPositionals: true, tokens: true, strict: true });
  } catch (e) {
    const text = e instanceof Error ? e.message : String(e);
    const unknown = /Unknown option '(-{1,2}[^']+)'/.exec(text);
    if (unknown) throw new FlagError(`unknown flag: ${unknown[1]}`);
    throw new FlagError(text.replace(/\. To specify.*$/s, ""));
  }
  if (parsed.positionals.length > 0) {
    throw new FlagError(`unknown command "${parsed.positionals[0]}" for "kubelet"`);
  }

  const flags = newKubeletFlags();
  const config: ConfigFlagValue[] = [];
  const warnings: string[] = [];
  const configValues = new Map<string, unknown>();
  let help = false;
  let check = false;
  let leastPrivilege: boolean | undefined;
  let version: string | undefined;
  for (const token of parsed.tokens) {
    if (token.kind !== "option") continue;
    const name = token.name;
    const text = token.value ?? "";
    const bad = (problem: string): never => {
      throw new FlagError(`invalid argument "${text}" for "--${name}" flag: ${problem}`);
    };
    try {
      const own = OWN_FLAGS[name];
      if (own) {
        if (own.deprecated) warnings.push(`Flag --${name} has been deprecated, ${own.deprecated}`);
        if (own.key === "help") help = parseBool(text);
        else if (own.key === "check") check = parseBool(text);
        else if (own.key === "leastPrivilege") leastPrivilege = parseBool(text);
        else if (own.key === "version") version = text;
        else setOwn(flags, own, text);
        continue;
      }
      const log = LOGGING_FLAGS[name];
      if (log) {
        config.push({ flag: name, path: log.path, value: loggingValue(log.kind, text) });
        continue;
      }
      const c = cfg.get(name);
      if (!c) continue;
      warnings.push(`Flag --${name} has been deprecated, ${CONFIG_FLAG_DEPRECATION}`);
      const value = flagValue(c.field, c.field.options.flagFormat, text, configValues.get(name));
      configValues.set(name, value);
      config.push({ flag: name, path: c.path, value });
    } catch (e) {
      if (e instanceof FlagError) throw e;
      if (e instanceof DurationSyntaxError) bad(`time: invalid duration "${text}"`);
      bad(
        e instanceof Error
          ? e.message.replace(/^must be /, "must be ").replace(/: current value is .*$/, "")
          : String(e),
      );
    }
  }
  return { flags, config, help, check, leastPrivilege, version, warnings };
}

function setOwn(flags: KubeletFlags, own: OwnFlag, text: string): void {
  const target = flags as unknown as Record<string, unknown>;
  switch (own.kind) {
    case "string":
      target[own.key] = text;
      return;
    case "bool":
      target[own.key] = parseBool(text);
      return;
    case "int": {
      const n = parseGoInt(text);
      const problem = own.check?.(n);
      if (problem !== undefined) throw new Error(problem);
      target[own.key] = n;
      return;
    }
    case "duration":
      target[own.key] = parseDuration(text);
      return;
    case "map": {
      const map = target[own.key] as Record<string, string>;
      for (const [k, v] of splitPairs(text, "=", own.key)) map[k] = v;
      return;
    }
  }
}

function loggingValue(kind: string, text: string): unknown {
  switch (kind) {
    case "uint": {
      const n = parseGoInt(text);
      if (n < 0 || n > 2 ** 32 - 1) {
        throw new Error(`strconv.ParseUint: parsing "${text}": value out of range`);
      }
      return n;
    }
    case "bool":
      return parseBool(text);
    case "duration":
      return parseDuration(text);
    case "vmodule":
      return text.split(",").filter((s) => s !== "").map((pair) => {
        const at = pair.lastIndexOf("=");
        const verbosity = at < 0 ? NaN : parseGoInt(pair.slice(at + 1));
        if (at <= 0 || !(verbosity >= 0)) {
          throw new Error(`"${pair}" does not have the pattern=N format`);
        }
        return { filePattern: pair.slice(0, at), verbosity };
      });
    case "quantity":
      return decodeScalar(QUANTITY_FIELD, text);
    default:
      if (kind === "string" && text !== "text" && text !== "json") {
        throw new Error(
          `format ${JSON.stringify(text)} is not supported; permitted formats: "json", "text"`,
        );
      }
      return text;
  }
}

/** The help text, in pflag's layout: one flag a line, deprecated flags marked. */
export function usage(fields: Readonly<Record<string, AnyField>>): string {
  const rows: [string, string][] = [];
  for (const [name, f] of Object.entries(OWN_FLAGS)) {
    rows.push([
      `${f.short ? `-${f.short}, ` : "    "}--${name}${
        f.kind === "bool" || f.kind === "version" ? "" : ` ${f.kind}`
      }`,
      f.usage + (f.deprecated ? ` (DEPRECATED: ${f.deprecated})` : ""),
    ]);
  }
  for (const [name, f] of Object.entries(LOGGING_FLAGS)) {
    rows.push([
      `${f.short ? `-${f.short}, ` : "    "}--${name}${
        f.kind === "bool" ? "" : ` ${f.kind === "uint" ? "Level" : f.kind}`
      }`,
      f.usage,
    ]);
  }
  for (const [name, c] of configFlags(fields)) {
    const kind = c.field.spec.type === "bool"
      ? ""
      : ` ${c.field.options.go.replace("*", "").replace("metav1.", "")}`;
    rows.push([
      `    --${name}${kind}`,
      `${c.field.options.doc} (DEPRECATED: ${CONFIG_FLAG_DEPRECATION})`,
    ]);
  }
  rows.sort((a, b) => a[0].replace(/^-., /, "    ").localeCompare(b[0].replace(/^-., /, "    ")));
  const width = Math.max(...rows.map(([l]) => l.length)) + 3;
  return [
    'The kubelet is the primary "node agent" that runs on each node.',
    "",
    "Usage:",
    "  kubelet [flags]",
    "",
    "Flags:",
    ...rows.map(([l, r]) => `  ${l.padEnd(width)}${r}`),
    "",
  ].join("\n");
}
