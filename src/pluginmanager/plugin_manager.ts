/**
 * @module
 * The kubelet's plugin manager: plugins (CSI drivers' node registrars, DRA drivers) announce
 * themselves by creating a unix socket under `<root-dir>/plugins_registry` that serves the
 * `pluginregistration.Registration` service; the manager's watcher finds the sockets, its
 * reconciler registers each with the handler of the type the plugin announces (added with
 * {@link PluginManager.addHandler}) and deregisters it when the socket goes. It also serves
 * `plugin_manager_total_plugins` once running. Corresponds to upstream's
 * `pkg/kubelet/pluginmanager/plugin_manager.go`; the parts are `plugin_watcher.ts`, `cache.ts`,
 * `reconciler.ts`, `operation_executor.ts` and `operation_generator.ts`.
 *
 * Upstream's Run takes the pod sources' readiness but does not use it, so nothing waits for it
 * here. It takes an event recorder too, which no operation uses.
 */

import { join } from "node:path";
import type { Logger } from "../klog/klog.ts";
import type { PluginManagerMetrics } from "../metrics/plugin_manager_metrics.ts";
import { type Clock, realClock } from "../util/clock.ts";
import { ActualStateOfWorld, DesiredStateOfWorld } from "./cache.ts";
import { OperationExecutor } from "./operation_executor.ts";
import { type DialFunc, dialRegistration, OperationGenerator } from "./operation_generator.ts";
import type { PluginHandler } from "./plugin_handler.ts";
import { type FsWatch, PLUGINS_REGISTRATION_DIR_NAME, PluginWatcher } from "./plugin_watcher.ts";
import { Reconciler } from "./reconciler.ts";

/** The registration directory under a root directory (upstream getPluginsRegistrationDir). */
export function pluginsRegistrationDir(rootDirectory: string): string {
  return join(rootDirectory, PLUGINS_REGISTRATION_DIR_NAME);
}

/** Settings of a {@link PluginManager}. */
export interface PluginManagerOptions {
  /** The directory plugins create their sockets in: `<root-dir>/plugins_registry`. */
  readonly sockDir: string;
  readonly logger: Logger;
  /** Drives the reconciler, the backoff and the watcher's rescan. @default realClock */
  readonly clock?: Clock;
  /** Connects to a plugin socket. @default dialRegistration(clock) */
  readonly dial?: DialFunc;
  /** Where plugin_manager_total_plugins is served from, once running. */
  readonly metrics?: PluginManagerMetrics;
  /** The reconciler's period. @default 1000 (upstream loopSleepDuration) */
  readonly loopSleepMs?: number;
  /** The watcher's safety-net walk. @default 10000 */
  readonly rescanPeriodMs?: number;
  /** Starts a recursive watch of the socket directory. @default Deno.watchFs */
  readonly watchFs?: (path: string) => FsWatch;
  /** Creates the socket directory when missing. @default Deno.mkdir, recursive */
  readonly mkdirAll?: (path: string, mode: number) => Promise<void>;
}

/** Registers the plugins that appear in the socket directory; see the module documentation. */
export class PluginManager {
  readonly #opts: PluginManagerOptions;
  readonly #dsw: DesiredStateOfWorld;
  readonly #asw: ActualStateOfWorld;
  readonly #executor: OperationExecutor;
  readonly #reconciler: Reconciler;

  constructor(opts: PluginManagerOptions) {
    this.#opts = opts;
    const clock = opts.clock ?? realClock;
    const now = () => clock.now();
    this.#dsw = new DesiredStateOfWorld({ logger: opts.logger, now });
    this.#asw = new ActualStateOfWorld({ logger: opts.logger });
    this.#executor = new OperationExecutor({ logger: opts.logger, now });
    this.#reconciler = new Reconciler({
      executor: this.#executor,
      generator: new OperationGenerator({
        logger: opts.logger,
        dial: opts.dial ?? dialRegistration(clock),
      }),
      desiredStateOfWorld: this.#dsw,
      actualStateOfWorld: this.#asw,
      logger: opts.logger,
      clock,
      loopSleepMs: opts.loopSleepMs,
    });
  }

  /** Makes `handler` receive the plugins announcing `pluginType` (e.g. CSI_PLUGIN). */
  addHandler(pluginType: string, handler: PluginHandler): void {
    this.#reconciler.addHandler(pluginType, handler);
  }

  /** The socket paths registered and desired, for tests and the metric. */
  states(): { actual: string[]; desired: string[] } {
    return {
      actual: this.#asw.getRegisteredPlugins().map((p) => p.socketPath),
      desired: this.#dsw.getPluginsToRegister().map((p) => p.socketPath),
    };
  }

  /**
   * Starts the watcher, then the reconciler, and runs until `signal` aborts; resolves once both
   * stopped and the operations under way ended. A watcher that cannot start is logged and the
   * manager does not run, as upstream's.
   */
  async run(signal: AbortSignal): Promise<void> {
    const { logger } = this.#opts;
    const watcher = new PluginWatcher({
      path: this.#opts.sockDir,
      desiredStateOfWorld: this.#dsw,
      logger,
      clock: this.#opts.clock,
      rescanPeriodMs: this.#opts.rescanPeriodMs,
      watchFs: this.#opts.watchFs,
      mkdirAll: this.#opts.mkdirAll,
    });
    let watching: Promise<void>;
    try {
      ({ done: watching } = await watcher.start(signal));
    } catch (e) {
      logger.error(e, "The desired_state_of_world populator (plugin watcher) starts failed!");
      return;
    }
    logger.v(2).info("The desired_state_of_world populator (plugin watcher) starts");
    logger.info("Starting Kubelet Plugin Manager");
    const reconciling = this.#reconciler.run(signal);
    this.#opts.metrics?.setSource(() => this.states());
    await Promise.all([watching, reconciling]);
    await this.#executor.waitForCompletion();
    logger.info("Shutting down Kubelet Plugin Manager");
  }
}
