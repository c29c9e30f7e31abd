/**
 * @module
 * The agent's permission set, computed from its configuration, and the plan the launcher
 * (launcher.ts) follows. The process starts with all permissions (Deno 2.9 gives no
 * narrower way to reach /proc and /sys, and the binary cannot know its paths before it reads its
 * config); the plan is made in a short-lived Worker (plan_worker.ts), so that the
 * launcher's isolate never loads the configuration's parsers; the launcher mounts the host view
 * (host_view.ts) and runs the agent in a Worker whose permissions list exactly the paths the
 * configuration names, the host view, the programs the agent runs (with the image credential
 * provider plugins the configuration names, each by its path) and nothing else: a read of
 * /etc/shadow, a write outside the root dir, log dirs and cgroup tree, or a spawn of an unnamed
 * program fails with Deno's NotCapable inside the agent.
 *
 * Has no upstream counterpart: the Go kubelet runs with all of root's rights.
 */

import { KUBELET_OOM_SCORE_ADJ } from "../qos/qos.ts";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { systemBusAddress, unixPathOf } from "../util/dbus.ts";
import { hostViewEntries, type HostViewEntry } from "./host_view.ts";
import type { KubeletServer } from "../apis/flags.ts";
import type { ProcessSettings } from "../app/process_settings.ts";
import { pathNeeds } from "./permissions.ts";

/** Where logind's drop-ins go (nodeshutdown/logind.ts LOGIND_CONFIG_DIRECTORY; a test keeps them equal). */
export const LOGIND_DROPIN_DIRECTORY = "/etc/systemd/logind.conf.d";

/**
 * The programs the agent runs: volume mounts and unmounts, the loop devices that hold block
 * volumes open, filesystem stats, and the shutdown inhibitor lock.
 */
export const AGENT_PROGRAMS: readonly string[] = [
  "mount",
  "umount",
  "losetup",
  "df",
  "systemd-inhibit",
];

/** The program node log queries run, only with enableSystemLogQuery (server/journal_copy.ts JOURNALCTL; a test keeps them equal). */
export const LOG_QUERY_PROGRAM = "journalctl";

/**
 * The programs the iptables util chains run, only with makeIPTablesUtilChains (util/iptables.ts
 * IPTABLES and IP6TABLES; a test keeps them equal).
 */
export const IPTABLES_PROGRAMS: readonly string[] = ["iptables", "ip6tables"];

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

/**
 * The `sys` kind Deno asks of `node:inspector` (its CPU and heap profilers): granted when the
 * kubelet API serves `/debug/pprof/` (enableDebuggingHandlers and enableProfilingHandler, both on
 * by default, as upstream's). Deno's types do not list it.
 */
export const INSPECTOR_SYS = "inspector" as NonNullable<Deno.SysPermissionDescriptor["kind"]>;

/** A Worker's permissions (the unstable `deno.permissions` option of `new Worker`). */
export interface AgentPermissions {
  readonly read: string[];
  readonly write: string[];
  readonly run: string[];
  readonly net: true;
  readonly env: true;
  readonly sys: Deno.SysPermissionDescriptor["kind"][];
  readonly ffi: false;
  readonly import: true;
}

/** Options of {@link agentPermissions}. */
export interface AgentPermissionsOptions {
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
  /**
   * The credential provider plugins' executables (`<bin-dir>/<name>` of each provider of
   * `--image-credential-provider-config`), which the agent runs. @default []
   */
  readonly credentialProviderExecutables?: readonly string[];
}

/** The permission set of the agent under `opts.server`'s configuration. */
export function agentPermissions(opts: AgentPermissionsOptions): AgentPermissions {
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
  read.add(opts.codeDir ?? dirname(dirname(dirname(fileURLToPath(import.meta.url)))));
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
    run: [
      ...AGENT_PROGRAMS,
      ...(opts.credentialProviderExecutables ?? []),
      ...(server.config.makeIPTablesUtilChains ? IPTABLES_PROGRAMS : []),
      ...(server.config.enableSystemLogQuery === true ? [LOG_QUERY_PROGRAM] : []),
    ],
    net: true,
    env: true,
    sys: [
      ...SYS,
      ...(server.config.enableDebuggingHandlers !== false &&
          server.config.enableProfilingHandler !== false
        ? [INSPECTOR_SYS]
        : []),
    ],
    ffi: false,
    import: true,
  };
}

/**
 * The files the kubeconfigs at `paths` name (CA, client certificate and key); a kubeconfig that
 * does not exist yet (bootstrap) or cannot be read names none: the agent says why when it loads it.
 */
export async function kubeconfigFiles(paths: readonly string[]): Promise<string[]> {
  const { loadKubeconfig } = await import("../client/kubeconfig.ts");
  const out: string[] = [];
  for (const path of paths) {
    if (path === "") continue;
    const rc = await loadKubeconfig(path).catch(() => undefined);
    for (const f of [rc?.caFile, rc?.certFile, rc?.keyFile]) if (f) out.push(f);
  }
  return out;
}

/** What the launcher hands the agent's Worker. */
export interface AgentStart {
  readonly args: readonly string[];
  /** The host view's root, for {@link setHostRoot}. */
  readonly hostRoot: string;
}

/** What the agent's Worker tells the launcher when it ends. */
export interface AgentExit {
  readonly exit: number;
}

/** The host view's directory for an agent with `rootDirectory`: one per root dir. */
export async function hostViewDir(runDir: string, rootDirectory: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(rootDirectory));
  const hex = [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
  return join(runDir, `view-${hex.slice(0, 12)}`);
}

