/**
 * @module
 * What the DRA drivers said of their devices' health (the ResourceHealthStatus feature): each
 * driver's kubelet plugin streams NodeWatchResources (`v1alpha1.DRAResourceHealth`), every
 * message the driver's whole list; {@link DraHealthCache.update} keeps each device's health,
 * message and timeout, stamped with the kubelet's clock, and says which devices changed, so
 * that the pods using them get a new status. A device not reported again within its timeout
 * (the driver's `health_check_timeout_seconds`, {@link DRA_DEFAULT_HEALTH_TIMEOUT_MS} when it
 * gives none) reads Unknown, and so does every device of a driver whose stream ended
 * ({@link DraHealthCache.clearDriver}). The cache is kept in `<root-dir>/dra_health_state`, as
 * upstream's JSON (a file that cannot be read is logged and the cache starts empty), so that a
 * restarted kubelet reports what it knew until the drivers speak again.
 * {@link watchHealthStream} follows one plugin's stream into the cache and names the pods whose
 * devices changed; when the stream ends the driver is cleared, and (unlike upstream, which waits
 * for the pods' next resync) the pods using its devices are named too, so that their Unknown
 * shows at once.
 * Corresponds to upstream `pkg/kubelet/cm/dra/healthinfo.go`, the DeviceHealth types of
 * `pkg/kubelet/cm/dra/state/state.go` and HandleWatchResourcesStream, buildDeviceHealth and
 * truncateHealthMessage of `pkg/kubelet/cm/dra/manager.go`.
 */

import { join } from "node:path";
import { writeFileAtomic } from "../checkpointmanager/checkpoint_manager.ts";
import {
  type DeviceHealth as ReportedDevice,
  HealthStatus,
} from "../../proto/dra_health/v1alpha1/api.ts";
import type { Clock } from "../util/clock.ts";
import type { Logger } from "../klog/klog.ts";
import { goJsonString } from "../util/go_json.ts";

/** The cache's file under the root directory (upstream's "dra_health_state"). */
export const DRA_HEALTH_STATE_FILE = "dra_health_state";
/** upstream DefaultHealthTimeout: a device not reported for this long reads Unknown. */
export const DRA_DEFAULT_HEALTH_TIMEOUT_MS = 30_000;
/** upstream v1.ResourceHealthMessageMaxLength, in bytes. */
export const RESOURCE_HEALTH_MESSAGE_MAX_LENGTH = 1024;

/** A device's health as the API spells it (upstream state.DeviceHealthStatus). */
export type DeviceHealthStatus = "Healthy" | "Unhealthy" | "Unknown";

/** One device's health as the cache keeps it (upstream state.DeviceHealth). */
export interface DeviceHealth {
  readonly poolName: string;
  readonly deviceName: string;
  readonly health: DeviceHealthStatus;
  /** When the kubelet last got the device's health, in ms since the epoch; 0 for never. */
  readonly lastUpdated: number;
  /** 0 for {@link DRA_DEFAULT_HEALTH_TIMEOUT_MS}. */
  readonly healthCheckTimeoutMs: number;
  readonly message: string;
}

/** A device as a driver reports it: the cache stamps the time. */
export type ReportedDeviceHealth = Omit<DeviceHealth, "lastUpdated">;

/** Options of {@link DraHealthCache.load}. */
export interface DraHealthCacheOptions {
  readonly clock: Clock;
  readonly logger: Logger;
  /** Where `dra_health_state` is kept (the root directory). @default none: in memory only */
  readonly stateDirectory?: string;
}

/**
 * upstream truncateHealthMessage: a message over {@link RESOURCE_HEALTH_MESSAGE_MAX_LENGTH}
 * bytes keeps its first 1021 bytes (never half a character) and ends with "...".
 */
export function truncateHealthMessage(message: string): string {
  const bytes = new TextEncoder().encode(message);
  if (bytes.length <= RESOURCE_HEALTH_MESSAGE_MAX_LENGTH) return message;
  let end = RESOURCE_HEALTH_MESSAGE_MAX_LENGTH - 3;
  // Back to the start of a UTF-8 sequence (continuation bytes are 10xxxxxx).
  while (end > 0 && (bytes[end]! & 0xc0) === 0x80) end--;
  return new TextDecoder().decode(bytes.subarray(0, end)) + "...";
}

/** upstream buildDeviceHealth: a device of a driver's report, as the cache takes it. */
export function reportedDeviceHealth(d: ReportedDevice, logger: Logger): ReportedDeviceHealth {
  const seconds = Number(d.healthCheckTimeoutSeconds);
  if (seconds < 0) {
    logger.v(4).info("Ignoring negative health check timeout, using default", {
      poolName: d.device?.poolName ?? "",
      deviceName: d.device?.deviceName ?? "",
      providedTimeout: seconds,
      defaultTimeout: `${DRA_DEFAULT_HEALTH_TIMEOUT_MS / 1000}s`,
    });
  }
  return {
    poolName: d.device?.poolName ?? "",
    deviceName: d.device?.deviceName ?? "",
    health: d.health === HealthStatus.HEALTHY
      ? "Healthy"
      : d.health === HealthStatus.UNHEALTHY
      ? "Unhealthy"
      : "Unknown",
    healthCheckTimeoutMs: seconds > 0 ? seconds * 1000 : 0,
    message: truncateHealthMessage(d.message),
  };
}

