/**
 * @module
 * The DRA drivers' kubelet plugins registered on this node, and their registration: what the
 * plugin manager (`src/pluginmanager/`) calls for a socket of type DRAPlugin.
 *
 * - A plugin registers under its driver's name and lists the gRPC services it serves as its
 *   "versions" (`v1.DRAPlugin`, `v1beta1.DRAPlugin`, ...); the first of those this kubelet can
 *   call is chosen, and a plugin with none is rejected. Several plugins of one driver may be
 *   registered (a rolling update), but not two on one endpoint; the newest is used.
 * - ResourceSlices: at start every slice of this node is deleted, since no driver has
 *   registered yet and pods must not be scheduled here for devices nobody can prepare; when the
 *   last plugin of a driver deregisters, that driver's slices are deleted after 30 s unless a
 *   plugin of it registers again meanwhile. Deletions are retried with upstream's backoff (1 s
 *   doubling to 5 min, 100 tries) until they succeed or the kubelet stops.
 * - Health (the ResourceHealthStatus feature): with a {@link DraHealthStreamHandler}, each
 *   registered plugin's NodeWatchResources stream is handed to it, opened again 5 s after it
 *   ends or fails, until the plugin deregisters or the kubelet stops.
 *
 * Upstream also deletes a driver's slices when all its registered plugins lose their gRPC
 * connection: this transport dials per call and cannot watch a connection, so only
 * deregistration starts the delay here. Corresponds to upstream
 * `pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go`.
 */

import type { KubeClient } from "../client/kube_client.ts";
import { apiErrorText, isStatus } from "../client/kube_client.ts";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import type { DraMetrics } from "../metrics/dra_metrics.ts";
import type { PluginHandler } from "../pluginmanager/plugin_handler.ts";
import { DRA_SERVICES_SUPPORTED, DraPlugin } from "./dra_plugin.ts";

/** upstream defaultWipingDelay: how long a driver has to come back before its slices go. */
export const DRA_WIPING_DELAY_MS = 30_000;
/** The wait before a plugin's health stream is opened again (upstream's wait.Until period). */
export const DRA_HEALTH_STREAM_RETRY_MS = 5_000;

/**
 * Follows one plugin's health stream until it ends, `signal` aborts or it fails; logs its own
 * errors (upstream StreamHandler.HandleWatchResourcesStream).
 */
export type DraHealthStreamHandler = (plugin: DraPlugin, signal: AbortSignal) => Promise<void>;

/** Options of {@link DraPluginManager}. */
export interface DraPluginManagerOptions {
  /** Undefined in standalone mode: no ResourceSlices are deleted. */
  readonly kubeClient?: KubeClient;
  readonly nodeName: string;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly metrics?: DraMetrics;
  /** @default {@link DRA_WIPING_DELAY_MS} */
  readonly wipingDelayMs?: number;
  /** For the backoff's jitter. @default Math.random */
  readonly random?: () => number;
  /** Takes each plugin's health stream (ResourceHealthStatus). @default none: not watched */
  readonly healthStream?: DraHealthStreamHandler;
}

/** upstream validateSupportedServices: the first of the plugin's services this kubelet calls. */
export function chooseDraService(services: readonly string[]): string {
  if (services.length === 0) {
    throw new Error("empty list of supported gRPC services (aka supported versions)");
  }
  const chosen = services.find((s) => DRA_SERVICES_SUPPORTED.includes(s));
  if (chosen === undefined) {
    const q = (xs: readonly string[]) => `[${xs.map((x) => JSON.stringify(x)).join(" ")}]`;
    throw new Error(
      `none of services supported by the plugin (${q(services)}) are supported by the kubelet (${
        q(DRA_SERVICES_SUPPORTED)
      })`,
    );
  }
  return chosen;
}

