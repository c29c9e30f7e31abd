/**
 * @module
 * Pod admission by node predicates: decides whether a pod the kubelet was handed may run on
 * this node given the pods already admitted. It owns no state and talks to nothing; the caller
 * supplies the node object and the active pods.
 *
 * Corresponds to upstream `pkg/kubelet/lifecycle/predicate.go` (`predicateAdmitHandler.Admit`)
 * and the scheduler helpers it calls through `scheduler.AdmissionCheck`: noderesources `Fits`,
 * required node affinity, `nodename.Fits`, `nodeports.Fits`, and the NoExecute taint check.
 * Pod requests follow `k8s.io/component-helpers/resource.PodRequests` (sidecar-aware).
 *
 * Not covered: preemption of lower-priority pods for critical/static pods (upstream's
 * `AdmissionFailureHandler`), device-plugin resource updates, DRA-backed extended resources,
 * pod-level `spec.resources`, in-place resize allocations, SupplementalGroupsPolicy.
 */

import type {
  V1Container,
  V1Node,
  V1NodeSelectorRequirement,
  V1NodeSelectorTerm,
  V1Pod,
} from "@kubernetes/client-node";
import { parseQuantity } from "../util/quantity.ts";

/** Options for {@link admitPod}. */
export interface AdmitPodOptions {
  /** The pod asking to be admitted. */
  pod: V1Pod;
  /** Pods already admitted to this node and not terminated. */
  otherPods: V1Pod[];
  /** This node: `status.allocatable`, `metadata.labels`, `spec.taints` are read. */
  node: V1Node;
  /**
   * The kubelet's operating system (Go's `runtime.GOOS`).
   * @default "linux"
   */
  hostOS?: string;
}

/** The outcome of {@link admitPod}; reasons and messages are upstream's. */
export type AdmitResult =
  | { admit: true }
  | { admit: false; reason: string; message: string };

/** Reason when the pod's `kubernetes.io/os` label differs from the node's OS. */
export const POD_OS_SELECTOR_NODE_LABEL_DOES_NOT_MATCH = "PodOSSelectorNodeLabelDoesNotMatch";
/** Reason when the pod's `spec.os.name` differs from the node's OS. */
export const POD_OS_NOT_SUPPORTED = "PodOSNotSupported";

const LABEL_OS = "kubernetes.io/os";
const CONFIG_SOURCE_ANNOTATION = "kubernetes.io/config.source";

/** A predicate failure, formatted the way upstream's `PredicateFailureError` is. */
function predicateFailure(name: string, desc: string): AdmitResult {
  return { admit: false, reason: name, message: `Predicate ${name} failed: ${desc}` };
}

/**
 * Decides whether `pod` may be admitted, returning the first failure in upstream's order:
 * OS label, OS field, resources, node affinity, node name, host ports, NoExecute taints.
 * Throws `QuantitySyntaxError` when a request is not a quantity (API validation prevents it).
 */
export function admitPod(opts: AdmitPodOptions): AdmitResult {
  const { pod, otherPods, node } = opts;
  const hostOS = opts.hostOS ?? "linux";

  // Upstream overwrites a missing or wrong node OS label with runtime.GOOS before comparing,
  // so the comparison is always against the host OS.
  const podOSLabel = pod.metadata?.labels?.[LABEL_OS];
  if (podOSLabel !== undefined && podOSLabel !== hostOS) {
    return {
      admit: false,
      reason: POD_OS_SELECTOR_NODE_LABEL_DOES_NOT_MATCH,
      message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label",
    };
  }
  if (pod.spec?.os !== undefined && pod.spec.os.name !== hostOS) {
    return {
      admit: false,
      reason: POD_OS_NOT_SUPPORTED,
      message: "Failed to admit pod as the OS field doesn't match node OS",
    };
  }

  const insufficient = insufficientResources(pod, otherPods, node);
  if (insufficient !== undefined) return insufficient;

  if (!matchesRequiredNodeAffinity(pod, node)) {
    return predicateFailure("NodeAffinity", "node(s) didn't match Pod's node affinity/selector");
  }
  const nodeName = pod.spec?.nodeName;
  if (nodeName && nodeName !== node.metadata?.name) {
    return predicateFailure("NodeName", "node(s) didn't match the requested node name");
  }
  if (!fitsHostPorts(pod, otherPods)) {
    return predicateFailure(
      "NodePorts",
      "node(s) didn't have free ports for the requested pod ports",
    );
  }
  // Static pods are exempt: the kubelet must run them regardless of taints.
  if (!isStaticPod(pod) && hasUntoleratedNoExecuteTaint(pod, node)) {
    return predicateFailure("TaintToleration", "node(s) had taints that the pod didn't tolerate");
  }
  return { admit: true };
}

// ---------------------------------------------------------------------------------------------
// Resources

type ResourceList = Map<string, number>;

