/**
 * @module
 * A container's environment as upstream `makeEnvironmentVariables` builds it: `envFrom`
 * ConfigMaps and Secrets first (with prefix, optional), then `env` entries overriding them in
 * declaration order, each `value` `$(VAR)`-expanded against what is defined before it and the
 * service link variables, each `valueFrom` resolved from the downward API (`fieldRef`,
 * `resourceFieldRef` with node allocatable standing in for missing limits), a ConfigMap/Secret
 * key or a key of a `.env` file in a pod volume (`fileKeyRef`); last, the service link variables
 * (`envvars.ts`) that nothing else defined. Talks to an {@link EnvSource} (the apiserver through
 * `client/kube_client.ts`, or nothing for a standalone kubelet), a Service cache
 * (`client/service_lister.ts`), the pod's mounted volumes and the event recorder; called by
 * `kuberuntime/kuberuntime_container.ts` when it builds a container config. Corresponds to upstream
 * `pkg/kubelet/kubelet_pods.go` (makeEnvironmentVariables, podFieldSelectorRuntimeValue,
 * containerResourceRuntimeValue, sortPodIPs), `kubelet_resources.go`
 * (defaultPodLimitsForDownwardAPI), `pkg/fieldpath`, `pkg/api/v1/resource`
 * (ExtractContainerResourceValue), `pkg/kubelet/util/env` (ParseEnv) and
 * `github.com/cyphar/filepath-securejoin` (SecureJoin).
 */

import { isIPv4, isIPv6 } from "node:net";
import { isAbsolute, join } from "node:path";
import type {
  V1ConfigMap,
  V1Container,
  V1FileKeySelector,
  V1Pod,
  V1ResourceFieldSelector,
  V1Secret,
} from "@kubernetes/client-node";
import type { EventRecorder } from "./client/record.ts";
import { kobj, type Logger } from "./klog/klog.ts";
import { goQuote } from "./klog/encode.ts";
import {
  DownwardApiError,
  extractContainerResourceValue,
  extractFieldPathAsString,
  mergeContainerResourceLimits,
  splitMaybeSubscriptedPath,
} from "./volume/fieldpath.ts";
import { expand, mappingFuncFor } from "./kuberuntime/expansion.ts";
import { serviceEnvVarMap, type ServiceSource } from "./envvars.ts";
import { isStaticPod } from "./config/pod_config.ts";
import type { PodVolumesFunc } from "./volume/plugin.ts";
import { errorText } from "./util/errors.ts";

/** Where ConfigMaps and Secrets come from (upstream configMapManager / secretManager). */
export interface EnvSource {
  /** The ConfigMap, or undefined when it does not exist. */
  getConfigMap(
    namespace: string,
    name: string,
    signal?: AbortSignal,
  ): Promise<V1ConfigMap | undefined>;
  /** The Secret, or undefined when it does not exist. */
  getSecret(namespace: string, name: string, signal?: AbortSignal): Promise<V1Secret | undefined>;
}

/** What {@link makeEnvironmentVariables} needs. */
export interface MakeEnvOptions {
  readonly pod: V1Pod;
  readonly container: V1Container;
  /** The pod's IPs as the runtime reports them (PodStatus.ips). */
  readonly podIPs: readonly string[];
  /** The node's IPs, first one primary (node status addresses). */
  readonly hostIPs: readonly string[];
  /**
   * The node's allocatable resources, the default of a missing limit for `resourceFieldRef`.
   * @default none: a resourceFieldRef then fails as upstream does without a node
   */
  readonly nodeAllocatable?: Readonly<Record<string, string>>;
  /** ConfigMaps and Secrets. @default none: a reference fails as with no kube client */
  readonly source?: EnvSource;
  /** For the InvalidEnvironmentVariableNames event. @default none */
  readonly recorder?: EventRecorder;
  /**
   * The cluster's Services, for service link variables (upstream serviceLister).
   * @default none: no service variables, as upstream without a kube client
   */
  readonly services?: ServiceSource;
  /** Where the master `kubernetes` Service lives. @default "default" */
  readonly masterServiceNamespace?: string;
  /**
   * The pod's mounted volumes, for `fileKeyRef`.
   * @default none: a fileKeyRef fails as not supported yet
   */
  readonly podVolumes?: PodVolumesFunc;
  /** For the detail of an env file that cannot be parsed. @default none */
  readonly logger?: Logger;
  readonly signal?: AbortSignal;
}

