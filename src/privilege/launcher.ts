/**
 * @module
 * The launcher: what main.ts runs. With every permission (the compile task's --allow-all) it
 * asks the planner Worker (plan_worker.ts) what to do with the command line, then
 * mounts the host view (host_view.ts) and runs the kubelet in a Worker under the planned
 * permission set (agent_worker.ts), answering the calls Deno cannot grant by path
 * (launcher_calls.ts) until it ends; otherwise, or when the plan says so, it runs the kubelet
 * command (app/kubelet_command.ts) in its own isolate. This module and what it imports stay small:
 * their isolate lives as long as the kubelet, beside the kubelet's own.
 *
 * Has no upstream counterpart: the Go kubelet runs with all of root's rights.
 */

import { hostIsCgroup2UnifiedMode } from "../cm/cgroup_mode.ts";
import { realClock } from "../util/clock.ts";
import { startFreeOSMemory } from "../util/free_os_memory.ts";
import {
  applyProcessSettings,
  type ApplyProcessSettingsOptions,
  KernelTunablesError,
} from "../app/process_settings.ts";
import { openHostView } from "./host_view.ts";
import { missingPermissions } from "./permissions.ts";
import { createLogger, type Logger } from "../klog/klog.ts";
import type { AgentExit, AgentStart, LaunchPlan, LaunchPlanRequest } from "./permission_set.ts";
import { type HostCall, type HostCallHandlers, serveHostCall } from "./launcher_calls.ts";
import type { LaunchPlanAnswer } from "./plan_worker.ts";

/**
 * The kubelet Worker's module: in a release tree, the bundle of its graph beside it and its
 * module table (deploy/release_bundle.ts, about 9 MiB less resident memory than 340 modules);
 * else the module itself. (The self-extracting release has both; `deno compile` embeds
 * neither, so a compiled agent runs the modules.)
 */
export function agentWorkerModule(): URL {
  const bundle = new URL("./agent_worker.js", import.meta.url);
  try {
    // With its module table, or klog's headers would name the bundle.
    Deno.statSync(bundle);
    Deno.statSync(new URL("./agent_worker.js.modules.json", import.meta.url));
    return bundle;
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
    return new URL("./agent_worker.ts", import.meta.url);
  }
}

/** Options of {@link launch}. */
export interface LaunchOptions {
  /** Runs the kubelet command in this isolate. @default app/kubelet_command.ts main */
  readonly inProcess?: (args: readonly string[]) => Promise<number>;
  /** The planner's module. @default plan_worker.ts */
  readonly planner?: URL;
  /** The module the kubelet's Worker runs. @default {@link agentWorkerModule} */
  readonly worker?: URL;
  /** Where host views live. @default permission_set.ts LAUNCHER_RUN_DIR */
  readonly runDir?: string;
  /** Where the launcher's own lines go. @default stderr */
  readonly write?: (line: string) => void;
  /**
   * Where the process settings are applied before the sandbox starts (the OOM score, the
   * open-files limit, the kernel tunables). @default the process's and host's own
   */
  readonly processSettings?: Omit<ApplyProcessSettingsOptions, "logger">;
}

/**
 * The launcher's handlers of the calls the managers own, each loaded from its owner when first
 * asked: the launcher's own graph stays small (see launcher_test.ts).
 */
const HOST_CALL_HANDLERS: HostCallHandlers = {
  statvfs: async (call) => (await import("../stats/fs_stats.ts")).serveStatvfsCall(call),
  subPath: async (call) => (await import("../kubelet_mounts.ts")).serveSubPathCall(call),
  hostPath: async (call) => (await import("../volume/host_path.ts")).serveHostPathCall(call),
};

async function runKubeletCommand(args: readonly string[]): Promise<number> {
  const { main } = await import("../app/kubelet_command.ts");
  return await main(args);
}

/**
 * Runs the kubelet with `args` as the plan for them says; resolves to the process exit code.
 * A process without every permission runs the kubelet in its own set (`-P=kubelet`).
 */
