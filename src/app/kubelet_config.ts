/**
 * @module
 * Builds the effective KubeletConfiguration the way upstream's `NewKubeletCommand` does:
 * built-in defaults (with the legacy command-line defaults when no file is given), then the
 * `--config` file, then `--config-dir` drop-ins (`*.conf`, lexical order, JSON merge patch),
 * then the command-line flags, then validation, then the settings this kubelet cannot honour yet
 * (unsupported_settings.ts). Every error names the file, the line where it is known, the field
 * path and the bad value.
 *
 * Decoding is upstream's (`pkg/kubelet/kubeletconfig/util/codec` DecodeKubeletConfiguration):
 * the `--config` file is decoded strictly and, when only strictness fails (an unknown field, a
 * key given twice), again leniently: unknown fields are dropped, the last of duplicate keys wins,
 * and the problems go to the caller's `onLenientDecoding` to log ("Using lenient decoding as
 * strict decoding failed"). A drop-in is decoded into a map and merged as JSON: its unknown
 * fields are dropped as upstream drops them (silently there), and a key given twice refuses it.
 * Corresponds to upstream `cmd/kubelet/app/server.go` (loadConfigFile, mergeKubeletConfigurations,
 * kubeletConfigFlagPrecedence) and `pkg/kubelet/kubeletconfig/configfiles`.
 */

import { isAbsolute, join, resolve } from "node:path";
import { type Document, LineCounter, parseDocument } from "yaml";
import { hostIsCgroup2UnifiedMode } from "../cm/cgroup_mode.ts";
import {
  type AnyField,
  applyDefaults,
  ConfigError,
  decode,
  type Field,
  type Source,
  StrictDecodingError,
} from "../apis/config_schema.ts";
import type { ConfigFlagValue } from "../apis/flags.ts";
import {
  applyDependentDefaults,
  KUBELET_CONFIG_API_VERSION,
  KUBELET_CONFIG_KIND,
  type KubeletConfiguration,
  kubeletConfigurationFields,
} from "../apis/config_types.ts";
import { validateKubeletConfiguration } from "../apis/validation.ts";
import { unsupportedSettings } from "./unsupported_settings.ts";

/** The root of the configuration schema, as one object field. */
const ROOT: AnyField = {
  spec: { type: "object", fields: kubeletConfigurationFields },
  options: { go: "KubeletConfiguration", doc: "" },
} as unknown as Field<unknown, true>;

/** One file read as configuration: its decoded fields and where each came from. */
interface LoadedFile {
  readonly file: string;
  readonly doc: Document;
  readonly lines: LineCounter;
  /** Decoded, not defaulted; apiVersion and kind removed. */
  readonly values: Record<string, unknown>;
  /** What strict decoding found and lenient decoding went past (see the module notes). */
  readonly strictErrors: readonly StrictDecodingError[];
  /** A --config-dir drop-in. */
  readonly dropin: boolean;
}

/** What {@link loadKubeletConfiguration} needs. */
export interface LoadOptions {
  /** --config; empty for none. */
  readonly configFile: string;
  /** --config-dir; empty for none. */
  readonly dropinDir: string;
  /** Configuration fields set on the command line, in order. */
  readonly flags: readonly ConfigFlagValue[];
  /** Whether the host runs cgroup v1, for `failCgroupV1`. @default read from the host */
  readonly cgroupV1?: boolean;
  /**
   * Told of each file decoded leniently, as soon as it is read (before validation, which may
   * still refuse the configuration), as upstream logs it while decoding. @default none
   */
  readonly onLenientDecoding?: (d: LenientDecoding) => void;
}

async function readText(file: string, what: string): Promise<string> {
  try {
    return await Deno.readTextFile(file);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) {
      throw new ConfigError(file, undefined, "", `cannot read ${what}: no such file`);
    }
    if (e instanceof Deno.errors.IsADirectory) {
      throw new ConfigError(file, undefined, "", `cannot read ${what}: it is a directory`);
    }
    if (e instanceof Deno.errors.NotCapable || e instanceof Deno.errors.PermissionDenied) {
      throw new ConfigError(file, undefined, "", `cannot read ${what}: ${e.message}`);
    }
    throw new ConfigError(
      file,
      undefined,
      "",
      `cannot read ${what}: ${e instanceof Error ? e.message : String(e)}`,
    );
  }
}

/**
 * Reads and decodes one KubeletConfiguration file (YAML or JSON): strictly, apart from what
 * lenient decoding goes past (returned in `strictErrors`); a drop-in (`dropin`) is refused for a
 * key given twice, as upstream refuses it.
 */
