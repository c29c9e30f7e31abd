/**
 * @module
 * The labels and annotations the kubelet puts on CRI pod sandboxes and containers, and the
 * parsing of them back when it lists what the runtime holds. Counterpart of upstream
 * `pkg/kubelet/kuberuntime/labels.go`, of `HashContainer` in `pkg/kubelet/container/helpers.go`
 * and of the label keys in `k8s.io/kubelet/pkg/types/labels.go` (read at v1.37.2; identical in
 * v1.36.3 apart from the newer `httpGet.protocol` field).
 *
 * The values must be byte-for-byte what the Go kubelet writes, because the same runtime may hold
 * containers that the Go kubelet started: a different `io.kubernetes.container.hash` would make
 * us restart every one of them. So the JSON in the preStop and ports annotations, and the JSON
 * inside the hash, follow Go's `encoding/json`: struct field order, `omitempty`, and its string
 * escaping (`<`, `>`, `&`, U+2028 and U+2029 escaped). Parsing follows `json.Unmarshal` into the
 * typed structs, and `strconv` for the numbers. Upstream logs what it cannot parse; here the
 * problems come back in a list for the caller to log.
 */

// Type-only, so nothing is loaded at run time; inline until deno.json maps the package.
import type {
  V1Container,
  V1ContainerPort,
  V1LifecycleHandler,
  V1Pod,
} from "@kubernetes/client-node";
import { goJsonString } from "../util/go_json.ts";
import { fnv1a32 } from "../util/fnv.ts";

/** Label with the pod's name, on sandboxes and containers. */
export const KUBERNETES_POD_NAME_LABEL = "io.kubernetes.pod.name";
/** Label with the pod's namespace, on sandboxes and containers. */
export const KUBERNETES_POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace";
/** Label with the pod's UID, on sandboxes and containers. */
export const KUBERNETES_POD_UID_LABEL = "io.kubernetes.pod.uid";
/** Label with the container's name. */
export const KUBERNETES_CONTAINER_NAME_LABEL = "io.kubernetes.container.name";
/** The container name that stands for a pod's sandbox ("infra") container. */
export const POD_INFRA_CONTAINER_NAME = "POD";

/** Annotation with the pod's `metadata.deletionGracePeriodSeconds`, when set. */
export const POD_DELETION_GRACE_PERIOD_LABEL = "io.kubernetes.pod.deletionGracePeriod";
/** Annotation with the pod's `spec.terminationGracePeriodSeconds`, when set. */
export const POD_TERMINATION_GRACE_PERIOD_LABEL = "io.kubernetes.pod.terminationGracePeriod";
/** Annotation with {@linkcode hashContainer} in lowercase hex. */
export const CONTAINER_HASH_LABEL = "io.kubernetes.container.hash";
/** Annotation with the restart count the container was started with. */
export const CONTAINER_RESTART_COUNT_LABEL = "io.kubernetes.container.restartCount";
/** Annotation with the container's `terminationMessagePath`. */
export const CONTAINER_TERMINATION_MESSAGE_PATH_LABEL =
  "io.kubernetes.container.terminationMessagePath";
/** Annotation with the container's `terminationMessagePolicy`. */
export const CONTAINER_TERMINATION_MESSAGE_POLICY_LABEL =
  "io.kubernetes.container.terminationMessagePolicy";
/** Annotation with the container's `lifecycle.preStop` handler as JSON. */
export const CONTAINER_PRE_STOP_HANDLER_LABEL = "io.kubernetes.container.preStopHandler";
/** Annotation with the container's `ports` as JSON. */
export const CONTAINER_PORTS_LABEL = "io.kubernetes.container.ports";

/** What a sandbox's labels say: the pod's own labels and its identity. */
export interface LabeledPodSandboxInfo {
  /** The pod's labels, without the three identity labels. */
  labels: Record<string, string>;
  podName: string;
  podNamespace: string;
  podUid: string;
}

/** What a sandbox's annotations say: the pod's annotations. */
export interface AnnotatedPodSandboxInfo {
  annotations: Record<string, string>;
}

/** What a container's labels say. Missing labels read as "", as upstream. */
export interface LabeledContainerInfo {
  containerName: string;
  podName: string;
  podNamespace: string;
  podUid: string;
}

