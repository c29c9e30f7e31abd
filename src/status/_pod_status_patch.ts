/**
 * @module
 * The status patch the status manager sends (private to status_manager.ts): a strategic merge
 * patch from the apiserver's status to the kubelet's, carrying `metadata.uid` so that a pod
 * recreated under the same name is never patched (the apiserver refuses a UID change). It is what
 * upstream's `statusutil.PatchPodStatus` builds with `strategicpatch.CreateTwoWayMergePatch`:
 * atomic lists (container statuses) are replaced, lists merged by key (conditions by `type`, pod
 * and host IPs by `ip`, resource claim statuses by `name`) send only the changed elements, a
 * `$patch: delete` for each removed one and a `$setElementOrder` directive, and removed fields are
 * sent as null. Also the JSON normalisation and semantic equality the status manager compares
 * statuses with.
 */

/** A JSON value as decoded from the apiserver. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

/** The merge keys of PodStatus lists with `patchStrategy: merge`. */
const MERGE_KEYS: Readonly<Record<string, string>> = {
  conditions: "type",
  podIPs: "ip",
  hostIPs: "ip",
  resourceClaimStatuses: "name",
};

/**
 * The JSON form of a value as Go would send it: undefined and null members dropped (omitempty,
 * and a zero metav1.Time is null), empty list members dropped (every list of PodStatus is
 * omitempty), Dates as RFC 3339 with seconds precision.
 */
export function toJson(value: unknown): Json | undefined {
  if (value === undefined || value === null) return undefined;
  if (value instanceof Date) {
    return Number.isNaN(value.getTime())
      ? undefined
      : new Date(Math.floor(value.getTime() / 1000) * 1000).toISOString().replace(".000Z", "Z");
  }
  if (Array.isArray(value)) return value.map((v) => toJson(v) ?? null);
  if (typeof value === "object") {
    const out: JsonObject = {};
    for (const [k, v] of Object.entries(value)) {
      const j = toJson(v);
      if (j !== undefined && !(Array.isArray(j) && j.length === 0)) out[k] = j;
    }
    return out;
  }
  if (typeof value === "bigint") return Number(value);
  if (typeof value === "boolean" || typeof value === "number" || typeof value === "string") {
    return value;
  }
  return undefined;
}

function isObject(v: Json | undefined): v is JsonObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Deep equality of two normalised JSON values (upstream's apiequality.Semantic.DeepEqual). */
export function jsonEqual(a: Json | undefined, b: Json | undefined): boolean {
  if (a === b) return true;
  if (Array.isArray(a)) {
    return Array.isArray(b) && a.length === b.length && a.every((v, i) => jsonEqual(v, b[i]));
  }
  if (isObject(a) && isObject(b)) {
    const ka = Object.keys(a);
    if (ka.length !== Object.keys(b).length) return false;
    return ka.every((k) => Object.hasOwn(b, k) && jsonEqual(a[k], b[k]));
  }
  return false;
}

/** The two-way diff of two objects: changed members, removed ones as null. */
function diffObject(oldObj: JsonObject, newObj: JsonObject, mergeKeys: boolean): JsonObject {
  const patch: JsonObject = {};
  for (const key of Object.keys(oldObj)) {
    if (!Object.hasOwn(newObj, key)) patch[key] = null;
  }
  for (const [key, nv] of Object.entries(newObj)) {
    const ov = oldObj[key];
    if (jsonEqual(ov, nv)) continue;
    const mergeKey = mergeKeys ? MERGE_KEYS[key] : undefined;
    if (mergeKey !== undefined && Array.isArray(nv) && (ov === undefined || Array.isArray(ov))) {
      const list = diffMergeList(ov ?? [], nv, mergeKey);
      // An empty list where there was none changes nothing, and the apiserver refuses a
      // directive with no elements ("no elements in any of the given slices").
      if (list.items.length === 0 && list.order.length === 0) continue;
      patch[key] = list.items;
      patch[`$setElementOrder/${key}`] = list.order;
    } else if (isObject(ov) && isObject(nv)) {
      patch[key] = diffObject(ov, nv, false);
    } else {
      patch[key] = nv;
    }
  }
  return patch;
}

/** A list merged by `key`: changed and new elements, deletions, and the new order. */
function diffMergeList(
  oldList: Json[],
  newList: Json[],
  key: string,
): { items: Json[]; order: Json[] } {
  const keyOf = (v: Json) => (isObject(v) ? v[key] : undefined);
  const items: Json[] = [];
  for (const nv of newList) {
    const k = keyOf(nv);
    const ov = oldList.find((o) => jsonEqual(keyOf(o), k));
    if (ov === undefined) {
      items.push(nv);
    } else if (!jsonEqual(ov, nv) && isObject(ov) && isObject(nv)) {
      items.push({ ...diffObject(ov, nv, false), [key]: k ?? null });
    }
  }
  for (const ov of oldList) {
    const k = keyOf(ov);
    if (!newList.some((nv) => jsonEqual(keyOf(nv), k))) {
      items.push({ $patch: "delete", [key]: k ?? null });
    }
  }
  return { items, order: newList.map((nv) => ({ [key]: keyOf(nv) ?? null })) };
}

/**
 * The strategic merge patch of the pod's status subresource from `oldStatus` (the apiserver's)
 * to `newStatus`, with `metadata.uid` as precondition; `unchanged` when it carries nothing else.
 */
export function podStatusPatch(
  oldStatus: unknown,
  newStatus: unknown,
  uid: string,
): { patch: JsonObject; unchanged: boolean } {
  const o = toJson(oldStatus);
  const n = toJson(newStatus);
  const status = diffObject(isObject(o) ? o : {}, isObject(n) ? n : {}, true);
  const unchanged = Object.keys(status).length === 0;
  const patch: JsonObject = { metadata: { uid } };
  if (!unchanged) patch.status = status;
  return { patch, unchanged };
}
