/**
 * @module
 * The kubelet's side of CSI drivers' registration, and the node's CSINode at start.
 *
 * - {@link CsiRegistrationHandler}: what the plugin manager (src/pluginmanager/) calls for a
 *   socket of type CSIPlugin. Validation takes the driver's highest 1.x version (one already
 *   registered under the name with an equal or higher version wins); registration records the
 *   driver's endpoint, asks the driver's Node service for NodeGetInfo (its node ID, volume limit
 *   and topology) and installs it on the Node and the CSINode (nodeinfo_manager.ts), forgetting
 *   the driver again when either fails; deregistration uninstalls it.
 * - {@link initializeCSINode}: with an apiserver, the node is NotReady ("CSINode is not yet
 *   initialized", the storage state of its Ready condition) until the CSINode exists and lists
 *   the migrated in-tree plugins; tried with upstream's backoff (6 tries, 30 ms growing eightfold,
 *   about 140 s), then again after a minute where upstream's kubelet exits to be restarted.
 *
 * Messages carry upstream's "kubernetes.io/csi: " prefix. Corresponds to upstream
 * `pkg/volume/csi/csi_plugin.go` (RegistrationHandler, initializeCSINode) and the NodeGetInfo of
 * `csi_client.go`.
 */

import { CriConnection, criMethods } from "../cri/connection.ts";
import { NodeDefinition } from "../../proto/csi/v1/csi.ts";
import type { Clock } from "../util/clock.ts";
import { type Backoff, exponentialBackoff } from "../util/backoff.ts";
import { errorText } from "../util/errors.ts";
import {
  formatGenericVersion,
  type GenericVersion,
  highestSupportedVersion,
  versionLessThan,
} from "../util/version.ts";
import type { Logger } from "../klog/klog.ts";
import type { NodeInfoManager } from "./nodeinfo_manager.ts";

/** The in-tree plugin name of CSI volumes (upstream CSIPluginName). */
export const CSI_PLUGIN_NAME = "kubernetes.io/csi";

/** upstream csiTimeout: a driver call without a timeout of its own. */
export const CSI_TIMEOUT_MS = 2 * 60 * 1000;

/** The storage error the node reports until its CSINode is initialized. */
export const CSINODE_NOT_INITIALIZED = "CSINode is not yet initialized";

/** upstream initializeCSINode's backoff. */
const INIT_BACKOFF: Backoff = { steps: 6, durationMs: 30, factor: 8, jitter: 0.1 };

/** upstream's log(): the plugin's name before the message. */
function log(msg: string): string {
  return `${CSI_PLUGIN_NAME}: ${msg}`;
}

/** A registered driver (upstream csi.Driver). */
export interface CsiDriver {
  readonly endpoint: string;
  readonly highestSupportedVersion: GenericVersion;
}

/** What a driver's NodeGetInfo says. */
export interface NodeInfo {
  readonly nodeId: string;
  readonly maxVolumesPerNode: number;
  readonly accessibleTopology: Readonly<Record<string, string>>;
}

/** Asks the driver at `endpoint` for its NodeGetInfo. */
export type NodeInfoGetter = (endpoint: string, timeoutMs: number) => Promise<NodeInfo>;

/** NodeGetInfo over the driver's socket (upstream csiDriverClient.NodeGetInfo). */
export const nodeGetInfo: NodeInfoGetter = async (endpoint, timeoutMs) => {
  const conn = new CriConnection({ endpoint });
  try {
    const res = await conn.unary(criMethods(NodeDefinition).nodeGetInfo, {}, { timeoutMs });
    return {
      nodeId: res.nodeId,
      maxVolumesPerNode: Number(res.maxVolumesPerNode),
      accessibleTopology: res.accessibleTopology?.segments ?? {},
    };
  } finally {
    conn.close();
  }
};

/** The drivers registered on this node, by name (upstream csiDrivers). */
export class CsiDrivers {
  readonly #drivers = new Map<string, CsiDriver>();

  get(name: string): CsiDriver | undefined {
    return this.#drivers.get(name);
  }

  set(name: string, driver: CsiDriver): void {
    this.#drivers.set(name, driver);
  }

  delete(name: string): boolean {
    return this.#drivers.delete(name);
  }

  names(): string[] {
    return [...this.#drivers.keys()].sort();
  }
}

/** Options of {@link CsiRegistrationHandler}. */
export interface CsiRegistrationHandlerOptions {
  readonly drivers: CsiDrivers;
  /** Undefined in standalone mode: drivers are registered but not published. */
  readonly nodeInfo?: Pick<NodeInfoManager, "installCSIDriver" | "uninstallCSIDriver">;
  readonly logger: Logger;
  /** @default {@link nodeGetInfo} */
  readonly nodeGetInfo?: NodeInfoGetter;
}

/** upstream RegistrationHandler: CSI drivers' registration through the plugin manager. */
export class CsiRegistrationHandler {
  readonly #o: CsiRegistrationHandlerOptions;

  constructor(opts: CsiRegistrationHandlerOptions) {
    this.#o = opts;
  }

  /** Whether a driver of `versions` may register under `name`; throws with upstream's message. */
  validatePlugin(name: string, endpoint: string, versions: readonly string[]): void {
    this.#o.logger.info(
      log(
        `Trying to validate a new CSI Driver with name: ${name} endpoint: ${endpoint} versions: ${
          versions.join(",")
        }`,
      ),
    );
    try {
      this.#validateVersions("ValidatePlugin", name, versions);
    } catch (e) {
      throw new Error(
        `validation failed for CSI Driver ${name} at endpoint ${endpoint}: ${errorText(e)}`,
      );
    }
  }

