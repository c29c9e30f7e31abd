/**
 * @module
 * The plugin manager's family of the kubelet's /metrics: `plugin_manager_total_plugins`, one
 * series per plugin socket and cache (`actual_state_of_world` for the registered plugins,
 * `desired_state_of_world` for the sockets found), read at scrape time from the plugin manager
 * (`pluginmanager/plugin_manager.ts`) once it runs. Corresponds to upstream's
 * `pkg/kubelet/pluginmanager/metrics/metrics.go` (a custom collector registered by the plugin
 * manager's Run).
 */

import type { MetricsRegistry } from "./_registry.ts";
import type { PrometheusText } from "./prometheus.ts";

const TOTAL_PLUGINS = "plugin_manager_total_plugins";
const TOTAL_PLUGINS_HELP = "[ALPHA] Number of plugins in Plugin Manager";

/** The socket paths in each of the plugin manager's caches. */
export interface PluginManagerStates {
  readonly actual: readonly string[];
  readonly desired: readonly string[];
}

/** plugin_manager_total_plugins{socket_path,state}; see the module documentation. */
export class PluginManagerMetrics {
  #source: (() => PluginManagerStates) | undefined;

  constructor(registry: MetricsRegistry) {
    registry.addCollector((out) => this.#collect(out));
  }

  /** Makes `source` the one the family reads (the plugin manager's caches). */
  setSource(source: () => PluginManagerStates): void {
    this.#source = source;
  }

  #collect(out: PrometheusText): void {
    const states = this.#source?.();
    if (!states) return;
    out.family(TOTAL_PLUGINS, TOTAL_PLUGINS_HELP, "gauge");
    for (
      const [state, paths] of [
        ["actual_state_of_world", states.actual],
        ["desired_state_of_world", states.desired],
      ] as const
    ) {
      const counts = new Map<string, number>();
      for (const path of paths) counts.set(path, (counts.get(path) ?? 0) + 1);
      for (const [path, n] of counts) out.sample(TOTAL_PLUGINS, { socket_path: path, state }, n);
    }
  }
}
