/**
 * @module
 * The downward API as volumes see it: a pod field (`fieldRef`: metadata name, namespace, uid,
 * labels, annotations, or one label or annotation by key) or a container resource
 * (`resourceFieldRef`, with node allocatable standing in for missing limits) rendered as the
 * text of a file. Used by `downward_api.ts` and `projected.ts`. `kubelet_env.ts`
 * resolves the same selectors for environment variables with its own private copy (env also
 * allows `spec.*` and `status.*` fields, volumes do not). Corresponds to upstream
 * `pkg/fieldpath/fieldpath.go` (FormatMap, ExtractFieldPathAsString,
 * SplitMaybeSubscriptedPath) and `pkg/api/v1/resource/helpers.go`
 * (ExtractResourceValueByContainerNameAndNodeAllocatable, MergeContainerResourceLimits,
 * ExtractContainerResourceValue).
 */

import type { V1Container, V1Pod, V1ResourceFieldSelector } from "@kubernetes/client-node";
import { goQuote } from "../klog/encode.ts";
import { type Dec, milliValueOf, parseDec, valueOf } from "../qos/resource_helpers.ts";

/** A selector that cannot be resolved; the message is upstream's. */
export class DownwardApiError extends Error {
  override name = "DownwardApiError";
}

/**
 * Upstream FormatMap: one `key="value"` line per entry, sorted by key, values quoted as Go's
 * `%q` (strconv.Quote) quotes them, no trailing newline.
 */
export function formatMap(m: Readonly<Record<string, string>> | undefined): string {
  const keys = Object.keys(m ?? {}).sort(compareBytes);
  return keys.map((k) => `${k}=${goQuote(m?.[k] ?? "")}`).join("\n");
}

/** Upstream SplitMaybeSubscriptedPath: `metadata.labels['k']` → `["metadata.labels", "k"]`. */
export function splitMaybeSubscriptedPath(fieldPath: string): [string, string] | undefined {
  if (!fieldPath.endsWith("']")) return undefined;
  const s = fieldPath.slice(0, -2);
  const i = s.indexOf("['");
  if (i <= 0) return undefined;
  return [s.slice(0, i), s.slice(i + 2)];
}

/**
 * Upstream ExtractFieldPathAsString for a pod: `metadata.name`, `metadata.namespace`,
 * `metadata.uid`, `metadata.labels` and `metadata.annotations` (as {@link formatMap}), and
 * `metadata.labels['k']` / `metadata.annotations['k']` (empty when the key is absent).
 */
export function extractFieldPathAsString(pod: V1Pod, fieldPath: string): string {
  const meta = pod.metadata ?? {};
  const sub = splitMaybeSubscriptedPath(fieldPath);
  if (sub !== undefined) {
    const [path, key] = sub;
    if (path !== "metadata.annotations" && path !== "metadata.labels") {
      throw new DownwardApiError(`fieldPath ${goQuote(fieldPath)} does not support subscript`);
    }
    // Annotation keys may use upper case; upstream validates their lower-cased form.
    const errs = qualifiedNameErrors(path === "metadata.annotations" ? key.toLowerCase() : key);
    if (errs.length > 0) {
      throw new DownwardApiError(`invalid key subscript in ${fieldPath}: ${errs.join(";")}`);
    }
    return (path === "metadata.annotations" ? meta.annotations : meta.labels)?.[key] ?? "";
  }
  switch (fieldPath) {
    case "metadata.annotations":
      return formatMap(meta.annotations);
    case "metadata.labels":
      return formatMap(meta.labels);
    case "metadata.name":
      return meta.name ?? "";
    case "metadata.namespace":
      return meta.namespace ?? "";
    case "metadata.uid":
      return meta.uid ?? "";
  }
  throw new DownwardApiError(`unsupported fieldPath: ${fieldPath}`);
}

/** The limits that default to node allocatable (hugepages are never overcommitted). */
const DEFAULTED_LIMITS = ["cpu", "memory", "ephemeral-storage"] as const;

/**
 * Upstream MergeContainerResourceLimits: a copy of the container whose missing or zero cpu,
 * memory and ephemeral-storage limits are node allocatable's.
 */
export function mergeContainerResourceLimits(
  container: V1Container,
  allocatable: Readonly<Record<string, string>>,
): V1Container {
  const limits: Record<string, string> = { ...container.resources?.limits };
  for (const name of DEFAULTED_LIMITS) {
    const have = limits[name];
    if (have !== undefined && parseQuantity(String(have)).n !== 0n) continue;
    const cap = allocatable[name];
    if (cap !== undefined) limits[name] = cap;
  }
  return { ...container, resources: { ...container.resources, limits } };
}

