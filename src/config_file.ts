/**
 * @module
 * The static pod file source of PodConfig: reads `staticPodPath` (a directory of manifests, or
 * one manifest file), turns each manifest into a v1 Pod with upstream's defaults, and hands the
 * whole set to `onUpdate` whenever it changes, as upstream's `PodUpdate{Op: SET, Source: "file"}`.
 * It rescans every `fileCheckFrequency` on the injected clock and, between scans, on inotify
 * events from `Deno.watchFs`.
 *
 * Corresponds to upstream `pkg/kubelet/config/file.go` and `file_linux.go`, with the decoding and
 * validation of `common.go` (`tryDecodeSinglePod`); the defaults live in `_static_pod_defaults.ts`.
 * Upstream behaviour kept on purpose:
 *
 * - In a directory, every entry whose name does not start with "." is a manifest; directories are
 *   not recursed into. Each file holds one Pod (`apiVersion: v1`, `kind: Pod`; a PodList is
 *   refused, as the file source only tries a single pod); YAML is read as YAML 1.1, a file
 *   starting with "{" as JSON; only the first YAML document counts; unknown fields are dropped
 *   (the decoder is not strict), and each dropped field is named in one warning.
 * - A manifest that cannot be read, decoded or validated is left out of the set with one error.
 *   A periodic scan drops its previous pod; an inotify-triggered scan keeps it (upstream applies
 *   watch events per file and ignores an event whose file no longer parses).
 * - When `staticPodPath` is one file that is bad, or the path cannot be read, the set is kept.
 *   A path that does not exist is an empty set.
 * - Of two manifests with the same namespace and name, the later file (in name order) wins;
 *   here the one it replaces is also reported as a problem.
 * - Validation is the part of `ValidatePodCreate` a kubelet relies on (names, containers, images,
 *   ports, volumes and their mounts, policies), then PreventStaticPodAPIReferences (beta, on by
 *   default since 1.34): no service account, secret, config map, claim or CSI volume.
 *
 * Differences: the UID hashes a JSON print of the pod rather than go-spew's (see
 * `_static_pod_defaults.ts`), so it is stable here but not equal to the Go kubelet's; problems are
 * logged once until they change, where upstream logs them at every scan; the set is handed on
 * only when it changes (upstream sends every scan and lets PodConfig drop repeats); the inotify
 * debounce waits on wall time. The `config.source` and `config.seen` annotations are added here,
 * as this codebase has no PodConfig merge yet (upstream's `podStorage.merge` adds them);
 * `config.seen` keeps the first time a UID was seen for as long as the UID stays in the set.
 */

import type {
  V1Container,
  V1EphemeralContainer,
  V1Pod,
  V1PodSpec,
  V1Volume,
} from "@kubernetes/client-node";
import { type Document, isMap, isScalar, isSeq, LineCounter, parseAllDocuments } from "yaml";
import type { Clock } from "./clock.ts";
import { kobj, type Logger } from "./klog.ts";
import {
  applyStaticPodDefaults,
  canonicalJSON,
  CONFIG_FIRST_SEEN_ANNOTATION_KEY,
  CONFIG_SOURCE_ANNOTATION_KEY,
  fnv128a,
  setPodDefaults,
  VOLUME_SOURCES,
} from "./_static_pod_defaults.ts";

export {
  CONFIG_FIRST_SEEN_ANNOTATION_KEY,
  CONFIG_HASH_ANNOTATION_KEY,
  CONFIG_MIRROR_ANNOTATION_KEY,
  CONFIG_SOURCE_ANNOTATION_KEY,
} from "./_static_pod_defaults.ts";

/** `kubetypes.FileSource`: the source name of static pods read from files. */
export const FILE_SOURCE = "file";

/** Upstream's `maxConfigLength`: a manifest may hold at most 10 MiB. */
export const MAX_MANIFEST_BYTES = 10 * 1024 * 1024;

/** A manifest left out of the set: the file, the line and field where known, the bad value. */
export class StaticPodManifestError extends Error {
  override name = "StaticPodManifestError";
  constructor(
    readonly file: string,
    readonly line: number | undefined,
    /** The field path, such as `spec.containers[0].name`; empty for the file as a whole. */
    readonly path: string,
    /** The offending value, or undefined when the field is missing. */
    readonly value: unknown,
    readonly problem: string,
  ) {
    const where = line === undefined ? file : `${file}:${line}`;
    const what = path === "" ? problem : `field '${path}' ${problem}`;
    super(`${where}: ${what}${value === undefined ? "" : `: current value is ${show(value)}`}`);
  }
}

/** One entry of the problems that {@link StaticPodFileSource} reports with each set. */
export type StaticPodProblem = StaticPodManifestError;

/** What {@link staticPodFromManifest} makes of a manifest. */
export interface StaticPodManifest {
  readonly pod: V1Pod;
  /** Unknown fields that were dropped and YAML documents after the first, which are ignored. */
  readonly ignored: readonly string[];
}

type Path = readonly (string | number)[];

interface FieldError {
  readonly path: Path;
  readonly value?: unknown;
  readonly problem: string;
}

