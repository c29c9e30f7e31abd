/**
 * @module
 * Validation of a decoded, defaulted static pod for `static_pod_decode.ts`: the part of
 * upstream's `ValidatePodCreate` a kubelet relies on (names, containers, images, ports, volumes
 * and their mounts, policies), then `podutil.HasAPIObjectReference` as
 * PreventStaticPodAPIReferences applies it. Problems are {@link FieldError}s, which the decoder
 * turns into errors that name the file and line.
 */

import type {
  V1Container,
  V1EphemeralContainer,
  V1Pod,
  V1PodSpec,
  V1Volume,
} from "@kubernetes/client-node";
import { VOLUME_SOURCES } from "./_static_pod_defaults.ts";

/** A field path, such as `["spec", "containers", 0, "name"]`. */
export type Path = readonly (string | number)[];

/** One problem with one field: its path, the offending value (if any), and what is wrong. */
export interface FieldError {
  readonly path: Path;
  readonly value?: unknown;
  readonly problem: string;
}

function asRecord(o: object): Record<string, unknown> {
  return o as Record<string, unknown>;
}

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

export function validatePod(pod: V1Pod): FieldError[] {
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
    else if (v.image) {
      // validateImageVolumeSource; the pull policy is defaulted from the tag before this.
      if (!v.image.reference) {
        errs.push({ path: [...path, "image", "reference"], problem: "is required" });
      }
      oneOf([...path, "image", "pullPolicy"], v.image.pullPolicy, [
        "Always",
        "IfNotPresent",
        "Never",
      ]);
    }
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
export function apiObjectReference(pod: V1Pod): FieldError | undefined {
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
