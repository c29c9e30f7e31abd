/**
 * @module
 * Exact resource arithmetic for qos.ts and kuberuntime/kuberuntime_sandbox.ts: quantities as exact decimals
 * (Go's `resource.Quantity` rounds only when asked for `Value()` or `MilliValue()`, both of which
 * round up), and the pod-wide request and limit sums of upstream
 * `k8s.io/component-helpers/resource/helpers.go` (`PodRequests`, `PodLimits`,
 * `AggregateContainerRequests`, `AggregateContainerLimits`, `IsPodLevelRequestsSet`).
 * In-place resize (status resources) and DRA allocations are not modelled.
 */

import type { V1Container, V1Pod } from "@kubernetes/client-node";
import { QuantitySyntaxError } from "../util/quantity.ts";
import { isRestartableInitContainer } from "../pod/podutil.ts";

/** An exact decimal: `n / 10^s`. */
export interface Dec {
  readonly n: bigint;
  readonly s: number;
}

/** A resource name to amount map, as upstream `v1.ResourceList`. */
export type ResourceList = Map<string, Dec>;

const DECIMAL_SUFFIX: Record<string, number> = {
  n: -9,
  u: -6,
  m: -3,
  "": 0,
  k: 3,
  M: 6,
  G: 9,
  T: 12,
  P: 15,
  E: 18,
};
const BINARY_SUFFIX: Record<string, number> = { Ki: 10, Mi: 20, Gi: 30, Ti: 40, Pi: 50, Ei: 60 };