/** The environment cannot be built; the container start fails with CreateContainerConfigError. */
export class EnvError extends Error {
  override name = "EnvError";
}

/** One environment variable, resolved and expanded. */
export interface ResolvedEnvVar {
  name: string;
  value: string;
}

/**
 * The container's environment (upstream makeEnvironmentVariables). Throws {@link EnvError}
 * with upstream's message when a required source or key is missing or a reference is invalid.
 */
export async function makeEnvironmentVariables(
  opts: MakeEnvOptions,
): Promise<ResolvedEnvVar[]> {
  const { pod, container, signal } = opts;
  const namespace = pod.metadata?.namespace ?? "";
  let serviceEnv = new Map<string, string>();
  if (opts.services) {
    // Waiting for the first list keeps KUBERNETES_SERVICE_HOST, which in-cluster clients read,
    // from going missing after a restart. Static pods may run before the apiserver does.
    if (!isStaticPod(pod) && !opts.services.hasSynced()) {
      throw new EnvError(
        "services have not yet been read at least once, cannot construct envvars",
      );
    }
    serviceEnv = serviceEnvVarMap(
      opts.services,
      namespace,
      pod.spec?.enableServiceLinks !== false,
      opts.masterServiceNamespace,
    );
  }
  const objects = new ObjectCache(opts.source, namespace, signal);
  const env = new Map<string, string>();

  for (const from of container.envFrom ?? []) {
    let data: Record<string, string>;
    let name: string;
    if (from.configMapRef) {
      name = from.configMapRef.name ?? "";
      const cm = await objects.configMap(name, from.configMapRef.optional === true);
      if (cm === undefined) continue;
      data = { ...cm.data };
    } else if (from.secretRef) {
      name = from.secretRef.name ?? "";
      const secret = await objects.secret(name, from.secretRef.optional === true);
      if (secret === undefined) continue;
      data = {};
      for (const [k, v] of Object.entries(secret.data ?? {})) data[k] = decodeSecretValue(v);
    } else {
      continue;
    }
    // Every key is taken as it is: with RelaxedEnvironmentVariableValidation (GA) upstream no
    // longer skips keys that are not C identifiers, nor records InvalidEnvironmentVariableNames.
    for (const [key, value] of Object.entries(data)) env.set((from.prefix ?? "") + key, value);
  }

  const mapping = mappingFuncFor(env, serviceEnv);
  for (const e of container.env ?? []) {
    let value = e.value ?? "";
    if (value !== "") {
      value = expand(value, mapping);
    } else if (e.valueFrom) {
      const from = e.valueFrom;
      if (from.fieldRef) {
        value = podFieldSelectorRuntimeValue(
          from.fieldRef.apiVersion,
          from.fieldRef.fieldPath,
          pod,
          opts.podIPs,
          opts.hostIPs,
        );
      } else if (from.resourceFieldRef) {
        if (opts.nodeAllocatable === undefined) {
          throw new EnvError("failed to find node object, expected a node");
        }
        value = containerResourceRuntimeValue(
          from.resourceFieldRef,
          pod,
          container,
          opts.nodeAllocatable,
        );
      } else if (from.configMapKeyRef) {
        const ref = from.configMapKeyRef;
        const optional = ref.optional === true;
        const cm = await objects.configMap(ref.name ?? "", optional);
        if (cm === undefined) continue;
        const v = cm.data?.[ref.key];
        if (v === undefined) {
          if (optional) continue;
          throw new EnvError(
            `couldn't find key ${ref.key} in ConfigMap ${namespace}/${ref.name ?? ""}`,
          );
        }
        value = v;
      } else if (from.secretKeyRef) {
        const ref = from.secretKeyRef;
        const optional = ref.optional === true;
        const secret = await objects.secret(ref.name ?? "", optional);
        if (secret === undefined) continue;
        const v = secret.data?.[ref.key];
        if (v === undefined) {
          if (optional) continue;
          throw new EnvError(
            `couldn't find key ${ref.key} in Secret ${namespace}/${ref.name ?? ""}`,
          );
        }
        value = decodeSecretValue(v);
      } else if (from.fileKeyRef) {
        if (opts.podVolumes === undefined) {
          throw new EnvError(
            `env ${JSON.stringify(e.name)}: fileKeyRef needs pod volumes: not supported yet`,
          );
        }
        const v = await fileKeyRefValue(from.fileKeyRef, opts.podVolumes, opts);
        if (v === undefined) continue;
        value = v;
      }
    }
    env.set(e.name, value);
  }
  const out = [...env].map(([name, value]) => ({ name, value }));
  // Service variables come last and never replace what the container defines.
  for (const [name, value] of serviceEnv) if (!env.has(name)) out.push({ name, value });
  return out;
}

