/**
 * @module
 * The plugin manager's two caches, keyed by socket path: the desired state of the world (the
 * sockets the plugin watcher found, each stamped with a time and a fresh UUID whenever its
 * socket is created) and the actual state of the world (the plugins registered with a handler,
 * stamped with the UUID of the socket they were registered from). The reconciler compares
 * UUIDs: a socket re-created at the same path (a restarted driver) has a new one, so the old
 * registration is undone before the new one is made. Corresponds to upstream's
 * `pkg/kubelet/pluginmanager/cache/desired_state_of_world.go` and `actual_state_of_world.go`.
 */

import type { Logger } from "../klog/klog.ts";
import type { PluginHandler } from "./plugin_handler.ts";

/** One plugin socket as a cache holds it (upstream cache.PluginInfo). */
export interface PluginInfo {
  readonly socketPath: string;
  /** Milliseconds since the epoch, when the watcher saw the socket created. */
  readonly timestamp: number;
  readonly uuid: string;
  /** The handler it was registered with (actual state only). */
  readonly handler?: PluginHandler;
  /** The name and endpoint the plugin announced (actual state only). */
  readonly name?: string;
  readonly endpoint?: string;
}

/** A plugin as klog prints upstream's PluginInfo struct (JSON with Go's field names). */
export function pluginLogValue(p: PluginInfo): Record<string, unknown> {
  return {
    SocketPath: p.socketPath,
    Timestamp: new Date(p.timestamp).toISOString().replace(/\.?0*Z$/, "Z"),
    UUID: p.uuid,
    Handler: p.handler === undefined ? null : {},
    Name: p.name ?? "",
    Endpoint: p.endpoint ?? "",
  };
}

/** What both caches need. */
export interface CacheOptions {
  readonly logger: Logger;
  /** Milliseconds since the epoch. @default Date.now */
  readonly now?: () => number;
  /** A new UUID per socket creation. @default crypto.randomUUID */
  readonly newUUID?: () => string;
}

/** The sockets that should be registered (upstream DesiredStateOfWorld). */
export class DesiredStateOfWorld {
  readonly #plugins = new Map<string, PluginInfo>();
  readonly #logger: Logger;
  readonly #now: () => number;
  readonly #newUUID: () => string;

  constructor(opts: CacheOptions) {
    this.#logger = opts.logger;
    this.#now = opts.now ?? Date.now;
    this.#newUUID = opts.newUUID ?? (() => crypto.randomUUID());
  }

  /** Adds the socket, or gives it a new timestamp and UUID when it is there already. */
  addOrUpdatePlugin(socketPath: string): void {
    if (socketPath === "") throw new Error("socket path is empty");
    if (this.#plugins.has(socketPath)) {
      this.#logger.v(2).info("Plugin exists in desired state cache, timestamp will be updated", {
        path: socketPath,
      });
    }
    this.#plugins.set(socketPath, {
      socketPath,
      timestamp: this.#now(),
      uuid: this.#newUUID(),
    });
  }

  /** Forgets the socket; a no-op when it is unknown. */
  removePlugin(socketPath: string): void {
    this.#plugins.delete(socketPath);
  }

  /** Every desired plugin. */
  getPluginsToRegister(): PluginInfo[] {
    return [...this.#plugins.values()];
  }

  pluginExists(socketPath: string): boolean {
    return this.#plugins.has(socketPath);
  }
}

/** The plugins registered with a handler (upstream ActualStateOfWorld). */
export class ActualStateOfWorld {
  readonly #plugins = new Map<string, PluginInfo>();
  readonly #logger: Logger;

  constructor(opts: { readonly logger: Logger }) {
    this.#logger = opts.logger;
  }

  /** Every registered plugin. */
  getRegisteredPlugins(): PluginInfo[] {
    return [...this.#plugins.values()];
  }

  /** Records a registered plugin (replacing one at the same socket path). */
  addPlugin(info: PluginInfo): void {
    if (info.socketPath === "") throw new Error("socket path is empty");
    if (this.#plugins.has(info.socketPath)) {
      this.#logger.v(2).info("Plugin exists in actual state cache", { path: info.socketPath });
    }
    this.#plugins.set(info.socketPath, info);
  }

  /** Forgets the socket; a no-op when it is unknown. */
  removePlugin(socketPath: string): void {
    this.#plugins.delete(socketPath);
  }

  /** True when the socket is registered from the same creation of the socket as `info`. */
  pluginExistsWithCorrectUUID(info: PluginInfo): boolean {
    return this.#plugins.get(info.socketPath)?.uuid === info.uuid;
  }
}
