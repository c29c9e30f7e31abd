/**
 * @module
 * Defaults for a static pod read from a manifest file, private to file.ts. Two layers, in
 * upstream's order:
 *
 * 1. The API scheme defaults that decoding a v1 Pod applies upstream
 *    (`pkg/apis/core/v1/defaults.go` and the declarative `+default` tags): restart and DNS
 *    policy, grace period, scheduler name, image pull policy from the tag, probe timings and so on.
 * 2. `applyDefaults` from `pkg/kubelet/config/common.go` (isFile = true): the UID hashed from the
 *    decoded pod, the node name and the file path; the `-<nodename>` name suffix; the `default`
 *    namespace; `spec.nodeName`; the `kubernetes.io/config.hash` annotation; a toleration of every
 *    NoExecute taint; phase Pending.
 *
 * The UID recipe is upstream's (1.35+, after md5 was retired): FNV-128a over a deep print of the
 * decoded pod, then `host:<nodeName>` and `file:<path>`, hex encoded. Upstream's deep print is
 * go-spew's `%#v` of the internal Go struct (`hash.DeepHashObject`), which no other language can
 * reproduce and which changes whenever a field is added to the Go types. Here the deep print is
 * the pod's JSON with sorted keys, so UIDs are stable across our releases but differ from the Go
 * kubelet's for the same file.
 */

import type {
  V1Container,
  V1HTTPGetAction,
  V1LifecycleHandler,
  V1Pod,
  V1Probe,
  V1Toleration,
  V1Volume,
} from "@kubernetes/client-node";
import { CONFIG_HASH_ANNOTATION } from "./pod_config.ts";

// ---- Scheme defaults ---------------------------------------------------------------------------

/** Applies the v1 scheme defaults decoding gives a Pod upstream. The pod's shape is checked. */
export function setPodDefaults(pod: V1Pod): void {
  const spec = pod.spec ??= { containers: [] };
  // SetDefaults_PodSpec
  spec.dnsPolicy ||= "ClusterFirst";
  spec.restartPolicy ||= "Always";
  spec.securityContext ??= {};
  spec.terminationGracePeriodSeconds ??= 30;
  spec.schedulerName ||= "default-scheduler";
  // SetDefaults_Pod: requests default to limits, for regular and init containers only.
  for (const c of [...spec.containers, ...spec.initContainers ?? []]) {
    const limits = c.resources?.limits;
    if (!limits) continue;
    const requests = c.resources!.requests ??= {};
    for (const [k, v] of Object.entries(limits)) if (!(k in requests)) requests[k] = v;
  }
  spec.enableServiceLinks ??= true;
  if (spec.hostNetwork) {
    for (const c of [...spec.containers, ...spec.initContainers ?? []]) {
      for (const p of c.ports ?? []) if (!p.hostPort) p.hostPort = p.containerPort;
    }
  }
  const all: V1Container[] = [
    ...spec.initContainers ?? [],
    ...spec.containers,
    ...(spec.ephemeralContainers ?? []) as V1Container[],
  ];
  for (const c of all) setContainerDefaults(c);
  for (const v of spec.volumes ?? []) setVolumeDefaults(v);
}

function setContainerDefaults(c: V1Container): void {
  c.imagePullPolicy ||= pullPolicyFor(c.image ?? "");
  c.terminationMessagePath ||= "/dev/termination-log";
  c.terminationMessagePolicy ||= "File";
  for (const p of c.ports ?? []) p.protocol ||= "TCP";
  for (const probe of [c.livenessProbe, c.readinessProbe, c.startupProbe]) {
    if (probe) setProbeDefaults(probe);
  }
  for (const h of [c.lifecycle?.postStart, c.lifecycle?.preStop]) setHandlerDefaults(h);
  for (const e of c.env ?? []) {
    const ref = e.valueFrom?.fieldRef;
    if (ref) ref.apiVersion ||= "v1";
  }
}

function setProbeDefaults(p: V1Probe): void {
  p.timeoutSeconds ||= 1;
  p.periodSeconds ||= 10;
  p.successThreshold ||= 1;
  p.failureThreshold ||= 3;
  setHandlerDefaults(p);
  if (p.grpc) p.grpc.service ??= "";
}

function setHandlerDefaults(h: V1LifecycleHandler | V1Probe | undefined): void {
  const get: V1HTTPGetAction | undefined = h?.httpGet;
  if (!get) return;
  get.path ||= "/";
  get.scheme ||= "HTTP";
}

/** The VolumeSource members: a volume naming none of them is an emptyDir. */
export const VOLUME_SOURCES = [
  "hostPath",
  "emptyDir",
  "gcePersistentDisk",
  "awsElasticBlockStore",
  "gitRepo",
  "secret",
  "nfs",
  "iscsi",
  "glusterfs",
  "persistentVolumeClaim",
  "rbd",
  "flexVolume",
  "cinder",
  "cephfs",
  "flocker",
  "downwardAPI",
  "fc",
  "azureFile",
  "configMap",
  "vsphereVolume",
  "quobyte",
  "azureDisk",
  "photonPersistentDisk",
  "projected",
  "portworxVolume",
  "scaleIO",
  "storageos",
  "csi",
  "ephemeral",
  "image",
] as const;