/** The registered DRA plugins by driver; the plugin manager's DRAPlugin handler. */
export class DraPluginManager implements PluginHandler {
  readonly #o: DraPluginManagerOptions;
  /** Driver name → its plugins, oldest first. */
  readonly #store = new Map<string, DraPlugin[]>();
  /** Driver name ("" for all) → the pending or running deletion of its slices. */
  readonly #wipes = new Map<string, AbortController>();
  readonly #stop = new AbortController();
  readonly #running = new Set<Promise<void>>();
  /** Each plugin's health stream loop. */
  readonly #healthStreams = new Map<DraPlugin, AbortController>();

  constructor(opts: DraPluginManagerOptions) {
    this.#o = opts;
  }

  /**
   * Deletes this node's ResourceSlices (no driver is registered yet) and keeps deleting
   * deregistered drivers' until `signal` aborts; resolves once everything stopped.
   */
  async run(signal: AbortSignal): Promise<void> {
    if (signal.aborted) return this.stop();
    signal.addEventListener("abort", () => this.#stop.abort(), { once: true });
    this.#schedule("", 0);
    await new Promise<void>((resolve) =>
      this.#stop.signal.addEventListener("abort", () => resolve(), { once: true })
    );
    await this.stop();
  }

  /** Ends pending deletions and closes every plugin's connection; idempotent. */
  async stop(): Promise<void> {
    this.#stop.abort();
    for (const plugins of this.#store.values()) for (const p of plugins) p.close();
    await Promise.allSettled([...this.#running]);
  }

  /**
   * upstream GetPlugin: the newest plugin of `driverName`; throws naming the driver when none
   * is registered.
   */
  getPlugin(driverName: string): DraPlugin {
    if (driverName === "") throw new Error("DRA driver name is empty");
    const plugin = this.#store.get(driverName)?.at(-1);
    if (!plugin) throw new Error(`DRA driver ${driverName} is not registered`);
    return plugin;
  }

  /** The drivers with a registered plugin, sorted. */
  driverNames(): string[] {
    return [...this.#store.keys()].sort();
  }

  validatePlugin(driverName: string, endpoint: string, versions: readonly string[]): void {
    this.#chooseService(driverName, endpoint, versions);
  }

  registerPlugin(
    driverName: string,
    endpoint: string,
    versions: readonly string[],
    timeoutMs: number | undefined,
  ): void {
    const service = this.#chooseService(driverName, endpoint, versions);
    const plugins = this.#store.get(driverName) ?? [];
    if (plugins.some((p) => p.endpoint === endpoint)) {
      // One plugin instance cannot hijack the endpoint of another.
      throw new Error(
        `endpoint ${endpoint} already registered for DRA driver plugin ${driverName}`,
      );
    }
    const { clock, logger, metrics } = this.#o;
    const plugin = new DraPlugin({
      driverName,
      endpoint,
      service,
      timeoutMs,
      clock,
      logger,
      metrics,
    });
    plugins.push(plugin);
    this.#store.set(driverName, plugins);
    this.#watchHealth(plugin);
    logger.v(3).info("Registered DRA plugin", {
      driverName,
      endpoint,
      chosenService: service,
      numPlugins: plugins.length,
    });
    this.#sync(driverName);
  }

  deRegisterPlugin(driverName: string, endpoint: string): void {
    const plugins = this.#store.get(driverName) ?? [];
    const i = plugins.findIndex((p) => p.endpoint === endpoint);
    if (i === -1) return;
    const [plugin] = plugins.splice(i, 1);
    this.#healthStreams.get(plugin!)?.abort();
    plugin!.close();
    if (plugins.length === 0) this.#store.delete(driverName);
    this.#o.logger.v(3).info("Unregistered DRA plugin", {
      driverName,
      endpoint,
      numPlugins: plugins.length,
    });
    this.#sync(driverName);
  }

  #chooseService(driverName: string, endpoint: string, versions: readonly string[]): string {
    try {
      return chooseDraService(versions);
    } catch (e) {
      throw new Error(
        `invalid supported gRPC versions of DRA driver plugin ${driverName} at endpoint ${endpoint}: ${
          (e as Error).message
        }`,
        { cause: e },
      );
    }
  }

  /** upstream add's health goroutine: the plugin's stream to the handler, again and again. */
  #watchHealth(plugin: DraPlugin): void {
    const handler = this.#o.healthStream;
    if (!handler || this.#stop.signal.aborted) return;
    const ctl = new AbortController();
    this.#healthStreams.set(plugin, ctl);
    const signal = AbortSignal.any([ctl.signal, this.#stop.signal]);
    const log = this.#o.logger.with({ driverName: plugin.driverName, endpoint: plugin.endpoint });
    const run = (async () => {
      try {
        while (!signal.aborted) {
          log.v(4).info("Attempting to start WatchResources health stream");
          await handler(plugin, signal).catch((e) => {
            if (!signal.aborted) log.error(e, "WatchResources health stream failed");
          });
          log.v(2).info("WatchResources health stream has ended");
          await this.#o.clock.sleep(DRA_HEALTH_STREAM_RETRY_MS, signal);
        }
      } catch {
        // Aborted: the plugin deregistered, or the kubelet stops.
      } finally {
        this.#healthStreams.delete(plugin);
      }
    })();
    this.#running.add(run);
    void run.then(() => this.#running.delete(run));
  }

  /** upstream sync: a usable driver keeps its slices; an unusable one loses them later. */
  #sync(driverName: string): void {
    if (!this.#o.kubeClient) return;
    if (this.#store.has(driverName)) {
      this.#wipes.get(driverName)?.abort();
      this.#wipes.delete(driverName);
      return;
    }
    // Already queued (or running): the first delay still applies.
    if (this.#wipes.has(driverName)) return;
    this.#schedule(driverName, this.#o.wipingDelayMs ?? DRA_WIPING_DELAY_MS);
  }

  #schedule(driverName: string, delayMs: number): void {
    if (!this.#o.kubeClient || this.#stop.signal.aborted) return;
    const ctl = new AbortController();
    this.#wipes.set(driverName, ctl);
    const signal = AbortSignal.any([ctl.signal, this.#stop.signal]);
    const run = (async () => {
      try {
        if (delayMs > 0) await this.#o.clock.sleep(delayMs, signal);
        await this.#wipe(driverName, signal);
      } catch {
        // Canceled: the driver came back, or the kubelet stops.
      } finally {
        if (this.#wipes.get(driverName) === ctl) this.#wipes.delete(driverName);
      }
    })();
    this.#running.add(run);
    void run.then(() => this.#running.delete(run));
  }

  /** upstream wipeResourceSlices: deletes this node's slices (of one driver, or all). */
  async #wipe(driverName: string, signal: AbortSignal): Promise<void> {
    const { kubeClient, nodeName, clock, logger } = this.#o;
    const random = this.#o.random ?? Math.random;
    let selector = `spec.nodeName=${nodeName}`;
    if (driverName !== "") selector += `,spec.driver=${driverName}`;
    const path = `/apis/resource.k8s.io/v1/resourceslices?fieldSelector=${
      encodeURIComponent(selector)
    }`;
    let delayMs = 1000;
    for (let step = 1; step <= 100; step++) {
      signal.throwIfAborted();
      try {
        await kubeClient!.delete(path, undefined, signal);
        logger.v(3).info("Deleted ResourceSlices", { fieldSelector: selector });
        return;
      } catch (e) {
        signal.throwIfAborted();
        if (isStatus(e, 404)) {
          logger.v(5).info("ResourceSlices not found, nothing to delete.", {
            fieldSelector: selector,
          });
          return;
        }
        logger.v(isStatus(e, 401) ? 5 : 3).info("Deleting ResourceSlice failed, retrying", {
          fieldSelector: selector,
          err: apiErrorText(e),
        });
      }
      await clock.sleep(delayMs * (1 + random() * 0.2), signal);
      delayMs = Math.min(delayMs * 2, 5 * 60_000);
    }
  }
}