/** What a container's annotations say. Missing or bad numbers read as 0, as upstream. */
export interface AnnotatedContainerInfo {
  hash: number;
  restartCount: number;
  podDeletionGracePeriod?: number;
  podTerminationGracePeriod?: number;
  terminationMessagePath: string;
  terminationMessagePolicy: string;
  preStopHandler?: V1LifecycleHandler;
  containerPorts?: V1ContainerPort[];
}

/** An annotation whose value could not be parsed; upstream logs these as errors. */
export interface LabelProblem {
  label: string;
  value: string;
  error: string;
}

/** The parts of upstream's `RunContainerOptions` that reach the annotations. */
export interface ContainerAnnotationOptions {
  /** Annotations from device plugins; the kubelet's own keys override them. */
  annotations?: readonly { name: string; value: string }[];
}

/** Sandbox labels: the pod's labels plus its name, namespace and UID. */
export function newPodLabels(pod: V1Pod): Record<string, string> {
  const labels = new Map(Object.entries(pod.metadata?.labels ?? {}));
  labels.set(KUBERNETES_POD_NAME_LABEL, pod.metadata?.name ?? "");
  labels.set(KUBERNETES_POD_NAMESPACE_LABEL, pod.metadata?.namespace ?? "");
  labels.set(KUBERNETES_POD_UID_LABEL, pod.metadata?.uid ?? "");
  return Object.fromEntries(labels);
}

/** Sandbox annotations: the pod's annotations, copied. */
export function newPodAnnotations(pod: V1Pod): Record<string, string> {
  return Object.fromEntries(Object.entries(pod.metadata?.annotations ?? {}));
}

/** Container labels: the pod's identity and the container's name, nothing else. */
export function newContainerLabels(container: V1Container, pod: V1Pod): Record<string, string> {
  return Object.fromEntries([
    [KUBERNETES_POD_NAME_LABEL, pod.metadata?.name ?? ""],
    [KUBERNETES_POD_NAMESPACE_LABEL, pod.metadata?.namespace ?? ""],
    [KUBERNETES_POD_UID_LABEL, pod.metadata?.uid ?? ""],
    [KUBERNETES_CONTAINER_NAME_LABEL, container.name],
  ]);
}

/** Container annotations: hash, restart count, termination settings, preStop and ports. */
export function newContainerAnnotations(
  container: V1Container,
  pod: V1Pod,
  restartCount: number,
  opts: ContainerAnnotationOptions = {},
): Record<string, string> {
  const annotations = new Map<string, string>();
  for (const a of opts.annotations ?? []) annotations.set(a.name, a.value);

  annotations.set(CONTAINER_HASH_LABEL, hashContainer(container).toString(16));
  annotations.set(CONTAINER_RESTART_COUNT_LABEL, formatGoInt(restartCount));
  annotations.set(CONTAINER_TERMINATION_MESSAGE_PATH_LABEL, container.terminationMessagePath ?? "");
  annotations.set(
    CONTAINER_TERMINATION_MESSAGE_POLICY_LABEL,
    container.terminationMessagePolicy ?? "",
  );
  const deletionGrace = pod.metadata?.deletionGracePeriodSeconds;
  if (deletionGrace != null) {
    annotations.set(POD_DELETION_GRACE_PERIOD_LABEL, formatGoInt(deletionGrace));
  }
  const terminationGrace = pod.spec?.terminationGracePeriodSeconds;
  if (terminationGrace != null) {
    annotations.set(POD_TERMINATION_GRACE_PERIOD_LABEL, formatGoInt(terminationGrace));
  }
  const preStop = container.lifecycle?.preStop;
  if (preStop != null) {
    annotations.set(CONTAINER_PRE_STOP_HANDLER_LABEL, encodeGoJson(preStop, LIFECYCLE_HANDLER));
  }
  if (container.ports != null && container.ports.length > 0) {
    annotations.set(
      CONTAINER_PORTS_LABEL,
      encodeGoJson(container.ports, { slice: CONTAINER_PORT }),
    );
  }
  return Object.fromEntries(annotations);
}

