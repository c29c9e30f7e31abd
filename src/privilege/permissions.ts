/**
 * @module
 * Checks, before anything starts, that the Deno permission set the agent runs under grants
 * every path its configuration names. The single binary and `deno task start` run with the
 * named set `kubelet` from deno.json; a path configured outside it would otherwise fail deep
 * inside some manager at its first use. Has no upstream counterpart: the Go kubelet runs with
 * all of root's rights.
 */

import type { KubeletServer } from "../apis/flags.ts";

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

const ALL = ["read", "write", "run", "net", "env", "sys", "ffi", "import"] as const;

/** The permissions this process lacks of those handing out a narrower set needs: all of them. */
export function missingPermissions(): string[] {
  return ALL.filter((name) => Deno.permissions.querySync({ name }).state !== "granted");
}

/** The filesystem path of a `unix://` endpoint, or undefined for other schemes. */
export function unixSocketPath(endpoint: string): string | undefined {
  if (endpoint.startsWith("unix://")) return endpoint.slice("unix://".length);
  if (endpoint.startsWith("/")) return endpoint;
  return undefined;
}

/** The paths the agent will touch, with what names each, for the permission-set check. */
export function pathNeeds(s: KubeletServer): PathNeed[] {
  const { flags, config } = s;
  const needs: PathNeed[] = [
    { permission: "read", path: flags.kubeConfig, source: "--kubeconfig" },
    { permission: "read", path: flags.bootstrapKubeconfig, source: "--bootstrap-kubeconfig" },
    // Bootstrapping writes the kubeconfig it obtains.
    {
      permission: "write",
      path: flags.bootstrapKubeconfig === "" ? "" : flags.kubeConfig,
      source: "--kubeconfig",
    },
    { permission: "read", path: flags.rootDirectory, source: "--root-dir" },
    { permission: "write", path: flags.rootDirectory, source: "--root-dir" },
    { permission: "read", path: flags.certDirectory, source: "--cert-dir" },
    { permission: "write", path: flags.certDirectory, source: "--cert-dir" },
    { permission: "read", path: flags.lockFilePath, source: "--lock-file" },
    { permission: "write", path: flags.lockFilePath, source: "--lock-file" },
    { permission: "read", path: config.staticPodPath ?? "", source: "staticPodPath" },
    { permission: "read", path: config.tlsCertFile ?? "", source: "tlsCertFile" },
    { permission: "read", path: config.tlsPrivateKeyFile ?? "", source: "tlsPrivateKeyFile" },
    {
      permission: "read",
      path: config.authentication.x509.clientCAFile ?? "",
      source: "authentication.x509.clientCAFile",
    },
    { permission: "read", path: config.resolvConf ?? "", source: "resolvConf" },
    { permission: "read", path: config.volumePluginDir ?? "", source: "volumePluginDir" },
    {
      permission: "read",
      path: flags.imageCredentialProviderConfigFile,
      source: "--image-credential-provider-config",
    },
    {
      permission: "read",
      path: flags.imageCredentialProviderBinDir,
      source: "--image-credential-provider-bin-dir",
    },
    { permission: "read", path: config.podLogsDir ?? "", source: "podLogsDir" },
    { permission: "write", path: config.podLogsDir ?? "", source: "podLogsDir" },
  ];
  for (
    const [field, endpoint] of [
      ["containerRuntimeEndpoint", config.containerRuntimeEndpoint],
      ["imageServiceEndpoint", config.imageServiceEndpoint ?? ""],
    ] as const
  ) {
    const path = unixSocketPath(endpoint);
    if (path === undefined) continue;
    needs.push({ permission: "read", path, source: field }, {
      permission: "write",
      path,
      source: field,
    });
  }
  return needs;
}
