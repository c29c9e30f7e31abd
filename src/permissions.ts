/**
 * @module
 * Checks, before anything starts, that the Deno permission set the agent runs under grants
 * every path its configuration names. The single binary and `deno task start` run with the
 * named set `kubelet` from deno.json; a path configured outside it would otherwise fail deep
 * inside some manager at its first use. Has no upstream counterpart: the Go kubelet runs with
 * all of root's rights.
 */

/** A path the agent needs, and the configuration that asks for it. */
export interface PathNeed {
  readonly permission: "read" | "write";
  readonly path: string;
  /** The flag or config field that names the path, e.g. "--kubeconfig" or "staticPodPath". */
  readonly source: string;
}

/** A configured path the permission set does not grant. */
export class PermissionSetError extends Error {
  override name = "PermissionSetError";
  constructor(readonly need: PathNeed) {
    super(
      `the permission set does not allow ${need.permission} access to '${need.path}' (from ${need.source}): ` +
        `add it to "permissions.kubelet.${need.permission}" in deno.json and rebuild, ` +
        `or run with --allow-${need.permission}=${need.path} in place of -P=kubelet`,
    );
  }
}

/** Throws {@link PermissionSetError} for the first need that is not granted. */
export function checkPermissions(needs: readonly PathNeed[]): void {
  for (const need of needs) {
    if (need.path === "") continue;
    const state = Deno.permissions.querySync({ name: need.permission, path: need.path }).state;
    if (state !== "granted") throw new PermissionSetError(need);
  }
}

/** The filesystem path of a `unix://` endpoint, or undefined for other schemes. */
export function unixSocketPath(endpoint: string): string | undefined {
  if (endpoint.startsWith("unix://")) return endpoint.slice("unix://".length);
  if (endpoint.startsWith("/")) return endpoint;
  return undefined;
}