/** What {@link watchHealthStream} needs. */
export interface WatchHealthStreamOptions {
  readonly driverName: string;
  /** The plugin's NodeWatchResources stream (DraPlugin.nodeWatchResources). */
  readonly stream: AsyncIterable<{ devices: ReportedDevice[] }>;
  readonly cache: DraHealthCache;
  /** The pods whose prepared claims hold any of the driver's devices named. */
  readonly podsUsing: (
    driverName: string,
    devices: readonly Pick<DeviceHealth, "poolName" | "deviceName">[],
  ) => string[];
  /** Pods whose devices' health changed, for a new status (the container manager's channel). */
  readonly onChange: (podUIDs: string[]) => void;
  readonly logger: Logger;
  /** Aborted when the plugin goes or the kubelet stops. */
  readonly signal: AbortSignal;
}

/**
 * upstream HandleWatchResourcesStream: each report into the cache and its changes to
 * `onChange`; once the stream ends (or fails, logged), the driver is cleared from the cache and
 * the pods using its devices are named.
 */
export async function watchHealthStream(o: WatchHealthStreamOptions): Promise<void> {
  const log = o.logger.with({ pluginName: o.driverName });
  try {
    for await (const res of o.stream) {
      const devices = res.devices.map((d) => reportedDeviceHealth(d, log));
      const changed = o.cache.update(o.driverName, devices);
      if (changed.length === 0) continue;
      log.v(4).info("Health info changed, checking affected pods", {
        changedDevicesCount: changed.length,
      });
      const pods = o.podsUsing(o.driverName, changed);
      if (pods.length === 0) {
        log.v(4).info("Health info changed, but no active pods found using the affected devices");
        continue;
      }
      log.info("Sending health update notification for pods", { pods });
      o.onChange(pods);
    }
    if (o.signal.aborted) {
      log.v(4).info("Stopping health monitoring due to context cancellation");
    } else log.v(4).info("Stream ended with EOF");
  } catch (e) {
    if (o.signal.aborted) {
      log.v(4).info("Stopping health monitoring due to context cancellation", { reason: e });
    } else log.error(e, "Error receiving from WatchResources stream");
  } finally {
    log.v(4).info("Clearing health cache for driver upon stream exit");
    const known = o.cache.devices(o.driverName);
    await o.cache.clearDriver(o.driverName);
    const pods = known.length > 0 ? o.podsUsing(o.driverName, known) : [];
    if (pods.length > 0) o.onChange(pods);
  }
}

/** The devices' health by driver (upstream healthInfoCache); see the module documentation. */
export class DraHealthCache {
  readonly #o: DraHealthCacheOptions;
  /** Driver → `<pool>/<device>` → health. */
  readonly #drivers = new Map<string, Map<string, DeviceHealth>>();
  #writing: Promise<void> = Promise.resolve();

  private constructor(opts: DraHealthCacheOptions) {
    this.#o = opts;
  }

  /** The cache as its file left it; a file that cannot be read is logged (upstream). */
  static async load(opts: DraHealthCacheOptions): Promise<DraHealthCache> {
    const cache = new DraHealthCache(opts);
    if (opts.stateDirectory === undefined) return cache;
    try {
      const text = await Deno.readTextFile(join(opts.stateDirectory, DRA_HEALTH_STATE_FILE));
      cache.#decode(text);
    } catch (e) {
      if (!(e instanceof Deno.errors.NotFound)) {
        cache.#drivers.clear();
        opts.logger.error(e, "Failed to load health checkpoint, proceeding with empty cache");
      }
    }
    return cache;
  }