/** Reads a sandbox's labels back into the pod's identity and its own labels. */
export function getPodSandboxInfoFromLabels(
  labels: Readonly<Record<string, string>>,
): LabeledPodSandboxInfo {
  const identity = [
    KUBERNETES_POD_NAME_LABEL,
    KUBERNETES_POD_NAMESPACE_LABEL,
    KUBERNETES_POD_UID_LABEL,
  ];
  return {
    labels: Object.fromEntries(Object.entries(labels).filter(([k]) => !identity.includes(k))),
    podName: lookup(labels, KUBERNETES_POD_NAME_LABEL) ?? "",
    podNamespace: lookup(labels, KUBERNETES_POD_NAMESPACE_LABEL) ?? "",
    podUid: lookup(labels, KUBERNETES_POD_UID_LABEL) ?? "",
  };
}

/** Reads a sandbox's annotations back: they are the pod's annotations. */
export function getPodSandboxInfoFromAnnotations(
  annotations: Readonly<Record<string, string>>,
): AnnotatedPodSandboxInfo {
  return { annotations: { ...annotations } };
}

/** Reads a container's labels back. */
export function getContainerInfoFromLabels(
  labels: Readonly<Record<string, string>>,
): LabeledContainerInfo {
  return {
    containerName: lookup(labels, KUBERNETES_CONTAINER_NAME_LABEL) ?? "",
    podName: lookup(labels, KUBERNETES_POD_NAME_LABEL) ?? "",
    podNamespace: lookup(labels, KUBERNETES_POD_NAMESPACE_LABEL) ?? "",
    podUid: lookup(labels, KUBERNETES_POD_UID_LABEL) ?? "",
  };
}

/**
 * Reads a container's annotations back. A value that does not parse leaves its field at the
 * zero value (or absent) and adds a problem, exactly where upstream logs an error.
 */
export function getContainerInfoFromAnnotations(
  annotations: Readonly<Record<string, string>>,
): { info: AnnotatedContainerInfo; problems: LabelProblem[] } {
  const problems: LabelProblem[] = [];
  function parse<T>(label: string, parser: (value: string) => T): T | undefined {
    const value = lookup(annotations, label);
    if (value === undefined) return undefined;
    try {
      return parser(value);
    } catch (e) {
      problems.push({ label, value, error: e instanceof Error ? e.message : String(e) });
      return undefined;
    }
  }

  const info: AnnotatedContainerInfo = {
    hash: parse(CONTAINER_HASH_LABEL, parseGoUint16) ?? 0,
    restartCount: parse(CONTAINER_RESTART_COUNT_LABEL, (v) => parseGoInt(v, "strconv.Atoi")) ?? 0,
    terminationMessagePath: lookup(annotations, CONTAINER_TERMINATION_MESSAGE_PATH_LABEL) ?? "",
    terminationMessagePolicy: lookup(annotations, CONTAINER_TERMINATION_MESSAGE_POLICY_LABEL) ??
      "",
  };
  const parseInt64 = (v: string) => parseGoInt(v, "strconv.ParseInt");
  const deletionGrace = parse(POD_DELETION_GRACE_PERIOD_LABEL, parseInt64);
  if (deletionGrace !== undefined) info.podDeletionGracePeriod = deletionGrace;
  const terminationGrace = parse(POD_TERMINATION_GRACE_PERIOD_LABEL, parseInt64);
  if (terminationGrace !== undefined) info.podTerminationGracePeriod = terminationGrace;
  const preStop = parse(
    CONTAINER_PRE_STOP_HANDLER_LABEL,
    (v) => decodeGoJson(v, LIFECYCLE_HANDLER),
  );
  if (preStop !== undefined) info.preStopHandler = preStop as V1LifecycleHandler;
  // `null` decodes to a nil slice, which upstream stores as "no ports".
  const ports = parse(CONTAINER_PORTS_LABEL, (v) => decodeGoJson(v, { slice: CONTAINER_PORT }));
  if (ports != null) info.containerPorts = ports as V1ContainerPort[];
  return { info, problems };
}

/**
 * The container hash upstream stores in {@linkcode CONTAINER_HASH_LABEL}: FNV-1a 32 over
 * `spew.Sprintf("%#v", json.Marshal(map[string]string{"name": …, "image": …}))`, which spew
 * prints as `([]uint8)[` + the JSON's bytes in decimal, space separated + `]`. Only the name and
 * the image are hashed, because they are the only container fields a pod update may change.
 */