/** Where host views live. */
export const LAUNCHER_RUN_DIR = "/run/kubelet-ts";

/** What the planner is asked (plan_worker.ts). */
export interface LaunchPlanRequest {
  readonly args: readonly string[];
  /** Whether the host runs cgroup v1: the planner cannot read the mount table itself. */
  readonly cgroupV1: boolean;
  /** Whether the process runs as root, which the host view's mounts need. */
  readonly root: boolean;
  /** Where host views live. @default LAUNCHER_RUN_DIR */
  readonly runDir?: string;
}

/** What the launcher does with a command line. */
export type LaunchPlan =
  | {
    /** Run the kubelet in the launcher's isolate, with all of the process's permissions. */
    readonly kind: "in-process";
    /** Why, for a warning; none when the command line asks for it or is not a run. */
    readonly warning?: string;
  }
  | {
    /** Mount the view at `viewDir` and run the kubelet in a Worker under `permissions`. */
    readonly kind: "sandbox";
    readonly permissions: AgentPermissions;
    readonly viewDir: string;
    /** A directory to make first: where a bootstrapped kubeconfig will be written. */
    readonly mkdir?: string;
    /** The configuration's logging, for the launcher's own lines. */
    readonly logging: { readonly format: "text" | "json"; readonly verbosity: number };
    /**
     * oomScoreAdj, maxOpenFiles, protectKernelDefaults: the launcher applies them before the
     * Worker starts (app/process_settings.ts; Deno gives `/proc/self`, `/proc/sys` and FFI
     * only to a process with every permission).
     */
    readonly process: ProcessSettings;
  };

/**
 * Decides how the launcher runs the command line: in its sandbox unless `--least-privilege=false`,
 * not root, or not a run of the kubelet (--help, --version, --check,
 * flags or configuration that do not load: the kubelet command reports those itself, with all
 * of the process's rights, as it would without a sandbox).
 */
export async function planLaunch(req: LaunchPlanRequest): Promise<LaunchPlan> {
  const [{ parseCommandLine }, { kubeletConfigurationFields }, { loadKubeletConfiguration }] =
    await Promise.all([
      import("../apis/flags.ts"),
      import("../apis/config_types.ts"),
      import("../app/kubelet_config.ts"),
    ]);
  const inProcess: LaunchPlan = { kind: "in-process" };
  let cl;
  try {
    cl = parseCommandLine(req.args, kubeletConfigurationFields);
  } catch {
    return inProcess;
  }
  const version = cl.version !== undefined && cl.version !== "false";
  if (cl.help || version || cl.check || cl.leastPrivilege === false) return inProcess;
  if (!req.root) {
    // Given explicitly, the kubelet command says it cannot be done.
    return cl.leastPrivilege === true ? inProcess : {
      kind: "in-process",
      warning:
        "Not running as root: the kubelet runs without its sandbox, whose host view needs root to mount",
    };
  }
  let config;
  try {
    config = (await loadKubeletConfiguration({
      configFile: cl.flags.kubeletConfigFile,
      dropinDir: cl.flags.kubeletDropinConfigDirectory,
      flags: cl.config,
      cgroupV1: req.cgroupV1,
    })).config;
  } catch {
    return inProcess;
  }
  const { flags } = cl;
  let credentialProviderExecutables: readonly string[] = [];
  if (
    flags.imageCredentialProviderConfigFile !== "" || flags.imageCredentialProviderBinDir !== ""
  ) {
    const { loadCredentialProviderPlugins } = await import("../credentialprovider/plugins.ts");
    try {
      credentialProviderExecutables = (await loadCredentialProviderPlugins({
        configPath: flags.imageCredentialProviderConfigFile,
        binDir: flags.imageCredentialProviderBinDir,
        serviceAccountTokenGate:
          config.featureGates?.KubeletServiceAccountTokenForCredentialProviders ?? true,
      })).executables;
    } catch {
      // The kubelet loads them again, says what is wrong and stops, in its sandbox: a failed
      // check never runs it without one, and with no plugin in the set a plugin installed in
      // between is not run either (fail closed).
      credentialProviderExecutables = [];
    }
  }
  const viewDir = await hostViewDir(req.runDir ?? LAUNCHER_RUN_DIR, flags.rootDirectory);
  const permissions = agentPermissions({
    server: { flags, config },
    // The entries this process would mount; one whose host path is missing is not mounted,
    // and a missing path reads as NotFound either way.
    view: { root: viewDir, mounted: hostViewEntries() },
    extraRead: await kubeconfigFiles([flags.kubeConfig, flags.bootstrapKubeconfig]),
    credentialProviderExecutables,
  });
  // Bootstrapping writes the kubeconfig, and only it, into its directory: the launcher makes
  // the directory rather than the agent being granted all of it (often /etc/kubernetes, static
  // pods included).
  const bootstrap = flags.bootstrapKubeconfig !== "" && flags.kubeConfig !== "";
  return {
    kind: "sandbox",
    permissions,
    viewDir,
    ...(bootstrap ? { mkdir: dirname(flags.kubeConfig) } : {}),
    logging: {
      format: config.logging.format === "json" ? "json" : "text",
      verbosity: config.logging.verbosity,
    },
    process: {
      oomScoreAdj: config.oomScoreAdj ?? KUBELET_OOM_SCORE_ADJ,
      maxOpenFiles: config.maxOpenFiles,
      protectKernelDefaults: config.protectKernelDefaults ?? false,
    },
  };
}