/**
 * A fileKeyRef's value: the key of the `.env` file at `path` in the named volume; undefined
 * when the key is missing or empty and the ref is optional (upstream's EnvFiles branch).
 */
async function fileKeyRefValue(
  ref: V1FileKeySelector,
  podVolumes: PodVolumesFunc,
  opts: MakeEnvOptions,
): Promise<string | undefined> {
  const volume = podVolumes(opts.pod.metadata?.uid ?? "").get(ref.volumeName);
  if (volume === undefined) {
    throw new EnvError(
      `cannot find the volume ${goQuote(ref.volumeName)} referenced by FileKeyRef`,
    );
  }
  // An image volume has no host path: the runtime mounts the image (upstream GetPath's error).
  if (volume.hostPath === "") {
    throw new EnvError(
      `failed to get host path for volume ${goQuote(ref.volumeName)}: path is empty`,
    );
  }
  let path: string;
  try {
    path = await secureJoin(volume.hostPath, ref.path);
  } catch (e) {
    throw new EnvError(errorText(e), { cause: e });
  }
  let value: string;
  try {
    value = await parseEnvFile(path, ref.key, opts.signal);
  } catch (e) {
    opts.signal?.throwIfAborted();
    opts.logger?.error(e, "Failed to parse env file", { pod: kobj(opts.pod) });
    throw new EnvError("couldn't parse env file", { cause: e });
  }
  // As upstream, an empty value counts as a missing key.
  if (value !== "") return value;
  if (ref.optional === true) return undefined;
  throw new EnvError(
    `environment variable key ${goQuote(ref.key)} not found in file ${goQuote(path)}`,
  );
}

/** An env file that cannot be read or is malformed (upstream ParseEnv's errors). */
export class EnvFileError extends Error {
  override name = "EnvFileError";
}

/**
 * The value of `key` in the `.env` file at `path`, or "" when the file does not set it
 * (upstream envutil.ParseEnv): `KEY='value'` lines, the value single-quoted and taken literally
 * (newlines included), `#` comment lines and blank lines skipped, a comment allowed after the
 * closing quote, no space before `=`, and a space after it meaning an empty value. The first
 * assignment of `key` wins; lines after it are not read. Throws {@link EnvFileError}.
 */