export async function loadConfigFile(
  file: string,
  what = "kubelet config file",
  dropin = false,
): Promise<LoadedFile> {
  const text = await readText(file, what);
  const lines = new LineCounter();
  // go-yaml v2 (behind sigs.k8s.io/yaml) reads YAML 1.1: yes/no/on/off are booleans there too.
  // Keys given twice are the decoder's to find (uniqueKeys off): lenient decoding goes past them.
  const doc = parseDocument(text, {
    version: "1.1",
    lineCounter: lines,
    uniqueKeys: false,
    prettyErrors: false,
  });
  const problem = doc.errors[0];
  if (problem) {
    const line = problem.linePos?.[0]?.line;
    throw new ConfigError(
      file,
      line,
      "",
      `is not valid YAML or JSON: ${problem.message.split("\n")[0]}`,
    );
  }
  const strictErrors: StrictDecodingError[] = [];
  const src: Source = { file, lines, strictErrors };
  const contents = doc.contents;
  if (contents === null) {
    throw new ConfigError(
      file,
      undefined,
      "apiVersion",
      `is missing: expected '${KUBELET_CONFIG_API_VERSION}' (the file is empty)`,
    );
  }
  checkTypeMeta(doc, src);
  // apiVersion and kind are TypeMeta, not fields of the table: drop them before decoding.
  const copy = doc.clone();
  for (const key of ["apiVersion", "kind"]) {
    for (let n = 0; copy.has(key); n++) {
      const node = copy.get(key, true) as { range?: [number, number, number] } | undefined;
      copy.delete(key);
      if (n === 1) {
        const line = node?.range ? lines.linePos(node.range[0]).line : undefined;
        strictErrors.push(new StrictDecodingError(file, line, key, "duplicate key"));
      }
    }
  }
  const values = decode(ROOT, copy.contents, "", src) as Record<string, unknown> | undefined;
  const twice = strictErrors.find((e) => e.kind === "duplicate key");
  if (dropin && twice) throw twice;
  resolveRelativePaths(values ?? {}, file);
  return { file, doc, lines, values: values ?? {}, strictErrors, dropin };
}

function checkTypeMeta(doc: Document, src: Source): void {
  const check = (key: string, want: string) => {
    const node = doc.get(key, true) as
      | { value?: unknown; range?: [number, number, number] }
      | undefined;
    const line = node?.range ? src.lines?.linePos(node.range[0]).line : undefined;
    if (
      node === undefined || node.value === undefined || node.value === null || node.value === ""
    ) {
      throw new ConfigError(src.file, undefined, key, `is missing: expected '${want}'`);
    }
    if (node.value !== want) {
      throw new ConfigError(
        src.file,
        line,
        key,
        `must be '${want}': current value is '${String(node.value)}'`,
      );
    }
  };
  if (!doc.contents || !("items" in doc.contents)) {
    throw new ConfigError(src.file, undefined, "", "must be a KubeletConfiguration object");
  }
  check("apiVersion", KUBELET_CONFIG_API_VERSION);
  check("kind", KUBELET_CONFIG_KIND);
}

/** Fields that hold paths; relative ones are resolved against the file's directory, as upstream. */
const PATH_FIELDS: readonly (readonly string[])[] = [
  ["staticPodPath"],
  ["authentication", "x509", "clientCAFile"],
  ["tlsCertFile"],
  ["tlsPrivateKeyFile"],
  ["resolvConf"],
];

function resolveRelativePaths(values: Record<string, unknown>, file: string): void {
  const dir = resolve(file, "..");
  for (const path of PATH_FIELDS) {
    let obj: Record<string, unknown> | undefined = values;
    for (const key of path.slice(0, -1)) obj = obj?.[key] as Record<string, unknown> | undefined;
    const last = path[path.length - 1] as string;
    const v = obj?.[last];
    if (obj && typeof v === "string" && v !== "" && !isAbsolute(v)) obj[last] = join(dir, v);
  }
}

/** RFC 7386 JSON merge patch: objects merge recursively, null deletes, anything else replaces. */
export function mergePatch(target: unknown, patch: unknown): unknown {
  if (patch === null || typeof patch !== "object" || Array.isArray(patch)) {
    return structuredClone(patch);
  }
  const out: Record<string, unknown> =
    target !== null && typeof target === "object" && !Array.isArray(target)
      ? { ...(target as Record<string, unknown>) }
      : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

/** Lists the drop-in files of a --config-dir: `*.conf`, recursively, in lexical path order. */
export async function listDropins(dir: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (d: string) => {
    let entries: Deno.DirEntry[];
    try {
      entries = await Array.fromAsync(Deno.readDir(d));
    } catch (e) {
      throw new ConfigError(
        d,
        undefined,
        "",
        `cannot read the drop-in directory (--config-dir): ${
          e instanceof Error ? e.message : String(e)
        }`,
      );
    }
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const e of entries) {
      const p = join(d, e.name);
      if (e.isDirectory) await walk(p);
      else if (e.name.endsWith(".conf")) out.push(p);
    }
  };
  await walk(dir);
  return out;
}

/** The legacy defaults upstream applies when no config file is given (applyLegacyDefaults). */
function applyLegacyDefaults(cfg: KubeletConfiguration): void {
  cfg.authentication.anonymous.enabled = true;
  cfg.authentication.webhook.enabled = false;
  cfg.authorization.mode = "AlwaysAllow";
  cfg.readOnlyPort = 10255;
}

function setPath(target: Record<string, unknown>, path: readonly string[], value: unknown): void {
  let obj = target;
  for (const key of path.slice(0, -1)) {
    const next = obj[key];
    if (next === undefined || next === null || typeof next !== "object") obj[key] = {};
    obj = obj[key] as Record<string, unknown>;
  }
  obj[path[path.length - 1] as string] = value;
}