export function hashContainer(container: Pick<V1Container, "name" | "image">): number {
  // encoding/json sorts map keys, so "image" comes before "name".
  const json = `{"image":${goJsonString((container.image ?? "").toWellFormed())},"name":${
    goJsonString((container.name ?? "").toWellFormed())
  }}`;
  const bytes = new TextEncoder().encode(json);
  return fnv1a32(new TextEncoder().encode(`([]uint8)[${bytes.join(" ")}]`));
}

function lookup(record: Readonly<Record<string, string>>, key: string): string | undefined {
  return Object.hasOwn(record, key) ? record[key] : undefined;
}

// --- strconv ---

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;
const UINT64_MAX = 2n ** 64n - 1n;

/** `strconv.FormatInt(v, 10)` for a number that holds a Go integer. */
function formatGoInt(value: number): string {
  return Number.isFinite(value) ? BigInt(Math.trunc(value)).toString() : "0";
}

/** `strconv.Atoi` / `strconv.ParseInt(s, 10, 64)`: optional sign, decimal digits, int64 range. */
function parseGoInt(text: string, fn: string): number {
  if (!/^[+-]?[0-9]+$/.test(text)) {
    throw new Error(`${fn}: parsing ${goQuote(text)}: invalid syntax`);
  }
  const value = BigInt(text);
  if (value < INT64_MIN || value > INT64_MAX) {
    throw new Error(`${fn}: parsing ${goQuote(text)}: value out of range`);
  }
  return Number(value);
}

/** `strconv.ParseUint(s, 16, 64)`: hex digits only (no sign, no 0x), uint64 range. */
function parseGoUint16(text: string): number {
  const fn = "strconv.ParseUint";
  if (!/^[0-9a-fA-F]+$/.test(text)) {
    throw new Error(`${fn}: parsing ${goQuote(text)}: invalid syntax`);
  }
  const value = BigInt(`0x${text}`);
  if (value > UINT64_MAX) throw new Error(`${fn}: parsing ${goQuote(text)}: value out of range`);
  // Above 2^53 precision is lost, which cannot matter: hashes are below 2^32.
  return Number(value);
}

function goQuote(text: string): string {
  return JSON.stringify(text);
}

// --- encoding/json, for the few k8s.io/api/core/v1 structs that reach the annotations ---

/** A Go type as encoding/json sees it. */
type GoType =
  | "string"
  | "int32"
  | "int64"
  | "intOrString"
  | { slice: GoType }
  | { ptr: GoType }
  | { struct: readonly GoField[] };

/** A struct field in Go declaration order: JSON name, type, and whether it is `omitempty`. */
type GoField = readonly [name: string, type: GoType, omitEmpty: boolean];

const STRING_PTR: GoType = { ptr: "string" };
const EXEC_ACTION: GoType = { struct: [["command", { slice: "string" }, true]] };
const HTTP_HEADER: GoType = { struct: [["name", "string", false], ["value", "string", false]] };
const HTTP_GET_ACTION: GoType = {
  struct: [
    ["path", "string", true],
    ["port", "intOrString", false],
    ["host", "string", true],
    ["scheme", "string", true],
    ["httpHeaders", { slice: HTTP_HEADER }, true],
    ["protocol", STRING_PTR, true], // new in v1.37 (H2CContainerProbe)
  ],
};
const TCP_SOCKET_ACTION: GoType = {
  struct: [["port", "intOrString", false], ["host", "string", true]],
};
const SLEEP_ACTION: GoType = { struct: [["seconds", "int64", false]] };
const LIFECYCLE_HANDLER: GoType = {
  struct: [
    ["exec", { ptr: EXEC_ACTION }, true],
    ["httpGet", { ptr: HTTP_GET_ACTION }, true],
    ["tcpSocket", { ptr: TCP_SOCKET_ACTION }, true],
    ["sleep", { ptr: SLEEP_ACTION }, true],
  ],
};
const CONTAINER_PORT: GoType = {
  struct: [
    ["name", "string", true],
    ["hostPort", "int32", true],
    ["containerPort", "int32", false],
    ["protocol", "string", true],
    ["hostIP", "string", true],
  ],
};