export async function parseEnvFile(
  path: string,
  key: string,
  signal?: AbortSignal,
): Promise<string> {
  let file: Deno.FsFile;
  try {
    file = await Deno.open(path);
  } catch (e) {
    throw new EnvFileError(
      `failed to open environment variable file ${goQuote(path)}: ${errorText(e)}`,
      { cause: e },
    );
  }
  try {
    const scanner = new LineScanner(file, signal);
    const invalid = (n: number, why: string) =>
      new EnvFileError(`invalid environment variable format at line ${n}: ${why}`);
    let lineNum = 0;
    while (await scanner.scan()) {
      lineNum++;
      const line = trimLeftBlank(scanner.text);
      if (line === "" || line.startsWith("#")) continue;
      const eq = line.indexOf("=");
      if (eq < 0) throw invalid(lineNum, "missing '='");
      const namePart = line.slice(0, eq);
      const name = trimRightBlank(namePart);
      if (name === "") throw invalid(lineNum, "empty variable name");
      if (name !== namePart) throw invalid(lineNum, "whitespace before '=' is not allowed");
      const valuePart = line.slice(eq + 1);
      const trimmed = trimLeftBlank(valuePart);
      if (trimmed !== valuePart) {
        // As in a shell, `KEY= 'v'` assigns an empty KEY.
        if (name === key) return "";
        continue;
      }
      if (!trimmed.startsWith("'")) {
        throw invalid(lineNum, "value must be enclosed in single quotes");
      }
      let value = "";
      let rest = trimmed.slice(1);
      const start = lineNum;
      for (;;) {
        const close = rest.indexOf("'");
        if (close >= 0) {
          value += rest.slice(0, close);
          const after = trimLeftBlank(rest.slice(close + 1));
          if (after !== "" && !after.startsWith("#")) {
            throw invalid(lineNum, "unexpected content after closing quote");
          }
          if (name === key) return value;
          break;
        }
        value += rest + "\n";
        if (!await scanner.scan()) {
          throw new EnvFileError(
            `invalid environment variable format starting at line ${start}: unclosed single quote`,
          );
        }
        lineNum++;
        rest = scanner.text;
      }
    }
    if (scanner.err !== undefined) {
      throw new EnvFileError(
        `error reading environment variable file ${goQuote(path)}: ${errorText(scanner.err)}`,
        { cause: scanner.err },
      );
    }
    return "";
  } finally {
    file.close();
  }
}

/** Go's bufio.MaxScanTokenSize: a longer line is an error, and bounds what one line costs. */
const MAX_LINE_BYTES = 64 * 1024;

/**
 * Lines of a file as Go's bufio.Scanner with ScanLines gives them: split at `\n`, a trailing
 * `\r` dropped, the last line without a newline kept; on a read error or an over-long line,
 * `scan` returns false and `err` says why.
 */
class LineScanner {
  text = "";
  err: Error | undefined;
  readonly #file: Deno.FsFile;
  readonly #signal: AbortSignal | undefined;
  readonly #decoder = new TextDecoder();
  #buf = new Uint8Array(0);
  #eof = false;

  constructor(file: Deno.FsFile, signal: AbortSignal | undefined) {
    this.#file = file;
    this.#signal = signal;
  }