function setVolumeDefaults(v: V1Volume): void {
  const src = v as unknown as Record<string, unknown>;
  if (VOLUME_SOURCES.every((k) => src[k] == null)) v.emptyDir = {};
  // 0644, the default mode of secret, configMap, downwardAPI and projected volumes.
  if (v.secret) v.secret.defaultMode ??= 0o644;
  if (v.configMap) v.configMap.defaultMode ??= 0o644;
  if (v.downwardAPI) {
    v.downwardAPI.defaultMode ??= 0o644;
    for (const item of v.downwardAPI.items ?? []) {
      if (item.fieldRef) item.fieldRef.apiVersion ||= "v1";
    }
  }
  if (v.projected) {
    v.projected.defaultMode ??= 0o644;
    for (const s of v.projected.sources ?? []) {
      if (s.serviceAccountToken) s.serviceAccountToken.expirationSeconds ??= 3600;
      for (const item of s.downwardAPI?.items ?? []) {
        if (item.fieldRef) item.fieldRef.apiVersion ||= "v1";
      }
    }
  }
  if (v.hostPath) v.hostPath.type ??= "";
  if (v.image) v.image.pullPolicy ||= pullPolicyFor(v.image.reference ?? "");
}

/**
 * SetDefaults_Container's pull policy: Always for the `latest` tag, which is also what an image
 * with neither tag nor digest gets (`parsers.ParseImageName`), else IfNotPresent.
 */
export function pullPolicyFor(image: string): "Always" | "IfNotPresent" {
  const at = image.indexOf("@");
  const name = at < 0 ? image : image.slice(0, at);
  const colon = name.lastIndexOf(":");
  const tag = colon > name.lastIndexOf("/") ? name.slice(colon + 1) : "";
  if (tag === "latest" || (tag === "" && at < 0 && image !== "")) return "Always";
  return "IfNotPresent";
}

// ---- common.go applyDefaults -------------------------------------------------------------------

/** `generatePodName`: unique among nodes by appending the (lowercased) node name. */
export function generatePodName(name: string, nodeName: string): string {
  return `${name}-${nodeName.toLowerCase()}`;
}

/** The UID upstream gives a static pod without one: see the module documentation. */
export function staticPodUID(
  pod: V1Pod,
  source: string,
  nodeName: string,
  kind: "file" | "url" = "file",
): string {
  return fnv128a(canonicalJSON(pod) + `host:${nodeName}` + `${kind}:${source}`);
}

/**
 * common.go `applyDefaults` for a file (or URL) source. Call on a pod with scheme defaults
 * applied; the UID is hashed before anything else changes, as upstream does.
 */
export function applyStaticPodDefaults(
  pod: V1Pod,
  source: string,
  nodeName: string,
  kind: "file" | "url" = "file",
): void {
  const meta = pod.metadata ??= {};
  meta.uid ||= staticPodUID(pod, source, nodeName, kind);
  meta.name = generatePodName(meta.name ?? "", nodeName);
  meta.namespace ||= "default";
  const spec = pod.spec ??= { containers: [] };
  spec.nodeName = nodeName;
  (meta.annotations ??= {})[CONFIG_HASH_ANNOTATION] = meta.uid;
  // Static pods tolerate every NoExecute taint, so node problems never evict them.
  spec.tolerations = addOrUpdateToleration(spec.tolerations ?? [], {
    operator: "Exists",
    effect: "NoExecute",
  });
  (pod.status ??= {}).phase = "Pending";
}

/**
 * `helper.AddOrUpdateTolerationInPod`: a toleration with the same key, operator, value and effect
 * is replaced (unless equal), otherwise the new one is appended.
 */
function addOrUpdateToleration(list: V1Toleration[], t: V1Toleration): V1Toleration[] {
  const same = (a: V1Toleration) =>
    (a.key ?? "") === (t.key ?? "") && (a.operator ?? "") === (t.operator ?? "") &&
    (a.value ?? "") === (t.value ?? "") && (a.effect ?? "") === (t.effect ?? "");
  const i = list.findIndex(same);
  if (i < 0) return [...list, t];
  if (canonicalJSON(list[i]) === canonicalJSON(t)) return list;
  return list.map((old, j) => (j === i ? t : old));
}

// ---- Hashing -----------------------------------------------------------------------------------

/** JSON with object keys sorted at every level and no whitespace: the pod's deep print. */
export function canonicalJSON(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => {
    if (v === null || typeof v !== "object" || Array.isArray(v)) return v;
    const sorted: Record<string, unknown> = {};
    for (const k of Object.keys(v).sort()) sorted[k] = (v as Record<string, unknown>)[k];
    return sorted;
  }) ?? "null";
}

const encoder = new TextEncoder();

/**
 * FNV-1a with a 128-bit state (Go's `hash/fnv.New128a`), hex encoded big-endian as `Sum` gives
 * it. The state is four 32-bit limbs; multiplying by the prime 2^88 + 0x13b is a multiply by
 * 0x13b plus a shift by 88 bits, and every partial sum stays below 2^53.
 */
export function fnv128a(data: string | Uint8Array): string {
  const bytes = typeof data === "string" ? encoder.encode(data) : data;
  // Offset basis 0x6c62272e07bb014262b821756295c58d, least significant limb first.
  let a0 = 0x6295c58d, a1 = 0x62b82175, a2 = 0x07bb0142, a3 = 0x6c62272e;
  const P = 0x13b, W = 0x100000000;
  for (const b of bytes) {
    a0 = (a0 ^ b) >>> 0;
    const r0 = a0 * P;
    const r1 = a1 * P + Math.floor(r0 / W);
    const r2 = a2 * P + Math.floor(r1 / W) + (a0 & 0xff) * 0x1000000;
    const r3 = a3 * P + Math.floor(r2 / W) + (a0 >>> 8) + (a1 & 0xff) * 0x1000000;
    a0 = r0 % W;
    a1 = r1 % W;
    a2 = r2 % W;
    a3 = r3 % W;
  }
  return [a3, a2, a1, a0].map((x) => x.toString(16).padStart(8, "0")).join("");
}