/**
 * Upstream ExtractResourceValueByContainerNameAndNodeAllocatable: the named container (regular
 * first, then init) with limits defaulted to `allocatable`, then
 * {@link extractContainerResourceValue}.
 */
export function extractResourceValueByContainerNameAndNodeAllocatable(
  fs: V1ResourceFieldSelector,
  pod: V1Pod,
  containerName: string,
  allocatable: Readonly<Record<string, string>>,
): string {
  const container = pod.spec?.containers?.find((c) => c.name === containerName) ??
    pod.spec?.initContainers?.find((c) => c.name === containerName);
  if (container === undefined) throw new DownwardApiError(`container ${containerName} not found`);
  return extractContainerResourceValue(fs, mergeContainerResourceLimits(container, allocatable));
}

/**
 * Upstream ExtractContainerResourceValue: `limits.*` or `requests.*` of cpu (in millis),
 * memory, ephemeral-storage or hugepages-<size>, divided by the divisor (default 1) and rounded
 * up; a missing amount is 0.
 */
export function extractContainerResourceValue(
  fs: V1ResourceFieldSelector,
  container: V1Container,
): string {
  let divisor = parseQuantity(fs.divisor === undefined ? "0" : String(fs.divisor));
  if (divisor.n === 0n) divisor = { n: 1n, s: 0 };
  const dot = fs.resource.indexOf(".");
  const kind = fs.resource.slice(0, dot);
  const name = fs.resource.slice(dot + 1);
  const known = name === "cpu" || name === "memory" || name === "ephemeral-storage" ||
    name.startsWith("hugepages-");
  if (dot < 0 || (kind !== "limits" && kind !== "requests") || !known) {
    throw new DownwardApiError(`unsupported container resource : ${fs.resource}`);
  }
  const list = kind === "limits" ? container.resources?.limits : container.resources?.requests;
  const raw = list?.[name];
  const amount = raw === undefined ? undefined : parseQuantity(String(raw));
  if (name === "cpu") return ceilDiv(milliValueOf(amount), milliValueOf(divisor));
  return ceilDiv(valueOf(amount), valueOf(divisor));
}

function parseQuantity(text: string): Dec {
  try {
    return parseDec(text);
  } catch (err) {
    throw new DownwardApiError(err instanceof Error ? err.message : String(err), { cause: err });
  }
}

/** `int64(math.Ceil(float64(a) / float64(b)))`, exactly. */
function ceilDiv(a: bigint, b: bigint): string {
  if (b === 0n) throw new DownwardApiError("divisor rounds to zero");
  const q = a / b;
  return String(a % b !== 0n && (a < 0n) === (b < 0n) ? q + 1n : q);
}

/** Go's string ordering: by UTF-8 bytes (code points), not UTF-16 units. */
function compareBytes(a: string, b: string): number {
  const x = [...a];
  const y = [...b];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = (x[i]?.codePointAt(0) ?? 0) - (y[i]?.codePointAt(0) ?? 0);
    if (d !== 0) return d;
  }
  return x.length - y.length;
}

const QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME = new RegExp(`^${QUALIFIED_NAME_FMT}$`);
const QUALIFIED_NAME_MSG = "must consist of alphanumeric characters, '-', '_' or '.', and must " +
  "start and end with an alphanumeric character (e.g. 'MyName', or 'my.name', or '123-abc', " +
  `regex used for validation is '${QUALIFIED_NAME_FMT}')`;
const DNS1123_SUBDOMAIN_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN = new RegExp(`^${DNS1123_SUBDOMAIN_FMT}$`);

/** Upstream validation.IsQualifiedName: its messages, empty when `value` is valid. */
function qualifiedNameErrors(value: string): string[] {
  const parts = value.split("/");
  if (parts.length > 2) {
    return [
      `a qualified name ${QUALIFIED_NAME_MSG} with an optional DNS subdomain prefix and '/' ` +
      "(e.g. 'example.com/MyName')",
    ];
  }
  const errs: string[] = [];
  const name = parts.length === 2 ? parts[1] ?? "" : value;
  if (parts.length === 2) {
    const prefix = parts[0] ?? "";
    if (prefix === "") errs.push("prefix part must be non-empty");
    else if (prefix.length > 253) errs.push("prefix part must be no more than 253 characters");
    else if (!DNS1123_SUBDOMAIN.test(prefix)) {
      errs.push(
        "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric " +
          "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. " +
          `'example.com', regex used for validation is '${DNS1123_SUBDOMAIN_FMT}')`,
      );
    }
  }
  if (name === "") errs.push("name part must be non-empty");
  else if (name.length > 63) errs.push("name part must be no more than 63 characters");
  if (!QUALIFIED_NAME.test(name)) errs.push(`name part ${QUALIFIED_NAME_MSG}`);
  return errs;
}
