/**
 * @module
 * The kubelet command, upstream's NewKubeletCommand: parse the flags, build the configuration
 * (defaults, --config, --config-dir, flags), build the dependencies, run until SIGTERM or
 * SIGINT; SIGHUP reloads the configuration (kubelet_config_reload.ts). Every start-up error is
 * one log line naming what is wrong, and exit 1. main.ts runs it through the launcher
 * (privilege/launcher.ts): inside the agent's sandbox (privilege/agent_worker.ts), or in the launcher's
 * own isolate when there is no sandbox to run in.
 */

import { realClock } from "../util/clock.ts";
import { ConfigError } from "../apis/config_schema.ts";
import {
  createLogger,
  type LogFormat,
  type Logger,
  setLogVerbosity,
  type VModuleEntry,
} from "../klog/klog.ts";
import { startFreeOSMemory } from "../util/free_os_memory.ts";
import {
  type LenientDecoding,
  loadKubeletConfiguration,
  strictDecodingMessage,
} from "./kubelet_config.ts";
import { ConfigReloader } from "./kubelet_config_reload.ts";
import { type KubeletConfiguration, kubeletConfigurationFields } from "../apis/config_types.ts";
import { type CommandLine, FlagError, parseCommandLine, usage } from "../apis/flags.ts";
import { checkPermissions, missingPermissions, pathNeeds } from "../privilege/permissions.ts";
import { KUBELET_VERSION, versionInfo } from "../util/version.ts";

/** How long shutdown may take after SIGTERM before the process exits anyway. */
const SHUTDOWN_DEADLINE_MS = 15_000;

function print(text: string): void {
  Deno.stdout.writeSync(new TextEncoder().encode(text.endsWith("\n") ? text : `${text}\n`));
}

/** The logging settings the command line gives, before any file is read. */
function flagLogging(cl: CommandLine): { format: LogFormat; verbosity: number } {
  let format: LogFormat = "text";
  let verbosity = 0;
  for (const f of cl.config) {
    if (f.path.join(".") === "logging.format") format = f.value as LogFormat;
    if (f.path.join(".") === "logging.verbosity") verbosity = f.value as number;
  }
  return { format, verbosity };
}

function vmoduleOf(config: KubeletConfiguration): VModuleEntry[] {
  return (config.logging.vmodule ?? []).map((e) => ({
    filePattern: e.filePattern ?? "",
    verbosity: e.verbosity ?? 0,
  }));
}

/**
 * Logs what lenient decoding went past, as upstream's DecodeKubeletConfiguration does for the
 * --config file. Upstream drops a drop-in's unknown fields without a word; they are logged here
 * too, with their own message.
 */
function logLenientDecoding(log: Logger, d: LenientDecoding): void {
  if (d.dropin) {
    log.info("Ignoring unknown fields of a drop-in config file", {
      path: d.file,
      err: strictDecodingMessage(d),
    });
  } else {log.info("Using lenient decoding as strict decoding failed", {
      err: strictDecodingMessage(d),
    });}
}

/**
 * `--check`: loads the configuration as a start would (falling back to the defaults when it
 * cannot, so the other checks still run), runs every preflight check and prints the report;
 * 1 when there are problems.
 */
async function check(cl: CommandLine): Promise<number> {
  // Each try reads the same files: what lenient decoding went past is kept from the first.
  const lenient = new Map<string, string>();
  const load = async (cgroupV1?: false, given = true) =>
    (await loadKubeletConfiguration({
      configFile: given ? cl.flags.kubeletConfigFile : "",
      dropinDir: given ? cl.flags.kubeletDropinConfigDirectory : "",
      flags: given ? cl.config : [],
      cgroupV1,
      onLenientDecoding: (d) => lenient.set(d.file, strictDecodingMessage(d)),
    })).config;
  let config: KubeletConfiguration;
  let configError: Error | undefined;
  try {
    config = await load();
  } catch (e) {
    if (!(e instanceof Error)) throw e;
    // Only failCgroupV1 on a v1 host: the cgroups check reports that, with its fix.
    config = await load(false).catch(async () => {
      configError = e;
      return await load(false, false);
    });
  }
  const { runPreflight, formatFindings } = await import("../preflight/preflight.ts");
  const { nodeHostname, validateKubeletFlags } = await import("./kubelet_flags.ts");
  const s = { flags: cl.flags, config };
  const findings = await runPreflight({
    ...s,
    configError,
    lenientDecoding: [...lenient.values()],
    flagErrors: validateKubeletFlags(cl.flags),
    pathNeeds: pathNeeds(s),
    nodeName: nodeHostname(cl.flags.hostnameOverride, Deno.hostname),
  });
  print(formatFindings(findings));
  return findings.some((f) => f.level === "problem") ? 1 : 0;
}

/** Options of {@link main}. */
export interface MainOptions {
  /** Ends the process now (a second signal, a shutdown past its deadline). @default Deno.exit */
  readonly exit?: (code: number) => void;
  /** Already inside the sandbox (privilege/agent_worker.ts): `--least-privilege` is not acted on again. */
  readonly sandboxed?: boolean;
}

