/**
 * @module
 * The agent's permission set, computed from its configuration, and the Deno Worker the agent
 * runs in under it. The process starts with all permissions (Deno 2.9 gives no narrower way to
 * reach /proc and /sys, and the binary cannot know its paths before it reads its config), mounts
 * the host view (host_view.ts), and runs the agent in a Worker whose permissions list exactly
 * the paths the configuration names, the host view, the programs the agent runs and nothing
 * else: a read of /etc/shadow, a write outside the root dir, log dirs and cgroup tree, or a
 * spawn of an unnamed program fails with Deno's NotCapable inside the agent.
 *
 * Has no upstream counterpart: the Go kubelet runs with all of root's rights.
 */

import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { systemBusAddress, unixPathOf } from "./dbus.ts";
import { type HostViewEntry, openHostView } from "./host_view.ts";
import type { Logger } from "./klog.ts";
import { type HostCall, serveHostCall } from "./sandbox_calls.ts";
import type { KubeletServer } from "./kubelet_server.ts";
import { pathNeeds } from "./permissions.ts";

/** Where logind's drop-ins go (_nodeshutdown_logind.ts LOGIND_CONFIG_DIRECTORY; a test keeps them equal). */
export const LOGIND_DROPIN_DIRECTORY = "/etc/systemd/logind.conf.d";

/** The programs the agent runs: volume mounts and unmounts, filesystem stats, and the shutdown inhibitor lock. */
export const SANDBOX_PROGRAMS: readonly string[] = ["mount", "umount", "df", "systemd-inhibit"];

/** Host files every agent reads whatever its configuration: the hosts file host-network pods get. */
const HOST_READS: readonly string[] = ["/etc/hosts"];

/** The `sys` calls the agent makes (node status, stats, addresses). */
const SYS: readonly Deno.SysPermissionDescriptor["kind"][] = [
  "hostname",
  "osRelease",
  "osUptime",
  "loadavg",
  "networkInterfaces",
  "systemMemoryInfo",
  "uid",
  "gid",
];

/** A Worker's permissions (the unstable `deno.permissions` option of `new Worker`). */
export interface SandboxPermissions {
  readonly read: string[];
  readonly write: string[];
  readonly run: string[];
  readonly net: true;
  readonly env: true;
  readonly sys: Deno.SysPermissionDescriptor["kind"][];
  readonly ffi: false;
  readonly import: true;
}

/** Options of {@link sandboxPermissions}. */
export interface SandboxPermissionsOptions {
  /** The agent's flags and configuration. */
  readonly server: KubeletServer;
  /** The host view's root and what it holds. */
  readonly view: { readonly root: string; readonly mounted: readonly HostViewEntry[] };
  /** Where the legacy container log links go. @default "/var/log/containers" */
  readonly containerLogsDir?: string;
  /** The directory the node log endpoint `/logs/` serves. @default "/var/log" */
  readonly nodeLogDir?: string;
  /** The agent's own code, read when a module is imported lazily. @default this module's tree */
  readonly codeDir?: string;
  /** The system bus address. @default DBUS_SYSTEM_BUS_ADDRESS, else the well-known socket */
  readonly busAddress?: string;
  /** More files to read: those the kubeconfigs name ({@link kubeconfigFiles}). @default [] */
  readonly extraRead?: readonly string[];
}

/** The permission set of the agent under `opts.server`'s configuration. */
export function sandboxPermissions(opts: SandboxPermissionsOptions): SandboxPermissions {
  const { server, view } = opts;
  const read = new Set<string>();
  const write = new Set<string>();
  for (const need of pathNeeds(server)) {
    if (need.path === "") continue;
    (need.permission === "read" ? read : write).add(need.path);
  }
  read.add(server.flags.kubeletConfigFile);
  read.add(server.flags.kubeletDropinConfigDirectory);
  for (const p of HOST_READS) read.add(p);
  for (const p of opts.extraRead ?? []) read.add(p);
  const logs = opts.containerLogsDir ?? "/var/log/containers";
  read.add(logs);
  write.add(logs);
  read.add(opts.nodeLogDir ?? "/var/log");
  // The whole view is readable (it holds only what was mounted: a host path that is missing
  // reads as NotFound, not as a permission error); only the cgroup tree is writable.
  read.add(view.root);
  for (const e of view.mounted) if (e.writable) write.add(join(view.root, e.path));
  read.add(opts.codeDir ?? dirname(dirname(fileURLToPath(import.meta.url))));
  const shutdown = (server.config.shutdownGracePeriod ?? 0) > 0 ||
    (server.config.shutdownGracePeriodByPodPriority ?? []).length > 0;
  if (shutdown || server.config.cgroupDriver === "systemd") {
    // logind (node shutdown) and systemd (the systemd cgroup driver) over the system bus.
    const address = opts.busAddress ?? systemBusAddress((name) => Deno.env.get(name));
    let bus: string | undefined;
    try {
      bus = unixPathOf(address);
    } catch {
      // Not a unix socket: the agent says so when it connects.
    }
    if (bus) { for (const set of [read, write]) set.add(bus); }
  }
  if (shutdown) {
    // logind's InhibitDelayMaxSec drop-in.
    for (const set of [read, write]) set.add(LOGIND_DROPIN_DIRECTORY);
  }
  read.delete("");
  write.delete("");
  return {
    read: [...read].sort(),
    write: [...write].sort(),
    run: [...SANDBOX_PROGRAMS],
    net: true,
    env: true,
    sys: [...SYS],
    ffi: false,
    import: true,
  };
}