function show(value: unknown): string {
  if (typeof value === "string") return `'${value}'`;
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

function pathText(path: Path): string {
  return path.reduce<string>(
    (s, seg) => typeof seg === "number" ? `${s}[${seg}]` : s === "" ? seg : `${s}.${seg}`,
    "",
  );
}

// ---- Decoding ----------------------------------------------------------------------------------

/**
 * Turns one manifest into the pod the file source would run: decoded, defaulted as
 * `applyDefaults` does for `file` on node `nodeName`, and validated. Throws
 * {@link StaticPodManifestError} naming the first problem (and how many more there are).
 */
export function staticPodFromManifest(
  text: string,
  file: string,
  nodeName: string,
): StaticPodManifest {
  const src = new ManifestText(text, file);
  const raw = src.parse();
  const ignored: string[] = [...src.ignoredDocuments];
  if (raw === null || raw === undefined) {
    throw src.error({
      path: [],
      problem: "is empty: it must hold one Pod (Object 'Kind' is missing)",
    });
  }
  if (typeof raw !== "object" || Array.isArray(raw)) {
    throw src.error({ path: [], value: raw, problem: "must hold one Pod object" });
  }
  const obj = raw as Record<string, unknown>;
  if (obj.kind === undefined || obj.kind === null || obj.kind === "") {
    throw src.error({ path: ["kind"], problem: "is required (Object 'Kind' is missing)" });
  }
  if (obj.apiVersion === undefined || obj.apiVersion === null || obj.apiVersion === "") {
    throw src.error({ path: ["apiVersion"], problem: "is required" });
  }
  if (obj.kind !== "Pod" || obj.apiVersion !== "v1") {
    const field = obj.kind !== "Pod" ? "kind" : "apiVersion";
    throw src.error({
      path: [field],
      value: obj[field],
      problem: "must be 'Pod' with apiVersion 'v1' (a static pod manifest holds exactly one Pod)",
    });
  }
  try {
    decodeShape(obj, POD, [], ignored);
  } catch (err) {
    if (err instanceof ShapeError) throw src.error(err.field);
    throw err;
  }
  const pod = obj as V1Pod;
  if (!pod.metadata?.name) {
    throw src.error({
      path: ["metadata", "name"],
      problem: "is required (name is needed for the pod)",
    });
  }
  pod.spec ??= { containers: [] };
  pod.spec.containers ??= [];
  setPodDefaults(pod);
  applyStaticPodDefaults(pod, file, nodeName);
  const errors = validatePod(pod);
  if (errors.length > 0) throw src.error(errors[0]!, errors.slice(1));
  const ref = apiObjectReference(pod);
  if (ref) throw src.error(ref);
  return { pod, ignored };
}

/** The manifest's text, its parsed form, and the line of any field path. */
class ManifestText {
  readonly ignoredDocuments: string[] = [];
  #doc: Document | undefined;
  #lines = new LineCounter();
  #json: boolean;

  constructor(readonly text: string, readonly file: string) {
    // utilyaml.ToJSON passes text that starts with "{" through as JSON.
    this.#json = /^\s*\{/.test(text);
  }

  parse(): unknown {
    if (this.#json) {
      try {
        return JSON.parse(this.text);
      } catch (err) {
        this.#parseYAML(this.text, "1.2");
        const line = this.#doc?.errors[0]?.linePos?.[0].line;
        throw fileProblem(this.file, `is not valid JSON: ${msg(err)}`, line);
      }
    }
    const docs = this.#parseYAML(this.text, "1.1");
    const doc = this.#doc;
    if (!doc) return null;
    const bad = doc.errors[0];
    if (bad) {
      const line = bad.linePos?.[0].line;
      const reason = bad.message.split("\n")[0]!.replace(/ at line \d+, column \d+:?$/, "");
      throw fileProblem(this.file, `is not valid YAML: ${reason}`, line);
    }
    for (let i = 1; i < docs; i++) this.ignoredDocuments.push(`YAML document ${i + 1}`);
    try {
      return doc.toJS({ maxAliasCount: 100 });
    } catch (err) {
      throw fileProblem(this.file, `is not valid YAML: ${msg(err)}`);
    }
  }

  /** Parses into #doc (the first document) and returns how many non-empty documents there are. */
  #parseYAML(text: string, version: "1.1" | "1.2"): number {
    const docs = parseAllDocuments(text, {
      version,
      lineCounter: this.#lines,
      uniqueKeys: false,
      merge: true,
      // go-yaml v2 leaves timestamps and 1:30-style sexagesimals as strings.
      customTags: (tags) =>
        tags.filter((t) =>
          !(typeof t === "object" &&
            (t.tag === "tag:yaml.org,2002:timestamp" || t.format === "TIME"))
        ),
    });
    const all = Array.isArray(docs) ? docs : [];
    this.#doc = all[0];
    return all.filter((d) => d.contents !== null).length;
  }

  error(first: FieldError, more: readonly FieldError[] = []): StaticPodManifestError {
    let problem = first.problem;
    if (more.length > 0) {
      const others = more.slice(0, 3).map((e) => `'${pathText(e.path)}'`).join(", ");
      problem += ` (and ${more.length} more: ${others}${more.length > 3 ? ", ..." : ""})`;
    }
    return new StaticPodManifestError(
      this.file,
      this.lineOf(first.path),
      pathText(first.path),
      first.value,
      problem,
    );
  }

  /** The line of the deepest node of `path` that the document has (keys give their own line). */
  lineOf(path: Path): number | undefined {
    if (this.#json && !this.#doc) this.#parseYAML(this.text, "1.2");
    const lineAt = (n: unknown) => {
      const range = (n as { range?: [number, number, number] } | null)?.range;
      return range ? this.#lines.linePos(range[0]).line : undefined;
    };
    let node: unknown = this.#doc?.contents;
    let line = lineAt(node);
    for (const seg of path) {
      if (isMap(node)) {
        const pair = node.items.find((p) =>
          String(isScalar(p.key) ? p.key.value : p.key) === String(seg)
        );
        if (!pair) break;
        line = lineAt(pair.key) ?? line;
        node = pair.value;
      } else if (isSeq(node) && typeof seg === "number" && node.items[seg]) {
        node = node.items[seg];
        line = lineAt(node) ?? line;
      } else break;
    }
    return line;
  }
}

function asRecord(o: object): Record<string, unknown> {
  return o as Record<string, unknown>;
}

/** A problem with a manifest file as a whole. */
function fileProblem(file: string, problem: string, line?: number): StaticPodManifestError {
  return new StaticPodManifestError(file, line, "", undefined, problem);
}

function msg(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

// ---- Shapes: type checks and unknown-field pruning ---------------------------------------------

/**
 * The expected shape of a field. Objects marked `closed` lose unknown fields (the Go decoder
 * ignores them); open objects keep fields not listed. Null counts as absent, as in Go.
 */
type Shape =
  | "string"
  | "bool"
  | "int"
  | "intOrString"
  | "strings"
  | "quantities"
  | "any"
  | { readonly fields: Readonly<Record<string, Shape>>; readonly closed?: boolean }
  | { readonly list: Shape };

class ShapeError extends Error {
  constructor(readonly field: FieldError) {
    super(field.problem);
  }
}

function decodeShape(value: unknown, shape: Shape, path: Path, ignored: string[]): unknown {
  const fail = (want: string): never => {
    throw new ShapeError({ path, value, problem: `must be ${want}` });
  };
  const isObject = (v: unknown): v is Record<string, unknown> =>
    v !== null && typeof v === "object" && !Array.isArray(v);
  switch (shape) {
    case "any":
      return value;
    case "string":
      return typeof value === "string" ? value : fail("a string");
    case "bool":
      return typeof value === "boolean" ? value : fail("a boolean");
    case "int":
      return Number.isInteger(value) ? value : fail("a whole number");
    case "intOrString":
      return Number.isInteger(value) || typeof value === "string"
        ? value
        : fail("a whole number or a string");
    case "strings":
    case "quantities": {
      if (!isObject(value)) return fail("a map");
      for (const [k, v] of Object.entries(value)) {
        if (v === null) delete value[k];
        else if (shape === "quantities" && typeof v === "number") value[k] = String(v);
        else if (typeof v !== "string") {
          throw new ShapeError({
            path: [...path, k],
            value: v,
            problem: shape === "strings"
              ? "must be a string"
              : "must be a quantity such as 100m or 1Gi",
          });
        }
      }
      return value;
    }
  }
  if ("list" in shape) {
    if (!Array.isArray(value)) return fail("a list");
    // A null item decodes to Go's zero value, as json.Unmarshal does.
    value.forEach((item, i) => {
      value[i] = decodeShape(item ?? zero(shape.list), shape.list, [...path, i], ignored);
    });
    return value;
  }
  if (!isObject(value)) return fail("an object");
  for (const [k, v] of Object.entries(value)) {
    const child = shape.fields[k];
    if (v === null) delete value[k];
    else if (child) value[k] = decodeShape(v, child, [...path, k], ignored);
    else if (shape.closed) {
      ignored.push(pathText([...path, k]));
      delete value[k];
    }
  }
  return value;
}

function zero(shape: Shape): unknown {
  if (typeof shape !== "string") return "list" in shape ? [] : {};
  return { string: "", bool: false, int: 0, intOrString: 0 }[shape as string] ?? {};
}

const S = "string", B = "bool", I = "int";
const OBJ: Shape = { fields: {} };
const open = (fields: Record<string, Shape>): Shape => ({ fields });
const closed = (fields: Record<string, Shape>): Shape => ({ fields, closed: true });
const list = (of: Shape): Shape => ({ list: of });
const fieldRef = open({ apiVersion: S, fieldPath: S });
const httpGet = open({ path: S, port: "intOrString", host: S, scheme: S });
const handlerFields = { httpGet, exec: OBJ, tcpSocket: OBJ, sleep: OBJ };
const probe = open({
  ...handlerFields,
  grpc: open({ port: I, service: S }),
  initialDelaySeconds: I,
  timeoutSeconds: I,
  periodSeconds: I,
  successThreshold: I,
  failureThreshold: I,
  terminationGracePeriodSeconds: I,
});
const containerFields: Record<string, Shape> = {
  name: S,
  image: S,
  imagePullPolicy: S,
  command: list(S),
  args: list(S),
  workingDir: S,
  ports: list(open({ containerPort: I, hostPort: I, protocol: S, name: S, hostIP: S })),
  envFrom: list(open({ prefix: S, configMapRef: OBJ, secretRef: OBJ })),
  env: list(open({
    name: S,
    value: S,
    valueFrom: open({
      fieldRef,
      resourceFieldRef: OBJ,
      configMapKeyRef: OBJ,
      secretKeyRef: OBJ,
      fileKeyRef: OBJ,
    }),
  })),
  resources: open({ limits: "quantities", requests: "quantities", claims: list(OBJ) }),
  resizePolicy: list(OBJ),
  restartPolicy: S,
  restartPolicyRules: list(OBJ),
  volumeMounts: list(open({ name: S, mountPath: S, subPath: S, readOnly: B })),
  volumeDevices: list(OBJ),
  livenessProbe: probe,
  readinessProbe: probe,
  startupProbe: probe,
  lifecycle: open({ postStart: open(handlerFields), preStop: open(handlerFields), stopSignal: S }),
  terminationMessagePath: S,
  terminationMessagePolicy: S,
  securityContext: OBJ,
  stdin: B,
  stdinOnce: B,
  tty: B,
};
const downwardAPIItems = list(open({ path: S, fieldRef, mode: I }));
const volume = closed({
  ...Object.fromEntries(VOLUME_SOURCES.map((k) => [k, OBJ])),
  name: S,
  secret: open({ secretName: S, defaultMode: I }),
  configMap: open({ name: S, defaultMode: I }),
  downwardAPI: open({ defaultMode: I, items: downwardAPIItems }),
  projected: open({
    defaultMode: I,
    sources: list(open({
      serviceAccountToken: open({ expirationSeconds: I }),
      downwardAPI: open({ items: downwardAPIItems }),
      secret: OBJ,
      configMap: OBJ,
      clusterTrustBundle: OBJ,
      podCertificate: OBJ,
    })),
  }),
  hostPath: open({ path: S, type: S }),
  image: open({ reference: S, pullPolicy: S }),
  azureFile: open({ secretName: S }),
  csi: open({ nodePublishSecretRef: OBJ }),
});
/** The PodSpec fields of the v1 API (client-node 2.0.1), with the types this module relies on. */
const POD_SPEC = closed({
  ...Object.fromEntries(
    [
      "affinity",
      "automountServiceAccountToken",
      "dnsConfig",
      "hostAliases",
      "hostUsers",
      "hostnameOverride",
      "os",
      "overhead",
      "preemptionPolicy",
      "readinessGates",
      "resources",
      "runtimeClassName",
      "schedulingGates",
      "schedulingGroup",
      "setHostnameAsFQDN",
      "shareProcessNamespace",
      "topologySpreadConstraints",
    ].map((k) => [k, "any" as const]),
  ),
  containers: list(closed(containerFields)),
  initContainers: list(closed(containerFields)),
  ephemeralContainers: list(closed({ ...containerFields, targetContainerName: S })),
  volumes: list(volume),
  tolerations: list(open({ key: S, operator: S, value: S, effect: S, tolerationSeconds: I })),
  imagePullSecrets: list(OBJ),
  resourceClaims: list(OBJ),
  nodeSelector: "strings",
  securityContext: OBJ,
  restartPolicy: S,
  dnsPolicy: S,
  nodeName: S,
  hostname: S,
  subdomain: S,
  serviceAccountName: S,
  serviceAccount: S,
  schedulerName: S,
  priorityClassName: S,
  priority: I,
  hostNetwork: B,
  hostPID: B,
  hostIPC: B,
  enableServiceLinks: B,
  terminationGracePeriodSeconds: I,
  activeDeadlineSeconds: I,
});
const POD = closed({
  apiVersion: S,
  kind: S,
  metadata: closed({
    name: S,
    namespace: S,
    uid: S,
    generateName: S,
    labels: "strings",
    annotations: "strings",
    ...Object.fromEntries(
      [
        "creationTimestamp",
        "deletionGracePeriodSeconds",
        "deletionTimestamp",
        "finalizers",
        "generation",
        "managedFields",
        "ownerReferences",
        "resourceVersion",
        "selfLink",
      ].map((k) => [k, "any" as const]),
    ),
  }),
  spec: POD_SPEC,
  status: open({ phase: S }),
});

// ---- Validation (a subset of ValidatePodCreate) ------------------------------------------------

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const QUALIFIED_NAME_PART = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const LABEL_MSG = "must be a lowercase RFC 1123 label: at most 63 lower case alphanumerics or " +
  "'-', starting and ending with an alphanumeric";
const SUBDOMAIN_MSG = "must be a lowercase RFC 1123 subdomain: at most 253 lower case " +
  "alphanumerics, '-' or '.', starting and ending with an alphanumeric";
const QUALIFIED_MSG = "must be a qualified name: an optional DNS subdomain and '/', then at most " +
  "63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric";
/** `TotalAnnotationSizeLimitB`. */
const MAX_ANNOTATIONS_BYTES = 256 * 1024;

const isLabel = (s: string) => s.length <= 63 && DNS_LABEL.test(s);
const isSubdomain = (s: string) => s.length <= 253 && DNS_SUBDOMAIN.test(s);

function isQualifiedName(s: string): boolean {
  const slash = s.indexOf("/");
  const name = slash < 0 ? s : s.slice(slash + 1);
  if (slash >= 0 && !isSubdomain(s.slice(0, slash))) return false;
  return name.length <= 63 && QUALIFIED_NAME_PART.test(name);
}

/** `IsValidPortName` (IANA_SVC_NAME). */
function isPortName(s: string): boolean {
  return s.length <= 15 && /^[-a-z0-9]+$/.test(s) && /[a-z]/.test(s) && !s.includes("--") &&
    !s.startsWith("-") && !s.endsWith("-");
}

function validatePod(pod: V1Pod): FieldError[] {
  const errs: FieldError[] = [];
  const meta = pod.metadata!, spec = pod.spec!;
  const invalid = (path: Path, value: unknown, problem: string) =>
    errs.push({ path, value, problem });
  const oneOf = (path: Path, value: string | undefined, allowed: readonly string[]) => {
    if (value === undefined || allowed.includes(value)) return;
    invalid(path, value, `must be one of ${allowed.map((a) => `'${a}'`).join(", ")}`);
  };

  if (!isSubdomain(meta.name!)) invalid(["metadata", "name"], meta.name, SUBDOMAIN_MSG);
  if (!isLabel(meta.namespace!)) invalid(["metadata", "namespace"], meta.namespace, LABEL_MSG);
  for (const [k, v] of Object.entries(meta.labels ?? {})) {
    if (!isQualifiedName(k)) invalid(["metadata", "labels", k], k, QUALIFIED_MSG);
    else if (v !== "" && !(v.length <= 63 && QUALIFIED_NAME_PART.test(v))) {
      invalid(
        ["metadata", "labels", k],
        v,
        "must be a label value: empty, or at most 63 " +
          "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
      );
    }
  }
  let annotationBytes = 0;
  for (const [k, v] of Object.entries(meta.annotations ?? {})) {
    if (!isQualifiedName(k.toLowerCase())) {
      invalid(["metadata", "annotations", k], k, QUALIFIED_MSG);
    }
    annotationBytes += k.length + v.length;
  }
  if (annotationBytes > MAX_ANNOTATIONS_BYTES) {
    invalid(
      ["metadata", "annotations"],
      undefined,
      `may not hold more than ${MAX_ANNOTATIONS_BYTES} bytes`,
    );
  }

  if (spec.nodeName && !isSubdomain(spec.nodeName)) {
    invalid(["spec", "nodeName"], spec.nodeName, SUBDOMAIN_MSG);
  }
  oneOf(["spec", "restartPolicy"], spec.restartPolicy, ["Always", "OnFailure", "Never"]);
  oneOf(["spec", "dnsPolicy"], spec.dnsPolicy, [
    "ClusterFirstWithHostNet",
    "ClusterFirst",
    "Default",
    "None",
  ]);
  for (const f of ["hostname", "subdomain"] as const) {
    if (spec[f] && !isLabel(spec[f]!)) invalid(["spec", f], spec[f], LABEL_MSG);
  }
  const deadline = spec.activeDeadlineSeconds;
  if (deadline !== undefined && (deadline < 1 || deadline > 2147483647)) {
    invalid(
      ["spec", "activeDeadlineSeconds"],
      deadline,
      "must be between 1 and 2147483647, inclusive",
    );
  }

  const volumes = new Set<string>();
  (spec.volumes ?? []).forEach((v, i) => {
    const path = ["spec", "volumes", i];
    if (!v.name) errs.push({ path: [...path, "name"], problem: "is required" });
    else if (!isLabel(v.name)) invalid([...path, "name"], v.name, LABEL_MSG);
    else if (volumes.has(v.name)) invalid([...path, "name"], v.name, "must be unique");
    else volumes.add(v.name);
    const sources = VOLUME_SOURCES.filter((k) => asRecord(v)[k] != null);
    if (sources.length > 1) invalid(path, sources, "may not specify more than 1 volume type");
  });

  if (spec.containers.length === 0) {
    errs.push({ path: ["spec", "containers"], problem: "is required" });
  }
  const names = new Set<string>();
  for (const kind of ["initContainers", "containers"] as const) {
    (spec[kind] ?? []).forEach((c, i) =>
      validateContainer(c, ["spec", kind, i], volumes, names, errs)
    );
  }
  if ((spec.ephemeralContainers ?? []).length > 0) {
    errs.push({ path: ["spec", "ephemeralContainers"], problem: "cannot be set on create" });
  }
  return errs;
}

function validateContainer(
  c: V1Container,
  path: Path,
  volumes: ReadonlySet<string>,
  names: Set<string>,
  errs: FieldError[],
): void {
  const invalid = (sub: Path, value: unknown, problem: string) =>
    errs.push({ path: [...path, ...sub], value, problem });
  const required = (sub: Path) => errs.push({ path: [...path, ...sub], problem: "is required" });

  if (!c.name) required(["name"]);
  else if (!isLabel(c.name)) invalid(["name"], c.name, LABEL_MSG);
  else if (names.has(c.name)) {
    invalid(["name"], c.name, "must be unique among the pod's containers");
  } else names.add(c.name);
  if (!c.image) required(["image"]);
  else if (c.image.trim() !== c.image) {
    invalid(["image"], c.image, "must not have leading or trailing whitespace");
  }
  const policies: Array<[string, string | undefined, string[]]> = [
    ["imagePullPolicy", c.imagePullPolicy, ["Always", "IfNotPresent", "Never"]],
    ["terminationMessagePolicy", c.terminationMessagePolicy, ["File", "FallbackToLogsOnError"]],
  ];
  for (const [field, value, allowed] of policies) {
    if (value !== undefined && !allowed.includes(value)) {
      invalid([field], value, `must be one of ${allowed.map((a) => `'${a}'`).join(", ")}`);
    }
  }

  const portNames = new Set<string>();
  (c.ports ?? []).forEach((p, i) => {
    const at = (f: string): Path => ["ports", i, f];
    if (!(p.containerPort >= 1 && p.containerPort <= 65535)) {
      invalid(at("containerPort"), p.containerPort, "must be between 1 and 65535, inclusive");
    }
    if (p.hostPort !== undefined && p.hostPort !== 0 && !(p.hostPort >= 1 && p.hostPort <= 65535)) {
      invalid(at("hostPort"), p.hostPort, "must be between 1 and 65535, inclusive");
    }
    if (p.protocol !== undefined && !["TCP", "UDP", "SCTP"].includes(p.protocol)) {
      invalid(at("protocol"), p.protocol, "must be one of 'TCP', 'UDP', 'SCTP'");
    }
    if (p.name) {
      if (!isPortName(p.name)) {
        invalid(
          at("name"),
          p.name,
          "must be an IANA service name: at most 15 lower case " +
            "alphanumerics or '-', with at least one letter and no '--' or '-' at either end",
        );
      } else if (portNames.has(p.name)) invalid(at("name"), p.name, "must be unique");
      else portNames.add(p.name);
    }
  });

  (c.env ?? []).forEach((e, i) => {
    // RelaxedEnvironmentVariableValidation (GA): any printable ASCII but '='.
    if (!e.name) required(["env", i, "name"]);
    else if (!/^[\x20-\x3c\x3e-\x7e]+$/.test(e.name)) {
      invalid(
        ["env", i, "name"],
        e.name,
        "must consist of printable ASCII characters other than '='",
      );
    }
  });

  const mountPaths = new Set<string>();
  (c.volumeMounts ?? []).forEach((m, i) => {
    if (!m.name) required(["volumeMounts", i, "name"]);
    else if (!volumes.has(m.name)) {
      invalid(["volumeMounts", i, "name"], m.name, "must name a volume in spec.volumes");
    }
    if (!m.mountPath) required(["volumeMounts", i, "mountPath"]);
    else if (mountPaths.has(m.mountPath)) {
      invalid(["volumeMounts", i, "mountPath"], m.mountPath, "must be unique");
    } else mountPaths.add(m.mountPath);
  });
}

/**
 * `podutil.HasAPIObjectReference`, as PreventStaticPodAPIReferences (beta, on by default since
 * 1.34) applies it: a static pod may not use anything that needs the API server.
 */
function apiObjectReference(pod: V1Pod): FieldError | undefined {
  const spec = pod.spec!;
  const found = (path: Path, resource: string, value?: unknown): FieldError => ({
    path,
    value,
    problem: `may not be used: static pods may not reference ${resource}`,
  });
  // v1 serviceAccount is the deprecated spelling of serviceAccountName.
  for (const f of ["serviceAccountName", "serviceAccount"] as const) {
    if (spec[f]) return found(["spec", f], "serviceaccounts", spec[f]);
  }
  const containers = allContainers(spec);
  const secret = [
    ...(spec.imagePullSecrets ?? []).map((_, i): Path => ["spec", "imagePullSecrets", i]),
    ...containers.flatMap(([c, path]) => envRefs(c, path, "secretRef", "secretKeyRef")),
    ...(spec.volumes ?? []).flatMap((v, i) => volumeSecretRefs(v, ["spec", "volumes", i])),
  ][0];
  if (secret) return found(secret, "secrets");
  const configMap = [
    ...containers.flatMap(([c, path]) => envRefs(c, path, "configMapRef", "configMapKeyRef")),
    ...(spec.volumes ?? []).flatMap((v, i): Path[] => [
      ...(v.configMap ? [["spec", "volumes", i, "configMap"]] : []),
      ...(v.projected?.sources ?? []).flatMap((s, j): Path[] =>
        s.configMap ? [["spec", "volumes", i, "projected", "sources", j, "configMap"]] : []
      ),
    ]),
  ][0];
  if (configMap) return found(configMap, "configmaps");
  if ((spec.resourceClaims ?? []).length > 0) {
    return found(["spec", "resourceClaims"], "resourceclaims");
  }

  const refused: Record<string, string> = {
    configMap: "configmaps (via configmap volumes)",
    secret: "secrets (via secret volumes)",
    csi: "csidrivers (via CSI volumes)",
    glusterfs: "endpoints (via glusterFS volumes)",
    persistentVolumeClaim: "persistentvolumeclaims",
    ephemeral: "persistentvolumeclaims (via ephemeral volumes)",
    azureFile: "secrets (via azureFile volumes)",
  };
  const projected: Record<string, string | null> = {
    configMap: "configmaps (via projected volumes)",
    secret: "secrets (via projected volumes)",
    serviceAccountToken: "serviceaccounts (via projected volumes)",
    clusterTrustBundle: "clustertrustbundles",
    podCertificate: "podcertificates",
    downwardAPI: null,
  };
  for (const [i, v] of (spec.volumes ?? []).entries()) {
    const src = asRecord(v);
    const kind = VOLUME_SOURCES.find((k) => src[k] != null);
    if (kind && refused[kind]) return found(["spec", "volumes", i, kind], refused[kind]);
    for (const [j, s] of (v.projected?.sources ?? []).entries()) {
      const key = Object.keys(projected).find((k) => asRecord(s)[k] != null);
      const path = ["spec", "volumes", i, "projected", "sources", j];
      if (key === undefined) {
        return { path, value: s, problem: `is an unknown source for projected volume '${v.name}'` };
      }
      const resource = projected[key];
      if (resource) return found([...path, key], resource);
    }
  }
  return undefined;
}

function allContainers(spec: V1PodSpec): Array<[V1Container | V1EphemeralContainer, Path]> {
  return (["initContainers", "containers", "ephemeralContainers"] as const).flatMap((kind) =>
    (spec[kind] ?? []).map((c, i): [V1Container, Path] => [c, ["spec", kind, i]])
  );
}

function envRefs(
  c: V1Container,
  path: Path,
  from: "secretRef" | "configMapRef",
  key: "secretKeyRef" | "configMapKeyRef",
): Path[] {
  return [
    ...(c.envFrom ?? []).flatMap((e, i): Path[] => e[from] ? [[...path, "envFrom", i, from]] : []),
    ...(c.env ?? []).flatMap((e, i): Path[] =>
      e.valueFrom?.[key] ? [[...path, "env", i, "valueFrom", key]] : []
    ),
  ];
}

/** The secret references `VisitPodSecretNames` finds in a volume. */
function volumeSecretRefs(v: V1Volume, path: Path): Path[] {
  const refs: Path[] = [];
  const src = asRecord(v) as Record<string, Record<string, unknown> | undefined>;
  if (v.azureFile?.secretName) refs.push([...path, "azureFile", "secretName"]);
  for (const k of ["cephfs", "cinder", "flexVolume", "rbd", "scaleIO", "iscsi", "storageos"]) {
    if (src[k]?.secretRef != null) refs.push([...path, k, "secretRef"]);
  }
  if (v.secret) refs.push([...path, "secret"]);
  (v.projected?.sources ?? []).forEach((s, j) => {
    if (s.secret) refs.push([...path, "projected", "sources", j, "secret"]);
  });
  if (v.csi?.nodePublishSecretRef) refs.push([...path, "csi", "nodePublishSecretRef"]);
  return refs;
}

// ---- The source --------------------------------------------------------------------------------

/** What {@link StaticPodFileSource} needs. */
export interface StaticPodFileSourceOptions {
  /** `staticPodPath`: a directory of manifests, or a single manifest file. */
  readonly path: string;
  /** This node's name: it suffixes pod names and enters their UIDs. */
  readonly nodeName: string;
  /** `fileCheckFrequency` in milliseconds: how often the path is listed again. @default 20000 */
  readonly fileCheckFrequencyMs: number;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Receives the whole set (upstream's SET) on the first scan and whenever it changes. */
  readonly onUpdate: (pods: V1Pod[], problems: StaticPodProblem[]) => void;
  /**
   * Wall-clock milliseconds that gather a burst of inotify events into one rescan. File system
   * events happen in real time, so this wait does not come from `clock`. @default 100
   */
  readonly watchDebounceMs?: number;
  /** Starts an inotify watch of the path. @default Deno.watchFs, not recursive */
  readonly watchFs?: (path: string) => FsWatch;
}

/** The part of `Deno.FsWatcher` the source uses. */
export interface FsWatch extends AsyncIterable<Deno.FsEvent> {
  close(): void;
}

/** A scan's outcome: the current set and the manifests left out of it. */
export interface StaticPodScan {
  readonly pods: V1Pod[];
  readonly problems: StaticPodProblem[];
}

interface Known {
  readonly file: string;
  readonly key: string;
  readonly pod: V1Pod;
  readonly fingerprint: string;
}

type Read =
  | { readonly kind: "pod"; readonly known: Known; readonly ignored: readonly string[] }
  | { readonly kind: "problem"; readonly problem: StaticPodProblem }
  /** A sub-directory, which is not recursed into. */
  | { readonly kind: "dir" }
  /** Removed between listing and reading. */
  | { readonly kind: "gone" };

type Listing =
  | { readonly kind: "missing" }
  | { readonly kind: "unreadable"; readonly problem: StaticPodProblem }
  | { readonly kind: "file"; readonly read: Read }
  | { readonly kind: "dir"; readonly reads: ReadonlyMap<string, Read> };

const decoder = new TextDecoder("utf-8", { fatal: true });

/** Go's `path.Clean`, which `filepath.Join` applies to the file names that enter pod UIDs. */
function cleanPath(p: string): string {
  const rooted = p.startsWith("/");
  const out: string[] = [];
  for (const seg of p.split("/")) {
    if (seg === "" || seg === ".") continue;
    if (seg !== "..") out.push(seg);
    else if (out.length > 0 && out[out.length - 1] !== "..") out.pop();
    else if (!rooted) out.push("..");
  }
  return (rooted ? "/" : "") + out.join("/") || ".";
}

/** `kubetypes.Timestamp.GetString`: RFC 3339 with up to nanoseconds, in local time. */
function rfc3339Nano(ms: number): string {
  const d = new Date(ms);
  const p = (n: number, w = 2) => String(n).padStart(w, "0");
  let s = `${p(d.getFullYear(), 4)}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${
    p(d.getMinutes())
  }:${p(d.getSeconds())}`;
  if (d.getMilliseconds() > 0) s += "." + p(d.getMilliseconds(), 3).replace(/0+$/, "");
  const east = -d.getTimezoneOffset();
  if (east === 0) return s + "Z";
  return `${s}${east < 0 ? "-" : "+"}${p(Math.floor(Math.abs(east) / 60))}:${
    p(Math.abs(east) % 60)
  }`;
}

/**
 * Log lines of one scan, each under a subject with a text. Upstream logs every problem at every
 * scan; here a line is written when its subject is new or its text changed, so a bad manifest
 * gives one error until it is fixed or changes.
 */
class Notes {
  readonly #notes = new Map<string, { text: string; log: () => void }>();

  add(subject: string, text: string, log: () => void): void {
    this.#notes.set(subject, { text, log });
  }

  /** Logs what `before` does not hold; returns the texts to compare the next scan against. */
  logNew(before: ReadonlyMap<string, string>): Map<string, string> {
    const now = new Map<string, string>();
    for (const [subject, { text, log }] of this.#notes) {
      if (before.get(subject) !== text) log();
      now.set(subject, text);
    }
    return now;
  }
}

/** Upstream's `sourceFile`: static pods from `staticPodPath`. Call `run(signal)` to start it. */
export class StaticPodFileSource {
  readonly #path: string;
  readonly #nodeName: string;
  readonly #periodMs: number;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #onUpdate: StaticPodFileSourceOptions["onUpdate"];
  readonly #debounceMs: number;
  readonly #watchFs: (path: string) => FsWatch;

  /** The pods of the current set, by manifest file. */
  #known = new Map<string, Known>();
  /** First-seen time by pod UID, for the UIDs in the current set. */
  #seen = new Map<string, string>();
  #emitted: string | undefined;
  /** What was last logged per subject, so a lasting problem is logged once. */
  #logged: ReadonlyMap<string, string> = new Map();
  #queue: Promise<unknown> = Promise.resolve();

  #listDue = false;
  #watchDue = false;
  #wake: (() => void) | undefined;
  #debounce: ReturnType<typeof setTimeout> | undefined;
  #watch: FsWatch | undefined;
  readonly #watchTasks = new Set<Promise<void>>();
  #watchFailed = false;
  #watchedIno: number | null | undefined;
  #pathIno: number | null | undefined;

  constructor(opts: StaticPodFileSourceOptions) {
    if (!(opts.fileCheckFrequencyMs > 0)) {
      throw new RangeError(
        `Cannot start the static pod file source: 'fileCheckFrequency' must be more than 0: ` +
          `current value is '${opts.fileCheckFrequencyMs}ms'`,
      );
    }
    // Upstream trims trailing separators for inotify.
    this.#path = opts.path.replace(/\/+$/, "") || opts.path;
    this.#nodeName = opts.nodeName;
    this.#periodMs = opts.fileCheckFrequencyMs;
    this.#clock = opts.clock;
    this.#logger = opts.logger;
    this.#onUpdate = opts.onUpdate;
    this.#debounceMs = opts.watchDebounceMs ?? 100;
    this.#watchFs = opts.watchFs ?? ((p) => Deno.watchFs(p, { recursive: false }));
  }

  /** Lists the path now, as the periodic check does; calls onUpdate if the set changed. */
  scan(signal?: AbortSignal): Promise<StaticPodScan> {
    return this.#exclusive(() => this.#sync("list", signal));
  }

  /** Lists at once, then every fileCheckFrequency and on inotify events, until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    this.#logger.v(1).info("Watching path", { path: this.#path });
    const ticker = this.#tick(signal);
    this.#listDue = true;
    try {
      while (!signal.aborted) {
        if (!this.#listDue && !this.#watchDue) await this.#sleepUntilWoken(signal);
        if (signal.aborted) break;
        const mode = this.#listDue ? "list" : "watch";
        this.#listDue = this.#watchDue = false;
        try {
          await this.#exclusive(() => this.#sync(mode, signal));
        } catch (err) {
          if (signal.aborted) break;
          this.#logger.error(err, "Unable to read config path", { path: this.#path });
        }
        this.#keepWatching(signal);
      }
    } finally {
      clearTimeout(this.#debounce);
      this.#debounce = undefined;
      this.#stopWatch();
      await Promise.allSettled([ticker, ...this.#watchTasks]);
    }
  }

  #exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.#queue.then(fn, fn);
    this.#queue = next.catch(() => {});
    return next;
  }

  async #tick(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        await this.#clock.sleep(this.#periodMs, signal);
      } catch {
        return;
      }
      this.#listDue = true;
      this.#wake?.();
    }
  }

  #sleepUntilWoken(signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        signal.removeEventListener("abort", done);
        this.#wake = undefined;
        resolve();
      };
      this.#wake = done;
      signal.addEventListener("abort", done, { once: true });
    });
  }

  // ---- inotify ----

  /** Starts the watch when there is none, or restarts it when the path was replaced. */
  #keepWatching(signal: AbortSignal): void {
    if (this.#watch && this.#watchedIno !== this.#pathIno) this.#stopWatch();
    if (this.#watch || signal.aborted || this.#pathIno === undefined) return;
    let watch: FsWatch;
    try {
      watch = this.#watchFs(this.#path);
    } catch (err) {
      if (!this.#watchFailed) {
        this.#watchFailed = true;
        this.#logger.error(err, "Unable to watch config path, relying on the periodic check", {
          path: this.#path,
          fileCheckFrequency: `${this.#periodMs}ms`,
        });
      }
      return;
    }
    if (this.#watchFailed) this.#logger.info("Watching config path again", { path: this.#path });
    this.#watchFailed = false;
    this.#watch = watch;
    this.#watchedIno = this.#pathIno;
    const task = (async () => {
      try {
        for await (const event of watch) {
          if (signal.aborted) break;
          if (this.#relevant(event)) this.#onFsEvent();
        }
      } catch (err) {
        if (!signal.aborted) this.#logger.error(err, "Unable to process watch event");
      } finally {
        if (this.#watch === watch) this.#stopWatch();
      }
    })();
    this.#watchTasks.add(task);
    task.finally(() => this.#watchTasks.delete(task));
  }

  /** Upstream's produceWatchEvent: creates, writes, chmods, removes and renames of non-dotfiles. */
  #relevant(event: Deno.FsEvent): boolean {
    if (event.kind === "access" || event.kind === "other") return false;
    return event.paths.length === 0 ||
      event.paths.some((p) => !p.slice(p.lastIndexOf("/") + 1).startsWith("."));
  }

  #onFsEvent(): void {
    if (this.#debounce !== undefined) return;
    this.#debounce = setTimeout(() => {
      this.#debounce = undefined;
      this.#watchDue = true;
      this.#wake?.();
    }, this.#debounceMs);
  }

  #stopWatch(): void {
    const watch = this.#watch;
    this.#watch = undefined;
    this.#watchedIno = undefined;
    try {
      watch?.close();
    } catch { /* already closed */ }
  }

  // ---- Scanning ----

  async #sync(mode: "list" | "watch", signal?: AbortSignal): Promise<StaticPodScan> {
    signal?.throwIfAborted();
    const listing = await this.#list(signal);
    signal?.throwIfAborted();
    const problems: StaticPodProblem[] = [];
    const notes = new Notes();
    // undefined keeps the current set, as upstream does when it returns an error.
    let next: Map<string, Known> | undefined = new Map();
    const take = (file: string, read: Read) => {
      switch (read.kind) {
        case "pod":
          next?.set(file, read.known);
          if (read.ignored.length > 0) {
            notes.add(
              `ignored:${file}`,
              read.ignored.join(","),
              () =>
                this.#logger.warning("Ignoring parts of a static pod manifest", {
                  path: file,
                  ignored: read.ignored,
                }),
            );
          }
          break;
        case "problem":
          problems.push(read.problem);
          break;
        case "dir":
          notes.add(`dir:${file}`, "", () =>
            this.#logger.error(
              null,
              "Provided manifest path is a directory, not recursing into manifest path",
              { path: file },
            ));
          break;
      }
    };

    switch (listing.kind) {
      case "missing":
        notes.add("missing", "", () =>
          this.#logger.error(
            new Error("path does not exist, ignoring"),
            "Unable to read config path",
            { path: this.#path },
          ));
        break;
      case "unreadable":
        problems.push(listing.problem);
        next = undefined;
        break;
      case "file":
        take(this.#path, listing.read);
        if (listing.read.kind === "problem") next = undefined;
        break;
      case "dir":
        for (const [file, read] of listing.reads) {
          take(file, read);
          // A watch event applies to one file upstream, and a file that no longer parses
          // leaves its pod in place until the next periodic list.
          const old = this.#known.get(file);
          if (read.kind === "problem" && mode === "watch" && old) next.set(file, old);
        }
        this.#dropDuplicates(next, problems);
        break;
    }
    const what = listing.kind === "dir"
      ? "Could not process manifest file"
      : "Unable to read config path";
    for (const p of problems) {
      notes.add(
        `problem:${p.file}`,
        p.message,
        () => this.#logger.error(p, what, { path: p.file }),
      );
    }
    this.#logged = notes.logNew(this.#logged);

    if (next) this.#known = next;
    const pods = this.#annotate();
    const state = [...this.#known.values()].map((k) => `${k.key}=${k.fingerprint}`).join("\n");
    if (next && state !== this.#emitted) {
      this.#emitted = state;
      this.#logger.v(4).info("Setting pods for source", { source: FILE_SOURCE, pods: pods.length });
      try {
        this.#onUpdate(pods.map((p) => structuredClone(p)), [...problems]);
      } catch (err) {
        this.#logger.error(err, "Static pod update was not taken", { source: FILE_SOURCE });
      }
    }
    return { pods, problems };
  }

  /** Two manifests with the same namespace/name: the later file wins, as in upstream's store. */
  #dropDuplicates(next: Map<string, Known>, problems: StaticPodProblem[]): void {
    const winner = new Map<string, string>();
    for (const [file, k] of next) winner.set(k.key, file);
    for (const [file, k] of next) {
      const kept = winner.get(k.key)!;
      if (kept === file) continue;
      next.delete(file);
      problems.push(
        new StaticPodManifestError(
          file,
          undefined,
          "metadata.name",
          k.pod.metadata?.name,
          `is taken by ${kept}, which defines the same pod '${k.key}' and replaces this one`,
        ),
      );
    }
  }

  /** The current set with the annotations PodConfig adds: the source and the first-seen time. */
  #annotate(): V1Pod[] {
    const seen = new Map<string, string>();
    const now = rfc3339Nano(this.#clock.now());
    const pods = [...this.#known.values()].map(({ pod }) => {
      const uid = pod.metadata!.uid!;
      let first = this.#seen.get(uid) ?? seen.get(uid);
      if (first === undefined) {
        first = now;
        this.#logger.v(4).info("Receiving a new pod", { pod: kobj(pod) });
      }
      seen.set(uid, first);
      const copy = structuredClone(pod);
      const annotations = copy.metadata!.annotations ??= {};
      annotations[CONFIG_SOURCE_ANNOTATION_KEY] = FILE_SOURCE;
      annotations[CONFIG_FIRST_SEEN_ANNOTATION_KEY] = first;
      return copy;
    });
    this.#seen = seen;
    return pods;
  }

  async #list(signal?: AbortSignal): Promise<Listing> {
    let info: Deno.FileInfo;
    try {
      info = await Deno.stat(this.#path);
    } catch (err) {
      this.#pathIno = undefined;
      if (err instanceof Deno.errors.NotFound) return { kind: "missing" };
      return { kind: "unreadable", problem: this.#unreadable(this.#path, err) };
    }
    this.#pathIno = info.ino;
    if (info.isFile) return { kind: "file", read: await this.#read(this.#path, info, signal) };
    if (!info.isDirectory) {
      return {
        kind: "unreadable",
        problem: fileProblem(this.#path, "is not a directory or a regular file"),
      };
    }
    const names: string[] = [];
    try {
      for await (const entry of Deno.readDir(this.#path)) {
        if (!entry.name.startsWith(".")) names.push(entry.name);
      }
    } catch (err) {
      return { kind: "unreadable", problem: this.#unreadable(this.#path, err) };
    }
    names.sort();
    const reads = new Map<string, Read>();
    for (const name of names) {
      signal?.throwIfAborted();
      const file = cleanPath(`${this.#path}/${name}`);
      let entry: Deno.FileInfo;
      try {
        entry = await Deno.stat(file);
      } catch (err) {
        reads.set(file, { kind: "problem", problem: this.#unreadable(file, err) });
        continue;
      }
      if (entry.isDirectory) reads.set(file, { kind: "dir" });
      else if (entry.isFile) reads.set(file, await this.#read(file, entry, signal));
      else {
        reads.set(file, {
          kind: "problem",
          problem: fileProblem(file, "is not a directory or a regular file"),
        });
      }
    }
    return { kind: "dir", reads };
  }

  #unreadable(file: string, err: unknown): StaticPodProblem {
    return fileProblem(file, `cannot be read: ${msg(err)}`);
  }

  /** upstream extractFromFile. */
  async #read(file: string, info: Deno.FileInfo, signal?: AbortSignal): Promise<Read> {
    this.#logger.v(3).info("Reading config file", { path: file });
    if (info.size > MAX_MANIFEST_BYTES) {
      return {
        kind: "problem",
        problem: fileProblem(
          file,
          `is larger than ${MAX_MANIFEST_BYTES} bytes, the most a manifest may hold`,
        ),
      };
    }
    let bytes: Uint8Array;
    try {
      bytes = await Deno.readFile(file, { signal });
    } catch (err) {
      signal?.throwIfAborted();
      if (err instanceof Deno.errors.NotFound) return { kind: "gone" };
      return { kind: "problem", problem: this.#unreadable(file, err) };
    }
    let text: string;
    try {
      text = decoder.decode(bytes);
    } catch {
      return { kind: "problem", problem: fileProblem(file, "is not valid UTF-8") };
    }
    try {
      const { pod, ignored } = staticPodFromManifest(text, file, this.#nodeName);
      const meta = pod.metadata!;
      this.#logger.v(5).info("Generated UID", { pod: kobj(pod), podUID: meta.uid, source: file });
      const known: Known = {
        file,
        key: `${meta.namespace}/${meta.name}`,
        pod,
        fingerprint: fnv128a(canonicalJSON(pod)),
      };
      return { kind: "pod", known, ignored };
    } catch (err) {
      if (err instanceof StaticPodManifestError) return { kind: "problem", problem: err };
      throw err;
    }
  }
}
