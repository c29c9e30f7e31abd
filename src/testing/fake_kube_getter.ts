/**
 * @module
 * A stand-in for the kube client's `get` and `patch`: objects served by path, anything else
 * answered as the apiserver answers a missing object (404 NotFound, `<resource> "<name>" not
 * found`); patches recorded, not applied. Objects can be added and changed between calls. Test
 * support only.
 */

import { KubeApiError } from "../client/kube_client.ts";

/** A `get` over a map of paths to objects; see the module documentation. */
export class FakeKubeGetter {
  readonly objects: Map<string, unknown>;
  /** Every path asked for, in order. */
  readonly gets: string[] = [];
  /** Every patch sent, in order. */
  readonly patches: { path: string; body: unknown; type: string }[] = [];

  constructor(objects: Record<string, unknown> = {}) {
    this.objects = new Map(Object.entries(objects));
  }

  patch<T>(path: string, body: unknown, type: string, _signal?: AbortSignal): Promise<T> {
    this.patches.push({ path, body: structuredClone(body), type });
    return Promise.resolve({} as T);
  }

  get<T>(path: string, _signal?: AbortSignal): Promise<T> {
    this.gets.push(path);
    if (this.objects.has(path)) {
      return Promise.resolve(structuredClone(this.objects.get(path)) as T);
    }
    const parts = path.split("/");
    const name = parts.at(-1);
    const resource = parts.at(-2);
    return Promise.reject(
      new KubeApiError("GET", path, 404, "NotFound", `${resource} "${name}" not found`),
    );
  }
}