/**
 * The files the kubeconfigs at `paths` name (CA, client certificate and key); a kubeconfig that
 * does not exist yet (bootstrap) or cannot be read names none: the agent says why when it loads it.
 */
export async function kubeconfigFiles(paths: readonly string[]): Promise<string[]> {
  const { loadKubeconfig } = await import("./kubeconfig.ts");
  const out: string[] = [];
  for (const path of paths) {
    if (path === "") continue;
    const rc = await loadKubeconfig(path).catch(() => undefined);
    for (const f of [rc?.caFile, rc?.certFile, rc?.keyFile]) if (f) out.push(f);
  }
  return out;
}

/** What the launcher hands the agent's Worker. */
export interface SandboxStart {
  readonly args: readonly string[];
  /** The host view's root, for {@link setHostRoot}. */
  readonly hostRoot: string;
}

/** What the agent's Worker tells the launcher when it ends. */
export interface SandboxExit {
  readonly exit: number;
}

/** Options of {@link runInSandbox}. */
export interface RunInSandboxOptions {
  /** The command line, handed to the agent unchanged. */
  readonly args: readonly string[];
  /** The flags and configuration the launcher read, for the permission set. */
  readonly server: KubeletServer;
  readonly logger: Logger;
  /** The module the Worker runs. @default sandbox_worker.ts */
  readonly worker?: URL;
  /** Where host views live. @default "/run/kubelet-ts" */
  readonly runDir?: string;
}

/** The host view's directory for an agent with `rootDirectory`: one per root dir. */
export async function hostViewDir(runDir: string, rootDirectory: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(rootDirectory));
  const hex = [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
  return join(runDir, `view-${hex.slice(0, 12)}`);
}

/**
 * Mounts the host view, runs the agent in a Worker under {@link sandboxPermissions} and
 * resolves with its exit code once it ends (an uncaught error in it is exit 1); the view is
 * removed after.
 */
export async function runInSandbox(opts: RunInSandboxOptions): Promise<number> {
  const { logger } = opts;
  const dir = await hostViewDir(opts.runDir ?? "/run/kubelet-ts", opts.server.flags.rootDirectory);
  const view = await openHostView({ dir });
  try {
    const { flags } = opts.server;
    // Bootstrapping writes the kubeconfig, and only it, into its directory: make the directory
    // here rather than grant the agent all of it (often /etc/kubernetes, static pods included).
    if (flags.bootstrapKubeconfig !== "" && flags.kubeConfig !== "") {
      await Deno.mkdir(dirname(flags.kubeConfig), { recursive: true, mode: 0o755 });
    }
    const permissions = sandboxPermissions({
      server: opts.server,
      view,
      extraRead: await kubeconfigFiles([flags.kubeConfig, flags.bootstrapKubeconfig]),
    });
    logger.info("Running the kubelet in its permission set", {
      hostView: view.root,
      programs: permissions.run.join(","),
    });
    logger.v(2).info("Permission set", {
      read: permissions.read.join(","),
      write: permissions.write.join(","),
    });
    const worker = new Worker(opts.worker ?? new URL("./sandbox_worker.ts", import.meta.url), {
      type: "module",
      name: "kubelet",
      deno: { permissions },
    } as WorkerOptions);
    const ended = Promise.withResolvers<number>();
    worker.onmessage = (e: MessageEvent<SandboxExit | HostCall>) => {
      const m = e.data;
      if ("exit" in m) return ended.resolve(m.exit);
      void serveHostCall(m, permissions.write).then((a) => worker.postMessage(a));
    };
    worker.onerror = (e) => {
      e.preventDefault();
      logger.error(e.error ?? e.message, "The kubelet failed with an uncaught error");
      ended.resolve(1);
    };
    worker.postMessage({ args: [...opts.args], hostRoot: view.root } satisfies SandboxStart);
    const code = await ended.promise;
    worker.terminate();
    return code;
  } finally {
    await view.remove().catch((e) => logger.error(e, "Failed to remove the host view"));
  }
}