function toResourceList(src: Record<string, string> | undefined): ResourceList {
  const out: ResourceList = new Map();
  for (const [name, q] of Object.entries(src ?? {})) out.set(name, parseQuantity(q));
  return out;
}

function addInto(dst: ResourceList, src: ResourceList): void {
  for (const [name, v] of src) dst.set(name, (dst.get(name) ?? 0) + v);
}

function maxInto(dst: ResourceList, src: ResourceList): void {
  for (const [name, v] of src) dst.set(name, Math.max(dst.get(name) ?? 0, v));
}

function isSidecar(c: V1Container): boolean {
  return c.restartPolicy === "Always";
}

/**
 * Pod requests in base units (cores, bytes): the larger of the running set (regular containers
 * plus sidecars) and the peak of any init container (itself plus the sidecars started before
 * it), plus overhead. Upstream `resource.PodRequests`.
 */
export function podRequests(pod: V1Pod): ResourceList {
  const reqs: ResourceList = new Map();
  for (const c of pod.spec?.containers ?? []) addInto(reqs, toResourceList(c.resources?.requests));
  const sidecars: ResourceList = new Map();
  const initPeak: ResourceList = new Map();
  for (const c of pod.spec?.initContainers ?? []) {
    const own = toResourceList(c.resources?.requests);
    if (isSidecar(c)) {
      addInto(reqs, own);
      addInto(sidecars, own);
      maxInto(initPeak, sidecars);
    } else {
      const whileRunning: ResourceList = new Map();
      addInto(whileRunning, own);
      addInto(whileRunning, sidecars);
      maxInto(initPeak, whileRunning);
    }
  }
  maxInto(reqs, initPeak);
  addInto(reqs, toResourceList(pod.spec?.overhead));
  return reqs;
}

/** Integer amount in upstream's units: milli-cores for cpu, base units otherwise, rounded up. */
function toUnits(name: string, value: number): number {
  const scaled = name === "cpu" ? value * 1000 : value;
  // Trim float noise (0.1 + 0.2) before rounding up as Quantity.MilliValue/Value do.
  return Math.ceil(Number(scaled.toPrecision(12)));
}

/** Names the scheduler tracks as scalar resources (hugepages, extended, prefixed native). */
function isScalarResource(name: string): boolean {
  return name.startsWith("hugepages-") || name.includes("/");
}

const QUALIFIED_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/**
 * Extended resources: domain-qualified names outside `kubernetes.io/`, not `requests.*`, that
 * are still qualified names with `requests.` before them (upstream v1helper
 * IsExtendedResourceName, which device plugins' resource names must pass).
 */
export function isExtendedResourceName(name: string): boolean {
  if (!name.includes("/") || name.includes("kubernetes.io/") || name.startsWith("requests.")) {
    return false;
  }
  const [prefix, local, ...more] = `requests.${name}`.split("/");
  return more.length === 0 && prefix!.length <= 253 && DNS1123_SUBDOMAIN.test(prefix!) &&
    local!.length <= 63 && QUALIFIED_NAME.test(local!);
}

function podUnits(pod: V1Pod): Map<string, number> {
  const out = new Map<string, number>();
  for (const [name, v] of podRequests(pod)) out.set(name, toUnits(name, v));
  return out;
}

function outOf(name: string, requested: number, used: number, capacity: number): AdmitResult {
  const reasons: Record<string, string> = {
    cpu: "OutOfcpu",
    memory: "OutOfmemory",
    "ephemeral-storage": "OutOfephemeral-storage",
    pods: "OutOfpods",
  };
  return {
    admit: false,
    reason: reasons[name] ?? `OutOf${name}`,
    message: `Node didn't have enough resource: ${name}, requested: ${requested}, ` +
      `used: ${used}, capacity: ${capacity}`,
  };
}

