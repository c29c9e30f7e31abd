/**
 * @module
 * The CredentialProviderConfig file of `--image-credential-provider-config` (KEP-2133): read
 * from one file, or from every `*.json`, `*.yaml` and `*.yml` file of a directory in lexical
 * order with the providers merged (a name twice is an error); decoded strictly as upstream's
 * scheme decodes it (`kubelet.config.k8s.io/v1`, `v1beta1` or `v1alpha1`, kind
 * CredentialProviderConfig; unknown and duplicate fields are errors; `tokenAttributes` only in
 * v1); and validated with upstream's rules and messages (names, apiVersion, matchImages,
 * defaultCacheDuration, tokenAttributes). The content's hash (`sha256:<hex>` of each file with a
 * length prefix) is kept for the config-info metric. Corresponds to upstream
 * `pkg/credentialprovider/plugin/config.go` and the CredentialProvider types of
 * `pkg/kubelet/apis/config` (`k8s.io/kubelet/config/v1`).
 */

import { extname, join } from "node:path";
import { parseDocument } from "yaml";
import { goQuote } from "../klog/encode.ts";
import { formatDuration, parseDuration } from "../util/duration.ts";
import { parseSchemelessUrl } from "./urls_match.ts";

/** The request versions a provider may name in `apiVersion`, sorted as upstream lists them. */
export const CREDENTIAL_PROVIDER_API_VERSIONS = [
  "credentialprovider.kubelet.k8s.io/v1",
  "credentialprovider.kubelet.k8s.io/v1alpha1",
  "credentialprovider.kubelet.k8s.io/v1beta1",
] as const;

/** The cache types of `tokenAttributes.cacheType`. */
export const SERVICE_ACCOUNT_TOKEN_CACHE_TYPES = ["ServiceAccount", "Token"] as const;

/** One exec plugin (upstream `CredentialProvider`). */
export interface CredentialProvider {
  /** The executable's name in the bin dir. */
  readonly name: string;
  /** Registry patterns (host globs, optional port and path prefix) of the images it serves. */
  readonly matchImages: readonly string[];
  /** How long to cache credentials when a response names no duration, ms; undefined if unset. */
  readonly defaultCacheDuration: number | undefined;
  /** The CredentialProviderRequest/Response version. */
  readonly apiVersion: string;
  readonly args: readonly string[];
  readonly env: readonly { readonly name: string; readonly value: string }[];
  /** Service account tokens for the plugin (KEP-4412); v1 only. */
  readonly tokenAttributes?: ServiceAccountTokenAttributes;
}

/** Upstream `ServiceAccountTokenAttributes`. */
export interface ServiceAccountTokenAttributes {
  readonly serviceAccountTokenAudience: string;
  /** "Token" or "ServiceAccount"; "" when unset. */
  readonly cacheType: string;
  /** Undefined when unset (a validation error). */
  readonly requireServiceAccount: boolean | undefined;
  readonly requiredServiceAccountAnnotationKeys: readonly string[];
  readonly optionalServiceAccountAnnotationKeys: readonly string[];
}

/** The providers, in the order their credentials are tried. */
export interface CredentialProviderConfig {
  readonly providers: readonly CredentialProvider[];
}

/** A configuration that cannot be read, decoded or validated; the message is upstream's. */
export class CredentialProviderConfigError extends Error {
  override name = "CredentialProviderConfigError";
}

/**
 * Upstream `readCredentialProviderConfig`: the merged configuration of the file or directory
 * at `path` and the hash of its content. Throws {@link CredentialProviderConfigError}.
 */