/** What lenient decoding went past in one file, for the caller to log and `--check` to report. */
export interface LenientDecoding {
  readonly file: string;
  /** A drop-in: upstream drops its unknown fields without a word. */
  readonly dropin: boolean;
  readonly errors: readonly StrictDecodingError[];
}

/**
 * Upstream's `err` of "Using lenient decoding as strict decoding failed": the strict decoding
 * error, each problem with its file, line and field.
 */
export function strictDecodingMessage(d: LenientDecoding): string {
  return `strict decoding error: ${d.errors.map((e) => e.message).join(", ")}`;
}

function reportLenient(f: LoadedFile, opts: LoadOptions): void {
  if (f.strictErrors.length === 0) return;
  opts.onLenientDecoding?.({ file: f.file, dropin: f.dropin, errors: f.strictErrors });
}

/** The configuration and where its values came from, for messages about them later. */
export interface LoadedConfiguration {
  readonly config: KubeletConfiguration;
  /** Names the source of a field path: "flag --x", "file:line", or "default". */
  readonly locate: (path: string) => { file: string; line?: number };
}

/**
 * Builds the effective configuration: defaults, file, drop-ins, flags; then validates it.
 * Throws {@link ConfigError} on the first problem.
 */
export async function loadKubeletConfiguration(opts: LoadOptions): Promise<LoadedConfiguration> {
  const files: LoadedFile[] = [];
  let raw: Record<string, unknown> = {};
  if (opts.configFile !== "") {
    const base = await loadConfigFile(opts.configFile);
    reportLenient(base, opts);
    files.push(base);
    raw = base.values;
  }
  if (opts.dropinDir !== "") {
    for (const file of await listDropins(opts.dropinDir)) {
      const dropin = await loadConfigFile(file, "kubelet drop-in config file", true);
      reportLenient(dropin, opts);
      files.push(dropin);
      raw = mergePatch(raw, dropin.values) as Record<string, unknown>;
    }
  }
  const config = applyDefaults(kubeletConfigurationFields, raw) as KubeletConfiguration;
  applyDependentDefaults(config, raw);
  if (opts.configFile === "" && opts.dropinDir === "") applyLegacyDefaults(config);
  else if (opts.configFile === "") applyLegacyDefaultsUnlessSet(config, raw);
  for (const f of opts.flags) {
    setPath(config as unknown as Record<string, unknown>, f.path, structuredClone(f.value));
  }

  const locate = (path: string): { file: string; line?: number } => {
    const segments = path.replace(/\[(\d+)\]/g, ".$1").split(".");
    for (const f of [...opts.flags].reverse()) {
      if (f.path.every((p, i) => segments[i] === p)) return { file: `flag --${f.flag}` };
    }
    for (const file of [...files].reverse()) {
      for (let n = segments.length; n > 0; n--) {
        const keys = segments.slice(0, n).map((s) => (/^\d+$/.test(s) ? Number(s) : s));
        const node = file.doc.getIn(keys, true) as { range?: [number, number, number] } | undefined;
        if (node?.range) return { file: file.file, line: file.lines.linePos(node.range[0]).line };
      }
    }
    return { file: opts.configFile !== "" ? opts.configFile : "built-in defaults" };
  };

  const cgroupV1 = opts.cgroupV1 ?? !(await hostIsCgroup2UnifiedMode());
  const validation = validateKubeletConfiguration(config, {
    featureGates: config.featureGates,
    cgroupV1,
  });
  // What upstream would run but this kubelet cannot yet: refused once the rest is valid.
  const issues = validation.length > 0 ? validation : unsupportedSettings(config);
  const first = issues[0];
  if (first) {
    const where = locate(first.path);
    const value = first.value === undefined ? "" : `: current value is ${show(first.value)}`;
    const more = issues.length > 1
      ? ` (and ${issues.length - 1} more: ${issues.slice(1).map((i) => `'${i.path}'`).join(", ")})`
      : "";
    throw new ConfigError(where.file, where.line, first.path, `${first.message}${value}${more}`);
  }
  return { config, locate };
}

/** With only --config-dir, the legacy defaults are the base the drop-ins patch. */
function applyLegacyDefaultsUnlessSet(
  cfg: KubeletConfiguration,
  raw: Record<string, unknown>,
): void {
  const auth = raw.authentication as
    | Record<string, Record<string, unknown> | undefined>
    | undefined;
  if (auth?.anonymous?.enabled === undefined) cfg.authentication.anonymous.enabled = true;
  if (auth?.webhook?.enabled === undefined) cfg.authentication.webhook.enabled = false;
  if ((raw.authorization as Record<string, unknown> | undefined)?.mode === undefined) {
    cfg.authorization.mode = "AlwaysAllow";
  }
  if (raw.readOnlyPort === undefined) cfg.readOnlyPort = 10255;
}

function show(v: unknown): string {
  if (typeof v === "string") return `'${v}'`;
  return JSON.stringify(v) ?? String(v);
}