/** The first resource the node lacks, in upstream's order, or undefined when the pod fits. */
function insufficientResources(
  pod: V1Pod,
  otherPods: V1Pod[],
  node: V1Node,
): AdmitResult | undefined {
  const allocatable = new Map<string, number>();
  for (const [name, q] of Object.entries(node.status?.allocatable ?? {})) {
    allocatable.set(name, toUnits(name, parseQuantity(q)));
  }

  const allowedPods = allocatable.get("pods") ?? 0;
  if (otherPods.length + 1 > allowedPods) {
    return outOf("pods", 1, otherPods.length, allowedPods);
  }

  // Extended resources the node does not know are cluster-level: ignore them.
  const wanted = podUnits(pod);
  for (const name of [...wanted.keys()]) {
    if (isExtendedResourceName(name) && !allocatable.has(name)) wanted.delete(name);
  }

  const used = new Map<string, number>();
  for (const other of otherPods) addInto(used, podUnits(other));

  const names = ["cpu", "memory", "ephemeral-storage"];
  names.push(...[...wanted.keys()].filter(isScalarResource).sort());
  for (const name of names) {
    const requested = wanted.get(name) ?? 0;
    if (requested <= 0) continue;
    const capacity = allocatable.get(name) ?? 0;
    const inUse = used.get(name) ?? 0;
    if (requested > capacity - inUse) return outOf(name, requested, inUse, capacity);
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// Node affinity and selector

function matchesRequirement(req: V1NodeSelectorRequirement, labels: Record<string, string>) {
  const has = Object.hasOwn(labels, req.key);
  const value = labels[req.key];
  const values = req.values ?? [];
  switch (req.operator) {
    case "In":
      return values.length > 0 && has && values.includes(value ?? "");
    case "NotIn":
      return values.length > 0 && (!has || !values.includes(value ?? ""));
    case "Exists":
      return values.length === 0 && has;
    case "DoesNotExist":
      return values.length === 0 && !has;
    case "Gt":
    case "Lt": {
      const bound = values.length === 1 ? parseIntStrict(values[0] ?? "") : undefined;
      const actual = has ? parseIntStrict(value ?? "") : undefined;
      if (bound === undefined || actual === undefined) return false;
      return req.operator === "Gt" ? actual > bound : actual < bound;
    }
    default:
      return false;
  }
}

function parseIntStrict(s: string): number | undefined {
  return /^[+-]?[0-9]+$/.test(s) ? Number(s) : undefined;
}

function matchesField(req: V1NodeSelectorRequirement, nodeName: string): boolean {
  const values = req.values ?? [];
  if (req.key !== "metadata.name" || values.length !== 1) return false;
  if (req.operator === "In") return values[0] === nodeName;
  if (req.operator === "NotIn") return values[0] !== nodeName;
  return false;
}

/** An empty term matches nothing; otherwise every expression and field must match. */
function matchesTerm(term: V1NodeSelectorTerm, node: V1Node): boolean {
  const exprs = term.matchExpressions ?? [];
  const fields = term.matchFields ?? [];
  if (exprs.length === 0 && fields.length === 0) return false;
  const labels = node.metadata?.labels ?? {};
  const name = node.metadata?.name ?? "";
  return exprs.every((r) => matchesRequirement(r, labels)) &&
    fields.every((r) => matchesField(r, name));
}

/** `spec.nodeSelector` and any required node affinity term must both match. */
function matchesRequiredNodeAffinity(pod: V1Pod, node: V1Node): boolean {
  const labels = node.metadata?.labels ?? {};
  for (const [key, value] of Object.entries(pod.spec?.nodeSelector ?? {})) {
    if (labels[key] !== value) return false;
  }
  const required = pod.spec?.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution;
  if (required === undefined) return true;
  return required.nodeSelectorTerms.some((t) => matchesTerm(t, node));
}

// ---------------------------------------------------------------------------------------------
// Host ports

const ANY_IP = "0.0.0.0";

interface HostPort {
  ip: string;
  protocol: string;
  port: number;
}

/** Host ports of regular containers (upstream ignores init containers here). */
function hostPorts(pod: V1Pod): HostPort[] {
  const out: HostPort[] = [];
  for (const c of pod.spec?.containers ?? []) {
    for (const p of c.ports ?? []) {
      if ((p.hostPort ?? 0) <= 0) continue;
      out.push({ ip: p.hostIP || ANY_IP, protocol: p.protocol || "TCP", port: p.hostPort ?? 0 });
    }
  }
  return out;
}

/** A wildcard address conflicts with every address; a specific one with itself and 0.0.0.0. */
function fitsHostPorts(pod: V1Pod, otherPods: V1Pod[]): boolean {
  const used = otherPods.flatMap(hostPorts);
  return hostPorts(pod).every((want) =>
    !used.some((u) =>
      u.protocol === want.protocol && u.port === want.port &&
      (want.ip === ANY_IP || u.ip === ANY_IP || u.ip === want.ip)
    )
  );
}

// ---------------------------------------------------------------------------------------------
// Taints

/** A pod from a file or URL rather than the API server (upstream `types.IsStaticPod`). */
function isStaticPod(pod: V1Pod): boolean {
  const source = pod.metadata?.annotations?.[CONFIG_SOURCE_ANNOTATION];
  return source !== undefined && source !== "api";
}

function hasUntoleratedNoExecuteTaint(pod: V1Pod, node: V1Node): boolean {
  const tolerations = pod.spec?.tolerations ?? [];
  return (node.spec?.taints ?? []).some((taint) =>
    taint.effect === "NoExecute" &&
    !tolerations.some((t) => {
      if (t.effect && t.effect !== taint.effect) return false;
      if (t.key && t.key !== taint.key) return false;
      if (t.operator === "Exists") return true;
      if (t.operator === undefined || t.operator === "" || t.operator === "Equal") {
        return (t.value ?? "") === (taint.value ?? "");
      }
      return false;
    })
  );
}
