/**
 * @module
 * The plugin manager's reconciler: every second (upstream loopSleepDuration) it deregisters the
 * plugins registered but no longer desired, or desired again from a newer socket (another UUID:
 * the driver restarted), then registers the desired plugins not registered from their current
 * socket. Operations run in the background through the {@link OperationExecutor}, one per socket
 * path at a time and with backoff after failures, so one slow plugin does not hold up the others.
 * Handlers are added by plugin type at any time; a registration uses those present when it
 * starts. Corresponds to upstream's `pkg/kubelet/pluginmanager/reconciler/reconciler.go`.
 */

import type { Logger } from "../klog/klog.ts";
import { type Clock, realClock } from "../util/clock.ts";
import { type ActualStateOfWorld, type DesiredStateOfWorld, pluginLogValue } from "./cache.ts";
import type { OperationExecutor } from "./operation_executor.ts";
import type { OperationGenerator } from "./operation_generator.ts";
import type { PluginHandler } from "./plugin_handler.ts";

/** Upstream loopSleepDuration. */
export const LOOP_SLEEP_MS = 1_000;

/** What the reconciler works with. */
export interface ReconcilerOptions {
  readonly executor: OperationExecutor;
  readonly generator: OperationGenerator;
  readonly desiredStateOfWorld: DesiredStateOfWorld;
  readonly actualStateOfWorld: ActualStateOfWorld;
  readonly logger: Logger;
  /** @default realClock */
  readonly clock?: Clock;
  /** @default LOOP_SLEEP_MS */
  readonly loopSleepMs?: number;
}

/** Registers and deregisters plugins until the desired and actual states agree. */
export class Reconciler {
  readonly #opts: ReconcilerOptions;
  readonly #handlers = new Map<string, PluginHandler>();

  constructor(opts: ReconcilerOptions) {
    this.#opts = opts;
  }

  /** Makes `handler` the one for plugins announcing `pluginType`. */
  addHandler(pluginType: string, handler: PluginHandler): void {
    this.#handlers.set(pluginType, handler);
  }

  /** Reconciles now and then every loop period until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    const clock = this.#opts.clock ?? realClock;
    const period = this.#opts.loopSleepMs ?? LOOP_SLEEP_MS;
    while (!signal.aborted) {
      this.reconcile(signal);
      try {
        await clock.sleep(period, signal);
      } catch {
        break;
      }
    }
  }

  /** One pass: deregistrations first, then registrations (upstream reconcile). */
  reconcile(signal?: AbortSignal): void {
    const { executor, generator, logger } = this.#opts;
    const dsw = this.#opts.desiredStateOfWorld;
    const asw = this.#opts.actualStateOfWorld;
    for (const registered of asw.getRegisteredPlugins()) {
      let unregister = !dsw.pluginExists(registered.socketPath);
      if (!unregister) {
        const updated = dsw.getPluginsToRegister().some((p) =>
          p.socketPath === registered.socketPath && p.uuid !== registered.uuid
        );
        if (updated) {
          logger.v(5).info(
            "An updated version of plugin has been found, unregistering the plugin first before reregistering",
            { plugin: pluginLogValue(registered) },
          );
          unregister = true;
        }
      }
      if (!unregister) continue;
      logger.v(5).info("Starting operationExecutor.UnregisterPlugin", {
        plugin: pluginLogValue(registered),
      });
      const started = executor.run(
        registered.socketPath,
        generator.unregisterPlugin(registered, asw),
      );
      if (started === "started") {
        logger.v(1).info("OperationExecutor.UnregisterPlugin started", {
          plugin: pluginLogValue(registered),
        });
      }
    }
    for (const desired of dsw.getPluginsToRegister()) {
      if (asw.pluginExistsWithCorrectUUID(desired)) continue;
      logger.v(5).info("Starting operationExecutor.RegisterPlugin", {
        plugin: pluginLogValue(desired),
      });
      const started = executor.run(
        desired.socketPath,
        generator.registerPlugin(desired, new Map(this.#handlers), asw, signal),
      );
      if (started === "started") {
        logger.v(1).info("OperationExecutor.RegisterPlugin started", {
          plugin: pluginLogValue(desired),
        });
      }
    }
  }
}