const QUANTITY =
  /^([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$/;

/** Parses a quantity string exactly; throws {@link QuantitySyntaxError}. */
export function parseDec(input: string): Dec {
  const m = QUANTITY.exec(input);
  if (!m) throw new QuantitySyntaxError(input);
  const [, sign = "", mantissa = "", exp, suffix] = m;
  const [whole = "", frac = ""] = mantissa.split(".");
  let n = BigInt((whole || "0") + frac);
  let s = frac.length;
  let pow10 = 0;
  if (exp !== undefined) pow10 = Number(exp);
  else if (suffix !== undefined && suffix in BINARY_SUFFIX) {
    n <<= BigInt(BINARY_SUFFIX[suffix] ?? 0);
  } else pow10 = DECIMAL_SUFFIX[suffix ?? ""] ?? 0;
  if (pow10 >= 0) n *= 10n ** BigInt(pow10);
  else s -= pow10;
  return { n: sign === "-" ? -n : n, s };
}

function align(a: Dec, b: Dec): [bigint, bigint, number] {
  const s = Math.max(a.s, b.s);
  return [a.n * 10n ** BigInt(s - a.s), b.n * 10n ** BigInt(s - b.s), s];
}

/** a + b. */
export function addDec(a: Dec, b: Dec): Dec {
  const [x, y, s] = align(a, b);
  return { n: x + y, s };
}

/** a - b. */
export function subDec(a: Dec, b: Dec): Dec {
  const [x, y, s] = align(a, b);
  return { n: x - y, s };
}

/** -1, 0 or 1 as a is less than, equal to or greater than b. */
export function cmpDec(a: Dec, b: Dec): number {
  const [x, y] = align(a, b);
  return x < y ? -1 : x > y ? 1 : 0;
}

/** Whether the amount is zero. */
export function isZeroDec(a: Dec | undefined): boolean {
  return a === undefined || a.n === 0n;
}

function ceilScaled(a: Dec, scale: number): bigint {
  const shift = scale - a.s;
  if (shift >= 0) return a.n * 10n ** BigInt(shift);
  const d = 10n ** BigInt(-shift);
  const q = a.n / d;
  return a.n % d > 0n ? q + 1n : q;
}

/** Go `Quantity.Value()`: the amount rounded up to a whole unit; 0 for undefined. */
export function valueOf(a: Dec | undefined): bigint {
  return a === undefined ? 0n : ceilScaled(a, 0);
}

/** Go `Quantity.MilliValue()`: the amount in thousandths, rounded up; 0 for undefined. */
export function milliValueOf(a: Dec | undefined): bigint {
  return a === undefined ? 0n : ceilScaled(a, 3);
}

/** Parses a `{name: quantity}` object from the API into a {@link ResourceList}. */
export function resourceList(obj: Readonly<Record<string, string>> | undefined): ResourceList {
  const out: ResourceList = new Map();
  for (const [name, q] of Object.entries(obj ?? {})) out.set(name, parseDec(String(q)));
  return out;
}

function addInto(into: ResourceList, add: ResourceList): void {
  for (const [name, q] of add) {
    const have = into.get(name);
    into.set(name, have === undefined ? q : addDec(have, q));
  }
}

function maxInto(into: ResourceList, other: ResourceList): void {
  for (const [name, q] of other) {
    const have = into.get(name);
    if (have === undefined || cmpDec(q, have) > 0) into.set(name, q);
  }
}

type Pick = (c: V1Container) => ResourceList;

// Regular containers and sidecars run together; each plain init container runs with the
// sidecars started before it; the pod needs the larger of the two.
function aggregate(pod: V1Pod, pick: Pick): ResourceList {
  const total: ResourceList = new Map();
  for (const c of pod.spec?.containers ?? []) addInto(total, pick(c));
  const sidecars: ResourceList = new Map();
  const initMax: ResourceList = new Map();
  for (const c of pod.spec?.initContainers ?? []) {
    const own = pick(c);
    if (isRestartableInitContainer(c)) {
      addInto(total, own);
      addInto(sidecars, own);
      maxInto(initMax, sidecars);
    } else {
      const withSidecars: ResourceList = new Map();
      addInto(withSidecars, own);
      addInto(withSidecars, sidecars);
      maxInto(initMax, withSidecars);
    }
  }
  maxInto(total, initMax);
  return total;
}

/** Upstream `AggregateContainerRequests`: the containers' requests as the pod needs them. */
export function aggregateContainerRequests(pod: V1Pod): ResourceList {
  return aggregate(pod, (c) => resourceList(c.resources?.requests));
}

/** Upstream `AggregateContainerLimits`. */
export function aggregateContainerLimits(pod: V1Pod): ResourceList {
  return aggregate(pod, (c) => resourceList(c.resources?.limits));
}

/** Upstream `IsSupportedPodLevelResource`: cpu, memory and hugepages. */
export function isSupportedPodLevelResource(name: string): boolean {
  return name === "cpu" || name === "memory" || name.startsWith("hugepages-");
}

/** Upstream `IsPodLevelRequestsSet`: spec.resources.requests names a supported resource. */
export function isPodLevelRequestsSet(pod: V1Pod): boolean {
  return Object.keys(pod.spec?.resources?.requests ?? {}).some(isSupportedPodLevelResource);
}

/** Upstream `IsPodLevelResourcesSet`: spec.resources requests or limits name a supported one. */
export function isPodLevelResourcesSet(pod: V1Pod): boolean {
  const r = pod.spec?.resources;
  return [...Object.keys(r?.requests ?? {}), ...Object.keys(r?.limits ?? {})].some(
    isSupportedPodLevelResource,
  );
}

/** Options of {@link podRequests} and {@link podLimits} (upstream `PodResourcesOptions`). */
export interface PodResourcesOptions {
  /** @default false */
  readonly excludeOverhead?: boolean;
  /** Ignore spec.resources (the PodLevelResources gate off). @default false */
  readonly skipPodLevelResources?: boolean;
}

/** Upstream `PodRequests`. */
export function podRequests(pod: V1Pod, opts: PodResourcesOptions = {}): ResourceList {
  const reqs = aggregateContainerRequests(pod);
  if (!opts.skipPodLevelResources && isPodLevelRequestsSet(pod)) {
    for (const [name, q] of resourceList(pod.spec?.resources?.requests)) {
      if (isSupportedPodLevelResource(name)) reqs.set(name, q);
    }
  }
  if (!opts.excludeOverhead && pod.spec?.overhead) addInto(reqs, resourceList(pod.spec.overhead));
  return reqs;
}

/** Upstream `PodLimits`: overhead is only added to limits that are set. */
export function podLimits(pod: V1Pod, opts: PodResourcesOptions = {}): ResourceList {
  const limits = aggregateContainerLimits(pod);
  if (!opts.skipPodLevelResources && isPodLevelResourcesSet(pod)) {
    for (const [name, q] of resourceList(pod.spec?.resources?.limits)) {
      if (isSupportedPodLevelResource(name)) limits.set(name, q);
    }
  }
  if (!opts.excludeOverhead && pod.spec?.overhead) {
    for (const [name, q] of resourceList(pod.spec.overhead)) {
      const have = limits.get(name);
      if (have !== undefined) limits.set(name, addDec(have, q));
    }
  }
  return limits;
}