/** Runs the kubelet with `args`; resolves to the process exit code. */
export async function main(args: readonly string[], opts: MainOptions = {}): Promise<number> {
  const exit = opts.exit ?? ((code: number) => Deno.exit(code));
  let log: Logger = createLogger({ format: "text" });
  let cl: CommandLine;
  try {
    cl = parseCommandLine(args, kubeletConfigurationFields);
  } catch (e) {
    if (!(e instanceof FlagError)) throw e;
    log.error(e, "Failed to parse kubelet flag");
    print("Run 'kubelet --help' for usage.");
    return 1;
  }
  if (cl.help) {
    print(usage(kubeletConfigurationFields));
    return 0;
  }
  if (cl.version !== undefined && cl.version !== "false") {
    print(
      cl.version === "raw"
        ? JSON.stringify(versionInfo(), null, 2)
        : `Kubernetes ${KUBELET_VERSION}`,
    );
    return 0;
  }
  log = createLogger(flagLogging(cl));
  if (cl.check) return await check(cl);

  if (cl.leastPrivilege === true && !opts.sandboxed) {
    // Asked for, yet the launcher ran the kubelet here: it could not make the sandbox, which
    // needs every permission (to hand out the narrower set) and root (to mount the host view).
    const missing = missingPermissions();
    if (missing.length > 0) {
      log.error(
        null,
        "--least-privilege needs the process to start with --allow-all: it gives the kubelet its own narrower set",
        { notGranted: missing.join(",") },
      );
      return 1;
    }
    if (Deno.uid() !== 0) {
      log.error(
        null,
        "--least-privilege needs root: the launcher mounts the host view the kubelet reads /proc and /sys through",
        { uid: Deno.uid() },
      );
      return 1;
    }
  }
  // Set once the configuration has loaded: later errors are the run's.
  let loaded = false;
  try {
    checkPermissions([
      { permission: "read", path: cl.flags.kubeletConfigFile, source: "--config" },
      { permission: "read", path: cl.flags.kubeletDropinConfigDirectory, source: "--config-dir" },
    ]);
    const load = async () =>
      (await loadKubeletConfiguration({
        configFile: cl.flags.kubeletConfigFile,
        dropinDir: cl.flags.kubeletDropinConfigDirectory,
        flags: cl.config,
        onLenientDecoding: (d) => logLenientDecoding(log, d),
      })).config;
    const config = await load();
    loaded = true;
    log = createLogger({
      format: config.logging.format === "json" ? "json" : "text",
      verbosity: config.logging.verbosity,
      vmodule: vmoduleOf(config),
    });
    if (cl.leastPrivilege === true && !opts.sandboxed) {
      // The launcher's planner could not load this configuration, but it loads now (it was
      // changed in between): start again rather than run outside the sandbox asked for.
      log.error(null, "--least-privilege was given but the kubelet is not in its sandbox");
      return 1;
    }
    for (const w of cl.warnings) log.warning(w);
    log.info("kubelet version", { kubeletVersion: KUBELET_VERSION });
    log.v(1).info("KubeletConfiguration", { config: JSON.stringify(config) });

    const reloader = new ConfigReloader({ load, current: config, logger: log });
    const logger = log;
    reloader.onChange(
      ["logging.verbosity", "logging.vmodule"],
      (c) => setLogVerbosity(logger, c.logging.verbosity, vmoduleOf(c)),
    );
    // Loaded here, not at the top: --check, --help and --version do without them.
    const [{ unsecuredDependencies }, { run }] = await Promise.all([
      import("../dependencies.ts"),
      import("./kubelet_server.ts"),
    ]);
    const deps = {
      ...unsecuredDependencies({ logger: log }),
      reloader,
      ...(opts.sandboxed ? { processSettings: "launcher" as const } : {}),
    };
    const root = new AbortController();
    const onSignal = (name: Deno.Signal) => () => {
      if (root.signal.aborted) {
        log.warning("Second signal received, exiting now", { signal: name });
        exit(1);
      }
      log.info("Received signal, shutting down", { signal: name });
      root.abort(new Error(`received ${name}`));
      const deadline = setTimeout(() => {
        log.error(null, "Shutdown did not finish in time, exiting", {
          deadline: `${SHUTDOWN_DEADLINE_MS / 1000}s`,
        });
        exit(1);
      }, SHUTDOWN_DEADLINE_MS);
      Deno.unrefTimer(deadline);
    };
    for (const sig of ["SIGTERM", "SIGINT"] as const) Deno.addSignalListener(sig, onSignal(sig));
    Deno.addSignalListener("SIGHUP", () => void reloader.reload());
    // In its sandbox the launcher does this for the process (this isolate has no ffi there).
    const stopFreeing = new AbortController();
    const freeing = opts.sandboxed
      ? Promise.resolve(false)
      : startFreeOSMemory({ clock: realClock, logger: log, signal: stopFreeing.signal });
    try {
      await run({ flags: cl.flags, config }, deps, root.signal);
    } catch (e) {
      // Stopped by a signal while still starting: what failed was the interrupted start.
      if (!root.signal.aborted) throw e;
      log.v(2).info("Start-up interrupted by the shutdown", { err: String(e) });
    } finally {
      stopFreeing.abort();
      await freeing;
    }
    log.info("Kubelet stopped");
    return 0;
  } catch (e) {
    if (e instanceof ConfigError && !loaded) {
      log.error(e, "Failed to load kubelet configuration");
      return 1;
    }
    // Upstream's command wraps what Run returns: a bad kubeconfig is a failure to run, not one
    // to load the configuration.
    const message = e instanceof Error ? e.message : String(e);
    log.error(loaded ? `failed to run Kubelet: ${message}` : message, "command failed");
    return 1;
  }
}