  /**
   * Records the driver, asks it for its node info and publishes that; forgets it again when
   * either fails. `timeoutMs` bounds the NodeGetInfo call (default {@link CSI_TIMEOUT_MS}).
   */
  async registerPlugin(
    name: string,
    endpoint: string,
    versions: readonly string[],
    timeoutMs?: number,
  ): Promise<void> {
    this.#o.logger.info(log(`Register new plugin with name: ${name} at endpoint: ${endpoint}`));
    const highest = this.#validateVersions("RegisterPlugin", name, versions);
    this.#o.drivers.set(name, { endpoint, highestSupportedVersion: highest });
    try {
      const info = await (this.#o.nodeGetInfo ?? nodeGetInfo)(
        endpoint,
        timeoutMs ?? CSI_TIMEOUT_MS,
      );
      await this.#o.nodeInfo?.installCSIDriver(
        name,
        info.nodeId,
        info.maxVolumesPerNode,
        info.accessibleTopology,
      );
    } catch (e) {
      await this.#unregister(
        name,
        "registrationHandler.RegisterPlugin failed to unregister plugin due to previous error",
      );
      throw e;
    }
  }

  /** Forgets the driver and unpublishes it; failures are logged, as upstream's. */
  async deRegisterPlugin(name: string, endpoint: string): Promise<void> {
    this.#o.logger.info(
      log(`registrationHandler.DeRegisterPlugin request for plugin ${name}, endpoint ${endpoint}`),
    );
    await this.#unregister(name, "registrationHandler.DeRegisterPlugin failed");
  }

  /** upstream unregisterDriver: forgets it, and uninstalls it from the Node and CSINode. */
  async #unregister(name: string, failure: string): Promise<void> {
    this.#o.drivers.delete(name);
    try {
      await this.#o.nodeInfo?.uninstallCSIDriver(name);
    } catch (e) {
      this.#o.logger.error(null, log(`${failure}: ${errorText(e)}`));
    }
  }

  #validateVersions(caller: string, name: string, versions: readonly string[]): GenericVersion {
    if (versions.length === 0) {
      throw new Error(
        log(
          `${caller} for CSI driver "${name}" failed. Plugin returned an empty list for supported versions`,
        ),
      );
    }
    let highest: GenericVersion;
    try {
      highest = highestSupportedVersion(versions);
    } catch (e) {
      throw new Error(
        log(
          `${caller} for CSI driver "${name}" failed. None of the versions specified [${
            versions.map((v) => JSON.stringify(v)).join(" ")
          }] are supported. err=${errorText(e)}`,
        ),
      );
    }
    const existing = this.#o.drivers.get(name);
    if (existing && !versionLessThan(existing.highestSupportedVersion, highest)) {
      throw new Error(
        log(
          `${caller} for CSI driver "${name}" failed. Another driver with the same name is already registered with a higher supported version: "${
            formatGenericVersion(existing.highestSupportedVersion)
          }"`,
        ),
      );
    }
    return highest;
  }
}

/** Options of {@link initializeCSINode}. */
export interface InitializeCSINodeOptions {
  readonly nodeInfo: Pick<NodeInfoManager, "initializeCSINodeWithAnnotation">;
  /** The node's storage state (RuntimeState.setStorageState): NotReady while set. */
  readonly setStorageState: (error: string | undefined) => void;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly signal: AbortSignal;
  /** For the backoff's jitter. @default Math.random */
  readonly random?: () => number;
  /**
   * Whether this kubelet has registered its Node, which owns the CSINode: polled every
   * {@link REGISTRATION_POLL_MS} before the first try, as upstream first waits for the
   * apiserver (its registration races the backoff; here a slow registration would push the
   * first good try to the backoff's 15 s step). @default registered already
   */
  readonly nodeRegistered?: () => boolean;
}

/** How often {@link initializeCSINode} looks for the Node's registration. */
export const REGISTRATION_POLL_MS = 100;

/** After upstream's backoff ran out, the next round starts this much later. */
export const INIT_RETRY_AFTER_MS = 60_000;

/**
 * upstream initializeCSINode: the node is NotReady until its CSINode is initialized. Resolves
 * once it is, or when `signal` aborts.
 */
export async function initializeCSINode(o: InitializeCSINodeOptions): Promise<void> {
  o.setStorageState(CSINODE_NOT_INITIALIZED);
  try {
    while (o.nodeRegistered && !o.nodeRegistered()) {
      await o.clock.sleep(REGISTRATION_POLL_MS, o.signal);
    }
  } catch {
    return;
  }
  while (!o.signal.aborted) {
    try {
      await exponentialBackoff(INIT_BACKOFF, async () => {
        o.logger.v(4).info("Initializing migrated drivers on CSINode");
        try {
          await o.nodeInfo.initializeCSINodeWithAnnotation(o.signal);
        } catch (e) {
          o.signal.throwIfAborted();
          o.setStorageState(`failed to initialize CSINode: ${errorText(e)}`);
          o.logger.error(null, `Failed to initialize CSINode: ${errorText(e)}`);
          return false;
        }
        o.setStorageState(undefined);
        return true;
      }, { clock: o.clock, signal: o.signal, ...(o.random ? { random: o.random } : {}) });
      return;
    } catch (e) {
      if (o.signal.aborted) return;
      // Upstream's kubelet exits here for its supervisor to restart it; this one tries again.
      o.logger.error(null, `Failed to initialize CSINode after retrying: ${errorText(e)}`);
      try {
        await o.clock.sleep(INIT_RETRY_AFTER_MS, o.signal);
      } catch {
        return;
      }
    }
  }
}