  async scan(): Promise<boolean> {
    if (this.err !== undefined) return false;
    for (;;) {
      const nl = this.#buf.indexOf(0x0a);
      const end = nl >= 0 ? nl : this.#eof ? this.#buf.length : -1;
      if (end >= 0 && end < MAX_LINE_BYTES && (nl >= 0 || end > 0)) {
        let line = this.#buf.subarray(0, end);
        if (line.at(-1) === 0x0d) line = line.subarray(0, -1);
        this.text = this.#decoder.decode(line);
        this.#buf = this.#buf.subarray(nl >= 0 ? nl + 1 : end);
        return true;
      }
      if (this.#buf.length >= MAX_LINE_BYTES) {
        this.err = new Error("bufio.Scanner: token too long");
        return false;
      }
      if (this.#eof) return false;
      this.#signal?.throwIfAborted();
      const chunk = new Uint8Array(16 * 1024);
      let n: number | null;
      try {
        n = await this.#file.read(chunk);
      } catch (e) {
        this.err = e instanceof Error ? e : new Error(String(e));
        return false;
      }
      if (n === null) {
        this.#eof = true;
        continue;
      }
      const grown = new Uint8Array(this.#buf.length + n);
      grown.set(this.#buf);
      grown.set(chunk.subarray(0, n), this.#buf.length);
      this.#buf = grown;
    }
  }
}

/** Go's strings.TrimLeft(s, " \t"). */
function trimLeftBlank(s: string): string {
  let i = 0;
  while (s[i] === " " || s[i] === "\t") i++;
  return s.slice(i);
}

/** Go's strings.TrimRight(s, " \t"). */
function trimRightBlank(s: string): string {
  let i = s.length;
  while (s[i - 1] === " " || s[i - 1] === "\t") i--;
  return s.slice(0, i);
}

/** Symlinks {@link secureJoin} follows before giving up (filepath-securejoin's limit). */
const MAX_SYMLINKS = 255;

/**
 * `unsafePath` joined to `root` with every `..` and symlink resolved as if `root` were `/`, so
 * the result cannot leave `root` (github.com/cyphar/filepath-securejoin SecureJoin). Missing
 * components are taken as plain names.
 */
export async function secureJoin(root: string, unsafePath: string): Promise<string> {
  let current = "";
  let remaining = unsafePath;
  let links = 0;
  while (remaining !== "") {
    const slash = remaining.indexOf("/");
    const part = slash < 0 ? remaining : remaining.slice(0, slash);
    remaining = slash < 0 ? "" : remaining.slice(slash + 1);
    const next = join("/", current, part);
    if (next === "/") {
      current = "";
      continue;
    }
    const full = root + next;
    let isLink = false;
    try {
      isLink = (await Deno.lstat(full)).isSymlink;
    } catch (e) {
      if (!(e instanceof Deno.errors.NotFound || e instanceof Deno.errors.NotADirectory)) throw e;
    }
    if (!isLink) {
      current = next;
      continue;
    }
    if (++links > MAX_SYMLINKS) {
      throw new Error(`SecureJoin ${root}/${unsafePath}: too many levels of symbolic links`);
    }
    const dest = await Deno.readLink(full);
    remaining = `${dest}/${remaining}`;
    // An absolute link starts again from the root.
    if (isAbsolute(dest)) current = "";
  }
  const out = join(root, current);
  return out.length > 1 && out.endsWith("/") ? out.slice(0, -1) : out;
}

/** The ConfigMaps and Secrets one container's env refers to, each fetched once. */
class ObjectCache {
  readonly #configMaps = new Map<string, V1ConfigMap>();
  readonly #secrets = new Map<string, V1Secret>();

  constructor(
    readonly source: EnvSource | undefined,
    readonly namespace: string,
    readonly signal: AbortSignal | undefined,
  ) {}

  /** The ConfigMap; undefined only when it is missing and optional. */
  configMap(name: string, optional: boolean): Promise<V1ConfigMap | undefined> {
    return this.#get(
      this.#configMaps,
      "configMap",
      "configmap",
      name,
      optional,
      (s) => s.getConfigMap(this.namespace, name, this.signal),
    );
  }

  /** The Secret; undefined only when it is missing and optional. */
  secret(name: string, optional: boolean): Promise<V1Secret | undefined> {
    return this.#get(
      this.#secrets,
      "secret",
      "secret",
      name,
      optional,
      (s) => s.getSecret(this.namespace, name, this.signal),
    );
  }

  async #get<T>(
    cache: Map<string, T>,
    kind: string,
    resource: string,
    name: string,
    optional: boolean,
    fetch: (source: EnvSource) => Promise<T | undefined>,
  ): Promise<T | undefined> {
    const cached = cache.get(name);
    if (cached !== undefined) return cached;
    if (!this.source) {
      throw new EnvError(
        `couldn't get ${kind} ${this.namespace}/${name}, no kubeClient defined`,
      );
    }
    let obj: T | undefined;
    try {
      obj = await fetch(this.source);
    } catch (e) {
      this.signal?.throwIfAborted();
      throw new EnvError(e instanceof Error ? e.message : String(e), { cause: e });
    }
    if (obj === undefined) {
      if (optional) return undefined;
      // The message of the NotFound error upstream's watch-based managers return.
      throw new EnvError(`${resource} ${JSON.stringify(name)} not found`);
    }
    cache.set(name, obj);
    return obj;
  }
}

/** A Secret's base64 value as the string Go's `string([]byte)` gives, decoded as UTF-8. */
function decodeSecretValue(b64: string): string {
  const bin = atob(b64);
  const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
  return new TextDecoder().decode(bytes);
}

const DOWNWARD_API_FIELDS = new Set([
  "metadata.annotations",
  "metadata.labels",
  "metadata.name",
  "metadata.namespace",
  "metadata.uid",
  "spec.nodeName",
  "spec.restartPolicy",
  "spec.serviceAccountName",
  "spec.schedulerName",
  "status.phase",
  "status.hostIP",
  "status.hostIPs",
  "status.podIP",
  "status.podIPs",
]);

/** upstream podFieldSelectorRuntimeValue (with ConvertDownwardAPIFieldLabel and fieldpath). */
function podFieldSelectorRuntimeValue(
  apiVersion: string | undefined,
  fieldPath: string,
  pod: V1Pod,
  podIPs: readonly string[],
  hostIPs: readonly string[],
): string {
  // The apiserver defaults an empty apiVersion to v1; static pods may lack the default.
  const version = apiVersion || "v1";
  if (version !== "v1") throw new EnvError(`unsupported pod version: ${version}`);
  const sub = splitMaybeSubscriptedPath(fieldPath);
  let path = fieldPath;
  if (sub) {
    if (sub[0] !== "metadata.annotations" && sub[0] !== "metadata.labels") {
      throw new EnvError(`field label does not support subscript: ${fieldPath}`);
    }
  } else if (fieldPath === "spec.host") {
    path = "spec.nodeName";
  } else if (!DOWNWARD_API_FIELDS.has(fieldPath)) {
    throw new EnvError(`field label not supported: ${fieldPath}`);
  }

  const ips = sortPodIPs(podIPs, hostIPs);
  switch (path) {
    case "spec.nodeName":
      return pod.spec?.nodeName ?? "";
    case "spec.serviceAccountName":
      return pod.spec?.serviceAccountName ?? "";
    case "status.hostIP":
    case "status.hostIPs":
      if (hostIPs.length === 0) throw new EnvError("host IP unknown; known addresses: []");
      return path === "status.hostIP" ? hostIPs[0] ?? "" : hostIPs.join(",");
    case "status.podIP":
      return ips[0] ?? "";
    case "status.podIPs":
      return ips.join(",");
  }
  // The metadata fields, as upstream's default case calls fieldpath.ExtractFieldPathAsString.
  try {
    return extractFieldPathAsString(pod, path);
  } catch (e) {
    if (e instanceof DownwardApiError) throw new EnvError(e.message, { cause: e });
    throw e;
  }
}

/**
 * upstream sortPodIPs: at most one IP of each family, the node's primary family first
 * (upstream takes the family from the configured node IPs; here the first host IP).
 */
function sortPodIPs(podIPs: readonly string[], hostIPs: readonly string[]): string[] {
  const first = hostIPs[0];
  const v6First = first !== undefined && isIPv6(first);
  const [primary, secondary] = v6First ? [isIPv6, isIPv4] : [isIPv4, isIPv6];
  const out: string[] = [];
  const a = podIPs.find((ip) => primary(ip));
  if (a !== undefined) out.push(a);
  const b = podIPs.find((ip) => secondary(ip));
  if (b !== undefined) out.push(b);
  return out;
}

/** upstream containerResourceRuntimeValue over the limit-defaulted pod and container. */
function containerResourceRuntimeValue(
  fs: V1ResourceFieldSelector,
  pod: V1Pod,
  container: V1Container,
  allocatable: Readonly<Record<string, string>>,
): string {
  try {
    if (!fs.containerName) {
      return extractContainerResourceValue(
        fs,
        mergeContainerResourceLimits(container, allocatable),
      );
    }
    // As upstream, only regular containers of the pod get the defaulted limits.
    const regular = pod.spec?.containers?.find((c) => c.name === fs.containerName);
    const init = pod.spec?.initContainers?.find((c) => c.name === fs.containerName);
    if (regular) {
      return extractContainerResourceValue(fs, mergeContainerResourceLimits(regular, allocatable));
    }
    if (init) return extractContainerResourceValue(fs, init);
  } catch (e) {
    if (e instanceof DownwardApiError) throw new EnvError(e.message, { cause: e });
    throw e;
  }
  throw new EnvError(`container ${fs.containerName} not found`);
}