export async function readCredentialProviderConfig(
  path: string,
): Promise<{ config: CredentialProviderConfig; hash: string }> {
  const fail = (msg: string, cause?: unknown): never => {
    throw new CredentialProviderConfigError(msg, { cause });
  };
  if (path === "") fail("credential provider config path is empty");
  let info: Deno.FileInfo;
  try {
    info = await Deno.stat(path);
  } catch (e) {
    return fail(`unable to access path ${goQuote(path)}: ${osError("stat", path, e)}`, e);
  }
  const files: string[] = [];
  if (info.isDirectory) {
    try {
      for await (const entry of Deno.readDir(path)) {
        const ext = extname(entry.name);
        if (!entry.isDirectory && [".json", ".yaml", ".yml"].includes(ext)) {
          files.push(join(path, entry.name));
        }
      }
    } catch (e) {
      fail(`unable to read directory ${goQuote(path)}: ${osError("open", path, e)}`, e);
    }
    files.sort();
    if (files.length === 0) fail(`no configuration files found in directory ${goQuote(path)}`);
  } else {
    files.push(path);
  }
  const chunks: Uint8Array[] = [];
  const providers: CredentialProvider[] = [];
  const names = new Set<string>();
  for (const file of files) {
    let data: Uint8Array;
    try {
      data = await Deno.readFile(file);
    } catch (e) {
      return fail(`unable to read file ${goQuote(file)}: ${osError("open", file, e)}`, e);
    }
    const prefix = new Uint8Array(8);
    new DataView(prefix.buffer).setBigUint64(0, BigInt(data.length));
    chunks.push(prefix, data);
    let config: CredentialProviderConfig;
    try {
      config = decodeCredentialProviderConfig(new TextDecoder().decode(data));
    } catch (e) {
      return fail(`error decoding config ${goQuote(file)}: ${(e as Error).message}`, e);
    }
    for (const p of config.providers) {
      if (names.has(p.name)) {
        fail(`duplicate provider name ${goQuote(p.name)} found in configuration file(s)`);
      }
      names.add(p.name);
      providers.push(p);
    }
  }
  const all = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.length;
  }
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", all));
  const hash = `sha256:${[...digest].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
  return { config: { providers }, hash };
}

/** Go's `*fs.PathError` text for a failed file operation. */
function osError(op: string, path: string, e: unknown): string {
  if (e instanceof Deno.errors.NotFound) return `${op} ${path}: no such file or directory`;
  if (e instanceof Deno.errors.PermissionDenied) return `${op} ${path}: permission denied`;
  return `${op} ${path}: ${e instanceof Error ? e.message : String(e)}`;
}

const GROUP = "kubelet.config.k8s.io";
/** The kinds upstream's scheme registers in the kubelet config group, by version. */
const REGISTERED_KINDS: Readonly<Record<string, readonly string[]>> = {
  [`${GROUP}/v1`]: ["CredentialProviderConfig"],
  [`${GROUP}/v1beta1`]: [
    "CredentialProviderConfig",
    "KubeletConfiguration",
    "SerializedNodeConfigSource",
  ],
  [`${GROUP}/v1alpha1`]: ["CredentialProviderConfig", "ImagePullIntent", "ImagePulledRecord"],
};

/**
 * Decodes one file's content (YAML or JSON) as upstream's strict universal decoder does;
 * throws an Error with upstream's message.
 */
export function decodeCredentialProviderConfig(text: string): CredentialProviderConfig {
  const doc = parseDocument(text, { uniqueKeys: true });
  const dup = doc.errors.find((e) => e.code === "DUPLICATE_KEY");
  const bad = doc.errors.find((e) => e.code !== "DUPLICATE_KEY");
  if (bad) throw new Error(`error converting YAML to JSON: yaml: ${bad.message.split("\n")[0]}`);
  const raw: unknown = doc.toJS();
  const obj = (raw ?? {}) as Record<string, unknown>;
  if (typeof raw !== "object" || Array.isArray(raw)) {
    throw new Error("couldn't get version/kind; json parse error: cannot unmarshal into object");
  }
  const apiVersion = typeof obj.apiVersion === "string" ? obj.apiVersion : "";
  const kind = typeof obj.kind === "string" ? obj.kind : "";
  const json = JSON.stringify(raw);
  if (kind === "") throw new Error(`Object 'Kind' is missing in '${json}'`);
  if (apiVersion === "") throw new Error(`Object 'apiVersion' is missing in '${json}'`);
  const kinds = REGISTERED_KINDS[apiVersion];
  if (!kinds?.includes(kind)) {
    throw new Error(`no kind ${goQuote(kind)} is registered for version ${goQuote(apiVersion)}`);
  }
  if (kind !== "CredentialProviderConfig") {
    throw new Error(`failed to decode ${goQuote(kind)} (wrong Kind)`);
  }
  const v1 = apiVersion === `${GROUP}/v1`;
  const strict: string[] = [];
  const config = decodeConfig(obj, v1, strict);
  if (dup) {
    const line = dup.linePos?.[0]?.line ?? 0;
    const key = keyAt(text, dup.linePos?.[0]);
    strict.push(`yaml: unmarshal errors:\n  line ${line}: key ${goQuote(key)} already set in map`);
  }
  if (strict.length > 0) throw new Error(`strict decoding error: ${strict.join(", ")}`);
  return config;
}

/** The key that starts at a YAML error's position. */
function keyAt(text: string, pos: { line: number; col: number } | undefined): string {
  if (!pos) return "";
  const line = text.split("\n")[pos.line - 1] ?? "";
  const rest = line.slice(pos.col - 1);
  const m = /^"((?:[^"\\]|\\.)*)"|^'([^']*)'|^([^:]+?)\s*:/.exec(rest);
  return m?.[1] ?? m?.[2] ?? m?.[3] ?? "";
}

/** Strict decoding of the known fields; unknown ones are added to `strict` by path. */
function decodeConfig(
  obj: Record<string, unknown>,
  v1: boolean,
  strict: string[],
): CredentialProviderConfig {
  unknownFields(obj, ["apiVersion", "kind", "providers"], "", strict);
  const list = typed(obj.providers, "array", "CredentialProviderConfig", "providers", PROVIDERS_T);
  const providers = (list ?? []).map((p, i) => {
    const path = `providers[${i}]`;
    const o =
      typed(p, "object", "CredentialProviderConfig", "providers", "v1.CredentialProvider") ??
        {};
    unknownFields(o, PROVIDER_FIELDS.filter((f) => v1 || f !== "tokenAttributes"), path, strict);
    const s = (name: string) =>
      typed(o[name], "string", "CredentialProvider", `providers.${name}`, "string") ?? "";
    const strings = (name: string) =>
      (typed(o[name], "array", "CredentialProvider", `providers.${name}`, "[]string") ?? []).map(
        (v) => typed(v, "string", "CredentialProvider", `providers.${name}`, "string") ?? "",
      );
    const env = (typed(o.env, "array", "CredentialProvider", "providers.env", ENV_T) ?? []).map(
      (e, j) => {
        const eo = typed(e, "object", "CredentialProvider", "providers.env", "v1.ExecEnvVar") ?? {};
        unknownFields(eo, ["name", "value"], `${path}.env[${j}]`, strict);
        const f = (n: string) =>
          typed(eo[n], "string", "ExecEnvVar", `providers.env.${n}`, "string") ?? "";
        return { name: f("name"), value: f("value") };
      },
    );
    const provider: CredentialProvider = {
      name: s("name"),
      matchImages: strings("matchImages"),
      defaultCacheDuration: duration(o.defaultCacheDuration),
      apiVersion: s("apiVersion"),
      args: strings("args"),
      env,
    };
    if (!v1 || o.tokenAttributes === undefined || o.tokenAttributes === null) return provider;
    const t = typed(
      o.tokenAttributes,
      "object",
      "CredentialProvider",
      "providers.tokenAttributes",
      "v1.ServiceAccountTokenAttributes",
    ) ?? {};
    unknownFields(t, TOKEN_FIELDS, `${path}.tokenAttributes`, strict);
    const at = (n: string) => `providers.tokenAttributes.${n}`;
    const ts = (n: string) =>
      typed(t[n], "string", "ServiceAccountTokenAttributes", at(n), "string") ?? "";
    const tl = (n: string) =>
      (typed(t[n], "array", "ServiceAccountTokenAttributes", at(n), "[]string") ?? []).map((v) =>
        typed(v, "string", "ServiceAccountTokenAttributes", at(n), "string") ?? ""
      );
    return {
      ...provider,
      tokenAttributes: {
        serviceAccountTokenAudience: ts("serviceAccountTokenAudience"),
        cacheType: ts("cacheType"),
        requireServiceAccount: typed(
          t.requireServiceAccount,
          "boolean",
          "ServiceAccountTokenAttributes",
          at("requireServiceAccount"),
          "bool",
        ),
        requiredServiceAccountAnnotationKeys: tl("requiredServiceAccountAnnotationKeys"),
        optionalServiceAccountAnnotationKeys: tl("optionalServiceAccountAnnotationKeys"),
      },
    };
  });
  return { providers };
}

const PROVIDERS_T = "[]v1.CredentialProvider";
const ENV_T = "[]v1.ExecEnvVar";
const PROVIDER_FIELDS = [
  "name",
  "matchImages",
  "defaultCacheDuration",
  "apiVersion",
  "args",
  "env",
  "tokenAttributes",
];
const TOKEN_FIELDS = [
  "serviceAccountTokenAudience",
  "cacheType",
  "requireServiceAccount",
  "requiredServiceAccountAnnotationKeys",
  "optionalServiceAccountAnnotationKeys",
];

function unknownFields(
  o: Record<string, unknown>,
  known: readonly string[],
  path: string,
  strict: string[],
): void {
  for (const k of Object.keys(o)) {
    if (!known.includes(k)) strict.push(`unknown field ${goQuote(path ? `${path}.${k}` : k)}`);
  }
}

type JsonKind = "string" | "boolean" | "array" | "object";
type Typed<K extends JsonKind> = K extends "string" ? string
  : K extends "boolean" ? boolean
  : K extends "array" ? unknown[]
  : Record<string, unknown>;

/** `v` when it has JSON kind `kind` (undefined for null or absent); else Go's type error. */
function typed<K extends JsonKind>(
  v: unknown,
  kind: K,
  struct: string,
  field: string,
  goType: string,
): Typed<K> | undefined {
  if (v === undefined || v === null) return undefined;
  const actual = jsonKind(v);
  if (actual === (kind === "boolean" ? "bool" : kind)) return v as Typed<K>;
  throw new Error(
    `json: cannot unmarshal ${actual} into Go struct field ${struct}.${field} of type ${goType}`,
  );
}

function jsonKind(v: unknown): string {
  if (Array.isArray(v)) return "array";
  if (typeof v === "boolean") return "bool";
  return typeof v === "object" ? "object" : typeof v;
}

/** metav1.Duration: a Go duration string; milliseconds. */
function duration(v: unknown): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") {
    throw new Error(`json: cannot unmarshal ${jsonKind(v)} into Go value of type string`);
  }
  try {
    return parseDuration(v);
  } catch {
    throw new Error(`time: invalid duration ${goQuote(v)}`);
  }
}

/**
 * Upstream `validateCredentialProviderConfig`: each problem as field.Error prints it, in
 * upstream's order. `saTokenGate` is the KubeletServiceAccountTokenForCredentialProviders gate.
 */
export function validateCredentialProviderConfig(
  config: CredentialProviderConfig,
  saTokenGate: boolean,
): string[] {
  const errs: string[] = [];
  const required = (path: string, detail = "") =>
    errs.push(`${path}: Required value${detail ? `: ${detail}` : ""}`);
  const invalid = (path: string, value: string, detail: string) =>
    errs.push(`${path}: Invalid value: ${value}: ${detail}`);
  const forbidden = (path: string, detail: string) => errs.push(`${path}: Forbidden: ${detail}`);
  const duplicate = (path: string, value: string) =>
    errs.push(`${path}: Duplicate value: ${goQuote(value)}`);
  const notSupported = (path: string, value: string, supported: readonly string[]) =>
    errs.push(
      `${path}: Unsupported value: ${goQuote(value)}: supported values: ${
        supported.map(goQuote).join(", ")
      }`,
    );

  if (config.providers.length === 0) {
    required("providers", "at least 1 item in plugins is required");
  }
  const seen = new Set<string>();
  for (const p of config.providers) {
    const name = goQuote(p.name);
    if (p.name.includes("/")) invalid("providers.name", name, "provider name cannot contain '/'");
    if (p.name.includes(" ")) {
      invalid("providers.name", name, "provider name cannot contain spaces");
    }
    if (p.name === ".") invalid("providers.name", name, "provider name cannot be '.'");
    if (p.name === "..") invalid("providers.name", name, "provider name cannot be '..'");
    if (seen.has(p.name)) duplicate("providers.name", p.name);
    seen.add(p.name);

    if (p.apiVersion === "") required("providers.apiVersion");
    else if (!(CREDENTIAL_PROVIDER_API_VERSIONS as readonly string[]).includes(p.apiVersion)) {
      notSupported("providers.apiVersion", p.apiVersion, CREDENTIAL_PROVIDER_API_VERSIONS);
    }

    if (p.matchImages.length === 0) {
      required("providers.matchImages", "at least 1 item in matchImages is required");
    }
    for (const m of p.matchImages) {
      try {
        parseSchemelessUrl(m);
      } catch (e) {
        invalid(
          "providers.matchImages",
          goQuote(m),
          `match image is invalid: ${(e as Error).message}`,
        );
      }
    }

    if (p.defaultCacheDuration === undefined) required("providers.defaultCacheDuration");
    else if (p.defaultCacheDuration < 0) {
      invalid(
        "providers.defaultCacheDuration",
        goQuote(formatDuration(p.defaultCacheDuration)),
        "must be greater than or equal to 0",
      );
    }

    const t = p.tokenAttributes;
    if (!t) continue;
    const path = "providers.tokenAttributes";
    if (!saTokenGate) {
      forbidden(
        path,
        "tokenAttributes is not supported when KubeletServiceAccountTokenForCredentialProviders feature gate is disabled",
      );
    }
    if (t.serviceAccountTokenAudience === "") required(`${path}.serviceAccountTokenAudience`);
    if (t.requireServiceAccount === undefined) required(`${path}.requireServiceAccount`);
    if (p.apiVersion !== "credentialprovider.kubelet.k8s.io/v1") {
      forbidden(
        path,
        "tokenAttributes is only supported for credentialprovider.kubelet.k8s.io/v1 API version",
      );
    }
    if (t.requireServiceAccount === false && t.requiredServiceAccountAnnotationKeys.length > 0) {
      forbidden(
        `${path}.requiredServiceAccountAnnotationKeys`,
        "requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set",
      );
    }
    for (
      const [field, keys] of [
        ["requiredServiceAccountAnnotationKeys", t.requiredServiceAccountAnnotationKeys],
        ["optionalServiceAccountAnnotationKeys", t.optionalServiceAccountAnnotationKeys],
      ] as const
    ) {
      const keysSeen = new Set<string>();
      for (const k of keys) {
        for (const msg of qualifiedNameErrors(k.toLowerCase())) {
          invalid(`${path}.${field}`, goQuote(k), msg);
        }
        if (keysSeen.has(k)) duplicate(`${path}.${field}`, k);
        keysSeen.add(k);
      }
    }
    const optional = new Set(t.optionalServiceAccountAnnotationKeys);
    const both = [...new Set(t.requiredServiceAccountAnnotationKeys)].filter((k) => optional.has(k))
      .sort();
    if (both.length > 0) {
      invalid(
        path,
        `[${both.map(goQuote).join(",")}]`,
        "annotation keys cannot be both required and optional",
      );
    }
    if (t.cacheType === "") {
      required(
        `${path}.cacheType`,
        "cacheType is required to be set when tokenAttributes is specified. Supported values are: " +
          SERVICE_ACCOUNT_TOKEN_CACHE_TYPES.join(", "),
      );
    } else if (!(SERVICE_ACCOUNT_TOKEN_CACHE_TYPES as readonly string[]).includes(t.cacheType)) {
      notSupported(`${path}.cacheType`, t.cacheType, SERVICE_ACCOUNT_TOKEN_CACHE_TYPES);
    }
  }
  return errs;
}

/** Upstream `ErrorList.ToAggregate().Error()`: one error alone, several as "[a, b]". */
export function aggregate(errs: readonly string[]): string {
  return errs.length === 1 ? errs[0]! : `[${errs.join(", ")}]`;
}

const QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG = "must consist of alphanumeric characters, '-', '_' or '.', and must " +
  "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or " +
  `'123-abc', regex used for validation is '${QUALIFIED_NAME_FMT}')`;
const DNS1123_SUBDOMAIN_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";

/** apimachinery's `IsQualifiedName` (`IsLabelKey`): its messages, none when valid. */
function qualifiedNameErrors(value: string): string[] {
  const parts = value.split("/");
  if (parts.length > 2) {
    return [
      `a valid label key ${QUALIFIED_NAME_MSG} with an optional DNS subdomain prefix and '/' ` +
      "(e.g. 'example.com/MyName')",
    ];
  }
  const errs: string[] = [];
  const name = parts.length === 2 ? parts[1]! : value;
  if (parts.length === 2) {
    const prefix = parts[0]!;
    if (prefix === "") errs.push("prefix part must be non-empty");
    else if (new TextEncoder().encode(prefix).length > 253) {
      errs.push("prefix part must be no more than 253 bytes");
    } else if (!new RegExp(`^${DNS1123_SUBDOMAIN_FMT}$`).test(prefix)) {
      errs.push(
        "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric " +
          "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. " +
          `'example.com', regex used for validation is '${DNS1123_SUBDOMAIN_FMT}')`,
      );
    }
  }
  if (name === "") errs.push("name part must be non-empty");
  else if (new TextEncoder().encode(name).length > 63) {
    errs.push("name part must be no more than 63 bytes");
  }
  if (!new RegExp(`^${QUALIFIED_NAME_FMT}$`).test(name)) {
    errs.push(`name part ${QUALIFIED_NAME_MSG}`);
  }
  return errs;
}