  /**
   * upstream getHealthInfo: the device's health, Unknown (without a message) when the driver
   * never reported it or has not within its timeout.
   */
  get(driverName: string, poolName: string, deviceName: string): DeviceHealth {
    const unknown: DeviceHealth = {
      poolName,
      deviceName,
      health: "Unknown",
      lastUpdated: 0,
      healthCheckTimeoutMs: 0,
      message: "",
    };
    const d = this.#drivers.get(driverName)?.get(`${poolName}/${deviceName}`);
    if (!d) return unknown;
    if (this.#o.clock.now() - d.lastUpdated > timeoutOf(d)) return unknown;
    return d;
  }

  /**
   * upstream updateHealthInfo: takes a driver's whole list, stamped now; returns the devices
   * whose health, message or timeout changed, and those the list left out whose last report
   * timed out (now Unknown). Writes the file when anything changed.
   */
  update(driverName: string, devices: readonly ReportedDeviceHealth[]): DeviceHealth[] {
    const now = this.#o.clock.now();
    let current = this.#drivers.get(driverName);
    if (!current) this.#drivers.set(driverName, current = new Map());
    const changed: DeviceHealth[] = [];
    const reported = new Set<string>();
    for (const r of devices) {
      const d: DeviceHealth = { ...r, lastUpdated: now };
      const key = `${d.poolName}/${d.deviceName}`;
      reported.add(key);
      const old = current.get(key);
      if (
        !old || old.health !== d.health || old.message !== d.message ||
        old.healthCheckTimeoutMs !== d.healthCheckTimeoutMs
      ) {
        changed.push(d);
      }
      current.set(key, d);
    }
    for (const [key, d] of current) {
      if (reported.has(key) || d.health === "Unknown" || now - d.lastUpdated <= timeoutOf(d)) {
        continue;
      }
      const stale: DeviceHealth = { ...d, health: "Unknown", message: "", lastUpdated: now };
      current.set(key, stale);
      changed.push(stale);
    }
    if (changed.length > 0) {
      void this.#save(
        "Failed to save health checkpoint after update. Kubelet restart may lose the device health information.",
      );
    }
    return changed;
  }

  /** The devices the cache has of the driver, whatever their health. */
  devices(driverName: string): DeviceHealth[] {
    return [...(this.#drivers.get(driverName)?.values() ?? [])];
  }

  /** upstream clearDriver: forgets the driver's devices (they read Unknown) and writes the file. */
  clearDriver(driverName: string): Promise<void> {
    this.#drivers.delete(driverName);
    return this.#save("Failed to clear health info cache for driver");
  }

  /** Resolves once the writes started so far are done. */
  flush(): Promise<void> {
    return this.#writing;
  }

  /** The file's content: upstream's json.Marshal of its DevicesHealthMap, keys sorted. */
  encode(): string {
    const drivers = sorted(this.#drivers).map(([driver, devices]) => {
      const items = sorted(devices).map(([key, d]) =>
        `${goJsonString(key)}:{"PoolName":${goJsonString(d.poolName)},"DeviceName":${
          goJsonString(d.deviceName)
        },"Health":${goJsonString(d.health)},"LastUpdated":${
          goJsonString(goTime(d.lastUpdated))
        },"HealthCheckTimeout":${d.healthCheckTimeoutMs * 1e6},"Message":${
          goJsonString(d.message)
        }}`
      );
      return `${goJsonString(driver)}:{"Devices":{${items.join(",")}}}`;
    });
    return `{${drivers.join(",")}}`;
  }

  #decode(text: string): void {
    const data = JSON.parse(text) as Record<string, { Devices?: Record<string, GoDeviceHealth> }>;
    for (const [driver, state] of Object.entries(data ?? {})) {
      const devices = new Map<string, DeviceHealth>();
      for (const [key, d] of Object.entries(state?.Devices ?? {})) {
        devices.set(key, {
          poolName: String(d.PoolName ?? ""),
          deviceName: String(d.DeviceName ?? ""),
          health: d.Health === "Healthy" || d.Health === "Unhealthy" ? d.Health : "Unknown",
          lastUpdated: parseGoTime(d.LastUpdated),
          healthCheckTimeoutMs: Math.trunc(Number(d.HealthCheckTimeout ?? 0) / 1e6),
          message: String(d.Message ?? ""),
        });
      }
      this.#drivers.set(driver, devices);
    }
  }

  #save(failure: string): Promise<void> {
    const dir = this.#o.stateDirectory;
    if (dir === undefined) return this.#writing;
    const text = this.encode();
    this.#writing = this.#writing.then(async () => {
      try {
        await writeFileAtomic(join(dir, DRA_HEALTH_STATE_FILE), text);
      } catch (e) {
        this.#o.logger.error(e, failure);
      }
    });
    return this.#writing;
  }
}

interface GoDeviceHealth {
  PoolName?: string;
  DeviceName?: string;
  Health?: string;
  LastUpdated?: string;
  HealthCheckTimeout?: number;
  Message?: string;
}

function timeoutOf(d: DeviceHealth): number {
  return d.healthCheckTimeoutMs > 0 ? d.healthCheckTimeoutMs : DRA_DEFAULT_HEALTH_TIMEOUT_MS;
}

function sorted<T>(m: Map<string, T>): [string, T][] {
  return [...m].sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0);
}

/** Go's time.Time JSON (RFC 3339, UTC here); Go's zero time for 0. */
function goTime(ms: number): string {
  return ms === 0 ? "0001-01-01T00:00:00Z" : new Date(ms).toISOString().replace(".000Z", "Z");
}

/** A time as Go writes it (RFC 3339 with up to nanoseconds), in ms; 0 when unreadable. */
function parseGoTime(s: string | undefined): number {
  const m = /^(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$/.exec(s ?? "");
  if (!m) return 0;
  const ms = Date.parse(`${m[1]}.${(m[2] ?? "").padEnd(3, "0").slice(0, 3)}${m[3]}`);
  return Number.isNaN(ms) || ms < 0 ? 0 : ms;
}