export async function launch(args: readonly string[], opts: LaunchOptions = {}): Promise<number> {
  const inProcess = opts.inProcess ?? runKubeletCommand;
  if (missingPermissions().length > 0) return await inProcess(args);
  const request: LaunchPlanRequest = {
    args: [...args],
    cgroupV1: !(await hostIsCgroup2UnifiedMode()),
    root: Deno.uid() === 0,
    ...(opts.runDir ? { runDir: opts.runDir } : {}),
  };
  // The launcher's own lines: plain text until the plan gives the configuration's logging.
  const log = (logging: { format: "text" | "json"; verbosity?: number } = { format: "text" }) =>
    createLogger({ ...logging, ...(opts.write ? { write: opts.write } : {}) });
  let plan: LaunchPlan;
  try {
    plan = await makePlan(request, opts.planner);
  } catch (e) {
    log().error(e, "Failed to plan the kubelet's sandbox");
    return 1;
  }
  if (plan.kind === "in-process") {
    if (plan.warning) log().warning(plan.warning);
    return await inProcess(args);
  }
  const logger = log(plan.logging);
  // Upstream's run sets the kubelet's own OOM score and open-files limit, its container manager
  // the kernel tunables; the Worker shares this process and its host.
  try {
    await applyProcessSettings(plan.process, { ...opts.processSettings, logger });
  } catch (e) {
    if (!(e instanceof KernelTunablesError)) throw e;
    logger.error(e, "Failed to start ContainerManager");
    return 1;
  }
  try {
    return await runInSandbox({
      args,
      plan,
      logger,
      ...(opts.worker ? { worker: opts.worker } : {}),
    });
  } catch (e) {
    logger.error(
      e,
      "Failed to start the kubelet in its permission set; --least-privilege=false runs it without",
      { hostView: plan.viewDir },
    );
    return 1;
  }
}

/** Asks a planner Worker, terminated after it answers, for the plan. */
async function makePlan(request: LaunchPlanRequest, module?: URL): Promise<LaunchPlan> {
  const planner = new Worker(module ?? new URL("./plan_worker.ts", import.meta.url), {
    type: "module",
    name: "kubelet-planner",
    deno: {
      permissions: {
        read: true,
        env: true,
        sys: true,
        import: true,
        write: false,
        net: false,
        run: false,
        ffi: false,
      },
    },
  } as WorkerOptions);
  try {
    const answer = await new Promise<LaunchPlanAnswer>((resolve, reject) => {
      planner.onmessage = (e: MessageEvent<LaunchPlanAnswer>) => resolve(e.data);
      planner.onerror = (e) => {
        e.preventDefault();
        reject(e.error ?? new Error(e.message));
      };
      planner.postMessage(request);
    });
    if ("error" in answer) throw new Error(answer.error);
    return answer.plan;
  } finally {
    planner.terminate();
  }
}

/** Options of {@link runInSandbox}. */
export interface RunInSandboxOptions {
  /** The command line, handed to the agent unchanged. */
  readonly args: readonly string[];
  readonly plan: Extract<LaunchPlan, { kind: "sandbox" }>;
  readonly logger: Logger;
  /** The module the Worker runs. @default {@link agentWorkerModule} */
  readonly worker?: URL;
}

/**
 * Mounts the host view, runs the agent in a Worker under the plan's permissions and resolves
 * with its exit code once it ends (an uncaught error in it is exit 1); the view is removed after.
 */
export async function runInSandbox(opts: RunInSandboxOptions): Promise<number> {
  const { logger, plan } = opts;
  const { permissions } = plan;
  const view = await openHostView({ dir: plan.viewDir });
  // Freed heap memory goes back to the kernel from here, for the whole process: the sandbox
  // has no ffi to do it itself.
  const stop = new AbortController();
  const freeing = startFreeOSMemory({ clock: realClock, logger, signal: stop.signal });
  try {
    if (plan.mkdir) await Deno.mkdir(plan.mkdir, { recursive: true, mode: 0o755 });
    const module = opts.worker ?? agentWorkerModule();
    logger.info("Running the kubelet in its permission set", {
      hostView: view.root,
      programs: permissions.run.join(","),
      module: module.href,
    });
    logger.v(2).info("Permission set", {
      read: permissions.read.join(","),
      write: permissions.write.join(","),
    });
    const worker = new Worker(module, {
      type: "module",
      name: "kubelet",
      deno: { permissions },
    } as WorkerOptions);
    const ended = Promise.withResolvers<number>();
    worker.onmessage = (e: MessageEvent<AgentExit | HostCall>) => {
      const m = e.data;
      if ("exit" in m) return ended.resolve(m.exit);
      void serveHostCall(m, permissions.write, HOST_CALL_HANDLERS).then((a) =>
        worker.postMessage(a)
      );
    };
    worker.onerror = (e) => {
      e.preventDefault();
      logger.error(e.error ?? e.message, "The kubelet failed with an uncaught error");
      ended.resolve(1);
    };
    worker.postMessage({ args: [...opts.args], hostRoot: view.root } satisfies AgentStart);
    const code = await ended.promise;
    worker.terminate();
    return code;
  } finally {
    stop.abort();
    await freeing;
    await view.remove().catch((e) => logger.error(e, "Failed to remove the host view"));
  }
}
