/**
 * @module
 * Decoding of static pod manifests for `file.ts`, as upstream's `tryDecodeSinglePod` in
 * `pkg/kubelet/config/common.go`: YAML 1.1 (or JSON when the text starts with "{"), only the
 * first document, exactly one v1 Pod, unknown fields dropped and named, then the v1 scheme
 * defaults and static pod defaults of `_static_pod_defaults.ts` and the checks of
 * `_static_pod_validation.ts`. Errors name the file, the line and field path, and the bad value.
 */

import type { V1Pod } from "@kubernetes/client-node";
import { type Document, isMap, isScalar, isSeq, LineCounter, parseAllDocuments } from "yaml";
import { applyStaticPodDefaults, setPodDefaults, VOLUME_SOURCES } from "./_static_pod_defaults.ts";
import {
  apiObjectReference,
  type FieldError,
  type Path,
  validatePod,
} from "./_static_pod_validation.ts";

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

/** What {@link staticPodFromManifest} makes of a manifest. */
export interface StaticPodManifest {
  readonly pod: V1Pod;
  /** Unknown fields that were dropped and YAML documents after the first, which are ignored. */
  readonly ignored: readonly string[];
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

/**
 * Turns one manifest into the pod the file source would run: decoded, defaulted as
 * `applyDefaults` does for `file` on node `nodeName`, and validated. Throws
 * {@link StaticPodManifestError} naming the first problem (and how many more there are).
 */
export function staticPodFromManifest(
  text: string,
  file: string,
  nodeName: string,
  kind: "file" | "url" = "file",
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
  applyStaticPodDefaults(pod, file, nodeName, kind);
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

/** A problem with a manifest file as a whole. */
export function fileProblem(file: string, problem: string, line?: number): StaticPodManifestError {
  return new StaticPodManifestError(file, line, "", undefined, problem);
}

export function msg(err: unknown): string {
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