/** Go's `omitempty` test: "", 0, nil and empty slices are empty; structs never are. */
function isGoEmpty(value: unknown, type: GoType): boolean {
  if (type === "intOrString" || (typeof type === "object" && "struct" in type)) return false;
  if (value == null) return true;
  return Array.isArray(value) ? value.length === 0 : value === "" || value === 0;
}

/** `json.Marshal` of `value` read as the Go type `type`; unknown properties are dropped. */
function encodeGoJson(value: unknown, type: GoType): string {
  // A lone surrogate reached Go as U+FFFD (its JSON decoder replaced it), so hash that.
  if (type === "string") return goJsonString(typeof value === "string" ? value.toWellFormed() : "");
  if (type === "int32" || type === "int64") {
    return typeof value === "number" ? formatGoInt(value) : "0";
  }
  if (type === "intOrString") {
    return typeof value === "string"
      ? goJsonString(value.toWellFormed())
      : encodeGoJson(value, "int32");
  }
  if ("slice" in type) {
    return Array.isArray(value)
      ? `[${value.map((v) => encodeGoJson(v, type.slice)).join(",")}]`
      : "null";
  }
  if ("ptr" in type) return value == null ? "null" : encodeGoJson(value, type.ptr);
  const record = (value ?? {}) as Record<string, unknown>;
  const members = type.struct
    .filter(([name, fieldType, omitEmpty]) => !(omitEmpty && isGoEmpty(record[name], fieldType)))
    .map(([name, fieldType]) => `${goJsonString(name)}:${encodeGoJson(record[name], fieldType)}`);
  return `{${members.join(",")}}`;
}

/**
 * `json.Unmarshal` into the Go type `type`: keys match exactly or else case-insensitively,
 * unknown keys are ignored, `null` leaves a field at its zero value, and a value of the wrong
 * kind is an error. Fields Go would hold at their zero value are present only when required by
 * the client-node types (e.g. `containerPort`, `port`). One leniency Go lacks: JSON.parse cannot
 * tell `80.0` or `8e1` from `80`, which Go rejects for an integer field.
 */
function decodeGoJson(text: string, type: GoType): unknown {
  return decodeValue(JSON.parse(text), type, "");
}

function decodeValue(value: unknown, type: GoType, path: string): unknown {
  if (value === null) {
    // Go leaves the target untouched (its zero value) and sets pointers and slices to nil;
    // IntOrString's own UnmarshalJSON turns null into the integer 0.
    if (type === "string") return "";
    if (typeof type === "string") return 0;
    if ("struct" in type) return decodeValue({}, type, path);
    return undefined;
  }
  const mismatch = () => {
    const kind = Array.isArray(value) ? "array" : typeof value;
    const goType = typeof type === "string" ? type : Object.keys(type)[0];
    return new Error(
      `json: cannot unmarshal ${kind} into Go value ${path || "."} of type ${goType}`,
    );
  };
  if (type === "string") {
    if (typeof value !== "string") throw mismatch();
    return value;
  }
  if (type === "int32" || type === "int64" || type === "intOrString") {
    if (type === "intOrString" && typeof value === "string") return value;
    const limit = type === "int64" ? 2 ** 63 : 2 ** 31;
    if (typeof value !== "number" || !Number.isInteger(value) || value < -limit || value >= limit) {
      throw mismatch();
    }
    return value;
  }
  if ("slice" in type) {
    if (!Array.isArray(value)) throw mismatch();
    return value.map((v, i) => decodeValue(v, type.slice, `${path}[${i}]`));
  }
  if ("ptr" in type) return decodeValue(value, type.ptr, path);
  if (typeof value !== "object" || Array.isArray(value)) throw mismatch();
  const out: Record<string, unknown> = {};
  for (const [name, fieldType, omitEmpty] of type.struct) {
    if (!omitEmpty && typeof fieldType === "string") out[name] = fieldType === "string" ? "" : 0;
  }
  for (const [key, v] of Object.entries(value)) {
    const field = type.struct.find(([name]) => name === key) ??
      type.struct.find(([name]) => name.toLowerCase() === key.toLowerCase());
    if (field === undefined || v === null) continue;
    const decoded = decodeValue(v, field[1], `${path}.${field[0]}`);
    if (decoded !== undefined) out[field[0]] = decoded;
  }
  return out;
}
